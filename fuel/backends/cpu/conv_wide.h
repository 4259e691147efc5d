/* conv.c's wide form (after conv_common.h and conv_gemm.h, before conv.c, which calls
 * wide_form and wide_conv from its gemm form). */

#if defined(__AVX512F__)
/* ------------------------------------------------------------ the wide form
 * A convolution of stride SH x SW as a GEMM over "wide" output positions, with no packing:
 * each plane is copied once per launch into its SH * SW phases of the zero-padded plane
 * (phase (a, b): rows a, a + SH, ... and columns b, b + SW, ...), each HP x WP with
 * WP = OW + (KW - 1) * DW / SW and HP = OH + (KH - 1) * DH / SH. The patch matrix's row for
 * tap (c, kh, kw) is then phase ((kh * DH) % SH, (kw * DW) % SW) of plane c itself, from
 * offset (kh * DH / SH) * WP + kw * DW / SW on, read where it lies at wide position
 * j = oh * WP + ow. The last WP - OW columns of each wide row are never stored (the tile's
 * lanes there compute values nobody reads). The implicit GEMM's packing, a few floats
 * copied per output run, took 13-21% of the time of squeezenet's 3x3 expansions (one
 * thread). A tile, 8 output channels x 48 wide positions over the whole K (no K blocks),
 * is stored from its registers with the epilogue, one run of an output row at a time. */
typedef struct {
    const float *x, *w, *residual;
    float *out;
    const Shape *s;
    const Finish *f;
    float *padded;          /* N * C * phases padded planes, pstride floats apart */
    const int64_t *offsets; /* per patch row (c, kh, kw) of a group: its offset in the planes */
    int64_t pstride, wp, hp, phases, cg, mg, k, span, slivers, block, column_blocks, row_blocks,
        units;
} WideJob;

/* Unit u: phase u % phases of plane u / phases (sh x sw phases: rows a, a + sh, ... and
 * columns b, b + sw, ... of the zero-padded plane), hp x wp floats, then zeroed slack. */
static void wide_pad_task(void *context, int64_t u) {
    const WideJob *j = context;
    const Shape *s = j->s;
    const int64_t plane = u / j->phases, phase = u % j->phases;
    const int64_t a = phase / s->sw, b = phase % s->sw, sw = s->sw, wp = j->wp;
    const float *source = j->x + plane * s->h * s->w;
    float *target = j->padded + u * j->pstride;
    /* columns [lo, hi) of a phase row read input columns t * sw + b - pl in [0, W) */
    const int64_t first = b - s->pl;
    int64_t lo, hi;
    inside_span(first, sw, wp, s->w, &lo, &hi);
    for (int64_t r = 0; r < j->hp; r++) {
        float *row = target + r * wp;
        const int64_t ih = r * s->sh + a - s->pt;
        if (ih < 0 || ih >= s->h || hi == lo) {
            memset(row, 0, sizeof(float) * wp);
            continue;
        }
        const float *line = source + ih * s->w + first;
        for (int64_t t = 0; t < lo; t++) row[t] = 0.0f;
        if (sw == 1) {
            memcpy(row + lo, line + lo, sizeof(float) * (hi - lo));
        } else if (sw == 2) {
            int64_t t = lo;
            for (; t + 16 <= hi; t += 16) {  /* the even floats of 32 (the last one read: 2t+30) */
                const __m512 even = _mm512_permutex2var_ps(
                    _mm512_loadu_ps(line + 2 * t),
                    _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0),
                    _mm512_maskz_loadu_ps((__mmask16)0x7FFF, line + 2 * t + 16));
                _mm512_storeu_ps(row + t, even);
            }
            for (; t < hi; t++) row[t] = line[2 * t];
        } else {
            for (int64_t t = lo; t < hi; t++) row[t] = line[t * sw];
        }
        for (int64_t t = hi; t < wp; t++) row[t] = 0.0f;
    }
    /* the slack after the plane, which the last tiles' lanes read */
    memset(target + j->hp * wp, 0, sizeof(float) * (j->pstride - j->hp * wp));
}

/* A run of a tile's lanes [t, t + count) that lands on output positions [o, o + count) of
 * one output row. A tile of 32 wide positions spans at most RUNS of them. */
#define RUNS 8
#define WIDE_TILE 48  /* wide positions a tile: three vectors */
typedef struct {
    int64_t t, count, o;
} Run;

