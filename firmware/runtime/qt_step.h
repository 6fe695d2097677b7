/* qt_step.h - the step schedule's state and helpers (step_ops.c).
 *
 * The step schedule (plan->step_ops) runs once per optimizer step after the last
 * microbatch, op by op through the kernel table's STEP wrappers (qt_ops.def): gradient
 * tree totals, gradient collectives, normalisation and the global norm, AdamW and the
 * parameter collectives. Every cross-rank float sum goes through fixed-pairing collectives
 * and every scalar through exact accumulators, so the bits depend only on the model and
 * the global batch (docs/design.md section 6).
 */
#ifndef QT_STEP_H
#define QT_STEP_H

#include <stdint.h>
#include "qt_ops.h"
#include "qt_exact.h"
#include "qt_metrics.h"
#include "qt_blocks.h"   /* this rank's blocks: qt_step_block, _param_at, _grad_at */

struct qt_step_state {
    int64_t step;              /* 0-based optimizer step */
    int64_t mb;                /* microbatch within the step (microbatch-end schedule) */
    qt_step_metrics *m;        /* grad_norm and fingerprint are written by the step ops */
    int64_t pads;              /* the microbatch's last `pads` sequences are padding (a batch
                                * that does not split evenly over the groups, issue 35:
                                * qt_runtime_pads): their weight-gradient leaves are -0.0,
                                * the kernels not run (the interpreter); 0 = none */
    int update_next;           /* set by the step schedule's walk (runtime.c): the op it runs
                                * next is ADAMW (never in the grads-only walk, which stops
                                * before it); then GRAD_FINALIZE / GRAD_NORMALISE leave their
                                * division to it and only read the gradient */
    float gdiv;                /* the divisor they left to that ADAMW (the step's token count;
                                * 0: the gradient region holds the normalised gradient) */
};

/* Called once by qt_runtime_init: remembers whether the parameters tile the flat region
 * in index order (then the update and the fingerprint fuse per chunk). */
void qt_step_init(const qt_plan *p);

/* The parameter fingerprint of the whole model on a mesh: this rank's optimizer blocks
 * (each counted by one rank), summed over the world. All ranks call it; *rc receives the
 * collective's code. */
uint64_t qt_step_fingerprint(const qt_ctx *ctx, int *rc);

/* bf16 plans with a flat compute copy: rounds this rank's master blocks into the copy and
 * runs the step schedule's parameter all-gathers, so every rank's copy is bf16(masters)
 * (after init and after a checkpoint load; the step's AdamW and its all-gathers do the same
 * each step). Nothing in other plans. All ranks call it; 0 or the collective's QT_E_*. */
int qt_step_publish_params(const qt_ctx *ctx, int64_t step);

/* Merges the exact accumulators of every member of group `mask` into *a (exact, so the
 * result does not depend on the group's size or order). 0 or QT_E_COMM. */
int qt_step_exact_merge(unsigned mask, qt_exact *a);

#endif
