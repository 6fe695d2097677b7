/* qt_cg_graph.c - the forward step graph of one microbatch, built from qt_ops.h ops.
 *
 * b = per_device_batch_size sequences, S = max_target_length, T = b*S. Activations carry
 * shapes [b, S, ...] (so their logical axes follow research/maxtext.md 3.3); parameters
 * carry the canonical Qwen3-Next Hugging Face names and [out, in] shapes (experts fused:
 * gate_up_proj [E,2I,d], down_proj [E,d,I]) with the logical axes of maxtext.md 3.4 in that
 * dim order. Layer l is full attention iff (l+1) % cycle == 0, else Gated DeltaNet.
 * Invariants: every op's sizes agree with the tensor shapes it names; the forward ends
 * with XENT, which also writes d.logits (the backward seed); the init schedule holds the
 * one ROPE_TABLE.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qt_cg.h"
#include "../../firmware/kernels/gdn_chunk.h"

#define SHP(...) ((const int64_t[]){__VA_ARGS__})
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
    ct->param = -1;
    ct->first = ct->last = -1;
    return g->nt++;
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
    memset(op, 0, sizeof *op);
    op->kind = (uint16_t)kind;
    for (int i = 0; i < QT_OP_MAX_T; i++) op->t[i] = QT_NONE;
    return op;
}

typedef struct qt_cg_dims {
    int64_t b, S, T, d, V, E, k, f, fs, Hq, Hkv, hd, R, Hk, Hv, Dk, Dv, K, r, G, Cc, nch;
} qt_cg_dims;

static int32_t add_param(qt_cg_graph *g, const char *name, int ndim, const int64_t *shape,
                         const uint8_t *axes, int init, double scale, int layer)
{
    int32_t t = qt_cg_add_tensor(g, name, QT_ROLE_PARAM, QT_F32, ndim, shape, axes);
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
    g->ts[t].param = g->np++;
    return t;
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
    op->t[0] = y;
    op->t[1] = x;
    op->t[2] = w;
    op->a[0] = D->T;
    op->a[1] = wt->shape[0];
    op->a[2] = wt->shape[1];
}

static void rmsnorm(qt_cg_graph *g, int32_t y, int32_t rstd, int32_t x, int32_t w, int64_t rows,
                    int64_t n, int64_t xs, int64_t ys, float eps)
{
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_RMSNORM_FWD);
    op->t[0] = y;
    op->t[1] = rstd;
    op->t[2] = x;
    op->t[3] = w;
    op->a[0] = rows;
    op->a[1] = n;
    op->a[2] = xs;
    op->a[3] = ys;
    op->a[4] = QT_RMSNORM_ZERO_CENTRED;
    op->f[0] = eps;
}

static void add(qt_cg_graph *g, int32_t y, int32_t a, int32_t b)
{
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ADD);
    op->t[0] = y;
    op->t[1] = a;
    op->t[2] = b;
    op->a[0] = g->ts[y].t.numel;
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
    int32_t w_qkvz = proj(g, PN("in_proj_qkvz.weight"), D->Hk * D->G, D->d, QT_LAX_GDN_HEAD,
                          QT_LAX_EMBED, l);
    int32_t w_ba = proj(g, PN("in_proj_ba.weight"), 2 * D->Hv, D->d, QT_LAX_GDN_HEAD,
                        QT_LAX_EMBED, l);
    int32_t w_conv = add_param(g, PN("conv1d.weight"), 3, SHP(D->Cc, 1, D->K), AX(0, 0, 0),
                               QT_INIT_TRUNC_NORMAL, 1.0 / sqrt((double)D->K), l);
    int32_t a_log = add_param(g, PN("A_log"), 1, SHP(D->Hv), AX(0), QT_INIT_LOG_UNIFORM, 0, l);
    int32_t dt_bias = norm_w(g, PN("dt_bias"), D->Hv, QT_INIT_ONES, l);
    int32_t w_norm = norm_w(g, PN("norm.weight"), D->Dv, QT_INIT_ONES, l);
    int32_t w_out = proj(g, PN("out_proj.weight"), D->d, D->Hv * D->Dv, QT_LAX_EMBED,
                         QT_LAX_GDN_HEAD, l);

    const uint8_t kvb = QT_LAX_ACT_KV_BATCH, kvh = QT_LAX_ACT_KV_HEADS;
    int32_t qkvz = qt_cg_add_tensor(g, AN("qkvz"), QT_ROLE_ACT, QT_F32, 4,
                                    SHP(D->b, D->S, D->Hk, D->G), AX(kvb, 0, kvh, 0));
    int32_t ba = qt_cg_add_tensor(g, AN("ba"), QT_ROLE_ACT, QT_F32, 4,
                                  SHP(D->b, D->S, D->Hk, 2 * D->r), AX(kvb, 0, kvh, 0));
    int32_t c = act3(g, AN("conv"), D, D->Cc, kvb, 0, 0);
    int32_t cpre = qt_cg_add_tensor(g, AN("conv_pre"), QT_ROLE_SAVED, QT_F32, 3,
                                    SHP(D->b, D->S, D->Cc), AX(kvb, 0, 0));
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
    matmul(g, qkvz, h, w_qkvz, D);
    matmul(g, ba, h, w_ba, D);
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_GDN_CONV_FWD);
    op->t[0] = c;
    op->t[1] = cpre;
    op->t[2] = qkvz;
    op->t[3] = w_conv;
    int64_t ca[7] = {D->b, D->S, D->Hk, D->Dk, D->Hv, D->Dv, D->K};
    memcpy(op->a, ca, sizeof ca);
    op = qt_cg_emit_op(g, 0, QT_OP_GDN_GATES_FWD);
    op->t[0] = beta;
    op->t[1] = gg;
    op->t[2] = ba;
    op->t[3] = a_log;
    op->t[4] = dt_bias;
    op->a[0] = D->T;
    op->a[1] = D->Hk;
    op->a[2] = D->Hv;
    op = qt_cg_emit_op(g, 0, QT_OP_GDN_CORE_FWD);
    op->t[0] = o;
    op->t[1] = states;
    op->t[2] = rq;
    op->t[3] = rk;
    op->t[4] = c;
    op->t[5] = gg;
    op->t[6] = beta;
    /* a7 selects the algorithm; only the chunked form needs forward scratch (qt_ops.h:
     * 2*C*Dk + 2*C*Dv + 4*C*C + 3*C with C = min(chunk, S)), the recurrent one gets a
     * one-float placeholder so that every slot names a tensor. */
    int64_t chunked = g->s->gdn_chunked, ck = g->s->m.gdn_chunk;
    int64_t ka[8] = {D->b, D->S, D->Hk, D->Dk, D->Hv, D->Dv, ck, chunked};
    memcpy(op->a, ka, sizeof ka);
    snprintf(n, sizeof n, "L%d.gdn.core_fwd_scratch", l);
    op->t[7] = scratch(g, n, chunked ? QT_GDN_CHUNK_FWD_SCRATCH(QT_GDN_CHUNK_ROWS(ck, D->S),
                                                                D->Dk, D->Dv)
                                     : 1);
    op->f[0] = (float)(1.0 / sqrt((double)D->Dk));
    op->f[1] = 1e-6f;
    op = qt_cg_emit_op(g, 0, QT_OP_GATED_RMSNORM_FWD);
    op->t[0] = y;
    op->t[1] = yrstd;
    op->t[2] = o;
    op->t[3] = qkvz;
    op->t[4] = w_norm;
    int64_t na[5] = {D->T, D->Hk, D->Dk, D->Hv, D->Dv};
    memcpy(op->a, na, sizeof na);
    op->f[0] = eps;
    matmul(g, mix, y, w_out, D);
}

