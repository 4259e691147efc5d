"""The models on a CUDA device against the CPU backend (skipped, naming why, without one): a
tiny Llama, MiniLM embeddings and SmolLM2's greedy ids (issue 31's "equal the CPU's")."""

from __future__ import annotations

import numpy as np

from tests.backends.cuda.renderings import cuda_device
from tests.models.tiny_gguf import assert_matches_the_cpu

SENTENCES = ["hello world", "A man is eating a piece of bread.", "The girl is carrying a baby."]


def test_tiny_llama_on_cuda_matches_the_cpu(tiny_gguf, cache_dir):
    assert_matches_the_cpu(tiny_gguf(), cuda_device())


def test_minilm_embeddings_on_cuda_match_the_cpu(minilm_folder):
    from fuel.models import minilm

    device = cuda_device()
    on_cpu = minilm.load().encode(SENTENCES)
    on_device = minilm.load(device=device).encode(SENTENCES)
    np.testing.assert_allclose(on_device, on_cpu, rtol=1e-4, atol=2e-6)


def test_smollm2_greedy_ids_on_cuda_match_the_cpu(smollm_path, cache_dir):
    from fuel.models.llama import load_gguf

    device = cuda_device()
    on_cpu, on_device = load_gguf(), load_gguf(device=device)
    ids = on_cpu.encode("The capital of France is")
    assert on_device.generate_ids(ids, 16) == on_cpu.generate_ids(ids, 16)
