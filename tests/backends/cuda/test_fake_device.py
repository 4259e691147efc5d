"""The real CUDA backend on the fake device of host memory (``fake_device``: CuPy, the driver's
launches and cuBLAS faked, the kernels' CUDA C emulated): the kernel suite's harness over the
first key of every CUDA op, every matmul key and every quantized format against the CPU, and
a tiny Llama against the CPU. Where a GPU is here these are left to it (``test_kernels.py``,
``test_cuda_models.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends import find_backend
from fuel.backends.cuda.matmul import MatmulKernel
from fuel.dispatch.kernel import global_table
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from tests.backends.cuda import fake_device
from tests.backends.cuda.renderings import kernel_rows, renderings
from tests.backends.kernel_cases import CASES
from tests.backends.kernel_harness import assert_matches, exactness, key_id, run_case

CUDA = find_backend(BackendId.CUDA)
QUANTIZED_OPS = frozenset({OpKind.DEQUANTIZE, OpKind.QUANTIZED_MATMUL, OpKind.QUANTIZED_EMBEDDING})
pytestmark = pytest.mark.skipif(CUDA.is_available(), reason="a CUDA device is here")


@pytest.fixture
def fake(monkeypatch):
    from fuel.dispatch import kernel

    yield fake_device.install(monkeypatch)
    monkeypatch.undo()
    kernel._global_generation += 1  # plans made with the fake's table are stale


def _first_of_each_op():
    seen, rows = set(), []
    for op, dtypes, kernel in kernel_rows():
        if op not in seen or isinstance(kernel, MatmulKernel) or op in QUANTIZED_OPS:
            seen.add(op)
            rows.append((op, dtypes, kernel))
    return rows


def test_the_suite_harness_on_the_fake_device(fake):
    backend, _ = fake
    rows = _first_of_each_op()
    items, _ = renderings(rows)
    fake_device.preload([item.source for item in items if "fuel_scratch" not in item.source])
    cpu = find_backend(BackendId.CPU)
    checked = 0
    for op, dtypes, _ in rows:
        (entry,) = global_table().lookup_alternatives(op, dtypes, BackendId.CUDA)
        cpu_entries = global_table().lookup_alternatives(op, dtypes, BackendId.CPU)
        for case in CASES[op](dtypes):
            expected = run_case(cpu, cpu_entries[0], op, dtypes, case) if cpu_entries \
                else case.expected()
            actual = run_case(backend, entry, op, dtypes, case)
            assert_matches(actual, expected, dtypes[-1], case,
                           f"{key_id((op, dtypes, BackendId.CUDA))} (fake device) vs cpu",
                           exactness(op, case.params, BackendId.CUDA, dtypes[-1]))
            checked += 1
    assert checked > 100


def test_a_tiny_llama_on_the_fake_device_matches_the_cpu(fake, tmp_path):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tests.models.tiny_gguf import TinyLlama, assert_matches_the_cpu, write_tiny_llama

    _, device = fake
    path = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama(), 0)
    model = assert_matches_the_cpu(path, device)
    assert np.all(np.isfinite(model.forward(model.encode("a"), model.new_cache(8))))


@pytest.mark.slow
def test_every_key_through_the_suite_harness_on_the_fake_device(fake):
    backend, _ = fake
    rows = kernel_rows()
    items, _ = renderings(rows)
    fake_device.preload([item.source for item in items if "fuel_scratch" not in item.source])
    cpu = find_backend(BackendId.CPU)
    for op, dtypes, _ in rows:
        (entry,) = global_table().lookup_alternatives(op, dtypes, BackendId.CUDA)
        cpu_entries = global_table().lookup_alternatives(op, dtypes, BackendId.CPU)
        for case in CASES[op](dtypes):
            expected = run_case(cpu, cpu_entries[0], op, dtypes, case) if cpu_entries \
                else case.expected()
            actual = run_case(backend, entry, op, dtypes, case)
            assert_matches(actual, expected, dtypes[-1], case,
                           f"{key_id((op, dtypes, BackendId.CUDA))} (fake device) vs cpu",
                           exactness(op, case.params, BackendId.CUDA, dtypes[-1]))


@pytest.mark.slow
def test_minilm_and_smollm2_on_the_fake_device_match_the_cpu(fake):
    pytest.importorskip("tokenizers")
    from fuel.models import minilm
    from fuel.models.llama import load_gguf

    _, device = fake
    sentences = ["hello world", "The girl is carrying a baby."]
    np.testing.assert_allclose(minilm.load(device=device).encode(sentences),
                               minilm.load().encode(sentences), rtol=1e-4, atol=2e-6)
    on_cpu, on_device = load_gguf(), load_gguf(device=device)
    ids = on_cpu.encode("The capital of France is")
    assert on_device.generate_ids(ids, 4) == on_cpu.generate_ids(ids, 4)
