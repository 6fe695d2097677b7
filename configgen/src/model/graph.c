/* model/graph.c - the forward step graph of one microbatch, built from qt_ops.h ops.
 *
 * b = per_device_batch_size sequences, S = max_target_length, T = b*S. Activations carry
 * shapes [b, S, ...] (so their logical axes follow docs/sharding.md section 3); parameters
 * carry the canonical Qwen3-Next Hugging Face names and [out, in] shapes (experts fused:
 * gate_up_proj [E,2I,d], down_proj [E,d,I]) with the logical axes of docs/sharding.md 4 in that
 * dim order. Layer l is full attention iff (l+1) % cycle == 0, else Gated DeltaNet. A pipeline
 * stage's graph holds its layers only (qt_cg_pp_layer), by their global index l.
 * Invariants: every op's sizes agree with the tensor shapes it names; the forward ends
 * with XENT, which also writes d.logits (the backward seed); the init schedule holds the
 * one ROPE_TABLE.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "config/qt_cg_config.h"
#include "model/qt_cg_model.h"
#include "qt_pp_sched.h"
#include "../../firmware/kernels/gdn_chunk.h"
#include "../../firmware/kernels/matmul_canon.h"
#include "../../firmware/kernels/argmax.h"
#include "../../firmware/kernels/xent.h"
#include "../../firmware/parallel/ep_rounds.h"

#define SHP(...) ((const int64_t[]){__VA_ARGS__})
/* The decoder layers' declaration for their residual-stream activations. */
#define QT_CG_WHOLE_EMBED                                                                  \
    "activation_embed stays whole on every tensor rank (Megatron layout): row-parallel "   \
    "projections all-reduce their outputs (canonical tree) instead of reduce-scattering"
#define AX(...) ((const uint8_t[]){__VA_ARGS__})

typedef struct qt_cg_dims {
    /* head counts, Cc and fs are this rank's (tensor parallelism splits them tp ways);
     * parameters are declared with global shapes (x tp) and localised by add_param */
    int64_t b, S, T, d, V, E, k, f, fs, Hq, Hkv, hd, R, Hk, Hv, Dk, Dv, K, r, G, Cc, nch, tp;
    int64_t nbt; /* canonical token blocks per sequence (context_blocks) */
    /* context parallelism (model/context.c): C ranks share each sequence; S and T above are
     * this rank's tokens of a sequence and of the microbatch (per-token ops), Sm the whole
     * sequence (the mixers' head side, rotary table, GDN chunks) */
    int64_t C, Sm;
} qt_cg_dims;

static int32_t add_param(qt_cg_graph *g, const char *name, int ndim, const int64_t *shape,
                         const uint8_t *axes, int init, double scale, int layer)
{
    int32_t t = qt_cg_add_tensor(g, name, QT_ROLE_PARAM, QT_F32, ndim, shape, axes);
    /* Routed experts sharded over the expert axis: each rank holds El = E/Ep of them (local
     * shape); other shardings of parameters (fsdp, expert on embed dims) split only the
     * optimizer state, and the compute copy stays whole (design notes in schedule/step.c). */
    qt_tensor *pt = &g->ts[t].t;
    for (int d = 0; d < ndim; d++) {
        int64_t parts = 1;
        if (axes[d] == QT_LAX_EXP && (pt->spec[d] & (1u << QT_MESH_EXPERT))) {
            /* with context parallelism the expert group spans expert x context, or the
             * expert axis alone (replicated over context: expert_ctx_rep) */
            parts = qt_cg_expert_group(g->s);
            pt->spec[d] |= qt_cg_expert_group_mask(g->s) & qt_cg_context_mask(g->s);
        }
        /* tensor parallelism splits heads and the shared and routed experts' widths */
        if (qt_cg_tp_axis(axes[d]) && (pt->spec[d] & (1u << QT_MESH_TENSOR)))
            parts = g->s->mesh[QT_MESH_TENSOR];
        pt->shape[d] = pt->global_shape[d] / parts;
        pt->numel = pt->numel / parts;
    }
    g->ps = qt_cg_grow(g->ps, &g->capp, g->np + 1, sizeof *g->ps);
    qt_param *p = &g->ps[g->np];
    memset(p, 0, sizeof *p);
    p->name = g->ts[t].t.name;
    p->tensor = t;
    p->numel = g->ts[t].t.numel;
    p->init = (uint8_t)init;
    p->init_scale = (float)scale;
    if (init == QT_INIT_LOG_UNIFORM) {
        /* A_log = log(U(1, 16)): decay rates exp(A_log) in [1, 16] as the HF range, with
         * the lower end at 1 so no head starts with a vanishing decay. */
        p->init_lo = 1.0f;
        p->init_hi = 16.0f;
        p->init_scale = 0.0f;
    }
    p->layer = layer;
    /* this rank's token blocks of the step (model/context.c: the mixers' own weights take
     * every block of their heads) */
    p->leaves = g->s->tr.micro_batch * g->s->tr.grad_accum * qt_cg_blocks(g->s) /
                qt_cg_context(g->s);
    g->ts[t].param = g->np++;
    return t;
}

int qt_cg_tp_axis(int lax)
{
    return lax == QT_LAX_Q_HEADS || lax == QT_LAX_KV_HEADS || lax == QT_LAX_GDN_HEAD ||
           lax == QT_LAX_MLP || lax == QT_LAX_MLP_MOE;
}

static int32_t proj(qt_cg_graph *g, const char *name, int64_t out, int64_t in, uint8_t ax_out,
                    uint8_t ax_in, int layer)
{
    return add_param(g, name, 2, SHP(out, in), AX(ax_out, ax_in), QT_INIT_TRUNC_NORMAL,
                     1.0 / sqrt((double)in), layer);
}

static int32_t norm_w(qt_cg_graph *g, const char *name, int64_t n, int init, int layer)
{
    return add_param(g, name, 1, SHP(n), AX(QT_LAX_NONE), init, 0.0, layer);
}

/* [b,S,n] activation with the residual-stream axes unless given. */
static int32_t act3(qt_cg_graph *g, const char *name, const qt_cg_dims *D, int64_t n,
                    uint8_t a0, uint8_t a1, uint8_t a2)
{
    return qt_cg_add_tensor(g, name, QT_ROLE_ACT, QT_F32, 3, SHP(D->b, D->S, n), AX(a0, a1, a2));
}

static int32_t resid(qt_cg_graph *g, const char *name, const qt_cg_dims *D)
{
    return act3(g, name, D, D->d, QT_LAX_ACT_BATCH, QT_LAX_ACT_NORM_LENGTH, QT_LAX_ACT_EMBED);
}

static void matmul(qt_cg_graph *g, int32_t y, int32_t x, int32_t w, const qt_cg_dims *D)
{
    const qt_tensor *wt = &g->ts[w].t;
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MATMUL_FWD);
    QT_CG_SET_T(op, MATMUL_FWD, .y = y, .x = x, .w = w, .scratch = QT_NONE);
    QT_CG_SET_A(op, MATMUL_FWD, .M = D->T, .N = wt->shape[0], .K = wt->shape[1]);
}

static int32_t scratch(qt_cg_graph *g, const char *name, int64_t n);

/* Canonical blocking of a contraction over dim `dim` of weight w (kernels/matmul_canon.h):
 * the block count of the global length, this rank's share of it, and the tensor group whose
 * ranks hold the other blocks (0 when the dim is not split). */
static void canon_of(const qt_cg_graph *g, int32_t w, int dim, int64_t *nb_local, int64_t *mask)
{
    const qt_tensor *wt = &g->ts[w].t;
    const int64_t nb = qt_cg_canon(g->s, wt->global_shape[dim]);
    const int64_t split = wt->global_shape[dim] / wt->shape[dim];
    *nb_local = nb / split;
    *mask = split > 1 ? (int64_t)(1u << QT_MESH_TENSOR) : 0;
}

/* A row-parallel projection (o_proj, out_proj, shared down): its contraction over the
 * input features is canonically blocked (and summed over the tensor group when split). */
static void matmul_row(qt_cg_graph *g, int32_t y, int32_t x, int32_t w, const qt_cg_dims *D)
{
    matmul(g, y, x, w, D);
    qt_op *op = &g->mb[g->nmb - 1];
    canon_of(g, w, 1, &QT_A(op, MATMUL_FWD, nb), &QT_A(op, MATMUL_FWD, mask));
    QT_A(op, MATMUL_FWD, segs) = 1;
    char n[300];
    snprintf(n, sizeof n, "%s.canon_scratch", g->ts[y].t.name);
    QT_T(op, MATMUL_FWD, scratch) =
        scratch(g, n, QT_CANON_FWD_SCRATCH(QT_A(op, MATMUL_FWD, M), QT_A(op, MATMUL_FWD, N),
                                           QT_A(op, MATMUL_FWD, K), QT_A(op, MATMUL_FWD, nb)));
}

/* A column-parallel projection (q/k/v_proj, in_proj_qkvz/ba, shared gate/up): its data
 * gradient's contraction over the output features is canonically blocked; the block count
 * waits in a6 for autodiff (model/autodiff.c). */
static void matmul_col(qt_cg_graph *g, int32_t y, int32_t x, int32_t w, const qt_cg_dims *D)
{
    matmul(g, y, x, w, D);
    int64_t mask;
    canon_of(g, w, 0, &QT_A(&g->mb[g->nmb - 1], MATMUL_FWD, bwd_nb), &mask);
}

static void rmsnorm(qt_cg_graph *g, int32_t y, int32_t rstd, int32_t x, int32_t w, int64_t rows,
                    int64_t n, int64_t xs, int64_t ys, float eps)
{
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_RMSNORM_FWD);
    QT_CG_SET_T(op, RMSNORM_FWD, .y = y, .rstd = rstd, .x = x, .w = w);
    QT_CG_SET_A(op, RMSNORM_FWD, .R = rows, .n = n, .xs = xs, .ys = ys,
                .flags = QT_RMSNORM_ZERO_CENTRED);
    op->f[0] = eps;
}

static void add(qt_cg_graph *g, int32_t y, int32_t a, int32_t b)
{
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ADD);
    QT_CG_SET_T(op, ADD, .y = y, .a = a, .b = b);
    QT_A(op, ADD, n) = g->ts[y].t.numel;
}

static int32_t scratch(qt_cg_graph *g, const char *name, int64_t n)
{
    return qt_cg_add_tensor(g, name, QT_ROLE_SCRATCH, QT_F32, 1, SHP(n), AX(QT_LAX_NONE));
}

/* The GDN layer's parameters: this rank's shares (heads over tensor; under context
 * parallelism the mixer's own weights over context too: model/context.c). */
typedef struct qt_cg_gdn_w {
    int32_t qkvz, ba, conv, a_log, dt_bias, norm, out;
} qt_cg_gdn_w;

