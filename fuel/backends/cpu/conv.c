/* float32 convolution pieces for fuel's CPU backend (convolution.py drives them; OpenBLAS,
 * through NumPy, does the GEMMs). Operands are dense NCHW (a 1-d convolution is a 2-d one of
 * height 1); a launch covers the whole batch.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {x, w, bias, residual, out, slope, scalars, scratch}  (float *; bias, residual,
 *           slope and scratch may be NULL; scalars = {alpha, beta} of the activation)
 *   sizes = {form, threads, N, C, H, W, M, KH, KW, OH, OW, stride_h, stride_w, dilation_h,
 *            dilation_w, pad_top, pad_left, groups, activation}
 *   strides is unused (NULL).
 * Forms:
 *   0 im2col:    scratch[(c * KH + kh) * KW + kw][oh * OW + ow] = x[0, c, ...] (0 in the
 *                padding) for the C channels of one image and group (x points at them).
 *   1 epilogue:  out[n, m, p] = act(out[n, m, p] + bias[m] + residual[n, m, p]) in place.
 *   2 depthwise: groups == C == M: each plane convolved with its own KH x KW filter, the
 *                output row's interior accumulated in registers over every tap, the epilogue
 *                applied on the row while it is in cache.
 *   3 col2im:    the transposed convolution's scatter: out[n, m, ...] (zeroed here) +=
 *                scratch[(m * KH + kh) * KW + kw][ih * W + iw] at the output position
 *                (ih * stride - pad + kh * dilation, ...), for the M channels of one image and
 *                group (out points at them; H, W the input's and OH, OW the output's sizes).
 *   4 gemm:      the convolution as GEMMs in here, threaded with OpenMP: per image and group,
 *                out[m, p] = sum_k w[m, k] * B[k, p] with B the patch matrix, each KC x NC
 *                block of it built straight from the image into the thread's panel (an
 *                implicit GEMM: no patch matrix in memory);
 *   5 gemm pointwise: the same with B the input as stored (1x1, stride 1, no padding); w packed in MR-row slivers, B in NR panels, a 6 x 16 register tile, the epilogue applied on
 *                the tile at its last K block.
 *   6 transposed: the transposed convolution (w: C x M/groups x KH x KW; H, W the input's
 *                sizes, OH, OW the output's): per image and group the GEMM
 *                scratch[(m, kh, kw), p] = sum_c w[c, m, kh, kw] * x[c, p] (threaded), then
 *                col2im's scatter into the output (zeroed first).
 *   7 max pool:  per plane (C = M planes of N images) the max over each window (padding never
 *                wins; H, W in, OH, OW out, KH, KW the window), through a -inf padded copy.
 *   8 avg pool:  the window sums over a zero-padded copy, divided by the taps inside the input
 *                (activation 0) or inside the explicit padding (activation 1: count_include_pad;
 *                scalars[0], scalars[1]: the bottom and right explicit pads), unless activation
 *                is 2 (sums only).
 * Activations: 0 none, 1 relu, 2 clip(alpha, beta), 3 sigmoid, 4 silu, 5 hard sigmoid
 * max(0, min(1, alpha * x + beta)), 6 hard swish (x * hard sigmoid(1/6, 1/2)), 7 leaky relu
 * (alpha), 8 prelu (slope[m]), 9 tanh.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VECTOR 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

enum { IM2COL = 0, EPILOGUE = 1, DEPTHWISE = 2, COL2IM = 3, GEMM = 4, GEMM_POINTWISE = 5,
       TRANSPOSED = 6, MAX_POOL = 7, AVG_POOL = 8 };
enum { NONE = 0, RELU, CLIP, SIGMOID, SILU, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, PRELU, TANH };

#define CHUNK 16  /* output columns a depthwise row accumulates in registers at once */

typedef struct {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, groups, act;
} Shape;

static inline float activate(float v, int64_t act, float alpha, float beta, float slope) {
    switch (act) {
    case RELU: return v > 0.0f ? v : 0.0f;
    case CLIP: return v < alpha ? alpha : (v > beta ? beta : v);
    case SIGMOID: return 1.0f / (1.0f + expf(-v));
    case SILU: return v / (1.0f + expf(-v));
    case HARD_SIGMOID: {
        float t = alpha * v + beta;
        return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    }
    case HARD_SWISH: {
        float t = v * (1.0f / 6.0f) + 0.5f;
        return v * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    }
    case LEAKY_RELU: return v >= 0.0f ? v : alpha * v;
    case PRELU: return v >= 0.0f ? v : slope * v;
    case TANH: return tanhf(v);
    default: return v;
    }
}

