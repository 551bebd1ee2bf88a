"""Tuning manifests: the ops, dtypes, targets and shapes an application runs, in one file.

A build system lists what its application runs and hands the file to ``tilewise tune-set``
(tuned here) or ``tilewise submit`` (tuned by a service, as one batch)::

    name: llama-7b-mlp          # optional, shown with the batch
    target: cpu-twin            # default for every workload (default: cpu-twin)
    dtype: float32              # default for every workload (default: float32)
    budget: 40                  # evaluations per workload, or
    # total_budget: 400         # evaluations for the whole manifest, spread by weight
    workloads:
      - op: linear_add_gelu
        dtype: [float32, float16]   # one dtype or several
        shapes:
          - {M: 1, N: 4096, K: 4096, weight: 10}   # weight: how often the application runs it
          - M=128,N=4096,K=4096                    # the command line's form; weight 1

YAML or JSON (a ``.json`` file is read as JSON, anything else as YAML). A shape is a mapping of
every dim of the op plus an optional ``weight`` (a positive number, default 1), or the
``M=1,N=4096,K=4096`` text of the command line. The same workload listed twice is tuned once,
with the sum of the weights.

**Budgets.** ``budget`` gives every workload that many measured evaluations; without it and
without ``total_budget`` the tuner's default applies (settings.default_budget). ``total_budget``
is spread over the workloads that are tuned (already tuned ones are skipped and get none) by
:func:`spread_budget`: each first gets a floor of ``min(5, total // n)`` evaluations (the
default tiling and the nearest tuned shapes' best four, which the tuner measures before its
own proposals), and the rest goes out in proportion to the weights, rounded by largest
remainder so that the budgets add up to the total exactly. So a workload run ten times as often
gets about ten times the search, and none is left with nothing: the way TVM's task scheduler
spends a tuning budget over weighted tasks, decided up front instead of round by round.

Every error names its place: ``workloads[0].shapes[1]: linear_add_gelu: missing dim K``
(:class:`ManifestError`, an :class:`~tilewise.errors.InputError` whose ``loc`` the service turns
into the 422's ``loc``).
"""

from tilewise.manifest._budget import BUDGET_FLOOR, assign_budgets, spread_budget
from tilewise.manifest._model import (
    Manifest,
    ManifestEntry,
    ManifestError,
    ShapeItem,
    WorkloadGroup,
    manifest_of,
    where,
)
from tilewise.manifest._read import load_manifest, parse_manifest, parse_text

__all__ = [
    "BUDGET_FLOOR",
    "Manifest",
    "ManifestEntry",
    "ManifestError",
    "ShapeItem",
    "WorkloadGroup",
    "assign_budgets",
    "load_manifest",
    "manifest_of",
    "parse_manifest",
    "parse_text",
    "spread_budget",
    "where",
]