static void gdn_params(qt_cg_graph *g, int l, const qt_cg_dims *D, qt_cg_gdn_w *w)
{
    char n[256], pre[64];
    snprintf(pre, sizeof pre, "model.layers.%d.linear_attn.", l);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
    w->qkvz = proj(g, PN("in_proj_qkvz.weight"), D->tp * D->Hk * D->G, D->d, QT_LAX_GDN_HEAD,
                   QT_LAX_EMBED, l);
    w->ba = proj(g, PN("in_proj_ba.weight"), D->tp * 2 * D->Hv, D->d, QT_LAX_GDN_HEAD,
                 QT_LAX_EMBED, l);
    w->conv = add_param(g, PN("conv1d.weight"), 3, SHP(D->tp * D->Cc, 1, D->K),
                        AX(QT_LAX_GDN_HEAD, 0, 0), QT_INIT_TRUNC_NORMAL,
                        1.0 / sqrt((double)D->K), l);
    /* the conv channels are [q | k | v] of all heads: each part splits by heads */
    g->ts[w->conv].t.seg[0] = D->tp * D->Hk * D->Dk;
    g->ts[w->conv].t.seg[1] = D->tp * D->Hk * D->Dk;
    g->ts[w->conv].t.seg[2] = D->tp * D->Hv * D->Dv;
    w->a_log = add_param(g, PN("A_log"), 1, SHP(D->tp * D->Hv), AX(QT_LAX_GDN_HEAD),
                         QT_INIT_LOG_UNIFORM, 0, l);
    w->dt_bias = add_param(g, PN("dt_bias"), 1, SHP(D->tp * D->Hv), AX(QT_LAX_GDN_HEAD),
                           QT_INIT_ONES, 0.0, l);
    w->norm = norm_w(g, PN("norm.weight"), D->Dv, QT_INIT_ONES, l);
    w->out = proj(g, PN("out_proj.weight"), D->d, D->tp * D->Hv * D->Dv, QT_LAX_EMBED,
                  QT_LAX_GDN_HEAD, l);
#undef PN
    qt_cg_gdn_units gu;
    if (D->C > 1 && qt_cg_ctx_gdn_uneven(g->s, &gu)) {
        /* heads owned unevenly (model/context.c): the mixer's weights whole over context,
         * their leaves completed on every context rank by their WGRAD (*_WGRAD_U) */
        qt_cg_ctx_complete_param(g, w->conv);
        qt_cg_ctx_complete_param(g, w->a_log);
        qt_cg_ctx_complete_param(g, w->dt_bias);
        qt_cg_ctx_complete_param(g, w->norm);
    } else if (D->C > 1) {
        qt_cg_ctx_split_param(g, w->conv, 0);
        qt_cg_ctx_split_param(g, w->a_log, 0);
        qt_cg_ctx_split_param(g, w->dt_bias, 0);
        qt_cg_ctx_complete_param(g, w->norm);
    }
}

/* A head-side activation [b, S, H, w] (or [b, S, n]) of a mixer: whole sequences of this
 * rank's heads; under context parallelism a declared layout (model/context.c). */
static int32_t head_act(qt_cg_graph *g, const char *name, int role, const qt_cg_dims *D,
                        int ndim, const int64_t *shape, const uint8_t *axes, int head_dim,
                        int len_dim)
{
    int32_t t = qt_cg_add_tensor(g, name, role, QT_F32, ndim, shape, axes);
    if (D->C > 1) qt_cg_ctx_head_side(g, t, head_dim, len_dim);
    return t;
}

/* Gated DeltaNet. The projections run on this rank's tokens (T rows); the convolution,
 * gates, delta rule and gated norm on whole sequences of its heads (head side: S = the
 * whole length, 1/C of the tensor rank's heads), between the head exchanges when C > 1. */
static void gdn_layer(qt_cg_graph *g, int l, int32_t h, int32_t mix, const qt_cg_dims *D)
{
    char n[256];
    float eps = g->s->m.norm_eps;
    qt_cg_gdn_w w;
    gdn_params(g, l, D, &w);
    /* heads owned unevenly over context (model/context.c): the head side holds `slots`
     * units of uk key heads, the exchanges move units (u), the weights come through
     * padded copies of this rank's units */
    qt_cg_gdn_units gu;
    const int un = D->C > 1 && qt_cg_ctx_gdn_uneven(g->s, &gu);
    const int64_t C = D->C, b = D->b, S = D->Sm, T = b * S,
                  Hk = un ? gu.slots * gu.uk : D->Hk / C, Hv = un ? Hk * D->r : D->Hv / C,
                  Cc = un ? 2 * Hk * D->Dk + Hv * D->Dv : D->Cc / C;
#define AN(s) (snprintf(n, sizeof n, "L%d.gdn.%s", l, s), n)
#define HA(nm, role, nd, shp, ax, hd) head_act(g, AN(nm), role, D, nd, shp, ax, hd, -1)
    const uint8_t kvb = QT_LAX_ACT_KV_BATCH, kvh = QT_LAX_ACT_KV_HEADS;
    const uint8_t len = C > 1 ? QT_LAX_ACT_LENGTH : 0;
    /* token side: the projections' outputs */
    int32_t qkvz = qt_cg_add_tensor(g, AN("qkvz"), QT_ROLE_ACT, QT_F32, 4,
                                    SHP(b, D->S, D->Hk, D->G), AX(kvb, len, kvh, 0));
    int32_t ba = qt_cg_add_tensor(g, AN("ba"), QT_ROLE_ACT, QT_F32, 4,
                                  SHP(b, D->S, D->Hk, 2 * D->r), AX(kvb, len, kvh, 0));
    /* head side; the conv channels are the heads' q | k | v parts: head-structured */
    int32_t c = HA("conv", QT_ROLE_ACT, 3, SHP(b, S, Cc), AX(kvb, 0, kvh), 2);
    int32_t cpre = HA("conv_pre", QT_ROLE_SAVED, 3, SHP(b, S, Cc), AX(kvb, 0, kvh), 2);
    int32_t beta = HA("beta", QT_ROLE_ACT, 3, SHP(b, S, Hv), AX(kvb, 0, kvh), 2);
    int32_t gg = HA("g", QT_ROLE_ACT, 3, SHP(b, S, Hv), AX(kvb, 0, kvh), 2);
    int32_t o = HA("o", QT_ROLE_ACT, 4, SHP(b, S, Hv, D->Dv), AX(kvb, 0, kvh, 0), 2);
    int32_t states = HA("states", QT_ROLE_SAVED, 4, SHP(b, Hv, D->nch, D->Dk * D->Dv),
                        AX(kvb, kvh, 0, 0), 1);
    int32_t rq = HA("rq", QT_ROLE_SAVED, 3, SHP(b, S, Hk), AX(kvb, 0, kvh), 2);
    int32_t rk = HA("rk", QT_ROLE_SAVED, 3, SHP(b, S, Hk), AX(kvb, 0, kvh), 2);
    int32_t y = HA("y", QT_ROLE_ACT, 4, SHP(b, S, Hv, D->Dv), AX(kvb, 0, kvh, 0), 2);
    int32_t yrstd = HA("y_rstd", QT_ROLE_SAVED, 3, SHP(b, S, Hv), AX(kvb, 0, kvh), 2);
    /* the exchanges' other sides (C = 1: the same tensors) */
    int32_t qkvz_h = qkvz, ba_h = ba, y_t = y;
    if (C > 1) {
        qkvz_h = HA("qkvz_heads", QT_ROLE_ACT, 4, SHP(b, S, Hk, D->G), AX(kvb, 0, kvh, 0), 2);
        ba_h = HA("ba_heads", QT_ROLE_ACT, 4, SHP(b, S, Hk, 2 * D->r), AX(kvb, 0, kvh, 0), 2);
        y_t = qt_cg_add_tensor(g, AN("y_tokens"), QT_ROLE_ACT, QT_F32, 4,
                               SHP(b, D->S, D->Hv, D->Dv), AX(kvb, len, kvh, 0));
    }
#undef HA
    matmul_col(g, qkvz, h, w.qkvz, D);
    matmul_col(g, ba, h, w.ba, D);
    const int64_t uk = un ? gu.uk : 0;
    if (C > 1) {
        qt_cg_ctx_exchange(g, QT_OP_CTX_TO_HEADS, qkvz_h, qkvz, b, S, D->Hk, D->G, uk);
        qt_cg_ctx_exchange(g, QT_OP_CTX_TO_HEADS, ba_h, ba, b, S, D->Hk, 2 * D->r, uk);
    }
    int32_t wconv = w.conv, walog = w.a_log, wdtb = w.dt_bias;
    if (un) {
        const int64_t K = D->K, wc[3] = {uk * D->Dk * K, uk * D->Dk * K, uk * D->r * D->Dv * K},
                      wg[3] = {uk * D->r, 0, 0};
        wconv = qt_cg_ctx_own_units(g, AN("conv1d_weight_heads"), w.conv, gu.U, wc);
        walog = qt_cg_ctx_own_units(g, AN("A_log_heads"), w.a_log, gu.U, wg);
        wdtb = qt_cg_ctx_own_units(g, AN("dt_bias_heads"), w.dt_bias, gu.U, wg);
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_GDN_CONV_FWD);
    QT_CG_SET_T(op, GDN_CONV_FWD, .c = c, .pre = cpre, .qkvz = qkvz_h, .w = wconv);
    QT_CG_SET_A(op, GDN_CONV_FWD, .b = b, .S = S, .Hk = Hk, .Dk = D->Dk, .Hv = Hv, .Dv = D->Dv,
                .K = D->K);
    op = qt_cg_emit_op(g, 0, QT_OP_GDN_GATES_FWD);
    QT_CG_SET_T(op, GDN_GATES_FWD, .beta = beta, .g = gg, .ba = ba_h, .A_log = walog,
                .dt_bias = wdtb);
    QT_CG_SET_A(op, GDN_GATES_FWD, .T = T, .Hk = Hk, .Hv = Hv);
    /* algo selects the algorithm; only the chunked form needs forward scratch (qt_ops.h:
     * 2*C*Dk + 2*C*Dv + 4*C*C + 3*C with C = min(chunk, S)), the recurrent one gets a
     * one-float placeholder so that every slot names a tensor. */
    int64_t chunked = g->s->gdn_chunked, ck = g->s->m.gdn_chunk;
    snprintf(n, sizeof n, "L%d.gdn.core_fwd_scratch", l);
    const int32_t cscr = scratch(g, n, chunked ? QT_GDN_CHUNK_FWD_SCRATCH(
                                                     QT_GDN_CHUNK_ROWS(ck, S), D->Dk, D->Dv)
                                               : 1);
    op = qt_cg_emit_op(g, 0, QT_OP_GDN_CORE_FWD);
    QT_CG_SET_T(op, GDN_CORE_FWD, .o = o, .states = states, .rq = rq, .rk = rk, .c = c, .g = gg,
                .beta = beta, .scratch = cscr);
    QT_CG_SET_A(op, GDN_CORE_FWD, .b = b, .S = S, .Hk = Hk, .Dk = D->Dk, .Hv = Hv, .Dv = D->Dv,
                .chunk = ck, .algo = chunked);
    op->f[0] = (float)(1.0 / sqrt((double)D->Dk));
    op->f[1] = 1e-6f;
    op = qt_cg_emit_op(g, 0, QT_OP_GATED_RMSNORM_FWD);
    QT_CG_SET_T(op, GATED_RMSNORM_FWD, .y = y, .rstd = yrstd, .o = o, .qkvz = qkvz_h,
                .w = w.norm);
    QT_CG_SET_A(op, GATED_RMSNORM_FWD, .T = T, .Hk = Hk, .Dk = D->Dk, .Hv = Hv, .Dv = D->Dv);
    op->f[0] = eps;
    if (C > 1) qt_cg_ctx_exchange(g, QT_OP_CTX_TO_TOKENS, y_t, y, b, S, D->Hv, D->Dv, uk * D->r);
#undef AN
    matmul_row(g, mix, y_t, w.out, D);
}

/* Gated full attention. The projections, the q/k norms and the output gate run on this
 * rank's tokens; rotary positions, scores and softmax on whole sequences of its heads (head
 * side: S = the whole length, 1/C of the tensor rank's heads; every kv head with all the
 * query heads that read it), between the head exchanges when C > 1. */
