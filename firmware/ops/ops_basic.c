/* ops_basic.c - op wrappers for the basic kinds: ZERO, ADD, ACC, EMBED_*, RMSNORM_*,
 * MATMUL_*, SWIGLU_*, SIGMOID_GATE_*, XENT, XENT_MTP.
 *
 * Each wrapper reads exactly the slots and attributes that qt_ops.h defines for its kind,
 * resolves tensor ids to arena pointers (qt_f32 / qt_i32) and calls the float kernel. The
 * plan is trusted (configgen checks ids and sizes), so wrappers do no validation.
 * WGRAD wrappers restrict the rows to sequence `seq` and accumulate into dw[0], which the
 * interpreter zeroed; the parameter tensor slot is not read (dw[0] replaces it).
 */
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"
#include "../kernels/matmul_canon.h"
#include "../comm/qt_coll.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/xent.h"

/* ZERO: t0 (F32 or I32), a0 elements. */
void qt_op_zero(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_is_b16(ctx, QT_T(op, ZERO, x))) {
        qt_op16_zero(op, ctx);
        return;
    }
    if (ctx->plan->tensors[QT_T(op, ZERO, x)].dtype == QT_I32)
        qt_zero_i32(qt_i32(ctx, QT_T(op, ZERO, x)), QT_A(op, ZERO, n));
    else
        qt_zero(qt_f32(ctx, QT_T(op, ZERO, x)), QT_A(op, ZERO, n));
}

/* ADD: t0 y = t1 + t2, a0 n. */
void qt_op_add(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_add(op, ctx);
        return;
    }
    qt_add(qt_f32(ctx, QT_T(op, ADD, y)), qt_f32(ctx, QT_T(op, ADD, a)),
           qt_f32(ctx, QT_T(op, ADD, b)), QT_A(op, ADD, n));
}

/* ROUND_BF16: y = bf16(x) held as floats (qt_ops.def). */
void qt_op_round_bf16(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_is_b16(ctx, QT_T(op, ROUND_BF16, y))) {
        qt_op16_round(op, ctx);
        return;
    }
    qt_round_bf16(qt_f32(ctx, QT_T(op, ROUND_BF16, y)), qt_f32(ctx, QT_T(op, ROUND_BF16, x)),
                  QT_A(op, ROUND_BF16, n));
}

/* ACC: t0 += t1, a0 n. */
void qt_op_acc(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_acc(op, ctx);
        return;
    }
    qt_acc(qt_f32(ctx, QT_T(op, ACC, dst)), qt_f32(ctx, QT_T(op, ACC, src)), QT_A(op, ACC, n));
}

/* EMBED_FWD: t0 x, t1 tokens, t2 W; a0 T, a1 d, a2 V. */
void qt_op_embed_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_embed_fwd(op, ctx);
        return;
    }
    qt_embed_fwd(qt_f32(ctx, QT_T(op, EMBED_FWD, x)), qt_i32(ctx, QT_T(op, EMBED_FWD, tokens)),
                 qt_f32(ctx, QT_T(op, EMBED_FWD, w)), QT_A(op, EMBED_FWD, T),
                 QT_A(op, EMBED_FWD, d), QT_A(op, EMBED_FWD, V));
}

/* EMBED_WGRAD: t0 dx, t1 tokens; a1 d, a2 V, a3 S. Rows [seq*S, (seq+1)*S). */
void qt_op_embed_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    int64_t d = QT_A(op, EMBED_WGRAD, d), S = QT_A(op, EMBED_WGRAD, S);
    const int32_t dx = QT_T(op, EMBED_WGRAD, dx);
    float *rows;
    if (qt_is_b16(ctx, dx)) {
        /* bf16: the sequence's rows widened (exact), then the fp32 kernel's adds */
        rows = qt_op_bf16_stage(ctx);
        qt_f32_from_bf16_n(rows, qt_b16(ctx, dx) + seq * S * d, S * d);
    } else {
        rows = qt_f32(ctx, dx) + seq * S * d;
    }
    qt_embed_wgrad(dw[0], rows,
                   qt_i32(ctx, QT_T(op, EMBED_WGRAD, tokens)) + seq * S, S, d,
                   QT_A(op, EMBED_WGRAD, V));
}

