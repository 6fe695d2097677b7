/* qt_cg_slots.c - what each t[] slot of each op kind does, restated from qt_ops.h.
 *
 * One char per slot: 'w' writes the tensor, 'a' accumulates into it (so it must have been
 * written, usually zeroed, earlier), 'r' reads an activation, 'p' reads a parameter,
 * 's' kernel scratch (dead outside the op). The liveness planner, the schedule checks and
 * plan.txt all read this table, so it must change together with qt_ops.h.
 */
#include "qt_cg.h"

static const char *const slots[QT_OP_COUNT] = {
    [QT_OP_NOP] = "",
    [QT_OP_ZERO] = "w",
    [QT_OP_ADD] = "wrr",
    [QT_OP_ACC] = "ar",
    [QT_OP_EMBED_FWD] = "wrp",
    [QT_OP_EMBED_WGRAD] = "rrp",
    [QT_OP_RMSNORM_FWD] = "wwrp",
    [QT_OP_RMSNORM_BWD] = "arrpr",
    [QT_OP_RMSNORM_WGRAD] = "rrrp",
    [QT_OP_MATMUL_FWD] = "wrp",
    [QT_OP_MATMUL_BWD_DATA] = "arp",
    [QT_OP_MATMUL_WGRAD] = "rrp",
    [QT_OP_SWIGLU_FWD] = "wrr",
    [QT_OP_SWIGLU_BWD] = "aarrr",
    [QT_OP_SIGMOID_GATE_FWD] = "wrr",
    [QT_OP_SIGMOID_GATE_BWD] = "aarrr",
    [QT_OP_GDN_CONV_FWD] = "wwrp",
    [QT_OP_GDN_CONV_BWD] = "arrp",
    [QT_OP_GDN_CONV_WGRAD] = "rrrp",
    [QT_OP_GDN_GATES_FWD] = "wwrpp",
    [QT_OP_GDN_GATES_BWD] = "arrrpp",
    [QT_OP_GDN_GATES_WGRAD] = "rrpp",
    [QT_OP_GDN_CORE_FWD] = "wwwwrrrs",
    [QT_OP_GDN_CORE_BWD] = "aaarrrrrrrs",
    [QT_OP_GATED_RMSNORM_FWD] = "wwrrp",
    [QT_OP_GATED_RMSNORM_BWD] = "aarrrpr",
    [QT_OP_GATED_RMSNORM_WGRAD] = "rrrrp",
    [QT_OP_ROPE_TABLE] = "w",
    [QT_OP_ROPE_FWD] = "wrr",
    [QT_OP_ROPE_BWD] = "arr",
    [QT_OP_ATTN_FWD] = "wwrrrs",
    [QT_OP_ATTN_BWD] = "aaarrrrrrs",
    [QT_OP_MOE_ROUTE_FWD] = "wwar",
    [QT_OP_MOE_ROUTE_BWD] = "arrrr",
    [QT_OP_EXPERT_FFN_FWD] = "wwrrpps",
    [QT_OP_EXPERT_FFN_BWD] = "arrrrppsw",
    [QT_OP_EXPERT_FFN_WGRAD] = "rrrrppsr",
    [QT_OP_MOE_COMBINE_FWD] = "wrr",
    [QT_OP_MOE_COMBINE_BWD] = "aarrr",
    [QT_OP_XENT] = "wwrr",
};

static const char *const names[QT_OP_COUNT] = {
    [QT_OP_NOP] = "nop", [QT_OP_ZERO] = "zero", [QT_OP_ADD] = "add", [QT_OP_ACC] = "acc",
    [QT_OP_EMBED_FWD] = "embed_fwd", [QT_OP_EMBED_WGRAD] = "embed_wgrad",
    [QT_OP_RMSNORM_FWD] = "rmsnorm_fwd", [QT_OP_RMSNORM_BWD] = "rmsnorm_bwd",
    [QT_OP_RMSNORM_WGRAD] = "rmsnorm_wgrad", [QT_OP_MATMUL_FWD] = "matmul_fwd",
    [QT_OP_MATMUL_BWD_DATA] = "matmul_bwd_data", [QT_OP_MATMUL_WGRAD] = "matmul_wgrad",
    [QT_OP_SWIGLU_FWD] = "swiglu_fwd", [QT_OP_SWIGLU_BWD] = "swiglu_bwd",
    [QT_OP_SIGMOID_GATE_FWD] = "sigmoid_gate_fwd", [QT_OP_SIGMOID_GATE_BWD] = "sigmoid_gate_bwd",
    [QT_OP_GDN_CONV_FWD] = "gdn_conv_fwd", [QT_OP_GDN_CONV_BWD] = "gdn_conv_bwd",
    [QT_OP_GDN_CONV_WGRAD] = "gdn_conv_wgrad", [QT_OP_GDN_GATES_FWD] = "gdn_gates_fwd",
    [QT_OP_GDN_GATES_BWD] = "gdn_gates_bwd", [QT_OP_GDN_GATES_WGRAD] = "gdn_gates_wgrad",
    [QT_OP_GDN_CORE_FWD] = "gdn_core_fwd", [QT_OP_GDN_CORE_BWD] = "gdn_core_bwd",
    [QT_OP_GATED_RMSNORM_FWD] = "gated_rmsnorm_fwd",
    [QT_OP_GATED_RMSNORM_BWD] = "gated_rmsnorm_bwd",
    [QT_OP_GATED_RMSNORM_WGRAD] = "gated_rmsnorm_wgrad", [QT_OP_ROPE_TABLE] = "rope_table",
    [QT_OP_ROPE_FWD] = "rope_fwd", [QT_OP_ROPE_BWD] = "rope_bwd", [QT_OP_ATTN_FWD] = "attn_fwd",
    [QT_OP_ATTN_BWD] = "attn_bwd", [QT_OP_MOE_ROUTE_FWD] = "moe_route_fwd",
    [QT_OP_MOE_ROUTE_BWD] = "moe_route_bwd", [QT_OP_EXPERT_FFN_FWD] = "expert_ffn_fwd",
    [QT_OP_EXPERT_FFN_BWD] = "expert_ffn_bwd", [QT_OP_EXPERT_FFN_WGRAD] = "expert_ffn_wgrad",
    [QT_OP_MOE_COMBINE_FWD] = "moe_combine_fwd", [QT_OP_MOE_COMBINE_BWD] = "moe_combine_bwd",
    [QT_OP_XENT] = "xent", [QT_OP_GRAD_FINALIZE] = "grad_finalize", [QT_OP_ADAMW] = "adamw",
    [QT_OP_COLLECTIVE] = "collective",
};

const char *qt_cg_op_slots(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT && slots[kind] ? slots[kind] : "";
}

const char *qt_cg_op_name(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT && names[kind] ? names[kind] : "?";
}
