/* schedule/ep_overlap.c - the experts' host -> home exchanges beside compute
 * (collective_overlap: all, docs/overlap.md "The experts' all-to-alls"): each
 * MOE_RETURN_FWD and MOE_DISPATCH_BWD of the microbatch schedule becomes a start op
 * (MOE_RETURN_START / MOE_DISPATCH_BWD_START: counts and the split all-to-all-v) and a wait
 * op (_WAIT: completion and the unpack), with independent compute of the same layer between:
 * in the forward the shared expert (it reads only h2 and its weights), in the backward the
 * shared expert's backward and the router's.
 * The edit, inside the window of op p (the ops of p's layer and part around it, bounded by
 * any op that is not a RUN or WGRAD kind, by the other expert exchanges and by moved ops):
 *   A  = the ops before p the start depends on (closure under conflicts, below), in order;
 *   S  = the start;  N = the other ops before p, in order (still before the wait);
 *   B  = the ops after p that conflict neither with p nor with an op after p left behind;
 *   W  = the wait;   R = the rest after p, in order.
 * Two ops conflict when they name a common tensor that either writes, accumulates or uses
 * as scratch, or when both are weight gradients (their leaves' order stays). Every pair of
 * conflicting ops keeps its order, so every tensor sees the same writes and the same adds
 * in the same order: the blocking plan's bits. A window with nothing to place between
 * start and wait keeps the blocking op. Runs after the memory plan's form is chosen; the
 * caller plans the leaf windows and the arena again.
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "schedule/qt_cg_schedule.h"

/* The kinds that use ops_ep.c's count tables or exchange rows: never inside a window. */
static int exchange(int k)
{
    return k == QT_OP_MOE_DISPATCH_FWD || k == QT_OP_MOE_RETURN_FWD ||
           k == QT_OP_MOE_RETURN_BWD || k == QT_OP_MOE_DISPATCH_BWD ||
           k == QT_OP_MOE_ROUNDS_FWD || k == QT_OP_MOE_ROUNDS_BWD ||
           k == QT_OP_MOE_ROUNDS_WGRAD || k == QT_OP_MOE_RETURN_START ||
           k == QT_OP_MOE_RETURN_WAIT || k == QT_OP_MOE_DISPATCH_BWD_START ||
           k == QT_OP_MOE_DISPATCH_BWD_WAIT;
}

/* An op no window crosses: a step op (collectives, gathers, pushes) or a moved one; after
 * p also the next exchange. */
static int barrier(const qt_op *o, int after)
{
    const int c = qt_cg_op_class(o->kind);
    return (c != QT_OPC_RUN && c != QT_OPC_WGRAD) || (o->flags & QT_OPF_MOVED) ||
           (after && exchange(o->kind));
}

/* Whether slot k of o writes, accumulates or is scratch (else it reads). */
static int writes(const qt_op *o, int k)
{
    const char c = qt_cg_op_slots(o->kind)[k];
    return c == 'w' || c == 'a' || c == 's' || c == 'W' || c == 'A' || c == 'S';
}

/* Whether ops a and b conflict (file comment). skip_a0: a's slot t0 left out (the start
 * op does not touch the blocking op's y / dx). */
static int wgrad(const qt_op *o)
{
    return (o->flags & QT_OPF_WGRAD) || qt_cg_op_class(o->kind) == QT_OPC_WGRAD;
}

static int conflict(const qt_op *a, const qt_op *b, int skip_a0)
{
    if (wgrad(a) && wgrad(b)) return 1;
    const int na = (int)strlen(qt_cg_op_slots(a->kind)), nb = (int)strlen(qt_cg_op_slots(b->kind));
    for (int i = skip_a0 ? 1 : 0; i < na; i++) {
        if (a->t[i] < 0) continue;
        for (int j = 0; j < nb; j++)
            if (b->t[j] == a->t[i] && (writes(a, i) || writes(b, j))) return 1;
    }
    return 0;
}

/* The split kinds of a blocking exchange kind, or 0. */
static int start_kind(int k)
{
    return k == QT_OP_MOE_RETURN_FWD ? QT_OP_MOE_RETURN_START
           : k == QT_OP_MOE_DISPATCH_BWD ? QT_OP_MOE_DISPATCH_BWD_START : 0;
}

static int wait_kind(int k)
{
    return k == QT_OP_MOE_RETURN_FWD ? QT_OP_MOE_RETURN_WAIT : QT_OP_MOE_DISPATCH_BWD_WAIT;
}

