"""Kernel-suite cases of the elementwise family: unary (with the inverse and hyperbolic
trigonometry), binary (with fmod, truncating division and bit shifts), where, cast, bit cast,
the copies and the generators (full, arange)."""

from __future__ import annotations

import ast
import math

import ml_dtypes
import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.ops import (
    NO_PARAMS,
    ArangeParams,
    CastParams,
    CopyParams,
    FullParams,
    OpKind,
)
from tests.backends.kernel_cases.base import (
    Case,
    broadcast,
    compute,
    is_float,
    operand,
    rng_for,
    tolerance,
    values,
)

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - SciPy is a test dependency
    _erf = np.vectorize(math.erf, otypes=[np.float64])

K = OpKind

# (operand kinds, shape) plans; "broadcast:<shape>" views a smaller array through stride 0.
UNARY_PLANS = [
    (("dense",), (3, 5)),
    (("transposed",), (4, 6)),
    (("stepped",), (2, 3, 4)),
    (("flipped",), (5,)),
    (("broadcast:(1, 4)",), (3, 4)),
    (("dense",), ()),
    (("dense",), (0, 3)),
]
BINARY_PLANS = [
    (("dense", "dense"), (3, 5)),
    (("transposed", "stepped"), (4, 6)),
    (("broadcast:(1, 5)", "flipped"), (3, 5)),
    (("dense:(3, 1)", "dense:(1, 4)"), (3, 4)),
    (("dense", "dense:()"), (2, 3)),
    (("transposed", "broadcast:(4,)"), (2, 3, 4)),
    (("dense", "dense"), (0, 3)),
]
WHERE_PLANS = [
    (("dense", "dense", "dense"), (3, 5)),
    (("broadcast:(3, 1)", "transposed", "broadcast:(5,)"), (3, 5)),
    (("flipped", "stepped", "dense:()"), (4, 2, 3)),
]

SPECIAL_OK = {
    K.NEG, K.ABS, K.EXP, K.LOG, K.SQRT, K.RSQRT, K.RECIPROCAL, K.SQUARE, K.SIN, K.COS, K.TANH,
    K.SIGMOID, K.RELU, K.ERF, K.LOG1P, K.EXPM1, K.SOFTPLUS, K.MISH, K.HARDSWISH,
    K.FLOOR, K.CEIL, K.ROUND, K.SIGN, K.LOGICAL_NOT, K.ISNAN,
    K.ADD, K.SUB, K.MUL, K.DIV, K.MAXIMUM, K.MINIMUM, K.EQ, K.NE, K.LT, K.LE, K.GT, K.GE,
    K.LOGICAL_AND, K.LOGICAL_OR, K.LOGICAL_XOR,
}


def _shape_of(kind: str, shape):
    if ":" in kind:
        name, text = kind.split(":", 1)
        return name, tuple(ast.literal_eval(text))
    return kind, tuple(shape)


def plan_operands(plan, dtypes, make_values):
    """Operands for one plan: ``make_values(position, dtype, shape)`` gives the data."""
    kinds, shape = plan
    result = []
    for position, (kind, dtype) in enumerate(zip(kinds, dtypes)):
        kind, own_shape = _shape_of(kind, shape)
        if kind == "broadcast":
            data = make_values(position, dtype, own_shape)
            result.append(broadcast(data, shape))
        else:
            result.append(operand(make_values(position, dtype, own_shape), kind))
    return result


def _integral(function):
    return lambda x: x.copy() if not is_float(x) else function(x)


def _relu(x):
    if is_float(x):
        return np.where(np.isnan(x) | (x > 0), x, 0.0)
    return np.maximum(x, x.dtype.type(0))


def _isnan(x):
    return np.isnan(x) if is_float(x) else np.zeros(x.shape, bool)


def _softplus(x):
    """torch's softplus: log(1 + exp(x)), and x above the threshold 20."""
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


