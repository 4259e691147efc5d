/* float32 direct convolution for few input channels (a network's stem: 3 channels of an image,
 * 3x3 to 7x7, stride 2), after conv_common.h; data and sizes as conv.c's, groups 1.
 *
 * The implicit GEMM of conv.c packs C * KH * KW patch values per output position to feed one
 * multiply-add per value and output channel block, and with 3 input channels the packing
 * costs more than the products. Here a unit (one output row of one image) first lays out the
 * input rows it reads as stride phases with their padding (direct_rows), so each tap's 16
 * output columns are one plain load; tiles of 8 output channels x 48 columns (8 x 32 or
 * 16 x 16 at a row's end) take them, the weights broadcast from a copy packed per launch
 * ([tap][M rounded up to 16], zero past M). The bias starts the accumulators; the residual
 * and the activation are applied on them as they are stored (conv_common.h's act16).
 * In-process A/B against 16 x 16 tiles fed by masked loads and permutes, two threads:
 * 3->32 3x3 stride 2 at 224x224 128 -> 122 us, at 320x320 303 -> 273, 3->64 258 -> 224
 * (gemm 236), 7x7 3->64 1027 -> 807 (gemm 792), 3->16 68 -> 71.
 * A strided stem (stride > 1) instead puts 16 output channels in the lanes (stem_task,
 * onnxruntime's NCHWc stem kernel's arrangement): a tile is 16 positions x 16 channels, per
 * tap one load of the block's weights and one broadcast multiply-add per position straight
 * from the image (no phase rows to build), transposed into the planes on store. In-process
 * A/B against the phase rows, two threads, the AMD EPYC (Zen 4): 3->16 3x3 stride 2 at
 * 224x224 with SiLU 0.87x (batch 8 0.86x), 3->32 0.94x (batch 8 0.87x), 3->16 at 320x320
 * 0.88x, 3->32 at 160x160 0.72x, 7x7 stride 2 0.91x, 4x4 stride 4 0.75x; at stride 1 the
 * phase rows are plain copies and their tiles' loads feed 24 multiply-adds, where a tile
 * here takes 17 for 16 (3->16 3x3 at 256x256 1.03x, 1->16 5x5 at 64x64 1.12x), so stride 1
 * stays on them.
 * A 1x1 stride-1 unpadded convolution takes the plane as one row (no chunk of a row left
 * part empty), units of DIRECT_SPAN positions, tiles of 8 output channels x 48 positions
 * (one thread, in-process A/B against 16 x 16 tiles and 256-position units: 64->256 at
 * 56x56 -10%, 128->16 at 55x55 -14%, 16->64 -10%; bit-identical). Without AVX-512, scalar
 * loops.
 */

#define DIRECT_PROBE (-1)  /* sizes[0]: write 1 to *data[0] when built with AVX-512, else 0 */
#define DIRECT_BLOCKED_OUT 19  /* sizes[0]: a strided stem stores (N, M/16, OH, OW, 16) */

typedef struct {
    const float *x, *packed, *bias, *residual, *slope;
    float *out;
    const Shape *s;
    float alpha, beta;
    int64_t blocks;  /* output channel blocks of 16 */
    int64_t groups;  /* pointwise: the units a span's blocks are split into */
    const int64_t *offsets;  /* a stem: tap column kw's offset in a unit's rows (direct_rows) */
    int blocked_out;  /* a strided stem's output (and residual) in blocked channels */
} DirectJob;

#if defined(__AVX512F__)
#define DIRECT_EACH8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DIRECT_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) \
    X(13) X(14) X(15)

