/* qt_blocks.h - where this rank's share of each flat range lives (blocks.c): its optimizer
 * block and its reduce block of a range, and the address of a master parameter or gradient
 * element in a full or compact region. Shared by parameter init and fingerprint
 * (params_init.c), the step ops (step_ops.c) and checkpoint gathering (ckpt_gather.c).
 *
 * Invariants: pure functions of the plan and this rank's mesh coordinates (qt_comm group
 * size and index); no state, no heap, no collectives.
 */
#ifndef QT_BLOCKS_H
#define QT_BLOCKS_H

#include <stdint.h>
#include "qt_plan.h"

/* This rank's optimizer block of flat range `range` (qt_plan.h qt_flat_range): [*lo, *lo +
 * *n), the whole range when its optimizer state is not split. */
void qt_step_block(const qt_plan *p, int32_t range, int64_t *lo, int64_t *n);

/* This rank's reduce block of flat range `range` (where the reduce-scatter leaves it). */
void qt_step_reduce_block(const qt_plan *p, int32_t range, int64_t *lo, int64_t *n);

/* The master parameter element at flat index `flat` of range `range`: in this rank's
 * optimizer block of the range when the parameter region is compact (qt_plan_masters_compact:
 * the block then sits at the range's adam_lo); else at its flat index. */
float *qt_step_param_at(const qt_plan *p, int32_t range, int64_t flat);

/* The gradient element at flat index `flat` of range `range`, which must lie in this rank's
 * reduce block of the range when the gradient region is compact (qt_plan.grads_compact:
 * the block then sits at the range's mb_lo); else at its flat index. */
float *qt_step_grad_at(const qt_plan *p, int32_t range, int64_t flat);

#endif
