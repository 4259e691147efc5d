"""Chains of convolutions run blocked (fuel/onnx/blocked.py), checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
import fuel.onnx
from fuel.backends.cpu import convolution_blocked

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

needs_blocked = pytest.mark.skipif(not convolution_blocked.available(),
                                   reason="conv.c's blocked launch needs AVX-512")


def _conv(inits, nodes, rng, name, x, shape, stride, pad, relu=True):
    """A Conv (``shape``: channels in, out, kernel size) with random weights and bias added to
    ``nodes`` and ``inits``, a Relu after it unless ``relu`` is False: its output's name."""
    c, m, k = shape
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32),
        name + "_w"))
    inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32),
                                         name + "_b"))
    nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_c"],
                                  kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2))
    if not relu:
        return name + "_c"
    nodes.append(helper.make_node("Relu", [name + "_c"], [name]))
    return name


def _model(path):
    """A ResNet block and a SqueezeNet fire behind a planar stem: Conv+BN+Relu, a residual
    Add, a strided 1x1 shortcut, a MaxPool, a channel Concat, a GlobalAveragePool, and a
    second consumer of a chain's value (an output read planar)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def conv(name, x, c, m, k, stride=1, relu=True):
        return _conv(inits, nodes, rng, name, x, (c, m, k), stride, k // 2, relu)

    stem = conv("stem", "x", 3, 32, 3)
    a = conv("a", stem, 32, 32, 3)
    b = conv("b", a, 32, 32, 3, relu=False)
    nodes.append(helper.make_node("Add", [b, stem], ["sum"]))
    nodes.append(helper.make_node("Relu", ["sum"], ["block"]))
    down = conv("down", "block", 32, 64, 3, stride=2)
    short = conv("short", "block", 32, 64, 1, stride=2, relu=False)
    nodes.append(helper.make_node("Add", [down, short], ["sum2"]))
    nodes.append(helper.make_node("Relu", ["sum2"], ["block2"]))
    nodes.append(helper.make_node("MaxPool", ["block2"], ["pooled"], kernel_shape=[3, 3],
                                  strides=[2, 2], ceil_mode=1))
    squeeze = conv("squeeze", "pooled", 64, 16, 1)  # one block: a pointwise link's least
    left = conv("left", squeeze, 16, 64, 1)
    right = conv("right", squeeze, 16, 64, 3)
    nodes.append(helper.make_node("Concat", [left, right], ["fire"], axis=1))
    last = conv("last", "fire", 128, 64, 3)
    nodes.append(helper.make_node("GlobalAveragePool", [last], ["y"]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("block", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@needs_blocked
@pytest.mark.parametrize("blocked", ["1", "0"])
def test_a_chain_runs_blocked_and_matches_onnxruntime(tmp_path, monkeypatch, blocked):
    monkeypatch.setenv("FUEL_BLOCKED", blocked)
    path = _model(tmp_path / "chain.onnx")
    x = np.random.default_rng(1).standard_normal((1, 3, 24, 24)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    model = fuel.onnx.load(path)
    with fuel.profile() as profile:
        got = model.run({"x": x})
        again = model.run({"x": x})  # the captured plan, replayed
    for result in (got, again):
        for value, reference in zip(result.values(), expected):
            span = float(reference.max() - reference.min())
            np.testing.assert_allclose(value, reference, rtol=0, atol=1e-5 * span)
    ops = [launch.op for launch in profile.launches[:len(profile.launches) // 2]]
    if blocked == "1":  # every convolution past the 3-channel stem, and the pools, blocked
        assert ops.count("conv_blocked") == 6 and ops.count("conv_fused") == 1
        assert ops.count("conv_blocked_cat") == 1 and "cat" not in ops  # the fire's concat
        assert ops.count("contiguous") <= 4  # the chain's two ends and the planar output
    else:
        assert "conv_blocked" not in ops


def _saved(path, nodes, name: str, shape: list, inits):
    """The graph of ``nodes`` (input "x" of ``shape``, output "y") saved at ``path``."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _with_output(path, name: str) -> None:
    """The model at ``path`` with its value ``name`` as another output."""
    model = onnx.load(path)
    model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    onnx.save(model, path)


