/* Block formats (GGUF, ggml's byte layouts), the first part of each quantized_<format> library
 * (quantized.c follows). The including Python module defines FORMAT_<NAME>, BLOCK_SIZE and
 * BLOCK_BYTES first.
 *
 * q4_0, q4_1, q8_0: dequantize_block (quantized.c has their own integer tiles).
 * The other formats (CHUNKED): every 32 values of a block (a chunk) are small integer codes q
 * with a scale and an offset per half of 16 values:  value = scale[h] * q - minimum[h].
 *   header(block, &h)           the block's scales and offsets as floats (h.scale[SCALES * c +
 *                               h], SCALES = 2 where the halves have their own, else 1);
 *   chunk_codes(block, c, q)    chunk c's 32 codes as int16 (portable);
 *   chunk_vectors(block, c, ..) the same as two vectors of 16 int16 (AVX2).
 * half_to_float (half_float.h, placed before this text) reads the half scales.
 * MINIMUM says whether a format has offsets. Codes are at most 127 in magnitude (iq4's
 * table), so a 16-bit activation times a code pair fits madd's 32-bit lanes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* The AVX2 paths; PORTABLE (set by a test) builds the portable ones on any machine. */
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__) && !defined(PORTABLE)
#define USE_AVX2 1
#include <immintrin.h>
#else
#define USE_AVX2 0
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

static inline float bfloat_to_float(const uint8_t *p) {
    uint32_t bits = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

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
#elif defined(FORMAT_F16_BLOCKS) || defined(FORMAT_BF16_BLOCKS)
/* Float weights in blocks of 32 (kept as stored; the matmul multiplies them as floats). */
#define FLOAT_WEIGHTS 1
static inline void dequantize_block(const uint8_t *block, float *restrict out) {
#if defined(FORMAT_F16_BLOCKS) && USE_AVX2
    for (int j = 0; j < 32; j += 8)
        _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(block + 2 * j))));
#elif defined(FORMAT_F16_BLOCKS)
    for (int j = 0; j < 32; j++) out[j] = half_to_float(block + 2 * j);
#else
#pragma omp simd
    for (int j = 0; j < 32; j++) out[j] = bfloat_to_float(block + 2 * j);
#endif
}
#else
#define CHUNKED 1
#define CHUNKS (BLOCK_SIZE / 32)
#if defined(FORMAT_Q6_K) || defined(FORMAT_Q3_K) || defined(FORMAT_Q2_K)
#define SCALES 2
#else
#define SCALES 1
#endif
#if defined(FORMAT_Q4_K) || defined(FORMAT_Q5_K) || defined(FORMAT_Q5_1) || defined(FORMAT_Q2_K)
#define MINIMUM 1
#else
#define MINIMUM 0
#endif

typedef struct {
    float scale[SCALES * CHUNKS], minimum[SCALES * CHUNKS];
} block_header;

#if defined(FORMAT_IQ4_NL) || defined(FORMAT_IQ4_XS)
static const int8_t IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};
#endif

