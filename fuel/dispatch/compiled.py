"""CompiledNode, compile_node and execute_compiled: the dispatch step of a realize.

Compiling resolves a node's kernel from the KernelBindingTable once; executing calls it on
pre-allocated outputs and returns a CompletionHandle built from the output storage's device.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from fuel.dispatch import op_profile
from fuel.dispatch.completion import READY, CompletionHandle
from fuel.dispatch.kernel import BindingEntry, Kernel, KernelBindingTable, KernelCaps, KernelDTypes
from fuel.ir.device import BackendId
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.ir.ops import VIEW_OPS, OpKind, lookup_dtypes


@dataclass(slots=True)
class CompiledNode:
    """A node's op plus its resolved kernel, caps and params; ``dtypes`` ends with the output."""

    op: OpKind
    dtypes: KernelDTypes
    backend: BackendId
    kernel: Kernel
    caps: KernelCaps
    op_params: object
    entry: BindingEntry | None = None
    label: str = ""

    @property
    def output_dtype(self) -> DType:
        return self.dtypes[-1]


def compile_node(
    op: OpKind,
    dtypes: Sequence[DType],
    backend: BackendId,
    op_params,
    bindings: KernelBindingTable,
    label: str = "",
) -> CompiledNode:
    """Resolve the kernel for (op, dtypes, backend); raises NoBackendForOp on a miss."""
    entry = bindings.lookup_entry(op, dtypes, backend)
    return CompiledNode(op, tuple(dtypes), backend, entry.kernel, entry.caps, op_params, entry,
                        label)


def node_lookup_dtypes(graph, node_id: int) -> KernelDTypes:
    """The binding-table dtypes of a graph node: its inputs' dtypes, then its own."""
    node = graph.node(node_id)
    return lookup_dtypes(node.op, tuple(i.dtype for i in node.inputs), node.dtype)


def dispatched_kernel_ident(graph, node_id: int, bindings: KernelBindingTable):
    """(kernel_source, kernel_revision_hash) of the kernel a realize dispatches for the node,
    from the same lookup ``compile_node`` does; None for views, leaves and misses."""
    node = graph.node(node_id)
    if node.op in VIEW_OPS or node.op is OpKind.LOAD or node.buffer is not None:
        return None
    backend = graph.target_backend(node_id)
    if backend is None:
        return None
    for entry in bindings.lookup_alternatives(node.op, node_lookup_dtypes(graph, node_id), backend):
        if not entry.caps.requires_broadcast:
            return entry.kernel_source, entry.kernel_revision_hash
    return None


def execute_compiled(
    compiled: CompiledNode,
    inputs: Sequence,
    outputs: Sequence,
    layouts: Sequence[Layout],
) -> CompletionHandle:
    """Run the kernel; conservative default: the handle is Pending wherever the device can."""
    return execute_compiled_with_wait_hint(compiled, inputs, outputs, layouts, True)


def execute_compiled_with_wait_hint(
    compiled: CompiledNode,
    inputs: Sequence,
    outputs: Sequence,
    layouts: Sequence[Layout],
    will_be_waited: bool,
) -> CompletionHandle:
    """Run the kernel; record the launch when profiling (even when it raised); return Pending
    only when ``will_be_waited`` and the output's device enqueues work, Ready otherwise."""
    if not (op_profile._enabled or op_profile._trace):
        compiled.kernel(inputs, outputs, layouts, compiled.op_params)
    else:
        timer = _device_timer(inputs, outputs) if op_profile._trace else None
        start = time.perf_counter()
        try:
            compiled.kernel(inputs, outputs, layouts, compiled.op_params)
        finally:
            seconds = time.perf_counter() - start
            _record(compiled, inputs, outputs, start, seconds, timer() if timer else None)
    if not will_be_waited or not outputs:
        return READY
    output = outputs[0]
    completion = output.backend.record_completion(output)
    if completion is None:
        return READY
    return CompletionHandle.pending(completion, compiled.label)


def _device_timer(inputs, outputs):
    """While tracing: a backend that timestamps its device queue (``device_timer()``) times
    the launch; the returned stop function gives a lazy device-seconds value."""
    for storage in (outputs[0] if outputs else None, inputs[0] if inputs else None):
        stop = storage.backend.device_timer() if storage is not None else None
        if stop is not None:
            return stop
    return None


def _record(compiled: CompiledNode, inputs, outputs, start: float, seconds: float,
            device_seconds=None) -> None:
    first_in = inputs[0] if inputs else None
    first_out = outputs[0] if outputs else None
    op_profile.record_launch(op_profile.LaunchRow(
        op=compiled.op.value,
        backend=compiled.backend.value,
        src=str(first_in.device) if first_in is not None else "?",
        dst=str(first_out.device) if first_out is not None else "?",
        bytes=first_in.nbytes if first_in is not None else 0,
        seconds=seconds,
        start=start,
        kernel_source=compiled.entry.kernel_source if compiled.entry else "",
        node=compiled.label,
        device_seconds=device_seconds,
    ))
