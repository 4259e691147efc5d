/* float32 3x3 stride-1 convolution by Winograd's F(2x2, 3x3) (after conv_common.h and
 * conv_gemm.h; convolution_c.py's ``winograd`` form drives it). Dense NCHW, groups 1,
 * dilation 1, any padding; a launch covers the whole batch.
 *
 * Entry: fuel_kernel(data, sizes, strides): data and sizes as conv.c's (sizes[0] = 9);
 * scratch holds 16 * (M * C + 16) floats, the transformed weights. sizes[0] = 12 only
 * transforms the weights into scratch; sizes[0] = 11 is the convolution with scratch holding
 * them already (a model's constant weights, transformed once when its launch is prepared).
 *
 * Per launch the weights are transformed, U[xi][m][c] = (G g[m, c] G^T)[xi] (G the 4 x 3
 * filter transform), 8 output channels a unit of run_units' pool. The output is cut into
 * 2 x 2 tiles, the tiles into chunks of whole tile rows, and each unit is a chunk: the input
 * tiles transformed, V[xi][c][t] = (B^T d[c, t] B)[xi], written straight into the GEMM's
 * NR-column panels; 16 GEMMs Mx[xi] = U[xi] . V[xi] on the register tile (2.25x fewer
 * multiply-adds than the direct form's); the inverse transform A^T Mx A writes the 2 x 2
 * outputs, then the epilogue (bias, residual, activation) runs on the chunk's output rows
 * while they are in cache.
 */

enum { WINOGRAD = 9, WINOGRAD_READY = 11, WINOGRAD_WEIGHTS = 12 };
/* Floats between two xi's matrices holding `floats`: one cache line more, so the 16 streams a
 * transform writes do not share cache sets when `floats` is a power of two. */
#define XI_STRIDE(floats) ((floats) + 16)

/* U[xi][m][c] for the rows m in [m0, m1): w is M x C x 3 x 3. Channels 64 at a time, so
 * each of the 16 outputs is one vector expression over them. */
#define WEIGHT_BLOCK 64
static void transform_weights(const float *w, float *u, int64_t m_count, int64_t c_count,
                              int64_t m0, int64_t m1) {
    const int64_t stride = XI_STRIDE(m_count * c_count);
    float g[9][WEIGHT_BLOCK], t[4][3][WEIGHT_BLOCK];
    for (int64_t m = m0; m < m1; m++)
        for (int64_t c0 = 0; c0 < c_count; c0 += WEIGHT_BLOCK) {
            const int64_t count = c_count - c0 < WEIGHT_BLOCK ? c_count - c0 : WEIGHT_BLOCK;
            const float *source = w + (m * c_count + c0) * 9;
            for (int64_t c = 0; c < count; c++)
                for (int j = 0; j < 9; j++) g[j][c] = source[c * 9 + j];
            for (int j = 0; j < 3; j++)  /* G g */
                for (int64_t c = 0; c < count; c++) {
                    const float g0 = g[j][c], g1 = g[3 + j][c], g2 = g[6 + j][c];
                    t[0][j][c] = g0;
                    t[1][j][c] = 0.5f * (g0 + g1 + g2);
                    t[2][j][c] = 0.5f * (g0 - g1 + g2);
                    t[3][j][c] = g2;
                }
            float *target = u + m * c_count + c0;
            for (int i = 0; i < 4; i++) {  /* (G g) G^T */
                float *u0 = target + (i * 4) * stride, *u1 = target + (i * 4 + 1) * stride;
                float *u2 = target + (i * 4 + 2) * stride, *u3 = target + (i * 4 + 3) * stride;
                for (int64_t c = 0; c < count; c++) {
                    const float r0 = t[i][0][c], r1 = t[i][1][c], r2 = t[i][2][c];
                    u0[c] = r0;
                    u1[c] = 0.5f * (r0 + r1 + r2);
                    u2[c] = 0.5f * (r0 - r1 + r2);
                    u3[c] = r2;
                }
            }
        }
}
#undef WEIGHT_BLOCK

/* The input transform of tile rows [th0, th1) of one image (x: C planes) into v, laid out
 * [xi][panel][c][lane] (panels of NR tiles, `panels` of them, tiles past the chunk zero).
 * `row` is a scratch of 4 * (2 * TW + 2) floats. */
