/* qt_math_inline.h - inlinable float elementary functions (exp, log, sigmoid, silu, softplus).
 *
 * Why a header: kernels call these once per element in their inner loops; out of line they
 * cost a call each and block vectorisation. Each function here is straight-line code (no
 * branches, no tables): special values are handled by clamping the input and selecting
 * the result, which gcc turns into blends when it vectorises a loop.
 *
 * Invariants:
 *  - results depend only on the input bits: IEEE double arithmetic written out operation by
 *    operation (-ffp-contract=off, no FMA), so a scalar call, a vectorised loop and the
 *    out-of-line qt_expf & co. (qt_math.c, defined as these) give identical bits;
 *  - every float function evaluates in double and rounds once at the end. The double value
 *    carries a relative error below 2^-28 (exp polynomial: 2^-28.5, log series: < 2^-33),
 *    so the float result is within 0.5 + 2^-4 ulp of the exact value (<= 1 ulp contract,
 *    measured in tests/unit/test_math.cpp); correct rounding is not promised;
 *  - the exp core is valid for |x| <= 150: callers clamp first, and at +-150 every float
 *    result has already saturated (e^-150 < 2^-150, e^150 > FLT_MAX), so clamping never
 *    changes a finite float answer. NaN passes through the clamps and propagates.
 */
#ifndef QT_MATH_INLINE_H
#define QT_MATH_INLINE_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* 1.5*2^52: adding it rounds |v| < 2^51 to an integer held in the low mantissa bits. */
#define QT_MI_ROUND_MAGIC 0x1.8p52
#define QT_MI_ROUND_MAGIC_BITS 0x4338000000000000ull
#define QT_MI_INV_LN2 0x1.71547652b82fep+0
/* One-word ln2 is enough for a float target: |n| <= 217 gives a reduction error < 2^-45. */
#define QT_MI_LN2 0x1.62e42fefa39efp-1
/* bits of sqrt(1/2) rounded up: the reduced mantissa lies in [sqrt(1/2), sqrt(2)) */
#define QT_MI_SQRT_HALF_BITS 0x3fe6a09e667f3bcdull
#define QT_MI_EXP_CLAMP 150.0
#define QT_MI_SOFTPLUS_THRESHOLD 20.0

static inline double qt_mi_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline uint64_t qt_mi_to_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* c ? a : b through a bit mask. Written with ?: gcc threads the clamped paths of exp into
 * constant results and branches, which blocks vectorisation and mispredicts on mixed
 * data; the mask form stays a blend. */
static inline double qt_mi_select(int c, double a, double b)
{
    uint64_t m = (uint64_t)0 - (uint64_t)c;
    return qt_mi_from_bits((qt_mi_to_bits(a) & m) | (qt_mi_to_bits(b) & ~m));
}

/* NaN fails both comparisons and comes out unchanged. */
static inline double qt_mi_clamp(double x, double lo, double hi)
{
    x = qt_mi_select(x < lo, lo, x);
    return qt_mi_select(x > hi, hi, x);
}

/* e^x in double for x in [-150, 150] (or NaN), relative error < 2^-28.
 * x = n ln2 + r with |r| <= ln2/2 (+ rounding of the product, covered by the fit interval);
 * e^r is a degree-6 polynomial interpolating e^r at Chebyshev nodes of [-0.3473, 0.3473]
 * (max relative error 2^-28.5); 2^n is assembled in the exponent field. The integer
 * arithmetic is unsigned so a NaN's arbitrary bits cannot overflow a signed type. */
static inline double qt_exp_core(double x)
{
    double t = x * QT_MI_INV_LN2 + QT_MI_ROUND_MAGIC;
    double n = t - QT_MI_ROUND_MAGIC;
    double r = x - n * QT_MI_LN2;
    double p = 0x1.6d76a7818451fp-10;
    p = p * r + 0x1.12711cdd4c12ap-7;
    p = p * r + 0x1.5554ab796ba3ap-5;
    p = p * r + 0x1.5554016e393a0p-3;
    p = p * r + 0x1.00000028fb2c6p-1;
    p = p * r + 0x1.000000a4053f5p+0;
    p = p * r + 1.0;
    uint64_t e = (qt_mi_to_bits(t) - QT_MI_ROUND_MAGIC_BITS + 1023u) << 52;
    return p * qt_mi_from_bits(e);
}

