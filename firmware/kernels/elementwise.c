/* elementwise.c - zero/add/acc, SwiGLU and sigmoid gate kernels (see elementwise.h).
 * Invariants: 1 - sigmoid(x) is computed as sigmoid(-x) so gate derivatives keep relative
 * accuracy when the gate saturates; the ROW-mode gate gradient sums in increasing i.
 */
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "elementwise.h"
#include "qt_real.h"
#include "qt_ops.h"
#include "bf16.h"

/* From this many bytes on, the float qt_zero streams its zeros past the caches
 * (non-temporal stores, AVX-512): a buffer this large does not stay in L2 for the op that
 * accumulates into it next, and the streamed stores skip the read-for-ownership of every
 * line (an 8 MiB buffer zeroed then accumulated: 1.28 against 1.53 ms; a 2 MiB one, which the
 * next op still finds in cache, gains nothing: 0.315 against 0.312). Zeros either way. */
#define QT_ZERO_NT_BYTES (4ll << 20)

void QT_FN(qt_zero)(qt_real *y, int64_t n)
{
    int64_t i = 0;
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
    if (n * (int64_t)sizeof *y >= QT_ZERO_NT_BYTES) {
        for (; i < n && ((uintptr_t)(y + i) & 63u); i++) y[i] = 0;
        const __m512 z = _mm512_setzero_ps();
        for (; i + 16 <= n; i += 16) _mm512_stream_ps(y + i, z);
        _mm_sfence();  /* the streamed stores ordered before any later store */
    }
#endif
    for (; i < n; i++) y[i] = 0;
}

#ifndef QT_REAL_DOUBLE
void qt_zero_i32(int32_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = 0;
}
#endif

void QT_FN(qt_add)(qt_real *y, const qt_real *a, const qt_real *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void QT_FN(qt_acc)(qt_real *dst, const qt_real *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = dst[i] + src[i];
}

void QT_FN(qt_swiglu_fwd)(qt_real *h, const qt_real *a, const qt_real *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) h[i] = QT_SILU(a[i]) * u[i];
}

/* d silu(a)/da = sig(a) + a sig(a)(1 - sig(a)) = sig(a) (1 + a sig(-a)). */
void QT_FN(qt_swiglu_bwd_ref)(qt_real *da, qt_real *du, const qt_real *dh, const qt_real *a,
                              const qt_real *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        qt_real sp = QT_SIGMOID(a[i]), sm = QT_SIGMOID(-a[i]);
        qt_real dsilu = sp * (QT_R(1.0) + a[i] * sm);
        da[i] = da[i] + (dh[i] * u[i]) * dsilu;
        du[i] = du[i] + dh[i] * QT_SILU(a[i]);
    }
}

/* [p, p+n) and [q, q+n) share an element. */
static int qt_ew_overlap(const qt_real *p, const qt_real *q, int64_t n)
{
    return (uintptr_t)p < (uintptr_t)(q + n) && (uintptr_t)q < (uintptr_t)(p + n);
}

/* Eight elements at a time in float: sig(a) and silu(a) from one exponential
 * (qt_sigmoid_siluf_v8), sig(-a) from a second; each element the reference's expressions in
 * its order (bit-identical, tested). da is stored before du is read, so da == du (one
 * accumulator for both, ops_bf16_rows.c) adds both increments in the reference's order; any
 * other overlap of the outputs with each other or with the inputs runs the reference, as
 * does the double build (tests). */
