/* float32 depthwise convolution (groups == C == M) for fuel's CPU backend (after
 * conv_common.h): data and sizes as conv.c's. Each plane is copied once into a zero-padded
 * buffer so every output column runs the 16-wide vector loop (stride 1 and 2; other strides
 * and machines without AVX2 take the scalar row walk), the epilogue applied on each output
 * row while it is in cache. Blocks of planes are run_units' units. Form 18 (AVX-512):
 * depthwise_blocked.h's launch on blocked channels (NCHW16c).
 */

#define DEPTHWISE_BLOCKED 18

#define CHUNK 16  /* output columns a depthwise row accumulates in registers at once */

/* One output row of one depthwise plane. */
static inline void depthwise_row(const float *restrict in, const float *restrict w,
                                 float *restrict out, int64_t oh, const Shape *s) {
    const int64_t sw = s->sw;
    int64_t lo, hi;  /* the columns whose every tap is inside the row */
    interior_columns(s, &lo, &hi);
    const float *rows[64];
    const float *taps[64];
    int64_t count = 0;
    for (int64_t kh = 0; kh < s->kh && count < 64; kh++) {
        const int64_t ih = oh * s->sh + kh * s->dh - s->pt;
        if (ih < 0 || ih >= s->h) continue;
        rows[count] = in + ih * s->w - s->pl;
        taps[count] = w + kh * s->kw;
        count++;
    }
    /* Border columns: bounds checked. */
    for (int64_t ow = 0; ow < s->ow; ow++) {
        if (ow == lo && hi > lo) ow = hi;
        if (ow >= s->ow) break;
        float sum = 0.0f;
        for (int64_t r = 0; r < count; r++)
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const int64_t x = ow * sw + kw * s->dw;  /* relative to rows[r] (pad applied) */
                if (x - s->pl >= 0 && x - s->pl < s->w) sum += taps[r][kw] * rows[r][x];
            }
        out[ow] = sum;
    }
    int64_t ow = lo;
    for (; ow + CHUNK <= hi; ow += CHUNK) {
        float acc[CHUNK] = {0};
        for (int64_t r = 0; r < count; r++) {
            const float *row = rows[r] + ow * sw;
            for (int64_t kw = 0; kw < s->kw; kw++) {
                const float weight = taps[r][kw];
                const float *p = row + kw * s->dw;
                for (int j = 0; j < CHUNK; j++) acc[j] += weight * p[j * sw];
            }
        }
        memcpy(out + ow, acc, sizeof acc);
    }
    for (; ow < hi; ow++) {
        float sum = 0.0f;
        for (int64_t r = 0; r < count; r++)
            for (int64_t kw = 0; kw < s->kw; kw++)
                sum += taps[r][kw] * rows[r][ow * sw + kw * s->dw];
        out[ow] = sum;
    }
}

#if defined(VECTOR)
/* Depthwise over one plane through a zero-padded copy of it (`padded`: rows of `pw` floats,
 * wide enough for whole 16-column chunks), so every output column runs the vector loop; the
 * epilogue runs on each output row. sw is 1 or 2. */
