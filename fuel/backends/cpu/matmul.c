/* float32 matmul for small row counts: out[b, i, j] = sum_l a[b, i, l] * b[b, l, j], every
 * operand walked through its own strides (batch dims may broadcast with stride 0), no packing.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data    = {a, b, out}                      (float *, the first element of each operand)
 *   sizes   = {form, threads, m, n, k, row_chunk, column_chunk, batch_dims, batch sizes...}
 *   strides = {a_row, a_inner, b_inner, b_column, out_row,
 *              then per batch dim: a, b, out}  (elements; out's column stride is 1)
 * Forms:
 *   0 dot:  a_inner == 1 and b_inner == 1 (b is the transposed view of a row-major (n, k)
 *           weight, Linear's x @ W.T): each output is the dot of a row of a with a row of W;
 *           a tile of DOT_ROWS rows x DOT_COLUMNS weight rows keeps 8-wide partial sums along
 *           k and reduces them horizontally at the end (with AVX-512, unless NO_AVX512:
 *           8 weight rows, 16-wide sums).
 *   1 rows: b_column == 1 (b's rows are contiguous): a tile of ROWS_ROWS rows of a x 24
 *           columns of b broadcasts each a[i, l] against the row vector b[l, j:j+24].
 *   2 blas: each unit is one single-threaded cblas_sgemm (NumPy's OpenBLAS, its address in
 *           data[3]; data[4] its openblas_set_num_threads_local) over all rows of a batch
 *           entry and a column chunk. The OpenMP team is then the only pool that runs: OpenBLAS
 *           is set to one thread for the launch (restored after), so its own workers never
 *           wake and spin beside fuel's kernels. The four strides after the batch dims'
 *           say how the operands are read: transposed bits (1: a, 2: b), lda, ldb, ldc.
 *   3 packed: b is a constant weight's packed copy (matmul.py's `packed_weights`): tiles of
 *           PACKED_WIDTH (16) columns, each tile's k rows of 16 floats back to back
 *           ([n / 16][k][16], the last tile zero-padded; strides[2] and [3] unused). A tile of
 *           up to PACKED_ROWS rows x 16 columns broadcasts a[i, l] against the tile's row l:
 *           one sequential stream of weights per thread, which the prefetchers follow (the
 *           dot form's weight rows are 8 streams of a few KiB each). No batch dims.
 * Work is cut into units (a batch entry x row_chunk rows x column_chunk columns), split over
 * OpenMP threads when threads > 1 (the packed form's column chunks are whole tiles).
 */
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VECTOR 1
#endif

#define DOT_ROWS 3
#if defined(VECTOR) && defined(__AVX512F__) && defined(__AVX512DQ__) && !defined(NO_AVX512)
#define WIDE 1  /* the dot tile in AVX-512's 32 registers: 8 weight rows, 16-wide sums */
#define DOT_COLUMNS 8
#ifndef PREFETCH_TILES
#define PREFETCH_TILES 2  /* how far ahead (in weight tiles) the dot form prefetches */
#endif
#else
#define DOT_COLUMNS 4
#ifndef PREFETCH_TILES
#define PREFETCH_TILES 4
#endif
#endif
#ifndef DOT_SPAN
#define DOT_SPAN 512  /* the dot form's span of k (a multiple of 16) */
#endif
#define DOT_GROUP 4   /* row tiles that share a span's weight rows */
#define ROWS_ROWS 4
#define ROWS_VECTORS 3
#define MAX_BATCH_DIMS 8
#define PACKED_WIDTH 16
#ifndef PACKED_AHEAD
#define PACKED_AHEAD 32  /* how far ahead (in tile rows of 64 bytes) the packed form prefetches */
#endif

typedef struct {
    int64_t m, n, k, a_row, a_inner, b_inner, b_column, out_row;
} Problem;

