/* The quantized convolution QLINEAR_CONV for fuel's CPU backend (qlinear_conv.py drives it):
 * 8-bit activations times int8 weights (the weights less their zero point) summed exactly in
 * int32, then re-quantized like onnxruntime: the sum plus the bias, as float, times the
 * channel's multiplier, rounded half to even, plus the output zero point, saturated.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {x (uint8 or int8, N x C x H x W), w (int8, M x C/groups x KH x KW),
 *            bias (int32, M), multiplier (float32, M), out (uint8 or int8, N x M x OH x OW)}
 *   sizes = {threads, N, C, H, W, M, KH, KW, OH, OW, stride_h, stride_w, dilation_h,
 *            dilation_w, pad_top, pad_left, groups, x_zero, y_zero, x_signed, y_signed}
 *   (a 1-d convolution is a 2-d one of height 1; the padding holds x_zero: it adds 0.)
 *
 * Activations are handled as unsigned bytes u = x (uint8) or x + 128 (int8, its zero point
 * moved by 128 too), so sum (x - x_zero) * w = sum u * w - u_zero * sum w.
 *
 * Forms (picked in qlinear_conv_vnni.c's fuel_kernel):
 *   depthwise (groups == C == M; qlinear_depthwise.c): with AVX512-VBMI + VNNI by byte quads
 *     (exact int32, any bias); else float32 sums of integers below 2**24 (exact) for at most
 *     256 taps and |bias| < 2**23; a window over the whole plane as one dot product.
 *   channels last (qlinear_conv_vnni.c): 32 or more input channels per group, not 1x1
 *     unless at most 8 positions.
 *   gemm (the rest): per image and group out[m, p] = sum_k w[m, k] * B[k, p] with B the patch
 *     matrix of u (written a band of output rows at a time, or the input as stored for an unpadded
 *     stride-1 1x1 kernel), re-packed 16 positions at a time into panels of k quads so that
 *     one vpdpbusd (AVX512-VNNI: u8 x s8, four products into int32, exact) serves 16 positions
 *     of one weight row; a 6 x 16 register tile, 6 x 64 (four panels) up to a depth of 256
 *     (zmm, re-quantized in registers, weights as
 *     gemm_pack's per-step int32 of 6 rows, with AVX-512); the re-quantization on the tile.
 *     Without VNNI the panels hold k pairs of (u - u_zero) as int16 for vpmaddwd (AVX2, also
 *     exact), or a scalar loop. Threads split the patch matrix's rows, then the panels.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define VNNI 1
#define STEP 4 /* k per panel step */
#elif defined(__AVX2__)
#define PAIRS 1
#define STEP 2
#else
#define STEP 1
#endif

typedef struct {
    int64_t threads, n, c, h, w, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, groups, xz, yz,
        x_signed, y_signed;
} Q;

#define MR 6
#define NR 16
#define BAND (512 << 10) /* bytes of the patch matrix per band of output rows */

static inline void store_y(uint8_t *out, int64_t i, int32_t v, const Q *q) {
    if (q->y_signed) {
        v = v < -128 ? -128 : (v > 127 ? 127 : v);
        ((int8_t *)out)[i] = (int8_t)v;
    } else {
        v = v < 0 ? 0 : (v > 255 ? 255 : v);
        out[i] = (uint8_t)v;
    }
}

/* round half to even of acc * scale (the MXCSR's default rounding), plus the zero point */
static inline int32_t requantize(int32_t acc, float scale, int64_t yz) {
    return (int32_t)lrintf((float)acc * scale) + (int32_t)yz;
}

/* Per-thread scratch `slot` (0-3) of at least `bytes`, 64-byte aligned, grown as needed,
 * kept. */
static void *scratch(int slot, size_t bytes) {
    static __thread void *buffers[4];
    static __thread size_t sizes[4];
    if (sizes[slot] < bytes || buffers[slot] == NULL) {
        free(buffers[slot]);
        buffers[slot] = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
        sizes[slot] = buffers[slot] != NULL ? bytes : 0;
    }
    return buffers[slot];
}

