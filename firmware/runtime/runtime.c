/* runtime.c - start-up and the optimizer step (see qt_runtime.h); the plan's validation is
 * validate.c.
 *
 * Invariants: after qt_runtime_init succeeds, a step touches only the static arena and this
 * file's static state: no heap, no syscalls except clock_gettime. Every cross-sequence
 * reduction is either a pairwise tree over per-sequence leaves (weight gradients) or an
 * exact accumulator (loss, token count, squared gradient norm), so the step's bits do not
 * depend on the micro_batch x grad_accum split.
 * The step schedule (gradient totals, collectives, normalisation, AdamW) is walked op by op
 * through the kernel table's STEP wrappers (step_ops.c). On a mesh, the rank reads the
 * sequences of its batch index (rank-major blocks of the global batch over the batch axes),
 * and the loss accumulators are merged exactly over those axes.
 * Profiling (off by default) adds clock_gettime calls only.
 */
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "qt_runtime.h"
#include "qt_validate.h"
#include "qt_arena.h"
#include "qt_exact.h"
#include "qt_interp.h"
#include "qt_interp_bf16.h"
#include "qt_optim.h"
#include "qt_pipeline.h"
#include "qt_rng.h"
#include "qt_vec.h"
#include "qt_step.h"
#include "qt_err.h"
#include "comm/qt_coll.h"
#include "math/qt_math.h"
#include "kernels/bf16.h"

/* Largest group the start-up connection warm-up walks (qt_runtime_warm_comm). */
#define QT_STEP_MAX_WARM 1024

enum qt_rt_phase { QT_PH_DATA, QT_PH_SCHED, QT_PH_LOSS, QT_PH_STEP, QT_PH_COUNT };
static const char *const qt_rt_phase_names[QT_PH_COUNT] = {
    "data fill", "schedule (fwd+bwd, see ops)", "loss/token sums",
    "step schedule (see step ops)"
};

/* One step's microbatch loop state: the exact loss accumulators and what the fill and the
 * microbatch's end need (qt_runtime_mb_fill / qt_runtime_mb_done; a pipeline's hooks
 * qt_runtime_mb_fill / qt_runtime_pp_done). */
typedef struct qt_rt_mbs {
    const qt_plan *p;
    int64_t step, R, St, t0;
    qt_step_state *mst;
    qt_step_metrics *m;
    qt_exact loss, lb, cnt, mtp, zl;
    int32_t zt;
    double t;
} qt_rt_mbs;

static struct {
    const qt_plan *plan;
    qt_run_opts opts;
    const qt_kernel_entry *table;
    qt_token_fill_fn tokens;     /* the token source (qt_runtime_set_tokens) and its data */
    const void *tokens_src;
    qt_token_fill_fn eval_tokens; /* the held-out eval's source (qt_runtime_set_eval_tokens) */
    const void *eval_src;
    int eos_set;                 /* qt_runtime_set_eos was called: pack_eos replaces the plan's */
    int32_t pack_eos;
    qt_ctx ctx;                  /* the plan, arena and this rank's mesh coordinates */
    int status;                  /* ctx.status: first error of an op inside a step */
    int64_t batch_index;         /* this rank's block of the global batch */
    int profile;
    int64_t prof_steps;
    double phase_s[QT_PH_COUNT];
    qt_interp_prof prof;
    int64_t warm_cnt[QT_STEP_MAX_WARM], warm_off[QT_STEP_MAX_WARM]; /* qt_runtime_warm_comm */
    qt_rt_mbs mbs;               /* qt_runtime_microbatches' loop state */
} qt_rt;

/* Extern symbols of the standard GNU ld scripts (glibc and musl static): image start and end
 * of initialised data, i.e. what the binary file maps. */
extern char __executable_start[];
extern char _edata[];

void qt_runtime_set_kernel_table(const qt_kernel_entry *table)
{
    qt_rt.table = table;
}

void qt_runtime_set_tokens(qt_token_fill_fn fill, const void *src)
{
    qt_rt.tokens = fill;
    qt_rt.tokens_src = src;
}

void qt_runtime_set_eos(int32_t eos)
{
    qt_rt.eos_set = 1;
    qt_rt.pack_eos = eos;
}

/* The document separator of a packed plan: the one resolved at start-up, else the plan's. */
static int32_t qt_runtime_eos(const qt_plan *p)
{
    return qt_rt.eos_set ? qt_rt.pack_eos : p->pack_eos;
}

void qt_runtime_set_eval_tokens(qt_token_fill_fn fill, const void *src)
{
    qt_rt.eval_tokens = fill;
    qt_rt.eval_src = src;
}

static const qt_kernel_entry *qt_runtime_table(void)
{
    return qt_rt.table ? qt_rt.table : qt_kernel_table;
}

/* qt_ctx.bf16_boundary / bf16_boundary_wgrad: op through the boundary of its kind's entry
 * in the table this runtime runs (the native row kinds' fallback, ops/ops_bf16_rows.c). */
static void qt_runtime_bf16_boundary(const qt_op *op, const qt_ctx *ctx)
{
    qt_bf16_boundary_run(&qt_runtime_table()[op->kind], op, ctx);
}

static void qt_runtime_bf16_boundary_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                           float *const dw[2])
{
    qt_bf16_boundary_wgrad(&qt_runtime_table()[op->kind], op, ctx, seq, dw);
}

static double qt_runtime_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Adds the time since *t to phase ph and restarts *t (profiling only). */
static void qt_runtime_lap(double *t, int ph)
{
    if (!qt_rt.profile) return;
    double now = qt_runtime_now();
    qt_rt.phase_s[ph] += now - *t;
    *t = now;
}

/* UCX connects a pair of ranks lazily, and allocates while doing so, on their first large
 * message: exchange one with every peer of every group the plan uses before the steps
 * (the zero-heap contract covers multi-rank steps). Buffers: the params and gradient
 * regions, which hold nothing yet (parameters are initialised or loaded afterwards). */
