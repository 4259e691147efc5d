/* float32 direct convolution for few input channels (a network's stem: 3 channels of an image,
 * 3x3 to 7x7, stride 2), after conv_common.h; data and sizes as conv.c's, groups 1.
 *
 * The implicit GEMM of conv.c packs C * KH * KW patch values per output position to feed one
 * multiply-add per value and output channel block, and with 3 input channels the packing
 * costs more than the products. Here each tap's 16 output columns are loaded straight from the
 * input row (zero-masked where they read the padding; stride 2 takes the even lanes of two
 * loads, other strides gather) and feed 16 output channels' accumulators at once, the weights
 * broadcast from a copy packed per launch (16 output channels a block, zero past M). A unit is
 * one output row of one image, over every channel block and column chunk; the bias starts
 * the accumulators, the residual and the activation are applied on them (conv_common.h's
 * act16). A 1x1 stride-1 unpadded convolution
 * takes the plane as one row (no chunk of a row left part empty), units of DIRECT_SPAN
 * positions, tiles of 8 output channels x 48 positions (one thread, in-process A/B against
 * 16 x 16 tiles and 256-position units: 64->256 at 56x56 -10%, 128->16 at 55x55 -14%, 16->64
 * -10%; bit-identical). Without AVX-512, scalar loops.
 */

#define DIRECT_PROBE (-1)  /* sizes[0]: write 1 to *data[0] when built with AVX-512, else 0 */

typedef struct {
    const float *x, *packed, *bias, *residual, *slope;
    float *out;
    const Shape *s;
    float alpha, beta;
    int64_t blocks;  /* output channel blocks of 16 */
    int64_t groups;  /* pointwise: the units a span's blocks are split into */
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

#define DIRECT_MASKED 11  /* widest filter whose tap columns' masks a chunk keeps */
static void direct_task(void *context, int64_t unit) {
    const DirectJob *j = context;
    const Shape *s = j->s;
    const int64_t n = unit / s->oh, oh = unit % s->oh, taps = s->c * s->kh * s->kw;
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                           2, 0);
    const float *image = j->x + n * s->c * s->h * s->w;
    /* the input rows the next output row reads, fetched while this one computes (a stem's
     * input is the caller's fresh image, not in cache) */
    if (oh + 1 < s->oh)
        for (int64_t c = 0; c < s->c; c++)
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const int64_t ih = (oh + 1) * s->sh + kh * s->dh - s->pt;
                if (ih < 0 || ih >= s->h) continue;
                const float *row = image + (c * s->h + ih) * s->w;
                for (int64_t t = 0; t < s->w; t += 16) __builtin_prefetch(row + t);
            }
    for (int64_t block = 0; block < j->blocks; block++) {
        const float *weights = j->packed + block * 16 * (taps + 1);
        const float *bias = weights + 16 * taps;
        const int64_t m0 = block * 16, live = s->m - m0 < 16 ? s->m - m0 : 16;
        for (int64_t ow0 = 0; ow0 < s->ow; ow0 += 16) {
#define DIRECT_START(i) __m512 a##i = _mm512_set1_ps(bias[i]);
            DIRECT_EACH(DIRECT_START)
#undef DIRECT_START
            /* stride 1 and 2: each tap column's load masks once a chunk, not once a tap
             * (3->32 3x3 stride 2 at 224x224: 329 -> 309 us, one thread) */
            __mmask16 low[DIRECT_MASKED], high[DIRECT_MASKED];
            const int masked = (s->sw == 1 || s->sw == 2) && s->kw <= DIRECT_MASKED;
            if (masked)
                for (int64_t kw = 0; kw < s->kw; kw++) {
                    const int64_t base = ow0 * s->sw + kw * s->dw - s->pl;
                    const __m512i lo = _mm512_set1_epi32((int)-base);
                    const __m512i hi = _mm512_set1_epi32((int)(s->w - base));
                    const __m512i next = _mm512_add_epi32(iota, _mm512_set1_epi32(16));
                    low[kw] = _mm512_cmpge_epi32_mask(iota, lo) & _mm512_cmplt_epi32_mask(iota, hi);
                    high[kw] = _mm512_cmpge_epi32_mask(next, lo)
                               & _mm512_cmplt_epi32_mask(next, hi);
                }
            for (int64_t c = 0; c < s->c; c++)
                for (int64_t kh = 0; kh < s->kh; kh++) {
                    const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
                    if (ih < 0 || ih >= s->h) continue;
                    const float *row = image + (c * s->h + ih) * s->w;
                    const float *w = weights + ((c * s->kh + kh) * s->kw) * 16;
                    for (int64_t kw = 0; kw < s->kw; kw++, w += 16) {
                        const int64_t base = ow0 * s->sw + kw * s->dw - s->pl;
                        const float *p = (const float *)((intptr_t)row + 4 * base);
                        const __m512 v =
                            !masked ? direct_load(row, base, s, iota)
                            : s->sw == 1 ? _mm512_maskz_loadu_ps(low[kw], p)
                            : _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(low[kw], p), evens,
                                                     _mm512_maskz_loadu_ps(high[kw], p + 16));
#define DIRECT_FMA(i) a##i = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), v, a##i);
                        DIRECT_EACH(DIRECT_FMA)
#undef DIRECT_FMA
                    }
                }
            const __mmask16 keep = s->ow - ow0 >= 16 ? (__mmask16)0xFFFF
                                                     : (__mmask16)((1u << (s->ow - ow0)) - 1);
#define DIRECT_STORE(i) if (i < live) { \
                const int64_t at = ((n * s->m + m0 + i) * s->oh + oh) * s->ow + ow0; \
                __m512 v = a##i; \
                if (j->residual != NULL) \
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, j->residual + at)); \
                v = act16(v, s->act, j->alpha, j->beta, \
                          j->slope != NULL ? j->slope[m0 + i] : 0.0f); \
                _mm512_mask_storeu_ps(j->out + at, keep, v); }
            DIRECT_EACH(DIRECT_STORE)
#undef DIRECT_STORE
        }
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
    /* per block of 16 output channels: weights[tap][16], then the block's bias[16] */
    float *packed = thread_buffer(0, (size_t)(blocks * 16 * (taps + 1)));
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
                   blocks, 1};
#if defined(__AVX512F__)
    if (s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0 && s.pl == 0
            && s.oh == s.h && s.ow == s.w) {
        /* about four units a thread: a small plane's blocks split into groups */
        const int64_t units = s.n * ((s.h * s.w + DIRECT_SPAN - 1) / DIRECT_SPAN);
        if (threads > 1 && units < 4 * threads) {
            j.groups = (4 * threads + units - 1) / units;
            if (j.groups > blocks) j.groups = blocks;
        }
        run_units(units * j.groups, threads, direct_pointwise_task, &j);
        return;
    }
#endif
    run_units(s.n * s.oh, threads, direct_task, &j);
}
