"""``com.microsoft`` ops that exporters, onnxruntime's optimizer and its quantization tools
write into real files: FusedConv, FusedGemm, FusedMatMul, Gelu, FastGelu, BiasGelu,
QuickGelu, BiasAdd, SkipLayerNormalization, SkipSimplifiedLayerNormalization and
SimplifiedLayerNormalization (also in the default domain, where onnxruntime registers it).
Semantics follow onnxruntime's contrib-op documentation; tests compare with onnxruntime."""

from __future__ import annotations

import math

import numpy as np

from fuel.frontend.elementwise import gelu
from fuel.frontend.reduce import reduce
from fuel.frontend.structured import matmul
from fuel.ir import dtype as dt
from fuel.ir.params import ConvParams
from fuel.nn import conv as nn_conv
from fuel.onnx.context import OPS, NodeContext, onnx_op
from fuel.onnx.errors import UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor, axis_of, cast, unary, where
from fuel.onnx.ops.conv import _spatial

MS = "com.microsoft"

# FusedConv / FusedGemm activation names -> CONV_FUSED's epilogue names.
EPILOGUES = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "LeakyRelu": "leaky_relu",
             "Clip": "clip", "HardSigmoid": "hard_sigmoid"}


def activation(y: Tensor, name: str, alpha: float, beta: float) -> Tensor:
    """onnxruntime's MLAS activation ``name`` over ``y`` (alpha/beta as its params)."""
    if name in ("", None):
        return y
    if name == "Relu":
        return unary(OpKind.RELU, y)
    if name == "Tanh":
        return unary(OpKind.TANH, y)
    if name == "Sigmoid":
        return unary(OpKind.SIGMOID, y)
    if name == "LeakyRelu":
        return where(y >= 0, y, y * alpha, dtype=y.dtype)
    if name == "Clip":
        return y.clamp(alpha, beta)
    if name == "HardSigmoid":
        return (y * alpha + beta).clamp(0.0, 1.0)
    raise UnsupportedOp(f"activation {name!r} is not supported")


def _activation_params(ctx: NodeContext, name: str) -> tuple[float, float]:
    values = list(ctx.attr("activation_params") or [])
    defaults = {"LeakyRelu": [0.01], "Clip": [-math.inf, math.inf], "HardSigmoid": [0.2, 0.5]}
    values = values or defaults.get(name, [])
    values = values + [0.0] * (2 - len(values))
    return float(values[0]), float(values[1])


@onnx_op("FusedConv", domain=MS)
def fused_conv(ctx: NodeContext) -> Tensor:
    """activation(Conv(X, W, B) + Z)."""
    x, w, bias, residual = ctx.input(0), ctx.input(1), ctx.optional(2), ctx.optional(3)
    name = ctx.attr("activation", "") or ""
    alpha, beta = _activation_params(ctx, name)
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    strides, dilations, begin, end = _spatial(ctx, x, kernel)
    groups = int(ctx.attr("group", 1))
    if x.dtype is dt.float32 and name in EPILOGUES | {"": ""} and 1 <= x.ndim - 2 <= 3:
        bias = bias if bias is not None else ctx.constant(np.zeros(w.shape[0], np.float32))
        params = ConvParams(tuple(strides), tuple(begin), tuple(end), tuple(dilations), groups)
        out_shape = nn_conv.conv_nd(x, w, None, strides, begin, end, dilations, groups).shape
        if residual is None or tuple(residual.shape) == tuple(out_shape):
            return nn_conv.conv_fused(x, w, bias, params, EPILOGUES.get(name, ""), alpha, beta,
                                      residual)
    y = nn_conv.conv_nd(x, w, bias, strides, begin, end, dilations, groups)
    if residual is not None:
        y = y + residual
    return activation(y, name, alpha, beta)


@onnx_op("FusedGemm", domain=MS)
def fused_gemm(ctx: NodeContext) -> Tensor:
    """activation(alpha * A' @ B' + beta * C)."""
    y = OPS[("", "Gemm")](ctx)
    name = ctx.attr("activation", "") or ""
    return activation(y, name, float(ctx.attr("activation_alpha", 0.01 if name == "LeakyRelu"
                                              else 0.2 if name == "HardSigmoid" else 0.0)),
                      float(ctx.attr("activation_beta", 0.5 if name == "HardSigmoid"
                                     else 0.0)))


def _transposed_last(x: Tensor) -> Tensor:
    order = list(range(x.ndim))
    order[-2], order[-1] = order[-1], order[-2]
    return x.permute(*order)