static int qt_runtime_warm_comm(const qt_plan *p)
{
    int64_t *const cnt = qt_rt.warm_cnt, *const off = qt_rt.warm_off;
    /* every distinct group mask once (masks are 5-bit) */
    unsigned masks[1u << QT_MESH_COUNT];
    uint32_t seen = 0;
    int nm = 0;
    for (int32_t i = 0; i < 2 * p->n_ranges + 2; i++) {
        unsigned m = i < 2 * p->n_ranges ? (i & 1 ? p->ranges[i / 2].opt_mask
                                                  : p->ranges[i / 2].reduce_mask)
                     : i == 2 * p->n_ranges ? (p->mesh[QT_MESH_TENSOR] > 1 ? 1u << QT_MESH_TENSOR : 0)
                                            : (p->mesh[QT_MESH_EXPERT] > 1 ? 1u << QT_MESH_EXPERT : 0);
        m &= (1u << QT_MESH_COUNT) - 1;
        if (!(seen & (1u << m))) masks[nm++] = m;
        seen |= 1u << m;
    }
    /* the gradient region is the receive buffer: its size bounds every pattern */
    int64_t ge = qt_grads_elems(p) < p->n_flat ? qt_grads_elems(p) : p->n_flat;
    if (qt_params_elems(p) < ge) ge = qt_params_elems(p);  /* the send buffer */
    for (int i = 0; i < nm; i++) {
        const int64_t r = masks[i] ? qt_comm_group_size(masks[i]) : 1;
        if (r <= 1 || r > QT_STEP_MAX_WARM) continue;
        int64_t blk = (4 * ge) / r;
        if (blk > (256 << 10)) blk = 256 << 10;
        for (int64_t j = 0; j < r; j++) {
            cnt[j] = blk;
            off[j] = j * blk;
        }
        /* UCX also grows its request and unexpected-message pools when messages arrive
         * before their receives are posted, which depends on timing: drive them deep with
         * every peer (qt_coll_warm), then run the step's own pattern a few times */
        const int me = qt_comm_group_index(masks[i]);
        const int64_t big = (4 * ge / 8) < (64 << 10) ? (4 * ge / 8) : (64 << 10);
        for (int j = 0; j < r; j++) {
            if (j == me) continue;
            int rc = qt_coll_warm(qt_comm_group_rank(masks[i], j), p->arena + p->params_offset,
                                  p->arena + p->grads_offset, big);
            if (rc) return rc;
        }
        for (int round = 0; round < 4; round++) {
            int64_t se;
            float *scratch = qt_plan_comm_scratch(p, 0, &se);
            int rc = qt_coll_all_to_all_v(masks[i], p->arena + p->params_offset, cnt, off,
                                          p->arena + p->grads_offset, cnt, off, 1);
            if (!rc && ge / r > 0)
                rc = qt_coll_reduce_scatter_f32(masks[i], (float *)(void *)(p->arena + p->grads_offset),
                                                ge / r, scratch, se);
            if (!rc && ge / r > 0)
                rc = qt_coll_all_gather(masks[i], p->arena + p->grads_offset, 4 * (ge / r));
            if (rc) return rc;
        }
    }
    return QT_OK;
}

/* The CPU and the bf16 paths this binary was built for (kernels/bf16.h): QT_OK, or one
 * qt_fail line naming the CPU feature and the first edge lane whose bits differ from the
 * reference step (a build that takes VDPBF16PS refuses a CPU where it is missing or differs).
 * Costs well under a millisecond (5292 lanes, docs/precision.md). Reads and writes only
 * bf16.c's check buffer. */
static int qt_runtime_check_cpu(void)
{
#ifndef QT_REAL_DOUBLE
    char msg[512];
    if (qt_bf16_check(msg, (int)sizeof msg) != QT_OK) return qt_fail(QT_E_PLAN, "start-up: %s", msg);
#endif
    return QT_OK;
}

int qt_runtime_init(const qt_plan *p, const qt_run_opts *o)
{
    static const qt_run_opts defaults = {0, -1.0f, 0, 0, 1, QT_ARENA_PAGES_AUTO};
    if (!p) {
        fprintf(stderr, "qtrain: no plan\n");
        return QT_E_PLAN;
    }
    if (!o) o = &defaults;
    int rc = qt_runtime_check_cpu();
    if (rc == QT_OK) rc = qt_validate_plan(p, o, qt_runtime_table());
    qt_arena_set_pages(o->arena_pages == QT_ARENA_PAGES_HUGE ? QT_ARENA_PAGES_HUGE
                                                               : QT_ARENA_PAGES_AUTO);
    if (rc == QT_OK) rc = qt_arena_init(p);
    if (rc == QT_OK) rc = qt_interp_validate(p, qt_runtime_table());
    /* a rank whose arena does not fit (its own limits) stops every rank before the
     * warm-up's collectives: the error flag (qt_coll.h) */
    if (p->n_ranks > 1) rc = qt_coll_agree("start-up (arena, plan tables)", rc);
    if (rc) return rc;
    qt_rt.plan = p;
    qt_rt.opts = *o;
    qt_rt.status = QT_OK;
    qt_ctx *ctx = &qt_rt.ctx;
    memset(ctx, 0, sizeof *ctx);
    ctx->plan = p;
    ctx->arena = p->arena;
    ctx->rank = o->rank;
    ctx->n_ranks = p->n_ranks;
    ctx->status = &qt_rt.status;
    ctx->bf16_boundary = qt_runtime_bf16_boundary;
    ctx->bf16_boundary_wgrad = qt_runtime_bf16_boundary_wgrad;
    /* mesh coordinates: slice-major mixed radix over the axes, data most significant */
    qt_mesh_coords(p->mesh, p->dcn, o->rank, ctx->coord);
    /* the batch index: mixed radix over the batch axes that split sequences, in axis order
     * (the context ranks share their sequences: docs/context.md) */
    qt_rt.batch_index = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if ((p->batch_mask & (1u << a)) && a != QT_MESH_CONTEXT)
            qt_rt.batch_index = qt_rt.batch_index * p->mesh[a] + ctx->coord[a];
    qt_step_init(p);
    memset(p->arena + p->adam_m_offset, 0, (size_t)p->adam_elems * sizeof(float));
    memset(p->arena + p->adam_v_offset, 0, (size_t)p->adam_elems * sizeof(float));
    qt_interp_run_init(ctx, qt_runtime_table());
    /* the warm-ups run under the collectives' deadline, named in a timeout's message */
    qt_comm_set_context("start-up (connection warm-up)", -1);
    if (p->n_ranks > 1) rc = qt_runtime_warm_comm(p);
    if (rc == QT_OK) rc = qt_pp_warm(p);
    qt_comm_set_context(NULL, -1);
    if (rc != QT_OK) return rc;
    qt_rng_set_rank(o->rank);
    qt_params_init(p, o->seed);
    return qt_runtime_params_changed();
}

int qt_runtime_params_changed(void)
{
    return qt_rt.plan ? qt_step_publish_params(&qt_rt.ctx, 0) : QT_E_PLAN;
}

