"""The tiling table's JSON document: building it from the database, and loading it (see
:mod:`tilewise.export`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from tilewise import __version__
from tilewise.errors import InputError
from tilewise.export._choice import Choice, choices_of, parse_choices
from tilewise.export._measured_cells import MeasureCellFn
from tilewise.types import DTYPES, MAX_DIM, Shape, Tiling, Workload

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tilewise.export._portfolio_doc import PortfolioGroup
    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile
    from tilewise.store import TilingRow, WorkloadRow


FORMAT = "tilewise.tilings"
FORMAT_VERSION = 2
#: The format versions :func:`load_entries` reads (1: no relative forms).
READ_VERSIONS = (1, 2)

INT32_MAX = 2**31 - 1
#: Latencies above this (about 30 years) are not measurements.
MAX_LATENCY_US = 1e15
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_MAX_TEXT = 200


class TableFormatError(InputError):
    """A tiling table that is not a valid document of the supported format version."""


@dataclass(frozen=True)
class TableEntry:
    """One row of a tiling table: a workload and its best tiling."""

    op: str
    op_version: str
    target: str
    dtype: str
    shape: Shape
    tiling: Tiling
    latency_us: float
    default_latency_us: float | None
    speedup: float | None
    evaluations: int
    #: The tiling's relative form (see the module docstring); None when the document has none.
    relative: Tiling | None = None
    #: Whether the tiling is the op's default tiling at this shape (nothing beat it): it then
    #: carries over as the default of the asked shape. None when the document does not say.
    is_default: bool | None = None
    #: The tiling carried over to the table's other tuned shapes where the records measured it:
    #: the geometric mean of their default's latency over its (> 1: faster than the default).
    #: None without such a measurement (:mod:`tilewise.export._evidence`).
    carry_gain: float | None = None
    #: Whether that gain is below 1 beyond the measurements' spread: the entry then carries
    #: over as the default of the asked shape. None without a measurement.
    carry_slower: bool | None = None

    @property
    def workload(self) -> Workload:
        return Workload(self.op, self.op_version, self.target, self.dtype, self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "op_version": self.op_version,
            "target": self.target,
            "dtype": self.dtype,
            "shape": dict(self.shape),
            "tiling": dict(self.tiling),
            "relative": None if self.relative is None else dict(self.relative),
            "is_default": self.is_default,
            "carry_gain": self.carry_gain,
            "carry_slower": self.carry_slower,
            "latency_us": self.latency_us,
            "default_latency_us": self.default_latency_us,
            "speedup": self.speedup,
            "evaluations": self.evaluations,
        }


class _Rows(NamedTuple):
    entries: list[TableEntry]
    rejected: list[str]


class Loaded(_Rows):
    """A document's valid entries, and one message per entry left out (naming where it is and
    what is wrong with it: ``entries[3].shape.M: expected an integer, got '4'``); unpacks as
    that pair. ``choices`` holds the document's valid choice grids
    (:mod:`tilewise.export._choice`); a bad one is named in ``rejected`` too. ``portfolio``
    holds the groups of its ``portfolio`` section (:mod:`tilewise.export._portfolio_doc`;
    empty without one)."""

    choices: Sequence[Choice]
    portfolio: Sequence[PortfolioGroup]

    def __new__(
        cls,
        entries: list[TableEntry],
        rejected: list[str],
        choices: Sequence[Choice] = (),
        portfolio: Sequence[PortfolioGroup] = (),
    ) -> Loaded:
        self = super().__new__(cls, entries, rejected)
        self.choices = tuple(choices)
        self.portfolio = tuple(portfolio)
        return self


# ---------------------------------------------------------------------------------------------
# Building a document


def table_document(
    session: Session,
    *,
    op: str | None = None,
    target: str | None = None,
    dtype: str | None = None,
    any_toolchain: bool = False,
    measure_cells: MeasureCellFn | None = None,
) -> dict[str, Any]:
    """The tiling table (best tiling per workload), optionally of one op, target and dtype.

    Filters are checked and canonicalized (target names are case-insensitive); every op version
    in the database is included, readers pick the version they run. Only tilings measured with
    the current toolchain of their target on this host are included (a workload tuned only with
    another one is left out), unless ``any_toolchain``: then such a workload's most recent tiling
    stands in. A target whose toolchain is not known here (no CANN toolkit) is not filtered.
    The choice grids for untuned shapes are decided by a model of the records, or with
    ``measure_cells`` by measuring each cell on the target (:mod:`tilewise.export._measured_cells`).

    Raises:
        InputError: unknown op, target or dtype.
    """
    from tilewise.kernels.backends import current_toolchain_ids
    from tilewise.store import best_tilings, workload_targets

    op, target, dtype = canonical_filters(op, target, dtype)
    current = current_toolchain_ids(workload_targets(session))
    rows = best_tilings(
        session, op=op, target=target, dtype=dtype, toolchains=current, any_toolchain=True
    )
    # Entries measured with another toolchain than this host's for their target: stale.
    stale = {w.id for w, t in rows if current.get(w.target) not in (None, t.toolchain.id)}
    if not any_toolchain:
        rows = [(w, t) for w, t in rows if w.id not in stale]
    evidence = _evidence_of(session, rows)
    entries = []
    for w, t in rows:
        relative = relative_form(w.workload, t.tiling)
        entry = TableEntry(
            op=w.op,
            op_version=w.op_version,
            target=w.target,
            dtype=w.dtype,
            shape=w.shape,
            tiling=t.tiling,
            latency_us=t.latency_us,
            default_latency_us=t.default_latency_us,
            speedup=t.speedup,
            evaluations=t.evaluations,
            relative=relative,
        )
        if relative is not None:  # an op, version and target this code runs
            entry = replace(entry, is_default=is_default_tiling(entry))
            found = evidence.get(w.id)
            if found is not None:
                entry = replace(entry, carry_gain=found.gain, carry_slower=found.slower)
        entries.append(entry)
    choices = choices_of(session, rows, entries, measure_cells)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator": f"tilewise {__version__}",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "filters": {"op": op, "target": target, "dtype": dtype},
        # This host's toolchain id per target (None: not known here, not filtered), and the
        # workloads tuned only with another one: included with any_toolchain, else left out.
        "toolchains": {
            "current": {name: current.get(name) for name in sorted(current)},
            "other_toolchain_entries": len(stale),
            "any_toolchain": any_toolchain,
        },
        "entries": [e.to_dict() for e in entries],
        "choices": [c.to_dict() for c in choices],
    }


def _evidence_of(session: Session, rows: list[tuple[WorkloadRow, TilingRow]]) -> dict[int, Any]:
    """Each current-version workload's carry evidence (by workload id), per op, target and
    dtype group (:func:`tilewise.export._evidence.carry_evidence`)."""
    from tilewise.export._evidence import carry_evidence
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    groups: dict[tuple[str, str, str], list[tuple[WorkloadRow, Tiling]]] = {}
    for w, t in rows:
        if relative_form(w.workload, t.tiling) is not None:
            groups.setdefault((w.op, w.target, w.dtype), []).append((w, t.tiling))
    out: dict[int, Any] = {}
    for (op, target, dtype), tuned in groups.items():
        found = carry_evidence(
            session, spec=get_op(op), target=get_target(target), dtype=dtype, tuned=tuned
        )
        out.update({w.id: e for (w, _), e in zip(tuned, found, strict=True) if e is not None})
    return out


def relative_form(workload: Workload, tiling: Tiling) -> Tiling | None:
    """The relative form of ``tiling`` (tuned for ``workload``) by the running code's carry
    rules; None for an op version, op or target this code does not run, or a tiling whose
    fields are not the op's tunables (the readers leave such entries out)."""
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    try:
        spec, target = get_op(workload.op), get_target(workload.target)
    except InputError:
        return None
    if spec.version != workload.op_version or target.name != workload.target:
        return None
    rules = spec.carry_rules(workload.dtype, target)
    if set(tiling) != set(rules.fields):
        return None
    return rules.relative(tiling, workload.shape)


