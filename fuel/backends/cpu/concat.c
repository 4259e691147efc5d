/* Concatenation of dense parts along one dim for fuel's CPU backend (the fuel_kernel ABI; a
 * bound launcher, so a replay runs it inside its neighbours' C launch sequence):
 *
 *   data  = {out, part 0, part 1, ...}
 *   sizes = {parts, outer, out_row_bytes, part 0 row bytes, part 1 row bytes, ...}
 *
 * The dims before the axis are `outer` rows; in each, every part's row (its extent along the
 * axis times the dims after it, in bytes) is copied after the previous part's. */
#include <stdint.h>
#include <string.h>

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const int64_t parts = sizes[0], outer = sizes[1], row = sizes[2];
    char *out = data[0];
    for (int64_t o = 0; o < outer; o++) {
        char *target = out + o * row;
        for (int64_t p = 0; p < parts; p++) {
            const int64_t bytes = sizes[3 + p];
            if (bytes > 0) memcpy(target, (const char *)data[1 + p] + o * bytes, (size_t)bytes);
            target += bytes;
        }
    }
}
