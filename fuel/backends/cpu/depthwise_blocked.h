/* float32 depthwise convolution on blocked channels (NCHW16c; after conv_common.h, included
 * by depthwise.c): x [N][C/16][H][W][16], out and residual [N][C/16][OH][OW][16], w as
 * stored (C x 1 x KH x KW). Each 16-channel cell is one vector, so an output position is one
 * accumulator over the taps, each tap one multiply-add of the cell under it by the block's
 * 16 filter values at that tap: no transpose, every lane busy on any plane size and
 * stride. A row's interior positions (every tap inside the input row) run
 * unchecked in tiles of 8, 4, 2 and 1 (independent accumulators, the stride a constant for 1
 * and 2); its border positions check each tap. Where border positions are many (a small
 * plane) a unit copies its input rows between zero rows and columns instead and runs its
 * positions, row after row, in tiles of 8, every tap unchecked. Bias, residual and the
 * activation are applied as each vector is stored. A unit is DWB_WORK-ish output positions
 * (whole rows) of one block of one image.
 * (AVX-512 only: convolution_blocked.py launches blocked forms only where conv.c is built
 * with it.)
 */

/* Output columns [lo, hi) of a row have every tap inside the input row (depthwise.c's row
 * walk too). */
static inline void interior_columns(const Shape *s, int64_t *lo, int64_t *hi) {
    interior_span(s->pl, s->sw, s->kw, s->dw, s->w, s->ow, lo, hi);
}

#if defined(__AVX512F__)
#define DWB_TILE 8    /* interior positions accumulated at once (8 of 32 registers) */
#define DWB_WORK 256  /* output positions a unit covers at least, where the plane has them */
#define DWB_TAPS 256  /* filter taps at most (KH x KW; convolution_blocked.py checks) */

typedef struct {
    const float *x, *w, *bias, *residual;
    float *out;
    const Shape *s;
    float alpha, beta;
    int64_t blocks, rows, strips;  /* C / 16, output rows a unit, units a block */
} BlockedDepthwiseJob;

/* Unit `unit` of a launch: `cell` its input and output plane (image x blocks + block),
 * `block` its channel block, [first, end) its output rows; returns the block's filter
 * transposed into this thread's buffer 0, wt[t][l] = w[16 block + l][t]. */
static const float *dwb_unit(const BlockedDepthwiseJob *j, int64_t unit, int64_t *cell,
                             int64_t *block, int64_t *first, int64_t *end) {
    const Shape *s = j->s;
    const int64_t taps = s->kh * s->kw;
    *cell = unit / j->strips, *block = *cell % j->blocks;
    *first = (unit % j->strips) * j->rows;
    *end = *first + j->rows < s->oh ? *first + j->rows : s->oh;
    float *wt = thread_buffer(0, (size_t)(16 * taps));
    for (int64_t l = 0; l < 16; l++)
        for (int64_t t = 0; t < taps; t++)
            wt[t * 16 + l] = j->w[(*block * 16 + l) * taps + t];
    return wt;
}

/* Positions [p, p + T) of a padded unit (depthwise_padded_task): position i's taps read at
 * at[i] + offset[t], its output at out + i * 16 (a unit's positions are contiguous in the
 * output, row after row). T (8, 4, 2 or 1) a constant once inlined. */
static inline __attribute__((always_inline)) void dwb_positions(
        int T, const float *const *at, const int64_t *offset, const float *wt, int64_t taps,
        __m512 shift, float *out, const float *residual, int64_t act, float alpha,
        float beta) {
    __m512 acc[DWB_TILE];
    for (int i = 0; i < T; i++) acc[i] = shift;
    for (int64_t t = 0; t < taps; t++) {
        const __m512 weight = _mm512_load_ps(wt + t * 16);
        for (int i = 0; i < T; i++)
            acc[i] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(at[i] + offset[t]), acc[i]);
    }
    for (int i = 0; i < T; i++) cell16_store(out, residual, i * 16, acc[i], act, alpha, beta);
}

/* A unit on a small plane, where border positions (depthwise_blocked_task's checked,
 * two-accumulator path) are a large share: its input rows are copied once between zero
 * rows and columns, so every position takes every tap unchecked, and its positions, row
 * after row, run in tiles of 8 (a 7-wide row no longer splits into tiles of 4, 2 and 1,
 * whose few accumulators wait on each other; only a unit's last positions do). */
