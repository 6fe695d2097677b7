/* schedule/step.c - the step schedule: what runs once per optimizer step after the last
 * microbatch (qt_ops.def, step section), and the collectives it names.
 *
 * One rank: GRAD_FINALIZE (tree total + normalise + norm, fused) then ADAMW.
 * A mesh whose batch is split over the axes B (data, fsdp, expert): the flat parameter
 * vector is cut into ranges by reduction pattern (qt_plan.h qt_flat_range: the routed
 * experts sharded over `expert` reduce over B without expert, everything else over B); for
 * each range with reduction group R and optimizer group O (fsdp and expert, plus data
 * under ZeRO-1; O is a subset of R):
 *   GRAD_TREE_TOTAL            every parameter's own pairwise-tree total of its leaves
 *   reduce-scatter grads / R   fixed pairing: continues the same tree across ranks
 *   all-gather grads / R       only when O != R: every rank then holds the range's gradient
 *   GRAD_NORMALISE             divide every rank's O-blocks by the global token count; the
 *                              exact norm^2 of one copy of each block, merged world-wide
 *   ADAMW                      update the O-blocks (Adam m/v hold exactly those)
 *   all-gather params / O      only when O is not empty
 * Parameters are never sharded for compute except the routed experts (a rank holds El of
 * them): fsdp and ZeRO-1 split the optimizer state and the update, and the updated blocks
 * are gathered once per step (gathered weights, flat-parameter FSDP). In bf16 plans the
 * gather moves the bf16 compute copy (2 bytes an element: half the bytes on the wire, as
 * MaxText's ZeRO-1), each rank contributing the rounding of its fp32 master blocks.
 * Sequences are rank-major blocks in batch-index order and the reduce-scatter pairs ranks
 * by recursive halving over the same index, so with a power-of-two count of leaves per rank
 * the cross-rank additions are exactly the upper levels of the one-rank tree: the bits do
 * not depend on the mesh (docs/design.md section 6). When a rank's leaf count L is not a
 * power of two (grad_units q > 1: q units of U leaves, each a complete subtree of the
 * one-rank tree), GRAD_UNITS per range replaces the tree total and the reduce-scatter: the
 * members exchange their units pairwise and each owner folds all R x q of them in the
 * one-rank tree's shape (docs/determinism.md "Any split"). The microbatch form does the
 * same per microbatch when its reduce-scatter would not continue the one-rank tree
 * (grad_mb_units q >= 1): GRAD_MB_UNITS per range exchanges the units and each owner pushes
 * the R x q pieces into a counter over the step's G x R x q units, which GRAD_MB_FINALIZE
 * completes (docs/determinism.md "The microbatch form's units").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "memory/qt_cg_memory.h"
#include "schedule/qt_cg_schedule.h"

/* Appends an op to the step schedule, or with `mbend` to the microbatch-end schedule. */
static qt_op *sched_op(qt_cg_graph *g, int mbend, int kind)
{
    qt_op *o;
    if (mbend) {
        g->mbend = qt_cg_grow(g->mbend, &g->capmbend, g->nmbend + 1, sizeof *g->mbend);
        o = &g->mbend[g->nmbend++];
    } else {
        g->step = qt_cg_grow(g->step, &g->capstep, g->nstep + 1, sizeof *g->step);
        o = &g->step[g->nstep++];
    }
    qt_cg_op_blank(o, kind);
    return o;
}

static qt_op *step_op(qt_cg_graph *g, int kind)
{
    return sched_op(g, 0, kind);
}

/* A new entry of the collectives table over the arena byte range [offset, offset + bytes);
 * returns its index. */
static int new_collective(qt_cg_graph *g, const char *name, int kind, unsigned mask,
                          int64_t offset, int64_t bytes)
{
    g->coll = qt_cg_grow(g->coll, &g->capcoll, g->ncoll + 1, sizeof *g->coll);
    qt_collective *c = &g->coll[g->ncoll];
    memset(c, 0, sizeof *c);
    c->name = qt_cg_strdup(name);
    c->kind = (uint8_t)kind;
    c->mask = (uint8_t)mask;
    c->offset = offset;
    c->bytes = bytes;
    return g->ncoll++;
}

/* A COLLECTIVE op over a new collective, in the step schedule or with `mbend` in the
 * microbatch-end schedule. */
static void collective(qt_cg_graph *g, int mbend, const char *name, int kind, unsigned mask,
                       int64_t offset, int64_t bytes)
{
    const int idx = new_collective(g, name, kind, mask, offset, bytes);
    QT_A(sched_op(g, mbend, QT_OP_COLLECTIVE), COLLECTIVE, coll) = idx;
}

/* The collective of per-layer placeholder k: the all-gather of gather window k (gather),
 * or the reduce-scatter of flat range k over its window in the leaf tree's top level (at
 * byte `top`). Returns its index. */
