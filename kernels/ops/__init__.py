"""The op registry: one entry per fused operator, imported lazily by name."""

from __future__ import annotations

import importlib

from tilewise.errors import InputError, did_you_mean
from tilewise.kernels.ops._base import (
    Bound,
    Buffer,
    Carry,
    Check,
    Footprint,
    GmArg,
    OpSpec,
    Parameter,
    StructField,
    Traffic,
    Tunable,
)
from tilewise.kernels.ops._carry import C_HELPERS as CARRY_C_HELPERS
from tilewise.kernels.ops._carry import CarryRules, c_dim

__all__ = [
    "CARRY_C_HELPERS",
    "OPS",
    "Bound",
    "Buffer",
    "Carry",
    "CarryRules",
    "Check",
    "Footprint",
    "GmArg",
    "OpSpec",
    "Parameter",
    "StructField",
    "Traffic",
    "Tunable",
    "c_dim",
    "get_op",
    "list_ops",
]

#: op name -> module holding its ``SPEC``.
OPS: dict[str, str] = {
    "conv_bias_leakyrelu": "tilewise.kernels.ops.conv_bias_leakyrelu.spec",
    "layernorm_gelu": "tilewise.kernels.ops.layernorm_gelu.spec",
    "linear_add_gelu": "tilewise.kernels.ops.linear_add_gelu.spec",
    "scale_relu_dropout": "tilewise.kernels.ops.scale_relu_dropout.spec",
    "swiglu": "tilewise.kernels.ops.swiglu.spec",
    "swiglu_grad": "tilewise.kernels.ops.swiglu_grad.spec",
    "swiglu_mlp": "tilewise.kernels.ops.swiglu_mlp.spec",
}


def get_op(name: str) -> OpSpec:
    """The spec of op ``name``; an unknown name is an InputError listing the known ones."""
    try:
        module = OPS[name]
    except (KeyError, TypeError):  # TypeError: not a string (an unhashable value)
        hint = did_you_mean(name, OPS)
        raise InputError(
            f"unknown op {name!r}{hint}; known ops: {', '.join(sorted(OPS))}"
        ) from None
    spec: OpSpec = importlib.import_module(module).SPEC
    return spec


def list_ops() -> list[OpSpec]:
    return [get_op(name) for name in sorted(OPS)]
