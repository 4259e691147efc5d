/* Block-quantized (GGUF) kernels: dequantize, matmul of float32 rows by a quantized weight,
 * embedding lookup. One library per format: the including Python module defines FORMAT_*
 * (and BLOCK_SIZE, BLOCK_BYTES) before this text. Byte layouts are ggml's.
 *
 * Entry: fuel_kernel(data, sizes, strides) with sizes[0] the operation:
 *   0 dequantize:  data = {weight, out};        sizes = {0, elements}
 *   1 matmul:      data = {x, weight, out};     sizes = {1, m, n, k, threads}
 *                  out[i, j] = sum_l x[i, l] * w[j, l]  (w: n rows of k)
 *   2 embedding:   data = {table, ids, out};    sizes = {2, count, k, id_bytes}
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

static inline float half_to_float(const uint8_t *p) {
#if defined(__FLT16_MAX__)
    _Float16 h;
    memcpy(&h, p, 2);
    return (float)h;
#else
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0x1f) bits = sign | 0x7f800000u | (mantissa << 13);
    else if (exponent != 0) bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else if (mantissa == 0) bits = sign;
    else {
        exponent = 113;
        while (!(mantissa & 0x400)) { mantissa <<= 1; exponent--; }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
    float value;
    memcpy(&value, &bits, 4);
    return value;
#endif
}

/* One block's BLOCK_SIZE values into out. */
#if defined(FORMAT_Q4_0)
static inline void dequantize_block(const uint8_t *block, float *restrict out) {
    const float d = half_to_float(block);
    const uint8_t *qs = block + 2;
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        out[j] = (float)((int)(qs[j] & 0x0f) - 8) * d;
        out[j + 16] = (float)((int)(qs[j] >> 4) - 8) * d;
    }
}
#elif defined(FORMAT_Q4_1)
static inline void dequantize_block(const uint8_t *block, float *restrict out) {
    const float d = half_to_float(block), m = half_to_float(block + 2);
    const uint8_t *qs = block + 4;
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        out[j] = (float)(qs[j] & 0x0f) * d + m;
        out[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}
#elif defined(FORMAT_Q8_0)
static inline void dequantize_block(const uint8_t *block, float *restrict out) {
    const float d = half_to_float(block);
    const int8_t *qs = (const int8_t *)(block + 2);
#pragma omp simd
    for (int j = 0; j < 32; j++) out[j] = (float)qs[j] * d;
}
#elif defined(FORMAT_Q4_K)
static inline void dequantize_block(const uint8_t *block, float *restrict out) {
    const float d = half_to_float(block), dmin = half_to_float(block + 2);
    const uint8_t *scales = block + 4, *q = block + 16;
    for (int group = 0; group < 4; group++) {
        float factor[2], offset[2];
        for (int half = 0; half < 2; half++) {
            int j = 2 * group + half, scale, minimum;
            if (j < 4) {
                scale = scales[j] & 63;
                minimum = scales[j + 4] & 63;
            } else {
                scale = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
                minimum = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
            }
            factor[half] = d * (float)scale;
            offset[half] = dmin * (float)minimum;
        }
        float *target = out + 64 * group;
        const uint8_t *codes = q + 32 * group;
#pragma omp simd
        for (int l = 0; l < 32; l++) {
            target[l] = factor[0] * (float)(codes[l] & 0x0f) - offset[0];
            target[l + 32] = factor[1] * (float)(codes[l] >> 4) - offset[1];
        }
    }
}
#elif defined(FORMAT_Q6_K)
static inline void dequantize_block(const uint8_t *block, float *restrict out) {
    const uint8_t *low = block, *high = block + 128;
    const int8_t *scales = (const int8_t *)(block + 192);
    const float d = half_to_float(block + 208);
    for (int part = 0; part < 2; part++) {
        const uint8_t *ql = low + 64 * part, *qh = high + 32 * part;
        const int8_t *sc = scales + 8 * part;
        float *target = out + 128 * part;
        for (int sixteen = 0; sixteen < 2; sixteen++) {
            const float s0 = d * sc[sixteen], s2 = d * sc[sixteen + 2];
            const float s4 = d * sc[sixteen + 4], s6 = d * sc[sixteen + 6];
#pragma omp simd
            for (int l = 16 * sixteen; l < 16 * sixteen + 16; l++) {
                int q1 = (int)((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                target[l] = s0 * (float)q1;
                target[l + 32] = s2 * (float)q2;
                target[l + 64] = s4 * (float)q3;
                target[l + 96] = s6 * (float)q4;
            }
        }
    }
}
#else
#error "define one FORMAT_* before this source"
#endif

static void dequantize_row(const uint8_t *row, float *restrict out, int64_t k) {
    for (int64_t block = 0; block < k / BLOCK_SIZE; block++)
        dequantize_block(row + block * BLOCK_BYTES, out + block * BLOCK_SIZE);
}

static inline float dot(const float *restrict a, const float *restrict b, int64_t k) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t l = 0; l < k; l++) sum += a[l] * b[l];
    return sum;
}

/* Rows [first, last) of the weight: each is dequantized once into an L1-sized buffer, then
 * dotted with every activation row. */
static void matmul_rows(const float *x, const uint8_t *weight, float *out, int64_t m,
                        int64_t n, int64_t k, int64_t first, int64_t last, float *buffer) {
    const int64_t row_bytes = k / BLOCK_SIZE * BLOCK_BYTES;
    for (int64_t j = first; j < last; j++) {
        dequantize_row(weight + j * row_bytes, buffer, k);
        for (int64_t i = 0; i < m; i++) out[i * n + j] = dot(x + i * k, buffer, k);
    }
}

static void matmul(const float *x, const uint8_t *weight, float *out, int64_t m, int64_t n,
                   int64_t k, int64_t threads) {
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int count = omp_get_num_threads(), index = omp_get_thread_num();
        float *buffer = malloc(sizeof(float) * (size_t)k);
        int64_t share = (n + count - 1) / count;
        int64_t first = share * index, last = first + share < n ? first + share : n;
        if (buffer != NULL && first < last)
            matmul_rows(x, weight, out, m, n, k, first, last, buffer);
        free(buffer);
    }
#else
    (void)threads;
    float *buffer = malloc(sizeof(float) * (size_t)k);
    if (buffer != NULL) matmul_rows(x, weight, out, m, n, k, 0, n, buffer);
    free(buffer);
#endif
}

static void embedding(const uint8_t *table, const void *ids, float *out, int64_t count,
                      int64_t k, int64_t id_bytes) {
    const int64_t row_bytes = k / BLOCK_SIZE * BLOCK_BYTES;
    for (int64_t i = 0; i < count; i++) {
        int64_t id = id_bytes == 8 ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i];
        dequantize_row(table + id * row_bytes, out + i * k, k);
    }
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    switch (sizes[0]) {
    case 0:
        dequantize_row((const uint8_t *)data[0], (float *)data[1], sizes[1]);
        break;
    case 1:
        matmul((const float *)data[0], (const uint8_t *)data[1], (float *)data[2], sizes[1],
               sizes[2], sizes[3], sizes[4]);
        break;
    case 2:
        embedding((const uint8_t *)data[0], data[1], (float *)data[2], sizes[1], sizes[2],
                  sizes[3]);
        break;
    }
}
