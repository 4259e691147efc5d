"""realize(): build the graph, compile every node, walk it, free early, drain, attach roots."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from fuel.backends import get_backend
from fuel.dispatch import op_profile
from fuel.dispatch.compiled import (
    CompiledNode,
    compile_node,
    execute_compiled_with_wait_hint,
    node_lookup_dtypes,
)
from fuel.dispatch.completion import CompletionHandle
from fuel.dispatch.kernel import KernelBindingTable, global_table
from fuel.graph import Graph, Node
from fuel.ir.errors import FuelError, IndexOutOfRange, KernelError, KernelIndexError
from fuel.ir.layout import Layout
from fuel.ir.ops import VIEW_OPS, OpKind

PIPELINE_DEPTH = 64
_NOTHING_TO_COMPILE = None


def realize(nodes: list[Node], pipelined: bool = False) -> None:
    """Compute every node in ``nodes`` that is not realized yet, in one walk."""
    roots = [node for node in nodes if node.buffer is None]
    if not roots:
        return
    with op_profile.phase("realize"):
        with op_profile.phase("realize.graph"):
            graph = Graph.build(roots)
            wait_set = _wait_set(graph)
        walk = _Walk(graph, wait_set, global_table())
        walk.run(pipelined)


def _wait_set(graph: Graph) -> set[int]:
    """Producers that a later step waits individually: the sources of cross-device copies."""
    return {graph.inputs[i][0] for i, node in enumerate(graph.nodes) if node.op is OpKind.COPY
            and node.buffer is None}


def node_label(graph: Graph, node_id: int) -> str:
    """``node 7 (add float32,float32 -> float32 on cpu) created at model.py:12``."""
    node = graph.nodes[node_id]
    dtypes = ",".join(i.dtype.name for i in node.inputs)
    file, line = node.site
    return (f"node {node_id} ({node.op.value} {dtypes} -> {node.dtype.name} on {node.device}) "
            f"created at {file}:{line}")


def needs_kernel(node: Node) -> bool:
    return node.buffer is None and node.op not in VIEW_OPS


def compile_graph_node(graph: Graph, node_id: int, table: KernelBindingTable) -> CompiledNode:
    """compile_node for one graph node; a miss names the node and the user's line."""
    node = graph.nodes[node_id]
    backend = graph.target_backend(node_id)
    if node.op is OpKind.COPY:  # the copy kernel is keyed at the source backend
        backend = node.inputs[0].device.backend
    try:
        return compile_node(node.op, node_lookup_dtypes(graph, node_id), backend, node.params,
                            table)
    except FuelError as error:
        raise type(error)(f"{error} [{node_label(graph, node_id)}]") from None


