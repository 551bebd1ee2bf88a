"""Figures the reliability tests produce, for the README's "Reliability" section.

A test calls ``record("worker SIGKILL", faults=1, survived=1, ...)`` with whatever it measured.
When ``TILEWISE_RELIABILITY_REPORT`` names a file, each call appends one JSON line to it;
otherwise the call does nothing, so the tests behave the same with or without a report.
``bench/reliability_report.py`` runs ``pytest -m reliability`` with the variable set and turns
the lines into a table.
"""

from __future__ import annotations

import json
import os
from typing import Any


def record(case: str, **figures: Any) -> None:
    path = os.environ.get("TILEWISE_RELIABILITY_REPORT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"case": case, **figures}, sort_keys=True) + "\n")
