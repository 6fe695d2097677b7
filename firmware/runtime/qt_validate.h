/* qt_validate.h - the plan's start-up validation (validate.c), run by qt_runtime_init
 * before anything else touches the arena.
 */
#ifndef QT_VALIDATE_H
#define QT_VALIDATE_H

#include "qt_plan.h"
#include "qt_ops.h"
#include "qt_runtime.h"

/* Checks that plan p can run as rank o->rank of o->n_ranks with the kernel table `table`
 * (the same table the steps will use): ranks, plan hash, batch, io tensors, regions,
 * parameters and the step schedules. Reads p only. QT_OK, or QT_E_PLAN after printing
 * one message naming the plan and what does not fit. */
int qt_validate_plan(const qt_plan *p, const qt_run_opts *o, const qt_kernel_entry *table);

#endif
