/* quantized_matmul_int8 (the registry's serving precision) on the 32-value integer formats
 * q4_0, q4_1 and q8_0: activations rounded per block of 32 to 8-bit codes (round_int8_blocks:
 * d = max|x| / 127, q = round_half_even(x * (1 / d)), 0 where d is 0; llama.cpp's q8_0 rule
 * with the scale kept in float32), then dotted with the weight's codes in integers.
 * The including Python module (quantized_int8.py) defines FORMAT_<NAME> and BLOCK_BYTES.
 *
 * Entry: fuel_kernel(data, sizes, strides): data = {x (m, k) float32, weight (n, k) blocks,
 * out (m, n) float32}; sizes = {m, n, k, threads}.
 *
 * Every output (activation row i, weight row r) is computed by the same float steps in the
 * same order by every tile and build (the decode tile of one activation row, the rows tile,
 * AVX-512 VNNI, AVX2, portable C), so a row's result never depends on which rows share its
 * launch, on the thread count or on the tile remainder:
 *   for each block b in order:
 *     dot = sum_j w_j * q_j                        (exact int32; w the weight's signed codes)
 *     acc = fma((float)dot, d_w * d_x, acc)        (d_w * d_x rounded to float32 first)
 *     acc = fma(m_w, d_x * (float)sum_j q_j, acc)  (q4_1's minimum only)
 *   out = acc.
 * The integer dots: vpdpbusd (u8 by s8, 32 multiply-adds a 256-bit instruction) where the
 * build has AVX-512 VNNI, the weight codes made unsigned (q4_0: the stored nibble, q8_0:
 * w + 128) and the offset taken back as C * sum_j q_j; on AVX2 maddubs + madd (q8_0 by the
 * sign trick); portable C multiplies the codes.
 *   - rows tile (2+ activation rows): the activations are stored transposed per tile of 8
 *     rows (lane i of dword vector g holds row i's codes 4g..4g+3), so a weight block's dword
 *     g is broadcast and one dot per dword gives 8 rows' whole-block sums in 8 lanes: no
 *     horizontal sums, one conversion, multiply and fma per 8 outputs; 4 weight rows a tile.
 *   - decode tile (1 row): 4 weight rows' lane dots summed across by a horizontal-add tree.
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

static inline float half_at(const uint8_t *p) {
#if USE_AVX2
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
#else
    return half_to_float(p); /* half_float.h, placed before this text */
#endif
}

/* The activations rounded, in tiles of 8 rows (rows past m are zeros): per tile t and block
 * b (index TB = t * blocks + b): codes[TB] the 8 rows transposed (dword g of row i at
 * 4 * (8 * g + i)), and per row i: d[8 TB + i] = d_x, s = d_x * sum q, c = OFFSET * sum q. */
typedef struct {
    int8_t *codes, *row; /* row: a lone row's codes in order (decode), else NULL */
    float *d, *s;
    int32_t *c;
    int64_t blocks;
} activations;

/* Row i's block b rounded: codes q[0..31] (in order), its d and code sum; the rest of
 * round_rows stores them where the tiles want them. */
static inline void round_block(const float *v, int8_t *q, float *d_out, int32_t *sum_out) {
#if USE_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8),
                 v2 = _mm256_loadu_ps(v + 16), v3 = _mm256_loadu_ps(v + 24);
    __m256 big = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                               _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(big), _mm256_extractf128_ps(big, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_movehdup_ps(half));
    const float largest = _mm_cvtss_f32(half);
    const float d = largest / (float)CODE_MAX, inverse = d > 0.0f ? 1.0f / d : 0.0f;
    const __m256 scale = _mm256_set1_ps(inverse);
    /* cvtps rounds half to even (the default rounding mode), as nearbyintf does */
    const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, scale));
    const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, scale));
    const __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, scale));
    const __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, scale));
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(
        packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3));
    __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
    *sum_out = _mm_cvtsi128_si32(sum);
    *d_out = d;
