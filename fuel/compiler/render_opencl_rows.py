"""Render a LoopKernel with a row (``reduced``) into OpenCL C (or another GPU C-family
``Language``: CUDA C): reductions over any axes, row ops (softmax, norms) and scans (cumsum),
fused or alone.

The rows are the dims before the row (the kept axes: the output index), the row its last
``reduced`` dims (the reduced axes, walked as strided loops; several row dims are decoded
from the flat row index). One work-item per row (``group=False``: CPUs vectorize across rows)
or one work-group per row (``group``: a strided loop per work-item, then a tree in local
memory). Per reduction a loop over the row recomputes the per-element values its argument
needs and folds them (``kernel_ir.REDUCTIONS``; argmax/argmin fold (value, index) pairs);
per-row values follow; a last loop writes the per-element stores, folding scans in row order
(serial only).

Arguments (``OpenClProgram.arguments``): the row count, the row length, the row schedule's
(``kernel_ir.row_schedule``) rows sizes and row sizes, then per operand (loads, then stores)
its rows strides, row strides and element offset.
"""

from __future__ import annotations

from fuel.compiler.kernel_ir import (
    REDUCE_OPS,
    SCAN_OPS,
    LoopKernel,
    has_scan,
    kernel_row_schedule,
    reduction,
    row_values,
)
from fuel.compiler.render_expression import (
    combine,
    divided,
    element_dependencies,
    identity,
    index_wins,
)
from fuel.compiler.render_opencl import (
    OPENCL,
    Language,
    OpenClProgram,
    element_lines,
    head,
    uses_double,
)
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType


def render_opencl_rows(kernel: LoopKernel, group: bool, language: Language = OPENCL
                       ) -> OpenClProgram:
    """The OpenCL C (or ``language``'s) of a row kernel: a work-group per row (``group``) or a
    work-item per row. A kernel with a scan renders serially (its row is folded in order)."""
    group = group and not has_scan(kernel)
    schedule = kernel_row_schedule(kernel)
    outer_sizes, row_sizes = schedule.outer_sizes, schedule.row_sizes
    outer_strides, row_strides = schedule.outer_strides, schedule.row_strides
    arguments, offsets = [schedule.rows, schedule.length, *outer_sizes, *row_sizes], []
    for outer, row in zip(outer_strides, row_strides):
        arguments += [*outer, *row]
        offsets.append(len(arguments))
        arguments.append(0)
    for position, load in enumerate(kernel.loads):
        arguments[offsets[position]] = load.offset
    names = [f"in{k}" for k in range(len(kernel.loads))] + [
        f"out{k}" for k in range(len(kernel.stores))]
    layout = _Layout(len(outer_sizes), len(row_sizes), len(names))
    patterns = schedule.patterns
    arguments_needed = any(v.op in REDUCE_OPS and reduction(v.op).indexed
                           for v in kernel.values)
    long = language.index
    lines = head(kernel, len(arguments), group, language)
    if group:
        lines += [f"  const {long} outer = {language.group_id};",
                  f"  const {long} first = {language.local_id}, "
                  f"stride = {language.local_size};"]
    else:
        lines += [f"  const {long} outer = {language.global_id};",
                  "  if (outer >= arguments.v[0]) return;",  # (a stash must have one writer)
                  f"  const {long} first = 0, stride = 1;"]
    lines.append(f"  const {long} row = arguments.v[1];")
    lines += _bases(kernel, layout, names, patterns, language)
    index_of = [_index(name, pattern) for name, pattern in zip(names, patterns)]
    loop_head = _loop_head(layout, names, patterns, long)

    def load_index(load: int) -> str:
        return index_of[load]

    def store_index(position: int) -> str:
        return index_of[len(kernel.loads) + position]

    per_row = row_values(kernel)
    element_stores = [(k, s) for k, s in enumerate(kernel.stores) if not s.per_row]
    stash = _stash(kernel, per_row, element_stores, language)
    reductions = [i for i, v in enumerate(kernel.values) if v.op in REDUCE_OPS]
    for index, value in enumerate(kernel.values):
        if not per_row[index]:
            continue
        if value.op in REDUCE_OPS:
            stashed = stash if reductions and index == reductions[-1] else None
            lines += _reduction(kernel, index, per_row, load_index, loop_head, group, stashed,
                                store_index, language)
        else:
            lines += element_lines(kernel, [index], load_index, "  ", language)
    if element_stores:
        available = list(per_row)
        if stash is not None:
            available[stash[1]] = True
        needed = element_dependencies(kernel, [s.value for _, s in element_stores], available)
        scans = [i for i in needed if kernel.values[i].op in SCAN_OPS]
        for index in scans:
            value = kernel.values[index]
            lines.append(f"  {language.types[value.dtype]} a{index} = "
                         f"{identity(value.op, value.dtype, language.dialect)};")
        lines.append(f"  for ({long} i = first; i < row; i += stride) {{")
        lines += loop_head
        if stash is not None:
            position, value = stash
            lines.append(f"    const {language.types[kernel.values[value].dtype]} v{value} = "
                         f"out{position}[{store_index(position)}];")
        for index in needed:
            value = kernel.values[index]
            if value.op in SCAN_OPS:
                lines += [f"    a{index} = {combine(value.op, f'a{index}', f'v{value.args[0]}')};",
                          f"    const {language.types[value.dtype]} v{index} = a{index};"]
            else:
                lines += element_lines(kernel, [index], load_index, "    ", language)
        lines += ["    " + language.store(kernel, k, f"out{k}", store_index(k))
                  for k, _ in element_stores]
        lines.append("  }")
    for k, store in enumerate(kernel.stores):
        if store.per_row:
            lines.append(f"  if (first == 0) {language.store(kernel, k, f'out{k}', '0')}")
    lines += ["}", ""]
    sizes = (*outer_sizes, *row_sizes)
    return OpenClProgram("\n".join(lines), uses_double(kernel), tuple(arguments), tuple(offsets),
                         sizes, 16 if arguments_needed else 8)


