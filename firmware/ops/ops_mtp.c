/* ops_mtp.c - op wrappers of the multi-token-prediction head's stacking kinds (qt_ops.def
 * STACK, STACK_BWD, SPLIT, SPLIT_BWD; docs/model.md 1.8): parts stacked per token block
 * (the shared embedding's and lm_head's rows) or per feature row (the fc's concatenated
 * input). Each wrapper resolves the a3 parts' slots (QT_NONE: no part) and calls the
 * kernel of kernels/stack.h (a bf16 plan: the native forms of ops_bf16_mtp.c). The plan is
 * trusted (configgen checks ids and sizes).
 */
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"
#include "kernels/stack.h"

/* The parts' pointers of slots t[first .. first + n) (NULL where QT_NONE). */
static void qt_mtp_parts(const qt_op *op, const qt_ctx *ctx, int first, int64_t n,
                         float **out)
{
    for (int64_t j = 0; j < QT_STACK_MAX_PARTS; j++) {
        const int32_t id = j < n ? op->t[first + j] : QT_NONE;
        out[j] = id == QT_NONE ? (float *)0 : qt_f32(ctx, id);
    }
}

/* STACK: t0 y written from t1.. x_j. */
void qt_op_stack(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_stack(op, ctx);
        return;
    }
    float *x[QT_STACK_MAX_PARTS];
    qt_mtp_parts(op, ctx, QT_T_STACK_x0, QT_A(op, STACK, n), x);
    qt_stack(qt_f32(ctx, QT_T(op, STACK, y)), (const float *const *)x, QT_A(op, STACK, nb),
             QT_A(op, STACK, rows), QT_A(op, STACK, w), QT_A(op, STACK, n));
}

/* STACK_BWD: t1.. dx_j += part j of t0 dy. */
void qt_op_stack_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_stack_bwd(op, ctx);
        return;
    }
    float *dx[QT_STACK_MAX_PARTS];
    qt_mtp_parts(op, ctx, QT_T_STACK_BWD_dx0, QT_A(op, STACK_BWD, n), dx);
    qt_split_acc(dx, qt_f32(ctx, QT_T(op, STACK_BWD, dy)), QT_A(op, STACK_BWD, nb),
                 QT_A(op, STACK_BWD, rows), QT_A(op, STACK_BWD, w), QT_A(op, STACK_BWD, n));
}

/* SPLIT: t1.. x_j written from part j of t0 y. */
void qt_op_split(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_split(op, ctx);
        return;
    }
    float *x[QT_STACK_MAX_PARTS];
    qt_mtp_parts(op, ctx, QT_T_SPLIT_x0, QT_A(op, SPLIT, n), x);
    qt_split(x, qt_f32(ctx, QT_T(op, SPLIT, y)), QT_A(op, SPLIT, nb), QT_A(op, SPLIT, rows),
             QT_A(op, SPLIT, w), QT_A(op, SPLIT, n));
}

/* SPLIT_BWD: part j of t0 dy += t1.. dx_j. */
void qt_op_split_bwd(const qt_op *op, const qt_ctx *ctx)
{
    if (qt_op_native16(ctx)) {
        qt_op16_split_bwd(op, ctx);
        return;
    }
    float *dx[QT_STACK_MAX_PARTS];
    qt_mtp_parts(op, ctx, QT_T_SPLIT_BWD_dx0, QT_A(op, SPLIT_BWD, n), dx);
    qt_stack_acc(qt_f32(ctx, QT_T(op, SPLIT_BWD, dy)), (const float *const *)dx,
                 QT_A(op, SPLIT_BWD, nb), QT_A(op, SPLIT_BWD, rows), QT_A(op, SPLIT_BWD, w),
                 QT_A(op, SPLIT_BWD, n));
}