#else
    float largest = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float size = fabsf(v[j]);
        largest = size > largest ? size : largest;
    }
    const float d = largest / (float)CODE_MAX, inverse = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < 32; j++) {
        const int code = (int)nearbyintf(v[j] * inverse);
        q[j] = (int8_t)code;
        sum += code;
    }
    *sum_out = sum;
    *d_out = d;
#endif
}

static void round_rows(const float *x, int64_t m, int64_t k, activations a) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t b = 0; b < a.blocks; b++) {
            const int64_t tb = (i / 8) * a.blocks + b, lane = i % 8;
            int8_t codes[32];
            int8_t *q = a.row ? a.row + 32 * b : codes;
            float d;
            int32_t sum;
            round_block(x + i * k + 32 * b, q, &d, &sum);
            if (!a.row) { /* the transposed tile: dword g of row i at 4 * (8 * g + i) */
                int8_t *tile = a.codes + 256 * tb;
                for (int g = 0; g < 8; g++) memcpy(tile + 4 * (8 * g + lane), q + 4 * g, 4);
            }
            a.d[8 * tb + lane] = d;
            a.s[8 * tb + lane] = d * (float)sum;
            a.c[8 * tb + lane] = OFFSET * sum;
        }
}

#if USE_AVX2
/* A weight block's 32 codes as the bytes the dot takes (in code order j = 0..31): unsigned
 * (nibbles; q8_0 + 128 with VNNI) or q8_0's signed codes on AVX2 (the sign trick). */
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
    return codes;
#endif
#endif
}

/* sums + per lane the dot of w's and q's 4-byte groups (w as weight_bytes gives them). */
static inline __m256i add_dots(__m256i sums, __m256i w, __m256i q) {
#if USE_VNNI
    return _mm256_dpbusd_epi32(sums, w, q);
#elif NIBBLES
    return _mm256_add_epi32(sums, _mm256_madd_epi16(_mm256_maddubs_epi16(w, q),
                                                    _mm256_set1_epi16(1)));
#else
    return _mm256_add_epi32(sums, _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w)), _mm256_set1_epi16(1)));
#endif
}

/* The rows tile: weight rows [0, count) (count <= TILE_WEIGHT, row_bytes apart) by the
 * activation tile t (8 rows, `acts` of them real); out[i * n + r]. */
#define TILE_WEIGHT 4
#define PREFETCH_BYTES 1024
static inline __attribute__((always_inline)) void rows_tile(
    const uint8_t *rows, int64_t row_bytes, const int count, activations a, int64_t t,
    int acts, float *out, int64_t n) {
    __m256 acc[TILE_WEIGHT];
    for (int r = 0; r < count; r++) acc[r] = _mm256_setzero_ps();
    const uint8_t *ahead = rows + count * row_bytes + PREFETCH_BYTES; /* as decode_rows */
    for (int64_t b = 0; b < a.blocks; b++) {
        if (t == 0)
            for (int line = 0; line < count * BLOCK_BYTES; line += 64)
                _mm_prefetch((const char *)ahead + b * count * BLOCK_BYTES + line, _MM_HINT_T0);
        const int64_t tb = t * a.blocks + b;
        const int8_t *tile = a.codes + 256 * tb;
        int32_t w[TILE_WEIGHT][8] __attribute__((aligned(32)));
        __m256i sums[TILE_WEIGHT];
        for (int r = 0; r < count; r++) {
            _mm256_store_si256((__m256i *)w[r], weight_bytes(rows + r * row_bytes + b * BLOCK_BYTES));
            sums[r] = _mm256_setzero_si256();
        }
        for (int g = 0; g < 8; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(tile + 32 * g));
            for (int r = 0; r < count; r++)
                sums[r] = add_dots(sums[r], _mm256_set1_epi32(w[r][g]), q);
        }
        const __m256 d_x = _mm256_loadu_ps(a.d + 8 * tb);
#if OFFSET
        const __m256i c = _mm256_loadu_si256((const __m256i *)(a.c + 8 * tb));
#endif
#if HAS_MIN
        const __m256 s = _mm256_loadu_ps(a.s + 8 * tb);
#endif
        for (int r = 0; r < count; r++) {
            const uint8_t *block = rows + r * row_bytes + b * BLOCK_BYTES;
#if OFFSET
            sums[r] = _mm256_sub_epi32(sums[r], c);
#endif
            const __m256 factor = _mm256_mul_ps(_mm256_set1_ps(half_at(block)), d_x);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r]), factor, acc[r]);
