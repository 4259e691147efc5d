"""Each sampling option does what SamplingConfig says, checked on crafted logits against the
stated formula; stop strings cut the streamed text exactly before the first stop string."""

from __future__ import annotations

import numpy as np
import pytest

from fuel import InvalidArgument
from fuel.models.sampling import Sampler, SamplingConfig
from fuel.models.stop_strings import StopStringFilter

LOGITS = np.array([2.0, -1.0, 1.5, 0.5, -3.0, 1.9])


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    sampler = Sampler(SamplingConfig(repetition_penalty=2.0), prompt=[0, 1])
    got = sampler.penalize(LOGITS)
    expected = LOGITS.copy()
    expected[0], expected[1] = 2.0 / 2.0, -1.0 * 2.0
    np.testing.assert_array_equal(got, expected)
    assert sampler(LOGITS) == 5  # the unpenalized best (0) lost to 1.9
    assert Sampler(SamplingConfig(), prompt=[0, 1])(LOGITS) == 0


def test_frequency_and_presence_penalties_count_generated_tokens_only():
    sampler = Sampler(SamplingConfig(frequency_penalty=0.5, presence_penalty=0.25),
                      prompt=[2, 3])
    assert sampler(LOGITS) == 0
    assert sampler(np.array([0.0, 0, 0, 0, 0, 9])) == 5
    assert sampler(np.array([0.0, 0, 0, 0, 0, 9])) == 5
    got = sampler.penalize(LOGITS)
    expected = LOGITS.copy()
    expected[0] -= 1 * 0.5 + 0.25
    expected[5] -= 2 * 0.5 + 0.25
    np.testing.assert_allclose(got, expected)  # prompt tokens 2 and 3 are untouched


def test_a_batch_argmax_is_taken_only_by_plain_greedy_samplers():
    """The server's engine passes each row's argmax from one call over the step's logits:
    a plain greedy sampler takes it (and remembers it), a penalized or sampling one chooses
    from the row itself."""
    greedy = Sampler(SamplingConfig())
    assert greedy.plain_greedy and greedy(LOGITS, argmax=int(np.argmax(LOGITS))) == 0
    assert greedy._counts == {0: 1}
    penalized = Sampler(SamplingConfig(repetition_penalty=2.0), prompt=[0])
    assert not penalized.plain_greedy
    assert penalized(LOGITS, argmax=0) == 5  # its own pick over the penalized row
    sampled = Sampler(SamplingConfig(temperature=1.0, top_k=1, seed=3))
    assert not sampled.plain_greedy and sampled(LOGITS, argmax=2) == 0


def test_min_p_keeps_only_tokens_near_the_best():
    logits = np.log(np.array([0.5, 0.3, 0.1, 0.06, 0.04]))
    drawn = {Sampler(SamplingConfig(temperature=1.0, min_p=0.5, seed=s))(logits)
             for s in range(200)}
    assert drawn == {0, 1}  # 0.3 >= 0.5 * 0.5; 0.1 is not
    wide = {Sampler(SamplingConfig(temperature=1.0, min_p=0.15, seed=s))(logits)
            for s in range(200)}
    assert wide == {0, 1, 2}  # 0.1 >= 0.075; 0.06 is not


@pytest.mark.parametrize("options", [
    {"min_p": 1.5}, {"repetition_penalty": 0.0}, {"frequency_penalty": 3.0},
    {"presence_penalty": "a"}, {"seed": 1.5}, {"top_k": True},
])
def test_bad_sampling_options_are_named(options):
    with pytest.raises(InvalidArgument, match=next(iter(options))):
        SamplingConfig(**options)


def test_stop_filter_holds_back_only_possible_starts():
    stop = StopStringFilter(["END", "\n\n"])
    out = [stop.push(p) for p in ["Hello E", "N", "vy ", "text\n", "\nafter"]]
    assert out == ["Hello ", "", "ENvy ", "text", ""]
    assert stop.stopped and stop.finish() == ""
    plain = StopStringFilter("xyz")
    assert plain.push("abcx") == "abc" and plain.finish() == "x"


def test_generation_stops_before_a_stop_string(tiny_gguf, tmp_path, monkeypatch):
    from fuel.models.llama import load_gguf

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    model = load_gguf(tiny_gguf())
    full = "".join(model.generate("the cat", 30, temperature=1.0, seed=5))
    assert len(full) > 6
    stop = full[4:6]
    cut = "".join(model.generate("the cat", 30, temperature=1.0, seed=5, stop=[stop]))
    assert cut == full[:full.index(stop)]
    assert model.last_stats.finish_reason == "stop"
    assert model.last_stats.new_tokens < 30
