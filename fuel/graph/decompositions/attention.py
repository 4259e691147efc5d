"""paged_attention from gathers and dense attention: every row's block table expanded to pool
positions, its keys and values gathered (all M * block_size of them), the positions at or past
the row's length masked out, then softmax(q k^T) v per kv head group."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import AxisParams


@decomposes(OpKind.PAGED_ATTENTION)
def paged_attention(node: Node, build: Builder) -> Node:
    q, key_pool, value_pool, table, lengths = node.inputs
    rows, heads, dim = q.shape
    blocks, block_size, kv_heads, _ = key_pool.shape
    group = heads // kv_heads
    span = table.shape[1] * block_size
    starts = build.mul(build.reshape(build.cast(table, dt.int64), (rows, table.shape[1], 1)),
                       build.constant(block_size, dt.int64))
    offsets = build.reshape(build.arange(block_size), (1, 1, block_size))
    slots = build.reshape(build.add(starts, offsets), (rows * span,))

    def gathered(pool: Node) -> Node:  # (rows, kv_heads, span, dim)
        flat = build.reshape(pool, (blocks * block_size, kv_heads, dim))
        picked = build.reshape(build.index_select(flat, 0, slots), (rows, span, kv_heads, dim))
        return build.permute(picked, (0, 2, 1, 3))

    keys, values = gathered(key_pool), gathered(value_pool)
    queries = build.reshape(q, (rows, kv_heads, group, dim))
    scores = build.matmul(queries, build.permute(keys, (0, 1, 3, 2)))  # (rows, kv, group, span)
    positions = build.reshape(build.arange(span), (1, span))
    visible = build.elementwise(OpKind.LT, positions,
                                build.reshape(build.cast(lengths, dt.int64), (rows, 1)))
    visible = build.reshape(visible, (rows, 1, 1, span))
    masked = build.where(visible, scores, build.constant(float("-inf"), scores.dtype))
    probabilities = build.op(OpKind.SOFTMAX, masked, params=AxisParams(3))
    out = build.matmul(probabilities, values)  # (rows, kv_heads, group, dim)
    return build.reshape(out, (rows, heads, dim))