/* cblas_sgemm of an ILP64 OpenBLAS (NumPy's scipy-openblas64): row-major, 64-bit sizes. */
typedef void (*sgemm_function)(int order, int trans_a, int trans_b, int64_t m, int64_t n,
                               int64_t k, float alpha, const float *a, int64_t lda,
                               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
typedef int (*threads_function)(int count);
#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112

static void blas_block(sgemm_function sgemm, const Problem *p, const int64_t *blas,
                       const float *a, const float *b, float *out, int64_t column_start,
                       int64_t column_end) {
    const int64_t transposed = blas[0], lda = blas[1], ldb = blas[2], ldc = blas[3];
    const int trans_b = (transposed & 2) ? CBLAS_TRANS : CBLAS_NO_TRANS;
    const float *b_start = b + column_start * ((transposed & 2) ? ldb : 1);
    sgemm(CBLAS_ROW_MAJOR, (transposed & 1) ? CBLAS_TRANS : CBLAS_NO_TRANS, trans_b, p->m,
          column_end - column_start, p->k, 1.0f, a, lda, b_start, ldb, 0.0f, out + column_start,
          ldc);
}

#if defined(VECTOR)
#define INLINE static inline __attribute__((always_inline))

static const int32_t MASK_TABLE[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* Lanes [0, count) set, count in 0..8. */
INLINE __m256i lane_mask(int64_t count) {
    return _mm256_loadu_si256((const __m256i *)(MASK_TABLE + 8 - count));
}

/* The dot tile's vector type and operations: AVX-512 (WIDE) or AVX2. */
#if defined(WIDE)
typedef __m512 DotVector;
typedef __mmask16 DotTail;
#define DOT_WIDTH 16
#define DOT_KEEP "+v"
#define dot_zero() _mm512_setzero_ps()
#define dot_load(p) _mm512_loadu_ps(p)
#define dot_load_tail(p, tail) _mm512_maskz_loadu_ps(tail, p)
#define dot_fma(x, y, sum) _mm512_fmadd_ps(x, y, sum)
#define dot_tail(count) ((__mmask16)((1u << (count)) - 1u))

/* {sum(v[0]), ..., sum(v[7])} into lanes. */
INLINE void dot_sums(const DotVector *v, float *lanes) {
    __m256 half[DOT_COLUMNS];
    for (int c = 0; c < DOT_COLUMNS; c++)
        half[c] = _mm256_add_ps(_mm512_castps512_ps256(v[c]), _mm512_extractf32x8_ps(v[c], 1));
    __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(half[0], half[1]),
                                _mm256_hadd_ps(half[2], half[3]));
    __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(half[4], half[5]),
                                 _mm256_hadd_ps(half[6], half[7]));
    _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20),
                                          _mm256_permute2f128_ps(low, high, 0x31)));
}
#else
typedef __m256 DotVector;
typedef __m256i DotTail;
#define DOT_WIDTH 8
#define DOT_KEEP "+x"
#define dot_zero() _mm256_setzero_ps()
#define dot_load(p) _mm256_loadu_ps(p)
#define dot_load_tail(p, tail) _mm256_maskload_ps(p, tail)
#define dot_fma(x, y, sum) _mm256_fmadd_ps(x, y, sum)
#define dot_tail(count) lane_mask(count)

/* {sum(v[0]), ..., sum(v[3])} into lanes. */
INLINE void dot_sums(const DotVector *v, float *lanes) {
    __m256 pair = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    _mm_storeu_ps(lanes, _mm_add_ps(_mm256_castps256_ps128(pair),
                                    _mm256_extractf128_ps(pair, 1)));
}
#endif

/* rows (1..DOT_ROWS) rows of a (unit inner stride) against DOT_COLUMNS weight rows, over
 * the inner span [begin, end) of k: the partial sums start at zero when begin == 0, else
 * from `keep`; when end == k they are reduced and the first `columns` of the DOT_COLUMNS
 * results of each row stored, else kept in `keep` for the next span. */
