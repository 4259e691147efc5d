/* float32 max and average pooling for fuel's CPU backend (after conv_common.h): 1-d (height
 * 1) and 2-d windows over dense NCHW planes (C = M channels of N images).
 *
 * Entry: fuel_kernel(data, sizes, strides): data = {x, unused, unused, unused, out, unused,
 * scalars}, sizes as conv_common.h's (KH, KW the window), strides unused (NULL).
 * Forms:
 *   7 max pool:  per plane (C = M planes of N images) the max over each window (padding never
 *                wins; H, W in, OH, OW out, KH, KW the window), through a -inf padded copy.
 *   8 avg pool:  the window sums over a zero-padded copy, divided by the taps inside the input
 *                (activation 0) or inside the explicit padding (activation 1: count_include_pad;
 *                scalars[0], scalars[1]: the bottom and right explicit pads), unless activation
 *                is 2 (sums only).
 * A window covering the whole unpadded plane (GlobalAveragePool, GlobalMaxPool) is one
 * vector reduction per plane instead, planes split over the team.
 *   9 COPY_PARTS: a large concat's copy on the team (below; indexing.py's cat).
 *   10, 11 blocked max and avg pool: the same over blocked channels (NCHW16c: x
 *                [N][C][H][W][16], out [N][C][OH][OW][16] with C the blocks), 16 channels a
 *                vector, the windows read in place (no padded copy), separably: each input
 *                column over the window's rows, then each position over its columns
 *                (squeezenet1_1's 3x3 stride 2 pools in-process 0.98x-0.995x of the whole
 *                model against every tap read per position).
 */

enum { MAX_POOL = 7, AVG_POOL = 8 };

/* The taps of window `o` along one dim inside [low, high). */
static inline int64_t inside(int64_t o, int64_t stride, int64_t pad, int64_t dilation,
                             int64_t taps, int64_t low, int64_t high) {
    int64_t count = 0;
    for (int64_t t = 0; t < taps; t++) {
        const int64_t at = o * stride - pad + t * dilation;
        count += at >= low && at < high;
    }
    return count;
}

/* An average's divisors, separable over rows and columns (the sum is divided by their exact
 * product, as onnxruntime does): the taps of each output row and column inside the input
 * (mode 0) or inside the explicit padding (mode 1: pad_bottom, pad_right its bottom and right
 * pads); the caller frees both. */
static void tap_counts(const Shape *s, int64_t mode, float pad_bottom, float pad_right,
                       float **row_count, float **col_count) {
    *row_count = malloc(sizeof(float) * (size_t)s->oh);
    *col_count = malloc(sizeof(float) * (size_t)s->ow);
    const int64_t bottom = mode == 1 ? (int64_t)pad_bottom : 0;
    const int64_t right = mode == 1 ? (int64_t)pad_right : 0;
    const int64_t top = mode == 1 ? s->pt : 0, left = mode == 1 ? s->pl : 0;
    for (int64_t o = 0; o < s->oh; o++)
        (*row_count)[o] = (float)inside(o, s->sh, s->pt, s->dh, s->kh, -top, s->h + bottom);
    for (int64_t o = 0; o < s->ow; o++)
        (*col_count)[o] = (float)inside(o, s->sw, s->pl, s->dw, s->kw, -left, s->w + right);
}

#if defined(__AVX512F__)
/* The windows of output rows over the padded plane, four 16-column chunks at once (the last
 * chunks masked; their reads stay in the padded copy), without NaN tracking. */
