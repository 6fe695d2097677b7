/* bf16_rows.c - one-pass bf16 forms of the row kernels (see bf16_rows.h).
 *
 * Each function is its fp32 kernel (rmsnorm.c, moe_combine.c, elementwise.c,
 * gated_rmsnorm.c, rope.c, xent.c) with every bf16 read replaced by its exact widening (W)
 * and every bf16 write by one rounding (R) of the same fp32 value: the same expressions, in
 * the same order, reductions serial in increasing index as there. Plain loops run sixteen lanes at a
 * time where the build has AVX-512BW (bf16.h's qt_bf16_widen16 / qt_bf16_store16: the same
 * IEEE operation per lane, no FMA). Loops are only split where the elements are independent (a reduction and
 * an elementwise update of other tensors over the same index), which changes no value.
 * The cross entropy row keeps the fp32 kernel's values with its max taken in sixteen lanes
 * (finite rows only: see qt_b16_xent_max) and its exponentials in eight (qt_expf_v8, the
 * same bits as QT_EXP), their sum one serial chain in increasing v as there.
 * Invariants: no state, no heap, no VLAs; the stack holds at most QT_B16_COLS floats (the
 * gated norm's backward: 8 * QT_B16_GRN_DV; the pointwise kinds' runs: 2 * QT_B16_RUN; the
 * rotation's head: QT_B16_ROPE_HD).
 * Float build only (empty under -DQT_REAL_DOUBLE).
 */
#include <string.h>
#include "bf16_rows.h"

#ifndef QT_REAL_DOUBLE
#include "qt_ops.h"
#include "qt_real.h"

#define W(v) qt_f32_from_bf16(v)
#define R(v) qt_bf16_from_f32(v)
/* Output columns per pass of MOE_COMBINE_FWD's fp32 row accumulator. */
#define QT_B16_COLS 512

static float qt_b16_scale(const float *w, int64_t i, int flags)
{
    return (flags & QT_RMSNORM_ZERO_CENTRED) ? 1.0f + w[i] : w[i];
}

#ifdef QT_BF16_HAVE_V16
/* qt_b16_scale of elements i..i+15. */
static __m512 qt_b16_scale16(const float *w, int64_t i, int flags)
{
    const __m512 v = _mm512_loadu_ps(w + i);
    return (flags & QT_RMSNORM_ZERO_CENTRED) ? _mm512_add_ps(_mm512_set1_ps(1.0f), v) : v;
}
#endif

/* Four rows' sums at once, each serial in increasing i as the fp32 kernel's (four
 * independent chains: the adds' latency overlaps, every sum keeps its order and bits). */
static void qt_b16_sumsq4(float ss[4], const qt_bf16 *x, int64_t xs, int64_t n)
{
    float a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v0 = W(x[i]), v1 = W(x[xs + i]), v2 = W(x[2 * xs + i]), v3 = W(x[3 * xs + i]);
        a = a + v0 * v0, b = b + v1 * v1, c = c + v2 * v2, d = d + v3 * v3;
    }
    ss[0] = a, ss[1] = b, ss[2] = c, ss[3] = d;
}

/* 1/sqrt(mean of squares + eps) of row r of R rows of n (xs apart from x): the sums of four
 * rows at once where r's group of four is whole (ss4 holds them from its first row on), else
 * one serial sum; each serial in increasing i, the fp32 kernels' expression. */
static float qt_b16_row_rstd(float ss4[4], const qt_bf16 *x, int64_t r, int64_t R, int64_t xs,
                             int64_t n, float eps)
{
    const qt_bf16 *xr = x + r * xs;
    if (r % 4 == 0 && r + 4 <= R) qt_b16_sumsq4(ss4, xr, xs, n);
    float ss = 0;
    if (r - r % 4 + 4 <= R) ss = ss4[r % 4];
    else
        for (int64_t i = 0; i < n; i++) ss = ss + W(xr[i]) * W(xr[i]);
    return 1.0f / QT_SQRT(ss / (float)n + eps);
}

