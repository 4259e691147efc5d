/* index_select of dense row-major operands: out[o, k, :] = source[o, index[k], :] for every
 * row o of the dims before `dim` and every k of the 1-d index (a nearest Resize's rows and
 * columns). Negative positions wrap once. When a position is out of range, status[0] = 1 +
 * its position and nothing is written.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {source, index, out, status}
 *   sizes = {outer, width (source's extent along dim), count (the index's length),
 *            inner_bytes (the dims after dim, in bytes), index_bytes (4 or 8)}
 *   strides is unused (NULL).
 */
/* position() and first_out_of_range() come from index_rows.h, prepended to this source. */

#define MOST_POSITIONS 4096  /* positions read into a local table once (more: read each time) */

#if defined(__AVX512F__)
#include <immintrin.h>

/* Whether every chunk of 16 positions (table[k0 .. k0 + 16)) lies within 16 columns of its
 * smallest: a nearest Resize's upsampled columns (each repeated), whose rows then take one
 * load and one permute a chunk instead of a scalar load a position (yolo's column pass of
 * 128 x 40 x 20 -> 128 x 40 x 40: 118 -> 56 us, profiled launches). */
static int near_chunks(const int32_t *table, int64_t count) {
    for (int64_t k0 = 0; k0 < count; k0 += 16) {
        const int64_t end = k0 + 16 < count ? k0 + 16 : count;
        int32_t low = table[k0], high = table[k0];
        for (int64_t k = k0; k < end; k++) {
            low = table[k] < low ? table[k] : low;
            high = table[k] > high ? table[k] : high;
        }
        if (high - low >= 16) return 0;
    }
    return 1;
}

/* target[k] = row[table[k]] for k < count, 16 a step: the chunk's 16 columns from its
 * smallest (masked at the row's end) permuted into place. */
static void select_near(const float *row, int64_t width, const int32_t *table, int64_t count,
                        float *target) {
    for (int64_t k0 = 0; k0 < count; k0 += 16) {
        const int64_t left = count - k0;
        const __mmask16 keep = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        const __m512i at = _mm512_maskz_loadu_epi32(keep, table + k0);
        const int32_t low = _mm512_mask_reduce_min_epi32(keep, at);
        const int64_t span = width - low < 16 ? width - low : 16;
        const __m512 values = _mm512_maskz_loadu_ps((__mmask16)((1u << span) - 1u), row + low);
        const __m512i lanes = _mm512_sub_epi32(at, _mm512_set1_epi32(low));
        _mm512_mask_storeu_ps(target + k0, keep, _mm512_permutexvar_ps(lanes, values));
    }
}
#endif

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const char *source = (const char *)data[0];
    const void *index = data[1];
    char *out = (char *)data[2];
    int64_t *status = (int64_t *)data[3];
    const int64_t outer = sizes[0], width = sizes[1], count = sizes[2], inner = sizes[3];
    const int64_t index_bytes = sizes[4];
    const int64_t bad = first_out_of_range(index, index_bytes, count, width);
    if (bad) {
        status[0] = bad;
        return;
    }
    int32_t table[MOST_POSITIONS];
    const int local = count <= MOST_POSITIONS;
    if (local)
        for (int64_t k = 0; k < count; k++) {
            const int64_t i = position(index, index_bytes, k);
            table[k] = (int32_t)(i < 0 ? i + width : i);
        }
    if (local && inner == 1) {  /* one byte per position (a quantized model's nearest
                                  * Resize: a memcpy per byte cost 10x the gather) */
        for (int64_t o = 0; o < outer; o++) {
            const uint8_t *row = (const uint8_t *)source + o * width;
            uint8_t *target = (uint8_t *)out + o * count;
            for (int64_t k = 0; k < count; k++) target[k] = row[table[k]];
        }
        return;
    }
    if (local && inner == 4) {  /* one float (or int32) per position: a gather */
#if defined(__AVX512F__)
        if (near_chunks(table, count)) {  /* each 16 positions one load and one permute */
            for (int64_t o = 0; o < outer; o++)
                select_near((const float *)source + o * width, width, table, count,
                            (float *)out + o * count);
            return;
        }
#endif
        for (int64_t o = 0; o < outer; o++) {
            const uint32_t *row = (const uint32_t *)source + o * width;
            uint32_t *target = (uint32_t *)out + o * count;
            for (int64_t k = 0; k < count; k++) target[k] = row[table[k]];
        }
        return;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < count; k++) {
            int64_t i = local ? table[k] : position(index, index_bytes, k);
            if (i < 0) i += width;
            memcpy(out + (o * count + k) * inner, source + (o * width + i) * inner,
                   (size_t)inner);
        }
}
