/* The register-tiled GEMM the convolution forms share (after conv_common.h, before conv.c or
 * winograd.c): the micro kernels, B's packing into panels (from a matrix or straight from an
 * image: the implicit GEMM), one work unit of a GEMM with its epilogue, and the team split.
 */

/* The register tile: MR output channels x NR output positions. With AVX-512, 8 x 32 (two
 * 16-lane vectors per row; a panel of at most HALF columns runs one vector per row), else
 * AVX2's 6 x 16 (or the scalar loop). B (the patch matrix) is packed per K block into panels
 * NR (or HALF) columns wide; A (the weights) is read as stored, MR rows at a time. */
#if defined(__AVX512F__)
#define MR 8
#define NR 32
#define HALF 16
#else
#define MR 6
#define NR 16
#define HALF NR
#endif
#define KC 256
#define UNPACKED_SLIVERS 2  /* most slivers of a pointwise unit that reads b unpacked */
#define NC 512  /* most columns one work unit packs and walks */
/* Floats between two NR-column panels of kc rows: one cache line more than they hold, so a
 * row written across the panels does not land in one cache set. */
#define PANEL(kc) ((kc) * NR + 16)
/* Floats between two rows of the panel that starts at column j of a block nc wide. */
#define PANEL_ROW(nc, j) ((nc) - (j) <= HALF ? HALF : NR)

typedef struct {
    const float *bias, *slope;
    int64_t act;
    float alpha, beta;
} Finish;

/* Rows [0, rows) of the tile at c (rows ldc apart, `cols` wide): the epilogue, in place. */
static inline void finish_tile(float *c, int64_t ldc, int rows, int cols, int64_t m0,
                               const float *residual, const Finish *f) {
    if (f->act == NONE && f->bias == NULL && residual == NULL) return;
    for (int r = 0; r < rows; r++) {
        const int64_t m = m0 + r;
        finish(c + r * ldc, cols, f->bias != NULL ? f->bias[m] : 0.0f,
               residual != NULL ? residual + r * ldc : NULL, f->act, f->alpha, f->beta,
               f->slope != NULL ? f->slope[m] : 0.0f);
    }
}

#if defined(__AVX512F__)
/* The epilogue of a whole tile applied on its accumulators before the one store (at the
 * last K block), instead of finish_tile's second pass over the stored tile: the same
 * operations in the same order, so the same values (K of 16-32, the pass reloading every
 * stored vector took 9% of the 3->64 stem's time). NULL: store the sums as they are. */
typedef struct {
    const Finish *f;
    int64_t m0;               /* the tile's first output channel */
    const float *residual;    /* the tile's residual (rows ldr apart), or NULL */
    int64_t ldr;
} Epi;

static inline __attribute__((always_inline)) __m512 epi16(__m512 v, const Epi *e, int r,
                                                          int64_t offset) {
    const Finish *f = e->f;
    const int64_t m = e->m0 + r;
    v = _mm512_add_ps(v, _mm512_set1_ps(f->bias != NULL ? f->bias[m] : 0.0f));
    if (e->residual != NULL) v = _mm512_add_ps(v, _mm512_loadu_ps(e->residual + r * e->ldr + offset));
    return act16(v, f->act, f->alpha, f->beta, f->slope != NULL ? f->slope[m] : 0.0f);
}

/* The Epi of the tile at `at` (rows from m0) when this is its last K block and it has an
 * epilogue, else NULL (`e` the storage). */
static inline const Epi *tile_epi(Epi *e, int last, const Finish *f, int64_t m0,
                                  const float *residual, int64_t at, int64_t ldr) {
    if (!last || (f->act == NONE && f->bias == NULL && residual == NULL)) return NULL;
    e->f = f;
    e->m0 = m0;
    e->residual = residual != NULL ? residual + at : NULL;
    e->ldr = ldr;
    return e;
}
#define EPI(v, r, offset) (e != NULL ? epi16((v), e, (r), (offset)) : (v))
#endif

