/* check/plan.c - the memory plan's invariants, re-derived from the final plan rather than
 * trusted from the planner (memory/): the flat regions (tree levels, gradient region, Adam
 * blocks, compute copy, bf16 staging, scratch and staging pairwise disjoint below the
 * activations), the flat ranges'
 * split over their groups, the per-layer leaf windows, every tensor's alignment and bounds,
 * every parameter at its flat offset (or in its gather window), and no two live
 * activations sharing bytes.
 * Invariant: reads the graph only; the first violation is the error.
 */
#include <stdlib.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "memory/qt_cg_memory.h"
#include "check/qt_cg_check.h"

/* The flat regions: the tree levels the step's leaf count needs, the gradient region being
 * the top one, and params, Adam moments, levels and leaf scratch pairwise disjoint, below
 * the activations. */
static int check_regions(const qt_cg_graph *g, char *err, size_t errlen)
{
    int64_t seqs = 0, lv = 0;
    const int64_t G = g->s->tr.grad_accum;
    for (int p = 0; p < g->np; p++) {
        const int64_t n = g->n_mb_levels ? g->ps[p].leaves / G : g->ps[p].leaves;
        if (n > seqs) seqs = n;
    }
    while (seqs >> lv) lv++;
    lv += g->n_mb_levels;
    if (g->grad_units > 1) {  /* the units' own levels, then the q unit levels */
        lv = 0;
        while ((seqs / g->grad_units) >> (lv + 1)) lv++;
        lv += g->grad_units;
    }
    if (g->grad_mb_units > 0) {  /* log2 max U_p, the q unit levels, the units' counter */
        int64_t umax = 1;
        const int mbl = qt_cg_grad_mb_levels(g, &umax);
        const int64_t n = (int64_t)1 << (mbl - 1);
        lv = 0;
        while (umax >> (lv + 1)) lv++;
        lv += g->grad_mb_units + mbl;
        if (g->n_mb_levels != mbl || g->grad_units > 1)
            return qt_cg_fail(err, errlen, "%d microbatch-tree levels, the units' counter over "
                              "%lld needs %d (one form of units)",
                              g->n_mb_levels, (long long)n, mbl);
    }
    if (g->n_tree_levels != lv || lv < 1 || lv > QT_MAX_TREE_LEVELS)
        return qt_cg_fail(err, errlen, "%d tree levels, %lld sequences per step need %lld",
                          g->n_tree_levels, (long long)seqs, (long long)lv);
    if (g->grads_offset != g->tree_offset[lv - 1])
        return qt_cg_fail(err, errlen, "gradient region at %lld is not the top tree level "
                          "(%lld)", (long long)g->grads_offset,
                          (long long)g->tree_offset[lv - 1]);
    enum { NREG = 8 + QT_MAX_TREE_LEVELS };
    int64_t lo[NREG], hi[NREG];
    const int64_t pb = 4 * g->n_flat, ab = 4 * g->adam_elems;
    const int bf16 = g->s->dtype == QT_BF16;
    const int64_t params_b = g->params_compact || bf16 ? ab : pb;
    if (g->compute_offset && (!bf16 || g->params_compact))
        return qt_cg_fail(err, errlen, "a compute copy region in a plan without one");
    int64_t cover = 0, adam_sum = 0;
    for (int i = 0; i < g->n_ranges; i++) {
        const qt_flat_range *r = &g->ranges[i];
        if (r->lo != cover || r->n % (qt_cg_flat_align(g->s) * qt_cg_group_size(g->s, r->reduce_mask)) ||
            (r->opt_mask & ~r->reduce_mask) || r->adam_lo != adam_sum)
            return qt_cg_fail(err, errlen, "flat range %d [%lld, +%lld) does not split over its "
                              "groups", i, (long long)r->lo, (long long)r->n);
        cover += r->n;
        adam_sum += r->n / qt_cg_group_size(g->s, r->opt_mask);
    }
    if (g->n_ranges < 1 || cover != g->n_flat || g->n_flat < g->n_param_elems ||
        adam_sum != g->adam_elems)
        return qt_cg_fail(err, errlen, "flat ranges cover %lld of %lld elements (Adam %lld of "
                          "%lld)", (long long)cover, (long long)g->n_flat, (long long)adam_sum,
                          (long long)g->adam_elems);
    int n = 0;
    lo[n] = g->params_offset, hi[n] = lo[n] + params_b, n++;
    lo[n] = g->adam_m_offset, hi[n] = lo[n] + ab, n++;
    lo[n] = g->adam_v_offset, hi[n] = lo[n] + ab, n++;
    if (g->compute_offset) lo[n] = g->compute_offset, hi[n] = lo[n] + 2 * g->n_flat, n++;
    if ((g->bf16_stage_offset || g->bf16_stage_elems) && !bf16)
        return qt_cg_fail(err, errlen, "a bf16 staging region in a float32 plan");
    if (bf16)
        lo[n] = g->bf16_stage_offset, hi[n] = lo[n] + 4 * g->bf16_stage_elems, n++;
    lo[n] = g->leaf_scratch_offset, hi[n] = lo[n] + 4 * g->leaf_scratch_elems, n++;
    lo[n] = g->comm_scratch_offset, hi[n] = lo[n] + 4 * g->comm_scratch_elems, n++;
    lo[n] = g->staging_offset, hi[n] = lo[n] + 4 * g->staging_elems, n++;
    for (int l = 0; l < lv; l++)
        lo[n] = g->tree_offset[l], hi[n] = lo[n] + 4 * qt_cg_tree_level_elems(g, l), n++;
    for (int i = 0; i < n; i++) {
        if (lo[i] < 0 || lo[i] % QT_TENSOR_ALIGN || hi[i] > g->act_offset)
            return qt_cg_fail(err, errlen, "flat region [%lld, %lld) misaligned or not below "
                              "the activations (%lld)", (long long)lo[i], (long long)hi[i],
                              (long long)g->act_offset);
        for (int j = i + 1; j < n; j++)
            if (lo[i] < hi[j] && lo[j] < hi[i])
                return qt_cg_fail(err, errlen, "flat regions [%lld, %lld) and [%lld, %lld) "
                                  "overlap", (long long)lo[i], (long long)hi[i],
                                  (long long)lo[j], (long long)hi[j]);
    }
    return 0;
}