static void attn_layer(qt_cg_graph *g, int l, int32_t h, int32_t mix, const qt_cg_dims *D)
{
    char n[256], pre[64];
    float eps = g->s->m.norm_eps;
    snprintf(pre, sizeof pre, "model.layers.%d.self_attn.", l);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "L%d.attn.%s", l, s), n)
    int32_t wq = proj(g, PN("q_proj.weight"), D->Hq * 2 * D->hd, D->d, QT_LAX_Q_HEADS,
                      QT_LAX_EMBED, l);
    int32_t wk = proj(g, PN("k_proj.weight"), D->Hkv * D->hd, D->d, QT_LAX_KV_HEADS,
                      QT_LAX_EMBED, l);
    int32_t wv = proj(g, PN("v_proj.weight"), D->Hkv * D->hd, D->d, QT_LAX_KV_HEADS,
                      QT_LAX_EMBED, l);
    int32_t wo = proj(g, PN("o_proj.weight"), D->d, D->Hq * D->hd, QT_LAX_EMBED, QT_LAX_MLP, l);
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
                         QT_LAX_ACT_EMBED);
#undef PN
#undef AN
    matmul(g, qg, h, wq, D);
    matmul(g, k0, h, wk, D);
    matmul(g, v, h, wv, D);
    rmsnorm(g, qn, qrstd, qg, qn_w, D->T * D->Hq, D->hd, 2 * D->hd, D->hd, eps);
    rmsnorm(g, kn, krstd, k0, kn_w, D->T * D->Hkv, D->hd, D->hd, D->hd, eps);
    int32_t xs[2] = {qn, kn}, ys[2] = {qr, kr};
    int64_t hs[2] = {D->Hq, D->Hkv};
    for (int i = 0; i < 2; i++) {
        qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ROPE_FWD);
        op->t[0] = ys[i];
        op->t[1] = xs[i];
        op->t[2] = g->table;
        int64_t ra[5] = {D->b, D->S, hs[i], D->hd, D->R};
        memcpy(op->a, ra, sizeof ra);
    }
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_ATTN_FWD);
    op->t[0] = att;
    op->t[1] = lse;
    op->t[2] = qr;
    op->t[3] = kr;
    op->t[4] = v;
    snprintf(n, sizeof n, "L%d.attn.fwd_scratch", l);
    op->t[5] = scratch(g, n, D->S);
    int64_t aa[5] = {D->b, D->S, D->Hq, D->Hkv, D->hd};
    memcpy(op->a, aa, sizeof aa);
    op->f[0] = (float)(1.0 / sqrt((double)D->hd));
    op = qt_cg_emit_op(g, 0, QT_OP_SIGMOID_GATE_FWD);
    op->t[0] = gated;
    op->t[1] = att;
    op->t[2] = qg;
    op->a[0] = D->T;
    op->a[1] = D->Hq * D->hd;
    op->a[2] = QT_GATE_HEADS;
    op->a[3] = D->hd;
    matmul(g, mix, gated, wo, D);
}

