"""The decoder of every family in ``families`` as a fuel graph (Llama's, with the family's
differences read from its row and ``LlamaConfig``): one call builds the graph of one step (a
prompt chunk or one decoded token) over a KVCache (``decoder_step``), or of one decoded token
for each of a batch of generations, each over its own cache (``batched_decoder_step``). Both
share their layers: ``attention`` and ``batched_attention`` differ only in how they split the
rows among caches, around one input side (``_rotated_qkv``) and one per-cache core
(``_cached_attention``).

Node economy matters more than flops here (a decode step is a few hundred nodes, each costing
host time): q, k and v come from one fused matmul, gate and up from another; the attention scale
is folded into the q weights; RoPE for q and k together is one batched matmul with per-position
rotation matrices; grouped-query attention groups each kv head's query heads into one matmul (no
repeated keys); a decode step's attention spans the whole preallocated cache, with an additive
mask built from the position, so every decode step has the same graph structure (a prompt
step's spans the positions written so far, rounded up: ``attention_span``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

import fuel
from fuel.models.families import FAMILIES
from fuel.models.gguf_loader import LlamaConfig, QuantizedArray
from fuel.models.kv_cache import KVCache
from fuel.nn.functional import gelu, rms_norm, silu, softmax
from fuel.tensor import Tensor

SPAN_BUCKET = 128  # a prompt step's attention spans the written cache positions rounded up to this


@dataclass(frozen=True)
class RoundedInput:
    """A float ``(in, out)`` projection de-quantized at load from a format whose
    quantized_matmul rounds its input (``fuel.ir.ops.ACTIVATION_ROUNDED_FORMATS``), for a device
    without quantized kernels: ``x`` is rounded to 16-bit blocks first, so the device computes
    the quantized op's numerics."""

    weight: object  # np.ndarray in the loader's arrays, Tensor in LlamaWeights


# A projection weight: a float matrix stored transposed, ``(in, out)``, for ``x @ w``; a
# block-quantized ``(out, in)`` matrix (fuel.quantized_matmul); a RoundedInput; or a tuple of
# such parts whose outputs are joined (projections whose quantized formats differ).
Projection = Tensor | RoundedInput | tuple


@dataclass
class LayerWeights:
    """One decoder layer's weights (projections as described at ``Projection``); the norms a
    family does without are None, as are the parts it lacks (biases, q/k norms, post
    norms)."""

    attn_norm: Tensor | None
    qkv_t: Projection
    o_t: Projection
    ffn_norm: Tensor | None
    gate_up_t: Projection
    down_t: Projection
    qkv_bias: Tensor | None = None
    q_norm: Tensor | None = None
    k_norm: Tensor | None = None
    post_attn_norm: Tensor | None = None
    post_ffn_norm: Tensor | None = None


LAYER_PARTS = ("attn_norm", "qkv_t", "o_t", "ffn_norm", "gate_up_t", "down_t", "qkv_bias",
               "q_norm", "k_norm", "post_attn_norm", "post_ffn_norm")


@dataclass
class LlamaWeights:
    """All weights as realized fuel tensors. ``embed_t`` is the float ``(hidden, vocab)``
    table or the quantized ``(vocab, hidden)`` one; ``query_scale`` multiplies the attention
    scores where it is not folded into the q weights (quantized weights keep their blocks)."""

    embed_t: Tensor
    output_t: Projection
    norm: Tensor
    layers: list[LayerWeights]
    query_scale: float = 1.0

    @classmethod
    def from_arrays(cls, arrays: dict, num_layers: int, device=None) -> LlamaWeights:
        """Leaves from NumPy arrays and QuantizedArrays (tuples of them stay tuples); the
        ``query_scale`` entry, when present, is the unfolded attention scale."""

        def leaf(name: str):
            value = arrays.get(name)
            return None if value is None else _leaf(value, device)

        embed = leaf("embed_t")
        layers = [LayerWeights(*(leaf(f"layers.{i}.{part}") for part in LAYER_PARTS))
                  for i in range(num_layers)]
        if "output_t" in arrays:
            output = leaf("output_t")
        else:  # tied: the table's (in, out) float values, rounding x where its format does
            output = RoundedInput(embed) if arrays.get("tied_output_rounds") else embed
        return cls(embed, output, leaf("norm"), layers,
                   float(arrays.get("query_scale", 1.0)))


