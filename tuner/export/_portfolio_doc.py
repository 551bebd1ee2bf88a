"""The ``portfolio`` section of a tiling table document, and the selection rule it carries.

``tilewise export --portfolio K`` adds it at the top level (format version 2: readers that do
not know it skip it and answer from the entries, which hold each tuned shape's member;
:mod:`tilewise.runtime` answers by its selection rule)::

    "portfolio": {
      "k": 3, "within": 0.05,
      "groups": [
        {"op": "linear_add_gelu", "op_version": "3f2a9c0d1e2b", "target": "cpu-twin",
         "dtype": "float32",
         "members": [{"relative": {"baseM": 128, ..., "singleCoreM": 8, ...},
                      "origin": {"M": 512, "N": 256, "K": 256}},
                     {"relative": null, "origin": null}],
         "shapes": [{"shape": {"M": 512, "N": 256, "K": 256}, "member": 0,
                     "tiling": {"baseM": 128, ..., "singleCoreM": 64, ...}},
                    {"shape": {"M": 32, "N": 256, "K": 256}, "member": 1, "tiling": null},
                    ...],
         "coverage": [{"k": 1, "members": 1, "covered": 0.5, ...}, ...],
         "pairs": {"records": 40, "measured_now": 0, "not_measured": 8, "not_carried": 0}}
      ]
    }

A member is a tiling in its relative form (the op's carry rules re-derive it for any shape),
or with ``relative`` null the op's default tiling. A tuned shape's ``tiling`` (an addition:
null for the default member, absent in older documents) is its member's tiling there as the
entries hold it and the export measured it: at the member's own tuned shape the tuned tiling,
which re-deriving from the relative form does not always give back (a core split of 176 of
N = 256 carries as 2 pieces, 128 each). The selection rule (:meth:`PortfolioGroup.choose`,
:mod:`tilewise.runtime`'s rule ``portfolio``, and the header's ``<prefix>_member`` and
``<prefix>_member_tiling``): a tuned shape takes its own member, at its ``tiling``; any other
shape takes the member of the nearest tuned shape (the runtime's and the header's distance
and ties: the smallest sum over dims of ``|log2 asked - log2 tuned|``, ties to the smaller
tuned shape in dims order), re-derived for the asked shape from the member's relative form
(as is a tuned shape without a ``tiling``). Nothing is checked against the op's validity
rules for the asked shape (as in the header's nearest answers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tilewise.export._document import INT32_MAX, TableFormatError, _int, _int_map, _text
from tilewise.types import MAX_DIM, Shape, Tiling

if TYPE_CHECKING:
    from tilewise.export._portfolio import GroupPortfolio
    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile


def section(built: Sequence[GroupPortfolio], *, k: int, within: float) -> dict[str, Any]:
    """The ``portfolio`` section of the groups built by :mod:`tilewise.export._portfolio`."""
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    groups = []
    for g in built:
        members = [g.candidates[c] for c in g.chosen]
        spec, target = get_op(g.op), get_target(g.target)
        # Each tuned shape's member there, as the entries hold it (None: the default member).
        tilings: list[dict[str, int] | None] = []
        for s, shape in enumerate(g.shapes):
            member = members[g.assigned[s]]
            tiling = None if member.relative is None else member.at(spec, target, g.dtype, shape)
            tilings.append(None if tiling is None else dict(tiling))
        groups.append(
            {
                "op": g.op,
                "op_version": g.op_version,
                "target": g.target,
                "dtype": g.dtype,
                "members": [
                    {
                        "relative": None if m.relative is None else dict(m.relative),
                        "origin": None if m.origin is None else dict(m.origin),
                    }
                    for m in members
                ],
                "shapes": [
                    {
                        "shape": dict(shape),
                        "member": g.assigned[s],
                        "tiling": tilings[s],
                        "slowdown": g.slowdown(s),
                    }
                    for s, shape in enumerate(g.shapes)
                ],
                "coverage": [c.to_dict() for c in g.report],
                "pairs": dict(g.pairs),
            }
        )
    return {"k": k, "within": within, "groups": groups}


@dataclass(frozen=True)
class PortfolioGroup:
    """One op version, target and dtype's portfolio: members and each tuned shape's member."""

    op: str
    op_version: str
    target: str
    dtype: str
    members: tuple[Tiling | None, ...]  # relative forms; None: the op's default tiling
    shapes: tuple[Shape, ...]  # in the section's order
    member_of: tuple[int, ...]  # per shape
    #: Per shape, its member's tiling there (None: re-derived); () in an older document.
    tilings: tuple[Tiling | None, ...] = ()

    def nearest(self, spec: OpSpec, shape: Mapping[str, int]) -> int:
        """The index of the tuned shape whose member ``shape`` takes (the shape itself where
        tuned; see the module docstring)."""
        asked = spec.validate_shape(shape)
        where, dims = spec.log_position, spec.dims
        best, best_d = -1, 0.0
        # In the dims order of the tuned shapes, summed dim by dim: the header's arithmetic.
        for i in sorted(range(len(self.shapes)), key=lambda i: [self.shapes[i][d] for d in dims]):
            tuned = self.shapes[i]
            if tuned == asked:
                return i
            d = abs(where(dims[0], tuned[dims[0]]) - where(dims[0], asked[dims[0]]))
            for dim in dims[1:]:
                d += abs(where(dim, tuned[dim]) - where(dim, asked[dim]))
            if best < 0 or d < best_d:
                best, best_d = i, d
        return best

    def member(self, spec: OpSpec, shape: Mapping[str, int]) -> int:
        """The member index for ``shape`` (see the module docstring)."""
        return self.member_of[self.nearest(spec, shape)]

    def choose(
        self, spec: OpSpec, target: TargetProfile, shape: Mapping[str, int]
    ) -> tuple[int, Tiling | None]:
        """The member for ``shape`` and its tiling there: None when the member is the op's
        default tiling, or a re-derived value would not fit int32 ("use your default", as the
        header's ``member_tiling`` returns 0)."""
        index = self.nearest(spec, shape)
        member = self.member_of[index]
        relative = self.members[member]
        if relative is None:
            return member, None
        asked = Shape(shape)
        if self.shapes[index] == asked and self.tilings and self.tilings[index] is not None:
            return member, self.tilings[index]
        return member, spec.carry_rules(self.dtype, target).derive(relative, asked)


def check_domains(group: PortfolioGroup, spec: OpSpec, target: TargetProfile, where: str) -> None:
    """Each tuned shape's member there (its stored tiling, else the member re-derived) within
    the ranges of the shape's tunables, as a table's entries are: the op's checks assume so,
    and a portfolio's answers are not checked against the op's rules.

    Raises:
        TableFormatError: a value outside its range, naming the shape and the member.
    """
    rules = spec.carry_rules(group.dtype, target)
    tilings = group.tilings or (None,) * len(group.shapes)
    for j, (shape, member, tiling) in enumerate(
        zip(group.shapes, group.member_of, tilings, strict=True)
    ):
        relative = group.members[member]
        if tiling is None and relative is not None:
            tiling = rules.derive(relative, shape)
        if tiling is None:  # the default member, or beyond int32 ("use your default")
            continue
        for tunable in spec.tunables(shape, group.dtype, target):
            outside = tunable.outside(tiling[tunable.name])
            if outside:
                raise TableFormatError(f"{where}.shapes[{j}]: member {member} has {outside}")


def load_portfolio(doc: Mapping[str, Any]) -> list[PortfolioGroup]:
    """The document's portfolio groups ([] without a ``portfolio`` section).

    Raises:
        TableFormatError: a malformed section (naming where).
    """
    raw = doc.get("portfolio")
    if raw is None:
        return []
    where = "portfolio"
    if not isinstance(raw, dict) or not isinstance(raw.get("groups"), list):
        raise TableFormatError(f"{where}: expected an object with a 'groups' list")
    out = []
    for i, group in enumerate(raw["groups"]):
        here = f"{where}.groups[{i}]"
        if not isinstance(group, dict):
            raise TableFormatError(f"{here}: expected an object")
        members_raw = group.get("members")
        if not isinstance(members_raw, list) or not members_raw:
            raise TableFormatError(f"{here}.members: expected a non-empty list")
        members: list[Tiling | None] = []
        for j, m in enumerate(members_raw):
            if not isinstance(m, dict):
                raise TableFormatError(f"{here}.members[{j}]: expected an object")
            members.append(
                None
                if m.get("relative") is None
                else Tiling(
                    _int_map(m, "relative", f"{here}.members[{j}]", low=-INT32_MAX, high=INT32_MAX)
                )
            )
        fields = {frozenset(m) for m in members if m is not None}
        if len(fields) > 1:
            raise TableFormatError(f"{here}.members: members with different tiling fields")
        shapes_raw = group.get("shapes")
        if not isinstance(shapes_raw, list) or not shapes_raw:
            raise TableFormatError(f"{here}.shapes: expected a non-empty list")
        pairs = []
        for j, item in enumerate(shapes_raw):
            at = f"{here}.shapes[{j}]"
            if not isinstance(item, dict):
                raise TableFormatError(f"{at}: expected an object")
            shape = Shape(_int_map(item, "shape", at, low=0, high=MAX_DIM))
            member = _int(item.get("member"), f"{at}.member", low=0, high=len(members) - 1)
            tiling = None
            if item.get("tiling") is not None:
                tiling = Tiling(_int_map(item, "tiling", at, low=-INT32_MAX, high=INT32_MAX))
                relative = members[member]
                if relative is None:
                    raise TableFormatError(f"{at}.tiling: a tiling for the default member")
                if set(tiling) != set(relative):
                    raise TableFormatError(f"{at}.tiling: not the fields of its member")
            pairs.append((shape, member, tiling))
        if len({s for s, _, _ in pairs}) != len(pairs):
            raise TableFormatError(f"{here}.shapes: a shape listed twice")
        out.append(
            PortfolioGroup(
                op=_text(group, "op", here),
                op_version=_text(group, "op_version", here),
                target=_text(group, "target", here),
                dtype=_text(group, "dtype", here),
                members=tuple(members),
                shapes=tuple(s for s, _, _ in pairs),
                member_of=tuple(m for _, m, _ in pairs),
                tilings=tuple(t for _, _, t in pairs),
            )
        )
    return out
