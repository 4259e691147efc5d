/* qlinear_conv.c's second half (qlinear_conv.py builds the two as one source): the
 * channels-last VNNI form and the entry point. */

#if defined(VNNI)
/* ------------------------------------------------------------------ VNNI, channels last */

#define PR 6  /* output positions per register tile */
#define MB 16 /* output channels per register tile (two vectors of 8) */

/* The weights packed for gemm_vnni, per group: per block of 16 output channels
 * [tap][channel quad][16][4] (zeros past the channels), then the rows' sums (int32). Kept in
 * a small cache keyed by the weights' contents (a 64-bit hash of every byte, read each
 * launch: a tenth of packing's cost) and shape, so constant weights are packed once. A lock
 * holds one gemm_vnni launch at a time (its entry stays valid while it runs). */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
#define CACHED 256
static struct {
    uint64_t hash;
    int64_t count, groups, per_out, per_in, taps;
    uint8_t *packed;
} cache[CACHED];
static int64_t cache_next;

static uint64_t hash_bytes(const int8_t *w, int64_t count) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)count, a = 0, b = 0;
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) {
        uint64_t u, v;
        memcpy(&u, w + i, 8);
        memcpy(&v, w + i + 8, 8);
        a = (a ^ u) * 0xff51afd7ed558ccdull + (uint64_t)i;
        b = (b ^ v) * 0xc4ceb9fe1a85ec53ull + (uint64_t)i;
    }
    for (; i < count; i++) a = (a ^ (uint8_t)w[i]) * 0x100000001b3ull;
    h ^= a + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= b + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

/* Bytes of the packed weights of a launch (groups x (blocks x block_bytes + per_out sums)). */
static size_t packed_bytes(int64_t groups, int64_t per_out, int64_t per_in, int64_t taps) {
    const int64_t quads = (per_in + 3) / 4, blocks = (per_out + MB - 1) / MB;
    const size_t block_bytes = (size_t)(taps * quads * MB * 4);
    const size_t group_bytes = (block_bytes * (size_t)blocks + sizeof(int32_t) * (size_t)per_out + 63) / 64 * 64;
    return group_bytes * (size_t)groups;
}

static void pack_into(const int8_t *w, uint8_t *packed, int64_t groups, int64_t per_out,
                      int64_t per_in, int64_t taps) {
    const int64_t quads = (per_in + 3) / 4, blocks = (per_out + MB - 1) / MB;
    const size_t block_bytes = (size_t)(taps * quads * MB * 4);
    const size_t group_bytes = packed_bytes(1, per_out, per_in, taps);
    memset(packed, 0, group_bytes * (size_t)groups);
    for (int64_t group = 0; group < groups; group++) {
        uint8_t *base = packed + group * group_bytes;
        int32_t *sums = (int32_t *)(base + block_bytes * (size_t)blocks);
        for (int64_t m = 0; m < per_out; m++) {
            const int8_t *row = w + (group * per_out + m) * per_in * taps;
            int8_t *target = (int8_t *)base + (m / MB) * block_bytes + (m % MB) * 4;
            int32_t total = 0;
            for (int64_t c = 0; c < per_in; c++)
                for (int64_t tap = 0; tap < taps; tap++) {
                    const int8_t value = row[c * taps + tap];
                    total += value;
                    target[(tap * quads + c / 4) * MB * 4 + c % 4] = value;
                }
            sums[m] = total;
        }
    }
}

static const uint8_t *packed_weights(const int8_t *w, int64_t count, int64_t groups,
                                     int64_t per_out, int64_t per_in, int64_t taps) {
    const uint64_t hash = hash_bytes(w, count);
    for (int i = 0; i < CACHED; i++)
        if (cache[i].packed != NULL && cache[i].hash == hash && cache[i].count == count &&
            cache[i].groups == groups && cache[i].per_out == per_out &&
            cache[i].per_in == per_in && cache[i].taps == taps)
            return cache[i].packed;
    uint8_t *packed = aligned_alloc(64, (packed_bytes(groups, per_out, per_in, taps) + 63) / 64 * 64);
    if (packed == NULL) abort();
    pack_into(w, packed, groups, per_out, per_in, taps);
    const int64_t slot = cache_next++ % CACHED;
    free(cache[slot].packed);
    cache[slot].hash = hash;
    cache[slot].count = count;
    cache[slot].groups = groups;
    cache[slot].per_out = per_out;
    cache[slot].per_in = per_in;
    cache[slot].taps = taps;
    cache[slot].packed = packed;
    return packed;
}