/* The 16 lanes of input row `row` at columns base + j * sw, 0 where outside the row. */
static inline __m512 direct_load(const float *row, int64_t base, const Shape *s,
                                 __m512i iota) {
    const __m512i lo = _mm512_set1_epi32((int)-base), hi = _mm512_set1_epi32((int)(s->w - base));
    if (s->sw == 1) {
        const __mmask16 m = _mm512_cmpge_epi32_mask(iota, lo) & _mm512_cmplt_epi32_mask(iota, hi);
        return _mm512_maskz_loadu_ps(m, (const float *)((intptr_t)row + 4 * base));
    }
    if (s->sw == 2) {
        const __m512i next = _mm512_add_epi32(iota, _mm512_set1_epi32(16));
        const __mmask16 m0 = _mm512_cmpge_epi32_mask(iota, lo) & _mm512_cmplt_epi32_mask(iota, hi);
        const __mmask16 m1 = _mm512_cmpge_epi32_mask(next, lo) & _mm512_cmplt_epi32_mask(next, hi);
        const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8,
                                               6, 4, 2, 0);
        const float *p = (const float *)((intptr_t)row + 4 * base);
        return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m0, p), evens,
                                      _mm512_maskz_loadu_ps(m1, p + 16));
    }
    const __m512i at = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)s->sw));
    const __mmask16 m = _mm512_cmpge_epi32_mask(at, lo) & _mm512_cmplt_epi32_mask(at, hi);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m,
                                    _mm512_add_epi32(at, _mm512_set1_epi32((int)base)), row, 4);
}

/* A 1x1 stride-1 unpadded convolution: the plane as one row, unit i: image i / (spans x
 * groups), positions [span * (i / groups % spans), + span) (read and written as stored),
 * output channel blocks [per_group * (i % groups), + per_group). */
#define DIRECT_SPAN 288  /* positions a unit: six 48-position tiles */
static void direct_pointwise_task(void *context, int64_t unit) {
    const DirectJob *j = context;
    const Shape *s = j->s;
    const int64_t plane = s->h * s->w, spans = (plane + DIRECT_SPAN - 1) / DIRECT_SPAN;
    const int64_t groups = j->groups, n = unit / (spans * groups);
    const int64_t first = (unit / groups % spans) * DIRECT_SPAN;
    const int64_t per_group = (j->blocks + groups - 1) / groups;
    const int64_t block_begin = unit % groups * per_group;
    const int64_t block_end = block_begin + per_group < j->blocks ? block_begin + per_group
                                                                  : j->blocks;
    const int64_t end = first + DIRECT_SPAN < plane ? first + DIRECT_SPAN : plane;
    const float *image = j->x + n * s->c * plane;
    for (int64_t block = block_begin; block < block_end; block++) {
        const float *weights = j->packed + block * 16 * (s->c + 1);
        const float *bias = weights + 16 * s->c;
        const int64_t m0 = block * 16, live = s->m - m0 < 16 ? s->m - m0 : 16;
        /* 8 output channels x 48 positions a tile (24 accumulators: per input channel three
         * loads and eight broadcasts feed 24 multiply-adds, where 16 x 16 took one load and
         * sixteen broadcasts for 16), the same sums in the same order */
        for (int64_t h0 = 0; h0 < live; h0 += 8)
            for (int64_t q = first; q < end; q += 48) {
                __mmask16 keep[3];
                for (int t = 0; t < 3; t++) {
                    const int64_t left = end - q - 16 * t;
                    keep[t] = left >= 16 ? (__mmask16)0xFFFF
                              : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                }
#define DIRECT_START8(i) __m512 a##i = _mm512_set1_ps(bias[h0 + i]), b##i = a##i, d##i = a##i;
                DIRECT_EACH8(DIRECT_START8)
#undef DIRECT_START8
                for (int64_t c = 0; c < s->c; c++) {
                    const float *row = image + c * plane + q;
                    const __m512 v0 = _mm512_maskz_loadu_ps(keep[0], row);
                    const __m512 v1 = _mm512_maskz_loadu_ps(keep[1], row + 16);
                    const __m512 v2 = _mm512_maskz_loadu_ps(keep[2], row + 32);
                    const float *w = weights + c * 16 + h0;
#define DIRECT_FMA8(i) { const __m512 x = _mm512_set1_ps(w[i]); \
                         a##i = _mm512_fmadd_ps(x, v0, a##i); \
                         b##i = _mm512_fmadd_ps(x, v1, b##i); \
                         d##i = _mm512_fmadd_ps(x, v2, d##i); }
                    DIRECT_EACH8(DIRECT_FMA8)
#undef DIRECT_FMA8
                }
#define DIRECT_STORE8(i) if (h0 + i < live) { \
                    const int64_t at = (n * s->m + m0 + h0 + i) * plane + q; \
                    const float slope = j->slope != NULL ? j->slope[m0 + h0 + i] : 0.0f; \
                    const __m512 sums[3] = {a##i, b##i, d##i}; \
                    for (int t = 0; t < 3 && keep[t]; t++) { \
                        __m512 v = sums[t]; \
                        if (j->residual != NULL) \
                            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep[t], \
                                                  j->residual + at + 16 * t)); \
                        v = act16(v, s->act, j->alpha, j->beta, slope); \
                        _mm512_mask_storeu_ps(j->out + at + 16 * t, keep[t], v); \
                    } }
                DIRECT_EACH8(DIRECT_STORE8)
#undef DIRECT_STORE8
            }
    }
}

