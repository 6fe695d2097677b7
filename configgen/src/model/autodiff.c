/* model/autodiff.c - reverse-mode differentiation of the forward microbatch graph.
 *
 * Walks the forward ops backwards and emits each op's backward per qt_ops.h. Invariants:
 *  - every activation-gradient buffer gets a ZERO op immediately before its first writer,
 *    because every backward kernel accumulates (+=); fan-out is summed by accumulation;
 *  - XENT (XENT_MTP with the MTP head) already wrote d.logits (the seed), so it has no
 *    backward op;
 *  - integer tensors (tokens, idx) and tables get no gradient;
 *  - each parameter gets exactly one WGRAD op (QT_OPF_WGRAD, parameter indices in
 *    a[QT_A_WGRAD_PARAM] and the next, that one -1 when the op has one parameter), which
 *    the runtime runs once per sequence; rows per sequence go in the attribute qt_ops.h
 *    names for the kind. A parameter that several forward ops read (the MTP head's fc and
 *    norms, shared by its depths: graph.c mtp_head; only RMSNORM_FWD and MATMUL_FWD) gets
 *    one WGRAD too, after the backward reaches its first reader: it reads the readers'
 *    dy, x (and rstd) STACKed per leaf in forward order (qt_ops.def STACK), so a leaf's rows
 *    are its token block's rows of depth 1, then of depth 2, ...: one fixed order on every
 *    mesh, as the shared lm_head's leaf (a plan whose parameters each have one reader is
 *    built exactly as before);
 *  - what a backward reads from the forward (x, rstd, pre, states, lse, gu, ...) is named
 *    in its slots, so the liveness planner keeps those tensors alive up to that op.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../firmware/parallel/ep_rounds.h"
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "model/qt_cg_model.h"
#include "../../firmware/kernels/gdn_core.h"
#include "../../firmware/kernels/gdn_chunk.h"
#include "../../firmware/kernels/attention.h"
#include "../../firmware/kernels/matmul_canon.h"

/* A parameter's forward readers (more than one: the MTP head's shared fc and norms). */
#define QT_CG_SHARED_MAX 8
typedef struct qt_cg_shared {
    int n;                           /* forward ops reading the parameter */
    int seen;                        /* of them differentiated so far (the last one first) */
    int32_t dy[QT_CG_SHARED_MAX];    /* per reader, in forward order: its output gradient, */
    int32_t x[QT_CG_SHARED_MAX];     /* its input, */
    int32_t rstd[QT_CG_SHARED_MAX];  /* its saved rstd (RMSNORM_FWD), else QT_NONE */
} qt_cg_shared;

typedef struct qt_cg_ad {
    qt_cg_graph *g;
    int32_t *grad;             /* forward tensor id -> gradient tensor id or QT_NONE */
    int n;
    char *err;
    size_t errlen;
    int failed;
    qt_cg_shared *sh;          /* per parameter index: its readers */
} qt_cg_ad;

static int needs_grad(const qt_cg_ad *ad, int32_t t)
{
    const qt_tensor *x = &ad->g->ts[t].t;
    return x->role == QT_ROLE_ACT && x->dtype == QT_F32;
}

/* Gradient buffer of forward tensor x, created (and zeroed) on first use. */
static int32_t dgrad(qt_cg_ad *ad, int32_t x)
{
    if (ad->grad[x] != QT_NONE) return ad->grad[x];
    qt_cg_graph *g = ad->g;
    char name[300];
    snprintf(name, sizeof name, "d.%s", g->ts[x].t.name);
    qt_tensor src = g->ts[x].t; /* copy: add_tensor may move the array */
    int32_t d = qt_cg_add_tensor(g, name, QT_ROLE_ACT_GRAD, QT_F32, src.ndim, src.shape,
                                 src.axes);
    /* a gradient is held as its tensor is, under the same layer declaration */
    memcpy(g->ts[d].exec, g->ts[x].exec, sizeof g->ts[d].exec);
    g->ts[d].reshard = g->ts[x].reshard;
    qt_op *z = qt_cg_emit_op(g, 0, QT_OP_ZERO);
    QT_T(z, ZERO, x) = d;
    QT_A(z, ZERO, n) = src.numel;
    ad->grad[x] = d;
    return d;
}

/* Gradient of a forward output; it must exist because every consumer ran first. */
static int32_t dout(qt_cg_ad *ad, int32_t y)
{
    if (ad->grad[y] == QT_NONE && !ad->failed) {
        ad->failed = 1;
        qt_cg_fail(ad->err, ad->errlen, "internal error: no gradient reaches '%s'",
                   ad->g->ts[y].t.name);
    }
    return ad->grad[y];
}

static int pidx(const qt_cg_ad *ad, int32_t t)
{
    return ad->g->ts[t].param;
}

/* Sets op->t[0..n) from vals: one line per op keeps each backward's slot list readable
 * next to qt_ops.h. */
static void put_slots(qt_op *op, const int32_t *vals, int n)
{
    for (int k = 0; k < n; k++) op->t[k] = vals[k];
}

/* Slot s / attribute a of the forward op f being differentiated, of kind QT_OP_<e>_FWD. */
#define FT(e, s) QT_T(f, e##_FWD, s)
#define FA(e, a) QT_A(f, e##_FWD, a)

static qt_op *wgrad(qt_cg_ad *ad, int kind, const qt_op *f, int32_t p0, int32_t p1)
{
    qt_op *op = qt_cg_emit_op(ad->g, 0, kind);
    memcpy(op->a, f->a, sizeof op->a);
    memcpy(op->f, f->f, sizeof op->f);
    op->flags = QT_OPF_WGRAD;
    op->a[QT_A_WGRAD_PARAM] = pidx(ad, p0);
    op->a[QT_A_WGRAD_PARAM + 1] = p1 == QT_NONE ? -1 : pidx(ad, p1);
    return op;
}

static qt_op *bwd(qt_cg_ad *ad, int kind, const qt_op *f)
{
    qt_op *op = qt_cg_emit_op(ad->g, 0, kind);
    memcpy(op->a, f->a, sizeof op->a);
    memcpy(op->f, f->f, sizeof op->f);
    return op;
}

static int32_t bwd_scratch(qt_cg_ad *ad, const char *what, const char *of, int64_t n)
{
    char name[300];
    snprintf(name, sizeof name, "%s.%s", of, what);
    return qt_cg_add_tensor(ad->g, name, QT_ROLE_SCRATCH, QT_F32, 1, (const int64_t[]){n},
                            (const uint8_t[]){0});
}

/* The WGRAD leaves of one microbatch on this rank (its token blocks: qt_ops.h). */
static int64_t leaves_mb(const qt_cg_graph *g)
{
    return g->s->tr.micro_batch * qt_cg_blocks(g->s) / qt_cg_context(g->s);
}

/* The n tensors parts[] (each [b, S, ...]: one per reader of a shared parameter, in
 * forward order) STACKed per WGRAD leaf into a new tensor "<name of part 0>.stacked" of
 * role `role` (ACT_GRAD: the compute dtype; SAVED: fp32, the rstd), held as part 0 is;
 * returns its id. */
