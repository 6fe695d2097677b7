/* validate.c - the plan's start-up validation (qt_validate.h): everything the runtime checks
 * before it touches the arena, so a stale, hand-edited or foreign plan is refused with a
 * message instead of failing inside a step: pipeline plans only in the forms the driver
 * runs (issue 36), the rank count and this rank's id, the plan
 * hash, the batch, the io tensors, the flat regions and ranges, the parameters, and the
 * step schedule (every op a STEP kind fitting the plan through its registry check hook,
 * one normalisation and one update, scanned blocks that unroll to the logical schedule,
 * every flat range pushed once per microbatch into a microbatch tree, an eval forward that
 * closes its collectives and touches no gradient).
 * Invariants: reads the plan only; its one piece of state is the validation scratch below;
 * returns QT_OK or QT_E_PLAN after printing one message.
 */
#include <stdio.h>
#include <string.h>
#include "qt_validate.h"
#include "qt_interp.h"
#include "qt_plan_hash.h"
#include "qt_step.h"
#include "qt_pipeline.h"
#include "qt_err.h"
#include "comm/qt_coll.h"
#include "comm/qt_comm.h"

/* Most flat ranges a plan may have (per-layer reduction: a few per decoder layer). */
#define QT_VAL_MAX_RANGES (1 << 14)

static struct {
    const qt_kernel_entry *table;      /* the kernel table the plan is checked against */
    uint8_t pushed[QT_VAL_MAX_RANGES]; /* GRAD_MB_PUSHes per flat range */
} qt_val;

static int qt_validate_io_tensor(const qt_plan *p, int32_t id, const char *what,
                                      uint8_t dtype, int64_t numel)
{
    if (id < 0 || id >= p->n_tensors) {
        return qt_fail(QT_E_PLAN, "plan %s: %s tensor id %d is invalid", p->run_name, what, id);
    }
    const qt_tensor *t = &p->tensors[id];
    if (t->dtype != dtype || t->numel < numel || t->offset < 0 ||
        t->offset + 4 * t->numel > p->arena_bytes) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: %s tensor %s: dtype %u numel %lld offset %lld, expected "
                       "dtype %u and >= %lld elements inside the arena", p->run_name, what,
                       t->name, t->dtype, (long long)t->numel, (long long)t->offset, dtype,
                       (long long)numel);
    }
    return QT_OK;
}

static int qt_validate_region(const qt_plan *p, int64_t off, int64_t elems, const char *what)
{
    if (off < 0 || elems < 0 || off + 4 * elems > p->arena_bytes) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: %s region [%lld, +%lld floats) is outside the arena (%lld bytes)",
                       p->run_name, what, (long long)off, (long long)elems,
                       (long long)p->arena_bytes);
    }
    return QT_OK;
}

/* The flat regions: each inside the arena and no two sharing bytes, except that the
 * gradient region is the top tree level itself (qt_interp_validate checks that identity;
 * here it only has to lie inside the arena like the rest). Params and tree levels hold
 * n_flat floats, the Adam moments this rank's block of the optimizer group. */
