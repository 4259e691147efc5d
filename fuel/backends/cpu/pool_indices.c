/* Max pooling's indices over 2-d windows without padding or dilation (training's pooling):
 * out[p, y, x] = the row-major plane position of the first maximum of window (y, x) of plane
 * p, or of its first NaN (NumPy's argmax order). float32 planes, any strides.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data    = {x, out}                       (float *, int64_t *)
 *   sizes   = {planes, height, width, out_height, out_width, kernel_h, kernel_w,
 *              stride_h, stride_w}
 *   strides = {plane, row, column}           (x's, in elements; out is dense)
 */
#include <math.h>
#include <stdint.h>

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    const float *x = (const float *)data[0];
    int64_t *out = (int64_t *)data[1];
    const int64_t planes = sizes[0], width = sizes[2], oh = sizes[3], ow = sizes[4];
    const int64_t kh = sizes[5], kw = sizes[6], sh = sizes[7], sw = sizes[8];
    const int64_t plane_step = strides[0], row_step = strides[1], column_step = strides[2];
    for (int64_t p = 0; p < planes; p++) {
        const float *plane = x + p * plane_step;
        int64_t *target = out + p * oh * ow;
        for (int64_t y = 0; y < oh; y++)
            for (int64_t c = 0; c < ow; c++) {
                int64_t best_row = y * sh, best_column = c * sw;
                float best = plane[best_row * row_step + best_column * column_step];
                for (int64_t i = 0; i < kh && !isnan(best); i++)
                    for (int64_t j = 0; j < kw; j++) {
                        const int64_t row = y * sh + i, column = c * sw + j;
                        const float value = plane[row * row_step + column * column_step];
                        if (value > best || isnan(value)) {
                            best = value, best_row = row, best_column = column;
                            if (isnan(value)) break;
                        }
                    }
                target[y * ow + c] = best_row * width + best_column;
            }
    }
}
