/* quantized_matmul_int8 (the registry's serving precision) on the 32-value integer formats
 * q4_0, q4_1 and q8_0: activations rounded per block of 32 to 8-bit codes (round_int8_blocks:
 * d = max|x| / 127, q = round_half_even(x * (1 / d)), 0 where d is 0; llama.cpp's q8_0 rule
 * with the scale kept in float32), then dotted with the weight's codes in integers.
 * The including Python module (quantized_int8.py) defines FORMAT_<NAME> and BLOCK_BYTES.
 *
 * Entry: fuel_kernel(data, sizes, strides): data = {x (m, k) float32, weight (n, k) blocks,
 * out (m, n) float32}; sizes = {m, n, k, threads}.
 *
 * Every output (row i, column r) is computed by the same float steps, in the same order, by
 * every tile and build (the decode tile of one activation row, the rows tile, AVX-512 VNNI,
 * AVX2, portable C), so a row's result never depends on which rows share its launch, on the
 * thread count or on the tile remainder:
 *   for each block b in order:
 *     dot  = sum_j w_j * q_j                       (exact int32; w the weight's signed codes)
 *     acc  = fma((float)dot, d_w * d_x, acc)       (d_w * d_x rounded to float32 first)
 *     acc  = fma(m_w, d_x * (float)sum_j q_j, acc) (q4_1's minimum only)
 *   out = acc.
 * The integer dot: vpdpbusd (u8 by s8, 64 multiply-adds an instruction) where the build has
 * AVX-512 VNNI, with the weight codes made unsigned (q4_0: the stored nibble, q8_0: w + 128)
 * and the offset taken back as C * sum_j q_j; on AVX2 maddubs + madd (q8_0 by the sign trick);
 * portable C multiplies the codes. The dot's 8 lanes of a (row, activation) pair are summed
 * across 8 pairs at once (a horizontal-add tree), so one float conversion and one fma serve
 * eight outputs: over activation rows in the rows tile, over weight rows in the decode tile.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__) && !defined(PORTABLE)
#include <immintrin.h>
#define USE_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && !defined(NO_AVX512)
#define USE_VNNI 1
#else
#define USE_VNNI 0
#endif
#else
#define USE_AVX2 0
#define USE_VNNI 0
#endif

#if defined(FORMAT_Q4_0)
#define CODES_AT 2
#define NIBBLES 1
#define HAS_MIN 0
#define OFFSET 8 /* weight code = stored nibble - 8 */
#elif defined(FORMAT_Q4_1)
#define CODES_AT 4
#define NIBBLES 1
#define HAS_MIN 1
#define OFFSET 0
#elif defined(FORMAT_Q8_0)
#define CODES_AT 2
#define NIBBLES 0
#define HAS_MIN 0
#define OFFSET (USE_VNNI ? 128 : 0) /* vpdpbusd takes w + 128 (unsigned) */
#else
#error "define FORMAT_Q4_0, FORMAT_Q4_1 or FORMAT_Q8_0"
#endif
#define CODE_MAX 127
#define GROUP 8 /* outputs summed per fma: activation rows (rows tile), weight rows (decode) */

static inline float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if USE_AVX2
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f,
             mantissa = h & 0x3ff, bits;
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

/* The activations rounded: codes of row i's block b at codes + 32 * (i * blocks + b); per
 * block, block-major (b * stride + i, zero past the m rows): d = d_x, s = d_x * sum q (q4_1),
 * c = OFFSET * sum q (the offset the unsigned weight codes add). */
typedef struct {
    int8_t *codes;
    float *d, *s;
    int32_t *c;
    int64_t blocks, stride;
} activations;

static void round_rows(const float *x, int64_t m, int64_t k, activations a) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t b = 0; b < a.blocks; b++) {
            const float *v = x + i * k + 32 * b;
            float largest = 0.0f;
            for (int j = 0; j < 32; j++) largest = fmaxf(largest, fabsf(v[j]));
            const float d = largest / (float)CODE_MAX, inverse = d > 0.0f ? 1.0f / d : 0.0f;
            int8_t *q = a.codes + 32 * (i * a.blocks + b);
            int32_t sum = 0;
            for (int j = 0; j < 32; j++) {
                const int code = (int)nearbyintf(v[j] * inverse);
                q[j] = (int8_t)code;
                sum += code;
            }
            a.d[b * a.stride + i] = d;
            a.s[b * a.stride + i] = d * (float)sum;
            a.c[b * a.stride + i] = OFFSET * sum;
        }
}

#if USE_AVX2
/* A weight block's 32 codes as the unsigned bytes the dot takes (in code order j = 0..31). */
static inline __m256i weight_bytes(const uint8_t *block) {
#if NIBBLES
    const __m128i packed = _mm_loadu_si128((const __m128i *)(block + CODES_AT));
    const __m128i mask = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), mask),
                            _mm_and_si128(packed, mask));
#else
    const __m256i codes = _mm256_loadu_si256((const __m256i *)(block + CODES_AT));
#if USE_VNNI
    return _mm256_xor_si256(codes, _mm256_set1_epi8((char)0x80));
#else
    return codes; /* signed; the dot takes the sign trick */
#endif
#endif
}

/* 8 lanes whose sum is sum_j u_j * q_j (q8_0 on AVX2: sum_j w_j * q_j). */
static inline __m256i block_dot(__m256i u, __m256i q) {
#if USE_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q);
#elif NIBBLES
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(u), _mm256_sign_epi8(q, u)),
                             _mm256_set1_epi16(1));
#endif
}

