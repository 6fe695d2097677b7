/* qt_runtime.h - start-up and the training step.
 *
 * qt_runtime_init validates the plan against this process (plan hash, rank count, arena
 * section bounds), backs the arena with huge pages where possible, prefaults it, runs the
 * init schedule and initialises parameters (seeded) unless a checkpoint is loaded later.
 * qt_runtime_step runs one optimizer step: for each microbatch, fill tokens, run the
 * microbatch schedule (forward, backward, per-sequence weight-gradient leaves pushed into the
 * pairwise trees), then finalise the trees, normalise by the global token count, compute the
 * gradient norm with the exact accumulator, clip, and apply AdamW. No heap, no syscalls but
 * the clock.
 */
#ifndef QT_RUNTIME_H
#define QT_RUNTIME_H

#include <stdint.h>
#include "qt_plan.h"
#include "../io/qt_io.h"

typedef struct qt_run_opts {
    uint64_t seed;
    float lr_override;         /* < 0: use the plan's */
    int64_t total_steps;       /* for the schedule: plan's schedule_steps unless > 0 */
} qt_run_opts;

int qt_runtime_init(const qt_plan *p, const qt_run_opts *o);
/* Initialise every parameter from the plan's init rules with the given seed (counter-based
 * RNG keyed by (seed, parameter index, element index): independent of sharding). */
void qt_params_init(const qt_plan *p, uint64_t seed);
/* One optimizer step `step` (0-based) over data d. Fills *m (loss, norm, lr, fingerprint). */
int qt_runtime_step(const qt_plan *p, const qt_data *d, int64_t step, qt_step_metrics *m);
/* Forward+backward only (no optimizer update): leaves the step's final, normalised and
 * unclipped gradient in the gradient region. Used by dump_grads and the tests. */
int qt_runtime_grads(const qt_plan *p, const qt_data *d, int64_t step, qt_step_metrics *m);
/* Order-independent fingerprint over (global element index, value bits) of all params. */
uint64_t qt_param_fingerprint(const qt_plan *p);

#endif