static int32_t stack_parts(qt_cg_ad *ad, const int32_t *parts, int n, int role)
{
    qt_cg_graph *g = ad->g;
    const qt_tensor src = g->ts[parts[0]].t; /* copy: add_tensor may move the array */
    int64_t shp[QT_MAX_DIMS];
    memcpy(shp, src.shape, sizeof shp);
    shp[1] *= n;
    char name[300];
    snprintf(name, sizeof name, "%s.stacked", src.name);
    const int32_t y = qt_cg_add_tensor(g, name, role, QT_F32, src.ndim, shp, src.axes);
    memcpy(g->ts[y].exec, g->ts[parts[0]].exec, sizeof g->ts[y].exec);
    g->ts[y].reshard = g->ts[parts[0]].reshard;
    const int64_t nb = leaves_mb(g), rows = qt_cg_leaf_tokens(g->s);
    qt_op *op = qt_cg_emit_op(g, 0, QT_OP_STACK);
    QT_T(op, STACK, y) = y;
    for (int j = 0; j < n; j++) op->t[QT_T_STACK_x0 + j] = parts[j];
    QT_CG_SET_A(op, STACK, .nb = nb, .rows = rows, .w = src.numel / (nb * rows), .n = n);
    return y;
}

/* Forward op f reads the shared parameter w (RMSNORM_FWD, MATMUL_FWD) with output gradient
 * dy, input x and rstd (QT_NONE for a matmul): records them; returns 1 when the WGRAD
 * waits for an earlier reader, 0 when f is the parameter's only or first reader and its
 * WGRAD is emitted now (the caller's, over the stacked rows when there are several). */
static int shared_wait(qt_cg_ad *ad, int32_t w, int32_t dy, int32_t x, int32_t rstd)
{
    qt_cg_shared *sh = &ad->sh[pidx(ad, w)];
    if (sh->n < 2) return 0;
    const int k = sh->n - 1 - sh->seen++;
    sh->dy[k] = dy;
    sh->x[k] = x;
    sh->rstd[k] = rstd;
    return k > 0;
}

/* The stacked operands of shared parameter w's WGRAD (after shared_wait returned 0): sets
 * *dy, *x, *rstd (rstd only when given) and returns the readers' count (1: unchanged). */
static int shared_stack(qt_cg_ad *ad, int32_t w, int32_t *dy, int32_t *x, int32_t *rstd)
{
    qt_cg_shared *sh = &ad->sh[pidx(ad, w)];
    if (sh->n < 2) return 1;
    *dy = stack_parts(ad, sh->dy, sh->n, QT_ROLE_ACT_GRAD);
    *x = stack_parts(ad, sh->x, sh->n, QT_ROLE_ACT_GRAD);
    if (rstd) *rstd = stack_parts(ad, sh->rstd, sh->n, QT_ROLE_SAVED);
    return sh->n;
}

