/* ops_moe.c - op wrappers for MoE routing, the routed expert FFN and the combine.
 *
 * Each wrapper resolves its op record's slots exactly as qt_ops.h documents them and calls
 * the kernel. Scratch sizes come from the scratch tensor's numel, so the kernels can check
 * them. The WGRAD wrapper offsets every row-indexed input to sequence `seq` (rows
 * [seq*S, (seq+1)*S) of x, i.e. (t, slot) rows [seq*S*k, (seq+1)*S*k)) and accumulates into
 * dw[0] (W_gu) and dw[1] (W_down); on an expert host (the WGRAD's seg slot set) the
 * sequence's rows are its packed rows instead. When the plan gives the BWD op its dgu slot, the BWD
 * parks d(gu) there and the WGRAD reads it instead of recomputing it (same bits).
 * Token dropping (MOE_CAPACITY) turns dropped assignments into expert id -1, which the expert
 * kernels and the exchange skip, and MOE_COMBINE skips their slots. Under context
 * parallelism it first all-gathers the context group's per-sequence expert counts (integers)
 * and continues the queue from the earlier blocks' sum, so a split sequence keeps one rank's
 * token order; a failed exchange stops the step through ctx->status. The load-balance term of
 * a sequence split over context does the same with the router's counts (forward and
 * backward) and continues the probability sums along the group in token order (a chain of
 * b x E floats, qt_coll_pass; ops_moe_lb.c), so the term and its gradient are one rank's.
 * Token dropping by an expert-parallel receive buffer (MOE_RAGGED, ragged_buffer_factor)
 * all-gathers the expert group's per-expert counts (integers) and marks the rows past their
 * host's buffer -1 the same way, before any row leaves its home rank.
 */
#include <stdio.h>
#include <string.h>
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"
#include "../kernels/moe_route.h"
#include "../kernels/expert_ffn.h"
#include "../kernels/moe_combine.h"
#include "../comm/qt_coll.h"
#include "base/qt_err.h"

/* The term on a context rank: the counts, the Pbar chain through this rank's rows. */
static int qt_moe_lb_ctx_fwd(const qt_op *op, const qt_ctx *ctx, float *lb)
{
    float *pbar;
    const int c = qt_moe_lb_ctx_begin(op, ctx, &pbar);
    if (c < 0) return c;
    qt_moe_lb_pbar(pbar, qt_f32(ctx, QT_T(op, MOE_ROUTE_FWD, logits)), QT_A(op, MOE_ROUTE_FWD, T),
                   QT_A(op, MOE_ROUTE_FWD, E), QT_A(op, MOE_ROUTE_FWD, S));
    return qt_moe_lb_ctx_end(op, ctx, lb, pbar, c);
}

/* MOE_ROUTE_FWD: with a context degree > 1 and the load-balance term on, the kernel routes
 * and the term is formed from the group's combined statistics (qt_moe_lb_ctx_fwd). */
void qt_op_moe_route_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_moe_route_fwd(op, ctx);
        return;
    }
    float *lb = QT_T(op, MOE_ROUTE_FWD, lb_seq) != QT_NONE
                    ? qt_f32(ctx, QT_T(op, MOE_ROUTE_FWD, lb_seq))
                    : 0;
    const int split = lb && op->f[0] != 0.0f && QT_A(op, MOE_ROUTE_FWD, ctx) > 1;
    qt_moe_route_fwd(qt_i32(ctx, QT_T(op, MOE_ROUTE_FWD, idx)),
                     qt_f32(ctx, QT_T(op, MOE_ROUTE_FWD, p)), split ? 0 : lb,
                     qt_f32(ctx, QT_T(op, MOE_ROUTE_FWD, logits)), QT_A(op, MOE_ROUTE_FWD, T),
                     QT_A(op, MOE_ROUTE_FWD, E), QT_A(op, MOE_ROUTE_FWD, k),
                     QT_A(op, MOE_ROUTE_FWD, S), op->f[0]);
    if (!split) return;
    const int rc = qt_moe_lb_ctx_fwd(op, ctx, lb);
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* MOE_ROUTE_BWD: the routing part, then (context degree > 1) the load-balance part from the
 * whole sequence's counts: the kernel's order (routing rows first, then the term). */
