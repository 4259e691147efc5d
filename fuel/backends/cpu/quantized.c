/* Block-quantized (GGUF) kernels: dequantize, matmul of float32 rows by a quantized weight,
 * embedding lookup. One library per format: the including Python module defines FORMAT_*
 * (and BLOCK_SIZE, BLOCK_BYTES, ACTIVATION_CODE_MAX) before this text. Byte layouts are
 * ggml's.
 *
 * Entry: fuel_kernel(data, sizes, strides) with sizes[0] the operation:
 *   0 dequantize:  data = {weight, out};        sizes = {0, elements}
 *   1 matmul:      data = {x, weight, out};     sizes = {1, m, n, k, threads}
 *                  out[i, j] = sum_l x[i, l] * w[j, l]  (w: n rows of k)
 *                  block formats: x is first rounded to 16-bit blocks of 32 (the registry's
 *                  round_int16_blocks: x ~ d * q, d = max|x| / ACTIVATION_CODE_MAX = 32767,
 *                  s = d * sum(q)) and each weight chunk's dot is integer arithmetic, scaled
 *                  by the block's (sub-block's) scales; float weights (f16, bf16) are
 *                  converted a row at a time and multiplied as floats. The decode shape
 *                  (m = 1) of the K formats and iq4_xs runs decode_tile (activation codes
 *                  split in bytes), of the blocks of 32 values integer_tile on two weight
 *                  rows.
 *   2 embedding:   data = {table, ids, out};    sizes = {2, count, k, id_bytes}
 *   3 round:       data = {x, out};             sizes = {3, blocks}  (round_int16_blocks)
 */
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
 * 32 b + 31] (64 bytes, one aligned cache line) and {d, s, s_low, s_high} = scales[4 b .. 4 b +
 * 3], s = d * sum(q), s_low and s_high the same over its first and last 16 codes.
 */
typedef struct {
    int16_t *codes;
    float *scales;
    /* the same values by kind (for the block formats of several chunks): d[b], s[b],
     * halves[2 b] = s_low, halves[2 b + 1] = s_high; NULL where not wanted */
    float *d, *s, *halves;
} activation_blocks;

_Static_assert(ACTIVATION_CODE_MAX == 32767, "activation codes are int16_t");

/* count blocks of x into out: the registry's round_int16_blocks (d = max|x| / 32767, q =
 * round_half_even(x * (1 / d)), 0 where d is 0), as float32 steps in the decomposition's order.
 * |q| <= 32767: x * (1 / d) is within a few ulps of 32767 at the block's largest value. */
static inline void store_block_scales(activation_blocks out, int64_t block, float d, int low,
                                      int high) {
    out.scales[4 * block] = d;
    out.scales[4 * block + 1] = d * (float)(low + high);
    out.scales[4 * block + 2] = d * (float)low;
    out.scales[4 * block + 3] = d * (float)high;
    if (out.d != NULL) {
        out.d[block] = d;
        out.s[block] = out.scales[4 * block + 1];
        out.halves[2 * block] = out.scales[4 * block + 2];
        out.halves[2 * block + 1] = out.scales[4 * block + 3];
    }
}

#if USE_AVX2
/* The same float32 steps in vector steps (d by division, 1 / d by division, the products
 * rounded half to even by cvtps, the default mode, as rintf). Three passes over up to 64
 * blocks, so no block's chain (largest -> two divisions -> codes) waits on the last's: the
 * largest magnitudes, the divisions 8 blocks a vector, the codes. About 3x faster than the
 * scalar loops below (a short prompt's launches round their rows on one thread first). */
