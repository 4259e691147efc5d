"""Attention over a paged key/value pool (``paged_attention``): the op a serving engine's
batched step runs, each query row over its own request's blocks."""

from __future__ import annotations

from fuel.frontend.base import TensorBase
from fuel.frontend.build import at_user_line, make
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import NO_PARAMS, OpKind


@at_user_line
def paged_attention(q: TensorBase, key_pool: TensorBase, value_pool: TensorBase,
                    block_table: TensorBase, lengths: TensorBase) -> TensorBase:
    """Each row ``t`` of ``q`` (rows, heads, head_dim; already scaled) attends over positions
    ``0 .. lengths[t] - 1`` of its request, position ``p`` stored in block
    ``block_table[t, p // block_size]`` of the pools (blocks, block_size, kv_heads, head_dim)
    at offset ``p % block_size``; grouped-query heads share kv heads. Returns (rows, heads,
    head_dim)."""
    operands = (q, key_pool, value_pool, block_table, lengths)
    names = ("q", "key_pool", "value_pool", "block_table", "lengths")
    for name, value in zip(names, operands):
        if not isinstance(value, TensorBase):
            raise InvalidArgument(f"paged_attention's {name} must be a tensor, got "
                                  f"{type(value).__name__}")
    return make(OpKind.PAGED_ATTENTION, tuple(operand._node for operand in operands), NO_PARAMS)