static void pool_rows_fast(const float *padded, float *out, const Shape *s, int64_t pw,
                           int maximum, const float *row_count, const float *col_count) {
    const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
                                           4, 2, 0);
    const int64_t sw = s->sw;
    const __m512 start = _mm512_set1_ps(maximum ? -INFINITY : 0.0f);
    for (int64_t oh = 0; oh < s->oh; oh++) {
        float *target = out + oh * s->ow;
        for (int64_t ow0 = 0; ow0 < s->ow; ow0 += 64) {
            __m512 a0 = start, a1 = start, a2 = start, a3 = start;
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const float *row = padded + (oh * s->sh + kh * s->dh) * pw + ow0 * sw;
                for (int64_t kw = 0; kw < s->kw; kw++) {
                    const float *p = row + kw * s->dw;
#define POOL_LOAD(i) (sw == 1 ? _mm512_loadu_ps(p + 16 * i) \
                      : _mm512_permutex2var_ps(_mm512_loadu_ps(p + 32 * i), evens, \
                                               _mm512_loadu_ps(p + 32 * i + 16)))
#define POOL_STEP(i) if (ow0 + 16 * i < s->ow) a##i = maximum \
                         ? _mm512_max_ps(a##i, POOL_LOAD(i)) : _mm512_add_ps(a##i, POOL_LOAD(i));
                    POOL_STEP(0) POOL_STEP(1) POOL_STEP(2) POOL_STEP(3)
#undef POOL_STEP
#undef POOL_LOAD
                }
            }
#define POOL_STORE(i) if (ow0 + 16 * i < s->ow) { \
                const int64_t ow = ow0 + 16 * i; \
                const __mmask16 mask = s->ow - ow >= 16 ? (__mmask16)0xFFFF \
                                                        : (__mmask16)((1u << (s->ow - ow)) - 1); \
                __m512 v = a##i; \
                if (!maximum && row_count != NULL) \
                    v = _mm512_div_ps(v, _mm512_mul_ps(_mm512_set1_ps(row_count[oh]), \
                        _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), mask, col_count + ow))); \
                _mm512_mask_storeu_ps(target + ow, mask, v); }
            POOL_STORE(0) POOL_STORE(1) POOL_STORE(2) POOL_STORE(3)
#undef POOL_STORE
        }
    }
}
#endif

#if defined(__AVX512F__)
/* Row strips straight from the plane (no padded copy; square KxK windows, K 2, 3, 5 or 7,
 * stride 1 or 2, undilated): 4 output rows x 16 columns a strip, each input row loaded once
 * per 16-column chunk (the lanes outside the row masked to the window's neutral value: -inf
 * for max, 0 for a sum) and turned into one vector per window column (stride 1 `valignd`,
 * stride 2 the even or odd lanes of a load pair), which every output row of the strip that
 * row reaches takes; the sums in the old loop's order (window rows, then columns), so the
 * same values. K and STRIDE are constants in each expansion (gcc keeps the strip in
 * registers only then). A max over a plane holding a NaN takes the padded copy's path. */
#define POOL_STRIP 4
static inline __attribute__((always_inline)) void pool_strips_k(
        const float *in, float *out, const Shape *s, int maximum, const float *row_count,
        const float *col_count, const int K, const int STRIDE) {
    const int64_t H = s->h, W = s->w, OH = s->oh, OW = s->ow;
    const int INPUT_ROWS = (POOL_STRIP - 1) * STRIDE + K, PAIRS = STRIDE == 1 ? 1 : (K + 1) / 2;
    const __m512 neutral = _mm512_set1_ps(maximum ? -INFINITY : 0.0f);
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        const int64_t base = ow0 * STRIDE - s->pl;
        const __mmask16 keep = OW - ow0 >= 16 ? (__mmask16)0xFFFF
                                              : (__mmask16)((1u << (OW - ow0)) - 1);
        __mmask16 low[4], high[4];
        strip_masks(base, W, PAIRS, low, high);
        __m512 divisor = _mm512_set1_ps(1.0f);
        if (!maximum && col_count != NULL)
            divisor = _mm512_mask_loadu_ps(divisor, keep, col_count + ow0);
        for (int64_t oh0 = 0; oh0 < OH; oh0 += POOL_STRIP) {
            const int64_t top = oh0 * STRIDE - s->pt;
            __m512 acc[POOL_STRIP];
#pragma GCC unroll 8
            for (int r = 0; r < POOL_STRIP; r++) acc[r] = neutral;
#pragma GCC unroll 32
            for (int i = 0; i < INPUT_ROWS; i++) {
                const int64_t ih = top + i;
                const int row_in = ih >= 0 && ih < H;
                const float *row = in + ih * W + base;
                __m512 v[7];
                strip_row(row, row_in, low, high, neutral, v, K, STRIDE);
#pragma GCC unroll 8
                for (int r = 0; r < POOL_STRIP; r++) {
                    const int kh = i - r * STRIDE;
                    if (kh < 0 || kh >= K) continue;
#pragma GCC unroll 8
                    for (int k = 0; k < K; k++)
                        acc[r] = maximum ? _mm512_max_ps(acc[r], v[k]) : _mm512_add_ps(acc[r], v[k]);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < POOL_STRIP; r++) {
                if (oh0 + r >= OH) break;
                __m512 value = acc[r];
                if (!maximum && row_count != NULL)
                    value = _mm512_div_ps(value, _mm512_mul_ps(
                        _mm512_set1_ps(row_count[oh0 + r]), divisor));
                _mm512_mask_storeu_ps(out + (oh0 + r) * OW + ow0, keep, value);
            }
        }
    }
}