static void depthwise_padded_task(void *context, int64_t unit) {
    const BlockedDepthwiseJob *j = context;
    const Shape *s = j->s;
    int64_t cell, block, first, end;
    const float *wt = dwb_unit(j, unit, &cell, &block, &first, &end);
    const int64_t kh = s->kh, kw = s->kw, sw = s->sw, sh = s->sh, width = s->w;
    const int64_t taps = kh * kw;
    /* the copy: input rows [r0, r0 + count) (zero outside the input), columns from -pl */
    int64_t pr = (s->ow - 1) * sw + (kw - 1) * s->dw - s->pl - width + 1;
    if (pr < 0) pr = 0;
    const int64_t pitch = (s->pl + width + pr) * 16;
    const int64_t r0 = first * sh - s->pt;
    const int64_t count = (end - 1 - first) * sh + (kh - 1) * s->dh + 1;
    float *copy = thread_buffer(1, (size_t)(count * pitch));
    const float *x = j->x + cell * s->h * width * 16;
    for (int64_t r = 0; r < count; r++) {
        float *to = copy + r * pitch;
        const int64_t ih = r0 + r;
        if (ih < 0 || ih >= s->h) {
            memset(to, 0, sizeof(float) * (size_t)pitch);
            continue;
        }
        memset(to, 0, sizeof(float) * (size_t)(s->pl * 16));
        memcpy(to + s->pl * 16, x + ih * width * 16, sizeof(float) * (size_t)(width * 16));
        memset(to + (s->pl + width) * 16, 0, sizeof(float) * (size_t)(pr * 16));
    }
    int64_t offset[DWB_TAPS];
    for (int64_t r = 0; r < kh; r++)
        for (int64_t c = 0; c < kw; c++)
            offset[r * kw + c] = r * s->dh * pitch + c * s->dw * 16;
    const __m512 shift = j->bias != NULL ? _mm512_loadu_ps(j->bias + block * 16)
                                         : _mm512_setzero_ps();
    const int64_t at0 = cell * s->oh * s->ow * 16 + first * s->ow * 16;
    float *out = j->out + at0;
    const float *residual = j->residual != NULL ? j->residual + at0 : NULL;
    const int64_t positions = (end - first) * s->ow;
    const float *at[DWB_TILE];
    for (int64_t p = 0; p < positions;) {  /* tiles of 8, the last positions 4, 2 and 1 */
        const int64_t left = positions - p;
        const int T = left >= DWB_TILE ? DWB_TILE : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        for (int i = 0; i < T; i++) {
            const int64_t oh = (p + i) / s->ow, ow = (p + i) % s->ow;
            at[i] = copy + oh * sh * pitch + ow * sw * 16;
        }
        float *o = out + p * 16;
        const float *res = residual != NULL ? residual + p * 16 : NULL;
#define DWB_POSITIONS(T) \
        dwb_positions(T, at, offset, wt, taps, shift, o, res, s->act, j->alpha, j->beta)
        if (T == DWB_TILE) DWB_POSITIONS(DWB_TILE);
        else if (T == 4) DWB_POSITIONS(4);
        else if (T == 2) DWB_POSITIONS(2);
        else DWB_POSITIONS(1);
#undef DWB_POSITIONS
        p += T;
    }
}

/* Interior positions [ow, ow + T) of one output row (every tap inside the input row): T
 * (<= DWB_TILE) and the stride SW constants once inlined, so the accumulators stay in
 * registers and the loads take immediate offsets. Tap t reads from in[t] (its row, shifted
 * to its column) with the block's 16 filter values at w[t]. */
static inline __attribute__((always_inline)) void dwb_tile(
        int T, int64_t SW, int64_t ow, const float *const *in, const float *const *w,
        int64_t taps, __m512 shift, float *out, const float *residual, int64_t act,
        float alpha, float beta) {
    __m512 acc[DWB_TILE];
    for (int i = 0; i < T; i++) acc[i] = shift;
    const int64_t base = ow * SW * 16;
    for (int64_t t = 0; t < taps; t++) {
        const __m512 weight = _mm512_load_ps(w[t]);
        const float *p = in[t] + base;
        for (int i = 0; i < T; i++)
            acc[i] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(p + i * SW * 16), acc[i]);
    }
    for (int i = 0; i < T; i++) cell16_store(out, residual, (ow + i) * 16, acc[i], act, alpha, beta);
}

/* Interior positions [lo, hi) of one output row in tiles of 8, 4, 2 and 1. */
static inline __attribute__((always_inline)) void dwb_interior_row(
        int64_t SW, int64_t lo, int64_t hi, const float *const *in, const float *const *w,
        int64_t taps, __m512 shift, float *out, const float *residual, int64_t act,
        float alpha, float beta) {
    int64_t ow = lo;
    for (; ow + 8 <= hi; ow += 8)
        dwb_tile(8, SW, ow, in, w, taps, shift, out, residual, act, alpha, beta);
    if (ow + 4 <= hi) {
        dwb_tile(4, SW, ow, in, w, taps, shift, out, residual, act, alpha, beta);
        ow += 4;
    }
    if (ow + 2 <= hi) {
        dwb_tile(2, SW, ow, in, w, taps, shift, out, residual, act, alpha, beta);
        ow += 2;
    }
    if (ow < hi) dwb_tile(1, SW, ow, in, w, taps, shift, out, residual, act, alpha, beta);
}

