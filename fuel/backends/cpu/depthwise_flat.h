/* float32 depthwise convolution with AVX-512: the flat and phase layouts (depthwise.c's source
 * is conv_common.h, this file, then depthwise.c). */
#if defined(__AVX512F__)
/* The flat layout (stride 1, OW == W: "same" padding): the plane's output positions
 * q = oh * W + ow read input q + offset[tap], so 16 consecutive positions are one vector
 * across row ends, and every tap's 16 lanes are one zero-masked load straight from the plane
 * (lanes whose input is in the padding are masked off: their loads never touch memory and
 * read 0), so no plane is copied and no store is reloaded; the masks (vector x tap) are built
 * once a launch by the caller. Eight vectors accumulate at once (planes of at most four
 * vectors two at a time), the bias is the accumulators' start, the residual and the
 * activation are applied on the accumulators (conv_common.h's act16). The phase layout for
 * stride 2 follows. */
#define DW_UNITS 8
#define DW_MASKS 8192  /* most flat masks a launch builds (vectors x taps) */

/* The flat layout's masks: bit j of masks[v * taps + t] is set when position v * 16 + j is
 * in the plane and its tap t reads inside the input. */
static void dw_flat_masks(const Shape *s, uint16_t *masks, int64_t vectors) {
    const int64_t taps = s->kh * s->kw, plane = s->oh * s->ow;
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i width = _mm512_set1_epi32((int)s->w), one = _mm512_set1_epi32(1);
    __m512i col = iota, row = _mm512_setzero_si512();  /* lanes' output column and row */
    __mmask16 rows[s->kh], cols[s->kw];
    for (int64_t v = 0; v < vectors; v++) {
        for (__mmask16 over; (over = _mm512_cmpge_epi32_mask(col, width)) != 0;) {
            col = _mm512_mask_sub_epi32(col, over, col, width);
            row = _mm512_mask_add_epi32(row, over, row, one);
        }
        const __mmask16 inside = plane - v * 16 >= 16 ? (__mmask16)0xFFFF
                                 : (__mmask16)((1u << (plane - v * 16)) - 1);
        for (int64_t kh = 0; kh < s->kh; kh++) {  /* 0 <= row + kh dh - pt < H */
            const __m512i y = _mm512_add_epi32(row, _mm512_set1_epi32((int)(kh * s->dh - s->pt)));
            rows[kh] = inside & _mm512_cmpge_epi32_mask(y, _mm512_setzero_si512())
                       & _mm512_cmplt_epi32_mask(y, _mm512_set1_epi32((int)s->h));
        }
        for (int64_t kw = 0; kw < s->kw; kw++) {
            const __m512i x = _mm512_add_epi32(col, _mm512_set1_epi32((int)(kw * s->dw - s->pl)));
            cols[kw] = _mm512_cmpge_epi32_mask(x, _mm512_setzero_si512())
                       & _mm512_cmplt_epi32_mask(x, width);
        }
        for (int64_t t = 0; t < taps; t++)
            masks[v * taps + t] = rows[t / s->kw] & cols[t % s->kw];
        col = _mm512_add_epi32(col, _mm512_set1_epi32(16));
    }
}

static inline __attribute__((always_inline)) void dw_store(
        float *out, int64_t q, int64_t plane, __m512 v, const Shape *s, const float *residual,
        float alpha, float beta, float slope) {
    const __mmask16 keep = plane - q >= 16 ? (__mmask16)0xFFFF
                                           : (__mmask16)((1u << (plane - q)) - 1);
    if (residual != NULL) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, residual + q));
    v = act16(v, s->act, alpha, beta, slope);
    _mm512_mask_storeu_ps(out + q, keep, v);
}

/* Eight named accumulators (an array of them is kept in memory by gcc, a store per
 * multiply-add); `count`, a constant in each expansion, says how many are live. */
#define DW_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

