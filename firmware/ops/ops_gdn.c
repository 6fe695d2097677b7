/* ops_gdn.c - op wrappers for the Gated DeltaNet ops (QT_OP_GDN_CONV_*, QT_OP_GDN_GATES_*,
 * QT_OP_GDN_CORE_*, QT_OP_GATED_RMSNORM_*): resolve the slots of qt_ops.h to arena
 * pointers and call the float kernels.
 *
 * Invariants: slot and attribute meanings are exactly those of qt_ops.h; WGRAD wrappers
 * read only the rows of sequence `seq` ([seq*S, (seq+1)*S)) and accumulate into dw[], which
 * the interpreter zeroed. No module state.
 */
#include <stdio.h>
#include "ops/qt_op_fns.h"
#include "ops/qt_ops_bf16.h"
#include "kernels/gdn_conv.h"
#include "kernels/gdn_chunk.h"
#include "kernels/gdn_core.h"
#include "kernels/gdn_gates.h"
#include "kernels/gated_rmsnorm.h"

/* Width of one qkvz row: Hk*G with G = 2*Dk + 2*(Hv/Hk)*Dv. */
static int64_t qt_gdn_qkvz_width(int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    return hk * (2 * dk + 2 * (hv / hk) * dv);
}

static int64_t qt_gdn_conv_channels(int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    return 2 * hk * dk + hv * dv;
}

/* conv: a0 b, a1 S, a2 Hk, a3 Dk, a4 Hv, a5 Dv, a6 K */
void qt_op_gdn_conv_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_conv_fwd(op, ctx);
        return;
    }
    qt_gdn_conv_fwd_pos(
        qt_f32(ctx, QT_T(op, GDN_CONV_FWD, c)), qt_f32(ctx, QT_T(op, GDN_CONV_FWD, pre)),
        qt_f32(ctx, QT_T(op, GDN_CONV_FWD, qkvz)), qt_f32(ctx, QT_T(op, GDN_CONV_FWD, w)),
        qt_plan_positions(ctx),
        QT_A(op, GDN_CONV_FWD, b), QT_A(op, GDN_CONV_FWD, S), QT_A(op, GDN_CONV_FWD, Hk),
        QT_A(op, GDN_CONV_FWD, Dk), QT_A(op, GDN_CONV_FWD, Hv), QT_A(op, GDN_CONV_FWD, Dv),
        QT_A(op, GDN_CONV_FWD, K));
}

void qt_op_gdn_conv_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_conv_bwd(op, ctx);
        return;
    }
    /* slots: t0 dqkvz, t1 dc, t2 pre, t3 w */
    qt_gdn_conv_bwd_pos(
        qt_f32(ctx, QT_T(op, GDN_CONV_BWD, dqkvz)), qt_f32(ctx, QT_T(op, GDN_CONV_BWD, pre)),
        qt_f32(ctx, QT_T(op, GDN_CONV_BWD, dc)), qt_f32(ctx, QT_T(op, GDN_CONV_BWD, w)),
        qt_plan_positions(ctx),
        QT_A(op, GDN_CONV_BWD, b), QT_A(op, GDN_CONV_BWD, S), QT_A(op, GDN_CONV_BWD, Hk),
        QT_A(op, GDN_CONV_BWD, Dk), QT_A(op, GDN_CONV_BWD, Hv), QT_A(op, GDN_CONV_BWD, Dv),
        QT_A(op, GDN_CONV_BWD, K));
}

