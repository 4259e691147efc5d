/* fuel's C indexing copies for the CPU backend, one entry point (the fuel_kernel ABI):
 *
 *   index_copy: data    = {target, index, source, out, status}
 *               sizes   = {item_bytes, dims, dim, count, index_bytes, copy_target, shape...}
 *               strides = {target strides..., source strides..., out strides...} (elements)
 *
 * out = target (copied only when copy_target, i.e. out is not target's memory), then
 * out[..., index[i], ...] = source[..., i, ...] along dim for i in order (the last of
 * duplicate positions wins). Negative positions wrap once. When a position is out of range,
 * status[0] = 1 + i of the first such i and nothing is written. */
#include <stdint.h>
#include <string.h>

#define MAX_DIMS 16

/* dst[x] = src[x] over shape (element strides), the innermost dim as one memcpy when both
 * walk it contiguously. */
static void strided_copy(char *dst, const int64_t *dst_strides, const char *src,
                         const int64_t *src_strides, const int64_t *shape, int64_t dims,
                         int64_t item) {
    for (int64_t d = 0; d < dims; d++)
        if (shape[d] == 0) return;
    int64_t inner = 1, inner_dims = 0;
    if (dims > 0 && dst_strides[dims - 1] == 1 && src_strides[dims - 1] == 1) {
        inner = shape[dims - 1];
        inner_dims = 1;
    }
    const int64_t outer_dims = dims - inner_dims;
    int64_t counter[MAX_DIMS] = {0};
    for (;;) {
        int64_t dst_offset = 0, src_offset = 0;
        for (int64_t d = 0; d < outer_dims; d++) {
            dst_offset += counter[d] * dst_strides[d];
            src_offset += counter[d] * src_strides[d];
        }
        memcpy(dst + dst_offset * item, src + src_offset * item, (size_t)(inner * item));
        int64_t d = outer_dims - 1;
        for (; d >= 0; d--) {
            if (++counter[d] < shape[d]) break;
            counter[d] = 0;
        }
        if (d < 0) return;
    }
}

static int64_t position_at(const void *index, int64_t index_bytes, int64_t i) {
    return index_bytes == 4 ? (int64_t)((const int32_t *)index)[i] : ((const int64_t *)index)[i];
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    const char *target = data[0], *source = data[2];
    const void *index = data[1];
    char *out = data[3];
    int64_t *status = data[4];
    const int64_t item = sizes[0], dims = sizes[1], dim = sizes[2], count = sizes[3];
    const int64_t index_bytes = sizes[4], copy_target = sizes[5];
    const int64_t *shape = sizes + 6;
    const int64_t *target_strides = strides, *source_strides = strides + dims,
                  *out_strides = strides + 2 * dims;
    const int64_t size = shape[dim];
    for (int64_t i = 0; i < count; i++) {
        const int64_t position = position_at(index, index_bytes, i);
        if (position < -size || position >= size) {
            status[0] = 1 + i;
            return;
        }
    }
    if (copy_target)
        strided_copy(out, out_strides, target, target_strides, shape, dims, item);
    /* One slice per position: every dim but ``dim``. */
    int64_t slice_shape[MAX_DIMS], slice_out[MAX_DIMS], slice_source[MAX_DIMS], slice_dims = 0;
    for (int64_t d = 0; d < dims; d++) {
        if (d == dim) continue;
        slice_shape[slice_dims] = shape[d];
        slice_out[slice_dims] = out_strides[d];
        slice_source[slice_dims] = source_strides[d];
        slice_dims++;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t position = position_at(index, index_bytes, i);
        if (position < 0) position += size;
        strided_copy(out + position * out_strides[dim] * item, slice_out,
                     source + i * source_strides[dim] * item, slice_source, slice_shape,
                     slice_dims, item);
    }
}
