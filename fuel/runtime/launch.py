"""The one launch of a plan step, shared by the realize walk and bound plans (cached-plan
replays and fuel.jit captures): the backend boundary, the wait of a cross-device copy, the
launch through ``execute_compiled`` (profile rows), the Pending handle kept, and the error that
names the node and the user's line. Plus the drain that ends every execution."""

from __future__ import annotations

from collections.abc import Iterable

from fuel.backends import get_backend
from fuel.dispatch import op_profile
from fuel.dispatch.compiled import execute_compiled_with_wait_hint, kernel_error
from fuel.dispatch.kernel import Launcher
from fuel.graph import Graph
from fuel.ir.errors import KernelError
from fuel.runtime.pending import PendingWork
from fuel.runtime.plan import Step, node_label


def launch_step(step: Step, inputs: list, outputs: list, graph: Graph, pending: PendingWork,
                previous: Step | None = None, launcher: Launcher | None = None) -> None:
    """Launch ``step`` on these storages (``launcher``: it prepared on them, when there is one):
    at a backend boundary (``previous`` ran on another backend) submit the previous backend's
    work; wait the handle a cross-device copy reads; keep the launch's Pending handle under its
    target slot. A failure raises the KernelError naming ``graph``'s node and user line."""
    if previous is not None and previous.backend is not step.backend:
        previous.backend.submit(previous.device)
    if step.wait_slot >= 0:
        pending.wait_for(step.wait_slot)
    # The label is this graph's (a cached plan serves graphs built at other lines).
    label = node_label(graph, step.node_id) if (
        step.waited or op_profile._enabled or op_profile._trace) else ""
    try:
        handle = execute_compiled_with_wait_hint(step.compiled, inputs, outputs, step.layouts,
                                                 step.waited, label, launcher)
    except Exception as error:
        raise step_error(step, graph, error, label) from error
    if handle.is_pending:
        pending.keep(step.target, handle)


def step_error(step: Step, graph: Graph, error: BaseException, label: str = "") -> KernelError:
    """The KernelError for ``error`` in ``step`` (its launch or its prepare), naming ``graph``'s
    node, the user's line that created it and the kernel."""
    return kernel_error(step.compiled, label or node_label(graph, step.node_id), error)


def drain(pending: PendingWork | None, devices: Iterable) -> None:
    """The end of an execution: wait the open handles, then synchronize every device."""
    if pending is not None:
        pending.wait_all()
    for device in devices:
        get_backend(device).synchronize(device)
