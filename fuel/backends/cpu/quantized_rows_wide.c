/* The many-row matmul's wide tile (AVX-512 with VNNI, byte permutes and BMI2), placed before
 * quantized_rows.c's text (that file's header: the formats, the contract, the bits). It reads
 * the library's block layouts and activation rounding and defines ROWS_WIDE where built;
 * quantized_rows.c runs it from WIDE_MIN rows. */
#if defined(INTEGER_DOT) && USE_AVX2 && (!defined(CHUNKED) || defined(FORMAT_IQ4_NL) || \
                                          defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1))
#if defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__AVX512VNNI__) && \
    defined(__AVX512DQ__) && defined(__BMI2__) && !defined(NO_AVX512)
/* The wide tile (AVX-512; quantized_rows.c's AVX2 tile where it is missing): up to WIDE_WEIGHT_MAX
 * (4) weight rows by up to WIDE_ROWS (16) activation rows, 16 accumulators of 512 bits, each
 * holding a pair of activation rows interleaved: 32-bit lane 2j + t is lane j of activation
 * row 2p + t of the pair p (t = 0, 1). Four weight rows by two or four pairs (4 activation
 * rows: a short prompt; 8: the 8-client step) or two by eight (16 rows).
 *   - A weight block is unpacked once (one byte permute; iq4_nl: then two 16-bit permutes on
 *     its table; q5: the fifth bits spread to the lanes by pdep, added under masks) into codes
 *     duplicated for both rows of a pair; the activations are stored
 *     interleaved that way once per launch.
 *   - Per pair of (weight row, activation row) blocks: one madd, one dpwssd, one conversion
 *     and one fma whose factors {d_w d_x0, d_w d_x1} are one 64-bit broadcast load: the
 *     integer tile's very float steps for both rows at once.
 *   - The weight rows' float16 scales are converted 16 at a time (SCALE_BLOCKS a chunk).
 *   - The horizontal sums of eight accumulators (16 row pairs) are one tree of 128-bit and
 *     in-lane shuffles: the integer tile's additions, pair for pair.
 *   - Formats without offsets (NO_OFFSETS: iq4_nl, q5_0) skip the offset products, as their
 *     integer tile does.
 * Below WIDE_MIN (4) rows, and for a last group of fewer, the AVX2 tile runs (faster there).
 * Measured (one thread, SmolLM2's shapes, CPU time per row against a row alone): 2 rows 0.89x,
 * 4 rows 0.73x (the AVX2 tile); 8 rows 0.59-0.64x (the AVX2 tile: 0.69x), 12 rows 0.66x,
 * 16-32 rows 0.61x (0.69x). Against quantized.c's many-row tile (one thread, CPU time,
 * SmolLM2's four layer shapes, 2026-12-05, load 4-6): 4 rows on two pairs 0.75-0.84x (q4_0,
 * q4_1, q8_0, iq4_nl; the AVX2 tile 0.93-0.97x), 3 rows 0.96-1.07x (the AVX2 tile 0.92-1.01x),
 * 6 rows 0.63-0.79x (0.72-0.94x); q5_0 / q5_1 (load 5-7) 4 rows 0.67x / 0.75x, 8 rows 0.50x /
 * 0.51x, 2-3 rows (the AVX2 tile) 0.94-1.00x. */
#define WIDE_WEIGHT_MAX 4 /* weight rows per tile, at most */
#define WIDE_PAIRS 8
#define WIDE_ROWS (2 * WIDE_PAIRS)

/* Interleaved activations, in groups of WIDE_ROWS rows (zero past the last row): group g's
 * block b, pair p at codes + 64 * ((g * blocks + b) * WIDE_PAIRS + p): 32 codes meeting the
 * weight block's codes 0-15 (lane 2j + t: row 2p + t's codes 2j, 2j + 1), then 32 meeting
 * codes 16-31; d, s: group g's block b's WIDE_ROWS values at 16 * (g * blocks + b). */
typedef struct {
    const int16_t *codes;
    const float *d, *s;
    int64_t blocks;
} wide_activations;