#if defined(__AVX512F__)
/* acc[0..R) = the sums of R positions (starting rows ih0, columns iw0) by one block of 16
 * output channels: zmm vpdpbusd, 16 channels' sums per position in one register (a ymm one
 * retires half the products per cycle on some cores). Inlined per R, so acc stays in
 * registers. */
static inline __attribute__((always_inline)) void vnni_sums(
        const int R, __m512i *acc, const int64_t *ih0, const int64_t *iw0,
        const uint8_t *weights, const uint8_t *channels_last, const uint8_t *zeros, int64_t c4,
        int64_t quads, const Q *q) {
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_si512();
    for (int64_t kh = 0; kh < q->kh; kh++)
        for (int64_t kw = 0; kw < q->kw; kw++) {
            const uint8_t *at[PR];
            for (int r = 0; r < R; r++) {
                const int64_t ih = ih0[r] + kh * q->dh, iw = iw0[r] + kw * q->dw;
                at[r] = ih >= 0 && ih < q->h && iw >= 0 && iw < q->w
                    ? channels_last + (ih * q->w + iw) * c4 : zeros;
            }
            const uint8_t *wq = weights + (kh * q->kw + kw) * quads * MB * 4;
            for (int64_t quad = 0; quad < quads; quad++) {
                const __m512i b = _mm512_load_si512((const void *)(wq + quad * 64));
                for (int r = 0; r < R; r++) {
                    int32_t value;
                    memcpy(&value, at[r] + quad * 4, sizeof(value));
                    acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(value), b);
                }
            }
        }
}

/* vnni_sums for NB blocks of 16 output channels at once (a whole tile of PR positions): per
 * channel quad NB weight loads and PR broadcasts serve NB x PR vpdpbusd (24 accumulators at
 * NB 4), where one block at a time spent a load per 6. Inlined per NB. */
static inline __attribute__((always_inline)) void vnni_sums_blocks(
        const int NB, __m512i acc[][PR], const int64_t *ih0, const int64_t *iw0,
        const uint8_t *weights, size_t block_bytes, const uint8_t *channels_last,
        const uint8_t *zeros, int64_t c4, int64_t quads, const Q *q) {
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < PR; r++) acc[b][r] = _mm512_setzero_si512();
    for (int64_t kh = 0; kh < q->kh; kh++)
        for (int64_t kw = 0; kw < q->kw; kw++) {
            const uint8_t *at[PR];
            for (int r = 0; r < PR; r++) {
                const int64_t ih = ih0[r] + kh * q->dh, iw = iw0[r] + kw * q->dw;
                at[r] = ih >= 0 && ih < q->h && iw >= 0 && iw < q->w
                    ? channels_last + (ih * q->w + iw) * c4 : zeros;
            }
            const uint8_t *wq = weights + (kh * q->kw + kw) * quads * MB * 4;
            for (int64_t quad = 0; quad < quads; quad++) {
                __m512i b[4];
                for (int j = 0; j < NB; j++)
                    b[j] = _mm512_load_si512((const void *)(wq + j * block_bytes + quad * 64));
                for (int r = 0; r < PR; r++) {
                    int32_t value;
                    memcpy(&value, at[r] + quad * 4, sizeof(value));
                    const __m512i a = _mm512_set1_epi32(value);
                    for (int j = 0; j < NB; j++) acc[j][r] = _mm512_dpbusd_epi32(acc[j][r], a, b[j]);
                }
            }
        }
}
#endif

/* out[m, p] = requantize(sum over taps and channels of u[pos(p, tap), c] * w[m, c, tap]),
 * per image and group: the input copied channels-last (u, channels padded to a multiple of
 * 4 with u_zero), the weights packed per block of 16 channels as [tap][channel quad][16][4],
 * then a 6-position x 16-channel tile of vpdpbusd reading each position's 4 channels as one
 * broadcast (a tap outside the image reads a row of u_zero). */
