"""A batched decode step gives each generation the logits it would get alone (each on its own
KV cache, of different capacities), writes each cache in place, and replays its capture."""

from __future__ import annotations

import numpy as np
import pytest


def test_batched_steps_match_single_steps(tiny_gguf, tmp_path, monkeypatch):
    from fuel.models.batched_decode import BatchDecoder
    from fuel.models.llama import load_gguf

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    model = load_gguf(tiny_gguf(context=256))
    prompts = [model.encode("the cat"), model.encode("in the hat on a mat"), [7]]
    alone = [model.new_cache(64) for _ in prompts]
    together = [model.new_cache(capacity) for capacity in (64, 128, 32)]
    storages = [[t._node.buffer for t in cache.tensors()] for cache in together]
    for prompt, a, b in zip(prompts, alone, together):
        model.forward(prompt, a)
        model.forward(prompt, b)
    decoder = BatchDecoder(model)
    for step in range(5):
        tokens = [5 + step, 60 + step, 100 + step]
        expected = np.stack([model.forward([t], c)[-1] for t, c in zip(tokens, alone)])
        got = decoder.step(tokens, together)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert [c.length for c in together] == [c.length for c in alone]
    assert [[t._node.buffer for t in c.tensors()] for c in together] == storages
    ((_, captured),) = decoder._captures.values()
    assert captured.replays == 4  # captured on the first step, replayed on the other four
    for a, b in zip(alone, together):
        written = a.length
        np.testing.assert_allclose(b.keys[0].numpy()[:, :written],
                                   a.keys[0].numpy()[:, :written], rtol=0, atol=1e-5)


def test_batched_step_rejects_a_repeated_or_full_cache(tiny_gguf, tmp_path, monkeypatch):
    from fuel import InvalidArgument
    from fuel.models.batched_decode import BatchDecoder
    from fuel.models.llama import load_gguf

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    model = load_gguf(tiny_gguf())
    cache = model.new_cache(4)
    decoder = BatchDecoder(model)
    with pytest.raises(InvalidArgument, match="distinct"):
        decoder.step([1, 2], [cache, cache])
    cache.length = 4
    with pytest.raises(InvalidArgument, match="full"):
        decoder.step([1], [cache])
