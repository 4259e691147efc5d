/* conv.c's lanes form, its weights and tiles (after conv_common.h, conv_gemm.h and
 * conv_wide.h, before conv_lanes_launch.h, which runs the tiles, and conv.c, whose
 * fuel_kernel calls lanes_weights and lanes_conv): a dense convolution with constant weights
 * on a small plane (a 7x7 map: its 49 positions filled three 16-lane panels and one lone
 * column, which the gemm form ran as dot products over the whole K, streaming the weights a
 * second time, after packing the patch values by runs of 7), or a grouped one (each group
 * as its own) on any plane.
 *
 * The GEMM is turned over: out^T (positions x channels) = patches^T . w^T, output channels
 * in the lanes and output positions broadcast, so a plane of any width runs without padded
 * lanes. The weights are transposed once, when the launch is prepared (LANES_WEIGHTS): per
 * block of LANES_MB output channels, K rows of LANES_MB floats (zero past M), so a tile reads
 * them as one stream. The input is copied once per launch into zero-padded planes
 * (HP = (OH - 1) SH + (KH - 1) DH + 1 rows of WP = (OW - 1) SW + (KW - 1) DW + 1; a 1x1
 * stride-1 unpadded convolution reads it as stored, a strided one copies only the positions
 * it reads), so patch value (c, kh, kw) of output (oh, ow) is
 * padded[c][oh SH + kh DH][ow SW + kw DW]. A tile is LANES_MB output channels (two vectors;
 * one for a last block of at most 16) x R <= LANES_R consecutive positions of one output
 * row, over a K block (LANES_KC): per patch row two loads and R broadcasts feed 2R FMAs. The
 * K blocks' partial sums wait in a small buffer (positions x LANES_MB); the last K block
 * writes the tile's sums to the output transposed, then the epilogue runs on the unit's
 * output rows (conv_common.h's finish). A unit is one image's block of output channels over
 * its output rows: all of them, or a part where the team would have fewer than LANES_UNITS
 * units a thread or not a multiple of the team. */
#if defined(__AVX512F__)
#define LANES_RUN 13
#define LANES_WEIGHTS 14
#define LANES_BLOCKED 15
#define BLOCK_CHANNELS 16    /* planar -> blocked */
#define UNBLOCK_CHANNELS 17  /* blocked -> planar */
#define LANES_MB 32
#define LANES_R 14  /* widest tile (28 accumulators: a 14x14 map's rows one piece each) */
#define LANES_KC 256
#define LANES_UNITS 4  /* fewest units a thread of the team */
#define LANES_COPY_BLOCKS 8  /* from these many blocks a pointwise launch interleaves */
#define LANES_CHUNK (1 << 15)  /* input bytes a part of a unit reads, where blocks share it */
#define LANES_CHUNK_FROM (1 << 20)  /* ... from an input (per image and group) this large */

/* A grouped convolution runs each group as its own: its C / groups input channels (K = C /
 * groups * KH * KW patch rows) and its M / groups output channels in blocks of their own. */
static inline int64_t lanes_group_blocks(const Shape *s) {
    return (s->m / s->groups + LANES_MB - 1) / LANES_MB;
}
static inline int64_t lanes_blocks(const Shape *s) { return s->groups * lanes_group_blocks(s); }
static inline int64_t lanes_depth(const Shape *s) { return s->c / s->groups * s->kh * s->kw; }

/* The patch rows' order: groups of LANES_G input channels, in each its taps (kh, kw), in
 * each the group's channels, so consecutive patch rows read one position's consecutive
 * channels, which the padded copy keeps side by side (one cache line for LANES_G patch rows,
 * where rows (c, kh, kw) in that order each touched a line of their own: on a Sapphire Rapids
 * core the tile's broadcasts waited on L2): lanes_rows below. */