@onnx_op("FusedMatMul", domain=MS)
def fused_matmul(ctx: NodeContext) -> Tensor:
    """alpha * op(A) @ op(B), op transposing the last two dims (transA / transB)."""
    a, b = ctx.input(0), ctx.input(1)
    if ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
        raise UnsupportedOp("FusedMatMul with transBatchA / transBatchB is not supported")
    if ctx.attr("transA", 0) and a.ndim >= 2:
        a = _transposed_last(a)
    if ctx.attr("transB", 0) and b.ndim >= 2:
        b = _transposed_last(b)
    y = matmul(a, b)
    alpha = float(ctx.attr("alpha", 1.0))
    return y * alpha if alpha != 1.0 else y


@onnx_op("Gelu", domain=MS)
def gelu_ms(ctx: NodeContext) -> Tensor:
    return gelu(ctx.input(0), "none")


@onnx_op("BiasGelu", domain=MS)
def bias_gelu(ctx: NodeContext) -> Tensor:
    return gelu(ctx.input(0) + ctx.input(1), "none")


@onnx_op("FastGelu", domain=MS)
def fast_gelu(ctx: NodeContext) -> Tensor:
    """The tanh approximation of GELU over X (+ bias)."""
    x = ctx.input(0)
    if ctx.has(1):
        x = x + ctx.input(1)
    return gelu(x, "tanh")


@onnx_op("QuickGelu", domain=MS)
def quick_gelu(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    return x * unary(OpKind.SIGMOID, x * float(ctx.attr("alpha", 1.702)))


@onnx_op("BiasAdd", domain=MS)
def bias_add(ctx: NodeContext) -> Tensor:
    return ctx.input(0) + ctx.input(1) + ctx.input(2)


def _normalized(x: Tensor, epsilon: float, simplified: bool):
    """(normalized x over the last dim, mean (None when simplified), 1 / std), in float32
    for half inputs."""
    work = dt.float32 if x.dtype in (dt.float16, dt.bfloat16) else x.dtype
    xw = cast(x, work)
    axes = (x.ndim - 1,)
    if simplified:
        inverse = unary(OpKind.RSQRT, reduce(OpKind.MEAN, xw * xw, axes, True) + epsilon)
        return xw * inverse, None, inverse
    mean = reduce(OpKind.MEAN, xw, axes, True)
    centered = xw - mean
    inverse = unary(OpKind.RSQRT, reduce(OpKind.MEAN, centered * centered, axes, True)
                    + epsilon)
    return centered * inverse, mean, inverse


def _skip_norm(ctx: NodeContext, simplified: bool) -> list:
    x, skip, gamma = ctx.input(0), ctx.input(1), ctx.input(2)
    beta = None if simplified else ctx.optional(3)
    bias = ctx.optional(3 if simplified else 4)
    total = x + skip
    if bias is not None:
        total = total + bias
    normalized, mean, inverse = _normalized(total, float(ctx.attr("epsilon", 1e-12)),
                                            simplified)
    y = cast(normalized, x.dtype) * gamma
    if beta is not None:
        y = y + beta
    mean = mean if mean is not None else inverse * 0
    return [y, mean, inverse, total]


@onnx_op("SkipLayerNormalization", domain=MS)
def skip_layer_normalization(ctx: NodeContext) -> list:
    """LayerNorm(input + skip + bias) * gamma + beta; outputs 1-3: mean, 1 / std, the sum."""
    return _skip_norm(ctx, simplified=False)


@onnx_op("SkipSimplifiedLayerNormalization", domain=MS)
def skip_simplified_layer_normalization(ctx: NodeContext) -> list:
    """RMSNorm(input + skip + bias) * gamma; outputs 1-3: mean (unused), 1 / rms, the sum."""
    return _skip_norm(ctx, simplified=True)


@onnx_op("SimplifiedLayerNormalization")
@onnx_op("SimplifiedLayerNormalization", domain=MS)
def simplified_layer_normalization(ctx: NodeContext) -> list:
    """X / sqrt(mean(X^2 over axis..) + epsilon) * scale; output 1: 1 / rms."""
    x, scale = ctx.input(0), ctx.input(1)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    work = dt.float32 if x.dtype in (dt.float16, dt.bfloat16) else x.dtype
    xw = cast(x, work)
    inverse = unary(OpKind.RSQRT, reduce(OpKind.MEAN, xw * xw, axes, True)
                    + float(ctx.attr("epsilon", 1e-5)))
    return [cast(xw * inverse, x.dtype) * scale, inverse]