/* Whether the row strips take the window, and then pool the plane with them. */
static int pool_strips(const float *in, float *out, const Shape *s, int maximum,
                       const float *row_count, const float *col_count) {
    if (s->kh != s->kw || (s->kw != 2 && s->kw != 3 && s->kw != 5 && s->kw != 7)
            || s->sh != s->sw || (s->sw != 1 && s->sw != 2) || s->dh != 1 || s->dw != 1)
        return 0;
    if (maximum) {  /* a NaN in the plane: the padded copy's path tracks it */
        const int64_t plane = s->h * s->w;
        __mmask16 nan = 0;
        for (int64_t t = 0; t < plane; t += 16) {
            const __mmask16 m = plane - t >= 16 ? (__mmask16)0xFFFF
                                                : (__mmask16)((1u << (plane - t)) - 1);
            const __m512 v = _mm512_maskz_loadu_ps(m, in + t);
            nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
        }
        if (nan) return 0;
    }
#define POOL_STRIPS(k, stride) pool_strips_k(in, out, s, maximum, row_count, col_count, k, stride)
    if (s->sw == 1) {
        if (s->kw == 2) POOL_STRIPS(2, 1);
        else if (s->kw == 3) POOL_STRIPS(3, 1);
        else if (s->kw == 5) POOL_STRIPS(5, 1);
        else POOL_STRIPS(7, 1);
    } else {
        if (s->kw == 2) POOL_STRIPS(2, 2);
        else if (s->kw == 3) POOL_STRIPS(3, 2);
        else if (s->kw == 5) POOL_STRIPS(5, 2);
        else POOL_STRIPS(7, 2);
    }
#undef POOL_STRIPS
    return 1;
}
#endif