void qt_b16_rmsnorm_fwd(qt_bf16 *y, float *rstd, const qt_bf16 *x, const float *w, int64_t R,
                        int64_t n, int64_t xs, int64_t ys, int flags, float eps)
{
    float ss4[4];
    for (int64_t r = 0; r < R; r++) {
        const qt_bf16 *xr = x + r * xs;
        qt_bf16 *yr = y + r * ys;
        const float rs = qt_b16_row_rstd(ss4, x, r, R, xs, n, eps);
        rstd[r] = rs;
        int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
        const __m512 rv = _mm512_set1_ps(rs);
        for (; i + 16 <= n; i += 16)
            qt_bf16_store16(yr + i, _mm512_mul_ps(_mm512_mul_ps(qt_bf16_widen16(xr + i), rv),
                                                  qt_b16_scale16(w, i, flags)));
#endif
        for (; i < n; i++) yr[i] = R((W(xr[i]) * rs) * qt_b16_scale(w, i, flags));
    }
}

/* Four rows' dots sum_i (dy_i s_i) x_i at once, each serial in increasing i. */
static void qt_b16_dot4(float dot[4], const qt_bf16 *dy, const qt_bf16 *x, const float *w,
                        int64_t n, int64_t xs, int64_t ys, int flags)
{
    float a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        const float sc = qt_b16_scale(w, i, flags);
        a = a + (W(dy[i]) * sc) * W(x[i]);
        b = b + (W(dy[ys + i]) * sc) * W(x[xs + i]);
        c = c + (W(dy[2 * ys + i]) * sc) * W(x[2 * xs + i]);
        d = d + (W(dy[3 * ys + i]) * sc) * W(x[3 * xs + i]);
    }
    dot[0] = a, dot[1] = b, dot[2] = c, dot[3] = d;
}

void qt_b16_rmsnorm_bwd(qt_bf16 *dx, const qt_bf16 *dy, const qt_bf16 *x, const float *w,
                        const float *rstd, int64_t R, int64_t n, int64_t xs, int64_t ys,
                        int flags)
{
    float dot4[4];
    for (int64_t r = 0; r < R; r++) {
        const qt_bf16 *xr = x + r * xs, *dyr = dy + r * ys;
        qt_bf16 *dxr = dx + r * xs;
        const float rs = rstd[r];
        if (r % 4 == 0 && r + 4 <= R) qt_b16_dot4(dot4, dyr, xr, w, n, xs, ys, flags);
        float dot = 0;
        if (r - r % 4 + 4 <= R) dot = dot4[r % 4];
        else
            for (int64_t i = 0; i < n; i++)
                dot = dot + (W(dyr[i]) * qt_b16_scale(w, i, flags)) * W(xr[i]);
        const float coef = ((rs * rs) * rs) * dot / (float)n;
        int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
        const __m512 rv = _mm512_set1_ps(rs), cv = _mm512_set1_ps(coef);
        for (; i + 16 <= n; i += 16) {
            const __m512 t = _mm512_mul_ps(rv, _mm512_mul_ps(qt_bf16_widen16(dyr + i),
                                                             qt_b16_scale16(w, i, flags)));
            const __m512 u = _mm512_sub_ps(t, _mm512_mul_ps(qt_bf16_widen16(xr + i), cv));
            qt_bf16_store16(dxr + i, _mm512_add_ps(qt_bf16_widen16(dxr + i), u));
        }
#endif
        for (; i < n; i++)
            dxr[i] = R(W(dxr[i]) + (rs * (W(dyr[i]) * qt_b16_scale(w, i, flags)) - W(xr[i]) * coef));
    }
}

