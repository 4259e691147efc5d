"""The FuelError hierarchy: every error a user can cause is one of these."""

from __future__ import annotations


class FuelError(Exception):
    """Base class of every error fuel raises on purpose."""


class ShapeError(FuelError, ValueError):
    """Operand shapes do not fit the op (raised when the op is built)."""


class DTypeError(FuelError, TypeError):
    """An operand dtype the op does not accept."""


class InvalidArgument(FuelError, ValueError):
    """A parameter that makes no sense: a dim out of range, a negative size, bad data."""


class IndexOutOfRange(FuelError, IndexError):
    """An index (static or held in a tensor) outside the dimension it indexes."""


class NoBackendForOp(FuelError):
    """The binding table has no kernel for (op, dtypes, backend)."""


class KernelError(FuelError):
    """A kernel raised while running a node; the original exception is chained."""


class DeviceMismatch(FuelError):
    """Operands live on different devices and no explicit ``.to()`` moved them."""


class DeviceError(FuelError):
    """A device is missing, unavailable or failed (allocation, upload, queue fault)."""


class KernelIndexError(KernelError, IndexOutOfRange):
    """A kernel found an index out of range (both a KernelError and an IndexOutOfRange)."""


class ResourceLimitError(FuelError, ValueError):
    """A size read from a file (or asked for) is over one of fuel's resource limits
    (``fuel.ir.limits``); the message names the limit and the variable that raises it."""
