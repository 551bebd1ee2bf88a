"""Tiling lookup from memory, for code that launches tuned kernels.

Load a tiling table once, then ask it for every shape met::

    table = TilingTable.from_file("linear_add_gelu.json")  # or .from_url(...), .from_db(...)
    answer = table.lookup("linear_add_gelu", target="cpu-twin", dtype="float32",
                          shape={"M": 1000, "N": 4096, "K": 1024})
    answer.tiling["baseM"], answer.source  # "exact", "nearest" or "default"

The fallback order, and the ``source`` (and ``rule``) each rule answers with:

1. ``exact``: the op (at its current version), target, dtype and shape were tuned; the tuned
   tiling as stored.
2. For a shape nobody tuned, when the table holds a *choice grid* for the op, target and dtype
   (``tilewise export`` writes one where the records allow: :mod:`tilewise.export._choice`):
   the grid cell of the asked shape (each dim's octave, ``floor(log2)``) names the tuned shape
   whose tiling, re-derived for the asked shape by the op's carry rules, a latency model fitted
   on every record of the op predicted faster than the default by more than the model's own
   cross-validated error (rule ``chosen``, source ``nearest``, ``predicted_gain`` the model's),
   or the default (rule ``predicted_default``, source ``default``) when no candidate was. The
   candidates were the tilings of the nearest tuned shapes and the default, decided at the
   cell's middle shape when the table was exported. A grid exported with ``--measure`` was
   decided by measuring instead: each candidate and the default side by side at the cell's
   sample shapes on the target (:mod:`tilewise.export._measured_cells`); its answers are rule
   ``measured_faster`` (a candidate faster beyond the noise at most sample shapes and slower at
   none, ``predicted_gain`` its measured gain) or ``measured_default``. A chosen tiling
   that fails the op's validity rules at the asked shape falls to the nearest rule below.
3. Else ``nearest`` (rule ``carried``): the tiling of the tuned shape of the same op, target
   and dtype nearest to the asked one, re-derived for the asked shape by the op's carry rules
   (``OpSpec.carry``, from the entry's relative form: a core split keeps its number of pieces,
   a block count every block's work, a whole row stays whole, base blocks shrink into what the
   shape allows), the first such tiling that passes the op's validity rules and on-chip memory
   limits for the asked shape (``OpSpec.valid``). An entry whose tuned tiling is its shape's
   default tiling (nothing beat it: the entry's ``is_default``) carries over as the asked
   shape's default tiling: source ``default``, rule ``kept_default``, with that entry's
   workload; so does one whose tiling, carried to the table's other tuned shapes, was measured
   slower than their default (``carry_slower``; :mod:`tilewise.export._evidence`): rule
   ``measured_slower``.
   Distance: the sum over dims of ``|log2(asked) - log2(tuned)|`` (for a dim that may be 0,
   such as a padding, of ``log2(1 + value)``: ``OpSpec.log_position``); ties go to the smaller
   tuned shape in the op's dims order. At most ``max_candidates`` entries are tried, nearest
   first. The C header (:func:`tilewise.export.render_header`) uses the same grid, distance,
   ties and carry rules but cannot make the validity checks (and answers "use your default"
   where Python answers a default).
4. ``default``: the op's hand-written heuristic (``OpSpec.default_tiling``).

A portfolio table (``tilewise export --portfolio K``: at most K tilings per target and dtype)
answers every shape of an op, target and dtype its ``portfolio`` section covers by the section's
selection rule instead (rule ``portfolio``, :attr:`Answer.member` the member's index; see
:mod:`tilewise.export._portfolio_doc`): a tuned shape its own member, as the entry holds it
(source ``exact``); any other shape the member of the nearest tuned shape (the distance and
ties above), re-derived for it by the carry rules (source ``nearest``), or the asked shape's
default where the member is the op's default or a re-derived value would not fit int32
(source ``default``). Like the C header's ``<prefix>_member_tiling``, and unlike the nearest
rule, it does not check the tiling against the op's validity rules: the launcher runs the
portfolio's few tilings only. :meth:`TilingTable.portfolios` lists the portfolios in use; a
malformed section refuses the table (:class:`~tilewise.export.TableFormatError`, naming the
field).

Entries of another op version than the running code's (a changed kernel is a new workload) and
entries of ops or targets this code does not know are kept out at load time and counted in
:attr:`TilingTable.skipped`. So is an invalid entry (a field of the wrong type, a shape the op
does not take, a tiling outside its domains): it is counted, named in
:attr:`TilingTable.rejected` and in a logged warning, and the rest of the table answers. Only a
document that is not a table as a whole (not JSON, a format version not read) is refused. A
version-1 document holds no relative forms: they are derived from the op spec; a version-2
entry whose relative form disagrees with the op's carry rules is invalid.

Lookups are thread-safe. Exact answers are a dict lookup; nearest and default answers are
computed once per asked shape and kept (the ``cache_size`` most recent computations). A first
answer by the grid is a cell index, one carry and one validity check: the model was evaluated
at export. A first answer by the nearest rule in a group of 256 entries or more measures the
distance to the candidates of the asked shape's octave cell only (every entry that can be
nearest somewhere in the cell, found at load: :mod:`tilewise.runtime._cells`), to every entry
only for a shape outside the cells or when the nearest entry's carried tiling is not valid.
The op's validity check keeps each footprint per the tiling fields and dims it reads
(:mod:`tilewise.kernels.ops._memo`).

Shapes met without an exact entry are counted (at most ``max_miss_shapes`` of them): see
:meth:`TilingTable.misses` and :meth:`TilingTable.misses_manifest`, a tuning manifest of them.

Importing this module imports numpy and the op specs, never Optuna, FastAPI or SQLAlchemy;
:meth:`TilingTable.from_db` imports SQLAlchemy when called, :meth:`TilingTable.from_url` httpx.
"""

from tilewise._misses import Miss
from tilewise.runtime._answer import Answer, Rule, Source
from tilewise.runtime._table import TilingTable

__all__ = ["Answer", "Miss", "Rule", "Source", "TilingTable"]