static void quantize_activations(const float *restrict x, activation_blocks out,
                                 int64_t count) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    float largest[64] __attribute__((aligned(32))), d[64] __attribute__((aligned(32))),
        inverse[64] __attribute__((aligned(32)));
    for (int64_t start = 0; start < count; start += 64) {
        const int64_t run = count - start < 64 ? count - start : 64;
        for (int64_t b = 0; b < run; b++) {
            const float *values = x + 32 * (start + b);
            const __m256 top = _mm256_max_ps(
                _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(values)),
                              _mm256_andnot_ps(sign, _mm256_loadu_ps(values + 8))),
                _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(values + 16)),
                              _mm256_andnot_ps(sign, _mm256_loadu_ps(values + 24))));
            __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
            half = _mm_max_ps(half, _mm_movehl_ps(half, half));
            largest[b] = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
        }
        for (int64_t b = run; b < (run + 7) / 8 * 8; b++) largest[b] = 0.0f;
        for (int64_t b = 0; b < run; b += 8) {
            const __m256 scale = _mm256_div_ps(_mm256_load_ps(largest + b),
                                               _mm256_set1_ps((float)ACTIVATION_CODE_MAX));
            const __m256 positive = _mm256_cmp_ps(scale, _mm256_setzero_ps(), _CMP_GT_OQ);
            _mm256_store_ps(d + b, scale);
            _mm256_store_ps(inverse + b, _mm256_and_ps(
                positive, _mm256_div_ps(_mm256_set1_ps(1.0f), scale)));
        }
        for (int64_t b = 0; b < run; b++) {
            const float *values = x + 32 * (start + b);
            int16_t *codes = out.codes + 32 * (start + b);
            const __m256 factor = _mm256_set1_ps(inverse[b]);
            __m256i q[4];
            for (int j = 0; j < 4; j++) /* cvtps rounds half to even (the default mode), as rintf */
                q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(values + 8 * j), factor));
            /* packs interleaves 128-bit lanes: 64-bit quarters 0, 2, 1, 3 restore the order */
            _mm256_storeu_si256((__m256i *)codes,
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
            _mm256_storeu_si256((__m256i *)(codes + 16),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8));
            /* the halves' sums: lanes 0-3 of (q0 + q1) + its lanes 4-7, the same for q2 + q3 */
            const __m256i first = _mm256_add_epi32(q[0], q[1]), second = _mm256_add_epi32(q[2], q[3]);
            __m128i both = _mm_hadd_epi32(
                _mm_add_epi32(_mm256_castsi256_si128(first), _mm256_extracti128_si256(first, 1)),
                _mm_add_epi32(_mm256_castsi256_si128(second), _mm256_extracti128_si256(second, 1)));
            both = _mm_hadd_epi32(both, both); /* {low, high, low, high} */
            store_block_scales(out, start + b, d[b], _mm_cvtsi128_si32(both),
                               _mm_extract_epi32(both, 1));
        }
    }
}
#else
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
        int low = 0, high = 0;
#pragma omp simd reduction(+ : low)
        for (int l = 0; l < 16; l++) {
            int q = (int)rintf(values[l] * inverse);
            out.codes[32 * block + l] = (int16_t)q;
            low += q;
        }
#pragma omp simd reduction(+ : high)
        for (int l = 16; l < 32; l++) {
            int q = (int)rintf(values[l] * inverse);
            out.codes[32 * block + l] = (int16_t)q;
            high += q;
        }
        store_block_scales(out, block, d, low, high);
    }
}
#endif

/* count blocks of x rounded to 16 bits, back as floats d * q (the operand the float paths
 * multiply). */
static void round_blocks(const float *restrict x, float *restrict out, int64_t count) {
    int16_t codes[32 * 64] __attribute__((aligned(64)));
    float scales[4 * 64];
    const activation_blocks blocks = {codes, scales, NULL, NULL, NULL};
    for (int64_t first = 0; first < count; first += 64) { /* 64 blocks at a time */
        const int64_t run = count - first < 64 ? count - first : 64;
        quantize_activations(x + 32 * first, blocks, run);
        for (int64_t b = 0; b < run; b++) {
#pragma omp simd
            for (int l = 0; l < 32; l++)
                out[32 * (first + b) + l] = (float)codes[32 * b + l] * scales[4 * b];
        }
    }
}

#if defined(FORMAT_Q4_0) || defined(FORMAT_Q4_1) || defined(FORMAT_Q8_0) || \
    defined(FORMAT_IQ4_NL) || defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
