/* The decode shape's kernel of the K formats and iq4_xs (quantized_decode.c): after
 * quantized_formats.c (code_bytes, header_vectors), before quantized.c (whose matmul calls
 * split_activations and decode_rows at one activation row). */
#if defined(SPLIT_DECODE)
/* The decode shape (one activation row), the K formats and iq4_xs: each 16-bit activation
 * code x of a block of 32 is stored split as two bytes, x = 256 h + l with h = x >> 8 (signed)
 * and l = x & 255 (unsigned): per block 32 bytes h, then 32 bytes l, in the codes' order. A
 * weight chunk's 32 codes as bytes (quantized_formats.c's code_bytes) meet both halves in
 * u8 x s8 four-product sums (VNNI's dpbusd, or its exact madd emulation):
 *   sum(u x) = 256 sum(u h) + sum(l u),
 * so the codes need no widening to 16 bits. 32-bit lane j sums positions 4j .. 4j + 3
 * (lanes 0-3 the chunk's first half, 4-7 its second); each lane's sum is the exact integer
 * (at most 4 * 127 * 32767 < 2^24 in magnitude, so its conversion to float is exact too). */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 1024
#endif
/* weight rows side by side per tile: more interleaved streams than two slowed the reads from
 * memory (q6_k to half at four) */
#ifndef DECODE_ROWS
#define DECODE_ROWS 2
#endif
typedef struct {
    uint8_t *bytes;       /* per block 64: the high bytes h, then the low bytes l */
    int32_t *corrections; /* SIGNED_CODES: per block 8 lanes of -128 * sum(h) over the lane */
    float *d, *s, *halves; /* per block: d, d * sum(q); per half: d * sum(q) */
    float *dd;            /* per half: d (64-byte aligned) */
} split_blocks;

/* a + sum over each 32-bit lane's four byte pairs of u[i] (unsigned) * s[i] (signed) */
static inline __attribute__((always_inline)) __m256i dot_bytes(__m256i a, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && !defined(NO_AVX512)
    return _mm256_dpbusd_epi32(a, u, s);
#elif defined(__AVXVNNI__) && !defined(NO_AVX512)
    return _mm256_dpbusd_avx_epi32(a, u, s);
#else
    /* exact: bytes widened in their 16-bit lanes (no saturating byte products) */
    const __m256i u_even = _mm256_and_si256(u, _mm256_set1_epi16(0xff));
    const __m256i u_odd = _mm256_srli_epi16(u, 8);
    const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
    const __m256i s_odd = _mm256_srai_epi16(s, 8);
    return _mm256_add_epi32(a, _mm256_add_epi32(_mm256_madd_epi16(u_even, s_even),
                                                _mm256_madd_epi16(u_odd, s_odd)));
#endif
}

/* Where block b's bytes go. Plain: 64 bytes per block, its high bytes h then its low bytes
 * l. PAIRED: per pair of blocks 128 bytes, their high bytes then their low bytes.
 * INTERLEAVED: per pair of blocks 128 bytes, h of both blocks' values 0-15, h of their values
 * 16-31, then l the same way (16 bytes each). */
static inline __attribute__((always_inline)) void store_split(uint8_t *bytes, int64_t b,
                                                              __m256i h, __m256i l) {
#if defined(INTERLEAVED)
    uint8_t *at = bytes + 128 * (b >> 1) + 16 * (b & 1);
    _mm_store_si128((__m128i *)at, _mm256_castsi256_si128(h));
    _mm_store_si128((__m128i *)(at + 32), _mm256_extracti128_si256(h, 1));
    _mm_store_si128((__m128i *)(at + 64), _mm256_castsi256_si128(l));
    _mm_store_si128((__m128i *)(at + 96), _mm256_extracti128_si256(l, 1));
#elif defined(PAIRED)
    uint8_t *at = bytes + 128 * (b >> 1) + 32 * (b & 1);
    _mm256_store_si256((__m256i *)at, h);
    _mm256_store_si256((__m256i *)(at + 64), l);
#else
    _mm256_store_si256((__m256i *)(bytes + 64 * b), h);
    _mm256_store_si256((__m256i *)(bytes + 64 * b + 32), l);
#endif
}

