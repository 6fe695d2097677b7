/* gdn_core.c - the gated delta rule, forward with chunk checkpoints and backward by
 * per-chunk recomputation (contract: gdn_core.h, qt_ops.h QT_OP_GDN_CORE_*).
 *
 * Invariants:
 *  - every state comes from one set of per-element expressions in one order (qt_gdn_step;
 *    the AVX-512 column-block sweeps below apply the same ones, columns never mix), in the
 *    forward and in the backward's recomputation, so recomputed states carry the forward's
 *    bits and the chunk size cannot change any result;
 *  - the FMA contract (gdn_core.h): every multiply-add over the state (pred, the update,
 *    o, and the backward's) is one fma (QT_GDN_FMA, _mm512_fmadd_ps), the same in every
 *    path; a*S, a*dS', delta and the per-token scalar sums keep a separate multiply and add;
 *  - loops over a state run row kk (Dk) outside, column (Dv) inside and contiguous; every
 *    per-column sum therefore runs in increasing kk, per-row sums over Dv use the fixed
 *    16-lane order of QT_GDN_BLOCKED, sums over Dk alone (norms) run in increasing i;
 *  - the forward has no scratch: the running state of chunk n lives in checkpoint slot
 *    n+1 (which it becomes); the last chunk runs in its own slot, which is then restored by
 *    re-running the previous chunk (at most one extra chunk per sequence and head); the
 *    blocked forward (Dv a multiple of 64) keeps a column block in slot 0 and zeroes it after;
 *  - the backward's scratch slots hold recomputed states only; the states it reads that the
 *    forward saved (the chunk's checkpoint, the next one) it reads in place: they carry the
 *    bits the recomputation would give. On the blocked path (AVX-512, Dv a multiple of 64,
 *    chunk <= Dk) slot 0 holds each token's pred instead, and a chunk whose states pass
 *    QT_GDN_SUB_BYTES runs in sub-chunks that fit L2 (qt_gdn_bwd_sub);
 *  - nothing crosses a sequence: every sequence starts from S_0 = 0 and dS = 0.
 */
#include <stddef.h>
#include "qt_real.h"
#include "kernels/gdn_core.h"
#include "kernels/gdn_common.h"

/* The contract's multiply-adds are single-rounding fused multiply-adds, fma(a, b, c) =
 * a*b + c rounded once: explicit here (the project compiles with -ffp-contract=off, so no
 * other expression fuses). Without the instruction __builtin_fmaf would become a libm call,
 * so a float build without FMA is refused (as matmul.c). */
#ifdef QT_REAL_DOUBLE
#define QT_GDN_FMA(a, b, c) __builtin_fma((a), (b), (c))
#else
#ifndef __FMA__
#error "gdn_core.c needs the FMA instruction: build with ARCH=-march=x86-64-v3 or newer"
#endif
#define QT_GDN_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#endif

/* Per-row sums over Dv run in QT_GDN_LANES interleaved lanes (lane = x mod 16, each lane a
 * chain of fmas in increasing x from +0) combined by a fixed tree: lanes l and l+8 first
 * (f_l = lane_l + lane_{l+8}), then ((f0+f1)+(f2+f3))+((f4+f5)+(f6+f7)): a fixed order, one
 * 512-bit fma per 16 columns, and one the compiler can vectorise without -ffast-math.
 * Column updates are blocked the same way only so that they vectorise at -O2; blocking
 * elementwise updates does not change their bits. */
#define QT_GDN_LANES 16
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

/* The 8 folded lanes f -> ((f0+f1)+(f2+f3))+((f4+f5)+(f6+f7)). */
static inline qt_real qt_gdn_fold_sum(const qt_real *f)
{
    return ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
}

