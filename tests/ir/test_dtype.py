import numpy as np
import pytest

import fuel
from fuel.ir import dtype as dt


@pytest.mark.parametrize("d", dt.ALL_DTYPES)
def test_names_and_itemsize_match_numpy(d):
    assert d.name == (d.numpy.name if d is not dt.bfloat16 else "bfloat16")
    assert d.itemsize == d.numpy.itemsize
    assert getattr(fuel, d.name) is d


def _numpy_promote(a, b):
    return np.promote_types(a.numpy, b.numpy)


@pytest.mark.parametrize("a", [d for d in dt.ALL_DTYPES if d is not dt.bfloat16])
@pytest.mark.parametrize("b", [d for d in dt.ALL_DTYPES if d is not dt.bfloat16])
def test_promotion_matches_torch_rules(a, b):
    torch = pytest.importorskip("torch")
    ta = torch.zeros(1, dtype=getattr(torch, a.name if a.name != "bool" else "bool"))
    tb = torch.zeros(1, dtype=getattr(torch, b.name if b.name != "bool" else "bool"))
    expected = str((ta + tb).dtype if not (a.is_bool and b.is_bool) else torch.bool)
    assert "torch." + dt.promote_types(a, b).name == expected


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