/* ---- header: the block's per-chunk (or per-half) scales and offsets */
#if defined(FORMAT_Q4_K) || defined(FORMAT_Q5_K)
static inline void header(const uint8_t *block, block_header *h) {
    const float d = half_to_float(block), dmin = half_to_float(block + 2);
    /* 12 bytes of 6-bit scales and minimums, unpacked as ggml's get_scale_min_k4 */
    uint32_t packed[4];
    memcpy(packed, block + 4, 12);
    packed[3] = ((packed[2] >> 4) & 0x0f0f0f0fu) | (((packed[1] >> 6) & 0x03030303u) << 4);
    const uint32_t minimums = packed[1] & 0x3f3f3f3fu;
    packed[1] = (packed[2] & 0x0f0f0f0fu) | (((packed[0] >> 6) & 0x03030303u) << 4);
    packed[2] = minimums;
    packed[0] &= 0x3f3f3f3fu;
    uint8_t values[16];
    memcpy(values, packed, 16);
#pragma omp simd
    for (int j = 0; j < 8; j++) {
        h->scale[j] = d * (float)values[j];
        h->minimum[j] = dmin * (float)values[j + 8];
    }
}
#elif defined(FORMAT_Q6_K)
static inline void header(const uint8_t *block, block_header *h) {
    const int8_t *scales = (const int8_t *)(block + 192);
    const float d = half_to_float(block + 208);
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        h->scale[j] = d * (float)scales[j];
        h->minimum[j] = 0.0f;
    }
}
#elif defined(FORMAT_Q3_K)
static inline void header(const uint8_t *block, block_header *h) {
    const float d = half_to_float(block + 108);
    uint32_t packed[4];
    memcpy(packed, block + 96, 12);
    const uint32_t high = packed[2];
    packed[2] = ((packed[0] >> 4) & 0x0f0f0f0fu) | (((high >> 4) & 0x03030303u) << 4);
    packed[3] = ((packed[1] >> 4) & 0x0f0f0f0fu) | (((high >> 6) & 0x03030303u) << 4);
    packed[0] = (packed[0] & 0x0f0f0f0fu) | (((high >> 0) & 0x03030303u) << 4);
    packed[1] = (packed[1] & 0x0f0f0f0fu) | (((high >> 2) & 0x03030303u) << 4);
    uint8_t values[16];
    memcpy(values, packed, 16);
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        h->scale[j] = d * (float)((int)values[j] - 32);
        h->minimum[j] = 0.0f;
    }
}
#elif defined(FORMAT_Q2_K)
static inline void header(const uint8_t *block, block_header *h) {
    const float d = half_to_float(block + 80), dmin = half_to_float(block + 82);
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        h->scale[j] = d * (float)(block[j] & 0x0f);
        h->minimum[j] = dmin * (float)(block[j] >> 4);
    }
}
#elif defined(FORMAT_Q5_0) || defined(FORMAT_IQ4_NL)
static inline void header(const uint8_t *block, block_header *h) {
    h->scale[0] = half_to_float(block);
    h->minimum[0] = 0.0f;
}
#elif defined(FORMAT_Q5_1)
static inline void header(const uint8_t *block, block_header *h) {
    h->scale[0] = half_to_float(block);
    h->minimum[0] = -half_to_float(block + 2);
}
#elif defined(FORMAT_IQ4_XS)
static inline void header(const uint8_t *block, block_header *h) {
    const float d = half_to_float(block);
    const int high = block[2] | (block[3] << 8);
    for (int j = 0; j < 8; j++) {
        const int low = (block[4 + j / 2] >> (4 * (j % 2))) & 0x0f;
        h->scale[j] = d * (float)((low | (((high >> (2 * j)) & 3) << 4)) - 32);
        h->minimum[j] = 0.0f;
    }
}
#else
#error "define one FORMAT_* before this source"
#endif

