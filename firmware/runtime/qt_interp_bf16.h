/* qt_interp_bf16.h - running op wrappers in bf16 plans (interp_bf16.c): the boundary that
 * runs an fp32 wrapper on widened bf16 tensors, and the calls the interpreter makes for
 * every op (native wrapper or boundary, by the kind's QT_OPP_BF16).
 *
 * Invariants: in an fp32 plan the calls are exactly the wrapper calls; in a bf16 plan a kind
 * without QT_OPP_BF16 runs through the boundary, whose staging never exceeds
 * qt_bf16_stage_need floats (checked against the plan's bf16_stage_elems at start-up).
 */
#ifndef QT_INTERP_BF16_H
#define QT_INTERP_BF16_H

#include "qt_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of fp32 staging op needs under the boundary: its distinct staged bf16 tensors
 * (every bf16 slot, except the parameter slots of QT_OPP_BF16 kinds; none for STEP kinds),
 * each rounded up to 16. */
int64_t qt_bf16_stage_need(const qt_plan *p, const qt_kernel_entry *e, const qt_op *op);

/* The boundary: widen, run e's fp32 wrapper, round the written slots back (RUN), or widen
 * and run (WGRAD: the leaves dw[] are fp32 already). */
void qt_bf16_boundary_run(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx);
void qt_bf16_boundary_wgrad(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                            int64_t seq, float *const dw[2]);

/* The context every sequence's call of WGRAD op `op` shares (*out): ctx itself, or in a
 * bf16 plan for a boundary kind a copy whose stage map (*map, which must outlive it) holds
 * the op's bf16 tensors widened once - they do not change between its sequences, so one
 * widening per op gives the bits of one per call. */
void qt_interp_wgrad_ctx(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                         qt_stage_map *map, qt_ctx *out);

/* What the interpreter calls for a RUN or WGRAD op: e's wrapper, or in a bf16 plan the
 * boundary around it when the kind is not QT_OPP_BF16. */
void qt_interp_call_run(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx);
void qt_interp_call_wgrad(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                          int64_t seq, float *const dw[2]);

#ifdef __cplusplus
}
#endif

#endif