/* One image and group of gemm_vnni: what its two tasks share. */
typedef struct {
    const Q *q;
    const int32_t *bias;
    const float *mult;
    uint8_t *out;
    const uint8_t *source, *packed;
    const int32_t *sums;
    uint8_t *channels_last, *zeros;
    int64_t per_in, per_out, quads, c4, in_plane, plane, blocks, tiles;
    size_t block_bytes;
    int64_t group, image;
    uint8_t flip, uz;
} VnniJob;

#define TILE_UNIT 1 /* register tiles (of a group of blocks) per unit of work */
#define NB_MOST 4  /* blocks of 16 output channels a full tile sums at once */

/* Positions [256 * unit, ...) of the input copied channels last (blocks that stay in L2). */
static void vnni_channels_last(void *context, int64_t unit) {
    const VnniJob *job = context;
    const uint8_t *source = job->source;
    uint8_t *channels_last = job->channels_last;
    const int64_t in_plane = job->in_plane, per_in = job->per_in, c4 = job->c4;
    const uint8_t flip = job->flip, uz = job->uz;
    const int64_t p0 = unit * 256;
    const int64_t p1 = p0 + 256 < in_plane ? p0 + 256 : in_plane;
    int64_t c = 0;
    /* 4 channels x 16 positions interleaved into 16 quads by byte/word
     * unpacks, one 4-byte store per position */
    const __m128i mask = _mm_set1_epi8((char)flip);
    for (; c + 4 <= per_in; c += 4) {
        const uint8_t *row = source + c * in_plane;
        int64_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            const __m128i a0 = _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(row + p)), mask);
            const __m128i a1 = _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(row + in_plane + p)), mask);
            const __m128i a2 = _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(row + 2 * in_plane + p)), mask);
            const __m128i a3 = _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(row + 3 * in_plane + p)), mask);
            const __m128i t0 = _mm_unpacklo_epi8(a0, a1);
            const __m128i t1 = _mm_unpackhi_epi8(a0, a1);
            const __m128i t2 = _mm_unpacklo_epi8(a2, a3);
            const __m128i t3 = _mm_unpackhi_epi8(a2, a3);
            const __m128i quads[4] = {
                _mm_unpacklo_epi16(t0, t2), _mm_unpackhi_epi16(t0, t2),
                _mm_unpacklo_epi16(t1, t3), _mm_unpackhi_epi16(t1, t3)};
            uint8_t *target = channels_last + p * c4 + c;
            for (int v = 0; v < 4; v++) {
                int32_t lanes[4];
                _mm_storeu_si128((__m128i *)lanes, quads[v]);
                for (int i = 0; i < 4; i++)
                    memcpy(target + (4 * v + i) * c4, &lanes[i], 4);
            }
        }
        for (; p < p1; p++)
            for (int64_t i = 0; i < 4; i++)
                channels_last[p * c4 + c + i] = row[i * in_plane + p] ^ flip;
    }
    for (; c < per_in; c++) {
        const uint8_t *row = source + c * in_plane;
        for (int64_t p = p0; p < p1; p++) channels_last[p * c4 + c] = row[p] ^ flip;
    }
    for (int64_t c = per_in; c < c4; c++)
        for (int64_t p = p0; p < p1; p++) channels_last[p * c4 + c] = uz;
}

/* Register tiles [TILE_UNIT * unit, ...) in block-major order: a helper's tiles reuse one
 * block's weights from cache. */
