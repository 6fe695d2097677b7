/* model/context.c - context parallelism in the step graph (docs/context.md): the head
 * exchanges around the sequence mixers, the head side's layouts, and the mixers' own
 * parameters, which the head side holds by heads.
 *
 * With a context degree C > 1 every per-token op runs on this rank's S/C tokens of each
 * sequence (its token block), and each sequence mixer (the GDN convolution, gates, delta
 * rule and gated norm; attention's rotary positions and core) runs on whole sequences of
 * 1/C of this tensor rank's heads: CTX_TO_HEADS before it, CTX_TO_TOKENS after it
 * (qt_ops.def; their backward kinds in autodiff.c). Group index c of the context group
 * holds tokens [c*S/C, (c+1)*S/C) and heads [c*H/C, (c+1)*H/C) of the tensor rank's H, so
 * with the tensor axis before context in rank order a rank's heads are the global heads
 * (t*C + c)*H/C .. : the order in which the mixers' parameters are split.
 * Attention with query heads that do not divide by C (or kv heads neither a multiple nor a
 * divisor of it) owns its heads unevenly (issue 35): units of one kv head with its query
 * heads, member c owning units [c*U/C, (c+1)*U/C) of the tensor rank's U kv heads and
 * ceil(U/C) unit slots on every head side, the last ones zero padding (cp_pack.h, u > 0);
 * attention has no weights on the head side, so nothing else changes.
 * The GDN layers' heads likewise when tensor x context does not divide the key heads, the
 * norm's canonical head groups or gdn_value_head_dim (qt_cg_ctx_gdn_uneven): units of key
 * heads with their value heads and whole canonical groups; their weights (conv1d.weight,
 * A_log, dt_bias) stay whole over context, the head side reads its units through a padded
 * copy (CTX_OWN_UNITS) and the weight gradients are completed over the group in the WGRAD
 * (qt_ops.def *_WGRAD_U).
 * Invariants: with C = 1 nothing here emits an op or changes a tensor (every plan without a
 * context axis keeps its bytes); the exchanges are pure permutations (no arithmetic).
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "mesh/qt_cg_mesh.h"
#include "model/qt_cg_model.h"
#include "../../firmware/parallel/cp_pack.h"

#define QT_CG_HEAD_SIDE                                                                    \
    "the head exchange (context parallelism, docs/context.md): the sequence mixers hold "  \
    "whole sequences of 1/C of the heads, the heads split over tensor x context"

int qt_cg_ctx_attn_uneven(const qt_cg_settings *s, int64_t *slots)
{
    const int64_t C = qt_cg_context(s), tp = s->mesh[QT_MESH_TENSOR];
    const int64_t hq = s->m.n_q_heads / tp, kv = s->m.n_kv_heads / tp;
    *slots = 0;
    if (C <= 1 || (hq % C == 0 && (kv % C == 0 || C % kv == 0))) return 0;
    *slots = (kv + C - 1) / C;
    return 1;
}

void qt_cg_ctx_exchange(qt_cg_graph *g, int kind, int32_t y, int32_t x, int64_t b, int64_t S,
                        int64_t G, int64_t w, int64_t u)
{
    const int64_t C = qt_cg_context(g->s);
    char n[300];
    snprintf(n, sizeof n, "%s.exchange_scratch", g->ts[y].t.name);
    const int64_t nscr = QT_CP_SCRATCH_FLOATS_U(b, S, G, w, C, u);
    const int32_t scr = qt_cg_add_tensor(g, n, QT_ROLE_SCRATCH, QT_F32, 1,
                                         (const int64_t[]){nscr}, (const uint8_t[]){0});
    qt_op *op = qt_cg_emit_op(g, 0, kind);
    QT_CG_SET_T(op, CTX_TO_HEADS, .y = y, .x = x, .scratch = scr);
    QT_CG_SET_A(op, CTX_TO_HEADS, .b = b, .S = S, .G = G, .w = w,
                .mask = qt_cg_context_mask(g->s), .C = C, .u = u);
}

void qt_cg_ctx_head_side(qt_cg_graph *g, int32_t t, int head_dim, int len_dim)
{
    qt_cg_tensor *ct = &g->ts[t];
    ct->exec[head_dim] |= qt_cg_context_mask(g->s);
    if (len_dim >= 0) ct->exec[len_dim] = 0;
    ct->reshard = QT_CG_HEAD_SIDE;
}

void qt_cg_ctx_split_param(qt_cg_graph *g, int32_t t, int dim)
{
    const int64_t C = qt_cg_context(g->s);
    qt_tensor *pt = &g->ts[t].t;
    pt->spec[dim] |= qt_cg_context_mask(g->s);
    pt->shape[dim] /= C;
    pt->numel /= C;
    qt_param *p = &g->ps[g->ts[t].param];
    p->numel = pt->numel;
    /* the head side computes every token block of its heads: all the leaves */
    p->leaves *= C;
}

