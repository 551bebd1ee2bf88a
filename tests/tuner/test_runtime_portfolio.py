"""tilewise.runtime on a portfolio table (``tilewise export --portfolio K``): lookups answer by
the portfolio's selection rule, as PortfolioGroup.choose and the compiled C header do."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from tests_support import (
    LAG,
    PORTFOLIO_SHAPES,
    RULES,
    TWIN,
    c_compilers,
    portfolio_best,
    portfolio_driver_answers,
    portfolio_tuned_set,
)

from tilewise import store as st
from tilewise.export import (
    TableFormatError,
    dump_document,
    load_portfolio,
    portfolio_document,
    render_header,
    table_document,
)
from tilewise.runtime import TilingTable
from tilewise.types import Shape, Tiling

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def docs(store: st.Store) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plain table and the portfolio table (k=2) of the synthetic record set, the
    portfolio with the op's default as a third member, taken by one tuned shape."""
    with store.session() as session:
        portfolio_tuned_set(session)
    with store.session() as session:
        plain = table_document(session, op=LAG.name)
        doc, _ = portfolio_document(session, op=LAG.name, k=2, within=0.05)
    group = doc["portfolio"]["groups"][0]
    group["members"].append({"relative": None, "origin": None})
    group["shapes"][1].update(member=2, tiling=None)
    shape = Shape(group["shapes"][1]["shape"])
    (entry,) = [e for e in doc["entries"] if e["shape"] == dict(shape)]
    default = LAG.default_tiling(shape, "float32", TWIN)
    entry.update(tiling=dict(default), relative=dict(RULES.relative(default, shape)))
    entry["is_default"] = True
    return plain, json.loads(dump_document(doc))


def _asked() -> list[Shape]:
    rng = random.Random(11)
    asked = list(PORTFOLIO_SHAPES)
    for _ in range(300):
        asked.append(Shape({d: max(1, int(2 ** rng.uniform(3, 12))) for d in LAG.dims}))
    asked.append(Shape({"M": 3000, "N": 3, "K": 5000}))
    return asked


def _ask(table: TilingTable, shape: Shape) -> Any:
    return table.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=dict(shape))


