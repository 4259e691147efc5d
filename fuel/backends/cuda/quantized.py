"""Kernels on block-quantized (GGUF) weights on CUDA, reading the blocks as stored (ggml's byte
layouts, ``fuel/ir/dtype.py``): dequantize, quantized_matmul (float32 rows by an (n, k)
quantized weight: no float weight is made), the embedding lookup and round_int16_blocks.

One thread per output element of the matmul (a column of the weight against one activation
row), so a decode step's (1, k) x (n, k) reads each weight byte once. The formats that round
their activations (``ACTIVATION_ROUNDED_FORMATS``) round each 32-value block of the row with the
registry's definition (``round_int16_block``); those that unpack codes add
``d * (codes . rounded) + m * sum``, as the OpenCL kernels do, the others multiply the
de-quantized values. A quantized operand may be
a view whose rows start at whole blocks."""

from __future__ import annotations

from fuel.backends.cuda.kernels import STRIDED, SourceKernel, kernel_list, loop_kernel
from fuel.backends.cuda.loops import copy_loop, fill_loop
from fuel.compiler.kernel_ir import collapse
from fuel.ir import dtype as dt
from fuel.ir.dtype import QuantizedDType
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout
from fuel.ir.ops import ACTIVATION_BLOCK, ACTIVATION_CODE_MAX, ACTIVATION_ROUNDED_FORMATS, OpKind

_COMMON = r"""#define FUEL_DEVICE static __device__ __forceinline__
typedef unsigned char uchar;
/* The float16 at p, exactly (subnormals, infinities and NaN included). */
FUEL_DEVICE float half_at(const uchar *p) {
  const unsigned int bits = (unsigned int)p[0] | ((unsigned int)p[1] << 8);
  const unsigned int sign = (bits & 0x8000u) << 16, exponent = (bits >> 10) & 31u;
  const unsigned int mantissa = bits & 1023u;
  if (exponent == 0u) return __uint_as_float(sign | __float_as_uint((float)mantissa * 0x1p-24f));
  if (exponent == 31u) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}
/* The registry's round_int16_blocks on one block: d = max|x| / ACTIVATION_CODE_MAX, q = round
 * half even of x * (1 / d) (0 where d is 0), in float32 steps. */
FUEL_DEVICE float round_int16_block(const float *x, short *q) {
  float largest = 0.0f;
  for (int l = 0; l < ACTIVATION_BLOCK; ++l) {
    const float magnitude = fabsf(x[l]);
    largest = magnitude > largest ? magnitude : largest;
  }
  const float d = largest / (float)ACTIVATION_CODE_MAX;
  const float inverse = d > 0.0f ? 1.0f / d : 0.0f;
  for (int l = 0; l < ACTIVATION_BLOCK; ++l) q[l] = (short)rintf(x[l] * inverse);
  return d;
}
"""