/* Byte permutes: a weight block's bytes into 16-bit lanes ordered as the interleaved
 * activations (lane e = 4j + 2t + u holds code 2j + u and, in q8_0's other byte, 16 + 2j + u) */
static inline __m512i wide_index(void) {
    uint8_t index[64];
    for (int e = 0; e < 32; e++) {
        const int code = (e >> 2) * 2 + (e & 1);
#if defined(FORMAT_Q8_0)
        index[2 * e] = (uint8_t)(16 + code); /* low byte: codes 16-31 */
        index[2 * e + 1] = (uint8_t)code;    /* high byte: codes 0-15 */
#else
        index[2 * e] = (uint8_t)code; /* byte l: code l (low nibble), l + 16 (high) */
        index[2 * e + 1] = 0;
#endif
    }
    return _mm512_loadu_si512(index);
}

/* One weight block's codes as 16-bit lanes (see wide_index): codes 0-15 (low) and 16-31. */
static inline __attribute__((always_inline)) void wide_codes(const uint8_t *block,
                                                             __m512i index, __m512i *low,
                                                             __m512i *high) {
#if defined(FORMAT_Q8_0)
    const __m512i bytes = _mm512_castsi256_si512(
        _mm256_loadu_si256((const __m256i *)(block + 2)));
    const __m512i lanes = _mm512_permutexvar_epi8(index, bytes);
    *low = _mm512_srai_epi16(lanes, 8);
    *high = _mm512_srai_epi16(_mm512_slli_epi16(lanes, 8), 8);
#else
    const __m512i bytes = _mm512_castsi128_si512(
        _mm_loadu_si128((const __m128i *)(block + BLOCK_BYTES - 16)));
    const __m512i lanes = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, index, bytes);
#if defined(FORMAT_IQ4_NL)
    /* each 16-bit lane's nibble picks a value of the table (vpermw), as block_codes does;
     * the table twice over, so the low nibble needs no mask (vpermw reads 5 index bits) */
    const __m512i table = _mm512_cvtepi8_epi16(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)IQ4_VALUES)));
    *low = _mm512_permutexvar_epi16(lanes, table);
    *high = _mm512_permutexvar_epi16(_mm512_srli_epi16(lanes, 4), table);
#elif defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
    /* the nibbles as q4's, the fifth bits (bit c of the 32 before the nibbles: code c) added
     * under masks: lane 4j + 2t + u holds code 2j + u, so a half's 16 bits are spread to lanes
     * 4j + u (pdep) and copied to 4j + 2 + u; q5_0's codes less 16 where the bit is clear */
    uint32_t bits;
    memcpy(&bits, block + BLOCK_BYTES - 20, 4);
#if defined(FORMAT_Q5_0)
    bits = ~bits;
#endif
    const uint32_t low_bits = _pdep_u32(bits & 0xffffu, 0x33333333u);
    const uint32_t high_bits = _pdep_u32(bits >> 16, 0x33333333u);
    const __m512i low_codes = _mm512_and_si512(lanes, _mm512_set1_epi16(0x0f));
    const __m512i high_codes = _mm512_srli_epi16(lanes, 4);
    const __m512i sixteen = _mm512_set1_epi16(16);
#if defined(FORMAT_Q5_0)
    *low = _mm512_mask_sub_epi16(low_codes, _cvtu32_mask32(low_bits | low_bits << 2), low_codes,
                                 sixteen);
    *high = _mm512_mask_sub_epi16(high_codes, _cvtu32_mask32(high_bits | high_bits << 2),
                                  high_codes, sixteen);
#else
    *low = _mm512_mask_add_epi16(low_codes, _cvtu32_mask32(low_bits | low_bits << 2), low_codes,
                                 sixteen);
    *high = _mm512_mask_add_epi16(high_codes, _cvtu32_mask32(high_bits | high_bits << 2),
                                  high_codes, sixteen);
#endif
#else
    *low = _mm512_and_si512(lanes, _mm512_set1_epi16(0x0f));
    *high = _mm512_srli_epi16(lanes, 4);
#endif
#endif
}

/* Blocks are read SCALE_BLOCKS at a time: first the weight rows' float16 scales of those
 * blocks are converted together (16 per conversion), so a block's d_w and m_w are broadcast
 * from memory into the factor and offset products rather than converted one by one. */