/* The 8 x 48 tile at wide position b (b's row l at b + offsets[l]) over the whole K, then
 * its runs stored with the epilogue straight from the registers: each run's lanes moved to
 * the front by one two-vector permute, then one (masked) store per 16. Rows [rows, MR)
 * repeat the last weight row and are not stored. (Storing the tile to a buffer and reading
 * its runs back waited on the stores: Zen 4 does not forward a store to a load it only
 * partly covers.) */
/* Rows [0, rows) of a tile without a residual: the bias and the activation `act` on the
 * three whole vectors of each row (the same operations as on the permuted lanes, so the same
 * values), then each run's lanes stored where they land by one store per vector it covers
 * (masked unless whole), no permute. Always inlined with `act` a constant, so the
 * activation's switch folds. */
static inline __attribute__((always_inline)) void wide_store_rows(
    const __m512 *c0, const __m512 *c1, const __m512 *c2, float *out, int64_t plane,
    const Run *runs, int nruns, int rows, int64_t m0, const Finish *f, int finishing,
    const int64_t act) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= rows) break;
        const int64_t m = m0 + r;
        __m512 v[3] = {c0[r], c1[r], c2[r]};
        if (finishing) {
            const __m512 bias = _mm512_set1_ps(f->bias != NULL ? f->bias[m] : 0.0f);
            const float slope = f->slope != NULL ? f->slope[m] : 0.0f;
            for (int q = 0; q < 3; q++)
                v[q] = act16(_mm512_add_ps(v[q], bias), act, f->alpha, f->beta, slope);
        }
        float *row = out + r * plane;
        for (int u = 0; u < nruns; u++) {
            const Run run = runs[u];
            const int64_t shift = run.o - run.t;  /* lane t of the tile lands at row[t + shift] */
            for (int64_t q = run.t / 16; q * 16 < run.t + run.count; q++) {
                const int64_t lo = run.t > 16 * q ? run.t - 16 * q : 0;
                const int64_t end = run.t + run.count - 16 * q;
                const int64_t hi = end < 16 ? end : 16;
                const __mmask16 lanes = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
                float *target = row + (shift + 16 * q);
                if (lanes == 0xFFFF) _mm512_storeu_ps(target, v[q]);
                else _mm512_mask_storeu_ps(target, lanes, v[q]);
            }
        }
    }
}

static inline void micro_offsets(int64_t k, const float *const *a, const float *b,
                                 const int64_t *offsets, float *out,
                                 int64_t plane, const float *residual, const Run *runs,
                                 int nruns, int rows, int64_t m0, const Finish *f) {
    __m512 c0[MR], c1[MR], c2[MR];
    for (int r = 0; r < MR; r++) c0[r] = c1[r] = c2[r] = _mm512_setzero_ps();
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float *a6 = a[6], *a7 = a[7];
    for (int64_t l = 0; l < k; l++) {
        const float *row = b + offsets[l];
        const __m512 b0 = _mm512_loadu_ps(row), b1 = _mm512_loadu_ps(row + 16);
        const __m512 b2 = _mm512_loadu_ps(row + 32);
#define ROW(r)                                                      \
        {                                                               \
            const __m512 x = _mm512_set1_ps(a##r[l]);                   \
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);                      \
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);                      \
            c2[r] = _mm512_fmadd_ps(x, b2, c2[r]);                      \
        }
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
    }
    const int finishing = f->act != NONE || f->bias != NULL || residual != NULL;
    if (residual == NULL) {
        switch (f->act) {
        case NONE:
            wide_store_rows(c0, c1, c2, out, plane, runs, nruns, rows, m0, f, finishing, NONE);
            return;
        case RELU:
            wide_store_rows(c0, c1, c2, out, plane, runs, nruns, rows, m0, f, 1, RELU);
            return;
        case CLIP:
            wide_store_rows(c0, c1, c2, out, plane, runs, nruns, rows, m0, f, 1, CLIP);
            return;
        case SILU:
            wide_store_rows(c0, c1, c2, out, plane, runs, nruns, rows, m0, f, 1, SILU);
            return;
        default:
            wide_store_rows(c0, c1, c2, out, plane, runs, nruns, rows, m0, f, 1, f->act);
            return;
        }
    }
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= rows) break;
        const int64_t m = m0 + r;
        const __m512 bias = _mm512_set1_ps(f->bias != NULL ? f->bias[m] : 0.0f);
        const float slope = f->slope != NULL ? f->slope[m] : 0.0f;
        for (int u = 0; u < nruns; u++) {
            const Run run = runs[u];
            for (int64_t v = 0; v < run.count; v += 16) {
                const int64_t count = run.count - v < 16 ? run.count - v : 16;
                const __mmask16 lanes = (__mmask16)((1u << count) - 1u);
                const int64_t first = run.t + v;  /* lanes [first, first + 16) of c0|c1|c2 */
                const __m512i index = _mm512_add_epi32(lane, _mm512_set1_epi32((int)(first % 16)));
                __m512 y = first < 16 ? _mm512_permutex2var_ps(c0[r], index, c1[r])
                         : first < 32 ? _mm512_permutex2var_ps(c1[r], index, c2[r])
                                      : _mm512_permutex2var_ps(c2[r], index, c2[r]);
                float *target = out + r * plane + run.o + v;
                if (finishing) {
                    y = _mm512_add_ps(y, bias);
                    if (residual != NULL)
                        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(
                                                 lanes, residual + r * plane + run.o + v));
                    y = act16(y, f->act, f->alpha, f->beta, slope);
                }
                if (count == 16) _mm512_storeu_ps(target, y);
                else _mm512_mask_storeu_ps(target, lanes, y);
            }
        }
    }
}