/* The 16 lanes of a row sum -> the sum: f_l = l[l] + l[l+8], then qt_gdn_fold_sum. */
static inline qt_real qt_gdn_lanes_sum(const qt_real *l)
{
    qt_real f[QT_GDN_LANES / 2];
    for (int i = 0; i < QT_GDN_LANES / 2; i++) f[i] = l[i] + l[i + QT_GDN_LANES / 2];
    return qt_gdn_fold_sum(f);
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

/* Cache hints for a token's rows ahead of use (rows lie Cc reals apart, too far for the
 * hardware prefetcher); no effect on any result. */
static inline void qt_gdn_prefetch(const qt_real *p, int64_t n)
{
    for (int64_t i = 0; i < n; i += 64 / (int64_t)sizeof(qt_real)) __builtin_prefetch(p + i, 0, 3);
}

static inline void qt_gdn_prefetch_w(qt_real *p, int64_t n)
{
    for (int64_t i = 0; i < n; i += 64 / (int64_t)sizeof(qt_real)) __builtin_prefetch(p + i, 1, 3);
}

#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
#include <immintrin.h>
/* Normalised key alone (the recomputation needs no query). */
static void qt_gdn_load_k(float *restrict kh, const float *restrict crow, float rk,
                          int64_t h, const qt_gdn_dims *d)
{
    const float *k = crow + d->hk * d->dk + h * d->dk;
    for (int64_t i = 0; i < d->dk; i++) kh[i] = k[i] * rk;
}

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
            for (int u = 0; u < 4; u++) { /* delta = fma(a * s, kv, delta) */
                const __m512 as = _mm512_mul_ps(va, _mm512_loadu_ps(sr + 16 * u));
                dl[u] = _mm512_fmadd_ps(as, kv, dl[u]);
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
            for (int u = 0; u < 4; u++) { /* s = fma(kv, delta, a*s); o = fma(s, qv, o) */
                __m512 sn = _mm512_fmadd_ps(kv, dl[u],
                                            _mm512_mul_ps(va, _mm512_loadu_ps(sr + 16 * u)));
                _mm512_storeu_ps(sr + 16 * u, sn);
                if (o) ov[u] = _mm512_fmadd_ps(sn, qv, ov[u]);
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
        QT_GDN_BLOCKED(x, l, dv, { delta[x] = QT_GDN_FMA(a * srow[x], kv, delta[x]); });
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
                srow[x] = QT_GDN_FMA(kv, delta[x], a * srow[x]);
                o[x] = QT_GDN_FMA(srow[x], qv, o[x]);
            });
        } else {
            QT_GDN_BLOCKED(x, l, dv, { srow[x] = QT_GDN_FMA(kv, delta[x], a * srow[x]); });
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
                   const float *restrict qh, const float *restrict kn, float an, int64_t dk,
                   const int wo)
{
    const __m512 van = _mm512_set1_ps(an);
    __m512 ov[QT_GDN_FBV], p[QT_GDN_FBV], de[QT_GDN_FBV]; /* in registers, not via pr / dl */
#pragma GCC unroll 4
    for (int u = 0; u < QT_GDN_FBV; u++) ov[u] = p[u] = _mm512_setzero_ps(), de[u] = dl[u];
    for (int64_t kk = 0; kk < dk; kk++) {
        float *br = ab + kk * QT_GDN_FB;
        const __m512 kv = _mm512_set1_ps(kh[kk]), qv = wo ? _mm512_set1_ps(qh[kk]) : kv;
        const __m512 nv = kn ? _mm512_set1_ps(kn[kk]) : kv;
#pragma GCC unroll 4
        for (int u = 0; u < QT_GDN_FBV; u++) {
            const __m512 sn = _mm512_fmadd_ps(kv, de[u], _mm512_loadu_ps(br + 16 * u));
            if (wo) ov[u] = _mm512_fmadd_ps(sn, qv, ov[u]);
            if (sout) _mm512_storeu_ps(sout + kk * ld + 16 * u, sn);
            if (kn) {
                const __m512 as = _mm512_mul_ps(van, sn);
                _mm512_storeu_ps(br + 16 * u, as);
                p[u] = _mm512_fmadd_ps(as, nv, p[u]);
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < QT_GDN_FBV; u++) pr[u] = p[u];
    if (wo)
        for (int u = 0; u < QT_GDN_FBV; u++) _mm512_storeu_ps(o + 16 * u, ov[u]);
}

/* The forward's per-token sweep as its own functions (the three forms the token loop takes),
 * so each gets a register allocation of its own: inlined into qt_gdn_fwd_block_v, GCC spilled
 * a broadcast and a state vector to the stack inside the row loop (a store-to-load forward on
 * the o chain every row). Same instructions otherwise, so the same bits. */
static __attribute__((noinline)) void
qt_gdn_fwd_sweep_mid(float *restrict ab, float *restrict o, __m512 pr[QT_GDN_FBV],
                     const __m512 dl[QT_GDN_FBV], const float *restrict kh,
                     const float *restrict qh, const float *restrict kn, float an, int64_t dk)
{
    qt_gdn_fwd_sweep_v(ab, o, 0, 0, pr, dl, kh, qh, kn, an, dk, 1);
}

static __attribute__((noinline)) void
qt_gdn_fwd_sweep_ck(float *restrict ab, float *restrict o, float *restrict sout, int64_t ld,
                    __m512 pr[QT_GDN_FBV], const __m512 dl[QT_GDN_FBV], const float *restrict kh,
                    const float *restrict qh, const float *restrict kn, float an, int64_t dk)
{
    qt_gdn_fwd_sweep_v(ab, o, sout, ld, pr, dl, kh, qh, kn, an, dk, 1);
}

static __attribute__((noinline)) void
qt_gdn_fwd_sweep_last(float *restrict ab, float *restrict o, __m512 pr[QT_GDN_FBV],
                      const __m512 dl[QT_GDN_FBV], const float *restrict kh,
                      const float *restrict qh, int64_t dk)
{
    qt_gdn_fwd_sweep_v(ab, o, 0, 0, pr, dl, kh, qh, 0, 0.0f, dk, 1);
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
            pr[u] = _mm512_fmadd_ps(as, kv, pr[u]);
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
            if (t + 2 < d->S) {
                const float *c2 = c + (row + 2) * d->cc;
                qt_gdn_prefetch(c2 + h * dk, dk);
                qt_gdn_prefetch(c2 + d->hk * dk + h * dk, dk);
                qt_gdn_prefetch(c2 + 2 * d->hk * dk + j * dv + x0, QT_GDN_FB);
                qt_gdn_prefetch_w(o + (row + 2) * d->hv * dv + j * dv + x0, QT_GDN_FB);
            }
        }
        float *orow = o + row * d->hv * dv + j * dv + x0;
        if (last) /* separate functions, so each sweep has its branches resolved */
            qt_gdn_fwd_sweep_last(ab, orow, pr, dl, kc, qc, dk);
        else if ((t + 1) % d->chunk == 0)
            qt_gdn_fwd_sweep_ck(ab, orow, sth + (t + 1) / d->chunk * d->dkdv + x0, dv, pr, dl,
                                kc, qc, kn, an, dk);
        else
            qt_gdn_fwd_sweep_mid(ab, orow, pr, dl, kc, qc, kn, an, dk);
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

/* Backward, first pass over row kk of the state (S' = a*S_prev, S_t = fma(kh, delta, S')):
 * dS = fma(qh, do, dS); returns dqh[kk] = S_t do and dkh[kk] = dS delta (16-lane fma row
 * sums); ddelta = fma(dS, kh, ddelta). Separate restrict arguments so the compiler knows
 * the rows do not overlap. */
static void qt_gdn_bwd_row_b(qt_real *restrict dsrow, qt_real *restrict ddelta,
                             qt_real *restrict dqk, const qt_real *restrict srow,
                             const qt_real *restrict delta, const qt_real *restrict dor,
                             qt_real a, qt_real kv, qt_real qv, int64_t dv)
{
    qt_real laq[QT_GDN_LANES], lak[QT_GDN_LANES];
    qt_gdn_lanes_zero(laq);
    qt_gdn_lanes_zero(lak);
    QT_GDN_BLOCKED(x, l, dv, {
        qt_real st = QT_GDN_FMA(kv, delta[x], a * srow[x]);
        qt_real dsv = QT_GDN_FMA(qv, dor[x], dsrow[x]);
        laq[l] = QT_GDN_FMA(st, dor[x], laq[l]);
        dsrow[x] = dsv;
        lak[l] = QT_GDN_FMA(dsv, delta[x], lak[l]);
        ddelta[x] = QT_GDN_FMA(dsv, kv, ddelta[x]);
    });
    dqk[0] = qt_gdn_lanes_sum(laq);
    dqk[1] = qt_gdn_lanes_sum(lak);
}

/* Backward, second pass over row kk: dS' = fma(kh, dpred, dS); returns
 * S'dpred = a * (S_prev dpred) (row kk: the row sum of S_prev*dpred, then one multiply by a)
 * and <dS', S_prev> (row kk); dS becomes dS_prev = a*dS'. */
static void qt_gdn_bwd_row_c(qt_real *restrict dsrow, qt_real *restrict kr,
                             const qt_real *restrict srow, const qt_real *restrict dpred,
                             qt_real a, qt_real kv, int64_t dv)
{
    qt_real lak[QT_GDN_LANES], lar[QT_GDN_LANES];
    qt_gdn_lanes_zero(lak);
    qt_gdn_lanes_zero(lar);
    QT_GDN_BLOCKED(x, l, dv, {
        qt_real dsp = QT_GDN_FMA(kv, dpred[x], dsrow[x]);
        lak[l] = QT_GDN_FMA(srow[x], dpred[x], lak[l]);
        lar[l] = QT_GDN_FMA(dsp, srow[x], lar[l]);
        dsrow[x] = a * dsp;
    });
    kr[0] = a * qt_gdn_lanes_sum(lak);
    kr[1] = qt_gdn_lanes_sum(lar);
}

/* pred = fma(a*srow, kv, pred), the forward's first-pass expression. */
static void qt_gdn_pred_row(qt_real *restrict pred, const qt_real *restrict srow, qt_real a,
                            qt_real kv, int64_t dv)
{
    QT_GDN_BLOCKED(x, l, dv, { pred[x] = QT_GDN_FMA(a * srow[x], kv, pred[x]); });
}

#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__) && defined(__AVX512DQ__)
/* The backward's passes over the state for Dv = 16*nv (nv 4 or 8: Dv 64 or 128) in explicit
 * AVX-512, whole rows at a time so the running ddelta / pred columns stay in registers.
 * Every element runs the scalar pass's expressions; a row's 16-lane sums are one zmm of
 * fmas over the row's 16-column vectors in increasing x (lane l = x mod 16, as
 * QT_GDN_BLOCKED does), folded to 8 lanes as lane l + lane l+8 (the low half first), then
 * combined by qt_gdn_fold_sum's tree, for 8 rows at once by qt_gdn_lanes_sum8. Same bits. */
static inline float qt_gdn_lanes_sum_v(__m256 v)
{
    float l[QT_GDN_LANES / 2];
    _mm256_storeu_ps(l, v);
    return qt_gdn_fold_sum(l);
}

/* The folded lane vectors of 8 rows -> the 8 row sums ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)):
 * hadd forms l0+l1 and l2+l3, then (l0+l1)+(l2+l3) (first operand first, as the scalar
 * tree), and the two 128-bit halves add the 0123 and 4567 halves. */
static inline __m256 qt_gdn_lanes_sum8(const __m256 *l)
{
    const __m256 h01 = _mm256_hadd_ps(l[0], l[1]), h23 = _mm256_hadd_ps(l[2], l[3]);
    const __m256 h45 = _mm256_hadd_ps(l[4], l[5]), h67 = _mm256_hadd_ps(l[6], l[7]);
    const __m256 q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20),
                         _mm256_permute2f128_ps(q0, q1, 0x31));
}

