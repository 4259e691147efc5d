"""Zero-copy exchange: ``Tensor.numpy()`` / ``__array__`` views, DLPack with NumPy and torch
both ways for every dtype DLPack describes, and the pool never reusing an exported buffer."""

import gc

import ml_dtypes
import numpy as np
import pytest

import fuel
from fuel.memory.pool import empty_cache, memory_stats

torch = pytest.importorskip("torch")

# fuel dtype, torch dtype: every dtype fuel holds that DLPack can describe.
DLPACK_DTYPES = [
    (fuel.bool, torch.bool), (fuel.uint8, torch.uint8), (fuel.uint16, torch.uint16),
    (fuel.uint32, torch.uint32), (fuel.uint64, torch.uint64), (fuel.int8, torch.int8),
    (fuel.int16, torch.int16), (fuel.int32, torch.int32), (fuel.int64, torch.int64),
    (fuel.float16, torch.float16), (fuel.bfloat16, torch.bfloat16),
    (fuel.float32, torch.float32), (fuel.float64, torch.float64),
    (fuel.float8_e4m3fn, torch.float8_e4m3fn), (fuel.float8_e4m3fnuz, torch.float8_e4m3fnuz),
    (fuel.float8_e5m2, torch.float8_e5m2), (fuel.float8_e5m2fnuz, torch.float8_e5m2fnuz),
    (fuel.float8_e8m0fnu, torch.float8_e8m0fnu),
]


def _bits(dtype, count: int = 24) -> np.ndarray:
    """``count`` arbitrary values of ``dtype`` (random bit patterns, bools as 0/1)."""
    raw = np.random.default_rng(dtype.itemsize).integers(0, 256, count * dtype.itemsize,
                                                         dtype=np.uint8)
    if dtype is fuel.bool:
        raw = raw & 1
    return raw.view(dtype.numpy).reshape(4, -1)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_numpy_of_a_realized_tensor_is_a_read_only_view_of_its_storage():
    x = fuel.tensor(np.arange(12, dtype=np.float32)).reshape(3, 4)
    y = (x * 2.0 + 1.0).realize()
    values = y.numpy()
    assert np.shares_memory(values, y._node.buffer.buffer)
    assert not values.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        values[0, 0] = 5.0
    np.testing.assert_array_equal(values, np.arange(12, dtype=np.float32).reshape(3, 4) * 2 + 1)
    assert y._node.buffer.buffer.flags.writeable  # the storage itself stays writable
    copied = y.numpy(copy=True)
    assert copied.flags.writeable and not np.shares_memory(copied, values)
    copied[0, 0] = -1.0
    assert values[0, 0] == 1.0


def test_a_strided_view_is_viewed_too():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    x = fuel.from_numpy(base)
    view = x.t()[1:, ::2]
    values = view.numpy()
    np.testing.assert_array_equal(values, base.T[1:, ::2])
    assert np.shares_memory(values, base)


def test_array_protocol():
    x = (fuel.arange(6, dtype=fuel.float32) * 3.0).realize()
    assert np.shares_memory(np.asarray(x), x.numpy())
    forced = np.array(x)  # np.array copies by default
    assert forced.flags.writeable and not np.shares_memory(forced, x.numpy())
    converted = np.asarray(x, dtype=np.float64)
    assert converted.dtype == np.float64
    np.testing.assert_array_equal(converted, np.arange(6) * 3.0)
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(x, dtype=np.float64, copy=False)
    packed = fuel.tensor(np.arange(-4, 4, dtype=ml_dtypes.int4))
    assert not packed.shares_storage()
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(packed, copy=False)
    np.testing.assert_array_equal(np.asarray(packed), np.arange(-4, 4, dtype=ml_dtypes.int4))


def test_tensor_copies_and_from_numpy_shares():
    source = np.arange(8, dtype=np.int32)
    copied, shared = fuel.tensor(source), fuel.from_numpy(source)
    assert not np.shares_memory(copied.numpy(), source)
    assert np.shares_memory(shared.numpy(), source)
    source[0] = 100
    assert copied.numpy()[0] == 0 and shared.numpy()[0] == 100