double qt_runtime_lr(const qt_plan *p, int64_t t)
{
    double peak = qt_rt.opts.lr_override >= 0.0f ? (double)qt_rt.opts.lr_override
                                                 : (double)p->train.lr;
    int64_t n = qt_rt.opts.total_steps > 0 ? qt_rt.opts.total_steps : p->train.schedule_steps;
    if (p->train.lr_schedule == 1)
        return qt_lr_schedule_wsd(t, peak, n, p->train.wsd_warmup, p->train.wsd_decay,
                                  (double)p->train.final_frac, p->train.wsd_cosine);
    return qt_lr_schedule(t, peak, n, (double)p->train.warmup_frac, (double)p->train.final_frac);
}

/* The MTP head's inputs and targets (qt_plan_fields.def mtp_tokens / mtp_targets,
 * docs/model.md 1.8) for the microbatch whose main tokens and targets were just filled
 * (sequences first .. first+b-1, this rank's tokens [t0, t0 + St) of each): per token
 * block of Sb tokens, part 0 the main inputs and targets, part j the window's x_{i+j} and
 * x_{i+j+1} read from the token source (the block's last positions read past the rank's
 * own tokens: the next context rank's), -1 where i + j > S - 1 (no input among the
 * window's, no loss). fill/src: the token source the main tokens came from (the steps' or
 * the held-out eval's, whose "step" is its batch and Bg its global batch). */
static int qt_runtime_mtp_fill(const qt_plan *p, qt_token_fill_fn fill, const void *src,
                               int64_t step, int64_t Bg, int64_t first, int64_t t0, int64_t St)
{
    const qt_ctx *ctx = &qt_rt.ctx;
    const int64_t b = p->train.micro_batch, S = p->train.seq_len, n = 1 + p->mtp_layers;
    const int64_t Sb = S / qt_plan_blocks(p), nbs = St / Sb;
    const int32_t eos = qt_runtime_eos(p);
    const int32_t *tok = qt_i32(ctx, p->tokens), *tg = qt_i32(ctx, p->targets);
    int32_t *mt = qt_i32(ctx, p->mtp_tokens), *mg = qt_i32(ctx, p->mtp_targets);
    for (int64_t q = 0; q < b; q++)
        for (int64_t k = 0; k < nbs; k++) {
            const int64_t blk = (q * nbs + k) * n * Sb;
            memcpy(mt + blk, tok + q * St + k * Sb, (size_t)Sb * sizeof *mt);
            memcpy(mg + blk, tg + q * St + k * Sb, (size_t)Sb * sizeof *mg);
            for (int64_t j = 1; j < n; j++) {
                int32_t *a = mt + blk + j * Sb, *c = mg + blk + j * Sb;
                const int64_t lo = t0 + k * Sb + j, m = S - lo < Sb ? S - lo : Sb;
                if (m > 0) {
                    int rc = fill(src, step, Bg, first + q, 1, S, lo, m, -1, a, c, NULL);
                    if (rc) return rc;
                }
                for (int64_t i = m > 0 ? m : 0; i < Sb; i++) a[i] = c[i] = -1;
            }
            /* packed documents: depth j's target at i is in another document when one of
             * the inputs x_i .. x_{i+j} (parts 0 .. j at i) is eos: no loss */
            if (p->packing)
                for (int64_t i = 0; i < Sb; i++) {
                    int e = mt[blk + i] == eos;
                    for (int64_t j = 1; j < n; j++) {
                        e |= mt[blk + j * Sb + i] == eos;
                        if (e) mg[blk + j * Sb + i] = -1;
                    }
                }
        }
    return QT_OK;
}

/* A token source over the mesh's slots when fewer real sequences than slots exist (issue
 * 35: the eval batch, and a padded training batch): slot j < n (the real sequences) is
 * sequence j, read by the installed fill with n as its global batch (batch e is windows
 * e n .. e n + n - 1); a slot past them (the last microbatch's remainder, a group's empty
 * share) is padded with sequence 0's tokens and positions and every target -1: the cross
 * entropy adds no loss for it and no target is counted (the packing mask's rule), so the
 * loss is the mean over the real sequences' targets. */
typedef struct qt_rt_slots {
    qt_token_fill_fn fill;
    const void *src;
    int64_t n;
} qt_rt_slots;

static int qt_runtime_slots_fill(const void *src, int64_t step, int64_t global_batch,
                                int64_t first, int64_t n_seqs, int64_t S, int64_t tok_lo,
                                int64_t tok_n, int32_t eos, int32_t *inputs, int32_t *targets,
                                int32_t *positions)
{
    const qt_rt_slots *e = (const qt_rt_slots *)src;
    (void)global_batch;  /* the slots' count; the windows advance by the real sequences */
    const int64_t real = first >= e->n ? 0 : e->n - first < n_seqs ? e->n - first : n_seqs;
    int rc = real > 0 ? e->fill(e->src, step, e->n, first, real, S, tok_lo, tok_n, eos, inputs,
                                targets, positions)
                      : QT_OK;
    for (int64_t j = real; j < n_seqs && rc == QT_OK; j++) {
        int32_t *tg = targets + j * tok_n;
        rc = e->fill(e->src, step, e->n, 0, 1, S, tok_lo, tok_n, eos, inputs + j * tok_n, tg,
                     positions ? positions + j * S : NULL);
        for (int64_t t = 0; t < tok_n; t++) tg[t] = -1;
    }
    return rc;
}

/* Microbatch mb's first sequence slot on this rank, a global index (R: the sequence
 * groups): with a microbatch tree microbatch-major, (mb R + index) b; else rank-major,
 * index b G + mb b. Slot i reads window i of the step (the global leaf order). */
static int64_t qt_runtime_mb_first(const qt_plan *p, int64_t mb, int64_t R)
{
    const int64_t b = p->train.micro_batch, G = p->train.grad_accum;
    return p->n_mb_levels > 0 ? (mb * R + qt_rt.batch_index) * b
                              : qt_rt.batch_index * b * G + mb * b;
}

/* A padded batch (issue 35, docs/refusals.md): the plan's global_batch, MaxText's
 * int(ranks x per_device_batch_size) a microbatch, fills fewer than the mesh's slots
 * (micro_batch x grad_accum x the sequence groups); validate.c allows it only without
 * pipeline stages and expert parallelism. */
static int qt_runtime_padded(const qt_plan *p)
{
    return p->train.global_batch <
           p->train.micro_batch * p->train.grad_accum * qt_plan_seq_groups(p);
}

/* The padded sequences at the end of microbatch mb on this rank: its slots at or past the
 * global_batch real ones (0 unless padded). */
static int64_t qt_runtime_pads(const qt_plan *p, int64_t mb, int64_t R)
{
    const int64_t b = p->train.micro_batch, N = p->train.global_batch;
    const int64_t first = qt_runtime_mb_first(p, mb, R);
    return first >= N ? b : first + b > N ? first + b - N : 0;
}