static void transform_input(const float *x, const Shape *s, int64_t tw_count, int64_t th0,
                            int64_t th1, int64_t panels, float *v, float *row) {
    const int64_t width = 2 * tw_count + 2;
    float *padded = row;
    const int64_t xi_stride = XI_STRIDE(panels * s->c * NR);
    /* the columns of a padded row that come from the image: [lo, hi) */
    int64_t lo = s->pl < width ? s->pl : width, hi = s->pl + s->w;
    if (hi > width) hi = width;
    if (hi < lo) hi = lo;
    for (int64_t c = 0; c < s->c; c++) {
        const float *plane = x + c * s->h * s->w;
        for (int64_t th = th0; th < th1; th++) {
            /* the 4 input rows of this tile row, zero padded */
            for (int r = 0; r < 4; r++) {
                float *target = padded + r * width;
                const int64_t ih = 2 * th - s->pt + r;
                if (ih < 0 || ih >= s->h) {
                    memset(target, 0, sizeof(float) * width);
                    continue;
                }
                for (int64_t j = 0; j < lo; j++) target[j] = 0.0f;
                memcpy(target + lo, plane + ih * s->w + (lo - s->pl), sizeof(float) * (hi - lo));
                for (int64_t j = hi; j < width; j++) target[j] = 0.0f;
            }
            const int64_t t0 = (th - th0) * tw_count;
            for (int64_t tw0 = 0; tw0 < tw_count; tw0 += NR) {
                const int64_t count = tw_count - tw0 < NR ? tw_count - tw0 : NR;
                float h[4][4][NR];  /* [row r][j][tile]: d B along row r */
                for (int r = 0; r < 4; r++) {
                    const float *p = padded + r * width + 2 * tw0;
                    int64_t i = 0;
#if defined(__AVX512F__)
                    /* 16 tiles a step: their columns 2i .. 2i + 3 from three loads (masked
                     * to the padded row), split into even and odd lanes */
                    for (; i < count; i += 16) {
                        const int64_t left = width - 2 * tw0 - 2 * i;  /* floats from p + 2i */
                        const __mmask16 m0 = left >= 16 ? (__mmask16)0xFFFF
                                                        : (__mmask16)((1u << left) - 1);
                        const __mmask16 m1 = left >= 32 ? (__mmask16)0xFFFF : left <= 16 ? 0
                                             : (__mmask16)((1u << (left - 16)) - 1);
                        const __mmask16 m2 = left >= 48 ? (__mmask16)0xFFFF : left <= 32 ? 0
                                             : (__mmask16)((1u << (left - 32)) - 1);
                        const __m512 l0 = _mm512_maskz_loadu_ps(m0, p + 2 * i);
                        const __m512 l1 = _mm512_maskz_loadu_ps(m1, p + 2 * i + 16);
                        const __m512 l2 = _mm512_maskz_loadu_ps(m2, p + 2 * i + 32);
                        const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16,
                                                               14, 12, 10, 8, 6, 4, 2, 0);
                        const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
                        const __m512 s0 = _mm512_castsi512_ps(_mm512_alignr_epi32(
                            _mm512_castps_si512(l1), _mm512_castps_si512(l0), 2));
                        const __m512 s1 = _mm512_castsi512_ps(_mm512_alignr_epi32(
                            _mm512_castps_si512(l2), _mm512_castps_si512(l1), 2));
                        const __m512 a = _mm512_permutex2var_ps(l0, evens, l1);
                        const __m512 b = _mm512_permutex2var_ps(l0, odds, l1);
                        const __m512 c2 = _mm512_permutex2var_ps(s0, evens, s1);
                        const __m512 d = _mm512_permutex2var_ps(s0, odds, s1);
                        _mm512_storeu_ps(h[r][0] + i, _mm512_sub_ps(a, c2));
                        _mm512_storeu_ps(h[r][1] + i, _mm512_add_ps(b, c2));
                        _mm512_storeu_ps(h[r][2] + i, _mm512_sub_ps(c2, b));
                        _mm512_storeu_ps(h[r][3] + i, _mm512_sub_ps(b, d));
                    }
#endif
                    for (; i < count; i++) {
                        const float a = p[2 * i], b = p[2 * i + 1], c2 = p[2 * i + 2];
                        const float d = p[2 * i + 3];
                        h[r][0][i] = a - c2;
                        h[r][1][i] = b + c2;
                        h[r][2][i] = c2 - b;
                        h[r][3][i] = b - d;
                    }
                }
                /* B^T (.) down the column (rows 0 - 2, 1 + 2, 2 - 1, 1 - 3), written by
                 * runs of tiles within one panel */
                for (int64_t i0 = 0; i0 < count;) {
                    const int64_t t = t0 + tw0 + i0, lane = t % NR;
                    const int64_t run = count - i0 < NR - lane ? count - i0 : NR - lane;
                    float *base = v + ((t / NR) * s->c + c) * NR + lane;
                    for (int j = 0; j < 4; j++) {
                        const float *r0 = h[0][j] + i0, *r1 = h[1][j] + i0;
                        const float *r2 = h[2][j] + i0, *r3 = h[3][j] + i0;
                        float *v0 = base + j * xi_stride, *v1 = base + (4 + j) * xi_stride;
                        float *v2 = base + (8 + j) * xi_stride, *v3 = base + (12 + j) * xi_stride;
                        for (int64_t i = 0; i < run; i++) {
                            v0[i] = r0[i] - r2[i];
                            v1[i] = r1[i] + r2[i];
                            v2[i] = r2[i] - r1[i];
                            v3[i] = r1[i] - r3[i];
                        }
                    }
                    i0 += run;
                }
            }
        }
        /* the last panel's lanes past the chunk's tiles */
        const int64_t tiles = (th1 - th0) * tw_count;
        for (int64_t t = tiles; t < panels * NR; t++)
            for (int xi = 0; xi < 16; xi++)
                v[xi * xi_stride + ((t / NR) * s->c + c) * NR + t % NR] = 0.0f;
    }
}

