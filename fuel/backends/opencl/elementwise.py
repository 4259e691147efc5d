"""The elementwise family from one template: every unary, binary, compare, logical and bitwise
op is an expression in ``x`` (and ``y``) dropped into the same strided-walk kernel. One program
per dtype combination holds the kernels of every op that shares it; casts work the same way.
Broadcast operands arrive as stride-0 views and transposes as permuted strides."""

from __future__ import annotations

from functools import cache

from fuel.backends.opencl.codegen import (
    OPENCL_DTYPES,
    OPENCL_INTEGER_DTYPES,
    CType,
    ProgramSpec,
    ctype,
    make_walk,
    needs_fp64,
    supports,
    walk_kernel,
)
from fuel.backends.opencl.common import STRIDED, ClKernel, kernel_list, launch_1d
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.ops import OpKind, definition

BITWISE = (dt.bool_,) + OPENCL_INTEGER_DTYPES


def _float_or(integer: str, floating: str):
    return lambda t: floating if t.is_float else integer


def _by_kind(floating: str, signed: str, unsigned: str):
    return lambda t: floating if t.is_float else signed if t.is_signed else unsigned


def _sigmoid(t: CType) -> str:
    one, zero = t.literal(1.0), t.literal(0.0)
    return f"(x >= {zero} ? {one} / ({one} + exp(-x)) : exp(x) / ({one} + exp(x)))"


def _gelu(t: CType) -> str:
    half, one = t.literal(0.5), t.literal(1.0)
    return f"({half} * x * ({one} + erf(x * {t.literal(0.7071067811865476)})))"


def _tanh(t: CType, argument: str = "x") -> str:
    return f"tanh_float({argument})" if t.compute == "float" else f"tanh({argument})"


def _gelu_tanh(t: CType) -> str:
    half, one = t.literal(0.5), t.literal(1.0)
    inner = f"{t.literal(0.7978845608028654)} * (x + {t.literal(0.044715)} * x * x * x)"
    return f"({half} * x * ({one} + {_tanh(t, inner)}))"


# op -> expression in the input's compute type; ``x`` is the operand.
UNARY_EXPRESSIONS = {
    OpKind.NEG: lambda t: "-x",
    OpKind.ABS: _by_kind("fabs(x)", "(x < 0 ? -x : x)", "x"),
    OpKind.EXP: lambda t: "exp(x)",
    OpKind.LOG: lambda t: "log(x)",
    OpKind.SQRT: lambda t: "sqrt(x)",
    OpKind.RSQRT: lambda t: f"({t.literal(1.0)} / sqrt(x))",
    OpKind.RECIPROCAL: lambda t: f"({t.literal(1.0)} / x)",
    OpKind.SQUARE: lambda t: "(x * x)",
    OpKind.SIN: lambda t: "sin(x)",
    OpKind.COS: lambda t: "cos(x)",
    OpKind.TANH: _tanh,
    OpKind.SIGMOID: _sigmoid,
    OpKind.RELU: lambda t: (f"((x > {t.literal(0.0)} || isnan(x)) ? x : {t.literal(0.0)})"
                            if t.is_float else "(x > 0 ? x : 0)"),
    OpKind.GELU: _gelu,
    OpKind.GELU_TANH: _gelu_tanh,
    OpKind.SILU: lambda t: f"(x * {_sigmoid(t)})",
    OpKind.ERF: lambda t: "erf(x)",
    OpKind.FLOOR: _float_or("x", "floor(x)"),
    OpKind.CEIL: _float_or("x", "ceil(x)"),
    OpKind.ROUND: _float_or("x", "rint(x)"),
    OpKind.SIGN: _by_kind("(x > 0 ? 1 : (x < 0 ? -1 : x))", "((x > 0) - (x < 0))", "(x > 0)"),
    OpKind.LOGICAL_NOT: lambda t: "(x == 0)",
    OpKind.ISNAN: _float_or("0", "isnan(x)"),
    OpKind.BITWISE_NOT: lambda t: "(!x)" if t.dtype is dt.bool_ else "(~x)",
}