static void depthwise_blocked_task(void *context, int64_t unit) {
    const BlockedDepthwiseJob *j = context;
    const Shape *s = j->s;
    int64_t cell, block, first, end;
    const float *wt = dwb_unit(j, unit, &cell, &block, &first, &end);
    const int64_t kh = s->kh, kw = s->kw, sw = s->sw, dw = s->dw, pl = s->pl, width = s->w;
    const int64_t act = s->act, plane_in = s->h * width * 16, plane_out = s->oh * s->ow * 16;
    const float *x = j->x + cell * plane_in;
    const __m512 shift = j->bias != NULL ? _mm512_loadu_ps(j->bias + block * 16)
                                         : _mm512_setzero_ps();
    int64_t lo, hi;
    interior_columns(s, &lo, &hi);
    for (int64_t oh = first; oh < end; oh++) {
        /* the taps over this output row: each one's input (its row from column -pl, shifted
         * by its column) and filter values */
        const float *in[DWB_TAPS];
        const float *w[DWB_TAPS];
        int64_t taps = 0;
        for (int64_t r = 0; r < kh; r++) {
            const int64_t ih = oh * s->sh + r * s->dh - s->pt;
            if (ih < 0 || ih >= s->h) continue;
            for (int64_t c = 0; c < kw; c++, taps++) {
                in[taps] = x + (ih * width - pl + c * dw) * 16;
                w[taps] = wt + (r * kw + c) * 16;
            }
        }
        const int64_t at = cell * plane_out + oh * s->ow * 16;
        float *out = j->out + at;
        const float *residual = j->residual != NULL ? j->residual + at : NULL;
        if (sw == 1)
            dwb_interior_row(1, lo, hi, in, w, taps, shift, out, residual, act, j->alpha,
                             j->beta);
        else if (sw == 2)
            dwb_interior_row(2, lo, hi, in, w, taps, shift, out, residual, act, j->alpha,
                             j->beta);
        else
            dwb_interior_row(sw, lo, hi, in, w, taps, shift, out, residual, act, j->alpha,
                             j->beta);
        /* border positions: each tap checked, two accumulators */
        for (int64_t ow = 0; ow < s->ow; ow++) {
            if (ow == lo && hi > lo) ow = hi;
            if (ow >= s->ow) break;
            /* the filter columns inside the input row: ow sw + c dw - pl in [0, W) */
            const int64_t from = ow * sw - pl;
            int64_t c0 = from >= 0 ? 0 : (-from + dw - 1) / dw;
            int64_t c1 = width - from <= 0 ? 0 : (width - from - 1) / dw + 1;
            if (c1 > kw) c1 = kw;
            __m512 acc[2] = {shift, _mm512_setzero_ps()};
            for (int64_t t = 0; t < taps; t += kw)  /* taps come kw to a row */
                for (int64_t c = c0; c < c1; c++)
                    acc[c & 1] = _mm512_fmadd_ps(_mm512_load_ps(w[t + c]), _mm512_loadu_ps(
                        in[t + c] + ow * sw * 16), acc[c & 1]);
            cell16_store(out, residual, ow * 16, _mm512_add_ps(acc[0], acc[1]), act, j->alpha,
                      j->beta);
        }
    }
}

static void depthwise_blocked(const float *const *data, const Shape *s, int64_t threads,
                              float alpha, float beta) {
    BlockedDepthwiseJob j = {data[0], data[1], data[2], data[3], (float *)data[4], s, alpha,
                             beta, s->c / 16, 1, 1};
    j.rows = s->ow >= DWB_WORK ? 1 : (DWB_WORK + s->ow - 1) / s->ow;
    if (j.rows > s->oh) j.rows = s->oh;
    if (j.rows < 1) j.rows = 1;
    j.strips = (s->oh + j.rows - 1) / j.rows;
    /* padded where border positions are an eighth of a row or more (measured, AVX-512
     * EPYC: 5x5 on 7x7 and 14x14 planes 0.5-0.7x the time, 3x3 on 14x14 0.8x, on 28x28
     * 1.03x, on 112x112 1.5x: the copy and the positions' addressing then cost more) */
    int64_t lo, hi;
    interior_columns(s, &lo, &hi);
    const int padded = (s->ow - (hi - lo)) * 8 >= s->ow;
    run_units(s->n * j.blocks * j.strips, threads,
              padded ? depthwise_padded_task : depthwise_blocked_task, &j);
}
#endif