/* One row's 16 lanes folded to 8: lane l + lane l+8. */
static inline __m256 qt_gdn_fold1(__m512 t)
{
    return _mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1));
}

/* pred = sum over kk of fma(a*sp[kk], kh[kk], .) from +0 (qt_gdn_pred_row over every row). */
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
            pr[u] = _mm512_fmadd_ps(as, kv, pr[u]);
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) _mm512_storeu_ps(pred + 16 * u, pr[u]);
}

/* Two rows' 16 lanes (t0 row r, t1 row r+1) folded to 8 each and packed in one zmm (row r
 * in the low 8 lanes, row r+1 in the high 8): [lo(t0) + hi(t0), lo(t1) + hi(t1)]. */
static inline __m512 qt_gdn_fold2(__m512 t0, __m512 t1)
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x44),
                         _mm512_shuffle_f32x4(t0, t1, 0xEE));
}

/* Unpacks the row pair kk, kk+1 (kk even) into l[kk & 7], l[(kk+1) & 7]. */
static inline void qt_gdn_lanes_put2(__m256 *l, int64_t kk, __m512 acc)
{
    l[kk & 7] = _mm512_castps512_ps256(acc);
    l[(kk + 1) & 7] = _mm512_extractf32x8_ps(acc, 1);
}

/* One row of qt_gdn_bwd_b_v (the odd last row): returns its folded lanes in *lq, *lk. */
static inline __attribute__((always_inline)) void
qt_gdn_bwd_b_row1(float *restrict dr, __m512 *dd, __m256 *lq, __m256 *lk,
                  const float *restrict sr, int comp, const float *restrict delta,
                  const float *restrict dor, __m512 va, float k, float q, const int nv)
{
    const __m512 kv = _mm512_set1_ps(k), qv = _mm512_set1_ps(q);
    __m512 laq = _mm512_setzero_ps(), lak = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) {
        const __m512 de = _mm512_loadu_ps(delta + 16 * u), dov = _mm512_loadu_ps(dor + 16 * u);
        const __m512 s = _mm512_loadu_ps(sr + 16 * u);
        const __m512 sv = comp ? _mm512_fmadd_ps(kv, de, _mm512_mul_ps(va, s)) : s;
        const __m512 dsv = _mm512_fmadd_ps(qv, dov, _mm512_loadu_ps(dr + 16 * u));
        laq = _mm512_fmadd_ps(sv, dov, laq);
        _mm512_storeu_ps(dr + 16 * u, dsv);
        lak = _mm512_fmadd_ps(dsv, de, lak);
        dd[u] = _mm512_fmadd_ps(dsv, kv, dd[u]);
    }
    *lq = qt_gdn_fold1(laq);
    *lk = qt_gdn_fold1(lak);
}

/* qt_gdn_bwd_row_b over every row kk, two rows at a time (each element's expressions and
 * every sum's order unchanged: ddelta takes row kk before kk+1); ddelta (zero before) is
 * written at the end. S_t is read from st when the caller has the forward's state after
 * the token (the next slot or checkpoint: the bits the step gave it), else formed as
 * fma(kh, delta, a*sp) (st NULL). */
static inline __attribute__((always_inline)) void
qt_gdn_bwd_b_v(float *restrict ds, float *restrict ddelta, float *restrict dqh,
               float *restrict dkh, const float *restrict sp, const float *restrict st,
               const float *restrict delta, const float *restrict dor, float a,
               const float *restrict kh, const float *restrict qh, int64_t dk, const int nv)
{
    __m512 dd[8];
    __m256 lq[8], lk[8];
    const __m512 va = _mm512_set1_ps(a);
    const int64_t w = 16 * nv;
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) dd[u] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 1 < dk; kk += 2) {
        const float *s0 = (st ? st : sp) + kk * w, *s1 = s0 + w;
        float *d0 = ds + kk * w, *d1 = d0 + w;
        const __m512 kv0 = _mm512_set1_ps(kh[kk]), qv0 = _mm512_set1_ps(qh[kk]);
        const __m512 kv1 = _mm512_set1_ps(kh[kk + 1]), qv1 = _mm512_set1_ps(qh[kk + 1]);
        __m512 aq0 = _mm512_setzero_ps(), ak0 = _mm512_setzero_ps();
        __m512 aq1 = _mm512_setzero_ps(), ak1 = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int u = 0; u < nv; u++) {
            const __m512 de = _mm512_loadu_ps(delta + 16 * u), dov = _mm512_loadu_ps(dor + 16 * u);
            __m512 sv0 = _mm512_loadu_ps(s0 + 16 * u), sv1 = _mm512_loadu_ps(s1 + 16 * u);
            if (!st) {
                sv0 = _mm512_fmadd_ps(kv0, de, _mm512_mul_ps(va, sv0));
                sv1 = _mm512_fmadd_ps(kv1, de, _mm512_mul_ps(va, sv1));
            }
            const __m512 dsv0 = _mm512_fmadd_ps(qv0, dov, _mm512_loadu_ps(d0 + 16 * u));
            const __m512 dsv1 = _mm512_fmadd_ps(qv1, dov, _mm512_loadu_ps(d1 + 16 * u));
            aq0 = _mm512_fmadd_ps(sv0, dov, aq0);
            aq1 = _mm512_fmadd_ps(sv1, dov, aq1);
            _mm512_storeu_ps(d0 + 16 * u, dsv0);
            _mm512_storeu_ps(d1 + 16 * u, dsv1);
            ak0 = _mm512_fmadd_ps(dsv0, de, ak0);
            ak1 = _mm512_fmadd_ps(dsv1, de, ak1);
            dd[u] = _mm512_fmadd_ps(dsv0, kv0, dd[u]);
            dd[u] = _mm512_fmadd_ps(dsv1, kv1, dd[u]);
        }
        qt_gdn_lanes_put2(lq, kk, qt_gdn_fold2(aq0, aq1));
        qt_gdn_lanes_put2(lk, kk, qt_gdn_fold2(ak0, ak1));
        if ((kk & 7) == 6) {
            _mm256_storeu_ps(dqh + kk - 6, qt_gdn_lanes_sum8(lq));
            _mm256_storeu_ps(dkh + kk - 6, qt_gdn_lanes_sum8(lk));
        }
    }
    if (kk < dk)
        qt_gdn_bwd_b_row1(ds + kk * w, dd, &lq[kk & 7], &lk[kk & 7], (st ? st : sp) + kk * w,
                          !st, delta, dor, va, kh[kk], qh[kk], nv);
    for (kk = dk & ~(int64_t)7; kk < dk; kk++) {
        dqh[kk] = qt_gdn_lanes_sum_v(lq[kk & 7]);
        dkh[kk] = qt_gdn_lanes_sum_v(lk[kk & 7]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) _mm512_storeu_ps(ddelta + 16 * u, dd[u]);
}

/* Rows kk (and kk+1 when two) of qt_gdn_bwd_c_v: folded lanes of S_prev dpred into *lk, of
 * <dS', S_prev> into *lr (packed as qt_gdn_fold2 when two, else in the low half). */
