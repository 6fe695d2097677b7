/* gdn_chunk.h - Gated DeltaNet core (QT_OP_GDN_CORE_*, attribute a7 = 1) in chunked (WY)
 * form: the same op semantics as gdn_core.h, computed per chunk of `chunk` tokens with
 * matmul-shaped loops instead of per-token rank-1 updates.
 *
 * Same inputs, outputs and saved tensors as gdn_core.h: o[T,Hv*Dv], states[b,Hv,nchunks,
 * Dk*Dv] (state before the first token of each chunk), rq[T,Hk], rk[T,Hk]; so the two
 * forms are interchangeable behind one op. Unlike the recurrent form the chunk size is
 * part of the arithmetic here (it decides which products are formed), so results depend
 * on it at rounding level; for a fixed chunk size every result has one fixed order.
 * Float (qt_gdn_chunk_*) and double (*_f64, unit tests) versions from one source.
 */
#ifndef QT_GDN_CHUNK_H
#define QT_GDN_CHUNK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows of the per-chunk work buffers: the chunk, or the sequence when it is shorter. */
#define QT_GDN_CHUNK_ROWS(chunk, S) ((chunk) < (S) ? (chunk) : (S))

/* Scratch reals, with C = QT_GDN_CHUNK_ROWS(chunk, S):
 * forward  2*C*Dk + 2*C*Dv + 4*C*C + 3*C (Qh, Kh, P0, Delta, Dec, QK, KK, A, G, e, wl);
 * backward Dk*Dv + 4*C*Dk + 4*C*Dv + 7*C*C + 5*C (adds dS, dQh, dKh, dDelta, dRHS,
 *          dQK, dKK, dDec, dG, dbeta). */
#define QT_GDN_CHUNK_FWD_SCRATCH(C, dk, dv) \
    (2 * (C) * (dk) + 2 * (C) * (dv) + 4 * (C) * (C) + 3 * (C))
#define QT_GDN_CHUNK_BWD_SCRATCH(C, dk, dv) \
    ((dk) * (dv) + 4 * (C) * (dk) + 4 * (C) * (dv) + 7 * (C) * (C) + 5 * (C))

/* fwd: writes o[T,Hv*Dv], states (saved), rq[T,Hk], rk[T,Hk] (saved); reads c[T,Cc],
 *   g[T,Hv], beta[T,Hv]; uses scratch (QT_GDN_CHUNK_FWD_SCRATCH reals). Does nothing when
 *   chunk < 1.
 * bwd: accumulates dc[T,Cc] (q, k and v channels), dg[T,Hv], dbeta[T,Hv]; reads the saved
 *   states, rq, rk, the upstream do[T,Hv*Dv] and c, g, beta; uses scratch
 *   (QT_GDN_CHUNK_BWD_SCRATCH reals). Value heads run in increasing j, so a key head's
 *   channels receive its r value heads' gradients in increasing j.
 * The *_pos forms take packed documents: pos[T] (int32, each row's position in its
 *   document, 0 at a start; NULL = the plain forms) restarts the state at every document
 *   start, inside a chunk and across chunks, as the recurrent form does (gdn_chunk.c).
 * g must be <= 0 (as GDN_GATES produces) for every exponent to be <= 0; the formulas hold
 * for any g but exp(G_i) may then overflow on long chunks. Summation orders: gdn_chunk.c. */
#define QT_GDN_CHUNK_DECLARE(R, SFX)                                                       \
    void qt_gdn_chunk_fwd##SFX(R *o, R *states, R *rq, R *rk, const R *c, const R *g,       \
                               const R *beta, R *scratch, int64_t b, int64_t S, int64_t hk, \
                               int64_t dk, int64_t hv, int64_t dv, int64_t chunk, R qscale, \
                               R l2eps);                                                    \
    void qt_gdn_chunk_bwd##SFX(R *dc, R *dg, R *dbeta, const R *states, const R *rq,        \
                               const R *rk, const R *d_o, const R *c, const R *g,           \
                               const R *beta, R *scratch, int64_t b, int64_t S, int64_t hk, \
                               int64_t dk, int64_t hv, int64_t dv, int64_t chunk,           \
                               R qscale, R l2eps);                                          \
    void qt_gdn_chunk_fwd_pos##SFX(R *o, R *states, R *rq, R *rk, const R *c, const R *g,   \
                                   const R *beta, const int32_t *pos, R *scratch, int64_t b, \
                                   int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv, \
                                   int64_t chunk, R qscale, R l2eps);                       \
    void qt_gdn_chunk_bwd_pos##SFX(R *dc, R *dg, R *dbeta, const R *states, const R *rq,    \
                                   const R *rk, const R *d_o, const R *c, const R *g,       \
                                   const R *beta, const int32_t *pos, R *scratch, int64_t b, \
                                   int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv, \
                                   int64_t chunk, R qscale, R l2eps);

QT_GDN_CHUNK_DECLARE(float, )
QT_GDN_CHUNK_DECLARE(double, _f64)

#ifdef __cplusplus
}
#endif

#endif
