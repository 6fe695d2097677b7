/* gdn_core.c - the gated delta rule, forward with chunk checkpoints and backward by
 * per-chunk recomputation (contract: gdn_core.h, qt_ops.h QT_OP_GDN_CORE_*).
 *
 * Invariants:
 *  - every state comes from one set of per-element expressions in one order (qt_gdn_step;
 *    the AVX-512 column-block sweeps below apply the same ones, columns never mix), in the
 *    forward and in the backward's recomputation, so recomputed states carry the forward's
 *    bits and the chunk size cannot change any result;
 *  - loops over a state run row kk (Dk) outside, column (Dv) inside and contiguous; every
 *    per-column sum therefore runs in increasing kk, per-row sums over Dv use the fixed
 *    8-lane order of QT_GDN_BLOCKED, sums over Dk alone (norms) run in increasing i;
 *  - the forward has no scratch: the running state of chunk n lives in checkpoint slot
 *    n+1 (which it becomes); the last chunk runs in its own slot, which is then restored by
 *    re-running the previous chunk (at most one extra chunk per sequence and head); the
 *    blocked forward (Dv a multiple of 64) keeps a column block in slot 0 and zeroes it after;
 *  - nothing crosses a sequence: every sequence starts from S_0 = 0 and dS = 0.
 */
#include <stddef.h>
#include "qt_real.h"
#include "kernels/gdn_core.h"
#include "kernels/gdn_common.h"

/* Per-row sums over Dv run in QT_GDN_LANES interleaved lanes (lane = x mod 8, each lane in
 * increasing x) combined by a fixed pairwise tree: a fixed order, and one the compiler can
 * vectorise without -ffast-math. Column updates are blocked the same way only so that
 * they vectorise at -O2; blocking elementwise updates does not change their bits. */
#define QT_GDN_LANES 8
#define QT_GDN_BLOCKED(x, l, n, body)                                            \
    do {                                                                         \
        int64_t x##0 = 0;                                                        \
        for (; x##0 + QT_GDN_LANES <= (n); x##0 += QT_GDN_LANES)                 \
            for (int64_t l = 0; l < QT_GDN_LANES; l++) {                         \
                int64_t x = x##0 + l;                                            \
                body                                                             \
            }                                                                    \
        for (int64_t l = 0; x##0 + l < (n); l++) {                               \
            int64_t x = x##0 + l;                                                \
            body                                                                 \
        }                                                                        \
    } while (0)

static inline qt_real qt_gdn_lanes_sum(const qt_real *l)
{
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static inline void qt_gdn_lanes_zero(qt_real *l)
{
    for (int i = 0; i < QT_GDN_LANES; i++) l[i] = QT_R(0.0);
}

/* Normalised key and scaled normalised query of one (row, key head). */
static void qt_gdn_load_qk(qt_real *restrict qh, qt_real *restrict kh,
                           const qt_real *restrict crow, qt_real rq, qt_real rk,
                           qt_real qscale, int64_t h, const qt_gdn_dims *d)
{
    const qt_real *q = crow + h * d->dk;
    const qt_real *k = crow + d->hk * d->dk + h * d->dk;
    for (int64_t i = 0; i < d->dk; i++) {
        qh[i] = (q[i] * rq) * qscale;
        kh[i] = k[i] * rk;
    }
}

#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
#include <immintrin.h>
#define QT_GDN_XB 64 /* columns per block of the vector step: 4 zmm of delta and of o */

/* qt_gdn_step for dv a multiple of 64, in column blocks of 64: every column runs exactly the
 * scalar step's operations in the same order (its delta over kk increasing, then its state
 * update and output over kk increasing; columns never mix), so the bits are the scalar
 * step's. The u loops are unrolled so a block's delta and o stay in registers, and its
 * 64-column slice of the state (dk rows of 256 bytes) stays in L1 between the two passes. */
static void qt_gdn_step_v(float *restrict st, float *restrict o, float *restrict delta,
                          const float *restrict qh, const float *restrict kh,
                          const float *restrict v, float a, float bt, int64_t dk, int64_t dv)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(bt);
    for (int64_t x0 = 0; x0 < dv; x0 += QT_GDN_XB) {
        __m512 dl[4], ov[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) dl[u] = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < dk; kk++) {
            const float *sr = st + kk * dv + x0;
            const __m512 kv = _mm512_set1_ps(kh[kk]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) { /* delta += (a * s) * kv */
                const __m512 as = _mm512_mul_ps(va, _mm512_loadu_ps(sr + 16 * u));
                dl[u] = _mm512_add_ps(dl[u], _mm512_mul_ps(as, kv));
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) { /* delta = bt * (v - delta) */
            dl[u] = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + x0 + 16 * u), dl[u]));
            _mm512_storeu_ps(delta + x0 + 16 * u, dl[u]);
            ov[u] = _mm512_setzero_ps();
        }
        for (int64_t kk = 0; kk < dk; kk++) {
            float *sr = st + kk * dv + x0;
            const __m512 kv = _mm512_set1_ps(kh[kk]), qv = _mm512_set1_ps(qh[kk]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) { /* s = a*s + kv*delta; o += s * qv */
                __m512 sn = _mm512_add_ps(_mm512_mul_ps(va, _mm512_loadu_ps(sr + 16 * u)),
                                          _mm512_mul_ps(kv, dl[u]));
                _mm512_storeu_ps(sr + 16 * u, sn);
                ov[u] = _mm512_add_ps(ov[u], _mm512_mul_ps(sn, qv));
            }
        }
        if (o) {
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) _mm512_storeu_ps(o + x0 + 16 * u, ov[u]);
        }
    }
}
#endif