void qt_op_moe_route_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_moe_route_bwd(op, ctx);
        return;
    }
    const int split = op->f[0] != 0.0f && QT_A(op, MOE_ROUTE_BWD, ctx) > 1;
    float *dl = qt_f32(ctx, QT_T(op, MOE_ROUTE_BWD, dlogits));
    const float *logits = qt_f32(ctx, QT_T(op, MOE_ROUTE_BWD, logits));
    const int64_t T = QT_A(op, MOE_ROUTE_BWD, T), E = QT_A(op, MOE_ROUTE_BWD, E),
                  k = QT_A(op, MOE_ROUTE_BWD, k), S = QT_A(op, MOE_ROUTE_BWD, S),
                  Cc = QT_A(op, MOE_ROUTE_BWD, ctx);
    const int32_t *idx = qt_i32(ctx, QT_T(op, MOE_ROUTE_BWD, idx));
    qt_moe_route_bwd(dl, qt_f32(ctx, QT_T(op, MOE_ROUTE_BWD, dp)), logits, idx,
                     qt_f32(ctx, QT_T(op, MOE_ROUTE_BWD, p)), T, E, k, S,
                     split ? 0.0f : op->f[0]);
    if (!split) return;
    int32_t *buf = qt_i32(ctx, QT_T(op, MOE_ROUTE_BWD, scratch));
    const int c = qt_moe_lb_counts(buf, idx, T, E, k, S, (unsigned)QT_A(op, MOE_ROUTE_BWD, mask),
                                   Cc);
    if (c < 0) {
        if (ctx->status && !*ctx->status) *ctx->status = c;
        return;
    }
    qt_moe_lb_bwd(dl, logits, buf, T, E, S, S * Cc, op->f[0]);
}

/* The load-balance term takes any expert count (moe_route.h); over a context group it needs
 * the exchange's scratch. */
static int qt_check_moe_route(const qt_plan *p, const qt_op *op, int32_t scratch, int fwd,
                              qt_check_state *st)
{
    const int64_t E = QT_A(op, MOE_ROUTE_FWD, E), T = QT_A(op, MOE_ROUTE_FWD, T),
                  S = QT_A(op, MOE_ROUTE_FWD, S), Cc = QT_A(op, MOE_ROUTE_FWD, ctx);
    if (op->f[0] == 0.0f || Cc <= 1) return 0;
    /* context parallelism: the counts' all-gather (and the FWD's Pbar chain) scratch */
    const int64_t need = S > 0 && T % S == 0 ? (Cc + fwd) * (T / S) * E : -1;
    if (need < 0 || scratch == QT_NONE || scratch >= p->n_tensors ||
        p->tensors[scratch].dtype != QT_I32 || p->tensors[scratch].numel < need) {
        snprintf(st->why, sizeof st->why, "load-balance loss on context %lld: scratch %d "
                 "must be I32 of at least %lld elements", (long long)Cc, (int)scratch,
                 (long long)need);
        return 1;
    }
    return 0;
}

int qt_check_moe_route_fwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_moe_route(p, op, QT_T(op, MOE_ROUTE_FWD, scratch), 1, st);
}

int qt_check_moe_route_bwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_moe_route(p, op, QT_T(op, MOE_ROUTE_BWD, scratch), 0, st);
}

void qt_op_expert_ffn_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_expert_ffn_fwd(op, ctx);
        return;
    }
    qt_expert_ffn_fwd_canon(
        qt_f32(ctx, QT_T(op, EXPERT_FFN_FWD, y)), qt_f32(ctx, QT_T(op, EXPERT_FFN_FWD, gu)),
        qt_f32(ctx, QT_T(op, EXPERT_FFN_FWD, x)), qt_i32(ctx, QT_T(op, EXPERT_FFN_FWD, idx)),
        qt_f32(ctx, QT_T(op, EXPERT_FFN_FWD, w_gu)), qt_f32(ctx, QT_T(op, EXPERT_FFN_FWD, w_down)),
        qt_f32(ctx, QT_T(op, EXPERT_FFN_FWD, scratch)), QT_A(op, EXPERT_FFN_FWD, T),
        QT_A(op, EXPERT_FFN_FWD, k), QT_A(op, EXPERT_FFN_FWD, E), QT_A(op, EXPERT_FFN_FWD, d),
        QT_A(op, EXPERT_FFN_FWD, f), ctx->plan->tensors[QT_T(op, EXPERT_FFN_FWD, scratch)].numel,
        QT_A(op, EXPERT_FFN_FWD, nb));
}