/* Mx[xi] (mp x panels * NR, rows past M computed from the last row and never read) =
 * U[xi] (M x C) . V[xi] for every xi, the rows [m0, m1) (m0 a multiple of MR). */
static void winograd_gemms(const float *u, const float *v, float *mx, int64_t m_count,
                           int64_t c_count, int64_t mp, int64_t panels, int64_t m0,
                           int64_t m1) {
    const int64_t ld = panels * NR;
    for (int xi = 0; xi < 16; xi++) {
        const float *weights = u + xi * XI_STRIDE(m_count * c_count);
        const float *b = v + xi * XI_STRIDE(panels * c_count * NR);
        float *c = mx + xi * XI_STRIDE(mp * ld);
        for (int64_t l0 = 0; l0 < c_count; l0 += KC) {
            const int64_t kc = c_count - l0 < KC ? c_count - l0 : KC;
            for (int64_t i0 = m0; i0 < m1; i0 += MR) {
                const float *a[MR];
                for (int r = 0; r < MR; r++) {
                    const int64_t m = i0 + r < m_count ? i0 + r : m_count - 1;
                    a[r] = weights + m * c_count + l0;
                }
                for (int64_t p = 0; p < panels; p++)
                    micro(kc, a, b + (p * c_count + l0) * NR, 0, c + i0 * ld + p * NR, ld,
                          l0 > 0);
            }
        }
    }
}

/* A^T Mx A for tile rows [th0, th1) and output channels [m0, m1) into the output rows, then
 * the epilogue on them. */
