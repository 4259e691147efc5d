import numpy as np
import pytest

import fuel
from fuel.ir import dtype as dt


@pytest.mark.parametrize("d", dt.KNOWN_DTYPES)
def test_names_and_itemsize_match_numpy(d):
    assert d.name == d.numpy.name
    assert d.itemsize == d.numpy.itemsize
    assert getattr(fuel, d.name) is d
    assert dt.from_numpy(d.numpy) is d and dt.from_name(d.name) is d


def _numpy_promote(a, b):
    return np.promote_types(a.numpy, b.numpy)


UNSIGNED_WIDE = (dt.uint16, dt.uint32, dt.uint64)
TORCH_DTYPES = [d for d in dt.ALL_DTYPES if d is not dt.bfloat16 and d not in UNSIGNED_WIDE]


@pytest.mark.parametrize("a", TORCH_DTYPES)
@pytest.mark.parametrize("b", TORCH_DTYPES)
def test_promotion_matches_torch_rules(a, b):
    torch = pytest.importorskip("torch")
    ta = torch.zeros(1, dtype=getattr(torch, a.name if a.name != "bool" else "bool"))
    tb = torch.zeros(1, dtype=getattr(torch, b.name if b.name != "bool" else "bool"))
    expected = str((ta + tb).dtype if not (a.is_bool and b.is_bool) else torch.bool)
    assert "torch." + dt.promote_types(a, b).name == expected


@pytest.mark.parametrize("a", UNSIGNED_WIDE)
@pytest.mark.parametrize("b", [d for d in dt.ALL_DTYPES if d is not dt.bfloat16])
def test_wide_unsigned_promotion_matches_numpy(a, b):
    """torch has no promotion for uint16/32/64; NumPy's is the Array API's, except that
    uint64 with a signed type (unspecified there; NumPy: float64) gives int64 in fuel, and
    an integer with a float gives the float (torch's choice, as for the other integers)."""
    for first, second in ((a, b), (b, a)):
        promoted = dt.promote_types(first, second)
        if b.is_floating:
            assert promoted is b
        elif a is dt.uint64 and b.kind == "i":
            assert promoted is dt.int64
        else:
            assert promoted.numpy == np.promote_types(first.numpy, second.numpy)


@pytest.mark.parametrize("a", dt.FLOAT8_DTYPES)
def test_float8_promotion(a):
    assert dt.promote_types(a, a) is a
    assert dt.promote_types(a, dt.float16) is dt.float16
    assert dt.promote_types(a, dt.int32) is a
    others = [d for d in dt.FLOAT8_DTYPES if d is not a]
    assert all(dt.promote_types(a, b) is dt.float32 for b in others)


def test_half_and_bfloat16_promote_to_float32():
    assert dt.promote_types(dt.float16, dt.bfloat16) is dt.float32


@pytest.mark.parametrize(
    "tensor_dtype, scalar, expected",
    [
        (dt.int32, 1, dt.int32),
        (dt.int32, 2.5, dt.float32),
        (dt.float16, 2.5, dt.float16),
        (dt.bool_, 1, dt.int64),
        (dt.bool_, True, dt.bool_),
        (dt.uint8, 300, dt.uint8),
        (dt.bfloat16, 3, dt.bfloat16),
    ],
)
def test_python_scalars_are_weak(tensor_dtype, scalar, expected):
    assert dt.promote_with_scalar(tensor_dtype, scalar) is expected
    x = fuel.zeros(2, dtype=tensor_dtype)
    assert (x + scalar).dtype is expected


def test_unknown_dtype_name_is_a_clear_error():
    with pytest.raises(fuel.DTypeError, match="unknown dtype 'float8'"):
        dt.from_name("float8")
