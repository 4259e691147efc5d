/* fuel's C float32 binary arithmetic for the CPU backend (the fuel_kernel ABI), for operands
 * of one contiguous shape: data = {x, y, out}, sizes = {operation, count}.
 * Operations: 0 add, 1 subtract, 2 multiply, 3 divide; IEEE float32 with contraction off, so
 * every result is NumPy's. out may be x or y itself (in place), never a partial overlap. */
#include <stdint.h>

void fuel_kernel(void **data, const int64_t *sizes, void *strides) {
    (void)strides;
    const float *x = data[0], *y = data[1];
    float *out = data[2];
    const int64_t count = sizes[1];
    switch (sizes[0]) {
    case 0:
        for (int64_t i = 0; i < count; i++) out[i] = x[i] + y[i];
        break;
    case 1:
        for (int64_t i = 0; i < count; i++) out[i] = x[i] - y[i];
        break;
    case 2:
        for (int64_t i = 0; i < count; i++) out[i] = x[i] * y[i];
        break;
    case 3:
        for (int64_t i = 0; i < count; i++) out[i] = x[i] / y[i];
        break;
    }
}
