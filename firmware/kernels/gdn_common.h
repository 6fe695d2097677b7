/* gdn_common.h - pieces the recurrent (gdn_core.c) and chunked (gdn_chunk.c) forms of the
 * gated delta rule share, so both compute them with the same expressions and orders:
 * the dimension record, the q/k inverse l2 norms, and the l2norm backward.
 * Internal to firmware/kernels: static inline, written against qt_real (qt_real.h), so each
 * including file gets its float or double instance.
 */
#ifndef QT_GDN_COMMON_H
#define QT_GDN_COMMON_H

#include <stdint.h>
#include "qt_real.h"

typedef struct qt_gdn_dims {
    int64_t S, hk, dk, hv, dv, r, cc, chunk, nch, dkdv;
    int64_t rows;              /* rows of a full chunk: min(chunk, S) */
    int scalar;                /* 1: the scalar reference step only (the *_ref kernels) */
    const int32_t *pos;        /* packed documents: position of each row in its document
                                * (NULL: none); the recurrent core starts a document's
                                * state from zero (gdn_core.c qt_gdn_decay) */
} qt_gdn_dims;

/* The dimension record of one (sequence, layer) call: S rows, hk key heads of dk, hv value
 * heads of dv (r = hv / hk value heads share a key head), chunk rows per chunk; pos NULL
 * and scalar 0 (callers set them). */
static inline qt_gdn_dims qt_gdn_make_dims(int64_t S, int64_t hk, int64_t dk, int64_t hv,
                                           int64_t dv, int64_t chunk)
{
    qt_gdn_dims d;
    d.S = S;
    d.hk = hk;
    d.dk = dk;
    d.hv = hv;
    d.dv = dv;
    d.r = hv / hk;
    d.cc = 2 * hk * dk + hv * dv;
    d.chunk = chunk;
    d.nch = (S + chunk - 1) / chunk;
    d.dkdv = dk * dv;
    d.rows = chunk < S ? chunk : S;
    d.scalar = 0;
    d.pos = 0;
    return d;
}

/* rq[row,h] = 1/sqrt(sum q^2 + l2eps), rk likewise, for rows [0, rows) of the conv output
 * c[rows, cc] (q then k channels, key head h at h*dk); sums in increasing i. Writes rq, rk. */
static inline void qt_gdn_inv_norms(qt_real *restrict rq, qt_real *restrict rk,
                                    const qt_real *restrict c, int64_t rows, qt_real l2eps,
                                    const qt_gdn_dims *d)
{
    for (int64_t row = 0; row < rows; row++) {
        const qt_real *crow = c + row * d->cc;
        for (int64_t h = 0; h < d->hk; h++) {
            const qt_real *q = crow + h * d->dk, *k = crow + d->hk * d->dk + h * d->dk;
            qt_real sq = QT_R(0.0), sk = QT_R(0.0);
            for (int64_t i = 0; i < d->dk; i++) sq += q[i] * q[i];
            for (int64_t i = 0; i < d->dk; i++) sk += k[i] * k[i];
            rq[row * d->hk + h] = QT_R(1.0) / QT_SQRT(sq + l2eps);
            rk[row * d->hk + h] = QT_R(1.0) / QT_SQRT(sk + l2eps);
        }
    }
}

/* l2norm backward of one vector x (normalised y = x*r) with upstream dy = dyn*scale:
 * dx = r*(dy - y*(y.dy)); accumulates dx into dst. Dot product in increasing i. */
static inline void qt_gdn_l2_bwd(qt_real *restrict dst, const qt_real *restrict x,
                                 const qt_real *restrict dyn, qt_real r, qt_real scale,
                                 int64_t n)
{
    qt_real dot = QT_R(0.0);
    for (int64_t i = 0; i < n; i++) dot += (x[i] * r) * (dyn[i] * scale);
    for (int64_t i = 0; i < n; i++) dst[i] += r * (dyn[i] * scale - (x[i] * r) * dot);
}

#endif
