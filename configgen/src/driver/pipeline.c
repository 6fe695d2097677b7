/* driver/pipeline.c - the plan pipeline, stage by stage, top to bottom (core/qt_cg.h):
 * config -> settings -> forward graph -> autodiff -> remat -> precision (each tensor's
 * dtype) -> memory (flat ranges, per-layer schedule edits, arena; the gradient_reduce / param_gather form chosen against the
 * budget) -> step schedule -> checks -> scan -> hash; with pipeline stages the stage-local
 * tables of every stage first (their forms chosen against the budget on their own arenas,
 * the need qtrain maps), then each stage's planning graph in its stage's forms, keeping the
 * heaviest one for the report. Writes nothing: driver/generate.c
 * renders and writes the files, driver/diff.c compares two plans.
 * Invariant: the first failing stage's message is the error; c, s and g are always safe
 * to pass to qt_cg_plan_free.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "model/qt_cg_model.h"
#include "memory/qt_cg_memory.h"
#include "schedule/qt_cg_schedule.h"
#include "check/qt_cg_check.h"
#include "emit/qt_cg_emit.h"
#include "driver/qt_cg_driver.h"

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* 1 if `path` exists and is not MaxText's own base.yml: a run file inside a MaxText checkout
 * (a file of its configs/models/) has MaxText's base.yml beside it, which is not the base layer
 * configgen needs (it stopped with a YAML error at its line 1339); it is skipped, with a note. */
static int base_candidate(const char *path)
{
    char *text = NULL, e[256];
    if (!exists(path)) return 0;
    if (qt_cg_read_file(path, &text, e, sizeof e)) return 1; /* qt_cg_config_load says why */
    const int mt = qt_cg_maxtext_base_text(text);
    free(text);
    if (mt)
        fprintf(stderr, "configgen: note: not taking %s as the base layer: it is MaxText's own "
                "base.yml (it sets base_output_directory and hardware); configgen's is "
                "configgen/configs/base.yml\n", path);
    return !mt;
}

