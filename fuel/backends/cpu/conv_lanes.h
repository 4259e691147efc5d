/* conv.c's lanes form (after conv_common.h, conv_gemm.h and conv_wide.h, before conv.c, whose
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
                              * and the positions whose windows cross its left or right edge
                              * run one at a time (lanes_edge) */
} LanesJob;

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

/* The taps [*lo, *hi) of a window of `taps` taps `step` apart from `start` (an input index,
 * negative in the padding) that fall inside [0, size). */
static inline void lanes_inside(int64_t start, int64_t taps, int64_t step, int64_t size,
                                int64_t *lo, int64_t *hi) {
    int64_t a = start >= 0 ? 0 : (-start + step - 1) / step;
    int64_t e = start <= size - 1 ? (size - 1 - start) / step + 1 : 0;
    a = a < taps ? a : taps;
    e = e < taps ? e : taps;
    *lo = a;
    *hi = e > a ? e : a;
}

/* The output positions [*lo, *hi) (of `count`) whose windows lie wholly inside [0, size):
 * along one axis, its pad before, stride, taps and dilation. */
static inline void lanes_within(int64_t pad, int64_t stride, int64_t taps, int64_t dilation,
                                int64_t size, int64_t count, int64_t *lo, int64_t *hi) {
    int64_t a = (pad + stride - 1) / stride;
    a = a < count ? a : count;
    const int64_t reach = size - 1 + pad - (taps - 1) * dilation;
    int64_t e = reach < 0 ? a : reach / stride + 1;
    e = e < count ? e : count;
    *lo = a;
    *hi = e > a ? e : a;
}

/* r positions' tile (lanes_tile or, for a last block of at most 16 live channels,
 * lanes_half). */
static void lanes_piece(int64_t r, int64_t live, const float *b, const int64_t *offsets,
                        const float *wt, const int64_t *runs, int64_t nruns, int64_t sw,
                        float *sums, int first, int last, const LanesOut *o, int64_t p) {
    if (live <= 16) switch (r) {
#define LANES_CASE(R) case R: lanes_half##R(b, offsets, wt, runs, nruns, sw, sums, first, last, o, \
                                            p); break;
        LANES_CASE(1) LANES_CASE(2) LANES_CASE(3) LANES_CASE(4) LANES_CASE(5) LANES_CASE(6)
        LANES_CASE(7) LANES_CASE(8) LANES_CASE(9) LANES_CASE(10) LANES_CASE(11) LANES_CASE(12)
        LANES_CASE(13) LANES_CASE(14)
#undef LANES_CASE
    } else switch (r) {
#define LANES_CASE(R) case R: lanes_tile##R(b, offsets, wt, runs, nruns, sw, sums, first, last, o, \
                                            p); break;
        LANES_CASE(1) LANES_CASE(2) LANES_CASE(3) LANES_CASE(4) LANES_CASE(5) LANES_CASE(6)
        LANES_CASE(7) LANES_CASE(8) LANES_CASE(9) LANES_CASE(10) LANES_CASE(11) LANES_CASE(12)
        LANES_CASE(13) LANES_CASE(14)
#undef LANES_CASE
    }
}

/* Unit u: image u / (blocks * parts), block u / parts % blocks (the group's output channels
 * [LANES_MB * b, + LANES_MB) for block (group, b)), output rows [oh * part / parts,
 * oh * (part + 1) / parts) for part u % parts (a linear launch: positions [plane * part /
 * parts, ...) instead). */
static void lanes_task(void *context, int64_t u) {
    const LanesJob *j = context;
    const Shape *s = j->s;
    const int64_t part = u % j->parts, block = u / j->parts % j->blocks;
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
        lanes_within(s->pl, s->sw, s->kw, s->dw, s->w, s->ow, &inner0, &inner1);
        lanes_within(s->pt, s->sh, s->kh, s->dh, s->h, s->oh, &rows0, &rows1);
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
                lanes_inside(top, s->kh, s->dh, s->h, &kh0, &kh1);
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
            for (int64_t ow = inner0 == 0 ? inner1 : 0; ow < s->ow;
                 ow = ow + 1 == inner0 ? inner1 : ow + 1) {
                const int64_t left = ow * s->sw - s->pl, p = oh * s->ow + ow;
                int64_t kw0, kw1;
                lanes_inside(left, s->kw, s->dw, s->w, &kw0, &kw1);
                const int64_t count = lanes_runs(s, kh0, kh1, kw0, kw1, l0, l1, runs);
                lanes_edge(planes + (top * s->w + left) * g, offsets, wt, runs, count,
                           one_pass ? sums : sums + p * LANES_MB, first, last, &o, p);
            }
        }
        /* the inner rows' positions past the inner columns, down each such column in pieces
         * of at most LANES_R rows */
        const int64_t pieces = (rows1 - rows0 + LANES_R - 1) / LANES_R;
        for (int64_t ow = inner0 == 0 ? inner1 : 0; j->stored && pieces > 0 && ow < s->ow;
             ow = ow + 1 == inner0 ? inner1 : ow + 1) {
            const int64_t left = ow * s->sw - s->pl;
            int64_t kw0, kw1;
            lanes_inside(left, s->kw, s->dw, s->w, &kw0, &kw1);
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
 * so one block's conversion runs on every thread (16 channels at 112x112 on one: 75 us). */
#define BLOCKING_PIECE 1024
typedef struct {
    const float *from;
    float *to;
    int64_t plane, pieces, unblock;
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
            for (int64_t i = 0; i < count; i++) _mm512_storeu_ps(to + (p0 + i) * 16, v[i]);
        }
    }
}

static void blocking(const float *from, float *to, const Shape *s, int unblock, int64_t threads) {
    const int64_t plane = s->h * s->w, blocks = s->n * (s->c / 16);
    BlockingJob j = {from, to, plane, (plane + BLOCKING_PIECE - 1) / BLOCKING_PIECE, unblock};
    run_units(blocks * j.pieces, blocks * 16 * plane >= 65536 ? threads : 1, blocking_task, &j);
}

/* The lanes form of a launch (wt: lanes_weights' transposed weights). */
static void lanes_conv(const float *x, const float *wt, float *out, const float *residual,
                       const Shape *s, const Finish *f, int64_t threads) {
    LanesJob j;
    memset(&j, 0, sizeof(j));
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
    j.parts = 1;
    while (threads > 1 && j.parts < (j.linear ? (s->oh * s->ow + 7) / 8 : s->oh)
           && (s->n * j.blocks * j.parts < LANES_UNITS * threads
               || s->n * j.blocks * j.parts % threads != 0))
        j.parts++;
    run_units(s->n * j.blocks * j.parts, threads, lanes_task, &j);
}
#endif
