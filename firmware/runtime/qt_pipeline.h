/* qt_pipeline.h - the pipeline driver: one stage's part of an accumulation step (issue 36,
 * docs/pipeline.md "How the firmware runs it").
 *
 * A pipeline plan's tables are one stage's (qt_plan_fields.def pp_*): its layers, the
 * embedding on stage 0 only, the final norm, head and loss on the last stage only. To the
 * stage the step's M x G microbatches are G' = M x G accumulation microbatches in the order
 * of their sequences, so pushing each one's weight-gradient leaves in that order (the
 * backward of microbatch m before that of m + 1, which both schedules do) gives the
 * one-rank gradient tree, bit for bit. The scalars crossing stages are exact: the norm
 * squared (exact accumulators merged over the stages), the fingerprint (a sum mod 2^64);
 * the loss is the last stage's, sent to the others.
 */
#ifndef QT_PIPELINE_H
#define QT_PIPELINE_H

#include <stdint.h>
#include <stdio.h>
#include "qt_ops.h"
#include "qt_exact.h"
#include "qt_metrics.h"

/* What the runtime does around one accumulation microbatch mb (0 .. G' - 1) of the step:
 * fill writes its inputs (tokens, targets; the data source), chunk takes what one repeat
 * chunk's forward leaves (after each of its B's: token dropping's counts of the chunk's
 * layers), done takes its results after its last repeat (the loss sums, on the last stage;
 * not the microbatch-end schedule, which the driver runs per chunk). 0 or QT_E_*. */
typedef struct qt_pp_hooks {
    int (*fill)(int64_t mb, void *arg);
    int (*chunk)(int64_t mb, void *arg);
    int (*done)(int64_t mb, void *arg);
    void *arg;
} qt_pp_hooks;

/* The most stages the driver runs (qt_validate_pipeline refuses more). */
#define QT_PP_MAX_STAGES 64

/* The most repeats (circular chunks) a stage runs (qt_validate_pipeline refuses more). */
#define QT_PP_MAX_REPEATS 64

/* One repeat chunk of the stage (docs/pipeline.md "How the firmware runs it"): its forward,
 * logical microbatch ops [f0, f1), and its backward, [b0, b1); its microbatch-end ops
 * [e0, e1) (the microbatch form: its ranges' totals, reduce-scatters and pushes, run after
 * the chunk's backward); its boundary tensors (QT_NONE
 * where it has none): in (received), out (sent on), dout (out's gradient, received: the
 * backward's seed), din (in's gradient, sent back); param0 its first local parameter, gparam
 * and gelem that parameter's one-rank index and first element's one-rank index. One repeat:
 * one chunk from the plan's pp_* fields (every microbatch-end op); R > 1: from the PP_CHUNK
 * markers (qt_ops.def; the microbatch-end schedule's, bwd 2, cut it per chunk). */
typedef struct qt_pp_chunk {
    int64_t f0, f1, b0, b1;
    int32_t e0, e1;
    int32_t in, out, dout, din;
    int32_t param0;
    int64_t gparam, gelem;
} qt_pp_chunk;

/* The stage's chunks (its plan's; cached per plan), *R their count; NULL when the markers do
 * not make R chunks in order (a message names the plan), or without pipeline stages. */
const qt_pp_chunk *qt_pp_chunks(const qt_plan *p, int *R);

/* The one-rank index of local parameter i (its initialisation's), and the one-rank index of
 * its first element given `next` = the one after the parameter before it (the fingerprint's
 * running index, which a circular stage's chunk restarts). Without pipeline stages: i and
 * next. */
int64_t qt_pp_param_index(const qt_plan *p, int32_t i);
int64_t qt_pp_elem_base(const qt_plan *p, int32_t i, int64_t next);

/* The stage's rank layout in a job of n ranks: S stages of n / S ranks each, stage =
 * rank div (n / S); *local = the rank inside its stage. */
static inline int qt_pp_stage_of(int rank, int n, int S, int *local)
{
    const int per = S > 0 && n >= S ? n / S : 1;
    *local = rank % per;
    return rank / per;
}

/* Action i (0 .. 2M - 1) of stage st of S's schedule for one group of M microbatches: *j
 * the microbatch, returns 1 for its backward B, 0 for its forward F. schedule 0 gpipe:
 * F0 .. F(M-1), then B0 .. B(M-1), except on the last stage: F0 B0 F1 B1 ... (it computes
 * each microbatch as it arrives; under the test order "reverse" the first form); 1 1f1b (Megatron's non-interleaved): w = min(S - st - 1,
 * M) warm-up forwards, then M - w pairs F(w + i) B(i), then the w remaining backwards.
 * Either way each j is forwarded once and then backwarded once, and the backwards come in
 * increasing j (the one-rank leaf order; tests/unit/test_pipeline.cpp). */
int qt_pp_action(int schedule, int S, int st, int M, int i, int *j);

/* Action i (0 .. 2 M R - 1) of a stage of gpipe with R circular repeats (MaxText's): the
 * forwards repeat by repeat, microbatches 0 .. M-1 in each, then the backwards with the
 * repeats descending, microbatches 0 .. M-1 in each; *j the microbatch, *r the repeat,
 * returns 1 for a backward. R = 1: qt_pp_action's gpipe. Each chunk's backwards come in
 * increasing j (its parameters' one-rank leaf order). */
int qt_pp_action_circ(int M, int R, int i, int *j, int *r);

