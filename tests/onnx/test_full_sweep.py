"""The whole ONNX backend suite (node cases, model folders, light CNNs) against the issue's
bar: at least 1275 of the float32/int64-input node cases, 1870 of all node cases (1883 pass
with Pillow installed, 1874 without: ImageDecoder), every light CNN and every simple model.
It finishes in well under a minute, so it runs by default."""

from __future__ import annotations

import time

from fuel.conformance.cases import load_cases
from fuel.conformance.onnx import run_all
from fuel.conformance.report import totals


def test_full_sweep_meets_the_bar():
    start = time.perf_counter()
    results = run_all(load_cases(), show_progress=False)
    counts = totals(results)
    seconds = time.perf_counter() - start
    assert counts["node float32/int64"]["pass"] >= 1275, counts
    assert counts["node"]["pass"] >= 1870, counts
    assert counts["simple"]["pass"] == counts["simple"]["total"], counts
    assert counts["light"]["pass"] == counts["light"]["total"] == 9, counts
    assert counts["pytorch-converted"]["pass"] == counts["pytorch-converted"]["total"], counts
    assert counts["node"]["error"] == 0, [r.case.name for r in results if r.status == "error"]
    print(f"full ONNX sweep: {len(results)} cases in {seconds:.1f} s")
