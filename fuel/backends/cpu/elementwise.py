"""NumPy kernels for the elementwise families (unary, binary, where, casts, bit casts, copies)."""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

from fuel.backends.cpu.arrays import (
    HALF_NUMPY,
    STRIDED,
    compute,
    kernel_list,
    operand,
    output,
    view,
)
from fuel.backends.cpu.c_library import entry_point
from fuel.backends.cpu.low_precision import (
    cast_source,
    is_packed,
    saturate,
    to_float8_e8m0,
    unpacked_output,
)
from fuel.backends.cpu.special import erf_into, gelu_into
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind, definition

KERNELS = kernel_list()
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@functools.cache
def _exact_erf():
    """SciPy's erf (exact to double precision) when installed, else math.erf element by
    element; imported on first use so that ``import fuel`` does not pay for SciPy."""
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:  # pragma: no cover - exercised where SciPy is absent
        element = np.frompyfunc(math.erf, 1, 1)
        return lambda x: element(x).astype(x.dtype)
    return scipy_erf


def erf(x: np.ndarray) -> np.ndarray:
    """Error function in float64."""
    return _exact_erf()(x)


def _float32_fast(exact, fast_into):
    """float64 goes through ``exact``; float32 and the half types through the vectorized
    ``fast_into(x, out)``. The kernel template calls it with the output to fill."""

    def apply(x, out):
        if x.dtype == np.float64:
            out[...] = exact(x)
        else:
            fast_into(x, out)

    apply.writes_output = True
    apply.__name__ = getattr(fast_into, "__name__", "fast")
    return apply


def _sigmoid_into(x, out):
    """out = 1 / (1 + exp(-x)); exp overflowing to inf gives the right limit, 0."""
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)


def _silu_into(x, out):
    """out = x / (1 + exp(-x)) (x = -inf-ward: x / inf = -0, the limit)."""
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1.0
    np.divide(x, out, out=out)


def _in_place(into):
    """An elementwise function that writes its output; half types computed in float32."""

    def apply(x, out):
        if out.dtype in HALF_NUMPY or x.dtype != out.dtype:
            scratch = np.empty(out.shape, np.float32)
            into(compute(x), scratch)
            out[...] = scratch
        else:
            into(x, out)

    apply.writes_output = True
    apply.__name__ = into.__name__
    return apply


def _gelu(x):
    return (0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))).astype(x.dtype, copy=False)


def _gelu_tanh(x):
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
    return (0.5 * x * (1.0 + np.tanh(inner))).astype(x.dtype, copy=False)


def _relu(x):
    return np.maximum(x, 0).astype(x.dtype, copy=False)


def _rsqrt(x):
    return (1.0 / np.sqrt(x)).astype(x.dtype, copy=False)


def _reciprocal(x):
    return (1.0 / x).astype(x.dtype, copy=False)


