"""BoundPlan: a cached plan's steps with prepared launchers, so that a realize whose plan is
cached does no per-step work beyond rebinding the storages that changed.

A plan names buffer slots; a BoundPlan decides once which storage each slot uses: the leaves'
(bound by the realize), one buffer per liveness class (taken from the device pool at the start
of a run and given back at its end, so the pool's statistics and frees stay true) and a fresh
output storage per root slot. Each step keeps the launcher its kernel's ``prepare`` returned;
a run re-prepares only the steps that touch a storage that is not the one they were prepared
on: a new leaf, a buffer the pool handed out differently, the outputs. Storages a run will not
find again (new leaves, outputs) are dropped with their launchers when it ends.
"""

from __future__ import annotations

import threading

import numpy as np

from fuel.backends import get_backend
from fuel.compiler.foreign import LaunchBatcher
from fuel.dispatch import op_profile
from fuel.dispatch.compiled import execute_compiled_with_wait_hint, kernel_error
from fuel.graph import Graph
from fuel.runtime.pending import PendingWork
from fuel.runtime.plan import Plan, Step, node_label

# Plans whose intermediates take more than this stay on the plain walk: a bound plan's
# launchers keep views of its buffers between runs (the small-work path is what it is for).
REPLAY_BYTES_LIMIT = 16 * 1024 * 1024


