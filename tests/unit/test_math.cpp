// test_math.cpp - accuracy of the project's own elementary functions (firmware/math).
//
// References: libm in double (for the float functions; double exp/log/sin are within
// ~0.5 ulp of double, i.e. ~2^-29 float ulp, negligible) and libm in long double (x87,
// 64-bit mantissa) for the double functions. Errors are measured in ulps of the result
// precision against the unrounded reference, so a correctly rounded result scores <= 0.5.
// Every sweep prints its measured maximum. The sweeps are strided (a prime stride over the
// bit patterns plus a random sample) so the whole file runs in a few seconds; the strides
// still visit every binade many times.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "qt_test_util.h"
#include "CppUTest/TestHarness.h"

extern "C" {
#include "math/qt_math.h"
}

namespace {

float from_bits(uint32_t u) { return qt_test_float(u); }
uint32_t to_bits(float f) { return qt_test_bits(f); }

// ulp of a float result near |ref| (ulp of the binade of ref, subnormal spacing below).
double ulp_f(double ref)
{
    double a = fabs(ref);
    if (a < 0x1p-126) return 0x1p-149;
    int e;
    frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
    return ldexp(1.0, e - 24);
}

long double ulp_d(long double ref)
{
    long double a = fabsl(ref);
    if (a < 0x1p-1022L) return 0x1p-1074L;
    int e;
    frexpl(a, &e);
    return ldexpl(1.0L, e - 53);
}

// Error of got in float ulps against the double reference; inf/nan must match exactly.
double err_ulp_f(float got, double ref)
{
    if (isnan(ref)) return isnan(got) ? 0.0 : 1e30;
    if (isinf(ref) || fabs(ref) > 3.4028234663852886e38) {
        // reference overflows float: only +-inf or FLT_MAX are acceptable
        if (isinf(got) && (got > 0) == (ref > 0)) return 0.0;
        return fabs((double)got - ref) / ulp_f(3.4028234663852886e38);
    }
    if (isinf(got) || isnan(got)) return 1e30;
    return fabs((double)got - ref) / ulp_f(ref);
}

double err_ulp_d(double got, long double ref)
{
    if (isnan(ref)) return isnan(got) ? 0.0 : 1e30;
    if (isinf(ref)) return (isinf(got) && (got > 0) == (ref > 0)) ? 0.0 : 1e30;
    if (isinf(got) || isnan(got)) return 1e30;
    return (double)(fabsl((long double)got - ref) / ulp_d(ref));
}

typedef float (*ffn)(float);
typedef double (*dref)(double);

// Sweep every `stride`-th float bit pattern in [lo_bits, hi_bits] (one sign), then 200k random
// patterns in [lo, hi]; returns the max ulp error and prints it with the worst input.
double sweep_f(const char *name, ffn f, dref ref, float lo, float hi, uint32_t stride)
{
    double worst = 0.0;
    float at = 0.0f;
    // positive and negative halves separately, walking magnitude bit patterns upwards
    for (int sign = 0; sign < 2; sign++) {
        if (sign == 0 && hi < 0.0f) continue;
        if (sign == 1 && lo >= 0.0f) continue;
        float mlo = sign ? fmaxf(-hi, 0.0f) : fmaxf(lo, 0.0f);
        float mhi = sign ? -lo : hi;
        for (uint64_t u = to_bits(mlo); u <= to_bits(mhi); u += stride) {
            float x = from_bits((uint32_t)u);
            if (sign) x = -x;
            double e = err_ulp_f(f(x), ref((double)x));
            if (e > worst) { worst = e; at = x; }
        }
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = from_bits((uint32_t)(s >> 32));
        if (!(x >= lo && x <= hi)) {
            // map into range keeping a spread of magnitudes
            double t = (double)(s >> 11) * (1.0 / 9007199254740992.0);
            x = (float)(lo + t * ((double)hi - (double)lo));
        }
        double e = err_ulp_f(f(x), ref((double)x));
        if (e > worst) { worst = e; at = x; }
    }
    printf("\n  %-10s max err %.4f ulp at x=%.9g", name, worst, (double)at);
    return worst;
}

double ref_exp(double x) { return exp(x); }
double ref_log(double x) { return log(x); }
double ref_sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
double ref_silu(double x) { return x * ref_sigmoid(x); }
double ref_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

typedef double (*dfn)(double);
typedef long double (*ldref)(long double);

double sweep_d(const char *name, dfn f, ldref ref, double lo, double hi, int n)
{
    double worst = 0.0, at = 0.0;
    uint64_t s = 0x243f6a8885a308d3ull;
    for (int i = 0; i < n; i++) {
        double x;
        if (i < n / 2) {
            x = lo + (hi - lo) * ((double)i / (double)(n / 2)); // dense uniform grid
        } else {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x = lo + (hi - lo) * ((double)(s >> 11) * (1.0 / 9007199254740992.0));
        }
        double e = err_ulp_d(f(x), ref((long double)x));
        if (e > worst) { worst = e; at = x; }
    }
    printf("\n  %-10s max err %.4f ulp at x=%.17g", name, worst, at);
    return worst;
}

long double lref_exp(long double x) { return expl(x); }
long double lref_log(long double x) { return logl(x); }
long double lref_sin(long double x) { return sinl(x); }
long double lref_cos(long double x) { return cosl(x); }

} // namespace

