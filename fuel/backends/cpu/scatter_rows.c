/* scatter_elements along the last dim of dense row-major operands, no reduction (a max
 * pool's gradient routed to its maxima, a one-hot row): out = data (copied unless out is
 * data's memory; data may be one element broadcast, a zeros constant), then out[r, index[r, k]] = updates[r, k] for every row r and k in order (the
 * last of duplicate positions wins). Negative positions wrap once. When a position is out of
 * range, status[0] = 1 + its flat position and nothing is written.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {data, index, updates, out, status}
 *   sizes = {rows, width (data's last dim), count (index's last dim), index_bytes (4 or 8),
 *            item_bytes (4 or 8), broadcast (1: data is one element for every position),
 *            add (1: float32 or float64 elements, summed)}
 *   strides is unused (NULL).
 */
/* position() and first_out_of_range() come from index_rows.h, prepended to this source. */

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const char *source = (const char *)data[0];
    const void *index = data[1];
    const char *updates = (const char *)data[2];
    char *out = (char *)data[3];
    int64_t *status = (int64_t *)data[4];
    const int64_t rows = sizes[0], width = sizes[1], count = sizes[2], index_bytes = sizes[3];
    const int64_t item = sizes[4], broadcast = sizes[5], add = sizes[6], total = rows * width;
    const int64_t bad = first_out_of_range(index, index_bytes, rows * count, width);
    if (bad) {
        status[0] = bad;
        return;
    }
    if (broadcast && item == 4)
        for (int64_t at = 0; at < total; at++) ((uint32_t *)out)[at] = *(const uint32_t *)source;
    else if (broadcast)
        for (int64_t at = 0; at < total; at++) ((uint64_t *)out)[at] = *(const uint64_t *)source;
    else if (out != source)
        memcpy(out, source, (size_t)(total * item));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < count; k++) {
            int64_t i = position(index, index_bytes, r * count + k);
            if (i < 0) i += width;
            if (add && item == 4)
                ((float *)out)[r * width + i] += ((const float *)updates)[r * count + k];
            else if (add)
                ((double *)out)[r * width + i] += ((const double *)updates)[r * count + k];
            else if (item == 4)
                ((uint32_t *)out)[r * width + i] = ((const uint32_t *)updates)[r * count + k];
            else
                ((uint64_t *)out)[r * width + i] = ((const uint64_t *)updates)[r * count + k];
        }
}