class BoundPlan:
    """``plan`` bound for replays; ``bind`` returns None when the plan is not worth binding."""

    def __init__(self, graph: Graph, plan: Plan, buffers: list, outputs: list,
                 operands: list[tuple[tuple[int, ...], int]], steps: list[Step],
                 frees: list[tuple[int, ...]], slot_storage: dict[int, int]) -> None:
        self.leaf_count = len(graph.leaves)
        self.buffers = buffers  # (pool, backend, device, dtype, size) per liveness class
        self.outputs = outputs  # (pool, backend, device, dtype, size) per root slot
        self.operands = operands  # per step: (input storage ids, output storage id)
        self.steps = steps
        self.frees = frees  # per step: the slots freed after it (for pending handles)
        self.slot_storage = slot_storage  # root slot -> storage id
        self.output_base = self.leaf_count + len(buffers)
        self.current: list = [None] * (self.output_base + len(outputs))
        self.launchers: list = [None] * len(steps)
        self.volatile: set[int] = set()  # leaves seen replaced between runs
        self.touching: list[list[int]] = [[] for _ in self.current]
        for index, (sources, target) in enumerate(operands):
            for storage_id in {*sources, target}:
                self.touching[storage_id].append(index)
        self.devices = set(plan.devices)
        self.tracked = any(step.waited or step.wait_slot >= 0 for step in steps)
        self.lock = threading.Lock()
        self.batcher = LaunchBatcher()

    @classmethod
    def bind(cls, graph: Graph, plan: Plan) -> BoundPlan | None:
        """Give every slot of ``plan`` a storage id by walking its steps without launching."""
        leaf_count = len(graph.leaves)
        root_slots = {plan.node_values[r][0] for r in graph.roots}
        refs: dict[int, int] = {slot: slot for slot in range(leaf_count)}
        buffers: list = []
        outputs: list = []
        slot_storage: dict[int, int] = {}
        idle: dict[tuple, list[int]] = {}
        operands, steps, frees = [], [], []
        total = 0
        for step in plan.steps:
            if step.__class__ is tuple:  # slots freed without a launch
                if frees:
                    frees[-1] = frees[-1] + step
                released = step
            else:
                sources = tuple([refs[slot] for slot in step.sources])
                target = step.target
                if step.alias:
                    refs[target] = sources[0]
                elif target in root_slots:
                    if target not in slot_storage:
                        slot_storage[target] = -1 - len(outputs)  # resolved below
                        outputs.append((step.pool, step.backend, step.device, step.dtype,
                                        step.size))
                    refs[target] = slot_storage[target]
                else:
                    free = idle.get((step.device, step.dtype, step.size))
                    if free:
                        refs[target] = free.pop()
                    else:
                        refs[target] = leaf_count + len(buffers)
                        buffers.append((step.pool, step.backend, step.device, step.dtype,
                                        step.size))
                        total += step.size * step.dtype.itemsize
                        if total > REPLAY_BYTES_LIMIT:
                            return None
                operands.append((sources, refs[target]))
                steps.append(step)
                frees.append(step.frees)
                released = step.frees
            for slot in released:
                storage_id = refs.get(slot)
                if storage_id is not None and storage_id >= leaf_count:  # a buffer
                    _, _, device, dtype, size = buffers[storage_id - leaf_count]
                    idle.setdefault((device, dtype, size), []).append(storage_id)
        output_base = leaf_count + len(buffers)

        def resolve(storage_id: int) -> int:
            return output_base + (-1 - storage_id) if storage_id < 0 else storage_id

        operands = [(tuple([resolve(s) for s in sources]), resolve(target))
                    for sources, target in operands]
        slot_storage = {slot: resolve(s) for slot, s in slot_storage.items()}
        for slot in root_slots:
            if slot not in slot_storage:
                slot_storage[slot] = resolve(refs[slot])
        return cls(graph, plan, buffers, outputs, operands, steps, frees, slot_storage)

    def run(self, graph: Graph, plan: Plan) -> bool:
        """Execute for ``graph`` (its leaves bound) and attach its roots; False when another
        thread is running this plan (the caller walks the plan instead)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._run(graph, plan)
        finally:
            self.lock.release()
        return True

    def _run(self, graph: Graph, plan: Plan) -> None:
        for device in self.devices:  # a device unplugged since the plan was made
            get_backend(device)
        current = self.current
        changed: list[int] = []
        nodes = graph.nodes
        volatile = self.volatile
        for storage_id, node_id in enumerate(graph.leaves):
            storage = nodes[node_id].buffer
            known = current[storage_id]
            if known is not storage:
                if known is not None:  # replaced since the last run: expect it to change again
                    volatile.add(storage_id)
                current[storage_id] = storage
                changed.append(storage_id)
        taken = []
        try:
            storage_id = self.leaf_count
            for pool, backend, device, dtype, size in self.buffers:
                storage = pool.take(backend, device, dtype, size)
                taken.append((pool, storage))
                if current[storage_id] is not storage:
                    current[storage_id] = storage
                    changed.append(storage_id)
                storage_id += 1
            for pool, backend, device, dtype, size in self.outputs:
                storage = pool.take(backend, device, dtype, size)
                taken.append((pool, storage))
                current[storage_id] = storage
                changed.append(storage_id)
                storage_id += 1
            self._prepare_changed(changed, graph)
            with op_profile.phase("realize.execute"), np.errstate(all="ignore"):
                if self.tracked or op_profile._enabled or op_profile._trace:
                    self._launch_each(graph)
                else:
                    self._launch_all(graph)
            with op_profile.phase("realize.drain"):
                devices = set(self.devices)
                for root in graph.roots:
                    devices.add(nodes[root].device)
                for device in devices:
                    get_backend(device).synchronize(device)
        except BaseException:
            for pool, storage in reversed(taken):
                pool.give_back(storage)
            self.current = [None] * len(current)
            self.launchers = [None] * len(self.launchers)
            raise
        outputs = taken[len(self.buffers):]
        for pool, storage in reversed(taken[:len(self.buffers)]):
            pool.give_back(storage)
        for pool, storage in outputs:
            pool.disown(storage)
        values = plan.node_values
        for root in graph.roots:
            slot, layout = values[root]
            nodes[root].attach(current[self.slot_storage[slot]], layout)
        # What the next run will not find again: the outputs and the leaves that change.
        launchers = self.launchers
        for storage_id in changed:
            if storage_id in volatile or storage_id >= self.output_base:
                current[storage_id] = None
                for index in self.touching[storage_id]:
                    launchers[index] = None

    def _prepare_changed(self, changed: list[int], graph: Graph) -> None:
        launchers = self.launchers
        touching = self.touching
        current = self.current
        for storage_id in changed:
            for index in touching[storage_id]:
                launchers[index] = None
        for index, launcher in enumerate(launchers):
            if launcher is None:
                sources, target = self.operands[index]
                step = self.steps[index]
                try:
                    launchers[index] = step.compiled.prepare(
                        [current[s] for s in sources], [current[target]], step.layouts)
                except Exception as error:
                    raise kernel_error(step.compiled, node_label(graph, step.node_id),
                                       error) from error

    def _launch_all(self, graph: Graph) -> None:
        """execute_compiled with profiling off and no handle is one launcher call; runs of C
        kernels go as one foreign call each (``LaunchBatcher``)."""
        steps = self.steps
        self.batcher.run(self.launchers, lambda index: (
            steps[index].compiled, node_label(graph, steps[index].node_id)))

    def _launch_each(self, graph: Graph) -> None:
        """Every step through execute_compiled: profiled, Pending handles kept and waited."""
        pending = PendingWork()
        current = self.current
        try:
            for index, step in enumerate(self.steps):
                if step.wait_slot >= 0:
                    pending.wait_for(step.wait_slot)
                sources, target = self.operands[index]
                label = node_label(graph, step.node_id)
                try:
                    handle = execute_compiled_with_wait_hint(
                        step.compiled, [current[s] for s in sources], [current[target]],
                        step.layouts, step.waited, label, self.launchers[index])
                except Exception as error:
                    raise kernel_error(step.compiled, label, error) from error
                if handle.is_pending:
                    pending.keep(step.target, handle)
                for slot in self.frees[index]:
                    pending.forget(slot)
            pending.wait_all()
        except BaseException:
            pending.close_all()
            raise
