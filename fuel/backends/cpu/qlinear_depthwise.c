/* qlinear_conv.c's depthwise forms (qlinear_conv.py builds qlinear_conv.c, this file and
 * qlinear_conv_vnni.c as one source): see qlinear_conv.c's header for the operands. */

/* ------------------------------------------------------------------ depthwise */

/* Depthwise on one plane, rows vectorized: (x - x_zero) as float32 (exact) in a zero-padded
 * plane of the rows and columns the windows reach; per output row the stride-1 sums over
 * every column the strided outputs start at (each tap one contiguous multiply-add over the
 * row: s times the strided work, all of it vector loads), float32 sums of integers below
 * 2**24 (exact); then every s-th sum re-quantized, 8 at a time. */
static void depthwise_plane(const uint8_t *x, const int8_t *w, int32_t bias, float scale,
                            uint8_t *out, const Q *q) {
    const int64_t s = q->sw, wide = (q->ow - 1) * s + 1, vw = (wide + 15) / 16 * 16;
    const int64_t ph = (q->oh - 1) * q->sh + (q->kh - 1) * q->dh + 1;
    const int64_t pw = vw + (q->kw - 1) * q->dw + 16;
    float *plane = scratch(0, sizeof(float) * (size_t)(ph * pw));
    const float shift = (float)q->xz;
    const int64_t lo = q->pl < pw ? q->pl : pw;
    const int64_t hi = q->pl + q->w < pw ? q->pl + q->w : pw;
    for (int64_t r = 0; r < ph; r++) {
        const int64_t ih = r - q->pt;
        float *row = plane + r * pw;
        if (ih < 0 || ih >= q->h) {
            memset(row, 0, sizeof(float) * (size_t)pw);
            continue;
        }
        for (int64_t col = 0; col < lo; col++) row[col] = 0.0f;
        if (q->x_signed) {
            const int8_t *source = (const int8_t *)x + ih * q->w - q->pl;
            for (int64_t col = lo; col < hi; col++) row[col] = (float)source[col] - shift;
        } else {
            const uint8_t *source = x + ih * q->w - q->pl;
            for (int64_t col = lo; col < hi; col++) row[col] = (float)source[col] - shift;
        }
        for (int64_t col = hi; col < pw; col++) row[col] = 0.0f;
    }
    float *acc = scratch(1, sizeof(float) * (size_t)(vw + q->ow + 8));
    float *picked = acc + vw;
    const float start = (float)bias;
    float taps[256];
    for (int64_t t = 0; t < q->kh * q->kw; t++) taps[t] = (float)w[t];
    for (int64_t oh = 0; oh < q->oh; oh++) {
#if defined(__AVX512F__)
        /* 16 columns in a register across every tap (products and sums of integers below
         * 2**24 are exact, so the fused multiply-add rounds nothing) */
        int64_t i = 0;
        for (; i + 64 <= vw; i += 64) { /* four independent chains hide the FMA latency */
            __m512 s0 = _mm512_set1_ps(start), s1 = s0, s2 = s0, s3 = s0;
            for (int64_t kh = 0; kh < q->kh; kh++) {
                const float *base = plane + (oh * q->sh + kh * q->dh) * pw + i;
                for (int64_t kw = 0; kw < q->kw; kw++) {
                    const __m512 tap = _mm512_set1_ps(taps[kh * q->kw + kw]);
                    const float *at = base + kw * q->dw;
                    s0 = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at), s0);
                    s1 = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at + 16), s1);
                    s2 = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at + 32), s2);
                    s3 = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at + 48), s3);
                }
            }
            _mm512_storeu_ps(acc + i, s0);
            _mm512_storeu_ps(acc + i + 16, s1);
            _mm512_storeu_ps(acc + i + 32, s2);
            _mm512_storeu_ps(acc + i + 48, s3);
        }
        for (; i < vw; i += 16) {
            __m512 sum = _mm512_set1_ps(start);
            for (int64_t kh = 0; kh < q->kh; kh++) {
                const float *base = plane + (oh * q->sh + kh * q->dh) * pw + i;
                for (int64_t kw = 0; kw < q->kw; kw++)
                    sum = _mm512_fmadd_ps(_mm512_set1_ps(taps[kh * q->kw + kw]),
                                          _mm512_loadu_ps(base + kw * q->dw), sum);
            }
            _mm512_storeu_ps(acc + i, sum);
        }
