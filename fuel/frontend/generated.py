"""Tensor methods and functions of the elementwise ops, generated from the op registry
(``fuel/ir/ops.py``) by ``python -m fuel.frontend.generate``. Do not edit by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuel.frontend.base import TensorBase
from fuel.frontend.build import at_user_line
from fuel.frontend.elementwise import binary, tensor_operand, unary
from fuel.ir.ops import OpKind

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

class GeneratedMethods:
    """Tensor methods of the elementwise ops, one per op record."""

    __slots__ = ()

    @at_user_line
    def exp(self) -> Self:
        """e to the x."""
        return unary(OpKind.EXP, self)

    @at_user_line
    def expm1(self) -> Self:
        """exp(x) - 1, accurate near 0."""
        return unary(OpKind.EXPM1, self)

    @at_user_line
    def log(self) -> Self:
        """Natural logarithm."""
        return unary(OpKind.LOG, self)

    @at_user_line
    def log1p(self) -> Self:
        """log(1 + x), accurate near 0."""
        return unary(OpKind.LOG1P, self)

    @at_user_line
    def sqrt(self) -> Self:
        """Square root."""
        return unary(OpKind.SQRT, self)

    @at_user_line
    def rsqrt(self) -> Self:
        """1 / sqrt(x)."""
        return unary(OpKind.RSQRT, self)

    @at_user_line
    def reciprocal(self) -> Self:
        """1 / x."""
        return unary(OpKind.RECIPROCAL, self)

    @at_user_line
    def sin(self) -> Self:
        """Sine."""
        return unary(OpKind.SIN, self)

    @at_user_line
    def cos(self) -> Self:
        """Cosine."""
        return unary(OpKind.COS, self)

    @at_user_line
    def tan(self) -> Self:
        """Tangent."""
        return unary(OpKind.TAN, self)

    @at_user_line
    def asin(self) -> Self:
        """Arcsine."""
        return unary(OpKind.ASIN, self)

    @at_user_line
    def acos(self) -> Self:
        """Arccosine."""
        return unary(OpKind.ACOS, self)

    @at_user_line
    def atan(self) -> Self:
        """Arctangent."""
        return unary(OpKind.ATAN, self)

    @at_user_line
    def sinh(self) -> Self:
        """Hyperbolic sine."""
        return unary(OpKind.SINH, self)

    @at_user_line
    def cosh(self) -> Self:
        """Hyperbolic cosine."""
        return unary(OpKind.COSH, self)

    @at_user_line
    def tanh(self) -> Self:
        """Hyperbolic tangent."""
        return unary(OpKind.TANH, self)

    @at_user_line
    def asinh(self) -> Self:
        """Inverse hyperbolic sine."""
        return unary(OpKind.ASINH, self)

    @at_user_line
    def acosh(self) -> Self:
        """Inverse hyperbolic cosine."""
        return unary(OpKind.ACOSH, self)

    @at_user_line
    def atanh(self) -> Self:
        """Inverse hyperbolic tangent."""
        return unary(OpKind.ATANH, self)

    @at_user_line
    def erf(self) -> Self:
        """The error function."""
        return unary(OpKind.ERF, self)

    @at_user_line
    def sigmoid(self) -> Self:
        """1 / (1 + exp(-x))."""
        return unary(OpKind.SIGMOID, self)

    @at_user_line
    def silu(self) -> Self:
        """x * sigmoid(x)."""
        return unary(OpKind.SILU, self)

    @at_user_line
    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6."""
        return unary(OpKind.HARDSWISH, self)

    @at_user_line
    def softplus(self) -> Self:
        """log(1 + exp(x)), and x itself above 20 (torch's threshold)."""
        return unary(OpKind.SOFTPLUS, self)

    @at_user_line
    def mish(self) -> Self:
        """x * tanh(softplus(x))."""
        return unary(OpKind.MISH, self)

    @at_user_line
    def neg(self) -> Self:
        """-x."""
        return unary(OpKind.NEG, self)

    @at_user_line
    def abs(self) -> Self:
        """|x|."""
        return unary(OpKind.ABS, self)

    @at_user_line
    def square(self) -> Self:
        """x * x."""
        return unary(OpKind.SQUARE, self)

    @at_user_line
    def relu(self) -> Self:
        """max(x, 0)."""
        return unary(OpKind.RELU, self)

    @at_user_line
    def floor(self) -> Self:
        """Round down (integers unchanged)."""
        return unary(OpKind.FLOOR, self)

    @at_user_line
    def ceil(self) -> Self:
        """Round up (integers unchanged)."""
        return unary(OpKind.CEIL, self)

    @at_user_line
    def round(self) -> Self:
        """Round half to even (integers unchanged)."""
        return unary(OpKind.ROUND, self)

    @at_user_line
    def sign(self) -> Self:
        """-1, 0 or 1."""
        return unary(OpKind.SIGN, self)

    @at_user_line
    def logical_not(self) -> Self:
        """not x, as bool."""
        return unary(OpKind.LOGICAL_NOT, self)

    @at_user_line
    def isnan(self) -> Self:
        """Whether x is NaN."""
        return unary(OpKind.ISNAN, self)

    @at_user_line
    def bitwise_not(self) -> Self:
        """Bitwise inversion."""
        return unary(OpKind.BITWISE_NOT, self)

    @at_user_line
    def add(self, other) -> Self:
        """a + b."""
        return binary(OpKind.ADD, self, other)

    @at_user_line
    def sub(self, other) -> Self:
        """a - b."""
        return binary(OpKind.SUB, self, other)

    @at_user_line
    def mul(self, other) -> Self:
        """a * b."""
        return binary(OpKind.MUL, self, other)

    @at_user_line
    def div(self, other) -> Self:
        """a / b (true division)."""
        return binary(OpKind.DIV, self, other)

    @at_user_line
    def remainder(self, other) -> Self:
        """Python's remainder: the sign of the divisor."""
        return binary(OpKind.REMAINDER, self, other)

    @at_user_line
    def fmod(self, other) -> Self:
        """C's fmod: the sign of the dividend."""
        return binary(OpKind.FMOD, self, other)

    @at_user_line
    def pow(self, other) -> Self:
        """a ** b."""
        return binary(OpKind.POW, self, other)

    @at_user_line
    def maximum(self, other) -> Self:
        """Elementwise maximum (NaN propagates)."""
        return binary(OpKind.MAXIMUM, self, other)

    @at_user_line
    def minimum(self, other) -> Self:
        """Elementwise minimum (NaN propagates)."""
        return binary(OpKind.MINIMUM, self, other)

    @at_user_line
    def eq(self, other) -> Self:
        """a == b."""
        return binary(OpKind.EQ, self, other)

    @at_user_line
    def ne(self, other) -> Self:
        """a != b."""
        return binary(OpKind.NE, self, other)

    @at_user_line
    def lt(self, other) -> Self:
        """a < b."""
        return binary(OpKind.LT, self, other)

    @at_user_line
    def le(self, other) -> Self:
        """a <= b."""
        return binary(OpKind.LE, self, other)

    @at_user_line
    def gt(self, other) -> Self:
        """a > b."""
        return binary(OpKind.GT, self, other)

    @at_user_line
    def ge(self, other) -> Self:
        """a >= b."""
        return binary(OpKind.GE, self, other)

    @at_user_line
    def logical_and(self, other) -> Self:
        """a and b."""
        return binary(OpKind.LOGICAL_AND, self, other)

    @at_user_line
    def logical_or(self, other) -> Self:
        """a or b."""
        return binary(OpKind.LOGICAL_OR, self, other)

    @at_user_line
    def logical_xor(self, other) -> Self:
        """a xor b."""
        return binary(OpKind.LOGICAL_XOR, self, other)

    @at_user_line
    def bitwise_and(self, other) -> Self:
        """a & b."""
        return binary(OpKind.BITWISE_AND, self, other)

    @at_user_line
    def bitwise_or(self, other) -> Self:
        """a | b."""
        return binary(OpKind.BITWISE_OR, self, other)

    @at_user_line
    def bitwise_xor(self, other) -> Self:
        """a ^ b."""
        return binary(OpKind.BITWISE_XOR, self, other)

    @at_user_line
    def bitwise_left_shift(self, other) -> Self:
        """a << b (0 past the width)."""
        return binary(OpKind.BITSHIFT_LEFT, self, other)

    @at_user_line
    def bitwise_right_shift(self, other) -> Self:
        """a >> b (arithmetic for signed)."""
        return binary(OpKind.BITSHIFT_RIGHT, self, other)