/* The calling thread's buffer of at least `bytes`, which its team then shares. */
static uint8_t *shared_buffer(size_t bytes) {
    static __thread uint8_t *buffer;
    static __thread size_t size;
    if (size < bytes || buffer == NULL) {
        free(buffer);
        buffer = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
        size = buffer != NULL ? bytes : 0;
    }
    return buffer;
}

/* ------------------------------------------------------------------ gemm */

/* Row k = (c, kh, kw) of the patch matrix of one image and group over output rows [oh0, oh1):
 * u at each output position (u_zero in the padding); `flip` turns int8 into u (x ^ 0x80). */
static void patch_row(const uint8_t *x, int64_t k, uint8_t *row, uint8_t uz, uint8_t flip,
                      int64_t oh0, int64_t oh1, const Q *q) {
    const int64_t area = q->kh * q->kw, c = k / area, kh = k % area / q->kw, kw = k % q->kw;
    const int64_t off = kw * q->dw - q->pl;
    int64_t lo = off >= 0 ? 0 : (-off + q->sw - 1) / q->sw; /* ow with 0 <= ow*sw+off < W */
    int64_t hi = q->w - off <= 0 ? 0 : (q->w - off - 1) / q->sw + 1;
    if (lo > q->ow) lo = q->ow;
    if (hi > q->ow) hi = q->ow;
    if (hi < lo) hi = lo;
    for (int64_t oh = oh0; oh < oh1; oh++) {
        uint8_t *target = row + (oh - oh0) * q->ow;
        const int64_t ih = oh * q->sh + kh * q->dh - q->pt;
        if (ih < 0 || ih >= q->h) {
            memset(target, uz, (size_t)q->ow);
            continue;
        }
        const uint8_t *source = x + (c * q->h + ih) * q->w + off;
        memset(target, uz, (size_t)lo);
        if (q->sw == 1 && !flip)
            memcpy(target + lo, source + lo, (size_t)(hi - lo));
        else {
            int64_t ow = lo;
#if defined(__AVX2__)
            if (q->sw == 2) { /* 16 even bytes of 32 per step, while the 32 stay in the row */
                const __m128i low = _mm_set1_epi16(0x00ff), mask = _mm_set1_epi8((char)flip);
                for (; ow + 16 <= hi && off + 2 * ow + 32 <= q->w; ow += 16) {
                    const __m128i a = _mm_loadu_si128((const __m128i *)(source + 2 * ow));
                    const __m128i b = _mm_loadu_si128((const __m128i *)(source + 2 * ow + 16));
                    const __m128i even = _mm_packus_epi16(_mm_and_si128(a, low),
                                                          _mm_and_si128(b, low));
                    _mm_storeu_si128((__m128i *)(target + ow), _mm_xor_si128(even, mask));
                }
            }
#endif
            for (; ow < hi; ow++) target[ow] = source[ow * q->sw] ^ flip;
        }
        memset(target + hi, uz, (size_t)(q->ow - hi));
    }
}

/* Panel of positions [p0, p0 + NR) from the patch matrix B (depth rows, `stride` apart):
 * STEP consecutive k of one position side by side (u8 for VNNI; int16 u - u_zero for the
 * AVX2 pairs and the scalar loop). Past the last row or position: u_zero (adds 0). */
static void pack_panel(const uint8_t *b, int64_t stride, int64_t depth, int64_t p0,
                       int64_t cols, uint8_t flip, uint8_t uz, void *panel) {
    const int64_t steps = (depth + STEP - 1) / STEP;
    int64_t i = 0;
#if defined(VNNI)
    if (cols == NR) { /* 4 rows of 16 bytes interleaved into 16 quads by byte/word unpacks */
        const __m128i mask = _mm_set1_epi8((char)flip);
        for (; (i + 1) * 4 <= depth; i++) {
            const uint8_t *row = b + i * 4 * stride + p0;
            const __m128i a0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)row), mask);
            const __m128i a1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row + stride)),
                                             mask);
            const __m128i a2 = _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(row + 2 * stride)), mask);
            const __m128i a3 = _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(row + 3 * stride)), mask);
            const __m128i t0 = _mm_unpacklo_epi8(a0, a1), t1 = _mm_unpackhi_epi8(a0, a1);
            const __m128i t2 = _mm_unpacklo_epi8(a2, a3), t3 = _mm_unpackhi_epi8(a2, a3);
            __m128i *target = (__m128i *)((uint8_t *)panel + i * NR * STEP);
            _mm_store_si128(target, _mm_unpacklo_epi16(t0, t2));
            _mm_store_si128(target + 1, _mm_unpackhi_epi16(t0, t2));
            _mm_store_si128(target + 2, _mm_unpacklo_epi16(t1, t3));
            _mm_store_si128(target + 3, _mm_unpackhi_epi16(t1, t3));
        }
    }
