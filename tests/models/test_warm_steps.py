"""Warm starts (fuel.models.warm_steps): ``fuel tune`` records the step shapes a GGUF ran, and a
later load of the same file prepares them, so its first prompt replays a prepared capture
(nothing captured or planned at the call) and computes what an unwarmed model computes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fuel import InvalidArgument
from fuel.cli import main
from fuel.runtime.judge import JUDGE


@pytest.fixture
def judge_cached(tmp_path, monkeypatch):
    """A cache folder of its own and the judge reading stored winners (the suite's default,
    ``off``, reads no warm-start record either)."""
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUEL_JUDGE", "cached")
    JUDGE.forget()
    yield
    JUDGE.forget()


def _captures(model, capacity: int) -> dict:
    return {key: (function, dict(function.captures))
            for key, function in model._cache_pool[capacity].replays.items()
            if function is not None}


def test_a_recorded_step_is_prepared_at_load_and_replayed_by_the_first_prompt(tiny_gguf,
                                                                              judge_cached):
    from fuel.models import warm_steps
    from fuel.models.llama import load_gguf
    from fuel.models.llama_graph import row_bucket

    path = tiny_gguf()
    plain = load_gguf(path)
    assert warm_steps.recorded(path) == []  # never tuned: nothing prepared
    prompt = plain.encode("the cat sat on the mat")
    expected = plain.generate_ids(prompt, 5)
    expected_logits = plain.forward(prompt, plain.new_cache(48))
    capacity = plain.cache_capacity(len(prompt) + 5)
    rows = row_bucket(len(prompt))
    assert (capacity, rows, False) in plain.ran_steps and (capacity, 1, False) in plain.ran_steps
    warm_steps.record(path, plain.ran_steps)
    assert warm_steps.recorded(path) == sorted(plain.ran_steps)

    model = load_gguf(path)
    before = _captures(model, capacity)
    assert (rows, False) in before and (1, False) in before  # prepared, each captured once
    assert all(len(captures) == 1 for _, captures in before.values())
    assert model.generate_ids(prompt, 5) == expected
    after = _captures(model, capacity)
    for key, (function, captures) in before.items():  # the prompt and the decode steps
        assert after[key][0] is function and after[key][1] == captures  # replayed, not new
    np.testing.assert_array_equal(model.forward(prompt, model.new_cache(48)), expected_logits)


def test_a_warm_start_within_a_resident_limit_takes_the_fewest_rows_first(tiny_gguf,
                                                                           judge_cached,
                                                                           monkeypatch):
    """Bounded (``resident_limit``), the steps are taken in order of rows while the resident
    memory, plus what the last step (not the first: the weights' pages) added, stays under
    the limit; a limit already passed prepares nothing, none prepares every step."""
    from fuel.models import warm_steps
    from fuel.models.llama import load_gguf

    path = tiny_gguf()
    steps = [(48, 8, False), (48, 1, False), (48, 4, False)]
    readings = iter([100, 100, 120])  # before each step: the third would pass 130 (120 + 20)
    monkeypatch.setattr(warm_steps, "resident_bytes", lambda: next(readings))
    model = load_gguf(path, warm=False)
    assert model.warm(steps, resident_limit=130) == 2
    assert list(model._cache_pool[48].replays) == [(1, False), (4, False)]
    monkeypatch.setattr(warm_steps, "resident_bytes", lambda: 100)
    assert load_gguf(path, warm=False).warm(steps, resident_limit=99) == 0
    assert load_gguf(path, warm=False).warm(steps) == 3
    monkeypatch.delenv("FUEL_WARM_LIMIT", raising=False)
    assert warm_steps.resident_limit(100, 1000) is None  # unset: every recorded step
    monkeypatch.setenv("FUEL_WARM_LIMIT", "1.25")
    assert warm_steps.resident_limit(100, 1000) == 100 + warm_steps.WARM_MIN_BYTES
    assert warm_steps.resident_limit(100, 1 << 30) == 100 + (5 << 28)
    monkeypatch.setenv("FUEL_WARM_LIMIT", "lots")
    with pytest.raises(InvalidArgument, match="FUEL_WARM_LIMIT"):
        warm_steps.resident_limit(100, 1000)


def test_a_changed_file_or_the_judge_off_warms_nothing(tiny_gguf, judge_cached, monkeypatch):
    from fuel.models import warm_steps

    path = tiny_gguf()
    warm_steps.record(path, [(48, 8, False)])
    assert warm_steps.recorded(path) == [(48, 8, False)]
    monkeypatch.setenv("FUEL_JUDGE", "off")
    assert warm_steps.recorded(path) == []
    monkeypatch.setenv("FUEL_JUDGE", "cached")
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))  # a new version
    assert warm_steps.recorded(path) == []


def test_fuel_tune_records_the_steps_it_ran(tiny_gguf, judge_cached, monkeypatch, capsys):
    from fuel.cli import tune
    from fuel.models import warm_steps

    path = tiny_gguf()
    monkeypatch.setattr(tune, "SMOLLM_PROMPTS", (2, 4))
    monkeypatch.setattr(tune, "SMOLLM_NEW_TOKENS", 2)
    monkeypatch.setenv("FUEL_JUDGE_MAX_LOAD", "1000")
    assert main(["tune", str(path), "--quiet"]) == 0
    monkeypatch.setenv("FUEL_JUDGE", "cached")  # tune set "on" for its run only
    steps = warm_steps.recorded(path)
    assert {rows for _, rows, _ in steps} == {1, 2, 4}
    assert warm_steps.record_path().exists()
