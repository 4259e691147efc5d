/* float32 convolution for fuel's CPU backend (after conv_common.h; convolution_c.py drives
 * it). Operands are dense NCHW (a 1-d convolution is a 2-d one of height 1); a launch covers
 * the whole batch.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {x, w, bias, residual, out, slope, scalars, scratch, scale}  (float *; bias,
 *           residual, slope, scratch and scale may be NULL; scalars = {alpha, beta} of the
 *           activation; scale: the blocked lanes form's input scale per image and channel)
 *   sizes = conv_common.h's; strides is unused (NULL).
 * Forms:
 *   0 im2col:    scratch[(c * KH + kh) * KW + kw][oh * OW + ow] = x[0, c, ...] (0 in the
 *                padding) for the C channels of one image and group (x points at them); the
 *                OpenBLAS sibling multiplies it.
 *   1 epilogue:  out[n, m, p] = act(out[n, m, p] + bias[m] + residual[n, m, p]) in place.
 *   3 col2im:    the transposed convolution's scatter: out[n, m, ...] (zeroed here) +=
 *                scratch[(m * KH + kh) * KW + kw][ih * W + iw] at the output position
 *                (ih * stride - pad + kh * dilation, ...), for the M channels of one image and
 *                group (out points at them; H, W the input's and OH, OW the output's sizes).
 *   4 gemm:      the convolution as GEMMs in here, threaded with OpenMP: per image and group,
 *                out[m, p] = sum_k w[m, k] * B[k, p] with B the patch matrix, each KC x NC
 *                block of it built straight from the image into the thread's NR-column
 *                panels (an implicit GEMM: no patch matrix in memory); the weights read as
 *                stored, a 6 x 16 register tile, the epilogue applied on the tile at its last
 *                K block. Fewer than NR output positions: one dot product per output.
 *   5 gemm pointwise: the same with B the input as stored (1x1, stride 1, no padding).
 *   6 transposed: the transposed convolution (w: C x M/groups x KH x KW; H, W the input's
 *                sizes, OH, OW the output's): the GEMM sums[(m, kh, kw), p] = sum_c
 *                w[c, m, kh, kw] * x[c, p] (threaded). Where no two taps reach one output
 *                (kernel at most the stride: a 2x2 stride 2 upsampling) a unit's sums (a
 *                few input rows, every channel and tap) are stored straight into the outputs
 *                they reach from a buffer in cache; else per image and group into scratch,
 *                then col2im's scatter, the channels split between the threads.
 *   13 lanes:    conv_lanes.h's lanes form, scratch holding the weights as 14 (lanes weights)
 *                wrote them (a model's constant weights, transposed once).
 *   15 lanes blocked: the same on a blocked input, residual and output (NCHW16c: x
 *                [N][C/16][H][W][16], out [N][M/16][OH][OW][16]; C and M multiples of 16,
 *                groups 1), the epilogue applied as each tile is stored.
 *   16 block:    out[n][c / 16][h][w][c % 16] = x[n][c][h][w] (N, C, H, W: n, c, h, w).
 *   17 unblock:  the inverse.
 * (Form 2, depthwise, is depthwise.c's; 7 and 8, pooling, pool.c's.)
 */

enum { IM2COL = 0, EPILOGUE = 1, COL2IM = 3, GEMM = 4, GEMM_POINTWISE = 5, TRANSPOSED = 6 };

