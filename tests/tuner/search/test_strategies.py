"""Strategies: the registry, the default sampler's behaviour, and the Tuner's warm start."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from tests_support import host_toolchain

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.errors import ConfigError, InputError
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import STRATEGIES, Budget, ReplaySpace, Tuner, make_sampler, replay_search
from tilewise.search._bench import search_space_of
from tilewise.search._features import parzen_scores, unit_features
from tilewise.search._surrogate import SurrogateSampler
from tilewise.search._warm import nearest_tuned_tilings, shape_distance
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling, Workload


def _needs_torch(name: str) -> None:
    if name == "gp":
        pytest.importorskip("torch", reason="strategy 'gp' needs PyTorch (pip install torch)")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_is_a_sampler(name: str) -> None:
    _needs_torch(name)
    assert isinstance(make_sampler(0, strategy=name), optuna.samplers.BaseSampler)


# Failed configurations are told as inf; Optuna's GPSampler says it clips them to the worst
# finite value, which is what is wanted.
@pytest.mark.filterwarnings("ignore:Clip non-finite values:UserWarning")
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_searches_a_space(tmp_path: Path, name: str) -> None:
    """A short search on the synthetic space: every strategy proposes, and the search beats
    the space's median configuration."""
    _needs_torch(name)
    space = synthetic_space(tmp_path / "s.csv")
    sampler = make_sampler(0, strategy=name, space=search_space_of(space))
    run = replay_search(space, sampler, budget=20)
    assert space.evaluations == 20 and run.best_ms is not None
    assert run.best_ms < float(np.median([t for _, t in space.recorded() if math.isfinite(t)]))


def test_gp_without_pytorch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(ConfigError, match="needs PyTorch: pip install torch"):
        make_sampler(0, strategy="gp")


def test_unknown_strategy() -> None:
    with pytest.raises(InputError, match="unknown strategy 'annealing'; known: default"):
        make_sampler(0, strategy="annealing")


def synthetic_space(path: Path) -> ReplaySpace:
    """A tiling-like space: restricted (x*y <= 256), failures for one corner, one optimum."""
    lines = ["x,y,z,v,time_ms"]
    for x, y, z, v in itertools.product(
        (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16, 32), (0, 1), (1, 2, 4)
    ):
        if x * y > 256:
            continue
        if x == 32 and y >= 4:
            t = math.inf
        else:
            t = 1.0 + (math.log2(x) - 3) ** 2 + 0.5 * (math.log2(x * y) - 5) ** 2 + 0.3 * z
            t += 0.2 * abs(math.log2(v) - 1) + 0.05 * ((x + 3 * y + v) % 5)
        lines.append(f"{x},{y},{z},{v},{t}")
    path.write_text("\n".join(lines) + "\n")
    return ReplaySpace(path)


def test_default_proposes_only_feasible_configurations(tmp_path: Path) -> None:
    space = synthetic_space(tmp_path / "s.csv")
    run = replay_search(
        space, make_sampler(3, strategy="default", space=search_space_of(space)), budget=30
    )
    assert space.infeasible == 0 and space.evaluations == 30 and run.duplicates == 0


def test_default_reaches_the_optimum_faster_than_random(tmp_path: Path) -> None:
    space = synthetic_space(tmp_path / "s.csv")
    budget, bound = 60, space.optimum_ms * 1.01
    assert space.within(0.01) <= 2 < space.configs // 50

    def evals_to_optimum(strategy: str, seed: int) -> int:
        sampler = make_sampler(seed, strategy=strategy, space=search_space_of(space))
        run = replay_search(space, sampler, budget=budget)
        return run.evaluations_to(bound) or budget + 1

    default = [evals_to_optimum("default", seed) for seed in range(3)]
    random = [evals_to_optimum("random", seed) for seed in range(3)]
    assert np.mean(default) < np.mean(random), (default, random)
    assert max(default) <= budget