static void attn_layer(qt_cg_graph *g, const char *ppre, const char *apre, int l, int32_t h,
                       int32_t mix, const qt_cg_dims *D)
{
    char n[256], pre[64];
    float eps = g->s->m.norm_eps;
    snprintf(pre, sizeof pre, "%sself_attn.", ppre);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "%s.attn.%s", apre, s), n)
    int32_t wq = proj(g, PN("q_proj.weight"), D->tp * D->Hq * 2 * D->hd, D->d, QT_LAX_Q_HEADS,
                      QT_LAX_EMBED, l);
    int32_t wk = proj(g, PN("k_proj.weight"), D->tp * D->Hkv * D->hd, D->d, QT_LAX_KV_HEADS,
                      QT_LAX_EMBED, l);
    int32_t wv = proj(g, PN("v_proj.weight"), D->tp * D->Hkv * D->hd, D->d, QT_LAX_KV_HEADS,
                      QT_LAX_EMBED, l);
    int32_t wo = proj(g, PN("o_proj.weight"), D->d, D->tp * D->Hq * D->hd, QT_LAX_EMBED,
                      QT_LAX_MLP, l);
    int32_t qn_w = norm_w(g, PN("q_norm.weight"), D->hd, QT_INIT_ZEROS, l);
    int32_t kn_w = norm_w(g, PN("k_norm.weight"), D->hd, QT_INIT_ZEROS, l);

    /* head side: 1/C of the query heads; the kv heads split C ways, or (fewer kv heads than
     * context ranks) one kv head shared by a chain of ranks (autodiff: CTX_CHAIN_*); or,
     * owned unevenly (model/context.c), ceil(kv / C) kv heads with their query heads, the
     * last slots zero padding on the ranks that own fewer (ur > 0: query heads a unit) */
    int64_t kslots;
    const int uneven = qt_cg_ctx_attn_uneven(g->s, &kslots);
    const int64_t C = D->C, b = D->b, S = D->Sm, ur = uneven ? D->Hq / D->Hkv : 0,
                  Hq = uneven ? kslots * ur : D->Hq / C,
                  Hkv = uneven ? kslots : D->Hkv >= C ? D->Hkv / C : 1;
    const uint8_t kvb = QT_LAX_ACT_KV_BATCH, len = QT_LAX_ACT_LENGTH_ATTN,
                  kvh = QT_LAX_ACT_KV_HEADS, hdx = QT_LAX_ACT_KV_HEAD_DIM;
#define HT(nm, role, H, w) qt_cg_add_tensor(g, AN(nm), role, QT_F32, 4, SHP(b, D->S, H, w), \
                                            AX(kvb, len, kvh, hdx))
#define HH(nm, H) head_act(g, AN(nm), QT_ROLE_ACT, D, 4, SHP(b, S, H, D->hd), \
                           AX(kvb, len, kvh, hdx), 2, 1)
    int32_t qg = HT("qg", QT_ROLE_ACT, D->Hq, 2 * D->hd);
    int32_t k0 = HT("k", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t v = HT("v", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t qn = HT("q_normed", QT_ROLE_ACT, D->Hq, D->hd);
    int32_t kn = HT("k_normed", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t qr = HH("q_rope", Hq);
    int32_t kr = HH("k_rope", Hkv);
    int32_t att = HH("o", Hq);
    int32_t qrstd = qt_cg_add_tensor(g, AN("q_rstd"), QT_ROLE_SAVED, QT_F32, 3,
                                     SHP(b, D->S, D->Hq), AX(kvb, len, kvh));
    int32_t krstd = qt_cg_add_tensor(g, AN("k_rstd"), QT_ROLE_SAVED, QT_F32, 3,
                                     SHP(b, D->S, D->Hkv), AX(kvb, len, kvh));
    int32_t lse = head_act(g, AN("lse"), QT_ROLE_SAVED, D, 3, SHP(b, Hq, S), AX(kvb, kvh, len),
                           1, 2);
    int32_t gated = act3(g, AN("gated"), D, D->Hq * D->hd, QT_LAX_ACT_BATCH, QT_LAX_ACT_LENGTH,
                         QT_LAX_ACT_HEADS);
    /* the exchanges' other sides (C = 1: the same tensors) */
    int32_t qn_h = qn, kn_h = kn, v_h = v, att_t = att;
    if (C > 1) {
        qn_h = HH("q_normed_heads", Hq);
        kn_h = HH("k_normed_heads", Hkv);
        v_h = HH("v_heads", Hkv);
        att_t = HT("o_tokens", QT_ROLE_ACT, D->Hq, D->hd);
    }
#undef HT
#undef HH
#undef PN
#undef AN
    matmul_col(g, qg, h, wq, D);
    matmul_col(g, k0, h, wk, D);
    matmul_col(g, v, h, wv, D);
    rmsnorm(g, qn, qrstd, qg, qn_w, D->T * D->Hq, D->hd, 2 * D->hd, D->hd, eps);
    /* per-head norms: their global heads (autodiff) */
    QT_A(&g->mb[g->nmb - 1], RMSNORM_FWD, heads) = D->tp * D->Hq;
    rmsnorm(g, kn, krstd, k0, kn_w, D->T * D->Hkv, D->hd, D->hd, D->hd, eps);
    QT_A(&g->mb[g->nmb - 1], RMSNORM_FWD, heads) = D->tp * D->Hkv;
    if (C > 1) {
        qt_cg_ctx_exchange(g, QT_OP_CTX_TO_HEADS, qn_h, qn, b, S, D->Hq, D->hd, ur);
        qt_cg_ctx_exchange(g, QT_OP_CTX_TO_HEADS, kn_h, kn, b, S, D->Hkv, D->hd, uneven);
        qt_cg_ctx_exchange(g, QT_OP_CTX_TO_HEADS, v_h, v, b, S, D->Hkv, D->hd, uneven);
    }
    int32_t xs[2] = {qn_h, kn_h}, ys[2] = {qr, kr};
    int64_t hs[2] = {Hq, Hkv};
    for (int i = 0; i < 2; i++) {
        qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ROPE_FWD);
        QT_CG_SET_T(op, ROPE_FWD, .y = ys[i], .x = xs[i], .table = g->table);
        QT_CG_SET_A(op, ROPE_FWD, .b = b, .S = S, .H = hs[i], .hd = D->hd, .R = D->R);
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ATTN_FWD);
    snprintf(n, sizeof n, "%s.attn.fwd_scratch", apre);
    const int32_t ascr = scratch(g, n, S);
    QT_CG_SET_T(op, ATTN_FWD, .o = att, .lse = lse, .q = qr, .k = kr, .v = v_h, .scratch = ascr);
    QT_CG_SET_A(op, ATTN_FWD, .b = b, .S = S, .Hq = Hq, .Hkv = Hkv, .hd = D->hd);
    op->f[0] = (float)(1.0 / sqrt((double)D->hd));
    if (C > 1) qt_cg_ctx_exchange(g, QT_OP_CTX_TO_TOKENS, att_t, att, b, S, D->Hq, D->hd, ur);
    op = qt_cg_emit_op(g, 0, QT_OP_SIGMOID_GATE_FWD);
    QT_CG_SET_T(op, SIGMOID_GATE_FWD, .y = gated, .x = att_t, .gate = qg);
    QT_CG_SET_A(op, SIGMOID_GATE_FWD, .T = D->T, .n = D->Hq * D->hd, .mode = QT_GATE_HEADS,
                .hd = D->hd);
    matmul_row(g, mix, gated, wo, D);
}

/* Canonical blocks of an expert's down contraction (over f) and of its data gradient (over
 * [gate | up], per part): those of the global width, this rank's share under tensor
 * parallelism (kernels/matmul_canon.h). */
static int64_t expert_canon(const qt_cg_graph *g, const qt_cg_dims *D)
{
    return qt_cg_canon(g->s, D->f * D->tp) / D->tp;
}

/* Scratch of the expert FFN forward over R rows of k slots with nb canonical blocks
 * (expert_ffn.c): per row d + 3f plus the blocks' partials, and the packed weights, for
 * every row when R x k <= qt_cg_expert_chunk, else for one chunk of that many rows
 * (the forward's chunks need no row lists: *ext receives 0 then, else 1 when the caller's
 * one-sequence minimum still applies). */
static int64_t expert_scratch(const qt_cg_graph *g, int64_t R, int64_t k, const qt_cg_dims *D,
                              int64_t nb, int *ext)
{
    const int64_t d = D->d, f = D->f, rows = R * k, row = d + 3 * f + nb * d + 2 * f / nb;
    const int64_t C = qt_cg_expert_chunk(g->s);
    *ext = rows <= C;
    if (!*ext) return C * row + d * (2 * f / nb);
    return rows * row + rows + D->E + 1 + rows * d + d * (2 * f / nb);
}

/* Scratch of the expert FFN over one round of R host rows (k = 1, El local experts, nb
 * canonical blocks): what its forward (expert_scratch), its backward (autodiff.c's rule for
 * R rows of one slot) and a leaf's weight gradient (one leaf's rows of one expert, at most
 * the leaf's tokens, one chunk) need; MOE_ROUNDS_* share it. */
static int64_t rounds_scratch(const qt_cg_graph *g, int64_t R, int64_t El, const qt_cg_dims *D,
                              int64_t nb)
{
    const int64_t d = D->d, f = D->f, C = qt_cg_expert_chunk(g->s);
    int ext;
    int64_t n = expert_scratch(g, R, 1, D, nb, &ext);
    const int64_t brow = d + 3 * f + nb * d + 2 * f / nb, bfix = d * (2 * f / nb);
    const int64_t bsz = R > C ? C * brow + bfix : R * brow + R + El + 1 + R * d + bfix;
    const int64_t wsz = qt_cg_leaf_tokens(g->s) * (d + 3 * f);
    if (bsz > n) n = bsz;
    return wsz > n ? wsz : n;
}

/* The expert dispatch in rounds (expert_dispatch=rounds, config/dispatch.c; qt_ops.def
 * MOE_ROUNDS_FWD): the same rows as expert_parallel's exchange, moved and computed in
 * rounds of R = expert_round_rows host rows (expert_chunk_rows, or auto's bound), so the
 * host's buffers hold R rows instead of the dropless worst case; nothing of the host is
 * kept for the backward (MOE_ROUNDS_BWD and MOE_ROUNDS_WGRAD move the rows again and
 * recompute gu and d(gu) per round). */
static void expert_rounds(qt_cg_graph *g, const char *apre, int32_t h2, int32_t idx, int32_t ey,
                          int32_t wgu, int32_t wd, const qt_cg_dims *D, int64_t M, int64_t El,
                          int64_t mask, int64_t blocks, int64_t nb)
{
    char n[256];
    const int64_t R = g->s->expert_round_rows;
    g->ep_rows = R;
#define AN(s) (snprintf(n, sizeof n, "%s.moe.ep_round_%s", apre, s), n)
    int32_t xr = scratch(g, AN("x"), R * D->d);
    int32_t yr = scratch(g, AN("y"), R * D->d);
    int32_t gur = scratch(g, AN("gu"), R * 2 * D->f);
    int32_t fscr = scratch(g, AN("ffn_scratch"), rounds_scratch(g, R, El, D, nb));
    int32_t home = scratch(g, AN("home"),
                           QT_EP_ROUNDS_HOME_FLOATS(D->T, D->k, D->d, M, blocks, R, 0));
#undef AN
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MOE_ROUNDS_FWD);
    QT_CG_SET_T(op, MOE_ROUNDS_FWD, .y = ey, .x = h2, .idx = idx, .w_gu = wgu, .w_down = wd,
                .xr = xr, .yr = yr, .gu = gur, .scratch = fscr, .home = home);
    /* tensor parallelism: the rounds' host rows are summed over the tensor group (a8) */
    QT_CG_SET_A(op, MOE_ROUNDS_FWD, .T = D->T, .k = D->k, .E = D->E, .El = El, .mask = mask,
                .R = R, .nb = nb, .leaves = M * blocks,
                .tmask = D->tp > 1 ? 1 << QT_MESH_TENSOR : 0);
    g->ps[g->ts[wgu].param].leaves *= M;
    g->ps[g->ts[wd].param].leaves *= M;
}