/* y[0, count) = act(y + bias + residual), residual may be NULL. */
static void finish(float *restrict y, int64_t count, float bias, const float *restrict residual,
                   int64_t act, float alpha, float beta, float slope) {
    if (residual != NULL)
        for (int64_t i = 0; i < count; i++) y[i] += bias + residual[i];
    else if (bias != 0.0f)
        for (int64_t i = 0; i < count; i++) y[i] += bias;
    switch (act) {
    case NONE: return;
    case RELU:
        for (int64_t i = 0; i < count; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        return;
    case CLIP:
        for (int64_t i = 0; i < count; i++) {
            float v = y[i] < alpha ? alpha : y[i];
            y[i] = v > beta ? beta : v;
        }
        return;
    case HARD_SWISH:
        for (int64_t i = 0; i < count; i++) {
            float t = y[i] * (1.0f / 6.0f) + 0.5f;
            t = t < 0.0f ? 0.0f : t;
            y[i] *= t > 1.0f ? 1.0f : t;
        }
        return;
    case LEAKY_RELU:
        for (int64_t i = 0; i < count; i++) y[i] = y[i] >= 0.0f ? y[i] : alpha * y[i];
        return;
    default:
        for (int64_t i = 0; i < count; i++) y[i] = activate(y[i], act, alpha, beta, slope);
    }
}

static void im2col(const float *restrict x, float *restrict cols, const Shape *s) {
    const int64_t plane = s->oh * s->ow;
    for (int64_t c = 0; c < s->c; c++)
        for (int64_t kh = 0; kh < s->kh; kh++)
            for (int64_t kw = 0; kw < s->kw; kw++) {
                float *row = cols + ((c * s->kh + kh) * s->kw + kw) * plane;
                const int64_t off = kw * s->dw - s->pl;
                /* ow with 0 <= ow * sw + off < W */
                int64_t lo = off >= 0 ? 0 : (-off + s->sw - 1) / s->sw;
                int64_t hi = s->w - off <= 0 ? 0 : (s->w - off - 1) / s->sw + 1;
                if (lo > s->ow) lo = s->ow;
                if (hi > s->ow) hi = s->ow;
                if (hi < lo) hi = lo;
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

static void col2im(const float *restrict cols, float *restrict out, const Shape *s) {
    /* s->h, s->w: the input's sizes (columns of cols); s->oh, s->ow: the output's. */
    const int64_t plane = s->h * s->w;
    memset(out, 0, sizeof(float) * s->m * s->oh * s->ow);
    for (int64_t m = 0; m < s->m; m++)
        for (int64_t kh = 0; kh < s->kh; kh++)
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const float *row = cols + ((m * s->kh + kh) * s->kw + kw) * plane;
                const int64_t off = kw * s->dw - s->pl;
                for (int64_t ih = 0; ih < s->h; ih++) {
                    const int64_t y = ih * s->sh + kh * s->dh - s->pt;
                    if (y < 0 || y >= s->oh) continue;
                    float *target = out + (m * s->oh + y) * s->ow;
                    const float *source = row + ih * s->w;
                    for (int64_t iw = 0; iw < s->w; iw++) {
                        const int64_t x = iw * s->sw + off;
                        if (x >= 0 && x < s->ow) target[x] += source[iw];
                    }
                }
            }
}

/* One output row of one depthwise plane. */
static inline void depthwise_row(const float *restrict in, const float *restrict w,
                                 float *restrict out, int64_t oh, const Shape *s) {
    const int64_t sw = s->sw;
    /* Columns whose every tap is inside the row: ow * sw - pl >= 0 and
     * ow * sw - pl + (KW - 1) * dw < W. */
    int64_t lo = s->pl <= 0 ? 0 : (s->pl + sw - 1) / sw;
    const int64_t last = s->w - 1 - (s->kw - 1) * s->dw + s->pl;  /* ow * sw <= last */
    int64_t hi = last < 0 ? 0 : last / sw + 1;
    if (hi > s->ow) hi = s->ow;
    if (lo > hi) lo = hi;
    const float *rows[64];
    const float *taps[64];
    int64_t count = 0;
    for (int64_t kh = 0; kh < s->kh && count < 64; kh++) {
        const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
        if (ih < 0 || ih >= s->h) continue;
        rows[count] = in + ih * s->w - s->pl;
        taps[count] = w + kh * s->kw;
        count++;
    }
    /* Border columns: bounds checked. */
    for (int64_t ow = 0; ow < s->ow; ow++) {
        if (ow == lo && hi > lo) ow = hi;
        if (ow >= s->ow) break;
        float sum = 0.0f;
        for (int64_t r = 0; r < count; r++)
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const int64_t x = ow * sw + kw * s->dw;  /* relative to rows[r] (pad applied) */
                if (x - s->pl >= 0 && x - s->pl < s->w) sum += taps[r][kw] * rows[r][x];
            }
        out[ow] = sum;
    }
    int64_t ow = lo;
    for (; ow + CHUNK <= hi; ow += CHUNK) {
        float acc[CHUNK] = {0};
        for (int64_t r = 0; r < count; r++) {
            const float *row = rows[r] + ow * sw;
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const float weight = taps[r][kw];
                const float *p = row + kw * s->dw;
                for (int j = 0; j < CHUNK; j++) acc[j] += weight * p[j * sw];
            }
        }
        memcpy(out + ow, acc, sizeof acc);
    }
    for (; ow < hi; ow++) {
        float sum = 0.0f;
        for (int64_t r = 0; r < count; r++)
            for (int64_t kw = 0; kw < s->kw; kw++)
                sum += taps[r][kw] * rows[r][ow * sw + kw * s->dw];
        out[ow] = sum;
    }
}

