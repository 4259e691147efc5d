"""Render a LoopKernel into C: one function over a collapsed loop nest.

The function is ``void fuel_kernel(char **data, const int64_t *sizes, const int64_t *strides)``:
``data`` holds each load's pointer (its offset applied), then each store's; ``sizes`` the
collapsed loop sizes; ``strides`` each load's strides per collapsed dim, load-major. Sizes and
strides are arguments, so one source (and one compiled library) serves every shape with the
same loop depth and innermost-stride pattern. The outermost dims run as one flattened loop
(OpenMP-parallel where it is large enough, when the toolchain enables it); the innermost dim
runs dense, so contiguous operands vectorize. Semantics follow the NumPy kernels: integer
division and remainder by zero give 0, shifts past the width give 0 (or -1), maximum and
minimum propagate NaN, round is half to even.

float16 and bfloat16 are not rendered yet (``C_DTYPES``): groups touching them stay unfused.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuel.compiler.kernel_ir import LoopKernel, Value, collapse
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.layout import contiguous_strides

C_TYPES: dict[DType, str] = {
    dt.bool_: "bool", dt.uint8: "uint8_t", dt.int8: "int8_t", dt.int16: "int16_t",
    dt.int32: "int32_t", dt.int64: "int64_t", dt.float32: "float", dt.float64: "double",
}
C_DTYPES = frozenset(C_TYPES)
UNSIGNED = {dt.uint8: "uint8_t", dt.int8: "uint8_t", dt.int16: "uint16_t",
            dt.int32: "uint32_t", dt.int64: "uint64_t"}

# Unary float functions of <math.h> (float32 uses the ``f`` variant).
MATH_FUNCTIONS = {
    "exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p", "sqrt": "sqrt",
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh", "acosh": "acosh",
    "atanh": "atanh", "erf": "erf",
}
ARITHMETIC = {"add": "+", "sub": "-", "mul": "*"}
COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
INTEGER_ONLY = frozenset({"int_div", "bitshift_left", "bitshift_right", "bitwise_not",
                          "bitwise_and", "bitwise_or", "bitwise_xor"})
FLOAT_ONLY = frozenset(MATH_FUNCTIONS) | {"div", "pow"}
RENDERED_OPS = (frozenset(MATH_FUNCTIONS) | frozenset(ARITHMETIC) | frozenset(COMPARISONS)
                | frozenset(BITWISE) | {
                    "neg", "abs", "floor", "ceil", "round", "sign", "logical_not", "isnan",
                    "bitwise_not", "div", "remainder", "fmod", "int_div", "pow", "maximum",
                    "minimum", "logical_and", "logical_or", "logical_xor", "bitshift_left",
                    "bitshift_right", "where", "cast", "load", "constant"})


@dataclass(frozen=True, slots=True)
class CProgram:
    """A rendered kernel: its source and the runtime arguments of this shape and layout."""

    source: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


def renders(op: str, dtypes: tuple[DType, ...]) -> bool:
    """Whether the C renderer renders ``op`` over these dtypes (inputs then output)."""
    if op not in RENDERED_OPS or any(d not in C_DTYPES for d in dtypes):
        return False
    operand = dtypes[1] if op == "where" else dtypes[0]
    if op in FLOAT_ONLY and not operand.is_floating:
        return False
    if op in INTEGER_ONLY and operand.is_floating:
        return False
    return True


def render_c(kernel: LoopKernel, parallel_threshold: int | None = None,
             vector_math: bool = False) -> CProgram:
    """The C source of ``kernel`` and its sizes/strides arguments. ``parallel_threshold``:
    run the outer loop with OpenMP when a launch has at least that many elements.
    ``vector_math``: declare the math functions SIMD-callable, so loops calling them vectorize
    through glibc's libmvec (the toolchain links it)."""
    output_strides = contiguous_strides(kernel.shape)
    sizes, strides = collapse(kernel.shape, [load.strides for load in kernel.loads]
                              + [output_strides] * len(kernel.stores))
    depth = len(sizes)
    load_strides = strides[:len(kernel.loads)]
    patterns = ["dense" if s[-1] == 1 else "broadcast" if s[-1] == 0 else "strided"
                for s in load_strides]
    lines = [PRELUDE, *(_vector_declarations(kernel) if vector_math else ()),
             "void fuel_kernel(char **data, const int64_t *sizes, "
             "const int64_t *strides) {",
             f"  const int64_t inner = sizes[{depth - 1}];",
             "  int64_t outer_count = 1;",
             f"  for (int d = 0; d < {depth - 1}; d++) outer_count *= sizes[d];"]
    if parallel_threshold is not None:
        lines.append(f"  #pragma omp parallel for schedule(static) "
                     f"if (outer_count * inner >= {parallel_threshold})")
    lines.append("  for (int64_t outer = 0; outer < outer_count; outer++) {")
    lines += outer_inputs(kernel, patterns, depth - 1, depth)
    for position, store in enumerate(kernel.stores):
        ctype = C_TYPES[store.dtype]
        lines.append(f"    {ctype} *restrict out{position} = "
                     f"({ctype} *)data[{len(kernel.loads) + position}] + outer * inner;")
    lines.append("    for (int64_t i = 0; i < inner; i++) {")
    for index, value in enumerate(kernel.values):
        lines.append(f"      const {C_TYPES[value.dtype]} v{index} = "
                     f"{_expression(kernel, value, patterns)};")
    for position, store in enumerate(kernel.stores):
        lines.append(f"      out{position}[i] = v{store.value};")
    lines += ["    }", "  }", "}", ""]
    flat = tuple(s for load in load_strides for s in load)
    return CProgram("\n".join(lines), sizes, flat)