def _hardswish(x):
    return (x * np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(x.dtype, copy=False)


def _softplus(x):
    """log(1 + exp(x)) without overflow; x itself above torch's threshold of 20."""
    return np.where(x > 20.0, x, np.logaddexp(0.0, x)).astype(x.dtype, copy=False)


def _mish(x):
    return (x * np.tanh(_softplus(x))).astype(x.dtype, copy=False)


def _integral_identity(function):
    """floor/ceil/round keep integers as they are (NumPy would turn them into floats)."""

    def apply(x):
        return x.copy() if x.dtype.kind in "iub" else function(x)

    return apply


UNARY_FUNCTIONS = {
    OpKind.NEG: np.negative,
    OpKind.ABS: np.abs,
    OpKind.EXP: np.exp,
    OpKind.EXPM1: np.expm1,
    OpKind.LOG: np.log,
    OpKind.LOG1P: np.log1p,
    OpKind.SQRT: np.sqrt,
    OpKind.RSQRT: _rsqrt,
    OpKind.RECIPROCAL: _reciprocal,
    OpKind.SQUARE: np.square,
    OpKind.SIN: np.sin,
    OpKind.COS: np.cos,
    OpKind.TANH: np.tanh,
    OpKind.SIGMOID: _in_place(_sigmoid_into),
    OpKind.RELU: _relu,
    OpKind.GELU: _float32_fast(_gelu, gelu_into),
    OpKind.GELU_TANH: _gelu_tanh,
    OpKind.SILU: _in_place(_silu_into),
    OpKind.HARDSWISH: _hardswish,
    OpKind.SOFTPLUS: _softplus,
    OpKind.MISH: _mish,
    OpKind.ERF: _float32_fast(erf, erf_into),
    OpKind.FLOOR: _integral_identity(np.floor),
    OpKind.CEIL: _integral_identity(np.ceil),
    OpKind.ROUND: _integral_identity(np.round),
    OpKind.SIGN: np.sign,
    OpKind.LOGICAL_NOT: np.logical_not,
    OpKind.BITWISE_NOT: np.invert,
    OpKind.ISNAN: np.isnan,
}



def _python_remainder(a, b):
    return np.remainder(a, b)


BINARY_FUNCTIONS = {
    OpKind.ADD: np.add,
    OpKind.SUB: np.subtract,
    OpKind.MUL: np.multiply,
    OpKind.DIV: np.true_divide,
    OpKind.REMAINDER: _python_remainder,
    OpKind.POW: np.power,
    OpKind.MAXIMUM: np.maximum,
    OpKind.MINIMUM: np.minimum,
    OpKind.EQ: np.equal,
    OpKind.NE: np.not_equal,
    OpKind.LT: np.less,
    OpKind.LE: np.less_equal,
    OpKind.GT: np.greater,
    OpKind.GE: np.greater_equal,
    OpKind.LOGICAL_AND: np.logical_and,
    OpKind.LOGICAL_OR: np.logical_or,
    OpKind.LOGICAL_XOR: np.logical_xor,
    OpKind.BITWISE_AND: np.bitwise_and,
    OpKind.BITWISE_OR: np.bitwise_or,
    OpKind.BITWISE_XOR: np.bitwise_xor,
}



# float32 arithmetic over small operands of one contiguous shape runs in C (``binary.c``):
# the same IEEE results, and a replay runs it inside its neighbours' sequence (ForeignCall)
# instead of a NumPy call between them. Larger operands stay with NumPy's loops.
C_BINARY_OPERATIONS = {OpKind.ADD: 0, OpKind.SUB: 1, OpKind.MUL: 2, OpKind.DIV: 3}
C_BINARY_ELEMENTS = 1 << 16
BINARY_SOURCE = Path(__file__).with_name("binary.c")
_BINARY_TEXT = BINARY_SOURCE.read_text()  # the kernels' revision source and the build's


def _foreign_binary(operation: int, arrays: list, out: np.ndarray) -> ForeignCall | None:
    """The C launch of a float32 binary op, or None where it does not apply."""
    if (out.size > C_BINARY_ELEMENTS or out.dtype != np.float32 or not out.flags.c_contiguous
            or any(a.dtype != np.float32 or a.shape != out.shape or not a.flags.c_contiguous
                   or (np.shares_memory(a, out) and a.ctypes.data != out.ctypes.data)
                   for a in arrays)):
        return None
    function = entry_point("binary_float32", lambda: _BINARY_TEXT)
    if function is None:
        return None
    data = (ctypes.c_void_p * 3)(arrays[0].ctypes.data, arrays[1].ctypes.data, out.ctypes.data)
    return ForeignCall(function, data, (ctypes.c_int64 * 2)(operation, out.size),
                       rebindable=True)


def _make_elementwise(function, c_operation: int | None = None):
    """A kernel applying ``function`` to strided input views, writing the output once.
    Its ``prepare`` binds the views once and returns a launcher for replays (fuel.jit);
    ``c_operation``: the op's ``binary.c`` operation, for the operands it takes."""
    direct = isinstance(function, np.ufunc)
    writes_output = getattr(function, "writes_output", False)

    def bind(inputs, outputs, layouts):
        out = output(outputs[0], layouts[-1])
        arrays = [operand(s, layout) for s, layout in zip(inputs, layouts)]
        if c_operation is not None:
            foreign = _foreign_binary(c_operation, arrays, out)
            if foreign is not None:
                return foreign
        if writes_output:
            source = view(inputs[0], layouts[0])
            return lambda: function(source, out)
        if direct and out.dtype not in HALF_NUMPY and all(a.dtype not in HALF_NUMPY
                                                          for a in arrays):
            return lambda: function(*arrays, out=out)
        return lambda: out.__setitem__(Ellipsis, function(*[compute(a) for a in arrays]))

    def elementwise(inputs, outputs, layouts, params):
        bind(inputs, outputs, layouts)()

    elementwise.prepare = lambda inputs, outputs, layouts, params: bind(inputs, outputs, layouts)
    elementwise.__qualname__ = f"elementwise[{getattr(function, '__name__', function)}]"
    if c_operation is not None:
        elementwise.revision_source = _BINARY_TEXT
    return elementwise


for _op, _function in UNARY_FUNCTIONS.items():
    KERNELS.add(_op, definition(_op).coverage, _make_elementwise(_function), STRIDED)
for _op, _function in BINARY_FUNCTIONS.items():
    KERNELS.add(_op, definition(_op).coverage,
                _make_elementwise(_function, C_BINARY_OPERATIONS.get(_op)), STRIDED)


def _truncating_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C semantics); division by zero gives 0."""
    safe = np.where(y == 0, 1, y)
    quotient = np.floor_divide(x, safe)
    remainder = np.remainder(x, safe)
    adjust = (remainder != 0) & ((x < 0) ^ (safe < 0))
    return np.where(y == 0, 0, quotient + adjust.astype(quotient.dtype))


def _shift(function):
    """Shifts by a negative amount or by the bit width or more give 0 (-1 for a right shift
    of a negative number); left shifts of signed numbers wrap."""

    def shift(x, y):
        bits = x.dtype.itemsize * 8
        too_far = (y < 0) | (y >= bits)
        amount = np.where(too_far, 0, y).astype(x.dtype)
        if function is np.left_shift and x.dtype.kind == "i":
            unsigned = np.dtype(f"u{x.dtype.itemsize}")
            shifted = np.left_shift(x.view(unsigned), amount.astype(unsigned)).view(x.dtype)
        else:
            shifted = function(x, amount)
        fill = np.zeros((), x.dtype)
        if function is np.right_shift and x.dtype.kind == "i":
            fill = np.where(x < 0, np.array(-1, x.dtype), fill)
        return np.where(too_far, fill, shifted)

    shift.__name__ = function.__name__
    return shift


INVERSE_AND_HYPERBOLIC = {
    OpKind.TAN: np.tan, OpKind.ASIN: np.arcsin, OpKind.ACOS: np.arccos, OpKind.ATAN: np.arctan,
    OpKind.SINH: np.sinh, OpKind.COSH: np.cosh, OpKind.ASINH: np.arcsinh,
    OpKind.ACOSH: np.arccosh, OpKind.ATANH: np.arctanh,
}
INTEGER_BINARY = {
    OpKind.FMOD: np.fmod, OpKind.INT_DIV: _truncating_divide,
    OpKind.BITSHIFT_LEFT: _shift(np.left_shift), OpKind.BITSHIFT_RIGHT: _shift(np.right_shift),
}
for _op, _function in {**INVERSE_AND_HYPERBOLIC, **INTEGER_BINARY}.items():
    KERNELS.add(_op, definition(_op).coverage, _make_elementwise(_function), STRIDED)


@KERNELS.kernel(OpKind.WHERE, definition(OpKind.WHERE).coverage, STRIDED)
@unpacked_output
def where(inputs, outputs, layouts, params):
    condition, a, b = (view(s, layout) for s, layout in zip(inputs, layouts))
    output(outputs[0], layouts[-1])[...] = np.where(condition, a, b)


@KERNELS.kernel(OpKind.CAST, definition(OpKind.CAST).coverage, STRIDED)
@unpacked_output
def cast(inputs, outputs, layouts, params):
    target = params.dtype
    source = cast_source(view(inputs[0], layouts[0]), target)
    if target is dt.float8_e8m0fnu and params.round_mode is not None:
        source = to_float8_e8m0(source, params.saturate, params.round_mode)
    elif params.saturate and target in dt.SATURABLE_DTYPES:
        source = saturate(source, target)
    output(outputs[0], layouts[-1])[...] = source


@KERNELS.kernel(OpKind.CONTIGUOUS, definition(OpKind.CONTIGUOUS).coverage, STRIDED)
@unpacked_output
def strided_copy(inputs, outputs, layouts, params):
    output(outputs[0], layouts[-1])[...] = view(inputs[0], layouts[0])


def _prepare_strided_copy(inputs, outputs, layouts, params):
    """The views made once (a packed dtype's copy unpacks at every launch instead)."""
    if is_packed(outputs[0]) or is_packed(inputs[0]):
        return functools.partial(strided_copy, inputs, outputs, layouts, params)
    from fuel.backends.cpu.convolution_blocked import blocking_copy

    blocking = blocking_copy(inputs, outputs, layouts)  # a blocked chain's end: in C
    if blocking is not None:
        return blocking
    return functools.partial(np.copyto, output(outputs[0], layouts[-1]),
                             view(inputs[0], layouts[0]))


strided_copy.prepare = _prepare_strided_copy


@KERNELS.kernel(OpKind.COPY, definition(OpKind.COPY).coverage, STRIDED)
def copy_to_device(inputs, outputs, layouts, params):
    """Cross-device copy from the CPU: densify on the host, then the destination uploads it."""
    target = outputs[0]
    target.backend.write_from_host(target, np.ascontiguousarray(view(inputs[0], layouts[0])))


_SAME_SIZE = [(a, b) for a in dt.ALL_DTYPES for b in dt.ALL_DTYPES if a.itemsize == b.itemsize]


@KERNELS.kernel(OpKind.BITCAST, _SAME_SIZE, STRIDED)
def bitcast(inputs, outputs, layouts, params):
    x = np.ascontiguousarray(view(inputs[0], layouts[0]))
    output(outputs[0], layouts[-1])[...] = x.view(params.dtype.numpy)