/* RMSNORM_FWD: t0 y, t1 rstd, t2 x, t3 w; a0 R, a1 n, a2 xs, a3 ys, a4 flags, f0 eps. */
void qt_op_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_rmsnorm_fwd(op, ctx);
        return;
    }
    qt_rmsnorm_fwd(qt_f32(ctx, QT_T(op, RMSNORM_FWD, y)), qt_f32(ctx, QT_T(op, RMSNORM_FWD, rstd)),
                   qt_f32(ctx, QT_T(op, RMSNORM_FWD, x)), qt_f32(ctx, QT_T(op, RMSNORM_FWD, w)),
                   QT_A(op, RMSNORM_FWD, R), QT_A(op, RMSNORM_FWD, n), QT_A(op, RMSNORM_FWD, xs),
                   QT_A(op, RMSNORM_FWD, ys), (int)QT_A(op, RMSNORM_FWD, flags), op->f[0]);
}

/* RMSNORM_BWD: t0 dx (acc), t1 dy, t2 x, t3 w, t4 rstd; attributes as FWD. */
void qt_op_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_rmsnorm_bwd(op, ctx);
        return;
    }
    qt_rmsnorm_bwd(qt_f32(ctx, QT_T(op, RMSNORM_BWD, dx)), qt_f32(ctx, QT_T(op, RMSNORM_BWD, dy)),
                   qt_f32(ctx, QT_T(op, RMSNORM_BWD, x)), qt_f32(ctx, QT_T(op, RMSNORM_BWD, w)),
                   qt_f32(ctx, QT_T(op, RMSNORM_BWD, rstd)), QT_A(op, RMSNORM_BWD, R),
                   QT_A(op, RMSNORM_BWD, n), QT_A(op, RMSNORM_BWD, xs), QT_A(op, RMSNORM_BWD, ys),
                   (int)QT_A(op, RMSNORM_BWD, flags));
}

/* RMSNORM_WGRAD: t0 dy, t1 x, t2 rstd; a1 n, a2 xs, a3 ys, a5 rows per leaf. */
void qt_op_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    if (qt_op_native16(ctx)) {
        qt_op16_rmsnorm_wgrad(op, ctx, seq, dw);
        return;
    }
    int64_t rps = QT_A(op, RMSNORM_WGRAD, seq_rows), r0 = seq * rps;
    const float *dy = qt_f32(ctx, QT_T(op, RMSNORM_WGRAD, dy)) + r0 * QT_A(op, RMSNORM_WGRAD, ys),
                *x = qt_f32(ctx, QT_T(op, RMSNORM_WGRAD, x)) + r0 * QT_A(op, RMSNORM_WGRAD, xs);
    const float *rstd = qt_f32(ctx, QT_T(op, RMSNORM_WGRAD, rstd)) + r0;
    if (QT_A(op, RMSNORM_WGRAD, heads) <= 0) {
        qt_rmsnorm_wgrad(dw[0], dy, x, rstd, rps, QT_A(op, RMSNORM_WGRAD, n),
                         QT_A(op, RMSNORM_WGRAD, xs), QT_A(op, RMSNORM_WGRAD, ys));
        return;
    }
    /* per-head norm: canonical head groups (a6 of them here), rows (t, head) of each over
     * the leaf's S tokens (one token block) */
    const int64_t S = ctx->plan->train.seq_len / qt_plan_blocks(ctx->plan), H = rps / S,
                  hpg = H / QT_A(op, RMSNORM_WGRAD, heads);
    for (int64_t gi = 0; gi < QT_A(op, RMSNORM_WGRAD, heads); gi++) {
        float *part = qt_op_group_buf(gi, QT_A(op, RMSNORM_WGRAD, n));
        if (part)
            qt_rmsnorm_wgrad_heads(part, dy, x, rstd, S, H, gi * hpg, (gi + 1) * hpg,
                                   QT_A(op, RMSNORM_WGRAD, n), QT_A(op, RMSNORM_WGRAD, xs),
                                   QT_A(op, RMSNORM_WGRAD, ys));
    }
    qt_op_group_finish(ctx, dw[0], QT_A(op, RMSNORM_WGRAD, n), QT_A(op, RMSNORM_WGRAD, heads),
                       1u << QT_MESH_TENSOR);
}