/* The positions with an MTP loss in this microbatch's filled mtp_targets (parts j >= 1). */
static int64_t qt_runtime_mtp_count(const qt_plan *p)
{
    const int64_t n = 1 + p->mtp_layers, Sb = p->train.seq_len / qt_plan_blocks(p);
    const int64_t nblk = p->train.micro_batch * (qt_plan_tokens_per_seq(p) / Sb);
    const int32_t *mg = qt_i32(&qt_rt.ctx, p->mtp_targets);
    int64_t c = 0;
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t i = Sb; i < n * Sb; i++) c += mg[k * n * Sb + i] >= 0;
    return c;
}


/* Microbatch mb of step `step`: its sequences' tokens, targets and (packed) positions from
 * the token source, and the MTP head's inputs and targets when the plan has one. R: the
 * batch groups; St, t0: this rank's tokens of each sequence (context). Shared by the packed
 * MTP pre-pass and the step, so both read the same windows. */
static int qt_runtime_fill_mb(const qt_plan *p, int64_t step, int64_t mb, int64_t R,
                              int64_t St, int64_t t0)
{
    const qt_ctx *ctx = &qt_rt.ctx;
    const int64_t b = p->train.micro_batch, S = p->train.seq_len;
    const int64_t first = qt_runtime_mb_first(p, mb, R);
    int32_t *pos = (int32_t *)qt_plan_positions(ctx), *tg = qt_i32(ctx, p->targets);
    /* a padded batch (issue 35): the slots past the step's global_batch sequences are
     * padded as the eval's are (qt_runtime_slots_fill: every target masked) */
    const qt_rt_slots slots = {qt_rt.tokens, qt_rt.tokens_src, p->train.global_batch};
    const int padded = qt_runtime_padded(p);
    const qt_token_fill_fn fill = padded ? qt_runtime_slots_fill : qt_rt.tokens;
    const void *src = padded ? (const void *)&slots : qt_rt.tokens_src;
    int rc = fill(src, step, p->train.global_batch, first, b, S, t0, St, qt_runtime_eos(p),
                  qt_i32(ctx, p->tokens), tg, pos);
    if (!rc && p->mtp_layers > 0)
        rc = qt_runtime_mtp_fill(p, fill, src, step, p->train.global_batch, first, t0, St);
    return rc;
}
/* Packed documents with the MTP head: a pre-pass over the step's windows (the same fills
 * the microbatches make) counts N, the targets with a loss, and M, the MTP positions with a
 * loss, as exact integer sums over the batch axes; writes the MTP gradient scale
 * factor x max(N,1) / max(M,1) (qt_ops.def XENT_MTP t6: the gradient is later divided by
 * max(N,1)) and leaves M in *n_mtp. */
static int qt_runtime_mtp_prepass(const qt_plan *p, int64_t step, int64_t R, int64_t St,
                                  int64_t t0, int64_t *n_mtp)
{
    const qt_ctx *ctx = &qt_rt.ctx;
    const int64_t b = p->train.micro_batch, G = p->train.grad_accum;
    int64_t c[2] = {0, 0};
    for (int64_t mb = 0; mb < G; mb++) {
        int32_t *tg = qt_i32(ctx, p->targets);
        int rc = qt_runtime_fill_mb(p, step, mb, R, St, t0);
        if (rc) return rc;
        for (int64_t i = 0; i < b * St; i++) c[0] += tg[i] >= 0;
        c[1] += qt_runtime_mtp_count(p);
    }
    if (p->batch_mask) {
        int rc = qt_coll_sum_i64(p->batch_mask, c, 2);
        if (rc) return rc;
    }
    const double N = (double)(c[0] > 1 ? c[0] : 1), M = (double)(c[1] > 1 ? c[1] : 1);
    *qt_f32(ctx, p->mtp_scale) = (float)((double)p->mtp_factor * N / M);
    *n_mtp = c[1];
    return QT_OK;
}

/* The z-loss's per-sequence sums (XENT t5 z_seq, XENT_MTP t7 with the MTP head: plans
 * with z_loss_multiplier), else QT_NONE: the last XENT or XENT_MTP of the stored
 * microbatch schedule (the forward's loss). */
static int32_t qt_runtime_z_seq(const qt_plan *p)
{
    if (p->train.z_loss == 0.0f) return QT_NONE;
    for (int32_t i = p->n_mb_ops - 1; i >= 0; i--) {
        if (p->mb_ops[i].kind == QT_OP_XENT) return QT_T(&p->mb_ops[i], XENT, z_seq);
        if (p->mb_ops[i].kind == QT_OP_XENT_MTP) return QT_T(&p->mb_ops[i], XENT_MTP, z_seq);
    }
    return QT_NONE;
}

/* The eval's acceptance counts of the MTP head (mtp_eval_target_module): the MTP_ACCEPT op
 * of the stored microbatch schedule (a pipeline: the last stage's), else NULL; *k its
 * depth. */
static const qt_op *qt_runtime_accept_op(const qt_plan *p, int64_t *k)
{
    for (int32_t i = 0; i < p->n_mb_ops; i++)
        if (p->mb_ops[i].kind == QT_OP_MTP_ACCEPT) {
            *k = QT_A(&p->mb_ops[i], MTP_ACCEPT, k);
            return &p->mb_ops[i];
        }
    *k = 0;
    return NULL;
}

/* Token dropping: adds this microbatch's dropped counts (moe_drops, [layers x b]) into m's
 * per-layer totals, as int64. */
static void qt_runtime_drops_add(const qt_plan *p, qt_step_metrics *m, int64_t pads)
{
    if (!qt_plan_drops(p)) return;
    const int32_t *dr = qt_i32(&qt_rt.ctx, p->moe_drops);
    const int64_t b = p->train.micro_batch, L = p->model.n_layers, real = b - pads;
    for (int64_t l = 0; l < L; l++) {
        int64_t n = 0;
        for (int64_t s = 0; s < real; s++) n += dr[l * b + s];   /* not a padded sequence's */
        if (l < QT_METRICS_MAX_LAYERS) m->moe_dropped_layer[l] += n;
        m->moe_dropped += n;
    }
    /* the MTP head's MoE layers: rows L .. L + depths - 1, counted apart */
    for (int64_t l = L; l < L + p->mtp_layers; l++)
        for (int64_t s = 0; s < real; s++) m->mtp_moe_dropped += dr[l * b + s];
}

/* The step's dropped counts over the batch axes (each sequence counted once: tensor ranks
 * share theirs) and the pipeline's stages, exact integer sums; and the step's assignment
 * count. */