static int qt_validate_regions(const qt_plan *p)
{
    enum { QT_RT_REGIONS = 8 + QT_MAX_TREE_LEVELS };
    int64_t off[QT_RT_REGIONS], elems[QT_RT_REGIONS];
    const char *what[QT_RT_REGIONS];
    if (p->n_tree_levels < 1 || p->n_tree_levels > QT_MAX_TREE_LEVELS)
        return qt_fail(QT_E_PLAN, "plan %s: %d tree levels (1..%d)", p->run_name,
                       p->n_tree_levels, QT_MAX_TREE_LEVELS);
    /* the flat ranges tile [0, n_flat), each splitting evenly over its groups, and their
     * optimizer blocks tile the Adam regions */
    int64_t cover = 0, adam = 0;
    if (p->n_ranges < 1 || !p->ranges)
        return qt_fail(QT_E_PLAN, "plan %s: %d flat ranges (at least 1)", p->run_name,
                       p->n_ranges);
    if (p->grads_compact && p->n_mb_levels < 1)
        return qt_fail(QT_E_PLAN, "plan %s: a compact gradient region needs a microbatch tree",
                       p->run_name);
    if (p->params_compact && !p->layer_reduce)
        return qt_fail(QT_E_PLAN, "plan %s: per-layer parameter gathers need per-layer "
                       "reduction", p->run_name);
    for (int32_t i = 0; i < p->n_ranges; i++) {
        const qt_flat_range *r = &p->ranges[i];
        const int64_t red = r->reduce_mask ? qt_comm_group_size(r->reduce_mask) : 1;
        const int64_t opt = r->opt_mask ? qt_comm_group_size(r->opt_mask) : 1;
        if (r->lo != cover || r->n < 0 || r->n % red || r->n % opt || (r->opt_mask & ~r->reduce_mask) ||
            r->adam_lo != adam)
            return qt_fail(QT_E_PLAN, "plan %s: flat range %d [%lld, +%lld) does not split over "
                           "its groups (%lld and %lld rank%s)", p->run_name, i, (long long)r->lo,
                           (long long)r->n, (long long)red, (long long)opt, opt == 1 ? "" : "s");
        if (r->leaf_lo < 0 || r->n > p->leaf_elems || r->leaf_lo > p->leaf_elems - r->n ||
            (!p->layer_reduce && r->leaf_lo != r->lo) ||
            (p->grads_compact && r->opt_mask != r->reduce_mask))
            return qt_fail(QT_E_PLAN, "plan %s: flat range %d: leaf window at %lld outside the "
                           "%lld-float leaf levels (or not at its flat offset), or a compact "
                           "gradient with optimizer axes 0x%x other than its reduction axes 0x%x",
                           p->run_name, i, (long long)r->leaf_lo, (long long)p->leaf_elems,
                           (unsigned)r->opt_mask, (unsigned)r->reduce_mask);
        /* its parameters in index order have increasing flat offsets (step_ops.c zeroes the
         * gaps between them in that order) */
        int64_t last = -1;
        for (int32_t k = 0; k < p->n_params; k++) {
            const int64_t fo = p->params[k].flat_offset;
            if (fo < r->lo || fo >= r->lo + r->n) continue;
            if (fo <= last || fo + p->params[k].numel > r->lo + r->n)
                return qt_fail(QT_E_PLAN, "plan %s: parameter %s is out of order in, or not "
                               "inside, flat range %d", p->run_name, p->params[k].name, i);
            last = fo;
        }
        cover += r->n;
        adam += r->n / opt;
    }
    if (cover != p->n_flat || p->n_flat < p->n_param_elems || adam != p->adam_elems)
        return qt_fail(QT_E_PLAN, "plan %s: the flat ranges cover %lld of %lld elements and "
                       "%lld of %lld Adam elements", p->run_name, (long long)cover,
                       (long long)p->n_flat, (long long)adam, (long long)p->adam_elems);
    static const char *const names[6] = {"params", "adam m", "adam v", "leaf scratch",
                                         "comm scratch", "checkpoint staging"};
    const int64_t fixed[6] = {p->params_offset, p->adam_m_offset, p->adam_v_offset,
                              p->leaf_scratch_offset, p->comm_scratch_offset,
                              p->staging_offset};
    const int64_t sizes[6] = {qt_params_elems(p), p->adam_elems, p->adam_elems,
                              p->leaf_scratch_elems, p->comm_scratch_elems, p->staging_elems};
    int n = 0;
    for (int i = 0; i < 6; i++, n++) {
        off[n] = fixed[i];
        elems[n] = sizes[i];
        what[n] = names[i];
    }
    if (p->dtype == QT_BF16) {
        /* the compute copy: n_flat bf16 (in 4-byte units), and the fp32 staging */
        off[n] = p->compute_offset, elems[n] = p->compute_offset ? (p->n_flat + 1) / 2 : 0;
        what[n++] = "bf16 compute copy";
        off[n] = p->bf16_stage_offset, elems[n] = p->bf16_stage_elems;
        what[n++] = "bf16 staging";
    }
    int64_t mb_elems = 0;
    for (int32_t i = 0; i < p->n_ranges; i++) {
        const qt_flat_range *r = &p->ranges[i];
        const int64_t g = r->reduce_mask ? qt_comm_group_size(r->reduce_mask) : 1;
        if (r->mb_lo != mb_elems)
            return qt_fail(QT_E_PLAN, "plan %s: flat range %d's microbatch-tree block starts at "
                           "%lld, expected %lld", p->run_name, (int)i, (long long)r->mb_lo,
                           (long long)mb_elems);
        mb_elems += r->n / g;
    }
    if (p->n_mb_levels > 1 || p->grads_compact) {
        if (p->mb_elems != mb_elems)
            return qt_fail(QT_E_PLAN, "plan %s: compact microbatch-tree levels of %lld floats, "
                           "the ranges' reduce blocks need %lld", p->run_name,
                           (long long)p->mb_elems, (long long)mb_elems);
    }
    for (int l = 0; l < p->n_tree_levels; l++, n++) {
        const int compact =
            qt_tree_level_compact(p->n_tree_levels, p->n_mb_levels, p->grads_compact, l);
        off[n] = p->tree_offset[l];
        elems[n] = qt_tree_level_elems(p, l);
        what[n] = compact ? "compact microbatch-tree level" : "tree level";
    }
    int rc = qt_validate_region(p, p->grads_offset, qt_grads_elems(p), "grads");
    for (int i = 0; !rc && i < n; i++) rc = qt_validate_region(p, off[i], elems[i], what[i]);
    for (int i = 0; !rc && i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            if (elems[i] && elems[j] && off[i] < off[j] + 4 * elems[j] &&
                off[j] < off[i] + 4 * elems[i])
                return qt_fail(QT_E_PLAN, "plan %s: %s region at byte %lld overlaps %s region "
                               "at byte %lld", p->run_name, what[i], (long long)off[i], what[j],
                               (long long)off[j]);
        }
    }
    return rc;
}