static void vnni_tiles(void *context, int64_t index) {
    const VnniJob *job = context;
    const Q *q = job->q;
    const int32_t *bias = job->bias, *sums = job->sums;
    const float *mult = job->mult;
    uint8_t *out = job->out;
    const uint8_t *packed = job->packed, *channels_last = job->channels_last, *zeros = job->zeros;
    const int64_t per_out = job->per_out, quads = job->quads, c4 = job->c4, plane = job->plane;
    const int64_t blocks = job->blocks, tiles = job->tiles, group = job->group, image = job->image;
    const size_t block_bytes = job->block_bytes;
    const uint8_t uz = job->uz;
    const int64_t units = (blocks + NB_MOST - 1) / NB_MOST * tiles;
    const int64_t end = (index + 1) * TILE_UNIT < units ? (index + 1) * TILE_UNIT : units;
    for (int64_t unit = index * TILE_UNIT; unit < end; unit++) {
        /* block-major: a thread's tiles reuse one group of blocks' weights from cache */
        const int64_t first_block = unit / tiles * NB_MOST, tile_index = unit % tiles;
        const int nb = (int)(blocks - first_block < NB_MOST ? blocks - first_block : NB_MOST);
        const int64_t p0 = tile_index * PR;
        const int rows = (int)(plane - p0 < PR ? plane - p0 : PR);
        int64_t ih0[PR], iw0[PR];
        for (int r = 0; r < PR; r++) {
            const int64_t p = p0 + (r < rows ? r : 0);
            ih0[r] = p / q->ow * q->sh - q->pt;
            iw0[r] = p % q->ow * q->sw - q->pl;
        }
#if defined(__AVX512F__)
        __m512i all[NB_MOST][PR]; /* a whole tile's sums, every block of the group at once */
        if (rows == PR) {
            const uint8_t *weights = packed + first_block * block_bytes;
            switch (nb) {
            case 1: vnni_sums_blocks(1, all, ih0, iw0, weights, block_bytes, channels_last, zeros, c4, quads, q); break;
            case 2: vnni_sums_blocks(2, all, ih0, iw0, weights, block_bytes, channels_last, zeros, c4, quads, q); break;
            case 3: vnni_sums_blocks(3, all, ih0, iw0, weights, block_bytes, channels_last, zeros, c4, quads, q); break;
            default: vnni_sums_blocks(NB_MOST, all, ih0, iw0, weights, block_bytes, channels_last, zeros, c4, quads, q);
            }
        }
#endif
        for (int64_t block = first_block; block < first_block + nb; block++) {
            const uint8_t *weights = packed + block * block_bytes;
#if defined(__AVX512F__)
            /* zmm: 16 channels' sums per position in one register (a ymm vpdpbusd
             * retires half the products per cycle on some cores) */
            __m512i acc[PR];
            if (rows == PR)
                for (int r = 0; r < PR; r++) acc[r] = all[block - first_block][r];
            else
                switch (rows) { /* a tile of fewer positions sums only those */
            case 1: vnni_sums(1, acc, ih0, iw0, weights, channels_last, zeros, c4, quads, q); break;
            case 2: vnni_sums(2, acc, ih0, iw0, weights, channels_last, zeros, c4, quads, q); break;
            case 3: vnni_sums(3, acc, ih0, iw0, weights, channels_last, zeros, c4, quads, q); break;
            case 4: vnni_sums(4, acc, ih0, iw0, weights, channels_last, zeros, c4, quads, q); break;
            case 5: vnni_sums(5, acc, ih0, iw0, weights, channels_last, zeros, c4, quads, q); break;
            default: vnni_sums(PR, acc, ih0, iw0, weights, channels_last, zeros, c4, quads, q);
            }
            const int64_t m0 = block * MB;
            const int count = (int)(per_out - m0 < MB ? per_out - m0 : MB);
            int32_t shift[MB] __attribute__((aligned(64)));
            float scale[MB] __attribute__((aligned(64)));
            for (int j = 0; j < MB; j++) {
                const int64_t m = group * per_out + m0 + (j < count ? j : 0);
                shift[j] = bias[m] - (int32_t)uz * sums[m0 + (j < count ? j : 0)];
                scale[j] = mult[m];
            }
            const __m512i zero = _mm512_set1_epi32((int32_t)q->yz);
            const __m512i shifts = _mm512_load_si512(shift);
            const __m512 scales = _mm512_load_ps(scale);
            uint8_t bytes[PR][MB]; /* [position][channel], then per channel a run */
            for (int r = 0; r < rows; r++) {
                const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_add_epi32(acc[r], shifts)), scales)), zero);
                _mm_storeu_si128((__m128i *)bytes[r], q->y_signed
                    ? _mm512_cvtsepi32_epi8(v)
                    : _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512())));
            }
