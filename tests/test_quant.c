/* quant: f16/bf16 conversion edge cases, hand-built blocks of every format decoding to the
 * values the published layouts say, and quantize -> dequantize round trips within bounds. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../worker/quant.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_quant_f16_rounds_to_nearest_even(void **state)
{
    (void)state;
    assert_int_equal(quant_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(quant_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(quant_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);        /* tie -> even */
    assert_int_equal(quant_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);    /* tie -> even */
    assert_int_equal(quant_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(quant_f32_to_f16(65504.0f), 0x7bff);                /* max finite */
    assert_int_equal(quant_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(quant_f32_to_f16(65520.0f), 0x7c00);                /* rounds to inf */
    assert_int_equal(quant_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(quant_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(quant_f32_to_f16(-0.0f), 0x8000);
}

static void test_quant_f16_handles_inf_nan_subnormals(void **state)
{
    (void)state;
    assert_int_equal(quant_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(quant_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = quant_f32_to_f16(NAN);
    assert_int_equal(n & 0x7c00, 0x7c00);
    assert_true((n & 0x3ff) != 0);
    assert_true(isnan(quant_f16_to_f32(n)));
    assert_int_equal(quant_f32_to_f16(0x1p-14f), 0x0400);       /* smallest normal */
    assert_int_equal(quant_f32_to_f16(0x1p-24f), 0x0001);       /* smallest subnormal */
    assert_int_equal(quant_f32_to_f16(0x1p-25f), 0x0000);       /* tie -> even (0) */
    assert_int_equal(quant_f32_to_f16(1.5f * 0x1p-25f), 0x0001);
    assert_int_equal(quant_f32_to_f16(3 * 0x1p-25f), 0x0002);   /* 1.5 units: tie -> 2 */
    assert_int_equal(quant_f32_to_f16(-5 * 0x1p-24f), 0x8005);
    assert_int_equal(quant_f32_to_f16(0x1p-30f), 0x0000);
    assert_true(quant_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(quant_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    assert_true(isinf(quant_f16_to_f32(0x7c00)) && quant_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(quant_f16_to_f32(0xfc00)) && quant_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(quant_f16_to_f32(0x7e00)));
    assert_true(signbit(quant_f16_to_f32(0x8000)));
}

static void test_quant_f16_round_trips_every_value(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(quant_f16_to_f32(quant_f32_to_f16(f))));
        else
            assert_int_equal(quant_f32_to_f16(f), h);
    }
}

static void test_quant_bf16_rounds_and_keeps_specials(void **state)
{
    (void)state;
    assert_int_equal(quant_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(quant_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
    assert_int_equal(quant_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
    assert_int_equal(quant_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(quant_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(quant_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(quant_f32_to_bf16(3.4028235e38f), 0x7f80); /* FLT_MAX rounds to inf */
    uint16_t n = quant_f32_to_bf16(NAN);
    assert_true(isnan(quant_bf16_to_f32(n)));
    assert_true(n & 0x40); /* quiet */
    /* a signalling NaN whose payload sits in the dropped bits must not become inf */
    float snan;
    uint32_t u = 0x7f800001u;
    memcpy(&snan, &u, sizeof u);
    assert_true(isnan(quant_bf16_to_f32(quant_f32_to_bf16(snan))));
    /* subnormals are kept, not flushed */
    float sub = quant_bf16_to_f32(quant_f32_to_bf16(1e-38f)); /* ~109 units of 2^-133 */
    assert_true(sub > 0.99e-38f && sub < 1.01e-38f);
    assert_int_equal(bits(quant_bf16_to_f32(0x3f81)), 0x3f810000u);
}

static void test_quant_q8_0_block_decodes_known_values(void **state)
{
    (void)state;
    struct quant_block_q8_0 b = {.d = 0x3800}; /* 0.5 */
    float y[32];
    for (int j = 0; j < 32; j++)
        b.qs[j] = (int8_t)(j - 16);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q8_0, &b, y, 32), 0);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == 0.5f * (float)(j - 16));
}

static void test_quant_q4_0_block_decodes_known_values(void **state)
{
    (void)state;
    struct quant_block_q4_0 b = {.d = 0x4000}; /* 2.0 */
    float y[32];
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q4_0, &b, y, 32), 0);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 2.0f * (float)(j - 8));           /* low nibbles: 0..15 */
        assert_true(y[j + 16] == 2.0f * (float)(15 - j - 8)); /* high nibbles: 16..31 */
    }
}

static void test_quant_q4_k_block_decodes_known_values(void **state)
{
    (void)state;
    /* sub-block scales and mins, packed by hand per the 6-bit layout in quant.h */
    static const int sc[8] = {1, 2, 3, 4, 5, 22, 37, 63};
    static const int m[8] = {0, 1, 2, 3, 10, 20, 40, 63};
    static const uint8_t packed[12] = {1, 66, 131, 196, 0, 65, 130, 195, 165, 70, 133, 255};
    struct quant_block_q4_k b = {.d = 0x3c00, .dmin = 0x3800}; /* 1.0, 0.5 */
    float y[256];
    memcpy(b.scales, packed, 12);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b.qs[32 * c + l] = (uint8_t)((l % 16) | (15 - l % 16) << 4);
    for (int j = 0; j < 8; j++) {
        uint8_t s, mm;
        quant_q4_k_scale_min(b.scales, j, &s, &mm);
        assert_int_equal(s, sc[j]);
        assert_int_equal(mm, m[j]);
    }
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q4_K, &b, y, 256), 0);
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) {
            int q = j % 2 == 0 ? l % 16 : 15 - l % 16;
            assert_true(y[32 * j + l] == 1.0f * (float)(sc[j] * q) - 0.5f * (float)m[j]);
        }
}

static void test_quant_q6_k_block_decodes_known_values(void **state)
{
    (void)state;
    struct quant_block_q6_k b;
    float y[256];
    memset(&b, 0, sizeof b);
    b.d = 0x3400; /* 0.25 */
    for (int k = 0; k < 16; k++)
        b.scales[k] = (int8_t)(k - 8);
    /* q(e) = e % 64, packed by hand: half h, l < 32, part p: element 128h + 32p + l */
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            int q0 = (128 * h + l) % 64, q1 = (128 * h + 32 + l) % 64;
            int q2 = (128 * h + 64 + l) % 64, q3 = (128 * h + 96 + l) % 64;
            b.ql[64 * h + l] = (uint8_t)((q0 & 15) | (q2 & 15) << 4);
            b.ql[64 * h + 32 + l] = (uint8_t)((q1 & 15) | (q3 & 15) << 4);
            b.qh[32 * h + l] = (uint8_t)(q0 >> 4 | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
        }
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q6_K, &b, y, 256), 0);
    for (int e = 0; e < 256; e++)
        assert_true(y[e] == 0.25f * (float)((e / 16 - 8) * (e % 64 - 32)));
}

