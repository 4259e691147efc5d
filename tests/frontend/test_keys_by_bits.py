"""Value-keyed caches key floats by their bits (issue 25, item 4): -0.0 is not 0.0 and a NaN
matches only the same NaN, in the front end's constants, the params (node structure hash,
inference and compile memos), the plan cache, fused kernels and fuel.jit; and subclassing
fuel.Tensor changes only the subclass."""

import dataclasses
import struct

import numpy as np
import pytest

import fuel
from fuel.compiler.kernel_ir import KernelBuilder, Load, Store
from fuel.ir import dtype as dt
from fuel.ir import params as params_module
from fuel.ir.ops import OpKind, infer_keyed
from fuel.ir.params import (
    ArangeParams,
    BitsFloat,
    FullParams,
    NormParams,
    PadParams,
    bits_key,
    exact_constant,
)


def _nan(payload: int) -> float:
    """A quiet float64 NaN carrying ``payload`` in its low mantissa bits."""
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


@pytest.fixture(params=["plan cache on", "plan cache off"])
def plan_cache(request):
    """Run the test with the plan cache on (a hit must not hand back another value's plan)
    and off (every realize plans; the compile and lowering memos must tell values apart)."""
    capacity = fuel.plan_cache_stats()["capacity"]
    fuel.set_plan_cache_capacity(capacity if request.param == "plan cache on" else 0)
    yield request.param
    fuel.set_plan_cache_capacity(capacity)


# ------------------------------------------------------------------ end to end
def test_full_of_negative_zero_after_positive_zero(plan_cache):
    first = fuel.full((3,), 0.0).numpy()
    second = fuel.full((3,), -0.0).numpy()
    assert not np.signbit(first).any()
    assert np.signbit(second).all()


def test_multiply_by_negative_zero_after_positive_zero(plan_cache):
    x = fuel.tensor([1.0, 2.0, 3.0])
    assert not np.signbit((x * 0.0).numpy()).any()
    assert np.signbit((x * -0.0).numpy()).all()
    assert np.signbit((-0.0 * x).numpy()).all()


def test_fused_fill_of_negative_zero_after_positive_zero(plan_cache):
    """A fill only its group reads becomes a literal of the fused kernel (CPU, toolchain on):
    the group's lowering signature and its kernel's compile key tell the two apart."""
    x = fuel.tensor([1.0, -2.0, 3.0, -4.0])
    assert not np.signbit((x.abs() * fuel.full((4,), 0.0)).numpy()).any()
    assert np.signbit((x.abs() * fuel.full((4,), -0.0)).numpy()).all()


def test_nan_payloads_reach_the_result(plan_cache):
    """``full`` and ``masked_fill`` copy their value: each NaN's payload comes out as given."""
    mask = fuel.tensor([True, False])
    x = fuel.tensor([1.0, 2.0], dtype=fuel.float64)
    for payload in (1, 2, 1):
        nan = _nan(payload)
        expected = np.array([nan, nan], dtype=np.float64)
        assert (_bits(fuel.full((2,), nan, dtype=fuel.float64).numpy())
                == _bits(expected)).all()
        filled = x.masked_fill(mask, nan).numpy()
        assert _bits(filled)[0] == _bits(expected)[0] and filled[1] == 2.0


def test_the_same_nan_hits_the_plan_cache():
    """Equal bits are equal keys: a NaN made anew with the same payload reuses the plan."""
    fuel.full((2,), _nan(5), dtype=fuel.float64).numpy()
    before = fuel.plan_cache_stats()["hits"]
    again = fuel.full((2,), _nan(5), dtype=fuel.float64).numpy()
    assert fuel.plan_cache_stats()["hits"] == before + 1
    assert (_bits(again) == 0x7FF8000000000005).all()


def test_jit_tells_a_negative_zero_argument_apart():
    @fuel.jit
    def scale(x, factor):
        return x * factor

    x = fuel.tensor([1.0, 2.0])
    assert not np.signbit(scale(x, 0.0).numpy()).any()
    assert np.signbit(scale(x, -0.0).numpy()).all()
    assert not np.signbit(scale(x, 0.0).numpy()).any()
    assert scale.replays == 1


