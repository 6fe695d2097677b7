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
 * Invariants: with C = 1 nothing here emits an op or changes a tensor (every plan without a
 * context axis keeps its bytes); the exchanges are pure permutations (no arithmetic).
 */
#include <stdio.h>
#include "core/qt_cg.h"
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
