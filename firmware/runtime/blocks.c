/* blocks.c - this rank's blocks of the flat ranges and the addresses of parameter and
 * gradient elements in full or compact regions (qt_blocks.h).
 *
 * Invariants: a range [lo, lo + n) split over a group of g ranks gives member k the block
 * [lo + k * (n / g), +n / g); a compact region stores only this rank's block of each range,
 * from the range's adam_lo (parameters) or mb_lo (gradients); no state, no heap.
 */
#include "qt_blocks.h"
#include "comm/qt_coll.h"

void qt_step_block(const qt_plan *p, int32_t range, int64_t *lo, int64_t *n)
{
    const qt_flat_range *r = &p->ranges[range];
    const unsigned mask = r->opt_mask;
    int64_t g = mask ? qt_comm_group_size(mask) : 1;
    int64_t i = mask ? qt_comm_group_index(mask) : 0;
    *n = r->n / g;
    *lo = r->lo + i * *n;
}

void qt_step_reduce_block(const qt_plan *p, int32_t range, int64_t *lo, int64_t *n)
{
    const qt_flat_range *r = &p->ranges[range];
    const int64_t g = r->reduce_mask ? qt_comm_group_size(r->reduce_mask) : 1;
    const int64_t k = r->reduce_mask ? qt_comm_group_index(r->reduce_mask) : 0;
    *n = r->n / g;
    *lo = r->lo + k * *n;
}

/* Element `flat` of the region at byte `region`: the whole flat vector, or when `compact`
 * this rank's block of each range, the block [blo, ..) stored from element `base`. */
static float *qt_blocks_at(const qt_plan *p, int64_t region, int compact, int64_t base,
                           int64_t blo, int64_t flat)
{
    return (float *)(void *)(p->arena + region) + (compact ? base + (flat - blo) : flat);
}

float *qt_step_param_at(const qt_plan *p, int32_t range, int64_t flat)
{
    int64_t lo = 0, n;
    const int compact = qt_plan_masters_compact(p);
    if (compact) qt_step_block(p, range, &lo, &n);
    return qt_blocks_at(p, p->params_offset, compact, p->ranges[range].adam_lo, lo, flat);
}

float *qt_step_grad_at(const qt_plan *p, int32_t range, int64_t flat)
{
    int64_t lo = 0, n;
    if (p->grads_compact) qt_step_reduce_block(p, range, &lo, &n);
    return qt_blocks_at(p, p->grads_offset, p->grads_compact, p->ranges[range].mb_lo, lo,
                        flat);
}