def _mobile(path, stem_stride=1):
    """Two inverted residual blocks behind a planar stem: 1x1 expand, depthwise (3x3 stride
    2 in the first, 5x5 in the second, Clip 0..6), a squeeze-excite in the second (global
    pool, two 1x1 convolutions, Sigmoid, a channel Mul), 1x1 project with a residual Add in
    the second. The first block's depthwise input comes planar (a depthwise link joins a
    chain, never starts one); from its project on, every convolution but the squeeze-excite's
    two on a 1x1 plane is blocked, and so are the pool and the Mul."""
    rng = np.random.default_rng(2)
    inits, nodes = [], []

    def conv(name, x, c, m, k, stride=1, group=1, act=True):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k)).astype(
                np.float32), name + "_w"))
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32),
                                             name + "_b"))
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_c"],
                                      kernel_shape=[k, k], pads=[k // 2] * 4, group=group,
                                      strides=[stride] * 2))
        if not act:
            return name + "_c"
        nodes.append(helper.make_node("Clip", [name + "_c", "low", "high"], [name]))
        return name

    inits += [numpy_helper.from_array(np.array(0, np.float32), "low"),
              numpy_helper.from_array(np.array(6, np.float32), "high")]
    stem = conv("stem", "x", 3, 32, 3, stride=stem_stride)
    e1 = conv("e1", stem, 32, 96, 1)
    d1 = conv("d1", e1, 96, 96, 3, stride=2, group=96)
    p1 = conv("p1", d1, 96, 32, 1, act=False)
    e2 = conv("e2", p1, 32, 192, 1)
    d2 = conv("d2", e2, 192, 192, 5, group=192)
    nodes.append(helper.make_node("GlobalAveragePool", [d2], ["squeezed"]))
    fc1 = conv("fc1", "squeezed", 192, 8, 1)
    fc2 = conv("fc2", fc1, 8, 192, 1, act=False)
    nodes.append(helper.make_node("Sigmoid", [fc2], ["gate"]))
    nodes.append(helper.make_node("Mul", [d2, "gate"], ["excited"]))
    p2 = conv("p2", "excited", 192, 32, 1, act=False)
    nodes.append(helper.make_node("Add", [p2, p1], ["y"]))
    return _saved(path, nodes, "mobile", [1, 3, 30, 30], inits)


def _blocked_ops(monkeypatch, path, shape: tuple, seed: int) -> list[str]:
    """The model at ``path`` run blocked on a random ``shape`` input "x", its output "y"
    checked against onnxruntime: the ops it launched."""
    monkeypatch.setenv("FUEL_BLOCKED", "1")
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    model = fuel.onnx.load(path)
    with fuel.profile() as profile:
        got = model.run({"x": x})["y"]
    span = float(expected.max() - expected.min())
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * span)
    return [launch.op for launch in profile.launches]


def _mobile_ops(tmp_path, monkeypatch, stem_stride: int) -> list[str]:
    """_mobile's model run blocked, checked against onnxruntime: the ops it launched."""
    return _blocked_ops(monkeypatch, _mobile(tmp_path / "mobile.onnx", stem_stride),
                        (1, 3, 30, 30), 3)


@needs_blocked
def test_depthwise_links_run_blocked_and_match_onnxruntime(tmp_path, monkeypatch):
    ops = _mobile_ops(tmp_path, monkeypatch, stem_stride=1)
    # stem, e1 (32 -> 96 from a planar stem: its only link neighbour is the depthwise), d1
    # and the two squeeze-excite convolutions planar; p1, e2, d2 and p2 (the residual Add
    # fused) blocked
    assert ops.count("conv_blocked") == 4 and ops.count("conv_fused") == 5
    # into the chain at p1, the pooled channels out to the squeeze-excite, out at y
    assert ops.count("contiguous") == 3


@needs_blocked
def test_a_strided_stem_starts_a_chain_with_no_entry(tmp_path, monkeypatch):
    """The same blocks behind a stride-2 stem: the stem reads the image planar and stores
    its output blocked, so every convolution but the squeeze-excite's runs blocked and only
    the pooled channels and the output are converted."""
    ops = _mobile_ops(tmp_path, monkeypatch, stem_stride=2)
    assert ops.count("conv_blocked") == 7 and ops.count("conv_fused") == 2
    assert ops.count("contiguous") == 2