static void im2col(const float *restrict x, float *restrict cols, const Shape *s) {
    const int64_t plane = s->oh * s->ow;
    for (int64_t c = 0; c < s->c; c++)
        for (int64_t kh = 0; kh < s->kh; kh++)
            for (int64_t kw = 0; kw < s->kw; kw++) {
                float *row = cols + ((c * s->kh + kh) * s->kw + kw) * plane;
                const int64_t off = kw * s->dw - s->pl;
                int64_t lo, hi;  /* ow with 0 <= ow * sw + off < W */
                inside_span(off, s->sw, s->ow, s->w, &lo, &hi);
                for (int64_t oh = 0; oh < s->oh; oh++) {
                    float *target = row + oh * s->ow;
                    const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
                    if (ih < 0 || ih >= s->h) {
                        memset(target, 0, sizeof(float) * s->ow);
                        continue;
                    }
                    const float *source = x + (c * s->h + ih) * s->w + off;
                    for (int64_t ow = 0; ow < lo; ow++) target[ow] = 0.0f;
                    if (s->sw == 1)
                        memcpy(target + lo, source + lo, sizeof(float) * (hi - lo));
                    else
                        for (int64_t ow = lo; ow < hi; ow++) target[ow] = source[ow * s->sw];
                    for (int64_t ow = hi; ow < s->ow; ow++) target[ow] = 0.0f;
                }
            }
}

static void col2im(const float *restrict cols, float *restrict out, const Shape *s,
                   int64_t m0, int64_t m1) {
    /* s->h, s->w: the input's sizes (columns of cols); s->oh, s->ow: the output's; the
     * channels [m0, m1) (each reads only its own rows of cols: threads may split them). */
    const int64_t plane = s->h * s->w;
    memset(out + m0 * s->oh * s->ow, 0, sizeof(float) * (m1 - m0) * s->oh * s->ow);
    for (int64_t m = m0; m < m1; m++)
        for (int64_t kh = 0; kh < s->kh; kh++)
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const float *row = cols + ((m * s->kh + kh) * s->kw + kw) * plane;
                const int64_t off = kw * s->dw - s->pl;
                int64_t lo, hi;  /* input columns iw with 0 <= iw * sw + off < OW */
                inside_span(off, s->sw, s->w, s->ow, &lo, &hi);
                for (int64_t ih = 0; ih < s->h; ih++) {
                    const int64_t y = ih * s->sh + kh * s->dh - s->pt;
                    if (y < 0 || y >= s->oh) continue;
                    float *target = out + (m * s->oh + y) * s->ow;
                    const float *source = row + ih * s->w;
                    for (int64_t iw = lo; iw < hi; iw++) target[iw * s->sw + off] += source[iw];
                }
            }
}

/* rows [r0, r1) of the transpose of w (k x m, row-major) into t (m x k, row-major). */
static void transpose_rows(const float *w, int64_t m, int64_t k, float *t, int64_t r0,
                           int64_t r1) {
    for (int64_t i = r0; i < r1; i++)
        for (int64_t l = 0; l < k; l++) t[i * k + l] = w[l * m + i];
}

/* Whether no two taps of the transposed convolution land on one output along either axis
 * (input i's tap t lands on i * stride + t * dilation - pad: (taps - 1) * dilation <
 * stride), so the input positions a unit multiplies own every output they reach. */
static int taps_apart(const Shape *s) {
    return (s->kh - 1) * s->dh < s->sh && (s->kw - 1) * s->dw < s->sw;
}

/* Whether, apart, the taps also reach every output (kernel == stride, no dilation, the
 * output no larger than the taps reach): nothing to zero first. */
static int taps_cover(const Shape *s) {
    return s->kh == s->sh && s->kw == s->sw && s->dh == 1 && s->dw == 1 && s->pt >= 0 &&
           s->pl >= 0 && s->oh <= s->h * s->sh - s->pt && s->ow <= s->w * s->sw - s->pl;
}

/* One row of `taps` (KW) sums `columns` apart (cols[kw * columns + iw]) stored at
 * target[iw * sw + kw * dw - pl] where inside the output row. */
