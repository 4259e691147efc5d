"""Kernel-suite cases of the block-quantized ops (dequantize, quantized_matmul and
quantized_matmul_int8, quantized_embedding, round_int16_blocks and round_int8_blocks). The
reference is gguf's own NumPy de-quantizer (then a
float64 matmul or a row pick), with the activations first rounded to 16-bit blocks by
``rounded_activations`` (the registry's definition, written here in NumPy) for the formats
that round them; the blocks come from gguf's quantizer where it has one (q4_0, q4_1, q8_0) and
are random bytes with sane scales otherwise (q4_k, q6_k)."""

from __future__ import annotations

import numpy as np

from fuel.backends.cpu.quantized import BLAS_ROWS, PARALLEL_BYTES
from fuel.ir.dtype import QuantizedDType
from fuel.ir.layout import Layout
from fuel.ir.ops import ACTIVATION_ROUNDED_FORMATS, OpKind
from tests.backends.kernel_cases.base import Case, Operand, operand, rng_for

K = OpKind
# Byte offsets of each format's float16 scales inside a block (the rest are codes).
SCALE_OFFSETS = {"q4_0": (0,), "q4_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2), "q6_k": (208,),
                 "q5_k": (0, 2), "q3_k": (108,), "q2_k": (80, 82), "iq4_nl": (0,),
                 "iq4_xs": (0,)}


def gguf_type(dtype: QuantizedDType):
    import gguf

    return gguf.GGMLQuantizationType(dtype.gguf_type)