/* Per-layer reduction: every range is totalled, (reduce-scattered) and pushed exactly once
 * per microbatch, after the last WGRAD of its parameters; the leaf windows of two ranges
 * whose uses (first WGRAD .. push, or .. the split units exchange's wait) overlap share no
 * element; a split units exchange is waited for before the next units op. */
static int check_windows(const qt_cg_graph *g, char *err, size_t errlen)
{
    if (!g->layer_reduce) return 0;
    int64_t *live = qt_cg_alloc((size_t)(2 * g->n_ranges) * sizeof *live);
    int rc = 0;
    int64_t split = -1;  /* the range whose split units exchange is in flight */
    for (int r = 0; r < g->n_ranges; r++) live[2 * r] = live[2 * r + 1] = -1;
    for (int o = 0; o < g->nmb && !rc; o++) {
        const qt_op *op = &g->mb[o];
        if (op->kind == QT_OP_GRAD_MB_PUSH || op->kind == QT_OP_GRAD_MB_UNITS ||
            op->kind == QT_OP_GRAD_MB_UNITS_START) {
            /* the push, or the units' exchange and push (one range: a0), or its split start */
            const int64_t r = QT_A(op, GRAD_MB_PUSH, r0),
                          r1 = op->kind == QT_OP_GRAD_MB_PUSH ? QT_A(op, GRAD_MB_PUSH, r1) : r + 1;
            if (r1 != r + 1 || r < 0 || r >= g->n_ranges || live[2 * r + 1] >= 0)
                rc = qt_cg_fail(err, errlen, "microbatch op %d pushes ranges [%lld, %lld): "
                                "expected one range, once", o, (long long)r,
                                (long long)r1);
            else live[2 * r + 1] = o;
            if (!rc && op->kind == QT_OP_GRAD_MB_UNITS_START) split = r;
        }
        if (op->kind == QT_OP_GRAD_MB_UNITS_WAIT) {
            /* the split units exchange's wait and push (schedule/overlap.c): the window lives
             * until it; one exchange in flight, waited for before the next units op */
            const int64_t r = QT_A(op, GRAD_MB_UNITS_WAIT, range);
            if (r != split)
                rc = qt_cg_fail(err, errlen, "microbatch op %d waits for range %lld's units "
                                "exchange, expected range %lld's", o, (long long)r,
                                (long long)split);
            else live[2 * r + 1] = o;
            split = -1;
        } else if (split >= 0 && (op->kind == QT_OP_GRAD_MB_UNITS ||
                                  (op->kind == QT_OP_GRAD_MB_UNITS_START &&
                                   QT_A(op, GRAD_MB_UNITS_START, range) != split))) {
            rc = qt_cg_fail(err, errlen, "microbatch op %d: a units exchange beside range "
                            "%lld's split one", o, (long long)split);
        }
        if (!(op->flags & QT_OPF_WGRAD)) continue;
        for (int k = 0; k < 2 && !rc; k++) {
            const int64_t pi = op->a[QT_A_WGRAD_PARAM + k];
            if (pi < 0) continue;
            const int r = qt_cg_range_of(g, (int)pi);
            if (live[2 * r + 1] >= 0)
                rc = qt_cg_fail(err, errlen, "WGRAD op %d of %s runs after its range %d was "
                                "pushed", o, g->ps[pi].name, r);
            if (live[2 * r] < 0) live[2 * r] = o;
        }
    }
    if (!rc && split >= 0)
        rc = qt_cg_fail(err, errlen, "range %lld's split units exchange is never waited for",
                        (long long)split);
    for (int r = 0; r < g->n_ranges && !rc; r++) {
        if (live[2 * r + 1] < 0)
            rc = qt_cg_fail(err, errlen, "flat range %d is never pushed into the microbatch tree", r);
        for (int q = 0; q < r && !rc; q++) {
            const qt_flat_range *a = &g->ranges[q], *b = &g->ranges[r];
            if (live[2 * q] <= live[2 * r + 1] && live[2 * r] <= live[2 * q + 1] &&
                a->leaf_lo < b->leaf_lo + b->n && b->leaf_lo < a->leaf_lo + a->n)
                rc = qt_cg_fail(err, errlen, "the leaf windows of flat ranges %d and %d overlap "
                                "while both are in use", q, r);
        }
    }
    free(live);
    return rc;
}

