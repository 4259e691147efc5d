"""Foreign calls: launchers that are one call of a C entry point.

Every C kernel fuel builds (generated, quantized, the float32 matmul) has the same entry
``fuel_kernel(void *data, void *sizes, void *strides)``. A kernel whose prepared launcher is
exactly such a call returns a ``ForeignCall``: the description of that call (the function and
its three argument arrays), which the CPU backend's batched launcher
(fuel.backends.cpu.sequences) runs in sequence with its neighbours.

A foreign call cannot raise. A kernel that must validate its operands at launch (an index out
of range) writes a nonzero status word and names its ``failure``; whoever runs the call checks
the status after it ran.

A ``rebindable`` call holds every operand address it reads or writes as an entry of ``data``
(at the operand's address plus a fixed offset), so a bound plan whose input array changed
between runs moves those entries to the new array (``rebind``) instead of preparing the call
again or copying the array into the old one. Its ``baked`` addresses are operands whose contents
the call consumed when it was prepared (a constant weight transposed into a kept copy): a call
never moves off one of those.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


class ForeignCall:
    """A launcher that is one call ``function(data, sizes, strides)`` of a loaded C entry point
    (ctypes arrays or None); ``status`` (an int64 array) and ``failure`` (the error for a
    nonzero status) where the kernel validates at launch."""

    __slots__ = ("function", "data", "sizes", "strides", "status", "failure", "kernel_source",
                 "rebindable", "baked")

    def __init__(self, function, data, sizes, strides=None, status=None,
                 failure: Callable[[int], BaseException] | None = None,
                 kernel_source: str = "c", rebindable: bool = False,
                 baked: tuple[int, ...] = ()) -> None:
        self.kernel_source = kernel_source  # what profile rows of its launches say ran
        self.function = function
        self.data = data
        self.sizes = sizes
        self.strides = strides
        self.status = status
        self.failure = failure
        self.rebindable = rebindable
        self.baked = baked

    def __call__(self) -> None:
        status = self.status
        if status is not None:
            status[0] = 0
        self.function(self.data, self.sizes, self.strides)
        if status is not None and status[0]:
            raise self.failure(status[0])

    def can_rebind(self, start: int, stop: int) -> bool:
        """Whether the operand at addresses [start, stop) can be moved by ``rebind``."""
        return self.rebindable and not any(start <= known < stop for known in self.baked)

    def rebind(self, start: int, stop: int, to: int) -> None:
        """Point the entries inside [start, stop) (one operand's bytes) at the same offsets
        from ``to``, in place: a sequence holding this call runs the new addresses."""
        data = self.data
        for index in range(len(data)):
            known = data[index]
            if known is not None and start <= known < stop:
                data[index] = known - start + to

    def entry(self) -> tuple[int, int, int, int]:
        """The call's four addresses: function, data, sizes, strides (a sequence's entry)."""
        return (ctypes.cast(self.function, ctypes.c_void_p).value, _address(self.data),
                _address(self.sizes), _address(self.strides))


def _address(array) -> int | None:
    return None if array is None else ctypes.addressof(array)