/* dst[k] = row[start + k] for k < length, 0 where start + k falls outside the row's `width`
 * columns (a stem's input row with its padding). */
static void padded_run(float *dst, const float *row, int64_t width, int64_t start,
                       int64_t length) {
    const int64_t first = start >= 0 ? 0 : -start < length ? -start : length;
    int64_t last = width - start < length ? width - start : length;
    if (last < first) last = first;
    memset(dst, 0, sizeof(float) * (size_t)first);
    if (last > first)
        memcpy(dst + first, row + (start + first), sizeof(float) * (size_t)(last - first));
    memset(dst + last, 0, sizeof(float) * (size_t)(length - last));
}

/* A stem's input rows, as one unit reads them: for every input channel and filter row in
 * [kh_begin, kh_end) (those whose input row lies inside the image), `sw` phases of `span`
 * floats, phase p's column j the input's column j * sw + p - pad_left (0 in the padding), so
 * each tap's 16 output columns are one plain load at column ow + kw * dw / sw of phase
 * kw * dw % sw: no masks, no permutes, no gathers in the tile loop. */
static void direct_rows(const DirectJob *j, const float *image, int64_t oh, int64_t kh_begin,
                        int64_t kh_end, float *rows, int64_t span) {
    const Shape *s = j->s;
    float *line = thread_buffer(2, (size_t)(s->sw * span + 32));
    for (int64_t c = 0; c < s->c; c++)
        for (int64_t kh = kh_begin; kh < kh_end; kh++) {
            const float *src = image + (c * s->h + oh * s->sh + kh * s->dh - s->pt) * s->w;
            float *dst = rows + (c * s->kh + kh) * s->sw * span;
            /* line[k] = input column k - pad_left, 0 outside the row */
            float *target = s->sw == 1 ? dst : line;
            padded_run(target, src, s->w, -s->pl, s->sw * span);
            if (s->sw == 1) continue;
            if (s->sw == 2) {  /* even lanes to phase 0, odd to phase 1 (span: 16s) */
                const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                                       10, 8, 6, 4, 2, 0);
                const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
                for (int64_t q = 0; q < span; q += 16) {
                    const __m512 a = _mm512_loadu_ps(line + 2 * q);
                    const __m512 b = _mm512_loadu_ps(line + 2 * q + 16);
                    _mm512_storeu_ps(dst + q, _mm512_permutex2var_ps(a, evens, b));
                    _mm512_storeu_ps(dst + span + q, _mm512_permutex2var_ps(a, odds, b));
                }
                continue;
            }
            for (int64_t p = 0; p < s->sw; p++)
                for (int64_t q = 0; q < span; q++) dst[p * span + q] = line[q * s->sw + p];
        }
}