UNARY_REFERENCES = {
    K.NEG: np.negative, K.ABS: np.abs, K.EXP: np.exp, K.LOG: np.log, K.SQRT: np.sqrt,
    K.RSQRT: lambda x: 1.0 / np.sqrt(x), K.RECIPROCAL: lambda x: 1.0 / x, K.SQUARE: np.square,
    K.SIN: np.sin, K.COS: np.cos, K.TANH: np.tanh,
    K.SIGMOID: lambda x: 1.0 / (1.0 + np.exp(-x)), K.RELU: _relu,
    K.GELU: lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    K.GELU_TANH: lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                    * (x + 0.044715 * x ** 3))),
    K.SILU: lambda x: x / (1.0 + np.exp(-x)), K.ERF: _erf,
    K.FLOOR: _integral(np.floor), K.CEIL: _integral(np.ceil), K.ROUND: _integral(np.round),
    K.SIGN: np.sign, K.LOGICAL_NOT: np.logical_not, K.ISNAN: _isnan,
    K.BITWISE_NOT: np.invert, K.LOG1P: np.log1p, K.EXPM1: np.expm1,
    K.HARDSWISH: lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    K.SOFTPLUS: _softplus,
    K.MISH: lambda x: x * np.tanh(_softplus(x)),
}
BINARY_REFERENCES = {
    K.ADD: np.add, K.SUB: np.subtract, K.MUL: np.multiply, K.DIV: np.true_divide,
    K.REMAINDER: np.remainder, K.POW: np.power, K.MAXIMUM: np.maximum, K.MINIMUM: np.minimum,
    K.EQ: np.equal, K.NE: np.not_equal, K.LT: np.less, K.LE: np.less_equal,
    K.GT: np.greater, K.GE: np.greater_equal, K.LOGICAL_AND: np.logical_and,
    K.LOGICAL_OR: np.logical_or, K.LOGICAL_XOR: np.logical_xor,
    K.BITWISE_AND: np.bitwise_and, K.BITWISE_OR: np.bitwise_or,
    K.BITWISE_XOR: np.bitwise_xor,
}


def _reference(function, out_dtype):
    def reference(arrays, params):
        with np.errstate(all="ignore"):
            result = function(*[compute(a) for a in arrays])
            return np.asarray(result).astype(out_dtype.numpy)

    return reference


def _value_maker(op, rng):
    def make(position, dtype, shape):
        if op is K.POW:
            if dtype.is_floating:
                return values(dtype, shape, rng, 0.1, 3.0) if position == 0 else \
                    values(dtype, shape, rng, -2.0, 2.0)
            return values(dtype, shape, rng, -4, 4) if position == 0 else \
                values(dtype, shape, rng, 0, 3)
        return values(dtype, shape, rng, special=op in SPECIAL_OK and dtype.is_floating)

    return make


def elementwise_cases(op):
    def generate(dtypes):
        plans = UNARY_PLANS if op in UNARY_REFERENCES else BINARY_PLANS
        table = UNARY_REFERENCES if op in UNARY_REFERENCES else BINARY_REFERENCES
        rng = rng_for(op, dtypes)
        reference = _reference(table[op], dtypes[-1])
        rtol, atol = _tolerance_for(op, dtypes[0])
        return [Case(None,
                     plan_operands(plan, dtypes[:-1], _value_maker(op, rng)), reference,
                     f"{op.value}#{i}", rtol, atol)
                for i, plan in enumerate(plans)]

    return generate


def _tolerance_for(op, dtype):
    rtol, atol = tolerance(dtype)
    if dtype is dt.float32 and op in (K.POW, K.GELU_TANH, K.GELU, K.ERF, K.SILU, K.MISH,
                                          K.SOFTPLUS):
        return 1e-5, 1e-6
    return rtol, atol


def where_cases(dtypes):
    rng = rng_for("where", dtypes)
    cases = []
    for i, plan in enumerate(WHERE_PLANS):
        operands = plan_operands(plan, dtypes[:-1],
                                 lambda p, d, s: values(d, s, rng, special=d.is_floating))
        cases.append(Case(None, operands, lambda a, p: np.where(a[0], a[1], a[2]),
                          f"where#{i}"))
    return cases


SUB_BYTE_INTEGERS = (dt.int2, dt.int4, dt.uint2, dt.uint4)


def _cast_values(source, target, rng, shape):
    if source.is_bool:
        return values(source, shape, rng)
    if source.is_floating:
        low, high = (0.0, 120.0) if target.kind == "u" else (-120.0, 120.0)
        if source is dt.float8_e8m0fnu:  # powers of two only: no sign, no zero, 64 fits int8
            low, high = 0.5, 60.0
        if target in SUB_BYTE_INTEGERS:  # out of range is undefined (ONNX); fuel gives 0
            limits = ml_dtypes.iinfo(target.numpy)
            low, high = max(low, int(limits.min)), int(limits.max)
            if source is dt.float8_e8m0fnu:  # rounds to a power of two: stay under one
                high = 2 ** math.floor(math.log2(high))
        data = values(source, shape, rng, low, high)
        if target.is_floating and data.size > 2 and source.itemsize > target.itemsize:
            data.reshape(-1)[:2] = (np.nan, 1e5 if source.itemsize >= 4 else 3.0e4)
        if target.is_bool and data.size > 2:
            data.reshape(-1)[:2] = (0.0, np.nan)
        return data
    info = ml_dtypes.iinfo(source.numpy)
    low, high = max(info.min, -300), min(info.max, 300)
    return rng.integers(low, high + 1, size=shape).astype(source.numpy)