void qt_b16_rmsnorm_wgrad_heads(float *dw, const qt_bf16 *dy, const qt_bf16 *x,
                                const float *rstd, int64_t T, int64_t H, int64_t h0, int64_t h1,
                                int64_t n, int64_t xs, int64_t ys)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = h0; h < h1; h++) {
            const int64_t r = t * H + h;
            const qt_bf16 *xr = x + r * xs, *dyr = dy + r * ys;
            const float rs = rstd[r];
            for (int64_t i = 0; i < n; i++) dw[i] = dw[i] + W(dyr[i]) * (W(xr[i]) * rs);
        }
}

/* ------------------------------------------------------------------ gated norm */

/* Column of element 0 of value head j's z in a qkvz row (gated_rmsnorm.c's qt_grn_zcol). */
static int64_t qt_b16_zcol(int64_t j, int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    const int64_t r = hv / hk;
    return (j / r) * (2 * dk + 2 * r * dv) + 2 * dk + r * dv + (j % r) * dv;
}

static int64_t qt_b16_qkvz_w(int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    return hk * (2 * dk + 2 * (hv / hk) * dv);
}

/* Rows (t, j) are o's rows of dv in order (row r = t*hv + j): four at a time share
 * qt_b16_sumsq4's four chains; each row's sum is serial in increasing i as the kernel's. */
void qt_b16_gated_rmsnorm_fwd(qt_bf16 *y, float *rstd, const qt_bf16 *o, const qt_bf16 *qkvz,
                              const float *w, int64_t T, int64_t hk, int64_t dk, int64_t hv,
                              int64_t dv, float eps)
{
    const int64_t wq = qt_b16_qkvz_w(hk, dk, hv, dv), R = T * hv;
    float ss4[4];
    for (int64_t r = 0; r < R; r++) {
        const int64_t t = r / hv, j = r % hv;
        const qt_bf16 *x = o + r * dv, *z = qkvz + t * wq + qt_b16_zcol(j, hk, dk, hv, dv);
        qt_bf16 *yr = y + r * dv;
        const float rs = qt_b16_row_rstd(ss4, o, r, R, dv, dv, eps);
        rstd[r] = rs;
        for (int64_t i = 0; i < dv; i++) yr[i] = R(((W(x[i]) * rs) * w[i]) * QT_SILU(W(z[i])));
    }
}

/* Backward, four rows (t, j) at a time: a vectorisable pass per row writes dqkvz's z columns
 * and keeps silu(z) and the dot's terms n*((dy*w)*silu(z)) (the kernel's values: the same
 * expressions); the four dots are summed as four serial chains in increasing i; a second
 * pass per row writes d_o from the kept silu(z) (the kernel recomputes it: the same value). */
