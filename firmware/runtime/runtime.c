/* runtime.c - start-up validation and the optimizer step (see qt_runtime.h).
 *
 * Invariants: after qt_runtime_init succeeds, a step touches only the static arena and this
 * file's static state: no heap, no syscalls except clock_gettime. Every cross-sequence
 * reduction is either a pairwise tree over per-sequence leaves (weight gradients) or an
 * exact accumulator (loss, token count, squared gradient norm), so the step's bits do not
 * depend on the micro_batch x grad_accum split.
 */
#include <string.h>
#include <time.h>
#include "qt_runtime.h"
#include "qt_arena.h"
#include "qt_exact.h"
#include "qt_interp.h"
#include "qt_optim.h"
#include "qt_rng.h"
#include "math/qt_math.h"

static struct {
    const qt_plan *plan;
    qt_run_opts opts;
    const qt_kernel_entry *table;
} qt_rt;

void qt_runtime_set_kernel_table(const qt_kernel_entry *table)
{
    qt_rt.table = table;
}

static const qt_kernel_entry *qt_runtime_table(void)
{
    return qt_rt.table ? qt_rt.table : qt_kernel_table;
}

static double qt_runtime_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int qt_runtime_check_io_tensor(const qt_plan *p, int32_t id, const char *what,
                                      uint8_t dtype, int64_t numel)
{
    if (id < 0 || id >= p->n_tensors) {
        fprintf(stderr, "plan %s: %s tensor id %d is invalid\n", p->run_name, what, id);
        return QT_E_PLAN;
    }
    const qt_tensor *t = &p->tensors[id];
    if (t->dtype != dtype || t->numel < numel || t->offset < 0 ||
        t->offset + 4 * t->numel > p->arena_bytes) {
        fprintf(stderr, "plan %s: %s tensor %s: dtype %u numel %lld offset %lld, expected "
                "dtype %u and >= %lld elements inside the arena\n", p->run_name, what, t->name,
                t->dtype, (long long)t->numel, (long long)t->offset, dtype, (long long)numel);
        return QT_E_PLAN;
    }
    return QT_OK;
}

static int qt_runtime_check_region(const qt_plan *p, int64_t off, int64_t elems, const char *what)
{
    if (off < 0 || elems < 0 || off + 4 * elems > p->arena_bytes) {
        fprintf(stderr, "plan %s: %s region [%lld, +%lld floats) is outside the arena (%lld bytes)\n",
                p->run_name, what, (long long)off, (long long)elems, (long long)p->arena_bytes);
        return QT_E_PLAN;
    }
    return QT_OK;
}

