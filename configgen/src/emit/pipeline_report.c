/* emit/pipeline_report.c - plan.txt's "pipeline" section (issue 36, docs/pipeline.md): the
 * stages, repeats and microbatches; MaxText's layer-to-stage map with every layer's kind
 * (GDN or full attention) per stage; the schedules as iteration tables (GPipe with
 * circular repeats, MaxText's; 1F1B, Megatron's; with repeats under 1f1b Megatron's
 * interleaved order per stage) and the bubble; each stage's memory under
 * both schedules against the budget; and the point-to-point bytes per step.
 *
 * Invariants: written only for a plan with pipeline stages (pp_stages > 1), so no other plan's
 * plan.txt changes; every figure is computed from the settings and the stage figures the
 * driver recorded (qt_cg_graph.pp_stage_figs), never re-derived differently from what the
 * verdict used; the tables are cut after QT_CG_PP_ROWS rows with a line saying so.
 */
#include <stdio.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"
#include "memory/qt_cg_memory.h"
#include "emit/qt_cg_emit.h"
#include "qt_pp_sched.h"

#define QT_CG_PP_ROWS 64
#define QT_CG_MIB (1024.0 * 1024.0)

/* GPipe (circular): at iteration t stage s works on microbatch (t - s) mod M of repeat
 * (t - s) div M, when 0 <= t - s < M x R; else it idles (the bubble). */
static void gpipe_cell(const qt_cg_settings *s, int64_t t, int64_t st, char *out, size_t n)
{
    const int64_t M = s->pp_micro, R = s->pp_repeats, k = t - st;
    if (k < 0 || k >= M * R) snprintf(out, n, "-");
    else if (R > 1) snprintf(out, n, "m%lld/r%lld", (long long)(k % M), (long long)(k / M));
    else snprintf(out, n, "m%lld", (long long)k);
}

static void layer_map(qt_cg_buf *b, const qt_cg_settings *s)
{
    const int64_t S = s->pp_stages, n = qt_cg_stage_layers(s), cyc = s->m.cycle;
    qt_cg_buf_printf(b, "  layer-to-stage map (MaxText's: stage s in repeat r holds layers "
                     "(r*S+s)*Lps .. +Lps-1; G = Gated DeltaNet, F = full attention: (l+1) %% "
                     "%lld == 0; | between repeats):\n", (long long)cyc);
    for (int64_t st = 0; st < S; st++) {
        int64_t nf = 0;
        for (int64_t j = 0; j < n; j++) nf += (qt_cg_pp_layer(s, st, j) + 1) % cyc == 0;
        qt_cg_buf_printf(b, "    stage %lld: %lld layers (GDN %lld, full attention %lld)%s%s:",
                         (long long)st, (long long)n, (long long)(n - nf), (long long)nf,
                         st == 0 ? ", the embedding" : "", st == S - 1 ? ", the head and loss" : "");
        for (int64_t j = 0; j < n; j++) {
            const int64_t l = qt_cg_pp_layer(s, st, j);
            qt_cg_buf_printf(b, "%s %lld%c", j && j % s->pp_lps == 0 ? " |" : "", (long long)l,
                             (l + 1) % cyc == 0 ? 'F' : 'G');
        }
        qt_cg_buf_printf(b, "\n");
    }
}

static void gpipe_table(qt_cg_buf *b, const qt_cg_settings *s)
{
    const int64_t S = s->pp_stages, M = s->pp_micro, R = s->pp_repeats, T = M * R + S - 1;
    qt_cg_buf_printf(b, "  gpipe (MaxText's, circular): %lld iterations = M*R + S - 1 = %lld*%lld "
                     "+ %lld - 1; at iteration t stage s runs microbatch (t-s) mod M of repeat "
                     "(t-s) div M (m<microbatch>%s, - idle); the last stage's output feeds stage "
                     "0's next repeat; the backward runs the same table with the stages in "
                     "reverse order and the repeats descending, the microbatches in forward "
                     "order:\n", (long long)T, (long long)M, (long long)R, (long long)S,
                     R > 1 ? "/r<repeat>" : "");
    char cell[48];
    for (int64_t t = 0; t < T && t < QT_CG_PP_ROWS; t++) {
        qt_cg_buf_printf(b, "    t %3lld:", (long long)t);
        for (int64_t st = 0; st < S; st++) {
            gpipe_cell(s, t, st, cell, sizeof cell);
            qt_cg_buf_printf(b, " %9s", cell);
        }
        qt_cg_buf_printf(b, "\n");
    }
    if (T > QT_CG_PP_ROWS)
        qt_cg_buf_printf(b, "    iterations %d..%lld: the same rule\n", QT_CG_PP_ROWS,
                         (long long)(T - 1));
}

