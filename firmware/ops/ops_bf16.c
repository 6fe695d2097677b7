/* ops_bf16.c - the native bf16 forms of the QT_OPP_BF16 kinds' wrappers (qt_ops_bf16.h):
 * ZERO and ROUND_BF16 on bf16 tensors, EMBED_FWD, MATMUL_FWD / BWD_DATA / WGRAD (plain and
 * canonical), the expert FFN. The fp32 wrappers call them when the plan is bf16
 * (docs/precision.md, "Executing bf16 plans").
 *
 * Invariants (the precision rule): contractions on bf16 operands are the VDPBF16PS chains
 * of bf16_matmul.h (blocks of bf16_matmul_canon.h), fp32 from there on; a result is rounded
 * to bf16 (qt_bf16_from_f32) once per element per op, where it is stored, and only after
 * any cross-rank sum of its partials (tensor parallelism), so a split keeps one rank's bits;
 * an accumulating bf16 slot is widened, added to in fp32 and rounded once. fp32 results
 * wait in the plan's staging region (bf16_stage_offset), which configgen sizes for every
 * op's bf16 slots. No state, no heap.
 */
#include <string.h>
#include "qt_ops_bf16.h"
#include "kernels/bf16.h"
#include "kernels/bf16_matmul.h"
#include "kernels/bf16_matmul_canon.h"
#include "kernels/bf16_expert_ffn.h"

float *qt_op_bf16_stage(const qt_ctx *ctx)
{
    return (float *)(void *)(ctx->arena + ctx->plan->bf16_stage_offset);
}

void qt_op_store_b16(const qt_ctx *ctx, int32_t id, const float *v, int64_t n)
{
    if (qt_is_b16(ctx, id)) qt_bf16_from_f32_n(qt_b16(ctx, id), v, n);
    else if (qt_f32(ctx, id) != v) memcpy(qt_f32(ctx, id), v, (size_t)n * sizeof(float));
}

float *qt_op_widen_b16(const qt_ctx *ctx, int32_t id, float *stage, int64_t n)
{
    if (!qt_is_b16(ctx, id)) return qt_f32(ctx, id);
    qt_f32_from_bf16_n(stage, qt_b16(ctx, id), n);
    return stage;
}

void qt_op16_zero(const qt_op *op, const qt_ctx *ctx)
{
    memset(qt_b16(ctx, QT_T(op, ZERO, x)), 0, (size_t)QT_A(op, ZERO, n) * 2u);
}

void qt_op16_round(const qt_op *op, const qt_ctx *ctx)
{
    qt_bf16_from_f32_n(qt_b16(ctx, QT_T(op, ROUND_BF16, y)), qt_f32(ctx, QT_T(op, ROUND_BF16, x)),
                       QT_A(op, ROUND_BF16, n));
}

/* EMBED_FWD: the compute copy's rows are bf16(master) already: copied bit for bit; a token
 * outside [0, V) gives a zero row (as the fp32 kernel). */
void qt_op16_embed_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_bf16 *x = qt_b16(ctx, QT_T(op, EMBED_FWD, x));
    const qt_bf16 *w = qt_b16(ctx, QT_T(op, EMBED_FWD, w));
    const int32_t *tok = qt_i32(ctx, QT_T(op, EMBED_FWD, tokens));
    const int64_t T = QT_A(op, EMBED_FWD, T), d = QT_A(op, EMBED_FWD, d),
                  V = QT_A(op, EMBED_FWD, V);
    for (int64_t t = 0; t < T; t++) {
        if (tok[t] < 0 || tok[t] >= V) memset(x + t * d, 0, (size_t)d * 2u);
        else memcpy(x + t * d, w + (int64_t)tok[t] * d, (size_t)d * 2u);
    }
}

/* MATMUL_FWD: y = bf16(x W^T), the canonical blocks' tree (and the tensor group's sum) in
 * fp32 before the one rounding; plain with a bf16 y, rounded in the kernel's finish where the
 * path has it (qt_bf16_matmul_fwd16: the bits of the fp32 call and the rounding pass). */