TEST_GROUP(Math) {};

// Contract: <= 1 ulp. What we guarantee and check is tighter: the float functions evaluate
// in double with a relative error < 2^-28 (exp fit 2^-28.5, log series 2^-33) and round once,
// so the error is below 0.5 + 2^-28/2^-24 = 0.5625 ulp (kQtUlpBound). Measured max ~0.54.
// Stride 997 visits ~2M patterns across all binades.
const double kQtUlpBound = 0.5625;

TEST(Math, ExpfUlp)
{
    double w = sweep_f("expf", qt_expf, ref_exp, -104.0f, 88.72f, 997);
    CHECK(w <= kQtUlpBound);
}

TEST(Math, LogfUlp)
{
    double w = sweep_f("logf", qt_logf, ref_log, 0.0f, 3.4e38f, 997);
    CHECK(w <= kQtUlpBound);
    // subnormal inputs (strided): they are normal doubles inside qt_logf
    double ws = 0.0;
    for (uint32_t u = 1; u < 0x00800000u; u += 61) {
        float x = from_bits(u);
        double e = err_ulp_f(qt_logf(x), log((double)x));
        if (e > ws) ws = e;
    }
    printf("\n  logf subnormals max err %.4f ulp", ws);
    CHECK(ws <= kQtUlpBound);
}

// sigmoid/silu/softplus: the exp error enters with a factor <= 1 (e/(1+e), resp.
// e/((1+e) log1p(e))), plus double roundings (2^-53 each) and the log series (2^-33), all
// before one final rounding: the same 0.5625 ulp bound.
TEST(Math, SigmoidSiluSoftplusUlp)
{
    CHECK(sweep_f("sigmoidf", qt_sigmoidf, ref_sigmoid, -120.0f, 120.0f, 4099) <= kQtUlpBound);
    CHECK(sweep_f("siluf", qt_siluf, ref_silu, -120.0f, 120.0f, 4099) <= kQtUlpBound);
    CHECK(sweep_f("softplusf", qt_softplusf, ref_softplus, -110.0f, 100.0f, 4099)
          <= kQtUlpBound);
}

namespace {

bool same_float(float a, float b)
{
    // NaN payloads are not part of the contract; every other result must match in bits
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return to_bits(a) == to_bits(b);
}

const int kVecN = 1024; // multiple of every vector width: gcc vectorises even at -O2

// These loops are compiled with the vectoriser on (checked with -fopt-info-vec when this
// test was written: all five vectorise), so they exercise the blend/SIMD form of the cores.
float g_vx[kVecN], g_vy[kVecN]; // file-scope arrays: no aliasing question for the vectoriser

#pragma GCC push_options
#pragma GCC optimize("tree-vectorize")
__attribute__((noinline)) void vec_expf()
{
    for (int i = 0; i < kVecN; i++) g_vy[i] = qt_expf_inline(g_vx[i]);
}
__attribute__((noinline)) void vec_logf()
{
    for (int i = 0; i < kVecN; i++) g_vy[i] = qt_logf_inline(g_vx[i]);
}
__attribute__((noinline)) void vec_sigmoidf()
{
    for (int i = 0; i < kVecN; i++) g_vy[i] = qt_sigmoidf_inline(g_vx[i]);
}
__attribute__((noinline)) void vec_siluf()
{
    for (int i = 0; i < kVecN; i++) g_vy[i] = qt_siluf_inline(g_vx[i]);
}
__attribute__((noinline)) void vec_softplusf()
{
    for (int i = 0; i < kVecN; i++) g_vy[i] = qt_softplusf_inline(g_vx[i]);
}
#pragma GCC pop_options

typedef void (*vfn)();

} // namespace