/* dst (MR rows, ldd apart, the panel's width wide) (+)= a (MR rows, row r at a[r], k long) .
 * b (k rows, bs apart): `accumulate` adds dst's values. */
#if defined(__AVX512F__)
#define MICRO_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static inline void micro_wide(int64_t k, const float *const *a, const float *restrict b,
                              float *dst, int64_t ldd, int accumulate, const Epi *e) {
    __m512 c0[MR], c1[MR];
    for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm512_setzero_ps();
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float *a6 = a[6], *a7 = a[7];
    for (int64_t l = 0; l < k; l++) {
        const float *row = b + l * NR;
        __builtin_prefetch(row + 8 * NR);
        __builtin_prefetch(row + 8 * NR + 16);
        const __m512 b0 = _mm512_load_ps(row), b1 = _mm512_load_ps(row + 16);
#define ROW(r)                                                      \
        {                                                               \
            const __m512 x = _mm512_set1_ps(a##r[l]);                   \
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);                      \
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);                      \
        }
        MICRO_ROWS(ROW)
#undef ROW
    }
    for (int r = 0; r < MR; r++) {
        float *target = dst + r * ldd;
        if (accumulate) {
            c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(target));
            c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(target + 16));
        }
        _mm512_storeu_ps(target, EPI(c0[r], r, 0));
        _mm512_storeu_ps(target + 16, EPI(c1[r], r, 16));
    }
}

/* micro_wide with b's rows read where they are stored, bs apart (unaligned; no packing): a
 * pointwise GEMM with few output channels, whose panels would be packed for one or two
 * slivers' use (128->16 1x1 at 55x55: the packing took as long as the products; batch 8,
 * two threads: 671 -> 529 us). */
static inline void micro_strided(int64_t k, const float *const *a, const float *b, int64_t bs,
                                 float *dst, int64_t ldd, int accumulate, const Epi *e) {
    __m512 c0[MR], c1[MR];
    for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm512_setzero_ps();
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float *a6 = a[6], *a7 = a[7];
    for (int64_t l = 0; l < k; l++) {
        const float *row = b + l * bs;
        __builtin_prefetch(row + 6 * bs);
        __builtin_prefetch(row + 6 * bs + 16);
        const __m512 b0 = _mm512_loadu_ps(row), b1 = _mm512_loadu_ps(row + 16);
#define ROW(r)                                                      \
        {                                                               \
            const __m512 x = _mm512_set1_ps(a##r[l]);                   \
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);                      \
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);                      \
        }
        MICRO_ROWS(ROW)
#undef ROW
    }
    for (int r = 0; r < MR; r++) {
        float *target = dst + r * ldd;
        if (accumulate) {
            c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(target));
            c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(target + 16));
        }
        _mm512_storeu_ps(target, EPI(c0[r], r, 0));
        _mm512_storeu_ps(target + 16, EPI(c1[r], r, 16));
    }
}

static inline void micro_half(int64_t k, const float *const *a, const float *restrict b,
                              float *dst, int64_t ldd, int accumulate, const Epi *e) {
    __m512 c0[MR];
    for (int r = 0; r < MR; r++) c0[r] = _mm512_setzero_ps();
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float *a6 = a[6], *a7 = a[7];
    for (int64_t l = 0; l < k; l++) {
        const float *row = b + l * HALF;
        __builtin_prefetch(row + 8 * HALF);
        const __m512 b0 = _mm512_load_ps(row);
#define ROW(r) c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(a##r[l]), b0, c0[r]);
        MICRO_ROWS(ROW)
#undef ROW
    }
    for (int r = 0; r < MR; r++) {
        float *target = dst + r * ldd;
        if (accumulate) c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(target));
        _mm512_storeu_ps(target, EPI(c0[r], r, 0));
    }
}
/* A full panel and the half panel after it as one 8 x 48 tile (three vectors a row: 24
 * accumulators, three loads and eight broadcasts for 24 multiply-adds, where the half panel
 * alone takes nine loads for eight): a block of 48 columns, e.g. a 7x7 map's first 48
 * positions, the 49th a tail dot product (512->512 3x3 at 7x7 one thread: 2660 -> 2556 us). */