#else
        for (int64_t i = 0; i < vw; i++) acc[i] = start;
        for (int64_t kh = 0; kh < q->kh; kh++) {
            const float *base = plane + (oh * q->sh + kh * q->dh) * pw;
            for (int64_t kw = 0; kw < q->kw; kw++) {
                const float *source = base + kw * q->dw;
                const float tap = taps[kh * q->kw + kw];
                for (int64_t i = 0; i < vw; i++) acc[i] += tap * source[i];
            }
        }
#endif
        const float *sums = acc;
        if (s != 1) {
            for (int64_t ow = 0; ow < q->ow; ow++) picked[ow] = acc[ow * s];
            sums = picked;
        }
        uint8_t *target = out + oh * q->ow;
#if defined(__AVX2__)
        const __m256 factor = _mm256_set1_ps(scale);
        const __m256i zero = _mm256_set1_epi32((int32_t)q->yz);
        int64_t ow = 0;
        for (; ow + 8 <= q->ow; ow += 8) {
            const __m256i v = _mm256_add_epi32(
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(sums + ow), factor)), zero);
            const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v),
                                                  _mm256_extracti128_si256(v, 1));
            const __m128i bytes = q->y_signed ? _mm_packs_epi16(words, words)
                                              : _mm_packus_epi16(words, words);
            _mm_storel_epi64((__m128i *)(target + ow), bytes);
        }
        for (; ow < q->ow; ow++)
            store_y(target, ow, (int32_t)lrintf(sums[ow] * scale) + (int32_t)q->yz, q);
#else
        for (int64_t ow = 0; ow < q->ow; ow++)
            store_y(target, ow, (int32_t)lrintf(sums[ow] * scale) + (int32_t)q->yz, q);
#endif
    }
}

/* What a depthwise launch's units share. */
typedef struct {
    const Q *q;
    const uint8_t *x;
    const int8_t *w;
    const int32_t *bias;
    const float *mult;
    uint8_t *out;
    const int32_t *packed;
} DepthwiseJob;

static void depthwise_rows_plane(void *context, int64_t i) {
    const DepthwiseJob *job = context;
    const Q *q = job->q;
    const int64_t channel = i % q->c, taps = q->kh * q->kw;
    depthwise_plane(job->x + i * q->h * q->w, job->w + channel * taps, job->bias[channel],
                    job->mult[channel], job->out + i * q->oh * q->ow, q);
}

static void depthwise_rows(const uint8_t *x, const int8_t *w, const int32_t *bias,
                           const float *mult, uint8_t *out, const Q *q) {
    const int64_t planes = q->n * q->c, in_plane = q->h * q->w, out_plane = q->oh * q->ow;
    const DepthwiseJob job = {q, x, w, bias, mult, out, NULL};
    (void)in_plane;
    (void)out_plane;
    run_items(planes, q->threads, depthwise_rows_plane, (void *)&job);
}

#if defined(__AVX512F__)
/* Depthwise over narrow planes (fewer than 16 output columns), channels last, 16 channels
 * per register: each thread takes whole blocks of 16 channels of one image, copies them as
 * float32 (x - x_zero, exact) into a zero-padded [row][column][16] buffer, sums every output
 * position's taps with fused multiply-adds (exact: integers below 2**24), re-quantizes the 16
 * sums and writes them back to the channels' planes. */
