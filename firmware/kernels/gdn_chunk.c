/* gdn_chunk.c - the gated delta rule in chunked (WY) form, forward and backward
 * (contract: gdn_chunk.h, qt_ops.h QT_OP_GDN_CORE_* with a7 = 1).
 *
 * Chunk math (one sequence, one value head j, key head h = j/r; tokens i, m local to the
 * chunk, 0 <= i, m < L; qh_i, kh_i normalised rows as in gdn_core.h; S0 = state at the
 * chunk start):
 *   G_i = g_0 + ... + g_i (increasing)        e_i = exp(G_i)
 *   Dec[i,m] = exp(G_i - G_m) for m <= i only (the upper triangle is never formed, so no
 *   exponent is ever positive when g <= 0)    wl_m = exp(G_{L-1} - G_m)
 *   KK[i,m] = kh_i.kh_m, QK[i,m] = qh_i.kh_m, A[i,m] = beta_i*(Dec[i,m]*KK[i,m]) (m < i)
 *   P0_i = S0^T kh_i                          RHS_i = beta_i*(v_i - e_i*P0_i)
 *   (I + A) Delta = RHS                       (forward substitution, m increasing)
 *   O_i = e_i*(S0^T qh_i) + sum_{m<=i} (Dec[i,m]*QK[i,m]) Delta_m
 *   S_end = e_{L-1}*S0 + sum_m (kh_m*wl_m) Delta_m^T
 * Unrolling the recurrence gives delta_i = beta_i*(v_i - e_i S0^T kh_i - sum_{m<i}
 * Dec[i,m] KK[i,m] delta_m), which is the triangular system above: Delta is the recurrent
 * form's delta, and equals the notes' V_new = U - W S0 with U = (I+A)^-1 (beta v) and
 * W = (I+A)^-1 (beta e kh). Solving for Delta directly costs L^2*Dv/2 instead of forming
 * U and W (L^2*(Dk+Dv)/2) and W S0 (L*Dk*Dv), and gives the backward one solve to reverse.
 *
 * Backward of one chunk, given dO_i and dSe = dL/dS_end (carried from the next chunk):
 *   S_end: dDelta_m  = wl_m*(dSe^T kh_m);  dkh_m = wl_m*(dSe Delta_m);
 *          zeta_m = kh_m.(wl_m*dSe Delta_m): dG_{L-1} += e_{L-1}<dSe,S0> + sum_m zeta_m,
 *          dG_m -= zeta_m;  dS0 = e_{L-1}*dSe.
 *   O:     dDelta_m += sum_{i>=m} (Dec[i,m]*QK[i,m]) dO_i;  dP[i,m] = dO_i.Delta_m;
 *          dQK[i,m] = dP*Dec[i,m];  dDec[i,m] = dP*QK[i,m];
 *          y_i = e_i*(S0 dO_i): dqh_i = y_i, dG_i += qh_i.y_i;  dS0 += (e_i qh_i) dO_i^T.
 *   solve: (I + A)^T dRHS = dDelta (backward substitution, m decreasing; for each m the
 *          terms i > m in increasing i);  dA[i,m] = -dRHS_i.Delta_m (m < i);
 *          dbeta_i += dA*(Dec*KK);  dKK[i,m] = (dA*beta_i)*Dec;  dDec[i,m] += (dA*beta_i)*KK.
 *   RHS:   dv_i = beta_i*dRHS_i;  dbeta_i += dRHS_i.(v_i - e_i P0_i);
 *          dP0_i = -(beta_i*e_i)*dRHS_i;  dG_i += dP0_i.P0_i;  dkh_i += S0 dP0_i;
 *          dS0 += kh_i dP0_i^T.
 *   dots:  dqh_i += sum_{m<=i} dQK[i,m] kh_m;  dkh_t += sum_{m<t} dKK[t,m] kh_m
 *          + sum_{i>t} dKK[i,t] kh_i + sum_{i>=t} dQK[i,t] qh_i.
 *   decay: w = dDec[i,m]*Dec[i,m] (m < i; the diagonal is the constant 1): dG_i += w,
 *          dG_m -= w;  then dg_m = sum_{i>=m} dG_i (i decreasing);  dS (carried) = dS0.
 *   Then the l2norm and q scale backward exactly as gdn_core.c, into dc.
 *
 * Fixed orders (none depends on anything but the shapes and the chunk size):
 *  - dot products (over Dk or Dv) use 8 interleaved lanes (lane = index mod 8, each in
 *    increasing index) combined by a fixed pairwise tree;
 *  - matrix products accumulate over their inner index in increasing order, starting from
 *    the term written first in the formulas above (e.g. O_i starts at e_i*(S0^T qh_i),
 *    then adds m = 0..i; dS0 starts at e_{L-1}*dSe, then adds per i: the q term, then the
 *    P0 term); rows are blocked only for locality, which never reorders a sum;
 *  - value heads in increasing j, chunks increasing (forward) / decreasing (backward).
 * Nothing crosses a sequence: each starts from S0 = 0 and dS = 0.
 *
 * Packed documents (the *_pos forms; pos[row] = the row's position in its document, 0 at
 * a document start): the recurrent form's decay is 0 at a start p (gdn_core.c
 * qt_gdn_decay), so the state before p is dropped and g_p is never used. Within a chunk
 * the tokens split into segments at the starts (a sequence's first token is not one: its
 * state before is zero, so a one-document sequence keeps the plain form's bits); seg(i) is
 * the last start at or before
 * local token i in the chunk (-1 when the chunk holds none up to i: the segment continues
 * the previous chunk). The same formulas then hold with
 *   G_i = sum of g over (seg(i), i] (G_p = 0 at a start p; g_p never enters);
 *   e_i = exp(G_i) when seg(i) = -1, else 0 (S0 belongs to an earlier document);
 *   Dec[i,m], QK[i,m], KK[i,m], A[i,m] = 0 for m < seg(i) (pairs from different
 *   documents: the intra-chunk attention is split by segment);
 *   wl_m = exp(G_{L-1} - G_m) when seg(L-1) <= m, else 0.
 * Every masked term is an exact zero, so the forward and backward above run unchanged,
 * and the reverse cumulative sum dg_m = sum_{i>=m} dG_i restarts at each start (a start's
 * own g gets nothing, as in the recurrent form). A chunk holding a start carries no state
 * (e_{L-1} = 0), forward or backward. With pos = NULL nothing is masked and every
 * operation is the plain form's, bit for bit.
 */