void qt_cg_ctx_complete_param(qt_cg_graph *g, int32_t t)
{
    g->ts[t].grad_done = qt_cg_context_mask(g->s);
    g->ps[g->ts[t].param].leaves *= qt_cg_context(g->s);
}

int qt_cg_ctx_gdn_uneven(const qt_cg_settings *s, qt_cg_gdn_units *u)
{
    const qt_model_dims *m = &s->m;
    const int64_t C = qt_cg_context(s), tp = s->mesh[QT_MESH_TENSOR], tc = tp * C;
    memset(u, 0, sizeof *u);
    if (C <= 1 || m->gdn_k_heads < 1 || m->gdn_v_heads < 1) return 0;
    const int64_t G = qt_cg_canon(s, m->gdn_v_heads);
    if (m->gdn_k_heads % tc == 0 && G % tc == 0 && m->gdn_v_dim % tc == 0) return 0;
    /* a unit: the fewest key heads whose value heads are whole canonical groups */
    const int64_t r = m->gdn_v_heads / m->gdn_k_heads, hpg = m->gdn_v_heads / G,
                  l = hpg / qt_cg_gcd(hpg, r) * r;
    u->uk = l / r;
    u->U = m->gdn_k_heads / tp / u->uk;
    u->slots = (u->U + C - 1) / C;
    u->gpu = l / hpg;
    u->groups = G;
    return 1;
}

int32_t qt_cg_ctx_own_units(qt_cg_graph *g, const char *name, int32_t p, int64_t U,
                            const int64_t w[3])
{
    const int64_t C = qt_cg_context(g->s), L = (U + C - 1) / C;
    const int64_t n = L * (w[0] + w[1] + w[2]);
    const int32_t y = qt_cg_add_tensor(g, name, QT_ROLE_ACT, QT_F32, 1, (const int64_t[]){n},
                                       (const uint8_t[]){0});
    qt_cg_ctx_head_side(g, y, 0, -1);
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_CTX_OWN_UNITS);
    QT_CG_SET_T(op, CTX_OWN_UNITS, .y = y, .x = p);
    QT_CG_SET_A(op, CTX_OWN_UNITS, .U = U, .mask = qt_cg_context_mask(g->s), .C = C,
                .w0 = w[0], .w1 = w[1], .w2 = w[2]);
    return y;
}

int32_t qt_cg_ctx_units_source(const qt_cg_graph *g, int32_t t, int64_t *U)
{
    for (int i = 0; i < g->nmb; i++)
        if (g->mb[i].kind == QT_OP_CTX_OWN_UNITS && QT_T(&g->mb[i], CTX_OWN_UNITS, y) == t) {
            *U = QT_A(&g->mb[i], CTX_OWN_UNITS, U);
            return QT_T(&g->mb[i], CTX_OWN_UNITS, x);
        }
    return QT_NONE;
}