void qt_b16_gated_rmsnorm_bwd(qt_bf16 *d_o, qt_bf16 *dqkvz, const float *rstd,
                              const qt_bf16 *dy, const qt_bf16 *o, const qt_bf16 *qkvz,
                              const float *w, int64_t T, int64_t hk, int64_t dk, int64_t hv,
                              int64_t dv)
{
    const int64_t wq = qt_b16_qkvz_w(hk, dk, hv, dv), R = T * hv;
    float sl[4][QT_B16_GRN_DV], term[4][QT_B16_GRN_DV], dot[4];
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        const int64_t g = R - r0 < 4 ? R - r0 : 4;
        for (int64_t h = 0; h < g; h++) {
            const int64_t r = r0 + h, zc = (r / hv) * wq + qt_b16_zcol(r % hv, hk, dk, hv, dv);
            const qt_bf16 *x = o + r * dv, *dyr = dy + r * dv, *z = qkvz + zc;
            qt_bf16 *dz = dqkvz + zc;
            const float rs = rstd[r];
            float *slh = sl[h], *th = term[h];
            for (int64_t i = 0; i < dv; i++) {
                const float xi = W(x[i]), zi = W(z[i]), di = W(dyr[i]);
                const float n = xi * rs, sg = QT_SIGMOID(zi), s = QT_SILU(zi);
                dz[i] = R(W(dz[i]) + (di * (n * w[i])) * (sg * (1.0f + zi * (1.0f - sg))));
                slh[i] = s;
                th[i] = n * ((di * w[i]) * s);
            }
        }
        if (g == 4) {
            float a = 0, b = 0, c = 0, e = 0;
            for (int64_t i = 0; i < dv; i++)
                a = a + term[0][i], b = b + term[1][i], c = c + term[2][i], e = e + term[3][i];
            dot[0] = a, dot[1] = b, dot[2] = c, dot[3] = e;
        } else {
            for (int64_t h = 0; h < g; h++) {
                float a = 0;
                for (int64_t i = 0; i < dv; i++) a = a + term[h][i];
                dot[h] = a;
            }
        }
        for (int64_t h = 0; h < g; h++) {
            const int64_t r = r0 + h;
            const qt_bf16 *x = o + r * dv, *dyr = dy + r * dv;
            qt_bf16 *dx = d_o + r * dv;
            const float rs = rstd[r], m = dot[h] / (float)dv, *slh = sl[h];
            for (int64_t i = 0; i < dv; i++) {
                const float dn = (W(dyr[i]) * w[i]) * slh[i];
                dx[i] = R(W(dx[i]) + rs * (dn - (W(x[i]) * rs) * m));
            }
        }
    }
}

void qt_b16_gated_rmsnorm_wgrad_heads(float *dw, const float *rstd, const qt_bf16 *dy,
                                      const qt_bf16 *o, const qt_bf16 *qkvz, int64_t S,
                                      int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                      int64_t j0, int64_t j1)
{
    const int64_t wq = qt_b16_qkvz_w(hk, dk, hv, dv);
    for (int64_t t = 0; t < S; t++)
        for (int64_t j = j0; j < j1; j++) {
            const int64_t e0 = (t * hv + j) * dv;
            const qt_bf16 *z = qkvz + t * wq + qt_b16_zcol(j, hk, dk, hv, dv);
            const float rs = rstd[t * hv + j];
            for (int64_t i = 0; i < dv; i++)
                dw[i] = dw[i] + (W(dy[e0 + i]) * (W(o[e0 + i]) * rs)) * QT_SILU(W(z[i]));
        }
}

/* ------------------------------------------------------------------ MoE combine */

void qt_b16_moe_combine_fwd(qt_bf16 *out, const qt_bf16 *p, const qt_bf16 *y,
                            const int32_t *kidx, int64_t T, int64_t k, int64_t d)
{
    float o[QT_B16_COLS];
    for (int64_t t = 0; t < T; t++)
        for (int64_t c0 = 0; c0 < d; c0 += QT_B16_COLS) {
            const int64_t m = d - c0 < QT_B16_COLS ? d - c0 : QT_B16_COLS;
            for (int64_t i = 0; i < m; i++) o[i] = 0;
            for (int64_t s = 0; s < k; s++) {
                if (kidx && kidx[t * k + s] < 0) continue;
                const float w = W(p[t * k + s]);
                const qt_bf16 *yr = y + (t * k + s) * d + c0;
                for (int64_t i = 0; i < m; i++) o[i] += w * W(yr[i]);
            }
            int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
            for (; i + 16 <= m; i += 16)
                qt_bf16_store16(out + t * d + c0 + i, _mm512_loadu_ps(o + i));
#endif
            for (; i < m; i++) out[t * d + c0 + i] = R(o[i]);
        }
}

/* d[i] = bf16(W(d[i]) + w * W(g[i])) for i < n: sixteen lanes at a time where the build
 * has AVX-512BW (bf16.h), the same multiply, add and rounding per element. */
