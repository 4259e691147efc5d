"""Matrix products: MatMul, Gemm, Einsum, MatMulInteger."""

from __future__ import annotations

from fuel.frontend.structured import matmul
from fuel.ir import dtype as dt
from fuel.nn import tensor_ops
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import Tensor, cast


@onnx_op("MatMul")
def matmul_(ctx: NodeContext) -> Tensor:
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype is not b.dtype:
        raise OnnxError(f"operands have different dtypes {a.dtype.name} and {b.dtype.name}")
    return matmul(a, b)


@onnx_op("Gemm")
def gemm(ctx: NodeContext) -> Tensor:
    a, b, c = ctx.input(0), ctx.input(1), ctx.optional(2)
    if ctx.attr("transA", 0):
        a = a.t()
    if ctx.attr("transB", 0):
        b = b.t()
    result = matmul(a, b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        result = result * alpha if result.dtype.is_floating else result * int(alpha)
    if c is not None:
        if beta != 1.0:
            c = c * beta if c.dtype.is_floating else c * int(beta)
        result = result + cast(c, result.dtype)
    return result


@onnx_op("Einsum")
def einsum(ctx: NodeContext) -> Tensor:
    operands = [ctx.input(i) for i in range(ctx.num_inputs)]
    return tensor_ops.einsum(ctx.attr("equation"), *operands)


def _zero_point_shifted(ctx: NodeContext, index: int, zero_index: int, axis_from_end: int):
    x = cast(ctx.input(index), dt.int32)
    zero = ctx.optional(zero_index)
    if zero is None:
        return x
    zero = cast(zero, dt.int32)
    if zero.ndim == 1 and zero.shape[0] > 1:
        shape = [1] * x.ndim
        shape[x.ndim - axis_from_end] = zero.shape[0]
        zero = zero.reshape(tuple(shape))
    return x - zero


@onnx_op("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> Tensor:
    a = _zero_point_shifted(ctx, 0, 2, 1 if ctx.input(0).ndim == 1 else 2)
    b = _zero_point_shifted(ctx, 1, 3, 1)
    return matmul(a, b)
