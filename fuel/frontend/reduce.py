"""Reductions (sum, mean, max, argmax, var, ...) and cumsum, with torch's dim/keepdim rules."""

from __future__ import annotations

from typing import NamedTuple

from fuel.frontend.build import cast, make, normalize_dim, normalize_dims
from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument
from fuel.ir.ops import AxisParams, OpKind, ReduceParams
from fuel.tensor import Tensor


class ValuesIndices(NamedTuple):
    """What ``max(dim)`` / ``min(dim)`` return, as in torch."""

    values: Tensor
    indices: Tensor


def reduce(op: OpKind, x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Reduce ``x`` over ``dim`` (int, tuple or None for all) with ``op``."""
    dims = normalize_dims(dim, x.ndim)
    if op in (OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN):
        for axis in dims:
            if x.shape[axis] == 0:
                raise InvalidArgument(
                    f"{op.value}() over dim {axis} of size 0 has no identity (shape {x.shape})"
                )
        if not dims and x.numel() == 0:
            raise InvalidArgument(f"{op.value}() of an empty tensor")
    node = x._node
    if op is OpKind.MEAN and not node.dtype.is_floating:
        raise DTypeError(f"mean() needs a floating-point input, got {node.dtype.name}; "
                         "use .float() first")
    return make(op, (node,), ReduceParams(dims, bool(keepdim)))


def argreduce(op: OpKind, x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """argmax/argmin: over one dim, or the flattened tensor when ``dim`` is None."""
    if dim is None:
        result = reduce(op, x, None, False)
        if keepdim:
            result = result.reshape((1,) * x.ndim)
        return result
    return reduce(op, x, (normalize_dim(dim, x.ndim),), keepdim)


def extreme(op: OpKind, index_op: OpKind, x: Tensor, dim=None, keepdim: bool = False):
    """torch's max/min: all elements, elementwise with a tensor, or (values, indices) over dim."""
    if isinstance(dim, Tensor):
        from fuel.frontend.elementwise import binary

        return binary(OpKind.MAXIMUM if op is OpKind.MAX else OpKind.MINIMUM, x, dim)
    if dim is None:
        return reduce(op, x, None, keepdim)
    return ValuesIndices(reduce(op, x, dim, keepdim), argreduce(index_op, x, dim, keepdim))


def variance(x: Tensor, dim=None, correction=1, keepdim: bool = False, unbiased=None) -> Tensor:
    """Variance with Bessel's ``correction`` (torch's default 1; ``unbiased=False`` means 0)."""
    if unbiased is not None:
        correction = 1 if unbiased else 0
    if not x.dtype.is_floating:
        x = Tensor(cast(x._node, dt.DEFAULT_FLOAT))
    dims = normalize_dims(dim, x.ndim)
    count = 1
    for axis in dims:
        count *= x.shape[axis]
    centered = x - reduce(OpKind.MEAN, x, dims, True)
    total = reduce(OpKind.SUM, centered * centered, dims, keepdim)
    return total / max(count - correction, 0)


def cumsum(x: Tensor, dim: int) -> Tensor:
    """Running sum along ``dim`` (integers accumulate in int64)."""
    return make(OpKind.CUMSUM, (x._node,), AxisParams(normalize_dim(dim, x.ndim)))


def _method(op: OpKind):
    def method(self: Tensor, dim=None, keepdim: bool = False) -> Tensor:
        return reduce(op, self, dim, keepdim)

    method.__doc__ = f"{op.value} over ``dim`` (all dims when None)."
    return method


def _std(self: Tensor, dim=None, correction=1, keepdim=False, unbiased=None) -> Tensor:
    return variance(self, dim, correction, keepdim, unbiased).sqrt()


def _var(self: Tensor, dim=None, correction=1, keepdim=False, unbiased=None) -> Tensor:
    return variance(self, dim, correction, keepdim, unbiased)


def _max(self: Tensor, dim=None, keepdim: bool = False):
    return extreme(OpKind.MAX, OpKind.ARGMAX, self, dim, keepdim)


def _min(self: Tensor, dim=None, keepdim: bool = False):
    return extreme(OpKind.MIN, OpKind.ARGMIN, self, dim, keepdim)


def _argmax(self: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return argreduce(OpKind.ARGMAX, self, dim, keepdim)


def _argmin(self: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return argreduce(OpKind.ARGMIN, self, dim, keepdim)


def _cumsum(self: Tensor, dim: int) -> Tensor:
    return cumsum(self, dim)


REDUCE_METHODS = {
    "sum": OpKind.SUM, "mean": OpKind.MEAN, "prod": OpKind.PROD, "amax": OpKind.MAX,
    "amin": OpKind.MIN, "all": OpKind.ALL, "any": OpKind.ANY,
}


def install(cls) -> None:
    """Attach the reduction methods to Tensor."""
    for name, op in REDUCE_METHODS.items():
        setattr(cls, name, _method(op))
    cls.max, cls.min = _max, _min
    cls.argmax, cls.argmin = _argmax, _argmin
    cls.var, cls.std = _var, _std
    cls.cumsum = _cumsum