class _Layout:
    """Where the arguments are: ``outer`` rows dims, ``inner`` row dims, per operand."""

    def __init__(self, outer: int, inner: int, operands: int) -> None:
        self.outer, self.inner = outer, inner
        self.sizes_at = 2
        self.first = 2 + outer + inner  # where the operands' strides start
        self.width = outer + inner + 1  # strides and offset of one operand

    def stride(self, operand: int, dim: int) -> str:
        return f"arguments.v[{self.first + operand * self.width + dim}]"

    def offset(self, operand: int) -> str:
        return f"arguments.v[{self.first + operand * self.width + self.width - 1}]"

    def size(self, dim: int) -> str:
        return f"arguments.v[{self.sizes_at + dim}]"


def _index(name: str, pattern: str) -> str:
    return {"dense": "i", "broadcast": "0", "strided": f"i * step_{name}",
            "decoded": f"at_{name}"}[pattern]


def _bases(kernel: LoopKernel, layout: _Layout, names: list[str], patterns: list[str],
           language: Language) -> list[str]:
    """Each operand's pointer at row ``outer`` (decoded over the rows sizes) and, for a
    strided row, its step."""
    operands = range(len(names))
    long = language.index
    lines = [f"  {long} base{k} = {layout.offset(k)};" for k in operands]
    if layout.outer:
        lines.append(f"  {long} rest = outer;")
        for d in range(layout.outer - 1, -1, -1):
            lines.append(f"  {{ const {long} size = {layout.size(d)}, position = rest % size; "
                         "rest /= size;")
            lines += [f"    base{k} += position * {layout.stride(k, d)};" for k in operands]
            lines.append("  }")
    loads = len(kernel.loads)
    for k, name in enumerate(names):
        if k < loads:
            lines.append(f"  {language.pointer}const {language.storage(kernel.loads[k].dtype)} "
                         f"*{name} = data{k} + base{k};")
        else:
            lines.append(f"  {language.pointer}{language.storage(kernel.stores[k - loads].dtype)}"
                         f" *{name} = result{k - loads} + base{k};")
        if patterns[k] == "strided":
            lines.append(f"  const {long} step_{name} = {layout.stride(k, layout.outer)};")
    return lines


def _loop_head(layout: _Layout, names: list[str], patterns: list[str], long: str
               ) -> list[str]:
    """Inside a loop over the row: the offsets of operands whose row has several dims."""
    decoded = [k for k, pattern in enumerate(patterns) if pattern == "decoded"]
    if not decoded:
        return []
    lines = ["    " + " ".join(f"{long} at_{names[k]} = 0;" for k in decoded),
             f"    {{ {long} left = i;"]
    for d in range(layout.inner - 1, -1, -1):
        dim = layout.outer + d
        lines.append(f"      {{ const {long} size = {layout.size(dim)}, "
                     "position = left % size; left /= size;")
        lines += [f"        at_{names[k]} += position * {layout.stride(k, dim)};"
                  for k in decoded]
        lines.append("      }")
    lines.append("    }")
    return lines


