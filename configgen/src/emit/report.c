/* emit/report.c - plan.txt, the human-readable account of a plan: config summary; the
 * mesh (axis sizes, shard mode, ZeRO-1, batch and optimizer axes); which sequences each
 * rank reads; per-rank bytes by region (with the ZeRO-1 alternative on a mesh); the model
 * FLOPs and the MTP head (report_flops.c); every collective of the step schedule with the
 * bytes each rank sends; the arena memory map;
 * every tensor's layout (local and global shape, logical axes, sharding spec, offset,
 * lifetime); and the op schedules with tensor names.
 *
 * Invariants: the text depends only on the plan (byte-stable, so generated/ is diffable);
 * sections start with "== title ==" and tensors / ops / collectives are one line each with
 * whitespace-free fields, which `configgen --diff` (driver/diff.c) relies on: a tensor line
 * is "id role dtype local global axes spec SPEC @offset ... name", an op line "index kind
 * ...", a collective line "index kind group R bytes @offset sent what...".
 * Byte counts of collectives follow firmware/comm/coll.c: reduce-scatter (recursive
 * halving) and all-gather (recursive doubling) over R ranks send (R-1)/R of the range per
 * rank, all-to-all the same, a binomial broadcast at most ceil(log2 R) x the range (root).
 * The expert all-to-all exchanges (microbatch ops, sizes set by the routing) are reported
 * apart with an upper bound. The ZeRO-1 alternative is computed per flat range.
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "mesh/qt_cg_mesh.h"
#include "memory/qt_cg_memory.h"
#include "emit/qt_cg_emit.h"
#include "model/qt_cg_model.h"
#include "../../firmware/kernels/matmul_canon.h"
#include "../../firmware/parallel/cp_pack.h"

static const char *const role_txt[QT_ROLE_COUNT] = {
    "param", "grad", "adam_m", "adam_v", "input", "act", "saved", "act_grad", "loss", "table",
    "scratch",
};

static const char *const init_txt[QT_INIT_COUNT] = {
    "zeros", "ones", "normal", "trunc_normal", "log_uniform",
};

static const char *const axis_txt[QT_MESH_COUNT] = {"data", "fsdp", "tensor", "expert",
                                                     "context"};

static void mib(qt_cg_buf *b, const char *what, int64_t bytes)
{
    qt_cg_buf_printf(b, "  %-60s %14lld bytes  %10.3f MiB\n", what, (long long)bytes,
                     (double)bytes / 1048576.0);
}

/* Canonical vocabulary blocks: the logits' and d.logits' bytes on this rank against whole
 * logits (the vocab-parallel saving; docs/sharding.md, Logits). */
static void logits_bytes(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_op *x = &g->mb[g->n_fwd - 1];
    if (x->kind != QT_OP_XENT) return;
    const qt_tensor *l = &g->ts[QT_T(x, XENT, logits)].t, *dl = &g->ts[QT_T(x, XENT, dlogits)].t;
    const int64_t held = l->numel * (int64_t)qt_dtype_bytes(l->dtype) +
                         dl->numel * (int64_t)qt_dtype_bytes(dl->dtype);
    const int64_t P = QT_A(x, XENT, mask) ? qt_cg_group_size(g->s, (unsigned)QT_A(x, XENT, mask)) : 1;
    char lv[160];
    qt_cg_buf_printf(b, "  vocab_blocks %d (canonical vocabulary blocks), logits %s: %lld of "
                     "%lld vocabulary columns a rank\n", g->s->vocab_blocks,
                     P > 1 ? "split over tensor (vocab_parallel)" : "whole",
                     (long long)QT_A(x, XENT, V), (long long)(QT_A(x, XENT, V) * P));
    snprintf(lv, sizeof lv, "  logits + d.logits whole (one rank's vocabulary)");
    mib(b, lv, held * P);
    snprintf(lv, sizeof lv, "  logits + d.logits held on this rank (saving %lld bytes)",
             (long long)(held * P - held));
    mib(b, lv, held);
}