PRELUDE = """#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#define FUEL_REMAINDER_FLOAT(T, FMOD) static inline T fuel_remainder_##T(T a, T b) { \\
  T r = FMOD(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
FUEL_REMAINDER_FLOAT(float, fmodf)
FUEL_REMAINDER_FLOAT(double, fmod)
"""


# libmvec's vector variants (glibc 2.35+) of the math functions the renderer calls.
VECTOR_FUNCTIONS = frozenset(MATH_FUNCTIONS) | {"pow"}


def outer_inputs(kernel: LoopKernel, patterns: list[str], outer_dims: int,
                 stride_count: int) -> list[str]:
    """Inside the loop over ``outer``: each input's base offset from the ``outer_dims`` outer
    sizes and strides (``stride_count`` strides per input, the inner one last), its pointer
    and, for a strided input, its inner step."""
    lines = [f"    int64_t base{position} = 0;" for position in range(len(kernel.loads))]
    if outer_dims > 0:
        lines.append("    int64_t rest = outer;")
        lines.append(f"    for (int d = {outer_dims - 1}; d >= 0; d--) {{")
        lines.append("      const int64_t index = rest % sizes[d]; rest /= sizes[d];")
        for position in range(len(kernel.loads)):
            lines.append(f"      base{position} += index * strides[{position * stride_count} + d];")
        lines.append("    }")
    for position, load in enumerate(kernel.loads):
        ctype = C_TYPES[load.dtype]
        lines.append(f"    const {ctype} *restrict in{position} = "
                     f"(const {ctype} *)data[{position}] + base{position};")
        if patterns[position] == "strided":
            lines.append(f"    const int64_t step{position} = "
                         f"strides[{position * stride_count + stride_count - 1}];")
    return lines


def _vector_declarations(kernel: LoopKernel) -> list[str]:
    """``extern float expf(float) __attribute__((simd("notinbranch")));`` per function used."""
    declarations = []
    for value in kernel.values:
        if value.op not in VECTOR_FUNCTIONS:
            continue
        argument = kernel.values[value.args[0]].dtype
        ctype = C_TYPES[argument]
        name = (MATH_FUNCTIONS.get(value.op, value.op)) + ("f" if argument is dt.float32 else "")
        parameters = ", ".join([ctype] * len(value.args))
        line = f"extern {ctype} {name}({parameters}) __attribute__((simd(\"notinbranch\")));"
        if line not in declarations:
            declarations.append(line)
    return declarations


def _literal(number, dtype: DType) -> str:
    if dtype.is_floating:
        number = float(number)
        if number != number:
            text = "NAN"
        elif number in (float("inf"), float("-inf")):
            text = "INFINITY" if number > 0 else "(-INFINITY)"
        else:
            text = number.hex()
        return f"(({C_TYPES[dtype]}){text})"
    if dtype.is_bool:
        return "true" if number else "false"
    return f"(({C_TYPES[dtype]}){int(number)}LL)"


def _expression(kernel: LoopKernel, value: Value, patterns: list[str]) -> str:
    """The C expression of one value, over earlier values ``v<index>``."""
    op = value.op
    if op == "load":
        pattern = patterns[value.load]
        where = {"dense": "i", "broadcast": "0", "strided": f"i * step{value.load}"}[pattern]
        return f"in{value.load}[{where}]"
    if op == "constant":
        return _literal(value.constant, value.dtype)
    args = [f"v{a}" for a in value.args]
    arg_dtypes = [kernel.values[a].dtype for a in value.args]
    ctype = C_TYPES[value.dtype]
    first = arg_dtypes[0] if arg_dtypes else value.dtype
    suffix = "f" if first is dt.float32 else ""
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if op == "cast":
        return _cast(a, first, value.dtype)
    if op == "where":
        return f"({a} ? {b} : {args[2]})"
    if op in MATH_FUNCTIONS:
        return f"{MATH_FUNCTIONS[op]}{suffix}({a})"
    if op in ARITHMETIC:
        return f"({ctype})({a} {ARITHMETIC[op]} {b})"
    if op in COMPARISONS:
        return f"({a} {COMPARISONS[op]} {b})"
    if op in BITWISE:
        return f"({ctype})({a} {BITWISE[op]} {b})"
    return _SPECIAL[op](a, b, first, ctype, suffix)


