/* What conv.c, depthwise.c and pool.c share (each library's source is this file, then its
 * own): the includes, the vector switch, the launch geometry, the team size and the
 * convolution epilogue (bias, residual, activation).
 *
 * sizes = {form, threads, N, C, H, W, M, KH, KW, OH, OW, stride_h, stride_w, dilation_h,
 *          dilation_w, pad_top, pad_left, groups, activation}
 *
 * Threads: sizes[1] is the team a launch uses (convolution_c.py's choice: FUEL_THREADS or the
 * process's cores for a launch large enough to pay for waking them, else one; the judge times
 * the one-thread variant beside it). The machine's load is not consulted here.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VECTOR 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, groups, act;
} Shape;

/* This thread's scratch buffer `slot` (0-3), 64-byte aligned, grown to at least `floats`
 * and kept for the thread's life: a launch reuses it instead of a fresh allocation, whose
 * pages (past malloc's mmap threshold) would fault in again on every launch. */
static inline float *thread_buffer(int slot, size_t floats) {
    static __thread float *buffers[4];
    static __thread size_t sizes[4];
    if (sizes[slot] < floats || buffers[slot] == NULL) {
        free(buffers[slot]);
        const size_t bytes = (sizeof(float) * (floats > 0 ? floats : 1) + 63) / 64 * 64;
        buffers[slot] = aligned_alloc(64, bytes);
        sizes[slot] = buffers[slot] != NULL ? floats : 0;
    }
    return buffers[slot];
}

static inline Shape shape_of(const int64_t *sizes) {
    const Shape s = {sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], sizes[7], sizes[8],
                     sizes[9], sizes[10], sizes[11], sizes[12], sizes[13], sizes[14],
                     sizes[15], sizes[16], sizes[17], sizes[18]};
    return s;
}

/* Activations: 0 none, 1 relu, 2 clip(alpha, beta), 3 sigmoid, 4 silu, 5 hard sigmoid
 * max(0, min(1, alpha * x + beta)), 6 hard swish (x * hard sigmoid(1/6, 1/2)), 7 leaky relu
 * (alpha), 8 prelu (slope[m]), 9 tanh. */
enum { NONE = 0, RELU, CLIP, SIGMOID, SILU, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, PRELU, TANH };


static inline float activate(float v, int64_t act, float alpha, float beta, float slope) {
    switch (act) {
    case RELU: return v > 0.0f ? v : 0.0f;
    case CLIP: return v < alpha ? alpha : (v > beta ? beta : v);
    case SIGMOID: return 1.0f / (1.0f + expf(-v));
    case SILU: return v / (1.0f + expf(-v));
    case HARD_SIGMOID: {
        float t = alpha * v + beta;
        return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    }
    case HARD_SWISH: {
        float t = v * (1.0f / 6.0f) + 0.5f;
        return v * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    }
    case LEAKY_RELU: return v >= 0.0f ? v : alpha * v;
    case PRELU: return v >= 0.0f ? v : slope * v;
    case TANH: return tanhf(v);
    default: return v;
    }
}

#if defined(VECTOR)
/* exp over 8 lanes: Cephes' expf (range reduction by ln 2, a degree-5 polynomial), about
 * 2 ulp; inputs clamped to [-88.4, 88.4]. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                      _mm256_set1_ps(88.3762626647949f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                               _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

/* sigmoid, silu or tanh over y[0, count) 8 lanes at a time; returns how many it did. */
static int64_t smooth8(float *y, int64_t count, int64_t act) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        const __m256 v = _mm256_loadu_ps(y + i);
        __m256 out;
        if (act == TANH) {  /* 2 sigmoid(2v) - 1 */
            const __m256 e = exp8(_mm256_mul_ps(v, _mm256_set1_ps(-2.0f)));
            out = _mm256_sub_ps(_mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(one, e)), one);
        } else {
            const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(
                _mm256_sub_ps(_mm256_setzero_ps(), v))));
            out = act == SILU ? _mm256_mul_ps(v, sig) : sig;
        }
        /* NaN in, NaN out (the clamp in exp8 would turn it into a number) */
        out = _mm256_blendv_ps(out, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        _mm256_storeu_ps(y + i, out);
    }
    return i;
}
#endif

/* y[0, count) = act(y + bias + residual), residual may be NULL. */
static void finish(float *restrict y, int64_t count, float bias, const float *restrict residual,
                   int64_t act, float alpha, float beta, float slope) {
    if (residual != NULL)
        for (int64_t i = 0; i < count; i++) y[i] += bias + residual[i];
    else if (bias != 0.0f)
        for (int64_t i = 0; i < count; i++) y[i] += bias;
    switch (act) {
    case NONE: return;
    case RELU:
        for (int64_t i = 0; i < count; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        return;
    case CLIP:
        for (int64_t i = 0; i < count; i++) {
            float v = y[i] < alpha ? alpha : y[i];
            y[i] = v > beta ? beta : v;
        }
        return;
    case HARD_SWISH:
        for (int64_t i = 0; i < count; i++) {
            float t = y[i] * (1.0f / 6.0f) + 0.5f;
            t = t < 0.0f ? 0.0f : t;
            y[i] *= t > 1.0f ? 1.0f : t;
        }
        return;
    case LEAKY_RELU:
        for (int64_t i = 0; i < count; i++) y[i] = y[i] >= 0.0f ? y[i] : alpha * y[i];
        return;
    default: {
        int64_t i = 0;
#if defined(VECTOR)
        if (act == SIGMOID || act == SILU || act == TANH) i = smooth8(y, count, act);
#endif
        for (; i < count; i++) y[i] = activate(y[i], act, alpha, beta, slope);
    }
    }
}

