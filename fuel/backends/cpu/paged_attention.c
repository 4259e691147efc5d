/* paged_attention: each query row attends over its own request's positions in a paged
   key/value pool (see fuel/ir/ops.py's record). One (row, kv head) pair at a time: the
   group's query heads score every visible key once, softmax in float32 (max subtracted),
   then the weighted sum of the values. Block-table entries and lengths are checked first;
   a bad one writes its 1-based flat index (rows' entries, then lengths after them) into
   the status word and nothing is computed. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(_OPENMP)
#include <omp.h>
#endif
#define PARALLEL_WORK (1 << 20)

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
                const int64_t length = lengths[t];
                const int64_t *row_table = table + t * width;
                const float *queries = q + (t * heads + kv * group) * dim;
                for (int64_t p = 0; p < length; p++) {
                    const float *key = keys + (row_table[p / block_size] * block_size
                                               + p % block_size) * slot_stride + kv * dim;
                    for (int64_t g = 0; g < group; g++) {
                        const float *query = queries + g * dim;
                        float sum = 0.0f;
                        for (int64_t i = 0; i < dim; i++) sum += query[i] * key[i];
                        scores[g * longest + p] = sum;
                    }
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
                    float *target = out + (t * heads + kv * group + g) * dim;
                    for (int64_t i = 0; i < dim; i++) target[i] = 0.0f;
                }
                for (int64_t p = 0; p < length; p++) {
                    const float *value = values + (row_table[p / block_size] * block_size
                                                   + p % block_size) * slot_stride + kv * dim;
                    for (int64_t g = 0; g < group; g++) {
                        const float weight = scores[g * longest + p];
                        float *target = out + (t * heads + kv * group + g) * dim;
                        for (int64_t i = 0; i < dim; i++) target[i] += weight * value[i];
                    }
                }
            }
            free(scores);
        }
    }
}
