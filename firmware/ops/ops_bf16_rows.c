/* ops_bf16_rows.c - the native bf16 forms of the elementwise and row kinds (qt_ops_bf16.h):
 * ADD, ACC, SWIGLU_FWD / BWD, SIGMOID_GATE_FWD / BWD, RMSNORM_FWD / BWD / WGRAD,
 * GATED_RMSNORM_FWD / BWD / WGRAD, MOE_COMBINE_FWD / BWD, and by whole sequences the GDN
 * short conv (GDN_CONV_FWD / BWD / WGRAD) and the delta rule (GDN_CORE_FWD / BWD)
 * (docs/precision.md, "Executing bf16 plans", pattern (B)); the other kinds' forms are in
 * ops_bf16_seq.c, the block machinery in ops_bf16_blocks.c (qt_r16.h).
 *
 * Shape: the op's rows (tokens, or runs of elements) go in blocks of about QT_R16_BLOCK
 * floats per slot. For each block, every bf16 slot's rows are widened (exact) into a buffer
 * in the plan's staging region, the kind's fp32 kernel runs on the block with the op's
 * arguments restricted to those rows, and the blocks of the written and accumulated slots
 * are rounded back (qt_bf16_from_f32). So each element is computed by the fp32 kernel's
 * expression, in its order, on the widened inputs, and rounded once where it is stored:
 * what the boundary (runtime/interp_bf16.c) computes, with the conversions done while the
 * block is in cache instead of in whole-tensor passes. fp32 slots (the saved rstd, and any
 * fp32 tensor of a bf16 plan) are read and written in place when their rows are contiguous.
 * The row kinds RMSNORM_*, GATED_RMSNORM_* (Dv <= QT_B16_GRN_DV), MOE_COMBINE_*, SWIGLU_*
 * and SIGMOID_GATE_* skip the blocks when their row tensors are bf16 and every read tensor
 * is finite (qt_r16_one_pass): one pass, kernels/bf16_rows.h, the same per-element
 * expressions and rounding.
 *
 * The GDN kinds' kernels never mix sequences (the conv's taps and the recurrence stay inside
 * one; packed documents restart by the positions, indexed like the rows), so their blocks
 * are single sequences (b = 1, the sequence's rows, states and positions), a sequence's
 * worth of widened inputs instead of the whole microbatch's.
 *
 * Invariants: each kernel used here never mixes rows (its header: rows, tokens, elements
 * independent), so a block's call gives the whole call's bits on its rows; WGRAD kinds add
 * their blocks into the leaf (or the head groups' partials) in increasing row order, which
 * is the kernel's own order. Rows that an op leaves alone inside a rounded-back block (the
 * other columns of a gate source or of qkvz, dropped slots) round back to their own bits,
 * as under the boundary (a stored bf16 value widens and rounds to itself). The buffers
 * take at most the op's boundary staging (the kinds carry QT_OPP_BF16_PSTAGE, so configgen
 * sizes the region as for the boundary, which validate_bf16.c checks); an op that names one
 * tensor in two slots, or a region too small for the blocks, runs through the boundary
 * (the same bits). No state, no heap, no VLAs.
 */
#include "qt_r16.h"
#include "kernels/bf16.h"
#include "kernels/bf16_rows.h"
#include "kernels/elementwise.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gdn_chunk.h"
#include "kernels/gdn_conv.h"
#include "kernels/gdn_core.h"
#include "kernels/moe_combine.h"
#include "kernels/rmsnorm.h"

/* Nonzero when slot x's rows [0, rows) (from its first element to the last row's end,
 * gaps included; its whole tensor when rows <= 0) hold an inf or a NaN. */
static int qt_r16_nonfinite(const qt_ctx *ctx, const qt_r16_slot *x, int64_t rows)
{
    int64_t at = 0, n = ctx->plan->tensors[x->id].numel;
    if (x->fixed) n = x->n;
    else if (rows > 0) at = x->off, n = (rows - 1) * x->s + x->n;
    unsigned any = 0;
    if (qt_is_b16(ctx, x->id)) {
        const qt_bf16 *v = qt_b16(ctx, x->id) + at;
        for (int64_t i = 0; i < n; i++) any |= (v[i] & 0x7f80u) == 0x7f80u;
    } else {
        const uint32_t *v = (const uint32_t *)(const void *)(qt_f32(ctx, x->id) + at);
        for (int64_t i = 0; i < n; i++) any |= (v[i] & 0x7f800000u) == 0x7f800000u;
    }
    return any != 0;
}

/* One pass (kernels/bf16_rows.h) when the slots in mask b16 are bf16, those in f32 are fp32
 * and no read slot holds an inf or a NaN in the op's rows [0, rows) (rows <= 0: the
 * elementwise kinds, whole tensors): the op's rows read and written in place, the same
 * bits as the blocks. With finite inputs every NaN the arithmetic makes is the default
 * NaN, so no operation ever chooses between two different NaNs, and commutative operations
 * give the same bits in whichever operand order the compiler emits them (the one-pass and
 * the fp32 kernels are compiled separately); a non-finite input sends the op through the
 * blocks (the fp32 kernel's own code). Called after qt_r16_start (so no tensor is named
 * twice); a norm's weight is widened by qt_r16_get as before and checked here. */
