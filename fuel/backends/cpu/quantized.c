/* Block-quantized (GGUF) kernels: dequantize, matmul of float32 rows by a quantized weight,
 * embedding lookup. One library per format: the including Python module defines FORMAT_*
 * (and BLOCK_SIZE, BLOCK_BYTES, ACTIVATION_CODE_MAX) before this text. Byte layouts are
 * ggml's.
 *
 * Entry: fuel_kernel(data, sizes, strides) with sizes[0] the operation:
 *   0 dequantize:  data = {weight, out};        sizes = {0, elements}
 *   1 matmul:      data = {x, weight, out};     sizes = {1, m, n, k, threads}
 *                  out[i, j] = sum_l x[i, l] * w[j, l]  (w: n rows of k)
 *                  q4_0, q4_1, q8_0: x is first rounded to 16-bit blocks of 32 (the registry's
 *                  round_int16_blocks: x ~ d * q, d = max|x| / ACTIVATION_CODE_MAX = 32767,
 *                  s = d * sum(q)) and each weight block's dot is integer arithmetic; the
 *                  other formats de-quantize each weight row to floats.
 *   2 embedding:   data = {table, ids, out};    sizes = {2, count, k, id_bytes}
 *   3 round:       data = {x, out};             sizes = {3, blocks}  (round_int16_blocks)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
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

/* Blocks of 32 activations rounded to 16 bits: block b is x ~ d * q with q = codes[32 b ..
 * 32 b + 31] (64 bytes, one aligned cache line) and {d, s} = scales[2 b, 2 b + 1], s = d * sum(q).
 */
typedef struct {
    int16_t *codes;
    float *scales;
} activation_blocks;

_Static_assert(ACTIVATION_CODE_MAX == 32767, "activation codes are int16_t");

/* count blocks of x into out: the registry's round_int16_blocks (d = max|x| / 32767, q =
 * round_half_even(x * (1 / d)), 0 where d is 0), as float32 steps in the decomposition's order.
 * |q| <= 32767: x * (1 / d) is within a few ulps of 32767 at the block's largest value. */
static void quantize_activations(const float *restrict x, activation_blocks out,
                                 int64_t count) {
    for (int64_t block = 0; block < count; block++) {
        const float *values = x + 32 * block;
        float largest = 0.0f;
#pragma omp simd reduction(max : largest)
        for (int l = 0; l < 32; l++) {
            float magnitude = fabsf(values[l]);
            largest = magnitude > largest ? magnitude : largest;
        }
        const float d = largest / (float)ACTIVATION_CODE_MAX, inverse = d > 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int l = 0; l < 32; l++) {
            int q = (int)rintf(values[l] * inverse);
            out.codes[32 * block + l] = (int16_t)q;
            sum += q;
        }
        out.scales[2 * block] = d;
        out.scales[2 * block + 1] = d * (float)sum;
    }
}

/* count blocks of x rounded to 16 bits, back as floats d * q (the operand the float paths
 * multiply). */
static void round_blocks(const float *restrict x, float *restrict out, int64_t count) {
    int16_t codes[32];
    float scales[2];
    const activation_blocks block = {codes, scales};
    for (int64_t b = 0; b < count; b++) {
        quantize_activations(x + 32 * b, block, 1);
#pragma omp simd
        for (int l = 0; l < 32; l++) out[32 * b + l] = (float)codes[l] * scales[0];
    }
}

#if defined(FORMAT_Q4_0) || defined(FORMAT_Q4_1) || defined(FORMAT_Q8_0)
#define INTEGER_DOT 1
/* Per block: q4_0 d_w * (d_x * sum(q_w q_x) - 8 s_x); q4_1 d_w d_x sum(q_w q_x) + m_w s_x;
 * q8_0 d_w d_x sum(q_w q_x). A tile is ROWS weight rows by ACTIVATIONS activation rows: each
 * weight block is loaded and unpacked once for all the tile's activation rows, each
 * activation block once for all its weight rows, with one accumulator per (weight row,
 * activation row) so no chain of dependent adds limits the loop. The weight codes widen to 16
 * bits and meet the activation codes in madd: each 32-bit lane sums four products, at most
 * 4 * 128 * 32767 < 2^24 in magnitude, so its conversion to float is exact. */