/* Place the window [lo, hi) of exchange op i of old into g->mb (split when something goes
 * between start and wait). tag: 0 left, 1 A, 2 B (scratch of n entries). */
static void place(qt_cg_graph *g, const qt_op *old, int lo, int i, int hi, char *tag)
{
    const qt_op *p = &old[i];
    memset(tag + lo, 0, (size_t)(hi - lo));
    for (int j = i - 1; j >= lo; j--) {
        /* an exchange before p stays before the start (one in flight at a time) */
        int dep = exchange(old[j].kind) || conflict(p, &old[j], 1);
        for (int q = j + 1; q < i && !dep; q++) dep = tag[q] == 1 && conflict(&old[q], &old[j], 0);
        tag[j] = (char)(dep ? 1 : 0);
    }
    int between = 0;
    for (int j = lo; j < i; j++) between += tag[j] == 0;
    for (int j = i + 1; j < hi; j++) {
        int dep = conflict(p, &old[j], 0);
        for (int q = i + 1; q < j && !dep; q++) dep = tag[q] == 0 && conflict(&old[q], &old[j], 0);
        tag[j] = (char)(dep ? 0 : 2);
        between += tag[j] == 2;
    }
    if (!between) {  /* nothing to overlap: the blocking op, the window as it was */
        for (int j = lo; j < hi; j++) g->mb[g->nmb++] = old[j];
        return;
    }
    for (int j = lo; j < i; j++)
        if (tag[j] == 1) g->mb[g->nmb++] = old[j];
    qt_op *s = &g->mb[g->nmb++];
    *s = *p;
    s->kind = start_kind(p->kind);
    s->t[0] = QT_NONE;   /* y / dx: the wait's alone */
    for (int j = lo; j < i; j++)
        if (tag[j] == 0) g->mb[g->nmb++] = old[j];
    for (int j = i + 1; j < hi; j++)
        if (tag[j] == 2) g->mb[g->nmb++] = old[j];
    qt_op *w = &g->mb[g->nmb++];
    *w = *p;
    w->kind = wait_kind(p->kind);
    for (int j = i + 1; j < hi; j++)
        if (tag[j] == 0) g->mb[g->nmb++] = old[j];
}

int qt_cg_ep_overlap(qt_cg_graph *g)
{
    const int n = g->nmb;
    int *lay = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *lay);
    int *shift = qt_cg_alloc((size_t)(n + 1) * sizeof *shift);
    char *tag = qt_cg_alloc((size_t)(n ? n : 1));
    for (int o = 0, prev = -1; o < n; o++) prev = lay[o] = qt_cg_scan_op_layer(g, &g->mb[o], prev);
    qt_op *old = g->mb;
    g->capmb = 2 * n + 1;
    g->mb = qt_cg_alloc((size_t)g->capmb * sizeof *g->mb);
    g->nmb = 0;
    int splits = 0, done = 0;   /* old ops [0, done) placed */
    for (int i = 0; i < n; i++) {
        shift[i] = splits;
        if (!start_kind(old[i].kind) || lay[i] < 0) continue;
        const int part0 = i < g->n_fwd ? 0 : g->n_fwd, part1 = i < g->n_fwd ? g->n_fwd : n;
        int lo = i, hi = i + 1;
        while (lo > done && lo > part0 && !barrier(&old[lo - 1], 0) && lay[lo - 1] == lay[i]) lo--;
        while (hi < part1 && !barrier(&old[hi], 1) && lay[hi] == lay[i]) hi++;
        for (int j = done; j < lo; j++) g->mb[g->nmb++] = old[j];
        const int before = g->nmb;
        place(g, old, lo, i, hi, tag);
        const int split = g->nmb - before > hi - lo;
        splits += split;
        for (int j = i + 1; j < hi; j++) shift[j] = splits;
        done = hi;
        i = hi - 1;
    }
    for (int j = done; j < n; j++) g->mb[g->nmb++] = old[j];
    shift[n] = splits;
    /* the forward grows by its splits; the layers' forward op ranges with it */
    g->n_fwd += shift[g->n_fwd];
    for (int l = 0; l < g->n_layers_rec; l++) {
        g->layer_op0[l] += shift[g->layer_op0[l]];
        g->layer_op1[l] += shift[g->layer_op1[l]];
    }
    free(old);
    free(lay);
    free(shift);
    free(tag);
    return splits;
}
