"""ConvBnAct: Conv2d, an eval-mode BatchNorm2d folded into it, and a (Leaky)ReLU in one kernel."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from tilewise.errors import InputError
from tilewise.kernels.ops import get_op


def _pair(value: int | tuple[int, ...], what: str) -> tuple[int, int]:
    """``value`` as (H, W); ``what`` names it in the error, e.g. "ConvBnAct: stride"."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise InputError(f"{what} must be an int or a pair of ints, got {value!r}")
    return pair[0], pair[1]


def _square(value: int | tuple[int, ...], what: str, why: str) -> int:
    first, second = _pair(value, what)
    if first != second:
        raise InputError(f"{what} {(first, second)} differs between H and W; {why}")
    return first


class ConvBnAct(nn.Module):
    """``leaky_relu(conv2d(x, weight, bias, stride, padding), negative_slope)`` through
    ``torch.ops.tilewise.conv_bias_leakyrelu``, on NCHW tensors.

    ``weight`` [out_channels, in_channels, kernel_h, kernel_w] and ``bias`` [out_channels]
    are nn.Conv2d's, initialised as it does; ``negative_slope`` 0 is a ReLU. The kernel takes
    one stride and one padding for both spatial dims (the filter may be non-square), zero
    padding, no dilation, no groups. :func:`fuse_conv_bn_act` builds one from a Conv2d, an
    eval-mode BatchNorm2d and the activation; its state dict (``weight``, ``bias``) loads into
    a ConvBnAct of the same geometry, or into an ``nn.Conv2d`` with a bias.

    The folded parameters are ordinary parameters: training the module trains them (the
    BatchNorm it was folded from is gone, so there are no statistics to update).
    """

    weight: nn.Parameter
    bias: nn.Parameter

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        *,
        negative_slope: float = 0.0,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        why = "the kernel takes one for both"
        self.stride = _square(stride, "ConvBnAct: stride", why)
        self.padding = _square(padding, "ConvBnAct: padding", why)
        # Checked now, not at the first call: a slope the kernel's float field cannot hold.
        bound = get_op("conv_bias_leakyrelu").bind_parameters({"negative_slope": negative_slope})
        self.negative_slope = bound["negative_slope"]
        kernel = _pair(kernel_size, "ConvBnAct: kernel_size")
        conv = nn.Conv2d(in_channels, out_channels, kernel, dtype=dtype)  # its init
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.weight = cast(nn.Parameter, conv.weight)
        self.bias = cast(nn.Parameter, conv.bias)  # the kernel always adds one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:  # one image without a batch dim, as nn.Conv2d takes it
            one: torch.Tensor = self(x.unsqueeze(0))
            return one.squeeze(0)
        if x.dim() == 4 and x.shape[0] == 0:  # an empty batch: empty output, as nn.Conv2d
            # The kernel takes no empty dim: one image's output shape, on the meta device.
            image = torch.empty((1, *x.shape[1:]), dtype=x.dtype, device="meta")
            shape = self._call(image, self.weight.to("meta"), self.bias.to("meta")).shape
            return x.new_empty((0, *shape[1:]))
        return self._call(x, self.weight, self.bias)

    def _call(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.tilewise.conv_bias_leakyrelu(
            x,
            weight,
            bias,
            stride=self.stride,
            pad=self.padding,
            negative_slope=self.negative_slope,
        )
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, negative_slope={self.negative_slope}"
        )


def _slope(act: nn.Module) -> float:
    if isinstance(act, nn.ReLU):
        return 0.0
    if isinstance(act, nn.LeakyReLU):
        return float(act.negative_slope)
    raise InputError(
        f"fuse_conv_bn_act: act must be an nn.ReLU or an nn.LeakyReLU (the kernel's "
        f"epilogue is a LeakyReLU, slope 0 for a ReLU), got {type(act).__name__}"
    )


def _padding(conv: nn.Conv2d) -> int:
    if conv.padding_mode != "zeros":
        raise InputError(
            f"fuse_conv_bn_act: conv has padding_mode={conv.padding_mode!r}; the kernel pads "
            "with zeros only"
        )
    padding = conv.padding
    if isinstance(padding, str):
        # "same" pads (R - 1) / 2 on each side where that is whole; the kernel's one padding
        # for both dims and sides covers it only for square, odd kernels.
        r, s = conv.kernel_size
        if padding == "valid":
            return 0
        if r == s and r % 2:
            return (r - 1) // 2
        raise InputError(
            f"fuse_conv_bn_act: conv has padding='same' with kernel_size {conv.kernel_size}; "
            "the kernel pads all four sides alike, which 'same' is only for square odd kernels"
        )
    return _square(padding, "fuse_conv_bn_act: conv's padding", "the kernel pads all sides alike")