/* One token on st in place: st = a*st + kh delta^T with delta = beta*(v - (a*st)^T kh);
 * leaves delta in delta[], and when o is not NULL writes o = st^T qh. a*st is recomputed
 * in the second pass rather than stored, which gives the same bits and keeps st the only
 * pointer into the state (so the loops vectorise without alias checks). With AVX-512 and
 * dv a multiple of 64 the explicit vector form above runs it (same bits). */
static void qt_gdn_step(qt_real *restrict st, qt_real *restrict o, qt_real *restrict delta,
                        const qt_real *restrict qh, const qt_real *restrict kh,
                        const qt_real *restrict v, qt_real a, qt_real bt,
                        const qt_gdn_dims *d)
{
    int64_t dk = d->dk, dv = d->dv;
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
    if (!d->scalar && dv % QT_GDN_XB == 0) {
        qt_gdn_step_v(st, o, delta, qh, kh, v, a, bt, dk, dv);
        return;
    }
#endif
    for (int64_t x = 0; x < dv; x++) delta[x] = QT_R(0.0);
    for (int64_t kk = 0; kk < dk; kk++) {
        const qt_real *srow = st + kk * dv;
        qt_real kv = kh[kk];
        QT_GDN_BLOCKED(x, l, dv, { delta[x] += (a * srow[x]) * kv; });
    }
    for (int64_t x = 0; x < dv; x++) delta[x] = bt * (v[x] - delta[x]);
    if (o)
        for (int64_t x = 0; x < dv; x++) o[x] = QT_R(0.0);
    for (int64_t kk = 0; kk < dk; kk++) {
        qt_real *srow = st + kk * dv;
        qt_real kv = kh[kk];
        if (o) {
            qt_real qv = qh[kk];
            QT_GDN_BLOCKED(x, l, dv, {
                srow[x] = a * srow[x] + kv * delta[x];
                o[x] += srow[x] * qv;
            });
        } else {
            QT_GDN_BLOCKED(x, l, dv, { srow[x] = a * srow[x] + kv * delta[x]; });
        }
    }
}

/* The decay a = exp(g) of token row, value head j; 0 at the first token of a packed
 * document: S' = 0*S drops the previous document's state, and the backward's
 * dS_prev = a*dS' and dg += da*a carry nothing across the boundary (the state before a
 * document is the constant 0, so its g has no gradient, as at a sequence start). */
static inline qt_real qt_gdn_decay(const qt_real *g, int64_t row, int64_t j,
                                   const qt_gdn_dims *d)
{
    return d->pos && d->pos[row] == 0 ? QT_R(0.0) : QT_EXP(g[row * d->hv + j]);
}

/* Runs tokens [t0, t0+len) of sequence s, value head j, on the state st in place;
 * writes their outputs when o is not NULL. qh, kh: Dk reals; delta: Dv reals. */
static void qt_gdn_run_chunk(qt_real *st, qt_real *o, const qt_real *c, const qt_real *g,
                             const qt_real *beta, const qt_real *rq, const qt_real *rk,
                             qt_real qscale, int64_t s, int64_t j, int64_t t0, int64_t len,
                             qt_real *qh, qt_real *kh, qt_real *delta,
                             const qt_gdn_dims *d)
{
    int64_t h = j / d->r;
    for (int64_t t = t0; t < t0 + len; t++) {
        int64_t row = s * d->S + t;
        const qt_real *crow = c + row * d->cc;
        qt_gdn_load_qk(qh, kh, crow, rq[row * d->hk + h], rk[row * d->hk + h], qscale, h, d);
        qt_gdn_step(st, o ? o + row * d->hv * d->dv + j * d->dv : 0, delta, qh, kh,
                    crow + 2 * d->hk * d->dk + j * d->dv, qt_gdn_decay(g, row, j, d),
                    beta[row * d->hv + j], d);
    }
}