static void qt_b16_add_scaled(qt_bf16 *d, float w, const qt_bf16 *g, int64_t n)
{
    int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
    const __m512 wv = _mm512_set1_ps(w);
    for (; i + 16 <= n; i += 16)
        qt_bf16_store16(d + i, _mm512_add_ps(qt_bf16_widen16(d + i),
                                             _mm512_mul_ps(wv, qt_bf16_widen16(g + i))));
#endif
    for (; i < n; i++) d[i] = R(W(d[i]) + w * W(g[i]));
}

/* The dot of g with four slots' rows y0..y3 (d apart) at once, each serial in increasing i. */
static void qt_b16_gdot4(float acc[4], const qt_bf16 *g, const qt_bf16 *const y[4], int64_t d)
{
    float a = 0, b = 0, c = 0, e = 0;
    for (int64_t i = 0; i < d; i++) {
        const float gi = W(g[i]);
        a += gi * W(y[0][i]), b += gi * W(y[1][i]), c += gi * W(y[2][i]), e += gi * W(y[3][i]);
    }
    acc[0] = a, acc[1] = b, acc[2] = c, acc[3] = e;
}

void qt_b16_moe_combine_bwd(qt_bf16 *dp, qt_bf16 *dy, const qt_bf16 *dout, const qt_bf16 *p,
                            const qt_bf16 *y, const int32_t *kidx, int64_t T, int64_t k,
                            int64_t d)
{
    for (int64_t t = 0; t < T; t++) {
        const qt_bf16 *g = dout + t * d;
        int64_t act[4], na = 0; /* the next kept slots, their sums taken four at a time */
        float acc4[4];
        for (int64_t s = 0; s < k; s++) {
            if (kidx && kidx[t * k + s] < 0) continue;
            const float w = W(p[t * k + s]);
            const qt_bf16 *yr = y + (t * k + s) * d;
            qt_bf16 *dyr = dy + (t * k + s) * d;
            float acc = 0;
            if (na == 0) { /* gather up to four kept slots from s on */
                for (int64_t q = s; q < k && na < 4; q++)
                    if (!kidx || kidx[t * k + q] >= 0) act[na++] = q;
                if (na == 4) {
                    const qt_bf16 *const ys4[4] = {y + (t * k + act[0]) * d, y + (t * k + act[1]) * d,
                                                   y + (t * k + act[2]) * d, y + (t * k + act[3]) * d};
                    qt_b16_gdot4(acc4, g, ys4, d);
                } else {
                    na = 0;
                }
            }
            if (na > 0) {
                acc = acc4[4 - na];
                na--;
            } else {
                for (int64_t i = 0; i < d; i++) acc += W(g[i]) * W(yr[i]);
            }
            qt_b16_add_scaled(dyr, w, g, d);
            dp[t * k + s] = R(W(dp[t * k + s]) + acc);
        }
    }
}

/* The pointwise kinds below compute QT_B16_RUN fp32 results at a time into a stack buffer (a
 * loop gcc vectorises, the inline math included) and round the run with qt_bf16_from_f32_n
 * (sixteen lanes per instruction, bf16.h): the same expression and one rounding per
 * element. A run reads its inputs before it writes, so an output may be its own input. */
#define QT_B16_RUN 256

static int64_t qt_b16_run(int64_t n, int64_t i0)
{
    return n - i0 < QT_B16_RUN ? n - i0 : QT_B16_RUN;
}

void qt_b16_swiglu_fwd(qt_bf16 *h, const qt_bf16 *a, const qt_bf16 *u, int64_t n)
{
    float t[QT_B16_RUN];
    for (int64_t i0 = 0; i0 < n; i0 += QT_B16_RUN) {
        const int64_t m = qt_b16_run(n, i0);
        for (int64_t i = 0; i < m; i++) t[i] = QT_SILU(W(a[i0 + i])) * W(u[i0 + i]);
        qt_bf16_from_f32_n(h + i0, t, m);
    }
}