#if defined(FORMAT_Q4_0)
#define OFFSET_FACTOR (-8.0f)
#elif defined(FORMAT_Q4_1)
#define OFFSET_FACTOR 1.0f
#else
#define OFFSET_FACTOR 0.0f
#endif

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define PREFETCH_BYTES 1024
/* One weight block's 32 codes as 16-bit integers in two vectors, codes 0-15 then 16-31:
 * unsigned nibbles (q4) or signed bytes (q8). */
static inline __attribute__((always_inline)) void block_codes(const uint8_t *block,
                                                              __m256i *low, __m256i *high) {
#if defined(FORMAT_Q8_0)
    *low = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(block + 2)));
    *high = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(block + 18)));
#else
    /* byte l holds code l (low nibble) and code l + 16 (high nibble) */
    const __m256i bytes = _mm256_cvtepu8_epi16(
        _mm_loadu_si128((const __m128i *)(block + BLOCK_BYTES - 16)));
    *low = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0f));
    *high = _mm256_srli_epi16(bytes, 4);
#endif
}

/* The block's float16 scales as floats: {d, m} (q4_1) or d in every lane. */
static inline __attribute__((always_inline)) __m128 block_scales(const uint8_t *block) {
#if defined(FORMAT_Q4_1)
    int32_t bits;
    memcpy(&bits, block, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
#else
    int16_t bits;
    memcpy(&bits, block, 2);
    return _mm_cvtph_ps(_mm_set1_epi16(bits));
#endif
}

static inline __attribute__((always_inline)) void integer_tile(
    const uint8_t *weight, int64_t row_bytes, activation_blocks x, int64_t blocks,
    float *out, int64_t n, const int rows, const int activations) {
    __m256 sums[4][4];
    __m128 offsets[4][4];
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            sums[r][i] = _mm256_setzero_ps();
            offsets[r][i] = _mm_setzero_ps();
        }
    /* The tiles run through the weight in address order, their rows side by side: the
     * hardware prefetcher sees short interleaved streams, so the next tile's bytes (plus
     * PREFETCH_BYTES) are requested in order, a tile ahead. */
    const uint8_t *ahead = weight + rows * row_bytes + PREFETCH_BYTES;
    for (int64_t b = 0; b < blocks; b++) {
        __m256i low[4], high[4];
        __m128 scales[4];
        for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        for (int r = 0; r < rows; r++) {
            const uint8_t *block = weight + r * row_bytes + b * BLOCK_BYTES;
            block_codes(block, &low[r], &high[r]);
            scales[r] = block_scales(block);
        }
        for (int i = 0; i < activations; i++) {
            const int16_t *q = x.codes + 32 * (i * blocks + b);
            const __m256i q_low = _mm256_load_si256((const __m256i *)q);
            const __m256i q_high = _mm256_load_si256((const __m256i *)(q + 16));
            /* {d_x, s_x, 0, 0} */
            const __m128 ds = _mm_castpd_ps(
                _mm_load_sd((const double *)(const void *)(x.scales + 2 * (i * blocks + b))));
            for (int r = 0; r < rows; r++) {
                const __m256i pairs = _mm256_add_epi32(_mm256_madd_epi16(low[r], q_low),
                                                       _mm256_madd_epi16(high[r], q_high));
                const __m256 products = _mm256_cvtepi32_ps(pairs);
                /* {d_w d_x, m_w s_x} (q4_1) or {d_w d_x, d_w s_x} */
                const __m128 scaled = _mm_mul_ps(scales[r], ds);
                sums[r][i] = _mm256_fmadd_ps(products, _mm256_broadcastss_ps(scaled), sums[r][i]);
                offsets[r][i] = _mm_add_ps(offsets[r][i], scaled);
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            __m128 half = _mm_add_ps(_mm256_castps256_ps128(sums[r][i]),
                                     _mm256_extractf128_ps(sums[r][i], 1));
            half = _mm_add_ps(half, _mm_movehl_ps(half, half));
            half = _mm_add_ss(half, _mm_movehdup_ps(half));
            out[i * n + r] = _mm_cvtss_f32(half) +
                             OFFSET_FACTOR * _mm_cvtss_f32(_mm_movehdup_ps(offsets[r][i]));
        }
}
#else
/* Portable: the same sums, one block's integer dot at a time. */
static inline __attribute__((always_inline)) void integer_tile(
    const uint8_t *weight, int64_t row_bytes, activation_blocks x, int64_t blocks,
    float *out, int64_t n, const int rows, const int activations) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            const uint8_t *row = weight + r * row_bytes;
            const int16_t *q = x.codes + 32 * i * blocks;
            const float *ds = x.scales + 2 * i * blocks;
            float sum = 0.0f, offsets = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t *block = row + b * BLOCK_BYTES;
                const float scale = half_to_float(block);
                int products = 0;
#if defined(FORMAT_Q8_0)
                const int8_t *codes = (const int8_t *)(block + 2);
#pragma omp simd reduction(+ : products)
                for (int l = 0; l < 32; l++) products += codes[l] * q[32 * b + l];
#else
                const uint8_t *codes = block + BLOCK_BYTES - 16;
#pragma omp simd reduction(+ : products)
                for (int l = 0; l < 16; l++)
                    products += (codes[l] & 0x0f) * q[32 * b + l] +
                                (codes[l] >> 4) * q[32 * b + l + 16];
#endif
                sum += (float)products * (scale * ds[2 * b]);
#if defined(FORMAT_Q4_1)
                offsets += half_to_float(block + 2) * ds[2 * b + 1];
#else
                offsets += scale * ds[2 * b + 1];
#endif
            }
            out[i * n + r] = sum + OFFSET_FACTOR * offsets;
        }
}
#endif