static void pool_plane(const float *in, float *out, const Shape *s, float *padded, int64_t pw,
                       int64_t ph, int maximum, float fill, const float *row_count,
                       const float *col_count) {
#if defined(__AVX512F__)
    int nan_free = 0;  /* no NaN in the plane (its max needs no NaN tracking) */
    {
        const __m512 filled = _mm512_set1_ps(fill);
        __mmask16 nan = 0;
        const int64_t left = s->pl < pw ? s->pl : pw;
        const int64_t width = s->w < pw - left ? s->w : pw - left;
        for (int64_t y = 0; y < ph; y++) {
            float *target = padded + y * pw;
            const int64_t iy = y - s->pt;
            const int valid = iy >= 0 && iy < s->h;
            /* the fill where the row does not land: all of it, or its two sides */
            const int64_t from = valid ? left : pw, to = valid ? left + width : pw;
            for (int side = 0; side < 2; side++) {
                const int64_t begin = side ? to : 0, end = side ? pw : from;
                for (int64_t t = begin; t < end; t += 16) {
                    const __mmask16 m = end - t >= 16 ? (__mmask16)0xFFFF
                                                      : (__mmask16)((1u << (end - t)) - 1);
                    _mm512_mask_storeu_ps(target + t, m, filled);
                }
            }
            if (!valid) continue;
            const float *source = in + iy * s->w;
            for (int64_t t = 0; t < width; t += 16) {
                const __mmask16 m = width - t >= 16 ? (__mmask16)0xFFFF
                                                    : (__mmask16)((1u << (width - t)) - 1);
                const __m512 v = _mm512_maskz_loadu_ps(m, source + t);
                nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
                _mm512_mask_storeu_ps(target + left + t, m, v);
            }
        }
        nan_free = nan == 0;
    }
#else
    for (int64_t y = 0; y < ph; y++) {
        float *target = padded + y * pw;
        const int64_t iy = y - s->pt;
        for (int64_t t = 0; t < pw; t++) target[t] = fill;
        if (iy < 0 || iy >= s->h) continue;
        const int64_t left = s->pl < pw ? s->pl : pw;
        const int64_t width = s->w < pw - left ? s->w : pw - left;
        memcpy(target + left, in + iy * s->w, sizeof(float) * width);
    }
#endif
    const int64_t sw = s->sw;
#if defined(__AVX512F__)
    /* no NaN to track (an average, or a max over a plane without NaN): four 16-column chunks
     * of a row at once, so four accumulator chains are in flight */
    if ((nan_free || !maximum) && sw <= 2) {
        pool_rows_fast(padded, out, s, pw, maximum, row_count, col_count);
        return;
    }
#endif
    for (int64_t oh = 0; oh < s->oh; oh++) {
        float *target = out + oh * s->ow;
        int64_t ow = 0;
#if defined(__AVX512F__)
        /* 16 columns at a time, the last chunk masked (its reads stay in the padded copy:
         * each row has 16 spare columns, the buffer 64 spare floats) */
        if (sw <= 2) {
            const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10,
                                                   8, 6, 4, 2, 0);
            for (; ow < s->ow; ow += 16) {
                const __mmask16 mask = s->ow - ow >= 16 ? (__mmask16)0xFFFF
                                                         : (__mmask16)((1u << (s->ow - ow)) - 1);
                __m512 acc = _mm512_set1_ps(maximum ? -INFINITY : 0.0f);
                __mmask16 nan = 0;
                for (int64_t kh = 0; kh < s->kh; kh++) {
                    const float *row = padded + (oh * s->sh + kh * s->dh) * pw + ow * sw;
                    for (int64_t kw = 0; kw < s->kw; kw++) {
                        const float *p = row + kw * s->dw;
                        const __m512 v = sw == 1 ? _mm512_loadu_ps(p)
                            : _mm512_permutex2var_ps(_mm512_loadu_ps(p), evens,
                                                     _mm512_loadu_ps(p + 16));
                        if (maximum) {
                            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                            acc = _mm512_max_ps(acc, v);
                        } else {
                            acc = _mm512_add_ps(acc, v);
                        }
                    }
                }
                if (maximum) acc = _mm512_mask_blend_ps(nan, acc, _mm512_set1_ps(NAN));
                else if (row_count != NULL)
                    acc = _mm512_div_ps(acc, _mm512_mul_ps(
                        _mm512_set1_ps(row_count[oh]),
                        _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), mask, col_count + ow)));
                _mm512_mask_storeu_ps(target + ow, mask, acc);
            }
        }