static inline __attribute__((always_inline)) void
qt_gdn_bwd_c_rows(float *restrict dr, __m512 *lk, __m512 *lr, const float *restrict sr,
                  const float *restrict dpred, __m512 va, float k0, float k1, const int two,
                  const int nv)
{
    const int64_t w = 16 * nv;
    const __m512 kv0 = _mm512_set1_ps(k0), kv1 = _mm512_set1_ps(k1);
    __m512 ak0 = _mm512_setzero_ps(), ar0 = _mm512_setzero_ps();
    __m512 ak1 = _mm512_setzero_ps(), ar1 = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) {
        const __m512 dp = _mm512_loadu_ps(dpred + 16 * u), sv0 = _mm512_loadu_ps(sr + 16 * u);
        const __m512 dsp0 = _mm512_fmadd_ps(kv0, dp, _mm512_loadu_ps(dr + 16 * u));
        ak0 = _mm512_fmadd_ps(sv0, dp, ak0);
        ar0 = _mm512_fmadd_ps(dsp0, sv0, ar0);
        _mm512_storeu_ps(dr + 16 * u, _mm512_mul_ps(va, dsp0));
        if (two) {
            const __m512 sv1 = _mm512_loadu_ps(sr + w + 16 * u);
            const __m512 dsp1 = _mm512_fmadd_ps(kv1, dp, _mm512_loadu_ps(dr + w + 16 * u));
            ak1 = _mm512_fmadd_ps(sv1, dp, ak1);
            ar1 = _mm512_fmadd_ps(dsp1, sv1, ar1);
            _mm512_storeu_ps(dr + w + 16 * u, _mm512_mul_ps(va, dsp1));
        }
    }
    *lk = two ? qt_gdn_fold2(ak0, ak1) : _mm512_castps256_ps512(qt_gdn_fold1(ak0));
    *lr = two ? qt_gdn_fold2(ar0, ar1) : _mm512_castps256_ps512(qt_gdn_fold1(ar0));
}

/* qt_gdn_bwd_row_c over every row kk, two rows at a time: dkh[kk] += a * (S_prev dpred)
 * (row kk); returns da, the row sums <dS', S_prev> added in increasing kk from +0;
 * dS <- a*dS'. */
static inline __attribute__((always_inline)) float
qt_gdn_bwd_c_v(float *restrict ds, float *restrict dkh, const float *restrict sp,
               const float *restrict dpred, float a, const float *restrict kh, int64_t dk,
               const int nv)
{
    const __m512 va = _mm512_set1_ps(a);
    const __m256 va8 = _mm256_set1_ps(a);
    const int64_t w = 16 * nv;
    __m256 lk[8], lr[8];
    float da = 0.0f, r[8];
    int64_t kk = 0;
    for (; kk + 1 < dk; kk += 2) {
        __m512 ak, ar;
        qt_gdn_bwd_c_rows(ds + kk * w, &ak, &ar, sp + kk * w, dpred, va, kh[kk], kh[kk + 1], 1,
                          nv);
        qt_gdn_lanes_put2(lk, kk, ak);
        qt_gdn_lanes_put2(lr, kk, ar);
        if ((kk & 7) == 6) {
            float *dkr = dkh + kk - 6;
            _mm256_storeu_ps(dkr, _mm256_add_ps(_mm256_loadu_ps(dkr),
                                                _mm256_mul_ps(va8, qt_gdn_lanes_sum8(lk))));
            _mm256_storeu_ps(r, qt_gdn_lanes_sum8(lr));
            for (int q = 0; q < 8; q++) da += r[q];
        }
    }
    if (kk < dk) {
        __m512 ak, ar;
        qt_gdn_bwd_c_rows(ds + kk * w, &ak, &ar, sp + kk * w, dpred, va, kh[kk], 0.0f, 0, nv);
        lk[kk & 7] = _mm512_castps512_ps256(ak);
        lr[kk & 7] = _mm512_castps512_ps256(ar);
    }
    for (kk = dk & ~(int64_t)7; kk < dk; kk++) {
        dkh[kk] += a * qt_gdn_lanes_sum_v(lk[kk & 7]);
        da += qt_gdn_lanes_sum_v(lr[kk & 7]);
    }
    return da;
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

#ifdef QT_GDN_FWD_BLOCKED
/* One sweep of the blocked recomputation (the forward's sweep without o): for each row,
 * S_{i+1} = a*S_i + kh_i delta_i (written to sout) and pred_{i+1} += (an*S_{i+1}) * kn. */
static inline __attribute__((always_inline)) void
qt_gdn_rec_sweep_v(float *restrict sout, const float *restrict sin, int64_t ld,
                   __m512 pr[QT_GDN_FBV], const __m512 dl[QT_GDN_FBV], float a,
                   const float *restrict kh, float an, const float *restrict kn, int64_t dk)
{
    const __m512 va = _mm512_set1_ps(a), van = _mm512_set1_ps(an);
    __m512 p[QT_GDN_FBV], de[QT_GDN_FBV]; /* in registers, not via pr / dl */
#pragma GCC unroll 4
    for (int u = 0; u < QT_GDN_FBV; u++) p[u] = _mm512_setzero_ps(), de[u] = dl[u];
    for (int64_t kk = 0; kk < dk; kk++) {
        const __m512 kv = _mm512_set1_ps(kh[kk]), nv = _mm512_set1_ps(kn[kk]);
#pragma GCC unroll 4
        for (int u = 0; u < QT_GDN_FBV; u++) {
            const __m512 sn = _mm512_fmadd_ps(
                kv, de[u], _mm512_mul_ps(va, _mm512_loadu_ps(sin + kk * ld + 16 * u)));
            _mm512_storeu_ps(sout + kk * ld + 16 * u, sn);
            p[u] = _mm512_fmadd_ps(_mm512_mul_ps(van, sn), nv, p[u]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < QT_GDN_FBV; u++) pr[u] = p[u];
}

/* The backward's recomputation of tokens t0..t0+len-1 of sequence s, value head j (a chunk
 * or a sub-chunk) in column blocks of QT_GDN_FB, one sweep per token (S_i read from where
 * the sweep before wrote it): S_i (1 <= i < len) goes to sdst + (i-1)*Dk*Dv from S_0 = s0
 * (the checkpoint or a sub-chunk boundary, which the backward then reads in place), and
 * pred_i, the sum the forward's delta used, to pdst + i*Dv (needs len <= Dk). kb0, kb1: Dk
 * floats each (this token's and the next normalised key); qh: Dk floats (unused values). */
static void qt_gdn_bwd_recompute_v(float *restrict pdst, float *restrict sdst,
                                   const float *restrict s0,
                                   const float *restrict c, const float *restrict g,
                                   const float *restrict beta, const float *restrict rq,
                                   const float *restrict rk, float qscale, int64_t s, int64_t j,
                                   int64_t t0, int64_t len, float *restrict qh,
                                   float *restrict kb0, float *restrict kb1, const qt_gdn_dims *d)
{
    const int64_t dk = d->dk, dv = d->dv, h = j / d->r;
    for (int64_t x0 = 0; x0 < dv; x0 += QT_GDN_FB) {
        __m512 pr[QT_GDN_FBV], dl[QT_GDN_FBV];
        int64_t row = s * d->S + t0;
        float *kc = kb0, *kn = kb1;
        qt_gdn_load_qk(qh, kc, c + row * d->cc, rq[row * d->hk + h], rk[row * d->hk + h],
                       qscale, h, d);
        float a = qt_gdn_decay(g, row, j, d);
        const __m512 va = _mm512_set1_ps(a);
        for (int u = 0; u < QT_GDN_FBV; u++) pr[u] = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < dk; kk++) { /* pred_0 from the checkpoint */
            const __m512 kv = _mm512_set1_ps(kc[kk]);
            for (int u = 0; u < QT_GDN_FBV; u++) {
                const __m512 as = _mm512_mul_ps(va, _mm512_loadu_ps(s0 + kk * dv + x0 + 16 * u));
                pr[u] = _mm512_fmadd_ps(as, kv, pr[u]);
            }
        }
        for (int64_t i = 0;; i++, row++) {
            for (int u = 0; u < QT_GDN_FBV; u++)
                _mm512_storeu_ps(pdst + i * dv + x0 + 16 * u, pr[u]);
            if (i + 1 == len) break;
            const float *v = c + row * d->cc + 2 * d->hk * dk + j * dv + x0;
            const __m512 vb = _mm512_set1_ps(beta[row * d->hv + j]);
            for (int u = 0; u < QT_GDN_FBV; u++) /* delta = bt * (v - pred) */
                dl[u] = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * u), pr[u]));
            qt_gdn_load_qk(qh, kn, c + (row + 1) * d->cc, rq[(row + 1) * d->hk + h],
                           rk[(row + 1) * d->hk + h], qscale, h, d);
            const float an = qt_gdn_decay(g, row + 1, j, d);
            const float *sin = i ? sdst + (i - 1) * d->dkdv + x0 : s0 + x0;
            qt_gdn_rec_sweep_v(sdst + i * d->dkdv + x0, sin, dv, pr, dl, a, kc, an, kn, dk);
            float *t = kc;
            kc = kn;
            kn = t;
            a = an;
        }
    }
}
#endif