/* Activation rows from row i on (rows of blocks blocks). */
static inline activation_blocks activation_rows(activation_blocks x, int64_t i, int64_t blocks) {
    const activation_blocks rows = {x.codes + 32 * i * blocks, x.scales + 2 * i * blocks};
    return rows;
}

/* Weight rows [first, last) against the m quantized activation rows: four weight rows at a
 * time for one activation row (decode), else one weight row at a time for up to four
 * activation rows, so a weight row is read from memory once for all m (short prompts). */
static void integer_matmul_rows(activation_blocks x, const uint8_t *weight, float *out,
                                int64_t m, int64_t n, int64_t k, int64_t first, int64_t last) {
    const int64_t blocks = k / 32, row_bytes = blocks * BLOCK_BYTES;
    int64_t j = first;
    if (m == 1) {
        for (; j + 4 <= last; j += 4)
            integer_tile(weight + j * row_bytes, row_bytes, x, blocks, out + j, n, 4, 1);
        for (; j < last; j++)
            integer_tile(weight + j * row_bytes, row_bytes, x, blocks, out + j, n, 1, 1);
        return;
    }
    for (; j < last; j++) {
        const uint8_t *row = weight + j * row_bytes;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4)
            integer_tile(row, row_bytes, activation_rows(x, i, blocks), blocks, out + i * n + j,
                         n, 1, 4);
        const activation_blocks rest = activation_rows(x, i, blocks);
        switch (m - i) {
        case 3: integer_tile(row, row_bytes, rest, blocks, out + i * n + j, n, 1, 3);
            break;
        case 2: integer_tile(row, row_bytes, rest, blocks, out + i * n + j, n, 1, 2);
            break;
        case 1: integer_tile(row, row_bytes, rest, blocks, out + i * n + j, n, 1, 1);
            break;
        }
    }
}
#endif

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

#define CHUNKS_PER_THREAD 4
static void matmul(const float *x, const uint8_t *weight, float *out, int64_t m, int64_t n,
                   int64_t k, int64_t threads) {
#if defined(INTEGER_DOT)
    const size_t count = (size_t)(m * (k / 32));
    activation_blocks quantized = {aligned_alloc(64, 64 * count), malloc(8 * count)};
    if (quantized.codes == NULL || quantized.scales == NULL) {
        free(quantized.codes);
        free(quantized.scales);
        return;
    }
    quantize_activations(x, quantized, (int64_t)count);
#if defined(_OPENMP)
    /* Chunks of output rows (a multiple of 4, about 8 per thread) taken in turn: a thread
     * that another process delays leaves its work to the others. */
    int64_t chunk = (n / (threads * CHUNKS_PER_THREAD) + 3) / 4 * 4;
    chunk = chunk < 16 ? 16 : chunk;
    const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t first = c * chunk, last = first + chunk < n ? first + chunk : n;
        integer_matmul_rows(quantized, weight, out, m, n, k, first, last);
    }
#else
    (void)threads;
    integer_matmul_rows(quantized, weight, out, m, n, k, 0, n);
#endif
    free(quantized.codes);
    free(quantized.scales);
    return;
#endif
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
    case 3:
        round_blocks((const float *)data[0], (float *)data[1], sizes[1]);
        break;
    }
}
