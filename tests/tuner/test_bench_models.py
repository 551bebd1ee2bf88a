"""`tilewise bench models`: the report of a run at a tiny configuration (tiny sizes, one round,
tune budget 1), its correctness check, and its command line's bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")

from tests_support import tilewise as tilewise_cli  # noqa: E402

import tilewise.torch  # noqa: E402 - after torch is known present
from tilewise.bench import models  # noqa: E402
from tilewise.settings import Settings  # noqa: E402
from tilewise.types import Shape  # noqa: E402

pytestmark = [
    pytest.mark.slow,  # a run compiles kernels and torch.compile graphs: about a minute
    # Inductor itself calls the deprecated torch.jit.script_method (torch 2.13).
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

HIDDEN, INTERMEDIATE, TOKENS = 24, 40, (1, 5)
CONV = {"N": 1, "C": 3, "H": 7, "W": 7, "K": 4, "R": 3, "stride": 1, "pad": 1}


def tiny_run(settings: Settings, db_url: str | None, *, budget: int = 1) -> dict[str, Any]:
    return models.run(
        settings=settings,
        hidden=HIDDEN,
        intermediate=INTERMEDIATE,
        tokens=TOKENS,
        conv=CONV,
        rounds=1,
        budget=budget,
        db_url=db_url,
        settle=0.0,
        overhead_calls=100,
    )


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(cache_dir=tmp_path_factory.mktemp("cache"), remeasure_top=1)


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'models.db'}"


@pytest.fixture(scope="module")
def report(settings: Settings, db_url: str) -> dict[str, Any]:
    return json.loads(json.dumps(tiny_run(settings, db_url)))  # JSON-serialisable as printed


def positive(value: Any) -> bool:
    return isinstance(value, float | int) and value > 0


def test_the_report_has_the_machine_the_date_and_the_config(report: dict[str, Any]) -> None:
    assert report["benchmark"] == "tilewise bench models"
    assert report["date"].endswith("+00:00")
    assert {"cpu", "cores", "load_before", "load_after"} <= set(report["machine"])
    config = report["config"]
    assert (config["hidden"], config["intermediate"], config["tokens"]) == (24, 40, [1, 5])
    assert (config["rounds"], config["budget"], config["conv"]) == (1, 1, CONV)
    assert "sqlite" in config["db"] and "dynamic=False" in config["compile"]


def test_every_kernel_shape_the_blocks_call_was_tuned_and_is_used(
    report: dict[str, Any],
) -> None:
    tuned = {(e["op"], json.dumps(e["shape"], sort_keys=True)) for e in report["tuning"]}
    wanted = {
        (op, json.dumps(shape, sort_keys=True))
        for t in TOKENS
        for op, shape in (
            ("swiglu_mlp", {"T": t, "H": HIDDEN, "I": INTERMEDIATE}),
            ("swiglu", {"T": t, "I": INTERMEDIATE}),
        )
    }
    assert wanted <= tuned
    for entry in report["tuning"]:
        assert entry["tuned"] == "now" and entry["evaluations"] >= 1, entry
        assert entry["source"] == "exact" and entry["tiling"], entry
    for row in report["rows"]:
        for name, used in row.get("tilings", {}).items():
            assert used["source"] == "exact", (row["config"], name, used)


def test_each_row_holds_positive_times_from_the_same_run(report: dict[str, Any]) -> None:
    mlp = [row for row in report["rows"] if row["block"] == "llama_mlp"]
    assert [row["tokens"] for row in mlp] == list(TOKENS)
    for row in mlp:
        for key in ("tilewise_us", "tilewise_unfused_us", "eager_us", "compile_us", "compile_s"):
            assert positive(row[key]), (row["tokens"], key, row[key])
        assert row["ratio_vs_compile"] == pytest.approx(
            row["tilewise_us"] / row["compile_us"], rel=2e-3
        )
        assert row["ratio_vs_eager"] == pytest.approx(
            row["tilewise_us"] / row["eager_us"], rel=2e-3
        )
        assert set(row["parts_us"]) == {"swiglu_mlp", "down_proj", "compile_gate_up"}
        assert all(positive(v) for v in row["parts_us"].values()), row["parts_us"]
        assert set(row["spread"]) == {"tilewise", "tilewise_unfused", "eager", "compile",
                                      *row["parts_us"]}  # fmt: skip


def test_the_tilewise_outputs_matched_the_torch_modules(report: dict[str, Any]) -> None:
    for row in report["rows"]:
        assert set(row["max_abs_error"]) == set(row["tilings"]) >= {"tilewise"}
        for name, error in row["max_abs_error"].items():
            rtol, atol = row["tolerance"][name]
            # |output| < 1 at these sizes (nn.Linear's init), so the check bounded it by this.
            assert 0 <= error <= atol + rtol, (row["config"], name, error)
    [mlp] = [r for r in report["rows"] if r["block"] == "llama_mlp" and r["tokens"] == 5]
    assert mlp["tilings"]["tilewise"]["op"] == "swiglu_mlp"
    assert mlp["tilings"]["tilewise_unfused"]["op"] == "swiglu"


def test_the_conv_row_runs_the_folded_conv_kernel(report: dict[str, Any]) -> None:
    [conv] = [row for row in report["rows"] if row["block"] == "conv_bn_relu"]
    assert conv["config"] == CONV and conv["tokens"] is None
    for key in ("tilewise_us", "eager_us", "compile_us"):
        assert positive(conv[key]), key
    assert conv["tilewise_unfused_us"] is None and conv["parts_us"] == {}
    used = conv["tilings"]["tilewise"]
    assert used["op"] == "conv_bias_leakyrelu" and used["source"] == "exact"
    assert used["shape"] == {**CONV, "S": CONV["R"]}


def test_the_overhead_is_a_call_minus_the_launch(report: dict[str, Any]) -> None:
    o = report["overhead"]
    assert (o["op"], o["shape"]) == ("linear_add_gelu", {"M": 1, "N": 16, "K": 16})
    for key in ("launch_us", "call_us", "torch_call_us"):
        assert positive(o[key]), key
    assert o["overhead_us"] == pytest.approx(o["call_us"] - o["launch_us"], abs=0.011)
    assert o["torch_overhead_us"] == pytest.approx(o["torch_call_us"] - o["launch_us"], abs=0.011)


def test_a_database_that_holds_the_shapes_is_not_tuned_again(
    report: dict[str, Any], settings: Settings, db_url: str
) -> None:
    todo = [(e["op"], e["dtype"], Shape(e["shape"])) for e in report["tuning"]]
    again = models.tune(todo, db_url=db_url, budget=1, settings=settings, seed=0, log=print)
    assert [e["tuned"] for e in again] == ["before: the database holds this shape"] * len(todo)


def test_the_report_prints_as_a_table(
    report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    models.print_report(report, 200)
    printed = capsys.readouterr().out
    assert "tilewise bench models" in printed and "tokens=5" in printed
    assert "per-call overhead" in printed and "swiglu_mlp" in printed


def test_the_report_of_a_run_without_tuning_prints(
    report: dict[str, Any],
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    todo = [(e["op"], e["dtype"], Shape(e["shape"])) for e in report["tuning"]]
    untuned = models.tune(
        todo, db_url=f"sqlite:///{tmp_path / 'fresh.db'}", budget=0, settings=settings, seed=0,
        log=print,
    )  # fmt: skip
    assert {e["tuned"] for e in untuned} == {"no: budget 0"}
    for entry in untuned:
        entry["source"] = "default"  # as the run's table answers, nothing tuned
    models.print_report({**report, "tuning": untuned}, 200)
    assert "tuned no: budget 0; the table's tiling" in capsys.readouterr().out


def test_a_wrong_tilewise_output_stops_the_run_before_timing(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    forward = tilewise.torch.LlamaMLP.forward

    def off_by_a_little(self: Any, x: Any) -> Any:
        return forward(self, x) + 1e-2

    monkeypatch.setattr(tilewise.torch.LlamaMLP, "forward", off_by_a_little)
    with pytest.raises(models.BlockMismatch, match=r"llama_mlp .*tilewise differs"):
        tiny_run(settings, None, budget=0)


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("models", ("--tokens", "1,x"), "--tokens must be positive integers"),
        ("models", ("--tokens", "0"), "--tokens must be positive integers"),
        ("models", ("--tokens", "99999999"), "--tokens: at most 65536 tokens, got 99999999"),
        ("models", ("--rounds", "0"), "rounds must be at least 1"),
        ("models", ("--budget", "-1"), "budget must be 0 or more"),
        ("models", ("--budget", "5001"), "budget must be at most 5000"),
        ("models", ("--seed", "-1"), "seed must be between 0 and"),
        ("kernels", ("--seed", "-1"), "seed must be between 0 and"),
        ("kernels", ("--budget", "999999"), "budget must be at most 5000"),
    ],
)
def test_bad_options_fail_before_anything_runs(
    tmp_path: Path, command: str, args: tuple[str, ...], message: str
) -> None:
    done = tilewise_cli("bench", command, *args, tmp_path=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