/* A tile's sums (sums[3 * i + v]: output channel m0 + i, vector v of the row's columns from
 * ow0; the last vector stored under `last`) plus the residual, activated, into the output:
 * one loop, not 24 inlined copies of the activation's switch in every tile. */
static void direct_store(const DirectJob *j, const __m512 *sums, int channels, int vectors,
                         int64_t n, int64_t oh, int64_t ow0, int64_t m0, __mmask16 last) {
    const Shape *s = j->s;
    for (int i = 0; i < channels && m0 + i < s->m; i++) {
        const float slope = j->slope != NULL ? j->slope[m0 + i] : 0.0f;
        const int64_t at = ((n * s->m + m0 + i) * s->oh + oh) * s->ow + ow0;
        for (int v = 0; v < vectors; v++) {
            const __mmask16 keep = v == vectors - 1 ? last : (__mmask16)0xFFFF;
            __m512 y = sums[3 * i + v];
            if (j->residual != NULL)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(keep, j->residual + at + 16 * v));
            _mm512_mask_storeu_ps(j->out + at + 16 * v, keep,
                                  act16(y, s->act, j->alpha, j->beta, slope));
        }
    }
}

/* The tile of output channels [m0, m0 + CH) x V vectors of output columns from ow0 of output
 * row oh (the last vector stored under `last`), CH = 8 for V = 2 and 3, 16 for V = 1 (named
 * accumulators a, b, d per vector: arrays of vectors were kept in memory): they start at the
 * bias and take the taps in (c, kh, kw) order, then direct_store. */
#define DIRECT_TILE(NAME, EACH, CH, V)                                                         \
static void NAME(const DirectJob *j, const float *rows, int64_t span, int64_t n, int64_t oh,   \
                 int64_t ow0, int64_t m0, int64_t kh_begin, int64_t kh_end, __mmask16 last) { \
    enum { VECTORS = V };                                                                      \
    const Shape *s = j->s;                                                                     \
    const int64_t mp = j->blocks * 16;                                                         \
    const float *bias = j->packed + s->c * s->kh * s->kw * mp + m0;                            \
    EACH(DIRECT_TILE_START)                                                                    \
    for (int64_t c = 0; c < s->c; c++)                                                         \
        for (int64_t kh = kh_begin; kh < kh_end; kh++) {                                       \
            const float *row = rows + (c * s->kh + kh) * s->sw * span + ow0;                   \
            const float *w = j->packed + ((c * s->kh + kh) * s->kw) * mp + m0;                 \
            for (int64_t kw = 0; kw < s->kw; kw++, w += mp) {                                  \
                const float *p = row + j->offsets[kw];                                         \
                const __m512 v0 = _mm512_loadu_ps(p);                                          \
                const __m512 v1 = V > 1 ? _mm512_loadu_ps(p + 16) : v0;                        \
                const __m512 v2 = V > 2 ? _mm512_loadu_ps(p + 32) : v0;                        \
                EACH(DIRECT_TILE_FMA)                                                          \
            }                                                                                  \
        }                                                                                      \
    __m512 sums[3 * CH];                                                                       \
    EACH(DIRECT_TILE_STORE)                                                                    \
    direct_store(j, sums, CH, VECTORS, n, oh, ow0, m0, last);                                  \
}
#define DIRECT_TILE_START(i) __m512 a##i = _mm512_set1_ps(bias[i]), b##i = a##i, d##i = a##i;
#define DIRECT_TILE_FMA(i) { const __m512 x = _mm512_set1_ps(w[i]);                            \
                             a##i = _mm512_fmadd_ps(x, v0, a##i);                              \
                             if (VECTORS > 1) b##i = _mm512_fmadd_ps(x, v1, b##i);             \
                             if (VECTORS > 2) d##i = _mm512_fmadd_ps(x, v2, d##i); }
