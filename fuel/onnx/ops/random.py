"""The random ops: RandomUniform(Like), RandomNormal(Like), Bernoulli and Dropout in training
mode. Their numbers are drawn on the host when the graph is built, from fuel's generator
(``fuel.manual_seed``) or, with a ``seed`` attribute, from a generator seeded with it (the
same seed gives the same numbers); a build that drew numbers is never replayed."""

from __future__ import annotations

import numpy as np

from fuel.frontend.factories import random_generator
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import OpKind, Tensor, binary, cast, scalar, where


def _generator(ctx: NodeContext) -> np.random.Generator:
    ctx.builder.draws_random = True
    return random_generator(ctx.attr("seed"))


def _draw(ctx: NodeContext, shape, dtype, normal: bool) -> Tensor:
    generator = _generator(ctx)
    shape = tuple(int(s) for s in shape)
    if normal:
        values = generator.normal(ctx.attr("mean", 0.0), ctx.attr("scale", 1.0), shape)
    else:
        values = generator.uniform(ctx.attr("low", 0.0), ctx.attr("high", 1.0), shape)
    if not dtype.is_floating:
        raise OnnxError(f"random values must be floating point, not {dtype.name}")
    return ctx.constant(values.astype(dtype.numpy))


@onnx_op("RandomUniform", "RandomNormal")
def random_values(ctx: NodeContext) -> Tensor:
    return _draw(ctx, ctx.attr("shape"), ctx.elem_dtype("dtype", dt.float32),
                 ctx.proto.op_type == "RandomNormal")


@onnx_op("RandomUniformLike", "RandomNormalLike")
def random_values_like(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    return _draw(ctx, x.shape, ctx.elem_dtype("dtype", x.dtype),
                 ctx.proto.op_type == "RandomNormalLike")


@onnx_op("Bernoulli")
def bernoulli(ctx: NodeContext) -> Tensor:
    """1 where a uniform draw falls below the input probability, else 0."""
    p = ctx.input(0)
    draws = ctx.constant(_generator(ctx).random(p.shape).astype(p.dtype.numpy))
    return cast(binary(OpKind.LT, draws, p), ctx.elem_dtype("dtype", p.dtype))


def training_dropout(ctx: NodeContext, x: Tensor, ratio: float) -> list[Tensor]:
    """Each element kept with probability 1 - ratio and scaled by 1 / (1 - ratio)."""
    draws = ctx.constant(_generator(ctx).random(x.shape).astype(np.float32))
    keep = binary(OpKind.GE, draws, scalar(ratio, draws))
    kept = x * scalar(1.0 / (1.0 - ratio), x) if ratio < 1 else x
    return [where(keep, kept, scalar(0, x), dtype=x.dtype), keep]
