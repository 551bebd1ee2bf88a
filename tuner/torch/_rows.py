"""Leading batch dims: which arrays of an op take them, and how they fold into its row dim.

PyTorch's own ops take ``[batch, seq, hidden]`` where a kernel takes ``[rows, hidden]``; the
kernels work row by row, so the leading dims flatten into the row dim and the outputs get them
back. The declaration is here, not on the op specs: a spec's source is part of its version,
and a new version would orphan every tiling tuned for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tilewise.errors import InputError
from tilewise.kernels.ops import OpSpec

#: The dim each op's leading batch dims fold into: every input and output whose layout starts
#: with it takes extra leading dims (None: the op takes none). scale_relu_dropout is
#: elementwise on a flat vector, so any shape folds into its one dim.
ROW_DIMS: Mapping[str, str | None] = {
    "conv_bias_leakyrelu": None,  # NCHW already has its batch dim, N
    "layernorm_gelu": "R",
    "linear_add_gelu": "M",
    "scale_relu_dropout": "N",
    "swiglu": "T",
    "swiglu_grad": "T",
    "swiglu_mlp": "T",
}

#: A size as a shape holds it: an int, or a torch.SymInt while tracing with dynamic shapes.
Size = Any


def fold(
    spec: OpSpec, shapes: Mapping[str, Sequence[Size]]
) -> tuple[dict[str, tuple[Size, ...]], tuple[Size, ...]]:
    """Each input's shape (by GM name) with its leading dims folded into the row dim, and those
    leading dims (the row dim's own size included; empty for an op that folds none).

    Raises:
        InputError: two inputs with different leading dims, naming both.
    """
    row = ROW_DIMS[spec.name]
    folded: dict[str, tuple[Size, ...]] = {}
    lead: tuple[Size, ...] = ()
    first = ""
    for name, shape in shapes.items():
        dims = spec.layout[name]
        extra = len(shape) - len(dims)
        if row is None or dims[0] != row or extra < 0:  # too few dims: shape_of names them
            folded[name] = tuple(shape)
            continue
        head = tuple(shape[: extra + 1])
        if not first:
            lead, first = head, name
        elif head != lead:
            raise InputError(
                f"{spec.name}: {name} has leading dims {head}, but {first} has {lead}: "
                "the inputs' batch dims must be the same"
            )
        folded[name] = (math.prod(head), *shape[extra + 1 :])
    return folded, lead


def unfold(
    spec: OpSpec, name: str, shape: Sequence[Size], lead: tuple[Size, ...]
) -> tuple[Size, ...]:
    """The shape of output ``name`` (kernel shape ``shape``) with the inputs' leading dims back."""
    row = ROW_DIMS[spec.name]
    if not lead or spec.layout[name][0] != row:
        return tuple(shape)
    return (*lead, *shape[1:])