/* 1F1B (Megatron's forward_backward_pipelining_without_interleaving): stage s runs
 * w = min(S - s - 1, M) warm-up forwards, then M - w times one forward and one backward,
 * then the w remaining backwards; microbatches in order in both directions. */
static void f1b_table(qt_cg_buf *b, const qt_cg_settings *s)
{
    const int64_t S = s->pp_stages, M = s->pp_micro;
    qt_cg_buf_printf(b, "  1f1b (Megatron's): stage s runs min(S-s-1, M) warm-up forwards, then "
                     "one forward and one backward, then drains the backwards (F<m> forward, "
                     "B<m> backward of microbatch m; at most min(S-s, M) microbatches' "
                     "activations held):\n");
    for (int64_t st = 0; st < S; st++) {
        const int64_t w = S - st - 1 < M ? S - st - 1 : M;
        qt_cg_buf_printf(b, "    stage %lld (warm-up %lld):", (long long)st, (long long)w);
        int64_t f = 0, bk = 0, k = 0;
        for (; f < w; f++, k++)
            if (k < QT_CG_PP_ROWS) qt_cg_buf_printf(b, " F%lld", (long long)f);
        for (; f < M; f++, bk++, k += 2)
            if (k < QT_CG_PP_ROWS)
                qt_cg_buf_printf(b, " F%lld B%lld", (long long)f, (long long)bk);
        for (; bk < M; bk++, k++)
            if (k < QT_CG_PP_ROWS) qt_cg_buf_printf(b, " B%lld", (long long)bk);
        if (k > QT_CG_PP_ROWS) qt_cg_buf_printf(b, " ... (%lld steps)", (long long)k);
        qt_cg_buf_printf(b, "\n");
    }
}

/* Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving, R > 1 chunks a
 * stage; qt_pp_sched.h, the order the firmware runs): per stage its warm-up, its peak
 * (microbatch, chunk) pairs in flight and its actions, F<m>/<r> and B<m>/<r>. */
static void intl_table(qt_cg_buf *b, const qt_cg_settings *s)
{
    const int S = s->pp_stages, M = s->pp_micro, R = s->pp_repeats;
    qt_cg_buf_printf(b, "  1f1b interleaved (Megatron's, each stage's %d repeats its model chunks): "
                     "the M*R (microbatch, chunk) pairs in groups of S microbatches, forwards "
                     "chunk by chunk ascending and backwards descending within a group; stage "
                     "s runs %s warm-up forwards, then one forward and one backward, then "
                     "drains the backwards (F<m>/<r> forward, B<m>/<r> backward of microbatch "
                     "m in chunk r; each chunk's backwards in microbatch order):\n", R,
                     M == S ? "all M*R (M = S: every forward first, Megatron's case)"
                            : "min((S-s-1)*2 + (R-1)*S, M*R)");
    for (int st = 0; st < S; st++) {
        const int n = 2 * M * R;
        qt_cg_buf_printf(b, "    stage %d (warm-up %d, at most %d chunk inputs in flight):", st,
                         qt_pp_intl_warmup(S, st, M, R), qt_pp_intl_inflight(S, st, M, R));
        for (int i = 0; i < n && i < QT_CG_PP_ROWS; i++) {
            int j, r;
            const int bwd = qt_pp_action_intl(S, st, M, R, i, &j, &r);
            qt_cg_buf_printf(b, " %c%d/%d", bwd ? 'B' : 'F', j, r);
        }
        if (n > QT_CG_PP_ROWS) qt_cg_buf_printf(b, " ... (%d steps)", n);
        qt_cg_buf_printf(b, "\n");
    }
}

