/* lib/exec/fp8.c: the E4M3/E5M2 codecs (round trip of every code, order,
 * ties to even, saturation, subnormals), the delayed-scaling recipe on a
 * scripted amax sequence, and per-block quantisation against per-tensor
 * scaling on a matrix with one outlier. test_fp8_ref.py checks the encoder
 * against an independent enumeration of the formats. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/fp8.h"

static const uint8_t MAXCODE[2] = {0x7E, 0x7B};

static void codes_round_trip(int e5m2)
{
    for (int b = 0; b < 256; b++) {
        float v = llmt__fp8_decode((uint8_t)b, e5m2);
        uint8_t back = llmt__fp8_encode(v, e5m2);
        if (isnan(v))
            CHECK_EQ_INT(back, 0x7F); /* the canonical NaN */
        else if (isinf(v)) /* E5M2 +-inf saturate (satfinite) */
            CHECK_EQ_INT(back, (b & 0x80) | MAXCODE[e5m2]);
        else
            CHECK_EQ_INT(back, b);
    }
    /* Strictly increasing over the positive finite codes, and symmetric. */
    for (int b = 1; b <= MAXCODE[e5m2]; b++) {
        CHECK(llmt__fp8_decode((uint8_t)b, e5m2) >
              llmt__fp8_decode((uint8_t)(b - 1), e5m2));
        CHECK(llmt__fp8_decode((uint8_t)(b | 0x80), e5m2) ==
              -llmt__fp8_decode((uint8_t)b, e5m2));
    }
}

static void ties_to_even(int e5m2)
{
    for (int b = 0; b < MAXCODE[e5m2]; b++) {
        float lo = llmt__fp8_decode((uint8_t)b, e5m2);
        float hi = llmt__fp8_decode((uint8_t)(b + 1), e5m2);
        float mid = (lo + hi) / 2; /* exact: fp8 values have 4 bits */
        int even = (b & 1) ? b + 1 : b;
        CHECK_EQ_INT(llmt__fp8_encode(mid, e5m2), even);
        CHECK_EQ_INT(llmt__fp8_encode(-mid, e5m2), even | 0x80);
        CHECK_EQ_INT(llmt__fp8_encode(nextafterf(mid, 0), e5m2), b);
        CHECK_EQ_INT(llmt__fp8_encode(nextafterf(mid, INFINITY), e5m2), b + 1);
    }
}