#include <stddef.h>
#include "qt_real.h"
#include "kernels/gdn_chunk.h"
#include "kernels/gdn_common.h"

/* Per-chunk work buffers; the forward uses the first group only. */
typedef struct qt_gdn_chunk_ws {
    qt_real *qh, *kh, *p0, *dl, *dec, *qk, *kk, *am, *gc, *e, *wl;
    qt_real *ds, *dq, *dk, *ddl, *dr, *dqk, *dkk, *ddec, *dgc, *db;
} qt_gdn_chunk_ws;

static qt_gdn_chunk_ws qt_gdn_chunk_layout(qt_real *p, const qt_gdn_dims *d, int bwd)
{
    qt_gdn_chunk_ws w;
    int64_t C = d->rows;
    w.qh = p;
    w.kh = w.qh + C * d->dk;
    w.p0 = w.kh + C * d->dk;
    w.dl = w.p0 + C * d->dv;
    w.dec = w.dl + C * d->dv;
    w.qk = w.dec + C * C;
    w.kk = w.qk + C * C;
    w.am = w.kk + C * C;
    w.gc = w.am + C * C;
    w.e = w.gc + C;
    w.wl = w.e + C;
    p = w.wl + C;
    w.ds = w.dq = w.dk = w.ddl = w.dr = w.dqk = w.dkk = w.ddec = w.dgc = w.db = 0;
    if (!bwd) return w;
    w.ds = p;
    w.dq = w.ds + d->dkdv;
    w.dk = w.dq + C * d->dk;
    w.ddl = w.dk + C * d->dk;
    w.dr = w.ddl + C * d->dv;
    w.dqk = w.dr + C * d->dv;
    w.dkk = w.dqk + C * C;
    w.ddec = w.dkk + C * C;
    w.dgc = w.ddec + C * C;
    w.db = w.dgc + C;
    return w;
}

#define QT_GC_LANES 8