#define LANES_G 16
/* The channels a group interleaves: 1 for a pointwise convolution with fewer than
 * LANES_COPY_BLOCKS blocks of output channels, read as stored (its planes as they are:
 * copying them cost more than it saved, 384->64 1x1 at 13x13 63 -> 77 us; one thread,
 * in-process A/B, as stored against interleaved: 672->112 at 14x14 -18%, 480->112 -15%,
 * 1152->192 at 7x7 -10%), else LANES_G (a tile's broadcasts then read LANES_G patch rows
 * from one cache line, where the planes as stored take a line a patch row; one thread,
 * in-process A/B: 256->1024 1x1 at 14x14 925 -> 847 us, 512->2048 at 7x7 917 -> 841,
 * 1024->256 at 14x14 848 -> 809, 384->256 at 13x13 even). */
static inline int64_t lanes_group(const Shape *s) {
    return s->blocked || !(s->kh == 1 && s->kw == 1 && s->pt == 0 && s->pl == 0 && s->oh == s->h
                   && s->ow == s->w && lanes_blocks(s) < LANES_COPY_BLOCKS) ? LANES_G : 1;
}
/* rows[l]: patch row l of this order as (c, kh, kw) = c * KH * KW + kh * KW + kw, for
 * every l < K (a group's C / groups channels). */
static void lanes_rows(const Shape *s, int64_t *rows) {
    const int64_t g = lanes_group(s), taps = s->kh * s->kw, cg = s->c / s->groups;
    int64_t l = 0;
    for (int64_t first = 0; first < cg; first += g) {
        const int64_t width = cg - first < g ? cg - first : g;
        for (int64_t tap = 0; tap < taps; tap++)
            for (int64_t i = 0; i < width; i++) rows[l++] = (first + i) * taps + tap;
    }
}

/* wt[block][l][j] = w[m][rows[l]] (lanes_rows) for block (group, b) and m = group * M / groups + b *
 * LANES_MB + j (0 past the group's channels), K = C / groups * KH * KW. */
static void lanes_weights(const float *w, float *wt, const Shape *s) {
    const int64_t k = lanes_depth(s), blocks = lanes_blocks(s), per = lanes_group_blocks(s);
    const int64_t mg = s->m / s->groups;
    int64_t *rows = (int64_t *)thread_buffer(3, (size_t)(2 * k + 2));  /* lanes_conv's offsets' */
    lanes_rows(s, rows);
    for (int64_t b = 0; b < blocks; b++) {
        float *target = wt + b * k * LANES_MB;
        for (int64_t j = 0; j < LANES_MB; j++) {
            const int64_t local = b % per * LANES_MB + j, m = b / per * mg + local;
            if (local < mg) {
                const float *row = w + m * k;
                for (int64_t l = 0; l < k; l++) target[l * LANES_MB + j] = row[rows[l]];
            } else {
                for (int64_t l = 0; l < k; l++) target[l * LANES_MB + j] = 0.0f;
            }
        }
    }
}

/* Where a unit's tiles go: `out` at the unit's first channel m0 (channel j of position p at
 * out[j * plane + p]; blocked: at out[(j / 16 * plane + p) * 16 + j % 16], NCHW16c), with
 * bias, residual (at the same place as out) and the activation applied on the way
 * when blocked (a planar unit's epilogue runs after, on its rows: finish). */
typedef struct {
    float *out;
    const float *bias, *residual;
    const Finish *f;
    int64_t plane, live, blocked;
    int64_t step;  /* output positions between a tile's positions: 1 along a row, OW down a
                    * column (a blocked input read as stored: its left and right edges) */
    int64_t ss;    /* floats between a tile's positions' rows of partial sums */
} LanesOut;

/* A tile's sums (r <= 16 positions x LANES_MB channels, `sums` rows of LANES_MB) from
 * position p on into the output, transposed: out[j * plane + p + i] for channels j < live,
 * positions i < r. */
static void lanes_store_planar(const float *sums, int64_t r, const LanesOut *o, int64_t p) {
    const __mmask16 mask = (__mmask16)((1u << r) - 1u);
    for (int64_t half = 0; half < o->live; half += 16) {
        __m512 v[16];
        for (int i = 0; i < 16; i++)
            v[i] = i < r ? _mm512_load_ps(sums + i * o->ss + half) : _mm512_setzero_ps();
        transpose16(v);
        const int64_t count = o->live - half < 16 ? o->live - half : 16;
        float *out = o->out + half * o->plane + p;
        for (int64_t j = 0; j < count; j++)
            _mm512_mask_storeu_ps(out + j * o->plane, mask, v[j]);
    }
}

