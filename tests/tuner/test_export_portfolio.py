"""`tilewise export --portfolio K`: the greedy set cover, the document the runtime loads, and the
header's members and selection compiled and asked as Python answers."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests_support import (
    PORTFOLIO_SHAPES,
    build_header_driver,
    c_compilers,
    host_toolchain,
    portfolio_best,
    portfolio_carried,
    portfolio_driver_answers,
    portfolio_record,
    portfolio_tuned_set,
    tuned_best_and_default,
)

from tilewise import store as st
from tilewise.errors import InputError
from tilewise.export import (
    TableFormatError,
    dump_document,
    greedy_cover,
    load_entries,
    load_portfolio,
    portfolio_document,
    render_header,
)
from tilewise.export._cover import assign, coverage
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable
from tilewise.types import Shape, Tiling, Workload

LAG = get_op("linear_add_gelu")
TWIN = get_target("cpu-twin")
RULES = LAG.carry_rules("float32", TWIN)
LOOKUP_DRIVER = Path(__file__).parent / "header_driver" / "driver.c"


# ---------------------------------------------------------------------------------------------
# The cover on a matrix


def test_greedy_cover_picks_the_known_answer() -> None:
    """Five shapes, four candidates: A covers 0-2, B 2-3, C 3-4, D 4. Greedy takes A (3 shapes),
    then C (two more); B would cover only shape 3 after A."""
    x = None
    latency = [
        # A     B     C     D
        [100.0, 130.0, x, x],
        [100.5, x, x, x],
        [104.0, 100.0, x, x],
        [120.0, 102.0, 100.0, x],
        [x, x, 103.0, 100.0],
    ]
    optimum = [100.0] * 5
    assert greedy_cover(latency, optimum, within=0.05, k=1) == [0]
    assert greedy_cover(latency, optimum, within=0.05, k=2) == [0, 2]
    assert greedy_cover(latency, optimum, within=0.05, k=8) == [0, 2]  # all covered: stops
    # Within 1% A covers 0 and 1, then B, C and D one shape each: C first (with it every shape
    # has a measured member), then B (mean 1.007 against D's 1.009), then D.
    assert greedy_cover(latency, optimum, within=0.01, k=8) == [0, 2, 1, 3]
    assert assign(latency, optimum, [0, 2]) == [0, 0, 0, 2, 2]
    # Nothing within 5% anywhere: one pick regardless, the lower mean slowdown.
    assert greedy_cover([[1.3, 1.2], [1.1, 1.4]], [1.0, 1.0], within=0.05, k=3) == [0]
    chosen, cov = coverage(latency, optimum, within=0.05, k=1)
    assert chosen == [0] and cov.members == 1 and cov.unmeasured == 1
    assert cov.within_5 == pytest.approx(3 / 5) and cov.within_2 == pytest.approx(2 / 5)
    assert cov.worst == pytest.approx(1.2)
    assert cov.mean == pytest.approx((1.0 + 1.005 + 1.04 + 1.2) / 4)


def test_greedy_cover_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        greedy_cover([[1.0]], [1.0], within=0.05, k=0)
    with pytest.raises(ValueError, match="within"):
        greedy_cover([[1.0]], [1.0], within=-0.1, k=1)
    with pytest.raises(ValueError, match="one row per shape"):
        greedy_cover([[1.0], [1.0, 2.0]], [1.0, 1.0], within=0.05, k=1)


# ---------------------------------------------------------------------------------------------
# The cover on records


def test_portfolio_of_a_synthetic_record_set(store: st.Store) -> None:
    with store.session() as session:
        portfolio_tuned_set(session)
    with store.session() as session:
        doc, (group,) = portfolio_document(session, op=LAG.name, k=2, within=0.05)
    relative = [RULES.relative(portfolio_best(s), s) for s in PORTFOLIO_SHAPES]
    # A first (covers 3; B too, but B leaves shape 3 unmeasured), then D over the default.
    assert [group.candidates[c].relative for c in group.chosen] == [relative[0], relative[3]]
    assert group.pairs == {"records": 13, "measured_now": 0, "not_measured": 7, "not_carried": 0}
    k1 = group.report[0]
    assert (k1.members, k1.within_5, k1.within_2, k1.unmeasured) == (1, 0.75, 0.5, 0)
    assert k1.worst == pytest.approx(1.2)
    assert k1.mean == pytest.approx((1.0 + 1.04 + 1.015 + 1.2) / 4)
    k2 = group.report[1]
    assert (k2.members, k2.within_5, k2.within_2, k2.worst) == (2, 1.0, 0.75, pytest.approx(1.04))
    assert group.report[7].members == 2  # every shape covered by two

    entries = {Shape(e["shape"]): e for e in doc["entries"]}
    for i, shape in enumerate(PORTFOLIO_SHAPES):
        member = 1 if i == 3 else 0
        source = PORTFOLIO_SHAPES[3] if i == 3 else PORTFOLIO_SHAPES[0]
        assert entries[shape]["member"] == member
        assert entries[shape]["tiling"] == dict(portfolio_carried(source, shape))
        assert entries[shape]["member_measured"] is True
    assert entries[PORTFOLIO_SHAPES[1]]["slowdown"] == pytest.approx(1.04)
    assert entries[PORTFOLIO_SHAPES[1]]["latency_us"] == 104.0
    assert entries[PORTFOLIO_SHAPES[1]]["speedup"] == pytest.approx(1.5 / 1.04)

    # The runtime loads it as any table: every tuned shape answers its member's tiling.
    table = TilingTable.from_document(json.loads(dump_document(doc)))
    assert table.rejected == [] and len(table) == 4
    for shape in PORTFOLIO_SHAPES:
        answer = table.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=shape)
        assert answer.source == "exact" and dict(answer.tiling) == entries[shape]["tiling"]
    (loaded,) = load_portfolio(doc)
    assert loaded.members == (relative[0], relative[3])
    assert loaded.choose(LAG, TWIN, PORTFOLIO_SHAPES[2]) == (
        0,
        portfolio_carried(PORTFOLIO_SHAPES[0], PORTFOLIO_SHAPES[2]),
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_shape_where_no_member_was_measured_says_so(store: st.Store) -> None:
    """Two tuned shapes, each best measured only at its own shape: one tiling cannot cover both
    within 5%, and the shape left out gets the member carried over, marked unmeasured."""
    two = PORTFOLIO_SHAPES[:2]
    with store.session() as session:
        for shape in two:
            workload = st.commit_workload(
                session, Workload(LAG.name, LAG.version, "cpu-twin", "float32", shape)
            )
            rid = portfolio_record(session, workload.id, portfolio_best(shape), 100.0)
            portfolio_record(
                session, workload.id, LAG.default_tiling(shape, "float32", TWIN), 150.0
            )
            st.upsert_tiling(
                session, workload_id=workload.id, record_id=rid, tiling=portfolio_best(shape),
                latency_us=100.0, default_latency_us=150.0, speedup=1.5, evaluations=2,
                toolchain=host_toolchain(),
            )  # fmt: skip
    with store.session() as session:
        doc, (group,) = portfolio_document(session, op=LAG.name, k=1, within=0.05)
    (member,) = group.chosen
    source = group.candidates[member].origin
    assert source in two
    (other,) = [s for s in two if s != source]
    entries = {Shape(e["shape"]): e for e in doc["entries"]}
    assert entries[other]["member_measured"] is False and entries[other]["slowdown"] is None
    assert entries[other]["tiling"] == dict(portfolio_carried(source, other))
    assert entries[other]["latency_us"] == 100.0  # the tuned latency: nothing else measured
    assert entries[other]["speedup"] is None
    assert entries[source]["member_measured"] is True and entries[source]["slowdown"] == 1.0
    (k1, k2) = group.report[:2]
    assert (k1.covered, k1.unmeasured, k2.covered, k2.members) == (0.5, 1, 1.0, 2)
    assert group.pairs == {"records": 4, "measured_now": 0, "not_measured": 2, "not_carried": 0}


def test_portfolio_bad_size(store: st.Store) -> None:
    with store.session() as session, pytest.raises(InputError, match="at least 1"):
        portfolio_document(session, op=LAG.name, k=0, within=0.05)


def test_a_malformed_portfolio_section_is_refused() -> None:
    doc = {
        "portfolio": {
            "k": 1,
            "within": 0.05,
            "groups": [
                {
                    "op": LAG.name,
                    "op_version": LAG.version,
                    "target": "cpu-twin",
                    "dtype": "float32",
                    "members": [{"relative": None, "origin": None}],
                    "shapes": [{"shape": dict(PORTFOLIO_SHAPES[0]), "member": 1}],
                }
            ],
        }
    }
    with pytest.raises(TableFormatError, match=r"groups\[0\]\.shapes\[0\]\.member: 1 is outside"):
        load_portfolio(doc)
    assert load_portfolio({}) == []


# ---------------------------------------------------------------------------------------------
# The header


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.skipif(not c_compilers(), reason="no C compiler")
def test_header_selects_the_member_python_selects(store: st.Store, tmp_path: Path) -> None:
    with store.session() as session:
        portfolio_tuned_set(session)
    with store.session() as session:
        doc, _ = portfolio_document(session, op=LAG.name, k=2, within=0.05)
    # The default as a third member, chosen by one shape: the header says "use your default".
    group = doc["portfolio"]["groups"][0]
    group["members"].append({"relative": None, "origin": None})
    group["shapes"][1].update(member=2, tiling=None)
    (portfolio,) = load_portfolio(doc)
    header = tmp_path / "lag.h"
    header.write_text(render_header(doc, op=LAG.name))
    assert "tilewise_linear_add_gelu_cpu_twin_float32_members[3][" in header.read_text()
    # A tuned shape's member is its entry's tiling (measured there), though at a member's own
    # tuned shape re-deriving it from its relative form would not give it back.
    entries = {Shape(e["shape"]): Tiling(e["tiling"]) for e in doc["entries"]}
    for shape in PORTFOLIO_SHAPES:
        member, tiling = portfolio.choose(LAG, TWIN, shape)
        assert tiling is None if member == 2 else tiling == entries[shape]
    origin = PORTFOLIO_SHAPES[0]
    assert portfolio.choose(LAG, TWIN, origin)[1] != RULES.derive(
        RULES.relative(entries[origin], origin), origin
    )

    rng = random.Random(7)
    asked = [tuple(s[d] for d in LAG.dims) for s in PORTFOLIO_SHAPES]
    for _ in range(300):
        asked.append(tuple(max(1, int(2 ** rng.uniform(3, 12))) for _ in LAG.dims))
    asked.append((3000, 3, 5000))
    lines = [("cpu-twin", "float32", a) for a in asked] + [("cpu-twin", "float16", asked[0])]
    text = "".join(f"{t} {d} {' '.join(map(str, a))}\n" for t, d, a in lines)
    fields = RULES.fields
    expected = []
    for a in asked:
        member, tiling = portfolio.choose(LAG, TWIN, dict(zip(LAG.dims, a, strict=True)))
        expected.append(
            [member, 0] if tiling is None else [member, 1, *(tiling[f] for f in fields)]
        )
    expected.append([-1, 0])  # no portfolio for float16
    assert {e[0] for e in expected[:-1]} == {0, 1, 2}  # the sweep meets every member
    for compiler, got in portfolio_driver_answers(header, tmp_path, text):
        assert got == expected, compiler

    # The header's lookup answers by the portfolio, as TilingTable.lookup does.
    table = TilingTable.from_document(doc)
    tuned = {tuple(s[d] for d in LAG.dims) for s in PORTFOLIO_SHAPES}
    lookups = []
    for a in asked:
        shape = dict(zip(LAG.dims, a, strict=True))
        answer = table.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=shape)
        _, tiling = portfolio.choose(LAG, TWIN, shape)
        assert answer.rule == "portfolio"
        if tiling is None:  # the header's "use your default"
            assert answer.tiling == LAG.default_tiling(Shape(shape), "float32", TWIN)
            lookups.append([0])
        else:
            assert answer.tiling == tiling
            lookups.append([2 if a in tuned else 1, *(tiling[f] for f in fields)])
    lookups.append([0])  # nothing for float16
    assert {line[0] for line in lookups} == {0, 1, 2}
    for compiler, std in c_compilers():
        exe = build_header_driver(
            header,
            LOOKUP_DRIVER,
            tmp_path / f"lookup-{Path(compiler).name}",
            compiler,
            std,
            LAG.name,
            {"TW_LOOKUP": f"tilewise_{LAG.name}_lookup"},
        )
        done = subprocess.run(
            [str(exe)], input=text, capture_output=True, text=True, timeout=60, check=True
        )
        assert [[int(v) for v in line.split()] for line in done.stdout.splitlines()] == lookups


def test_a_portfolio_header_with_nothing_tuned_has_its_functions(
    store: st.Store, tmp_path: Path
) -> None:
    """A host written against the portfolio functions builds before anything is tuned, and
    is told to use its default."""
    with store.session() as session:
        doc, _ = portfolio_document(session, op=LAG.name, k=2, within=0.05)
    assert doc["portfolio"]["groups"] == []
    header = tmp_path / "lag.h"
    header.write_text(render_header(doc, op=LAG.name))
    for compiler, got in portfolio_driver_answers(header, tmp_path, "cpu-twin float32 64 64 64\n"):
        assert got == [[-1, 0]], compiler


def _one_entry_and_a_float16_portfolio() -> dict[str, Any]:
    entry = {
        "op": LAG.name,
        "op_version": LAG.version,
        "target": "cpu-twin",
        "dtype": "float32",
        "shape": dict(PORTFOLIO_SHAPES[0]),
        "tiling": dict(portfolio_best(PORTFOLIO_SHAPES[0])),
        "latency_us": 10.0,
        "evaluations": 1,
    }
    group = {
        "op": LAG.name,
        "op_version": LAG.version,
        "target": "cpu-twin",
        "dtype": "float16",
        "members": [{"relative": None, "origin": None}],
        "shapes": [{"shape": dict(PORTFOLIO_SHAPES[0]), "member": 0}],
    }
    return {
        "format": "tilewise.tilings",
        "format_version": 2,
        "entries": [entry],
        "portfolio": {"k": 1, "within": 0.05, "groups": [group]},
    }


@pytest.mark.skipif(not c_compilers(), reason="no C compiler")
def test_a_portfolio_of_a_group_without_entries_answers_in_the_header_as_in_python(
    tmp_path: Path,
) -> None:
    doc = _one_entry_and_a_float16_portfolio()
    assert load_entries(doc).rejected == []
    shape = PORTFOLIO_SHAPES[0]
    answer = TilingTable.from_document(doc).lookup(
        LAG.name, target="cpu-twin", dtype="float16", shape=shape
    )
    assert answer.rule == "portfolio" and answer.member == 0  # the default member
    assert answer.tiling == LAG.default_tiling(shape, "float16", TWIN)
    header = tmp_path / "lag.h"
    header.write_text(render_header(doc, op=LAG.name))
    text = f"cpu-twin float16 {' '.join(str(shape[d]) for d in LAG.dims)}\n"
    for compiler, got in portfolio_driver_answers(header, tmp_path, text):
        assert got == [[0, 0]], compiler  # member 0, "use your default"


def test_the_header_refuses_what_the_runtime_refuses_in_a_portfolio() -> None:
    doc = _one_entry_and_a_float16_portfolio()
    groups = doc["portfolio"]["groups"]
    groups.append(dict(groups[0]))
    with pytest.raises(TableFormatError, match="a second portfolio"):
        TilingTable.from_document(doc)
    with pytest.raises(TableFormatError, match=r"groups\[1\]: a second portfolio"):
        render_header(doc, op=LAG.name)
    groups[1:] = []
    groups[0]["target"] = "npu9"
    with pytest.raises(InputError, match="unknown target 'npu9'"):
        render_header(doc, op=LAG.name)


def test_a_member_outside_the_tunables_ranges_is_refused_by_both() -> None:
    doc = _one_entry_and_a_float16_portfolio()
    group = doc["portfolio"]["groups"][0]
    shape = PORTFOLIO_SHAPES[0]
    relative = dict(RULES.relative(portfolio_best(shape), shape))
    group["members"] = [{"relative": {**relative, "dbL0C": 99}, "origin": dict(shape)}]
    with pytest.raises(TableFormatError, match=r"shapes\[0\]: member 0 has dbL0C=99 is outside"):
        TilingTable.from_document(doc)
    with pytest.raises(TableFormatError, match=r"shapes\[0\]: member 0 has dbL0C=99 is outside"):
        render_header(doc, op=LAG.name)
    group["members"][0]["relative"]["dbL0C"] = relative["dbL0C"]
    assert TilingTable.from_document(doc).lookup(
        LAG.name, target="cpu-twin", dtype="float16", shape=shape
    ).tiling == LAG.carry_rules("float16", TWIN).derive(Tiling(relative), shape)


# ---------------------------------------------------------------------------------------------
# The CLI


def tilewise(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "tilewise.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_cli_exports_a_portfolio_with_its_report(store: st.Store, tmp_path: Path) -> None:
    with store.session() as session:
        portfolio_tuned_set(session)
    out = tmp_path / "p.json"
    done = tilewise(
        "export", LAG.name, "--db", store.url, "--portfolio", "2", "--report", "-o", str(out),
        tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| 1 | 1 | 50% | 75% | 1.200x |" in done.stdout
    assert "| 2 | 2 | 75% | 100% | 1.040x |" in done.stdout
    assert "13 in the records, 0 measured now, 7 not measured (not covering)" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["portfolio"]["k"] == 2 and len(doc["portfolio"]["groups"][0]["members"]) == 2
    assert TilingTable.from_file(out).rejected == []

    header = tmp_path / "p.h"
    done = tilewise(
        "export", LAG.name, "--db", store.url, "--portfolio", "1", "--within", "2",
        "--format", "header", "-o", str(header), tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "TILEWISE_LINEAR_ADD_GELU_CPU_TWIN_FLOAT32_MEMBERS 1" in header.read_text()

    for alone in (["--report"], ["--within", "5"]):  # 5 is the default, and still no portfolio
        done = tilewise("export", LAG.name, "--db", store.url, *alone, tmp_path=tmp_path)
        assert done.returncode == 2 and "go with --portfolio K" in done.stderr
    done = tilewise("export", LAG.name, "--db", store.url, "--portfolio", "0", tmp_path=tmp_path)
    assert done.returncode == 2 and "at least 1" in done.stderr
    done = tilewise("export", LAG.name, "--db", store.url, "--portfolio", "2", "--within", "-5",
                    tmp_path=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "at least 0 and below 1000, got -5" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_cli_measures_the_pairs_the_records_lack(store: st.Store, tmp_path: Path) -> None:
    """Two tuned shapes, each with its best and default measured only: --measure runs each
    best carried to the other shape on the twin, and every shape's member is then measured."""
    small = [Shape({"M": 32, "N": 128, "K": 64}), Shape({"M": 128, "N": 64, "K": 64})]
    with store.session() as session:
        tuned_best_and_default(session, small)
    out = tmp_path / "p.json"
    done = tilewise(
        "export", LAG.name, "--db", store.url, "--portfolio", "1", "--measure", "--report",
        "-o", str(out), tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recorded = {s: {portfolio_best(s), LAG.default_tiling(s, "float32", TWIN)} for s in small}
    carried = [portfolio_carried(a, b) for a in small for b in small if a != b]
    now = sum(1 for t, b in zip(carried, small[::-1], strict=True) if t not in recorded[b])
    assert now >= 1  # something for --measure to do
    assert f"{6 - now} in the records, {now} measured now, 0 not measured" in done.stdout
    doc = json.loads(out.read_text())
    slowdowns = [s["slowdown"] for s in doc["portfolio"]["groups"][0]["shapes"]]
    assert all(s is not None and math.isfinite(s) and s > 0 for s in slowdowns)
    # What was measured now is recorded (source portfolio), once per pair; the shapes' own
    # tilings, measured again beside them, are not recorded twice.
    with store.session() as session:
        ids = [
            st.commit_workload(
                session, Workload(LAG.name, LAG.version, "cpu-twin", "float32", s)
            ).id
            for s in small
        ]
        records = [r for i in ids for r in st.records_for(session, workload_id=i)]
    assert sum(r.source == "portfolio" for r in records) == now
    assert len({(r.workload_id, r.tiling_key) for r in records}) == len(records)
    again = tilewise(
        "export", LAG.name, "--db", store.url, "--portfolio", "1", "--measure", "--report",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "6 in the records, 0 measured now, 0 not measured" in again.stderr  # no -o