static int qt_r16_one_pass(const qt_r16 *b, unsigned b16, unsigned f32, int64_t rows)
{
    for (int i = 0; i < b->ns; i++) {
        const int is16 = qt_is_b16(b->ctx, b->sl[i].id);
        if (((b16 >> i) & 1u) && !is16) return 0;
        if (((f32 >> i) & 1u) && is16) return 0;
    }
    for (int i = 0; i < b->ns; i++)
        if (b->sl[i].rd && qt_r16_nonfinite(b->ctx, &b->sl[i], rows)) return 0;
    return 1;
}

/* Slot i's tensor as bf16 from its first element (the one-pass forms). */
#define QT_R16_B(i) (qt_b16(ctx, b.sl[i].id) + b.sl[i].off)

/* ------------------------------------------------------------------ elementwise */

/* Elementwise kinds: n elements as one row, in blocks of up to QT_R16_BLOCK; every slot's
 * block is elements [e0, e0 + m). */
static void qt_r16_span(qt_r16 *b, int64_t e0, int64_t m)
{
    for (int i = 0; i < b->ns; i++) {
        b->sl[i].off = e0;
        b->sl[i].n = b->sl[i].s = m;
    }
}

/* ADD and ACC with every slot bf16: one pass (qt_bf16_add_n / _acc_n: the same add and
 * rounding per element); an fp32 slot takes the row blocks. */
void qt_op16_add(const qt_op *op, const qt_ctx *ctx)
{
    const int32_t y = QT_T(op, ADD, y), a = QT_T(op, ADD, a), c = QT_T(op, ADD, b);
    const int64_t n = QT_A(op, ADD, n), w = qt_r16_min(n, QT_R16_BLOCK);
    if (qt_is_b16(ctx, y) && qt_is_b16(ctx, a) && qt_is_b16(ctx, c)) {
        qt_bf16_add_n(qt_b16(ctx, y), qt_b16(ctx, a), qt_b16(ctx, c), n);
        return;
    }
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, ADD, y), 0, w, w, 0, 1);
    qt_r16_add(&b, QT_T(op, ADD, a), 0, w, w, 1, 0);
    qt_r16_add(&b, QT_T(op, ADD, b), 0, w, w, 1, 0);
    if (qt_r16_start(&b, op, 1)) return;
    for (int64_t e0 = 0; e0 < n; e0 += w) {
        const int64_t m = qt_r16_min(w, n - e0);
        qt_r16_span(&b, e0, m);
        qt_add(QT_R16_G(0, 0, 1), QT_R16_G(1, 0, 1), QT_R16_G(2, 0, 1), m);
        qt_r16_put_all(&b, 0, 1);
    }
}

void qt_op16_acc(const qt_op *op, const qt_ctx *ctx)
{
    const int32_t d = QT_T(op, ACC, dst), src = QT_T(op, ACC, src);
    const int64_t n = QT_A(op, ACC, n), w = qt_r16_min(n, QT_R16_BLOCK);
    if (qt_is_b16(ctx, d) && qt_is_b16(ctx, src)) {
        qt_bf16_acc_n(qt_b16(ctx, d), qt_b16(ctx, src), n);
        return;
    }
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, ACC, dst), 0, w, w, 1, 1);
    qt_r16_add(&b, QT_T(op, ACC, src), 0, w, w, 1, 0);
    if (qt_r16_start(&b, op, 1)) return;
    for (int64_t e0 = 0; e0 < n; e0 += w) {
        const int64_t m = qt_r16_min(w, n - e0);
        qt_r16_span(&b, e0, m);
        qt_acc(QT_R16_G(0, 0, 1), QT_R16_G(1, 0, 1), m);
        qt_r16_put_all(&b, 0, 1);
    }
}

void qt_op16_swiglu_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t n = QT_A(op, SWIGLU_FWD, n), w = qt_r16_min(n, QT_R16_BLOCK);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, SWIGLU_FWD, h), 0, w, w, 0, 1);
    qt_r16_add(&b, QT_T(op, SWIGLU_FWD, a), 0, w, w, 1, 0);
    qt_r16_add(&b, QT_T(op, SWIGLU_FWD, u), 0, w, w, 1, 0);
    if (qt_r16_start(&b, op, 1)) return;
    if (qt_r16_one_pass(&b, 7u, 0, 0)) {
        qt_b16_swiglu_fwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), n);
        return;
    }
    for (int64_t e0 = 0; e0 < n; e0 += w) {
        const int64_t m = qt_r16_min(w, n - e0);
        qt_r16_span(&b, e0, m);
        qt_swiglu_fwd(QT_R16_G(0, 0, 1), QT_R16_G(1, 0, 1), QT_R16_G(2, 0, 1), m);
        qt_r16_put_all(&b, 0, 1);
    }
}

