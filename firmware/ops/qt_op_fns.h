/* qt_op_fns.h - the op wrappers, one per op kind (see qt_ops.h for slot meanings).
 *
 * A wrapper reads its op record, resolves tensor ids to arena pointers and calls the kernel.
 * Run wrappers: ops_basic.c, ops_gdn.c, ops_attn.c, ops_moe.c. The table in op_table.c maps
 * kinds to wrappers. WGRAD wrappers compute one sequence's weight gradient (accumulating
 * into dw[], which the interpreter zeroed).
 */
#ifndef QT_OP_FNS_H
#define QT_OP_FNS_H

#include "../include/qt_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void qt_op_zero(const qt_op *op, const qt_ctx *ctx);
void qt_op_add(const qt_op *op, const qt_ctx *ctx);
void qt_op_acc(const qt_op *op, const qt_ctx *ctx);
void qt_op_embed_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_embed_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_matmul_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_matmul_bwd_data(const qt_op *op, const qt_ctx *ctx);
void qt_op_matmul_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_swiglu_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_swiglu_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_sigmoid_gate_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_sigmoid_gate_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gdn_conv_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gdn_conv_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gdn_conv_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_gdn_gates_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gdn_gates_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gdn_gates_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_gdn_core_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gdn_core_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gated_rmsnorm_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gated_rmsnorm_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_gated_rmsnorm_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_rope_table(const qt_op *op, const qt_ctx *ctx);
void qt_op_rope_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_rope_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_attn_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_attn_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_moe_route_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_moe_route_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_expert_ffn_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_expert_ffn_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_expert_ffn_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
void qt_op_moe_combine_fwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_moe_combine_bwd(const qt_op *op, const qt_ctx *ctx);
void qt_op_xent(const qt_op *op, const qt_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
