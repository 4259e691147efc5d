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


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.bool_,
                                   "bfloat16"])
def test_index_copy_of_strided_views_matches_numpy(dtype):
    """The C copy walks strides: a source that is a slice of a wider tensor (a KV cache write
    from the fused qkv projection), a transposed target, a copy to a fresh output."""
    if dtype == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    wide = (rng.standard_normal((3, 2, 10)) * 5).astype(dtype)
    target = (rng.standard_normal((4, 3, 8)) * 5).astype(dtype)
    index = np.array([6, -1], np.int64)
    source_view = wide[:, :, 3:7].transpose(0, 2, 1)  # (3, 4, 2), strided
    expected_target = target.transpose(1, 0, 2)  # (3, 4, 8) viewed across
    expected = reference(expected_target, 2, index, source_view)
    fuel_wide = fuel.from_numpy(wide)
    fuel_target = fuel.from_numpy(target).permute(1, 0, 2)
    fuel_source = fuel_wide[:, :, 3:7].permute(0, 2, 1)
    result = fuel_target.index_copy(2, fuel.from_numpy(index), fuel_source).numpy()
    np.testing.assert_array_equal(result.astype(np.float64), expected.astype(np.float64))


def test_replayed_index_copy_out_of_range_is_named_inside_a_sequence():
    """In a replay the copy runs inside one C sequence with its neighbours; a bad position
    written into the refilled positions tensor still raises naming the index_copy node."""
    cache = fuel.from_numpy(np.zeros((2, 6, 4), np.float32))

    def write(positions, values):
        scaled = values * 2.0 + 1.0
        cache.index_copy_(1, positions, scaled)
        return cache + 0.5

    replay = fuel.jit(write)
    positions = fuel.from_numpy(np.array([1], np.int64))
    values = fuel.from_numpy(np.ones((2, 1, 4), np.float32))
    np.testing.assert_array_equal(replay(positions, values).numpy()[:, 1], 3.5)
    replay(positions, values)
    capture = next(iter(replay.captures.values()))[0]
    first = capture.launches.batchers[0].batched[0]  # values * 2 + 1 (fused C), the copy
    assert type(first).__name__ == "SequenceCall" and len(first.calls) == 2
    storage = positions._node.buffer
    for bad in (6, -7):
        storage.backend.write_from_host(storage, np.array([bad], np.int64))
        with pytest.raises(IndexOutOfRange) as caught:
            replay(positions, values)
        message = str(caught.value)
        assert f"index {bad} is out of range for dim 1 of size 6" in message
        assert "index_copy" in message and "test_index_copy.py" in message
    storage.backend.write_from_host(storage, np.array([4], np.int64))
    out = replay(positions, values).numpy()
    np.testing.assert_array_equal(out[:, 4], 3.5)
    np.testing.assert_array_equal(out[:, 1], 3.5)
