/* qt_math.c - the project's own elementary functions (contract: qt_math.h).
 *
 * Why not libm: glibc's expf picks an implementation by CPU (FMA ifunc) and musl's differ,
 * so the same plan would give different bits per build. Everything here is plain IEEE
 * arithmetic with -ffp-contract=off, so results depend only on the input bits.
 *
 * Invariants:
 *  - no libm symbol is referenced (check: nm qt_math.o | grep ' U '); sqrt is the IEEE sqrt
 *    instruction (SSE intrinsic), never GCC's errno fallback call into libm;
 *  - the float functions are the branch-free inline cores of qt_math_inline.h (accuracy
 *    argument there: double evaluation, one final rounding, <= 1 ulp);
 *  - the double functions use Cody-Waite range reduction and Taylor/atanh series evaluated
 *    so that the leading term is exact; measured ~1 ulp (tests/unit/test_math.cpp).
 *  - qt_sin/qt_cos reduce with a 3-part pi/2 (119 bits); they are accurate for |x| < 2^20*pi/2
 *    (rotary arguments are pos * theta^-e <= seq_len), less so beyond.
 */
#include <stdint.h>
#include <string.h>
#include "qt_math.h"
#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* ln2 split: hi has 32 significant bits so n*hi is exact for |n| < 2^21. */
#define QT_LN2_HI 0x1.62e42ffp-1
#define QT_LN2_LO (-0x1.718432a1b0e26p-35)
#define QT_INV_LN2 0x1.71547652b82fep+0
/* pi/2 in three parts of 33, 33 and 53 bits: n*part is exact for |n| < 2^20. */
#define QT_PIO2_1 0x1.921fb544p+0
#define QT_PIO2_2 0x1.0b4611a6p-34
#define QT_PIO2_3 0x1.3198a2e037073p-69
#define QT_TWO_OVER_PI 0x1.45f306dc9c883p-1
/* Adding then subtracting 1.5*2^52 rounds a double to the nearest integer (ties to even)
 * without a libm call, valid for |v| < 2^51. */
#define QT_ROUND_MAGIC 0x1.8p52

static double qt_bits_to_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t qt_double_to_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double qt_round_int(double v)
{
    double t = v + QT_ROUND_MAGIC; /* not folded: -fno-fast-math keeps the rounding */
    return t - QT_ROUND_MAGIC;
}

/* 2^n for n in [-1022, 1023], exact. */
static double qt_pow2i(int64_t n)
{
    return qt_bits_to_double((uint64_t)(n + 1023) << 52);
}

/* e^r - 1 for |r| <= ln2/2 + tiny: Taylor to degree 14 (truncation < 2^-60 relative).
 * Returned as the small part so that 1 + p is rounded only once by the caller. */
static double qt_expm1_reduced(double r)
{
    double q = 1.0 / 87178291200.0;          /* 1/14! */
    q = q * r + 1.0 / 6227020800.0;          /* 1/13! */
    q = q * r + 1.0 / 479001600.0;
    q = q * r + 1.0 / 39916800.0;
    q = q * r + 1.0 / 3628800.0;
    q = q * r + 1.0 / 362880.0;
    q = q * r + 1.0 / 40320.0;
    q = q * r + 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    return r + (r * r) * q;
}

double qt_exp(double x)
{
    if (x != x) return x + x;
    if (x > 709.782712893384) return (double)__builtin_inf();
    if (x < -745.2) return 0.0;
    double n = qt_round_int(x * QT_INV_LN2);
    double r = (x - n * QT_LN2_HI) - n * QT_LN2_LO;
    double e = 1.0 + qt_expm1_reduced(r);
    int64_t ni = (int64_t)n;
    if (ni > 1023) return (e * 2.0) * qt_pow2i(ni - 1);
    if (ni < -1022) return (e * qt_pow2i(ni + 600)) * qt_pow2i(-600);
    return e * qt_pow2i(ni);
}

/* log(1+f) for f = m - 1, m in [sqrt(1/2), sqrt(2)): with s = f/(2+f),
 * log(1+f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)), R = sum_{k>=1} 2 s^(2k)/(2k+1).
 * The leading f is exact, so the rounding of s only touches the small correction. */
static double qt_log1p_reduced(double f)
{
    double s = f / (2.0 + f);
    double z = s * s;
    double r = 2.0 / 25.0;
    r = r * z + 2.0 / 23.0;
    r = r * z + 2.0 / 21.0;
    r = r * z + 2.0 / 19.0;
    r = r * z + 2.0 / 17.0;
    r = r * z + 2.0 / 15.0;
    r = r * z + 2.0 / 13.0;
    r = r * z + 2.0 / 11.0;
    r = r * z + 2.0 / 9.0;
    r = r * z + 2.0 / 7.0;
    r = r * z + 2.0 / 5.0;
    r = r * z + 2.0 / 3.0;
    r = r * z;
    double hfsq = 0.5 * f * f;
    return f - (hfsq - s * (hfsq + r));
}