static void depthwise_last_block(void *context, int64_t unit) {
    const DepthwiseJob *job = context;
    const Q *q = job->q;
    const uint8_t *x = job->x;
    const int8_t *w = job->w;
    const int32_t *bias = job->bias;
    const float *mult = job->mult;
    uint8_t *out = job->out;
    const int64_t ph = (q->oh - 1) * q->sh + (q->kh - 1) * q->dh + 1;
    const int64_t pw = (q->ow - 1) * q->sw + (q->kw - 1) * q->dw + 1;
    const int64_t in_plane = q->h * q->w, out_plane = q->oh * q->ow, taps = q->kh * q->kw;
    const int64_t blocks = (q->c + 15) / 16;
    const float shift = (float)q->xz;
    {
        const int64_t image = unit / blocks, c0 = unit % blocks * 16;
        const int count = (int)(q->c - c0 < 16 ? q->c - c0 : 16);
        float *padded = scratch(0, sizeof(float) * (size_t)(ph * pw * 16 + taps * 16 + 32));
        float *weights = padded + ph * pw * 16, *start = weights + taps * 16;
        float *scales = start + 16;
        memset(padded, 0, sizeof(float) * (size_t)(ph * pw * 16));
        for (int j = 0; j < 16; j++) {
            const int64_t c = c0 + (j < count ? j : 0);
            for (int64_t tap = 0; tap < taps; tap++)
                weights[tap * 16 + j] = j < count ? (float)w[c * taps + tap] : 0.0f;
            start[j] = j < count ? (float)bias[c] : 0.0f;
            scales[j] = j < count ? mult[c] : 0.0f;
        }
        /* rows and columns of the input inside the padded buffer (pads are not negative) */
        const int64_t rows = q->h < ph - q->pt ? q->h : ph - q->pt;
        const int64_t cols = q->w < pw - q->pl ? q->w : pw - q->pl;
        for (int j = 0; j < count; j++) {
            const int64_t at = (image * q->c + c0 + j) * in_plane;
            for (int64_t ih = 0; ih < rows; ih++) {
                float *row = padded + ((ih + q->pt) * pw + q->pl) * 16 + j;
                if (q->x_signed) {
                    const int8_t *source = (const int8_t *)x + at + ih * q->w;
                    for (int64_t iw = 0; iw < cols; iw++)
                        row[iw * 16] = (float)source[iw] - shift;
                } else {
                    const uint8_t *source = x + at + ih * q->w;
                    for (int64_t iw = 0; iw < cols; iw++)
                        row[iw * 16] = (float)source[iw] - shift;
                }
            }
        }
        const __m512 first = _mm512_loadu_ps(start), factor = _mm512_loadu_ps(scales);
        const __m512i zero = _mm512_set1_epi32((int32_t)q->yz);
        for (int64_t oh = 0; oh < q->oh; oh++)
            for (int64_t ow0 = 0; ow0 < q->ow; ow0 += 4) {
                /* four positions' independent chains hide the FMA latency */
                const int n = (int)(q->ow - ow0 < 4 ? q->ow - ow0 : 4);
                const int64_t step = q->sw * 16;
                __m512 sum[4] = {first, first, first, first};
                for (int64_t kh = 0; kh < q->kh; kh++) {
                    const float *row = padded + ((oh * q->sh + kh * q->dh) * pw +
                                                 ow0 * q->sw) * 16;
                    if (n == 4) {
                        for (int64_t kw = 0; kw < q->kw; kw++) {
                            const __m512 tap = _mm512_loadu_ps(weights + (kh * q->kw + kw) * 16);
                            const float *at = row + kw * q->dw * 16;
                            sum[0] = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at), sum[0]);
                            sum[1] = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at + step), sum[1]);
                            sum[2] = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at + 2 * step), sum[2]);
                            sum[3] = _mm512_fmadd_ps(tap, _mm512_loadu_ps(at + 3 * step), sum[3]);
                        }
                    } else {
                        for (int i = 0; i < n; i++)
                            for (int64_t kw = 0; kw < q->kw; kw++)
                                sum[i] = _mm512_fmadd_ps(
                                    _mm512_loadu_ps(weights + (kh * q->kw + kw) * 16),
                                    _mm512_loadu_ps(row + kw * q->dw * 16 + i * step), sum[i]);
                    }
                }
                for (int i = 0; i < n; i++) {
                    const __m512i v = _mm512_add_epi32(
                        _mm512_cvtps_epi32(_mm512_mul_ps(sum[i], factor)), zero);
                    int8_t bytes[16];
                    if (q->y_signed)
                        _mm_storeu_si128((__m128i *)bytes, _mm512_cvtsepi32_epi8(v));
                    else
                        _mm_storeu_si128((__m128i *)bytes, _mm512_cvtusepi32_epi8(
                            _mm512_max_epi32(v, _mm512_setzero_si512())));
                    uint8_t *target = out + (image * q->m + c0) * out_plane + oh * q->ow +
                                      ow0 + i;
                    for (int j = 0; j < count; j++) target[j * out_plane] = (uint8_t)bytes[j];
                }
            }
    }
}

static void depthwise_last(const uint8_t *x, const int8_t *w, const int32_t *bias,
                           const float *mult, uint8_t *out, const Q *q) {
    const DepthwiseJob job = {q, x, w, bias, mult, out, NULL};
    run_units(q->n * ((q->c + 15) / 16), q->threads, depthwise_last_block, (void *)&job);
}
#endif

/* Depthwise whose window is the whole unpadded plane (QLinearGlobalAveragePool's form): one
 * exact int32 dot product of (x - x_zero) and the weights per plane (below 2**31: at most
 * 65536 values of |255 * 128|), then re-quantized. */