/* Expert parallelism (qt_ops.def MOE_DISPATCH_FWD ...): the routed rows of this rank's
 * tokens go to the ranks holding their experts, run through the same expert FFN kernel
 * there (packed rows, k = 1, local expert ids) and come back to their (t, slot) rows. */
static void expert_parallel(qt_cg_graph *g, const char *apre, int32_t h2, int32_t idx, int32_t ey,
                            int32_t wgu, int32_t wd, const qt_cg_dims *D)
{
    char n[256];
    /* the group the rows travel in: the expert axis (and the context axis with it, so a
     * host receives every block of its members' sequences in token order; or, with the
     * experts replicated over context, each context index's own exchange over the expert
     * axis: its members' blocks of that index), or none (tensor parallelism only: the rows
     * stay on their rank, and only their partial sums cross the tensor group) */
    const int64_t M = qt_cg_expert_group(g->s), El = D->E / M;
    int64_t rmax = M * D->T * (D->k < El ? D->k : El);
    /* token dropping: each member's sequence brings a host at most C rows per local expert
     * (its capacity), so the receive side and the expert FFN on it hold
     * M x b x El x C rows instead of the dropless worst case (plan.txt "moe form") */
    g->ep_rows_dropless = rmax;
    if (g->s->moe_capacity > 0 && M * D->b * El * g->s->moe_capacity < rmax)
        rmax = M * D->b * El * g->s->moe_capacity;
    /* receive buffers (MOE_RAGGED): a host keeps at most B rows (at least one row) */
    if (g->moe_ragged && g->ragged_rows < rmax) rmax = g->ragged_rows > 0 ? g->ragged_rows : 1;
    g->ep_rows = rmax;
    const int64_t mask = qt_cg_expert_group_mask(g->s);
    /* this rank's token blocks: the exchange's "sequences" */
    const int64_t blocks = D->b * D->nbt / D->C;
    const int64_t nb = expert_canon(g, D);
    if (g->s->expert_dispatch == QT_CG_DISPATCH_ROUNDS && M > 1) {
        expert_rounds(g, apre, h2, idx, ey, wgu, wd, D, M, El, mask, blocks, nb);
        return;
    }
#define AN(s) (snprintf(n, sizeof n, "%s.moe.ep_%s", apre, s), n)
    int32_t xr = qt_cg_add_tensor(g, AN("x"), QT_ROLE_ACT, QT_F32, 2, SHP(rmax, D->d), AX(0, 0));
    int32_t er = qt_cg_add_tensor(g, AN("expert"), QT_ROLE_ACT, QT_I32, 1, SHP(rmax), AX(0));
    int32_t seg = qt_cg_add_tensor(g, AN("seg"), QT_ROLE_ACT, QT_I32, 1, SHP(M * blocks + 1), AX(0));
    int32_t yr = qt_cg_add_tensor(g, AN("y"), QT_ROLE_ACT, QT_F32, 2, SHP(rmax, D->d), AX(0, 0));
    int32_t gur = qt_cg_add_tensor(g, AN("gu"), QT_ROLE_SAVED, QT_F32, 2, SHP(rmax, 2 * D->f),
                                   AX(0, 0));
    /* one host sequence's rows (<= S*k) must fit one wgrad chunk, as on one rank (the
     * whole-rows size; chunked forwards need no such minimum: the WGRAD has its scratch) */
    int ext;
    int64_t escr = expert_scratch(g, rmax, 1, D, nb, &ext);
    if (ext && D->S * D->k * (D->d + 3 * D->f) > escr) escr = D->S * D->k * (D->d + 3 * D->f);
    int32_t fscr = scratch(g, AN("ffn_fwd_scratch"), escr);
    int32_t dscr = scratch(g, AN("dispatch_scratch"), D->T * D->k * (D->d + 1));
    int32_t rscr = scratch(g, AN("return_scratch"), D->T * D->k * D->d);
#undef AN
    g->ts[er].ep_seg = seg;
    /* the common attributes of the four expert-parallel kinds; their "sequences" are the
     * token blocks, the leaves of the hosts' weight gradients */
    const qt_cg_a_MOE_DISPATCH_FWD ea = {.T = D->T, .k = D->k, .d = D->d, .E = D->E, .El = El,
                                         .b = blocks, .S = D->Sm / D->nbt, .mask = mask,
                                         .Rmax = rmax};
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MOE_DISPATCH_FWD);
    QT_CG_SET_T(op, MOE_DISPATCH_FWD, .xr = xr, .er = er, .seg = seg, .x = h2, .idx = idx,
                .scratch = dscr);
    memcpy(op->a, &ea, sizeof ea);
    op = qt_cg_emit_op(g, 0, QT_OP_EXPERT_FFN_FWD);
    QT_CG_SET_T(op, EXPERT_FFN_FWD, .y = yr, .gu = gur, .x = xr, .idx = er, .w_gu = wgu,
                .w_down = wd, .scratch = fscr);
    QT_CG_SET_A(op, EXPERT_FFN_FWD, .T = rmax, .k = 1, .E = El, .d = D->d, .f = D->f, .nb = nb,
                .bwd_nb = nb);
    if (D->tp > 1) {
        /* the rows' down projections are partial sums over this rank's f/tp: add them */
        op = qt_cg_emit_op(g, 0, QT_OP_ALL_REDUCE);
        QT_T(op, ALL_REDUCE, buf) = yr;
        QT_CG_SET_A(op, ALL_REDUCE, .n = rmax * D->d, .mask = 1 << QT_MESH_TENSOR);
    }
    op = qt_cg_emit_op(g, 0, QT_OP_MOE_RETURN_FWD);
    QT_CG_SET_T(op, MOE_RETURN_FWD, .y = ey, .yr = yr, .idx = idx, .seg = seg, .scratch = rscr);
    memcpy(op->a, &ea, sizeof ea);
    /* the experts' gradient trees take a leaf for every sequence of the expert group */
    g->ps[g->ts[wgu].param].leaves *= M;
    g->ps[g->ts[wd].param].leaves *= M;
}

/* Token dropping (sparse_matmul false, capacity_factor > 0: config/moe.c): MOE_CAPACITY
 * turns idx into the kept ids (-1 past an expert's capacity C per sequence, in token then
 * top-k order; every id with C = 0, moe_drop_all) and adds the dropped counts into
 * moe_drops; returns the kept ids' tensor, or QT_NONE without a capacity (the plan of
 * sparse_matmul true). */
static int32_t moe_capacity(qt_cg_graph *g, int l, int32_t idx, const qt_cg_dims *D)
{
    if (g->s->moe_capacity <= 0 && !g->s->moe_drop_all) return QT_NONE;
    /* the MTP head's layers (l = -1, depth g->mtp_depth + 1) have their own drop-count
     * rows after the main layers' (qt_plan_fields.def moe_drops) */
    const int64_t row = l >= 0 ? l : g->s->m.n_layers + g->mtp_depth;
    char n[256];
    if (l >= 0) snprintf(n, sizeof n, "L%d.moe.kept_idx", l);
    else snprintf(n, sizeof n, "MTP%d.moe.kept_idx", g->mtp_depth);
    int32_t kidx = qt_cg_add_tensor(g, n, QT_ROLE_ACT, QT_I32, 3, SHP(D->b, D->S, D->k),
                                    AX(QT_LAX_ACT_BATCH, QT_LAX_ACT_LENGTH, 0));
    /* a sequence split over context: each block's queue continues the earlier blocks'
     * per-expert counts (the op all-gathers the group's counts: Cc x b x E integers) */
    int32_t scr = QT_NONE;
    if (D->C > 1) {
        if (l >= 0) snprintf(n, sizeof n, "L%d.moe.capacity_scratch", l);
        else snprintf(n, sizeof n, "MTP%d.moe.capacity_scratch", g->mtp_depth);
        scr = qt_cg_add_tensor(g, n, QT_ROLE_SCRATCH, QT_I32, 1, SHP(D->C * D->b * D->E),
                               AX(QT_LAX_NONE));
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MOE_CAPACITY);
    QT_CG_SET_T(op, MOE_CAPACITY, .kidx = kidx, .drops = g->moe_drops, .idx = idx,
                .scratch = scr);
    QT_CG_SET_A(op, MOE_CAPACITY, .T = D->T, .E = D->E, .k = D->k, .S = D->S,
                .C = g->s->moe_capacity, .layer = row,
                .mask = D->C > 1 ? (int64_t)qt_cg_context_mask(g->s) : 0,
                .ctx = D->C > 1 ? D->C : 0);
    return kidx;
}

/* Token dropping by the expert hosts' receive buffers (ragged_buffer_factor r > 0 with
 * sparse_matmul on an expert axis > 1: config/moe.c; MaxText's sparse path): MOE_RAGGED
 * all-gathers the expert group's per-expert counts and marks -1 the rows past their host's
 * buffer of B = int(T k r) rows (order: source rank, expert, token); returns the kept ids'
 * tensor, or QT_NONE without the buffer rule. */
static int32_t moe_ragged(qt_cg_graph *g, int l, int32_t idx, const qt_cg_dims *D)
{
    if (!g->moe_ragged) return QT_NONE;
    const int64_t row = l >= 0 ? l : g->s->m.n_layers + g->mtp_depth,
                  M = g->s->mesh[QT_MESH_EXPERT];
    char n[256];
    if (l >= 0) snprintf(n, sizeof n, "L%d.moe.kept_idx", l);
    else snprintf(n, sizeof n, "MTP%d.moe.kept_idx", g->mtp_depth);
    int32_t kidx = qt_cg_add_tensor(g, n, QT_ROLE_ACT, QT_I32, 3, SHP(D->b, D->S, D->k),
                                    AX(QT_LAX_ACT_BATCH, QT_LAX_ACT_LENGTH, 0));
    if (l >= 0) snprintf(n, sizeof n, "L%d.moe.ragged_scratch", l);
    else snprintf(n, sizeof n, "MTP%d.moe.ragged_scratch", g->mtp_depth);
    int32_t scr = qt_cg_add_tensor(g, n, QT_ROLE_SCRATCH, QT_I32, 1, SHP(M * D->E),
                                   AX(QT_LAX_NONE));
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MOE_RAGGED);
    QT_CG_SET_T(op, MOE_RAGGED, .kidx = kidx, .drops = g->moe_drops, .idx = idx,
                .scratch = scr);
    QT_CG_SET_A(op, MOE_RAGGED, .T = D->T, .E = D->E, .k = D->k, .S = D->S, .El = D->E / M,
                .B = g->ragged_rows, .layer = row, .mask = 1 << QT_MESH_EXPERT);
    return kidx;
}