/* t8 dgu is optional: without it the WGRAD recomputes d(gu). */
void qt_op_expert_ffn_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_expert_ffn_bwd(op, ctx);
        return;
    }
    float *dgu =
        QT_T(op, EXPERT_FFN_BWD, dgu) != QT_NONE ? qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, dgu)) : 0;
    qt_expert_ffn_bwd_save_canon(
        qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, dx)), dgu, qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, dy)),
        qt_i32(ctx, QT_T(op, EXPERT_FFN_BWD, idx)), qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, gu)),
        qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, w_gu)), qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, w_down)),
        qt_f32(ctx, QT_T(op, EXPERT_FFN_BWD, scratch)), QT_A(op, EXPERT_FFN_BWD, T),
        QT_A(op, EXPERT_FFN_BWD, k), QT_A(op, EXPERT_FFN_BWD, E), QT_A(op, EXPERT_FFN_BWD, d),
        QT_A(op, EXPERT_FFN_BWD, f), ctx->plan->tensors[QT_T(op, EXPERT_FFN_BWD, scratch)].numel,
        QT_A(op, EXPERT_FFN_BWD, bwd_nb));
}

/* Every leaf of the op in one kernel call (qt_expert_ffn_wgrad_saved_leaves: expert by
 * expert, leaf by leaf: the bits of the calls one sequence at a time); 1 when done. */
static int qt_op_expert_ffn_wgrad_leaves(const qt_op *op, const qt_ctx *ctx,
                                         const qt_wgrad_leaves *all)
{
    qt_ffn_leaf lv[QT_WGRAD_LEAVES_MAX];
    const int64_t d = QT_A(op, EXPERT_FFN_WGRAD, d), f = QT_A(op, EXPERT_FFN_WGRAD, f),
                  E = QT_A(op, EXPERT_FFN_WGRAD, E);
    const int32_t sid = QT_T(op, EXPERT_FFN_WGRAD, scratch), gid = QT_T(op, EXPERT_FFN_WGRAD, dgu);
    if (gid == QT_NONE || all->n < 1 || all->n > QT_WGRAD_LEAVES_MAX) return 0;
    for (int32_t s = 0; s < all->n; s++) {
        int64_t t0, S, k;
        qt_op_expert_wgrad_rows(op, ctx, s, &t0, &S, &k);
        qt_ffn_leaf *l = &lv[s];
        l->dy = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, dy)) + t0 * k * d;
        l->x = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, x)) + t0 * d;
        l->gu = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, gu)) + t0 * k * 2 * f;
        l->dgu = qt_f32(ctx, gid) + t0 * k * 2 * f;
        l->idx = qt_i32(ctx, QT_T(op, EXPERT_FFN_WGRAD, idx)) + t0 * k;
        l->T = S, l->k = k;
        float *dw[2];
        const qt_leaf_carry *c[2];
        if (!qt_op_expert_wgrad_leaf_dest(all, s, dw, c)) return 0;
        l->dw_gu = dw[0], l->dw_down = dw[1], l->c_gu = c[0], l->c_down = c[1];
    }
    return qt_expert_ffn_wgrad_saved_leaves(lv, all->n, qt_f32(ctx, sid), E, d, f,
                                            ctx->plan->tensors[sid].numel);
}

/* EXPERT_FFN_WGRAD: writes dw[0] (W_gu) and dw[1] (W_down) whole (QT_OPP_WGRAD_WRITES), or
 * the offered carries; offered every leaf at once (the first sequence), all of them in one
 * call when the plan saves dgu. */