double qt_log(double x)
{
    if (x != x) return x + x;
    if (x < 0.0) return (double)__builtin_nan("");
    if (x == 0.0) return -(double)__builtin_inf();
    if (x == (double)__builtin_inf()) return x;
    uint64_t u = qt_double_to_bits(x);
    int64_t e = 0;
    if ((u >> 52) == 0) { /* subnormal: scale into the normal range first */
        u = qt_double_to_bits(x * 0x1p54);
        e = -54;
    }
    e += (int64_t)(u >> 52) - 1023;
    double m = qt_bits_to_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > 0x1.6a09e667f3bcdp+0) { /* > sqrt(2): use m/2 so f stays small */
        m *= 0.5;
        e += 1;
    }
    double lm = qt_log1p_reduced(m - 1.0);
    double de = (double)e;
    return de * QT_LN2_HI + (lm + de * QT_LN2_LO);
}

/* sin/cos of r + rlo, |r| <= pi/4 + tiny, rlo the tail of the reduced argument.
 * Taylor to degree 19/20 (truncation < 2^-60); rlo enters through the first derivative. */
static double qt_sin_reduced(double r, double rlo)
{
    double z = r * r;
    double p = -1.0 / 121645100408832000.0;   /* -1/19! */
    p = p * z + 1.0 / 355687428096000.0;      /* 1/17! */
    p = p * z - 1.0 / 1307674368000.0;
    p = p * z + 1.0 / 6227020800.0;
    p = p * z - 1.0 / 39916800.0;
    p = p * z + 1.0 / 362880.0;
    p = p * z - 1.0 / 5040.0;
    p = p * z + 1.0 / 120.0;
    p = p * z - 1.0 / 6.0;
    return r + ((r * z) * p + rlo * (1.0 - 0.5 * z));
}

static double qt_cos_reduced(double r, double rlo)
{
    double z = r * r;
    double p = 1.0 / 2432902008176640000.0;   /* 1/20! */
    p = p * z - 1.0 / 6402373705728000.0;     /* -1/18! */
    p = p * z + 1.0 / 20922789888000.0;
    p = p * z - 1.0 / 87178291200.0;
    p = p * z + 1.0 / 479001600.0;
    p = p * z - 1.0 / 3628800.0;
    p = p * z + 1.0 / 40320.0;
    p = p * z - 1.0 / 720.0;
    p = p * z + 1.0 / 24.0;
    double hz = 0.5 * z;
    double w = 1.0 - hz;
    /* (1 - w) - hz recovers the rounding error of w exactly (Sterbenz). */
    return w + ((((1.0 - w) - hz) + (z * z) * p) - r * rlo);
}

/* Quadrant n and remainder r + *rlo with x = n*pi/2 + r + rlo. x - n*P1 is exact (both
 * are multiples of ulp(x) and the difference is < 1); the next subtraction is done as an
 * exact two-sum so the reduced argument keeps ~2x double precision. */
static double qt_reduce_pio2(double x, int64_t *quadrant, double *rlo)
{
    double n = qt_round_int(x * QT_TWO_OVER_PI);
    *quadrant = (int64_t)n;
    double y = x - n * QT_PIO2_1;
    double w = -(n * QT_PIO2_2);
    double r = y + w;
    double bv = r - y;
    double err = (y - (r - bv)) + (w - bv);
    *rlo = err - n * QT_PIO2_3;
    return r;
}

double qt_sin(double x)
{
    if (x != x || x == (double)__builtin_inf() || x == -(double)__builtin_inf())
        return (double)__builtin_nan("");
    int64_t q;
    double lo;
    double r = qt_reduce_pio2(x, &q, &lo);
    switch (q & 3) {
    case 0: return qt_sin_reduced(r, lo);
    case 1: return qt_cos_reduced(r, lo);
    case 2: return -qt_sin_reduced(r, lo);
    default: return -qt_cos_reduced(r, lo);
    }
}

double qt_cos(double x)
{
    if (x != x || x == (double)__builtin_inf() || x == -(double)__builtin_inf())
        return (double)__builtin_nan("");
    int64_t q;
    double lo;
    double r = qt_reduce_pio2(x, &q, &lo);
    switch (q & 3) {
    case 0: return qt_cos_reduced(r, lo);
    case 1: return -qt_sin_reduced(r, lo);
    case 2: return -qt_cos_reduced(r, lo);
    default: return qt_sin_reduced(r, lo);
    }
}

/* GCC keeps an errno-setting libm fallback behind __builtin_sqrt even when the argument
 * is provably non-negative, so on x86 the SSE instruction is named directly (IEEE sqrt,
 * correctly rounded); elsewhere the builtin is the best available. */
double qt_sqrt(double x)
{
    if (x != x) return x + x;
    if (x < 0.0) return (double)__builtin_nan("");
#if defined(__SSE2__)
    return _mm_cvtsd_f64(_mm_sqrt_sd(_mm_setzero_pd(), _mm_set_sd(x)));
#else
    return __builtin_sqrt(x);
#endif
}

float qt_sqrtf(float x)
{
    if (x != x) return x + x;
    if (x < 0.0f) return __builtin_nanf("");
#if defined(__SSE2__)
    return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x)));
#else
    return __builtin_sqrtf(x);
#endif
}

/* The float functions are the inline cores (qt_math_inline.h), so that an inlined or
 * vectorised call in a kernel and a call through this API give the same bits. */
float qt_expf(float x)
{
    return qt_expf_inline(x);
}

float qt_logf(float x)
{
    return qt_logf_inline(x);
}

float qt_sigmoidf(float x)
{
    return qt_sigmoidf_inline(x);
}

float qt_siluf(float x)
{
    return qt_siluf_inline(x);
}

float qt_softplusf(float x)
{
    return qt_softplusf_inline(x);
}