# Per format: dequantize_part(block, part, out) writes values [32 part, 32 part + 32) of the
# block in the float32 steps of gguf's de-quantizer; the rounded formats also have
# codes(block, c) (the 32 codes) with d and m (value = d * code + m).
FORMATS = {
    "q4_0": r"""
FUEL_DEVICE void dequantize_part(const uchar *block, int part, float *out) {
  const float d = half_at(block);
  for (int j = 0; j < 16; ++j) {
    out[j] = (float)((int)(block[2 + j] & 15) - 8) * d;
    out[j + 16] = (float)((int)(block[2 + j] >> 4) - 8) * d;
  }
}
FUEL_DEVICE void unpack(const uchar *block, float *codes, float *d, float *m) {
  for (int j = 0; j < 16; ++j) {
    codes[j] = (float)(block[2 + j] & 15); codes[j + 16] = (float)(block[2 + j] >> 4); }
  *d = half_at(block); *m = -8.0f * *d;
}
""",
    "q4_1": r"""
FUEL_DEVICE void dequantize_part(const uchar *block, int part, float *out) {
  const float d = half_at(block), m = half_at(block + 2);
  for (int j = 0; j < 16; ++j) {
    out[j] = (float)(block[4 + j] & 15) * d + m;
    out[j + 16] = (float)(block[4 + j] >> 4) * d + m;
  }
}
FUEL_DEVICE void unpack(const uchar *block, float *codes, float *d, float *m) {
  for (int j = 0; j < 16; ++j) {
    codes[j] = (float)(block[4 + j] & 15); codes[j + 16] = (float)(block[4 + j] >> 4); }
  *d = half_at(block); *m = half_at(block + 2);
}
""",
    "q8_0": r"""
FUEL_DEVICE void dequantize_part(const uchar *block, int part, float *out) {
  const float d = half_at(block);
  for (int j = 0; j < 32; ++j) out[j] = (float)((signed char)block[2 + j]) * d;
}
FUEL_DEVICE void unpack(const uchar *block, float *codes, float *d, float *m) {
  for (int j = 0; j < 32; ++j) codes[j] = (float)((signed char)block[2 + j]);
  *d = half_at(block); *m = 0.0f;
}
""",
    "q4_k": r"""
FUEL_DEVICE void dequantize_part(const uchar *block, int part, float *out) {
  const float d = half_at(block), dmin = half_at(block + 2);
  const uchar *scales = block + 4;
  int scale, minimum;
  if (part < 4) {
    scale = scales[part] & 63;
    minimum = scales[part + 4] & 63;
  } else {
    scale = (scales[part + 4] & 15) | ((scales[part - 4] >> 6) << 4);
    minimum = (scales[part + 4] >> 4) | ((scales[part] >> 6) << 4);
  }
  const float factor = d * (float)scale, offset = dmin * (float)minimum;
  const uchar *codes = block + 16 + 32 * (part >> 1);
  const int shift = 4 * (part & 1);
  for (int l = 0; l < 32; ++l) out[l] = factor * (float)((codes[l] >> shift) & 15) - offset;
}
""",
    "q6_k": r"""
FUEL_DEVICE void dequantize_part(const uchar *block, int part, float *out) {
  const int half_block = part >> 2, quarter = part & 3;
  const uchar *low = block + 64 * half_block + 32 * (quarter & 1);
  const uchar *high = block + 128 + 32 * half_block;
  const signed char *scales = (const signed char *)(block + 192) + 2 * part;
  const float d = half_at(block + 208);
  const int low_shift = 4 * (quarter >> 1), high_shift = 2 * quarter;
  for (int sixteen = 0; sixteen < 2; ++sixteen) {
    const float factor = d * (float)scales[sixteen];
    for (int l = 16 * sixteen; l < 16 * sixteen + 16; ++l) {
      const int q = (int)(((low[l] >> low_shift) & 15) | (((high[l] >> high_shift) & 3) << 4))
          - 32;
      out[l] = factor * (float)q;
    }
  }
}
""",
}