#define INTEGER_DOT 1
#if defined(FORMAT_Q4_1) || defined(FORMAT_Q5_1)
#define BLOCK_MINIMUM 1 /* {d, m} float16 at the block's start: value = d q + m */
#endif
/* Per block: q4_0 d_w * (d_x * sum(q_w q_x) - 8 s_x); q4_1, q5_1 d_w d_x sum(q_w q_x) +
 * m_w s_x; q8_0, iq4_nl, q5_0 d_w d_x sum(q_w q_x) (q5_0's codes less 16). A tile is ROWS weight rows by ACTIVATIONS activation rows: each
 * weight block is loaded and unpacked once for all the tile's activation rows, each
 * activation block once for all its weight rows, with one accumulator per (weight row,
 * activation row) so no chain of dependent adds limits the loop. The weight codes widen to 16
 * bits and meet the activation codes in madd: each 32-bit lane sums four products, at most
 * 4 * 128 * 32767 < 2^24 in magnitude, so its conversion to float is exact. */
#if defined(FORMAT_Q4_0)
#define OFFSET_FACTOR (-8.0f)
#elif defined(BLOCK_MINIMUM)
#define OFFSET_FACTOR 1.0f
#else
#define OFFSET_FACTOR 0.0f
#endif

#if USE_AVX2
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 1024
#endif
/* One weight block's 32 codes as 16-bit integers in two vectors, codes 0-15 then 16-31:
 * unsigned nibbles (q4) or signed bytes (q8). */
static inline __attribute__((always_inline)) void block_codes(const uint8_t *block,
                                                              __m256i *low, __m256i *high) {
#if defined(FORMAT_Q8_0)
    *low = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(block + 2)));
    *high = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(block + 18)));
#elif defined(FORMAT_IQ4_NL) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    !defined(NO_AVX512)
    /* each 16-bit lane's low 4 bits pick a value of the table (vpermw) */
    const __m256i table = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)IQ4_VALUES));
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(block + 2)));
    *low = _mm256_permutexvar_epi16(bytes, table);
    *high = _mm256_permutexvar_epi16(_mm256_srli_epi16(bytes, 4), table);
#elif (defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && !defined(NO_AVX512)
    /* the nibbles as q4's, the fifth bits (bit l of the 32 at qh: code l) added under masks;
     * q5_0's codes less 16 where the bit is clear */
    const uint8_t *qh = block + (BLOCK_BYTES == 22 ? 2 : 4);
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(qh + 4)));
    const __m256i low_codes = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0f));
    const __m256i high_codes = _mm256_srli_epi16(bytes, 4);
    const __m256i sixteen = _mm256_set1_epi16(16);
    /* one 32-bit mask, its upper half shifted down in the mask unit */
#if defined(FORMAT_Q5_0)
    const __mmask32 mask = _cvtu32_mask32(~bits);
#else
    const __mmask32 mask = _cvtu32_mask32(bits);
#endif
    const __mmask16 low_mask = (__mmask16)mask, high_mask = (__mmask16)_kshiftri_mask32(mask, 16);
#if defined(FORMAT_Q5_0)
    *low = _mm256_mask_sub_epi16(low_codes, low_mask, low_codes, sixteen);
    *high = _mm256_mask_sub_epi16(high_codes, high_mask, high_codes, sixteen);
#else
    *low = _mm256_mask_add_epi16(low_codes, low_mask, low_codes, sixteen);
    *high = _mm256_mask_add_epi16(high_codes, high_mask, high_codes, sixteen);
#endif
#elif defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
    chunk_vectors(block, 0, low, high);
#elif defined(FORMAT_IQ4_NL)
    const __m128i table = _mm_loadu_si128((const __m128i *)IQ4_VALUES);
    const __m128i bytes = _mm_loadu_si128((const __m128i *)(block + 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    *low = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(bytes, mask)));
    *high = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask)));
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
#if defined(BLOCK_MINIMUM)
    int32_t bits;
    memcpy(&bits, block, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
#else
    int16_t bits;
    memcpy(&bits, block, 2);
    return _mm_cvtph_ps(_mm_set1_epi16(bits));
#endif
}