void qt_op_gdn_conv_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t leaf, float *const dw[2])
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_conv_wgrad(op, ctx, leaf, dw);
        return;
    }
    int64_t S = QT_A(op, GDN_CONV_WGRAD, S),
            cc = qt_gdn_conv_channels(QT_A(op, GDN_CONV_WGRAD, Hk), QT_A(op, GDN_CONV_WGRAD, Dk),
                                      QT_A(op, GDN_CONV_WGRAD, Hv), QT_A(op, GDN_CONV_WGRAD, Dv));
    int64_t wq = qt_gdn_qkvz_width(QT_A(op, GDN_CONV_WGRAD, Hk), QT_A(op, GDN_CONV_WGRAD, Dk),
                                   QT_A(op, GDN_CONV_WGRAD, Hv), QT_A(op, GDN_CONV_WGRAD, Dv));
    /* leaf = token block `blk` of sequence `s` (qt_ops.h): the block's rows, with the
     * taps reaching back into the sequence before it */
    const int64_t nbt = qt_plan_blocks(ctx->plan), s = leaf / nbt, blk = leaf % nbt;
    /* slots: t0 dc, t1 pre, t2 qkvz, t3 w (param) */
    const int32_t *pos = qt_plan_positions(ctx);
    qt_gdn_conv_wgrad_rows_pos(dw[0], qt_f32(ctx, QT_T(op, GDN_CONV_WGRAD, pre)) + s * S * cc,
                           qt_f32(ctx, QT_T(op, GDN_CONV_WGRAD, dc)) + s * S * cc,
                           qt_f32(ctx, QT_T(op, GDN_CONV_WGRAD, qkvz)) + s * S * wq,
                           pos ? pos + s * S : NULL, blk * (S / nbt), (blk + 1) * (S / nbt),
                           QT_A(op, GDN_CONV_WGRAD, Hk), QT_A(op, GDN_CONV_WGRAD, Dk),
                           QT_A(op, GDN_CONV_WGRAD, Hv), QT_A(op, GDN_CONV_WGRAD, Dv),
                           QT_A(op, GDN_CONV_WGRAD, K));
}

/* gates: a0 T, a1 Hk, a2 Hv (a3 S for WGRAD) */
void qt_op_gdn_gates_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_gates_fwd(op, ctx);
        return;
    }
    qt_gdn_gates_fwd(
        qt_f32(ctx, QT_T(op, GDN_GATES_FWD, beta)), qt_f32(ctx, QT_T(op, GDN_GATES_FWD, g)),
        qt_f32(ctx, QT_T(op, GDN_GATES_FWD, ba)), qt_f32(ctx, QT_T(op, GDN_GATES_FWD, A_log)),
        qt_f32(ctx, QT_T(op, GDN_GATES_FWD, dt_bias)), QT_A(op, GDN_GATES_FWD, T),
        QT_A(op, GDN_GATES_FWD, Hk), QT_A(op, GDN_GATES_FWD, Hv));
}

void qt_op_gdn_gates_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_gates_bwd(op, ctx);
        return;
    }
    qt_gdn_gates_bwd(
        qt_f32(ctx, QT_T(op, GDN_GATES_BWD, dba)), qt_f32(ctx, QT_T(op, GDN_GATES_BWD, dbeta)),
        qt_f32(ctx, QT_T(op, GDN_GATES_BWD, dg)), qt_f32(ctx, QT_T(op, GDN_GATES_BWD, ba)),
        qt_f32(ctx, QT_T(op, GDN_GATES_BWD, A_log)), qt_f32(ctx, QT_T(op, GDN_GATES_BWD, dt_bias)),
        QT_A(op, GDN_GATES_BWD, T), QT_A(op, GDN_GATES_BWD, Hk), QT_A(op, GDN_GATES_BWD, Hv));
}

void qt_op_gdn_gates_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_gates_wgrad(op, ctx, seq, dw);
        return;
    }
    int64_t S = QT_A(op, GDN_GATES_WGRAD, S), hv = QT_A(op, GDN_GATES_WGRAD, Hv);
    /* slots: t0 dg, t1 ba, t2 A_log (dw[0]), t3 dt_bias (dw[1]) */
    qt_gdn_gates_wgrad(dw[0], dw[1], qt_f32(ctx, QT_T(op, GDN_GATES_WGRAD, dg)) + seq * S * hv,
                       qt_f32(ctx, QT_T(op, GDN_GATES_WGRAD, ba)) + seq * S * 2 * hv,
                       qt_f32(ctx, QT_T(op, GDN_GATES_WGRAD, A_log)),
                       qt_f32(ctx, QT_T(op, GDN_GATES_WGRAD, dt_bias)), S,
                       QT_A(op, GDN_GATES_WGRAD, Hk), hv);
}

