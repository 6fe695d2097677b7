/* runtime.c - start-up validation and the optimizer step (see qt_runtime.h).
 *
 * Invariants: after qt_runtime_init succeeds, a step touches only the static arena and this
 * file's static state: no heap, no syscalls except clock_gettime. Every cross-sequence
 * reduction is either a pairwise tree over per-sequence leaves (weight gradients) or an
 * exact accumulator (loss, token count, squared gradient norm), so the step's bits do not
 * depend on the micro_batch x grad_accum split.
 * The parameter-sized passes after the schedule are fused per cache-sized chunk (tree total
 * -> normalise -> exact square sum; clip -> AdamW -> fingerprint); each stage keeps the exact
 * per-element operations of the unfused version, so fusion changes speed, never bits.
 * Profiling (off by default) adds clock_gettime calls only.
 */
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "qt_runtime.h"
#include "qt_arena.h"
#include "qt_exact.h"
#include "qt_interp.h"
#include "qt_optim.h"
#include "qt_rng.h"
#include "qt_vec.h"
#include "qt_plan_hash.h"
#include "math/qt_math.h"

/* Chunk of the fused passes over the parameter-sized regions: 64 KiB per stream, so a
 * chunk written by one stage is still in L2 when the next stage reads it. */
#define QT_RT_CHUNK 16384

enum qt_rt_phase { QT_PH_DATA, QT_PH_SCHED, QT_PH_LOSS, QT_PH_GRADS, QT_PH_OPT, QT_PH_COUNT };
static const char *const qt_rt_phase_names[QT_PH_COUNT] = {
    "data fill", "schedule (fwd+bwd, see ops)", "loss/token sums",
    "tree finalise+normalise+norm^2", "clip+AdamW+fingerprint"
};

static struct {
    const qt_plan *plan;
    qt_run_opts opts;
    const qt_kernel_entry *table;
    int flat_in_order;           /* params tile [0, n_param_elems) in index order */
    int profile;
    int64_t prof_steps;
    double phase_s[QT_PH_COUNT];
    qt_interp_prof prof;
    qt_exact_sq sq;              /* bins of the squared-norm pass */
} qt_rt;

/* Extern symbols of the standard GNU ld scripts (glibc and musl static): image start and end
 * of initialised data, i.e. what the binary file maps. */
extern char __executable_start[];
extern char _edata[];

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