void qt_op_expert_ffn_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_expert_ffn_wgrad(op, ctx, seq, dw);
        return;
    }
    if (seq == 0 && ctx->wgrad_epi && ctx->wgrad_epi->leaves &&
        qt_op_expert_ffn_wgrad_leaves(op, ctx, ctx->wgrad_epi->leaves)) {
        ctx->wgrad_epi->leaves->done = 1;
        return;
    }
    int64_t t0, S, k;
    qt_op_expert_wgrad_rows(op, ctx, seq, &t0, &S, &k);
    const int64_t d = QT_A(op, EXPERT_FFN_WGRAD, d), f = QT_A(op, EXPERT_FFN_WGRAD, f),
                  E = QT_A(op, EXPERT_FFN_WGRAD, E),
                  sn = ctx->plan->tensors[QT_T(op, EXPERT_FFN_WGRAD, scratch)].numel;
    const float *dy = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, dy)) + t0 * k * d,
                *x = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, x)) + t0 * d,
                *gu = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, gu)) + t0 * k * 2 * f;
    const int32_t *idx = qt_i32(ctx, QT_T(op, EXPERT_FFN_WGRAD, idx)) + t0 * k;
    float *scratch = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, scratch));
    if (QT_T(op, EXPERT_FFN_WGRAD, dgu) != QT_NONE) {
        const float *dgu = qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, dgu)) + t0 * k * 2 * f;
        /* an odd leaf: the tree carry in the matmuls' epilogue when offered (qt_leaf_carry.h) */
        qt_wgrad_epi *epi = ctx->wgrad_epi;
        if (epi && epi->carry[0] && epi->carry[1] &&
            qt_expert_ffn_wgrad_saved_carry(epi->carry[0], epi->carry[1], dy, x, idx, gu, dgu,
                                            scratch, S, k, E, d, f, sn)) {
            epi->done[0] = epi->done[1] = 1;
            return;
        }
        qt_expert_ffn_wgrad_saved_write(dw[0], dw[1], dy, x, idx, gu, dgu, scratch, S, k, E, d,
                                        f, sn);
        return;
    }
    /* the recomputing form accumulates: zero the leaves first (QT_OPP_WGRAD_WRITES) */
    memset(dw[0], 0, (size_t)(E * 2 * f * d) * sizeof(float));
    memset(dw[1], 0, (size_t)(E * d * f) * sizeof(float));
    qt_expert_ffn_wgrad(dw[0], dw[1], dy, x, idx, gu, qt_f32(ctx, QT_T(op, EXPERT_FFN_WGRAD, w_down)),
                        scratch, S, k, E, d, f, sn);
}

/* t3 (t5 for the BWD) kidx is optional: with token dropping the dropped slots are skipped. */
void qt_op_moe_combine_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_moe_combine_fwd(op, ctx);
        return;
    }
    const int32_t *kidx = QT_T(op, MOE_COMBINE_FWD, kidx) != QT_NONE
                              ? qt_i32(ctx, QT_T(op, MOE_COMBINE_FWD, kidx))
                              : 0;
    qt_moe_combine_kept_fwd(qt_f32(ctx, QT_T(op, MOE_COMBINE_FWD, out)),
                            qt_f32(ctx, QT_T(op, MOE_COMBINE_FWD, p)),
                            qt_f32(ctx, QT_T(op, MOE_COMBINE_FWD, y)), kidx,
                            QT_A(op, MOE_COMBINE_FWD, T), QT_A(op, MOE_COMBINE_FWD, k),
                            QT_A(op, MOE_COMBINE_FWD, d));
}

void qt_op_moe_combine_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_moe_combine_bwd(op, ctx);
        return;
    }
    const int32_t *kidx = QT_T(op, MOE_COMBINE_BWD, kidx) != QT_NONE
                              ? qt_i32(ctx, QT_T(op, MOE_COMBINE_BWD, kidx))
                              : 0;
    qt_moe_combine_kept_bwd(
        qt_f32(ctx, QT_T(op, MOE_COMBINE_BWD, dp)), qt_f32(ctx, QT_T(op, MOE_COMBINE_BWD, dy)),
        qt_f32(ctx, QT_T(op, MOE_COMBINE_BWD, dout)), qt_f32(ctx, QT_T(op, MOE_COMBINE_BWD, p)),
        qt_f32(ctx, QT_T(op, MOE_COMBINE_BWD, y)), kidx, QT_A(op, MOE_COMBINE_BWD, T),
        QT_A(op, MOE_COMBINE_BWD, k), QT_A(op, MOE_COMBINE_BWD, d));
}

/* MOE_CAPACITY's context form: base[b x E] = per sequence and expert, the assignments of
 * the sequence's tokens on context blocks 0..c-1 (an exclusive prefix over the group, all
 * integers), in the scratch's block c. Returns base, or 0 with *rc set. */