# op -> expression in the operands' compute type; ``x`` and ``y`` are the operands.
BINARY_EXPRESSIONS = {
    OpKind.ADD: lambda t: "(x + y)",
    OpKind.SUB: lambda t: "(x - y)",
    OpKind.MUL: lambda t: "(x * y)",
    OpKind.DIV: lambda t: "(x / y)",
    OpKind.REMAINDER: _by_kind("remainder_{compute}(x, y)", "remainder_signed(x, y)",
                               "remainder_unsigned(x, y)"),
    OpKind.POW: _float_or("power_integer(x, y)", "pow(x, y)"),
    OpKind.MAXIMUM: _float_or("(x > y ? x : y)",
                              "(isnan(x) ? x : (isnan(y) ? y : (x > y ? x : y)))"),
    OpKind.MINIMUM: _float_or("(x < y ? x : y)",
                              "(isnan(x) ? x : (isnan(y) ? y : (x < y ? x : y)))"),
    OpKind.EQ: lambda t: "(x == y)",
    OpKind.NE: lambda t: "(x != y)",
    OpKind.LT: lambda t: "(x < y)",
    OpKind.LE: lambda t: "(x <= y)",
    OpKind.GT: lambda t: "(x > y)",
    OpKind.GE: lambda t: "(x >= y)",
    OpKind.LOGICAL_AND: lambda t: "((x != 0) && (y != 0))",
    OpKind.LOGICAL_OR: lambda t: "((x != 0) || (y != 0))",
    OpKind.LOGICAL_XOR: lambda t: "((x != 0) != (y != 0))",
    OpKind.BITWISE_AND: lambda t: "(x & y)",
    OpKind.BITWISE_OR: lambda t: "(x | y)",
    OpKind.BITWISE_XOR: lambda t: "(x ^ y)",
}



_FLOAT_HELPERS = """
inline {t} remainder_{t}({t} x, {t} y) {{
    {t} r = fmod(x, y);
    if (y == 0) return r;
    if (r != 0) {{ if ((r < 0) != (y < 0)) r += y; }} else {{ r = copysign(({t})0, y); }}
    return r;
}}
"""
# tanh in float: Cephes' odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above; within 1
# ulp of the correctly rounded result, and it vectorizes where some drivers' tanh does not.
_TANH_FLOAT = """
inline float tanh_float(float x) {
    const float a = fabs(x);
    float r;
    if (a < 0.625f) {
        const float z = a * a;
        r = a + a * z * ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z
                           - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                         - 3.33332819422e-1f);
    } else {
        r = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
    }
    return copysign(r, x);
}
"""
_INTEGER_HELPERS = """
inline long remainder_signed(long x, long y) {
    if (y == 0 || y == -1) return 0;
    long r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
inline ulong remainder_unsigned(ulong x, ulong y) { return y == 0 ? 0 : x % y; }
inline long power_integer(long base, long exponent) {
    if (exponent < 0) return base == 1 ? 1 : (base == -1 ? ((exponent & 1) ? -1 : 1) : 0);
    ulong result = 1, square = (ulong)base;
    for (ulong e = (ulong)exponent; e; e >>= 1) {
        if (e & 1) result *= square;
        square *= square;
    }
    return (long)result;
}
"""


def helpers(t: CType) -> str:
    """The helper functions the expressions of compute type ``t`` may call."""
    if not t.is_float:
        return _INTEGER_HELPERS
    return _FLOAT_HELPERS.format(t=t.compute) + (_TANH_FLOAT if t.compute == "float" else "")


