/* amx_emul.c - the candidate TDPBF16PS emulations E1-E6 and the case table (contract:
 * amx_emul.h). Portable C11: fmaf and float adds under C's default environment for results
 * away from FLT_MIN, an exact fixed-point sum (576 bits, lsb 2^-300: every product of two
 * fp32 values and every fp32 fits, with room for 2^6 terms) for E5 and for every fused result
 * near or below FLT_MIN; DAZ, FTZ, NaN selection and the default NaN on the bits.
 * Invariants: no heap, no static state; qt_amx_dot reads its arguments only.
 */
#include "amx_emul.h"
#include <math.h>
#include <string.h>
#include "kernels/bf16.h"

#define QT_AMX_DEFAULT_NAN 0xffc00000u
#define QT_AMX_XW 9     /* 64-bit limbs of the exact sum */
#define QT_AMX_XLSB 300 /* the exact sum's bit 0 is 2^-300 */

/* fp32 <-> bits: the firmware's (bf16.h, portable C) */
#define qt_amx_f qt_bf16_f32_bits
#define qt_amx_u qt_bf16_bits_f32

static int qt_amx_isnan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
static int qt_amx_isinf(uint32_t u) { return (u & 0x7fffffffu) == 0x7f800000u; }
static int qt_amx_iszero(uint32_t u) { return (u & 0x7fffffffu) == 0; }

/* DAZ on the bits: a denormal reads as the zero of its sign. */
static uint32_t qt_amx_daz(uint32_t u, unsigned flags)
{
    if (!(flags & QT_AMX_NO_DAZ) && (u & 0x7f800000u) == 0) return u & 0x80000000u;
    return u;
}

static uint32_t qt_amx_bf(uint16_t h, unsigned flags) { return qt_amx_daz((uint32_t)h << 16, flags); }

/* ------------------------------------------------------------------ the exact sum */
typedef struct {
    uint64_t w[QT_AMX_XW]; /* two's complement */
} qt_amx_x;

/* x += (neg ? -1 : 1) sig 2^e2, sig < 2^64, e2 >= -300, sig 2^e2 < 2^270. */
static void qt_amx_x_add(qt_amx_x *x, int neg, uint64_t sig, int e2)
{
    if (!sig) return;
    const int pos = e2 + QT_AMX_XLSB, limb = pos / 64, sh = pos % 64;
    const uint64_t part[2] = {sig << sh, sh ? sig >> (64 - sh) : 0};
    uint64_t carry = 0;
    for (int i = limb; i < QT_AMX_XW; i++) {
        const uint64_t v = i - limb < 2 ? part[i - limb] : 0;
        if (i - limb >= 2 && !carry) break;
        const uint64_t w = x->w[i];
        if (!neg) {
            const uint64_t s = w + v, s2 = s + carry;
            carry = (uint64_t)(s < v) | (uint64_t)(s2 < carry);
            x->w[i] = s2;
        } else {
            const uint64_t d = w - v, d2 = d - carry;
            carry = (uint64_t)(w < v) | (uint64_t)(d < carry);
            x->w[i] = d2;
        }
    }
}

/* Significand and exponent of a finite fp32: u = sig 2^e2 (sign apart). */
static uint64_t qt_amx_decode(uint32_t u, int *e2)
{
    const uint32_t ef = (u >> 23) & 0xffu, m = u & 0x7fffffu;
    *e2 = (ef ? (int)ef : 1) - 150;
    return ef ? (uint64_t)(m | 0x800000u) : (uint64_t)m;
}

static void qt_amx_x_add_f32(qt_amx_x *x, uint32_t u)
{
    int e;
    const uint64_t s = qt_amx_decode(u, &e);
    qt_amx_x_add(x, (int)(u >> 31), s, e);
}

static void qt_amx_x_add_prod(qt_amx_x *x, uint32_t a, uint32_t b)
{
    int ea, eb;
    const uint64_t sa = qt_amx_decode(a, &ea), sb = qt_amx_decode(b, &eb);
    qt_amx_x_add(x, (int)((a ^ b) >> 31), sa * sb, ea + eb);
}