/* One token's vectors in the backward (two live at once when passes fuse). */
typedef struct qt_gdn_tok {
    qt_real qh[QT_GDN_CORE_MAX_DIM], kh[QT_GDN_CORE_MAX_DIM], dqh[QT_GDN_CORE_MAX_DIM];
    qt_real dkh[QT_GDN_CORE_MAX_DIM], pred[QT_GDN_CORE_MAX_DIM], delta[QT_GDN_CORE_MAX_DIM];
    qt_real ddelta[QT_GDN_CORE_MAX_DIM], dpred[QT_GDN_CORE_MAX_DIM];
    const qt_real *pr, *v, *dor; /* the pred its delta used, its v and do rows */
    qt_real a, bt;
    int64_t row;
} qt_gdn_tok;

/* What one token's backward reads and writes besides the state slots (scratch vectors;
 * tok: two token records on the caller's stack). */
typedef struct qt_gdn_bwd_ctx {
    qt_real *dc, *dg, *dbeta, *ds, *qh, *kh, *dqh, *dkh, *delta; /* recomputation buffers */
    const qt_real *rq, *rk, *d_o, *c, *g, *beta;
    qt_gdn_tok *tok;
    qt_real qscale;
    qt_gdn_dims d;
} qt_gdn_bwd_ctx;

/* A token's start (row `row`, value head j): a, beta, qh, kh, its pred (pr: the forward's,
 * stored; NULL: recomputed from sp = S_{t-1} as the forward step did), delta; ddelta = 0. */
static void qt_gdn_bwd_begin(const qt_gdn_bwd_ctx *x, qt_gdn_tok *tk, int64_t j, int64_t row,
                             const qt_real *restrict sp, const qt_real *restrict pr)
{
    const qt_gdn_dims *d = &x->d;
    const int64_t dk = d->dk, dv = d->dv, hk = d->hk, h = j / d->r;
    const qt_real *crow = x->c + row * d->cc;
    tk->row = row;
    tk->v = crow + 2 * hk * dk + j * dv;
    tk->dor = x->d_o + row * d->hv * dv + j * dv;
    tk->a = qt_gdn_decay(x->g, row, j, d), tk->bt = x->beta[row * d->hv + j];
    qt_gdn_load_qk(tk->qh, tk->kh, crow, x->rq[row * hk + h], x->rk[row * hk + h], x->qscale,
                   h, d);
    if (row % d->S) { /* the rows of the token that runs next */
        const qt_real *cp = crow - d->cc;
        qt_real *dcp = x->dc + (row - 1) * d->cc;
        qt_gdn_prefetch(cp + h * dk, dk);
        qt_gdn_prefetch(cp + hk * dk + h * dk, dk);
        qt_gdn_prefetch(cp + 2 * hk * dk + j * dv, dv);
        qt_gdn_prefetch(tk->dor - d->hv * dv, dv);
        qt_gdn_prefetch_w(dcp + h * dk, dk);
        qt_gdn_prefetch_w(dcp + hk * dk + h * dk, dk);
        qt_gdn_prefetch_w(dcp + 2 * hk * dk + j * dv, dv);
    }
    if (!pr) { /* pred exactly as the forward step computed it */
        const int nv = QT_GDN_BWD_NV(d);
        qt_real *p = tk->pred;
        if (nv) {
            QT_GDN_BWD_CALL(nv, qt_gdn_pred_v(p, sp, tk->a, tk->kh, dk, NV));
        } else {
            for (int64_t y = 0; y < dv; y++) p[y] = QT_R(0.0);
            for (int64_t kk = 0; kk < dk; kk++)
                qt_gdn_pred_row(p, sp + kk * dv, tk->a, tk->kh[kk], dv);
        }
        pr = p;
    }
    tk->pr = pr;
    for (int64_t y = 0; y < dv; y++) {
        tk->delta[y] = tk->bt * (tk->v[y] - pr[y]);
        tk->ddelta[y] = QT_R(0.0);
    }
}

/* Pass B alone: S_t = fma(kh, delta, a*sp) (or read from st); dqh = S_t do;
 * dS = fma(qh, do, dS); dkh = dS delta; ddelta = dS^T kh. */
static void qt_gdn_bwd_pass_b(const qt_gdn_bwd_ctx *x, qt_gdn_tok *tk,
                              const qt_real *restrict sp, const qt_real *restrict st)
{
    const int64_t dk = x->d.dk, dv = x->d.dv;
    const int nv = QT_GDN_BWD_NV(&x->d);
    if (nv && st) {
        QT_GDN_BWD_CALL(nv, qt_gdn_bwd_b_v(x->ds, tk->ddelta, tk->dqh, tk->dkh, sp, st,
                                           tk->delta, tk->dor, tk->a, tk->kh, tk->qh, dk, NV));
    } else if (nv) {
        QT_GDN_BWD_CALL(nv, qt_gdn_bwd_b_v(x->ds, tk->ddelta, tk->dqh, tk->dkh, sp, NULL,
                                           tk->delta, tk->dor, tk->a, tk->kh, tk->qh, dk, NV));
    } else {
        for (int64_t kk = 0; kk < dk; kk++) {
            qt_real r2[2];
            qt_gdn_bwd_row_b(x->ds + kk * dv, tk->ddelta, r2, sp + kk * dv, tk->delta, tk->dor,
                             tk->a, tk->kh[kk], tk->qh[kk], dv);
            tk->dqh[kk] = r2[0];
            tk->dkh[kk] = r2[1];
        }
    }
}

/* Between the passes: returns db = ddelta.(v - pred); dpred = -(beta*ddelta). */
static qt_real qt_gdn_bwd_mid(const qt_gdn_bwd_ctx *x, qt_gdn_tok *tk)
{
    qt_real db = QT_R(0.0);
    for (int64_t y = 0; y < x->d.dv; y++) {
        db += tk->ddelta[y] * (tk->v[y] - tk->pr[y]);
        tk->dpred[y] = -(tk->bt * tk->ddelta[y]);
    }
    return db;
}

/* Pass C alone: dkh += a * (S_prev dpred); dS' = fma(kh, dpred, dS); returns
 * da = <dS', S_prev>; dS <- a*dS'. */