/* core: a0 b, a1 S, a2 Hk, a3 Dk, a4 Hv, a5 Dv, a6 chunk, a7 algorithm (1 chunked),
 * f0 qscale, f1 l2eps */
void qt_op_gdn_core_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_core_fwd(op, ctx);
        return;
    }
    if (QT_A(op, GDN_CORE_FWD, algo) == 1) {
        qt_gdn_chunk_fwd_pos( /* packed documents restart too (NULL positions: plain) */
            qt_f32(ctx, QT_T(op, GDN_CORE_FWD, o)), qt_f32(ctx, QT_T(op, GDN_CORE_FWD, states)),
            qt_f32(ctx, QT_T(op, GDN_CORE_FWD, rq)), qt_f32(ctx, QT_T(op, GDN_CORE_FWD, rk)),
            qt_f32(ctx, QT_T(op, GDN_CORE_FWD, c)), qt_f32(ctx, QT_T(op, GDN_CORE_FWD, g)),
            qt_f32(ctx, QT_T(op, GDN_CORE_FWD, beta)), qt_plan_positions(ctx),
            qt_f32(ctx, QT_T(op, GDN_CORE_FWD, scratch)),
            QT_A(op, GDN_CORE_FWD, b), QT_A(op, GDN_CORE_FWD, S), QT_A(op, GDN_CORE_FWD, Hk),
            QT_A(op, GDN_CORE_FWD, Dk), QT_A(op, GDN_CORE_FWD, Hv), QT_A(op, GDN_CORE_FWD, Dv),
            QT_A(op, GDN_CORE_FWD, chunk), op->f[0], op->f[1]);
        return;
    }
    qt_gdn_core_fwd_pos(
        qt_f32(ctx, QT_T(op, GDN_CORE_FWD, o)), qt_f32(ctx, QT_T(op, GDN_CORE_FWD, states)),
        qt_f32(ctx, QT_T(op, GDN_CORE_FWD, rq)), qt_f32(ctx, QT_T(op, GDN_CORE_FWD, rk)),
        qt_f32(ctx, QT_T(op, GDN_CORE_FWD, c)), qt_f32(ctx, QT_T(op, GDN_CORE_FWD, g)),
        qt_f32(ctx, QT_T(op, GDN_CORE_FWD, beta)), qt_plan_positions(ctx), QT_A(op, GDN_CORE_FWD, b),
        QT_A(op, GDN_CORE_FWD, S), QT_A(op, GDN_CORE_FWD, Hk), QT_A(op, GDN_CORE_FWD, Dk),
        QT_A(op, GDN_CORE_FWD, Hv), QT_A(op, GDN_CORE_FWD, Dv), QT_A(op, GDN_CORE_FWD, chunk),
        op->f[0], op->f[1]);
}

