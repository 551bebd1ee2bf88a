"""tilewise: autotuning of tiling parameters for fused Ascend C kernels."""

__version__ = "0.1.0"