/* ------------------------------------------------------------------ GEMM */

#define MR 6
#define NR 16
#define KC 256
#define NC 256  /* columns one work unit packs and walks */
/* Floats between two NR-column panels of kc rows: one cache line more than they hold, so a
 * row written across the panels does not land in one cache set. */
#define PANEL(kc) ((kc) * NR + 16)

typedef struct {
    const float *bias, *slope;
    int64_t act;
    float alpha, beta;
} Finish;

/* The MR x NR tile acc (row-major, NR wide) added to / stored into c (rows ldc apart): the
 * first `rows` rows and `cols` columns; at the last K block (`last`) the epilogue runs. */
static inline void store_tile(float *restrict acc, float *c, int64_t ldc, int rows, int cols,
                              int accumulate, int last, int64_t m0, const float *residual,
                              const Finish *f) {
    for (int r = 0; r < rows; r++) {
        float *target = c + r * ldc;
        float *values = acc + r * NR;
        if (accumulate)
            for (int j = 0; j < cols; j++) values[j] += target[j];
        if (last) {
            const int64_t m = m0 + r;
            finish(values, cols, f->bias != NULL ? f->bias[m] : 0.0f,
                   residual != NULL ? residual + r * ldc : NULL, f->act, f->alpha, f->beta,
                   f->slope != NULL ? f->slope[m] : 0.0f);
        }
        memcpy(target, values, sizeof(float) * cols);
    }
}

/* acc = a_sliver (k x MR) . b_panel (k x NR). */
static inline void micro(int64_t k, const float *restrict a, const float *restrict b,
                         float *restrict acc) {
#if defined(VECTOR)
    __m256 c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
    for (int64_t l = 0; l < k; l++) {
        __builtin_prefetch(b + l * NR + 8 * NR);
        const __m256 b0 = _mm256_loadu_ps(b + l * NR), b1 = _mm256_loadu_ps(b + l * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m256 x = _mm256_broadcast_ss(a + l * MR + r);
            c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(acc + r * NR, c[r][0]);
        _mm256_storeu_ps(acc + r * NR + 8, c[r][1]);
    }
#else
    for (int i = 0; i < MR * NR; i++) acc[i] = 0.0f;
    for (int64_t l = 0; l < k; l++)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r * NR + j] += a[l * MR + r] * b[l * NR + j];
#endif
}