/* Dense ops, norms, projections and elementwise gates; 0 when f is of another family. */
static int backward_dense(qt_cg_ad *ad, const qt_op *f)
{
    qt_cg_graph *g = ad->g;
    qt_op *op;
    /* S: this rank's tokens of a sequence (all of them but under context parallelism);
     * Sb: the tokens of one WGRAD leaf (a canonical token block) */
    const int64_t S = g->s->tr.seq_len / qt_cg_context(g->s), Sb = qt_cg_leaf_tokens(g->s);
    switch (f->kind) {
    case QT_OP_ADD: {
        int32_t dy = dout(ad, QT_T(f, ADD, y));
        for (int i = 1; i <= 2; i++) {
            if (!needs_grad(ad, f->t[i])) continue;
            int32_t dx = dgrad(ad, f->t[i]);
            op = qt_cg_emit_op(g, 0, QT_OP_ACC);
            QT_CG_SET_T(op, ACC, .dst = dx, .src = dy);
            QT_A(op, ACC, n) = QT_A(f, ADD, n);
        }
        return 1;
    }
    case QT_OP_EMBED_FWD:
        op = wgrad(ad, QT_OP_EMBED_WGRAD, f, FT(EMBED, w), QT_NONE);
        QT_CG_SET_T(op, EMBED_WGRAD, .dx = dout(ad, FT(EMBED, x)), .tokens = FT(EMBED, tokens),
                    .w = FT(EMBED, w));
        /* the tokens of a leaf: one block, or with the MTP head its parts stacked (graph.c) */
        QT_A(op, EMBED_WGRAD, S) = FA(EMBED, T) / leaves_mb(g);
        return 1;
    case QT_OP_RMSNORM_FWD: {
        int32_t dy = dout(ad, FT(RMSNORM, y));
        int32_t dx = dgrad(ad, FT(RMSNORM, x));
        op = bwd(ad, QT_OP_RMSNORM_BWD, f);
        QT_CG_SET_T(op, RMSNORM_BWD, .dx = dx, .dy = dy, .x = FT(RMSNORM, x), .w = FT(RMSNORM, w),
                    .rstd = FT(RMSNORM, rstd));
        int32_t wx = FT(RMSNORM, x), wr = FT(RMSNORM, rstd);
        if (shared_wait(ad, FT(RMSNORM, w), dy, wx, wr)) return 1;
        const int nr = shared_stack(ad, FT(RMSNORM, w), &dy, &wx, &wr);
        op = wgrad(ad, QT_OP_RMSNORM_WGRAD, f, FT(RMSNORM, w), QT_NONE);
        QT_CG_SET_T(op, RMSNORM_WGRAD, .dy = dy, .x = wx, .rstd = wr, .w = FT(RMSNORM, w));
        /* rows per leaf: the block's tokens times rows per token (heads for q/k norms),
         * times the readers of a shared weight (their rows stacked per leaf) */
        const int64_t heads = FA(RMSNORM, R) / (g->s->tr.micro_batch * S);
        QT_A(op, RMSNORM_WGRAD, seq_rows) = Sb * heads * nr;
        QT_A(op, RMSNORM_WGRAD, R) = FA(RMSNORM, R) * nr;
        /* a per-head norm sums over heads (split by tensor parallelism): canonical head
         * groups of the global head count, this rank's share (qt_ops.def RMSNORM_WGRAD) */
        /* heads: the global heads of a per-head norm (graph.c), 0 for the others */
        const int64_t tp = g->s->mesh[QT_MESH_TENSOR];
        QT_A(op, RMSNORM_WGRAD, heads) =
            FA(RMSNORM, heads) > 1 ? qt_cg_canon(g->s, FA(RMSNORM, heads)) / tp : 0;
        return 1;
    }
    case QT_OP_MATMUL_FWD: {
        int32_t dy = dout(ad, FT(MATMUL, y));
        if (needs_grad(ad, FT(MATMUL, x))) {
            int32_t dx = dgrad(ad, FT(MATMUL, x));
            op = bwd(ad, QT_OP_MATMUL_BWD_DATA, f);
            QT_CG_SET_T(op, MATMUL_BWD_DATA, .dx = dx, .dy = dy, .w = FT(MATMUL, w),
                        .scratch = QT_NONE);
            /* a column-parallel projection's data gradient contracts over the split output
             * features: canonically blocked (bwd_nb blocks, graph's matmul_col) */
            QT_A(op, MATMUL_BWD_DATA, nb) = FA(MATMUL, bwd_nb);
            QT_A(op, MATMUL_BWD_DATA, segs) = FA(MATMUL, bwd_nb) > 0 ? 1 : 0;
            const qt_tensor *wt = &g->ts[FT(MATMUL, w)].t;
            QT_A(op, MATMUL_BWD_DATA, mask) =
                FA(MATMUL, bwd_nb) > 0 && wt->shape[0] != wt->global_shape[0]
                    ? (int64_t)(1u << QT_MESH_TENSOR)
                    : 0;
            op->a[QT_A_MATMUL_FWD_bwd_nb] = 0; /* the forward's, copied by bwd() */
            /* the vocab-parallel lm_head with one block a rank needs only the total (the
             * kernel's nb = nseg = 1 form: kernels/matmul_canon.h) */
            const int one = FT(MATMUL, w) == g->head_w && FA(MATMUL, bwd_nb) == 1;
            if (FA(MATMUL, bwd_nb) > 0)
                QT_T(op, MATMUL_BWD_DATA, scratch) = bwd_scratch(
                    ad, "canon_scratch", g->ts[dx].t.name,
                    one ? FA(MATMUL, M) * FA(MATMUL, K)
                        : QT_CANON_BWD_SCRATCH(FA(MATMUL, M), FA(MATMUL, N), FA(MATMUL, K),
                                               FA(MATMUL, bwd_nb)));
        }
        int32_t wx = FT(MATMUL, x);
        if (shared_wait(ad, FT(MATMUL, w), dy, wx, QT_NONE)) return 1;
        const int nr = shared_stack(ad, FT(MATMUL, w), &dy, &wx, NULL);
        op = wgrad(ad, QT_OP_MATMUL_WGRAD, f, FT(MATMUL, w), QT_NONE);
        QT_CG_SET_T(op, MATMUL_WGRAD, .dy = dy, .x = wx, .w = FT(MATMUL, w));
        /* the lm_head's rows stack the MTP head's parts per block (graph.c); a shared
         * weight's readers' rows are stacked per leaf */
        QT_A(op, MATMUL_WGRAD, seq_rows) =
            FT(MATMUL, w) == g->head_w ? FA(MATMUL, M) / leaves_mb(g) : Sb * nr;
        QT_A(op, MATMUL_WGRAD, M) = FA(MATMUL, M) * nr;
        /* the forward's blocking, copied by wgrad() */
        op->a[QT_A_MATMUL_FWD_segs] = op->a[QT_A_MATMUL_FWD_mask] = 0;
        op->a[QT_A_MATMUL_FWD_bwd_nb] = 0;
        return 1;
    }
    case QT_OP_SWIGLU_FWD:
    case QT_OP_SIGMOID_GATE_FWD:
    case QT_OP_MOE_COMBINE_FWD: {
        int32_t dy = dout(ad, f->t[0]);
        int32_t d1 = dgrad(ad, f->t[1]);
        int32_t d2 = dgrad(ad, f->t[2]);
        int kind = f->kind == QT_OP_SWIGLU_FWD ? QT_OP_SWIGLU_BWD
                   : f->kind == QT_OP_SIGMOID_GATE_FWD ? QT_OP_SIGMOID_GATE_BWD
                                                       : QT_OP_MOE_COMBINE_BWD;
        op = bwd(ad, kind, f);
        put_slots(op, (const int32_t[]){d1, d2, dy, f->t[1], f->t[2]}, 5);
        /* token dropping: the backward skips the dropped slots too */
        if (kind == QT_OP_MOE_COMBINE_BWD)
            QT_T(op, MOE_COMBINE_BWD, kidx) = QT_T(f, MOE_COMBINE_FWD, kidx);
        return 1;
    }
    case QT_OP_ROPE_FWD: {
        int32_t dy = dout(ad, FT(ROPE, y));
        int32_t dx = dgrad(ad, FT(ROPE, x));
        op = bwd(ad, QT_OP_ROPE_BWD, f);
        QT_CG_SET_T(op, ROPE_BWD, .dx = dx, .dy = dy, .table = FT(ROPE, table));
        return 1;
    }
    default:
        return 0;
    }
}

/* The MTP head's stacking kinds (qt_ops.def STACK, SPLIT): each one's backward is the
 * other's accumulating form; 0 when f is of another kind. */
static int backward_stack(qt_cg_ad *ad, const qt_op *f)
{
    qt_op *op;
    switch (f->kind) {
    case QT_OP_STACK: {
        /* the parts' gradient buffers first: dgrad emits their ZERO ops */
        int32_t dx[8];
        for (int64_t j = 0; j < QT_A(f, STACK, n); j++) {
            const int32_t x = f->t[QT_T_STACK_x0 + j];
            dx[j] = needs_grad(ad, x) ? dgrad(ad, x) : QT_NONE;
        }
        const int32_t dy = dout(ad, QT_T(f, STACK, y));
        op = bwd(ad, QT_OP_STACK_BWD, f);
        QT_T(op, STACK_BWD, dy) = dy;
        for (int64_t j = 0; j < QT_A(f, STACK, n); j++) op->t[QT_T_STACK_BWD_dx0 + j] = dx[j];
        return 1;
    }
    case QT_OP_SPLIT: {
        int32_t dx[8] = {0};
        for (int64_t j = 0; j < QT_A(f, SPLIT, n); j++) dx[j] = dout(ad, f->t[QT_T_SPLIT_x0 + j]);
        const int32_t dy = dgrad(ad, QT_T(f, SPLIT, y));
        op = bwd(ad, QT_OP_SPLIT_BWD, f);
        QT_T(op, SPLIT_BWD, dy) = dy;
        for (int64_t j = 0; j < QT_A(f, SPLIT, n); j++) op->t[QT_T_SPLIT_BWD_dx0 + j] = dx[j];
        return 1;
    }
    default:
        return 0;
    }
}

/* A WGRAD op of a mixer's head side: under context parallelism it computes every token
 * block of its sequences (whole sequences of its heads), not this rank's share of them. */
static void head_side_leaves(const qt_cg_graph *g, qt_op *op)
{
    if (qt_cg_context(g->s) > 1)
        op->a[QT_A_WGRAD_SEQS] = g->s->tr.micro_batch * qt_cg_blocks(g->s);
}

/* The head exchange's backward: each direction's gradient goes back the other way, added
 * into the source's gradient (qt_ops.def CTX_*_BWD). */
