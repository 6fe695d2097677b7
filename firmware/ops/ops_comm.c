/* ops_comm.c - what tensor-parallel ops share: the float sum across ranks, and the
 * canonical head groups of per-head norm weight gradients.
 *
 * A group's buffers are added by a reduce-scatter with fixed pairing followed by an
 * all-gather (firmware/comm/qt_coll.h), so every rank ends with the same bits, equal to the
 * pairwise tree of the ranks' buffers over group indices. The receive scratch is the plan's
 * comm scratch. A failure (a silent peer) is stored in *ctx->status; the interpreter then
 * stops the step. A per-head norm weight (q_norm, k_norm, the GDN gated norm) sums over
 * heads that tensor parallelism splits: its per-sequence leaf is the pairwise tree over
 * `groups` canonical head groups (each group's rows summed in increasing (t, head)), the
 * same tree on one rank as on many (each rank holds a contiguous run of groups, whose
 * subtree it computes; the ranks' subtrees are then added across the tensor group).
 * State: the group partial buffers, one static struct.
 */
#include "qt_op_fns.h"
#include "../comm/qt_coll.h"
#include "base/qt_err.h"

static struct {
    float part[QT_OP_MAX_GROUPS][QT_OP_GROUP_MAX_N];
} qt_op_groups;

float *qt_op_group_buf(int64_t g, int64_t n)
{
    if (g < 0 || g >= QT_OP_MAX_GROUPS || n > QT_OP_GROUP_MAX_N) return 0;
    float *b = qt_op_groups.part[g];
    for (int64_t i = 0; i < n; i++) b[i] = 0.0f;
    return b;
}

void qt_op_group_finish(const qt_ctx *ctx, float *dw, int64_t n, int64_t groups,
                        unsigned mask)
{
    for (int64_t s = 1; s < groups; s *= 2)
        for (int64_t j = 0; j + s < groups; j += 2 * s) {
            float *a = qt_op_groups.part[j];
            const float *b = qt_op_groups.part[j + s];
            for (int64_t i = 0; i < n; i++) a[i] = a[i] + b[i];
        }
    float *total = qt_op_groups.part[0];
    /* the axes of `mask` the plan splits (a group of one rank adds nothing) */
    unsigned split = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if ((mask & (1u << a)) && ctx->plan->mesh[a] > 1) split |= 1u << a;
    if (split && qt_op_sum_across(ctx, total, n, split)) return;
    for (int64_t i = 0; i < n; i++) dw[i] += total[i];
}

int qt_op_sum_across(const qt_ctx *ctx, float *buf, int64_t n, unsigned mask)
{
    const int64_t r = mask ? qt_comm_group_size(mask) : 1;
    if (r <= 1) return QT_OK;
    int64_t se;
    float *scratch = qt_plan_comm_scratch(ctx->plan, 0, &se);
    int rc = n % r ? qt_fail(QT_E_PLAN, "sum across %lld ranks of %lld floats: not divisible",
                             (long long)r, (long long)n)
                   : qt_coll_reduce_scatter_f32(mask, buf, n / r, scratch, se);
    if (!rc) rc = qt_coll_all_gather(mask, buf, n / r * (int64_t)sizeof(float));
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
    return rc;
}