static void scatter_row(const float *restrict cols, int64_t columns, float *restrict target,
                        const Shape *s) {
    if (s->kw == s->sw && s->dw == 1 && s->pl == 0 && s->ow == s->w * s->sw) {
        if (s->kw == 2) {  /* the common 2x2 stride 2 upsampling: one interleave */
            const float *a = cols, *b = cols + columns;
            for (int64_t iw = 0; iw < s->w; iw++) {
                target[2 * iw] = a[iw];
                target[2 * iw + 1] = b[iw];
            }
            return;
        }
        for (int64_t iw = 0; iw < s->w; iw++)
            for (int64_t kw = 0; kw < s->kw; kw++)
                target[iw * s->kw + kw] = cols[kw * columns + iw];
        return;
    }
    for (int64_t kw = 0; kw < s->kw; kw++) {
        const int64_t off = kw * s->dw - s->pl;
        int64_t lo, hi;
        inside_span(off, s->sw, s->w, s->ow, &lo, &hi);
        const float *source = cols + kw * columns;
        for (int64_t iw = lo; iw < hi; iw++) target[iw * s->sw + off] = source[iw];
    }
}

/* Taps apart: the GEMM of a unit's input rows [ih0, ih1) (every output channel and tap of
 * one image and group) into this thread's buffer, stored straight into the outputs they
 * reach while the buffer is in cache (no patch matrix, no col2im pass). */
static void transposed_rows(const float *weights, const float *source, float *out,
                            const Shape *s, int64_t mg, int64_t cg, int64_t ih0, int64_t ih1,
                            float *buffer, float *panel) {
    const int64_t taps = s->kh * s->kw, rows = mg * taps, plane = s->h * s->w;
    const int64_t nc = (ih1 - ih0) * s->w;
    const Finish none = {NULL, NULL, 0, 0.0f, 0.0f};
    gemm_unit(weights, source + ih0 * s->w, plane, NULL, buffer, nc, NULL, rows, cg, 0, nc, 0,
              (rows + MR - 1) / MR, panel, &none, NULL, 0);
    for (int64_t m = 0; m < mg; m++)
        for (int64_t kh = 0; kh < s->kh; kh++)
            for (int64_t ih = ih0; ih < ih1; ih++) {
                const int64_t y = ih * s->sh + kh * s->dh - s->pt;
                if (y < 0 || y >= s->oh) continue;
                scatter_row(buffer + (m * taps + kh * s->kw) * nc + (ih - ih0) * s->w, nc,
                            out + (m * s->oh + y) * s->ow, s);
            }
}

/* Floats of a taps-apart unit's buffer to aim for (its rows of sums stay in L2 until
 * stored). */
#define TRANSPOSED_UNIT_FLOATS 32768
/* Rows of the weights' transpose a thread takes at a time (a model of one group: the
 * transpose split between the threads). */
#define TRANSPOSE_ROWS 64

