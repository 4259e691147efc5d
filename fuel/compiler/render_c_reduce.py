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

from fuel.compiler.kernel_ir import (
    REDUCE_OPS,
    SCAN_OPS,
    LoopKernel,
    reduction,
    row_schedule,
    row_values,
    store_strides,
)
from fuel.compiler.render_c import (
    C_DIALECT,
    C_TYPES,
    VECTOR_FUNCTIONS,
    CProgram,
    _expression,
    _vector_declarations,
    helpers,
    outer_inputs,
    prelude,
    storage_type,
    stored,
)
from fuel.compiler.render_expression import (
    COMPARISONS_OF,
    combine,
    divided,
    element_dependencies,
    identity,
    index_wins,
)
from fuel.ir import dtype as dt

# A row kernel's launch with at least this many elements runs its rows on OpenMP threads (the
# default the judge's timed variants, serial and parallel, compete with). 2^17 was a guess; the
# judge's timings on the 2-core Sapphire Rapids Xeon (MiniLM's norms, softmax and GELU rows,
# buckets of 2^15 to 2^23 elements) picked the parallel rows in 22 of 23 buckets, 1.4-2x
# faster (2^15: 12.8 against 19.0 us, a softmax 106 against 204 us), the 23rd within the margin.
# So the rule runs rows in parallel wherever the judge would time them (SMALLEST_CONTEST).
PARALLEL_ROWS = 1 << 14


def render_c_reduce(kernel: LoopKernel, vector_math: bool = False,
                    parallel: bool = False) -> CProgram:
    """The C source of a row-reduction ``kernel`` and its sizes/strides arguments.
    ``parallel``: the rows run on OpenMP threads when a launch has at least as many elements
    as the launch argument after the sizes (``sizes[rows dims + row dims]``, which the
    program's sizes end with: ``PARALLEL_ROWS``; the kernel's launcher may change it)."""
    strided = [k for k, store in enumerate(kernel.stores) if store.strides is not None]
    operands = [load.strides for load in kernel.loads] + [store_strides(kernel, k)
                                                         for k in strided]
    schedule = row_schedule(kernel.shape, kernel.reduced, operands)
    sizes, strides = schedule.outer_sizes, schedule.outer_strides
    row_sizes, row_strides = schedule.row_sizes, schedule.row_strides
    depth = len(sizes)
    patterns = schedule.patterns
    per_row = row_values(kernel)
    lines = [prelude(kernel), *(_vector_declarations(kernel) if vector_math else ()),
             *(["#include <string.h>"] if vector_math else []),
             *helpers(kernel),
             "void fuel_kernel(char **data, const int64_t *sizes, const int64_t *strides) {",
             f"  const int64_t row = sizes[{depth}];" if len(row_sizes) == 1 else
             f"  int64_t row = 1; for (int d = {depth}; d < {depth + len(row_sizes)}; d++) "
             "row *= sizes[d];",
             "  int64_t outer_count = 1;",
             f"  for (int d = 0; d < {depth}; d++) outer_count *= sizes[d];"]
    width = depth + len(row_sizes)
    if parallel:
        lines.append(f"  #pragma omp parallel for schedule(static) "
                     f"if (outer_count * row >= sizes[{width}])")
    lines.append("  for (int64_t outer = 0; outer < outer_count; outer++) {")
    lines += outer_inputs(kernel, patterns, depth, width)
    lines += _stores(kernel, strided, patterns[len(kernel.loads):], depth, width)
    loop_head = _decode(patterns, depth, len(row_sizes), width, len(kernel.loads))
    element_stores = [(p, s) for p, s in enumerate(kernel.stores) if not s.per_row]
    kept = _kept_in_output(kernel, per_row, strided, element_stores) if KEEP_IN_OUTPUT else None
    for index, value in enumerate(kernel.values):
        if not per_row[index]:
            continue
        if value.op in REDUCE_OPS:
            keep = (f"      out{kept[1]}[i] = v{kept[0]};"
                    if kept is not None and index == kept[2] else None)
            lines += _reduction(kernel, index, per_row, patterns, loop_head, keep,
                                vector_math and _tail_fits(kernel, patterns, strided))
        else:
            lines.append(f"    const {C_TYPES[value.dtype]} v{index} = "
                         f"{_expression(kernel, value, patterns)};")
    if element_stores:
        available = per_row
        if kept is not None:  # the kept value is read back, not computed again
            available = list(per_row)
            available[kept[0]] = True
        needed = element_dependencies(kernel, [s.value for _, s in element_stores], available)
        for index in needed:
            if kernel.values[index].op in SCAN_OPS:
                lines.append(f"    {C_TYPES[kernel.values[index].dtype]} a{index} = 0;")
        body = list(loop_head)
        if kept is not None:
            body.append(f"      const {C_TYPES[kernel.values[kept[0]].dtype]} v{kept[0]} = "
                        f"out{kept[1]}[i];")
        body += _element_lines(kernel, needed, patterns, "      ")
        for position, store in element_stores:
            body.append(f"      out{position}[{_store_index(kernel, position, strided, patterns)}]"
                        f" = {stored(store)};")
        if vector_math and _calls_vector_function(kernel, needed) and \
                _tail_fits(kernel, patterns, strided):
            lines += _with_vector_tail(kernel, patterns, None, body)
        else:
            lines += ["    for (int64_t i = 0; i < row; i++) {", *body, "    }"]
    for position, store in enumerate(kernel.stores):
        if store.per_row:
            lines.append(f"    out{position}[0] = {stored(store)};")
    lines += ["  }", "}", ""]
    flat = tuple(s for own, row in zip(strides, row_strides) for s in (*own, *row))
    tail = (PARALLEL_ROWS,) if parallel else ()
    return CProgram("\n".join(lines), (*sizes, *row_sizes, *tail), flat,
                    width if parallel else None)