#endif
    for (; i < steps; i++) {
        for (int s = 0; s < STEP; s++) {
            const int64_t k = i * STEP + s;
            const uint8_t *row = k < depth ? b + k * stride + p0 : NULL;
#if defined(VNNI)
            uint8_t *target = (uint8_t *)panel + i * NR * STEP + s;
            for (int64_t j = 0; j < NR; j++)
                target[j * STEP] = row != NULL && j < cols ? row[j] ^ flip : uz;
#else
            int16_t *target = (int16_t *)panel + i * NR * STEP + s;
            for (int64_t j = 0; j < NR; j++)
                target[j * STEP] = row != NULL && j < cols ? (int16_t)((row[j] ^ flip) - uz) : 0;
#endif
        }
    }
}

/* STEP weights of row `row` from k = i * STEP, packed for one broadcast (0 past depth). */
static inline int32_t weights_at(const int8_t *row, int64_t i, int64_t depth) {
#if defined(VNNI)
    if ((i + 1) * 4 <= depth) {
        int32_t v;
        memcpy(&v, row + i * 4, sizeof(v));
        return v;
    }
    uint32_t v = 0;
    for (int64_t s = 0; s < 4 && i * 4 + s < depth; s++)
        v |= (uint32_t)(uint8_t)row[i * 4 + s] << (8 * s);
    return (int32_t)v;
#elif defined(PAIRS)
    const uint16_t low = (uint16_t)(int16_t)row[2 * i];
    const uint16_t high = 2 * i + 1 < depth ? (uint16_t)(int16_t)row[2 * i + 1] : 0;
    return (int32_t)((uint32_t)low | ((uint32_t)high << 16));
#else
    return row[i];
#endif
}

/* acc (MR x NR int32) = rows [m0, m0 + rows) of w times the panel. */
__attribute__((noinline)) static void tile(const int8_t *w, int64_t depth, int64_t m0, int rows,
                                          const void *panel,
                 int32_t *acc) {
    const int64_t steps = (depth + STEP - 1) / STEP;
    const int8_t *row[MR];
    for (int r = 0; r < MR; r++) row[r] = w + (m0 + (r < rows ? r : 0)) * depth;
#if defined(VNNI) || defined(PAIRS)
    __m256i c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm256_setzero_si256();
    const int64_t whole = depth / STEP; /* steps whose weights are read as one int32 */
    for (int64_t i = 0; i < steps; i++) {
#if defined(VNNI)
        const uint8_t *base = (const uint8_t *)panel + i * NR * STEP;
#else
        const int16_t *base = (const int16_t *)panel + i * NR * STEP;
#endif
        const __m256i b0 = _mm256_load_si256((const __m256i *)base);
        const __m256i b1 = _mm256_load_si256((const __m256i *)base + 1);
        for (int r = 0; r < MR; r++) {
            int32_t value;
#if defined(VNNI)
            if (i < whole)
                memcpy(&value, row[r] + i * 4, sizeof(value));
            else
#endif
                value = weights_at(row[r], i, depth);
            (void)whole;
            const __m256i a = _mm256_set1_epi32(value);
#if defined(VNNI)
            c[r][0] = _mm256_dpbusd_epi32(c[r][0], b0, a);
            c[r][1] = _mm256_dpbusd_epi32(c[r][1], b1, a);
#else
            c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(a, b0));
            c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(a, b1));
#endif
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_si256((__m256i *)(acc + r * NR), c[r][0]);
        _mm256_storeu_si256((__m256i *)(acc + r * NR + 8), c[r][1]);
    }
#else
    const int16_t *b = panel;
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            int32_t sum = 0;
            for (int64_t i = 0; i < steps; i++) sum += (int32_t)row[r][i] * b[i * NR + j];
            acc[r * NR + j] = sum;
        }