/* Adds the time since *t to phase ph and restarts *t (profiling only). */
static void qt_runtime_lap(double *t, int ph)
{
    if (!qt_rt.profile) return;
    double now = qt_runtime_now();
    qt_rt.phase_s[ph] += now - *t;
    *t = now;
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

/* The flat regions: each inside the arena and no two sharing bytes, except that the
 * gradient region is the top tree level itself (qt_interp_validate checks that identity;
 * here it only has to lie inside the arena like the rest). */
static int qt_runtime_check_regions(const qt_plan *p)
{
    enum { QT_RT_REGIONS = 4 + QT_MAX_TREE_LEVELS };
    static const char *const names[4] = {"params", "adam m", "adam v", "leaf scratch"};
    int64_t off[QT_RT_REGIONS], elems[QT_RT_REGIONS];
    const char *what[QT_RT_REGIONS];
    if (p->n_tree_levels < 1 || p->n_tree_levels > QT_MAX_TREE_LEVELS) {
        fprintf(stderr, "plan %s: %d tree levels (1..%d)\n", p->run_name, p->n_tree_levels,
                QT_MAX_TREE_LEVELS);
        return QT_E_PLAN;
    }
    int n = 0;
    const int64_t fixed[4] = {p->params_offset, p->adam_m_offset, p->adam_v_offset,
                              p->leaf_scratch_offset};
    for (int i = 0; i < 4; i++, n++) {
        off[n] = fixed[i];
        elems[n] = i == 3 ? p->leaf_scratch_elems : p->n_param_elems;
        what[n] = names[i];
    }
    for (int l = 0; l < p->n_tree_levels; l++, n++) {
        off[n] = p->tree_offset[l];
        elems[n] = p->n_param_elems;
        what[n] = "tree level";
    }
    int rc = qt_runtime_check_region(p, p->grads_offset, p->n_param_elems, "grads");
    for (int i = 0; !rc && i < n; i++) rc = qt_runtime_check_region(p, off[i], elems[i], what[i]);
    for (int i = 0; !rc && i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            if (off[i] < off[j] + 4 * elems[j] && off[j] < off[i] + 4 * elems[i]) {
                fprintf(stderr, "plan %s: %s region at byte %lld overlaps %s region at byte "
                        "%lld\n", p->run_name, what[i], (long long)off[i], what[j],
                        (long long)off[j]);
                return QT_E_PLAN;
            }
        }
    }
    return rc;
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
    uint64_t h = qt_plan_hash(p);
    if (p->hash == 0 || h != p->hash) {
        fprintf(stderr, "plan %s: the tables hash to 0x%016llx but carry 0x%016llx: "
                "generated/%s/plan.c was edited or is stale (make gen regenerates it)\n",
                p->run_name, (unsigned long long)h, (unsigned long long)p->hash, p->run_name);
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
    if (!rc) rc = qt_runtime_check_regions(p);
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
    /* The one-rank step schedule: finalise the leaves of this step, then update. */
    const int64_t leaves = tc->micro_batch * tc->grad_accum;
    if (p->n_step_ops != 2 || !p->step_ops || p->step_ops[0].kind != QT_OP_GRAD_FINALIZE ||
        p->step_ops[1].kind != QT_OP_ADAMW || p->step_ops[0].a[0] != leaves ||
        p->step_ops[0].a[1] != tc->global_batch * tc->seq_len) {
        fprintf(stderr, "plan %s: the step schedule must be grad_finalize (%lld leaves, %lld "
                "tokens) then adamw\n", p->run_name, (long long)leaves,
                (long long)(tc->global_batch * tc->seq_len));
        return QT_E_PLAN;
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
    int64_t cursor = 0;
    for (int32_t i = 0; i < p->n_params; i++) {
        if (p->params[i].flat_offset != cursor) break;
        cursor += p->params[i].numel;
    }
    qt_rt.flat_in_order = cursor == p->n_param_elems;
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

/* Every microbatch of the step: fill its tokens, run the schedule (forward, backward,
 * per-sequence leaves into the trees), and add its per-sequence losses to the exact
 * accumulators. Leaves the step's token count, loss and learning rate in *m. Returns the
 * data fill's error (an id no longer in range: the file changed) before that microbatch's
 * schedule runs. */
static int qt_runtime_microbatches(const qt_plan *p, const qt_data *d, int64_t step,
                                   qt_step_metrics *m)
{
    const qt_kernel_entry *table = qt_runtime_table();
    qt_ctx ctx = {p, p->arena};
    const int64_t b = p->train.micro_batch, S = p->train.seq_len, G = p->train.grad_accum;
    /* ranks own contiguous, rank-major blocks of the global batch (design.md s.6) */
    const int64_t base = (int64_t)qt_rt.opts.rank * b * G;
    qt_exact loss, lb;
    qt_exact_clear(&loss);
    qt_exact_clear(&lb);
    double t = qt_rt.profile ? qt_runtime_now() : 0.0;
    for (int64_t mb = 0; mb < G; mb++) {
        int rc = qt_data_fill(d, step, p->train.global_batch, base + mb * b, b, S,
                              qt_i32(&ctx, p->tokens), qt_i32(&ctx, p->targets));
        if (rc) return rc;
        qt_runtime_lap(&t, QT_PH_DATA);
        qt_interp_run_microbatch(p, table, mb);
        qt_runtime_lap(&t, QT_PH_SCHED);
        const float *ls = qt_f32(&ctx, p->loss_seq);
        for (int64_t s = 0; s < b; s++) qt_exact_add_f(&loss, ls[s]);
        if (p->lb_seq != QT_NONE) {
            const float *lbs = qt_f32(&ctx, p->lb_seq);
            for (int64_t s = 0; s < b; s++) qt_exact_add_f(&lb, lbs[s]);
        }
        qt_runtime_lap(&t, QT_PH_LOSS);
    }
    /* the step schedule's GRAD_FINALIZE carries the global token count (validated at init) */
    const double n_tok = (double)p->step_ops[0].a[1];
    double loss_v = qt_exact_value(&loss) / n_tok + qt_exact_value(&lb);
    m->step = step;
    m->loss_f32 = (float)loss_v;
    m->loss = (double)m->loss_f32;
    m->tokens = (int64_t)n_tok;
    m->lr = qt_runtime_lr(p, step);
    return QT_OK;
}

/* QT_OP_GRAD_FINALIZE: tree total -> normalise by a1 -> exact square sum, fused per chunk,
 * each stage with the same per-element operations as when run over the whole region, all
 * in place in the gradient region (= the top tree level). Leaves the gradient norm in *m. */
static void qt_runtime_op_grad_finalize(const qt_plan *p, const qt_op *op, qt_step_metrics *m)
{
    double t = qt_rt.profile ? qt_runtime_now() : 0.0;
    const float n_tok = (float)op->a[1];
    /* the gradient region is the top tree level (validated at init): the tree total is
     * completed there in place (nothing to do for a power-of-two leaf count), then divided */
    float *g = (float *)(void *)(p->arena + p->grads_offset);
    qt_exact sq;
    qt_exact_clear(&sq);
    qt_exact_sq_clear(&qt_rt.sq);
    for (int64_t k0 = 0; k0 < p->n_param_elems; k0 += QT_RT_CHUNK) {
        int64_t c = p->n_param_elems - k0 < QT_RT_CHUNK ? p->n_param_elems - k0 : QT_RT_CHUNK;
        qt_interp_finalize_grads_range(p, k0, c);
        qt_grads_normalise(g + k0, c, n_tok);
        qt_exact_sq_add(&qt_rt.sq, &sq, g + k0, c);
    }
    qt_exact_sq_flush(&qt_rt.sq, &sq);
    m->grad_norm = qt_sqrt(qt_exact_value(&sq));
    qt_runtime_lap(&t, QT_PH_GRADS);
}

int qt_runtime_grads(const qt_plan *p, const qt_data *d, int64_t step, qt_step_metrics *m)
{
    if (!p || p != qt_rt.plan) return QT_E_PLAN;
    double t0 = qt_runtime_now();
    int rc = qt_runtime_microbatches(p, d, step, m);
    if (rc) return rc;
    /* the step schedule up to (not including) the update */
    for (int32_t i = 0; i < p->n_step_ops && p->step_ops[i].kind != QT_OP_ADAMW; i++)
        if (p->step_ops[i].kind == QT_OP_GRAD_FINALIZE)
            qt_runtime_op_grad_finalize(p, &p->step_ops[i], m);
    m->step_seconds = qt_runtime_now() - t0;
    m->tokens_per_s = m->step_seconds > 0.0 ? (double)m->tokens / m->step_seconds : 0.0;
    m->fingerprint = qt_param_fingerprint(p);
    return QT_OK;
}

/* Clip + AdamW + fingerprint. With the parameters tiling the flat region in index order,
 * one pass per chunk: the fingerprint reads the freshly updated chunk from cache. */
static uint64_t qt_runtime_update(const qt_plan *p, const qt_adamw_hp *hp, float gscale,
                                  int scaled)
{
    float *w = (float *)(void *)(p->arena + p->params_offset);
    float *mo = (float *)(void *)(p->arena + p->adam_m_offset);
    float *vo = (float *)(void *)(p->arena + p->adam_v_offset);
    const float *g = (const float *)(const void *)(p->arena + p->grads_offset);
    if (!qt_rt.flat_in_order) {
        qt_adamw_update_scaled(w, mo, vo, g, p->n_param_elems, hp, gscale, scaled);
        return qt_param_fingerprint(p);
    }
    uint64_t fp = 0;
    int64_t gbase = 0;
    for (int32_t i = 0; i < p->n_params; i++) {
        const int64_t off = p->params[i].flat_offset, n = p->params[i].numel;
        for (int64_t j0 = 0; j0 < n; j0 += QT_RT_CHUNK) {
            int64_t c = n - j0 < QT_RT_CHUNK ? n - j0 : QT_RT_CHUNK;
            qt_adamw_update_scaled(w + off + j0, mo + off + j0, vo + off + j0, g + off + j0, c, hp,
                                   gscale, scaled);
            fp += qt_param_fp_chunk(p, i, gbase, j0, c);
        }
        gbase += qt_param_global_numel(p, i);
    }
    return fp;
}

/* QT_OP_ADAMW: clip (scale folded into the update), AdamW, fingerprint. */
static void qt_runtime_op_adamw(const qt_plan *p, int64_t step, qt_step_metrics *m)
{
    double t = qt_rt.profile ? qt_runtime_now() : 0.0;
    /* global-norm clipping: g * (float)(clip/norm), folded into the update */
    const double clip = (double)p->train.clip;
    const int scaled = clip > 0.0 && m->grad_norm > clip;
    const float gscale = scaled ? (float)(clip / m->grad_norm) : 1.0f;
    qt_adamw_hp hp;
    qt_adamw_hp_make(&hp, (float)m->lr, p->train.adam_b1, p->train.adam_b2, p->train.adam_eps,
                     p->train.weight_decay, step);
    m->fingerprint = qt_runtime_update(p, &hp, gscale, scaled);
    qt_runtime_lap(&t, QT_PH_OPT);
}

int qt_runtime_step(const qt_plan *p, const qt_data *d, int64_t step, qt_step_metrics *m)
{
    if (!p || p != qt_rt.plan) return QT_E_PLAN;
    double t0 = qt_runtime_now();
    int rc = qt_runtime_microbatches(p, d, step, m);
    if (rc) return rc;
    for (int32_t i = 0; i < p->n_step_ops; i++) {
        const qt_op *op = &p->step_ops[i];
        if (op->kind == QT_OP_GRAD_FINALIZE)
            qt_runtime_op_grad_finalize(p, op, m);
        else if (op->kind == QT_OP_ADAMW)
            qt_runtime_op_adamw(p, step, m);
    }
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
                    table[k].name ? table[k].name : "?", w ? "wgrad" : "run", (double)calls / n,
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
    fprintf(f, "qtrain: run %s | plan 0x%016llx (%s) | arena %.1f MiB on %s pages, prefault "
            "%.3f s | %d rank%s | comm %s\n", p->run_name, (unsigned long long)p->hash,
            p->generator_version ? p->generator_version : "?",
            (double)p->arena_bytes / (1024.0 * 1024.0), qt_arena_mode_name(),
            qt_arena_prefault_seconds(), p->n_ranks, p->n_ranks == 1 ? "" : "s", comm_backend);
}
