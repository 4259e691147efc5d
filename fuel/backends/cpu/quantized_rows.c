/* Many-row quantized matmul (batched decode steps, short prompt chunks) for the 32-value
 * integer formats (q4_0, q4_1, q8_0, iq4_nl: q4_0's layout, its nibbles looked up in the
 * non-linear table; q5_0, q5_1: q4's nibbles and a fifth bit per code). This text follows a format's whole quantized library
 * (quantized_formats.c, then quantized.c with its entry renamed fuel_quantized_kernel), so it
 * reuses that library's activation rounding (quantize_activations), block readers
 * (block_codes, block_scales) and layouts, and computes the very same numbers as its integer
 * tile: bit for bit the same output for any row count, thread count or tile.
 *
 * Entry: fuel_kernel(data, sizes, strides), the library's contract; operation 1 (matmul) runs
 * here, every other operation (and a build without AVX2) goes to fuel_quantized_kernel.
 *
 * Two tiles: the wide tile (AVX-512 with VNNI and byte permutes: quantized_rows_wide.c, placed
 * before this text) and, on AVX2 alone and below its WIDE_MIN rows, this one. Why another tile: quantized.c's many-row tile is one weight row by four activation rows,
 * so each activation block it loads serves one weight row, the block's scale products are
 * formed one (row, activation) pair at a time, and the offsets ride in a vector per pair.
 * Here a tile is ROWS_WEIGHT (2) weight rows by up to ROWS_ACTS (8) activation rows with one
 * 8-lane accumulator per pair (4 x 4, 3 x 8, 4 x 8 and 1 x 16 measured no faster on
 * SmolLM2's shapes):
 *   - each weight block is unpacked once for the tile's activation rows and each activation
 *     block loaded once for its weight rows;
 *   - the pair's integer dot is madd + madd + add, or madd + dpwssd where AVX512-VNNI is
 *     there (the same 32-bit lane sums: lane j holds codes 2j, 2j+1, 16+2j, 17+2j);
 *   - the scale products d_w * d_x of a weight block and all the tile's activation rows are
 *     one vector multiply (the activation scales are transposed once per launch, block-major)
 *     and so are the offsets m_w * s_x (a vector of sums per weight row).
 * Every float operation (of either tile) is the integer tile's, in its order: per pair and lane,
 * sum = fma(float(lanes), d_w * d_x, sum) over the blocks; offsets = offsets + m_w * s_x (or
 * d_w * s_x); out = horizontal sum (the same pairing) + OFFSET_FACTOR * offsets.
 */
#if defined(INTEGER_DOT) && USE_AVX2 && (!defined(CHUNKED) || defined(FORMAT_IQ4_NL) || \
                                          defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1))
#ifndef ROWS_WEIGHT
#define ROWS_WEIGHT 2 /* weight rows per tile */
#endif
#ifndef ACT_VECTORS
#define ACT_VECTORS 1 /* vectors of 8 activation rows per tile */
#endif
#define ROWS_ACTS (8 * ACT_VECTORS) /* activation rows per tile */

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define PAIR_SUMS(low, q_low, high, q_high) \
    _mm256_dpwssd_epi32(_mm256_madd_epi16(low, q_low), high, q_high)
#else
#define PAIR_SUMS(low, q_low, high, q_high) \
    _mm256_add_epi32(_mm256_madd_epi16(low, q_low), _mm256_madd_epi16(high, q_high))
#endif

/* Activation scales block-major: d[b * stride + i] = d_x, s[b * stride + i] = s_x of
 * activation row i's block b (stride: the rows rounded up to ROWS_ACTS, zero past them). */
typedef struct {
    const int16_t *codes; /* row i's block b at codes + 32 * (i * blocks + b) */
    const float *d, *s;
    int64_t blocks, stride;
} rows_activations;

