"""BackendId and Device: where a tensor lives (``"cpu"``, ``"opencl:0"``, ...)."""

from __future__ import annotations

import re
import threading
from typing import ClassVar

from fuel.ir.errors import InvalidArgument

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class BackendId:
    """The name of a backend family, interned: one object per name, so ``is`` compares ids.

    ``BackendId.register("name")`` declares an id (a backend registers its own);
    ``BackendId("name")`` looks up a declared one. ``CPU`` and ``OPENCL`` are the built-ins.
    """

    __slots__ = ("value",)
    _declared: ClassVar[dict[str, BackendId]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    CPU: ClassVar[BackendId]
    OPENCL: ClassVar[BackendId]
    CUDA: ClassVar[BackendId]

    value: str

    def __new__(cls, name: str) -> BackendId:
        found = cls._declared.get(name)
        if found is None:
            raise InvalidArgument(
                f"unknown backend {name!r}; backends are: {', '.join(cls.names())}")
        return found

    @classmethod
    def register(cls, name: str) -> BackendId:
        """The id named ``name``, declared on first call (lowercase letters, digits, ``_``)."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidArgument(
                f"a backend id is a lowercase name such as 'opencl' (letters, digits, '_'), "
                f"not {name!r}")
        with cls._lock:
            found = cls._declared.get(name)
            if found is None:
                found = object.__new__(cls)
                object.__setattr__(found, "value", name)
                cls._declared[name] = found
            return found

    @classmethod
    def registered(cls) -> tuple[BackendId, ...]:
        """Every declared id, in declaration order (the built-ins first)."""
        return tuple(cls._declared.values())

    @classmethod
    def names(cls) -> list[str]:
        """The names of every declared id, in declaration order."""
        return list(cls._declared)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("BackendId is immutable")

    def __reduce__(self):
        return (BackendId.register, (self.value,))

    def __copy__(self) -> BackendId:
        return self

    def __deepcopy__(self, memo) -> BackendId:
        return self

    def __repr__(self) -> str:
        return f"BackendId({self.value!r})"

    def __str__(self) -> str:
        return self.value


BackendId.CPU = BackendId.register("cpu")
BackendId.OPENCL = BackendId.register("opencl")
BackendId.VULKAN = BackendId.register("vulkan")
BackendId.METAL = BackendId.register("metal")
BackendId.CUDA = BackendId.register("cuda")


class Device:
    """A backend plus a device index. ``str(device)`` is ``"cpu"`` or ``"opencl:0"``."""

    __slots__ = ("backend", "index", "_name", "_hash", "key")

    def __init__(self, backend: BackendId, index: int = 0) -> None:
        self.backend = backend
        self.index = index
        self._name = "cpu" if backend is BackendId.CPU else f"{backend.value}:{index}"
        self._hash = hash(self._name)
        self.key = self._name  # equal devices, equal keys: what cache keys hold (hashed in C)

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

    def __reduce__(self):
        return (Device, (self.backend, self.index))


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
    if name not in BackendId.names():
        known = ", ".join(BackendId.names())
        raise InvalidArgument(f"unknown device {spec!r}; backends are: {known}")
    if index_text and not index_text.isdigit():
        raise InvalidArgument(f"device index in {spec!r} must be a non-negative integer")
    device = Device(BackendId(name), int(index_text) if index_text else 0)
    _CACHE[spec] = device
    return device