static int qt_runtime_drops_merge(const qt_plan *p, qt_step_metrics *m)
{
    if (!qt_plan_drops(p)) return QT_OK;
    const int64_t L = p->model.n_layers;
    m->n_drop_layers = (int32_t)(L < QT_METRICS_MAX_LAYERS ? L : QT_METRICS_MAX_LAYERS);
    m->moe_assignments = p->train.global_batch * p->train.seq_len * p->model.top_k * L;
    int rc = QT_OK;
    if (p->batch_mask) {
        rc = qt_coll_sum_i64(p->batch_mask, &m->moe_dropped, 1);
        if (!rc && p->mtp_layers > 0) rc = qt_coll_sum_i64(p->batch_mask, &m->mtp_moe_dropped, 1);
        if (!rc) rc = qt_coll_sum_i64(p->batch_mask, m->moe_dropped_layer, m->n_drop_layers);
    }
    /* a pipeline stage counts its own layers' rows (the others are zero): the sums over the
     * stages, then the last stage's metrics carry every layer's */
    if (!rc) rc = qt_pp_sum_u64(p, (uint64_t *)(void *)&m->moe_dropped, 1);
    if (!rc) rc = qt_pp_sum_u64(p, (uint64_t *)(void *)m->moe_dropped_layer, m->n_drop_layers);
    return rc;
}

/* Microbatch mb's inputs (tokens, targets). A pipeline stage fills a microbatch once per
 * forward it runs (F, the rematerialised forward at B, each repeat chunk's), so what is
 * counted once per microbatch is counted at its end (qt_runtime_mb_done). */
static int qt_runtime_mb_fill(int64_t mb, void *arg)
{
    qt_rt_mbs *a = arg;
    int rc = qt_runtime_fill_mb(a->p, a->step, mb, a->R, a->St, a->t0);
    if (rc) return rc;
    qt_runtime_lap(&a->t, QT_PH_DATA);
    return QT_OK;
}

/* After microbatch mb's schedule: its per-sequence losses into the exact accumulators,
 * packed: the count of its targets with a loss (the normaliser, exact: the filled targets
 * are still mb's), its dropped counts (a pipeline stage's: qt_runtime_mb_chunk; a
 * pipeline's hook: the driver ran the microbatch-end schedule). */
static int qt_runtime_mb_take(int64_t mb, void *arg)
{
    qt_rt_mbs *a = arg;
    const qt_plan *p = a->p;
    const qt_ctx *ctx = &qt_rt.ctx;
    a->mst->mb = mb;
    /* a padded batch: the real sequences' entries only (a padded one's losses are 0, its
     * targets masked, but its load-balance term and dropped counts are not: issue 35) */
    const int64_t b = p->train.micro_batch, pads = qt_runtime_pads(p, mb, a->R);
    const int64_t nl = qt_plan_leaves_per_mb(p) - pads * (qt_plan_leaves_per_mb(p) / b);
    const float *ls = qt_f32(ctx, p->loss_seq);
    for (int64_t s = 0; s < nl; s++) qt_exact_add_f(&a->loss, ls[s]);
    if (qt_plan_positions(ctx)) {
        const int32_t *tg = qt_i32(ctx, p->targets);
        int64_t n = 0;
        for (int64_t i = 0; i < b * a->St; i++) n += tg[i] >= 0;
        qt_exact_add_f(&a->cnt, (float)n);
    }
    if (p->mtp_layers > 0) {
        const float *ms = qt_f32(ctx, p->mtp_loss_seq);
        for (int64_t s = 0; s < nl; s++) qt_exact_add_f(&a->mtp, ms[s]);
    }
    if (a->zt != QT_NONE) {
        const float *zs = qt_f32(ctx, a->zt);
        for (int64_t s = 0; s < nl; s++) qt_exact_add_f(&a->zl, zs[s]);
    }
    if (p->lb_seq != QT_NONE) {
        const float *lbs = qt_f32(ctx, p->lb_seq);
        for (int64_t s = 0; s < b - pads; s++) qt_exact_add_f(&a->lb, lbs[s]);
    }
    if (p->pipeline_stages <= 1) qt_runtime_drops_add(p, a->m, pads);   /* a pipeline's: per chunk */
    qt_runtime_lap(&a->t, QT_PH_LOSS);
    return QT_OK;
}

/* After microbatch mb's schedule: the microbatch-end schedule (its totals, reduced and
 * pushed), then qt_runtime_mb_take. */
static int qt_runtime_mb_done(int64_t mb, void *arg)
{
    qt_rt_mbs *a = arg;
    const qt_plan *p = a->p;
    const qt_kernel_entry *table = qt_runtime_table();
    qt_runtime_lap(&a->t, QT_PH_SCHED);
    a->mst->mb = mb;
    for (int32_t i = 0; i < p->n_mbend_ops; i++) {
        int rc = table[p->mbend_ops[i].kind].step(&p->mbend_ops[i], &qt_rt.ctx, a->mst);
        if (rc) return rc;
    }
    return qt_runtime_mb_take(mb, arg);
}

/* A pipeline stage's end of microbatch mb (its hook: the driver ran the microbatch-end
 * schedule per chunk). */
static int qt_runtime_pp_done(int64_t mb, void *arg)
{
    qt_rt_mbs *a = arg;
    qt_runtime_lap(&a->t, QT_PH_SCHED);
    return qt_runtime_mb_take(mb, arg);
}

/* A pipeline stage after each repeat chunk's B of microbatch mb: the chunk's dropped counts
 * (its forward zeroed moe_drops and added its layers' rows; integers, so their order over
 * the chunks and stages is free). */
static int qt_runtime_mb_chunk(int64_t mb, void *arg)
{
    qt_rt_mbs *a = arg;
    (void)mb;
    qt_runtime_drops_add(a->p, a->m, 0);   /* a pipeline is never padded (validate.c) */
    return QT_OK;
}

/* Every microbatch of the step: fill its tokens, run the schedule (forward, backward,
 * per-sequence leaves into the trees), and add its per-sequence losses to the exact
 * accumulators, merged over the batch axes. Leaves the step's token count, loss and
 * learning rate in *m. Returns the data fill's error (an id no longer in range: the file
 * changed) before that microbatch's schedule runs. A pipeline stage runs its share of
 * every microbatch in the order of the plan's schedule (pipeline.c); the last stage's
 * losses become every stage's metrics. */
