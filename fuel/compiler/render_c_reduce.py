"""Render a LoopKernel with a reduction (``reduced``) into C: one pass of rows.

The loop nest is rows (every dim but the last, flattened) by one row (the last dim). Per row,
each reduction gets its own loop over the row that recomputes the per-element values its
argument needs and folds them into an accumulator through an OpenMP SIMD reduction (the
vector lanes' partial results are combined at the end, so sums are reassociated, as NumPy's
pairwise sums are); per-row values follow in order; a last loop writes the per-element
stores. float32 sums accumulate in double. A row of a few thousand floats stays in the L1/L2
cache between its loops, so the input is read from memory once.

Signature as ``render_c``: ``fuel_kernel(data, sizes, strides)`` with ``sizes`` (rows..., row)
and ``strides`` each load's strides per collapsed rows dim, then its row stride.
"""

from __future__ import annotations

from fuel.compiler.kernel_ir import REDUCE_OPS, LoopKernel, collapse, row_values
from fuel.compiler.render_c import (
    C_TYPES,
    CProgram,
    _expression,
    _vector_declarations,
    outer_inputs,
    prelude,
    storage_type,
    stored,
)
from fuel.compiler.render_expression import element_dependencies
from fuel.ir import dtype as dt

_INITIAL = {"max": "-INFINITY", "min": "INFINITY"}


def render_c_reduce(kernel: LoopKernel, vector_math: bool = False) -> CProgram:
    """The C source of a row-reduction ``kernel`` and its sizes/strides arguments."""
    rows_shape = kernel.shape[:-1]
    row = kernel.shape[-1]
    sizes, strides = collapse(rows_shape, [load.strides[:-1] for load in kernel.loads])
    depth = len(sizes)
    row_strides = [load.strides[-1] for load in kernel.loads]
    patterns = ["dense" if s == 1 else "broadcast" if s == 0 else "strided" for s in row_strides]
    per_row = row_values(kernel)
    lines = [prelude(kernel), *(_vector_declarations(kernel) if vector_math else ()),
             "void fuel_kernel(char **data, const int64_t *sizes, const int64_t *strides) {",
             f"  const int64_t row = sizes[{depth}];",
             "  int64_t outer_count = 1;",
             f"  for (int d = 0; d < {depth}; d++) outer_count *= sizes[d];",
             "  for (int64_t outer = 0; outer < outer_count; outer++) {"]
    lines += outer_inputs(kernel, patterns, depth, depth + 1)
    for position, store in enumerate(kernel.stores):
        ctype = storage_type(store.dtype)
        offset = "outer" if store.per_row else "outer * row"
        lines.append(f"    {ctype} *restrict out{position} = "
                     f"({ctype} *)data[{len(kernel.loads) + position}] + {offset};")
    for index, value in enumerate(kernel.values):
        if not per_row[index]:
            continue
        if value.op in REDUCE_OPS:
            lines += _reduction(kernel, index, per_row, patterns)
        else:
            lines.append(f"    const {C_TYPES[value.dtype]} v{index} = "
                         f"{_expression(kernel, value, patterns)};")
    element_stores = [(p, s) for p, s in enumerate(kernel.stores) if not s.per_row]
    if element_stores:
        needed = element_dependencies(kernel, [s.value for _, s in element_stores], per_row)
        lines.append("    for (int64_t i = 0; i < row; i++) {")
        lines += _element_lines(kernel, needed, patterns, "      ")
        for position, store in element_stores:
            lines.append(f"      out{position}[i] = {stored(store)};")
        lines.append("    }")
    for position, store in enumerate(kernel.stores):
        if store.per_row:
            lines.append(f"    out{position}[0] = {stored(store)};")
    lines += ["  }", "}", ""]
    flat = tuple(s for load, r in zip(strides, row_strides) for s in (*load, r))
    return CProgram("\n".join(lines), (*sizes, row), flat)


def _element_lines(kernel: LoopKernel, needed: list[int], patterns: list[str], indent: str
                   ) -> list[str]:
    return [f"{indent}const {C_TYPES[kernel.values[i].dtype]} v{i} = "
            f"{_expression(kernel, kernel.values[i], patterns)};" for i in needed]


def _reduction(kernel: LoopKernel, index: int, per_row: list[bool], patterns: list[str]
               ) -> list[str]:
    """One loop over the row folding the argument into an accumulator, vectorized through an
    OpenMP SIMD reduction (``-fopenmp-simd``: no threads); max and min track NaN apart."""
    value = kernel.values[index]
    op = value.op
    argument = value.args[0]
    ctype = C_TYPES[value.dtype]
    wide = "double" if op in ("sum", "mean") and value.dtype is dt.float32 else ctype
    accumulator = f"a{index}"
    needed = element_dependencies(kernel, [argument], per_row)
    body = _element_lines(kernel, needed, patterns, "      ")
    term = f"({wide})v{argument}"
    if op in ("sum", "mean"):
        lines = [f"    {wide} {accumulator} = 0;",
                 f"    #pragma omp simd reduction(+:{accumulator})",
                 "    for (int64_t i = 0; i < row; i++) {",
                 *body,
                 f"      {accumulator} += {term};",
                 "    }"]
        result = f"{accumulator} / (double)row" if op == "mean" else accumulator
    else:
        comparison = ">" if op == "max" else "<"
        nan = f"n{index}"
        lines = [f"    {wide} {accumulator} = {_INITIAL[op]};",
                 f"    int {nan} = 0;",
                 f"    #pragma omp simd reduction({op}:{accumulator}) reduction(|:{nan})",
                 "    for (int64_t i = 0; i < row; i++) {",
                 *body,
                 f"      {accumulator} = {term} {comparison} {accumulator} ? {term} : "
                 f"{accumulator};",
                 f"      {nan} |= v{argument} != v{argument};",
                 "    }",
                 f"    if ({nan}) {accumulator} = NAN;  /* NaN propagates, as NumPy's */"]
        result = accumulator
    lines.append(f"    const {ctype} v{index} = ({ctype})({result});")
    return lines
