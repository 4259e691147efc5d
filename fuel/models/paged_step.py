"""One forward for a whole batch of requests over a paged KV pool: the rows of a step are the
tokens of every request in it (one decode token each, chunks of prompts), in any mix. The
weights' matmuls run once for all rows; each row attends over its own request's blocks
(``paged_attention``, a C kernel on the CPU). A step's graph depends only on its row count and
how many rows give logits, never on which requests are in it, so it is captured once per
row bucket (fuel.jit, the pool tensors passed as arguments) and replayed, and the logits of
the rows that want them per (rows, logit rows) bucket, a small capture of its own.

Row ``r`` carries: its token id, its flat pool slot (where its key and value are written), its
RoPE matrix, its request's block table and the number of positions it sees (its position + 1).
Padding rows write to the scratch slot 0 and see only it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import fuel
from fuel.dispatch import op_profile
from fuel.frontend.snapshot import NodeSnapshot
from fuel.ir.errors import InvalidArgument
from fuel.models.kv_cache import PagedKVPool
from fuel.models.llama_graph import (
    PRECISIONS,
    _logits,
    _rotated_qkv,
    activation_precision,
    embed,
    feed_forward,
    project,
    rope_at,
)
from fuel.models.llama_graph import row_bucket as bucket
from fuel.nn.functional import paged_attention
from fuel.runtime.replay import HeldArena
from fuel.tensor import Tensor

if TYPE_CHECKING:
    from fuel.models.llama import LlamaModel

@dataclass
class Chunk:
    """One request's part of a step: ``ids`` at positions ``start, start + 1, ...`` of the
    request whose positions lie in ``blocks``; ``logits``: whether its last row's logits are
    wanted."""

    ids: Sequence[int]
    start: int
    blocks: Sequence[int]
    logits: bool


def unsupported(model: LlamaModel) -> str | None:
    """Why the paged step cannot run ``model``'s family exactly (None when it can): it
    implements the Llama layer (q/k norms, biases, partial rotary, GQA and the logits' own
    scaling) but not yet sliding-window layers, attention soft-capping, post-attention or
    post-FFN norms, or a residual scale."""
    config = model.config
    missing = []
    if config.sliding_window:
        missing.append("sliding-window layers")
    if config.attention_softcap:
        missing.append("attention soft-capping")
    if config.residual_scale != 1.0:
        missing.append("a residual scale")
    if any(getattr(layer, "post_attn_norm", None) is not None
           or getattr(layer, "post_ffn_norm", None) is not None
           for layer in model.weights.layers):
        missing.append("post-attention and post-FFN norms")
    if not missing:
        return None
    return (f"the serving engine's paged step does not implement the {config.family} "
            f"family's {', '.join(missing)} yet; `fuel generate` runs this model")


def paged_step_graph(model: LlamaModel, ids: Tensor, slots: Tensor, rope: Tensor,
                     table: Tensor, lengths: Tensor, picks: Tensor, keys: Sequence[Tensor],
                     values: Sequence[Tensor], block_size: int,
                     activations: str = "int16") -> Tensor:
    """The lazy ``(picks, vocab)`` logits of one paged step (building it queues the pool
    writes; realize the logits with the pool tensors); the quantized projections at
    ``activations``' precision (llama_graph.PRECISIONS)."""
    hidden = paged_hidden_graph(model, ids, slots, rope, table, lengths, keys, values,
                                block_size, activations)
    return paged_logits_graph(model, hidden, picks, activations)


def paged_hidden_graph(model: LlamaModel, ids: Tensor, slots: Tensor, rope: Tensor,
                       table: Tensor, lengths: Tensor, keys: Sequence[Tensor],
                       values: Sequence[Tensor], block_size: int,
                       activations: str = "int16") -> Tensor:
    """The lazy ``(rows, hidden)`` last hidden states of a paged step's rows (before the
    final norm), its pool writes queued: the step's body, whatever rows want logits."""
    with activation_precision(activations):
        return _hidden_graph(model, ids, slots, rope, table, lengths, keys, values,
                             block_size)