static void moe_block(qt_cg_graph *g, const char *ppre, const char *apre, int l, int32_t h2,
                      int32_t moe, const qt_cg_dims *D)
{
    char n[256], pre[64];
    snprintf(pre, sizeof pre, "%smlp.", ppre);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "%s.moe.%s", apre, s), n)
    int32_t wr = proj(g, PN("gate.weight"), D->E, D->d, QT_LAX_NONE, QT_LAX_EMBED, l);
    int32_t wgu = add_param(g, PN("experts.gate_up_proj"), 3, SHP(D->E, 2 * D->tp * D->f, D->d),
                            AX(QT_LAX_EXP, QT_LAX_MLP_MOE, QT_LAX_EMBED_MOE), QT_INIT_TRUNC_NORMAL,
                            1.0 / sqrt((double)D->d), l);
    int32_t wd = add_param(g, PN("experts.down_proj"), 3, SHP(D->E, D->d, D->tp * D->f),
                           AX(QT_LAX_EXP, QT_LAX_EMBED_MOE, QT_LAX_MLP_MOE), QT_INIT_TRUNC_NORMAL,
                           1.0 / sqrt((double)(D->tp * D->f)), l);
    /* gate_up_proj rows are [gate | up]: each part splits over tensor separately */
    g->ts[wgu].t.seg[0] = g->ts[wgu].t.seg[1] = D->tp * D->f;
    g->ts[wgu].t.seg_dim = 1;
    int32_t wsg = proj(g, PN("shared_expert.gate_proj.weight"), D->tp * D->fs, D->d, QT_LAX_MLP,
                       QT_LAX_EMBED, l);
    int32_t wsu = proj(g, PN("shared_expert.up_proj.weight"), D->tp * D->fs, D->d, QT_LAX_MLP,
                       QT_LAX_EMBED, l);
    int32_t wsd = proj(g, PN("shared_expert.down_proj.weight"), D->d, D->tp * D->fs, QT_LAX_EMBED,
                       QT_LAX_MLP, l);
    int32_t wsgate = proj(g, PN("shared_expert_gate.weight"), 1, D->d, QT_LAX_NONE, QT_LAX_EMBED,
                          l);

    const uint8_t B = QT_LAX_ACT_BATCH, L = QT_LAX_ACT_LENGTH;
    int32_t rl = act3(g, AN("router_logits"), D, D->E, B, L, 0);
    int32_t idx = qt_cg_add_tensor(g, AN("idx"), QT_ROLE_ACT, QT_I32, 3, SHP(D->b, D->S, D->k),
                                   AX(B, L, 0));
    int32_t p = act3(g, AN("p"), D, D->k, B, L, 0);
    int32_t ey = qt_cg_add_tensor(g, AN("expert_y"), QT_ROLE_ACT, QT_F32, 4,
                                  SHP(D->b, D->S, D->k, D->d), AX(B, L, 0, QT_LAX_ACT_EMBED));
    int32_t routed = resid(g, AN("routed"), D);
    int32_t sa = act3(g, AN("shared_gate"), D, D->fs, B, L, QT_LAX_ACT_MLP);
    int32_t su = act3(g, AN("shared_up"), D, D->fs, B, L, QT_LAX_ACT_MLP);
    int32_t sh = act3(g, AN("shared_h"), D, D->fs, B, L, QT_LAX_ACT_MLP);
    int32_t so = resid(g, AN("shared_out"), D);
    int32_t sg = act3(g, AN("shared_gate_logit"), D, 1, B, L, 0);
    int32_t sgo = resid(g, AN("shared_gated"), D);
#undef PN
#undef AN
    matmul(g, rl, h2, wr, D);
    /* the load-balance term of a sequence split over context (qt_ops.def MOE_ROUTE_FWD):
     * the group's counts (Cc x b x E integers) and the Pbar chain's b x E sums */
    int32_t lscr = QT_NONE;
    if (g->lb_seq != QT_NONE && D->C > 1) {
        char n3[256];
        snprintf(n3, sizeof n3, "%s.moe.lb_scratch", apre);
        lscr = qt_cg_add_tensor(g, n3, QT_ROLE_SCRATCH, QT_I32, 1,
                                SHP((D->C + 1) * D->b * D->E), AX(QT_LAX_NONE));
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MOE_ROUTE_FWD);
    QT_CG_SET_T(op, MOE_ROUTE_FWD, .idx = idx, .p = p, .lb_seq = g->lb_seq, .logits = rl,
                .scratch = lscr);
    QT_CG_SET_A(op, MOE_ROUTE_FWD, .T = D->T, .E = D->E, .k = D->k, .S = D->S,
                .mask = lscr != QT_NONE ? (int64_t)qt_cg_context_mask(g->s) : 0,
                .ctx = lscr != QT_NONE ? D->C : 0);
    if (g->lb_seq != QT_NONE)
        op->f[0] = (float)(g->s->lb_weight * (double)D->E /
                           ((double)g->s->tr.global_batch * (double)g->s->m.n_layers));
    /* token dropping (config/moe.c): the expert path and the combine read the kept ids */
    int32_t kidx = moe_capacity(g, l, idx, D);
    if (kidx == QT_NONE) kidx = moe_ragged(g, l, idx, D);
    const int32_t eidx = kidx != QT_NONE ? kidx : idx;
    if (g->s->mesh[QT_MESH_EXPERT] > 1 || D->tp > 1) {
        expert_parallel(g, apre, h2, eidx, ey, wgu, wd, D);
    } else {
        char n2[256];
        snprintf(n2, sizeof n2, "%s.moe.expert_gu", apre);
        int32_t gu = qt_cg_add_tensor(g, n2, QT_ROLE_SAVED, QT_F32, 4,
                                      SHP(D->b, D->S, D->k, 2 * D->f), AX(B, L, 0, QT_LAX_ACT_MLP));
        /* qt_ops.h: >= max(T*k*(d+f), S*(d+3f)), so one sequence's rows always fit (S the
         * whole sequence, as check/check.c counts it: on a context mesh more than this rank's
         * D->S tokens; every plan whose partials did not cover that was refused there) */
        const int64_t nb = expert_canon(g, D), Sg = g->s->tr.seq_len;
        int ext;
        int64_t escr = expert_scratch(g, D->T, D->k, D, nb, &ext);
        if (ext && Sg * (D->d + 3 * D->f) > escr) escr = Sg * (D->d + 3 * D->f);
        snprintf(n2, sizeof n2, "%s.moe.expert_fwd_scratch", apre);
        int32_t fscr = scratch(g, n2, escr);
        qt_cg_layout_declare(g, gu, QT_LAX_ACT_MLP, "the routed experts are replicated over "
                             "tensor (their widths are not split yet)");
        op = qt_cg_emit_op(g, 0, QT_OP_EXPERT_FFN_FWD);
        QT_CG_SET_T(op, EXPERT_FFN_FWD, .y = ey, .gu = gu, .x = h2, .idx = eidx, .w_gu = wgu,
                    .w_down = wd, .scratch = fscr);
        QT_CG_SET_A(op, EXPERT_FFN_FWD, .T = D->T, .k = D->k, .E = D->E, .d = D->d, .f = D->f,
                    .nb = nb, .bwd_nb = nb);
    }
    op = qt_cg_emit_op(g, 0, QT_OP_MOE_COMBINE_FWD);
    QT_CG_SET_T(op, MOE_COMBINE_FWD, .out = routed, .p = p, .y = ey, .kidx = kidx);
    QT_CG_SET_A(op, MOE_COMBINE_FWD, .T = D->T, .k = D->k, .d = D->d);
    matmul_col(g, sa, h2, wsg, D);
    matmul_col(g, su, h2, wsu, D);
    op = qt_cg_emit_op(g, 0, QT_OP_SWIGLU_FWD);
    QT_CG_SET_T(op, SWIGLU_FWD, .h = sh, .a = sa, .u = su);
    QT_A(op, SWIGLU_FWD, n) = D->T * D->fs;
    matmul_row(g, so, sh, wsd, D);
    matmul(g, sg, h2, wsgate, D);
    op = qt_cg_emit_op(g, 0, QT_OP_SIGMOID_GATE_FWD);
    QT_CG_SET_T(op, SIGMOID_GATE_FWD, .y = sgo, .x = so, .gate = sg);
    QT_CG_SET_A(op, SIGMOID_GATE_FWD, .T = D->T, .n = D->d, .mode = QT_GATE_ROW, .hd = 0);
    add(g, moe, routed, sgo);
}

/* One decoder layer on the residual stream x: norm, mixer (full attention or GDN), residual,
 * norm, MoE block, residual; returns the output stream. Parameters "<ppre>..." (layer index
 * l for the per-layer machinery, -1 outside the main stack), activations "<apre>....". */
static int32_t decoder_layer(qt_cg_graph *g, const char *ppre, const char *apre, int l,
                             int full, int32_t x, const qt_cg_dims *D)
{
    const qt_cg_settings *s = g->s;
    char n[256];
    snprintf(n, sizeof n, "%sinput_layernorm.weight", ppre);
    int32_t w_in = norm_w(g, n, D->d, QT_INIT_ZEROS, l);
#define AN(s_) (snprintf(n, sizeof n, "%s.%s", apre, s_), n)
    int32_t h = resid(g, AN("h"), D);
    int32_t hr = qt_cg_add_tensor(g, AN("h_rstd"), QT_ROLE_SAVED, QT_F32, 2, SHP(D->b, D->S),
                                  AX(QT_LAX_ACT_BATCH, QT_LAX_ACT_NORM_LENGTH));
    int32_t mix = resid(g, AN("mix"), D);
    rmsnorm(g, h, hr, x, w_in, D->T, D->d, D->d, D->d, s->m.norm_eps);
    if (full) attn_layer(g, ppre, apre, l, h, mix, D);
    else gdn_layer(g, l, h, mix, D);
    int32_t x1 = resid(g, AN("x_mid"), D);
    add(g, x1, x, mix);
    snprintf(n, sizeof n, "%spost_attention_layernorm.weight", ppre);
    int32_t w_post = norm_w(g, n, D->d, QT_INIT_ZEROS, l);
    int32_t h2 = resid(g, AN("h2"), D);
    int32_t h2r = qt_cg_add_tensor(g, AN("h2_rstd"), QT_ROLE_SAVED, QT_F32, 2, SHP(D->b, D->S),
                                   AX(QT_LAX_ACT_BATCH, QT_LAX_ACT_NORM_LENGTH));
    rmsnorm(g, h2, h2r, x1, w_post, D->T, D->d, D->d, D->d, s->m.norm_eps);
    int32_t moe = resid(g, AN("moe"), D);
    moe_block(g, ppre, apre, l, h2, moe, D);
    int32_t xn = resid(g, AN("x_out"), D);
    add(g, xn, x1, moe);
#undef AN
    return xn;
}

/* A STACK or SPLIT op (qt_ops.def): y [nb, n, rows, w] and its n parts xs[j] [nb, rows, w]. */
static void stack_op(qt_cg_graph *g, int kind, int32_t y, const int32_t *xs, int64_t n,
                     int64_t nb, int64_t rows, int64_t w)
{
    qt_op *op = qt_cg_emit_op(g, 0, kind);
    QT_T(op, STACK, y) = y;
    for (int64_t j = 0; j < n; j++) op->t[QT_T_STACK_x0 + j] = xs[j];
    QT_CG_SET_A(op, STACK, .nb = nb, .rows = rows, .w = w, .n = n);
}

/* The multi-token-prediction head (docs/model.md 1.8) on the main model's final-normed
 * hidden states hf, with e[j] the embeddings of x_{i+1+j} (SPLIT of the stacked embedding):
 * per depth j, z = mtp.fc([pre_fc_norm_embedding(e) ; pre_fc_norm_hidden(h)]) (a STACK of
 * feature rows, embedding first), h = one decoder layer of the full-attention kind on z
 * ("mtp.layers.j.", activations "MTPj."; no load-balance term), hn[j] = mtp.norm(h). The
 * head's parameters are outside the layer stack (layer -1, like the embedding's). mtp.fc
 * and the three norms are read by every depth: model/autodiff.c gives each of them one
 * WGRAD over the depths' rows stacked per leaf. */
