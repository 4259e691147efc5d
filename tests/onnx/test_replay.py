"""Model.run replays a captured plan per feed signature when nothing depends on the feeds'
values, and builds the graph every call when something does."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import fuel.onnx  # noqa: E402
from fuel.ir.params import ConvParams  # noqa: E402
from tests.backends.cpu.test_convolution_c import reference as convolution_reference  # noqa: E402


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return fuel.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_a_value_independent_graph_replays_with_new_feeds():
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    model = _model([helper.make_node("Mul", ["x", "scale"], ["m"]),
                    helper.make_node("Exp", ["m"], ["e"]),
                    helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0)],
                   [_float("x", ["n", 3])], [_float("y", [])], [scale])
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": x})["y"],
                                   np.exp(x * [1.0, 2.0, 3.0]).sum(), rtol=1e-5)
    assert model._replay.replays == 2
    x = rng.standard_normal((4, 3)).astype(np.float32)  # a new signature: built and captured
    np.testing.assert_allclose(model.run({"x": x})["y"], np.exp(x * [1.0, 2.0, 3.0]).sum(),
                               rtol=1e-5)
    assert len(model._replay.captures) == 2


def test_replayed_outputs_are_read_only_arrays_of_the_declared_shape():
    """A replay hands back each output as the plain path does (Tensor.numpy's read-only
    array): the values, dtype and shape of a fresh build's, and not writable."""
    model = _model([helper.make_node("Relu", ["x"], ["y"]),
                    helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0])],
                   [_float("x", ["n", 3])], [_float("y", None), _float("t", None)])
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        out = model.run({"x": x})
        assert list(out) == ["y", "t"]
        for got, want in ((out["y"], np.maximum(x, 0)), (out["t"], x.T)):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert not got.flags.writeable
            np.testing.assert_array_equal(got, want)
    assert model._replay.replays == 2


def test_a_model_keeps_its_most_recently_run_captures():
    """Past ``kept`` feed signatures the least recently run capture (and its buffers) is
    dropped; a signature run again stays; a dropped one is captured again when it returns,
    with the same results."""
    scale = helper.make_tensor("s", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    model = _model([helper.make_node("Mul", ["x", "s"], ["m"]),
                    helper.make_node("Exp", ["m"], ["y"])],
                   [_float("x", ["n", 3])], [_float("y", None)], [scale])
    model._replay.kept = 2
    rng = np.random.default_rng(1)
    inputs = {rows: rng.standard_normal((rows, 3)).astype(np.float32) for rows in (1, 2, 3)}

    def run(rows):
        np.testing.assert_allclose(model.run({"x": inputs[rows]})["y"],
                                   np.exp(inputs[rows] * [1.0, 2.0, 3.0]), rtol=1e-6)

    def held():
        return sorted(signature[1][1][0] for signature, capture in
                      model._replay.captures.items() if capture is not None)

    run(1), run(2), run(1)  # 1 is the most recently run
    run(3)
    assert held() == [1, 3]
    replays = model._replay.replays
    run(2)  # dropped: captured again (a build, no replay)
    assert model._replay.replays == replays and held() == [2, 3]


def test_a_shape_read_from_a_feed_builds_every_call():
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"]),
                    helper.make_node("Neg", ["y"], ["z"])],
                   [_float("x", [6]), shape], [_float("z", None)])
    x = np.arange(6, dtype=np.float32)
    for target in ([2, 3], [3, 2], [1, 6]):
        result = model.run({"x": x, "shape": np.array(target, np.int64)})["z"]
        np.testing.assert_array_equal(result, -x.reshape(target))
    assert model._replay.replays == 0
    assert list(model._replay.captures.values()) == [None]


