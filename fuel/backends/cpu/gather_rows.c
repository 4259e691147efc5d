/* gather along the last dim of dense row-major operands whose rows match (a loss picking each
 * row's target): out[r, k] = source[r, index[r, k]] for every row r and k. Negative positions
 * wrap once. When a position is out of range, status[0] = 1 + its flat position and nothing
 * is written.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {source, index, out, status}
 *   sizes = {rows, width (source's last dim), count (index's last dim), index_bytes (4 or 8),
 *            item_bytes (1, 2, 4 or 8)}
 *   strides is unused (NULL).
 */
/* position() and first_out_of_range() come from index_rows.h, prepended to this source. */

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const char *source = (const char *)data[0];
    const void *index = data[1];
    char *out = (char *)data[2];
    int64_t *status = (int64_t *)data[3];
    const int64_t rows = sizes[0], width = sizes[1], count = sizes[2], index_bytes = sizes[3];
    const int64_t item = sizes[4];
    const int64_t bad = first_out_of_range(index, index_bytes, rows * count, width);
    if (bad) {
        status[0] = bad;
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < count; k++) {
            int64_t i = position(index, index_bytes, r * count + k);
            if (i < 0) i += width;
            memcpy(out + (r * count + k) * item, source + (r * width + i) * item, (size_t)item);
        }
}