static void backward_exchange(qt_cg_ad *ad, const qt_op *f)
{
    qt_cg_graph *g = ad->g;
    const int32_t dy = dout(ad, QT_T(f, CTX_TO_HEADS, y));
    const int32_t dx = dgrad(ad, QT_T(f, CTX_TO_HEADS, x));
    const int32_t scr = bwd_scratch(ad, "exchange_scratch", g->ts[dx].t.name,
                                    g->ts[QT_T(f, CTX_TO_HEADS, scratch)].t.numel);
    qt_op *op = bwd(ad, f->kind == QT_OP_CTX_TO_HEADS ? QT_OP_CTX_TO_HEADS_BWD
                                                      : QT_OP_CTX_TO_TOKENS_BWD, f);
    QT_CG_SET_T(op, CTX_TO_HEADS_BWD, .dx = dx, .dy = dy, .scratch = scr);
}

/* The GDN weight gradients when the heads are owned unevenly over context (model/context.c):
 * the own units' leaf, completed over the group in the WGRAD (qt_ops.def GDN_CONV_WGRAD_U,
 * GDN_GATES_WGRAD_U: the context ranks' rows all-gathered and placed by owner, the
 * parameters whole over context, read through their CTX_OWN_UNITS copies;
 * GATED_RMSNORM_WGRAD_U: every canonical group's partial gathered over tensor x context,
 * the one-rank tree). d is dc, dg or dy of forward op f. Returns 0 (nothing emitted) on an
 * even split. */
static int wgrad_units(qt_cg_ad *ad, const qt_op *f, int32_t d)
{
    qt_cg_graph *g = ad->g;
    const int64_t C = qt_cg_context(g->s), Sb = qt_cg_leaf_tokens(g->s);
    qt_cg_gdn_units gu;
    if (C <= 1 || !qt_cg_ctx_gdn_uneven(g->s, &gu)) return 0;
    qt_op *op;
    int64_t U = 0;
    if (f->kind == QT_OP_GDN_CONV_FWD) {
        const int32_t pw = qt_cg_ctx_units_source(g, FT(GDN_CONV, w), &U);
        const int32_t scr = bwd_scratch(ad, "units_scratch", g->ts[pw].t.name,
                                        C * g->ts[FT(GDN_CONV, w)].t.numel);
        op = wgrad(ad, QT_OP_GDN_CONV_WGRAD_U, f, pw, QT_NONE);
        QT_CG_SET_T(op, GDN_CONV_WGRAD_U, .dc = d, .pre = FT(GDN_CONV, pre),
                    .qkvz = FT(GDN_CONV, qkvz), .w = pw, .scratch = scr);
        QT_A(op, GDN_CONV_WGRAD_U, U) = U;
    } else if (f->kind == QT_OP_GDN_GATES_FWD) {
        const int32_t pa = qt_cg_ctx_units_source(g, FT(GDN_GATES, A_log), &U),
                      pd = qt_cg_ctx_units_source(g, FT(GDN_GATES, dt_bias), &U);
        const int32_t scr = bwd_scratch(ad, "units_scratch", g->ts[pa].t.name,
                                        2 * C * g->ts[FT(GDN_GATES, A_log)].t.numel);
        op = wgrad(ad, QT_OP_GDN_GATES_WGRAD_U, f, pa, pd);
        QT_CG_SET_T(op, GDN_GATES_WGRAD_U, .dg = d, .ba = FT(GDN_GATES, ba), .A_log = pa,
                    .dt_bias = pd, .A_log_h = FT(GDN_GATES, A_log),
                    .dt_bias_h = FT(GDN_GATES, dt_bias), .scratch = scr);
        QT_A(op, GDN_GATES_WGRAD_U, S) = Sb;
        QT_A(op, GDN_GATES_WGRAD_U, U) = U;
    } else {
        const int64_t G = gu.slots * gu.gpu;
        const int32_t scr = bwd_scratch(ad, "units_scratch", g->ts[FT(GATED_RMSNORM, w)].t.name,
                                        g->s->mesh[QT_MESH_TENSOR] * C * G * FA(GATED_RMSNORM, Dv));
        op = wgrad(ad, QT_OP_GATED_RMSNORM_WGRAD_U, f, FT(GATED_RMSNORM, w), QT_NONE);
        QT_CG_SET_T(op, GATED_RMSNORM_WGRAD_U, .dy = d, .o = FT(GATED_RMSNORM, o),
                    .qkvz = FT(GATED_RMSNORM, qkvz), .rstd = FT(GATED_RMSNORM, rstd),
                    .w = FT(GATED_RMSNORM, w), .scratch = scr);
        QT_A(op, GATED_RMSNORM_WGRAD_U, U) = gu.U;
        QT_A(op, GATED_RMSNORM_WGRAD_U, S) = Sb;
        QT_A(op, GATED_RMSNORM_WGRAD_U, groups) = G;
    }
    head_side_leaves(g, op);
    return 1;
}