// The out-of-line API, the inline form called per element, and the inline form inside a
// vectorised loop must give identical bits (kernels may use any of them). Exact equality,
// no tolerance: all three execute the same IEEE operations. Inputs: every 4099th bit
// pattern of all 2^32 (both signs, subnormals, inf, NaN) plus values near the thresholds.
TEST(Math, InlineVectorAndApiBitIdentical)
{
    float *xs = g_vx, *yv = g_vy;
    const ffn api[5] = {qt_expf, qt_logf, qt_sigmoidf, qt_siluf, qt_softplusf};
    const ffn inl[5] = {qt_expf_inline, qt_logf_inline, qt_sigmoidf_inline, qt_siluf_inline,
                        qt_softplusf_inline};
    const vfn vec[5] = {vec_expf, vec_logf, vec_sigmoidf, vec_siluf, vec_softplusf};
    const float edge[] = {0.0f, -0.0f, 20.0f, nextafterf(20.0f, 30.0f), 88.72f, 88.73f,
                          -103.97f, -104.0f, -150.0f, 150.0f, -151.0f, INFINITY, -INFINITY};
    long bad = 0, n = 0, fill = 0;
    uint64_t u = 0;
    int done = 0;
    while (!done) {
        for (fill = 0; fill < kVecN; fill++) {
            if (u < sizeof edge / sizeof edge[0]) {
                xs[fill] = edge[u];
            } else {
                uint64_t b = (u - sizeof edge / sizeof edge[0]) * 4099u;
                if (b > 0xffffffffu) { done = 1; b = 0x7fc00000u; }
                xs[fill] = from_bits((uint32_t)b);
            }
            u++;
        }
        for (int f = 0; f < 5; f++) {
            vec[f]();
            for (int i = 0; i < kVecN; i++) {
                float a = api[f](xs[i]), b = inl[f](xs[i]);
                if (!same_float(a, b) || !same_float(a, yv[i])) bad++;
                n++;
            }
        }
    }
    printf("\n  api/inline/vector compared on %ld values, %ld mismatches", n, bad);
    LONGS_EQUAL(0, bad);
}

// qt_expf_v8 (the eight-lane form the attention softmax uses), qt_sigmoidf_v8,
// qt_siluf_v8 and qt_sigmoid_siluf_v8 (the GDN conv's, SwiGLU's and the gated norm's) give
// qt_expf's / qt_sigmoidf's / qt_siluf's bits in every lane (their clamps and widening are
// AVX-512 instructions where built, the mask selects elsewhere): the edge values (NaN and
// the infinities pass the clamps) and every 4099th bit pattern of all 2^32, the lanes
// rotated so each value visits a different lane position as the patterns advance.
TEST(Math, ExpfV8BitIdenticalToApi)
{
    const float edge[] = {0.0f, -0.0f, 88.72f, 88.73f, -103.97f, -104.0f, -150.0f, 150.0f,
                          -151.0f, 151.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f};
    long bad = 0, n = 0;
    uint64_t u = 0;
    int done = 0;
    while (!done) {
        qt_mi_f8 x;
        for (int l = 0; l < 8; l++, u++) {
            if (u < sizeof edge / sizeof edge[0]) {
                x[l] = edge[u];
            } else {
                uint64_t b = (u - sizeof edge / sizeof edge[0]) * 4099u;
                if (b > 0xffffffffu) { done = 1; b = 0x7fc00000u; }
                x[l] = from_bits((uint32_t)b);
            }
        }
        const qt_mi_f8 y = qt_expf_v8(x), ys = qt_sigmoidf_v8(x), yl = qt_siluf_v8(x);
        qt_mi_f8 bs, bl;
        qt_sigmoid_siluf_v8(x, &bs, &bl);
        for (int l = 0; l < 8; l++, n++) {
            if (!same_float(y[l], qt_expf(x[l]))) bad++;
            if (!same_float(ys[l], qt_sigmoidf(x[l]))) bad++;
            if (!same_float(yl[l], qt_siluf(x[l]))) bad++;
            if (!same_float(bs[l], qt_sigmoidf(x[l])) || !same_float(bl[l], qt_siluf(x[l]))) bad++;
        }
    }
    printf("\n  qt_expf_v8 / qt_sigmoidf_v8 / qt_siluf_v8 / qt_sigmoid_siluf_v8 against the API "
           "on %ld values, %ld "
           "mismatches", n, bad);
    LONGS_EQUAL(0, bad);
}

