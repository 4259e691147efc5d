"""CompiledNode, compile_node and execute_compiled: the dispatch step of a realize.

Compiling resolves a node's kernel from the KernelBindingTable once; executing calls it on
pre-allocated outputs and returns a CompletionHandle built from the output storage's device.
Every launch (a realize's walk and a fuel.jit replay alike) goes through execute_compiled.
A CompiledNode is cached and shared between graphs, so it is immutable: what belongs to one
graph (the node's label and user line) is passed to each launch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from fuel.dispatch import op_profile
from fuel.dispatch.completion import READY, CompletionHandle
from fuel.dispatch.kernel import (
    BindingEntry,
    Kernel,
    KernelBindingTable,
    KernelCaps,
    KernelDTypes,
    Launcher,
    prepare_launcher,
)
from fuel.ir.device import BackendId
from fuel.ir.dtype import DType
from fuel.ir.errors import IndexOutOfRange, KernelError, KernelIndexError
from fuel.ir.layout import Layout
from fuel.ir.ops import VIEW_OPS, OpKind, lookup_dtypes


@dataclass(frozen=True, slots=True)
class CompiledNode:
    """A node's op plus its resolved kernel, caps and params; ``dtypes`` ends with the output.
    Immutable: one CompiledNode serves every graph with the same (op, dtypes, backend, params)."""

    op: OpKind
    dtypes: KernelDTypes
    backend: BackendId
    kernel: Kernel
    caps: KernelCaps
    op_params: object
    entry: BindingEntry | None = None

    @property
    def output_dtype(self) -> DType:
        return self.dtypes[-1]

    @property
    def name(self) -> str:
        """What profiles show: the op, or a fused kernel's group name (``fused(add,exp)``)."""
        return self.op_params.name if self.op is OpKind.FUSED else self.op.value

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout]) -> Launcher:
        """The kernel bound to these operands and this node's params (the kernel's ``prepare``)."""
        return prepare_launcher(self.kernel, inputs, outputs, layouts, self.op_params)


def compile_node(
    op: OpKind,
    dtypes: Sequence[DType],
    backend: BackendId,
    op_params,
    bindings: KernelBindingTable,
) -> CompiledNode:
    """Resolve the kernel for (op, dtypes, backend); raises NoBackendForOp on a miss. (The
    planner compiles from the bindings its resolution pass recorded: ``compile_entry``,
    ``compile_generated``.)"""
    entry = bindings.lookup_entry(op, dtypes, backend)
    return CompiledNode(op, tuple(dtypes), backend, entry.kernel, entry.caps, op_params, entry)


def compile_entry(entry: BindingEntry, op: OpKind, dtypes: KernelDTypes, backend: BackendId,
                  op_params) -> CompiledNode:
    """The CompiledNode of a binding already resolved for (op, dtypes, backend)."""
    return CompiledNode(op, dtypes, backend, entry.kernel, entry.caps, op_params, entry)


def compile_generated(generator: BindingEntry, dtypes: Sequence[DType], backend: BackendId,
                      loop_kernel) -> CompiledNode:
    """A fused group's CompiledNode: the backend's kernel generator (its binding at
    ``(FUSED, (), backend)``) compiles the group's LoopKernel into the entry."""
    entry = generator.kernel(loop_kernel)
    return CompiledNode(OpKind.FUSED, tuple(dtypes), backend, entry.kernel, entry.caps,
                        loop_kernel, entry)


def node_lookup_dtypes(graph, node_id: int) -> KernelDTypes:
    """The binding-table dtypes of a graph node: its inputs' dtypes, then its own."""
    node = graph.node(node_id)
    return lookup_dtypes(node.op, tuple(i.dtype for i in node.inputs), node.dtype)


def dispatched_kernel_ident(graph, node_id: int, bindings: KernelBindingTable):
    """(kernel_source, kernel_revision_hash) of the kernel a realize dispatches for the node,
    from the same lookup ``compile_node`` does (at ``graph.target_backend``); None for views,
    leaves and misses."""
    node = graph.node(node_id)
    if node.op in VIEW_OPS or node.op is OpKind.LOAD or node.buffer is not None:
        return None
    backend = graph.target_backend(node_id)
    for entry in bindings.lookup_alternatives(node.op, node_lookup_dtypes(graph, node_id), backend):
        if not entry.caps.requires_broadcast:
            return entry.kernel_source, entry.kernel_revision_hash
    return None


