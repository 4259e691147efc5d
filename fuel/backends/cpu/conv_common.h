/* What conv.c, depthwise.c and workers.c share (each library's source is this file, then its
 * own): the includes, the vector switch, a 16 x 16 register transpose, the launch geometry,
 * the team size and the convolution epilogue (bias, residual, activation).
 *
 * sizes = {form, threads, N, C, H, W, M, KH, KW, OH, OW, stride_h, stride_w, dilation_h,
 *          dilation_w, pad_top, pad_left, groups, activation}
 *
 * Threads: sizes[1] is the team a launch uses (convolution_c.py's choice: FUEL_THREADS or the
 * process's cores for a launch large enough to pay for waking them, else one; the judge times
 * the one-thread variant beside it). The machine's load is not consulted here. The main
 * loops run on run_units' pool (below), which never waits for a helper that has not started:
 * on a busy machine a preempted helper costs its unfinished unit, not a scheduler slice at a
 * fork-join barrier.
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
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__AVX512F__)
/* r[i][j] -> r[j][i] for a 16 x 16 block of floats in registers (matmul_gemm.c's weight
 * packing, conv_lanes.h's interleaving copy and tile store): pairs, then quads within
 * each 128-bit lane, then the lanes (two shuffle_f32x4 rounds). */
static inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {  /* u[g + c], lane L: rows g..g+3 at column 4L + c */
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]),
                      c = _mm512_castps_pd(t[g + 2]), d = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; c++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88),
                     v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd),
                     w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88),
                     w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}
#endif

typedef struct {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, groups, act;
    int64_t blocked;  /* input, residual and output NCHW16c (conv_lanes.h's blocked launch) */
    int64_t out_m;    /* the output's channels an image, when more than m (its channels a
                       * slice of a channel concat's: conv_lanes.h's blocked launch), else 0 */
} Shape;

/* The indices [*lo, *hi) of `count` positions `step` apart from `start` (an input index,
 * negative in the padding) that fall inside [0, size): 0 <= start + i * step < size (empty
 * at *lo where none does). */
static inline void inside_span(int64_t start, int64_t step, int64_t count, int64_t size,
                               int64_t *lo, int64_t *hi) {
    int64_t l = start >= 0 ? 0 : (-start + step - 1) / step;
    int64_t h = size - start <= 0 ? 0 : (size - start - 1) / step + 1;
    if (l > count) l = count;
    if (h > count) h = count;
    if (h < l) h = l;
    *lo = l, *hi = h;
}

/* Along one axis (its pad before, stride, taps, dilation, input size and output count), the
 * outputs [*lo, *hi) whose every tap is inside the input: o * stride - pad >= 0 and
 * o * stride - pad + (taps - 1) * dilation < size (empty at *hi where none is). */
static inline void interior_span(int64_t pad, int64_t stride, int64_t taps, int64_t dilation,
                                 int64_t size, int64_t count, int64_t *lo, int64_t *hi) {
    int64_t l = pad <= 0 ? 0 : (pad + stride - 1) / stride;
    const int64_t last = size - 1 - (taps - 1) * dilation + pad;  /* o * stride <= last */
    int64_t h = last < 0 ? 0 : last / stride + 1;
    if (h > count) h = count;
    if (l > h) l = h;
    *lo = l, *hi = h;
}

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

/* ------------------------------------------------------------ the work pool
 * run_units(count, team, task, context) calls task(context, unit) once for every unit in
 * [0, count) on the calling thread and up to team - 1 helper threads (started once, kept for
 * the process), and returns when every unit is done. Each member (0 the caller) owns a
 * contiguous range of the units, [member * count / team, (member + 1) * count / team), and
 * claims them one at a time from its range's ticket (the job's generation, the next unit
 * and the range's end, one word); a member done with its own range takes what is left of
 * the others', so the caller does every unit no helper took: it waits only for units a
 * helper has started, never for a helper still asleep or preempted. The ranges keep a unit
 * on the same core from launch to launch and neighbouring units on one core (units claimed
 * from one shared ticket landed on either core at random, so a plane's lines moved between
 * the cores' caches: 16->96 1x1 at 112x112 on two threads 284 -> 232 us, one thread 457). A
 * helper spins a while for the next job (yielding its core now and then), then sleeps on a
 * futex. One job at a time (a mutex); a forked child starts its own helpers. */