/* Checks op i of a schedule of STEP ops (and its qt_ops.def CHECK hook); counts the
 * normalisations and updates, and the pushes of each flat range into the microbatch tree.
 * With `in_mb` the schedule is the microbatch schedule: its RUN and WGRAD ops are skipped
 * (the interpreter checks them) and only per-layer reduction plans may have STEP ops there. */
static int qt_validate_step_op(const qt_plan *p, const qt_op *op, int32_t i, const char *which,
                               int in_mb, int *n_norm, int *n_update)
{
    const qt_train_cfg *tc = &p->train;
    const int64_t leaves = qt_plan_leaves_per_mb(p) * tc->grad_accum, tokens = tc->global_batch * tc->seq_len;
    const qt_kernel_entry *table = qt_val.table;
    if (in_mb && (op->kind >= QT_OP_COUNT || !table[op->kind].step)) return QT_OK;
    if (in_mb && !p->layer_reduce && !(op->flags & QT_OPF_PREV_MB))
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d (%s) is a step op", p->run_name, which,
                       i, table[op->kind].name);
    if (op->kind >= QT_OP_COUNT || !table[op->kind].step)
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d (kind %u) is not a step op",
                       p->run_name, which, i, op->kind);
    /* the kind's own check (qt_ops.def CHECK) and its role in the schedule (PROPS) */
    qt_check_state cs;
    memset(&cs, 0, sizeof cs);
    /* the step schedule's PREV_MB push is the last microbatch's: the microbatch schedule's
     * counts once per microbatch (qt_validate_mb_splits pairs them) */
    cs.pushed = !in_mb && (op->flags & QT_OPF_PREV_MB) ? NULL : qt_val.pushed;
    const int bad = table[op->kind].check && table[op->kind].check(p, op, &cs);
    if (table[op->kind].props & QT_OPP_NORM) (*n_norm)++;
    if (table[op->kind].props & QT_OPP_UPDATE) (*n_update)++;
    if (bad)
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d (%s) does not fit this plan (%lld "
                       "leaves, %lld tokens per step, %d collectives)", p->run_name, which,
                       i, table[op->kind].name, (long long)leaves, (long long)tokens,
                       p->n_collectives);
    return QT_OK;
}

/* The split collectives of one schedule, fed op by op to qt_validate_split_op (the rules of
 * qt_validate_splits, qt_validate.h). */
typedef struct qt_split_walk {
    int64_t id[QT_MAX_IN_FLIGHT];
    int n, reduce;
} qt_split_walk;

_Static_assert((int)QT_A_GRAD_UNITS_range == (int)QT_A_GRAD_MB_UNITS_range &&
               (int)QT_A_GRAD_MB_UNITS_START_range == (int)QT_A_GRAD_MB_UNITS_range &&
               (int)QT_A_GRAD_MB_UNITS_WAIT_range == (int)QT_A_GRAD_MB_UNITS_range,
               "validate.c: the units ops name their range in the same attribute");

static int qt_validate_split_op(const qt_plan *p, qt_split_walk *w, const qt_op *op, int32_t i,
                                const char *which)
{
    const int k0 = op->kind;
    const int units = k0 == QT_OP_GRAD_MB_UNITS_START || k0 == QT_OP_GRAD_MB_UNITS_WAIT ||
                      k0 == QT_OP_GRAD_MB_UNITS || k0 == QT_OP_GRAD_UNITS;
    const int start = k0 == QT_OP_COLL_START || k0 == QT_OP_GRAD_MB_UNITS_START;
    const int wait = k0 == QT_OP_COLL_WAIT || k0 == QT_OP_GRAD_MB_UNITS_WAIT;
    if (!start && !wait && !units && k0 != QT_OP_COLLECTIVE) return QT_OK;
    /* a units exchange (split or blocking) is named by its range, -16 - range, apart from
     * the plan's collectives; it uses the comm scratch as a reduce-scatter does */
    int64_t c = units ? QT_A(op, GRAD_MB_UNITS, range) : QT_A(op, COLLECTIVE, coll);
    if (units) {
        if (c < 0 || c >= p->n_ranges) return QT_OK;  /* the op's own check names it */
        c = -16 - c;
    } else if (c < 0 || c >= p->n_collectives) {
        return QT_OK;
    }
    const int rs = units || p->collectives[c].kind == QT_COLL_REDUCE_SCATTER;
    int k = 0;
    while (k < w->n && w->id[k] != c) k++;
    const char *why = NULL;
    if (start && k < w->n) why = "is started again while in flight";
    else if (start && w->n == QT_MAX_IN_FLIGHT) why = "would exceed the collectives in flight";
    else if (rs && w->reduce && !wait) why = "is a reduce-scatter or units exchange beside one in flight";
    else if (wait && k == w->n) why = "is waited for without a start before it";
    else if (!start && !wait && k < w->n) why = "runs while its split form is in flight";
    if (why)
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d: %s %lld %s", p->run_name, which, i,
                       units ? "the units exchange of range" : "collective",
                       (long long)(units ? -16 - c : c), why);
    if (start) {
        w->id[w->n++] = c;
        w->reduce += rs;
    } else if (wait) {
        w->id[k] = w->id[--w->n];
        w->reduce -= rs;
    }
    return QT_OK;
}