#define DIRECT_TILE_STORE(i) sums[3 * i] = a##i; sums[3 * i + 1] = b##i; sums[3 * i + 2] = d##i;
DIRECT_TILE(direct_tile_8x3, DIRECT_EACH8, 8, 3)
DIRECT_TILE(direct_tile_8x2, DIRECT_EACH8, 8, 2)
DIRECT_TILE(direct_tile_16x1, DIRECT_EACH, 16, 1)
#undef DIRECT_TILE
#undef DIRECT_TILE_START
#undef DIRECT_TILE_FMA
#undef DIRECT_TILE_STORE

/* A stem's output row oh of `image`: the input rows the next output row reads fetched while
 * this one computes (a stem's input is the caller's fresh image, not in cache), and the
 * filter rows [kh_begin, kh_end) that fall inside the image. */
static void stem_row_start(const Shape *s, const float *image, int64_t oh, int64_t *kh_begin,
                           int64_t *kh_end) {
    if (oh + 1 < s->oh)
        for (int64_t c = 0; c < s->c; c++)
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const int64_t ih = (oh + 1) * s->sh + kh * s->dh - s->pt;
                if (ih < 0 || ih >= s->h) continue;
                const float *row = image + (c * s->h + ih) * s->w;
                for (int64_t t = 0; t < s->w; t += 16) __builtin_prefetch(row + t);
            }
    int64_t begin = 0, end = s->kh;
    while (begin < s->kh && oh * s->sh + begin * s->dh - s->pt < 0) begin++;
    while (end > begin && oh * s->sh + (end - 1) * s->dh - s->pt >= s->h) end--;
    *kh_begin = begin;
    *kh_end = end;
}

/* A stem's tile of 16 output positions (columns ow0.. of output row oh) x the 16 output
 * channels from m0, channels in the lanes: one accumulator per position, started at the
 * block's bias; per tap one load of the block's 16 weights ([tap][mp]) and one broadcast of
 * each position's input value, read in place (rows: row (c, kh) at base + c * cstride +
 * kh * khstride, positions SW apart). Then transposed (a channel's 16 positions a vector)
 * and stored with the residual and the activation, `count` positions. */
#define STEM_TILE(NAME, SW)                                                                    \
static void NAME(const DirectJob *j, const float *base, int64_t cstride, int64_t khstride,     \
                 int64_t sw, int64_t n, int64_t oh, int64_t ow0, int64_t m0, int64_t kh_begin, \
                 int64_t kh_end, int count) {                                                  \
    const Shape *s = j->s;                                                                     \
    const int64_t mp = j->blocks * 16, step = SW > 0 ? SW : sw;                                \
    const float *w = j->packed + m0;                                                           \
    const __m512 bias = _mm512_loadu_ps(w + s->c * s->kh * s->kw * mp);                        \
    DIRECT_EACH(STEM_START)                                                                    \
    for (int64_t c = 0; c < s->c; c++)                                                         \
        for (int64_t kh = kh_begin; kh < kh_end; kh++) {                                       \
            const float *row = base + c * cstride + kh * khstride;                             \
            const float *tap = w + ((c * s->kh + kh) * s->kw) * mp;                            \
            for (int64_t kw = 0; kw < s->kw; kw++, tap += mp) {                                \
                const __m512 v = _mm512_loadu_ps(tap);                                         \
                const float *p = row + kw * s->dw;                                             \
                DIRECT_EACH(STEM_FMA)                                                          \
            }                                                                                  \
        }                                                                                      \
    __m512 r[16];                                                                              \
    DIRECT_EACH(STEM_SAVE)                                                                     \
    stem_store(j, r, n, oh, ow0, m0, count);                                                   \
}
#define STEM_START(i) __m512 a##i = bias;
#define STEM_FMA(i) a##i = _mm512_fmadd_ps(_mm512_set1_ps(p[(i) * step]), v, a##i);
#define STEM_SAVE(i) r[i] = a##i;