void qt_op16_swiglu_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t n = QT_A(op, SWIGLU_BWD, n), w = qt_r16_min(n, QT_R16_BLOCK);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, SWIGLU_BWD, da), 0, w, w, 1, 1);
    qt_r16_add(&b, QT_T(op, SWIGLU_BWD, du), 0, w, w, 1, 1);
    qt_r16_add(&b, QT_T(op, SWIGLU_BWD, dh), 0, w, w, 1, 0);
    qt_r16_add(&b, QT_T(op, SWIGLU_BWD, a), 0, w, w, 1, 0);
    qt_r16_add(&b, QT_T(op, SWIGLU_BWD, u), 0, w, w, 1, 0);
    if (qt_r16_start(&b, op, 1)) return;
    if (qt_r16_one_pass(&b, 31u, 0, 0)) {
        qt_b16_swiglu_bwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), QT_R16_B(3), QT_R16_B(4), n);
        return;
    }
    for (int64_t e0 = 0; e0 < n; e0 += w) {
        const int64_t m = qt_r16_min(w, n - e0);
        qt_r16_span(&b, e0, m);
        qt_swiglu_bwd(QT_R16_G(0, 0, 1), QT_R16_G(1, 0, 1), QT_R16_G(2, 0, 1), QT_R16_G(3, 0, 1),
                      QT_R16_G(4, 0, 1), m);
        qt_r16_put_all(&b, 0, 1);
    }
}

/* ------------------------------------------------------------------ rows of tokens */

/* Width of one qkvz row: Hk*G with G = 2*Dk + 2*(Hv/Hk)*Dv (as ops_gdn.c). */
static int64_t qt_r16_qkvz_width(int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    return hk * (2 * dk + 2 * (hv / hk) * dv);
}

/* The gate source's row: 2n values (HEADS: the q_proj output, gate halves read) or 1 (ROW). */
static int64_t qt_r16_gate_w(int64_t n, int mode)
{
    return mode == QT_GATE_ROW ? 1 : 2 * n;
}

void qt_op16_sigmoid_gate_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, SIGMOID_GATE_FWD, T), n = QT_A(op, SIGMOID_GATE_FWD, n),
                  hd = QT_A(op, SIGMOID_GATE_FWD, hd);
    const int mode = (int)QT_A(op, SIGMOID_GATE_FWD, mode);
    const int64_t gw = qt_r16_gate_w(n, mode), rows = qt_r16_rows(n > gw ? n : gw, T);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_FWD, y), 0, n, n, 0, 1);
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_FWD, x), 0, n, n, 1, 0);
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_FWD, gate), 0, gw, gw, 1, 0);
    if (qt_r16_start(&b, op, rows)) return;
    if (qt_r16_one_pass(&b, 7u, 0, T)) {
        qt_b16_sigmoid_gate_fwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), T, n, mode, hd);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_sigmoid_gate_fwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr), nr, n,
                            mode, hd);
        qt_r16_put_all(&b, t0, nr);
    }
}

void qt_op16_sigmoid_gate_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, SIGMOID_GATE_BWD, T), n = QT_A(op, SIGMOID_GATE_BWD, n),
                  hd = QT_A(op, SIGMOID_GATE_BWD, hd);
    const int mode = (int)QT_A(op, SIGMOID_GATE_BWD, mode);
    const int64_t gw = qt_r16_gate_w(n, mode), rows = qt_r16_rows(n > gw ? n : gw, T);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_BWD, dx), 0, n, n, 1, 1);
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_BWD, dgate), 0, gw, gw, 1, 1);
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_BWD, dy), 0, n, n, 1, 0);
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_BWD, x), 0, n, n, 1, 0);
    qt_r16_add(&b, QT_T(op, SIGMOID_GATE_BWD, gate), 0, gw, gw, 1, 0);
    if (qt_r16_start(&b, op, rows)) return;
    if (qt_r16_one_pass(&b, 31u, 0, T)) {
        qt_b16_sigmoid_gate_bwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), QT_R16_B(3), QT_R16_B(4),
                                T, n, mode, hd);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_sigmoid_gate_bwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr),
                            QT_R16_G(3, t0, nr), QT_R16_G(4, t0, nr), nr, n, mode, hd);
        qt_r16_put_all(&b, t0, nr);
    }
}

void qt_op16_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t R = QT_A(op, RMSNORM_FWD, R), n = QT_A(op, RMSNORM_FWD, n),
                  rows = qt_r16_rows(n, R);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, RMSNORM_FWD, y), 0, n, QT_A(op, RMSNORM_FWD, ys), 0, 1);
    qt_r16_add(&b, QT_T(op, RMSNORM_FWD, rstd), 0, 1, 1, 0, 1);
    qt_r16_add(&b, QT_T(op, RMSNORM_FWD, x), 0, n, QT_A(op, RMSNORM_FWD, xs), 1, 0);
    qt_r16_weight(&b, QT_T(op, RMSNORM_FWD, w), n);
    if (qt_r16_start(&b, op, rows)) return;
    const float *w = QT_R16_G(3, 0, 1);
    if (qt_r16_one_pass(&b, 5u, 2u, R)) {
        qt_b16_rmsnorm_fwd(QT_R16_B(0), qt_f32(ctx, b.sl[1].id), QT_R16_B(2), w, R, n,
                           QT_A(op, RMSNORM_FWD, xs), QT_A(op, RMSNORM_FWD, ys),
                           (int)QT_A(op, RMSNORM_FWD, flags), op->f[0]);
        return;
    }
    for (int64_t r0 = 0; r0 < R; r0 += rows) {
        const int64_t nr = qt_r16_min(rows, R - r0);
        qt_rmsnorm_fwd(QT_R16_G(0, r0, nr), QT_R16_G(1, r0, nr), QT_R16_G(2, r0, nr), w, nr, n, n,
                       n, (int)QT_A(op, RMSNORM_FWD, flags), op->f[0]);
        qt_r16_put_all(&b, r0, nr);
    }
}