static int layer_collective(qt_cg_graph *g, int k, int gather, int64_t top)
{
    const qt_cg_settings *s = g->s;
    char name[200], axes[64];
    if (gather) {  /* a per-layer parameter gather's */
        const int32_t w = g->gather_win[2 * k];
        const qt_flat_range *r = &g->ranges[g->gather_win[2 * k + 1]];
        snprintf(name, sizeof name, "compute copy of range %d into %s (all-gather over %s)",
                 g->gather_win[2 * k + 1], g->ts[w].t.name,
                 qt_cg_mask_name(r->opt_mask, axes, sizeof axes));
        return new_collective(g, name, QT_COLL_ALL_GATHER, r->opt_mask, g->ts[w].t.offset,
                              qt_cg_compute_bytes(s) * r->n);
    }
    const qt_flat_range *r = &g->ranges[k];
    snprintf(name, sizeof name, "microbatch gradients of range %d (reduce-scatter over %s, "
             "after its last weight gradient)", k,
             qt_cg_mask_name(r->reduce_mask, axes, sizeof axes));
    return new_collective(g, name, QT_COLL_REDUCE_SCATTER, r->reduce_mask, top + 4 * r->leaf_lo,
                          4 * r->n);
}

/* collective_overlap all in the microbatch form (g->mb_overlap): the range whose
 * microbatch-end reduce-scatter (or units exchange) is split (the last one with a reduction;
 * the others stay blocking before it: one in flight), or -1 (then g->mb_overlap = 0) when
 * the forward is not free of weight gradients and step ops (the split one reads the leaf
 * tree's top level, or the unit levels, and the comm scratch's split part until the next
 * microbatch's backward). */
static int mb_split_range(qt_cg_graph *g)
{
    int last = -1;
    for (int i = 0; i < g->n_ranges; i++)
        if (g->ranges[i].reduce_mask) last = i;
    for (int o = 0; o < g->n_fwd && last >= 0; o++)
        if ((g->mb[o].flags & QT_OPF_WGRAD) || qt_cg_op_class(g->mb[o].kind) != QT_OPC_RUN)
            last = -1;
    g->mb_overlap = last >= 0;
    return last;
}

/* The completion of split collective c and the push (units: range c's wait, which pushes),
 * flagged QT_OPF_PREV_MB: first in the backward of the microbatch schedule (the next
 * microbatch's forward runs beside it; its backward's weight gradients write the leaf tree
 * after), and first in the step schedule (the last microbatch's, before GRAD_MB_FINALIZE). */
static void mb_split_wait(qt_cg_graph *g, int c, int units)
{
    qt_op ops[2];
    const int n = units ? 1 : 2;
    qt_cg_op_blank(&ops[0], units ? QT_OP_GRAD_MB_UNITS_WAIT : QT_OP_COLL_WAIT);
    if (units) QT_A(&ops[0], GRAD_MB_UNITS_WAIT, range) = c;
    else QT_A(&ops[0], COLL_WAIT, coll) = c;
    qt_cg_op_blank(&ops[1], QT_OP_GRAD_MB_PUSH);
    ops[0].flags = ops[1].flags = QT_OPF_PREV_MB;
    g->mb = qt_cg_grow(g->mb, &g->capmb, g->nmb + n, sizeof *g->mb);
    memmove(&g->mb[g->n_fwd + n], &g->mb[g->n_fwd], (size_t)(g->nmb - g->n_fwd) * sizeof *g->mb);
    memcpy(&g->mb[g->n_fwd], ops, (size_t)n * sizeof *ops);
    g->nmb += n;
    for (int k = 0; k < n; k++) *step_op(g, ops[k].kind) = ops[k];
}

/* The microbatch-end reduce-scatter of flat range i over its window in the leaf tree's
 * top level (at byte `top`), blocking, or split when i is `split` (mb_split_range); nothing
 * for a range without a reduction. */
static void mb_reduce_scatter(qt_cg_graph *g, int i, int64_t top, int split)
{
    const qt_flat_range *r = &g->ranges[i];
    if (!r->reduce_mask) return;
    char name[200], axes[64];
    snprintf(name, sizeof name, "microbatch gradients of range %d (reduce-scatter over "
             "%s%s)", i, qt_cg_mask_name(r->reduce_mask, axes, sizeof axes),
             i == split ? ", split: waited for before the next microbatch's backward" : "");
    if (i != split) {
        collective(g, 1, name, QT_COLL_REDUCE_SCATTER, r->reduce_mask, top + 4 * r->leaf_lo,
                   4 * r->n);
        return;
    }
    const int c = new_collective(g, name, QT_COLL_REDUCE_SCATTER, r->reduce_mask,
                                 top + 4 * r->leaf_lo, 4 * r->n);
    QT_A(sched_op(g, 1, QT_OP_COLL_START), COLL_START, coll) = c;
    mb_split_wait(g, c, 0);
}

