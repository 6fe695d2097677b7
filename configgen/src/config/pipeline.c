/* config/pipeline.c - the pipeline-parallelism keys (issue 36; docs/pipeline.md, docs/config.md
 * "Pipeline"), with MaxText's names, defaults and derivations (base.yml L309-351, types.py
 * ~L3565-3625; ../shared/research/maxtext-recipe.md section 5), plus qtrain's
 * pipeline_schedule.
 *
 * Invariants of what it resolves into qt_cg_settings (only when S = pp_stages > 1; the mesh
 * sets S and pp_key):
 *  - pipeline_parallel_layers is -1 or base_num_decoder_layers: every decoder layer is
 *    pipelined (the hybrid decoders have no dense prefix to leave out, as DeepSeek's);
 *  - 1 <= pp_lps <= layers, 1 <= R <= layers (so no product below overflows); pp_repeats = R = layers / (S x Lps) when -1, and S x R x Lps = layers
 *    always (MaxText's assert), so stage s in repeat r holds layers (r*S+s)*Lps .. +Lps-1
 *    and every layer is held by exactly one (stage, repeat);
 *  - pp_micro = M = S when -1, M a multiple of S, and M divides B, the batch group's
 *    sequences per accumulation step (per_device_batch_size x tensor x context x S): each
 *    microbatch holds B / M whole sequences;
 *  - pp_schedule 0 gpipe (MaxText's, circular repeats) or 1 1f1b (Megatron's
 *    one-forward-one-backward: non-interleaved with R = 1, interleaved with R > 1, whose
 *    microbatch groups of S need M a multiple of S, the rule above for every schedule);
 *  - B x gradient_accumulation_steps leaves fit the gradient tree levels (the pipeline's
 *    microbatches are accumulation microbatches to a stage: the one-rank tree).
 * Messages name the key, its value and where it was set, and the other key of the rule with
 * its value and where ("key=value (where): ..."). Uses core and config only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

/* The key's value came from the user (run file, model file or command line), not base.yml. */
static int user_set(const qt_cg_config *c, const char *key)
{
    const char *w = qt_cg_rule_key(c, key)->where, *b = c->base.file;
    return !(b && !strncmp(w, b, strlen(b)) && w[strlen(b)] == ':');
}

static int64_t ival(const qt_cg_config *c, const char *key)
{
    return (int64_t)qt_cg_rule_f(c, key);
}