@pytest.mark.parametrize(
    "acquisitions",
    [
        ("ei",),
        ("mean",),
        ("parzen",),
        ("local",),
        ("ei", "mean"),
        ("ei", "local"),
        ("gp-ei",),
        ("gp-mean",),
        ("gp-local",),
        ("gp-ei", "ei", "local"),
    ],
)
def test_every_acquisition_proposes_feasible_unseen_configurations(
    tmp_path: Path, acquisitions: tuple[str, ...]
) -> None:
    space = synthetic_space(tmp_path / "s.csv")
    sampler = SurrogateSampler(
        space=search_space_of(space), seed=1, n_startup=5, acquisitions=acquisitions
    )
    run = replay_search(space, sampler, budget=40)
    assert space.infeasible == 0 and space.evaluations == 40 and run.duplicates == 0


def test_an_unknown_acquisition_is_refused() -> None:
    with pytest.raises(ValueError, match="acquisitions must be some of"):
        SurrogateSampler(acquisitions=("ucb",))
    with pytest.raises(ValueError, match="acquisitions must be some of"):
        SurrogateSampler(acquisitions=())


def test_parzen_prefers_the_values_of_the_best_configurations() -> None:
    dist = optuna.distributions.CategoricalDistribution
    dists = {"a": dist((1, 2, 4)), "b": dist((0, 1))}
    # The two fastest of ten have a=4, b=1; the slow ones mostly a=1 or a=2 and b=0.
    observed = [((4, 1), 1.0), ((4, 1), 1.1)] + [((1 + i % 2, 0), 5.0 + i) for i in range(8)]
    candidates = [(4, 1), (4, 0), (1, 1), (1, 0)]
    scores = parzen_scores(("a", "b"), dists, candidates, observed, 0.2)
    assert np.argmax(scores) == 0 and np.argmin(scores) == 3
    assert scores[1] > scores[3] and scores[2] > scores[3]  # each good value counts


def test_mean_takes_the_best_predicted_unseen_configuration(tmp_path: Path) -> None:
    space = synthetic_space(tmp_path / "s.csv")
    sampler = SurrogateSampler(space=search_space_of(space), seed=0, acquisitions=("mean",))
    run = replay_search(space, sampler, budget=60)
    # Greedy on a smooth landscape: once the model has data it walks straight to the optimum.
    assert run.evaluations_to(space.optimum_ms * 1.01) is not None


@pytest.mark.parametrize("local", ["local", "gp-local"])
def test_local_steps_change_one_field_of_the_best_configuration(tmp_path: Path, local: str) -> None:
    space = synthetic_space(tmp_path / "s.csv")
    sampler = SurrogateSampler(
        space=search_space_of(space), seed=2, n_startup=8, acquisitions=(local,)
    )
    study = optuna.create_study(sampler=sampler)
    names = sorted(space.distributions)
    for _ in range(20):
        trial = study.ask(space.distributions)
        if len(study.trials) > 8:  # a model step: one field away from the best so far
            done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
            best = min(done, key=lambda t: t.value if t.value is not None else math.inf)
            changed = [n for n in names if trial.params[n] != best.params[n]]
            assert len(changed) == 1, (trial.params, best.params)
        study.tell(trial, space.evaluate(trial.params).time_ms or math.inf)


def test_gp_features_scale_sizes_by_log_and_split_named_choices() -> None:
    dist = optuna.distributions.CategoricalDistribution
    dists = {"order": dist(("mk", "km", "nk")), "pad": dist((0, 1)), "tile": dist((16, 64, 256))}
    names = ("order", "pad", "tile")
    x = unit_features(names, dists, [("km", 1, 64), ("nk", 0, 16), ("mk", 0, 256)])
    # order: one 0/1 column per choice; pad: linear; tile: log2 in [0, 1] (64 is halfway)
    assert x.tolist() == [
        [0.0, 1.0, 0.0, 1.0, 0.5],
        [0.0, 0.0, 1.0, 0.0, 0.0],
        [1.0, 0.0, 0.0, 0.0, 1.0],
    ]