INLINE void dot_tile(const int rows, const float *a, int64_t a_row, const float *const *w,
                     float *out, int64_t out_row, int columns, int64_t k, DotTail tail,
                     const float *next, int64_t begin, int64_t end,
                     DotVector keep[DOT_ROWS][DOT_COLUMNS]) {
    DotVector sums[DOT_ROWS][DOT_COLUMNS];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < DOT_COLUMNS; c++) sums[r][c] = begin == 0 ? dot_zero() : keep[r][c];
    int64_t l = begin;
    for (; l + DOT_WIDTH <= end; l += DOT_WIDTH) {
        if (next != NULL && l % 16 == 0)  /* the next weight rows, a cache line per row */
            for (int c = 0; c < DOT_COLUMNS; c++) _mm_prefetch((const char *)(next + c * k + l),
                                                               _MM_HINT_T1);
        DotVector x[DOT_ROWS];
        for (int r = 0; r < rows; r++) {
            x[r] = dot_load(a + r * a_row + l);
            __asm__("" : DOT_KEEP(x[r]));  /* in a register: one load, not one per FMA */
        }
        for (int c = 0; c < DOT_COLUMNS; c++) {
            DotVector y = dot_load(w[c] + l);
            __asm__("" : DOT_KEEP(y));
            for (int r = 0; r < rows; r++) sums[r][c] = dot_fma(x[r], y, sums[r][c]);
        }
    }
    if (end < k) {
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < DOT_COLUMNS; c++) keep[r][c] = sums[r][c];
        return;
    }
    if (l < k) {
        DotVector x[DOT_ROWS];
        for (int r = 0; r < rows; r++) x[r] = dot_load_tail(a + r * a_row + l, tail);
        for (int c = 0; c < DOT_COLUMNS; c++) {
            DotVector y = dot_load_tail(w[c] + l, tail);
            for (int r = 0; r < rows; r++) sums[r][c] = dot_fma(x[r], y, sums[r][c]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float lanes[DOT_COLUMNS];
        dot_sums(sums[r], lanes);
        if (columns == DOT_COLUMNS)  /* a whole tile: one vector store */
            memcpy(out + r * out_row, lanes, sizeof(lanes));
        else
            memcpy(out + r * out_row, lanes, (size_t)columns * sizeof(float));
    }
}

static void dot_block(const Problem *p, const float *a, const float *b, float *out,
                      int64_t row_start, int64_t row_end, int64_t column_start,
                      int64_t column_end) {
    const DotTail tail = dot_tail(p->k % DOT_WIDTH);
    DotVector keep[DOT_GROUP][DOT_ROWS][DOT_COLUMNS];
    for (int64_t j = column_start; j < column_end; j += DOT_COLUMNS) {
        int columns = (int)(column_end - j < DOT_COLUMNS ? column_end - j : DOT_COLUMNS);
        const float *w[DOT_COLUMNS];
        for (int c = 0; c < DOT_COLUMNS; c++)  /* past the last column: repeat it, unstored */
            w[c] = b + (j + (c < columns ? c : columns - 1)) * p->b_column;
        /* While the first row tile runs, prefetch the weight rows PREFETCH_TILES tiles on
         * when they lie back to back (a row-major weight): rows of a few KiB are too short
         * for the hardware prefetcher. Into L2, not L1 (_MM_HINT_T1): L1 prefetches of
         * weights already in L3 competed with the tile's own loads, so a 1 x 1024 -> 1000
         * product took 110 us on one thread against 57 without prefetching and 69 with L2
         * prefetches, and MiniLM 1 x 12 (weights from memory) 3.05-3.18 ms against 2.67-2.90
         * (AMD EPYC Zen 4, 2 threads, chrt). A prefetch past the end never faults. */
        const float *next_tile = p->b_column == p->k
                                     ? b + (j + PREFETCH_TILES * DOT_COLUMNS) * p->b_column
                                     : NULL;
        const float *next = next_tile;
        /* Groups of DOT_GROUP row tiles walk k in spans of DOT_SPAN, each span through all
         * the group's tiles while its weight rows stay in L1 (a whole long row does not:
         * 8 rows of 1536 floats are 48 KiB), the tiles' partial sums kept in between. Only
         * the first group prefetches (`next` is NULL after its last span's first tile). */
        for (int64_t group = row_start; group < row_end; group += DOT_GROUP * DOT_ROWS) {
            const int64_t group_end = group + DOT_GROUP * DOT_ROWS < row_end
                                          ? group + DOT_GROUP * DOT_ROWS : row_end;
            for (int64_t begin = 0; begin < p->k; begin += DOT_SPAN) {
                const int64_t end = p->k - begin > DOT_SPAN + DOT_SPAN / 2 ? begin + DOT_SPAN
                                                                           : p->k;
                int64_t i = group;
                for (int t = 0; i < group_end; i += DOT_ROWS, t++, next = NULL) {
                    const int rows = (int)(group_end - i < DOT_ROWS ? group_end - i : DOT_ROWS);
                    float *target = out + i * p->out_row + j;
                    const float *row = a + i * p->a_row;
                    if (rows == DOT_ROWS)
                        dot_tile(DOT_ROWS, row, p->a_row, w, target, p->out_row, columns, p->k,
                                 tail, next, begin, end, keep[t]);
                    else if (rows == 2)
                        dot_tile(2, row, p->a_row, w, target, p->out_row, columns, p->k, tail,
                                 next, begin, end, keep[t]);
                    else
                        dot_tile(1, row, p->a_row, w, target, p->out_row, columns, p->k, tail,
                                 next, begin, end, keep[t]);
                }
                if (end == p->k) break;
                next = next_tile;  /* each span's first tile prefetches its part */
            }
        }
    }
}

/* rows (1..ROWS_ROWS) rows of a x vectors (1..ROWS_VECTORS) 8-wide column vectors of b; the
 * last vector is loaded and stored through `last` when `masked`. With fewer than ROWS_ROWS
 * rows, `splits` sets of sums take alternate steps of k (more independent FMA chains). */
INLINE void rows_tile(const int rows, const int vectors, const int masked, const float *a,
                      int64_t a_row, int64_t a_inner, const float *b, int64_t b_inner,
                      float *out, int64_t out_row, int64_t k, __m256i last) {
    const int splits = ROWS_ROWS / rows < 4 ? ROWS_ROWS / rows : 4;
    __m256 sums[ROWS_ROWS][ROWS_VECTORS];
    for (int q = 0; q < splits * rows; q++)
        for (int v = 0; v < vectors; v++) sums[q][v] = _mm256_setzero_ps();
#define ROWS_STEP(L, SPLIT)                                                                   \
    do {                                                                                      \
        const float *row = b + (L) * b_inner;                                                 \
        __m256 y[ROWS_VECTORS];                                                               \
        for (int v = 0; v < vectors; v++) {                                                   \
            y[v] = (masked && v == vectors - 1) ? _mm256_maskload_ps(row + 8 * v, last)       \
                                                : _mm256_loadu_ps(row + 8 * v);               \
            __asm__("" : "+x"(y[v])); /* one load per vector, not one per FMA using it */     \
        }                                                                                     \
        for (int r = 0; r < rows; r++) {                                                      \
            __m256 x = _mm256_broadcast_ss(a + r * a_row + (L) * a_inner);                    \
            for (int v = 0; v < vectors; v++)                                                 \
                sums[(SPLIT) * rows + r][v] =                                                 \
                    _mm256_fmadd_ps(x, y[v], sums[(SPLIT) * rows + r][v]);                    \
        }                                                                                     \
    } while (0)
    int64_t l = 0;
    for (; l + splits <= k; l += splits)
        for (int split = 0; split < splits; split++) ROWS_STEP(l + split, split);
    for (; l < k; l++) ROWS_STEP(l, 0);
#undef ROWS_STEP
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++) {
            __m256 total = sums[r][v];
            for (int split = 1; split < splits; split++)
                total = _mm256_add_ps(total, sums[split * rows + r][v]);
            float *target = out + r * out_row + 8 * v;
            if (masked && v == vectors - 1) _mm256_maskstore_ps(target, last, total);
            else _mm256_storeu_ps(target, total);
        }
}

