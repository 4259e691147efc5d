"""Convolution epilogues fused at import: a float32 Conv becomes one CONV_FUSED node, and the
nodes that follow it fold into that node while the Conv's output has no other consumer:

- an inference BatchNormalization whose parameters are constants folds into the weights and
  bias (``w * s``, ``(b - mean) * s + beta``, ``s = scale / sqrt(var + eps)``, in float64);
- a Mul or Add of a per-channel constant folds into the weights and bias;
- an Add (or a Sum of two) of a tensor of the output's shape becomes the residual;
- an activation (Relu, Clip with constant bounds, Sigmoid, Tanh, HardSigmoid, HardSwish,
  LeakyRelu, PRelu with one slope per channel, and x * Sigmoid(x)) becomes the epilogue's.

So a ResNet block's Conv -> BatchNormalization -> Add -> Relu is one launch whose output loop
adds the bias and the residual and clamps. An inference BatchNormalization that follows no
Conv is still one multiply-add with constant per-channel scale and shift.

The converters here wrap the plain ones (registered by the other modules) and fall back to
them whenever a pattern does not hold.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fuel.frontend.build import make
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import ConvEpilogueParams, ConvParams
from fuel.nn import conv as nn_conv
from fuel.onnx.context import OPS, NodeContext
from fuel.onnx.ops import activations, elementwise, normalization  # noqa: F401 - wrapped here
from fuel.onnx.ops.conv import _spatial
from fuel.onnx.replay import depends_on
from fuel.tensor import Tensor


def known(ctx: NodeContext, node: Node) -> np.ndarray | None:
    """The host value of a constant (an initializer or Constant's leaf), else None."""
    hit = ctx.builder._host.get(id(node))
    return hit[1] if hit is not None and hit[0] is node else None


def _input_known(ctx: NodeContext, index: int) -> np.ndarray | None:
    """Input ``index``'s value when it is a constant or a small computation of constants
    alone (an Unsqueeze of an initializer), else None."""
    if not ctx.has(index):
        return None
    tensor = ctx.input(index)
    found = known(ctx, tensor._node)
    if found is not None or math.prod(tensor.shape) > SMALL or depends_on(tensor._node,
                                                                ctx.builder.feed_nodes):
        return found
    return ctx.builder.host_value(tensor)


SMALL = 1 << 16  # elements of a constant computation worth evaluating at build time


def per_channel(value: np.ndarray | None, shape: tuple) -> np.ndarray | None:
    """``value`` as one float64 per channel of an output of ``shape`` (N, C, ...) when it
    broadcasts along the channels only (a scalar, (C, 1, 1), (1, C, 1, 1), ...), else None."""
    if value is None or value.ndim > len(shape):
        return None
    padded = (1,) * (len(shape) - value.ndim) + value.shape
    if any(size != 1 for axis, size in enumerate(padded) if axis != 1) or \
            padded[1] not in (1, shape[1]):
        return None
    return np.broadcast_to(np.asarray(value, np.float64).reshape(-1), (shape[1],))


def fusable_conv(ctx: NodeContext, index: int, *, residual_ok: bool = True) -> Node | None:
    """The CONV_FUSED node behind input ``index`` when this node is its only consumer and its
    epilogue has no activation yet (and no residual unless ``residual_ok``)."""
    if not ctx.has(index):
        return None
    name = ctx.proto.input[index]
    node = ctx.input(index)._node
    if (node.op is not OpKind.CONV_FUSED or node.buffer is not None
            or ctx.builder.consumers.get(name, 0) != 1 or node.params.activation
            or (node.params.residual and not residual_ok)):
        return None
    return node


def _refold(ctx: NodeContext, producer: Node, scale: np.ndarray | None,
            shift: np.ndarray | None) -> Tensor | None:
    """``producer`` with its weights and bias scaled per channel by ``scale`` and ``shift``
    added to its bias (its weights and bias must be constants)."""
    weight, bias = known(ctx, producer.inputs[1]), known(ctx, producer.inputs[2])
    if weight is None or bias is None or depends_on(producer.inputs[1], ctx.builder.feed_nodes):
        return None  # (a feed's weights are not baked into the folded ones)
    weight, bias = np.asarray(weight, np.float64), np.asarray(bias, np.float64)
    if scale is not None:
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        bias = bias * scale
    if shift is not None:
        bias = bias + shift
    return _rebuild(producer, weights=(ctx.constant(weight.astype(np.float32))._node,
                                       ctx.constant(bias.astype(np.float32))._node))


def _rebuild(node: Node, activation: str = "", alpha: float = 0.0, beta: float = 0.0,
             residual: Node | None = None, slope: Node | None = None,
             weights: tuple[Node, Node] | None = None) -> Tensor:
    params = node.params
    inputs = list(node.inputs[:3]) if weights is None else [node.inputs[0], *weights]
    if params.residual:
        inputs.append(node.inputs[3])
    elif residual is not None:
        inputs.append(residual)
    if slope is not None:
        inputs.append(slope)
    epilogue = ConvEpilogueParams(params.conv, activation, float(alpha), float(beta),
                                  params.residual or residual is not None,
                                  params.constant_weights or weights is not None)
    return make(OpKind.CONV_FUSED, tuple(inputs), epilogue)


def _wrap(op_type: str, fuse) -> None:
    plain = OPS[("", op_type)]

    def convert(ctx: NodeContext):
        fused = fuse(ctx)
        return plain(ctx) if fused is None else fused

    convert.__name__ = convert.__qualname__ = f"fused_{op_type.lower()}"
    OPS[("", op_type)] = convert


# ----------------------------------------------------------------------------- Conv


def conv(ctx: NodeContext) -> Tensor | None:
    """A float32 Conv as CONV_FUSED (bias, or zeros, in its epilogue)."""
    x, w = ctx.input(0), ctx.input(1)
    if x.dtype is not dt.float32 or w.dtype is not dt.float32 or not 1 <= x.ndim - 2 <= 3:
        return None
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    strides, dilations, begin, end = _spatial(ctx, x, kernel)
    bias = ctx.optional(2)
    if bias is None:
        bias = ctx.constant(np.zeros(w.shape[0], np.float32))
    elif bias.dtype is not dt.float32:
        return None
    params = ConvParams(tuple(strides), tuple(begin), tuple(end), tuple(dilations),
                        int(ctx.attr("group", 1)))
    fused = nn_conv.conv_fused(x, w, bias, params)
    if known(ctx, w._node) is None or depends_on(w._node, ctx.builder.feed_nodes):
        return fused
    node = fused._node  # the weights are a constant: a kernel may transform them once
    return make(OpKind.CONV_FUSED, node.inputs, replace(node.params, constant_weights=True))


# ----------------------------------------------------------------------------- BatchNormalization


def _inference(ctx: NodeContext) -> bool:
    if ctx.opset >= 14:
        return not ctx.attr("training_mode", 0)
    if ctx.opset < 7:
        return bool(ctx.attr("is_test", 0))
    return ctx.num_outputs == 1


def batch_normalization(ctx: NodeContext) -> Tensor | None:
    """Constant inference statistics: folded into the Conv before, else one multiply-add."""
    x = ctx.input(0)
    if x.dtype is not dt.float32 or not _inference(ctx) or x.ndim < 2:
        return None
    values = [_input_known(ctx, i) for i in range(1, 5)]
    if any(v is None for v in values):
        return None
    scale, shift, mean, var = (np.asarray(v, np.float64).reshape(-1) for v in values)
    factor = scale / np.sqrt(var + ctx.attr("epsilon", 1e-5))
    offset = shift - mean * factor
    producer = fusable_conv(ctx, 0, residual_ok=False)
    if producer is not None:
        folded = _refold(ctx, producer, factor, offset)
        if folded is not None:
            return folded
    channel = (-1,) + (1,) * (x.ndim - 2)
    return x * ctx.constant(factor.astype(np.float32).reshape(channel)) + ctx.constant(
        offset.astype(np.float32).reshape(channel))


# ----------------------------------------------------------------------------- Add, activations


def add(ctx: NodeContext) -> Tensor | None:
    """A tensor of the output's shape added to a Conv's output (Add, or a Sum of two): its
    residual."""
    if ctx.num_inputs != 2:
        return None
    for index in (0, 1):
        producer = fusable_conv(ctx, index, residual_ok=False)
        if producer is None:
            continue
        shift = per_channel(_input_known(ctx, 1 - index), producer.shape)
        if shift is not None:  # a per-channel constant: into the bias
            folded = _refold(ctx, producer, None, shift)
            if folded is not None:
                return folded
        other = ctx.input(1 - index)
        if producer is not None and other.shape == producer.shape and \
                other.dtype is producer.dtype:
            return _rebuild(producer, residual=other._node)
    return None


def _activation(name: str, parameters=None):
    """A converter fusing activation ``name`` (``parameters(ctx)``: (alpha, beta) or None
    when the node's own values do not fit the epilogue)."""

    def fuse(ctx: NodeContext) -> Tensor | None:
        producer = fusable_conv(ctx, 0)
        if producer is None:
            return None
        alpha, beta = (0.0, 0.0) if parameters is None else (parameters(ctx) or (None, None))
        if alpha is None:
            return None
        return _rebuild(producer, name, alpha, beta)

    return fuse


def _clip_bounds(ctx: NodeContext):
    if ctx.opset < 11:
        low, high = ctx.attr("min"), ctx.attr("max")
    else:
        low, high = (_input_known(ctx, i) for i in (1, 2))
        if (ctx.has(1) and low is None) or (ctx.has(2) and high is None):
            return None
        low = None if low is None else float(np.asarray(low).reshape(-1)[0])
        high = None if high is None else float(np.asarray(high).reshape(-1)[0])
    return (float("-inf") if low is None else float(low),
            float("inf") if high is None else float(high))


def prelu(ctx: NodeContext) -> Tensor | None:
    producer = fusable_conv(ctx, 0)
    slope = _input_known(ctx, 1)
    if producer is None or slope is None:
        return None
    channels, rank = producer.shape[1], len(producer.shape)
    slope = np.asarray(slope, np.float32)
    shape = (1,) * (rank - slope.ndim) + slope.shape
    if slope.size == 1:
        values = np.full(channels, slope.reshape(-1)[0], np.float32)
    elif slope.size == channels and (
            (ctx.opset < 7 and slope.ndim == 1)
            or (len(shape) == rank and shape[1] == channels)):
        values = slope.reshape(-1)
    else:
        return None
    return _rebuild(producer, "prelu", slope=ctx.constant(values)._node)


def mul(ctx: NodeContext) -> Tensor | None:
    """A per-channel constant times a Conv's output: folded into its weights and bias; x *
    Sigmoid(x) over a Conv's output x: SiLU (x has the two consumers)."""
    names = ctx.proto.input
    if len(names) != 2 or not (ctx.has(0) and ctx.has(1)):
        return None
    for index in (0, 1):  # a per-channel constant factor: into the weights and bias
        producer = fusable_conv(ctx, index, residual_ok=False)
        scale = None if producer is None else per_channel(_input_known(ctx, 1 - index),
                                                          producer.shape)
        if scale is not None:
            folded = _refold(ctx, producer, scale, None)
            if folded is not None:
                return folded
    for index in (0, 1):
        gate, source = ctx.input(1 - index)._node, ctx.input(index)._node
        if (gate.op is OpKind.SIGMOID and gate.inputs[0] is source
                and source.op is OpKind.CONV_FUSED and source.buffer is None
                and not source.params.activation
                and ctx.builder.consumers.get(names[index], 0) == 2
                and ctx.builder.consumers.get(names[1 - index], 0) == 1):
            return _rebuild(source, "silu")
    return None


_wrap("Conv", conv)
_wrap("BatchNormalization", batch_normalization)
_wrap("Add", add)
_wrap("Sum", add)
_wrap("Mul", mul)
_wrap("PRelu", prelu)
_wrap("Relu", _activation("relu"))
_wrap("Sigmoid", _activation("sigmoid"))
_wrap("Tanh", _activation("tanh"))
_wrap("HardSwish", _activation("hard_swish"))
_wrap("Clip", _activation("clip", _clip_bounds))
_wrap("HardSigmoid", _activation("hard_sigmoid", lambda ctx: (ctx.attr("alpha", 0.2),
                                                              ctx.attr("beta", 0.5))))
_wrap("LeakyRelu", _activation("leaky_relu", lambda ctx: (ctx.attr("alpha", 0.01), 0.0)))
