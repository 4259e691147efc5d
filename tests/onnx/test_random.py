"""ONNX's random ops: Bernoulli, RandomUniformLike, RandomNormal, Dropout in training mode
(statistics and seeds), and the conformance harness's statistical judges (they must reject
wrong draws)."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.conformance.cases import Case
from fuel.conformance.runner import judge_bernoulli, judge_dropout

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

FLOAT, DOUBLE = TensorProto.FLOAT, TensorProto.DOUBLE
CASE = Case("judged", "node", "Bernoulli", "")


def _load(node, inputs, outputs, opset=22):
    graph = helper.make_graph([node], "random",
                              [helper.make_tensor_value_info(*spec) for spec in inputs],
                              [helper.make_tensor_value_info(*spec) for spec in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return fuel.onnx.load(model.SerializeToString())


def test_bernoulli_frequencies_follow_the_probabilities():
    model = _load(helper.make_node("Bernoulli", ["p"], ["y"], dtype=DOUBLE),
                  [("p", FLOAT, [4, 5000])], [("y", DOUBLE, None)])
    p = np.repeat(np.array([[0.0], [0.1], [0.5], [1.0]], np.float32), 5000, axis=1)
    (y,) = model.run({"p": p}).values()
    assert y.dtype == np.float64 and set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_allclose(y.mean(axis=1), [0.0, 0.1, 0.5, 1.0], atol=0.03)
    (again,) = model.run({"p": p}).values()
    assert not np.array_equal(y, again)  # unseeded: fresh draws on every run, never replayed


def test_seeded_bernoulli_repeats():
    model = _load(helper.make_node("Bernoulli", ["p"], ["y"], seed=3.0),
                  [("p", FLOAT, [1000])], [("y", FLOAT, None)])
    p = np.full(1000, 0.3, np.float32)
    first, second = model.run({"p": p})["y"], model.run({"p": p})["y"]
    np.testing.assert_array_equal(first, second)
    assert abs(first.mean() - 0.3) < 0.06


def test_random_uniform_like_and_normal():
    uniform = _load(helper.make_node("RandomUniformLike", ["x"], ["y"], low=-2.0, high=3.0),
                    [("x", FLOAT, [20000])], [("y", FLOAT, None)])
    (y,) = uniform.run({"x": np.zeros(20000, np.float32)}).values()
    assert y.dtype == np.float32 and y.min() >= -2.0 and y.max() < 3.0
    assert abs(y.mean() - 0.5) < 0.05
    normal = _load(helper.make_node("RandomNormal", [], ["y"], shape=[20000], mean=1.0,
                                    scale=2.0), [], [("y", FLOAT, None)])
    (z,) = normal.run({}).values()
    assert abs(z.mean() - 1.0) < 0.05 and abs(z.std() - 2.0) < 0.05


def test_training_dropout_scales_what_it_keeps():
    model = _load(helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"]),
                  [("x", FLOAT, [10000]), ("r", FLOAT, []), ("t", TensorProto.BOOL, [])],
                  [("y", FLOAT, None), ("mask", TensorProto.BOOL, None)])
    x = np.linspace(1, 2, 10000, dtype=np.float32)
    y, mask = model.run({"x": x, "r": np.float32(0.25), "t": np.bool_(True)}).values()
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0), rtol=1e-6)
    assert abs(mask.mean() - 0.75) < 0.03


def test_judges_reject_wrong_draws():
    p = np.full(1000, 0.1)
    good = (np.arange(1000) % 10 == 0).astype(np.float64)
    assert judge_bernoulli([p], [good], [good], CASE) is None
    assert judge_bernoulli([p], [good], [np.ones(1000)], CASE) is not None  # too many ones
    assert judge_bernoulli([p], [good], [good * 0.5], CASE) is not None  # not 0 or 1
    assert judge_bernoulli([p], [good], [good.astype(np.float32)], CASE) is not None  # dtype
    x = np.ones(1000, np.float32)
    mask = np.arange(1000) % 2 == 0
    y = np.where(mask, x * 2, 0).astype(np.float32)
    ratio = np.float32(0.5)
    assert judge_dropout([x, ratio, True], [y, mask], [y, mask], CASE) is None
    assert judge_dropout([x, ratio, True], [y, mask], [y * 1.5, mask], CASE) is not None
    assert judge_dropout([x, ratio, True], [y, mask], [x * 2, np.ones(1000, bool)],
                         CASE) is not None  # kept everything at ratio 0.5
