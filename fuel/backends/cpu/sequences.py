"""The CPU backend's batched launcher: runs of C kernel calls as one call of a C loop.

Every C kernel fuel builds has the same entry ``fuel_kernel(void *data, void *sizes, void
*strides)``, and a launcher that is exactly one such call is a ``ForeignCall``
(fuel.compiler.foreign). A bound plan (a cached plan's replay, a fuel.jit capture) hands each
run of its consecutive CPU launchers to this backend's ``LaunchBatcher`` (``SequenceBatcher``),
which folds each run of consecutive foreign calls into one ``SequenceCall``: a small C loop that
calls them in order with the GIL released. So a decode step of ~450 launches costs a handful of
Python-level calls, and the threads the kernels fork find the next kernel while they are still
spinning.

A foreign call cannot raise. A kernel that must validate its operands at launch (an index out
of range) writes a nonzero status word and names its ``failure``; the sequence checks those
statuses after it ran and raises the first failure (``SequenceFailure``), which the batcher
maps back to the launcher that failed.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from collections.abc import Sequence

from fuel.backends.base import LaunchBatcher
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import Launcher

SEQUENCE_SOURCE = """\
#include <stdint.h>
/* A run of fuel kernels: data = {function, data, sizes, strides} per call, sizes = {count}. */
typedef void (*fuel_entry)(void *, void *, void *);
void fuel_kernel(void **data, const int64_t *sizes, void *strides) {
    (void)strides;
    const int64_t count = sizes[0];
    for (int64_t i = 0; i < count; i++)
        ((fuel_entry)data[4 * i])(data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]);
}
"""
# Runs shorter than this stay single calls (a sequence of one gains nothing).
SHORTEST_SEQUENCE = 2

_runner: list = []
_runner_lock = threading.Lock()


def sequence_runner():
    """The loaded sequence loop, or None where no C toolchain builds it."""
    if _runner:
        return _runner[0]
    from fuel.backends.cpu.generated import report_build
    from fuel.compiler import toolchain
    from fuel.ir.errors import KernelError

    with _runner_lock:
        if not _runner:
            try:
                built = toolchain.build(SEQUENCE_SOURCE, "launch_sequence")
                report_build(built)
                _runner.append(built.function)
            except KernelError:
                _runner.append(None)
    return _runner[0]


def _entries(calls: Sequence[ForeignCall]) -> ctypes.Array:
    """The sequence loop's data for ``calls``: each call's four addresses, in order."""
    entries = (ctypes.c_void_p * (4 * len(calls)))()
    for position, call in enumerate(calls):
        entries[4 * position:4 * position + 4] = call.entry()
    return entries


def one_call(calls: Sequence[ForeignCall]) -> ForeignCall | None:
    """``calls`` (one kernel's launches, in order) as one foreign call of the sequence loop,
    which a batcher folds into its sequences like any other call; None where the loop is not
    built or a call validates at launch (the loop would not check its status)."""
    runner = sequence_runner()
    if runner is None or any(call.status is not None for call in calls):
        return None
    entries = _entries(calls)
    entries.calls = list(calls)  # held as long as the call
    return ForeignCall(runner, entries, (ctypes.c_int64 * 1)(len(calls)))


class SequenceCall:
    """Consecutive foreign calls run by one call of the sequence loop (GIL released throughout);
    ``replace`` swaps one of them in place."""

    __slots__ = ("calls", "entries", "count", "runner", "checked")

    def __init__(self, calls: Sequence[ForeignCall], runner) -> None:
        self.calls = list(calls)
        self.runner = runner
        self.entries = _entries(self.calls)
        self.count = (ctypes.c_int64 * 1)(len(self.calls))
        self.checked = [call for call in self.calls if call.status is not None]

    def replace(self, position: int, call: ForeignCall) -> None:
        """Put ``call`` where the ``position``-th call was."""
        old = self.calls[position]
        self.calls[position] = call
        self.entries[4 * position:4 * position + 4] = call.entry()
        if old.status is not None or call.status is not None:
            self.checked = [known for known in self.calls if known.status is not None]

    def __call__(self) -> None:
        for call in self.checked:
            call.status[0] = 0
        self.runner(self.entries, self.count, None)
        for call in self.checked:
            if call.status[0]:
                raise SequenceFailure(call, call.failure(call.status[0]))


class SequenceFailure(Exception):
    """A validating call inside a sequence failed: ``call`` is the one, ``error`` its error."""

    def __init__(self, call: ForeignCall, error: BaseException) -> None:
        super().__init__(str(error))
        self.call = call
        self.error = error


class SequenceBatcher(LaunchBatcher):
    """Turns a run of CPU launchers into the list that runs them: runs of ForeignCalls as
    SequenceCalls. ``batch`` is cheap when the launchers are the ones it saw last (identity),
    and patches the sequences in place when only some calls changed."""

    def __init__(self) -> None:
        self.known: list | None = None
        self.batched: list = []
        self.where: list[tuple[object, int]] = []  # per launcher: (SequenceCall or None, index)

    def batch(self, launchers: Sequence[Launcher]) -> list:
        """The launch list for ``launchers`` (the same calls, in the same order)."""
        known = self.known
        if known is not None and len(known) == len(launchers):
            if all(map(operator.is_, known, launchers)):
                return self.batched
            if self._patch(known, launchers):
                self.known = list(launchers)
                return self.batched
        self._build(launchers)
        return self.batched

    def failed(self, error: Exception, launch: Launcher,
               launchers: Sequence[Launcher]) -> tuple[int, BaseException]:
        """The launcher that failed: inside a sequence the call whose status word was set,
        else the one ``launch`` is."""
        if isinstance(error, SequenceFailure):
            return self.index_of(error.call), error.error
        return self.step_of(launch, launchers), error

    def step_of(self, launch, launchers: Sequence) -> int:
        """The index of the launcher that ``launch`` (an entry of the batched list) ran first."""
        for index, (sequence, position) in enumerate(self.where):
            if (sequence is launch and position == 0) or \
                    (sequence is None and launchers[index] is launch):
                return index
        return 0

    def index_of(self, call: ForeignCall) -> int:
        """The launcher index of a call inside one of the sequences."""
        for index, (sequence, position) in enumerate(self.where):
            if sequence is not None and sequence.calls[position] is call:
                return index
        return 0

    def _patch(self, known: Sequence, launchers: Sequence) -> bool:
        where = self.where
        for index, (old, new) in enumerate(zip(known, launchers)):
            if old is new:
                continue
            sequence, position = where[index]
            if sequence is None:
                if new.__class__ is ForeignCall and old.__class__ is not ForeignCall:
                    return False  # it could join a sequence: rebuild
                self.batched[position] = new  # a lone call stays lone: its neighbours are not C
                self.native = self.native and new.__class__ is ForeignCall
            elif new.__class__ is ForeignCall:
                sequence.replace(position, new)
            else:
                return False
        return True

    def _build(self, launchers: Sequence) -> None:
        runner = sequence_runner() if any(
            launcher.__class__ is ForeignCall for launcher in launchers) else None
        batched: list = []
        where: list[tuple[object, int]] = []
        run: list = []

        def close() -> None:
            if runner is not None and len(run) >= SHORTEST_SEQUENCE:
                sequence = SequenceCall(run, runner)
                where.extend((sequence, position) for position in range(len(run)))
                batched.append(sequence)
            else:
                for call in run:
                    where.append((None, len(batched)))
                    batched.append(call)
            run.clear()

        for launcher in launchers:
            if launcher.__class__ is ForeignCall:
                run.append(launcher)
                continue
            close()
            where.append((None, len(batched)))
            batched.append(launcher)
        close()
        self.known = list(launchers)
        self.batched = batched
        self.where = where
        self.native = all(launch.__class__ is SequenceCall or launch.__class__ is ForeignCall
                          for launch in batched)