static void transform_output(const float *mx, float *out, const float *residual,
                             const Shape *s, const Finish *f, int64_t tw_count, int64_t th0,
                             int64_t th1, int64_t mp, int64_t panels, int64_t m0,
                             int64_t m1) {
    const int64_t ld = panels * NR, xi_stride = XI_STRIDE(mp * ld), plane = s->oh * s->ow;
    const int64_t row0 = 2 * th0, row1 = 2 * th1 < s->oh ? 2 * th1 : s->oh;
    const int odd = s->ow % 2;
    for (int64_t m = m0; m < m1; m++) {
        float *target = out + m * plane;
        const float *base = mx + m * ld;
        for (int64_t th = th0; th < th1; th++) {
            const int64_t t0 = (th - th0) * tw_count, y = 2 * th;
            const int two_rows = y + 1 < s->oh;
            for (int64_t tw0 = 0; tw0 < tw_count; tw0 += NR) {
                const int64_t count = tw_count - tw0 < NR ? tw_count - tw0 : NR;
                const float *q = base + t0 + tw0;
                float s0[4][NR], s1[4][NR], y0[2][NR], y1[2][NR];
                for (int j = 0; j < 4; j++) {
                    const float *a0 = q + j * xi_stride, *a1 = q + (4 + j) * xi_stride;
                    const float *a2 = q + (8 + j) * xi_stride, *a3 = q + (12 + j) * xi_stride;
                    for (int64_t i = 0; i < count; i++) {
                        s0[j][i] = a0[i] + a1[i] + a2[i];
                        s1[j][i] = a1[i] - a2[i] - a3[i];
                    }
                }
                for (int64_t i = 0; i < count; i++) {
                    y0[0][i] = s0[0][i] + s0[1][i] + s0[2][i];
                    y0[1][i] = s0[1][i] - s0[2][i] - s0[3][i];
                    y1[0][i] = s1[0][i] + s1[1][i] + s1[2][i];
                    y1[1][i] = s1[1][i] - s1[2][i] - s1[3][i];
                }
                /* the last tile of an odd-width row has one column */
                const int64_t whole = tw0 + count == tw_count && odd ? count - 1 : count;
                float *o = target + y * s->ow + 2 * tw0;
#if defined(__AVX512F__)
                /* the two columns of 16 tiles interleaved (two permutes), stored masked to
                 * the row's outputs */
                {
                    const int64_t outputs = 2 * whole + (whole < count);
                    const __m512i low = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18,
                                                         2, 17, 1, 16, 0);
                    const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
                    for (int row = 0; row < 1 + two_rows; row++) {
                        float (*pair)[NR] = row ? y1 : y0;
                        float *line = o + row * s->ow;
                        for (int64_t i = 0; i < count; i += 16) {
                            const int64_t left = outputs - 2 * i;
                            const __mmask16 k0 = left >= 16 ? (__mmask16)0xFFFF
                                                             : (__mmask16)((1u << left) - 1);
                            const __mmask16 k1 = left >= 32 ? (__mmask16)0xFFFF : left <= 16 ? 0
                                                 : (__mmask16)((1u << (left - 16)) - 1);
                            const __m512 a = _mm512_loadu_ps(pair[0] + i);
                            const __m512 b = _mm512_loadu_ps(pair[1] + i);
                            _mm512_mask_storeu_ps(line + 2 * i, k0,
                                                  _mm512_permutex2var_ps(a, low, b));
                            _mm512_mask_storeu_ps(line + 2 * i + 16, k1,
                                                  _mm512_permutex2var_ps(a, high, b));
                        }
                    }
                    continue;
                }
#endif
                for (int64_t i = 0; i < whole; i++) {
                    o[2 * i] = y0[0][i];
                    o[2 * i + 1] = y0[1][i];
                }
                if (whole < count) o[2 * whole] = y0[0][whole];
                if (two_rows) {
                    o += s->ow;
                    for (int64_t i = 0; i < whole; i++) {
                        o[2 * i] = y1[0][i];
                        o[2 * i + 1] = y1[1][i];
                    }
                    if (whole < count) o[2 * whole] = y1[0][whole];
                }
            }
        }
        const int64_t at = m * plane + row0 * s->ow, count = (row1 - row0) * s->ow;
        if (f->act != NONE || f->bias != NULL || residual != NULL)
            finish(out + at, count, f->bias != NULL ? f->bias[m] : 0.0f,
                   residual != NULL ? residual + at : NULL, f->act, f->alpha, f->beta,
                   f->slope != NULL ? f->slope[m] : 0.0f);
    }
}

typedef struct {
    const float *x, *w;
    float *out;
    const float *residual;
    float *u;
    const Shape *s;
    const Finish *f;
    int64_t tw_count, th_count, rows, chunks, panels, mp, plane, weight_units, m_blocks;
} WinogradJob;

/* Unit i of the weights' transform: output channels [8 i, 8 i + 8). */
static void weight_task(void *context, int64_t i) {
    const WinogradJob *j = context;
    const int64_t m0 = 8 * i, m1 = m0 + 8 < j->s->m ? m0 + 8 : j->s->m;
    transform_weights(j->w, j->u, j->s->m, j->s->c, m0, m1);
}

/* Unit i: one chunk of tile rows of one image and one block of output channels, from input
 * to epilogue (each block of a chunk transforms the chunk's input again). */
