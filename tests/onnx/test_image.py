"""ImageDecoder through Pillow: lossless PNG and BMP bytes decode to the pixels encoded,
in RGB, BGR and grayscale (ITU-R 601-2 luma, as ONNX's reference defines it); bad bytes
are a clear error."""

from __future__ import annotations

import io

import numpy as np
import pytest

import fuel

onnx = pytest.importorskip("onnx")
Image = pytest.importorskip("PIL.Image")
from onnx import TensorProto, helper  # noqa: E402

PIXELS = np.random.default_rng(5).integers(0, 256, (7, 11, 3), dtype=np.uint8)


def _decoder(pixel_format: str):
    node = helper.make_node("ImageDecoder", ["data"], ["y"], pixel_format=pixel_format)
    graph = helper.make_graph([node], "decode",
                              [helper.make_tensor_value_info("data", TensorProto.UINT8, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return fuel.onnx.load(model.SerializeToString())


def _encoded(kind: str) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(PIXELS).save(buffer, format=kind)
    return np.frombuffer(buffer.getvalue(), np.uint8)


@pytest.mark.parametrize("kind", ["PNG", "BMP"])
def test_lossless_images_decode_to_their_pixels(kind):
    data = _encoded(kind)
    np.testing.assert_array_equal(_decoder("RGB").run({"data": data})["y"], PIXELS)
    np.testing.assert_array_equal(_decoder("BGR").run({"data": data})["y"], PIXELS[:, :, ::-1])
    gray = _decoder("Grayscale").run({"data": data})["y"]
    luma = (PIXELS.astype(np.float64) @ [299 / 1000, 587 / 1000, 114 / 1000]).reshape(7, 11, 1)
    assert gray.shape == (7, 11, 1)
    assert np.abs(gray.astype(np.float64) - luma).max() <= 1.0


def test_bad_bytes_are_a_clear_error():
    with pytest.raises(fuel.FuelError, match="cannot decode the image"):
        _decoder("RGB").run({"data": np.arange(40, dtype=np.uint8)})