static qt_real qt_gdn_bwd_pass_c(const qt_gdn_bwd_ctx *x, qt_gdn_tok *tk,
                                 const qt_real *restrict sp)
{
    const int64_t dk = x->d.dk, dv = x->d.dv;
    const int nv = QT_GDN_BWD_NV(&x->d);
    qt_real da = QT_R(0.0);
    if (nv) {
        QT_GDN_BWD_CALL(nv, da = qt_gdn_bwd_c_v(x->ds, tk->dkh, sp, tk->dpred, tk->a, tk->kh, dk,
                                                NV));
    } else {
        for (int64_t kk = 0; kk < dk; kk++) {
            qt_real r2[2];
            qt_gdn_bwd_row_c(x->ds + kk * dv, r2, sp + kk * dv, tk->dpred, tk->a, tk->kh[kk], dv);
            tk->dkh[kk] += r2[0];
            da += r2[1];
        }
    }
    return da;
}

/* A token's end: dg, dbeta, the v channels of dc, the l2norm backwards of dqh and dkh. */
static void qt_gdn_bwd_end(const qt_gdn_bwd_ctx *x, const qt_gdn_tok *tk, int64_t j, qt_real da,
                           qt_real db)
{
    const qt_gdn_dims *d = &x->d;
    const int64_t dk = d->dk, dv = d->dv, hk = d->hk, h = j / d->r, row = tk->row;
    const qt_real *crow = x->c + row * d->cc;
    x->dg[row * d->hv + j] += da * tk->a;
    x->dbeta[row * d->hv + j] += db;
    qt_real *dcrow = x->dc + row * d->cc;
    for (int64_t y = 0; y < dv; y++) dcrow[2 * hk * dk + j * dv + y] += tk->bt * tk->ddelta[y];
    qt_gdn_l2_bwd(dcrow + h * dk, crow + h * dk, tk->dqh, x->rq[row * hk + h], x->qscale, dk);
    qt_gdn_l2_bwd(dcrow + hk * dk + h * dk, crow + hk * dk + h * dk, tk->dkh,
                  x->rk[row * hk + h], QT_R(1.0), dk);
}

/* Passes B and C of one token (row `row`, value head j) on dS: sp = S_{t-1}; st = S_t when
 * at hand (else NULL: formed from sp); pr = the forward's pred when stored (else NULL:
 * recomputed from sp). The vector passes (Dv 64 or 128, same bits) or the scalar rows. */
static void qt_gdn_bwd_token(const qt_gdn_bwd_ctx *x, int64_t j, int64_t row,
                             const qt_real *restrict sp, const qt_real *restrict st,
                             const qt_real *restrict pr)
{
    qt_gdn_tok *tk = x->tok;
    qt_gdn_bwd_begin(x, tk, j, row, sp, pr);
    qt_gdn_bwd_pass_b(x, tk, sp, st);
    const qt_real db = qt_gdn_bwd_mid(x, tk);
    const qt_real da = qt_gdn_bwd_pass_c(x, tk, sp);
    qt_gdn_bwd_end(x, tk, j, da, db);
}

#if defined(QT_GDN_BWD_V) && defined(QT_GDN_FWD_BLOCKED)
#define QT_GDN_BWD_FUSED 1
/* The fused sweep pays where a token's three Dk x Dv matrices (S_{t-1}, S_t, dS) pass L1:
 * Dv 128 (192 KiB at Dk 128; measured ~10-20% off the backward). At Dv 64 (48 KiB at Dk 64)
 * the two passes apart run from L1 and were as fast or faster, so they stay apart. */
#define QT_GDN_BWD_FUSE(d) (QT_GDN_BWD_NV(d) == 8)
/* Rows kk (and kk+1 when two) of qt_gdn_bwd_cb_v: pass C of token t (c) then pass B of
 * token t-1 (b) on the state they share, sr = S_{t-1} (S_prev of t, S_t of t-1): per element
 * exactly qt_gdn_bwd_c_rows's then qt_gdn_bwd_b_v's expressions, dS read and written once.
 * o: the folded lanes of c's S_prev dpred, c's <dS', S_prev>, b's S_t do, b's dS delta. */
static inline __attribute__((always_inline)) void
qt_gdn_bwd_cb_rows(float *restrict dr, const float *restrict sr, __m512 o[4], __m512 *dd,
                   const float *restrict dp, const float *restrict de,
                   const float *restrict dov, __m512 vac, const float *kc, const float *kb,
                   const float *qb, const int two, const int nv)
{
    const int64_t w = 16 * nv;
    const __m512 kc0 = _mm512_set1_ps(kc[0]), kb0 = _mm512_set1_ps(kb[0]);
    const __m512 qb0 = _mm512_set1_ps(qb[0]);
    const __m512 kc1 = _mm512_set1_ps(two ? kc[1] : 0.0f), kb1 = _mm512_set1_ps(two ? kb[1] : 0.0f);
    const __m512 qb1 = _mm512_set1_ps(two ? qb[1] : 0.0f);
    __m512 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) a[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) {
        const __m512 p = _mm512_loadu_ps(dp + 16 * u), e = _mm512_loadu_ps(de + 16 * u);
        const __m512 ov = _mm512_loadu_ps(dov + 16 * u), s0 = _mm512_loadu_ps(sr + 16 * u);
        const __m512 dsp0 = _mm512_fmadd_ps(kc0, p, _mm512_loadu_ps(dr + 16 * u));
        a[0] = _mm512_fmadd_ps(s0, p, a[0]);
        a[2] = _mm512_fmadd_ps(dsp0, s0, a[2]);
        const __m512 dsv0 = _mm512_fmadd_ps(qb0, ov, _mm512_mul_ps(vac, dsp0));
        a[4] = _mm512_fmadd_ps(s0, ov, a[4]);
        a[6] = _mm512_fmadd_ps(dsv0, e, a[6]);
        dd[u] = _mm512_fmadd_ps(dsv0, kb0, dd[u]);
        _mm512_storeu_ps(dr + 16 * u, dsv0);
        if (two) {
            const __m512 s1 = _mm512_loadu_ps(sr + w + 16 * u);
            const __m512 dsp1 = _mm512_fmadd_ps(kc1, p, _mm512_loadu_ps(dr + w + 16 * u));
            a[1] = _mm512_fmadd_ps(s1, p, a[1]);
            a[3] = _mm512_fmadd_ps(dsp1, s1, a[3]);
            const __m512 dsv1 = _mm512_fmadd_ps(qb1, ov, _mm512_mul_ps(vac, dsp1));
            a[5] = _mm512_fmadd_ps(s1, ov, a[5]);
            a[7] = _mm512_fmadd_ps(dsv1, e, a[7]);
            dd[u] = _mm512_fmadd_ps(dsv1, kb1, dd[u]);
            _mm512_storeu_ps(dr + w + 16 * u, dsv1);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        o[i] = two ? qt_gdn_fold2(a[2 * i], a[2 * i + 1])
                   : _mm512_castps256_ps512(qt_gdn_fold1(a[2 * i]));
}

/* Pass C of token c and pass B of token b = c's predecessor in one sweep over S_{t-1} (sm)
 * and dS: c's dkh += a*(S_prev dpred), returns c's da (rows in increasing kk from +0); b's
 * dqh, dkh, ddelta as qt_gdn_bwd_b_v with st = sm. Same bits as the two passes apart. */
static inline __attribute__((always_inline)) float
qt_gdn_bwd_cb_v(float *restrict ds, const float *restrict sm, qt_gdn_tok *c, qt_gdn_tok *b,
                int64_t dk, const int nv)
{
    const __m512 vac = _mm512_set1_ps(c->a);
    const __m256 va8 = _mm256_set1_ps(c->a);
    const int64_t w = 16 * nv;
    __m512 dd[8], o[4];
    __m256 l[4][8];
    float da = 0.0f, r[8];
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) dd[u] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < dk; kk += 2) {
        const int two = kk + 1 < dk;
        if (two)
            qt_gdn_bwd_cb_rows(ds + kk * w, sm + kk * w, o, dd, c->dpred, b->delta, b->dor, vac,
                               c->kh + kk, b->kh + kk, b->qh + kk, 1, nv);
        else
            qt_gdn_bwd_cb_rows(ds + kk * w, sm + kk * w, o, dd, c->dpred, b->delta, b->dor, vac,
                               c->kh + kk, b->kh + kk, b->qh + kk, 0, nv);
        for (int i = 0; i < 4; i++) {
            if (two) qt_gdn_lanes_put2(l[i], kk, o[i]);
            else l[i][kk & 7] = _mm512_castps512_ps256(o[i]);
        }
        if ((kk & 7) == 6 && two) {
            float *dkr = c->dkh + kk - 6;
            _mm256_storeu_ps(dkr, _mm256_add_ps(_mm256_loadu_ps(dkr),
                                                _mm256_mul_ps(va8, qt_gdn_lanes_sum8(l[0]))));
            _mm256_storeu_ps(r, qt_gdn_lanes_sum8(l[1]));
            for (int q = 0; q < 8; q++) da += r[q];
            _mm256_storeu_ps(b->dqh + kk - 6, qt_gdn_lanes_sum8(l[2]));
            _mm256_storeu_ps(b->dkh + kk - 6, qt_gdn_lanes_sum8(l[3]));
        }
    }
    for (int64_t kk = dk & ~(int64_t)7; kk < dk; kk++) {
        c->dkh[kk] += c->a * qt_gdn_lanes_sum_v(l[0][kk & 7]);
        da += qt_gdn_lanes_sum_v(l[1][kk & 7]);
        b->dqh[kk] = qt_gdn_lanes_sum_v(l[2][kk & 7]);
        b->dkh[kk] = qt_gdn_lanes_sum_v(l[3][kk & 7]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) _mm512_storeu_ps(b->ddelta + 16 * u, dd[u]);
    return da;
}

