"""Row ops as renderings of the kernel IR: softmax and log_softmax along any dim, layer_norm
and rms_norm over the trailing dims, each launch a LoopKernel (the dim(s) moved last as the
row, inputs and output through their strides) that ``render_opencl`` writes like a fused
group's: a work-group per long row with trees in local memory, a work-item per row
otherwise. Half types compute in float32 and round once on the way out."""

from __future__ import annotations

from fuel.backends.opencl.common import STRIDED, kernel_list
from fuel.backends.opencl.fused import RenderedKernel
from fuel.compiler.kernel_ir import LoopKernel
from fuel.compiler.row_kernels import norm_loop, softmax_loop
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind


def _build_softmax(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        if layouts[-1].numel == 0:
            return None
        return softmax_loop(op, inputs[0].dtype, layouts[0], layouts[-1], params.dim)

    build.__qualname__ = f"rows_{op.value}"
    return build


def _build_norm(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        if layouts[-1].numel == 0:
            return None
        return norm_loop(op, inputs[0].dtype, list(layouts), params.axes, params.eps)

    build.__qualname__ = f"rows_{op.value}"
    return build


def _add_rows(kernels: KernelList) -> None:
    """Add softmax, log_softmax, layer_norm and rms_norm for the float dtypes."""
    sample = Layout.contiguous((4, 8))
    weight = Layout.contiguous((8,))
    for d in dt.FLOAT_DTYPES:
        for op in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX):
            sampled = softmax_loop(op, d, sample, sample, 1)
            kernels.add(op, [(d, d)], RenderedKernel(op.value, _build_softmax(op), sampled),
                        STRIDED)
        for op, count in ((OpKind.LAYER_NORM, 2), (OpKind.RMS_NORM, 1)):
            sampled = norm_loop(op, d, [sample, *[weight] * count, sample], 1, 1e-5)
            kernels.add(op, [(d,) * (2 + count)], RenderedKernel(op.value, _build_norm(op),
                                                                sampled), STRIDED)


KERNELS = kernel_list()
_add_rows(KERNELS)