static inline void micro_48(int64_t k, const float *const *a, const float *restrict b,
                            const float *restrict h, float *dst, int64_t ldd, int accumulate) {
    __m512 c0[MR], c1[MR], c2[MR];
    for (int r = 0; r < MR; r++) c0[r] = c1[r] = c2[r] = _mm512_setzero_ps();
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float *a6 = a[6], *a7 = a[7];
    for (int64_t l = 0; l < k; l++) {
        const float *row = b + l * NR, *more = h + l * HALF;
        __builtin_prefetch(row + 8 * NR);
        __builtin_prefetch(row + 8 * NR + 16);
        __builtin_prefetch(more + 8 * HALF);
        const __m512 b0 = _mm512_load_ps(row), b1 = _mm512_load_ps(row + 16);
        const __m512 b2 = _mm512_load_ps(more);
#define ROW(r)                                                      \
        {                                                               \
            const __m512 x = _mm512_set1_ps(a##r[l]);                   \
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);                      \
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);                      \
            c2[r] = _mm512_fmadd_ps(x, b2, c2[r]);                      \
        }
        MICRO_ROWS(ROW)
#undef ROW
    }
    for (int r = 0; r < MR; r++) {
        float *target = dst + r * ldd;
        if (accumulate) {
            c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(target));
            c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(target + 16));
            c2[r] = _mm512_add_ps(c2[r], _mm512_loadu_ps(target + 32));
        }
        _mm512_storeu_ps(target, c0[r]);
        _mm512_storeu_ps(target + 16, c1[r]);
        _mm512_storeu_ps(target + 32, c2[r]);
    }
}
#undef MICRO_ROWS

static inline void micro_epi(int64_t k, const float *const *a, const float *restrict b,
                             int half, float *dst, int64_t ldd, int accumulate, const Epi *e) {
    if (half) micro_half(k, a, b, dst, ldd, accumulate, e);
    else micro_wide(k, a, b, dst, ldd, accumulate, e);
}

static inline void micro(int64_t k, const float *const *a, const float *restrict b, int half,
                         float *dst, int64_t ldd, int accumulate) {
    micro_epi(k, a, b, half, dst, ldd, accumulate, NULL);
}
#else
static inline void micro(int64_t k, const float *const *a, const float *restrict b, int half,
                         float *dst, int64_t ldd, int accumulate) {
    (void)half;
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
#if defined(VECTOR)
    __m256 c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
    for (int64_t l = 0; l < k; l++) {
        __builtin_prefetch(b + l * NR + 8 * NR);
        const __m256 b0 = _mm256_loadu_ps(b + l * NR), b1 = _mm256_loadu_ps(b + l * NR + 8);
#define ROW(r, p)                                                    \
        {                                                               \
            const __m256 x = _mm256_broadcast_ss(p + l);                \
            c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);                  \
            c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);                  \
        }
        ROW(0, a0) ROW(1, a1) ROW(2, a2) ROW(3, a3) ROW(4, a4) ROW(5, a5)
#undef ROW
    }
    for (int r = 0; r < MR; r++) {
        float *target = dst + r * ldd;
        if (accumulate) {
            c[r][0] = _mm256_add_ps(c[r][0], _mm256_loadu_ps(target));
            c[r][1] = _mm256_add_ps(c[r][1], _mm256_loadu_ps(target + 8));
        }
        _mm256_storeu_ps(target, c[r][0]);
        _mm256_storeu_ps(target + 8, c[r][1]);
    }
#else
    (void)a0; (void)a1; (void)a2; (void)a3; (void)a4; (void)a5;
    float acc[MR * NR];
    for (int i = 0; i < MR * NR; i++) acc[i] = 0.0f;
    for (int64_t l = 0; l < k; l++)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r * NR + j] += a[r][l] * b[l * NR + j];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            dst[r * ldd + j] = acc[r * NR + j] + (accumulate ? dst[r * ldd + j] : 0.0f);