def _leaf(value, device):
    if isinstance(value, tuple):
        return tuple(_leaf(part, device) for part in value)
    if isinstance(value, RoundedInput):
        return RoundedInput(_leaf(value.weight, device))
    if isinstance(value, QuantizedArray):
        return fuel.from_quantized(value.data, value.dtype, value.shape, device=device)
    return fuel.from_numpy(value, device=device)


# The activation precision of quantized projections while a graph is built: "int16" (the
# registry's quantized_matmul, in-process generation) or "int8" (quantized_matmul_int8, the
# serving engine's default; set by paged_step.paged_step_graph).
ACTIVATIONS: ContextVar[str] = ContextVar("activations", default="int16")
PRECISIONS = ("int8", "int16")


@contextmanager
def activation_precision(name: str) -> Iterator[None]:
    """Build the projections inside at ``name``'s activation precision (one of PRECISIONS)."""
    token = ACTIVATIONS.set(name)
    try:
        yield
    finally:
        ACTIVATIONS.reset(token)


def project(x: Tensor, weight: Projection) -> Tensor:
    """``x`` through one projection (see ``Projection``), at ``ACTIVATIONS``' precision."""
    if isinstance(weight, tuple):
        return fuel.cat([project(x, part) for part in weight], -1)
    int8 = ACTIVATIONS.get() == "int8"
    if isinstance(weight, RoundedInput):
        rounded = fuel.round_int8_blocks(x) if int8 else fuel.round_int16_blocks(x)
        return rounded @ weight.weight
    if weight.dtype.is_quantized:
        return fuel.quantized_matmul_int8(x, weight) if int8 else fuel.quantized_matmul(x, weight)
    return x @ weight


def embed(weights: LlamaWeights, ids: Tensor) -> Tensor:
    """The ``(n, hidden)`` embeddings of ``ids``."""
    if weights.embed_t.dtype.is_quantized:
        return fuel.quantized_embedding(weights.embed_t, ids)
    return weights.embed_t.index_select(1, ids).t()


def _frequencies(config: LlamaConfig, base: float) -> np.ndarray:
    dim = config.rotary_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    values = np.float32(1.0) / np.power(np.float32(base), exponents)
    if config.rope_factors:
        values = values / np.asarray(config.rope_factors, np.float32)
    return (values / np.float32(config.rope_scale)).astype(np.float32)


def rope_inverse_frequencies(config: LlamaConfig) -> np.ndarray:
    """``1 / base^(2i/d)`` in float32, computed as Hugging Face computes it (divided by the
    linear scaling factor and llama3's per-frequency factors where the file has them), over
    the rotated dims. A model with sliding-window layers has two rows: the global layers'
    and the sliding layers' (their own base where the family gives one)."""
    frequencies = _frequencies(config, config.rope_base)
    if not config.sliding_window:
        return frequencies
    local = config.rope_base_local or config.rope_base
    if config.rope_base_local:  # gemma3's local layers: no scaling
        plain = LlamaConfig.from_dict({**config.to_dict(), "rope_scale": 1.0,
                                       "rope_factors": ()})
        return np.stack([frequencies, _frequencies(plain, local)])
    return np.stack([frequencies, frequencies])


def rope_matrices(inverse_frequencies: np.ndarray, start: int, count: int,
                  size: int | None = None, scale: float = 1.0) -> np.ndarray:
    """``(count, size, size)`` matrices R with ``x @ R`` = rotate-half RoPE of ``x``'s first
    ``2 * half`` dims at positions ``start .. start + count - 1`` (the rest pass through;
    ``size`` defaults to ``2 * half``). Two rows of frequencies give ``(count, 2, size,
    size)``."""
    if inverse_frequencies.ndim == 2:
        return np.stack([rope_matrices(row, start, count, size, scale)
                         for row in inverse_frequencies], axis=1)
    return rope_at(inverse_frequencies, np.arange(start, start + count, dtype=np.int64), size,
                   scale)


