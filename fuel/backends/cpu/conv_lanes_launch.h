/* conv.c's lanes form, its launch (after conv_lanes.h, whose tiles it runs, before conv.c,
 * whose fuel_kernel calls lanes_conv): a launch's units (one image's block of output
 * channels over its output rows, or a part of them), the padded copy of its input where a
 * launch takes one, and the blocking copies at a blocked chain's ends. */
#if defined(__AVX512F__)
typedef struct {
    const float *x, *wt, *residual;
    float *out;
    const Shape *s;
    const Finish *f;
    const float *planes;     /* the zero-padded planes (or x itself), per image `image` floats */
    const int64_t *offsets;  /* per group and patch row (c, kh, kw): its offset in an image's
                              * planes (groups x k) */
    int64_t hp, wp, image, k, blocks, parts;
    int64_t g;               /* channels interleaved in the planes (lanes_group) */
    int64_t linear;          /* a 1x1 unpadded launch: output position p reads the planes at
                              * p * g, so a unit's positions run as one line across rows */
    int64_t step_h, step_w;  /* the planes' rows and columns between two output positions */
    int64_t take_h, take_w;  /* the input's rows and columns between two plane positions */
    int64_t pad_parts;       /* lanes_pad_task: the row parts a group's planes are copied in */
    int64_t stored;          /* a blocked input read as stored, no padded copy: a tile's patch
                              * rows whose taps fall outside the input are skipped (lanes_runs),
                              * the positions whose windows cross its left or right edge run
                              * down their column, the corners one at a time (lanes_edge) */
    const float *scale;      /* NULL, or the input's scale per image and channel (N x C: a
                              * squeeze-excite's, one group): a unit's weights are scaled */
    const int64_t *rows;     /* lanes_rows' rows (patch row l is channel rows[l] / taps) */
} LanesJob;

/* A unit's weights times the input's scale (j->scale): wt[l][:] * scale[image][channel of
 * patch row l], into this thread's buffer 0, so conv(x * scale) runs as conv(x) with them
 * (the scaled input is never written: a squeeze-excite's multiply, a pass over the whole
 * value between the depthwise convolution and this one, is gone; K x LANES_MB multiplies a
 * unit, against the unit's K x LANES_MB x positions multiply-adds). */
static const float *lanes_scaled(const LanesJob *j, const float *wt, int64_t image) {
    const int64_t taps = j->s->kh * j->s->kw;
    const float *scale = j->scale + image * j->s->c;
    float *scaled = thread_buffer(0, (size_t)(j->k * LANES_MB));
    for (int64_t l = 0; l < j->k; l++) {
        const __m512 factor = _mm512_set1_ps(scale[j->rows[l] / taps]);
        _mm512_store_ps(scaled + l * LANES_MB, _mm512_mul_ps(_mm512_load_ps(wt + l * LANES_MB),
                                                             factor));
        _mm512_store_ps(scaled + l * LANES_MB + 16,
                        _mm512_mul_ps(_mm512_load_ps(wt + l * LANES_MB + 16), factor));
    }
    return scaled;
}

/* Unit u: image u / (blocks * parts), block u % blocks (the group's output channels
 * [LANES_MB * b, + LANES_MB) for block (group, b)), output rows [oh * part / parts,
 * oh * (part + 1) / parts) for part u / blocks % parts (a linear launch: positions
 * [plane * part / parts, ...) instead): a part's blocks one after another, on one core
 * (a member's units are a range), so they read its input rows while cached. */
