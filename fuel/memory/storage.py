"""Storage: one backend buffer, viewable through many Layouts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from fuel.ir.device import Device
from fuel.ir.dtype import DType
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout


class StorageBackend(Protocol):
    """What the memory layer and kernels use of the backend that made a storage.

    ``fuel.backends.base.Backend`` implements it; the backend layer sits above memory, so
    memory names this protocol rather than the class.
    """

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        """An uninitialized buffer of ``size`` elements."""
        ...

    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        """Overwrite ``storage`` (from element 0) with the flat contents of ``array``."""
        ...

    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        """A host NumPy array of ``layout.shape`` holding what ``layout`` views."""
        ...

    def device_timer(self) -> Callable[[], Callable[[], float | None]] | None:
        """Start timing the next launch's device commands (None: no device clock)."""
        ...


class Storage:
    """A backend buffer of ``size`` elements of ``dtype`` on ``device``.

    ``backend`` is the backend object that made the buffer; kernels use it to move bytes
    to and from the host without knowing which backend produced a foreign storage.
    ``constant``: its values never change (a model's weights, an ONNX initializer), so a
    kernel may keep a rearranged copy of them (the matmul's packed weights); writing into a
    constant storage is an error (``check_writable``).
    """

    __slots__ = ("buffer", "dtype", "size", "device", "backend", "address", "constant",
                 "__weakref__")

    def __init__(self, buffer, dtype: DType, size: int, device: Device,
                 backend: StorageBackend) -> None:
        self.buffer = buffer
        self.dtype = dtype
        self.size = size
        self.device = device
        self.backend: StorageBackend = backend
        # The buffer's host address once a kernel bound it by pointer (0 until then): read
        # once, since a storage keeps its buffer for life.
        self.address = 0
        self.constant = False

    def host_address(self) -> int:
        """The address of a host buffer's first byte (a NumPy array's), read once and kept in
        ``address``: a storage keeps its buffer for life."""
        address = self.address
        if not address:
            address = self.address = self.buffer.__array_interface__["data"][0]
        return address

    @property
    def nbytes(self) -> int:
        return self.dtype.storage_bytes(self.size)

    def __repr__(self) -> str:
        return f"Storage({self.dtype.name}[{self.size}] on {self.device})"


def check_writable(storage: Storage, what: str) -> None:
    """Raise InvalidArgument when ``what`` (a sentence naming the write) would change the
    values of a constant storage."""
    if storage.constant:
        raise InvalidArgument(f"{what} writes into a constant tensor (a model's weights, "
                              f"whose rearranged copies kernels keep); write into a copy "
                              f"(tensor.clone()) instead")