int qt_cg_pipeline_rules(const qt_cg_config *c, qt_cg_settings *s, double B, char *err,
                         size_t errlen)
{
    const char *KM = "num_pipeline_microbatches", *KL = "num_layers_per_pipeline_stage",
               *KR = "num_pipeline_repeats", *KP = "pipeline_parallel_layers",
               *KS = "pipeline_schedule", *KB = "per_device_batch_size",
               *KN = "base_num_decoder_layers", *pk = s->pp_key;
    const int64_t S = s->pp_stages, L = s->m.n_layers;
    char o[400], o2[400], o3[400];
    const int64_t pl = ival(c, KP), lps = ival(c, KL), rr = ival(c, KR), mm = ival(c, KM);
    if (pl != -1 && pl != L)
        return qt_cg_rule_bad(c, err, errlen, KP, "qtrain pipelines every decoder layer (the "
                              "hybrid decoders have no dense layers to leave outside the "
                              "pipeline); expected -1 or %s",
                              qt_cg_rule_other(c, KN, o, sizeof o));
    if (lps < 1 || lps > L)
        return qt_cg_rule_bad(c, err, errlen, KL, "expected 1 .. %lld layers per stage and "
                              "repeat (%s)", (long long)L, qt_cg_rule_other(c, KN, o, sizeof o));
    if (rr == -1) {
        if (L % (S * lps)) {
            const char *blame = user_set(c, KL) ? KL : pk, *oth = blame == KL ? pk : KL;
            return qt_cg_rule_bad(c, err, errlen, blame, "%lld stages x %lld layers per stage "
                                  "= %lld do not divide the %lld pipeline layers (%s; %s): "
                                  "num_pipeline_repeats -1 would be %lld / %lld; expected "
                                  "stages x num_layers_per_pipeline_stage dividing %lld",
                                  (long long)S, (long long)lps, (long long)(S * lps),
                                  (long long)L, qt_cg_rule_other(c, KN, o, sizeof o),
                                  qt_cg_rule_other(c, oth, o2, sizeof o2), (long long)L,
                                  (long long)(S * lps), (long long)L);
        }
        s->pp_repeats = (int32_t)(L / (S * lps));
    } else {
        if (rr < 1 || rr > L)
            return qt_cg_rule_bad(c, err, errlen, KR, "expected -1 (= pipeline layers / "
                                  "(stages x layers per stage)) or 1 .. %lld (%s)", (long long)L,
                                  qt_cg_rule_other(c, KN, o, sizeof o));
        if (S * rr * lps != L)
            return qt_cg_rule_bad(c, err, errlen, KR, "%lld stages (%s) x %lld repeats x %lld "
                                  "layers per stage (%s) = %lld, but the pipeline has %lld "
                                  "layers (%s); expected stages x repeats x layers per stage "
                                  "= the pipeline layers (MaxText's rule), e.g. -1",
                                  (long long)S, qt_cg_rule_other(c, pk, o, sizeof o),
                                  (long long)rr, (long long)lps,
                                  qt_cg_rule_other(c, KL, o2, sizeof o2),
                                  (long long)(S * rr * lps), (long long)L,
                                  qt_cg_rule_other(c, KN, o3, sizeof o3));
        s->pp_repeats = (int32_t)rr;
    }
    s->pp_lps = (int32_t)lps;
    const int64_t M = mm == -1 ? S : mm;
    if (mm != -1 && mm < 1)
        return qt_cg_rule_bad(c, err, errlen, KM, "expected -1 (= the stages) or >= 1");
    if (M % S)
        return qt_cg_rule_bad(c, err, errlen, KM, "%lld microbatches are not a multiple of the "
                              "%lld stages (%s); expected a multiple of them (MaxText's rule)",
                              (long long)M, (long long)S, qt_cg_rule_other(c, pk, o, sizeof o));
    if (!(B >= 1) || B != floor(B))
        return qt_cg_rule_bad(c, err, errlen, KB, "x tensor x context x %lld stages (%s) = %g "
                              "sequences per batch group and accumulation step; expected a "
                              "whole number >= 1", (long long)S,
                              qt_cg_rule_other(c, pk, o, sizeof o), B);
    const int64_t Bi = (int64_t)B;
    if (Bi % M)
        return qt_cg_rule_bad(c, err, errlen, user_set(c, KM) ? KM : KB,
                              "%lld microbatches do not divide the batch group's %lld sequences "
                              "per accumulation step (per_device_batch_size x tensor x context "
                              "x %lld stages; %s; %s); expected microbatches dividing the batch "
                              "(MaxText's rule)", (long long)M, (long long)Bi, (long long)S,
                              qt_cg_rule_other(c, user_set(c, KM) ? KB : KM, o, sizeof o),
                              qt_cg_rule_other(c, pk, o2, sizeof o2));
    const char *sched = qt_cg_rule_key(c, KS)->val->s;
    if (!strcmp(sched, "gpipe")) s->pp_schedule = 0;
    else if (!strcmp(sched, "1f1b")) s->pp_schedule = 1;
    else
        return qt_cg_rule_bad(c, err, errlen, KS, "unknown schedule; expected gpipe (MaxText's, "
                              "with circular repeats) or 1f1b (Megatron's one forward one "
                              "backward, interleaved with circular repeats)");
    int64_t leaves;
    if (__builtin_mul_overflow(Bi, s->tr.grad_accum, &leaves) ||
        leaves >= (1ll << (QT_MAX_TREE_LEVELS - 1)))
        return qt_cg_rule_bad(c, err, errlen, KB, "x %lld stages (%s) x "
                              "gradient_accumulation_steps %lld = %lld sequences per step and "
                              "batch group exceed the %lld that the %d gradient tree levels "
                              "hold", (long long)S, qt_cg_rule_other(c, pk, o, sizeof o),
                              (long long)s->tr.grad_accum, (long long)Bi * s->tr.grad_accum,
                              (1ll << (QT_MAX_TREE_LEVELS - 1)) - 1, QT_MAX_TREE_LEVELS);
    s->pp_micro = (int32_t)M;
    s->pp_batch = Bi;
    /* a stage's layers need not be whole layer cycles: the planning graphs stay unrolled;
     * the stage-local tables scan when a stage's layers are whole cycles
     * (driver/pipeline.c) */
    s->pp_scan = s->scan_layers;
    s->scan_layers = 0;
    return 0;
}
