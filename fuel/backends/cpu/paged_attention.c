/* paged_attention: each query row attends over its own request's positions in a paged
   key/value pool (see fuel/ir/ops.py's record). One (row, kv head) pair at a time: the
   group's query heads score every visible key once (AVX2 dots where dim is a multiple of
   8), softmax in float32 (max subtracted), then the weighted sum of the values. Head size
   64 with up to 4 query heads per kv head on AVX-512 (attend_64): sixteen scores at a time
   without a horizontal sum each, the softmax's expf 16 lanes at a time (libmvec), the values
   by fma; 8 rows of SmolLM2 at position 1000 spent 26 ms of a 54 ms step here before, 7.5
   ms after (one thread). Each row's
   result depends on its own operands only, never on the other rows of the step. Block-table
   entries and lengths are checked first; a bad one writes its 1-based flat index (rows'
   entries, then lengths after them) into the status word and nothing is computed. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(_OPENMP)
#include <omp.h>
#endif
#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#define PARALLEL_WORK (1 << 18)
#if defined(VECTOR_EXPF) /* paged_attention.py: the toolchain links libmvec */
extern float expf(float) __attribute__((simd("notinbranch")));
#endif

/* One dot of n floats (n a multiple of 8 on the AVX2 path: four accumulators, summed in a
   fixed order; else one simd reduction). */
static inline float dot(const float *a, const float *b, int64_t n) {
#if defined(__AVX2__) && defined(__FMA__)
    if (n % 8 == 0) {
        __m256 sums[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                          _mm256_setzero_ps()};
        int64_t i = 0;
        for (; i + 32 <= n; i += 32)
            for (int part = 0; part < 4; part++)
                sums[part] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * part),
                                             _mm256_loadu_ps(b + i + 8 * part), sums[part]);
        for (int part = 0; i < n; i += 8, part++)
            sums[part] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i),
                                         sums[part]);
        const __m256 total = _mm256_add_ps(_mm256_add_ps(sums[0], sums[1]),
                                           _mm256_add_ps(sums[2], sums[3]));
        __m128 half = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
        half = _mm_add_ps(half, _mm_movehl_ps(half, half));
        half = _mm_add_ss(half, _mm_movehdup_ps(half));
        return _mm_cvtss_f32(half);
    }
#endif
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

#if defined(__AVX2__) && defined(__FMA__)
/* The weighted sum of the values for head size 64 and `group` (a constant, at most 4) query
   heads: 8 * group accumulators held in registers over the positions (the same products and
   adds, in the same order, as the portable loop). */
static inline __attribute__((always_inline)) void values_64(
    const float *values, const int64_t *row_table, int64_t length, int64_t block_size,
    int64_t slot_stride, const float *scores, int64_t longest, float *out, const int group) {
    __m256 sums[4][8];
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 8; c++) sums[g][c] = _mm256_setzero_ps();
    int64_t block = 0, offset = 0; /* position p's entry and slot in it, without dividing */
    for (int64_t p = 0; p < length; p++) {
        const float *value = values + (row_table[block] * block_size + offset) * slot_stride;
        if (++offset == block_size) offset = 0, block++;
        __m256 v[8];
        for (int c = 0; c < 8; c++) v[c] = _mm256_loadu_ps(value + 8 * c);
        for (int g = 0; g < group; g++) {
            const __m256 weight = _mm256_broadcast_ss(scores + g * longest + p);
            for (int c = 0; c < 8; c++)
                sums[g][c] = _mm256_add_ps(sums[g][c], _mm256_mul_ps(weight, v[c]));
        }
    }
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(out + g * 64 + 8 * c, sums[g][c]);
}
#endif

#if defined(__AVX512F__)
/* Sixteen dots at once: lane j of the result is the sum of v[j]'s lanes (a tree of unpacks and
   128-bit shuffles in place of sixteen horizontal sums; lanes come out in source order). */