@at_user_line
def exp(x: TensorBase) -> TensorBase:
    """e to the x."""
    return unary(OpKind.EXP, tensor_operand(x, "exp"))


@at_user_line
def expm1(x: TensorBase) -> TensorBase:
    """exp(x) - 1, accurate near 0."""
    return unary(OpKind.EXPM1, tensor_operand(x, "expm1"))


@at_user_line
def log(x: TensorBase) -> TensorBase:
    """Natural logarithm."""
    return unary(OpKind.LOG, tensor_operand(x, "log"))


@at_user_line
def log1p(x: TensorBase) -> TensorBase:
    """log(1 + x), accurate near 0."""
    return unary(OpKind.LOG1P, tensor_operand(x, "log1p"))


@at_user_line
def sqrt(x: TensorBase) -> TensorBase:
    """Square root."""
    return unary(OpKind.SQRT, tensor_operand(x, "sqrt"))


@at_user_line
def rsqrt(x: TensorBase) -> TensorBase:
    """1 / sqrt(x)."""
    return unary(OpKind.RSQRT, tensor_operand(x, "rsqrt"))


@at_user_line
def reciprocal(x: TensorBase) -> TensorBase:
    """1 / x."""
    return unary(OpKind.RECIPROCAL, tensor_operand(x, "reciprocal"))


