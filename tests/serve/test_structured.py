"""Structured outputs in-process on the tiny model (random weights: without the mask its
answers are not JSON): every json_schema answer, greedy or sampled, parses and validates
against its schema and ends with finish reason "stop" (the schemas bound every value, so the
grammar ends the answer).
llguidance and jsonschema are needed (the ``serve`` and ``test`` extras)."""

from __future__ import annotations

import json
import queue

import pytest

TIMEOUT_S = 120
SCHEMAS = [
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
     "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                      "tag": {"enum": ["cat", "hat"]}},
     "required": ["n", "tag"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                      "xs": {"type": "array", "items": {"type": "boolean"},
                                             "maxItems": 2}},
     "required": ["name", "xs"], "additionalProperties": False},
]


def test_json_schema_answers_validate(local_model):
    pytest.importorskip("llguidance")
    jsonschema = pytest.importorskip("jsonschema")
    from fuel.models.sampling import SamplingConfig
    from fuel.serve.engine import Engine, Job

    model = local_model
    cases = [(schema, SamplingConfig(temperature=0.9, seed=seed) if seed else SamplingConfig())
             for schema in SCHEMAS + [{"type": "object", "properties": {"v": {
                 "anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 9}]}},
                 "required": ["v"], "additionalProperties": False}]
             for seed in (0, 1, 2)]
    events: queue.Queue = queue.Queue()
    engine = Engine(model, slots=4)
    for index, (schema, sampling) in enumerate(cases):
        engine.submit(Job(emit=lambda k, p, i=index: events.put((i, k, p)),
                          ids=model.encode("the cat"), max_tokens=60, sampling=sampling,
                          schema=schema))
    engine.start()
    texts = [[] for _ in cases]
    done = {}
    try:
        while len(done) < len(cases):
            index, kind, payload = events.get(timeout=TIMEOUT_S)
            if kind == "piece":
                texts[index].append(payload)
            else:
                done[index] = (kind, payload)
    finally:
        engine.stop()
    for index, (schema, _) in enumerate(cases):
        kind, payload = done[index]
        assert kind == "done" and payload[0] == "stop", (schema, kind, payload)
        document = json.loads("".join(texts[index]))
        jsonschema.validate(document, schema)
        assert isinstance(document, dict)
