/* schedule/overlap.c - the per-layer collectives beside compute (collective_overlap,
 * docs/overlap.md), in two edits of the microbatch schedule:
 *   before the arena is planned (qt_cg_overlap_moves): each group of per-layer parameter
 *     gathers (the PARAM_GATHERs whose windows are first read by the same op) is issued
 *     right after the previous group's all-gathers instead of right before its own, and
 *     each range's GRAD_MB_PUSH waits until the next range's reduce-scatter is due; the
 *     window and leaf-window lifetimes then cover the collectives in flight;
 *   after the collectives exist (qt_cg_overlap_split): each such all-gather becomes a
 *     COLL_START right after its PARAM_GATHER and a COLL_WAIT where it stood (before the
 *     first reader), each reduce-scatter a COLL_START where it stood (after its range's
 *     total) and a COLL_WAIT right before its push.
 * Invariants: the moves touch only those PARAM_GATHER and GRAD_MB_PUSH ops and are exact
 * inverses (moves(g, 0) restores the schedule layer_ops.c made); a gather moves only within
 * the forward or within the backward (and within a circular pipeline stage's repeat
 * chunk: a push waits for the next reduce-scatter only inside it too), by one group, and
 * only groups of at most QT_MAX_IN_FLIGHT - 1 gathers (with one reduce-scatter, the slots); one reduce-scatter is
 * in flight at a time (they share the comm scratch); the bits never change: the same
 * collectives, the same adds, only when they run.
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "memory/qt_cg_memory.h"
#include "schedule/qt_cg_schedule.h"

/* A per-layer placeholder COLLECTIVE (before qt_cg_step_schedule): 1 gather, 2 reduce. */
static int placeholder(const qt_op *o)
{
    if (o->kind != QT_OP_COLLECTIVE || QT_A(o, COLLECTIVE, coll) >= 0) return 0;
    return o->a[QT_CG_A_COLLECTIVE_GATHER] ? 1 : 2;
}

/* Whether op o is a PARAM_GATHER into a window with an all-gather, or the GRAD_MB_PUSH of
 * a range with a reduce-scatter: the ops the moves place. */
static int movable(const qt_cg_graph *g, const qt_op *o)
{
    if (o->kind == QT_OP_PARAM_GATHER)
        for (int k = 0; k < g->n_gather_win; k++)
            if (g->gather_win[2 * k] == QT_T(o, PARAM_GATHER, window)) return 1;
    if (o->kind == QT_OP_GRAD_MB_PUSH) {
        const int64_t r = QT_A(o, GRAD_MB_PUSH, r0);
        return QT_A(o, GRAD_MB_PUSH, r1) == r + 1 && g->ranges[r].reduce_mask != 0;
    }
    return 0;
}

/* The moved op of gather placeholder q (its window's PARAM_GATHER) or reduce placeholder q
 * (its range's push) among the n removed ops; NULL when there is none. */
static qt_op *partner(const qt_cg_graph *g, const qt_op *q, qt_op *moved, int n)
{
    const int64_t k = -1 - QT_A(q, COLLECTIVE, coll);
    for (int i = 0; i < n; i++) {
        const qt_op *o = &moved[i];
        if (placeholder(q) == 1 && o->kind == QT_OP_PARAM_GATHER &&
            QT_T(o, PARAM_GATHER, window) == g->gather_win[2 * k])
            return &moved[i];
        if (placeholder(q) == 2 && o->kind == QT_OP_GRAD_MB_PUSH &&
            QT_A(o, GRAD_MB_PUSH, r0) == k)
            return &moved[i];
    }
    return NULL;
}

/* Emit op o (flag MOVED set or cleared) into g->mb. */
static void emit(qt_cg_graph *g, const qt_op *o, int moved)
{
    qt_op *d = &g->mb[g->nmb++];
    *d = *o;
    d->flags = moved ? d->flags | QT_OPF_MOVED : d->flags & ~QT_OPF_MOVED;
}

/* The gather group that starts at base op i (a run of gather placeholders): its size. */
static int group_size(const qt_op *base, int n, int i)
{
    int e = i;
    while (e < n && placeholder(&base[e]) == 1) e++;
    return e - i;
}

/* The per-layer form's units (grad_mb_units with per-layer reduction: one GRAD_MB_UNITS per
 * range at its last weight gradient, schedule/layer_ops.c), one range late: the exchange of
 * every range but the last of its part starts where the blocking op stood
 * (GRAD_MB_UNITS_START) and completes, with the push, right before the next range's units
 * op (GRAD_MB_UNITS_WAIT, flagged MOVED: it belongs to the layer of the op before it), so
 * the next range's weight gradients run beside it. One units exchange in flight at a time
 * (they share the comm scratch's split part); a range whose window holds a blocking
 * reduce-scatter placeholder keeps its blocking op. First undoes an earlier call's split
 * (exact inverse: on 0 restores layer_ops.c's schedule). */
