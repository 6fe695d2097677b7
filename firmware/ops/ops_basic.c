/* ops_basic.c - op wrappers for the basic kinds: ZERO, ADD, ACC, EMBED_*, RMSNORM_*,
 * MATMUL_*, SWIGLU_*, SIGMOID_GATE_*, XENT.
 *
 * Each wrapper reads exactly the slots and attributes that qt_ops.h defines for its kind,
 * resolves tensor ids to arena pointers (qt_f32 / qt_i32) and calls the float kernel. The
 * plan is trusted (configgen checks ids and sizes), so wrappers do no validation.
 * WGRAD wrappers restrict the rows to sequence `seq` and accumulate into dw[0], which the
 * interpreter zeroed; the parameter tensor slot is not read (dw[0] replaces it).
 */
#include "qt_op_fns.h"
#include "../kernels/matmul_canon.h"
#include "../comm/qt_coll.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/xent.h"

/* ZERO: t0 (F32 or I32), a0 elements. */
void qt_op_zero(const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->tensors[op->t[0]].dtype == QT_I32)
        qt_zero_i32(qt_i32(ctx, op->t[0]), op->a[0]);
    else
        qt_zero(qt_f32(ctx, op->t[0]), op->a[0]);
}

/* ADD: t0 y = t1 + t2, a0 n. */
void qt_op_add(const qt_op *op, const qt_ctx *ctx)
{
    qt_add(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]), op->a[0]);
}

/* ROUND_BF16: y = bf16(x) held as floats (qt_ops.def). */
void qt_op_round_bf16(const qt_op *op, const qt_ctx *ctx)
{
    qt_round_bf16(qt_f32(ctx, QT_T(op, ROUND_BF16, y)), qt_f32(ctx, QT_T(op, ROUND_BF16, x)),
                  QT_A(op, ROUND_BF16, n));
}

/* ACC: t0 += t1, a0 n. */
void qt_op_acc(const qt_op *op, const qt_ctx *ctx)
{
    qt_acc(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), op->a[0]);
}

/* EMBED_FWD: t0 x, t1 tokens, t2 W; a0 T, a1 d, a2 V. */
void qt_op_embed_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_embed_fwd(qt_f32(ctx, op->t[0]), qt_i32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                 op->a[0], op->a[1], op->a[2]);
}

/* EMBED_WGRAD: t0 dx, t1 tokens; a1 d, a2 V, a3 S. Rows [seq*S, (seq+1)*S). */
void qt_op_embed_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    int64_t d = op->a[1], S = op->a[3];
    qt_embed_wgrad(dw[0], qt_f32(ctx, op->t[0]) + seq * S * d, qt_i32(ctx, op->t[1]) + seq * S,
                   S, d, op->a[2]);
}

/* RMSNORM_FWD: t0 y, t1 rstd, t2 x, t3 w; a0 R, a1 n, a2 xs, a3 ys, a4 flags, f0 eps. */
void qt_op_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_rmsnorm_fwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                   qt_f32(ctx, op->t[3]), op->a[0], op->a[1], op->a[2], op->a[3],
                   (int)op->a[4], op->f[0]);
}

/* RMSNORM_BWD: t0 dx (acc), t1 dy, t2 x, t3 w, t4 rstd; attributes as FWD. */
void qt_op_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_rmsnorm_bwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                   qt_f32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), op->a[0], op->a[1],
                   op->a[2], op->a[3], (int)op->a[4]);
}

/* RMSNORM_WGRAD: t0 dy, t1 x, t2 rstd; a1 n, a2 xs, a3 ys, a5 rows per sequence. */
void qt_op_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    int64_t rps = op->a[5], r0 = seq * rps;
    const float *dy = qt_f32(ctx, op->t[0]) + r0 * op->a[3], *x = qt_f32(ctx, op->t[1]) + r0 * op->a[2];
    const float *rstd = qt_f32(ctx, op->t[2]) + r0;
    if (op->a[6] <= 0) {
        qt_rmsnorm_wgrad(dw[0], dy, x, rstd, rps, op->a[1], op->a[2], op->a[3]);
        return;
    }
    /* per-head norm: canonical head groups (a6 of them here), rows (t, head) of each */
    const int64_t S = ctx->plan->train.seq_len, H = rps / S, hpg = H / op->a[6];
    for (int64_t gi = 0; gi < op->a[6]; gi++) {
        float *part = qt_op_group_buf(gi, op->a[1]);
        if (part)
            qt_rmsnorm_wgrad_heads(part, dy, x, rstd, S, H, gi * hpg, (gi + 1) * hpg, op->a[1],
                                   op->a[2], op->a[3]);
    }
    qt_op_group_finish(ctx, dw[0], op->a[1], op->a[6]);
}