static void plane_dot(void *context, int64_t i) {
    const DepthwiseJob *job = context;
    const Q *q = job->q;
    const uint8_t *x = job->x;
    const int8_t *w = job->w;
    const int32_t *bias = job->bias;
    const float *mult = job->mult;
    uint8_t *out = job->out;
    const int64_t count = q->h * q->w;
    const int32_t zero = (int32_t)q->xz;
    {
        const int64_t channel = i % q->c;
        const int8_t *weights = w + channel * count;
        int32_t total = 0, weight_sum = 0;
        if (q->x_signed) {
            const int8_t *values = (const int8_t *)x + i * count;
            for (int64_t j = 0; j < count; j++) {
                total += (int32_t)values[j] * weights[j];
                weight_sum += weights[j];
            }
        } else {
            const uint8_t *values = x + i * count;
            for (int64_t j = 0; j < count; j++) {
                total += (int32_t)values[j] * weights[j];
                weight_sum += weights[j];
            }
        }
        store_y(out, i, requantize(total - zero * weight_sum + bias[channel], mult[channel],
                                   q->yz), q);
    }
}

static void plane_dots(const uint8_t *x, const int8_t *w, const int32_t *bias,
                       const float *mult, uint8_t *out, const Q *q) {
    const int64_t planes = q->n * q->c, count = q->h * q->w;
    const DepthwiseJob job = {q, x, w, bias, mult, out, NULL};
    run_items(planes, planes * count >= (1 << 16) ? q->threads : 1, plane_dot, (void *)&job);
}


#if defined(VNNI) && defined(__AVX512VBMI__)
#define QUAD_DEPTHWISE 1
/* Depthwise by byte quads (AVX512-VBMI + VNNI), exact in int32 for any bias: per plane, u
 * (x, or x ^ 0x80 for int8) copied into a plane padded with u_zero; a register holds 16
 * output positions (16 columns of one output row, or the whole of `rows` consecutive narrow
 * rows); per kernel row one 64-byte load of the padded plane, one vpermb per 4 taps gathers
 * each position's 4 taps of that row (byte indices from `quad_indices`) and one vpdpbusd
 * multiplies them by the channel's 4 weights (zeros past the row's taps). */

/* Output rows per register for a plane narrower than 16 columns (1 for 16 or more): as many
 * whole rows as fit 16 lanes and one 64-byte window; 0 where a window never fits. */
static int64_t quad_rows(const Q *q) {
    const int64_t pw = (q->ow - 1) * q->sw + (q->kw - 1) * q->dw + 1;
    if (q->ow >= 16) return 15 * q->sw + (q->kw - 1) * q->dw + 1 <= 64 ? 1 : 0;
    int64_t rows = 16 / q->ow < q->oh ? 16 / q->ow : q->oh;
    while (rows > 0 && (rows - 1) * q->sh * pw + (q->ow - 1) * q->sw + (q->kw - 1) * q->dw + 1 > 64)
        rows--;
    return rows;
}

static int quad_depthwise_fits(const Q *q) {
    return q->groups == q->c && q->c == q->m && q->groups > 1 && q->kh <= 16 &&
           q->kw <= 16 && quad_rows(q) > 0;
}

/* Int32s of quad_depthwise's packed weights: per channel, per kernel row 4 quads of taps
 * (zeros past the row), then the sum of the channel's weights. */
static size_t quad_weights_count(const Q *q) { return (size_t)(q->c * (q->kh * 4 + 1)); }

static void quad_pack(const int8_t *w, int32_t *packed, const Q *q) {
    const int64_t taps = q->kh * q->kw;
    for (int64_t c = 0; c < q->c; c++) {
        const int8_t *kernel = w + c * taps;
        int32_t *target = packed + c * (q->kh * 4 + 1), sum = 0;
        for (int64_t kh = 0; kh < q->kh; kh++)
            for (int64_t j = 0; j < 4; j++) {
                uint32_t value = 0;
                for (int64_t t = 0; t < 4 && 4 * j + t < q->kw; t++) {
                    const int8_t tap = kernel[kh * q->kw + 4 * j + t];
                    value |= (uint32_t)(uint8_t)tap << (8 * t);
                    sum += tap;
                }
                target[kh * 4 + j] = (int32_t)value;
            }
        target[q->kh * 4] = sum;
    }
}

/* What a quad_depthwise launch's planes share. */
typedef struct {
    __m512i index[4];
    const Q *q;
    const uint8_t *x;
    const int32_t *bias, *packed;
    const float *mult;
    uint8_t *out;
    int64_t ph, pw, rows, wide, quads, in_plane, out_plane, rows_in, lo, hi, span;
    uint64_t launch;
    __mmask16 store_mask;
    uint8_t flip, uz;
} QuadJob;