/* "fits" / "over" against the budget (nothing without one) */
static const char *verdict_word(int64_t need, int64_t budget)
{
    return budget <= 0 ? "" : need <= budget ? " fits" : " over";
}

/* Per stage: the executed tables' arena (the verdict and configgen's budget check, when the
 * plan has stage-local tables: qt_cg_pp_executed_need) and the planning bound under both
 * schedules; then the verdict. */
static void memory_lines(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    const int64_t S = s->pp_stages, budget = qt_cg_budget_bytes(s);
    const int64_t *f = g->pp_stage_figs;
    int heavy;
    const int64_t exec = qt_cg_pp_executed_need(g, &heavy);
    const int intl = s->pp_repeats > 1 && s->pp_schedule == 1; /* interleaved 1f1b */
    qt_cg_buf_printf(b, "  memory per rank of each stage (MiB)%s planning bound = every stage "
                     "planned with its own layers, and with the embedding and the head (an "
                     "upper bound for the middle stages): arena of one microbatch + "
                     "(microbatches in flight - 1) x the activations saved per microbatch (live "
                     "from its forward to its backward) + 4 receive buffers of one boundary "
                     "message; gpipe holds M = %d microbatches (their R = %d repeat%s "
                     "included), 1f1b %s on stage s:\n",
                     exec < 0 ? ";" : intl ?
                     ": executed = the stage-local tables qtrain maps (their arena, the "
                     "in-flight slots included: an input slot per (microbatch, chunk) pair in "
                     "flight, the order's peak, and 2 M R sent boundary messages);" :
                     s->pp_repeats > 1 ?
                     ": executed = the stage-local tables qtrain maps (their arena, the "
                     "in-flight slots of 3 M R boundary messages included: a stage keeps only "
                     "its chunks' inputs in flight);" :
                     ": executed = the stage-local tables qtrain maps (their arena, "
                     "the in-flight slots of 3 M boundary messages included: a stage keeps only "
                     "its inputs in flight, so the same under gpipe and 1f1b);",
                     s->pp_micro, s->pp_repeats, qt_cg_s(s->pp_repeats),
                     intl ? "(interleaved) its peak (microbatch, chunk) pairs in flight / R, "
                            "rounded up," : "min(S - s, M)");
    for (int64_t st = 0; st < S && f; st++) {
        const int64_t *x = f + 4 * st;
        char e[96] = "", f1[96];
        if (exec >= 0)
            snprintf(e, sizeof e, "executed %.0f%s; bound: ",
                     (double)g->pp_graphs[st].arena_bytes / QT_CG_MIB,
                     verdict_word(g->pp_graphs[st].arena_bytes, budget));
        if (s->pp_repeats > 1 && !intl) snprintf(f1, sizeof f1, "n/a (one repeat needed)");
        else snprintf(f1, sizeof f1, "%.0f%s", (double)x[1] / QT_CG_MIB, verdict_word(x[1], budget));
        qt_cg_buf_printf(b, "    stage %lld: %sarena %.0f, saved per microbatch %.1f; gpipe %.0f%s; "
                         "1f1b %s%s\n", (long long)st, e, (double)x[2] / QT_CG_MIB,
                         (double)x[3] / QT_CG_MIB, (double)x[0] / QT_CG_MIB,
                         verdict_word(x[0], budget), f1,
                         st == s->pp_stage ? " <- these tables (the largest bound under the schedule)" : "");
    }
    if (budget <= 0) return;
    int64_t w0 = 0, w1 = 0;
    for (int64_t st = 0; st < S && f; st++) {
        if (f[4 * st] > w0) w0 = f[4 * st];
        if (f[4 * st + 1] > w1) w1 = f[4 * st + 1];
    }
    if (exec >= 0)
        qt_cg_buf_printf(b, "  verdict (budget %.0f MiB, the executed tables): %s (%.0f MiB, "
                         "%.1f%%, stage %d the largest), %s; the planning "
                         "bound: ", (double)budget / QT_CG_MIB,
                         exec <= budget ? "fits" : "does not fit", (double)exec / QT_CG_MIB,
                         100.0 * (double)exec / (double)budget, heavy,
                         intl ? "interleaved 1f1b (peak input slots + 2 M R sends)"
                         : s->pp_repeats > 1 ? "gpipe with its repeats" : "gpipe and 1f1b alike");
    else
        qt_cg_buf_printf(b, "  verdict (budget %.0f MiB, the planning bound: no stage-local "
                         "tables): ",
                         (double)budget / QT_CG_MIB);
    qt_cg_buf_printf(b, "gpipe %s (%.0f MiB, %.1f%%), 1f1b ", w0 <= budget ? "fits" : "does not fit",
                     (double)w0 / QT_CG_MIB, 100.0 * (double)w0 / (double)budget);
    if (s->pp_repeats > 1 && !intl)
        qt_cg_buf_printf(b, "n/a (needs one repeat)");
    else
        qt_cg_buf_printf(b, "%s (%.0f MiB, %.1f%%)", w1 <= budget ? "fits" : "does not fit",
                         (double)w1 / QT_CG_MIB, 100.0 * (double)w1 / (double)budget);
    qt_cg_buf_printf(b, "; the plan's schedule is %s\n", s->pp_schedule ? "1f1b" : "gpipe");
}