typedef void (*unit_task)(void *context, int64_t unit);

#define POOL_MOST 64   /* helpers at most */
#define POOL_SPIN 4000  /* polls before a helper sleeps (about 0.1 ms: a pause is ~25 ns here) */
#define POOL_YIELD 64   /* polls between a spinning helper's sched_yield calls */

static struct {
    _Atomic uint64_t ticket[POOL_MOST + 1];  /* per member's range: see pool_ticket */
    _Atomic int64_t finished;
    _Atomic(unit_task) task;
    _Atomic(void *) context;
    _Atomic int64_t team;
    _Atomic uint32_t generation;  /* the futex word: bumped per job */
    _Atomic int sleepers;
    int helpers;
    pid_t owner;
    pthread_mutex_t lock;
} workers = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline void pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A range's ticket: the job's generation (its low 24 bits), the next unit and the range's
 * end (20 bits each: a job of more units runs on the caller alone), so a claim checks all
 * three in one compare-and-swap. */
#define POOL_UNIT_BITS 20
#define POOL_UNIT_MASK ((UINT64_C(1) << POOL_UNIT_BITS) - 1)
#define POOL_GENERATION_MASK ((UINT64_C(1) << (64 - 2 * POOL_UNIT_BITS)) - 1)
static inline uint64_t pool_ticket(uint32_t generation, int64_t next, int64_t end) {
    return ((uint64_t)generation & POOL_GENERATION_MASK) << (2 * POOL_UNIT_BITS)
           | (uint64_t)next << POOL_UNIT_BITS | (uint64_t)end;
}

/* Claims and runs units of job `generation` from member `owner`'s range until none is left
 * there; 0 when that ticket is not this job's (the job is over). */
static int pool_drain(uint32_t generation, int64_t owner) {
    for (;;) {
        uint64_t ticket = atomic_load_explicit(&workers.ticket[owner], memory_order_acquire);
        if ((ticket >> (2 * POOL_UNIT_BITS)) != ((uint64_t)generation & POOL_GENERATION_MASK))
            return 0;
        if (((ticket >> POOL_UNIT_BITS) & POOL_UNIT_MASK) >= (ticket & POOL_UNIT_MASK)) return 1;
        /* read before the claim: while the ticket holds an unclaimed unit of this job, the
         * job cannot finish, so no newer job has replaced these */
        const unit_task task = atomic_load_explicit(&workers.task, memory_order_relaxed);
        void *context = atomic_load_explicit(&workers.context, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&workers.ticket[owner], &ticket,
                                                   ticket + (UINT64_C(1) << POOL_UNIT_BITS),
                                                   memory_order_acq_rel, memory_order_relaxed))
            continue;
        task(context, (int64_t)((ticket >> POOL_UNIT_BITS) & POOL_UNIT_MASK));
        atomic_fetch_add_explicit(&workers.finished, 1, memory_order_release);
    }
}

/* Runs units of job `generation` as member `member` (0 the caller): its own range, then what
 * is left of the others'. A member at or past the job's team takes none (a stale team read
 * here at worst stops a helper early: the caller drains every range). */
static void pool_work(uint32_t generation, int64_t member) {
    const int64_t team = atomic_load_explicit(&workers.team, memory_order_acquire);
    if (member >= team) return;
    for (int64_t step = 0; step < team; step++)
        if (!pool_drain(generation, (member + step) % team)) return;
}

