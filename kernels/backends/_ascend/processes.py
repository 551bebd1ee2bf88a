"""The Ascend backend's processes: CANN's tools and the host runner run in a process group of
their own (killed whole on a timeout), and what their output says (the compiler's errors, the
runner's JSON answer and the meaning of its aclError)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: aclError codes (CANN acl/error_codes/rt_error_codes.h) and what they usually mean here.
ACL_ERRORS: dict[int, str] = {
    100000: "ACL_ERROR_INVALID_PARAM: an ACL call got an invalid parameter",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID: no such device (check --device)",
    107022: "ACL_ERROR_RT_DEVICE_TASK_ABORT: task aborted, usually after an earlier fault",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION: device out of memory",
    507000: "ACL_ERROR_RT_INTERNAL_ERROR: runtime internal error",
    507008: "ACL_ERROR_RT_SOC_VERSION: the kernel was built for another SoC",
    507014: "ACL_ERROR_RT_AICORE_TIMEOUT: the kernel hung (AI Core timeout)",
    507015: "ACL_ERROR_RT_AICORE_EXCEPTION: AI Core exception, e.g. the UB address out of bounds "
    "(a tiling whose buffers overflow UB)",
    507018: "ACL_ERROR_RT_AICPU_EXCEPTION: AI CPU exception",
    507046: "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: stream synchronisation timed out",
    507899: "ACL_ERROR_RT_DRV_INTERNAL_ERROR: driver internal error (often a device poisoned by an "
    "earlier fault)",
}

_BUILD_ERROR_LINES = 20


def describe_runner_error(answer: Mapping[str, Any]) -> str:
    """The runner's error, with the meaning of its aclError when known."""
    message = str(answer.get("error") or "host runner failed")
    code = answer.get("acl_error")
    if isinstance(code, int) and code in ACL_ERRORS:
        message += f" [{ACL_ERRORS[code]}]"
    return message


def parse_runner_output(stdout: str) -> dict[str, Any] | None:
    """The runner's answer: the last stdout line that is a JSON object with ``ok``."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if isinstance(answer, dict) and "ok" in answer:
                return answer
    return None


def compiler_errors(output: str) -> str:
    """The lines of a CMake/compiler log worth reporting: errors first, else the tail."""
    lines = output.splitlines()
    errors = [line for line in lines if "error" in line.lower() or "undefined reference" in line]
    picked = errors[:_BUILD_ERROR_LINES] or lines[-_BUILD_ERROR_LINES:]
    return "\n".join(picked)


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class _Completed:
    returncode: int
    stdout: str
    stderr: str


class _TimedOut(Exception):
    pass


def _execute(
    argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> _Completed:
    """Run ``argv`` in its own process group; on timeout the whole group is killed."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise _TimedOut(f"{Path(argv[0]).name} did not finish in {timeout:.0f} s") from None
    return _Completed(proc.returncode, stdout, stderr)
