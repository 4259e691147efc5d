"""The capture/replay engine behind fuel.jit: a graph's plan decided once, its steps bound to
storages, then run again and again through execute_compiled with new argument storages.

Like a CUDA graph: the capture plans the graph and gives every step the storages it will use
(a private buffer pool, buffers reused by liveness). Each run binds the arguments' storages and
fresh output storages, re-preparing only the steps that touch them, and launches every step.
Tensors the function reads from its closure (weights, a KV cache written in place) stay bound as
captured. The Tensor-facing wrapper is fuel.jit.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from fuel.backends import get_backend
from fuel.compiler.foreign import LaunchBatcher
from fuel.dispatch import op_profile
from fuel.dispatch.compiled import execute_compiled_with_wait_hint, kernel_error
from fuel.dispatch.kernel import Launcher, global_table, table_generation
from fuel.graph import Graph, Node
from fuel.graph.node import creation_site
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.memory.pool import DevicePool
from fuel.runtime.pending import PendingWork
from fuel.runtime.plan import PlanBuilder, Step, node_label


class CapturedStep:
    """A plan step with this capture's per-graph data: the storages it used at capture, the
    slots freed after it, and its node's label (with the user's line)."""

    __slots__ = ("step", "inputs", "outputs", "frees", "label")

    def __init__(self, step: Step, inputs: list, outputs: list, label: str) -> None:
        self.step = step
        self.inputs = inputs
        self.outputs = outputs
        self.frees = step.frees
        self.label = label


class Capture:
    """One traced call: the plan of ``outputs`` whose leaves include ``arguments`` (None where
    an argument is not a tensor), bound to storages; ``run`` launches it."""

    def __init__(self, arguments: Sequence[Node | None], outputs: Sequence[Node]) -> None:
        self.generation = table_generation()
        graph = Graph.build(list(outputs))
        if any(graph.nodes[r].buffer is not None for r in graph.roots) or \
                len(graph.roots) != len(outputs):
            raise InvalidArgument("fuel.jit outputs must be distinct tensors computed by the "
                                  "function (not its inputs or captured tensors)")
        builder = PlanBuilder(graph, global_table())
        steps = list(builder.steps())
        values = builder.plan.node_values
        leaf_slots = {id(graph.nodes[i]): slot for slot, i in enumerate(graph.leaves)}
        self.argument_slots = [-1 if a is None else leaf_slots.get(id(a), -1)
                               for a in arguments]
        self.leaf_storages = {slot: graph.nodes[i].buffer for slot, i in enumerate(graph.leaves)}
        self.outputs = [(values[r], graph.nodes[r]) for r in graph.roots]
        self.output_slots = [slot for (slot, _), _ in self.outputs]
        self.devices = set(builder.plan.devices) | {n.device for _, n in self.outputs}
        self.pools: dict = {}
        self.steps = self._bind(graph, steps)
        self.pools.clear()
        # Output slots written by a launch get a fresh storage every run (its first writer's).
        self.output_writers: dict[int, Step] = {}
        for captured in self.steps:
            if captured.step.target in self.output_slots and \
                    captured.step.target not in self.leaf_storages:
                self.output_writers.setdefault(captured.step.target, captured.step)
        bound = set(self.output_writers) | {s for s in self.argument_slots if s >= 0}
        self.rebound = [index for index, captured in enumerate(self.steps)
                        if captured.step.target in bound
                        or any(s in bound for s in captured.step.sources)]
        rebound = set(self.rebound)
        # Per rebound step that writes no output: the storages and launcher of its last run,
        # reused while the same argument storages come back (a caller that refills its
        # argument tensors in place, as the Llama decode step does, re-prepares nothing).
        self.last_bound: dict[int, tuple[list, Launcher]] = {}
        self.launchers: list[Launcher | None] = [
            None if index in rebound else self._prepare(index, captured.inputs, captured.outputs)
            for index, captured in enumerate(self.steps)]
        # Steps a later step waits (cross-device copies) need handles: every launch is tracked.
        self.tracked = any(c.step.waited or c.step.wait_slot >= 0 for c in self.steps)
        self.batcher = LaunchBatcher()

    def _bind(self, graph: Graph, steps: list) -> list[CapturedStep]:
        """Give every step its storages by walking the plan without launching anything."""
        storages = dict(self.leaf_storages)
        captured: list[CapturedStep] = []
        for step in steps:
            if step.__class__ is tuple:
                for slot in step:
                    self._release(storages.pop(slot, None), slot)
                if captured:
                    captured[-1].frees += step
                continue
            inputs = [storages[s] for s in step.sources]
            output = self._output_storage(step, storages)
            storages[step.target] = output
            captured.append(CapturedStep(step, inputs, [output],
                                         node_label(graph, step.node_id)))
            for slot in step.frees:
                self._release(storages.pop(slot, None), slot)
        return captured

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
        if storage is not None and slot not in self.output_slots and \
                slot not in self.leaf_storages and storage.device in self.pools:
            self.pools[storage.device].give_back(storage)

    def _prepare(self, index: int, inputs: list, outputs: list) -> Launcher:
        captured = self.steps[index]
        step = captured.step
        try:
            return step.compiled.prepare(inputs, outputs, step.layouts)
        except Exception as error:
            raise kernel_error(step.compiled, captured.label, error) from error

    def run(self, arguments: Sequence) -> list:
        """Launch every step with ``arguments`` (storages, None for non-tensors) bound to the
        argument slots and fresh output storages; return the outputs' storages."""
        for device in self.devices:
            get_backend(device)  # fail clearly when a device went away
        bound = {slot: storage for slot, storage in zip(self.argument_slots, arguments)
                 if slot >= 0}
        for slot, step in self.output_writers.items():
            bound[slot] = step.backend.allocate(step.device, step.dtype, step.size)
        launchers = self.launchers.copy()
        operands: dict[int, tuple[list, list]] = {}
        for index in self.rebound:
            captured = self.steps[index]
            step = captured.step
            inputs = [bound.get(s, storage) for s, storage in zip(step.sources, captured.inputs)]
            outputs = [bound.get(step.target, captured.outputs[0])]
            operands[index] = (inputs, outputs)
            if step.target in self.output_writers:
                launchers[index] = self._prepare(index, inputs, outputs)
                continue
            last = self.last_bound.get(index)
            storages = inputs + outputs
            if last is not None and all(map(operator.is_, last[0], storages)):
                launchers[index] = last[1]
            else:
                launchers[index] = self._prepare(index, inputs, outputs)
                self.last_bound[index] = (storages, launchers[index])
        with np.errstate(all="ignore"):
            if self.tracked or op_profile._enabled or op_profile._trace:
                self._launch_each(launchers, operands)
            else:
                self._launch_all(launchers)
        for device in self.devices:
            get_backend(device).synchronize(device)
        return [bound[slot] if slot in bound else self.leaf_storages[slot]
                for slot in self.output_slots]

    def _launch_all(self, launchers: list) -> None:
        """execute_compiled with profiling off and no handle is one launcher call; runs of C
        kernels go as one foreign call each (``LaunchBatcher``)."""
        self.batcher.run(launchers, lambda index: (self.steps[index].step.compiled,
                                                   self.steps[index].label))

    def _launch_each(self, launchers: list, operands: dict) -> None:
        """Every step through execute_compiled: profiled, Pending handles kept and waited."""
        pending = PendingWork()
        try:
            for index, captured in enumerate(self.steps):
                step = captured.step
                if step.wait_slot >= 0:
                    pending.wait_for(step.wait_slot)
                inputs, outputs = operands.get(index) or (captured.inputs, captured.outputs)
                try:
                    handle = execute_compiled_with_wait_hint(
                        step.compiled, inputs, outputs, step.layouts, step.waited,
                        captured.label, launchers[index])
                except Exception as error:
                    raise kernel_error(step.compiled, captured.label, error) from error
                if handle.is_pending:
                    pending.keep(step.target, handle)
                for slot in captured.frees:
                    pending.forget(slot)
            pending.wait_all()
        except BaseException:
            pending.close_all()
            raise

    def output_nodes(self, storages: Sequence) -> list[Node]:
        """Realized leaf nodes over a run's output storages, in the order of the outputs."""
        leaves = []
        for storage, ((_, layout), node) in zip(storages, self.outputs):
            leaf = Node(OpKind.LOAD, (), None, node.dtype, node.shape, node.device,
                        creation_site())
            leaf.attach(storage, layout)
            leaves.append(leaf)
        return leaves