static void chunk_task(void *context, int64_t unit) {
    const WinogradJob *j = context;
    const Shape *s = j->s;
    const int64_t block = unit % j->m_blocks, slivers = j->mp / MR;
    const int64_t m0 = slivers * block / j->m_blocks * MR;
    int64_t m1 = slivers * (block + 1) / j->m_blocks * MR;
    if (m1 > s->m) m1 = s->m;
    unit /= j->m_blocks;
    float *v = thread_buffer(0, (size_t)(16 * XI_STRIDE(j->panels * s->c * NR)));
    float *mx = thread_buffer(1, (size_t)(16 * XI_STRIDE(j->mp * j->panels * NR)));
    float *row = thread_buffer(2, (size_t)(4 * (2 * j->tw_count + 2)));
    const int64_t image = unit / j->chunks, th0 = (unit % j->chunks) * j->rows;
    const int64_t th1 = th0 + j->rows < j->th_count ? th0 + j->rows : j->th_count;
    const float *source = j->x + image * s->c * s->h * s->w;
    transform_input(source, s, j->tw_count, th0, th1, j->panels, v, row);
    winograd_gemms(j->u, v, mx, s->m, s->c, j->mp, j->panels, m0, m1);
    transform_output(mx, j->out + image * s->m * j->plane,
                     j->residual != NULL ? j->residual + image * s->m * j->plane : NULL, s,
                     j->f, j->tw_count, th0, th1, j->mp, j->panels, m0, m1);
}

static void winograd_conv(const float *x, const float *w, float *out, const float *residual,
                          float *u, const Shape *s, const Finish *f, int64_t threads,
                          int64_t form) {
    const int64_t tw_count = (s->ow + 1) / 2, th_count = (s->oh + 1) / 2;
    const int64_t mp = (s->m + MR - 1) / MR * MR;
    /* tiles per chunk: its transformed tiles and products (16 x (C + M) floats a tile) about
     * 1 MiB, from 2 to 8 panels */
    int64_t tiles = (1 << 18) / (16 * (s->c + mp));
    if (tiles < 2 * NR) tiles = 2 * NR;
    if (tiles > 8 * NR) tiles = 8 * NR;
    int64_t rows = (tiles + tw_count - 1) / tw_count;
    /* within a quarter of that, the row count whose tiles pad the fewest panel lanes */
    int64_t best = rows, waste = -1;
    for (int64_t r = (3 * rows + 3) / 4; r <= rows + rows / 4 && r <= th_count; r++) {
        const int64_t pad = ((r * tw_count + NR - 1) / NR * NR - r * tw_count) * 64 / r;
        if (waste < 0 || pad < waste) best = r, waste = pad;
    }
    rows = best;
    if (rows > th_count) rows = th_count;
    const int64_t chunks = (th_count + rows - 1) / rows;
    const int64_t panels = (rows * tw_count + NR - 1) / NR;
    const int64_t plane = s->oh * s->ow;
    /* too few chunks for the team: blocks of output channels split each chunk (a plane of
     * a few tile rows would otherwise be cut into panels of a few tiles each) */
    int64_t m_blocks = 1;
    if (threads > 1 && s->n * chunks < 2 * threads) {
        /* the fewest blocks (each transforms the chunk's input again) that give every
         * thread as many units (two threads, 256->256 at 14x14: 1104 us against 1604 with
         * twice the team's units) */
        while ((s->n * chunks * m_blocks) % threads != 0 || s->n * chunks * m_blocks < threads)
            m_blocks++;
        if (m_blocks > mp / MR) m_blocks = mp / MR;
    }
    WinogradJob j = {x, w, out, residual, u, s, f, tw_count, th_count, rows, chunks, panels,
                     mp, plane, (s->m + 7) / 8, m_blocks};
    if (form != WINOGRAD_READY) run_units(j.weight_units, threads, weight_task, &j);
    if (form != WINOGRAD_WEIGHTS) run_units(s->n * chunks * m_blocks, threads, chunk_task, &j);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (pool_share(data, sizes)) return;
    const int64_t threads = sizes[1] > 1 ? sizes[1] : 1;
    const Shape s = shape_of(sizes);
    const float *scalars = data[6];
    const Finish f = {data[2], data[5], s.act, scalars != NULL ? scalars[0] : 0.0f,
                      scalars != NULL ? scalars[1] : 0.0f};
    winograd_conv(data[0], data[1], data[4], data[3], data[7], &s, &f, threads, sizes[0]);
}
