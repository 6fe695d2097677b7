/* ops_attn.c - op wrappers for the rotary table, rotary embedding and causal attention.
 *
 * Each wrapper resolves its op record's slots exactly as qt_ops.h documents them and calls
 * the kernel; none allocates or decides a size. ATTN_FWD's score row comes from its t[5]
 * SCRATCH tensor (>= S floats), which configgen always plans; a plan without one (hand-built
 * test plans) falls back to this file's static row buffer when S fits, else to the kernel's
 * scratch-free path. ATTN_BWD passes its t[9] SCRATCH size on, so the kernel takes the
 * blocked path when configgen planned QT_ATTN_BWD_SCRATCH(S) and the reference path when
 * only S fits. All of these give the same bits (attention.h).
 */
#include "qt_op_fns.h"
#include "../kernels/rope.h"
#include "../kernels/attention.h"

#define QT_ATTN_STATIC_ROW 8192

static struct {
    float fwd_row[QT_ATTN_STATIC_ROW];   /* scores of one query row (S <= QT_ATTN_STATIC_ROW) */
} qt_ops_attn_state;

void qt_op_rope_table(const qt_op *op, const qt_ctx *ctx)
{
    qt_rope_table(qt_f32(ctx, op->t[0]), op->a[0], op->a[1], (double)op->f[0]);
}

void qt_op_rope_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_rope_fwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                op->a[0], op->a[1], op->a[2], op->a[3], op->a[4]);
}

void qt_op_rope_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_rope_bwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                op->a[0], op->a[1], op->a[2], op->a[3], op->a[4]);
}

void qt_op_attn_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t S = op->a[1];
    const int32_t ts = op->t[5];
    float *scratch = 0;
    if (ts != QT_NONE && ctx->plan->tensors[ts].role == QT_ROLE_SCRATCH &&
        ctx->plan->tensors[ts].numel >= S)
        scratch = qt_f32(ctx, ts);
    else if (S <= QT_ATTN_STATIC_ROW)
        scratch = qt_ops_attn_state.fwd_row;
    qt_attn_fwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                qt_f32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), scratch, op->a[0], S, op->a[2],
                op->a[3], op->a[4], op->f[0]);
}

void qt_op_attn_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_attn_bwd_n(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                  qt_f32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), qt_f32(ctx, op->t[5]),
                  qt_f32(ctx, op->t[6]), qt_f32(ctx, op->t[7]), qt_f32(ctx, op->t[8]),
                  qt_f32(ctx, op->t[9]), ctx->plan->tensors[op->t[9]].numel, op->a[0],
                  op->a[1], op->a[2], op->a[3], op->a[4], op->f[0]);
}
