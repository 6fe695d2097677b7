/* ops_bf16_seq.c - the native bf16 forms of the GDN gates (GDN_GATES_FWD / BWD / WGRAD), the
 * rotary embedding (ROPE_FWD / BWD), attention (ATTN_FWD / BWD), the router (MOE_ROUTE_FWD /
 * BWD) (qt_ops_bf16.h; docs/precision.md, "Executing bf16 plans", pattern (B)); the cross
 * entropy's are in ops_bf16_xent.c.
 *
 * Shape: as ops_bf16_rows.c (qt_r16.h): each block of rows is widened (exactly) into the
 * staging region, the kind's own fp32 kernel runs on it with the op's arguments restricted to
 * those rows, and the written and accumulated blocks are rounded back once. The blocks
 * follow what each kernel keeps independent:
 *  - the gates and the rotary embedding: tokens (the rotary blocks stay inside one sequence,
 *    the table offset to the block's first position, or the positions of packed documents
 *    offset with the rows);
 *  - attention and the router: whole sequences (b = 1; attention's rows of a sequence meet in
 *    the scores, the router's in the load-balance statistics of the sequence; over a context
 *    group the term's statistics take the fp32 wrapper's exchanges, ops_moe.c).
 * Each kernel's header states that rows (or sequences) do not mix and its sums run in row
 * order, so every block gives the whole call's bits on its rows and the blocks, taken in
 * increasing order, add into the leaves and the running sums in the kernel's order: the
 * boundary's bits (runtime/interp_bf16.c), which the unit tests check per kind at 0 ulp.
 * Rope's finite bf16 blocks run in one pass (kernels/bf16_rows.h qt_b16_rope). What these
 * forms do not cover runs through the boundary (qt_ctx.bf16_boundary, the same bits):
 * attention without a planned fp32 scratch row, an op naming one tensor twice, a staging
 * region too small.
 * No state, no heap, no VLAs.
 */
#include "qt_r16.h"
#include "kernels/attention.h"
#include "kernels/bf16_rows.h"
#include "kernels/gdn_gates.h"
#include "kernels/moe_route.h"
#include "kernels/rope.h"
#include "kernels/xent.h"

/* ------------------------------------------------------------------ GDN gates (tokens) */

void qt_op16_gdn_gates_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, GDN_GATES_FWD, T), hk = QT_A(op, GDN_GATES_FWD, Hk),
                  hv = QT_A(op, GDN_GATES_FWD, Hv), rows = qt_r16_rows(2 * hv, T);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GDN_GATES_FWD, beta), 0, hv, hv, 0, 1);
    qt_r16_add(&b, QT_T(op, GDN_GATES_FWD, g), 0, hv, hv, 0, 1);
    qt_r16_add(&b, QT_T(op, GDN_GATES_FWD, ba), 0, 2 * hv, 2 * hv, 1, 0);
    qt_r16_weight(&b, QT_T(op, GDN_GATES_FWD, A_log), hv);
    qt_r16_weight(&b, QT_T(op, GDN_GATES_FWD, dt_bias), hv);
    if (qt_r16_start(&b, op, rows)) return;
    const float *a_log = QT_R16_G(3, 0, 1), *dt_bias = QT_R16_G(4, 0, 1);
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_gdn_gates_fwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr), a_log,
                         dt_bias, nr, hk, hv);
        qt_r16_put_all(&b, t0, nr);
    }
}

void qt_op16_gdn_gates_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, GDN_GATES_BWD, T), hk = QT_A(op, GDN_GATES_BWD, Hk),
                  hv = QT_A(op, GDN_GATES_BWD, Hv), rows = qt_r16_rows(2 * hv, T);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GDN_GATES_BWD, dba), 0, 2 * hv, 2 * hv, 1, 1);
    qt_r16_add(&b, QT_T(op, GDN_GATES_BWD, dbeta), 0, hv, hv, 1, 0);
    qt_r16_add(&b, QT_T(op, GDN_GATES_BWD, dg), 0, hv, hv, 1, 0);
    qt_r16_add(&b, QT_T(op, GDN_GATES_BWD, ba), 0, 2 * hv, 2 * hv, 1, 0);
    qt_r16_weight(&b, QT_T(op, GDN_GATES_BWD, A_log), hv);
    qt_r16_weight(&b, QT_T(op, GDN_GATES_BWD, dt_bias), hv);
    if (qt_r16_start(&b, op, rows)) return;
    const float *a_log = QT_R16_G(4, 0, 1), *dt_bias = QT_R16_G(5, 0, 1);
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_gdn_gates_bwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr),
                         QT_R16_G(3, t0, nr), a_log, dt_bias, nr, hk, hv);
        qt_r16_put_all(&b, t0, nr);
    }
}