static void mtp_head(qt_cg_graph *g, int32_t hf, const int32_t *e, int32_t *hn,
                     const qt_cg_dims *D)
{
    const qt_cg_settings *s = g->s;
    const uint8_t B = QT_LAX_ACT_BATCH, L = QT_LAX_ACT_LENGTH;
    const int32_t t0 = g->nt, lb = g->lb_seq;
    char n[256], ppre[64], apre[32];
    int32_t w_fc = add_param(g, "mtp.fc.weight", 2, SHP(D->d, 2 * D->d),
                             AX(QT_LAX_NONE, QT_LAX_EMBED), QT_INIT_TRUNC_NORMAL,
                             1.0 / sqrt((double)(2 * D->d)), -1);
    int32_t w_ne = norm_w(g, "mtp.pre_fc_norm_embedding.weight", D->d, QT_INIT_ZEROS, -1);
    int32_t w_nh = norm_w(g, "mtp.pre_fc_norm_hidden.weight", D->d, QT_INIT_ZEROS, -1);
    int32_t w_n = norm_w(g, "mtp.norm.weight", D->d, QT_INIT_ZEROS, -1);
    int32_t h = hf;
    g->lb_seq = QT_NONE;
    for (int j = 0; j < s->mtp_layers; j++) {
#define AN(s_) (snprintf(n, sizeof n, "MTP%d.%s", j, s_), n)
#define RSTD(nm) qt_cg_add_tensor(g, AN(nm), QT_ROLE_SAVED, QT_F32, 2, SHP(D->b, D->S), \
                                  AX(B, QT_LAX_ACT_NORM_LENGTH))
        int32_t en = resid(g, AN("emb_normed"), D), enr = RSTD("emb_rstd");
        int32_t hh = resid(g, AN("hidden_normed"), D), hhr = RSTD("hidden_rstd");
        int32_t u = act3(g, AN("fc_in"), D, 2 * D->d, B, L, QT_LAX_ACT_EMBED);
        int32_t z = resid(g, AN("fc_out"), D);
        rmsnorm(g, en, enr, e[j], w_ne, D->T, D->d, D->d, D->d, s->m.norm_eps);
        rmsnorm(g, hh, hhr, h, w_nh, D->T, D->d, D->d, D->d, s->m.norm_eps);
        stack_op(g, QT_OP_STACK, u, (const int32_t[]){en, hh}, 2, D->T, 1, D->d);
        matmul(g, z, u, w_fc, D);
        snprintf(ppre, sizeof ppre, "mtp.layers.%d.", j);
        snprintf(apre, sizeof apre, "MTP%d", j);
        g->mtp_depth = j;
        h = decoder_layer(g, ppre, apre, -1, 1, z, D);
        hn[j] = resid(g, AN("final_h"), D);
        rmsnorm(g, hn[j], RSTD("final_rstd"), h, w_n, D->T, D->d, D->d, D->d, s->m.norm_eps);
#undef RSTD
#undef AN
    }
    g->lb_seq = lb;
    qt_cg_layout_declare(g, t0, QT_LAX_ACT_EMBED, QT_CG_WHOLE_EMBED);
}

/* The MTP head's tensors outside the graph's ops (docs/model.md 1.8): its stacked inputs
 * and targets and its loss sums, and the carried head's region (mtp_keep_layers). */
static void mtp_io(qt_cg_graph *g, const qt_cg_dims *Dp)
{
    const qt_cg_settings *s = g->s;
    const qt_cg_dims D = *Dp;
    const uint8_t LB = QT_LAX_ACT_EMBED_LOGITS_BATCH, L = QT_LAX_ACT_LENGTH;
    /* the MTP head (docs/model.md 1.8): its stacked inputs and targets and its loss sums */
    const int64_t np = 1 + s->mtp_layers;
    g->mtp_tokens = g->mtp_targets = g->mtp_loss_seq = QT_NONE;
    if (np > 1) {
        g->mtp_tokens = qt_cg_add_tensor(g, "mtp_tokens", QT_ROLE_INPUT, QT_I32, 2,
                                         SHP(D.b, np * D.S), AX(LB, L));
        g->mtp_targets = qt_cg_add_tensor(g, "mtp_targets", QT_ROLE_INPUT, QT_I32, 2,
                                          SHP(D.b, np * D.S), AX(LB, L));
        g->mtp_loss_seq = qt_cg_add_tensor(g, "mtp_loss_seq", QT_ROLE_LOSS, QT_F32, 1,
                                           SHP(D.b * D.nbt / D.C), AX(LB));
        g->ts[g->mtp_tokens].whole = g->ts[g->mtp_targets].whole = 1;
        g->ts[g->mtp_loss_seq].whole = 1;
    }
    /* packed documents: the MTP gradient scale depends on the step's data (its positions
     * with a loss), so the runtime writes it here before the step's first microbatch */
    g->mtp_scale = QT_NONE;
    if (np > 1 && s->packing) {
        g->mtp_scale = qt_cg_add_tensor(g, "mtp_scale", QT_ROLE_INPUT, QT_F32, 1, SHP(1), AX(0));
        g->ts[g->mtp_scale].whole = 1;
    }
    /* the carried head (mtp_keep_layers): bytes no op touches, live the whole run */
    g->mtp_keep = QT_NONE;
    if (s->mtp_keep > 0) {
        g->mtp_keep = qt_cg_add_tensor(g, "mtp_keep", QT_ROLE_INPUT, QT_I32, 1,
                                       SHP(s->mtp_keep_bytes / 4), AX(0));
        g->ts[g->mtp_keep].whole = 1;
    }
}

/* mtp_eval_target_module k (config/mtp.c): MTP_ACCEPT before the cross entropy, on the
 * logits of this rank's columns (split > 1: vocabulary-parallel over tensor) and tokens
 * (C > 1: the halo over context); it writes the eval's acceptance counts (qt_ops.def). */
static void mtp_accept(qt_cg_graph *g, int32_t logits, int64_t split, const qt_cg_dims *D)
{
    const qt_cg_settings *s = g->s;
    const int64_t blocks = D->b * D->nbt / D->C, Sb = D->Sm / D->nbt, St = D->Sm / D->C;
    const int64_t R = blocks * Sb, k = s->mtp_eval_k, kk = k < St ? k : St;
    const int64_t P = split > 1 ? split : 1;
    int32_t acc = qt_cg_add_tensor(g, "mtp_accept", QT_ROLE_LOSS, QT_I32, 1, SHP(2), AX(0));
    g->ts[acc].whole = 1;
    int32_t scr = qt_cg_add_tensor(g, "logits.mtp_accept_scratch", QT_ROLE_SCRATCH, QT_I32, 1,
                                   SHP(QT_MTP_ACCEPT_SCRATCH(R, P, D->C, R / St, kk)),
                                   AX(QT_LAX_NONE));
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MTP_ACCEPT);
    QT_CG_SET_T(op, MTP_ACCEPT, .acc = acc, .logits = logits, .targets = g->mtp_targets,
                .scratch = scr);
    QT_CG_SET_A(op, MTP_ACCEPT, .b = blocks, .S = Sb, .V = D->V / P, .n = 1 + s->mtp_layers,
                .mask = P > 1 ? (int64_t)(1u << QT_MESH_TENSOR) : 0, .k = k,
                .cmask = D->C > 1 ? (int64_t)(1u << QT_MESH_CONTEXT) : 0, .St = St);
}

/* The final norm, the lm_head and the cross entropy. Vocab-parallel (vocab_parallel on a
 * tensor mesh): the lm_head weight, the logits and d.logits hold this rank's V/tp vocabulary
 * columns, as their specs say (vocab, activation_vocab -> tensor); XENT combines the shards
 * over the tensor group and the head's data gradient is canonically blocked over the
 * vocabulary (vocab_blocks > 1, on one rank too: the same blocks, the same bits). */
static int head_and_xent(qt_cg_graph *g, int32_t x, int32_t w_fn, const int32_t *e,
                         const qt_cg_dims *D, char *err, size_t errlen)
{
    const qt_cg_settings *s = g->s;
    const uint8_t LB = QT_LAX_ACT_EMBED_LOGITS_BATCH, L = QT_LAX_ACT_LENGTH;
    const uint8_t tensor = (uint8_t)(1u << QT_MESH_TENSOR);
    const int64_t split = s->vocab_parallel ? D->tp : 1, Vl = D->V / split;
    int32_t w_head = proj(g, "lm_head.weight", D->V, D->d, QT_LAX_VOCAB, QT_LAX_EMBED_VOCAB, -1);
    int32_t hf = act3(g, "final_h", D, D->d, QT_LAX_ACT_BATCH, L, QT_LAX_ACT_EMBED);
    int32_t hfr = qt_cg_add_tensor(g, "final_rstd", QT_ROLE_SAVED, QT_F32, 2, SHP(D->b, D->S),
                                   AX(QT_LAX_ACT_BATCH, L));
    /* with the MTP head the logits hold n = 1 + depths parts per token block (STACK) */
    const int64_t np = 1 + s->mtp_layers;
    int32_t logits = qt_cg_add_tensor(g, "logits", QT_ROLE_ACT, QT_F32, 3,
                                      SHP(D->b, np * D->S, Vl), AX(LB, L, QT_LAX_ACT_VOCAB));
    int32_t dlogits = qt_cg_add_tensor(g, "d.logits", QT_ROLE_ACT_GRAD, QT_F32, 3,
                                       SHP(D->b, np * D->S, Vl), AX(LB, L, QT_LAX_ACT_VOCAB));
    qt_cg_layout_declare(g, 0, QT_LAX_ACT_EMBED, QT_CG_WHOLE_EMBED);
    if (split > 1) {
        qt_tensor *wt = &g->ts[w_head].t;
        if (!(wt->spec[0] & tensor) || !(g->ts[logits].t.spec[2] & tensor))
            return qt_cg_fail(err, errlen, "vocab_parallel=true: the logical_axis_rules must "
                              "map vocab and activation_vocab to tensor (lm_head.weight spec "
                              "dim 0, logits spec dim 2); expected MaxText's rules or "
                              "vocab_parallel=false");
        wt->shape[0] = Vl;
        wt->numel = Vl * D->d;
        g->ps[g->ts[w_head].param].numel = wt->numel;
        g->ts[logits].exec[2] = g->ts[dlogits].exec[2] = tensor;
    } else {
        qt_cg_layout_declare(g, logits, QT_LAX_ACT_VOCAB,
                             "activation_vocab stays whole: the logits and the cross entropy "
                             "run on every tensor rank (vocab_parallel=true splits them)");
    }
    rmsnorm(g, hf, hfr, x, w_fn, D->T, D->d, D->d, D->d, s->m.norm_eps);
    const int64_t blocks = D->b * D->nbt / D->C, Sb = D->Sm / D->nbt;
    int32_t hin = hf;
    if (np > 1) {
        int32_t parts[8] = {hf};
        mtp_head(g, hf, e, parts + 1, D);
        hin = qt_cg_add_tensor(g, "head_in", QT_ROLE_ACT, QT_F32, 3, SHP(D->b, np * D->S, D->d),
                               AX(QT_LAX_ACT_BATCH, L, QT_LAX_ACT_EMBED));
        stack_op(g, QT_OP_STACK, hin, parts, np, blocks, Sb, D->d);
        qt_cg_layout_declare(g, hin, QT_LAX_ACT_EMBED, QT_CG_WHOLE_EMBED);
    }
    matmul(g, logits, hin, w_head, D);
    QT_A(&g->mb[g->nmb - 1], MATMUL_FWD, M) = np * D->T;
    /* the data gradient's contraction over the vocabulary: this rank's canonical blocks */
    if (s->vocab_blocks > 1) QT_A(&g->mb[g->nmb - 1], MATMUL_FWD, bwd_nb) = s->vocab_blocks / split;
    if (np > 1) {
        /* the MTP gradient scale: factor x N / M, N = B x S main targets, M = B x sum over
         * the depths j of (S - j) positions with an MTP loss (qt_ops.def XENT_MTP); packed,
         * N and M depend on the documents: the runtime writes the scale into mtp_scale */
        int64_t m = 0;
        for (int64_t j = 1; j < np; j++) m += D->Sm - j;
        const int64_t nb = s->vocab_blocks > 1 ? s->vocab_blocks / split : 0;
        const int64_t P = nb && split > 1 ? split : 1;
        if (s->mtp_eval_k > 0) mtp_accept(g, logits, split, D);
        qt_op *op = qt_cg_emit_op(g, 0, QT_OP_XENT_MTP);
        int32_t scr = scratch(g, "logits.xent_mtp_scratch",
                              blocks * np + (nb ? QT_XENT_BLK_SCRATCH(np * D->T, nb, P) : 0));
        QT_CG_SET_T(op, XENT_MTP, .loss_seq = g->loss_seq, .mtp_loss_seq = g->mtp_loss_seq,
                    .dlogits = dlogits, .logits = logits, .targets = g->mtp_targets,
                    .scratch = scr, .scale = g->mtp_scale, .z_seq = QT_NONE);
        QT_CG_SET_A(op, XENT_MTP, .b = blocks, .S = Sb, .V = Vl, .nb = nb,
                    .mask = nb && split > 1 ? tensor : 0, .n = np);
        op->f[0] = (float)(s->mtp_factor * (double)D->Sm / (double)m);
        if (s->tr.z_loss != 0.0f) { /* the main logits' z-loss (MaxText: not the head's) */
            op->f[1] = s->tr.z_loss;
            QT_T(op, XENT_MTP, z_seq) = qt_cg_add_tensor(g, "z_seq", QT_ROLE_LOSS, QT_F32, 1,
                                                         SHP(blocks), AX(LB));
            g->ts[QT_T(op, XENT_MTP, z_seq)].whole = 1;
        }
        g->head_w = w_head;
        return 0;
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_XENT);
    QT_CG_SET_T(op, XENT, .loss_seq = g->loss_seq, .dlogits = dlogits, .logits = logits,
                .targets = g->targets, .scratch = QT_NONE, .z_seq = QT_NONE);
    QT_CG_SET_A(op, XENT, .b = D->b * D->nbt / D->C, .S = D->Sm / D->nbt, .V = Vl);
    if (s->vocab_blocks > 1) {
        const int64_t nb = s->vocab_blocks / split;
        QT_A(op, XENT, nb) = nb;
        QT_A(op, XENT, mask) = split > 1 ? tensor : 0;
        QT_T(op, XENT, scratch) = scratch(g, "logits.xent_scratch",
                                          QT_XENT_BLK_SCRATCH(D->T, nb, split));
    }
    if (s->tr.z_loss != 0.0f) { /* z_loss_multiplier (issue 33): the plain form's z sums */
        op->f[0] = s->tr.z_loss;
        QT_T(op, XENT, z_seq) = qt_cg_add_tensor(g, "z_seq", QT_ROLE_LOSS, QT_F32, 1,
                                                 SHP(D->b * D->nbt / D->C), AX(LB));
        g->ts[QT_T(op, XENT, z_seq)].whole = 1;
    }
    g->head_w = w_head;
    return 0;
}

