/* cp_pack.c - the layout permutation of context parallelism's head exchange (see
 * cp_pack.h): pack and unpack of the token and head sides, the one-add accumulation, and
 * the element-by-element references.
 * Invariant: the fast paths copy whole rows (token side: Gl*w elements; head side: the Sl
 * consecutive rows of one sequence and member, contiguous on both sides), the references
 * one element at a time; both visit each element of the destination exactly once.
 */
#include <string.h>
#include "cp_pack.h"
#include "../kernels/bf16.h"
#include "base/qt_err.h"

int qt_cp_shape_check(const qt_cp_shape *sh)
{
    if (sh->b < 1 || sh->S < 1 || sh->G < 1 || sh->w < 1 || sh->C < 1 || sh->u < 0 ||
        (sh->eb != 2 && sh->eb != 4))
        return qt_fail(QT_E_PLAN, "context exchange: b = %lld sequences, S = %lld tokens, "
                       "G = %lld groups of w = %lld elements of %lld bytes, C = %lld ranks, "
                       "u = %lld: every size must be >= 1 (u >= 0) and elements 2 or 4 bytes",
                       (long long)sh->b, (long long)sh->S, (long long)sh->G, (long long)sh->w,
                       (long long)sh->eb, (long long)sh->C, (long long)sh->u);
    if (sh->S % sh->C || (sh->u > 0 ? sh->G % sh->u : sh->G % sh->C && sh->C % sh->G))
        return qt_fail(QT_E_PLAN, "context exchange: S = %lld tokens must be a multiple of the "
                       "context degree C = %lld, and G = %lld head groups a multiple or a "
                       "divisor of it (units of u = %lld > 0 groups: a multiple of u)",
                       (long long)sh->S, (long long)sh->C, (long long)sh->G, (long long)sh->u);
    return QT_OK;
}

/* Groups per member on the head side, and member j's first group. */
static int64_t qt_cp_gl(const qt_cp_shape *sh)
{
    return QT_CP_SLOTS(sh->G, sh->C, sh->u);
}

static int64_t qt_cp_g0(const qt_cp_shape *sh, int64_t j)
{
    if (sh->u > 0) return j * (sh->G / sh->u) / sh->C * sh->u;
    return j * sh->G / sh->C;
}

int64_t qt_cp_first(const qt_cp_shape *sh, int64_t j)
{
    return qt_cp_g0(sh, j);
}

int64_t qt_cp_count(const qt_cp_shape *sh, int64_t j)
{
    return sh->u > 0 ? qt_cp_g0(sh, j + 1) - qt_cp_g0(sh, j) : qt_cp_gl(sh);
}

/* The member whose head side returns group g to the token side. */
static int64_t qt_cp_owner(const qt_cp_shape *sh, int64_t g)
{
    if (sh->u > 0) {
        int64_t m = 0;
        while (m + 1 < sh->C && qt_cp_g0(sh, m + 1) <= g) m++;
        return m;
    }
    const int64_t rho = sh->G >= sh->C ? 1 : sh->C / sh->G;
    return sh->G >= sh->C ? g / qt_cp_gl(sh) : g * rho + rho - 1;
}

/* Whether member j's head-side groups go back to the token side: always, unless a group is
 * held by a replica chain and j is not its last member. */
static int qt_cp_returns(const qt_cp_shape *sh, int64_t j)
{
    const int64_t rho = sh->u > 0 || sh->G >= sh->C ? 1 : sh->C / sh->G;
    return j % rho == rho - 1;
}

int64_t qt_cp_block_bytes(const qt_cp_shape *sh)
{
    return sh->b * (sh->S / sh->C) * qt_cp_gl(sh) * sh->w * sh->eb;
}

void qt_cp_add(void *dst, const void *src, int64_t n, int64_t eb)
{
    if (eb == 4) {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = d[i] + s[i];
        return;
    }
    qt_bf16 *d = dst;
    const qt_bf16 *s = src;
    for (int64_t i = 0; i < n; i++)
        d[i] = qt_bf16_from_f32(qt_f32_from_bf16(d[i]) + qt_f32_from_bf16(s[i]));
}

/* The bytes of n elements from src to dst: copied, or added (acc). */
static void qt_cp_put(void *dst, const void *src, int64_t n, int64_t eb, int acc)
{
    if (acc) qt_cp_add(dst, src, n, eb);
    else memcpy(dst, src, (size_t)(n * eb));
}

/* Token row (s, u), groups [j*Gl, (j+1)*Gl), and packed row (j, s, u): their byte offsets
 * for r = s*Sl + u. */
static int64_t qt_cp_tok_at(const qt_cp_shape *sh, int64_t r, int64_t j)
{
    return (r * sh->G + qt_cp_g0(sh, j)) * sh->w * sh->eb;
}

static int64_t qt_cp_packed_at(const qt_cp_shape *sh, int64_t j, int64_t r)
{
    const int64_t gw = qt_cp_gl(sh) * sh->w, rows = sh->b * (sh->S / sh->C);
    return (j * rows + r) * gw * sh->eb;
}