/* The microbatch form's split reduce-scatter or units exchange (schedule/step.c,
 * QT_OPF_PREV_MB): its wait and push come before the microbatch schedule's first weight
 * gradient and first other step op, the only ops that write the leaf tree's levels it reads
 * (the top one, or the unit levels). */
static int check_prev_mb(const qt_cg_graph *g, char *err, size_t errlen)
{
    int written = 0;
    for (int o = 0; o < g->nmb; o++) {
        const qt_op *op = &g->mb[o];
        if (!(op->flags & QT_OPF_PREV_MB)) {
            written |= (op->flags & QT_OPF_WGRAD) || qt_cg_op_class(op->kind) == QT_OPC_STEP ||
                       qt_cg_op_class(op->kind) == QT_OPC_WGRAD;
            continue;
        }
        if (written)
            return qt_cg_fail(err, errlen, "microbatch op %d (%s) completes the previous "
                              "microbatch's split exchange after a weight gradient or step op "
                              "that writes what it reads", o, qt_cg_op_name(op->kind));
    }
    return 0;
}

int qt_cg_check_plan(const qt_cg_graph *g, char *err, size_t errlen)
{
    if (g->arena_bytes % QT_ARENA_ALIGN)
        return qt_cg_fail(err, errlen, "arena size %lld is not a multiple of 2 MiB",
                          (long long)g->arena_bytes);
    int rc = check_regions(g, err, errlen);
    if (!rc) rc = check_windows(g, err, errlen);
    if (!rc) rc = check_prev_mb(g, err, errlen);
    if (!rc) rc = qt_cg_check_dtypes(g, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < g->nt; i++) {
        const qt_tensor *t = &g->ts[i].t;
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        if (n != t->numel)
            return qt_cg_fail(err, errlen, "tensor %s: numel %lld != product of shape %lld",
                              t->name, (long long)t->numel, (long long)n);
        if (t->offset % QT_TENSOR_ALIGN)
            return qt_cg_fail(err, errlen, "tensor %s: offset %lld not 64-byte aligned", t->name,
                              (long long)t->offset);
        const int64_t tb = t->numel * qt_dtype_bytes(t->dtype);
        if (t->dtype == QT_BF16 && g->s->dtype != QT_BF16)
            return qt_cg_fail(err, errlen, "tensor %s: bf16 in a float32 plan", t->name);
        if (t->offset < 0 || t->offset + tb > g->arena_bytes)
            return qt_cg_fail(err, errlen, "tensor %s: [%lld, +%lld) outside the arena", t->name,
                              (long long)t->offset, (long long)tb);
        if (qt_cg_planned(&g->ts[i]) && t->offset < g->act_offset)
            return qt_cg_fail(err, errlen, "tensor %s: below the activation region", t->name);
    }
    for (int p = 0; p < g->np; p++) {
        const qt_param *q = &g->ps[p];
        const qt_tensor *t = &g->ts[q->tensor].t;
        const qt_cg_tensor *ct = &g->ts[q->tensor];
        const int64_t cb = qt_cg_compute_bytes(g->s);
        const int64_t want = ct->alias_of >= 0
            ? g->ts[ct->alias_of].t.offset + cb * (q->flat_offset - g->ranges[qt_cg_range_of(g, p)].lo)
            : (g->compute_offset ? g->compute_offset : g->params_offset) + cb * q->flat_offset;
        if (t->offset != want || q->numel != t->numel)
            return qt_cg_fail(err, errlen, "param %s: not at its flat offset (or its place in its "
                              "gather window)", q->name);
        if (q->flat_offset % qt_cg_flat_align(g->s))
            return qt_cg_fail(err, errlen, "param %s: flat offset not %lld-element aligned", q->name,
                              (long long)qt_cg_flat_align(g->s));
        if (t->dtype != (g->s->dtype == QT_BF16 ? QT_BF16 : QT_F32))
            return qt_cg_fail(err, errlen, "param %s: compute copy not in the plan's dtype",
                              q->name);
        for (int o = 0; o < p; o++) {
            const qt_param *u = &g->ps[o];
            if (q->flat_offset < u->flat_offset + u->numel && u->flat_offset < q->flat_offset + q->numel)
                return qt_cg_fail(err, errlen, "param %s overlaps %s", q->name, u->name);
        }
        if (q->flat_offset + q->numel > g->n_param_elems)
            return qt_cg_fail(err, errlen, "param %s outside the flat region", q->name);
        if (qt_cg_tree_leaves(g, p) > 1 && q->numel > g->leaf_scratch_elems)
            return qt_cg_fail(err, errlen, "param %s larger than the leaf scratch", q->name);
    }
    for (int i = 0; i < g->nt; i++) {
        const qt_cg_tensor *a = &g->ts[i];
        if (!qt_cg_planned(a)) continue;
        for (int j = i + 1; j < g->nt; j++) {
            const qt_cg_tensor *b = &g->ts[j];
            if (!qt_cg_planned(b) || !qt_cg_lives_overlap(a, b)) continue;
            if (a->t.offset < b->t.offset + b->t.numel * qt_dtype_bytes(b->t.dtype) &&
                b->t.offset < a->t.offset + a->t.numel * qt_dtype_bytes(a->t.dtype))
                return qt_cg_fail(err, errlen, "tensors %s [ops %d..%d] and %s [ops %d..%d] are "
                                  "live together and share bytes", a->t.name, a->first, a->last,
                                  b->t.name, b->first, b->last);
        }
    }
    return 0;
}
