"""Sub-byte tensors stay packed in CPU memory; packing matches ONNX's layout."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.backends.cpu.low_precision import pack, unpack
from fuel.ir import dtype as dt


def _values(dtype, count, rng):
    info_low, info_high = (0, 2**dtype.bits) if dtype.kind == "u" else (
        -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1))
    if dtype.is_floating:
        return rng.uniform(-6, 6, count).astype(dtype.numpy)
    return rng.integers(info_low, info_high, count).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", dt.PACKED_DTYPES, ids=lambda d: d.name)
def test_sub_byte_tensors_stay_packed(dtype):
    rng = np.random.default_rng(4)
    data = _values(dtype, 11, rng)
    x = fuel.tensor(data)
    y = x.to(fuel.float32).to(dtype)  # a kernel output of the packed dtype
    y.realize()
    for tensor in (x, y):
        storage = tensor._node.buffer
        assert storage.buffer.dtype == np.uint8
        assert storage.buffer.nbytes == (11 * dtype.bits + 7) // 8 == storage.nbytes
    np.testing.assert_array_equal(y.numpy().view(np.uint8), data.view(np.uint8))
    np.testing.assert_array_equal(y[2:9:3].numpy().view(np.uint8), data[2:9:3].view(np.uint8))


@pytest.mark.parametrize("dtype", [dt.int4, dt.uint4, dt.int2, dt.uint2, dt.float4_e2m1fn],
                         ids=lambda d: d.name)
def test_packing_matches_onnx(dtype):
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    data = _values(dtype, 9, np.random.default_rng(5))
    assert pack(data, dtype).tobytes() == numpy_helper.from_array(data).raw_data
    assert np.array_equal(unpack(pack(data, dtype), 9, dtype).view(np.uint8),
                          data.view(np.uint8))


def test_float_to_sub_byte_integer_truncates_and_zeroes_out_of_range():
    # The stated rule (ONNX leaves it undefined; its node tests and ml_dtypes 0.7 agree):
    # truncate toward zero; a result outside the type's range, NaN and infinities give 0.
    data = np.array([-9.7, -8.5, -2.5, -0.5, 0.5, 2.9, 7.6, 8.0, 15.5, 16.0, np.nan, np.inf],
                    np.float32)
    expected = {
        dt.int4: [0, -8, -2, 0, 0, 2, 7, 0, 0, 0, 0, 0],
        dt.uint4: [0, 0, 0, 0, 0, 2, 7, 8, 15, 0, 0, 0],
        dt.int2: [0, 0, -2, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        dt.uint2: [0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0],
    }
    for dtype, values in expected.items():
        for source in (fuel.float32, fuel.float16):
            cast = fuel.tensor(data).to(source).to(dtype).numpy()
            assert cast.astype(np.int64).tolist() == values, (dtype.name, source)
