/* IEEE half (2 bytes, little-endian) to float, exactly: the scale of a GGUF block. Text
 * placed before the quantized libraries that read half scales (quantized.py's format
 * libraries, quantized_int8.py's), each built from one concatenated source. */
#include <stdint.h>
#include <string.h>

static inline float half_to_float(const uint8_t *p) {
#if defined(__FLT16_MAX__)
    _Float16 h;
    memcpy(&h, p, 2);
    return (float)h;
#else
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0x1f) bits = sign | 0x7f800000u | (mantissa << 13);
    else if (exponent != 0) bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else if (mantissa == 0) bits = sign;
    else {
        exponent = 113;
        while (!(mantissa & 0x400)) { mantissa <<= 1; exponent--; }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
    float value;
    memcpy(&value, &bits, 4);
    return value;
#endif
}