static void qt_gdn_copy(qt_real *restrict dst, const qt_real *restrict src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

static void qt_gdn_zero(qt_real *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = QT_R(0.0);
}

#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
/* The forward in column blocks (AVX-512, Dv a multiple of 64): the columns of the state never
 * mix (pred, delta, the update and o are per column), so a block of QT_GDN_FB columns runs
 * through every token of a sequence while its Dk x 64 floats stay in L1 (32 KiB at Dk 128),
 * and one sweep over the rows per token does the update and output of token t and the pred
 * of token t+1:
 *   S_t[kk] = ab[kk] + kh_t[kk]*delta_t;  o_t += S_t[kk]*qh_t[kk];
 *   ab[kk] = a_{t+1}*S_t[kk];  pred_{t+1} += ab[kk]*kh_{t+1}[kk]
 * where ab holds a_t*S_{t-1}, the value the scalar step computes twice. Every element gets
 * the scalar step's operations in its order (sums over kk increasing from +0), so the bits
 * are qt_gdn_step's; the block's buffer is checkpoint slot 0 of the head (zeroed after). */
#define QT_GDN_FB 64 /* columns per block: 4 zmm of pred and of o */
#define QT_GDN_FBV (QT_GDN_FB / 16) /* vectors per block row */

static inline __attribute__((always_inline)) void
qt_gdn_fwd_sweep_v(float *restrict ab, float *restrict o, float *restrict sout, int64_t ld,
                   __m512 pr[QT_GDN_FBV], const __m512 dl[QT_GDN_FBV], const float *restrict kh,
                   const float *restrict qh, const float *restrict kn, float an, int64_t dk)
{
    const __m512 van = _mm512_set1_ps(an);
    __m512 ov[QT_GDN_FBV];
    for (int u = 0; u < QT_GDN_FBV; u++) ov[u] = pr[u] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < dk; kk++) {
        float *br = ab + kk * QT_GDN_FB;
        const __m512 kv = _mm512_set1_ps(kh[kk]), qv = _mm512_set1_ps(qh[kk]);
        const __m512 nv = kn ? _mm512_set1_ps(kn[kk]) : kv;
#pragma GCC unroll 4
        for (int u = 0; u < QT_GDN_FBV; u++) {
            const __m512 sn =
                _mm512_add_ps(_mm512_loadu_ps(br + 16 * u), _mm512_mul_ps(kv, dl[u]));
            ov[u] = _mm512_add_ps(ov[u], _mm512_mul_ps(sn, qv));
            if (sout) _mm512_storeu_ps(sout + kk * ld + 16 * u, sn);
            if (kn) {
                const __m512 as = _mm512_mul_ps(van, sn);
                _mm512_storeu_ps(br + 16 * u, as);
                pr[u] = _mm512_add_ps(pr[u], _mm512_mul_ps(as, nv));
            }
        }
    }
    for (int u = 0; u < QT_GDN_FBV; u++) _mm512_storeu_ps(o + 16 * u, ov[u]);
}

/* Columns [x0, x0+QT_GDN_FB) of sequence s, value head j, through all S tokens from S_0 = 0:
 * writes their o columns and the checkpoints' columns (slots 1..nch-1); uses slot 0 as the
 * contiguous block buffer. qh, kh: 2*Dk reals each (this token's and the next). */
static void qt_gdn_fwd_block_v(float *restrict sth, float *restrict o, const float *restrict c,
                               const float *restrict g, const float *restrict beta,
                               const float *restrict rq, const float *restrict rk,
                               float qscale, int64_t s, int64_t j, int64_t x0,
                               float *restrict qh, float *restrict kh, const qt_gdn_dims *d)
{
    const int64_t dk = d->dk, dv = d->dv, h = j / d->r;
    float *ab = sth;
    __m512 pr[QT_GDN_FBV], dl[QT_GDN_FBV];
    int64_t row = s * d->S;
    qt_gdn_load_qk(qh, kh, c + row * d->cc, rq[row * d->hk + h], rk[row * d->hk + h], qscale,
                   h, d);
    float an = qt_gdn_decay(g, row, j, d);
    const __m512 va = _mm512_set1_ps(an);
    for (int u = 0; u < QT_GDN_FBV; u++) pr[u] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < dk; kk++) { /* S_0 = 0: ab = a_0*0, pred_0 = sum ab*kh */
        const __m512 kv = _mm512_set1_ps(kh[kk]);
        for (int u = 0; u < QT_GDN_FBV; u++) {
            const __m512 as = _mm512_mul_ps(va, _mm512_setzero_ps());
            _mm512_storeu_ps(ab + kk * QT_GDN_FB + 16 * u, as);
            pr[u] = _mm512_add_ps(pr[u], _mm512_mul_ps(as, kv));
        }
    }
    for (int64_t t = 0; t < d->S; t++, row++) {
        float *qc = qh + (t & 1) * dk, *kc = kh + (t & 1) * dk;
        float *qn = qh + ((t + 1) & 1) * dk, *kn = kh + ((t + 1) & 1) * dk;
        const float *v = c + row * d->cc + 2 * d->hk * dk + j * dv + x0;
        const __m512 vb = _mm512_set1_ps(beta[row * d->hv + j]);
        for (int u = 0; u < QT_GDN_FBV; u++) /* delta = bt * (v - pred) */
            dl[u] = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * u), pr[u]));
        const int last = t + 1 == d->S;
        if (!last) {
            qt_gdn_load_qk(qn, kn, c + (row + 1) * d->cc, rq[(row + 1) * d->hk + h],
                           rk[(row + 1) * d->hk + h], qscale, h, d);
            an = qt_gdn_decay(g, row + 1, j, d);
        }
        float *orow = o + row * d->hv * dv + j * dv + x0;
        if (last) /* separate calls, so each inlined sweep has its branches resolved */
            qt_gdn_fwd_sweep_v(ab, orow, 0, dv, pr, dl, kc, qc, 0, an, dk);
        else if ((t + 1) % d->chunk == 0)
            qt_gdn_fwd_sweep_v(ab, orow, sth + (t + 1) / d->chunk * d->dkdv + x0, dv, pr, dl,
                               kc, qc, kn, an, dk);
        else
            qt_gdn_fwd_sweep_v(ab, orow, 0, dv, pr, dl, kc, qc, kn, an, dk);
    }
}

