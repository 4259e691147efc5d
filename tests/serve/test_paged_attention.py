"""paged_attention: the CPU kernel and the decomposition (gathers, mask, softmax, matmuls; run
on the primitive backend) against a NumPy reference written from the op's record; bad block
tables and lengths are IndexOutOfRange naming the entry; shapes are checked when built."""

import numpy as np
import pytest

import fuel
from fuel.ir.errors import IndexOutOfRange, ShapeError
from fuel.nn.functional import paged_attention
from tests.backends.kernel_cases.attention import reference
from tests.backends.primitive_backend import DEVICE, primitive_backend


def _operands(seed=0, rows=5, heads=6, kv_heads=2, dim=8, blocks=7, block_size=4, width=3):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(rows, heads, dim)).astype(np.float32)
    keys = rng.normal(size=(blocks, block_size, kv_heads, dim)).astype(np.float32)
    values = rng.normal(size=(blocks, block_size, kv_heads, dim)).astype(np.float32)
    table = rng.integers(0, blocks, (rows, width)).astype(np.int64)
    lengths = rng.integers(1, width * block_size + 1, rows).astype(np.int64)
    return [q, keys, values, table, lengths]


def test_cpu_kernel_matches_reference():
    arrays = _operands()
    out = paged_attention(*(fuel.from_numpy(a) for a in arrays)).numpy()
    np.testing.assert_allclose(out, reference(arrays, None), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dim", [64, 40, 12])
def test_cpu_kernel_matches_reference_at_model_head_sizes(dim):
    """Head sizes a multiple of 32 (the AVX2 dot's four accumulators), of 8 (its tail) and
    neither (the portable sum), over many blocks and grouped query heads."""
    arrays = _operands(seed=dim, rows=9, heads=9, kv_heads=3, dim=dim, blocks=40, block_size=16,
                       width=12)
    out = paged_attention(*(fuel.from_numpy(a) for a in arrays)).numpy()
    np.testing.assert_allclose(out, reference(arrays, None), rtol=1e-4, atol=1e-5)


def test_decomposition_matches_reference():
    primitive_backend()
    arrays = _operands(seed=3)
    tensors = [fuel.from_numpy(a).to(DEVICE) for a in arrays]
    out = paged_attention(*tensors).numpy()
    np.testing.assert_allclose(out, reference(arrays, None), rtol=1e-4, atol=1e-5)


def test_a_block_out_of_range_is_named():
    arrays = _operands()
    arrays[3][2, 0] = 99
    with pytest.raises(IndexOutOfRange, match=r"block 99 \(row 2, entry 0\)"):
        paged_attention(*(fuel.from_numpy(a) for a in arrays)).numpy()


def test_a_length_past_the_table_is_named():
    arrays = _operands()
    arrays[4][1] = 13
    with pytest.raises(IndexOutOfRange, match="row 1's length 13 is outside 1..12"):
        paged_attention(*(fuel.from_numpy(a) for a in arrays)).numpy()


def test_mismatched_pools_are_a_shape_error():
    q, keys, values, table, lengths = _operands()
    with pytest.raises(ShapeError, match="must share one shape"):
        paged_attention(*(fuel.from_numpy(a) for a in (q, keys, values[:3], table, lengths)))


def test_cpu_kernel_with_weights_far_below_the_largest():
    """Scores spread over hundreds (a sharp softmax): positions whose exponent falls below
    float32's range weigh 0, the others as the reference."""
    arrays = _operands(seed=5, rows=6, heads=9, kv_heads=3, dim=64, blocks=40, block_size=4,
                       width=40)
    arrays[0] = arrays[0] * 40.0
    out = paged_attention(*(fuel.from_numpy(a) for a in arrays)).numpy()
    want = reference(arrays, None)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
