/* FP8 E4M3 and bfloat16 conversions (src/fp8.c): exhaustive over every code, midpoints
 * of every adjacent pair, random floats against slow references computed in double,
 * saturation, NaN, signed zero. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static uint64_t g_seed;

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* E4M3 value from its fields, independent of src/fp8.c: NaN for S.1111.111,
 * m/8 * 2^-6 for exponent field 0, (1 + m/8) * 2^(e-7) otherwise. */
static double e4m3_formula(int code)
{
    const int sign = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
    double v;
    if (e == 15 && m == 7) v = NAN;
    else if (e == 0) v = ldexp((double)m, -9);
    else v = ldexp((double)(8 + m), e - 10);
    return sign ? -v : v;
}

/* bfloat16 value from its fields (8 exponent bits, bias 127, 7 mantissa bits). */
static double bf16_formula(int code)
{
    const int sign = (code >> 15) & 1, e = (code >> 7) & 255, m = code & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -133);
    else v = ldexp((double)(128 + m), e - 134);
    return sign ? -v : v;
}

/* Slow E4M3 reference: the nearest of the 127 non-negative finite values by exhaustive
 * search in double (ties to the even code), magnitudes above 448 saturate. */
static int e4m3_reference(float x)
{
    const int sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7f;
    const double a = fabs((double)x);
    int best = 0;
    double best_dist = INFINITY;
    for (int code = 0; code <= 0x7e; code++) {
        const double dist = fabs(e4m3_formula(code) - a);
        if (dist < best_dist || (dist == best_dist && (code & 1) == 0)) {
            best = code;
            best_dist = dist;
        }
    }
    /* Beyond 448 the nearest finite code is 448 anyway (satfinite). */
    return sign | best;
}

/* Slow bfloat16 reference in double: the two candidates are the value with the low 16
 * bits cut (toward zero) and the next bf16 away from zero. */
static uint16_t bf16_reference(float x)
{
    const uint32_t u = bits_of(x);
    const uint16_t low = (uint16_t)(u >> 16);
    if ((u & 0xffffu) == 0) return low;
    const double a = fabs(bf16_formula(low));
    /* The code above low (in magnitude); past the largest finite it is inf, which as a
     * rounding target sits at 2^128. */
    const uint16_t high = (uint16_t)(low + 1);
    const double b = ((high & 0x7fff) == 0x7f80) ? ldexp(1.0, 128) : fabs(bf16_formula(high));
    const double v = fabs((double)x);
    const double da = v - a, db = b - v;
    if (da < db) return low;
    if (db < da) return high;
    return (low & 1) ? high : low;
}

static void test_e4m3_decode_all_codes(void **state)
{
    (void)state;
    for (int code = 0; code < 256; code++) {
        const float f = pw_fp8_e4m3_to_float((pw_fp8_e4m3_t)code);
        const double expect = e4m3_formula(code);
        if (isnan(expect)) {
            if (!isnan(f)) fail_msg("code 0x%02x decodes to %g, expected NaN", code, (double)f);
            if (!!signbit(f) != (code >= 0x80)) fail_msg("code 0x%02x NaN sign", code);
            continue;
        }
        if ((double)f != expect || !!signbit(f) != !!signbit(expect))
            fail_msg("code 0x%02x decodes to %.10g, expected %.10g", code, (double)f, expect);
    }
    assert_true(pw_fp8_e4m3_to_float(0x7e) == 448.0f);
    assert_true(pw_fp8_e4m3_to_float(0x01) == 0x1p-9f);
    assert_true(pw_fp8_e4m3_to_float(0x08) == 0x1p-6f);
}

static void test_e4m3_roundtrip_all_codes(void **state)
{
    (void)state;
    for (int code = 0; code < 256; code++) {
        if ((code & 0x7f) == 0x7f) continue; /* NaN: tested separately */
        const float f = pw_fp8_e4m3_to_float((pw_fp8_e4m3_t)code);
        const int back = pw_fp8_e4m3_from_float(f);
        if (back != code)
            fail_msg("code 0x%02x -> %.10g -> code 0x%02x", code, (double)f, back);
    }
    assert_int_equal(pw_fp8_e4m3_from_float(-0.0f), 0x80);
    assert_int_equal(pw_fp8_e4m3_from_float(0.0f), 0x00);
}

