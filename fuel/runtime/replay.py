"""BoundPlan: the one bound-plan engine. A plan's steps with prepared launchers, so that a run
does no per-step work beyond rebinding the storages that changed; a cached plan's replay and a
fuel.jit capture (fuel.runtime.jit.Capture) are both one.

A plan names buffer slots; a BoundPlan decides once which storage each slot uses: the leaves'
(bound by each run), buffers for the values between (each written slot a value, or an
elementwise CPU step's output written over an operand it reads last, ``_dying_operand``; the
values laid into buffers largest first, each into the smallest buffer of its device and dtype
idle over its whole lifetime, ``_pack``) and an output storage per root slot. The
buffers are taken from the device pool at the start of a run and given back at its end (so the
pool's statistics and frees stay true), or, ``held`` (a capture, like a CUDA graph's private
memory), allocated once and kept; the outputs are fresh every run (a held plan's straight from
its backend). Each step keeps the launcher its kernel's ``prepare`` returned; a run re-prepares
only the steps that touch a storage that is not the one they were prepared on: a new leaf, a
buffer the pool handed out differently, the outputs. A new leaf array whose launchers are all
``rebindable`` foreign calls (fuel.compiler.foreign) is not prepared again: their pointer
entries move to the new array (``_rebind``), the leaf's last array held until then; else a
small one is copied into a storage of the plan's (``_stage``). Storages a run will not find
again (other leaves that change, outputs) are dropped with their launchers when it ends. A
held plan's run that would prepare nothing (every leaf bound as it was, moved or copied; every
output written again) is steady (``_run_steady``): the last run's batched lists launched
again, none of the bookkeeping above.

A run launches its steps step by step through ``launch_step`` (the realize walk's launch) when
profiling or when a step's handle is waited; otherwise each run of consecutive steps on one
backend goes through that backend's batched launcher (``Backend.launch_batcher``: the CPU's C
launch sequences), or launcher by launcher where it has none.
"""

from __future__ import annotations

import bisect
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from fuel.backends import get_backend
from fuel.backends.base import LaunchBatcher
from fuel.backends.cpu import ALIGNMENT
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch import op_profile
from fuel.dispatch.kernel import Launcher
from fuel.graph import Graph
from fuel.ir.device import CPU
from fuel.ir.ops import OpKind, definition
from fuel.memory.storage import Storage, check_writable
from fuel.runtime.launch import drain, launch_step, step_error
from fuel.runtime.pending import PendingWork
from fuel.runtime.plan import Plan, Step, node_label

# Plans whose intermediates take more than this stay on the plain walk: a bound plan's
# launchers keep views of its buffers between runs (the small-work path is what it is for).
REPLAY_BYTES_LIMIT = 16 * 1024 * 1024
# A replaced leaf up to this size is copied into a storage of the plan's (``BoundPlan._stage``).
STAGED_BYTES_LIMIT = 1024 * 1024


class Assignment(NamedTuple):
    """Which storage every slot of a plan uses, by storage id: the leaves (0..), the buffers
    (one per liveness class), the outputs (one per root slot)."""

    buffers: list  # (pool, backend, device, dtype, size) per liveness class
    outputs: list  # (pool, backend, device, dtype, size) per root slot
    operands: list  # per step: (input storage ids, output storage id)
    steps: list  # the launches (Step), in order
    frees: list  # per step: the slots freed after it (for pending handles)
    slot_storage: dict  # root slot -> storage id


