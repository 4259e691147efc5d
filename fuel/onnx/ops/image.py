"""ImageDecoder: the encoded bytes are read on the host and decoded with Pillow (the ``image``
extra); the decoded pixels become a constant, since their shape depends on the bytes."""

from __future__ import annotations

import io

import numpy as np

from fuel.extras import install_command
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import Tensor

# pixel_format -> (Pillow mode to convert to, channel order applied to its array).
_FORMATS = {"RGB": ("RGB", slice(None)), "BGR": ("RGB", slice(None, None, -1)),
            "Grayscale": ("L", None)}


@onnx_op("ImageDecoder")
def image_decoder(ctx: NodeContext) -> Tensor:
    pixel_format = ctx.attr("pixel_format", "RGB")
    found = _FORMATS.get(pixel_format)
    if found is None:
        raise OnnxError(f"pixel_format {pixel_format!r} is not RGB, BGR or Grayscale")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise UnsupportedOp(f"ImageDecoder needs Pillow: {install_command('image')}") from None
    encoded = np.asarray(ctx.static(0), np.uint8).tobytes()
    try:
        with Image.open(io.BytesIO(encoded)) as image:
            mode, channels = found
            pixels = np.asarray(image if image.mode == mode else image.convert(mode))
    except (UnidentifiedImageError, OSError) as error:
        raise OnnxError(f"cannot decode the image ({len(encoded)} bytes): {error}") from None
    pixels = pixels[:, :, None] if channels is None else pixels[:, :, channels]
    return ctx.constant(np.ascontiguousarray(pixels, np.uint8))
