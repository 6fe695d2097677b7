/* model/qt_cg_model.h - stage 3, model: the forward graph (graph.c), reverse-mode
 * differentiation (autodiff.c) and rematerialisation (remat.c). Uses mesh and core. */
#ifndef QT_CG_MODEL_H
#define QT_CG_MODEL_H

#include <string.h>
#include "core/qt_cg.h"

/* The forward graph of settings s into *g (zeroed first; g->s = s): inputs, parameters,
 * activations and the forward ops of every layer this rank's tables hold (a pipeline
 * stage's only), the head and the loss. 0, or -1 with a message in err. */
int qt_cg_graph_build(qt_cg_graph *g, const qt_cg_settings *s, char *err, size_t errlen);
/* 1 for the logical axes whose dims tensor parallelism splits for compute (q_heads,
 * kv_heads, gdn_head, mlp); other dims sharded over `tensor` only split optimizer state. */
int qt_cg_tp_axis(int lax);
int qt_cg_autodiff(qt_cg_graph *g, char *err, size_t errlen);

/* Graph-building primitives (model/graph.c), also used by remat and the per-layer
 * schedule edits: a new tensor (layouts resolved from its logical axes), a new op. */
int32_t qt_cg_add_tensor(qt_cg_graph *g, const char *name, int role, int dtype, int ndim,
                         const int64_t *shape, const uint8_t *axes);
qt_op *qt_cg_emit_op(qt_cg_graph *g, int init, int kind);

/* An op's slots and attributes set by name, from the rows of qt_ops.def: one struct per kind
 * with a field per slot (qt_cg_t_<ENUM>, int32_t) and one per attribute (qt_cg_a_<ENUM>,
 * int64_t), in row order, so a builder writes
 *     QT_CG_SET_T(op, RMSNORM_BWD, .dx = dx, .dy = dy, .x = x, .w = w, .rstd = rstd);
 *     QT_CG_SET_A(op, ATTN_FWD, .b = D->b, .S = D->S, .Hq = D->Hq, .Hkv = D->Hkv, .hd = D->hd);
 * which sets t[0..n) (a[0..n)) from the kind's n named slots (attributes). A field left out
 * is 0, a real tensor id: name every slot (QT_NONE for an unused optional one). The values
 * are evaluated in no fixed order, so none may create a tensor or an op. */
