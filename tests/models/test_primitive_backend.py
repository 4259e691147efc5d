"""MiniLM and the Llama path on the primitive-only backend: every non-primitive op they use
runs through its decomposition and the results match the CPU backend's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backends.primitive_backend import (
    DEVICE,
    primitive_backend,
)

SENTENCES = ["hello world", "A man is eating a piece of bread.", "The girl is carrying a baby."]


@pytest.fixture(scope="module", autouse=True)
def backend():
    yield primitive_backend()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "fuel-cache"
    monkeypatch.setenv("FUEL_CACHE_DIR", str(folder))
    return folder


def test_minilm_matches_the_cpu_backend(minilm_folder):
    from fuel.models import minilm

    on_cpu = minilm.load().encode(SENTENCES)
    on_primitives = minilm.load(device=DEVICE).encode(SENTENCES)
    np.testing.assert_allclose(on_primitives, on_cpu, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("fields", [{}, {"matrix_type": "Q8_0", "kv_heads": 1}])
def test_tiny_llama_matches_the_cpu_backend(tiny_gguf, cache_dir, fields):
    from fuel.models.llama import load_gguf

    path = tiny_gguf(**fields)
    on_cpu, on_primitives = load_gguf(path), load_gguf(path, device=DEVICE)
    ids = on_cpu.encode("the cat in the hat")
    expected = on_cpu.forward(ids, on_cpu.new_cache(32), all_logits=True)
    got = on_primitives.forward(ids, on_primitives.new_cache(32), all_logits=True)
    assert np.abs(got - expected).max() <= 1e-4
    assert on_primitives.generate_ids(ids, 8) == on_cpu.generate_ids(ids, 8)
