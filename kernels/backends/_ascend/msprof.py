"""``msprof op``: the command lines, and the ``OpBasicInfo.csv`` files it writes.

``msprof op --kernel-name=K --launch-count=N --output=DIR app args...`` profiles the first N
launches of kernel K and writes ``DIR/OPPROF_*/.../OpBasicInfo.csv``, one row per launch::

    Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,Device Id,Pid,Current Freq,Rated Freq

Task Duration is the kernel time on the device. A Current Freq below the Rated Freq means the
chip was throttled while it ran, so the sample is slower than the tiling deserves.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: msprof op accepts 1..100 for --launch-count.
MAX_LAUNCH_COUNT = 100

DURATION = "Task Duration(us)"
CURRENT_FREQ = "Current Freq"
RATED_FREQ = "Rated Freq"


class MsprofParseError(ValueError):
    """An OpBasicInfo.csv without the columns tilewise reads, or no such file at all."""


@dataclass(frozen=True)
class OpBasicRow:
    op_name: str
    op_type: str
    duration_us: float
    block_dim: int | None
    mix_block_dim: int | None
    device_id: int | None
    current_freq: float | None  # MHz
    rated_freq: float | None

    @property
    def throttled(self) -> bool:
        return (
            self.current_freq is not None
            and self.rated_freq is not None
            and self.current_freq < self.rated_freq
        )


@dataclass(frozen=True)
class MsprofReport:
    rows: tuple[OpBasicRow, ...]

    @property
    def samples_us(self) -> tuple[float, ...]:
        return tuple(row.duration_us for row in self.rows)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    @property
    def throttled(self) -> bool:
        return any(row.throttled for row in self.rows)

    def throttle_note(self) -> str | None:
        slow = [row for row in self.rows if row.throttled]
        if not slow:
            return None
        worst = min(slow, key=lambda row: row.current_freq or 0.0)
        return (
            f"throttled: {len(slow)} of {len(self.rows)} launches below the rated clock "
            f"(lowest {worst.current_freq:g} MHz, rated {worst.rated_freq:g} MHz)"
        )


def _number(text: str | None) -> float | None:
    if text is None or not text.strip() or text.strip().upper() in {"N/A", "NA", "-"}:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


def _integer(text: str | None) -> int | None:
    value = _number(text)
    return None if value is None else int(value)


def parse_op_basic_info(text: str) -> list[OpBasicRow]:
    """The rows of one OpBasicInfo.csv."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    fields = [name.strip() for name in reader.fieldnames or []]
    if DURATION not in fields:
        raise MsprofParseError(f"no {DURATION!r} column in OpBasicInfo.csv (columns: {fields})")
    rows = []
    for raw in reader:
        record = {(k or "").strip(): (v or "") for k, v in raw.items()}
        duration = _number(record.get(DURATION))
        if duration is None:
            continue
        rows.append(
            OpBasicRow(
                op_name=record.get("Op Name", "").strip(),
                op_type=record.get("Op Type", "").strip(),
                duration_us=duration,
                block_dim=_integer(record.get("Block Dim")),
                mix_block_dim=_integer(record.get("Mix Block Dim")),
                device_id=_integer(record.get("Device Id")),
                current_freq=_number(record.get(CURRENT_FREQ)),
                rated_freq=_number(record.get(RATED_FREQ)),
            )
        )
    return rows


def collect(output: Path, kernel_name: str) -> MsprofReport:
    """Every launch of ``kernel_name`` profiled under ``output`` (all OPPROF_* dirs)."""
    files = sorted(output.glob("OPPROF_*/**/OpBasicInfo.csv"))
    if not files:
        raise MsprofParseError(f"msprof wrote no OPPROF_*/OpBasicInfo.csv under {output}")
    rows = [row for path in files for row in parse_op_basic_info(path.read_text(errors="replace"))]
    # Op Name is the entry, sometimes with a core-type suffix (..._mix_aiv); keep ours if named.
    mine = [row for row in rows if row.op_name.startswith(kernel_name)]
    rows = mine or rows
    if not rows:
        raise MsprofParseError(f"no launch with a Task Duration in {', '.join(map(str, files))}")
    return MsprofReport(tuple(rows))


def op_command(
    msprof: Path | str,
    *,
    kernel_name: str,
    launch_count: int,
    output: Path,
    app: Sequence[str],
) -> list[str]:
    """``msprof op`` profiling ``launch_count`` launches of ``kernel_name`` on the NPU."""
    count = max(1, min(MAX_LAUNCH_COUNT, launch_count))
    return [
        str(msprof),
        "op",
        f"--kernel-name={kernel_name}",
        f"--launch-count={count}",
        f"--output={output}",
        *app,
    ]


def simulator_command(
    msprof: Path | str,
    *,
    soc: str,
    kernel_name: str,
    output: Path,
    app: Sequence[str],
) -> list[str]:
    """``msprof op simulator``: the same launch on CANN's cycle simulator (no NPU, slow)."""
    return [
        str(msprof),
        "op",
        "simulator",
        f"--soc-version={soc}",
        f"--kernel-name={kernel_name}",
        f"--output={output}",
        *app,
    ]