/* r[i]: position ow0 + i's 16 channels from m0 -> each channel's positions, stored. */
static inline __attribute__((always_inline)) void stem_store(
        const DirectJob *j, __m512 r[16], int64_t n, int64_t oh, int64_t ow0, int64_t m0,
        int count) {
    const Shape *s = j->s;
    if (j->blocked_out) {  /* a position's 16 channels are one vector of the output */
        const int64_t at = (((n * (s->m / 16) + m0 / 16) * s->oh + oh) * s->ow + ow0) * 16;
        for (int i = 0; i < count; i++)
            cell16_store(j->out, j->residual, at + 16 * i, r[i], s->act, j->alpha, j->beta);
        return;
    }
    transpose16(r);
    const __mmask16 keep = count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1);
    for (int i = 0; i < 16 && m0 + i < s->m; i++) {
        const int64_t at = ((n * s->m + m0 + i) * s->oh + oh) * s->ow + ow0;
        __m512 y = r[i];
        if (j->residual != NULL)
            y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(keep, j->residual + at));
        _mm512_mask_storeu_ps(j->out + at, keep,
                              act16(y, s->act, j->alpha, j->beta,
                                    j->slope != NULL ? j->slope[m0 + i] : 0.0f));
    }
}
STEM_TILE(stem_tile_2, 2)
STEM_TILE(stem_tile_4, 4)
STEM_TILE(stem_tile_any, 0)
#undef STEM_TILE
#undef STEM_START
#undef STEM_FMA
#undef STEM_SAVE

static void stem_tile(const DirectJob *j, const float *base, int64_t cstride, int64_t khstride,
                      int64_t n, int64_t oh, int64_t ow0, int64_t m0, int64_t kh_begin,
                      int64_t kh_end, int count) {
    const int64_t sw = j->s->sw;  /* 2 and 4 constants: the broadcasts' offsets immediate */
    if (sw == 2)
        stem_tile_2(j, base, cstride, khstride, sw, n, oh, ow0, m0, kh_begin, kh_end, count);
    else if (sw == 4)
        stem_tile_4(j, base, cstride, khstride, sw, n, oh, ow0, m0, kh_begin, kh_end, count);
    else
        stem_tile_any(j, base, cstride, khstride, sw, n, oh, ow0, m0, kh_begin, kh_end, count);
}

/* One output row of one image in tiles of 16 positions x 16 channels (stem_tile): a tile
 * whose taps all fall inside the input row reads the image in place; one that reaches past
 * an edge (the padding, or positions past the row's end) reads a zero-padded copy of the
 * columns it covers. */
static void stem_task(void *context, int64_t unit) {
    const DirectJob *j = context;
    const Shape *s = j->s;
    const int64_t n = unit / s->oh, oh = unit % s->oh;
    const float *image = j->x + n * s->c * s->h * s->w;
    int64_t kh_begin, kh_end;
    stem_row_start(s, image, oh, &kh_begin, &kh_end);
    const int64_t reach = 15 * s->sw + (s->kw - 1) * s->dw + 1;  /* a tile's input columns */
    float *padded = thread_buffer(1, (size_t)(s->c * s->kh * reach));
    const int64_t top = oh * s->sh - s->pt;  /* input row of filter row 0 */
    for (int64_t ow0 = 0; ow0 < s->ow; ow0 += 16) {
        const int count = s->ow - ow0 < 16 ? (int)(s->ow - ow0) : 16;
        const int64_t left = ow0 * s->sw - s->pl;
        const float *base;
        int64_t cstride, khstride;
        if (left >= 0 && left + reach <= s->w) {
            base = image + top * s->w + left;
            cstride = s->h * s->w;
            khstride = s->dh * s->w;
        } else {  /* columns left .. left + reach - 1, 0 outside the row */
            for (int64_t c = 0; c < s->c; c++)
                for (int64_t kh = kh_begin; kh < kh_end; kh++)
                    padded_run(padded + (c * s->kh + kh) * reach,
                               image + (c * s->h + top + kh * s->dh) * s->w, s->w, left, reach);
            base = padded;
            cstride = s->kh * reach;
            khstride = reach;
        }
        for (int64_t m0 = 0; m0 < s->m; m0 += 16)
            stem_tile(j, base, cstride, khstride, n, oh, ow0, m0, kh_begin, kh_end, count);
    }
}