static int qt_validate_split_end(const qt_plan *p, const qt_split_walk *w, const char *which)
{
    if (w->n == 0) return QT_OK;
    const int units = w->id[0] < 0;  /* -16 - range */
    return qt_fail(QT_E_PLAN, "plan %s: the %s schedule ends with %s %lld (and %d more) "
                   "started and never waited for", p->run_name, which,
                   units ? "the units exchange of range" : "collective",
                   (long long)(units ? -16 - w->id[0] : w->id[0]), w->n - 1);
}

int qt_validate_splits(const qt_plan *p)
{
    if (p->comm_split_elems < 0 ||
        (p->comm_split_elems > 0 && p->comm_split_elems > p->comm_scratch_elems - 2))
        return qt_fail(QT_E_PLAN, "plan %s: %lld floats of the %lld-float comm scratch for the "
                       "split reduce-scatters (the blocking ones need 2 at least)", p->run_name,
                       (long long)p->comm_split_elems, (long long)p->comm_scratch_elems);
    /* the microbatch-end's starts stay in flight into the next microbatch's schedule and
     * the step's (the microbatch form's split reduce-scatter: their PREV_MB waits,
     * qt_validate_mb_splits) */
    qt_split_walk end = {{0}, 0, 0};
    int rc = QT_OK;
    for (int32_t i = 0; i < p->n_mbend_ops && !rc; i++)
        rc = qt_validate_split_op(p, &end, &p->mbend_ops[i], i, "microbatch-end");
    qt_split_walk w = end;
    for (int32_t i = 0; i < p->n_step_ops && !rc; i++)
        rc = qt_validate_split_op(p, &w, &p->step_ops[i], i, "step");
    rc = rc ? rc : qt_validate_split_end(p, &w, "step");
    w = end;
    for (qt_mb_cursor c = qt_mb_begin(p); !rc && qt_mb_next(&c);)
        rc = qt_validate_split_op(p, &w, c.op, c.logical, "microbatch");
    return rc ? rc : qt_validate_split_end(p, &w, "microbatch");
}

/* The held-out eval's batch and forward (issue 33; qt_runtime_eval runs the microbatch schedule's
 * logical ops [0, eval_fwd_ops) alone, then nothing else): it must end with the cross
 * entropy (loss_seq: XENT, or XENT_MTP with the MTP head, whose loss_seq is the main
 * model's), hold no weight gradient and no step op but the parameter gathers and
 * their collectives (nothing pushed into a gradient tree or accumulated for the update),
 * and every split collective it starts is waited for inside it. */
static int qt_validate_eval(const qt_plan *p)
{
    const int64_t n = p->train.eval_fwd_ops;
    if (p->train.eval_interval <= 0) return QT_OK;
    /* the eval batch (issue 35): eval_batch >= 1 slots a sequence group; eval_global, when
     * set, the real sequences among the mesh's slots, filling the last group's partly */
    const int64_t R = qt_plan_seq_groups(p), per = p->train.eval_batch, ge = p->train.eval_global;
    if (per < 1 || ge < 0 || (ge > 0 && (ge > per * R || ge <= (per - 1) * R)))
        return qt_fail(QT_E_PLAN, "plan %s: eval batch of %lld slots a sequence group x %lld "
                       "groups with eval_global %lld: expected >= 1 slots and eval_global 0 "
                       "or one whose share of the groups is eval_batch", p->run_name,
                       (long long)per, (long long)R, (long long)ge);
    qt_split_walk w = {{0}, 0, 0};
    const qt_op *last = NULL;
    int rc = QT_OK;
    for (qt_mb_cursor c = qt_mb_begin(p); !rc && qt_mb_next(&c) && c.logical < n;) {
        const qt_op *op = c.op;
        const int k = op->kind;
        last = op;
        if ((op->flags & QT_OPF_WGRAD) ||
            (k < QT_OP_COUNT && qt_val.table[k].step && k != QT_OP_PARAM_GATHER &&
             k != QT_OP_COLLECTIVE && k != QT_OP_COLL_START && k != QT_OP_COLL_WAIT))
            return qt_fail(QT_E_PLAN, "plan %s: eval forward op %d (%s) is a weight gradient or "
                           "a step op: the forward-only eval cannot run it", p->run_name,
                           c.logical, k < QT_OP_COUNT ? qt_val.table[k].name : "?");
        rc = qt_validate_split_op(p, &w, op, c.logical, "eval forward");
    }
    if (rc) return rc;
    /* a pipeline stage before the last ends at its output boundary (pp_out, sent on) */
    const int to_loss = p->pipeline_stages <= 1 || p->pp_stage == p->pipeline_stages - 1;
    if (n < 1 || !last ||
        (to_loss && last->kind != QT_OP_XENT && last->kind != QT_OP_XENT_MTP))
        return qt_fail(QT_E_PLAN, "plan %s: the eval forward (microbatch ops 0..%lld) does not "
                       "end with the cross entropy", p->run_name, (long long)n - 1);
    return qt_validate_split_end(p, &w, "eval forward");
}