@at_user_line
def sin(x: TensorBase) -> TensorBase:
    """Sine."""
    return unary(OpKind.SIN, tensor_operand(x, "sin"))


@at_user_line
def cos(x: TensorBase) -> TensorBase:
    """Cosine."""
    return unary(OpKind.COS, tensor_operand(x, "cos"))


@at_user_line
def tan(x: TensorBase) -> TensorBase:
    """Tangent."""
    return unary(OpKind.TAN, tensor_operand(x, "tan"))


@at_user_line
def asin(x: TensorBase) -> TensorBase:
    """Arcsine."""
    return unary(OpKind.ASIN, tensor_operand(x, "asin"))


@at_user_line
def acos(x: TensorBase) -> TensorBase:
    """Arccosine."""
    return unary(OpKind.ACOS, tensor_operand(x, "acos"))


@at_user_line
def atan(x: TensorBase) -> TensorBase:
    """Arctangent."""
    return unary(OpKind.ATAN, tensor_operand(x, "atan"))


@at_user_line
def sinh(x: TensorBase) -> TensorBase:
    """Hyperbolic sine."""
    return unary(OpKind.SINH, tensor_operand(x, "sinh"))


@at_user_line
def cosh(x: TensorBase) -> TensorBase:
    """Hyperbolic cosine."""
    return unary(OpKind.COSH, tensor_operand(x, "cosh"))


@at_user_line
def tanh(x: TensorBase) -> TensorBase:
    """Hyperbolic tangent."""
    return unary(OpKind.TANH, tensor_operand(x, "tanh"))


@at_user_line
def asinh(x: TensorBase) -> TensorBase:
    """Inverse hyperbolic sine."""
    return unary(OpKind.ASINH, tensor_operand(x, "asinh"))