static const int32_t *qt_moe_capacity_prefix(const qt_op *op, const qt_ctx *ctx, int *rc)
{
    const int64_t T = QT_A(op, MOE_CAPACITY, T), S = QT_A(op, MOE_CAPACITY, S),
                  E = QT_A(op, MOE_CAPACITY, E), n = T / S * E;
    const unsigned mask = (unsigned)QT_A(op, MOE_CAPACITY, mask);
    int32_t *buf = qt_i32(ctx, QT_T(op, MOE_CAPACITY, scratch));
    const int c = qt_comm_group_index(mask), R = qt_comm_group_size(mask);
    *rc = c < 0 ? c : R < 0 ? R : QT_OK;
    if (!*rc && R != QT_A(op, MOE_CAPACITY, ctx))
        *rc = qt_fail(QT_E_PLAN, "token dropping: context group mask 0x%x has %d ranks, the "
                      "op's context degree is %lld", mask, R,
                      (long long)QT_A(op, MOE_CAPACITY, ctx));
    if (*rc) return 0;
    qt_moe_capacity_counts(buf + c * n, qt_i32(ctx, QT_T(op, MOE_CAPACITY, idx)), T, E,
                           QT_A(op, MOE_CAPACITY, k), S);
    *rc = qt_coll_all_gather(mask, buf, n * (int64_t)sizeof(int32_t));
    if (*rc) return 0;
    int32_t *base = buf + c * n;
    for (int64_t i = 0; i < n; i++) {
        int32_t sum = 0;
        for (int j = 0; j < c; j++) sum += buf[j * n + i];
        base[i] = sum;
    }
    return base;
}

/* MOE_CAPACITY: the drops slot is optional (the metrics' per-layer counts); with a context
 * degree > 1 the queue continues the earlier context blocks' counts. */
void qt_op_moe_capacity(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t b = QT_A(op, MOE_CAPACITY, T) / QT_A(op, MOE_CAPACITY, S);
    int32_t *drops = QT_T(op, MOE_CAPACITY, drops) != QT_NONE
                         ? qt_i32(ctx, QT_T(op, MOE_CAPACITY, drops)) +
                               QT_A(op, MOE_CAPACITY, layer) * b
                         : 0;
    const int32_t *base = 0;
    if (QT_A(op, MOE_CAPACITY, ctx) > 1) {
        int rc = QT_OK;
        base = qt_moe_capacity_prefix(op, ctx, &rc);
        if (rc) {
            if (ctx->status && !*ctx->status) *ctx->status = rc;
            return;
        }
    }
    qt_moe_capacity_from(qt_i32(ctx, QT_T(op, MOE_CAPACITY, kidx)), drops,
                         qt_i32(ctx, QT_T(op, MOE_CAPACITY, idx)), base,
                         QT_A(op, MOE_CAPACITY, T), QT_A(op, MOE_CAPACITY, E),
                         QT_A(op, MOE_CAPACITY, k), QT_A(op, MOE_CAPACITY, S),
                         QT_A(op, MOE_CAPACITY, C));
}

/* The queue takes any expert count >= 1 (moe_route.h). */
int qt_check_moe_capacity(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t E = QT_A(op, MOE_CAPACITY, E), S = QT_A(op, MOE_CAPACITY, S),
                  T = QT_A(op, MOE_CAPACITY, T), C = QT_A(op, MOE_CAPACITY, C);
    if (E < 1 || S < 1 || T % S || C < 0) {
        snprintf(st->why, sizeof st->why, "token dropping with %lld experts (expected >= 1), "
                 "%lld tokens in sequences of %lld, capacity %lld", (long long)E,
                 (long long)T, (long long)S, (long long)C);
        return 1;
    }
    /* the context form: the group's size from the plan's mesh, a scratch of Cc x b x E I32 */
    const int64_t Cc = QT_A(op, MOE_CAPACITY, ctx), mask = QT_A(op, MOE_CAPACITY, mask);
    if (Cc <= 1) return 0;
    int64_t R = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1ll << a)) R *= p->mesh[a];
    const int32_t ts = QT_T(op, MOE_CAPACITY, scratch);
    if (mask <= 0 || mask >= (1ll << QT_MESH_COUNT) || R != Cc || ts < 0 ||
        ts >= p->n_tensors || p->tensors[ts].dtype != QT_I32 ||
        p->tensors[ts].numel < Cc * (T / S) * E) {
        snprintf(st->why, sizeof st->why, "token dropping over a context group: mask 0x%llx "
                 "(%lld ranks on this mesh), context degree %lld, scratch t3 = %d (needs an "
                 "I32 tensor of >= %lld elements)", (long long)mask, (long long)R,
                 (long long)Cc, (int)ts, (long long)(Cc * (T / S) * E));
        return 1;
    }
    return 0;
}