# The last reduction's loop writes the most derived per-element value it shares with the
# element loop into the output row, which the element loop reads back instead of computing it
# again (softmax's exp, layer norm's centred input): the same operations on the same operands,
# one exp per element fewer (and the sum then adds exactly the exps the row divides).
KEEP_IN_OUTPUT = True


def _kept_in_output(kernel: LoopKernel, per_row: list[bool], strided: list[int],
                    element_stores: list) -> tuple[int, int, int] | None:
    """(value, store position, reduction): the per-element value the last reduction's loop
    and the element loop both compute, the most derived one, when the kernel has one dense
    element store of that value's own floating dtype and no running fold; else None."""
    if len(element_stores) != 1 or any(v.op in SCAN_OPS for v in kernel.values):
        return None
    position, store = element_stores[0]
    if position in strided or store.dtype not in (dt.float32, dt.float64):
        return None
    reductions = [i for i, v in enumerate(kernel.values) if per_row[i] and v.op in REDUCE_OPS]
    if not reductions:
        return None
    last = reductions[-1]
    shared = set(element_dependencies(kernel, [kernel.values[last].args[0]], per_row))
    shared &= set(element_dependencies(kernel, [store.value], per_row))
    candidates = [i for i in shared if kernel.values[i].dtype is store.dtype
                  and kernel.values[i].op != "load"]
    if not candidates:
        return None
    return max(candidates), position, last


def _stores(kernel: LoopKernel, strided: list[int], patterns: list[str], depth: int,
            width: int) -> list[str]:
    """Each store's pointer at this row: dense ones at ``outer`` (per row) or ``outer * row``,
    strided ones at their strides' offset (strides after the loads', ``width`` each)."""
    lines = []
    for position, store in enumerate(kernel.stores):
        ctype = storage_type(store.dtype)
        pointer = f"({ctype} *)data[{len(kernel.loads) + position}]"
        if position not in strided:
            offset = "outer" if store.per_row else "outer * row"
            lines.append(f"    {ctype} *restrict out{position} = {pointer} + {offset};")
            continue
        operand = len(kernel.loads) + strided.index(position)
        lines += [f"    int64_t base_out{position} = 0;", "    {", "      int64_t rest = outer;",
                  f"      for (int d = {depth - 1}; d >= 0; d--) {{",
                  "        const int64_t index = rest % sizes[d]; rest /= sizes[d];",
                  f"        base_out{position} += index * strides[{operand * width} + d];",
                  "      }", "    }",
                  f"    {ctype} *restrict out{position} = {pointer} + base_out{position};"]
        if patterns[strided.index(position)] == "strided":
            lines.append(f"    const int64_t step_out{position} = "
                         f"strides[{operand * width + width - 1}];")
    return lines


def _store_index(kernel: LoopKernel, position: int, strided: list[int], patterns: list[str]
                 ) -> str:
    if position not in strided:
        return "i"
    pattern = patterns[len(kernel.loads) + strided.index(position)]
    operand = len(kernel.loads) + strided.index(position)
    return {"dense": "i", "broadcast": "0", "strided": f"i * step_out{position}",
            "decoded": f"at{operand}"}[pattern]


def _decode(patterns: list[str], depth: int, row_depth: int, width: int, loads: int
            ) -> list[str]:
    """Inside a loop over a row of several dims: each decoded operand's offset ``at<k>``
    (loads' ``k`` is theirs; strided stores' follow the loads)."""
    decoded = [k for k, pattern in enumerate(patterns) if pattern == "decoded"]
    if not decoded:
        return []
    lines = ["      " + " ".join(f"int64_t at{k} = 0;" for k in decoded),
             "      { int64_t left = i;",
             f"        for (int d = {depth + row_depth - 1}; d >= {depth}; d--) {{",
             "          const int64_t index = left % sizes[d]; left /= sizes[d];"]
    lines += [f"          at{k} += index * strides[{k * width} + d];" for k in decoded]
    return lines + ["        }", "      }"]