def paged_logits_graph(model: LlamaModel, hidden: Tensor, picks: Tensor,
                       activations: str = "int16") -> Tensor:
    """The lazy ``(picks, vocab)`` logits of the ``picks`` rows of ``hidden``."""
    with activation_precision(activations):
        return _logits(model.weights, model.config, hidden.index_select(0, picks))


def _hidden_graph(model: LlamaModel, ids: Tensor, slots: Tensor, rope: Tensor, table: Tensor,
                  lengths: Tensor, keys: Sequence[Tensor], values: Sequence[Tensor],
                  block_size: int) -> Tensor:
    weights, config = model.weights, model.config
    heads, kv_heads, dim = config.num_heads, config.num_kv_heads, config.head_dim
    rows = ids.shape[0]
    x = embed(weights, ids)
    for index, layer in enumerate(weights.layers):
        rotated, new_values = _rotated_qkv(x, layer, config, rope)
        q = rotated[:, :heads]
        if weights.query_scale != 1.0:
            q = q * weights.query_scale
        keys[index].index_copy_(0, slots, rotated[:, heads:])
        values[index].index_copy_(0, slots, new_values)
        pool_shape = (keys[index].shape[0] // block_size, block_size, kv_heads, dim)
        out = paged_attention(q, keys[index].reshape(pool_shape),
                              values[index].reshape(pool_shape), table, lengths)
        x = x + project(out.reshape(rows, heads * dim), layer.o_t)
        x = x + feed_forward(x, layer, config)
    return x


class PagedStepper:
    """Runs paged steps of ``model`` over ``pool``: ``step(chunks)`` gives the logits of the
    chunks that want them, one forward for all of them; quantized projections at
    ``activations``' precision ("int8": quantized_matmul_int8, "int16": quantized_matmul)."""

    def __init__(self, model: LlamaModel, pool: PagedKVPool, table_width: int,
                 activations: str = "int16") -> None:
        if activations not in PRECISIONS:
            raise InvalidArgument(f"activations must be one of {', '.join(PRECISIONS)}, "
                                  f"got {activations!r}")
        self.activations = activations
        self.model = model
        self.pool = pool
        self.table_width = table_width  # blocks a request may hold (its context / block_size)
        # Two captures a step: the body per row bucket (the layers, the pool writes), the
        # logits per (row, logit-row) bucket (the final norm and the output matmul of the
        # rows that want them): the heavy captures do not multiply by the logit buckets.
        self._arena = HeldArena()  # the two run one after the other: one arena
        self._jit = fuel.jit(self._traced, arena=self._arena)
        self._logits_jit = fuel.jit(self._traced_logits, arena=self._arena)
        self._inputs: dict = {}  # rows -> the body's input leaves
        self._picks: dict = {}  # logit rows -> the picks leaf
        self.steps = 0
        self.rows = 0  # real (not padding) rows run, over all steps

    def _traced(self, ids, slots, rope, table, lengths, *pool: Tensor) -> Tensor:
        layers = len(pool) // 2
        return paged_hidden_graph(self.model, ids, slots, rope, table, lengths,
                                  pool[:layers], pool[layers:], self.pool.block_size,
                                  self.activations)

    def _traced_logits(self, hidden: Tensor, picks: Tensor) -> Tensor:
        return paged_logits_graph(self.model, hidden, picks, self.activations)

    def inputs(self, chunks: Sequence[Chunk]) -> tuple[np.ndarray, ...]:
        """The step's leaves as arrays, padded to its row and logit buckets."""
        size, width = self.pool.block_size, self.table_width
        count = sum(len(chunk.ids) for chunk in chunks)
        rows = bucket(count)
        wanted = sum(chunk.logits for chunk in chunks)
        ids = np.zeros(rows, np.int64)
        slots = np.zeros(rows, np.int64)
        lengths = np.ones(rows, np.int64)
        table = np.zeros((rows, width), np.int64)
        positions = np.zeros(rows, np.int64)
        picks = np.zeros(bucket(max(wanted, 1)), np.int64)
        row = pick = 0
        for chunk in chunks:
            n = len(chunk.ids)
            if len(chunk.blocks) > width:
                raise InvalidArgument(f"a request holds {len(chunk.blocks)} blocks; the step's "
                                      f"tables hold {width}")
            if chunk.start + n > len(chunk.blocks) * size:
                raise InvalidArgument(f"{len(chunk.blocks)} blocks of {size} do not hold "
                                      f"positions up to {chunk.start + n}")
            where = np.arange(chunk.start, chunk.start + n)
            blocks = np.asarray(chunk.blocks, np.int64)
            ids[row:row + n] = chunk.ids
            slots[row:row + n] = blocks[where // size] * size + where % size
            lengths[row:row + n] = where + 1
            table[row:row + n, :len(blocks)] = blocks
            positions[row:row + n] = where
            row += n
            if chunk.logits:
                picks[pick] = row - 1
                pick += 1
        rope = rope_at(self.model._inverse_frequencies, positions,
                       scale=self.model.config.rope_mscale)
        return ids, slots, rope, table, lengths, picks

    def step(self, chunks: Sequence[Chunk]) -> np.ndarray:
        """Run ``chunks`` as one forward; the logits ``(wanted, vocab)`` of the chunks with
        ``logits`` set, in their order."""
        if not chunks:
            raise InvalidArgument("a paged step needs at least one chunk")
        arrays = self.inputs(chunks)
        wanted = sum(chunk.logits for chunk in chunks)
        *leaves, picks = self._leaves(arrays)
        pool = self.pool.tensors()
        if op_profile.enabled() or not self.model.use_jit:
            snapshot = NodeSnapshot(pool)
            try:
                logits = self._traced_logits(self._traced(*leaves, *pool), picks)
                fuel.realize(logits, *pool)
            except BaseException:  # the pool as it was, not holding half a step
                snapshot.restore()
                raise
        else:
            logits = self._logits_jit(self._jit(*leaves, *pool), picks)
        self.steps += 1
        self.rows += sum(len(chunk.ids) for chunk in chunks)
        return logits.numpy()[:wanted]

    def _leaves(self, arrays: Sequence[np.ndarray]) -> list[Tensor]:
        """The step's input tensors (the body's, then picks): per bucket the same ones,
        refilled in place (a replay given the storages it prepared its launchers on
        re-prepares nothing)."""
        return (self._refilled(self._inputs, arrays[0].shape[0], arrays[:-1])
                + self._refilled(self._picks, arrays[-1].shape[0], arrays[-1:]))

    def _refilled(self, kept: dict, key: int, arrays: Sequence[np.ndarray]) -> list[Tensor]:
        leaves = kept.pop(key, None)  # re-inserted: the dict is in order of use
        if leaves is None:
            device = self.model.device
            kept[key] = [fuel.from_numpy(a.copy(), device=device) for a in arrays]
            return kept[key]
        kept[key] = leaves
        for tensor, array in zip(leaves, arrays):
            storage = tensor._node.buffer
            storage.backend.write_from_host(storage, array)
        return leaves

    def clear(self) -> None:
        """Drop the captured steps and their inputs (made again when needed)."""
        self._jit = fuel.jit(self._traced, arena=self._arena)
        self._logits_jit = fuel.jit(self._traced_logits, arena=self._arena)
        self._inputs.clear()
        self._picks.clear()

    def trim(self, keep: int) -> int:
        """Keep the captured bodies (and input leaves) of the ``keep`` most recently run row
        buckets and the logits captures over them, drop the others' (a body holds its plan's
        buffers, a few MiB; a dropped bucket is captured again when it comes back); how many
        row buckets were dropped."""
        dropped = list(self._inputs)[:max(0, len(self._inputs) - keep)]
        for key in dropped:
            del self._inputs[key]
        gone = set(dropped)
        for signature in [s for s in self._jit.captures if s[0][1][0] in gone]:
            del self._jit.captures[signature]
        logits = self._logits_jit.captures
        for signature in [s for s in logits if s[0][1][0] in gone]:
            del logits[signature]
        used = {s[1][1][0] for s in logits}
        for key in [k for k in self._picks if k not in used]:
            del self._picks[key]
        return len(dropped)