static void shape_txt(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

/* The whole tensor's shape over the mesh. The graph's global_shape when it already differs
 * from the local one (routed experts under expert parallelism); a parameter's otherwise
 * (every rank holds it whole: the optimizer state is split by flat blocks, not by the
 * spec); for any other tensor the local shape times the size of the group its spec splits
 * each dim over (the batch dims of activations). */
static void global_of(const qt_cg_graph *g, const qt_cg_tensor *ct, int64_t *out)
{
    const qt_tensor *t = &ct->t;
    int set = ct->param >= 0;
    for (int d = 0; d < t->ndim; d++) set |= t->global_shape[d] != t->shape[d];
    for (int d = 0; d < t->ndim; d++)
        out[d] = set ? t->global_shape[d] : t->shape[d] * qt_cg_group_size(g->s, t->spec[d]);
}

/* Bytes one rank sends for a collective of `kind` over R ranks moving a range of `bytes`
 * (qt_coll.def SENT). */
static int64_t coll_sent(int kind, int64_t R, int64_t bytes)
{
    const qt_coll_kind_info *k = qt_coll_kind((unsigned)kind);
    return k && R > 1 ? k->sent(R, bytes) : 0;
}

/* The printable name of a collective kind (qt_coll.def). */
static const char *coll_txt(int kind)
{
    const qt_coll_kind_info *k = qt_coll_kind((unsigned)kind);
    return k ? k->text : "?";
}

static void layout_line(qt_cg_buf *b, const qt_cg_graph *g, int i)
{
    const qt_cg_tensor *ct = &g->ts[i];
    const qt_tensor *t = &ct->t;
    char shp[96], gshp[96], ax[200] = "", sp[300] = "";
    const char *names[QT_MAX_DIMS] = {0};
    uint8_t spec[QT_MAX_DIMS];
    char desc[QT_MAX_DIMS][64];
    int64_t gs[QT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) names[d] = t->axes[d] ? qt_cg_lax_names[t->axes[d]] : NULL;
    qt_cg_resolve(g->s->rules, g->s->n_rules, g->s->mesh, t->ndim, names, spec, desc);
    size_t ka = 0, ks = 0;
    for (int d = 0; d < t->ndim; d++) {
        /* a parameter split further than its rules say (context parallelism's head weights
         * and experts: model/context.c): "+axis" */
        const uint8_t extra = (uint8_t)(t->spec[d] & ~spec[d]);
        if (t->role == QT_ROLE_PARAM && extra) {
            char more[48];
            qt_cg_mask_name(extra, more, sizeof more);
            if (!strcmp(desc[d], "-")) snprintf(desc[d], sizeof desc[d], "+%s", more);
            else snprintf(desc[d] + strlen(desc[d]), sizeof desc[d] - strlen(desc[d]), "+%s", more);
        }
        ka += (size_t)snprintf(ax + ka, sizeof ax - ka, "%s%s", d ? "," : "(",
                               qt_cg_lax_names[t->axes[d]]);
        ks += (size_t)snprintf(sp + ks, sizeof sp - ks, "%s%s", d ? "," : "(", desc[d]);
        if (ka >= sizeof ax) ka = sizeof ax - 1;
        if (ks >= sizeof sp) ks = sizeof sp - 1;
    }
    if (ka + 2 < sizeof ax) strcat(ax, ")");
    if (ks + 2 < sizeof sp) strcat(sp, ")");
    shape_txt(shp, sizeof shp, t->ndim, t->shape);
    global_of(g, ct, gs);
    int same = 1;
    for (int d = 0; d < t->ndim; d++) same &= gs[d] == t->shape[d];
    if (same) snprintf(gshp, sizeof gshp, "=");
    else shape_txt(gshp, sizeof gshp, t->ndim, gs);
    qt_cg_buf_printf(b, "  %5d %-8s %-*s %-16s %-16s %-60s spec %-24s @%-12lld", i,
                     role_txt[t->role], g->s->dtype == QT_BF16 ? 4 : 3,
                     t->dtype == QT_I32 ? "i32" : t->dtype == QT_BF16 ? "bf16" : "f32", shp,
                     gshp, ax, sp, (long long)t->offset);
    if (ct->param >= 0) {
        const qt_param *p = &g->ps[ct->param];
        qt_cg_buf_printf(b, " param %d flat %lld init %s", ct->param, (long long)p->flat_offset,
                         init_txt[p->init]);
        if (p->init == QT_INIT_LOG_UNIFORM)
            qt_cg_buf_printf(b, "(%g,%g)", (double)p->init_lo, (double)p->init_hi);
        else if (p->init >= QT_INIT_NORMAL) qt_cg_buf_printf(b, "(%.6g)", (double)p->init_scale);
    } else {
        qt_cg_buf_printf(b, " ops %d..%d", ct->first, ct->last);
    }
    qt_cg_buf_printf(b, "  %s\n", t->name);
}

/* The held-out eval's line (issue 33): when it runs, its batches and forwards; issue 35: the
 * slots past the real sequences (the last forward's rest, or a group's share of an
 * eval_global that leaves some empty) are padded with a masked sequence. */
static void eval_line(qt_cg_buf *b, const qt_train_cfg *t, int n_fwd)
{
    const int64_t nf = (t->eval_batch + t->micro_batch - 1) / t->micro_batch;
    char pad[160] = "";
    if (t->eval_global)
        snprintf(pad, sizeof pad, "; %lld sequence%s over the mesh, the slots past them "
                 "padded (masked: no loss, no target)", (long long)t->eval_global,
                 qt_cg_s(t->eval_global));
    else if (t->eval_batch % t->micro_batch)
        snprintf(pad, sizeof pad, "; the last forward's %lld slot%s past them padded "
                 "(masked: no loss, no target)", (long long)(nf * t->micro_batch -
                 t->eval_batch), qt_cg_s(nf * t->micro_batch - t->eval_batch));
    qt_cg_buf_printf(b, "  eval (held-out, eval_data=): after step s >= %lld with (s - %lld) %% "
                     "%lld == 0 (0-based), %lld eval batch%s of %lld sequence%s per sequence "
                     "group (%lld forward%s of the microbatch each%s); target_eval_loss %g; "
                     "the forward is microbatch ops 0..%d on the microbatch's own tensors "
                     "(arena map below): no memory of its own\n", (long long)t->eval_start,
                     (long long)t->eval_start, (long long)t->eval_interval,
                     (long long)t->eval_steps, t->eval_steps == 1 ? "" : "es (-1: the "
                     "whole eval file)", (long long)t->eval_batch, qt_cg_s(t->eval_batch),
                     (long long)nf, qt_cg_s(nf), pad, (double)t->target_eval_loss,
                     n_fwd - 1);
}

/* The adamw line of a WSD plan (issue 33): the phases by step (0-based, as the schedule
 * counts them; the progress lines count from 1). */
static void wsd_line(qt_cg_buf *b, const qt_train_cfg *t)
{
    const long long L = t->schedule_steps, W = t->wsd_warmup, D = t->wsd_decay;
    qt_cg_buf_printf(b, "  adamw: lr %g, b1 %g, b2 %g, eps %g, wd %g, clip %g; steps %lld; load "
                     "balance %g\n", (double)t->lr, (double)t->adam_b1, (double)t->adam_b2,
                     (double)t->adam_eps, (double)t->weight_decay, (double)t->clip,
                     (long long)t->steps, (double)t->lb_weight);
    qt_cg_buf_printf(b, "  wsd schedule over %lld steps (0-based): ", L);
    if (W > 0) qt_cg_buf_printf(b, "warmup %lld..%lld (lr peak x t/%lld, 0 at step 0), ", 0ll,
                                W - 1, W);
    if (L - W - D > 0) qt_cg_buf_printf(b, "stable %lld..%lld (lr %g), ", W, L - D - 1,
                                        (double)t->lr);
    if (D > 1) qt_cg_buf_printf(b, "%s decay %lld..%lld (to %g x lr at step %lld), ",
                                t->wsd_cosine ? "cosine" : "linear", L - D, L - 1,
                                (double)t->final_frac, L - 1);
    else if (D == 1) qt_cg_buf_printf(b, "decay of one step, %lld (the peak: a one-step decay "
                                      "ends where it starts), ", L - 1);
    qt_cg_buf_printf(b, "lr 0 from step %lld\n", L);
}

static void schedule(qt_cg_buf *b, const qt_cg_graph *g, const char *title, const qt_op *ops,
                     int n, int n_fwd)
{
    qt_cg_buf_printf(b, "\n== %s (%d ops) ==\n", title, n);
    for (int i = 0; i < n; i++) {
        const qt_op *o = &ops[i];
        if (i == n_fwd) qt_cg_buf_printf(b, "  ---- backward ----\n");
        const char *sl = qt_cg_op_slots(o->kind);
        qt_cg_buf_printf(b, "  %5d %-20s", i, qt_cg_op_name(o->kind));
        for (int s = 0; s < QT_OP_MAX_T; s++) {
            if (o->t[s] < 0) continue;
            char r = s < (int)strlen(sl) ? sl[s] : '?';
            qt_cg_buf_printf(b, " %c:%s", r, g->ts[o->t[s]].t.name);
        }
        qt_cg_buf_printf(b, "  a=[");
        int last = QT_OP_MAX_A - 1;
        while (last > 0 && o->a[last] == 0) last--;
        for (int a = 0; a <= last; a++)
            qt_cg_buf_printf(b, "%s%lld", a ? "," : "", (long long)o->a[a]);
        qt_cg_buf_printf(b, "]");
        if (o->f[0] != 0.0f || o->f[1] != 0.0f)
            qt_cg_buf_printf(b, " f=[%.9g,%.9g]", (double)o->f[0], (double)o->f[1]);
        if (o->flags & QT_OPF_WGRAD) qt_cg_buf_printf(b, " WGRAD");
        if (o->flags & QT_OPF_PREV_MB)
            qt_cg_buf_printf(b, " PREV_MB (completes the previous microbatch's split %s; in "
                             "the step schedule the last microbatch's)",
                             o->kind == QT_OP_GRAD_MB_UNITS_WAIT
                                 ? "units exchange and pushes its units" : "reduce-scatter");
        if (o->kind == QT_OP_COLLECTIVE && QT_A(o, COLLECTIVE, coll) >= 0 &&
            QT_A(o, COLLECTIVE, coll) < g->ncoll) {
            const qt_collective *c = &g->coll[QT_A(o, COLLECTIVE, coll)];
            char grp[64];
            qt_cg_buf_printf(b, "  %s over %s: %s",
                             coll_txt(c->kind),
                             qt_cg_mask_name(c->mask, grp, sizeof grp), c->name);
        }
        qt_cg_buf_printf(b, "\n");
    }
}

/* "data 1, fsdp 0" for rank r (axes of size > 1 only; "-" on one rank). */
static void coords_txt(const qt_cg_settings *s, int64_t r, int32_t coord[QT_MESH_COUNT],
                       char *out, size_t n)
{
    qt_mesh_coords(s->mesh, s->dcn, r, coord);
    size_t k = 0;
    out[0] = 0;
    for (int a = 0; a < QT_MESH_COUNT && k < n; a++)
        if (s->mesh[a] > 1)
            k += (size_t)snprintf(out + k, n - k, "%s%s %d", k ? ", " : "", axis_txt[a],
                                  coord[a]);
    if (!k) snprintf(out, n, "-");
}

/* The range whose microbatch-end units exchange is split (GRAD_MB_UNITS_START, collective_
 * overlap all, docs/overlap.md), or -1. */
static int mb_units_split(const qt_cg_graph *g)
{
    for (int k = 0; k < g->nmbend; k++)
        if (g->mbend[k].kind == QT_OP_GRAD_MB_UNITS_START)
            return (int)QT_A(&g->mbend[k], GRAD_MB_UNITS_START, range);
    return -1;
}

/* The units' cost per rank and step (docs/determinism.md "Any split"): q units of each
 * range's block exchanged with each other member of its reduce group, `reductions` times a
 * step (1, or G in the microbatch form), chunked through the comm scratch as the firmware
 * does (qt_coll.h qt_coll_exchange_units_f32); *rs = the reduce-scatter's bytes in their
 * place. */
static void units_cost(const qt_cg_graph *g, int64_t q, int64_t reductions, int64_t *rs,
                       int64_t *sent, int64_t *msgs)
{
    const int64_t se0 = g->comm_scratch_elems - g->comm_split_elems, q0 = q;
    const int split = mb_units_split(g);
    const int64_t RL = qt_cg_group_size(g->s, g->s->batch_mask) * g->s->tr.micro_batch *
                       qt_cg_blocks(g->s) / qt_cg_context(g->s);
    *rs = *sent = *msgs = 0;
    for (int i = 0; i < g->n_ranges; i++) {
        const int64_t R = qt_cg_group_size(g->s, g->ranges[i].reduce_mask);
        const int64_t blk = g->ranges[i].n / R, T = RL / R;
        /* the microbatch form's units: each range's own q_r (the odd part of its leaves) */
        q = g->grad_mb_units > 0 && T > 0 ? T / qt_cg_unit_leaves(g, T, g->ranges[i].hold_mask)
                                           : q0;
        /* the split exchange's pieces go through the comm scratch's split part */
        const int split_i = i == split || qt_cg_units_split(g, i);
        int64_t c = (split_i ? g->comm_split_elems : se0) / (2 * q);
        if (c > ((int64_t)16 << 20) / 4 / q) c = ((int64_t)16 << 20) / 4 / q;
        *rs += reductions * 4 * blk * (R - 1);
        *sent += reductions * 4 * q * blk * (R - 1);
        *msgs += reductions * (R - 1) * (c > 0 ? (blk + c - 1) / c : 0);
    }
}

/* The microbatch form's units (grad_mb_units): the "yes" line with its cost. */
static void mb_units_line(qt_cg_buf *b, const qt_cg_graph *g, int64_t leaves, int lpow2)
{
    const qt_cg_settings *s = g->s;
    const int64_t q = g->grad_mb_units, U = leaves / q, G = s->tr.grad_accum;
    int64_t umax = U, tmax = 0;
    for (int p = 0; p < g->np; p++) {
        const int64_t T = g->ps[p].leaves / G,
                      Up = qt_cg_unit_leaves(g, T, g->ranges[qt_cg_range_of(g, p)].hold_mask);
        if (Up > umax) umax = Up;
        if (T > tmax) tmax = T;
    }
    int lv = 0, mbl = 0;
    while (tmax >> lv) lv++;
    while (G >> mbl) mbl++;
    int64_t rs, sent, msgs;
    units_cost(g, q, G, &rs, &sent, &msgs);
    const int n_leaf = g->n_tree_levels - g->n_mb_levels;
    if (U * q != leaves) { /* a power of two a rank; some weights' trees over more leaves */
        qt_cg_buf_printf(b, "  one-rank bits: yes: each rank's %lld gradient %s per microbatch "
                         "go, for some weights (an expert host's over its expert group, the "
                         "head-split mixer weights' over a sequence's context blocks), into trees "
                         "over a count that is not a power of two, so each range's are reduced "
                         "as up to %lld units (a range's leaves T over its reduce group cover the "
                         "batch group's: the largest power of two dividing T a unit), each one "
                         "complete subtree of the one-rank tree over the global leaf index, "
                         "exchanged pairwise over the range's reduce group and pushed by each "
                         "block's owner into a counter over the step's units (docs/determinism.md "
                         "\"The microbatch form's units\"); cost: %lld bytes sent per rank per "
                         "step in %lld message%s (the reduce-scatter's: %lld bytes), %d leaf "
                         "level%s (%lld for the units) in place of %d, and %d microbatch levels "
                         "in place of %d\n",
                         (long long)leaves, leaves == 1 ? "leaf" : "leaves", (long long)q,
                         (long long)sent, (long long)msgs, qt_cg_s(msgs), (long long)rs,
                         n_leaf, qt_cg_s(n_leaf), (long long)q, lv, g->n_mb_levels, mbl);
        return;
    }
    char ex[200] = "";
    if (s->expert_ctx_rep) {
        const int64_t L = s->tr.micro_batch * qt_cg_blocks(s) / qt_cg_context(s);
        snprintf(ex, sizeof ex, " (the routed experts, replicated over context: %lld units "
                 "of %lld, a piece of each of their exchange's members, interleaved with the "
                 "other context indices' in the global order)",
                 (long long)(s->mesh[QT_MESH_EXPERT] * L / (L & -L)), (long long)(L & -L));
    } else if (umax != U)
        snprintf(ex, sizeof ex, " (of %lld for the routed experts, over their expert group)",
                 (long long)umax);
    qt_cg_buf_printf(b, "  one-rank bits: yes: each rank's %lld gradient %s per microbatch (%s), "
                     "so each microbatch's are reduced as %lld unit%s of %lld %s%s, each one "
                     "complete subtree of the one-rank tree over the global leaf index, "
                     "exchanged pairwise over each range's reduce group%s and pushed by each "
                     "block's owner into a counter over the step's units (docs/determinism.md "
                     "\"The microbatch form's units\"); cost: %lld bytes sent per rank per step "
                     "in %lld message%s (%lld x the reduce-scatter's %lld bytes), %d leaf "
                     "level%s (%lld for the units, %d below them) in place of %d, and %d "
                     "microbatch levels in place of %d\n",
                     (long long)leaves, leaves == 1 ? "leaf" : "leaves",
                     !lpow2 ? "not a power of two"
                            : "reduced microbatch by microbatch, G > 1, over a batch group that "
                              "is not a power of two",
                     (long long)q, qt_cg_s(q), (long long)U, U == 1 ? "leaf" : "leaves", ex,
                     g->layer_reduce ? " per layer, right after its last weight gradient" : "",
                     (long long)sent, (long long)msgs, qt_cg_s(msgs), (long long)q,
                     (long long)rs, n_leaf, qt_cg_s(n_leaf), (long long)q, n_leaf - (int)q, lv,
                     g->n_mb_levels, mbl);
}

/* Whether the plan gives one rank's bits over its batch group of nb ranks, and at what cost
 * (issue 35; docs/determinism.md "Meshes", "Any split"). The reductions continue the
 * one-rank leaf tree when each rank's leaves per reduction are one complete subtree of it: a
 * power of two (the reduce-scatter pairs ranks by recursive halving, or sums a group that is
 * not a power of two in the tree's binary-counter shape), and in the microbatch and layer
 * forms, with a group that is not a power of two, one microbatch per step. Otherwise the
 * step form reduces q = L / U units of U leaves instead (grad_units) and the microbatch
 * and per-layer forms each microbatch's units (grad_mb_units): one rank's bits, at q times
 * the reduce-scatter's bytes (q_r a range: docs/determinism.md). An expert host's
 * tree runs over its expert group's leaves, which must be a power of two too unless the
 * group is the whole batch group (an expert axis of any size, docs/determinism.md "Axes of
 * any size"). */
static void one_rank_bits_line(qt_cg_buf *b, const qt_cg_graph *g, int64_t nb)
{
    const qt_cg_settings *s = g->s;
    const int64_t C = s->mesh[QT_MESH_CONTEXT], G = s->tr.grad_accum;
    const int mbmaj = g->n_mb_levels > 0, pow2 = (nb & (nb - 1)) == 0;
    const int64_t leaves = s->tr.micro_batch * qt_cg_blocks(s) / C * (mbmaj ? 1 : G);
    const int lpow2 = (leaves & (leaves - 1)) == 0;
    const char *per = mbmaj ? "microbatch" : "step";
    if (g->grad_mb_units > 0) {
        mb_units_line(b, g, leaves, lpow2);
        return;
    }
    if (g->grad_units > 1) {
        const int64_t q = g->grad_units, U = leaves / q;
        int lv = 1;
        while (leaves >> lv) lv++;
        int64_t rs, sent, msgs;
        units_cost(g, q, 1, &rs, &sent, &msgs);
        qt_cg_buf_printf(b, "  one-rank bits: yes: each rank's %lld gradient %s per step are "
                         "not a power of two, so they are reduced as %lld units of %lld %s "
                         "(each one complete subtree of the one-rank tree over the global leaf "
                         "index), exchanged pairwise over the batch group and folded by each "
                         "block's owner in the one-rank tree's shape (docs/determinism.md \"Any "
                         "split\"); cost: %lld bytes sent per rank per step in %lld message%s "
                         "(%lld x the reduce-scatter's %lld bytes), and %d tree levels of "
                         "%lld floats (the %lld units' and %d below them) in place of %d\n",
                         (long long)leaves, leaves == 1 ? "leaf" : "leaves", (long long)q,
                         (long long)U, U == 1 ? "leaf" : "leaves", (long long)sent,
                         (long long)msgs, qt_cg_s(msgs), (long long)q, (long long)rs,
                         g->n_tree_levels, (long long)g->n_flat, (long long)q,
                         g->n_tree_levels - (int)q, lv);
        return;
    }
    /* an expert host's tree runs over its expert group's Eg x leaves a microbatch, the
     * group's contiguous block of the global order: a node of the one-rank tree when that is
     * a power of two, or the whole microbatch when the group is the whole batch group */
    const int64_t Eg = s->mesh[QT_MESH_EXPERT] > 1 ? s->mesh[QT_MESH_EXPERT] * C : 1;
    const int64_t el = leaves * Eg;
    const int expert_ok = Eg == 1 || (el & (el - 1)) == 0 || Eg == nb;
    /* the weights split over context by heads (the GDN mixers', model/context.c) take every
     * block of a sequence, C x leaves, reduced over the batch axes but context */
    const int64_t lc = leaves * C;
    const int ctx_ok = C == 1 || (lc & (lc - 1)) == 0 || C == nb;
    const int whole = lpow2 && expert_ok && ctx_ok && (!mbmaj || G == 1 || pow2);
    if (whole) {
        qt_cg_buf_printf(b, "  one-rank bits: yes: each rank's %lld gradient %s per %s are "
                         "one complete subtree of the one-rank tree, which the reduce-scatter "
                         "over the %lld ranks continues (%s; docs/determinism.md)\n",
                         (long long)leaves, leaves == 1 ? "leaf" : "leaves", per,
                         (long long)nb,
                         pow2 ? "recursive halving" : "its binary-counter shape");
        return;
    }
    const int step_ok = s->mesh[QT_MESH_EXPERT] == 1 && s->mesh[QT_MESH_CONTEXT] == 1;
    qt_cg_buf_printf(b, "  one-rank bits: no: each rank's %lld gradient %s per %s %s: the "
                     "run is deterministic for this mesh and plan, its bits differ from one "
                     "rank's (docs/determinism.md; %s)\n",
                     (long long)leaves, leaves == 1 ? "leaf" : "leaves", per,
                     !lpow2 ? "are not a power of two, so not one complete subtree of the "
                              "one-rank tree"
                     : !expert_ok ? "go into an expert host's tree over its expert group's "
                                    "leaves, which are not a power of two and are then reduced "
                                    "over the other batch axes: not one complete subtree of "
                                    "the one-rank tree"
                     : !ctx_ok ? "make, for the weights split over context by heads, all the "
                                 "blocks of a sequence, which are not a power of two and are "
                                 "then reduced over the other batch axes: not one complete "
                                 "subtree of the one-rank tree"
                            : "are reduced microbatch by microbatch (G > 1) over a batch group "
                              "that is not a power of two, which is not a split of the "
                              "one-rank tree",
                     !mbmaj ? (step_ok ? "the units of the step form do not apply: a range "
                                         "reduced over fewer axes, over 1024 units, or "
                                         "more unit levels than 24"
                                       : "the units of the step form do not apply")
                     : "the microbatch form's units do not apply: a parameter's leaves "
                           "that are not q units over its range's reduce group, over 1024 "
                           "units, or more tree levels than 24");
}

/* Whether the tensor axis (and the tensor x context group of the head exchange) splits
 * canonical_factor f's counts into aligned power-of-two shares (config/canon.c: a count is
 * f x 2^j where f divides the length): only when the axis's odd part is f (or the axis is
 * 1). Tensor 2 with f = 3 holds 3 x 2^j / 2 blocks a rank, which is not a node of the
 * kernels' tree over the blocks (qt_canon_tree), so its bits may differ from one rank's with
 * the same factor (seen: 1 ulp at step 0, session 15). Writes the axis text to ax. */
static int canon_split_aligned(const qt_cg_settings *s, char *ax, size_t n)
{
    const int64_t f = s->canon_factor, t = s->mesh[QT_MESH_TENSOR];
    const int64_t tc = t * s->mesh[QT_MESH_CONTEXT];
    if (f <= 1 || s->canon_max > 0) return 1;
    if (t > 1 && t / (t & -t) != f) snprintf(ax, n, "tensor %lld", (long long)t);
    else if (tc > 1 && tc / (tc & -tc) != f)
        snprintf(ax, n, "tensor %lld x context %lld", (long long)t,
                 (long long)s->mesh[QT_MESH_CONTEXT]);
    else return 1;
    return 0;
}

/* The "one-rank bits:" line of a plan whose tensor / context axes imply canonical_factor
 * or the canonical cap (s->canon_implied, config/settings.c mesh_canon; issue 35). With
 * the factor f alone its canonical counts are f x a power of two where one rank's (without
 * the key) are powers of two, so its bits are not one rank's with this config; they are
 * one rank's with canonical_factor: f when the batch reduction continues the one-rank tree
 * (the batch axes' line, under "with canonical_factor f"), and their own otherwise. With
 * the cap raised (s->canon_max) no one-rank plan has its counts: its own bits. Deterministic
 * either way. */
static void implied_bits_line(qt_cg_buf *b, const qt_cg_graph *g, int64_t nb)
{
    const qt_cg_settings *s = g->s;
    const int32_t t = s->mesh[QT_MESH_TENSOR], c = s->mesh[QT_MESH_CONTEXT], f = s->canon_factor;
    const int cap = s->canon_max > 0;
    const int ut = cap ? t > 1 : t / (t & -t) > 1, uc = cap ? c > 1 : c / (c & -c) > 1;
    char ax[64], tail[256], lab[64], fs[64] = "";
    if (f > 1) snprintf(fs, sizeof fs, ", canonical_factor %d implied", f);
    if (ut && uc) snprintf(ax, sizeof ax, "tensor %d x context %d", t, c);
    else if (ut) snprintf(ax, sizeof ax, "tensor %d", t);
    else snprintf(ax, sizeof ax, "context %d", c);
    qt_cg_buf rb = {0};
    if (s->batch_mask && nb > 1) one_rank_bits_line(&rb, g, nb);
    snprintf(lab, sizeof lab, cap ? "with these counts" : "with canonical_factor %d", f);
    char mis[64];
    if (cap)
        snprintf(tail, sizeof tail, "no one-rank plan has these counts, so its bits are its "
                 "own%s", rb.p ? " (the batch reduction: next line)" : "");
    else if (!canon_split_aligned(s, mis, sizeof mis))
        snprintf(tail, sizeof tail, "with canonical_factor: %d too its bits are its own: %s "
                 "splits %d x 2^j canonical blocks into shares that are not powers of two", f,
                 mis, f);
    else if (!rb.p)
        snprintf(tail, sizeof tail, "with canonical_factor: %d the plan gives one rank's bits", f);
    else if (strstr(rb.p, "one-rank bits: yes"))
        snprintf(tail, sizeof tail, "with canonical_factor: %d the plan gives one rank's bits "
                 "(the batch reduction: next line)", f);
    else
        snprintf(tail, sizeof tail, "with canonical_factor: %d too the batch reduction keeps "
                 "its own bits (next line)", f);
    if (cap)
        qt_cg_buf_printf(b, "  one-rank bits: no: %s without canonical_factor: one rank holds "
                         "at most %d canonical blocks a count, which these %d ranks cannot "
                         "split, so the plan's counts go up to %d blocks (config/canon.c%s); "
                         "the run is deterministic for this mesh and plan; %s "
                         "(docs/determinism.md \"The implied factor\")\n", ax, QT_CANON_BLOCKS,
                         s->canon_max, s->canon_max, fs, tail);
    else
        qt_cg_buf_printf(b, "  one-rank bits: no: %s without canonical_factor: the axes imply "
                         "canonical_factor %d (canonical contraction blocks, head groups and "
                         "token blocks %d x a power of two, config/canon.c, where one rank "
                         "without the key has powers of two), so the run is deterministic for "
                         "this mesh and plan and its bits differ from one rank's with this "
                         "config; %s (docs/determinism.md \"Axes of any size\")\n", ax, f, f,
                         tail);
    if (rb.p) {
        qt_cg_buf_printf(b, "  %s, %s", lab, rb.p + 2);
        qt_cg_buf_free(&rb);
    }
}

/* Who reads which sequences over the batch axes: ranks that differ on an axis other than
 * context read different sequences; the ranks of a context group read the same sequences,
 * each keeping its own part of the tokens (data_section's context line says which). */
static void batch_axes_line(qt_cg_buf *b, const qt_cg_settings *s, const char *bm, int64_t nb)
{
    const int64_t C = qt_cg_context(s);
    const uint8_t seq_mask = (uint8_t)(s->batch_mask & ~qt_cg_context_mask(s));
    char sm[64];
    if (C <= 1) {
        qt_cg_buf_printf(b, "  batch axes: %s (%lld ranks, each reads its own sequences)\n", bm,
                         (long long)nb);
        return;
    }
    qt_cg_buf_printf(b, "  batch axes: %s (%lld ranks: ", bm, (long long)nb);
    if (seq_mask)
        qt_cg_buf_printf(b, "ranks at different %s coordinates read different sequences; ",
                         qt_cg_mask_name(seq_mask, sm, sizeof sm));
    qt_cg_buf_printf(b, "the %lld ranks of a context group read the same sequences, each keeping "
                     "its own part of the tokens)\n", (long long)C);
}

static void mesh_section(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    char bm[64], om[64];
    qt_cg_mask_name(s->batch_mask, bm, sizeof bm);
    qt_cg_mask_name(s->opt_mask, om, sizeof om);
    const int64_t nb = qt_cg_group_size(s, s->batch_mask);
    qt_cg_buf_printf(b, "\n== mesh ==\n");
    qt_cg_buf_printf(b, "  ranks: %d\n", s->n_ranks);
    qt_cg_buf_printf(b, "  axes: data %d, fsdp %d, tensor %d, expert %d, context %d (rank = "
                     "mixed radix over the axes in this order, data most significant)\n",
                     s->mesh[0], s->mesh[1], s->mesh[2], s->mesh[3], s->mesh[4]);
    const int64_t nsl = qt_mesh_slices(s->dcn);
    if (nsl > 1)
        qt_cg_buf_printf(b, "  slices (dcn): %lld: data %d, fsdp %d, tensor %d, expert %d, "
                         "context %d; rank = slice x %lld + rank in the slice, slices and "
                         "ranks in a slice each mixed radix in the axis order above, an axis "
                         "coordinate = its slice digit x its ici size + its ici digit; the "
                         "reduce-scatters pair low group indices first, so they sum inside a "
                         "slice before crossing slices when the slice digits are the group's "
                         "highest (docs/sharding.md section 1)\n",
                         (long long)nsl, s->dcn[0], s->dcn[1], s->dcn[2], s->dcn[3], s->dcn[4],
                         (long long)(s->n_ranks / nsl));
    if (s->pp_stages > 1)
        qt_cg_buf_printf(b, "  pipeline: %d stages of %d rank%s, each stage's ranks holding the "
                         "axes above (== pipeline ==)\n", s->pp_stages, s->n_ranks / s->pp_stages,
                         qt_cg_s(s->n_ranks / s->pp_stages));
    qt_cg_buf_printf(b, "  shard_mode: %s\n", s->shard_mode ? "explicit" : "auto");
    qt_cg_buf_printf(b, "  zero1 (shard_optimizer_over_data): %s\n", s->zero1 ? "on" : "off");
    if (s->batch_mask) batch_axes_line(b, s, bm, nb);
    else
        qt_cg_buf_printf(b, "  batch axes: - (every rank reads the whole global batch)\n");
    char mis[64];
    if (g->moe_ragged) {
        /* the receive buffers' drops depend on the expert degree: no mesh gives another's */
        qt_cg_buf_printf(b, "  one-rank bits: no: ragged_buffer_factor=%g: each expert host's "
                         "receive buffer holds B = int(%lld x %lld x %g) = %lld rows a "
                         "microbatch and the rows past it drop, in MaxText's order (source "
                         "rank, expert, token), so which rows drop depends on the expert degree "
                         "%d and the local batch: the run is deterministic for this mesh and "
                         "plan, and one expert rank drops nothing (docs/config.md \"MoE "
                         "form\")\n", s->ragged_factor,
                         (long long)g->ragged_tokens, (long long)s->m.top_k,
                         s->ragged_factor, (long long)g->ragged_rows, s->mesh[QT_MESH_EXPERT]);
        if (s->batch_mask && nb > 1) {
            qt_cg_buf rb = {0};
            one_rank_bits_line(&rb, g, nb);
            qt_cg_buf_printf(b, "  the batch reduction alone, %s", rb.p + 2);
            qt_cg_buf_free(&rb);
        }
    } else if (s->canon_implied) implied_bits_line(b, g, nb);
    else if (!canon_split_aligned(s, mis, sizeof mis)) {
        qt_cg_buf_printf(b, "  one-rank bits: no: %s splits canonical_factor %d's blocks (%d x "
                         "2^j, config/canon.c) into shares that are not powers of two, so the "
                         "run is deterministic for this mesh and plan and its bits are its own "
                         "(docs/determinism.md \"Axes of any size\")\n", mis, s->canon_factor,
                         s->canon_factor);
        if (s->batch_mask && nb > 1) {
            qt_cg_buf rb = {0};
            one_rank_bits_line(&rb, g, nb);
            qt_cg_buf_printf(b, "  the batch reduction alone, %s", rb.p + 2);
            qt_cg_buf_free(&rb);
        }
    } else if (s->batch_mask && nb > 1) one_rank_bits_line(b, g, nb);
    if (s->opt_mask)
        qt_cg_buf_printf(b, "  optimizer axes: %s (Adam m/v and the update split into blocks: "
                         "this rank keeps %lld of the %lld flat elements)\n", om,
                         (long long)g->adam_elems, (long long)g->n_flat);
    else
        qt_cg_buf_printf(b, "  optimizer axes: - (every rank updates all %lld flat elements)\n",
                         (long long)g->n_flat);
    qt_cg_buf_printf(b, "  flat vector: %lld parameter elements padded to n_flat %lld (each "
                     "range a multiple of %lld x its reduction group)\n",
                     (long long)g->n_param_elems, (long long)g->n_flat,
                     (long long)qt_cg_flat_align(s));
    if (s->n_ranks == 1) return;
    for (int i = 0; i < g->n_ranges; i++) {
        const qt_flat_range *r = &g->ranges[i];
        char rm[64], rom[64], hm[64];
        const int64_t no = qt_cg_group_size(s, r->opt_mask);
        char opt[96];
        if (r->opt_mask)
            snprintf(opt, sizeof opt, "optimizer over %s (blocks of %lld)",
                     qt_cg_mask_name(r->opt_mask, rom, sizeof rom), (long long)(r->n / no));
        else
            snprintf(opt, sizeof opt, "optimizer whole on every rank");
        qt_cg_buf_printf(b, "  flat range %d: elements [%lld, %lld), gradient reduced over %s "
                         "(%lld rank%s), %s, %s%s\n", i, (long long)r->lo,
                         (long long)(r->lo + r->n), qt_cg_mask_name(r->reduce_mask, rm, sizeof rm),
                         (long long)qt_cg_group_size(s, r->reduce_mask),
                         qt_cg_s(qt_cg_group_size(s, r->reduce_mask)), opt,
                         r->hold_mask ? "parameters sharded over " : "parameters on every rank",
                         r->hold_mask ? qt_cg_mask_name(r->hold_mask, hm, sizeof hm) : "");
    }
}

#define QT_CG_REPORT_MAX_RANKS 64

/* Attention's heads owned unevenly over context (model/context.c): which context index
 * holds which kv heads (each with its query heads) of a tensor rank, and the padding. */
static void attn_owners_line(qt_cg_buf *b, const qt_cg_settings *s)
{
    int64_t slots;
    if (!qt_cg_ctx_attn_uneven(s, &slots)) return;
    const int64_t C = qt_cg_context(s), tp = s->mesh[QT_MESH_TENSOR];
    const int64_t kv = s->m.n_kv_heads / tp, r = s->m.n_q_heads / s->m.n_kv_heads;
    qt_cg_buf_printf(b, "  attention heads owned unevenly over context (a tensor rank's %lld "
                     "query heads do not divide by %lld, or its %lld kv heads are neither a "
                     "multiple nor a divisor of it): units of one kv head with its %lld query "
                     "heads, %lld unit slot%s on every rank's head side (padding computes zeros: "
                     "the attention core's load is uneven); of a tensor rank's heads, context "
                     "index", (long long)(kv * r), (long long)C, (long long)kv, (long long)r,
                     (long long)slots, qt_cg_s(slots));
    for (int64_t c = 0; c < C; c++) {
        const int64_t k0 = c * kv / C, k1 = (c + 1) * kv / C;
        qt_cg_buf_printf(b, "%s %lld: kv [%lld, %lld) q [%lld, %lld)%s", c ? "," : "",
                         (long long)c, (long long)k0, (long long)k1, (long long)(k0 * r),
                         (long long)(k1 * r), k1 == k0 ? " (none: padding only)" : "");
    }
    qt_cg_buf_printf(b, " (docs/context.md)\n");
}

/* The GDN layers' heads owned unevenly over context (model/context.c): which context index
 * holds which key heads (each with its value heads) of a tensor rank, and the padding. */
static void gdn_owners_line(qt_cg_buf *b, const qt_cg_settings *s)
{
    qt_cg_gdn_units u;
    if (!qt_cg_ctx_gdn_uneven(s, &u)) return;
    const int64_t C = qt_cg_context(s), tp = s->mesh[QT_MESH_TENSOR];
    const int64_t r = s->m.gdn_v_heads / s->m.gdn_k_heads;
    qt_cg_buf_printf(b, "  GDN heads owned unevenly over context (tensor x context = %lld ranks "
                     "do not divide gdn_num_key_heads %lld, the GDN norm's %lld canonical head "
                     "groups or gdn_value_head_dim %lld): units of %lld key head%s with %lld "
                     "value heads (%lld canonical group%s), %lld unit slot%s on every rank's head "
                     "side (padding computes zeros); conv1d.weight, A_log and dt_bias whole over "
                     "context, each leaf completed by an all-gather, the norm's groups summed by "
                     "the one-rank tree; of a tensor rank's key heads, context index",
                     (long long)(tp * C), (long long)s->m.gdn_k_heads, (long long)u.groups,
                     (long long)s->m.gdn_v_dim, (long long)u.uk, qt_cg_s(u.uk),
                     (long long)(u.uk * r), (long long)u.gpu, qt_cg_s(u.gpu), (long long)u.slots,
                     qt_cg_s(u.slots));
    for (int64_t c = 0; c < C; c++) {
        const int64_t k0 = c * u.U / C * u.uk, k1 = (c + 1) * u.U / C * u.uk;
        qt_cg_buf_printf(b, "%s %lld: key [%lld, %lld) value [%lld, %lld)%s", c ? "," : "",
                         (long long)c, (long long)k0, (long long)k1, (long long)(k0 * r),
                         (long long)(k1 * r), k1 == k0 ? " (none: padding only)" : "");
    }
    qt_cg_buf_printf(b, " (docs/context.md)\n");
}

/* The config section's delta-rule form (plans with GDN layers) and, for a packed plan
 * without eos_id, where the separator comes from (a packed plan with eos_id says nothing
 * here: the shipped plan.txt files stay as they were). */
static void delta_rule_and_packing_lines(qt_cg_buf *b, const qt_cg_settings *s)
{
    if (s->m.n_layers > s->m.n_layers / (s->m.cycle > 0 ? s->m.cycle : 1))
        qt_cg_buf_printf(b, "  delta rule (GDN core): %s (gdn_core_algorithm; the recurrent form "
                         "measured faster at Dk = Dv = 64 and 128, docs/bench.md)\n",
                         s->gdn_chunked ? "chunked WY form" : "recurrent, token by token");
    if (s->packing && s->eos_id < 0)
        qt_cg_buf_printf(b, "  packing: documents end at the separator the token file records, "
                         "read at start-up (eos_id unset): a QTTOKENS version 2 header's "
                         "end-of-document id (qtrain-data writes the eos= it encodes with), none "
                         "for the embedded corpus (each window one document); a file that "
                         "records nothing (.npy, raw, QTTOKENS version 1) is refused "
                         "(docs/data.md)\n");
}

/* A per_device_batch_size that leaves a fraction per batch group: MaxText's truncated count
 * (config/train_rules.c qt_cg_group_batch). */
static void batch_fraction_line(qt_cg_buf *b, const qt_cg_settings *s)
{
    const int64_t groups = s->n_ranks / s->mesh[QT_MESH_TENSOR] / s->mesh[QT_MESH_CONTEXT] /
                           (s->pp_stages > 1 ? s->pp_stages : 1);
    if (s->batch_maxtext > 0 && groups > 0 && !s->batch_padded)
        qt_cg_buf_printf(b, "  per_device_batch_size %g: %g x tensor x context%s is not a whole "
                         "number of sequences per batch group; as MaxText (types.py "
                         "calculate_global_batch_sizes), int(%d rank%s x %g) = %lld sequence%s "
                         "a microbatch are trained, %lld per batch group (docs/refusals.md)\n",
                         s->per_device_batch, s->per_device_batch,
                         s->pp_stages > 1 ? " x stages" : "", s->n_ranks,
                         qt_cg_s(s->n_ranks), s->per_device_batch,
                         (long long)s->batch_maxtext, qt_cg_s(s->batch_maxtext),
                         (long long)(s->batch_maxtext / groups));
    const int64_t slots = s->tr.micro_batch * s->tr.grad_accum * groups;
    if (s->batch_padded && groups > 0)
        qt_cg_buf_printf(b, "  per_device_batch_size %g: as MaxText (types.py "
                         "calculate_global_batch_sizes), int(%d rank%s x %g) = %lld sequence%s "
                         "a microbatch are trained; they do not split evenly over the %lld "
                         "batch group%s, so the step's last %lld of its %lld sequence slots "
                         "are padded (every target masked, kept out of every sum and "
                         "statistic, their gradient leaves -0.0: one rank's bits over the "
                         "real ones; docs/refusals.md)\n",
                         s->per_device_batch, s->n_ranks, qt_cg_s(s->n_ranks),
                         s->per_device_batch, (long long)s->batch_maxtext,
                         qt_cg_s(s->batch_maxtext), (long long)groups, qt_cg_s(groups),
                         (long long)(slots - s->tr.global_batch), (long long)slots);
}

static void data_section(qt_cg_buf *b, const qt_cg_graph *g)
{
    /* a pipeline stage's ranks (the same rule in every stage: docs/pipeline.md) */
    const int64_t nr = g->s->n_ranks / (g->s->pp_stages > 1 ? g->s->pp_stages : 1);
    const qt_cg_settings *s = g->s;
    const qt_train_cfg *t = &s->tr;
    const int64_t per = t->micro_batch * t->grad_accum, C = qt_cg_context(s);
    /* the axes that split sequences (context splits each sequence's tokens) */
    const uint8_t seq_mask = (uint8_t)(s->batch_mask & ~qt_cg_context_mask(s));
    const int64_t nb = qt_cg_group_size(s, seq_mask);
    qt_cg_buf_printf(b, "\n== data assignment ==\n");
    qt_cg_buf_printf(b, "  each step reads %lld sequence%s, numbered 0..%lld%s: per_device_batch_"
                     "size %lld x %lld microbatch%s x %lld batch rank%s\n",
                     (long long)t->global_batch, qt_cg_s(t->global_batch),
                     (long long)t->global_batch - 1,
                     s->batch_padded ? ", into the slots of (padded past them)" : "",
                     (long long)t->micro_batch,
                     (long long)t->grad_accum, t->grad_accum == 1 ? "" : "es", (long long)nb,
                     qt_cg_s(nb));
    batch_fraction_line(b, s);
    if (qt_cg_blocks(s) > 1)
        qt_cg_buf_printf(b, "  context_blocks %lld: each sequence is %lld canonical token blocks "
                         "of %lld tokens; a weight-gradient leaf and a loss_seq entry per block, "
                         "in (sequence, block) order: %lld leaves per step on this rank\n",
                         (long long)qt_cg_blocks(s), (long long)qt_cg_blocks(s),
                         (long long)qt_cg_leaf_tokens(s), (long long)(per * qt_cg_blocks(s) / C));
    char mis[64], own[192];
    if (s->canon_factor > 1 && !canon_split_aligned(s, mis, sizeof mis))
        snprintf(own, sizeof own, "%s is not, so the bits are this plan's own (deterministic; "
                 "they may differ from one rank's with the same factor)", mis);
    else
        snprintf(own, sizeof own, "%s", s->canon_max > 0
                     ? "with the cap raised (mesh section) the bits are this plan's own"
                     : "the bits are those of one rank with the same factor");
    if (s->canon_factor > 1)
        qt_cg_buf_printf(b, "  canonical_factor %d%s: canonical contraction blocks and head "
                         "groups are %d x a power of two where %d divides the length "
                         "(config/canon.c), so an axis of %d x a power of two splits them; %s "
                         "(docs/determinism.md \"Axes of any size\")\n", s->canon_factor,
                         s->canon_implied ? " (implied by the tensor / context axes: the config "
                                            "does not set canonical_factor)" : "",
                         s->canon_factor, s->canon_factor, s->canon_factor, own);
    if (s->ctx_seq_split > 1)
        qt_cg_buf_printf(b, "  per_device_batch_size x tensor x context = %d sequences per batch "
                         "group: run as %d microbatches of one sequence each (context "
                         "parallelism's token blocks need one sequence per microbatch: "
                         "docs/context.md), %lld microbatches per step in all\n",
                         s->ctx_seq_split, s->ctx_seq_split, (long long)t->grad_accum);
    if (C > 1)
        qt_cg_buf_printf(b, "  context %lld: the %lld ranks of a context group read the same "
                         "sequences, each keeping its own part of the tokens: context index c "
                         "holds tokens [c*%lld, (c+1)*%lld) of each (its blocks [c*%lld, "
                         "(c+1)*%lld)), and the sequence mixers run on whole sequences of its "
                         "heads between the head exchanges (docs/context.md)\n", (long long)C,
                         (long long)C,
                         (long long)(t->seq_len / C), (long long)(t->seq_len / C),
                         (long long)(qt_cg_blocks(s) / C), (long long)(qt_cg_blocks(s) / C));
    attn_owners_line(b, s);
    gdn_owners_line(b, s);
    if (nr == 1) {
        qt_cg_buf_printf(b, "  1 rank: reads all of them; microbatch m holds sequences "
                         "[m*%lld, m*%lld+%lld)\n", (long long)t->micro_batch,
                         (long long)t->micro_batch, (long long)t->micro_batch);
        return;
    }
    const int mbmaj = g->n_mb_levels > 0;
    const int64_t mb = t->micro_batch;
    if (mbmaj)
        qt_cg_buf_printf(b, "  batch index k of a rank = its mixed-radix coordinate over the "
                         "batch axes%s in axis order (data, fsdp, expert); microbatch-major: "
                         "microbatch m of batch index k holds [(m*%lld + k)*%lld, +%lld), so "
                         "one microbatch over the batch ranks is one contiguous block "
                         "(%s into the microbatch tree)\n",
                         C > 1 ? " but context," : "", (long long)nb, (long long)mb, (long long)mb,
                         g->layer_reduce && g->grad_mb_units
                             ? "its units exchanged and pushed per layer, right after each flat "
                               "range's last weight gradient (gradient_reduce=layer),"
                         : g->layer_reduce ? "reduce-scattered per layer, right after each flat "
                                             "range's last weight gradient (gradient_reduce=layer)"
                         : g->grad_mb_units ? "its units exchanged and pushed after each "
                                              "microbatch,"
                                            : "reduce-scattered after each microbatch");
    else
        qt_cg_buf_printf(b, "  batch index k of a rank = its mixed-radix coordinate over the "
                         "batch axes%s in axis order (data, fsdp, expert); the rank reads the "
                         "rank-major block [k*%lld, (k+1)*%lld), microbatch m holding "
                         "[k*%lld + m*%lld, +%lld)\n", C > 1 ? " but context," : "",
                         (long long)per, (long long)per,
                         (long long)per, (long long)mb, (long long)mb);
    for (int64_t r = 0; r < nr && r < QT_CG_REPORT_MAX_RANKS; r++) {
        int32_t coord[QT_MESH_COUNT];
        char ct[160];
        coords_txt(s, r, coord, ct, sizeof ct);
        int64_t k = 0;
        for (int a = 0; a < QT_MESH_COUNT; a++)
            if (seq_mask & (1u << a)) k = k * s->mesh[a] + coord[a];
        if (mbmaj && t->grad_accum > 1)
            qt_cg_buf_printf(b, "  rank %lld (%s): batch index %lld, sequences %lld..%lld, "
                             "then every %lld (%lld microbatches)\n", (long long)r, ct,
                             (long long)k, (long long)(k * mb), (long long)(k * mb + mb - 1),
                             (long long)(nb * mb), (long long)t->grad_accum);
        else if (mbmaj)
            qt_cg_buf_printf(b, "  rank %lld (%s): batch index %lld, sequences %lld..%lld\n",
                             (long long)r, ct, (long long)k, (long long)(k * mb),
                             (long long)(k * mb + mb - 1));
        else
            qt_cg_buf_printf(b, "  rank %lld (%s): batch index %lld, sequences %lld..%lld\n",
                             (long long)r, ct, (long long)k, (long long)(k * per),
                             (long long)(k * per + per - 1));
    }
    if (nr > QT_CG_REPORT_MAX_RANKS)
        qt_cg_buf_printf(b, "  ranks %d..%lld: the same rule\n", QT_CG_REPORT_MAX_RANKS,
                         (long long)(nr - 1));
}

/* Adam floats per moment with ZeRO-1 off (z = 0) or on (z = 1): each flat range splits its
 * n elements over its optimizer group without / with the data axis (data only where the
 * range's gradient is reduced over it): n_flat/|fsdp| vs n_flat/|fsdp x data| on a plain
 * data x fsdp mesh. *mask receives the union of the groups. */
static int64_t adam_zero1(const qt_cg_graph *g, int z, unsigned *mask)
{
    const unsigned data = 1u << QT_MESH_DATA;
    int64_t e = 0;
    *mask = 0;
    for (int i = 0; i < g->n_ranges; i++) {
        const qt_flat_range *r = &g->ranges[i];
        unsigned o = r->opt_mask & ~data;
        if (z) o |= r->reduce_mask & data;
        *mask |= o;
        e += r->n / qt_cg_group_size(g->s, o);
    }
    return e;
}

/* Adam's bytes per rank with ZeRO-1 off and on (the plan's marked). */
static void zero1_lines(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    char lv[160], om[64];
    if (s->mesh[QT_MESH_DATA] <= 1) {
        qt_cg_buf_printf(b, "    (ZeRO-1 changes nothing here: the data axis has size 1)\n");
        return;
    }
    for (int z = 0; z < 2; z++) {
        unsigned um = 0;
        const int64_t e = adam_zero1(g, z, &um);
        snprintf(lv, sizeof lv, "  ZeRO-1 %s optimizer over %s%s", z ? "on: " : "off:",
                 qt_cg_mask_name(um, om, sizeof om), z == (s->zero1 != 0) ? "  <- this plan" : "");
        mib(b, lv, 8 * e);
    }
}

static void bytes_section(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    const int64_t flat_b = 4 * g->n_flat;
    char lv[160], om[64];
    qt_cg_buf_printf(b, "\n== per-rank bytes ==\n");
    if (g->params_compact)
        mib(b, s->dtype == QT_BF16
                   ? "params (fp32 master: this rank's blocks, adam_elems floats; each layer's "
                     "bf16 compute copy is gathered into the activations)"
                   : "params (this rank's blocks, adam_elems floats; each layer's compute copy is "
                     "gathered into the activations before its forward and its backward)",
            4 * g->adam_elems);
    else if (s->dtype == QT_BF16)
        mib(b, "params (fp32 master: this rank's blocks, adam_elems floats)", 4 * g->adam_elems);
    else
        mib(b, "params (compute copy: n_flat floats)", flat_b);
    if (g->compute_offset) mib(b, "compute copy (bf16: n_flat x 2 bytes)", 2 * g->n_flat);
    if (s->dtype == QT_BF16)
        mib(b, "bf16 staging (one op's bf16 slots widened, fp32)", 4 * g->bf16_stage_elems);
    if (s->opt_mask)
        snprintf(lv, sizeof lv, "adam m + v (2 x adam_elems floats, split over %s)",
                 qt_cg_mask_name(s->opt_mask, om, sizeof om));
    else
        snprintf(lv, sizeof lv, "adam m + v (2 x adam_elems floats, whole)");
    mib(b, lv, 8 * g->adam_elems);
    if (s->n_ranks > 1) zero1_lines(b, g);
    int n_compact = 0, n_leaf = g->n_tree_levels - g->n_mb_levels;
    int64_t tree_b = 0;
    for (int l = 0; l < g->n_tree_levels; l++) {
        n_compact += qt_cg_tree_level_compact(g, l);
        tree_b += 4 * qt_cg_tree_level_elems(g, l);
    }
    const int n_whole = g->n_tree_levels - n_compact - n_leaf;
    if (g->leaf_elems != g->n_flat || n_compact) {
        snprintf(lv, sizeof lv, "gradient tree (%d leaf levels x %lld%s + %d x %lld reduce-block "
                 "+ %d x n_flat floats)", n_leaf, (long long)g->leaf_elems,
                 g->layer_reduce ? " (per-layer windows)" : "", n_compact,
                 (long long)g->mb_elems, n_whole);
    } else {
        snprintf(lv, sizeof lv, "gradient tree (%d level%s x n_flat floats)", g->n_tree_levels,
                 qt_cg_s(g->n_tree_levels));
    }
    mib(b, lv, tree_b);
    mib(b, g->grads_compact ? "  of which grads (top level, this rank's reduce blocks)"
                            : "  of which grads (top level)",
        4 * qt_cg_tree_level_elems(g, g->n_tree_levels - 1));
    mib(b, "leaf scratch (one WGRAD op's leaves)", 4 * g->leaf_scratch_elems);
    mib(b, "comm scratch (reduce-scatter receive buffer)", 4 * g->comm_scratch_elems);
    if (g->comm_split_elems)
        mib(b, g->grad_mb_units ? "  of which the split units exchange's (docs/overlap.md)"
                                : "  of which the split reduce-scatters' (docs/overlap.md)",
            4 * g->comm_split_elems);
    mib(b, "activations (peak)", g->act_peak);
    if (s->vocab_blocks > 1) logits_bytes(b, g);
    mib(b, "arena (2 MiB rounded)", g->arena_bytes);
    if (qt_cg_budget_bytes(s) > 0) {
        if (s->topology[0])
            snprintf(lv, sizeof lv, "budget: device_memory_gib %g (compile_topology %s)",
                     s->budget_gib, s->topology);
        else
            snprintf(lv, sizeof lv, "budget: device_memory_gib %g", s->budget_gib);
        mib(b, lv, qt_cg_budget_bytes(s));
        qt_cg_buf_printf(b, "    the arena uses %.1f%% of it\n",
                         100.0 * (double)g->arena_bytes / (double)qt_cg_budget_bytes(s));
        if (s->pp_stages > 1)
            qt_cg_buf_printf(b, "    with the pipeline's microbatches in flight (%s) and "
                             "receive buffers: %.1f MiB, %.1f%% of it (== pipeline ==)\n",
                             s->pp_schedule ? "1f1b" : "gpipe",
                             (double)qt_cg_need_bytes(g) / 1048576.0,
                             100.0 * (double)qt_cg_need_bytes(g) / (double)qt_cg_budget_bytes(s));
    }
    /* the static tables in the binary (not the arena), unrolled and as stored */
    const int64_t n_ops = (int64_t)g->ninit + g->nmb + g->nmbend + g->nstep;
    const int64_t rest = (int64_t)g->nt * (int64_t)sizeof(qt_tensor) +
                         (int64_t)g->np * (int64_t)sizeof(qt_param) +
                         (int64_t)g->ncoll * (int64_t)sizeof(qt_collective) +
                         (int64_t)g->n_ranges * (int64_t)sizeof(qt_flat_range);
    const int64_t tab = n_ops * (int64_t)sizeof(qt_op) + rest;
    qt_cg_buf_printf(b, "  tables (in the binary), every layer unrolled: %lld ops, %d tensors, "
                     "%d parameters, %d collectives, %d ranges = %lld bytes (%.3f MiB)\n",
                     (long long)n_ops, g->nt, g->np, g->ncoll, g->n_ranges, (long long)tab,
                     (double)tab / 1048576.0);
    if (g->n_scans) {
        int64_t n_stored = n_ops - g->nmb + g->nmbc, strides = 0;
        for (int k = 0; k < g->n_scans; k++) strides += g->scans[k].n;
        const int64_t stab = n_stored * (int64_t)sizeof(qt_op) +
                             strides * (int64_t)sizeof(qt_op_stride) + rest;
        qt_cg_buf_printf(b, "  tables as stored (scan_layers): %lld ops + %lld op strides = %lld "
                         "bytes (%.3f MiB); the tensors table stays per layer\n",
                         (long long)n_stored, (long long)strides, (long long)stab,
                         (double)stab / 1048576.0);
        int64_t unrolled_lo = 0, removed = 0;  /* the block's first op in the schedule above */
        for (int k = 0; k < g->n_scans; k++) {
            unrolled_lo = g->scans[k].lo + removed;
            const int fwd = unrolled_lo < g->n_fwd;
            qt_cg_buf_printf(b, "    scanned block %d: %d ops (schedule ops %lld..%lld, stored "
                             "ops %d..%d) run %d times: the %s's layer cycles%s\n", k,
                             g->scans[k].n, (long long)unrolled_lo,
                             (long long)(unrolled_lo + (int64_t)g->scans[k].n * g->scans[k].count - 1),
                             g->scans[k].lo, g->scans[k].lo + g->scans[k].n - 1,
                             g->scans[k].count, fwd ? "forward" : "backward",
                             fwd ? "" : ", in reverse");
            removed += (int64_t)g->scans[k].n * (g->scans[k].count - 1);
        }
    } else {
        qt_cg_buf_printf(b, "  tables as stored: unrolled (%s)\n",
                         g->s->scan_layers ? "scan_layers: fewer than two layer cycles repeat "
                                             "exactly" : "scan_layers false");
    }
    int64_t real = 0;
    for (int i = 0; i < g->np; i++) real += g->ps[i].numel;
    qt_cg_buf_printf(b, "  parameters: %d tensors, %lld elements (%lld with %lld-element "
                     "padding, n_flat %lld, adam_elems %lld)\n", g->np, (long long)real,
                     (long long)g->n_param_elems, (long long)qt_cg_flat_align(g->s),
                     (long long)g->n_flat,
                     (long long)g->adam_elems);
}

/* The four expert-parallel row exchanges share one attribute list (qt_ops.def): EP_A reads
 * an attribute of any of them by name. */
#define EP_A(op, attr) ((op)->a[QT_A_MOE_DISPATCH_FWD_##attr])
#define EP_SAME(e, attr) ((int)QT_A_##e##_##attr == (int)QT_A_MOE_DISPATCH_FWD_##attr)
#define EP_SAME_ALL(e) (EP_SAME(e, T) && EP_SAME(e, k) && EP_SAME(e, d) && EP_SAME(e, mask) && \
                        EP_SAME(e, Rmax))