/* Hand-built blocks of the newer types against the layouts in quant.h (ggml's): Q5_0's high
 * bits (element j is bit j of qh, little-endian), Q5_1's min, IQ4_NL's table, Q2_K's and
 * Q3_K's element order (e = 128n + 32j + l from bits 2j of qs[32n + l]), Q3_K's 6-bit scales
 * and hmask, Q5_K's bit j of qh[l], IQ4_XS's split scales. */
static void test_quant_newer_blocks_decode_known_values(void **state)
{
    (void)state;
    float y[256];
    struct quant_block_q5_0 q50 = {.d = 0x3c00, .qh = {0x01, 0x00, 0x01, 0x80}};
    for (int j = 0; j < 16; j++)
        q50.qs[j] = (uint8_t)(j | (15 - j) << 4);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q5_0, &q50, y, 32), 0);
    for (int j = 0; j < 32; j++) {
        int lo = j < 16 ? j : 15 - (j - 16), hi = j == 0 || j == 16 || j == 31;
        assert_true(y[j] == (float)((lo | hi << 4) - 16));
    }
    struct quant_block_q5_1 q51 = {.d = 0x4000, .m = 0xbc00, .qh = {0, 0, 0, 0x40}}; /* 2, -1 */
    memcpy(q51.qs, q50.qs, 16);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q5_1, &q51, y, 32), 0);
    assert_true(y[0] == -1.0f && y[1] == 1.0f && y[30] == 2.0f * (1 + 16) - 1.0f);
    struct quant_block_iq4_nl nl = {.d = 0x3800}; /* 0.5 */
    for (int j = 0; j < 16; j++)
        nl.qs[j] = (uint8_t)(j | j << 4);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_IQ4_NL, &nl, y, 32), 0);
    assert_true(y[0] == -63.5f && y[8] == 0.5f && y[31] == 56.5f);

    struct quant_block_q2_k q2;
    memset(&q2, 0, sizeof q2);
    q2.d = 0x3c00;
    q2.dmin = 0x3800;
    for (int k = 0; k < 16; k++)
        q2.scales[k] = (uint8_t)((k % 16) | (15 - k) << 4);
    q2.qs[32 + 5] = 3 << 4; /* n = 1, j = 2, l = 5: element 128 + 64 + 5 */
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q2_K, &q2, y, 256), 0);
    for (int e = 0; e < 256; e++) {
        float q = e == 197 ? 3.0f : 0.0f;
        assert_true(y[e] == (float)(e / 16) * q - 0.5f * (float)(15 - e / 16));
    }

    struct quant_block_q3_k q3;
    memset(&q3, 0, sizeof q3);
    q3.d = 0x3c00;
    for (int k = 0; k < 16; k++) { /* sc[k] = 32 + k, i.e. (k, 2) in (low 4, high 2) bits */
        int v = 32 + k;
        if (k < 8)
            q3.scales[k] |= (uint8_t)(v & 15);
        else
            q3.scales[k - 8] |= (uint8_t)((v & 15) << 4);
        q3.scales[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
    }
    for (int k = 0; k < 16; k++)
        assert_int_equal(quant_q3_k_scale(q3.scales, k), 32 + k);
    memset(q3.hmask, 0xff, sizeof q3.hmask);
    q3.hmask[7] = (uint8_t)~(1u << 5);     /* element 128 + 32 + 7 loses its high bit */
    q3.qs[32 + 7] = 2 << 2;                /* and has low bits 2 */
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q3_K, &q3, y, 256), 0);
    for (int e = 0; e < 256; e++)
        assert_true(y[e] == (float)(e / 16) * (e == 167 ? -2.0f : 0.0f));

    struct quant_block_q5_k q5;
    memset(&q5, 0, sizeof q5);
    q5.d = 0x3c00;
    q5.scales[0] = 1;
    q5.scales[8] = 2; /* sub-block 4: scale 2 */
    q5.qh[3] = 1 << 4;
    q5.qs[64 + 3] = 7;
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q5_K, &q5, y, 256), 0);
    for (int e = 0; e < 256; e++)
        assert_true(y[e] == (e == 128 + 3 ? 2.0f * 23.0f : 0.0f));

    struct quant_block_iq4_xs xs;
    memset(&xs, 0, sizeof xs);
    xs.d = 0x3c00;
    for (int j = 0; j < 8; j++) { /* ls[j] = 32 + j - 4 */
        int ls = 28 + j;
        xs.scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
        xs.scales_h |= (uint16_t)((ls >> 4) << (2 * j));
    }
    for (int i = 0; i < 128; i++)
        xs.qs[i] = 0xf0; /* low nibbles level 0, high nibbles level 15 */
    assert_int_equal(quant_dequantize_row(GGML_TYPE_IQ4_XS, &xs, y, 256), 0);
    for (int e = 0; e < 256; e++)
        assert_true(y[e] == (float)(e / 32 - 4) * (e % 32 < 16 ? -127.0f : 113.0f));
}