#define SCALE_BLOCKS 32
#if defined(BLOCK_MINIMUM)
#define SCALE_KINDS 2 /* d and m */
#else
#define SCALE_KINDS 1 /* d (the offsets' factor too) */
#endif

/* rows weight rows' scales of blocks [first, first + count) as floats: kind c of row r's
 * block first + i at scales[(r * SCALE_KINDS + c) * SCALE_BLOCKS + i] */
static inline __attribute__((always_inline)) void wide_scales(const uint8_t *weight,
                                                              int64_t row_bytes, int rows,
                                                              int64_t first, int count,
                                                              float *scales) {
    uint16_t halves[WIDE_WEIGHT_MAX * SCALE_KINDS * SCALE_BLOCKS] __attribute__((aligned(64)));
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < count; i++) {
            const uint8_t *block = weight + r * row_bytes + (first + i) * BLOCK_BYTES;
            for (int c = 0; c < SCALE_KINDS; c++)
                memcpy(halves + (r * SCALE_KINDS + c) * SCALE_BLOCKS + i, block + 2 * c, 2);
        }
    for (int v = 0; v < rows * SCALE_KINDS * SCALE_BLOCKS; v += 16)
        _mm512_store_ps(scales + v, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(halves + v))));
}

/* `rows` weight rows by the `acts` rows of activation group `group` (pairs: (acts + 1) / 2;
 * rows and pairs constants). */