void qt_op_gdn_core_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gdn_core_bwd(op, ctx);
        return;
    }
    if (QT_A(op, GDN_CORE_BWD, algo) != 1) { /* recurrent: packed documents restart */
        qt_gdn_core_bwd_pos(
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dc)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dg)),
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dbeta)),
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, states)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, rq)),
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, rk)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dout)),
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, c)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, g)),
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, beta)), qt_plan_positions(ctx),
            qt_f32(ctx, QT_T(op, GDN_CORE_BWD, scratch)), QT_A(op, GDN_CORE_BWD, b),
            QT_A(op, GDN_CORE_BWD, S), QT_A(op, GDN_CORE_BWD, Hk), QT_A(op, GDN_CORE_BWD, Dk),
            QT_A(op, GDN_CORE_BWD, Hv), QT_A(op, GDN_CORE_BWD, Dv),
            QT_A(op, GDN_CORE_BWD, chunk), op->f[0]);
        return;
    }
    qt_gdn_chunk_bwd_pos(qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dc)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dg)),
        qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dbeta)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, states)),
        qt_f32(ctx, QT_T(op, GDN_CORE_BWD, rq)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, rk)),
        qt_f32(ctx, QT_T(op, GDN_CORE_BWD, dout)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, c)),
        qt_f32(ctx, QT_T(op, GDN_CORE_BWD, g)), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, beta)),
        qt_plan_positions(ctx), qt_f32(ctx, QT_T(op, GDN_CORE_BWD, scratch)), QT_A(op, GDN_CORE_BWD, b),
        QT_A(op, GDN_CORE_BWD, S), QT_A(op, GDN_CORE_BWD, Hk), QT_A(op, GDN_CORE_BWD, Dk),
        QT_A(op, GDN_CORE_BWD, Hv), QT_A(op, GDN_CORE_BWD, Dv), QT_A(op, GDN_CORE_BWD, chunk),
        op->f[0], op->f[1]);
}

/* The delta rule's limits (gdn_core.h), which configgen also enforces, and its scratch,
 * which the kernels take without a size: a short one would overrun. Reads op and the
 * plan's tensor table; writes st->why when the op does not fit. */
static int qt_check_gdn_core(const qt_plan *p, const qt_op *op, int fwd, int32_t scratch,
                             qt_check_state *st)
{
    const int64_t Dk = QT_A(op, GDN_CORE_FWD, Dk), Dv = QT_A(op, GDN_CORE_FWD, Dv);
    const int64_t chunk = QT_A(op, GDN_CORE_FWD, chunk);
    if (Dk > QT_GDN_CORE_MAX_DIM || Dv > QT_GDN_CORE_MAX_DIM || chunk < 1) {
        snprintf(st->why, sizeof st->why, "Dk=%lld Dv=%lld chunk=%lld outside the kernel's "
                 "limits (Dk, Dv <= %d, chunk >= 1)", (long long)Dk, (long long)Dv,
                 (long long)chunk, QT_GDN_CORE_MAX_DIM);
        return 1;
    }
    const int64_t C = QT_GDN_CHUNK_ROWS(chunk, QT_A(op, GDN_CORE_FWD, S));
    const int64_t need =
        QT_A(op, GDN_CORE_FWD, algo)
            ? (fwd ? QT_GDN_CHUNK_FWD_SCRATCH(C, Dk, Dv) : QT_GDN_CHUNK_BWD_SCRATCH(C, Dk, Dv))
            : (fwd ? 0 : QT_GDN_CORE_SCRATCH(chunk, Dk, Dv));
    const int32_t id = op->t[scratch];
    if (need > 0 && (id < 0 || id >= p->n_tensors || p->tensors[id].numel < need)) {
        snprintf(st->why, sizeof st->why, "delta-rule scratch t%d holds %lld floats, needs %lld",
                 (int)scratch, (long long)(id >= 0 && id < p->n_tensors ? p->tensors[id].numel : 0),
                 (long long)need);
        return 1;
    }
    return 0;
}

int qt_check_gdn_core_fwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_gdn_core(p, op, 1, QT_T_GDN_CORE_FWD_scratch, st);
}

int qt_check_gdn_core_bwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_gdn_core(p, op, 0, QT_T_GDN_CORE_BWD_scratch, st);
}