/* `count` vectors of the flat layout from vector v0. */
static inline __attribute__((always_inline)) void dw_flat_block(
        const float *in, const float *filter, float *out, const Shape *s, const uint16_t *m,
        const int64_t *offsets, int64_t v0, const int count, float bias, const float *residual,
        float alpha, float beta, float slope) {
    const int64_t taps = s->kh * s->kw, plane = s->oh * s->ow;
#define DW_START(i) __m512 a##i = _mm512_set1_ps(bias);
    DW_EACH(DW_START)
#undef DW_START
    for (int64_t t = 0; t < taps; t++) {
        const __m512 weight = _mm512_set1_ps(filter[t]);
        const float *p = (const float *)((intptr_t)in + 4 * (v0 * 16 + offsets[t]));
#define DW_FMA(i) if (count > i) a##i = _mm512_fmadd_ps( \
            weight, _mm512_maskz_loadu_ps(m[i * taps + t], p + 16 * i), a##i);
        DW_EACH(DW_FMA)
#undef DW_FMA
    }
#define DW_END(i) if (count > i) dw_store(out, (v0 + i) * 16, plane, a##i, s, residual, alpha, \
                                          beta, slope);
    DW_EACH(DW_END)
#undef DW_END
}

static void dw_flat_plane(const float *in, const float *filter, float *out, const Shape *s,
                          const uint16_t *masks, int64_t vectors, float bias,
                          const float *residual, float alpha, float beta, float slope) {
    const int64_t taps = s->kh * s->kw;
    int64_t offsets[taps];
    for (int64_t t = 0; t < taps; t++)
        offsets[t] = ((t / s->kw) * s->dh - s->pt) * s->w + (t % s->kw) * s->dw - s->pl;
    for (int64_t v0 = 0; v0 < vectors; v0 += DW_UNITS) {
        const uint16_t *m = masks + v0 * taps;
#define DW_FLAT(n) dw_flat_block(in, filter, out, s, m, offsets, v0, n, bias, residual, alpha, \
                                 beta, slope)
        switch (vectors - v0 < DW_UNITS ? vectors - v0 : DW_UNITS) {
        case 1: DW_FLAT(1); break;
        case 2: DW_FLAT(2); break;
        case 3: DW_FLAT(3); break;
        case 4: DW_FLAT(4); break;
        case 5: DW_FLAT(5); break;
        case 6: DW_FLAT(6); break;
        case 7: DW_FLAT(7); break;
        default: DW_FLAT(8);
        }
#undef DW_FLAT
    }
}

/* Two planes of at most four vectors each at once (eight accumulators in flight, where one
 * 7x7 plane keeps four); `count`, a constant in each expansion, is the planes' vectors. */
static inline __attribute__((always_inline)) void dw_flat_pair_block(
        const float *in, const float *filter, float *out, const float *bias,
        const float *residual, const float *slope, int64_t c, const int64_t *offsets,
        const uint16_t *m, const Shape *s, const int count, float alpha, float beta) {
    const int64_t taps = s->kh * s->kw, plane = s->oh * s->ow, size = s->h * s->w;
    const int64_t c1 = c + 1 < s->c ? c + 1 : 0;  /* the next plane's channel */
    const float *in1 = in + size, *filter1 = filter + (c1 - c) * taps;
#define DW_PAIR(X) X(0) X(1) X(2) X(3)
#define DW_START(i) __m512 a##i = _mm512_set1_ps(bias != NULL ? bias[c] : 0.0f), \
                           b##i = _mm512_set1_ps(bias != NULL ? bias[c1] : 0.0f);
    DW_PAIR(DW_START)
#undef DW_START
    for (int64_t t = 0; t < taps; t++) {
        const __m512 w0 = _mm512_set1_ps(filter[t]), w1 = _mm512_set1_ps(filter1[t]);
        const float *p = (const float *)((intptr_t)in + 4 * offsets[t]);
        const float *q = (const float *)((intptr_t)in1 + 4 * offsets[t]);
#define DW_FMA(i) if (count > i) { \
            const __mmask16 k = m[i * taps + t]; \
            a##i = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k, p + 16 * i), a##i); \
            b##i = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(k, q + 16 * i), b##i); }
        DW_PAIR(DW_FMA)
#undef DW_FMA
    }
#define DW_END(i) if (count > i) { \
        dw_store(out, i * 16, plane, a##i, s, residual, alpha, beta, \
                 slope != NULL ? slope[c] : 0.0f); \
        dw_store(out + plane, i * 16, plane, b##i, s, residual != NULL ? residual + plane : NULL, \
                 alpha, beta, slope != NULL ? slope[c1] : 0.0f); }
    DW_PAIR(DW_END)