#if HAS_MIN
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_at(block + 2)), s, acc[r]);
#endif
        }
    }
    for (int r = 0; r < count; r++) {
        float values[8];
        _mm256_storeu_ps(values, acc[r]);
        for (int i = 0; i < acts; i++) out[(8 * t + i) * n + r] = values[i];
    }
}

/* Lane i: the sum of v[i]'s 8 lanes (exact integers). */
static inline __m256i sum_eight(const __m256i v[8]) {
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* The decode tile: weight rows [0, count) (count <= 8, row_bytes apart) by activation row 0
 * (lane 0 of tile 0): out[r]. */
static inline __attribute__((always_inline)) void decode_rows(
    const uint8_t *rows, int64_t row_bytes, const int count, activations a, float *out) {
    __m256 acc = _mm256_setzero_ps();
    /* the bytes two groups on (plus PREFETCH_BYTES) requested in order: the hardware
     * prefetcher sees short interleaved streams (as in quantized.c's decode tile); two groups
     * ahead, not one: SmolLM2's 49152-row output matmul streamed from memory 1.15 ms, not 1.35 */
    const uint8_t *ahead = rows + 2 * count * row_bytes + PREFETCH_BYTES;
    for (int64_t b = 0; b < a.blocks; b++) {
        for (int line = 0; line < count * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * count * BLOCK_BYTES + line, _MM_HINT_T0);
        const __m256i q = _mm256_loadu_si256((const __m256i *)(a.row + 32 * b));
        __m256i dots[8];
        uint16_t d_bits[8] = {0}, m_bits[8] = {0};
        for (int r = 0; r < 8; r++) {
            if (r < count) {
                const uint8_t *block = rows + r * row_bytes + b * BLOCK_BYTES;
                dots[r] = add_dots(_mm256_setzero_si256(), weight_bytes(block), q);
                memcpy(&d_bits[r], block, 2);
                if (HAS_MIN) memcpy(&m_bits[r], block + 2, 2);
            } else {
                dots[r] = _mm256_setzero_si256();
            }
        }
        (void)m_bits;
        const __m256 d_w = _mm256_cvtph_ps(_mm_setr_epi16(
            d_bits[0], d_bits[1], d_bits[2], d_bits[3], d_bits[4], d_bits[5], d_bits[6], d_bits[7]));
        __m256i sums = sum_eight(dots);
#if OFFSET
        sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(a.c[8 * b]));
#endif
        const __m256 factor = _mm256_mul_ps(d_w, _mm256_set1_ps(a.d[8 * b]));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), factor, acc);
#if HAS_MIN
        const __m256 m_w = _mm256_cvtph_ps(_mm_setr_epi16(
            m_bits[0], m_bits[1], m_bits[2], m_bits[3], m_bits[4], m_bits[5], m_bits[6], m_bits[7]));
        acc = _mm256_fmadd_ps(m_w, _mm256_set1_ps(a.s[8 * b]), acc);
#endif
    }
    float values[8];
    _mm256_storeu_ps(values, acc);
    for (int r = 0; r < count; r++) out[r] = values[r];
}
#else
/* Portable C: each output by the steps above, one at a time. */
static inline int weight_code(const uint8_t *block, int j) {
#if NIBBLES
    const uint8_t byte = block[CODES_AT + (j & 15)];
    return (j < 16 ? byte & 0x0f : byte >> 4) - (HAS_MIN ? 0 : 8);
#else
    return (int)(int8_t)block[CODES_AT + j];
#endif
}