static int qt_amx_x_bit(const qt_amx_x *m, int i)
{
    return i < 0 ? 0 : (int)((m->w[i / 64] >> (i % 64)) & 1u);
}

static int qt_amx_x_any_below(const qt_amx_x *m, int i)
{
    if (i <= 0) return 0;
    for (int l = 0; l < i / 64; l++)
        if (m->w[l]) return 1;
    return i % 64 ? (m->w[i / 64] & ((1ull << (i % 64)) - 1u)) != 0 : 0;
}

/* Bits [lsb, h] of m rounded to nearest even at lsb (lsb may be below 0). */
static uint64_t qt_amx_x_round_at(const qt_amx_x *m, int h, int lsb)
{
    uint64_t r = 0;
    for (int i = h; i >= lsb && i >= 0; i--) r = r << 1 | (uint64_t)qt_amx_x_bit(m, i);
    if (lsb < 0) return r << (-lsb > 40 ? 40 : -lsb); /* exact: nothing below */
    const int rb = qt_amx_x_bit(m, lsb - 1), st = qt_amx_x_any_below(m, lsb - 1);
    if (rb && (st || (r & 1u))) r++;
    return r;
}

/* The exact sum rounded to fp32 bits (RNE; FTZ unless NO_FTZ with tininess after rounding
 * unless TINY_BEFORE; overflow to inf). zsign: the bits of a zero sum (the caller's sign). */
static uint32_t qt_amx_x_round(const qt_amx_x *x, unsigned flags, uint32_t zsign)
{
    qt_amx_x m = *x;
    const uint32_t sign = (uint32_t)(m.w[QT_AMX_XW - 1] >> 63) << 31;
    if (sign) { /* magnitude: negate */
        uint64_t carry = 1;
        for (int i = 0; i < QT_AMX_XW; i++) {
            const uint64_t v = ~m.w[i] + carry;
            carry = carry && v == 0;
            m.w[i] = v;
        }
    }
    int h = -1;
    for (int i = QT_AMX_XW - 1; i >= 0 && h < 0; i--)
        if (m.w[i]) h = i * 64 + 63 - __builtin_clzll(m.w[i]);
    if (h < 0) return zsign;
    int e = h - QT_AMX_XLSB; /* exact value in [2^e, 2^(e+1)) */
    uint64_t r = qt_amx_x_round_at(&m, h, h - 23);
    int er = e;
    if (r >> 24) r >>= 1, er++;
    const int tiny = (flags & QT_AMX_TINY_BEFORE) ? e < -126 : er < -126;
    if (er > 127) return sign | 0x7f800000u;
    if (!(flags & QT_AMX_NO_FTZ)) {
        if (tiny) return sign;
    } else if (e < -126) { /* gradual underflow: round on the 2^-149 grid */
        return sign | (uint32_t)qt_amx_x_round_at(&m, h, QT_AMX_XLSB - 149);
    }
    return sign | (uint32_t)(er + 127) << 23 | ((uint32_t)r & 0x7fffffu);
}

/* ------------------------------------------------------------------ the steps */
/* Fused a*b + c (a, b, c already read under DAZ: the step DAZes its inputs again, which
 * matters only for NO_FTZ chains). */
static uint32_t qt_amx_fstep(uint32_t a, uint32_t b, uint32_t c, unsigned flags)
{
    a = qt_amx_daz(a, flags), b = qt_amx_daz(b, flags), c = qt_amx_daz(c, flags);
    if (qt_amx_isnan(a)) return a | 0x00400000u;
    if (qt_amx_isnan(b)) return b | 0x00400000u;
    if (qt_amx_isnan(c)) return c | 0x00400000u;
    const uint32_t r = qt_amx_u(fmaf(qt_amx_f(a), qt_amx_f(b), qt_amx_f(c)));
    if (qt_amx_isnan(r)) return QT_AMX_DEFAULT_NAN;
    if ((r & 0x7fffffffu) >= 0x01000000u || qt_amx_isinf(a) || qt_amx_isinf(b) || qt_amx_isinf(c))
        return r; /* at or above 2^-125: fmaf's rounding is the one wanted */
    qt_amx_x x;
    memset(&x, 0, sizeof x);
    qt_amx_x_add_prod(&x, a, b);
    qt_amx_x_add_f32(&x, c);
    return qt_amx_x_round(&x, flags, r); /* an exact zero: fmaf's IEEE signed zero */
}