static void transposed_conv(const float *x, const float *w, float *out, float *scratch,
                            const Shape *s, int64_t threads) {
    const int64_t cg = s->c / s->groups, mg = s->m / s->groups, taps = s->kh * s->kw;
    const int64_t rows = mg * taps, plane = s->h * s->w, out_plane = s->oh * s->ow;
    const int64_t slivers = (rows + MR - 1) / MR;
    float *transposed = thread_buffer(2, (size_t)(rows * (cg > 0 ? cg : 1)) *
                                         (size_t)s->groups);
    const int apart = taps_apart(s);
    /* taps apart: units of whole input rows, as many as fit the buffer, at least two per
     * thread where the image has the rows */
    int64_t unit_rows = TRANSPOSED_UNIT_FLOATS / (rows * s->w > 0 ? rows * s->w : 1);
    if (unit_rows > s->h) unit_rows = s->h;
    if (unit_rows < 1) unit_rows = 1;
    const int64_t images = s->n * s->groups;
    while (unit_rows > 1 && images * ((s->h + unit_rows - 1) / unit_rows) < 2 * threads)
        unit_rows /= 2;
    const int64_t per_image = (s->h + unit_rows - 1) / unit_rows;
    int64_t block, column_blocks, row_blocks;
    split_units(plane, slivers, threads, &block, &column_blocks, &row_blocks);
    const int64_t units = column_blocks * row_blocks;
    const Finish none = {NULL, NULL, 0, 0.0f, 0.0f};
    Shape one = *s;
    one.m = mg;
    const int64_t row_chunks = (rows + TRANSPOSE_ROWS - 1) / TRANSPOSE_ROWS;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < s->groups * row_chunks; i++) {
            const int64_t g = i / row_chunks, r0 = i % row_chunks * TRANSPOSE_ROWS;
            const int64_t r1 = r0 + TRANSPOSE_ROWS < rows ? r0 + TRANSPOSE_ROWS : rows;
            transpose_rows(w + g * cg * rows, rows, cg, transposed + g * rows * cg, r0, r1);
        }
        if (apart) {
            float *panel = thread_buffer(0, (size_t)PANEL(KC) *
                                            (size_t)((unit_rows * s->w + NR - 1) / NR));
            float *buffer = thread_buffer(1, (size_t)(rows * unit_rows * s->w));
            if (!taps_cover(s)) {
#pragma omp for schedule(static)
                for (int64_t i = 0; i < s->n * s->m; i++)
                    memset(out + i * out_plane, 0, sizeof(float) * out_plane);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < images * per_image; u++) {
                const int64_t ig = u / per_image, image = ig / s->groups, g = ig % s->groups;
                const int64_t ih0 = u % per_image * unit_rows;
                const int64_t ih1 = ih0 + unit_rows < s->h ? ih0 + unit_rows : s->h;
                transposed_rows(transposed + g * rows * cg, x + (image * s->c + g * cg) * plane,
                                out + (image * s->m + g * mg) * out_plane, s, mg, cg, ih0, ih1,
                                buffer, panel);
            }
        } else {
            float *panel = thread_buffer(0, (size_t)PANEL(KC) * (size_t)((block + NR - 1) / NR));
            for (int64_t image = 0; image < s->n; image++)
                for (int64_t g = 0; g < s->groups; g++) {
                    const float *source = x + (image * s->c + g * cg) * plane;
#pragma omp for schedule(dynamic, 1)
                    for (int64_t u = 0; u < units; u++) {
                        const int64_t cb = u % column_blocks, rb = u / column_blocks;
                        const int64_t n0 = cb * block;
                        const int64_t nc = plane - n0 < block ? plane - n0 : block;
                        gemm_unit(transposed + g * rows * cg, source, plane, NULL, scratch,
                                  plane, NULL, rows, cg, n0, nc, slivers * rb / row_blocks,
                                  slivers * (rb + 1) / row_blocks, panel, &none, NULL, 0);
                    }
                    /* each channel's scatter reads only its rows of the sums */
                    float *target = out + (image * s->m + g * mg) * out_plane;
#pragma omp for schedule(static)
                    for (int64_t t = 0; t < threads; t++)
                        col2im(scratch, target, &one, mg * t / threads, mg * (t + 1) / threads);
                }
        }
    }
}

/* Few output positions (plane < HALF, e.g. a squeeze-excite's 1x1 maps): per image and group
 * (a unit of run_units) the patch columns transposed into `columns` (plane x k), then one
 * dot product per output, no weight packing. */
typedef struct {
    const float *x, *w, *residual;
    float *out;
    const Shape *s;
    const Finish *f;
} SmallJob;

