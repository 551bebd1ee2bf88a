"""tilewise.runtime: loading tiling tables and answering lookups exact / nearest / default."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests_support import host_toolchain

from tilewise import store as st
from tilewise.errors import InputError, StoreError
from tilewise.export import (
    FORMAT,
    FORMAT_VERSION,
    TableFormatError,
    dump_document,
    parse_table,
)
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import Answer, TilingTable
from tilewise.runtime._group import nearest_first
from tilewise.types import Shape, Tiling, Workload

LAG = get_op("linear_add_gelu")
SRD = get_op("scale_relu_dropout")
TWIN = get_target("cpu-twin")


def entry(
    op: str,
    shape: dict[str, int],
    *,
    target: str = "cpu-twin",
    dtype: str = "float32",
    tiling: dict[str, int] | None = None,
    latency: float = 100.0,
    version: str | None = None,
) -> dict[str, Any]:
    spec = get_op(op)
    if tiling is None:
        tiling = dict(spec.default_tiling(Shape(shape), dtype, get_target(target)))
    relative = None
    if set(tiling) == set(spec.carry_rules(dtype, get_target(target)).fields):
        rules = spec.carry_rules(dtype, get_target(target))
        relative = dict(rules.relative(Tiling(tiling), Shape(shape)))
    return {
        "op": op,
        "op_version": spec.version if version is None else version,
        "target": target,
        "dtype": dtype,
        "shape": shape,
        "tiling": tiling,
        "relative": relative,
        "latency_us": latency,
        "default_latency_us": latency * 1.5,
        "speedup": 1.5,
        "evaluations": 40,
    }


def document(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator": "test",
        "generated_at": "2026-05-22T10:00:00+00:00",
        "filters": {"op": None, "target": None, "dtype": None},
        "entries": list(entries),
    }


def lag(m: int, n: int = 512, k: int = 256) -> dict[str, int]:
    return {"M": m, "N": n, "K": k}


def winner(op: str, shape: dict[str, int], dtype: str = "float32") -> dict[str, int]:
    """A tune's winner that is not the default tiling: the default with one choice changed (the
    iteration order of a matmul, the queue depth of a vector op), valid all the same."""
    spec = get_op(op)
    default = spec.default_tiling(Shape(shape), dtype, TWIN)
    field = "iterateOrder" if "iterateOrder" in default else "bufferNum"
    tiling = default.replace(**{field: 3 - default[field] if field == "bufferNum" else 1})
    assert tiling != default and spec.valid(tiling, Shape(shape), dtype, TWIN)
    return dict(tiling)


@pytest.fixture
def table() -> TilingTable:
    return TilingTable.from_document(
        document(
            entry("linear_add_gelu", lag(128), latency=10.0, tiling=winner(LAG.name, lag(128))),
            entry("linear_add_gelu", lag(1024), latency=50.0, tiling=winner(LAG.name, lag(1024))),
            entry("scale_relu_dropout", {"N": 65536}),
        )
    )


def ask(table: TilingTable, shape: dict[str, int], **kw: str) -> Answer:
    op = "linear_add_gelu" if "M" in shape else "scale_relu_dropout"
    return table.lookup(
        op, target=kw.get("target", "cpu-twin"), dtype=kw.get("dtype", "float32"), shape=shape
    )


def test_import_is_light() -> None:
    code = (
        "import sys, tilewise.runtime\n"
        "t = tilewise.runtime.TilingTable([])\n"
        "t.lookup('scale_relu_dropout', target='cpu-twin', dtype='float32', shape={'N': 4096})\n"
        "print(sorted(m for m in ('optuna', 'fastapi', 'sqlalchemy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_exact_answer_names_its_workload(table: TilingTable) -> None:
    answer = ask(table, lag(1024))
    assert answer.source == "exact"
    assert answer.tiling == winner(LAG.name, lag(1024))
    assert answer.workload == Workload(
        "linear_add_gelu", LAG.version, "cpu-twin", "float32", Shape(lag(1024))
    )
    assert answer.latency_us == 50.0 and answer.distance == 0.0
    assert answer.to_dict()["workload"]["shape"] == lag(1024)


def test_nearest_answer_is_valid_for_the_asked_shape(table: TilingTable) -> None:
    answer = ask(table, lag(1000))
    assert answer.source == "nearest" and answer.rule == "carried"
    assert answer.workload is not None and answer.workload.shape == Shape(lag(1024))
    assert answer.distance == pytest.approx(abs(10 - __import__("math").log2(1000)))
    assert LAG.check(answer.tiling, Shape(lag(1000)), "float32", TWIN).valid
    tuned = Tiling(winner(LAG.name, lag(1024)))
    assert answer.tiling == LAG.carry(tuned, Shape(lag(1024)), Shape(lag(1000)), "float32", TWIN)
    assert answer.to_dict()["rule"] == "carried"


def test_nearest_carries_the_core_split_over(table: TilingTable) -> None:
    # M=200 is nearer to 128 (log2 distance 0.64) than to 1024 (2.36). The tiling tuned for
    # M=128 splits M in 3 pieces of 48 rows and N in 16; copied, 5 × 16 tiles would need 80
    # vector cores (the target has 48); carried, M=200 is cut in 3 pieces again, of 80 rows.
    asked = Shape(lag(200))
    closer = Tiling(winner(LAG.name, lag(128)))
    assert closer["singleCoreM"] == 48
    assert not LAG.check(closer, asked, "float32", TWIN).valid
    answer = ask(table, lag(200))
    assert (answer.source, answer.rule) == ("nearest", "carried")
    assert answer.workload is not None and answer.workload.shape == Shape(lag(128))
    assert answer.tiling == closer.replace(singleCoreM=80)
    assert LAG.check(answer.tiling, asked, "float32", TWIN).valid


LN_WHOLE = {"R": 4096, "H": 4096}
#: One whole row of 4096 per UB tile, single-buffered: valid at H=4096, and carried to a longer
#: row still one whole row per tile, which outgrows UB by H=12000 (the row's buffers alone).
WHOLE_ROW = {"rowsPerTile": 1, "hTile": 4096, "blockDim": 48, "bufferNum": 1}
LN_CHUNKED = {"R": 4096, "H": 40000}  # rows in chunks of 4096


def ln_entry(shape: dict[str, int], tiling: dict[str, int] | None = None) -> dict[str, Any]:
    return entry("layernorm_gelu", shape, tiling=tiling or winner("layernorm_gelu", shape))


def ln(h: int) -> dict[str, int]:
    return {"R": 4096, "H": h}


def ask_ln(table: TilingTable, h: int) -> Answer:
    return table.lookup("layernorm_gelu", target="cpu-twin", dtype="float32", shape=ln(h))


def test_nearest_skips_a_closer_entry_whose_carried_tiling_is_invalid() -> None:
    spec, asked = get_op("layernorm_gelu"), Shape(ln(12000))
    assert spec.valid(Tiling(WHOLE_ROW), Shape(LN_WHOLE), "float32", TWIN)
    carried = spec.carry(Tiling(WHOLE_ROW), Shape(LN_WHOLE), asked, "float32", TWIN)
    assert carried is not None and carried["hTile"] == 12000
    assert not spec.valid(carried, asked, "float32", TWIN)
    table = TilingTable.from_document(document(ln_entry(LN_WHOLE, WHOLE_ROW), ln_entry(LN_CHUNKED)))
    # H=12000 is 1.55 log2 steps from 4096 and 1.74 from 40000: the farther entry answers.
    answer = ask_ln(table, 12000)
    assert (answer.source, answer.rule) == ("nearest", "carried")
    assert answer.workload is not None and answer.workload.shape == Shape(LN_CHUNKED)
    assert answer.distance == pytest.approx(math.log2(40000 / 12000))
    assert answer.tiling["hTile"] == 4096 and spec.valid(answer.tiling, asked, "float32", TWIN)


def test_a_tuned_default_carries_over_as_the_default() -> None:
    """Where the tune found nothing faster than the default, the default is what carries over:
    the asked shape's own default tiling, not the neighbour's default re-derived."""
    table = TilingTable.from_document(document(entry("linear_add_gelu", lag(128))))
    assert ask(table, lag(128)).source == "exact"
    answer = ask(table, lag(200))
    assert (answer.source, answer.rule) == ("default", "kept_default")
    assert answer.tiling == LAG.default_tiling(Shape(lag(200)), "float32", TWIN)
    assert answer.workload is not None and answer.workload.shape == Shape(lag(128))
    assert answer.distance == pytest.approx(math.log2(200 / 128))
    carried = LAG.carry(
        LAG.default_tiling(Shape(lag(128)), "float32", TWIN),
        Shape(lag(128)),
        Shape(lag(200)),
        "float32",
        TWIN,
    )
    assert carried != answer.tiling  # what the carry rules alone would have answered


def test_the_tables_is_default_is_what_counts() -> None:
    """A version-2 entry says whether its tiling is the default; the reader takes its word (both
    answers are valid tilings: the default, or the carried tiling after the checks)."""
    said_default = {**entry("linear_add_gelu", lag(128), tiling=winner(LAG.name, lag(128)))}
    said_default["is_default"] = True
    answer = ask(TilingTable.from_document(document(said_default)), lag(200))
    assert (answer.source, answer.rule) == ("default", "kept_default")
    said_tuned = {**entry("linear_add_gelu", lag(128)), "is_default": False}
    answer = ask(TilingTable.from_document(document(said_tuned)), lag(200))
    assert (answer.source, answer.rule) == ("nearest", "carried")
    # Version 1 has no such key: found out from the op spec.
    v1 = {**document(said_tuned), "format_version": 1}
    answer = ask(TilingTable.from_document(v1), lag(200))
    assert (answer.source, answer.rule) == ("default", "kept_default")


def test_default_when_no_entry_is_valid_or_near() -> None:
    spec = get_op("layernorm_gelu")
    table = TilingTable.from_document(document(ln_entry(LN_WHOLE, WHOLE_ROW)))
    answer = ask_ln(table, 12000)  # the only entry's carried tiling overflows UB
    assert answer.source == "default" and answer.workload is None and answer.latency_us is None
    assert answer.rule == "default"
    assert answer.tiling == spec.default_tiling(Shape(ln(12000)), "float32", TWIN)
    assert ask_ln(table, 8000).source == "nearest"  # a whole row of 8000 still fits
    # Nothing tuned for this target or dtype at all: default.
    table = TilingTable.from_document(document(entry("linear_add_gelu", lag(128))))
    other = ask(table, lag(128), target="ascend910b4")
    assert other.source == "default"
    assert other.tiling == LAG.default_tiling(Shape(lag(128)), "float32", get_target("ascend910b4"))
    assert ask(table, lag(128), dtype="float16").source == "default"


def test_max_candidates_bounds_the_walk() -> None:
    doc = document(ln_entry(LN_WHOLE, WHOLE_ROW), ln_entry(LN_CHUNKED))
    assert ask_ln(TilingTable.from_document(doc, max_candidates=1), 12000).source == "default"
    assert ask_ln(TilingTable.from_document(doc, max_candidates=2), 12000).source == "nearest"


def test_the_walk_follows_a_stable_sort_of_the_distances() -> None:
    rng = np.random.default_rng(5)
    # Many ties (a few distinct values) and a limit below and above the length.
    distance = rng.integers(0, 6, size=200).astype(np.float64)
    for limit in (1, 17, 200, 500):
        walked = list(nearest_first(distance.copy(), limit))
        order = np.argsort(distance, kind="stable")[:limit]
        assert [i for i, _ in walked] == order.tolist()
        assert [d for _, d in walked] == distance[order].tolist()


def test_ties_go_to_the_smaller_shape() -> None:
    doc = document(
        entry(
            "scale_relu_dropout",
            {"N": 4096},
            tiling={"tileLength": 1024, "blockDim": 8, "bufferNum": 2},
        ),
        entry(
            "scale_relu_dropout",
            {"N": 16384},
            tiling={"tileLength": 2048, "blockDim": 8, "bufferNum": 2},
        ),
    )
    answer = ask(TilingTable.from_document(doc), {"N": 8192})
    assert answer.source == "nearest" and answer.distance == 1.0
    assert answer.workload is not None and answer.workload.shape == Shape({"N": 4096})


def test_answers_are_cached_and_names_are_canonicalized(table: TilingTable) -> None:
    first = ask(table, lag(1000))
    assert ask(table, lag(1000)) is first
    assert ask(table, lag(1000), target="CPU-Twin") is first
    assert ask(table, {"K": 256, "N": 512, "M": 1024}).source == "exact"


def test_cache_is_bounded() -> None:
    table = TilingTable.from_document(
        document(entry("scale_relu_dropout", {"N": 65536})), cache_size=3
    )
    answers = [ask(table, {"N": n}) for n in (1000, 2000, 3000, 4000)]
    assert ask(table, {"N": 4000}) is answers[-1]
    assert ask(table, {"N": 1000}) is not answers[0]  # evicted, computed again
    assert ask(table, {"N": 1000}) == answers[0]


@pytest.mark.parametrize(
    ("op", "kw", "message"),
    [
        ("matmul", {}, "unknown op 'matmul'"),
        ("linear_add_gelu", {"dtype": "int8"}, "unknown dtype 'int8'"),
        ("linear_add_gelu", {"target": "gpu"}, "unknown target 'gpu'"),
        ("linear_add_gelu", {"shape": {"M": 4, "N": 4}}, "missing dim K"),
        ("linear_add_gelu", {"shape": {"M": 1024, "N": 512, "K": 256, "Z": 1}}, "unknown dim Z"),
        ("linear_add_gelu", {"shape": {"M": 0, "N": 512, "K": 256}}, "M must be positive"),
        ("linear_add_gelu", {"shape": {"M": 1024.5, "N": 512, "K": 256}}, "must be an integer"),
        ("linear_add_gelu", {"shape": {"M": [1], "N": 512, "K": 256}}, "must be an integer"),
        ("linear_add_gelu", {"shape": {"M": 1 << 30, "N": 512, "K": 256}}, "exceeds the limit"),
        # Names that cannot be dict keys (a JSON object where a name belongs).
        ({"linear": 1}, {}, "unknown op"),
        ("linear_add_gelu", {"target": {"cpu": 1}}, "a target is named by a string"),
        ("linear_add_gelu", {"dtype": ["float32"]}, "a dtype is named by a string"),
    ],
)
def test_bad_lookups_are_input_errors(
    table: TilingTable, op: str, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        table.lookup(
            op,
            target=kw.get("target", "cpu-twin"),
            dtype=kw.get("dtype", "float32"),
            shape=kw.get("shape", lag(1024)),
        )


def test_other_op_versions_and_unknown_ops_are_left_out() -> None:
    stale = entry("linear_add_gelu", lag(1024), version="0ld0ld0ld0ld")
    unknown = {**entry("scale_relu_dropout", {"N": 4096}), "op": "softmax_v9"}
    table = TilingTable.from_document(document(stale, unknown, entry("linear_add_gelu", lag(64))))
    assert len(table) == 1
    assert table.skipped == {"other op version": 1, "unknown op or target": 1}
    assert table.groups() == [("linear_add_gelu", "cpu-twin", "float32", 1)]
    assert ask(table, lag(1024)).source != "exact"


def test_an_entry_whose_tiling_fields_are_not_the_ops_tunables_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = entry("scale_relu_dropout", {"N": 4096}, tiling={"tileLength": 1024, "blockDim": 8})
    good = entry("linear_add_gelu", lag(64))
    table = TilingTable.from_document(document(bad, good), source="t.json")
    assert len(table) == 1 and table.skipped == {"invalid entry": 1}
    [message] = table.rejected
    assert "scale_relu_dropout cpu-twin float32 {'N': 4096}" in message
    assert "not the op's tunables" in message
    assert ask(table, lag(64)).source == "exact"
    assert ask(table, {"N": 4096}).source == "default"
    assert "t.json: 1 invalid entries left out" in caplog.text and message in caplog.text


def test_json_file_round_trip(tmp_path: Path, table: TilingTable) -> None:
    doc = document(
        entry("linear_add_gelu", lag(128), latency=10.0, tiling=winner(LAG.name, lag(128))),
        entry("linear_add_gelu", lag(1024), latency=50.0, tiling=winner(LAG.name, lag(1024))),
        entry("scale_relu_dropout", {"N": 65536}),
    )
    path = tmp_path / "table.json"
    path.write_text(dump_document(doc))
    assert json.loads(path.read_text()) == doc
    loaded = TilingTable.from_file(path)
    for shape in (lag(128), lag(1024), lag(1000), lag(200), lag(9999), {"N": 3}, {"N": 65536}):
        assert ask(loaded, shape) == ask(table, shape)


def test_a_version_1_table_loads_and_carries_as_version_2_does(tmp_path: Path) -> None:
    """Format version 1 has no relative forms: the reader derives them from the op spec (a
    ``relative`` key there is not part of the format and is ignored)."""
    v2 = document(
        entry("linear_add_gelu", lag(128), latency=10.0),
        entry("linear_add_gelu", lag(1024), latency=50.0),
        ln_entry(LN_WHOLE, WHOLE_ROW),
        ln_entry(LN_CHUNKED),
        entry("scale_relu_dropout", {"N": 65536}),
    )
    v1 = {**v2, "format_version": 1, "entries": [dict(e) for e in v2["entries"]]}
    for e in v1["entries"]:
        del e["relative"]
    v1["entries"][0]["relative"] = {"singleCoreM": "not read"}
    path = tmp_path / "v1.json"
    path.write_text(dump_document(v1))
    [first, *_], rejected = parse_table(path.read_text())
    assert rejected == [] and first.relative is None
    old, new = TilingTable.from_file(path), TilingTable.from_document(v2)
    assert old.skipped == {} and len(old) == len(new) == 5
    asked = [lag(128), lag(1000), lag(200), lag(9999, 64, 64), {"N": 3}, {"N": 70000}]
    for shape in asked:
        assert ask(old, shape) == ask(new, shape)
    for h in (4096, 3000, 12000, 100000):
        assert ask_ln(old, h) == ask_ln(new, h)
    assert ask(old, lag(200)).rule == "kept_default"
    assert [ask_ln(old, h).source for h in (4096, 12000)] == ["exact", "nearest"]
    # Version 2 keeps what it was given: its entries hold the relative forms.
    [first, *_], _ = parse_table(dump_document(v2))
    assert first.relative is not None and first.relative["singleCoreM"] == 3  # 128 in 3 pieces


def test_empty_document_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text(dump_document(document()))
    assert len(TilingTable.from_file(path)) == 0


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read tiling table"):
        TilingTable.from_file(tmp_path / "nope.json")


def test_a_sqlite_file_given_as_a_table_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tuned.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(TableFormatError, match=f"did you mean sqlite:///{path}"):
        TilingTable.from_file(path)


def _text(doc: dict[str, Any]) -> str:
    return dump_document(doc)


def _with(**changes: Any) -> str:
    e = entry("scale_relu_dropout", {"N": 4096})
    for path, value in changes.items():
        target: dict[str, Any] = e
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[p]
        target[leaf] = value
    return _text(document(e))


BAD_DOCUMENTS = [
    (
        _text(document(entry("scale_relu_dropout", {"N": 4096})))[:150],
        r"not valid JSON \(truncated\?\)",
    ),
    ("", r"not valid JSON \(an empty document\)"),
    ("hello", r"not valid JSON: Expecting value"),  # no "truncated?": it failed at the start
    ("[]", "expected a JSON object, got a list"),
    ('{"format": "other"}', "not a tilewise tiling table"),
    (
        _text({**document(), "format_version": 3}),
        "format version 3 is not supported; this tilewise",
    ),
    (_text({**document(), "format_version": 3}), "reads versions 1, 2; upgrade tilewise"),
    (_text({**document(), "format_version": 0}), "version 0 is not supported.*export the table"),
    (_text({**document(), "format_version": "1"}), "format version '1' is not supported"),
    (_text({**document(), "format_version": True}), "format version True is not supported"),
    (_text({k: v for k, v in document().items() if k != "format_version"}), "version None"),
    (json.dumps({**document(), "entries": {}}), "'entries' must be a list"),
    (
        _text(document(entry("scale_relu_dropout", {"N": 4096}))).replace("100.0,", "NaN,", 1),
        "NaN is not a number",
    ),
    (
        _text(document(entry("scale_relu_dropout", {"N": 4096}))).replace("4096", "9" * 5000, 1),
        "not valid JSON",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_DOCUMENTS, ids=[m for _, m in BAD_DOCUMENTS])
def test_invalid_documents_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TableFormatError, match=message) as caught:
        TilingTable.from_file(path)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, InputError)


BAD_ENTRIES = [
    (_with(shape__N="4096"), r"entries\[0\].shape.N: expected an integer, got '4096'"),
    (_with(shape__N=4096.0), r"entries\[0\].shape.N: expected an integer, got 4096.0"),
    (_with(shape__N=True), "shape.N: expected an integer, got True"),
    (_with(shape__N=-4), r"shape.N: -4 is outside 0..16777216"),
    (_with(shape__N=0), r"scale_relu_dropout .*dim N must be positive, got 0"),
    (_with(shape__N=2**40), r"shape.N: 1099511627776 is outside"),
    (_with(shape={}), "shape: expected a non-empty object"),
    (_with(tiling__tileLength=1.5), "tiling.tileLength: expected an integer"),
    (_with(tiling__tileLength=2**31), "tiling.tileLength: 2147483648 is outside"),
    (
        _with(tiling__tileLength=10**50),
        "tiling.tileLength: 1000000000000000000000000000000000000...",
    ),
    (_with(**{"tiling__bad name": 1}), "'bad name' is not an identifier"),
    (_with(latency_us="fast"), "latency_us: expected a number, got 'fast'"),
    (_with(latency_us=None), "latency_us: expected a number, got None"),
    (_with(latency_us=-1.0), r"latency_us: -1.0 is outside \(0, 1e\+15\]"),
    (_with(latency_us=1e300), "latency_us: 1e\\+300 is outside"),
    (_with(speedup=0), "speedup: 0 is outside"),
    (_with(evaluations=-1), "evaluations: -1 is outside"),
    (_with(evaluations=2.0), "evaluations: expected an integer"),
    (_with(op=""), "op: expected a non-empty string"),
    (_with(dtype="float7"), "float7 .*not a dtype and shape of scale_relu_dropout"),
    (_with(shape={"M": 4096}), "not a dtype and shape of scale_relu_dropout"),
    (_with(tiling__extra=1, relative__extra=1), "are not the op's tunables"),
    (_with(tiling__extra=1), "relative: fields blockDim, bufferNum, tileLength are not the"),
    (_with(relative={"tileLength": 256}), "relative: fields tileLength are not the tiling's"),
    (_with(relative__tileLength="256"), "relative.tileLength: expected an integer"),
    (_with(relative=[]), "relative: expected a non-empty object, got a list"),
    (_with(is_default="yes"), "is_default: expected true, false or null, got 'yes'"),
    (_with(carry_slower=1), "carry_slower: expected true, false or null, got 1"),
    (_with(carry_gain=-1), r"carry_gain: -1 is outside \(0, 1e\+15\]"),
    (_with(carry_gain="fast"), "carry_gain: expected a number, got 'fast'"),
    (
        _with(relative__tileLength=1),
        r"relative tileLength=1 disagrees with the op's carry rules \(tileLength=\d+\)",
    ),
    (_with(tiling__tileLength=1 << 30), "tileLength=1073741824 is outside its domain"),
    (
        _with(tiling__tileLength=999, relative__tileLength=999),
        "tiling fails the op's checks: tileLength 999 is not a multiple of",
    ),
    (
        _with(tiling__tileLength=999, relative=None),
        "tiling fails the op's checks: tileLength 999 is not a multiple of",
    ),
    (_with(target="CPU-Twin"), "target 'CPU-Twin' is not a canonical target name"),
    (_with(dtype=3), "dtype: expected a non-empty string"),
    (_with(target="x" * 300), "at most 200 characters"),
    (_text(document(*[entry("scale_relu_dropout", {"N": 4096})] * 2)), "a second entry for"),
    (
        _text({**document(), "entries": [["not", "an", "object"]]}),
        r"entries\[0\]: expected an object, got a list",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_ENTRIES, ids=[m for _, m in BAD_ENTRIES])
def test_an_invalid_entry_is_left_out_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, message: str
) -> None:
    """The bad entry is counted and named; a good one beside it still answers."""
    doc = json.loads(text)
    good = entry("linear_add_gelu", lag(64))
    doc["entries"].append(good)
    path = tmp_path / "one-bad.json"
    path.write_text(json.dumps(doc))
    table = TilingTable.from_file(path)
    assert table.skipped == {"invalid entry": 1}
    [rejected] = table.rejected
    assert re.search(message, rejected), rejected
    assert str(path) in caplog.text and rejected in caplog.text
    assert len(table) == len(doc["entries"]) - 1
    assert ask(table, lag(64)) == ask(TilingTable.from_document(document(good)), lag(64))
    assert ask(table, lag(64)).source == "exact"


def test_rejected_messages_are_capped_and_counts_exact() -> None:
    bad = [entry("scale_relu_dropout", {"N": n}, tiling={"tileLength": 1}) for n in range(1, 251)]
    table = TilingTable.from_document(document(*bad))
    assert table.skipped == {"invalid entry": 250}
    assert len(table.rejected) == TilingTable.MAX_REJECTED_MESSAGES


def test_parse_table_accepts_integer_latencies() -> None:
    [e], rejected = parse_table(_with(latency_us=12, default_latency_us=None, speedup=None))
    assert rejected == []
    assert e.latency_us == 12.0 and isinstance(e.latency_us, float)
    assert e.default_latency_us is None and e.speedup is None


# ---------------------------------------------------------------------------------------------
# From the REST API


def _serving(
    doc: dict[str, Any], seen: list[httpx.Request], status: int = 200
) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if status != 200:
            return httpx.Response(status, json={"detail": "no such op"})
        return httpx.Response(200, text=dump_document(doc))

    return httpx.MockTransport(handle)


def test_from_url_one_op() -> None:
    seen: list[httpx.Request] = []
    doc = document(entry("linear_add_gelu", lag(1024)))
    table = TilingTable.from_url(
        "http://tw.example:8000/",
        op="linear_add_gelu",
        target="cpu-twin",
        dtype="float32",
        transport=_serving(doc, seen),
    )
    [request] = seen
    assert request.method == "GET"
    assert request.url.path == "/v1/tables/linear_add_gelu"
    assert dict(request.url.params) == {"format": "json", "target": "cpu-twin", "dtype": "float32"}
    assert ask(table, lag(1024)).source == "exact"


def test_from_url_every_op() -> None:
    seen: list[httpx.Request] = []
    doc = document(entry("linear_add_gelu", lag(1024)), entry("scale_relu_dropout", {"N": 4096}))
    table = TilingTable.from_url("http://tw.example/base", transport=_serving(doc, seen))
    assert seen[0].url.path == "/base/v1/tables"
    assert dict(seen[0].url.params) == {"format": "json"}
    assert len(table) == 2


def test_from_url_errors() -> None:
    with pytest.raises(StoreError, match=r"HTTP 404 no such op"):
        TilingTable.from_url("http://tw.example", op="x", transport=_serving(document(), [], 404))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(
        StoreError,
        match=re.escape("cannot fetch the tiling table from http://tw.example/v1/tables"),
    ):
        TilingTable.from_url("http://tw.example", transport=httpx.MockTransport(refuse))

    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text='{"format": "tilewise.tilings", "format_version": 7}')

    with pytest.raises(TableFormatError, match="version 7 is not supported"):
        TilingTable.from_url("http://tw.example", transport=httpx.MockTransport(garbage))
    with pytest.raises(StoreError, match="Invalid port: '80a0'"):
        TilingTable.from_url("http://localhost:80a0")


# ---------------------------------------------------------------------------------------------
# From the database


def _tune(
    session: Any, op: str, shape: dict[str, int], latency: float, *, dtype: str = "float32"
) -> Tiling:
    spec = get_op(op)
    workload = Workload(op, spec.version, "cpu-twin", dtype, Shape(shape))
    tiling = spec.default_tiling(Shape(shape), dtype, TWIN)
    row = st.commit_workload(session, workload)
    record = st.add_record(
        session,
        toolchain=host_toolchain(),
        workload_id=row.id,
        tiling=tiling,
        status="ok",
        latency_us=latency,
        source="search",
        env={"host": "test"},
    )
    st.upsert_tiling(
        session,
        toolchain=host_toolchain(),
        workload_id=row.id,
        record_id=record.id,
        tiling=tiling,
        latency_us=latency,
        default_latency_us=latency * 2,
        speedup=2.0,
        evaluations=12,
    )
    return tiling


def test_from_db(store: st.Store) -> None:
    with store.session() as session:
        tiling = _tune(session, "linear_add_gelu", lag(1024), 40.0)
        _tune(session, "scale_relu_dropout", {"N": 4096}, 5.0, dtype="float16")
    table = TilingTable.from_db(store.url)
    assert len(table) == 2
    answer = ask(table, lag(1024))
    assert answer.source == "exact" and answer.tiling == tiling and answer.latency_us == 40.0
    assert ask(table, {"N": 4096}, dtype="float16").source == "exact"
    only = TilingTable.from_db(store.url, op="scale_relu_dropout")
    assert only.groups() == [("scale_relu_dropout", "cpu-twin", "float16", 1)]


def test_from_db_never_creates_a_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        TilingTable.from_db(f"sqlite:///{tmp_path / 'none.db'}")
    assert not (tmp_path / "none.db").exists()


def test_lookups_from_many_threads(table: TilingTable) -> None:
    shapes = [{"N": n} for n in range(1000, 1000 + 64 * 16, 16)]
    expected = [
        ask(TilingTable.from_document(document(entry("scale_relu_dropout", {"N": 65536}))), s)
        for s in shapes
    ]
    results: list[list[Answer]] = []

    def work() -> None:
        results.append([ask(table, s) for s in shapes])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results)