static void units_moves(qt_cg_graph *g, int on)
{
    int n = 0;
    for (int o = 0; o < g->nmb; o++) {
        if (g->mb[o].kind == QT_OP_GRAD_MB_UNITS_WAIT) continue;
        g->mb[n] = g->mb[o];
        if (g->mb[n].kind == QT_OP_GRAD_MB_UNITS_START) {
            const int64_t r = QT_A(&g->mb[n], GRAD_MB_UNITS_START, range);
            qt_cg_op_blank(&g->mb[n], QT_OP_GRAD_MB_UNITS);
            QT_A(&g->mb[n], GRAD_MB_UNITS, range) = r;
        }
        n++;
    }
    g->nmb = n;
    if (!on || !g->layer_reduce) return;
    /* the next units op of the same part (forward / backward, pipeline chunk) after each */
    int *next = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *next);
    int nsplit = 0, pending = -1, markers = 0, pmark = 0;
    for (int o = 0; o < n; o++) {
        next[o] = -1;
        const qt_op *op = &g->mb[o];
        markers += op->kind == QT_OP_PP_CHUNK;
        if (pending >= 0 && (markers != pmark || (o >= g->n_fwd) != (pending >= g->n_fwd) ||
                             placeholder(op) == 2))
            pending = -1;  /* another part, or a blocking reduce-scatter in between */
        if (op->kind != QT_OP_GRAD_MB_UNITS) continue;
        if (pending >= 0) {
            next[pending] = o;
            nsplit++;
        }
        pending = o;
        pmark = markers;
    }
    qt_op *old = g->mb;
    g->capmb = n + nsplit;
    g->mb = qt_cg_alloc((size_t)g->capmb * sizeof *g->mb);
    g->nmb = 0;
    int64_t wait_for = -1;  /* the range whose split exchange completes before op o */
    for (int o = 0; o < n; o++) {
        if (old[o].kind == QT_OP_GRAD_MB_UNITS && wait_for >= 0) {
            qt_op *w = &g->mb[g->nmb++];
            qt_cg_op_blank(w, QT_OP_GRAD_MB_UNITS_WAIT);
            QT_A(w, GRAD_MB_UNITS_WAIT, range) = wait_for;
            w->flags |= QT_OPF_MOVED;
            wait_for = -1;
        }
        qt_op *d = &g->mb[g->nmb++];
        *d = old[o];
        if (next[o] >= 0) {
            const int64_t r = QT_A(d, GRAD_MB_UNITS, range);
            qt_cg_op_blank(d, QT_OP_GRAD_MB_UNITS_START);
            QT_A(d, GRAD_MB_UNITS_START, range) = r;
            wait_for = r;
        }
    }
    free(old);
    free(next);
}

void qt_cg_overlap_moves(qt_cg_graph *g, int on)
{
    const int n = g->nmb;
    qt_op *old = g->mb, *base = qt_cg_alloc((size_t)n * sizeof *base);
    qt_op *moved = qt_cg_alloc((size_t)n * sizeof *moved);
    /* part[i]: the forward or the backward, and on a circular pipeline stage the repeat
     * chunk (the PP_CHUNK markers before base op i): nothing moves from one to another,
     * since the driver runs each chunk's forward and backward alone */
    int *part = qt_cg_alloc((size_t)n * sizeof *part);
    int nb = 0, nm = 0, markers = 0;
    for (int o = 0; o < n; o++) {
        if (movable(g, &old[o])) {
            moved[nm++] = old[o];
            continue;
        }
        markers += old[o].kind == QT_OP_PP_CHUNK;
        part[nb] = (o < g->n_fwd) + 2 * markers;
        base[nb++] = old[o];
    }
    g->mb = qt_cg_alloc((size_t)g->capmb * sizeof *g->mb);
    g->nmb = 0;
    int prev_group = -1;   /* the last gather group's start in base, while in its part */
    for (int i = 0; i < nb; i++) {
        const int kind = placeholder(&base[i]);
        if (kind == 1 && (i == 0 || placeholder(&base[i - 1]) != 1)) {
            /* a gather group: its PARAM_GATHERs right before it, unless they went early */
            const int size = group_size(base, nb, i);
            const int early = on && prev_group >= 0 && part[prev_group] == part[i] &&
                              size <= QT_MAX_IN_FLIGHT - 1;
            if (!early)
                for (int j = i; j < i + size; j++) {
                    const qt_op *p = partner(g, &base[j], moved, nm);
                    if (p) emit(g, p, 0);
                }
            for (int j = i; j < i + size; j++) emit(g, &base[j], 0);
            /* the next group's, issued now when it goes early */
            int nx = i + size;
            while (nx < nb && placeholder(&base[nx]) != 1) nx++;
            const int nsize = nx < nb ? group_size(base, nb, nx) : 0;
            if (on && nsize && part[nx] == part[i] && nsize <= QT_MAX_IN_FLIGHT - 1)
                for (int j = nx; j < nx + nsize; j++) {
                    const qt_op *p = partner(g, &base[j], moved, nm);
                    if (p) emit(g, p, 1);
                }
            prev_group = i;
            i += size - 1;
            continue;
        }
        if (kind == 2) {
            /* the previous reduce-scatter's push, when it waited for this one */
            int pv = i - 1;
            while (on && pv >= 0 && placeholder(&base[pv]) != 2) pv--;
            const qt_op *p =
                on && pv >= 0 && part[pv] == part[i] ? partner(g, &base[pv], moved, nm) : NULL;
            if (p) emit(g, p, 1);
            emit(g, &base[i], 0);
            int nx = i + 1;
            while (on && nx < nb && placeholder(&base[nx]) != 2) nx++;
            p = partner(g, &base[i], moved, nm);
            if (p && (!on || nx >= nb || part[nx] != part[i])) emit(g, p, 0);
            continue;
        }
        emit(g, &base[i], 0);
    }
    free(old);
    free(base);
    free(moved);
    free(part);
    units_moves(g, on);
}

