"""Reductions over any dims (sum prod mean max min argmax argmin all any) and cumsum.

A reduction views its input as (kept dims) x (reduced dims) through strides: a work-group per
output element with a tree in local memory for long reductions, one work-item per output
element for short ones. One program per input dtype holds every reduction of that dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from fuel.backends.opencl.codegen import (
    OPENCL_DTYPES,
    OPENCL_INTEGER_DTYPES,
    OPENCL_NUMERIC_DTYPES,
    REDUCE_DTYPE,
    ROWS_DTYPE,
    CType,
    ProgramSpec,
    accumulator,
    ctype,
    fill_dims,
    needs_fp64,
    numel,
)
from fuel.backends.opencl.common import (
    STRIDED,
    ClKernel,
    group_size,
    kernel_list,
    launch_1d,
    use_groups,
)
from fuel.backends.opencl.runtime import cl
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind

ACCUMULATE_DTYPES = [(d, dt.int64) for d in (dt.bool_,) + OPENCL_INTEGER_DTYPES] + [
    (d, d) for d in dt.FLOAT_DTYPES
]
NUMERIC_AND_BOOL = (dt.bool_,) + OPENCL_NUMERIC_DTYPES
_C_SIZES = {"uchar": 1, "char": 1, "short": 2, "int": 4, "float": 4, "long": 8, "double": 8}


@dataclass(frozen=True)
class Reduction:
    """How one reduction accumulates: type, identity, step ``acc = f(acc, v)`` and merge."""

    accumulate: str
    identity: str
    step: str
    final: str = "acc"
    indexed: bool = False


def _extreme(t: CType, larger: bool) -> Reduction:
    better = ">" if larger else "<"
    if t.is_float:
        identity = "-INFINITY" if larger else "INFINITY"
        step = f"acc = isnan(acc) ? acc : ((isnan(v) || v {better} acc) ? v : acc);"
    else:
        bound = _integer_bound(t, minimum=larger)
        identity, step = bound, f"acc = v {better} acc ? v : acc;"
    return Reduction(t.compute, f"({t.compute})({identity})", step)


def _integer_bound(t: CType, minimum: bool) -> str:
    info = np.iinfo(t.dtype.numpy) if t.dtype is not dt.bool_ else None
    if info is None:
        return "0" if minimum else "1"
    value = int(info.min if minimum else info.max)
    return f"({value}L)" if value != -(2**63) else "(-9223372036854775807L - 1)"


def _arg(t: CType, larger: bool) -> Reduction:
    """(value, index) pairs; NaN wins, ties keep the lower index (NumPy's argmax/argmin).
    An index of -1 marks a work-item that saw no element."""
    better = ">" if larger else "<"
    wins = f"(v {better} acc || (v == acc && vi < ai))"
    if t.is_float:
        wins = f"(isnan(acc) ? (isnan(v) && vi < ai) : (isnan(v) || {wins}))"
    step = f"if (vi >= 0 && (ai < 0 || {wins})) {{ acc = v; ai = vi; }}"
    return Reduction(t.compute, f"({t.compute})0", step, "ai", indexed=True)


def reductions(source: DType) -> dict[OpKind, Reduction]:
    """The reductions registered for input dtype ``source``."""
    t = ctype(source)
    wide = accumulator(source)
    result = {
        OpKind.MAX: _extreme(t, True),
        OpKind.MIN: _extreme(t, False),
        OpKind.ARGMAX: _arg(t, True),
        OpKind.ARGMIN: _arg(t, False),
        OpKind.ALL: Reduction("int", "1", "acc = acc && (v != 0);"),
        OpKind.ANY: Reduction("int", "0", "acc = acc || (v != 0);"),
        OpKind.SUM: Reduction(wide, f"({wide})0", "acc += v;"),
        OpKind.PROD: Reduction(wide, f"({wide})1", "acc *= v;"),
    }
    if source.is_floating:
        result[OpKind.MEAN] = Reduction(wide, f"({wide})0", "acc += v;", "acc / r.nred")
    return result


def _kernel_pair(name: str, t: CType, out: CType, how: Reduction) -> str:
    """The group and serial kernels of one reduction."""
    acc = how.accumulate
    index_decl = "long ai = -1;" if how.indexed else ""
    local_index = ", __local long* indices" if how.indexed else ""
    save_index = "indices[lid] = ai;" if how.indexed else ""
    load_pair = "ai = indices[lid];" if how.indexed else ""
    other_index = "const long vi = indices[lid + s];" if how.indexed else ""
    position = "base + dims_offset(r.rshape, r.rstride, r.rndim, j)"
    element = f"const {acc} v = ({acc}){t.load('a', position)};"
    store = out.store("out", "r.out_offset + row", how.final)
    return f"""
__kernel void {name}_group(__global {out.storage}* out, __global const {t.storage}* a,
                           const reduce_t r, __local {acc}* values{local_index}) {{
    const long row = get_group_id(0);
    const int lid = get_local_id(0), size = get_local_size(0);
    const long base = r.offset + dims_offset(r.oshape, r.ostride, r.ondim, row);
    {acc} acc = {how.identity};
    {index_decl}
    for (long j = lid; j < r.nred; j += size) {{
        {element}
        const long vi = j;
        {how.step}
    }}
    values[lid] = acc;
    {save_index}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = size / 2; s > 0; s >>= 1) {{
        if (lid < s) {{
            acc = values[lid];
            {load_pair}
            const {acc} v = values[lid + s];
            {other_index}
            {how.step}
            values[lid] = acc;
            {save_index}
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    if (lid == 0) {{
        acc = values[0];
        {load_pair}
        {store}
    }}
}}
__kernel void {name}_serial(__global {out.storage}* out, __global const {t.storage}* a,
                            const reduce_t r) {{
    const long row = get_global_id(0);
    if (row >= r.nout) return;
    const long base = r.offset + dims_offset(r.oshape, r.ostride, r.ondim, row);
    {acc} acc = {how.identity};
    {index_decl}
    for (long j = 0; j < r.nred; ++j) {{
        {element}
        const long vi = j;
        {how.step}
    }}
    {store}
}}
"""


def output_dtype(op: OpKind, source: DType) -> DType:
    if op in (OpKind.ARGMAX, OpKind.ARGMIN):
        return dt.int64
    if op in (OpKind.ALL, OpKind.ANY):
        return dt.bool_
    if op in (OpKind.SUM, OpKind.PROD):
        return dt.int64 if not source.is_floating else source
    return source


@cache
def reduce_program(source: DType) -> ProgramSpec:
    """Every reduction of ``source`` (and its cumsum) in one program."""
    t = ctype(source)
    parts = [_kernel_pair(op.value, t, ctype(output_dtype(op, source)), how)
             for op, how in reductions(source).items()]
    parts.append(_cumsum_source(t, ctype(output_dtype(OpKind.SUM, source))))
    return ProgramSpec(f"reduce_{source.name}", "".join(parts), needs_fp64(source))


def reduce_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    layout, out_layout = layouts[0], layouts[-1]
    if out_layout.numel == 0:
        return
    dims = params.dims
    kept = [axis for axis in range(layout.ndim) if axis not in dims]
    reduced = [axis for axis in range(layout.ndim) if axis in dims]
    record = np.zeros((), REDUCE_DTYPE)
    record["ondim"] = fill_dims(record, "oshape", ["ostride"], [layout.shape[a] for a in kept],
                               [[layout.strides[a] for a in kept]])
    record["rndim"] = fill_dims(record, "rshape", ["rstride"],
                                [layout.shape[a] for a in reduced],
                                [[layout.strides[a] for a in reduced]])
    nout = numel([layout.shape[a] for a in kept])
    nred = numel([layout.shape[a] for a in reduced])
    if nred == 0 and kernel.settings["needs_elements"]:
        raise InvalidArgument(f"{kernel.name}: cannot reduce over an empty dimension "
                              f"(input shape {layout.shape}, dims {dims})")
    record["nout"], record["nred"] = nout, nred
    record["offset"], record["out_offset"] = layout.offset, out_layout.offset
    context = outputs[0].backend.context(outputs[0].device)
    buffers = (outputs[0].buffer, inputs[0].buffer, record)
    if use_groups(context, nout, nred):
        compiled = context.kernel(kernel.spec, f"{kernel.name}_group")
        size = group_size(context, compiled, nred)
        scratch = [cl.LocalMemory(size * kernel.settings["itemsize"])]
        if kernel.settings["indexed"]:
            scratch.append(cl.LocalMemory(size * 8))
        context.launch(compiled, (nout * size,), (size,), *buffers, *scratch)
    else:
        launch_1d(context, context.kernel(kernel.spec, f"{kernel.name}_serial"), nout,
                  *buffers)


def _cumsum_source(t: CType, out: CType) -> str:
    acc = accumulator(t.dtype)
    return f"""
__kernel void cumsum(__global {out.storage}* out, __global const {t.storage}* a,
                     const rows_t r) {{
    const long row = get_global_id(0);
    if (row >= r.nrows) return;
    const long ibase = r.ioff + dims_offset(r.shape, r.istride, r.ndim, row);
    const long obase = r.ooff + dims_offset(r.shape, r.ostride, r.ndim, row);
    {acc} acc = 0;
    for (long j = 0; j < r.len; ++j) {{
        acc += ({acc}){t.load('a', 'ibase + j * r.istep')};
        {out.store('out', 'obase + j * r.ostep', 'acc')}
    }}
}}
"""


def rows_record(layout, out_layout, dim: int) -> np.ndarray:
    """A ``rows_t``: every line along ``dim`` of ``layout`` and of ``out_layout``."""
    record = np.zeros((), ROWS_DTYPE)
    others = [axis for axis in range(layout.ndim) if axis != dim]
    record["ndim"] = fill_dims(record, "shape", ["istride", "ostride"],
                               [layout.shape[a] for a in others],
                               [[layout.strides[a] for a in others],
                                [out_layout.strides[a] for a in others]])
    record["nrows"] = numel([layout.shape[a] for a in others])
    record["len"] = layout.shape[dim] if layout.ndim else 1
    record["ioff"], record["ooff"] = layout.offset, out_layout.offset
    record["istep"] = layout.strides[dim] if layout.ndim else 0
    record["ostep"] = out_layout.strides[dim] if layout.ndim else 0
    return record


def cumsum_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    if layouts[-1].numel == 0:
        return
    record = rows_record(layouts[0], layouts[-1], params.dim)
    context, compiled = kernel.bind(outputs[0])
    launch_1d(context, compiled, int(record["nrows"]), outputs[0].buffer, inputs[0].buffer,
              record)


def _add_reductions(kernels: KernelList) -> None:
    """Add every reduction and cumsum for the CPU backend's dtype combinations."""
    for source in OPENCL_DTYPES:
        spec = reduce_program(source)
        for op, how in reductions(source).items():
            if op in (OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN) and \
                    source not in NUMERIC_AND_BOOL:
                continue
            itemsize = _C_SIZES[how.accumulate]
            kernel = ClKernel(reduce_kernel, spec, op.value, itemsize=itemsize,
                              indexed=how.indexed, needs_elements=op in (
                                  OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN))
            kernels.add(op, [(source, output_dtype(op, source))], kernel, STRIDED)
        kernels.add(OpKind.CUMSUM, [(source, output_dtype(OpKind.SUM, source))],
                    ClKernel(cumsum_kernel, spec, "cumsum"), STRIDED)


KERNELS = kernel_list()
_add_reductions(KERNELS)