#endif
}
#endif

/* b[l0:l0+kc, n0:n0+nc] (rows ldb apart) into panels (PANEL_ROW wide), zero padded. Row by
 * row, each row's span read front to back and the span PACK_AHEAD rows on prefetched: a
 * pointwise convolution's rows are channel planes far apart, and a panel-major walk (two
 * cache lines of every row, then the next two) left every read a miss the hardware
 * prefetcher does not follow (256->32 1x1 at 27x27, batch 8, two threads: 539 -> 514 us). */
#define PACK_AHEAD 4
static void pack_b(const float *b, int64_t ldb, int64_t l0, int64_t kc, int64_t n0, int64_t nc,
                   float *packed) {
    for (int64_t l = 0; l < kc; l++) {
        const float *source = b + (l0 + l) * ldb + n0;
        if (l + PACK_AHEAD < kc)
            for (int64_t t = 0; t < nc; t += 16) __builtin_prefetch(source + PACK_AHEAD * ldb + t);
        for (int64_t j = 0; j < nc; j += NR) {
            float *target = packed + (j / NR) * PANEL(kc) + l * PANEL_ROW(nc, j);
            const int64_t width = nc - j < NR ? nc - j : NR, row = PANEL_ROW(nc, j);
            if (width == NR) memcpy(target, source + j, sizeof(float) * NR);
            else {
                for (int64_t t = 0; t < width; t++) target[t] = source[j + t];
                for (int64_t t = width; t < row; t++) target[t] = 0.0f;
            }
        }
    }
}

/* The patch matrix's rows [l0, l0 + kc) and columns [n0, n0 + nc) built straight from the
 * image (x: one image and group, s->c its channels) into panels: the implicit GEMM, no patch
 * matrix in memory. */
static void pack_b_conv(const float *x, const Shape *s, int64_t l0, int64_t kc, int64_t n0,
                        int64_t nc, float *packed) {
    const int64_t taps = s->kh * s->kw, stride = PANEL(kc);
    const int64_t tail = nc - (nc - 1) / NR * NR;  /* the last panel's columns */
    const int64_t last_row = tail <= HALF ? HALF : NR;
    const int64_t last_panel = (nc - 1) / NR;
    for (int64_t l = 0; l < kc; l++) {
        const int64_t index = l0 + l, c = index / taps, kh = (index % taps) / s->kw;
        const int64_t kw = index % s->kw;
        const float *plane = x + c * s->h * s->w;
        const int64_t off = kw * s->dw - s->pl;
        int64_t lo, hi;  /* output columns ow with 0 <= ow * sw + off < W */
        inside_span(off, s->sw, s->ow, s->w, &lo, &hi);
        int64_t oh = n0 / s->ow, ow = n0 % s->ow, j = 0;
        while (j < nc) {
            const int64_t end = s->ow - ow < nc - j ? s->ow : ow + (nc - j);
            const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
            const int valid = ih >= 0 && ih < s->h;
            const float *source = plane + ih * s->w + off;
            for (int64_t col = ow; col < end;) {
                /* up to the panel's end, within one of the zero / copy / zero ranges */
                const int64_t jj = j + (col - ow), lane = jj % NR, p = jj / NR;
                int64_t stop = col + (NR - lane);
                if (stop > end) stop = end;
                float *target = packed + p * stride + l * (p == last_panel ? last_row : NR)
                                + lane;
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
#if defined(__AVX512F__)
                else if (s->sw == 2)  /* the even elements, 16 at a time (masked loads) */
                    for (int64_t t = col; t < stop; t += 16) {
                        const int64_t count = stop - t < 16 ? stop - t : 16;
                        const int64_t reads = 2 * count - 1;  /* up to the last even one */
                        const __mmask16 low = reads >= 16 ? (__mmask16)0xFFFF
                                                          : (__mmask16)((1u << reads) - 1);
                        const __mmask16 high = reads <= 16 ? 0
                                                           : (__mmask16)((1u << (reads - 16)) - 1);
                        const __m512 even = _mm512_permutex2var_ps(
                            _mm512_maskz_loadu_ps(low, source + 2 * t),
                            _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                             2, 0),
                            _mm512_maskz_loadu_ps(high, source + 2 * t + 16));
                        _mm512_mask_storeu_ps(target + (t - col),
                                              (__mmask16)((1u << count) - 1), even);
                    }
#endif
                else
                    for (int64_t t = col; t < stop; t++) target[t - col] = source[t * s->sw];
                col = stop;
            }
            j += end - ow;
            ow = 0;
            oh++;
        }
        for (int64_t t = tail; t < last_row; t++)
            packed[last_panel * stride + l * last_row + t] = 0.0f;
    }
}

