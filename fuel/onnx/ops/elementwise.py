"""Elementwise ONNX ops: math, comparison, logic, bitwise, casts, Where, Clip, variadic ops."""

from __future__ import annotations

from fuel.frontend.build import make
from fuel.ir import dtype as dt
from fuel.ir.ops import CastParams, definition
from fuel.onnx.context import NodeContext, SequenceValue, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedDType
from fuel.onnx.ops.common import (
    OpKind,
    Tensor,
    binary,
    cast,
    require_float,
    same_binary,
    scalar,
    unary,
    where,
)

UNARY = {
    "Abs": OpKind.ABS, "Neg": OpKind.NEG, "Exp": OpKind.EXP, "Log": OpKind.LOG,
    "Sqrt": OpKind.SQRT, "Reciprocal": OpKind.RECIPROCAL, "Sin": OpKind.SIN, "Cos": OpKind.COS,
    "Tanh": OpKind.TANH, "Sigmoid": OpKind.SIGMOID, "Relu": OpKind.RELU, "Erf": OpKind.ERF,
    "Floor": OpKind.FLOOR, "Ceil": OpKind.CEIL, "Round": OpKind.ROUND, "Sign": OpKind.SIGN,
    "IsNaN": OpKind.ISNAN, "Tan": OpKind.TAN, "Asin": OpKind.ASIN, "Acos": OpKind.ACOS,
    "Atan": OpKind.ATAN, "Sinh": OpKind.SINH, "Cosh": OpKind.COSH, "Asinh": OpKind.ASINH,
    "Acosh": OpKind.ACOSH, "Atanh": OpKind.ATANH,
}
# ONNX defines these for floats only, although fuel's ops keep integers as they are.
ONNX_FLOAT_ONLY = {"Floor", "Ceil", "Round"}
COMPARE = {"Equal": OpKind.EQ, "Less": OpKind.LT, "Greater": OpKind.GT,
           "LessOrEqual": OpKind.LE, "GreaterOrEqual": OpKind.GE}
LOGIC = {"And": OpKind.LOGICAL_AND, "Or": OpKind.LOGICAL_OR, "Xor": OpKind.LOGICAL_XOR}
BITWISE = {"BitwiseAnd": OpKind.BITWISE_AND, "BitwiseOr": OpKind.BITWISE_OR,
           "BitwiseXor": OpKind.BITWISE_XOR}


def _unary_converter(op_type: str, op: OpKind):
    def convert(ctx: NodeContext) -> Tensor:
        x = ctx.input(0)
        if definition(op).float_only or op_type in ONNX_FLOAT_ONLY:
            require_float(x, op_type)
        if x.dtype.is_bool and op_type != "IsNaN":
            raise UnsupportedDType(f"{op_type} does not take bool input")
        if op_type == "IsNaN" and not x.dtype.is_floating:
            return cast(x, dt.bool_) & False
        return unary(op, x)

    return convert


for _name, _op in UNARY.items():
    onnx_op(_name)(_unary_converter(_name, _op))


@onnx_op("Not")
def not_(ctx: NodeContext) -> Tensor:
    return unary(OpKind.LOGICAL_NOT, ctx.input(0))


@onnx_op("BitwiseNot")
def bitwise_not(ctx: NodeContext) -> Tensor:
    return unary(OpKind.BITWISE_NOT, ctx.input(0))


@onnx_op("Identity")
def identity(ctx: NodeContext):
    value = ctx.value(0)
    if isinstance(value, SequenceValue):
        return SequenceValue(list(value.items), value.dtype)
    return value


