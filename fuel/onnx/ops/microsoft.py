"""``com.microsoft`` ops that exporters, onnxruntime's optimizer and its quantization tools
write into real files: FusedConv, FusedGemm, FusedMatMul, Gelu, FastGelu, BiasGelu,
QuickGelu, BiasAdd, SkipLayerNormalization, SkipSimplifiedLayerNormalization,
SimplifiedLayerNormalization (also in the default domain, where onnxruntime registers it),
DynamicQuantizeLSTM, DynamicQuantizeMatMul and NhwcMaxPool.
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
from fuel.onnx.ops.conv import _spatial, window_padding

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


def _dequantized(values: Tensor, scale: Tensor, zero: Tensor | None, shape_of) -> Tensor:
    """(values - zero) * scale in float32, scale and zero reshaped by ``shape_of(t)``."""
    shift = cast(values, dt.float32)
    if zero is not None:
        shift = shift - cast(zero, dt.float32).reshape(shape_of(zero))
    return shift * cast(scale, dt.float32).reshape(shape_of(scale))


@onnx_op("DynamicQuantizeLSTM", domain=MS)
def dynamic_quantize_lstm(ctx: NodeContext) -> list:
    """An LSTM whose W (dirs, input, 4 * hidden) and R (dirs, hidden, 4 * hidden) are int8
    or uint8 with per-direction or per-column scales and zero points (inputs 8-11). fuel
    de-quantizes the weights and runs the float LSTM; onnxruntime also quantizes the
    activations per step, so outputs agree to about the input's quantization step."""
    from fuel.onnx.context import NodeContext as Context

    w, r = ctx.input(1), ctx.input(2)
    directions, columns = w.shape[0], w.shape[2]

    def shape_of(t: Tensor) -> tuple:  # per tensor, per direction or per column
        if t.numel() == 1:
            return ()
        return (directions, 1, 1) if t.ndim == 1 else (directions, 1, columns)

    w_float = _dequantized(w, ctx.input(8), ctx.optional(9), shape_of).permute(0, 2, 1)
    r_float = _dequantized(r, ctx.input(10), ctx.optional(11), shape_of).permute(0, 2, 1)
    inputs = [ctx.input(0), w_float, r_float] + [ctx.value(i) for i in range(3, 8)]
    plain = Context(ctx.proto, ctx.builder, inputs, 14, ctx.label, ctx.scope)
    return OPS[("", "LSTM")](plain)


@onnx_op("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(ctx: NodeContext) -> Tensor:
    """A (float) @ B (int8/uint8, per-tensor or per-column scale and zero point) + bias:
    onnxruntime quantizes A to uint8 per call; fuel multiplies A by the de-quantized B."""
    a, b = ctx.input(0), ctx.input(1)
    columns = b.shape[-1]
    weights = _dequantized(b, ctx.input(2), ctx.optional(3),
                           lambda t: () if t.numel() == 1 else (columns,))
    y = matmul(a, weights)
    return y + ctx.input(4) if ctx.has(4) else y


@onnx_op("NhwcMaxPool", domain=MS)
def nhwc_max_pool(ctx: NodeContext) -> Tensor:
    """MaxPool over an (N, H, W, C) input (uint8/int8), output (N, OH, OW, C)."""
    x = ctx.input(0)
    rank = x.ndim - 2
    order = (0, x.ndim - 1) + tuple(range(1, x.ndim - 1))
    kernel = tuple(ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    channels_first = x.permute(*order)
    begin, end = window_padding(ctx, channels_first.shape[2:], kernel, strides, dilations)
    pooled = nn_conv.max_pool_nd(channels_first, kernel, strides, begin, end, dilations,
                                 bool(ctx.attr("ceil_mode", 0)))
    back = (0,) + tuple(range(2, x.ndim)) + (1,)
    return pooled.permute(*back)
