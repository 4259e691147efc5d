"""index_copy on the CPU: the slice fast path for runs of consecutive positions (KV cache
writes) against NumPy's fancy assignment, and the general path's duplicates, negatives and
errors, eager and replayed through fuel.jit."""

import numpy as np
import pytest

import fuel
from fuel.backends.cpu.indexing import contiguous_run
from fuel.ir.errors import IndexOutOfRange

INDEXES = {
    "one": [5], "one negative": [-3], "first": [0], "last": [7], "run": [2, 3, 4],
    "whole": list(range(8)), "negative run": [-3, -2, -1], "reversed": [4, 3, 2],
    "gap": [1, 3, 4], "duplicates": [2, 2, 5], "mixed signs": [-1, 0, 1],
}


def reference(target: np.ndarray, dim: int, index, source: np.ndarray) -> np.ndarray:
    out = target.copy()
    wrapped = np.where(np.asarray(index) < 0, np.asarray(index) + target.shape[dim], index)
    out[(slice(None),) * dim + (wrapped,)] = source  # NumPy: the last duplicate wins
    return out


@pytest.mark.parametrize("name", sorted(INDEXES))
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_index_copy_matches_numpy(name, dim, index_dtype):
    rng = np.random.default_rng(len(name) + dim)
    target = rng.standard_normal((3, 8, 4) if dim == 1 else (8, 3, 4)).astype(np.float32)
    index = np.array(INDEXES[name], index_dtype)
    source_shape = list(target.shape)
    source_shape[dim] = index.size
    source = rng.standard_normal(source_shape).astype(np.float32)
    expected = reference(target, dim, index, source)
    result = fuel.from_numpy(target).index_copy(dim, fuel.from_numpy(index),
                                                fuel.from_numpy(source)).numpy()
    np.testing.assert_array_equal(result, expected)
    inplace = fuel.from_numpy(target.copy())
    inplace.index_copy_(dim, fuel.from_numpy(index), fuel.from_numpy(source))
    np.testing.assert_array_equal(inplace.numpy(), expected)


def test_contiguous_run_takes_only_in_range_increasing_runs():
    assert contiguous_run(np.array([3]), 8) == slice(3, 4)
    assert contiguous_run(np.array([-1]), 8) == slice(7, 8)
    assert contiguous_run(np.array([6, 7]), 8) == slice(6, 8)
    for index in ([8], [-9], [7, 8], [2, 2], [3, 2], [-2, -1], [1, 3]):
        assert contiguous_run(np.array(index), 8) is None
    assert contiguous_run(np.array([], np.int64), 8) is None
    long = np.arange(5, 605)  # past the list compare: NumPy's
    assert contiguous_run(long, 700) == slice(5, 605)
    long[300] += 1
    assert contiguous_run(long, 700) is None


@pytest.mark.parametrize("index", [[8], [-9], [6, 7, 8], [1, 9, 2]])
def test_index_copy_out_of_range_names_the_index_and_node(index):
    target = fuel.from_numpy(np.zeros((2, 8), np.float32))
    source = fuel.from_numpy(np.ones((2, len(index)), np.float32))
    with pytest.raises(IndexOutOfRange) as caught:
        target.index_copy(1, fuel.from_numpy(np.array(index, np.int64)), source).numpy()
    message = str(caught.value)
    bad = next(i for i in index if not -8 <= i < 8)
    assert f"index {bad} is out of range for dim 1 of size 8" in message
    assert "node" in message and "index_copy" in message and "test_index_copy.py" in message


def test_replayed_index_copy_writes_each_runs_positions():
    """A fuel.jit replay with a new positions storage per call writes where each call says."""
    cache = fuel.from_numpy(np.zeros((2, 6, 3), np.float32))
    expected = np.zeros((2, 6, 3), np.float32)

    def write(positions, values):
        cache.index_copy_(1, positions, values)
        return cache * 1.0

    replay = fuel.jit(write)
    for position in (0, 1, 2, -1, 3):
        values = np.full((2, 1, 3), position + 10, np.float32)
        out = replay(fuel.from_numpy(np.array([position], np.int64)), fuel.from_numpy(values))
        expected[:, position] = values[:, 0]
        np.testing.assert_array_equal(out.numpy(), expected)