_Static_assert(EP_SAME_ALL(MOE_RETURN_FWD) && EP_SAME_ALL(MOE_RETURN_BWD) &&
               EP_SAME_ALL(MOE_DISPATCH_BWD) && EP_SAME_ALL(MOE_RETURN_START) &&
               EP_SAME_ALL(MOE_DISPATCH_BWD_START) && EP_SAME_ALL(MOE_DISPATCH_FWD_START) &&
               EP_SAME_ALL(MOE_RETURN_BWD_START),
               "report.c: the EP exchanges' attributes differ");

/* The expert dispatch in rounds (expert_dispatch=rounds): its ops per microbatch, the group,
 * the round size and what each op moves (routing-dependent, so outside the table). */
static void ep_rounds_line(qt_cg_buf *b, const qt_cg_graph *g)
{
    int n = 0;
    unsigned mask = 0, tmask = 0;
    int64_t R = 0;
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *o = &g->mb[i];
        if (o->kind != QT_OP_MOE_ROUNDS_FWD && o->kind != QT_OP_MOE_ROUNDS_BWD &&
            o->kind != QT_OP_MOE_ROUNDS_WGRAD)
            continue;
        n++;
        mask |= (unsigned)QT_A(o, MOE_ROUNDS_FWD, mask);
        if (o->kind != QT_OP_MOE_ROUNDS_WGRAD) tmask |= (unsigned)QT_A(o, MOE_ROUNDS_FWD, tmask);
        R = QT_A(o, MOE_ROUNDS_FWD, R);
    }
    if (!n) return;
    char grp[64];
    const int64_t M = qt_cg_group_size(g->s, mask);
    qt_cg_buf_printf(b, "  not in the table: %d expert dispatch ops in rounds per microbatch "
                     "(MOE_ROUNDS_FWD, _BWD, _WGRAD) over %s (%lld rank%s): each all-gathers "
                     "the group's row counts, then moves its rows in rounds of at most %lld "
                     "host rows (every home row out and back once per op; the BWD and WGRAD "
                     "also send the row gradients)%s\n", n,
                     qt_cg_mask_name(mask, grp, sizeof grp), (long long)M, qt_cg_s(M),
                     (long long)R,
                     tmask ? "; the FWD and BWD sum each round's host rows over tensor "
                             "(reduce-scatter + all-gather of R x d floats a round)"
                           : "");
}