static void small_task(void *context, int64_t unit) {
    const SmallJob *j = context;
    const Shape *s = j->s;
    const Finish *f = j->f;
    const int64_t image = unit / s->groups, g = unit % s->groups;
    const int64_t cg = s->c / s->groups, mg = s->m / s->groups, taps = s->kh * s->kw;
    const int64_t k = cg * taps, plane = s->oh * s->ow, in_plane = s->h * s->w;
    float *columns = thread_buffer(1, (size_t)(plane * k + 1));
    const float *source = j->x + (image * s->c + g * cg) * in_plane;
    for (int64_t p = 0; p < plane; p++) {
        const int64_t y0 = (p / s->ow) * s->sh - s->pt, x0 = (p % s->ow) * s->sw - s->pl;
        float *column = columns + p * k;
        for (int64_t l = 0; l < k; l++) {
            const int64_t c = l / taps, kh = (l % taps) / s->kw, kw = l % s->kw;
            const int64_t iy = y0 + kh * s->dh, ix = x0 + kw * s->dw;
            column[l] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                            ? source[(c * s->h + iy) * s->w + ix] : 0.0f;
        }
    }
    const int64_t at = (image * s->m + g * mg) * plane;
    for (int64_t m = 0; m < mg; m++) {
        const float *row = j->w + (g * mg + m) * k;
        float values[HALF];
        for (int64_t p = 0; p < plane; p++) {
            const float *column = columns + p * k;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t l = 0; l < k; l++) sum += row[l] * column[l];
            values[p] = sum;
        }
        const int64_t channel = g * mg + m;
        finish(values, plane, f->bias != NULL ? f->bias[channel] : 0.0f,
               j->residual != NULL ? j->residual + at + m * plane : NULL, f->act, f->alpha,
               f->beta, f->slope != NULL ? f->slope[channel] : 0.0f);
        memcpy(j->out + at + m * plane, values, sizeof(float) * plane);
    }
}

#if defined(__AVX512F__)
/* One output position (a squeeze-excite's 1x1 map), groups 1: unit u is image u / blocks and
 * output channels [16 * (u % blocks), + 16): the patch column (k values) built, then 16
 * weight rows dotted with it at once (16 accumulators over k), the sums reduced into one
 * vector of the 16 channels, the epilogue on it and one store. The per-channel dot product,
 * its horizontal sum and a finish call per output ran at 4-14 GFLOP/s (576->144: 12 us hot,
 * about 40 in mobilenet_v3_small, whose ten such launches took a fifth of its time). */
#define POINT_ROWS 16
static void point_task(void *context, int64_t unit) {
    const SmallJob *j = context;
    const Shape *s = j->s;
    const Finish *f = j->f;
    const int64_t blocks = (s->m + POINT_ROWS - 1) / POINT_ROWS;
    const int64_t image = unit / blocks, m0 = unit % blocks * POINT_ROWS;
    const int64_t taps = s->kh * s->kw, k = s->c * taps;
    const int64_t rows = s->m - m0 < POINT_ROWS ? s->m - m0 : POINT_ROWS;
    const int64_t kp = (k + 15) / 16 * 16;
    float *column = thread_buffer(1, (size_t)kp);
    const float *source = j->x + image * s->c * s->h * s->w;
    if (taps == 1 && s->h == 1 && s->w == 1 && s->pt == 0 && s->pl == 0) {
        memcpy(column, source, sizeof(float) * k);  /* the 1x1 map's channels as stored */
    } else {
        for (int64_t c = 0, l = 0; c < s->c; c++)
            for (int64_t kh = 0; kh < s->kh; kh++)
                for (int64_t kw = 0; kw < s->kw; kw++, l++) {
                    const int64_t iy = kh * s->dh - s->pt, ix = kw * s->dw - s->pl;
                    column[l] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                                    ? source[(c * s->h + iy) * s->w + ix] : 0.0f;
                }
    }
    for (int64_t l = k; l < kp; l++) column[l] = 0.0f;
    const __mmask16 last = k % 16 ? (__mmask16)((1u << (k % 16)) - 1u) : (__mmask16)0xFFFF;
    __m512 acc[POINT_ROWS];
    const float *row[POINT_ROWS];
    for (int r = 0; r < POINT_ROWS; r++) {
        acc[r] = _mm512_setzero_ps();
        row[r] = j->w + (m0 + (r < rows ? r : rows - 1)) * k;
    }
    for (int64_t l = 0; l < kp; l += 16) {
        const __mmask16 keep = l + 16 <= k ? (__mmask16)0xFFFF : last;
        const __m512 x = _mm512_load_ps(column + l);
#pragma GCC unroll 16
        for (int r = 0; r < POINT_ROWS; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(keep, row[r] + l), x, acc[r]);
    }
    /* the 16 sums into one vector: pairwise halves, lane r = sum of acc[r] */
    __m512 level[8];
    for (int r = 0; r < 8; r++) {  /* 16 -> 8: lanes of the low 8 and high 8 halves */
        const __m512 a = acc[r], b = acc[r + 8];
        level[r] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    /* level[r]: lanes 0-7 acc[r]'s two 256-bit halves summed pairwise (as 128-bit blocks),
     * lanes 8-15 acc[r + 8]'s */
    float sums[POINT_ROWS];
    for (int r = 0; r < 8; r++) {
        const __m256 low = _mm512_castps512_ps256(level[r]);
        const __m256 high = _mm512_extractf32x8_ps(level[r], 1);
        __m128 a = _mm_add_ps(_mm256_castps256_ps128(low), _mm256_extractf128_ps(low, 1));
        __m128 b = _mm_add_ps(_mm256_castps256_ps128(high), _mm256_extractf128_ps(high, 1));
        a = _mm_hadd_ps(a, b);
        a = _mm_hadd_ps(a, a);
        sums[r] = _mm_cvtss_f32(a);
        sums[r + 8] = _mm_cvtss_f32(_mm_shuffle_ps(a, a, 1));
    }
    const __mmask16 lanes = (__mmask16)((1u << rows) - 1u);
    __m512 y = _mm512_loadu_ps(sums);
    const int64_t at = image * s->m + m0;
    if (f->act != NONE || f->bias != NULL || j->residual != NULL) {
        y = _mm512_add_ps(y, f->bias != NULL ? _mm512_maskz_loadu_ps(lanes, f->bias + m0)
                                             : _mm512_setzero_ps());
        if (j->residual != NULL) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(lanes, j->residual + at));
        if (f->act == PRELU) {
            const __m512 slope = _mm512_maskz_loadu_ps(lanes, f->slope + m0);
            y = _mm512_mask_mul_ps(y, _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ), y,
                                   slope);
        } else {
            y = act16(y, f->act, f->alpha, f->beta, 0.0f);
        }
    }
    _mm512_mask_storeu_ps(j->out + at, lanes, y);
}
#endif

