"""CompletionHandle: Ready (work done in-process) or Pending (enqueued on a device queue).

A Pending handle holds one slot of its device's in-flight counter from creation until it is
waited, closed or garbage-collected: exactly one decrement on every path.
"""

from __future__ import annotations

import threading
import warnings
from typing import Protocol

from fuel.ir.errors import DeviceError, FuelError

_counter_lock = threading.Lock()
_in_flight: dict[object, int] = {}


def in_flight(device) -> int:
    """How many Pending handles on ``device`` are not yet waited, closed or dropped."""
    return _in_flight.get(device, 0)


def in_flight_counts() -> dict[str, int]:
    """Every device's in-flight count, by device name."""
    with _counter_lock:
        return {str(device): count for device, count in _in_flight.items()}


def _increment(device) -> None:
    with _counter_lock:
        _in_flight[device] = _in_flight.get(device, 0) + 1


def _decrement(device) -> None:
    with _counter_lock:
        _in_flight[device] = max(0, _in_flight.get(device, 0) - 1)


class Completion(Protocol):
    """A backend's signal for enqueued work: a device event or fence."""

    device: object

    def wait(self) -> None:
        """Block until the work finished; raise on a device fault."""


class CompletionHandle:
    """What ``execute_compiled`` returns. Wait it, close it, or hand it to the executor."""

    __slots__ = ("_completion", "_open", "label")

    def __init__(self, completion: Completion | None = None, label: str = "") -> None:
        self._completion = completion
        self.label = label
        self._open = completion is not None
        if completion is not None:
            _increment(completion.device)

    @classmethod
    def pending(cls, completion: Completion, label: str = "") -> CompletionHandle:
        return cls(completion, label)

    @property
    def is_pending(self) -> bool:
        return self._completion is not None

    @property
    def is_ready(self) -> bool:
        return self._completion is None

    @property
    def is_open(self) -> bool:
        return self._open

    def wait(self) -> None:
        """Block until the work is done; a device error names the node that enqueued it."""
        if not self._open:
            return
        try:
            self._completion.wait()
        except FuelError as error:
            raise type(error)(f"{self.label}: {error}") from error
        except Exception as error:
            raise DeviceError(f"device fault in {self.label}: {error}") from error
        finally:
            self._release()

    def close(self) -> None:
        """Give up the handle without waiting (the work still completes on the device)."""
        if self._open:
            self._release()

    def _release(self) -> None:
        self._open = False
        _decrement(self._completion.device)

    def __del__(self) -> None:
        if getattr(self, "_open", False):
            self._release()
            warnings.warn(
                f"a Pending CompletionHandle ({self.label or 'unnamed'}) was dropped without "
                "being waited or closed",
                ResourceWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        if self._completion is None:
            return "CompletionHandle.Ready"
        state = "open" if self._open else "done"
        return f"CompletionHandle.Pending({self._completion.device}, {state})"


READY = CompletionHandle()