void qt_b16_swiglu_bwd(qt_bf16 *da, qt_bf16 *du, const qt_bf16 *dh, const qt_bf16 *a,
                       const qt_bf16 *u, int64_t n)
{
    float ta[QT_B16_RUN], tu[QT_B16_RUN];
    for (int64_t i0 = 0; i0 < n; i0 += QT_B16_RUN) {
        const int64_t m = qt_b16_run(n, i0);
        for (int64_t j = 0; j < m; j++) {
            const int64_t i = i0 + j;
            const float ai = W(a[i]), hi = W(dh[i]);
            const float sp = QT_SIGMOID(ai), sm = QT_SIGMOID(-ai);
            const float dsilu = sp * (1.0f + ai * sm);
            ta[j] = W(da[i]) + (hi * W(u[i])) * dsilu;
            tu[j] = W(du[i]) + hi * QT_SILU(ai);
        }
        qt_bf16_from_f32_n(da + i0, ta, m);
        qt_bf16_from_f32_n(du + i0, tu, m);
    }
}

/* Offset of the gate of element i of row t (elementwise.c's qt_gate_index). */
static int64_t qt_b16_gate_index(int64_t t, int64_t i, int64_t n, int mode, int64_t hd)
{
    if (mode == QT_GATE_ROW) return t;
    const int64_t h = i / hd;
    return t * 2 * n + h * 2 * hd + hd + (i - h * hd);
}

void qt_b16_sigmoid_gate_fwd(qt_bf16 *y, const qt_bf16 *x, const qt_bf16 *gate, int64_t T,
                             int64_t n, int mode, int64_t hd)
{
    float ty[QT_B16_RUN];
    for (int64_t t = 0; t < T; t++) {
        if (mode == QT_GATE_ROW) {
            const float sp = QT_SIGMOID(W(gate[t]));
            for (int64_t i0 = 0; i0 < n; i0 += QT_B16_RUN) {
                const int64_t m = qt_b16_run(n, i0);
                for (int64_t i = 0; i < m; i++) ty[i] = W(x[t * n + i0 + i]) * sp;
                qt_bf16_from_f32_n(y + t * n + i0, ty, m);
            }
            continue;
        }
        for (int64_t h = 0; h * hd < n; h++) {
            const int64_t o = t * n + h * hd, w = n - h * hd < hd ? n - h * hd : hd;
            const qt_bf16 *g = gate + qt_b16_gate_index(t, h * hd, n, mode, hd);
            for (int64_t j0 = 0; j0 < w; j0 += QT_B16_RUN) {
                const int64_t m = qt_b16_run(w, j0);
                for (int64_t j = 0; j < m; j++)
                    ty[j] = W(x[o + j0 + j]) * QT_SIGMOID(W(g[j0 + j]));
                qt_bf16_from_f32_n(y + o + j0, ty, m);
            }
        }
    }
}

void qt_b16_sigmoid_gate_bwd(qt_bf16 *dx, qt_bf16 *dgate, const qt_bf16 *dy, const qt_bf16 *x,
                             const qt_bf16 *gate, int64_t T, int64_t n, int mode, int64_t hd)
{
    float tx[QT_B16_RUN], tg[QT_B16_RUN];
    for (int64_t t = 0; t < T; t++) {
        if (mode == QT_GATE_ROW) {
            const float g = W(gate[t]), sp = QT_SIGMOID(g), sm = QT_SIGMOID(-g);
            float dot = 0;
            for (int64_t i = 0; i < n; i++) dot = dot + W(dy[t * n + i]) * W(x[t * n + i]);
            for (int64_t i0 = 0; i0 < n; i0 += QT_B16_RUN) {
                const int64_t m = qt_b16_run(n, i0);
                for (int64_t i = 0; i < m; i++)
                    tx[i] = W(dx[t * n + i0 + i]) + W(dy[t * n + i0 + i]) * sp;
                qt_bf16_from_f32_n(dx + t * n + i0, tx, m);
            }
            dgate[t] = R(W(dgate[t]) + dot * (sp * sm));
            continue;
        }
        for (int64_t h = 0; h * hd < n; h++) {
            const int64_t o = t * n + h * hd, w = n - h * hd < hd ? n - h * hd : hd;
            const int64_t go = qt_b16_gate_index(t, h * hd, n, mode, hd);
            for (int64_t j0 = 0; j0 < w; j0 += QT_B16_RUN) {
                const int64_t m = qt_b16_run(w, j0);
                for (int64_t jj = 0; jj < m; jj++) {
                    const int64_t j = j0 + jj;
                    const float gj = W(gate[go + j]), sp = QT_SIGMOID(gj), sm = QT_SIGMOID(-gj);
                    const float dyj = W(dy[o + j]);
                    tx[jj] = W(dx[o + j]) + dyj * sp;
                    tg[jj] = W(dgate[go + j]) + (dyj * W(x[o + j])) * (sp * sm);
                }
                qt_bf16_from_f32_n(dx + o + j0, tx, m);
                qt_bf16_from_f32_n(dgate + go + j0, tg, m);
            }
        }
    }
}
/* ------------------------------------------------------------------ cross entropy rows */