def is_default_tiling(entry: TableEntry) -> bool:
    """Whether the entry's tiling is its op's default tiling at its shape (an op and target
    this code knows)."""
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    spec = get_op(entry.op)
    return entry.tiling == spec.default_tiling(entry.shape, entry.dtype, get_target(entry.target))


def checked_entry(entry: TableEntry, spec: OpSpec, target: TargetProfile) -> Tiling:
    """The relative form (:func:`checked_relative`) of an entry whose tiling is the op's: its
    fields the tunables', each value within its domain at the entry's shape, the tiling valid
    there.

    Raises:
        InputError: other fields, a value outside its domain, or a relative form that
            disagrees with the op's carry rules.
    """
    named = f"{entry.op} {entry.target} {entry.dtype} {dict(entry.shape)}"
    tunables = spec.tunables(entry.shape, entry.dtype, target)
    names = {t.name for t in tunables}
    if set(entry.tiling) != names:
        raise InputError(
            f"{named}: tiling fields {', '.join(sorted(entry.tiling))} are not the op's "
            f"tunables {', '.join(sorted(names))}"
        )
    # A tuned tiling holds values within its own workload's domains (the tuner proposes
    # nothing else, the default tiling lies in them too). The op's checks assume so: a
    # tampered dbL0C of 2**31 - 1 would make a nearest lookup build that many buffers.
    for tunable in tunables:
        outside = tunable.outside(entry.tiling[tunable.name])
        if outside:
            raise InputError(f"{named}: tiling {outside}")
    # And it passed the op's checks where it was measured: an entry that does not would be
    # answered as exact and fail at launch. (A portfolio's entries hold its members carried to
    # the tuned shapes, valid there but not always values of the shape's domains.)
    dtype = entry.dtype
    if not spec.valid(entry.tiling, entry.shape, dtype, target):
        reasons = spec.check(entry.tiling, entry.shape, dtype, target).reasons
        raise InputError(f"{named}: tiling fails the op's checks: {'; '.join(reasons)}")
    return checked_relative(entry, spec, target)