static void small_conv(const float *x, const float *w, float *out, const float *residual,
                       const Shape *s, const Finish *f, int64_t threads) {
    SmallJob j = {x, w, residual, out, s, f};
#if defined(__AVX512F__)
    if (s->oh * s->ow == 1 && s->groups == 1) {
        run_units(s->n * ((s->m + POINT_ROWS - 1) / POINT_ROWS), threads, point_task, &j);
        return;
    }
#endif
    run_units(s->n * s->groups, threads, small_task, &j);
}

#define COLUMN_SHARE 128  /* fewest columns a thread's share of one GEMM's plane */
#define UNITS_PER_THREAD 4

typedef struct {
    const float *x, *w, *residual;
    float *out;
    const Shape *s;
    const Finish *f;
    Shape one;  /* one group's shape */
    int pointwise;
    int64_t cg, mg, k, plane, in_plane, slivers, block, column_blocks, row_blocks, units;
    float *prepacked;  /* one GEMM's whole patch matrix in panels, per K block, or NULL */
    int64_t kstride, main;  /* floats between two K blocks' panels; the columns packed */
} GemmJob;

/* Where column block `cb` of `blocks` starts in a plane of `plane` columns: the even split
 * rounded to whole HALF-column panels (the last block ends at the plane's end). */
static inline int64_t block_start(int64_t plane, int64_t blocks, int64_t cb) {
    if (cb >= blocks) return plane;
    return plane * cb / blocks / HALF * HALF;
}

/* Unit u of a GemmJob: GEMM u / units (image-major, then group), its column block and
 * sliver block u % units. */