def test_the_gp_refits_its_hyperparameters_as_evaluations_grow(tmp_path: Path) -> None:
    space = synthetic_space(tmp_path / "s.csv")
    sampler = SurrogateSampler(
        space=search_space_of(space), seed=0, n_startup=5, acquisitions=("gp-ei",)
    )
    fits: list[int] = []
    original = sampler._gp_model

    def spy(*args: Any) -> Any:
        before = sampler._gp_theta_n
        out = original(*args)
        if sampler._gp_theta_n != before or not fits:
            fits.append(sampler._gp_theta_n)
        return out

    sampler._gp_model = spy  # type: ignore[method-assign]
    replay_search(space, sampler, budget=40)
    # A fit at 5 evaluations, then again each time the data grew by 10% (at least one more).
    assert fits[0] == 5 and len(fits) >= 10
    assert all(b >= a * 1.1 for a, b in itertools.pairwise(fits)), fits
    assert fits[-1] < 40 and len(fits) < 35  # not refitted at every step


# -- warm start in the Tuner ----------------------------------------------------------------


def latency(tiling: Tiling) -> float:
    """A fixed function of the tiling: best at tileLength 8192 and many blocks."""
    return 1000.0 / tiling["blockDim"] + abs(tiling["tileLength"] - 8192) / 100


def latency_backend() -> FakeBackend:
    """Every run of a tiling reads its latency three times."""
    return FakeBackend(latency, spread=(1.0, 1.0, 1.0))


def make_tuner(db: store.Store, backend: FakeBackend, settings: Settings, n: int) -> Tuner:
    return Tuner(
        spec=get_op("scale_relu_dropout"),
        shape=Shape({"N": n}),
        dtype="float32",
        target=twin_target(),
        backend=backend,
        db=db,
        settings=settings,
    )


def busy_start_backend(busy: int) -> FakeBackend:
    """latency_backend whose first `busy` unchecked runs (the final re-measure) read twice as
    slow, as when another process takes the machine for a moment."""
    left = busy

    def remeasure(tiling: Tiling, n: int) -> list[float]:
        nonlocal left
        factor = 2.0 if left > 0 else 1.0
        left -= 1
        return [factor * latency(tiling)] * 3

    return FakeBackend(latency, spread=(1.0, 1.0, 1.0), remeasure=remeasure)


def test_the_final_remeasure_shares_a_busy_moment_among_the_contenders(tmp_path: Path) -> None:
    settings = Settings(db_url="sqlite://", cache_dir=tmp_path / "c", remeasure_top=2)
    db = store.open_store(settings.db_url)
    # The first two runs of the re-measure (its warm-up and the first contender's first
    # round) read twice as slow. Measured one after the other, the first contender's median
    # would double; in rounds it is one slow round of three.
    tuner = make_tuner(db, busy_start_backend(busy=2), settings, 1 << 18)
    result = tuner.run(Budget(8), seed=0)
    assert result.best is not None and result.default is not None
    with db.session() as s:
        remeasured = [
            r
            for r in store.records_for(s, workload_id=tuner.workload_id)
            if r.source == "remeasure"
        ]
    assert len(remeasured) >= 2  # the best two, and the default if it is not one of them
    for record in remeasured:
        tiling = Tiling(record.tiling)
        truth = 1000.0 / tiling["blockDim"] + abs(tiling["tileLength"] - 8192) / 100
        assert record.latency_us == truth, (tiling, record.latency_us, truth)
    db.close()


def flat_backend(default: Tiling, factor: float) -> FakeBackend:
    """Every tiling takes 100 us except the default, ``factor`` times that; each run reads
    0.9, 1 and 1.1 times its latency, as a shared machine spreads a kernel's runs."""
    return FakeBackend(
        lambda tiling: 100.0 * (factor if tiling == default else 1.0), spread=(0.9, 1.0, 1.1)
    )


