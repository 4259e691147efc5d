"""Matrix products: MatMul, Gemm, Einsum (MatMulInteger: quantize.py)."""

from __future__ import annotations

from fuel.frontend.structured import matmul
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
