/* qt_test_util.h - helpers shared by the unit tests: golden conversion, tolerant
 * comparison (relative to the tensor's largest magnitude), finite differences in double.
 */
#ifndef QT_TEST_UTIL_H
#define QT_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The bits of a float, and the float of given bits (memcpy: no aliasing questions). */
static inline uint32_t qt_test_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float qt_test_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Copy n golden doubles into floats (goldens hold float32-representable inputs). */
static inline void qt_test_to_f32(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static inline void qt_test_to_i32(int32_t *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = (int32_t)src[i];
}

/* Largest |expected - actual| divided by max(max|expected|, 1e-30). Prints the worst
 * element when it exceeds tol, so a failing test names the index. */
static inline double qt_test_rel_err_f32(const char *what, const float *actual,
                                         const double *expected, size_t n, double tol)
{
    double scale = 1e-30, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(expected[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)actual[i] - expected[i]) / scale;
        if (e > worst || e != e) { worst = e; at = i; }
    }
    if (!(worst <= tol))
        fprintf(stderr, "%s: rel err %.3g > %.3g at [%zu]: got %.9g want %.9g (scale %.3g)\n",
                what, worst, tol, at, (double)actual[at], expected[at], scale);
    return worst;
}

static inline double qt_test_rel_err_f64(const char *what, const double *actual,
                                         const double *expected, size_t n, double tol)
{
    double scale = 1e-300, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(expected[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs(actual[i] - expected[i]) / scale;
        if (e > worst || e != e) { worst = e; at = i; }
    }
    if (!(worst <= tol))
        fprintf(stderr, "%s: rel err %.3g > %.3g at [%zu]: got %.17g want %.17g (scale %.3g)\n",
                what, worst, tol, at, actual[at], expected[at], scale);
    return worst;
}

/* Deterministic pseudo-random doubles in [-1, 1) for finite-difference probes. */
static inline double qt_test_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}


#endif
