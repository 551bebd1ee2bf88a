"""Run the reliability suite and print the figures its tests measured, for the README.

    .venv/bin/python bench/reliability_report.py [--json] [-- PYTEST_ARGS ...]

Runs ``pytest -m reliability`` with ``TILEWISE_RELIABILITY_REPORT`` pointing at a scratch file;
each test appends what it measured there (``tests/reliability/_report.py``): faults injected and
survived, requests tried, status codes seen, latencies held. Prints one line per case with the
machine, the date and pytest's verdict. The exit code is pytest's: a figure from a failed run is
printed, and marked as such, but the run still fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tune_e2e import cpu_model

ROOT = Path(__file__).resolve().parent.parent


def run_suite(pytest_args: list[str]) -> tuple[int, list[dict[str, Any]]]:
    """pytest's exit code and the recorded lines, in the order the tests wrote them."""
    with tempfile.TemporaryDirectory(prefix="tw-reliability-") as scratch:
        report = Path(scratch) / "figures.jsonl"
        env = dict(os.environ, TILEWISE_RELIABILITY_REPORT=str(report))
        cmd = [sys.executable, "-m", "pytest", "-m", "reliability", "-q", *pytest_args]
        code = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
        lines = report.read_text(encoding="utf-8").splitlines() if report.exists() else []
    return code, [json.loads(line) for line in lines]


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after --")
    args = parser.parse_args()

    started = datetime.datetime.now(datetime.UTC)
    code, cases = run_suite(args.pytest_args)
    seconds = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    summary = {
        "date": started.date().isoformat(),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "pytest_exit_code": code,
        "seconds": round(seconds),
        "cases": cases,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        verdict = "all passed" if code == 0 else f"FAILED (pytest exit code {code})"
        print(f"\n{summary['date']} · {summary['machine']} · {seconds:.0f} s · {verdict}")
        for case in cases:
            name = case.pop("case")
            figures = ", ".join(f"{k} {_value(v)}" for k, v in case.items())
            print(f"- {name}: {figures}")
    return code


if __name__ == "__main__":
    sys.exit(main())
