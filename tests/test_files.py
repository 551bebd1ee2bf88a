"""tilewise.files.write_atomically: whole files, links followed, pipes written in place."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tilewise.files import write_atomically


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_a_new_file_gets_the_umasks_mode_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    umask = os.umask(0o027)
    try:
        fresh = write_atomically(tmp_path / "new.h", "one\n")
    finally:
        os.umask(umask)
    assert fresh.read_text() == "one\n"
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o640
    old = tmp_path / "old.json"
    old.write_text("old")
    old.chmod(0o600)
    write_atomically(old, "new")
    assert old.read_text() == "new" and stat.S_IMODE(old.stat().st_mode) == 0o600
    assert leftovers(tmp_path) == []


def test_a_link_is_followed_and_kept(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "table.json"
    real.write_text("")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert write_atomically(link, "{}") == real
    assert link.is_symlink() and real.read_text() == "{}"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "later.json")
    write_atomically(dangling, "[]")
    assert dangling.is_symlink() and (tmp_path / "real" / "later.json").read_text() == "[]"
    assert leftovers(tmp_path) == leftovers(tmp_path / "real") == []


def test_a_pipe_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_atomically(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "t.h"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(path, "half \udcff")  # a lone surrogate: no UTF-8 for it
    assert path.read_text() == "old" and leftovers(tmp_path) == []


def test_dev_stdout_into_a_pipe_is_written_to_the_pipe() -> None:
    """/dev/stdout is a link to a pipe that no path names: opened by its own name."""
    code = "from tilewise.files import write_atomically; write_atomically('/dev/stdout', 'piped')"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (0, "piped"), done.stderr