static void moe_block(qt_cg_graph *g, int l, int32_t h2, int32_t moe, const qt_cg_dims *D)
{
    char n[256], pre[64];
    snprintf(pre, sizeof pre, "model.layers.%d.mlp.", l);
#define PN(s) (snprintf(n, sizeof n, "%s%s", pre, s), n)
#define AN(s) (snprintf(n, sizeof n, "L%d.moe.%s", l, s), n)
    int32_t wr = proj(g, PN("gate.weight"), D->E, D->d, QT_LAX_NONE, QT_LAX_EMBED, l);
    int32_t wgu = add_param(g, PN("experts.gate_up_proj"), 3, SHP(D->E, 2 * D->f, D->d),
                            AX(QT_LAX_EXP, QT_LAX_MLP_MOE, QT_LAX_EMBED_MOE), QT_INIT_TRUNC_NORMAL,
                            1.0 / sqrt((double)D->d), l);
    int32_t wd = add_param(g, PN("experts.down_proj"), 3, SHP(D->E, D->d, D->f),
                           AX(QT_LAX_EXP, QT_LAX_EMBED_MOE, QT_LAX_MLP_MOE), QT_INIT_TRUNC_NORMAL,
                           1.0 / sqrt((double)D->f), l);
    int32_t wsg = proj(g, PN("shared_expert.gate_proj.weight"), D->fs, D->d, QT_LAX_MLP,
                       QT_LAX_EMBED, l);
    int32_t wsu = proj(g, PN("shared_expert.up_proj.weight"), D->fs, D->d, QT_LAX_MLP,
                       QT_LAX_EMBED, l);
    int32_t wsd = proj(g, PN("shared_expert.down_proj.weight"), D->d, D->fs, QT_LAX_EMBED,
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
    int32_t gu = qt_cg_add_tensor(g, AN("expert_gu"), QT_ROLE_SAVED, QT_F32, 4,
                                  SHP(D->b, D->S, D->k, 2 * D->f), AX(B, L, 0, QT_LAX_ACT_MLP));
    /* qt_ops.h: >= max(T*k*(d+f), S*(d+3f)), so one sequence's rows always fit. */
    int64_t escr = D->T * D->k * (D->d + D->f);
    if (D->S * (D->d + 3 * D->f) > escr) escr = D->S * (D->d + 3 * D->f);
    int32_t fscr = scratch(g, AN("expert_fwd_scratch"), escr);
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
    op->t[0] = idx;
    op->t[1] = p;
    op->t[2] = g->lb_seq;
    op->t[3] = rl;
    op->a[0] = D->T;
    op->a[1] = D->E;
    op->a[2] = D->k;
    op->a[3] = D->S;
    if (g->lb_seq != QT_NONE)
        op->f[0] = (float)(g->s->lb_weight * (double)D->E /
                           ((double)g->s->tr.global_batch * (double)g->s->m.n_layers));
    op = qt_cg_emit_op(g, 0, QT_OP_EXPERT_FFN_FWD);
    op->t[0] = ey;
    op->t[1] = gu;
    op->t[2] = h2;
    op->t[3] = idx;
    op->t[4] = wgu;
    op->t[5] = wd;
    op->t[6] = fscr;
    int64_t ea[5] = {D->T, D->k, D->E, D->d, D->f};
    memcpy(op->a, ea, sizeof ea);
    op = qt_cg_emit_op(g, 0, QT_OP_MOE_COMBINE_FWD);
    op->t[0] = routed;
    op->t[1] = p;
    op->t[2] = ey;
    op->a[0] = D->T;
    op->a[1] = D->k;
    op->a[2] = D->d;
    matmul(g, sa, h2, wsg, D);
    matmul(g, su, h2, wsu, D);
    op = qt_cg_emit_op(g, 0, QT_OP_SWIGLU_FWD);
    op->t[0] = sh;
    op->t[1] = sa;
    op->t[2] = su;
    op->a[0] = D->T * D->fs;
    matmul(g, so, sh, wsd, D);
    matmul(g, sg, h2, wsgate, D);
    op = qt_cg_emit_op(g, 0, QT_OP_SIGMOID_GATE_FWD);
    op->t[0] = sgo;
    op->t[1] = so;
    op->t[2] = sg;
    op->a[0] = D->T;
    op->a[1] = D->d;
    op->a[2] = QT_GATE_ROW;
    op->a[3] = 0;
    add(g, moe, routed, sgo);
}

static void dims_of(const qt_cg_settings *s, qt_cg_dims *D)
{
    const qt_model_dims *m = &s->m;
    D->b = s->tr.micro_batch;
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
    g->loss_seq = qt_cg_add_tensor(g, "loss_seq", QT_ROLE_LOSS, QT_F32, 1, SHP(D.b), AX(LB));
    if (s->lb_weight > 0)
        g->lb_seq = qt_cg_add_tensor(g, "lb_seq", QT_ROLE_LOSS, QT_F32, 1, SHP(D.b), AX(LB));
    g->table = qt_cg_add_tensor(g, "rope_table", QT_ROLE_TABLE, QT_F32, 3,
                                SHP(D.S, D.R / 2, 2), AX(0, 0, 0));
    g->ts[g->tokens].whole = g->ts[g->targets].whole = g->ts[g->loss_seq].whole = 1;
    g->ts[g->table].whole = 1;
    if (g->lb_seq != QT_NONE) g->ts[g->lb_seq].whole = 1;

    qt_op *op = qt_cg_emit_op(g, 1, QT_OP_ROPE_TABLE);
    op->t[0] = g->table;
    op->a[0] = D.S;
    op->a[1] = D.R;
    op->f[0] = s->m.rope_theta;

    if (g->lb_seq != QT_NONE) {
        op = qt_cg_emit_op(g, 0, QT_OP_ZERO);
        op->t[0] = g->lb_seq;
        op->a[0] = D.b;
    }
    int32_t w_emb = add_param(g, "model.embed_tokens.weight", 2, SHP(D.V, D.d),
                              AX(QT_LAX_VOCAB, QT_LAX_EMBED_VOCAB), QT_INIT_NORMAL, 1.0, -1);
    int32_t x = act3(g, "x0", &D, D.d, LB, L, QT_LAX_ACT_EMBED);
    op = qt_cg_emit_op(g, 0, QT_OP_EMBED_FWD);
    op->t[0] = x;
    op->t[1] = g->tokens;
    op->t[2] = w_emb;
    op->a[0] = D.T;
    op->a[1] = D.d;
    op->a[2] = D.V;

    char n[256];
    for (int l = 0; l < (int)s->m.n_layers; l++) {
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
    rmsnorm(g, hf, hfr, x, w_fn, D.T, D.d, D.d, D.d, s->m.norm_eps);
    matmul(g, logits, hf, w_head, &D);
    op = qt_cg_emit_op(g, 0, QT_OP_XENT);
    op->t[0] = g->loss_seq;
    op->t[1] = dlogits;
    op->t[2] = logits;
    op->t[3] = g->targets;
    op->a[0] = D.b;
    op->a[1] = D.S;
    op->a[2] = D.V;
    g->n_fwd = g->nmb;
    if (g->too_big)
        return qt_cg_fail(err, errlen, "tensor %s: its shape has more than 2^56 elements, "
                          "where 64-bit sizes would overflow; expected smaller model or batch "
                          "sizes", g->too_big);
    return 0;
}

void qt_cg_graph_free(qt_cg_graph *g)
{
    for (int i = 0; i < g->nt; i++) free((char *)g->ts[i].t.name);
    free(g->ts);
    free(g->ps);
    free(g->init);
    free(g->mb);
    memset(g, 0, sizeof *g);
}