/* MATMUL_FWD: t0 y, t1 x, t2 W; a0 M, a1 N, a2 K. */
void qt_op_matmul_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_matmul_fwd(op, ctx);
        return;
    }
    float *y = qt_f32(ctx, QT_T(op, MATMUL_FWD, y));
    const int64_t M = QT_A(op, MATMUL_FWD, M), N = QT_A(op, MATMUL_FWD, N),
                  K = QT_A(op, MATMUL_FWD, K);
    if (QT_A(op, MATMUL_FWD, nb) <= 0) {
        qt_matmul_fwd(y, qt_f32(ctx, QT_T(op, MATMUL_FWD, x)), qt_f32(ctx, QT_T(op, MATMUL_FWD, w)),
                      M, N, K);
        return;
    }
    qt_matmul_canon_fwd(y, qt_f32(ctx, QT_T(op, MATMUL_FWD, x)),
                        qt_f32(ctx, QT_T(op, MATMUL_FWD, w)), M, N, K, QT_A(op, MATMUL_FWD, segs),
                        QT_A(op, MATMUL_FWD, nb), qt_f32(ctx, QT_T(op, MATMUL_FWD, scratch)));
    if (QT_A(op, MATMUL_FWD, mask))
        qt_op_sum_across(ctx, y, M * N, (unsigned)QT_A(op, MATMUL_FWD, mask));
}

/* MATMUL_BWD_DATA: t0 dx (acc), t1 dy, t2 W; a0 M, a1 N, a2 K; canonical blocking a3..a5. */
void qt_op_matmul_bwd_data(const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_matmul_bwd_data(op, ctx);
        return;
    }
    float *dx = qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, dx));
    const int64_t M = QT_A(op, MATMUL_BWD_DATA, M), N = QT_A(op, MATMUL_BWD_DATA, N),
                  K = QT_A(op, MATMUL_BWD_DATA, K);
    if (QT_A(op, MATMUL_BWD_DATA, nb) <= 0) {
        qt_matmul_bwd_data(dx, qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, dy)),
                           qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, w)), M, N, K);
        return;
    }
    float *total = qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, scratch));
    qt_matmul_canon_bwd_data(total, qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, dy)),
                             qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, w)), M, N, K,
                             QT_A(op, MATMUL_BWD_DATA, segs), QT_A(op, MATMUL_BWD_DATA, nb), total);
    if (QT_A(op, MATMUL_BWD_DATA, mask) &&
        qt_op_sum_across(ctx, total, M * K, (unsigned)QT_A(op, MATMUL_BWD_DATA, mask)))
        return;
    for (int64_t i = 0; i < M * K; i++) dx[i] = dx[i] + total[i];
}

/* ALL_REDUCE: t0 buf (in place), a0 n, a1 group mask. */
void qt_op_all_reduce(const qt_op *op, const qt_ctx *ctx)
{
    qt_op_sum_across(ctx, qt_f32(ctx, QT_T(op, ALL_REDUCE, buf)), QT_A(op, ALL_REDUCE, n),
                     (unsigned)QT_A(op, ALL_REDUCE, mask));
}

/* MATMUL_WGRAD: t0 dy, t1 x; a1 N, a2 K, a3 rows per sequence. Writes dw[0] (QT_OPP_WGRAD_WRITES),
 * or, fp32, when ctx->wgrad_epi offers slot 0 a leaf-tree carry, stores that carry in the
 * kernel's epilogue instead (dw[0] untouched, done[0] set; qt_leaf_carry.h). */
void qt_op_matmul_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    if (ctx->plan->dtype == QT_BF16) {
        qt_op16_matmul_wgrad(op, ctx, seq, dw);
        return;
    }
    int64_t N = QT_A(op, MATMUL_WGRAD, N), K = QT_A(op, MATMUL_WGRAD, K),
            rps = QT_A(op, MATMUL_WGRAD, seq_rows);
    const float *dy = qt_f32(ctx, QT_T(op, MATMUL_WGRAD, dy)) + seq * rps * N,
                *x = qt_f32(ctx, QT_T(op, MATMUL_WGRAD, x)) + seq * rps * K;
    qt_wgrad_epi *epi = ctx->wgrad_epi;
    if (epi && epi->carry[0] && qt_matmul_wgrad_write_carry(epi->carry[0], dy, x, rps, N, K)) {
        epi->done[0] = 1;
        return;
    }
    qt_matmul_wgrad_write(dw[0], dy, x, rps, N, K);
}

/* SWIGLU_FWD: t0 h, t1 a, t2 u; a0 n. */
void qt_op_swiglu_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_swiglu_fwd(op, ctx);
        return;
    }
    qt_swiglu_fwd(qt_f32(ctx, QT_T(op, SWIGLU_FWD, h)), qt_f32(ctx, QT_T(op, SWIGLU_FWD, a)),
                  qt_f32(ctx, QT_T(op, SWIGLU_FWD, u)), QT_A(op, SWIGLU_FWD, n));
}

