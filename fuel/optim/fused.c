/* fuel's fused Adam/AdamW step for the CPU: every parameter of a group updated in place, in
 * one call and one pass over each parameter's memory (the fuel_kernel ABI).
 *
 * data:    [scalars (double, 8 per tensor), then per tensor: param, grad, exp_avg,
 *           exp_avg_sq, max_exp_avg_sq (NULL without amsgrad)]
 * sizes:   [tensor count, dtype (0 float32, 1 float64), flags, threads, numel of each tensor]
 *          flags: 1 maximize, 2 amsgrad
 * scalars: [decay (param factor: 1 - lr * weight_decay for AdamW, else 1), l2 (Adam's
 *           weight_decay added to the gradient, else 0), 1 - beta1, beta2, 1 - beta2,
 *           sqrt(1 - beta2^step), eps, -lr / (1 - beta1^step)]
 *
 * Each element follows torch's single-tensor Adam in its dtype, operation for operation:
 * param *= decay; grad += l2 * param; exp_avg = lerp(exp_avg, grad, 1 - beta1) (fma, as
 * ATen's lerp); exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad (addcmul);
 * denom = sqrt(exp_avg_sq) / bc2_sqrt + eps; param += (-step_size) * exp_avg / denom
 * (addcdiv). The step-dependent scalars are computed in double on the host, as torch does.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define ADAM_BODY(T, SQRT, FMA)                                                             \
    {                                                                                       \
        T *p = (T *)param, *g = (T *)grad, *m = (T *)exp_avg, *v = (T *)exp_avg_sq;         \
        T *mx = (T *)max_sq;                                                                \
        const T decay = (T)s[0], l2 = (T)s[1], c1 = (T)s[2], beta2 = (T)s[3];             \
        const T c2 = (T)s[4], bc2 = (T)s[5], eps = (T)s[6], step = (T)s[7];              \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n > 32768)") \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            T gi = maximize ? -g[i] : g[i];                                                 \
            T pi = p[i];                                                                    \
            if (use_decay) pi = pi * decay;                                                 \
            if (use_l2) gi = gi + l2 * pi;                                                  \
            T mi = FMA(c1, gi - m[i], m[i]);                                                \
            T vi = v[i] * beta2;                                                            \
            vi = vi + c2 * gi * gi;                                                         \
            m[i] = mi;                                                                      \
            v[i] = vi;                                                                      \
            if (amsgrad) {                                                                  \
                vi = mx[i] > vi ? mx[i] : vi;                                               \
                mx[i] = vi;                                                                 \
            }                                                                               \
            T denom = SQRT(vi) / bc2 + eps;                                                 \
            p[i] = pi + step * mi / denom;                                                  \
        }                                                                                   \
    }

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    const int64_t count = sizes[0], dtype = sizes[1], flags = sizes[2];
    const int threads = (int)sizes[3];
    const int maximize = (flags & 1) != 0, amsgrad = (flags & 2) != 0;
    const double *scalars = (const double *)data[0];
    for (int64_t t = 0; t < count; ++t) {
        const double *s = scalars + 8 * t;
        void *param = data[1 + 5 * t], *grad = data[2 + 5 * t];
        void *exp_avg = data[3 + 5 * t], *exp_avg_sq = data[4 + 5 * t];
        void *max_sq = data[5 + 5 * t];
        const int64_t n = sizes[4 + t];
        const int use_decay = s[0] != 1.0, use_l2 = s[1] != 0.0;
        if (dtype == 0)
            ADAM_BODY(float, sqrtf, fmaf)
        else
            ADAM_BODY(double, sqrt, fma)
    }
}