# ------------------------------------------------------------------ the one helper
def test_bits_key_tells_floats_apart_by_bits():
    assert bits_key(0.0) != bits_key(-0.0)
    assert bits_key(_nan(1)) == bits_key(_nan(1))
    assert bits_key(_nan(1)) != bits_key(_nan(2))
    assert bits_key((1, (0.0, 2.5))) != bits_key((1, (-0.0, 2.5)))
    assert bits_key((1, (0.0, 2.5))) == bits_key((1, (0.0, 2.5)))
    assert bits_key(np.float32(0.0)) != bits_key(np.float32(-0.0))
    assert bits_key(np.float32(np.nan)) == bits_key(np.float32(np.nan))
    assert bits_key(np.float32(1.0)) != bits_key(np.float16(1.0))
    assert bits_key(complex(0.0, -0.0)) != bits_key(complex(0.0, 0.0))
    assert bits_key(np.float64(-0.0)) == bits_key(-0.0)  # NumPy's float64 is a Python float
    assert bits_key(3) == 3 and bits_key("a") == "a" and bits_key(None) is None
    hash(bits_key((0.0, np.float32(1.0), _nan(3), "s", None, dt.float32)))


@pytest.mark.parametrize("make", [
    lambda v: FullParams((3,), v, dt.float32),
    lambda v: ArangeParams(v, 1.0, 4, dt.float32),
    lambda v: NormParams(1, v),
    lambda v: PadParams(((0, 1),), v),
])
def test_params_compare_and_hash_by_bits(make):
    assert make(0.0) != make(-0.0)
    assert hash(make(0.0)) != hash(make(-0.0))
    assert make(_nan(7)) == make(_nan(7)) and hash(make(_nan(7))) == hash(make(_nan(7)))
    assert make(_nan(7)) != make(_nan(8))
    assert make(0.5) == make(0.5) and hash(make(0.5)) == hash(make(0.5))
    assert len({make(0.0), make(-0.0), make(0.0)}) == 2


def test_every_params_class_that_can_hold_a_float_is_bits_keyed():
    """A field typed float, object or an untyped tuple can hold a float: its class must key
    it by bits (``bits_keyed``), or its caches would confuse -0.0 with 0.0."""
    checked = 0
    for value in vars(params_module).values():
        if not (isinstance(value, type) and dataclasses.is_dataclass(value)):
            continue
        for field in dataclasses.fields(value):
            annotation = str(field.type)
            if (value.__name__, field.name) == ("CopyParams", "device"):  # a Device
                continue
            if "float" in annotation or annotation in ("object", "tuple"):
                assert hasattr(value, "__bits_fields__"), (value.__name__, field.name)
                checked += 1
                break
    assert checked >= 7


def test_node_structure_differs_by_the_sign_of_zero():
    keyed = [infer_keyed(OpKind.FULL, FullParams((2,), v, dt.float32), (), ())
             for v in (0.0, -0.0)]
    assert keyed[0][2] != keyed[1][2]
    nodes = [fuel.full((2,), v)._node for v in (0.0, -0.0)]
    assert nodes[0].key != nodes[1].key


def test_kernel_constants_compare_by_bits():
    def kernel(number):
        builder = KernelBuilder((4,))
        loaded = builder.load(Load(dt.float32, (1,)))
        zero = builder.constant(number, dt.float32)
        product = builder.apply(OpKind.MUL, (loaded, zero), dt.float32)
        return builder.build("k", [Store(product, dt.float32)])

    assert kernel(0.0) != kernel(-0.0)
    assert kernel(0.0) == kernel(0.0) and hash(kernel(0.0)) == hash(kernel(0.0))
    assert kernel(_nan(1)) == kernel(_nan(1)) and kernel(_nan(1)) != kernel(_nan(2))
    builder = KernelBuilder(())
    assert builder.constant(0.0, dt.float32) != builder.constant(-0.0, dt.float32)
    assert isinstance(exact_constant(np.float32(-0.0)), BitsFloat)
    assert exact_constant(2) == 2 and exact_constant(2).__class__ is int
    assert BitsFloat(-0.0) != 0.0 and 0.0 != BitsFloat(-0.0) and BitsFloat(1.5) == 1.5
    assert float(BitsFloat(-0.0)).hex() == "-0x0.0p+0"


# ------------------------------------------------------------------ Tensor subclasses
def test_a_tensor_subclass_leaves_plain_results_untouched():
    class Mine(fuel.Tensor):
        __slots__ = ()

        def twice(self):
            return self * 2

    plain = fuel.tensor([1.0, 2.0])
    assert type(plain + 1) is fuel.Tensor
    assert type(plain * plain) is fuel.Tensor
    assert type(plain.sum()) is fuel.Tensor
    assert type(fuel.tensor([3.0])) is fuel.Tensor
    assert type(fuel.zeros(2)) is fuel.Tensor
    mine = Mine(plain._node)
    assert isinstance(mine, fuel.Tensor) and mine.twice().tolist() == [2.0, 4.0]
    # Results of ops are fuel.Tensor, also on a subclass instance (documented in base.py).
    assert type(mine + 1) is fuel.Tensor and type(mine * mine) is fuel.Tensor
    assert (mine + mine).tolist() == [2.0, 4.0]
