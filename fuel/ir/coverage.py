"""The dtype combinations each elementwise op is defined for: op metadata that every backend
registers against, so a graph that runs on one backend runs the same on another."""

from __future__ import annotations

from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

BITWISE_DTYPES = (dt.bool_,) + dt.INTEGER_DTYPES


def combos(dtypes, arity: int, out=None) -> list[tuple]:
    """Dtype tuples ``(T,) * arity + (out or T,)`` for every T in ``dtypes``."""
    return [(d,) * arity + ((out or d),) for d in dtypes]


UNARY_DTYPES = {
    **{op: combos(dt.FLOAT_DTYPES, 1) for op in (
        OpKind.EXP, OpKind.LOG, OpKind.SQRT, OpKind.RSQRT, OpKind.RECIPROCAL, OpKind.SIN,
        OpKind.COS, OpKind.TANH, OpKind.SIGMOID, OpKind.GELU, OpKind.GELU_TANH, OpKind.SILU,
        OpKind.ERF)},
    **{op: combos(dt.NUMERIC_DTYPES, 1) for op in (
        OpKind.NEG, OpKind.ABS, OpKind.SQUARE, OpKind.RELU, OpKind.FLOOR, OpKind.CEIL,
        OpKind.ROUND, OpKind.SIGN)},
    OpKind.LOGICAL_NOT: combos(dt.ALL_DTYPES, 1, dt.bool_),
    OpKind.ISNAN: combos(dt.ALL_DTYPES, 1, dt.bool_),
    OpKind.BITWISE_NOT: combos(BITWISE_DTYPES, 1),
}

BINARY_DTYPES = {
    **{op: combos(dt.NUMERIC_DTYPES, 2) for op in (
        OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.REMAINDER, OpKind.POW, OpKind.MAXIMUM,
        OpKind.MINIMUM)},
    OpKind.DIV: combos(dt.FLOAT_DTYPES, 2),
    **{op: combos(dt.ALL_DTYPES, 2, dt.bool_) for op in (
        OpKind.EQ, OpKind.NE, OpKind.LT, OpKind.LE, OpKind.GT, OpKind.GE, OpKind.LOGICAL_AND,
        OpKind.LOGICAL_OR, OpKind.LOGICAL_XOR)},
    **{op: combos(BITWISE_DTYPES, 2) for op in (
        OpKind.BITWISE_AND, OpKind.BITWISE_OR, OpKind.BITWISE_XOR)},
}
