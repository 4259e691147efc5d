"""The OpenCL C of the block-quantized (GGUF) kernels: per format, how one 32-value part of a
block de-quantizes (and, for the formats whose matmul rounds its activations, a block's codes
as float vectors with its scale and offset); shared by every format, the registry's
activation rounding (``round_int16_block``, the only place OpenCL computes it) and the
dequantize, matmul, embedding and round_int16_blocks kernels. Byte layouts are ggml's
(``fuel/ir/dtype.py``)."""

from __future__ import annotations

from functools import cache

from fuel.backends.opencl.codegen import ProgramSpec
from fuel.ir.dtype import QuantizedDType
from fuel.ir.ops import ACTIVATION_BLOCK, ACTIVATION_CODE_MAX, ACTIVATION_ROUNDED_FORMATS

# Activation values a matmul work-group rounds (or stages) in local memory at a time, and the
# activation rows one work-item multiplies with each weight block it reads.
CHUNK = 1024
ROWS = 4

# The registry's round_int16_blocks on one block (ops.py): d = max|x| / ACTIVATION_CODE_MAX
# (32767), q = round half even of x * (1 / d) (0 where d is 0), as float32 steps. Every OpenCL
# kernel that rounds activations calls this, so a change of the definition is made here once.
ROUNDING = """
inline float round_int16_block(__global const float* x, short* q) {
    float largest = 0.0f;
    for (int l = 0; l < ACTIVATION_BLOCK; ++l) {
        const float magnitude = fabs(x[l]);
        largest = magnitude > largest ? magnitude : largest;
    }
    const float d = largest / (float)ACTIVATION_CODE_MAX;
    const float inverse = d > 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < ACTIVATION_BLOCK; ++l) q[l] = (short)rint(x[l] * inverse);
    return d;
}
"""

_HALF = """
/* The float16 at p, exactly, in integer steps (subnormals, infinities and NaN included): on
 * PoCL this is twice as fast as vload_half, which was half of a decode matmul's time. */
inline float half_at(__global const uchar* p) {
    const uint bits = (uint)p[0] | ((uint)p[1] << 8);
    const uint sign = (bits & 0x8000u) << 16, exponent = (bits >> 10) & 31u;
    const uint mantissa = bits & 1023u;
    if (exponent == 0u) return as_float(sign | as_uint((float)mantissa * 0x1p-24f));
    if (exponent == 31u) return as_float(sign | 0x7f800000u | (mantissa << 13));
    return as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}
/* A q4 block's 32 nibbles (the low ones first) as four float8. */
inline void nibbles(uchar16 bytes, float8* codes) {
    const uchar16 low = bytes & (uchar)15, high = bytes >> (uchar)4;
    codes[0] = convert_float8(low.lo);
    codes[1] = convert_float8(low.hi);
    codes[2] = convert_float8(high.lo);
    codes[3] = convert_float8(high.hi);
}
"""