@onnx_op("IsInf")
def is_inf(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    if not x.dtype.is_floating:
        return cast(x, dt.bool_) & False
    negative = ctx.attr("detect_negative", 1)
    positive = ctx.attr("detect_positive", 1)
    result = (x == float("inf")) if positive else None
    if negative:
        low = x == float("-inf")
        result = low if result is None else result | low
    return result if result is not None else (x != x) & False


def _binary_converter(op: OpKind):
    def convert(ctx: NodeContext) -> Tensor:
        return same_binary(op, ctx.input(0), ctx.input(1))

    return convert


for _name, _op in {"Add": OpKind.ADD, "Sub": OpKind.SUB, "Mul": OpKind.MUL,
                   **COMPARE, **BITWISE}.items():
    onnx_op(_name)(_binary_converter(_op))


def _logic_converter(op: OpKind):
    def convert(ctx: NodeContext) -> Tensor:
        a, b = ctx.input(0), ctx.input(1)
        if not a.dtype.is_bool or not b.dtype.is_bool:
            raise UnsupportedDType("logical ops take bool inputs")
        return binary(op, a, b)

    return convert


for _name, _op in LOGIC.items():
    onnx_op(_name)(_logic_converter(_op))


@onnx_op("Div")
def div(ctx: NodeContext) -> Tensor:
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype is not b.dtype:
        raise OnnxError(f"operands have different dtypes {a.dtype.name} and {b.dtype.name}")
    if a.dtype.is_integer:
        return binary(OpKind.INT_DIV, a, b)
    return binary(OpKind.DIV, a, b)


@onnx_op("Mod")
def mod(ctx: NodeContext) -> Tensor:
    a, b = ctx.input(0), ctx.input(1)
    if ctx.attr("fmod", 0):
        return same_binary(OpKind.FMOD, a, b)
    return same_binary(OpKind.REMAINDER, a, b)


@onnx_op("Pow")
def pow_(ctx: NodeContext) -> Tensor:
    base, exponent = ctx.input(0), ctx.input(1)
    if base.dtype.is_floating:
        return binary(OpKind.POW, base, cast(exponent, base.dtype))
    if exponent.dtype.is_floating:
        wide = binary(OpKind.POW, cast(base, dt.float64), cast(exponent, dt.float64))
        return cast(wide, base.dtype)
    return binary(OpKind.POW, base, cast(exponent, base.dtype))


@onnx_op("BitShift")
def bit_shift(ctx: NodeContext) -> Tensor:
    direction = ctx.attr("direction", "")
    op = {"LEFT": OpKind.BITSHIFT_LEFT, "RIGHT": OpKind.BITSHIFT_RIGHT}.get(direction)
    if op is None:
        raise OnnxError(f"direction must be LEFT or RIGHT, got {direction!r}")
    return same_binary(op, ctx.input(0), ctx.input(1))


def _fold(op: OpKind):
    def convert(ctx: NodeContext) -> Tensor:
        tensors = [ctx.input(i) for i in range(ctx.num_inputs) if ctx.has(i)]
        result = tensors[0]
        for other in tensors[1:]:
            result = same_binary(op, result, other)
        if len(tensors) == 1:
            result = result + 0 if not result.dtype.is_bool else result
        return result

    return convert


onnx_op("Max")(_fold(OpKind.MAXIMUM))
onnx_op("Min")(_fold(OpKind.MINIMUM))
onnx_op("Sum")(_fold(OpKind.ADD))


@onnx_op("Mean")
def mean(ctx: NodeContext) -> Tensor:
    total = _fold(OpKind.ADD)(ctx)
    count = sum(1 for i in range(ctx.num_inputs) if ctx.has(i))
    return total / scalar(count, total)


@onnx_op("Where")
def where_(ctx: NodeContext) -> Tensor:
    condition, a, b = ctx.input(0), ctx.input(1), ctx.input(2)
    if a.dtype is not b.dtype:
        raise OnnxError(f"branches have different dtypes {a.dtype.name} and {b.dtype.name}")
    return where(condition, a, b, dtype=a.dtype)


@onnx_op("Clip")
def clip(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    if ctx.opset < 11:
        low, high = ctx.attr("min"), ctx.attr("max")
        low_t = scalar(low, x) if low is not None else None
        high_t = scalar(high, x) if high is not None else None
    else:
        low_t, high_t = ctx.optional(1), ctx.optional(2)
    result = x
    if low_t is not None:
        result = same_binary(OpKind.MAXIMUM, result, cast(low_t, x.dtype))
    if high_t is not None:
        result = same_binary(OpKind.MINIMUM, result, cast(high_t, x.dtype))
    return result if result is not x else x + 0


@onnx_op("Cast")
def cast_(ctx: NodeContext) -> Tensor:
    target = ctx.elem_dtype("to")
    if target is None:
        raise OnnxError("Cast needs the 'to' attribute")
    return _cast_to(ctx.input(0), target, bool(ctx.attr("saturate", 1)),
                    ctx.attr("round_mode", "up"))


@onnx_op("CastLike")
def cast_like(ctx: NodeContext) -> Tensor:
    return _cast_to(ctx.input(0), ctx.input(1).dtype, bool(ctx.attr("saturate", 1)),
                    ctx.attr("round_mode", "up"))


def _cast_to(x: Tensor, target, saturate: bool = True, round_mode: str = "up") -> Tensor:
    """ONNX Cast: floats to integers truncate toward zero (NaN and out-of-range values have no
    defined result); numbers to bool test for nonzero; float8 targets clamp to their finite
    range when ``saturate``; float8_e8m0fnu rounds by ``round_mode`` (ONNX's default: up)."""
    if x.dtype is target:
        return x
    params = CastParams(target, saturate and target in dt.SATURABLE_DTYPES,
                        round_mode if target is dt.float8_e8m0fnu else None)
    return make(OpKind.CAST, (x._node,), params)


@onnx_op("Binarizer", domain="ai.onnx.ml")
def binarizer(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    threshold = ctx.attr("threshold", 0.0)
    return where(x > scalar(threshold, x), 1, 0, dtype=x.dtype)