def _check_geometry(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[int, int]:
    """(stride, padding) of ``conv``, or an InputError naming what the kernel cannot do."""
    if conv.groups != 1:
        raise InputError(f"fuse_conv_bn_act: conv has groups={conv.groups}; the kernel takes 1")
    if tuple(conv.dilation) != (1, 1):
        raise InputError(
            f"fuse_conv_bn_act: conv has dilation={tuple(conv.dilation)}; the kernel takes 1"
        )
    stride = _square(
        conv.stride, "fuse_conv_bn_act: conv's stride", "the kernel takes one for both"
    )
    padding = _padding(conv)
    if bn.num_features != conv.out_channels:
        raise InputError(
            f"fuse_conv_bn_act: bn has num_features={bn.num_features}, but conv has "
            f"out_channels={conv.out_channels}: bn must normalise conv's output channels"
        )
    return stride, padding


def fuse_conv_bn_act(conv: nn.Conv2d, bn: nn.BatchNorm2d, act: nn.Module) -> ConvBnAct:
    """``nn.Sequential(conv, bn, act).eval()`` as one :class:`ConvBnAct`.

    The BatchNorm is folded into the convolution: with ``scale = bn.weight /
    sqrt(bn.running_var + bn.eps)`` (``bn.weight`` 1 without affine), the weight becomes
    ``conv.weight * scale`` per output channel and the bias ``(conv.bias - running_mean) *
    scale + bn.bias`` (conv.bias 0 without one), computed in float64 and stored in conv's
    dtype. ``act`` is an nn.ReLU (slope 0) or an nn.LeakyReLU (its ``negative_slope``).
    The modules are not changed.

    Raises:
        InputError: a module of another type; ``bn`` in training mode (it would normalise by
            the batch's statistics, which no folded weight holds) or without running
            statistics; ``bn``'s channels not ``conv``'s output channels; a conv the kernel
            cannot run: groups or dilation other than 1, padding_mode other than ``"zeros"``,
            a stride or padding that differs between H and W.
    """
    if not isinstance(conv, nn.Conv2d):
        raise InputError(f"fuse_conv_bn_act: conv must be an nn.Conv2d, got {type(conv).__name__}")
    if not isinstance(bn, nn.BatchNorm2d):
        raise InputError(f"fuse_conv_bn_act: bn must be an nn.BatchNorm2d, got {type(bn).__name__}")
    slope = _slope(act)
    if conv.weight.dtype not in (torch.float32, torch.float16):
        raise InputError(
            f"fuse_conv_bn_act: conv has dtype {conv.weight.dtype}; the kernel takes "
            "torch.float32 and torch.float16 (convert the modules first, e.g. .float())"
        )
    if bn.training:
        raise InputError(
            "fuse_conv_bn_act: bn is in training mode, where it normalises by each batch's "
            "statistics; only an eval-mode BatchNorm (its running statistics) folds into the "
            "conv: call .eval() on it (or the model) first"
        )
    if bn.running_mean is None or bn.running_var is None:
        raise InputError(
            "fuse_conv_bn_act: bn has no running statistics (track_running_stats=False): "
            "in eval mode it normalises by each batch's, which no folded weight holds"
        )
    stride, padding = _check_geometry(conv, bn)
    r, s = conv.kernel_size
    fused = ConvBnAct(
        conv.in_channels,
        conv.out_channels,
        (r, s),
        stride,
        padding,
        negative_slope=slope,
        dtype=conv.weight.dtype,
    )
    with torch.no_grad():
        wide = torch.float64
        scale = torch.rsqrt(bn.running_var.to(wide) + bn.eps)
        if bn.weight is not None:
            scale = scale * bn.weight.to(wide)
        bias = -bn.running_mean.to(wide)
        if conv.bias is not None:
            bias = bias + conv.bias.to(wide)
        bias = bias * scale
        if bn.bias is not None:
            bias = bias + bn.bias.to(wide)
        weight = conv.weight.to(wide) * scale[:, None, None, None]
        fused.weight.copy_(weight.to(conv.weight.dtype))
        fused.bias.copy_(bias.to(conv.weight.dtype))
    return fused.to(conv.weight.device)