@pytest.mark.parametrize("factor", [1.005, 1.2])
def test_a_tiling_replaces_the_default_only_when_faster_beyond_the_noise(
    tmp_path: Path, factor: float
) -> None:
    settings = Settings(db_url="sqlite://", cache_dir=tmp_path / "c", remeasure_top=2)
    db = store.open_store(settings.db_url)
    spec, shape = get_op("scale_relu_dropout"), Shape({"N": 1 << 18})
    default = spec.default_tiling(shape, "float32", twin_target())
    tuner = make_tuner(db, flat_backend(default, factor), settings, 1 << 18)
    result = tuner.run(Budget(6), seed=0)
    assert result.best is not None and result.default is not None
    with db.session() as s:
        remeasured = {
            r.tiling_key: r.latency_us
            for r in store.records_for(s, workload_id=tuner.workload_id)
            if r.source == "remeasure"
        }
    # Other tilings were re-measured beside the default, and read faster by their medians.
    assert remeasured[default.key()] == pytest.approx(100.0 * factor)
    assert min(remeasured.values()) == pytest.approx(100.0) and len(remeasured) >= 2
    if factor < 1.1:  # 0.5%, inside the runs' 20% spread: not a winner
        assert result.best.tiling == default and result.speedup == 1.0
    else:
        assert result.best.tiling != default and result.speedup == pytest.approx(factor)
    with db.session() as s:
        stored = store.get_tiling(s, workload_id=tuner.workload_id, toolchain=None)
    assert stored is not None and Tiling(stored.tiling) == result.best.tiling
    db.close()


def test_shape_distance() -> None:
    srd = get_op("scale_relu_dropout")
    assert shape_distance(srd, Shape({"N": 1024}), Shape({"N": 4096})) == 2
    assert shape_distance(srd, Shape({"N": 1}), Shape({"M": 1})) == math.inf


def test_shape_distance_of_a_dim_that_may_be_zero() -> None:
    """A padding of 0 sits at log2(0 + 1) = 0: one step from pad 1, two from pad 3."""
    conv = get_op("conv_bias_leakyrelu")
    base = {"N": 1, "C": 16, "H": 14, "W": 14, "K": 16, "R": 3, "S": 3, "stride": 1}
    pad0, pad1, pad3 = (Shape({**base, "pad": p}) for p in (0, 1, 3))
    assert shape_distance(conv, pad0, pad1) == 1
    assert shape_distance(conv, pad0, pad3) == 2
    assert shape_distance(conv, pad1, Shape({**base, "pad": 1, "N": 4})) == 2


def test_warm_start_measures_the_nearest_tuned_tilings_first(tmp_path: Path) -> None:
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'db' / 'tw.db'}", cache_dir=tmp_path / "c", remeasure_top=1
    )
    db = store.open_store(settings.db_url)
    far, near = latency_backend(), latency_backend()
    far_result = make_tuner(db, far, settings, 1 << 15).run(Budget(6), seed=0)
    near_result = make_tuner(db, near, settings, 1 << 17).run(Budget(6), seed=1)
    assert far_result.best is not None and near_result.best is not None

    new = make_tuner(db, latency_backend(), settings, 1 << 18)
    with db.session() as s:
        warm = nearest_tuned_tilings(
            s, spec=new.spec, shape=new.shape, dtype="float32", target=new.target
        )
    # The nearest shape's winner comes first; every suggestion passes the check here.
    assert warm[0] == near_result.best.tiling
    assert all(new.spec.check(t, new.shape, "float32", new.target).valid for t in warm)
    default = new.spec.default_tiling(new.shape, "float32", new.target)
    expected = [t.key() for t in warm if t != default]
    assert expected

    backend = latency_backend()
    make_tuner(db, backend, settings, 1 << 18).run(Budget(8), seed=2)
    first = list(backend.checked)[: len(expected) + 1]
    assert first == [default.key(), *expected]  # the default first, then the warm start
    assert backend.checked.most_common(1)[0][1] == 1  # nothing measured twice
    db.close()


