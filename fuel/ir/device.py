"""BackendId and Device: where a tensor lives (``"cpu"``, ``"opencl:0"``, ...)."""

from __future__ import annotations

import enum

from fuel.ir.errors import InvalidArgument


class BackendId(enum.Enum):
    """The backend families a kernel can be registered for."""

    CPU = "cpu"
    CUDA = "cuda"
    VULKAN = "vulkan"
    METAL = "metal"
    OPENCL = "opencl"

    def __repr__(self) -> str:
        return f"BackendId.{self.name}"


class Device:
    """A backend plus a device index. ``str(device)`` is ``"cpu"`` or ``"opencl:0"``."""

    __slots__ = ("backend", "index", "_name", "_hash")

    def __init__(self, backend: BackendId, index: int = 0) -> None:
        self.backend = backend
        self.index = index
        self._name = "cpu" if backend is BackendId.CPU else f"{backend.value}:{index}"
        self._hash = hash(self._name)

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"Device({self._name!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self._name == parse_device(other)._name
        return isinstance(other, Device) and self._name == other._name

    def __hash__(self) -> int:
        return self._hash


CPU = Device(BackendId.CPU, 0)
_CACHE: dict[str, Device] = {"cpu": CPU, "cpu:0": CPU}


def parse_device(spec) -> Device:
    """Accept a Device or a name such as ``"cpu"``, ``"opencl"``, ``"opencl:1"``."""
    if isinstance(spec, Device):
        return spec
    if spec is None:
        return CPU
    found = _CACHE.get(spec)
    if found is not None:
        return found
    if not isinstance(spec, str):
        raise InvalidArgument(f"a device is a string such as 'cpu' or 'opencl:0', not {spec!r}")
    name, _, index_text = spec.strip().lower().partition(":")
    try:
        backend = BackendId(name)
    except ValueError:
        known = ", ".join(b.value for b in BackendId)
        raise InvalidArgument(f"unknown device {spec!r}; backends are: {known}") from None
    if index_text and not index_text.isdigit():
        raise InvalidArgument(f"device index in {spec!r} must be a non-negative integer")
    device = Device(backend, int(index_text) if index_text else 0)
    _CACHE[spec] = device
    return device