@at_user_line
def acosh(x: TensorBase) -> TensorBase:
    """Inverse hyperbolic cosine."""
    return unary(OpKind.ACOSH, tensor_operand(x, "acosh"))


@at_user_line
def atanh(x: TensorBase) -> TensorBase:
    """Inverse hyperbolic tangent."""
    return unary(OpKind.ATANH, tensor_operand(x, "atanh"))


@at_user_line
def erf(x: TensorBase) -> TensorBase:
    """The error function."""
    return unary(OpKind.ERF, tensor_operand(x, "erf"))


@at_user_line
def sigmoid(x: TensorBase) -> TensorBase:
    """1 / (1 + exp(-x))."""
    return unary(OpKind.SIGMOID, tensor_operand(x, "sigmoid"))


@at_user_line
def silu(x: TensorBase) -> TensorBase:
    """x * sigmoid(x)."""
    return unary(OpKind.SILU, tensor_operand(x, "silu"))


@at_user_line
def hardswish(x: TensorBase) -> TensorBase:
    """x * relu6(x + 3) / 6."""
    return unary(OpKind.HARDSWISH, tensor_operand(x, "hardswish"))


@at_user_line
def softplus(x: TensorBase) -> TensorBase:
    """log(1 + exp(x)), and x itself above 20 (torch's threshold)."""
    return unary(OpKind.SOFTPLUS, tensor_operand(x, "softplus"))


@at_user_line
def mish(x: TensorBase) -> TensorBase:
    """x * tanh(softplus(x))."""
    return unary(OpKind.MISH, tensor_operand(x, "mish"))


@at_user_line
def neg(x: TensorBase) -> TensorBase:
    """-x."""
    return unary(OpKind.NEG, tensor_operand(x, "neg"))


@at_user_line
def abs(x: TensorBase) -> TensorBase:
    """|x|."""
    return unary(OpKind.ABS, tensor_operand(x, "abs"))


@at_user_line
def square(x: TensorBase) -> TensorBase:
    """x * x."""
    return unary(OpKind.SQUARE, tensor_operand(x, "square"))


@at_user_line
def relu(x: TensorBase) -> TensorBase:
    """max(x, 0)."""
    return unary(OpKind.RELU, tensor_operand(x, "relu"))


@at_user_line
def floor(x: TensorBase) -> TensorBase:
    """Round down (integers unchanged)."""
    return unary(OpKind.FLOOR, tensor_operand(x, "floor"))


@at_user_line
def ceil(x: TensorBase) -> TensorBase:
    """Round up (integers unchanged)."""
    return unary(OpKind.CEIL, tensor_operand(x, "ceil"))


@at_user_line
def round(x: TensorBase) -> TensorBase:
    """Round half to even (integers unchanged)."""
    return unary(OpKind.ROUND, tensor_operand(x, "round"))


@at_user_line
def sign(x: TensorBase) -> TensorBase:
    """-1, 0 or 1."""
    return unary(OpKind.SIGN, tensor_operand(x, "sign"))


@at_user_line
def logical_not(x: TensorBase) -> TensorBase:
    """not x, as bool."""
    return unary(OpKind.LOGICAL_NOT, tensor_operand(x, "logical_not"))


@at_user_line
def isnan(x: TensorBase) -> TensorBase:
    """Whether x is NaN."""
    return unary(OpKind.ISNAN, tensor_operand(x, "isnan"))


@at_user_line
def bitwise_not(x: TensorBase) -> TensorBase:
    """Bitwise inversion."""
    return unary(OpKind.BITWISE_NOT, tensor_operand(x, "bitwise_not"))


@at_user_line
def add(a, b) -> TensorBase:
    """a + b."""
    return binary(OpKind.ADD, a, b)


