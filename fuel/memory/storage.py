"""Storage: one backend buffer, viewable through many Layouts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuel.ir.device import Device
from fuel.ir.dtype import DType

if TYPE_CHECKING:  # the backend layer sits above memory: a type only, no import at run time
    from fuel.backends.base import Backend


class Storage:
    """A backend buffer of ``size`` elements of ``dtype`` on ``device``.

    ``backend`` is the backend object that made the buffer; kernels use it to move bytes
    to and from the host without knowing which backend produced a foreign storage.
    """

    __slots__ = ("buffer", "dtype", "size", "device", "backend", "address", "__weakref__")

    def __init__(self, buffer, dtype: DType, size: int, device: Device,
                 backend: Backend) -> None:
        self.buffer = buffer
        self.dtype = dtype
        self.size = size
        self.device = device
        self.backend: Backend = backend
        # The buffer's host address once a kernel bound it by pointer (0 until then): read
        # once, since a storage keeps its buffer for life.
        self.address = 0

    @property
    def nbytes(self) -> int:
        return self.dtype.storage_bytes(self.size)

    def __repr__(self) -> str:
        return f"Storage({self.dtype.name}[{self.size}] on {self.device})"