/* Rounded product (unfused): gradual underflow, flushed when flush. */
static uint32_t qt_amx_prod(uint32_t a, uint32_t b, int flush)
{
    if (qt_amx_isnan(a)) return a | 0x00400000u;
    if (qt_amx_isnan(b)) return b | 0x00400000u;
    if ((qt_amx_isinf(a) && qt_amx_iszero(b)) || (qt_amx_isinf(b) && qt_amx_iszero(a)))
        return QT_AMX_DEFAULT_NAN;
    const double p = (double)qt_amx_f(a) * (double)qt_amx_f(b); /* exact */
    if (flush && p != 0 && fabs(p) < 0x1p-126) return (a ^ b) & 0x80000000u;
    return qt_amx_u((float)p);
}

/* x + y: x's NaN first, then y's; FTZ unless NO_FTZ (a sum below FLT_MIN is exact, so the
 * tininess rule does not matter here). */
static uint32_t qt_amx_add(uint32_t x, uint32_t y, unsigned flags)
{
    if (qt_amx_isnan(x)) return x | 0x00400000u;
    if (qt_amx_isnan(y)) return y | 0x00400000u;
    const uint32_t r = qt_amx_u(qt_amx_f(x) + qt_amx_f(y));
    if (qt_amx_isnan(r)) return QT_AMX_DEFAULT_NAN;
    if (!(flags & QT_AMX_NO_FTZ) && !qt_amx_iszero(r) && (r & 0x7f800000u) == 0)
        return r & 0x80000000u;
    return r;
}

/* E5: the exact sum of C and every product, one rounding. */
static uint32_t qt_amx_exact(uint32_t c, const uint16_t *ae, const uint16_t *ao,
                             const uint16_t *be, const uint16_t *bo, int k, unsigned flags)
{
    if (qt_amx_isnan(c)) return c | 0x00400000u;
    for (int i = 0; i < k; i++) {
        const uint32_t v[4] = {qt_amx_bf(ae[i], flags), qt_amx_bf(be[i], flags),
                               qt_amx_bf(ao[i], flags), qt_amx_bf(bo[i], flags)};
        for (int j = 0; j < 4; j++)
            if (qt_amx_isnan(v[j])) return v[j] | 0x00400000u;
    }
    int pinf = qt_amx_isinf(c) && !(c >> 31), ninf = qt_amx_isinf(c) && (c >> 31);
    int allneg0 = qt_amx_iszero(c) && (c >> 31);
    qt_amx_x x;
    memset(&x, 0, sizeof x);
    if (!qt_amx_isinf(c)) qt_amx_x_add_f32(&x, c);
    for (int i = 0; i < 2 * k; i++) {
        const uint32_t a = qt_amx_bf(i % 2 ? ao[i / 2] : ae[i / 2], flags),
                       b = qt_amx_bf(i % 2 ? bo[i / 2] : be[i / 2], flags);
        if (qt_amx_isinf(a) || qt_amx_isinf(b)) {
            if (qt_amx_iszero(a) || qt_amx_iszero(b)) return QT_AMX_DEFAULT_NAN;
            if ((a ^ b) >> 31) ninf = 1;
            else pinf = 1;
            continue;
        }
        if (!(qt_amx_iszero(a) || qt_amx_iszero(b)) || !((a ^ b) >> 31)) allneg0 = 0;
        qt_amx_x_add_prod(&x, a, b);
    }
    if (pinf && ninf) return QT_AMX_DEFAULT_NAN;
    if (pinf || ninf) return pinf ? 0x7f800000u : 0xff800000u;
    return qt_amx_x_round(&x, flags, allneg0 ? 0x80000000u : 0u);
}