/* The placeholder a split op pairs with: for op o, moved by qt_cg_overlap_moves, the
 * placeholder a0 (-1 - k) of the per-layer COLLECTIVE that completes what o starts (a
 * PARAM_GATHER's window) or that o pushes (a GRAD_MB_PUSH's range); 0 for none. */
static int64_t paired(const qt_cg_graph *g, const qt_op *o)
{
    if (!(o->flags & QT_OPF_MOVED)) return 0;   /* not moved: its collective stays blocking */
    for (int q = 0; q < g->nmb; q++) {
        const qt_op *c = &g->mb[q];
        const int kind = placeholder(c);
        const int64_t k = -1 - QT_A(c, COLLECTIVE, coll);
        if (kind == 1 && o->kind == QT_OP_PARAM_GATHER &&
            g->gather_win[2 * k] == QT_T(o, PARAM_GATHER, window))
            return -1 - k;
        if (kind == 2 && o->kind == QT_OP_GRAD_MB_PUSH && QT_A(o, GRAD_MB_PUSH, r0) == k)
            return -1 - k;
    }
    return 0;
}

/* A COLL_START or COLL_WAIT over the same placeholder as COLLECTIVE c. */
static void split_op(qt_op *q, int kind, const qt_op *c)
{
    qt_cg_op_blank(q, kind);
    QT_A(q, COLL_START, coll) = QT_A(c, COLLECTIVE, coll);
    q->a[QT_CG_A_COLLECTIVE_GATHER] = c->a[QT_CG_A_COLLECTIVE_GATHER];
}

void qt_cg_overlap_split(qt_cg_graph *g)
{
    const int n = g->nmb;
    int64_t *pair = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *pair);
    int extra = 0;
    for (int o = 0; o < n; o++) extra += (pair[o] = paired(g, &g->mb[o])) != 0;
    qt_op *old = g->mb;
    g->capmb = n + extra;
    g->mb = qt_cg_alloc((size_t)g->capmb * sizeof *g->mb);
    g->nmb = 0;
    int n_fwd = g->n_fwd;
    for (int o = 0; o < n; o++) {
        const qt_op *op = &old[o];
        if (pair[o] && op->kind == QT_OP_GRAD_MB_PUSH) {  /* wait, then push */
            qt_op c = *op;
            c.a[QT_CG_A_COLLECTIVE_GATHER] = 0;
            QT_A(&c, COLLECTIVE, coll) = pair[o];
            split_op(&g->mb[g->nmb++], QT_OP_COLL_WAIT, &c);
            n_fwd += o < g->n_fwd;
        }
        g->mb[g->nmb] = *op;
        qt_op *q = &g->mb[g->nmb++];
        const int kind = placeholder(op);
        int split = 0;
        for (int k = 0; kind && k < n && !split; k++)
            split = pair[k] == QT_A(op, COLLECTIVE, coll) &&
                    old[k].kind == (kind == 2 ? QT_OP_GRAD_MB_PUSH : QT_OP_PARAM_GATHER);
        /* an all-gather waits where it stood; a reduce-scatter starts there */
        if (split) split_op(q, kind == 2 ? QT_OP_COLL_START : QT_OP_COLL_WAIT, op);
        if (pair[o] && op->kind == QT_OP_PARAM_GATHER) {  /* window filled: start */
            qt_op c = *op;
            c.a[QT_CG_A_COLLECTIVE_GATHER] = 1;
            QT_A(&c, COLLECTIVE, coll) = pair[o];
            split_op(&g->mb[g->nmb++], QT_OP_COLL_START, &c);
            n_fwd += o < g->n_fwd;
        }
    }
    g->n_fwd = n_fwd;
    free(old);
    free(pair);
}