static void find_configs(const char *run_path, char *out, size_t n)
{
    char dir[4096], probe[4200];
    snprintf(dir, sizeof dir, "%s", run_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    snprintf(probe, sizeof probe, "%s/../base.yml", dir);
    if (base_candidate(probe)) {
        /* keep paths readable in banners: "configgen/configs/runs/.." -> "configgen/configs" */
        char *s2 = strrchr(dir, '/');
        if (s2 && strcmp(s2 + 1, "..") && strcmp(s2 + 1, ".")) {
            *s2 = 0;
            snprintf(out, n, "%s", dir);
        } else if (!s2 && strcmp(dir, ".") && strcmp(dir, "..")) {
            snprintf(out, n, ".");
        } else {
            size_t k = strlen(dir);
            if (k + 4 > n) k = n - 4;
            memcpy(out, dir, k);
            memcpy(out + k, "/..", 4);
        }
        return;
    }
    snprintf(probe, sizeof probe, "%s/base.yml", dir);
    if (base_candidate(probe)) {
        snprintf(out, n, "%s", dir);
        return;
    }
    snprintf(out, n, "configgen/configs");
}

/* The memory plan of the current form (g->layer_reduce, g->params_compact): flat ranges,
 * then with per-layer reduction the range reduces in the schedule (they bound the leaf
 * windows' use) and the windows, with per-layer gathers the gathers (their windows are
 * activations), then the arena. Runs again when the form changes. */
static int plan_memory(qt_cg_graph *g, char *err, size_t errlen)
{
    if (qt_cg_flat_ranges(g, err, errlen)) return -1;
    if (g->layer_reduce) {
        qt_cg_layer_reduces(g);
        qt_cg_leaf_windows(g);
    }
    if (g->params_compact && qt_cg_layer_gathers(g, err, errlen)) return -1;
    return qt_cg_memplan(g, err, errlen);
}

/* collective_overlap, decided last (the form above is chosen without it): the per-layer
 * collectives moved beside compute (on) or back (off), the leaf windows and the arena
 * planned again; auto keeps it on only within the budget. */
static int overlap(qt_cg_graph *g, int on, char *err, size_t errlen)
{
    g->overlap = on;
    qt_cg_overlap_moves(g, on);
    qt_cg_leaf_windows(g);
    return qt_cg_memplan(g, err, errlen);
}

/* The rest of a plan once its gradient-reduce, gather and overlap forms are set: the
 * experts' exchanges and the microbatch-end reduce-scatter beside compute (collective_overlap
 * all), the step schedule, the checks, the scan and the hash. */
static int plan_tail(qt_cg_settings *s, qt_cg_graph *g, char *err, size_t errlen)
{
    /* collective_overlap all: the experts' host -> home exchanges beside compute too */
    if (s->overlap == QT_CG_OVERLAP_ALL && s->mesh[QT_MESH_EXPERT] > 1 && qt_cg_ep_overlap(g)) {
        if (g->layer_reduce) qt_cg_leaf_windows(g);
        if (qt_cg_memplan(g, err, errlen)) return -1;
    }
    /* collective_overlap all, microbatch form with G > 1: the microbatch-end reduce-scatter,
     * or with units (grad_mb_units) the units exchange, beside the next microbatch's forward
     * (schedule/step.c; its split scratch planned here) */
    g->mb_overlap = s->overlap == QT_CG_OVERLAP_ALL && g->reduce_per_mb && !g->layer_reduce &&
                    s->tr.grad_accum > 1 && s->pp_stages <= 1 && s->n_ranks > 1;
    if (g->mb_overlap && qt_cg_memplan(g, err, errlen)) return -1;
    qt_cg_step_schedule(g);
    if (qt_cg_check_schedule(g, err, errlen)) return -1;
    if (qt_cg_layout_check(g, &g->n_reshards, err, errlen)) return -1;
    if (qt_cg_check_plan(g, err, errlen)) return -1;
    if (qt_cg_scan(g, err, errlen)) return -1;
    g->hash = qt_cg_hash(g);
    return 0;
}

/* The plan of the resolved settings (of stage s->pp_stage with pipeline stages): graph to
 * hash. forms NULL: the gradient-reduce, gather and overlap forms chosen here (auto against
 * the budget, on qt_cg_need_bytes); else forms's (a pipeline stage's planning graph takes
 * the forms its stage-local tables chose, so the report's bound is of what runs). */
static int plan_graph(qt_cg_settings *s, qt_cg_graph *g, const qt_cg_graph *forms, char *err,
                      size_t errlen)
{
    if (qt_cg_graph_build(g, s, err, errlen)) return -1;
    if (qt_cg_autodiff(g, err, errlen)) return -1;
    if (qt_cg_remat(g, err, errlen)) return -1;
    qt_cg_precision(g);
    if (forms) {
        g->params_compact = forms->params_compact;
        g->reduce_per_mb = forms->reduce_per_mb;
        g->layer_reduce = forms->layer_reduce;
        if (plan_memory(g, err, errlen)) return -1;
        if (g->layer_reduce && s->overlap != QT_CG_OVERLAP_OFF && overlap(g, 1, err, errlen))
            return -1;
        if (g->overlap && !forms->overlap && overlap(g, 0, err, errlen)) return -1;
        return plan_tail(s, g, err, errlen);
    }
    /* gradient_reduce: the step form (one reduce-scatter after the microbatches) unless
     * expert or context parallelism needs the microbatch form, or auto finds the step form's
     * parameter-sized tree levels over the budget (then the microbatch form, then the
     * per-layer form with layer-sized leaf levels); the bits are the same */
    g->params_compact = s->param_gather == QT_CG_GATHER_LAYER;
    const int layer = (s->grad_reduce == QT_CG_REDUCE_LAYER || g->params_compact) && s->batch_mask;
    g->reduce_per_mb = layer || s->grad_reduce == QT_CG_REDUCE_MICROBATCH ||
                       s->mesh[QT_MESH_EXPERT] > 1 || s->mesh[QT_MESH_CONTEXT] > 1;
    g->layer_reduce = layer;
    if (plan_memory(g, err, errlen)) return -1;
    const int64_t budget = qt_cg_budget_bytes(s);
    for (int form = 0; form < 2 && s->grad_reduce == QT_CG_REDUCE_AUTO && s->batch_mask &&
                       budget > 0 && qt_cg_need_bytes(g) > budget && !g->layer_reduce; form++) {
        if (g->reduce_per_mb) g->layer_reduce = 1;
        g->reduce_per_mb = 1;
        if (plan_memory(g, err, errlen)) return -1;
    }
    /* param_gather=auto: per-layer gathers when still over the budget with per-layer
     * reduction (which they need), on meshes that shard parameters for compute in MaxText
     * (fsdp, expert); ZeRO-1 alone keeps them replicated over data (docs/design.md section 5),
     * so a data-only split is gathered per layer only when the user asks (param_gather=layer,
     * ZeRO-3 over data) */
    const unsigned fsdp_like =
        (1u << QT_MESH_FSDP) | (1u << QT_MESH_EXPERT) | (1u << QT_MESH_CONTEXT);
    if (s->param_gather == QT_CG_GATHER_AUTO && (s->opt_mask & fsdp_like) && g->layer_reduce &&
        budget > 0 && qt_cg_need_bytes(g) > budget) {
        g->params_compact = 1;
        if (plan_memory(g, err, errlen)) return -1;
    }
    if (g->layer_reduce && s->overlap != QT_CG_OVERLAP_OFF && overlap(g, 1, err, errlen))
        return -1;
    if (g->overlap && s->overlap == QT_CG_OVERLAP_AUTO && budget > 0 && qt_cg_need_bytes(g) > budget &&
        overlap(g, 0, err, errlen))
        return -1;
    return plan_tail(s, g, err, errlen);
}

/* The pipeline's executable tables (docs/pipeline.md "How the firmware runs it"): every
 * stage planned again with its layers alone (pp_local: the embedding on stage 0 only, the
 * head on the last stage only, the boundaries as tensors), each under the C name
 * <run>_s<k>, its parameters numbered from where the stages before it end in the one-rank
 * order; the hash that names them together (pp_group_hash) becomes the plan's hash. g (the
 * planning graph of the report) keeps them. */
/* Circular repeats (R > 1): where every stage's chunks start in the one-rank model's
 * parameter order (a chunk's parameters are consecutive there: the embedding and layers
 * (r S + st) Lps .., or those layers and the final norm and head): base[(st R + r) 2] the
 * one-rank index of chunk r's first parameter on stage st, [.. + 1] its first element's.
 * From the one-rank graph (only built, not planned). NULL after an error in err. */
static int64_t *pp_chunk_bases(const qt_cg_settings *s, char *err, size_t errlen)
{
    const int S = s->pp_stages, R = s->pp_repeats;
    qt_cg_settings one = *s;
    one.pp_stages = 1;
    one.pp_local = 0;
    qt_cg_graph g1;
    if (qt_cg_graph_build(&g1, &one, err, errlen)) {
        qt_cg_graph_free(&g1);
        return NULL;
    }
    int64_t *elem = qt_cg_alloc((size_t)(g1.np + 1) * sizeof *elem);
    int64_t *base = qt_cg_alloc((size_t)S * R * 2 * sizeof *base);
    elem[0] = 0;
    for (int i = 0; i < g1.np; i++) {
        const qt_tensor *t = &g1.ts[g1.ps[i].tensor].t;
        int64_t n = 1;
        for (int k = 0; k < t->ndim; k++) n *= t->global_shape[k];
        elem[i + 1] = elem[i] + n;
    }
    for (int st = 0; st < S; st++)
        for (int r = 0; r < R; r++) {
            char pre[64];
            snprintf(pre, sizeof pre, "model.layers.%lld.",
                     (long long)qt_cg_pp_layer(s, st, (int64_t)r * s->pp_lps));
            int i = 0; /* stage 0's first chunk starts with the embedding */
            while (!(st == 0 && r == 0) && i < g1.np && strncmp(g1.ps[i].name, pre, strlen(pre)))
                i++;
            base[2 * (st * R + r)] = i;
            base[2 * (st * R + r) + 1] = elem[i];
        }
    free(elem);
    qt_cg_graph_free(&g1);
    return base;
}

static int pp_local_plans(const qt_cg_settings *s, qt_cg_graph *g, char *err, size_t errlen)
{
    const int S = s->pp_stages;
    g->pp_settings = qt_cg_alloc((size_t)S * sizeof *g->pp_settings);
    memset(g->pp_settings, 0, (size_t)S * sizeof *g->pp_settings);
    g->pp_graphs = qt_cg_alloc((size_t)S * sizeof *g->pp_graphs);
    memset(g->pp_graphs, 0, (size_t)S * sizeof *g->pp_graphs);
    int64_t param0 = 0, elem0 = 0;
    uint64_t h = 0x51746f7070656c69ull; /* "pipeline" */
    if (s->pp_repeats > 1 && !(g->pp_chunk_base = pp_chunk_bases(s, err, errlen))) return -1;
    for (int st = 0; st < S; st++) {
        qt_cg_settings *ss = &g->pp_settings[st];
        qt_cg_graph *gs = &g->pp_graphs[st];
        *ss = *s;
        ss->pp_stage = st;
        ss->pp_local = 1;
        if (g->pp_chunk_base) { /* circular: the first chunk's (model/graph.c marks each) */
            ss->pp_chunk_base = g->pp_chunk_base + 2 * st * s->pp_repeats;
            param0 = ss->pp_chunk_base[0];
            elem0 = ss->pp_chunk_base[1];
        }
        ss->pp_param0 = param0;
        ss->pp_elem0 = elem0;
        /* scan_layers inside a stage: each stage holds Lps consecutive layers from a
         * multiple of Lps per repeat chunk, so whole layer cycles when the cycle divides
         * Lps (schedule/scan.c stores a run of equal cycles; a circular stage's PP_CHUNK
         * markers lie between the runs, and the firmware finds its chunks by logical op) */
        ss->scan_layers = s->pp_scan && s->m.cycle > 0
                          && s->pp_lps % s->m.cycle == 0;
        snprintf(ss->cname, sizeof ss->cname, "%.100s_s%d", s->cname, st);
        if (plan_graph(ss, gs, NULL, err, errlen)) return -1;
        for (int i = 0; i < gs->np; i++) {
            const qt_tensor *t = &gs->ts[gs->ps[i].tensor].t;
            int64_t n = 1;
            for (int k = 0; k < t->ndim; k++) n *= t->global_shape[k];
            elem0 += n;
        }
        param0 += gs->np;
        h = (h ^ gs->hash) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (int st = 0; st < S; st++) g->pp_graphs[st].pp_group_hash = h;
    g->pp_group_hash = g->hash = h;
    return 0;
}

int qt_cg_plan_build(const char *configs_dir, const char *run_path, int n_over,
                     char *const *over, qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g,
                     char *err, size_t errlen)
{
    char dir[4096];
    memset(c, 0, sizeof *c);
    memset(s, 0, sizeof *s);
    memset(g, 0, sizeof *g);
    if (!configs_dir) {
        find_configs(run_path, dir, sizeof dir);
        configs_dir = dir;
    }
    if (qt_cg_config_load(c, configs_dir, run_path, n_over, over, err, errlen)) return -1;
    if (qt_cg_settings_resolve(c, s, err, errlen)) return -1;
    if (s->pp_stages <= 1) {
        if (plan_graph(s, g, NULL, err, errlen)) return -1;
        /* expert_dispatch auto (config/dispatch.c): the whole dispatch unless its plan is over
         * the budget and rounds are possible; then the plan with rounds */
        const int64_t budget = qt_cg_budget_bytes(s);
        if (!s->expert_rounds_auto || budget <= 0 || qt_cg_need_bytes(g) <= budget) return 0;
        qt_cg_graph_free(g);
        memset(g, 0, sizeof *g);
        s->expert_dispatch = QT_CG_DISPATCH_ROUNDS;
        return plan_graph(s, g, NULL, err, errlen);
    }
    /* pipeline stages (docs/pipeline.md): first every stage's stage-local tables, what
     * qtrain runs (their forms chosen against the budget on their own arenas; expert_dispatch
     * auto: rounds on every stage when the largest stage's whole dispatch is over the
     * budget, as without stages); then every stage's planning graph (its layers, the
     * embedding and the head: an upper bound for the middle stages) in its stage's forms.
     * The plan keeps the stage whose bound is the largest under the schedule, each stage's
     * figures and the stage-local tables. */
    const int S = s->pp_stages;
    qt_cg_graph loc; /* holds only the stage-local tables (pp_local_plans) */
    memset(&loc, 0, sizeof loc);
    loc.s = s;
    int rc = pp_local_plans(s, &loc, err, errlen), top;
    const int64_t budget = qt_cg_budget_bytes(s);
    if (!rc && s->expert_rounds_auto && budget > 0 && qt_cg_pp_executed_need(&loc, &top) > budget) {
        qt_cg_graph_free(&loc);
        memset(&loc, 0, sizeof loc);
        loc.s = s;
        s->expert_dispatch = QT_CG_DISPATCH_ROUNDS;
        rc = pp_local_plans(s, &loc, err, errlen);
    }
    int64_t *need = qt_cg_alloc((size_t)S * 4 * sizeof *need);
    int heavy = 0;
    for (int st = 0; st < S && !rc; st++) {
        s->pp_stage = st;
        if ((rc = plan_graph(s, g, loc.pp_graphs ? &loc.pp_graphs[st] : NULL, err, errlen)))
            break;
        need[4 * st] = qt_cg_pp_need(g, 0);
        need[4 * st + 1] = qt_cg_pp_need(g, 1);
        need[4 * st + 2] = g->arena_bytes;
        need[4 * st + 3] = qt_cg_pp_saved_bytes(g);
        if (need[4 * st + s->pp_schedule] > need[4 * heavy + s->pp_schedule]) heavy = st;
        if (st == S - 1 && heavy == st) break;
        qt_cg_graph_free(g);
        memset(g, 0, sizeof *g);
    }
    if (!rc && heavy != S - 1) {
        s->pp_stage = heavy;
        rc = plan_graph(s, g, loc.pp_graphs ? &loc.pp_graphs[heavy] : NULL, err, errlen);
    }
    if (rc) {
        free(need);
        qt_cg_graph_free(&loc);
        return -1;
    }
    g->pp_stage_figs = need;
    g->pp_settings = loc.pp_settings;
    g->pp_graphs = loc.pp_graphs;
    g->pp_chunk_base = loc.pp_chunk_base;
    if (g->pp_graphs) g->pp_group_hash = g->hash = loc.pp_group_hash;
    return 0;
}

void qt_cg_plan_free(qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g)
{
    qt_cg_graph_free(g);
    qt_cg_settings_free(s);
    qt_cg_config_free(c);
}
