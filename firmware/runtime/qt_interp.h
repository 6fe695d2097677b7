/* qt_interp.h - the plan interpreter: runs op records through a kernel table.
 *
 * The kernel table is a parameter (the firmware passes qt_kernel_table; unit tests pass
 * their own) so the schedule walker and the gradient trees can be tested without kernels.
 */
#ifndef QT_INTERP_H
#define QT_INTERP_H

#include <stdint.h>
#include "qt_ops.h"

#define QT_INTERP_MAX_PARAMS (1 << 16)

/* Checks every op of both schedules against the table (kind in range, wrapper present for
 * the op's flavour), every WGRAD op's parameter slots (a8, a9), that each parameter is
 * named by exactly one WGRAD slot, that the leaf scratch holds the two params of any WGRAD
 * op, that the plan has exactly the tree levels micro_batch*grad_accum leaves need and that
 * the gradient region is the top one (grads_offset == tree_offset[n_tree_levels-1]).
 * Prints one line naming the op/param on failure. Returns 0 or QT_E_PLAN. */
int qt_interp_validate(const qt_plan *p, const qt_kernel_entry *table);

/* Runs the init schedule once, in order (ctx: the plan, its arena, the rank's place). */
void qt_interp_run_init(const qt_ctx *ctx, const qt_kernel_entry *table);

/* The forward only (held-out evaluation, issue 33): the microbatch schedule's logical ops
 * [0, n_ops) (the plan's train.eval_fwd_ops: the forward, ending with the cross entropy,
 * which leaves the per-sequence losses in loss_seq), run as qt_interp_run_microbatch runs
 * them; no weight-gradient leaf exists before n_ops. */
void qt_interp_run_forward(const qt_ctx *ctx, const qt_kernel_entry *table, int64_t n_ops,
                           qt_step_state *st);
/* As qt_interp_run_forward over the logical ops [lo, hi) only (a circular pipeline stage's
 * chunk of the eval forward, runtime/pipeline.c). */
void qt_interp_run_forward_range(const qt_ctx *ctx, const qt_kernel_entry *table, int64_t lo,
                                 int64_t hi, qt_step_state *st);

/* Runs the microbatch schedule for microbatch `mb` (0-based within the step; inputs must
 * already be filled). Plain ops call table[kind].run. WGRAD ops call table[kind].wgrad
 * once per sequence s, into zeroed leaf buffers, and push leaf mb*micro_batch + s into the
 * trees of the op's parameters (tree levels and leaf scratch regions of the arena, the
 * parameter at its leaf_offset; an odd leaf of a writing kind is offered to the wrapper
 * as a carry, ctx->wgrad_epi, which the kernel may store itself: qt_tree_carry). STEP ops (per-layer reduction plans only) call
 * table[kind].step with *st (st->mb = mb, set by the caller). An op that fails (a
 * collective) stores its code in *ctx->status; the walk then stops. */
void qt_interp_run_microbatch(const qt_ctx *ctx, const qt_kernel_entry *table, int64_t mb,
                              qt_step_state *st);

/* As qt_interp_run_microbatch over the logical microbatch ops [lo, hi) only (a circular
 * pipeline stage's chunk: its forward, or its backward, runtime/pipeline.c). */
void qt_interp_run_range(const qt_ctx *ctx, const qt_kernel_entry *table, int64_t lo, int64_t hi,
                         int64_t mb, qt_step_state *st);

/* Completes the leaf-tree total of every parameter whose flat offset lies in [lo, hi), in
 * place in the leaf tree's top level (at its leaf_offset): over the step's leaves into the
 * gradient region (one tree, after the last microbatch), or, with a microbatch tree
 * (n_mb_levels > 0), over one microbatch's leaves into the microbatch total. Adds the
 * lower occupied levels (see qt_tree_finalize_range); reads them, writes the top level. */
void qt_interp_finalize_grads(const qt_plan *p, int64_t lo, int64_t hi);
/* The same for flat elements [off, off+n) only (one-rank plans: leaf_offset = flat_offset). */
void qt_interp_finalize_grads_range(const qt_plan *p, int64_t off, int64_t n);

/* Opt-in timing (qtrain profile=1): seconds summed over all calls, per op kind, split for
 * WGRAD ops into zeroing the leaf buffers, the kernel and the tree pushes. */
typedef struct qt_interp_prof {
    double run_s[QT_OP_COUNT], wgrad_s[QT_OP_COUNT];
    int64_t run_calls[QT_OP_COUNT], wgrad_calls[QT_OP_COUNT];
    double leaf_zero_s, tree_push_s;
} qt_interp_prof;

/* Accumulate timings into *prof from now on (NULL: stop; no clock calls at all then). */
void qt_interp_set_profile(qt_interp_prof *prof);
/* CLOCK_MONOTONIC in seconds. */
double qt_interp_now(void);

#endif
