"""The onnx_fast subset of the ONNX backend suite: the first passing case of every op, a case
of every model folder and every light CNN (tests/onnx/fast_cases.txt, written by the
harness's --fast-list). Runs in the default test run."""

from __future__ import annotations

import os

import pytest

from fuel.conformance.cases import load_cases
from fuel.conformance.runner import PASS, run_case
from fuel.onnx.context import DEFAULT_DOMAINS, OPS

pytestmark = pytest.mark.onnx_fast
LIST = os.path.join(os.path.dirname(__file__), "fast_cases.txt")
# Ops fuel converts that no passing case of the suite exercises on its own.
NOT_IN_SUITE = {"Optional", "SequenceErase", "GlobalLpPool", "Scatter", "RandomUniform",
                "RandomNormal", "RandomNormalLike",
                # onnxruntime's, not ONNX's (tests/onnx/test_microsoft_ops.py checks them)
                "SimplifiedLayerNormalization"}
OUTSIDE_SUITE_DOMAINS = {"com.microsoft"}  # tests/onnx/test_microsoft_ops.py


def _names() -> list[str]:
    with open(LIST, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def cases():
    names = set(_names())
    pattern = "|".join(f"^{name}$" for name in sorted(names))
    return {case.name: case for case in load_cases(pattern=pattern)}


@pytest.mark.parametrize("name", _names())
def test_case_passes(cases, name):
    assert name in cases, f"{name} is not in the installed onnx's suite"
    result = run_case(cases[name])
    assert result.status == PASS, f"{name}: {result.status}: {result.detail}"


def _op_types(graph) -> set[tuple[str, str]]:
    found = set()
    for node in graph.node:
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        found.add((domain, node.op_type))
        for attribute in node.attribute:
            if attribute.HasField("g"):
                found |= _op_types(attribute.g)
    return found


def test_every_converter_runs_in_the_fast_subset(cases):
    import onnx

    covered = set()
    for case in cases.values():
        covered |= _op_types(onnx.load(case.model_path, load_external_data=False).graph)
    missing = sorted(f"{d}::{t}" if d else t for d, t in OPS
                     if (d, t) not in covered and t not in NOT_IN_SUITE
                     and d not in OUTSIDE_SUITE_DOMAINS)
    assert not missing, f"converters no fast case runs: {missing}"