/* The repeat chunks of a circular pipeline stage's tables (PP_CHUNK markers), else 1. */
static int mb_chunks(const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    return s->pp_local && s->pp_stages > 1 && s->pp_repeats > 1 ? s->pp_repeats : 1;
}

/* Chunk c's part of the microbatch-end schedule begins: on a circular stage a PP_CHUNK
 * marker (bwd 2: the ops up to the next marker push chunk c's ranges, which the driver runs
 * after the chunk's backward); [*r0, *r1) the chunk's flat ranges (memory/ranges.c cuts
 * them per chunk, in chunk order), every range with one chunk. */
static void mb_chunk_open(qt_cg_graph *g, int c, int *r0, int *r1)
{
    *r0 = 0;
    *r1 = g->n_ranges;
    if (mb_chunks(g) <= 1) return;
    int lo = g->n_ranges, hi = 0;
    for (int p = 0; p < g->np; p++) {
        if (qt_cg_chunk_of(g, p) != c) continue;
        const int r = qt_cg_range_of(g, p);
        if (r < lo) lo = r;
        if (r + 1 > hi) hi = r + 1;
    }
    *r0 = lo < hi ? lo : 0;
    *r1 = lo < hi ? hi : 0;
    qt_op *m = sched_op(g, 1, QT_OP_PP_CHUNK);
    QT_A(m, PP_CHUNK, chunk) = c;
    QT_A(m, PP_CHUNK, bwd) = 2;
    QT_A(m, PP_CHUNK, in) = QT_A(m, PP_CHUNK, out) = QT_NONE;
    QT_A(m, PP_CHUNK, dout) = QT_A(m, PP_CHUNK, din) = QT_NONE;
}