/* The sequence mixers: full attention and the Gated DeltaNet ops. */
static int backward_mixers(qt_cg_ad *ad, const qt_op *f)
{
    qt_cg_graph *g = ad->g;
    qt_op *op;
    const int64_t S = g->s->tr.seq_len, Sb = qt_cg_leaf_tokens(g->s);
    switch (f->kind) {
    case QT_OP_CTX_TO_HEADS:
    case QT_OP_CTX_TO_TOKENS:
        backward_exchange(ad, f);
        return 1;
    case QT_OP_ATTN_FWD: {
        int32_t dO = dout(ad, FT(ATTN, o));
        int32_t dq = dgrad(ad, FT(ATTN, q)), dk = dgrad(ad, FT(ATTN, k)),
                dv = dgrad(ad, FT(ATTN, v));
        int32_t scr =
            bwd_scratch(ad, "bwd_scratch", g->ts[FT(ATTN, o)].t.name, QT_ATTN_BWD_SCRATCH(S));
        /* kv heads shared by a chain of context ranks: each continues the previous one's
         * dk and dv sums (qt_ops.def CTX_CHAIN_*) */
        /* (not when the heads are owned unevenly: each kv head then lives on one rank) */
        int64_t kslots;
        const int64_t C = qt_cg_context(g->s),
                      kv = g->s->m.n_kv_heads / g->s->mesh[QT_MESH_TENSOR];
        const int uneven = qt_cg_ctx_attn_uneven(g->s, &kslots);
        const qt_cg_a_CTX_CHAIN_RECV chain = {.n = g->ts[dk].t.numel,
                                              .mask = qt_cg_context_mask(g->s),
                                              .rho = !uneven && kv < C ? C / kv : 1};
        if (chain.rho > 1) {
            op = qt_cg_emit_op(g, 0, QT_OP_CTX_CHAIN_RECV);
            QT_CG_SET_T(op, CTX_CHAIN_RECV, .dk = dk, .dv = dv);
            memcpy(op->a, &chain, sizeof chain);
        }
        op = bwd(ad, QT_OP_ATTN_BWD, f);
        QT_CG_SET_T(op, ATTN_BWD, .dq = dq, .dk = dk, .dv = dv, .dout = dO, .q = FT(ATTN, q),
                    .k = FT(ATTN, k), .v = FT(ATTN, v), .o = FT(ATTN, o), .lse = FT(ATTN, lse),
                    .scratch = scr);
        if (chain.rho > 1) {
            op = qt_cg_emit_op(g, 0, QT_OP_CTX_CHAIN_SEND);
            QT_CG_SET_T(op, CTX_CHAIN_SEND, .dk = dk, .dv = dv);
            memcpy(op->a, &chain, sizeof chain);
        }
        return 1;
    }
    case QT_OP_GDN_CONV_FWD: {
        int32_t dc = dout(ad, FT(GDN_CONV, c));
        int32_t dq = dgrad(ad, FT(GDN_CONV, qkvz));
        op = bwd(ad, QT_OP_GDN_CONV_BWD, f);
        QT_CG_SET_T(op, GDN_CONV_BWD, .dqkvz = dq, .dc = dc, .pre = FT(GDN_CONV, pre),
                    .w = FT(GDN_CONV, w));
        if (wgrad_units(ad, f, dc)) return 1;
        op = wgrad(ad, QT_OP_GDN_CONV_WGRAD, f, FT(GDN_CONV, w), QT_NONE);
        QT_CG_SET_T(op, GDN_CONV_WGRAD, .dc = dc, .pre = FT(GDN_CONV, pre),
                    .qkvz = FT(GDN_CONV, qkvz), .w = FT(GDN_CONV, w));
        head_side_leaves(g, op);
        return 1;
    }
    case QT_OP_GDN_GATES_FWD: {
        int32_t dbeta = dout(ad, FT(GDN_GATES, beta)), dg = dout(ad, FT(GDN_GATES, g));
        int32_t dba = dgrad(ad, FT(GDN_GATES, ba));
        op = bwd(ad, QT_OP_GDN_GATES_BWD, f);
        QT_CG_SET_T(op, GDN_GATES_BWD, .dba = dba, .dbeta = dbeta, .dg = dg,
                    .ba = FT(GDN_GATES, ba), .A_log = FT(GDN_GATES, A_log),
                    .dt_bias = FT(GDN_GATES, dt_bias));
        if (wgrad_units(ad, f, dg)) return 1;
        op = wgrad(ad, QT_OP_GDN_GATES_WGRAD, f, FT(GDN_GATES, A_log), FT(GDN_GATES, dt_bias));
        QT_CG_SET_T(op, GDN_GATES_WGRAD, .dg = dg, .ba = FT(GDN_GATES, ba),
                    .A_log = FT(GDN_GATES, A_log), .dt_bias = FT(GDN_GATES, dt_bias));
        QT_A(op, GDN_GATES_WGRAD, S) = Sb;
        head_side_leaves(g, op);
        return 1;
    }
    case QT_OP_GDN_CORE_FWD: {
        int32_t dO = dout(ad, FT(GDN_CORE, o));
        int32_t dc = dgrad(ad, FT(GDN_CORE, c)), dg = dgrad(ad, FT(GDN_CORE, g)),
                db = dgrad(ad, FT(GDN_CORE, beta));
        /* scratch per a7 (qt_ops.h), sized by the kernels' own macros */
        int64_t Dk = FA(GDN_CORE, Dk), Dv = FA(GDN_CORE, Dv), C = FA(GDN_CORE, chunk);
        int64_t n = FA(GDN_CORE, algo)
                        ? QT_GDN_CHUNK_BWD_SCRATCH(QT_GDN_CHUNK_ROWS(C, FA(GDN_CORE, S)), Dk, Dv)
                        : QT_GDN_CORE_SCRATCH(C, Dk, Dv);
        int32_t scr = bwd_scratch(ad, "bwd_scratch", g->ts[FT(GDN_CORE, o)].t.name, n);
        op = bwd(ad, QT_OP_GDN_CORE_BWD, f);
        QT_CG_SET_T(op, GDN_CORE_BWD, .dc = dc, .dg = dg, .dbeta = db, .dout = dO,
                    .c = FT(GDN_CORE, c), .g = FT(GDN_CORE, g), .beta = FT(GDN_CORE, beta),
                    .states = FT(GDN_CORE, states), .rq = FT(GDN_CORE, rq), .rk = FT(GDN_CORE, rk),
                    .scratch = scr);
        return 1;
    }
    case QT_OP_GATED_RMSNORM_FWD: {
        int32_t dy = dout(ad, FT(GATED_RMSNORM, y));
        int32_t dO = dgrad(ad, FT(GATED_RMSNORM, o)), dqkvz = dgrad(ad, FT(GATED_RMSNORM, qkvz));
        op = bwd(ad, QT_OP_GATED_RMSNORM_BWD, f);
        QT_CG_SET_T(op, GATED_RMSNORM_BWD, .dout = dO, .dqkvz = dqkvz, .dy = dy,
                    .o = FT(GATED_RMSNORM, o), .qkvz = FT(GATED_RMSNORM, qkvz),
                    .w = FT(GATED_RMSNORM, w), .rstd = FT(GATED_RMSNORM, rstd));
        if (wgrad_units(ad, f, dy)) return 1;
        op = wgrad(ad, QT_OP_GATED_RMSNORM_WGRAD, f, FT(GATED_RMSNORM, w), QT_NONE);
        QT_CG_SET_T(op, GATED_RMSNORM_WGRAD, .dy = dy, .o = FT(GATED_RMSNORM, o),
                    .qkvz = FT(GATED_RMSNORM, qkvz), .rstd = FT(GATED_RMSNORM, rstd),
                    .w = FT(GATED_RMSNORM, w));
        QT_A(op, GATED_RMSNORM_WGRAD, S) = Sb;
        head_side_leaves(g, op);
        {
            /* the canonical head groups of the global heads, this rank's share: the heads
             * are split over tensor (x context on the head side) */
            const int64_t tc = g->s->mesh[QT_MESH_TENSOR] * qt_cg_context(g->s);
            QT_A(op, GATED_RMSNORM_WGRAD, groups) =
                qt_cg_canon(g->s, FA(GATED_RMSNORM, Hv) * tc) / tc;
        }
        return 1;
    }
    default:
        return 0;
    }
}

/* EXPERT_FFN: the data gradient (all-reduced over `tensor` when tensor parallelism splits
 * the experts' width), then the weight gradient, which reads d(gu) from the BWD. */
