"""Render a LoopKernel with a row (``reduced``) into WGSL: reductions over any axes, row ops
(softmax, norms) and scans (cumsum), fused or alone (the wgpu backend's reduce and cumsum
kernels are ``row_kernels`` LoopKernels rendered here, as OpenCL's are by
``render_opencl_rows``).

One invocation runs one row. ``params`` hold the row schedule (``kernel_ir.row_schedule``):
``[rows, outer sizes, row sizes, then per operand (loads, then stores) its offset, outer
strides and row strides]``; a row of one dim is walked with a step, a row of several dims
decodes each element's offsets from its index. Per reduction a loop over the row recomputes
the per-element values its argument needs and folds them as ``kernel_ir.REDUCTIONS`` says
(float sums in f32 with Kahan compensation, in row order; argmax/argmin fold (value, index)
pairs, ties to the first index, the first NaN winning); per-row values follow; a last loop
writes the per-element stores, folding scans in row order (a float16 scan accumulates in f32
and rounds each stored value).
"""

from __future__ import annotations

from fuel.compiler.kernel_ir import (
    REDUCE_OPS,
    SCAN_OPS,
    LoopKernel,
    Value,
    reduction,
    row_values,
)
from fuel.compiler.render_expression import COMPARISONS_OF, divided
from fuel.compiler.render_wgsl import (
    VALUE_TYPES,
    expression,
    is_float,
    literal,
    record,
    render_wgsl,
    rounded,
    to_word,
)

