"""fuel.jit: capture a function's plan once, then replay it on new inputs without rebuilding
the graph, planning or allocating: each replay is one prepared launch per kernel.

Like a CUDA graph: the first call with a given input signature traces the function and runs
its plan once on a private buffer pool (buffers reused by liveness), keeping the storages every
step used. Later calls copy the arguments into the captured input buffers and run the prepared
launchers; outputs get fresh buffers each call. Tensors the function reads from its closure
(weights, a KV cache written in place) stay bound as captured.
"""

from __future__ import annotations

import functools

import numpy as np

from fuel.backends import get_backend
from fuel.dispatch import op_profile
from fuel.dispatch.kernel import global_table, table_generation
from fuel.graph import Graph, Node
from fuel.graph.node import creation_site
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.memory.pool import DevicePool
from fuel.runtime.plan import PlanBuilder, Step
from fuel.tensor import Tensor


class _Record:
    """A step with the exact storages it used at capture; ``launch`` is None when the step
    touches an output (whose buffer is fresh every call) and is bound per call."""

    __slots__ = ("step", "inputs", "output", "launch")

    def __init__(self, step: Step, inputs: list, output) -> None:
        self.step = step
        self.inputs = inputs
        self.output = output
        self.launch = None


class _Capture:
    """One traced input signature of a jitted function."""

    def __init__(self, function, args: tuple) -> None:
        self.generation = table_generation()
        # Private copies of the arguments: replays overwrite them, never the caller's tensors.
        self.inputs = [a.contiguous().realize() if isinstance(a, Tensor) else None for a in args]
        traced = function(*[c if c is not None else a for c, a in zip(self.inputs, args)])
        self.single = isinstance(traced, Tensor)
        outputs = [traced] if self.single else list(traced) if isinstance(
            traced, (tuple, list)) else []
        if not outputs or not all(isinstance(o, Tensor) for o in outputs):
            raise InvalidArgument("a fuel.jit function must return a Tensor or a tuple of them")
        graph = Graph.build([o._node for o in outputs])
        if any(graph.nodes[r].buffer is not None for r in graph.roots) or \
                len(graph.roots) != len(outputs):
            raise InvalidArgument("fuel.jit outputs must be distinct tensors computed by the "
                                  "function (not its inputs or captured tensors)")
        builder = PlanBuilder(graph, global_table())
        steps = list(builder.steps())
        values = builder.plan.node_values
        self.outputs = [(values[r], graph.nodes[r]) for r in graph.roots]
        self.output_slots = {slot for (slot, _), _ in self.outputs}
        self.devices = set(builder.plan.devices) | {n.device for _, n in self.outputs}
        self.pools: dict = {}
        self.records = self._run_once(graph, steps)
        self.output_writers = {}  # output slot -> the first step writing it (its allocation)
        for record in self.records:
            if record.step.target in self.output_slots:
                self.output_writers.setdefault(record.step.target, record.step)
        for record in self.records:
            step = record.step
            if step.target not in self.output_slots and not any(
                    s in self.output_slots for s in step.sources):
                record.launch = _prepare(step, record.inputs, [record.output])

    def _run_once(self, graph: Graph, steps: list) -> list[_Record]:
        storages = {slot: graph.nodes[i].buffer for slot, i in enumerate(graph.leaves)}
        records = []
        with np.errstate(all="ignore"):
            for step in steps:
                if step.__class__ is tuple:
                    for slot in step:
                        self._release(storages.pop(slot, None), slot)
                    continue
                output = self._output_storage(step, storages)
                inputs = [storages[s] for s in step.sources]
                if step.wait_slot >= 0:
                    self._synchronize()
                step.compiled.kernel(inputs, [output], step.layouts, step.compiled.op_params)
                storages[step.target] = output
                records.append(_Record(step, inputs, output))
                for slot in step.frees:
                    self._release(storages.pop(slot, None), slot)
        self._synchronize()
        self.first_outputs = [storages[slot] for (slot, _), _ in self.outputs]
        return records

    def _output_storage(self, step: Step, storages: dict):
        if step.alias:
            return storages[step.sources[0]]
        if step.target in self.output_slots:
            return step.backend.allocate(step.device, step.dtype, step.size)
        pool = self.pools.get(step.device)
        if pool is None:
            pool = self.pools[step.device] = DevicePool()
        return pool.take(step.backend, step.device, step.dtype, step.size)

    def _release(self, storage, slot: int) -> None:
        if storage is not None and slot not in self.output_slots and storage.device in self.pools:
            self.pools[storage.device].give_back(storage)

    def _synchronize(self) -> None:
        for device in self.devices:
            get_backend(device).synchronize(device)

    def replay(self, args: tuple) -> list:
        """Copy the arguments in, launch every step, return the outputs' storages."""
        for device in self.devices:
            get_backend(device)  # fail clearly when a device went away
        fresh = {slot: step.backend.allocate(step.device, step.dtype, step.size)
                 for slot, step in self.output_writers.items()}
        with np.errstate(all="ignore"):
            for captured, arg in zip(self.inputs, args):
                if captured is not None:
                    _copy_into(arg, captured)
            for record in self.records:
                if record.launch is not None:
                    record.launch()
                    continue
                step = record.step
                inputs = [fresh.get(s, storage) for s, storage in zip(step.sources,
                                                                       record.inputs)]
                output = fresh.get(step.target, record.output)
                if step.wait_slot >= 0:
                    self._synchronize()
                step.compiled.kernel(inputs, [output], step.layouts, step.compiled.op_params)
        self._synchronize()
        return [fresh[slot] for (slot, _), _ in self.outputs]


def _prepare(step: Step, inputs: list, outputs: list):
    kernel = step.compiled.kernel
    prepare = getattr(kernel, "prepare", None)
    if prepare is not None:
        return prepare(inputs, outputs, step.layouts, step.compiled.op_params)
    return functools.partial(kernel, inputs, outputs, step.layouts, step.compiled.op_params)


def _copy_into(source: Tensor, target: Tensor) -> None:
    """Copy an argument's values into a captured input buffer (same device, dtype, shape)."""
    source.realize()
    node = source._node
    target_node = target._node
    compiled = global_table().lookup_entry(
        OpKind.CONTIGUOUS, (node.dtype, node.dtype), node.device.backend)
    compiled.kernel([node.buffer], [target_node.buffer], [node.layout, target_node.layout], None)


def _leaf(storage, layout, node: Node) -> Tensor:
    leaf = Node(OpKind.LOAD, (), None, node.dtype, node.shape, node.device, creation_site())
    leaf.attach(storage, layout)
    return Tensor(leaf)


class JitFunction:
    """A function whose graph is captured per input signature and replayed afterwards."""

    def __init__(self, function) -> None:
        self.function = function
        self.captures: dict = {}
        self.replays = 0
        functools.update_wrapper(self, function)

    def __call__(self, *args):
        signature = tuple(
            (a.dtype, a.shape, a._node.device) if isinstance(a, Tensor) else ("py", repr(a))
            for a in args)
        capture = self.captures.get(signature)
        if capture is None or capture.generation != table_generation():
            capture = _Capture(self.function, args)
            self.captures[signature] = capture
            storages = capture.first_outputs
        else:
            with op_profile.phase("jit.replay"):
                storages = capture.replay(args)
            self.replays += 1
        outputs = [_leaf(storage, layout, node)
                   for storage, ((_, layout), node) in zip(storages, capture.outputs)]
        return outputs[0] if capture.single else tuple(outputs)


def jit(function):
    """Decorator: capture ``function``'s plan on first call, replay it on later calls."""
    return JitFunction(function)
