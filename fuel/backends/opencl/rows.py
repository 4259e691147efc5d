"""Row kernels: softmax and log_softmax along any dim (strided), layer_norm and rms_norm over the
trailing dims (dense rows). Long rows get a work-group each with tree reductions in local
memory; short rows one work-item each. Half types compute in float."""

from __future__ import annotations

from functools import cache

import numpy as np

from fuel.backends.opencl.codegen import (
    ROWS_DTYPE,
    CType,
    ProgramSpec,
    accumulator,
    ctype,
    needs_fp64,
)
from fuel.backends.opencl.common import (
    DENSE,
    STRIDED,
    ClKernel,
    group_size,
    kernel_list,
    launch_1d,
    use_groups,
)
from fuel.backends.opencl.reduce import rows_record
from fuel.backends.opencl.runtime import cl
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

_TREES = """
inline {a} tree_sum(__local {a}* scratch, {a} value) {{
    const int lid = get_local_id(0), size = get_local_size(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = size / 2; s > 0; s >>= 1) {{
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    const {a} result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}}
inline {a} max_nan({a} a, {a} b) {{ return isnan(a) ? a : ((isnan(b) || b > a) ? b : a); }}
inline {a} tree_max(__local {a}* scratch, {a} value) {{
    const int lid = get_local_id(0), size = get_local_size(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = size / 2; s > 0; s >>= 1) {{
        if (lid < s) scratch[lid] = max_nan(scratch[lid], scratch[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    const {a} result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}}
"""


def _frame(name: str, t: CType, group: bool, extra_args: str, body: str) -> str:
    """A row kernel: ``body`` sees ``ibase``/``obase``, loops with FOR and reduces with
    SUM(x)/MAX(x) (trees in local memory in the group variant, identities otherwise)."""
    a = accumulator(t.dtype)
    if group:
        head = (f"__kernel void {name}_group(__global {t.storage}* out, "
                f"__global const {t.storage}* a, const rows_t r{extra_args}, "
                f"__local {a}* scratch) {{\n    const long row = get_group_id(0);\n"
                "    const long first = get_local_id(0), step = get_local_size(0);\n")
        body = body.replace("SUM(", "tree_sum(scratch, ").replace("MAX(", "tree_max(scratch, ")
    else:
        head = (f"__kernel void {name}_serial(__global {t.storage}* out, "
                f"__global const {t.storage}* a, const rows_t r{extra_args}) {{\n"
                "    const long row = get_global_id(0);\n    if (row >= r.nrows) return;\n"
                "    const long first = 0, step = 1;\n")
        body = body.replace("SUM(", "(").replace("MAX(", "(")
    body = body.replace("FOR", "for (long j = first; j < r.len; j += step)")
    return (head + "    const long ibase = r.ioff + dims_offset(r.shape, r.istride, r.ndim, row);\n"
            "    const long obase = r.ooff + dims_offset(r.shape, r.ostride, r.ndim, row);\n"
            + body + "}\n")


def _softmax_body(t: CType, log: bool) -> str:
    a = accumulator(t.dtype)
    x = f"(({a}){t.load('a', 'ibase + j * r.istep')})"
    if not log and t.storage == a:  # keep exp(x - peak) in the output: one exp per element
        return f"""
    {a} peak = -INFINITY;
    FOR peak = max_nan(peak, {x});
    peak = MAX(peak);
    {a} total = 0;
    FOR {{
        const {a} e = exp({x} - peak);
        out[obase + j * r.ostep] = e;
        total += e;
    }}
    total = SUM(total);
    const {a} scale = ({a})1 / total;
    FOR out[obase + j * r.ostep] *= scale;
"""
    result = "shifted - log(total)" if log else "exp(shifted) / total"
    return f"""
    {a} peak = -INFINITY;
    FOR peak = max_nan(peak, {x});
    peak = MAX(peak);
    {a} total = 0;
    FOR total += exp({x} - peak);
    total = SUM(total);
    FOR {{
        const {a} shifted = {x} - peak;
        {t.store('out', 'obase + j * r.ostep', result)}
    }}
"""