/* The blocked forward over every sequence and head (checkpoint slot 0 zeroed after each). */
static void qt_gdn_fwd_blocked_v(float *restrict o, float *restrict states,
                                 const float *restrict rq, const float *restrict rk,
                                 const float *restrict c, const float *restrict g,
                                 const float *restrict beta, int64_t b, float qscale,
                                 const qt_gdn_dims *d)
{
    float qh[2 * QT_GDN_CORE_MAX_DIM], kh[2 * QT_GDN_CORE_MAX_DIM];
    if (d->S < 1) return;
    for (int64_t s = 0; s < b; s++)
        for (int64_t j = 0; j < d->hv; j++) {
            float *sth = states + (s * d->hv + j) * d->nch * d->dkdv;
            for (int64_t x0 = 0; x0 < d->dv; x0 += QT_GDN_FB)
                qt_gdn_fwd_block_v(sth, o, c, g, beta, rq, rk, qscale, s, j, x0, qh, kh, d);
            qt_gdn_zero(sth, d->dkdv);
        }
}
#define QT_GDN_FWD_BLOCKED 1
#endif

static void qt_gdn_core_fwd_impl(qt_real *restrict o, qt_real *restrict states,
                                 qt_real *restrict rq, qt_real *restrict rk,
                                 const qt_real *restrict c, const qt_real *restrict g,
                                 const qt_real *restrict beta, int64_t b, int64_t S, int64_t hk,
                                 int64_t dk, int64_t hv, int64_t dv, int64_t chunk,
                                 qt_real qscale, qt_real l2eps, int scalar,
                                 const int32_t *pos)
{
    qt_real qh[QT_GDN_CORE_MAX_DIM], kh[QT_GDN_CORE_MAX_DIM], delta[QT_GDN_CORE_MAX_DIM];
    if (dk > QT_GDN_CORE_MAX_DIM || dv > QT_GDN_CORE_MAX_DIM || chunk < 1) return;
    qt_gdn_dims d = qt_gdn_make_dims(S, hk, dk, hv, dv, chunk);
    d.scalar = scalar;
    d.pos = pos;

    qt_gdn_inv_norms(rq, rk, c, b * S, l2eps, &d);
#ifdef QT_GDN_FWD_BLOCKED
    if (!scalar && dv % QT_GDN_FB == 0) {
        qt_gdn_fwd_blocked_v(o, states, rq, rk, c, g, beta, b, qscale, &d);
        return;
    }
#endif

    for (int64_t s = 0; s < b; s++) {
        for (int64_t j = 0; j < hv; j++) {
            qt_real *base = states + (s * hv + j) * d.nch * d.dkdv;
            qt_gdn_zero(base, d.dkdv);
            for (int64_t n = 0; n < d.nch; n++) {
                qt_real *cur = base + n * d.dkdv;
                int64_t t0 = n * chunk, len = S - t0 < chunk ? S - t0 : chunk;
                if (n + 1 < d.nch) {
                    qt_gdn_copy(cur + d.dkdv, cur, d.dkdv);
                    qt_gdn_run_chunk(cur + d.dkdv, o, c, g, beta, rq, rk, qscale, s, j, t0,
                                     len, qh, kh, delta, &d);
                    continue;
                }
                qt_gdn_run_chunk(cur, o, c, g, beta, rq, rk, qscale, s, j, t0, len, qh, kh,
                                 delta, &d);
                if (n == 0) {
                    qt_gdn_zero(cur, d.dkdv);
                } else {
                    qt_gdn_copy(cur, cur - d.dkdv, d.dkdv);
                    qt_gdn_run_chunk(cur, 0, c, g, beta, rq, rk, qscale, s, j, t0 - chunk,
                                     chunk, qh, kh, delta, &d);
                }
            }
        }
    }
}

