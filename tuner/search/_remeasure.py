"""The end of a tuning run: the best few tilings and the default re-measured side by side, in
rounds that visit each in turn, and the winner stored.

The search measured each tiling once, at its own moment of a shared machine; the winner is
chosen from samples taken together instead (:func:`interleaved_samples`), and it replaces the
default tiling only when it is faster beyond the noise (:func:`beats_default`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tilewise import store
from tilewise.kernels.backends import MeasureOptions, RunResult
from tilewise.search._evaluate import Evaluator, Outcome
from tilewise.stats import FASTER_P, faster
from tilewise.status import RecordSource
from tilewise.store import RecordStatus
from tilewise.types import Tiling

log = logging.getLogger(__name__)

#: The final re-measure visits every contender this many times, in turn (see finish).
REMEASURE_ROUNDS = 3
#: Seconds of launches, discarded, before the final re-measure's first round (see there).
REMEASURE_WARM_S = 0.3
#: The fastest contender replaces the default tiling only when a one-sided Mann-Whitney test
#: says its re-measured times are smaller at this level (see beats_default).
BEATS_DEFAULT_P = FASTER_P


@dataclass(frozen=True)
class Measured:
    tiling: Tiling
    latency_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"tiling": dict(self.tiling), "latency_us": self.latency_us}


class Stopped(Exception):
    """A stop was asked for (Ctrl-C, a worker's SIGTERM) while the winner was re-measured:
    nothing is stored, the records stay."""


class _WinnerChanged(Exception):
    """Another process stored a new winner while this one re-measured its contenders."""


#: Re-measures of one finish when other processes keep storing new winners meanwhile.
FINISH_ATTEMPTS = 3


def interleaved_samples(
    evaluator: Evaluator,
    contenders: Mapping[str, Tiling],
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, list[float]]:
    """Samples of every contender, taken in REMEASURE_ROUNDS rounds that visit each in turn.

    Measured one after the other, a contender whose window met a busy moment of the
    machine (another process, a frequency change) reads slow as a whole; in rounds every
    contender shares those moments. A contender that fails a round is dropped.

    Raises:
        Stopped: ``should_stop`` said so before a run.
    """
    measure = evaluator.measure
    per_round = MeasureOptions(
        measure.warmup,
        max(1, math.ceil(measure.repeats / REMEASURE_ROUNDS)),
        measure.max_seconds / REMEASURE_ROUNDS,
    )

    def run(tiling: Tiling, measure: MeasureOptions) -> RunResult:
        if should_stop is not None and should_stop():
            raise Stopped
        return evaluator.launch(evaluator.build(tiling), tiling, check=False, measure=measure)

    # While the search fitted its surrogates one core sat idle, and a vCPU of these VMs
    # takes a few tens of ms to get its host core back: the first round's first runs read
    # up to 2x slow (perf showed one CPU's samples missing then). A warm-up of launches
    # brings both cores back before anything counts.
    run(next(iter(contenders.values())), MeasureOptions(0, 1_000_000, REMEASURE_WARM_S))
    samples: dict[str, list[float]] = {key: [] for key in contenders}
    for _ in range(REMEASURE_ROUNDS):
        for key in list(samples):
            result = run(contenders[key], per_round)
            if not result.ok or not result.samples_us:
                del samples[key]
                continue
            samples[key].extend(result.samples_us)
    return samples


def finish(
    evaluator: Evaluator, default: Tiling, should_stop: Callable[[], bool] | None = None
) -> tuple[Measured | None, Measured | None]:
    """Re-measure the best few, the default and the stored winner side by side; store the
    winner.

    The default is always among them: a search whose budget went to warm-start tilings never
    reached it, and it is evaluated (checked and measured, one evaluation beyond the budget)
    here first. The fastest contender replaces the default only when faster beyond the noise
    (:func:`beats_default`), and the winner stored by an earlier run stays unless the new one
    beats it by the same test: one stored winner per workload and toolchain, which changes on
    evidence (each change goes to the winner history, with its reason). The latest winner of
    another toolchain (before an upgrade) is re-measured among them too, when still valid for
    the target: it is not the incumbent, but it may well win again.

    Another process may store a new winner meanwhile (two tunes of one workload): the
    comparison is then made again with that winner among the contenders, up to
    :data:`FINISH_ATTEMPTS` times, after which its winner stays.

    The best and the default as re-measured (after the attempts, the winner the others stored
    and no default); (None, None) when nothing could be measured.

    Raises:
        Stopped: ``should_stop`` said so before a measurement.
    """
    name = evaluator.workload.study_name
    for _ in range(FINISH_ATTEMPTS):
        try:
            return _finish_once(evaluator, default, should_stop)
        except _WinnerChanged:
            log.info("%s: another run stored a new winner meanwhile: comparing with it", name)
    log.warning(
        "%s: other runs kept storing new winners while this one re-measured: theirs stays", name
    )
    with evaluator.db.session() as s:
        stored = store.get_tiling(
            s, workload_id=evaluator.workload_id, toolchain=evaluator.toolchain.id
        )
    return (None if stored is None else Measured(Tiling(stored.tiling), stored.latency_us)), None


def _finish_once(
    evaluator: Evaluator, default: Tiling, should_stop: Callable[[], bool] | None
) -> tuple[Measured | None, Measured | None]:
    """One re-measure and store of :func:`finish`.

    Raises:
        _WinnerChanged: the stored winner is not the one this comparison read.
        Stopped: ``should_stop`` said so before a measurement.
    """
    settings = evaluator.settings
    with evaluator.db.session() as s:
        top = store.top_k(s, workload_id=evaluator.workload_id, k=settings.remeasure_top + 4)
        toolchain = evaluator.toolchain
        stored = store.get_tiling(s, workload_id=evaluator.workload_id, toolchain=toolchain.id)
        earlier = [
            t
            for t in store.tilings_of(s, workload_id=evaluator.workload_id)
            if t.toolchain.id != toolchain.id
        ]
    contenders: dict[str, Tiling] = {}
    for record in top:
        if record.source != RecordSource.REMEASURE and record.tiling_key not in contenders:
            contenders[record.tiling_key] = Tiling(record.tiling)
        if len(contenders) == max(1, settings.remeasure_top):
            break
    if not contenders:
        return None, None
    default_seen = evaluator.seen.get(default.key()) or evaluator.awaited(default)
    stale = (
        default_seen is not None
        and default_seen.status != RecordStatus.OK
        and default.key() in evaluator.earlier
    )
    if default_seen is None or stale:
        evaluator.earlier.discard(default.key())
        if should_stop is not None and should_stop():
            raise Stopped
        default_seen = evaluator.measure_default(default, again=stale)
    evaluator.seen[default.key()] = default_seen
    if default_seen is not None and default_seen.status == RecordStatus.OK:
        contenders.setdefault(default.key(), default)
    incumbent = Tiling(stored.tiling) if stored is not None else None
    if incumbent is not None:
        contenders.setdefault(incumbent.key(), incumbent)
    # Re-measured unchecked like every contender: it was verified when it was searched, and a
    # changed target profile (other chip limits) may have made it invalid, so it must pass
    # the op's static check here first.
    former = Tiling(earlier[0].tiling) if earlier else None
    if former is not None and evaluator.spec.valid(
        former, evaluator.shape, evaluator.dtype, evaluator.target
    ):
        contenders.setdefault(former.key(), former)
    samples = interleaved_samples(evaluator, contenders, should_stop)
    latencies: dict[str, tuple[float, int]] = {}
    for key, times in samples.items():
        pooled = RunResult(status=RecordStatus.OK, samples_us=tuple(times))
        median = pooled.median_us or 0.0  # every kept contender has samples
        rec = evaluator.record(
            contenders[key],
            Outcome(RecordStatus.OK, median),
            source=RecordSource.REMEASURE,
            spread=pooled.spread,
            samples_us=times,
        )
        latencies[key] = (median, rec.record_id or 0)
    if not latencies:
        return None, None
    best_key = _kept(
        min(latencies, key=lambda k: latencies[k][0]), default.key(), samples, "the default"
    )
    if incumbent is not None:
        best_key = _kept(best_key, incumbent.key(), samples, "the stored winner")
    name = evaluator.workload.study_name
    reason = _reason(best_key, incumbent, earlier[0] if earlier else None, latencies)
    if incumbent is not None and best_key != incumbent.key():
        log.info("%s: the stored winner was replaced: %s", name, reason)
    best = Measured(contenders[best_key], latencies[best_key][0])
    default_measured = (
        Measured(default, latencies[default.key()][0]) if default.key() in latencies else None
    )
    speedup = default_measured.latency_us / best.latency_us if default_measured else None
    with evaluator.db.session() as s:
        job = evaluator.job
        # A job cancelled (or taken over) while its winner was re-measured stores none: the
        # cancel wins, and the workload is not tuned by a job that says it was cancelled. The
        # job's row stays locked until the winner is stored (holds_job), so a cancel waits.
        if job is not None and not store.holds_job(s, job_id=job.job_id, worker_id=job.worker_id):
            log.info("%s: job %d is not held any more: no winner stored", name, job.job_id)
            return None, None
        evaluations = sum(
            1
            for r in store.records_for(s, workload_id=evaluator.workload_id)
            if r.status != RecordStatus.INFEASIBLE and r.source != RecordSource.REMEASURE
        )
        stored_now = store.upsert_tiling(
            s,
            workload_id=evaluator.workload_id,
            record_id=latencies[best_key][1],
            tiling=best.tiling,
            latency_us=best.latency_us,
            default_latency_us=default_measured.latency_us if default_measured else None,
            speedup=speedup,
            evaluations=evaluations,
            toolchain=toolchain,
            reason=reason,
            expected=incumbent,
        )
        if stored_now is None:
            raise _WinnerChanged
    return best, default_measured


def _reason(
    best_key: str,
    incumbent: Tiling | None,
    earlier: store.TilingRow | None,
    latencies: Mapping[str, tuple[float, int]],
) -> str:
    """Why ``best_key`` is (or stays) the stored winner, for the winner history."""
    if incumbent is None:
        if earlier is None:
            return "first winner"
        was = f"{earlier.toolchain.compiler}, {earlier.toolchain.headers}"
        return f"first winner of this toolchain (earlier winner: {was})"
    old = latencies.get(incumbent.key())
    if best_key == incumbent.key():
        return "kept"
    if old is None:
        return "replaced: the stored winner failed its re-measure"
    gain = 100 * (old[0] / latencies[best_key][0] - 1)
    return f"beat the stored winner side by side by {gain:.1f}%"


def _kept(fastest: str, holder: str, samples: Mapping[str, list[float]], what: str) -> str:
    """``fastest``, if it beats ``holder`` beyond the noise (or ``holder`` was not re-measured);
    else ``holder``."""
    if (
        fastest == holder
        or holder not in samples
        or beats_default(samples[fastest], samples[holder])
    ):
        return fastest
    log.info("kept %s: the fastest contender was not faster beyond the noise", what)
    return holder


def beats_default(candidate: list[float], default: list[float]) -> bool:
    """Whether ``candidate``'s times are smaller than ``default``'s beyond noise
    (:func:`tilewise.stats.faster` at ``BEATS_DEFAULT_P``).

    On a shared machine the fastest of a few contenders within a percent or two of the default
    is as often the luckiest as the best; storing it would report a speedup that the next
    measurement does not show (a tuned tiling that then reads slower than the default). So a
    contender must pass the test: with the default settings' 9 samples each (3 rounds of 3),
    times that all lie below the default's pass easily, two overlapping sets do not.
    """
    return faster(candidate, default, BEATS_DEFAULT_P)