# Kernel bodies (each a program of its own; arguments as the rendered kernels': pointers, then
# a struct of 64-bit integers).
_DEQUANTIZE = r"""
/* Row r's first block starts at offset + r * row_bytes; a thread per 32 values.
 * a: parts per row, row bytes, offset, count, out offset */
extern "C" __global__ void fuel_kernel(const uchar *w, float *out, const fuel_arguments_t a) {
  const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= a.v[3]) return;
  const long long row = g / a.v[0], p = g % a.v[0];
  float values[32];
  dequantize_part(w + a.v[2] + row * a.v[1] + (p / PARTS) * BLOCK_BYTES, (int)(p % PARTS),
                  values);
  float *target = out + a.v[4] + 32 * g;
  for (int l = 0; l < 32; ++l) target[l] = values[l];
}
"""
_ROUND = r"""
/* a: blocks, x offset, out offset */
extern "C" __global__ void fuel_kernel(const float *x, float *out, const fuel_arguments_t a) {
  const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= a.v[0]) return;
  short q[ACTIVATION_BLOCK];
  const float d = round_int16_block(x + a.v[1] + ACTIVATION_BLOCK * g, q);
  float *target = out + a.v[2] + ACTIVATION_BLOCK * g;
  for (int l = 0; l < ACTIVATION_BLOCK; ++l) target[l] = (float)q[l] * d;
}
"""
_MATMUL = r"""
/* out (m, n) = x (m, k) @ dequantize(w).T, a thread per output element (columns fastest);
 * the activations rounded to 16-bit blocks first where the format says so (ROUNDED): from the
 * codes with d and m where the format unpacks them, else against the de-quantized values.
 * a: m, n, k, x offset, w offset, row bytes, out offset */
extern "C" __global__ void fuel_kernel(const float *x, const uchar *w, float *out,
                                       const fuel_arguments_t a) {
  const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long m = a.v[0], n = a.v[1], k = a.v[2];
  if (g >= m * n) return;
  const long long row = g / n, column = g % n;
  const float *source = x + a.v[3] + row * k;
  const uchar *weights = w + a.v[4] + column * a.v[5];
  float total = 0.0f;
#if UNPACK
  float partial = 0.0f;
  for (long long c = 0; c < k / BLOCK_SIZE; ++c) {
    short q[ACTIVATION_BLOCK];
    const float dx = round_int16_block(source + BLOCK_SIZE * c, q);
    float codes[32], d, offset;
    unpack(weights + c * BLOCK_BYTES, codes, &d, &offset);
    float dot = 0.0f;
    int sum = 0;
    for (int l = 0; l < 32; ++l) { dot += codes[l] * ((float)q[l] * dx); sum += q[l]; }
    partial += d * dot;
    total += offset * (dx * (float)sum);
  }
  total += partial;
#else
  for (long long c = 0; c < k / BLOCK_SIZE; ++c) {
    for (int part = 0; part < PARTS; ++part) {
      float weight[32];
      dequantize_part(weights + c * BLOCK_BYTES, part, weight);
      const float *v = source + BLOCK_SIZE * c + 32 * part;
#if ROUNDED
      short q[ACTIVATION_BLOCK];
      float rounded[ACTIVATION_BLOCK];
      const float dx = round_int16_block(v, q);
      for (int l = 0; l < 32; ++l) rounded[l] = (float)q[l] * dx;
      v = rounded;
#endif
      float sum = 0.0f;
      for (int l = 0; l < 32; ++l) sum += weight[l] * v[l];
      total += sum;
    }
  }
#endif
  out[a.v[6] + row * n + column] = total;
}
"""
_EMBEDDING = r"""
/* out[i] = dequantize(table[ids[i]]); an id outside [0, rows) records a fault and writes
 * zeros. a: ids offset, ids stride, parts per row, table rows, row bytes, offset, count,
 * out offset, fault code */
extern "C" __global__ void fuel_kernel(const uchar *table, const INDEX *ids, float *out,
                                       int *fault, const fuel_arguments_t a) {
  const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= a.v[6]) return;
  const long long i = g / a.v[2], p = g % a.v[2];
  const long long raw = (long long)ids[a.v[0] + i * a.v[1]];
  float values[32];
  if (raw < 0 || raw >= a.v[3]) {
    if (atomicCAS(fault, 0, (int)a.v[8]) == 0) {
      fault[1] = (int)raw; fault[2] = (int)(raw >> 32); }
    for (int l = 0; l < 32; ++l) values[l] = 0.0f;
  } else {
    dequantize_part(table + a.v[5] + raw * a.v[4] + (p / PARTS) * BLOCK_BYTES, (int)(p % PARTS),
                    values);
  }
  float *target = out + a.v[7] + 32 * g;
  for (int l = 0; l < 32; ++l) target[l] = values[l];
}
"""
_ARGUMENTS = {"dequantize": 5, "round": 3, "matmul": 7, "embedding": 9}


def source(dtype: QuantizedDType, kernel: str, index: str = "int") -> str:
    """The CUDA C of one quantized kernel of ``dtype``."""
    head = (f"#define BLOCK_SIZE {dtype.block_size}\n#define BLOCK_BYTES {dtype.block_bytes}\n"
            f"#define PARTS {dtype.block_size // 32}\n"
            f"#define ACTIVATION_BLOCK {ACTIVATION_BLOCK}\n"
            f"#define ACTIVATION_CODE_MAX {ACTIVATION_CODE_MAX}\n"
            f"#define ROUNDED {int(dtype in ACTIVATION_ROUNDED_FORMATS)}\n"
            f"#define UNPACK {int('void unpack(' in FORMATS[dtype.name])}\n"
            f"#define INDEX {index}\n"
            f"typedef struct {{ long long v[{_ARGUMENTS[kernel]}]; }} fuel_arguments_t;\n")
    body = {"dequantize": _DEQUANTIZE, "round": _ROUND, "matmul": _MATMUL,
            "embedding": _EMBEDDING}[kernel]
    return head + _COMMON + FORMATS[dtype.name] + body


def block_rows(dtype: QuantizedDType, layout: Layout, what: str) -> tuple[int, int, int]:
    """(rows, bytes from one row's first block to the next, byte offset of the first block)
    of a quantized operand whose layout is rows of whole blocks; InvalidArgument otherwise."""
    shape, strides = layout.shape, layout.strides
    rows = 1
    for extent in shape[:-1]:
        rows *= extent
    dims, (leading,) = collapse(shape[:-1], [strides[:-1]])
    row_stride = leading[0] if rows > 1 else shape[-1]
    size = dtype.block_size
    if ((rows > 1 and len(dims) > 1) or (shape[-1] > 1 and strides[-1] != 1)
            or layout.offset % size or row_stride % size):
        raise InvalidArgument(
            f"the {what} ({dtype.name}, shape {shape}, strides {strides}, offset "
            f"{layout.offset}) is not rows of whole {size}-value blocks: CUDA's quantized "
            "kernels read blocks as stored (slice whole rows or whole blocks of each row)")
    return rows, dtype.storage_bytes(row_stride), dtype.storage_bytes(layout.offset)