static void gemm_task(void *context, int64_t u) {
    const GemmJob *j = context;
    const Shape *s = j->s;
    const int64_t image = u / j->units / s->groups, g = u / j->units % s->groups;
    const int64_t cb = u % j->units % j->column_blocks, rb = u % j->units / j->column_blocks;
    float *panel = thread_buffer(0, (size_t)PANEL(KC) * (size_t)((j->block + NR - 1) / NR));
    const float *source = j->x + (image * s->c + g * j->cg) * j->in_plane;
    const int64_t at = (image * s->m + g * j->mg) * j->plane;
    Finish local = *j->f;
    if (local.bias != NULL) local.bias += g * j->mg;
    if (local.slope != NULL) local.slope += g * j->mg;
    const int64_t n0 = block_start(j->plane, j->column_blocks, cb);
    const int64_t nc = block_start(j->plane, j->column_blocks, cb + 1) - n0;
    const int64_t s0 = j->slivers * rb / j->row_blocks;
    const int64_t s1 = j->slivers * (rb + 1) / j->row_blocks;
    gemm_unit(j->w + g * j->mg * j->k, source, j->plane, j->pointwise ? NULL : &j->one,
              j->out + at, j->plane, j->residual != NULL ? j->residual + at : NULL, j->mg,
              j->k, n0, nc, s0, s1, panel, &local, j->prepacked, j->kstride);
}

/* Unit kb of a GemmJob's packing: K block kb of its one GEMM's patch columns [0, main) into
 * the shared panels. */
static void pack_task(void *context, int64_t kb) {
    const GemmJob *j = context;
    const int64_t l0 = kb * KC, kc = j->k - l0 < KC ? j->k - l0 : KC;
    pack_b_conv(j->x, &j->one, l0, kc, 0, j->main, j->prepacked + kb * j->kstride);
}

