"""A table's portfolio for one (op, target, dtype): the selection rule of the document's
``portfolio`` section (:mod:`tilewise.export._portfolio_doc`, :meth:`PortfolioGroup.choose`, the
C header's ``<prefix>_member`` and ``<prefix>_member_tiling``) answered from memory."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tilewise.errors import InputError
from tilewise.export import PortfolioGroup, TableFormatError
from tilewise.export._portfolio_doc import check_domains
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime._answer import Answer, Source
from tilewise.runtime._group import Group
from tilewise.types import Shape, Workload


class Portfolio:
    """The members and tuned shapes of one group's portfolio, the shapes sorted in dims order
    (ties of the distance go to the first)."""

    __slots__ = ("logs", "member_of", "members", "meta", "shapes", "tilings")

    def __init__(self, portfolio: PortfolioGroup, group: Group, where: str) -> None:
        """Check ``portfolio`` against the op (``where`` names it in errors).

        Raises:
            TableFormatError: a shape the op does not take, members whose fields are not the
                op's tiling fields, a member outside the tunables' ranges at a tuned shape.
        """
        spec, dims = group.spec, group.dims
        fields = set(group.carry.fields)
        for j, member in enumerate(portfolio.members):
            if member is not None and set(member) != fields:
                raise TableFormatError(
                    f"{where}.members[{j}].relative: fields {', '.join(sorted(member))} are not "
                    f"the tiling fields of {spec.name} ({', '.join(group.carry.fields)})"
                )
        for j, shape in enumerate(portfolio.shapes):
            try:
                if set(shape) != set(dims):
                    raise InputError(f"dims {', '.join(sorted(shape))}, not {', '.join(dims)}")
                spec.validate_shape(shape)
            except InputError as exc:
                raise TableFormatError(
                    f"{where}.shapes[{j}].shape: not a shape of {spec.name}: {exc}"
                ) from None
        check_domains(portfolio, spec, group.profile, where)
        order = sorted(
            range(len(portfolio.shapes)), key=lambda i: [portfolio.shapes[i][d] for d in dims]
        )
        # The tuned entries' workloads and latencies, by dict key (before the portfolio's answers
        # replace the group's exact ones).
        self.meta = {k: (a.workload, a.latency_us) for k, a in group.exact.items()}
        self.members = portfolio.members
        self.shapes = [portfolio.shapes[i] for i in order]
        self.member_of = [portfolio.member_of[i] for i in order]
        tilings = portfolio.tilings or (None,) * len(portfolio.shapes)
        self.tilings = [tilings[i] for i in order]
        self.logs = [
            np.array([spec.log_position(d, s[d]) for s in self.shapes], dtype=np.float64)
            for d in dims
        ]

    def exact(self, group: Group) -> dict[Any, Answer]:
        """The answers of the tuned shapes, by the group's dict key."""
        return {
            group.key(shape): self._answer(group, shape, i, 0.0)
            for i, shape in enumerate(self.shapes)
        }

    def answer(self, group: Group, asked: Shape) -> Answer:
        """The answer for a shape that is not one of the tuned shapes."""
        where, dims = group.spec.log_position, group.dims
        # Column by column, in dims order: the sum of PortfolioGroup.member and the header's.
        distance = np.abs(self.logs[0] - where(dims[0], asked[dims[0]]))
        for column, dim in zip(self.logs[1:], dims[1:], strict=True):
            distance += np.abs(column - where(dim, asked[dim]))
        index = int(distance.argmin())  # the first minimum: the smaller shape in dims order
        return self._answer(group, asked, index, float(distance[index]))

    def _answer(self, group: Group, asked: Shape, index: int, distance: float) -> Answer:
        tuned = self.shapes[index]
        member = self.member_of[index]
        relative = self.members[member]
        tiling = None if relative is None else self.tilings[index] if tuned == asked else None
        if relative is not None and tiling is None:
            tiling = group.carry.derive(relative, asked)
        found = self.meta.get(group.key(tuned))
        if found is not None:
            workload, latency_us = found
        else:  # no entry (left out at load): the portfolio still names the workload
            spec = group.spec
            workload = Workload(spec.name, spec.version, group.profile.name, group.dtype, tuned)
            latency_us = None
        source: Source = "exact" if tuned == asked else "nearest"
        if tiling is None:
            # The op's default tiling, or re-derived values beyond int32: "use your default".
            tiling = group.spec.default_tiling(asked, group.dtype, group.profile)
            source = "exact" if tuned == asked else "default"
        return Answer(
            tiling, source, workload, latency_us, distance, rule="portfolio", member=member
        )


def attach(
    groups: dict[tuple[str, str, str], Group], portfolios: Iterable[PortfolioGroup], source: str
) -> None:
    """Give each group of ``groups`` its portfolio among ``portfolios`` (a group with none
    yet for one without entries). Portfolios of ops or targets this code does not know, or of
    other op versions, are left out, as their entries are.

    Raises:
        TableFormatError: a portfolio of a dtype the op does not take, a second portfolio for
            one op, target and dtype, or one :class:`Portfolio` refuses.
    """
    for i, p in enumerate(portfolios):
        at = f"{source}: portfolio.groups[{i}]"
        try:
            spec, profile = get_op(p.op), get_target(p.target)
        except InputError:
            continue
        if profile.name != p.target or p.op_version != spec.version:
            continue
        if p.dtype not in spec.dtypes:
            raise TableFormatError(
                f"{at}.dtype: {p.dtype!r} is not a dtype of {spec.name} ({', '.join(spec.dtypes)})"
            )
        key = (p.op, p.target, p.dtype)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(spec, profile, p.dtype, [])
        if group.portfolio is not None:
            raise TableFormatError(f"{at}: a second portfolio for {p.op} {p.target} {p.dtype}")
        group.portfolio = Portfolio(p, group, at)
        group.exact = group.portfolio.exact(group)