def test_lookups_answer_by_the_portfolio_as_choose_does(
    docs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    plain, doc = docs
    (portfolio,) = load_portfolio(doc)
    table = TilingTable.from_document(doc)
    assert table.rejected == [] and table.portfolios() == [(LAG.name, "cpu-twin", "float32", 3, 4)]
    assert TilingTable.from_document(plain).portfolios() == []
    entries = {Shape(e["shape"]): e["tiling"] for e in doc["entries"]}
    seen = set()
    for shape in _asked():
        answer = _ask(table, shape)
        member, tiling = portfolio.choose(LAG, TWIN, shape)
        assert (answer.rule, answer.member) == ("portfolio", member), shape
        seen.add(member)
        if shape in entries:
            assert answer.source == "exact" and answer.distance == 0.0
            assert dict(answer.tiling) == entries[shape]  # what the table's entry holds
        elif tiling is None:
            assert answer.source == "default" and answer.distance is not None
        else:
            assert answer.source == "nearest" and answer.distance is not None
        expected = tiling or LAG.default_tiling(shape, "float32", TWIN)
        assert answer.tiling == expected, shape
        assert answer.workload is not None and answer.workload.shape in PORTFOLIO_SHAPES
    assert seen == {0, 1, 2}
    # Tuned shape 0's tuned tiling does not come back from its relative form: the portfolio
    # answers it as tuned (and measured), not re-derived.
    origin = PORTFOLIO_SHAPES[0]
    assert _ask(table, origin).tiling != RULES.derive(
        RULES.relative(_ask(table, origin).tiling, origin), origin
    )
    # The untuned shapes were counted as misses, with their sources.
    misses = {m.shape: m.source for m in table.misses()}
    assert len(misses) == len({s for s in _asked() if s not in entries})
    assert set(misses.values()) <= {"nearest", "default"}


@pytest.mark.skipif(not c_compilers(), reason="no C compiler")
def test_lookups_agree_with_the_compiled_header(
    docs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    _, doc = docs
    table = TilingTable.from_document(doc)
    header = tmp_path / "lag.h"
    header.write_text(render_header(doc, op=LAG.name))
    asked = _asked()
    text = "".join(f"cpu-twin float32 {' '.join(str(s[d]) for d in LAG.dims)}\n" for s in asked)
    members = doc["portfolio"]["groups"][0]["members"]
    expected = []
    for shape in asked:
        answer = _ask(table, shape)
        # The header answers 0, "use your default", where Python answers the default.
        default = answer.source == "default" or (
            answer.source == "exact" and members[answer.member]["relative"] is None
        )
        if default:
            assert answer.tiling == LAG.default_tiling(shape, "float32", TWIN)
        fields = [answer.tiling[f] for f in RULES.fields]
        expected.append([answer.member, 0] if default else [answer.member, 1, *fields])
    assert any(e[1] == 0 for e in expected) and any(e[1] == 1 for e in expected)
    for compiler, got in portfolio_driver_answers(header, tmp_path, text):
        assert got == expected, compiler


def test_an_older_portfolio_without_tilings_re_derives_at_tuned_shapes(
    docs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, doc = docs
    for item in doc["portfolio"]["groups"][0]["shapes"]:
        del item["tiling"]
    table = TilingTable.from_document(doc)
    (portfolio,) = load_portfolio(doc)
    origin = PORTFOLIO_SHAPES[0]
    relative = Tiling(doc["portfolio"]["groups"][0]["members"][0]["relative"])
    assert portfolio.choose(LAG, TWIN, origin) == (0, RULES.derive(relative, origin))
    answer = _ask(table, origin)
    assert (answer.source, answer.member) == ("exact", 0)
    assert answer.tiling == RULES.derive(relative, origin) != portfolio_best(origin)


def _without_base_m(group: dict[str, Any]) -> None:
    """Every member and tiling without baseM: the same fields throughout, not the op's."""
    for item in [m["relative"] for m in group["members"]] + [s["tiling"] for s in group["shapes"]]:
        if item is not None:
            del item["baseM"]


def _bad(doc: dict[str, Any], change: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    change(out["portfolio"]["groups"][0])
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g["shapes"][0].update(member=7), r"groups\[0\]\.shapes\[0\]\.member: 7"),
        (lambda g: g.update(members=[]), r"groups\[0\]\.members: expected a non-empty list"),
        (
            _without_base_m,
            r"groups\[0\]\.members\[0\]\.relative: fields .* are not the tiling fields",
        ),
        (
            lambda g: g["shapes"][0]["shape"].pop("K"),
            r"groups\[0\]\.shapes\[0\]\.shape: not a shape of linear_add_gelu",
        ),
        (lambda g: g.update(dtype="int4"), r"groups\[0\]\.dtype: 'int4' is not a dtype"),
        (
            lambda g: g["shapes"][0].update(tiling={"baseM": 1}),
            r"groups\[0\]\.shapes\[0\]\.tiling: not the fields of its member",
        ),
    ],
)
def test_a_malformed_portfolio_is_refused_naming_the_field(
    docs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path, change: Any, message: str
) -> None:
    _, doc = docs
    bad = _bad(doc, change)
    with pytest.raises(TableFormatError, match=message):
        TilingTable.from_document(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(TableFormatError, match=f"{path}: portfolio.{message}"):
        TilingTable.from_file(path)


def test_a_second_portfolio_for_a_group_is_refused(
    docs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, doc = docs
    groups = doc["portfolio"]["groups"]
    groups.append(copy.deepcopy(groups[0]))
    with pytest.raises(TableFormatError, match=r"groups\[1\]: a second portfolio"):
        TilingTable.from_document(doc)


def test_a_portfolio_of_another_op_version_is_left_out(
    docs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, doc = docs
    doc["portfolio"]["groups"][0]["op_version"] = "0" * 12
    table = TilingTable.from_document(doc)
    assert table.portfolios() == []
    assert _ask(table, PORTFOLIO_SHAPES[0]).rule == "exact"
