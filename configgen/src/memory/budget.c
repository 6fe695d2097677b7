/* memory/budget.c - the per-rank memory budget (device_memory_gib, or the compile_topology
 * preset's device memory): a plan whose arena does not fit is an error that says by how much
 * and lists the biggest consumers, by category and by tensor, so the user sees what to
 * change (mesh, ZeRO-1, batch) without compiling anything.
 *
 * Invariants: reads the finished plan only (after memplan); the categories are the regions
 * of the arena and add up to it up to alignment padding; a pipeline plan is checked on its
 * largest stage's stage-local tables (qt_cg_pp_executed_need: what qtrain maps, in-flight
 * slots included) and lists that stage's consumers; without stage-local tables (the MTP
 * head with circular repeats) on the planning bound, the heaviest stage adding its other microbatches in flight
 * and its receive buffers (memory/pipeline_mem.c); the error message fits the caller's
 * buffer (it is cut, never overflowed). A plan without a budget passes.
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "memory/qt_cg_memory.h"

#define QT_CG_BUDGET_TOP 5
#define QT_CG_MIB (1024.0 * 1024.0)

typedef struct qt_cg_use {
    const char *what;
    int64_t bytes;
} qt_cg_use;

/* Sort descending by bytes (insertion sort: a handful of entries). */
static void by_size(qt_cg_use *u, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && u[j].bytes > u[j - 1].bytes; j--) {
            qt_cg_use t = u[j];
            u[j] = u[j - 1];
            u[j - 1] = t;
        }
}