/* Unit u of a WideJob: GEMM u / units (image, then group), its column block of the wide
 * positions and its sliver block. */
static void wide_task(void *context, int64_t u) {
    const WideJob *j = context;
    const Shape *s = j->s;
    const Finish *f = j->f;
    const int64_t image = u / j->units / s->groups, g = u / j->units % s->groups;
    const int64_t cb = u % j->units % j->column_blocks, rb = u % j->units / j->column_blocks;
    const int64_t plane = s->oh * s->ow, wp = j->wp;
    const float *b = j->padded + (image * s->c + g * j->cg) * j->phases * j->pstride;
    const int64_t at = (image * s->m + g * j->mg) * plane;
    float *out = j->out + at;
    const float *residual = j->residual != NULL ? j->residual + at : NULL;
    const float *weights = j->w + g * j->mg * j->k;
    const int64_t n0 = cb * j->block, n1 = n0 + j->block < j->span ? n0 + j->block : j->span;
    const int64_t s0 = j->slivers * rb / j->row_blocks;
    const int64_t s1 = j->slivers * (rb + 1) / j->row_blocks;
    Finish local = *f;
    if (local.bias != NULL) local.bias += g * j->mg;
    if (local.slope != NULL) local.slope += g * j->mg;
    for (int64_t p = n0; p < n1; p += WIDE_TILE) {
        const int64_t width = n1 - p < WIDE_TILE ? n1 - p : WIDE_TILE;
        /* the tile's runs of output rows */
        Run runs[RUNS];
        int nruns = 0;
        int64_t oh = p / wp, ow = p % wp, t = 0;
        while (t < width && nruns < RUNS) {
            const int64_t run = wp - ow < width - t ? wp - ow : width - t;
            const int64_t valid = ow < s->ow ? (s->ow - ow < run ? s->ow - ow : run) : 0;
            if (valid > 0) {
                runs[nruns].t = t;
                runs[nruns].count = valid;
                runs[nruns].o = oh * s->ow + ow;
                nruns++;
            }
            t += run;
            ow += run;
            if (ow == wp) {
                ow = 0;
                oh++;
            }
        }
        for (int64_t sl = s0; sl < s1; sl++) {
            const int64_t i0 = sl * MR;
            const int rows = j->mg - i0 < MR ? (int)(j->mg - i0) : MR;
            const float *a[MR];
            for (int r = 0; r < MR; r++)
                a[r] = weights + (i0 + (r < rows ? r : rows - 1)) * j->k;
            micro_offsets(j->k, a, b + p, j->offsets, out + i0 * plane, plane,
                          residual != NULL ? residual + i0 * plane : NULL, runs, nruns, rows,
                          i0, &local);
        }
    }
}

/* Whether the gemm form runs this launch as the wide form: not a pointwise convolution (the
 * packed GEMM's tiles store with fewer steps, and K is short), a stride of at most 4, and
 * output rows of at least WIDE_ROW positions, so the wide rows' surplus columns cost little
 * (13x13 planes ran 10% slower than packed). Measured, one thread, this 2-core EPYC, best of
 * 200 (packed -> wide): the 3->64 7x7 stride-2 stem at 224x224 2658 -> 2307 us, 16->64 3x3
 * at 55x55 665 -> 561, 32->128 3x3 at 27x27 605 -> 552, 64->128 3x3 stride 2 at 28x28 359
 * -> 348; but the 3->64 3x3 stride-2 stem (K 27) only 585 -> 568, and in squeezenet at
 * batch 8, whose padded phases (5 MB) are copied before the products, 5775 -> 6694: so
 * from WIDE_DEPTH patch rows, for one image and group from WIDE_DEPTH_ONE (the stem on two
 * threads: 336 -> 293 us; batch 8 2444 -> 2650, hence the image count); a strided 1x1 kernel
 * reads one phase of the copied four (resnet18's 64->128 1x1 stride-2 downsample, batch 8:
 * 1903 -> 2228), so not those. */