static int qt_runtime_validate(const qt_plan *p, const qt_run_opts *o)
{
    int32_t ranks = o->n_ranks > 0 ? o->n_ranks : 1;
    if (ranks != p->n_ranks) {
        fprintf(stderr, "plan %s was generated for %d ranks, but this process was started "
                "with %d ranks\n", p->run_name, p->n_ranks, ranks);
        return QT_E_PLAN;
    }
    if (o->rank < 0 || o->rank >= ranks) {
        fprintf(stderr, "plan %s: rank %d outside [0, %d)\n", p->run_name, o->rank, ranks);
        return QT_E_PLAN;
    }
    if (p->hash == 0) {
        fprintf(stderr, "plan %s: plan hash is 0 (not a configgen plan)\n", p->run_name);
        return QT_E_PLAN;
    }
    const qt_train_cfg *tc = &p->train;
    if (tc->micro_batch < 1 || tc->seq_len < 1 || tc->grad_accum < 1 ||
        tc->global_batch < tc->micro_batch * tc->grad_accum) {
        fprintf(stderr, "plan %s: bad batch micro_batch=%lld seq_len=%lld grad_accum=%lld "
                "global_batch=%lld\n", p->run_name, (long long)tc->micro_batch,
                (long long)tc->seq_len, (long long)tc->grad_accum, (long long)tc->global_batch);
        return QT_E_PLAN;
    }
    int64_t rows = tc->micro_batch * tc->seq_len;
    int rc = qt_runtime_check_io_tensor(p, p->tokens, "tokens", QT_I32, rows);
    if (!rc) rc = qt_runtime_check_io_tensor(p, p->targets, "targets", QT_I32, rows);
    if (!rc) rc = qt_runtime_check_io_tensor(p, p->loss_seq, "loss_seq", QT_F32, tc->micro_batch);
    if (!rc && p->lb_seq != QT_NONE)
        rc = qt_runtime_check_io_tensor(p, p->lb_seq, "lb_seq", QT_F32, tc->micro_batch);
    if (!rc) rc = qt_runtime_check_region(p, p->params_offset, p->n_param_elems, "params");
    if (!rc) rc = qt_runtime_check_region(p, p->grads_offset, p->n_param_elems, "grads");
    if (!rc) rc = qt_runtime_check_region(p, p->adam_m_offset, p->n_param_elems, "adam m");
    if (!rc) rc = qt_runtime_check_region(p, p->adam_v_offset, p->n_param_elems, "adam v");
    if (!rc) rc = qt_runtime_check_region(p, p->leaf_scratch_offset, p->leaf_scratch_elems,
                                          "leaf scratch");
    for (int l = 0; !rc && l < p->n_tree_levels && l < QT_MAX_TREE_LEVELS; l++)
        rc = qt_runtime_check_region(p, p->tree_offset[l], p->n_param_elems, "tree level");
    if (rc) return rc;
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_param *pa = &p->params[i];
        if (pa->tensor < 0 || pa->tensor >= p->n_tensors || pa->flat_offset < 0 ||
            pa->numel < 0 || pa->flat_offset + pa->numel > p->n_param_elems ||
            p->tensors[pa->tensor].numel != pa->numel || pa->init >= QT_INIT_COUNT) {
            fprintf(stderr, "plan %s: parameter %s (tensor %d, flat offset %lld, numel %lld, "
                    "init %u) does not fit the flat region of %lld elements\n", p->run_name,
                    pa->name, pa->tensor, (long long)pa->flat_offset, (long long)pa->numel,
                    pa->init, (long long)p->n_param_elems);
            return QT_E_PLAN;
        }
    }
    return QT_OK;
}

int qt_runtime_init(const qt_plan *p, const qt_run_opts *o)
{
    static const qt_run_opts defaults = {0, -1.0f, 0, 0, 1};
    if (!p) {
        fprintf(stderr, "qtrain: no plan\n");
        return QT_E_PLAN;
    }
    if (!o) o = &defaults;
    int rc = qt_runtime_validate(p, o);
    if (rc) return rc;
    rc = qt_arena_init(p);
    if (rc) return rc;
    rc = qt_interp_validate(p, qt_runtime_table());
    if (rc) return rc;
    qt_rt.plan = p;
    qt_rt.opts = *o;
    memset(p->arena + p->adam_m_offset, 0, (size_t)p->n_param_elems * sizeof(float));
    memset(p->arena + p->adam_v_offset, 0, (size_t)p->n_param_elems * sizeof(float));
    qt_interp_run_init(p, qt_runtime_table());
    qt_rng_set_rank(o->rank);
    qt_params_init(p, o->seed);
    return QT_OK;
}

double qt_runtime_lr(const qt_plan *p, int64_t t)
{
    double peak = qt_rt.opts.lr_override >= 0.0f ? (double)qt_rt.opts.lr_override
                                                 : (double)p->train.lr;
    int64_t n = qt_rt.opts.total_steps > 0 ? qt_rt.opts.total_steps : p->train.schedule_steps;
    return qt_lr_schedule(t, peak, n, (double)p->train.warmup_frac, (double)p->train.final_frac);
}

/* Forward + backward of every microbatch, trees finalised and normalised by the token
 * count; fills loss, tokens and the (unclipped) gradient norm of *m. */