#endif
}

#if defined(VNNI) && defined(__AVX512F__)
#define TILE_OUT 1

/* The weights for tile_out: per group, per block of MR rows, per k step the MR rows' 4
 * weights as one int32 each (zeros past the rows and the depth); then every row's sum. */
static size_t gemm_packed_bytes(int64_t groups, int64_t per_out, int64_t depth) {
    const int64_t blocks = (per_out + MR - 1) / MR;
    return sizeof(int32_t) * (size_t)(groups * (blocks * MR * ((depth + 3) / 4) + per_out));
}

static void gemm_pack(const int8_t *w, int64_t groups, int64_t per_out, int64_t depth,
                      int32_t *packed) {
    const int64_t steps = (depth + 3) / 4, blocks = (per_out + MR - 1) / MR;
    int32_t *sums = packed + groups * blocks * MR * steps;
    for (int64_t group = 0; group < groups; group++)
        for (int64_t block = 0; block < blocks; block++)
            for (int r = 0; r < MR; r++) {
                const int64_t row = block * MR + r;
                const int8_t *source = w + (group * per_out + row) * depth;
                int32_t *target = packed + (group * blocks + block) * MR * steps + r;
                for (int64_t i = 0; i < steps; i++) {
                    uint32_t value = 0;
                    for (int64_t t = 0; t < 4 && row < per_out && 4 * i + t < depth; t++)
                        value |= (uint32_t)(uint8_t)source[4 * i + t] << (8 * t);
                    target[i * MR] = (int32_t)value;
                }
            }
    for (int64_t row = 0; row < groups * per_out; row++) {
        int32_t total = 0;
        for (int64_t k = 0; k < depth; k++) total += w[row * depth + k];
        sums[row] = total;
    }
}

/* tile() on gemm_pack's weights `w`, and the re-quantization in registers: rows [m0, m0 + rows) times the panel,
 * each row's 16 sums (one zmm vpdpbusd per row and panel step: a ymm one retires half the
 * products per cycle on some cores) re-quantized and stored at target + m * plane (the first
 * `cols` bytes). */
__attribute__((noinline)) static void tile_out(const int32_t *w, int64_t depth, int64_t m0,
                                               int rows, const void *panel,
                                               const int32_t *bias, const int32_t *sums,
                                               int32_t correction, const float *mult,
                                               uint8_t *target, int64_t plane, int cols,
                                               const Q *q) {
    const int64_t steps = (depth + STEP - 1) / STEP;
    const int32_t *weights = (const int32_t *)w; /* this block's */
    /* two sets of MR accumulators, even and odd steps: 6 chains of vpdpbusd wait on its
     * latency (5 cycles, 2 a cycle on Sapphire Rapids) where 12 keep both ports busy */
    __m512i c[MR], d[MR];
    for (int r = 0; r < MR; r++) c[r] = d[r] = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 2 <= steps; i += 2) {
        const __m512i b = _mm512_load_si512((const uint8_t *)panel + i * NR * STEP);
        const __m512i e = _mm512_load_si512((const uint8_t *)panel + (i + 1) * NR * STEP);
        for (int r = 0; r < MR; r++) {
            c[r] = _mm512_dpbusd_epi32(c[r], b, _mm512_set1_epi32(weights[i * MR + r]));
            d[r] = _mm512_dpbusd_epi32(d[r], e, _mm512_set1_epi32(weights[(i + 1) * MR + r]));
        }
    }
    if (i < steps) {
        const __m512i b = _mm512_load_si512((const uint8_t *)panel + i * NR * STEP);
        for (int r = 0; r < MR; r++)
            c[r] = _mm512_dpbusd_epi32(c[r], b, _mm512_set1_epi32(weights[i * MR + r]));
    }
    for (int r = 0; r < MR; r++) c[r] = _mm512_add_epi32(c[r], d[r]);
    const __m512i zero = _mm512_set1_epi32((int32_t)q->yz);
    const __mmask16 mask = (__mmask16)((1u << cols) - 1);
    for (int r = 0; r < rows; r++) {
        const int64_t m = m0 + r;
        const __m512i sum = _mm512_add_epi32(
            c[r], _mm512_set1_epi32(bias[m] - correction * sums[m]));
        const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(
            _mm512_cvtepi32_ps(sum), _mm512_set1_ps(mult[m]))), zero);
        const __m128i bytes = q->y_signed ? _mm512_cvtsepi32_epi8(v)
            : _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()));
        if (cols == NR)
            _mm_storeu_si128((__m128i *)(target + m * plane), bytes);
        else
            _mm_mask_storeu_epi8(target + m * plane, mask, bytes);
    }
}