static void special_values(void)
{
    /* Decoded anchors: E4M3 0.0111.000 = 1, 0.0001.000 = 2^-6 (smallest
     * normal), 0.0000.001 = 2^-9, 0.1111.110 = 1.75*2^8 = 448; E5M2
     * 0.01111.00 = 1, 0.11110.11 = 1.75*2^15 = 57344, 0.11111.00 = inf. */
    CHECK(llmt__fp8_decode(0x38, 0) == 1.0f);
    CHECK(llmt__fp8_decode(0x08, 0) == ldexpf(1, -6));
    CHECK(llmt__fp8_decode(0x01, 0) == ldexpf(1, -9));
    CHECK(llmt__fp8_decode(0x7E, 0) == 448.0f);
    CHECK(isnan(llmt__fp8_decode(0x7F, 0)) && isnan(llmt__fp8_decode(0xFF, 0)));
    CHECK(llmt__fp8_decode(0x3C, 1) == 1.0f);
    CHECK(llmt__fp8_decode(0x04, 1) == ldexpf(1, -14));
    CHECK(llmt__fp8_decode(0x01, 1) == ldexpf(1, -16));
    CHECK(llmt__fp8_decode(0x7B, 1) == 57344.0f);
    CHECK(llmt__fp8_decode(0x7C, 1) == INFINITY);
    CHECK(llmt__fp8_decode(0xFC, 1) == -INFINITY);
    CHECK(isnan(llmt__fp8_decode(0x7D, 1)) && isnan(llmt__fp8_decode(0xFF, 1)));
    CHECK(llmt__fp8_max(0) == 448.0f && llmt__fp8_max(1) == 57344.0f);

    /* Saturation: past max, +-inf, and E4M3's max + half ulp (464, a tie
     * that goes to the even 448); E5M2's 61440 is the tie with inf. */
    CHECK_EQ_INT(llmt__fp8_encode(464.0f, 0), 0x7E);
    CHECK_EQ_INT(llmt__fp8_encode(465.0f, 0), 0x7E);
    CHECK_EQ_INT(llmt__fp8_encode(1e30f, 0), 0x7E);
    CHECK_EQ_INT(llmt__fp8_encode(-1e30f, 0), 0xFE);
    CHECK_EQ_INT(llmt__fp8_encode(INFINITY, 0), 0x7E);
    CHECK_EQ_INT(llmt__fp8_encode(-INFINITY, 0), 0xFE);
    CHECK_EQ_INT(llmt__fp8_encode(61440.0f, 1), 0x7B);
    CHECK_EQ_INT(llmt__fp8_encode(FLT_MAX, 1), 0x7B);
    CHECK_EQ_INT(llmt__fp8_encode(INFINITY, 1), 0x7B);
    CHECK_EQ_INT(llmt__fp8_encode(-INFINITY, 1), 0xFB);
    /* NaN: 0x7F in both, whatever its sign (the CUDA conversion). */
    CHECK_EQ_INT(llmt__fp8_encode(NAN, 0), 0x7F);
    CHECK_EQ_INT(llmt__fp8_encode(-NAN, 0), 0x7F);
    CHECK_EQ_INT(llmt__fp8_encode(NAN, 1), 0x7F);
    CHECK_EQ_INT(llmt__fp8_encode(-NAN, 1), 0x7F);
    /* Zeros keep their sign. */
    CHECK_EQ_INT(llmt__fp8_encode(0.0f, 0), 0x00);
    CHECK_EQ_INT(llmt__fp8_encode(-0.0f, 0), 0x80);
    CHECK_EQ_INT(llmt__fp8_encode(-0.0f, 1), 0x80);

    /* Subnormals (E4M3 quantum 2^-9): 2^-10 is the tie between 0 and
     * 0x01 -> 0 (even); 1.5*2^-10 -> 0x01; 3*2^-10 = 1.5 quanta, tie of 0x01
     * and 0x02 -> 0x02; 7.5 quanta, tie of 0x07 and 0x08 (= 2^-6, the
     * smallest normal) -> 0x08. Float subnormals flush to a signed zero. */
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(1, -9), 0), 0x01);
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(1, -10), 0), 0x00);
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(3, -11), 0), 0x01);
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(3, -10), 0), 0x02);
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(15, -10), 0), 0x08);
    CHECK_EQ_INT(llmt__fp8_encode(-ldexpf(5, -9), 0), 0x85);
    CHECK_EQ_INT(llmt__fp8_encode(1e-40f, 0), 0x00);
    CHECK_EQ_INT(llmt__fp8_encode(-1e-40f, 0), 0x80);
    /* E5M2 quantum 2^-16: 2^-17 -> 0 (tie), -2^-16 -> 0x81, 3*2^-16 -> 0x03,
     * 3.5*2^-16 (tie of 0x03 and 0x04 = 2^-14) -> 0x04. */
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(1, -17), 1), 0x00);
    CHECK_EQ_INT(llmt__fp8_encode(-ldexpf(1, -16), 1), 0x81);
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(3, -16), 1), 0x03);
    CHECK_EQ_INT(llmt__fp8_encode(ldexpf(7, -17), 1), 0x04);
    /* A normal tie: 1 + 1/16 lies between 1 (0x38, even) and 1.125. */
    CHECK_EQ_INT(llmt__fp8_encode(1.0625f, 0), 0x38);
    CHECK_EQ_INT(llmt__fp8_encode(1.1875f, 0), 0x3A); /* 1.125|1.25 -> 1.25 */

    CHECK_EQ_INT(llmt__fp8_format_e5m2(LLMT__FP8_FORMAT_HYBRID, 1), 1);
    CHECK_EQ_INT(llmt__fp8_format_e5m2(LLMT__FP8_FORMAT_HYBRID, 0), 0);
    CHECK_EQ_INT(llmt__fp8_format_e5m2(LLMT__FP8_FORMAT_E4M3, 1), 0);
}