# The bounds of each integer value type (int64 is held as i32 on wgpu).
_BOUNDS = {"i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1)}


def row_body(kernel: LoopKernel, depth: int, row_depth: int) -> list[str]:
    """The lines of ``main`` after the rows walk (``base<p>`` is each operand's offset at its
    row): the reductions, the per-row values and stores, then the per-element stores."""
    per_row = row_values(kernel)
    loads = kernel.loads
    outer = depth - row_depth
    operands = len(loads) + len(kernel.stores)
    if row_depth == 1:
        lines = [f"  let row_length = params[{depth}];"]
        lines += [f"  let step{p} = params[{record(depth, p)} + {depth}];"
                  for p in range(operands)]
    else:
        lines = ["  var row_length = 1;"]
        lines += [f"  row_length = row_length * params[{1 + d}];" for d in range(outer, depth)]
    defined: set[int] = set()

    def offsets(positions: list[int]) -> list[str]:
        """Inside a row loop: ``at<p>``, the offset of element ``j`` of each operand."""
        if row_depth == 1:
            return [f"    let at{p} = base{p} + j * step{p};" for p in positions
                    if p < len(loads)]
        decoded = [f"    var at{p} = base{p};" for p in positions]
        decoded += ["    var left = j;",
                    f"    for (var d = {depth - 1}; d >= {outer}; d = d - 1) {{",
                    "      let size = params[1 + d]; let index = left % size; "
                    "left = left / size;"]
        decoded += [f"      at{p} = at{p} + index * params[{record(depth, p)} + 1 + d];"
                    for p in positions]
        return decoded + ["    }"]

    def emit_row_values(target: list[str]) -> None:
        for index, value in enumerate(kernel.values):
            if index in defined or not per_row[index] or value.op in _FOLDS:
                continue
            if all(a in defined for a in value.args):
                target.append(f"  let v{index} = {expression(kernel, value, 'base')};")
                defined.add(index)

    def element_values(roots: list[int]) -> list[str]:
        lines = []
        for index in _dependencies(kernel, roots, defined):
            value = kernel.values[index]
            if value.op in SCAN_OPS:
                running = _combine(value, f"acc{index}", f"v{value.args[0]}")
                lines += [f"    acc{index} = {running};",
                          f"    let v{index} = {rounded(f'acc{index}', value.dtype)};"]
            else:
                lines.append(f"    let v{index} = {expression(kernel, value, 'at')};")
        return lines

    load_positions = list(range(len(loads)))
    emit_row_values(lines)
    for index, value in enumerate(kernel.values):
        if value.op not in _FOLDS or value.op in SCAN_OPS:
            continue
        emit_row_values(lines)
        declarations, update, result = _fold(kernel, index, value)
        lines += declarations
        lines.append("  for (var j = 0; j < row_length; j = j + 1) {")
        lines += offsets(load_positions)
        lines += element_values([value.args[0]])
        lines += [f"    {line}" for line in update]
        lines.append("  }")
        lines.append(f"  let v{index} = {result};")
        defined.add(index)
    emit_row_values(lines)
    first_store = len(loads)
    element_stores = [(p, s) for p, s in enumerate(kernel.stores) if not s.per_row]
    for position, store in enumerate(kernel.stores):
        if store.per_row:
            lines.append(f"  out{position}[base{first_store + position}] = "
                         f"{to_word(f'v{store.value}', store.dtype)};")
    if element_stores:
        roots = [s.value for _, s in element_stores]
        for index in _scans(kernel, roots, defined):
            value = kernel.values[index]
            lines.append(f"  var acc{index}: {VALUE_TYPES[value.dtype]} = "
                         f"{_identity(value.op, value.dtype)};")
        lines.append("  for (var j = 0; j < row_length; j = j + 1) {")
        lines += offsets(load_positions + [first_store + p for p, _ in element_stores])
        lines += element_values(roots)
        for position, store in element_stores:
            operand = first_store + position
            at = f"base{operand} + j * step{operand}" if row_depth == 1 else f"at{operand}"
            lines.append(f"    out{position}[{at}] = {to_word(f'v{store.value}', store.dtype)};")
        lines.append("  }")
    return lines


_FOLDS = REDUCE_OPS | SCAN_OPS


def _dependencies(kernel: LoopKernel, roots: list[int], defined: set[int]) -> list[int]:
    """The values ``roots`` depend on (themselves included) not yet ``defined``, in order."""
    needed: set[int] = set()
    stack = list(roots)
    while stack:
        index = stack.pop()
        if index in needed or index in defined:
            continue
        needed.add(index)
        stack.extend(kernel.values[index].args)
    return sorted(needed)


def _scans(kernel: LoopKernel, roots: list[int], defined: set[int]) -> list[int]:
    """The scans the values ``roots`` depend on (per element), in order."""
    return [i for i in _dependencies(kernel, roots, defined) if kernel.values[i].op in SCAN_OPS]


def _identity(op: str, dtype) -> str:
    """The initial accumulator of ``op`` (``Reduction.identity``) in ``dtype``'s value type."""
    found = reduction(op).identity
    if found in ("zero", "one"):
        return literal(0 if found == "zero" else 1, dtype)
    lowest = found == "lowest"
    if is_float(dtype):
        return literal(float("-inf") if lowest else float("inf"), dtype)
    if dtype.is_bool:
        return literal(not lowest, dtype)
    low, high = _BOUNDS[VALUE_TYPES[dtype]]
    return literal(low if lowest else high, dtype)


def _combine(value: Value, accumulator: str, element: str) -> str:
    """``Reduction.combine`` of the accumulator and an element, as an expression (add, mul,
    and, or)."""
    combine = reduction(value.op).combine
    if combine == "and":
        return f"{accumulator} && {element}"
    if combine == "or":
        return f"{accumulator} || {element}"
    return f"{accumulator} {'+' if combine == 'add' else '*'} {element}"


def _fold(kernel: LoopKernel, index: int, value: Value) -> tuple[list[str], list[str], str]:
    """(declarations, per-element update lines, result) of reduction ``value``."""
    fold = reduction(value.op)
    argument = f"v{value.args[0]}"
    acc = f"acc{index}"
    if fold.indexed:
        folded = kernel.values[value.args[0]].dtype
        best, at = f"best{index}", f"best_at{index}"
        comparison = COMPARISONS_OF[fold.combine]
        if is_float(folded):
            better = f"{argument} {comparison} {best}"
            if fold.keeps_nan:
                better = f"(!fuel_isnan({best}) && ({better} || fuel_isnan({argument})))"
        elif folded.is_bool:
            better = (f"({argument} && !{best})" if comparison == ">"
                      else f"(!{argument} && {best})")
        else:
            better = f"{argument} {comparison} {best}"
        return ([f"  var {best}: {VALUE_TYPES[folded]} = {literal(0, folded)};",
                 f"  var {at} = -1;"],
                [f"if ({at} < 0 || {better}) {{ {best} = {argument}; {at} = j; }}"], at)
    dtype = value.dtype
    wgsl = VALUE_TYPES[dtype]
    result = rounded(divided(value.op, acc, f"{wgsl}(row_length)"), dtype)
    if fold.combine == "add" and is_float(dtype):  # compensated, in row order
        return ([f"  var {acc}: {wgsl} = 0.0;", f"  var carry{index}: f32 = 0.0;"],
                [f"let y{index} = {argument} - carry{index};",
                 f"let t{index} = {acc} + y{index};",
                 f"carry{index} = (t{index} - {acc}) - y{index};",
                 f"{acc} = t{index};"], result)
    declarations = [f"  var {acc}: {wgsl} = {_identity(value.op, dtype)};"]
    comparison = COMPARISONS_OF.get(fold.combine)
    if comparison is None:
        return declarations, [f"{acc} = {_combine(value, acc, argument)};"], result
    if is_float(dtype):
        nan = f" || fuel_isnan({argument}) || fuel_isnan({acc})" if fold.keeps_nan else ""
        keep = f"select({argument}, {acc}, fuel_isnan({acc}))" if fold.keeps_nan else argument
        return declarations, [f"if ({argument} {comparison} {acc}{nan}) {{ {acc} = {keep}; }}"], \
            result
    if dtype.is_bool:
        operator = "||" if comparison == ">" else "&&"
        return declarations, [f"{acc} = {acc} {operator} {argument};"], result
    return declarations, [f"if ({argument} {comparison} {acc}) {{ {acc} = {argument}; }}"], \
        result


def render(kernel: LoopKernel, depth: int, row_depth: int = 1) -> str:
    """The WGSL source of any LoopKernel, elementwise or rows (``render_wgsl.render_wgsl``
    with this module's row body where the kernel reduces)."""
    return render_wgsl(kernel, depth, row_depth, row_body if kernel.reduced else None)
