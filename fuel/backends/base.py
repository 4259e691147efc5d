"""The Backend contract every backend folder implements."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fuel.dispatch.completion import Completion
from fuel.dispatch.kernel import KernelBindingTable
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.memory import Storage


class Backend(Protocol):
    """Storage, host transfers, completion and registration for one backend family.

    Optional: ``device_timer()``, for a backend whose queue timestamps its commands. While
    ``op_profile`` traces, ``execute_compiled`` calls it before a launch; the stop function
    it returns, called after the launch, gives a callable that ``op_profile.take_trace``
    resolves into the launch's device seconds (``LaunchRow.device_seconds``)."""

    backend_id: BackendId
    kernel_source: str

    def is_available(self) -> bool:
        """Whether the backend can run here; never raises."""

    def unavailable_reason(self) -> str:
        """Why ``is_available`` is false (empty when available)."""

    def devices(self) -> list[Device]:
        """The devices of this backend, in a stable order."""

    def describe_device(self, device: Device) -> str:
        """A one-line human description of a device."""

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        """An uninitialized buffer of ``size`` elements."""

    def upload(self, device: Device, array: np.ndarray) -> Storage:
        """A new Storage holding ``array`` (any shape; stored flat, row-major)."""

    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        """Overwrite ``storage`` (from element 0) with the flat contents of ``array``."""

    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        """A host NumPy array of ``layout.shape`` holding what ``layout`` views."""

    def record_completion(self, storage: Storage) -> Completion | None:
        """A Completion for the work last enqueued for ``storage``; None when work is done."""

    def synchronize(self, device: Device) -> None:
        """Block until every queued operation on ``device`` has finished."""

    def register(self, table: KernelBindingTable) -> None:
        """Add this backend's kernels to ``table``."""
