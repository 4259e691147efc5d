"""Bad input gives a FuelError naming what is wrong (and the node), never a protobuf or NumPy
traceback: malformed or truncated files, unknown ops, unsupported opsets and dtypes, feeds of
the wrong name, shape or dtype, and a kernel failure at run time."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fuel.onnx
from fuel.ir.errors import FuelError
from fuel.onnx import OnnxError, UnsupportedDType, UnsupportedOp, UnsupportedOpset
from tests.onnx.conftest import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _relu_model():
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="act")],
                      [("x", F, [2, "n"])], [("y", F, None)])


def test_malformed_bytes():
    with pytest.raises(OnnxError, match="not a valid ONNX model"):
        fuel.onnx.load(b"\x08\x07\xff\xff\xff garbage that is not a protobuf")


def test_truncated_file(tmp_path):
    data = _relu_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxError, match="malformed or truncated"):
        fuel.onnx.load(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(OnnxError, match="cannot read ONNX model"):
        fuel.onnx.load(str(tmp_path / "absent.onnx"))


def test_not_a_model_object():
    with pytest.raises(OnnxError, match="takes a path, bytes or an onnx.ModelProto"):
        fuel.onnx.load(42)


def test_unknown_op_names_node_and_op():
    model = make_model([helper.make_node("FancyOp", ["x"], ["y"], name="mystery")],
                       [("x", F, [2])], [("y", F, None)])
    with pytest.raises(UnsupportedOp, match=r"node 'mystery' \(FancyOp\).*FancyOp"):
        fuel.onnx.load(model)


def test_unknown_op_inside_a_subgraph():
    inner = helper.make_graph([helper.make_node("Mystery", ["x"], ["z"], name="deep")],
                              "body", [], [helper.make_tensor_value_info("z", F, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)
    model = make_model([node], [("c", TensorProto.BOOL, []), ("x", F, [1])], [("y", F, None)])
    with pytest.raises(UnsupportedOp, match=r"node 'deep' \(Mystery\)"):
        fuel.onnx.load(model)


def test_unsupported_opset():
    model = _relu_model()
    model.opset_import[0].version = 99
    with pytest.raises(UnsupportedOpset, match="version 99 is not supported"):
        fuel.onnx.load(model)


def test_unsupported_input_dtype():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])],
                       [("x", TensorProto.COMPLEX64, [2])], [("y", TensorProto.COMPLEX64, None)])
    with pytest.raises(UnsupportedDType, match="COMPLEX64 has no fuel dtype"):
        fuel.onnx.load(model)


def test_unsupported_cast_target_names_the_node():
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.COMPLEX64,
                                         name="to_fp8")], [("x", F, [2])], [("y", F, None)])
    with pytest.raises(UnsupportedDType, match=r"node 'to_fp8' \(Cast\).*COMPLEX64"):
        fuel.onnx.load(model).run({"x": np.ones(2, np.float32)})


def test_missing_feed():
    with pytest.raises(OnnxError, match=r"missing feed for graph input 'x' \(FLOAT\[2, n\]\)"):
        fuel.onnx.load(_relu_model()).run({})


def test_unknown_feed_name():
    with pytest.raises(OnnxError, match="unknown inputs \\['z'\\]"):
        fuel.onnx.load(_relu_model()).run({"x": np.ones((2, 3), np.float32), "z": 1})


def test_feed_of_wrong_dtype():
    with pytest.raises(OnnxError, match="feed 'x' has dtype float64; the model declares FLOAT"):
        fuel.onnx.load(_relu_model()).run({"x": np.ones((2, 3))})


def test_feed_of_wrong_rank_and_size():
    model = fuel.onnx.load(_relu_model())
    with pytest.raises(OnnxError, match="2 dims"):
        model.run({"x": np.ones((2, 3, 4), np.float32)})
    with pytest.raises(OnnxError, match="dim 0 must be 2"):
        model.run({"x": np.ones((5, 3), np.float32)})


def test_inconsistent_free_dims_forced_by_the_model():
    """Feeds disagreeing on a shared named dim fail only where a node needs them equal, and
    the error names both inputs."""
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       [("a", F, ["n"]), ("b", F, ["n"])], [("y", F, None)])
    with pytest.raises(OnnxError, match="free dim 'n' is 2 in input 'a' .* but 3 in input 'b'"):
        fuel.onnx.load(model).run({"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})


def test_inconsistent_free_dims_the_model_does_not_force_run():
    """As in ONNX Runtime (which warns), a named dim the computation never ties runs."""
    model = make_model([helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
                        helper.make_node("ReduceSum", ["b"], ["t"], keepdims=0),
                        helper.make_node("Add", ["s", "t"], ["y"])],
                       [("a", F, ["n"]), ("b", F, ["n"])], [("y", F, None)])
    got = fuel.onnx.load(model).run({"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})
    assert float(got["y"]) == 5.0


def test_unknown_dims_are_independent():
    """``?``, empty and unnamed dims constrain nothing: ``[?, 3, ?, ?]`` takes any H and W."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", F, ["?", 3, "?", "?"])], [("y", F, None)])
    x = -np.arange(2 * 3 * 48 * 192, dtype=np.float32).reshape(2, 3, 48, 192)
    np.testing.assert_array_equal(fuel.onnx.load(model).run({"x": x})["y"], np.maximum(x, 0))
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", F, ["", 3, None, None])], [("y", F, None)])
    x = np.ones((1, 3, 5, 7), np.float32)
    np.testing.assert_array_equal(fuel.onnx.load(model).run({"x": x})["y"], x)


def test_shape_error_while_building_names_the_node():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="flatten_me")],
                       [("x", F, [2, 3]), ("s", I64, [1])], [("y", F, None)])
    with pytest.raises(OnnxError, match=r"node 'flatten_me' \(Reshape\).*cannot reshape"):
        fuel.onnx.load(model).run({"x": np.ones((2, 3), np.float32),
                                   "s": np.array([7], np.int64)})


def test_runtime_kernel_error_names_the_onnx_node():
    table = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "table")
    model = make_model([helper.make_node("Gather", ["table", "i"], ["y"], name="lookup")],
                       [("i", I64, [2])], [("y", F, None)], initializers=[table])
    with pytest.raises(FuelError, match=r"onnx node 'lookup' \(Gather\).*out of range"):
        fuel.onnx.load(model).run({"i": np.array([0, 9], np.int64)})


def test_value_produced_by_no_node():
    model = make_model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")],
                       [("x", F, [1])], [("y", F, None)])
    with pytest.raises(OnnxError, match="'nowhere' is not produced by any earlier node"):
        fuel.onnx.load(model).run({"x": np.ones(1, np.float32)})


def test_load_without_onnx_says_what_to_install():
    import subprocess
    import sys

    script = ("import sys; sys.modules['onnx'] = None\n"
              "import fuel.onnx\n"
              "try:\n    fuel.onnx.load('model.onnx')\n"
              "except fuel.onnx.OnnxError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    from fuel.extras import install_command

    assert install_command("onnx") in done.stdout, done.stderr