/* The backward of tokens t0..t0+n-1 (row0 = the row of t0) of value head j on the blocked
 * path, last first, with every state at hand: S_0 = s0, S_i = sub + (i-1)*Dk*Dv
 * (1 <= i < n), the state after the last token `after` (NULL: formed from S_{n-1}), the
 * preds at pb + i*Dv. Pass C of token i and pass B of token i-1 run as one sweep over S_i
 * (qt_gdn_bwd_cb_v); the per-token steps between them keep their order for each token. */
static void qt_gdn_bwd_run_v(const qt_gdn_bwd_ctx *x, int64_t j, int64_t row0, int64_t n,
                             const float *s0, const float *sub, const float *after,
                             const float *pb)
{
    const int64_t dkdv = x->d.dkdv, dv = x->d.dv, dk = x->d.dk;
    const int nv = QT_GDN_BWD_NV(&x->d);
    qt_gdn_tok *c = &x->tok[0], *b = &x->tok[1];
    const float *sl = n > 1 ? sub + (n - 2) * dkdv : s0;
    qt_gdn_bwd_begin(x, c, j, row0 + n - 1, sl, pb + (n - 1) * dv);
    qt_gdn_bwd_pass_b(x, c, sl, after);
    float db = qt_gdn_bwd_mid(x, c);
    for (int64_t i = n - 1; i > 0; i--) {
        const float *sm = i > 1 ? sub + (i - 2) * dkdv : s0; /* S_{i-1}: b's S_prev */
        const float *si = sub + (i - 1) * dkdv;              /* S_i: c's S_prev */
        qt_gdn_bwd_begin(x, b, j, row0 + i - 1, sm, pb + (i - 1) * dv);
        float da;
        QT_GDN_BWD_CALL(nv, da = qt_gdn_bwd_cb_v(x->ds, si, c, b, dk, NV));
        qt_gdn_bwd_end(x, c, j, da, db);
        db = qt_gdn_bwd_mid(x, b);
        qt_gdn_tok *t = c;
        c = b;
        b = t;
    }
    qt_gdn_bwd_end(x, c, j, qt_gdn_bwd_pass_c(x, c, s0), db);
}
#endif

#ifdef QT_GDN_FWD_BLOCKED
/* The backward's boundary pass in column blocks of QT_GDN_FB, as the blocked forward (a
 * block's a*S in the contiguous buffer ab, Dk x QT_GDN_FB floats, S read once per token):
 * tokens t..t+cnt-1 of sequence s, value head j from the state s0 before token t; stores
 * only S_k for k = every, 2*every, ..., cnt (cnt a multiple of every) at
 * bst + (k/every - 1)*Dk*Dv. kb: 2*Dk floats. */
static void qt_gdn_rec_bounds_v(float *restrict ab, float *restrict bst,
                                const float *restrict s0, const qt_gdn_bwd_ctx *x, int64_t s,
                                int64_t j, int64_t t, int64_t cnt, int64_t every,
                                float *restrict kb)
{
    const qt_gdn_dims *d = &x->d;
    const int64_t dk = d->dk, dv = d->dv, h = j / d->r;
    for (int64_t x0 = 0; x0 < dv; x0 += QT_GDN_FB) {
        __m512 pr[QT_GDN_FBV], dl[QT_GDN_FBV];
        int64_t row = s * d->S + t;
        float *kc = kb, *kn = kb + dk;
        qt_gdn_load_k(kc, x->c + row * d->cc, x->rk[row * d->hk + h], h, d);
        float an = qt_gdn_decay(x->g, row, j, d);
        const __m512 va = _mm512_set1_ps(an);
        for (int u = 0; u < QT_GDN_FBV; u++) pr[u] = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < dk; kk++) { /* ab = a_0*S_0, pred_0 = sum ab*kh */
            const __m512 kv = _mm512_set1_ps(kc[kk]);
            for (int u = 0; u < QT_GDN_FBV; u++) {
                const __m512 as = _mm512_mul_ps(va, _mm512_loadu_ps(s0 + kk * dv + x0 + 16 * u));
                _mm512_storeu_ps(ab + kk * QT_GDN_FB + 16 * u, as);
                pr[u] = _mm512_fmadd_ps(as, kv, pr[u]);
            }
        }
        for (int64_t i = 0; i < cnt; i++, row++) {
            const float *v = x->c + row * d->cc + 2 * d->hk * dk + j * dv + x0;
            const __m512 vb = _mm512_set1_ps(x->beta[row * d->hv + j]);
            for (int u = 0; u < QT_GDN_FBV; u++) /* delta = bt * (v - pred) */
                dl[u] = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * u), pr[u]));
            float *sout = (i + 1) % every ? 0 : bst + ((i + 1) / every - 1) * d->dkdv + x0;
            if (i + 1 == cnt) { /* the last state, stored, no next token */
                qt_gdn_fwd_sweep_v(ab, 0, sout, dv, pr, dl, kc, 0, 0, an, dk, 0);
                break;
            }
            qt_gdn_load_k(kn, x->c + (row + 1) * d->cc, x->rk[(row + 1) * d->hk + h], h, d);
            an = qt_gdn_decay(x->g, row + 1, j, d);
            if (i + 2 < cnt) {
                const qt_real *c2 = x->c + (row + 2) * d->cc;
                qt_gdn_prefetch(c2 + d->hk * dk + h * dk, dk);
                qt_gdn_prefetch(c2 + 2 * d->hk * dk + j * dv + x0, QT_GDN_FB);
            }
            if (sout)
                qt_gdn_fwd_sweep_v(ab, 0, sout, dv, pr, dl, kc, 0, kn, an, dk, 0);
            else
                qt_gdn_fwd_sweep_v(ab, 0, 0, dv, pr, dl, kc, 0, kn, an, dk, 0);
            float *tk = kc;
            kc = kn;
            kn = tk;
        }
    }
}

