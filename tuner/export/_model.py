"""A latency model of one op, fitted on every measured record of it, for choosing a tiling at
shapes nobody tuned (:mod:`tilewise.export._choice`).

Features of a (shape, tiling) come from the op's own cost-model code
(:meth:`~tilewise.kernels.ops.OpSpec.block_work` and :func:`tilewise.kernels.backends.predict`),
each as a log2: waves of blocks over the device's parallel units; over those waves, the busiest
unit's bytes moved to and from global memory, its cube multiply-accumulates, its vector bytes,
vector instructions and pipeline stages; the blocks launched; and the Ascend cost model's
predicted time. The parallel units are where the records' blocks ran: an NPU's cores, or on
the cpu-twin the host threads its runner spread the blocks over (each record's ``threads``) —
the twin keeps an NPU's on-chip sizes, not its 20-odd cores, and waves counted over the NPU's
cores describe a twin launch so poorly that no model fitted on them predicts a gain. Three kinds
of model, each linear in log latency with one intercept per (target, dtype):

* ``loglinear``: a least-squares fit on every feature, given enough records (at least
  :data:`MIN_RECORDS_PER_FEATURE` per coefficient, on :data:`MIN_SHAPES` shapes or more);
* ``within``: the same fit on each shape's records less that shape's means (features and log
  latency; given as many records): the coefficients explain how the tilings of one shape
  differ, which is all a choice compares, and not how fast one shape runs against another. A
  shape whose every record is slower than the features say (measured while the host was busy,
  or slow for a reason no feature names) bends a ``loglinear`` fit and not this one;
* ``cost``: the cost model's prediction scaled by the intercept (its coefficient is 1).

Each is cross-validated on held-out shapes (every fold holds out whole shapes). Where the
tuner's final re-measures (its best tilings and the default, side by side in interleaved rounds)
cover :data:`MIN_SHAPES` shapes or more, they are what the model is judged on: the tilings a
choice is about (a search's winners against the default), measured without the drift of a
busy host between a search's first and last record. A search's records over-state its winners'
gains (the fastest of many noisy measurements were picked), and a model fitted on them
predicts gains the re-measures do not find: the predicted log ratios of the held-out shapes'
re-measured tilings to their default are multiplied by a *scale*, the least-squares slope of
the measured on the predicted (within [0, 1]) fitted on the other shapes' re-measures, and the
model's *error* is the root mean square of the scaled prediction minus the measured; the model
keeps the scale fitted on every re-measure. Without such re-measures, the error is that of every
measured tiling of the held-out shapes against its shape's default record, and the scale 1. A
choice counts a candidate faster than the default only when its scaled predicted log gain
exceeds the error. With several kinds fitted, the one with the smallest error is kept; without
:data:`MIN_SHAPES` held-out shapes that measured their default beside another tiling there is
no error, and no model (the table then holds no choice grid and the runtime answers by the
nearest rule).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tilewise.types import Shape, Tiling

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile
    from tilewise.store import WorkloadRow

FEATURES = (
    "waves",
    "gm_bytes",
    "cube_macs",
    "vector_bytes",
    "vector_calls",
    "stages",
    "blocks",
    "cost_us",
)
MIN_RECORDS_PER_FEATURE = 8
#: Shapes measuring their default beside another tiling that the error needs, each held out in
#: turn from a fit on the others: a sweep tuned at three token counts gets a model (and so the
#: default unless a candidate clears the error) rather than a copy nobody predicted.
MIN_SHAPES = 3
FOLDS = 5


def features(
    spec: OpSpec,
    tiling: Tiling,
    shape: Shape,
    dtype: str,
    target: TargetProfile,
    units: int | None = None,
) -> list[float] | None:
    """The :data:`FEATURES` of ``tiling`` at ``shape`` (log2 each), its blocks run on ``units``
    parallel units (None: the target's cores the op's cost code names); None when the op's
    cost code cannot describe it."""
    from tilewise.kernels.backends import predict

    try:
        work = spec.block_work(tiling, shape, dtype, target)
        cost = predict(spec, tiling, shape, dtype, target).total_us
    except (ArithmeticError, NotImplementedError, KeyError, ValueError):
        return None
    waves = max(1, math.ceil(work.blocks / max(units or work.cores, 1)))
    return [
        math.log2(waves),
        math.log2(1.0 + waves * work.gm_bytes),
        math.log2(1.0 + waves * work.cube_macs),
        math.log2(1.0 + waves * work.vector_bytes),
        math.log2(1.0 + waves * work.vector_calls),
        math.log2(1.0 + waves * work.stages),
        math.log2(max(work.blocks, 1)),
        math.log2(max(cost, 1e-3)),
    ]


class Sample(NamedTuple):
    """One measured tiling of one shape: the median of its records."""

    group: str  # "target/dtype"
    shape: Shape
    x: list[float]
    log_us: float  # natural log of the latency
    is_default: bool  # the shape's default tiling


class Pair(NamedTuple):
    """A tiling and its shape's default, re-measured side by side (the tuner's final
    re-measure of its best tilings, interleaved with the default's)."""

    group: str  # "target/dtype"
    shape: Shape
    x: list[float]
    x_default: list[float]
    log_ratio: float  # natural log of the tiling's latency over the default's