@pytest.mark.parametrize("fuel_dtype,torch_dtype", DLPACK_DTYPES, ids=lambda d: str(d))
def test_dlpack_with_torch_both_ways(fuel_dtype, torch_dtype):
    values = _bits(fuel_dtype)
    x = fuel.from_numpy(values)
    exported = torch.from_dlpack(x)
    assert exported.dtype == torch_dtype and tuple(exported.shape) == values.shape
    assert exported.data_ptr() == _address(x.numpy())
    np.testing.assert_array_equal(exported.view(torch.uint8).numpy(),
                                  values.view(np.uint8).reshape(4, -1))
    source = torch.from_numpy(values.view(np.uint8).copy()).view(torch_dtype).reshape(4, -1)
    imported = fuel.from_dlpack(source)
    assert imported.dtype is fuel_dtype and imported.shape == tuple(source.shape)
    assert _address(imported.numpy()) == source.data_ptr()
    np.testing.assert_array_equal(imported.numpy().view(np.uint8), values.view(np.uint8))
    # and a computation reads the shared memory
    if fuel_dtype in (fuel.float32, fuel.int64):
        source.fill_(3)
        np.testing.assert_array_equal((imported + 1).numpy(), np.full(values.shape, 4))


@pytest.mark.parametrize("fuel_dtype", [d for d, _ in DLPACK_DTYPES
                                        if d.numpy.type.__module__ == "numpy"],
                         ids=lambda d: d.name)
def test_dlpack_with_numpy_both_ways(fuel_dtype):
    values = _bits(fuel_dtype)
    x = fuel.from_numpy(values)
    exported = np.from_dlpack(x)
    assert np.shares_memory(exported, values) and not exported.flags.writeable
    np.testing.assert_array_equal(exported, values)
    imported = fuel.from_dlpack(values)
    assert np.shares_memory(imported.numpy(), values)


def test_dlpack_capsule_and_legacy_consumers():
    source = torch.arange(6, dtype=torch.bfloat16)
    imported = fuel.from_dlpack(torch.utils.dlpack.to_dlpack(source))
    assert imported.dtype is fuel.bfloat16 and _address(imported.numpy()) == source.data_ptr()
    x = (fuel.arange(4, dtype=fuel.float32) + 1.0).realize()
    legacy = x.__dlpack__()  # no max_version: cannot be told read-only, so a copy
    assert not np.shares_memory(np.from_dlpack(_Capsule(legacy)), x.numpy())
    with pytest.raises(BufferError, match="read-only"):
        x.__dlpack__(copy=False)
    assert x.__dlpack_device__() == (1, 0)


class _Capsule:
    """A producer handing out one ready-made legacy capsule (NumPy's from_dlpack takes objects)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_dlpack_refuses_what_it_cannot_describe():
    with pytest.raises(BufferError, match="int4"):
        torch.from_dlpack(fuel.tensor(np.arange(4, dtype=ml_dtypes.int4)))
    with pytest.raises(BufferError, match="string"):
        fuel.tensor(np.array(["a", "b"])).__dlpack__(max_version=(1, 0))
    with pytest.raises(fuel.InvalidArgument, match="__dlpack__"):
        fuel.from_dlpack([1, 2, 3])


def test_the_pool_never_hands_out_an_exported_buffer():
    """A root's buffer that a NumPy view or a torch tensor (through DLPack) still reads is
    kept out of the pool when its tensor dies; once nothing reads it, it is reused."""
    size = 1 << 14
    x = fuel.tensor(np.arange(size, dtype=np.float32))
    empty_cache()
    exported = []
    for scale in (2.0, 3.0):
        y = (x * scale + 1.0).realize()
        exported.append(y.numpy())
        exported.append(torch.from_dlpack((y - 1.0).realize()))
        del y
        gc.collect()
    for _ in range(3):  # more realizes of the same size: fresh or pooled, never an exported one
        z = (x * 7.0).realize()
        for held in exported:
            assert not np.shares_memory(z.numpy(), np.asarray(held))
    expected = [np.arange(size, dtype=np.float32) * s + 1 for s in (2.0, 3.0)]
    np.testing.assert_array_equal(exported[0], expected[0])
    np.testing.assert_array_equal(exported[1].numpy(), expected[0] - 1)
    np.testing.assert_array_equal(exported[2], expected[1])
    np.testing.assert_array_equal(exported[3].numpy(), expected[1] - 1)
    del z
    exported.clear()
    gc.collect()
    before = memory_stats()
    (x * 9.0).realize()
    assert memory_stats()["reused"] == before["reused"] + 1  # released ones come back