static void check_scales(const llmt__fp8_delayed *d, float s0, float s1)
{
    const float *s = llmt__fp8_delayed_scales(d);
    const float *si = llmt__fp8_delayed_scale_invs(d);
    CHECK(s[0] == s0);
    CHECK(s[1] == s1);
    CHECK(si[0] == 1.0f / s0);
    CHECK(si[1] == 1.0f / s1);
}

static void delayed(void)
{
    llmt__fp8_delayed *d = NULL;
    const unsigned char fmt[2] = {0, 1}; /* tensor 0 E4M3, tensor 1 E5M2 */
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 2, 4, 0, LLMT__FP8_AMAX_MAX,
                                          fmt, &d), LLMT_OK);
    if (!d)
        return;
    CHECK_EQ_INT(llmt__fp8_delayed_count(d), 2);
    CHECK_EQ_INT(llmt__fp8_delayed_e5m2(d, 0), 0);
    CHECK_EQ_INT(llmt__fp8_delayed_e5m2(d, 1), 1);
    check_scales(d, 1, 1); /* scales start at 1 */

    /* H = 4, algo max. Tensor 0 (E4M3, max 448) sees amaxes 1, 2, 4, 0.5,
     * 0.25, 0.125, 0.125; scale = 448 / max(last 4 amaxes):
     *   {1} 448; {1,2} 224; {1,2,4} 112; {1,2,4,.5} 112; {2,4,.5,.25} 112;
     *   {4,.5,.25,.125} 112; {.5,.25,.125,.125} 896 (the 4 left the window).
     * Tensor 1 (E5M2, max 57344) sees 0, 8, inf, NaN, 0, 0, 0, 0:
     *   {0} keeps 1 (amax 0); {0,8} 57344/8 = 7168; inf and NaN are counted
     *   and dropped (scale kept); {0,8,0} 7168; {0,8,0,0} 7168; {8,0,0,0}
     *   7168; then {0,0,0,0}: amax 0, the scale stays 7168. */
    const float a0[8] = {1, 2, 4, 0.5f, 0.25f, 0.125f, 0.125f, 0.125f};
    const float a1[8] = {0, 8, INFINITY, NAN, 0, 0, 0, 0};
    const float want0[8] = {448, 224, 112, 112, 112, 112, 896, 1792};
    const float want1[8] = {1, 7168, 7168, 7168, 7168, 7168, 7168, 7168};
    const int bad[8] = {0, 0, 1, 1, 0, 0, 0, 0};
    /* step 8: tensor 0's window {.25,.125,.125,.125} -> 448/0.25 = 1792 */
    for (int t = 0; t < 8; t++) {
        float now[2] = {a0[t], a1[t]};
        CHECK_EQ_INT(llmt__fp8_delayed_update(d, now), bad[t]);
        check_scales(d, want0[t], want1[t]);
    }
    CHECK_EQ_INT(llmt__fp8_delayed_update(d, NULL), -1);
    CHECK_EQ_INT(llmt__fp8_delayed_update(NULL, a0), -1);
    llmt__fp8_delayed_destroy(d);
    llmt__fp8_delayed_destroy(NULL);

    /* Most recent, same tensor 0 sequence: 448 / amax of that step:
     * 448, 224, 112, 896, 1792, 3584, 3584, 3584. Tensor 1 (margin 0):
     * 1 (amax 0), 7168, kept, kept, then amax 0 keeps 7168. */
    d = NULL;
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 2, 4, 0,
                                          LLMT__FP8_AMAX_MOST_RECENT, fmt, &d),
                 LLMT_OK);
    const float want0r[8] = {448, 224, 112, 896, 1792, 3584, 3584, 3584};
    for (int t = 0; d && t < 8; t++) {
        float now[2] = {a0[t], a1[t]};
        CHECK_EQ_INT(llmt__fp8_delayed_update(d, now), bad[t]);
        check_scales(d, want0r[t], want1[t]);
    }
    llmt__fp8_delayed_destroy(d);

    /* Margin 2: scale = fp8_max / amax / 4. E4M3 amax 1 -> 112; E5M2 amax
     * 7 -> 57344/7/4 = 2048 exactly (57344 = 7 * 8192). e5m2 NULL = all
     * E4M3, so here tensor 1 uses 448: 448/7/4 = 16. */
    d = NULL;
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 2, 16, 2, LLMT__FP8_AMAX_MAX,
                                          NULL, &d), LLMT_OK);
    if (d) {
        float now[2] = {1, 7};
        CHECK_EQ_INT(llmt__fp8_delayed_update(d, now), 0);
        check_scales(d, 112, 16);
    }
    llmt__fp8_delayed_destroy(d);
    CHECK(llmt__fp8_scale_from_amax(7, 1, 2, 5) == 2048.0f);
    CHECK(llmt__fp8_scale_from_amax(0, 1, 0, 5) == 5.0f);
    CHECK(llmt__fp8_scale_from_amax(-1, 1, 0, 5) == 5.0f);
    CHECK(llmt__fp8_scale_from_amax(INFINITY, 0, 0, 5) == 5.0f);
    CHECK(llmt__fp8_scale_from_amax(NAN, 0, 0, 5) == 5.0f);
    /* 448 / 1e-38 overflows fp32: the scale becomes FLT_MAX (as TE). */
    CHECK(llmt__fp8_scale_from_amax(1e-38f, 0, 0, 5) == FLT_MAX);

    /* The current recipe is H = 1: every step's own amax. */
    d = NULL;
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 1, 0, LLMT__FP8_AMAX_MAX,
                                          NULL, &d), LLMT_OK);
    for (int t = 0; d && t < 4; t++) {
        llmt__fp8_delayed_update(d, &a0[t]);
        CHECK(llmt__fp8_delayed_scales(d)[0] == 448.0f / a0[t]);
    }
    llmt__fp8_delayed_destroy(d);

    /* Bad arguments. */
    llmt__fp8_delayed *x = (llmt__fp8_delayed *)&x;
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 0, 4, 0, 0, NULL, &x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK(x == NULL);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 0, 0, 0, NULL, &x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 1025, 0, 0, NULL, &x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 4, 17, 0, NULL, &x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 4, -1, 0, NULL, &x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 4, 0, 2, NULL, &x),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 1, 4, 0, 0, NULL, NULL),
                 LLMT_ERR_NULL_POINTER);
    llmt_context *ctx = NULL;
    if (llmt_context_create(NULL, &ctx) == LLMT_OK) {
        CHECK_STATUS(llmt__fp8_delayed_create(ctx, 1, 2000, 0, 0, NULL, &x),
                     LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_context_last_error(ctx), "history=2000") != NULL);
        llmt_context_destroy(ctx);
    }
}

