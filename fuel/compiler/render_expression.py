"""The language-neutral half of every renderer: which ops render, and each IR value as a C-family
expression (C, OpenCL C) over earlier values ``v<index>`` and loads ``in<k>[...]``.

A renderer supplies a ``Dialect`` (its type names, how math functions are spelled, its round
function and integer-literal suffix); the walk and the semantics are shared, so one op
definition (the registry's scalar expression, lowered by ``KernelBuilder``) renders the same
everywhere: integer division and remainder by zero give 0, shifts past the width give 0 (or -1),
maximum and minimum propagate NaN, round is half to even, NumPy's float-to-unsigned casts go
through int64. A language outside the C family (WGSL) writes its own walk over the same tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fuel.compiler.kernel_ir import LoopKernel, Value, reduction
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType

# Unary float functions (the op's name is the function's in <math.h> and OpenCL C).
MATH_FUNCTIONS = frozenset({
    "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
})
ARITHMETIC = {"add": "+", "sub": "-", "mul": "*"}
COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
INTEGER_ONLY = frozenset({"int_div", "bitshift_left", "bitshift_right", "bitwise_not",
                          "bitwise_and", "bitwise_or", "bitwise_xor"})
FLOAT_ONLY = MATH_FUNCTIONS | {"div", "pow"}
RENDERED_OPS = (MATH_FUNCTIONS | frozenset(ARITHMETIC) | frozenset(COMPARISONS)
                | frozenset(BITWISE) | {
                    "neg", "abs", "floor", "ceil", "round", "sign", "logical_not", "isnan",
                    "bitwise_not", "div", "remainder", "fmod", "int_div", "pow", "maximum",
                    "minimum", "logical_and", "logical_or", "logical_xor", "bitshift_left",
                    "bitshift_right", "where", "cast", "load", "constant"})
# The dtypes computed in float (the half types are storage only).
FLOAT_COMPUTED = frozenset({dt.float32, dt.float16, dt.bfloat16})
# The signed integer types' unsigned twins (negation and left shifts wrap through them).
UNSIGNED_OF = {dt.uint8: dt.uint8, dt.int8: dt.uint8, dt.int16: dt.uint16, dt.int32: dt.uint32,
               dt.int64: dt.uint64}


@dataclass(frozen=True)
class Dialect:
    """How one C-family language spells what the shared walk writes."""

    types: Mapping[DType, str]  # the type a value of each dtype is computed in
    unsigned_types: Mapping[DType, str]  # names of uint8/16/32/64
    float_suffix: str  # appended to a math function's name for float32 ("" where overloaded)
    round_function: str  # round half to even in the current rounding mode
    integer_suffix: str  # of 64-bit integer literals

    def function(self, name: str, dtype: DType) -> str:
        """A math function's name for arguments of ``dtype`` (half types compute in float)."""
        return name + (self.float_suffix if dtype in FLOAT_COMPUTED else "")

    def unsigned(self, dtype: DType) -> str:
        return self.unsigned_types[UNSIGNED_OF[dtype]]


def renders(op: str, dtypes: tuple[DType, ...], rendered_dtypes) -> bool:
    """Whether ``op`` over ``dtypes`` (inputs then output) renders, given the dtypes a
    renderer has types for."""
    if op not in RENDERED_OPS or any(d not in rendered_dtypes for d in dtypes):
        return False
    operand = dtypes[1] if op == "where" else dtypes[0]
    if op in FLOAT_ONLY and not operand.is_floating:
        return False
    if op in INTEGER_ONLY and operand.is_floating:
        return False
    return True


def element_dependencies(kernel: LoopKernel, roots: list[int], per_row: list[bool]) -> list[int]:
    """The per-element values ``roots`` depend on, in order (per-row ones are computed once
    per row, before)."""
    needed: set[int] = set()
    stack = [r for r in roots if not per_row[r]]
    while stack:
        index = stack.pop()
        if index in needed:
            continue
        needed.add(index)
        stack += [a for a in kernel.values[index].args if not per_row[a]]
    return sorted(needed)


def identity(op: str, dtype: DType, dialect: Dialect) -> str:
    """The initial accumulator of reduction ``op`` folding values of ``dtype`` (its
    ``kernel_ir.Reduction.identity``)."""
    found = reduction(op).identity
    if found not in ("lowest", "highest"):
        return "0" if found == "zero" else "1"
    lowest = found == "lowest"
    if dtype.is_floating:
        return "(-INFINITY)" if lowest else "INFINITY"
    if dtype.is_bool:
        return "0" if lowest else "1"
    info = np.iinfo(dtype.numpy)
    bound = int(info.min if lowest else info.max)
    if bound == -(2 ** 63):
        return f"(-9223372036854775807{dialect.integer_suffix} - 1)"
    return f"({bound}{dialect.integer_suffix})"