void qt_op16_matmul_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t M = QT_A(op, MATMUL_FWD, M), N = QT_A(op, MATMUL_FWD, N),
                  K = QT_A(op, MATMUL_FWD, K);
    const int32_t yid = QT_T(op, MATMUL_FWD, y);
    float *acc = qt_is_b16(ctx, yid) ? qt_op_bf16_stage(ctx) : qt_f32(ctx, yid);
    const qt_bf16 *x = qt_b16(ctx, QT_T(op, MATMUL_FWD, x)),
                  *w = qt_b16(ctx, QT_T(op, MATMUL_FWD, w));
    if (QT_A(op, MATMUL_FWD, nb) <= 0) {
        if (qt_is_b16(ctx, yid) && qt_bf16_matmul_fwd16(qt_b16(ctx, yid), x, w, M, N, K) == 0)
            return; /* rounded in the tiles' finish */
        qt_bf16_matmul_fwd(acc, x, w, M, N, K);
    } else {
        qt_bf16_matmul_canon_fwd(acc, x, w, M, N, K, QT_A(op, MATMUL_FWD, segs),
                                 QT_A(op, MATMUL_FWD, nb),
                                 qt_f32(ctx, QT_T(op, MATMUL_FWD, scratch)));
        if (QT_A(op, MATMUL_FWD, mask) &&
            qt_op_sum_across(ctx, acc, M * N, (unsigned)QT_A(op, MATMUL_FWD, mask)))
            return;
    }
    qt_op_store_b16(ctx, yid, acc, M * N);
}

/* MATMUL_BWD_DATA: dx = bf16(widen(dx) + dy W): plain, one fp32 add per element after the
 * chain (bf16_matmul.h; a bf16 dx widened, added and rounded in the kernel's finish where the
 * path has it: qt_bf16_matmul_bwd_data16); canonical, the fp32 tree total (summed over the
 * tensor group) added once. */
void qt_op16_matmul_bwd_data(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t M = QT_A(op, MATMUL_BWD_DATA, M), N = QT_A(op, MATMUL_BWD_DATA, N),
                  K = QT_A(op, MATMUL_BWD_DATA, K);
    const int32_t dxid = QT_T(op, MATMUL_BWD_DATA, dx);
    const qt_bf16 *dy = qt_b16(ctx, QT_T(op, MATMUL_BWD_DATA, dy)),
                  *w = qt_b16(ctx, QT_T(op, MATMUL_BWD_DATA, w));
    float *stage = qt_op_bf16_stage(ctx);
    if (QT_A(op, MATMUL_BWD_DATA, nb) <= 0) {
        if (qt_is_b16(ctx, dxid) && qt_bf16_matmul_bwd_data16(qt_b16(ctx, dxid), dy, w, M, N, K) == 0)
            return; /* widened, added and rounded in the tiles' finish */
        float *dx = qt_op_widen_b16(ctx, dxid, stage, M * K);
        qt_bf16_matmul_bwd_data(dx, dy, w, M, N, K);
        qt_op_store_b16(ctx, dxid, dx, M * K);
        return;
    }
    float *total = stage;
    qt_bf16_matmul_canon_bwd_data(total, dy, w, M, N, K, QT_A(op, MATMUL_BWD_DATA, segs),
                                  QT_A(op, MATMUL_BWD_DATA, nb),
                                  qt_f32(ctx, QT_T(op, MATMUL_BWD_DATA, scratch)));
    if (QT_A(op, MATMUL_BWD_DATA, mask) &&
        qt_op_sum_across(ctx, total, M * K, (unsigned)QT_A(op, MATMUL_BWD_DATA, mask)))
        return;
    if (qt_is_b16(ctx, dxid)) {
        qt_bf16_acc_f32_n(qt_b16(ctx, dxid), total, M * K);
    } else {
        float *dx = qt_f32(ctx, dxid);
        for (int64_t i = 0; i < M * K; i++) dx[i] = dx[i] + total[i];
    }
}

/* Every leaf of the op in one kernel call (qt_bf16_matmul_wgrad_leaves: per output tile the
 * leaves in order, the bits of the calls one sequence at a time); 1 when done. */
static int qt_op16_matmul_wgrad_leaves(const qt_op *op, const qt_ctx *ctx,
                                       const qt_wgrad_leaves *all)
{
    const int64_t N = QT_A(op, MATMUL_WGRAD, N), K = QT_A(op, MATMUL_WGRAD, K),
                  rps = QT_A(op, MATMUL_WGRAD, seq_rows);
    float *dw[QT_WGRAD_LEAVES_MAX];
    const qt_leaf_carry *cy[QT_WGRAD_LEAVES_MAX];
    const qt_bf16 *dy[QT_WGRAD_LEAVES_MAX], *x[QT_WGRAD_LEAVES_MAX];
    if (all->n > QT_WGRAD_LEAVES_MAX) return 0;
    for (int32_t s = 0; s < all->n; s++) {
        if (all->carried[s] && all->carry[s][0].n < 1) return 0;
        dw[s] = all->dw[s][0];
        cy[s] = all->carried[s] ? &all->carry[s][0] : 0;
        dy[s] = qt_b16(ctx, QT_T(op, MATMUL_WGRAD, dy)) + s * rps * N;
        x[s] = qt_b16(ctx, QT_T(op, MATMUL_WGRAD, x)) + s * rps * K;
    }
    return qt_bf16_matmul_wgrad_leaves(all->n, dw, cy, dy, x, rps, N, K);
}