static inline __attribute__((always_inline)) __m512 sums_16(__m512 v[16]) {
    __m512 two[8], four[4], eight[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: {a0+a2, b0+b2, a1+a3, b1+b3} */
        two[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                               _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) { /* per 128-bit lane: {a, b, c, d} */
        const __m512d low = _mm512_castps_pd(two[2 * i]), high = _mm512_castps_pd(two[2 * i + 1]);
        four[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(low, high)),
                                _mm512_castpd_ps(_mm512_unpackhi_pd(low, high)));
    }
    for (int i = 0; i < 2; i++) /* 128-bit lanes {0+1, 2+3} of each of two */
        eight[i] = _mm512_add_ps(_mm512_shuffle_f32x4(four[2 * i], four[2 * i + 1], 0x88),
                                 _mm512_shuffle_f32x4(four[2 * i], four[2 * i + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(eight[0], eight[1], 0x88),
                         _mm512_shuffle_f32x4(eight[0], eight[1], 0xDD));
}

/* Head size 64 and `group` (a constant, at most 4) query heads on AVX-512: the scores sixteen
   positions at a time (each dot four fmas in 512-bit lanes, then sums_16), softmax as the
   portable loop, the weighted values as fmas into 4 * group accumulators in registers. */
static inline __attribute__((always_inline)) void attend_64(
    const float *queries, const float *keys, const float *values, const int64_t *row_table,
    int64_t length, int64_t block_size, int64_t slot_stride, float *scores, int64_t longest,
    float *out, const int group) {
    __m512 q[4][4];
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) q[g][c] = _mm512_loadu_ps(queries + g * 64 + 16 * c);
    int64_t block = 0, offset = 0; /* position p's entry and slot in it, without dividing */
    int64_t p = 0;
    for (; p + 16 <= length; p += 16) {
        __m512 dots[4][16];
        for (int j = 0; j < 16; j++) {
            const float *key = keys + (row_table[block] * block_size + offset) * slot_stride;
            if (++offset == block_size) offset = 0, block++;
            __m512 k[4];
            for (int c = 0; c < 4; c++) k[c] = _mm512_loadu_ps(key + 16 * c);
            for (int g = 0; g < group; g++) {
                __m512 sum = _mm512_mul_ps(q[g][0], k[0]);
                for (int c = 1; c < 4; c++) sum = _mm512_fmadd_ps(q[g][c], k[c], sum);
                dots[g][j] = sum;
            }
        }
        for (int g = 0; g < group; g++) _mm512_storeu_ps(scores + g * longest + p, sums_16(dots[g]));
    }
    for (; p < length; p++) { /* the last positions one dot at a time, the same lane sums */
        const float *key = keys + (row_table[block] * block_size + offset) * slot_stride;
        if (++offset == block_size) offset = 0, block++;
        for (int g = 0; g < group; g++) {
            __m512 sum = _mm512_mul_ps(q[g][0], _mm512_loadu_ps(key));
            for (int c = 1; c < 4; c++)
                sum = _mm512_fmadd_ps(q[g][c], _mm512_loadu_ps(key + 16 * c), sum);
            scores[g * longest + p] = _mm512_reduce_add_ps(sum);
        }
    }
    for (int g = 0; g < group; g++) {
        float *row = scores + g * longest;
        float largest = row[0];
        for (int64_t i = 1; i < length; i++) largest = row[i] > largest ? row[i] : largest;
        float total = 0.0f;
        /* vector expf (libmvec where it links): its fast path needs every lane above -87.34,
           so the exponents are floored there and those weights set to 0 (below FLT_MIN) */
#pragma omp simd reduction(+ : total)
        for (int64_t i = 0; i < length; i++) {
            const float x = row[i] - largest;
            const float e = expf(x > -87.33f ? x : -87.33f);
            row[i] = x < -87.33f ? 0.0f : e;
            total += row[i];
        }
        const float inverse = 1.0f / total;
#pragma omp simd
        for (int64_t i = 0; i < length; i++) row[i] *= inverse;
    }
    __m512 sums[4][4];
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) sums[g][c] = _mm512_setzero_ps();
    block = offset = 0;
    for (p = 0; p < length; p++) {
        const float *value = values + (row_table[block] * block_size + offset) * slot_stride;
        if (++offset == block_size) offset = 0, block++;
        __m512 v[4];
        for (int c = 0; c < 4; c++) v[c] = _mm512_loadu_ps(value + 16 * c);
        for (int g = 0; g < group; g++) {
            const __m512 weight = _mm512_set1_ps(scores[g * longest + p]);
            for (int c = 0; c < 4; c++) sums[g][c] = _mm512_fmadd_ps(weight, v[c], sums[g][c]);
        }
    }
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(out + g * 64 + 16 * c, sums[g][c]);
}
#endif

/* The group of query heads `queries` (group rows of dim) sharing one kv head: scores over the
   row's `length` positions (keys and values: the kv head's first slot, slots slot_stride
   apart, through the row's block table), softmax per head, weighted sum of values into out
   (group rows of dim). */