/* tile_out over 4 panels side by side (64 positions, 24 accumulators; the last panel's
 * first `cols` positions stored): the rows' weights broadcast once per 4 panels and each
 * row's bias shift and multiplier set once, where a pointwise launch of few input channels
 * (16->96 at 112x112: 4 k steps per panel) spent most of a tile on its setup. At any depth:
 * 24 independent chains keep vpdpbusd's ports busy, and the panels streamed from L2 past
 * 48 KiB cost less than tile_out's 6 chains (one thread, Xeon Sapphire Rapids: 512->256 1x1
 * at 28x28 557 -> 310 us, 1024->256 at 14x14 304 -> 187 us; onnxruntime 298 and 149). */
static inline __attribute__((always_inline)) void tile_out4_row(
        __m512i c0, __m512i c1, __m512i c2, __m512i c3, int64_t m, const int32_t *bias,
        const int32_t *sums, int32_t correction, const float *mult, uint8_t *target,
        int64_t plane, const Q *q, __mmask16 last) {
    const __m512i zero = _mm512_set1_epi32((int32_t)q->yz);
    const __m512i shift = _mm512_set1_epi32(bias[m] - correction * sums[m]);
    const __m512 scale = _mm512_set1_ps(mult[m]);
    const __m512i c[4] = {c0, c1, c2, c3};
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_add_epi32(c[j], shift)), scale)), zero);
        const __m128i bytes = q->y_signed ? _mm512_cvtsepi32_epi8(v)
            : _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()));
        if (j < 3)
            _mm_storeu_si128((__m128i *)(target + m * plane + j * NR), bytes);
        else
            _mm_mask_storeu_epi8(target + m * plane + j * NR, last, bytes);
    }
}