/* GDN_GATES_WGRAD: the leaf's S tokens from row seq*S in blocks, in increasing t, into both
 * leaves (dA_log -> dw[0], ddt_bias -> dw[1]), the parameters widened once. */
void qt_op16_gdn_gates_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    const int64_t S = QT_A(op, GDN_GATES_WGRAD, S), hk = QT_A(op, GDN_GATES_WGRAD, Hk),
                  hv = QT_A(op, GDN_GATES_WGRAD, Hv), rows = qt_r16_rows(2 * hv, S), t0 = seq * S;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GDN_GATES_WGRAD, dg), t0 * hv, hv, hv, 1, 0);
    qt_r16_add(&b, QT_T(op, GDN_GATES_WGRAD, ba), t0 * 2 * hv, 2 * hv, 2 * hv, 1, 0);
    qt_r16_weight(&b, QT_T(op, GDN_GATES_WGRAD, A_log), hv);
    qt_r16_weight(&b, QT_T(op, GDN_GATES_WGRAD, dt_bias), hv);
    if (qt_r16_plan(&b, rows)) {
        qt_r16_boundary_wgrad(op, ctx, seq, dw);
        return;
    }
    const float *a_log = QT_R16_G(2, 0, 1), *dt_bias = QT_R16_G(3, 0, 1);
    for (int64_t q = 0; q < S; q += rows) {
        const int64_t nr = qt_r16_min(rows, S - q);
        qt_gdn_gates_wgrad(dw[0], dw[1], QT_R16_G(0, q, nr), QT_R16_G(1, q, nr), a_log, dt_bias,
                           nr, hk, hv);
    }
}

/* ------------------------------------------------------------------ rotary (tokens) */

/* ROPE_FWD (bwd 0) or ROPE_BWD (bwd 1): slot 0 the written (y) or accumulated (dx) rows,
 * slot 1 the read ones; blocks of rows inside each sequence. A block whose read rows (and
 * the table, once) are finite bf16 runs in one pass (kernels/bf16_rows.h qt_b16_rope: the
 * kernel's expressions on the widened rows, rounded on store), any other through the fp32
 * kernel on the widened block. Without positions row t of a
 * block starting at position q0 rotates by table row q0 + t (the kernel's t % S over the
 * block, with the table offset); with them, by pos[t] (offset with the rows). */
static void qt_op16_rope(const qt_op *op, const qt_ctx *ctx, int bwd)
{
    const int64_t nb = QT_A(op, ROPE_FWD, b), S = QT_A(op, ROPE_FWD, S), H = QT_A(op, ROPE_FWD, H),
                  hd = QT_A(op, ROPE_FWD, hd), R = QT_A(op, ROPE_FWD, R), w = H * hd,
                  rows = qt_r16_rows(w, S), half = R / 2;
    const int32_t tab = op->t[2];
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, op->t[0], 0, w, w, bwd, 1);
    qt_r16_add(&b, op->t[1], 0, w, w, 1, 0);
    qt_r16_weight(&b, tab, ctx->plan->tensors[tab].numel);
    if (qt_r16_start(&b, op, rows)) return;
    const float *table = QT_R16_G(2, 0, 1);
    const int32_t *pos = qt_plan_positions(ctx);
    const int one = qt_is_b16(ctx, op->t[0]) && qt_is_b16(ctx, op->t[1]) &&
                    hd <= QT_B16_ROPE_HD && qt_r16_finite_fixed(&b);
    for (int64_t s = 0; s < nb; s++)
        for (int64_t q0 = 0; q0 < S; q0 += rows) {
            const int64_t nr = qt_r16_min(rows, S - q0), t0 = s * S + q0;
            const float *tb = pos ? table : table + q0 * half * 2;
            const int32_t *pb = pos ? pos + t0 : 0;
            if (one && qt_r16_finite(&b, t0, nr)) {
                qt_b16_rope(qt_b16(ctx, op->t[0]) + t0 * w, qt_b16(ctx, op->t[1]) + t0 * w, tb, pb,
                            nr, H, hd, R, bwd);
                continue;
            }
            if (bwd)
                qt_rope_bwd_pos(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), tb, pb, 1, nr, H, hd, R);
            else
                qt_rope_fwd_pos(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), tb, pb, 1, nr, H, hd, R);
            qt_r16_put_all(&b, t0, nr);
        }
}

void qt_op16_rope_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_op16_rope(op, ctx, 0);
}

void qt_op16_rope_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_op16_rope(op, ctx, 1);
}

/* ------------------------------------------------------------------ attention (sequences) */

/* The fp32 scratch row the forward's fp32 wrapper would take from the plan (t5, a SCRATCH
 * tensor of at least S floats), or NULL (the op then runs through the boundary, whose
 * wrapper picks its fallback: the same bits). */
