"""Block-quantized tensors: wrap stored GGUF blocks as a tensor (no copy on the CPU), and the
ops that read them (dequantize, quantized_matmul, quantized_embedding)."""

from __future__ import annotations

import numpy as np

from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import at_user_line, make
from fuel.graph.node import Node, creation_site
from fuel.ir import dtype as dt
from fuel.ir.device import parse_device
from fuel.ir.errors import DTypeError, InvalidArgument, ShapeError
from fuel.ir.layout import Layout
from fuel.ir.ops import NO_PARAMS, OpKind


@at_user_line
def from_quantized(data: np.ndarray, dtype, shape, device=None) -> TensorBase:
    """A realized tensor of ``shape`` whose values are the ``dtype`` blocks in ``data``
    (uint8 bytes, as GGUF stores them; shared, not copied, on the CPU when contiguous)."""
    chosen = dt.to_dtype(dtype)
    if not chosen.is_quantized:
        raise DTypeError(f"from_quantized takes a block-quantized dtype "
                         f"({', '.join(d.name for d in dt.QUANTIZED_DTYPES)}), got {chosen.name}")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
        raise InvalidArgument("from_quantized takes the blocks as a uint8 NumPy array, got "
                              f"{getattr(data, 'dtype', type(data).__name__)}")
    shape = tuple(int(size) for size in shape)
    if not shape or shape[-1] % chosen.block_size:
        raise ShapeError(f"a {chosen.name} tensor's last dim must be a whole number of blocks "
                         f"of {chosen.block_size}, got shape {shape}")
    count = int(np.prod(shape, dtype=np.int64))
    if data.nbytes != chosen.storage_bytes(count):
        raise ShapeError(f"{data.nbytes} bytes do not hold a {chosen.name} tensor of shape "
                         f"{shape} ({chosen.storage_bytes(count)} bytes)")
    from fuel.backends import get_backend

    device = parse_device(device)
    backend = get_backend(device)
    # The uploaded bytes' storage is retyped, not wrapped in a second Storage: a device
    # backend's pool recycles a buffer when the storage it tracks dies, and would hand the
    # weights' buffer to the next allocation of its size while the tensor still reads it.
    storage = backend.upload(device, np.ascontiguousarray(data).reshape(-1))
    storage.dtype, storage.size = chosen, count
    node = Node(OpKind.LOAD, (), None, chosen, shape, device, creation_site())
    node.attach(storage, Layout.contiguous(shape))
    return wrap(node)


def _tensor(value, role: str) -> Node:
    if not isinstance(value, TensorBase):
        raise InvalidArgument(f"the {role} must be a fuel tensor, got {type(value).__name__}")
    return value._node


@at_user_line
def dequantize(x: TensorBase) -> TensorBase:
    """The float32 values of a block-quantized tensor."""
    return make(OpKind.DEQUANTIZE, (_tensor(x, "dequantized tensor"),), NO_PARAMS)


@at_user_line
def quantized_matmul(x: TensorBase, weight: TensorBase) -> TensorBase:
    """``x @ dequantize(weight).T`` for float32 ``x`` (..., k) and a quantized (n, k) weight,
    computed on the blocks (torch.nn.functional.linear without a bias); for the block formats
    (all but f16_blocks and bf16_blocks) ``x`` is first ``round_int16_blocks(x)`` (the
    registry's definition)."""
    return make(OpKind.QUANTIZED_MATMUL, (_tensor(x, "input"), _tensor(weight, "weight")),
                NO_PARAMS)


@at_user_line
def round_int16_blocks(x: TensorBase) -> TensorBase:
    """float32 ``x`` rounded per block of 32 along its last dim to 16-bit codes times a scale
    (``max|x| / 32767``): the activation rounding of quantized_matmul's integer dots."""
    return make(OpKind.ROUND_INT16_BLOCKS, (_tensor(x, "input"),), NO_PARAMS)


@at_user_line
def quantized_matmul_int8(x: TensorBase, weight: TensorBase) -> TensorBase:
    """``quantized_matmul`` at the serving precision: for the block formats ``x`` is first
    ``round_int8_blocks(x)`` (8-bit codes per block of 32, llama.cpp's activation rule)."""
    return make(OpKind.QUANTIZED_MATMUL_INT8, (_tensor(x, "input"), _tensor(weight, "weight")),
                NO_PARAMS)


@at_user_line
def round_int8_blocks(x: TensorBase) -> TensorBase:
    """float32 ``x`` rounded per block of 32 along its last dim to 8-bit codes times a scale
    (``max|x| / 127``): the activation rounding of quantized_matmul_int8."""
    return make(OpKind.ROUND_INT8_BLOCKS, (_tensor(x, "input"),), NO_PARAMS)


@at_user_line
def quantized_embedding(table: TensorBase, ids: TensorBase) -> TensorBase:
    """float32 rows ``ids`` of a quantized (rows, k) table."""
    return make(OpKind.QUANTIZED_EMBEDDING, (_tensor(table, "table"), _tensor(ids, "ids")),
                NO_PARAMS)