# How a C-family language spells each ``Reduction.combine`` of an accumulator and an element
# (max and min: the comparison; a NaN element wins where the reduction keeps NaN).
C_COMBINES = {"add": "{acc} + {x}", "mul": "{acc} * {x}", "and": "({acc} && {x})",
              "or": "({acc} || {x})"}
COMPARISONS_OF = {"max": ">", "min": "<"}


def combine(op: str, accumulator: str, element: str) -> str:
    """The accumulator of reduction ``op`` folded with one element."""
    fold = reduction(op)
    comparison = COMPARISONS_OF.get(fold.combine)
    if comparison is None:
        return C_COMBINES[fold.combine].format(acc=accumulator, x=element)
    nan = f" || {element} != {element}" if fold.keeps_nan else ""
    return f"(({element} {comparison} {accumulator}{nan}) ? {element} : {accumulator})"


def index_wins(op: str, dtype: DType, value: str, index: str, best: str, best_index: str
               ) -> str:
    """Whether (value, index) replaces the (best, best_index) of argmax/argmin: a larger
    (smaller) value, an equal one at a lower index, or a first NaN. An index of -1 marks an
    empty fold (it never wins; anything beats it)."""
    fold = reduction(op)
    better = COMPARISONS_OF[fold.combine]
    wins = f"({value} {better} {best} || ({value} == {best} && {index} < {best_index}))"
    if dtype.is_floating and fold.keeps_nan:
        wins = (f"(({best} != {best}) ? ({value} != {value} && {index} < {best_index}) : "
                f"({value} != {value} || {wins}))")
    return f"({index} >= 0 && ({best_index} < 0 || {wins}))"


def divided(op: str, accumulator: str, length: str) -> str:
    """The result of reduction ``op`` from its accumulator: divided by the row's ``length``
    (an expression already of the accumulator's type) where the reduction divides (mean)."""
    return f"{accumulator} / {length}" if reduction(op).divides else accumulator


def literal(number, dtype: DType, dialect: Dialect) -> str:
    """A constant of ``dtype`` (floats exactly, as hexadecimal literals)."""
    ctype = dialect.types[dtype]
    if dtype.is_floating:
        number = float(number)
        if number != number:
            text = "NAN"
        elif number in (float("inf"), float("-inf")):
            text = "INFINITY" if number > 0 else "(-INFINITY)"
        else:
            text = number.hex()
        return f"(({ctype}){text})"
    if dtype.is_bool:
        return "true" if number else "false"
    if int(number) == -(2 ** 63):  # (its magnitude is no 64-bit signed literal)
        return f"(({ctype})(-9223372036854775807{dialect.integer_suffix} - 1))"
    return f"(({ctype}){int(number)}{dialect.integer_suffix})"


def load_index(value: Value, patterns: list[str]) -> str:
    """Where a load reads in the innermost loop: dense ``i``, broadcast ``0``, strided, or
    decoded (``at<k>``, from a row of several dims)."""
    return {"dense": "i", "broadcast": "0", "strided": f"i * step{value.load}",
            "decoded": f"at{value.load}"}[patterns[value.load]]


def render_value(kernel: LoopKernel, value: Value, patterns: list[str], dialect: Dialect) -> str:
    """The expression of one value, over earlier values ``v<index>`` and loads ``in<k>``."""
    op = value.op
    if op == "load":
        return f"in{value.load}[{load_index(value, patterns)}]"
    if op == "constant":
        return literal(value.constant, value.dtype, dialect)
    args = [f"v{a}" for a in value.args]
    arg_dtypes = [kernel.values[a].dtype for a in value.args]
    ctype = dialect.types[value.dtype]
    first = arg_dtypes[0] if arg_dtypes else value.dtype
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if op == "cast":
        return _cast(a, first, value.dtype, dialect)
    if op == "where":
        return f"({a} ? {b} : {args[2]})"
    if op in MATH_FUNCTIONS:
        return f"{dialect.function(op, first)}({a})"
    if op in ARITHMETIC:
        return f"({ctype})({a} {ARITHMETIC[op]} {b})"
    if op in COMPARISONS:
        return f"({a} {COMPARISONS[op]} {b})"
    if op in BITWISE:
        return f"({ctype})({a} {BITWISE[op]} {b})"
    return _SPECIAL[op](a, b, first, ctype, dialect)


def _cast(a: str, source: DType, target: DType, dialect: Dialect) -> str:
    if target.is_bool:
        return f"({a} != 0)"
    if source.is_floating and target.kind == "u":  # through int64, as NumPy on x86
        return f"({dialect.types[target]})({dialect.types[dt.int64]})({a})"
    return f"({dialect.types[target]})({a})"


def _negate(a: str, dtype: DType, ctype: str, dialect: Dialect) -> str:
    if dtype.is_floating:
        return f"(-{a})"
    return f"({ctype})(0u - ({dialect.unsigned(dtype)}){a})"  # wraps, as NumPy


