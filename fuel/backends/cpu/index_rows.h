/* What gather_rows.c and scatter_rows.c share (prepended to each source by its launcher in
 * indexing.py / scatter.py): reading a position from an int32 or int64 index, and the range
 * check they run before writing anything. */
#include <stdint.h>
#include <string.h>

static inline int64_t position(const void *index, int64_t index_bytes, int64_t at) {
    return index_bytes == 8 ? ((const int64_t *)index)[at] : ((const int32_t *)index)[at];
}

/* 1 + the flat position of the first of `count` positions outside [-width, width) (negative
 * ones wrap once), else 0. */
static inline int64_t first_out_of_range(const void *index, int64_t index_bytes, int64_t count,
                                         int64_t width) {
    for (int64_t at = 0; at < count; at++) {
        const int64_t i = position(index, index_bytes, at);
        if (i < -width || i >= width) return 1 + at;
    }
    return 0;
}