/* MATMUL_WGRAD: the sequence's fp32 leaf from bf16 dy and x (bf16_matmul.h wgrad chain), or,
 * when ctx->wgrad_epi offers slot 0 a leaf-tree carry, that carry stored in the kernel's
 * finish instead (dw[0] untouched, done[0] set; qt_leaf_carry.h), as the fp32 wrapper;
 * offered every leaf at once (the first sequence), all of them in one call when the kernel
 * takes the shape. */
void qt_op16_matmul_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    const int64_t N = QT_A(op, MATMUL_WGRAD, N), K = QT_A(op, MATMUL_WGRAD, K),
                  rps = QT_A(op, MATMUL_WGRAD, seq_rows);
    const qt_bf16 *dy = qt_b16(ctx, QT_T(op, MATMUL_WGRAD, dy)) + seq * rps * N,
                  *x = qt_b16(ctx, QT_T(op, MATMUL_WGRAD, x)) + seq * rps * K;
    qt_wgrad_epi *epi = ctx->wgrad_epi;
    if (seq == 0 && epi && epi->leaves && qt_op16_matmul_wgrad_leaves(op, ctx, epi->leaves)) {
        epi->leaves->done = 1;
        return;
    }
    if (epi && epi->carry[0] && qt_bf16_matmul_wgrad_carry(epi->carry[0], dy, x, rps, N, K)) {
        epi->done[0] = 1;
        return;
    }
    qt_bf16_matmul_wgrad(dw[0], dy, x, rps, N, K);
}

/* EXPERT_FFN_FWD: gu and h rounded inside the kernel (matmul operands); y fp32 from the
 * kernel, rounded here when it is bf16 (one rank), left fp32 when it is a partial sum that
 * an ALL_REDUCE completes first (tensor parallelism) - the rounding then follows it. */
void qt_op16_expert_ffn_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, EXPERT_FFN_FWD, T), k = QT_A(op, EXPERT_FFN_FWD, k),
                  d = QT_A(op, EXPERT_FFN_FWD, d);
    const int32_t yid = QT_T(op, EXPERT_FFN_FWD, y), sid = QT_T(op, EXPERT_FFN_FWD, scratch);
    float *y = qt_is_b16(ctx, yid) ? qt_op_bf16_stage(ctx) : qt_f32(ctx, yid);
    qt_bf16_expert_ffn_fwd(y, qt_b16(ctx, QT_T(op, EXPERT_FFN_FWD, gu)),
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_FWD, x)),
                           qt_i32(ctx, QT_T(op, EXPERT_FFN_FWD, idx)),
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_FWD, w_gu)),
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_FWD, w_down)), qt_f32(ctx, sid), T, k,
                           QT_A(op, EXPERT_FFN_FWD, E), d, QT_A(op, EXPERT_FFN_FWD, f),
                           ctx->plan->tensors[sid].numel, QT_A(op, EXPERT_FFN_FWD, nb));
    qt_op_store_b16(ctx, yid, y, T * k * d);
}

/* EXPERT_FFN_BWD: dgu rounded inside the kernel (stored, and the operand of the data
 * gradient); each token's slot rows added in fp32 to the widened dx (bf16 on one rank) or
 * to the fp32 dx of an expert host or a tensor-parallel partial, rounded once. */
void qt_op16_expert_ffn_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, EXPERT_FFN_BWD, T), d = QT_A(op, EXPERT_FFN_BWD, d);
    const int32_t dxid = QT_T(op, EXPERT_FFN_BWD, dx), sid = QT_T(op, EXPERT_FFN_BWD, scratch),
                  gid = QT_T(op, EXPERT_FFN_BWD, dgu);
    float *dx = qt_op_widen_b16(ctx, dxid, qt_op_bf16_stage(ctx), T * d);
    qt_bf16_expert_ffn_bwd(dx, gid != QT_NONE ? qt_b16(ctx, gid) : 0,
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_BWD, dy)),
                           qt_i32(ctx, QT_T(op, EXPERT_FFN_BWD, idx)),
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_BWD, gu)),
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_BWD, w_gu)),
                           qt_b16(ctx, QT_T(op, EXPERT_FFN_BWD, w_down)), qt_f32(ctx, sid), T,
                           QT_A(op, EXPERT_FFN_BWD, k), QT_A(op, EXPERT_FFN_BWD, E), d,
                           QT_A(op, EXPERT_FFN_BWD, f), ctx->plan->tensors[sid].numel,
                           QT_A(op, EXPERT_FFN_BWD, bwd_nb));
    qt_op_store_b16(ctx, dxid, dx, T * d);
}