static void gemm_conv(const float *x, const float *w, float *out, const float *residual,
                      int pointwise, const Shape *s, const Finish *f, int64_t threads) {
    GemmJob j = {x, w, residual, out, s, f, *s, pointwise, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0};
    j.cg = s->c / s->groups;
    j.mg = s->m / s->groups;
    j.k = j.cg * s->kh * s->kw;
    j.plane = s->oh * s->ow;
    j.in_plane = s->h * s->w;
    j.slivers = (j.mg + MR - 1) / MR;
    j.one.c = j.cg;
    const int64_t gemms = s->n * s->groups;
    /* Work units: per GEMM (image and group) column blocks x sliver blocks, enough that the
     * team splits them evenly; one job over every GEMM's units. A GEMM shared by several
     * threads splits its columns where each thread still gets COLUMN_SHARE of them (at the
     * even split rounded to whole panels: 14x14's 196 columns once ran as 128 + 68), else
     * its output channels (every thread packs the whole plane but reads only its share of
     * the weights). */
    const int64_t per_gemm = gemms >= threads ? 1 : (threads + gemms - 1) / gemms;
    int64_t blocks = (j.plane + NC - 1) / NC, rows = 1;
    if (per_gemm > 1) {
        if (j.plane >= per_gemm * COLUMN_SHARE || j.slivers < per_gemm) {
            if (blocks % per_gemm && j.plane >= per_gemm * HALF)
                blocks += per_gemm - blocks % per_gemm;
            /* at least UNITS_PER_THREAD blocks a thread while they keep COLUMN_SHARE * 3/4
             * columns: a thread that starts late or runs slow leaves its last units to the
             * others (two threads, 28x28 planes: 128->512 1x1 730 -> 556 us, 128->128 3x3
             * stride 2 1444 -> 1295; larger planes already have as many blocks) */
            while (blocks < per_gemm * UNITS_PER_THREAD
                   && j.plane >= (blocks + per_gemm) * (COLUMN_SHARE * 3 / 4))
                blocks += per_gemm;
        } else {
            rows = per_gemm;
        }
    }
    if (blocks > j.plane / HALF) blocks = j.plane / HALF > 1 ? j.plane / HALF : 1;
    j.column_blocks = blocks;
    j.row_blocks = rows;
    j.block = 0;
    for (int64_t cb = 0; cb < blocks; cb++) {
        const int64_t width = block_start(j.plane, blocks, cb + 1) - block_start(j.plane, blocks, cb);
        if (width > j.block) j.block = width;
    }
    j.units = j.column_blocks * j.row_blocks;
    if (gemms == 1 && blocks == 1 && rows > 1 && j.k > KC && !pointwise) {
        /* output-channel blocks of one GEMM: its patch panels packed once, K blocks over the
         * team, not once a block (two threads: 512->512 3x3 at 7x7 1470 -> 1340 us, stride 2
         * from 14x14 1450 -> 1351; a pointwise GEMM's packing is a copy, and the extra
         * pass cost more than it saved: 1024->256 1x1 at 14x14 492 -> 514) */
        j.main = j.plane;
#if defined(__AVX512F__)
        if (j.plane > HALF && j.plane % HALF <= TAIL) j.main -= j.plane % HALF;  /* gemm_unit's tail */
#endif
        j.kstride = PANEL(KC) * ((j.main + NR - 1) / NR);
        const int64_t kblocks = (j.k + KC - 1) / KC;
        j.prepacked = thread_buffer(2, (size_t)(kblocks * j.kstride));
        run_units(kblocks, threads, pack_task, &j);
    }
    run_units(gemms * j.units, threads, gemm_task, &j);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (pool_share(data, sizes)) return;
    const int64_t form = sizes[0], threads = (sizes[1] > 1 ? sizes[1] : 1);
    const Shape s = shape_of(sizes);
    const float *x = data[0], *w = data[1], *bias = data[2], *residual = data[3];
    float *out = data[4];
    const float *slope = data[5], *scalars = data[6];
    float *scratch = data[7];
    const float alpha = scalars != NULL ? scalars[0] : 0.0f;
    const float beta = scalars != NULL ? scalars[1] : 0.0f;
    const int64_t plane = s.oh * s.ow;
    if (form == IM2COL) {
        im2col(x, scratch, &s);
    } else if (form == COL2IM) {
        col2im(scratch, out, &s, 0, s.m);
    } else if (form == EPILOGUE) {
        const int64_t planes = s.n * s.m;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && planes > 1)
        for (int64_t i = 0; i < planes; i++) {
            const int64_t m = i % s.m;
            finish(out + i * plane, plane, bias != NULL ? bias[m] : 0.0f,
                   residual != NULL ? residual + i * plane : NULL, s.act, alpha, beta,
                   slope != NULL ? slope[m] : 0.0f);
        }
    } else if (form == TRANSPOSED) {
        transposed_conv(x, w, out, scratch, &s, threads);
#if defined(__AVX512F__)
    } else if (form == LANES_WEIGHTS) {
        lanes_weights(w, scratch, &s);
    } else if (form == BLOCK_CHANNELS || form == UNBLOCK_CHANNELS) {
        const Finish f = {bias, slope, s.act, alpha, beta};
        blocking(x, out, &s, form == UNBLOCK_CHANNELS, w, &f, threads);
    } else if (form == LANES_RUN || form == LANES_BLOCKED) {
        const Finish f = {bias, slope, s.act, alpha, beta};
        Shape launch = s;
        launch.blocked = form == LANES_BLOCKED;
        lanes_conv(x, scratch, out, residual, form == LANES_BLOCKED ? data[8] : NULL, &launch,
                   &f, threads);
#endif
    } else if (form == GEMM || form == GEMM_POINTWISE) {
        const Finish f = {bias, slope, s.act, alpha, beta};
        if (s.oh * s.ow < HALF)
            small_conv(x, w, out, residual, &s, &f, threads);
#if defined(__AVX512F__)
        else if (wide_form(&s, form == GEMM_POINTWISE))
            wide_conv(x, w, out, residual, &s, &f, threads);
#endif
        else
            gemm_conv(x, w, out, residual, form == GEMM_POINTWISE, &s, &f, threads);

    }
}