@dataclass(frozen=True)
class Model:
    """A fitted model (see the module docstring); ``predict`` gives natural-log latencies."""

    kind: str  # "loglinear", "within" or "cost"
    coef: tuple[float, ...]  # per feature of FEATURES ("cost": 1 on cost_us, 0 elsewhere)
    intercepts: dict[str, float]  # per "target/dtype"
    error: float  # held-out RMS error of log ratios to the default
    records: int  # samples fitted
    shapes: int
    #: Per "target/dtype": the parallel units its records' blocks ran on, where they name them
    #: (the cpu-twin's threads); the features of a decision use the same.
    units: dict[str, int] = field(default_factory=dict)
    #: What a predicted log ratio of two tilings of one shape is multiplied by: fitted on the
    #: re-measured pairs where there are some (see the module docstring), else 1.
    scale: float = 1.0

    def predict(self, x: np.ndarray, group: str) -> np.ndarray:
        log_us: np.ndarray = x @ np.asarray(self.coef) * math.log(2)
        return log_us + self.intercepts.get(group, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "features": list(FEATURES),
            "coef": [round(c, 6) for c in self.coef],
            "intercepts": {k: round(v, 6) for k, v in sorted(self.intercepts.items())},
            "error": round(self.error, 6),
            "records": self.records,
            "shapes": self.shapes,
            "units": dict(sorted(self.units.items())),
            "scale": round(self.scale, 6),
        }


def _intercepts(rest: np.ndarray, onehot: np.ndarray, groups: Sequence[str]) -> dict[str, float]:
    # Per group the mean of what the coefficients leave of the log latencies.
    return {g: float(rest[onehot[:, i] > 0].mean()) for i, g in enumerate(groups)}