void qt_op16_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t R = QT_A(op, RMSNORM_BWD, R), n = QT_A(op, RMSNORM_BWD, n),
                  xs = QT_A(op, RMSNORM_BWD, xs), ys = QT_A(op, RMSNORM_BWD, ys),
                  rows = qt_r16_rows(n, R);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, RMSNORM_BWD, dx), 0, n, xs, 1, 1);
    qt_r16_add(&b, QT_T(op, RMSNORM_BWD, dy), 0, n, ys, 1, 0);
    qt_r16_add(&b, QT_T(op, RMSNORM_BWD, x), 0, n, xs, 1, 0);
    qt_r16_weight(&b, QT_T(op, RMSNORM_BWD, w), n);
    qt_r16_add(&b, QT_T(op, RMSNORM_BWD, rstd), 0, 1, 1, 1, 0);
    if (qt_r16_start(&b, op, rows)) return;
    const float *w = QT_R16_G(3, 0, 1);
    if (qt_r16_one_pass(&b, 7u, 16u, R)) {
        qt_b16_rmsnorm_bwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), w, qt_f32(ctx, b.sl[4].id), R,
                           n, xs, ys, (int)QT_A(op, RMSNORM_BWD, flags));
        return;
    }
    for (int64_t r0 = 0; r0 < R; r0 += rows) {
        const int64_t nr = qt_r16_min(rows, R - r0);
        qt_rmsnorm_bwd(QT_R16_G(0, r0, nr), QT_R16_G(1, r0, nr), QT_R16_G(2, r0, nr), w,
                       QT_R16_G(4, r0, nr), nr, n, n, n, (int)QT_A(op, RMSNORM_BWD, flags));
        qt_r16_put_all(&b, r0, nr);
    }
}

/* RMSNORM_WGRAD: the leaf's rows [seq*rps, (seq+1)*rps) in blocks, added in increasing row
 * order; per-head norms: blocks of whole tokens (H rows each), each canonical head group's
 * partial fed its heads' rows of the block in (t, h) order, as the fp32 wrapper. */
void qt_op16_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    const int64_t rps = QT_A(op, RMSNORM_WGRAD, seq_rows), n = QT_A(op, RMSNORM_WGRAD, n),
                  xs = QT_A(op, RMSNORM_WGRAD, xs), ys = QT_A(op, RMSNORM_WGRAD, ys),
                  groups = QT_A(op, RMSNORM_WGRAD, heads), r0 = seq * rps;
    int64_t S = 1, H = 1, rows = qt_r16_rows(n, rps);
    if (groups > 0) {
        S = ctx->plan->train.seq_len / qt_plan_blocks(ctx->plan);
        H = rps / S;
        rows = qt_r16_rows(n * H, S) * H;
    }
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, RMSNORM_WGRAD, dy), r0 * ys, n, ys, 1, 0);
    qt_r16_add(&b, QT_T(op, RMSNORM_WGRAD, x), r0 * xs, n, xs, 1, 0);
    qt_r16_add(&b, QT_T(op, RMSNORM_WGRAD, rstd), r0, 1, 1, 1, 0);
    if (groups > QT_OP_MAX_GROUPS || qt_r16_plan(&b, rows)) {
        qt_r16_boundary_wgrad(op, ctx, seq, dw);
        return;
    }
    if (qt_r16_one_pass(&b, 3u, 4u, rps)) {
        const float *rs = qt_f32(ctx, b.sl[2].id) + r0;
        if (groups <= 0)
            qt_b16_rmsnorm_wgrad_heads(dw[0], QT_R16_B(0), QT_R16_B(1), rs, rps, 1, 0, 1, n, xs,
                                       ys);
        for (int64_t gi = 0; gi < groups; gi++) {
            float *part = qt_op_group_buf(gi, n);
            if (part)
                qt_b16_rmsnorm_wgrad_heads(part, QT_R16_B(0), QT_R16_B(1), rs, rps / H, H,
                                           gi * (H / groups), (gi + 1) * (H / groups), n, xs, ys);
        }
        if (groups > 0) qt_op_group_finish(ctx, dw[0], n, groups, 1u << QT_MESH_TENSOR);
        return;
    }
    if (groups <= 0) {
        for (int64_t q = 0; q < rps; q += rows) {
            const int64_t nr = qt_r16_min(rows, rps - q);
            qt_rmsnorm_wgrad(dw[0], QT_R16_G(0, q, nr), QT_R16_G(1, q, nr), QT_R16_G(2, q, nr), nr,
                             n, n, n);
        }
        return;
    }
    float *part[QT_OP_MAX_GROUPS];
    const int64_t hpg = H / groups;
    for (int64_t gi = 0; gi < groups; gi++) part[gi] = qt_op_group_buf(gi, n);
    for (int64_t q = 0; q < rps; q += rows) {
        const int64_t nr = qt_r16_min(rows, rps - q);
        const float *dy = QT_R16_G(0, q, nr), *x = QT_R16_G(1, q, nr), *rs = QT_R16_G(2, q, nr);
        for (int64_t gi = 0; gi < groups; gi++)
            if (part[gi])
                qt_rmsnorm_wgrad_heads(part[gi], dy, x, rs, nr / H, H, gi * hpg, (gi + 1) * hpg, n,
                                       n, n);
    }
    qt_op_group_finish(ctx, dw[0], n, groups, 1u << QT_MESH_TENSOR);
}

