/* float32 matmul on the convolution's register-tiled GEMM (after conv_common.h and
 * conv_gemm.h): out (m x n) = a (m x k, rows lda apart, unit inner stride) . b, with b either
 * (k x n) rows ldb apart (unit column stride) or the transposed view of a row-major (n x k)
 * weight, rows ldb apart (Linear's x @ W.T), or b's panels packed beforehand (a constant
 * weight, packed once: transposed_b 2, ldb the floats between two K blocks' panels). The
 * MR-row slivers of a are read as stored; b is packed per K block into NR-column panels (a
 * weight transposed on the way: 16 x 16 blocks transposed in registers with AVX-512), so the
 * micro kernel streams one panel per tile.
 *
 * The prepacked layout (matmul_gemm.py's packed_panels writes it): K block kb starts at
 * kb * ldb; in it, the panel of columns [p * NR, p * NR + NR) starts at p * PANEL(kc) (kc that
 * block's rows), each of its kc rows PANEL_ROW(n, p * NR) floats wide, zero padded: what
 * pack_b makes of a block that reaches column n, so a unit's columns [n0, n0 + nc) (n0 a
 * multiple of NR, nc too unless the block ends at n) read the same panels it would pack.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data    = {a, b, out}
 *   sizes   = {threads, m, n, k, transposed_b, lda, ldb, ldc, batch_dims, batch sizes...}
 *   strides = per batch dim: a, b, out (elements; b's may be 0, a weight shared by a batch)
 * Work units are batch entries x column blocks x sliver blocks (conv_gemm.h's split_units),
 * run on OpenMP threads (the team every other threaded kernel of fuel's uses); each thread
 * packs into a buffer of its own.
 */
#define MOST_BATCH_DIMS 8
#define PREPACKED 2  /* transposed_b: b holds the panels already */
#define PACK 3       /* transposed_b: write b's panels (the prepacked layout) into out */
#define DESCRIBE 4   /* transposed_b: write {NR, KC, PANEL(KC)} into out (int64) */

typedef struct {
    const float *a, *b;
    float *out;
    int64_t m, n, k, transposed, lda, ldb, ldc;
} MatmulJob;

/* Columns [n0, n0 + nc) of b = W.T (W: n x k, rows ldw apart), rows [l0, l0 + kc), into
 * panels as pack_b lays them out (zero padded). With AVX-512, 16 weight rows at a time:
 * 16 x 16 blocks loaded a row each and transposed in registers, the last kc % 16 values
 * gathered. */
static void pack_transposed(const float *w, int64_t ldw, int64_t l0, int64_t kc, int64_t n0,
                            int64_t nc, float *packed) {
    for (int64_t j = 0; j < nc; j += NR) {
        float *panel = packed + (j / NR) * PANEL(kc);
        const int64_t width = nc - j < NR ? nc - j : NR, row = PANEL_ROW(nc, j);
        const float *source = w + (n0 + j) * ldw + l0;
        int64_t t0 = 0;
#if defined(__AVX512F__)
        const __m512i rows = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32((int)ldw));
        for (; t0 + 16 <= width; t0 += 16) {  /* 16 weight rows */
            const float *block = source + t0 * ldw;
            int64_t l = 0;
            for (; l + 16 <= kc; l += 16) {
                __m512 r[16];
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(block + i * ldw + l);
                transpose16(r);
                for (int i = 0; i < 16; i++) _mm512_store_ps(panel + (l + i) * row + t0, r[i]);
            }
            for (; l < kc; l++)  /* one value of each row per step */
                _mm512_store_ps(panel + l * row + t0, _mm512_i32gather_ps(rows, block + l, 4));
        }
#endif
        for (int64_t l = 0; l < kc; l++) {
            float *target = panel + l * row;
            for (int64_t t = t0; t < width; t++) target[t] = source[t * ldw + l];
            for (int64_t t = width; t < row; t++) target[t] = 0.0f;
        }
    }
}

/* Columns [n0, n0 + nc) and slivers [s0, s1) of the product: per K block, b's panels packed
 * once, then every sliver against them (the first block stores, the others accumulate). */
