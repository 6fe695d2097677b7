/* schedule/layer_ops.c - the microbatch schedule's per-layer collectives, inserted once the
 * flat ranges are known (memory/ranges.c) and before the arena is planned (their windows
 * are activations):
 *   per-layer reduction (gradient_reduce=layer): after the last WGRAD op of each range, the
 *     range's leaf-tree total, its reduce-scatter and its push into the microbatch tree;
 *   per-layer parameter gathers (param_gather=layer): before a range's first forward and
 *     first backward read, PARAM_GATHER into a gather window and its all-gather.
 * The collectives are placeholders (COLLECTIVE a0 = -1 - k) that qt_cg_step_schedule
 * resolves into the collectives table once the arena offsets exist.
 * Invariants: qt_cg_layer_reduces may run again (it drops the STEP ops an earlier call
 * left); qt_cg_layer_gathers runs once per graph (its clones rewrite the backward).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"
#include "memory/qt_cg_memory.h"
#include "schedule/qt_cg_schedule.h"

/* Per-layer reduction: right after the last WGRAD op of each flat range's parameters, the
 * range's leaf-tree total (GRAD_MB_TOTAL), its reduce-scatter over the range's reduction
 * group (a COLLECTIVE whose a0 is -1 - range until qt_cg_step_schedule creates it) and
 * its push into the microbatch tree (GRAD_MB_PUSH); with the microbatch form's units
 * (memory/memplan.c qt_cg_grad_mb_units) the range's GRAD_MB_UNITS in their place. STEP ops
 * left by an earlier call are dropped first. */
void qt_cg_layer_reduces(qt_cg_graph *g)
{
    int n = 0;
    for (int o = 0; o < g->nmb; o++)
        if (qt_cg_op_class(g->mb[o].kind) != QT_OPC_STEP) g->mb[n++] = g->mb[o];
    g->nmb = n;
    int *last = qt_cg_alloc((size_t)g->n_ranges * sizeof *last);
    int *range_of = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *range_of);
    for (int r = 0; r < g->n_ranges; r++) last[r] = -1;
    for (int p = 0; p < g->np; p++) range_of[p] = qt_cg_range_of(g, p);
    for (int o = 0; o < n; o++) {
        if (!(g->mb[o].flags & QT_OPF_WGRAD)) continue;
        for (int k = 0; k < 2; k++)
            if (g->mb[o].a[QT_A_WGRAD_PARAM + k] >= 0)
                last[range_of[g->mb[o].a[QT_A_WGRAD_PARAM + k]]] = o;
    }
    /* the microbatch form's units: one GRAD_MB_UNITS (exchange and push) per range instead */
    const int units = qt_cg_grad_mb_units(g) > 0;
    qt_op *old = g->mb;
    int cap = n + 3 * g->n_ranges;
    g->mb = qt_cg_alloc((size_t)cap * sizeof *g->mb);
    g->capmb = cap;
    g->nmb = 0;
    for (int o = 0; o < n; o++) {
        g->mb[g->nmb++] = old[o];
        for (int r = 0; r < g->n_ranges; r++) {
            if (last[r] != o) continue;
            if (units) {
                qt_op *q = &g->mb[g->nmb++];
                qt_cg_op_blank(q, QT_OP_GRAD_MB_UNITS);
                QT_A(q, GRAD_MB_UNITS, range) = r;
                continue;
            }
            const int kinds[3] = {QT_OP_GRAD_MB_TOTAL, QT_OP_COLLECTIVE, QT_OP_GRAD_MB_PUSH};
            for (int k = 0; k < 3; k++) {
                if (kinds[k] == QT_OP_COLLECTIVE && !g->ranges[r].reduce_mask) continue;
                qt_op *q = &g->mb[g->nmb++];
                qt_cg_op_blank(q, kinds[k]);
                if (kinds[k] == QT_OP_COLLECTIVE) {
                    QT_A(q, COLLECTIVE, coll) = -1 - r;
                } else { /* GRAD_MB_TOTAL and GRAD_MB_PUSH (QT_OPP_RANGE): [r, r + 1) */
                    QT_A(q, GRAD_MB_TOTAL, r0) = r;
                    QT_A(q, GRAD_MB_TOTAL, r1) = r + 1;
                }
            }
        }
    }
    free(old);
    free(last);
    free(range_of);
}

/* A COLLECTIVE placeholder for the all-gather of gather window `win` (range r), resolved
 * by qt_cg_step_schedule (QT_CG_A_COLLECTIVE_GATHER). */
static void gather_collective(qt_cg_graph *g, qt_op *q, int32_t win, int r)
{
    g->gather_win = qt_cg_grow(g->gather_win, &g->cap_gather_win, 2 * g->n_gather_win + 2,
                               sizeof *g->gather_win);
    g->gather_win[2 * g->n_gather_win] = win;
    g->gather_win[2 * g->n_gather_win + 1] = r;
    qt_cg_op_blank(q, QT_OP_COLLECTIVE);
    QT_A(q, COLLECTIVE, coll) = -1 - g->n_gather_win++;
    q->a[QT_CG_A_COLLECTIVE_GATHER] = 1;
}

