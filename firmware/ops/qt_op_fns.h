/* qt_op_fns.h - the op wrappers, one per op kind of qt_ops.def (declared from it).
 *
 * A wrapper reads its op record, resolves tensor ids to arena pointers and calls the kernel.
 * Run wrappers: ops_basic.c, ops_gdn.c, ops_attn.c, ops_moe.c, ops_ep.c (expert
 * parallelism), ops_ctx.c (context parallelism's head exchange). WGRAD wrappers compute one
 * sequence's weight gradient: into dw[] the interpreter zeroed (accumulating), or, for
 * kinds with QT_OPP_WGRAD_WRITES, writing every element of dw[]. STEP wrappers
 * (qt_step_<name>): firmware/runtime/step_ops.c. Check hooks (qt_check_<name>, CHECK
 * kinds): next to their kind's wrapper. The table in runtime/op_table.c maps
 * kinds to wrappers.
 */
#ifndef QT_OP_FNS_H
#define QT_OP_FNS_H

#include "../include/qt_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QT_OPD_NONE(name)
#define QT_OPD_RUN(name) void qt_op_##name(const qt_op *op, const qt_ctx *ctx);
#define QT_OPD_WGRAD(name) \
    void qt_op_##name(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
#define QT_OPD_STEP(name) int qt_step_##name(const qt_op *op, const qt_ctx *ctx, qt_step_state *st);
#define QT_OPD_CHECK(name) int qt_check_##name(const qt_plan *p, const qt_op *op, qt_check_state *st);
#define QT_OPD_NOCHECK(name)
#define QT_OP(e, name, cls, slots, props, check, tn, an) QT_OPD_##cls(name) QT_OPD_##check(name)
#include "../include/qt_ops.def"
#undef QT_OP
#undef QT_OPD_CHECK
#undef QT_OPD_NOCHECK
#undef QT_OPD_NONE
#undef QT_OPD_RUN
#undef QT_OPD_WGRAD
#undef QT_OPD_STEP

/* Sum of buf[n] over the ranks of group `mask` (fixed pairing), in place; 0 or QT_E_*, which
 * is also stored in *ctx->status (ops_comm.c). */
int qt_op_sum_across(const qt_ctx *ctx, float *buf, int64_t n, unsigned mask);

/* The rows an EXPERT_FFN_WGRAD op reads for sequence `seq` (the fp32 and the bf16 wrapper):
 * *S tokens of *k slots from token *t0; on an expert host the packed rows [seg[seq],
 * seg[seq+1]) of its group's sequence, k = 1. */
static inline void qt_op_expert_wgrad_rows(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                           int64_t *t0, int64_t *S, int64_t *k)
{
    *k = QT_A(op, EXPERT_FFN_WGRAD, k);
    *S = QT_A(op, EXPERT_FFN_WGRAD, S);
    *t0 = seq * *S;
    if (QT_T(op, EXPERT_FFN_WGRAD, seg) != QT_NONE) {
        /* expert host: sequence `seq` of the expert group owns the packed rows
         * [seg[seq], seg[seq+1]) (k = 1), the rows the one-rank kernel visits for it */
        const int32_t *seg = qt_i32(ctx, QT_T(op, EXPERT_FFN_WGRAD, seg));
        *t0 = seg[seq];
        *S = seg[seq + 1] - seg[seq];
        *k = 1;
    }
}

/* Where leaf s of an all-leaves offer (qt_leaf_carry.h) goes, for the fp32 and the bf16
 * EXPERT_FFN_WGRAD wrapper: dw[0], dw[1] (an even leaf: level 0) or c[0], c[1] (an odd
 * leaf's carries; NULL for an even one). 0 when an odd leaf lacks either slot's carry (the
 * wrapper then refuses the offer). */
static inline int qt_op_expert_wgrad_leaf_dest(const qt_wgrad_leaves *all, int32_t s,
                                               float *dw[2], const qt_leaf_carry *c[2])
{
    const int carry = all->carried[s] && all->carry[s][0].n > 0 && all->carry[s][1].n > 0;
    if (all->carried[s] && !carry) return 0;
    dw[0] = all->dw[s][0], dw[1] = all->dw[s][1];
    c[0] = carry ? &all->carry[s][0] : 0, c[1] = carry ? &all->carry[s][1] : 0;
    return 1;
}

/* Canonical head groups of per-head norm weight gradients (ops_comm.c): group g's zeroed
 * partial buffer of n floats (NULL past the limits, which configgen and init check), and
 * the finish: pairwise tree over the groups, sum across the group of the mesh axes in
 * `mask` that the plan splits (the ranks holding the other heads: tensor for the q/k norms,
 * tensor x context for the GDN norm on the mixers' head side), dw += total. */
#define QT_OP_MAX_GROUPS 8
#define QT_OP_GROUP_MAX_N 1024
float *qt_op_group_buf(int64_t g, int64_t n);
void qt_op_group_finish(const qt_ctx *ctx, float *dw, int64_t n, int64_t groups,
                        unsigned mask);

#ifdef __cplusplus
}
#endif

#endif
