"""Prompts run in a few step sizes (``prefill_pieces``), and a model file ``fuel tune`` ran
is warmed at load: its prompt steps captured and prepared before the first generation."""

from __future__ import annotations

import numpy as np
import pytest

import fuel


@pytest.mark.parametrize("chunk", [128, 7])
def test_prefill_pieces_cover_the_prompt_in_powers_of_two(chunk, monkeypatch):
    import fuel.models.llama as llama

    monkeypatch.setattr(llama, "PREFILL_CHUNK", chunk)
    for count in range(1, 3 * chunk + 2):
        pieces = llama.prefill_pieces(count)
        assert sum(pieces) == count
        whole = pieces.count(chunk)
        assert pieces[:whole] == [chunk] * whole and whole == count // chunk
        rest = pieces[whole:]  # below the chunk: distinct powers of two, largest first
        assert all(p & (p - 1) == 0 and p < chunk for p in rest)
        assert rest == sorted(set(rest), reverse=True)


def test_pieces_give_the_logits_of_one_whole_step(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    ids = np.array(model.encode("the cat in the hat sat on the mat today"), np.int64)
    assert len(ids) > 4
    pieces = model.forward(ids, model.new_cache(32), all_logits=True)
    whole = model._step(ids, model.new_cache(32), True)  # every id in one step
    np.testing.assert_allclose(pieces, whole, rtol=0, atol=1e-5 * np.abs(whole).max())


def test_prepare_launches_nothing_and_the_call_matches(cache_dir):
    def scaled(x: fuel.Tensor, y: fuel.Tensor) -> fuel.Tensor:
        return (x * 2 + y).relu().sum(-1)

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    step = fuel.jit(scaled)
    with fuel.profile() as profile:
        step.prepare(fuel.from_numpy(np.zeros_like(x)), fuel.from_numpy(np.zeros_like(y)))
    assert profile.ops == [] and profile.launches == []  # nothing was launched
    assert len(step.captures) == 1
    got = step(fuel.from_numpy(x), fuel.from_numpy(y)).numpy()
    np.testing.assert_allclose(got, np.maximum(x * 2 + y, 0).sum(-1), rtol=1e-6)
    assert len(step.captures) == 1 and step.replays == 1  # the prepared capture ran


def test_a_tuned_file_is_warmed_at_load(tiny_gguf, cache_dir, tmp_path, monkeypatch):
    from fuel.models.llama import load_gguf
    from fuel.models.warm_record import recalled, remember

    path = tiny_gguf()
    monkeypatch.setenv("FUEL_WARM_FILE", str(tmp_path / "warm.json"))
    prompt = [5, 9, 60, 7, 11]  # pieces 4 and 1
    plain = load_gguf(path, warm=False)
    expected = plain.generate_ids(prompt, 6)
    capacity = plain.cache_capacity(len(prompt) + 6)  # the tiny model's context: 48
    remember(path, {capacity: 8})
    assert recalled(path) == {capacity: 8}
    model = load_gguf(path)
    (cache,) = model._cache_pool.values()
    assert cache.capacity == capacity
    assert sorted(cache.replays) == [(1, False), (2, False), (4, False), (8, False)]
    assert all(len(replay.captures) == 1 for replay in cache.replays.values())
    before = {key: replay.replays for key, replay in cache.replays.items()}
    assert model.generate_ids(prompt, 6) == expected
    assert cache.replays[(4, False)].replays == before[(4, False)] + 1  # replayed, not captured
    assert all(len(replay.captures) == 1 for replay in cache.replays.values())


def test_warming_is_skipped_when_off_or_for_a_changed_file(tiny_gguf, cache_dir, tmp_path,
                                                           monkeypatch):
    from fuel.models.llama import load_gguf
    from fuel.models.warm_record import recalled, remember

    path = tiny_gguf()
    monkeypatch.setenv("FUEL_WARM_FILE", str(tmp_path / "warm.json"))
    remember(path, {64: 8})
    monkeypatch.setenv("FUEL_WARM", "off")
    assert recalled(path) == {}
    assert load_gguf(path)._cache_pool == {}
    monkeypatch.delenv("FUEL_WARM")
    tiny_gguf(seed=1)  # the same file name written again: another model
    assert recalled(path) == {}
    (tmp_path / "warm.json").write_text("{not json")
    assert recalled(path) == {}  # an unreadable record is only a missing hint


@pytest.mark.parametrize("longest", [1, 3])
def test_warm_prepares_the_pieces_up_to_the_longest(tiny_gguf, cache_dir, longest):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf(), warm=False)
    assert model.warm(64, longest) == longest.bit_length()
    (cache,) = model._cache_pool.values()
    assert cache.length == 0 and not cache.in_use