def test_an_if_on_a_feed_builds_every_call():
    then_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                                   [_float("t", [2])])
    else_graph = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                                   [_float("e", [2])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_graph,
                                     else_branch=else_graph),
                    helper.make_node("Exp", ["y"], ["z"])],
                   [_float("x", [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                   [_float("z", [2])])
    x = np.array([-1.0, 2.0], np.float32)
    for condition in (True, False, True):
        result = model.run({"x": x, "c": np.array(condition)})["z"]
        np.testing.assert_allclose(result, np.exp(-x if condition else np.abs(x)), rtol=1e-6)
    assert model._replay.replays == 0


@pytest.mark.parametrize("collecting", [True, False])
def test_a_new_shape_builds_with_the_collector_held_off(monkeypatch, collecting):
    """A new feed signature's build and capture run with the cyclic collector off (as
    fuel.jit's captures do), and Model.run leaves it as it found it."""
    import gc

    model = _model([helper.make_node("Exp", ["x"], ["y"])], [_float("x", ["n"])],
                   [_float("y", ["n"])])
    seen = []
    build = type(model)._build

    def watched(self, *args):
        seen.append(gc.isenabled())
        return build(self, *args)

    monkeypatch.setattr(type(model), "_build", watched)
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        for size in (3, 5):
            x = np.arange(size, dtype=np.float32)
            np.testing.assert_allclose(model.run({"x": x})["y"], np.exp(x), rtol=1e-6)
            assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False]


def _matmul_model():
    weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 5],
                                np.arange(40, dtype=np.float32) / 10)
    return _model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                   helper.make_node("Relu", ["m"], ["y"])],
                  [_float("x", [2, 8])], [_float("y", None)], [weight]), \
        np.arange(40, dtype=np.float32).reshape(8, 5) / 10


def test_a_replay_writes_outputs_again_only_when_nobody_holds_them(monkeypatch):
    """An output its user dropped is written again in place and a small feed is copied into
    the capture's own storage, so a steady replay prepares no launcher again; an output the
    user still holds (its array or a view of it) is never overwritten."""
    from fuel.runtime.replay import BoundPlan

    model, weight = _matmul_model()
    rng = np.random.default_rng(2)
    prepared = []
    original = BoundPlan._prepare
    monkeypatch.setattr(BoundPlan, "_prepare",
                        lambda self, index, graph: prepared.append(index) or
                        original(self, index, graph))
    kept = []
    for round_ in range(8):
        x = rng.standard_normal((2, 8)).astype(np.float32)
        before = len(prepared)
        y = model.run({"x": x})["y"]
        np.testing.assert_allclose(y, np.maximum(x @ weight, 0), rtol=1e-5, atol=1e-6)
        if round_ in (4, 5):  # a steady replay: the feed copied, the output written again
            assert len(prepared) == before
        if round_ >= 6:
            kept.append((y[1:], np.maximum(x @ weight, 0)[1:]))  # a view held
        del y
    for view, expected in kept:
        np.testing.assert_allclose(view, expected, rtol=1e-5, atol=1e-6)


def test_a_feed_changed_in_place_between_replays_is_read_anew():
    model, weight = _matmul_model()
    x = np.ones((2, 8), np.float32)
    for value in range(5):
        x[...] = value
        np.testing.assert_allclose(model.run({"x": x})["y"], np.maximum(x @ weight, 0),
                                   rtol=1e-5)


def _conv_model(size: int):
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["c"], ["y"])],
                   [_float("x", [1, 3, size, size])], [_float("y", None)],
                   [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel()),
                    helper.make_tensor("b", TensorProto.FLOAT, [8], bias)])

    def reference(x):
        conv = convolution_reference(x, weight, ConvParams((1, 1), (1, 1), (1, 1), (1, 1)))
        return np.maximum(conv + bias[:, None, None], 0)
    return model, reference


