/* pipeline.c - the pipeline driver (qt_pipeline.h): one stage's microbatches in the order of
 * the plan's schedule, its repeat chunks (circular repeats), the boundary messages, and the
 * exact merges over the stages.
 *
 * Invariants:
 *  - the weight-gradient leaves of microbatch m are pushed (by its B) before those of
 *    m + 1, chunk by chunk: GPipe's backward phase runs B0 .. B(M-1) in every repeat (the
 *    repeats descending; a chunk's parameters are its own), 1F1B's backwards are B0, B1,
 *    ... by construction, and interleaved 1F1B's (1f1b with repeats, qt_pp_sched.h) take
 *    each chunk's microbatches in increasing order, whatever the other chunks' backwards
 *    between them (a chunk's leaves go into its own parameters' trees only), so the stage's
 *    trees are the one-rank trees over the step's leaves;
 *    in the microbatch form each chunk's microbatch-end ops (its own flat ranges: configgen
 *    cuts them per chunk) run right after its backward, pushing microbatch m into the
 *    ranges' microbatch trees in the same order;
 *  - a microbatch's forward at B is the forward it ran at F (same inputs, same tables,
 *    deterministic kernels): the rematerialisation changes no bit; a chunk's forward and
 *    backward runs read only what they write and its boundaries (configgen's check_chunks);
 *  - messages: channel 0 the activations (stage s to s + 1, and the last stage's repeat r
 *    to stage 0's r + 1: the wrap-around), channel 1 the gradients the reverse way, channel
 *    3 (with the load-balance loss) the running lb sums the activations' way beside them
 *    (so the sums also wrap around between repeats: one rank's layer order), channels 5
 *    and 6 (with the MTP head) the head's embeddings from stage 0 straight to
 *    the last stage and their gradients back (the middle stages see neither; once per
 *    microbatch: stage 0's repeat 0 to and from the last stage's repeat R - 1), each
 *    (microbatch, repeat) once per accumulation group, in the schedule's order on both sides
 *    (qt_pp_action, qt_pp_action_circ, qt_pp_action_intl: the forwards' order of the pairs,
 *    and the backwards', is the same on every stage), so they match in posting order; a receive may be
 *    posted one action ahead (into a slot nothing else uses until it is waited for), which
 *    keeps that order; sends are flushed at the end of every group (before its slots are
 *    reused); no heap, no reduction of floats;
 *  - the bubble's clocks (pipeline_time.c) are read around the waits only, and the order
 *    trace (qt_pp_set_trace) only records the actions: no bit depends on them;
 *  - the held-out eval (qt_pp_eval_forward) runs forwards only, one eval chunk at a time
 *    through the stages, repeat chunk by repeat chunk with the wrap-around (circular
 *    repeats), on channel 0 (the lb sums on 3; with the MTP head stage 0's first chunk
 *    sends the head's embeddings on 5, which the last stage receives at its first chunk),
 *    each send waited for before the next; its metrics, as the step's, are the last
 *    stage's (channel 2).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "qt_pipeline.h"
#include "qt_pp_sched.h"
#include "qt_interp.h"
#include "qt_step.h"
#include "qt_err.h"
#include "comm/qt_coll.h"
#include "comm/qt_comm.h"

#define QT_PP_ACT 0   /* channel of the activations, stage s -> s + 1 */
#define QT_PP_GRAD 1  /* channel of the gradients, stage s + 1 -> s */
#define QT_PP_METRICS 2 /* channel of the step's metrics, the last stage -> the others */
#define QT_PP_LB 3    /* channel of the running lb sums, beside the activations (lb loss) */
/* channel 4: the checkpoints' stream (io/ckpt_pp.c) */
#define QT_PP_MTP 5   /* channel of the MTP head's embeddings, stage 0 -> the last stage */
#define QT_PP_MTP_GRAD 6 /* channel of their gradients, the last stage -> stage 0 */

#define QT_PP_SUM_CHUNK 64   /* qt_pp_sum_u64's values per gather */