/* SWIGLU_BWD: t0 da (acc), t1 du (acc), t2 dh, t3 a, t4 u; a0 n. */
void qt_op_swiglu_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_swiglu_bwd(op, ctx);
        return;
    }
    qt_swiglu_bwd(qt_f32(ctx, QT_T(op, SWIGLU_BWD, da)), qt_f32(ctx, QT_T(op, SWIGLU_BWD, du)),
                  qt_f32(ctx, QT_T(op, SWIGLU_BWD, dh)), qt_f32(ctx, QT_T(op, SWIGLU_BWD, a)),
                  qt_f32(ctx, QT_T(op, SWIGLU_BWD, u)), QT_A(op, SWIGLU_BWD, n));
}

/* SIGMOID_GATE_FWD: t0 y, t1 x, t2 gate source; a0 T, a1 n, a2 mode, a3 hd. */
void qt_op_sigmoid_gate_fwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_sigmoid_gate_fwd(op, ctx);
        return;
    }
    qt_sigmoid_gate_fwd(qt_f32(ctx, QT_T(op, SIGMOID_GATE_FWD, y)),
                        qt_f32(ctx, QT_T(op, SIGMOID_GATE_FWD, x)),
                        qt_f32(ctx, QT_T(op, SIGMOID_GATE_FWD, gate)),
                        QT_A(op, SIGMOID_GATE_FWD, T), QT_A(op, SIGMOID_GATE_FWD, n),
                        (int)QT_A(op, SIGMOID_GATE_FWD, mode), QT_A(op, SIGMOID_GATE_FWD, hd));
}

/* SIGMOID_GATE_BWD: t0 dx (acc), t1 dgate (acc), t2 dy, t3 x, t4 gate; attributes as FWD. */
void qt_op_sigmoid_gate_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_sigmoid_gate_bwd(op, ctx);
        return;
    }
    qt_sigmoid_gate_bwd(
        qt_f32(ctx, QT_T(op, SIGMOID_GATE_BWD, dx)), qt_f32(ctx, QT_T(op, SIGMOID_GATE_BWD, dgate)),
        qt_f32(ctx, QT_T(op, SIGMOID_GATE_BWD, dy)), qt_f32(ctx, QT_T(op, SIGMOID_GATE_BWD, x)),
        qt_f32(ctx, QT_T(op, SIGMOID_GATE_BWD, gate)), QT_A(op, SIGMOID_GATE_BWD, T),
        QT_A(op, SIGMOID_GATE_BWD, n), (int)QT_A(op, SIGMOID_GATE_BWD, mode),
        QT_A(op, SIGMOID_GATE_BWD, hd));
}

/* The cross entropy of b x S rows into loss_seq[b] (qt_ops.def XENT): the plain kernel, or
 * with nb > 0 canonical vocabulary blocks, vocab-parallel over the `mask` group: stats,
 * all-gather, merge, block sums, all-gather, finish (kernels/xent.h). The gathers copy
 * floats, so every rank holds the same stats and sums and the bits are one rank's. z != 0
 * (the z-loss, z_seq[b] its sums): qt_xent_z, or the blocked form's z finish; z = 0 runs
 * the kernels it ran before the z-loss existed (their bits). */
static void qt_op_xent_rows(const qt_ctx *ctx, float *loss_seq, float *z_seq, float *dlogits,
                            const float *logits, const int32_t *targets, float *scratch,
                            int64_t b, int64_t S, int64_t V, int64_t nb, unsigned mask, float z)
{
    if (nb <= 0) {
        if (z != 0.0f) qt_xent_z(loss_seq, z_seq, dlogits, logits, targets, b, S, V, z);
        else qt_xent(loss_seq, dlogits, logits, targets, b, S, V);
        return;
    }
    const int64_t R = b * S;
    const int64_t P = mask ? qt_comm_group_size(mask) : 1;
    const int64_t v0 = mask ? qt_comm_group_index(mask) * V : 0;
    float *stat = scratch, *sums = stat + P * 2 * R, *tmp = sums + P * R * nb;
    const int64_t me = v0 / V;
    qt_xent_blk_stats(stat + me * 2 * R, logits, targets, R, V, v0);
    int rc = P > 1 ? qt_coll_all_gather(mask, stat, 2 * R * (int64_t)sizeof(float)) : 0;
    if (!rc) {
        qt_xent_blk_merge(stat, targets, R, V, P);
        qt_xent_blk_sums(sums + me * R * nb, dlogits, logits, stat, R, V, nb);
        if (P > 1) rc = qt_coll_all_gather(mask, sums, R * nb * (int64_t)sizeof(float));
    }
    if (rc) {
        if (ctx->status && !*ctx->status) *ctx->status = rc;
        return;
    }
    if (z != 0.0f)
        qt_xent_blk_finish_z(loss_seq, z_seq, dlogits, stat, sums, targets, b, S, V, nb, P, v0,
                             tmp, z);
    else qt_xent_blk_finish(loss_seq, dlogits, stat, sums, targets, b, S, V, nb, P, v0, tmp);
}