static void attend(const float *queries, const float *keys, const float *values,
                   const int64_t *row_table, int64_t length, int64_t block_size,
                   int64_t slot_stride, int64_t group, int64_t dim, float *scores,
                   int64_t longest, float *out) {
#if defined(__AVX512F__)
    if (dim == 64 && group <= 4) {
        switch (group) {
        case 1: attend_64(queries, keys, values, row_table, length, block_size, slot_stride, scores, longest, out, 1); return;
        case 2: attend_64(queries, keys, values, row_table, length, block_size, slot_stride, scores, longest, out, 2); return;
        case 3: attend_64(queries, keys, values, row_table, length, block_size, slot_stride, scores, longest, out, 3); return;
        case 4: attend_64(queries, keys, values, row_table, length, block_size, slot_stride, scores, longest, out, 4); return;
        }
    }
#endif
    int64_t block = 0, offset = 0; /* position p's entry and slot in it, without dividing */
    for (int64_t p = 0; p < length; p++) {
        const float *key = keys + (row_table[block] * block_size + offset) * slot_stride;
        if (++offset == block_size) offset = 0, block++;
        for (int64_t g = 0; g < group; g++) scores[g * longest + p] = dot(queries + g * dim, key, dim);
    }
    for (int64_t g = 0; g < group; g++) {
        float *row = scores + g * longest;
        float largest = row[0];
        for (int64_t p = 1; p < length; p++) largest = row[p] > largest ? row[p] : largest;
        float total = 0.0f;
        for (int64_t p = 0; p < length; p++) {
            row[p] = expf(row[p] - largest);
            total += row[p];
        }
        const float inverse = 1.0f / total;
        for (int64_t p = 0; p < length; p++) row[p] *= inverse;
        float *target = out + g * dim;
        for (int64_t i = 0; i < dim; i++) target[i] = 0.0f;
    }
#if defined(__AVX2__) && defined(__FMA__)
    if (dim == 64 && group <= 4) { /* the outputs in registers over all positions */
        switch (group) {
        case 1: values_64(values, row_table, length, block_size, slot_stride, scores, longest, out, 1); return;
        case 2: values_64(values, row_table, length, block_size, slot_stride, scores, longest, out, 2); return;
        case 3: values_64(values, row_table, length, block_size, slot_stride, scores, longest, out, 3); return;
        case 4: values_64(values, row_table, length, block_size, slot_stride, scores, longest, out, 4); return;
        }
    }
#endif
    block = offset = 0;
    for (int64_t p = 0; p < length; p++) {
        const float *value = values + (row_table[block] * block_size + offset) * slot_stride;
        if (++offset == block_size) offset = 0, block++;
        for (int64_t g = 0; g < group; g++) {
            const float weight = scores[g * longest + p];
            float *restrict target = out + g * dim;
#pragma omp simd
            for (int64_t i = 0; i < dim; i++) target[i] += weight * value[i];
        }
    }
}


/* sizes: rows, heads, dim, blocks, block_size, kv_heads, table_width, threads
   data: q, key_pool, value_pool, table (int64), lengths (int64), out, status */
void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const int64_t rows = sizes[0], heads = sizes[1], dim = sizes[2], blocks = sizes[3];
    const int64_t block_size = sizes[4], kv_heads = sizes[5], width = sizes[6];
    const int threads = (int)sizes[7];
    const float *q = (const float *)data[0];
    const float *keys = (const float *)data[1];
    const float *values = (const float *)data[2];
    const int64_t *table = (const int64_t *)data[3];
    const int64_t *lengths = (const int64_t *)data[4];
    float *out = (float *)data[5];
    int64_t *status = (int64_t *)data[6];
    (void)threads;
    const int64_t group = heads / kv_heads, slot_stride = kv_heads * dim;
    int64_t longest = 0, visible = 0;
    for (int64_t t = 0; t < rows; t++) {
        int64_t length = lengths[t];
        visible += length;
        if (length < 1 || length > width * block_size) {
            *status = rows * width + t + 1;
            return;
        }
        if (length > longest) longest = length;
        int64_t used = (length + block_size - 1) / block_size;
        for (int64_t b = 0; b < used; b++) {
            int64_t block = table[t * width + b];
            if (block < 0 || block >= blocks) {
                *status = t * width + b + 1;
                return;
            }
        }
    }
    const int64_t pairs = rows * kv_heads;
    /* threads only pay for themselves on enough work (multiply-adds over all rows) */
    const int parallel = threads > 1 && pairs > 1 && visible * heads * dim * 2 >= PARALLEL_WORK;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) if (parallel)
#endif
    {
        float *scores = malloc(sizeof(float) * (size_t)(longest * group));
        if (scores != NULL) {
#if defined(_OPENMP)
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t pair = 0; pair < pairs; pair++) {
                const int64_t t = pair / kv_heads, kv = pair % kv_heads;
                attend(q + (t * heads + kv * group) * dim, keys + kv * dim, values + kv * dim,
                       table + t * width, lengths[t], block_size, slot_stride, group, dim,
                       scores, longest, out + (t * heads + kv * group) * dim);
            }
            free(scores);
        }
    }
}