def _element_lines(kernel: LoopKernel, needed: list[int], patterns: list[str], indent: str
                   ) -> list[str]:
    lines = []
    for i in needed:
        value = kernel.values[i]
        ctype = C_TYPES[value.dtype]
        if value.op in SCAN_OPS:  # the running fold, in row order
            lines += [f"{indent}a{i} += v{value.args[0]};", f"{indent}const {ctype} v{i} = a{i};"]
        else:
            lines.append(f"{indent}const {ctype} v{i} = {_expression(kernel, value, patterns)};")
    return lines


# The OpenMP reduction operator of each ``Reduction.combine`` folded as a SIMD reduction.
_SIMD_COMBINES = {"add": "+", "mul": "*", "and": "&&", "or": "||"}


def _reduction(kernel: LoopKernel, index: int, per_row: list[bool], patterns: list[str],
               loop_head: list[str], keep: str | None = None,
               tail_fits: bool = False) -> list[str]:
    """One loop over the row folding the argument into an accumulator, vectorized through an
    OpenMP SIMD reduction (``-fopenmp-simd``: no threads); float max and min track NaN apart;
    argmax and argmin fold (value, index) pairs in order. ``keep``: a line the loop also runs
    (the store of a value the element loop reads back). ``tail_fits``: a sum whose terms call
    a vector math function ends the row with a vector tail (``_with_vector_tail``)."""
    value = kernel.values[index]
    op = value.op
    fold = reduction(op)
    argument = value.args[0]
    ctype = C_TYPES[value.dtype]
    accumulator = f"a{index}"
    needed = element_dependencies(kernel, [argument], per_row)
    body = [*loop_head, *_element_lines(kernel, needed, patterns, "      ")]
    if keep is not None:
        body.append(keep)
    if fold.indexed:
        folded = kernel.values[argument].dtype
        best = C_TYPES[folded]
        wins = index_wins(op, folded, f"v{argument}", "i", accumulator, f"ai{index}")
        return [f"    {best} {accumulator} = 0;", f"    int64_t ai{index} = -1;",
                "    for (int64_t i = 0; i < row; i++) {", *body,
                f"      if ({wins}) {{ {accumulator} = v{argument}; ai{index} = i; }}", "    }",
                f"    const int64_t v{index} = ai{index};"]
    if fold.combine == "add":
        wide = "double" if value.dtype is dt.float32 else ctype
    else:
        wide = "int" if value.dtype is dt.bool_ else ctype
    term = f"({wide})v{argument}"
    simd = _SIMD_COMBINES.get(fold.combine)
    if simd == "+" and wide in ("double", "float") and tail_fits and \
            _calls_vector_function(kernel, needed):
        lines = [f"    {wide} {accumulator} = {identity(op, value.dtype, C_DIALECT)};",
                 *_with_vector_tail(kernel, patterns, (accumulator, wide, term), body)]
        result = divided(op, accumulator, "(double)row")
    elif simd is not None:
        lines = [f"    {wide} {accumulator} = {identity(op, value.dtype, C_DIALECT)};",
                 f"    #pragma omp simd reduction({simd}:{accumulator})",
                 "    for (int64_t i = 0; i < row; i++) {",
                 *body,
                 f"      {accumulator} += {term};" if simd == "+" else
                 f"      {accumulator} = {combine(op, accumulator, term)};",
                 "    }"]
        result = divided(op, accumulator, "(double)row")
    elif not value.dtype.is_floating:
        lines = [f"    {wide} {accumulator} = {identity(op, value.dtype, C_DIALECT)};",
                 f"    #pragma omp simd reduction({fold.combine}:{accumulator})",
                 "    for (int64_t i = 0; i < row; i++) {",
                 *body,
                 f"      {accumulator} = {combine(op, accumulator, term)};",
                 "    }"]
        result = accumulator
    else:
        comparison = COMPARISONS_OF[fold.combine]
        nan = f"n{index}"
        lines = [f"    {wide} {accumulator} = {identity(op, value.dtype, C_DIALECT)};",
                 f"    int {nan} = 0;",
                 f"    #pragma omp simd reduction({fold.combine}:{accumulator}) "
                 f"reduction(|:{nan})",
                 "    for (int64_t i = 0; i < row; i++) {",
                 *body,
                 f"      {accumulator} = {term} {comparison} {accumulator} ? {term} : "
                 f"{accumulator};",
                 f"      {nan} |= v{argument} != v{argument};",
                 "    }",
                 f"    if ({nan}) {accumulator} = NAN;  /* NaN propagates, as NumPy's */"
                 if fold.keeps_nan else ""]
        result = accumulator
    lines.append(f"    const {ctype} v{index} = ({ctype})({result});")
    return lines


