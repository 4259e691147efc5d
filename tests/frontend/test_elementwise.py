import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fuel
from fuel.ir import dtype as dt
from tests.frontend.helpers import (
    FLOATS,
    INTS,
    arrays,
    broadcastable_shapes,
    check,
    reference_input,
    small_shapes,
)

_erf = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


FLOAT_UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "silu": lambda x: x / (1 + np.exp(-x)),
    "erf": _erf, "gelu": _gelu,
}
NUMERIC_UNARY = {
    "neg": np.negative, "abs": np.abs, "square": np.square,
    "relu": lambda x: np.maximum(x, 0), "sign": np.sign,
}
ROUNDING = {"floor": np.floor, "ceil": np.ceil, "round": np.round}


@pytest.mark.parametrize("name", sorted(FLOAT_UNARY))
@pytest.mark.parametrize("d", FLOATS)
@settings(max_examples=8, deadline=None)
@given(shape=small_shapes, seed=st.integers(0, 1000))
def test_float_unary_matches_numpy(name, d, shape, seed):
    positive = name in ("log", "sqrt", "rsqrt")
    a = arrays(d, shape, 0.1 if positive else -3, 3, seed)
    x = fuel.from_numpy(a)
    expected = FLOAT_UNARY[name](reference_input(a).astype(np.float64))
    check(getattr(x, name)(), expected)


@pytest.mark.parametrize("name", sorted(NUMERIC_UNARY) + sorted(ROUNDING))
@pytest.mark.parametrize("d", FLOATS + INTS)
def test_numeric_unary_matches_numpy(name, d):
    a = arrays(d, (3, 4), seed=1)
    if name in ROUNDING and d.is_floating:
        a = (a * 3).astype(a.dtype)
    function = {**NUMERIC_UNARY, **ROUNDING}[name]
    expected = function(reference_input(a)) if d.is_floating else function(a)
    check(getattr(fuel.from_numpy(a), name)(), np.asarray(expected).astype(a.dtype))


def test_integer_input_to_float_op_promotes_to_float32():
    x = fuel.tensor([1, 2, 3])
    assert x.exp().dtype is fuel.float32
    check(x.exp(), np.exp(np.array([1, 2, 3], np.float32)))


def test_gelu_tanh_and_predicates():
    a = arrays(dt.float32, (5, 3), seed=3)
    x = fuel.from_numpy(a)
    check(x.gelu(approximate="tanh"), _gelu_tanh(a.astype(np.float64)))
    nan = fuel.tensor([1.0, float("nan"), float("inf")])
    np.testing.assert_array_equal(nan.isnan().numpy(), [False, True, False])
    np.testing.assert_array_equal(fuel.tensor([True, False]).logical_not().numpy(),
                                  [False, True])
    np.testing.assert_array_equal((~fuel.tensor([True, False])).numpy(), [False, True])
    np.testing.assert_array_equal((~fuel.tensor([5], dtype=fuel.int32)).numpy(), [~5])


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("d", [dt.float16, dt.float32, dt.float64, dt.int8, dt.int32, dt.int64,
                               dt.uint8])
@settings(max_examples=6, deadline=None)
@given(shapes=broadcastable_shapes(), seed=st.integers(0, 1000))
def test_binary_broadcasting_matches_numpy(name, d, shapes, seed):
    (sa, sb), _ = shapes.input_shapes, shapes.result_shape
    a, b = arrays(d, sa, seed=seed), arrays(d, sb, seed=seed + 1)
    result = getattr(fuel.from_numpy(a), name)(fuel.from_numpy(b))
    expected = BINARY[name](reference_input(a), reference_input(b))
    if expected.dtype != np.bool_:
        expected = expected.astype(a.dtype)
    check(result, expected, d if expected.dtype != np.bool_ else dt.bool_)


@pytest.mark.parametrize("d", FLOATS)
def test_division_pow_remainder_floats(d):
    a, b = arrays(d, (4, 5), seed=4), arrays(d, (5,), 0.5, 3, seed=5)
    x, y = fuel.from_numpy(a), fuel.from_numpy(b)
    ra, rb = reference_input(a), reference_input(b)
    check(x / y, (ra / rb).astype(a.dtype))
    check(x % y, np.remainder(ra, rb).astype(a.dtype))
    check(y ** x, np.power(rb, ra).astype(a.dtype))