static void dims_of(const qt_cg_settings *s, qt_cg_dims *D)
{
    const qt_model_dims *m = &s->m;
    D->b = s->tr.micro_batch;
    D->nbt = qt_cg_blocks(s);
    D->C = qt_cg_context(s);
    D->Sm = s->tr.seq_len;
    D->S = D->Sm / D->C;
    D->T = D->b * D->S;
    D->d = m->d;
    D->V = m->vocab;
    D->E = m->n_experts;
    D->k = m->top_k;
    D->f = m->moe_dim;
    D->fs = m->shared_dim;
    D->Hq = m->n_q_heads;
    D->Hkv = m->n_kv_heads;
    D->hd = m->head_dim;
    D->R = m->rotary_dim;
    D->Hk = m->gdn_k_heads;
    D->Hv = m->gdn_v_heads;
    D->Dk = m->gdn_k_dim;
    D->Dv = m->gdn_v_dim;
    D->K = m->gdn_conv;
    D->tp = s->mesh[QT_MESH_TENSOR];
    D->Hq /= D->tp;
    D->Hkv /= D->tp;
    D->Hk /= D->tp;
    D->Hv /= D->tp;
    D->fs /= D->tp;
    D->f /= D->tp;
    D->r = D->Hv / D->Hk;
    D->G = 2 * D->Dk + 2 * D->r * D->Dv;
    D->Cc = 2 * D->Hk * D->Dk + D->Hv * D->Dv;
    D->nch = (D->Sm + m->gdn_chunk - 1) / m->gdn_chunk;
}

/* Token dropping: the ZERO of the dropped counts (moe_drops, every row), before the layers
 * that add theirs. */
static void drops_zero(qt_cg_graph *g)
{
    const qt_tensor *t = &g->ts[g->moe_drops].t;   /* [layers + MTP depths, b] */
    const int64_t n = t->shape[0] * t->shape[1];
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ZERO);
    QT_T(op, ZERO, x) = g->moe_drops;
    QT_A(op, ZERO, n) = n;
}

/* The step's inputs, loss sums and tables (tokens, targets, per-block loss sums, the lb and
 * dropped-count sums, the rope table, packed positions, the MTP head's inputs) and the init
 * ops that fill or zero them. */
static void graph_io(qt_cg_graph *g, const qt_cg_dims *D)
{
    const qt_cg_settings *s = g->s;
    g->lb_seq = g->table = QT_NONE;
    const uint8_t LB = QT_LAX_ACT_EMBED_LOGITS_BATCH, L = QT_LAX_ACT_LENGTH;
    g->tokens = qt_cg_add_tensor(g, "tokens", QT_ROLE_INPUT, QT_I32, 2, SHP(D->b, D->S),
                                 AX(LB, L));
    g->targets = qt_cg_add_tensor(g, "targets", QT_ROLE_INPUT, QT_I32, 2, SHP(D->b, D->S),
                                  AX(LB, L));
    /* one loss sum per token block (the WGRAD leaves' blocks; per sequence without them) */
    g->loss_seq = qt_cg_add_tensor(g, "loss_seq", QT_ROLE_LOSS, QT_F32, 1,
                                   SHP(D->b * D->nbt / D->C), AX(LB));
    if (s->lb_weight > 0)
        g->lb_seq = qt_cg_add_tensor(g, "lb_seq", QT_ROLE_LOSS, QT_F32, 1, SHP(D->b), AX(LB));
    /* token dropping: each layer's dropped counts per sequence (the metrics' share) */
    g->moe_drops = QT_NONE;
    /* receive buffers: B = int(T k r) rows, T this rank's tokens a microbatch (MaxText's
     * get_ragged_buffer_size on the local batch); an expert axis of one rank has none */
    g->moe_ragged = s->ragged_factor > 0 && s->mesh[QT_MESH_EXPERT] > 1;
    g->ragged_tokens = g->moe_ragged ? D->T : 0;
    g->ragged_rows = g->moe_ragged ? (int64_t)((double)(D->T * D->k) * s->ragged_factor) : 0;
    if (s->moe_capacity > 0 || s->moe_drop_all || g->moe_ragged) {
        g->moe_drops = qt_cg_add_tensor(g, "moe_drops", QT_ROLE_LOSS, QT_I32, 2,
                                        SHP(s->m.n_layers + s->mtp_layers, D->b), AX(0, LB));
        g->ts[g->moe_drops].whole = 1;
    }
    g->table = qt_cg_add_tensor(g, "rope_table", QT_ROLE_TABLE, QT_F32, 3,
                                SHP(D->Sm, D->R / 2, 2), AX(0, 0, 0));
    /* packing: each token's position in its document, whole sequences also on a context
     * rank (the sequence mixers run on whole sequences of heads there) */
    g->positions = QT_NONE;
    if (s->packing) {
        g->positions = qt_cg_add_tensor(g, "positions", QT_ROLE_INPUT, QT_I32, 2,
                                        SHP(D->b, D->Sm), AX(LB, 0));
        g->ts[g->positions].whole = 1;
    }
    mtp_io(g, D);
    g->ts[g->tokens].whole = g->ts[g->targets].whole = g->ts[g->loss_seq].whole = 1;
    g->ts[g->table].whole = 1;
    if (g->lb_seq != QT_NONE) g->ts[g->lb_seq].whole = 1;

    qt_op *op = qt_cg_emit_op(g, 1, QT_OP_ROPE_TABLE);
    QT_T(op, ROPE_TABLE, table) = g->table;
    QT_CG_SET_A(op, ROPE_TABLE, .S = D->Sm, .R = D->R);
    op->f[0] = s->m.rope_theta;

    /* a pipeline stage after the first continues the stage before's running lb sums, which
     * the driver writes into lb_seq before each forward (runtime/pipeline.c) */
    const int pp_later = s->pp_stages > 1 && s->pp_local && s->pp_stage > 0;
    if (g->lb_seq != QT_NONE && !pp_later) {
        op = qt_cg_emit_op(g, 0, QT_OP_ZERO);
        QT_T(op, ZERO, x) = g->lb_seq;
        QT_A(op, ZERO, n) = D->b;
    }
    /* a circular stage's chunks zero the counts each (pp_chunk_open) */
    if (g->moe_drops != QT_NONE && !(s->pp_stages > 1 && s->pp_local && s->pp_repeats > 1))
        drops_zero(g);
}

/* The gradient of a stage's output boundary x (received from the stage after: the
 * backward's seed, model/autodiff.c); both live for the whole microbatch schedule. */
static int32_t pp_boundary_grad(qt_cg_graph *g, int32_t x, const char *name)
{
    const qt_tensor xt = g->ts[x].t;
    const int32_t d = qt_cg_add_tensor(g, name, QT_ROLE_ACT_GRAD, QT_F32, xt.ndim, xt.shape,
                                       xt.axes);
    memcpy(g->ts[d].exec, g->ts[x].exec, sizeof g->ts[x].exec);
    g->ts[x].whole = g->ts[d].whole = 1;
    return d;
}

/* A circular stage's repeat chunk r starts (num_pipeline_repeats > 1, qt_ops.def PP_CHUNK):
 * its marker, with the chunk's first parameter (the next one created) and its one-rank
 * indices; the boundaries are set as they are made. Returns the marker's op index. */
static int pp_chunk_open(qt_cg_graph *g, const qt_cg_settings *s, int r)
{
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_PP_CHUNK);
    QT_CG_SET_A(op, PP_CHUNK, .chunk = r, .bwd = 0, .in = QT_NONE, .out = QT_NONE,
                .dout = QT_NONE, .din = QT_NONE, .param0 = g->np,
                .gparam = s->pp_chunk_base[2 * r], .gelem = s->pp_chunk_base[2 * r + 1]);
    const int mk = g->nmb - 1;
    /* token dropping: each chunk's forward counts its own layers' drops from zero (the
     * driver takes them after each chunk's B: runtime/pipeline.c), so a chunk's runs read
     * no other chunk's counts */
    if (g->moe_drops != QT_NONE) drops_zero(g);
    return mk;
}

/* Chunk r's input boundary (what the stage before sent, or for stage 0 the last stage's
 * output of repeat r - 1) into marker mk; returns it. */
static int32_t pp_chunk_in(qt_cg_graph *g, const qt_cg_dims *D, int mk, int r)
{
    char n[32];
    snprintf(n, sizeof n, r ? "pp_in.%d" : "pp_in", r);
    const int32_t x = act3(g, n, D, D->d, QT_LAX_ACT_EMBED_LOGITS_BATCH, QT_LAX_ACT_LENGTH,
                           QT_LAX_ACT_EMBED);
    g->ts[x].whole = 1;
    QT_A(&g->mb[mk], PP_CHUNK, in) = x;
    return x;
}

/* Chunk r's output boundary x (sent on) and its gradient into marker mk. */
static void pp_chunk_out(qt_cg_graph *g, int mk, int r, int32_t x)
{
    char n[32];
    snprintf(n, sizeof n, "d.pp_out.%d", r);
    QT_A(&g->mb[mk], PP_CHUNK, out) = x;
    QT_A(&g->mb[mk], PP_CHUNK, dout) = pp_boundary_grad(g, x, n);
}

/* The MTP head's D embeddings as one boundary tensor [b, D S, d]: e[0] itself for D = 1,
 * else a new tensor `name` that op (STACK on stage 0, SPLIT on the last stage) stacks or
 * splits per token block, as the one-rank stacked embedding holds its parts. */