/* madd(a, b) + madd(c, d): the same int32 lanes in one VNNI step where there is one */
static inline __attribute__((always_inline)) __m256i pair_dot(__m256i a, __m256i b, __m256i c,
                                                              __m256i d) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && !defined(NO_AVX512)
    return _mm256_dpwssd_epi32(_mm256_madd_epi16(a, b), c, d);
#elif defined(__AVXVNNI__) && !defined(NO_AVX512)
    return _mm256_dpwssd_avx_epi32(_mm256_madd_epi16(a, b), c, d);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(a, b), _mm256_madd_epi16(c, d));
#endif
}

#if defined(FORMAT_IQ4_NL) || defined(FORMAT_Q5_0)
/* no offsets: a block's factor d_w d_x is its whole float work (q8_0 keeps the common steps,
 * bit for bit those of quantized_rows.c's tile) */
#define NO_OFFSETS 1
#endif

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
#if defined(NO_OFFSETS)
        __m256 scales[4];
#else
        __m128 scales[4];
#endif
        for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        for (int r = 0; r < rows; r++) {
            const uint8_t *block = weight + r * row_bytes + b * BLOCK_BYTES;
            block_codes(block, &low[r], &high[r]);
#if defined(NO_OFFSETS)
            int16_t bits;
            memcpy(&bits, block, 2);
            scales[r] = _mm256_cvtph_ps(_mm_set1_epi16(bits));
#else
            scales[r] = block_scales(block);
#endif
        }
        for (int i = 0; i < activations; i++) {
            const int16_t *q = x.codes + 32 * (i * blocks + b);
            const __m256i q_low = _mm256_load_si256((const __m256i *)q);
            const __m256i q_high = _mm256_load_si256((const __m256i *)(q + 16));
#if defined(NO_OFFSETS)
            const __m256 d = _mm256_broadcast_ss(x.scales + 4 * (i * blocks + b));
#else
            /* {d_x, s_x, 0, 0} */
            const __m128 ds = _mm_castpd_ps(
                _mm_load_sd((const double *)(const void *)(x.scales + 4 * (i * blocks + b))));
#endif
            for (int r = 0; r < rows; r++) {
                const __m256 products = _mm256_cvtepi32_ps(
                    pair_dot(low[r], q_low, high[r], q_high));
#if defined(NO_OFFSETS)
                sums[r][i] = _mm256_fmadd_ps(products, _mm256_mul_ps(scales[r], d), sums[r][i]);
#else
                /* {d_w d_x, m_w s_x} (q4_1) or {d_w d_x, d_w s_x} */
                const __m128 scaled = _mm_mul_ps(scales[r], ds);
                sums[r][i] = _mm256_fmadd_ps(products, _mm256_broadcastss_ps(scaled), sums[r][i]);
                offsets[r][i] = _mm_add_ps(offsets[r][i], scaled);
#endif
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            __m128 half = _mm_add_ps(_mm256_castps256_ps128(sums[r][i]),
                                     _mm256_extractf128_ps(sums[r][i], 1));
            half = _mm_add_ps(half, _mm_movehl_ps(half, half));
            half = _mm_add_ss(half, _mm_movehdup_ps(half));
#if defined(NO_OFFSETS)
            (void)offsets;
            out[i * n + r] = _mm_cvtss_f32(half);
#else
            out[i * n + r] = _mm_cvtss_f32(half) +
                             OFFSET_FACTOR * _mm_cvtss_f32(_mm_movehdup_ps(offsets[r][i]));
#endif
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
            const float *ds = x.scales + 4 * i * blocks;
            float sum = 0.0f, offsets = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t *block = row + b * BLOCK_BYTES;
                const float scale = half_to_float(block);
                int products = 0;
#if defined(FORMAT_Q8_0)
                const int8_t *codes = (const int8_t *)(block + 2);
#pragma omp simd reduction(+ : products)
                for (int l = 0; l < 32; l++) products += codes[l] * q[32 * b + l];
#elif defined(FORMAT_IQ4_NL)
                const uint8_t *codes = block + 2;
                for (int l = 0; l < 16; l++)
                    products += IQ4_VALUES[codes[l] & 0x0f] * q[32 * b + l] +
                                IQ4_VALUES[codes[l] >> 4] * q[32 * b + l + 16];
#elif defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
                int16_t codes[32];
                chunk_codes(block, 0, codes);
                for (int l = 0; l < 32; l++) products += codes[l] * q[32 * b + l];
#else
                const uint8_t *codes = block + BLOCK_BYTES - 16;
#pragma omp simd reduction(+ : products)
                for (int l = 0; l < 16; l++)
                    products += (codes[l] & 0x0f) * q[32 * b + l] +
                                (codes[l] >> 4) * q[32 * b + l + 16];
#endif
                sum += (float)products * (scale * ds[4 * b]);
#if defined(BLOCK_MINIMUM)
                offsets += half_to_float(block + 2) * ds[4 * b + 1];
#else
                offsets += scale * ds[4 * b + 1];
#endif
            }
            out[i * n + r] = sum + OFFSET_FACTOR * offsets;
        }
}
#endif