def _fit(kind: str, samples: Sequence[Sample]) -> Model:
    x = np.array([s.x for s in samples], dtype=np.float64)
    y = np.array([s.log_us for s in samples], dtype=np.float64)
    groups = sorted({s.group for s in samples})
    onehot = np.array([[s.group == g for g in groups] for s in samples], dtype=np.float64)
    if kind == "cost":
        coef = np.zeros(len(FEATURES))
        coef[FEATURES.index("cost_us")] = 1.0
        intercepts = _intercepts(y - x @ coef * math.log(2), onehot, groups)
    elif kind == "within":
        # Each shape's mean taken out of its features and latencies: the coefficients explain
        # how tilings of one shape differ, what a choice compares, not how shapes do.
        shapes: dict[tuple[str, Shape], list[int]] = {}
        for i, s in enumerate(samples):
            shapes.setdefault((s.group, s.shape), []).append(i)
        xd, yd = x.copy(), y.copy()
        for rows in shapes.values():
            xd[rows] -= x[rows].mean(axis=0)
            yd[rows] -= y[rows].mean()
        ridge = 1e-2 * np.sqrt(len(samples))
        coef, *_ = np.linalg.lstsq(
            np.vstack([xd * math.log(2), np.eye(len(FEATURES)) * ridge]),
            np.concatenate([yd, np.zeros(len(FEATURES))]),
            rcond=None,
        )
        intercepts = _intercepts(y - x @ coef * math.log(2), onehot, groups)
    else:
        # A little ridge on the log2 features (not the intercepts) keeps collinear ones (bytes
        # and the cost model's time often move together) from trading huge opposite weights.
        ridge = 1e-2 * np.sqrt(len(samples))
        a = np.hstack([x * math.log(2), onehot])
        penalty = np.hstack([np.eye(len(FEATURES)) * ridge, np.zeros((len(FEATURES), len(groups)))])
        solved, *_ = np.linalg.lstsq(
            np.vstack([a, penalty]), np.concatenate([y, np.zeros(len(FEATURES))]), rcond=None
        )
        coef = solved[: len(FEATURES)]
        intercepts = {g: float(solved[len(FEATURES) + i]) for i, g in enumerate(groups)}
    return Model(
        kind,
        tuple(float(c) for c in coef),
        intercepts,
        math.inf,
        len(samples),
        len({(s.group, s.shape) for s in samples}),
    )


def _folds(keys: Sequence[tuple[str, Shape]]) -> list[set[tuple[str, Shape]]]:
    order = sorted(set(keys), key=lambda k: (k[0], tuple(k[1].values())))
    folds = min(FOLDS, len(order))
    return [set(order[fold::folds]) for fold in range(folds)]


def _held_out_error(kind: str, samples: Sequence[Sample]) -> float | None:
    """RMS over held-out shapes of (predicted - measured) log ratio of each measured tiling to
    the shape's default; None without :data:`MIN_SHAPES` shapes measuring their default beside
    another tiling (fewer say too little of the error)."""
    by_shape: dict[tuple[str, Shape], list[Sample]] = {}
    for s in samples:
        by_shape.setdefault((s.group, s.shape), []).append(s)
    usable = [k for k, v in by_shape.items() if any(s.is_default for s in v) and len(v) > 1]
    if len(usable) < MIN_SHAPES:
        return None
    errors: list[float] = []
    for held in _folds(list(by_shape)):
        train = [s for s in samples if (s.group, s.shape) not in held]
        if not train:
            continue
        model = _fit(kind, train)
        for key in held:
            shape_samples = by_shape[key]
            default = next((s for s in shape_samples if s.is_default), None)
            if default is None or len(shape_samples) < 2:
                continue
            x = np.array([s.x for s in shape_samples])
            predicted = model.predict(x, key[0])
            p_default = float(model.predict(np.array([default.x]), key[0])[0])
            for s, p in zip(shape_samples, predicted, strict=True):
                if s is default:
                    continue
                errors.append((p - p_default) - (s.log_us - default.log_us))
    if not errors:
        return None
    return float(np.sqrt(np.mean(np.square(errors))))


