/* The patch matrices of a convolution on small planes (convolution_c.py's ``batched`` form):
 * for every input plane p (the batch's N * C planes in order, so every image's patch matrix
 * follows the previous one's),
 *   cols[((p * KH + kh) * KW + kw) * OH * OW + oh * OW + ow]
 *       = x[p, oh * SH - PT + kh * DH, ow * SW - PL + kw * DW]   (0 in the padding),
 * conv.c's im2col layout. conv.c's im2col copies each output row with memcpy and handles its
 * padded ends per row: on planes of a few positions (4x4, 3x3) those calls cost more than the
 * copy. Here each plane is first copied once into a zero-padded plane on the stack (or the
 * heap past STACK_FLOATS), and every patch row is read from it without bounds checks.
 *
 * Entry: fuel_kernel(data, sizes, strides)
 *   data  = {x, cols}        (float *; cols holds 16 floats of slack past its end)
 *   sizes = {planes, H, W, KH, KW, OH, OW, SH, SW, DH, DW, PT, PL}
 *   strides is unused (NULL).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define STACK_FLOATS 4096

/* count floats from source to target: masked vectors (a row of a small plane is one). */
static inline void copy_row(float *restrict target, const float *restrict source,
                            int64_t count) {
#ifdef __AVX512F__
    int64_t c = 0;
    for (; c + 16 <= count; c += 16) _mm512_storeu_ps(target + c, _mm512_loadu_ps(source + c));
    if (c < count) {
        const __mmask16 mask = (__mmask16)((1u << (count - c)) - 1u);
        _mm512_mask_storeu_ps(target + c, mask, _mm512_maskz_loadu_ps(mask, source + c));
    }
#else
    for (int64_t c = 0; c < count; c++) target[c] = source[c];
#endif
}

static void plane_patches(const float *restrict x, float *restrict cols, float *restrict pad,
                          const int64_t *s) {
    const int64_t h = s[1], w = s[2], kh = s[3], kw = s[4], oh = s[5], ow = s[6];
    const int64_t sh = s[7], sw = s[8], dh = s[9], dw = s[10], pt = s[11], pl = s[12];
    const int64_t ph = (oh - 1) * sh + (kh - 1) * dh + 1, pw = (ow - 1) * sw + (kw - 1) * dw + 1;
    /* The padded plane covers every window: rows [-pt, ph - pt), columns [-pl, pw - pl). */
    const int64_t lo = pl < 0 ? 0 : pl > pw ? pw : pl;  /* padded columns [lo, hi) from x */
    const int64_t hi = pl + w > pw ? pw : pl + w < lo ? lo : pl + w;
    memset(pad, 0, sizeof(float) * ph * pw);
    for (int64_t r = 0; r < ph; r++) {
        const int64_t y = r - pt;
        if (y < 0 || y >= h || hi <= lo) continue;
        copy_row(pad + r * pw + lo, x + y * w + lo - pl, hi - lo);
    }
    const int64_t plane = oh * ow;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            float *target = cols + (i * kw + j) * plane;
            for (int64_t y = 0; y < oh; y++) {
                const float *source = pad + (y * sh + i * dh) * pw + j * dw;
                float *out = target + y * ow;
                if (sw == 1)
                    copy_row(out, source, ow);
                else
                    for (int64_t c = 0; c < ow; c++) out[c] = source[c * sw];
            }
        }
}

#ifdef __AVX512F__
/* Unit-stride rows of at most 16 outputs: each patch row is one masked load straight from the
 * plane (the lanes that fall in the padding masked off: they read as 0 and never fault) and
 * one whole 16-float store, written in address order so that the next row overwrites what a
 * store wrote past its row (masked stores are slow on some machines): cols needs 16 floats
 * of slack past its end. */
static void small_rows(const float *restrict x, float *restrict cols, const int64_t *s) {
    const int64_t planes = s[0], h = s[1], w = s[2], kh = s[3], kw = s[4], oh = s[5];
    const int64_t ow = s[6], sh = s[7], dh = s[9], dw = s[10], pt = s[11], pl = s[12];
    __mmask16 masks[kw];
    for (int64_t j = 0; j < kw; j++) {
        const int64_t shift = j * dw - pl;  /* x's column of output column c: c + shift */
        unsigned bits = 0;
        for (int64_t c = 0; c < ow; c++)
            if (c + shift >= 0 && c + shift < w) bits |= 1u << c;
        masks[j] = (__mmask16)bits;
    }
    float *out = cols;
    for (int64_t p = 0; p < planes; p++) {
        const float *source = x + p * h * w;
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++)
                for (int64_t y = 0; y < oh; y++, out += ow) {
                    const int64_t row = y * sh + i * dh - pt;
                    _mm512_storeu_ps(out, row >= 0 && row < h ? _mm512_maskz_loadu_ps(
                        masks[j], source + row * w + j * dw - pl) : _mm512_setzero_ps());
                }
    }
}
#endif

void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
#ifdef __AVX512F__
    if (sizes[8] == 1 && sizes[6] <= 16 && sizes[4] <= 256) {
        small_rows((const float *)data[0], (float *)data[1], sizes);
        return;
    }
#endif
    const float *x = (const float *)data[0];
    float *cols = (float *)data[1];
    const int64_t planes = sizes[0], h = sizes[1], w = sizes[2], kh = sizes[3], kw = sizes[4];
    const int64_t oh = sizes[5], ow = sizes[6], sh = sizes[7], sw = sizes[8], dh = sizes[9];
    const int64_t dw = sizes[10];
    const int64_t ph = (oh - 1) * sh + (kh - 1) * dh + 1, pw = (ow - 1) * sw + (kw - 1) * dw + 1;
    const int64_t floats = ph * pw;
    float stack[STACK_FLOATS];
    float *pad = floats <= STACK_FLOATS ? stack : (float *)malloc(sizeof(float) * floats);
    if (pad == NULL) return;
    const int64_t rows = kh * kw * oh * ow;
    for (int64_t p = 0; p < planes; p++)
        plane_patches(x + p * h * w, cols + p * rows, pad, sizes);
    if (pad != stack) free(pad);
}