/* log(u) in double for positive normal finite u, relative error < 2^-33 (absolute near 1).
 * u = 2^k m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = f/(2+f), f = m - 1,
 * written as f - (f^2/2 - s (f^2/2 + R)) so the exact leading f carries the result and the
 * series R (through s^10; |s| < 0.172, the next term is below 2^-35) only the correction. */
static inline double qt_log_core(double u)
{
    /* Offsetting the bits by sqrt(1/2)'s puts the exponent step at m = sqrt(2), so k and m
     * come out of integer arithmetic without a data-dependent branch; the +2^62 keeps the
     * difference unsigned (kb = k + 1024). k is converted through the magic constant
     * (AVX2 has no 64-bit int->double conversion, this keeps the loop vectorisable). */
    uint64_t b = qt_mi_to_bits(u);
    uint64_t kb = (b + (0x4000000000000000ull - QT_MI_SQRT_HALF_BITS)) >> 52;
    double m = qt_mi_from_bits(b - (kb << 52) + (1024ull << 52));
    double k = qt_mi_from_bits(kb | 0x4330000000000000ull) - (0x1p52 + 1024.0);
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double rr = 2.0 / 11.0;
    rr = rr * z + 2.0 / 9.0;
    rr = rr * z + 2.0 / 7.0;
    rr = rr * z + 2.0 / 5.0;
    rr = rr * z + 2.0 / 3.0;
    rr = rr * z;
    double hfsq = 0.5 * f * f;
    double lm = f - (hfsq - s * (hfsq + rr));
    return k * QT_MI_LN2 + lm;
}

/* e^x: 0 below about -103.97, +inf above about 88.73, NaN for NaN. */
static inline float qt_expf_inline(float x)
{
    return (float)qt_exp_core(qt_mi_clamp((double)x, -QT_MI_EXP_CLAMP, QT_MI_EXP_CLAMP));
}

/* qt_expf_inline on eight lanes (and below qt_sigmoidf_v8, qt_siluf_v8): the same IEEE
 * operations lane by lane (so the same bits, tested on every 4099th bit pattern), written with generic vectors so that the eight
 * doubles fill one AVX-512 register; gcc's vectorisation of the scalar form runs it as two
 * 4-double halves with a longer clamp (about 45 instructions per 8 values against 25). */
typedef float qt_mi_f8 __attribute__((vector_size(8 * sizeof(float))));
typedef double qt_mi_d8 __attribute__((vector_size(8 * sizeof(double))));
typedef uint64_t qt_mi_u8 __attribute__((vector_size(8 * sizeof(uint64_t))));
typedef int64_t qt_mi_i8 __attribute__((vector_size(8 * sizeof(int64_t))));

static inline qt_mi_d8 qt_mi_select8(qt_mi_i8 c, qt_mi_d8 a, qt_mi_d8 b)
{
    return (qt_mi_d8)((c & (qt_mi_i8)a) | (~c & (qt_mi_i8)b));
}

/* qt_exp_core on eight lanes (x already clamped or NaN): the same operations lane by lane. */
static inline qt_mi_d8 qt_exp_core_v8(qt_mi_d8 x)
{
    const qt_mi_d8 t = x * QT_MI_INV_LN2 + QT_MI_ROUND_MAGIC;
    const qt_mi_d8 n = t - QT_MI_ROUND_MAGIC;
    const qt_mi_d8 r = x - n * QT_MI_LN2;
    qt_mi_d8 p = r * 0x1.6d76a7818451fp-10 + 0x1.12711cdd4c12ap-7;
    p = p * r + 0x1.5554ab796ba3ap-5;
    p = p * r + 0x1.5554016e393a0p-3;
    p = p * r + 0x1.00000028fb2c6p-1;
    p = p * r + 0x1.000000a4053f5p+0;
    p = p * r + 1.0;
    const qt_mi_u8 e = ((qt_mi_u8)t - QT_MI_ROUND_MAGIC_BITS + 1023u) << 52;
    return p * (qt_mi_d8)e;
}