def _slope(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """The least-squares ``a`` of measured ≈ a × predicted, within [0, 1]: a model that
    over-states gains is shrunk, one that says nothing is 0; none is stretched."""
    p, m = np.asarray(predicted), np.asarray(measured)
    norm = float(p @ p)
    return 0.0 if norm <= 0.0 else float(np.clip((p @ m) / norm, 0.0, 1.0))


def _paired_error(
    kind: str, samples: Sequence[Sample], pairs: Sequence[Pair]
) -> tuple[float, float] | None:
    """(error, scale) on the re-measured pairs: each held-out shape's pairs predicted by a
    model fitted on the other shapes' samples, scaled by the slope (:func:`_slope`) fitted on
    the other shapes' pairs, the RMS of the scaled prediction minus the measured log ratio;
    the scale refitted on every pair. None without pairs on :data:`MIN_SHAPES` shapes."""
    by_shape: dict[tuple[str, Shape], list[Pair]] = {}
    for pair in pairs:
        by_shape.setdefault((pair.group, pair.shape), []).append(pair)
    if len(by_shape) < MIN_SHAPES:
        return None
    keys = list(by_shape) + [(s.group, s.shape) for s in samples]
    predicted: dict[tuple[str, Shape], list[float]] = {}
    for held in _folds(keys):
        train = [s for s in samples if (s.group, s.shape) not in held]
        if not train:
            return None
        model = _fit(kind, train)
        for key in held & by_shape.keys():
            shape_pairs = by_shape[key]
            x = np.array([p.x for p in shape_pairs])
            base = np.array([p.x_default for p in shape_pairs])
            predicted[key] = list(model.predict(x, key[0]) - model.predict(base, key[0]))
    residuals: list[float] = []
    for key, shape_pairs in by_shape.items():
        others = [k for k in by_shape if k != key]
        a = _slope(
            [v for k in others for v in predicted[k]],
            [p.log_ratio for k in others for p in by_shape[k]],
        )
        residuals += [p.log_ratio - a * v for p, v in zip(shape_pairs, predicted[key], strict=True)]
    scale = _slope(
        [v for k in by_shape for v in predicted[k]],
        [p.log_ratio for k in by_shape for p in by_shape[k]],
    )
    return float(np.sqrt(np.mean(np.square(residuals)))), scale


def fit_model(samples: Sequence[Sample], pairs: Sequence[Pair] = ()) -> Model | None:
    """The best cross-validated of the kinds (see the module docstring), refitted on every
    sample; None when none has a measured error. With ``pairs`` on :data:`MIN_SHAPES` shapes
    or more, each kind's error and scale are those on the pairs."""
    kinds = ["cost"]
    shapes = len({(s.group, s.shape) for s in samples})
    if len(samples) >= MIN_RECORDS_PER_FEATURE * len(FEATURES) and shapes >= MIN_SHAPES:
        kinds += ["loglinear", "within"]
    best: Model | None = None
    for kind in kinds:
        paired = _paired_error(kind, samples, pairs)
        error, scale = paired if paired is not None else (_held_out_error(kind, samples), 1.0)
        if error is None:
            continue
        if best is None or error < best.error:
            fitted = _fit(kind, samples)
            best = Model(
                kind, fitted.coef, fitted.intercepts, error, fitted.records, shapes, scale=scale
            )
    return best


class Measured(NamedTuple):
    """A workload's measured records as the model reads them."""

    latencies: dict[Tiling, float]  # median of each tiling's measured records
    remeasured: dict[Tiling, float]  # of its side-by-side re-measures at the end of a run
    threads: Counter[int]  # how many records ran on how many host threads


def measured_records(session: Session, workload_id: int) -> Measured:
    """A workload's measured (ok, not predicted) records; the cpu-twin's name their threads."""
    from tilewise.status import RecordSource
    from tilewise.store import RecordStatus, records_for

    latencies: dict[Tiling, list[float]] = {}
    remeasured: dict[Tiling, list[float]] = {}
    threads: Counter[int] = Counter()
    for r in records_for(session, workload_id=workload_id, status=RecordStatus.OK):
        if r.latency_us is not None and r.latency_us > 0 and r.source != RecordSource.PREDICTED:
            latencies.setdefault(r.tiling, []).append(r.latency_us)
            if r.source == RecordSource.REMEASURE:
                remeasured.setdefault(r.tiling, []).append(r.latency_us)
            count = r.env.get("threads")
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                threads[count] += 1
    return Measured(
        {t: float(np.median(v)) for t, v in latencies.items()},
        {t: float(np.median(v)) for t, v in remeasured.items()},
        threads,
    )


def thread_units(
    workloads: Sequence[WorkloadRow],
    measured: Mapping[int, Measured],
) -> dict[str, int]:
    """Per "target/dtype" group: the host threads most of its records ran on, for the groups
    whose records name them (the features then count waves over those threads)."""
    counts: dict[str, Counter[int]] = {}
    for w in workloads:
        counts.setdefault(f"{w.target}/{w.dtype}", Counter()).update(measured[w.id].threads)
    return {group: c.most_common(1)[0][0] for group, c in counts.items() if c}