# Per format: dequantize_part(block, part, out) writes values [32 part, 32 part + 32) of the
# block, in the float32 steps of gguf's de-quantizer. The formats that round activations also
# have unpack: the block's 32 codes c as four float8, and d, m with value = d * c + m.
FORMATS = {
    "q4_0": """
inline void dequantize_part(__global const uchar* block, int part, float* out) {
    const float d = half_at(block);
    for (int j = 0; j < 16; ++j) {
        out[j] = (float)((int)(block[2 + j] & 15) - 8) * d;
        out[j + 16] = (float)((int)(block[2 + j] >> 4) - 8) * d;
    }
}
inline void unpack(__global const uchar* block, float8* codes, float* d, float* m) {
    nibbles(vload16(0, block + 2), codes);
    *d = half_at(block);
    *m = -8.0f * *d;
}
""",
    "q4_1": """
inline void dequantize_part(__global const uchar* block, int part, float* out) {
    const float d = half_at(block), m = half_at(block + 2);
    for (int j = 0; j < 16; ++j) {
        out[j] = (float)(block[4 + j] & 15) * d + m;
        out[j + 16] = (float)(block[4 + j] >> 4) * d + m;
    }
}
inline void unpack(__global const uchar* block, float8* codes, float* d, float* m) {
    nibbles(vload16(0, block + 4), codes);
    *d = half_at(block);
    *m = half_at(block + 2);
}
""",
    "q8_0": """
inline void dequantize_part(__global const uchar* block, int part, float* out) {
    const float d = half_at(block);
    for (int j = 0; j < 32; ++j) out[j] = (float)((char)block[2 + j]) * d;
}
inline void unpack(__global const uchar* block, float8* codes, float* d, float* m) {
    const char16 low = as_char16(vload16(0, block + 2)), high = as_char16(vload16(0, block + 18));
    codes[0] = convert_float8(low.lo);
    codes[1] = convert_float8(low.hi);
    codes[2] = convert_float8(high.lo);
    codes[3] = convert_float8(high.hi);
    *d = half_at(block);
    *m = 0.0f;
}
""",
    "q4_k": """
inline void dequantize_part(__global const uchar* block, int part, float* out) {
    const float d = half_at(block), dmin = half_at(block + 2);
    __global const uchar* scales = block + 4;
    int scale, minimum;
    if (part < 4) {
        scale = scales[part] & 63;
        minimum = scales[part + 4] & 63;
    } else {
        scale = (scales[part + 4] & 15) | ((scales[part - 4] >> 6) << 4);
        minimum = (scales[part + 4] >> 4) | ((scales[part] >> 6) << 4);
    }
    const float factor = d * (float)scale, offset = dmin * (float)minimum;
    __global const uchar* codes = block + 16 + 32 * (part >> 1);
    const int shift = 4 * (part & 1);
    for (int l = 0; l < 32; ++l) out[l] = factor * (float)((codes[l] >> shift) & 15) - offset;
}
""",
    "q6_k": """
inline void dequantize_part(__global const uchar* block, int part, float* out) {
    const int half_block = part >> 2, quarter = part & 3;
    __global const uchar* low = block + 64 * half_block + 32 * (quarter & 1);
    __global const uchar* high = block + 128 + 32 * half_block;
    __global const char* scales = (__global const char*)(block + 192) + 2 * part;
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

_KERNELS = """
/* Blocks are addressed as rows: row r's first block starts at offset + r * row_bytes. */
__kernel void dequantize(__global float* out, __global const uchar* w, long parts_per_row,
                         long row_bytes, long offset, long count, long out_offset) {
    const long g = get_global_id(0);
    if (g >= count) return;
    const long row = g / parts_per_row, p = g % parts_per_row;
    float values[32];
    dequantize_part(w + offset + row * row_bytes + (p / PARTS) * BLOCK_BYTES, (int)(p % PARTS),
                    values);
    __global float* target = out + out_offset + 32 * g;
    for (int l = 0; l < 32; ++l) target[l] = values[l];
}

__kernel void round_int16_blocks(__global float* out, __global const float* x, long blocks,
                                long x_offset, long out_offset) {
    const long g = get_global_id(0);
    if (g >= blocks) return;
    short q[ACTIVATION_BLOCK];
    const float d = round_int16_block(x + x_offset + ACTIVATION_BLOCK * g, q);
    __global float* target = out + out_offset + ACTIVATION_BLOCK * g;
    for (int l = 0; l < ACTIVATION_BLOCK; ++l) target[l] = (float)q[l] * d;
}

/* out (m, n) = x (m, k) @ dequantize(w).T. A work-group is get_local_size(0) output columns
 * by ROWS activation rows: per CHUNK of k it stages those rows in local memory (rounded to
 * 16-bit blocks where the format says so, with each block's sum), then each work-item reads its
 * weight row's blocks once for all ROWS rows. A rounded format's block adds d * (codes . x) +
 * m * sum(x) (value = d * code + m): float32 products and sums, in float8 lanes. */
__kernel void quantized_matmul(__global float* out, __global const float* x,
                               __global const uchar* w, long m, long n, long k, long x_offset,
                               long offset, long row_bytes, long out_offset) {
    const long column = get_global_id(0);
    const long row0 = get_group_id(1) * ROWS;
    const int rows = (int)min((long)ROWS, m - row0);
    const int lid = get_local_id(0), group = get_local_size(0);
    const int active = column < n;
    __global const uchar* weights = w + offset + (active ? column : 0) * row_bytes;
    float total[ROWS];
    for (int r = 0; r < ROWS; ++r) total[r] = 0.0f;
    __local float values[ROWS * CHUNK];
#if ROUNDED
    __local float sums[ROWS * (CHUNK / ACTIVATION_BLOCK)];
    float8 partial[ROWS];
    for (int r = 0; r < ROWS; ++r) partial[r] = (float8)0.0f;
#endif
    for (long start = 0; start < k; start += CHUNK) {
        const int length = (int)min((long)CHUNK, k - start);
        const int blocks32 = length / ACTIVATION_BLOCK;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int b = lid; b < rows * blocks32; b += group) {
            const int r = b / blocks32, c = b % blocks32;
            __global const float* source = x + x_offset + (row0 + r) * k + start
                + ACTIVATION_BLOCK * c;
#if ROUNDED
            short q[ACTIVATION_BLOCK];
            const float d = round_int16_block(source, q);
            int sum = 0;
            for (int l = 0; l < ACTIVATION_BLOCK; ++l) {
                values[r * CHUNK + ACTIVATION_BLOCK * c + l] = (float)q[l] * d;
                sum += q[l];
            }
            sums[r * (CHUNK / ACTIVATION_BLOCK) + c] = d * (float)sum;
#else
            for (int l = 0; l < ACTIVATION_BLOCK; ++l)
                values[r * CHUNK + ACTIVATION_BLOCK * c + l] = source[l];
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!active) continue;
        __global const uchar* blocks = weights + (start / BLOCK_SIZE) * BLOCK_BYTES;
        for (int c = 0; c < length / BLOCK_SIZE; ++c) {
            __global const uchar* block = blocks + c * BLOCK_BYTES;
#if UNPACK
            float8 codes[4];
            float d, m;
            unpack(block, codes, &d, &m);
            for (int r = 0; r < rows; ++r) {
                __local const float* v = values + r * CHUNK + BLOCK_SIZE * c;
                const float8 dot = codes[0] * vload8(0, v) + codes[1] * vload8(1, v)
                    + codes[2] * vload8(2, v) + codes[3] * vload8(3, v);
                partial[r] += d * dot;
                total[r] += m * sums[r * (CHUNK / ACTIVATION_BLOCK) + c];
            }
#else
            for (int part = 0; part < PARTS; ++part) {
                float weight[32];
                dequantize_part(block, part, weight);
                for (int r = 0; r < rows; ++r) {
                    __local const float* v = values + r * CHUNK + BLOCK_SIZE * c + 32 * part;
                    float sum = 0.0f;
                    for (int l = 0; l < 32; ++l) sum += weight[l] * v[l];
                    total[r] += sum;
                }
            }
#endif
        }
    }
    if (!active) return;
#if UNPACK
    for (int r = 0; r < rows; ++r) {
        const float4 four = partial[r].lo + partial[r].hi;
        const float2 two = four.lo + four.hi;
        total[r] += two.x + two.y;
    }
#endif
    for (int r = 0; r < rows; ++r) out[out_offset + (row0 + r) * n + column] = total[r];
}
"""

# out[i] = dequantize(table[ids[i]]); an id outside [0, rows) records a fault (as the index
# kernels do) and writes zeros.
_EMBEDDING = """
__kernel void quantized_embedding_{index}(
        __global float* out, __global const uchar* table, __global const {index}* ids,
        long ids_offset, long ids_stride, long parts_per_row, long table_rows, long row_bytes,
        long offset, long count, long out_offset, int code, __global volatile int* fault) {{
    const long g = get_global_id(0);
    if (g >= count) return;
    const long i = g / parts_per_row, p = g % parts_per_row;
    const long raw = (long)ids[ids_offset + i * ids_stride];
    float values[32];
    if (raw < 0 || raw >= table_rows) {{
        if (atomic_cmpxchg(fault, 0, code) == 0) {{
            fault[1] = (int)raw;
            fault[2] = (int)(raw >> 32);
        }}
        for (int l = 0; l < 32; ++l) values[l] = 0.0f;
    }} else {{
        dequantize_part(table + offset + raw * row_bytes + (p / PARTS) * BLOCK_BYTES,
                        (int)(p % PARTS), values);
    }}
    __global float* target = out + out_offset + 32 * g;
    for (int l = 0; l < 32; ++l) target[l] = values[l];
}}
"""


@cache
def quantized_program(dtype: QuantizedDType) -> ProgramSpec:
    """The program of ``dtype``'s kernels: dequantize, quantized_matmul, quantized_embedding
    (int32 and int64 ids) and round_int16_blocks."""
    rounded = dtype in ACTIVATION_ROUNDED_FORMATS
    head = (f"#pragma OPENCL FP_CONTRACT OFF\n#define BLOCK_SIZE {dtype.block_size}\n"
            f"#define BLOCK_BYTES {dtype.block_bytes}\n#define PARTS {dtype.block_size // 32}\n"
            f"#define ACTIVATION_BLOCK {ACTIVATION_BLOCK}\n"
            f"#define ACTIVATION_CODE_MAX {ACTIVATION_CODE_MAX}\n#define CHUNK {CHUNK}\n"
            f"#define ROWS {ROWS}\n#define ROUNDED {int(rounded)}\n"
            f"#define UNPACK {int('void unpack(' in FORMATS[dtype.name])}\n")
    embedding = "".join(_EMBEDDING.format(index=index) for index in ("int", "long"))
    source = head + _HALF + ROUNDING + FORMATS[dtype.name] + _KERNELS + embedding
    return ProgramSpec(f"quantized_{dtype.name}", source)
