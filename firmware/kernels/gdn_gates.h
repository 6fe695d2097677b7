/* gdn_gates.h - Gated DeltaNet gates (QT_OP_GDN_GATES_*):
 *   beta[t,j] = sigmoid(b[t,j]),  g[t,j] = -exp(A_log[j]) * softplus(a[t,j] + dt_bias[j]).
 *
 * ba rows are 2*Hv wide in the grouped layout of qt_ops.h: b[j] at column h*2r + u,
 * a[j] at h*2r + r + u, with j = h*r + u, r = Hv/Hk. beta and g are [T,Hv].
 * Float (qt_gdn_gates_*) and double (*_f64, unit tests) versions from one source.
 */
#ifndef QT_GDN_GATES_H
#define QT_GDN_GATES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fwd: writes beta[T,Hv], g[T,Hv]; reads ba[T,2Hv], A_log[Hv], dt_bias[Hv].
 * bwd: accumulates dba[T,2Hv] (b columns += dbeta*beta*(1-beta), a columns
 *   += dg*(-exp(A_log))*sigmoid(a+dt_bias)); reads dbeta, dg [T,Hv], ba, A_log, dt_bias.
 * wgrad: one sequence of S rows (pointers at its first row): accumulates
 *   dA_log[j] += dg*g and ddt_bias[j] += dg*(-exp(A_log))*sigmoid(a+dt_bias), tokens in
 *   increasing order; reads dg, ba, A_log, dt_bias. */
#define QT_GDN_GATES_DECLARE(R, SFX)                                                      \
    void qt_gdn_gates_fwd##SFX(R *beta, R *g, const R *ba, const R *a_log,                \
                               const R *dt_bias, int64_t T, int64_t hk, int64_t hv);       \
    void qt_gdn_gates_bwd##SFX(R *dba, const R *dbeta, const R *dg, const R *ba,           \
                               const R *a_log, const R *dt_bias, int64_t T, int64_t hk,    \
                               int64_t hv);                                                \
    void qt_gdn_gates_wgrad##SFX(R *da_log, R *ddt_bias, const R *dg, const R *ba,         \
                                 const R *a_log, const R *dt_bias, int64_t S, int64_t hk,  \
                                 int64_t hv);

QT_GDN_GATES_DECLARE(float, )
QT_GDN_GATES_DECLARE(double, _f64)

#ifdef __cplusplus
}
#endif

#endif