static void matmul_unit(const MatmulJob *job, int64_t n0, int64_t nc, int64_t s0, int64_t s1,
                        float *panel) {
    float acc[MR * NR];
    const int64_t m = job->m, k = job->k, ldc = job->ldc;
    for (int64_t l0 = 0; l0 < k; l0 += KC) {
        const int64_t kc = k - l0 < KC ? k - l0 : KC;
        const float *packed = panel;
        if (job->transposed == PREPACKED)
            packed = job->b + (l0 / KC) * job->ldb + (n0 / NR) * PANEL(kc);
        else if (job->transposed) pack_transposed(job->b, job->ldb, l0, kc, n0, nc, panel);
        else pack_b(job->b, job->ldb, l0, kc, n0, nc, panel);
        for (int64_t s = s0; s < s1; s++) {
            const int64_t i0 = s * MR;
            const int rows = m - i0 < MR ? (int)(m - i0) : MR;
            const float *a[MR];  /* rows past m repeat the last one; their sums are dropped */
            for (int r = 0; r < MR; r++)
                a[r] = job->a + (i0 + (r < rows ? r : rows - 1)) * job->lda + l0;
            for (int64_t j = 0; j < nc; j += NR) {
                const int cols = nc - j < NR ? (int)(nc - j) : NR;
                const int half = PANEL_ROW(nc, j) == HALF && HALF < NR;
                float *c = job->out + i0 * ldc + n0 + j;
                const float *b_panel = packed + (j / NR) * PANEL(kc);
                if (rows == MR && cols == (half ? HALF : NR)) {
                    micro(kc, a, b_panel, half, c, ldc, l0 > 0);
                    continue;
                }
                micro(kc, a, b_panel, half, acc, NR, 0);  /* an edge tile: through acc */
                for (int r = 0; r < rows; r++) {
                    float *target = c + r * ldc;
                    if (l0 > 0)
                        for (int t = 0; t < cols; t++) target[t] += acc[r * NR + t];
                    else
                        memcpy(target, acc + r * NR, sizeof(float) * (size_t)cols);
                }
            }
        }
    }
}

/* b's panels for every K block (kstride floats apart) and all n columns: the prepacked
 * layout, made once for a constant weight (`transposed`: b is W.T, W's rows ldb apart). */
static void pack_all(const float *b, int64_t ldb, int transposed, int64_t n, int64_t k,
                     int64_t kstride, float *out) {
    for (int64_t l0 = 0; l0 < k; l0 += KC) {
        const int64_t kc = k - l0 < KC ? k - l0 : KC;
        float *block = out + (l0 / KC) * kstride;
        if (transposed) pack_transposed(b, ldb, l0, kc, 0, n, block);
        else pack_b(b, ldb, l0, kc, 0, n, block);
    }
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    if (sizes[4] == DESCRIBE) {
        int64_t *out = (int64_t *)data[2];
        out[0] = NR;
        out[1] = KC;
        out[2] = PANEL(KC);
        return;
    }
    if (sizes[4] == PACK) {  /* sizes: threads, 0, n, k, PACK, transposed source, ldb, kstride */
        pack_all((const float *)data[1], sizes[6], (int)sizes[5], sizes[2], sizes[3], sizes[7],
                 (float *)data[2]);
        return;
    }
    const MatmulJob whole = {(const float *)data[0], (const float *)data[1], (float *)data[2],
                             sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6],
                             sizes[7]};
    const int64_t threads = sizes[0], slivers = (whole.m + MR - 1) / MR;
    const int batch_dims = (int)sizes[8];
    const int64_t *batch_sizes = sizes + 9;
    int64_t entries = 1;
    for (int d = 0; d < batch_dims; d++) entries *= batch_sizes[d];
    /* Per product: column blocks x sliver blocks, enough that the team splits them evenly
     * when the batch alone does not. */
    const int64_t per_product = entries >= threads ? 1 : (threads + entries - 1) / entries;
    int64_t block, column_blocks, row_blocks;
    split_units(whole.n, slivers, per_product, &block, &column_blocks, &row_blocks);
    const int64_t per_entry = column_blocks * row_blocks, units = entries * per_entry;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && units > 1)
    for (int64_t u = 0; u < units; u++) {
        float *panel = whole.transposed == PREPACKED ? NULL : thread_buffer(
            0, (size_t)PANEL(KC) * (size_t)((block + NR - 1) / NR));
        MatmulJob job = whole;
        int64_t entry = u / per_entry;
        for (int d = batch_dims - 1; d >= 0; d--) {  /* the entry's operands */
            const int64_t index = entry % batch_sizes[d];
            entry /= batch_sizes[d];
            job.a += index * strides[3 * d];
            job.b += index * strides[3 * d + 1];
            job.out += index * strides[3 * d + 2];
        }
        const int64_t cb = u % per_entry % column_blocks, rb = u % per_entry / column_blocks;
        const int64_t n0 = cb * block, nc = job.n - n0 < block ? job.n - n0 : block;
        matmul_unit(&job, n0, nc, slivers * rb / row_blocks, slivers * (rb + 1) / row_blocks,
                    panel);
    }
}
