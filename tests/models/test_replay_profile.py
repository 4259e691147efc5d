"""Replayed model steps (fuel.jit) under fuel.profile(): every launch shows in the table and in
the Chrome trace, as many as an eager run of the same step makes."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

import fuel


def _kernel_events(profile, path) -> list[dict]:
    profile.export_chrome_trace(path)
    return [e for e in json.loads(path.read_text())["traceEvents"] if e["cat"] != "phase"]


def _assert_same_launches(replayed, eager, tmp_path) -> None:
    assert "jit.replay" in replayed.phases and "jit.replay" not in eager.phases
    assert Counter(row.op for row in replayed.launches) == Counter(
        row.op for row in eager.launches)
    assert {op: n for op, _, n, _ in replayed.ops} == {op: n for op, _, n, _ in eager.ops}
    assert all(row.node.startswith("node ") for row in replayed.launches)
    events = _kernel_events(replayed, tmp_path / "replayed.json")
    assert len(events) == len(eager.launches) > 20
    table = replayed.table_text()
    for op, _, count, _ in replayed.ops:
        assert any(line.split()[:3] == [op, "cpu", str(count)] for line in table.splitlines())


def test_minilm_replayed_forward_profiles_every_launch(minilm_folder, tmp_path):
    from fuel.models import minilm

    model = minilm.load()
    sentences = ["a replayed forward", "is profiled launch by launch"]
    model.encoder.use_jit = False
    with fuel.profile() as eager:
        expected = model.encode(sentences)
    model.encoder.use_jit = True
    model.encode(sentences)  # first sighting of the shape: eager
    model.encode(sentences)  # captured
    with fuel.profile() as replayed:
        embeddings = model.encode(sentences)
    _assert_same_launches(replayed, eager, tmp_path)
    np.testing.assert_allclose(embeddings, expected, atol=1e-6)


def test_smollm2_replayed_decode_step_profiles_every_launch(tiny_gguf, tmp_path):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf(), use_cache=False)
    prompt = model.encode("the cat in the hat")

    def profiled_decode(use_jit: bool):
        model.use_jit = use_jit
        cache = model.new_cache(16)
        model.forward(prompt, cache)
        model.forward([5], cache)  # with jit: captured
        model.forward([6], cache)  # with jit: replayed
        with fuel.profile() as profile:
            logits = model.forward([7], cache)
        return profile, logits

    eager, expected = profiled_decode(False)
    replayed, logits = profiled_decode(True)
    _assert_same_launches(replayed, eager, tmp_path)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