static int qt_runtime_microbatches(const qt_plan *p, int64_t step, qt_step_metrics *m)
{
    if (!qt_rt.tokens) return QT_E_PLAN;
    const qt_kernel_entry *table = qt_runtime_table();
    const qt_ctx *ctx = &qt_rt.ctx;
    const int64_t G = p->train.grad_accum;
    /* One tree over the step's leaves: the rank owns a contiguous, rank-major block of the
     * global batch. With a microbatch tree: microbatch-major, so one microbatch's sequences
     * over the batch axes are a contiguous block (docs/design.md s.6): mb * R * b + index * b.
     * Under context parallelism R counts the sequence groups (the batch axes but context)
     * and the rank reads its token block [c * S/C, (c+1) * S/C) of each sequence. */
    const unsigned seq_mask = p->batch_mask & ~(1u << QT_MESH_CONTEXT);
    qt_step_state mst = {step, 0, m, 0, 0, 0.0f};
    qt_rt_mbs *const a = &qt_rt.mbs;
    memset(a, 0, sizeof *a);
    a->p = p;
    a->step = step;
    a->R = seq_mask ? qt_comm_group_size(seq_mask) : 1;
    a->St = qt_plan_tokens_per_seq(p);
    a->t0 = a->St * qt_rt.ctx.coord[QT_MESH_CONTEXT];
    a->mst = &mst;
    a->m = m;
    qt_exact_clear(&a->loss);
    qt_exact_clear(&a->lb);
    qt_exact_clear(&a->cnt);
    qt_exact_clear(&a->mtp);
    qt_exact_clear(&a->zl);
    a->zt = qt_runtime_z_seq(p);
    m->moe_dropped = m->moe_assignments = m->mtp_moe_dropped = 0;
    m->n_drop_layers = 0;
    memset(m->moe_dropped_layer, 0, sizeof m->moe_dropped_layer);
    a->t = qt_rt.profile ? qt_runtime_now() : 0.0;
    int64_t n_mtp_packed = 0;
    /* (a pipeline: on the last stage, which holds the head; the others' scale is unread) */
    if (p->mtp_layers > 0 && p->packing &&
        (p->pipeline_stages <= 1 || p->pp_stage == p->pipeline_stages - 1)) {
        int rc = qt_runtime_mtp_prepass(p, step, a->R, a->St, a->t0, &n_mtp_packed);
        if (rc) return rc;
        qt_runtime_lap(&a->t, QT_PH_DATA);
    }
    if (p->pipeline_stages > 1) {
        const qt_pp_hooks h = {qt_runtime_mb_fill, qt_runtime_mb_chunk, qt_runtime_pp_done, a};
        int rc = qt_pp_microbatches(ctx, table, &mst, &h);
        if (rc) return rc;
    }
    for (int64_t mb = 0; mb < G && p->pipeline_stages <= 1; mb++) {
        int rc = qt_runtime_mb_fill(mb, a);
        if (rc) return rc;
        mst.mb = mb;
        mst.pads = qt_runtime_pads(p, mb, a->R);
        qt_interp_run_microbatch(ctx, table, mb, &mst);
        if (qt_rt.status) return qt_rt.status;
        rc = qt_runtime_mb_done(mb, a);
        if (rc) return rc;
    }
    qt_exact *const loss = &a->loss, *const lb = &a->lb, *const cnt = &a->cnt, *const mtp = &a->mtp;
    qt_exact *const zl = &a->zl;
    const int32_t zt = a->zt;
    int rc = qt_step_exact_merge(p->batch_mask, loss);
    if (!rc && p->lb_seq != QT_NONE) rc = qt_step_exact_merge(p->batch_mask, lb);
    if (!rc && p->packing) rc = qt_step_exact_merge(p->batch_mask, cnt);
    if (!rc && p->mtp_layers > 0) rc = qt_step_exact_merge(p->batch_mask, mtp);
    if (!rc && zt != QT_NONE) rc = qt_step_exact_merge(p->batch_mask, zl);
    if (!rc) rc = qt_runtime_drops_merge(p, m);
    if (rc) return rc;
    qt_runtime_lap(&a->t, QT_PH_LOSS);
    const double n_all = (double)(p->train.global_batch * p->train.seq_len);
    /* the mean over the targets with a loss (at least one: a step of separators only has
     * loss 0 and a zero gradient) */
    const double n_tok = p->packing ? qt_exact_value(cnt) : n_all;
    double loss_v = qt_exact_value(loss) / (n_tok > 1.0 ? n_tok : 1.0) + qt_exact_value(lb);
    /* the MTP head: its CE mean over the step's positions with an MTP loss (B x (S - j)
     * per depth j; packed, the pre-pass's count), times the factor */
    m->mtp = p->mtp_layers > 0;
    m->mtp_loss = 0.0;
    if (m->mtp) {
        double n_mtp = (double)n_mtp_packed;
        for (int64_t j = 1; j <= p->mtp_layers && !p->packing; j++)
            n_mtp += (double)(p->train.global_batch * (p->train.seq_len - j));
        m->mtp_loss = qt_exact_value(mtp) / (n_mtp > 1.0 ? n_mtp : 1.0);
        loss_v += (double)p->mtp_factor * m->mtp_loss;
    }
    m->step = step;
    m->loss_f32 = (float)loss_v;
    m->loss = (double)m->loss_f32;
    m->tokens = (int64_t)n_all;
    m->loss_tokens = (int64_t)n_tok;
    m->packed = p->packing != 0;
    m->has_z = zt != QT_NONE;
    m->z_loss = m->has_z ? (double)(float)(qt_exact_value(zl) / (n_tok > 1.0 ? n_tok : 1.0))
                         : 0.0;
    m->lr = qt_runtime_lr(p, step);
    /* a pipeline: the loss is the last stage's */
    return qt_pp_share_metrics(p, m);
}

int64_t qt_runtime_eval_batch(const qt_plan *p)
{
    if (p->train.eval_interval <= 0) return 0;
    return p->train.eval_global > 0 ? p->train.eval_global
                                    : p->train.eval_batch * qt_plan_seq_groups(p);
}

/* One eval batch's acceptance counts c[2] (matches, positions) summed over the batch axes
 * (integers: exact), added to the pass's counts (the rate is theirs: qt_runtime_eval_run). */
static int qt_runtime_accept_batch(const qt_plan *p, int64_t c[2], qt_eval_metrics *e)
{
    if (p->batch_mask) {
        int rc = qt_coll_sum_i64(p->batch_mask, c, 2);
        if (rc) return rc;
    }
    e->mtp_accepted += c[0];
    e->mtp_accept_positions += c[1];
    c[0] = c[1] = 0;
    return QT_OK;
}