static void backward_expert_ffn(qt_cg_ad *ad, const qt_op *f)
{
    qt_cg_graph *g = ad->g;
    qt_op *op;
    int32_t dy = dout(ad, FT(EXPERT_FFN, y));
    int32_t dx = dgrad(ad, FT(EXPERT_FFN, x));
    int64_t T = FA(EXPERT_FFN, T), k = FA(EXPERT_FFN, k), d = FA(EXPERT_FFN, d),
            ff = FA(EXPERT_FFN, f);
    const char *nm = g->ts[FT(EXPERT_FFN, y)].t.name;
    /* the forward's scratch size rule (qt_ops.h): max(T*k*(d+f), S*(d+3f)); an expert
     * host's packed rows (k = 1) hold up to S*k0 rows of one sequence (k0 the router's
     * top-k), which one wgrad chunk must take whole */
    const int32_t seg = g->ts[FT(EXPERT_FFN, idx)].ep_seg;
    const int64_t k0 = g->s->m.top_k;
    int64_t S = g->s->tr.seq_len, esz = T * k * (d + ff);
    if (S * (d + 3 * ff) > esz) esz = S * (d + 3 * ff);
    if (seg != QT_NONE && S * k0 * (d + 3 * ff) > esz) esz = S * k0 * (d + 3 * ff);
    /* the canonical blocks of the data gradient (bwd_nb per part; expert_ffn.c) */
    const int64_t nbg = FA(EXPERT_FFN, bwd_nb) > 0 ? FA(EXPERT_FFN, bwd_nb) : 1, rows = T * k;
    const int64_t brow = d + 3 * ff + nbg * d + 2 * ff / nbg, bfix = d * (2 * ff / nbg);
    int64_t bsz = rows * brow + rows + FA(EXPERT_FFN, E) + 1 + rows * d + bfix;
    int64_t s1sz = bsz > esz ? bsz : esz;
    const int64_t C = qt_cg_expert_chunk(g->s);
    if (rows > C) {
        /* chunked (qt_cg_expert_chunk): the BWD's chunks of that many rows, after the
         * expert-major path's row lists and per-row contributions when k > 1 (k = 1, an
         * expert host: the slot path, no lists, the same bits); the WGRAD's chunk takes a
         * leaf's rows of one expert whole (at most the leaf's tokens: top-k experts are
         * distinct), which keeps its canonical order, or a chunk if that is more */
        bsz = C * brow + bfix +
              (k > 1 ? rows + FA(EXPERT_FFN, E) + 1 + rows * d : 0);
        s1sz = bsz;
        const int64_t lt = qt_cg_leaf_tokens(g->s);
        esz = C * (d + ff);
        if (lt * (d + 3 * ff) > esz) esz = lt * (d + 3 * ff);
    }
    int32_t s1 = bwd_scratch(ad, "bwd_scratch", nm, s1sz);
    /* d(gu) handed from BWD to WGRAD (saves the WGRAD a recompute matmul); shaped
     * like gu so it is sharded and sized like it. */
    char dnm[300];
    snprintf(dnm, sizeof dnm, "%s.bwd_dgu", nm);
    qt_tensor gsrc = g->ts[FT(EXPERT_FFN, gu)].t; /* copy: add_tensor may move the array */
    int32_t dgu = qt_cg_add_tensor(g, dnm, QT_ROLE_SAVED, QT_F32, gsrc.ndim, gsrc.shape,
                                   gsrc.axes);
    memcpy(g->ts[dgu].exec, g->ts[FT(EXPERT_FFN, gu)].exec, sizeof g->ts[dgu].exec);
    g->ts[dgu].reshard = g->ts[FT(EXPERT_FFN, gu)].reshard;
    op = bwd(ad, QT_OP_EXPERT_FFN_BWD, f);
    QT_CG_SET_T(op, EXPERT_FFN_BWD, .dx = dx, .dy = dy, .x = FT(EXPERT_FFN, x),
                .idx = FT(EXPERT_FFN, idx), .gu = FT(EXPERT_FFN, gu), .w_gu = FT(EXPERT_FFN, w_gu),
                .w_down = FT(EXPERT_FFN, w_down), .scratch = s1, .dgu = dgu);
    if (g->s->mesh[QT_MESH_TENSOR] > 1) {
        /* the rows' data gradients are partial sums over this rank's f/tp: add them */
        op = qt_cg_emit_op(g, 0, QT_OP_ALL_REDUCE);
        QT_T(op, ALL_REDUCE, buf) = dx;
        QT_CG_SET_A(op, ALL_REDUCE, .n = g->ts[dx].t.numel, .mask = 1 << QT_MESH_TENSOR);
    }
    int32_t s2 = bwd_scratch(ad, "wgrad_scratch", nm, esz);
    op = wgrad(ad, QT_OP_EXPERT_FFN_WGRAD, f, FT(EXPERT_FFN, w_gu), FT(EXPERT_FFN, w_down));
    QT_CG_SET_T(op, EXPERT_FFN_WGRAD, .dy = dy, .x = FT(EXPERT_FFN, x), .idx = FT(EXPERT_FFN, idx),
                .gu = FT(EXPERT_FFN, gu), .w_gu = FT(EXPERT_FFN, w_gu),
                .w_down = FT(EXPERT_FFN, w_down), .scratch = s2, .dgu = dgu, .seg = seg);
    QT_A(op, EXPERT_FFN_WGRAD, S) = qt_cg_leaf_tokens(g->s);
    /* an expert host computes a leaf for every token block of its expert group */
    if (seg != QT_NONE) {
        /* the expert group: expert x context, or expert alone with the experts replicated
         * over context (graph.c expert_parallel), each member's token blocks */
        const int64_t C = qt_cg_context(g->s), M = qt_cg_expert_group(g->s);
        op->a[QT_A_WGRAD_SEQS] = M * g->s->tr.micro_batch * qt_cg_blocks(g->s) / C;
    }
}

/* The expert dispatch in rounds (MOE_ROUNDS_FWD): the data gradient (MOE_ROUNDS_BWD) and the
 * experts' weight gradient (MOE_ROUNDS_WGRAD), each moving the rows again round by round
 * with round buffers like the forward's (gu and d(gu) recomputed per round, nothing of the
 * forward's host side kept), the forward's FFN scratch size, and a home scratch that also
 * holds the packed row gradients. */