/* ---- chunk_codes: chunk c's 32 codes, portable */
static inline void chunk_codes(const uint8_t *block, int c, int16_t *restrict q) {
#if defined(FORMAT_Q4_K)
    const uint8_t *codes = block + 16 + 32 * (c / 2);
    const int shift = 4 * (c % 2);
    for (int l = 0; l < 32; l++) q[l] = (int16_t)((codes[l] >> shift) & 0x0f);
#elif defined(FORMAT_Q5_K)
    const uint8_t *high = block + 16, *codes = block + 48 + 32 * (c / 2);
    const int shift = 4 * (c % 2);
    for (int l = 0; l < 32; l++)
        q[l] = (int16_t)(((codes[l] >> shift) & 0x0f) | (((high[l] >> c) & 1) << 4));
#elif defined(FORMAT_Q6_K)
    const int part = c / 4, quarter = c % 4;
    const uint8_t *low = block + 64 * part + 32 * (quarter & 1), *high = block + 128 + 32 * part;
    const int low_shift = 4 * (quarter >> 1), high_shift = 2 * quarter;
    for (int l = 0; l < 32; l++)
        q[l] = (int16_t)((((low[l] >> low_shift) & 0x0f) | (((high[l] >> high_shift) & 3) << 4))
                         - 32);
#elif defined(FORMAT_Q3_K)
    const uint8_t *mask = block, *codes = block + 32 + 32 * (c / 4);
    const int shift = 2 * (c % 4);
    for (int l = 0; l < 32; l++)
        q[l] = (int16_t)(((codes[l] >> shift) & 3) - (((mask[l] >> c) & 1) ? 0 : 4));
#elif defined(FORMAT_Q2_K)
    const uint8_t *codes = block + 16 + 32 * (c / 4);
    const int shift = 2 * (c % 4);
    for (int l = 0; l < 32; l++) q[l] = (int16_t)((codes[l] >> shift) & 3);
#elif defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
    (void)c;
#if defined(FORMAT_Q5_0)
    const uint8_t *bits = block + 2;
    const int offset = 16;
#else
    const uint8_t *bits = block + 4;
    const int offset = 0;
#endif
    uint32_t high;
    memcpy(&high, bits, 4);
    const uint8_t *codes = bits + 4;
    for (int l = 0; l < 16; l++) {
        q[l] = (int16_t)(((codes[l] & 0x0f) | (((high >> l) & 1) << 4)) - offset);
        q[l + 16] = (int16_t)(((codes[l] >> 4) | (((high >> (l + 16)) & 1) << 4)) - offset);
    }
#elif defined(FORMAT_IQ4_NL) || defined(FORMAT_IQ4_XS)
#if defined(FORMAT_IQ4_NL)
    (void)c;
    const uint8_t *codes = block + 2;
#else
    const uint8_t *codes = block + 8 + 16 * c;
#endif
    for (int l = 0; l < 16; l++) {
        q[l] = IQ4_VALUES[codes[l] & 0x0f];
        q[l + 16] = IQ4_VALUES[codes[l] >> 4];
    }
#endif
}

#if USE_AVX2
static inline __attribute__((always_inline)) __m256i shifted_bits(__m256i bytes, int shift,
                                                                  int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(shift)),
                            _mm256_set1_epi8((char)mask));
}

/* 16 bytes of two nibbles each: the low nibbles (codes 0-15) and the high ones (16-31). */
static inline __attribute__((always_inline)) void nibble_bytes(const uint8_t *p, __m128i *low,
                                                               __m128i *high) {
    const __m128i bytes = _mm_loadu_si128((const __m128i *)p);
    const __m128i mask = _mm_set1_epi8(0x0f);
    *low = _mm_and_si128(bytes, mask);
    *high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
}

/* 16 bytes, byte l = 0xff where bit l of the 16 bits ``bits`` is set. */
static inline __attribute__((always_inline)) __m128i bit_bytes16(uint32_t bits) {
    const __m128i spread = _mm_shuffle_epi8(_mm_set1_epi32((int)bits),
                                            _mm_set_epi64x(0x0101010101010101, 0));
    return _mm_cmpeq_epi8(_mm_or_si128(spread, _mm_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                          _mm_set1_epi64x(-1));
}

/* Chunk c's codes as two vectors of 16 int16 (codes 0-15, 16-31). */
static inline __attribute__((always_inline)) void chunk_vectors(const uint8_t *block, int c,
                                                                __m256i *low, __m256i *high) {
#if defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1) || defined(FORMAT_IQ4_NL) || \
    defined(FORMAT_IQ4_XS)
    /* nibble layouts: 128-bit steps, widened once */
    __m128i first, second;
#if defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
    (void)c;
    const uint8_t *bits = block + (BLOCK_BYTES == 22 ? 2 : 4);
    uint32_t high_bits;
    memcpy(&high_bits, bits, 4);
    nibble_bytes(bits + 4, &first, &second);
    const __m128i top = _mm_set1_epi8(0x10);
    first = _mm_or_si128(first, _mm_and_si128(bit_bytes16(high_bits & 0xffff), top));
    second = _mm_or_si128(second, _mm_and_si128(bit_bytes16(high_bits >> 16), top));
#if defined(FORMAT_Q5_0)
    first = _mm_sub_epi8(first, top);
    second = _mm_sub_epi8(second, top);
#endif
#else
#if defined(FORMAT_IQ4_NL)
    (void)c;
    nibble_bytes(block + 2, &first, &second);
#else
    nibble_bytes(block + 8 + 16 * c, &first, &second);
#endif
    const __m128i table = _mm_loadu_si128((const __m128i *)IQ4_VALUES);
    first = _mm_shuffle_epi8(table, first);
    second = _mm_shuffle_epi8(table, second);
#endif
    *low = _mm256_cvtepi8_epi16(first);
    *high = _mm256_cvtepi8_epi16(second);
#else
    __m256i codes;
#if defined(FORMAT_Q4_K)
    codes = shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 16 + 32 * (c / 2))),
                         4 * (c % 2), 0x0f);