/* MOE_RAGGED: this member's counts into its block of the scratch, the group's all-gathered,
 * then the keep decision of qt_moe_ragged_keep (the drops slot is optional). */
void qt_op_moe_ragged(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, MOE_RAGGED, T), E = QT_A(op, MOE_RAGGED, E),
                  k = QT_A(op, MOE_RAGGED, k), S = QT_A(op, MOE_RAGGED, S);
    const unsigned mask = (unsigned)QT_A(op, MOE_RAGGED, mask);
    const int me = qt_comm_group_index(mask), M = qt_comm_group_size(mask);
    int rc = me < 0 ? me : M < 0 ? M : QT_OK;
    if (!rc && (int64_t)M * QT_A(op, MOE_RAGGED, El) != E)
        rc = qt_fail(QT_E_PLAN, "receive buffer: expert group mask 0x%x has %d ranks, %lld "
                     "experts of %lld per rank", mask, M, (long long)E,
                     (long long)QT_A(op, MOE_RAGGED, El));
    if (rc) {
        if (ctx->status && !*ctx->status) *ctx->status = rc;
        return;
    }
    int32_t *cnt = qt_i32(ctx, QT_T(op, MOE_RAGGED, scratch));
    const int32_t *idx = qt_i32(ctx, QT_T(op, MOE_RAGGED, idx));
    qt_moe_capacity_counts(cnt + me * E, idx, T, E, k, T);
    rc = qt_coll_all_gather(mask, cnt, E * (int64_t)sizeof(int32_t));
    if (rc) {
        if (ctx->status && !*ctx->status) *ctx->status = rc;
        return;
    }
    int32_t *drops = QT_T(op, MOE_RAGGED, drops) != QT_NONE
                         ? qt_i32(ctx, QT_T(op, MOE_RAGGED, drops)) +
                               QT_A(op, MOE_RAGGED, layer) * (T / S)
                         : 0;
    qt_moe_ragged_keep(qt_i32(ctx, QT_T(op, MOE_RAGGED, kidx)), drops, idx, cnt, T, E, k, S,
                       QT_A(op, MOE_RAGGED, El), me, QT_A(op, MOE_RAGGED, B));
}

/* The position counters live on the kernel's stack (moe_route.h); the scratch holds the
 * group's counts: M x E I32, M the group's size on this plan's mesh. */
int qt_check_moe_ragged(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t E = QT_A(op, MOE_RAGGED, E), S = QT_A(op, MOE_RAGGED, S),
                  T = QT_A(op, MOE_RAGGED, T), El = QT_A(op, MOE_RAGGED, El),
                  B = QT_A(op, MOE_RAGGED, B), mask = QT_A(op, MOE_RAGGED, mask);
    int64_t M = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1ll << a)) M *= p->mesh[a];
    const int32_t ts = QT_T(op, MOE_RAGGED, scratch);
    if (E < 1 || S < 1 || T % S || B < 0 || El < 1 ||
        M * El != E || mask <= 0 || mask >= (1ll << QT_MESH_COUNT) || ts < 0 ||
        ts >= p->n_tensors || p->tensors[ts].dtype != QT_I32 || p->tensors[ts].numel < M * E) {
        snprintf(st->why, sizeof st->why, "receive-buffer dropping with %lld experts "
                 "(%lld per rank), %lld tokens in sequences of %lld, buffer %lld rows, "
                 "group mask 0x%llx (%lld ranks), scratch t3 = %d (needs an I32 tensor of >= "
                 "%lld elements)", (long long)E, (long long)El,
                 (long long)T, (long long)S, (long long)B, (long long)mask, (long long)M,
                 (int)ts, (long long)(M * E));
        return 1;
    }
    return 0;
}
