"""Registration of every OpenCL kernel family, filtered to the dtypes the devices support."""

from __future__ import annotations

from fuel.backends.opencl.common import new_kernel_list
from fuel.dispatch.kernel import KernelBindingTable, KernelList
from fuel.ir import dtype as dt


def build_kernel_list(fp64: bool) -> KernelList:
    """Every OpenCL kernel; float64 keys only where every device runs double precision."""
    from fuel.backends.opencl import elementwise, matmul, movement, reduce, rows

    kernels = new_kernel_list()
    elementwise.register_elementwise(kernels, fp64)
    movement.register_movement(kernels, fp64)
    reduce.register_reductions(kernels, fp64)
    rows.register_rows(kernels, fp64)
    matmul.register_matmul(kernels, fp64)
    if not fp64:
        kernels.rows = [row for row in kernels.rows if dt.float64 not in row[1]]
    return kernels


def register_kernels(table: KernelBindingTable, fp64: bool) -> None:
    """Add the OpenCL kernels to ``table`` with the ``opencl`` source tag."""
    build_kernel_list(fp64).register_into(table)