/* Context parallelism's head exchanges (CTX_TO_HEADS / CTX_TO_TOKENS and their BWD kinds)
 * and the kv replica chains (CTX_CHAIN_SEND): microbatch ops of fixed sizes, each rank
 * sending C - 1 of its C blocks per exchange, a chain member its dk and dv. */
static void cp_exchange_line(qt_cg_buf *b, const qt_cg_graph *g)
{
    int n_x = 0, n_chain = 0;
    int64_t sent = 0;
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *o = &g->mb[i];
        if (o->kind == QT_OP_CTX_CHAIN_SEND) {
            n_chain++;
            sent += 2 * QT_A(o, CTX_CHAIN_SEND, n) * (int64_t)sizeof(float);
            continue;
        }
        if (o->kind != QT_OP_CTX_TO_HEADS && o->kind != QT_OP_CTX_TO_HEADS_BWD &&
            o->kind != QT_OP_CTX_TO_TOKENS && o->kind != QT_OP_CTX_TO_TOKENS_BWD)
            continue;
        const int64_t C = QT_A(o, CTX_TO_HEADS, C), G = QT_A(o, CTX_TO_HEADS, G);
        const int64_t eb = qt_dtype_bytes(g->ts[o->t[0]].t.dtype);
        n_x++;
        /* (uneven ownership: blocks of the padded width) */
        sent += (C - 1) * QT_A(o, CTX_TO_HEADS, b) * (QT_A(o, CTX_TO_HEADS, S) / C) *
                QT_CP_SLOTS(G, C, QT_A(o, CTX_TO_HEADS, u)) * QT_A(o, CTX_TO_HEADS, w) * eb;
    }
    if (!n_x) return;
    qt_cg_buf_printf(b, "  not in the table: %d head exchanges per microbatch (CTX_TO_HEADS / "
                     "CTX_TO_TOKENS, forward and backward: one all-to-all over context each)%s; "
                     "%lld bytes sent per rank per step (x %lld microbatch%s%s)\n", n_x,
                     n_chain ? " and the kv chains' dk and dv hand-overs" : "",
                     (long long)(sent * g->s->tr.grad_accum), (long long)g->s->tr.grad_accum,
                     g->s->tr.grad_accum == 1 ? "" : "es",
                     n_chain ? "; a chain's last member sends none" : "");
}