/* round_int16_blocks of count blocks of x (quantize_activations' float32 steps), stored
 * split (see above). */
static void split_activations(const float *restrict x, split_blocks out, int64_t count) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    /* packs' 128-bit lanes back to the codes' order (4-byte groups) */
    const __m256i in_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < count; b++) {
        const float *values = x + 32 * b;
        __m256 v[4];
        for (int j = 0; j < 4; j++) v[j] = _mm256_loadu_ps(values + 8 * j);
        const __m256 top = _mm256_max_ps(
            _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
            _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
        half = _mm_max_ps(half, _mm_movehl_ps(half, half));
        half = _mm_max_ss(half, _mm_movehdup_ps(half));
        const float d = _mm_cvtss_f32(half) / (float)ACTIVATION_CODE_MAX;
        const __m256 inverse = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
        __m256i q[4], high[4], low[4];
        for (int j = 0; j < 4; j++) {
            q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], inverse),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            high[j] = _mm256_srai_epi32(q[j], 8);
            low[j] = _mm256_and_si256(q[j], _mm256_set1_epi32(0xff));
        }
        const __m256i h = _mm256_packs_epi16(_mm256_packs_epi32(high[0], high[1]),
                                             _mm256_packs_epi32(high[2], high[3]));
        const __m256i l = _mm256_packus_epi16(_mm256_packs_epi32(low[0], low[1]),
                                              _mm256_packs_epi32(low[2], low[3]));
        const __m256i h_ordered = _mm256_permutevar8x32_epi32(h, in_order);
        store_split(out.bytes, b, h_ordered, _mm256_permutevar8x32_epi32(l, in_order));
#if defined(SIGNED_CODES)
        /* the signed codes meet h as unsigned (code + 128): their lanes start at -128 sum(h) */
        const __m256i correction = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            dot_bytes(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), h_ordered));
#if defined(INTERLEAVED)
        /* lane j < 4 of a pair's accumulator holds the block's values 4j .. 4j + 3 and 16 + 4j
         * .. 16 + 4j + 3 */
        _mm_store_si128((__m128i *)(out.corrections + 4 * b),
                        _mm_add_epi32(_mm256_castsi256_si128(correction),
                                      _mm256_extracti128_si256(correction, 1)));
#else
        _mm256_store_si256((__m256i *)(out.corrections + 8 * b), correction);
#endif
#endif
        const __m256i sums = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]),
                                               _mm256_add_epi32(q[2], q[3]));
        /* lanes: 0, 1, 4, 5 the first 16 codes' partial sums, 2, 3, 6, 7 the last 16's */
        int32_t parts[8];
        _mm256_storeu_si256((__m256i *)parts, sums);
        const int first = parts[0] + parts[1] + parts[4] + parts[5];
        const int second = parts[2] + parts[3] + parts[6] + parts[7];
        out.d[b] = out.dd[2 * b] = out.dd[2 * b + 1] = d;
        out.s[b] = d * (float)(first + second);
        out.halves[2 * b] = d * (float)first;
        out.halves[2 * b + 1] = d * (float)second;
    }
}

#if !defined(INTERLEAVED)
/* Chunk c of a weight block (unsigned codes) against its activation block (high, low: 64
 * bytes, see split_blocks): the exact integer sums, lane j positions 4j .. 4j + 3. */
static inline __attribute__((always_inline)) __m256i chunk_dot(const uint8_t *block, int c,
                                                               __m256i high, __m256i low) {
    const __m256i codes = code_bytes(block, c);
    const __m256i upper = dot_bytes(_mm256_setzero_si256(), codes, high);
    return dot_bytes(_mm256_slli_epi32(upper, 8), low, codes);
}
#endif

#if defined(PAIRED)
/* chunks 2p, 2p + 1 (code_pair: unsigned codes) against their activation bytes (at: the
 * pair's 128 bytes), as chunk_dot: lanes 0-7 the first chunk's, 8-15 the second's */
static inline __attribute__((always_inline)) __m512i pair_dot(__m512i codes, const uint8_t *at) {
    const __m512i high = _mm512_load_si512((const void *)at);
    const __m512i low = _mm512_load_si512((const void *)(at + 64));
    const __m512i upper = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, high);
    return _mm512_dpbusd_epi32(_mm512_slli_epi32(upper, 8), low, codes);
}
#endif

