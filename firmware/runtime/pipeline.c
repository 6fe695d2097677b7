/* pipeline.c - the pipeline driver (qt_pipeline.h): one stage's microbatches in the order of
 * the plan's schedule, the boundary messages, and the exact merges over the stages.
 *
 * Invariants:
 *  - the weight-gradient leaves of microbatch m are pushed (by its B) before those of
 *    m + 1: GPipe's backward phase runs B0 .. B(M-1), 1F1B's backwards are B0, B1, ... by
 *    construction, so the stage's trees are the one-rank trees over the step's leaves;
 *  - a microbatch's forward at B is the forward it ran at F (same inputs, same tables,
 *    deterministic kernels): the rematerialisation changes no bit;
 *  - messages: channel 0 the activations (stage s to s + 1), channel 1 the gradients (s + 1
 *    to s), each microbatch once per accumulation group, in the schedule's order on both
 *    sides (qt_pp_action), so they match in posting order; sends are flushed at the end of
 *    every group (before its slots are reused); no heap, no reduction of floats;
 *  - the held-out eval (qt_pp_eval_forward) runs forwards only, one chunk at a time through
 *    the stages on channel 0, each send waited for before the next chunk; its metrics, as
 *    the step's, are the last stage's (channel 2).
 */
#include <string.h>
#include "qt_pipeline.h"
#include "qt_interp.h"
#include "qt_step.h"
#include "qt_err.h"
#include "comm/qt_coll.h"
#include "comm/qt_comm.h"

#define QT_PP_ACT 0   /* channel of the activations, stage s -> s + 1 */
#define QT_PP_GRAD 1  /* channel of the gradients, stage s + 1 -> s */
#define QT_PP_METRICS 2 /* channel of the step's metrics, the last stage -> the others */

/* The test hook of qt_pp_set_test_order: 1 runs gpipe's backward phase in reverse. */
static int qt_pp_reverse;

void qt_pp_set_test_order(int reverse)
{
    qt_pp_reverse = reverse != 0;
}

/* The world ranks of this rank's place in every stage, and this stage. */
static int qt_pp_peers(const qt_plan *p, int *ranks)
{
    int rank = 0, n = 1, local = 0;
    qt_comm_world(&rank, &n);
    const int S = p->pipeline_stages, per = n / S;
    const int st = qt_pp_stage_of(rank, n, S, &local);
    for (int k = 0; k < S; k++) ranks[k] = k * per + local;
    return st;
}

int qt_pp_action(int schedule, int S, int st, int M, int i, int *j)
{
    if (schedule == 0) {
        *j = i < M ? i : qt_pp_reverse ? 2 * M - 1 - i : i - M;
        return i >= M;
    }
    const int w = S - st - 1 < M ? S - st - 1 : M;
    if (i < w) {
        *j = i;
        return 0;
    }
    const int k = i - w;
    if (k < 2 * (M - w)) {
        *j = k % 2 ? k / 2 : w + k / 2;
        return k % 2;
    }
    *j = M - w + (k - 2 * (M - w));
    return 1;
}

static void qt_pp_copy(const qt_ctx *ctx, int32_t dst, const float *src, int64_t n)
{
    memcpy(qt_f32(ctx, dst), src, (size_t)n * sizeof(float));
}

int qt_pp_microbatches(const qt_ctx *ctx, const qt_kernel_entry *table, qt_step_state *st,
                       const qt_pp_hooks *h)
{
    const qt_plan *p = ctx->plan;
    const int S = p->pipeline_stages, M = p->pp_micro;
    int ranks[QT_PP_MAX_STAGES];
    if (S < 2 || S > QT_PP_MAX_STAGES || M < 1 || p->train.grad_accum % M)
        return qt_fail(QT_E_PLAN, "plan %s: pipeline of %d stages with %d microbatches and "
                       "%lld accumulation microbatches", p->run_name, S, M,
                       (long long)p->train.grad_accum);
    const int s = qt_pp_peers(p, ranks), first = s == 0, last = s == S - 1;
    const int64_t nb = p->tensors[p->pp_slots].shape[1], bytes = nb * (int64_t)sizeof(float);
    float *slots = qt_f32(ctx, p->pp_slots);
    const int64_t groups = p->train.grad_accum / M;
    for (int64_t g = 0; g < groups; g++) {
        for (int i = 0; i < 2 * M; i++) {
            int j;
            const int bwd = qt_pp_action(p->pp_schedule, S, s, M, i, &j);
            const int64_t mb = g * M + j;
            float *in = slots + (int64_t)j * nb, *act = slots + (int64_t)(M + j) * nb;
            float *grad = slots + (int64_t)(2 * M + j) * nb;
            int rc = QT_OK;
            st->mb = mb;
            if (!bwd) {
                /* F: the input arrives (stages > 0); a stage before the last runs the
                 * forward and sends its output on; the last stage's forward runs at B */
                if (!first) rc = qt_coll_p2p_recv(ranks[s - 1], QT_PP_ACT, in, bytes);
                if (!rc && !last) {
                    if (!first) qt_pp_copy(ctx, p->pp_in, in, nb);
                    rc = h->fill(mb, h->arg);
                    if (!rc) qt_interp_run_forward(ctx, table, p->pp_fwd_ops, st);
                    if (!rc && *ctx->status) rc = *ctx->status;
                    if (!rc) {
                        memcpy(act, qt_f32(ctx, p->pp_out), (size_t)bytes);
                        rc = qt_coll_p2p_send(ranks[s + 1], QT_PP_ACT, act, bytes);
                    }
                }
            } else {
                /* B: the output's gradient arrives (stages before the last), the forward
                 * runs again from the kept input, then the backward; the input's gradient
                 * goes back (stages > 0) */
                if (!last)
                    rc = qt_coll_p2p_recv(ranks[s + 1], QT_PP_GRAD, qt_f32(ctx, p->pp_dout), bytes);
                if (!rc && !first) qt_pp_copy(ctx, p->pp_in, in, nb);
                if (!rc) rc = h->fill(mb, h->arg);
                if (!rc) qt_interp_run_microbatch(ctx, table, mb, st);
                if (!rc && *ctx->status) rc = *ctx->status;
                if (!rc) rc = h->done(mb, h->arg);
                if (!rc && !first) {
                    memcpy(grad, qt_f32(ctx, p->pp_din), (size_t)bytes);
                    rc = qt_coll_p2p_send(ranks[s - 1], QT_PP_GRAD, grad, bytes);
                }
            }
            if (rc) return rc;
        }
        int rc = qt_coll_p2p_flush();
        if (rc) return rc;
    }
    return QT_OK;
}