/* Backward, first pass over row kk of the state (S' = a*S_prev, S_t = S' + kh delta^T):
 * dS += qh do^T; returns dqh[kk] = S_t do and dkh[kk] = dS delta; ddelta += dS^T kh.
 * Separate restrict arguments so the compiler knows the rows do not overlap. */
static void qt_gdn_bwd_row_b(qt_real *restrict dsrow, qt_real *restrict ddelta,
                             qt_real *restrict dqk, const qt_real *restrict srow,
                             const qt_real *restrict delta, const qt_real *restrict dor,
                             qt_real a, qt_real kv, qt_real qv, int64_t dv)
{
    qt_real laq[QT_GDN_LANES], lak[QT_GDN_LANES];
    qt_gdn_lanes_zero(laq);
    qt_gdn_lanes_zero(lak);
    QT_GDN_BLOCKED(x, l, dv, {
        qt_real st = a * srow[x] + kv * delta[x];
        qt_real dsv = dsrow[x] + qv * dor[x];
        laq[l] += st * dor[x];
        dsrow[x] = dsv;
        lak[l] += dsv * delta[x];
        ddelta[x] += dsv * kv;
    });
    dqk[0] = qt_gdn_lanes_sum(laq);
    dqk[1] = qt_gdn_lanes_sum(lak);
}

/* Backward, second pass over row kk: dS' = dS + kh dpred^T; returns S'dpred (row kk) and
 * <dS', S_prev> (row kk); dS becomes dS_prev = a*dS'. */
static void qt_gdn_bwd_row_c(qt_real *restrict dsrow, qt_real *restrict kr,
                             const qt_real *restrict srow, const qt_real *restrict dpred,
                             qt_real a, qt_real kv, int64_t dv)
{
    qt_real lak[QT_GDN_LANES], lar[QT_GDN_LANES];
    qt_gdn_lanes_zero(lak);
    qt_gdn_lanes_zero(lar);
    QT_GDN_BLOCKED(x, l, dv, {
        qt_real dsp = dsrow[x] + kv * dpred[x];
        lak[l] += (a * srow[x]) * dpred[x];
        lar[l] += dsp * srow[x];
        dsrow[x] = a * dsp;
    });
    kr[0] = qt_gdn_lanes_sum(lak);
    kr[1] = qt_gdn_lanes_sum(lar);
}

/* pred += (a*srow) * kv, the forward's first-pass expression. */
static void qt_gdn_pred_row(qt_real *restrict pred, const qt_real *restrict srow, qt_real a,
                            qt_real kv, int64_t dv)
{
    QT_GDN_BLOCKED(x, l, dv, { pred[x] += (a * srow[x]) * kv; });
}

#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__) && defined(__AVX512DQ__)
/* The backward's passes over the state for Dv = 16*nv (nv 4 or 8: Dv 64 or 128) in explicit
 * AVX-512, whole rows at a time so the running ddelta / pred columns stay in registers.
 * Every element runs the scalar pass's expressions; a row's 8-lane sums take the low then
 * the high half of each 16-column vector, i.e. lane l = x mod 8 in increasing x, as
 * QT_GDN_BLOCKED does; the lanes are then combined by qt_gdn_lanes_sum. Same bits. */
static inline float qt_gdn_lanes_sum_v(__m256 v)
{
    float l[QT_GDN_LANES];
    _mm256_storeu_ps(l, v);
    return qt_gdn_lanes_sum(l);
}

static inline __m256 qt_gdn_lanes_add(__m256 acc, __m512 t)
{
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(t));
    return _mm256_add_ps(acc, _mm512_extractf32x8_ps(t, 1));
}

/* pred = sum over kk of (a*sp[kk]) * kh[kk], from +0 (qt_gdn_pred_row over every row). */
static inline __attribute__((always_inline)) void
qt_gdn_pred_v(float *restrict pred, const float *restrict sp, float a,
              const float *restrict kh, int64_t dk, const int nv)
{
    __m512 pr[8];
    const __m512 va = _mm512_set1_ps(a);
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) pr[u] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < dk; kk++) {
        const float *sr = sp + kk * 16 * nv;
        const __m512 kv = _mm512_set1_ps(kh[kk]);
#pragma GCC unroll 8
        for (int u = 0; u < nv; u++) {
            const __m512 as = _mm512_mul_ps(va, _mm512_loadu_ps(sr + 16 * u));
            pr[u] = _mm512_add_ps(pr[u], _mm512_mul_ps(as, kv));
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) _mm512_storeu_ps(pred + 16 * u, pr[u]);
}