/* XENT: t0 loss_seq, t1 dlogits, t2 logits, t3 targets; a0 b, a1 S, a2 V; a3 nb, a4 mask
 * (canonical vocabulary blocks, vocab-parallel), t4 their scratch; f0 the z-loss
 * multiplier (0: no z term; else t5 z_seq, the per-sequence z sums, plain or blocked). */
void qt_op_xent(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_xent(op, ctx);
        return;
    }
    const int64_t nb = QT_A(op, XENT, nb);
    const float z = op->f[0];
    qt_op_xent_rows(ctx, qt_f32(ctx, QT_T(op, XENT, loss_seq)),
                    z != 0.0f ? qt_f32(ctx, QT_T(op, XENT, z_seq)) : NULL,
                    qt_f32(ctx, QT_T(op, XENT, dlogits)), qt_f32(ctx, QT_T(op, XENT, logits)),
                    qt_i32(ctx, QT_T(op, XENT, targets)),
                    nb > 0 ? qt_f32(ctx, QT_T(op, XENT, scratch)) : NULL, QT_A(op, XENT, b),
                    QT_A(op, XENT, S), QT_A(op, XENT, V), nb, (unsigned)QT_A(op, XENT, mask), z);
}

/* XENT_MTP: the main and MTP logits stacked per token block (qt_ops.def): XENT over the
 * b x n runs of S rows into the scratch's first b x n floats, then the main and the MTP
 * sums per block, and the MTP rows' dlogits times f0 (or the runtime's t6 scale). With the
 * z-loss (f1 != 0) one XENT per run: the main runs (j = 0) with z, into t7 z_seq[s]. */
void qt_op_xent_mtp(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_xent_mtp(op, ctx);
        return;
    }
    const int64_t b = QT_A(op, XENT_MTP, b), S = QT_A(op, XENT_MTP, S),
                  V = QT_A(op, XENT_MTP, V), n = QT_A(op, XENT_MTP, n);
    float *ent = qt_f32(ctx, QT_T(op, XENT_MTP, scratch));
    float *dlogits = qt_f32(ctx, QT_T(op, XENT_MTP, dlogits));
    const float *logits = qt_f32(ctx, QT_T(op, XENT_MTP, logits));
    const int32_t *tg = qt_i32(ctx, QT_T(op, XENT_MTP, targets));
    const int64_t nb = QT_A(op, XENT_MTP, nb);
    const unsigned mask = (unsigned)QT_A(op, XENT_MTP, mask);
    const float z = op->f[1];
    if (z == 0.0f) {
        qt_op_xent_rows(ctx, ent, NULL, dlogits, logits, tg, ent + b * n, b * n, S, V, nb,
                        mask, 0.0f);
    } else {
        float *zs = qt_f32(ctx, QT_T(op, XENT_MTP, z_seq));
        for (int64_t r = 0; r < b * n; r++) {
            const int main_run = r % n == 0;
            qt_op_xent_rows(ctx, ent + r, main_run ? zs + r / n : NULL, dlogits + r * S * V,
                            logits + r * S * V, tg + r * S, ent + b * n, 1, S, V, nb, mask,
                            main_run ? z : 0.0f);
        }
    }
    qt_op_xent_mtp_sums(op, ctx, ent);
    const int32_t sc = QT_T(op, XENT_MTP, scale);
    const float c = sc == QT_NONE ? op->f[0] : *qt_f32(ctx, sc);
    for (int64_t s = 0; s < b; s++) {
        for (int64_t j = 1; j < n; j++) {
            float *d = dlogits + ((s * n + j) * S) * V;
            for (int64_t i = 0; i < S * V; i++) d[i] *= c;
        }
    }
}
