"""Kernel-suite cases of paged_attention: random pools, block tables that reuse and skip
blocks, lengths from 1 to the table's whole span; the reference gathers each row's positions
one by one and runs float64 softmax attention per head (written from the op's record)."""

from __future__ import annotations

import numpy as np

from fuel.ir.ops import NO_PARAMS, OpKind
from tests.backends.kernel_cases.base import Case, operand, rng_for


def reference(arrays, params) -> np.ndarray:
    q, keys, values, table, lengths = (np.asarray(a) for a in arrays)
    rows, heads, dim = q.shape
    block_size, kv_heads = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    out = np.zeros(q.shape, np.float64)
    for t in range(rows):
        positions = np.arange(int(lengths[t]))
        blocks = table[t, positions // block_size]
        k = keys[blocks, positions % block_size].astype(np.float64)  # (L, kv_heads, dim)
        v = values[blocks, positions % block_size].astype(np.float64)
        for h in range(heads):
            scores = k[:, h // group] @ q[t, h].astype(np.float64)
            weights = np.exp(scores - scores.max())
            out[t, h] = (weights / weights.sum()) @ v[:, h // group]
    return out.astype(np.float32)


def paged_attention_cases(dtypes):
    cases = []
    for label, (rows, heads, kv_heads, dim, blocks, block_size, width) in {
            "decode rows": (4, 6, 2, 8, 9, 4, 3),
            "one row, one head": (1, 1, 1, 16, 2, 8, 2),
            "many rows, threads": (40, 9, 3, 64, 64, 16, 8)}.items():
        rng = rng_for(("paged_attention", label))
        q = rng.normal(size=(rows, heads, dim)).astype(np.float32)
        keys = rng.normal(size=(blocks, block_size, kv_heads, dim)).astype(np.float32)
        values = rng.normal(size=(blocks, block_size, kv_heads, dim)).astype(np.float32)
        table = rng.integers(0, blocks, (rows, width)).astype(np.int64)
        lengths = rng.integers(1, width * block_size + 1, rows).astype(np.int64)
        lengths[0] = width * block_size
        cases.append(Case(NO_PARAMS, [operand(a) for a in (q, keys, values, table, lengths)],
                          reference, label, rtol=1e-4, atol=1e-5))
    return cases


CASES = {OpKind.PAGED_ATTENTION: paged_attention_cases}