def kernel_source(name: str, inputs: list[CType], out: CType, expression: str,
                  via: str = "float") -> str:
    """The walk kernel: load each operand through its strides, store ``expression``."""
    names = "xyz"
    count = len(inputs) + 1
    params = ", ".join(f"__global const {t.storage}* in{k}" for k, t in enumerate(inputs))
    loads = "\n".join(f"    const {t.compute} {names[k]} = {t.load(f'in{k}', f'o{k}')};"
                      for k, t in enumerate(inputs))
    body = f"{loads}\n    {out.store('out', f'o{count - 1}', expression, via)}"
    return f"""
__kernel void {name}(__global {out.storage}* out, {params}, const walk_t w) {{
{walk_kernel(count, body)}}}
"""


def run_walk(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """Launch a walk kernel: one work-item per output element, inputs broadcast to its shape."""
    out_layout = layouts[-1]
    if out_layout.numel == 0:
        return
    shape = out_layout.shape
    views = [layout if layout.shape == shape else layout.broadcast_to(shape)
             for layout in layouts[: len(inputs)]]
    walk = make_walk(shape, views + [out_layout])
    context, compiled = kernel.bind(outputs[0])
    launch_1d(context, compiled, out_layout.numel, outputs[0].buffer,
              *[s.buffer for s in inputs], walk, walk=walk)


@cache
def elementwise_program(combo: tuple[DType, ...], ops: tuple[OpKind, ...]) -> ProgramSpec:
    """One program with a kernel per op of ``ops`` for the dtype combination ``combo``."""
    *inputs, out = [ctype(d) for d in combo]
    table = UNARY_EXPRESSIONS if len(inputs) == 1 else BINARY_EXPRESSIONS
    parts = [helpers(inputs[0])]
    for op in ops:
        expression = table[op](inputs[0]).replace("{compute}", inputs[0].compute)
        parts.append(kernel_source(f"ew_{op.value}", inputs, out, expression))
    name = "elementwise_" + "_".join(d.name for d in combo)
    return ProgramSpec(name, "".join(parts), needs_fp64(*combo))


def _add_elementwise(kernels: KernelList) -> None:
    """Add every unary/binary op and every cast (all dtype combinations)."""
    groups: dict[tuple[DType, ...], list[OpKind]] = {}
    for op in (*UNARY_EXPRESSIONS, *BINARY_EXPRESSIONS):
        for combo in filter(supports, definition(op).coverage):
            groups.setdefault(combo, []).append(op)
    for combo, ops in groups.items():
        spec = elementwise_program(combo, tuple(ops))
        for op in ops:
            kernels.add(op, [combo], ClKernel(run_walk, spec, f"ew_{op.value}"), STRIDED)
    _add_casts(kernels)


def _cast_expression(source: CType, target: CType) -> tuple[str, str]:
    """(expression, via) converting ``x`` of ``source`` for storing as ``target``."""
    if target.dtype is dt.bool_:
        return "(x != 0)", "float"
    via = "double" if source.dtype is dt.float64 else "float"
    return "x", via


@cache
def cast_program(source: DType, targets: tuple[DType, ...]) -> ProgramSpec:
    """Casts from ``source`` to each of ``targets``, one kernel each."""
    s = ctype(source)
    parts = []
    for target in targets:
        t = ctype(target)
        expression, via = _cast_expression(s, t)
        parts.append(kernel_source(f"cast_to_{target.name}", [s], t, expression, via))
    return ProgramSpec(f"cast_{source.name}_{len(targets)}", "".join(parts),
                       needs_fp64(source, *targets))


def _add_casts(kernels: KernelList) -> None:
    for source in OPENCL_DTYPES:
        wide = tuple(t for t in OPENCL_DTYPES if needs_fp64(source, t))
        narrow = tuple(t for t in OPENCL_DTYPES if t not in wide)
        for targets in (wide, narrow):
            if not targets:
                continue
            spec = cast_program(source, targets)
            for target in targets:
                kernels.add(OpKind.CAST, [(source, target)],
                            ClKernel(run_walk, spec, f"cast_to_{target.name}"), STRIDED)


KERNELS = kernel_list()
_add_elementwise(KERNELS)