def _saturated(array: np.ndarray, target) -> np.ndarray:
    """ONNX's saturating cast: beyond the finite range (infinities too) gives +-max."""
    limit = float(ml_dtypes.finfo(target.numpy).max)
    wide = compute(array).astype(np.float64)
    clamped = np.where(np.abs(wide) > limit, np.sign(wide) * limit, wide)
    return clamped.astype(target.numpy)


def _power_of_two(array: np.ndarray, round_mode: str) -> np.ndarray:
    """float8_e8m0fnu by ONNX's rounding modes, from frexp: |x| = m * 2**e, m in [0.5, 1)."""
    mantissa, exponent = np.frexp(np.abs(compute(array).astype(np.float64)))
    fraction = 2 * mantissa - 1  # |x| = (1 + fraction) * 2**(e - 1)
    step = {"up": fraction > 0, "down": np.zeros_like(fraction, bool),
            "nearest": fraction >= 0.5}[round_mode]
    return np.ldexp(1.0, exponent - 1 + step).astype(dt.float8_e8m0fnu.numpy)


def _astype(array: np.ndarray, target) -> np.ndarray:
    """``array.astype(target)``; where the installed ml_dtypes has no direct cast between two
    of its types (before 0.7), through int64 or float64: on 0.7, which has the direct casts,
    both routes give the same values for every input (checked exhaustively)."""
    if np.can_cast(array.dtype, target, "unsafe"):
        return array.astype(target)
    integers = all(np.dtype(t).name.startswith(("int", "uint")) for t in (array.dtype, target))
    return array.astype(np.int64 if integers else np.float64).astype(target)


def cast_cases(dtypes):
    source, target = dtypes
    rng = rng_for("cast", dtypes)
    cases = []
    for i, plan in enumerate(UNARY_PLANS):
        operands = plan_operands(plan, (source,), lambda p, d, s: _cast_values(d, target, rng, s))
        cases.append(Case(CastParams(target), operands,
                          lambda a, p: _astype(a[0], p.dtype.numpy), f"cast#{i}"))
    wide = source in (dt.float32, dt.float64)
    if wide and target in dt.FLOAT8_DTYPES and target is not dt.float8_e8m0fnu:
        data = values(source, (4, 6), rng, -1e5, 1e5, special=True)
        cases.append(Case(CastParams(target, saturate=True), [operand(data, "transposed")],
                          lambda a, p: _saturated(a[0], p.dtype), "cast saturating"))
    if wide and target is dt.float8_e8m0fnu:
        data = np.exp2(rng.uniform(-20, 20, (3, 5))).astype(source.numpy)
        data.reshape(-1)[:3] = (1.5, 3.0, 0.75)  # ties of the nearest mode
        for mode in ("up", "down", "nearest"):
            cases.append(Case(CastParams(target, round_mode=mode), [operand(data, "flipped")],
                              lambda a, p: _power_of_two(a[0], p.round_mode), f"cast {mode}"))
    return cases


def identity_cases(op):
    def generate(dtypes):
        rng = rng_for(op, dtypes)
        params = CopyParams(CPU) if op is K.COPY else None
        return [Case(params, plan_operands(plan, dtypes[:1],
                                           lambda p, d, s: values(d, s, rng, special=True)),
                     lambda a, p: np.array(a[0]), f"{op.value}#{i}")
                for i, plan in enumerate(UNARY_PLANS)]

    return generate


def full_cases(dtypes):
    (target,) = dtypes
    fills = [True] if target.is_bool else [7] if target.is_integer else [2.5, float("nan")]
    return [Case(FullParams(shape, value, target), [],
                 lambda a, p: np.full(p.shape, p.value).astype(p.dtype.numpy), f"full#{i}")
            for i, (shape, value) in enumerate(
                (shape, value) for shape in ((3, 4), (), (0,)) for value in fills)]


def arange_cases(dtypes):
    (target,) = dtypes
    if target.is_floating:
        settings = [(0.5, 0.25, 17), (-1.0, 0.1, 50), (0.0, 1.0, 0)]
    elif target.kind == "u":
        settings = [(0, 3, 10), (5, 1, 1)]
    else:
        settings = [(-3, 2, 10), (4, -1, 9)]

    def reference(arrays, params):
        if params.dtype.is_floating:
            return (params.start + np.arange(params.count, dtype=np.float64) * params.step
                    ).astype(params.dtype.numpy)
        return (np.arange(params.count, dtype=np.int64) * params.step + params.start
                ).astype(params.dtype.numpy)

    return [Case(ArangeParams(start, step, count, target), [], reference, f"arange#{i}")
            for i, (start, step, count) in enumerate(settings)]


PLANS_1 = [("dense", (3, 5)), ("transposed", (4, 6)), ("stepped", (2, 3, 4)), ("flipped", (5,)),
           ("dense", ()), ("dense", (0, 3))]
PLANS_2 = [(("dense", "dense"), (3, 5)), (("transposed", "stepped"), (4, 6)),
           (("flipped", "broadcast"), (3, 5)), (("dense", "dense"), (0, 3))]
