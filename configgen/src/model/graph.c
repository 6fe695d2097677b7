/* model/graph.c - the forward step graph of one microbatch, built from qt_ops.h ops.
 *
 * b = per_device_batch_size sequences, S = max_target_length, T = b*S. Activations carry
 * shapes [b, S, ...] (so their logical axes follow docs/sharding.md section 3); parameters
 * carry the canonical Qwen3-Next Hugging Face names and [out, in] shapes (experts fused:
 * gate_up_proj [E,2I,d], down_proj [E,d,I]) with the logical axes of docs/sharding.md 4 in that
 * dim order. Layer l is full attention iff (l+1) % cycle == 0, else Gated DeltaNet.
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
#include "model/qt_cg_model.h"
#include "../../firmware/kernels/gdn_chunk.h"
#include "../../firmware/kernels/matmul_canon.h"

#define SHP(...) ((const int64_t[]){__VA_ARGS__})
/* The decoder layers' declaration for their residual-stream activations. */
#define QT_CG_WHOLE_EMBED                                                                  \
    "activation_embed stays whole on every tensor rank (Megatron layout): row-parallel "   \
    "projections all-reduce their outputs (canonical tree) instead of reduce-scattering"
#define AX(...) ((const uint8_t[]){__VA_ARGS__})

int32_t qt_cg_add_tensor(qt_cg_graph *g, const char *name, int role, int dtype, int ndim,
                         const int64_t *shape, const uint8_t *axes)
{
    g->ts = qt_cg_grow(g->ts, &g->capt, g->nt + 1, sizeof *g->ts);
    qt_cg_tensor *ct = &g->ts[g->nt];
    qt_tensor *t = &ct->t;
    t->name = qt_cg_strdup(name);
    t->role = (uint8_t)role;
    t->dtype = (uint8_t)dtype;
    t->ndim = (uint8_t)ndim;
    t->numel = 1;
    const char *names[QT_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = t->global_shape[i] = shape[i];
        t->axes[i] = axes[i];
        /* the settings bound every shape product; this catches a shape they missed */
        if (__builtin_mul_overflow(t->numel, shape[i], &t->numel) ||
            t->numel > ((int64_t)1 << 56)) {
            if (!g->too_big) g->too_big = t->name;
            t->numel = 1;
        }
        names[i] = axes[i] ? qt_cg_lax_names[axes[i]] : NULL;
    }
    qt_cg_resolve(g->s->rules, g->s->n_rules, g->s->mesh, ndim, names, t->spec, NULL);
    qt_cg_layout_default(g->s, ndim, axes, ct->exec);
    ct->reshard = NULL;
    ct->param = -1;
    ct->first = ct->last = -1;
    ct->ep_seg = QT_NONE;
    ct->alias_of = -1;
    ct->alias_off = 0;
    return g->nt++;
}

int32_t qt_cg_clone_tensor(qt_cg_graph *g, int32_t id, const char *suffix)
{
    char name[300];
    snprintf(name, sizeof name, "%s%s", g->ts[id].t.name, suffix);
    qt_cg_tensor src = g->ts[id];   /* copy: add_tensor may move the array */
    int32_t c = qt_cg_add_tensor(g, name, src.t.role, src.t.dtype, src.t.ndim, src.t.shape,
                                 src.t.axes);
    qt_cg_tensor *ct = &g->ts[c];
    memcpy(ct->t.global_shape, src.t.global_shape, sizeof ct->t.global_shape);
    memcpy(ct->t.spec, src.t.spec, sizeof ct->t.spec);
    memcpy(ct->t.seg, src.t.seg, sizeof ct->t.seg);
    ct->t.seg_dim = src.t.seg_dim;
    memcpy(ct->exec, src.exec, sizeof ct->exec);
    return c;
}