#if defined(INTERLEAVED)
/* Chunks c, c + 1 (code_halves' first and second) against their activation pair (at: 128
 * bytes, INTERLEAVED) whose lanes start at ``start``: lanes 0-3 chunk c's sums, 4-7 chunk
 * c + 1's, eight products a lane. The integers are exact; their conversion to float too below
 * 2^24, iq4's largest products (8 * 127 * 32767 < 2^25) round to an even integer there. */
static inline __attribute__((always_inline)) __m256i halves_dot(__m256i first, __m256i second,
                                                                const uint8_t *at,
                                                                __m256i start) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i upper = dot_bytes(
        dot_bytes(start, _mm256_xor_si256(first, flip), _mm256_load_si256((const __m256i *)at)),
        _mm256_xor_si256(second, flip), _mm256_load_si256((const __m256i *)(at + 32)));
    return dot_bytes(dot_bytes(_mm256_slli_epi32(upper, 8),
                               _mm256_load_si256((const __m256i *)(at + 64)), first),
                     _mm256_load_si256((const __m256i *)(at + 96)), second);
}
#endif

static inline float horizontal_sum(__m256 v) {
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_movehdup_ps(half));
    return _mm_cvtss_f32(half);
}

#if defined(PAIRED)
/* Block b's headers for the tile's rows (header_pair's 16 lanes, one per half chunk): their
 * factors (weight scale times activation scale) into factors[r], their offsets times the
 * activations' half sums added to offsets[r]. */
static inline __attribute__((always_inline)) void block_factors(
    const uint8_t *weight, int64_t row_bytes, split_blocks x, int64_t b,
    float (*factors)[16], __m512 *offsets, const int rows) {
#if defined(CODE_SCALES)
    const __m512 dd = _mm512_mul_ps(_mm512_load_ps(x.dd + 16 * b), CODE_SCALES);
#else
    const __m512 dd = _mm512_load_ps(x.dd + 16 * b);
#endif
    const __m512 sums = _mm512_loadu_ps(x.halves + 16 * b);
    for (int r = 0; r < rows; r++) {
        __m512 scale, minimum;
        header_pair(weight + r * row_bytes + b * BLOCK_BYTES, &scale, &minimum);
        /* transposed (lane 4g + p: factor 4p + g), so pair p's factors are one in-lane
         * broadcast of element p of each 128-bit lane g */
        _mm512_store_ps(factors[r], _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
            _mm512_mul_ps(scale, dd)));
        offsets[r] = _mm512_fmadd_ps(minimum, sums, offsets[r]);
    }
}
#else
/* Block b's headers for the tile's rows: their chunk factors (weight scale times activation
 * scale; per half where SCALES is 2) into factors[r], their offsets added to offsets[r]. */
static inline __attribute__((always_inline)) void block_factors(
    const uint8_t *weight, int64_t row_bytes, split_blocks x, int64_t b,
    float (*factors)[16], __m256 *offsets, const int rows) {
    const int64_t at = b * CHUNKS;
    const __m256 d = _mm256_loadu_ps(x.d + at);
#if defined(CODE_OFFSET)
    __m256 scales[DECODE_ROWS][2];
#endif
    for (int r = 0; r < rows; r++) {
        vector_header h;
        header_vectors(weight + r * row_bytes + b * BLOCK_BYTES, &h);
#if defined(CODE_OFFSET)
        scales[r][0] = h.scale[0];
        scales[r][1] = h.scale[1];
#endif
#if SCALES == 1 && defined(INTERLEAVED)
        /* transposed (lane 4g + q: chunk 2q + g's factor), so a step's two chunks' factors are
         * one in-lane broadcast (in-cache, one thread, iq4_xs: 1.04 -> 1.02 ns per 32 weights,
         * a cross-lane permute per step and row before) */
        _mm256_store_ps(factors[r], _mm256_permutevar8x32_ps(
            _mm256_mul_ps(h.scale[0], d), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)));
#elif SCALES == 1
        _mm256_store_ps(factors[r], _mm256_mul_ps(h.scale[0], d));
#if MINIMUM
        offsets[r] = _mm256_fmadd_ps(h.minimum[0], _mm256_loadu_ps(x.s + at), offsets[r]);
#endif
#else
        _mm256_store_ps(factors[r], _mm256_mul_ps(h.scale[0], _mm256_permutevar8x32_ps(
            d, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))));
        _mm256_store_ps(factors[r] + 8, _mm256_mul_ps(h.scale[1], _mm256_permutevar8x32_ps(
            d, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7))));