def rope_at(inverse_frequencies: np.ndarray, positions: np.ndarray, size: int | None = None,
            scale: float = 1.0) -> np.ndarray:
    """``(len(positions), size, size)`` rotation matrices (``rope_matrices``' form, one row
    of frequencies) at any ``positions``; ``scale`` multiplies cos and sin (longrope's
    attention factor)."""
    half = inverse_frequencies.size
    size = size or 2 * half
    angles = positions.astype(np.float32)[:, None] * inverse_frequencies[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    if scale != 1.0:
        cos, sin = cos * np.float32(scale), sin * np.float32(scale)
    rotation = np.zeros((positions.size, size, size), np.float32)
    first, second = np.arange(half), np.arange(half, 2 * half)
    rotation[:, first, first] = cos
    rotation[:, second, second] = cos
    rotation[:, second, first] = -sin
    rotation[:, first, second] = sin
    rest = np.arange(2 * half, size)
    rotation[:, rest, rest] = 1.0
    return rotation


def attention_mask(start: int, count: int, group: int, capacity: int,
                   window: int = 0) -> np.ndarray:
    """Additive ``(count * group, capacity)`` mask: row ``i * group + g`` (query position
    ``start + i``) sees cache positions ``<= start + i`` (and, with a ``window``, ``>
    start + i - window``)."""
    positions = np.repeat(np.arange(start, start + count), group)[:, None]
    cached = np.arange(capacity)[None, :]
    allowed = cached <= positions
    if window:
        allowed &= cached > positions - window
    return np.where(allowed, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def step_rope(config: LlamaConfig, inverse_frequencies: np.ndarray, start: int,
              count: int) -> np.ndarray:
    """A step's rotation matrices (``rope_matrices`` over whole heads)."""
    return rope_matrices(inverse_frequencies, start, count, config.head_dim,
                         config.rope_mscale)


def attention_span(start: int, count: int, capacity: int) -> int:
    """The cache positions a step of ``count`` tokens at ``start`` attends over: the whole
    cache for a one-token step (one graph for every decode position), else the positions
    written so far rounded up to SPAN_BUCKET (a 128-token prompt in a cache of 256 scores 128
    positions, not 256; the positions cut off are all masked, so only float32 rounding of the
    shorter sums differs)."""
    if count == 1:
        return capacity
    return min(capacity, -(-(start + count) // SPAN_BUCKET) * SPAN_BUCKET)


def step_mask(config: LlamaConfig, start: int, count: int, capacity: int) -> np.ndarray:
    """A step's mask, ``(rows, span)`` (``attention_span``); with sliding-window layers,
    ``(2, rows, span)``: the global layers' then the sliding layers'."""
    group = config.num_heads // config.num_kv_heads
    span = attention_span(start, count, capacity)
    full = attention_mask(start, count, group, span)
    if not config.sliding_window:
        return full
    return np.stack([full, attention_mask(start, count, group, span, config.sliding_window)])


def layer_inputs(config: LlamaConfig, rope: Tensor, mask: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Each layer's (rotation matrices, mask): the step's own, or for a model with
    sliding-window layers its global or its sliding variant (sliced once per step)."""
    if not config.sliding_window:
        return [(rope, mask)] * config.num_layers
    variants = [(rope[:, v], mask[v]) for v in range(2)]
    return [variants[int(sliding)] for sliding in config.sliding_layers]


@dataclass
class StepInputs:
    """The per-step leaves: token ids, their cache positions, rotation matrices, the attention
    mask and the row whose logits the step returns without ``all_logits`` (all data, so steps
    of one size share one graph structure). A step's rows may be padded past its tokens
    (``create``'s ``rows``): padding rows follow the last token's position, and no token row
    sees them (the causal mask); what they write into the cache lies past its length, where
    the next tokens overwrite it before any row reads it."""

    ids: Tensor
    positions: Tensor
    rope: Tensor
    mask: Tensor
    last: Tensor

    @property
    def count(self) -> int:
        return self.ids.shape[0]

    @classmethod
    def create(cls, ids: np.ndarray, start: int, config: LlamaConfig,
               inverse_frequencies: np.ndarray, capacity: int, device,
               rows: int | None = None, rope_rows: np.ndarray | None = None) -> StepInputs:
        """Leaves for ``ids`` at cache positions ``start, start + 1, ...``, padded to
        ``rows`` rows (default: one per id). ``rope_rows``: an array of rotation matrices
        whose first rows the rope leaf is where it holds enough (on the CPU the leaf
        then shares its memory: the kept leaves of a cache's row buckets hold one set of
        rotation matrices, not one a bucket)."""
        values = list(step_values(ids, start, config, inverse_frequencies, capacity, rows))
        if rope_rows is not None and rope_rows.shape[0] >= values[2].shape[0]:
            shared = rope_rows[:values[2].shape[0]]
            shared[...] = values[2]
            values[2] = shared
        return cls(*(fuel.from_numpy(array, device=device) for array in values))

    def refill(self, ids: np.ndarray, start: int, config: LlamaConfig,
               inverse_frequencies: np.ndarray, capacity: int) -> None:
        """Overwrite these leaves in place with ``create``'s values for ``ids`` (at most as
        many as they hold rows, padded to them) at ``start``: a replay given the same
        storages re-prepares nothing."""
        values = step_values(ids, start, config, inverse_frequencies, capacity, self.count)
        for tensor, array in zip((self.ids, self.positions, self.rope, self.mask, self.last),
                                 values):
            storage = tensor._node.buffer
            storage.backend.write_from_host(storage, array)


@dataclass
class BatchedStepInputs:
    """The leaves of a batched decode step, one token per generation: the ids ``(batch,)``
    and rotation matrices ``(batch, d, d)`` of all, and each generation's cache position and
    attention mask (the ``StepInputs`` of a batch; all data, so one graph per cache set)."""

    ids: Tensor
    rope: Tensor
    positions: Sequence[Tensor]
    masks: Sequence[Tensor]

    @classmethod
    def create(cls, tokens: Sequence[int], caches: Sequence[KVCache], config: LlamaConfig,
               inverse_frequencies: np.ndarray, device) -> BatchedStepInputs:
        """Leaves for ``tokens[b]`` at the next position of ``caches[b]``."""
        ids = fuel.from_numpy(np.asarray(tokens, np.int64), device=device)
        rope = fuel.from_numpy(np.concatenate([
            step_rope(config, inverse_frequencies, cache.length, 1) for cache in caches]),
            device=device)
        positions = [fuel.from_numpy(np.array([cache.length], np.int64), device=device)
                     for cache in caches]
        masks = [fuel.from_numpy(step_mask(config, cache.length, 1, cache.capacity),
                                 device=device) for cache in caches]
        return cls(ids, rope, positions, masks)

    def flat(self) -> tuple[Tensor, ...]:
        """The leaves as one argument list (a captured step's): ids, rope, every position,
        every mask; ``from_flat`` takes it apart."""
        return (self.ids, self.rope, *self.positions, *self.masks)

    @classmethod
    def from_flat(cls, leaves: Sequence[Tensor]) -> BatchedStepInputs:
        count = (len(leaves) - 2) // 2
        return cls(leaves[0], leaves[1], leaves[2:2 + count], leaves[2 + count:])


def step_values(ids: np.ndarray, start: int, config: LlamaConfig,
                inverse_frequencies: np.ndarray, capacity: int,
                rows: int | None = None) -> tuple[np.ndarray, ...]:
    """The arrays of a step's leaves: ids (padded with id 0 to ``rows``), positions, rotation
    matrices, mask and the last token's row."""
    count = ids.size
    rows = count if rows is None else rows
    padded = np.zeros(rows, np.int64)
    padded[:count] = ids
    return (padded, np.arange(start, start + rows, dtype=np.int64),
            step_rope(config, inverse_frequencies, start, rows),
            step_mask(config, start, rows, capacity), np.array([count - 1], np.int64))


# A prompt step's rows are padded up to one of these counts (the paged step's too), so that a
# few step shapes serve every prompt length: each is captured once and replayed. Steps of at
# most 1.5x from 2 on, so padding adds at most half again the rows (a fifth on average).
ROW_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def row_bucket(count: int) -> int:
    """The padded row count that holds ``count`` rows (the next bucket up)."""
    for size in ROW_BUCKETS:
        if size >= count:
            return size
    return -(-count // ROW_BUCKETS[-1]) * ROW_BUCKETS[-1]


def attention(x: Tensor, layer: LayerWeights, index: int, step: StepInputs, cache: KVCache,
              config: LlamaConfig, query_scale: float = 1.0,
              inputs: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Grouped-query self-attention of ``x`` (n, hidden), n tokens of one generation, over
    its cache, with the layer's (rotation matrices, mask) ``inputs`` (default: the step's);
    returns (n, hidden)."""
    rope, mask = inputs or (step.rope, step.mask)
    n, d = step.count, config.head_dim
    heads, kv_heads = config.num_heads, config.num_kv_heads
    group = heads // kv_heads
    rotated, new_values = _rotated_qkv(x, layer, config, rope)
    q = rotated[:, :heads].reshape(n, kv_heads, group, d).permute(1, 0, 2, 3)
    q = q.reshape(kv_heads, n * group, d)
    k = rotated[:, heads:].permute(1, 0, 2)
    v = new_values.permute(1, 0, 2)
    out = _cached_attention(q, k, v, cache, index, step.positions, mask, query_scale,
                            config.attention_softcap)
    out = out.reshape(kv_heads, n, group, d).permute(1, 0, 2, 3).reshape(n, heads * d)
    return _block_output(project(out, layer.o_t), layer.post_attn_norm, config)


def batched_attention(x: Tensor, layer: LayerWeights, index: int, steps: BatchedStepInputs,
                      caches: Sequence[KVCache], config: LlamaConfig,
                      query_scale: float = 1.0) -> Tensor:
    """``attention`` for a batch of generations, one token each: row ``b`` of ``x``
    (batch, hidden) over ``caches[b]``; the projections run once for the batch. Returns
    (batch, hidden)."""
    d, heads, kv_heads = config.head_dim, config.num_heads, config.num_kv_heads
    group = heads // kv_heads
    variant = int(config.sliding_layers[index]) if config.sliding_window else None
    rope = steps.rope if variant is None else steps.rope[:, variant]
    rotated, new_values = _rotated_qkv(x, layer, config, rope)
    rows = []
    for b, cache in enumerate(caches):
        q = rotated[b, :heads].reshape(kv_heads, group, d)
        k = rotated[b:b + 1, heads:].permute(1, 0, 2)
        v = new_values[b:b + 1].permute(1, 0, 2)
        mask = steps.masks[b] if variant is None else steps.masks[b][variant]
        out = _cached_attention(q, k, v, cache, index, steps.positions[b], mask,
                                query_scale, config.attention_softcap)
        rows.append(out.reshape(1, heads * d))
    return _block_output(project(fuel.cat(rows, 0), layer.o_t), layer.post_attn_norm, config)


def _norm(x: Tensor, weight: Tensor | None, config: LlamaConfig) -> Tensor:
    """RMS norm over the last dim (``x`` itself where the family has no such norm)."""
    if weight is None:
        return x
    return rms_norm(x, (x.shape[-1],), weight, config.rms_eps)


def _block_output(x: Tensor, post_norm: Tensor | None, config: LlamaConfig) -> Tensor:
    """A block's output as added to the residual: post-normed and scaled where the family
    says so."""
    x = _norm(x, post_norm, config)
    return x * config.residual_scale if config.residual_scale != 1.0 else x


def _rotated_qkv(x: Tensor, layer: LayerWeights, config: LlamaConfig, rope: Tensor
                 ) -> tuple[Tensor, Tensor]:
    """The attention's input side for the rows of ``x``: q and k heads (RMS-normed where the
    family norms them) with RoPE applied, ``(n, heads + kv_heads, d)``, and the v heads,
    ``(n, kv_heads, d)``."""
    n, d = x.shape[0], config.head_dim
    heads, kv_heads = config.num_heads, config.num_kv_heads
    h = _norm(x, layer.attn_norm, config)
    qkv = project(h, layer.qkv_t)
    if layer.qkv_bias is not None:
        qkv = qkv + layer.qkv_bias
    qk = qkv[:, :(heads + kv_heads) * d]
    if layer.q_norm is not None:
        q, k = qk[:, :heads * d], qk[:, heads * d:]
        if layer.q_norm.shape[0] == d:  # per head
            q = _norm(q.reshape(n, heads, d), layer.q_norm, config)
            k = _norm(k.reshape(n, kv_heads, d), layer.k_norm, config)
            qk = fuel.cat([q, k], 1)
        else:  # over all heads
            qk = fuel.cat([_norm(q, layer.q_norm, config), _norm(k, layer.k_norm, config)], -1)
    rotated = qk.reshape(n, heads + kv_heads, d) @ rope
    return rotated, qkv[:, (heads + kv_heads) * d:].reshape(n, kv_heads, d)


def _cached_attention(q: Tensor, k: Tensor, v: Tensor, cache: KVCache, index: int,
                      positions: Tensor, mask: Tensor, query_scale: float,
                      softcap: float = 0.0) -> Tensor:
    """One generation's attention core: write ``k``/``v`` (kv_heads, n, d) at ``positions``
    of layer ``index`` of ``cache``, then ``q`` (kv_heads, rows, d) attends over the cache's
    first ``mask.shape[-1]`` positions (the whole cache for a decode step) under the additive
    ``mask`` (scores soft-capped by ``softcap`` first where it is
    given); returns (kv_heads, rows, d)."""
    keys, values = cache.write(index, positions, k, v)
    span = mask.shape[-1]  # attention_span: a prompt step's written positions
    if span < keys.shape[1]:
        keys, values = keys[:, :span], values[:, :span]
    scores = q @ keys.transpose(1, 2)
    if query_scale != 1.0:
        scores = scores * query_scale
    if softcap:
        scores = fuel.tanh(scores * (1.0 / softcap)) * softcap
    scores = scores + mask
    return softmax(scores, -1) @ values


def feed_forward(x: Tensor, layer: LayerWeights, config: LlamaConfig) -> Tensor:
    """The gated feed-forward: down(act(gate(h)) * up(h)) with gate and up from one matmul
    (act: SiLU, or GELU's tanh form for Gemma)."""
    h = _norm(x, layer.ffn_norm, config)
    gate_up = project(h, layer.gate_up_t)
    width = config.intermediate_size
    gate = gate_up[:, :width]
    if FAMILIES[config.family].activation == "gelu_tanh":
        gate = gelu(gate, approximate="tanh")
    else:
        gate = silu(gate)
    return _block_output(project(gate * gate_up[:, width:], layer.down_t),
                         layer.post_ffn_norm, config)


def _embedded(weights: LlamaWeights, config: LlamaConfig, ids: Tensor) -> Tensor:
    x = embed(weights, ids)
    return x * config.embedding_scale if config.embedding_scale != 1.0 else x


def decoder_step(weights: LlamaWeights, config: LlamaConfig, step: StepInputs,
                 cache: KVCache, all_logits: bool) -> Tensor:
    """The lazy logits of one step: ``(n, vocab)`` with ``all_logits``, else the last row's
    ``(1, vocab)``. Building it queues the cache writes; realize it with ``cache.tensors()``."""
    x = _embedded(weights, config, step.ids)
    inputs = layer_inputs(config, step.rope, step.mask)
    for index, layer in enumerate(weights.layers):
        x = x + attention(x, layer, index, step, cache, config, weights.query_scale,
                          inputs[index])
        x = x + feed_forward(x, layer, config)
    if not all_logits:
        x = x.index_select(0, step.last)
    return _logits(weights, config, x)


def batched_decoder_step(weights: LlamaWeights, config: LlamaConfig, steps: BatchedStepInputs,
                         caches: Sequence[KVCache]) -> Tensor:
    """``decoder_step`` for a batch of generations, one token each (``steps.ids[b]`` at the
    next position of ``caches[b]``): the lazy ``(batch, vocab)`` logits. Realize them with
    every cache's tensors."""
    x = _embedded(weights, config, steps.ids)
    for index, layer in enumerate(weights.layers):
        x = x + batched_attention(x, layer, index, steps, caches, config, weights.query_scale)
        x = x + feed_forward(x, layer, config)
    return _logits(weights, config, x)


def _logits(weights: LlamaWeights, config: LlamaConfig, x: Tensor) -> Tensor:
    logits = project(rms_norm(x, (config.hidden_size,), weights.norm, config.rms_eps),
                     weights.output_t)
    if config.logit_scale != 1.0:
        logits = logits * (1.0 / config.logit_scale)
    if config.final_softcap:
        logits = fuel.tanh(logits * (1.0 / config.final_softcap)) * config.final_softcap
    return logits