def checked_relative(entry: TableEntry, spec: OpSpec, target: TargetProfile) -> Tiling:
    """The entry's relative form: the stored one, which must be what the op's carry rules
    derive from its tiling, or (a version-1 entry) the derived one.

    Raises:
        InputError: the stored relative form disagrees with the op's carry rules.
    """
    derived = spec.carry_rules(entry.dtype, target).relative(entry.tiling, entry.shape)
    if entry.relative is not None and entry.relative != derived:
        wrong = sorted(f for f in derived if entry.relative[f] != derived[f])
        raise InputError(
            f"{entry.op} {entry.target} {entry.dtype} {dict(entry.shape)}: relative "
            + ", ".join(f"{f}={entry.relative[f]}" for f in wrong)
            + " disagrees with the op's carry rules ("
            + ", ".join(f"{f}={derived[f]}" for f in wrong)
            + ")"
        )
    return derived


def canonical_filters(
    op: str | None, target: str | None, dtype: str | None
) -> tuple[str | None, str | None, str | None]:
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    if op is not None:
        spec = get_op(op)
        if dtype is not None:
            spec.validate_dtype(dtype)
    elif dtype is not None and dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    if target is not None:
        target = get_target(target).name
    return op, target, dtype


def dump_document(doc: Mapping[str, Any]) -> str:
    """The document as JSON text, one entry per line (diffs stay readable)."""
    parts = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "entries"]
    rows = ",\n".join(f"  {json.dumps(e)}" for e in doc.get("entries", []))
    parts.append(f' "entries": [\n{rows}\n ]' if rows else ' "entries": []')
    return "{\n" + ",\n".join(parts) + "\n}\n"