/* The eval's sequences: in eval batch e, the rank's sequence group holds the slots
 * [index * eval_batch, (index + 1) * eval_batch) of the mesh's, in ceil(eval_batch /
 * micro_batch) chunks of micro_batch (every group the same count: the collectives stay in
 * step); slots past the eval batch's sequences are padded (qt_runtime_slots_fill). Any
 * split gives the same exact sums: each sequence's loss is its own (the forward mixes no
 * sequences), a padded one's is 0. With MTP_ACCEPT (mtp_eval_target_module) each forward's
 * acceptance counts add up per eval batch, whose rate qt_runtime_accept_batch takes. */
static int qt_runtime_eval_run(const qt_plan *p, int64_t step, int64_t n_batches,
                               qt_eval_metrics *e)
{
    const qt_kernel_entry *table = qt_runtime_table();
    const qt_ctx *ctx = &qt_rt.ctx;
    const int64_t b = p->train.micro_batch, S = p->train.seq_len;
    const int64_t Bg = qt_runtime_eval_batch(p), per = p->train.eval_batch;
    const int64_t St = qt_plan_tokens_per_seq(p), t0 = St * ctx->coord[QT_MESH_CONTEXT];
    const qt_rt_slots slots = {qt_rt.eval_tokens, qt_rt.eval_src, Bg};
    const double tstart = qt_runtime_now();
    qt_step_metrics sm;
    memset(&sm, 0, sizeof sm);
    qt_step_state st = {step, 0, &sm, 0, 0, 0.0f};
    qt_exact loss, cnt;
    qt_exact_clear(&loss);
    qt_exact_clear(&cnt);
    int64_t depth, acc[2] = {0, 0};
    const qt_op *aop = qt_runtime_accept_op(p, &depth);
    e->mtp_accepted = e->mtp_accept_positions = 0;
    for (int64_t eb = 0; eb < n_batches; eb++) {
        for (int64_t k = 0; k < (per + b - 1) / b; k++) {
            const int64_t first = qt_rt.batch_index * per + k * b;
            int32_t *pos = (int32_t *)qt_plan_positions(ctx), *tg = qt_i32(ctx, p->targets);
            int rc = qt_runtime_slots_fill(&slots, eb, Bg, first, b, S, t0, St, qt_runtime_eos(p),
                                          qt_i32(ctx, p->tokens), tg, pos);
            if (!rc && p->mtp_layers > 0) /* the head's inputs: the stacked embedding reads them */
                rc = qt_runtime_mtp_fill(p, qt_runtime_slots_fill, &slots, eb, Bg, first, t0, St);
            if (rc) return rc;
            if (pos) { /* packed: the targets with a loss, as in training */
                int64_t n = 0;
                for (int64_t i = 0; i < b * St; i++) n += tg[i] >= 0;
                qt_exact_add_f(&cnt, (float)n);
            }
            if (p->pipeline_stages > 1) {   /* the stages in turn, the loss on the last */
                rc = qt_pp_eval_forward(ctx, table, &st);
                if (rc) return rc;
            } else {
                qt_interp_run_forward(ctx, table, p->train.eval_fwd_ops, &st);
            }
            if (qt_rt.status) return qt_rt.status;
            const float *ls = qt_f32(ctx, p->loss_seq);
            for (int64_t s = 0; s < qt_plan_leaves_per_mb(p); s++) qt_exact_add_f(&loss, ls[s]);
            if (aop) { /* this forward's acceptance counts (MTP_ACCEPT t0) */
                const int32_t *a = qt_i32(ctx, QT_T(aop, MTP_ACCEPT, acc));
                acc[0] += a[0];
                acc[1] += a[1];
            }
        }
        if (aop) {
            int rc = qt_runtime_accept_batch(p, acc, e);
            if (rc) return rc;
        }
    }
    int rc = qt_step_exact_merge(p->batch_mask, &loss);
    if (!rc && p->packing) rc = qt_step_exact_merge(p->batch_mask, &cnt);
    if (rc) return rc;
    const double n_all = (double)(n_batches * Bg * S);
    const double n_tok = p->packing ? qt_exact_value(&cnt) : n_all;
    e->step = step;
    e->loss_f32 = (float)(qt_exact_value(&loss) / (n_tok > 1.0 ? n_tok : 1.0));
    e->loss = (double)e->loss_f32;
    e->tokens = (int64_t)n_tok;
    e->batches = n_batches;
    /* the acceptance rate over the whole pass, 100 x matches / positions (session 23), as
     * the eval loss is the pass's sum over its targets: the same bits however the eval is
     * cut into batches (eval_per_device_batch_size, which defaults to the microbatch's
     * per_device_batch_size, so G changes it). MaxText's eval/avg_mtp_acceptance_rate_percent
     * is the plain mean of the batches' float32 rates; unpacked, every batch has the same
     * positions and the two agree up to that rounding (docs/model.md 1.8) */
    e->mtp_accept_k = (int32_t)depth;
    e->mtp_accept_rate = e->mtp_accept_positions > 0
                             ? 100.0 * (double)e->mtp_accepted / (double)e->mtp_accept_positions
                             : 0.0;
    e->seconds = qt_runtime_now() - tstart;
    /* a pipeline: the loss is the last stage's */
    return qt_pp_share_eval(p, e);
}

/* The eval's forwards run with ctx.eval set (the eval-only kinds: MTP_ACCEPT). */
int qt_runtime_eval(const qt_plan *p, int64_t step, int64_t n_batches, qt_eval_metrics *e)
{
    if (!qt_rt.eval_tokens || p->train.eval_interval <= 0 || p != qt_rt.plan) return QT_E_PLAN;
    qt_rt.ctx.eval = 1;
    const int rc = qt_runtime_eval_run(p, step, n_batches, e);
    qt_rt.ctx.eval = 0;
    return rc;
}

/* Walks the step schedule through the kernel table; with `grads_only` it stops before the
 * update (the gradient region then holds the normalised, unclipped gradient; without, the
 * normalising op before ADAMW leaves its division to it: st.update_next). */
static int qt_runtime_step_schedule(const qt_plan *p, int64_t step, qt_step_metrics *m,
                                    int grads_only)
{
    const qt_kernel_entry *table = qt_runtime_table();
    qt_step_state st = {step, 0, m, 0, 0, 0.0f};
    qt_interp_prof *prof = qt_rt.profile ? &qt_rt.prof : NULL;
    double t = qt_rt.profile ? qt_runtime_now() : 0.0;
    for (int32_t i = 0; i < p->n_step_ops; i++) {
        const qt_op *op = &p->step_ops[i];
        if (grads_only && op->kind == QT_OP_ADAMW) break;
        double t0 = prof ? qt_runtime_now() : 0.0;
        /* the last microbatch's split reduce-scatter: its wait and push */
        st.mb = (op->flags & QT_OPF_PREV_MB) ? p->train.grad_accum - 1 : 0;
        st.update_next = !grads_only && i + 1 < p->n_step_ops &&
                         p->step_ops[i + 1].kind == QT_OP_ADAMW;
        int rc = table[op->kind].step(op, &qt_rt.ctx, &st);
        if (rc) return rc;
        if (prof) {
            prof->run_s[op->kind] += qt_runtime_now() - t0;
            prof->run_calls[op->kind]++;
        }
    }
    qt_runtime_lap(&t, QT_PH_STEP);
    return QT_OK;
}