/* 1 when some stage's executed tables are scanned (scan_layers with whole layer cycles in a
 * stage, driver/pipeline.c). */
static int pp_scanned(const qt_cg_graph *g)
{
    for (int st = 0; g->pp_graphs && st < g->s->pp_stages; st++)
        if (g->pp_graphs[st].n_scans > 0) return 1;
    return 0;
}

/* What stage x does for the MTP head (plan.txt's stage line): stage 0 sends the embeddings,
 * the last stage runs the head on them, "" elsewhere or without the head. */
static const char *mtp_role(const qt_cg_graph *x)
{
    return x->pp_mtp_out != QT_NONE
               ? ", the MTP head's embeddings straight to the last stage and their gradient "
                 "back (in-flight slots: M x mtp_num_layers boundaries)"
           : x->pp_mtp_in != QT_NONE
               ? ", the MTP head on stage 0's embeddings (their gradient sent back; slots: 2 M "
                 "x mtp_num_layers boundaries, M received, M sends)"
               : "";
}

/* A stage's in-flight slots: 3 M boundary messages (M R with repeats: the same words), under
 * interleaved 1F1B its input slots (the order's peak pairs in flight) and its 2 M R sends. */
static const char *slots_note(const qt_cg_graph *x)
{
    static char n[128];
    const qt_cg_settings *s = x->s;
    if (x->pp_slots == QT_NONE) return "";
    if (s->pp_repeats <= 1 || s->pp_schedule != 1) return " (in-flight slots: 3 M boundary messages)";
    snprintf(n, sizeof n, " (in-flight slots: %lld input + %lld sent boundary messages)",
             (long long)qt_cg_pp_in_slots(s), 2LL * s->pp_micro * s->pp_repeats);
    return n;
}

/* The stage-local tables qtrain executes (driver/pipeline.c pp_local_plans): per stage its
 * parameters (one-rank indices), its boundaries, its scans (when stored scanned) and its
 * arena. */