static void qt_runtime_fwd_bwd(const qt_plan *p, const qt_data *d, int64_t step,
                               qt_step_metrics *m)
{
    const qt_kernel_entry *table = qt_runtime_table();
    qt_ctx ctx = {p, p->arena};
    const int64_t b = p->train.micro_batch, S = p->train.seq_len, G = p->train.grad_accum;
    /* ranks own contiguous, rank-major blocks of the global batch (design.md s.6) */
    const int64_t base = (int64_t)qt_rt.opts.rank * b * G;
    qt_exact loss, lb, tok;
    qt_exact_clear(&loss);
    qt_exact_clear(&lb);
    qt_exact_clear(&tok);
    for (int64_t mb = 0; mb < G; mb++) {
        qt_data_fill(d, step, p->train.global_batch, base + mb * b, b, S, qt_i32(&ctx, p->tokens),
                     qt_i32(&ctx, p->targets));
        qt_interp_run_microbatch(p, table, mb);
        const float *ls = qt_f32(&ctx, p->loss_seq);
        for (int64_t s = 0; s < b; s++) qt_exact_add_f(&loss, ls[s]);
        if (p->lb_seq != QT_NONE) {
            const float *lbs = qt_f32(&ctx, p->lb_seq);
            for (int64_t s = 0; s < b; s++) qt_exact_add_f(&lb, lbs[s]);
        }
        qt_exact_add_d(&tok, (double)(b * S));
    }
    qt_interp_finalize_grads(p);
    double n_tok = qt_exact_value(&tok);
    float *g = (float *)(void *)(p->arena + p->grads_offset);
    qt_grads_normalise(g, p->n_param_elems, (float)n_tok);
    double loss_v = qt_exact_value(&loss) / n_tok + qt_exact_value(&lb);
    m->step = step;
    m->loss_f32 = (float)loss_v;
    m->loss = (double)m->loss_f32;
    m->tokens = (int64_t)n_tok;
    m->grad_norm = qt_sqrt(qt_grads_sumsq(g, p->n_param_elems));
    m->lr = qt_runtime_lr(p, step);
}

int qt_runtime_grads(const qt_plan *p, const qt_data *d, int64_t step, qt_step_metrics *m)
{
    if (!p || p != qt_rt.plan) return QT_E_PLAN;
    double t0 = qt_runtime_now();
    qt_runtime_fwd_bwd(p, d, step, m);
    m->step_seconds = qt_runtime_now() - t0;
    m->tokens_per_s = m->step_seconds > 0.0 ? (double)m->tokens / m->step_seconds : 0.0;
    m->fingerprint = qt_param_fingerprint(p);
    return QT_OK;
}

int qt_runtime_step(const qt_plan *p, const qt_data *d, int64_t step, qt_step_metrics *m)
{
    if (!p || p != qt_rt.plan) return QT_E_PLAN;
    double t0 = qt_runtime_now();
    qt_runtime_fwd_bwd(p, d, step, m);
    float *g = (float *)(void *)(p->arena + p->grads_offset);
    qt_grads_clip(g, p->n_param_elems, m->grad_norm, (double)p->train.clip);
    qt_adamw_hp hp;
    qt_adamw_hp_make(&hp, (float)m->lr, p->train.adam_b1, p->train.adam_b2, p->train.adam_eps,
                     p->train.weight_decay, step);
    qt_adamw_update((float *)(void *)(p->arena + p->params_offset),
                    (float *)(void *)(p->arena + p->adam_m_offset),
                    (float *)(void *)(p->arena + p->adam_v_offset), g, p->n_param_elems, &hp);
    m->fingerprint = qt_param_fingerprint(p);
    m->step_seconds = qt_runtime_now() - t0;
    m->tokens_per_s = m->step_seconds > 0.0 ? (double)m->tokens / m->step_seconds : 0.0;
    return QT_OK;
}

void qt_runtime_mark_steps(int in_steps)
{
    if (qt_heap_audit_mark) qt_heap_audit_mark(in_steps);
}

void qt_runtime_banner(FILE *f, const qt_plan *p, const char *comm_backend)
{
    fprintf(f, "qtrain: run %s | plan 0x%016llx (%s) | arena %.1f MiB on %s pages, prefault "
            "%.3f s | %d rank%s | comm %s\n", p->run_name, (unsigned long long)p->hash,
            p->generator_version ? p->generator_version : "?",
            (double)p->arena_bytes / (1024.0 * 1024.0), qt_arena_mode_name(),
            qt_arena_prefault_seconds(), p->n_ranks, p->n_ranks == 1 ? "" : "s", comm_backend);
}
