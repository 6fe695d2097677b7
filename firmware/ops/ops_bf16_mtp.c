/* ops_bf16_mtp.c - the native bf16 forms of the multi-token-prediction head's stacking kinds
 * (qt_ops.def STACK, STACK_BWD, SPLIT, SPLIT_BWD; kernels/stack.h; qt_ops_bf16.h;
 * docs/precision.md, "Executing bf16 plans").
 *
 * The fp32 kernels copy parts bit for bit or add each element once; through the boundary a
 * bf16 plan's copy is widen, copy, round (qt_bf16_copy_n: the value itself, a bf16 denormal
 * the zero of its sign, a NaN quieted) and an add is widen, one fp32 add, round
 * (qt_bf16_acc_n). These forms do exactly that per element in one pass over the bf16 parts,
 * in the kernels' (block, part) order. The boundary rounds back every written tensor whole,
 * so a part of the written stacked tensor that no slot gives (STACK's y, SPLIT_BWD's dy) is
 * copied onto itself through the same rounding: every byte is the boundary's. An op with a
 * slot that is not bf16, or naming one tensor in two slots (the boundary would add into one
 * widened copy and round once), runs through the boundary (the same bits).
 * No state, no heap, no VLAs.
 */
#include "qt_ops_bf16.h"
#include "kernels/bf16.h"
#include "kernels/stack.h"

/* The stacked tensor t0 and the parts of slots t1 .. t1+n-1 (x[j] NULL where QT_NONE) as
 * bf16; -1 when the form does not apply (a slot not bf16, a tensor in two slots, n out of
 * range). */
static int qt_m16_slots(const qt_op *op, const qt_ctx *ctx, int64_t n, qt_bf16 **y,
                        qt_bf16 **x)
{
    if (n < 1 || n > QT_STACK_MAX_PARTS) return -1;
    for (int64_t j = 0; j <= n; j++) {
        const int32_t id = op->t[j];
        if (id == QT_NONE) continue;
        if (!qt_is_b16(ctx, id)) return -1;
        for (int64_t i = 0; i < j; i++)
            if (op->t[i] == id) return -1;
    }
    if (op->t[0] == QT_NONE) return -1;
    *y = qt_b16(ctx, op->t[0]);
    for (int64_t j = 0; j < n; j++) x[j] = op->t[1 + j] == QT_NONE ? 0 : qt_b16(ctx, op->t[1 + j]);
    return 0;
}

/* The four kinds share slots (t0 the stacked tensor, t1.. the parts) and attributes. */
enum { QT_M16_STACK, QT_M16_SPLIT, QT_M16_STACK_BWD, QT_M16_SPLIT_BWD };

static void qt_m16_run(const qt_op *op, const qt_ctx *ctx, int mode)
{
    const int64_t nb = QT_A(op, STACK, nb), part = QT_A(op, STACK, rows) * QT_A(op, STACK, w),
                  n = QT_A(op, STACK, n);
    qt_bf16 *y, *x[QT_STACK_MAX_PARTS];
    if (qt_m16_slots(op, ctx, n, &y, x)) {
        ctx->bf16_boundary(op, ctx);
        return;
    }
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < n; j++) {
            qt_bf16 *yp = y + (b * n + j) * part, *xp = x[j] ? x[j] + b * part : 0;
            switch (mode) {
            case QT_M16_STACK: qt_bf16_copy_n(yp, xp ? xp : yp, part); break;
            case QT_M16_SPLIT: if (xp) qt_bf16_copy_n(xp, yp, part); break;
            case QT_M16_STACK_BWD: if (xp) qt_bf16_acc_n(xp, yp, part); break;
            default:
                if (xp) qt_bf16_acc_n(yp, xp, part);
                else qt_bf16_copy_n(yp, yp, part);
            }
        }
}

void qt_op16_stack(const qt_op *op, const qt_ctx *ctx)
{
    qt_m16_run(op, ctx, QT_M16_STACK);
}

void qt_op16_split(const qt_op *op, const qt_ctx *ctx)
{
    qt_m16_run(op, ctx, QT_M16_SPLIT);
}

void qt_op16_stack_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_m16_run(op, ctx, QT_M16_STACK_BWD);
}

void qt_op16_split_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_m16_run(op, ctx, QT_M16_SPLIT_BWD);
}