static void executed_lines(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    if (!g->pp_graphs) return;
    qt_cg_buf_printf(b, "  executed tables (stage-local: the embedding on stage 0 only, the final "
                     "norm, head and loss on the last stage only; a stage before the last runs "
                     "a microbatch's forward again at its backward, keeping only its inputs in "
                     "flight), group hash 0x%016llx:\n", (unsigned long long)g->pp_group_hash);
    if (s->pp_repeats > 1)
        qt_cg_buf_printf(b, "  circular: each stage runs its %d repeats as chunks (PP_CHUNK "
                         "markers in its schedule: a chunk's forward, then its backward, each run "
                         "alone), every chunk from its own input boundary to its own output; "
                         "stage 0's later chunks take the last stage's output of the repeat "
                         "before (the wrap-around message), and the last stage's earlier chunks "
                         "send theirs to stage 0; in-flight slots %s; a "
                         "chunk's parameters are consecutive in the one-rank order:\n",
                         s->pp_repeats, s->pp_schedule == 1 ? "the order's peak input slots "
                         "and 2 M R sent boundary messages (below)" : "3 M R boundary messages");
    for (int st = 0; st < s->pp_stages && s->pp_repeats > 1; st++) {
        const qt_cg_graph *x = &g->pp_graphs[st];
        qt_cg_buf_printf(b, "    stage %d chunks (one-rank parameter indices, first element):",
                         st);
        for (int i = 0, r = 0; i < x->n_fwd; i++) {
            const qt_op *o = &x->mb[i];
            if (o->kind != QT_OP_PP_CHUNK) continue;
            int next = x->np;
            for (int k = i + 1; k < x->n_fwd; k++)
                if (x->mb[k].kind == QT_OP_PP_CHUNK) {
                    next = (int)QT_A(&x->mb[k], PP_CHUNK, param0);
                    break;
                }
            const int64_t gp = QT_A(o, PP_CHUNK, gparam);
            qt_cg_buf_printf(b, "%s r%d %lld..%lld (%lld)", r ? " |" : "", r, (long long)gp,
                             (long long)(gp + next - QT_A(o, PP_CHUNK, param0) - 1),
                             (long long)QT_A(o, PP_CHUNK, gelem));
            r++;
        }
        qt_cg_buf_printf(b, "\n");
    }
    /* the microbatch and per-layer gradient forms: ranges per chunk (memory/ranges.c), the
     * microbatch-end schedule in parts (schedule/step.c) */
    for (int st = 0; st < s->pp_stages && s->pp_repeats > 1; st++) {
        const qt_cg_graph *x = &g->pp_graphs[st];
        if (!x->reduce_per_mb) continue;
        qt_cg_buf_printf(b, "    stage %d: %d flat ranges, each inside one chunk (%s); a "
                         "chunk's microbatch gradients are pushed %s\n", st, x->n_ranges,
                         x->layer_reduce ? "per layer" : "per chunk and holding pattern",
                         x->layer_reduce ? "inside its backward, each range after its last "
                                           "weight gradient"
                                         : "right after its backward (the microbatch-end "
                                           "schedule in one part per chunk)");
    }
    for (int st = 0; st < s->pp_stages; st++) {
        const qt_cg_graph *x = &g->pp_graphs[st];
        if (s->pp_repeats > 1) {
            char sl[192] = "";
            if (s->pp_schedule == 1 && x->pp_slots != QT_NONE) {
                /* interleaved: the input slots cut to the order's peak (qt_pp_intl_slots) */
                const qt_cg_tensor *t = &x->ts[x->pp_slots];
                const int64_t MR = (int64_t)s->pp_micro * s->pp_repeats;
                const int64_t rows = t->t.shape[0];
                snprintf(sl, sizeof sl, ", in-flight slots %lld input + %lld sent boundary "
                         "messages (%lld of 3 M R = %lld rows; arena %lld bytes)",
                         (long long)(rows - 2 * MR), (long long)(2 * MR), (long long)rows,
                         (long long)(3 * MR), (long long)x->arena_bytes);
            }
            qt_cg_buf_printf(b, "    stage %d: plan hash 0x%016llx, %d parameters, %s, %s%s%s%s%s, "
                             "arena %.2f MiB\n", st, (unsigned long long)x->hash, x->np,
                             x->pp_in != QT_NONE ? "input from stage before" : "the embedding",
                             x->pp_out != QT_NONE ? "output to the stage after"
                                                  : "the head and loss", mtp_role(x),
                             x->pp_mtp_out != QT_NONE  ? " (from its first chunk, repeat 0)"
                             : x->pp_mtp_in != QT_NONE ? " (in its last chunk, repeat R - 1)"
                                                       : "",
                             x->n_scans > 0 ? ", scanned" : "", sl,
                             (double)x->arena_bytes / QT_CG_MIB);
            continue;
        }
        qt_cg_buf_printf(b, "    stage %d: plan hash 0x%016llx, %d parameters (one-rank indices "
                         "%lld..%lld, elements from %lld), %s%s%s%s%s, arena %.2f MiB\n", st,
                         (unsigned long long)x->hash, x->np, (long long)x->s->pp_param0,
                         (long long)(x->s->pp_param0 + x->np - 1), (long long)x->s->pp_elem0,
                         x->pp_in != QT_NONE ? "input from stage before" : "the embedding",
                         x->pp_out != QT_NONE ? ", output to the stage after" : ", the head and loss",
                         slots_note(x),
                         mtp_role(x), x->n_scans > 0 ? ", scanned" : "",
                         (double)x->arena_bytes / QT_CG_MIB);
    }
}