#elif defined(VECTOR)
        if (sw <= 2)  /* 8 columns at a time; the padded rows hold whole chunks */
            for (; ow + 8 <= s->ow; ow += 8) {
                __m256 acc = _mm256_set1_ps(maximum ? -INFINITY : 0.0f);
                __m256 nan = _mm256_setzero_ps();
                for (int64_t kh = 0; kh < s->kh; kh++) {
                    const float *row = padded + (oh * s->sh + kh * s->dh) * pw + ow * sw;
                    for (int64_t kw = 0; kw < s->kw; kw++) {
                        const float *p = row + kw * s->dw;
                        __m256 v;
                        if (sw == 1) v = _mm256_loadu_ps(p);
                        else
                            v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(
                                _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8),
                                                  0x88)), 0xD8));
                        if (maximum) {
                            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                            acc = _mm256_max_ps(acc, v);
                        } else {
                            acc = _mm256_add_ps(acc, v);
                        }
                    }
                }
                if (maximum) acc = _mm256_blendv_ps(acc, _mm256_set1_ps(NAN), nan);
                else if (row_count != NULL)
                    acc = _mm256_div_ps(acc, _mm256_mul_ps(_mm256_set1_ps(row_count[oh]),
                                                           _mm256_loadu_ps(col_count + ow)));
                _mm256_storeu_ps(target + ow, acc);
            }
#endif
        for (; ow < s->ow; ow++) {
            float acc = maximum ? -INFINITY : 0.0f;
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const float *row = padded + (oh * s->sh + kh * s->dh) * pw + ow * sw;
                if (maximum)
                    for (int64_t kw = 0; kw < s->kw; kw++) {
                        const float v = row[kw * s->dw];
                        acc = v > acc || v != v ? v : acc;
                    }
                else
                    for (int64_t kw = 0; kw < s->kw; kw++) acc += row[kw * s->dw];
            }
            target[ow] = row_count != NULL ? acc / (row_count[oh] * col_count[ow]) : acc;
        }
    }
}

typedef struct {
    const float *x;
    float *out;
    const Shape *s;
    int maximum;
    const float *row_count, *col_count;
    int64_t pw, ph, planes, per_unit;
} PoolJob;

/* Unit i: planes [i per_unit, (i + 1) per_unit). */
static void pool_task(void *context, int64_t unit) {
    const PoolJob *j = context;
    const Shape *s = j->s;
    float *padded = thread_buffer(0, (size_t)(j->pw * j->ph + 64));
    const int64_t first = unit * j->per_unit;
    const int64_t last = first + j->per_unit < j->planes ? first + j->per_unit : j->planes;
    for (int64_t i = first; i < last; i++) {
#if defined(__AVX512F__)
        if (pool_strips(j->x + i * s->h * s->w, j->out + i * s->oh * s->ow, s, j->maximum,
                        j->row_count, j->col_count))
            continue;
#endif
        pool_plane(j->x + i * s->h * s->w, j->out + i * s->oh * s->ow, s, padded, j->pw, j->ph,
                   j->maximum, j->maximum ? -INFINITY : 0.0f, j->row_count, j->col_count);
    }
}