/* MATMUL_FWD: t0 y, t1 x, t2 W; a0 M, a1 N, a2 K. */
void qt_op_matmul_fwd(const qt_op *op, const qt_ctx *ctx)
{
    float *y = qt_f32(ctx, op->t[0]);
    const int64_t M = op->a[0], N = op->a[1], K = op->a[2];
    if (op->a[3] <= 0) {
        qt_matmul_fwd(y, qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]), M, N, K);
        return;
    }
    qt_matmul_canon_fwd(y, qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]), M, N, K, op->a[4],
                        op->a[3], qt_f32(ctx, op->t[3]));
    if (op->a[5]) qt_op_sum_across(ctx, y, M * N, (unsigned)op->a[5]);
}

/* MATMUL_BWD_DATA: t0 dx (acc), t1 dy, t2 W; a0 M, a1 N, a2 K; canonical blocking a3..a5. */
void qt_op_matmul_bwd_data(const qt_op *op, const qt_ctx *ctx)
{
    float *dx = qt_f32(ctx, op->t[0]);
    const int64_t M = op->a[0], N = op->a[1], K = op->a[2];
    if (op->a[3] <= 0) {
        qt_matmul_bwd_data(dx, qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]), M, N, K);
        return;
    }
    float *total = qt_f32(ctx, op->t[3]);
    qt_matmul_canon_bwd_data(total, qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]), M, N, K,
                             op->a[4], op->a[3], total);
    if (op->a[5] && qt_op_sum_across(ctx, total, M * K, (unsigned)op->a[5])) return;
    for (int64_t i = 0; i < M * K; i++) dx[i] = dx[i] + total[i];
}

/* ALL_REDUCE: t0 buf (in place), a0 n, a1 group mask. */
void qt_op_all_reduce(const qt_op *op, const qt_ctx *ctx)
{
    qt_op_sum_across(ctx, qt_f32(ctx, op->t[0]), op->a[0], (unsigned)op->a[1]);
}

/* MATMUL_WGRAD: t0 dy, t1 x; a1 N, a2 K, a3 rows per sequence. Writes dw[0] (QT_OPP_WGRAD_WRITES). */
void qt_op_matmul_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    int64_t N = op->a[1], K = op->a[2], rps = op->a[3];
    qt_matmul_wgrad_write(dw[0], qt_f32(ctx, op->t[0]) + seq * rps * N,
                    qt_f32(ctx, op->t[1]) + seq * rps * K, rps, N, K);
}

/* SWIGLU_FWD: t0 h, t1 a, t2 u; a0 n. */
void qt_op_swiglu_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_swiglu_fwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                  op->a[0]);
}

/* SWIGLU_BWD: t0 da (acc), t1 du (acc), t2 dh, t3 a, t4 u; a0 n. */
void qt_op_swiglu_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_swiglu_bwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                  qt_f32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), op->a[0]);
}

/* SIGMOID_GATE_FWD: t0 y, t1 x, t2 gate source; a0 T, a1 n, a2 mode, a3 hd. */
void qt_op_sigmoid_gate_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_sigmoid_gate_fwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                        op->a[0], op->a[1], (int)op->a[2], op->a[3]);
}

/* SIGMOID_GATE_BWD: t0 dx (acc), t1 dgate (acc), t2 dy, t3 x, t4 gate; attributes as FWD. */
void qt_op_sigmoid_gate_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_sigmoid_gate_bwd(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
                        qt_f32(ctx, op->t[3]), qt_f32(ctx, op->t[4]), op->a[0], op->a[1],
                        (int)op->a[2], op->a[3]);
}

/* XENT: t0 loss_seq, t1 dlogits, t2 logits, t3 targets; a0 b, a1 S, a2 V. */
void qt_op_xent(const qt_op *op, const qt_ctx *ctx)
{
    qt_xent(qt_f32(ctx, op->t[0]), qt_f32(ctx, op->t[1]), qt_f32(ctx, op->t[2]),
            qt_i32(ctx, op->t[3]), op->a[0], op->a[1], op->a[2]);
}