#else
            __m256i acc[PR][2];
            for (int r = 0; r < PR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
            for (int64_t kh = 0; kh < q->kh; kh++)
                for (int64_t kw = 0; kw < q->kw; kw++) {
                    const uint8_t *at[PR];
                    for (int r = 0; r < PR; r++) {
                        const int64_t ih = ih0[r] + kh * q->dh, iw = iw0[r] + kw * q->dw;
                        at[r] = ih >= 0 && ih < q->h && iw >= 0 && iw < q->w
                            ? channels_last + (ih * q->w + iw) * c4 : zeros;
                    }
                    const uint8_t *wq = weights + (kh * q->kw + kw) * quads * MB * 4;
                    for (int64_t quad = 0; quad < quads; quad++) {
                        const __m256i b0 = _mm256_load_si256((const __m256i *)(wq + quad * 64));
                        const __m256i b1 = _mm256_load_si256((const __m256i *)(wq + quad * 64 + 32));
                        for (int r = 0; r < PR; r++) {
                            int32_t value;
                            memcpy(&value, at[r] + quad * 4, sizeof(value));
                            const __m256i a = _mm256_set1_epi32(value);
                            acc[r][0] = _mm256_dpbusd_epi32(acc[r][0], a, b0);
                            acc[r][1] = _mm256_dpbusd_epi32(acc[r][1], a, b1);
                        }
                    }
                }
            /* re-quantize 16 channels per position, then scatter to NCHW */
            const int64_t m0 = block * MB;
            const int count = (int)(per_out - m0 < MB ? per_out - m0 : MB);
            int32_t shift[MB] __attribute__((aligned(32)));
            float scale[MB] __attribute__((aligned(32)));
            for (int j = 0; j < MB; j++) {
                const int64_t m = group * per_out + m0 + (j < count ? j : 0);
                shift[j] = bias[m] - (int32_t)uz * sums[m0 + (j < count ? j : 0)];
                scale[j] = mult[m];
            }
            const __m256i zero = _mm256_set1_epi32((int32_t)q->yz);
            uint8_t bytes[PR][MB]; /* [position][channel], then per channel a run */
            for (int r = 0; r < rows; r++) {
                __m256i v[2];
                for (int h = 0; h < 2; h++) {
                    const __m256i sum = _mm256_add_epi32(
                        acc[r][h], _mm256_load_si256((const __m256i *)shift + h));
                    v[h] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(
                        _mm256_cvtepi32_ps(sum), _mm256_load_ps(scale + 8 * h))), zero);
                }
                const __m256i words = _mm256_permute4x64_epi64(
                    _mm256_packs_epi32(v[0], v[1]), 0xd8);
                const __m128i low = _mm256_castsi256_si128(words);
                const __m128i high = _mm256_extracti128_si256(words, 1);
                _mm_storeu_si128((__m128i *)bytes[r], q->y_signed
                                 ? _mm_packs_epi16(low, high) : _mm_packus_epi16(low, high));
            }
#endif
            /* the tile's positions are consecutive in each channel's plane: one run
             * of `rows` bytes per channel (the scatter of single bytes cost more than
             * the sums at 16 channels) */
            uint8_t *first = out + (image * q->m + group * per_out + m0) * plane + p0;
#if PR == 6
            if (rows == PR && count == MB) { /* transposed by byte and word unpacks */
                const __m128i r0 = _mm_loadu_si128((const __m128i *)bytes[0]);
                const __m128i r1 = _mm_loadu_si128((const __m128i *)bytes[1]);
                const __m128i r2 = _mm_loadu_si128((const __m128i *)bytes[2]);
                const __m128i r3 = _mm_loadu_si128((const __m128i *)bytes[3]);
                const __m128i r4 = _mm_loadu_si128((const __m128i *)bytes[4]);
                const __m128i r5 = _mm_loadu_si128((const __m128i *)bytes[5]);
                const __m128i a_lo = _mm_unpacklo_epi8(r0, r1), a_hi = _mm_unpackhi_epi8(r0, r1);
                const __m128i b_lo = _mm_unpacklo_epi8(r2, r3), b_hi = _mm_unpackhi_epi8(r2, r3);
                const __m128i tail[2] = {_mm_unpacklo_epi8(r4, r5), _mm_unpackhi_epi8(r4, r5)};
                const __m128i head[4] = {_mm_unpacklo_epi16(a_lo, b_lo), _mm_unpackhi_epi16(a_lo, b_lo),
                                         _mm_unpacklo_epi16(a_hi, b_hi), _mm_unpackhi_epi16(a_hi, b_hi)};
                int32_t heads[16];
                int16_t tails[16];
                for (int v = 0; v < 4; v++) _mm_storeu_si128((__m128i *)heads + v, head[v]);
                for (int v = 0; v < 2; v++) _mm_storeu_si128((__m128i *)tails + v, tail[v]);
                for (int j = 0; j < MB; j++) {
                    memcpy(first + j * plane, &heads[j], 4);
                    memcpy(first + j * plane + 4, &tails[j], 2);
                }
                continue;
            }