def _stash(kernel: LoopKernel, per_row: list[bool], element_stores, language: Language
           ) -> tuple[int, int] | None:
    """(store position, value): a per-element value the last reduction's loop computes and the
    store loop needs again, kept in the output between the two loops instead of recomputed
    (softmax's exp: one exp per element, not two). None when there is none worth it (a load),
    the output's storage is not the value's type (a half type, a bool), or a scan runs."""
    reductions = [i for i, v in enumerate(kernel.values) if v.op in REDUCE_OPS]
    if not reductions or len(element_stores) != 1 or has_scan(kernel):
        return None
    position, store = element_stores[0]
    if language.storage(store.dtype) != language.types[store.dtype]:
        return None
    computed = element_dependencies(kernel, [kernel.values[reductions[-1]].args[0]], per_row)
    needed = set(element_dependencies(kernel, [store.value], per_row))
    shared = [i for i in computed if i in needed and kernel.values[i].op not in ("load", "constant")
              and kernel.values[i].dtype is store.dtype]
    return (position, shared[-1]) if shared else None


def accumulator_type(dtype: DType, language: Language = OPENCL) -> str:
    """The type a fold of ``dtype`` values accumulates in (truth values in an int: OpenCL
    keeps no bool in local memory)."""
    return "int" if dtype is dt.bool_ else language.types[dtype]


def _reduction(kernel: LoopKernel, index: int, per_row: list[bool], load_index, loop_head,
               group: bool, stash, store_index, language: Language) -> list[str]:
    """Fold the argument over the row: a strided loop per work-item, then (``group``) a tree
    over the work-group in local memory. ``stash``: (store, value) to write to the output."""
    value = kernel.values[index]
    op = value.op
    indexed = reduction(op).indexed
    argument = value.args[0]
    folded = kernel.values[argument].dtype if indexed else value.dtype
    ctype = accumulator_type(folded, language)
    accumulator = f"a{index}"
    long, local, barrier = language.index, language.local, language.barrier
    body = [*loop_head,
            *element_lines(kernel, element_dependencies(kernel, [argument], per_row), load_index,
                           "    ", language)]
    if stash is not None:
        body.append(f"    out{stash[0]}[{store_index(stash[0])}] = v{stash[1]};")
    if indexed:
        return _argument_reduction(index, op, folded, ctype, argument, body, group, language)
    lines = [f"  {ctype} {accumulator} = {identity(op, folded, language.dialect)};",
             f"  for ({long} i = first; i < row; i += stride) {{",
             *body,
             f"    {accumulator} = {combine(op, accumulator, f'v{argument}')};",
             "  }"]
    if group:
        lines += [f"  {{ {local}{ctype} *partial = ({local}{ctype} *)scratch;",
                  f"    partial[first] = {accumulator};",
                  f"    {barrier};",
                  f"    for ({long} width = stride / 2; width > 0; width >>= 1) {{",
                  "      if (first < width) {",
                  f"        const {ctype} x = partial[first + width], acc = partial[first];",
                  f"        partial[first] = {combine(op, 'acc', 'x')};",
                  "      }",
                  f"      {barrier};",
                  "    }",
                  f"    {accumulator} = partial[0];",
                  f"    {barrier};",
                  "  }"]
    result = divided(op, accumulator, f"({ctype})row")
    lines.append(f"  const {language.types[value.dtype]} v{index} = {result};")
    return lines


def _argument_reduction(index: int, op: str, folded: DType, ctype: str, argument: int,
                        body: list[str], group: bool, language: Language) -> list[str]:
    """argmax/argmin: fold (value, row index) pairs; the index is the result."""
    best, best_index = f"a{index}", f"ai{index}"
    long, local, barrier = language.index, language.local, language.barrier
    lines = [f"  {ctype} {best} = 0;", f"  {long} {best_index} = -1;",
             f"  for ({long} i = first; i < row; i += stride) {{",
             *body,
             f"    if ({index_wins(op, folded, f'v{argument}', 'i', best, best_index)}) "
             f"{{ {best} = v{argument}; {best_index} = i; }}",
             "  }"]
    if group:
        lines += [f"  {{ {local}{ctype} *partial = ({local}{ctype} *)scratch;",
                  f"    {local}{long} *indices = ({local}{long} *)(scratch + 8 * stride);",
                  f"    partial[first] = {best}; indices[first] = {best_index};",
                  f"    {barrier};",
                  f"    for ({long} width = stride / 2; width > 0; width >>= 1) {{",
                  "      if (first < width) {",
                  f"        const {ctype} x = partial[first + width], acc = partial[first];",
                  f"        const {long} xi = indices[first + width], ai = indices[first];",
                  f"        if ({index_wins(op, folded, 'x', 'xi', 'acc', 'ai')}) "
                  "{ partial[first] = x; indices[first] = xi; }",
                  "      }",
                  f"      {barrier};",
                  "    }",
                  f"    {best_index} = indices[0];",
                  f"    {barrier};",
                  "  }"]
    lines.append(f"  const {long} v{index} = {best_index};")
    return lines