static void depthwise_plane(const float *in, const float *filter, float *out, const Shape *s,
                            float *padded, int64_t pw, int64_t ph, float *row_buffer,
                            float bias, const float *residual, float alpha, float beta,
                            float slope) {
    const int64_t sw = s->sw;
    const int64_t left = s->pl < pw ? s->pl : pw;
    const int64_t width = s->w < pw - left ? s->w : pw - left;
#if defined(__AVX512F__)
    /* the padded copy's interior only: its borders were zeroed once for the launch and no
     * plane writes them */
    (void)ph;
    for (int64_t iy = 0; iy < s->h; iy++) {
        const int64_t y = iy + s->pt;
        if (y < ph) {
            const float *source = in + iy * s->w;
            float *target = padded + y * pw + left;
            for (int64_t j = 0; j < width; j++) target[j] = source[j];
        }
    }
    /* AVX-512: (output row, 16-column chunk) units UNITS (8) at a time, one accumulator each per
     * tap; the last chunk of a row stored masked; bias, residual and relu / clip applied on
     * the accumulators, other activations on the rows afterwards */
    (void)row_buffer;
#define UNITS 8
    const int64_t chunks = (s->ow + 15) / 16, units = s->oh * chunks;
    const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
                                           4, 2, 0);
    const int simple = s->act == NONE || s->act == RELU || s->act == CLIP;
    const __m512 low = _mm512_set1_ps(s->act == RELU ? 0.0f : alpha);
    const __m512 high = _mm512_set1_ps(beta), shift = _mm512_set1_ps(bias);
    const int64_t taps = s->kh * s->kw;  /* at most MAX_DEPTHWISE_ROWS rows of KW taps */
    int64_t offsets[taps];
    for (int64_t t = 0; t < taps; t++)
        offsets[t] = (t / s->kw) * s->dh * pw + (t % s->kw) * s->dw;
    for (int64_t u0 = 0; u0 < units; u0 += UNITS) {
        const float *base[UNITS];
        int64_t at[UNITS];
        __mmask16 mask[UNITS];
        __m512 acc[UNITS];
        for (int i = 0; i < UNITS; i++) {
            const int64_t u = u0 + i < units ? u0 + i : u0;
            const int64_t oh = u / chunks, ow = (u % chunks) * 16;
            base[i] = padded + oh * s->sh * pw + ow * sw;
            at[i] = oh * s->ow + ow;
            mask[i] = u0 + i >= units ? 0 : s->ow - ow >= 16 ? (__mmask16)0xFFFF
                                                              : (__mmask16)((1u << (s->ow - ow)) - 1);
            acc[i] = shift;
        }
        if (sw == 1)
            for (int64_t t = 0; t < taps; t++) {
                const __m512 weight = _mm512_set1_ps(filter[t]);
                const int64_t off = offsets[t];
                for (int i = 0; i < UNITS; i++)
                    acc[i] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(base[i] + off), acc[i]);
            }
        else
            for (int64_t t = 0; t < taps; t++) {
                const __m512 weight = _mm512_set1_ps(filter[t]);
                const int64_t off = offsets[t];
                for (int i = 0; i < UNITS; i++)
                    acc[i] = _mm512_fmadd_ps(weight, _mm512_permutex2var_ps(
                        _mm512_loadu_ps(base[i] + off), evens,
                        _mm512_loadu_ps(base[i] + off + 16)), acc[i]);
            }
        for (int i = 0; i < UNITS; i++) {
            __m512 v = acc[i];
            if (residual != NULL)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[i], residual + at[i]));
            if (s->act == RELU) v = _mm512_max_ps(v, low);
            else if (s->act == CLIP) v = _mm512_min_ps(high, _mm512_max_ps(low, v));
            _mm512_mask_storeu_ps(out + at[i], mask[i], v);
        }
    }
#undef UNITS
    if (!simple)
        for (int64_t oh = 0; oh < s->oh; oh++)
            finish(out + oh * s->ow, s->ow, 0.0f, NULL, s->act, alpha, beta, slope);
#else
    for (int64_t y = 0; y < ph; y++) {
        float *target = padded + y * pw;
        const int64_t iy = y - s->pt;
        if (iy < 0 || iy >= s->h) {
            memset(target, 0, sizeof(float) * pw);
            continue;
        }
        memset(target, 0, sizeof(float) * left);
        memcpy(target + left, in + iy * s->w, sizeof(float) * width);
        memset(target + left + width, 0, sizeof(float) * (pw - left - width));
    }
    for (int64_t oh = 0; oh < s->oh; oh++) {
        for (int64_t ow = 0; ow < s->ow; ow += 16) {
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const float *row = padded + (oh * s->sh + kh * s->dh) * pw + ow * sw;
                const float *taps = filter + kh * s->kw;
                for (int64_t kw = 0; kw < s->kw; kw++) {
                    const __m256 weight = _mm256_broadcast_ss(taps + kw);
                    const float *p = row + kw * s->dw;
                    __m256 v0, v1;
                    if (sw == 1) {
                        v0 = _mm256_loadu_ps(p);
                        v1 = _mm256_loadu_ps(p + 8);
                    } else {  /* the even elements of p[0:32] */
                        const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
                        const __m256 c = _mm256_loadu_ps(p + 16), d = _mm256_loadu_ps(p + 24);
                        v0 = _mm256_castpd_ps(_mm256_permute4x64_pd(
                            _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
                        v1 = _mm256_castpd_ps(_mm256_permute4x64_pd(
                            _mm256_castps_pd(_mm256_shuffle_ps(c, d, 0x88)), 0xD8));
                    }
                    acc0 = _mm256_fmadd_ps(weight, v0, acc0);
                    acc1 = _mm256_fmadd_ps(weight, v1, acc1);
                }
            }
            _mm256_storeu_ps(row_buffer + ow, acc0);
            _mm256_storeu_ps(row_buffer + ow + 8, acc1);
        }
        float *target = out + oh * s->ow;
        memcpy(target, row_buffer, sizeof(float) * s->ow);
        finish(target, s->ow, bias, residual != NULL ? residual + oh * s->ow : NULL, s->act,
               alpha, beta, slope);
    }
#endif
}
#endif