def _cast(a: str, source: DType, target: DType) -> str:
    if target.is_bool:
        return f"({a} != 0)"
    if source.is_floating and target.kind == "u":  # through int64, as NumPy on x86
        return f"({C_TYPES[target]})(int64_t)({a})"
    return f"({C_TYPES[target]})({a})"


def _negate(a: str, dtype: DType, ctype: str) -> str:
    if dtype.is_floating:
        return f"(-{a})"
    return f"({ctype})(0u - ({UNSIGNED[dtype]}){a})"  # wraps, as NumPy


def _shift_left(a, b, dtype, ctype, suffix) -> str:
    bits = dtype.itemsize * 8
    unsigned = UNSIGNED[dtype]
    return f"(({b} < 0 || {b} >= {bits}) ? ({ctype})0 : ({ctype})(({unsigned}){a} << {b}))"


def _shift_right(a, b, dtype, ctype, suffix) -> str:
    bits = dtype.itemsize * 8
    fill = f"({a} < 0 ? ({ctype})-1 : ({ctype})0)" if dtype.kind == "i" else f"({ctype})0"
    return f"(({b} < 0 || {b} >= {bits}) ? {fill} : ({ctype})({a} >> {b}))"


def _remainder(a, b, dtype, ctype, suffix) -> str:
    if dtype.is_floating:
        return f"fuel_remainder_{ctype}({a}, {b})"
    if dtype.kind == "u":
        return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} % {b}))"
    return (f"(({b} == 0 || {b} == -1) ? ({ctype})0 : ({ctype})((({a} % {b}) != 0 && "
            f"((({a} % {b}) < 0) != ({b} < 0))) ? ({a} % {b}) + {b} : ({a} % {b})))")


def _fmod(a, b, dtype, ctype, suffix) -> str:
    if dtype.is_floating:
        return f"fmod{suffix}({a}, {b})"
    if dtype.kind == "u":
        return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} % {b}))"
    return f"(({b} == 0 || {b} == -1) ? ({ctype})0 : ({ctype})({a} % {b}))"


def _int_div(a, b, dtype, ctype, suffix) -> str:
    if dtype.kind == "u":
        return f"({b} == 0 ? ({ctype})0 : ({ctype})({a} / {b}))"
    return (f"({b} == 0 ? ({ctype})0 : {b} == -1 ? {_negate(a, dtype, ctype)} "
            f": ({ctype})({a} / {b}))")


def _extreme(comparison: str):
    def render(a, b, dtype, ctype, suffix) -> str:
        if dtype.is_floating:  # NaN in either operand propagates
            return f"(({a} {comparison} {b} || {a} != {a}) ? {a} : {b})"
        return f"({a} {comparison} {b} ? {a} : {b})"
    return render


def _sign(a, b, dtype, ctype, suffix) -> str:
    if dtype.is_floating:  # NaN and signed zeros come back as they are
        return f"({a} > 0 ? ({ctype})1 : {a} < 0 ? ({ctype})-1 : {a})"
    if dtype.kind == "u":
        return f"({ctype})({a} > 0)"
    return f"({ctype})(({a} > 0) - ({a} < 0))"


def _integral_identity(function: str):
    def render(a, b, dtype, ctype, suffix) -> str:
        return f"{function}{suffix}({a})" if dtype.is_floating else a
    return render


_SPECIAL = {
    "neg": lambda a, b, dtype, ctype, suffix: _negate(a, dtype, ctype),
    "abs": lambda a, b, dtype, ctype, suffix: (
        f"fabs{suffix}({a})" if dtype.is_floating else a if dtype.kind == "u"
        else f"({a} < 0 ? {_negate(a, dtype, ctype)} : {a})"),
    "floor": _integral_identity("floor"),
    "ceil": _integral_identity("ceil"),
    "round": _integral_identity("nearbyint"),
    "sign": _sign,
    "logical_not": lambda a, b, dtype, ctype, suffix: f"(!{a})",
    "isnan": lambda a, b, dtype, ctype, suffix: f"({a} != {a})" if dtype.is_floating
    else "false",
    "bitwise_not": lambda a, b, dtype, ctype, suffix: f"(!{a})" if dtype.is_bool
    else f"({ctype})(~{a})",
    "div": lambda a, b, dtype, ctype, suffix: f"({a} / {b})",
    "pow": lambda a, b, dtype, ctype, suffix: f"pow{suffix}({a}, {b})",
    "remainder": _remainder,
    "fmod": _fmod,
    "int_div": _int_div,
    "maximum": _extreme(">"),
    "minimum": _extreme("<"),
    "logical_and": lambda a, b, dtype, ctype, suffix: f"(({a} != 0) && ({b} != 0))",
    "logical_or": lambda a, b, dtype, ctype, suffix: f"(({a} != 0) || ({b} != 0))",
    "logical_xor": lambda a, b, dtype, ctype, suffix: f"(({a} != 0) != ({b} != 0))",
    "bitshift_left": _shift_left,
    "bitshift_right": _shift_right,
}