def execute_compiled(
    compiled: CompiledNode,
    inputs: Sequence,
    outputs: Sequence,
    layouts: Sequence[Layout],
    label: str = "",
    launcher: Launcher | None = None,
) -> CompletionHandle:
    """Run the kernel; conservative default: the handle is Pending wherever the device can."""
    return execute_compiled_with_wait_hint(compiled, inputs, outputs, layouts, True, label,
                                           launcher)


def execute_compiled_with_wait_hint(
    compiled: CompiledNode,
    inputs: Sequence,
    outputs: Sequence,
    layouts: Sequence[Layout],
    will_be_waited: bool,
    label: str = "",
    launcher: Launcher | None = None,
) -> CompletionHandle:
    """Run the kernel (``launcher``, when given, is it prepared on these operands); record the
    launch under ``label`` when profiling (even when it raised); return Pending only when
    ``will_be_waited`` and the output's device enqueues work, Ready otherwise.

    With profiling off and ``will_be_waited`` False this is exactly one call of the launcher,
    which is what a fuel.jit replay does for such steps without the function call around it."""
    if not (op_profile._enabled or op_profile._trace):
        if launcher is None:
            compiled.kernel(inputs, outputs, layouts, compiled.op_params)
        else:
            launcher()
    else:
        timer = _device_timer(inputs, outputs) if op_profile._trace else None
        start = time.perf_counter()
        seconds = None
        try:
            if launcher is None:  # bound first, so the row can say which code the launch ran
                launcher = compiled.prepare(inputs, outputs, layouts)
                start = time.perf_counter()
            launcher()
            # the launch alone: a judged kernel's observe (its candidates listed again, about
            # 85 us a convolution) is not the kernel's time
            seconds = time.perf_counter() - start
            observe = getattr(compiled.kernel, "observe", None)
            if observe is not None:  # a judged kernel watches its winner's profiled times
                observe(inputs, outputs, layouts, compiled.op_params, seconds)
        finally:
            if seconds is None:
                seconds = time.perf_counter() - start
            _record(compiled, inputs, outputs, start, seconds, label, timer() if timer else None,
                    getattr(launcher, "kernel_source", None))
    if not will_be_waited or not outputs:
        return READY
    output = outputs[0]
    completion = output.backend.record_completion(output)
    if completion is None:
        return READY
    return CompletionHandle.pending(completion, label)


def kernel_error(compiled: CompiledNode, label: str, error: Exception) -> KernelError:
    """What a failed launch raises: a KernelError (a KernelIndexError for an index out of range)
    naming the node, its user's line and the kernel; chain ``error`` to it."""
    kind = KernelIndexError if isinstance(error, IndexOutOfRange) else KernelError
    source = compiled.entry.kernel_source if compiled.entry else "?"
    if compiled.op is OpKind.FUSED:  # the label names the group's first member: say which
        source = f"{source} {compiled.name}"
    return kind(f"{label or compiled.op.value} failed in kernel {source}: "
                f"{type(error).__name__}: {error}")


def _device_timer(inputs, outputs):
    """While tracing: a backend that timestamps its device queue (``device_timer()``) times
    the launch; the returned stop function gives a lazy device-seconds value."""
    for storage in (outputs[0] if outputs else None, inputs[0] if inputs else None):
        stop = storage.backend.device_timer() if storage is not None else None
        if stop is not None:
            return stop
    return None


def _record(compiled: CompiledNode, inputs, outputs, start: float, seconds: float, label: str,
            device_seconds=None, launch_source: str | None = None) -> None:
    """One LaunchRow; its kernel_source is the launcher's own where it states one (a kernel
    with two paths: a ForeignCall ran C, the float32 matmul's OpenBLAS path NumPy), else the
    binding's."""
    first_in = inputs[0] if inputs else None
    first_out = outputs[0] if outputs else None
    op_profile.record_launch(op_profile.LaunchRow(
        op=compiled.name,
        backend=compiled.backend.value,
        src=str(first_in.device) if first_in is not None else "?",
        dst=str(first_out.device) if first_out is not None else "?",
        bytes=first_in.nbytes if first_in is not None else 0,
        seconds=seconds,
        start=start,
        kernel_source=launch_source or (compiled.entry.kernel_source if compiled.entry else ""),
        node=label,
        device_seconds=device_seconds,
    ))