static void one_output(const uint8_t *row, activations a, int64_t i, float *out) {
    float acc = 0.0f;
    for (int64_t b = 0; b < a.blocks; b++) {
        const uint8_t *block = row + b * BLOCK_BYTES;
        const int64_t tb = (i / 8) * a.blocks + b, lane = i % 8;
        const int8_t *tile = a.codes + 256 * tb;
        int32_t dot = 0;
        for (int j = 0; j < 32; j++)
            dot += weight_code(block, j) * tile[4 * (8 * (j / 4) + lane) + j % 4];
        acc = fmaf((float)dot, half_at(block) * a.d[8 * tb + lane], acc);
#if HAS_MIN
        acc = fmaf(half_at(block + 2), a.s[8 * tb + lane], acc);
#endif
    }
    *out = acc;
}
#endif

/* Outputs of weight rows [first, last) for every activation row. */
#define CHUNKS_PER_THREAD 4
#define DECODE_ROWS 4
static void output_rows(const uint8_t *weight, int64_t row_bytes, activations a, int64_t m,
                        float *out, int64_t n, int64_t first, int64_t last) {
#if USE_AVX2
    if (m == 1) {
        /* 4 weight rows a group (8 streamed no faster from memory: 1.2-1.5 ms against
         * 1.0-1.1 for SmolLM2's output matmul); the adds of the zero lanes are exact */
        for (int64_t r = first; r < last; r += DECODE_ROWS) {
            const uint8_t *rows = weight + r * row_bytes;
            if (last - r >= DECODE_ROWS) decode_rows(rows, row_bytes, DECODE_ROWS, a, out + r);
            else decode_rows(rows, row_bytes, (int)(last - r), a, out + r);
        }
        return;
    }
    const int64_t tiles = (m + 7) / 8;
    for (int64_t r = first; r < last; r += TILE_WEIGHT) {
        const uint8_t *rows = weight + r * row_bytes;
        for (int64_t t = 0; t < tiles; t++) {
            const int acts = (int)(m - 8 * t < 8 ? m - 8 * t : 8);
            if (last - r >= TILE_WEIGHT)
                rows_tile(rows, row_bytes, TILE_WEIGHT, a, t, acts, out + r, n);
            else if (last - r == 3) rows_tile(rows, row_bytes, 3, a, t, acts, out + r, n);
            else if (last - r == 2) rows_tile(rows, row_bytes, 2, a, t, acts, out + r, n);
            else rows_tile(rows, row_bytes, 1, a, t, acts, out + r, n);
        }
    }
#else
    for (int64_t r = first; r < last; r++)
        for (int64_t i = 0; i < m; i++) one_output(weight + r * row_bytes, a, i, out + i * n + r);
#endif
}

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
    const int64_t tiles = (m + 7) / 8, row_bytes = a.blocks * BLOCK_BYTES;
    const size_t count = (size_t)(tiles * a.blocks);
    a.codes = (int8_t *)calloc(count, 256);
    a.d = (float *)calloc(count, 8 * sizeof(float));
    a.s = (float *)calloc(count, 8 * sizeof(float));
    a.c = (int32_t *)calloc(count, 8 * sizeof(int32_t));
    /* a lone row (decode) keeps its codes in order instead of the transposed tile */
    a.row = m == 1 && USE_AVX2 ? (int8_t *)malloc((size_t)k) : NULL;
    if (!a.codes || !a.d || !a.s || !a.c || (m == 1 && USE_AVX2 && !a.row)) {
        free(a.codes); free(a.d); free(a.s); free(a.c); free(a.row);
        return 1;
    }
    round_rows(x, m, k, a);
    /* Chunks of output rows (a multiple of 8, about CHUNKS_PER_THREAD per thread) taken in
     * turn: a thread that another process delays leaves its work to the others (as in
     * quantized.c). Each output is computed alike in any chunk. */
    int64_t chunk = (n / (threads * CHUNKS_PER_THREAD) + 7) / 8 * 8;
    chunk = chunk < 16 ? 16 : chunk;
    const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t first = c * chunk, last = first + chunk < n ? first + chunk : n;
        output_rows(weight, row_bytes, a, m, out, n, first, last);
    }
    free(a.codes); free(a.d); free(a.s); free(a.c); free(a.row);
    return 0;
}