static struct {
    /* the test hook of qt_pp_set_test_order: reverse runs gpipe's backward phase in
     * reverse, lb_local zeroes the received lb sums, mtp_drop the received gradient of the
     * MTP head's embeddings */
    int reverse, lb_local, mtp_drop;
    int prefetch;                              /* receives posted ahead (qt_pp_set_prefetch) */
    int trace, traced;                         /* qt_pp_set_trace; the order printed once */
    char order[QT_PP_TRACE_BYTES];             /* the first group's actions as they ran */
    size_t order_n;
    qt_exact merge_all[QT_PP_MAX_STAGES];      /* qt_pp_exact_merge: every stage's accumulator */
    uint64_t sum_all[QT_PP_MAX_STAGES * QT_PP_SUM_CHUNK];   /* qt_pp_sum_u64: every stage's chunk */
    /* interleaved 1F1B's input slots (qt_pp_intl_slots: per action, and its scratch) */
    int slot[2 * QT_PP_MAX_PAIRS], held[QT_PP_MAX_PAIRS], used[QT_PP_MAX_PAIRS];
} qt_pps = {.prefetch = 1};

void qt_pp_set_test_order(int mode)
{
    qt_pps.reverse = mode == 1;
    qt_pps.lb_local = mode == 2;
    qt_pps.mtp_drop = mode == 3;
}

void qt_pp_set_prefetch(int on)
{
    qt_pps.prefetch = on != 0;
}

void qt_pp_set_trace(int on)
{
    qt_pps.trace = on != 0;
}

/* The trace (qt_pp_set_trace): action a of the first group appended to the order line as it
 * runs ("F<j>/<r>", "B<j>/<r>"; R = 1: "F<j>"), cut with "..." when the line is full; at the
 * group's end (a NULL) the line goes to stderr, once per run. No bit depends on it. */