static void test_e4m3_midpoints(void **state)
{
    (void)state;
    int checked = 0;
    for (int code = 0; code < 0x7e; code++) {
        const float a = pw_fp8_e4m3_to_float((pw_fp8_e4m3_t)code);
        const float b = pw_fp8_e4m3_to_float((pw_fp8_e4m3_t)(code + 1));
        const float mid = (float)(((double)a + (double)b) / 2.0);
        assert_true((double)mid == ((double)a + (double)b) / 2.0); /* exact in float */
        const int even = (code & 1) ? code + 1 : code;
        for (int s = 0; s < 2; s++) {
            const float sg = s ? -1.0f : 1.0f;
            const int sbit = s ? 0x80 : 0;
            const int at = pw_fp8_e4m3_from_float(sg * mid);
            const int above = pw_fp8_e4m3_from_float(sg * nextafterf(mid, INFINITY));
            const int below = pw_fp8_e4m3_from_float(sg * nextafterf(mid, 0.0f));
            if (at != (sbit | even) || above != (sbit | (code + 1)) || below != (sbit | code))
                fail_msg("between codes 0x%02x and 0x%02x (sign %d): mid -> 0x%02x, "
                         "mid+ulp -> 0x%02x, mid-ulp -> 0x%02x",
                         code, code + 1, s, at, above, below);
            checked++;
        }
    }
    assert_int_equal(checked, 2 * 0x7e);
    /* The tie between 0 and the smallest subnormal goes to 0 (even). */
    assert_int_equal(pw_fp8_e4m3_from_float(0x1p-10f), 0x00);
    assert_int_equal(pw_fp8_e4m3_from_float(-0x1p-10f), 0x80);
    assert_int_equal(pw_fp8_e4m3_from_float(nextafterf(0x1p-10f, 1.0f)), 0x01);
    assert_int_equal(pw_fp8_e4m3_from_float(1e-30f), 0x00);
    assert_int_equal(pw_fp8_e4m3_from_float(-1e-30f), 0x80);
    assert_int_equal(pw_fp8_e4m3_from_float(0x1p-149f), 0x00); /* float subnormal */
}

static void test_e4m3_random_vs_reference(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xe4e3u);
    printf("e4m3 random: seed %llu\n", (unsigned long long)g_seed);
    for (int i = 0; i < 200000; i++) {
        float x;
        switch (i % 3) {
        case 0: /* any finite float */
            do x = float_of((uint32_t)pw_rng_next(&rng)); while (!isfinite(x));
            break;
        case 1: /* the E4M3 range and a little beyond */
            x = (float)ldexp(pw_rng_uniform(&rng) * 2.0 - 1.0, (int)pw_rng_range(&rng, -12, 10));
            break;
        default: /* normal data scaled like a quantised tensor */
            x = (float)(pw_rng_normal(&rng) * 100.0);
            break;
        }
        const int got = pw_fp8_e4m3_from_float(x), expect = e4m3_reference(x);
        if (got != expect)
            fail_msg("e4m3(%a = %.10g) = 0x%02x, reference 0x%02x (seed %llu)", (double)x,
                     (double)x, got, expect, (unsigned long long)g_seed);
    }
}

static void test_e4m3_saturation_and_nan(void **state)
{
    (void)state;
    const float big[] = {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e30f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        assert_int_equal(pw_fp8_e4m3_from_float(big[i]), 0x7e);
        assert_int_equal(pw_fp8_e4m3_from_float(-big[i]), 0xfe);
    }
    assert_int_equal(pw_fp8_e4m3_from_float(432.0f), 0x7e); /* tie 416/448 -> even 448 */
    assert_int_equal(pw_fp8_e4m3_from_float(431.0f), 0x7d); /* 416 */
    assert_int_equal(pw_fp8_e4m3_from_float(NAN), 0x7f);
    assert_int_equal(pw_fp8_e4m3_from_float(-NAN), 0xff);
    assert_int_equal(pw_fp8_e4m3_from_float(float_of(0x7f800001u)), 0x7f); /* signalling */
    assert_int_equal(pw_fp8_e4m3_from_float(float_of(0xffc00000u)), 0xff);
    assert_true(isnan(pw_fp8_e4m3_to_float(0x7f)) && !signbit(pw_fp8_e4m3_to_float(0x7f)));
    assert_true(isnan(pw_fp8_e4m3_to_float(0xff)) && signbit(pw_fp8_e4m3_to_float(0xff)));
    /* 0x7e / 0xfe are the largest finite values, not NaN. */
    assert_true(pw_fp8_e4m3_to_float(0xfe) == -448.0f);
}