/* x < lo ? lo : x and x > hi ? hi : x on eight lanes (NaN passes: it fails both
 * comparisons). With AVX-512 one VMAXPD / VMINPD each: MAXPD(a, b) is a > b ? a : b and
 * MINPD(a, b) a < b ? a : b, returning b when either is NaN, so with the bound as a and x
 * as b they are these selects exactly (the bound is never NaN or a zero). gcc keeps the
 * intrinsics' operand order (they are not the commutative smax / smin; the all-ones
 * zero-masked forms compile to the plain instructions and, unlike the unmasked intrinsics,
 * give g++ no "used uninitialized" warning from their undefined pass-through), and does not
 * turn the mask selects below into them, nor the float-to-double conversion of a generic
 * vector into one VCVTPS2PD (it splits it in two halves): together 8 of the exp's ~35
 * instructions for eight values, and 0.92 -> 0.68 ns a value for qt_expf_v8 on Zen 4. */
static inline qt_mi_d8 qt_mi_max_lo8(qt_mi_d8 lo, qt_mi_d8 x)
{
#if defined(__AVX512F__)
    __m512d a, b;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, &x, sizeof b);
    b = _mm512_maskz_max_pd((__mmask8)0xff, a, b);
    memcpy(&x, &b, sizeof x);
    return x;
#else
    return qt_mi_select8(x < lo, lo, x);
#endif
}

static inline qt_mi_d8 qt_mi_min_hi8(qt_mi_d8 hi, qt_mi_d8 x)
{
#if defined(__AVX512F__)
    __m512d a, b;
    memcpy(&a, &hi, sizeof a);
    memcpy(&b, &x, sizeof b);
    b = _mm512_maskz_min_pd((__mmask8)0xff, a, b);
    memcpy(&x, &b, sizeof x);
    return x;
#else
    return qt_mi_select8(x > hi, hi, x);
#endif
}

/* (double)x lane by lane (exact). */
static inline qt_mi_d8 qt_mi_widen8(qt_mi_f8 xf)
{
#if defined(__AVX512F__)
    __m256 a;
    memcpy(&a, &xf, sizeof a);
    const __m512d d = _mm512_maskz_cvtps_pd((__mmask8)0xff, a);
    qt_mi_d8 x;
    memcpy(&x, &d, sizeof x);
    return x;
#else
    return __builtin_convertvector(xf, qt_mi_d8);
#endif
}

/* qt_mi_clamp on eight lanes (NaN passes). */
static inline qt_mi_d8 qt_mi_clamp8(qt_mi_d8 x)
{
    const qt_mi_d8 lo = {-QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP,
                         -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP};
    const qt_mi_d8 hi = -lo;
    return qt_mi_min_hi8(hi, qt_mi_max_lo8(lo, x));
}

static inline qt_mi_f8 qt_expf_v8(qt_mi_f8 xf)
{
    const qt_mi_d8 x = qt_mi_clamp8(qt_mi_widen8(xf));
    return __builtin_convertvector(qt_exp_core_v8(x), qt_mi_f8);
}

/* qt_sigmoidf_inline and qt_siluf_inline on eight lanes: the same IEEE operations lane by
 * lane, so the same bits (tested like qt_expf_v8). */
static inline qt_mi_f8 qt_sigmoidf_v8(qt_mi_f8 xf)
{
    const qt_mi_d8 xc = qt_mi_clamp8(qt_mi_widen8(xf));
    return __builtin_convertvector(1.0 / (1.0 + qt_exp_core_v8(-xc)), qt_mi_f8);
}