def assign_storages(graph: Graph, plan: Plan, byte_limit: int | None,
                    inplace: dict[int, int] | None = None) -> Assignment | None:
    """Give every slot of ``plan`` a storage id by walking its steps without launching; None
    when the buffers would take more than ``byte_limit`` bytes. ``inplace`` (root slot -> leaf
    storage id) writes those roots into their leaf's storage instead of an output.

    The walk gives each written slot a value of its own (an elementwise step's output may
    take over an operand it reads last: ``_dying_operand``) and records when the value is
    written and when it is freed; ``_pack`` then lays the values into buffers, largest first."""
    inplace = inplace or {}
    leaf_count = len(graph.leaves)
    root_slots = {plan.node_values[r][0] for r in graph.roots}
    refs: dict[int, int] = {slot: slot for slot in range(leaf_count)}
    values: list = []  # (pool, backend, device, dtype, size) per value
    spans: list[list[int]] = []  # per value: [the step writing it, the last step before its free]
    outputs: list = []
    slot_storage: dict[int, int] = {}
    operands, steps, frees = [], [], []
    # An elementwise CPU step may write over an operand it frees (plans without in-place
    # assignments, whose aliased slots would share that storage).
    reuse = not any(step.__class__ is not tuple and step.alias for step in plan.steps)
    for step in plan.steps:
        kept = -1
        if step.__class__ is tuple:  # slots freed without a launch
            if frees:
                frees[-1] = frees[-1] + step
            released = step
        else:
            sources = tuple([refs[slot] for slot in step.sources])
            target = step.target
            if step.alias:
                refs[target] = sources[0]
            elif target in inplace:
                refs[target] = slot_storage[target] = inplace[target]
            elif target in root_slots:
                if target not in slot_storage:
                    slot_storage[target] = -1 - len(outputs)  # resolved below
                    outputs.append((step.pool, step.backend, step.device, step.dtype,
                                    step.size))
                refs[target] = slot_storage[target]
            elif reuse and (kept := _dying_operand(step, sources, leaf_count, values)) >= 0:
                refs[target] = kept  # written over an operand this step reads for the last time
            else:
                refs[target] = leaf_count + len(values)
                values.append((step.pool, step.backend, step.device, step.dtype, step.size))
                spans.append([len(steps), -1])
            operands.append((sources, refs[target]))
            steps.append(step)
            frees.append(step.frees)
            released = step.frees
        for slot in released:
            storage_id = refs.get(slot)
            if storage_id is not None and storage_id >= leaf_count and storage_id != kept:
                spans[storage_id - leaf_count][1] = len(steps) - 1
    for span in spans:  # never freed: alive to the end
        if span[1] < 0:
            span[1] = len(steps)
    buffers, placed = _pack(values, spans)
    if byte_limit is not None and sum(
            b[4] * b[3].itemsize for b in buffers) > byte_limit:
        return None
    output_base = leaf_count + len(buffers)

    def resolve(storage_id: int) -> int:
        if storage_id < 0:
            return output_base + (-1 - storage_id)
        return storage_id if storage_id < leaf_count else leaf_count + placed[
            storage_id - leaf_count]

    operands = [(tuple([resolve(s) for s in sources]), resolve(target))
                for sources, target in operands]
    slot_storage = {slot: resolve(s) for slot, s in slot_storage.items()}
    for slot in root_slots:
        if slot not in slot_storage:
            slot_storage[slot] = resolve(refs[slot])
    return Assignment(buffers, outputs, operands, steps, frees, slot_storage)


def _pack(values: list, spans: list) -> tuple[list, list[int]]:
    """Buffers for ``values`` (one per value: pool, backend, device, dtype, size) whose
    ``spans`` (first and last step using each) do not overlap: the largest value first, each
    into the smallest buffer of its device and dtype (a packed dtype: and size) that is idle
    over its whole span, else a new buffer. Returns the buffers and each value's buffer."""
    buffers: list = []
    groups: dict[tuple, list[int]] = {}  # (device, dtype[, size]) -> its buffers, smallest last
    starts: list[list[int]] = []  # per buffer: the sorted first steps of the spans it serves
    ends: list[list[int]] = []  # and their last steps
    placed = [0] * len(values)
    order = sorted(range(len(values)),
                   key=lambda v: (-values[v][4] * values[v][3].itemsize, spans[v][0]))
    for value in order:
        _, _, device, dtype, size = values[value]
        first, last = spans[value]
        group = groups.setdefault((device, dtype, size) if dtype.is_packed else (device, dtype),
                                  [])
        chosen = -1
        for index in reversed(group):  # the smallest first (created in falling sizes)
            at = bisect.bisect_left(starts[index], first)
            if (at and ends[index][at - 1] >= first) or (
                    at < len(starts[index]) and starts[index][at] <= last):
                continue
            chosen = index
            break
        if chosen < 0:
            chosen = len(buffers)
            buffers.append(values[value])
            group.append(chosen)
            starts.append([])
            ends.append([])
            at = 0
        starts[chosen].insert(at, first)
        ends[chosen].insert(at, last)
        placed[value] = chosen
    return buffers, placed