def _norm_body(t: CType, rms: bool) -> str:
    a = accumulator(t.dtype)
    x = f"(({a}){t.load('a', 'ibase + j')})"
    w = f"(({a}){t.load('weight', 'woff + j')})"
    if rms:
        return f"""
    {a} squares = 0;
    FOR squares += {x} * {x};
    const {a} scale = ({a})1 / sqrt(SUM(squares) / ({a})r.len + eps);
    FOR {t.store('out', 'obase + j', f'{x} * scale * {w}')}
"""
    b = f"(({a}){t.load('bias', 'boff + j')})"
    return f"""
    {a} total = 0;
    FOR total += {x};
    const {a} mean = SUM(total) / ({a})r.len;
    {a} squares = 0;
    FOR squares += ({x} - mean) * ({x} - mean);
    const {a} deviation = sqrt(SUM(squares) / ({a})r.len + eps);
    FOR {t.store('out', 'obase + j', f'({x} - mean) / deviation * {w} + {b}')}
"""


@cache
def rows_program(dtype) -> ProgramSpec:
    """softmax, log_softmax, layer_norm and rms_norm kernels for one float dtype."""
    t = ctype(dtype)
    a = accumulator(dtype)
    weight = f", __global const {t.storage}* weight, long woff"
    bias = f", __global const {t.storage}* bias, long boff"
    norm_args = {"layer_norm": f"{weight}{bias}, {a} eps", "rms_norm": f"{weight}, {a} eps"}
    parts = [_TREES.format(a=a)]
    for group in (True, False):
        parts.append(_frame("softmax", t, group, "", _softmax_body(t, log=False)))
        parts.append(_frame("log_softmax", t, group, "", _softmax_body(t, log=True)))
        parts.append(_frame("layer_norm", t, group, norm_args["layer_norm"],
                            _norm_body(t, rms=False)))
        parts.append(_frame("rms_norm", t, group, norm_args["rms_norm"],
                            _norm_body(t, rms=True)))
    return ProgramSpec(f"rows_{dtype.name}", "".join(parts), needs_fp64(dtype))


def _launch_rows(kernel: ClKernel, outputs, record: np.ndarray, *args) -> None:
    rows, length = int(record["nrows"]), int(record["len"])
    if rows == 0:
        return
    context = outputs[0].backend.context(outputs[0].device)
    if use_groups(context, rows, length):
        compiled = context.kernel(kernel.spec, f"{kernel.name}_group")
        size = group_size(context, compiled, length)
        scratch = cl.LocalMemory(size * (8 if kernel.settings["wide"] else 4))
        context.launch(compiled, (rows * size,), (size,), *args, scratch)
    else:
        launch_1d(context, context.kernel(kernel.spec, f"{kernel.name}_serial"), rows, *args)


def softmax_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    if layouts[-1].numel == 0:
        return
    record = rows_record(layouts[0], layouts[-1], params.dim)
    _launch_rows(kernel, outputs, record, outputs[0].buffer, inputs[0].buffer, record)


def norm_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """layer_norm / rms_norm over the trailing ``params.axes`` dims of dense inputs."""
    layout, out_layout = layouts[0], layouts[-1]
    if out_layout.numel == 0:
        return
    length = int(np.prod(layout.shape[layout.ndim - params.axes:], dtype=np.int64))
    record = np.zeros((), ROWS_DTYPE)
    record["ndim"], record["nrows"], record["len"] = 1, out_layout.numel // length, length
    record["shape"][0] = out_layout.numel // length
    record["istride"][0] = record["ostride"][0] = length
    record["ioff"], record["ooff"] = layout.offset, out_layout.offset
    record["istep"] = record["ostep"] = 1
    real = np.float64 if kernel.settings["wide"] else np.float32
    extra = []
    for storage, weight_layout in zip(inputs[1:], layouts[1: len(inputs)]):
        extra += [storage.buffer, np.int64(weight_layout.offset)]
    _launch_rows(kernel, outputs, record, outputs[0].buffer, inputs[0].buffer, record, *extra,
                 real(params.eps))


def _add_rows(kernels: KernelList) -> None:
    """Add softmax, log_softmax (strided) and layer_norm, rms_norm (dense) for float dtypes."""
    for d in dt.FLOAT_DTYPES:
        spec = rows_program(d)
        wide = d is dt.float64
        for op in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX):
            kernels.add(op, [(d, d)], ClKernel(softmax_kernel, spec, op.value, wide=wide),
                        STRIDED)
        kernels.add(OpKind.LAYER_NORM, [(d,) * 4],
                    ClKernel(norm_kernel, spec, "layer_norm", wide=wide), DENSE)
        kernels.add(OpKind.RMS_NORM, [(d,) * 3],
                    ClKernel(norm_kernel, spec, "rms_norm", wide=wide), DENSE)


KERNELS = kernel_list()
_add_rows(KERNELS)