/* The row's max (*m) over V widened logits; 1 when the row holds an inf or a NaN. With
 * finite values the max is one value whatever the order of the comparisons but for the sign
 * of a zero max, which changes no exponential (l - (+-0) is l, or +-0 for l = +-0: exp 1), no
 * lse (+-0 + log(sum), log(sum) >= +0) and no loss: so sixteen lanes at a time give the fp32
 * kernel's values. */
static int qt_b16_xent_max(float *m, const qt_bf16 *l, int64_t V)
{
    int64_t v = 0;
    unsigned bad = 0;
    float mx = W(l[0]);
#ifdef QT_BF16_HAVE_V16
    if (V >= 16) {
        __m512 mv = qt_bf16_widen16(l);
        __m256i ex = _mm256_setzero_si256();
        const __m256i e = _mm256_set1_epi16(0x7f80);
        for (; v + 16 <= V; v += 16) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(l + v));
            ex = _mm256_or_si256(ex, _mm256_cmpeq_epi16(_mm256_and_si256(h, e), e));
            mv = _mm512_max_ps(mv, qt_bf16_widen16(l + v));
        }
        bad = !_mm256_testz_si256(ex, ex);
        mx = _mm512_reduce_max_ps(mv);
    }
#endif
    for (; v < V; v++) {
        const float x = W(l[v]);
        bad |= (l[v] & 0x7f80u) == 0x7f80u;
        mx = x > mx ? x : mx;
    }
    *m = mx;
    return bad != 0;
}

/* g[v] = QT_EXP(l[v] - m) for the V widened logits (eight lanes: qt_expf_v8, the same bits). */
static void qt_b16_xent_exp(float *g, const qt_bf16 *l, float m, int64_t V)
{
    int64_t v = 0;
#ifdef QT_BF16_HAVE_V16
    for (; v + 16 <= V; v += 16) {
        const __m512 x = qt_bf16_widen16(l + v);
        const qt_mi_f8 lo = (qt_mi_f8)_mm512_castps512_ps256(x) - m;
        const qt_mi_f8 hi = (qt_mi_f8)_mm512_extractf32x8_ps(x, 1) - m;
        const qt_mi_f8 elo = qt_expf_v8(lo), ehi = qt_expf_v8(hi);
        memcpy(g + v, &elo, sizeof elo);
        memcpy(g + v + 8, &ehi, sizeof ehi);
    }
#endif
    for (; v < V; v++) g[v] = QT_EXP(W(l[v]) - m);
}

