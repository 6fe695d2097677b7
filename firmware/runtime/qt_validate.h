/* qt_validate.h - the plan's start-up validation (validate.c), run by qt_runtime_init
 * before anything else touches the arena.
 */
#ifndef QT_VALIDATE_H
#define QT_VALIDATE_H

#include "qt_plan.h"
#include "qt_ops.h"
#include "qt_runtime.h"

/* The plan's compute dtype (validate_bf16.c): an fp32 plan has no bf16 tensor; a bf16
 * plan's staging region fits every op's bf16 staging and the native bf16 kinds' slots have
 * the dtypes their wrappers read. QT_OK, or QT_E_PLAN after one line. */
int qt_validate_bf16(const qt_plan *p, const qt_kernel_entry *table);

/* The split collectives of p's step, microbatch-end and microbatch schedules (qt_ops.def
 * COLL_START / COLL_WAIT, GRAD_MB_UNITS_START / _WAIT): each start waited for once, later,
 * in the same schedule (the microbatch-end's starts: in the next microbatch's schedule and
 * in the step's, by their QT_OPF_PREV_MB waits, qt_validate_mb_splits); at most
 * QT_MAX_IN_FLIGHT in flight; at most one reduce-scatter or units exchange in flight and no
 * blocking one (GRAD_MB_UNITS, GRAD_UNITS included) beside it (they share the comm scratch);
 * no blocking run of a collective in flight.
 * Reads p only. QT_OK, or QT_E_PLAN after one line naming the schedule, op and collective. */
int qt_validate_splits(const qt_plan *p);

/* The split expert exchanges of p's microbatch schedule (qt_ops.def MOE_RETURN_START /
 * _WAIT, MOE_DISPATCH_BWD_START / _WAIT, MOE_DISPATCH_FWD_START / _WAIT, MOE_RETURN_BWD_START
 * / _WAIT; validate_ep.c): each start waited for once, later,
 * by a wait of its kind naming the same slots and attributes; one in flight at a time; no
 * other expert exchange and no split collective between; none in flight at the end of the
 * eval forward. Reads p only. QT_OK, or QT_E_PLAN after one line naming the op. */
int qt_validate_ep_splits(const qt_plan *p);

/* The microbatch form's split reduce-scatter and split units exchange (ops flagged
 * QT_OPF_PREV_MB, validate_mb.c): the microbatch-end schedule's COLL_STARTs and
 * GRAD_MB_UNITS_STARTs (a units start only as its last op) waited for, in order, by the
 * microbatch schedule's flagged waits of their kind before its first weight gradient or
 * other step op (as `table` says), the step schedule opening with the same flagged ops; a
 * units wait always flagged; only in a plan with G > 1 microbatches in the microbatch form
 * without a pipeline. With per-layer reduction, unflagged GRAD_MB_UNITS_START / _WAIT pairs
 * of one range in the microbatch schedule (collective_overlap), in order, one in flight, no
 * weight gradient between writing a leaf window that meets the range's. Reads p only. QT_OK,
 * or QT_E_PLAN after one line naming the op. */
int qt_validate_mb_splits(const qt_plan *p, const qt_kernel_entry *table);

/* A pipeline plan (pipeline_stages > 1, issue 36) in a form the pipeline driver does not run
 * yet (several slices, circular repeats, bf16, the MTP head, ...): QT_E_PLAN
 * with a message naming the key, else QT_OK. Every rank decides it from the same static
 * fields (each stage's plan carries them alike), so all ranks refuse alike (no hang). */
int qt_validate_pipeline(const qt_plan *p);

/* Checks that plan p can run as rank o->rank of o->n_ranks with the kernel table `table`
 * (the same table the steps will use): a pipeline form the driver runs, ranks, plan hash, batch, io tensors, regions,
 * parameters and the step schedules. Reads p only. QT_OK, or QT_E_PLAN after printing
 * one message naming the plan and what does not fit. */
int qt_validate_plan(const qt_plan *p, const qt_run_opts *o, const qt_kernel_entry *table);

#endif