static void *pool_helper(void *argument) {
    const int64_t member = (int64_t)(intptr_t)argument;
    uint32_t seen = atomic_load(&workers.generation);
    for (;;) {
        uint32_t now = atomic_load_explicit(&workers.generation, memory_order_acquire);
        for (int spin = 0; now == seen && spin < POOL_SPIN; spin++) {
            pool_pause();
            /* now and then give the core to another thread of this priority: each kernel
             * library has a pool of its own, and under a real-time policy a spinning helper
             * is never preempted, so the next launch's helper (another library's) would
             * wait out this spin on its core */
            if (spin % POOL_YIELD == POOL_YIELD - 1) sched_yield();
            now = atomic_load_explicit(&workers.generation, memory_order_acquire);
        }
        if (now == seen) {
            atomic_fetch_add(&workers.sleepers, 1);
            syscall(SYS_futex, &workers.generation, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
            atomic_fetch_sub(&workers.sleepers, 1);
            continue;
        }
        seen = now;
        pool_work(now, member);
    }
    return NULL;
}

static void pool_run_units(int64_t count, int64_t team, unit_task task, void *context) {
    if (team > POOL_MOST + 1) team = POOL_MOST + 1;
    if (team <= 1 || count <= 1 || count > (int64_t)POOL_UNIT_MASK) {
        for (int64_t unit = 0; unit < count; unit++) task(context, unit);
        return;
    }
    pthread_mutex_lock(&workers.lock);
    if (workers.owner != getpid()) {  /* first use, or a forked child: no helpers here yet */
        workers.owner = getpid();
        workers.helpers = 0;
    }
    while (workers.helpers < team - 1) {
        pthread_t thread;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&thread, &attributes, pool_helper,
                                          (void *)(intptr_t)(workers.helpers + 1));
        pthread_attr_destroy(&attributes);
        if (failed) break;
        workers.helpers++;
    }
    if (workers.helpers < team - 1) team = workers.helpers + 1;
    const uint32_t generation = atomic_load(&workers.generation) + 1;
    atomic_store_explicit(&workers.finished, 0, memory_order_relaxed);
    atomic_store_explicit(&workers.task, task, memory_order_relaxed);
    atomic_store_explicit(&workers.context, context, memory_order_relaxed);
    atomic_store_explicit(&workers.team, team, memory_order_relaxed);
    for (int64_t member = 0; member < team; member++)
        atomic_store_explicit(&workers.ticket[member],
                              pool_ticket(generation, member * count / team,
                                          (member + 1) * count / team),
                              memory_order_release);
    atomic_store(&workers.generation, generation);  /* seq_cst: ordered before the sleepers load */
    if (atomic_load(&workers.sleepers) > 0)
        syscall(SYS_futex, &workers.generation, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    pool_work(generation, 0);
    /* only units a helper started are left: wait for them (yielding now and then, in case
     * that helper waits for this core) */
    for (int64_t spin = 1; atomic_load_explicit(&workers.finished, memory_order_acquire) < count;
         spin++) {
        pool_pause();
        if (spin % 4096 == 0) sched_yield();
    }
    pthread_mutex_unlock(&workers.lock);
}

/* One pool for every convolution library of the process: convolution_c.py asks conv.c for
 * its pool_run_units (a POOL_ADDRESS call) and hands it to the other libraries (POOL_SHARE),
 * whose run_units then run on conv.c's helpers. With a pool each, the helpers of the last
 * few libraries spun for their own next job on the core the current one needed (a chain
 * of depthwise, direct, gemm and pool launches: mobilenet_v3_small). */
#define POOL_SHARE -7
#define POOL_ADDRESS -8
typedef void (*run_units_function)(int64_t, int64_t, unit_task, void *);
static run_units_function shared_run_units = NULL;

static void run_units(int64_t count, int64_t team, unit_task task, void *context) {
    if (shared_run_units != NULL) shared_run_units(count, team, task, context);
    else pool_run_units(count, team, task, context);
}

/* A POOL_ADDRESS call writes this library's pool_run_units into data[0]; a POOL_SHARE call
 * makes data[0] (another library's) this library's pool. 1 for either, else 0. */
static inline int pool_share(void **data, const int64_t *sizes) {
    if (sizes[0] == POOL_ADDRESS) {
        data[0] = (void *)pool_run_units;
        return 1;
    }
    if (sizes[0] == POOL_SHARE) {
        shared_run_units = (run_units_function)data[0];
        return 1;
    }
    return 0;
}

static inline Shape shape_of(const int64_t *sizes) {
    const Shape s = {sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], sizes[7], sizes[8],
                     sizes[9], sizes[10], sizes[11], sizes[12], sizes[13], sizes[14],
                     sizes[15], sizes[16], sizes[17], sizes[18], 0, sizes[19]};
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

#if defined(__AVX512F__)
/* exp8's Cephes expf on 16 lanes (the same operations, so the same values lane for lane;
 * act16's sigmoids then divide by recip16, within 2 ulp of smooth8's quotient). */
static inline __attribute__((always_inline)) __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f)),
                      _mm512_set1_ps(88.3762626647949f));
    __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f),
                                                    _mm512_set1_ps(0.5f)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    const __m512i bits = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}