/* The step schedule: every op a STEP kind; the gradient totals over exactly this step's
 * leaves, the normalisation by exactly the global target-token count, one update, and every
 * collective inside the arena with blocks its group can split evenly; the microbatch-end
 * schedule likewise (present exactly when the plan has a microbatch tree). */
static int qt_validate_step(const qt_plan *p)
{
    int n_update = 0, n_norm = 0, mb_norm = 0, mb_update = 0;
    if (p->n_step_ops < 1 || !p->step_ops)
        return qt_fail(QT_E_PLAN, "plan %s: empty step schedule", p->run_name);
    if (p->n_mbend_ops > 0 && (!p->mbend_ops || !p->n_mb_levels))
        return qt_fail(QT_E_PLAN, "plan %s: a microbatch-end schedule (%d ops) without a "
                       "microbatch tree", p->run_name, p->n_mbend_ops);
    if (p->n_ranges > QT_VAL_MAX_RANGES)
        return qt_fail(QT_E_PLAN, "plan %s: %d flat ranges (firmware limit %d)", p->run_name,
                       p->n_ranges, QT_VAL_MAX_RANGES);
    /* scan_layers: the scanned blocks lie inside the schedule, in order, and unroll to
     * n_mb_logical ops (every walk below goes through qt_mb_cursor) */
    if (p->n_scans < 0 || p->n_scans > QT_MAX_SCANS || (p->n_scans && !p->scans))
        return qt_fail(QT_E_PLAN, "plan %s: %d scanned blocks (0..%d)", p->run_name, p->n_scans,
                       QT_MAX_SCANS);
    int64_t logical = p->n_mb_ops;
    for (int32_t k = 0, end = 0; k < p->n_scans; k++) {
        const qt_scan *sc = &p->scans[k];
        if (sc->lo < end || sc->n < 1 || sc->lo > p->n_mb_ops - sc->n || sc->count < 1 ||
            !sc->stride)
            return qt_fail(QT_E_PLAN, "plan %s: scanned block %d (ops %d, +%d, %d runs) is not "
                           "inside the %d-op schedule after the previous one", p->run_name,
                           (int)k, sc->lo, sc->n, sc->count, p->n_mb_ops);
        end = sc->lo + sc->n;
        logical += (int64_t)sc->n * (sc->count - 1);
    }
    if (p->n_scans && logical != p->n_mb_logical)
        return qt_fail(QT_E_PLAN, "plan %s: the scanned schedule unrolls to %lld ops, the plan "
                       "says %d", p->run_name, (long long)logical, p->n_mb_logical);
    memset(qt_val.pushed, 0, sizeof qt_val.pushed);
    int rc = QT_OK;
    for (int32_t i = 0; i < p->n_step_ops && !rc; i++)
        rc = qt_validate_step_op(p, &p->step_ops[i], i, "step", 0, &n_norm, &n_update);
    /* a circular pipeline stage's microbatch-end schedule is cut per repeat chunk by
     * PP_CHUNK markers (their order: qt_pp_chunks, at qt_validate_pipeline) */
    for (int32_t i = 0; i < p->n_mbend_ops && !rc; i++)
        if (p->mbend_ops[i].kind != QT_OP_PP_CHUNK || p->pp_repeats <= 1)
            rc = qt_validate_step_op(p, &p->mbend_ops[i], i, "microbatch-end", 0, &mb_norm,
                                     &mb_update);
    for (qt_mb_cursor c = qt_mb_begin(p); !rc && qt_mb_next(&c);)
        rc = qt_validate_step_op(p, c.op, c.logical, "microbatch", 1, &mb_norm, &mb_update);
    rc = rc ? rc : qt_validate_mb_splits(p, qt_val.table);
    rc = rc ? rc : qt_validate_splits(p);
    rc = rc ? rc : qt_validate_ep_splits(p);
    rc = rc ? rc : qt_validate_eval(p);
    if (rc) return rc;
    /* a microbatch tree receives every range exactly once per microbatch */
    for (int32_t r = 0; r < p->n_ranges; r++)
        if (qt_val.pushed[r] != (p->n_mb_levels > 0))
            return qt_fail(QT_E_PLAN, "plan %s: flat range %d is pushed into the microbatch tree "
                           "%u times per microbatch (%d microbatch-tree levels)", p->run_name,
                           (int)r, qt_val.pushed[r], p->n_mb_levels);
    if (mb_norm || mb_update)
        return qt_fail(QT_E_PLAN, "plan %s: the microbatch schedules normalise or update",
                       p->run_name);
    if (n_update != 1 || n_norm != 1)
        return qt_fail(QT_E_PLAN, "plan %s: the step schedule must normalise the gradient once "
                       "and update once (found %d and %d)", p->run_name, n_norm, n_update);
    return QT_OK;
}

