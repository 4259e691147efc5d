"""MiniLM and the Llama path on the primitive-only backend: every non-primitive op they use
runs through its decomposition and the results match the CPU backend's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backends.primitive_backend import (
    DEVICE,
    primitive_backend,
)
from tests.models.tiny_gguf import assert_matches_the_cpu

SENTENCES = ["hello world", "A man is eating a piece of bread.", "The girl is carrying a baby."]


@pytest.fixture(scope="module", autouse=True)
def backend():
    yield primitive_backend()


def test_minilm_matches_the_cpu_backend(minilm_folder):
    from fuel.models import minilm

    on_cpu = minilm.load().encode(SENTENCES)
    on_primitives = minilm.load(device=DEVICE).encode(SENTENCES)
    np.testing.assert_allclose(on_primitives, on_cpu, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("fields", [{}, {"matrix_type": "Q8_0", "kv_heads": 1}])
def test_tiny_llama_matches_the_cpu_backend(tiny_gguf, cache_dir, fields):
    assert_matches_the_cpu(tiny_gguf(**fields), DEVICE)