# A row loop that calls a vector math function (libmvec's expf, ...) runs whole vectors of
# TAIL_LANES elements, then its last partial vector as one more vector of TAIL_LANES lanes over
# local copies: each dense input's remaining elements, the row's last one repeated to fill the
# lanes, and each dense output written back for the lanes inside the row (a lane past the row
# adds nothing to a sum: its term's bits are masked, so an infinite or NaN term of the repeated
# element is not added twice). The compiler's own remainder loop calls the scalar function once
# per element: a softmax row of 12 floats cost 3.5x one of 16 (8 x 12 heads x 12 x 12: 230 us
# against 100 for 16 x 16 rows, Xeon, one thread).
TAIL_LANES = 16


def _calls_vector_function(kernel: LoopKernel, needed: list[int]) -> bool:
    """Whether computing the values ``needed`` calls a vector math function (and no running
    fold needs the row's order)."""
    ops = [kernel.values[i].op for i in needed]
    return any(op in VECTOR_FUNCTIONS for op in ops) and not any(op in SCAN_OPS for op in ops)


def _tail_fits(kernel: LoopKernel, patterns: list[str], strided: list[int]) -> bool:
    """Whether the tail's local copies cover every operand: loads dense or broadcast along the
    row, stores dense."""
    return not strided and all(p in ("dense", "broadcast")
                               for p in patterns[:len(kernel.loads)])


def _with_vector_tail(kernel: LoopKernel, patterns: list[str],
                      accumulate: tuple[str, str, str] | None, body: list[str]) -> list[str]:
    """The row loop over ``body`` (which reads ``in<k>[i]`` and writes ``out<k>[i]``) as whole
    vectors, then the tail vector over local copies (``_tail_fits``). ``accumulate``:
    (accumulator, its C type, the term) of a sum the loop folds."""
    lines = ["    {", f"    const int64_t whole = row & ~(int64_t){TAIL_LANES - 1};"]
    fold = [] if accumulate is None else [f"      {accumulate[0]} += {accumulate[2]};"]
    pragma = ("#pragma omp simd" if accumulate is None
              else f"#pragma omp simd reduction(+:{accumulate[0]})")
    lines += ["    " + pragma, "    for (int64_t i = 0; i < whole; i++) {", *body, *fold, "    }"]
    dense = [k for k in range(len(kernel.loads)) if patterns[k] == "dense"]
    stores = [k for k, store in enumerate(kernel.stores) if not store.per_row]
    tail = ["    if (whole < row) {", "      const int64_t left = row - whole;"]
    for k in dense:
        ctype = storage_type(kernel.loads[k].dtype)
        tail += [f"      {ctype} tail_in{k}[{TAIL_LANES}];",
                 f"      for (int64_t lane = 0; lane < {TAIL_LANES}; lane++) "
                 f"tail_in{k}[lane] = in{k}[whole + (lane < left ? lane : left - 1)];"]
    for k in stores:  # filled too: an element loop may read back what a reduction kept there
        tail += [f"      {storage_type(kernel.stores[k].dtype)} tail_out{k}[{TAIL_LANES}];",
                 f"      for (int64_t lane = 0; lane < {TAIL_LANES}; lane++) "
                 f"tail_out{k}[lane] = out{k}[whole + (lane < left ? lane : left - 1)];"]
    tail.append("      {")  # the copies stand in for the row's pointers
    tail += [f"        const {storage_type(kernel.loads[k].dtype)} *restrict in{k} = tail_in{k};"
             for k in dense]
    tail += [f"        {storage_type(kernel.stores[k].dtype)} *restrict out{k} = tail_out{k};"
             for k in stores]
    tail += ["        " + pragma, f"        for (int64_t i = 0; i < {TAIL_LANES}; i++) {{",
             *["    " + line for line in body]]
    if accumulate is not None:
        name, ctype, term = accumulate
        bits = "uint64_t" if ctype == "double" else "uint32_t"
        tail += [f"          {ctype} term = {term};",
                 f"          {bits} term_bits; memcpy(&term_bits, &term, sizeof term);",
                 f"          term_bits &= -({bits})(i < left);",
                 "          memcpy(&term, &term_bits, sizeof term);",
                 f"          {name} += term;"]
    tail += ["        }", "      }"]
    tail += [f"      for (int64_t lane = 0; lane < left; lane++) "
             f"out{k}[whole + lane] = tail_out{k}[lane];" for k in stores]
    return lines + tail + ["    }", "    }"]