def test_warm_start_skips_tilings_outside_this_shapes_domains(tmp_path: Path) -> None:
    """A neighbour's winner may pass the check here with a value this shape's domains lack
    (its core split of another N): the Tuner must not enqueue it (Optuna would raise)."""
    spec, target = get_op("linear_add_gelu"), twin_target()
    near, here = Shape({"M": 128, "N": 512, "K": 128}), Shape({"M": 512, "N": 128, "K": 128})
    domains = {t.name: t.values for t in spec.tunables(here, "float32", target)}
    stranger = next(
        t
        for values in itertools.product(*(t.values for t in spec.tunables(near, "float32", target)))
        for t in [Tiling(dict(zip(domains, values, strict=True)))]
        if t["singleCoreN"] not in domains["singleCoreN"]
        and spec.check(t, here, "float32", target).valid
    )
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    with db.session() as s:
        workload = store.commit_workload(
            s, Workload(spec.name, spec.version, target.name, "float32", near)
        )
        record = store.add_record(
            s,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            tiling=stranger,
            status="ok",
            latency_us=1.0,
            source="search",
            env={},
        )
        store.upsert_tiling(
            s,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            record_id=record.id,
            tiling=stranger,
            latency_us=1.0,
            default_latency_us=None,
            speedup=None,
            evaluations=1,
        )
    # Any op: the latency is a fixed function of the tiling's key.
    backend = FakeBackend(
        lambda tiling: 1.0 + (hash(tiling.key()) % 1000) / 1000, spread=(1.0, 1.0, 1.0)
    )
    result = Tuner(
        spec=spec,
        shape=here,
        dtype="float32",
        target=target,
        backend=backend,
        db=db,
        settings=settings,
    ).run(Budget(3), seed=0)
    assert result.progress.evaluations == 3
    assert stranger.key() not in backend.checked
    db.close()


def test_warm_start_carries_the_neighbours_tilings_over(tmp_path: Path) -> None:
    """A neighbour's winner that does not fit here as it is (its core split of another M needs
    more cores) is carried over: the same pieces, snapped into this shape's domains."""
    spec, target = get_op("linear_add_gelu"), twin_target()
    near, here = Shape({"M": 128, "N": 512, "K": 128}), Shape({"M": 512, "N": 512, "K": 128})
    # The default but for the iteration order: M in 3 pieces of 48 rows (and N in 16).
    winner = spec.default_tiling(near, "float32", target).replace(iterateOrder=1)
    assert winner["singleCoreM"] == 48 and not spec.valid(winner, here, "float32", target)
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    with db.session() as s:
        workload = store.commit_workload(
            s, Workload(spec.name, spec.version, target.name, "float32", near)
        )
        record = store.add_record(
            s,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            tiling=winner,
            status="ok",
            latency_us=1.0,
            source="search",
            env={},
        )
        store.upsert_tiling(
            s,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            record_id=record.id,
            tiling=winner,
            latency_us=1.0,
            default_latency_us=None,
            speedup=None,
            evaluations=1,
        )
    with db.session() as s:
        warm = nearest_tuned_tilings(s, spec=spec, shape=here, dtype="float32", target=target)
    db.close()
    carried = spec.carry(winner, near, here, "float32", target)
    assert carried is not None and carried["singleCoreM"] == 176  # 512 rows in 3 pieces
    assert warm == [spec.snap(carried, here, "float32", target)]
    domains = {t.name: t.values for t in spec.tunables(here, "float32", target)}
    assert all(warm[0][name] in values for name, values in domains.items())


@pytest.mark.parametrize(("strategy", "models"), [("default", True), ("tpe", False)])
def test_preload_imports_what_the_first_proposals_would(strategy: str, models: bool) -> None:
    """A worker's start imports the surrogate's model libraries (and the finish's test), so
    that its first job does not; TPE needs no model libraries. In a fresh interpreter, where
    nothing imported them yet."""
    probe = (
        "import sys\n"
        "from tilewise.search._strategies import preload\n"
        "before = {'sklearn.ensemble', 'scipy.stats'} & set(sys.modules)\n"
        f"preload({strategy!r})\n"
        "print(sorted(before), 'sklearn.ensemble' in sys.modules, 'scipy.stats' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["[]", str(models), "True"]