static void coll_section(qt_cg_buf *b, const qt_cg_graph *g)
{
    static const char pp_small[] = "the pipeline's step metrics (the last stage to the "
                                   "others) and exact merges over the stages (gradient norm^2, "
                                   "fingerprint): a few bytes each";
    qt_cg_buf_printf(b, "\n== collectives per step ==\n");
    if (g->ncoll == 0) {
        if (g->s->n_ranks == 1) qt_cg_buf_printf(b, "  1 rank: no collectives, 0 bytes moved\n");
        else if (g->s->pp_stages > 1) qt_cg_buf_printf(b, "  none in the table\n");
        else qt_cg_buf_printf(b, "  none: 0 bytes moved\n");
        qt_cg_report_pp_boundaries(g, b);
        if (g->s->pp_stages > 1)
            qt_cg_buf_printf(b, "  not counted: %s\n", pp_small);
        return;
    }
    qt_cg_buf_printf(b, "  sent/rank counts every run in a step: the microbatch-end collectives "
                     "and those inside the microbatch schedule (per-layer reduction) run once "
                     "per microbatch (x gradient_accumulation_steps)\n");
    qt_cg_buf_printf(b, "  bytes sent per rank: reduce-scatter (recursive halving) and all-gather "
                     "(recursive doubling) over R ranks send (R-1)/R of the range (stages of "
                     "1/2, 1/4, ... of it), all-to-all (R-1)/R, broadcast (binomial tree) at "
                     "most ceil(log2 R) x the range; each rank receives as much as it sends\n");
    qt_cg_buf_printf(b, "  %5s %-15s %-12s %4s %14s %-13s %14s  %s\n", "#", "kind", "group", "R",
                     "range bytes", "@offset", "sent/rank", "what");
    int64_t total = 0;
    for (int i = 0; i < g->ncoll; i++) {
        const qt_collective *c = &g->coll[i];
        char grp[64];
        const int64_t R = qt_cg_group_size(g->s, c->mask);
        /* a collective of the microbatch-end schedule runs once per microbatch */
        int64_t times = 1;
        for (int k = 0; k < g->nmbend; k++)
            if ((g->mbend[k].kind == QT_OP_COLLECTIVE || g->mbend[k].kind == QT_OP_COLL_START) &&
                QT_A(&g->mbend[k], COLLECTIVE, coll) == i)
                times = g->s->tr.grad_accum;
        for (int k = 0; k < g->nmb; k++)  /* per-layer reduction: inside the microbatch */
            if (g->mb[k].kind == QT_OP_COLLECTIVE && QT_A(&g->mb[k], COLLECTIVE, coll) == i)
                times = g->s->tr.grad_accum;
        const int64_t sent = coll_sent(c->kind, R, c->bytes) * times;
        total += sent;
        qt_cg_buf_printf(b, "  %5d %-15s %-12s %4lld %14lld @%-12lld %14lld  %s\n", i,
                         coll_txt(c->kind),
                         qt_cg_mask_name(c->mask, grp, sizeof grp), (long long)R,
                         (long long)c->bytes, (long long)c->offset, (long long)sent, c->name);
    }
    qt_cg_buf_printf(b, "  total sent per rank per step: %lld bytes (%.3f MiB)\n",
                     (long long)total, (double)total / 1048576.0);
    if (g->grad_mb_units > 0) {  /* point to point, not in the collectives table */
        int64_t rs, sent, msgs;
        units_cost(g, g->grad_mb_units, g->s->tr.grad_accum, &rs, &sent, &msgs);
        qt_cg_buf_printf(b, "  not in the table: the gradient units' pairwise exchanges "
                         "(GRAD_MB_UNITS, once a microbatch): %lld bytes sent per rank per "
                         "step in %lld message%s\n", (long long)sent, (long long)msgs,
                         qt_cg_s(msgs));
        if (mb_units_split(g) >= 0)
            qt_cg_buf_printf(b, "  split: range %d's units exchange (GRAD_MB_UNITS_START at the "
                             "microbatch's end, GRAD_MB_UNITS_WAIT before the next microbatch's "
                             "backward: it runs beside that microbatch's forward), through the "
                             "comm scratch's split part of %lld bytes\n", mb_units_split(g),
                             (long long)(4 * g->comm_split_elems));
        int n_split = 0;
        for (int i = 0; i < g->n_ranges; i++) n_split += qt_cg_units_split(g, i);
        if (n_split)
            qt_cg_buf_printf(b, "  split: %d of %d ranges' units exchanges per layer "
                             "(GRAD_MB_UNITS_START after the range's last weight gradient, "
                             "GRAD_MB_UNITS_WAIT before the next range's units op: the next "
                             "range's weight gradients run beside it; the last stays blocking), "
                             "through the comm scratch's split part of %lld bytes\n", n_split,
                             g->n_ranges, (long long)(4 * g->comm_split_elems));
    }
    /* expert parallelism: the row exchanges are microbatch ops with routing-dependent sizes */
    int n_ep = 0, n_ep_split = 0;
    unsigned ep_mask = 0;
    int64_t ep_max = 0;
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *o = &g->mb[i];
        int64_t rows;
        const int split = o->kind == QT_OP_MOE_RETURN_START ||
                          o->kind == QT_OP_MOE_DISPATCH_BWD_START ||
                          o->kind == QT_OP_MOE_DISPATCH_FWD_START ||
                          o->kind == QT_OP_MOE_RETURN_BWD_START;
        if (o->kind == QT_OP_MOE_DISPATCH_FWD || o->kind == QT_OP_MOE_RETURN_BWD ||
            o->kind == QT_OP_MOE_DISPATCH_FWD_START || o->kind == QT_OP_MOE_RETURN_BWD_START)
            rows = EP_A(o, T) * EP_A(o, k);   /* the home rows T*k (a split one at its start) */
        else if (o->kind == QT_OP_MOE_RETURN_FWD || o->kind == QT_OP_MOE_DISPATCH_BWD ||
                 o->kind == QT_OP_MOE_RETURN_START || o->kind == QT_OP_MOE_DISPATCH_BWD_START)
            rows = EP_A(o, Rmax);             /* the host rows Rmax (a split one at its start) */
        else
            continue;
        n_ep++;
        n_ep_split += split;
        ep_mask |= (unsigned)EP_A(o, mask);
        ep_max += qt_dtype_bytes((unsigned)g->s->dtype) * rows * EP_A(o, d);
    }
    if (n_ep) {
        char grp[64];
        qt_cg_buf_printf(b, "  not in the table: %d expert all-to-all exchanges per microbatch "
                         "(MOE_DISPATCH/MOE_RETURN, forward and backward) over %s (%lld rank%s); "
                         "their sizes follow the routing: at most %lld bytes sent per rank per "
                         "step (every home row T*k*d and every host row Rmax*d sent away, x %lld "
                         "microbatch%s)\n", n_ep, qt_cg_mask_name(ep_mask, grp, sizeof grp),
                         (long long)qt_cg_group_size(g->s, ep_mask),
                         qt_cg_s(qt_cg_group_size(g->s, ep_mask)),
                         (long long)(ep_max * g->s->tr.grad_accum),
                         (long long)g->s->tr.grad_accum, g->s->tr.grad_accum == 1 ? "" : "es");
        if (n_ep_split)
            qt_cg_buf_printf(b, "  of which %d split beside compute (collective_overlap all: "
                             "moe_dispatch_fwd_start .. _wait, moe_return_start .. _wait, "
                             "moe_return_bwd_start .. _wait, moe_dispatch_bwd_start .. _wait in "
                             "the microbatch schedule)\n", n_ep_split);
    }
    ep_rounds_line(b, g);
    cp_exchange_line(b, g);
    qt_cg_report_pp_boundaries(g, b);
    qt_cg_buf_printf(b, "  not counted: the small all-gathers of exact accumulators (the loss "
                     "over the batch axes, the gradient norm^2 over the optimizer axes)%s%s\n",
                     g->s->pp_stages > 1 ? "; " : "", g->s->pp_stages > 1 ? pp_small : "");
}