/* The boundary messages one stage sends per microbatch and repeat, the most over the
 * stages: a middle stage's activation and gradient (2), with the lb sums 3; with the MTP
 * head stage 0's activation, its lb sums and the head's D embeddings, the last stage's
 * gradient and the D embeddings' gradients. */
static int64_t qt_pp_sends_per_microbatch(const qt_plan *p)
{
    const int64_t lb = p->lb_seq != QT_NONE, first = 1 + lb + p->mtp_layers;
    return first > 2 + lb ? first : 2 + lb;
}

/* With the MTP head: stage 0 has the head's embeddings to send and their gradient's seed,
 * the last stage their input and gradient, both their slots (D boundaries a microbatch: M
 * sends in flight, and on the last stage M received); 1 without the head. */
static int qt_pp_mtp_tables_ok(const qt_plan *p)
{
    if (p->mtp_layers <= 0) return 1;
    const int first = p->pp_stage == 0, last = p->pp_stage == p->pipeline_stages - 1;
    const int64_t nb = p->pp_slots != QT_NONE ? p->tensors[p->pp_slots].shape[1] : 0;
    const int32_t ids[] = {p->pp_mtp_out, p->pp_mtp_dout, p->pp_mtp_in, p->pp_mtp_din};
    for (int k = 0; k < 4; k++) {
        const int want = k < 2 ? first : last;
        if ((ids[k] != QT_NONE) != want) return 0;
        if (want && (ids[k] < 0 || ids[k] >= p->n_tensors ||
                     p->tensors[ids[k]].numel != p->mtp_layers * nb))
            return 0;
    }
    if (!first && !last) return 1;
    if (p->pp_mtp_slots < 0 || p->pp_mtp_slots >= p->n_tensors) return 0;
    const qt_tensor *t = &p->tensors[p->pp_mtp_slots];
    return t->shape[0] == (last ? 2 : 1) * p->pp_micro && t->shape[1] == p->mtp_layers * nb;
}

/* A circular stage's chunk runs (the driver runs each chunk's forward alone, and at B its
 * forward and backward: runtime/pipeline.c): every split collective the forward or the
 * backward starts is waited for inside it (the per-layer gathers and reduce-scatters of
 * collective_overlap: configgen moves none across a chunk's edge, schedule/overlap.c),
 * and each part of the microbatch-end schedule likewise. */
static int qt_validate_chunk_splits(const qt_plan *p, const qt_pp_chunk *c, int R)
{
    int rc = QT_OK;
    for (int r = 0; r < R && R > 1 && !rc; r++) {
        char which[64];
        for (int bwd = 0; bwd < 2 && !rc; bwd++) { /* the forward runs alone at F */
            const int64_t lo = bwd ? c[r].b0 : c[r].f0, hi = bwd ? c[r].b1 : c[r].f1;
            snprintf(which, sizeof which, "pipeline chunk %d's %s", r,
                     bwd ? "backward" : "forward");
            qt_split_walk w = {{0}, 0, 0};
            for (qt_mb_cursor k = qt_mb_begin(p); !rc && qt_mb_next(&k);)
                if (k.logical >= lo && k.logical < hi)
                    rc = qt_validate_split_op(p, &w, k.op, k.logical, which);
            rc = rc ? rc : qt_validate_split_end(p, &w, which);
        }
        snprintf(which, sizeof which, "pipeline chunk %d's microbatch end", r);
        qt_split_walk e = {{0}, 0, 0};
        for (int32_t i = c[r].e0; i < c[r].e1 && !rc; i++)
            rc = qt_validate_split_op(p, &e, &p->mbend_ops[i], i, which);
        rc = rc ? rc : qt_validate_split_end(p, &e, which);
    }
    return rc;
}

