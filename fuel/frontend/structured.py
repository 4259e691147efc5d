"""matmul and the row-wise ops (softmax, log_softmax, layer_norm, rms_norm)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import at_user_line, cast, expand, make, normalize_dim, operand_nodes
from fuel.ir import dtype as dt
from fuel.ir.errors import ShapeError
from fuel.ir.ops import AxisParams, NormParams, OpKind, broadcast_shapes

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


@at_user_line
def matmul(a: TensorBase, b: TensorBase) -> TensorBase:
    """torch.matmul: 1-D operands promoted and squeezed back, batch dims broadcast."""
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        raise ShapeError("matmul operands must both be tensors")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul needs operands with at least 1 dim, got {a.shape} and {b.shape}")
    (left, right), dtype = operand_nodes([a, b])
    if dtype.is_bool:
        left, right = cast(left, dt.DEFAULT_INT), cast(right, dt.DEFAULT_INT)
    left_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    right_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    if left_shape[-1] != right_shape[-2]:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit: inner sizes "
                         f"{left_shape[-1]} and {right_shape[-2]} differ")
    batch = broadcast_shapes(left_shape[:-2], right_shape[:-2])
    left_node = wrap(left).reshape(left_shape)._node
    right_node = wrap(right).reshape(right_shape)._node
    left_node = expand(left_node, batch + left_shape[-2:])
    right_node = expand(right_node, batch + right_shape[-2:])
    result = make(OpKind.MATMUL, (left_node, right_node), None)
    out_shape = batch + ((left_shape[-2],) if a.ndim > 1 else ()) + (
        (right_shape[-1],) if b.ndim > 1 else ())
    return result.reshape(out_shape) if out_shape != result.shape else result


def _float_input(x: TensorBase, dtype) -> TensorBase:
    if dtype is not None:
        return x.to(dt.to_dtype(dtype))
    return x if x.dtype.is_floating else x.to(dt.DEFAULT_FLOAT)


@at_user_line
def softmax(x: TensorBase, dim: int, dtype=None) -> TensorBase:
    """exp(x) / sum(exp(x)) along ``dim``, computed stably."""
    x = _float_input(x, dtype)
    return make(OpKind.SOFTMAX, (x._node,), AxisParams(normalize_dim(dim, x.ndim)))


def log_softmax(x: TensorBase, dim: int, dtype=None) -> TensorBase:
    x = _float_input(x, dtype)
    return make(OpKind.LOG_SOFTMAX, (x._node,), AxisParams(normalize_dim(dim, x.ndim)))


def _normalized(x: TensorBase, normalized_shape) -> int:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) > x.ndim or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ShapeError(f"normalized_shape {shape} does not match the trailing dims of {x.shape}")
    return len(shape)


def _parameter(value, x: TensorBase, axes: int, fill) -> TensorBase:
    from fuel.frontend.factories import full

    if value is None:
        return full(x.shape[x.ndim - axes:], fill, dtype=x.dtype, device=x.device)
    return value if value.dtype is x.dtype else value.to(x.dtype)


def layer_norm(x: TensorBase, normalized_shape, weight=None, bias=None,
               eps: float = 1e-5) -> TensorBase:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims."""
    x = _float_input(x, None)
    axes = _normalized(x, normalized_shape)
    weight = _parameter(weight, x, axes, 1)
    bias = _parameter(bias, x, axes, 0)
    return make(OpKind.LAYER_NORM, (x._node, weight._node, bias._node),
                NormParams(axes, float(eps)))


def rms_norm(x: TensorBase, normalized_shape, weight=None, eps: float | None = None) -> TensorBase:
    """x / sqrt(mean(x^2) + eps) * weight over the trailing dims (eps: the dtype's epsilon)."""
    import numpy as np

    x = _float_input(x, None)
    axes = _normalized(x, normalized_shape)
    weight = _parameter(weight, x, axes, 1)
    if eps is None:
        eps = float(np.finfo(np.float32 if x.dtype is dt.bfloat16 else x.dtype.numpy).eps)
    return make(OpKind.RMS_NORM, (x._node, weight._node), NormParams(axes, float(eps)))


class StructuredMethods:
    """Tensor's matmul and row-wise methods."""

    __slots__ = ()

    @at_user_line
    def matmul(self, other) -> Self:
        """torch.matmul."""
        return matmul(self, other)

    @at_user_line
    def __matmul__(self, other) -> Self:
        return matmul(self, other)

    @at_user_line
    def __rmatmul__(self, other) -> Self:
        return matmul(other, self)

    @at_user_line
    def softmax(self, dim: int, dtype=None) -> Self:
        """exp(x) / sum(exp(x)) along ``dim``, computed stably."""
        return softmax(self, dim, dtype)

    @at_user_line
    def log_softmax(self, dim: int, dtype=None) -> Self:
        """log(softmax(x)) along ``dim``, computed stably."""
        return log_softmax(self, dim, dtype)
