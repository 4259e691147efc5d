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
 *   quantize: data = {x (float32), out (8-bit)}, sizes = {3, count, threads, signed, zero,
 *           scale (float32 bits)}: out = saturate(round_half_even(x / scale) + zero)
 *   dequantize: data = {x (8-bit), out (float32)}, sizes = {4, count, threads, signed, zero,
 *           scale (float32 bits)}: out = (float)(x - zero) * scale
 *   (ONNX QuantizeLinear / DequantizeLinear per tensor, with their float32 steps: a division,
 *   not a multiply by the reciprocal, as onnxruntime's.)
 *
 * The table lookup uses AVX512-VBMI byte permutes (64 bytes per three instructions) where the
 * machine has them.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512VBMI__) || defined(__AVX512F__)
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

/* QuantizeLinear of n values: x / scale, rounded half to even, + zero, saturated. */
static void quantize_run(const float *x, uint8_t *out, int64_t n, float scale, float zero,
                         int is_signed) {
    const float low = is_signed ? -128.0f : 0.0f, high = is_signed ? 127.0f : 255.0f;
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zero);
    const __m512 lo = _mm512_set1_ps(low), hi = _mm512_set1_ps(high);
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), s),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, z), lo), hi);
        _mm_storeu_si128((__m128i *)(out + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
    }
#endif
    for (; i < n; i++) {
        float v = rintf(x[i] / scale) + zero;
        v = v > low ? v : low;
        v = v < high ? v : high;
        const int32_t q = (int32_t)v;
        out[i] = (uint8_t)q;
    }
}

/* DequantizeLinear of n values: (x - zero) as float32 times the scale. */
static void dequantize_run(const uint8_t *x, float *out, int64_t n, float scale, int32_t zero,
                           int is_signed) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 s = _mm512_set1_ps(scale);
    const __m512i z = _mm512_set1_epi32(zero);
    for (; i + 16 <= n; i += 16) {
        const __m128i bytes = _mm_loadu_si128((const __m128i *)(x + i));
        const __m512i wide = is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(wide, z)),
                                                s));
    }
#endif
    for (; i < n; i++) {
        const int32_t v = is_signed ? (int32_t)(int8_t)x[i] : (int32_t)x[i];
        out[i] = (float)(v - zero) * scale;
    }
}

/* What a pass's units share. */
typedef struct {
    void **data;
    int64_t count, outer, inner, parts, a_outer, a_inner, b_outer, b_inner;
    int multiply, is_signed;
    int32_t az, bz;
    float yz, f0, f1, f2, low, high;
} Pass;

static void quantize_unit(void *context, int64_t unit) {
    const Pass *pass = context;
    const int64_t start = unit * CHUNK;
    const int64_t n = pass->count - start < CHUNK ? pass->count - start : CHUNK;
    if (pass->multiply) /* dequantize */
        dequantize_run((const uint8_t *)pass->data[0] + start, (float *)pass->data[1] + start, n,
                       pass->f0, pass->az, pass->is_signed);
    else
        quantize_run((const float *)pass->data[0] + start, (uint8_t *)pass->data[1] + start, n,
                     pass->f0, (float)pass->az, pass->is_signed);
}

static void lookup_unit(void *context, int64_t unit) {
    const Pass *pass = context;
    const int64_t start = unit * CHUNK;
    const int64_t n = pass->count - start < CHUNK ? pass->count - start : CHUNK;
    lookup((const uint8_t *)pass->data[0] + start, pass->data[1],
           (uint8_t *)pass->data[2] + start, n);
}

/* A run of at most CHUNK elements of one output row. */
static void binary_unit(void *context, int64_t unit) {
    const Pass *pass = context;
    void **data = pass->data;
    const int64_t o = unit / pass->parts, start = unit % pass->parts * CHUNK, inner = pass->inner;
    const int64_t n = inner - start < CHUNK ? inner - start : CHUNK;
    const int64_t a_at = o * pass->a_outer + start * pass->a_inner;
    const int64_t b_at = o * pass->b_outer + start * pass->b_inner;
    if (pass->is_signed)
        binary_row_int8_t((const int8_t *)data[0] + a_at, (const int8_t *)data[1] + b_at,
                          (int8_t *)data[2] + o * inner + start, n, pass->a_inner,
                          pass->b_inner, pass->multiply, pass->az, pass->bz, pass->yz, pass->f0,
                          pass->f1, pass->f2, pass->low, pass->high);
    else
        binary_row_uint8_t((const uint8_t *)data[0] + a_at, (const uint8_t *)data[1] + b_at,
                           (uint8_t *)data[2] + o * inner + start, n, pass->a_inner,
                           pass->b_inner, pass->multiply, pass->az, pass->bz, pass->yz, pass->f0,
                           pass->f1, pass->f2, pass->low, pass->high);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (take_pool(data, sizes)) return;
    Pass pass = {data};
    if (sizes[0] == 0) {
        const int64_t threads = sizes[2];
        pass.count = sizes[1];
        run_units((pass.count + CHUNK - 1) / CHUNK, threads, lookup_unit, &pass);
        return;
    }
    if (sizes[0] == 3 || sizes[0] == 4) { /* quantize, dequantize */
        pass.count = sizes[1];
        pass.multiply = sizes[0] == 4;
        pass.is_signed = (int)sizes[3];
        pass.az = (int32_t)sizes[4];
        pass.f0 = float_of(sizes[5]);
        run_units((pass.count + CHUNK - 1) / CHUNK, sizes[2], quantize_unit, &pass);
        return;
    }
    pass.multiply = sizes[0] == 2;
    pass.outer = sizes[1];
    pass.inner = sizes[2];
    pass.a_outer = sizes[3];
    pass.a_inner = sizes[4];
    pass.b_outer = sizes[5];
    pass.b_inner = sizes[6];
    pass.is_signed = (int)sizes[7];
    pass.az = (int32_t)sizes[8];
    pass.bz = (int32_t)sizes[9];
    pass.yz = (float)sizes[10];
    pass.f0 = float_of(sizes[11]);
    pass.f1 = float_of(sizes[12]);
    pass.f2 = float_of(sizes[13]);
    const int64_t threads = sizes[14];
    pass.low = pass.is_signed ? -128.0f : 0.0f;
    pass.high = pass.is_signed ? 127.0f : 255.0f;
    /* units: each output row cut into runs of at most CHUNK elements */
    pass.parts = (pass.inner + CHUNK - 1) / CHUNK;
    run_units(pass.outer * pass.parts, threads, binary_unit, &pass);
}