static uint64_t quad_launches; /* launches so far (atomic): whose borders a buffer holds */

/* A register of 16 output positions' sums (the shift included) re-quantized and stored at
 * `at`: 16 bytes where `whole` (the next register's overwrite the lanes past this one's),
 * else the lanes of `mask` (the plane's last register). */
static inline __attribute__((always_inline)) void quad_store(__m512i acc, __m512 factor,
                                                             __m512i zero, uint8_t *at,
                                                             int whole, __mmask16 mask,
                                                             const Q *q) {
    const __m512i v = _mm512_add_epi32(
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), factor)), zero);
    const __m128i result = q->y_signed ? _mm512_cvtsepi32_epi8(v)
        : _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()));
    if (whole)
        _mm_storeu_si128((__m128i *)at, result);
    else
        _mm_mask_storeu_epi8(at, mask, result);
}

/* One plane of quad_depthwise. */
static void quad_plane(void *context, int64_t i) {
    const QuadJob *job = context;
    const Q *q = job->q;
    const uint8_t *x = job->x;
    const int32_t *bias = job->bias, *packed = job->packed;
    const float *mult = job->mult;
    uint8_t *out = job->out;
    const int64_t ph = job->ph, pw = job->pw, rows = job->rows, wide = job->wide;
    const int64_t quads = job->quads, in_plane = job->in_plane, out_plane = job->out_plane;
    const int64_t rows_in = job->rows_in, lo = job->lo, span = job->span;
    const __mmask16 store_mask = job->store_mask;
    const __m512i *index = job->index;
    const uint8_t flip = job->flip, uz = job->uz;
    /* the padded plane: u_zero everywhere once per launch and thread; each plane then
     * writes its interior */
    static __thread uint64_t ready;
    uint8_t *padded = scratch(0, (size_t)(ph * pw + 64));
    if (ready != job->launch) {
        memset(padded, uz, (size_t)(ph * pw + 64));
        ready = job->launch;
    }
    {
        const int64_t channel = i % q->c;
        for (int64_t ih = q->pt < 0 ? -q->pt : 0; ih < rows_in; ih++) {
            const uint8_t *source = x + i * in_plane + ih * q->w + (lo - q->pl);
            flip_row(padded + (ih + q->pt) * pw + lo, source, span, flip);
        }
        const int32_t *weights = packed + channel * (q->kh * 4 + 1);
        const int32_t weight_sum = weights[q->kh * 4];
        const __m512i shift = _mm512_set1_epi32(bias[channel] - (int32_t)uz * weight_sum);
        const __m512 factor = _mm512_set1_ps(mult[channel]);
        const __m512i zero = _mm512_set1_epi32((int32_t)q->yz);
        uint8_t *target = out + i * out_plane;
        if (q->kh == 3 && quads == 1) {
            /* a kernel of 3 rows of at most 4 taps (most depthwise launches): the weights and
             * indices in registers and the kernel rows unrolled, so that a plane's registers
             * overlap (one thread, Xeon Sapphire Rapids: 144 channels 3x3 at 56x56 247 -> 116
             * us, 32 channels at 112x112 185 -> 85) */
            const __m512i w0 = _mm512_set1_epi32(weights[0]), w1 = _mm512_set1_epi32(weights[4]);
            const __m512i w2 = _mm512_set1_epi32(weights[8]), taps = index[0];
            const int64_t kernel_row = q->dh * pw;
            for (int64_t oh = 0; oh < q->oh; oh += rows) {
                const int64_t row0 = oh + rows > q->oh ? q->oh - rows : oh;
                const uint8_t *r0 = padded + row0 * q->sh * pw;
                for (int64_t ow = 0; ow < (wide ? q->ow : 1); ow += 16) {
                    const int64_t ow0 = wide && ow + 16 > q->ow ? q->ow - 16 : ow;
                    const uint8_t *window = r0 + ow0 * q->sw;
                    __m512i acc = _mm512_dpbusd_epi32(
                        shift, _mm512_permutexvar_epi8(taps, _mm512_loadu_si512(window)), w0);
                    acc = _mm512_dpbusd_epi32(acc, _mm512_permutexvar_epi8(
                        taps, _mm512_loadu_si512(window + kernel_row)), w1);
                    acc = _mm512_dpbusd_epi32(acc, _mm512_permutexvar_epi8(
                        taps, _mm512_loadu_si512(window + 2 * kernel_row)), w2);
                    quad_store(acc, factor, zero, target + row0 * q->ow + ow0,
                               wide || row0 * q->ow + 16 <= out_plane, store_mask, q);
                }
            }
            return;
        }
        for (int64_t oh = 0; oh < q->oh; oh += rows) {
            /* the last register of the plane starts early enough to stay inside */
            const int64_t row0 = oh + rows > q->oh ? q->oh - rows : oh;
            for (int64_t ow = 0; ow < (wide ? q->ow : 1); ow += 16) {
                const int64_t ow0 = wide && ow + 16 > q->ow ? q->ow - 16 : ow;
                __m512i acc = shift;
                for (int64_t kh = 0; kh < q->kh; kh++) {
                    const __m512i bytes = _mm512_loadu_si512(
                        padded + (row0 * q->sh + kh * q->dh) * pw + ow0 * q->sw);
                    for (int64_t j = 0; j < quads; j++)
                        acc = _mm512_dpbusd_epi32(
                            acc, _mm512_permutexvar_epi8(index[j], bytes),
                            _mm512_set1_epi32(weights[kh * 4 + j]));
                }
                quad_store(acc, factor, zero, target + row0 * q->ow + ow0,
                           wide || row0 * q->ow + 16 <= out_plane, store_mask, q);
            }
        }
    }
}