static float *qt_op16_attn_row(const qt_ctx *ctx, int32_t ts, int64_t S)
{
    if (ts == QT_NONE) return 0;
    const qt_tensor *t = &ctx->plan->tensors[ts];
    return t->role == QT_ROLE_SCRATCH && t->dtype != QT_BF16 && t->numel >= S ? qt_f32(ctx, ts) : 0;
}

void qt_op16_attn_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, ATTN_FWD, b), S = QT_A(op, ATTN_FWD, S), hq = QT_A(op, ATTN_FWD, Hq),
                  hkv = QT_A(op, ATTN_FWD, Hkv), hd = QT_A(op, ATTN_FWD, hd);
    float *row = qt_op16_attn_row(ctx, QT_T(op, ATTN_FWD, scratch), S);
    int bad = !row;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_seq(&b, QT_T(op, ATTN_FWD, o), nb, S * hq * hd, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_FWD, lse), nb, hq * S, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_FWD, q), nb, S * hq * hd, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_FWD, k), nb, S * hkv * hd, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_FWD, v), nb, S * hkv * hd, 1, 0, &bad);
    if (bad || qt_r16_plan(&b, 1)) {
        qt_r16_boundary(op, ctx);
        return;
    }
    for (int64_t q = 0; q < nb; q++) {
        qt_attn_fwd_docs(QT_R16_G(0, q, 1), QT_R16_G(1, q, 1), QT_R16_G(2, q, 1),
                         QT_R16_G(3, q, 1), QT_R16_G(4, q, 1), row, qt_r16_pos(ctx, q, S), 1, S,
                         hq, hkv, hd, op->f[0]);
        qt_r16_put_all(&b, q, 1);
    }
}

void qt_op16_attn_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, ATTN_BWD, b), S = QT_A(op, ATTN_BWD, S), hq = QT_A(op, ATTN_BWD, Hq),
                  hkv = QT_A(op, ATTN_BWD, Hkv), hd = QT_A(op, ATTN_BWD, hd), wq = S * hq * hd,
                  wk = S * hkv * hd;
    const int32_t ts = QT_T(op, ATTN_BWD, scratch);
    int bad = ctx->plan->tensors[ts].dtype == QT_BF16;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, dq), nb, wq, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, dk), nb, wk, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, dv), nb, wk, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, dout), nb, wq, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, q), nb, wq, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, k), nb, wk, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, v), nb, wk, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, o), nb, wq, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, ATTN_BWD, lse), nb, hq * S, 1, 0, &bad);
    if (bad || qt_r16_plan(&b, 1)) {
        qt_r16_boundary(op, ctx);
        return;
    }
    float *scratch = qt_f32(ctx, ts);
    for (int64_t q = 0; q < nb; q++) {
        qt_attn_bwd_docs(QT_R16_G(0, q, 1), QT_R16_G(1, q, 1), QT_R16_G(2, q, 1),
                         QT_R16_G(3, q, 1), QT_R16_G(4, q, 1), QT_R16_G(5, q, 1),
                         QT_R16_G(6, q, 1), QT_R16_G(7, q, 1), QT_R16_G(8, q, 1),
                         qt_r16_pos(ctx, q, S), scratch, ctx->plan->tensors[ts].numel, 1, S, hq,
                         hkv, hd, op->f[0]);
        qt_r16_put_all(&b, q, 1);
    }
}

/* ------------------------------------------------------------------ router (sequences) */

/* Sequences of the router: S rows each (T % S == 0), or 0 when the op needs the boundary. */
static int64_t qt_op16_route_seqs(const qt_op *op)
{
    const int64_t T = QT_A(op, MOE_ROUTE_FWD, T), S = QT_A(op, MOE_ROUTE_FWD, S);
    return S > 0 && T % S == 0 ? T / S : 0;
}

/* 1 when the op's load-balance term is over a context group (a5 > 1, the term on): the fp32
 * wrapper's exchanges (ops_moe.c), fed this rank's sequences one at a time. */
static int qt_op16_route_split(const qt_op *op, int has_lb)
{
    return has_lb && op->f[0] != 0.0f && QT_A(op, MOE_ROUTE_FWD, ctx) > 1;
}

/* The forward's term over a context group, after the routing (the counts read the routed
 * idx): the chain received, this rank's sequences' Pbar rows added in order (logits widened
 * again, one sequence at a time), passed on or the term formed; a failed exchange stops the
 * step (ctx->status), as in fp32. */
