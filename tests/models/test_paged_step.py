"""A paged step gives every row the logits the model's own (contiguous-cache) path gives (to
float rounding: the paged attention sums in another order, and a quantized matmul's 16-bit
activation codes may then round the other way, so 5e-4 on logits of order 1, the same argmax):
prompts read in one chunk or several, mixed in one step with other requests' decode tokens,
their blocks scattered over the pool; its capture is per row bucket, whichever requests."""

from __future__ import annotations

import numpy as np


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-4)
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_paged_steps_match_the_models_own_steps(tiny_gguf, tmp_path, monkeypatch):
    from fuel.models.kv_cache import PagedKVPool
    from fuel.models.llama import load_gguf
    from fuel.models.paged_step import Chunk, PagedStepper

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    model = load_gguf(tiny_gguf(context=256))
    c = model.config
    pool = PagedKVPool(c.num_layers, c.num_kv_heads, c.head_dim, 64, 4)
    stepper = PagedStepper(model, pool, 64)
    prompts = [model.encode("the cat in the hat sat on the mat"), model.encode("a hat"), [7]]
    rng = np.random.default_rng(0)
    order = [int(b) for b in rng.permutation(np.arange(1, 64))]  # scattered over the pool
    sizes = [-(-(len(p) + 5) // 4) for p in prompts]
    blocks = [order[:sizes[0]], order[sizes[0]:sizes[0] + sizes[1]],
              order[sizes[0] + sizes[1]:sum(sizes)]]
    alone = [model.new_cache(64) for _ in prompts]
    expected = [model.forward(p, cache)[-1] for p, cache in zip(prompts, alone)]
    # step 1: the first prompt's first 5 tokens (no logits), the others' whole prompts
    got = stepper.step([Chunk(prompts[0][:5], 0, blocks[0], False),
                        Chunk(prompts[1], 0, blocks[1], True),
                        Chunk(prompts[2], 0, blocks[2], True)])
    _close(got, np.stack(expected[1:]))
    # step 2: the rest of the first prompt, with decode tokens of the others
    tokens = [11, 12]
    got = stepper.step([Chunk(prompts[0][5:], 5, blocks[0], True),
                        Chunk([tokens[0]], len(prompts[1]), blocks[1], True),
                        Chunk([tokens[1]], len(prompts[2]), blocks[2], True)])
    more = [model.forward([t], cache)[-1] for t, cache in zip(tokens, alone[1:])]
    _close(got, np.stack([expected[0]] + more))
    # decode steps of all three, replayed from one capture per bucket
    lengths = [len(prompts[0]), len(prompts[1]) + 1, len(prompts[2]) + 1]
    for step in range(4):
        tokens = [5 + step, 60 + step, 100 + step]
        want = np.stack([model.forward([t], cache)[-1] for t, cache in zip(tokens, alone)])
        got = stepper.step([Chunk([t], n + step, b, True)
                            for t, n, b in zip(tokens, lengths, blocks)])
        _close(got, want)
    # (rows, logit rows) buckets (24, 3), (12, 2) and (3, 3): a body per row bucket, logits
    # per pair
    assert stepper.steps == 6
    assert sorted((s[0][1][0], s[1][1][0]) for s in stepper._logits_jit.captures) == [
        (3, 3), (12, 2), (24, 3)]
    assert len(stepper._jit.captures) == 3 and stepper._jit.replays == 3