/* gated rmsnorm: a0 T, a1 Hk, a2 Dk, a3 Hv, a4 Dv, f0 eps (a5 S for WGRAD) */
void qt_op_gated_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gated_rmsnorm_fwd(op, ctx);
        return;
    }
    qt_gated_rmsnorm_fwd(
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_FWD, y)), qt_f32(ctx, QT_T(op, GATED_RMSNORM_FWD, rstd)),
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_FWD, o)), qt_f32(ctx, QT_T(op, GATED_RMSNORM_FWD, qkvz)),
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_FWD, w)), QT_A(op, GATED_RMSNORM_FWD, T),
        QT_A(op, GATED_RMSNORM_FWD, Hk), QT_A(op, GATED_RMSNORM_FWD, Dk),
        QT_A(op, GATED_RMSNORM_FWD, Hv), QT_A(op, GATED_RMSNORM_FWD, Dv), op->f[0]);
}

void qt_op_gated_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_gated_rmsnorm_bwd(op, ctx);
        return;
    }
    /* slots: t0 do, t1 dqkvz, t2 dy, t3 o, t4 qkvz, t5 w, t6 rstd */
    qt_gated_rmsnorm_bwd(
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, dout)),
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, dqkvz)),
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, rstd)),
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, dy)), qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, o)),
        qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, qkvz)), qt_f32(ctx, QT_T(op, GATED_RMSNORM_BWD, w)),
        QT_A(op, GATED_RMSNORM_BWD, T), QT_A(op, GATED_RMSNORM_BWD, Hk),
        QT_A(op, GATED_RMSNORM_BWD, Dk), QT_A(op, GATED_RMSNORM_BWD, Hv),
        QT_A(op, GATED_RMSNORM_BWD, Dv));
}

void qt_op_gated_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                               float *const dw[2])
{
    if (qt_op_native16(ctx)) {
        qt_op16_gated_rmsnorm_wgrad(op, ctx, seq, dw);
        return;
    }
    int64_t S = QT_A(op, GATED_RMSNORM_WGRAD, S), hv = QT_A(op, GATED_RMSNORM_WGRAD, Hv),
            dv = QT_A(op, GATED_RMSNORM_WGRAD, Dv);
    int64_t wq = qt_gdn_qkvz_width(QT_A(op, GATED_RMSNORM_WGRAD, Hk),
                                   QT_A(op, GATED_RMSNORM_WGRAD, Dk), hv, dv);
    /* slots: t0 dy, t1 o, t2 qkvz, t3 rstd, t4 w (param) */
    const float *rstd = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD, rstd)) + seq * S * hv,
                *dy = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD, dy)) + seq * S * hv * dv;
    const float *o = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD, o)) + seq * S * hv * dv,
                *qkvz = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD, qkvz)) + seq * S * wq;
    if (QT_A(op, GATED_RMSNORM_WGRAD, groups) <= 0) {
        qt_gated_rmsnorm_wgrad(dw[0], rstd, dy, o, qkvz, S, QT_A(op, GATED_RMSNORM_WGRAD, Hk),
                               QT_A(op, GATED_RMSNORM_WGRAD, Dk), hv, dv);
        return;
    }
    /* canonical value-head groups (a6 here; ops_comm.c): the norm weight is shared by heads
     * that tensor parallelism splits */
    const int64_t hpg = hv / QT_A(op, GATED_RMSNORM_WGRAD, groups);
    for (int64_t gi = 0; gi < QT_A(op, GATED_RMSNORM_WGRAD, groups); gi++) {
        float *part = qt_op_group_buf(gi, dv);
        if (part)
            qt_gated_rmsnorm_wgrad_heads(
                part, rstd, dy, o, qkvz, S, QT_A(op, GATED_RMSNORM_WGRAD, Hk),
                QT_A(op, GATED_RMSNORM_WGRAD, Dk), hv, dv, gi * hpg, (gi + 1) * hpg);
    }
    /* the head side's heads are split over tensor and context (docs/context.md) */
    qt_op_group_finish(ctx, dw[0], dv, QT_A(op, GATED_RMSNORM_WGRAD, groups),
                       (1u << QT_MESH_TENSOR) | (1u << QT_MESH_CONTEXT));
}