#if MINIMUM
        offsets[r] = _mm256_fmadd_ps(h.minimum[0], _mm256_loadu_ps(x.halves + 2 * at),
                                     offsets[r]);
        offsets[r] = _mm256_fmadd_ps(h.minimum[1], _mm256_loadu_ps(x.halves + 2 * at + 8),
                                     offsets[r]);
#endif
#endif
    }
#if defined(CODE_OFFSET)
    /* codes read as stored: value = scale * (q - CODE_OFFSET) */
    const __m256 s_low = _mm256_loadu_ps(x.halves + 2 * at);
    const __m256 s_high = _mm256_loadu_ps(x.halves + 2 * at + 8);
    for (int r = 0; r < rows; r++) {
        offsets[r] = _mm256_fmadd_ps(_mm256_mul_ps(scales[r][0], _mm256_set1_ps(CODE_OFFSET)),
                                     s_low, offsets[r]);
        offsets[r] = _mm256_fmadd_ps(_mm256_mul_ps(scales[r][1], _mm256_set1_ps(CODE_OFFSET)),
                                     s_high, offsets[r]);
    }
#endif
}
#endif

#if !defined(PAIRED)
/* rows (at most DECODE_ROWS) weight rows side by side against the activation row; per chunk
 * one float conversion and fma by its factor (weight scale times activation scale; per half
 * where the halves have their own), the offsets one fma per block against the activation
 * sums. Two accumulators per row (sums, spare): the chunks alternate between them, so each
 * chain of dependent adds is half as long (an fma's latency bounds a chain). */
static inline __attribute__((always_inline)) void decode_tile(
    const uint8_t *weight, int64_t row_bytes, split_blocks x, int64_t blocks, float *out,
    const int rows) {
    __m256 sums[DECODE_ROWS], spare[DECODE_ROWS], offsets[DECODE_ROWS];
    for (int r = 0; r < rows; r++) sums[r] = spare[r] = offsets[r] = _mm256_setzero_ps();
    /* the tiles run through the weight in address order; the next tile's bytes are requested
     * a tile ahead (the rows side by side are short interleaved streams) */
    const uint8_t *ahead = weight + rows * row_bytes + PREFETCH_AHEAD;
    /* the headers run a block ahead (double-buffered factors): a block's chunks then wait on
     * no header's chain of dependent steps */
    float buffers[2][DECODE_ROWS][16] __attribute__((aligned(64)));
    block_factors(weight, row_bytes, x, 0, buffers[0], offsets, rows);
    for (int64_t b = 0; b < blocks; b++) {
        for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        float (*factors)[16] = buffers[b & 1];
        if (b + 1 < blocks)
            block_factors(weight, row_bytes, x, b + 1, buffers[(b + 1) & 1], offsets, rows);
        const int64_t at = b * CHUNKS;
#if defined(INTERLEAVED)
#pragma GCC unroll 4
        for (int c = 0; c < CHUNKS; c += 2) {
            const __m256i start = _mm256_load_si256((const __m256i *)(x.corrections + 4 * (at + c)));
            for (int r = 0; r < rows; r++) {
                __m256i first, second;
                code_halves(weight + r * row_bytes + b * BLOCK_BYTES, c, &first, &second);
                const __m256i p = halves_dot(first, second, x.bytes + 64 * (at + c), start);
                const __m256 factor = _mm256_permute_ps(_mm256_load_ps(factors[r]),
                                                        (c / 2) * 0x55);
                if (c % 4 == 0) sums[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), factor, sums[r]);
                else spare[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), factor, spare[r]);
            }
        }