def quantized_blocks(dtype: QuantizedDType, rows: int, k: int, rng) -> np.ndarray:
    """(rows, row bytes) uint8 blocks of ``dtype`` for a (rows, k) matrix."""
    import gguf

    kind = gguf_type(dtype)
    try:
        blocks = gguf.quants.quantize(rng.normal(0.0, 1.0, (rows, k)).astype(np.float32), kind)
        return np.ascontiguousarray(blocks).view(np.uint8).reshape(rows, -1)
    except NotImplementedError:
        blocks = rng.integers(0, 256, (rows, k // dtype.block_size, dtype.block_bytes),
                              dtype=np.uint8)
        for offset in SCALE_OFFSETS[dtype.name]:
            scales = rng.uniform(0.002, 0.05, blocks.shape[:2]).astype(np.float16)
            blocks[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(*scales.shape, 2)
        return blocks.reshape(rows, -1)


def dequantized(blocks: np.ndarray, dtype: QuantizedDType) -> np.ndarray:
    """gguf's de-quantization of ``blocks`` (float32, (rows, k))."""
    import gguf

    return gguf.quants.dequantize(blocks, gguf_type(dtype))


def blocks_operand(blocks: np.ndarray, dtype: QuantizedDType, shape) -> Operand:
    return Operand(np.ascontiguousarray(blocks).reshape(-1), Layout.contiguous(tuple(shape)),
                   "blocks", dtype)


def rounded_activations(x: np.ndarray, code_max: float = 32767.0) -> np.ndarray:
    """x (..., k) rounded per block of 32 along its last dim to 16-bit codes (``code_max``
    127: 8-bit codes, round_int8_blocks), in float32 steps: d = max|x| / code_max,
    d * round_half_even(x * (1 / d)), 0 where d is 0 (written from the registry's stated
    rule, not from its constants)."""
    blocks = x.astype(np.float32).reshape(x.shape[:-1] + (-1, 32))
    scale = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(code_max)
    with np.errstate(divide="ignore"):
        inverse = np.where(scale > 0, np.float32(1.0) / scale, np.float32(0.0))
    return (np.round(blocks * inverse) * scale).astype(np.float32).reshape(x.shape)


def _available() -> bool:
    try:
        import gguf  # noqa: F401
    except ImportError:
        return False
    return True


def dequantize_cases(dtypes):
    dtype = dtypes[0]
    if not _available():
        return []
    rng = rng_for("dequantize", dtypes)
    cases = []
    for rows, blocks_per_row in ((1, 1), (3, 2), (5, 3)):
        k = blocks_per_row * dtype.block_size
        blocks = quantized_blocks(dtype, rows, k, rng)
        cases.append(Case(None, [blocks_operand(blocks, dtype, (rows, k))],
                          lambda arrays, params, shape=(rows, k): dequantized(
                              arrays[0].reshape(shape[0], -1), dtype).reshape(shape),
                          f"dequantize {rows}x{k}", rtol=1e-6, atol=0.0))
    return cases


def quantized_matmul_cases(dtypes, name: str = "quantized_matmul", code_max: float = 32767.0):
    _, dtype, _ = dtypes
    if not _available():
        return []
    rng = rng_for(name, dtypes)
    cases = []
    # decode (one row), short prompts (C dots; tiles of 4 weight rows for one activation row,
    # of 4 activation rows below BLAS_ROWS, and their remainders), batched rows, a long prompt
    # (>= BLAS_ROWS: de-quantized tiles through BLAS), odd output widths, and weights of at
    # least PARALLEL_BYTES (output rows split over threads in chunks, a prime count of rows);
    # eleven blocks at the decode shape (an odd count of blocks, of pairs of chunks for the
    # blocks of 32)
    threaded = -(-PARALLEL_BYTES // (2 * dtype.block_bytes)) | 1
    while any(threaded % p == 0 for p in range(3, int(threaded ** 0.5) + 1, 2)):
        threaded += 2
    for rows_shape, n, blocks_per_row, kind in (((1,), 7, 2, "dense"), ((1,), 5, 11, "dense"),
                                                ((5,), 13, 1, "dense"),
                                                ((2, 3), 5, 3, "transposed"),
                                                ((3,), 9, 2, "dense"),
                                                ((BLAS_ROWS - 1,), 6, 3, "dense"),
                                                ((1,), threaded, 2, "dense"),
                                                ((7,), threaded, 2, "dense"),
                                                ((BLAS_ROWS + 5,), 37, 2, "dense")):
        k = blocks_per_row * dtype.block_size
        blocks = quantized_blocks(dtype, n, k, rng)
        x = rng.normal(0.0, 1.0, rows_shape + (k,)).astype(np.float32)
        weight = dequantized(blocks, dtype).astype(np.float64)
        scale = float((np.abs(x.astype(np.float64)) @ np.abs(weight).T).max())

        rounds = dtype in ACTIVATION_ROUNDED_FORMATS

        # Within float32 summation error of the float64 product: the rounded activations are
        # the same codes and scales on every path (same float32 steps), only sums differ.
        def reference(arrays, params, weight=weight, rounds=rounds):
            x = rounded_activations(arrays[0], code_max) if rounds else arrays[0]
            return x.astype(np.float64) @ weight.T

        cases.append(Case(None, [operand(x, kind), blocks_operand(blocks, dtype, (n, k))],
                          reference, f"{name} {rows_shape} x ({n}, {k})",
                          rtol=1e-5, atol=1e-6 * scale))
    return cases


def quantized_embedding_cases(dtypes):
    dtype, index_dtype, _ = dtypes
    if not _available():
        return []
    rng = rng_for("quantized_embedding", dtypes)
    rows, k = 9, 2 * dtype.block_size
    blocks = quantized_blocks(dtype, rows, k, rng)
    table = dequantized(blocks, dtype)
    index = rng.integers(0, rows, 6).astype(index_dtype.numpy)
    return [Case(None, [blocks_operand(blocks, dtype, (rows, k)), operand(index, "flipped")],
                 lambda arrays, params: table[arrays[1].astype(np.int64)],
                 "quantized_embedding", rtol=1e-6, atol=0.0)]


def round_int16_blocks_cases(dtypes, name: str = "round_int16_blocks",
                             code_max: float = 32767.0):
    rng = rng_for(name, dtypes)
    x = rng.normal(0.0, 1.0, (3, 4, 64)).astype(np.float32)
    x[0, 0, :32] = 0.0  # a block of zeros (scale 0)
    x[1, 2, 5] = 40.0  # an outlier: the rest of its block rounds coarsely
    # d = 1 exactly: the largest code (negative here), ties rounded half to even
    x[2, 1, :32] = 0.0
    x[2, 1, :8] = [-code_max, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, code_max - 0.5]
    return [Case(None, [operand(x, kind)],
                 lambda arrays, params: rounded_activations(arrays[0], code_max),
                 f"{name} {kind}", rtol=0.0, atol=0.0)
            for kind in ("dense", "transposed")]


def quantized_matmul_int8_cases(dtypes):
    """quantized_matmul_int8: the same shapes, the activations rounded to 8-bit codes."""
    return quantized_matmul_cases(dtypes, "quantized_matmul_int8", 127.0)


def round_int8_blocks_cases(dtypes):
    return round_int16_blocks_cases(dtypes, "round_int8_blocks", 127.0)


CASES = {
    K.DEQUANTIZE: dequantize_cases,
    K.ROUND_INT16_BLOCKS: round_int16_blocks_cases,
    K.QUANTIZED_MATMUL: quantized_matmul_cases,
    K.QUANTIZED_EMBEDDING: quantized_embedding_cases,
    K.QUANTIZED_MATMUL_INT8: quantized_matmul_int8_cases,
    K.ROUND_INT8_BLOCKS: round_int8_blocks_cases,
}