def _shift_left(a, b, dtype, ctype, dialect) -> str:
    bits = dtype.itemsize * 8
    return (f"(({b} < 0 || {b} >= {bits}) ? ({ctype})0 : "
            f"({ctype})(({dialect.unsigned(dtype)}){a} << {b}))")


def _shift_right(a, b, dtype, ctype, dialect) -> str:
    bits = dtype.itemsize * 8
    fill = f"({a} < 0 ? ({ctype})-1 : ({ctype})0)" if dtype.kind == "i" else f"({ctype})0"
    return f"(({b} < 0 || {b} >= {bits}) ? {fill} : ({ctype})({a} >> {b}))"


def _remainder(a, b, dtype, ctype, dialect) -> str:
    if dtype.is_floating:
        return f"fuel_remainder_{ctype}({a}, {b})"
    if dtype.kind == "u":
        return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} % {b}))"
    return (f"(({b} == 0 || {b} == -1) ? ({ctype})0 : ({ctype})((({a} % {b}) != 0 && "
            f"((({a} % {b}) < 0) != ({b} < 0))) ? ({a} % {b}) + {b} : ({a} % {b})))")


def _fmod(a, b, dtype, ctype, dialect) -> str:
    if dtype.is_floating:
        return f"{dialect.function('fmod', dtype)}({a}, {b})"
    if dtype.kind == "u":
        return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} % {b}))"
    return f"(({b} == 0 || {b} == -1) ? ({ctype})0 : ({ctype})({a} % {b}))"


def _int_div(a, b, dtype, ctype, dialect) -> str:
    if dtype.kind == "u":
        return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} / {b}))"
    return (f"({b} == 0 ? ({ctype})0 : {b} == -1 ? {_negate(a, dtype, ctype, dialect)} "
            f": ({ctype})({a} / {b}))")


def _extreme(comparison: str):
    def render(a, b, dtype, ctype, dialect) -> str:
        if dtype.is_floating:  # NaN in either operand propagates
            return f"(({a} {comparison} {b} || {a} != {a}) ? {a} : {b})"
        return f"({a} {comparison} {b} ? {a} : {b})"
    return render


def _sign(a, b, dtype, ctype, dialect) -> str:
    if dtype.is_floating:  # NaN comes back as it is, either zero as +0.0 (NumPy's sign)
        return f"({a} > 0 ? ({ctype})1 : {a} < 0 ? ({ctype})-1 : {a} == 0 ? ({ctype})0 : {a})"
    if dtype.kind == "u":
        return f"({ctype})({a} > 0)"
    return f"({ctype})(({a} > 0) - ({a} < 0))"


def _integral_identity(function: str | None):
    def render(a, b, dtype, ctype, dialect) -> str:
        if not dtype.is_floating:
            return a
        return f"{dialect.function(function or dialect.round_function, dtype)}({a})"
    return render


def _abs(a, b, dtype, ctype, dialect) -> str:
    if dtype.is_floating:
        return f"{dialect.function('fabs', dtype)}({a})"
    if dtype.kind == "u":
        return a
    return f"({a} < 0 ? {_negate(a, dtype, ctype, dialect)} : {a})"


_SPECIAL = {
    "neg": lambda a, b, dtype, ctype, dialect: _negate(a, dtype, ctype, dialect),
    "abs": _abs,
    "floor": _integral_identity("floor"),
    "ceil": _integral_identity("ceil"),
    "round": _integral_identity(None),
    "sign": _sign,
    "logical_not": lambda a, b, dtype, ctype, dialect: f"(!{a})",
    "isnan": lambda a, b, dtype, ctype, dialect: f"({a} != {a})" if dtype.is_floating
    else "false",
    "bitwise_not": lambda a, b, dtype, ctype, dialect: f"(!{a})" if dtype.is_bool
    else f"({ctype})(~{a})",
    "div": lambda a, b, dtype, ctype, dialect: f"({a} / {b})",
    "pow": lambda a, b, dtype, ctype, dialect: (
        f"{dialect.function('pow', dtype)}({a}, {b})" if dtype.is_floating
        else f"({ctype})fuel_power_integer({a}, {b})"),  # the renderer's helper
    "remainder": _remainder,
    "fmod": _fmod,
    "int_div": _int_div,
    "maximum": _extreme(">"),
    "minimum": _extreme("<"),
    "logical_and": lambda a, b, dtype, ctype, dialect: f"(({a} != 0) && ({b} != 0))",
    "logical_or": lambda a, b, dtype, ctype, dialect: f"(({a} != 0) || ({b} != 0))",
    "logical_xor": lambda a, b, dtype, ctype, dialect: f"(({a} != 0) != ({b} != 0))",
    "bitshift_left": _shift_left,
    "bitshift_right": _shift_right,
}