#elif defined(CHUNKED)
#define INTEGER_DOT 1
/* Per chunk of 32 (activation block x ~ d_x q_x, weight chunk = scale * q - minimum per half):
 * scale d_x sum(q q_x) - minimum s_x, the sums over each half where the halves have their own
 * scales. The tile is as the 32-value formats' (one accumulator per weight row and activation
 * row, each weight chunk unpacked once for all activation rows); a block's header (its
 * scales as floats) is decoded once per tile row. A half's integer sum is at most 16 * 127 *
 * 32767 < 2^27 in magnitude (a chunk's, 2^28): exact in int32, rounded once by the conversion
 * to float. */
#if USE_AVX2
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 1024
#endif
/* Per block, tile row r and activation row i: the chunks' (halves') factors scale * d_x as a
 * vector (stored, then broadcast per chunk) and the offsets' dot minimum . s_x as one
 * vector fma. */
static inline __attribute__((always_inline)) void integer_tile(
    const uint8_t *weight, int64_t row_bytes, activation_blocks x, int64_t blocks,
    float *out, int64_t n, const int rows, const int activations) {
    __m256 sums[4][4], offsets[4][4];
    float factors[4][4][8 * SCALES] __attribute__((aligned(32)));
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            sums[r][i] = _mm256_setzero_ps();
            offsets[r][i] = _mm256_setzero_ps();
        }
    const uint8_t *ahead = weight + rows * row_bytes + PREFETCH_BYTES;