# op -> (NumPy function, low, high): inputs drawn inside each function's domain.
TRIG = {
    K.TAN: (np.tan, -1.4, 1.4), K.ASIN: (np.arcsin, -0.95, 0.95),
    K.ACOS: (np.arccos, -0.95, 0.95), K.ATAN: (np.arctan, -4.0, 4.0),
    K.SINH: (np.sinh, -3.0, 3.0), K.COSH: (np.cosh, -3.0, 3.0),
    K.ASINH: (np.arcsinh, -4.0, 4.0), K.ACOSH: (np.arccosh, 1.05, 5.0),
    K.ATANH: (np.arctanh, -0.9, 0.9),
}


def _operand2(kind: str, data: np.ndarray, shape) -> object:
    if kind == "broadcast":
        return broadcast(data[:1], shape)
    return operand(data, kind)


def trig_cases(op):
    function, low, high = TRIG[op]

    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(d, loose=True)
        return [Case(NO_PARAMS, [operand(values(d, shape, rng, low, high), kind)],
                     lambda a, p: function(compute(a[0])).astype(d.numpy), f"{op.value}#{i}",
                     rtol, atol) for i, (kind, shape) in enumerate(PLANS_1)]

    return generate


def _nonzero(d, shape, rng, low, high):
    data = values(d, shape, rng, low, high)
    if d.is_floating:
        return np.where(np.abs(compute(data)) < 0.25, 1.5, compute(data)).astype(d.numpy)
    return np.where(data == 0, d.numpy.type(3), data)


def _python_elementwise(function, out):
    def reference(arrays, params):
        a, b = (np.broadcast_to(x, arrays[0].shape) for x in arrays)
        flat = [function(int(x), int(y)) & (2**64 - 1)  # two's complement, then narrowed
                for x, y in zip(a.reshape(-1), b.reshape(-1))]
        return np.array(flat, dtype=np.uint64).astype(out.numpy).reshape(a.shape)

    return reference


def _wrap(value: int, dtype) -> int:
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def binary_int_cases(op):
    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        bits = d.itemsize * 8
        if op is K.FMOD:
            reference = (lambda a, p: np.fmod(compute(a[0]), compute(a[1])).astype(d.numpy))
            rtol, atol = tolerance(d, loose=True)
        elif op is K.INT_DIV:
            reference = _python_elementwise(lambda x, y: abs(x) // abs(y) * (
                1 if (x >= 0) == (y > 0) else -1), d)
            rtol = atol = None
        else:
            left = op is K.BITSHIFT_LEFT

            def shift(x, s):
                if s < 0 or s >= bits:
                    return -1 if not left and x < 0 else 0
                return _wrap(x << s, d) if left else x >> s

            reference = _python_elementwise(shift, d)
            rtol = atol = None
        cases = []
        for i, (kinds, shape) in enumerate(PLANS_2):
            first = values(d, shape, rng, -40, 40) if op is not K.FMOD else \
                values(d, shape, rng, -9, 9)
            if op in (K.BITSHIFT_LEFT, K.BITSHIFT_RIGHT):
                second = rng.integers(-1, bits + 2, size=shape).astype(d.numpy) \
                    if d.kind == "i" else rng.integers(0, bits + 2, size=shape).astype(d.numpy)
            else:
                second = _nonzero(d, shape, rng, -7, 7)
            operands = [_operand2(kinds[0], first, shape), _operand2(kinds[1], second, shape)]
            cases.append(Case(NO_PARAMS, operands, reference, f"{op.value}#{i}", rtol, atol))
        return cases

    return generate


def bitcast_cases(dtypes):
    source, target = dtypes
    rng = rng_for("bitcast", dtypes)
    cases = []
    for i, (kind, shape) in enumerate(PLANS_1):
        data = values(source, shape, rng, -50, 50)
        cases.append(Case(CastParams(target), [operand(data, kind)],
                          lambda a, p: np.array(a[0], copy=True).view(p.dtype.numpy),
                          f"bitcast#{i}", 0.0, 0.0))
    return cases


CASES = {
    **{op: elementwise_cases(op) for op in (*UNARY_REFERENCES, *BINARY_REFERENCES)},
    K.WHERE: where_cases,
    K.CAST: cast_cases,
    K.CONTIGUOUS: identity_cases(K.CONTIGUOUS),
    K.COPY: identity_cases(K.COPY),
    K.FULL: full_cases,
    K.ARANGE: arange_cases,
    **{op: trig_cases(op) for op in TRIG},
    **{op: binary_int_cases(op) for op in (K.FMOD, K.INT_DIV, K.BITSHIFT_LEFT,
                                           K.BITSHIFT_RIGHT)},
    K.BITCAST: bitcast_cases,
}
