"""PendingWork: the Pending CompletionHandles of one execution (a realize's walk or a fuel.jit
run), by the slot whose storage each one's launch writes."""

from __future__ import annotations

from fuel.dispatch.completion import CompletionHandle


class PendingWork:
    """Open handles by slot. Every handle leaves it waited or closed, on every path."""

    __slots__ = ("handles",)

    def __init__(self) -> None:
        self.handles: dict[int, CompletionHandle] = {}

    def keep(self, slot: int, handle: CompletionHandle) -> None:
        """Hold a Pending handle of the launch writing ``slot``."""
        previous = self.handles.pop(slot, None)
        if previous is not None:
            previous.close()  # the in-order queue finishes it before the newer launch
        self.handles[slot] = handle

    def wait_for(self, slot: int) -> None:
        """Block until the launch writing ``slot`` finished (a cross-device copy reads it)."""
        handle = self.handles.pop(slot, None)
        if handle is not None:
            handle.wait()

    def forget(self, slot: int) -> None:
        """Close the handle of a freed slot: nothing will wait it individually any more."""
        handle = self.handles.pop(slot, None)
        if handle is not None:
            handle.close()

    def wait_all(self) -> None:
        """Wait every open handle (the drain); those left after a failed wait are closed."""
        handles, self.handles = self.handles, {}
        try:
            for handle in handles.values():
                handle.wait()
        finally:
            for handle in handles.values():
                handle.close()

    def close_all(self) -> None:
        """Give up every open handle (an execution that failed)."""
        handles, self.handles = self.handles, {}
        for handle in handles.values():
            handle.close()
