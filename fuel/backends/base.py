"""The Backend contract every backend implements (the built-ins and run-time ones alike)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import numpy as np

from fuel.dispatch.completion import Completion
from fuel.dispatch.kernel import KernelBindingTable, Launcher
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.memory import Storage

# What ``Backend.device_timer`` returns: a stop function, called after the launch, giving a
# callable that resolves into the launch's device seconds (None when nothing was timed).
DeviceTimerStop = Callable[[], Callable[[], float | None]]


class LaunchBatcher(abc.ABC):
    """A backend's batched launcher: folds a run of its consecutive prepared launchers (a bound
    plan's, in launch order, the same list objects run after run where nothing changed) into
    fewer launches, as the CPU's C launch sequences do. ``Backend.launch_batcher`` makes one per
    run of a bound plan; it may keep what it built while the launchers stay the same. A held
    plan's steady replay runs the last ``batch``'s launches again without calling it (its
    launchers are the same objects, changed in place at most: ``ForeignCall.rebind``)."""

    # Whether the last ``batch`` runs no NumPy (native calls only): the caller then need not
    # silence NumPy's floating-point warnings around it.
    native: bool = False

    @abc.abstractmethod
    def batch(self, launchers: Sequence[Launcher]) -> Sequence[Launcher]:
        """The launches that run ``launchers``: the same calls, in the same order."""

    @abc.abstractmethod
    def failed(self, error: Exception, launch: Launcher,
               launchers: Sequence[Launcher]) -> tuple[int, BaseException]:
        """For ``error``, raised by ``launch`` (an entry of the last ``batch``): the index in
        ``launchers`` of the launcher that failed, and the error to report for it."""


class Backend(abc.ABC):
    """Storage, host transfers, completion and registration for one backend family.

    A backend derives from this class, sets ``backend_id`` (an id it declared with
    ``BackendId.register``) and ``kernel_source`` (the tag of its kernels), and implements the
    abstract methods. The hooks with a body are optional: their defaults fit a backend that is
    always available and runs every kernel to completion on the host.
    """

    backend_id: BackendId
    kernel_source: str
    # Whether buffers may hold Python objects (the string dtype): only the CPU's NumPy arrays.
    holds_strings: bool = False

    # ------------------------------------------------------------------ required

    @abc.abstractmethod
    def devices(self) -> list[Device]:
        """The devices of this backend, in a stable order."""

    @abc.abstractmethod
    def describe_device(self, device: Device) -> str:
        """A one-line human description of a device."""

    @abc.abstractmethod
    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        """An uninitialized buffer of ``size`` elements."""

    @abc.abstractmethod
    def upload(self, device: Device, array: np.ndarray) -> Storage:
        """A new Storage holding ``array`` (any shape; stored flat, row-major)."""

    @abc.abstractmethod
    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        """Overwrite ``storage`` (from element 0) with the flat contents of ``array``."""

    @abc.abstractmethod
    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        """A host NumPy array of ``layout.shape`` holding what ``layout`` views."""

    @abc.abstractmethod
    def record_completion(self, storage: Storage) -> Completion | None:
        """A Completion for the work last enqueued for ``storage``; None when work is done."""

    @abc.abstractmethod
    def synchronize(self, device: Device) -> None:
        """Block until every queued operation on ``device`` has finished."""

    @abc.abstractmethod
    def register(self, table: KernelBindingTable) -> None:
        """Add this backend's kernels to ``table`` (under ``backend_id``, ``kernel_source``),
        and everything else of it the planner reads: a backend that fuses registers its kernel
        generator at ``(OpKind.FUSED, (), backend_id)`` and declares its record,
        ``table.declare_backend(backend_id, BackendRecord(fusion=..., decompositions=...))``
        (its fusion target, with the composites it prefers decomposed and fused, and the
        decomposition table it selects; undeclared: no fusion, the core table). One call,
        one versioned publication: registering again invalidates cached plans."""

    # ------------------------------------------------------------------ optional

    def is_available(self) -> bool:
        """Whether the backend can run here; never raises. Default: always."""
        return True

    def unavailable_reason(self) -> str:
        """Why ``is_available`` is false (empty when available). Default: empty."""
        return ""

    def unusable_devices(self) -> list[tuple[str, str]]:
        """(device, why) for each device found here that fuel will not use (a failed probe),
        for ``fuel backends``. Default: none."""
        return []

    def submit(self, device: Device) -> None:
        """Start the work recorded for ``device`` without waiting for it: the realize walk
        calls it at a backend boundary (the next step runs on another backend), so a backend
        that defers its commands (wgpu's batch) runs them while the other one works. Default:
        nothing (a queue that starts work as it is enqueued)."""
        return None

    def device_timer(self) -> DeviceTimerStop | None:
        """Start timing the device commands of the launch about to run, for a backend whose
        queue timestamps its commands; ``execute_compiled`` calls it while ``op_profile``
        traces. Default: None (no device clock; the host time is the launch time)."""
        return None

    def launch_batcher(self) -> LaunchBatcher | None:
        """A new batched launcher for a run of this backend's consecutive launches in a bound
        plan (fuel.runtime.replay; profiled and wait-tracked runs launch step by step instead).
        Default: None (each prepared launcher is called by itself)."""
        return None