void qt_op16_gated_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, GATED_RMSNORM_FWD, T), hk = QT_A(op, GATED_RMSNORM_FWD, Hk),
                  dk = QT_A(op, GATED_RMSNORM_FWD, Dk), hv = QT_A(op, GATED_RMSNORM_FWD, Hv),
                  dv = QT_A(op, GATED_RMSNORM_FWD, Dv), wq = qt_r16_qkvz_width(hk, dk, hv, dv),
                  rows = qt_r16_rows(wq > hv * dv ? wq : hv * dv, T);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_FWD, y), 0, hv * dv, hv * dv, 0, 1);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_FWD, rstd), 0, hv, hv, 0, 1);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_FWD, o), 0, hv * dv, hv * dv, 1, 0);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_FWD, qkvz), 0, wq, wq, 1, 0);
    qt_r16_weight(&b, QT_T(op, GATED_RMSNORM_FWD, w), dv);
    if (qt_r16_start(&b, op, rows)) return;
    const float *w = QT_R16_G(4, 0, 1);
    if (dv <= QT_B16_GRN_DV && qt_r16_one_pass(&b, 13u, 2u, T)) {
        qt_b16_gated_rmsnorm_fwd(QT_R16_B(0), qt_f32(ctx, b.sl[1].id), QT_R16_B(2), QT_R16_B(3),
                                 w, T, hk, dk, hv, dv, op->f[0]);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_gated_rmsnorm_fwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr),
                             QT_R16_G(3, t0, nr), w, nr, hk, dk, hv, dv, op->f[0]);
        qt_r16_put_all(&b, t0, nr);
    }
}

void qt_op16_gated_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, GATED_RMSNORM_BWD, T), hk = QT_A(op, GATED_RMSNORM_BWD, Hk),
                  dk = QT_A(op, GATED_RMSNORM_BWD, Dk), hv = QT_A(op, GATED_RMSNORM_BWD, Hv),
                  dv = QT_A(op, GATED_RMSNORM_BWD, Dv), wq = qt_r16_qkvz_width(hk, dk, hv, dv),
                  rows = qt_r16_rows(wq > hv * dv ? wq : hv * dv, T);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_BWD, dout), 0, hv * dv, hv * dv, 1, 1);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_BWD, dqkvz), 0, wq, wq, 1, 1);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_BWD, dy), 0, hv * dv, hv * dv, 1, 0);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_BWD, o), 0, hv * dv, hv * dv, 1, 0);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_BWD, qkvz), 0, wq, wq, 1, 0);
    qt_r16_weight(&b, QT_T(op, GATED_RMSNORM_BWD, w), dv);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_BWD, rstd), 0, hv, hv, 1, 0);
    if (qt_r16_start(&b, op, rows)) return;
    const float *w = QT_R16_G(5, 0, 1);
    if (dv <= QT_B16_GRN_DV && qt_r16_one_pass(&b, 31u, 64u, T)) {
        qt_b16_gated_rmsnorm_bwd(QT_R16_B(0), QT_R16_B(1), qt_f32(ctx, b.sl[6].id), QT_R16_B(2),
                                 QT_R16_B(3), QT_R16_B(4), w, T, hk, dk, hv, dv);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_gated_rmsnorm_bwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(6, t0, nr),
                             QT_R16_G(2, t0, nr), QT_R16_G(3, t0, nr), QT_R16_G(4, t0, nr), w, nr,
                             hk, dk, hv, dv);
        qt_r16_put_all(&b, t0, nr);
    }
}

/* GATED_RMSNORM_WGRAD: the sequence's S tokens in blocks, in increasing t (each block's rows
 * in (t, j) order), into the leaf or each canonical value-head group's partial. */