static void pool(const float *x, float *out, const Shape *s, int maximum, int64_t mode,
                 float pad_bottom, float pad_right, int64_t threads) {
    const int64_t planes = s->n * s->m;
    const int64_t pw = (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1 + 16;
    const int64_t ph = (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1;
    float *row_count = NULL, *col_count = NULL;
    if (!maximum && mode != 2) tap_counts(s, mode, pad_bottom, pad_right, &row_count, &col_count);
    PoolJob j = {x, out, s, maximum, row_count, col_count, pw, ph, planes, 1};
    j.per_unit = threads > 1 ? (planes + 4 * threads - 1) / (4 * threads) : planes;
    if (j.per_unit < 1) j.per_unit = 1;
    run_units((planes + j.per_unit - 1) / j.per_unit, threads, pool_task, &j);
    free(row_count);
    free(col_count);
}

typedef struct {
    const float *x;
    float *out;
    int64_t plane, planes, per_unit, maximum, divide;
} WholeJob;

/* Unit i: the planes [i per_unit, (i + 1) per_unit) reduced to one value each. */
static void whole_task(void *context, int64_t unit) {
    const WholeJob *j = context;
    const int64_t first = unit * j->per_unit;
    const int64_t last = first + j->per_unit < j->planes ? first + j->per_unit : j->planes;
    for (int64_t i = first; i < last; i++) {
        const float *in = j->x + i * j->plane;
        int64_t k = 0;
        float result;
#if defined(__AVX512F__)
        __m512 a = _mm512_set1_ps(j->maximum ? -INFINITY : 0.0f), b = a;
        for (; k + 32 <= j->plane; k += 32) {
            const __m512 u = _mm512_loadu_ps(in + k), v = _mm512_loadu_ps(in + k + 16);
            a = j->maximum ? _mm512_max_ps(a, u) : _mm512_add_ps(a, u);
            b = j->maximum ? _mm512_max_ps(b, v) : _mm512_add_ps(b, v);
        }
        result = j->maximum ? _mm512_reduce_max_ps(_mm512_max_ps(a, b))
                            : _mm512_reduce_add_ps(_mm512_add_ps(a, b));
#else
        result = j->maximum ? -INFINITY : 0.0f;
#endif
        for (; k < j->plane; k++) {
            const float v = in[k];
            result = j->maximum ? (v > result || v != v ? v : result) : result + v;
        }
#if defined(__AVX512F__)
        if (j->maximum)  /* a NaN anywhere in the plane: NaN, as the windowed max gives */
            for (int64_t t = 0; t < j->plane; t++)
                if (in[t] != in[t]) {
                    result = in[t];
                    break;
                }
#endif
        j->out[i] = j->divide ? result / (float)j->plane : result;
    }
}

#if defined(__AVX512F__)
enum { BLOCKED_MAX_POOL = 10, BLOCKED_AVG_POOL = 11 };

typedef struct {
    const float *x;
    float *out;
    const Shape *s;
    int maximum;
    const float *row_count, *col_count;  /* an average's divisors (NULL: sums) */
} BlockedPoolJob;

/* One vector into a max (its NaN lanes marked in *nan, which win at the end) or a sum. */
static inline __attribute__((always_inline)) __m512 pool_step(__m512 acc, __m512 v,
                                                              __mmask16 *nan, int maximum) {
    if (!maximum) return _mm512_add_ps(acc, v);
    *nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_max_ps(acc, v);
}

/* The max (NaN wins) or sum over `taps` vectors `stride` floats apart. */
static inline __attribute__((always_inline)) __m512 pool_taps(const float *at, int64_t taps,
                                                              int64_t stride, int maximum) {
    __m512 acc = _mm512_set1_ps(maximum ? -INFINITY : 0.0f);
    __mmask16 nan = 0;
    for (int64_t t = 0; t < taps; t++)
        acc = pool_step(acc, _mm512_loadu_ps(at + t * stride), &nan, maximum);
    return maximum ? _mm512_mask_blend_ps(nan, acc, _mm512_set1_ps(NAN)) : acc;
}

/* BLOCKED_COLUMNS: the most input columns one pass of blocked_pool_row folds (64 KB). */
#define BLOCKED_COLUMNS 1024

/* Output row `oh` of one block, separably: each input column's max or sum over the window's
 * rows inside the input (into `column`, BLOCKED_COLUMNS at a time), then each position's
 * over its window's columns inside the input. Its taps are the same as the window's inside
 * the input, in a different order: a max is the same, a sum (of at most KH x KW terms)
 * rounds differently. */
static inline __attribute__((always_inline)) void blocked_pool_row(
        const BlockedPoolJob *j, const float *x, float *out, int64_t oh, int maximum) {
    const Shape *s = j->s;
    float column[BLOCKED_COLUMNS * 16] __attribute__((aligned(64)));
    int64_t first = 0, rows = 0;  /* the window's rows inside the input: kh in [first, +rows) */
    for (int64_t kh = 0; kh < s->kh; kh++) {
        const int64_t ih = oh * s->sh - s->pt + kh * s->dh;
        if (ih >= 0 && ih < s->h) {
            if (rows == 0) first = ih;
            rows++;
        }
    }
    const float *top = x + first * s->w * 16;
    const int64_t span = (s->kw - 1) * s->dw + 1;
    const int64_t per = (BLOCKED_COLUMNS - span) / s->sw + 1;  /* outputs a pass */
    for (int64_t o0 = 0; o0 < s->ow; o0 += per) {
        const int64_t o1 = o0 + per < s->ow ? o0 + per : s->ow;
        int64_t c0 = o0 * s->sw - s->pl, c1 = (o1 - 1) * s->sw - s->pl + span;
        c0 = c0 < 0 ? 0 : c0;
        c1 = c1 > s->w ? s->w : c1;
        for (int64_t iw = c0; iw < c1; iw++)
            _mm512_store_ps(column + (iw - c0) * 16,
                            pool_taps(top + iw * 16, rows, s->dh * s->w * 16, maximum));
        for (int64_t ow = o0; ow < o1; ow++) {
            const int64_t at = ow * s->sw - s->pl;
            int64_t k0 = 0, k1 = s->kw;  /* the window's columns inside the input */
            while (k0 < k1 && at + k0 * s->dw < 0) k0++;
            while (k1 > k0 && at + (k1 - 1) * s->dw >= s->w) k1--;
            __m512 acc = pool_taps(column + (at + k0 * s->dw - c0) * 16, k1 - k0, s->dw * 16,
                                   maximum);
            if (!maximum && j->row_count != NULL)
                acc = _mm512_div_ps(acc, _mm512_set1_ps(j->row_count[oh] * j->col_count[ow]));
            _mm512_storeu_ps(out + ow * 16, acc);
        }
    }
}

/* A window over the whole unpadded plane of one block (GlobalAveragePool, GlobalMaxPool):
 * its cells summed (or their max taken) in the order they are stored, four accumulators,
 * where blocked_pool_row's column pass read them a column at a time, each cell a line of
 * its own a row apart (efficientnet_b0's 32 x 112 x 112 squeeze: 44 -> 21 us). */
static inline __attribute__((always_inline)) void blocked_pool_whole(
        const BlockedPoolJob *j, const float *x, float *out, int maximum) {
    const int64_t cells = j->s->h * j->s->w;
    const __m512 start = _mm512_set1_ps(maximum ? -INFINITY : 0.0f);
    __m512 acc[4] = {start, start, start, start};
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 4 <= cells; i += 4)
        for (int a = 0; a < 4; a++)
            acc[a] = pool_step(acc[a], _mm512_loadu_ps(x + (i + a) * 16), &nan, maximum);
    for (; i < cells; i++)
        acc[0] = pool_step(acc[0], _mm512_loadu_ps(x + i * 16), &nan, maximum);
    __m512 result;
    if (maximum) {
        result = _mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3]));
        result = _mm512_mask_blend_ps(nan, result, _mm512_set1_ps(NAN));
    } else {
        result = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        if (j->row_count != NULL)
            result = _mm512_div_ps(result, _mm512_set1_ps(j->row_count[0] * j->col_count[0]));
    }
    _mm512_storeu_ps(out, result);
}

