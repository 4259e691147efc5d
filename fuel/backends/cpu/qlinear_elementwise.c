/* 8-bit elementwise kernels for fuel's CPU backend (qlinear_elementwise.py drives them):
 * QLINEAR_LOOKUP, a 256-entry table indexed by each byte of x, and QLINEAR_BINARY,
 * onnxruntime's QLinearAdd and QLinearMul arithmetic, one pass each.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   lookup: data = {x, table (256 bytes, by x's byte), out}, sizes = {0, count, threads}
 *   binary: data = {a, b, out}, sizes = {1 (add) or 2 (mul), outer, inner, a_outer_step,
 *           a_inner_step, b_outer_step, b_inner_step, signed, a_zero, b_zero, y_zero, f0, f1,
 *           f2, threads}: element (o, i) of the (outer, inner) output reads a[o * a_outer_step + i *
 *           a_inner_step] and b likewise (a step 0 broadcasts); f0..f2 are float32 constants
 *           held in the low 32 bits: add: a / y scale ratio, b / y scale ratio and y_zero less
 *           the zero points' share, v = fma(a, f0, fma(b, f1, f2)); mul: a_scale * b_scale /
 *           y_scale, v = (a - a_zero)(b - b_zero) * f0 + y_zero (the exact integer product).
 *           v rounds half to even and saturates to the dtype.
 *
 * The table lookup uses AVX512-VBMI byte permutes (64 bytes per three instructions) where the
 * machine has them.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512VBMI__)
#include <immintrin.h>
#endif

static float float_of(int64_t bits) {
    uint32_t low = (uint32_t)bits;
    float value;
    memcpy(&value, &low, sizeof value);
    return value;
}

static void lookup(const uint8_t *x, const uint8_t *table, uint8_t *out, int64_t count) {
    int64_t i = 0;
#if defined(__AVX512VBMI__)
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    for (; i + 64 <= count; i += 64) {
        const __m512i index = _mm512_loadu_si512(x + i);
        const __m512i low = _mm512_permutex2var_epi8(t0, index, t1);
        const __m512i high = _mm512_permutex2var_epi8(t2, index, t3);
        _mm512_storeu_si512(out + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(index), low,
                                                            high));
    }
#endif
    for (; i < count; i++)
        out[i] = table[x[i]];
}

/* v rounded half to even (the default rounding mode), saturated to [low, high] */
static inline int32_t saturated(float v, float low, float high) {
    v = rintf(v);
    v = v < low ? low : (v > high ? high : v);
    return (int32_t)v;
}

#define BINARY_ROW(T)                                                                         \
    static void binary_row_##T(const T *a, const T *b, T *out, int64_t n, int64_t a_step,     \
                               int64_t b_step, int multiply, int32_t az, int32_t bz,          \
                               float yz, float f0, float f1, float f2, float low,             \
                               float high) {                                                  \
        if (multiply) {                                                                       \
            if (a_step == 1 && b_step == 0) {                                                 \
                const int32_t shifted = (int32_t)b[0] - bz;                                   \
                for (int64_t i = 0; i < n; i++)                                               \
                    out[i] = (T)saturated((float)(((int32_t)a[i] - az) * shifted) * f0 + yz,  \
                                          low, high);                                         \
            } else if (a_step == 1 && b_step == 1) {                                          \
                for (int64_t i = 0; i < n; i++)                                               \
                    out[i] = (T)saturated(                                                    \
                        (float)(((int32_t)a[i] - az) * ((int32_t)b[i] - bz)) * f0 + yz, low,  \
                        high);                                                                \
            } else {                                                                          \
                for (int64_t i = 0; i < n; i++)                                               \
                    out[i] = (T)saturated((float)(((int32_t)a[i * a_step] - az) *             \
                                                  ((int32_t)b[i * b_step] - bz)) * f0 + yz,   \
                                          low, high);                                         \
            }                                                                                 \
        } else {                                                                              \
            if (a_step == 1 && b_step == 0) {                                                 \
                const float part = fmaf((float)b[0], f1, f2);                                 \
                for (int64_t i = 0; i < n; i++)                                               \
                    out[i] = (T)saturated(fmaf((float)a[i], f0, part), low, high);            \
            } else if (a_step == 1 && b_step == 1) {                                          \
                for (int64_t i = 0; i < n; i++)                                               \
                    out[i] = (T)saturated(fmaf((float)a[i], f0, fmaf((float)b[i], f1, f2)),   \
                                          low, high);                                         \
            } else {                                                                          \
                for (int64_t i = 0; i < n; i++)                                               \
                    out[i] = (T)saturated(fmaf((float)a[i * a_step], f0,                      \
                                               fmaf((float)b[i * b_step], f1, f2)),           \
                                          low, high);                                         \
            }                                                                                 \
        }                                                                                     \
    }

BINARY_ROW(uint8_t)
BINARY_ROW(int8_t)

#define CHUNK 16384 /* elements per unit of threaded work */

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (sizes[0] == 0) {
        const int64_t count = sizes[1], threads = sizes[2], units = (count + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (int64_t unit = 0; unit < units; unit++) {
            const int64_t start = unit * CHUNK, n = count - start < CHUNK ? count - start : CHUNK;
            lookup((const uint8_t *)data[0] + start, data[1], (uint8_t *)data[2] + start, n);
        }
        return;
    }
    const int multiply = sizes[0] == 2;
    const int64_t outer = sizes[1], inner = sizes[2];
    const int64_t a_outer = sizes[3], a_inner = sizes[4], b_outer = sizes[5], b_inner = sizes[6];
    const int is_signed = (int)sizes[7];
    const int32_t az = (int32_t)sizes[8], bz = (int32_t)sizes[9];
    const float yz = (float)sizes[10];
    const float f0 = float_of(sizes[11]), f1 = float_of(sizes[12]), f2 = float_of(sizes[13]);
    const int64_t threads = sizes[14];
    const float low = is_signed ? -128.0f : 0.0f, high = is_signed ? 127.0f : 255.0f;
    /* units: each output row cut into runs of at most CHUNK elements */
    const int64_t parts = (inner + CHUNK - 1) / CHUNK, units = outer * parts;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t unit = 0; unit < units; unit++) {
        const int64_t o = unit / parts, start = unit % parts * CHUNK;
        const int64_t n = inner - start < CHUNK ? inner - start : CHUNK;
        const int64_t a_at = o * a_outer + start * a_inner, b_at = o * b_outer + start * b_inner;
        if (is_signed)
            binary_row_int8_t((const int8_t *)data[0] + a_at, (const int8_t *)data[1] + b_at,
                              (int8_t *)data[2] + o * inner + start, n, a_inner, b_inner,
                              multiply, az, bz, yz, f0, f1, f2, low, high);
        else
            binary_row_uint8_t((const uint8_t *)data[0] + a_at, (const uint8_t *)data[1] + b_at,
                               (uint8_t *)data[2] + o * inner + start, n, a_inner, b_inner,
                               multiply, az, bz, yz, f0, f1, f2, low, high);
    }
}
