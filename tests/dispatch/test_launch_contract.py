"""The kernel contract's ``prepare`` (declared or the default bound call) and execute_compiled
with a prepared launcher: profiled under the caller's label, failures made KernelErrors."""

import numpy as np
import pytest

import fuel
from fuel.backends import get_backend
from fuel.dispatch import compile_node
from fuel.dispatch.compiled import execute_compiled_with_wait_hint, kernel_error
from fuel.dispatch.kernel import KernelBindingTable, prepare_launcher
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.errors import IndexOutOfRange, KernelIndexError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

CPU = Device(BackendId.CPU, 0)
LABEL = "node 3 (add float32,float32 -> float32 on cpu) created at model.py:12"


class PreparingAdd:
    """A kernel declaring its own prepare: the operands are bound once per prepare."""

    def __init__(self) -> None:
        self.prepared = 0

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()

    def prepare(self, inputs, outputs, layouts, params):
        self.prepared += 1
        a, b, out = inputs[0].buffer, inputs[1].buffer, outputs[0].buffer
        return lambda: np.add(a, b, out=out)


def plain_add(inputs, outputs, layouts, params) -> None:
    np.add(inputs[0].buffer, inputs[1].buffer, out=outputs[0].buffer)


def _operands():
    cpu = get_backend(CPU)
    a = cpu.upload(CPU, np.arange(3, dtype=np.float32))
    out = cpu.allocate(CPU, dt.float32, 3)
    return [a, a], [out], [Layout.contiguous((3,))] * 3


@pytest.mark.parametrize("kernel", [PreparingAdd(), plain_add], ids=["declared", "default"])
def test_prepared_launches_are_profiled_under_the_given_label(kernel):
    table = KernelBindingTable()
    table.register(OpKind.ADD, (dt.float32,) * 3, BackendId.CPU, kernel, kernel_source="test")
    compiled = compile_node(OpKind.ADD, (dt.float32,) * 3, BackendId.CPU, None, table)
    inputs, outputs, layouts = _operands()
    launcher = compiled.prepare(inputs, outputs, layouts)
    with fuel.profile() as prof:
        for _ in range(2):
            handle = execute_compiled_with_wait_hint(compiled, inputs, outputs, layouts, False,
                                                     LABEL, launcher)
            assert handle.is_ready
    assert [row.node for row in prof.launches] == [LABEL, LABEL]
    assert [row.kernel_source for row in prof.launches] == ["test", "test"]
    np.testing.assert_array_equal(outputs[0].buffer, [0, 2, 4])
    if isinstance(kernel, PreparingAdd):
        assert kernel.prepared == 1


def test_a_failed_launch_is_recorded_and_becomes_a_kernel_error_naming_the_node():
    def failing(inputs, outputs, layouts, params):
        raise IndexOutOfRange("index 9 is out of range for dim 0 of size 3")

    table = KernelBindingTable()
    table.register(OpKind.ADD, (dt.float32,) * 3, BackendId.CPU, failing, kernel_source="test")
    compiled = compile_node(OpKind.ADD, (dt.float32,) * 3, BackendId.CPU, None, table)
    inputs, outputs, layouts = _operands()
    launcher = prepare_launcher(compiled.kernel, inputs, outputs, layouts, None)
    with fuel.profile() as prof, pytest.raises(IndexOutOfRange) as info:
        execute_compiled_with_wait_hint(compiled, inputs, outputs, layouts, True, LABEL,
                                        launcher)
    assert [row.node for row in prof.launches] == [LABEL]
    error = kernel_error(compiled, LABEL, info.value)
    assert isinstance(error, KernelIndexError)
    assert str(error).startswith(f"{LABEL} failed in kernel test: IndexOutOfRange: index 9")