/* Runs the stage's share of every accumulation microbatch of the step (ctx->plan a
 * pipeline stage's plan; G' = plan grad_accum microbatches, groups of pp_micro) in the order
 * of the plan's schedule (pp_schedule: gpipe, or 1f1b), sending its output boundary to the
 * next stage and its input's gradient to the one before (non-blocking, firmware/comm
 * coll_p2p.c), and receiving theirs. A stage before the last runs a microbatch's forward
 * when the schedule says F and, when it says B, the forward again (stage-boundary
 * rematerialisation: only the inputs of the microbatches in flight are kept, in pp_slots)
 * and the backward; the last stage runs forward and backward at B. With the MTP head
 * (one repeat) stage 0 also sends each microbatch's pp_mtp_out to the last stage at F and
 * receives pp_mtp_dout at B; the last stage receives pp_mtp_in at B and sends pp_mtp_din
 * back. Writes the arena and the gradient trees; st->mb is set per microbatch. 0 or
 * QT_E_* (a hook's, a peer's). */
int qt_pp_microbatches(const qt_ctx *ctx, const qt_kernel_entry *table, qt_step_state *st,
                       const qt_pp_hooks *h);

/* Start-up: the connection warm-up of qt_coll_warm with this rank's place in every other
 * stage, in increasing rank order (the steps' messages then allocate nothing); the buffers
 * are the pipeline slots, which hold nothing yet. 0, or QT_E_COMM past the collectives'
 * deadline (the silent stage named). */
int qt_pp_warm(const qt_plan *p);

/* The step's metrics on every stage from the last stage's (*m: the loss fields the last
 * stage computed; the others receive them). 0 or QT_E_COMM. */
int qt_pp_share_metrics(const qt_plan *p, qt_step_metrics *m);
/* The same for an eval's metrics (the last stage computes the loss). */
int qt_pp_share_eval(const qt_plan *p, qt_eval_metrics *e);

/* One chunk of the held-out eval (its tokens and targets filled on every stage), repeat
 * chunk by repeat chunk (qt_pp_chunks; one without repeats): a chunk with an input boundary
 * receives it from the stage before (stage 0's later repeats: from the last stage, the
 * wrap-around), a chunk with an output runs its forward ops and sends its output on
 * (waiting for the send); the last stage's last chunk runs the eval forward through the loss
 * (to eval_fwd_ops: loss_seq). With the MTP head stage 0's first chunk also sends
 * pp_mtp_out to the last stage, which receives it into pp_mtp_in at its first chunk (the
 * head runs, as MaxText's in eval; its loss is not reported). Forward only: no gradient,
 * nothing pushed. 0 or QT_E_* (a kernel's, a peer's). */
int qt_pp_eval_forward(const qt_ctx *ctx, const qt_kernel_entry *table, qt_step_state *st);

/* Exact merges over the stages (the ranks with this rank's place in the other stages):
 * *a becomes the sum of every stage's accumulator; v[0 .. n) each the sum mod 2^64 (an
 * int64 count's sum too: two's complement). No-ops without pipeline stages. 0 or
 * QT_E_COMM. */
int qt_pp_exact_merge(const qt_plan *p, qt_exact *a);
int qt_pp_sum_u64(const qt_plan *p, uint64_t *v, int64_t n);

/* A test hook (tests/e2e/63_pipeline.sh, read by main from QT_PP_TEST_ORDER), so the bit
 * checks are not vacuous: 1 (=reverse) runs gpipe's backward phase in reverse microbatch
 * order, which pushes the gradient leaves out of the one-rank tree's order; 2 (=lb-local)
 * starts every stage's lb sums from zero instead of the stage before's running sums, so the
 * last stage sums its own layers' load-balance terms only; 3 (=mtp-drop) zeroes, on stage
 * 0, the received gradient of the MTP head's embeddings (received as always: the messages
 * still pair), so the embedding's gradient lacks the head's part. 0 (the default): none. */
void qt_pp_set_test_order(int mode);

/* The bubble's clocks (pipeline_time.c): qt_pp_clock is the monotonic clock in seconds;
 * qt_pp_time_add(kind, t0) adds qt_pp_clock() - t0 to the counter of kind (QT_PP_T_SCHED the
 * stage's microbatch schedule, QT_PP_T_WAIT the waits for boundary messages inside it,
 * QT_PP_T_MERGE the waits at the merges over the stages after it). qt_pp_time_print writes,
 * on the first rank of each stage of a pipeline plan that ran `steps` steps, one line: the
 * schedule's time, computing (schedule - waits), the waits and the measured bubble
 * (waits / (schedule + merge waits)) beside the formula (S-1)/(M+S-1). Nothing otherwise. */
enum { QT_PP_T_SCHED, QT_PP_T_WAIT, QT_PP_T_MERGE, QT_PP_T_COUNT };
double qt_pp_clock(void);
void qt_pp_time_add(int kind, double t0);
void qt_pp_time_print(FILE *f, const qt_plan *p, int64_t steps);
/* Receives posted ahead (main reads QT_PP_PREFETCH=0 to turn them off, for the A/B timing and
 * the test that both give the same bits): 1 (the default) posts the next action's receive
 * before the current action computes, so the boundary message can arrive meanwhile: a
 * forward's into its own input slot, a backward's gradient, when the action before is a
 * backward too, into that action's input slot (consumed by then) and copied into the
 * chunk's d.pp_out at its turn. 0: every receive posted and waited for just before use. */
void qt_pp_set_prefetch(int on);

/* The order trace (main reads QT_PP_TRACE=1; tests/e2e/63_pipeline.sh checks the executed
 * interleaved order against the hand-written table): 1 records the first accumulation
 * group's actions as the driver runs them and, at that group's end, writes one line to
 * stderr, "qtrain: pipeline stage s of S order (schedule, M m, R r): F0/0 F1/0 ..." (R = 1:
 * "F0 B0 ..."; cut with "..." past QT_PP_TRACE_BYTES), once per run. 0 (the default): none. */
#define QT_PP_TRACE_BYTES 2048
void qt_pp_set_trace(int on);

#endif
