"""Writing a file that readers can rely on: the old text or the new, never a part."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomically(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` through a temporary file beside it
    and a rename, so that a reader sees the old file or the new one. Returns the file written.

    A symbolic link is followed: its target is replaced and the link kept. A file replaced keeps
    its permissions; a new one gets those the umask allows. A path that exists and is no regular
    file (a FIFO, ``/dev/stdout``) is written in place, as a shell redirection would: a rename
    would put a regular file where the pipe or device was.
    """
    try:
        mode: int | None = os.stat(path).st_mode  # through any links
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # Opened by its own name: /dev/stdout is a link to a pipe no path names.
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        return Path(path)
    target = Path(os.path.realpath(path))
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temp, stat.S_IMODE(mode))  # mkstemp makes it 0600
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
