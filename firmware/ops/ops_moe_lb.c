/* ops_moe_lb.c - the load-balance term's exchanges over a context group, shared by the fp32
 * router wrapper (ops_moe.c) and its bf16 form (ops_bf16_seq.c), declared in qt_ops_bf16.h.
 *
 * A sequence split over C context ranks: the router's per-block expert counts all-gathered
 * and summed in block order (integers: exact), and the probability sums Pbar continued
 * along the group in token order (a chain of b x E floats through qt_coll_pass), so the
 * term and its gradient are one rank's. In its own file so that neither wrapper file
 * depends on the other (tests/layers.txt: no circle). No heap: the buffers are the op's
 * scratch slot.
 */
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"
#include "../kernels/moe_route.h"
#include "../comm/qt_coll.h"
#include "base/qt_err.h"

/* The load-balance counts of a sequence split over the context group `mask` of Cc ranks:
 * this rank's block counts into its slot of buf[Cc x n] (n = b*E), an all-gather, then
 * buf[0..n) = the blocks' sum in block order (integers: exact). Returns the group index
 * (>= 0) or a negative QT_E_* code. */
int qt_moe_lb_counts(int32_t *buf, const int32_t *idx, int64_t T, int64_t E, int64_t k,
                     int64_t S, unsigned mask, int64_t Cc)
{
    const int64_t n = T / S * E;
    const int c = qt_comm_group_index(mask), R = qt_comm_group_size(mask);
    if (c < 0 || R < 0) return c < 0 ? c : R;
    if (R != Cc)
        return qt_fail(QT_E_PLAN, "load-balance loss: context group mask 0x%x has %d ranks, "
                       "the op's context degree is %lld", mask, R, (long long)Cc);
    qt_moe_capacity_counts(buf + c * n, idx, T, E, k, S);
    int rc = qt_coll_all_gather(mask, buf, n * (int64_t)sizeof(int32_t));
    if (rc) return rc;
    for (int64_t i = 0; i < n; i++) {
        int32_t sum = 0;
        for (int j = 0; j < R; j++) sum += buf[j * n + i];
        buf[i] = sum;
    }
    return c;
}

/* The term on a context rank (qt_ops.def MOE_ROUTE_FWD), before this rank's Pbar rows: the
 * counts (from the routed idx), then the Pbar chain received from rank c-1 (zeros on rank
 * 0) into *pbar. Returns c or a negative QT_E_* code. */
int qt_moe_lb_ctx_begin(const qt_op *op, const qt_ctx *ctx, float **pbar)
{
    const int64_t T = QT_A(op, MOE_ROUTE_FWD, T), E = QT_A(op, MOE_ROUTE_FWD, E),
                  S = QT_A(op, MOE_ROUTE_FWD, S), Cc = QT_A(op, MOE_ROUTE_FWD, ctx),
                  n = T / S * E;
    const unsigned mask = (unsigned)QT_A(op, MOE_ROUTE_FWD, mask);
    int32_t *buf = qt_i32(ctx, QT_T(op, MOE_ROUTE_FWD, scratch));
    *pbar = (float *)(void *)(buf + Cc * n);
    const int c = qt_moe_lb_counts(buf, qt_i32(ctx, QT_T(op, MOE_ROUTE_FWD, idx)), T, E,
                                   QT_A(op, MOE_ROUTE_FWD, k), S, mask, Cc);
    if (c < 0) return c;
    int rc = QT_OK;
    if (c > 0) rc = qt_coll_pass(mask, -1, 0, 0, c - 1, *pbar, n * (int64_t)sizeof(float));
    else
        for (int64_t i = 0; i < n; i++) (*pbar)[i] = 0.0f;
    return rc ? rc : c;
}

/* ... after them: the chain passed on to c+1, or on the last rank the term into lb. */
int qt_moe_lb_ctx_end(const qt_op *op, const qt_ctx *ctx, float *lb, const float *pbar, int c)
{
    const int64_t T = QT_A(op, MOE_ROUTE_FWD, T), E = QT_A(op, MOE_ROUTE_FWD, E),
                  S = QT_A(op, MOE_ROUTE_FWD, S), Cc = QT_A(op, MOE_ROUTE_FWD, ctx),
                  n = T / S * E;
    if (c + 1 < Cc)
        return qt_coll_pass((unsigned)QT_A(op, MOE_ROUTE_FWD, mask), c + 1, pbar,
                            n * (int64_t)sizeof(float), -1, 0, 0);
    qt_moe_lb_term(lb, qt_i32(ctx, QT_T(op, MOE_ROUTE_FWD, scratch)), pbar, T / S, E, S * Cc,
                   op->f[0]);
    return QT_OK;
}
