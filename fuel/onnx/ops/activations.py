"""Activation functions: LeakyRelu, Elu, Selu, Celu, HardSigmoid, HardSwish, Softplus,
Softsign, Mish, Swish, Gelu, PRelu, Shrink, ThresholdedRelu."""

from __future__ import annotations

from fuel.frontend.elementwise import gelu
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.ops.common import OpKind, Tensor, require_float, scalar, unary, where


def _float_input(ctx: NodeContext, index: int = 0) -> Tensor:
    x = ctx.input(index)
    require_float(x, ctx.proto.op_type)
    return x


def _expm1(x: Tensor) -> Tensor:
    return unary(OpKind.EXP, x) - 1


@onnx_op("LeakyRelu")
def leaky_relu(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return where(x >= 0, x, x * ctx.attr("alpha", 0.01), dtype=x.dtype)


@onnx_op("Elu")
def elu(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return where(x > 0, x, _expm1(x) * ctx.attr("alpha", 1.0), dtype=x.dtype)


@onnx_op("Selu")
def selu(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return where(x > 0, x * gamma, _expm1(x) * (alpha * gamma), dtype=x.dtype)


@onnx_op("Celu")
def celu(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    alpha = ctx.attr("alpha", 1.0)
    negative = _expm1(x / alpha) * alpha
    return unary(OpKind.RELU, x) + where(negative < 0, negative, 0.0, dtype=x.dtype)


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return (x * ctx.attr("alpha", 0.2) + ctx.attr("beta", 0.5)).clamp(0.0, 1.0)


@onnx_op("HardSwish")
def hard_swish(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)


def softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)) without overflow: relu(x) + log(1 + exp(-|x|))."""
    tail = unary(OpKind.LOG, unary(OpKind.EXP, -unary(OpKind.ABS, x)) + 1.0)
    return unary(OpKind.RELU, x) + tail


@onnx_op("Softplus")
def softplus_(ctx: NodeContext) -> Tensor:
    return softplus(_float_input(ctx))


@onnx_op("Softsign")
def softsign(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return x / (unary(OpKind.ABS, x) + 1.0)


@onnx_op("Mish")
def mish(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return x * unary(OpKind.TANH, softplus(x))


@onnx_op("Swish")
def swish(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return x * unary(OpKind.SIGMOID, x * ctx.attr("alpha", 1.0))


@onnx_op("Gelu")
def gelu_(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return gelu(x, ctx.attr("approximate", "none"))


@onnx_op("PRelu")
def prelu(ctx: NodeContext) -> Tensor:
    x, slope = ctx.input(0), ctx.input(1)
    if ctx.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))  # one slope per channel
    return where(x < scalar(0, x), x * slope, x, dtype=x.dtype)


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx: NodeContext) -> Tensor:
    x = _float_input(ctx)
    return where(x > ctx.attr("alpha", 1.0), x, 0.0, dtype=x.dtype)


@onnx_op("Shrink")
def shrink(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    lambd = ctx.attr("lambd", 0.5)
    bias = ctx.attr("bias", 0.0)
    # Integer inputs compare against the float thresholds exactly (in float64).
    wide = x if x.dtype.is_floating else x.double()
    shift = bias if x.dtype.is_floating else scalar(int(bias), x)
    low = where(wide < -lambd, x + shift, 0, dtype=x.dtype)
    return where(wide > lambd, x - shift, low, dtype=x.dtype)

