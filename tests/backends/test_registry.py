"""The backend registry: a backend declared and registered at run time, the contract's checks."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.backends import (
    backend_rows,
    find_backend,
    get_backend,
    known_backend_ids,
    register_backend,
)
from fuel.backends.base import Backend
from fuel.backends.cpu.arrays import output, view
from fuel.cli import main
from fuel.dispatch.kernel import KernelBindingTable, KernelCaps
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.ops import OpKind
from fuel.memory import Storage


class HostBackend(Backend):
    """The smallest complete backend: NumPy buffers, add and copy, nothing optional."""

    kernel_source = "test-host"

    def __init__(self, backend_id: BackendId) -> None:
        self.backend_id = backend_id
        self.device = Device(backend_id, 0)

    def devices(self) -> list[Device]:
        return [self.device]

    def describe_device(self, device: Device) -> str:
        return "host memory for the registry test"

    def allocate(self, device, dtype, size) -> Storage:
        return Storage(np.empty(size, dtype.numpy), dtype, size, self.device, self)

    def upload(self, device, array) -> Storage:
        flat = np.array(array, copy=True).reshape(-1)
        return Storage(flat, dt.from_numpy(flat.dtype), flat.size, self.device, self)

    def write_from_host(self, storage, array) -> None:
        storage.buffer[: array.size] = array.reshape(-1)

    def download(self, storage, layout) -> np.ndarray:
        return view(storage, layout).copy()

    def record_completion(self, storage) -> None:
        return None

    def synchronize(self, device) -> None:
        return None

    def register(self, table: KernelBindingTable) -> None:
        strided = KernelCaps(strided_input=True)
        table.register(OpKind.ADD, (dt.float32,) * 3, self.backend_id, _add, strided,
                       self.kernel_source)
        table.register(OpKind.COPY, (dt.float32,) * 2, self.backend_id, _copy_out, strided,
                       self.kernel_source)


def _add(inputs, outputs, layouts, params):
    a, b = (view(s, layout) for s, layout in zip(inputs, layouts))
    np.add(a, b, out=output(outputs[0], layouts[-1]))


def _copy_out(inputs, outputs, layouts, params):
    target = outputs[0]
    target.backend.write_from_host(target, np.ascontiguousarray(view(inputs[0], layouts[0])))


@pytest.fixture(scope="module")
def host() -> HostBackend:
    backend = HostBackend(BackendId.register("registry_host"))
    register_backend(backend)
    return backend


def test_a_backend_registered_at_run_time_realizes_and_is_listed(host, capsys):
    a = np.arange(6, dtype=np.float32)
    on_host = fuel.from_numpy(a).to("registry_host:0")
    result = on_host + on_host
    assert result.device == host.device
    np.testing.assert_array_equal(result.to("cpu").numpy(), a + a)
    assert get_backend(host.device) is host and find_backend(host.backend_id) is host
    assert host.backend_id in known_backend_ids()
    assert ("registry_host", True, "", [("registry_host:0", host.describe_device(host.device))]
            ) in backend_rows()
    assert main(["backends"]) == 0
    listed = capsys.readouterr().out
    assert "registry_host available" in " ".join(listed.split())
    assert "registry_host:0" in listed and "cpu" in listed


def test_optional_hooks_have_defaults(host):
    assert host.is_available() and host.unavailable_reason() == ""
    assert host.device_timer() is None


def test_register_backend_rejects_what_is_not_a_backend():
    class Loose:
        backend_id = BackendId.CPU

    with pytest.raises(fuel.FuelError, match="Loose is not a fuel.backends.base.Backend"):
        register_backend(Loose())


def test_register_backend_rejects_a_missing_backend_id():
    class Nameless(HostBackend):
        pass

    backend = Nameless.__new__(Nameless)  # skips __init__: no backend_id was set
    with pytest.raises(fuel.FuelError, match="Nameless.backend_id is None, not a BackendId"):
        register_backend(backend)


def test_an_incomplete_backend_cannot_be_made():
    class Incomplete(Backend):
        def devices(self) -> list[Device]:
            return []

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