#endif
            uint8_t runs[MB][PR];
            for (int j = 0; j < MB; j++)
                for (int r = 0; r < PR; r++) runs[j][r] = bytes[r < rows ? r : 0][j];
            if (rows == PR)
                for (int j = 0; j < count; j++) {
                    memcpy(first + j * plane, runs[j], 4);
                    memcpy(first + j * plane + 4, runs[j] + 4, PR - 4);
                }
            else
                for (int j = 0; j < count; j++)
                    for (int r = 0; r < rows; r++) first[j * plane + r] = runs[j][r];
        }
    }
}

static void gemm_vnni(const uint8_t *x, const int8_t *w, const int32_t *bias, const float *mult,
                      uint8_t *out, const Q *q, const uint8_t *prepacked) {
    const int64_t per_in = q->c / q->groups, per_out = q->m / q->groups;
    const int64_t quads = (per_in + 3) / 4, c4 = quads * 4, taps = q->kh * q->kw;
    const int64_t depth = per_in * taps, plane = q->oh * q->ow, in_plane = q->h * q->w;
    const int64_t blocks = (per_out + MB - 1) / MB, tiles = (plane + PR - 1) / PR;
    const uint8_t flip = q->x_signed ? 0x80 : 0;
    const uint8_t uz = (uint8_t)(q->xz + (q->x_signed ? 128 : 0));
    const size_t block_bytes = (size_t)(taps * quads * MB * 4);
    uint8_t *channels_last = shared_buffer((size_t)(in_plane * c4 + c4));
    const uint8_t *all = prepacked != NULL ? prepacked
                                           : packed_weights(w, q->m * depth, q->groups, per_out,
                                                            per_in, taps);
    const size_t group_bytes = (block_bytes * (size_t)blocks + sizeof(int32_t) * (size_t)per_out + 63) / 64 * 64;
    uint8_t *zeros = channels_last + in_plane * c4; /* a position outside the image */
    memset(zeros, uz, (size_t)c4);
    VnniJob job = {q, bias, mult, out, NULL, NULL, NULL, channels_last, zeros, per_in, per_out,
                   quads, c4, in_plane, plane, blocks, tiles, block_bytes, 0, 0, flip, uz};
    for (int64_t group = 0; group < q->groups; group++) {
        const uint8_t *packed = all + group * group_bytes;
        const int32_t *sums = (const int32_t *)(packed + block_bytes * (size_t)blocks);
        for (int64_t image = 0; image < q->n; image++) {
            job.group = group;
            job.image = image;
            job.packed = packed;
            job.sums = sums;
            job.source = x + (image * q->c + group * per_in) * in_plane;
            run_units((in_plane + 255) / 256, q->threads, vnni_channels_last, &job);
            run_items(((blocks + NB_MOST - 1) / NB_MOST * tiles + TILE_UNIT - 1) / TILE_UNIT,
                      q->threads, vnni_tiles, &job);
        }
    }
}
#endif

/* Whether a launch is a depthwise the float forms take (at most 256 taps, |bias| < 2**23). */
static int small_depthwise(const int32_t *bias, const Q *q) {
    int small = q->groups == q->c && q->c == q->m && q->groups > 1 && q->kh * q->kw <= 256;
    for (int64_t m = 0; small && m < q->m; m++)
        small = bias[m] > -(1 << 23) && bias[m] < (1 << 23);
    return small;
}

static int whole_plane(const Q *q) {
    return q->groups == q->c && q->c == q->m && q->oh == 1 && q->ow == 1 && q->kh == q->h &&
           q->kw == q->w && q->pt == 0 && q->pl == 0 && q->h * q->w <= 65536;
}

