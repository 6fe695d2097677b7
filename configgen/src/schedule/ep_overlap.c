/* schedule/ep_overlap.c - the experts' exchanges beside compute (collective_overlap: all,
 * docs/overlap.md "The experts' all-to-alls"): each MOE_DISPATCH_FWD, MOE_RETURN_FWD,
 * MOE_RETURN_BWD and MOE_DISPATCH_BWD of the microbatch schedule becomes a start op
 * (_START: counts and the split all-to-all-v) and a wait op (_WAIT: completion and, for the
 * host -> home kinds, the unpack), with independent compute of the same layer between: in
 * the forward the shared expert (it reads only h2 and its weights), shared between the
 * dispatch and the return; in the backward the shared expert's backward and the router's
 * beside the return, the experts' weight gradient beside the dispatch.
 * The edit, one exchange op p at a time in schedule order, inside the window of p (the ops
 * of p's layer and part around it, bounded by any op that is not a RUN or WGRAD kind, by
 * moved ops, and before p by the previous exchange's wait):
 *   A  = the ops before p the start depends on (closure under conflicts, below), in order;
 *   S  = the start;  N = the other ops before p, in order (still before the wait);
 *   B  = the ops after p that conflict neither with p nor with an op after p left behind
 *        (a later exchange q is always left behind; of the ops past q that could go, the
 *        first half (rounded up) goes to p, the rest stays for q);
 *   W  = the wait;   R = the rest after p, in order.
 * Two ops conflict when they name a common tensor that either writes, accumulates or uses
 * as scratch, or when both are weight gradients (their leaves' order stays). A host -> home
 * start does not touch t0 (y / dx, the wait's unpack writes it); a home -> host start names
 * t0 (xr / dyr: the transport writes it between start and wait). Every pair of conflicting
 * ops keeps its order, so every tensor sees the same writes and the same adds in the same
 * order: the blocking plan's bits. A window with nothing to place between start and wait
 * keeps the blocking op. Runs after the memory plan's form is chosen; the caller plans the
 * leaf windows and the arena again.
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
           k == QT_OP_MOE_DISPATCH_BWD_WAIT || k == QT_OP_MOE_DISPATCH_FWD_START ||
           k == QT_OP_MOE_DISPATCH_FWD_WAIT || k == QT_OP_MOE_RETURN_BWD_START ||
           k == QT_OP_MOE_RETURN_BWD_WAIT;
}

/* An op no window crosses: a step op (collectives, gathers, pushes) or a moved one. */
static int barrier(const qt_op *o)
{
    const int c = qt_cg_op_class(o->kind);
    return (c != QT_OPC_RUN && c != QT_OPC_WGRAD) || (o->flags & QT_OPF_MOVED);
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

/* The split kinds of a blocking exchange kind (start 0: not split). */
static int start_kind(int k)
{
    return k == QT_OP_MOE_RETURN_FWD     ? QT_OP_MOE_RETURN_START
           : k == QT_OP_MOE_DISPATCH_BWD ? QT_OP_MOE_DISPATCH_BWD_START
           : k == QT_OP_MOE_DISPATCH_FWD ? QT_OP_MOE_DISPATCH_FWD_START
           : k == QT_OP_MOE_RETURN_BWD   ? QT_OP_MOE_RETURN_BWD_START
                                         : 0;
}

static int wait_kind(int k)
{
    return k == QT_OP_MOE_RETURN_FWD     ? QT_OP_MOE_RETURN_WAIT
           : k == QT_OP_MOE_DISPATCH_BWD ? QT_OP_MOE_DISPATCH_BWD_WAIT
           : k == QT_OP_MOE_DISPATCH_FWD ? QT_OP_MOE_DISPATCH_FWD_WAIT
                                         : QT_OP_MOE_RETURN_BWD_WAIT;
}

/* Whether the start of kind k touches its t0 (home -> host: the host rows arrive there). */
static int start_t0(int k)
{
    return k == QT_OP_MOE_DISPATCH_FWD || k == QT_OP_MOE_RETURN_BWD;
}

/* Tag the ops after p (old[i]) in [i+1, hi): 2 (B) when it conflicts neither with p nor
 * with an op after p left behind (0), an exchange always left behind; past the first later
 * exchange q at most cap ops go to B (cap < 0: no limit). Returns the ops tagged B past q. */
static int tag_after(const qt_op *old, int i, int hi, int cap, char *tag)
{
    const qt_op *p = &old[i];
    int past_q = 0, n_past = 0;
    for (int j = i + 1; j < hi; j++) {
        int dep = exchange(old[j].kind) || conflict(p, &old[j], 0) ||
                  (past_q && cap >= 0 && n_past >= cap);
        for (int q = i + 1; q < j && !dep; q++) dep = tag[q] == 0 && conflict(&old[q], &old[j], 0);
        tag[j] = (char)(dep ? 0 : 2);
        n_past += past_q && tag[j] == 2;
        past_q |= exchange(old[j].kind);
    }
    return n_past;
}

/* Place the window [lo, hi) of exchange op i of old into g->mb (split when something goes
 * between start and wait). tag: 0 left, 1 A, 2 B (scratch of n entries). Returns the index
 * in g->mb after the wait (or after the blocking op kept). */
static int place(qt_cg_graph *g, const qt_op *old, int lo, int i, int hi, char *tag)
{
    const qt_op *p = &old[i];
    memset(tag + lo, 0, (size_t)(hi - lo));
    for (int j = i - 1; j >= lo; j--) {
        /* an exchange before p stays before the start (one in flight at a time) */
        int dep = exchange(old[j].kind) || conflict(p, &old[j], !start_t0(p->kind));
        for (int q = j + 1; q < i && !dep; q++) dep = tag[q] == 1 && conflict(&old[q], &old[j], 0);
        tag[j] = (char)(dep ? 1 : 0);
    }
    /* the ops past a later exchange q that p could take: half of them (rounded up) for p */
    const int n_past = tag_after(old, i, hi, -1, tag);
    tag_after(old, i, hi, (n_past + 1) / 2, tag);
    int between = 0;
    for (int j = lo; j < hi; j++) between += j < i ? tag[j] == 0 : j > i && tag[j] == 2;
    const int base = g->nmb;
    if (!between) {  /* nothing to overlap: the blocking op, the window as it was */
        for (int j = lo; j < hi; j++) g->mb[g->nmb++] = old[j];
        return base + (i - lo) + 1;
    }
    for (int j = lo; j < i; j++)
        if (tag[j] == 1) g->mb[g->nmb++] = old[j];
    qt_op *s = &g->mb[g->nmb++];
    *s = *p;
    s->kind = start_kind(p->kind);
    if (!start_t0(p->kind)) s->t[0] = QT_NONE;   /* y / dx: the wait's alone */
    for (int j = lo; j < i; j++)
        if (tag[j] == 0) g->mb[g->nmb++] = old[j];
    for (int j = i + 1; j < hi; j++)
        if (tag[j] == 2) g->mb[g->nmb++] = old[j];
    qt_op *w = &g->mb[g->nmb++];
    *w = *p;
    w->kind = wait_kind(p->kind);
    const int after = g->nmb;
    for (int j = i + 1; j < hi; j++)
        if (tag[j] == 0) g->mb[g->nmb++] = old[j];
    return after;
}

/* Split the first exchange at or after op `from` of g->mb (its window starting no earlier
 * than `from`). Returns the op index to go on from (after its wait), or -1 when there is
 * none left; *split: 1 when it was split (the schedule one op longer). */
static int split_one(qt_cg_graph *g, int from, int *split)
{
    const int n = g->nmb;
    int i = from, prev = -1;
    int *lay = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *lay);
    for (int o = 0; o < n; o++) prev = lay[o] = qt_cg_scan_op_layer(g, &g->mb[o], prev);
    while (i < n && (!start_kind(g->mb[i].kind) || lay[i] < 0)) i++;
    *split = 0;
    if (i >= n) {
        free(lay);
        return -1;
    }
    const int part0 = i < g->n_fwd ? 0 : g->n_fwd, part1 = i < g->n_fwd ? g->n_fwd : n;
    int lo = i, hi = i + 1;
    while (lo > from && lo > part0 && !barrier(&g->mb[lo - 1]) && lay[lo - 1] == lay[i]) lo--;
    while (hi < part1 && !barrier(&g->mb[hi]) && lay[hi] == lay[i]) hi++;
    free(lay);
    qt_op *old = g->mb;
    char *tag = qt_cg_alloc((size_t)n);
    g->capmb = n + 2;
    g->mb = qt_cg_alloc((size_t)g->capmb * sizeof *g->mb);
    g->nmb = 0;
    for (int j = 0; j < lo; j++) g->mb[g->nmb++] = old[j];
    const int next = place(g, old, lo, i, hi, tag);
    for (int j = hi; j < n; j++) g->mb[g->nmb++] = old[j];
    *split = g->nmb > n;
    if (*split) {
        /* the ops after p move by one; the forward and the layers' forward op ranges with
         * them (the window lies inside one layer and part) */
        g->n_fwd += g->n_fwd > i;
        for (int l = 0; l < g->n_layers_rec; l++) {
            g->layer_op0[l] += g->layer_op0[l] > i;
            g->layer_op1[l] += g->layer_op1[l] > i;
        }
    }
    free(old);
    free(tag);
    return next;
}

int qt_cg_ep_overlap(qt_cg_graph *g)
{
    int splits = 0, split;
    for (int from = 0; (from = split_one(g, from, &split)) >= 0;) splits += split;
    return splits;
}
