/* qt_ops_bf16.h - native bf16 wrappers and their helpers (ops_bf16.c, ops_ep.c, ops_moe.c,
 * ops_bf16_rows.c, ops_bf16_seq.c, ops_bf16_xent.c, ops_bf16_mtp.c):
 * what the QT_OPP_BF16 kinds' wrappers call in a bf16 plan (docs/precision.md, "Executing
 * bf16 plans"). Same op records and slots as the fp32 wrappers (qt_ops.def), bf16 storage
 * where the row's "bf16 plans" line says so.
 *
 * Invariants: a result is rounded once per element per op, after any cross-rank sum; the
 * staging region (qt_op_bf16_stage) is live only inside one op.
 */
#ifndef QT_OPS_BF16_H
#define QT_OPS_BF16_H

#include "qt_op_fns.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plan's fp32 staging region (bf16 plans: bf16_stage_elems floats). */
float *qt_op_bf16_stage(const qt_ctx *ctx);
/* Stores n fp32 values v into tensor id: rounded when it is bf16, else copied (nothing when
 * v is the tensor itself). */
void qt_op_store_b16(const qt_ctx *ctx, int32_t id, const float *v, int64_t n);
/* The n elements of tensor id as fp32: widened into stage when it is bf16 (returns stage),
 * else the tensor itself. */
float *qt_op_widen_b16(const qt_ctx *ctx, int32_t id, float *stage, int64_t n);

/* 1 when a QT_OPP_BF16 kind's wrapper takes its native bf16 form: a bf16 plan, and not
 * under the boundary (whose stage map hands the fp32 wrapper widened tensors: the unit
 * tests run a native kind through it as the reference). */
static inline int qt_op_native16(const qt_ctx *ctx)
{
    return ctx->plan->dtype == QT_BF16 && !ctx->stage;
}

void qt_op16_zero(const qt_op *op, const qt_ctx *ctx);
void qt_op16_round(const qt_op *op, const qt_ctx *ctx);
void qt_op16_embed_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_matmul_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_matmul_bwd_data(const qt_op *op, const qt_ctx *ctx);
void qt_op16_matmul_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op16_expert_ffn_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_expert_ffn_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_expert_ffn_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                              float *const dw[2]);

/* ops_bf16_rows.c: the elementwise and row kinds in row blocks (the fp32 kernels on widened
 * blocks, outputs rounded once; an op naming one tensor twice runs through the boundary). */
void qt_op16_add(const qt_op *op, const qt_ctx *ctx);
void qt_op16_acc(const qt_op *op, const qt_ctx *ctx);
void qt_op16_swiglu_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_swiglu_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_sigmoid_gate_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_sigmoid_gate_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op16_gated_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gated_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gated_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                 float *const dw[2]);
void qt_op16_moe_combine_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_moe_combine_bwd(const qt_op *op, const qt_ctx *ctx);
/* ... and by whole sequences: the GDN short conv and the delta rule. */
void qt_op16_gdn_conv_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gdn_conv_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gdn_conv_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t leaf, float *const dw[2]);
void qt_op16_gdn_core_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gdn_core_bwd(const qt_op *op, const qt_ctx *ctx);

/* ops_bf16_seq.c: the GDN gates and the rotary embedding in token blocks, attention and
 * the router by whole sequences (the load-balance term over a context group with the fp32
 * wrapper's exchanges, ops_moe.c). */
void qt_op16_gdn_gates_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gdn_gates_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_gdn_gates_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op16_rope_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_rope_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_attn_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_attn_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_moe_route_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_moe_route_bwd(const qt_op *op, const qt_ctx *ctx);

/* ops_bf16_xent.c: the cross entropy (plain and vocabulary blocks) and XENT_MTP in row
 * blocks; ops_bf16_mtp.c: the MTP head's stacking kinds (copies and adds, rounded once). */
void qt_op16_xent(const qt_op *op, const qt_ctx *ctx);
void qt_op16_xent_mtp(const qt_op *op, const qt_ctx *ctx);
void qt_op16_stack(const qt_op *op, const qt_ctx *ctx);
void qt_op16_stack_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op16_split(const qt_op *op, const qt_ctx *ctx);
void qt_op16_split_bwd(const qt_op *op, const qt_ctx *ctx);

/* ops_basic.c: XENT_MTP's loss_seq / mtp_loss_seq from its b x n entries (both forms). */
void qt_op_xent_mtp_sums(const qt_op *op, const qt_ctx *ctx, const float *ent);

/* ops_moe.c: the router's load-balance term over a context group in pieces, shared by the
 * fp32 wrapper and the bf16 form. qt_moe_lb_counts: the whole sequences' counts gathered
 * into buf[0 .. b*E) (group index or QT_E_*). qt_moe_lb_ctx_begin (MOE_ROUTE_FWD, after the
 * routing): the counts, then the Pbar chain from rank c-1 (zeros on rank 0) into *pbar;
 * returns c or QT_E_*. qt_moe_lb_ctx_end: after this rank's Pbar rows, the chain passed on,
 * or on the last rank the term added into lb. */
int qt_moe_lb_counts(int32_t *buf, const int32_t *idx, int64_t T, int64_t E, int64_t k,
                     int64_t S, unsigned mask, int64_t Cc);
int qt_moe_lb_ctx_begin(const qt_op *op, const qt_ctx *ctx, float **pbar);
int qt_moe_lb_ctx_end(const qt_op *op, const qt_ctx *ctx, float *lb, const float *pbar, int c);

#ifdef __cplusplus
}
#endif

#endif