def _misaligned(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` starting 4 bytes past a 64-byte boundary."""
    raw = np.empty(values.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + 4
    out = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


@pytest.mark.parametrize("size", [16, 320])  # copied into a staged storage before; too big to
def test_a_new_feed_array_moves_the_launchers_reading_it(monkeypatch, size):
    """A replay fed a new array (another address, another alignment, a small feed or a big
    one) moves the C launchers reading it to the new array instead of preparing them again
    or copying the feed; the results are the new feed's, and the old array can be dropped
    or changed."""
    from fuel.runtime.replay import BoundPlan

    model, reference = _conv_model(size)
    rng = np.random.default_rng(6)
    prepared, moved = [], []
    prepare, rebind = BoundPlan._prepare, BoundPlan._rebind
    monkeypatch.setattr(BoundPlan, "_prepare", lambda self, index, graph: prepared.append(
        index) or prepare(self, index, graph))
    monkeypatch.setattr(BoundPlan, "_rebind", lambda self, *args: moved.append(
        rebind(self, *args)) or moved[-1])
    previous = None
    for round_ in range(6):
        x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        if round_ == 4:
            x = _misaligned(x)
        expected = reference(x)
        before = len(prepared)
        y = model.run({"x": x})["y"]
        if round_ >= 3:
            assert moved[-1] is True
            assert len(prepared) == before  # nothing prepared again
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
        if previous is not None:
            previous[...] = np.nan  # the last feed changed after its run: not read again
        previous = x
        del y


def test_two_feeds_sharing_an_array_are_not_moved_together():
    """A launcher reading two feeds that were one array moves neither (each would drag the
    other's address along); the replay prepares it again and reads each feed's values."""
    model = _model([helper.make_node("Add", ["x", "z"], ["s"]),
                    helper.make_node("Exp", ["s"], ["y"])],
                   [_float("x", [64]), _float("z", [64])], [_float("y", None)])
    rng = np.random.default_rng(7)
    for same in (True, False, True, False, False, True):
        x = rng.standard_normal(64).astype(np.float32)
        z = x if same else rng.standard_normal(64).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": x, "z": z})["y"], np.exp(x + z),
                                   rtol=1e-6)


@pytest.mark.parametrize("size", [16, 320])  # a feed copied into a staged storage; one moved
def test_the_same_feed_array_again_is_bound_as_it_is(monkeypatch, size):
    """A replay fed the very array of the last one binds the storage over it again: nothing is
    uploaded, moved or prepared, and the values changed in place since are the ones read. An
    array the upload copies (not contiguous) is uploaded anew on every call, so its changes
    are read too."""
    from fuel.backends.cpu import CpuBackend
    from fuel.runtime.replay import BoundPlan

    model, reference = _conv_model(size)
    counts = {"upload": 0, "rebind": 0, "prepare": 0}
    upload, rebind, prepare = CpuBackend.upload, BoundPlan._rebind, BoundPlan._prepare

    def counted(name, function):
        def call(*args):
            counts[name] += 1
            return function(*args)
        return call

    monkeypatch.setattr(CpuBackend, "upload", counted("upload", upload))
    monkeypatch.setattr(BoundPlan, "_rebind", counted("rebind", rebind))
    monkeypatch.setattr(BoundPlan, "_prepare", counted("prepare", prepare))
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    for round_ in range(6):
        x[...] = rng.standard_normal(x.shape)
        before = dict(counts)
        y = model.run({"x": x})["y"]
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-4)
        if round_ >= 3:
            assert counts == before
        del y
    strided = np.asfortranarray(x)  # not C-contiguous: the upload copies it
    for _ in range(3):
        strided[...] = rng.standard_normal(x.shape)
        before = counts["upload"]
        y = model.run({"x": strided})["y"]
        np.testing.assert_allclose(y, reference(strided), rtol=1e-4, atol=1e-4)
        assert counts["upload"] == before + 1
        del y


def test_the_last_replays_arrays_again_replay_without_a_signature(monkeypatch):
    """A call with the very arrays of the last replay (the same objects, shapes and dtypes)
    replays its capture without building a feed signature; the values changed in place are
    read, and an array whose shape changed in place, or another array, takes the signature
    path and gets its own results."""
    from fuel.onnx import model as model_module

    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])],
                   [_float("x", ["n", "m"])], [_float("y", None)])
    signatures = []
    signature = model_module.feed_signature
    monkeypatch.setattr(model_module, "feed_signature",
                        lambda *args: signatures.append(1) or signature(*args))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    for round_ in range(5):
        x[...] = rng.standard_normal(x.shape)
        before = len(signatures)
        np.testing.assert_array_equal(model.run({"x": x})["y"], np.maximum(x, 0).T)
        if round_ >= 2:
            assert len(signatures) == before
    x.shape = (2, 6)  # the same object, reshaped in place
    before = len(signatures)
    np.testing.assert_array_equal(model.run({"x": x})["y"], np.maximum(x, 0).T)
    assert len(signatures) == before + 1
    other = rng.standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_array_equal(model.run({"x": other})["y"], np.maximum(other, 0).T)
    assert len(signatures) == before + 2
