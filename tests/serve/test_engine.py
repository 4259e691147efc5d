"""The serving engine in-process: requests batched together end exactly as the model's own
generation of the same request ends (text, finish reason, token counts): both drive one
generation state machine."""

from __future__ import annotations

import queue

import pytest

TIMEOUT_S = 120


def test_batched_requests_end_as_the_model_generation_does(local_model):
    from fuel.models.sampling import SamplingConfig
    from fuel.serve.engine import Engine, Job

    model = local_model
    sampled = SamplingConfig(temperature=0.8, seed=3)
    full = "".join(model.generate("in the hat", 20, temperature=0.8, seed=3))
    requests = [  # (prompt, max_tokens, sampling, stop strings)
        ("the cat", 12, SamplingConfig(), ()),
        ("in the hat", 20, sampled, (full[6:8],)),
        ("a hat", 5, SamplingConfig(repetition_penalty=1.3), ()),
    ]
    expected = []
    for prompt, max_tokens, sampling, stop in requests:
        generation = model.start_generation(model.encode(prompt), max_tokens, sampling,
                                            text=True, stop=stop)
        text = "".join(model.drive_text(generation))
        expected.append((text, (generation.finish_reason, generation.stats.prompt_tokens,
                                 generation.produced)))
    assert expected[1][1][0] == "stop"  # the stop string was met

    events: queue.Queue = queue.Queue()
    engine = Engine(model, slots=4)
    jobs = []
    for index, (prompt, max_tokens, sampling, stop) in enumerate(requests):
        def emit(kind, payload, index=index):
            events.put((index, kind, payload))

        jobs.append(Job(emit=emit, ids=model.encode(prompt), max_tokens=max_tokens,
                        sampling=sampling, stop=stop))
    for job in jobs:  # queued before the worker starts: admitted together, decoded batched
        engine.submit(job)
    engine.start()
    pieces: list[list[str]] = [[] for _ in jobs]
    done: dict[int, tuple] = {}
    try:
        while len(done) < len(jobs):
            index, kind, payload = events.get(timeout=TIMEOUT_S)
            if kind == "error":
                pytest.fail(f"request {index} failed: {payload}")
            if kind == "piece":
                pieces[index].append(payload)
            else:
                done[index] = payload
    finally:
        engine.stop()
    assert [("".join(p), done[i]) for i, p in enumerate(pieces)] == expected
