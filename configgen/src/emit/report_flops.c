/* emit/report_flops.c - two sections of plan.txt (emit/report.c calls them): the model
 * FLOPs, and the MTP head's parameters, activations and FLOPs.
 *
 * "model FLOPs": model/flops.c's count (docs/bench.md: forward = 2 x the multiply-accumulates
 * a token touches, training = 3 x forward) part by part, one line each:
 *   "<part> <count> x <MACs per token> MAC fwd <FLOP per token> train <FLOP per token> what"
 * (count: layers, lm_head passes or MTP depths; fwd = 2 x count x MACs, train = 3 x fwd),
 * then the totals "<main|mtp|total> fwd <F> train <T> (...)", the step's (tokens per step x
 * train) and the rank's (the step's / ranks: the model count split evenly; remat's
 * recompute is not in it). tests/scripts/plan_flops.py recomputes every figure from the
 * config; tests/scripts/bench_flops.sh checks the bench's against its own count.
 * "MTP head" (plans with mtp_num_layers > 0; a carried head, mtp_keep_layers, gets one line):
 * its parameters (the mtp.* tensors: elements over the mesh, and this rank's local shapes in
 * elements and MiB), its activations (every non-parameter tensor of the head: MTP<d>.*, their
 * gradients d.MTP<d>.* and recomputes, its inputs, loss and scratch: MiB in all on this rank,
 * and the most live at one microbatch op) and its FLOPs.
 * Invariants: text only (nothing here is in the plan hash or the tables); depends only on
 * the plan; numbers are exact integers, the unit figures "%.1f <unit>" of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"
#include "emit/qt_cg_emit.h"

/* "12.3 GFLOP": x in the largest unit it reaches (FLOP when below a thousand). */
static void unit_txt(char *out, size_t n, double x)
{
    static const struct { double v; const char *u; } units[] = {
        {1e15, "PFLOP"}, {1e12, "TFLOP"}, {1e9, "GFLOP"}, {1e6, "MFLOP"}, {1e3, "kFLOP"},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (x >= units[i].v) {
            snprintf(out, n, "%.1f %s", x / units[i].v, units[i].u);
            return;
        }
    snprintf(out, n, "%.1f FLOP", x);
}

static void part(qt_cg_buf *b, const char *key, int64_t count, int64_t mac, const char *what)
{
    if (count <= 0) return;
    const int64_t fwd = 2 * count * mac;
    qt_cg_buf_printf(b, "  %-14s %5lld x %14lld MAC  fwd %16lld  train %17lld  %s\n", key,
                     (long long)count, (long long)mac, (long long)fwd, (long long)(3 * fwd),
                     what);
}

static void total(qt_cg_buf *b, const char *key, int64_t fwd, const char *what)
{
    char u[32];
    unit_txt(u, sizeof u, 3.0 * (double)fwd);
    qt_cg_buf_printf(b, "  %-14s%27s  fwd %16lld  train %17lld  (%s per token trained) %s\n",
                     key, "", (long long)fwd, (long long)(3 * fwd), u, what);
}

void qt_cg_report_flops(const qt_cg_graph *g, qt_cg_buf *b)
{
    const qt_cg_settings *s = g->s;
    const qt_train_cfg *t = &s->tr;
    qt_cg_flops f;
    qt_cg_model_flops(&s->m, t->seq_len, s->mtp_layers, &f);
    qt_cg_buf_printf(b, "\n== model FLOPs (per token: forward 2 x multiply-accumulates, training "
                     "3 x forward; docs/bench.md) ==\n");
    if (f.too_big) {
        qt_cg_buf_printf(b, "  not counted: a part's count reaches 2^58 per token (the model's "
                         "dimensions are too large to count in 64 bits)\n");
        return;
    }
    qt_cg_buf_printf(b, "  counted: every matmul a token touches (its top-%lld routed experts, not "
                     "all %lld), the causal attention's scores and values (hq x hd x S: S/2 keys "
                     "on average), the delta rule (3 x Dk x Dv per value head); not counted: the "
                     "embedding lookup, norms, rotary, the GDN conv (%lld MACs per token and GDN "
                     "layer), gates, activations, softmax and loss\n", (long long)s->m.top_k,
                     (long long)s->m.n_experts, (long long)f.gdn_conv);
    qt_cg_buf_printf(b, "  %-14s %5s   %14s %9s%16s %7s%17s  %s\n", "part", "count",
                     "MACs/token", "", "fwd FLOP/token", "", "train FLOP/token", "what");
    part(b, "gdn_proj", f.n_gdn, f.gdn_proj, "GDN: in_proj (q, k, v, z, b, a), out_proj");
    part(b, "gdn_delta", f.n_gdn, f.gdn_delta, "GDN: the delta rule, 3 Dk Dv per value head");
    part(b, "attn_proj", f.n_attn, f.attn_proj, "full attention: q (with its gate), k, v, o");
    part(b, "attn_core", f.n_attn, f.attn_core, "full attention: causal scores and values, hq hd S");
    part(b, "moe_router", f.n_moe, f.router, "MoE: router, d x E");
    part(b, "moe_routed", f.n_moe, f.routed, "MoE: the top-k routed experts, k x 3 d f");
    part(b, "moe_shared", f.n_moe, f.shared, "MoE: the shared expert and its gate, 3 d fs + d");
    part(b, "lm_head", 1, f.lm_head, "lm_head, d x V (the embedding is a lookup: 0)");
    total(b, "main", f.fwd_main, "the main model");
    if (f.n_mtp > 0) {
        part(b, "mtp_fc", f.n_mtp, f.mtp_fc, "MTP head: mtp.fc, 2d -> d");
        part(b, "mtp_attn_proj", f.n_mtp, f.attn_proj, "MTP layer: q (with its gate), k, v, o");
        part(b, "mtp_attn_core", f.n_mtp, f.attn_core, "MTP layer: causal scores and values");
        part(b, "mtp_moe_router", f.n_mtp, f.router, "MTP layer: router");
        part(b, "mtp_moe_routed", f.n_mtp, f.routed, "MTP layer: top-k routed experts");
        part(b, "mtp_moe_shared", f.n_mtp, f.shared, "MTP layer: shared expert and its gate");
        part(b, "mtp_lm_head", f.n_mtp, f.lm_head, "MTP head: its lm_head pass");
        total(b, "mtp", f.fwd_mtp, "the MTP head");
    }
    const int64_t fwd = f.fwd_main + f.fwd_mtp, tok = t->global_batch * t->seq_len;
    total(b, "total", fwd, "per token");
    char u[32];
    int64_t step;
    if (__builtin_mul_overflow(3 * fwd, tok, &step)) step = -1; /* beyond int64: say so */
    const double step_d = 3.0 * (double)fwd * (double)tok;
    unit_txt(u, sizeof u, step_d);
    qt_cg_buf_printf(b, "  per step: %lld tokens (%lld sequence%s x %lld) x %lld = %lld FLOP "
                     "(%s) trained\n", (long long)tok, (long long)t->global_batch,
                     qt_cg_s(t->global_batch), (long long)t->seq_len, (long long)(3 * fwd),
                     (long long)step, u);
    unit_txt(u, sizeof u, step_d / s->n_ranks);
    qt_cg_buf_printf(b, "  per rank: %.1f FLOP (%s) per step, the step's over %d rank%s (the "
                     "model count split evenly)", step_d / s->n_ranks, u, s->n_ranks,
                     qt_cg_s(s->n_ranks));
    if (s->remat != QT_CG_REMAT_NONE)
        qt_cg_buf_printf(b, "; remat_policy %s recomputes %d forward ops in the backward, not "
                         "counted here", s->remat == QT_CG_REMAT_FULL ? "full" : "save_dot",
                         g->n_remat_ops);
    qt_cg_buf_printf(b, "\n");
}

/* The tensors of the MTP head that are not parameters: the head's own (MTP<d>.*, d.MTP<d>.*,
 * their recomputes <name>~r) and its inputs, loss and scratch (mtp_*, *_mtp_*). */
static int head_act(const qt_cg_tensor *ct)
{
    return ct->t.role != QT_ROLE_PARAM &&
           (strstr(ct->t.name, "MTP") != NULL || strstr(ct->t.name, "mtp") != NULL);
}

void qt_cg_report_mtp(const qt_cg_graph *g, qt_cg_buf *b)
{
    const qt_cg_settings *s = g->s;
    if (s->mtp_layers <= 0) {
        if (s->mtp_keep > 0)
            qt_cg_buf_printf(b, "\n== MTP head ==\n  carried through untrained (mtp_keep_layers "
                             "%d): a region of %lld bytes, no parameters, activations or "
                             "FLOPs in the step\n", s->mtp_keep, (long long)s->mtp_keep_bytes);
        return;
    }
    qt_cg_buf_printf(b, "\n== MTP head (mtp_num_layers %d: mtp.fc, one full-attention MoE "
                     "decoder layer per depth, mtp.norm, the shared lm_head) ==\n",
                     s->mtp_layers);
    int n_p = 0;
    int64_t global = 0, local = 0, local_b = 0;
    for (int i = 0; i < g->np; i++) {
        if (strncmp(g->ps[i].name, "mtp.", 4)) continue;
        const qt_tensor *t = &g->ts[g->ps[i].tensor].t;
        int64_t n = 1;
        for (int k = 0; k < t->ndim; k++) n *= t->global_shape[k];
        n_p++;
        global += n;
        local += t->numel;
        local_b += t->numel * (int64_t)qt_dtype_bytes(t->dtype);
    }
    qt_cg_buf_printf(b, "  MTP head parameters: %d tensors (mtp.*), %lld elements over the mesh; "
                     "this rank's local shapes hold %lld = %.3f MiB (the compute copy's "
                     "dtype%s)\n", n_p, (long long)global, (long long)local,
                     (double)local_b / 1048576.0,
                     g->params_compact ? "; gathered per layer, the rank keeps only its blocks "
                                         "between uses" : "");
    /* live bytes per microbatch op: + at a tensor's first op, - after its last */
    int64_t *delta = calloc((size_t)g->nmb + 1, sizeof *delta);
    if (!delta) abort(); /* host tool: out of memory for one array per op is fatal */
    int n_a = 0;
    int64_t all_b = 0, peak = 0, live = 0;
    for (int i = 0; i < g->nt; i++) {
        const qt_cg_tensor *ct = &g->ts[i];
        if (!head_act(ct)) continue;
        const int64_t by = ct->t.numel * (int64_t)qt_dtype_bytes(ct->t.dtype);
        n_a++;
        all_b += by;
        if (ct->first < 0 && !ct->whole) continue;
        const int lo = ct->whole ? 0 : ct->first;
        const int hi = ct->whole || ct->last >= g->nmb ? g->nmb - 1 : ct->last;
        if (lo > hi) continue;
        delta[lo] += by;
        delta[hi + 1] -= by;
    }
    for (int op = 0; op < g->nmb; op++) {
        live += delta[op];
        if (live > peak) peak = live;
    }
    free(delta);
    qt_cg_buf_printf(b, "  MTP head activations: %d tensors (MTP<d>.*, their gradients d.MTP<d>.* "
                     "and recomputes, the head's inputs, loss and scratch) = %.3f MiB on this "
                     "rank, at most %.3f MiB of them live at one microbatch op (they share the "
                     "activation region by lifetime; the lm_head pass reuses the main logits)\n",
                     n_a, (double)all_b / 1048576.0, (double)peak / 1048576.0);
    qt_cg_flops f;
    qt_cg_model_flops(&s->m, s->tr.seq_len, s->mtp_layers, &f);
    if (f.too_big) {
        qt_cg_buf_printf(b, "  MTP head FLOPs: not counted (a count reaches 2^58 per token)\n");
        return;
    }
    const int64_t tok = s->tr.global_batch * s->tr.seq_len;
    char u[32], us[32];
    unit_txt(u, sizeof u, 3.0 * (double)f.fwd_mtp);
    unit_txt(us, sizeof us, 3.0 * (double)f.fwd_mtp * (double)tok / s->n_ranks);
    qt_cg_buf_printf(b, "  MTP head FLOPs: fwd %lld, train %lld per token (%s, %.1f%% of the "
                     "plan's %lld), %s per rank per step (model FLOPs above)\n",
                     (long long)f.fwd_mtp, (long long)(3 * f.fwd_mtp), u,
                     100.0 * (double)f.fwd_mtp / (double)(f.fwd_main + f.fwd_mtp),
                     (long long)(3 * (f.fwd_main + f.fwd_mtp)), us);
}