/* `prepacked`: quad_pack's weights (packed here, per launch, where NULL). */
static void quad_depthwise(const uint8_t *x, const int8_t *w, const int32_t *bias,
                           const float *mult, uint8_t *out, const Q *q,
                           const int32_t *prepacked) {
    const int32_t *packed = prepacked;
    if (packed == NULL) {
        int32_t *own = scratch(1, sizeof(int32_t) * quad_weights_count(q));
        quad_pack(w, own, q);
        packed = own;
    }
    const int64_t ph = (q->oh - 1) * q->sh + (q->kh - 1) * q->dh + 1;
    const int64_t pw = (q->ow - 1) * q->sw + (q->kw - 1) * q->dw + 1;
    const int64_t rows = quad_rows(q), wide = q->ow >= 16;
    const int64_t quads = (q->kw + 3) / 4;
    const int64_t in_plane = q->h * q->w, out_plane = q->oh * q->ow, planes = q->n * q->c;
    const int lanes = wide ? 16 : (int)(rows * q->ow);
    const uint8_t flip = q->x_signed ? 0x80 : 0;
    const uint8_t uz = (uint8_t)(q->xz + (q->x_signed ? 128 : 0));
    /* byte indices of quad j's taps for each lane, relative to the window's start */
    uint8_t table[4][64] __attribute__((aligned(64)));
    for (int64_t j = 0; j < quads; j++)
        for (int lane = 0; lane < 16; lane++) {
            const int64_t r = wide ? 0 : lane / q->ow, col = wide ? lane : lane % q->ow;
            for (int t = 0; t < 4; t++) {
                const int64_t tap = 4 * j + t;
                table[j][4 * lane + t] = lane < lanes && tap < q->kw
                    ? (uint8_t)(r * q->sh * pw + col * q->sw + tap * q->dw) : 0;
            }
        }
    QuadJob job;
    for (int64_t j = 0; j < quads; j++) job.index[j] = _mm512_load_si512(table[j]);
    const __mmask16 store_mask = (__mmask16)((1u << lanes) - 1);
    const int64_t rows_in = q->h < ph - q->pt ? q->h : ph - q->pt; /* input rows read */
    const int64_t lo = q->pl < pw ? q->pl : pw;
    const int64_t hi = q->pl + q->w < pw ? q->pl + q->w : pw;
    const int64_t span = hi > lo ? hi - lo : 0; /* input columns read, at lo */
    job.q = q;
    job.x = x;
    job.bias = bias;
    job.packed = packed;
    job.mult = mult;
    job.out = out;
    job.ph = ph;
    job.pw = pw;
    job.rows = rows;
    job.wide = wide;
    job.quads = quads;
    job.in_plane = in_plane;
    job.out_plane = out_plane;
    job.rows_in = rows_in;
    job.lo = lo;
    job.hi = hi;
    job.span = span;
    job.launch = __atomic_add_fetch(&quad_launches, 1, __ATOMIC_RELAXED);
    job.store_mask = store_mask;
    job.flip = flip;
    job.uz = uz;
    run_items(planes, q->threads, quad_plane, &job);
}
#endif
