"""``com.microsoft`` Attention, GroupQueryAttention and EmbedLayerNormalization: the fused
forms onnxruntime's transformer optimizer writes into BERT- and LLM-style files. Semantics
follow onnxruntime's contrib-op documentation and CPU kernels (masked scores get
``mask_filter_value``, not -inf, where onnxruntime does so); tests compare with onnxruntime."""

from __future__ import annotations

import math

import fuel
from fuel.frontend.structured import matmul, softmax
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.attention import repeat_heads, split_heads
from fuel.onnx.ops.common import Tensor, cast, where
from fuel.onnx.ops.microsoft import _normalized

MS = "com.microsoft"


def _positions(count: int, device) -> Tensor:
    return fuel.arange(count, dtype=fuel.int64, device=device)


def _merge_heads(out: Tensor, dtype) -> Tensor:
    """(B, N, S, h) -> (B, S, N * h) as ``dtype``."""
    batch, _, length, _ = out.shape
    return cast(out.permute(0, 2, 1, 3).reshape((batch, length, -1)), dtype)


# ----------------------------------------------------------------------------- Attention


@onnx_op("Attention", domain=MS)
def attention(ctx: NodeContext) -> list:
    """softmax(Q K^T * scale + masks) V per head with Q, K, V = input @ weights + bias split
    by ``qkv_hidden_sizes`` (equal thirds by default); mask_index (B,) key lengths, (2B,) end
    and start positions, or (B, L) / (B, S, L) 1 (keep) and 0 (``mask_filter_value`` added);
    ``unidirectional``: query i sees keys up to past + i; past (2, B, N, P, h) before K and
    V; attention_bias (B or 1, N or 1, S, L) added. Outputs: (B, S, hidden_v) and present
    (2, B, N, P + S, h) (none when the values' size differs from the keys')."""
    x, weights = ctx.input(0), ctx.input(1)
    heads = int(ctx.attr("num_heads"))
    if ctx.attr("do_rotary", 0):
        raise UnsupportedOp("com.microsoft Attention with do_rotary=1 is not supported")
    if x.ndim != 3:
        raise OnnxError(f"Attention's input must be (batch, sequence, hidden), got {x.shape}")
    sizes = [int(s) for s in (ctx.attr("qkv_hidden_sizes") or [])] or [weights.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != weights.shape[1] or sizes[0] != sizes[1]:
        raise OnnxError(f"Attention's qkv_hidden_sizes {sizes} do not split weights of "
                        f"shape {weights.shape}")
    work = dt.float32 if x.dtype in (dt.float16, dt.bfloat16) else x.dtype
    projected = matmul(cast(x, work), cast(weights, work))
    if ctx.has(2):
        projected = projected + cast(ctx.input(2), work)
    query = projected.narrow(2, 0, sizes[0])
    key = projected.narrow(2, sizes[0], sizes[1])
    value = projected.narrow(2, sizes[0] + sizes[1], sizes[2])
    q, k, v = (split_heads(t, heads) for t in (query, key, value))
    past = ctx.optional(4)
    past_length = 0
    if past is not None:
        past_length = past.shape[3]
        k = fuel.cat([cast(past.narrow(0, 0, 1).squeeze(0), work), k], 2)
        v = fuel.cat([cast(past.narrow(0, 1, 1).squeeze(0), work), v], 2)
    batch, _, queries, size = q.shape
    keys = k.shape[2]
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(size)
    scores = matmul(q, k.permute(0, 1, 3, 2)) * scale
    filter_value = float(ctx.attr("mask_filter_value", -10000.0))
    keep = _mask_keep(ctx.optional(3), batch, queries, keys, x.device)
    if ctx.attr("unidirectional", 0):
        causal = (_positions(keys, x.device).reshape((1, keys)) <= _positions(
            queries, x.device).reshape((queries, 1)) + past_length).reshape(
            (1, 1, queries, keys))
        keep = causal if keep is None else keep & causal
    if keep is not None:
        scores = scores + (1.0 - cast(keep, work)) * filter_value
    if ctx.has(5):
        scores = scores + cast(ctx.input(5), work)
    out = matmul(softmax(scores, -1), v)
    if sizes[1] != sizes[2]:  # no present: keys and values differ in size
        return [_merge_heads(out, x.dtype)]
    present = fuel.cat([k.unsqueeze(0), v.unsqueeze(0)], 0)
    return [_merge_heads(out, x.dtype), cast(present, x.dtype)]


def _mask_keep(mask: Tensor | None, batch: int, queries: int, keys: int, device):
    """Attention's mask_index as a boolean keep mask broadcast to (B, 1 or N, S, L), or
    None."""
    if mask is None:
        return None
    positions = _positions(keys, device)
    if mask.ndim == 1 and mask.shape[0] in (batch, 2 * batch):
        ends = cast(mask.narrow(0, 0, batch), dt.int64).reshape((batch, 1))
        keep = positions.reshape((1, keys)) < ends
        if mask.shape[0] == 2 * batch:
            starts = cast(mask.narrow(0, batch, batch), dt.int64).reshape((batch, 1))
            keep = keep & (positions.reshape((1, keys)) >= starts)
        return keep.reshape((batch, 1, 1, keys))
    if mask.ndim == 2 and tuple(mask.shape) == (batch, keys):
        return (cast(mask, dt.int64) != 0).reshape((batch, 1, 1, keys))
    if mask.ndim == 3 and tuple(mask.shape) == (batch, queries, keys):
        return (cast(mask, dt.int64) != 0).reshape((batch, 1, queries, keys))
    raise UnsupportedOp(f"com.microsoft Attention's mask_index of shape {mask.shape} is not "
                        f"supported ((batch,), (2 * batch,), (batch, keys) or (batch, "
                        f"queries, keys))")


# ------------------------------------------------------------------ GroupQueryAttention


def _rotary(x: Tensor, cos_cache: Tensor, sin_cache: Tensor, positions: Tensor,
            interleaved: bool) -> Tensor:
    """Rotary embedding of x (B, N, S, h) at ``positions`` (B, S): the first 2 * D dims of
    each head (D = cos_cache's width) rotated, as halves or interleaved pairs."""
    batch, heads, length, size = x.shape
    half = cos_cache.shape[1]
    flat = positions.reshape((-1,))
    cos = cast(cos_cache.index_select(0, flat), x.dtype).reshape((batch, 1, length, half))
    sin = cast(sin_cache.index_select(0, flat), x.dtype).reshape((batch, 1, length, half))
    rotated, rest = x.narrow(3, 0, 2 * half), x.narrow(3, 2 * half, size - 2 * half)
    if interleaved:
        pairs = rotated.reshape((batch, heads, length, half, 2))
        first, second = pairs.narrow(4, 0, 1).squeeze(4), pairs.narrow(4, 1, 1).squeeze(4)
        out = fuel.stack([first * cos - second * sin, second * cos + first * sin], 4).reshape(
            (batch, heads, length, 2 * half))
    else:
        first, second = rotated.narrow(3, 0, half), rotated.narrow(3, half, half)
        out = fuel.cat([first * cos - second * sin, second * cos + first * sin], 3)
    return out if size == 2 * half else fuel.cat([out, rest], 3)


@onnx_op("GroupQueryAttention", domain=MS)
def group_query_attention(ctx: NodeContext) -> list:
    """Causal attention with ``kv_num_heads`` key/value heads shared by groups of the
    ``num_heads`` query heads: query (B, S, N * h) (or packed Q, K, V when key is absent),
    key and value (B, S, kvN * h), past_key / past_value (B, kvN, P, h) before them,
    seqlens_k (B) the last valid key position of each batch row (keys after it masked; query
    i sits at seqlens_k + 1 - S + i and sees keys up to it), ``local_window_size`` keys
    back at most, ``softcap`` (c * tanh(scores / c)), ``do_rotary`` with cos_cache and
    sin_cache. Outputs: (B, S, N * h), present_key and present_value (B, kvN, P + S, h)."""
    heads, kv_heads = int(ctx.attr("num_heads")), int(ctx.attr("kv_num_heads"))
    if heads % kv_heads:
        raise OnnxError(f"GroupQueryAttention: num_heads {heads} is not a multiple of "
                        f"kv_num_heads {kv_heads}")
    if ctx.attr("smooth_softmax", 0) or ctx.has(9) or ctx.has(10):
        raise UnsupportedOp("GroupQueryAttention with smooth_softmax, position_ids or "
                            "attention_bias is not supported")
    query, key, value = ctx.input(0), ctx.optional(1), ctx.optional(2)
    work = dt.float32 if query.dtype in (dt.float16, dt.bfloat16) else query.dtype
    if key is None:  # packed (B, S, (N + 2 kvN) h)
        size = query.shape[2] // (heads + 2 * kv_heads)
        packed = cast(query, work)
        query = packed.narrow(2, 0, heads * size)
        key = packed.narrow(2, heads * size, kv_heads * size)
        value = packed.narrow(2, (heads + kv_heads) * size, kv_heads * size)
    q = split_heads(cast(query, work), heads)
    k, v = split_heads(cast(key, work), kv_heads), split_heads(cast(value, work), kv_heads)
    batch, _, length, size = q.shape
    past_key, past_value = ctx.optional(3), ctx.optional(4)
    past = past_key.shape[2] if past_key is not None and past_value is not None else 0
    steps = _positions(length, q.device).reshape((1, length))
    if past:  # row b's valid past ends where its new tokens start: seqlens_k + 1 - S
        starts = cast(ctx.input(5), dt.int64).reshape((batch, 1)) + (1 - length)
    else:  # a first prompt: positions 0..S-1
        starts = fuel.zeros((batch, 1), dtype=fuel.int64, device=q.device)
    if ctx.attr("do_rotary", 0):
        if not (ctx.has(7) and ctx.has(8)):
            raise OnnxError("GroupQueryAttention with do_rotary=1 needs cos_cache and "
                            "sin_cache")
        interleaved = bool(ctx.attr("rotary_interleaved", 0))
        q = _rotary(q, ctx.input(7), ctx.input(8), starts + steps, interleaved)
        k = _rotary(k, ctx.input(7), ctx.input(8), starts + steps, interleaved)
    if past:
        k = fuel.cat([cast(past_key, work), k], 2)
        v = fuel.cat([cast(past_value, work), v], 2)
    keys = k.shape[2]
    present_key, present_value = cast(k, query.dtype), cast(v, query.dtype)
    group = heads // kv_heads
    k, v = repeat_heads(k, group), repeat_heads(v, group)
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(size)
    scores = matmul(q, k.permute(0, 1, 3, 2)) * scale
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0.0:
        scores = (scores * (1.0 / softcap)).tanh() * softcap
    # key j's position: j for the past (valid below the row's start), start + j - P for
    # the new ones; query i's: start + i
    index = _positions(keys, q.device).reshape((1, 1, keys))
    key_at = where(index < past, index, index - past + starts.reshape((batch, 1, 1)),
                   dtype=dt.int64)
    query_at = (starts + steps).reshape((batch, length, 1))
    keep = (key_at <= query_at) & ((index >= past) | (index < starts.reshape((batch, 1, 1))))
    window = int(ctx.attr("local_window_size", -1))
    if window > 0:
        keep = keep & (key_at > query_at - window)
    keep = keep.reshape((batch, 1, length, keys))
    scores = where(keep, scores, fuel.full((), float("-inf"), dtype=work,
                                           device=q.device), dtype=work)
    out = matmul(softmax(scores, -1), v)
    return [_merge_heads(out, query.dtype), present_key, present_value]


# ------------------------------------------------------------------ EmbedLayerNormalization


@onnx_op("EmbedLayerNormalization", domain=MS)
def embed_layer_normalization(ctx: NodeContext) -> list:
    """LayerNorm(word_embedding[input_ids] + position_embedding[position_ids] +
    segment_embedding[segment_ids]) * gamma + beta over the hidden dim (position_ids 0..S-1
    unless given); outputs: that, mask_index (B,) int32 (the count of nonzero mask values
    per row, 0 without a mask) and the sum before the norm."""
    ids = cast(ctx.input(0), dt.int64)
    if ids.ndim != 2:
        raise OnnxError(f"EmbedLayerNormalization's input_ids must be (batch, sequence), got "
                        f"{ids.shape}")
    batch, length = ids.shape
    word, position = ctx.input(2), ctx.input(3)
    hidden = word.shape[1]
    total = word.index_select(0, ids.reshape((-1,))).reshape((batch, length, hidden))
    if ctx.has(8):
        positions = cast(ctx.input(8), dt.int64)
        positions = positions.expand(batch, length) if positions.shape[0] == 1 else positions
        placed = position.index_select(0, positions.reshape((-1,))).reshape(
            (batch, length, hidden))
    else:
        placed = position.narrow(0, 0, length).reshape((1, length, hidden))
    total = total + placed
    if ctx.has(1) and ctx.has(4):
        segments = cast(ctx.input(1), dt.int64).reshape((-1,))
        total = total + ctx.input(4).index_select(0, segments).reshape((batch, length, hidden))
    normalized, _, _ = _normalized(total, float(ctx.attr("epsilon", 1e-12)), False)
    y = cast(normalized, word.dtype) * ctx.input(5) + ctx.input(6)
    if ctx.has(7):
        mask = ctx.input(7)
        index = cast(cast(cast(mask, dt.int64) != 0, dt.int32).sum(1), dt.int32)
    else:
        index = fuel.zeros((batch,), dtype=fuel.int32, device=ids.device)
    return [y, index, total]