/* A gather window: the compute copy of flat range r (n elements of the compute dtype,
 * replicated layout). */
static int32_t gather_window(qt_cg_graph *g, int r, const char *when)
{
    char name[96];
    snprintf(name, sizeof name, "gather.range%d.%s", r, when);
    const int64_t shape[1] = {g->ranges[r].n};
    const uint8_t axes[1] = {0};
    return qt_cg_add_tensor(g, name, QT_ROLE_ACT, g->s->dtype, 1, shape, axes);
}

/* A backward clone of parameter tensor id ("<name>~g"): the same parameter, read from the
 * backward's gather window. */
static int32_t param_clone(qt_cg_graph *g, int32_t id)
{
    const int32_t c = qt_cg_clone_tensor(g, id, "~g");
    g->ts[c].param = g->ts[id].param;
    return c;
}

/* Per-layer parameter gathers (params_compact): before the first forward op that reads a
 * parameter of flat range r, PARAM_GATHER into r's forward window and its all-gather over
 * r's optimizer axes; likewise before the first backward op (remat copies included) that
 * reads one, into a backward window, which the backward's parameter slots read through
 * clones. The parameter tensors point into the windows (alias_of); the windows are planned
 * like activations, so a layer's compute copy lives only around its forward and its
 * backward. Runs once per graph (the clones rewrite the backward): a second call is an
 * internal error, as is a call without per-layer reduction. */
int qt_cg_layer_gathers(qt_cg_graph *g, char *err, size_t errlen)
{
    if (!g->layer_reduce || g->n_gather_win)
        return qt_cg_fail(err, errlen, "per-layer parameter gathers need per-layer reduction "
                          "and are planned once (internal error)");
    const int nr = g->n_ranges;
    int *ffirst = qt_cg_alloc((size_t)(2 * nr) * sizeof *ffirst), *bfirst = ffirst + nr;
    int32_t *win = qt_cg_alloc((size_t)(2 * nr) * sizeof *win);
    int32_t *clone = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *clone);
    int *range_of = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *range_of);
    for (int r = 0; r < 2 * nr; r++) ffirst[r] = -1, win[r] = QT_NONE;
    for (int p = 0; p < g->np; p++) {
        clone[p] = QT_NONE;
        range_of[p] = qt_cg_range_of(g, p);
    }
    for (int o = 0; o < g->nmb; o++) {
        const char *slots = qt_cg_op_slots(g->mb[o].kind);
        for (int k = 0; slots[k]; k++) {
            const int32_t id = g->mb[o].t[k];
            if ((slots[k] | 32) != 'p' || id < 0 || g->ts[id].param < 0) continue;
            int *first = o < g->n_fwd ? ffirst : bfirst;
            if (first[range_of[g->ts[id].param]] < 0) first[range_of[g->ts[id].param]] = o;
        }
    }
    for (int r = 0; r < nr; r++) {
        if (ffirst[r] >= 0) win[r] = gather_window(g, r, "fwd");
        if (bfirst[r] >= 0) win[nr + r] = gather_window(g, r, "bwd");
    }
    for (int p = 0; p < g->np; p++) {
        const int r = range_of[p];
        const int32_t id = g->ps[p].tensor;
        const int64_t off = qt_cg_compute_bytes(g->s) * (g->ps[p].flat_offset - g->ranges[r].lo);
        if (win[nr + r] != QT_NONE) {
            clone[p] = param_clone(g, id);
            g->ts[clone[p]].alias_of = win[nr + r];
            g->ts[clone[p]].alias_off = off;
        }
        g->ts[id].alias_of = win[r];
        g->ts[id].alias_off = off;
    }
    qt_op *old = g->mb;
    const int n = g->nmb;
    g->mb = qt_cg_alloc((size_t)(n + 4 * nr) * sizeof *g->mb);
    g->capmb = n + 4 * nr;
    g->nmb = 0;
    int n_fwd = -1;  /* the forward grows by its gathers */
    for (int o = 0; o < n; o++) {
        if (o == g->n_fwd) n_fwd = g->nmb;
        for (int r = 0; r < 2 * nr; r++) {
            if (ffirst[r] != o) continue;
            qt_op *q = &g->mb[g->nmb++];
            qt_cg_op_blank(q, QT_OP_PARAM_GATHER);
            QT_T(q, PARAM_GATHER, window) = win[r];
            QT_A(q, PARAM_GATHER, range) = r % nr;
            if (g->ranges[r % nr].opt_mask) gather_collective(g, &g->mb[g->nmb++], win[r], r % nr);
        }
        qt_op op = old[o];
        if (o >= g->n_fwd) {
            const char *slots = qt_cg_op_slots(op.kind);
            for (int k = 0; slots[k]; k++)
                if ((slots[k] | 32) == 'p' && op.t[k] >= 0 && g->ts[op.t[k]].param >= 0 &&
                    clone[g->ts[op.t[k]].param] != QT_NONE)
                    op.t[k] = clone[g->ts[op.t[k]].param];
        }
        g->mb[g->nmb++] = op;
    }
    g->n_fwd = n_fwd >= 0 ? n_fwd : g->nmb;
    free(old);
    free(ffirst);
    free(win);
    free(clone);
    free(range_of);
    return 0;
}
