"""Render a LoopKernel into WGSL: one compute shader over a strided loop nest.

Sizes, offsets and strides are not in the source: the shader reads them from a small
``params`` array (``array<i32>``, binding 0) that each launch fills, so one shader (and one
pipeline) serves every shape of the same loop depth. Inputs are bindings ``1..n`` (read-only
storage), outputs follow (read-write). Elements are 32-bit words (``STORAGE_WORDS``) but
float16's: bool is a ``u32`` 0/1, and int64 is held as ``i32`` on wgpu (WGSL has no 64-bit
integer; see ``fuel/backends/wgpu/__init__.py``). float16 is stored as ``f16`` (a shader using
it starts with ``enable f16;``: the device needs ``shader-f16``) and computed in ``f32``, as the
C renderer computes it: each float16 value is rounded to float16 (to nearest even,
``fuel_f16_round``) where it is computed; reductions accumulate in f32 and round once.

``params``, elementwise: ``[count, sizes[depth], (offset, strides[depth]) per load, then per
store]``. With a reduction (``kernel.reduced``) one invocation runs one row
(``render_wgsl_rows``): ``count`` is the number of rows, the sizes are the row schedule's
(rows dims, then row dims) and the same per-operand records follow. Kernels are legalized in
the IR first (``WGSL_LEGALIZATION``), and what renders is the shared tables'
(``render_expression``); semantics follow the NumPy kernels as the C renderer does (integer
division by zero gives 0, shifts past the width, NaN-propagating maximum, round half to
even); float32 and float16 sums accumulate in f32 with Kahan compensation.
"""

from __future__ import annotations

import struct

import numpy as np

from fuel.compiler.kernel_ir import LoopKernel, Value
from fuel.compiler.legalize import Legalization
from fuel.compiler.render_expression import ARITHMETIC, BITWISE, COMPARISONS, MATH_FUNCTIONS
from fuel.compiler.render_wgsl_prelude import FLOAT16_ROUND, PRELUDE
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType

# WGSL has no 64-bit integer: int64 is held as i32 on wgpu, and kernels are legalized in the
# IR before rendering (int64 values retyped int32; shifts, whose results depend on the lost
# width, do not render over it); nor arithmetic or ordering over bool (rewritten as logical
# ops, and comparisons of their 0/1 as u32). float16 is computed in f32, each computed value
# cast back (``cast`` rounds). Integer powers render through the prelude's helpers.
WGSL_LEGALIZATION = Legalization(
    narrowed={dt.int64: dt.int32},
    width_sensitive=frozenset({"bitshift_left", "bitshift_right"}),
    integer_pow=True,
    boolean_logic={"add": "logical_or", "mul": "logical_and", "sub": "logical_xor",
                   "maximum": "logical_or", "minimum": "logical_and",
                   "bitwise_and": "logical_and", "bitwise_or": "logical_or",
                   "bitwise_xor": "logical_xor"},
    ordered_bools=dt.uint32,
    computed_in={dt.float16: dt.float32})
# The WGSL type a value of each (legalized) dtype is computed in, and the word each dtype is
# stored in (int64's: the i32 it is held in).
VALUE_TYPES: dict[DType, str] = {
    dt.float32: "f32", dt.int32: "i32", dt.uint32: "u32", dt.bool_: "bool", dt.float16: "f32",
}
STORAGE_WORDS: dict[DType, str] = {
    dt.float32: "f32", dt.int32: "i32", dt.int64: "i32", dt.uint32: "u32", dt.bool_: "u32",
    dt.float16: "f16",
}
WGSL_DTYPES = frozenset(STORAGE_WORDS)
WORKGROUP = 256  # invocations per workgroup of every one-invocation-per-item shader
# How WGSL spells the shared table's math functions where it differs from the op's name:
# the prelude's NumPy-accurate versions of what WGSL lacks or leaves loose.
FUNCTION_NAMES = {"asin": "fuel_asin", "acos": "fuel_acos", "atan": "fuel_atan",
                  "expm1": "fuel_expm1", "log1p": "fuel_log1p", "erf": "fuel_erf"}


def renders(op: str, dtypes: tuple[DType, ...]) -> bool:
    """Whether the WGSL renderer renders ``op`` over these dtypes (inputs then output): the
    shared tables (``render_expression.renders``) over the legalized dtypes."""
    return WGSL_LEGALIZATION.renders(op, dtypes, frozenset(VALUE_TYPES))


