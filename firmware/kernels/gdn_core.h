/* gdn_core.h - Gated DeltaNet core (QT_OP_GDN_CORE_*): head repeat, l2norm of q and k,
 * query scale and the recurrent gated delta rule, with per-chunk state checkpoints.
 *
 * Per sequence and value head j (key head h = j / r, r = Hv/Hk), S_0 = 0, for each token:
 *   qh = (q_h*rq)*qscale, kh = k_h*rk, rq = 1/sqrt(sum q_h^2 + l2eps) (rk likewise);
 *   a = exp(g); S' = a*S; pred = S'^T kh; delta = beta*(v_j - pred);
 *   S = S' + kh delta^T; o = S^T qh.
 * The FMA contract (2026-12-02; before it every multiply-add was a multiply and an add):
 * with fma(x, y, z) = x*y + z rounded once, and every sum from +0,
 *   S'[i][x] = a*S[i][x];  pred[x] = fma(S'[i][x], kh[i], pred[x]) for i = 0..Dk-1;
 *   delta[x] = beta*(v[x] - pred[x]);  S[i][x] = fma(kh[i], delta[x], S'[i][x]);
 *   o[x] = fma(S[i][x], qh[i], o[x]) for i = 0..Dk-1.
 * The backward (dS the gradient after the token, S_t the state after it, S_p before it):
 *   dS[i][x] = fma(qh[i], do[x], dS[i][x]);  ddelta[x] = fma(dS[i][x], kh[i], .) over i;
 *   dqh[i] = rowsum(S_t[i][x] * do[x]);  dkh[i] = rowsum(dS[i][x] * delta[x])
 *     + a * rowsum(S_p[i][x] * dpred[x]);  dpred = -(beta*ddelta);
 *   dS'[i][x] = fma(kh[i], dpred[x], dS[i][x]);  da = sum over i (increasing) of
 *     rowsum(dS'[i][x] * S_p[i][x]);  dS_prev = a*dS'.
 * rowsum(p[x]) over x < Dv: 16 lanes, lane l = fma chain of p[x] for x = l mod 16 in
 * increasing x; f_l = lane_l + lane_{l+8} (l < 8); ((f0+f1)+(f2+f3))+((f4+f5)+(f6+f7)).
 * The per-token vectors (norms, delta, db = ddelta.(v - pred), the l2norm backward) keep a
 * separate multiply and add. Every path (AVX-512, the scalar step with __builtin_fmaf on
 * x86-64-v3) gives these bits; a float build without FMA is refused.
 * States are [Dk][Dv] row-major. states[b,Hv,nchunks,Dk,Dv] holds the state before the
 * first token of each chunk of `chunk` tokens (nchunks = ceil(S/chunk), last chunk may be
 * partial). c rows are Cc = 2*Hk*Dk + Hv*Dv wide in the conv channel order of qt_ops.h.
 *
 * The checkpoint interval never changes a result: the backward recomputes each chunk's
 * states from its checkpoint with the forward's own step function, so both directions are
 * bit-identical for every chunk size.
 * Float (qt_gdn_core_*) and double (*_f64, unit tests) versions from one source.
 */
#ifndef QT_GDN_CORE_H
#define QT_GDN_CORE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest Dv the forward supports (its per-step vectors live on the stack; the firmware
 * has no heap and the FWD op has no scratch slot). configgen must reject larger heads. */
#define QT_GDN_CORE_MAX_DIM 512

/* Scratch floats the backward needs: (chunk+1)*Dk*Dv + 4*Dk + 4*Dv (as qt_ops.h). */
#define QT_GDN_CORE_SCRATCH(chunk, dk, dv) \
    (((chunk) + 1) * (dk) * (dv) + 4 * (dk) + 4 * (dv))

/* fwd: writes o[T,Hv*Dv], states (saved), rq[T,Hk], rk[T,Hk] (saved); reads c[T,Cc],
 *   g[T,Hv], beta[T,Hv]. Does nothing if dk or dv exceeds QT_GDN_CORE_MAX_DIM.
 * bwd: accumulates dc[T,Cc] (q, k and v channels), dg[T,Hv], dbeta[T,Hv]; reads the saved
 *   states, rq, rk, the upstream do[T,Hv*Dv] and c, g, beta; uses scratch
 *   (QT_GDN_CORE_SCRATCH reals). Value heads run in increasing j, so a key head's
 *   channels receive its r value heads' gradients in increasing j.
 * *_pos: packed documents: pos[T] is each row's position in its document; a row with
 *   pos 0 starts from the zero state (its decay is taken as 0: gdn_core.c qt_gdn_decay),
 *   so no state or gradient crosses a document; pos NULL = the plain forms.
 * Every sum has a fixed order (above: increasing index, or the 16 fma lanes of rowsum for
 * the backward's per-row sums over Dv). The *_ref forms run the scalar step only (the tests
 * compare the vector step's bits to them and pin the fma order). */
#define QT_GDN_CORE_DECLARE(R, SFX)                                                        \
    void qt_gdn_core_fwd##SFX(R *o, R *states, R *rq, R *rk, const R *c, const R *g,        \
                              const R *beta, int64_t b, int64_t S, int64_t hk, int64_t dk,  \
                              int64_t hv, int64_t dv, int64_t chunk, R qscale, R l2eps);    \
    void qt_gdn_core_bwd##SFX(R *dc, R *dg, R *dbeta, const R *states, const R *rq,         \
                              const R *rk, const R *d_o, const R *c, const R *g,            \
                              const R *beta, R *scratch, int64_t b, int64_t S, int64_t hk,  \
                              int64_t dk, int64_t hv, int64_t dv, int64_t chunk, R qscale,  \
                              R l2eps);                                                     \
    void qt_gdn_core_fwd_ref##SFX(R *o, R *states, R *rq, R *rk, const R *c, const R *g,    \
                                  const R *beta, int64_t b, int64_t S, int64_t hk,          \
                                  int64_t dk, int64_t hv, int64_t dv, int64_t chunk,        \
                                  R qscale, R l2eps);                                       \
    void qt_gdn_core_bwd_ref##SFX(R *dc, R *dg, R *dbeta, const R *states, const R *rq,     \
                                  const R *rk, const R *d_o, const R *c, const R *g,        \
                                  const R *beta, R *scratch, int64_t b, int64_t S,          \
                                  int64_t hk, int64_t dk, int64_t hv, int64_t dv,           \
                                  int64_t chunk, R qscale, R l2eps);                        \
    void qt_gdn_core_fwd_pos##SFX(R *o, R *states, R *rq, R *rk, const R *c, const R *g,    \
                                  const R *beta, const int32_t *pos, int64_t b, int64_t S,  \
                                  int64_t hk, int64_t dk, int64_t hv, int64_t dv,           \
                                  int64_t chunk, R qscale, R l2eps);                        \
    void qt_gdn_core_bwd_pos##SFX(R *dc, R *dg, R *dbeta, const R *states, const R *rq,     \
                                  const R *rk, const R *d_o, const R *c, const R *g,        \
                                  const R *beta, const int32_t *pos, R *scratch, int64_t b, \
                                  int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,\
                                  int64_t chunk, R qscale);

QT_GDN_CORE_DECLARE(float, )
QT_GDN_CORE_DECLARE(double, _f64)

#ifdef __cplusplus
}
#endif

#endif