/* ------------------------------------------------------------------ candidates */
uint32_t qt_amx_dot(int cand, unsigned flags, uint32_t c, const uint16_t *ae, const uint16_t *ao,
                    const uint16_t *be, const uint16_t *bo, int k)
{
    const uint32_t cc = qt_amx_daz(c, flags);
    uint32_t e = 0, o = 0, acc = cc;
    switch (cand) {
    case QT_AMX_E1:
        for (int i = 0; i < k; i++) {
            e = qt_amx_fstep(qt_amx_bf(ae[i], flags), qt_amx_bf(be[i], flags), e, flags);
            o = qt_amx_fstep(qt_amx_bf(ao[i], flags), qt_amx_bf(bo[i], flags), o, flags);
        }
        return qt_amx_add(cc, qt_amx_add(e, o, flags), flags);
    case QT_AMX_E2:
    case QT_AMX_E3:
        for (int i = 0; i < k; i++) {
            const uint32_t pe[2] = {qt_amx_bf(ae[i], flags), qt_amx_bf(be[i], flags)},
                           po[2] = {qt_amx_bf(ao[i], flags), qt_amx_bf(bo[i], flags)};
            const uint32_t *first = cand == QT_AMX_E2 ? pe : po, *second = cand == QT_AMX_E2 ? po : pe;
            acc = qt_amx_fstep(first[0], first[1], acc, flags);
            acc = qt_amx_fstep(second[0], second[1], acc, flags);
        }
        return acc;
    case QT_AMX_E4G:
    case QT_AMX_E4F: {
        const int flush = cand == QT_AMX_E4F && !(flags & QT_AMX_NO_FTZ);
        for (int i = 0; i < k; i++) {
            e = qt_amx_add(qt_amx_prod(qt_amx_bf(ae[i], flags), qt_amx_bf(be[i], flags), flush), e, flags);
            o = qt_amx_add(qt_amx_prod(qt_amx_bf(ao[i], flags), qt_amx_bf(bo[i], flags), flush), o, flags);
        }
        return qt_amx_add(cc, qt_amx_add(e, o, flags), flags);
    }
    case QT_AMX_E5:
        return qt_amx_exact(cc, ae, ao, be, bo, k, flags);
    case QT_AMX_E6: {
        uint32_t l[128];
        const int n = 2 * (k < 64 ? k : 64);
        const int flush = !(flags & QT_AMX_NO_FTZ);
        for (int i = 0; i < n; i++)
            l[i] = qt_amx_prod(qt_amx_bf(i % 2 ? ao[i / 2] : ae[i / 2], flags),
                               qt_amx_bf(i % 2 ? bo[i / 2] : be[i / 2], flags), flush);
        for (int w = n; w > 1; w = (w + 1) / 2)
            for (int i = 0; i < w; i += 2) l[i / 2] = i + 1 < w ? qt_amx_add(l[i], l[i + 1], flags) : l[i];
        return qt_amx_add(cc, n ? l[0] : 0u, flags);
    }
    default:
        return QT_AMX_DEFAULT_NAN;
    }
}

void qt_amx_tile(int cand, unsigned flags, uint32_t *c, int ldc, const uint16_t *a, int lda,
                 const uint16_t *b, int ldb, int rows, int cols, int k)
{
    uint16_t ae[64], ao[64], be[64], bo[64];
    if (k > 64) k = 64;
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < cols; n++) {
            for (int i = 0; i < k; i++) {
                ae[i] = a[m * lda + 2 * i], ao[i] = a[m * lda + 2 * i + 1];
                be[i] = b[i * ldb + 2 * n], bo[i] = b[i * ldb + 2 * n + 1];
            }
            c[m * ldc + n] = qt_amx_dot(cand, flags, c[m * ldc + n], ae, ao, be, bo, k);
        }
}

const char *qt_amx_cand_name(int cand)
{
    static const char *const n[QT_AMX_NCAND] = {"E1", "E2", "E3", "E4g", "E4f", "E5", "E6"};
    return cand >= 0 && cand < QT_AMX_NCAND ? n[cand] : "?";
}