/* The config section's MoE form lines: the form's note, and how an expert host's buffers
 * are sized (rounds, a capacity or the receive buffers) against the dropless worst case. */
static void moe_lines(qt_cg_buf *b, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    if (s->moe_note[0]) qt_cg_buf_printf(b, "  moe form: %s\n", s->moe_note);
    if (s->expert_ctx_rep) {
        /* the routed experts' elements a rank holds (split over expert alone) */
        int64_t ne = 0;
        for (int p = 0; p < g->np; p++) {
            const qt_tensor *t = &g->ts[g->ps[p].tensor].t;
            for (int d = 0; d < t->ndim; d++)
                if (t->shape[d] != t->global_shape[d] && (t->spec[d] & (1u << QT_MESH_EXPERT))) {
                    ne += g->ps[p].numel;
                    break;
                }
        }
        const int64_t C = qt_cg_context(s), ep = s->mesh[QT_MESH_EXPERT];
        qt_cg_buf_printf(b, "  moe experts: split over expert alone (%lld of %lld a rank), "
                         "replicated over context %lld (MaxText's default rules: %s%lld%s); "
                         "each context index "
                         "runs its own exchange over the expert axis (%lld ranks: the "
                         "exchanges line of the collectives section), and the experts' "
                         "gradients reduce over context as the dense weights' do, interleaved "
                         "in the one-rank tree (the units of the one-rank bits line). Memory: "
                         "the routed experts' %lld weights a rank and their gradient-tree "
                         "levels are %lld x the expert x context form's (+%.3f MiB of weights "
                         "a rank at 4 bytes an element), Adam m/v split over the optimizer "
                         "axes as before\n",
                         (long long)(s->m.n_experts / ep), (long long)s->m.n_experts,
                         (long long)C,
                         s->m.n_experts % (ep * C) ? "expert x context = " : "ragged_buffer_factor "
                         "> 0, MaxText's receive buffer per context index; expert x context = ",
                         (long long)(ep * C),
                         s->m.n_experts % (ep * C) ? " does not divide num_experts" : " divides "
                         "num_experts",
                         (long long)ep, (long long)ne, (long long)C,
                         (double)ne * (double)(C - 1) / (double)C * 4.0 / 1048576.0);
    }
    if (s->expert_dispatch == QT_CG_DISPATCH_ROUNDS && g->ep_rows_dropless > 0)
        qt_cg_buf_printf(b, "  moe dispatch: rounds of %lld host rows (expert_dispatch=%s) instead "
                         "of buffers for the dropless worst case %lld (%.2f%%): a host's round "
                         "buffers, gate/up and FFN scratch hold one round; gu and d(gu) are "
                         "recomputed per round in the backward\n", (long long)g->ep_rows,
                         s->expert_rounds_auto ? "auto: the whole dispatch is over the budget"
                                               : "rounds, expert_chunk_rows",
                         (long long)g->ep_rows_dropless,
                         100.0 * (double)g->ep_rows / (double)g->ep_rows_dropless);
    else if (g->moe_ragged && g->ep_rows_dropless > 0)
        qt_cg_buf_printf(b, "  moe receive buffer: an expert host holds %lld routed rows per "
                         "layer (ragged_buffer_factor: B = int(T x k x r), at least 1) instead "
                         "of the dropless worst case %lld (%.1f%%)\n", (long long)g->ep_rows,
                         (long long)g->ep_rows_dropless,
                         100.0 * (double)g->ep_rows / (double)g->ep_rows_dropless);
    else if (s->moe_capacity > 0 && g->ep_rows_dropless > 0)
        qt_cg_buf_printf(b, "  moe capacity: an expert host holds %lld routed rows per layer "
                         "(members x sequences x local experts x C) instead of the dropless "
                         "worst case %lld (%.1f%%): its received tokens, expert outputs, gate/up "
                         "activations and FFN scratch scale with it\n",
                         (long long)g->ep_rows, (long long)g->ep_rows_dropless,
                         100.0 * (double)g->ep_rows / (double)g->ep_rows_dropless);
}

