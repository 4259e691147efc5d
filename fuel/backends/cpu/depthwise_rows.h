/* float32 depthwise convolution with AVX-512: the row-strip form (depthwise.c's source is
 * conv_common.h, depthwise_flat.h, this file, then depthwise.c), for stride 1 or 2 (both
 * dims), no dilation, square 3x3, 5x5 or 7x7 kernels.
 *
 * A strip is DW_STRIP output rows x 16 output columns, one accumulator per row (the bias its
 * start). Each input row the strip reads is loaded once per column chunk, straight from the
 * plane (zero-masked loads: columns in the padding read 0, no padded copy), and turned into
 * one vector per tap column: stride 1 two loads and `valignd` shifts, stride 2 the even or odd
 * lanes of a load pair (one pair per two tap columns). Every row's tap vectors then feed each
 * of the strip's output rows that this input row reaches (up to KH of them), so a value is
 * loaded once for KH x KW multiply-adds instead of once per tap. The residual and the
 * activation are applied on the accumulators (conv_common.h's act16), the last chunk of a
 * row stored masked.
 */
#if defined(__AVX512F__)
#define DW_STRIP 4

/* One plane; K (the kernel's rows and columns) and STRIDE are constants in each expansion,
 * so the strip's loops unroll whole and its accumulators stay in registers. Rows outside the
 * input load as zeros (their masks are empty), rows past the output are computed and not
 * stored. */
static inline __attribute__((always_inline)) void dw_rows_plane_k(
        const float *in, const float *filter, float *out, const Shape *s, float bias,
        const float *residual, float alpha, float beta, float slope, const int K,
        const int STRIDE) {
    const int64_t H = s->h, W = s->w, OH = s->oh, OW = s->ow;
    const int INPUT_ROWS = (DW_STRIP - 1) * STRIDE + K, PAIRS = STRIDE == 1 ? 1 : (K + 1) / 2;
    const __m512 start = _mm512_set1_ps(bias), zero = _mm512_setzero_ps();
    __m512 weights[49];  /* the taps, broadcast once a plane (registers for 3x3) */
#pragma GCC unroll 49
    for (int t = 0; t < K * K; t++) weights[t] = _mm512_set1_ps(filter[t]);
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        const int64_t base = ow0 * STRIDE - s->pl;
        const __mmask16 keep = OW - ow0 >= 16 ? (__mmask16)0xFFFF
                                              : (__mmask16)((1u << (OW - ow0)) - 1);
        __mmask16 low[4], high[4];
        strip_masks(base, W, PAIRS, low, high);
        for (int64_t oh0 = 0; oh0 < OH; oh0 += DW_STRIP) {
            const int64_t top = oh0 * STRIDE - s->pt;  /* input row of tap row 0, output row 0 */
            __m512 acc[DW_STRIP];
#pragma GCC unroll 8
            for (int r = 0; r < DW_STRIP; r++) acc[r] = start;
#pragma GCC unroll 32
            for (int i = 0; i < INPUT_ROWS; i++) {
                const int64_t ih = top + i;
                const int inside = ih >= 0 && ih < H;
                const float *row = in + ih * W + base;
                __m512 v[7];
                strip_row(row, inside, low, high, zero, v, K, STRIDE);
#pragma GCC unroll 8
                for (int k = 0; k < K; k++)
#pragma GCC unroll 8
                    for (int r = 0; r < DW_STRIP; r++) {
                        const int kh = i - r * STRIDE;
                        if (kh >= 0 && kh < K)
                            acc[r] = _mm512_fmadd_ps(weights[kh * K + k], v[k], acc[r]);
                    }
            }
#pragma GCC unroll 8
            for (int r = 0; r < DW_STRIP; r++) {
                if (oh0 + r >= OH) break;
                const int64_t at = (oh0 + r) * OW + ow0;
                __m512 value = acc[r];
                if (residual != NULL)
                    value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(keep, residual + at));
                _mm512_mask_storeu_ps(out + at, keep, act16(value, s->act, alpha, beta, slope));
            }
        }
    }
}

/* Whether the row-strip form takes the launch's geometry. */
static inline int dw_rows_fits(const Shape *s) {
    return s->sh == s->sw && (s->sh == 1 || s->sh == 2) && s->dh == 1 && s->dw == 1
           && s->kh == s->kw && (s->kw == 3 || s->kw == 5 || s->kw == 7) && s->pl >= 0
           && s->pt >= 0;
}

static void dw_rows_plane(const float *in, const float *filter, float *out, const Shape *s,
                          float bias, const float *residual, float alpha, float beta,
                          float slope) {
#define DW_ROWS(k, stride) dw_rows_plane_k(in, filter, out, s, bias, residual, alpha, beta, \
                                           slope, k, stride)
    if (s->sw == 1) {
        if (s->kw == 3) DW_ROWS(3, 1);
        else if (s->kw == 5) DW_ROWS(5, 1);
        else DW_ROWS(7, 1);
    } else {
        if (s->kw == 3) DW_ROWS(3, 2);
        else if (s->kw == 5) DW_ROWS(5, 2);
        else DW_ROWS(7, 2);
    }
#undef DW_ROWS
}
#endif