def _elementwise(step: Step) -> bool:
    """Whether ``step`` reads each element of its operands only to compute the same element
    of its output, so that the output may overwrite an operand: a fused group without a
    reduction, a binary op. Not a lone unary op: some of the CPU's (sigmoid, silu, gelu) fill
    their output in passes that read the input again."""
    compiled = step.compiled
    if compiled.op is OpKind.FUSED:
        return not getattr(compiled.op_params, "reduced", 1)
    return definition(compiled.op).family == "binary"


def _dying_operand(step: Step, sources: tuple, leaf_count: int, buffers: list) -> int:
    """The buffer an elementwise CPU step can write its output over: an operand it reads for
    the last time (freed after it), of its dtype, big enough, read in the output's dense
    layout and by no other operand; else -1."""
    if step.device is not CPU or not step.frees or step.alias or not _elementwise(step):
        return -1
    out = step.layouts[-1]
    for slot, storage_id, layout in zip(step.sources, sources, step.layouts):
        if slot not in step.frees or storage_id < leaf_count or layout != out:
            continue
        _, _, device, dtype, size = buffers[storage_id - leaf_count]
        if dtype is not step.dtype or dtype.is_packed or size < step.size or \
                sources.count(storage_id) != 1:
            continue
        return storage_id
    return -1


def inplace_safe(assignment: Assignment, root: int, leaf: int) -> bool:
    """Whether root slot ``root`` can be written into leaf ``leaf``'s storage (slot and storage
    id are the same for a leaf) in ``assignment``: one step writes that storage, no later step
    reads the leaf's old value (reading the root's new value is fine), and the writing step
    reads it, if at all, element for element (an elementwise kernel over the same dense
    layout)."""
    writes = [i for i, (_, target) in enumerate(assignment.operands) if target == leaf]
    if len(writes) != 1:
        return False
    index = writes[0]
    step = assignment.steps[index]
    if step.target != root or step.alias:
        return False
    if any(leaf in later.sources for later in assignment.steps[index + 1:]):
        return False
    if leaf not in step.sources:
        return True
    out = step.layouts[-1]
    return _elementwise(step) and all(layout == out for source, layout
                               in zip(step.sources, step.layouts) if source == leaf)


