/* config/train_rules.c - the rules of the schedule, objective and evaluation keys (issue
 * 33): lr_schedule_type (cosine | wsd) with wsd_decay_steps_fraction and wsd_decay_style,
 * z_loss_multiplier, and the held-out evaluation keys eval_interval, eval_steps,
 * eval_start_step, eval_per_device_batch_size, target_eval_loss (MaxText's names and
 * meanings, ../shared/research/maxtext-recipe.md sections 3 and 4).
 *
 * Invariants of what it resolves into qt_cg_settings.tr (runs after settings.c's batch split,
 * so micro_batch, grad_accum and schedule_steps are known): lr_schedule 0 (cosine) leaves
 * every appended field 0, so a cosine plan is the plan it was; with wsd, wsd_warmup =
 * int(L x warmup_steps_fraction) and wsd_decay = int(L x wsd_decay_steps_fraction) are taken
 * in double from the config text, as MaxText does, and warmup + decay fractions are <= 1;
 * eval_interval > 0 only when evaluation is on (the other eval keys set without it are
 * ignored with a note, s->ignored, as MaxText ignores them), then the eval batch's sequences
 * over the mesh, E = eval_per_device_batch_size (or per_device_batch_size) x num_ranks
 * truncated (MaxText's int(devices x eval_pdbs), issue 35), are >= 1, eval_batch =
 * ceil(E / the sequence groups) >= 1 slots per group (any number: the eval runs
 * ceil(eval_batch / micro_batch) microbatch forwards, slots past the real sequences masked)
 * and eval_global = E when E is not eval_batch x the groups, else 0; eval_steps is -1 or
 * >= 1; eval_fwd_ops is filled from the graph later (qt_cg_train_view); z_loss is 0 or a
 * finite multiplier > 0, in any dtype, with the plain or the blocked / vocab-parallel cross
 * entropy (kernels/xent.h; with the MTP head on the main logits only, MaxText's rule). Each
 * refusal names the key, its value, where it was set and what was expected.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

/* 1 if the user set key (its value does not come from base.yml). */
static int tr_set(const qt_cg_config *c, const char *key)
{
    const char *w = qt_cg_rule_key(c, key)->where, *b = c->base.file;
    return !(b && !strncmp(w, b, strlen(b)) && w[strlen(b)] == ':');
}

static int tr_schedule(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    qt_train_cfg *t = &s->tr;
    const char *type = qt_cg_rule_key(c, "lr_schedule_type")->val->s;
    const char *style = qt_cg_rule_key(c, "wsd_decay_style")->val->s;
    const double wf = qt_cg_rule_f(c, "warmup_steps_fraction"),
                 df = qt_cg_rule_f(c, "wsd_decay_steps_fraction");
    if (!(df >= 0 && df <= 1))
        return qt_cg_rule_bad(c, err, errlen, "wsd_decay_steps_fraction", "expected 0 <= f <= 1");
    if (strcmp(style, "linear") && strcmp(style, "cosine"))
        return qt_cg_rule_bad(c, err, errlen, "wsd_decay_style", "expected linear or cosine");
    if (!strcmp(type, "cosine"))
        return 0;
    if (strcmp(type, "wsd"))
        return qt_cg_rule_bad(
            c, err, errlen, "lr_schedule_type",
            "expected cosine (linear warmup + "
            "cosine decay) or wsd (warmup, stable, decay), MaxText's two schedules");
    if (wf + df > 1.0)
        return qt_cg_rule_bad(
            c, err, errlen,
            tr_set(c, "wsd_decay_steps_fraction") ? "wsd_decay_steps_fraction"
                                                  : "warmup_steps_fraction",
            "warmup_steps_fraction + wsd_decay_steps_fraction = %g + %g = %g is over "
            "1: warmup and decay would not fit in the schedule's %lld steps; expected "
            "a sum <= 1",
            wf, df, wf + df, (long long)t->schedule_steps);
    t->lr_schedule = 1;
    t->wsd_cosine = !strcmp(style, "cosine");
    t->wsd_warmup = (int64_t)((double)t->schedule_steps * wf);
    t->wsd_decay = (int64_t)((double)t->schedule_steps * df);
    return 0;
}