static inline __attribute__((always_inline)) void rows_tile(
    const uint8_t *weight, int64_t row_bytes, rows_activations x, int64_t first_act,
    float *out, int64_t n, const int rows, const int acts) {
    __m256 sums[ROWS_WEIGHT][ROWS_ACTS];
    const int vectors = (acts + 7) / 8;
    __m256 offsets[ROWS_WEIGHT][ACT_VECTORS];
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < vectors; v++) offsets[r][v] = _mm256_setzero_ps();
        for (int i = 0; i < acts; i++) sums[r][i] = _mm256_setzero_ps();
    }
    const int64_t blocks = x.blocks;
    const uint8_t *ahead = weight + rows * row_bytes + PREFETCH_BYTES;
    for (int64_t b = 0; b < blocks; b++) {
        if (first_act == 0)
            for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
                _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        __m256i low[ROWS_WEIGHT], high[ROWS_WEIGHT];
        float factors[ROWS_WEIGHT][ROWS_ACTS] __attribute__((aligned(32)));
        for (int r = 0; r < rows; r++) {
            const uint8_t *block = weight + r * row_bytes + b * BLOCK_BYTES;
            block_codes(block, &low[r], &high[r]);
            /* {d, m} (q4_1) or d in every lane */
            const __m128 scales = block_scales(block);
            const __m256 d_w = _mm256_broadcastss_ps(scales);
            const __m256 m_w = _mm256_broadcastss_ps(_mm_movehdup_ps(scales));
            for (int v = 0; v < vectors; v++) {
                const float *at = x.d + b * x.stride + first_act + 8 * v;
                _mm256_store_ps(factors[r] + 8 * v, _mm256_mul_ps(d_w, _mm256_loadu_ps(at)));
#if !defined(NO_OFFSETS)
                offsets[r][v] = _mm256_add_ps(offsets[r][v], _mm256_mul_ps(
                    m_w, _mm256_loadu_ps(x.s + b * x.stride + first_act + 8 * v)));
#else
                (void)m_w;
#endif
            }
        }
        for (int i = 0; i < acts; i++) {
            const int16_t *q = x.codes + 32 * ((first_act + i) * blocks + b);
            const __m256i q_low = _mm256_load_si256((const __m256i *)q);
            const __m256i q_high = _mm256_load_si256((const __m256i *)(q + 16));
            for (int r = 0; r < rows; r++) {
                const __m256i pairs = PAIR_SUMS(low[r], q_low, high[r], q_high);
                sums[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pairs),
                                             _mm256_broadcast_ss(&factors[r][i]), sums[r][i]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float offset[ROWS_ACTS] __attribute__((aligned(32)));
        for (int v = 0; v < vectors; v++) _mm256_store_ps(offset + 8 * v, offsets[r][v]);
        for (int i = 0; i < acts; i++) {
            __m128 half = _mm_add_ps(_mm256_castps256_ps128(sums[r][i]),
                                     _mm256_extractf128_ps(sums[r][i], 1));
            half = _mm_add_ps(half, _mm_movehl_ps(half, half));
            half = _mm_add_ss(half, _mm_movehdup_ps(half));
#if defined(NO_OFFSETS)
            out[i * n + r] = _mm_cvtss_f32(half);
#else
            out[i * n + r] = _mm_cvtss_f32(half) + OFFSET_FACTOR * offset[i];
#endif
        }
    }
}

/* A tile of `rows` weight rows (a constant) against activation rows [0, m) in groups. */
static inline __attribute__((always_inline)) void rows_weight_tile(
    const uint8_t *weight, int64_t row_bytes, rows_activations x, int64_t m, float *out,
    int64_t n, const int rows) {
    int64_t i = 0;
    for (; i + ROWS_ACTS <= m; i += ROWS_ACTS)
        rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, ROWS_ACTS);
    switch (m - i) {
#if ACT_VECTORS > 1
    case 15: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 15); break;
    case 14: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 14); break;
    case 13: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 13); break;
    case 12: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 12); break;
    case 11: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 11); break;
    case 10: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 10); break;
    case 9: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 9); break;
    case 8: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 8); break;
#endif
    case 7: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 7); break;
    case 6: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 6); break;
    case 5: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 5); break;
    case 4: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 4); break;
    case 3: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 3); break;
    case 2: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 2); break;
    case 1: rows_tile(weight, row_bytes, x, i, out + i * n, n, rows, 1); break;
    }
}

/* Weight rows [first, last) against every activation row. */
static void rows_matmul_range(rows_activations x, const uint8_t *weight, float *out, int64_t m,
                              int64_t n, int64_t first, int64_t last) {
    const int64_t row_bytes = x.blocks * BLOCK_BYTES;
    int64_t j = first;
    for (; j + ROWS_WEIGHT <= last; j += ROWS_WEIGHT)
        rows_weight_tile(weight + j * row_bytes, row_bytes, x, m, out + j, n, ROWS_WEIGHT);
    if (j < last) /* one row left (ROWS_WEIGHT is 2) */
        rows_weight_tile(weight + j * row_bytes, row_bytes, x, m, out + j, n, 1);
}

/* The wide tile (AVX-512) is quantized_rows_wide.c, placed before this text; it defines
 * ROWS_WIDE where it is built. */

#if defined(ROWS_WIDE)
/* Activation rows per launch from which the wide tile runs (fewer: the AVX2 tile, faster at
 * 2-3 rows: at 2 rows 0.89x a row alone per row against the wide tile's 1.17x), and the rows
 * of a last group it takes (fewer are left to the AVX2 tile). */
#define WIDE_MIN 4

/* The activation rows [0, wide) the wide tile takes. */
static inline int64_t wide_count(int64_t m) {
    if (m < WIDE_MIN) return 0;
    return m % WIDE_ROWS == 0 || m % WIDE_ROWS >= WIDE_MIN ? m : m - m % WIDE_ROWS;
}
#endif

/* Weight rows [first, last) against every activation row: the wide tile's rows, then the
 * AVX2 tile's (from activation row `wide` on). */