typedef struct {
    const float *x, *w, *bias, *residual, *slope;
    float *out;
    const Shape *s;
    float alpha, beta;
    int64_t plane, planes, per_unit, wide, pw, ph;
    int64_t mode, vectors;  /* AVX-512: DW_FLAT (`vectors` a plane, `masks`), else DW_PADDED */
    const void *masks;
} DepthwiseJob;
enum { DW_PADDED = 0, DW_FLAT, DW_PHASES, DW_ROWS };

/* Unit i: planes [i per_unit, (i + 1) per_unit), through this thread's padded buffer (its
 * borders zeroed once a unit: no plane writes them). */
static void depthwise_task(void *context, int64_t unit) {
    const DepthwiseJob *j = context;
    const Shape *s = j->s;
#if defined(__AVX512F__)
    if (j->mode != DW_PADDED) {
        const int64_t first = unit * j->per_unit;
        const int64_t last = first + j->per_unit < j->planes ? first + j->per_unit : j->planes;
        for (int64_t i = first; i < last; i++) {
            const int64_t c = i % s->c;
            if (j->mode == DW_FLAT && j->vectors <= 4 && i + 1 < last) {  /* planes i and i + 1 together */
                dw_flat_pair(j->x + i * s->h * s->w, j->w + c * s->kh * s->kw,
                             j->out + i * j->plane, j->bias,
                             j->residual != NULL ? j->residual + i * j->plane : NULL,
                             j->slope, c, s, j->masks, j->vectors, j->alpha, j->beta);
                i++;
                continue;
            }
            const float *in = j->x + i * s->h * s->w, *filter = j->w + c * s->kh * s->kw;
            const float b = j->bias != NULL ? j->bias[c] : 0.0f;
            const float k = j->slope != NULL ? j->slope[c] : 0.0f;
            const float *res = j->residual != NULL ? j->residual + i * j->plane : NULL;
            if (j->mode == DW_ROWS) {
                dw_rows_plane(in, filter, j->out + i * j->plane, s, b, res, j->alpha, j->beta,
                              k);
                continue;
            }
            if (j->mode == DW_PHASES) {
                dw_phase_plane(in, filter, j->out + i * j->plane, s,
                               thread_buffer(3, (size_t)dw_phase_floats(s)), b, res, j->alpha,
                               j->beta, k);
                continue;
            }
            dw_flat_plane(in, filter, j->out + i * j->plane, s, j->masks, j->vectors, b, res,
                          j->alpha, j->beta, k);
        }
        return;
    }
#endif
#if defined(VECTOR)
    const size_t padded_bytes = (sizeof(float) * (size_t)(j->pw * j->ph + 64) + 63) / 64 * 64;
    float *padded = s->sw <= 2 ? thread_buffer(0, padded_bytes / sizeof(float)) : NULL;
#if defined(__AVX512F__)
    if (padded != NULL) memset(padded, 0, padded_bytes);
#endif
    float *row_buffer = thread_buffer(1, (size_t)j->wide);
#endif
    const int64_t first = unit * j->per_unit;
    const int64_t last = first + j->per_unit < j->planes ? first + j->per_unit : j->planes;
    for (int64_t i = first; i < last; i++) {
        const int64_t c = i % s->c;
        const float *in = j->x + i * s->h * s->w;
        const float *filter = j->w + c * s->kh * s->kw;
        float *target = j->out + i * j->plane;
        const float b = j->bias != NULL ? j->bias[c] : 0.0f;
        const float k = j->slope != NULL ? j->slope[c] : 0.0f;
        const float *res = j->residual != NULL ? j->residual + i * j->plane : NULL;
#if defined(VECTOR)
        if (padded != NULL) {
            depthwise_plane(in, filter, target, s, padded, j->pw, j->ph, row_buffer, b, res,
                            j->alpha, j->beta, k);
            continue;
        }
#endif
        for (int64_t oh = 0; oh < s->oh; oh++) {
            float *row = target + oh * s->ow;
            depthwise_row(in, filter, row, oh, s);
            finish(row, s->ow, b, res != NULL ? res + oh * s->ow : NULL, s->act, j->alpha,
                   j->beta, k);
        }
    }
}