#if CHUNKS == 1
    /* blocks of 32 (q5_0, q5_1, iq4_nl): one scale (and offset) per block, as the 32-value
     * formats' tile: the factor d_w d_x broadcast, the offsets summed as scalars */
    float minimums[4][4];
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) minimums[r][i] = 0.0f;
    (void)factors;
    for (int64_t b = 0; b < blocks; b++) {
        for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        __m256i low[4], high[4];
        block_header h[4];
        for (int r = 0; r < rows; r++) {
            const uint8_t *block = weight + r * row_bytes + b * BLOCK_BYTES;
            header(block, &h[r]);
            chunk_vectors(block, 0, &low[r], &high[r]);
        }
        for (int i = 0; i < activations; i++) {
            const int64_t at = i * blocks + b;
            const int16_t *q = x.codes + 32 * at;
            const __m256i q_low = _mm256_load_si256((const __m256i *)q);
            const __m256i q_high = _mm256_load_si256((const __m256i *)(q + 16));
            const float d = x.d[at];
            for (int r = 0; r < rows; r++) {
                const __m256i pairs = _mm256_add_epi32(_mm256_madd_epi16(low[r], q_low),
                                                       _mm256_madd_epi16(high[r], q_high));
                sums[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pairs),
                                             _mm256_set1_ps(h[r].scale[0] * d), sums[r][i]);
#if MINIMUM
                minimums[r][i] += h[r].minimum[0] * x.s[at];
#endif
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++)
            offsets[r][i] = _mm256_setr_ps(minimums[r][i], 0, 0, 0, 0, 0, 0, 0);
#else
    for (int64_t b = 0; b < blocks; b++) {
        for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        for (int r = 0; r < rows; r++) {
            vector_header h;
            header_vectors(weight + r * row_bytes + b * BLOCK_BYTES, &h);
            for (int i = 0; i < activations; i++) {
                const int64_t at = (i * blocks + b) * CHUNKS;
#if CHUNKS == 1
                const __m256 d = _mm256_set1_ps(x.d[at]);
                _mm256_store_ps(factors[r][i], _mm256_mul_ps(h.scale[0], d));
#if MINIMUM
                offsets[r][i] = _mm256_fmadd_ps(h.minimum[0], _mm256_set1_ps(x.s[at]),
                                                offsets[r][i]);
#endif
#elif SCALES == 1
                _mm256_store_ps(factors[r][i], _mm256_mul_ps(h.scale[0], _mm256_loadu_ps(x.d + at)));
#if MINIMUM
                offsets[r][i] = _mm256_fmadd_ps(h.minimum[0], _mm256_loadu_ps(x.s + at),
                                                offsets[r][i]);
#endif
#else
                const __m256 d = _mm256_loadu_ps(x.d + at);
                _mm256_store_ps(factors[r][i], _mm256_mul_ps(h.scale[0], _mm256_permutevar8x32_ps(
                    d, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))));
                _mm256_store_ps(factors[r][i] + 8, _mm256_mul_ps(h.scale[1], _mm256_permutevar8x32_ps(
                    d, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7))));
#if MINIMUM
                offsets[r][i] = _mm256_fmadd_ps(h.minimum[0], _mm256_loadu_ps(x.halves + 2 * at),
                                                offsets[r][i]);
                offsets[r][i] = _mm256_fmadd_ps(h.minimum[1], _mm256_loadu_ps(x.halves + 2 * at + 8),
                                                offsets[r][i]);
#endif
#endif
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < CHUNKS; c++) {
            __m256i low[4], high[4];
            for (int r = 0; r < rows; r++)
                chunk_vectors(weight + r * row_bytes + b * BLOCK_BYTES, c, &low[r], &high[r]);
            for (int i = 0; i < activations; i++) {
                const int16_t *q = x.codes + 32 * ((i * blocks + b) * CHUNKS + c);
                const __m256i q_low = _mm256_load_si256((const __m256i *)q);
                const __m256i q_high = _mm256_load_si256((const __m256i *)(q + 16));
                for (int r = 0; r < rows; r++) {
#if SCALES == 2
                    sums[r][i] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(low[r], q_low)),
                        _mm256_broadcast_ss(factors[r][i] + 2 * c), sums[r][i]);
                    sums[r][i] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(high[r], q_high)),
                        _mm256_broadcast_ss(factors[r][i] + 2 * c + 1), sums[r][i]);
#else
                    const __m256i pairs = _mm256_add_epi32(_mm256_madd_epi16(low[r], q_low),
                                                           _mm256_madd_epi16(high[r], q_high));
                    sums[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pairs),
                                                 _mm256_broadcast_ss(factors[r][i] + c),
                                                 sums[r][i]);
#endif
                }
            }
        }
    }
