"""Reductions (sum, mean, max, argmax, var, ...) and cumsum, with torch's dim/keepdim rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import at_user_line, cast, make, normalize_dim, normalize_dims
from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument
from fuel.ir.ops import AxisParams, OpKind, ReduceParams

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


class ValuesIndices(NamedTuple):
    """What ``max(dim)`` / ``min(dim)`` return, as in torch."""

    values: TensorBase
    indices: TensorBase


def reduce(op: OpKind, x: TensorBase, dim=None, keepdim: bool = False) -> TensorBase:
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


def argreduce(op: OpKind, x: TensorBase, dim=None, keepdim: bool = False) -> TensorBase:
    """argmax/argmin: over one dim, or the flattened tensor when ``dim`` is None."""
    if dim is None:
        result = reduce(op, x, None, False)
        if keepdim:
            result = result.reshape((1,) * x.ndim)
        return result
    return reduce(op, x, (normalize_dim(dim, x.ndim),), keepdim)


def extreme(op: OpKind, index_op: OpKind, x: TensorBase, dim=None, keepdim: bool = False):
    """torch's max/min: all elements, elementwise with a tensor, or (values, indices) over dim."""
    if isinstance(dim, TensorBase):
        from fuel.frontend.elementwise import binary

        return binary(OpKind.MAXIMUM if op is OpKind.MAX else OpKind.MINIMUM, x, dim)
    if dim is None:
        return reduce(op, x, None, keepdim)
    return ValuesIndices(reduce(op, x, dim, keepdim), argreduce(index_op, x, dim, keepdim))


def variance(x: TensorBase, dim=None, correction=1, keepdim: bool = False,
             unbiased=None) -> TensorBase:
    """Variance with Bessel's ``correction`` (torch's default 1; ``unbiased=False`` means 0)."""
    if unbiased is not None:
        correction = 1 if unbiased else 0
    if not x.dtype.is_floating:
        x = wrap(cast(x._node, dt.DEFAULT_FLOAT))
    dims = normalize_dims(dim, x.ndim)
    count = 1
    for axis in dims:
        count *= x.shape[axis]
    centered = x - reduce(OpKind.MEAN, x, dims, True)
    total = reduce(OpKind.SUM, centered * centered, dims, keepdim)
    return total / max(count - correction, 0)


def cumsum(x: TensorBase, dim: int) -> TensorBase:
    """Running sum along ``dim`` (integers accumulate in int64)."""
    return make(OpKind.CUMSUM, (x._node,), AxisParams(normalize_dim(dim, x.ndim)))


class ReduceMethods:
    """Tensor's reductions and scans, with torch's dim/keepdim rules."""

    __slots__ = ()

    @at_user_line
    def sum(self, dim=None, keepdim: bool = False) -> Self:
        """Sum over ``dim`` (all dims when None); integers accumulate in int64."""
        return reduce(OpKind.SUM, self, dim, keepdim)

    @at_user_line
    def mean(self, dim=None, keepdim: bool = False) -> Self:
        """Mean over ``dim`` (all dims when None)."""
        return reduce(OpKind.MEAN, self, dim, keepdim)

    @at_user_line
    def prod(self, dim=None, keepdim: bool = False) -> Self:
        """Product over ``dim`` (all dims when None)."""
        return reduce(OpKind.PROD, self, dim, keepdim)

    @at_user_line
    def amax(self, dim=None, keepdim: bool = False) -> Self:
        """Maximum over ``dim`` (all dims when None)."""
        return reduce(OpKind.MAX, self, dim, keepdim)

    @at_user_line
    def amin(self, dim=None, keepdim: bool = False) -> Self:
        """Minimum over ``dim`` (all dims when None)."""
        return reduce(OpKind.MIN, self, dim, keepdim)

    @at_user_line
    def all(self, dim=None, keepdim: bool = False) -> Self:
        """Whether every element over ``dim`` is true."""
        return reduce(OpKind.ALL, self, dim, keepdim)

    @at_user_line
    def any(self, dim=None, keepdim: bool = False) -> Self:
        """Whether any element over ``dim`` is true."""
        return reduce(OpKind.ANY, self, dim, keepdim)

    @at_user_line
    def max(self, dim=None, keepdim: bool = False):
        """torch's max: of all elements, elementwise with a tensor, or (values, indices)."""
        return extreme(OpKind.MAX, OpKind.ARGMAX, self, dim, keepdim)

    @at_user_line
    def min(self, dim=None, keepdim: bool = False):
        """torch's min: of all elements, elementwise with a tensor, or (values, indices)."""
        return extreme(OpKind.MIN, OpKind.ARGMIN, self, dim, keepdim)

    @at_user_line
    def argmax(self, dim=None, keepdim: bool = False) -> Self:
        """Position of the first maximum over ``dim`` (of the flattened tensor when None)."""
        return argreduce(OpKind.ARGMAX, self, dim, keepdim)

    @at_user_line
    def argmin(self, dim=None, keepdim: bool = False) -> Self:
        """Position of the first minimum over ``dim`` (of the flattened tensor when None)."""
        return argreduce(OpKind.ARGMIN, self, dim, keepdim)

    @at_user_line
    def var(self, dim=None, correction=1, keepdim: bool = False, unbiased=None) -> Self:
        """Variance with Bessel's ``correction`` (``unbiased=False`` means 0)."""
        return variance(self, dim, correction, keepdim, unbiased)

    @at_user_line
    def std(self, dim=None, correction=1, keepdim: bool = False, unbiased=None) -> Self:
        """Standard deviation with Bessel's ``correction``."""
        return variance(self, dim, correction, keepdim, unbiased).sqrt()

    @at_user_line
    def cumsum(self, dim: int) -> Self:
        """Running sum along ``dim`` (integers accumulate in int64)."""
        return cumsum(self, dim)