/* w (m x k, row-major) into MR-row slivers: packed[(i / MR) * k * MR + l * MR + i % MR]. */
static void pack_a(const float *w, int64_t m, int64_t k, float *packed, int64_t sliver) {
    const int64_t i0 = sliver * MR;
    float *target = packed + sliver * k * MR;
    for (int64_t l = 0; l < k; l++)
        for (int r = 0; r < MR; r++)
            target[l * MR + r] = i0 + r < m ? w[(i0 + r) * k + l] : 0.0f;
}

/* b[l0:l0+kc, n0:n0+nc] (rows ldb apart) into NR-column panels, zero padded. */
static void pack_b(const float *b, int64_t ldb, int64_t l0, int64_t kc, int64_t n0, int64_t nc,
                   float *packed) {
    for (int64_t j = 0; j < nc; j += NR) {
        float *panel = packed + (j / NR) * PANEL(kc);
        const int64_t width = nc - j < NR ? nc - j : NR;
        for (int64_t l = 0; l < kc; l++) {
            const float *source = b + (l0 + l) * ldb + n0 + j;
            float *target = panel + l * NR;
            if (width == NR) memcpy(target, source, sizeof(float) * NR);
            else {
                for (int64_t t = 0; t < width; t++) target[t] = source[t];
                for (int64_t t = width; t < NR; t++) target[t] = 0.0f;
            }
        }
    }
}

/* The patch matrix's rows [l0, l0 + kc) and columns [n0, n0 + nc) built straight from the
 * image (x: one image and group, s->c its channels) into NR-column panels: the implicit GEMM,
 * no patch matrix in memory. */
static void pack_b_conv(const float *x, const Shape *s, int64_t l0, int64_t kc, int64_t n0,
                        int64_t nc, float *packed) {
    const int64_t taps = s->kh * s->kw, stride = PANEL(kc);
    for (int64_t l = 0; l < kc; l++) {
        const int64_t index = l0 + l, c = index / taps, kh = (index % taps) / s->kw;
        const int64_t kw = index % s->kw;
        const float *plane = x + c * s->h * s->w;
        const int64_t off = kw * s->dw - s->pl;
        /* output columns ow with 0 <= ow * sw + off < W */
        int64_t lo = off >= 0 ? 0 : (-off + s->sw - 1) / s->sw;
        int64_t hi = s->w - off <= 0 ? 0 : (s->w - off - 1) / s->sw + 1;
        if (lo > s->ow) lo = s->ow;
        if (hi > s->ow) hi = s->ow;
        if (hi < lo) hi = lo;
        int64_t oh = n0 / s->ow, ow = n0 % s->ow, j = 0;
        while (j < nc) {
            const int64_t end = s->ow - ow < nc - j ? s->ow : ow + (nc - j);
            const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
            const int valid = ih >= 0 && ih < s->h;
            const float *source = plane + ih * s->w + off;
            for (int64_t col = ow; col < end;) {
                /* up to the panel's end, within one of the zero / copy / zero ranges */
                const int64_t jj = j + (col - ow), lane = jj % NR;
                int64_t stop = col + (NR - lane);
                if (stop > end) stop = end;
                float *target = packed + (jj / NR) * stride + l * NR + lane;
                if (!valid || col >= hi || stop <= lo) {
                    for (int64_t t = 0; t < stop - col; t++) target[t] = 0.0f;
                    col = stop;
                    continue;
                }
                if (col < lo) {
                    for (int64_t t = 0; t < lo - col; t++) target[t] = 0.0f;
                    col = lo;
                    continue;
                }
                if (stop > hi) stop = hi;
                if (s->sw == 1)
                    for (int64_t t = col; t < stop; t++) target[t - col] = source[t];
                else
                    for (int64_t t = col; t < stop; t++) target[t - col] = source[t * s->sw];
                col = stop;
            }
            j += end - ow;
            ow = 0;
            oh++;
        }
        for (int64_t jj = nc; jj % NR; jj++) packed[(jj / NR) * stride + l * NR + jj % NR] = 0.0f;
    }
}

/* c[m x n] (+)= packed_a . b[k x n] for the columns [n0, n0 + nc) and sliver rows
 * [s0, s1), the epilogue at the last K block. */