#endif
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            const __m256 total = _mm256_sub_ps(sums[r][i], offsets[r][i]);
            __m128 half = _mm_add_ps(_mm256_castps256_ps128(total),
                                     _mm256_extractf128_ps(total, 1));
            half = _mm_add_ps(half, _mm_movehl_ps(half, half));
            half = _mm_add_ss(half, _mm_movehdup_ps(half));
            out[i * n + r] = _mm_cvtss_f32(half);
        }
}
#else
/* Portable: the same sums, one chunk's integer dot at a time. */
static inline __attribute__((always_inline)) void integer_tile(
    const uint8_t *weight, int64_t row_bytes, activation_blocks x, int64_t blocks,
    float *out, int64_t n, const int rows, const int activations) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < activations; i++) {
            float sum = 0.0f, offsets = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t *block = weight + r * row_bytes + b * BLOCK_BYTES;
                block_header h;
                header(block, &h);
                for (int c = 0; c < CHUNKS; c++) {
                    const int64_t at = (i * blocks + b) * CHUNKS + c;
                    const int16_t *q = x.codes + 32 * at;
                    const float *ds = x.scales + 4 * at;
                    int16_t codes[32];
                    chunk_codes(block, c, codes);
                    int low = 0, high = 0;
                    for (int l = 0; l < 16; l++) {
                        low += codes[l] * q[l];
                        high += codes[l + 16] * q[l + 16];
                    }
#if SCALES == 2
                    sum += (float)low * (h.scale[2 * c] * ds[0]) +
                           (float)high * (h.scale[2 * c + 1] * ds[0]);
                    offsets += h.minimum[2 * c] * ds[2] + h.minimum[2 * c + 1] * ds[3];
#else
                    sum += (float)(low + high) * (h.scale[c] * ds[0]);
                    offsets += h.minimum[c] * ds[1];
#endif
                }
            }
            out[i * n + r] = sum - offsets;
        }
}
#endif
#endif

#if defined(INTEGER_DOT)
/* Activation rows from row i on (rows of blocks blocks of 32). */
static inline activation_blocks activation_rows(activation_blocks x, int64_t i, int64_t blocks) {
    activation_blocks rows = {x.codes + 32 * i * blocks, x.scales + 4 * i * blocks, NULL, NULL,
                              NULL};
    if (x.d != NULL) {
        rows.d = x.d + i * blocks;
        rows.s = x.s + i * blocks;
        rows.halves = x.halves + 2 * i * blocks;
    }
    return rows;
}

/* Weight rows [first, last) against the m quantized activation rows: two weight rows at a
 * time for one activation row (decode), else one weight row at a time for up to four
 * activation rows, so a weight row is read from memory once for all m (short prompts). */
static void integer_matmul_rows(activation_blocks x, const uint8_t *weight, float *out,
                                int64_t m, int64_t n, int64_t k, int64_t first, int64_t last) {
    const int64_t blocks = k / BLOCK_SIZE, row_bytes = blocks * BLOCK_BYTES, x_blocks = k / 32;
    int64_t j = first;
    if (m == 1) {
        /* two rows side by side: at the decode shape the weight streams from memory, and
         * more interleaved streams than two slowed the reads (q6_k to half) */
        for (; j + 2 <= last; j += 2)
            integer_tile(weight + j * row_bytes, row_bytes, x, blocks, out + j, n, 2, 1);
        for (; j < last; j++)
            integer_tile(weight + j * row_bytes, row_bytes, x, blocks, out + j, n, 1, 1);
        return;
    }
    for (; j < last; j++) {
        const uint8_t *row = weight + j * row_bytes;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4)
            integer_tile(row, row_bytes, activation_rows(x, i, x_blocks), blocks, out + i * n + j,
                         n, 1, 4);
        const activation_blocks rest = activation_rows(x, i, x_blocks);
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
#if defined(FLOAT_WEIGHTS) && USE_AVX2
/* One activation row by one float16 (bfloat16) weight row of k values: 32 at a time, four
 * accumulators. */
static inline __m256 weight_floats(const uint8_t *p) {
    const __m128i bits = _mm_loadu_si128((const __m128i *)p);
#if defined(FORMAT_F16_BLOCKS)
    return _mm256_cvtph_ps(bits);
#else
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
#endif
}

#ifndef FLOAT_PREFETCH
#define FLOAT_PREFETCH 2048
#endif
static float float_row_dot(const float *x, const uint8_t *row, int64_t k) {
    __m256 sums[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps()};
    for (int64_t l = 0; l < k; l += 32) {
        /* one weight line a step, requested FLOAT_PREFETCH bytes ahead (the next rows' on
         * the row's last steps): one thread streamed f16 at 9.8 GB/s on the hardware
         * prefetcher alone, 12.8 with it (Xeon, 134 MB) */
        _mm_prefetch((const char *)row + 2 * l + FLOAT_PREFETCH, _MM_HINT_T0);
        for (int part = 0; part < 4; part++)
            sums[part] = _mm256_fmadd_ps(weight_floats(row + 2 * (l + 8 * part)),
                                         _mm256_loadu_ps(x + l + 8 * part), sums[part]);
    }
    const __m256 total = _mm256_add_ps(_mm256_add_ps(sums[0], sums[1]),
                                       _mm256_add_ps(sums[2], sums[3]));
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_movehdup_ps(half));
    return _mm_cvtss_f32(half);
}
#endif