void qt_op16_gated_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                 float *const dw[2])
{
    const int64_t S = QT_A(op, GATED_RMSNORM_WGRAD, S), hk = QT_A(op, GATED_RMSNORM_WGRAD, Hk),
                  dk = QT_A(op, GATED_RMSNORM_WGRAD, Dk), hv = QT_A(op, GATED_RMSNORM_WGRAD, Hv),
                  dv = QT_A(op, GATED_RMSNORM_WGRAD, Dv), wq = qt_r16_qkvz_width(hk, dk, hv, dv),
                  groups = QT_A(op, GATED_RMSNORM_WGRAD, groups),
                  rows = qt_r16_rows(wq > hv * dv ? wq : hv * dv, S), t0 = seq * S;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_WGRAD, dy), t0 * hv * dv, hv * dv, hv * dv, 1, 0);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_WGRAD, o), t0 * hv * dv, hv * dv, hv * dv, 1, 0);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_WGRAD, qkvz), t0 * wq, wq, wq, 1, 0);
    qt_r16_add(&b, QT_T(op, GATED_RMSNORM_WGRAD, rstd), t0 * hv, hv, hv, 1, 0);
    if (groups > QT_OP_MAX_GROUPS || qt_r16_plan(&b, rows)) {
        qt_r16_boundary_wgrad(op, ctx, seq, dw);
        return;
    }
    float *part[QT_OP_MAX_GROUPS];
    const int64_t hpg = groups > 0 ? hv / groups : hv;
    for (int64_t gi = 0; gi < groups; gi++) part[gi] = qt_op_group_buf(gi, dv);
    const int one = qt_r16_one_pass(&b, 7u, 8u, S);
    if (one) { /* the sequence's rows in one pass (dy, o, qkvz bf16; rstd fp32) */
        const qt_bf16 *dy = QT_R16_B(0), *o = QT_R16_B(1), *z = QT_R16_B(2);
        const float *rs = qt_f32(ctx, b.sl[3].id) + b.sl[3].off;
        for (int64_t gi = groups > 0 ? 0 : -1; gi < groups; gi++) {
            float *acc = gi < 0 ? dw[0] : part[gi];
            if (acc)
                qt_b16_gated_rmsnorm_wgrad_heads(acc, rs, dy, o, z, S, hk, dk, hv, dv,
                                                 gi < 0 ? 0 : gi * hpg,
                                                 gi < 0 ? hv : (gi + 1) * hpg);
        }
    }
    for (int64_t q = 0; !one && q < S; q += rows) {
        const int64_t nr = qt_r16_min(rows, S - q);
        const float *dy = QT_R16_G(0, q, nr), *o = QT_R16_G(1, q, nr), *z = QT_R16_G(2, q, nr),
                    *rs = QT_R16_G(3, q, nr);
        if (groups <= 0) qt_gated_rmsnorm_wgrad(dw[0], rs, dy, o, z, nr, hk, dk, hv, dv);
        for (int64_t gi = 0; gi < groups; gi++)
            if (part[gi])
                qt_gated_rmsnorm_wgrad_heads(part[gi], rs, dy, o, z, nr, hk, dk, hv, dv, gi * hpg,
                                             (gi + 1) * hpg);
    }
    if (groups > 0)
        qt_op_group_finish(ctx, dw[0], dv, groups,
                           (1u << QT_MESH_TENSOR) | (1u << QT_MESH_CONTEXT));
}

void qt_op16_moe_combine_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, MOE_COMBINE_FWD, T), k = QT_A(op, MOE_COMBINE_FWD, k),
                  d = QT_A(op, MOE_COMBINE_FWD, d), rows = qt_r16_rows(k * d, T);
    const int32_t kid = QT_T(op, MOE_COMBINE_FWD, kidx);
    const int32_t *kidx = kid != QT_NONE ? qt_i32(ctx, kid) : 0;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_FWD, out), 0, d, d, 0, 1);
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_FWD, p), 0, k, k, 1, 0);
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_FWD, y), 0, k * d, k * d, 1, 0);
    if (qt_r16_start(&b, op, rows)) return;
    if (qt_r16_one_pass(&b, 7u, 0, T)) {
        qt_b16_moe_combine_fwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), kidx, T, k, d);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_moe_combine_kept_fwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr),
                                kidx ? kidx + t0 * k : 0, nr, k, d);
        qt_r16_put_all(&b, t0, nr);
    }
}

void qt_op16_moe_combine_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t T = QT_A(op, MOE_COMBINE_BWD, T), k = QT_A(op, MOE_COMBINE_BWD, k),
                  d = QT_A(op, MOE_COMBINE_BWD, d), rows = qt_r16_rows(k * d, T);
    const int32_t kid = QT_T(op, MOE_COMBINE_BWD, kidx);
    const int32_t *kidx = kid != QT_NONE ? qt_i32(ctx, kid) : 0;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_BWD, dp), 0, k, k, 1, 1);
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_BWD, dy), 0, k * d, k * d, 1, 1);
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_BWD, dout), 0, d, d, 1, 0);
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_BWD, p), 0, k, k, 1, 0);
    qt_r16_add(&b, QT_T(op, MOE_COMBINE_BWD, y), 0, k * d, k * d, 1, 0);
    if (qt_r16_start(&b, op, rows)) return;
    if (qt_r16_one_pass(&b, 31u, 0, T)) {
        qt_b16_moe_combine_bwd(QT_R16_B(0), QT_R16_B(1), QT_R16_B(2), QT_R16_B(3), QT_R16_B(4),
                               kidx, T, k, d);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, T - t0);
        qt_moe_combine_kept_bwd(QT_R16_G(0, t0, nr), QT_R16_G(1, t0, nr), QT_R16_G(2, t0, nr),
                                QT_R16_G(3, t0, nr), QT_R16_G(4, t0, nr), kidx ? kidx + t0 * k : 0,
                                nr, k, d);
        qt_r16_put_all(&b, t0, nr);
    }
}

/* ------------------------------------------------------------------ whole sequences (GDN) */