void qt_cp_pack_tokens(const qt_cp_shape *sh, void *packed, const void *tok)
{
    const int64_t gw = qt_cp_gl(sh) * sh->w, rows = sh->b * (sh->S / sh->C);
    for (int64_t j = 0; j < sh->C; j++) {
        /* member j's groups; uneven ownership: then zeros in its padding slots */
        const int64_t nw = qt_cp_count(sh, j) * sh->w;
        for (int64_t r = 0; r < rows; r++) {
            char *dst = (char *)packed + qt_cp_packed_at(sh, j, r);
            memcpy(dst, (const char *)tok + qt_cp_tok_at(sh, r, j), (size_t)(nw * sh->eb));
            if (nw < gw) memset(dst + nw * sh->eb, 0, (size_t)((gw - nw) * sh->eb));
        }
    }
}

void qt_cp_unpack_tokens(const qt_cp_shape *sh, void *tok, const void *packed, int acc)
{
    const int64_t rows = sh->b * (sh->S / sh->C);
    for (int64_t j = 0; j < sh->C; j++) {
        /* member j's groups (uneven ownership: not its padding slots) */
        const int64_t nw = qt_cp_count(sh, j) * sh->w;
        for (int64_t r = 0; r < rows && nw > 0 && qt_cp_returns(sh, j); r++)
            qt_cp_put((char *)tok + qt_cp_tok_at(sh, r, j),
                      (const char *)packed + qt_cp_packed_at(sh, j, r), nw, sh->eb, acc);
    }
}

/* Head rows (s, j*Sl .. j*Sl + Sl - 1) and packed rows (j, s, 0 .. Sl - 1): both runs are
 * contiguous, of Sl*Gl*w elements; their byte offsets. */
static int64_t qt_cp_heads_at(const qt_cp_shape *sh, int64_t s, int64_t j)
{
    const int64_t Sl = sh->S / sh->C, gw = qt_cp_gl(sh) * sh->w;
    return (s * sh->S + j * Sl) * gw * sh->eb;
}

void qt_cp_pack_heads(const qt_cp_shape *sh, void *packed, const void *heads)
{
    const int64_t Sl = sh->S / sh->C, gw = qt_cp_gl(sh) * sh->w;
    for (int64_t j = 0; j < sh->C; j++)
        for (int64_t s = 0; s < sh->b; s++)
            memcpy((char *)packed + qt_cp_packed_at(sh, j, s * Sl),
                   (const char *)heads + qt_cp_heads_at(sh, s, j), (size_t)(Sl * gw * sh->eb));
}

void qt_cp_unpack_heads(const qt_cp_shape *sh, void *heads, const void *packed, int acc)
{
    const int64_t Sl = sh->S / sh->C, gw = qt_cp_gl(sh) * sh->w;
    for (int64_t j = 0; j < sh->C; j++)
        for (int64_t s = 0; s < sh->b; s++)
            qt_cp_put((char *)heads + qt_cp_heads_at(sh, s, j),
                      (const char *)packed + qt_cp_packed_at(sh, j, s * Sl), Sl * gw, sh->eb,
                      acc);
}

void qt_cp_ref_to_heads(const qt_cp_shape *sh, int64_t c, void *y, const void *const *xs)
{
    const int64_t Sl = sh->S / sh->C, Gl = qt_cp_gl(sh), eb = sh->eb;
    for (int64_t s = 0; s < sh->b; s++)
        for (int64_t t = 0; t < sh->S; t++)
            for (int64_t g = 0; g < Gl; g++)
                for (int64_t i = 0; i < sh->w; i++) {
                    /* Y[s][t][g][i] = X of member t/Sl [s][t % Sl][g0(c) + g][i], or 0 in a
                     * padding slot (uneven ownership: g >= n(c)) */
                    const int64_t yi = ((s * sh->S + t) * Gl + g) * sh->w + i;
                    const int64_t xi =
                        ((s * Sl + t % Sl) * sh->G + qt_cp_g0(sh, c) + g) * sh->w + i;
                    if (g >= qt_cp_count(sh, c)) memset((char *)y + yi * eb, 0, (size_t)eb);
                    else memcpy((char *)y + yi * eb, (const char *)xs[t / Sl] + xi * eb,
                                (size_t)eb);
                }
}

void qt_cp_ref_to_tokens(const qt_cp_shape *sh, int64_t c, void *x, const void *const *ys)
{
    const int64_t Sl = sh->S / sh->C, Gl = qt_cp_gl(sh), eb = sh->eb;
    for (int64_t s = 0; s < sh->b; s++)
        for (int64_t u = 0; u < Sl; u++)
            for (int64_t g = 0; g < sh->G; g++)
                for (int64_t i = 0; i < sh->w; i++) {
                    /* X[s][u][g][i] = Y of the member m holding group g (G < C: the last of
                     * its chain; uneven ownership: its run's) [s][c*Sl + u][g - g0(m)][i] */
                    const int64_t m = qt_cp_owner(sh, g);
                    const int64_t xi = ((s * Sl + u) * sh->G + g) * sh->w + i;
                    const int64_t yi =
                        ((s * sh->S + c * Sl + u) * Gl + g - qt_cp_g0(sh, m)) * sh->w + i;
                    memcpy((char *)x + xi * eb, (const char *)ys[m] + yi * eb, (size_t)eb);
                }
}