#undef DW_END
#undef DW_PAIR
}

static void dw_flat_pair(const float *in, const float *filter, float *out, const float *bias,
                         const float *residual, const float *slope, int64_t c,
                         const Shape *s, const uint16_t *masks, int64_t vectors, float alpha,
                         float beta) {
    const int64_t taps = s->kh * s->kw;
    int64_t offsets[taps];
    for (int64_t t = 0; t < taps; t++)
        offsets[t] = ((t / s->kw) * s->dh - s->pt) * s->w + (t % s->kw) * s->dw - s->pl;
#define DW_TWO(n) dw_flat_pair_block(in, filter, out, bias, residual, slope, c, offsets, masks, \
                                     s, n, alpha, beta)
    switch (vectors) {
    case 1: DW_TWO(1); break;
    case 2: DW_TWO(2); break;
    case 3: DW_TWO(3); break;
    default: DW_TWO(4);
    }
#undef DW_TWO
}

#endif

#if defined(__AVX512F__)
/* Stride 2 (both dims): the padded plane split into its four phases (even / odd rows x even /
 * odd columns, each `r` columns a row: the output's width plus the kernel's reach), so a tap
 * reads one phase at a fixed offset and 16 consecutive positions of the output grid (rows of
 * `r`, the last columns past the output's width discarded) are one unmasked load. The phases
 * are filled with 16-lane deinterleaves; the grid's rows are copied out with the epilogue.
 * `buffer`: dw_phase_floats(s) floats. */
static inline int64_t dw_phase_width(const Shape *s) { return s->ow + ((s->kw - 1) * s->dw) / 2; }
static inline int64_t dw_phase_rows(const Shape *s) { return s->oh + ((s->kh - 1) * s->dh) / 2; }
/* one phase, and the zeros a row's last 16-column store writes past it */
#define DW_OVERRUN 32
static inline int64_t dw_phase_size(const Shape *s) {
    return (dw_phase_rows(s) + 1) * dw_phase_width(s) + DW_OVERRUN;
}
static inline int64_t dw_phase_floats(const Shape *s) {
    return 4 * dw_phase_size(s) + (s->oh * dw_phase_width(s) + 16 * DW_UNITS) + 16;
}

/* `count` (a constant in each expansion) vectors of the phase layout's grid from v0. */
static inline __attribute__((always_inline)) void dw_phase_block(
        const float *buffer, const float *filter, float *grid, const int64_t *offsets,
        int64_t taps, int64_t v0, const int count, float bias) {
#define DW_START(i) __m512 a##i = _mm512_set1_ps(bias);
    DW_EACH(DW_START)
#undef DW_START
    for (int64_t t = 0; t < taps; t++) {
        const __m512 weight = _mm512_set1_ps(filter[t]);
        const float *p = buffer + offsets[t] + v0 * 16;
#define DW_FMA(i) if (count > i) a##i = _mm512_fmadd_ps(weight, _mm512_loadu_ps(p + 16 * i), a##i);
        DW_EACH(DW_FMA)
#undef DW_FMA
    }
#define DW_KEEP(i) if (count > i) _mm512_storeu_ps(grid + (v0 + i) * 16, a##i);
    DW_EACH(DW_KEEP)
#undef DW_KEEP
}