/* Unit u: output row u % OH of block u / OH (of every image's blocks), each position's 16
 * channels one vector (blocked_pool_row, or blocked_pool_whole for a whole-plane window). */
static void blocked_pool_task(void *context, int64_t u) {
    const BlockedPoolJob *j = context;
    const Shape *s = j->s;
    const int64_t oh = u % s->oh, block = u / s->oh;
    const float *x = j->x + block * s->h * s->w * 16;
    float *out = j->out + (block * s->oh + oh) * s->ow * 16;
    if (s->oh == 1 && s->ow == 1 && s->kh == s->h && s->kw == s->w && s->pt == 0
            && s->pl == 0 && s->dh == 1 && s->dw == 1) {
        if (j->maximum) blocked_pool_whole(j, x, out, 1);
        else blocked_pool_whole(j, x, out, 0);
        return;
    }
    if (j->maximum) blocked_pool_row(j, x, out, oh, 1);
    else blocked_pool_row(j, x, out, oh, 0);
}

static void blocked_pool(const float *x, float *out, const Shape *s, int maximum, int64_t mode,
                         float pad_bottom, float pad_right, int64_t threads) {
    float *row_count = NULL, *col_count = NULL;
    if (!maximum && mode != 2) tap_counts(s, mode, pad_bottom, pad_right, &row_count, &col_count);
    BlockedPoolJob j = {x, out, s, maximum, row_count, col_count};
    run_units(s->n * s->c * s->oh, threads, blocked_pool_task, &j);  /* CPool's team */
    free(row_count);
    free(col_count);
}
#endif