#define WIDE_ROW 24  /* convolution_c.py's Geometry.wide says the same for its rule */
#define WIDE_DEPTH 64
#define WIDE_DEPTH_ONE 16
static inline int wide_form(const Shape *s, int pointwise) {
    return !pointwise && s->kh * s->kw > 1 && s->sh <= 4 && s->sw <= 4 && s->ow >= WIDE_ROW
           && s->c / s->groups * s->kh * s->kw
              >= (s->n == 1 && s->groups == 1 ? WIDE_DEPTH_ONE : WIDE_DEPTH);
}

static void wide_conv(const float *x, const float *w, float *out, const float *residual,
                      const Shape *s, const Finish *f, int64_t threads) {
    if (s->n > 1) {  /* image by image: one image's phases stay in cache for its products */
        Shape one = *s;
        one.n = 1;
        const int64_t in = s->c * s->h * s->w, result = s->m * s->oh * s->ow;
        for (int64_t image = 0; image < s->n; image++)
            wide_conv(x + image * in, w, out + image * result,
                      residual != NULL ? residual + image * result : NULL, &one, f, threads);
        return;
    }
    WideJob j;
    memset(&j, 0, sizeof(j));
    j.x = x;
    j.w = w;
    j.residual = residual;
    j.out = out;
    j.s = s;
    j.f = f;
    j.cg = s->c / s->groups;
    j.mg = s->m / s->groups;
    j.k = j.cg * s->kh * s->kw;
    j.slivers = (j.mg + MR - 1) / MR;
    const int64_t taps = s->kh * s->kw;
    int64_t *offsets = (int64_t *)thread_buffer(3, (size_t)(2 * j.k + 2));
    j.phases = s->sh * s->sw;
    {
        /* tap (kh, kw) reads phase ((kh * dh) % sh, (kw * dw) % sw) from row (kh * dh) / sh
         * and column (kw * dw) / sw on */
        j.wp = s->ow + (s->kw - 1) * s->dw / s->sw;
        j.hp = s->oh + (s->kh - 1) * s->dh / s->sh;
        j.pstride = (j.hp * j.wp + WIDE_TILE + 15) / 16 * 16;
        j.padded = thread_buffer(2, (size_t)(s->n * s->c * j.phases * j.pstride));
        for (int64_t l = 0; l < j.k; l++) {
            const int64_t c = l / taps, kh = (l % taps) / s->kw, kw = l % s->kw;
            const int64_t phase = (kh * s->dh) % s->sh * s->sw + (kw * s->dw) % s->sw;
            offsets[l] = (c * j.phases + phase) * j.pstride + (kh * s->dh / s->sh) * j.wp
                         + kw * s->dw / s->sw;
        }
        const int64_t units = s->n * s->c * j.phases;
        run_units(units, units * j.pstride >= 65536 ? threads : 1, wide_pad_task, &j);
    }
    j.offsets = offsets;
    j.span = (s->oh - 1) * j.wp + s->ow;  /* the wide positions up to the last output */
    /* units: per GEMM, one tile of positions each (nothing is packed per unit, so a small
     * unit costs only its claim; blocks of whole tiles split a 27x27 plane's 17 tiles 10 + 7
     * over two threads); a GEMM of fewer tiles than four a thread splits its slivers too */
    const int64_t gemms = s->n * s->groups;
    const int64_t tiles = (j.span + WIDE_TILE - 1) / WIDE_TILE;
    const int64_t per_gemm = gemms >= threads ? 1 : (threads + gemms - 1) / gemms;
    int64_t rows = 1;
    if (per_gemm > 1 && tiles < per_gemm * 4 && j.slivers >= per_gemm) rows = per_gemm;
    j.block = WIDE_TILE;
    j.column_blocks = tiles;
    j.row_blocks = rows;
    j.units = j.column_blocks * j.row_blocks;
    run_units(gemms * j.units, threads, wide_task, &j);
}
#endif