#elif defined(FORMAT_Q5_K)
    codes = shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 48 + 32 * (c / 2))),
                         4 * (c % 2), 0x0f);
    const __m256i top = shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 16)), c, 1);
    codes = _mm256_or_si256(codes, _mm256_slli_epi16(top, 4));
#elif defined(FORMAT_Q6_K)
    const int part = c / 4, quarter = c % 4;
    codes = shifted_bits(
        _mm256_loadu_si256((const __m256i *)(block + 64 * part + 32 * (quarter & 1))),
        4 * (quarter >> 1), 0x0f);
    const __m256i top = shifted_bits(
        _mm256_loadu_si256((const __m256i *)(block + 128 + 32 * part)), 2 * quarter, 3);
    codes = _mm256_sub_epi8(_mm256_or_si256(codes, _mm256_slli_epi16(top, 4)),
                            _mm256_set1_epi8(32));
#elif defined(FORMAT_Q3_K)
    codes = shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 32 + 32 * (c / 4))),
                         2 * (c % 4), 3);
    const __m256i bit = _mm256_set1_epi8((char)(1 << c));
    const __m256i unset = _mm256_cmpeq_epi8(
        _mm256_and_si256(_mm256_loadu_si256((const __m256i *)block), bit), _mm256_setzero_si256());
    codes = _mm256_sub_epi8(codes, _mm256_and_si256(unset, _mm256_set1_epi8(4)));
#elif defined(FORMAT_Q2_K)
    codes = shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 16 + 32 * (c / 4))),
                         2 * (c % 4), 3);
#endif
    *low = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(codes));
    *high = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(codes, 1));
#endif
}

/* The header as vectors: lane j of scale[v] (minimum[v]) is header scale (offset) 8 v + j;
 * a block of one chunk has its scale in lane 0 and zeros elsewhere. */
typedef struct {
    __m256 scale[SCALES], minimum[SCALES];
} vector_header;

static inline __m256 byte_floats(__m128i bytes, int is_signed) {
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
}

#if defined(FORMAT_Q3_K)
/* q3_k's 16 scales as signed bytes: the 12 bytes at 96 as words a0, a1, h: scales (a0, a1,
 * a0 >> 4, a1 >> 4) & 0x0f0f0f0f, each with 2 bits of h (shifted 0, 2, 4, 6) above, less 32;
 * in vector steps (the 256-bit header and the AVX-512 pair header alike). */
static inline __m128i q3_k_scale_bytes(const uint8_t *block) {
    int32_t third;
    memcpy(&third, block + 104, 4);
    const __m128i words =
        _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)(block + 96)), third, 2);
    const __m128i nibbles = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi32(words, _MM_SHUFFLE(1, 0, 1, 0)), _mm_setr_epi32(0, 0, 4, 4)),
        _mm_set1_epi8(0x0f));
    const __m128i tops = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi32(words, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 2, 4, 6)),
        _mm_set1_epi8(3));
    const __m128i values = _mm_sub_epi8(_mm_or_si128(nibbles, _mm_slli_epi32(tops, 4)),
                                        _mm_set1_epi8(32));
    return values;
}
#endif