def _dequantize_host(kernel, inputs, outputs, layouts, params):
    dtype, out_layout = inputs[0].dtype, layouts[-1]
    if out_layout.numel == 0:
        return None
    rows, row_bytes, offset = block_rows(dtype, layouts[0], "dequantized tensor")
    parts = out_layout.shape[-1] // 32
    return rows * parts, [inputs[0].buffer.ptr, outputs[0].buffer.ptr], [
        parts, row_bytes, offset, rows * parts, out_layout.offset]


def _round_host(kernel, inputs, outputs, layouts, params):
    count = layouts[-1].numel // ACTIVATION_BLOCK
    if count == 0:
        return None
    return count, [inputs[0].buffer.ptr, outputs[0].buffer.ptr], [
        count, layouts[0].offset, layouts[-1].offset]


def _embedding_host(kernel, inputs, outputs, layouts, params):
    table, ids = inputs
    table_layout, ids_layout, out_layout = layouts
    if out_layout.numel == 0:
        return None
    rows, row_bytes, offset = block_rows(table.dtype, table_layout, "embedding table")
    parts = table_layout.shape[-1] // 32
    count = ids_layout.shape[0] * parts
    context = outputs[0].backend.context(outputs[0].device)
    code = context.fault_code("quantized_embedding", 0, rows)
    return count, [table.buffer.ptr, ids.buffer.ptr, outputs[0].buffer.ptr,
                   context.fault_buffer.ptr], [
        ids_layout.offset, ids_layout.strides[0], parts, rows, row_bytes, offset, count,
        out_layout.offset, code]


class QuantizedMatmulKernel(SourceKernel):
    """out (..., n) = x (..., k) @ dequantize(w).T; a strided x is copied dense first."""

    def __init__(self, dtype: QuantizedDType) -> None:
        super().__init__("quantized_matmul", source(dtype, "matmul"), _matmul_host)

    def prepare(self, inputs, outputs, layouts, params):
        x, weight = inputs
        x_layout, out_layout = layouts[0], layouts[-1]
        if out_layout.numel and layouts[1].shape[1] == 0:  # a sum over nothing
            return loop_kernel(fill_loop(dt.float32, 0, out_layout)).prepare(
                [], outputs, [out_layout], None)
        first = None
        if not x_layout.is_contiguous() and out_layout.numel:
            dense_layout = Layout.contiguous(x_layout.shape)
            dense = x.backend.allocate(x.device, x.dtype, dense_layout.numel)
            first = loop_kernel(copy_loop(x.dtype, x_layout, dense_layout)).prepare(
                [x], [dense], [x_layout, dense_layout], None)
            inputs, layouts = [dense, weight], [dense_layout, *layouts[1:]]
        launch = super().prepare(inputs, outputs, layouts, params)
        if first is None:
            return launch

        def run() -> None:
            _ = inputs  # the dense copy lives as long as the launcher
            first()
            launch()

        return run


def _matmul_host(kernel, inputs, outputs, layouts, params):
    x, weight = inputs
    out_layout = layouts[-1]
    if out_layout.numel == 0:
        return None
    n, k = layouts[1].shape
    _, row_bytes, offset = block_rows(weight.dtype, layouts[1], "weight")
    m = out_layout.numel // n
    return m * n, [x.buffer.ptr, weight.buffer.ptr, outputs[0].buffer.ptr], [
        m, n, k, layouts[0].offset, offset, row_bytes, out_layout.offset]


KERNELS = kernel_list()
# Formats without a CUDA source here are de-quantized at load on this device (the loader asks
# the kernel registry).
for _format in (f for f in dt.QUANTIZED_DTYPES if f.name in FORMATS):
    KERNELS.add(OpKind.DEQUANTIZE, [(_format, dt.float32)], SourceKernel(
        "dequantize", source(_format, "dequantize"), _dequantize_host), STRIDED)
    KERNELS.add(OpKind.QUANTIZED_MATMUL, [(dt.float32, _format, dt.float32)],
                QuantizedMatmulKernel(_format), STRIDED)
    for _index, _name in ((dt.int32, "int"), (dt.int64, "long long")):
        KERNELS.add(OpKind.QUANTIZED_EMBEDDING, [(_format, _index, dt.float32)], SourceKernel(
            "quantized_embedding", source(_format, "embedding", _name), _embedding_host),
            STRIDED)
KERNELS.add(OpKind.ROUND_INT16_BLOCKS, [(dt.float32, dt.float32)],
            SourceKernel("round_int16_blocks", source(dt.q8_0, "round"), _round_host))