static int32_t pp_mtp_stacked(qt_cg_graph *g, const char *name, int kind, int32_t *e,
                              const qt_cg_dims *D)
{
    const int64_t n = g->s->mtp_layers;
    if (n == 1) return e[0];
    const int32_t x = qt_cg_add_tensor(g, name, QT_ROLE_ACT, QT_F32, 3, SHP(D->b, n * D->S, D->d),
                                       AX(QT_LAX_ACT_EMBED_LOGITS_BATCH, QT_LAX_ACT_LENGTH,
                                          QT_LAX_ACT_EMBED));
    stack_op(g, kind, x, e, n, D->b * D->nbt / D->C, D->Sm / D->nbt, D->d);
    return x;
}

/* Stage 0 with the MTP head (docs/pipeline.md "The MTP head on a pipeline"): the depths'
 * embeddings e[0 .. D) of the one stacked EMBED_FWD go straight to the last stage
 * (pp_mtp_out), and their gradient comes back from it (pp_mtp_dout: a second seed of the
 * backward, which SPLIT's backward stacks with the layers' into the one EMBED_WGRAD). */
static void pp_mtp_send(qt_cg_graph *g, int32_t *e, const qt_cg_dims *D)
{
    g->pp_mtp_out = pp_mtp_stacked(g, "pp_mtp_out", QT_OP_STACK, e, D);
    g->pp_mtp_dout = pp_boundary_grad(g, g->pp_mtp_out, "d.pp_mtp_out");
}

/* The last stage with the MTP head: the depths' embeddings received from stage 0
 * (pp_mtp_in, live for the whole schedule) into e[0 .. D); its gradient (pp_mtp_din, sent
 * back) is autodiff's (model/autodiff.c). */
static void pp_mtp_recv(qt_cg_graph *g, int32_t *e, const qt_cg_dims *D)
{
    char n[32];
    const int depths = g->s->mtp_layers;
    for (int j = 0; j < depths; j++) {
        snprintf(n, sizeof n, depths == 1 ? "pp_mtp_in" : "MTP%d.emb", j);
        e[j] = act3(g, n, D, D->d, QT_LAX_ACT_EMBED_LOGITS_BATCH, QT_LAX_ACT_LENGTH,
                    QT_LAX_ACT_EMBED);
    }
    g->pp_mtp_in = pp_mtp_stacked(g, "pp_mtp_in", QT_OP_SPLIT, e, D);
    g->ts[g->pp_mtp_in].whole = 1;
}

int64_t qt_cg_pp_in_slots(const qt_cg_settings *s)
{
    const int S = s->pp_stages, M = s->pp_micro, R = s->pp_repeats;
    if (S <= 1 || R <= 1 || s->pp_schedule != 1) return (int64_t)M * (R > 1 ? R : 1);
    /* interleaved 1F1B: the order's peak, the slot per pair in flight the driver assigns */
    int *buf = malloc(4 * (size_t)M * R * sizeof *buf);
    if (!buf) return (int64_t)M * R;
    const int n = qt_pp_intl_slots(S, s->pp_stage, M, R, buf, buf + 2 * M * R, buf + 3 * M * R);
    free(buf);
    return n;
}

/* The pipeline driver's in-flight message slots of a stage whose boundary holds nb elements:
 * pp_slots (P input slots, P = M R or under interleaved 1F1B the order's peak,
 * qt_cg_pp_in_slots, then M R sent activations and M R sent gradients), with the MTP head on stage 0 and the last stage
 * pp_mtp_slots, with the load-balance loss pp_lb_slots; all live for the whole schedule. */
static void pp_slot_tensors(qt_cg_graph *g, int64_t nb, int pp_first, int pp_last)
{
    const qt_cg_settings *s = g->s;
    const int64_t MR = (int64_t)s->pp_micro * s->pp_repeats, D = s->mtp_layers;
    const int64_t P = qt_cg_pp_in_slots(s);
    g->pp_slots = qt_cg_add_tensor(g, "pp_slots", QT_ROLE_ACT, QT_F32, 2, SHP(P + 2 * MR, nb),
                                   AX(0, 0));
    g->ts[g->pp_slots].whole = 1;
    /* the MTP head's D boundaries per microbatch: stage 0's M sends of the embeddings; the
     * last stage's M received embeddings and M sends of their gradient */
    if (D > 0 && (pp_first || pp_last)) {
        g->pp_mtp_slots = qt_cg_add_tensor(g, "pp_mtp_slots", QT_ROLE_ACT, QT_F32, 2,
                                           SHP((pp_last ? 2 : 1) * s->pp_micro, D * nb),
                                           AX(0, 0));
        g->ts[g->pp_mtp_slots].whole = 1;
    }
    /* the load-balance loss's running sums per sequence, sent on with the activations
     * (lb_seq: the layers' terms added in the one-rank layer order; M R: with circular
     * repeats they wrap around with the activations) */
    if (g->lb_seq != QT_NONE) {
        g->pp_lb_slots = qt_cg_add_tensor(g, "pp_lb_slots", QT_ROLE_LOSS, QT_F32, 2,
                                          SHP(P + MR, s->tr.micro_batch), AX(0, 0));
        g->ts[g->pp_lb_slots].whole = 1;
    }
}

int qt_cg_graph_build(qt_cg_graph *g, const qt_cg_settings *s, char *err, size_t errlen)
{
    qt_cg_dims D;
    memset(g, 0, sizeof *g);
    g->s = s;
    dims_of(s, &D);
    graph_io(g, &D);
    const uint8_t LB = QT_LAX_ACT_EMBED_LOGITS_BATCH, L = QT_LAX_ACT_LENGTH;
    const int64_t np = 1 + s->mtp_layers;
    qt_op *op;
    /* a pipeline stage's executable tables (pp_local): the embedding on stage 0 only, the
     * others start from their input boundary, received from the stage before */
    const int pp = s->pp_stages > 1 && s->pp_local;
    const int pp_first = !pp || s->pp_stage == 0, pp_last = !pp || s->pp_stage == s->pp_stages - 1;
    g->pp_in = g->pp_din = g->pp_out = g->pp_dout = g->pp_slots = g->pp_lb_slots = QT_NONE;
    g->pp_mtp_in = g->pp_mtp_din = g->pp_mtp_out = g->pp_mtp_dout = g->pp_mtp_slots = QT_NONE;
    int32_t x, e[8] = {QT_NONE};
    char n[256];
    /* circular repeats (R > 1): the stage's R chunks of Lps layers are separate subgraphs,
     * each from its own input boundary to its own output, delimited by PP_CHUNK markers */
    const int circ = pp && s->pp_repeats > 1;
    int mk = circ ? pp_chunk_open(g, s, 0) : -1;
    if (!pp_first && circ) {
        x = g->pp_in = pp_chunk_in(g, &D, mk, 0);
    } else if (!pp_first) {
        x = g->pp_in = act3(g, "pp_in", &D, D.d, LB, L, QT_LAX_ACT_EMBED);
        g->ts[x].whole = 1;
        /* the last stage's MTP head reads stage 0's embeddings of the shifted tokens */
        if (pp_last && np > 1) pp_mtp_recv(g, e + 1, &D);
    } else {
        int32_t w_emb = add_param(g, "model.embed_tokens.weight", 2, SHP(D.V, D.d),
                                  AX(QT_LAX_VOCAB, QT_LAX_EMBED_VOCAB), QT_INIT_NORMAL, 1.0, -1);
        x = e[0] = act3(g, "x0", &D, D.d, LB, L, QT_LAX_ACT_EMBED);
        /* with the MTP head one gather embeds the main and the shifted tokens, stacked per
         * token block (the embedding keeps one weight gradient), and SPLIT parts them */
        int32_t xall = x;
        if (np > 1) {
            xall = qt_cg_add_tensor(g, "x0_all", QT_ROLE_ACT, QT_F32, 3, SHP(D.b, np * D.S, D.d),
                                    AX(LB, L, QT_LAX_ACT_EMBED));
            for (int j = 1; j < np; j++) {
                snprintf(n, sizeof n, "MTP%d.emb", j - 1);
                e[j] = act3(g, n, &D, D.d, LB, L, QT_LAX_ACT_EMBED);
            }
        }
        op = qt_cg_emit_op(g, 0, QT_OP_EMBED_FWD);
        QT_CG_SET_T(op, EMBED_FWD, .x = xall, .tokens = np > 1 ? g->mtp_tokens : g->tokens,
                    .w = w_emb);
        QT_CG_SET_A(op, EMBED_FWD, .T = np * D.T, .d = D.d, .V = D.V);
        if (np > 1)
            stack_op(g, QT_OP_SPLIT, xall, e, np, D.b * D.nbt / D.C, D.Sm / D.nbt, D.d);
        if (pp && np > 1) pp_mtp_send(g, e + 1, &D);
    }
    /* a pipeline stage's tables hold its layers only, named and initialised by their
     * global index (qt_cg_pp_layer: MaxText's layer-to-stage map); else every layer */
    g->n_layers_rec = (int)qt_cg_stage_layers(s);
    g->layer_op0 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_op0);
    g->layer_op1 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_op1);
    g->layer_t0 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_t0);
    g->layer_t1 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_t1);
    for (int l = 0; l < g->n_layers_rec; l++) {
        if (circ && l > 0 && l % s->pp_lps == 0) {
            /* chunk r - 1 ends at its output boundary; chunk r starts from its input */
            const int r = l / s->pp_lps;
            pp_chunk_out(g, mk, r - 1, x);
            mk = pp_chunk_open(g, s, r);
            x = pp_chunk_in(g, &D, mk, r);
        }
        const int32_t layer_t0 = g->nt;
        g->layer_op0[l] = g->nmb;
        g->layer_t0[l] = layer_t0;
        const int gl = (int)qt_cg_pp_layer(s, s->pp_stage, l);
        int full = (gl + 1) % (int)s->m.cycle == 0;
        char ppre[64], apre[32];
        snprintf(ppre, sizeof ppre, "model.layers.%d.", gl);
        snprintf(apre, sizeof apre, "L%d", gl);
        x = decoder_layer(g, ppre, apre, gl, full, x, &D);
        g->layer_op1[l] = g->nmb;
        g->layer_t1[l] = g->nt;
        /* the layer's layout declaration: its residual-stream activations stay whole */
        qt_cg_layout_declare(g, layer_t0, QT_LAX_ACT_EMBED, QT_CG_WHOLE_EMBED);
    }
    if (pp) pp_slot_tensors(g, g->ts[x].t.numel, pp_first, pp_last);
    if (!pp_last) {
        /* the output boundary, sent to the next stage, and its gradient, received back:
         * the backward's seed (model/autodiff.c) */
        g->pp_out = x;
        if (circ) {
            pp_chunk_out(g, mk, s->pp_repeats - 1, x);
            g->pp_dout = QT_A(&g->mb[mk], PP_CHUNK, dout);
        } else {
            g->pp_dout = pp_boundary_grad(g, x, "d.pp_out");
        }
        g->head_w = QT_NONE;
        g->n_fwd = g->nmb;
        return 0;
    }
    /* circular: the MTP head's embeddings arrive in the last chunk (repeat R - 1), whose
     * forward and backward alone read them (docs/pipeline.md "The MTP head with circular
     * repeats") */
    if (circ && np > 1) pp_mtp_recv(g, e + 1, &D);
    int32_t w_fn = norm_w(g, "model.norm.weight", D.d, QT_INIT_ZEROS, -1);
    if (head_and_xent(g, x, w_fn, e + 1, &D, err, errlen)) return -1;
    g->n_fwd = g->nmb;
    if (g->too_big)
        return qt_cg_fail(err, errlen, "tensor %s: its shape has more than 2^56 elements, "
                          "where 64-bit sizes would overflow; expected smaller model or batch "
                          "sizes", g->too_big);
    return 0;
}
