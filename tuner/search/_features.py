"""What the default strategy computes from configurations alone: the forest's features (the
tunables' values plus generic tile-size features), the GP's (one column per field in [0, 1])
and TPE's density ratio; see ``tilewise.search._surrogate``. Nothing in them is specific to
one kernel or recorded space."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import CategoricalDistribution

Config = tuple[Any, ...]


def forest_features(
    names: Sequence[str],
    dists: Mapping[str, CategoricalDistribution],
    configs: Sequence[Config],
    *,
    pairs: bool = True,
    align: bool = True,
) -> np.ndarray:
    """The forest's features of ``configs`` (see the module docstring)."""
    columns: list[np.ndarray] = []
    sizes: list[int] = []  # of the positive numeric fields with more than two values
    for i, n in enumerate(names):
        choices = dists[n].choices
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in choices)
        index = {v: k for k, v in enumerate(choices)}
        values = [c[i] for c in configs]
        columns.append(np.array(values if numeric else [index[v] for v in values], dtype=float))
        positive = all(isinstance(v, int | float) and v > 0 for v in choices)
        if pairs and numeric and positive and len(choices) > 2:
            sizes.append(len(columns) - 1)
        if align and numeric and len(choices) > 2 and not _all_powers_of_two(choices):
            # Alignment (the largest power of two dividing a size) decides vector widths,
            # coalescing and bank conflicts; from the raw value it takes many splits.
            # Per distinct value, not per configuration: a listed pool repeats each value
            # thousands of times.
            known = {v: _alignment(v) for v in set(values)}
            columns.append(np.array([known[v] for v in values], dtype=float))
    if pairs:
        # Tile sizes act through their products and ratios (threads per block, elements
        # per thread ...), which axis-aligned splits on single fields approximate badly.
        logs = {k: np.log2(columns[k]) for k in sizes}
        for a, b in itertools.combinations(sizes, 2):
            columns += [logs[a] + logs[b], logs[a] - logs[b]]
    return np.stack(columns, axis=1)


def unit_features(
    names: Sequence[str], dists: Mapping[str, CategoricalDistribution], configs: Sequence[Config]
) -> np.ndarray:
    """The GP's features: one column per field in [0, 1]; sizes (positive numbers with
    more than two values) on a log scale, other numbers linearly; a field whose choices
    are not numbers one 0/1 column per choice (their order means nothing)."""
    columns: list[np.ndarray] = []
    for i, n in enumerate(names):
        choices = dists[n].choices
        numbers = [float(v) for v in choices if isinstance(v, int | float)]
        if len(numbers) < len(choices) or any(isinstance(v, bool) for v in choices):
            for choice in choices:
                columns.append(np.array([float(c[i] == choice) for c in configs]))
            continue
        values = np.array([c[i] for c in configs], dtype=float)
        lo, hi = min(numbers), max(numbers)
        if lo > 0 and len(numbers) > 2:
            values, lo, hi = np.log2(values), math.log2(lo), math.log2(hi)
        columns.append((values - lo) / (hi - lo) if hi > lo else np.zeros(len(configs)))
    return np.stack(columns, axis=1)


def parzen_scores(
    names: Sequence[str],
    dists: Mapping[str, CategoricalDistribution],
    candidates: Sequence[Config],
    observed: Sequence[tuple[Config, float]],
    good_fraction: float,
) -> np.ndarray:
    """TPE's ratio l(x) / g(x) with independent categorical fields, in logs.

    The best ``good_fraction`` of the evaluated configurations (at least one) are "good", the
    rest "bad"; per field, each value's frequency in either group with add-one smoothing. It
    needs no model of how fields combine, so it keeps finding values the forest has not learnt
    to value yet.
    """
    ranked = sorted(observed, key=lambda o: o[1] if math.isfinite(o[1]) else math.inf)
    n_good = max(1, int(good_fraction * len(ranked)))
    good, bad = ranked[:n_good], ranked[n_good:]
    score = np.zeros(len(candidates))
    for i, n in enumerate(names):
        k = len(dists[n].choices)
        count_good = Counter(c[i] for c, _ in good)
        count_bad = Counter(c[i] for c, _ in bad)
        values = [c[i] for c in candidates]
        score += np.log([(count_good.get(v, 0) + 1) / (len(good) + k) for v in values])
        score -= np.log([(count_bad.get(v, 0) + 1) / (len(bad) + k) for v in values])
    return score


def _alignment(value: float) -> float:
    """log2 of the largest power of two (up to 2**10) dividing an integer value; 0 otherwise."""
    if value != int(value) or value == 0:
        return 0.0
    v, k = int(value), 0
    while v % 2 == 0 and k < 10:
        v //= 2
        k += 1
    return float(k)


def _all_powers_of_two(choices: Sequence[Any]) -> bool:
    return all(float(c).is_integer() and c > 0 and (int(c) & (int(c) - 1)) == 0 for c in choices)