def _pooled_stem(path, channels: int):
    """A squeezenet-like start: a 3 -> ``channels`` 3x3 stride-2 stem (Relu), a 3x3 stride-2
    MaxPool, a 1x1 squeeze to 16 and a 3x3 expand to 64."""
    rng = np.random.default_rng(4)
    inits, nodes = [], []

    def conv(name, x, c, m, k, stride=1):
        return _conv(inits, nodes, rng, name, x, (c, m, k), stride, 0 if stride > 1 else k // 2)

    stem = conv("stem", "x", 3, channels, 3, stride=2)
    nodes.append(helper.make_node("MaxPool", [stem], ["pooled"], kernel_shape=[3, 3],
                                  strides=[2, 2], ceil_mode=1))
    squeeze = conv("squeeze", "pooled", channels, 16, 1)
    conv("y", squeeze, 16, 64, 3)
    return _saved(path, nodes, "pooled", [2, 3, 47, 47], inits)


@needs_blocked
@pytest.mark.parametrize("channels", [64, 80])
def test_a_stem_a_pool_reads_before_a_link_starts_the_chain(tmp_path, monkeypatch, channels):
    """A stem of up to POOLED_STEM_OUTPUTS channels whose pool feeds a link stores blocked:
    the pool runs over blocked channels and the link needs no entry conversion (only the
    output is converted); a wider stem stays planar and the chain starts after the pool."""
    ops = _blocked_ops(monkeypatch, _pooled_stem(tmp_path / "pooled.onnx", channels),
                       (2, 3, 47, 47), 5)
    blocked = channels == 64  # POOLED_STEM_OUTPUTS
    assert ops.count("conv_blocked") == (3 if blocked else 2)
    assert ops.count("contiguous") == (1 if blocked else 2)


def _grouped(inits, nodes, rng, name, x, shape, stride, group, relu):
    """A Conv in ``group`` groups (``shape``: channels in, out, kernel size; padded to keep
    the size at stride 1) with random weights and bias, a Relu after it unless ``relu`` is
    False (its output is then ``name``): ``name``."""
    c, m, k = shape
    inits += [numpy_helper.from_array((rng.standard_normal((m, c // group, k, k))
                                       / np.sqrt(c // group * k * k)).astype(np.float32),
                                      name + "_w"),
              numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), name + "_b")]
    out = name + "_c" if relu else name
    nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [out],
                                  kernel_shape=[k, k], pads=[k // 2] * 4, group=group,
                                  strides=[stride] * 2))
    if relu:
        nodes.append(helper.make_node("Relu", [out], [name]))
    return name


def _regnet(path, width: int):
    """A RegNetX block behind a 1x1 entry: 1x1, a grouped 3x3 stride 2 (groups of `width`
    channels), 1x1, a strided 1x1 shortcut, Add, Relu."""
    rng = np.random.default_rng(5)
    inits, nodes = [], []
    for name, x, c, m, k, stride, group, relu in (
            ("entry", "x", 32, 32, 1, 1, 1, True), ("a", "entry", 32, 64, 1, 1, 1, True),
            ("b", "a", 64, 64, 3, 2, 64 // width, True), ("c", "b", 64, 64, 1, 1, 1, False),
            ("short", "entry", 32, 64, 1, 2, 1, False)):
        _grouped(inits, nodes, rng, name, x, (c, m, k), stride, group, relu)
    nodes += [helper.make_node("Add", ["c", "short"], ["sum"]),
              helper.make_node("Relu", ["sum"], ["y"])]
    return _saved(path, nodes, "regnet", [1, 32, 28, 28], inits)


@needs_blocked
@pytest.mark.parametrize("width", [16, 8])
def test_a_grouped_convolution_of_whole_blocks_joins_a_chain(tmp_path, monkeypatch, width):
    """Groups of 16 channels (one block each) run blocked inside the chain: no conversion
    around them; groups of 8 stay planar, converted out of the chain and back."""
    ops = _blocked_ops(monkeypatch, _regnet(tmp_path / "regnet.onnx", width),
                       (1, 32, 28, 28), 6)
    if width == 16:  # in at the entry, out at y
        assert ops.count("conv_blocked") == 5 and ops.count("contiguous") == 2
    else:  # the grouped one planar: out of the chain before it, in again after it
        assert ops.count("conv_blocked") == 4 and ops.count("conv_fused") == 1
        assert ops.count("contiguous") == 4


@needs_blocked
def test_a_1d_depthwise_convolution_is_not_a_link(tmp_path):
    """The pass looks at every fused convolution: a 1-d depthwise one (a 3-d weight) stays
    planar and runs as onnxruntime's."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.random((32, 1, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.random((32, 32, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], group=32, pads=[1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "line", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "line.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = rng.standard_normal((1, 32, 20)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = fuel.onnx.load(path).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _fire(path, shared: str):
    """A squeezenet fire behind a 1x1 entry (a 1x1 squeeze, a 1x1 and a 3x3 expand, their
    channel Concat); ``shared``: "reader", the 1x1 expand is also read by a 1x1 whose output
    is added to the concat; "output", by a Sigmoid that is a second graph output."""
    rng = np.random.default_rng(6)
    inits, nodes = [], []
    entry = _conv(inits, nodes, rng, "entry", "x", (16, 32, 1), 1, 0)
    squeeze = _conv(inits, nodes, rng, "squeeze", entry, (32, 16, 1), 1, 0)
    left = _conv(inits, nodes, rng, "left", squeeze, (16, 32, 1), 1, 0)
    right = _conv(inits, nodes, rng, "right", squeeze, (16, 32, 3), 1, 1)
    nodes.append(helper.make_node("Concat", [left, right], ["fire"], axis=1))
    last = "fire"
    if shared == "reader":
        side = _conv(inits, nodes, rng, "side", left, (32, 64, 1), 1, 0, relu=False)
        nodes.append(helper.make_node("Add", ["fire", side], ["joined"]))
        last = "joined"
    elif shared == "output":
        nodes.append(helper.make_node("Sigmoid", [left], ["side"]))
    _conv(inits, nodes, rng, "y", last, (64, 32, 3), 1, 1)
    _saved(path, nodes, "fire", [2, 16, 13, 13], inits)
    if shared == "output":
        _with_output(path, "side")
    return path


@needs_blocked
@pytest.mark.parametrize("shared", ["", "reader", "output"])
def test_a_concat_of_links_stores_into_one_output(tmp_path, monkeypatch, shared):
    """A channel concat of links nothing else reads runs as one CONV_BLOCKED_CAT (the
    parts store into their blocks of its output, every image's); a part another node
    reads (or an output's node) stays a link of its own and the concat copies."""
    ops = _blocked_ops(monkeypatch, _fire(tmp_path / "fire.onnx", shared), (2, 16, 13, 13),
                       6)
    assert ops.count("conv_blocked_cat") == (1 if not shared else 0)
    assert ops.count("cat") == (0 if not shared else 1)


def _narrow(path, reader: str):
    """MobileNetV2's narrow stretch behind a stride-2 stem: 1x1 expand 32 -> 96, depthwise
    stride 2, 1x1 project to 24 channels (not whole blocks), 1x1 expand 24 -> 144, depthwise,
    1x1 project to 24 with the residual Add, a MaxPool of that sum, a 1x1 to 32 and a
    GlobalAveragePool. ``reader``: "output", the first 24-channel value is also a graph
    output; "depthwise", the last 1x1 is a depthwise 24 -> 24 instead; "concat", a 1x1 and
    a 3x3 to 32 concatenated instead; "scale", the sum is scaled by a squeeze-excite gate
    of the second depthwise's channels before the pool."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def conv(name, x, c, m, k, stride=1, group=1, relu=True):
        return _grouped(inits, nodes, rng, name, x, (c, m, k), stride, group, relu)

    stem = conv("stem", "x", 3, 32, 3, stride=2)
    e1 = conv("e1", stem, 32, 96, 1)
    d1 = conv("d1", e1, 96, 96, 3, stride=2, group=96)
    p1 = conv("p1", d1, 96, 24, 1, relu=False)
    e2 = conv("e2", p1, 24, 144, 1)
    d2 = conv("d2", e2, 144, 144, 3, group=144)
    p2 = conv("p2", d2, 144, 24, 1, relu=False)
    nodes.append(helper.make_node("Add", [p2, p1], ["sum"]))
    pooled = "sum"
    if reader == "scale":  # the sum scaled by a gate of d2's pooled channels
        nodes.append(helper.make_node("GlobalAveragePool", [d2], ["squeezed"]))
        gate = conv("gate", "squeezed", 144, 24, 1, relu=False)
        nodes += [helper.make_node("Sigmoid", [gate], ["gated"]),
                  helper.make_node("Mul", ["sum", "gated"], ["scaled"])]
        pooled = "scaled"
    nodes.append(helper.make_node("MaxPool", [pooled], ["pooled"], kernel_shape=[2, 2],
                                  strides=[2, 2]))
    if reader == "depthwise":
        last = conv("last", "pooled", 24, 24, 3, group=24)
    elif reader == "concat":  # a fire: two links of the padded value joined
        nodes.append(helper.make_node("Concat", [conv("left", "pooled", 24, 32, 1),
                                                 conv("right", "pooled", 24, 32, 3)],
                                      ["last"], axis=1))
        last = "last"
    else:
        last = conv("last", "pooled", 24, 32, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [last], ["y"]))
    _saved(path, nodes, "narrow", [2, 3, 64, 64], inits)
    if reader == "output":
        _with_output(path, p1)
    return path


@needs_blocked
@pytest.mark.parametrize("reader", ["", "output", "depthwise", "concat", "scale"])
@pytest.mark.parametrize("pad", ["1", "0"])
def test_channels_short_of_whole_blocks_join_a_chain_padded(tmp_path, monkeypatch, pad,
                                                            reader):
    """24-channel values inside a chain run blocked in two blocks, the lanes past their
    channels zero weights, when nothing outside the chains reads them: every convolution
    of the stretch blocked and no conversion but the output's. A padded value an output
    reads, or a depthwise link reads (padded depthwise links are not taken), stays planar
    with its links, as every one does with FUEL_BLOCKED_PAD=0; results match onnxruntime
    either way (the output of ``reader`` "output" too)."""
    monkeypatch.setenv("FUEL_BLOCKED_PAD", pad)
    path = _narrow(tmp_path / "narrow.onnx", reader)
    x = np.random.default_rng(8).standard_normal((2, 3, 64, 64)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    monkeypatch.setenv("FUEL_BLOCKED", "1")
    model = fuel.onnx.load(path)
    with fuel.profile() as profile:
        got = model.run({"x": x})
    assert len(got) == len(expected)
    for value, reference in zip(got.values(), expected):
        span = float(reference.max() - reference.min())
        np.testing.assert_allclose(value, reference, rtol=0, atol=1e-5 * span)
    ops = [launch.op for launch in profile.launches]
    if pad == "1" and reader in ("", "concat"):  # every convolution blocked, the pool too
        assert "conv_fused" not in ops and ops.count("contiguous") == 1  # the one exit
        assert ops.count("conv_blocked") == (8 if not reader else 7)
        assert ops.count("conv_blocked_cat") == (reader == "concat")
    elif pad == "1" and reader == "scale":  # the gate's 1 x 1 map planar, the Mul blocked
        assert ops.count("conv_blocked") == 8 and ops.count("conv_fused") == 1
        assert ops.count("contiguous") == 2  # out to the gate's pool, out at the end
    else:  # p1 on, the 24-channel links planar
        assert ops.count("conv_fused") >= 4


def _launched_matching(path, x: np.ndarray, expected: list) -> list[str]:
    """The ops launched running the model at ``path`` on ``x``, its outputs checked against
    onnxruntime's ``expected`` (within 1e-5 of their span)."""
    with fuel.profile() as profile:
        got = fuel.onnx.load(path).run({"x": x})
    for value, reference in zip(got.values(), expected):
        span = float(reference.max() - reference.min())
        np.testing.assert_allclose(value, reference, rtol=0, atol=1e-5 * span)
    return [launch.op for launch in profile.launches]


def _excited(path, batch: int, channels: int, depthwise: bool, second_reader: bool):
    """An inverted residual block with a squeeze-excite behind a planar stem and a 1x1 entry:
    1x1 expand to ``channels``, a 3x3 (depthwise or dense), the gate (global pool, two 1x1
    convolutions, HardSigmoid) times the 3x3's output, a 1x1 project to 32 with the entry's
    output added.
    ``second_reader``: the scaled value is a second output too."""
    rng = np.random.default_rng(channels + batch)
    inits, nodes = [], []

    def conv(name, x, c, m, k, group=1, relu=True):
        return _grouped(inits, nodes, rng, name, x, (c, m, k), 1, group, relu)

    stem = conv("stem", "x", 3, 32, 3)
    entry = conv("entry", stem, 32, 32, 1)  # with the expand, two links: a chain
    expand = conv("expand", entry, 32, channels, 1)
    middle = conv("middle", expand, channels, channels, 3,
                  group=channels if depthwise else 1)
    # a padded value's pool would leave the chain for the gate's planar 1 x 1 convolutions
    # (``_breaks``): the gate of padded channels squeezes the entry's 32 instead
    squeezed = middle if channels % 16 == 0 else entry
    nodes.append(helper.make_node("GlobalAveragePool", [squeezed], ["squeezed"]))
    fc1 = conv("fc1", "squeezed", channels if channels % 16 == 0 else 32, 8, 1)
    fc2 = conv("fc2", fc1, 8, channels, 1, relu=False)
    nodes += [helper.make_node("HardSigmoid", [fc2], ["gate"]),
              helper.make_node("Mul", [middle, "gate"], ["excited"])]
    project = conv("project", "excited", channels, 32, 1, relu=False)
    nodes.append(helper.make_node("Add", [project, entry], ["y"]))
    _saved(path, nodes, "excited", [batch, 3, 20, 18], inits)
    if second_reader:
        _with_output(path, "excited")
    return path


@needs_blocked
@pytest.mark.parametrize("batch, channels, depthwise, second_reader", [
    (3, 96, True, False), (2, 40, False, False), (1, 96, True, True)])
def test_a_squeeze_excite_scale_folds_into_the_convolution_reading_it(
        tmp_path, monkeypatch, batch, channels, depthwise, second_reader):
    """A channel scale whose one reader is a one-group link runs inside that link (its
    weights scaled per image: no multiply launched, the scaled value never written), every
    image with its own gate, padded channels too (40 in three blocks); a scaled value
    something else reads too is multiplied as before. Results match onnxruntime."""
    path = _excited(tmp_path / "excited.onnx", batch, channels, depthwise, second_reader)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 20, 18)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    monkeypatch.setenv("FUEL_BLOCKED", "1")
    ops = _launched_matching(path, x, expected)
    assert ops.count("conv_blocked") == 4  # the entry, expand, the 3x3 and the project
    assert any("mul" in op for op in ops) == second_reader  # (mul, or fused(mul))


def _dense(path, batch: int, relu: bool, second_reader: bool):
    """Two densenet layers behind a planar stem: each a BatchNormalization (and a Relu
    unless not ``relu``) of the concat so far, a 1x1 to 64 and a 3x3 to 32 joined to it.
    ``second_reader``: the first layer's normalized value is an output too."""
    rng = np.random.default_rng(batch + 2 * relu)
    inits, nodes = [], []

    def conv(name, x, c, m, k):
        return _conv(inits, nodes, rng, name, x, (c, m, k), 1, k // 2)

    value, channels = conv("stem", "x", 3, 32, 3), 32
    for layer in range(2):
        name = f"norm{layer}"
        for part, values in (("scale", rng.uniform(0.5, 1.5, channels)),
                             ("shift", rng.standard_normal(channels)),
                             ("mean", rng.standard_normal(channels)),
                             ("var", rng.uniform(0.5, 2.0, channels))):
            inits.append(numpy_helper.from_array(values.astype(np.float32), f"{name}_{part}"))
        nodes.append(helper.make_node("BatchNormalization", [value] + [
            f"{name}_{part}" for part in ("scale", "shift", "mean", "var")], [name]))
        if relu:
            nodes.append(helper.make_node("Relu", [name], [name + "_relu"]))
            name += "_relu"
        wide = conv(f"wide{layer}", name, channels, 64, 1)
        new = conv(f"new{layer}", wide, 64, 32, 3)
        channels += 32
        nodes.append(helper.make_node("Concat", [value, new], ["y" if layer else "joined"],
                                      axis=1))
        value = "joined"
    _saved(path, nodes, "dense", [batch, 3, 12, 11], inits)
    if second_reader:
        _with_output(path, "norm0_relu" if relu else "norm0")
    return path


@needs_blocked
@pytest.mark.parametrize("batch, relu, second_reader", [
    (1, True, False), (2, False, False), (1, True, True)])
def test_a_channel_affine_enters_the_chain_in_the_conversion(tmp_path, monkeypatch, batch,
                                                             relu, second_reader):
    """A BatchNormalization (and its Relu) whose only readers are links runs as the chain's
    entry: each channel scaled, shifted and activated as the planar value is blocked (a
    depthwise 1x1 conv_blocked, no multiply launched); one something else reads too keeps
    its own pass. Results match onnxruntime, with the entries off too."""
    path = _dense(tmp_path / "dense.onnx", batch, relu, second_reader)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 12, 11)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    for entries in ("1", "0"):
        monkeypatch.setenv("FUEL_BLOCKED_ENTRY", entries)
        ops = _launched_matching(path, x, expected)
        affines = sum("mul" in op for op in ops)  # (fused(mul,add,relu))
        if entries == "0":
            assert ops.count("conv_blocked") == 4 and affines == 2
        else:  # the two links of each layer, and the entries not kept as passes
            assert ops.count("conv_blocked") == 6 - second_reader
            assert affines == second_reader
