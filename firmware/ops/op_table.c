/* op_table.c - the kernel table: op kind -> wrapper, indexed by enum qt_op_kind.
 * Invariant: every kind below QT_OP_COUNT except NOP, the step-schedule kinds and
 * COLLECTIVE has exactly one of run/wgrad set (the WGRAD kinds the wgrad one); the
 * interpreter refuses a plan that uses a kind without the wrapper it needs. The step kinds
 * (GRAD_FINALIZE, ADAMW) are run by runtime.c, which owns the step's state; COLLECTIVE gets
 * its wrapper with the multi-rank communication layer. */
#include "qt_op_fns.h"

const qt_kernel_entry qt_kernel_table[QT_OP_COUNT] = {
    [QT_OP_NOP] = {"nop", 0, 0},
    [QT_OP_ZERO] = {"zero", qt_op_zero, 0},
    [QT_OP_ADD] = {"add", qt_op_add, 0},
    [QT_OP_ACC] = {"acc", qt_op_acc, 0},
    [QT_OP_EMBED_FWD] = {"embed_fwd", qt_op_embed_fwd, 0},
    [QT_OP_EMBED_WGRAD] = {"embed_wgrad", 0, qt_op_embed_wgrad},
    [QT_OP_RMSNORM_FWD] = {"rmsnorm_fwd", qt_op_rmsnorm_fwd, 0},
    [QT_OP_RMSNORM_BWD] = {"rmsnorm_bwd", qt_op_rmsnorm_bwd, 0},
    [QT_OP_RMSNORM_WGRAD] = {"rmsnorm_wgrad", 0, qt_op_rmsnorm_wgrad},
    [QT_OP_MATMUL_FWD] = {"matmul_fwd", qt_op_matmul_fwd, 0},
    [QT_OP_MATMUL_BWD_DATA] = {"matmul_bwd_data", qt_op_matmul_bwd_data, 0},
    [QT_OP_MATMUL_WGRAD] = {"matmul_wgrad", 0, qt_op_matmul_wgrad},
    [QT_OP_SWIGLU_FWD] = {"swiglu_fwd", qt_op_swiglu_fwd, 0},
    [QT_OP_SWIGLU_BWD] = {"swiglu_bwd", qt_op_swiglu_bwd, 0},
    [QT_OP_SIGMOID_GATE_FWD] = {"sigmoid_gate_fwd", qt_op_sigmoid_gate_fwd, 0},
    [QT_OP_SIGMOID_GATE_BWD] = {"sigmoid_gate_bwd", qt_op_sigmoid_gate_bwd, 0},
    [QT_OP_GDN_CONV_FWD] = {"gdn_conv_fwd", qt_op_gdn_conv_fwd, 0},
    [QT_OP_GDN_CONV_BWD] = {"gdn_conv_bwd", qt_op_gdn_conv_bwd, 0},
    [QT_OP_GDN_CONV_WGRAD] = {"gdn_conv_wgrad", 0, qt_op_gdn_conv_wgrad},
    [QT_OP_GDN_GATES_FWD] = {"gdn_gates_fwd", qt_op_gdn_gates_fwd, 0},
    [QT_OP_GDN_GATES_BWD] = {"gdn_gates_bwd", qt_op_gdn_gates_bwd, 0},
    [QT_OP_GDN_GATES_WGRAD] = {"gdn_gates_wgrad", 0, qt_op_gdn_gates_wgrad},
    [QT_OP_GDN_CORE_FWD] = {"gdn_core_fwd", qt_op_gdn_core_fwd, 0},
    [QT_OP_GDN_CORE_BWD] = {"gdn_core_bwd", qt_op_gdn_core_bwd, 0},
    [QT_OP_GATED_RMSNORM_FWD] = {"gated_rmsnorm_fwd", qt_op_gated_rmsnorm_fwd, 0},
    [QT_OP_GATED_RMSNORM_BWD] = {"gated_rmsnorm_bwd", qt_op_gated_rmsnorm_bwd, 0},
    [QT_OP_GATED_RMSNORM_WGRAD] = {"gated_rmsnorm_wgrad", 0, qt_op_gated_rmsnorm_wgrad},
    [QT_OP_ROPE_TABLE] = {"rope_table", qt_op_rope_table, 0},
    [QT_OP_ROPE_FWD] = {"rope_fwd", qt_op_rope_fwd, 0},
    [QT_OP_ROPE_BWD] = {"rope_bwd", qt_op_rope_bwd, 0},
    [QT_OP_ATTN_FWD] = {"attn_fwd", qt_op_attn_fwd, 0},
    [QT_OP_ATTN_BWD] = {"attn_bwd", qt_op_attn_bwd, 0},
    [QT_OP_MOE_ROUTE_FWD] = {"moe_route_fwd", qt_op_moe_route_fwd, 0},
    [QT_OP_MOE_ROUTE_BWD] = {"moe_route_bwd", qt_op_moe_route_bwd, 0},
    [QT_OP_EXPERT_FFN_FWD] = {"expert_ffn_fwd", qt_op_expert_ffn_fwd, 0},
    [QT_OP_EXPERT_FFN_BWD] = {"expert_ffn_bwd", qt_op_expert_ffn_bwd, 0},
    [QT_OP_EXPERT_FFN_WGRAD] = {"expert_ffn_wgrad", 0, qt_op_expert_ffn_wgrad},
    [QT_OP_MOE_COMBINE_FWD] = {"moe_combine_fwd", qt_op_moe_combine_fwd, 0},
    [QT_OP_MOE_COMBINE_BWD] = {"moe_combine_bwd", qt_op_moe_combine_bwd, 0},
    [QT_OP_XENT] = {"xent", qt_op_xent, 0},
    [QT_OP_GRAD_FINALIZE] = {"grad_finalize", 0, 0}, /* step schedule: runtime.c */
    [QT_OP_ADAMW] = {"adamw", 0, 0},                 /* step schedule: runtime.c */
    [QT_OP_COLLECTIVE] = {"collective", 0, 0},
};