static void qt_pp_trace(const qt_plan *p, int s, const int *a, int R)
{
    if (!qt_pps.trace || qt_pps.traced) return;
    char *o = qt_pps.order;
    const size_t cap = sizeof qt_pps.order;
    if (!a) {
        fprintf(stderr, "qtrain: pipeline stage %d of %d order (%s%s, M %d, R %d):%s\n", s,
                p->pipeline_stages, p->pp_schedule ? "1f1b" : "gpipe",
                p->pp_schedule && R > 1 ? " interleaved" : "", p->pp_micro, R, o);
        qt_pps.traced = 1;
        return;
    }
    if (qt_pps.order_n + 16 >= cap) {
        if (qt_pps.order_n + 4 < cap) qt_pps.order_n += (size_t)snprintf(o + qt_pps.order_n, 5, " ...");
        return;
    }
    qt_pps.order_n += (size_t)(R > 1 ? snprintf(o + qt_pps.order_n, cap - qt_pps.order_n,
                                                " %c%d/%d", a[0] ? 'B' : 'F', a[1], a[2])
                                     : snprintf(o + qt_pps.order_n, cap - qt_pps.order_n,
                                                " %c%d", a[0] ? 'B' : 'F', a[1]));
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
    /* gpipe's last stage runs each microbatch's forward and backward as its input arrives
     * (F j B j: its forward runs at B anyway, and nothing waits for its outputs but the
     * gradients, which go back in the same order), as 1f1b's last stage does; the other
     * stages run every forward first */
    if (schedule == 0 && (st < S - 1 || qt_pps.reverse)) {
        *j = i < M ? i : qt_pps.reverse ? 2 * M - 1 - i : i - M;
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

int qt_pp_action_circ(int M, int R, int i, int *j, int *r)
{
    const int bwd = i >= M * R, k = bwd ? i - M * R : i;
    *j = k % M;
    if (bwd && qt_pps.reverse) *j = M - 1 - *j;
    *r = bwd ? R - 1 - k / M : k / M;
    return bwd;
}

/* A tensor's storage bytes in the arena (the boundaries are stored in the plan's activation
 * dtype, fp32 or bf16: the messages carry those bytes as they are). */
static unsigned char *qt_pp_bytes(const qt_ctx *ctx, int32_t id)
{
    return ctx->arena + ctx->plan->tensors[id].offset;
}

/* The bytes of one boundary message: a row of pp_slots in its dtype. */
static int64_t qt_pp_msg_bytes(const qt_plan *p)
{
    const qt_tensor *t = &p->tensors[p->pp_slots];
    return t->shape[1] * qt_dtype_bytes(t->dtype);
}

/* Before a chunk's forward: the received input boundary (in: bytes; NULL for a chunk
 * without one) into its input tensor, and the running lb sums of the layers before (lb_in:
 * lbb bytes, NULL without them) into lb_seq, which the chunk's layers then continue. */
static void qt_pp_inputs(const qt_ctx *ctx, int32_t id, const unsigned char *in, int64_t bytes,
                         const unsigned char *lb_in, int64_t lbb)
{
    if (in) memcpy(qt_pp_bytes(ctx, id), in, (size_t)bytes);
    if (lb_in && qt_pps.lb_local) memset(qt_pp_bytes(ctx, ctx->plan->lb_seq), 0, (size_t)lbb);
    else if (lb_in) memcpy(qt_pp_bytes(ctx, ctx->plan->lb_seq), lb_in, (size_t)lbb);
}

/* The MTP head's messages on this stage (once per microbatch, whatever the repeats): D its
 * depths on stage 0 and the last stage, 0 elsewhere (the middle stages see none); slots its
 * pp_mtp_slots, peer the other end (the last stage, or stage 0), bytes one boundary, M the
 * microbatches of a group. */
typedef struct qt_pp_mtp {
    int64_t D, bytes, M;
    int first, peer;
    unsigned char *slots;
} qt_pp_mtp;

static qt_pp_mtp qt_pp_mtp_of(const qt_ctx *ctx, const int *ranks, int s, int64_t bytes)
{
    const qt_plan *p = ctx->plan;
    const int S = p->pipeline_stages;
    qt_pp_mtp m = {0, bytes, p->pp_micro, s == 0, ranks[s == 0 ? S - 1 : 0], NULL};
    if (p->mtp_layers > 0 && (s == 0 || s == S - 1)) {
        m.D = p->mtp_layers;
        m.slots = qt_pp_bytes(ctx, p->pp_mtp_slots);
    }
    return m;
}

/* The head's D boundaries of one microbatch in buf, as D messages of one boundary each (so
 * none is larger than the activations') on channel ch to or from the other end: sends stay
 * in flight until the group's flush, receives are waited for on the clock of the waits. */
static int qt_pp_mtp_msgs(const qt_pp_mtp *m, int send, int ch, unsigned char *buf)
{
    const double w0 = qt_pp_clock();
    int rc = QT_OK;
    for (int64_t k = 0; k < m->D && !rc; k++)
        rc = send ? qt_coll_p2p_send(m->peer, ch, buf + k * m->bytes, m->bytes)
                  : qt_coll_p2p_recv(m->peer, ch, buf + k * m->bytes, m->bytes);
    if (!send) qt_pp_time_add(QT_PP_T_WAIT, w0);
    return rc;
}

/* Microbatch j's MTP messages (nothing on a middle stage), at its F (phase 0), before its
 * B's forward (1) and after its B's backward (2), of repeat r of R: only in stage 0's first
 * chunk (r = 0: the embedding, and the backward that takes their gradient) and the last
 * stage's last (r = R - 1: the head). At F stage 0 sends pp_mtp_out from slot row j
 * (channel 5) and the last stage receives it into its row j: both in forward order,
 * whatever the backwards' order. Before B the last stage copies row j into pp_mtp_in, and
 * stage 0 receives the gradient into pp_mtp_dout, the backward's second seed (channel 6;
 * zeroed under the test order mtp-drop). After B the last stage sends pp_mtp_din back
 * from row M + j: both ends run their one chunk's backwards in the same microbatch order
 * (the test order reverse too), and every last-stage B(j, R - 1) comes before stage 0's
 * backwards of repeat 0, so neither end waits on the other. 0 or QT_E_*. */
static int qt_pp_mtp_step(const qt_ctx *ctx, const qt_pp_mtp *m, int64_t j, int r, int R,
                          int phase)
{
    const qt_plan *p = ctx->plan;
    const int64_t n = m->D * m->bytes;
    if (!m->D || (phase == 2 && m->first) || r != (m->first ? 0 : R - 1)) return QT_OK;
    unsigned char *row = m->slots + (phase == 2 ? m->M + j : j) * n;
    if (phase == 0 && m->first) {
        memcpy(row, qt_pp_bytes(ctx, p->pp_mtp_out), (size_t)n);
        return qt_pp_mtp_msgs(m, 1, QT_PP_MTP, row);
    }
    if (phase == 0) return qt_pp_mtp_msgs(m, 0, QT_PP_MTP, row);
    if (phase == 1 && !m->first) {
        memcpy(qt_pp_bytes(ctx, p->pp_mtp_in), row, (size_t)n);
        return QT_OK;
    }
    if (phase == 1) {
        unsigned char *d = qt_pp_bytes(ctx, p->pp_mtp_dout);
        int rc = qt_pp_mtp_msgs(m, 0, QT_PP_MTP_GRAD, d);
        if (!rc && qt_pps.mtp_drop) memset(d, 0, (size_t)n);
        return rc;
    }
    memcpy(row, qt_pp_bytes(ctx, p->pp_mtp_din), (size_t)n);
    return qt_pp_mtp_msgs(m, 1, QT_PP_MTP_GRAD, row);
}

/* Action i of the stage's group schedule: the microbatch j, the repeat r, the chunk, the
 * pair index k = r M + j (its send slots'), its input slot x (k, or under interleaved 1F1B
 * the slot qt_pp_intl_slots gave action i: a slot per pair in flight), and whether it is a
 * backward. */
typedef struct qt_pp_act {
    int bwd, j, r;
    int64_t k, x;
    const qt_pp_chunk *c;
} qt_pp_act;

static qt_pp_act qt_pp_at(const qt_plan *p, const qt_pp_chunk *ch, int R, int S, int s, int i)
{
    qt_pp_act a;
    a.r = 0;
    if (R > 1 && p->pp_schedule == 1) {
        /* Megatron's interleaved 1F1B (qt_pp_sched.h); the test order reverse relabels the
         * microbatches j -> M - 1 - j on every stage alike (so the messages still pair and
         * nothing deadlocks), which pushes every chunk's leaves in descending order */
        a.bwd = qt_pp_action_intl(S, s, p->pp_micro, R, i, &a.j, &a.r);
        if (qt_pps.reverse) a.j = p->pp_micro - 1 - a.j;
        a.x = qt_pps.slot[i];
    } else {
        a.bwd = R > 1 ? qt_pp_action_circ(p->pp_micro, R, i, &a.j, &a.r)
                      : qt_pp_action(p->pp_schedule, S, s, p->pp_micro, i, &a.j);
        a.x = (int64_t)a.r * p->pp_micro + a.j;
    }
    a.k = (int64_t)a.r * p->pp_micro + a.j;
    a.c = &ch[a.r];
    return a;
}

/* After chunk c's backward of microbatch mb: the chunk's part of the microbatch-end
 * schedule (the microbatch form: its ranges' leaf-tree totals, reduce-scatters over the
 * stage's mesh and pushes as leaf mb of their microbatch trees; a chunk's parameters get
 * their leaves only from its own backward, and each chunk's backwards come in increasing
 * mb, so every range's counter sees the one-rank order). */
static int qt_pp_mb_end(const qt_ctx *ctx, const qt_kernel_entry *table, const qt_pp_chunk *c,
                        int64_t mb, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    st->mb = mb;
    for (int32_t i = c->e0; i < c->e1; i++) {
        const int rc = table[p->mbend_ops[i].kind].step(&p->mbend_ops[i], ctx, st);
        if (rc) return rc;
    }
    return QT_OK;
}

/* The end of an accumulation group: its sends flushed (their slots are reused by the next
 * group; the wait on the bubble's clock), and after the first group (first) the order trace.
 * 0 or QT_E_*. */
static int qt_pp_group_end(const qt_plan *p, int s, int R, int first)
{
    const double w0 = qt_pp_clock();
    const int rc = qt_coll_p2p_flush();
    qt_pp_time_add(QT_PP_T_WAIT, w0);
    if (!rc && first) qt_pp_trace(p, s, NULL, R);
    return rc;
}

/* The input slot rows of stage s with R chunks: M R, or under interleaved 1F1B the order's
 * peak (qt_pp_intl_slots, which also fills qt_pps.slot); -1 (failed) when the plan's
 * pp_slots (P + 2 M R rows) or pp_lb_slots (P + M R) were sized otherwise. */
static int64_t qt_pp_in_slots(const qt_plan *p, int s, int R)
{
    const int M = p->pp_micro;
    const int64_t MR = (int64_t)M * R;
    int64_t P = MR;
    if (R > 1 && p->pp_schedule == 1) {
        if (MR > QT_PP_MAX_PAIRS)
            return qt_fail(QT_E_PLAN, "plan %s: %lld (microbatch, chunk) pairs per group, the "
                           "driver holds at most %d (QT_PP_MAX_PAIRS)", p->run_name,
                           (long long)MR, QT_PP_MAX_PAIRS), -1;
        P = qt_pp_intl_slots(p->pipeline_stages, s, M, R, qt_pps.slot, qt_pps.held,
                             qt_pps.used);
    }
    const int64_t rows = p->tensors[p->pp_slots].shape[0];
    const int64_t lbr = p->lb_seq != QT_NONE ? p->tensors[p->pp_lb_slots].shape[0] : P + MR;
    if (rows != P + 2 * MR || lbr != P + MR)
        return qt_fail(QT_E_PLAN, "plan %s: stage %d's pp_slots has %lld rows (pp_lb_slots %lld), "
                       "its schedule needs %lld (%lld)", p->run_name, s, (long long)rows,
                       (long long)lbr, (long long)(P + 2 * MR), (long long)(P + MR)), -1;
    return P;
}

int qt_pp_microbatches(const qt_ctx *ctx, const qt_kernel_entry *table, qt_step_state *st,
                       const qt_pp_hooks *h)
{
    const qt_plan *p = ctx->plan;
    const int S = p->pipeline_stages, M = p->pp_micro;
    int ranks[QT_PP_MAX_STAGES], R;
    const qt_pp_chunk *ch = qt_pp_chunks(p, &R);
    if (!ch) return QT_E_PLAN;
    if (S < 2 || S > QT_PP_MAX_STAGES || M < 1 || p->train.grad_accum % M)
        return qt_fail(QT_E_PLAN, "plan %s: pipeline of %d stages with %d microbatches and "
                       "%lld accumulation microbatches", p->run_name, S, M, (long long)p->train.grad_accum);
    const int s = qt_pp_peers(p, ranks);
    /* a chunk's input comes from the stage before, stage 0's (repeats > 0) from the last
     * stage's previous repeat (the wrap-around); its output goes to the stage after, the
     * last stage's (repeats < R - 1) to stage 0's next repeat */
    const int prev = ranks[s > 0 ? s - 1 : S - 1], next = ranks[s < S - 1 ? s + 1 : 0];
    const int64_t bytes = qt_pp_msg_bytes(p), MR = (int64_t)M * R;
    const int64_t P = qt_pp_in_slots(p, s, R); /* input slots, then the sends' 2 M R */
    if (P < 0) return QT_E_PLAN;
    unsigned char *slots = qt_pp_bytes(ctx, p->pp_slots);
    /* the load-balance loss: the running lb sums of each (microbatch, repeat)'s sequences
     * go the activations' way (slots x: received, P + k: sent) */
    const int lb = p->lb_seq != QT_NONE;
    const int64_t lbb = lb ? p->tensors[p->lb_seq].shape[0] * (int64_t)sizeof(float) : 0;
    unsigned char *lbs = lb ? qt_pp_bytes(ctx, p->pp_lb_slots) : NULL;
    const qt_pp_mtp mtp = qt_pp_mtp_of(ctx, ranks, s, bytes); /* the MTP head's messages */
    const int64_t groups = p->train.grad_accum / M;
    const double t0 = qt_pp_clock();
    for (int64_t g = 0; g < groups; g++) {
        /* the receive of the next action posted ahead (ahead >= 0: its request), landing in
         * its input slot, or for a gradient in the slot `land` of a backward's input that
         * is consumed (the same bytes either way: only when they arrive changes) */
        int ahead = -1;
        unsigned char *land = NULL;
        for (int i = 0; i < 2 * MR; i++) {
            const qt_pp_act a = qt_pp_at(p, ch, R, S, s, i);
            const qt_pp_chunk *c = a.c;
            const int64_t mb = g * M + a.j;
            unsigned char *in = slots + a.x * bytes, *act = slots + (P + a.k) * bytes;
            unsigned char *grad = slots + (P + MR + a.k) * bytes;
            unsigned char *lb_in = lb && c->in != QT_NONE ? lbs + a.x * lbb : NULL;
            unsigned char *lb_out = lb ? lbs + (P + a.k) * lbb : NULL;
            int rc = QT_OK;
            st->mb = mb;
            if (g == 0) qt_pp_trace(p, s, (const int[3]){a.bwd, a.j, a.r}, R);
            /* this action's message: posted ahead, or received now */
            const int src = a.bwd ? (c->out != QT_NONE ? next : -1) : (c->in != QT_NONE ? prev : -1);
            unsigned char *dst = a.bwd ? qt_pp_bytes(ctx, c->dout) : in;
            const double w0 = qt_pp_clock();
            if (ahead >= 0) {
                rc = qt_coll_p2p_wait_recv(ahead, src);
                if (!rc && land) memcpy(dst, land, (size_t)bytes);
                ahead = -1;
            } else if (src >= 0) {
                rc = qt_coll_p2p_recv(src, a.bwd ? QT_PP_GRAD : QT_PP_ACT, dst, bytes);
            }
            /* the lb sums, beside a forward's input (kept in their slot for the B) */
            if (!rc && !a.bwd && lb_in) rc = qt_coll_p2p_recv(prev, QT_PP_LB, lb_in, lbb);
            qt_pp_time_add(QT_PP_T_WAIT, w0);
            /* a backward's input is consumed now, so its slot is free */
            if (!rc && a.bwd)
                qt_pp_inputs(ctx, c->in, c->in != QT_NONE ? in : NULL, bytes, lb_in, lbb);
            /* the next action's receive, posted before this action computes: a forward's
             * into its own slot, a backward's (after a backward) into this one's freed slot */
            if (!rc && i + 1 < 2 * MR && qt_pps.prefetch) {
                const qt_pp_act n = qt_pp_at(p, ch, R, S, s, i + 1);
                if (!n.bwd && n.c->in != QT_NONE) {
                    land = NULL;
                    rc = qt_coll_p2p_post_recv(prev, QT_PP_ACT, slots + n.x * bytes, bytes,
                                               &ahead);
                } else if (n.bwd && n.c->out != QT_NONE && a.bwd) {
                    land = in;
                    rc = qt_coll_p2p_post_recv(next, QT_PP_GRAD, land, bytes, &ahead);
                }
            }
            if (!rc && !a.bwd) {
                /* F: a chunk with an output runs its forward and sends it on; the last
                 * stage's last chunk runs at B */
                if (c->out != QT_NONE) {
                    qt_pp_inputs(ctx, c->in, c->in != QT_NONE ? in : NULL, bytes, lb_in, lbb);
                    rc = h->fill(mb, h->arg);
                    if (!rc) qt_interp_run_range(ctx, table, c->f0, c->f1, mb, st);
                    if (!rc && *ctx->status) rc = *ctx->status;
                    if (!rc) {
                        memcpy(act, qt_pp_bytes(ctx, c->out), (size_t)bytes);
                        rc = qt_coll_p2p_send(next, QT_PP_ACT, act, bytes);
                    }
                    if (!rc && lb) {
                        memcpy(lb_out, qt_pp_bytes(ctx, p->lb_seq), (size_t)lbb);
                        rc = qt_coll_p2p_send(next, QT_PP_LB, lb_out, lbb);
                    }
                }
                if (!rc) rc = qt_pp_mtp_step(ctx, &mtp, a.j, a.r, R, 0);
            } else if (!rc) {
                /* B: the forward runs again from the kept input, then the backward; the
                 * input's gradient goes back (a chunk with an input); the chunk's results
                 * are taken now (its layers' dropped counts), the microbatch's after its
                 * last repeat (the loss) */
                rc = qt_pp_mtp_step(ctx, &mtp, a.j, a.r, R, 1);
                if (!rc) rc = h->fill(mb, h->arg);
                if (!rc) qt_interp_run_range(ctx, table, c->f0, c->f1, mb, st);
                if (!rc && !*ctx->status) qt_interp_run_range(ctx, table, c->b0, c->b1, mb, st);
                if (!rc && *ctx->status) rc = *ctx->status;
                if (!rc) rc = qt_pp_mb_end(ctx, table, c, mb, st);
                if (!rc) rc = h->chunk(mb, h->arg);
                if (!rc && a.r == R - 1) rc = h->done(mb, h->arg);
                if (!rc && c->in != QT_NONE) {
                    memcpy(grad, qt_pp_bytes(ctx, c->din), (size_t)bytes);
                    rc = qt_coll_p2p_send(prev, QT_PP_GRAD, grad, bytes);
                }
                if (!rc) rc = qt_pp_mtp_step(ctx, &mtp, a.j, a.r, R, 2);
            }
            if (rc) return rc;
        }
        const int rc = qt_pp_group_end(p, s, R, g == 0);
        if (rc) return rc;
    }
    qt_pp_time_add(QT_PP_T_SCHED, t0);
    return QT_OK;
}

int qt_pp_warm(const qt_plan *p)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    int ranks[QT_PP_MAX_STAGES];
    const int S = p->pipeline_stages, s = qt_pp_peers(p, ranks);
    const int64_t nb = qt_pp_msg_bytes(p), M = p->pp_micro;
    unsigned char *slots = p->arena + p->tensors[p->pp_slots].offset;
    /* 8 messages each way in 8 x big bytes: the first two thirds of the slots, which hold
     * nothing yet (big: a boundary message of nb bytes, at most 64 KiB) */
    int64_t big = nb;
    if (big > (64 << 10)) big = 64 << 10;
    if (8 * big > M * nb) big = M * nb / 8;
    for (int k = 0; k < S && big > 0; k++) {
        if (k == s) continue;
        int rc = qt_coll_warm(ranks[k], slots, slots + M * nb, big);
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
    const double w0 = qt_pp_clock();
    int rc = qt_coll_p2p_recv(ranks[S - 1], QT_PP_METRICS, m, bytes);
    qt_pp_time_add(QT_PP_T_MERGE, w0);
    return rc;
}

int qt_pp_share_metrics(const qt_plan *p, qt_step_metrics *m)
{
    return qt_pp_share_last(p, m, (int64_t)sizeof *m);
}

int qt_pp_share_eval(const qt_plan *p, qt_eval_metrics *e)
{
    return qt_pp_share_last(p, e, (int64_t)sizeof *e);
}

/* The eval's MTP messages of one eval chunk (qt_pp_eval_forward): the head's D boundaries
 * in buf, sent (stage 0, waited for by the chunk's flush) or received (the last stage) on
 * channel 5, as qt_pp_mtp_msgs moves them but off the bubble's clocks. 0 or QT_E_*. */
static int qt_pp_eval_mtp(const qt_pp_mtp *m, int send, unsigned char *buf)
{
    int rc = QT_OK;
    for (int64_t k = 0; k < m->D && !rc; k++)
        rc = send ? qt_coll_p2p_send(m->peer, QT_PP_MTP, buf + k * m->bytes, m->bytes)
                  : qt_coll_p2p_recv(m->peer, QT_PP_MTP, buf + k * m->bytes, m->bytes);
    return rc;
}

int qt_pp_eval_forward(const qt_ctx *ctx, const qt_kernel_entry *table, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    int ranks[QT_PP_MAX_STAGES], R;
    const int S = p->pipeline_stages, s = qt_pp_peers(p, ranks);
    const qt_pp_chunk *ch = qt_pp_chunks(p, &R);
    if (!ch) return QT_E_PLAN;
    /* as in training: a chunk's input from the stage before (stage 0's repeats > 0: the last
     * stage's previous repeat), its output to the stage after (the last stage's repeats
     * < R - 1: stage 0's next repeat) */
    const int prev = ranks[s > 0 ? s - 1 : S - 1], next = ranks[s < S - 1 ? s + 1 : 0];
    const int64_t bytes = qt_pp_msg_bytes(p);
    /* with the load-balance loss the running lb sums go on beside the activations, as in
     * training (channel 3), so every stage's lb_seq is one rank's */
    const int64_t lbb = p->lb_seq != QT_NONE
                            ? p->tensors[p->lb_seq].shape[0] * (int64_t)sizeof(float) : 0;
    const qt_pp_mtp mtp = qt_pp_mtp_of(ctx, ranks, s, bytes); /* the MTP head's messages */
    for (int r = 0; r < R; r++) {
        const qt_pp_chunk *c = &ch[r];
        int rc = QT_OK;
        if (c->in != QT_NONE) {
            rc = qt_coll_p2p_recv(prev, QT_PP_ACT, qt_pp_bytes(ctx, c->in), bytes);
            if (!rc && lbb) rc = qt_coll_p2p_recv(prev, QT_PP_LB, qt_pp_bytes(ctx, p->lb_seq), lbb);
            /* the last stage's first chunk: the head's embeddings from stage 0's first
             * (channel 5), straight into pp_mtp_in (live for the whole microbatch
             * schedule), which its last chunk's head reads */
            if (!rc && mtp.D && !mtp.first && r == 0)
                rc = qt_pp_eval_mtp(&mtp, 0, qt_pp_bytes(ctx, p->pp_mtp_in));
            if (rc) return rc;
        }
        /* the chunk's forward; the last stage's last chunk (no output) through the loss */
        qt_interp_run_forward_range(ctx, table, c->f0,
                                    c->out != QT_NONE ? c->f1 : p->train.eval_fwd_ops, st);
        if (*ctx->status) return *ctx->status;
        if (c->out != QT_NONE) {
            rc = qt_coll_p2p_send(next, QT_PP_ACT, qt_pp_bytes(ctx, c->out), bytes);
            if (!rc && lbb) rc = qt_coll_p2p_send(next, QT_PP_LB, qt_pp_bytes(ctx, p->lb_seq), lbb);
            if (!rc && mtp.D && mtp.first && r == 0)
                rc = qt_pp_eval_mtp(&mtp, 1, qt_pp_bytes(ctx, p->pp_mtp_out));
            if (!rc) rc = qt_coll_p2p_flush();
            if (rc) return rc;
        }
    }
    return QT_OK;
}

/* Every stage's blk bytes (mine: this stage's) into all[0 .. S) (S blocks of blk bytes),
 * over the ranks at this rank's place in each stage; *S receives the stage count. */
static int qt_pp_gather(const qt_plan *p, const void *mine, void *all, int64_t blk, int *S)
{
    int ranks[QT_PP_MAX_STAGES];
    const int s = qt_pp_peers(p, ranks);
    *S = p->pipeline_stages;
    memcpy((unsigned char *)all + s * blk, mine, (size_t)blk);
    const double w0 = qt_pp_clock();
    int rc = qt_coll_p2p_allgather(ranks, *S, s, all, blk);
    qt_pp_time_add(QT_PP_T_MERGE, w0);
    return rc;
}

int qt_pp_exact_merge(const qt_plan *p, qt_exact *a)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    qt_exact *const all = qt_pps.merge_all;
    int S;
    int rc = qt_pp_gather(p, a, all, (int64_t)sizeof *a, &S);
    if (rc) return rc;
    qt_exact_clear(a);
    for (int k = 0; k < S; k++) qt_exact_merge(a, &all[k]);
    return QT_OK;
}

int qt_pp_sum_u64(const qt_plan *p, uint64_t *v, int64_t n)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    enum { CHUNK = QT_PP_SUM_CHUNK };
    uint64_t *const all = qt_pps.sum_all;
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int64_t k = n - i0 < CHUNK ? n - i0 : CHUNK;
        int S;
        int rc = qt_pp_gather(p, v + i0, all, k * (int64_t)sizeof *v, &S);
        if (rc) return rc;
        for (int64_t i = 0; i < k; i++) {
            uint64_t sum = 0;
            for (int st = 0; st < S; st++) sum += all[st * k + i];
            v[i0 + i] = sum;
        }
    }
    return QT_OK;
}
