/* validate_ep.c - start-up check of the split expert exchanges (qt_validate.h
 * qt_validate_ep_splits; qt_ops.def MOE_RETURN_START / _WAIT, MOE_DISPATCH_BWD_START / _WAIT,
 * collective_overlap: all, docs/overlap.md).
 * MOE_DISPATCH_FWD_START / _WAIT, MOE_RETURN_BWD_START / _WAIT.
 * Invariants: reads the plan only; no state; QT_OK or QT_E_PLAN after one message naming the
 * op. What it guarantees the ops of ops_ep.c: every start (a host -> home one with t0
 * QT_NONE, a home -> host one naming every slot: the transport writes its t0) is followed,
 * later in the same microbatch schedule, by exactly one wait of its kind naming the same
 * slots (t1.. of a host -> home one, all of a home -> host one) and attributes;
 * one exchange in flight at a time, and no other expert exchange op (whose count tables the
 * exchange in flight reads) and no COLL_START / COLL_WAIT (nor a split units exchange's
 * start or wait) between a start and its wait; the held-out eval's forward ends with none
 * in flight.
 */
#include <string.h>
#include "qt_validate.h"
#include "qt_interp.h"
#include "qt_err.h"

/* The kinds that fill or read ops_ep.c's count tables (or the rounds' exchanges). */
static int qt_ep_exchange_kind(int k)
{
    return k == QT_OP_MOE_DISPATCH_FWD || k == QT_OP_MOE_RETURN_FWD ||
           k == QT_OP_MOE_RETURN_BWD || k == QT_OP_MOE_DISPATCH_BWD ||
           k == QT_OP_MOE_ROUNDS_FWD || k == QT_OP_MOE_ROUNDS_BWD ||
           k == QT_OP_MOE_ROUNDS_WGRAD;
}

/* The start kind a wait kind completes (0: not a wait); *all: the start names every slot. */
static int qt_ep_start_of(int k, int *all)
{
    *all = k == QT_OP_MOE_DISPATCH_FWD_WAIT || k == QT_OP_MOE_RETURN_BWD_WAIT;
    return k == QT_OP_MOE_RETURN_WAIT         ? QT_OP_MOE_RETURN_START
           : k == QT_OP_MOE_DISPATCH_BWD_WAIT ? QT_OP_MOE_DISPATCH_BWD_START
           : k == QT_OP_MOE_DISPATCH_FWD_WAIT ? QT_OP_MOE_DISPATCH_FWD_START
           : k == QT_OP_MOE_RETURN_BWD_WAIT   ? QT_OP_MOE_RETURN_BWD_START
                                              : 0;
}

static int qt_ep_start_kind(int k)
{
    return k == QT_OP_MOE_RETURN_START || k == QT_OP_MOE_DISPATCH_BWD_START ||
           k == QT_OP_MOE_DISPATCH_FWD_START || k == QT_OP_MOE_RETURN_BWD_START;
}

int qt_validate_ep_splits(const qt_plan *p)
{
    /* the start in flight, copied: a scanned run's op lives in the cursor's buffer */
    qt_op start;
    const qt_op *open = NULL;
    int32_t at = -1;
    const int64_t eval_end = p->train.eval_interval > 0 ? p->train.eval_fwd_ops : -1;
    for (qt_mb_cursor c = qt_mb_begin(p); qt_mb_next(&c);) {
        const qt_op *op = c.op;
        const int k = op->kind;
        const char *why = NULL;
        int want, all;
        if (c.logical == eval_end && open)
            why = "the eval forward ends with the exchange started at this op in flight";
        else if (qt_ep_start_kind(k)) {
            if (open) why = "starts an expert exchange while another is in flight";
            else {
                start = *op;
                open = &start, at = c.logical;
                continue;
            }
        } else if ((want = qt_ep_start_of(k, &all)) != 0) {
            const size_t t0 = all ? 0 : 1;
            if (!open || open->kind != want) why = "waits for an expert exchange it did not start";
            else if ((open->t[0] == QT_NONE) != !all ||
                     memcmp(open->t + t0, op->t + t0, sizeof op->t - t0 * sizeof op->t[0]) ||
                     memcmp(open->a, op->a, sizeof op->a))
                why = "waits with other slots or attributes than its start";
            open = NULL;
        } else if (open && (qt_ep_exchange_kind(k) || k == QT_OP_COLL_START ||
                            k == QT_OP_COLL_WAIT || k == QT_OP_GRAD_MB_UNITS_START ||
                            k == QT_OP_GRAD_MB_UNITS_WAIT))
            why = "is another exchange or a split collective while an expert exchange is in flight";
        if (why)
            return qt_fail(QT_E_PLAN, "plan %s: microbatch op %d (%s) %s", p->run_name,
                           (int)c.logical, k < QT_OP_COUNT ? qt_kernel_table[k].name : "?", why);
    }
    if (open)
        return qt_fail(QT_E_PLAN, "plan %s: microbatch op %d (%s) starts an expert exchange "
                       "that is never waited for", p->run_name, (int)at,
                       qt_kernel_table[open->kind].name);
    return QT_OK;
}
