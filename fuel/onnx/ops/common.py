"""Helpers the op converters share: casts, typed scalars, axes, host-side shape values."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.build import constant, make
from fuel.frontend.elementwise import binary, unary, where
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.ops import OpKind, SliceParams
from fuel.onnx.errors import OnnxError, UnsupportedDType
from fuel.tensor import Tensor

__all__ = [
    "OpKind", "Tensor", "axis_of", "binary", "cast", "full", "full_like_shape", "scalar",
    "slice_axes", "unary", "where",
]


def cast(x: Tensor, dtype: DType) -> Tensor:
    """``x`` as ``dtype`` (itself when it already is)."""
    return x if x.dtype is dtype else x.to(dtype)


def scalar(value, like: Tensor, dtype: DType | None = None) -> Tensor:
    """A 0-d tensor holding ``value`` as ``like``'s dtype (or ``dtype``) on its device."""
    return Tensor(constant(value, dtype or like.dtype, like._node.device))


def full(shape, value, dtype: DType, device) -> Tensor:
    """A lazy tensor of ``shape`` filled with ``value``."""
    return fuel.full(tuple(int(s) for s in shape), value, dtype=dtype, device=device)


def full_like_shape(x: Tensor, shape, value) -> Tensor:
    return full(shape, value, x.dtype, x.device)


def axis_of(axis: int, ndim: int, what: str = "axis") -> int:
    """A non-negative axis; OnnxError when out of range."""
    axis = int(axis)
    if not -ndim <= axis < max(ndim, 1):
        raise OnnxError(f"{what} {axis} is out of range for a tensor of rank {ndim}")
    return axis % max(ndim, 1)


def slice_axes(x: Tensor, starts, stops, steps) -> Tensor:
    """A SLICE view from normalized per-dim starts/stops/steps (stop may be -1 for a
    negative step reaching index 0)."""
    if all(a == 0 and b == n and c == 1 for a, b, c, n in zip(starts, stops, steps, x.shape)):
        return x
    return make(OpKind.SLICE, (x._node,), SliceParams(tuple(starts), tuple(stops), tuple(steps)))


def narrow(x: Tensor, axis: int, start: int, stop: int, step: int = 1) -> Tensor:
    """``x`` sliced along one axis."""
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return slice_axes(x, starts, stops, steps)


def require_float(x: Tensor, what: str) -> None:
    if not x.dtype.is_floating:
        raise UnsupportedDType(f"{what} needs a floating-point input, got {x.dtype.name}")


def compute_dtype(dtype: DType) -> DType:
    """float16/bfloat16 are computed in float32 where accuracy needs it."""
    return dt.float32 if dtype in (dt.float16, dt.bfloat16) else dtype


def reduce_to(x: Tensor, op: OpKind, axes, keepdims: bool) -> Tensor:
    from fuel.frontend.reduce import reduce

    return reduce(op, x, tuple(axes), keepdims)


def shape_array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def neg_inf(dtype: DType):
    """The lowest value of ``dtype`` (-inf for floats)."""
    if dtype.is_floating:
        return float("-inf")
    if dtype.is_bool:
        return False
    return int(np.iinfo(dtype.numpy).min)


def pos_inf(dtype: DType):
    if dtype.is_floating:
        return float("inf")
    if dtype.is_bool:
        return True
    return int(np.iinfo(dtype.numpy).max)


def not_(x: Tensor) -> Tensor:
    return unary(OpKind.LOGICAL_NOT, x)


def select(condition: Tensor, a, b, dtype: DType) -> Tensor:
    return where(condition, a, b, dtype=dtype)


def same_binary(op: OpKind, a: Tensor, b: Tensor) -> Tensor:
    """A binary op whose ONNX operands must share a dtype (fuel would promote)."""
    if a.dtype is not b.dtype:
        raise OnnxError(f"operands have different dtypes {a.dtype.name} and {b.dtype.name}")
    return binary(op, a, b)