@pytest.mark.parametrize("d", INTS)
def test_integer_division_is_true_division_and_remainder_is_pythonic(d):
    a = arrays(d, (6,), seed=6)
    b = np.where(arrays(d, (6,), seed=7) == 0, 3, arrays(d, (6,), seed=7)).astype(d.numpy)
    x, y = fuel.from_numpy(a), fuel.from_numpy(b)
    assert (x / y).dtype is dt.float32
    check(x / y, (a.astype(np.float32) / b.astype(np.float32)))
    check(x % y, np.remainder(a, b))


def test_every_python_operator_and_reflected_form():
    a = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], np.float32)
    x = fuel.from_numpy(a)
    cases = [
        (x + 2, a + 2), (2 + x, 2 + a), (x - 1, a - 1), (1 - x, 1 - a), (x * 3, a * 3),
        (3 * x, 3 * a), (x / 2, a / 2), (2 / x, 2 / a), (x % 2, a % 2), (7 % x, 7 % a),
        (x ** 2, a ** 2), (2 ** x, 2 ** a), (-x, -a), (+x, a), (abs(x), abs(a)),
        (x @ x.T, a @ a.T), (x == 1, a == 1), (x != 1, a != 1), (x < 1, a < 1),
        (x <= 1, a <= 1), (x > 1, a > 1), (x >= 1, a >= 1),
    ]
    for got, expected in cases:
        check(got, expected)
    i = fuel.tensor([1, 2, 3])
    n = np.array([1, 2, 3])
    for got, expected in [(i & 2, n & 2), (i | 4, n | 4), (i ^ 1, n ^ 1), (6 & i, 6 & n),
                          (5 | i, 5 | n), (3 ^ i, 3 ^ n)]:
        check(got, expected)
    b = fuel.tensor([True, False, True])
    np.testing.assert_array_equal((b & True).numpy(), [True, False, True])
    np.testing.assert_array_equal((b | False).numpy(), [True, False, True])
    np.testing.assert_array_equal((b ^ True).numpy(), [False, True, False])


def test_where_masked_fill_clamp():
    a = arrays(dt.float32, (3, 4), seed=8)
    x = fuel.from_numpy(a)
    mask = a > 0
    check(fuel.where(fuel.from_numpy(mask), x, 0.0), np.where(mask, a, 0.0))
    check(x.masked_fill(fuel.from_numpy(mask[0]), -1), np.where(mask[0], -1, a))
    check(x.clamp(-1, 1), np.clip(a, -1, 1))
    check(x.clamp(min=0.5), np.maximum(a, 0.5))
    check(x.clamp(max=0.5), np.minimum(a, 0.5))
    i = fuel.tensor([1, 5, 9], dtype=fuel.int32)
    assert i.masked_fill(i > 4, 0).dtype is fuel.int32
    check(i.masked_fill(i > 4, 0), np.array([1, 0, 0]))


def test_nan_and_inf_pass_through_like_numpy():
    a = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0], np.float32)
    x = fuel.from_numpy(a)
    with np.errstate(all="ignore"):
        for name, function in [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt),
                               ("tanh", np.tanh), ("relu", lambda v: np.maximum(v, 0))]:
            check(getattr(x, name)(), function(a))
        check(x / 0.0, a / np.float32(0.0))
        check(x.clamp(-1, 1), np.clip(a, -1, 1))


@pytest.mark.parametrize("source", [dt.bool_, dt.uint8, dt.int32, dt.int64, dt.float16,
                                    dt.bfloat16, dt.float32, dt.float64])
@pytest.mark.parametrize("target", [dt.bool_, dt.int8, dt.int64, dt.float16, dt.bfloat16,
                                    dt.float32, dt.float64])
def test_casts_match_numpy(source, target):
    a = arrays(source, (7,), 0, 20, seed=9)
    expected = a.astype(np.float32).astype(target.numpy) if source in (
        dt.float16, dt.bfloat16) and target.is_integer else a.astype(target.numpy)
    check(fuel.from_numpy(a).to(target), expected, target)