static void lanes_task(void *context, int64_t u) {
    const LanesJob *j = context;
    const Shape *s = j->s;
    const int64_t block = u % j->blocks, part = u / j->blocks % j->parts;
    const int64_t per = lanes_group_blocks(s), group = block / per, mg = s->m / s->groups;
    const int64_t image = u / (j->parts * j->blocks), local = block % per * LANES_MB;
    const int64_t m0 = group * mg + local, plane = s->oh * s->ow;
    const int64_t live = mg - local < LANES_MB ? mg - local : LANES_MB;
    /* the unit's share: output rows [a0, a1), or positions [a0, a1) of a linear plane, one
     * line of a1 - a0 positions */
    const int64_t span = j->linear ? plane : s->oh;
    const int64_t a0 = span * part / j->parts, a1 = span * (part + 1) / j->parts;
    const int64_t line = j->linear ? a1 - a0 : s->ow, lines = j->linear ? 1 : a1 - a0;
    const float *planes = j->planes + image * j->image;
    const float *wt = j->wt + block * j->k * LANES_MB;
    if (j->scale != NULL) wt = lanes_scaled(j, wt, image);
    /* blocked: the same place; into a concat's slice (out_m): its image's channels on */
    const int64_t at = (image * s->m + m0) * plane;
    float *out = j->out + (image * (s->out_m > 0 ? s->out_m : s->m) + m0) * plane;
    const float *residual = j->residual != NULL ? j->residual + at : NULL;
    const LanesOut o = {out, j->f->bias != NULL ? j->f->bias + m0 : NULL, residual, j->f,
                        plane, live, s->blocked, 1, LANES_MB};
    /* the partial sums wait per position across K blocks; with one K block each tile's go
     * to the output through one tile-sized buffer that stays in L1 (a plane-sized one, swept
     * once per launch: mobilenet_v2's 32->16 1x1 at 112x112 179 -> 120 us, 16->96 581 -> 487,
     * per-launch profile medians, in-process A/B) */
    const int one_pass = j->k <= LANES_KC;
    float *sums = thread_buffer(1, (size_t)((one_pass ? LANES_R : plane) * LANES_MB));
    /* down a column: the output's rows apart, and their partial sums */
    const LanesOut down = {out, o.bias, residual, j->f, plane, live, s->blocked, s->ow,
                           one_pass ? LANES_MB : s->ow * LANES_MB};
    /* the positions whose windows lie inside the input: columns [inner0, inner1) of a line
     * (all of them but on a blocked input read as stored), rows [rows0, rows1) */
    int64_t inner0 = 0, inner1 = line, rows0 = 0, rows1 = s->oh;
    if (j->stored) {
        interior_span(s->pl, s->sw, s->kw, s->dw, s->w, s->ow, &inner0, &inner1);
        interior_span(s->pt, s->sh, s->kh, s->dh, s->h, s->oh, &rows0, &rows1);
        rows0 = rows0 > a0 ? rows0 : a0;  /* the unit's */
        rows1 = rows1 < a1 ? rows1 : a1;
        rows1 = rows1 > rows0 ? rows1 : rows0;
    }
    const int64_t *offsets = j->offsets + group * j->k;
    int64_t runs[2 * LANES_MAX_RUNS];
    const int64_t step = j->step_w * j->g, g = j->g;
    for (int64_t l0 = 0; l0 < j->k; l0 += LANES_KC) {
        const int64_t l1 = j->k - l0 < LANES_KC ? j->k : l0 + LANES_KC;
        const int first = l0 == 0, last = l1 >= j->k;
        const int64_t whole[2] = {l0, l1};  /* the K block's patch rows, one run */
        for (int64_t n = 0; n < lines; n++) {
            const int64_t oh = a0 + n, top = oh * s->sh - s->pt;
            const int64_t *row_runs = whole;
            int64_t nruns = 1, kh0 = 0, kh1 = s->kh;
            if (j->stored) {  /* the taps inside the input's rows */
                inside_span(top, s->dh, s->kh, s->h, &kh0, &kh1);
                if (kh0 > 0 || kh1 < s->kh) {
                    nruns = lanes_runs(s, kh0, kh1, 0, s->kw, l0, l1, runs);
                    row_runs = runs;
                }
            }
            /* the row's inner positions, pieces of at most LANES_R as even as they come */
            const int64_t pieces = (inner1 - inner0 + LANES_R - 1) / LANES_R;
            for (int64_t piece = 0, ow = inner0; piece < pieces; piece++) {
                const int64_t end = inner0 + (inner1 - inner0) * (piece + 1) / pieces;
                const int64_t p = j->linear ? a0 + ow : oh * s->ow + ow;
                const float *b = planes + (j->stored ? (top * s->w + ow * s->sw - s->pl) * g
                                           : (j->linear ? p : oh * j->step_h * j->wp
                                                              + ow * j->step_w) * g);
                lanes_piece(end - ow, live, b, offsets, wt, row_runs, nruns, step,
                            one_pass ? sums : sums + p * LANES_MB, first, last, &o, p);
                ow = end;
            }
            if (!j->stored || (oh >= rows0 && oh < rows1))
                continue;
            /* an edge row's positions past the inner columns (the corners), one at a time */
            for (int64_t ow = lanes_next_edge(-1, inner0, inner1); ow < s->ow;
                 ow = lanes_next_edge(ow, inner0, inner1)) {
                const int64_t left = ow * s->sw - s->pl, p = oh * s->ow + ow;
                int64_t kw0, kw1;
                inside_span(left, s->dw, s->kw, s->w, &kw0, &kw1);
                const int64_t count = lanes_runs(s, kh0, kh1, kw0, kw1, l0, l1, runs);
                lanes_edge(planes + (top * s->w + left) * g, offsets, wt, runs, count,
                           one_pass ? sums : sums + p * LANES_MB, first, last, &o, p);
            }
        }
        /* the inner rows' positions past the inner columns, down each such column in pieces
         * of at most LANES_R rows */
        const int64_t pieces = (rows1 - rows0 + LANES_R - 1) / LANES_R;
        for (int64_t ow = lanes_next_edge(-1, inner0, inner1); j->stored && pieces > 0
             && ow < s->ow; ow = lanes_next_edge(ow, inner0, inner1)) {
            const int64_t left = ow * s->sw - s->pl;
            int64_t kw0, kw1;
            inside_span(left, s->dw, s->kw, s->w, &kw0, &kw1);
            const int64_t count = lanes_runs(s, 0, s->kh, kw0, kw1, l0, l1, runs);
            for (int64_t piece = 0, oh = rows0; piece < pieces; piece++) {
                const int64_t end = rows0 + (rows1 - rows0) * (piece + 1) / pieces;
                const int64_t p = oh * s->ow + ow;
                lanes_piece(end - oh, live, planes + ((oh * s->sh - s->pt) * s->w + left) * g,
                            offsets, wt, runs, count, s->sh * s->w * g,
                            one_pass ? sums : sums + p * LANES_MB, first, last, &down, p);
                oh = end;
            }
        }
    }
    const Finish *f = j->f;
    const int64_t p0 = j->linear ? a0 : a0 * s->ow, p1 = j->linear ? a1 : a1 * s->ow;
    if (!s->blocked && (f->act != NONE || f->bias != NULL || j->residual != NULL))
        for (int64_t i = 0; i < live; i++) {
            const int64_t m = m0 + i;
            float *row = out + i * plane + p0;
            finish(row, p1 - p0, f->bias != NULL ? f->bias[m] : 0.0f,
                   residual != NULL ? residual + i * plane + p0 : NULL, f->act, f->alpha,
                   f->beta, f->slope != NULL ? f->slope[m] : 0.0f);
        }
}

