/* ops_attn.c - op wrappers for the rotary table, rotary embedding and causal attention.
 *
 * Each wrapper resolves its op record's slots exactly as qt_ops.h documents them and calls
 * the kernel; none allocates or decides a size. ATTN_FWD's score row comes from its t[5]
 * SCRATCH tensor (>= S floats), which configgen always plans; a plan without one (hand-built
 * test plans) falls back to this file's static row buffer when S fits, else to the kernel's
 * scratch-free path. ATTN_BWD passes its t[9] SCRATCH size on, so the kernel takes the
 * blocked path when configgen planned QT_ATTN_BWD_SCRATCH(S) and the reference path when
 * only S fits. All of these give the same bits (attention.h). A packed plan's positions
 * (qt_plan_positions) restart the rotation and the causal window at every document.
 */
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"
#include "../kernels/rope.h"
#include "../kernels/attention.h"

#define QT_ATTN_STATIC_ROW 8192

static struct {
    float fwd_row[QT_ATTN_STATIC_ROW];   /* scores of one query row (S <= QT_ATTN_STATIC_ROW) */
} qt_ops_attn_state;

void qt_op_rope_table(const qt_op *op, const qt_ctx *ctx)
{
    qt_rope_table(qt_f32(ctx, QT_T(op, ROPE_TABLE, table)), QT_A(op, ROPE_TABLE, S),
                  QT_A(op, ROPE_TABLE, R), (double)op->f[0]);
}

void qt_op_rope_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_rope_fwd(op, ctx);
        return;
    }
    qt_rope_fwd_pos(qt_f32(ctx, QT_T(op, ROPE_FWD, y)), qt_f32(ctx, QT_T(op, ROPE_FWD, x)),
                qt_f32(ctx, QT_T(op, ROPE_FWD, table)), qt_plan_positions(ctx), QT_A(op, ROPE_FWD, b),
                QT_A(op, ROPE_FWD, S), QT_A(op, ROPE_FWD, H), QT_A(op, ROPE_FWD, hd),
                QT_A(op, ROPE_FWD, R));
}

void qt_op_rope_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_rope_bwd(op, ctx);
        return;
    }
    qt_rope_bwd_pos(qt_f32(ctx, QT_T(op, ROPE_BWD, dx)), qt_f32(ctx, QT_T(op, ROPE_BWD, dy)),
                qt_f32(ctx, QT_T(op, ROPE_BWD, table)), qt_plan_positions(ctx), QT_A(op, ROPE_BWD, b),
                QT_A(op, ROPE_BWD, S), QT_A(op, ROPE_BWD, H), QT_A(op, ROPE_BWD, hd),
                QT_A(op, ROPE_BWD, R));
}

void qt_op_attn_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_attn_fwd(op, ctx);
        return;
    }
    const int64_t S = QT_A(op, ATTN_FWD, S);
    const int32_t ts = QT_T(op, ATTN_FWD, scratch);
    float *scratch = 0;
    if (ts != QT_NONE && ctx->plan->tensors[ts].role == QT_ROLE_SCRATCH &&
        ctx->plan->tensors[ts].numel >= S)
        scratch = qt_f32(ctx, ts);
    else if (S <= QT_ATTN_STATIC_ROW)
        scratch = qt_ops_attn_state.fwd_row;
    qt_attn_fwd_docs(qt_f32(ctx, QT_T(op, ATTN_FWD, o)), qt_f32(ctx, QT_T(op, ATTN_FWD, lse)),
                qt_f32(ctx, QT_T(op, ATTN_FWD, q)), qt_f32(ctx, QT_T(op, ATTN_FWD, k)),
                qt_f32(ctx, QT_T(op, ATTN_FWD, v)), scratch, qt_plan_positions(ctx),
                QT_A(op, ATTN_FWD, b), S,
                QT_A(op, ATTN_FWD, Hq), QT_A(op, ATTN_FWD, Hkv), QT_A(op, ATTN_FWD, hd), op->f[0]);
}

void qt_op_attn_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_attn_bwd(op, ctx);
        return;
    }
    qt_attn_bwd_docs(qt_f32(ctx, QT_T(op, ATTN_BWD, dq)), qt_f32(ctx, QT_T(op, ATTN_BWD, dk)),
                  qt_f32(ctx, QT_T(op, ATTN_BWD, dv)), qt_f32(ctx, QT_T(op, ATTN_BWD, dout)),
                  qt_f32(ctx, QT_T(op, ATTN_BWD, q)), qt_f32(ctx, QT_T(op, ATTN_BWD, k)),
                  qt_f32(ctx, QT_T(op, ATTN_BWD, v)), qt_f32(ctx, QT_T(op, ATTN_BWD, o)),
                  qt_f32(ctx, QT_T(op, ATTN_BWD, lse)), qt_plan_positions(ctx),
                  qt_f32(ctx, QT_T(op, ATTN_BWD, scratch)),
                  ctx->plan->tensors[QT_T(op, ATTN_BWD, scratch)].numel, QT_A(op, ATTN_BWD, b),
                  QT_A(op, ATTN_BWD, S), QT_A(op, ATTN_BWD, Hq), QT_A(op, ATTN_BWD, Hkv),
                  QT_A(op, ATTN_BWD, hd), op->f[0]);
}