static int64_t qt_r16_conv_channels(int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    return 2 * hk * dk + hv * dv;
}

void qt_op16_gdn_conv_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, GDN_CONV_FWD, b), S = QT_A(op, GDN_CONV_FWD, S),
                  hk = QT_A(op, GDN_CONV_FWD, Hk), dk = QT_A(op, GDN_CONV_FWD, Dk),
                  hv = QT_A(op, GDN_CONV_FWD, Hv), dv = QT_A(op, GDN_CONV_FWD, Dv),
                  cc = qt_r16_conv_channels(hk, dk, hv, dv), wq = qt_r16_qkvz_width(hk, dk, hv, dv);
    const int32_t wid = QT_T(op, GDN_CONV_FWD, w);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GDN_CONV_FWD, c), 0, S * cc, S * cc, 0, 1);
    qt_r16_add(&b, QT_T(op, GDN_CONV_FWD, pre), 0, S * cc, S * cc, 0, 1);
    qt_r16_add(&b, QT_T(op, GDN_CONV_FWD, qkvz), 0, S * wq, S * wq, 1, 0);
    qt_r16_weight(&b, wid, ctx->plan->tensors[wid].numel);
    if (qt_r16_start(&b, op, 1)) return;
    const float *w = QT_R16_G(3, 0, 1);
    for (int64_t q = 0; q < nb; q++) {
        qt_gdn_conv_fwd_pos(QT_R16_G(0, q, 1), QT_R16_G(1, q, 1), QT_R16_G(2, q, 1), w,
                            qt_r16_pos(ctx, q, S), 1, S, hk, dk, hv, dv, QT_A(op, GDN_CONV_FWD, K));
        qt_r16_put_all(&b, q, 1);
    }
}

void qt_op16_gdn_conv_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, GDN_CONV_BWD, b), S = QT_A(op, GDN_CONV_BWD, S),
                  hk = QT_A(op, GDN_CONV_BWD, Hk), dk = QT_A(op, GDN_CONV_BWD, Dk),
                  hv = QT_A(op, GDN_CONV_BWD, Hv), dv = QT_A(op, GDN_CONV_BWD, Dv),
                  cc = qt_r16_conv_channels(hk, dk, hv, dv), wq = qt_r16_qkvz_width(hk, dk, hv, dv);
    const int32_t wid = QT_T(op, GDN_CONV_BWD, w);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GDN_CONV_BWD, dqkvz), 0, S * wq, S * wq, 1, 1);
    qt_r16_add(&b, QT_T(op, GDN_CONV_BWD, dc), 0, S * cc, S * cc, 1, 0);
    qt_r16_add(&b, QT_T(op, GDN_CONV_BWD, pre), 0, S * cc, S * cc, 1, 0);
    qt_r16_weight(&b, wid, ctx->plan->tensors[wid].numel);
    if (qt_r16_start(&b, op, 1)) return;
    const float *w = QT_R16_G(3, 0, 1);
    for (int64_t q = 0; q < nb; q++) {
        qt_gdn_conv_bwd_pos(QT_R16_G(0, q, 1), QT_R16_G(2, q, 1), QT_R16_G(1, q, 1), w,
                            qt_r16_pos(ctx, q, S), 1, S, hk, dk, hv, dv, QT_A(op, GDN_CONV_BWD, K));
        qt_r16_put_all(&b, q, 1);
    }
}

/* GDN_CONV_WGRAD: leaf = token block blk of sequence s; the sequence's rows up to the
 * block's end widened (the taps reach back before the block), the kernel as the fp32
 * wrapper calls it on them. */
void qt_op16_gdn_conv_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t leaf, float *const dw[2])
{
    const int64_t S = QT_A(op, GDN_CONV_WGRAD, S), hk = QT_A(op, GDN_CONV_WGRAD, Hk),
                  dk = QT_A(op, GDN_CONV_WGRAD, Dk), hv = QT_A(op, GDN_CONV_WGRAD, Hv),
                  dv = QT_A(op, GDN_CONV_WGRAD, Dv), cc = qt_r16_conv_channels(hk, dk, hv, dv),
                  wq = qt_r16_qkvz_width(hk, dk, hv, dv), nbt = qt_plan_blocks(ctx->plan),
                  s = leaf / nbt, blk = leaf % nbt, hi = (blk + 1) * (S / nbt);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, QT_T(op, GDN_CONV_WGRAD, dc), 0, hi * cc, S * cc, 1, 0);
    qt_r16_add(&b, QT_T(op, GDN_CONV_WGRAD, pre), 0, hi * cc, S * cc, 1, 0);
    qt_r16_add(&b, QT_T(op, GDN_CONV_WGRAD, qkvz), 0, hi * wq, S * wq, 1, 0);
    if (qt_r16_plan(&b, 1)) {
        qt_r16_boundary_wgrad(op, ctx, leaf, dw);
        return;
    }
    qt_gdn_conv_wgrad_rows_pos(dw[0], QT_R16_G(1, s, 1), QT_R16_G(0, s, 1), QT_R16_G(2, s, 1),
                               qt_r16_pos(ctx, s, S), blk * (S / nbt), hi, hk, dk, hv, dv,
                               QT_A(op, GDN_CONV_WGRAD, K));
}