/* Unit u: rows [hp * part / pad_parts, hp * (part + 1) / pad_parts) (part u % pad_parts) of
 * channel group u / pad_parts % groups of image u / (pad_parts * groups) (LANES_G planes)
 * copied into its zero-padded planes, interleaved: position (r, t) of the group's channel i at
 * (r * WP + t) * LANES_G + i (a strided 1x1 convolution: only the positions it reads,
 * take_h and take_w apart; a last group's missing channels are never read). Row parts: a
 * blocked chain's first links have one or two groups, whose copy ran on one thread while the
 * other waited (16->32 3x3 stride 2 at 160x160, two threads: the launch 352 -> 310 us,
 * per-launch medians in one process). */
static void lanes_pad_task(void *context, int64_t u) {
    const LanesJob *j = context;
    const Shape *s = j->s;
    const int64_t hp = j->hp, wp = j->wp, groups = (s->c + LANES_G - 1) / LANES_G;
    const int64_t part = u % j->pad_parts, unit = u / j->pad_parts;
    const int64_t image = unit / groups, first = unit % groups * LANES_G;
    const int64_t width = s->c - first < LANES_G ? s->c - first : LANES_G;
    const float *source = j->x + (image * s->c + first) * s->h * s->w;
    float *target = (float *)j->planes + image * j->image + first * hp * wp;
    const int64_t r0 = hp * part / j->pad_parts, r1 = hp * (part + 1) / j->pad_parts;
    for (int64_t r = r0; r < r1; r++) {
        float *row = target + r * wp * LANES_G;
        const int64_t ih = r * j->take_h - s->pt;
        if (ih < 0 || ih >= s->h) {
            memset(row, 0, sizeof(float) * wp * LANES_G);
            continue;
        }
        if (s->blocked) {  /* the input's cells as they are: a copy of the row's run */
            const float *line = source + ih * s->w * LANES_G;
            if (j->take_w == 1) {
                const int64_t lo = s->pl < wp ? s->pl : wp;
                const int64_t hi = s->pl + s->w < wp ? s->pl + s->w : wp;
                memset(row, 0, sizeof(float) * lo * LANES_G);
                memcpy(row + lo * LANES_G, line, sizeof(float) * (hi - lo) * LANES_G);
                memset(row + hi * LANES_G, 0, sizeof(float) * (wp - hi) * LANES_G);
                continue;
            }
            for (int64_t t = 0; t < wp; t++) {
                const int64_t iw = t * j->take_w - s->pl;
                if (iw < 0 || iw >= s->w) _mm512_storeu_ps(row + t * LANES_G, _mm512_setzero_ps());
                else _mm512_storeu_ps(row + t * LANES_G, _mm512_loadu_ps(line + iw * LANES_G));
            }
            continue;
        }
        if (j->take_w == 1) {  /* 16 columns of the group's planes a step, transposed */
            const float *line = source + ih * s->w;
            for (int64_t t0 = 0; t0 < wp; t0 += 16) {
                const int64_t iw0 = t0 - s->pl, lo = iw0 < 0 ? -iw0 : 0;
                const int64_t hi = s->w - iw0 < 16 ? s->w - iw0 : 16;
                const __mmask16 mask = lo < hi ? (__mmask16)((0xFFFFu >> (16 - hi)) & (0xFFFFu << lo))
                                               : 0;
                __m512 v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = i < width ? _mm512_maskz_loadu_ps(mask, line + i * s->h * s->w + iw0)
                                     : _mm512_setzero_ps();
                transpose16(v);
                const int64_t cells = wp - t0 < 16 ? wp - t0 : 16;
                for (int64_t q = 0; q < cells; q++) _mm512_storeu_ps(row + (t0 + q) * LANES_G, v[q]);
            }
            continue;
        }
        for (int64_t t = 0; t < wp; t++) {
            const int64_t iw = t * j->take_w - s->pl;
            float *cell = row + t * LANES_G;
            if (iw < 0 || iw >= s->w) {
                memset(cell, 0, sizeof(float) * LANES_G);
                continue;
            }
            const float *at = source + ih * s->w + iw;
            for (int64_t i = 0; i < width; i++) cell[i] = at[i * s->h * s->w];
        }
    }
}