static unsigned rng = 12345;

static float urand(void) /* in [0, 1) */
{
    rng = rng * 1103515245u + 12345u;
    return (float)((rng >> 8) & 0xffffff) / 16777216.0f;
}

/* |y - x| <= 2^-4 |x| for every element outside tile rows [tr0, tr1) x cols
 * [tc0, tc1): E4M3 keeps 3 mantissa bits, so rounding a normal value is off
 * by at most half an ulp, 2^-4 of it; the fp32 products add ~2^-23. */
static int within_bound(const float *x, const float *y, int rows, int cols,
                        int tr0, int tr1, int tc0, int tc1, int *checked)
{
    int bad = 0;
    *checked = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            if (r >= tr0 && r < tr1 && c >= tc0 && c < tc1)
                continue;
            float v = x[r * cols + c];
            (*checked)++;
            if (!(fabsf(y[r * cols + c] - v) <= (0.0625f + 1e-6f) * fabsf(v)))
                bad++;
        }
    return bad;
}

static void blocks(void)
{
    enum { R = 256, C = 384 };
    float *x = malloc(sizeof(float) * R * C), *y = malloc(sizeof(float) * R * C);
    uint8_t *q = malloc(R * C);
    float dq[(R / 1) * (C / 128)];
    if (!x || !y || !q) {
        CHECK(0);
        free(x); free(y); free(q);
        return;
    }
    /* Magnitudes in [0.01, 1], random signs, one outlier 1e6 at (5, 7). */
    for (int i = 0; i < R * C; i++) {
        float m = 0.01f + 0.99f * urand();
        x[i] = urand() < 0.5f ? -m : m;
    }
    x[5 * C + 7] = 1e6f;
    int checked;

    /* 1 x 128 tiles (activations): only row 5, cols 0..127 share the
     * outlier's scale. */
    CHECK_STATUS(llmt__fp8_quantize_blocks(x, R, C, 1, 128, 0, q, dq), LLMT_OK);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(q, R, C, 1, 128, 0, dq, y), LLMT_OK);
    CHECK_EQ_INT(within_bound(x, y, R, C, 5, 6, 0, 128, &checked), 0);
    CHECK_EQ_INT(checked, R * C - 128);
    CHECK_CLOSE(y[5 * C + 7], 1e6, 1e-6, 0);
    CHECK(dq[5 * 3 + 0] == 1.0f / (448.0f / 1e6f));

    /* 128 x 128 tiles (weights): tile (0, 0) holds the outlier. */
    CHECK_STATUS(llmt__fp8_quantize_blocks(x, R, C, 128, 128, 0, q, dq), LLMT_OK);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(q, R, C, 128, 128, 0, dq, y),
                 LLMT_OK);
    CHECK_EQ_INT(within_bound(x, y, R, C, 0, 128, 0, 128, &checked), 0);
    CHECK_EQ_INT(checked, R * C - 128 * 128);

    /* Per-tensor (one tile): scale 448/1e6, so |x| <= 1 becomes <= 4.5e-4,
     * below half of E4M3's smallest subnormal (2^-10 ~ 9.8e-4): every
     * element but the outlier is flushed to zero. */
    float dq1[1];
    CHECK_STATUS(llmt__fp8_quantize_blocks(x, R, C, R, C, 0, q, dq1), LLMT_OK);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(q, R, C, R, C, 0, dq1, y), LLMT_OK);
    int flushed = 0;
    for (int i = 0; i < R * C; i++)
        flushed += i != 5 * C + 7 && y[i] == 0.0f;
    CHECK_EQ_INT(flushed, R * C - 1);
    CHECK(within_bound(x, y, R, C, 0, 0, 0, 0, &checked) == R * C - 1);

    /* Edge tiles: 130 x 200 with 128 x 128 tiles is 2 x 2 tiles, three of
     * them partial; without an outlier every element keeps the bound. */
    x[5 * C + 7] = 0.5f;
    float dq4[4];
    CHECK_STATUS(llmt__fp8_quantize_blocks(x, 130, 200, 128, 128, 0, q, dq4),
                 LLMT_OK);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(q, 130, 200, 128, 128, 0, dq4, y),
                 LLMT_OK);
    CHECK_EQ_INT(within_bound(x, y, 130, 200, 0, 0, 0, 0, &checked), 0);
    /* E5M2 has 2 mantissa bits: the bound is 2^-3. */
    CHECK_STATUS(llmt__fp8_quantize_blocks(x, 130, 200, 128, 128, 1, q, dq4),
                 LLMT_OK);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(q, 130, 200, 128, 128, 1, dq4, y),
                 LLMT_OK);
    int bad5 = 0;
    for (int i = 0; i < 130 * 200; i++)
        bad5 += !(fabsf(y[i] - x[i]) <= (0.125f + 1e-6f) * fabsf(x[i]));
    CHECK_EQ_INT(bad5, 0);

    /* An all-zero tile gets scale 1 (dequant 1) and zeros back; a NaN tile
     * gets scale 1, its NaN stays NaN and its inf saturates. */
    float z[4] = {0, 0, NAN, INFINITY}, zy[4], zd[2];
    uint8_t zq[4];
    CHECK_STATUS(llmt__fp8_quantize_blocks(z, 2, 2, 1, 2, 0, zq, zd), LLMT_OK);
    CHECK(zd[0] == 1.0f && zd[1] == 1.0f);
    CHECK_EQ_INT(zq[0], 0);
    CHECK_EQ_INT(zq[2], 0x7F);
    CHECK_EQ_INT(zq[3], 0x7E);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(zq, 2, 2, 1, 2, 0, zd, zy), LLMT_OK);
    CHECK(zy[0] == 0.0f && isnan(zy[2]) && zy[3] == 448.0f);

    CHECK_STATUS(llmt__fp8_quantize_blocks(x, 0, C, 1, 128, 0, q, dq),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_quantize_blocks(x, R, C, 1, 0, 0, q, dq),
                 LLMT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(llmt__fp8_quantize_blocks(NULL, R, C, 1, 128, 0, q, dq),
                 LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt__fp8_dequantize_blocks(q, R, C, 1, 128, 0, NULL, y),
                 LLMT_ERR_NULL_POINTER);
    free(x);
    free(y);
    free(q);
}