void qt_cg_step_schedule(qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    const qt_train_cfg *t = &s->tr;
    const int64_t leaves = t->micro_batch * t->grad_accum * qt_cg_blocks(s),
                  tokens = t->global_batch * t->seq_len;
    g->nstep = 0;
    g->nmbend = 0;
    if (s->n_ranks == 1) {
        qt_op *fin = step_op(g, QT_OP_GRAD_FINALIZE);
        QT_A(fin, GRAD_FINALIZE, leaves) = leaves;
        QT_A(fin, GRAD_FINALIZE, tokens) = tokens;
        step_op(g, QT_OP_ADAMW);
        return;
    }
    const int mb = g->n_mb_levels > 0;
    if (mb && g->layer_reduce) {
        /* per layer: the reduce-scatters the memory plan put into the microbatch schedule
         * (a0 = -1 - range), over each range's window in the leaf tree's top level */
        const int64_t top = g->tree_offset[g->n_tree_levels - g->n_mb_levels - 1];
        if (g->overlap) qt_cg_overlap_split(g);
        int *made = qt_cg_alloc((size_t)(g->n_gather_win + g->n_ranges + 1) * sizeof *made);
        for (int k = 0; k < g->n_gather_win + g->n_ranges; k++) made[k] = -1;
        for (int o = 0; o < g->nmb; o++) {
            qt_op *op = &g->mb[o];
            if ((op->kind != QT_OP_COLLECTIVE && op->kind != QT_OP_COLL_START &&
                 op->kind != QT_OP_COLL_WAIT) || QT_A(op, COLLECTIVE, coll) >= 0)
                continue;
            /* a split collective's START and WAIT share the placeholder: made once */
            const int k = (int)(-1 - QT_A(op, COLLECTIVE, coll));
            const int gather = op->a[QT_CG_A_COLLECTIVE_GATHER] != 0;
            int *idx = &made[gather ? k : g->n_gather_win + k];
            if (*idx < 0) *idx = layer_collective(g, k, gather, top);
            QT_A(op, COLLECTIVE, coll) = *idx;
            op->a[QT_CG_A_COLLECTIVE_GATHER] = 0;
        }
        free(made);
        QT_A(step_op(g, QT_OP_GRAD_MB_FINALIZE), GRAD_MB_FINALIZE, leaves) = t->grad_accum;
    } else if (mb && g->grad_mb_units > 0) {
        /* units: after each microbatch every range's q unit totals exchanged over its reduce
         * group and pushed by each block's owner into a counter over the step's units (in
         * place of the totals, the reduce-scatter and the push); collective_overlap all: the
         * last exchanged range's exchange split, started last (a range's counter is its own,
         * so the order of the ranges changes no bit) and waited for, then pushed, before the
         * next microbatch's backward */
        const int split = g->mb_overlap ? mb_split_range(g) : -1;
        for (int c = 0, r0, r1; c < mb_chunks(g); c++) {
            mb_chunk_open(g, c, &r0, &r1);
            for (int i = r0; i < r1; i++)
                if (i != split)
                    QT_A(sched_op(g, 1, QT_OP_GRAD_MB_UNITS), GRAD_MB_UNITS, range) = i;
        }
        if (split >= 0) {
            QT_A(sched_op(g, 1, QT_OP_GRAD_MB_UNITS_START), GRAD_MB_UNITS_START, range) = split;
            mb_split_wait(g, split, 1);
        }
        QT_A(step_op(g, QT_OP_GRAD_MB_FINALIZE), GRAD_MB_FINALIZE, leaves) = t->grad_accum;
    } else if (mb && mb_chunks(g) > 1) {
        /* a circular stage: the same per chunk, over the chunk's ranges alone */
        const int64_t top = g->tree_offset[g->n_tree_levels - g->n_mb_levels - 1];
        for (int c = 0, r0, r1; c < mb_chunks(g); c++) {
            mb_chunk_open(g, c, &r0, &r1);
            qt_op *tot = sched_op(g, 1, QT_OP_GRAD_MB_TOTAL);
            QT_A(tot, GRAD_MB_TOTAL, r0) = r0;
            QT_A(tot, GRAD_MB_TOTAL, r1) = r1;
            for (int i = r0; i < r1; i++) mb_reduce_scatter(g, i, top, -1);
            qt_op *push = sched_op(g, 1, QT_OP_GRAD_MB_PUSH);
            QT_A(push, GRAD_MB_PUSH, r0) = r0;
            QT_A(push, GRAD_MB_PUSH, r1) = r1;
        }
        QT_A(step_op(g, QT_OP_GRAD_MB_FINALIZE), GRAD_MB_FINALIZE, leaves) = t->grad_accum;
    } else if (mb) {
        /* after each microbatch: its totals, reduce-scattered over the batch axes (fixed
         * pairing: the upper levels of the one-rank tree of that microbatch's block of the
         * global batch), pushed into the microbatch tree */
        const int64_t top = g->tree_offset[g->n_tree_levels - g->n_mb_levels - 1];
        const int split = g->mb_overlap ? mb_split_range(g) : -1;
        sched_op(g, 1, QT_OP_GRAD_MB_TOTAL);
        for (int i = 0; i < g->n_ranges; i++) mb_reduce_scatter(g, i, top, split);
        if (split < 0) sched_op(g, 1, QT_OP_GRAD_MB_PUSH);
        QT_A(step_op(g, QT_OP_GRAD_MB_FINALIZE), GRAD_MB_FINALIZE, leaves) = t->grad_accum;
    } else if (g->grad_units > 1) {
        /* units: every rank's q unit totals of each range exchanged and folded in the
         * one-rank tree's shape (in place of the tree total and the reduce-scatter) */
        for (int i = 0; i < g->n_ranges; i++)
            QT_A(step_op(g, QT_OP_GRAD_UNITS), GRAD_UNITS, range) = i;
    } else {
        QT_A(step_op(g, QT_OP_GRAD_TREE_TOTAL), GRAD_TREE_TOTAL, leaves) = leaves;
    }
    for (int i = 0; i < g->n_ranges; i++) {
        const qt_flat_range *r = &g->ranges[i];
        const int64_t off = g->grads_offset + 4 * r->lo, bytes = 4 * r->n;
        char name[160], axes[64];
        qt_cg_mask_name(r->reduce_mask, axes, sizeof axes);
        if (r->reduce_mask && !mb && g->grad_units <= 1) {
            snprintf(name, sizeof name, "gradients of range %d (reduce-scatter over %s)", i, axes);
            collective(g, 0, name, QT_COLL_REDUCE_SCATTER, r->reduce_mask, off, bytes);
        }
        if (r->reduce_mask && r->opt_mask != r->reduce_mask) {
            snprintf(name, sizeof name, "gradients of range %d (all-gather over %s)", i, axes);
            collective(g, 0, name, QT_COLL_ALL_GATHER, r->reduce_mask, off, bytes);
        }
    }
    QT_A(step_op(g, QT_OP_GRAD_NORMALISE), GRAD_NORMALISE, tokens) = tokens;
    step_op(g, QT_OP_ADAMW);
    for (int i = 0; i < g->n_ranges && !g->params_compact; i++) {
        const qt_flat_range *r = &g->ranges[i];
        if (!r->opt_mask) continue;
        char name[160], axes[64];
        snprintf(name, sizeof name, "parameters of range %d (all-gather over %s)", i,
                 qt_cg_mask_name(r->opt_mask, axes, sizeof axes));
        const int64_t eb = qt_cg_compute_bytes(s);  /* bf16: the compute copy is gathered */
        collective(g, 0, name, QT_COLL_ALL_GATHER, r->opt_mask,
                   (g->compute_offset ? g->compute_offset : g->params_offset) + eb * r->lo,
                   eb * r->n);
    }
}