/* Channel blocking, the conversions at a blocked chain's ends: unit u (block u / pieces of
 * the N x C/16 blocks, piece u % pieces of BLOCKING_PIECE positions) moves its 16 planes'
 * positions between planar x[n][c][h][w] and blocked out[n][c / 16][h][w][c % 16], 16
 * columns a step through transpose16 (C a multiple of 16: s->c). Pieces, not whole blocks,
 * so one block's conversion runs on every thread (16 channels at 112x112 on one: 75 us).
 * A chain's entry may carry a channel affine (scale, or NULL for none): each blocked cell
 * is act(cell * scale + shift) on its 16 channels, a pre-activation BatchNormalization
 * and its activation run on the way into the chain (densenet's, not a pass of their own). */
#define BLOCKING_PIECE 1024
typedef struct {
    const float *from;
    float *to;
    int64_t plane, pieces, unblock, blocks;
    const float *scale, *shift;
    const Finish *f;
} BlockingJob;

static void blocking_task(void *context, int64_t u) {
    const BlockingJob *j = context;
    const int64_t plane = j->plane, block = u / j->pieces;
    const float *from = j->from + block * 16 * plane;
    float *to = j->to + block * 16 * plane;
    const int64_t start = (u % j->pieces) * BLOCKING_PIECE;
    const int64_t end = start + BLOCKING_PIECE < plane ? start + BLOCKING_PIECE : plane;
    for (int64_t p0 = start; p0 < end; p0 += 16) {
        const int64_t count = end - p0 < 16 ? end - p0 : 16;
        const __mmask16 mask = (__mmask16)((1u << count) - 1u);
        __m512 v[16];
        if (j->unblock) {  /* count cells of 16 channels -> 16 rows of count positions */
            for (int i = 0; i < 16; i++)
                v[i] = i < count ? _mm512_loadu_ps(from + (p0 + i) * 16) : _mm512_setzero_ps();
            transpose16(v);
            for (int i = 0; i < 16; i++) _mm512_mask_storeu_ps(to + i * plane + p0, mask, v[i]);
        } else {
            for (int i = 0; i < 16; i++) v[i] = _mm512_maskz_loadu_ps(mask, from + i * plane + p0);
            transpose16(v);
            if (j->scale != NULL) {
                const int64_t at = (block % j->blocks) * 16;
                const __m512 scale = _mm512_loadu_ps(j->scale + at);
                const __m512 shift = j->shift != NULL ? _mm512_loadu_ps(j->shift + at)
                                                      : _mm512_setzero_ps();
                for (int64_t i = 0; i < count; i++)
                    _mm512_storeu_ps(to + (p0 + i) * 16,
                                     act16(_mm512_fmadd_ps(v[i], scale, shift), j->f->act,
                                           j->f->alpha, j->f->beta, 0.0f));
                continue;
            }
            for (int64_t i = 0; i < count; i++) _mm512_storeu_ps(to + (p0 + i) * 16, v[i]);
        }
    }
}