#define ROWS_CASE(R, V, M)                                                                    \
    rows_tile(R, V, M, a + i * p->a_row, p->a_row, p->a_inner, b + j, p->b_inner,            \
              out + i * p->out_row + j, p->out_row, p->k, last)

/* One column strip [j, j + width) for every row of [row_start, row_end). */
INLINE void rows_strip(const int vectors, const int masked, const Problem *p, const float *a,
                       const float *b, float *out, int64_t row_start, int64_t row_end,
                       int64_t j, __m256i last) {
    int64_t i = row_start;
    for (; i + ROWS_ROWS <= row_end; i += ROWS_ROWS) ROWS_CASE(ROWS_ROWS, vectors, masked);
    switch (row_end - i) {
    case 3: ROWS_CASE(3, vectors, masked); break;
    case 2: ROWS_CASE(2, vectors, masked); break;
    case 1: ROWS_CASE(1, vectors, masked); break;
    default: break;
    }
}

static void rows_block(const Problem *p, const float *a, const float *b, float *out,
                       int64_t row_start, int64_t row_end, int64_t column_start,
                       int64_t column_end) {
    const __m256i full = lane_mask(8);
    int64_t j = column_start;
    for (; j + 8 * ROWS_VECTORS <= column_end; j += 8 * ROWS_VECTORS)
        rows_strip(ROWS_VECTORS, 0, p, a, b, out, row_start, row_end, j, full);
    int64_t rest = column_end - j;
    if (rest == 0) return;
    int vectors = (int)((rest + 7) / 8);
    __m256i last = lane_mask(rest - 8 * (vectors - 1));
    int masked = rest % 8 != 0;
    if (vectors == 1) {
        if (masked) rows_strip(1, 1, p, a, b, out, row_start, row_end, j, last);
        else rows_strip(1, 0, p, a, b, out, row_start, row_end, j, last);
    } else if (vectors == 2) {
        if (masked) rows_strip(2, 1, p, a, b, out, row_start, row_end, j, last);
        else rows_strip(2, 0, p, a, b, out, row_start, row_end, j, last);
    } else {
        rows_strip(3, 1, p, a, b, out, row_start, row_end, j, last);
    }
}