typedef struct {
#if defined(ROWS_WIDE)
    wide_activations wide;
    int64_t wide_rows;
#endif
    rows_activations rest;
} both_activations;

static void both_range(both_activations x, const uint8_t *weight, float *out, int64_t m,
                       int64_t n, int64_t first, int64_t last) {
    int64_t done = 0;
#if defined(ROWS_WIDE)
    if (x.wide_rows > 0) wide_matmul_range(x.wide, weight, out, x.wide_rows, n, first, last);
    done = x.wide_rows;
#endif
    if (done < m) {
        rows_activations rest = x.rest;
        rest.codes += 32 * rest.blocks * done;
        rest.d += done;
        rest.s += done;
        rows_matmul_range(rest, weight, out + done * n, m - done, n, first, last);
    }
}

static void rows_matmul(const float *x, const uint8_t *weight, float *out, int64_t m,
                        int64_t n, int64_t k, int64_t threads) {
    const int64_t blocks = k / 32, count = m * blocks;
    const int64_t stride = (m + ROWS_ACTS - 1) / ROWS_ACTS * ROWS_ACTS;
#if defined(ROWS_WIDE)
    const int64_t wide_rows = wide_count(m);
    const int64_t wide_stride = (wide_rows + WIDE_ROWS - 1) / WIDE_ROWS * WIDE_ROWS;
#else
    const int64_t wide_stride = 0;
#endif
    /* one allocation (a launch's five buffers; separate ones cost a short prompt's launch a
     * few microseconds in malloc and free): the rounded codes and their scales; the scales
     * by block (AVX2 tile); interleaved codes, d and s (wide tile) */
    const size_t sizes[5] = {64 * (size_t)count, 16 * (size_t)count,
                             2 * sizeof(float) * (size_t)(blocks * stride),
                             64 * (size_t)(blocks * wide_stride),
                             2 * sizeof(float) * (size_t)(blocks * wide_stride)};
    size_t total = 0, offsets[5];
    for (int part = 0; part < 5; part++) {
        offsets[part] = total;
        total += (sizes[part] + 63) / 64 * 64;
    }
    uint8_t *scratch = aligned_alloc(64, total + 64);
    if (scratch == NULL) return;
    activation_blocks quantized = {(int16_t *)(void *)(scratch + offsets[0]),
                                   (float *)(void *)(scratch + offsets[1]), NULL, NULL, NULL};
    float *transposed = (float *)(void *)(scratch + offsets[2]);
    int16_t *wide = (int16_t *)(void *)(scratch + offsets[3]);
    float *wide_scales = (float *)(void *)(scratch + offsets[4]);
    quantize_activations(x, quantized, count);
#if defined(ROWS_WIDE)
    const int64_t rest_from = wide_rows;
#else
    const int64_t rest_from = 0;
#endif
    if (rest_from < m) { /* the AVX2 tile's rows (every row where the wide tile takes none) */
        memset(transposed, 0, 2 * sizeof(float) * (size_t)(blocks * stride));
        for (int64_t i = rest_from; i < m; i++)
            for (int64_t b = 0; b < blocks; b++) {
                transposed[b * stride + i] = quantized.scales[4 * (i * blocks + b)];
                transposed[(blocks + b) * stride + i] = quantized.scales[4 * (i * blocks + b) + 1];
            }
    }
    both_activations rows;
    rows.rest = (rows_activations){quantized.codes, transposed, transposed + blocks * stride,
                                   blocks, stride};
#if defined(ROWS_WIDE)
    wide_interleave(quantized, wide_rows, blocks, wide, wide_scales,
                    wide_scales + blocks * wide_stride);
    rows.wide = (wide_activations){wide, wide_scales, wide_scales + blocks * wide_stride, blocks};
    rows.wide_rows = wide_rows;
#else
    (void)wide;
    (void)wide_scales;
#endif
#if defined(_OPENMP)
    /* chunks of output rows (a multiple of 4, about CHUNKS_PER_THREAD per thread) taken in
     * turn, as quantized.c's matmul */
    int64_t chunk = (n / (threads * CHUNKS_PER_THREAD) + 3) / 4 * 4;
    chunk = chunk < 16 ? 16 : chunk;
    const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t first = c * chunk, last = first + chunk < n ? first + chunk : n;
        both_range(rows, weight, out, m, n, first, last);
    }
#else
    (void)threads;
    both_range(rows, weight, out, m, n, 0, n);
#endif
    free(scratch);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    if (sizes[0] == 1 && sizes[1] > 1) {
        rows_matmul((const float *)data[0], (const uint8_t *)data[1], (float *)data[2],
                    sizes[1], sizes[2], sizes[3], sizes[4]);
        return;
    }
    fuel_quantized_kernel(data, sizes, strides);
}
#else
/* No AVX2 (or not a 32-value integer format): the format's own kernel. */
void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    fuel_quantized_kernel(data, sizes, strides);
}
#endif
