"""Convolution and pooling (torch's ``conv2d``, ``max_pool2d``, ... and N-d forms with
asymmetric padding, as ONNX needs them)."""

from __future__ import annotations

from collections.abc import Sequence

from fuel.ir.errors import InvalidArgument, ShapeError
from fuel.ir.ops import OpKind
from fuel.ir.params import CONV_ACTIVATIONS, ConvEpilogueParams, ConvParams, PoolParams
from fuel.tensor import Tensor, make

__all__ = [
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "avg_pool_nd", "conv1d", "conv2d", "conv3d",
    "conv_fused", "conv_nd", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "conv_transpose_nd",
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool_nd",
]


def _per_dim(value, rank: int, what: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (int(value),) * rank
    values = tuple(int(v) for v in value)
    if len(values) == 1:
        return values * rank
    if len(values) != rank:
        raise InvalidArgument(f"{what} needs {rank} values (one per spatial dim), got {value}")
    return values


def conv_nd(x: Tensor, weight: Tensor, bias: Tensor | None = None,
            strides: Sequence[int] | None = None, pads_begin: Sequence[int] | None = None,
            pads_end: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
            groups: int = 1) -> Tensor:
    """Cross-correlation of ``x`` (N, C, ...) with ``weight`` (M, C/groups, ...), padding
    ``pads_begin``/``pads_end`` zeros per spatial dim; ``bias`` (M,) is added per channel."""
    rank = x.ndim - 2
    if rank < 1:
        raise ShapeError(f"convolution needs an input of shape (N, C, ...), got {x.shape}")
    params = ConvParams(
        _per_dim(strides or 1, rank, "strides"), _per_dim(pads_begin or 0, rank, "padding"),
        _per_dim(pads_end if pads_end is not None else (pads_begin or 0), rank, "padding"),
        _per_dim(dilations or 1, rank, "dilation"), int(groups))
    result = make(OpKind.CONV, (x._node, weight.to(x.dtype)._node), params)
    return _add_bias(result, bias)


def conv_fused(x: Tensor, weight: Tensor, bias: Tensor, params: ConvParams,
               activation: str = "", alpha: float = 0.0, beta: float = 0.0,
               residual: Tensor | None = None, slope: Tensor | None = None) -> Tensor:
    """``activation(conv(x, weight) + bias + residual)`` as one node, the epilogue run in the
    convolution's output loop where the backend has such a kernel (else decomposed).
    ``activation``: one of ``CONV_ACTIVATIONS`` ("" none, "relu", "clip" between ``alpha``
    and ``beta``, "sigmoid", "silu", "hard_sigmoid" (``alpha * y + beta`` clamped to 0..1),
    "hard_swish", "leaky_relu" (slope ``alpha``), "prelu" (per-channel ``slope``), "tanh")."""
    if activation not in CONV_ACTIVATIONS:
        raise InvalidArgument(f"conv_fused: activation {activation!r} is not one of "
                              f"{', '.join(repr(a) for a in CONV_ACTIVATIONS)}")
    if (activation == "prelu") != (slope is not None):
        raise InvalidArgument("conv_fused: a slope goes with activation 'prelu' (and only it)")
    epilogue = ConvEpilogueParams(params, activation, float(alpha), float(beta),
                                  residual is not None)
    operands = [x, weight.to(x.dtype), bias.to(x.dtype)]
    operands += [t.to(x.dtype) for t in (residual, slope) if t is not None]
    return make(OpKind.CONV_FUSED, tuple(t._node for t in operands), epilogue)


def conv_transpose_nd(x: Tensor, weight: Tensor, bias: Tensor | None = None,
                      strides: Sequence[int] | None = None,
                      pads_begin: Sequence[int] | None = None,
                      pads_end: Sequence[int] | None = None,
                      dilations: Sequence[int] | None = None, groups: int = 1,
                      output_padding: Sequence[int] | None = None) -> Tensor:
    """Transposed convolution of ``x`` (N, C, ...) with ``weight`` (C, M/groups, ...)."""
    rank = x.ndim - 2
    if rank < 1:
        raise ShapeError(f"transposed convolution needs (N, C, ...), got {x.shape}")
    params = ConvParams(
        _per_dim(strides or 1, rank, "strides"), _per_dim(pads_begin or 0, rank, "padding"),
        _per_dim(pads_end if pads_end is not None else (pads_begin or 0), rank, "padding"),
        _per_dim(dilations or 1, rank, "dilation"), int(groups),
        _per_dim(output_padding or 0, rank, "output_padding"))
    result = make(OpKind.CONV_TRANSPOSE, (x._node, weight.to(x.dtype)._node), params)
    return _add_bias(result, bias)


def _add_bias(result: Tensor, bias: Tensor | None) -> Tensor:
    if bias is None:
        return result
    if bias.ndim != 1 or bias.shape[0] != result.shape[1]:
        raise ShapeError(f"bias must have shape ({result.shape[1]},), got {bias.shape}")
    return result + bias.to(result.dtype).reshape((-1,) + (1,) * (result.ndim - 2))


def _pool_params(x: Tensor, kernel, strides, pads_begin, pads_end, dilations, ceil_mode,
                 count_include_pad=False, divide=True, storage_order=0) -> PoolParams:
    rank = len(kernel) if not isinstance(kernel, int) else x.ndim - 2
    kernel = _per_dim(kernel, rank, "kernel_size")
    return PoolParams(
        kernel, _per_dim(strides if strides else kernel, rank, "stride"),
        _per_dim(pads_begin or 0, rank, "padding"),
        _per_dim(pads_end if pads_end is not None else (pads_begin or 0), rank, "padding"),
        _per_dim(dilations or 1, rank, "dilation"), bool(ceil_mode), bool(count_include_pad),
        bool(divide), int(storage_order))


def max_pool_nd(x: Tensor, kernel, strides=None, pads_begin=None, pads_end=None,
                dilations=None, ceil_mode: bool = False, return_indices: bool = False,
                storage_order: int = 0):
    """Max over windows of the trailing ``len(kernel)`` dims (padding never wins). With
    ``return_indices`` also the flat position of each maximum within its spatial plane."""
    params = _pool_params(x, kernel, strides, pads_begin, pads_end, dilations, ceil_mode,
                          storage_order=storage_order)
    values = make(OpKind.MAX_POOL, (x._node,), params)
    if not return_indices:
        return values
    return values, make(OpKind.MAX_POOL_INDICES, (x._node,), params)


def avg_pool_nd(x: Tensor, kernel, strides=None, pads_begin=None, pads_end=None,
                dilations=None, ceil_mode: bool = False, count_include_pad: bool = True,
                divide: bool = True) -> Tensor:
    """Mean over windows (``divide=False``: the window sums); ``count_include_pad`` counts
    explicit zero padding in the divisor."""
    if not x.dtype.is_floating:
        x = x.float()
    params = _pool_params(x, kernel, strides, pads_begin, pads_end, dilations, ceil_mode,
                          count_include_pad, divide)
    return make(OpKind.AVG_POOL, (x._node,), params)


# ----------------------------------------------------------------------------- torch names


def _conv(rank: int):
    def conv(input: Tensor, weight: Tensor, bias: Tensor | None = None,  # noqa: A002
             stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
        if isinstance(padding, str):
            padding = _string_padding(padding, weight.shape[2:], _per_dim(dilation, rank, "d"))
            return conv_nd(input, weight, bias, _per_dim(stride, rank, "stride"),
                           padding[0], padding[1], _per_dim(dilation, rank, "dilation"),
                           groups)
        pads = _per_dim(padding, rank, "padding")
        return conv_nd(input, weight, bias, _per_dim(stride, rank, "stride"), pads, pads,
                       _per_dim(dilation, rank, "dilation"), groups)

    conv.__name__ = f"conv{rank}d"
    conv.__doc__ = f"torch.nn.functional.conv{rank}d."
    return conv


def _string_padding(mode: str, kernel, dilations):
    if mode == "valid":
        return (0,) * len(kernel), (0,) * len(kernel)
    if mode != "same":
        raise InvalidArgument(f"padding must be 'same', 'valid' or numbers, got {mode!r}")
    totals = [(k - 1) * d for k, d in zip(kernel, dilations)]
    return tuple(t // 2 for t in totals), tuple(t - t // 2 for t in totals)


def _conv_transpose(rank: int):
    def conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None = None,  # noqa: A002
                       stride=1, padding=0, output_padding=0, groups: int = 1,
                       dilation=1) -> Tensor:
        pads = _per_dim(padding, rank, "padding")
        return conv_transpose_nd(input, weight, bias, _per_dim(stride, rank, "stride"), pads,
                                 pads, _per_dim(dilation, rank, "dilation"), groups,
                                 _per_dim(output_padding, rank, "output_padding"))

    conv_transpose.__name__ = f"conv_transpose{rank}d"
    conv_transpose.__doc__ = f"torch.nn.functional.conv_transpose{rank}d."
    return conv_transpose


def _max_pool(rank: int):
    known: dict = {}  # the arguments -> their PoolParams (a layer calls with the same ones)

    def max_pool(input: Tensor, kernel_size, stride=None, padding=0,  # noqa: A002
                 dilation=1, ceil_mode: bool = False, return_indices: bool = False):
        try:
            params = known.get((kernel_size, stride, padding, dilation, ceil_mode))
        except TypeError:  # a list among them
            params = None
        if params is not None and not return_indices:
            return make(OpKind.MAX_POOL, (input._node,), params)
        pads = _per_dim(padding, rank, "padding")
        result = max_pool_nd(input, _per_dim(kernel_size, rank, "kernel_size"),
                             stride, pads, pads, dilation, ceil_mode, return_indices)
        if not return_indices:
            try:
                if len(known) > 256:
                    known.clear()
                known[(kernel_size, stride, padding, dilation, ceil_mode)] = result._node.params
            except TypeError:
                pass
        return result

    max_pool.__name__ = f"max_pool{rank}d"
    max_pool.__doc__ = f"torch.nn.functional.max_pool{rank}d (indices per spatial plane)."
    return max_pool


def _avg_pool(rank: int):
    def avg_pool(input: Tensor, kernel_size, stride=None, padding=0,  # noqa: A002
                 ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
        pads = _per_dim(padding, rank, "padding")
        return avg_pool_nd(input, _per_dim(kernel_size, rank, "kernel_size"), stride, pads,
                           pads, None, ceil_mode, count_include_pad)

    avg_pool.__name__ = f"avg_pool{rank}d"
    avg_pool.__doc__ = f"torch.nn.functional.avg_pool{rank}d."
    return avg_pool


conv1d, conv2d, conv3d = _conv(1), _conv(2), _conv(3)
conv_transpose1d, conv_transpose2d, conv_transpose3d = (
    _conv_transpose(1), _conv_transpose(2), _conv_transpose(3))
max_pool1d, max_pool2d, max_pool3d = _max_pool(1), _max_pool(2), _max_pool(3)
avg_pool1d, avg_pool2d, avg_pool3d = _avg_pool(1), _avg_pool(2), _avg_pool(3)
