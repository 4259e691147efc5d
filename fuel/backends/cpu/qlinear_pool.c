/* 8-bit MAX_POOL for fuel's CPU backend (qlinear_pool.py drives it): a QOperator model's
 * MaxPool over uint8 or int8 activations, 1-d and 2-d windows over contiguous NCHW planes.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {x (N x C x H x W), out (N x C x OH x OW)}
 *   sizes = {threads, planes (N * C), H, W, OH, OW, KH, KW, stride_h, stride_w, dilation_h,
 *            dilation_w, pad_top, pad_left, signed}
 *   (a 1-d pooling is a 2-d one of height 1)
 *
 * Bytes are compared as unsigned (int8 flipped by x ^ 0x80, which keeps the order, and back),
 * so the padding holds 0, the smallest value, and never wins. Per plane a padded copy; with
 * AVX512-VBMI a register holds `lanes` output positions (a run of one output row, or whole
 * narrow rows), and per window row one 64-byte load and per tap one vpermb gathers each
 * position's input byte, then a byte max. Without it, a scalar loop over the padded copy.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512VBMI__)
#include <immintrin.h>
#endif

typedef struct {
    int64_t threads, planes, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, is_signed;
} P;

static uint8_t *plane_buffer(size_t bytes) {
    static __thread uint8_t *buffer;
    static __thread size_t size;
    if (size < bytes || buffer == NULL) {
        free(buffer);
        buffer = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
        size = buffer != NULL ? bytes : 0;
    }
    return buffer;
}

#if defined(__AVX512VBMI__)
/* Output rows per register (narrow planes) or 0 for runs of one row; *lanes the positions. */
static int64_t layout(const P *p, int64_t pw, int64_t *lanes) {
    const int64_t reach = (p->kw - 1) * p->dw + 1;
    int64_t run = reach > 64 ? 0 : (64 - reach) / p->sw + 1;
    if (run > 64) run = 64;
    if (p->ow >= run) {
        *lanes = run;
        return 0;
    }
    int64_t rows = 64 / p->ow < p->oh ? 64 / p->ow : p->oh;
    while (rows > 1 && (rows - 1) * p->sh * pw + (p->ow - 1) * p->sw + reach > 64) rows--;
    *lanes = rows * p->ow;
    return rows;
}
#endif

/* What a launch's planes share. */
typedef struct {
    P p;
    const uint8_t *x;
    uint8_t *out;
    int64_t ph, pw, in_plane, out_plane, rows_in, lo, span;
    uint64_t launch;
    uint8_t flip;
#if defined(__AVX512VBMI__)
    int64_t rows, lanes;
    int vector;
    uint8_t table[64] __attribute__((aligned(64)));
#endif
} PoolJob;

static uint64_t launches; /* launches so far (atomic): whose zero borders a buffer holds */