/* The same into a blocked output: each position's 16 channels one vector, the epilogue
 * (bias, residual, activation) applied to it first. */
static void lanes_store_blocked(const float *sums, int64_t r, const LanesOut *o, int64_t p) {
    const Finish *f = o->f;
    for (int64_t half = 0; half < o->live; half += 16) {
        const __m512 shift = o->bias != NULL ? _mm512_loadu_ps(o->bias + half)
                                             : _mm512_setzero_ps();
        float *out = o->out + (half * o->plane + p * 16);
        const float *residual = o->residual != NULL ? o->residual + (half * o->plane + p * 16)
                                                    : NULL;
        for (int64_t i = 0; i < r; i++) {
            cell16_store(out, residual, i * o->step * 16,
                         _mm512_add_ps(_mm512_load_ps(sums + i * o->ss + half), shift),
                         f->act, f->alpha, f->beta);
        }
    }
}

static inline void lanes_store(const float *sums, int64_t r, const LanesOut *o, int64_t p) {
    if (o->blocked) lanes_store_blocked(sums, r, o, p);
    else lanes_store_planar(sums, r, o, p);
}

/* R positions (b[offsets[l] + i * sw], i < R) x two vectors of output channels over kc patch rows
 * (wt: kc rows of LANES_MB floats); partial sums in `sums` (R rows of LANES_MB): read first
 * unless `first`, written back unless `last`, where they go to the output instead (lanes_store
 * from position p). */
#define LANES_EACH1(X) X(0)
#define LANES_EACH2(X) LANES_EACH1(X) X(1)
#define LANES_EACH3(X) LANES_EACH2(X) X(2)
#define LANES_EACH4(X) LANES_EACH3(X) X(3)
#define LANES_EACH5(X) LANES_EACH4(X) X(4)
#define LANES_EACH6(X) LANES_EACH5(X) X(5)
#define LANES_EACH7(X) LANES_EACH6(X) X(6)
#define LANES_EACH8(X) LANES_EACH7(X) X(7)
#define LANES_EACH9(X) LANES_EACH8(X) X(8)
#define LANES_EACH10(X) LANES_EACH9(X) X(9)
#define LANES_EACH11(X) LANES_EACH10(X) X(10)
#define LANES_EACH12(X) LANES_EACH11(X) X(11)
#define LANES_EACH13(X) LANES_EACH12(X) X(12)
#define LANES_EACH14(X) LANES_EACH13(X) X(13)
#define LANES_START(i) __m512 c##i##_0 = first ? _mm512_setzero_ps() \
                                               : _mm512_load_ps(sums + i * o->ss), \
                              c##i##_1 = first ? _mm512_setzero_ps() \
                                               : _mm512_load_ps(sums + i * o->ss + 16);
#define LANES_FMA(i) { const __m512 x = _mm512_set1_ps(row[i * sw]); \
                       c##i##_0 = _mm512_fmadd_ps(x, w0, c##i##_0); \
                       c##i##_1 = _mm512_fmadd_ps(x, w1, c##i##_1); }