/* a.b over n in the fixed 8-lane order. */
static qt_real qt_gc_dot(const qt_real *restrict a, const qt_real *restrict b, int64_t n)
{
    qt_real l[QT_GC_LANES];
    for (int i = 0; i < QT_GC_LANES; i++) l[i] = QT_R(0.0);
    int64_t x0 = 0;
    for (; x0 + QT_GC_LANES <= n; x0 += QT_GC_LANES)
        for (int i = 0; i < QT_GC_LANES; i++) l[i] += a[x0 + i] * b[x0 + i];
    for (int i = 0; x0 + i < n; i++) l[i] += a[x0 + i] * b[x0 + i];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* y += s*x over n. Elementwise, so blocking keeps the bits; the fixed 8-wide inner loop
 * is what lets gcc vectorise at -O2 (its cheap cost model adds no alias checks). */
static inline void qt_gc_axpy(qt_real *restrict y, qt_real s, const qt_real *restrict x,
                              int64_t n)
{
    int64_t i0 = 0;
    for (; i0 + QT_GC_LANES <= n; i0 += QT_GC_LANES)
        for (int i = 0; i < QT_GC_LANES; i++) y[i0 + i] += s * x[i0 + i];
    for (; i0 < n; i0++) y[i0] += s * x[i0];
}

/* y = s*x over n (blocked as qt_gc_axpy). */
static inline void qt_gc_scale(qt_real *restrict y, qt_real s, const qt_real *restrict x,
                               int64_t n)
{
    int64_t i0 = 0;
    for (; i0 + QT_GC_LANES <= n; i0 += QT_GC_LANES)
        for (int i = 0; i < QT_GC_LANES; i++) y[i0 + i] = s * x[i0 + i];
    for (; i0 < n; i0++) y[i0] = s * x[i0];
}

/* Y[i] = sum_kk X[i][kk] * M[kk] (kk increasing, from 0) for L rows: Y rows of n reals at
 * stride ys, X rows of dk reals, M [dk][n]. Full 4-row x 8-column tiles accumulate in
 * registers; the remainder goes one element at a time. Every element sees the same
 * sequence of operations either way, so the tiling never changes a bit. */
static void qt_gc_rows_times(qt_real *restrict y, int64_t ys, const qt_real *restrict x,
                             const qt_real *restrict m, int64_t L, int64_t dk, int64_t n)
{
    int64_t i0 = 0;
    for (; i0 + 4 <= L; i0 += 4) {
        const qt_real *x0 = x + i0 * dk;
        int64_t c0 = 0;
        for (; c0 + QT_GC_LANES <= n; c0 += QT_GC_LANES) {
            qt_real acc[4][QT_GC_LANES];
            for (int b = 0; b < 4; b++)
                for (int l = 0; l < QT_GC_LANES; l++) acc[b][l] = QT_R(0.0);
            for (int64_t kk = 0; kk < dk; kk++) {
                const qt_real *mr = m + kk * n + c0;
                for (int b = 0; b < 4; b++) {
                    qt_real xv = x0[b * dk + kk];
                    for (int l = 0; l < QT_GC_LANES; l++) acc[b][l] += xv * mr[l];
                }
            }
            for (int b = 0; b < 4; b++)
                for (int l = 0; l < QT_GC_LANES; l++) y[(i0 + b) * ys + c0 + l] = acc[b][l];
        }
        for (; c0 < n; c0++)
            for (int b = 0; b < 4; b++) {
                qt_real acc = QT_R(0.0);
                for (int64_t kk = 0; kk < dk; kk++) acc += x0[b * dk + kk] * m[kk * n + c0];
                y[(i0 + b) * ys + c0] = acc;
            }
    }
    for (; i0 < L; i0++)
        for (int64_t c0 = 0; c0 < n; c0++) {
            qt_real acc = QT_R(0.0);
            for (int64_t kk = 0; kk < dk; kk++) acc += x[i0 * dk + kk] * m[kk * n + c0];
            y[i0 * ys + c0] = acc;
        }
}

/* Whether local token i of the chunk starting at token t0 starts a document (pr: the
 * chunk's positions, NULL: no packing). A sequence's first token is not counted: its state
 * before is zero anyway, and leaving it out keeps a one-document sequence on the plain
 * form's bits. */
static inline int qt_gc_start(const int32_t *pr, int64_t t0, int64_t i)
{
    return pr && pr[i] == 0 && t0 + i > 0;
}

/* Per-chunk quantities shared by the forward and the backward's recomputation (one code
 * path, so the backward sees the forward's bits): qh, kh, G, e, wl, Dec, QK, KK, A, P0
 * and Delta for tokens [t0, t0+L) of sequence s, value head j, from the state s0; pr: the
 * chunk's positions (NULL: no packing), masked as the header says. */
static void qt_gc_prepare(const qt_gdn_chunk_ws *w, const qt_real *s0, const qt_real *c,
                          const qt_real *g, const qt_real *beta, const int32_t *pr,
                          const qt_real *rq, const qt_real *rk, qt_real qscale, int64_t s,
                          int64_t j, int64_t t0, int64_t L, const qt_gdn_dims *d)
{
    int64_t h = j / d->r, dk = d->dk, dv = d->dv, C = d->rows;
    qt_real run = QT_R(0.0);
    int64_t sg = -1; /* seg(i) */
    for (int64_t i = 0; i < L; i++) {
        int64_t row = s * d->S + t0 + i;
        const qt_real *q = c + row * d->cc + h * dk;
        const qt_real *k = c + row * d->cc + d->hk * dk + h * dk;
        qt_real rqv = rq[row * d->hk + h], rkv = rk[row * d->hk + h];
        for (int64_t x = 0; x < dk; x++) {
            w->qh[i * dk + x] = (q[x] * rqv) * qscale;
            w->kh[i * dk + x] = k[x] * rkv;
        }
        if (qt_gc_start(pr, t0, i)) {
            sg = i;
            run = QT_R(0.0);
        } else {
            run = i ? run + g[row * d->hv + j] : g[row * d->hv + j];
        }
        w->gc[i] = run;
        w->e[i] = sg < 0 ? QT_EXP(run) : QT_R(0.0);
    }
    for (int64_t m = 0; m < L; m++)
        w->wl[m] = sg <= m ? QT_EXP(w->gc[L - 1] - w->gc[m]) : QT_R(0.0);
    sg = -1;
    for (int64_t i = 0; i < L; i++) {
        qt_real bt = beta[(s * d->S + t0 + i) * d->hv + j];
        if (qt_gc_start(pr, t0, i)) sg = i;
        for (int64_t m = 0; m < sg; m++) { /* another document: exact zeros */
            w->dec[i * C + m] = QT_R(0.0);
            w->qk[i * C + m] = QT_R(0.0);
            w->kk[i * C + m] = QT_R(0.0);
            w->am[i * C + m] = QT_R(0.0);
        }
        for (int64_t m = sg < 0 ? 0 : sg; m <= i; m++) {
            qt_real dec = m == i ? QT_R(1.0) : QT_EXP(w->gc[i] - w->gc[m]);
            qt_real kkv = qt_gc_dot(w->kh + i * dk, w->kh + m * dk, dk);
            w->dec[i * C + m] = dec;
            w->qk[i * C + m] = qt_gc_dot(w->qh + i * dk, w->kh + m * dk, dk);
            w->kk[i * C + m] = kkv;
            w->am[i * C + m] = bt * (dec * kkv);
        }
    }
    qt_gc_rows_times(w->p0, dv, w->kh, s0, L, dk, dv);
    for (int64_t i = 0; i < L; i++) {
        int64_t row = s * d->S + t0 + i;
        const qt_real *v = c + row * d->cc + 2 * d->hk * dk + j * dv;
        qt_real bt = beta[row * d->hv + j], e = w->e[i];
        qt_real *dl = w->dl + i * dv;
        const qt_real *p0 = w->p0 + i * dv;
        for (int64_t x = 0; x < dv; x++) dl[x] = bt * (v[x] - e * p0[x]);
        for (int64_t m = 0; m < i; m++) qt_gc_axpy(dl, -w->am[i * C + m], w->dl + m * dv, dv);
    }
}

/* S_end = e_{L-1}*S0 + sum_m (kh_m[kk]*wl_m) Delta_m, row kk at a time. */
static void qt_gc_state_end(qt_real *restrict send, const qt_real *restrict s0,
                            const qt_gdn_chunk_ws *w, int64_t L, const qt_gdn_dims *d)
{
    int64_t dk = d->dk, dv = d->dv;
    qt_real el = w->e[L - 1];
    for (int64_t kk = 0; kk < dk; kk++) {
        qt_real *row = send + kk * dv;
        qt_gc_scale(row, el, s0 + kk * dv, dv);
        for (int64_t m = 0; m < L; m++)
            qt_gc_axpy(row, w->kh[m * dk + kk] * w->wl[m], w->dl + m * dv, dv);
    }
}

void QT_FN(qt_gdn_chunk_fwd_pos)(qt_real *restrict o, qt_real *restrict states,
                                 qt_real *restrict rq, qt_real *restrict rk,
                                 const qt_real *restrict c, const qt_real *restrict g,
                                 const qt_real *restrict beta, const int32_t *restrict pos,
                                 qt_real *restrict scratch, int64_t b, int64_t S, int64_t hk,
                                 int64_t dk, int64_t hv, int64_t dv, int64_t chunk,
                                 qt_real qscale, qt_real l2eps)
{
    if (chunk < 1) return;
    qt_gdn_dims d = qt_gdn_make_dims(S, hk, dk, hv, dv, chunk);
    qt_gdn_chunk_ws w = qt_gdn_chunk_layout(scratch, &d, 0);

    /* rq, rk with gdn_core.c's exact expressions (the saved tensors must not depend on
     * the algorithm). */
    qt_gdn_inv_norms(rq, rk, c, b * S, l2eps, &d);

    for (int64_t s = 0; s < b; s++) {
        for (int64_t j = 0; j < hv; j++) {
            qt_real *base = states + (s * hv + j) * d.nch * d.dkdv;
            for (int64_t x = 0; x < d.dkdv; x++) base[x] = QT_R(0.0);
            for (int64_t n = 0; n < d.nch; n++) {
                const qt_real *s0 = base + n * d.dkdv;
                int64_t t0 = n * chunk, L = S - t0 < chunk ? S - t0 : chunk;
                int64_t row0 = s * S + t0;
                qt_gc_prepare(&w, s0, c, g, beta, pos ? pos + row0 : NULL, rq, rk, qscale, s,
                              j, t0, L, &d);
                qt_real *o0 = o + row0 * hv * dv + j * dv;
                qt_gc_rows_times(o0, hv * dv, w.qh, s0, L, dk, dv);
                for (int64_t i = 0; i < L; i++) {
                    qt_real *oi = o0 + i * hv * dv, e = w.e[i];
                    for (int64_t x = 0; x < dv; x++) oi[x] = e * oi[x];
                    for (int64_t m = 0; m <= i; m++)
                        qt_gc_axpy(oi, w.dec[i * d.rows + m] * w.qk[i * d.rows + m],
                                   w.dl + m * dv, dv);
                }
                if (n + 1 < d.nch) qt_gc_state_end(base + (n + 1) * d.dkdv, s0, &w, L, &d);
            }
        }
    }
}

/* Backward of S_end = e_{L-1} S0 + sum_m wl_m kh_m Delta_m^T, given dSe in ds:
 * dDelta_m = wl_m*(dSe^T kh_m) (dr as temporary), dkh_m = wl_m*(dSe Delta_m), and the
 * decay terms into dgc. Clears dgc and db first. */
static void qt_gc_bwd_state_end(const qt_gdn_chunk_ws *w, const qt_real *ds, const qt_real *s0,
                                int64_t L, int64_t dk, int64_t dv)
{
    for (int64_t i = 0; i < L; i++) {
        w->dgc[i] = QT_R(0.0);
        w->db[i] = QT_R(0.0);
    }
    qt_gc_rows_times(w->dr, dv, w->kh, ds, L, dk, dv);
    qt_real zsum = QT_R(0.0);
    for (int64_t m = 0; m < L; m++) {
        qt_gc_scale(w->ddl + m * dv, w->wl[m], w->dr + m * dv, dv);
        qt_real *dkm = w->dk + m * dk;
        for (int64_t kk = 0; kk < dk; kk++)
            dkm[kk] = w->wl[m] * qt_gc_dot(ds + kk * dv, w->dl + m * dv, dv);
        qt_real z = qt_gc_dot(w->kh + m * dk, dkm, dk);
        w->dgc[m] -= z;
        zsum += z;
    }
    qt_real sds = QT_R(0.0);
    for (int64_t kk = 0; kk < dk; kk++) sds += qt_gc_dot(ds + kk * dv, s0 + kk * dv, dv);
    w->dgc[L - 1] += w->e[L - 1] * sds + zsum;
}

/* Backward of the outputs O: dDelta_m += sum_{i>=m} P[i,m] dO_i; dP; y_i = e_i*(S0 dO_i). */
static void qt_gc_bwd_output(const qt_gdn_chunk_ws *w, const qt_real *s0, const qt_real *do0,
                             int64_t dos, int64_t L, int64_t C, int64_t dk, int64_t dv)
{
    for (int64_t m = 0; m < L; m++)
        for (int64_t i = m; i < L; i++)
            qt_gc_axpy(w->ddl + m * dv, w->dec[i * C + m] * w->qk[i * C + m], do0 + i * dos,
                       dv);
    for (int64_t i = 0; i < L; i++) {
        const qt_real *doi = do0 + i * dos;
        for (int64_t m = 0; m <= i; m++) {
            qt_real dp = qt_gc_dot(doi, w->dl + m * dv, dv);
            w->dqk[i * C + m] = dp * w->dec[i * C + m];
            w->ddec[i * C + m] = dp * w->qk[i * C + m];
        }
        qt_real *dqi = w->dq + i * dk;
        for (int64_t kk = 0; kk < dk; kk++)
            dqi[kk] = w->e[i] * qt_gc_dot(s0 + kk * dv, doi, dv);
        w->dgc[i] += qt_gc_dot(w->qh + i * dk, dqi, dk);
    }
}

/* Backward of the solve: (I + A)^T dRHS = dDelta, m decreasing; dA, then A's factors. */
static void qt_gc_bwd_solve(const qt_gdn_chunk_ws *w, const qt_real *beta, int64_t row0,
                            int64_t j, int64_t L, int64_t C, int64_t hv, int64_t dv)
{
    for (int64_t m = L - 1; m >= 0; m--) {
        qt_real *drm = w->dr + m * dv;
        for (int64_t x = 0; x < dv; x++) drm[x] = w->ddl[m * dv + x];
        for (int64_t i = m + 1; i < L; i++) qt_gc_axpy(drm, -w->am[i * C + m], w->dr + i * dv, dv);
    }
    for (int64_t i = 0; i < L; i++) {
        qt_real bt = beta[(row0 + i) * hv + j];
        for (int64_t m = 0; m < i; m++) {
            qt_real da = -qt_gc_dot(w->dr + i * dv, w->dl + m * dv, dv);
            qt_real dec = w->dec[i * C + m], kkv = w->kk[i * C + m];
            w->db[i] += da * (dec * kkv);
            w->dkk[i * C + m] = (da * bt) * dec;
            w->ddec[i * C + m] += (da * bt) * kkv;
        }
    }
}

/* Backward of the right-hand side: dv, dbeta, dP0 (in place of dRHS), dG, dkh += S0 dP0. */
static void qt_gc_bwd_rhs(qt_real *dc, const qt_gdn_chunk_ws *w, const qt_real *s0,
                          const qt_real *c, const qt_real *beta, int64_t row0, int64_t j,
                          int64_t L, const qt_gdn_dims *d)
{
    int64_t dk = d->dk, dv = d->dv, hv = d->hv;
    for (int64_t i = 0; i < L; i++) {
        int64_t row = row0 + i;
        const qt_real *v = c + row * d->cc + 2 * d->hk * dk + j * dv;
        qt_real *dvr = dc + row * d->cc + 2 * d->hk * dk + j * dv;
        qt_real bt = beta[row * hv + j], e = w->e[i];
        qt_real *dri = w->dr + i * dv;
        const qt_real *p0 = w->p0 + i * dv;
        qt_real *rv = w->ddl + i * dv; /* dDelta_i is dead: reuse for v - e*P0 */
        for (int64_t x = 0; x < dv; x++) {
            dvr[x] += bt * dri[x];
            rv[x] = v[x] - e * p0[x];
        }
        w->db[i] += qt_gc_dot(dri, rv, dv);
        qt_real f = -(bt * e);
        for (int64_t x = 0; x < dv; x++) dri[x] = f * dri[x];
        w->dgc[i] += qt_gc_dot(dri, p0, dv);
        qt_real *dki = w->dk + i * dk;
        for (int64_t kk = 0; kk < dk; kk++) dki[kk] += qt_gc_dot(s0 + kk * dv, dri, dv);
    }
}

/* The dot-product factors into dqh and dkh, then the decays and the reverse cumulative sum
 * of dgc into dg, restarting at each document start (pr: the chunk's positions or NULL; a
 * start's G is the constant 0, so its g gets nothing). */
static void qt_gc_bwd_factors(qt_real *dg, const qt_gdn_chunk_ws *w, const int32_t *pr,
                              int64_t t0, int64_t row0, int64_t j, int64_t L, int64_t C,
                              int64_t hv, int64_t dk)
{
    for (int64_t i = 0; i < L; i++)
        for (int64_t m = 0; m <= i; m++)
            qt_gc_axpy(w->dq + i * dk, w->dqk[i * C + m], w->kh + m * dk, dk);
    for (int64_t t = 0; t < L; t++) {
        qt_real *dkt = w->dk + t * dk;
        for (int64_t m = 0; m < t; m++) qt_gc_axpy(dkt, w->dkk[t * C + m], w->kh + m * dk, dk);
        for (int64_t i = t + 1; i < L; i++)
            qt_gc_axpy(dkt, w->dkk[i * C + t], w->kh + i * dk, dk);
        for (int64_t i = t; i < L; i++) qt_gc_axpy(dkt, w->dqk[i * C + t], w->qh + i * dk, dk);
    }
    for (int64_t i = 0; i < L; i++)
        for (int64_t m = 0; m < i; m++) {
            qt_real wv = w->ddec[i * C + m] * w->dec[i * C + m];
            w->dgc[i] += wv;
            w->dgc[m] -= wv;
        }
    qt_real acc = QT_R(0.0);
    for (int64_t m = L - 1; m >= 0; m--) {
        if (qt_gc_start(pr, t0, m)) {
            acc = QT_R(0.0);
            continue;
        }
        acc += w->dgc[m];
        dg[(row0 + m) * hv + j] += acc;
    }
}

/* One chunk's backward (the derivation at the top); w holds qt_gc_prepare's results for
 * this chunk and w->ds holds dSe on entry, dS0 on return. The stages run in the order of
 * the derivation, each a function above; they share only w and the arguments. */
static void qt_gc_chunk_bwd(qt_real *dc, qt_real *dg, qt_real *dbeta, const qt_gdn_chunk_ws *w,
                            const qt_real *s0, const qt_real *d_o, const qt_real *c,
                            const qt_real *beta, const int32_t *pr, const qt_real *rq,
                            const qt_real *rk,
                            qt_real qscale, int64_t s, int64_t j, int64_t t0, int64_t L,
                            const qt_gdn_dims *d)
{
    int64_t h = j / d->r, dk = d->dk, dv = d->dv, C = d->rows, hv = d->hv;
    int64_t row0 = s * d->S + t0;
    const qt_real *do0 = d_o + row0 * hv * dv + j * dv;
    int64_t dos = hv * dv;
    qt_real *ds = w->ds;

    qt_gc_bwd_state_end(w, ds, s0, L, dk, dv);
    qt_gc_bwd_output(w, s0, do0, dos, L, C, dk, dv);
    qt_gc_bwd_solve(w, beta, row0, j, L, C, hv, dv);
    qt_gc_bwd_rhs(dc, w, s0, c, beta, row0, j, L, d);

    /* dS0 = e_{L-1}*dSe + sum_i ((e_i qh_i) dO_i^T + kh_i dP0_i^T), row kk at a time */
    qt_real el = w->e[L - 1];
    for (int64_t kk = 0; kk < dk; kk++) {
        qt_real *row = ds + kk * dv;
        for (int64_t x = 0; x < dv; x++) row[x] = el * row[x];
        for (int64_t i = 0; i < L; i++) {
            qt_gc_axpy(row, w->e[i] * w->qh[i * dk + kk], do0 + i * dos, dv);
            qt_gc_axpy(row, w->kh[i * dk + kk], w->dr + i * dv, dv);
        }
    }

    qt_gc_bwd_factors(dg, w, pr, t0, row0, j, L, C, hv, dk);

    for (int64_t i = 0; i < L; i++) {
        int64_t row = row0 + i;
        const qt_real *crow = c + row * d->cc;
        qt_real *dcrow = dc + row * d->cc;
        dbeta[row * hv + j] += w->db[i];
        qt_gdn_l2_bwd(dcrow + h * dk, crow + h * dk, w->dq + i * dk, rq[row * d->hk + h],
                     qscale, dk);
        qt_gdn_l2_bwd(dcrow + d->hk * dk + h * dk, crow + d->hk * dk + h * dk, w->dk + i * dk,
                     rk[row * d->hk + h], QT_R(1.0), dk);
    }
}

void QT_FN(qt_gdn_chunk_bwd_pos)(qt_real *restrict dc, qt_real *restrict dg,
                                 qt_real *restrict dbeta, const qt_real *restrict states,
                                 const qt_real *restrict rq, const qt_real *restrict rk,
                                 const qt_real *restrict d_o, const qt_real *restrict c,
                                 const qt_real *restrict g, const qt_real *restrict beta,
                                 const int32_t *restrict pos, qt_real *restrict scratch,
                                 int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                                 int64_t dv, int64_t chunk, qt_real qscale, qt_real l2eps)
{
    (void)l2eps; /* the saved rq, rk already hold it */
    if (chunk < 1) return;
    qt_gdn_dims d = qt_gdn_make_dims(S, hk, dk, hv, dv, chunk);
    qt_gdn_chunk_ws w = qt_gdn_chunk_layout(scratch, &d, 1);

    for (int64_t s = 0; s < b; s++) {
        for (int64_t j = 0; j < hv; j++) {
            const qt_real *base = states + (s * hv + j) * d.nch * d.dkdv;
            for (int64_t x = 0; x < d.dkdv; x++) w.ds[x] = QT_R(0.0);
            for (int64_t n = d.nch - 1; n >= 0; n--) {
                int64_t t0 = n * chunk, L = S - t0 < chunk ? S - t0 : chunk;
                const qt_real *s0 = base + n * d.dkdv;
                const int32_t *pr = pos ? pos + s * S + t0 : NULL;
                qt_gc_prepare(&w, s0, c, g, beta, pr, rq, rk, qscale, s, j, t0, L, &d);
                qt_gc_chunk_bwd(dc, dg, dbeta, &w, s0, d_o, c, beta, pr, rq, rk, qscale, s, j,
                                t0, L, &d);
            }
        }
    }
}

/* The plain forms: no packed documents. */
void QT_FN(qt_gdn_chunk_fwd)(qt_real *o, qt_real *states, qt_real *rq, qt_real *rk,
                             const qt_real *c, const qt_real *g, const qt_real *beta,
                             qt_real *scratch, int64_t b, int64_t S, int64_t hk, int64_t dk,
                             int64_t hv, int64_t dv, int64_t chunk, qt_real qscale,
                             qt_real l2eps)
{
    QT_FN(qt_gdn_chunk_fwd_pos)(o, states, rq, rk, c, g, beta, NULL, scratch, b, S, hk, dk, hv,
                                dv, chunk, qscale, l2eps);
}

void QT_FN(qt_gdn_chunk_bwd)(qt_real *dc, qt_real *dg, qt_real *dbeta, const qt_real *states,
                             const qt_real *rq, const qt_real *rk, const qt_real *d_o,
                             const qt_real *c, const qt_real *g, const qt_real *beta,
                             qt_real *scratch, int64_t b, int64_t S, int64_t hk, int64_t dk,
                             int64_t hv, int64_t dv, int64_t chunk, qt_real qscale,
                             qt_real l2eps)
{
    QT_FN(qt_gdn_chunk_bwd_pos)(dc, dg, dbeta, states, rq, rk, d_o, c, g, beta, NULL, scratch,
                                b, S, hk, dk, hv, dv, chunk, qscale, l2eps);
}
