/* ops_moe.c - op wrappers for MoE routing, the routed expert FFN and the combine.
 *
 * Each wrapper resolves its op record's slots exactly as qt_ops.h documents them and calls
 * the kernel. Scratch sizes come from the scratch tensor's numel, so the kernels can check
 * them. The WGRAD wrapper offsets every row-indexed input to sequence `seq` (rows
 * [seq*S, (seq+1)*S) of x, i.e. (t, slot) rows [seq*S*k, (seq+1)*S*k)) and accumulates into
 * dw[0] (W_gu) and dw[1] (W_down); on an expert host (the WGRAD's seg slot set) the
 * sequence's rows are its packed rows instead. When the plan gives the BWD op its dgu slot, the BWD
 * parks d(gu) there and the WGRAD reads it instead of recomputing it (same bits).
 */
#include <stdio.h>
#include <string.h>
#include "qt_op_fns.h"
#include "../kernels/moe_route.h"
#include "../kernels/expert_ffn.h"
#include "../kernels/moe_combine.h"

void qt_op_moe_route_fwd(const qt_op *op, const qt_ctx *ctx)
{
    float *lb = op->t[2] != QT_NONE ? qt_f32(ctx, op->t[2]) : 0;
    qt_moe_route_fwd(qt_i32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), lb, qt_f32(ctx, op->t[3]),
                     op->a[0], op->a[1], op->a[2], op->a[3], op->f[0]);
}

void qt_op_moe_route_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_moe_route_bwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                     qt_i32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), op->a[0], op->a[1],
                     op->a[2], op->a[3], op->f[0]);
}

/* The load-balance accumulators live on the kernel's stack (moe_route.h): at most
 * QT_MOE_MAX_EXPERTS experts when the loss is on (f0 != 0). */
static int qt_check_moe_route(const qt_op *op, qt_check_state *st)
{
    const int64_t E = QT_A(op, MOE_ROUTE_FWD, E);
    if (op->f[0] != 0.0f && E > QT_MOE_MAX_EXPERTS) {
        snprintf(st->why, sizeof st->why, "load-balance loss with %lld experts (kernel limit "
                 "%d)", (long long)E, QT_MOE_MAX_EXPERTS);
        return 1;
    }
    return 0;
}

int qt_check_moe_route_fwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)p;
    return qt_check_moe_route(op, st);
}

int qt_check_moe_route_bwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)p;
    return qt_check_moe_route(op, st);
}

void qt_op_expert_ffn_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_expert_ffn_fwd_canon(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                            qt_i32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), qt_f32(ctx, op->t[5]),
                            qt_f32(ctx, op->t[6]), op->a[0], op->a[1], op->a[2], op->a[3],
                            op->a[4], ctx->plan->tensors[op->t[6]].numel, op->a[5]);
}

/* t8 dgu is optional: without it the WGRAD recomputes d(gu). */
void qt_op_expert_ffn_bwd(const qt_op *op, const qt_ctx *ctx)
{
    float *dgu = op->t[8] != QT_NONE ? qt_f32(ctx, op->t[8]) : 0;
    qt_expert_ffn_bwd_save_canon(qt_f32(ctx, op->t[0]), dgu, qt_f32(ctx, op->t[1]),
                                 qt_i32(ctx, op->t[3]), qt_f32(ctx, op->t[4]),
                                 qt_f32(ctx, op->t[5]), qt_f32(ctx, op->t[6]),
                                 qt_f32(ctx, op->t[7]), op->a[0], op->a[1], op->a[2], op->a[3],
                                 op->a[4], ctx->plan->tensors[op->t[7]].numel, op->a[6]);
}

/* EXPERT_FFN_WGRAD: writes dw[0] (W_gu) and dw[1] (W_down) whole (QT_OPP_WGRAD_WRITES). */
void qt_op_expert_ffn_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    int64_t k = op->a[1], S = op->a[5], t0 = seq * S;
    const int64_t d = op->a[3], f = op->a[4];
    if (op->t[8] != QT_NONE) {
        /* expert host: sequence `seq` of the expert group owns the packed rows
         * [seg[seq], seg[seq+1]) (k = 1), the rows the one-rank kernel visits for it */
        const int32_t *seg = qt_i32(ctx, op->t[8]);
        t0 = seg[seq];
        S = seg[seq + 1] - seg[seq];
        k = 1;
    }
    if (op->t[7] != QT_NONE) {
        qt_expert_ffn_wgrad_saved_write(dw[0], dw[1], qt_f32(ctx, op->t[0]) + t0 * k * d,
                                  qt_f32(ctx, op->t[1]) + t0 * d,
                                  qt_i32(ctx, op->t[2]) + t0 * k,
                                  qt_f32(ctx, op->t[3]) + t0 * k * 2 * f,
                                  qt_f32(ctx, op->t[7]) + t0 * k * 2 * f,
                                  qt_f32(ctx, op->t[6]), S, k, op->a[2], d, f,
                                  ctx->plan->tensors[op->t[6]].numel);
        return;
    }
    /* the recomputing form accumulates: zero the leaves first (QT_OPP_WGRAD_WRITES) */
    memset(dw[0], 0, (size_t)(op->a[2] * 2 * f * d) * sizeof(float));
    memset(dw[1], 0, (size_t)(op->a[2] * d * f) * sizeof(float));
    qt_expert_ffn_wgrad(dw[0], dw[1], qt_f32(ctx, op->t[0]) + t0 * k * d,
                        qt_f32(ctx, op->t[1]) + t0 * d, qt_i32(ctx, op->t[2]) + t0 * k,
                        qt_f32(ctx, op->t[3]) + t0 * k * 2 * f, qt_f32(ctx, op->t[5]),
                        qt_f32(ctx, op->t[6]), S, k, op->a[2], d, f,
                        ctx->plan->tensors[op->t[6]].numel);
}

void qt_op_moe_combine_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_moe_combine_fwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                       op->a[0], op->a[1], op->a[2]);
}

void qt_op_moe_combine_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_moe_combine_bwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                       qt_f32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), op->a[0], op->a[1],
                       op->a[2]);
}
