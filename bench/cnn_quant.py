"""Quantized versions of bench/cnn.py's models (``python bench/cnn.py --quant dynamic,qdq,qop``).

Each exported float model is quantized once with onnxruntime's own tools into the same cache
folder, after onnxruntime's ``quant_pre_process`` (shape inference and graph cleanup):

- ``dynamic``: ``quantize_dynamic`` (int8 weights; activations quantized per call by
  DynamicQuantizeLinear, then ConvInteger / MatMulInteger);
- ``qdq``: ``quantize_static`` in QDQ format (int8 activations and weights, per-tensor,
  QuantizeLinear/DequantizeLinear pairs around each Conv, Gemm, Add, ...), calibrated on a few
  random inputs (MinMax);
- ``qop``: ``quantize_static`` in QOperator format with uint8 activations and int8 weights (the
  x64 form onnxruntime recommends): QLinearConv, com.microsoft QLinearAdd,
  QLinearGlobalAveragePool, QGemm, QLinearConcat, QLinearSigmoid, QLinearMul, ...

Agreement: each system quantizes its activations itself, so a value sitting on a rounding edge
may land one quantization step apart and carry on through later layers. The reference is
onnxruntime's output of the same quantized file; the bound is ``STEPS`` quantization steps of
the output: the step of a de-quantized output (the smallest gap between its distinct values,
when it has at most 256 of them), else the output's span / 255.

Where that bound is exceeded the row is checked against the quantization's own error: fuel's
output must then be no farther from onnxruntime's than onnxruntime's is from the float model
it quantized (``quantization_error``, the float model run by onnxruntime on the same input).
A few steps mean little where the quantized model itself is far off: efficientnet_b0 with
random weights shrinks its activations to about 1e-13 at the head (its output's scale is 3e-16),
so at batch 8 the QDQ and dynamic files' one-step differences (fuel quantizes the
squeeze-excite's float results itself where onnxruntime runs its integer and tabulated
kernels) compound to 6-6.5 steps, 2e-15, while onnxruntime's output is 3.3e-15 (dynamic) and
4.2e-15 (QDQ) from the float model's.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

KINDS = ("dynamic", "qdq", "qop")
STEPS = 4  # allowed difference, in steps of span / 255
CALIBRATION = 4  # random calibration inputs


def split(name: str) -> tuple[str, str | None]:
    """``"resnet18@qdq"`` -> ``("resnet18", "qdq")``; a float model's name -> ``(name, None)``."""
    base, _, kind = name.partition("@")
    if kind and kind not in KINDS:
        raise SystemExit(f"unknown quantization {kind!r}: one of {', '.join(KINDS)}")
    return base, kind or None


def quantized_path(source: Path, kind: str, size: int) -> Path:
    """The ``kind`` quantization of the float model at ``source`` (made the first time)."""
    path = source.with_name(f"{source.stem}.{kind}.onnx")
    if path.exists():
        return path
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = source.with_name(f"{source.stem}.{os.getpid()}.pre.onnx")
    partial = path.with_suffix(f".{os.getpid()}.partial")
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(123)
            self.batches = iter([{"input": rng.standard_normal((1, 3, size, size))
                                  .astype(np.float32)} for _ in range(CALIBRATION)])

        def get_next(self):
            return next(self.batches, None)

    try:
        if kind == "dynamic":
            quantize_dynamic(str(prepared), str(partial))
        elif kind == "qdq":
            quantize_static(str(prepared), str(partial), Reader(), quant_format=QuantFormat.QDQ)
        else:
            quantize_static(str(prepared), str(partial), Reader(),
                            quant_format=QuantFormat.QOperator,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        partial.replace(path)
    finally:
        prepared.unlink(missing_ok=True)
        for leftover in source.parent.glob("*.partial"):
            if str(os.getpid()) in leftover.name:
                leftover.unlink()
    return path


def step(values: np.ndarray) -> float:
    """One quantization step of an output (see the module's docstring)."""
    distinct = np.unique(values.astype(np.float64))
    if 1 < distinct.size <= 256:
        return float(np.diff(distinct).min())
    return float(distinct[-1] - distinct[0]) / 255 or 1.0


def steps_apart(save_fuel: str, save_peer: str) -> float:
    """The largest difference between the systems' outputs, in steps of onnxruntime's."""
    ours, theirs = np.load(save_fuel), np.load(save_peer)
    return max(float(np.abs(ours[k].astype(np.float64) - theirs[k]).max()) / step(theirs[k])
               for k in theirs.files)


def farthest(save_a: str, save_b: str) -> float:
    """The largest absolute difference between two saved sets of outputs."""
    a, b = np.load(save_a), np.load(save_b)
    return max(float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max())
               for k in b.files)
