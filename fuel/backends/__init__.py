"""Backend registry: the built-in backend folders (loaded lazily) and run-time registration."""

from __future__ import annotations

import importlib
import threading

from fuel.backends.base import Backend
from fuel.dispatch.kernel import extend_global_table
from fuel.ir.device import BackendId, Device
from fuel.ir.errors import DeviceError, FuelError

# One line per built-in backend: the module whose ``BACKEND`` object implements it.
BUILTIN_BACKENDS: dict[BackendId, str] = {
    BackendId.CPU: "fuel.backends.cpu",
    BackendId.OPENCL: "fuel.backends.opencl",
    BackendId.VULKAN: "fuel.backends.wgpu",
    BackendId.METAL: "fuel.backends.wgpu",
    BackendId.CUDA: "fuel.backends.cuda",
}

_backends: dict[BackendId, Backend] = {}
_load_errors: dict[BackendId, str] = {}
_lock = threading.RLock()


def register_backend(backend: Backend) -> None:
    """Make ``backend`` serve its ``backend_id`` and add its kernels to the global table."""
    if not isinstance(backend, Backend):
        raise FuelError(
            f"{type(backend).__name__} is not a fuel.backends.base.Backend; a backend derives "
            f"from Backend and implements its abstract methods")
    try:
        backend_id = backend.backend_id
    except AttributeError:
        backend_id = None
    if not isinstance(backend_id, BackendId):
        raise FuelError(
            f"{type(backend).__name__}.backend_id is {backend_id!r}, not a BackendId; declare "
            f"one with BackendId.register('name')")
    with _lock:
        _backends[backend_id] = backend
        _load_errors.pop(backend_id, None)
        if backend.is_available():
            extend_global_table(backend.register)


def _load_builtin(backend_id: BackendId) -> Backend | None:
    module_name = BUILTIN_BACKENDS.get(backend_id)
    if module_name is None:
        _load_errors[backend_id] = "not registered"
        return None
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # an optional dependency that fails to import
        _load_errors[backend_id] = f"{module_name} failed to import: {error}"
        return None
    backends = module.__dict__.get("BACKENDS")  # a module serving several ids
    backend = backends.get(backend_id) if backends else module.__dict__.get("BACKEND")
    if backend is None:
        _load_errors[backend_id] = f"{module_name} defines no BACKEND"
        return None
    register_backend(backend)
    return backend


def find_backend(backend_id: BackendId) -> Backend | None:
    """The backend object for ``backend_id`` (loading a built-in on first use), or None."""
    backend = _backends.get(backend_id)
    if backend is not None or backend_id in _load_errors:
        return backend
    with _lock:
        backend = _backends.get(backend_id)
        if backend is None and backend_id not in _load_errors:
            backend = _load_builtin(backend_id)
        return backend


def get_backend(device: Device) -> Backend:
    """The available backend serving ``device``; DeviceError naming what is missing otherwise."""
    backend = find_backend(device.backend)
    if backend is None:
        reason = _load_errors.get(device.backend, "not registered")
        raise DeviceError(f"device {device} is unavailable: {reason}")
    if not backend.is_available():
        raise DeviceError(f"device {device} is unavailable: {backend.unavailable_reason()}")
    if device not in backend.devices():
        names = ", ".join(str(d) for d in backend.devices()) or "none"
        raise DeviceError(f"device {device} does not exist; {device.backend.value} has: {names}")
    return backend


def known_backend_ids() -> list[BackendId]:
    """The built-in ids and those of every backend registered at run time, built-ins first."""
    with _lock:
        return [backend_id for backend_id in BackendId.registered()
                if backend_id in BUILTIN_BACKENDS or backend_id in _backends]


def load_builtin_backends() -> dict[BackendId, Backend]:
    """Every built-in backend that loads (available or not), by id, CPU first."""
    found = {}
    for backend_id in BUILTIN_BACKENDS:
        backend = find_backend(backend_id)
        if backend is not None:
            found[backend_id] = backend
    return found


def backend_rows() -> list[tuple[str, bool, str, list[tuple[str, str]]]]:
    """(backend, available, reason, [(device, description)]) for every known backend."""
    rows = []
    for backend_id in known_backend_ids():
        backend = find_backend(backend_id)
        if backend is None:
            reason = _load_errors.get(backend_id, "not registered")
            rows.append((backend_id.value, False, reason, []))
            continue
        available = backend.is_available()
        devices = (
            [(str(d), backend.describe_device(d)) for d in backend.devices()] if available else []
        )
        devices += [("not used", f"{name}: {why}") for name, why in backend.unusable_devices()]
        rows.append((backend_id.value, available, backend.unavailable_reason(), devices))
    return rows