def value_type(dtype: DType) -> str:
    """The WGSL type a value of ``dtype`` (an IR dtype, legalized here) is computed in."""
    return VALUE_TYPES[WGSL_LEGALIZATION.dtype(dtype)]


def is_float(dtype: DType) -> bool:
    """Whether values of ``dtype`` are computed as floats (float32, and float16 in f32)."""
    return VALUE_TYPES.get(WGSL_LEGALIZATION.dtype(dtype)) == "f32"


def literal(number, dtype: DType) -> str:
    """An exact WGSL literal of ``number`` as ``dtype``'s value type (floats as bit patterns,
    so NaN, infinities and every float32 are exact; a float16 one rounded to float16)."""
    if is_float(dtype):
        with np.errstate(over="ignore"):  # beyond the type's range: its infinity
            number = np.asarray(number).astype(dtype.numpy).astype(np.float32)
        bits = struct.unpack("<I", struct.pack("<f", float(number)))[0]
        return f"bitcast<f32>({bits:#x}u)"
    if dtype.is_bool:
        return "true" if number else "false"
    word = int(number) & 0xFFFFFFFF
    if value_type(dtype) == "u32":
        return f"{word}u"
    return f"bitcast<i32>({word}u)"


def float16_support(words: list[str]) -> list[str]:
    """The lines a shader with these storage words starts with: where one is ``f16``, the
    ``enable f16;`` directive (before any declaration) and ``fuel_f16_round``."""
    return ["enable f16;", FLOAT16_ROUND] if "f16" in words else []


def shader_header(words: list[str], writable: list[bool], names: list[str],
                  prelude: str = "") -> str:
    """The module's start (``float16_support``, then ``prelude``), the bindings (``params`` at
    0, then one array per operand of the given word types) and the opening of ``main``: one
    invocation per item, ``item`` below ``params[0]``, over a 2-D grid of ``WORKGROUP``-wide
    groups."""
    lines = float16_support(words) + ([prelude] if prelude else [])
    lines += ["@group(0) @binding(0) var<storage, read> params: array<i32>;"]
    lines += [f"@group(0) @binding({1 + p}) var<storage, {'read_write' if w else 'read'}> "
              f"{name}: array<{word}>;" for p, (word, w, name) in enumerate(zip(words, writable,
                                                                              names))]
    lines += [f"@compute @workgroup_size({WORKGROUP})",
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>,",
              "        @builtin(num_workgroups) groups: vec3<u32>) {",
              f"  let item = i32(gid.x + gid.y * groups.x * {WORKGROUP}u);",
              "  if (item >= params[0]) { return; }"]
    return "\n".join(lines)


def render_wgsl(kernel: LoopKernel, depth: int, row_depth: int = 1, row_body=None) -> str:
    """The WGSL source of ``kernel`` over a loop nest of ``depth`` dims (sizes, offsets and
    strides come from ``params`` at launch); with a reduction, the last ``row_depth`` of them
    are the row, whose body ``row_body`` renders (``render_wgsl_rows.render`` passes its own:
    that module builds on this one). The kernel is legalized first (``WGSL_LEGALIZATION``)."""
    if kernel.reduced and row_body is None:
        raise ValueError(f"{kernel.name} reduces: render it with render_wgsl_rows.render")
    kernel = WGSL_LEGALIZATION.apply(kernel)
    loads, stores = kernel.loads, kernel.stores
    words = [STORAGE_WORDS[load.dtype] for load in loads] + \
        [STORAGE_WORDS[store.dtype] for store in stores]
    names = [f"in{p}" for p in range(len(loads))] + [f"out{p}" for p in range(len(stores))]
    lines = [shader_header(words, [False] * len(loads) + [True] * len(stores), names, PRELUDE)]
    operands = len(loads) + len(stores)
    outer = depth - row_depth if kernel.reduced else depth
    for position in range(operands):
        lines.append(f"  var base{position} = params[{record(depth, position)}];")
    if outer > 0:
        lines += ["  var rest = item;",
                  f"  for (var d = {outer - 1}; d >= 0; d = d - 1) {{",
                  "    let size = params[1 + d];",
                  "    let index = rest % size;",
                  "    rest = rest / size;"]
        for position in range(operands):
            lines.append(f"    base{position} = base{position} + index * "
                         f"params[{record(depth, position)} + 1 + d];")
        lines.append("  }")
    if kernel.reduced:
        lines += row_body(kernel, depth, row_depth)
    else:
        for index, value in enumerate(kernel.values):
            lines.append(f"  let v{index} = {expression(kernel, value, 'base')};")
        for position, store in enumerate(stores):
            lines.append(f"  out{position}[base{len(loads) + position}] = "
                         f"{to_word(f'v{store.value}', store.dtype)};")
    lines += ["}", ""]
    return "\n".join(lines)