void qt_cg_report_pipeline(const qt_cg_graph *g, qt_cg_buf *b)
{
    const qt_cg_settings *s = g->s;
    if (s->pp_stages <= 1) return;
    const int64_t S = s->pp_stages, M = s->pp_micro, R = s->pp_repeats;
    const int64_t per = s->n_ranks / S, G = s->tr.grad_accum / M;
    qt_cg_buf_printf(b, "\n== pipeline ==\n");
    qt_cg_buf_printf(b, "  stages S %lld (%s%s), repeats R %lld, layers per stage and repeat "
                     "Lps %d, microbatches M %lld per accumulation step (B = %lld sequences per "
                     "batch group, %lld each), schedule %s\n", (long long)S, s->pp_key,
                     s->pp_dcn > 1 ? ", across slices" : "", (long long)R, s->pp_lps,
                     (long long)M, (long long)s->pp_batch, (long long)s->tr.micro_batch,
                     s->pp_schedule ? "1f1b" : "gpipe");
    qt_cg_buf_printf(b, "  ranks: %d = %lld stages x %lld (the mesh above: every stage's ranks "
                     "hold it; global rank = stage x %lld + the rank in its stage)\n",
                     s->n_ranks, (long long)S, (long long)per, (long long)per);
    qt_cg_buf_printf(b, "  these tables are stage %d's (its layers only, global names); every "
                     "stage runs its M x G = %lld microbatches per step as accumulation microbatches "
                     "(the batch line above), so its weight gradients over them are the "
                     "one-rank leaf tree, pushed in leaf order (backwards in forward order); "
                     "scan_layers off (a stage need not hold whole layer cycles%s); qtrain runs "
                     "the stage-local tables below (plan.c: qt_plan_<run>_s<k>; the forms it "
                     "does not run yet it refuses at start-up, docs/pipeline.md)\n",
                     s->pp_stage, (long long)(M * G),
                     pp_scanned(g) ? "; the executed tables below are scanned where they "
                                     "repeat a layer cycle" : "");
    executed_lines(b, g);
    layer_map(b, s);
    const double bubble = (double)(S - 1) / (double)(R * M + S - 1);
    qt_cg_buf_printf(b, "  bubble: (S-1)/(R*M+S-1) = %lld/%lld = %.4f (%.1f%% of each "
                     "pipeline flush idle)%s\n", (long long)(S - 1), (long long)(R * M + S - 1),
                     bubble, 100.0 * bubble,
                     R == 1 ? "; 1f1b the same (Megatron: (S-1)/(M+S-1))"
                     : s->pp_schedule == 1 ? "; interleaved 1f1b the same: its bubble is (S-1) "
                                             "chunk forwards and backwards, (S-1)/(R*M) of the "
                                             "ideal time (Megatron)" : "");
    gpipe_table(b, s);
    if (R == 1) f1b_table(b, s);
    else if (s->pp_schedule == 1) intl_table(b, s);
    else qt_cg_buf_printf(b, "  1f1b: not planned with R = %lld repeats (Megatron's "
                          "interleaved schedule would be needed)\n", (long long)R);
    memory_lines(b, g);
    const int64_t msg = qt_cg_pp_boundary_bytes(s), crossings = R * S - 1;
    const int64_t total = 2 * G * M * crossings * msg, rank = 2 * G * M * R * msg;
    qt_cg_buf_printf(b, "  point-to-point: one boundary message = %lld rows x %lld hidden x %lld "
                     "bytes = %.3f MiB (a microbatch's activations forward, their gradient "
                     "backward); per microbatch R*S-1 = %lld boundar%s crossed; per step (%lld "
                     "accumulation step%s x %lld microbatches, both directions) %.1f MiB per "
                     "pipeline of %lld ranks, at most %.1f MiB sent by one rank; collective "
                     "kind send-recv (qt_coll.def SEND_RECV): sends non-blocking, flushed per "
                     "accumulation step, receives waited for just before use\n",
                     (long long)(msg / (s->m.d * qt_dtype_bytes((unsigned)s->dtype))),
                     (long long)s->m.d, (long long)qt_dtype_bytes((unsigned)s->dtype),
                     (double)msg / QT_CG_MIB, (long long)crossings, crossings == 1 ? "y" : "ies",
                     (long long)G, qt_cg_s(G),
                     (long long)M, (double)total / QT_CG_MIB, (long long)S,
                     (double)rank / QT_CG_MIB);
}