#if defined(__AVX512F__)
/* A block's last few columns (past its last whole 16-column panel: TAIL at most, e.g. the
 * 49th position of a 7x7 map, which a panel would carry in 16 lanes for one) as dot products
 * over k: the columns' patch values packed (`panel`, HALF wide) and transposed into
 * `columns` (t rows of kp floats, zero padded), then each weight row dotted with each column,
 * four rows at a time; T (the columns) is a constant in each expansion. */
#define TAIL 4
static inline __attribute__((always_inline)) void tail_dots(
        const float *weights, const float *columns, int64_t k, int64_t kp, float *c,
        int64_t ldc, int64_t r0, int64_t r1, const int T) {
    const __mmask16 last = k % 16 ? (__mmask16)((1u << (k % 16)) - 1) : (__mmask16)0xFFFF;
    for (int64_t i = r0; i < r1; i += 4) {
        const int rows = r1 - i < 4 ? (int)(r1 - i) : 4;
        const float *w[4];
        for (int r = 0; r < 4; r++) w[r] = weights + (i + (r < rows ? r : rows - 1)) * k;
        __m512 acc[4][TAIL];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) acc[r][j] = _mm512_setzero_ps();
        for (int64_t l = 0; l < kp; l += 16) {
            const __mmask16 keep = l + 16 <= k ? (__mmask16)0xFFFF : last;
            __m512 x[TAIL];
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) x[j] = _mm512_load_ps(columns + j * kp + l);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m512 a = _mm512_maskz_loadu_ps(keep, w[r] + l);
#pragma GCC unroll 4
                for (int j = 0; j < T; j++) acc[r][j] = _mm512_fmadd_ps(a, x[j], acc[r][j]);
            }
        }
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) c[(i + r) * ldc + j] = _mm512_reduce_add_ps(acc[r][j]);
    }
}

static void tail_columns(const float *weights, const float *b, int64_t ldb, const Shape *conv,
                         float *c, int64_t ldc, const float *residual, int64_t m, int64_t k,
                         int64_t n0, int64_t t, int64_t r0, int64_t r1, float *panel,
                         const Finish *f) {
    const int64_t kp = (k + 15) / 16 * 16;
    float *columns = thread_buffer(3, (size_t)(t * kp));
    for (int64_t l0 = 0; l0 < k; l0 += KC) {
        const int64_t kc = k - l0 < KC ? k - l0 : KC;
        if (conv != NULL) pack_b_conv(b, conv, l0, kc, n0, t, panel);
        else pack_b(b, ldb, l0, kc, n0, t, panel);
        for (int64_t l = 0; l < kc; l++)
            for (int64_t j = 0; j < t; j++) columns[j * kp + l0 + l] = panel[l * HALF + j];
    }
    for (int64_t j = 0; j < t; j++)
        for (int64_t l = k; l < kp; l++) columns[j * kp + l] = 0.0f;
    if (r1 > m) r1 = m;
    switch (t) {
    case 1: tail_dots(weights, columns, k, kp, c + n0, ldc, r0, r1, 1); break;
    case 2: tail_dots(weights, columns, k, kp, c + n0, ldc, r0, r1, 2); break;
    case 3: tail_dots(weights, columns, k, kp, c + n0, ldc, r0, r1, 3); break;
    default: tail_dots(weights, columns, k, kp, c + n0, ldc, r0, r1, 4);
    }
    for (int64_t i = r0; i < r1; i += MR) {
        const int rows = r1 - i < MR ? (int)(r1 - i) : MR;
        finish_tile(c + i * ldc + n0, ldc, rows, (int)t, i,
                    residual != NULL ? residual + i * ldc + n0 : NULL, f);
    }
}
#endif