class _Walk:
    """The state of one realize: the storage of every live node and its pending handles."""

    def __init__(self, graph: Graph, wait_set: set[int], table: KernelBindingTable) -> None:
        self.graph = graph
        self.wait_set = wait_set
        self.table = table
        self.values: list[tuple[object, Layout] | None] = [None] * len(graph)
        self.handles: dict[int, CompletionHandle] = {}
        self.devices = set()
        self.keep = set(graph.roots)

    def run(self, pipelined: bool) -> None:
        try:
            if pipelined:
                self._execute_all(_compile_ahead(self.graph, self.table))
            else:
                with op_profile.phase("realize.compile"):
                    compiled = [
                        (i, compile_graph_node(self.graph, i, self.table)
                         if needs_kernel(node) else _NOTHING_TO_COMPILE)
                        for i, node in enumerate(self.graph.nodes)
                    ]
                self._execute_all(iter(compiled))
            with op_profile.phase("realize.drain"):
                self._drain()
        except BaseException:
            for handle in self.handles.values():
                handle.close()
            self.handles.clear()
            self.values = []
            raise
        for root in self.graph.roots:
            storage, layout = self.values[root]
            self.graph.nodes[root].attach(storage, layout)

    def _execute_all(self, steps: Iterator[tuple[int, CompiledNode | None]]) -> None:
        with op_profile.phase("realize.execute"):
            graph = self.graph
            last_use = graph.last_use
            for node_id, compiled in steps:
                node = graph.nodes[node_id]
                if node.buffer is not None:
                    self.values[node_id] = (node.buffer, node.layout)
                    continue
                if compiled is None:
                    self.values[node_id] = self._view(node_id, node)
                else:
                    self._launch(node_id, node, compiled)
                for source in graph.inputs[node_id]:
                    if last_use[source] == node_id and source not in self.keep:
                        self._free(source)

    def _free(self, node_id: int) -> None:
        self.values[node_id] = None
        handle = self.handles.pop(node_id, None)
        if handle is not None:
            handle.close()

    def _view(self, node_id: int, node: Node) -> tuple[object, Layout]:
        storage, layout = self.values[self.graph.inputs[node_id][0]]
        params = node.params
        if node.op is OpKind.RESHAPE:
            reshaped = layout.reshape(params.shape)
            if reshaped is None:
                storage, layout = self._contiguize(node_id, storage, layout)
                reshaped = Layout.contiguous(params.shape)
            return storage, reshaped
        if node.op is OpKind.PERMUTE:
            return storage, layout.permute(params.dims)
        if node.op is OpKind.EXPAND:
            return storage, layout.broadcast_to(params.shape)
        return storage, layout.slice(params.starts, params.stops, params.steps)

    def _contiguize(self, node_id: int, storage, layout: Layout):
        """Copy a strided view into a dense temporary with its backend's strided-copy kernel."""
        backend = storage.backend
        compiled = compile_node(OpKind.CONTIGUOUS, (storage.dtype, storage.dtype),
                                backend.backend_id, None, self.table)
        target = backend.allocate(storage.device, storage.dtype, layout.numel)
        dense = Layout.contiguous(layout.shape)
        self._run_kernel(node_id, compiled, [storage], [target], [layout, dense], False)
        return target, dense

    def _launch(self, node_id: int, node: Node, compiled: CompiledNode) -> None:
        graph = self.graph
        inputs = []
        layouts = []
        for source in graph.inputs[node_id]:
            storage, layout = self.values[source]
            if not compiled.caps.strided_input and not (layout.offset == 0
                                                        and layout.is_contiguous()):
                storage, layout = self._contiguize(node_id, storage, layout)
            inputs.append(storage)
            layouts.append(layout)
        if node.op is OpKind.COPY:
            handle = self.handles.pop(graph.inputs[node_id][0], None)
            if handle is not None:
                handle.wait()
        backend = get_backend(node.device)
        self.devices.add(node.device)
        out_layout = Layout.contiguous(node.shape)
        if node.op is OpKind.SLICE_ASSIGN and node.params.inplace and \
                layouts[0].is_dense_from_zero():
            output = inputs[0]  # x[i] = v on a realized tensor writes its own storage
        else:
            output = backend.allocate(node.device, node.dtype, out_layout.numel)
        layouts.append(out_layout)
        waited = node_id in self.wait_set
        if waited or op_profile.tracing():
            compiled.label = node_label(graph, node_id)
        handle = self._run_kernel(node_id, compiled, inputs, [output], layouts, waited)
        if handle.is_pending:
            self.handles[node_id] = handle
        self.values[node_id] = (output, out_layout)

    def _run_kernel(self, node_id, compiled, inputs, outputs, layouts, waited) -> CompletionHandle:
        try:
            return execute_compiled_with_wait_hint(compiled, inputs, outputs, layouts, waited)
        except Exception as error:
            label = node_label(self.graph, node_id)
            kind = KernelIndexError if isinstance(error, IndexOutOfRange) else KernelError
            raise kind(f"{label} failed in kernel "
                       f"{compiled.entry.kernel_source if compiled.entry else '?'}: "
                       f"{type(error).__name__}: {error}") from error

    def _drain(self) -> None:
        handles, self.handles = self.handles, {}
        for handle in handles.values():
            handle.wait()
        for root in self.graph.roots:
            self.devices.add(self.values[root][0].device)
        for device in self.devices:
            get_backend(device).synchronize(device)


def _compile_ahead(graph: Graph, table: KernelBindingTable):
    """Compile on a producer thread, feeding the executor through a bounded queue."""
    channel: queue.Queue = queue.Queue(maxsize=PIPELINE_DEPTH)
    stop = threading.Event()

    def produce() -> None:
        for node_id, node in enumerate(graph.nodes):
            try:
                item = (node_id, compile_graph_node(graph, node_id, table)
                        if needs_kernel(node) else _NOTHING_TO_COMPILE)
            except BaseException as error:  # handed to the consumer, raised in order
                item = (node_id, error)
            while not stop.is_set():
                try:
                    channel.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if stop.is_set() or isinstance(item[1], BaseException):
                return

    producer = threading.Thread(target=produce, name="fuel-compile", daemon=True)
    producer.start()
    try:
        for _ in range(len(graph)):
            node_id, compiled = channel.get()
            if isinstance(compiled, BaseException):
                raise compiled
            yield node_id, compiled
    finally:
        stop.set()
        producer.join()