void qt_cg_report_pp_boundaries(const qt_cg_graph *g, qt_cg_buf *b)
{
    const qt_cg_settings *s = g->s;
    if (s->pp_stages <= 1) return;
    const int64_t S = s->pp_stages, M = s->pp_micro, R = s->pp_repeats;
    const int64_t G = s->tr.grad_accum / M, msg = qt_cg_pp_boundary_bytes(s);
    qt_cg_buf_printf(b, "  not in the table: the pipeline's boundary messages (send-recv, "
                     "qt_coll.def SEND_RECV; between the ranks at the same place in two "
                     "stages), per stage boundary: the bytes of one microbatch each way (its "
                     "activations forward, their gradient back) and the messages per step "
                     "(%lld accumulation step%s x %lld microbatches%s):\n", (long long)G,
                     qt_cg_s(G), (long long)M, R > 1 ? " x the repeats crossing it" : "");
    for (int64_t st = 0; st < S; st++) {
        /* s -> s + 1 in every repeat; the last stage to stage 0 between repeats */
        const int64_t cross = st < S - 1 ? R : R - 1;
        if (cross <= 0) continue;
        const int64_t n = G * M * cross;
        qt_cg_buf_printf(b, "    stage %lld -> %lld%s: %lld bytes (%.3f MiB) per microbatch "
                         "each way; %lld message%s each way per step, %lld in all, %.3f MiB "
                         "sent each way per rank pair\n", (long long)st, (long long)((st + 1) % S),
                         st == S - 1 ? " (the next repeat)" : "", (long long)msg,
                         (double)msg / QT_CG_MIB, (long long)n, qt_cg_s(n), (long long)(2 * n),
                         (double)(n * msg) / QT_CG_MIB);
    }
    if (s->mtp_layers <= 0) return;
    /* the MTP head's embeddings, from stage 0 straight to the last stage and back */
    const int64_t n = G * M * s->mtp_layers;
    qt_cg_buf_printf(b, "    stage 0 -> %lld (the MTP head's embeddings, %d boundar%s per "
                     "microbatch, one message each): %lld bytes (%.3f MiB) per microbatch each "
                     "way; %lld message%s each way per step, %lld in all, %.3f MiB sent each way "
                     "per rank pair\n", (long long)(S - 1), s->mtp_layers,
                     s->mtp_layers == 1 ? "y" : "ies", (long long)(s->mtp_layers * msg),
                     (double)(s->mtp_layers * msg) / QT_CG_MIB, (long long)n, qt_cg_s(n),
                     (long long)(2 * n), (double)(n * msg) / QT_CG_MIB);
}