class HeldArena:
    """Intermediate buffers shared by plans that never run at the same time (the captures of
    one traced function, under its lock): a plan's CPU buffers are views into one slab, and a
    plan that needs more than the slab holds gets a new slab at least twice as large (plans
    bound earlier keep theirs). A new shape then reuses memory already paged in instead of
    faulting in buffers of its own (a page fault costs 1-10 us), and kept captures cost one
    slab, not one set of buffers each. The plans' owners hold ``lock`` while one runs."""

    def __init__(self) -> None:
        self._slab: np.ndarray | None = None
        self.lock = threading.RLock()  # held while one of its plans runs (or is bound)

    def storages(self, buffers: Sequence) -> list:
        """Storages for ``buffers`` ((slot, backend, device, dtype, size) each): CPU ones
        carved from the slab at cache-line offsets, others allocated by their backend."""
        offsets, total = [], 0
        for _, _, device, dtype, size in buffers:
            host = device == CPU and not dtype.is_packed and dtype.numpy.kind not in "OSTU"
            offsets.append(total if host and size else None)
            if host and size:
                total += -(-dtype.storage_bytes(size) // ALIGNMENT) * ALIGNMENT
        if total and (self._slab is None or self._slab.size < total + ALIGNMENT):
            size = max(total, 0 if self._slab is None else 2 * self._slab.size) + ALIGNMENT
            self._slab = np.empty(size, np.uint8)
        slab = self._slab
        base = 0 if slab is None else -slab.ctypes.data % ALIGNMENT
        found = []
        for (_, backend, device, dtype, size), offset in zip(buffers, offsets):
            if offset is None:
                found.append(backend.allocate(device, dtype, size))
                continue
            start = base + offset
            view = slab[start:start + dtype.storage_bytes(size)].view(dtype.numpy)
            found.append(Storage(view, dtype, size, device, backend))
        return found


class BoundPlan:
    """``plan`` bound for runs; ``bind`` returns None when the plan is not worth binding."""

    def __init__(self, graph: Graph, plan: Plan, assignment: Assignment,
                 held: bool = False, arena: HeldArena | None = None) -> None:
        self.leaf_count = len(graph.leaves)
        self.buffers = assignment.buffers
        self.outputs = assignment.outputs
        self.operands = assignment.operands
        self.steps: list[Step] = assignment.steps
        self.frees = assignment.frees
        self.output_base = self.leaf_count + len(self.buffers)
        self.current: list = [None] * (self.output_base + len(self.outputs))
        self.launchers: list[Launcher | None] = [None] * len(self.steps)
        self.unprepared = True  # every launcher None (the first run, after a failed one)
        # Whether the next run may try ``_run_steady`` (the last run left every launcher
        # prepared and the batched lists built for them).
        self.steady = False
        # Steps whose launcher settles at its first call (the judge timing a bucket there):
        # after a run, each is replaced by the launcher it settled on, so later runs call the
        # winner directly (and the backend's batcher can fold it into a sequence).
        self.settling: set[int] = set()
        self.volatile: set[int] = set()  # leaves seen replaced between runs
        self.touching: list[list[int]] = [[] for _ in self.current]
        for index, (sources, target) in enumerate(self.operands):
            for storage_id in {*sources, target}:
                self.touching[storage_id].append(index)
        values = plan.node_values
        # Per root of the bound graph: the storage id its value lives in.
        self.root_storage = [assignment.slot_storage[values[r][0]] for r in graph.roots]
        self.devices = set(plan.devices) | {graph.nodes[r].device for r in graph.roots}
        # The devices a run checks and synchronizes: not the host (always there; its kernels
        # have finished when they return; a backend registered in its place changes the
        # kernel table, which retires the plan).
        self.synchronized = [device for device in self.devices if device != CPU]
        self.tracked = any(step.waited or step.wait_slot >= 0 for step in self.steps)
        self.lock = threading.Lock()
        self.launches = BatchedLaunches(self.steps)
        # Held: the buffers allocated once and kept (a capture's own, or views into the
        # ``arena`` it shares with captures that never run at the same time); else the pool's
        # per run.
        self.held = None
        if held:
            self.held = arena.storages(self.buffers) if arena is not None else [
                backend.allocate(device, dtype, size)
                for _, backend, device, dtype, size in self.buffers]
        if held:
            self.current[self.leaf_count:self.output_base] = self.held
        self.fixed_leaves: list | None = None  # leaves kept bound across runs (a capture's)
        # ``reuse_outputs`` (a training step's backward sets it: its gradients are dropped by
        # zero_grad before the next step; an ONNX model's captures: their arrays are dropped by
        # the caller): an output whose storage nobody but this plan holds any more at the next
        # run is written again in place, its launchers kept prepared.
        # Per output: the reference counts (storage, buffer) it has when only this plan
        # holds it, None while it is not kept.
        self.reuse_outputs = False
        # With ``reuse_outputs``, a small CPU leaf replaced between runs (a batch's inputs) is
        # copied into a storage of this plan's (leaf id -> it) that its launchers keep reading.
        self.staged: dict[int, object] = {}
        self.alone: list = [None] * len(self.outputs)
        self.root_uses = [self.root_storage.count(storage_id)
                          for storage_id in range(self.output_base, len(self.current))]

    @classmethod
    def bind(cls, graph: Graph, plan: Plan) -> BoundPlan | None:
        """A cached plan bound for replays on the pool; None when its intermediates are too
        big to keep bound (``REPLAY_BYTES_LIMIT``)."""
        assignment = assign_storages(graph, plan, REPLAY_BYTES_LIMIT)
        return None if assignment is None else cls(graph, plan, assignment)

    def run(self, graph: Graph, plan: Plan) -> bool:
        """Execute for ``graph`` (its leaves bound) and attach its roots; False when another
        thread is running this plan (the caller walks the plan instead)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            nodes = graph.nodes
            storages = self.execute(
                enumerate([nodes[node_id].buffer for node_id in graph.leaves]), graph)
        finally:
            self.lock.release()
        values = plan.node_values
        for root, storage in zip(graph.roots, storages):
            nodes[root].attach(storage, values[root][1])
        return True

    def execute(self, leaves: Iterable[tuple[int, object]], graph: Graph,
                launch: bool = True) -> list:
        """One run (the caller holds ``lock``): bind ``leaves`` ((leaf slot, storage) pairs;
        the leaves not named keep their storage), take the buffers and outputs, prepare what
        changed, launch every step and drain; return the roots' storages. Errors and profile
        rows name ``graph``'s nodes. ``launch`` False stops after preparing: nothing runs,
        and the outputs taken are dropped with the launchers that write them, as after a
        run."""
        for device in self.synchronized:  # a device unplugged since the plan was made
            get_backend(device)
        if launch and self.steady and not (op_profile._enabled or op_profile._trace):
            if not isinstance(leaves, list):
                leaves = list(leaves)
            storages = self._run_steady(leaves, graph)
            if storages is not None:
                return storages
        current = self.current
        changed: list[int] = []
        volatile = self.volatile
        for storage_id, storage in leaves:
            known = current[storage_id]
            if not self._bound_as_is(storage_id, known, storage):
                if known is not None:  # replaced since the last run: expect it to change again
                    volatile.add(storage_id)
                if storage_id in volatile and self.reuse_outputs and \
                        self._stage(storage_id, storage) is not None:
                    changed.append(storage_id)
                    continue
                current[storage_id] = storage
                changed.append(storage_id)
        taken = []
        try:
            storage_id = self.leaf_count
            if self.held is None:
                for pool, backend, device, dtype, size in self.buffers:
                    storage = pool.take(backend, device, dtype, size)
                    taken.append((pool, storage))
                    if current[storage_id] is not storage:
                        current[storage_id] = storage
                        changed.append(storage_id)
                    storage_id += 1
                for output, (pool, backend, device, dtype, size) in enumerate(self.outputs):
                    if self._written_again(output, storage_id):
                        storage_id += 1
                        continue
                    storage = pool.take(backend, device, dtype, size)
                    taken.append((pool, storage))
                    current[storage_id] = storage
                    changed.append(storage_id)
                    storage_id += 1
            else:
                storage_id = self.output_base
                for output, (_, backend, device, dtype, size) in enumerate(self.outputs):
                    if self._written_again(output, storage_id):
                        storage_id += 1
                        continue
                    current[storage_id] = backend.allocate(device, dtype, size)
                    changed.append(storage_id)
                    storage_id += 1
            self._prepare_changed(changed, graph)
            if launch:
                self._launch_all(graph)
            else:  # the batched launch lists too, so the first run only launches
                self.launches.prebuild(self.launchers)
        except BaseException:
            for pool, storage in reversed(taken):
                pool.give_back(storage)
            self._forget_all()
            raise
        if taken:
            buffer_count = len(self.buffers)
            for pool, storage in reversed(taken[:buffer_count]):
                pool.give_back(storage)
            for pool, storage in taken[buffer_count:]:
                pool.disown(storage)
        taken.clear()
        storage = None  # no reference of this frame's left to a storage (``_note_alone``)
        storages = [current[storage_id] for storage_id in self.root_storage]
        # What the next run will not find again: the outputs (unless reused) and the leaves
        # that change.
        launchers = self.launchers
        output_base = self.output_base
        reuse = self.reuse_outputs
        for storage_id in changed:
            if (storage_id >= output_base and not reuse) or (
                    storage_id in volatile and not self._movable(storage_id)):
                current[storage_id] = None
                for index in self.touching[storage_id]:
                    launchers[index] = None
        if reuse:
            self._note_alone()
        # The next run may take the steady path: a held plan whose outputs are written again,
        # whose launchers all stayed prepared and settled, nothing waited or tracked.
        self.steady = launch and reuse and self.held is not None and not self.tracked and \
            not self.settling and None not in launchers
        return storages

    def _run_steady(self, leaves: list, graph: Graph) -> list | None:
        """A held plan's replay where nothing is prepared: every leaf the same storage, moved
        (``_rebind``) or copied into its staged storage, every output written again. Launches
        the batched lists of the last run (no launcher changed since) and returns the roots'
        storages; None, having bound only leaves the general path then finds bound, where
        anything else would change."""
        current = self.current
        for storage_id, storage in leaves:
            if not self._bound_as_is(storage_id, current[storage_id], storage):
                return None
        storage = None  # (``_written_again`` counts references: none of this frame's)
        output_base = self.output_base
        for output in range(len(self.outputs)):
            if not self._written_again(output, output_base + output):
                return None
        try:
            self.launches.run(self.launchers, graph, again=True)
            if self.synchronized:
                drain(None, self.synchronized)
        except BaseException:
            self._forget_all()  # as the general path after a failed run
            raise
        # The outputs are the last run's storages, held as then: ``alone`` stays true.
        return [current[storage_id] for storage_id in self.root_storage]

    def _bound_as_is(self, storage_id: int, known, storage) -> bool:
        """Whether leaf ``storage_id`` runs on ``storage`` with its launchers as prepared (on
        ``known``, the leaf's storage of the last run): the same storage, its launchers moved
        to it (``_rebind``), or its values copied into the leaf's staged storage."""
        if known is storage:
            return True
        if known is not None and self._rebind(storage_id, known, storage):
            return True  # its launchers read the new array
        copy = self.staged.get(storage_id)
        if copy is known is not None and storage.size == copy.size and \
                storage.dtype is copy.dtype and storage.buffer.__class__ is np.ndarray:
            copy.buffer[...] = storage.buffer  # the launchers read the copy
            return True
        return False

    def _written_again(self, output: int, storage_id: int) -> bool:
        """Whether output ``output``'s storage of the last run (``storage_id``) is written again:
        its user gone, only this plan holds it and its buffer (the counts ``_note_alone``
        took; read inline, so this frame adds no reference to either)."""
        counts = self.alone[output]
        return counts is not None and sys.getrefcount(self.current[storage_id]) == counts[0] \
            and sys.getrefcount(self.current[storage_id].buffer) == counts[1]

    def _movable(self, storage_id: int) -> bool:
        """Whether a replaced leaf's launchers may stay prepared on it for the next run to move
        (``_rebind``): each a rebindable foreign call."""
        launchers = self.launchers
        return storage_id < self.leaf_count and all(
            launchers[index].__class__ is ForeignCall and launchers[index].rebindable
            for index in self.touching[storage_id])

    def _rebind(self, storage_id: int, known, storage) -> bool:
        """Move leaf ``storage_id``'s launchers from ``known`` (the storage they were prepared
        on, alive in ``current``) to the caller's new ``storage``, in place: where both are CPU
        arrays of one dtype and size, every launcher touching the leaf
        is a prepared ``rebindable`` foreign call that baked none of its values, and no other
        operand of theirs shares its bytes. True when moved (``current`` holds ``storage``)."""
        buffer = storage.buffer
        if buffer.__class__ is not np.ndarray or known.buffer.__class__ is not np.ndarray or \
                storage.dtype is not known.dtype or storage.size != known.size or \
                storage.device is not CPU or known.device is not CPU or \
                storage_id in self.root_storage:
            return False
        start = known.host_address()
        to = storage.host_address()
        stop = start + known.buffer.nbytes
        launchers = self.launchers
        current = self.current
        indices = self.touching[storage_id]
        for index in indices:
            launcher = launchers[index]
            if launcher.__class__ is not ForeignCall or not launcher.can_rebind(start, stop):
                return False
            if to == start:  # the same bytes (a new view of the same array): nothing moves
                continue
            sources, target = self.operands[index]
            for other in (*sources, target):
                if other != storage_id and _overlaps(current[other], start, stop):
                    return False
        if to != start:
            for index in indices:
                launchers[index].rebind(start, stop, to)
        current[storage_id] = storage
        if self.staged.get(storage_id) is known:
            del self.staged[storage_id]
        return True

    def _stage(self, storage_id: int, storage) -> object | None:
        """A storage of this plan's holding a copy of leaf ``storage_id``'s new ``storage``,
        bound in its place; None when the leaf is not one to copy (not a small CPU array, or
        an output reads it as a view)."""
        buffer = storage.buffer
        if buffer.__class__ is not np.ndarray or storage.device is not CPU or \
                storage.dtype.is_packed or buffer.nbytes > STAGED_BYTES_LIMIT or \
                storage_id in self.root_storage:
            return None
        copy = storage.backend.allocate(storage.device, storage.dtype, storage.size)
        copy.buffer[...] = buffer
        self.staged[storage_id] = self.current[storage_id] = copy
        self.volatile.discard(storage_id)
        return copy

    def kept_bytes(self) -> int:
        """The bytes this plan keeps between runs for the next: outputs written again
        (``reuse_outputs``) and the copies of replaced leaves."""
        outputs = self.current[self.output_base:] if self.reuse_outputs else ()
        return sum(storage.nbytes for storage in outputs if storage is not None) + sum(
            storage.nbytes for storage in self.staged.values())

    def _note_alone(self) -> None:
        """Per CPU output, the reference counts its storage and buffer will have at the next
        run when only this plan holds them: counted now (the returned list's references
        taken off), before any user holds them."""
        current = self.current
        alone = self.alone
        for output, uses in enumerate(self.root_uses):
            storage_id = self.output_base + output
            if current[storage_id] is None or not isinstance(current[storage_id].buffer,
                                                            np.ndarray):
                alone[output] = None
                continue
            alone[output] = (sys.getrefcount(current[storage_id]) - uses,
                             sys.getrefcount(current[storage_id].buffer))

    def _launch_all(self, graph: Graph) -> None:
        """Launch every prepared step and drain (profiled, step by step, where asked)."""
        if self.tracked or op_profile._enabled or op_profile._trace:
            with op_profile.phase("realize.execute"), np.errstate(all="ignore"):
                pending = self._launch_each(graph)
            with op_profile.phase("realize.drain"):
                drain(pending, self.devices)  # a failed wait closes the handles left
        else:
            self.launches.run(self.launchers, graph)
            drain(None, self.synchronized)
        if self.settling:
            self._settle()

    def _forget_all(self) -> None:
        """After a failed run: every launcher and every storage a run binds is dropped (the
        held buffers and the fixed leaves stay)."""
        current = [None] * len(self.current)
        if self.fixed_leaves is not None:
            current[:self.leaf_count] = self.fixed_leaves
        if self.held is not None:
            current[self.leaf_count:self.output_base] = self.held
        self.current = current
        self.staged = {}
        self.alone = [None] * len(self.outputs)
        self.launchers = [None] * len(self.launchers)
        self.settling.clear()
        self.unprepared = True
        self.steady = False

    def _prepare_changed(self, changed: list[int], graph: Graph) -> None:
        """Prepare the steps touching a changed storage (every step after a reset)."""
        launchers = self.launchers
        if self.unprepared:
            stale: Sequence[int] = range(len(launchers))
        elif len(changed) == 1:  # a replay whose only change is its output
            stale = self.touching[changed[0]]
        else:
            touching = self.touching
            stale = sorted({index for storage_id in changed for index in touching[storage_id]})
        for index in stale:
            launcher = launchers[index] = self._prepare(index, graph)
            if hasattr(launcher, "settled"):
                self.settling.add(index)
        self.unprepared = False

    def _settle(self) -> None:
        """Replace each settling launcher that has settled by its settled launcher."""
        launchers = self.launchers
        for index in list(self.settling):
            launcher = launchers[index]
            settled = getattr(launcher, "settled", None)
            if launcher is None or settled is not None:
                if settled is not None:
                    launchers[index] = settled
                    self.launches.batches = None  # (built for the launcher replaced)
                self.settling.discard(index)

    def _prepare(self, index: int, graph: Graph) -> Launcher:
        """The launcher of step ``index`` on its current storages."""
        sources, target = self.operands[index]
        step = self.steps[index]
        current = self.current
        if step.alias:
            check_writable(current[target], node_label(graph, step.node_id))
        try:
            return step.compiled.prepare([current[s] for s in sources], [current[target]],
                                         step.layouts)
        except Exception as error:
            raise step_error(step, graph, error) from error

    def _launch_each(self, graph: Graph) -> PendingWork:
        """Every step through ``launch_step``: profiled, Pending handles kept and waited; the
        open handles are returned for the drain."""
        pending = PendingWork()
        current = self.current
        launchers = self.launchers
        operands = self.operands
        previous = None
        try:
            for index, step in enumerate(self.steps):
                sources, target = operands[index]
                launch_step(step, [current[s] for s in sources], [current[target]], graph,
                            pending, previous, launchers[index])
                previous = step
                for slot in self.frees[index]:
                    pending.forget(slot)
        except BaseException:
            pending.close_all()
            raise
        return pending


def _overlaps(storage, start: int, stop: int) -> bool:
    """Whether host storage ``storage`` shares a byte with [start, stop) (a device's: no)."""
    buffer = storage.buffer
    if buffer.__class__ is not np.ndarray:
        return False
    base = storage.host_address()
    return base < stop and start < base + buffer.nbytes


class BatchedLaunches:
    """How a bound plan's launchers run when nothing is profiled or waited: each run of
    consecutive steps on one backend through that backend's batched launcher (where it has
    one), submitting the backend's work at a boundary as the walk does."""

    def __init__(self, steps: Sequence[Step]) -> None:
        # (start, stop, the backend's LaunchBatcher or None, the last step) per run of steps.
        self.segments: list[tuple[int, int, LaunchBatcher | None, Step]] = []
        start = 0
        for stop in range(1, len(steps) + 1):
            if stop == len(steps) or steps[stop].backend is not steps[start].backend:
                self.segments.append((start, stop, steps[start].backend.launch_batcher(),
                                      steps[stop - 1]))
                start = stop
        self.steps = steps
        self.batchers = [segment[2] for segment in self.segments]
        self.batches: list | None = None  # the last run's batched lists, per segment

    def prebuild(self, launchers: list) -> None:
        """Build each segment's batched launch list for ``launchers`` ahead of a run (a
        prepared capture's); the run then finds them built, patching the calls changed."""
        for start, stop, batcher, _ in self.segments:
            if batcher is not None:
                batcher.batch(launchers[start:stop])

    def run(self, launchers: list, graph: Graph, again: bool = False) -> None:
        """Launch ``launchers`` (one per step, prepared); a failure raises the KernelError
        naming its step's node in ``graph``. ``again``: the launchers are those of the last
        run, the same objects (its batched lists are run as they are). NumPy's floating-point
        warnings are silenced around launches that run NumPy (not around native batches)."""
        segments = self.segments
        if again and self.batches is not None:
            batches = self.batches
        elif len(segments) == 1:  # (no slices)
            batcher = segments[0][2]
            batches = [launchers if batcher is None else batcher.batch(launchers)]
        else:
            batches = [launchers[start:stop] if batcher is None else
                       batcher.batch(launchers[start:stop])
                       for start, stop, batcher, _ in segments]
        self.batches = batches
        for batcher in self.batchers:
            if batcher is None or not batcher.native:
                with np.errstate(all="ignore"):
                    self._launch(batches, launchers, graph)
                return
        self._launch(batches, launchers, graph)

    def _launch(self, batches: list, launchers: list, graph: Graph) -> None:
        """Run each segment's batched launches, submitting the backend's work between
        segments."""
        launch = None
        segment = None
        try:
            previous = None
            for segment, batch in zip(self.segments, batches):
                if previous is not None:
                    previous.backend.submit(previous.device)
                for launch in batch:
                    launch()
                previous = segment[3]
        except Exception as error:
            assert segment is not None
            start, stop, batcher, _ = segment
            part = launchers[start:stop]
            if batcher is None:
                index = next((i for i, known in enumerate(part) if known is launch), 0)
                cause: BaseException = error
            else:
                index, cause = batcher.failed(error, launch, part)
            raise step_error(self.steps[start + index], graph, cause) from error