static void gemm_unit(const float *packed_a, const float *b, int64_t ldb, const Shape *conv,
                      float *c, int64_t ldc, const float *residual, int64_t m, int64_t k,
                      int64_t n0, int64_t nc, int64_t s0, int64_t s1, float *panel,
                      const Finish *f) {
    float acc[MR * NR];
    for (int64_t l0 = 0; l0 < k; l0 += KC) {
        const int64_t kc = k - l0 < KC ? k - l0 : KC;
        if (conv != NULL) pack_b_conv(b, conv, l0, kc, n0, nc, panel);
        else pack_b(b, ldb, l0, kc, n0, nc, panel);
        const int last = l0 + kc >= k;
        for (int64_t s = s0; s < s1; s++) {
            const float *a = packed_a + s * k * MR + l0 * MR;
            const int64_t i0 = s * MR;
            const int rows = m - i0 < MR ? (int)(m - i0) : MR;
            for (int64_t j = 0; j < nc; j += NR) {
                micro(kc, a, panel + (j / NR) * PANEL(kc), acc);
                const int cols = nc - j < NR ? (int)(nc - j) : NR;
                const int64_t at = i0 * ldc + n0 + j;
                store_tile(acc, c + at, ldc, rows, cols, l0 > 0, last, i0,
                           residual != NULL ? residual + at : NULL, f);
            }
        }
    }
}

/* w (k x m, row-major: the transposed weights) into MR-row slivers of its transpose. */
static void pack_a_transposed(const float *w, int64_t m, int64_t k, float *packed,
                              int64_t sliver) {
    const int64_t i0 = sliver * MR;
    float *target = packed + sliver * k * MR;
    for (int64_t l = 0; l < k; l++)
        for (int r = 0; r < MR; r++) target[l * MR + r] = i0 + r < m ? w[l * m + i0 + r] : 0.0f;
}

static void transposed_conv(const float *x, const float *w, float *out, float *scratch,
                            const Shape *s, int64_t threads) {
    const int64_t cg = s->c / s->groups, mg = s->m / s->groups, taps = s->kh * s->kw;
    const int64_t rows = mg * taps, plane = s->h * s->w;
    const int64_t slivers = (rows + MR - 1) / MR;
    const size_t a_bytes = sizeof(float) * (size_t)(slivers * MR * (cg > 0 ? cg : 1)) *
                           (size_t)s->groups;
    float *packed_a = aligned_alloc(64, (a_bytes + 63) / 64 * 64);
    const int64_t column_blocks = (plane + NC - 1) / NC;
    int64_t row_blocks = 1;
    while (column_blocks * row_blocks < (threads > 1 ? 2 * threads : 1) && row_blocks < slivers)
        row_blocks++;
    const int64_t units = column_blocks * row_blocks;
    const Finish none = {NULL, NULL, 0, 0.0f, 0.0f};
    Shape one = *s;
    one.m = mg;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *panel = aligned_alloc(64, sizeof(float) * PANEL(KC) * (NC / NR));
#pragma omp for schedule(static)
        for (int64_t i = 0; i < s->groups * slivers; i++)
            pack_a_transposed(w + (i / slivers) * cg * rows, rows, cg,
                              packed_a + (i / slivers) * slivers * MR * cg, i % slivers);
        for (int64_t image = 0; image < s->n; image++)
            for (int64_t g = 0; g < s->groups; g++) {
                const float *source = x + (image * s->c + g * cg) * plane;
#pragma omp for schedule(dynamic, 1)
                for (int64_t u = 0; u < units; u++) {
                    const int64_t cb = u % column_blocks, rb = u / column_blocks;
                    const int64_t n0 = cb * NC;
                    const int64_t nc = plane - n0 < NC ? plane - n0 : NC;
                    gemm_unit(packed_a + g * slivers * MR * cg, source, plane, NULL, scratch,
                              plane, NULL, rows, cg, n0, nc, slivers * rb / row_blocks,
                              slivers * (rb + 1) / row_blocks, panel, &none);
                }
#pragma omp single
                col2im(scratch, out + (image * s->m + g * mg) * s->oh * s->ow, &one);
            }
        free(panel);
    }
    free(packed_a);
}

/* Few output positions (plane < NR, e.g. a squeeze-excite's 1x1 maps): per image and group
 * the patch columns transposed into `columns` (plane x k), then one dot product per output,
 * no weight packing. */
