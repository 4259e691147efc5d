"""The OpenCL kernel-list factory and the pieces every kernel family shares: ClKernel (a registered
callable bound to its generated program) and 1-D / per-row launch helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fuel.backends.opencl.codegen import ProgramSpec
from fuel.dispatch.kernel import KernelCaps, KernelList, revision_hash
from fuel.ir.device import BackendId

STRIDED = KernelCaps(strided_input=True)
DENSE = KernelCaps()

Host = Callable[["ClKernel", Sequence, Sequence, Sequence, object], None]


class ClKernel:
    """A registered OpenCL kernel: the host function that prepares and enqueues a launch of
    ``name`` from ``spec``. Its ``__qualname__`` carries the program digest, so the binding
    table's revision hash changes whenever the generated OpenCL source does."""

    def __init__(self, host: Host, spec: ProgramSpec | None, name: str, **settings) -> None:
        self.host = host
        self.spec = spec
        self.name = name
        self.settings = settings
        digest = spec.digest if spec is not None else "host"
        host_digest = f"{revision_hash(host):016x}"[:8]  # the same in every process
        self.__qualname__ = f"opencl.{name}[{host.__qualname__}#{host_digest}]#{digest}"

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.host(self, inputs, outputs, layouts, params)

    def __repr__(self) -> str:
        return f"ClKernel({self.__qualname__})"

    def bind(self, storage):
        """(DeviceContext, cl.Kernel) for a launch on ``storage``'s device."""
        context = storage.backend.context(storage.device)
        return context, context.kernel(self.spec, self.name)


def kernel_list() -> KernelList:
    """An empty list of OpenCL bindings, for one kernel module to fill next to its kernels."""
    return KernelList(BackendId.OPENCL, kernel_source="opencl")


def round_up(count: int, multiple: int) -> int:
    return max(multiple, (count + multiple - 1) // multiple * multiple)


def launch_1d(context, kernel, count: int, *args, walk=None) -> None:
    """``count`` work-items in groups of one size per device, so that a driver compiling per
    group size (PoCL) compiles each kernel once. A flat ``walk`` of at least one group is
    covered exactly: whole groups, then one more group ending at ``count`` (it overlaps the
    previous one and rewrites the same values). Otherwise the launch rounds up and the
    kernel clamps (``walk["clamp"]``) or checks the extra items."""
    if count <= 0:
        return
    local = context.launch_group
    if walk is not None:
        exact = int(walk["ndim"]) <= 1 and count >= local
        walk["clamp"] = 0 if exact else 1
        if exact:
            whole = count // local * local
            context.launch(kernel, (whole,), (local,), *args)
            if count > whole:
                context.launch(kernel, (local,), (local,), *args, offset=(count - local,))
            return
    context.launch(kernel, (round_up(count, local),), (local,), *args)


def group_size(context, kernel, work: int) -> int:
    """A power-of-two work-group size for a per-row tree reduction over ``work`` elements."""
    limit = min(context.work_group, kernel_max_group(context, kernel))
    size = 1
    while size * 2 <= limit and size < work:
        size *= 2
    return size


_GROUP_LIMITS: dict = {}


def kernel_max_group(context, kernel) -> int:
    key = (id(context), id(kernel))  # kernels live as long as their context
    found = _GROUP_LIMITS.get(key)
    if found is None:
        from fuel.backends.opencl.runtime import cl

        found = int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                               context.device))
        _GROUP_LIMITS[key] = found
    return found


def use_groups(context, rows: int, length: int) -> bool:
    """A work-group per row (a tree in local memory) for long rows when rows alone cannot
    fill the device; one work-item per row otherwise. CPUs are filled by a few rows per
    core, and vectorize one-row-per-work-item loops across rows."""
    if length < 64:
        return False
    if context.is_cpu:
        return rows < 4 * context.compute_units
    return True


def int64(value: int) -> np.int64:
    return np.int64(value)