#ifndef __cplusplus /* C only (compound literals; an empty struct has size 0) */
#define QT_CG_TFIELD_(e, n) int32_t n;
#define QT_CG_AFIELD_(e, n) int64_t n;
#define QT_OP(e, name, cls, slots, props, check, tn, an)                                   \
    typedef struct { QT_PP_MAP(QT_CG_TFIELD_, e, QT_PP_ID tn) } qt_cg_t_##e;               \
    typedef struct { QT_PP_MAP(QT_CG_AFIELD_, e, QT_PP_ID an) } qt_cg_a_##e;               \
    QT_STATIC_ASSERT(sizeof(qt_cg_t_##e) == QT_T_##e##_COUNT_ * sizeof(int32_t), #e);      \
    QT_STATIC_ASSERT(sizeof(qt_cg_a_##e) == QT_A_##e##_COUNT_ * sizeof(int64_t), #e);
#include "qt_ops.def"
#undef QT_OP
#define QT_CG_SET_T(op, e, ...) \
    memcpy((op)->t, &(const qt_cg_t_##e){__VA_ARGS__}, sizeof(qt_cg_t_##e))
#define QT_CG_SET_A(op, e, ...) \
    memcpy((op)->a, &(const qt_cg_a_##e){__VA_ARGS__}, sizeof(qt_cg_a_##e))
#endif
/* A new tensor "<name of id><suffix>" with id's role, type, shapes, layouts and segments
 * (not its parameter link, lifetime flags or reshard note); returns its id. */
int32_t qt_cg_clone_tensor(qt_cg_graph *g, int32_t id, const char *suffix);

/* Context parallelism (model/context.c, docs/context.md); callers emit these only when the
 * context degree is > 1. ctx_exchange: one head exchange op of kind CTX_TO_HEADS or
 * CTX_TO_TOKENS (y written from x; b sequences, S the whole length, G head groups of w
 * elements per token row; u groups a unit of uneven ownership, 0 for the even split) with
 * its scratch. ctx_attn_uneven: attention's heads are owned unevenly (the tensor rank's
 * query heads not a multiple of C, or its kv heads neither a multiple nor a divisor of C):
 * the unit is a kv head with its query heads, and *slots receives the kv-head slots of every
 * rank's head side (ceil(kv / C)); 0 with C = 1 or the even split. ctx_head_side: tensor t
 * is a mixer's head-side activation (whole sequences: len_dim whole, -1 for none; head_dim
 * over tensor x context), a declared layout. ctx_split_param: parameter tensor t's head
 * dim `dim` is split over context too (the head side's weights), its gradient leaves are all
 * the token blocks.
 * ctx_complete_param: parameter tensor t's gradient leaves are complete on every context
 * rank (the GDN norm weight, summed over tensor x context in its WGRAD). */
void qt_cg_ctx_exchange(qt_cg_graph *g, int kind, int32_t y, int32_t x, int64_t b, int64_t S,
                        int64_t G, int64_t w, int64_t u);
int qt_cg_ctx_attn_uneven(const qt_cg_settings *s, int64_t *slots);
void qt_cg_ctx_head_side(qt_cg_graph *g, int32_t t, int head_dim, int len_dim);
void qt_cg_ctx_split_param(qt_cg_graph *g, int32_t t, int dim);
void qt_cg_ctx_complete_param(qt_cg_graph *g, int32_t t);
/* GDN heads owned unevenly over context (issue 35, model/context.c): when tensor x context
 * does not divide gdn_num_key_heads, the GDN norm's canonical head groups or
 * gdn_value_head_dim, a unit is uk key heads with their value heads (whole canonical
 * groups: gpu of them), a tensor rank has U units, context index c owns units
 * [c*U/C, (c+1)*U/C) and every head side `slots` = ceil(U/C) unit slots. ctx_gdn_uneven
 * fills *u and returns 1 then, else 0 (C = 1, or the even split). ctx_own_units: a head-side
 * copy `name` of parameter p (whole over context: segments of U units of w[i] elements,
 * w[i] = 0 ends them) written by a CTX_OWN_UNITS op; returns its id. ctx_units_source: the
 * parameter a CTX_OWN_UNITS op copied into tensor t (and its U), or QT_NONE. */
typedef struct qt_cg_gdn_units {
    int64_t uk, U, slots, gpu, groups;
} qt_cg_gdn_units;
int qt_cg_ctx_gdn_uneven(const qt_cg_settings *s, qt_cg_gdn_units *u);
int32_t qt_cg_ctx_own_units(qt_cg_graph *g, const char *name, int32_t p, int64_t U,
                            const int64_t w[3]);
int32_t qt_cg_ctx_units_source(const qt_cg_graph *g, int32_t t, int64_t *U);

/* Rematerialisation per s->remat (model/remat.c): after autodiff, before the memory plan. */
int qt_cg_remat(qt_cg_graph *g, char *err, size_t errlen);
/* The storage dtype of every tensor per the compute dtype's recipe (model/precision.c,
 * docs/precision.md): after remat, before the memory plan; nothing changes in fp32. */
void qt_cg_precision(qt_cg_graph *g);

/* Model FLOPs per token (model/flops.c, the count of docs/bench.md): MACs per token of each
 * part (per layer, per pass or per depth) for the model m at sequence length S with
 * mtp_layers depths of the MTP head, how many of each, and the forward FLOPs per token of the
 * main model and of the head (2 x their MACs; training is 3 x forward). gdn_conv: MACs per
 * token of a GDN layer's causal conv, not in the totals (the bench convention). */
typedef struct qt_cg_flops {
    int64_t gdn_proj, gdn_delta, gdn_conv; /* per GDN layer */
    int64_t attn_proj, attn_core;          /* per full-attention layer (and MTP depth) */
    int64_t router, routed, shared;        /* per MoE layer (and MTP depth) */
    int64_t lm_head, mtp_fc;               /* per lm_head pass; per MTP depth */
    int64_t n_gdn, n_attn, n_moe, n_mtp;   /* layers of each kind; MTP depths */
    int64_t fwd_main, fwd_mtp;             /* forward FLOPs per token */
    int too_big;                           /* a count reached 2^58: every count 0 */
} qt_cg_flops;
void qt_cg_model_flops(const qt_model_dims *m, int64_t S, int64_t mtp_layers, qt_cg_flops *f);

/* The input slot rows of stage s->pp_stage's tables: M R (M without repeats), or under
 * interleaved 1F1B the order's peak pairs in flight (qt_pp_intl_slots: the driver's own
 * assignment); its pp_slots then hold that + 2 M R boundaries, pp_lb_slots that + M R. */
int64_t qt_cg_pp_in_slots(const qt_cg_settings *s);

#endif