def record(depth: int, position: int) -> int:
    """Where operand ``position``'s (offset, strides) record starts in ``params``."""
    return 1 + depth + position * (1 + depth)


def to_word(value: str, dtype: DType) -> str:
    """The stored form of a value of ``dtype`` (a float16 value is already rounded: exact)."""
    if dtype is dt.float16:
        return f"f16({value})"
    return f"select(0u, 1u, {value})" if dtype.is_bool else value


def from_word(word: str, dtype: DType) -> str:
    """The value of a stored word of ``dtype``."""
    if dtype is dt.float16:
        return f"f32({word})"
    return f"({word} != 0u)" if dtype.is_bool else word


def rounded(value: str, dtype: DType) -> str:
    """``value`` (an f32 expression) rounded to ``dtype`` where it is float16."""
    return f"fuel_f16_round({value})" if dtype is dt.float16 else value


def expression(kernel: LoopKernel, value: Value, offsets: str) -> str:
    """The WGSL expression of one value of a legalized kernel over earlier values
    ``v<index>``; loads read at ``<offsets><load>`` (``base`` per row or element, ``at`` inside
    a row loop). A float16 value is computed only by a cast (legalization), which rounds."""
    op = value.op
    if op == "load":
        load = kernel.loads[value.load]
        return from_word(f"in{value.load}[{offsets}{value.load}]", load.dtype)
    if op == "constant":
        return literal(value.constant, value.dtype)
    args = [f"v{a}" for a in value.args]
    first = kernel.values[value.args[0]].dtype if value.args else value.dtype
    wgsl = VALUE_TYPES[value.dtype]
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if op == "cast":
        return cast(a, first, value.dtype)
    if op == "bitcast":
        return f"bitcast<{wgsl}>({a})"
    if op == "where":
        return f"select({args[2]}, {b}, {a})"
    if op in MATH_FUNCTIONS:
        return f"{FUNCTION_NAMES.get(op, op)}({a})"
    if op in ARITHMETIC:
        return f"({a} {ARITHMETIC[op]} {b})"
    if op in COMPARISONS:
        if op == "ne" and is_float(first):  # NaN differs from everything
            return f"({a} != {b} || fuel_isnan({a}) || fuel_isnan({b}))"
        return f"({a} {COMPARISONS[op]} {b})"
    if op in BITWISE:
        return f"({a} {BITWISE[op]} {b})"
    return _RENDERERS[op](a, b, first, VALUE_TYPES[first])


def cast(a: str, source: DType, target: DType) -> str:
    """``a`` (of ``source``) converted to ``target`` as the NumPy kernels convert (to float16:
    through f32, then rounded once; integers above 2**24 round to float16's infinity either
    way)."""
    if target is dt.float16 and source is not dt.float16:
        return rounded(cast(a, source, dt.float32), target)
    source_type, target_type = VALUE_TYPES[source], VALUE_TYPES[target]
    if source_type == target_type:
        return a
    if target.is_bool:
        return _truth(a, source)
    if source.is_bool:
        return f"select({literal(0, target)}, {literal(1, target)}, {a})"
    if source_type == "f32" and target_type == "u32":  # through a signed integer, as NumPy
        return f"select(u32({a}), bitcast<u32>(i32({a})), {a} < 0.0)"
    return f"{target_type}({a})"


def _shift_left(a, b, dtype, wgsl) -> str:
    amount = f"u32({b})"
    limit = f"({b} < {literal(0, dtype)} || {b} >= {literal(32, dtype)})" \
        if wgsl == "i32" else f"({b} >= 32u)"
    return f"select({a} << {amount}, {literal(0, dtype)}, {limit})"


def _shift_right(a, b, dtype, wgsl) -> str:
    amount = f"u32({b})"
    if wgsl == "i32":
        fill = f"select(0, -1, {a} < 0)"
        return f"select({a} >> {amount}, {fill}, ({b} < 0 || {b} >= 32))"
    return f"select({a} >> {amount}, 0u, ({b} >= 32u))"