int qt_validate_pipeline(const qt_plan *p)
{
    if (p->pipeline_stages <= 1) return QT_OK;
    /* what the pipeline driver runs today (runtime/pipeline.c): stages of any one-slice mesh
     * (their collectives over the stage's ranks, qt_comm_mesh_set_base; with repeats too, in
     * every gradient form: qt_validate_chunk_splits), gpipe with circular repeats, 1f1b
     * with one or (Megatron's interleaved) with several, fp32 or bf16, the load-balance and z losses, token
     * dropping, packing, scanned layers, the held-out eval, the MTP head (with repeats too);
     * anything else is named by its key */
    const char *what = NULL;
    int64_t per = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) per *= p->mesh[a];
    if (p->pipeline_stages > QT_PP_MAX_STAGES)
        what = "more than 64 stages (ici_pipeline_parallelism x dcn_pipeline_parallelism)";
    else if (p->n_ranks != p->pipeline_stages * per)
        what = "a stage mesh that does not hold n_ranks / stages ranks";
    else if (qt_mesh_slices(p->dcn) > 1)
        what = "dcn_*_parallelism (several slices) inside a stage";
    else if (p->pp_repeats > QT_PP_MAX_REPEATS)
        what = "num_pipeline_repeats above 64";
    else if (p->pp_repeats > 1 && p->pp_schedule == 1 && p->pp_micro % p->pipeline_stages)
        what = "pipeline_schedule=1f1b with repeats and num_pipeline_microbatches not a "
               "multiple of the stages (Megatron's interleaved schedule walks groups of S "
               "microbatches; a hand-made plan: configgen refuses it)";
    else if (qt_pp_sends_per_microbatch(p) * (int64_t)p->pp_micro
                 * (p->pp_repeats > 1 ? p->pp_repeats : 1) >= QT_COMM_P2P_MAX)
        what = "more than 255 boundary messages sent per accumulation group (2 x "
               "num_pipeline_microbatches x num_pipeline_repeats, 3 x with "
               "load_balance_loss_weight > 0: the lb sums, (1 + mtp_num_layers) x on stage 0 "
               "with the MTP head (+ 1 with the lb sums); one request stays for the "
               "receive posted ahead)";
    else if (p->pp_slots == QT_NONE || p->pp_stage < 0 || p->pp_stage >= p->pipeline_stages ||
             !qt_pp_mtp_tables_ok(p))
        what = "stage tables without their boundaries (a plan from an older configgen)";
    int R;
    if (!what) {
        const qt_pp_chunk *c = qt_pp_chunks(p, &R);
        return c ? qt_validate_chunk_splits(p, c, R) : QT_E_PLAN;
    }
    return qt_fail(QT_E_PLAN, "plan %s has %d pipeline stages: pipeline plans with %s are not "
                   "executed yet (docs/pipeline.md: gpipe or 1f1b, each with circular "
                   "repeats or without); generate the run without it, or with pipeline "
                   "parallelism 1",
                   p->run_name, p->pipeline_stages, what);
}