/* The span of a stem's phase rows: the output row rounded up to 16 columns plus the widest
 * tap's offset, rounded up to 16. */
static inline int64_t direct_span(const Shape *s) {
    const int64_t reach = ((s->ow + 15) / 16) * 16 + ((s->kw - 1) * s->dw) / s->sw;
    return (reach + 15) / 16 * 16;
}

/* One output row of one image: its input rows laid out once (direct_rows), then tiles of 8
 * output channels x 48 columns (24 accumulators: per tap three loads and eight broadcasts
 * feed 24 multiply-adds, where 16 x 16 tiles took a load, a permute and sixteen broadcasts
 * for 16), a row's last tile 8 x 32 or 16 x 16. */
static void direct_task(void *context, int64_t unit) {
    const DirectJob *j = context;
    const Shape *s = j->s;
    const int64_t n = unit / s->oh, oh = unit % s->oh, span = direct_span(s);
    const float *image = j->x + n * s->c * s->h * s->w;
    int64_t kh_begin, kh_end;
    stem_row_start(s, image, oh, &kh_begin, &kh_end);
    float *rows = thread_buffer(1, (size_t)(s->c * s->kh * s->sw * span));
    direct_rows(j, image, oh, kh_begin, kh_end, rows, span);
    const int64_t mp = j->blocks * 16;
    for (int64_t ow0 = 0; ow0 < s->ow; ow0 += 48) {
        const int64_t left = s->ow - ow0;
        const int64_t tail = left >= 48 ? 16 : left - (left - 1) / 16 * 16;
        const __mmask16 last = tail >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << tail) - 1);
        if (left > 32)
            for (int64_t m0 = 0; m0 < mp; m0 += 8)
                direct_tile_8x3(j, rows, span, n, oh, ow0, m0, kh_begin, kh_end, last);
        else if (left > 16)
            for (int64_t m0 = 0; m0 < mp; m0 += 8)
                direct_tile_8x2(j, rows, span, n, oh, ow0, m0, kh_begin, kh_end, last);
        else
            for (int64_t m0 = 0; m0 < mp; m0 += 16)
                direct_tile_16x1(j, rows, span, n, oh, ow0, m0, kh_begin, kh_end, last);
    }
}
#else
static void direct_task(void *context, int64_t unit) {
    const DirectJob *j = context;
    const Shape *s = j->s;
    const int64_t n = unit / s->oh, oh = unit % s->oh, taps = s->c * s->kh * s->kw;
    for (int64_t m = 0; m < s->m; m++) {
        const float *weights = j->packed + (m / 16) * 16 * (taps + 1);
        float *row = j->out + ((n * s->m + m) * s->oh + oh) * s->ow;
        for (int64_t ow = 0; ow < s->ow; ow++) {
            float sum = 0.0f;
            for (int64_t c = 0; c < s->c; c++)
                for (int64_t kh = 0; kh < s->kh; kh++) {
                    const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
                    if (ih < 0 || ih >= s->h) continue;
                    for (int64_t kw = 0; kw < s->kw; kw++) {
                        const int64_t iw = ow * s->sw + kw * s->dw - s->pl;
                        if (iw >= 0 && iw < s->w)
                            sum += weights[((c * s->kh + kh) * s->kw + kw) * 16 + m % 16]
                                   * j->x[((n * s->c + c) * s->h + ih) * s->w + iw];
                    }
                }
            row[ow] = sum;
        }
        finish(row, s->ow, weights[16 * taps + m % 16],
               j->residual != NULL ? j->residual + (row - j->out) : NULL, s->act, j->alpha,
               j->beta, j->slope != NULL ? j->slope[m] : 0.0f);
    }
}
#endif

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (pool_share(data, sizes)) return;
    if (sizes[0] == DIRECT_PROBE) {  /* whether this build has the vector loop */
#if defined(__AVX512F__)
        *(int64_t *)data[0] = 1;
#else
        *(int64_t *)data[0] = 0;
#endif
        return;
    }
    const int64_t threads = (sizes[1] > 1 ? sizes[1] : 1);
    const Shape s = shape_of(sizes);
    const float *w = data[1], *bias = data[2], *scalars = data[6];
    const int64_t taps = s.c * s.kh * s.kw, blocks = (s.m + 15) / 16;
    const int pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0
                          && s.pl == 0 && s.oh == s.h && s.ow == s.w;
    (void)pointwise;  /* the scalar build packs and runs every shape one way */
    float *packed = thread_buffer(0, (size_t)(blocks * 16 * (taps + 1)));