static void backward_moe_rounds(qt_cg_ad *ad, const qt_op *f)
{
    qt_cg_graph *g = ad->g;
    const char *nm = g->ts[FT(MOE_ROUNDS, y)].t.name;
    const int64_t R = FA(MOE_ROUNDS, R), T = FA(MOE_ROUNDS, T), k = FA(MOE_ROUNDS, k);
    const int64_t xn = g->ts[FT(MOE_ROUNDS, xr)].t.numel, gn = g->ts[FT(MOE_ROUNDS, gu)].t.numel;
    const int64_t M = qt_cg_expert_group(g->s);
    const int64_t hn = QT_EP_ROUNDS_HOME_FLOATS(T, k, xn / R, M, FA(MOE_ROUNDS, leaves) / M, R, 1);
    const int64_t fn = g->ts[FT(MOE_ROUNDS, scratch)].t.numel;
    int32_t dx = dgrad(ad, FT(MOE_ROUNDS, x)), dy = dout(ad, FT(MOE_ROUNDS, y));
    qt_op *op = bwd(ad, QT_OP_MOE_ROUNDS_BWD, f);
    QT_CG_SET_T(op, MOE_ROUNDS_BWD, .dx = dx, .dy = dy, .x = FT(MOE_ROUNDS, x),
                .idx = FT(MOE_ROUNDS, idx), .w_gu = FT(MOE_ROUNDS, w_gu),
                .w_down = FT(MOE_ROUNDS, w_down), .xr = bwd_scratch(ad, "bwd_xr", nm, xn),
                .dyr = bwd_scratch(ad, "bwd_dyr", nm, xn), .gu = bwd_scratch(ad, "bwd_gu", nm, gn),
                .dxr = bwd_scratch(ad, "bwd_dxr", nm, xn),
                .scratch = bwd_scratch(ad, "bwd_scratch", nm, fn),
                .home = bwd_scratch(ad, "bwd_home", nm, hn));
    op = wgrad(ad, QT_OP_MOE_ROUNDS_WGRAD, f, FT(MOE_ROUNDS, w_gu), FT(MOE_ROUNDS, w_down));
    QT_CG_SET_T(op, MOE_ROUNDS_WGRAD, .dy = dy, .x = FT(MOE_ROUNDS, x), .idx = FT(MOE_ROUNDS, idx),
                .w_gu = FT(MOE_ROUNDS, w_gu), .w_down = FT(MOE_ROUNDS, w_down),
                .xr = bwd_scratch(ad, "wgrad_xr", nm, xn),
                .dyr = bwd_scratch(ad, "wgrad_dyr", nm, xn),
                .gu = bwd_scratch(ad, "wgrad_gu", nm, gn),
                .yr = bwd_scratch(ad, "wgrad_yr", nm, xn),
                .scratch = bwd_scratch(ad, "wgrad_scratch", nm, fn),
                .home = bwd_scratch(ad, "wgrad_home", nm, hn));
    /* the leaves: every token block of the expert group's members (a7, as the forward's) */
    op->a[QT_A_WGRAD_SEQS] = FA(MOE_ROUNDS, leaves);
}

/* The MoE ops: router, expert FFN and the expert-parallel row exchange. */
static int backward_moe(qt_cg_ad *ad, const qt_op *f)
{
    qt_cg_graph *g = ad->g;
    qt_op *op;
    const int64_t S = g->s->tr.seq_len;
    switch (f->kind) {
    case QT_OP_MOE_ROUTE_FWD: {
        int32_t dp = dout(ad, FT(MOE_ROUTE, p));
        int32_t dl = dgrad(ad, FT(MOE_ROUTE, logits));
        op = bwd(ad, QT_OP_MOE_ROUTE_BWD, f);
        /* context parallelism with the load-balance term: the counts' all-gather scratch */
        int32_t scr = QT_NONE;
        if (FA(MOE_ROUTE, ctx) > 1) {
            char nm[300];
            snprintf(nm, sizeof nm, "%s.bwd", g->ts[FT(MOE_ROUTE, scratch)].t.name);
            scr = qt_cg_add_tensor(g, nm, QT_ROLE_SCRATCH, QT_I32, 1,
                                   (const int64_t[]){FA(MOE_ROUTE, ctx) *
                                                     (FA(MOE_ROUTE, T) / FA(MOE_ROUTE, S)) *
                                                     FA(MOE_ROUTE, E)},
                                   (const uint8_t[]){0});
        }
        QT_CG_SET_T(op, MOE_ROUTE_BWD, .dlogits = dl, .dp = dp, .logits = FT(MOE_ROUTE, logits),
                    .idx = FT(MOE_ROUTE, idx), .p = FT(MOE_ROUTE, p), .scratch = scr);
        /* The runtime divides every gradient by the global token count; the load-balance
         * term is already normalised, so its seed is scaled up by that count. */
        op->f[0] = (float)((double)f->f[0] == 0.0 ? 0.0
                                                  : g->s->lb_weight * (double)FA(MOE_ROUTE, E) *
                                                        (double)S / (double)g->s->m.n_layers);
        return 1;
    }
    case QT_OP_EXPERT_FFN_FWD:
        backward_expert_ffn(ad, f);
        return 1;
    case QT_OP_MOE_RETURN_FWD: {
        /* y rows came back from their hosts: their gradients go the same way out */
        int32_t dyr = dgrad(ad, FT(MOE_RETURN, yr));
        char nm[300];
        snprintf(nm, sizeof nm, "%s.bwd_scratch", g->ts[FT(MOE_RETURN, y)].t.name);
        int32_t scr = qt_cg_add_tensor(
            g, nm, QT_ROLE_SCRATCH, QT_F32, 1,
            (const int64_t[]){FA(MOE_RETURN, T) * FA(MOE_RETURN, k) * FA(MOE_RETURN, d)},
            (const uint8_t[]){0});
        op = bwd(ad, QT_OP_MOE_RETURN_BWD, f);
        QT_CG_SET_T(op, MOE_RETURN_BWD, .dyr = dyr, .dy = dout(ad, FT(MOE_RETURN, y)),
                    .idx = FT(MOE_RETURN, idx), .seg = FT(MOE_RETURN, seg), .scratch = scr);
        return 1;
    }
    case QT_OP_MOE_DISPATCH_FWD: {
        /* the hosts' row gradients come home and add into their tokens in slot order */
        int32_t dx = dgrad(ad, FT(MOE_DISPATCH, x));
        char nm[300];
        snprintf(nm, sizeof nm, "%s.bwd_scratch", g->ts[FT(MOE_DISPATCH, xr)].t.name);
        int32_t scr = qt_cg_add_tensor(
            g, nm, QT_ROLE_SCRATCH, QT_F32, 1,
            (const int64_t[]){FA(MOE_DISPATCH, T) * FA(MOE_DISPATCH, k) * FA(MOE_DISPATCH, d)},
            (const uint8_t[]){0});
        op = bwd(ad, QT_OP_MOE_DISPATCH_BWD, f);
        QT_CG_SET_T(op, MOE_DISPATCH_BWD, .dx = dx, .dxr = dout(ad, FT(MOE_DISPATCH, xr)),
                    .idx = FT(MOE_DISPATCH, idx), .seg = FT(MOE_DISPATCH, seg), .scratch = scr);
        return 1;
    }
    case QT_OP_MOE_ROUNDS_FWD:
        backward_moe_rounds(ad, f);
        return 1;
    default:
        return 0;
    }
}

