"""Client of the twin runner: a long-lived process that launches built variants.

Kernels run in that process, not in ours, so a segfault or a hang costs one trial: the caller
gets :class:`RunnerCrashed` or :class:`RunnerTimeout`, and the next request starts a new runner.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


class RunnerCrashed(Exception):
    """The runner process died while serving a request."""


class RunnerTimeout(Exception):
    """The runner did not answer in time; it has been killed."""


class RunnerProcess:
    def __init__(self, binary: Path, *, threads: int) -> None:
        self._binary = binary
        self._threads = threads
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._buffer = b""

    def _start(self) -> subprocess.Popen[bytes]:
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
        self._proc = subprocess.Popen(
            [str(self._binary), "--threads", str(self._threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,
            # Its own process group: a terminal's Ctrl-C reaches the tuner alone, which finishes
            # the launch in flight; the runner ends at its stdin's end when the tuner does.
            process_group=0,
        )
        self._buffer = b""
        return self._proc

    def request(self, line: str, *, timeout: float) -> dict[str, Any]:
        """Send one request line; return the runner's JSON answer."""
        proc = self._proc if self._proc and self._proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(line.encode() + b"\n")
        except BrokenPipeError:
            raise RunnerCrashed(self._death_note()) from None
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RunnerTimeout(f"no answer within {timeout:.1f} s; runner killed")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise RunnerCrashed(self._death_note())
                self._buffer += chunk
        answer, _, self._buffer = self._buffer.partition(b"\n")
        result: dict[str, Any] = json.loads(answer)
        return result

    def _death_note(self) -> str:
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        self.kill()
        reason = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            tail = self._stderr.read()[-400:].decode(errors="replace").strip()
        return f"runner died ({reason})" + (f": {tail}" if tail else "")

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(b"quit\n")
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
