"""Tuning manifests: reading YAML and JSON, errors that name their place, budgets by weight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilewise.errors import InputError
from tilewise.manifest import (
    BUDGET_FLOOR,
    Manifest,
    ManifestError,
    assign_budgets,
    load_manifest,
    manifest_of,
    parse_manifest,
    parse_text,
    spread_budget,
)

EXAMPLE = """\
target: cpu-twin            # default for every workload
budget: 40                  # per workload (or total_budget: N, spread by weight)
workloads:
  - op: linear_add_gelu
    dtype: float32
    shapes: [{M: 1, N: 4096, K: 4096, weight: 10}, {M: 128, N: 4096, K: 4096}]
"""


def test_the_issues_example_reads_as_two_weighted_workloads(tmp_path: Path) -> None:
    path = tmp_path / "tune.yaml"
    path.write_text(EXAMPLE)
    manifest = load_manifest(path)
    entries = manifest.entries()
    assert [(e.workload.op, e.workload.dtype, e.workload.target) for e in entries] == [
        ("linear_add_gelu", "float32", "cpu-twin")
    ] * 2
    assert [dict(e.workload.shape) for e in entries] == [
        {"M": 1, "N": 4096, "K": 4096},
        {"M": 128, "N": 4096, "K": 4096},
    ]
    assert [e.weight for e in entries] == [10.0, 1.0]
    assert [e.where for e in entries] == ["workloads[0].shapes[0]", "workloads[0].shapes[1]"]
    assert assign_budgets(manifest, [e.weight for e in entries], default=7) == [40, 40]


def test_json_defaults_several_dtypes_text_shapes_and_duplicates(tmp_path: Path) -> None:
    doc = {
        "name": "mlp",
        "target": "ascend910b1",
        "dtype": "float16",
        "workloads": [
            {"op": "swiglu", "shapes": ["T=16,I=2752", {"T": 1, "I": 2752, "weight": 2.5}]},
            {"op": "scale_relu_dropout", "dtype": ["float32", "float16"], "target": "cpu-twin",
             "shapes": [{"N": 4096}]},
            {"op": "swiglu", "shapes": [{"T": 16, "I": 2752, "weight": 4}]},
        ],
    }  # fmt: skip
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(doc))
    manifest = load_manifest(path)
    entries = manifest.entries()
    got = [(e.workload.op, e.workload.dtype, e.workload.target, e.weight, e.where) for e in entries]
    assert got == [
        # The same workload listed twice is one, with the weights summed, at its first place.
        ("swiglu", "float16", "ascend910b1", 5.0, "workloads[0].shapes[0]"),
        ("swiglu", "float16", "ascend910b1", 2.5, "workloads[0].shapes[1]"),
        ("scale_relu_dropout", "float32", "cpu-twin", 1.0, "workloads[1].shapes[0]"),
        ("scale_relu_dropout", "float16", "cpu-twin", 1.0, "workloads[1].shapes[0]"),
    ]
    # Without a budget the caller's default applies.
    assert assign_budgets(manifest, [1.0, 1.0], default=7) == [7, 7]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_dumps_reads_back_to_the_same_manifest(fmt: str, tmp_path: Path) -> None:
    manifest = parse_text(EXAMPLE, source="x")
    path = tmp_path / f"again.{fmt}"
    path.write_text(manifest.dumps(fmt=fmt))
    again = load_manifest(path)
    assert again.to_document() == manifest.to_document()
    assert [(e.workload, e.weight) for e in again.entries()] == [
        (e.workload, e.weight) for e in manifest.entries()
    ]
    if fmt == "yaml":  # shapes one per line, dims in the order written
        assert "- {M: 1, N: 4096, K: 4096, weight: 10}" in path.read_text()


BAD: list[tuple[str, tuple[str | int, ...], str]] = [
    ("workloads: []", ("workloads",), "at least 1 item"),
    ("[1, 2]", (), "a mapping with a workloads list"),
    ("workloads: [{op: lin, shapes: [{M: 1}]}]", ("workloads", 0, "op"), "unknown op 'lin'"),
    (
        "workloads: [{op: linear_add_gelu, shapes: [{M: 1, N: 2, K: 3}, {M: 1, N: 2}]}]",
        ("workloads", 0, "shapes", 1),
        "missing dim K",
    ),
    (
        "workloads: [{op: linear_add_gelu, shapes: [{M: 1, N: 2, K: 3, Q: 4}]}]",
        ("workloads", 0, "shapes", 0),
        "unknown dim Q",
    ),
    (
        "workloads: [{op: scale_relu_dropout, shapes: [{N: 8}, {N: 0}]}]",
        ("workloads", 0, "shapes", 1),
        "N must be positive",
    ),
    (
        "workloads: [{op: scale_relu_dropout, shapes: [{N: 8}, {N: x}]}]",
        ("workloads", 0, "shapes", 1, "N"),
        "a dim is a whole number",
    ),
    (
        "workloads: [{op: scale_relu_dropout, shapes: [{N: true}]}]",
        ("workloads", 0, "shapes", 0, "N"),
        "a dim is a whole number",
    ),
    (
        "workloads: [{op: scale_relu_dropout, shapes: [{N: 8, weight: 0}]}]",
        ("workloads", 0, "shapes", 0, "weight"),
        "a weight is a positive, finite number",
    ),
    (
        "workloads: [{op: scale_relu_dropout, shapes: [{N: 8, weight: .nan}]}]",
        ("workloads", 0, "shapes", 0, "weight"),
        "a weight is a positive, finite number",
    ),
    (
        "workloads: [{op: scale_relu_dropout, shapes: [N=8;N=9]}]",
        ("workloads", 0, "shapes", 0),
        "N must be an integer",
    ),
    (
        "dtype: fp16\nworkloads: [{op: scale_relu_dropout, shapes: [{N: 8}]}]",
        ("dtype",),
        "unknown dtype 'fp16'",
    ),
    (
        "workloads: [{op: swiglu, dtype: [float16, int8], shapes: [{T: 1, I: 8}]}]",
        ("workloads", 0, "dtype", 1),
        "unknown dtype 'int8'",
    ),
    (
        "workloads: [{op: swiglu, target: gpu, shapes: [{T: 1, I: 8}]}]",
        ("workloads", 0, "target"),
        "unknown target 'gpu'",
    ),
    (
        "target: npu\nworkloads: [{op: swiglu, shapes: [{T: 1, I: 8}]}]",
        ("target",),
        "unknown target 'npu'",
    ),
    (
        "budget: 0\nworkloads: [{op: swiglu, shapes: [{T: 1, I: 8}]}]",
        ("budget",),
        "greater than or equal to 1",
    ),
    (
        "budget: 4\ntotal_budget: 9\nworkloads: [{op: swiglu, shapes: [{T: 1, I: 8}]}]",
        (),
        "not both",
    ),
    (
        "workloads: [{op: swiglu, shape: [{T: 1, I: 8}]}]",
        ("workloads", 0, "shapes"),
        "workloads[0].shape: Extra inputs are not permitted",
    ),
    (
        "workloads: [{op: swiglu, shapes: []}]",
        ("workloads", 0, "shapes"),
        "at least 1 item",
    ),
    (  # YAML reads 1e3 as text: the message shows what it got
        "workloads: [{op: swiglu, shapes: [{T: 1e3, I: 8}]}]",
        ("workloads", 0, "shapes", 0, "T"),
        "a dim is a whole number, got '1e3'",
    ),
    (
        "workloads: [{op: swiglu, shapes: [{dims: 'T=1,I=8'}]}]",
        ("workloads", 0, "shapes", 0, "dims"),
        "dims is a mapping of dim names to whole numbers",
    ),
]


@pytest.mark.parametrize(("text", "loc", "message"), BAD, ids=[m for *_, m in BAD])
def test_a_bad_manifest_names_the_place_at_fault(
    text: str, loc: tuple[str | int, ...], message: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path).entries(max_elements=1 << 28)
    error = caught.value
    assert error.loc == loc, error
    assert message in str(error), error
    assert str(error).startswith(f"{path}: "), error  # the file, then the place
    assert isinstance(error, InputError)


def test_an_unreadable_or_broken_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read manifest"):
        load_manifest(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("workloads: [{op: swiglu")
    with pytest.raises(ManifestError, match=r"broken\.yaml: manifest: not YAML"):
        load_manifest(broken)
    not_json = tmp_path / "m.json"
    not_json.write_text("workloads: []")  # YAML, named .json
    with pytest.raises(ManifestError, match="not JSON"):
        load_manifest(not_json)


def test_max_elements_is_checked_per_shape() -> None:
    manifest = parse_manifest({"workloads": [{"op": "scale_relu_dropout", "shapes": ["N=4096"]}]})
    assert len(manifest.entries(max_elements=4096)) == 1
    with pytest.raises(ManifestError) as caught:
        manifest.entries(max_elements=4095)
    assert caught.value.loc == ("workloads", 0, "shapes", 0) and "above the limit" in str(
        caught.value
    )


# ---------------------------------------------------------------------------------------------
# Budgets


def test_spread_gives_a_floor_then_shares_by_weight() -> None:
    # 4 workloads, 100 evaluations: 5 each, then 80 split 10:1:1:1.
    budgets = spread_budget(100, [10, 1, 1, 1])
    assert sum(budgets) == 100
    assert budgets == [5 + 62, 5 + 6, 5 + 6, 5 + 6]  # 61.5 and 6.15s: largest remainders
    assert budgets[0] > 5 * budgets[1]


@pytest.mark.parametrize(
    ("total", "weights"),
    [(7, [1.0, 1.0, 1.0]), (13, [3.0, 0.5, 2.0, 0.25]), (1000, [1.0] * 7), (5, [1e9, 1e-9])],
)
def test_spread_spends_the_total_exactly_and_keeps_the_weights_order(
    total: int, weights: list[float]
) -> None:
    budgets = spread_budget(total, weights)
    assert sum(budgets) == total
    assert min(budgets) >= min(BUDGET_FLOOR, total // len(weights)) >= 1
    for i, heavier in enumerate(weights):
        for j, lighter in enumerate(weights):
            if heavier > lighter:
                assert budgets[i] >= budgets[j], (i, j, budgets)


def test_weights_near_the_float_maximum_are_spread_as_equals() -> None:
    """Each finite, their sum is not: the shares are taken relative to the largest."""
    assert spread_budget(20, [1e308, 1e308]) == [10, 10]
    assert spread_budget(20, [1.7e308, 1e-300, 1.7e308]) == [8, 5, 7]  # 5 each, then the rest


def test_a_workload_listed_twice_whose_weights_overflow_is_named(tmp_path: Path) -> None:
    doc = {
        "total_budget": 20,
        "workloads": [{"op": "swiglu", "shapes": [
            {"T": 64, "I": 688, "weight": 1e308}, {"T": 64, "I": 688, "weight": 1e308},
        ]}],
    }  # fmt: skip
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=r"workloads\[0\]\.shapes\[1\]\.weight: the weights"):
        load_manifest(path).entries()


def test_equal_weights_share_equally_with_the_remainder_to_the_first() -> None:
    assert spread_budget(10, [1, 1, 1]) == [4, 3, 3]
    assert spread_budget(3, [1, 1, 1]) == [1, 1, 1]  # every workload gets one at least


def test_a_cap_moves_the_excess_to_the_others() -> None:
    assert spread_budget(100, [10, 1, 1], cap=30) == [30, 30, 30]  # the caps allow 90
    budgets = spread_budget(100, [10, 1, 1, 1, 1], cap=40)
    assert budgets[0] == 40 and sum(budgets) == 100


def test_a_total_below_the_workloads_is_refused() -> None:
    with pytest.raises(InputError, match="total_budget 2 is below the 3 workloads"):
        spread_budget(2, [1, 1, 1])
    manifest = parse_manifest(
        {"total_budget": 2, "workloads": [{"op": "scale_relu_dropout", "shapes": ["N=8"]}]}
    )
    with pytest.raises(ManifestError) as caught:
        assign_budgets(manifest, [1, 1, 1], default=40)
    assert caught.value.loc == ("total_budget",)
    # Nothing to tune (all tuned already) needs no budget.
    assert assign_budgets(manifest, [], default=40) == []


def test_budget_errors_name_the_file_like_the_other_manifest_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"total_budget": 1, "workloads": [{"op": "scale_relu_dropout",
                                "shapes": ["N=8", "N=16"]}]}))  # fmt: skip
    with pytest.raises(ManifestError) as caught:
        assign_budgets(load_manifest(path), [1, 1], default=40)
    assert str(caught.value).startswith(f"{path}: total_budget: total_budget 1 is below")
    path.write_text(json.dumps({"budget": 9, "workloads": [{"op": "scale_relu_dropout",
                                "shapes": ["N=8"]}]}))  # fmt: skip
    with pytest.raises(ManifestError) as caught:
        assign_budgets(load_manifest(path), [1], default=40, cap=5)
    assert str(caught.value) == f"{path}: budget: budget must be between 1 and 5, got 9"


def test_a_per_workload_budget_above_the_cap_is_refused() -> None:
    manifest = parse_manifest(
        {"budget": 500, "workloads": [{"op": "scale_relu_dropout", "shapes": ["N=8"]}]}
    )
    assert assign_budgets(manifest, [1], default=40, cap=500) == [500]
    with pytest.raises(ManifestError, match="budget must be between 1 and 499"):
        assign_budgets(manifest, [1], default=40, cap=499)


def test_manifest_of_groups_by_op_target_and_dtype() -> None:
    manifest = manifest_of(
        [
            ("swiglu", "cpu-twin", "float32", {"T": 1, "I": 64}, 30),
            ("swiglu", "cpu-twin", "float32", {"T": 7, "I": 64}, 2),
            ("swiglu", "cpu-twin", "float16", {"T": 1, "I": 64}, 1),
            ("scale_relu_dropout", "ascend910b1", "float32", {"N": 64}, 5),
        ],
        total_budget=40,
    )
    assert isinstance(manifest, Manifest)
    doc = manifest.to_document()
    assert (doc["target"], doc["dtype"], doc["total_budget"]) == ("cpu-twin", "float32", 40)
    assert doc["workloads"] == [
        {
            "op": "swiglu",
            "shapes": [{"T": 1, "I": 64, "weight": 30}, {"T": 7, "I": 64, "weight": 2}],
        },
        {"op": "swiglu", "dtype": "float16", "shapes": [{"T": 1, "I": 64}]},
        {"op": "scale_relu_dropout", "target": "ascend910b1", "shapes": [{"N": 64, "weight": 5}]},
    ]
    assert len(manifest.entries()) == 4


def test_the_example_manifest_reads_and_spreads_its_total() -> None:
    manifest = load_manifest(Path(__file__).resolve().parents[2] / "examples" / "manifest.yaml")
    entries = manifest.entries()
    assert [e.weight for e in entries] == [10.0, 3.0, 1.0]
    budgets = assign_budgets(manifest, [e.weight for e in entries], default=40)
    assert budgets == [11, 7, 6] and sum(budgets) == manifest.total_budget  # as in the README


# Documents of the right shape with wrong parts anywhere: what a hand-written manifest holds.
_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 1 << 25), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(["float32", "fp16", "cpu-twin", "N=8", "M=1,N=2,K=3"]),
)  # fmt: skip
_SHAPE = st.one_of(
    st.dictionaries(st.sampled_from(["N", "M", "K", "T", "I", "weight", ""]), _SCALAR, max_size=4),
    _SCALAR,
)
_GROUP = st.fixed_dictionaries(
    {"op": st.one_of(st.sampled_from(["scale_relu_dropout", "linear_add_gelu", "swiglu"]), _SCALAR)},
    optional={"shapes": st.lists(_SHAPE, max_size=3), "dtype": _SCALAR, "target": _SCALAR,
              "budget": _SCALAR},
)  # fmt: skip
_DOC = st.fixed_dictionaries(
    {"workloads": st.one_of(st.lists(_GROUP, max_size=3), _SCALAR)},
    optional={"budget": _SCALAR, "total_budget": _SCALAR, "target": _SCALAR, "dtype": _SCALAR,
              "name": _SCALAR},
)  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True)
@given(doc=st.one_of(_DOC, _SCALAR))
def test_any_document_is_a_manifest_or_a_manifest_error(doc: object) -> None:
    try:
        manifest = parse_manifest(doc, source="fuzz")
        entries = manifest.entries(max_elements=1 << 28)
    except ManifestError as exc:
        assert str(exc).startswith("fuzz: "), exc  # the source, then the place
        return
    assert entries and all(e.weight > 0 for e in entries)
    again = parse_text(manifest.dumps(), source="again")
    assert [(e.workload, e.weight) for e in again.entries()] == [
        (e.workload, e.weight) for e in entries
    ]


@pytest.mark.parametrize("name", ["nul \x00 here", "two\nlines", "tab\there"])
def test_a_name_with_a_control_character_is_refused(name: str) -> None:
    """NUL is one PostgreSQL's text cannot hold: the service answered 503 "database
    unavailable" for a batch named so, where SQLite stored it."""
    doc = {"name": name, "workloads": [{"op": "swiglu", "shapes": ["T=16,I=64"]}]}
    with pytest.raises(ManifestError, match="name: a name holds no control characters"):
        parse_manifest(doc)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("m.yaml", "workloads:\n  - op: swiglu\n    shapes:\n      - {T: 16, T: 32, I: 256}\n"),
        ("m.json", '{"workloads": [{"op": "swiglu", "shapes": [{"T": 16, "T": 32, "I": 256}]}]}'),
        ("m.yaml", "budget: 5\nbudget: 9\nworkloads:\n  - {op: swiglu, shapes: [T=16,I=256]}\n"),
    ],
)
def test_a_key_given_twice_is_refused_not_the_last_taken(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ManifestError, match=r"the key '(T|budget)' is given twice"):
        load_manifest(path)


def test_a_yaml_merge_key_may_repeat_what_it_merges(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "workloads:\n  - op: swiglu\n    shapes:\n"
        "      - &base {T: 16, I: 256}\n      - {<<: *base, T: 32}\n"
    )
    shapes = [dict(e.workload.shape) for e in load_manifest(path).entries()]
    assert shapes == [{"T": 16, "I": 256}, {"T": 32, "I": 256}]
