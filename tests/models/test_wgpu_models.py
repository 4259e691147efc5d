"""The models on the wgpu backend (lavapipe in CI) against the CPU backend: a tiny Llama by
default; MiniLM embeddings and SmolLM2's greedy ids with --runslow (lavapipe is slow)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backends.wgpu.support import wgpu_device
from tests.models.tiny_gguf import assert_matches_the_cpu

SENTENCES = ["hello world", "A man is eating a piece of bread.", "The girl is carrying a baby."]


def test_tiny_llama_on_wgpu_matches_the_cpu(tiny_gguf, cache_dir):
    assert_matches_the_cpu(tiny_gguf(), wgpu_device())


@pytest.mark.slow
def test_minilm_embeddings_on_wgpu_match_the_cpu(minilm_folder):
    from fuel.models import minilm

    device = wgpu_device()
    on_cpu = minilm.load().encode(SENTENCES)
    on_device = minilm.load(device=device).encode(SENTENCES)
    np.testing.assert_allclose(on_device, on_cpu, rtol=1e-4, atol=2e-6)


@pytest.mark.slow
def test_smollm2_greedy_ids_on_wgpu_match_the_cpu(smollm_path, cache_dir):
    from fuel.models.llama import load_gguf

    device = wgpu_device()
    on_cpu, on_device = load_gguf(), load_gguf(device=device)
    for prompt in ("The capital of France is", "def fibonacci(n):\n"):
        ids = on_cpu.encode(prompt)
        assert on_device.generate_ids(ids, 12) == on_cpu.generate_ids(ids, 12), prompt