/* ------------------------------------------------------------ concatenation on the team
 * COPY_PARTS: concat.c's copy (data = {out, part 0, part 1, ...}, sizes = {COPY_PARTS,
 * threads, parts, outer, out_row_bytes, part 0 row bytes, ...}) cut into COPY_CHUNK-byte
 * pieces of the parts' rows, run on the work pool: a channel concat of convolution outputs
 * the team just wrote (half of each in the other core's cache) copied by one thread took
 * longer on two threads than on one (squeezenet's 128 x 55 x 55: 98 us one thread, 108
 * two). */
#define COPY_PARTS 9
#define COPY_CHUNK 32768
typedef struct {
    char *out;
    const char *const *parts;
    const int64_t *bytes;  /* per part: its row's bytes */
    int64_t count, row, per_row;  /* parts; the output row's bytes; chunks in one */
} CopyJob;

/* Unit u: chunk u % per_row of outer row u / per_row (the parts' chunks in order). */
static void copy_task(void *context, int64_t unit) {
    const CopyJob *j = context;
    const int64_t o = unit / j->per_row;
    int64_t chunk = unit % j->per_row, offset = 0, p = 0;
    for (;; p++) {
        const int64_t chunks = (j->bytes[p] + COPY_CHUNK - 1) / COPY_CHUNK;
        if (chunk < chunks) break;
        chunk -= chunks;
        offset += j->bytes[p];
    }
    const int64_t start = chunk * COPY_CHUNK, bytes = j->bytes[p];
    const int64_t size = bytes - start < COPY_CHUNK ? bytes - start : COPY_CHUNK;
    memcpy(j->out + o * j->row + offset + start, j->parts[p] + o * bytes + start, (size_t)size);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (pool_share(data, sizes)) return;
    if (sizes[0] == COPY_PARTS) {
        CopyJob j = {data[0], (const char *const *)(data + 1), sizes + 5, sizes[2], sizes[4], 0};
        for (int64_t p = 0; p < j.count; p++) j.per_row += (j.bytes[p] + COPY_CHUNK - 1) / COPY_CHUNK;
        run_units(sizes[3] * j.per_row, sizes[1] > 1 ? sizes[1] : 1, copy_task, &j);
        return;
    }
    const int64_t form = sizes[0], threads = (sizes[1] > 1 ? sizes[1] : 1);
    const Shape s = shape_of(sizes);
    const float *scalars = data[6];
#if defined(__AVX512F__)
    if (form == BLOCKED_MAX_POOL || form == BLOCKED_AVG_POOL) {
        blocked_pool(data[0], data[4], &s, form == BLOCKED_MAX_POOL, s.act,
                     scalars != NULL ? scalars[0] : 0.0f, scalars != NULL ? scalars[1] : 0.0f,
                     threads);
        return;
    }
#endif
    if (s.oh == 1 && s.ow == 1 && s.kh == s.h && s.kw == s.w && s.pt == 0 && s.pl == 0
            && s.dh == 1 && s.dw == 1 && (scalars == NULL || (scalars[0] == 0.0f
                                                              && scalars[1] == 0.0f))) {
        const int64_t planes = s.n * s.c;
        WholeJob j = {data[0], data[4], s.h * s.w, planes, planes, form == MAX_POOL,
                      form == AVG_POOL && s.act != 2};
        if (threads > 1) j.per_unit = (planes + 4 * threads - 1) / (4 * threads);
        run_units((planes + j.per_unit - 1) / j.per_unit, threads, whole_task, &j);
        return;
    }
    pool(data[0], data[4], &s, form == MAX_POOL, s.act, scalars != NULL ? scalars[0] : 0.0f,
         scalars != NULL ? scalars[1] : 0.0f, threads);
}