static inline __attribute__((always_inline)) void header_vectors(const uint8_t *block,
                                                                 vector_header *h) {
#if CHUNKS == 1
    block_header scalar;
    header(block, &scalar);
    h->scale[0] = _mm256_setr_ps(scalar.scale[0], 0, 0, 0, 0, 0, 0, 0);
    h->minimum[0] = _mm256_setr_ps(scalar.minimum[0], 0, 0, 0, 0, 0, 0, 0);
#elif defined(FORMAT_Q4_K) || defined(FORMAT_Q5_K)
    /* the 12 bytes s of 6-bit scales and minimums (ggml's get_scale_min_k4) in vector steps:
     * scales 0-3 s[0-3] & 63, 4-7 (s[8-11] & 15) | (s[0-3] >> 6) << 4; minimums 0-3
     * s[4-7] & 63, 4-7 (s[8-11] >> 4) | (s[4-7] >> 6) << 4 */
    const __m128i s = _mm_loadu_si128((const __m128i *)(block + 4)); /* 4 bytes past: unused */
    const __m128i low = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7,
                                                          8, 9, 10, 11));
    const __m128i top = _mm_shuffle_epi8(s, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1,
                                                          -1, -1, 4, 5, 6, 7));
    const __m128i values = _mm_or_si128(
        _mm_and_si128(_mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4)),
                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
        _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
    /* {d, dmin} */
    int32_t bits;
    memcpy(&bits, block, 4);
    const __m256 both = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
    h->scale[0] = _mm256_mul_ps(byte_floats(values, 0),
                                _mm256_permutevar8x32_ps(both, _mm256_setzero_si256()));
    h->minimum[0] = _mm256_mul_ps(byte_floats(_mm_srli_si128(values, 8), 0),
                                  _mm256_permutevar8x32_ps(both, _mm256_set1_epi32(1)));
#elif defined(FORMAT_Q6_K)
    const __m128i values = _mm_loadu_si128((const __m128i *)(block + 192));
    const __m256 d = _mm256_set1_ps(half_to_float(block + 208));
    h->scale[0] = _mm256_mul_ps(byte_floats(values, 1), d);
    h->scale[1] = _mm256_mul_ps(byte_floats(_mm_srli_si128(values, 8), 1), d);
    h->minimum[0] = h->minimum[1] = _mm256_setzero_ps();
#elif defined(FORMAT_Q3_K)
    const __m128i values = q3_k_scale_bytes(block);
    const __m256 d = _mm256_set1_ps(half_to_float(block + 108));
    h->scale[0] = _mm256_mul_ps(byte_floats(values, 1), d);
    h->scale[1] = _mm256_mul_ps(byte_floats(_mm_srli_si128(values, 8), 1), d);
    h->minimum[0] = h->minimum[1] = _mm256_setzero_ps();
#elif defined(FORMAT_Q2_K)
    const __m128i values = _mm_loadu_si128((const __m128i *)block);
    const __m128i scales = _mm_and_si128(values, _mm_set1_epi8(0x0f));
    const __m128i minimums = _mm_and_si128(_mm_srli_epi16(values, 4), _mm_set1_epi8(0x0f));
    const __m256 d = _mm256_set1_ps(half_to_float(block + 80));
    const __m256 dmin = _mm256_set1_ps(half_to_float(block + 82));
    h->scale[0] = _mm256_mul_ps(byte_floats(scales, 0), d);
    h->scale[1] = _mm256_mul_ps(byte_floats(_mm_srli_si128(scales, 8), 0), d);
    h->minimum[0] = _mm256_mul_ps(byte_floats(minimums, 0), dmin);
    h->minimum[1] = _mm256_mul_ps(byte_floats(_mm_srli_si128(minimums, 8), 0), dmin);
#elif defined(FORMAT_IQ4_XS)
    /* scale j: the nibble j of the 4 bytes at 4, with bits 2j, 2j + 1 of the 16 at 2 above
     * it, less 32; in 32-bit lanes by variable shifts */
    uint32_t low, high;
    memcpy(&low, block + 4, 4);
    memcpy(&high, block, 4);
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32((int)low), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(0x0f));
    const __m256i tops = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32((int)high),
                          _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30)),
        _mm256_set1_epi32(3));
    const __m256i values = _mm256_sub_epi32(_mm256_or_si256(nibbles, _mm256_slli_epi32(tops, 4)),
                                            _mm256_set1_epi32(32));
    h->scale[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(values), _mm256_set1_ps(half_to_float(block)));
    h->minimum[0] = _mm256_setzero_ps();
#endif
}
#endif