/* Lane i: the sum of v[i]'s 8 lanes (exact integers). */
static inline __m256i sum_eight(const __m256i v[GROUP]) {
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* The rows tile: weight row r against activation rows [first, first + count) (count <= 8). */
static inline __attribute__((always_inline)) void rows_group(
    const uint8_t *row, activations a, int64_t first, int count, float *out, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; b++) {
        const uint8_t *block = row + b * BLOCK_BYTES;
        const __m256i u = weight_bytes(block);
        __m256i dots[GROUP];
        for (int i = 0; i < GROUP; i++)
            dots[i] = i < count ? block_dot(u, _mm256_loadu_si256(
                (const __m256i *)(a.codes + 32 * ((first + i) * a.blocks + b))))
                                : _mm256_setzero_si256();
        __m256i sums = sum_eight(dots);
        const int64_t at = b * a.stride + first;
#if OFFSET
        sums = _mm256_sub_epi32(sums, _mm256_loadu_si256((const __m256i *)(a.c + at)));
#endif
        const __m256 factor = _mm256_mul_ps(_mm256_set1_ps(half_at(block)),
                                            _mm256_loadu_ps(a.d + at));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), factor, acc);
#if HAS_MIN
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(block + 2)), _mm256_loadu_ps(a.s + at), acc);
#endif
    }
    float values[GROUP];
    _mm256_storeu_ps(values, acc);
    for (int i = 0; i < count; i++) out[(first + i) * n] = values[i];
}

/* The decode tile: weight rows [r, r + count) (count <= 8, rows row_bytes apart) against
 * activation row 0. */
static inline __attribute__((always_inline)) void decode_group(
    const uint8_t *rows, int64_t row_bytes, int count, activations a, float *out) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; b++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(a.codes + 32 * b));
        __m256i dots[GROUP];
        float d_w[GROUP], m_w[GROUP];
        for (int r = 0; r < GROUP; r++) {
            if (r < count) {
                const uint8_t *block = rows + r * row_bytes + b * BLOCK_BYTES;
                dots[r] = block_dot(weight_bytes(block), q);
                d_w[r] = half_at(block);
                m_w[r] = HAS_MIN ? half_at(block + 2) : 0.0f;
            } else {
                dots[r] = _mm256_setzero_si256();
                d_w[r] = m_w[r] = 0.0f;
            }
        }
        (void)m_w;
        __m256i sums = sum_eight(dots);
#if OFFSET
        sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(a.c[b * a.stride]));
#endif
        const __m256 factor = _mm256_mul_ps(_mm256_loadu_ps(d_w),
                                            _mm256_set1_ps(a.d[b * a.stride]));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), factor, acc);
#if HAS_MIN
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(m_w), _mm256_set1_ps(a.s[b * a.stride]), acc);
#endif
    }
    float values[GROUP];
    _mm256_storeu_ps(values, acc);
    for (int r = 0; r < count; r++) out[r] = values[r];
}
#else
/* Portable C: each output by the steps above, one at a time. */
static inline int weight_code(const uint8_t *block, int j) {
#if NIBBLES
    const uint8_t byte = block[CODES_AT + (j & 15)];
    return (j < 16 ? byte & 0x0f : byte >> 4) - (OFFSET ? OFFSET : 0);
#else
    return (int)(int8_t)block[CODES_AT + j];
#endif
}

static void one_output(const uint8_t *row, activations a, int64_t i, float *out) {
    float acc = 0.0f;
    for (int64_t b = 0; b < a.blocks; b++) {
        const uint8_t *block = row + b * BLOCK_BYTES;
        const int8_t *q = a.codes + 32 * (i * a.blocks + b);
        int32_t dot = 0;
        for (int j = 0; j < 32; j++) dot += weight_code(block, j) * q[j];
        const float factor = half_at(block) * a.d[b * a.stride + i];
        acc = fmaf((float)dot, factor, acc);
#if HAS_MIN
        acc = fmaf(half_at(block + 2), a.s[b * a.stride + i], acc);
#endif
    }
    *out = acc;
}
#endif

int fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const float *x = (const float *)data[0];
    const uint8_t *weight = (const uint8_t *)data[1];
    float *out = (float *)data[2];
    const int64_t m = sizes[0], n = sizes[1], k = sizes[2];
    int threads = (int)sizes[3];
    if (threads < 1) threads = 1;
    activations a;
    a.blocks = k / 32;
    a.stride = (m + GROUP - 1) / GROUP * GROUP;
    const int64_t row_bytes = a.blocks * BLOCK_BYTES;
    const size_t per_block = (size_t)(a.blocks * a.stride);
    a.codes = (int8_t *)malloc((size_t)(m * k) + 64);
    a.d = (float *)calloc(per_block, sizeof(float));
    a.s = (float *)calloc(per_block, sizeof(float));
    a.c = (int32_t *)calloc(per_block, sizeof(int32_t));
    if (!a.codes || !a.d || !a.s || !a.c) {
        free(a.codes); free(a.d); free(a.s); free(a.c);
        return 1;
    }
    round_rows(x, m, k, a);
#if USE_AVX2
    if (m == 1) {
        const int64_t groups = (n + GROUP - 1) / GROUP;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (int64_t g = 0; g < groups; g++) {
            const int64_t r = g * GROUP;
            const int count = (int)(n - r < GROUP ? n - r : GROUP);
            decode_group(weight + r * row_bytes, row_bytes, count, a, out + r);
        }
    } else {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (int64_t r = 0; r < n; r++)
            for (int64_t first = 0; first < m; first += GROUP) {
                const int count = (int)(m - first < GROUP ? m - first : GROUP);
                rows_group(weight + r * row_bytes, a, first, count, out + r, n);
            }
    }
#else
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < m; i++) one_output(weight + r * row_bytes, a, i, out + i * n + r);
#endif
    free(a.codes); free(a.d); free(a.s); free(a.c);
    return 0;
}