static void dw_phase_plane(const float *in, const float *filter, float *out, const Shape *s,
                           float *buffer, float bias, const float *residual, float alpha,
                           float beta, float slope) {
    const int64_t r = dw_phase_width(s), rows = dw_phase_rows(s), size = dw_phase_size(s);
    const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
                                           4, 2, 0);
    const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i zero = _mm512_setzero_si512(), width = _mm512_set1_epi32((int)s->w);
    /* phase (py, px) at buffer + (2 py + px) size: row y holds padded row 2 y + py */
    for (int64_t py = 0; py < 2; py++)
        for (int64_t y = 0; y < rows + 1; y++) {
            float *p0 = buffer + (2 * py) * size + y * r, *p1 = p0 + size;
            const int64_t iy = 2 * y + py - s->pt;
            if (y >= rows || iy < 0 || iy >= s->h) {
                memset(p0, 0, sizeof(float) * r);
                memset(p1, 0, sizeof(float) * r);
                continue;
            }
            /* 16 columns of both column phases from 32 input columns, zero-masked loads
             * (a row's last chunk writes past it into the next row, written after) */
            const float *row = in + iy * s->w;
            for (int64_t q = 0; q < r; q += 16) {
                const int64_t base = 2 * q - s->pl;
                const __m512i at = _mm512_add_epi32(iota, _mm512_set1_epi32((int)base));
                const __m512i next = _mm512_add_epi32(at, _mm512_set1_epi32(16));
                const __mmask16 ma = _mm512_cmpge_epi32_mask(at, zero)
                                     & _mm512_cmplt_epi32_mask(at, width);
                const __mmask16 mb = _mm512_cmpge_epi32_mask(next, zero)
                                     & _mm512_cmplt_epi32_mask(next, width);
                const float *p = (const float *)((intptr_t)row + 4 * base);
                const __m512 va = _mm512_maskz_loadu_ps(ma, p);
                const __m512 vb = _mm512_maskz_loadu_ps(mb, p + 16);
                _mm512_storeu_ps(p0 + q, _mm512_permutex2var_ps(va, evens, vb));
                _mm512_storeu_ps(p1 + q, _mm512_permutex2var_ps(va, odds, vb));
            }
        }
    for (int64_t phase = 0; phase < 4; phase++)  /* the overrun past the last row */
        memset(buffer + phase * size + (rows + 1) * r, 0, sizeof(float) * DW_OVERRUN);
    const int64_t taps = s->kh * s->kw, vectors = (s->oh * r + 15) / 16;
    int64_t offsets[taps];
    for (int64_t t = 0; t < taps; t++) {
        const int64_t y = (t / s->kw) * s->dh, x = (t % s->kw) * s->dw;
        offsets[t] = (2 * (y & 1) + (x & 1)) * size + (y >> 1) * r + (x >> 1);
    }
    float *grid = buffer + 4 * size;
    for (int64_t v0 = 0; v0 < vectors; v0 += DW_UNITS) {
#define DW_BLOCK(n) dw_phase_block(buffer, filter, grid, offsets, taps, v0, n, bias)
        switch (vectors - v0 < DW_UNITS ? vectors - v0 : DW_UNITS) {
        case 1: DW_BLOCK(1); break;
        case 2: DW_BLOCK(2); break;
        case 3: DW_BLOCK(3); break;
        case 4: DW_BLOCK(4); break;
        case 5: DW_BLOCK(5); break;
        case 6: DW_BLOCK(6); break;
        case 7: DW_BLOCK(7); break;
        default: DW_BLOCK(8);
        }
#undef DW_BLOCK
    }
    for (int64_t oh = 0; oh < s->oh; oh++)
        for (int64_t ow = 0; ow < s->ow; ow += 16)
            dw_store(out + oh * s->ow, ow, s->ow,
                     _mm512_loadu_ps(grid + oh * r + ow), s,
                     residual != NULL ? residual + oh * s->ow : NULL, alpha, beta, slope);
}
#endif