#if defined(__AVX512F__)
    if (!pointwise) {  /* a stem: weights[tap][blocks * 16], then bias[blocks * 16] */
        const int64_t mp = blocks * 16;
        for (int64_t m = 0; m < mp; m++) {
            for (int64_t t = 0; t < taps; t++)
                packed[t * mp + m] = m < s.m ? w[m * taps + t] : 0.0f;
            packed[taps * mp + m] = m < s.m && bias != NULL ? bias[m] : 0.0f;
        }
    } else
#endif
    /* per block of 16 output channels: weights[tap][16], then the block's bias[16] */
    for (int64_t block = 0; block < blocks; block++) {
        float *target = packed + block * 16 * (taps + 1);
        for (int64_t i = 0; i < 16; i++) {
            const int64_t m = block * 16 + i;
            for (int64_t t = 0; t < taps; t++)
                target[t * 16 + i] = m < s.m ? w[m * taps + t] : 0.0f;
            target[16 * taps + i] = m < s.m && bias != NULL ? bias[m] : 0.0f;
        }
    }
    DirectJob j = {data[0], packed, bias, data[3], data[5], data[4], &s,
                   scalars != NULL ? scalars[0] : 0.0f, scalars != NULL ? scalars[1] : 0.0f,
                   blocks, 1, NULL, sizes[0] == DIRECT_BLOCKED_OUT};
#if defined(__AVX512F__)
    if (!pointwise) {  /* phase kw * dw % sw, column kw * dw / sw (a division a tap was a
                        * tenth of the tile loop's time) */
        int64_t *offsets = (int64_t *)thread_buffer(3, (size_t)(2 * s.kw));
        const int64_t span = direct_span(&s);
        for (int64_t kw = 0; kw < s.kw; kw++)
            offsets[kw] = (kw * s.dw % s.sw) * span + kw * s.dw / s.sw;
        j.offsets = offsets;
    }
    if (pointwise) {
        /* about four units a thread: a small plane's blocks split into groups */
        const int64_t units = s.n * ((s.h * s.w + DIRECT_SPAN - 1) / DIRECT_SPAN);
        if (threads > 1 && units < 4 * threads) {
            j.groups = (4 * threads + units - 1) / units;
            if (j.groups > blocks) j.groups = blocks;
        }
        run_units(units * j.groups, threads, direct_pointwise_task, &j);
        return;
    }
    if (s.sw > 1 || j.blocked_out) {  /* strided: channels in the lanes, the image read in
                                        * place (a blocked output only ever comes here) */
        run_units(s.n * s.oh, threads, stem_task, &j);
        return;
    }
#endif
    run_units(s.n * s.oh, threads, direct_task, &j);
}