static inline void dequantize_block(const uint8_t *block, float *restrict out) {
    block_header h;
    header(block, &h);
    for (int c = 0; c < CHUNKS; c++) {
#if USE_AVX2
        /* the same products and differences, 8 at a time, from the codes as vectors (the
         * prompt path de-quantizes every weight per call: the codes one at a time took up to
         * 2.2 ns a value, q5_0) */
        __m256i halves[2];
        chunk_vectors(block, c, &halves[0], &halves[1]);
        for (int half = 0; half < 2; half++) {
            const int s = SCALES * c + (SCALES == 2 ? half : 0);
            const __m256 scale = _mm256_set1_ps(h.scale[s]), minimum = _mm256_set1_ps(h.minimum[s]);
            const __m256i codes = halves[half];
            _mm256_storeu_ps(out + 32 * c + 16 * half, _mm256_sub_ps(_mm256_mul_ps(
                scale, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(codes)))),
                minimum));
            _mm256_storeu_ps(out + 32 * c + 16 * half + 8, _mm256_sub_ps(_mm256_mul_ps(
                scale, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(codes, 1)))),
                minimum));
        }
#else
        int16_t q[32];
        chunk_codes(block, c, q);
        for (int l = 0; l < 32; l++) {
            const int s = SCALES * c + (SCALES == 2 ? l / 16 : 0);
            out[32 * c + l] = h.scale[s] * (float)q[l] - h.minimum[s];
        }
#endif
    }
}
#endif

#if USE_AVX2 && defined(CHUNKED) && CHUNKS > 1
/* ---- The decode kernel's view of the K formats and iq4_xs (quantized_decode.c's decode_tile;
 * the blocks of 32 values have their own tiles in quantized.c: iq4_nl measured no faster on
 * this one, slower at SmolLM2's rows of 576): chunk c's 32 codes as 32 bytes, byte l = code l,
 * as stored where they are unsigned (value = scale * (q - CODE_OFFSET) - minimum), as int8
 * where SIGNED_CODES (iq4_xs's table). */
#define SPLIT_DECODE 1
#if defined(FORMAT_IQ4_XS)
#define SIGNED_CODES 1
/* iq4_xs's codes meet the activations two chunks at a time (quantized_decode.c's INTERLEAVED
 * layout): code_halves gives chunks c and c + 1's codes 0-15 side by side (the low nibbles of
 * both) and their codes 16-31 (the high nibbles) */
#define INTERLEAVED 1
#endif
/* q6_k's and q3_k's codes read as stored (0-63, 0-7): value = scale * (q - offset) */
#if defined(FORMAT_Q6_K)
#define CODE_OFFSET 32.0f
#elif defined(FORMAT_Q3_K)
#define CODE_OFFSET 4.0f
#endif

/* 16-bit lanes shifted right by ``shift`` bits (left by -shift where negative; a constant in
 * the unrolled loops, so one instruction or none) */
static inline __attribute__((always_inline)) __m256i shift_lanes(__m256i v, int shift) {
    if (shift > 0) return _mm256_srli_epi16(v, shift);
    if (shift < 0) return _mm256_slli_epi16(v, -shift);
    return v;
}

/* (a & mask) | b per byte (b already clear where mask is set): one ternary-logic step */
static inline __attribute__((always_inline)) __m256i merge_bits(__m256i a, int mask, __m256i b) {
#if defined(__AVX512VL__) && !defined(NO_AVX512)
    return _mm256_ternarylogic_epi32(a, b, _mm256_set1_epi8((char)mask), 0xec);
#else
    return _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi8((char)mask)), b);
#endif
}

#if !defined(INTERLEAVED)
static inline __attribute__((always_inline)) __m256i code_bytes(const uint8_t *block, int c) {
#if defined(FORMAT_Q4_K)
    return shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 16 + 32 * (c / 2))),
                        4 * (c % 2), 0x0f);
#elif defined(FORMAT_Q5_K)
    /* the nibble, and bit c of the 32 bytes at 16 moved to bit 4 */
    const __m256i top = _mm256_and_si256(
        shift_lanes(_mm256_loadu_si256((const __m256i *)(block + 16)), c - 4),
        _mm256_set1_epi8(0x10));
    return merge_bits(shift_lanes(_mm256_loadu_si256((const __m256i *)(block + 48 + 32 * (c / 2))),
                                  4 * (c % 2)), 0x0f, top);
