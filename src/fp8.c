/* Scalar conversions between float and the two narrow formats of the API (docs/semantics.md §4.5):
 *   FP8 E4M3 ("fn" variant: bias 7, 3 mantissa bits, no infinities, 0x7f/0xff are NaN,
 *            largest finite 448 = 1.75 * 2^8, smallest subnormal 2^-9), and
 *   bfloat16 (the upper 16 bits of an IEEE binary32).
 * Everything is integer arithmetic on the bit patterns, so the result does not depend on
 * the compiler's floating-point settings. Rounding is to nearest, ties to even.
 *
 * float -> E4M3 matches PTX cvt.rn.satfinite.e4m3x2.f32: round first, then any magnitude
 * above 448 (including +-inf) becomes +-448; NaN becomes 0x7f with the sign bit kept. */
#include <stdint.h>
#include <string.h>

#include "pageweaver.h"

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rounds value / 2^shift to the nearest integer, ties to even (value >= 0). */
static uint32_t shift_right_rne(uint32_t value, int shift)
{
    if (shift <= 0) return value;
    if (shift > 31) return 0; /* callers pass value < 2^24: the quotient is below 1/2 */
    const uint32_t quotient = value >> shift;
    const uint32_t remainder = value & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (quotient & 1u))) return quotient + 1u;
    return quotient;
}

pw_fp8_e4m3_t pw_fp8_e4m3_from_float(float x)
{
    const uint32_t u = float_bits(x);
    const uint32_t sign = (u >> 31) << 7;
    const uint32_t magnitude = u & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (pw_fp8_e4m3_t)(sign | 0x7fu); /* NaN */
    if (magnitude == 0x7f800000u) return (pw_fp8_e4m3_t)(sign | 0x7eu); /* inf -> 448 */

    /* |x| = significand * 2^(exponent - 23), significand < 2^24. */
    const int exponent_field = (int)(magnitude >> 23);
    uint32_t significand = magnitude & 0x7fffffu;
    int exponent;
    if (exponent_field == 0) {
        exponent = -126; /* float subnormal (or zero): no implicit bit */
    } else {
        exponent = exponent_field - 127;
        significand |= 0x800000u;
    }
    /* E4M3 spacing at this magnitude: 2^(e-3) with e = max(exponent, -6); -6 is the
     * smallest normal exponent, below it the subnormal spacing 2^-9 continues. */
    const int e = exponent < -6 ? -6 : exponent;
    /* Count of 2^(e-3) steps, rounded: significand * 2^(exponent-23) / 2^(e-3). */
    const uint32_t steps = shift_right_rne(significand, 20 + (e - exponent));
    /* steps is 0..16 (16 only when rounding carried into the next binade). The code of
     * steps * 2^(e-3) is (e + 6) * 8 + steps: the 8 steps of each binade follow each
     * other in code order, and a carry to 16 lands on the next exponent's mantissa 0. */
    const int32_t code = (int32_t)(e + 6) * 8 + (int32_t)steps;
    if (code > 0x7e) return (pw_fp8_e4m3_t)(sign | 0x7eu); /* satfinite: 448 */
    return (pw_fp8_e4m3_t)(sign | (uint32_t)code);
}

float pw_fp8_e4m3_to_float(pw_fp8_e4m3_t x)
{
    const uint32_t sign = (uint32_t)(x >> 7) << 31;
    const uint32_t exponent_field = (x >> 3) & 0xfu;
    uint32_t mantissa = x & 0x7u;
    if (exponent_field == 0xf && mantissa == 0x7) return bits_float(sign | 0x7fc00000u);
    if (exponent_field != 0)
        /* (1 + m/8) * 2^(E - 7): float exponent field E - 7 + 127. */
        return bits_float(sign | ((exponent_field + 120u) << 23) | (mantissa << 20));
    if (mantissa == 0) return bits_float(sign); /* +-0 */
    /* Subnormal m/8 * 2^-6: normalise so that the leading bit of m is the implicit one. */
    int32_t exponent = -6;
    while (!(mantissa & 0x8u)) {
        mantissa <<= 1;
        exponent -= 1;
    }
    return bits_float(sign | ((uint32_t)(exponent + 127) << 23) | ((mantissa & 0x7u) << 20));
}

pw_bf16_t pw_bf16_from_float(float x)
{
    const uint32_t u = float_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, set quiet bit */
        return (pw_bf16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry
     * out of the mantissa increments the exponent, which is right (up to inf). */
    const uint32_t lowest_kept = (u >> 16) & 1u;
    return (pw_bf16_t)((u + 0x7fffu + lowest_kept) >> 16);
}

float pw_bf16_to_float(pw_bf16_t x) { return bits_float((uint32_t)x << 16); }