/* qt_gdn_bwd_row_b over every row kk; ddelta (zero before) is written at the end. */
static inline __attribute__((always_inline)) void
qt_gdn_bwd_b_v(float *restrict ds, float *restrict ddelta, float *restrict dqh,
               float *restrict dkh, const float *restrict sp, const float *restrict delta,
               const float *restrict dor, float a, const float *restrict kh,
               const float *restrict qh, int64_t dk, const int nv)
{
    __m512 dd[8];
    const __m512 va = _mm512_set1_ps(a);
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) dd[u] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < dk; kk++) {
        const float *sr = sp + kk * 16 * nv;
        float *dr = ds + kk * 16 * nv;
        const __m512 kv = _mm512_set1_ps(kh[kk]), qv = _mm512_set1_ps(qh[kk]);
        __m256 laq = _mm256_setzero_ps(), lak = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int u = 0; u < nv; u++) {
            const __m512 de = _mm512_loadu_ps(delta + 16 * u), dov = _mm512_loadu_ps(dor + 16 * u);
            const __m512 st = _mm512_add_ps(_mm512_mul_ps(va, _mm512_loadu_ps(sr + 16 * u)),
                                            _mm512_mul_ps(kv, de));
            const __m512 dsv = _mm512_add_ps(_mm512_loadu_ps(dr + 16 * u), _mm512_mul_ps(qv, dov));
            laq = qt_gdn_lanes_add(laq, _mm512_mul_ps(st, dov));
            _mm512_storeu_ps(dr + 16 * u, dsv);
            lak = qt_gdn_lanes_add(lak, _mm512_mul_ps(dsv, de));
            dd[u] = _mm512_add_ps(dd[u], _mm512_mul_ps(dsv, kv));
        }
        dqh[kk] = qt_gdn_lanes_sum_v(laq);
        dkh[kk] = qt_gdn_lanes_sum_v(lak);
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) _mm512_storeu_ps(ddelta + 16 * u, dd[u]);
}

/* qt_gdn_bwd_row_c for row kk: kr[0] = S'dpred, kr[1] = <dS', S_prev>; dS <- a*dS'. */
static inline __attribute__((always_inline)) void
qt_gdn_bwd_c_v(float *restrict dr, float *restrict kr, const float *restrict sr,
               const float *restrict dpred, float a, float kh, const int nv)
{
    const __m512 va = _mm512_set1_ps(a), kv = _mm512_set1_ps(kh);
    __m256 lak = _mm256_setzero_ps(), lar = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) {
        const __m512 sv = _mm512_loadu_ps(sr + 16 * u), dp = _mm512_loadu_ps(dpred + 16 * u);
        const __m512 dsp = _mm512_add_ps(_mm512_loadu_ps(dr + 16 * u), _mm512_mul_ps(kv, dp));
        lak = qt_gdn_lanes_add(lak, _mm512_mul_ps(_mm512_mul_ps(va, sv), dp));
        lar = qt_gdn_lanes_add(lar, _mm512_mul_ps(dsp, sv));
        _mm512_storeu_ps(dr + 16 * u, _mm512_mul_ps(va, dsp));
    }
    kr[0] = qt_gdn_lanes_sum_v(lak);
    kr[1] = qt_gdn_lanes_sum_v(lar);
}
#define QT_GDN_BWD_V 1
#endif

/* Vectors of 16 per state row for the vector backward (0: the scalar rows), and a call with
 * NV a compile-time 4 or 8. */
#ifdef QT_GDN_BWD_V
#define QT_GDN_BWD_NV(d)                                                                   \
    (!(d)->scalar && ((d)->dv == 64 || (d)->dv == 128) ? (int)((d)->dv / 16) : 0)
#define QT_GDN_BWD_CALL(nv, call)                                                          \
    do {                                                                                   \
        if ((nv) == 4) {                                                                   \
            enum { NV = 4 };                                                               \
            call;                                                                          \
        } else {                                                                           \
            enum { NV = 8 };                                                               \
            call;                                                                          \
        }                                                                                  \
    } while (0)
#else
#define QT_GDN_BWD_NV(d) 0
#define QT_GDN_BWD_CALL(nv, call) ((void)0)
#endif