TEST(Math, SpecialValues)
{
    const float inf = INFINITY;
    DOUBLES_EQUAL(1.0, qt_expf(0.0f), 0.0);
    DOUBLES_EQUAL(1.0, qt_expf(-0.0f), 0.0);
    CHECK(qt_expf(-inf) == 0.0f);
    CHECK(qt_expf(inf) == inf);
    CHECK(qt_expf(89.0f) == inf);
    CHECK(qt_expf(-104.5f) == 0.0f);
    CHECK(qt_expf(-103.0f) > 0.0f);             // subnormal result, not flushed
    CHECK(isnan(qt_expf(NAN)));
    CHECK(qt_logf(0.0f) == -inf);
    CHECK(qt_logf(-0.0f) == -inf);
    CHECK(isnan(qt_logf(-1.0f)));
    CHECK(isnan(qt_logf(-inf)));
    CHECK(isnan(qt_logf(NAN)));
    CHECK(qt_logf(inf) == inf);
    DOUBLES_EQUAL(0.0, qt_logf(1.0f), 0.0);
    CHECK(qt_sigmoidf(-inf) == 0.0f);
    CHECK(qt_sigmoidf(inf) == 1.0f);
    CHECK(isnan(qt_sigmoidf(NAN)));
    DOUBLES_EQUAL(0.5, qt_sigmoidf(0.0f), 0.0);
    CHECK(qt_sigmoidf(-100.0f) > 0.0f);         // e^-100 ~ 3.7e-44: a subnormal, not 0
    CHECK(qt_softplusf(30.0f) == 30.0f);        // PyTorch threshold identity
    CHECK(qt_softplusf(inf) == inf);
    CHECK(isnan(qt_softplusf(NAN)));
    CHECK(qt_softplusf(-inf) == 0.0f);
    CHECK(qt_softplusf(-100.0f) > 0.0f);        // log1p-accurate: e^-100 ~ 3.7e-44
    CHECK(qt_siluf(-inf) == 0.0f);               // limit, not -inf * 0 = NaN
    CHECK(qt_siluf(inf) == inf);
    CHECK(isnan(qt_siluf(NAN)));
    CHECK(isnan(qt_sqrtf(-1.0f)));
    CHECK(qt_sqrtf(inf) == inf);
    CHECK(isnan(qt_sqrt(-1.0)));
    DOUBLES_EQUAL(0.0, qt_exp(-800.0), 0.0);
    CHECK(qt_exp(710.0) == (double)INFINITY);
    CHECK(qt_log(0.0) == -(double)INFINITY);
}

// sqrt must be the IEEE instruction: bit-identical to libm's correctly rounded sqrt.
TEST(Math, SqrtCorrectlyRounded)
{
    long bad = 0;
    for (uint64_t u = 0; u < 0x7f800000u; u += 1021) {
        float x = from_bits((uint32_t)u);
        if (to_bits(qt_sqrtf(x)) != to_bits(sqrtf(x))) bad++;
    }
    uint64_t s = 1;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double x = fabs((double)(int64_t)s) * 1e-10;
        if (qt_sqrt(x) != sqrt(x)) bad++;
    }
    LONGS_EQUAL(0, bad);
}

// Double functions: target ~1 ulp; 2 ulp is the failure line (evaluation error of the
// final addition plus the reduction error bound).
TEST(Math, DoubleUlp)
{
    CHECK(sweep_d("exp", qt_exp, lref_exp, -745.0, 709.7, 200000) <= 2.0);
    CHECK(sweep_d("exp(small)", qt_exp, lref_exp, -1.0, 1.0, 100000) <= 2.0);
    CHECK(sweep_d("log", qt_log, lref_log, 1e-300, 1e300, 100000) <= 2.0);
    CHECK(sweep_d("log(~1)", qt_log, lref_log, 0.5, 2.0, 100000) <= 2.0);
    CHECK(sweep_d("sin", qt_sin, lref_sin, -1e5, 1e5, 200000) <= 2.0);
    CHECK(sweep_d("cos", qt_cos, lref_cos, -1e5, 1e5, 200000) <= 2.0);
    CHECK(sweep_d("sin(small)", qt_sin, lref_sin, -4.0, 4.0, 100000) <= 2.0);
    CHECK(sweep_d("cos(small)", qt_cos, lref_cos, -4.0, 4.0, 100000) <= 2.0);
    // log at subnormal doubles (scaling path)
    CHECK(err_ulp_d(qt_log(4.9406564584124654e-324), logl(4.9406564584124654e-324L)) <= 1.0);
}