/* Activations held otherwise than their logical axes declare (mesh/layout.c): declared by
 * their layers under shard_mode=explicit, propagated under auto; the reason, one per line. */
static void layout_section(qt_cg_buf *b, const qt_cg_graph *g)
{
    qt_cg_buf_printf(b, "\n== layouts (declared by the logical axes vs held) ==\n");
    if (!g->n_reshards) {
        qt_cg_buf_printf(b, "  every activation is held as its logical axes declare\n");
        return;
    }
    qt_cg_buf_printf(b, "  %d activations held otherwise than declared, %s:\n", g->n_reshards,
                     g->s->shard_mode == 1 ? "each declared by its layer (explicit)"
                                           : "propagated (auto)");
    const char *last = NULL;
    for (int i = 0; i < g->nt; i++) {
        const qt_cg_tensor *ct = &g->ts[i];
        const qt_tensor *t = &ct->t;
        if (!qt_cg_held_otherwise(ct)) continue;
        char want[160], got[160];
        qt_cg_layout_name(t->spec, t->ndim, want, sizeof want);
        qt_cg_layout_name(ct->exec, t->ndim, got, sizeof got);
        qt_cg_buf_printf(b, "  %-32s declared [%s] held [%s]\n", t->name, want, got);
        if (ct->reshard && ct->reshard != last)
            qt_cg_buf_printf(b, "    because: %s\n", ct->reshard);
        last = ct->reshard;
    }
}

