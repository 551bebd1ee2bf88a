"""The one test that says a set of times is faster than another beyond the noise.

A tune's final re-measure (does its winner beat the default?) and an export that measures grid
cells (does a carried tiling beat the shape's default?) ask the same question of samples taken
side by side on a shared machine, so they answer it alike.
"""

from __future__ import annotations

from collections.abc import Sequence

#: One-sided Mann-Whitney level at which one set of times counts as smaller than another.
FASTER_P = 0.05


def faster(candidate: Sequence[float], reference: Sequence[float], p: float = FASTER_P) -> bool:
    """Whether ``candidate``'s times are smaller than ``reference``'s beyond noise: a one-sided
    Mann-Whitney test at level ``p``. With 9 samples each, times that all lie below the
    reference's pass easily (p = 2e-5); two overlapping sets do not. False when either set is
    empty."""
    if not candidate or not reference:
        return False
    from scipy.stats import mannwhitneyu  # scikit-learn's dependency; slow to import

    return bool(mannwhitneyu(candidate, reference, alternative="less").pvalue < p)