#elif defined(FORMAT_Q6_K)
    /* the nibble, and bits 2 quarter, 2 quarter + 1 of the 32 bytes at 128 + 32 part moved to
     * bits 4, 5 */
    const int part = c / 4, quarter = c % 4;
    const __m256i top = _mm256_and_si256(
        shift_lanes(_mm256_loadu_si256((const __m256i *)(block + 128 + 32 * part)),
                    2 * quarter - 4),
        _mm256_set1_epi8(0x30));
    return merge_bits(
        shift_lanes(_mm256_loadu_si256((const __m256i *)(block + 64 * part + 32 * (quarter & 1))),
                    4 * (quarter >> 1)),
        0x0f, top);
#elif defined(FORMAT_Q3_K)
    /* 0-7: the two low bits, plus 4 where the mask bit is set (its value: q - 4): bit c of
     * the 32 mask bytes moved to bit 2 */
    const __m256i top = _mm256_and_si256(
        shift_lanes(_mm256_loadu_si256((const __m256i *)block), c - 2), _mm256_set1_epi8(4));
    return merge_bits(
        shift_lanes(_mm256_loadu_si256((const __m256i *)(block + 32 + 32 * (c / 4))), 2 * (c % 4)),
        3, top);
#elif defined(FORMAT_Q2_K)
    return shifted_bits(_mm256_loadu_si256((const __m256i *)(block + 16 + 32 * (c / 4))),
                        2 * (c % 4), 3);
#endif
}
#endif

#if defined(INTERLEAVED)
/* Chunks c and c + 1 of a block: *first = their codes 0-15 (chunk c's in bytes 0-15, chunk
 * c + 1's in 16-31), *second = their codes 16-31, as int8 (iq4's table). */
static inline __attribute__((always_inline)) void code_halves(const uint8_t *block, int c,
                                                              __m256i *first,
                                                              __m256i *second) {
    const __m256i bytes = _mm256_loadu_si256((const __m256i *)(block + 8 + 16 * c));
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)IQ4_VALUES));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    *first = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, mask));
    *second = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask));
}
#endif

#if (defined(FORMAT_Q6_K) || defined(FORMAT_Q3_K) || defined(FORMAT_Q2_K)) && \
    defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VNNI__) && !defined(NO_AVX512)
/* AVX-512, the K formats of two scales per chunk: the decode kernel takes two chunks per
 * step (PAIRED; measured in-cache, one thread, ns per 32 weights: q6_k 1.14 -> 1.11, q3_k
 * 1.28 -> 1.155, q2_k 1.07 -> 0.955 with header_pair's 16-lane headers; q4_k and q5_k
 * ran 0.92 -> 1.15 and 1.09 -> 1.28 so, and keep the 256-bit tile).
 * code_pair(block, p): chunks 2p and 2p + 1 as 64 bytes (code_bytes of each, side by side),
 * from one broadcast load of the bytes they share, shifted per half by variable counts; a
 * top bit moved into place by one rotate per 64-bit lane (bits never leave their byte). */
#define PAIRED 1

/* 64 bytes: the 32 at p twice (the pair's two chunks read the same bytes) */
static inline __attribute__((always_inline)) __m512i twice(const uint8_t *p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* bit ``first`` (``second``) of each byte of the first (last) 32 bytes moved to bit ``to``
 * (``to_second``; the other bits left where they land: the caller masks) */
static inline __attribute__((always_inline)) __m512i moved_bits_to(__m512i v, int first,
                                                                   int second, int to,
                                                                   int to_second) {
    const long long a = (first - to) & 63, b = (second - to_second) & 63;
    return _mm512_rorv_epi64(v, _mm512_setr_epi64(a, a, a, a, b, b, b, b));
}

static inline __attribute__((always_inline)) __m512i moved_bits(__m512i v, int first,
                                                                int second, int to) {
    const long long a = (first - to) & 63, b = (second - to) & 63;
    return _mm512_rorv_epi64(v, _mm512_setr_epi64(a, a, a, a, b, b, b, b));
}

/* 64 bytes: ``first`` in the first 32, ``second`` in the last */
static inline __attribute__((always_inline)) __m512i both_halves(int first, int second) {
    return _mm512_inserti64x4(_mm512_set1_epi8((char)first), _mm256_set1_epi8((char)second), 1);
}

#if defined(FORMAT_Q3_K) || defined(FORMAT_Q2_K)
/* q3_k's and q2_k's code_pair leaves each pair's second chunk's codes 2 bits up (4 q): its
 * factors are a quarter (exact), lanes 2c + h of odd chunks c */
#define CODE_SCALES _mm512_setr_ps(1, 1, 0.25f, 0.25f, 1, 1, 0.25f, 0.25f, 1, 1, 0.25f, 0.25f, \
                                   1, 1, 0.25f, 0.25f)