static inline qt_mi_f8 qt_siluf_v8(qt_mi_f8 xf)
{
    const qt_mi_d8 lo = {-QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP,
                         -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP};
    const qt_mi_d8 xd = qt_mi_widen8(xf);
    const qt_mi_d8 xc = qt_mi_clamp8(xd);
    const qt_mi_d8 xn = qt_mi_max_lo8(lo, xd);
    return __builtin_convertvector(xn / (1.0 + qt_exp_core_v8(-xc)), qt_mi_f8);
}

/* qt_sigmoidf_v8(x) into *sg and qt_siluf_v8(x) into *sl with one exponential: both divide
 * by the same 1 + e^-clamp(x) (the same operations as the two calls, so the same bits). */
static inline void qt_sigmoid_siluf_v8(qt_mi_f8 xf, qt_mi_f8 *sg, qt_mi_f8 *sl)
{
    const qt_mi_d8 lo = {-QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP,
                         -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP};
    const qt_mi_d8 xd = qt_mi_widen8(xf);
    const qt_mi_d8 xc = qt_mi_clamp8(xd);
    const qt_mi_d8 xn = qt_mi_max_lo8(lo, xd);
    const qt_mi_d8 d = 1.0 + qt_exp_core_v8(-xc);
    *sg = __builtin_convertvector(1.0 / d, qt_mi_f8);
    *sl = __builtin_convertvector(xn / d, qt_mi_f8);
}

/* log x: -inf at +-0, NaN below 0 and for NaN, +inf at +inf. Float subnormals are normal
 * doubles, so the core needs no scaling path. */
static inline float qt_logf_inline(float x)
{
    double xd = (double)x;
    const double inf = (double)__builtin_inf();
    double r = qt_log_core(qt_mi_select((xd > 0.0) & (xd < inf), xd, 1.0));
    r = qt_mi_select(xd == 0.0, -inf, r);
    r = qt_mi_select(xd < 0.0, (double)__builtin_nan(""), r);
    r = qt_mi_select(xd == inf, inf, r);
    r = qt_mi_select(xd != xd, xd + xd, r);
    return (float)r;
}

/* 1/(1+e^-x): for x << 0, e^-x is large but finite in double (clamp), so the quotient
 * keeps full relative accuracy down to the float subnormals; no 1 - y cancellation. */
static inline float qt_sigmoidf_inline(float x)
{
    double xc = qt_mi_clamp((double)x, -QT_MI_EXP_CLAMP, QT_MI_EXP_CLAMP);
    return (float)(1.0 / (1.0 + qt_exp_core(-xc)));
}

/* x/(1+e^-x). The numerator is clamped below only: -inf must give the limit -0, not
 * -inf/inf; +inf gives +inf. */
static inline float qt_siluf_inline(float x)
{
    double xd = (double)x;
    double xc = qt_mi_clamp(xd, -QT_MI_EXP_CLAMP, QT_MI_EXP_CLAMP);
    double xn = qt_mi_select(xd < -QT_MI_EXP_CLAMP, -QT_MI_EXP_CLAMP, xd);
    return (float)(xn / (1.0 + qt_exp_core(-xc)));
}

/* log(1+e^x), and x itself above 20 (PyTorch's threshold). With e = e^x and u = 1 + e
 * rounded, log(u) * e/(u-1) cancels that rounding to first order (u - 1 is exact), so the
 * result keeps relative accuracy when e is tiny; u == 1 selects e (log1p(e) = e there).
 * Both branches are evaluated; the unused one may be inf/NaN and is discarded. */
static inline float qt_softplusf_inline(float x)
{
    double xd = (double)x;
    double e = qt_exp_core(qt_mi_clamp(xd, -QT_MI_EXP_CLAMP, QT_MI_SOFTPLUS_THRESHOLD));
    double u = 1.0 + e;
    double l = qt_log_core(u) * (e / (u - 1.0));
    double r = qt_mi_select(u == 1.0, e, l);
    return (float)qt_mi_select(xd > QT_MI_SOFTPLUS_THRESHOLD, xd, r);
}

#endif