/* 1 / d on 16 lanes for d >= 1 (the sigmoids' denominators): rcp14's estimate and one
 * Newton step, within 2 ulp of the quotient (vdivps, 16 lanes at once, was the slowest
 * instruction of a SiLU epilogue: 32->32 3x3 at 80x80, gemm form, relu 357 us, SiLU 405). */
static inline __attribute__((always_inline)) __m512 recip16(__m512 d) {
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* The activations on 16 lanes (sigmoid, SiLU and tanh as smooth8 computes them); always
 * inlined: a call per 16 values in finish's loop cost more than the activation. */
static inline __attribute__((always_inline)) __m512 act16(__m512 v, int64_t act, float alpha,
                                                          float beta, float slope) {
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    switch (act) {
    case SIGMOID:
    case SILU:
    case TANH: {
        __m512 out;
        if (act == TANH) {  /* 2 sigmoid(2v) - 1 */
            const __m512 e = exp16(_mm512_mul_ps(v, _mm512_set1_ps(-2.0f)));
            out = _mm512_fmsub_ps(_mm512_set1_ps(2.0f), recip16(_mm512_add_ps(one, e)), one);
        } else {
            const __m512 sig = recip16(_mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v))));
            out = act == SILU ? _mm512_mul_ps(v, sig) : sig;
        }
        /* NaN in, NaN out (the clamp in exp16 would turn it into a number) */
        return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), out, v);
    }
    case RELU: return _mm512_max_ps(v, zero);
    case CLIP: return _mm512_min_ps(_mm512_set1_ps(beta), _mm512_max_ps(_mm512_set1_ps(alpha), v));
    case HARD_SIGMOID:
        return _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_fmadd_ps(
            v, _mm512_set1_ps(alpha), _mm512_set1_ps(beta))));
    case HARD_SWISH:
        return _mm512_mul_ps(v, _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_fmadd_ps(
            v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f)))));
    case LEAKY_RELU:
    case PRELU: {
        const __mmask16 negative = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
        return _mm512_mask_mul_ps(v, negative, v, _mm512_set1_ps(act == PRELU ? slope : alpha));
    }
    default: return v;
    }
}

/* One blocked cell (a position's 16 channels) stored at out + at, the residual at the same
 * place (may be NULL) added first, then the activation: every blocked store's epilogue
 * (conv_lanes.h's, the blocked depthwise's, conv_direct.c's blocked stem). */
static inline __attribute__((always_inline)) void cell16_store(
        float *out, const float *residual, int64_t at, __m512 v, int64_t act, float alpha,
        float beta) {
    if (residual != NULL) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + at));
    _mm512_storeu_ps(out + at, act16(v, act, alpha, beta, 0.0f));
}