qt_op *qt_cg_emit_op(qt_cg_graph *g, int init, int kind)
{
    qt_op *op;
    if (init) {
        g->init = qt_cg_grow(g->init, &g->capinit, g->ninit + 1, sizeof *g->init);
        op = &g->init[g->ninit++];
    } else {
        g->mb = qt_cg_grow(g->mb, &g->capmb, g->nmb + 1, sizeof *g->mb);
        op = &g->mb[g->nmb++];
    }
    qt_cg_op_blank(op, kind);
    return op;
}

typedef struct qt_cg_dims {
    /* head counts, Cc and fs are this rank's (tensor parallelism splits them tp ways);
     * parameters are declared with global shapes (x tp) and localised by add_param */
    int64_t b, S, T, d, V, E, k, f, fs, Hq, Hkv, hd, R, Hk, Hv, Dk, Dv, K, r, G, Cc, nch, tp;
    int64_t nbt; /* canonical token blocks per sequence (context_blocks) */
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
        if (axes[d] == QT_LAX_EXP && (pt->spec[d] & (1u << QT_MESH_EXPERT)))
            parts = g->s->mesh[QT_MESH_EXPERT];
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
    p->leaves = g->s->tr.micro_batch * g->s->tr.grad_accum * qt_cg_blocks(g->s);
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
    const int64_t nb = qt_canon_blocks(wt->global_shape[dim], 1);
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

static void gdn_layer(qt_cg_graph *g, int l, int32_t h, int32_t mix, const qt_cg_dims *D)
{
    char n[256], pre[64];
    float eps = g->s->m.norm_eps;
    snprintf(pre, sizeof pre, "model.layers.%d.linear_attn.", l);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "L%d.gdn.%s", l, s), n)
    int32_t w_qkvz = proj(g, PN("in_proj_qkvz.weight"), D->tp * D->Hk * D->G, D->d, QT_LAX_GDN_HEAD,
                          QT_LAX_EMBED, l);
    int32_t w_ba = proj(g, PN("in_proj_ba.weight"), D->tp * 2 * D->Hv, D->d, QT_LAX_GDN_HEAD,
                        QT_LAX_EMBED, l);
    int32_t w_conv = add_param(g, PN("conv1d.weight"), 3, SHP(D->tp * D->Cc, 1, D->K),
                               AX(QT_LAX_GDN_HEAD, 0, 0),
                               QT_INIT_TRUNC_NORMAL, 1.0 / sqrt((double)D->K), l);
    /* the conv channels are [q | k | v] of all heads: each part splits by heads */
    g->ts[w_conv].t.seg[0] = D->tp * D->Hk * D->Dk;
    g->ts[w_conv].t.seg[1] = D->tp * D->Hk * D->Dk;
    g->ts[w_conv].t.seg[2] = D->tp * D->Hv * D->Dv;
    int32_t a_log = add_param(g, PN("A_log"), 1, SHP(D->tp * D->Hv), AX(QT_LAX_GDN_HEAD),
                              QT_INIT_LOG_UNIFORM, 0, l);
    int32_t dt_bias = add_param(g, PN("dt_bias"), 1, SHP(D->tp * D->Hv), AX(QT_LAX_GDN_HEAD),
                                QT_INIT_ONES, 0.0, l);
    int32_t w_norm = norm_w(g, PN("norm.weight"), D->Dv, QT_INIT_ONES, l);
    int32_t w_out = proj(g, PN("out_proj.weight"), D->d, D->tp * D->Hv * D->Dv, QT_LAX_EMBED,
                         QT_LAX_GDN_HEAD, l);

    const uint8_t kvb = QT_LAX_ACT_KV_BATCH, kvh = QT_LAX_ACT_KV_HEADS;
    int32_t qkvz = qt_cg_add_tensor(g, AN("qkvz"), QT_ROLE_ACT, QT_F32, 4,
                                    SHP(D->b, D->S, D->Hk, D->G), AX(kvb, 0, kvh, 0));
    int32_t ba = qt_cg_add_tensor(g, AN("ba"), QT_ROLE_ACT, QT_F32, 4,
                                  SHP(D->b, D->S, D->Hk, 2 * D->r), AX(kvb, 0, kvh, 0));
    /* the conv channels are the heads' q | k | v parts: head-structured like kvh */
    int32_t c = act3(g, AN("conv"), D, D->Cc, kvb, 0, kvh);
    int32_t cpre = qt_cg_add_tensor(g, AN("conv_pre"), QT_ROLE_SAVED, QT_F32, 3,
                                    SHP(D->b, D->S, D->Cc), AX(kvb, 0, kvh));
    int32_t beta = act3(g, AN("beta"), D, D->Hv, kvb, 0, kvh);
    int32_t gg = act3(g, AN("g"), D, D->Hv, kvb, 0, kvh);
    int32_t o = qt_cg_add_tensor(g, AN("o"), QT_ROLE_ACT, QT_F32, 4,
                                 SHP(D->b, D->S, D->Hv, D->Dv), AX(kvb, 0, kvh, 0));
    int32_t states = qt_cg_add_tensor(g, AN("states"), QT_ROLE_SAVED, QT_F32, 4,
                                      SHP(D->b, D->Hv, D->nch, D->Dk * D->Dv), AX(kvb, kvh, 0, 0));
    int32_t rq = qt_cg_add_tensor(g, AN("rq"), QT_ROLE_SAVED, QT_F32, 3, SHP(D->b, D->S, D->Hk),
                                  AX(kvb, 0, kvh));
    int32_t rk = qt_cg_add_tensor(g, AN("rk"), QT_ROLE_SAVED, QT_F32, 3, SHP(D->b, D->S, D->Hk),
                                  AX(kvb, 0, kvh));
    int32_t y = qt_cg_add_tensor(g, AN("y"), QT_ROLE_ACT, QT_F32, 4,
                                 SHP(D->b, D->S, D->Hv, D->Dv), AX(kvb, 0, kvh, 0));
    int32_t yrstd = qt_cg_add_tensor(g, AN("y_rstd"), QT_ROLE_SAVED, QT_F32, 3,
                                     SHP(D->b, D->S, D->Hv), AX(kvb, 0, kvh));