static void test_bf16_all_codes(void **state)
{
    (void)state;
    for (int code = 0; code < 65536; code++) {
        const float f = pw_bf16_to_float((pw_bf16_t)code);
        const double expect = bf16_formula(code);
        if (isnan(expect)) {
            if (!isnan(f)) fail_msg("bf16 0x%04x decodes to %g, expected NaN", code, (double)f);
            const int back = pw_bf16_from_float(f);
            if (!isnan(pw_bf16_to_float((pw_bf16_t)back)))
                fail_msg("bf16 NaN 0x%04x re-encodes to non-NaN 0x%04x", code, back);
            if ((back & 0x8000) != (code & 0x8000)) fail_msg("bf16 NaN 0x%04x sign lost", code);
            continue;
        }
        if ((double)f != expect || !!signbit(f) != !!signbit(expect))
            fail_msg("bf16 0x%04x decodes to %.10g, expected %.10g", code, (double)f, expect);
        const int back = pw_bf16_from_float(f);
        if (back != code) fail_msg("bf16 0x%04x -> %.10g -> 0x%04x", code, (double)f, back);
    }
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xbf16u);
    printf("bf16 random: seed %llu\n", (unsigned long long)g_seed);
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)pw_rng_next(&rng);
        switch (i % 4) {
        case 1: u = (u & 0xffff0000u) | 0x8000u; break;            /* exact tie */
        case 2: /* one float ulp above or below a tie */
            u = (u & 0xffff0000u) | (((i >> 2) & 1) ? 0x8001u : 0x7fffu);
            break;
        case 3: u = (u & 0x807f0000u) | 0x7f7f8000u; break;         /* near the top: overflow */
        default: break;
        }
        const float x = float_of(u);
        if (isnan(x)) continue;
        const int got = pw_bf16_from_float(x), expect = bf16_reference(x);
        if (got != expect)
            fail_msg("bf16(%a) = 0x%04x, reference 0x%04x (seed %llu)", (double)x, got, expect,
                     (unsigned long long)g_seed);
    }
    assert_int_equal(pw_bf16_from_float(INFINITY), 0x7f80);
    assert_int_equal(pw_bf16_from_float(-INFINITY), 0xff80);
    assert_int_equal(pw_bf16_from_float(FLT_MAX), 0x7f80); /* rounds up past the top */
    assert_int_equal(pw_bf16_from_float(-0.0f), 0x8000);
    assert_int_equal(pw_bf16_from_float(1.0f + 0x1p-8f), 0x3f80);           /* tie -> even */
    assert_int_equal(pw_bf16_from_float(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81); /* above tie */
    assert_int_equal(pw_bf16_from_float(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);  /* tie -> even */
}

static void test_bf16_nan(void **state)
{
    (void)state;
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const int b = pw_bf16_from_float(float_of(nans[i]));
        const float back = pw_bf16_to_float((pw_bf16_t)b);
        if (!isnan(back)) fail_msg("NaN 0x%08x -> bf16 0x%04x is not NaN", nans[i], b);
        assert_true((b & 0x0040) != 0); /* quiet */
        assert_int_equal(b >> 15, nans[i] >> 31);
    }
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_decode_all_codes),
        cmocka_unit_test(test_e4m3_roundtrip_all_codes),
        cmocka_unit_test(test_e4m3_midpoints),
        cmocka_unit_test(test_e4m3_random_vs_reference),
        cmocka_unit_test(test_e4m3_saturation_and_nan),
        cmocka_unit_test(test_bf16_all_codes),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