#endif

/* y[0, count) = act(y + bias + residual), residual may be NULL. */
static void finish(float *restrict y, int64_t count, float bias, const float *restrict residual,
                   int64_t act, float alpha, float beta, float slope) {
#if defined(__AVX512F__)
    {  /* 16 lanes at a time, the last chunk masked (whole chunks unmasked: a masked load
        * of a tile the GEMM just stored is not forwarded from the store on Zen 4 and waits
        * for it; squeezenet spent 7% of its time there) */
        const __m512 shift = _mm512_set1_ps(bias);
        int64_t i = 0;
        for (; i + 16 <= count; i += 16) {
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(y + i), shift);
            if (residual != NULL) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + i));
            _mm512_storeu_ps(y + i, act16(v, act, alpha, beta, slope));
        }
        if (i < count) {
            const __mmask16 keep = (__mmask16)((1u << (count - i)) - 1);
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(keep, y + i), shift);
            if (residual != NULL) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, residual + i));
            _mm512_mask_storeu_ps(y + i, keep, act16(v, act, alpha, beta, slope));
        }
        return;
    }
#endif
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

#if defined(__AVX512F__)
/* ------------------------------------------------------------ row strips
 * The depthwise convolution's and the pools' row strips (depthwise_rows.h, pool.c): an
 * output chunk of 16 columns reads, from each input row, one vector per window column
 * (lane j: input column base + STRIDE j + k), straight from the plane. */

/* Lanes j with 0 <= first + j < width. */
static inline __mmask16 strip_columns(int64_t first, int64_t width) {
    const __m512i at = _mm512_add_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)first));
    return _mm512_cmpge_epi32_mask(at, _mm512_setzero_si512())
           & _mm512_cmplt_epi32_mask(at, _mm512_set1_epi32((int)width));
}

/* The masks of a chunk's loads (at base + 2 e and base + 2 e + 16, e < pairs) in a row of
 * `width` columns. */
static inline void strip_masks(int64_t base, int64_t width, int pairs, __mmask16 *low,
                               __mmask16 *high) {
    for (int e = 0; e < pairs; e++) {
        low[e] = strip_columns(base + 2 * e, width);
        high[e] = strip_columns(base + 2 * e + 16, width);
    }
}

/* v[k], k < K: the 16 lanes row[STRIDE j + k] (`row` at the chunk's base column), lanes
 * outside the row (or every lane, when the row is not `inside` the plane) `fill`: stride 1
 * two loads and `valignd` shifts, stride 2 the even or odd lanes of a load pair. K and STRIDE
 * are constants in each expansion. */
static inline __attribute__((always_inline)) void strip_row(
        const float *row, int inside, const __mmask16 *low, const __mmask16 *high,
        __m512 fill, __m512 *v, const int K, const int STRIDE) {
    if (STRIDE == 1) {
        const __m512 a = _mm512_mask_loadu_ps(fill, inside ? low[0] : 0, row);
        const __m512 b = _mm512_mask_loadu_ps(fill, inside ? high[0] : 0, row + 16);
        v[0] = a;
#pragma GCC unroll 8
        for (int k = 1; k < K; k++)
            v[k] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(b),
                                                           _mm512_castps_si512(a), k));
        return;
    }
    const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
                                           4, 2, 0);
    const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
#pragma GCC unroll 4
    for (int e = 0; e < (K + 1) / 2; e++) {
        const __m512 a = _mm512_mask_loadu_ps(fill, inside ? low[e] : 0, row + 2 * e);
        const __m512 b = _mm512_mask_loadu_ps(fill, inside ? high[e] : 0, row + 2 * e + 16);
        v[2 * e] = _mm512_permutex2var_ps(a, evens, b);
        if (2 * e + 1 < K) v[2 * e + 1] = _mm512_permutex2var_ps(a, odds, b);
    }
}
#endif