#endif

static inline __attribute__((always_inline)) __m512i code_pair(const uint8_t *block, int p) {
#if defined(FORMAT_Q6_K)
    const int part = p / 2, quarter = 2 * (p % 2);
    const __m512i nibbles = _mm512_loadu_si512((const void *)(block + 64 * part));
    const __m512i top = _mm512_and_si512(
        moved_bits(twice(block + 128 + 32 * part), 2 * quarter, 2 * quarter + 2, 4),
        _mm512_set1_epi8(0x30));
    return _mm512_ternarylogic_epi32(quarter ? _mm512_srli_epi16(nibbles, 4) : nibbles, top,
                                     _mm512_set1_epi8(0x0f), 0xec);
#elif defined(FORMAT_Q3_K)
    /* chunk c: the two bits at 2 (c % 4) of the 32 bytes at 32 + 32 (c / 4), plus 4 where
     * bit c of the 32 mask bytes is set; the second chunk's code left 2 bits up (CODE_SCALES) */
    const __m512i codes = twice(block + 32 + 32 * (p / 2));
    const __m512i top = _mm512_and_si512(moved_bits_to(twice(block), 2 * p, 2 * p + 1, 2, 4),
                                         both_halves(0x04, 0x10));
    return _mm512_ternarylogic_epi32(p % 2 ? _mm512_srli_epi16(codes, 4) : codes, top,
                                     both_halves(0x03, 0x0c), 0xec);
#else
    /* the second chunk's code left 2 bits up (CODE_SCALES) */
    const __m512i codes = twice(block + 16 + 32 * (p / 2));
    return _mm512_and_si512(p % 2 ? _mm512_srli_epi16(codes, 4) : codes,
                            both_halves(0x03, 0x0c));
#endif
}

/* The block's scales and offsets per half chunk in 16 lanes (lane 2c + h: chunk c's half h),
 * value = scale * q - minimum; codes read as stored (CODE_OFFSET) have minimum = scale *
 * CODE_OFFSET. */
static inline __attribute__((always_inline)) void header_pair(const uint8_t *block,
                                                              __m512 *scale,
                                                              __m512 *minimum) {
#if defined(FORMAT_Q6_K) || defined(FORMAT_Q3_K)
#if defined(FORMAT_Q6_K)
    const __m128i values = _mm_loadu_si128((const __m128i *)(block + 192));
    const __m512 d = _mm512_set1_ps(half_to_float(block + 208));
#else
    const __m128i values = q3_k_scale_bytes(block);
    const __m512 d = _mm512_set1_ps(half_to_float(block + 108));
#endif
    *scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(values)), d);
    *minimum = _mm512_mul_ps(*scale, _mm512_set1_ps(CODE_OFFSET));
#elif defined(FORMAT_Q2_K)
    /* byte j: scale j (low nibble), minimum j (high nibble); widened once */
    const __m512i values = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)block));
    int32_t bits; /* d, dmin: one conversion */
    memcpy(&bits, block + 80, 4);
    const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    *scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(values, _mm512_set1_epi32(0x0f))),
                           _mm512_broadcastss_ps(both));
    *minimum = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(values, 4)),
                             _mm512_broadcastss_ps(_mm_movehdup_ps(both)));
#endif
}
#endif
#endif