__attribute__((noinline)) static void tile_out4(const int32_t *weights, int64_t steps,
                                                int64_t m0, int rows, const uint8_t *panels,
                                                size_t panel_bytes, const int32_t *bias,
                                                const int32_t *sums, int32_t correction,
                                                const float *mult, uint8_t *target,
                                                int64_t plane, int cols, const Q *q) {
    const __mmask16 last = (__mmask16)(cols >= NR ? 0xffff : (1u << cols) - 1);
    __m512i c00 = _mm512_setzero_si512(), c01 = _mm512_setzero_si512(), c02 = _mm512_setzero_si512(), c03 = _mm512_setzero_si512(), c04 = _mm512_setzero_si512(), c05 = _mm512_setzero_si512(), c10 = _mm512_setzero_si512(), c11 = _mm512_setzero_si512(), c12 = _mm512_setzero_si512(), c13 = _mm512_setzero_si512(), c14 = _mm512_setzero_si512(), c15 = _mm512_setzero_si512(), c20 = _mm512_setzero_si512(), c21 = _mm512_setzero_si512(), c22 = _mm512_setzero_si512(), c23 = _mm512_setzero_si512(), c24 = _mm512_setzero_si512(), c25 = _mm512_setzero_si512(), c30 = _mm512_setzero_si512(), c31 = _mm512_setzero_si512(), c32 = _mm512_setzero_si512(), c33 = _mm512_setzero_si512(), c34 = _mm512_setzero_si512(), c35 = _mm512_setzero_si512();
    for (int64_t i = 0; i < steps; i++) { /* named accumulators: an array spilled */
        const __m512i b0 = _mm512_load_si512(panels + i * NR * STEP);
        const __m512i b1 = _mm512_load_si512(panels + panel_bytes + i * NR * STEP);
        const __m512i b2 = _mm512_load_si512(panels + 2 * panel_bytes + i * NR * STEP);
        const __m512i b3 = _mm512_load_si512(panels + 3 * panel_bytes + i * NR * STEP);
        __m512i a;
        a = _mm512_set1_epi32(weights[i * MR + 0]);
        c00 = _mm512_dpbusd_epi32(c00, b0, a);
        c10 = _mm512_dpbusd_epi32(c10, b1, a);
        c20 = _mm512_dpbusd_epi32(c20, b2, a);
        c30 = _mm512_dpbusd_epi32(c30, b3, a);
        a = _mm512_set1_epi32(weights[i * MR + 1]);
        c01 = _mm512_dpbusd_epi32(c01, b0, a);
        c11 = _mm512_dpbusd_epi32(c11, b1, a);
        c21 = _mm512_dpbusd_epi32(c21, b2, a);
        c31 = _mm512_dpbusd_epi32(c31, b3, a);
        a = _mm512_set1_epi32(weights[i * MR + 2]);
        c02 = _mm512_dpbusd_epi32(c02, b0, a);
        c12 = _mm512_dpbusd_epi32(c12, b1, a);
        c22 = _mm512_dpbusd_epi32(c22, b2, a);
        c32 = _mm512_dpbusd_epi32(c32, b3, a);
        a = _mm512_set1_epi32(weights[i * MR + 3]);
        c03 = _mm512_dpbusd_epi32(c03, b0, a);
        c13 = _mm512_dpbusd_epi32(c13, b1, a);
        c23 = _mm512_dpbusd_epi32(c23, b2, a);
        c33 = _mm512_dpbusd_epi32(c33, b3, a);
        a = _mm512_set1_epi32(weights[i * MR + 4]);
        c04 = _mm512_dpbusd_epi32(c04, b0, a);
        c14 = _mm512_dpbusd_epi32(c14, b1, a);
        c24 = _mm512_dpbusd_epi32(c24, b2, a);
        c34 = _mm512_dpbusd_epi32(c34, b3, a);
        a = _mm512_set1_epi32(weights[i * MR + 5]);
        c05 = _mm512_dpbusd_epi32(c05, b0, a);
        c15 = _mm512_dpbusd_epi32(c15, b1, a);
        c25 = _mm512_dpbusd_epi32(c25, b2, a);
        c35 = _mm512_dpbusd_epi32(c35, b3, a);
    }
    if (rows > 0) tile_out4_row(c00, c10, c20, c30, m0 + 0, bias, sums, correction, mult, target, plane, q, last);
    if (rows > 1) tile_out4_row(c01, c11, c21, c31, m0 + 1, bias, sums, correction, mult, target, plane, q, last);
    if (rows > 2) tile_out4_row(c02, c12, c22, c32, m0 + 2, bias, sums, correction, mult, target, plane, q, last);
    if (rows > 3) tile_out4_row(c03, c13, c23, c33, m0 + 3, bias, sums, correction, mult, target, plane, q, last);
    if (rows > 4) tile_out4_row(c04, c14, c24, c34, m0 + 4, bias, sums, correction, mult, target, plane, q, last);
    if (rows > 5) tile_out4_row(c05, c15, c25, c35, m0 + 5, bias, sums, correction, mult, target, plane, q, last);
}
#endif

#if defined(__AVX2__)
/* 16 sums re-quantized and saturated to bytes (the packs saturate as store_y clamps). */
static inline void store_row(const int32_t *acc, int32_t shift, float scale, uint8_t *target,
                             const Q *q) {
    const __m256i add = _mm256_set1_epi32(shift), zero = _mm256_set1_epi32((int32_t)q->yz);
    const __m256 factor = _mm256_set1_ps(scale);
    __m256i v[2];
    for (int h = 0; h < 2; h++) {
        const __m256i sum = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)acc + h), add);
        v[h] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(sum),
                                                                 factor)), zero);
    }
    /* int32 -> int16 (saturating) per 128-bit lane, then fix the lane order */
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xd8);
    const __m128i low = _mm256_castsi256_si128(words), high = _mm256_extracti128_si256(words, 1);
    const __m128i bytes = q->y_signed ? _mm_packs_epi16(low, high) : _mm_packus_epi16(low, high);
    _mm_storeu_si128((__m128i *)target, bytes);
}
#endif
