import numpy as np
import pytest

import fuel
from fuel.dispatch import (
    KernelBindingTable,
    KernelCaps,
    compile_node,
    dispatched_kernel_ident,
    execute_compiled,
    execute_compiled_with_wait_hint,
    global_table,
    register_kernel,
    table_generation,
)
from fuel.graph import Graph
from fuel.ir import dtype as dt
from fuel.ir.device import CPU, BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

F32 = (dt.float32, dt.float32, dt.float32)


def _kernel_a(inputs, outputs, layouts, params):
    outputs[0].buffer[:] = inputs[0].buffer + inputs[1].buffer


def _kernel_b(inputs, outputs, layouts, params):
    outputs[0].buffer[:] = -1


def test_first_registered_sibling_wins_and_alternatives_keep_order():
    table = KernelBindingTable()
    table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_b, KernelCaps(requires_broadcast=True),
                   "baked")
    table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_a, KernelCaps(strided_input=True), "a")
    table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_b, KernelCaps(), "b")
    kernel, caps = table.lookup_with_caps(OpKind.ADD, F32, BackendId.CPU)
    assert kernel is _kernel_a and caps.strided_input  # the broadcast-baked sibling is skipped
    sources = [e.kernel_source for e in table.lookup_alternatives(OpKind.ADD, F32, BackendId.CPU)]
    assert sources == ["baked", "a", "b"]
    problems = table.finalize()  # _kernel_b sits twice under the key
    assert len(problems) == 1 and "_kernel_b registered twice" in problems[0]


def test_finalize_reports_a_kernel_registered_twice_under_one_key():
    table = KernelBindingTable()
    table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_a)
    table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_a)
    problems = table.finalize()
    assert len(problems) == 1 and "registered twice" in problems[0]
    clean = KernelBindingTable()
    clean.register(OpKind.ADD, F32, BackendId.CPU, _kernel_a)
    assert clean.finalize() == []


def test_miss_names_op_dtypes_backends_and_existing_combinations():
    table = KernelBindingTable()
    table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_a)
    table.register(OpKind.ADD, (dt.int64,) * 3, BackendId.OPENCL, _kernel_a)
    with pytest.raises(fuel.NoBackendForOp) as info:
        table.lookup_with_caps(OpKind.ADD, (dt.float16,) * 3, BackendId.CPU)
    message = str(info.value)
    assert "add(float16, float16 -> float16)" in message
    assert "Backends with add: cpu, opencl" in message
    assert "(float32, float32 -> float32)" in message
    with pytest.raises(fuel.NoBackendForOp, match="No backend implements matmul"):
        table.lookup_with_caps(OpKind.MATMUL, F32, BackendId.CPU)


def test_compile_execute_is_ready_on_cpu_under_both_hints():
    compiled = compile_node(OpKind.ADD, F32, BackendId.CPU, None, global_table())
    assert compiled.output_dtype is dt.float32 and compiled.backend is BackendId.CPU
    backend = CPU_BACKEND()
    for hint in (True, False):
        a = backend.upload(CPU, np.array([5, 6, 7], np.float32))
        b = backend.upload(CPU, np.array([1, 2, 3], np.float32))
        out = backend.allocate(CPU, dt.float32, 3)
        layout = Layout.contiguous((3,))
        handle = execute_compiled_with_wait_hint(compiled, [a, b], [out], [layout] * 3, hint)
        assert handle.is_ready
        handle.wait()
        np.testing.assert_array_equal(out.buffer, [6, 8, 10])
    handle = execute_compiled(compiled, [a, b], [out], [layout] * 3)
    assert handle.is_ready


def CPU_BACKEND():
    from fuel.backends.cpu import BACKEND

    return BACKEND


def test_compile_node_raises_on_missing_binding():
    with pytest.raises(fuel.NoBackendForOp):
        compile_node(OpKind.ADD, F32, BackendId.CPU, None, KernelBindingTable())