static void small_conv(const float *x, const float *w, float *out, const float *residual,
                       const Shape *s, const Finish *f, int64_t threads) {
    const int64_t cg = s->c / s->groups, mg = s->m / s->groups, taps = s->kh * s->kw;
    const int64_t k = cg * taps, plane = s->oh * s->ow, in_plane = s->h * s->w;
    float *columns = malloc(sizeof(float) * (size_t)(plane * k + 1));
    for (int64_t image = 0; image < s->n; image++)
        for (int64_t g = 0; g < s->groups; g++) {
            const float *source = x + (image * s->c + g * cg) * in_plane;
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
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
            for (int64_t m = 0; m < mg; m++) {
                const float *row = w + (g * mg + m) * k;
                float values[NR];
                for (int64_t p = 0; p < plane; p++) {
                    const float *column = columns + p * k;
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int64_t l = 0; l < k; l++) sum += row[l] * column[l];
                    values[p] = sum;
                }
                const int64_t channel = g * mg + m;
                finish(values, plane, f->bias != NULL ? f->bias[channel] : 0.0f,
                       residual != NULL ? residual + at + m * plane : NULL, f->act, f->alpha,
                       f->beta, f->slope != NULL ? f->slope[channel] : 0.0f);
                memcpy(out + at + m * plane, values, sizeof(float) * plane);
            }
        }
    free(columns);
}

static void gemm_conv(const float *x, const float *w, float *out, const float *residual,
                      int pointwise, const Shape *s, const Finish *f, int64_t threads) {
    const int64_t cg = s->c / s->groups, mg = s->m / s->groups;
    const int64_t k = cg * s->kh * s->kw, plane = s->oh * s->ow, in_plane = s->h * s->w;
    const int64_t slivers = (mg + MR - 1) / MR;
    const size_t a_bytes = sizeof(float) * (size_t)(slivers * MR * (k > 0 ? k : 1)) *
                           (size_t)s->groups;
    float *packed_a = aligned_alloc(64, (a_bytes + 63) / 64 * 64);
    /* Work units per GEMM: column blocks x sliver blocks, enough for every thread. */
    const int64_t column_blocks = (plane + NC - 1) / NC;
    int64_t row_blocks = 1;
    while (column_blocks * row_blocks < (threads > 1 ? 2 * threads : 1) && row_blocks < slivers)
        row_blocks++;
    const int64_t units = column_blocks * row_blocks;
    Shape one = *s;
    one.c = cg;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *panel = aligned_alloc(64, sizeof(float) * PANEL(KC) * (NC / NR));
#pragma omp for schedule(static)
        for (int64_t i = 0; i < s->groups * slivers; i++)
            pack_a(w + (i / slivers) * mg * k, mg, k, packed_a + (i / slivers) * slivers * MR * k,
                   i % slivers);
        for (int64_t image = 0; image < s->n; image++)
            for (int64_t g = 0; g < s->groups; g++) {
                const float *source = x + (image * s->c + g * cg) * in_plane;
                const int64_t at = (image * s->m + g * mg) * plane;
                Finish local = *f;
                if (local.bias != NULL) local.bias += g * mg;
                if (local.slope != NULL) local.slope += g * mg;
#pragma omp for schedule(dynamic, 1)
                for (int64_t u = 0; u < units; u++) {
                    const int64_t cb = u % column_blocks, rb = u / column_blocks;
                    const int64_t n0 = cb * NC;
                    const int64_t nc = plane - n0 < NC ? plane - n0 : NC;
                    const int64_t s0 = slivers * rb / row_blocks;
                    const int64_t s1 = slivers * (rb + 1) / row_blocks;
                    gemm_unit(packed_a + g * slivers * MR * k, source, plane,
                              pointwise ? NULL : &one, out + at, plane,
                              residual != NULL ? residual + at : NULL, mg, k, n0, nc, s0, s1,
                              panel, &local);
                }
            }
        free(panel);
    }
    free(packed_a);
}

#if defined(VECTOR)
/* Depthwise over one plane through a zero-padded copy of it (`padded`: rows of `pw` floats,
 * wide enough for whole 16-column chunks), so every output column runs the vector loop; the
 * epilogue runs on each output row. sw is 1 or 2. */
