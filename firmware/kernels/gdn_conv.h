/* gdn_conv.h - Gated DeltaNet short causal depthwise convolution + SiLU (QT_OP_GDN_CONV_*).
 *
 * Channels are the [q | k | v] part of the grouped in_proj_qkvz output, in the conv channel
 * order of qt_ops.h (q[h][i] = h*Dk+i, k[h][i] = Hk*Dk+h*Dk+i, v[j][i] = 2*Hk*Dk+j*Dv+i);
 * z is never touched. Cc = 2*Hk*Dk + Hv*Dv, G = 2*Dk + 2*(Hv/Hk)*Dv, qkvz rows are Hk*G wide.
 * Tap K-1 multiplies the current token; taps before the start of a sequence read 0, so no
 * value crosses a sequence boundary.
 *
 * Every function exists as float (qt_gdn_conv_*) and double (qt_gdn_conv_*_f64, unit tests
 * only), compiled from the same source through qt_real.h.
 */
#ifndef QT_GDN_CONV_H
#define QT_GDN_CONV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fwd: writes c[T,Cc] = silu(pre) and pre[T,Cc] (saved), T = b*S.
 *   pre[t,c] = sum_{j=0..K-1} w[c,j] * u[t-K+1+j, c], j increasing, u = 0 before the
 *   sequence start; reads qkvz[T, Hk*G] (q/k/v columns) and w[Cc,K].
 * bwd: accumulates dqkvz[T, Hk*G] (q/k/v columns only) += sum over taps of
 *   dpre[t,c] * w[c,j] with dpre = dc * silu'(pre); per element taps j increasing, the
 *   tap sum is added once. Reads pre, dc [T,Cc] and w.
 * wgrad: one sequence of S rows (pointers already at its first row): accumulates
 *   dw[c,j] += dpre[t,c] * u[t-K+1+j, c] for t increasing. Reads pre, dc, qkvz.
 * wgrad_rows: the same over the rows [t0, t1) of the sequence only (one canonical token
 *   block, docs/context.md): the taps still read u at t-K+1+j >= 0 before t0, so the
 *   block's leaf is exact; wgrad = wgrad_rows over [0, S).
 * *_pos: packed documents: pos[T] (the pos argument indexed like the rows: wgrad_rows'
 *   from the sequence's first row) is each token's position inside its document; taps
 *   before the document's first token t - pos[t] read 0 exactly as taps before the
 *   sequence start (skipped), so no value crosses a document; pos NULL = the plain names.
 * Argument order: outputs, saved statistics, inputs, weights, sizes.
 * *_ref: the untiled scalar references of fwd / bwd / wgrad (same contract, bit-identical;
 * the tests compare them; the tiled versions fall back to them for K > 32). */
#define QT_GDN_CONV_DECLARE(R, SFX)                                                       \
    void qt_gdn_conv_fwd##SFX(R *c, R *pre, const R *qkvz, const R *w, int64_t b,         \
                              int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,   \
                              int64_t K);                                                  \
    void qt_gdn_conv_bwd##SFX(R *dqkvz, const R *pre, const R *dc, const R *w, int64_t b,  \
                              int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,   \
                              int64_t K);                                                  \
    void qt_gdn_conv_wgrad##SFX(R *dw, const R *pre, const R *dc, const R *qkvz,           \
                                int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv, \
                                int64_t K);                                                \
    void qt_gdn_conv_bwd_ref##SFX(R *dqkvz, const R *pre, const R *dc, const R *w,         \
                                  int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,\
                                  int64_t dv, int64_t K);                                  \
    void qt_gdn_conv_wgrad_ref##SFX(R *dw, const R *pre, const R *dc, const R *qkvz,       \
                                    int64_t S, int64_t hk, int64_t dk, int64_t hv,         \
                                    int64_t dv, int64_t K);                                \
    void qt_gdn_conv_wgrad_rows##SFX(R *dw, const R *pre, const R *dc, const R *qkvz,      \
                                     int64_t t0, int64_t t1, int64_t hk, int64_t dk,       \
                                     int64_t hv, int64_t dv, int64_t K);                   \
    void qt_gdn_conv_wgrad_rows_ref##SFX(R *dw, const R *pre, const R *dc, const R *qkvz,  \
                                         int64_t t0, int64_t t1, int64_t hk, int64_t dk,   \
                                         int64_t hv, int64_t dv, int64_t K);           \
    void qt_gdn_conv_fwd_pos##SFX(R *c, R *pre, const R *qkvz, const R *w,                \
                                  const int32_t *pos, int64_t b, int64_t S, int64_t hk,    \
                                  int64_t dk, int64_t hv, int64_t dv, int64_t K);          \
    void qt_gdn_conv_fwd_ref_pos##SFX(R *c, R *pre, const R *qkvz, const R *w,            \
                                      const int32_t *pos, int64_t b, int64_t S, int64_t hk,\
                                      int64_t dk, int64_t hv, int64_t dv, int64_t K);      \
    void qt_gdn_conv_bwd_pos##SFX(R *dqkvz, const R *pre, const R *dc, const R *w,        \
                                  const int32_t *pos, int64_t b, int64_t S, int64_t hk,    \
                                  int64_t dk, int64_t hv, int64_t dv, int64_t K);          \
    void qt_gdn_conv_bwd_ref_pos##SFX(R *dqkvz, const R *pre, const R *dc, const R *w,    \
                                      const int32_t *pos, int64_t b, int64_t S, int64_t hk,\
                                      int64_t dk, int64_t hv, int64_t dv, int64_t K);      \
    void qt_gdn_conv_wgrad_rows_pos##SFX(R *dw, const R *pre, const R *dc, const R *qkvz, \
                                         const int32_t *pos, int64_t t0, int64_t t1,       \
                                         int64_t hk, int64_t dk, int64_t hv, int64_t dv,   \
                                         int64_t K);                                       \
    void qt_gdn_conv_wgrad_rows_ref_pos##SFX(R *dw, const R *pre, const R *dc,            \
                                             const R *qkvz, const int32_t *pos, int64_t t0,\
                                             int64_t t1, int64_t hk, int64_t dk,           \
                                             int64_t hv, int64_t dv, int64_t K);

QT_GDN_CONV_DECLARE(float, )
QT_GDN_CONV_DECLARE(double, _f64)

#ifdef __cplusplus
}
#endif

#endif