#undef PN
#undef AN
    matmul_col(g, qkvz, h, w_qkvz, D);
    matmul_col(g, ba, h, w_ba, D);
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_GDN_CONV_FWD);
    QT_CG_SET_T(op, GDN_CONV_FWD, .c = c, .pre = cpre, .qkvz = qkvz, .w = w_conv);
    QT_CG_SET_A(op, GDN_CONV_FWD, .b = D->b, .S = D->S, .Hk = D->Hk, .Dk = D->Dk, .Hv = D->Hv,
                .Dv = D->Dv, .K = D->K);
    op = qt_cg_emit_op(g, 0, QT_OP_GDN_GATES_FWD);
    QT_CG_SET_T(op, GDN_GATES_FWD, .beta = beta, .g = gg, .ba = ba, .A_log = a_log,
                .dt_bias = dt_bias);
    QT_CG_SET_A(op, GDN_GATES_FWD, .T = D->T, .Hk = D->Hk, .Hv = D->Hv);
    /* algo selects the algorithm; only the chunked form needs forward scratch (qt_ops.h:
     * 2*C*Dk + 2*C*Dv + 4*C*C + 3*C with C = min(chunk, S)), the recurrent one gets a
     * one-float placeholder so that every slot names a tensor. */
    int64_t chunked = g->s->gdn_chunked, ck = g->s->m.gdn_chunk;
    snprintf(n, sizeof n, "L%d.gdn.core_fwd_scratch", l);
    const int32_t cscr = scratch(g, n, chunked ? QT_GDN_CHUNK_FWD_SCRATCH(
                                                     QT_GDN_CHUNK_ROWS(ck, D->S), D->Dk, D->Dv)
                                               : 1);
    op = qt_cg_emit_op(g, 0, QT_OP_GDN_CORE_FWD);
    QT_CG_SET_T(op, GDN_CORE_FWD, .o = o, .states = states, .rq = rq, .rk = rk, .c = c, .g = gg,
                .beta = beta, .scratch = cscr);
    QT_CG_SET_A(op, GDN_CORE_FWD, .b = D->b, .S = D->S, .Hk = D->Hk, .Dk = D->Dk, .Hv = D->Hv,
                .Dv = D->Dv, .chunk = ck, .algo = chunked);
    op->f[0] = (float)(1.0 / sqrt((double)D->Dk));
    op->f[1] = 1e-6f;
    op = qt_cg_emit_op(g, 0, QT_OP_GATED_RMSNORM_FWD);
    QT_CG_SET_T(op, GATED_RMSNORM_FWD, .y = y, .rstd = yrstd, .o = o, .qkvz = qkvz, .w = w_norm);
    QT_CG_SET_A(op, GATED_RMSNORM_FWD, .T = D->T, .Hk = D->Hk, .Dk = D->Dk, .Hv = D->Hv,
                .Dv = D->Dv);
    op->f[0] = eps;
    matmul_row(g, mix, y, w_out, D);
}

