/* cp_units.h - a tensor rank's heads owned unevenly over the context group (issue 35,
 * docs/context.md "GDN heads owned unevenly"): the rows of a member's own units of a
 * parameter kept whole over context, and the members' rows placed back by owner.
 *
 * U units over C members: member j owns units [j*U/C, (j+1)*U/C) (integer division: run
 * sizes differ by at most one, a member may own none, as cp_pack.h's uneven runs), and a
 * head side holds ceil(U/C) unit slots, its own units first, then padding. A parameter
 * whole over context is nseg segments one after another (the conv weight's q | k | v
 * channels; one for A_log or dt_bias), segment i holding U units of w[i] elements; a slot
 * block holds the same segments with ceil(U/C) units each.
 * Invariants: pure data movement (rows copied bit for bit in eb bytes; the placement copies
 * fp32 leaves), no heap, no state; the caller has checked the shape (qt_cpu_check).
 */
#ifndef QT_PARALLEL_CP_UNITS_H
#define QT_PARALLEL_CP_UNITS_H

#include <stdint.h>

#define QT_CPU_MAX_SEG 3

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qt_cpu_shape {
    int64_t U, C, nseg, w[QT_CPU_MAX_SEG], eb;
} qt_cpu_shape;

/* 0 when U >= 1, C >= 1, 1 <= nseg <= QT_CPU_MAX_SEG, every w[i] >= 1 and eb 2 or 4. */
int qt_cpu_check(const qt_cpu_shape *sh);

/* Member j's first unit, its unit count, and the slots of every head side. */
int64_t qt_cpu_first(int64_t U, int64_t C, int64_t j);
int64_t qt_cpu_count(int64_t U, int64_t C, int64_t j);
int64_t qt_cpu_slots(int64_t U, int64_t C);

/* Elements of the whole parameter (U units) and of one slot block (ceil(U/C) units). */
int64_t qt_cpu_whole_elems(const qt_cpu_shape *sh);
int64_t qt_cpu_block_elems(const qt_cpu_shape *sh);

/* y (a slot block) = member c's units of x (the whole parameter), per segment, the padding
 * slots zero. Elements of sh->eb bytes. */
void qt_cpu_select(const qt_cpu_shape *sh, int64_t c, void *y, const void *x);

/* whole (fp32, the whole parameter's layout) gets, for every member j and segment i, member
 * j's own units' rows from its slot block blocks + j * stride (fp32); every element of whole
 * is written exactly once. */
void qt_cpu_place(const qt_cpu_shape *sh, float *whole, const float *blocks, int64_t stride);

#ifdef __cplusplus
}
#endif

#endif
