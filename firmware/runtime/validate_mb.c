/* validate_mb.c - start-up check of the microbatch form's split reduce-scatter and split
 * units exchange (qt_validate.h qt_validate_mb_splits; qt_ops.h QT_OPF_PREV_MB,
 * collective_overlap: all, docs/overlap.md "The microbatch form's reduce-scatter" and "The
 * microbatch form's units exchange").
 * Invariants: reads the plan only; no state; QT_OK or QT_E_PLAN after one message naming the
 * op. What it guarantees the interpreter: ops flagged QT_OPF_PREV_MB are COLL_WAITs,
 * GRAD_MB_PUSHes and GRAD_MB_UNITS_WAITs of a plan with a microbatch tree, G > 1, no pipeline
 * and no per-layer reduction; a GRAD_MB_UNITS_WAIT is always flagged and a
 * GRAD_MB_UNITS_START is the microbatch-end schedule's last op (nothing after it there
 * touches the unit levels it exchanges); the microbatch-end schedule's COLL_STARTs and
 * GRAD_MB_UNITS_STARTs are waited for, in order, by the microbatch schedule's flagged waits
 * of their kind (the same collective, the same range), which come before its first weight
 * gradient and its first other step op (the leaf tree's levels the split reads and writes
 * are written only by those), and the step schedule opens with the same flagged ops (the
 * last microbatch's, before GRAD_MB_FINALIZE). The in-flight rules themselves (one reduce-scatter,
 * nothing blocking beside it) are qt_validate_splits', which walks the microbatch and step
 * schedules with the microbatch-end's starts in flight.
 * The per-layer form (layer_reduce) has its own units split inside the microbatch schedule
 * (collective_overlap, docs/overlap.md "The per-layer form's units exchange"): unflagged
 * GRAD_MB_UNITS_START / _WAIT pairs of one range, in order, one in flight, and no weight
 * gradient between them writing a leaf window that meets the range's.
 */
#include <string.h>
#include "qt_validate.h"
#include "qt_interp.h"
#include "qt_err.h"

static int qt_mbs_fail(const qt_plan *p, const char *which, int64_t i, const char *why)
{
    return qt_fail(QT_E_PLAN, "plan %s: %s op %lld: %s (the microbatch form's split "
                   "reduce-scatter or units exchange, or the per-layer form's split units "
                   "exchange, docs/overlap.md)", p->run_name, which, (long long)i, why);
}

/* Whether two flagged ops are the same wait or push (kind and attributes). */
static int qt_mbs_same(const qt_op *a, const qt_op *b)
{
    return a->kind == b->kind && a->flags == b->flags && !memcmp(a->a, b->a, sizeof a->a);
}

/* The start a flagged wait completes: its kind and its collective or range; 0 for others. */
static int qt_mbs_start_of(const qt_op *op)
{
    return op->kind == QT_OP_COLL_WAIT ? QT_OP_COLL_START
           : op->kind == QT_OP_GRAD_MB_UNITS_WAIT ? QT_OP_GRAD_MB_UNITS_START : 0;
}

/* Whether flat ranges a and b's leaf windows (per-layer reduction: [leaf_lo, + n) of every
 * leaf-tree level) share an element. */
static int qt_mbs_windows_meet(const qt_plan *p, int32_t a, int32_t b)
{
    const qt_flat_range *x = &p->ranges[a], *y = &p->ranges[b];
    return x->leaf_lo < y->leaf_lo + y->n && y->leaf_lo < x->leaf_lo + x->n;
}

/* The per-layer form's split units exchange (layer_reduce, collective_overlap): an unflagged
 * GRAD_MB_UNITS_START of range r (*split = r) is completed by the same microbatch's next
 * unflagged GRAD_MB_UNITS_WAIT, of range r (*split = -1), and no weight gradient between
 * them writes a leaf window that meets r's (the exchange reads and writes r's unit windows
 * while in flight: r's own weight gradients, or another range's placed over r's window, would
 * change what it sends). The in-flight rules (one units exchange, nothing blocking beside
 * it) are qt_validate_splits'. */
static int qt_mbs_layer_units(const qt_plan *p, const qt_op *op, int32_t i, int32_t *split)
{
    if (!p->layer_reduce || (op->flags & QT_OPF_PREV_MB)) return QT_OK;
    if (op->kind == QT_OP_GRAD_MB_UNITS_START || op->kind == QT_OP_GRAD_MB_UNITS_WAIT) {
        const int64_t r = QT_A(op, GRAD_MB_UNITS, range);
        const int start = op->kind == QT_OP_GRAD_MB_UNITS_START;
        if (r < 0 || r >= p->n_ranges)
            return qt_mbs_fail(p, "microbatch", i, "a units op whose range is not the plan's");
        if (start && *split >= 0)
            return qt_mbs_fail(p, "microbatch", i, "a per-layer units exchange started while "
                               "another is in flight");
        if (!start && *split != r)
            return qt_mbs_fail(p, "microbatch", i, "waits for a per-layer units exchange the "
                               "schedule did not start (in this order)");
        *split = start ? (int32_t)r : -1;
        return QT_OK;
    }
    if (*split < 0 || !(op->flags & QT_OPF_WGRAD)) return QT_OK;
    for (int k = 0; k < 2; k++) {
        const int64_t pi = op->a[QT_A_WGRAD_PARAM + k];
        if (pi < 0 || pi >= p->n_params) continue;  /* the op's own check names it */
        const int32_t r = qt_plan_range_of(p, p->params[pi].flat_offset);
        if (r >= 0 && qt_mbs_windows_meet(p, r, *split))
            return qt_mbs_fail(p, "microbatch", i, "a weight gradient writes a leaf window "
                               "that meets the one of the range whose per-layer units "
                               "exchange is in flight");
    }
    return QT_OK;
}

