"""BackendId (open, interned) and Device (parsing, hashing, pickling)."""

from __future__ import annotations

import copy
import pickle

import pytest

import fuel
from fuel.ir.device import CPU, BackendId, Device, parse_device


def test_backend_ids_are_interned_and_open():
    assert BackendId("cpu") is BackendId.CPU and BackendId("opencl") is BackendId.OPENCL
    fresh = BackendId.register("device_test")
    assert BackendId.register("device_test") is fresh is BackendId("device_test")
    assert "device_test" in BackendId.names() and fresh in BackendId.registered()
    assert {fresh: 1}[BackendId("device_test")] == 1
    assert repr(fresh) == "BackendId('device_test')" and str(fresh) == "device_test"
    assert "no_such_backend" not in BackendId.names()
    assert BackendId("vulkan") is BackendId.VULKAN and BackendId("metal") is BackendId.METAL


def test_backend_ids_survive_pickling_and_copying():
    fresh = BackendId.register("device_pickled")
    for backend_id in (BackendId.CPU, BackendId.OPENCL, fresh):
        assert pickle.loads(pickle.dumps(backend_id)) is backend_id
        assert copy.copy(backend_id) is backend_id and copy.deepcopy(backend_id) is backend_id
    with pytest.raises(AttributeError, match="immutable"):
        fresh.value = "other"


def test_devices_hash_compare_and_pickle_by_name():
    fresh = BackendId.register("device_named")
    device = parse_device("device_named:2")
    assert device == Device(fresh, 2) and hash(device) == hash(Device(fresh, 2))
    assert device == "device_named:2" and str(device) == "device_named:2"
    assert parse_device("cpu") is CPU and parse_device("opencl").index == 0
    for each in (CPU, device, parse_device("opencl:1")):
        clone = pickle.loads(pickle.dumps(each))
        assert clone == each and hash(clone) == hash(each) and clone.backend is each.backend


def test_unknown_backend_names_list_the_known_ones():
    with pytest.raises(fuel.InvalidArgument,
                       match=r"unknown device 'foo:0'; backends are: cpu, opencl"):
        parse_device("foo:0")
    with pytest.raises(fuel.InvalidArgument, match=r"unknown backend 'foo'; backends are: cpu"):
        BackendId("foo")


@pytest.mark.parametrize("name", ["", "Opencl", "open cl", "gpu:0", "9lives", 3])
def test_backend_id_names_are_lowercase_identifiers(name):
    with pytest.raises(fuel.InvalidArgument, match="a backend id is a lowercase name"):
        BackendId.register(name)