static int64_t tensor_bytes(const qt_tensor *t)
{
    int64_t n = qt_dtype_bytes(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* The QT_CG_BUDGET_TOP largest parameters (param 1) or arena tensors that are used
 * (param 0), by local bytes, into top; returns how many. */
static int largest(const qt_cg_graph *g, int param, qt_cg_use *top)
{
    int n = 0;
    for (int i = 0; i < g->nt; i++) {
        const qt_cg_tensor *ct = &g->ts[i];
        if ((ct->param >= 0) != param) continue;
        if (ct->param < 0 && ct->first < 0) continue;
        const int64_t b = tensor_bytes(&ct->t);
        if (n < QT_CG_BUDGET_TOP) {
            top[n].what = ct->t.name;
            top[n++].bytes = b;
        } else if (b > top[n - 1].bytes) {
            top[n - 1].what = ct->t.name;
            top[n - 1].bytes = b;
        } else {
            continue;
        }
        by_size(top, n);
    }
    return n;
}

int64_t qt_cg_budget_bytes(const qt_cg_settings *s)
{
    return (int64_t)(s->budget_gib * 1073741824.0);
}

int qt_cg_budget_check(const qt_cg_graph *g0, char *err, size_t errlen)
{
    const qt_cg_settings *s = g0->s;
    const int64_t budget = qt_cg_budget_bytes(s);
    /* a pipeline with stage-local tables: the largest stage's (what qtrain maps), its
     * consumers listed; else the plan's need (the planning bound of a plan without them) */
    int xs;
    const int64_t exec = qt_cg_pp_executed_need(g0, &xs);
    const qt_cg_graph *g = exec >= 0 ? &g0->pp_graphs[xs] : g0;
    const int64_t need = exec >= 0 ? exec : qt_cg_need_bytes(g0);
    if (budget <= 0 || need <= budget) return 0;
    const int pp = s->pp_stages > 1 && exec < 0;
    const int64_t saved = pp ? qt_cg_pp_saved_bytes(g) : 0;
    int64_t tree = 0;
    for (int l = 0; l < g->n_tree_levels; l++)
        tree += 4 * qt_cg_tree_level_elems(g, l);
    qt_cg_use cat[] = {
        {g->params_compact ? "params (this rank's blocks; compute copies gathered per layer "
                             "into the activations)"
         : s->dtype == QT_BF16 ? "params (fp32 master: this rank's blocks)"
                               : "params (compute copy)",
         4 * (g->params_compact || s->dtype == QT_BF16 ? g->adam_elems : g->n_flat)},
        {"compute copy (bf16)", g->compute_offset ? 2 * g->n_flat : 0},
        {"bf16 staging", 4 * g->bf16_stage_elems},
        {"adam m + v", 8 * g->adam_elems},
        {"gradient tree (incl. the gradient)", tree},
        {"leaf scratch", 4 * g->leaf_scratch_elems},
        {"comm scratch", 4 * g->comm_scratch_elems},
        {"checkpoint staging", 4 * g->staging_elems},
        {"activations (peak)", g->act_peak},
        {"pipeline: the other microbatches in flight (saved activations)",
         pp ? (qt_cg_pp_inflight(s, s->pp_schedule) - 1) * saved : 0},
        {"pipeline: receive buffers", pp ? 4 * qt_cg_pp_boundary_bytes(s) : 0},
    };
    const int ncat = (int)(sizeof cat / sizeof cat[0]);
    by_size(cat, ncat);
    qt_cg_use tp[QT_CG_BUDGET_TOP], ta[QT_CG_BUDGET_TOP];
    const int np = largest(g, 1, tp), na = largest(g, 0, ta);
    char src[160];
    if (s->topology[0])
        snprintf(src, sizeof src, "device_memory_gib=%g (compile_topology=%s, %d rank%s)",
                 s->budget_gib, s->topology, s->n_ranks, qt_cg_s(s->n_ranks));
    else
        snprintf(src, sizeof src, "device_memory_gib=%g", s->budget_gib);
    size_t k = (size_t)snprintf(err, errlen, "%s: plan %s needs %.1f MiB per rank, over the "
                                "budget of %.1f MiB by %.1f MiB", src,
                                s->run_name, (double)need / QT_CG_MIB,
                                (double)budget / QT_CG_MIB,
                                (double)(need - budget) / QT_CG_MIB);
    if (exec >= 0 && k < errlen) {
        const int64_t slots = g->pp_slots != QT_NONE ? tensor_bytes(&g->ts[g->pp_slots].t) : 0;
        const int intl = s->pp_repeats > 1 && s->pp_schedule == 1;
        const int64_t rows = g->pp_slots != QT_NONE ? g->ts[g->pp_slots].t.shape[0] : 0;
        if (intl)
            k += (size_t)snprintf(err + k, errlen - k, " (pipeline stage %d of %d, the stage "
                                  "whose executed stage-local tables need the most: %.1f MiB, "
                                  "the in-flight slots of the interleaved order's peak input "
                                  "pairs + 2 M R sends = %lld boundary messages included "
                                  "(%.1f MiB; M = num_pipeline_microbatches=%d, R = %d))", xs,
                                  s->pp_stages, (double)need / QT_CG_MIB, (long long)rows,
                                  (double)slots / QT_CG_MIB, s->pp_micro, s->pp_repeats);
        else
            k += (size_t)snprintf(err + k, errlen - k, " (pipeline stage %d of %d, the stage "
                              "whose executed stage-local tables need the most: %.1f MiB, the "
                              "in-flight slots of 3 M R = %lld boundary messages included "
                              "(%.1f MiB; M = num_pipeline_microbatches=%d, R = %d); the same "
                              "under pipeline_schedule gpipe and 1f1b)", xs, s->pp_stages,
                              (double)need / QT_CG_MIB, 3LL * s->pp_micro * s->pp_repeats,
                              (double)slots / QT_CG_MIB, s->pp_micro, s->pp_repeats);
    }
    if (pp && k < errlen) {
        const int o = !s->pp_schedule;
        char alt[160];
        snprintf(alt, sizeof alt, "%s would need %.1f MiB",
                 !o ? "gpipe" : s->pp_repeats > 1 ? "1f1b (interleaved)" : "1f1b",
                 (double)qt_cg_pp_need(g, o) / QT_CG_MIB);
        k += (size_t)snprintf(err + k, errlen - k, " (pipeline stage %d of %d under "
                              "pipeline_schedule=%s with num_pipeline_microbatches=%d: %lld "
                              "microbatches in flight; %s)", s->pp_stage, s->pp_stages,
                              s->pp_schedule ? "1f1b" : "gpipe", s->pp_micro,
                              (long long)qt_cg_pp_inflight(s, s->pp_schedule), alt);
    }
    if (k < errlen) k += (size_t)snprintf(err + k, errlen - k, "; biggest consumers:");
    for (int i = 0; i < ncat && k < errlen; i++)
        if (cat[i].bytes > 0)
            k += (size_t)snprintf(err + k, errlen - k, "%s %s %.1f MiB", i ? "," : "",
                                  cat[i].what, (double)cat[i].bytes / QT_CG_MIB);
    for (int i = 0; i < np && k < errlen; i++)
        k += (size_t)snprintf(err + k, errlen - k, "%s %s %.1f MiB", i ? "," :
                              "; largest parameters (each also in the gradient tree levels"
                              " and, split, in Adam):", tp[i].what, (double)tp[i].bytes / QT_CG_MIB);
    for (int i = 0; i < na && k < errlen; i++)
        k += (size_t)snprintf(err + k, errlen - k, "%s %s %.1f MiB", i ? "," :
                              "; largest activations:", ta[i].what,
                              (double)ta[i].bytes / QT_CG_MIB);
    if (k < errlen)
        snprintf(err + k, errlen - k, " (plan.txt is not written; shard more: fsdp, expert, "
                 "tensor, ZeRO-1, %sor a smaller batch)",
                 pp ? "pipeline_schedule=1f1b or more pipeline microbatches, "
                 : exec >= 0 ? "more pipeline stages (ici_pipeline_parallelism: fewer layers "
                               "per stage), more pipeline microbatches (num_pipeline_microbatches: "
                               "smaller ones, a smaller activation peak), " : "");
    return -1;
}