/* Emits the backward of forward op f, by op family. */
static void backward_of(qt_cg_ad *ad, const qt_op *f)
{
    switch (f->kind) {
    case QT_OP_ZERO:
    case QT_OP_XENT:
    case QT_OP_XENT_MTP:
    /* the eval's acceptance counts: integers of the logits' argmax, no gradient */
    case QT_OP_MTP_ACCEPT:
    /* token dropping decides on integer ids: nothing to differentiate */
    case QT_OP_MOE_CAPACITY:
    case QT_OP_MOE_RAGGED:
    /* a copy of a parameter's rows (heads owned unevenly over context): the weight
     * gradient comes from the reader's WGRAD (*_WGRAD_U), completed there */
    case QT_OP_CTX_OWN_UNITS:
    /* a sum of the ranks' partials: each partial's gradient is the (replicated) gradient of
     * the sum, already in place */
    case QT_OP_ALL_REDUCE:
        return;
    case QT_OP_PP_CHUNK: {
        /* a circular stage's chunk starts: its backward (emitted before, in reverse) is
         * complete, so the gradient of its input is known; the end marker says so */
        qt_op *b = qt_cg_emit_op(ad->g, 0, QT_OP_PP_CHUNK);
        *b = *f;
        QT_A(b, PP_CHUNK, bwd) = 1;
        if (QT_A(f, PP_CHUNK, in) != QT_NONE)
            QT_A(b, PP_CHUNK, din) = ad->grad[QT_A(f, PP_CHUNK, in)];
        return;
    }
    default:
        break;
    }
    if (backward_dense(ad, f) || backward_stack(ad, f) || backward_mixers(ad, f) ||
        backward_moe(ad, f))
        return;
    if (!ad->failed) {
        ad->failed = 1;
        qt_cg_fail(ad->err, ad->errlen, "internal error: no backward for op kind %s",
                   qt_cg_op_name(f->kind));
    }
}

/* The gradient of a pipeline stage's input boundary `in` (QT_NONE: the stage has none, then
 * QT_NONE), which the driver sends back: it lives to the end of the schedule. None reaching
 * it is an internal error naming `what`. */
static int32_t boundary_grad(qt_cg_ad *ad, int32_t in, const char *what)
{
    if (in == QT_NONE || ad->failed) return QT_NONE;
    const int32_t d = ad->grad[in];
    if (d == QT_NONE) {
        ad->failed = 1;
        qt_cg_fail(ad->err, ad->errlen, "internal error: no gradient reaches %s", what);
    } else {
        ad->g->ts[d].whole = 1;
    }
    return d;
}

int qt_cg_autodiff(qt_cg_graph *g, char *err, size_t errlen)
{
    qt_cg_ad ad = {g, NULL, g->nt, err, errlen, 0, NULL};
    ad.grad = qt_cg_alloc((size_t)g->nt * sizeof *ad.grad);
    for (int i = 0; i < g->nt; i++) ad.grad[i] = QT_NONE;
    /* the readers of each parameter with a WGRAD of its own kind (the norms, the matmuls) */
    ad.sh = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *ad.sh);
    memset(ad.sh, 0, (size_t)(g->np ? g->np : 1) * sizeof *ad.sh);
    for (int i = 0; i < g->n_fwd; i++) {
        const qt_op *f = &g->mb[i];
        const int32_t w = f->kind == QT_OP_RMSNORM_FWD ? QT_T(f, RMSNORM_FWD, w)
                          : f->kind == QT_OP_MATMUL_FWD ? QT_T(f, MATMUL_FWD, w)
                                                        : QT_NONE;
        if (w == QT_NONE || pidx(&ad, w) < 0) continue;
        if (++ad.sh[pidx(&ad, w)].n > QT_CG_SHARED_MAX) {
            free(ad.grad);
            free(ad.sh);
            return qt_cg_fail(err, errlen, "internal error: parameter '%s' has more than %d "
                              "readers", g->ts[w].t.name, QT_CG_SHARED_MAX);
        }
    }
    const qt_op *xent = &g->mb[g->n_fwd - 1];
    const int pp = g->s && g->s->pp_stages > 1 && g->s->pp_local;
    /* a circular stage's chunks (PP_CHUNK markers): each backward starts from the gradient
     * of its chunk's output boundary, received from the next stage */
    for (int i = 0; pp && i < g->n_fwd; i++)
        if (g->mb[i].kind == QT_OP_PP_CHUNK && QT_A(&g->mb[i], PP_CHUNK, out) != QT_NONE)
            ad.grad[QT_A(&g->mb[i], PP_CHUNK, out)] = (int32_t)QT_A(&g->mb[i], PP_CHUNK, dout);
    if (pp && g->pp_dout != QT_NONE) {
        /* a pipeline stage before the last: the backward starts from the gradient of its
         * output boundary, received from the next stage */
        ad.grad[g->pp_out] = g->pp_dout;
    } else if (xent->kind == QT_OP_XENT) {
        ad.grad[QT_T(xent, XENT, logits)] = QT_T(xent, XENT, dlogits);
    } else if (xent->kind == QT_OP_XENT_MTP) {
        ad.grad[QT_T(xent, XENT_MTP, logits)] = QT_T(xent, XENT_MTP, dlogits);
    } else {
        free(ad.grad);
        free(ad.sh);
        return qt_cg_fail(err, errlen, "internal error: the forward must end with XENT");
    }
    /* stage 0 with the MTP head: the gradient of the depths' embeddings, received from the
     * last stage, seeds them too (SPLIT's backward then stacks it with the layers') */
    if (pp && g->pp_mtp_dout != QT_NONE) ad.grad[g->pp_mtp_out] = g->pp_mtp_dout;
    int cap_src = 0;
    for (int i = g->n_fwd - 1; i >= 0 && !ad.failed; i--) {
        qt_op f = g->mb[i]; /* copy: emitting grows g->mb */
        const int before = g->nmb;
        backward_of(&ad, &f);
        g->bwd_src = qt_cg_grow(g->bwd_src, &cap_src, g->nmb - g->n_fwd, sizeof *g->bwd_src);
        for (int o = before; o < g->nmb; o++) g->bwd_src[o - g->n_fwd] = i;
    }
    /* a pipeline stage after the first: its input boundary's gradient, sent back; the last
     * stage with the MTP head: the gradient of stage 0's embeddings, sent back */
    if (pp) {
        g->pp_din = boundary_grad(&ad, g->pp_in, "the stage's input");
        g->pp_mtp_din = boundary_grad(&ad, g->pp_mtp_in, "the MTP head's input");
    }
    /* the circular chunks' input gradients (sent back), into their forward markers too */
    for (int i = g->n_fwd; pp && i < g->nmb && !ad.failed; i++) {
        qt_op *b = &g->mb[i];
        if (b->kind != QT_OP_PP_CHUNK || QT_A(b, PP_CHUNK, in) == QT_NONE) continue;
        const int32_t din = (int32_t)QT_A(b, PP_CHUNK, din);
        if (din == QT_NONE) {
            ad.failed = 1;
            qt_cg_fail(err, errlen, "internal error: no gradient reaches chunk %lld's input",
                       (long long)QT_A(b, PP_CHUNK, chunk));
            break;
        }
        g->ts[din].whole = 1;
        for (int j = 0; j < g->n_fwd; j++)
            if (g->mb[j].kind == QT_OP_PP_CHUNK &&
                QT_A(&g->mb[j], PP_CHUNK, chunk) == QT_A(b, PP_CHUNK, chunk))
                QT_A(&g->mb[j], PP_CHUNK, din) = din;
    }
    free(ad.grad);
    free(ad.sh);
    return ad.failed ? -1 : 0;
}