#if defined(__AVX512F__)
/* Narrow planes (at most NARROW output columns: 7x7 maps, where a 16-lane row would leave
 * most lanes idle): 16 channels of one image in the vector lanes instead. Unit i: channels
 * [16 i', 16 i' + 16) of image i / blocks: the block's padded planes transposed into a
 * (row, column, channel) buffer (borders zeroed once a unit), one 16-channel accumulator per
 * output position over the taps, then transposed back with the epilogue on each plane. */
#define NARROW 8
static void depthwise_channels_task(void *context, int64_t unit) {
    const DepthwiseJob *j = context;
    const Shape *s = j->s;
    const int64_t blocks = (s->c + 15) / 16, image = unit / blocks, c0 = (unit % blocks) * 16;
    const int64_t lanes = s->c - c0 < 16 ? s->c - c0 : 16, taps = s->kh * s->kw;
    const int64_t pw = (s->ow - 1) * s->sw + (s->kw - 1) * s->dw + 1;
    const int64_t ph = j->ph, plane_in = s->h * s->w;
    float *buffer = thread_buffer(0, (size_t)(16 * (pw * ph + taps + j->plane)));
    float *weights = buffer + 16 * pw * ph, *results = weights + 16 * taps;
    memset(buffer, 0, sizeof(float) * 16 * (size_t)(pw * ph));
    for (int64_t l = 0; l < lanes; l++) {
        const float *in = j->x + (image * s->c + c0 + l) * plane_in;
        for (int64_t iy = 0; iy < s->h; iy++) {
            const int64_t y = iy + s->pt;
            if (y >= ph) break;
            for (int64_t ix = 0; ix < s->w; ix++) {
                const int64_t x = ix + s->pl;
                if (x < pw) buffer[(y * pw + x) * 16 + l] = in[iy * s->w + ix];
            }
        }
        for (int64_t t = 0; t < taps; t++) weights[t * 16 + l] = j->w[(c0 + l) * taps + t];
    }
    for (int64_t l = lanes; l < 16; l++)
        for (int64_t t = 0; t < taps; t++) weights[t * 16 + l] = 0.0f;
    for (int64_t oh = 0; oh < s->oh; oh++)
        for (int64_t ow = 0; ow < s->ow; ow++) {
            const float *origin = buffer + (oh * s->sh * pw + ow * s->sw) * 16;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t kh = 0; kh < s->kh; kh++) {
                const float *row = origin + kh * s->dh * pw * 16;
                const float *w = weights + kh * s->kw * 16;
                for (int64_t kw = 0; kw < s->kw; kw++)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + kw * 16),
                                          _mm512_loadu_ps(row + kw * s->dw * 16), acc);
            }
            _mm512_storeu_ps(results + (oh * s->ow + ow) * 16, acc);
        }
    for (int64_t l = 0; l < lanes; l++) {
        const int64_t c = c0 + l, at = (image * s->c + c) * j->plane;
        float *target = j->out + at;
        for (int64_t p = 0; p < j->plane; p++) target[p] = results[p * 16 + l];
        finish(target, j->plane, j->bias != NULL ? j->bias[c] : 0.0f,
               j->residual != NULL ? j->residual + at : NULL, s->act, j->alpha, j->beta,
               j->slope != NULL ? j->slope[c] : 0.0f);
    }
}
#endif

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (pool_share(data, sizes)) return;
    const int64_t threads = (sizes[1] > 1 ? sizes[1] : 1);
    const Shape s = shape_of(sizes);
    const float *scalars = data[6];