#define LANES_KEEP(i) _mm512_store_ps(sums + i * o->ss, c##i##_0); \
                      _mm512_store_ps(sums + i * o->ss + 16, c##i##_1);
/* A tile reads the patch rows [l0, l1) that lie in its runs (`runs`: nruns [start, end) pairs
 * of patch rows, lanes_runs; offsets and wt from the group's row 0): a tile whose patches
 * reach past the input's edge skips the taps that fall outside (a blocked input read as
 * stored, LanesJob.stored), one whose patches lie inside has one run, [0, K). */
#define LANES_RUNS_BEGIN \
    for (int64_t q = 0; q < nruns; q++) { \
        for (int64_t l = runs[2 * q], e = runs[2 * q + 1]; l < e; l++) { \
            const float *w = wt + l * LANES_MB, *row = b + offsets[l];
#define LANES_RUNS_END } }
#define LANES_TILE(R) \
static void lanes_tile##R(const float *b, const int64_t *offsets, const float *wt, \
                          const int64_t *runs, int64_t nruns, int64_t sw, float *sums, \
                          int first, int last, const LanesOut *o, int64_t p) { \
    LANES_EACH##R(LANES_START) \
    LANES_RUNS_BEGIN \
        _mm_prefetch((const char *)(w + 32 * LANES_MB), _MM_HINT_T0); \
        _mm_prefetch((const char *)(w + 32 * LANES_MB + 16), _MM_HINT_T0); \
        const __m512 w0 = _mm512_load_ps(w), w1 = _mm512_load_ps(w + 16); \
        LANES_EACH##R(LANES_FMA) \
    LANES_RUNS_END \
    LANES_EACH##R(LANES_KEEP) \
    if (last) lanes_store(sums, R, o, p); \
}
/* The same for a last block of at most 16 live channels: one vector (the block's other 16
 * columns of wt are zeros) */
#define LANES_HALF_START(i) __m512 c##i##_0 = first ? _mm512_setzero_ps() \
                                                    : _mm512_load_ps(sums + i * o->ss);
#define LANES_HALF_FMA(i) c##i##_0 = _mm512_fmadd_ps(_mm512_set1_ps(row[i * sw]), w0, c##i##_0);
#define LANES_HALF_KEEP(i) _mm512_store_ps(sums + i * o->ss, c##i##_0);
#define LANES_HALF_TILE(R) \
static void lanes_half##R(const float *b, const int64_t *offsets, const float *wt, \
                          const int64_t *runs, int64_t nruns, int64_t sw, float *sums, \
                          int first, int last, const LanesOut *o, int64_t p) { \
    LANES_EACH##R(LANES_HALF_START) \
    LANES_RUNS_BEGIN \
        _mm_prefetch((const char *)(w + 32 * LANES_MB), _MM_HINT_T0); \
        const __m512 w0 = _mm512_load_ps(w); \
        LANES_EACH##R(LANES_HALF_FMA) \
    LANES_RUNS_END \
    LANES_EACH##R(LANES_HALF_KEEP) \
    if (last) lanes_store(sums, R, o, p); \
}
LANES_HALF_TILE(1)
LANES_HALF_TILE(2)
LANES_HALF_TILE(3)
LANES_HALF_TILE(4)
LANES_HALF_TILE(5)
LANES_HALF_TILE(6)
LANES_HALF_TILE(7)
LANES_HALF_TILE(8)
LANES_HALF_TILE(9)
LANES_HALF_TILE(10)
LANES_HALF_TILE(11)
LANES_HALF_TILE(12)
LANES_HALF_TILE(13)
LANES_HALF_TILE(14)
LANES_TILE(1)
LANES_TILE(2)
LANES_TILE(3)
LANES_TILE(4)
LANES_TILE(5)
LANES_TILE(6)
LANES_TILE(7)
LANES_TILE(8)
LANES_TILE(9)
LANES_TILE(10)
LANES_TILE(11)
LANES_TILE(12)
LANES_TILE(13)
LANES_TILE(14)

/* One position's tile (an edge position of a blocked input read as stored, whose taps
 * outside the input its runs skip): 32 channels as two pairs of accumulators, alternate
 * patch rows into each, so four FMA chains hide the FMA's latency that two would wait on
 * (a last block of 16 channels computes its zero columns too: the store takes `live`). */
static void lanes_edge(const float *b, const int64_t *offsets, const float *wt,
                       const int64_t *runs, int64_t nruns, float *sums, int first, int last,
                       const LanesOut *o, int64_t p) {
    __m512 a0 = first ? _mm512_setzero_ps() : _mm512_load_ps(sums);
    __m512 a1 = first ? _mm512_setzero_ps() : _mm512_load_ps(sums + 16);
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    for (int64_t q = 0; q < nruns; q++) {
        const int64_t e = runs[2 * q + 1];
        int64_t l = runs[2 * q];
        for (; l + 1 < e; l += 2) {
            const float *w = wt + l * LANES_MB;
            const __m512 x = _mm512_set1_ps(b[offsets[l]]), y = _mm512_set1_ps(b[offsets[l + 1]]);
            a0 = _mm512_fmadd_ps(x, _mm512_load_ps(w), a0);
            a1 = _mm512_fmadd_ps(x, _mm512_load_ps(w + 16), a1);
            b0 = _mm512_fmadd_ps(y, _mm512_load_ps(w + LANES_MB), b0);
            b1 = _mm512_fmadd_ps(y, _mm512_load_ps(w + LANES_MB + 16), b1);
        }
        if (l < e) {
            const float *w = wt + l * LANES_MB;
            const __m512 x = _mm512_set1_ps(b[offsets[l]]);
            a0 = _mm512_fmadd_ps(x, _mm512_load_ps(w), a0);
            a1 = _mm512_fmadd_ps(x, _mm512_load_ps(w + 16), a1);
        }
    }
    _mm512_store_ps(sums, _mm512_add_ps(a0, b0));
    _mm512_store_ps(sums + 16, _mm512_add_ps(a1, b1));
    if (last) lanes_store(sums, 1, o, p);
}

/* The most runs a blocked input read as stored may need (a group's C / groups / 16 groups of
 * channels x KH taps' rows): past it the launch copies the input into padded planes. */
#define LANES_MAX_RUNS 1024
#define LANES_STORED_WIDTH 14

/* The runs of a group's patch rows (lanes_rows' order: one group of LANES_G channels after
 * another, in each the taps kh-major, in each the channels) whose taps have kh in [kh0, kh1)
 * and kw in [kw0, kw1), as [start, end) pairs in `runs`, adjacent ones merged; their count. */
static int64_t lanes_runs(const Shape *s, int64_t kh0, int64_t kh1, int64_t kw0, int64_t kw1,
                          int64_t l0, int64_t l1, int64_t *runs) {
    const int64_t taps = s->kh * s->kw, cg = s->c / s->groups;
    int64_t count = 0;
    for (int64_t first = 0; first < cg; first += LANES_G) {
        const int64_t width = cg - first < LANES_G ? cg - first : LANES_G, base = first * taps;
        for (int64_t kh = kh0; kh < kh1 && kw0 < kw1; kh++) {
            int64_t start = base + (kh * s->kw + kw0) * width;
            int64_t end = base + (kh * s->kw + kw1) * width;
            start = start > l0 ? start : l0;
            end = end < l1 ? end : l1;
            if (start >= end) continue;
            if (count > 0 && runs[2 * count - 1] == start) {
                runs[2 * count - 1] = end;
            } else {
                runs[2 * count] = start;
                runs[2 * count + 1] = end;
                count++;
            }
        }
    }
    return count;
}

/* The next position after `ow` outside [inner0, inner1) (the first for ow = -1): a row's or
 * column's edge positions, left then right. */
static inline int64_t lanes_next_edge(int64_t ow, int64_t inner0, int64_t inner1) {
    return ow + 1 == inner0 ? inner1 : ow + 1;
}

/* r positions' tile (lanes_tile or, for a last block of at most 16 live channels,
 * lanes_half). */
static void lanes_piece(int64_t r, int64_t live, const float *b, const int64_t *offsets,
                        const float *wt, const int64_t *runs, int64_t nruns, int64_t sw,
                        float *sums, int first, int last, const LanesOut *o, int64_t p) {
#define LANES_CALL(F, R) case R: F##R(b, offsets, wt, runs, nruns, sw, sums, first, last, o, p); \
                                break;
#define LANES_SWITCH(F) switch (r) { \
        LANES_CALL(F, 1) LANES_CALL(F, 2) LANES_CALL(F, 3) LANES_CALL(F, 4) LANES_CALL(F, 5) \
        LANES_CALL(F, 6) LANES_CALL(F, 7) LANES_CALL(F, 8) LANES_CALL(F, 9) LANES_CALL(F, 10) \
        LANES_CALL(F, 11) LANES_CALL(F, 12) LANES_CALL(F, 13) LANES_CALL(F, 14) }
    if (live <= 16) LANES_SWITCH(lanes_half)
    else LANES_SWITCH(lanes_tile)
#undef LANES_SWITCH
#undef LANES_CALL
}
#endif
