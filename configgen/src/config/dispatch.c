/* config/dispatch.c - the expert dispatch key (qtrain's own): expert_dispatch, auto
 * (default), whole or rounds (issue 35; docs/context.md "Expert dispatch in rounds"), into
 * qt_cg_settings.expert_dispatch, expert_round_rows and expert_rounds_auto.
 *
 * whole: the expert-parallel exchange of MOE_DISPATCH_FWD .. MOE_DISPATCH_BWD, its host
 * buffers sized for the dropless worst case (every plan as before: nothing here changes a
 * plan that does not set rounds). rounds: MOE_ROUNDS_FWD / BWD / WGRAD, host buffers of
 * R = expert_chunk_rows rows, the same bits. auto: whole, and when the whole plan is over
 * the device budget and rounds are possible (the conditions below), the driver plans rounds
 * of max(expert_chunk_rows, a leaf's worst case) rows instead (driver/pipeline.c; a pipeline
 * plan: on every stage when its largest stage-local tables are over); a plan without a
 * budget, or that fits, is whole. Invariants of a rounds plan, each refused with
 * the key, its value, where it was set and what was expected: an expert group of more than
 * one rank (expert axis > 1), at most 1024
 * members and 65536 leaves (the firmware's tables), and R at least a leaf's worst case on
 * one host (leaf tokens x min(k, experts per rank) rows), since rounds cut between leaves
 * only (a leaf's weight gradient runs over its rows whole, in order). bf16 plans and
 * tensor parallelism take rounds too (the round ops' native bf16 form and their per-round
 * sum over the tensor group, ops_ep_rounds.c: the whole dispatch's bits), set or picked by
 * auto; auto changes only plans whose whole dispatch is over the budget, which configgen
 * refused before, so no plan that was written changes. With the routed experts replicated
 * over context (expert_ctx_rep, config/settings.c and moe.c) the exchange group is the
 * expert axis within a context index (qt_cg_expert_group: M = the expert degree, E / M
 * experts a rank), rounds and auto alike (refused before session 17's follow-up; no plan
 * that was written changes).
 * Runs after the model, train and mesh settings (settings.c). Uses core and config only.
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

int qt_cg_dispatch_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    static const char key[] = "expert_dispatch";
    const char *v = qt_cg_rule_key(c, key)->val->s;
    char other[512];
    s->expert_dispatch = QT_CG_DISPATCH_WHOLE;
    s->expert_rounds_auto = 0;
    s->expert_round_rows = 0;
    const int au = !strcmp(v, "auto");
    if (!strcmp(v, "whole")) return 0;
    if (!au && strcmp(v, "rounds"))
        return qt_cg_rule_bad(c, err, errlen, key, "expected auto, whole or rounds");
    /* the exchange group (core/qt_cg.h qt_cg_expert_group): expert x context, or the expert
     * axis alone within a context index with the experts replicated over context
     * (expert_ctx_rep); either way a member holds micro_batch x blocks / context leaves */
    const int64_t ep = s->mesh[QT_MESH_EXPERT], cx = qt_cg_context(s), M = qt_cg_expert_group(s);
    if (au && ep < 2) return 0;
    if (ep < 2)
        return qt_cg_rule_bad(c, err, errlen, key, "rounds without expert parallelism (%s): "
                              "only an expert group's hosts receive routed rows; expected whole "
                              "or ici_expert_parallelism > 1",
                              qt_cg_rule_other(c, "ici_expert_parallelism", other, sizeof other));
    const int64_t E = s->m.n_experts, k = s->m.top_k, El = E / M;
    const int64_t leaves = M * s->tr.micro_batch * qt_cg_blocks(s) / cx;
    const int64_t lt = qt_cg_leaf_tokens(s), worst = lt * (k < El ? k : El);
    if (au && (M > 1024 || leaves > 65536)) return 0;
    if (M > 1024 || leaves > 65536)
        return qt_cg_rule_bad(c, err, errlen, key, "rounds over an expert group of %lld ranks "
                              "with %lld leaves: the firmware's round tables hold at most 1024 "
                              "ranks and 65536 leaves; expected whole",
                              (long long)M, (long long)leaves);
    const int64_t R = qt_cg_expert_chunk(s);
    if (au) {
        s->expert_rounds_auto = 1;
        s->expert_round_rows = R > worst ? R : worst;
        return 0;
    }
    if (R < worst)
        return qt_cg_rule_bad(c, err, errlen, key, "rounds of %s rows: a leaf (%lld tokens) "
                              "can bring %lld rows to one host (tokens x min(k %lld, experts "
                              "per rank %lld)) and rounds cut between leaves only; expected "
                              "expert_chunk_rows >= %lld",
                              qt_cg_rule_other(c, "expert_chunk_rows", other, sizeof other),
                              (long long)lt, (long long)worst, (long long)k, (long long)El,
                              (long long)worst);
    s->expert_dispatch = QT_CG_DISPATCH_ROUNDS;
    s->expert_round_rows = R;
    return 0;
}