# ---------------------------------------------------------------------------------------------
# Loading and validating


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_table(text: str | bytes, *, source: str = "tiling table") -> Loaded:
    """Parse and validate a JSON document; ``source`` names it in error messages.

    Raises:
        TableFormatError: not JSON (e.g. a truncated file), or not a valid document.
    """
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise TableFormatError(f"{source}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, integers too long to convert
        # A file cut short fails where its text ends, or inside a string it opened; "hello"
        # fails at its first character, an empty file has nothing to cut.
        hint = ""
        if isinstance(exc, json.JSONDecodeError) and exc.doc.strip():
            if exc.msg.startswith("Unterminated") or exc.pos >= len(exc.doc.rstrip()):
                hint = " (truncated?)"
        elif isinstance(exc, json.JSONDecodeError):
            hint = " (an empty document)"
        raise TableFormatError(f"{source}: not valid JSON{hint}: {exc}") from None
    return load_entries(doc, source=source)


def load_entries(doc: object, *, source: str = "tiling table") -> Loaded:
    """Validate a decoded document: its valid entries, and the bad ones named.

    Raises:
        TableFormatError: the document as a whole is not a table of this format version, or
            its ``portfolio`` section is malformed (a portfolio is one rule for its shapes:
            there is no part of it to leave out).
    """
    if not isinstance(doc, dict):
        raise TableFormatError(f"{source}: expected a JSON object, got {_kind(doc)}")
    found_format = doc.get("format")
    if found_format != FORMAT:
        raise TableFormatError(
            f"{source}: not a tilewise tiling table (format {_short(found_format)}, "
            f"expected {FORMAT!r})"
        )
    version = doc.get("format_version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise TableFormatError(
            f"{source}: tiling table format version {_short(version)} is not supported; this "
            f"tilewise {__version__} reads versions {', '.join(map(str, READ_VERSIONS))}"
            + ("; upgrade tilewise to read it" if newer else "; export the table again")
        )
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise TableFormatError(f"{source}: 'entries' must be a list, got {_kind(raw)}")
    entries: list[TableEntry] = []
    rejected: list[str] = []
    seen: set[tuple[str, str, str, str, Shape]] = set()
    for i, item in enumerate(raw):
        try:
            entry = _entry(item, f"entries[{i}]", relative=version != 1)
        except TableFormatError as exc:
            rejected.append(str(exc))
            continue
        key = (entry.op, entry.op_version, entry.target, entry.dtype, entry.shape)
        if key in seen:
            rejected.append(
                f"entries[{i}]: a second entry for {entry.op} {entry.op_version} "
                f"{entry.target} {entry.dtype} {entry.shape}"
            )
            continue
        seen.add(key)
        entries.append(entry)
    choices, bad = parse_choices(doc.get("choices"))
    from tilewise.export._portfolio_doc import load_portfolio  # it imports this module

    try:
        portfolio = load_portfolio(doc)
    except TableFormatError as exc:
        raise TableFormatError(f"{source}: {exc}") from None
    return Loaded(entries, rejected + bad, choices, portfolio)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _entry(item: object, where: str, *, relative: bool) -> TableEntry:
    if not isinstance(item, dict):
        raise TableFormatError(f"{where}: expected an object, got {_kind(item)}")
    tiling = Tiling(_int_map(item, "tiling", where, low=-INT32_MAX, high=INT32_MAX))
    carried, is_default, carry_slower, carry_gain = None, None, None, None
    if relative:
        is_default, carry_slower = (
            _flag(item, key, where) for key in ("is_default", "carry_slower")
        )
        carry_gain = _number(item, "carry_gain", where)
    if relative and item.get("relative") is not None:
        carried = Tiling(_int_map(item, "relative", where, low=-INT32_MAX, high=INT32_MAX))
        if set(carried) != set(tiling):
            raise TableFormatError(
                f"{where}.relative: fields {', '.join(sorted(carried))} are not the tiling's "
                f"{', '.join(sorted(tiling))}"
            )
    return TableEntry(
        op=_text(item, "op", where),
        op_version=_text(item, "op_version", where),
        target=_text(item, "target", where),
        dtype=_text(item, "dtype", where),
        shape=Shape(_int_map(item, "shape", where, low=0, high=MAX_DIM)),
        tiling=tiling,
        latency_us=_number(item, "latency_us", where, optional=False),
        default_latency_us=_number(item, "default_latency_us", where),
        speedup=_number(item, "speedup", where),
        evaluations=_int(item.get("evaluations"), f"{where}.evaluations", low=0, high=INT32_MAX),
        relative=carried,
        is_default=is_default,
        carry_gain=carry_gain,
        carry_slower=carry_slower,
    )


def _flag(item: dict[str, Any], key: str, where: str) -> bool | None:
    value = item.get(key)
    if value is not None and not isinstance(value, bool):
        raise TableFormatError(f"{where}.{key}: expected true, false or null, got {_short(value)}")
    return value


def _text(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_TEXT:
        raise TableFormatError(
            f"{where}.{key}: expected a non-empty string of at most {_MAX_TEXT} characters, "
            f"got {_kind(value) if not isinstance(value, str) else repr(value[:40])}"
        )
    return value


def _int(value: object, where: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TableFormatError(f"{where}: expected an integer, got {_short(value)}")
    if not low <= value <= high:
        raise TableFormatError(f"{where}: {_short(value)} is outside {low}..{high}")
    return value


def _int_map(item: dict[str, Any], key: str, where: str, *, low: int, high: int) -> dict[str, int]:
    value = item.get(key)
    if not isinstance(value, dict) or not value:
        raise TableFormatError(f"{where}.{key}: expected a non-empty object, got {_kind(value)}")
    out: dict[str, int] = {}
    for name, number in value.items():
        if not _NAME.match(name):
            raise TableFormatError(f"{where}.{key}: {_short(name)} is not an identifier")
        out[name] = _int(number, f"{where}.{key}.{name}", low=low, high=high)
    return out


def _number(item: dict[str, Any], key: str, where: str, *, optional: bool = True) -> Any:
    value = item.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TableFormatError(f"{where}.{key}: expected a number, got {_short(value)}")
    # Range first: math.isfinite raises OverflowError on an integer of hundreds of digits;
    # NaN and infinities fail the range anyway.
    if not (0 < value <= MAX_LATENCY_US and math.isfinite(value)):
        raise TableFormatError(f"{where}.{key}: {_short(value)} is outside (0, {MAX_LATENCY_US:g}]")
    return float(value)