/* Whether a launch that is neither takes the channels-last VNNI form. */
#if defined(VNNI)
static int channels_last(const Q *q) {
    /* 1x1 kernels take the patch matrix's form (the input as stored, or one strided copy of
     * the positions read) unless the positions are fewer than half a panel; so do fewer than
     * 32 input channels per group (measured, one thread, 3x3: 16 channels to 64 at 55x55 0.6x
     * the time of the channels-last form, 16 to 16 at 256x256 0.57x, 16 to 32 at 128x128 1.0x,
     * 32 to 32 at 56x56 and 128x128 1.0-1.2x, 64 to 64 at 56x56 1.6x) */
    const int64_t per_in = q->c / q->groups;
    if (q->kh == 1 && q->kw == 1) return q->oh * q->ow <= NR / 2 && per_in >= 16;
    return per_in >= 32;
}
#endif

/* sizes[0] POOL_SHARE: the work pool handed over (qlinear_units.h). Else sizes[21], the
 * mode: 0 a launch (the channels-last form packs its weights through the cache, the quad
 * depthwise and gemm forms per launch), 1 a launch with the weights packed in
 * data[5], 2 the packed weights' byte count (0 where the form packs none) written to
 * ((int64_t *)data[5])[0], 3 pack the weights into data[5]. */
void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    if (take_pool(data, sizes)) return;
    const Q q = {sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6],
                 sizes[7], sizes[8], sizes[9], sizes[10], sizes[11], sizes[12], sizes[13],
                 sizes[14], sizes[15], sizes[16], sizes[17], sizes[18], sizes[19], sizes[20]};
    const int64_t mode = sizes[21];
    const uint8_t *x = data[0];
    const int8_t *w = data[1];
    const int32_t *bias = data[2];
    const float *mult = data[3];
    uint8_t *out = data[4];
#if defined(QUAD_DEPTHWISE)
    if (!whole_plane(&q) && quad_depthwise_fits(&q)) {
        if (mode == 2)
            ((int64_t *)data[5])[0] = (int64_t)(sizeof(int32_t) * quad_weights_count(&q));
        else if (mode == 3)
            quad_pack(w, data[5], &q);
        else
            quad_depthwise(x, w, bias, mult, out, &q, mode == 1 ? data[5] : NULL);
        return;
    }
#endif
    if (whole_plane(&q)) { /* a global (weighted) pooling */
        if (mode == 2) ((int64_t *)data[5])[0] = 0;
        else if (mode != 3) plane_dots(x, w, bias, mult, out, &q);
        return;
    }
    if (small_depthwise(bias, &q)) {
        if (mode == 2) ((int64_t *)data[5])[0] = 0;
        if (mode >= 2) return;
#if defined(__AVX512F__)
        if (q.ow < 16)
            depthwise_last(x, w, bias, mult, out, &q);
        else
#endif
            depthwise_rows(x, w, bias, mult, out, &q);
        return;
    }
    const int64_t per_out = q.m / q.groups, per_in = q.c / q.groups, taps = q.kh * q.kw;
#if defined(VNNI)
    if (channels_last(&q)) {
        if (mode == 2)
            ((int64_t *)data[5])[0] = (int64_t)packed_bytes(q.groups, per_out, per_in, taps);
        else if (mode == 3)
            pack_into(w, data[5], q.groups, per_out, per_in, taps);
        else if (mode == 1)
            gemm_vnni(x, w, bias, mult, out, &q, data[5]);
        else {
            pthread_mutex_lock(&cache_lock);
            gemm_vnni(x, w, bias, mult, out, &q, NULL);
            pthread_mutex_unlock(&cache_lock);
        }
        return;
    }
#endif
#if defined(TILE_OUT)
    if (mode == 2)
        ((int64_t *)data[5])[0] = (int64_t)gemm_packed_bytes(q.groups, per_out, per_in * taps);
    else if (mode == 3)
        gemm_pack(w, q.groups, per_out, per_in * taps, data[5]);
    else
        gemm(x, w, bias, mult, out, &q, mode == 1 ? data[5] : NULL);
#else
    (void)per_in;
    (void)per_out;
    (void)taps;
    if (mode == 2) ((int64_t *)data[5])[0] = 0;
    else if (mode != 3) gemm(x, w, bias, mult, out, &q, NULL);
#endif
}