static void blocking(const float *from, float *to, const Shape *s, int unblock,
                     const float *scale, const Finish *f, int64_t threads) {
    const int64_t plane = s->h * s->w, blocks = s->n * (s->c / 16);
    BlockingJob j = {from, to, plane, (plane + BLOCKING_PIECE - 1) / BLOCKING_PIECE, unblock,
                     s->c / 16, scale, f->bias, f};
    run_units(blocks * j.pieces, blocks * 16 * plane >= 65536 ? threads : 1, blocking_task, &j);
}

/* The lanes form of a launch (wt: lanes_weights' transposed weights). */
static void lanes_conv(const float *x, const float *wt, float *out, const float *residual,
                       const float *scale, const Shape *s, const Finish *f, int64_t threads) {
    LanesJob j;
    memset(&j, 0, sizeof(j));
    j.scale = scale;  /* (one group: conv_blocked's rule takes a scale with no other) */
    j.x = x;
    j.wt = wt;
    j.residual = residual;
    j.out = out;
    j.s = s;
    j.f = f;
    j.k = lanes_depth(s);
    j.blocks = lanes_blocks(s);
    const int64_t taps = s->kh * s->kw, cg = s->c / s->groups;
    /* per group and patch row its offset, then lanes_rows' rows */
    int64_t *offsets = (int64_t *)thread_buffer(3, (size_t)(2 * (s->groups + 1) * j.k + 2));
    const int point = s->kh == 1 && s->kw == 1 && s->pt == 0 && s->pl == 0;
    /* planar channels read as stored, or a blocked input a stride-1 1x1 launch reads as it is */
    const int as_stored = lanes_group(s) == 1
                          || (s->blocked && point && s->sh == 1 && s->sw == 1);
    /* a blocked input is read as stored where its groups' channels fill whole cells,
     * lanes_runs' runs fit and its output rows are at least LANES_STORED_WIDTH wide: the
     * tiles skip the taps in the padding (resnet18's 3x3 launches at 56x56, 28x28 and
     * 14x14 4-6% faster than with the padded copy; at 7x7 12% slower: the edges' tiles
     * stream the weights again, per-launch medians, base and change in alternate
     * processes) */
    const int64_t cells = s->c / s->groups / LANES_G;
    j.stored = s->blocked && !as_stored && s->c / s->groups % LANES_G == 0
               && cells * s->kh <= LANES_MAX_RUNS && s->ow >= LANES_STORED_WIDTH;
    /* a strided 1x1 convolution copies only the positions it reads (256->512 at 14x14 with
     * the whole plane copied: 159 us, the gemm form's 145), then runs as a pointwise one */
    j.take_h = point && !j.stored ? s->sh : 1;
    j.take_w = point && !j.stored ? s->sw : 1;
    j.step_h = point && !j.stored ? 1 : s->sh;
    j.step_w = point && !j.stored ? 1 : s->sw;
    const int64_t hp = as_stored || j.stored ? s->h : point ? s->oh
                                                : (s->oh - 1) * s->sh + (s->kh - 1) * s->dh + 1;
    j.hp = hp;
    j.wp = as_stored || j.stored ? s->w : point ? s->ow
                                                : (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1;
    const int64_t g = lanes_group(s), groups = (s->c + g - 1) / g;
    j.g = g;
    j.image = groups * g * hp * j.wp;
    int64_t *rows = offsets + s->groups * j.k;
    lanes_rows(s, rows);
    j.rows = rows;
    for (int64_t group = 0; group < s->groups; group++)
        for (int64_t l = 0; l < j.k; l++) {
            /* a group of a multiple of g channels: group 0's offsets, the group's planes on */
            if (group > 0 && cg % g == 0) {
                offsets[group * j.k + l] = offsets[l] + group * cg * hp * j.wp;
                continue;
            }
            const int64_t c = group * cg + rows[l] / taps, tap = rows[l] % taps;
            offsets[group * j.k + l] = (c / g) * g * hp * j.wp
                                       + ((tap / s->kw) * s->dh * j.wp + tap % s->kw * s->dw) * g
                                       + c % g;
        }
    j.offsets = offsets;
    if (as_stored || j.stored) {
        j.planes = x;
    } else {
        j.planes = thread_buffer(2, (size_t)(s->n * j.image + 16));
        const int64_t team = s->n * s->c * hp * j.wp >= 65536 ? threads : 1;
        j.pad_parts = 1;
        while (team > 1 && j.pad_parts < hp && s->n * groups * j.pad_parts < LANES_UNITS * team)
            j.pad_parts++;
        run_units(s->n * groups * j.pad_parts, team, lanes_pad_task, &j);
    }
    /* units: every image's channel blocks, each cut into row parts where that makes at
     * least LANES_UNITS a thread and a multiple of the team (five blocks of 160 channels
     * split 3 + 2 over two threads) */
    j.linear = point && !j.stored;
    const int64_t span = j.linear ? (s->oh * s->ow + 7) / 8 : s->oh;
    j.parts = 1;
    /* blocks that read the same input of at least LANES_CHUNK_FROM bytes (per image and
     * group): parts of about LANES_CHUNK bytes of it, so the blocks read a part's rows from
     * L1 or L2 instead of the whole input from memory once each (one thread's in-sequence
     * medians, batch 8: 256->64 1x1 at 56x56 5538 / 5193 -> 4499 / 4809 us, 512->128 at
     * 28x28 4429 / 3800 -> 4040 / 3855; from smaller inputs, which stay cached, no gain) */
    const int64_t bytes = hp * j.wp * (s->c / s->groups) * (int64_t)sizeof(float);
    if (j.blocks / s->groups > 1 && bytes >= LANES_CHUNK_FROM) {
        j.parts = (bytes + LANES_CHUNK - 1) / LANES_CHUNK;
        j.parts = j.parts > span ? span : j.parts;
    }
    while (threads > 1 && j.parts < span
           && (s->n * j.blocks * j.parts < LANES_UNITS * threads
               || s->n * j.blocks * j.parts % threads != 0))
        j.parts++;
    run_units(s->n * j.blocks * j.parts, threads, lanes_task, &j);
}
#endif
