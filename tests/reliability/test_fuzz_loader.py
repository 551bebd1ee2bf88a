"""Bad tiling-table files: ``TilingTable.from_file`` (and ``from_url``) either load the table,
every entry kept or counted as skipped (each invalid one named in ``TilingTable.rejected``), or
raise one :class:`TableFormatError` naming what is wrong with the document as a whole: never
another exception, never an entry lost without a count, never a table whose lookups then crash.

Hypothesis starts from a valid exported document and breaks it: truncates it anywhere, replaces
any node (a version, a dim, a tiling value, an entry, the entry list) with any JSON value (wrong
types, huge integers, NaN and infinities, deep nesting, long strings), or sends bytes that are
not JSON at all.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.reliability._report import record
from tilewise.errors import InputError, StoreError
from tilewise.export import FORMAT, FORMAT_VERSION, TableFormatError, dump_document
from tilewise.kernels.ops import get_op, list_ops
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable
from tilewise.types import Shape

pytestmark = pytest.mark.reliability

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.generate],  # a failure as found: shrinking takes minutes
)

#: Two example shapes of every op (OpSpec.examples; a conv with pad=0 among them).
SHAPES: dict[str, list[dict[str, int]]] = {
    spec.name: [dict(shape) for shape in spec.example_shapes()[-2:]] for spec in list_ops()
}


def _entry(op: str, shape: dict[str, int], target: str, dtype: str) -> dict[str, Any]:
    spec = get_op(op)
    tiling = spec.default_tiling(Shape(shape), dtype, get_target(target))
    return {
        "op": op,
        "op_version": spec.version,
        "target": target,
        "dtype": dtype,
        "shape": shape,
        "tiling": dict(tiling),
        "latency_us": 120.5,
        "default_latency_us": 150.0,
        "speedup": 1.245,
        "evaluations": 40,
    }


def _document() -> dict[str, Any]:
    entries = [
        _entry(op, shape, target, dtype)
        for op, shapes in SHAPES.items()
        for shape in shapes
        for target, dtype in (("cpu-twin", "float32"), ("ascend910b1", "float16"))
    ]
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator": "test",
        "generated_at": "2026-11-22T10:00:00+00:00",
        "filters": {"op": None, "target": None, "dtype": None},
        "entries": entries,
    }


DOC = _document()
TEXT = dump_document(DOC)


class Seen:
    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.left_out = 0  # invalid entries left out of the tables that loaded


@pytest.fixture(scope="module")
def seen() -> Iterator[Seen]:
    tally = Seen()
    yield tally
    record(
        "fuzz: tiling-table loader",
        documents=tally.outcomes.total(),
        loaded=tally.outcomes["loaded"],
        invalid_entries_left_out=tally.left_out,
        refused=tally.outcomes["refused"],
        other_exceptions=0,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-loader")


def load(path: Path, data: bytes, seen: Seen) -> TilingTable | TableFormatError:
    """Load ``data`` from a file: a whole table, or the TableFormatError (nothing else)."""
    path.write_bytes(data)
    try:
        table = TilingTable.from_file(path)
    except TableFormatError as exc:
        assert isinstance(exc, InputError)
        message = str(exc)
        assert message.startswith(f"{path}: ") or str(path) in message or "tiling" in message
        assert "\n" not in message.strip() and len(message) < 2000, message[:500]
        seen.outcomes["refused"] += 1
        return exc
    seen.outcomes["loaded"] += 1
    seen.left_out += table.skipped.get("invalid entry", 0)
    return table


def assert_whole(table: TilingTable, doc: Any) -> None:
    """A loaded table holds every entry (kept or counted as skipped), and answers for each."""
    entries = doc["entries"]
    assert len(table) + sum(table.skipped.values()) == len(entries)
    assert len(table.rejected) == table.skipped.get("invalid entry", 0)
    keys = {"op", "target", "dtype", "shape"}
    for e in [e for e in entries if isinstance(e, dict) and keys <= set(e)][:4]:
        try:
            answer = table.lookup(e["op"], target=e["target"], dtype=e["dtype"], shape=e["shape"])
        except InputError:
            continue  # an op, target or shape this code does not take: the lookup says so
        assert answer.source in ("exact", "nearest", "default")
        # a nearby shape: the nearest answer checks candidates for it
        if not isinstance(e["shape"], dict):
            continue
        near = {d: v * 2 if isinstance(v, int) else v for d, v in e["shape"].items()}
        with contextlib.suppress(InputError):
            table.lookup(e["op"], target=e["target"], dtype=e["dtype"], shape=near)


def test_the_base_document_loads(workdir: Path, seen: Seen) -> None:
    table = load(workdir / "base.json", TEXT.encode(), seen)
    assert isinstance(table, TilingTable) and len(table) == len(DOC["entries"])


@FUZZ
@given(cut=st.integers(0, len(TEXT) - 1))
def test_a_truncated_file_is_refused(workdir: Path, seen: Seen, cut: int) -> None:
    data = TEXT[:cut]
    outcome = load(workdir / "truncated.json", data.encode(), seen)
    if data.rstrip() == TEXT.rstrip():
        assert isinstance(outcome, TilingTable)
        return
    assert isinstance(outcome, TableFormatError), f"loaded a file cut at {cut}"
    assert "not valid JSON" in str(outcome)


# Any JSON value, the hostile ones weighted in.
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**31 - 2, max_value=2**70),
    st.sampled_from([0, -1, 2**31, -(2**31) - 1, 10**30, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, 5e-324, -0.0]),
    st.text(max_size=20),
    st.text(min_size=190, max_size=400),
)
VALUE = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _paths(child, (*prefix, i))


PATHS = [p for p in _paths(DOC) if p]  # every node but the root


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _named(message: str, path: tuple[Any, ...]) -> bool:
    """Does the message point at the replaced node (its entry, key or the JSON at fault)?"""
    if path[0] == "entries" and len(path) > 1:
        entry = DOC["entries"][path[1]]
        return (
            f"entries[{path[1]}]" in message
            or (entry["op"] in message and str(path[-1]) in message)
            or "second entry" in message
        )
    return any(w in message for w in (str(path[0]), "format", "JSON"))


@settings(FUZZ, max_examples=600)
@given(path=st.sampled_from(PATHS), value=VALUE)
def test_any_node_replaced_by_any_value(
    workdir: Path, seen: Seen, path: tuple[Any, ...], value: Any
) -> None:
    doc = _replace(DOC, path, value)
    try:
        data = json.dumps(doc).encode()  # NaN and Infinity as Python writes them
    except ValueError:  # an integer too long to write: send its digits by hand
        data = TEXT.encode().replace(b"120.5", b"9" * 5000, 1)
    outcome = load(workdir / "mutated.json", data, seen)
    if isinstance(outcome, TilingTable):
        assert_whole(outcome, doc)
        for message in outcome.rejected:
            assert _named(message, path), (path, message[:300])
    elif "not valid JSON" in str(outcome):
        # Python wrote NaN, Infinity or thousands of digits: the message names that instead
        assert any(w in str(outcome) for w in ("NaN", "Infinity", "digits")), str(outcome)
        assert b"NaN" in data or b"Infinity" in data or b"9" * 5000 in data
    else:
        assert _named(str(outcome), path), (path, str(outcome)[:300])


@FUZZ
@given(
    depth=st.integers(2, 200_000),  # depth 1 in "entries" is an empty, valid table
    where=st.sampled_from(["top", "entries", "tiling"]),
)
def test_deep_nesting_is_refused_or_left_out(
    workdir: Path, seen: Seen, depth: int, where: str
) -> None:
    nest = "[" * depth + "]" * depth
    if where == "top":
        data = nest
    elif where == "entries":
        data = json.dumps({**DOC, "entries": "X"}).replace('"X"', nest)
    else:
        data = TEXT.replace('"tiling": {', f'"tiling": {{"deep": {nest}, ', 1)
    outcome = load(workdir / "deep.json", data.encode(), seen)
    if isinstance(outcome, TilingTable):
        # Shallow enough for the parser: the nested lists are entries (or a tiling value) that
        # are left out and named.
        assert where != "top"
        assert outcome.skipped["invalid entry"] >= 1
        assert all(m.startswith("entries[") for m in outcome.rejected), outcome.rejected[:3]
    else:
        assert isinstance(outcome, TableFormatError)


@FUZZ
@given(data=st.binary(max_size=2000))
def test_bytes_that_are_not_a_table(workdir: Path, seen: Seen, data: bytes) -> None:
    outcome = load(workdir / "bytes.json", data, seen)
    assert isinstance(outcome, TableFormatError)


@FUZZ
@given(
    status=st.sampled_from([200, 200, 200, 404, 500, 503]),
    body=st.one_of(st.binary(max_size=500), st.sampled_from([TEXT[:200].encode(), b"{}", b"[]"])),
)
def test_from_url_with_any_answer(seen: Seen, status: int, body: bytes) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    try:
        TilingTable.from_url("http://tables.test", transport=transport)
    except (TableFormatError, StoreError) as exc:
        seen.outcomes["refused"] += 1
        assert "http://tables.test/v1/tables" in str(exc)
        return
    raise AssertionError(f"loaded a table from HTTP {status} {body[:80]!r}")


TAMPERED = [
    ("dbL0C", 2**31 - 1),  # a nearest lookup built that many buffers
    ("stepM", 0),  # the checks divided by it
    ("baseM", -16),
    ("depthA1", 2**20),
]


@pytest.mark.parametrize(("field", "value"), TAMPERED, ids=[f for f, _ in TAMPERED])
def test_tiling_values_outside_their_domain_are_left_out(
    workdir: Path, seen: Seen, field: str, value: int
) -> None:
    """In int32 and named right, but no tuner writes them: left out at load and named, before a
    lookup reaches the op's checks with them; the other entries answer."""
    index = next(i for i, e in enumerate(DOC["entries"]) if e["op"] == "linear_add_gelu")
    doc = _replace(DOC, ("entries", index, "tiling", field), value)
    outcome = load(workdir / "tampered.json", json.dumps(doc).encode(), seen)
    assert isinstance(outcome, TilingTable)
    assert outcome.skipped == {"invalid entry": 1} and len(outcome) == len(DOC["entries"]) - 1
    [message] = outcome.rejected
    assert f"{field}={value}" in message and "outside its domain" in message
    assert_whole(outcome, doc)