/* export -> import into a fresh state gives the same scales now and after
 * more updates (the ring order survives a wrap); a bad row is refused
 * before anything is taken. H = 3, two tensors. */
static void state_round_trip(void)
{
    llmt__fp8_delayed *a = NULL, *b = NULL;
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 2, 3, 1, LLMT__FP8_AMAX_MAX, NULL, &a), LLMT_OK);
    CHECK_STATUS(llmt__fp8_delayed_create(NULL, 2, 3, 1, LLMT__FP8_AMAX_MAX, NULL, &b), LLMT_OK);
    if (!a || !b) return;
    const float am[4][2] = {{4, 1}, {8, 0}, {2, 3}, {1, 2}}; /* 4 updates: a wrap */
    for (int k = 0; k < 4; k++) llmt__fp8_delayed_update(a, am[k]);
    float st[2 * 5], st2[2 * 5];
    llmt__fp8_delayed_export(a, st);
    /* tensor 0: history (oldest first) 8, 2, 1 after the wrap; scale from
     * max 8: 448 / 8 / 2^1 = 28 */
    CHECK(st[0] == 28.0f && st[1] == 3.0f && st[2] == 8.0f && st[3] == 2.0f && st[4] == 1.0f);
    CHECK_STATUS(llmt__fp8_delayed_import(b, st), LLMT_OK);
    llmt__fp8_delayed_export(b, st2);
    CHECK(memcmp(st, st2, sizeof st) == 0);
    const float more[2] = {0.5f, 16.0f};
    llmt__fp8_delayed_update(a, more); /* drops 8 from tensor 0's max */
    llmt__fp8_delayed_update(b, more);
    CHECK(memcmp(llmt__fp8_delayed_scales(a), llmt__fp8_delayed_scales(b), 2 * sizeof(float)) == 0);
    CHECK(llmt__fp8_delayed_scales(a)[0] == 448.0f / 2.0f / 2.0f);
    float bad[2 * 5];
    memcpy(bad, st, sizeof bad);
    bad[5 + 1] = 4.0f; /* row 1 claims 4 amaxes of a 3-long history */
    CHECK_STATUS(llmt__fp8_delayed_import(b, bad), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(llmt__fp8_delayed_scales(b)[0] == llmt__fp8_delayed_scales(a)[0]); /* untouched */
    llmt__fp8_delayed_destroy(a);
    llmt__fp8_delayed_destroy(b);
}

int main(void)
{
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        codes_round_trip(e5m2);
        ties_to_even(e5m2);
    }
    special_values();
    delayed();
    blocks();
    state_round_trip();
    return check_exit("fp8");
}
