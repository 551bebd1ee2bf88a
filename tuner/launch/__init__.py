"""The tuned kernels, called from Python on numpy arrays and run in the calling process::

    import tilewise
    ops = tilewise.load_ops()               # or a TilingTable, a JSON file, a service or DB URL
    y = ops.linear_add_gelu(x, w, b)        # float32 or float16 arrays in, an array out
    ops.last_choice                         # op, dtype, shape, tiling, source of this thread's call

Each call looks its shape up in the tiling table (exact, nearest valid, default: see
:mod:`tilewise.runtime`), builds the variant through the cpu-twin backend (the tuner's own
on-disk cache) and launches it through the variant's ``tw_run`` on the runner's thread pool,
loaded into this process: no runner process, no copy of the arrays.

On an Ascend target (``load_ops(source, target="ascend910b2", device=0)``) the variant is the
Ascend backend's CMake project, built with CANN, and the launch goes through its
``liblauncher.so`` and ACL from this process: the arrays are copied to the NPU and the outputs
back for each call (see :mod:`._ascend`). Tested against a fake CANN toolkit only.
"""

from __future__ import annotations

from tilewise.launch._load import load_ops
from tilewise.launch._ops import Choice, Ops

__all__ = ["Choice", "Ops", "load_ops"]