static void fill_random(float *x, int n, unsigned seed, float scale)
{
    srand(seed);
    for (int i = 0; i < n; i++)
        x[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 2.0f * scale;
}

static float block_amax(const float *x, int n)
{
    float a = 0.0f;
    for (int i = 0; i < n; i++)
        a = fmaxf(a, fabsf(x[i]));
    return a;
}

/* Round trip of 4 super-blocks (1024 elements) with a per-element bound from the block's
 * range. Bounds: F16 |e| <= 2^-11 |x|; BF16 <= 2^-8 |x|; Q8_0/Q8_K <= 0.6 amax/127 (half a
 * step, plus the f16 scale's rounding); Q4_0 <= 1.05 amax/8 (the side opposite the largest
 * value has 7 steps, so it can clamp by one), Q5_0 <= 1.05 amax/16 likewise; Q4_K <=
 * (max - min)/15 of the super-block; Q4_1, Q5_1, Q5_K: 0.55 of a step of (max - min)/15 or
 * /31 (half a step and the f16 rounding of d and m); Q6_K <= 1.05 amax/32 of the super-block;
 * Q3_K <= 0.3 amax (a quarter step of 8 levels, the far side clamping by one and the 6-bit
 * scale rounding); Q2_K <= 0.2 (max - min) (half a step of 3, both scales rounded up so the
 * range stays covered); IQ4_NL, IQ4_XS <= 0.2 amax (half the widest gap of the table, 24 of
 * 127, with the scale refit). Measured worst cases on uniform data: 0.033 (Q4_1), 0.063
 * (Q5_0), 0.016 (Q5_1, Q5_K) of the range or amax as above; Q3_K 0.27; Q2_K 0.167; IQ4 0.144. */
static void check_round_trip(enum ggml_type t, float scale)
{
    enum { N = 1024 };
    float x[N], y[N];
    static unsigned char buf[N * 4];
    fill_random(x, N, 42 + (unsigned)t, scale);
    x[5] = 0.0f;
    x[300] = scale; /* an exact extreme */
    assert_int_equal(quant_quantize_row(t, x, buf, N), 0);
    assert_int_equal(quant_dequantize_row(t, buf, y, N), 0);
    int be = quant_block_elems(t) == 1 ? 256 : quant_block_elems(t);
    for (int i = 0; i < N; i++) {
        const float *blk = x + i / be * be;
        float amax = block_amax(blk, be), bound, lo = 0.0f, hi = 0.0f;
        for (int j = 0; j < be; j++) {
            lo = fminf(lo, blk[j]);
            hi = fmaxf(hi, blk[j]);
        }
        switch (t) {
        case GGML_TYPE_F16:
            bound = fabsf(x[i]) * 0x1p-11f;
            break;
        case GGML_TYPE_BF16:
            bound = fabsf(x[i]) * 0x1p-8f;
            break;
        case GGML_TYPE_Q8_0:
        case GGML_TYPE_Q8_K:
            bound = 0.6f * amax / 127.0f;
            break;
        case GGML_TYPE_Q4_0:
            bound = 1.05f * amax / 8.0f;
            break;
        case GGML_TYPE_Q4_K:
            bound = (hi - lo) / 15.0f;
            break;
        case GGML_TYPE_Q5_0:
            bound = 1.05f * amax / 16.0f;
            break;
        case GGML_TYPE_Q4_1:
            bound = 0.55f * (hi - lo) / 15.0f;
            break;
        case GGML_TYPE_Q5_1:
        case GGML_TYPE_Q5_K:
            bound = 0.55f * (hi - lo) / 31.0f;
            break;
        case GGML_TYPE_Q3_K:
            bound = 0.3f * amax;
            break;
        case GGML_TYPE_Q2_K:
            bound = 0.2f * (hi - lo);
            break;
        case GGML_TYPE_IQ4_NL:
        case GGML_TYPE_IQ4_XS:
            bound = 0.2f * amax;
            break;
        default:
            bound = 1.05f * amax / 32.0f;
            break;
        }
        if (!(fabsf(x[i] - y[i]) <= bound))
            fail_msg("%s element %d: %g -> %g, bound %g", quant_type_name(t), i, x[i], y[i],
                     bound);
    }
}

static void test_quant_round_trip_within_bounds(void **state)
{
    (void)state;
    static const enum ggml_type types[] = {
        GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,   GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
        GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, GGML_TYPE_Q4_1,   GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
        GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_round_trip(types[i], 1.0f);
        check_round_trip(types[i], 0.02f); /* weight-like magnitudes */
    }
}

static void test_quant_zero_block_round_trips_to_zero(void **state)
{
    (void)state;
    float x[256] = {0}, y[256];
    unsigned char buf[1024];
    static const enum ggml_type types[] = {
        GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,   GGML_TYPE_Q8_K,
        GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
        GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        assert_int_equal(quant_quantize_row(types[t], x, buf, 256), 0);
        assert_int_equal(quant_dequantize_row(types[t], buf, y, 256), 0);
        for (int i = 0; i < 256; i++)
            assert_true(y[i] == 0.0f);
    }
}

static void test_quant_rejects_bad_sizes_and_types(void **state)
{
    (void)state;
    float x[300] = {0};
    unsigned char buf[2048];
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_K, 256), 144);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q6_K, 512), 420);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q8_0, 64), 68);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_0, 32), 18);
    assert_int_equal(quant_row_bytes(GGML_TYPE_F16, 7), 14);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_K, 100), 0);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q5_K, 256), 176);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q2_K, 512), 168);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q3_K, 256), 110);
    assert_int_equal(quant_row_bytes(GGML_TYPE_IQ4_XS, 256), 136);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_1, 64), 40);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q5_0, 32), 22);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q5_1, 32), 24);
    assert_int_equal(quant_row_bytes(GGML_TYPE_IQ4_NL, 32), 18);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q5_0, 48), 0);
    assert_int_equal(quant_row_bytes((enum ggml_type)16, 256), 0); /* IQ2_XXS */
    assert_int_equal(quant_row_bytes((enum ggml_type)35, 256), 0); /* TQ2_0 */
    assert_int_equal(quant_quantize_row(GGML_TYPE_Q8_0, x, buf, 33), -EINVAL);
    assert_int_equal(quant_quantize_row((enum ggml_type)21, x, buf, 256), -EINVAL); /* IQ3_S */
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q6_K, buf, x, 300), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_f16_rounds_to_nearest_even),
        cmocka_unit_test(test_quant_f16_handles_inf_nan_subnormals),
        cmocka_unit_test(test_quant_f16_round_trips_every_value),
        cmocka_unit_test(test_quant_bf16_rounds_and_keeps_specials),
        cmocka_unit_test(test_quant_q8_0_block_decodes_known_values),
        cmocka_unit_test(test_quant_q4_0_block_decodes_known_values),
        cmocka_unit_test(test_quant_q4_k_block_decodes_known_values),
        cmocka_unit_test(test_quant_q6_k_block_decodes_known_values),
        cmocka_unit_test(test_quant_newer_blocks_decode_known_values),
        cmocka_unit_test(test_quant_round_trip_within_bounds),
        cmocka_unit_test(test_quant_zero_block_round_trips_to_zero),
        cmocka_unit_test(test_quant_rejects_bad_sizes_and_types),
    };
    return cmocka_run_group_tests_name("quant", tests, NULL, NULL);
}