int qt_runtime_grads(const qt_plan *p, int64_t step, qt_step_metrics *m)
{
    if (!p || p != qt_rt.plan) return QT_E_PLAN;
    double t0 = qt_runtime_now();
    int rc = qt_runtime_microbatches(p, step, m);
    if (!rc) rc = qt_runtime_step_schedule(p, step, m, 1);
    if (rc) return rc;
    m->step_seconds = qt_runtime_now() - t0;
    m->tokens_per_s = m->step_seconds > 0.0 ? (double)m->tokens / m->step_seconds : 0.0;
    /* on a compact parameter region no rank holds every element: the blocks' sum */
    if (qt_plan_masters_compact(p)) {
        m->fingerprint = qt_step_fingerprint(&qt_rt.ctx, &rc);
        return rc;
    }
    m->fingerprint = qt_param_fingerprint(p);
    return QT_OK;
}

int qt_runtime_step(const qt_plan *p, int64_t step, qt_step_metrics *m)
{
    if (!p || p != qt_rt.plan) return QT_E_PLAN;
    double t0 = qt_runtime_now();
    int rc = qt_runtime_microbatches(p, step, m);
    if (!rc) rc = qt_runtime_step_schedule(p, step, m, 0);
    if (rc) return rc;
    if (qt_rt.profile) qt_rt.prof_steps++;
    m->step_seconds = qt_runtime_now() - t0;
    m->tokens_per_s = m->step_seconds > 0.0 ? (double)m->tokens / m->step_seconds : 0.0;
    return QT_OK;
}

void qt_runtime_profile_enable(int on)
{
    qt_rt.profile = on != 0;
    qt_interp_set_profile(on ? &qt_rt.prof : NULL);
}

void qt_runtime_profile_print(FILE *f)
{
    if (!qt_rt.profile) return;
    const double n = qt_rt.prof_steps > 0 ? (double)qt_rt.prof_steps : 1.0;
    const qt_kernel_entry *table = qt_runtime_table();
    double total = 0.0;
    for (int i = 0; i < QT_PH_COUNT; i++) total += qt_rt.phase_s[i];
    fprintf(f, "qtrain profile: %lld optimizer step%s, ms per step (share of the timed total)\n",
            (long long)qt_rt.prof_steps, qt_rt.prof_steps == 1 ? "" : "s");
    for (int i = 0; i < QT_PH_COUNT; i++)
        fprintf(f, "  phase %-34s %10.2f ms %6.2f%%\n", qt_rt_phase_names[i],
                1e3 * qt_rt.phase_s[i] / n, total > 0 ? 100.0 * qt_rt.phase_s[i] / total : 0.0);
    const qt_interp_prof *pr = &qt_rt.prof;
    fprintf(f, "  sched leaf-gradient zeroing                %10.2f ms %6.2f%%\n",
            1e3 * pr->leaf_zero_s / n, total > 0 ? 100.0 * pr->leaf_zero_s / total : 0.0);
    fprintf(f, "  sched tree pushes                          %10.2f ms %6.2f%%\n",
            1e3 * pr->tree_push_s / n, total > 0 ? 100.0 * pr->tree_push_s / total : 0.0);
    for (int k = 0; k < QT_OP_COUNT; k++) {
        for (int w = 0; w < 2; w++) {
            double sec = w ? pr->wgrad_s[k] : pr->run_s[k];
            int64_t calls = w ? pr->wgrad_calls[k] : pr->run_calls[k];
            if (!calls) continue;
            fprintf(f, "  op    %-20s %-6s %6.0f calls %10.2f ms %6.2f%%\n",
                    table[k].name ? table[k].name : "?",
                    w ? "wgrad" : table[k].cls == QT_OPC_STEP ? "step" : "run", (double)calls / n,
                    1e3 * sec / n, total > 0 ? 100.0 * sec / total : 0.0);
        }
    }
}

void qt_runtime_memory_print(FILE *f, const qt_plan *p)
{
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (getrusage(RUSAGE_SELF, &ru) != 0) return;
    const double mib = 1024.0 * 1024.0;
    /* ru_maxrss is in KiB on Linux (glibc and musl alike) */
    /* hugetlbfs pages are not counted in RSS: say so rather than print a figure that
     * looks smaller than the arena */
    fprintf(f, "qtrain: peak RSS %.1f MiB (arena %.1f MiB%s, binary %.1f MiB)\n",
            (double)ru.ru_maxrss / 1024.0, p ? (double)p->arena_bytes / mib : 0.0,
            qt_arena_mode() == QT_ARENA_HUGETLB ? " on hugetlbfs pages, not in RSS" : "",
            (double)(_edata - __executable_start) / mib);
}

void qt_runtime_mark_steps(int in_steps)
{
    if (qt_heap_audit_mark) qt_heap_audit_mark(in_steps);
}

void qt_runtime_banner(FILE *f, const qt_plan *p, const char *comm_backend)
{
    const double pf = qt_arena_prefault_seconds();
    double thp_gbps = 0.0;
    const long long small = qt_arena_small_bytes(&thp_gbps);
    fprintf(f, "qtrain: run %s | plan 0x%016llx (%s) | arena %.1f MiB on %s pages, prefault "
            "%.3f s (%s, %.1f GB/s) | %d rank%s | comm %s\n", p->run_name,
            (unsigned long long)p->hash, p->generator_version ? p->generator_version : "?",
            (double)p->arena_bytes / (1024.0 * 1024.0), qt_arena_mode_name(), pf,
            qt_arena_prefault_method(), pf > 0 ? (double)p->arena_bytes / pf / 1e9 : 0.0,
            p->n_ranks, p->n_ranks == 1 ? "" : "s", comm_backend);
    if (small > 0)
        fprintf(f, "qtrain: note: %.1f MiB of the arena on 4 KiB pages: the kernel gave huge "
                "pages at %.2f GB/s (compacting fragmented memory); arena_pages=huge waits "
                "for them all (steps a few %% faster, a longer start-up)\n",
                (double)small / (1024.0 * 1024.0), thp_gbps);
}
