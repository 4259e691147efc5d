"""The generation state machine (fuel.models.generation): what it asks the driver to run, when it
finishes and why, the text it releases around stop strings; and a Generation stepped by hand
on a model equals the model's own generate."""

from __future__ import annotations

import numpy as np
import pytest

from fuel import InvalidArgument
from fuel.models.generation import Generation, TextStream
from fuel.models.sampling import Sampler, SamplingConfig

VOCAB = 8
STOP_TOKEN = 0
LETTERS = "_abcdefg"  # token i decodes to LETTERS[i]; token 0 (the stop token) to nothing


class LetterTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(LETTERS[i] for i in ids if i != STOP_TOKEN)


def _row(token: int) -> np.ndarray:
    logits = np.zeros(VOCAB, np.float32)
    logits[token] = 1.0
    return logits


def _generation(budget: int, cached: int = 0, stop=None) -> Generation:
    text = TextStream(LetterTokenizer(), stop) if stop is not None else None
    return Generation(np.array([3, 1, 4, 1, 5]), budget, Sampler(SamplingConfig()), {STOP_TOKEN},
                      cached, text)


def test_prefill_then_decode_steps_until_the_budget():
    generation = _generation(budget=3, cached=2)
    assert generation.positions_needed == 8
    ran = []
    for token in (6, 2, 7):
        assert not generation.finished
        ran.append(generation.pending_ids().tolist())
        assert generation.advance(_row(token)) == token
    assert ran == [[4, 1, 5], [6], [2]]  # the prompt past the cached ids, then each token
    assert generation.finished and generation.finish_reason == "length"
    assert generation.tokens == [6, 2, 7] and generation.stats.new_tokens == 3
    assert generation.stats.cached_tokens == 2 and generation.stats.prompt_tokens == 5
    with pytest.raises(InvalidArgument, match="finished"):
        generation.pending_ids()
    with pytest.raises(InvalidArgument, match="finished"):
        generation.advance(_row(1))


def test_the_stop_token_ends_the_generation_and_is_kept():
    generation = _generation(budget=10, stop=())
    for token in (1, 2, STOP_TOKEN):
        generation.pending_ids()
        generation.advance(_row(token))
    assert generation.finished and generation.finish_reason == "stop"
    assert generation.tokens == [1, 2, STOP_TOKEN] and not generation.stopped_at_string
    assert generation.piece == "" and generation.finish_text() == ""


def test_a_stop_string_across_tokens_cuts_the_text_before_it():
    generation = _generation(budget=10, stop=["cde"])
    pieces = []
    for token in (1, 2, 3, 4, 5, 6):
        if generation.finished:
            break
        generation.pending_ids()
        generation.advance(_row(token))
        pieces.append(generation.piece)
    # "ab" is shown; "c" and "cd" could start the stop string, "cde" is it
    assert pieces == ["a", "b", "", "", ""]
    assert generation.finished and generation.finish_reason == "stop"
    assert generation.stopped_at_string and generation.tokens == [1, 2, 3, 4, 5]
    assert generation.finish_text() == ""


def test_text_held_back_is_released_when_the_budget_ends_it():
    generation = _generation(budget=3, stop=["cde"])
    pieces = []
    for token in (1, 2, 3):
        generation.pending_ids()
        generation.advance(_row(token))
        pieces.append(generation.piece)
    assert pieces == ["a", "b", ""] and generation.finish_reason == "length"
    assert generation.finish_text() == "c"


def test_a_generation_stepped_by_hand_equals_generate(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    settings = dict(temperature=1.3, seed=5)
    full = "".join(model.generate("the cat", 24, **settings))
    stop = full[4:6]
    expected = "".join(model.generate("the cat", 24, stop=stop, **settings))
    assert expected == full[:full.index(stop)]
    expected_stats = model.last_stats
    generation = model.start_generation(model.encode("the cat"), 24,
                                        SamplingConfig(**settings), text=True, stop=stop)
    cache = model.new_cache(model.cache_capacity(generation.positions_needed))
    pieces = []
    while not generation.finished:
        generation.advance(model.forward(generation.pending_ids(), cache)[-1])
        pieces.append(generation.piece)
    pieces.append(generation.finish_text())
    assert "".join(pieces) == expected
    assert generation.finish_reason == expected_stats.finish_reason == "stop"
    assert generation.stats.new_tokens == expected_stats.new_tokens
    with pytest.raises(InvalidArgument, match="driven from its start"):
        next(model.drive(generation))  # already run
    fresh = model.start_generation(model.encode("the cat"), 4)
    with pytest.raises(InvalidArgument, match=f"this one holds {cache.length}"):
        next(model.drive(fresh, cache))  # a cache holding other positions
    with pytest.raises(InvalidArgument, match="text=True"):
        next(model.drive_text(fresh))