def test_dispatched_kernel_ident_matches_what_runs_and_views_have_none():
    x = fuel.randn(3, 4)
    y = x.relu().t().sum(0)
    graph = Graph.build([y._node])
    idents = [dispatched_kernel_ident(graph, i, global_table()) for i in range(len(graph))]
    assert idents[0] is None  # realized leaf
    ops = [n.op for n in graph.nodes]
    assert idents[ops.index(OpKind.PERMUTE)] is None
    relu = global_table().lookup_entry(OpKind.RELU, (dt.float32,) * 2, BackendId.CPU)
    assert idents[ops.index(OpKind.RELU)] == ("numpy", relu.kernel_revision_hash)


def test_run_time_extension_publishes_a_new_table_and_is_used_by_realize(restored_global_table):
    before_table, before_generation = global_table(), table_generation()
    calls = []

    def my_mul(inputs, outputs, layouts, params):
        calls.append(1)
        outputs[0].buffer[:] = 42

    register_kernel(OpKind.MUL, (dt.int8,) * 3, BackendId.CPU, my_mul, kernel_source="test-mine")
    assert table_generation() == before_generation + 1
    assert global_table() is not before_table  # copy-on-write: readers of the old one unaffected
    assert before_table.lookup_entry(OpKind.MUL, (dt.int8,) * 3, BackendId.CPU).kernel_source \
        == "numpy"
    # Appended after numpy's kernel: numpy still wins the lookup, mine is an alternative.
    alternatives = global_table().lookup_alternatives(OpKind.MUL, (dt.int8,) * 3, BackendId.CPU)
    assert [e.kernel_source for e in alternatives] == ["numpy", "test-mine"]
    register_kernel(OpKind.MUL, (dt.uint8, dt.int8, dt.int8), BackendId.CPU, my_mul,
                    kernel_source="test-mine")
    entry = global_table().lookup_entry(OpKind.MUL, (dt.uint8, dt.int8, dt.int8), BackendId.CPU)
    assert entry.kernel is my_mul


def test_revision_hash_differs_between_kernels_and_is_stable():
    table = KernelBindingTable()
    a = table.register(OpKind.ADD, F32, BackendId.CPU, _kernel_a)
    b = table.register(OpKind.SUB, F32, BackendId.CPU, _kernel_b)
    again = KernelBindingTable().register(OpKind.ADD, F32, BackendId.CPU, _kernel_a)
    assert a.kernel_revision_hash != b.kernel_revision_hash
    assert a.kernel_revision_hash == again.kernel_revision_hash


def test_coverage_lists_every_key():
    rows = global_table().coverage(OpKind.MATMUL, BackendId.CPU)
    assert {r[1][0].name for r in rows} >= {"float32", "int64", "float16"}
    assert all(r[0] is OpKind.MATMUL and r[2] is BackendId.CPU for r in rows)


def test_revision_hash_is_the_same_in_a_fresh_process():
    import subprocess
    import sys

    code = ("import fuel; from fuel.dispatch import global_table; from fuel.ir.ops import OpKind;"
            "from fuel.ir.device import BackendId; import fuel.ir.dtype as d;"
            "print(global_table().lookup_entry(OpKind.GELU, (d.float32,)*2, BackendId.CPU)"
            ".kernel_revision_hash)")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)}
    here = global_table().lookup_entry(OpKind.GELU, (dt.float32,) * 2, BackendId.CPU)
    assert runs == {f"{here.kernel_revision_hash}\n"}


class _ForeignKernel:
    """A kernel object whose work is in foreign code (as the C matmul's)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def revision_source(self) -> str:
        return self.text

    def __call__(self, inputs, outputs, layouts, params) -> None:
        pass


def test_a_kernel_objects_revision_follows_its_foreign_source():
    from fuel.dispatch.kernel import revision_hash

    first, same, edited = (_ForeignKernel(text) for text in ("int f;", "int f;", "int g;"))
    assert revision_hash(first) == revision_hash(same)
    assert revision_hash(first) != revision_hash(edited)
