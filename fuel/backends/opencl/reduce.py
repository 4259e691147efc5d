"""Reductions over any dims (sum prod mean max min argmax argmin all any) and cumsum, as
renderings of the kernel IR: each launch is a LoopKernel whose row is the reduced axes
(moved last, walked through their strides) and whose rows are the kept axes (the output
index), rendered by ``render_opencl`` like a fused group (a work-group per output element with
a tree in local memory for long reductions, a work-item per output element otherwise).
"""

from __future__ import annotations

from fuel.backends.opencl.codegen import OPENCL_DTYPES, OPENCL_NUMERIC_DTYPES
from fuel.backends.opencl.common import STRIDED, kernel_list
from fuel.backends.opencl.fused import RenderedKernel
from fuel.compiler.kernel_ir import LoopKernel
from fuel.compiler.row_kernels import build_cumsum, cumsum_loop, output_dtype, reduction_loop
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

NUMERIC_AND_BOOL = (dt.bool_,) + OPENCL_NUMERIC_DTYPES
REDUCTIONS = (OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN, OpKind.ALL, OpKind.ANY,
              OpKind.SUM, OpKind.PROD, OpKind.MEAN)
# Reductions without an identity: over an empty dim they raise.
NEEDS_ELEMENTS = frozenset({OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN})


def _build_reduction(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        layout, out_layout = layouts[0], layouts[-1]
        if out_layout.numel == 0:
            return None
        dims = params.dims
        if op in NEEDS_ELEMENTS and any(layout.shape[a] == 0 for a in dims):
            raise InvalidArgument(f"{op.value}: cannot reduce over an empty dimension "
                                  f"(input shape {layout.shape}, dims {dims})")
        return reduction_loop(op, inputs[0].dtype, layout, out_layout, dims)

    build.__qualname__ = f"reduce_{op.value}"
    return build



def _add_reductions(kernels: KernelList) -> None:
    """Add every reduction and cumsum for OpenCL's dtypes."""
    sample = Layout.contiguous((4, 8))
    for source in OPENCL_DTYPES:
        for op in REDUCTIONS:
            if op in NEEDS_ELEMENTS and source not in NUMERIC_AND_BOOL:
                continue
            if op is OpKind.MEAN and not source.is_floating:
                continue
            kernel = RenderedKernel(op.value, _build_reduction(op), reduction_loop(
                op, source, sample, Layout.contiguous((4,)), (1,)))
            kernels.add(op, [(source, output_dtype(op, source))], kernel, STRIDED)
        kernel = RenderedKernel("cumsum", build_cumsum, cumsum_loop(source, sample, sample, 1))
        kernels.add(OpKind.CUMSUM, [(source, output_dtype(OpKind.CUMSUM, source))], kernel,
                    STRIDED)


KERNELS = kernel_list()
_add_reductions(KERNELS)