/* One plane: a padded copy (its borders zeroed once per launch and thread), then the max. */
static void pool_plane(void *context, int64_t i) {
    const PoolJob *job = context;
    const P p = job->p;
    const uint8_t *x = job->x;
    uint8_t *out = job->out;
    const int64_t ph = job->ph, pw = job->pw, in_plane = job->in_plane;
    const int64_t out_plane = job->out_plane, rows_in = job->rows_in, lo = job->lo;
    const int64_t span = job->span;
    const uint8_t flip = job->flip;
#if defined(__AVX512VBMI__)
    const int64_t rows = job->rows, lanes = job->lanes;
    const int vector = job->vector;
    const __m512i base = _mm512_load_si512(job->table);
#endif
    static __thread uint64_t ready;
    uint8_t *padded = plane_buffer((size_t)(ph * pw + 64));
    if (ready != job->launch) {
        memset(padded, 0, (size_t)(ph * pw + 64));
        ready = job->launch;
    }
    do {
        for (int64_t ih = 0; ih < rows_in; ih++) {
            const uint8_t *source = x + i * in_plane + ih * p.w + (lo - p.pl);
            uint8_t *row = padded + (ih + p.pt) * pw + lo;
            int64_t col = 0;
#if defined(__AVX512VBMI__)
            flip_row(row, source, span, flip);
            col = span;
#endif
            for (; col < span; col++) row[col] = source[col] ^ flip;
        }
        uint8_t *target = out + i * out_plane;
#if defined(__AVX512VBMI__)
        if (vector) {
            const __m512i mask = _mm512_set1_epi8((char)flip);
            const __mmask64 store = lanes == 64 ? ~0ull : (1ull << lanes) - 1;
            const int64_t step = rows ? rows : 1, chunk = rows ? 1 : lanes;
            for (int64_t oh = 0; oh < p.oh; oh += step) {
                const int64_t row0 = oh + step > p.oh ? p.oh - step : oh;
                for (int64_t ow = 0; ow < (rows ? 1 : p.ow); ow += chunk) {
                    const int64_t ow0 = !rows && ow + chunk > p.ow ? p.ow - chunk : ow;
                    __m512i best = _mm512_setzero_si512();
                    for (int64_t kh = 0; kh < p.kh; kh++) {
                        const uint8_t *at = padded + (row0 * p.sh + kh * p.dh) * pw + ow0 * p.sw;
                        const __m512i bytes = _mm512_loadu_si512(at);
                        for (int64_t kw = 0; kw < p.kw; kw++) {
                            const __m512i index = _mm512_add_epi8(
                                base, _mm512_set1_epi8((char)(kw * p.dw)));
                            best = _mm512_max_epu8(best, _mm512_permutexvar_epi8(index, bytes));
                        }
                    }
                    _mm512_mask_storeu_epi8(target + row0 * p.ow + ow0, store,
                                            _mm512_xor_si512(best, mask));
                }
            }
            continue;
        }
#endif
        for (int64_t oh = 0; oh < p.oh; oh++)
            for (int64_t ow = 0; ow < p.ow; ow++) {
                uint8_t best = 0;
                for (int64_t kh = 0; kh < p.kh; kh++) {
                    const uint8_t *row = padded + (oh * p.sh + kh * p.dh) * pw + ow * p.sw;
                    for (int64_t kw = 0; kw < p.kw; kw++)
                        best = row[kw * p.dw] > best ? row[kw * p.dw] : best;
                }
                target[oh * p.ow + ow] = best ^ flip;
            }
    } while (0);
}

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (take_pool(data, sizes)) return;
    const P p = {sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], sizes[7],
                 sizes[8], sizes[9], sizes[10], sizes[11], sizes[12], sizes[13], sizes[14]};
    const uint8_t *x = data[0];
    uint8_t *out = data[1];
    const int64_t ph = (p.oh - 1) * p.sh + (p.kh - 1) * p.dh + 1;
    const int64_t pw = (p.ow - 1) * p.sw + (p.kw - 1) * p.dw + 1;
    const uint8_t flip = p.is_signed ? 0x80 : 0;
    const int64_t in_plane = p.h * p.w, out_plane = p.oh * p.ow;
    const int64_t rows_in = p.h < ph - p.pt ? p.h : ph - p.pt;
    const int64_t lo = p.pl < pw ? p.pl : pw, hi = p.pl + p.w < pw ? p.pl + p.w : pw;
    const int64_t span = hi > lo ? hi - lo : 0;
    PoolJob job = {p, x, out, ph, pw, in_plane, out_plane, rows_in, lo, span,
                   __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED), flip};
#if defined(__AVX512VBMI__)
    job.rows = layout(&p, pw, &job.lanes);
    job.vector = job.lanes >= 8 && p.kw <= 64;
    /* each lane's byte offset in a window (kernel tap 0) */
    for (int64_t lane = 0; lane < 64; lane++) {
        const int64_t r = job.rows ? lane / p.ow : 0, c = job.rows ? lane % p.ow : lane;
        job.table[lane] = job.vector && lane < job.lanes ? (uint8_t)(r * p.sh * pw + c * p.sw)
                                                         : 0;
    }
#endif
    run_items(p.planes, p.threads, pool_plane, &job);
}