static void qt_op16_route_lb_ctx(const qt_op *op, const qt_ctx *ctx, int64_t ns, float *lb)
{
    const int64_t E = QT_A(op, MOE_ROUTE_FWD, E), S = QT_A(op, MOE_ROUTE_FWD, S);
    float *pbar;
    int rc = qt_moe_lb_ctx_begin(op, ctx, &pbar);
    if (rc >= 0) {
        qt_r16 b = {ctx, 0, {{0}}};
        qt_r16_add(&b, QT_T(op, MOE_ROUTE_FWD, logits), 0, S * E, S * E, 1, 0);
        if (qt_r16_plan(&b, 1)) return; /* not reached: the routing's plan held two slots */
        for (int64_t q = 0; q < ns; q++) qt_moe_lb_pbar(pbar + q * E, QT_R16_G(0, q, 1), S, E, S);
        rc = qt_moe_lb_ctx_end(op, ctx, lb, pbar, rc);
    }
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

void qt_op16_moe_route_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int32_t lid = QT_T(op, MOE_ROUTE_FWD, lb_seq);
    const int64_t E = QT_A(op, MOE_ROUTE_FWD, E), k = QT_A(op, MOE_ROUTE_FWD, k),
                  S = QT_A(op, MOE_ROUTE_FWD, S), ns = qt_op16_route_seqs(op);
    const int split = qt_op16_route_split(op, lid != QT_NONE);
    int bad = ns == 0 || (lid != QT_NONE && ctx->plan->tensors[lid].dtype == QT_BF16);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_seq(&b, QT_T(op, MOE_ROUTE_FWD, p), ns, S * k, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, MOE_ROUTE_FWD, logits), ns, S * E, 1, 0, &bad);
    if (bad || qt_r16_plan(&b, 1)) {
        qt_r16_boundary(op, ctx);
        return;
    }
    int32_t *idx = qt_i32(ctx, QT_T(op, MOE_ROUTE_FWD, idx));
    float *lb = lid != QT_NONE ? qt_f32(ctx, lid) : 0;
    for (int64_t q = 0; q < ns; q++) {
        qt_moe_route_fwd(idx + q * S * k, QT_R16_G(0, q, 1), lb && !split ? lb + q : 0,
                         QT_R16_G(1, q, 1), S, E, k, S, op->f[0]);
        qt_r16_put_all(&b, q, 1);
    }
    if (split) qt_op16_route_lb_ctx(op, ctx, ns, lb);
}

/* MOE_ROUTE_BWD per sequence: the kernel adds the routing rows, then the load-balance
 * term, into each element of dlogits; a sequence's elements see the same two adds in the
 * same order as in the whole call. Over a context group the term's counts are the group's
 * (gathered first: idx is an input) and qt_moe_lb_bwd adds it after the routing rows, as the
 * fp32 wrapper does over the whole call. */
void qt_op16_moe_route_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, MOE_ROUTE_BWD, T), E = QT_A(op, MOE_ROUTE_BWD, E),
                  k = QT_A(op, MOE_ROUTE_BWD, k), S = QT_A(op, MOE_ROUTE_BWD, S),
                  Cc = QT_A(op, MOE_ROUTE_BWD, ctx), ns = qt_op16_route_seqs(op);
    const int split = qt_op16_route_split(op, 1);
    int bad = ns == 0;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_seq(&b, QT_T(op, MOE_ROUTE_BWD, dlogits), ns, S * E, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, MOE_ROUTE_BWD, dp), ns, S * k, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, MOE_ROUTE_BWD, logits), ns, S * E, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, MOE_ROUTE_BWD, p), ns, S * k, 1, 0, &bad);
    if (bad || qt_r16_plan(&b, 1)) {
        qt_r16_boundary(op, ctx);
        return;
    }
    const int32_t *idx = qt_i32(ctx, QT_T(op, MOE_ROUTE_BWD, idx));
    int32_t *cnt = split ? qt_i32(ctx, QT_T(op, MOE_ROUTE_BWD, scratch)) : 0;
    const int c = split ? qt_moe_lb_counts(cnt, idx, T, E, k, S,
                                           (unsigned)QT_A(op, MOE_ROUTE_BWD, mask), Cc)
                        : 0;
    if (c < 0 && ctx->status && !*ctx->status) *ctx->status = c;
    for (int64_t q = 0; q < ns; q++) {
        float *dl = QT_R16_G(0, q, 1);
        const float *lg = QT_R16_G(2, q, 1);
        qt_moe_route_bwd(dl, QT_R16_G(1, q, 1), lg, idx + q * S * k, QT_R16_G(3, q, 1), S, E, k,
                         S, split ? 0.0f : op->f[0]);
        if (split && c >= 0) qt_moe_lb_bwd(dl, lg, cnt + q * E, S, E, S, S * Cc, op->f[0]);
        qt_r16_put_all(&b, q, 1);
    }
}