static void qt_gdn_core_bwd_impl(qt_real *restrict dc, qt_real *restrict dg,
                                 qt_real *restrict dbeta, const qt_real *restrict states,
                                 const qt_real *restrict rq, const qt_real *restrict rk,
                                 const qt_real *restrict d_o, const qt_real *restrict c,
                                 const qt_real *restrict g, const qt_real *restrict beta,
                                 qt_real *restrict scratch, int64_t b, int64_t S, int64_t hk,
                                 int64_t dk, int64_t hv, int64_t dv, int64_t chunk,
                                 qt_real qscale, int scalar, const int32_t *pos)
{
    if (chunk < 1) return;
    qt_gdn_dims d = qt_gdn_make_dims(S, hk, dk, hv, dv, chunk);
    d.scalar = scalar;
    d.pos = pos;
    qt_real *slots = scratch;                       /* slot i: state before token i */
    qt_real *ds = scratch + chunk * d.dkdv;         /* dL/dS after the current token */
    qt_real *qh = ds + d.dkdv, *kh = qh + dk, *dqh = kh + dk, *dkh = dqh + dk;
    qt_real *pred = dkh + dk, *delta = pred + dv, *ddelta = delta + dv, *dpred = ddelta + dv;

    for (int64_t s = 0; s < b; s++) {
        for (int64_t j = 0; j < hv; j++) {
            int64_t h = j / d.r;
            const qt_real *base = states + (s * hv + j) * d.nch * d.dkdv;
            qt_gdn_zero(ds, d.dkdv);
            for (int64_t n = d.nch - 1; n >= 0; n--) {
                int64_t t0 = n * chunk, len = S - t0 < chunk ? S - t0 : chunk;
                qt_gdn_copy(slots, base + n * d.dkdv, d.dkdv);
                for (int64_t i = 0; i + 1 < len; i++) {
                    int64_t row = s * S + t0 + i;
                    const qt_real *crow = c + row * d.cc;
                    qt_gdn_load_qk(qh, kh, crow, rq[row * hk + h], rk[row * hk + h], qscale,
                                   h, &d);
                    qt_gdn_copy(slots + (i + 1) * d.dkdv, slots + i * d.dkdv, d.dkdv);
                    qt_gdn_step(slots + (i + 1) * d.dkdv, 0, delta, qh, kh,
                                crow + 2 * hk * dk + j * dv, qt_gdn_decay(g, row, j, &d),
                                beta[row * hv + j], &d);
                }
                for (int64_t i = len - 1; i >= 0; i--) {
                    int64_t row = s * S + t0 + i;
                    const qt_real *crow = c + row * d.cc;
                    const qt_real *v = crow + 2 * hk * dk + j * dv;
                    const qt_real *dor = d_o + row * hv * dv + j * dv;
                    const qt_real *sp = slots + i * d.dkdv;
                    qt_real a = qt_gdn_decay(g, row, j, &d), bt = beta[row * hv + j];
                    qt_gdn_load_qk(qh, kh, crow, rq[row * hk + h], rk[row * hk + h], qscale,
                                   h, &d);
                    /* the vector passes (Dv 64 or 128, same bits) or the scalar rows */
                    const int nv = QT_GDN_BWD_NV(&d);
                    /* pred and delta exactly as the forward step computed them */
                    if (nv) {
                        QT_GDN_BWD_CALL(nv, qt_gdn_pred_v(pred, sp, a, kh, dk, NV));
                    } else {
                        for (int64_t x = 0; x < dv; x++) pred[x] = QT_R(0.0);
                        for (int64_t kk = 0; kk < dk; kk++)
                            qt_gdn_pred_row(pred, sp + kk * dv, a, kh[kk], dv);
                    }
                    for (int64_t x = 0; x < dv; x++) {
                        delta[x] = bt * (v[x] - pred[x]);
                        ddelta[x] = QT_R(0.0);
                    }
                    /* S_t = S' + kh delta^T; dqh = S_t do; dS += qh do^T;
                     * dkh = dS delta; ddelta = dS^T kh */
                    if (nv) {
                        QT_GDN_BWD_CALL(nv, qt_gdn_bwd_b_v(ds, ddelta, dqh, dkh, sp, delta, dor, a,
                                                           kh, qh, dk, NV));
                    } else {
                        for (int64_t kk = 0; kk < dk; kk++) {
                            qt_real r2[2];
                            qt_gdn_bwd_row_b(ds + kk * dv, ddelta, r2, sp + kk * dv, delta, dor,
                                             a, kh[kk], qh[kk], dv);
                            dqh[kk] = r2[0];
                            dkh[kk] = r2[1];
                        }
                    }
                    qt_real db = QT_R(0.0);
                    for (int64_t x = 0; x < dv; x++) {
                        db += ddelta[x] * (v[x] - pred[x]);
                        dpred[x] = -(bt * ddelta[x]);
                    }
                    /* dkh += S' dpred; dS' = dS + kh dpred^T; da = <dS', S_prev>;
                     * dS_prev = a*dS' */
                    qt_real da = QT_R(0.0);
                    for (int64_t kk = 0; kk < dk; kk++) {
                        qt_real r2[2];
                        if (nv)
                            QT_GDN_BWD_CALL(nv, qt_gdn_bwd_c_v(ds + kk * dv, r2, sp + kk * dv,
                                                               dpred, a, kh[kk], NV));
                        else
                            qt_gdn_bwd_row_c(ds + kk * dv, r2, sp + kk * dv, dpred, a, kh[kk], dv);
                        dkh[kk] += r2[0];
                        da += r2[1];
                    }
                    dg[row * hv + j] += da * a;
                    dbeta[row * hv + j] += db;
                    qt_real *dcrow = dc + row * d.cc;
                    for (int64_t x = 0; x < dv; x++)
                        dcrow[2 * hk * dk + j * dv + x] += bt * ddelta[x];
                    qt_gdn_l2_bwd(dcrow + h * dk, crow + h * dk, dqh, rq[row * hk + h], qscale,
                                  dk);
                    qt_gdn_l2_bwd(dcrow + hk * dk + h * dk, crow + hk * dk + h * dk, dkh,
                                  rk[row * hk + h], QT_R(1.0), dk);
                }
            }
        }
    }
}