static void depthwise_plane(const float *in, const float *filter, float *out, const Shape *s,
                            float *padded, int64_t pw, int64_t ph, float *row_buffer,
                            float bias, const float *residual, float alpha, float beta,
                            float slope) {
    for (int64_t y = 0; y < ph; y++) {
        float *target = padded + y * pw;
        const int64_t iy = y - s->pt;
        if (iy < 0 || iy >= s->h) {
            memset(target, 0, sizeof(float) * pw);
            continue;
        }
        const int64_t left = s->pl < pw ? s->pl : pw;
        memset(target, 0, sizeof(float) * left);
        int64_t width = s->w < pw - left ? s->w : pw - left;
        memcpy(target + left, in + iy * s->w, sizeof(float) * width);
        memset(target + left + width, 0, sizeof(float) * (pw - left - width));
    }
    const int64_t sw = s->sw;
    for (int64_t oh = 0; oh < s->oh; oh++) {
        for (int64_t ow = 0; ow < s->ow; ow += 16) {
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const float *row = padded + (oh * s->sh + kh * s->dh) * pw + ow * sw;
                const float *taps = filter + kh * s->kw;
                for (int64_t kw = 0; kw < s->kw; kw++) {
                    const __m256 weight = _mm256_broadcast_ss(taps + kw);
                    const float *p = row + kw * s->dw;
                    __m256 v0, v1;
                    if (sw == 1) {
                        v0 = _mm256_loadu_ps(p);
                        v1 = _mm256_loadu_ps(p + 8);
                    } else {  /* the even elements of p[0:32] */
                        const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
                        const __m256 c = _mm256_loadu_ps(p + 16), d = _mm256_loadu_ps(p + 24);
                        v0 = _mm256_castpd_ps(_mm256_permute4x64_pd(
                            _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
                        v1 = _mm256_castpd_ps(_mm256_permute4x64_pd(
                            _mm256_castps_pd(_mm256_shuffle_ps(c, d, 0x88)), 0xD8));
                    }
                    acc0 = _mm256_fmadd_ps(weight, v0, acc0);
                    acc1 = _mm256_fmadd_ps(weight, v1, acc1);
                }
            }
            _mm256_storeu_ps(row_buffer + ow, acc0);
            _mm256_storeu_ps(row_buffer + ow + 8, acc1);
        }
        float *target = out + oh * s->ow;
        memcpy(target, row_buffer, sizeof(float) * s->ow);
        finish(target, s->ow, bias, residual != NULL ? residual + oh * s->ow : NULL, s->act,
               alpha, beta, slope);
    }
}
#endif

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

static void pool_plane(const float *in, float *out, const Shape *s, float *padded, int64_t pw,
                       int64_t ph, int maximum, float fill, const float *row_scale,
                       const float *col_scale) {
    for (int64_t y = 0; y < ph; y++) {
        float *target = padded + y * pw;
        const int64_t iy = y - s->pt;
        for (int64_t t = 0; t < pw; t++) target[t] = fill;
        if (iy < 0 || iy >= s->h) continue;
        const int64_t left = s->pl < pw ? s->pl : pw;
        const int64_t width = s->w < pw - left ? s->w : pw - left;
        memcpy(target + left, in + iy * s->w, sizeof(float) * width);
    }
    const int64_t sw = s->sw;
    for (int64_t oh = 0; oh < s->oh; oh++) {
        float *target = out + oh * s->ow;
        for (int64_t ow = 0; ow < s->ow; ow++) {
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
            target[ow] = row_scale != NULL ? acc * row_scale[oh] * col_scale[ow] : acc;
        }
    }
}

static void pool(const float *x, float *out, const Shape *s, int maximum, int64_t mode,
                 float pad_bottom, float pad_right, int64_t threads) {
    const int64_t planes = s->n * s->m;
    const int64_t pw = (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1;
    const int64_t ph = (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1;
    float *row_scale = NULL, *col_scale = NULL;
    if (!maximum && mode != 2) {  /* 1 / count, separable over rows and columns */
        row_scale = malloc(sizeof(float) * (size_t)s->oh);
        col_scale = malloc(sizeof(float) * (size_t)s->ow);
        const int64_t bottom = mode == 1 ? (int64_t)pad_bottom : 0;
        const int64_t right = mode == 1 ? (int64_t)pad_right : 0;
        const int64_t top = mode == 1 ? s->pt : 0, left = mode == 1 ? s->pl : 0;
        for (int64_t o = 0; o < s->oh; o++)
            row_scale[o] = 1.0f / (float)inside(o, s->sh, s->pt, s->dh, s->kh, -top,
                                                s->h + bottom);
        for (int64_t o = 0; o < s->ow; o++)
            col_scale[o] = 1.0f / (float)inside(o, s->sw, s->pl, s->dw, s->kw, -left,
                                                s->w + right);
    }
#pragma omp parallel num_threads(threads) if (threads > 1 && planes > 1)
    {
        float *padded = malloc(sizeof(float) * (size_t)(pw * ph + 1));
#pragma omp for schedule(static)
        for (int64_t i = 0; i < planes; i++)
            pool_plane(x + i * s->h * s->w, out + i * s->oh * s->ow, s, padded, pw, ph, maximum,
                       maximum ? -INFINITY : 0.0f, row_scale, col_scale);
        free(padded);
    }
    free(row_scale);
    free(col_scale);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const int64_t form = sizes[0], threads = sizes[1];
    const Shape s = {sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], sizes[7], sizes[8],
                     sizes[9], sizes[10], sizes[11], sizes[12], sizes[13], sizes[14],
                     sizes[15], sizes[16], sizes[17], sizes[18]};
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
        col2im(scratch, out, &s);
    } else if (form == EPILOGUE) {
        const int64_t planes = s.n * s.m;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && planes > 1)
        for (int64_t i = 0; i < planes; i++) {
            const int64_t m = i % s.m;
            finish(out + i * plane, plane, bias != NULL ? bias[m] : 0.0f,
                   residual != NULL ? residual + i * plane : NULL, s.act, alpha, beta,
                   slope != NULL ? slope[m] : 0.0f);
        }
    } else if (form == MAX_POOL || form == AVG_POOL) {
        pool(x, out, &s, form == MAX_POOL, s.act, alpha, beta, threads);
    } else if (form == TRANSPOSED) {
        transposed_conv(x, w, out, scratch, &s, threads);
    } else if (form == GEMM || form == GEMM_POINTWISE) {
        const Finish f = {bias, slope, s.act, alpha, beta};
        if (s.oh * s.ow < NR)
            small_conv(x, w, out, residual, &s, &f, threads);
        else
            gemm_conv(x, w, out, residual, form == GEMM_POINTWISE, &s, &f, threads);
    } else if (form == DEPTHWISE) {
        const int64_t planes = s.n * s.c;
        const int64_t wide = (s.ow + 15) / 16 * 16;
        const int64_t pw = wide * s.sw + (s.kw - 1) * s.dw + 32;
        const int64_t ph = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1;
#pragma omp parallel num_threads(threads) if (threads > 1 && planes > 1)
        {
#if defined(VECTOR)
            const size_t padded_bytes = (sizeof(float) * (size_t)(pw * ph) + 63) / 64 * 64;
            float *padded = s.sw <= 2 ? aligned_alloc(64, padded_bytes) : NULL;
            float *row_buffer = aligned_alloc(64, sizeof(float) * wide);
#endif
#pragma omp for schedule(static)
            for (int64_t i = 0; i < planes; i++) {
                const int64_t c = i % s.c;
                const float *in = x + i * s.h * s.w;
                const float *filter = w + c * s.kh * s.kw;
                float *target = out + i * plane;
                const float b = bias != NULL ? bias[c] : 0.0f;
                const float k = slope != NULL ? slope[c] : 0.0f;
                const float *res = residual != NULL ? residual + i * plane : NULL;
#if defined(VECTOR)
                if (padded != NULL) {
                    depthwise_plane(in, filter, target, &s, padded, pw, ph, row_buffer, b, res,
                                    alpha, beta, k);
                    continue;
                }
#endif
                for (int64_t oh = 0; oh < s.oh; oh++) {
                    float *row = target + oh * s.ow;
                    depthwise_row(in, filter, row, oh, &s);
                    finish(row, s.ow, b, res != NULL ? res + oh * s.ow : NULL, s.act, alpha,
                           beta, k);
                }
            }
#if defined(VECTOR)
            free(padded);
            free(row_buffer);
#endif
        }
    }
}