/* Sub-chunk length for the blocked backward of a chunk of len tokens: the states of one
 * sub-chunk (QT_GDN_SUB_BYTES) stay in L2 while its tokens run backward. Scratch slots:
 * 0 the preds (q <= Dk rows), 1 the boundary pass's block buffer, then the nb = ceil(len/q)-1
 * sub-chunk boundary states, then q-1 states; 0 when they do not fit (the plain path runs). */
#define QT_GDN_SUB_BYTES (1 << 20)
static int64_t qt_gdn_bwd_sub(const qt_gdn_dims *d, int64_t len)
{
    if (d->scalar || d->dv % QT_GDN_FB) return 0;
    int64_t q = QT_GDN_SUB_BYTES / (4 * d->dkdv);
    q = q < 2 ? 2 : q;
    if (q >= len) return 0; /* the chunk's states fit: qt_gdn_bwd_recompute_v's path */
    const int64_t nb = (len + q - 1) / q - 1;
    return q <= d->dk && 1 + nb + q <= d->chunk ? q : 0;
}

/* One chunk's backward on the blocked path in sub-chunks of q tokens, last first: each is
 * recomputed from its boundary state (the checkpoint ck for the first), then runs backward;
 * next = the checkpoint after the chunk (NULL after the last chunk). */
static void qt_gdn_bwd_chunk_v(const qt_gdn_bwd_ctx *x, float *restrict slots,
                               const float *ck, const float *next, int64_t s, int64_t j,
                               int64_t t0, int64_t len, int64_t q)
{
    const int64_t dkdv = x->d.dkdv, nb = (len + q - 1) / q - 1;
    float *pb = slots, *ab = slots + dkdv, *bst = slots + 2 * dkdv, *sub = bst + nb * dkdv;
    if (nb) qt_gdn_rec_bounds_v(ab, bst, ck, x, s, j, t0, nb * q, q, x->dqh);
    for (int64_t m = nb; m >= 0; m--) {
        const int64_t tm = t0 + m * q, qm = len - m * q < q ? len - m * q : q;
        const float *s0 = m ? bst + (m - 1) * dkdv : ck;
        const float *after = m < nb ? bst + m * dkdv : next;
        qt_gdn_bwd_recompute_v(pb, sub, s0, x->c, x->g, x->beta, x->rq, x->rk, x->qscale, s,
                               j, tm, qm, x->qh, x->dqh, x->dkh, &x->d);
#ifdef QT_GDN_BWD_FUSED
        if (QT_GDN_BWD_FUSE(&x->d)) {
            qt_gdn_bwd_run_v(x, j, s * x->d.S + tm, qm, s0, sub, after, pb);
            continue;
        }
#endif
        for (int64_t i = qm - 1; i >= 0; i--)
            qt_gdn_bwd_token(x, j, s * x->d.S + tm + i, i ? sub + (i - 1) * dkdv : s0,
                             i + 1 < qm ? sub + i * dkdv : after, pb + i * x->d.dv);
    }
}
#endif

/* Recomputes chunk n of (s, j) into the slots (slot i: S_i for 1 <= i < len; S_0 is the
 * checkpoint); returns the stored preds (slot 0, blocked path) or NULL. */
static const qt_real *qt_gdn_bwd_recompute(qt_real *slots, const qt_real *ck,
                                           const qt_gdn_bwd_ctx *x, int64_t s, int64_t j,
                                           int64_t t0, int64_t len)
{
    const qt_gdn_dims *d = &x->d;
#ifdef QT_GDN_FWD_BLOCKED
    if (!d->scalar && d->dv % QT_GDN_FB == 0 && len <= d->dk) {
        qt_gdn_bwd_recompute_v(slots, slots + d->dkdv, ck, x->c, x->g, x->beta, x->rq, x->rk,
                               x->qscale, s, j, t0, len, x->qh, x->kh, x->dqh, d);
        return slots;
    }
#endif
    const int64_t h = j / d->r;
    for (int64_t i = 0; i + 1 < len; i++) {
        int64_t row = s * d->S + t0 + i;
        const qt_real *crow = x->c + row * d->cc;
        qt_gdn_load_qk(x->qh, x->kh, crow, x->rq[row * d->hk + h], x->rk[row * d->hk + h],
                       x->qscale, h, d);
        qt_gdn_copy(slots + (i + 1) * d->dkdv, i ? slots + i * d->dkdv : ck, d->dkdv);
        qt_gdn_step(slots + (i + 1) * d->dkdv, 0, x->delta, x->qh, x->kh,
                    crow + 2 * d->hk * d->dk + j * d->dv, qt_gdn_decay(x->g, row, j, d),
                    x->beta[row * d->hv + j], d);
    }
    return NULL;
}

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
    qt_gdn_bwd_ctx x;
    qt_gdn_tok tok[2];
    x.tok = tok;
    x.d = qt_gdn_make_dims(S, hk, dk, hv, dv, chunk);
    x.d.scalar = scalar;
    x.d.pos = pos;
    qt_real *slots = scratch;             /* slot i: state before token i (i >= 1) */
    x.ds = scratch + chunk * x.d.dkdv;    /* dL/dS after the current token */
    x.qh = x.ds + x.d.dkdv, x.kh = x.qh + dk, x.dqh = x.kh + dk, x.dkh = x.dqh + dk;
    x.delta = x.dkh + dk + dv;
    x.dc = dc, x.dg = dg, x.dbeta = dbeta, x.rq = rq, x.rk = rk, x.d_o = d_o, x.c = c;
    x.g = g, x.beta = beta, x.qscale = qscale;

    for (int64_t s = 0; s < b; s++) {
        for (int64_t j = 0; j < hv; j++) {
            const qt_real *base = states + (s * hv + j) * x.d.nch * x.d.dkdv;
            qt_gdn_zero(x.ds, x.d.dkdv);
            for (int64_t n = x.d.nch - 1; n >= 0; n--) {
                int64_t t0 = n * chunk, len = S - t0 < chunk ? S - t0 : chunk;
                const qt_real *ck = base + n * x.d.dkdv;
                const qt_real *next = n + 1 < x.d.nch ? ck + x.d.dkdv : NULL;
#ifdef QT_GDN_FWD_BLOCKED
                const int64_t q = qt_gdn_bwd_sub(&x.d, len);
                if (q) {
                    qt_gdn_bwd_chunk_v(&x, slots, ck, next, s, j, t0, len, q);
                    continue;
                }
#endif
                const qt_real *pb = qt_gdn_bwd_recompute(slots, ck, &x, s, j, t0, len);
#ifdef QT_GDN_BWD_FUSED
                if (pb && QT_GDN_BWD_FUSE(&x.d)) {
                    qt_gdn_bwd_run_v(&x, j, s * S + t0, len, ck, slots + x.d.dkdv, next, pb);
                    continue;
                }
#endif
                for (int64_t i = len - 1; i >= 0; i--)
                    qt_gdn_bwd_token(&x, j, s * S + t0 + i, i ? slots + i * x.d.dkdv : ck,
                                     i + 1 < len ? slots + (i + 1) * x.d.dkdv : next,
                                     pb ? pb + i * dv : NULL);
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