const char *qt_amx_cand_what(int cand)
{
    static const char *const w[QT_AMX_NCAND] = {
        "SDM: fused even and odd chains from +0, then even+odd, then C+sum",
        "Intrinsics Guide: one fused chain from C, even then odd",
        "one fused chain from C, odd then even (VDPBF16PS order)",
        "E1 with unfused products, gradual underflow of the product",
        "E1 with unfused products, products flushed",
        "exact sum of C and all products, one rounding",
        "pairwise tree of the rounded products (e0 o0 e1 o1 ...), then C+tree",
    };
    return cand >= 0 && cand < QT_AMX_NCAND ? w[cand] : "?";
}

/* ------------------------------------------------------------------ the cases
 * bf16: 1 0x3f80, -1 0xbf80, 2^24 0x4b80, 2^-62 0x2080, 2^-63 0x2000, 1.25 2^-75 0x1a20,
 * 2^-74 0x1a80, 2^64 0x5f80, 2^63 0x5f00, 2^126 0x7e80, -2^-76 0x9980, 2^-75 0x1a00,
 * 2^127 0x7f00, 2 0x4000, -2^-70 0x9c80, 2^-70 0x1c80, 1.5 2^-70 0x1cc0,
 * -2^-63 0xa000, 2^-64 0x1f80; inf 0x7f80, qNaN 0x7fc1 / 0x7fc2 /
 * 0xffc4, sNaN 0x7f81. Order of want: E1 E2 E3 E4g E4f E5 E6. Hand derivations of the
 * values amx-bf16.md does not state:
 *  T1 E4 = E1 (exact products); E6: (2^24 + 1 -> 2^24) + (-2^24 + 1) = 1.
 *  T2 E2, E3: 2^24 + 1 ties to 2^24 twice; E4 = E1; E6: ((2^24 + 0) + (1 + 0)) + (1 + 0) ->
 *     2^24 twice.
 *  T3 E4 = E1; E5: 2^24 + 2 exact; E6: (1 + 1) then C + 2.
 *  T4 E5: 2^-125 + 1.25 2^-149 rounds up; E6: the product 1.25 2^-149 rounds to a flushed 0.
 *  T5 E5: 2^127 exact; E6: the product 2^128 rounds to inf.
 *  T6 E4 = E1 (+0 + -0 = +0); E5: every term is -0; E6: -0 + -0, then -0 + -0.
 *  T7, T8: every candidate reads the denormal as a signed zero; T8 E5: the +0 products make
 *     the exact zero +0.
 *  F1 FLT_MIN - 2^-151 rounds (24 bits, unbounded exponent) to FLT_MIN: not tiny after
 *     rounding; E4 and E6 round the product -2^-151 to -0 first.
 *  F6-F8 follow the NaN rules of amx_emul.h: E1 C + t (C first), t = e + o (e first); a
 *     fused step's product NaN beats the accumulator's, so E2 ends with the odd NaN and E3
 *     with the even one; E5 takes the first of (C, ae0, be0, ao0, bo0).
 *  F12 -2^-70 * 2^-70 = -2^-140 flushes to -0; E1: -0 + +0 (the odd chain) = +0; E2: the odd
 *     step +0 + -0 = +0; E3: the even step comes last and leaves -0; E5: -0; E6: -0 + +0.
 *  F13 2^-126 + 1.5 2^-140 is exact (0x00800300) for the fused chains, E5, and E4g, whose
 *     product 1.5 2^-140 is an exact denormal; E4f and E6 flush that product.
 *  F14, F15 FLT_MIN - 2^-127 = 2^-127 flushes to +0 where C meets the product in one step
 *     (E2, E3, E5); E1, E4, E6 flush the chain's -2^-127 first and end at C = FLT_MIN.
 */