/* The packed form: rows (1..PACKED_ROWS) rows of a against one tile ([k][16] floats) of the
 * packed weights; `columns` (1..16) of the tile's columns stored. */
#if defined(WIDE)
#define PACKED_ROWS 12
INLINE void packed_tile(const int rows, const float *a, int64_t a_row, const float *w,
                        int64_t k, float *out, int64_t out_row, int columns) {
    __m512 sums[PACKED_ROWS];
    for (int r = 0; r < rows; r++) sums[r] = _mm512_setzero_ps();
    for (int64_t l = 0; l < k; l++) {
        _mm_prefetch((const char *)(w + (l + PACKED_AHEAD) * PACKED_WIDTH), _MM_HINT_T0);
        const __m512 y = _mm512_loadu_ps(w + l * PACKED_WIDTH);
        for (int r = 0; r < rows; r++)
            sums[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * a_row + l]), y, sums[r]);
    }
    const __mmask16 keep = (__mmask16)((1u << columns) - 1u);
    for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(out + r * out_row, keep, sums[r]);
}
#else
#define PACKED_ROWS 6
INLINE void packed_tile(const int rows, const float *a, int64_t a_row, const float *w,
                        int64_t k, float *out, int64_t out_row, int columns) {
    __m256 low[PACKED_ROWS], high[PACKED_ROWS];
    for (int r = 0; r < rows; r++) low[r] = high[r] = _mm256_setzero_ps();
    for (int64_t l = 0; l < k; l++) {
        _mm_prefetch((const char *)(w + (l + PACKED_AHEAD) * PACKED_WIDTH), _MM_HINT_T0);
        const __m256 y0 = _mm256_loadu_ps(w + l * PACKED_WIDTH);
        const __m256 y1 = _mm256_loadu_ps(w + l * PACKED_WIDTH + 8);
        for (int r = 0; r < rows; r++) {
            const __m256 x = _mm256_broadcast_ss(a + r * a_row + l);
            low[r] = _mm256_fmadd_ps(x, y0, low[r]);
            high[r] = _mm256_fmadd_ps(x, y1, high[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float *target = out + r * out_row;
        if (columns == PACKED_WIDTH) {
            _mm256_storeu_ps(target, low[r]);
            _mm256_storeu_ps(target + 8, high[r]);
        } else if (columns > 8) {
            _mm256_storeu_ps(target, low[r]);
            _mm256_maskstore_ps(target + 8, lane_mask(columns - 8), high[r]);
        } else {
            _mm256_maskstore_ps(target, lane_mask(columns), low[r]);
        }
    }
}
#endif

#define PACKED_CASE(R) packed_tile(R, a + i * p->a_row, p->a_row, w, p->k, \
                                   out + i * p->out_row + j, p->out_row, columns)

static void packed_block(const Problem *p, const float *a, const float *packed, float *out,
                         int64_t row_start, int64_t row_end, int64_t column_start,
                         int64_t column_end) {
    for (int64_t j = column_start; j < column_end; j += PACKED_WIDTH) {
        const float *w = packed + (j / PACKED_WIDTH) * p->k * PACKED_WIDTH;
        const int columns = (int)(column_end - j < PACKED_WIDTH ? column_end - j : PACKED_WIDTH);
        for (int64_t i = row_start; i < row_end; i += PACKED_ROWS) {
            switch (row_end - i < PACKED_ROWS ? row_end - i : PACKED_ROWS) {
            case 1: PACKED_CASE(1); break;
            case 2: PACKED_CASE(2); break;
            case 3: PACKED_CASE(3); break;
            case 4: PACKED_CASE(4); break;
            case 5: PACKED_CASE(5); break;
#if PACKED_ROWS > 6
            case 6: PACKED_CASE(6); break;
            case 7: PACKED_CASE(7); break;
            case 8: PACKED_CASE(8); break;
            case 9: PACKED_CASE(9); break;
            case 10: PACKED_CASE(10); break;
            case 11: PACKED_CASE(11); break;
#endif
            default: PACKED_CASE(PACKED_ROWS); break;
            }
        }
    }
}
#undef PACKED_CASE
#else
/* Portable fallback: the same walks, vectorized by the compiler where it can. */
static void dot_block(const Problem *p, const float *a, const float *b, float *out,
                      int64_t row_start, int64_t row_end, int64_t column_start,
                      int64_t column_end) {
    for (int64_t i = row_start; i < row_end; i++)
        for (int64_t j = column_start; j < column_end; j++) {
            const float *x = a + i * p->a_row, *w = b + j * p->b_column;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t l = 0; l < p->k; l++) sum += x[l] * w[l];
            out[i * p->out_row + j] = sum;
        }
}

static void rows_block(const Problem *p, const float *a, const float *b, float *out,
                       int64_t row_start, int64_t row_end, int64_t column_start,
                       int64_t column_end) {
    for (int64_t i = row_start; i < row_end; i++) {
        float *target = out + i * p->out_row;
        for (int64_t j = column_start; j < column_end; j++) target[j] = 0.0f;
        for (int64_t l = 0; l < p->k; l++) {
            const float x = a[i * p->a_row + l * p->a_inner];
            const float *row = b + l * p->b_inner;
#pragma omp simd
            for (int64_t j = column_start; j < column_end; j++) target[j] += x * row[j];
        }
    }
}

static void packed_block(const Problem *p, const float *a, const float *packed, float *out,
                         int64_t row_start, int64_t row_end, int64_t column_start,
                         int64_t column_end) {
    for (int64_t i = row_start; i < row_end; i++)
        for (int64_t j = column_start; j < column_end; j++) {
            const float *w = packed + (j / PACKED_WIDTH) * p->k * PACKED_WIDTH + j % PACKED_WIDTH;
            float sum = 0.0f;
            for (int64_t l = 0; l < p->k; l++) sum += a[i * p->a_row + l] * w[l * PACKED_WIDTH];
            out[i * p->out_row + j] = sum;
        }
}
#endif

/* The float convolutions' work pool (conv_common.h's pool_run_units in conv.c), handed over
 * once by a POOL_SHARE call (qlinear_units.h, put before this source: take_pool) where a
 * process runs convolutions: then the C forms' units run on its helpers, not on an OpenMP
 * team beside them. A model's classifier came after convolutions whose pool helper still
 * spun on the core the team's thread needed, and that thread slept since the last run
 * (resnet18's 512 -> 1000 product at batch 1: 90 or 335 us by process, 67-81 on the pool).
 * The blas form stays on OpenMP (each of its units one single-threaded OpenBLAS call). */

typedef struct {
    Problem problem;
    int64_t form, row_chunk, column_chunk, row_units, column_units;
    int batch_dims;
    const int64_t *batch_sizes, *batch_strides, *blas;
    const float *a, *b;
    float *out;
    sgemm_function sgemm;
} Launch;

static void launch_unit(void *context, int64_t unit) {
    const Launch *l = (const Launch *)context;
    int64_t column_unit = unit % l->column_units, rest = unit / l->column_units;
    int64_t row_unit = rest % l->row_units, entry = rest / l->row_units;
    int64_t a_offset = 0, b_offset = 0, out_offset = 0;
    for (int d = l->batch_dims - 1; d >= 0; d--) {
        int64_t index = entry % l->batch_sizes[d];
        entry /= l->batch_sizes[d];
        a_offset += index * l->batch_strides[3 * d];
        b_offset += index * l->batch_strides[3 * d + 1];
        out_offset += index * l->batch_strides[3 * d + 2];
    }
    const Problem *p = &l->problem;
    int64_t row_start = row_unit * l->row_chunk, column_start = column_unit * l->column_chunk;
    int64_t row_end = row_start + l->row_chunk < p->m ? row_start + l->row_chunk : p->m;
    int64_t column_end = column_start + l->column_chunk < p->n ? column_start + l->column_chunk
                                                              : p->n;
    if (l->form == 2)
        blas_block(l->sgemm, p, l->blas, l->a + a_offset, l->b + b_offset, l->out + out_offset,
                   column_start, column_end);
    else if (l->form == 3)
        packed_block(p, l->a + a_offset, l->b, l->out + out_offset, row_start, row_end,
                     column_start, column_end);
    else if (l->form == 0)
        dot_block(p, l->a + a_offset, l->b + b_offset, l->out + out_offset, row_start, row_end,
                  column_start, column_end);
    else
        rows_block(p, l->a + a_offset, l->b + b_offset, l->out + out_offset, row_start, row_end,
                   column_start, column_end);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    if (take_pool(data, sizes)) return;
    const int64_t form = sizes[0], threads = sizes[1];
    const int batch_dims = (int)sizes[7];
    Launch launch = {{sizes[2], sizes[3], sizes[4], strides[0], strides[1], strides[2],
                      strides[3], strides[4]},
                     form, sizes[5], sizes[6], 0, 0, batch_dims, sizes + 8, strides + 5,
                     strides + 5 + 3 * batch_dims, (const float *)data[0],
                     (const float *)data[1], (float *)data[2],
                     form == 2 ? (sgemm_function)data[3] : 0};
    int64_t batch = 1;
    for (int d = 0; d < batch_dims; d++) batch *= launch.batch_sizes[d];
    launch.row_units = (launch.problem.m + launch.row_chunk - 1) / launch.row_chunk;
    launch.column_units = (launch.problem.n + launch.column_chunk - 1) / launch.column_chunk;
    const int64_t units = batch * launch.row_units * launch.column_units;
    if (form != 2 && shared_run_units != 0) {  /* (one unit or thread: run_units's loop) */
        run_units(units, threads, launch_unit, &launch);
        return;
    }
    const threads_function set_threads = form == 2 ? (threads_function)data[4] : 0;
    const int blas_threads = form == 2 ? set_threads(1) : 0;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && units > 1)
    for (int64_t unit = 0; unit < units; unit++) launch_unit(&launch, unit);
    if (form == 2) set_threads(blas_threads);
}