static void attn_layer(qt_cg_graph *g, int l, int32_t h, int32_t mix, const qt_cg_dims *D)
{
    char n[256], pre[64];
    float eps = g->s->m.norm_eps;
    snprintf(pre, sizeof pre, "model.layers.%d.self_attn.", l);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "L%d.attn.%s", l, s), n)
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

    const uint8_t kvb = QT_LAX_ACT_KV_BATCH, len = QT_LAX_ACT_LENGTH_ATTN,
                  kvh = QT_LAX_ACT_KV_HEADS, hdx = QT_LAX_ACT_KV_HEAD_DIM;
#define HT(nm, role, H, w) qt_cg_add_tensor(g, AN(nm), role, QT_F32, 4, SHP(D->b, D->S, H, w), \
                                            AX(kvb, len, kvh, hdx))
    int32_t qg = HT("qg", QT_ROLE_ACT, D->Hq, 2 * D->hd);
    int32_t k0 = HT("k", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t v = HT("v", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t qn = HT("q_normed", QT_ROLE_ACT, D->Hq, D->hd);
    int32_t kn = HT("k_normed", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t qr = HT("q_rope", QT_ROLE_ACT, D->Hq, D->hd);
    int32_t kr = HT("k_rope", QT_ROLE_ACT, D->Hkv, D->hd);
    int32_t att = HT("o", QT_ROLE_ACT, D->Hq, D->hd);
#undef HT
    int32_t qrstd = qt_cg_add_tensor(g, AN("q_rstd"), QT_ROLE_SAVED, QT_F32, 3,
                                     SHP(D->b, D->S, D->Hq), AX(kvb, len, kvh));
    int32_t krstd = qt_cg_add_tensor(g, AN("k_rstd"), QT_ROLE_SAVED, QT_F32, 3,
                                     SHP(D->b, D->S, D->Hkv), AX(kvb, len, kvh));
    int32_t lse = qt_cg_add_tensor(g, AN("lse"), QT_ROLE_SAVED, QT_F32, 3,
                                   SHP(D->b, D->Hq, D->S), AX(kvb, kvh, len));
    int32_t gated = act3(g, AN("gated"), D, D->Hq * D->hd, QT_LAX_ACT_BATCH, QT_LAX_ACT_LENGTH,
                         QT_LAX_ACT_HEADS);
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
    int32_t xs[2] = {qn, kn}, ys[2] = {qr, kr};
    int64_t hs[2] = {D->Hq, D->Hkv};
    for (int i = 0; i < 2; i++) {
        qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ROPE_FWD);
        QT_CG_SET_T(op, ROPE_FWD, .y = ys[i], .x = xs[i], .table = g->table);
        QT_CG_SET_A(op, ROPE_FWD, .b = D->b, .S = D->S, .H = hs[i], .hd = D->hd, .R = D->R);
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ATTN_FWD);
    snprintf(n, sizeof n, "L%d.attn.fwd_scratch", l);
    const int32_t ascr = scratch(g, n, D->S);
    QT_CG_SET_T(op, ATTN_FWD, .o = att, .lse = lse, .q = qr, .k = kr, .v = v, .scratch = ascr);
    QT_CG_SET_A(op, ATTN_FWD, .b = D->b, .S = D->S, .Hq = D->Hq, .Hkv = D->Hkv, .hd = D->hd);
    op->f[0] = (float)(1.0 / sqrt((double)D->hd));
    op = qt_cg_emit_op(g, 0, QT_OP_SIGMOID_GATE_FWD);
    QT_CG_SET_T(op, SIGMOID_GATE_FWD, .y = gated, .x = att, .gate = qg);
    QT_CG_SET_A(op, SIGMOID_GATE_FWD, .T = D->T, .n = D->Hq * D->hd, .mode = QT_GATE_HEADS,
                .hd = D->hd);
    matmul_row(g, mix, gated, wo, D);
}

/* Canonical blocks of an expert's down contraction (over f) and of its data gradient (over
 * [gate | up], per part): those of the global width, this rank's share under tensor
 * parallelism (kernels/matmul_canon.h). */
static int64_t expert_canon(const qt_cg_graph *g, const qt_cg_dims *D)
{
    (void)g;
    return qt_canon_blocks(D->f * D->tp, 1) / D->tp;
}

/* Scratch of the expert FFN forward / backward over R rows of k slots with nb canonical
 * blocks (expert_ffn.c): per row d + 3f plus the blocks' partials, and the packed weights. */
static int64_t expert_scratch(int64_t R, int64_t k, const qt_cg_dims *D, int64_t nb)
{
    const int64_t d = D->d, f = D->f, rows = R * k;
    return rows * (d + 3 * f + nb * d + 2 * f / nb) + rows + D->E + 1 + rows * d + d * (2 * f / nb);
}

/* Expert parallelism (qt_ops.def MOE_DISPATCH_FWD ...): the routed rows of this rank's
 * tokens go to the ranks holding their experts, run through the same expert FFN kernel
 * there (packed rows, k = 1, local expert ids) and come back to their (t, slot) rows. */
static void expert_parallel(qt_cg_graph *g, int l, int32_t h2, int32_t idx, int32_t ey,
                            int32_t wgu, int32_t wd, const qt_cg_dims *D)
{
    char n[256];
    const int64_t Ep = g->s->mesh[QT_MESH_EXPERT], El = D->E / Ep;
    const int64_t rmax = Ep * D->T * (D->k < El ? D->k : El);
    /* the group the rows travel in: the expert axis, or none (tensor parallelism only: the
     * rows stay on their rank, and only their partial sums cross the tensor group) */
    const int64_t mask = Ep > 1 ? (int64_t)(1u << QT_MESH_EXPERT) : 0;
    const int64_t nb = expert_canon(g, D);
#define AN(s) (snprintf(n, sizeof n, "L%d.moe.ep_%s", l, s), n)
    int32_t xr = qt_cg_add_tensor(g, AN("x"), QT_ROLE_ACT, QT_F32, 2, SHP(rmax, D->d), AX(0, 0));
    int32_t er = qt_cg_add_tensor(g, AN("expert"), QT_ROLE_ACT, QT_I32, 1, SHP(rmax), AX(0));
    int32_t seg = qt_cg_add_tensor(g, AN("seg"), QT_ROLE_ACT, QT_I32, 1, SHP(Ep * D->b * D->nbt + 1),
                                   AX(0));
    int32_t yr = qt_cg_add_tensor(g, AN("y"), QT_ROLE_ACT, QT_F32, 2, SHP(rmax, D->d), AX(0, 0));
    int32_t gur = qt_cg_add_tensor(g, AN("gu"), QT_ROLE_SAVED, QT_F32, 2, SHP(rmax, 2 * D->f),
                                   AX(0, 0));
    /* one host sequence's rows (<= S*k) must fit one wgrad chunk, as on one rank */
    int64_t escr = expert_scratch(rmax, 1, D, nb);
    if (D->S * D->k * (D->d + 3 * D->f) > escr) escr = D->S * D->k * (D->d + 3 * D->f);
    int32_t fscr = scratch(g, AN("ffn_fwd_scratch"), escr);
    int32_t dscr = scratch(g, AN("dispatch_scratch"), D->T * D->k * (D->d + 1));
    int32_t rscr = scratch(g, AN("return_scratch"), D->T * D->k * D->d);
#undef AN
    g->ts[er].ep_seg = seg;
    /* the common attributes of the four expert-parallel kinds; their "sequences" are the
     * token blocks, the leaves of the hosts' weight gradients */
    const qt_cg_a_MOE_DISPATCH_FWD ea = {.T = D->T, .k = D->k, .d = D->d, .E = D->E, .El = El,
                                         .b = D->b * D->nbt, .S = D->S / D->nbt, .mask = mask,
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
    g->ps[g->ts[wgu].param].leaves *= Ep;
    g->ps[g->ts[wd].param].leaves *= Ep;
}

static void moe_block(qt_cg_graph *g, int l, int32_t h2, int32_t moe, const qt_cg_dims *D)
{
    char n[256], pre[64];
    snprintf(pre, sizeof pre, "model.layers.%d.mlp.", l);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "L%d.moe.%s", l, s), n)
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
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_MOE_ROUTE_FWD);
    QT_CG_SET_T(op, MOE_ROUTE_FWD, .idx = idx, .p = p, .lb_seq = g->lb_seq, .logits = rl);
    QT_CG_SET_A(op, MOE_ROUTE_FWD, .T = D->T, .E = D->E, .k = D->k, .S = D->S);
    if (g->lb_seq != QT_NONE)
        op->f[0] = (float)(g->s->lb_weight * (double)D->E /
                           ((double)g->s->tr.global_batch * (double)g->s->m.n_layers));
    if (g->s->mesh[QT_MESH_EXPERT] > 1 || D->tp > 1) {
        expert_parallel(g, l, h2, idx, ey, wgu, wd, D);
    } else {
        char n2[256];
        snprintf(n2, sizeof n2, "L%d.moe.expert_gu", l);
        int32_t gu = qt_cg_add_tensor(g, n2, QT_ROLE_SAVED, QT_F32, 4,
                                      SHP(D->b, D->S, D->k, 2 * D->f), AX(B, L, 0, QT_LAX_ACT_MLP));
        /* qt_ops.h: >= max(T*k*(d+f), S*(d+3f)), so one sequence's rows always fit. */
        const int64_t nb = expert_canon(g, D);
        int64_t escr = expert_scratch(D->T, D->k, D, nb);
        if (D->S * (D->d + 3 * D->f) > escr) escr = D->S * (D->d + 3 * D->f);
        snprintf(n2, sizeof n2, "L%d.moe.expert_fwd_scratch", l);
        int32_t fscr = scratch(g, n2, escr);
        qt_cg_layout_declare(g, gu, QT_LAX_ACT_MLP, "the routed experts are replicated over "
                             "tensor (their widths are not split yet)");
        op = qt_cg_emit_op(g, 0, QT_OP_EXPERT_FFN_FWD);
        QT_CG_SET_T(op, EXPERT_FFN_FWD, .y = ey, .gu = gu, .x = h2, .idx = idx, .w_gu = wgu,
                    .w_down = wd, .scratch = fscr);
        QT_CG_SET_A(op, EXPERT_FFN_FWD, .T = D->T, .k = D->k, .E = D->E, .d = D->d, .f = D->f,
                    .nb = nb, .bwd_nb = nb);
    }
    op = qt_cg_emit_op(g, 0, QT_OP_MOE_COMBINE_FWD);
    QT_CG_SET_T(op, MOE_COMBINE_FWD, .out = routed, .p = p, .y = ey);
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