static void matmul_rows(const float *x, const uint8_t *weight, float *out, int64_t m,
                        int64_t n, int64_t k, int64_t first, int64_t last, float *buffer) {
    const int64_t row_bytes = k / BLOCK_SIZE * BLOCK_BYTES;
#if defined(FLOAT_WEIGHTS) && USE_AVX2
    if (m == 1) {  /* decode: each weight row is read once, converted in registers */
        for (int64_t j = first; j < last; j++) out[j] = float_row_dot(x, weight + j * row_bytes, k);
        return;
    }
#endif
    for (int64_t j = first; j < last; j++) {
        dequantize_row(weight + j * row_bytes, buffer, k);
        for (int64_t i = 0; i < m; i++) out[i * n + j] = dot(x + i * k, buffer, k);
    }
}

#define CHUNKS_PER_THREAD 4
static void matmul(const float *x, const uint8_t *weight, float *out, int64_t m, int64_t n,
                   int64_t k, int64_t threads) {
#if defined(SPLIT_DECODE)
    if (m == 1) {
        const int64_t count = k / 32;
        /* dd, d, s, halves: 6 floats per block of 32, rounded up to whole cache lines */
        split_blocks split = {aligned_alloc(64, 96 * (size_t)count), NULL, NULL, NULL, NULL,
                              aligned_alloc(64, (24 * (size_t)count + 63) / 64 * 64)};
        if (split.bytes == NULL || split.dd == NULL) {
            free(split.bytes);
            free(split.dd);
            return;
        }
        split.corrections = (int32_t *)(split.bytes + 64 * count);
        split.d = split.dd + 2 * count;
        split.s = split.d + count;
        split.halves = split.s + count;
        split_activations(x, split, count);
#if defined(_OPENMP)
        int64_t chunk = (n / (threads * CHUNKS_PER_THREAD) + 3) / 4 * 4;
        chunk = chunk < 16 ? 16 : chunk;
        const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && chunks > 1)
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t first = c * chunk, last = first + chunk < n ? first + chunk : n;
            decode_rows(split, weight, out, k, first, last);
        }
#else
        (void)threads;
        decode_rows(split, weight, out, k, 0, n);
#endif
        free(split.bytes);
        free(split.dd);
        return;
    }
#endif
#if defined(INTEGER_DOT)
    const size_t count = (size_t)(m * (k / 32));
    activation_blocks quantized = {aligned_alloc(64, 64 * count), malloc(32 * count), NULL, NULL,
                                   NULL};
    if (quantized.codes == NULL || quantized.scales == NULL) {
        free(quantized.codes);
        free(quantized.scales);
        return;
    }
#if defined(CHUNKED)
    quantized.d = quantized.scales + 4 * count;
    quantized.s = quantized.d + count;
    quantized.halves = quantized.s + count;
#endif
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
    case 4: { /* de-quantize split over threads: sizes = {4, values, threads} */
        const int64_t blocks = sizes[1] / BLOCK_SIZE, threads = sizes[2];
        const uint8_t *source = (const uint8_t *)data[0];
        float *target = (float *)data[1];
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (int64_t part = 0; part < threads; part++) {
            const int64_t first = blocks * part / threads, last = blocks * (part + 1) / threads;
            dequantize_row(source + first * BLOCK_BYTES, target + first * BLOCK_SIZE,
                           (last - first) * BLOCK_SIZE);
        }
        break;
    }
    }
}
