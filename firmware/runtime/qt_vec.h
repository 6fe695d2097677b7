/* qt_vec.h - element-wise float loops of the runtime's parameter-sized passes.
 *
 * Invariant: every element gets exactly one IEEE operation with the operands in the stated
 * order, in the vector body (AVX-512, when compiled for it) and in the scalar tail alike, so
 * the result is bit-identical to the plain scalar loop whatever the vector width. There are
 * no reductions here (those would need reassociation). The loops are spelled out with
 * intrinsics so their speed does not depend on the compiler's vectoriser; the bits never
 * depend on it either way.
 */
#ifndef QT_VEC_H
#define QT_VEC_H

#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* dst[k] = a[k] + b[k] for k < n (dst may alias a or b element-wise). */
static inline void qt_vec_add(float *dst, const float *a, const float *b, int64_t n)
{
    int64_t k = 0;
#if defined(__AVX512F__)
    for (; k + 16 <= n; k += 16)
        _mm512_storeu_ps(dst + k, _mm512_add_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k)));
#endif
    for (; k < n; k++) dst[k] = a[k] + b[k];
}

/* dst[k] = src[k] / d for k < n (dst may alias src element-wise). */
static inline void qt_vec_div_to(float *dst, const float *src, int64_t n, float d)
{
    int64_t k = 0;
#if defined(__AVX512F__)
    const __m512 dv = _mm512_set1_ps(d);
    for (; k + 16 <= n; k += 16)
        _mm512_storeu_ps(dst + k, _mm512_div_ps(_mm512_loadu_ps(src + k), dv));
#endif
    for (; k < n; k++) dst[k] = src[k] / d;
}

/* g[k] = g[k] / d for k < n. */
static inline void qt_vec_div_scalar(float *g, int64_t n, float d)
{
    qt_vec_div_to(g, g, n, d);
}

#endif