int qt_validate_plan(const qt_plan *p, const qt_run_opts *o, const qt_kernel_entry *table)
{
    qt_val.table = table;
    if (qt_validate_pipeline(p) != QT_OK) return QT_E_PLAN;
    int32_t ranks = o->n_ranks > 0 ? o->n_ranks : 1;
    if (ranks != p->n_ranks) {
        return qt_fail(QT_E_PLAN,
                       "plan %s was generated for %d rank%s, but this process was started "
                       "with %d rank%s", p->run_name, p->n_ranks, p->n_ranks == 1 ? "" : "s",
                       ranks, ranks == 1 ? "" : "s");
    }
    if (o->rank < 0 || o->rank >= ranks) {
        return qt_fail(QT_E_PLAN, "plan %s: rank %d outside [0, %d)", p->run_name, o->rank, ranks);
    }
    uint64_t h = qt_plan_hash(p);
    if (p->hash == 0 || h != p->hash) {
        return qt_fail(QT_E_PLAN, "plan %s: the tables hash to 0x%016llx but carry 0x%016llx: "
                       "generated/%s/plan.c was edited or is stale (make gen regenerates it)",
                       p->run_name, (unsigned long long)h, (unsigned long long)p->hash,
                       p->run_name);
    }
    int rc0 = qt_validate_bf16(p, table);
    if (rc0) return rc0;
    const qt_train_cfg *tc = &p->train;
    /* token blocks: any count on one rank (its tree takes any), else a multiple of the
     * context degree C by a power of two (each rank's share a node of that tree) */
    const int64_t nbt = qt_plan_blocks(p), C = qt_plan_context(p), share = nbt / C;
    if (tc->micro_batch < 1 || tc->seq_len < 1 || tc->grad_accum < 1 ||
        tc->global_batch < tc->micro_batch * tc->grad_accum || p->context_blocks < 0 ||
        tc->seq_len % nbt || nbt < C || nbt % C || (C > 1 && (share & (share - 1))) ||
        tc->micro_batch * nbt % C) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: bad batch micro_batch=%lld seq_len=%lld grad_accum=%lld "
                       "global_batch=%lld context_blocks=%d", p->run_name,
                       (long long)tc->micro_batch, (long long)tc->seq_len,
                       (long long)tc->grad_accum, (long long)tc->global_batch,
                       p->context_blocks);
    }
    /* a padded batch (issue 35): global_batch real sequences fill fewer than the slots;
     * never with pipeline stages or expert parallelism (their exchanges and expert groups'
     * leaves would mix a padded sequence in: configgen refuses them, as MaxText) */
    const int64_t slots = tc->micro_batch * tc->grad_accum * qt_plan_seq_groups(p);
    if (tc->global_batch > slots ||
        (tc->global_batch < slots &&
         (p->pipeline_stages > 1 || p->mesh[QT_MESH_EXPERT] > 1 || tc->global_batch < 1)))
        return qt_fail(QT_E_PLAN, "plan %s: global_batch=%lld sequences in %lld slots "
                       "(micro_batch x grad_accum x sequence groups): expected at most the "
                       "slots, fewer (padded) only without pipeline stages and expert "
                       "parallelism", p->run_name, (long long)tc->global_batch,
                       (long long)slots);
    int64_t rows = tc->micro_batch * qt_plan_tokens_per_seq(p);
    int rc = qt_validate_io_tensor(p, p->tokens, "tokens", QT_I32, rows);
    if (!rc) rc = qt_validate_io_tensor(p, p->targets, "targets", QT_I32, rows);
    if (!rc) rc = qt_validate_io_tensor(p, p->loss_seq, "loss_seq", QT_F32,
                                          qt_plan_leaves_per_mb(p));
    if (!rc && p->lb_seq != QT_NONE)
        rc = qt_validate_io_tensor(p, p->lb_seq, "lb_seq", QT_F32, tc->micro_batch);
    if (!rc && p->mtp_layers > 0) { /* the MTP head's inputs, targets and loss sums */
        const int64_t n = 1 + p->mtp_layers;
        if (p->mtp_layers >= tc->seq_len || !(p->mtp_factor >= 0.0f))
            return qt_fail(QT_E_PLAN, "plan %s: bad MTP head: %d depths, factor %g, seq_len "
                           "%lld", p->run_name, p->mtp_layers, (double)p->mtp_factor,
                           (long long)tc->seq_len);
        rc = qt_validate_io_tensor(p, p->mtp_tokens, "mtp_tokens", QT_I32, rows * n);
        if (!rc && p->packing) /* the runtime's gradient scale (packed documents) */
            rc = qt_validate_io_tensor(p, p->mtp_scale, "mtp_scale", QT_F32, 1);
        if (!rc) rc = qt_validate_io_tensor(p, p->mtp_targets, "mtp_targets", QT_I32, rows * n);
        if (!rc) rc = qt_validate_io_tensor(p, p->mtp_loss_seq, "mtp_loss_seq", QT_F32,
                                              qt_plan_leaves_per_mb(p));
    }
    for (int32_t i = 0; !rc && tc->z_loss != 0.0f && i < p->n_mb_ops; i++)
        if (p->mb_ops[i].kind == QT_OP_XENT) /* the z-loss's sums (issue 33) */
            rc = qt_validate_io_tensor(p, QT_T(&p->mb_ops[i], XENT, z_seq), "z_seq", QT_F32,
                                       qt_plan_leaves_per_mb(p));
    if (!rc && qt_plan_drops(p))
        rc = qt_validate_io_tensor(p, p->moe_drops, "moe_drops", QT_I32,
                                   tc->micro_batch * (p->model.n_layers + p->mtp_layers));
    if (!rc) rc = qt_validate_regions(p);
    if (rc) return rc;
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_param *pa = &p->params[i];
        if (pa->tensor < 0 || pa->tensor >= p->n_tensors || pa->flat_offset < 0 ||
            pa->numel < 0 || pa->flat_offset + pa->numel > p->n_param_elems ||
            p->tensors[pa->tensor].numel != pa->numel || pa->init >= QT_INIT_COUNT) {
            return qt_fail(QT_E_PLAN,
                           "plan %s: parameter %s (tensor %d, flat offset %lld, numel %lld, "
                           "init %u) does not fit the flat region of %lld elements", p->run_name,
                           pa->name, pa->tensor, (long long)pa->flat_offset, (long long)pa->numel,
                           pa->init, (long long)p->n_param_elems);
        }
    }
    return qt_validate_step(p);
}
