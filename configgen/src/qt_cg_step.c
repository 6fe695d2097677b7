/* qt_cg_step.c - the step schedule: what runs once per optimizer step after the last
 * microbatch (qt_ops.def, step section), and the collectives it names.
 *
 * One rank: GRAD_FINALIZE (tree total + normalise + norm, fused) then ADAMW.
 * A mesh whose batch is split over the axes B (data, fsdp, expert) with the optimizer state
 * split over O (fsdp, plus data under ZeRO-1; O is a subset of B):
 *   GRAD_TREE_TOTAL            the rank's own pairwise-tree total of its leaves
 *   reduce-scatter grads / B   fixed pairing: continues the same tree across ranks
 *   all-gather grads / B       only when O != B: every rank then holds the whole gradient
 *   GRAD_NORMALISE (O)         divide this rank's O-block by the global token count, exact
 *                              norm^2 merged over O
 *   ADAMW (O)                  update the O-block (Adam m/v hold exactly that block)
 *   all-gather params / O      only when O is not empty
 * Sequences are rank-major blocks in batch-index order and the reduce-scatter pairs ranks
 * by recursive halving over the same index, so with a power-of-two count of leaves per rank
 * the cross-rank additions are exactly the upper levels of the one-rank tree: the bits do
 * not depend on the mesh (design.md section 6).
 */
#include <stdio.h>
#include <string.h>
#include "qt_cg.h"

static qt_op *step_op(qt_cg_graph *g, int kind)
{
    g->step = qt_cg_grow(g->step, &g->capstep, g->nstep + 1, sizeof *g->step);
    qt_op *o = &g->step[g->nstep++];
    memset(o, 0, sizeof *o);
    o->kind = (uint16_t)kind;
    for (int s = 0; s < QT_OP_MAX_T; s++) o->t[s] = QT_NONE;
    return o;
}

int64_t qt_cg_group_size(const qt_cg_settings *s, unsigned mask)
{
    int64_t r = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1u << a)) r *= s->mesh[a];
    return r;
}

const char *qt_cg_mask_name(unsigned mask, char *buf, size_t n)
{
    static const char *const names[QT_MESH_COUNT] = {"data", "fsdp", "tensor", "expert",
                                                     "context"};
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1u << a) && k < n)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "," : "", names[a]);
    if (!k) snprintf(buf, n, "-");
    return buf;
}

/* A COLLECTIVE step op over the arena byte range [offset, offset + bytes). */
static void collective(qt_cg_graph *g, const char *name, int kind, unsigned mask, int64_t offset,
                       int64_t bytes)
{
    g->coll = qt_cg_grow(g->coll, &g->capcoll, g->ncoll + 1, sizeof *g->coll);
    qt_collective *c = &g->coll[g->ncoll];
    memset(c, 0, sizeof *c);
    c->name = qt_cg_strdup(name);
    c->kind = (uint8_t)kind;
    c->mask = (uint8_t)mask;
    c->offset = offset;
    c->bytes = bytes;
    qt_op *o = step_op(g, QT_OP_COLLECTIVE);
    o->a[0] = g->ncoll++;
}

void qt_cg_step_schedule(qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    const qt_train_cfg *t = &s->tr;
    const int64_t leaves = t->micro_batch * t->grad_accum, tokens = t->global_batch * t->seq_len;
    const unsigned B = s->batch_mask, O = s->opt_mask;
    g->nstep = 0;
    if (!B) {
        qt_op *fin = step_op(g, QT_OP_GRAD_FINALIZE);
        fin->a[0] = leaves;
        fin->a[1] = tokens;
        step_op(g, QT_OP_ADAMW)->a[0] = O;
        return;
    }
    const int64_t flat_bytes = 4 * g->n_flat;
    step_op(g, QT_OP_GRAD_TREE_TOTAL)->a[0] = leaves;
    collective(g, "gradients (reduce-scatter over the batch axes)", QT_COLL_REDUCE_SCATTER, B,
               g->grads_offset, flat_bytes);
    if (O != B)
        collective(g, "gradients (all-gather: every optimizer block whole)", QT_COLL_ALL_GATHER,
                   B, g->grads_offset, flat_bytes);
    qt_op *nrm = step_op(g, QT_OP_GRAD_NORMALISE);
    nrm->a[0] = tokens;
    nrm->a[1] = O;
    step_op(g, QT_OP_ADAMW)->a[0] = O;
    if (O)
        collective(g, "parameters (all-gather of the updated blocks)", QT_COLL_ALL_GATHER, O,
                   g->params_offset, flat_bytes);
}
