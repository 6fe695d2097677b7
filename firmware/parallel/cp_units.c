/* cp_units.c - the own units of a parameter kept whole over context and their placement by
 * owner (cp_units.h; issue 35, GDN heads owned unevenly over context).
 * Invariants: pure data movement, bit for bit; no heap, no state.
 */
#include <string.h>
#include "cp_units.h"

int qt_cpu_check(const qt_cpu_shape *sh)
{
    if (sh->U < 1 || sh->C < 1 || sh->nseg < 1 || sh->nseg > QT_CPU_MAX_SEG ||
        (sh->eb != 2 && sh->eb != 4))
        return -1;
    for (int64_t i = 0; i < sh->nseg; i++)
        if (sh->w[i] < 1) return -1;
    return 0;
}

int64_t qt_cpu_first(int64_t U, int64_t C, int64_t j)
{
    return j * U / C;
}

int64_t qt_cpu_count(int64_t U, int64_t C, int64_t j)
{
    return qt_cpu_first(U, C, j + 1) - qt_cpu_first(U, C, j);
}

int64_t qt_cpu_slots(int64_t U, int64_t C)
{
    return (U + C - 1) / C;
}

static int64_t qt_cpu_unit_elems(const qt_cpu_shape *sh)
{
    int64_t n = 0;
    for (int64_t i = 0; i < sh->nseg; i++) n += sh->w[i];
    return n;
}

int64_t qt_cpu_whole_elems(const qt_cpu_shape *sh)
{
    return sh->U * qt_cpu_unit_elems(sh);
}

int64_t qt_cpu_block_elems(const qt_cpu_shape *sh)
{
    return qt_cpu_slots(sh->U, sh->C) * qt_cpu_unit_elems(sh);
}

void qt_cpu_select(const qt_cpu_shape *sh, int64_t c, void *y, const void *x)
{
    const int64_t L = qt_cpu_slots(sh->U, sh->C), u0 = qt_cpu_first(sh->U, sh->C, c),
                  n = qt_cpu_count(sh->U, sh->C, c);
    char *dst = (char *)y;
    const char *src = (const char *)x;
    for (int64_t i = 0; i < sh->nseg; i++) {
        const int64_t w = sh->w[i];
        memcpy(dst, src + u0 * w * sh->eb, (size_t)(n * w * sh->eb));
        memset(dst + n * w * sh->eb, 0, (size_t)((L - n) * w * sh->eb));
        dst += L * w * sh->eb;
        src += sh->U * w * sh->eb;
    }
}

void qt_cpu_place(const qt_cpu_shape *sh, float *whole, const float *blocks, int64_t stride)
{
    const int64_t L = qt_cpu_slots(sh->U, sh->C);
    for (int64_t j = 0; j < sh->C; j++) {
        const int64_t u0 = qt_cpu_first(sh->U, sh->C, j), n = qt_cpu_count(sh->U, sh->C, j);
        const float *src = blocks + j * stride;
        float *dst = whole;
        for (int64_t i = 0; i < sh->nseg; i++) {
            const int64_t w = sh->w[i];
            memcpy(dst + u0 * w, src, (size_t)(n * w) * sizeof(float));
            src += L * w;
            dst += sh->U * w;
        }
    }
}
