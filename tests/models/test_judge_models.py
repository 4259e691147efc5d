"""Both shipped models give the same results whatever the judge dispatches: MiniLM's
embeddings within float32 rounding of a reordered sum, SmolLM2's greedy ids equal, with
FUEL_JUDGE off, on (timing every unseen bucket) and cached (the winners "on" stored)."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.runtime.judge import JUDGE, judge_stats

SENTENCES = ["hello world", "A man is eating a piece of bread.",
             "The quick brown fox jumps over the lazy dog, twice, before lunch."]


@pytest.fixture
def judge_modes(tmp_path, monkeypatch):
    """Runs ``function`` once per mode, each with a fresh judge and no cached plans."""
    monkeypatch.setenv("FUEL_JUDGE_MAX_LOAD", "1000")
    monkeypatch.setattr(JUDGE, "path", tmp_path / "winners.json")  # kernels stay cached

    def run(function):
        found = {}
        for mode in ("off", "on", "cached"):
            monkeypatch.setenv("FUEL_JUDGE", mode)
            JUDGE.forget()
            fuel.set_plan_cache_capacity(0)
            fuel.set_plan_cache_capacity(128)
            found[mode] = function()
        assert judge_stats()["stored"] >= 1  # "cached" used what "on" timed and stored
        return found

    yield run
    JUDGE.forget()


def test_minilm_embeddings_agree_across_judge_modes(minilm_folder, judge_modes):
    from fuel.models import minilm

    found = judge_modes(lambda: minilm.load().encode(SENTENCES))
    for mode in ("on", "cached"):
        np.testing.assert_allclose(found[mode], found["off"], rtol=1e-5, atol=2e-6)


def test_smollm_greedy_ids_agree_across_judge_modes(smollm_path, judge_modes):
    from fuel.models.llama import load_gguf

    def greedy():
        model = load_gguf()
        return model.generate_ids(model.encode("The capital of France is"), 6)

    found = judge_modes(greedy)
    assert found["on"] == found["off"] == found["cached"]