/* dl[v] = bf16((g[v] * inv) * c) (zc: the z form's factor) times sc (sc0: none). */
static void qt_b16_xent_store(qt_bf16 *dl, const float *g, float inv, int zc, float c, int sc0,
                              float sc, int64_t V)
{
    int64_t v = 0;
#ifdef QT_BF16_HAVE_V16
    const __m512 vi = _mm512_set1_ps(inv), vc = _mm512_set1_ps(c), vs = _mm512_set1_ps(sc);
    for (; v + 16 <= V; v += 16) {
        __m512 d = _mm512_mul_ps(_mm512_loadu_ps(g + v), vi);
        if (zc) d = _mm512_mul_ps(d, vc);
        if (sc0) d = _mm512_mul_ps(d, vs);
        qt_bf16_store16(dl + v, d);
    }
#endif
    for (; v < V; v++) {
        float d = g[v] * inv;
        if (zc) d = d * c;
        if (sc0) d = d * sc;
        dl[v] = R(d);
    }
}

int qt_b16_xent_row(float *acc, float *zacc, qt_bf16 *dl, const qt_bf16 *l, int32_t tg,
                    int64_t V, float z, int sc0, float sc, float *g)
{
    float m;
    if (V < 1 || qt_b16_xent_max(&m, l, V)) return -1;
    qt_b16_xent_exp(g, l, m, V);
    float s = 0;
    for (int64_t v = 0; v < V; v++) s = s + g[v];
    const float lse = m + QT_LOG(s), inv = 1.0f / s;
    if (tg < 0 || tg >= V) { /* no target: no loss, a zero row (scaled as in fp32) */
        const qt_bf16 zero = R(sc0 ? 0.0f * sc : 0.0f);
        for (int64_t v = 0; v < V; v++) dl[v] = zero;
        return 0;
    }
    const int zc = z != 0.0f;
    const float c = zc ? 1.0f + 2.0f * z * lse : 1.0f;
    qt_b16_xent_store(dl, g, inv, zc, c, sc0, sc, V);
    float d = g[tg] * inv;
    if (zc) d = d * c;
    d = d - 1.0f;
    if (sc0) d = d * sc;
    dl[tg] = R(d);
    if (zc) {
        const float zt = z * lse * lse;
        *acc = *acc + ((lse - W(l[tg])) + zt);
        *zacc = *zacc + zt;
    } else {
        *acc = *acc + (lse - W(l[tg]));
    }
    return 0;
}
/* ------------------------------------------------------------------ rotary rows */

void qt_b16_rope(qt_bf16 *y, const qt_bf16 *x, const float *table, const int32_t *pos,
                 int64_t T, int64_t H, int64_t hd, int64_t R, int bwd)
{
    const int64_t half = R / 2;
    float o[QT_B16_ROPE_HD];
    for (int64_t t = 0; t < T; t++) {
        const float *cs = table + (pos ? (int64_t)pos[t] : t) * half * 2;
        for (int64_t h = 0; h < H; h++) {
            const qt_bf16 *xr = x + (t * H + h) * hd;
            qt_bf16 *yr = y + (t * H + h) * hd;
            if (bwd)
                for (int64_t i = 0; i < half; i++) {
                    const float c = cs[2 * i], s = cs[2 * i + 1];
                    const float g1 = W(xr[i]), g2 = W(xr[i + half]);
                    o[i] = W(yr[i]) + (g1 * c + g2 * s);
                    o[i + half] = W(yr[i + half]) + (g2 * c - g1 * s);
                }
            else
                for (int64_t i = 0; i < half; i++) {
                    const float c = cs[2 * i], s = cs[2 * i + 1];
                    const float x1 = W(xr[i]), x2 = W(xr[i + half]);
                    o[i] = x1 * c - x2 * s;
                    o[i + half] = x2 * c + x1 * s;
                }
            qt_bf16_from_f32_n(yr, o, 2 * half);
            /* the unrotated channels: widened, added (bwd) or copied, rounded */
            if (bwd) qt_bf16_acc_n(yr + R, xr + R, hd - R);
            else qt_bf16_copy_n(yr + R, xr + R, hd - R);
        }
    }
}
#endif