/* c[m x n] (+)= weights (m x k, row-major) . b[k x n] for the columns [n0, n0 + nc) and sliver rows
 * [s0, s1), the epilogue at the last K block; `prepacked` (or NULL): every K block's panels of
 * those columns, packed beforehand, kstride floats apart. */
static void gemm_unit(const float *weights, const float *b, int64_t ldb, const Shape *conv,
                      float *c, int64_t ldc, const float *residual, int64_t m, int64_t k,
                      int64_t n0, int64_t nc, int64_t s0, int64_t s1, float *panel,
                      const Finish *f, const float *prepacked, int64_t kstride) {
    float acc[MR * NR];
    int64_t tail = 0;
#if defined(__AVX512F__)
    /* one to TAIL columns past the block's whole 16-column panels run as dot products (a
     * 7x7 map: 160->960 1x1 183 -> 150 us, one thread) */
    if (nc > HALF && nc % HALF <= TAIL) tail = nc % HALF;
    nc -= tail;
#endif
    /* a pointwise unit of at most UNPACKED_SLIVERS slivers reads its whole NR-column panels
     * straight from b (micro_strided); only the columns after them are packed */
    int64_t packed_from = 0;
#if defined(__AVX512F__)
    if (conv == NULL && s1 - s0 <= UNPACKED_SLIVERS && prepacked == NULL)
        packed_from = nc / NR * NR;
#endif
    for (int64_t l0 = 0; l0 < k; l0 += KC) {
        const int64_t kc = k - l0 < KC ? k - l0 : KC;
        /* this K block's panels: packed by the launch beforehand (shared by the units that
         * split the output channels), else here */
        const float *packed = prepacked != NULL ? prepacked + (l0 / KC) * kstride : panel;
        if (prepacked == NULL) {
            if (conv != NULL) pack_b_conv(b, conv, l0, kc, n0, nc, panel);
            else if (packed_from < nc)
                pack_b(b, ldb, l0, kc, n0 + packed_from, nc - packed_from, panel);
        }
        const int last = l0 + kc >= k;
        for (int64_t s = s0; s < s1; s++) {
            const int64_t i0 = s * MR;
            const int rows = m - i0 < MR ? (int)(m - i0) : MR;
            const float *a[MR];  /* rows past m repeat the last one; their sums are dropped */
            for (int r = 0; r < MR; r++) a[r] = weights + (i0 + (r < rows ? r : rows - 1)) * k + l0;
            /* the next sliver's weights, read from memory while this one computes (a
             * model's weights are not in cache: 160->960 1x1 at 7x7 in mobilenet_v2 took
             * 240 us against 183 with them in cache) */
            if (s + 1 < s1) {
                const int64_t next = i0 + MR, ahead = m - next < MR ? m - next : MR;
                for (int64_t r = 0; r < ahead; r++)
                    for (int64_t t = 0; t < kc; t += 16)
                        __builtin_prefetch(weights + (next + r) * k + l0 + t);
            }
            for (int64_t j = 0; j < nc; j += NR) {
#if defined(__AVX512F__)
                if (j < packed_from) {
                    const int64_t at = i0 * ldc + n0 + j;
                    float *target = rows == MR ? c + at : acc;
                    Epi e;
                    const Epi *ep = rows == MR ? tile_epi(&e, last, f, i0, residual, at, ldc)
                                               : NULL;
                    micro_strided(kc, a, b + l0 * ldb + n0 + j, ldb, target,
                                  rows == MR ? ldc : NR, rows == MR && l0 > 0, ep);
                    if (rows < MR)
                        for (int r = 0; r < rows; r++) {
                            float *row = c + at + r * ldc;
                            if (l0 > 0)
                                for (int t = 0; t < NR; t++) row[t] += acc[r * NR + t];
                            else
                                memcpy(row, acc + r * NR, sizeof(float) * NR);
                        }
                    if (last && ep == NULL)
                        finish_tile(c + at, ldc, rows, NR, i0,
                                    residual != NULL ? residual + at : NULL, f);
                    continue;
                }
                if (rows == MR && nc - j == NR + HALF) {  /* the last 48 columns as one tile */
                    const int64_t at = i0 * ldc + n0 + j;
                    const float *b_panel = packed + ((j - packed_from) / NR) * PANEL(kc);
                    micro_48(kc, a, b_panel, b_panel + PANEL(kc), c + at, ldc, l0 > 0);
                    if (last)
                        finish_tile(c + at, ldc, rows, NR + HALF, i0,
                                    residual != NULL ? residual + at : NULL, f);
                    break;
                }
#endif
                const int cols = nc - j < NR ? (int)(nc - j) : NR;
                const int half = PANEL_ROW(nc, j) == HALF && HALF < NR;
                const int width = half ? HALF : NR;
                const int64_t at = i0 * ldc + n0 + j;
                const float *b_panel = packed + ((j - packed_from) / NR) * PANEL(kc);
                int finished = 0;
                if (rows == MR && cols == width) {
#if defined(__AVX512F__)
                    Epi e;
                    const Epi *ep = tile_epi(&e, last, f, i0, residual, at, ldc);
                    micro_epi(kc, a, b_panel, half, c + at, ldc, l0 > 0, ep);
                    finished = ep != NULL;
#else
                    micro(kc, a, b_panel, half, c + at, ldc, l0 > 0);
#endif
                } else {
                    micro(kc, a, b_panel, half, acc, NR, 0);
                    for (int r = 0; r < rows; r++) {
                        float *target = c + at + r * ldc;
                        const float *values = acc + r * NR;
                        if (l0 > 0)
                            for (int t = 0; t < cols; t++) target[t] += values[t];
                        else
                            memcpy(target, values, sizeof(float) * cols);
                    }
                }
                if (last && !finished)
                    finish_tile(c + at, ldc, rows, cols, i0,
                                residual != NULL ? residual + at : NULL, f);
            }
        }
    }
#if defined(__AVX512F__)
    if (tail)
        tail_columns(weights, b, ldb, conv, c, ldc, residual, m, k, n0 + nc, tail, s0 * MR,
                     s1 * MR, panel, f);
#endif
}

/* The column block width and the number of row blocks for a GEMM of `slivers` MR-row
 * slivers and `plane` columns on `threads` threads: column blocks of at most NC columns (a
 * multiple of NR), their count rounded up to a multiple of the team so the units split
 * evenly; a plane too narrow for every thread splits the slivers instead. */
static void split_units(int64_t plane, int64_t slivers, int64_t threads, int64_t *nc_out,
                        int64_t *column_blocks, int64_t *row_blocks) {
    int64_t blocks = (plane + NC - 1) / NC;
    if (threads > 1 && blocks % threads && plane >= threads * NR)
        blocks += threads - blocks % threads;
    int64_t nc = (plane + blocks - 1) / blocks;
    nc = (nc + NR - 1) / NR * NR;
    blocks = (plane + nc - 1) / nc;
    int64_t rows = 1;
    if (blocks < threads) {
        rows = (threads + blocks - 1) / blocks;
        if (rows > slivers) rows = slivers;
    }
    *nc_out = nc;
    *column_blocks = blocks;
    *row_blocks = rows;
}