#else
#pragma GCC unroll 8
        for (int c = 0; c < CHUNKS; c++) {
            const uint8_t *at_x = x.bytes + 64 * (at + c);
            const __m256i high = _mm256_load_si256((const __m256i *)at_x);
            const __m256i low = _mm256_load_si256((const __m256i *)(at_x + 32));
            for (int r = 0; r < rows; r++) {
                const __m256i p = chunk_dot(weight + r * row_bytes + b * BLOCK_BYTES, c, high,
                                            low);
#if SCALES == 2
                /* lanes 0-3: the chunk's first half, 4-7: its second */
                const __m256 factor = _mm256_permutevar8x32_ps(
                    _mm256_load_ps(factors[r] + 8 * (c / 4)),
                    _mm256_setr_epi32(2 * (c % 4), 2 * (c % 4), 2 * (c % 4), 2 * (c % 4),
                                      2 * (c % 4) + 1, 2 * (c % 4) + 1, 2 * (c % 4) + 1,
                                      2 * (c % 4) + 1));
#else
                const __m256 factor = _mm256_broadcast_ss(factors[r] + c);
#endif
                if (c % 2 == 0) sums[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), factor, sums[r]);
                else spare[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), factor, spare[r]);
            }
        }
#endif
    }
    for (int r = 0; r < rows; r++)
        out[r] = horizontal_sum(_mm256_sub_ps(_mm256_add_ps(sums[r], spare[r]), offsets[r]));
}
#else
/* The AVX-512 tile (PAIRED: q6_k, q3_k, q2_k): decode_tile's sums, two chunks per step (lanes
 * 0-7 the first, 8-15 the second), the factors of the pair's four halves picked from the
 * block's 16 (stored transposed) by one in-lane shuffle (in-cache, one thread, ns per 32
 * weights: q2_k 0.97 -> 0.955, q3_k 1.17 -> 1.155, a cross-lane permute per pair before). */
static inline __attribute__((always_inline)) void decode_tile(
    const uint8_t *weight, int64_t row_bytes, split_blocks x, int64_t blocks, float *out,
    const int rows) {
    __m512 sums[DECODE_ROWS], spare[DECODE_ROWS], offsets[DECODE_ROWS];
    for (int r = 0; r < rows; r++) sums[r] = spare[r] = offsets[r] = _mm512_setzero_ps();
    const uint8_t *ahead = weight + rows * row_bytes + PREFETCH_AHEAD;
    float buffers[2][DECODE_ROWS][16] __attribute__((aligned(64)));
    block_factors(weight, row_bytes, x, 0, buffers[0], offsets, rows);
    for (int64_t b = 0; b < blocks; b++) {
        for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
            _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line, _MM_HINT_T0);
        float (*factors)[16] = buffers[b & 1];
        if (b + 1 < blocks)
            block_factors(weight, row_bytes, x, b + 1, buffers[(b + 1) & 1], offsets, rows);
        const int64_t at = b * CHUNKS;
#pragma GCC unroll 4
        for (int p = 0; p < CHUNKS / 2; p++) {
            for (int r = 0; r < rows; r++) {
                const __m512i products = pair_dot(
                    code_pair(weight + r * row_bytes + b * BLOCK_BYTES, p),
                    x.bytes + 64 * (at + 2 * p));
                /* lanes 4g .. 4g + 3: the pair's half g (factor 4p + g) */
                const __m512 factor = _mm512_permute_ps(_mm512_load_ps(factors[r]), p * 0x55);
                if (p % 2 == 0)
                    sums[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(products), factor, sums[r]);
                else
                    spare[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(products), factor, spare[r]);
            }
        }
    }
    for (int r = 0; r < rows; r++)
        out[r] = _mm512_reduce_add_ps(_mm512_sub_ps(_mm512_add_ps(sums[r], spare[r]), offsets[r]));
}
#endif

static void decode_rows(split_blocks x, const uint8_t *weight, float *out, int64_t k,
                        int64_t first, int64_t last) {
    const int64_t blocks = k / BLOCK_SIZE, row_bytes = blocks * BLOCK_BYTES;
    int64_t j = first;
    for (; j + DECODE_ROWS <= last; j += DECODE_ROWS)
        decode_tile(weight + j * row_bytes, row_bytes, x, blocks, out + j, DECODE_ROWS);
    for (; j < last; j++) decode_tile(weight + j * row_bytes, row_bytes, x, blocks, out + j, 1);
}
#endif