static const qt_amx_case qt_amx_cases[] = {
    {"T1", "order: even [2^24, -2^24], odd [1, 1], C 0", 2,
     {0x4b80, 0xcb80}, {0x3f80, 0x3f80}, {0x3f80, 0x3f80}, {0x3f80, 0x3f80}, 0x00000000u,
     {0x40000000u, 0x3f800000u, 0x00000000u, 0x40000000u, 0x40000000u, 0x40000000u, 0x3f800000u},
     1u << QT_AMX_E1 | 1u << QT_AMX_E2 | 1u << QT_AMX_E3 | 1u << QT_AMX_E5},
    {"T2", "per-step rounding: even [2^24, 1, 1], odd 0", 3,
     {0x4b80, 0x3f80, 0x3f80}, {0, 0, 0}, {0x3f80, 0x3f80, 0x3f80}, {0x3f80, 0x3f80, 0x3f80},
     0x00000000u,
     {0x4b800000u, 0x4b800000u, 0x4b800000u, 0x4b800000u, 0x4b800000u, 0x4b800001u, 0x4b800000u},
     1u << QT_AMX_E1 | 1u << QT_AMX_E5},
    {"T3", "where C enters: even = odd = 1, C 2^24", 1,
     {0x3f80}, {0x3f80}, {0x3f80}, {0x3f80}, 0x4b800000u,
     {0x4b800001u, 0x4b800000u, 0x4b800000u, 0x4b800001u, 0x4b800001u, 0x4b800001u, 0x4b800001u},
     1u << QT_AMX_E1 | 1u << QT_AMX_E2 | 1u << QT_AMX_E3},
    {"T4", "fusion: 2^-62 2^-63, then 1.25 2^-75 2^-74", 2,
     {0x2080, 0x1a20}, {0, 0}, {0x2000, 0x1a80}, {0, 0}, 0x00000000u,
     {0x01000001u, 0x01000001u, 0x01000001u, 0x01000000u, 0x01000000u, 0x01000001u, 0x01000000u},
     1u << QT_AMX_E1 | 1u << QT_AMX_E2 | 1u << QT_AMX_E3 | 1u << QT_AMX_E4G | 1u << QT_AMX_E4F},
    {"T5", "fused overflow rescue: (-2^64)(2^63), then (2^64)(2^64)", 2,
     {0xdf80, 0x5f80}, {0, 0}, {0x5f00, 0x5f80}, {0, 0}, 0x00000000u,
     {0x7f000000u, 0x7f000000u, 0x7f000000u, 0x7f800000u, 0x7f800000u, 0x7f000000u, 0x7f800000u},
     1u << QT_AMX_E1 | 1u << QT_AMX_E2 | 1u << QT_AMX_E3 | 1u << QT_AMX_E4G | 1u << QT_AMX_E4F},
    {"T6", "signed zeros: products -1 * 0, C -0", 1,
     {0xbf80}, {0xbf80}, {0x0000}, {0x0000}, 0x80000000u,
     {0x00000000u, 0x80000000u, 0x80000000u, 0x00000000u, 0x00000000u, 0x80000000u, 0x80000000u},
     1u << QT_AMX_E1 | 1u << QT_AMX_E2 | 1u << QT_AMX_E3},
    {"T7", "DAZ on bf16: 0x0001 * 2^126", 1,
     {0x0001}, {0}, {0x7e80}, {0}, 0x00000000u,
     {0, 0, 0, 0, 0, 0, 0}, 0x7fu},
    {"T8", "DAZ on C: C 0x80000001, products +0", 1,
     {0}, {0}, {0x3f80}, {0x3f80}, 0x80000001u,
     {0, 0, 0, 0, 0, 0, 0}, 0x7fu},
    {"F1", "tininess: 2^-126 - 2^-151 (rounds to FLT_MIN)", 2,
     {0x2000, 0x9980}, {0, 0}, {0x2000, 0x1a00}, {0, 0}, 0x00000000u,
     {0x00800000u, 0x00800000u, 0x00800000u, 0x00800000u, 0x00800000u, 0x00800000u, 0x00800000u}, 0},
    {"F2", "overflow: 2^127 * 2", 1,
     {0x7f00}, {0}, {0x4000}, {0}, 0x00000000u,
     {0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u}, 0},
    {"F3", "overflow: -2^127 * 2", 1,
     {0xff00}, {0}, {0x4000}, {0}, 0x00000000u,
     {0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u}, 0},
    {"F4", "inf * 0 (even), 0 * 1 (odd)", 1,
     {0x7f80}, {0}, {0}, {0x3f80}, 0x00000000u,
     {0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u}, 0},
    {"F5", "+inf on the even chain, -inf on the odd", 1,
     {0x7f80}, {0xff80}, {0x3f80}, {0x3f80}, 0x00000000u,
     {0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u, 0xffc00000u}, 0},
    {"F6", "NaN payloads: even 0x7fc1, odd 0x7fc2, C 0x7fc33333", 1,
     {0x7fc1}, {0x7fc2}, {0x3f80}, {0x3f80}, 0x7fc33333u,
     {0x7fc33333u, 0x7fc20000u, 0x7fc10000u, 0x7fc33333u, 0x7fc33333u, 0x7fc33333u, 0x7fc33333u}, 0},
    {"F7", "NaN payloads: even 0x7fc1, odd 0x7fc2, C 1", 1,
     {0x7fc1}, {0x7fc2}, {0x3f80}, {0x3f80}, 0x3f800000u,
     {0x7fc10000u, 0x7fc20000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u}, 0},
    {"F8", "NaN in B even (0xffc4) and A odd (0x7fc2), C 1", 1,
     {0x3f80}, {0x7fc2}, {0xffc4}, {0x3f80}, 0x3f800000u,
     {0xffc40000u, 0x7fc20000u, 0xffc40000u, 0xffc40000u, 0xffc40000u, 0xffc40000u, 0xffc40000u}, 0},
    {"F9", "A NaN 0x7fc1 against B NaN 0xffc4 in one product", 1,
     {0x7fc1}, {0}, {0xffc4}, {0}, 0x3f800000u,
     {0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u}, 0},
    {"F10", "bf16 sNaN 0x7f81 (quieted?)", 1,
     {0x7f81}, {0}, {0x3f80}, {0}, 0x00000000u,
     {0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u, 0x7fc10000u}, 0},
    {"F11", "fp32 sNaN C 0x7fa00001, products 1 * 1", 1,
     {0x3f80}, {0x3f80}, {0x3f80}, {0x3f80}, 0x7fa00001u,
     {0x7fe00001u, 0x7fe00001u, 0x7fe00001u, 0x7fe00001u, 0x7fe00001u, 0x7fe00001u, 0x7fe00001u}, 0},
    {"F12", "sign of a flushed result: -2^-70 * 2^-70, C -0", 1,
     {0x9c80}, {0}, {0x1c80}, {0}, 0x80000000u,
     {0x00000000u, 0x00000000u, 0x80000000u, 0x00000000u, 0x00000000u, 0x80000000u, 0x00000000u}, 0},
    {"F13", "a product below FLT_MIN: 2^-63 2^-63, then 1.5 2^-70 2^-70", 2,
     {0x2000, 0x1cc0}, {0, 0}, {0x2000, 0x1c80}, {0, 0}, 0x00000000u,
     {0x00800300u, 0x00800300u, 0x00800300u, 0x00800300u, 0x00800000u, 0x00800300u, 0x00800000u}, 0},
    {"F14", "FTZ of a result: C FLT_MIN, even -2^-63 2^-64 (exact 2^-127)", 1,
     {0xa000}, {0}, {0x1f80}, {0}, 0x00800000u,
     {0x00800000u, 0x00000000u, 0x00000000u, 0x00800000u, 0x00800000u, 0x00000000u, 0x00800000u}, 0},
    {"F15", "FTZ of a result: F14 with the product in the odd slot", 1,
     {0}, {0xa000}, {0}, {0x1f80}, 0x00800000u,
     {0x00800000u, 0x00000000u, 0x00000000u, 0x00800000u, 0x00800000u, 0x00000000u, 0x00800000u}, 0},
};

int qt_amx_case_count(void) { return (int)(sizeof qt_amx_cases / sizeof qt_amx_cases[0]); }

const qt_amx_case *qt_amx_case_get(int i)
{
    return i >= 0 && i < qt_amx_case_count() ? &qt_amx_cases[i] : 0;
}