/* The kernels, and their references with the scalar step only (bit-identity tests). */
void QT_FN(qt_gdn_core_fwd)(qt_real *o, qt_real *states, qt_real *rq, qt_real *rk,
                            const qt_real *c, const qt_real *g, const qt_real *beta, int64_t b,
                            int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                            int64_t chunk, qt_real qscale, qt_real l2eps)
{
    qt_gdn_core_fwd_impl(o, states, rq, rk, c, g, beta, b, S, hk, dk, hv, dv, chunk, qscale,
                         l2eps, 0, NULL);
}

void QT_FN(qt_gdn_core_fwd_ref)(qt_real *o, qt_real *states, qt_real *rq, qt_real *rk,
                                const qt_real *c, const qt_real *g, const qt_real *beta,
                                int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                                int64_t dv, int64_t chunk, qt_real qscale, qt_real l2eps)
{
    qt_gdn_core_fwd_impl(o, states, rq, rk, c, g, beta, b, S, hk, dk, hv, dv, chunk, qscale,
                         l2eps, 1, NULL);
}

void QT_FN(qt_gdn_core_bwd)(qt_real *dc, qt_real *dg, qt_real *dbeta, const qt_real *states,
                            const qt_real *rq, const qt_real *rk, const qt_real *d_o,
                            const qt_real *c, const qt_real *g, const qt_real *beta,
                            qt_real *scratch, int64_t b, int64_t S, int64_t hk, int64_t dk,
                            int64_t hv, int64_t dv, int64_t chunk, qt_real qscale,
                            qt_real l2eps)
{
    (void)l2eps; /* the saved rq, rk already hold it */
    qt_gdn_core_bwd_impl(dc, dg, dbeta, states, rq, rk, d_o, c, g, beta, scratch, b, S, hk, dk,
                         hv, dv, chunk, qscale, 0, NULL);
}

void QT_FN(qt_gdn_core_bwd_ref)(qt_real *dc, qt_real *dg, qt_real *dbeta, const qt_real *states,
                                const qt_real *rq, const qt_real *rk, const qt_real *d_o,
                                const qt_real *c, const qt_real *g, const qt_real *beta,
                                qt_real *scratch, int64_t b, int64_t S, int64_t hk, int64_t dk,
                                int64_t hv, int64_t dv, int64_t chunk, qt_real qscale,
                                qt_real l2eps)
{
    (void)l2eps;
    qt_gdn_core_bwd_impl(dc, dg, dbeta, states, rq, rk, d_o, c, g, beta, scratch, b, S, hk, dk,
                         hv, dv, chunk, qscale, 1, NULL);
}

/* Packed documents (pos[T]: each row's position in its document; NULL = the plain forms). */
void QT_FN(qt_gdn_core_fwd_pos)(qt_real *o, qt_real *states, qt_real *rq, qt_real *rk,
                                const qt_real *c, const qt_real *g, const qt_real *beta,
                                const int32_t *pos, int64_t b, int64_t S, int64_t hk,
                                int64_t dk, int64_t hv, int64_t dv, int64_t chunk,
                                qt_real qscale, qt_real l2eps)
{
    qt_gdn_core_fwd_impl(o, states, rq, rk, c, g, beta, b, S, hk, dk, hv, dv, chunk, qscale,
                         l2eps, 0, pos);
}

void QT_FN(qt_gdn_core_bwd_pos)(qt_real *dc, qt_real *dg, qt_real *dbeta,
                                const qt_real *states, const qt_real *rq, const qt_real *rk,
                                const qt_real *d_o, const qt_real *c, const qt_real *g,
                                const qt_real *beta, const int32_t *pos, qt_real *scratch,
                                int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                                int64_t dv, int64_t chunk, qt_real qscale)
{
    qt_gdn_core_bwd_impl(dc, dg, dbeta, states, rq, rk, d_o, c, g, beta, scratch, b, S, hk, dk,
                         hv, dv, chunk, qscale, 0, pos);
}