static inline __attribute__((always_inline)) void wide_tile(
    const uint8_t *weight, int64_t row_bytes, wide_activations x, int64_t group, float *out,
    int64_t n, __m512i index, const int rows, const int pairs, int acts) {
    __m512 sums[WIDE_WEIGHT_MAX][WIDE_PAIRS], offsets[WIDE_WEIGHT_MAX];
    for (int r = 0; r < rows; r++) {
        offsets[r] = _mm512_setzero_ps();
        for (int p = 0; p < pairs; p++) sums[r][p] = _mm512_setzero_ps();
    }
    const int64_t blocks = x.blocks;
    const int16_t *codes = x.codes + 64 * WIDE_PAIRS * group * blocks;
    const float *d = x.d + WIDE_ROWS * group * blocks, *s = x.s + WIDE_ROWS * group * blocks;
    const uint8_t *ahead = weight + rows * row_bytes + PREFETCH_BYTES;
    float scales[WIDE_WEIGHT_MAX * SCALE_KINDS * SCALE_BLOCKS] __attribute__((aligned(64)));
    for (int64_t first = 0; first < blocks; first += SCALE_BLOCKS) {
        const int count = blocks - first < SCALE_BLOCKS ? (int)(blocks - first) : SCALE_BLOCKS;
        wide_scales(weight, row_bytes, rows, first, count, scales);
        for (int i = 0; i < count; i++) {
            const int64_t b = first + i;
            if (group == 0)
                for (int line = 0; line < rows * BLOCK_BYTES; line += 64)
                    _mm_prefetch((const char *)ahead + b * rows * BLOCK_BYTES + line,
                                 _MM_HINT_T0);
            __m512i low[WIDE_WEIGHT_MAX], high[WIDE_WEIGHT_MAX];
            float factors[WIDE_WEIGHT_MAX][WIDE_ROWS] __attribute__((aligned(64)));
            const __m512 d_x = _mm512_load_ps(d + WIDE_ROWS * b);
            const __m512 s_x = _mm512_load_ps(s + WIDE_ROWS * b);
            for (int r = 0; r < rows; r++) {
                wide_codes(weight + r * row_bytes + b * BLOCK_BYTES, index, &low[r], &high[r]);
                const float *row_scales = scales + r * SCALE_KINDS * SCALE_BLOCKS + i;
                /* {d_w d_x}, and m_w s_x (q4_1) or d_w s_x: the integer tile's products */
                _mm512_store_ps(factors[r], _mm512_mul_ps(d_x, _mm512_set1_ps(row_scales[0])));
#if !defined(NO_OFFSETS)
                offsets[r] = _mm512_add_ps(offsets[r], _mm512_mul_ps(
                    s_x, _mm512_set1_ps(row_scales[(SCALE_KINDS - 1) * SCALE_BLOCKS])));
#else
                (void)s_x;
#endif
            }
            for (int p = 0; p < pairs; p++) {
                const int16_t *q = codes + 64 * (b * WIDE_PAIRS + p);
                __m512i q_low = _mm512_load_si512(q), q_high = _mm512_load_si512(q + 32);
                __asm__("" : "+v"(q_low), "+v"(q_high)); /* loaded once for the tile's rows */
                for (int r = 0; r < rows; r++) {
                    const __m512i lanes = _mm512_dpwssd_epi32(
                        _mm512_madd_epi16(low[r], q_low), high[r], q_high);
                    __m512 factor; /* a 64-bit broadcast load, not a shuffle of registers */
                    __asm__("vbroadcastsd %1, %0"
                            : "=v"(factor)
                            : "m"(*(const double *)(const void *)(factors[r] + 2 * p)));
                    sums[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), factor, sums[r][p]);
                }
            }
        }
    }
    /* The integer tile's horizontal sum of each (weight row, activation row)'s 8 lanes,
     * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), for eight accumulators at a time
     * (16 rows): the same additions, lane for lane, by 128-bit and in-lane shuffles. */
    __m512 flat[WIDE_WEIGHT_MAX * WIDE_PAIRS + 7];
    const int used = rows * pairs;
    for (int k = 0; k < used; k++) flat[k] = sums[k / pairs][k % pairs];
    for (int k = used; k < (used + 7) / 8 * 8; k++) flat[k] = _mm512_setzero_ps();
    float offset[WIDE_WEIGHT_MAX][WIDE_ROWS] __attribute__((aligned(64)));
    for (int r = 0; r < rows; r++) _mm512_store_ps(offset[r], offsets[r]);
    for (int group8 = 0; group8 < used; group8 += 8) {
        __m512 halves[4], quarters[2];
        for (int c = 0; c < 4; c++) { /* lanes L + 8: j + 4 (lane L = 2 j + t) */
            const __m512 a = flat[group8 + 2 * c], b = flat[group8 + 2 * c + 1];
            halves[c] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                      _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
        }
        for (int c = 0; c < 2; c++) { /* j + 2 */
            const __m512 a = halves[2 * c], b = halves[2 * c + 1];
            quarters[c] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
        }
        /* j + 1: lane 4 c + 2 h + t holds accumulator group8 + 4 h + c's row t */
        float found[16] __attribute__((aligned(64)));
        _mm512_store_ps(found, _mm512_add_ps(
            _mm512_shuffle_ps(quarters[0], quarters[1], _MM_SHUFFLE(1, 0, 1, 0)),
            _mm512_shuffle_ps(quarters[0], quarters[1], _MM_SHUFFLE(3, 2, 3, 2))));
        for (int slot = 0; slot < 8 && group8 + slot < used; slot++) {
            const int k = group8 + slot, r = k / pairs, p = k % pairs;
            const int lane = 4 * (slot % 4) + 2 * (slot / 4);
            for (int t = 0; t < 2 && 2 * p + t < acts; t++) {
                const int i = 2 * p + t;
#if defined(NO_OFFSETS)
                out[i * n + r] = found[lane + t];
#else
                out[i * n + r] = found[lane + t] + OFFSET_FACTOR * offset[r][i];
#endif
            }
        }
    }
}

/* The pairs a group of `acts` activation rows runs on: (acts + 1) / 2 rounded up to 2, 4, 6
 * or 8 (few tile shapes compiled). */
static inline int wide_pairs(int acts) {
    const int pairs = (acts + 1) / 2;
    return pairs > 6 ? 8 : pairs > 4 ? 6 : pairs > 2 ? 4 : 2;
}

/* Weight rows [first, last) against every activation group: four weight rows at a time for
 * a group of up to four pairs, two for more (8 or 16 accumulators). A group's pairs are
 * rounded up to 2, 4, 6 or 8 (its rows past the last are zero and their sums never stored; a last
 * group holds at least WIDE_MIN rows), so few tile shapes are compiled. */
