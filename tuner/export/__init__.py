"""Tiling tables out of the database: a versioned JSON document and a C header.

The JSON document (``FORMAT`` at ``FORMAT_VERSION``) is what ``tilewise export --format json``
writes, what ``GET /v1/tables/{op}`` serves and what :mod:`tilewise.runtime` loads::

    {
      "format": "tilewise.tilings",
      "format_version": 2,
      "generator": "tilewise 0.1.0",
      "generated_at": "2026-05-22T10:00:00+00:00",
      "filters": {"op": "linear_add_gelu", "target": null, "dtype": null},
      "entries": [
        {"op": "linear_add_gelu", "op_version": "3f2a9c0d1e2b", "target": "cpu-twin",
         "dtype": "float32", "shape": {"M": 1024, "N": 1024, "K": 512},
         "tiling": {"baseM": 128, ..., "singleCoreM": 128, ...},
         "relative": {"baseM": 128, ..., "singleCoreM": 8, ...}, "is_default": false,
         "latency_us": 812.5, "default_latency_us": 1204.0, "speedup": 1.48, "evaluations": 40}
      ]
    }

``relative`` (since version 2) is the tiling in the form that carries over to other shapes, by
the op's carry rules (:mod:`tilewise.kernels.ops._carry`): a core split as its number of pieces
(``singleCoreM`` 128 of M = 1024 is 8), a whole-row length as 0, other fields as they are. The
runtime and the C header re-derive a nearest entry's tiling for the asked shape from it.
``is_default`` (since version 2) says that the tiling is the op's default tiling at its shape
(the tune found nothing faster beyond noise): such an entry carries over as the default tiling of
the asked shape. Both are null for entries of op versions other than the exporting code's. A
version-1 document (neither key) still loads: the reader derives both from the op spec.

``choices`` (an addition: old readers skip it) holds, per (op, op version, target, dtype) whose
records allow it, a latency model's parameters and the choice grid decided with it at export
(:mod:`tilewise.export._choice`): for each cell of shapes, the tuned shape whose tiling the
runtime and the C header re-derive for an untuned shape in it, or the default. A bad grid is
named in :attr:`Loaded.rejected` and left out. A grid decided by measuring instead
(``tilewise export --measure``) is kept in the database and answers every later export of the
same tunes (:mod:`tilewise.export._kept_grids`).

Loading checks it (:func:`load_entries`, :func:`parse_table`). A document that is not JSON,
not of this format, of a format version not read here (saying which was found and which are
read: :data:`READ_VERSIONS`) or without an entry list is refused whole. Each entry is checked
on its own: every field's type, dims in ``0..MAX_DIM`` (the op's own lower bounds are checked by
the reader that knows the op), tiling values in int32 (the header stores them so), a relative
form with the tiling's fields, finite positive latencies, one entry per workload. A bad entry
is left out and named in :attr:`Loaded.rejected`; the rest still load.
Unknown keys are ignored: additions that old readers may skip keep the version; anything else
bumps it.

A portfolio table (:func:`portfolio_document`, ``tilewise export --portfolio K``) is such a
document whose tuned shapes each hold one of at most K tilings per target and dtype, picked by
a greedy set cover on the measured records, with a ``portfolio`` section naming the members and
the rule that chooses one per shape (:func:`load_portfolio`,
:mod:`tilewise.export._portfolio_doc`); the header then carries them too, and
:mod:`tilewise.runtime` answers by that rule.

The C header (:func:`render_header`) holds one op's entries of the op's current version; see
the comment it starts with for its contract.

This module stays light (no SQLAlchemy, Optuna or FastAPI at import): the runtime imports it.
"""

from tilewise.export._choice import Choice
from tilewise.export._cover import Coverage, greedy_cover
from tilewise.export._document import (
    FORMAT,
    FORMAT_VERSION,
    READ_VERSIONS,
    Loaded,
    TableEntry,
    TableFormatError,
    canonical_filters,
    checked_entry,
    checked_relative,
    dump_document,
    is_default_tiling,
    load_entries,
    parse_table,
    relative_form,
    table_document,
)
from tilewise.export._header import render_header
from tilewise.export._kept_grids import keep_measured_grids
from tilewise.export._measured_cells import MeasureCellFn
from tilewise.export._portfolio import GroupPortfolio, MeasureFn, portfolio_document
from tilewise.export._portfolio_doc import PortfolioGroup, load_portfolio

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "READ_VERSIONS",
    "Choice",
    "Coverage",
    "GroupPortfolio",
    "Loaded",
    "MeasureCellFn",
    "MeasureFn",
    "PortfolioGroup",
    "TableEntry",
    "TableFormatError",
    "canonical_filters",
    "checked_entry",
    "checked_relative",
    "dump_document",
    "greedy_cover",
    "is_default_tiling",
    "keep_measured_grids",
    "load_entries",
    "load_portfolio",
    "parse_table",
    "portfolio_document",
    "relative_form",
    "render_header",
    "table_document",
]
