"""Every error a user can cause is a clear FuelError naming what is wrong and where."""

import numpy as np
import pytest

import fuel


def test_shape_mismatch_is_raised_when_built_naming_shapes_and_line():
    a, b = fuel.ones(2, 3), fuel.ones(4, 3)
    with pytest.raises(fuel.ShapeError) as info:
        a + b
    message = str(info.value)
    assert "(2, 3)" in message and "(4, 3)" in message
    assert "test_errors.py" in message


def test_matmul_shape_error_names_both_shapes():
    with pytest.raises(fuel.ShapeError, match=r"\(2, 3\) and \(4, 5\)"):
        fuel.ones(2, 3) @ fuel.ones(4, 5)


@pytest.mark.parametrize("call", [
    lambda x: x.sum(dim=3),
    lambda x: x.softmax(-4),
    lambda x: x.permute(0, 0, 1),
    lambda x: x.transpose(0, 5),
    lambda x: x.unsqueeze(5),
    lambda x: x.cumsum(2.5),
])
def test_invalid_dims(call):
    with pytest.raises(fuel.InvalidArgument):
        call(fuel.ones(2, 3, 4))


def test_out_of_range_static_index_and_bad_reshape():
    x = fuel.ones(2, 3)
    with pytest.raises(fuel.IndexOutOfRange, match="index 5 is out of range for dim 1"):
        x[:, 5]
    with pytest.raises(fuel.IndexOutOfRange, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(fuel.ShapeError, match="cannot reshape"):
        x.reshape(4, 2)
    with pytest.raises(fuel.ShapeError, match="cannot expand"):
        x.expand(3, 3)


def test_out_of_range_tensor_index_fails_at_realize_with_a_clear_error():
    x = fuel.ones(2, 3)
    y = x[fuel.tensor([0, 2])]
    with pytest.raises(fuel.IndexOutOfRange, match="index 2 is out of range for dim 0 of size 2"):
        y.realize()
    with pytest.raises(fuel.IndexOutOfRange):
        fuel.nn.functional.embedding(fuel.tensor([9]), fuel.ones(3, 2)).numpy()


@pytest.mark.parametrize("data", ["abc", [1, "x"], [[1, 2], [3]], {"a": 1}, None])
def test_non_numeric_or_ragged_tensor_input(data):
    with pytest.raises(fuel.FuelError):
        fuel.tensor(data)


def test_unsupported_numpy_dtype_and_bad_devices():
    with pytest.raises(fuel.DTypeError, match="complex128"):
        fuel.from_numpy(np.zeros(2, np.complex128))
    with pytest.raises(fuel.InvalidArgument, match="unknown device 'tpu'"):
        fuel.ones(2, device="tpu")
    with pytest.raises(fuel.InvalidArgument, match="unknown device 'xpu:0'; backends are: cpu, "
                                                   "opencl"):
        fuel.ones(2).to("xpu:0")
    fuel.BackendId.register("unserved")  # a declared id that no backend serves
    with pytest.raises(fuel.DeviceError, match="unserved:0 is unavailable: not registered"):
        fuel.ones(2).to("unserved")


def test_item_bool_and_dtype_errors():
    with pytest.raises(fuel.InvalidArgument, match="exactly one element"):
        fuel.ones(2).item()
    with pytest.raises(fuel.InvalidArgument, match="ambiguous"):
        bool(fuel.ones(2))
    with pytest.raises(fuel.DTypeError, match="not defined for bool"):
        fuel.tensor([True]) - fuel.tensor([False])
    with pytest.raises(fuel.DTypeError, match="bitwise"):
        fuel.ones(2) & fuel.ones(2)
    with pytest.raises(fuel.DTypeError, match="not a number"):
        fuel.ones(2) + "1"