void qt_op16_gdn_core_fwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, GDN_CORE_FWD, b), S = QT_A(op, GDN_CORE_FWD, S),
                  hk = QT_A(op, GDN_CORE_FWD, Hk), dk = QT_A(op, GDN_CORE_FWD, Dk),
                  hv = QT_A(op, GDN_CORE_FWD, Hv), dv = QT_A(op, GDN_CORE_FWD, Dv),
                  chunk = QT_A(op, GDN_CORE_FWD, chunk);
    if (nb < 1 || chunk < 1) return;
    const int64_t cc = qt_r16_conv_channels(hk, dk, hv, dv), nch = (S + chunk - 1) / chunk;
    int bad = 0;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, o), nb, S * hv * dv, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, states), nb, hv * nch * dk * dv, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, rq), nb, S * hk, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, rk), nb, S * hk, 0, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, c), nb, S * cc, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, g), nb, S * hv, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_FWD, beta), nb, S * hv, 1, 0, &bad);
    if (bad || qt_r16_plan(&b, 1)) {
        qt_r16_boundary(op, ctx);
        return;
    }
    float *scratch = qt_f32(ctx, QT_T(op, GDN_CORE_FWD, scratch));
    for (int64_t q = 0; q < nb; q++) {
        float *o = QT_R16_G(0, q, 1), *st = QT_R16_G(1, q, 1), *rq = QT_R16_G(2, q, 1),
              *rk = QT_R16_G(3, q, 1);
        const float *c = QT_R16_G(4, q, 1), *g = QT_R16_G(5, q, 1), *be = QT_R16_G(6, q, 1);
        if (QT_A(op, GDN_CORE_FWD, algo) == 1)
            qt_gdn_chunk_fwd_pos(o, st, rq, rk, c, g, be, qt_r16_pos(ctx, q, S), scratch, 1, S,
                                 hk, dk, hv, dv, chunk, op->f[0], op->f[1]);
        else
            qt_gdn_core_fwd_pos(o, st, rq, rk, c, g, be, qt_r16_pos(ctx, q, S), 1, S, hk, dk, hv,
                                dv, chunk, op->f[0], op->f[1]);
        for (int i = 0; i < 4; i++) qt_r16_put(&b, &b.sl[i], q, 1);
    }
}

void qt_op16_gdn_core_bwd(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, GDN_CORE_BWD, b), S = QT_A(op, GDN_CORE_BWD, S),
                  hk = QT_A(op, GDN_CORE_BWD, Hk), dk = QT_A(op, GDN_CORE_BWD, Dk),
                  hv = QT_A(op, GDN_CORE_BWD, Hv), dv = QT_A(op, GDN_CORE_BWD, Dv),
                  chunk = QT_A(op, GDN_CORE_BWD, chunk);
    if (nb < 1 || chunk < 1) return;
    const int64_t cc = qt_r16_conv_channels(hk, dk, hv, dv), nch = (S + chunk - 1) / chunk;
    int bad = 0;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, dc), nb, S * cc, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, dg), nb, S * hv, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, dbeta), nb, S * hv, 1, 1, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, dout), nb, S * hv * dv, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, c), nb, S * cc, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, g), nb, S * hv, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, beta), nb, S * hv, 1, 0, &bad);
    qt_r16_seq(&b, QT_T(op, GDN_CORE_BWD, states), nb, hv * nch * dk * dv, 1, 0, &bad);
    if (bad || qt_r16_plan(&b, 1)) {
        qt_r16_boundary(op, ctx);
        return;
    }
    /* rq, rk: fp32 saved rows (validate_bf16.c), read in place */
    const float *rq0 = qt_f32(ctx, QT_T(op, GDN_CORE_BWD, rq)),
                *rk0 = qt_f32(ctx, QT_T(op, GDN_CORE_BWD, rk));
    float *scratch = qt_f32(ctx, QT_T(op, GDN_CORE_BWD, scratch));
    for (int64_t q = 0; q < nb; q++) {
        float *dc = QT_R16_G(0, q, 1), *dg = QT_R16_G(1, q, 1), *dbeta = QT_R16_G(2, q, 1);
        const float *d_o = QT_R16_G(3, q, 1), *c = QT_R16_G(4, q, 1), *g = QT_R16_G(5, q, 1),
                    *be = QT_R16_G(6, q, 1), *st = QT_R16_G(7, q, 1), *rq = rq0 + q * S * hk,
                    *rk = rk0 + q * S * hk;
        if (QT_A(op, GDN_CORE_BWD, algo) != 1)
            qt_gdn_core_bwd_pos(dc, dg, dbeta, st, rq, rk, d_o, c, g, be, qt_r16_pos(ctx, q, S),
                                scratch, 1, S, hk, dk, hv, dv, chunk, op->f[0]);
        else
            qt_gdn_chunk_bwd_pos(dc, dg, dbeta, st, rq, rk, d_o, c, g, be, qt_r16_pos(ctx, q, S),
                                 scratch, 1, S, hk, dk, hv, dv, chunk, op->f[0], op->f[1]);
        for (int i = 0; i < 3; i++) qt_r16_put(&b, &b.sl[i], q, 1);
    }
}