static void wide_matmul_range(wide_activations x, const uint8_t *weight, float *out, int64_t m,
                              int64_t n, int64_t first, int64_t last) {
    const int64_t row_bytes = x.blocks * BLOCK_BYTES;
    const __m512i index = wide_index();
    const int64_t groups = (m + WIDE_ROWS - 1) / WIDE_ROWS;
    for (int64_t g = 0; g < groups; g++) {
        const int acts = m - g * WIDE_ROWS < WIDE_ROWS ? (int)(m - g * WIDE_ROWS) : WIDE_ROWS;
        const int pairs = wide_pairs(acts);
        const int step = pairs > 4 ? 2 : 4; /* weight rows per tile */
        for (int64_t j = first; j < last;) {
            const uint8_t *rows = weight + j * row_bytes;
            float *at = out + g * WIDE_ROWS * n + j;
            const int64_t left = last - j;
            const int count = left >= step ? step : left >= 2 ? 2 : 1;
#define WIDE(R, P) wide_tile(rows, row_bytes, x, g, at, n, index, R, P, acts)
            if (pairs > 6) {
                if (count == 2) WIDE(2, 8); else WIDE(1, 8);
            } else if (pairs > 4) {
                if (count == 2) WIDE(2, 6); else WIDE(1, 6);
            } else if (pairs > 2) {
                if (count == 4) WIDE(4, 4); else if (count == 2) WIDE(2, 4); else WIDE(1, 4);
            } else {
                if (count == 4) WIDE(4, 2); else if (count == 2) WIDE(2, 2); else WIDE(1, 2);
            }
#undef WIDE
            j += count;
        }
    }
}

/* The quantized activations (row i's block b: codes at 32 (i blocks + b), {d, s, ..} at
 * 4 (i blocks + b)) interleaved by pairs of rows into `wide` (groups of WIDE_ROWS rows). */
static void wide_interleave(activation_blocks quantized, int64_t m, int64_t blocks,
                            int16_t *codes, float *d, float *s) {
    /* unit 2j + t of a pair's 32: row t's unit j (codes 2j, 2j + 1), then of 16 + 2j, 17 + 2j */
    const __m512i low_units = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6,
                                                22, 7, 23);
    const __m512i high_units = _mm512_add_epi32(low_units, _mm512_set1_epi32(8));
    const int64_t groups = (m + WIDE_ROWS - 1) / WIDE_ROWS;
    for (int64_t g = 0; g < groups; g++) {
        /* the codes of the pairs the group's tiles read (wide_pairs), the scales of all */
        const int64_t left = m - g * WIDE_ROWS;
        const int pairs = wide_pairs(left < WIDE_ROWS ? (int)left : WIDE_ROWS);
        for (int64_t b = 0; b < blocks; b++) {
            int32_t *units = (int32_t *)(void *)(codes + 64 * WIDE_PAIRS * (g * blocks + b));
            float *block_d = d + WIDE_ROWS * (g * blocks + b);
            float *block_s = s + WIDE_ROWS * (g * blocks + b);
            for (int a = 0; a < WIDE_ROWS; a++) {
                const int64_t i = g * WIDE_ROWS + a;
                block_d[a] = i < m ? quantized.scales[4 * (i * blocks + b)] : 0.0f;
                block_s[a] = i < m ? quantized.scales[4 * (i * blocks + b) + 1] : 0.0f;
            }
            for (int p = 0; p < pairs; p++) {
                const int64_t i = g * WIDE_ROWS + 2 * p;
                const __m512i first = i < m ? _mm512_loadu_si512(quantized.codes + 32 * (i * blocks + b))
                                            : _mm512_setzero_si512();
                const __m512i second = i + 1 < m
                    ? _mm512_loadu_si512(quantized.codes + 32 * ((i + 1) * blocks + b))
                    : _mm512_setzero_si512();
                _mm512_store_si512(units + 32 * p,
                                   _mm512_permutex2var_epi32(first, low_units, second));
                _mm512_store_si512(units + 32 * p + 16,
                                   _mm512_permutex2var_epi32(first, high_units, second));
            }
        }
    }
}
#define ROWS_WIDE 1
#endif
#endif