static int tr_eval(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    qt_train_cfg *t = &s->tr;
    const double iv = qt_cg_rule_f(c, "eval_interval"), st = qt_cg_rule_f(c, "eval_steps");
    const double e0 = qt_cg_rule_f(c, "eval_start_step"),
                 eb = qt_cg_rule_f(c, "eval_per_device_batch_size");
    const double target = qt_cg_rule_f(c, "target_eval_loss");
    if (!(iv == -1 || (iv >= 1 && iv == floor(iv) && iv < 1e15)))
        return qt_cg_rule_bad(c, err, errlen, "eval_interval",
                              "expected -1 (no evaluation) or a "
                              "number of steps >= 1");
    if (!(st == -1 || (st >= 1 && st == floor(st) && st < 1e15)))
        return qt_cg_rule_bad(c, err, errlen, "eval_steps",
                              "expected -1 (the whole eval file) or a "
                              "number of eval batches >= 1");
    if (!(e0 >= 0 && e0 == floor(e0) && e0 < 1e15))
        return qt_cg_rule_bad(c, err, errlen, "eval_start_step", "expected a step >= 0");
    if (!(eb >= 0 && eb < 1e9))
        return qt_cg_rule_bad(c, err, errlen, "eval_per_device_batch_size",
                              "expected 0 (= "
                              "per_device_batch_size) or sequences per rank > 0");
    if (!(target >= 0))
        return qt_cg_rule_bad(c, err, errlen, "target_eval_loss", "expected 0 (off) or a loss > 0");
    if (iv == -1) {
        /* MaxText reads them only when it evaluates: set without eval_interval they are
         * ignored (a note, not a refusal: docs/refusals.md) */
        static const char *const need[] = {"eval_steps", "eval_start_step",
                                           "eval_per_device_batch_size", "target_eval_loss"};
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
            if (tr_set(c, need[i]))
                qt_cg_rule_ignored(c, s, need[i], "eval_interval is -1 (no evaluation), as in "
                                   "MaxText; set eval_interval to the steps between evals");
        return 0;
    }
    /* MaxText's global eval batch: int(devices x eval_pdbs) sequences (types.py
     * calculate_global_batch_sizes, L3458-3491; a pipeline's stages, tensor and context
     * ranks are devices too). A sequence group (the batch axes but context: tp x cp x S
     * ranks) takes ceil(E / groups) slots, the mesh's slots in group order hold sequences
     * 0 .. E-1 and the rest are padded: E need not split evenly, nor fill microbatches. E
     * is the double product truncated, exactly MaxText's int() (1.5 evaluates 1; 0.7 x 10
     * is 7.000000000000001, 7; 0.29 x 100 is 28.999999999999996, 28 in both), as the
     * training batch's count (qt_cg_group_batch). */
    const int32_t tp = s->mesh[QT_MESH_TENSOR], cp = s->mesh[QT_MESH_CONTEXT];
    const int32_t ps = s->pp_stages > 1 ? s->pp_stages : 1;
    const double epb = eb > 0 ? eb : s->per_device_batch, all = epb * (double)s->n_ranks;
    const double whole = floor(all);
    const int64_t groups = (int64_t)s->n_ranks / tp / cp / ps;
    if (whole < 1)
        return qt_cg_rule_bad(
            c, err, errlen, "eval_per_device_batch_size",
            "%g sequences per rank x num_ranks=%d = %.10g sequences per eval batch; expected "
            "a whole number >= 1 (MaxText evaluates int(devices x eval_per_device_batch_size)"
            " sequences, as qtrain: none here)",
            epb, (int)s->n_ranks, all);
    const int64_t E = (int64_t)whole, per = (E + groups - 1) / groups;
    t->eval_interval = (int64_t)iv;
    t->eval_steps = (int64_t)st;
    t->eval_start = (int64_t)e0;
    t->eval_batch = per;
    t->eval_global = E == per * groups ? 0 : E;
    t->target_eval_loss = (float)target;
    return 0;
}

double qt_cg_group_batch(double pdb, int32_t n_ranks, int32_t tp, int32_t cp, int32_t S,
                         int64_t *total)
{
    double b = pdb * (double)tp * (double)cp;
    if (S > 1) b *= (double)S;
    *total = 0;
    if (b >= 1 && b == floor(b)) return b;
    /* MaxText: micro_batch_to_train = int(num_devices * per_device_batch_size) (Python's
     * int() truncates the double product, as the cast here) */
    const double t = (double)n_ranks * pdb;
    const int64_t R = n_ranks / tp / cp / (S > 1 ? S : 1);
    if (!(t >= 1 && t < 9e15) || R < 1) return b;
    const int64_t n = (int64_t)t;
    if (n % R) return b;
    *total = n;
    return (double)(n / R);
}

int qt_cg_train_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    const double z = qt_cg_rule_f(c, "z_loss_multiplier");
    if (!(z >= 0.0 && z < 1e6))
        return qt_cg_rule_bad(c, err, errlen, "z_loss_multiplier",
                              "expected 0 (off) or a multiplier "
                              "> 0 (MaxText's z-loss: z x logsumexp^2 per target)");
    s->tr.z_loss = (float)z;
    return tr_schedule(c, s, err, errlen) || tr_eval(c, s, err, errlen) ? -1 : 0;
}