static void dims_of(const qt_cg_settings *s, qt_cg_dims *D)
{
    const qt_model_dims *m = &s->m;
    D->b = s->tr.micro_batch;
    D->nbt = qt_cg_blocks(s);
    D->S = s->tr.seq_len;
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
    D->nch = (D->S + m->gdn_chunk - 1) / m->gdn_chunk;
}

int qt_cg_graph_build(qt_cg_graph *g, const qt_cg_settings *s, char *err, size_t errlen)
{
    qt_cg_dims D;
    memset(g, 0, sizeof *g);
    g->s = s;
    dims_of(s, &D);
    g->lb_seq = g->table = QT_NONE;
    const uint8_t LB = QT_LAX_ACT_EMBED_LOGITS_BATCH, L = QT_LAX_ACT_LENGTH;
    g->tokens = qt_cg_add_tensor(g, "tokens", QT_ROLE_INPUT, QT_I32, 2, SHP(D.b, D.S), AX(LB, L));
    g->targets = qt_cg_add_tensor(g, "targets", QT_ROLE_INPUT, QT_I32, 2, SHP(D.b, D.S),
                                  AX(LB, L));
    /* one loss sum per token block (the WGRAD leaves' blocks; per sequence without them) */
    g->loss_seq = qt_cg_add_tensor(g, "loss_seq", QT_ROLE_LOSS, QT_F32, 1, SHP(D.b * D.nbt),
                                   AX(LB));
    if (s->lb_weight > 0)
        g->lb_seq = qt_cg_add_tensor(g, "lb_seq", QT_ROLE_LOSS, QT_F32, 1, SHP(D.b), AX(LB));
    g->table = qt_cg_add_tensor(g, "rope_table", QT_ROLE_TABLE, QT_F32, 3,
                                SHP(D.S, D.R / 2, 2), AX(0, 0, 0));
    g->ts[g->tokens].whole = g->ts[g->targets].whole = g->ts[g->loss_seq].whole = 1;
    g->ts[g->table].whole = 1;
    if (g->lb_seq != QT_NONE) g->ts[g->lb_seq].whole = 1;

    qt_op *op = qt_cg_emit_op(g, 1, QT_OP_ROPE_TABLE);
    QT_T(op, ROPE_TABLE, table) = g->table;
    QT_CG_SET_A(op, ROPE_TABLE, .S = D.S, .R = D.R);
    op->f[0] = s->m.rope_theta;

    if (g->lb_seq != QT_NONE) {
        op = qt_cg_emit_op(g, 0, QT_OP_ZERO);
        QT_T(op, ZERO, x) = g->lb_seq;
        QT_A(op, ZERO, n) = D.b;
    }
    int32_t w_emb = add_param(g, "model.embed_tokens.weight", 2, SHP(D.V, D.d),
                              AX(QT_LAX_VOCAB, QT_LAX_EMBED_VOCAB), QT_INIT_NORMAL, 1.0, -1);
    int32_t x = act3(g, "x0", &D, D.d, LB, L, QT_LAX_ACT_EMBED);
    op = qt_cg_emit_op(g, 0, QT_OP_EMBED_FWD);
    QT_CG_SET_T(op, EMBED_FWD, .x = x, .tokens = g->tokens, .w = w_emb);
    QT_CG_SET_A(op, EMBED_FWD, .T = D.T, .d = D.d, .V = D.V);

    char n[256];
    g->n_layers_rec = (int)s->m.n_layers;
    g->layer_op0 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_op0);
    g->layer_op1 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_op1);
    g->layer_t0 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_t0);
    g->layer_t1 = qt_cg_alloc((size_t)g->n_layers_rec * sizeof *g->layer_t1);
    for (int l = 0; l < (int)s->m.n_layers; l++) {
        const int32_t layer_t0 = g->nt;
        g->layer_op0[l] = g->nmb;
        g->layer_t0[l] = layer_t0;
        int full = (l + 1) % (int)s->m.cycle == 0;
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        int32_t w_in = norm_w(g, n, D.d, QT_INIT_ZEROS, l);
#define AN(s_) (snprintf(n, sizeof n, "L%d.%s", l, s_), n)
        int32_t h = resid(g, AN("h"), &D);
        int32_t hr = qt_cg_add_tensor(g, AN("h_rstd"), QT_ROLE_SAVED, QT_F32, 2, SHP(D.b, D.S),
                                      AX(QT_LAX_ACT_BATCH, QT_LAX_ACT_NORM_LENGTH));
        int32_t mix = resid(g, AN("mix"), &D);
        rmsnorm(g, h, hr, x, w_in, D.T, D.d, D.d, D.d, s->m.norm_eps);
        if (full) attn_layer(g, l, h, mix, &D);
        else gdn_layer(g, l, h, mix, &D);
        int32_t x1 = resid(g, AN("x_mid"), &D);
        add(g, x1, x, mix);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        int32_t w_post = norm_w(g, n, D.d, QT_INIT_ZEROS, l);
        int32_t h2 = resid(g, AN("h2"), &D);
        int32_t h2r = qt_cg_add_tensor(g, AN("h2_rstd"), QT_ROLE_SAVED, QT_F32, 2, SHP(D.b, D.S),
                                       AX(QT_LAX_ACT_BATCH, QT_LAX_ACT_NORM_LENGTH));
        rmsnorm(g, h2, h2r, x1, w_post, D.T, D.d, D.d, D.d, s->m.norm_eps);
        int32_t moe = resid(g, AN("moe"), &D);
        moe_block(g, l, h2, moe, &D);
        int32_t xn = resid(g, AN("x_out"), &D);
        add(g, xn, x1, moe);
        x = xn;
        g->layer_op1[l] = g->nmb;
        g->layer_t1[l] = g->nt;
        /* the layer's layout declaration: its residual-stream activations stay whole */
        qt_cg_layout_declare(g, layer_t0, QT_LAX_ACT_EMBED, QT_CG_WHOLE_EMBED);
#undef AN
    }
    int32_t w_fn = norm_w(g, "model.norm.weight", D.d, QT_INIT_ZEROS, -1);
    int32_t w_head = proj(g, "lm_head.weight", D.V, D.d, QT_LAX_VOCAB, QT_LAX_EMBED_VOCAB, -1);
    int32_t hf = act3(g, "final_h", &D, D.d, QT_LAX_ACT_BATCH, L, QT_LAX_ACT_EMBED);
    int32_t hfr = qt_cg_add_tensor(g, "final_rstd", QT_ROLE_SAVED, QT_F32, 2, SHP(D.b, D.S),
                                   AX(QT_LAX_ACT_BATCH, L));
    int32_t logits = act3(g, "logits", &D, D.V, LB, L, QT_LAX_ACT_VOCAB);
    int32_t dlogits = qt_cg_add_tensor(g, "d.logits", QT_ROLE_ACT_GRAD, QT_F32, 3,
                                       SHP(D.b, D.S, D.V), AX(LB, L, QT_LAX_ACT_VOCAB));
    qt_cg_layout_declare(g, 0, QT_LAX_ACT_EMBED, QT_CG_WHOLE_EMBED);
    qt_cg_layout_declare(g, logits, QT_LAX_ACT_VOCAB,
                         "activation_vocab stays whole: the logits and the cross entropy run "
                         "on every tensor rank (vocab-parallel softmax is not planned)");
    rmsnorm(g, hf, hfr, x, w_fn, D.T, D.d, D.d, D.d, s->m.norm_eps);
    matmul(g, logits, hf, w_head, &D);
    op = qt_cg_emit_op(g, 0, QT_OP_XENT);
    QT_CG_SET_T(op, XENT, .loss_seq = g->loss_seq, .dlogits = dlogits, .logits = logits,
                .targets = g->targets);
    QT_CG_SET_A(op, XENT, .b = D.b * D.nbt, .S = D.S / D.nbt, .V = D.V);
    g->n_fwd = g->nmb;
    if (g->too_big)
        return qt_cg_fail(err, errlen, "tensor %s: its shape has more than 2^56 elements, "
                          "where 64-bit sizes would overflow; expected smaller model or batch "
                          "sizes", g->too_big);
    return 0;
}
