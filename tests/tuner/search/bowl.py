"""A small recorded space for the search tests: 12 x 12 x 3 configurations of a smooth bowl,
its optimum at a = 7, b = 3, c = 1."""

from __future__ import annotations

import itertools
from pathlib import Path

from tilewise.search import ReplaySpace


def bowl_space(path: Path) -> ReplaySpace:
    """The bowl written as a recorded space at ``path``."""
    lines = ["a,b,c,time_ms"]
    for a, b, c in itertools.product(range(1, 13), range(1, 13), (1, 2, 4)):
        lines.append(f"{a},{b},{c},{1.0 + (a - 7) ** 2 + 0.5 * (b - 3) ** 2 + 0.1 * c}")
    path.write_text("\n".join(lines) + "\n")
    return ReplaySpace(path)