/* Every leaf of the op in one kernel call (qt_bf16_expert_ffn_wgrad_leaves: expert by
 * expert, leaf by leaf: the bits of the calls one sequence at a time); 1 when done. */
static int qt_op16_expert_ffn_wgrad_leaves(const qt_op *op, const qt_ctx *ctx,
                                           const qt_wgrad_leaves *all)
{
    qt_bf16_ffn_leaf lv[QT_WGRAD_LEAVES_MAX];
    const int64_t d = QT_A(op, EXPERT_FFN_WGRAD, d), f = QT_A(op, EXPERT_FFN_WGRAD, f),
                  E = QT_A(op, EXPERT_FFN_WGRAD, E);
    const int32_t sid = QT_T(op, EXPERT_FFN_WGRAD, scratch), gid = QT_T(op, EXPERT_FFN_WGRAD, dgu);
    for (int32_t s = 0; s < all->n; s++) {
        int64_t t0, S, k;
        qt_op_expert_wgrad_rows(op, ctx, s, &t0, &S, &k);
        qt_bf16_ffn_leaf *l = &lv[s];
        l->dy = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, dy)) + t0 * k * d;
        l->x = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, x)) + t0 * d;
        l->gu = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, gu)) + t0 * k * 2 * f;
        l->dgu = gid != QT_NONE ? qt_b16(ctx, gid) + t0 * k * 2 * f : 0;
        l->idx = qt_i32(ctx, QT_T(op, EXPERT_FFN_WGRAD, idx)) + t0 * k;
        l->T = S, l->k = k;
        float *dw[2];
        const qt_leaf_carry *c[2];
        if (!qt_op_expert_wgrad_leaf_dest(all, s, dw, c)) return 0;
        l->dw_gu = dw[0], l->dw_down = dw[1], l->c_gu = c[0], l->c_down = c[1];
    }
    return qt_bf16_expert_ffn_wgrad_leaves(lv, all->n, qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, w_down)),
                                           qt_f32(ctx, sid), E, d, f,
                                           ctx->plan->tensors[sid].numel);
}

/* EXPERT_FFN_WGRAD: the sequence's fp32 leaves of W_gu and W_down, written whole, or, when
 * ctx->wgrad_epi offers both slots a leaf-tree carry, those carries stored in the kernel's
 * finish (done[0], done[1] set; qt_leaf_carry.h); the rows of the sequence as the fp32
 * wrapper finds them (an expert host's packed rows via seg); offered every leaf at once
 * (the first sequence), all of them in one call. */
void qt_op16_expert_ffn_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    if (seq == 0 && ctx->wgrad_epi && ctx->wgrad_epi->leaves &&
        qt_op16_expert_ffn_wgrad_leaves(op, ctx, ctx->wgrad_epi->leaves)) {
        ctx->wgrad_epi->leaves->done = 1;
        return;
    }
    int64_t t0, S, k;
    qt_op_expert_wgrad_rows(op, ctx, seq, &t0, &S, &k);
    const int64_t d = QT_A(op, EXPERT_FFN_WGRAD, d), f = QT_A(op, EXPERT_FFN_WGRAD, f),
                  E = QT_A(op, EXPERT_FFN_WGRAD, E);
    const int32_t sid = QT_T(op, EXPERT_FFN_WGRAD, scratch), gid = QT_T(op, EXPERT_FFN_WGRAD, dgu);
    const qt_bf16 *dy = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, dy)) + t0 * k * d,
                  *x = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, x)) + t0 * d,
                  *gu = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, gu)) + t0 * k * 2 * f,
                  *dgu = gid != QT_NONE ? qt_b16(ctx, gid) + t0 * k * 2 * f : 0,
                  *wd = qt_b16(ctx, QT_T(op, EXPERT_FFN_WGRAD, w_down));
    const int32_t *idx = qt_i32(ctx, QT_T(op, EXPERT_FFN_WGRAD, idx)) + t0 * k;
    float *scratch = qt_f32(ctx, sid);
    const int64_t sn = ctx->plan->tensors[sid].numel;
    qt_wgrad_epi *epi = ctx->wgrad_epi;
    if (epi && epi->carry[0] && epi->carry[1] &&
        qt_bf16_expert_ffn_wgrad_carry(epi->carry[0], epi->carry[1], dy, x, idx, gu, dgu, wd,
                                       scratch, S, k, E, d, f, sn)) {
        epi->done[0] = epi->done[1] = 1;
        return;
    }
    qt_bf16_expert_ffn_wgrad(dw[0], dw[1], dy, x, idx, gu, dgu, wd, scratch, S, k, E, d, f, sn);
}