int qt_validate_mb_splits(const qt_plan *p, const qt_kernel_entry *table)
{
    int n_start = 0;
    qt_op started[QT_MAX_IN_FLIGHT];
    for (int32_t i = 0; i < p->n_mbend_ops; i++) {
        const qt_op *op = &p->mbend_ops[i];
        if (op->flags & QT_OPF_PREV_MB)
            return qt_mbs_fail(p, "microbatch-end", i, "flagged PREV_MB outside the microbatch "
                               "and step schedules");
        if (op->kind == QT_OP_GRAD_MB_UNITS_WAIT)
            return qt_mbs_fail(p, "microbatch-end", i, "a units wait not flagged PREV_MB");
        if (op->kind == QT_OP_GRAD_MB_UNITS_START && i != p->n_mbend_ops - 1)
            return qt_mbs_fail(p, "microbatch-end", i, "a units exchange started before the "
                               "schedule's last op (the ops after it would run beside it)");
        if ((op->kind == QT_OP_COLL_START || op->kind == QT_OP_GRAD_MB_UNITS_START) &&
            n_start < QT_MAX_IN_FLIGHT)
            started[n_start++] = *op;
    }
    /* the microbatch schedule: the flagged ops, before any gradient write; and the
     * per-layer form's split units exchanges (in the same microbatch) */
    qt_op flagged[2 * QT_MAX_IN_FLIGHT];
    int n_flag = 0, n_wait = 0, written = 0;
    int32_t layer_split = -1;  /* the range whose per-layer split exchange is in flight */
    for (qt_mb_cursor c = qt_mb_begin(p); qt_mb_next(&c);) {
        const qt_op *op = c.op;
        const int step = op->kind < QT_OP_COUNT && table[op->kind].step;
        const int layer_units = p->layer_reduce && !(op->flags & QT_OPF_PREV_MB) &&
                                (op->kind == QT_OP_GRAD_MB_UNITS_START ||
                                 op->kind == QT_OP_GRAD_MB_UNITS_WAIT);
        if (!layer_units && (op->kind == QT_OP_GRAD_MB_UNITS_START ||
                             (op->kind == QT_OP_GRAD_MB_UNITS_WAIT &&
                              !(op->flags & QT_OPF_PREV_MB))))
            return qt_mbs_fail(p, "microbatch", c.logical, "a units exchange's start, or a "
                               "wait not flagged PREV_MB, without per-layer reduction (the "
                               "microbatch form's split exchange starts at the microbatch's "
                               "end and completes in the next one)");
        const int rc = qt_mbs_layer_units(p, op, c.logical, &layer_split);
        if (rc) return rc;
        if (!(op->flags & QT_OPF_PREV_MB)) {
            written |= (op->flags & QT_OPF_WGRAD) || step;
            continue;
        }
        if (op->kind != QT_OP_COLL_WAIT && op->kind != QT_OP_GRAD_MB_PUSH &&
            op->kind != QT_OP_GRAD_MB_UNITS_WAIT)
            return qt_mbs_fail(p, "microbatch", c.logical, "flagged PREV_MB but neither a "
                               "COLL_WAIT, a GRAD_MB_PUSH nor a GRAD_MB_UNITS_WAIT");
        if (p->n_mb_levels < 1 || p->train.grad_accum < 2 || p->layer_reduce ||
            p->pipeline_stages > 1)
            return qt_mbs_fail(p, "microbatch", c.logical, "flagged PREV_MB in a plan without "
                               "the microbatch form's G > 1 microbatches (or with a pipeline)");
        if (written)
            return qt_mbs_fail(p, "microbatch", c.logical, "completes the previous "
                               "microbatch's split exchange after this microbatch's first "
                               "weight gradient or step op (it writes what the exchange "
                               "reads)");
        if (n_flag == 2 * QT_MAX_IN_FLIGHT)
            return qt_mbs_fail(p, "microbatch", c.logical, "too many PREV_MB ops");
        const int sk = qt_mbs_start_of(op);
        if (sk && (n_wait >= n_start || started[n_wait].kind != sk ||
                   started[n_wait].a[0] != op->a[0]))
            return qt_mbs_fail(p, "microbatch", c.logical, "waits for a collective the "
                               "microbatch-end schedule did not start (in this order)");
        n_wait += sk != 0;
        flagged[n_flag++] = *op;
    }
    if (n_wait != n_start)
        return qt_mbs_fail(p, "microbatch-end", p->n_mbend_ops, "starts a collective no "
                           "PREV_MB wait of the microbatch schedule completes");
    if (layer_split >= 0)
        return qt_mbs_fail(p, "microbatch", p->n_mb_ops, "the microbatch schedule ends with a "
                           "per-layer split units exchange in flight");
    /* the step schedule opens with the same ops (the last microbatch's), and has no others */
    for (int32_t i = 0; i < p->n_step_ops; i++) {
        const qt_op *op = &p->step_ops[i];
        if ((i < n_flag) != !!(op->flags & QT_OPF_PREV_MB) ||
            (i < n_flag && !qt_mbs_same(op, &flagged[i])) ||
            op->kind == QT_OP_GRAD_MB_UNITS_START ||
            (op->kind == QT_OP_GRAD_MB_UNITS_WAIT && !(op->flags & QT_OPF_PREV_MB)))
            return qt_mbs_fail(p, "step", i, "the step schedule must open with the microbatch "
                               "schedule's PREV_MB ops, in order, and have no other (nor a "
                               "units start or unflagged wait)");
    }
    return QT_OK;
}