static void memory_map(qt_cg_buf *b, const qt_cg_graph *g)
{
    qt_cg_buf_printf(b, "\n== memory map (byte offsets in the arena) ==\n");
    qt_cg_buf_printf(b, "  %14lld params (%lld floats)\n  %14lld adam_m (%lld floats)\n"
                     "  %14lld adam_v (%lld floats)\n", (long long)g->params_offset,
                     (long long)(g->params_compact || g->s->dtype == QT_BF16 ? g->adam_elems
                                                                            : g->n_flat),
                     (long long)g->adam_m_offset,
                     (long long)g->adam_elems, (long long)g->adam_v_offset,
                     (long long)g->adam_elems);
    if (g->compute_offset)
        qt_cg_buf_printf(b, "  %14lld compute copy (%lld bf16)\n", (long long)g->compute_offset,
                         (long long)g->n_flat);
    if (g->s->dtype == QT_BF16)
        qt_cg_buf_printf(b, "  %14lld bf16 staging (%lld floats)\n",
                         (long long)g->bf16_stage_offset, (long long)g->bf16_stage_elems);
    for (int i = 0; i < g->n_tree_levels; i++)
        qt_cg_buf_printf(b, "  %14lld tree level %d%s\n", (long long)g->tree_offset[i], i,
                         g->tree_offset[i] == g->grads_offset
                             ? " = grads (the step's total is completed here in place)"
                         : qt_cg_tree_level_compact(g, i)
                             ? " (microbatch tree, this rank's reduce blocks only)"
                         : g->layer_reduce ? " (leaf tree: per-layer windows)" : "");
    qt_cg_buf_printf(b, "  %14lld leaf scratch (%lld floats)\n", (long long)g->leaf_scratch_offset,
                     (long long)g->leaf_scratch_elems);
    if (g->comm_scratch_elems)
        qt_cg_buf_printf(b, "  %14lld comm scratch (%lld floats)\n",
                         (long long)g->comm_scratch_offset, (long long)g->comm_scratch_elems);
    qt_cg_buf_printf(b, "  %14lld activations (%lld bytes peak)\n  %14lld end\n",
                     (long long)g->act_offset, (long long)g->act_peak, (long long)g->arena_bytes);
}

void qt_cg_emit_report(const qt_cg_graph *g, const qt_cg_config *c, qt_cg_buf *b)
{
    const qt_cg_settings *s = g->s;
    const qt_model_dims *m = &s->m;
    const qt_train_cfg *t = &s->tr;
    qt_cg_buf_printf(b, "qtrain plan '%s' - generated by configgen %s from", s->run_name,
                     QT_CG_VERSION);
    for (int i = 0; i < 3; i++)
        if (c->files[i]) qt_cg_buf_printf(b, " %s", c->files[i]);
    for (int i = 0; i < c->n_over; i++) {
        qt_cg_buf_printf(b, " %s=", c->over_keys[i]);
        qt_cg_val_render(&c->over[i], b);
    }
    qt_cg_buf_printf(b, "\nplan hash 0x%016llx; do not edit; make gen regenerates.\n",
                     (unsigned long long)g->hash);

    qt_cg_buf_printf(b, "\n== config ==\n");
    qt_cg_buf_printf(b, "  model %s, decoder_block %s\n", s->model_name[0] ? s->model_name : "-",
                     m->decoder_block ? "qwen3_5" : "qwen3_next");
    qt_cg_buf_printf(b, "  d %lld, layers %lld (cycle %lld: full attention at (l+1) %% %lld == 0), "
                     "vocab %lld, norm eps %g\n", (long long)m->d, (long long)m->n_layers,
                     (long long)m->cycle, (long long)m->cycle, (long long)m->vocab,
                     (double)m->norm_eps);
    qt_cg_buf_printf(b, "  attention: %lld q / %lld kv heads of %lld, rotary dim %lld, theta %g%s\n",
                     (long long)m->n_q_heads, (long long)m->n_kv_heads, (long long)m->head_dim,
                     (long long)m->rotary_dim, (double)m->rope_theta,
                     s->use_mrope ? " (mrope: text positions, same as 1-D rope)" : "");
    qt_cg_buf_printf(b, "  gdn: %lld key heads of %lld, %lld value heads of %lld, conv %lld, "
                     "chunk %lld\n", (long long)m->gdn_k_heads, (long long)m->gdn_k_dim,
                     (long long)m->gdn_v_heads, (long long)m->gdn_v_dim, (long long)m->gdn_conv,
                     (long long)m->gdn_chunk);
    qt_cg_buf_printf(b, "  moe: %lld experts, top %lld, width %lld, shared expert width %lld\n",
                     (long long)m->n_experts, (long long)m->top_k, (long long)m->moe_dim,
                     (long long)m->shared_dim);
    moe_lines(b, g);
    qt_cg_buf_printf(b, "  batch: %lld seq%s x %lld tokens per microbatch, %lld microbatch%s, "
                     "global batch %lld seq%s (%lld tokens)\n", (long long)t->micro_batch,
                     qt_cg_s(t->micro_batch), (long long)t->seq_len, (long long)t->grad_accum,
                     t->grad_accum == 1 ? "" : "es", (long long)t->global_batch,
                     qt_cg_s(t->global_batch), (long long)(t->global_batch * t->seq_len));
    if (t->lr_schedule) wsd_line(b, t);
    else qt_cg_buf_printf(b, "  adamw: lr %g, b1 %g, b2 %g, eps %g, wd %g, clip %g; cosine schedule "
                     "over %lld steps (warmup %g, final %g); steps %lld; load balance %g\n",
                     (double)t->lr, (double)t->adam_b1, (double)t->adam_b2, (double)t->adam_eps,
                     (double)t->weight_decay, (double)t->clip, (long long)t->schedule_steps,
                     (double)t->warmup_frac, (double)t->final_frac, (long long)t->steps,
                     (double)t->lb_weight);
    if (t->eval_interval > 0) eval_line(b, t, g->n_fwd);
    delta_rule_and_packing_lines(b, s);
    if (s->dtype == QT_BF16)
        qt_cg_buf_printf(b, "  dtype bfloat16, weight_dtype float32: activations, matmul operands "
                         "and the parameters' compute copy in bf16; master weights, Adam, "
                         "gradients, trees, loss and statistics in fp32 (docs/precision.md)\n");
    if (s->remat != QT_CG_REMAT_NONE)
        qt_cg_buf_printf(b, "  remat_policy %s: %d forward ops recomputed in the backward (the "
                         "copies write tensors named <name>~r)\n",
                         s->remat == QT_CG_REMAT_FULL ? "full" : "save_dot", g->n_remat_ops);
    if (s->unused[0]) qt_cg_buf_printf(b, "  accepted but unused (no vision tower): %s\n", s->unused);
    if (s->ignored[0]) qt_cg_buf_printf(b, "  ignored, as in MaxText: %s\n", s->ignored);
    if (s->mt_ignored[0])
        qt_cg_buf_printf(b, "  MaxText keys without effect here: %s\n", s->mt_ignored);

    mesh_section(b, g);
    qt_cg_report_pipeline(g, b);
    data_section(b, g);
    bytes_section(b, g);
    qt_cg_report_flops(g, b);
    qt_cg_report_mtp(g, b);
    coll_section(b, g);
    layout_section(b, g);
    memory_map(b, g);

    qt_cg_buf_printf(b, "\n== tensors (id role dtype local-shape global-shape logical-axes spec "
                     "@offset) ==\n");
    qt_cg_buf_printf(b, "  local: this rank's shape; global: the whole tensor over the mesh "
                     "(= when the same). Every rank holds whole parameters (their spec is the "
                     "MaxText layout; fsdp and ZeRO-1 split the optimizer's flat vector instead), "
                     "except those with a smaller local shape (routed experts sharded over "
                     "expert).\n");
    for (int i = 0; i < g->nt; i++) layout_line(b, g, i);
    schedule(b, g, "init schedule", g->init, g->ninit, -1);
    schedule(b, g, "microbatch schedule", g->mb, g->nmb, g->n_fwd);
    if (g->nmbend)
        schedule(b, g, g->grad_mb_units
                           ? "microbatch-end schedule (after each microbatch: each range's "
                             "units exchanged and pushed into the microbatch tree)"
                           : "microbatch-end schedule (after each microbatch: leaf-tree totals, "
                             "their reduce-scatter, the push into the microbatch tree)",
                 g->mbend, g->nmbend, -1);
    schedule(b, g, "step schedule (after the last microbatch; a0 leaves, a1 tokens)", g->step,
             g->nstep, -1);
}