@at_user_line
def sub(a, b) -> TensorBase:
    """a - b."""
    return binary(OpKind.SUB, a, b)


@at_user_line
def mul(a, b) -> TensorBase:
    """a * b."""
    return binary(OpKind.MUL, a, b)


@at_user_line
def div(a, b) -> TensorBase:
    """a / b (true division)."""
    return binary(OpKind.DIV, a, b)


@at_user_line
def remainder(a, b) -> TensorBase:
    """Python's remainder: the sign of the divisor."""
    return binary(OpKind.REMAINDER, a, b)


@at_user_line
def fmod(a, b) -> TensorBase:
    """C's fmod: the sign of the dividend."""
    return binary(OpKind.FMOD, a, b)


@at_user_line
def pow(a, b) -> TensorBase:
    """a ** b."""
    return binary(OpKind.POW, a, b)


@at_user_line
def maximum(a, b) -> TensorBase:
    """Elementwise maximum (NaN propagates)."""
    return binary(OpKind.MAXIMUM, a, b)


@at_user_line
def minimum(a, b) -> TensorBase:
    """Elementwise minimum (NaN propagates)."""
    return binary(OpKind.MINIMUM, a, b)


@at_user_line
def eq(a, b) -> TensorBase:
    """a == b."""
    return binary(OpKind.EQ, a, b)


@at_user_line
def ne(a, b) -> TensorBase:
    """a != b."""
    return binary(OpKind.NE, a, b)


@at_user_line
def lt(a, b) -> TensorBase:
    """a < b."""
    return binary(OpKind.LT, a, b)


@at_user_line
def le(a, b) -> TensorBase:
    """a <= b."""
    return binary(OpKind.LE, a, b)


@at_user_line
def gt(a, b) -> TensorBase:
    """a > b."""
    return binary(OpKind.GT, a, b)


@at_user_line
def ge(a, b) -> TensorBase:
    """a >= b."""
    return binary(OpKind.GE, a, b)


@at_user_line
def logical_and(a, b) -> TensorBase:
    """a and b."""
    return binary(OpKind.LOGICAL_AND, a, b)


@at_user_line
def logical_or(a, b) -> TensorBase:
    """a or b."""
    return binary(OpKind.LOGICAL_OR, a, b)


@at_user_line
def logical_xor(a, b) -> TensorBase:
    """a xor b."""
    return binary(OpKind.LOGICAL_XOR, a, b)


@at_user_line
def bitwise_and(a, b) -> TensorBase:
    """a & b."""
    return binary(OpKind.BITWISE_AND, a, b)


@at_user_line
def bitwise_or(a, b) -> TensorBase:
    """a | b."""
    return binary(OpKind.BITWISE_OR, a, b)


@at_user_line
def bitwise_xor(a, b) -> TensorBase:
    """a ^ b."""
    return binary(OpKind.BITWISE_XOR, a, b)


@at_user_line
def bitwise_left_shift(a, b) -> TensorBase:
    """a << b (0 past the width)."""
    return binary(OpKind.BITSHIFT_LEFT, a, b)


@at_user_line
def bitwise_right_shift(a, b) -> TensorBase:
    """a >> b (arithmetic for signed)."""
    return binary(OpKind.BITSHIFT_RIGHT, a, b)


FUNCTIONS = (
    "exp",
    "expm1",
    "log",
    "log1p",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "sigmoid",
    "silu",
    "hardswish",
    "softplus",
    "mish",
    "neg",
    "abs",
    "square",
    "relu",
    "floor",
    "ceil",
    "round",
    "sign",
    "logical_not",
    "isnan",
    "bitwise_not",
    "add",
    "sub",
    "mul",
    "div",
    "remainder",
    "fmod",
    "pow",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
)
__all__ = list(FUNCTIONS)
FUNCTIONAL = (
    "hardswish",
    "mish",
    "relu",
    "sigmoid",
    "silu",
    "softplus",
    "tanh",
)