#if defined(__AVX512F__)
    if (sizes[0] == DEPTHWISE_BLOCKED) {  /* depthwise_blocked.h */
        depthwise_blocked((const float *const *)data, &s, threads,
                          scalars != NULL ? scalars[0] : 0.0f,
                          scalars != NULL ? scalars[1] : 0.0f);
        return;
    }
#endif
    DepthwiseJob j = {data[0], data[1], data[2], data[3], data[5], data[4], &s,
                      scalars != NULL ? scalars[0] : 0.0f, scalars != NULL ? scalars[1] : 0.0f,
                      s.oh * s.ow, s.n * s.c, 1, (s.ow + 15) / 16 * 16, 0, 0, DW_PADDED, 0,
                      NULL};
    j.pw = j.wide * s.sw + (s.kw - 1) * s.dw + 32;
    j.ph = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1;
#if defined(__AVX512F__)
    const int64_t taps = s.kh * s.kw, flat = (s.oh * s.ow + 15) / 16;
    /* the flat layout where it measured faster than the padded copy (one thread, this
     * machine): up to 56x56 with 3x3 (144 channels at 56x56: 228 us against 254; 480 at
     * 14x14: 56 against 85; 1152 at 7x7: 55 against 107), up to 20x20 with larger kernels
     * (672 channels 5x5 at 14x14: 190 against 222; 240 at 28x28: 233 against 227) */
    const int64_t plane = s.oh * s.ow;
    if (dw_rows_fits(&s) && (s.sh == 2 || s.ow > NARROW)) {
        /* the row strips (depthwise_rows.h) where they measured faster (one thread, this
         * machine): 32 channels 3x3 at 112x112 129 us against the padded copy's 198, 144 at
         * 56x56 144 against the flat layout's 206, 480 at 14x14 36 against 56, 672 5x5 at
         * 14x14 104 against 144; stride 2: 96 3x3 at 112x112 209 against the phases' 285,
         * 576 3x3 at 14x14 38 against the channel lanes' 64, 672 5x5 80 against 132; not a
         * 7x7 stride-1 output (1152 3x3: 48 against the flat pair's 39) */
        j.mode = DW_ROWS;
    } else if (s.sh == 1 && s.sw == 1 && s.ow == s.w && flat * taps <= DW_MASKS
            && (plane <= 400 || (taps <= 9 && plane <= 3136))) {
        uint16_t *masks = (uint16_t *)thread_buffer(2, (size_t)(flat * taps / 2 + 1));
        dw_flat_masks(&s, masks, flat);
        j.mode = DW_FLAT, j.vectors = flat, j.masks = masks;
    } else if (s.sh == 2 && s.sw == 2) {
        /* stride 2 through the four phases (one thread: 96 channels 3x3 at 112x112 292 us
         * against the padded copy's 364, 144 5x5 at 56x56 175 against 251, 96 5x5 at 28x28
         * 39 against 54; to a 7x7 output against the channel-lane form: 576 3x3 68 against
         * 102, 672 5x5 123 against 145) */
        j.mode = DW_PHASES;
    }
    if (s.ow <= NARROW && j.mode == DW_PADDED) {
        run_units(s.n * ((s.c + 15) / 16), threads, depthwise_channels_task, &j);
        return;
    }
#endif
    /* about four units a thread */
    j.per_unit = threads > 1 ? (j.planes + 4 * threads - 1) / (4 * threads) : j.planes;
    if (j.per_unit < 1) j.per_unit = 1;
    run_units((j.planes + j.per_unit - 1) / j.per_unit, threads, depthwise_task, &j);
}
