/* argmax.c - the first index of a row's maximum, jnp.argmax's rule (argmax.h): NaN is the
 * maximum and the first NaN wins; ties keep the lower index. Comparisons only.
 *
 * Float build only (empty under -DQT_REAL_DOUBLE).
 */
#ifndef QT_REAL_DOUBLE
#include <string.h>
#include "argmax.h"

int64_t qt_argmax_f32(const float *x, int64_t n)
{
    int64_t best = 0;
    float m = x[0];
    if (m != m) return 0;
    for (int64_t i = 1; i < n; i++) {
        const float v = x[i];
        if (v != v) return i;
        if (v > m) {
            m = v;
            best = i;
        }
    }
    return best;
}

static float qt_argmax_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int64_t qt_argmax_b16(const uint16_t *x, int64_t n)
{
    int64_t best = 0;
    float m = qt_argmax_widen(x[0]);
    if (m != m) return 0;
    for (int64_t i = 1; i < n; i++) {
        const float v = qt_argmax_widen(x[i]);
        if (v != v) return i;
        if (v > m) {
            m = v;
            best = i;
        }
    }
    return best;
}

int qt_argmax_beats(float w, int64_t j, float v, int64_t i)
{
    const int wn = w != w, vn = v != v;
    if (wn) return !vn || j < i;
    if (vn) return 0;
    return w > v || (w == v && j < i);
}
#endif
