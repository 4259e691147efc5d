"""The loaders under mutated files (bench/fuzz.py's cases, a bounded number per format): every
case loads and runs, or ends in a FuelError naming the file; never another exception, a crash
or a hang. ``python bench/fuzz.py --format all --count 2000`` is the long run."""

from __future__ import annotations

import pytest

from bench import fuzz

NEEDS = {"gguf": ("gguf", "tokenizers"), "onnx": ("onnx",),
         "safetensors": ("safetensors", "tokenizers"), "tokenizer": ("safetensors", "tokenizers")}


@pytest.mark.parametrize("fmt", fuzz.FORMATS)
def test_mutated_files_load_or_are_refused_naming_the_file(fmt, tmp_path):
    for module in NEEDS[fmt]:
        pytest.importorskip(module)
    report = fuzz.fuzz(fmt, count=40, seed=0, timeout=120, workdir=tmp_path)
    assert report["bugs"] == [], report["bugs"]
    counts = report["counts"]
    assert sum(counts.values()) == 40
    assert counts["refused"] > 0  # the mutations reached the checks


@pytest.mark.slow
@pytest.mark.parametrize("fmt", fuzz.FORMATS)
def test_mutated_files_long_run(fmt, tmp_path):
    for module in NEEDS[fmt]:
        pytest.importorskip(module)
    report = fuzz.fuzz(fmt, count=500, seed=1, timeout=120, workdir=tmp_path)
    assert report["bugs"] == [], report["bugs"]
