/* gdn_gates.c - beta = sigmoid(b), g = -exp(A_log)*softplus(a + dt_bias) and their
 * gradients (contract: gdn_gates.h, qt_ops.h QT_OP_GDN_GATES_*).
 *
 * Invariants: g is evaluated as (-exp(A_log)) * softplus(x) everywhere (forward and the
 * wgrad's dg/dA_log = g), so recomputed values have the forward's bits; the weight
 * gradient sums tokens in increasing order, one sequence per call.
 */
#include "qt_real.h"
#include "kernels/gdn_gates.h"

void QT_FN(qt_gdn_gates_fwd)(qt_real *restrict beta, qt_real *restrict g,
                             const qt_real *restrict ba, const qt_real *restrict a_log,
                             const qt_real *restrict dt_bias, int64_t T, int64_t hk,
                             int64_t hv)
{
    int64_t r = hv / hk;
    for (int64_t t = 0; t < T; t++) {
        const qt_real *row = ba + t * 2 * hv;
        for (int64_t j = 0; j < hv; j++) {
            int64_t h = j / r, u = j % r;
            qt_real neg_a = -QT_EXP(a_log[j]);
            beta[t * hv + j] = QT_SIGMOID(row[h * 2 * r + u]);
            g[t * hv + j] = neg_a * QT_SOFTPLUS(row[h * 2 * r + r + u] + dt_bias[j]);
        }
    }
}

void QT_FN(qt_gdn_gates_bwd)(qt_real *restrict dba, const qt_real *restrict dbeta,
                             const qt_real *restrict dg, const qt_real *restrict ba,
                             const qt_real *restrict a_log, const qt_real *restrict dt_bias,
                             int64_t T, int64_t hk, int64_t hv)
{
    int64_t r = hv / hk;
    for (int64_t t = 0; t < T; t++) {
        const qt_real *row = ba + t * 2 * hv;
        qt_real *drow = dba + t * 2 * hv;
        for (int64_t j = 0; j < hv; j++) {
            int64_t h = j / r, u = j % r, cb = h * 2 * r + u, ca = h * 2 * r + r + u;
            qt_real bt = QT_SIGMOID(row[cb]);
            qt_real neg_a = -QT_EXP(a_log[j]);
            /* softplus'(x) = sigmoid(x) */
            qt_real sp1 = QT_SIGMOID(row[ca] + dt_bias[j]);
            drow[cb] += dbeta[t * hv + j] * (bt * (QT_R(1.0) - bt));
            drow[ca] += dg[t * hv + j] * (neg_a * sp1);
        }
    }
}

void QT_FN(qt_gdn_gates_wgrad)(qt_real *restrict da_log, qt_real *restrict ddt_bias,
                               const qt_real *restrict dg, const qt_real *restrict ba,
                               const qt_real *restrict a_log,
                               const qt_real *restrict dt_bias, int64_t S, int64_t hk,
                               int64_t hv)
{
    int64_t r = hv / hk;
    for (int64_t t = 0; t < S; t++) {
        const qt_real *row = ba + t * 2 * hv;
        for (int64_t j = 0; j < hv; j++) {
            int64_t h = j / r, u = j % r;
            qt_real x = row[h * 2 * r + r + u] + dt_bias[j];
            qt_real neg_a = -QT_EXP(a_log[j]);
            qt_real gv = neg_a * QT_SOFTPLUS(x);
            qt_real d = dg[t * hv + j];
            /* dg/dA_log = g because A_log enters only through exp(A_log) */
            da_log[j] += d * gv;
            ddt_bias[j] += d * (neg_a * QT_SIGMOID(x));
        }
    }
}