void QT_FN(qt_swiglu_bwd)(qt_real *da, qt_real *du, const qt_real *dh, const qt_real *a,
                          const qt_real *u, int64_t n)
{
    int64_t i0 = 0;
#ifndef QT_REAL_DOUBLE
    const int apart = (da == du || !qt_ew_overlap(da, du, n)) && !qt_ew_overlap(da, dh, n) &&
                      !qt_ew_overlap(da, a, n) && !qt_ew_overlap(da, u, n) &&
                      !qt_ew_overlap(du, dh, n) && !qt_ew_overlap(du, a, n) &&
                      !qt_ew_overlap(du, u, n);
    for (; apart && i0 + 8 <= n; i0 += 8) {
        qt_mi_f8 av, dhv, uv, dav, duv, sp, sl;
        memcpy(&av, a + i0, sizeof av);
        memcpy(&dhv, dh + i0, sizeof dhv);
        memcpy(&uv, u + i0, sizeof uv);
        memcpy(&dav, da + i0, sizeof dav);
        qt_sigmoid_siluf_v8(av, &sp, &sl);
        const qt_mi_f8 sm = qt_sigmoidf_v8(-av);
        const qt_mi_f8 dsilu = sp * (1.0f + av * sm);
        dav = dav + (dhv * uv) * dsilu;
        memcpy(da + i0, &dav, sizeof dav);
        memcpy(&duv, du + i0, sizeof duv);
        duv = duv + dhv * sl;
        memcpy(du + i0, &duv, sizeof duv);
    }
#else
    (void)qt_ew_overlap;
#endif
    QT_FN(qt_swiglu_bwd_ref)(da + i0, du + i0, dh + i0, a + i0, u + i0, n - i0);
}

/* Offset of the gate of element i of row t (HEADS: q_proj layout, ROW: one per row). */
static int64_t qt_gate_index(int64_t t, int64_t i, int64_t n, int mode, int64_t hd)
{
    if (mode == QT_GATE_ROW) return t;
    int64_t h = i / hd;
    return t * 2 * n + h * 2 * hd + hd + (i - h * hd);
}

/* Per row and head (ROW: one gate for the row, computed once), so the inner loops run over
 * contiguous elements and vectorise; each element is the same expression as before. */
void QT_FN(qt_sigmoid_gate_fwd)(qt_real *y, const qt_real *x, const qt_real *gate, int64_t T,
                                int64_t n, int mode, int64_t hd)
{
    for (int64_t t = 0; t < T; t++) {
        if (mode == QT_GATE_ROW) {
            const qt_real sp = QT_SIGMOID(gate[t]);
            for (int64_t i = 0; i < n; i++) y[t * n + i] = x[t * n + i] * sp;
            continue;
        }
        for (int64_t h = 0; h * hd < n; h++) {
            const int64_t o = t * n + h * hd, w = n - h * hd < hd ? n - h * hd : hd;
            const qt_real *g = gate + qt_gate_index(t, h * hd, n, mode, hd);
            for (int64_t j = 0; j < w; j++) y[o + j] = x[o + j] * QT_SIGMOID(g[j]);
        }
    }
}

void QT_FN(qt_sigmoid_gate_bwd)(qt_real *dx, qt_real *dgate, const qt_real *dy,
                                const qt_real *x, const qt_real *gate, int64_t T, int64_t n,
                                int mode, int64_t hd)
{
    for (int64_t t = 0; t < T; t++) {
        if (mode == QT_GATE_ROW) {
            qt_real g = gate[t], sp = QT_SIGMOID(g), sm = QT_SIGMOID(-g);
            qt_real dot = 0;
            for (int64_t i = 0; i < n; i++) {
                dx[t * n + i] = dx[t * n + i] + dy[t * n + i] * sp;
                dot = dot + dy[t * n + i] * x[t * n + i];
            }
            dgate[t] = dgate[t] + dot * (sp * sm);
            continue;
        }
        for (int64_t h = 0; h * hd < n; h++) {
            const int64_t o = t * n + h * hd, w = n - h * hd < hd ? n - h * hd : hd;
            const int64_t go = qt_gate_index(t, h * hd, n, mode, hd);
            for (int64_t j = 0; j < w; j++) {
                const qt_real sp = QT_SIGMOID(gate[go + j]), sm = QT_SIGMOID(-gate[go + j]);
                dx[o + j] = dx[o + j] + dy[o + j] * sp;
                dgate[go + j] = dgate[go + j] + (dy[o + j] * x[o + j]) * (sp * sm);
            }
        }
    }
}

#ifndef QT_REAL_DOUBLE
/* The conversion of the bf16 contract (bf16.h: VCVTNEPS2BF16, denormal inputs to the zero
 * of their sign), widened back to a float. */
void qt_round_bf16(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = qt_f32_from_bf16(qt_bf16_from_f32(x[i]));
}
#endif