def _remainder(a, b, dtype, wgsl) -> str:
    if wgsl == "f32":
        return f"fuel_remainder_f32({a}, {b})"
    if wgsl == "u32":
        return f"select({a} % max({b}, 1u), 0u, {b} == 0u)"
    r = f"({a} % select({b}, 1, {b} == 0 || {b} == -1))"
    return (f"select(select({r}, {r} + {b}, {r} != 0 && (({r} < 0) != ({b} < 0))), 0, "
            f"{b} == 0 || {b} == -1)")


def _fmod(a, b, dtype, wgsl) -> str:
    if wgsl == "f32":
        return f"({a} % {b})"
    if wgsl == "u32":
        return f"select({a} % max({b}, 1u), 0u, {b} == 0u)"
    return f"select({a} % select({b}, 1, {b} == 0 || {b} == -1), 0, {b} == 0 || {b} == -1)"


def _int_div(a, b, dtype, wgsl) -> str:
    if wgsl == "u32":
        return f"select({a} / max({b}, 1u), 0u, {b} == 0u)"
    # b == -1: negate (wrapping), as NumPy and the C renderer
    return (f"select(select({a} / select({b}, 1, {b} == 0 || {b} == -1), 0 - {a}, {b} == -1),"
            f" 0, {b} == 0)")


def _extreme(comparison: str):
    def render(a, b, dtype, wgsl) -> str:
        if wgsl == "f32":
            return f"select({b}, {a}, {a} {comparison} {b} || fuel_isnan({a}))"
        return f"select({b}, {a}, {a} {comparison} {b})"
    return render


def _sign(a, b, dtype, wgsl) -> str:
    if wgsl == "f32":  # NaN comes back as it is, either zero as +0.0 (NumPy's sign)
        return f"select(select(select({a}, 0.0, {a} == 0.0), -1.0, {a} < 0.0), 1.0, {a} > 0.0)"
    if wgsl == "u32":
        return f"select(0u, 1u, {a} > 0u)"
    return f"(select(0, 1, {a} > 0) - select(0, 1, {a} < 0))"


def _integral(function: str):
    def render(a, b, dtype, wgsl) -> str:
        return f"{function}({a})" if wgsl == "f32" else a
    return render


def _pow(a, b, dtype, wgsl) -> str:
    return {"f32": "fuel_pow", "i32": "fuel_pow_i32", "u32": "fuel_pow_u32"}[wgsl] + \
        f"({a}, {b})"


_RENDERERS = {
    "neg": lambda a, b, dtype, wgsl: f"(-{a})" if wgsl == "f32" else f"(0u - {a})"
    if wgsl == "u32" else f"(0 - {a})",
    "abs": lambda a, b, dtype, wgsl: a if wgsl == "u32" else f"abs({a})"
    if wgsl == "f32" else f"select({a}, 0 - {a}, {a} < 0)",
    "floor": _integral("floor"),
    "ceil": _integral("ceil"),
    "round": _integral("round"),
    "sign": _sign,
    "logical_not": lambda a, b, dtype, wgsl: f"(!{a})" if wgsl == "bool"
    else f"({a} == {literal(0, dtype)})",
    "isnan": lambda a, b, dtype, wgsl: f"fuel_isnan({a})" if wgsl == "f32" else "false",
    "bitwise_not": lambda a, b, dtype, wgsl: f"(!{a})" if wgsl == "bool" else f"(~{a})",
    "div": lambda a, b, dtype, wgsl: f"({a} / {b})",
    "pow": _pow,
    "remainder": _remainder,
    "fmod": _fmod,
    "int_div": _int_div,
    "maximum": _extreme(">"),
    "minimum": _extreme("<"),
    "logical_and": lambda a, b, dtype, wgsl: f"({_truth(a, dtype)} && {_truth(b, dtype)})",
    "logical_or": lambda a, b, dtype, wgsl: f"({_truth(a, dtype)} || {_truth(b, dtype)})",
    "logical_xor": lambda a, b, dtype, wgsl: f"({_truth(a, dtype)} != {_truth(b, dtype)})",
    "bitshift_left": _shift_left,
    "bitshift_right": _shift_right,
}


def _truth(a: str, dtype: DType) -> str:
    """Whether ``a`` counts as true (NaN does, as in NumPy)."""
    if is_float(dtype):
        return f"({a} != 0.0 || fuel_isnan({a}))"
    return a if dtype.is_bool else f"({a} != {literal(0, dtype)})"