int qt_pp_warm(const qt_plan *p, double deadline)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    int ranks[QT_PP_MAX_STAGES];
    const int S = p->pipeline_stages, s = qt_pp_peers(p, ranks);
    const int64_t nb = p->tensors[p->pp_slots].shape[1], M = p->pp_micro;
    unsigned char *slots = p->arena + p->tensors[p->pp_slots].offset;
    /* 8 messages each way in 8 x big bytes: the first two thirds of the slots, which hold
     * nothing yet (big: a boundary message, at most 64 KiB) */
    int64_t big = nb * (int64_t)sizeof(float);
    if (big > (64 << 10)) big = 64 << 10;
    if (8 * big > M * nb * (int64_t)sizeof(float)) big = M * nb * (int64_t)sizeof(float) / 8;
    for (int k = 0; k < S && big > 0; k++) {
        if (k == s) continue;
        int rc = qt_comm_warm(ranks[k], slots, slots + M * nb * (int64_t)sizeof(float), big,
                              deadline);
        if (rc) return rc;
    }
    return QT_OK;
}

/* The last stage's `bytes` of m to the other stages (at this rank's place in each). */
static int qt_pp_share_last(const qt_plan *p, void *m, int64_t bytes)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    int ranks[QT_PP_MAX_STAGES];
    const int S = p->pipeline_stages, s = qt_pp_peers(p, ranks);
    if (s == S - 1) {
        for (int k = 0; k < S - 1; k++) {
            int rc = qt_coll_p2p_send(ranks[k], QT_PP_METRICS, m, bytes);
            if (rc) return rc;
        }
        return qt_coll_p2p_flush();
    }
    return qt_coll_p2p_recv(ranks[S - 1], QT_PP_METRICS, m, bytes);
}

int qt_pp_share_metrics(const qt_plan *p, qt_step_metrics *m)
{
    return qt_pp_share_last(p, m, (int64_t)sizeof *m);
}

int qt_pp_share_eval(const qt_plan *p, qt_eval_metrics *e)
{
    return qt_pp_share_last(p, e, (int64_t)sizeof *e);
}

int qt_pp_eval_forward(const qt_ctx *ctx, const qt_kernel_entry *table, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    int ranks[QT_PP_MAX_STAGES];
    const int S = p->pipeline_stages, s = qt_pp_peers(p, ranks);
    const int64_t bytes = p->tensors[p->pp_slots].shape[1] * (int64_t)sizeof(float);
    int rc = s > 0 ? qt_coll_p2p_recv(ranks[s - 1], QT_PP_ACT, qt_f32(ctx, p->pp_in), bytes)
                   : QT_OK;
    if (rc) return rc;
    qt_interp_run_forward(ctx, table, s == S - 1 ? p->train.eval_fwd_ops : p->pp_fwd_ops, st);
    if (*ctx->status) return *ctx->status;
    if (s < S - 1 && !(rc = qt_coll_p2p_send(ranks[s + 1], QT_PP_ACT, qt_f32(ctx, p->pp_out),
                                             bytes)))
        rc = qt_coll_p2p_flush();
    return rc;
}

/* Every stage's blk bytes (mine: this stage's) into all[0 .. S) (S blocks of blk bytes),
 * over the ranks at this rank's place in each stage; *S receives the stage count. */
static int qt_pp_gather(const qt_plan *p, const void *mine, void *all, int64_t blk, int *S)
{
    int ranks[QT_PP_MAX_STAGES];
    const int s = qt_pp_peers(p, ranks);
    *S = p->pipeline_stages;
    memcpy((unsigned char *)all + s * blk, mine, (size_t)blk);
    return qt_coll_p2p_allgather(ranks, *S, s, all, blk);
}

int qt_pp_exact_merge(const qt_plan *p, qt_exact *a)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    static qt_exact all[QT_PP_MAX_STAGES];
    int S;
    int rc = qt_pp_gather(p, a, all, (int64_t)sizeof *a, &S);
    if (rc) return rc;
    qt_exact_clear(a);
    for (int k = 0; k < S; k++) qt_exact_merge(a, &all[k]);
    return QT_OK;
}

int qt_pp_sum_u64(const qt_plan *p, uint64_t *v)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    static uint64_t all[QT_PP_MAX_STAGES];
    int S;
    int rc = qt_pp_gather(p, v, all, (int64_t)sizeof *v, &S);
    if (rc) return rc;
    uint64_t sum = 0;
    for (int k = 0; k < S; k++) sum += all[k];
    *v = sum;
    return QT_OK;
}
