/* config/moe.c - the MoE form keys: sparse_matmul, capacity_factor, ragged_buffer_factor
 * (issue 32; docs/config.md "MoE form"), with MaxText's meaning (src/maxtext/layers/moe.py
 * RoutedMoE: dense_matmul / generate_masks; ../shared/research/maxtext-recipe.md section 1).
 *
 * Invariants of what it resolves into qt_cg_settings:
 *  - moe_capacity = C = int(max(ceil(S*k/E) * cf, cf)) (S = max_target_length, ceil before
 *    x cf, int() truncating) when sparse_matmul is false and cf > 0, else 0 (dropless); a
 *    C of 0 (cf > 0 below 1 / ceil(S*k/E)) is MaxText's too: moe_capacity stays 0 and
 *    moe_drop_all is set (plan field moe_drop_all): every routed assignment drops, the
 *    routed experts add nothing, the residual, the shared expert and the load-balance term
 *    remain, and every assignment counts as dropped;
 *  - sparse_matmul false with cf <= 0 is dropless: the plan is the sparse one (same sums,
 *    same bits); sparse_matmul true ignores capacity_factor, as MaxText, with a note;
 *  - ragged_buffer_factor r > 0 with sparse_matmul true and an expert axis Ep > 1:
 *    ragged_factor = r, the expert hosts' receive buffers drop the rows past int(T k r)
 *    (model/graph.c MOE_RAGGED, MaxText's rule), so the bits depend on the expert degree
 *    (plan.txt says so); Ep 1 or sparse_matmul false: ignored with a note (MaxText has no
 *    buffer there), ragged_factor -1; refused with a context axis (qtrain's expert group
 *    then spans the context ranks).
 * Messages name the key, its value and where it was set ("key=value (where): ...").
 * Uses core and config only.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

/* MaxText's capacity (generate_masks): ceil(S*k/E) assignments per expert on average,
 * times cf, at least cf, truncated. */
static int64_t moe_capacity_of(int64_t S, int64_t k, int64_t E, double cf)
{
    const double avg = (double)((S * k + E - 1) / E) * cf;
    return (int64_t)(avg > cf ? avg : cf);
}

/* ragged_buffer_factor r > 0 with sparse_matmul (MaxText's sparse path, get_ragged_buffer_size
 * and _truncate_matrix): on an expert group of Ep > 1 ranks a host's receive buffer holds
 * int(local_batch x k x r) rows and the rows past it drop (model/graph.c moe_ragged); on one
 * expert rank MaxText exchanges nothing and drops nothing. capacity_factor is ignored, as
 * on the sparse path. */
static int moe_ragged_rules(qt_cg_settings *s, double rb, double cf)
{
    const int32_t ep = s->mesh[QT_MESH_EXPERT], cp = s->mesh[QT_MESH_CONTEXT];
    const char *cfn = cf > 0 ? "; capacity_factor is ignored (dense form only)" : "";
    if (ep <= 1) {
        snprintf(s->moe_note, sizeof s->moe_note, "ragged_buffer_factor=%g: no expert "
                 "parallelism (ici/dcn_expert_parallelism 1), so no receive buffer and "
                 "nothing drops, as in MaxText: dropless%s", rb, cfn);
        return 0;
    }
    /* with a context axis the experts are replicated over context (expert_ctx_rep,
     * config/settings.c): each context index exchanges over the expert axis, MaxText's
     * buffer, whatever expert x context does for num_experts */
    if (cp > 1) s->expert_ctx_rep = 1;
    s->ragged_factor = rb;
    snprintf(s->moe_note, sizeof s->moe_note, "ragged_buffer_factor=%g: each expert host's "
             "receive buffer holds int(T x k x %g) rows a microbatch (T a rank's tokens) and "
             "drops the rows past it, in the order source rank, expert, token (MaxText's "
             "sparse path%s): the bits depend on the expert degree%s", rb, rb,
             cp > 1 ? "; with context parallelism per context index, over the expert axis, "
                      "the experts replicated over context" : "", cfn);
    return 0;
}

int qt_cg_moe_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    const double cf = qt_cg_rule_f(c, "capacity_factor"),
                 rb = qt_cg_rule_f(c, "ragged_buffer_factor");
    const int sparse = !strcmp(qt_cg_rule_key(c, "sparse_matmul")->val->s, "true");
    const int64_t S = s->tr.seq_len, k = s->m.top_k, E = s->m.n_experts;
    if (!isfinite(cf))
        return qt_cg_rule_bad(c, err, errlen, "capacity_factor",
                              "not a finite number; expected "
                              "<= 0 (dropless) or > 0 (the dense form's capacity factor)");
    if (!isfinite(rb))
        return qt_cg_rule_bad(c, err, errlen, "ragged_buffer_factor",
                              "not a finite number; expected <= 0 (-1: dropless) or > 0 (the "
                              "expert hosts' receive buffer, local_batch x k x factor rows)");
    s->moe_dense = !sparse;
    s->capacity_factor = cf;
    s->moe_capacity = 0;
    s->moe_drop_all = 0;
    s->ragged_factor = -1.0;
    s->moe_note[0] = 0;
    if (sparse) {
        if (rb > 0) return moe_ragged_rules(s, rb, cf);
        if (cf > 0)
            snprintf(s->moe_note, sizeof s->moe_note, "capacity_factor=%g is ignored with "
                     "sparse_matmul=true (MaxText applies it in the dense form only): "
                     "dropless", cf);
        return 0;
    }
    if (!(cf > 0)) {
        snprintf(s->moe_note, sizeof s->moe_note, "sparse_matmul=false, capacity_factor=%g "
                 "(<= 0): dropless, computed by the sparse kernels (the same sums as "
                 "MaxText's dense form, the bits of sparse_matmul=true)%s", cf,
                 rb > 0 ? "; ragged_buffer_factor is ignored (sparse form only)" : "");
        return 0;
    }
    const int64_t C = moe_capacity_of(S, k, E, cf), avg = (S * k + E - 1) / E;
    s->moe_capacity = C;
    if (C < 1) {
        s->moe_drop_all = 1;
        snprintf(s->moe_note, sizeof s->moe_note,
                 "sparse_matmul=false, capacity_factor=%g: capacity C = int(max(ceil(%lld x "
                 "%lld / %lld) x %g, %g)) = 0: every routed assignment drops (MaxText's "
                 "generate_masks with C = 0); the residual, shared expert and load-balance "
                 "term remain (capacity_factor >= %.6g keeps some)",
                 cf, (long long)S, (long long)k, (long long)E, cf, cf, 1.0 / (double)avg);
        return 0;
    }
    snprintf(s->moe_note, sizeof s->moe_note,
             "sparse_matmul=false, capacity_factor=%g: "
             "capacity C = int(max(ceil(%lld x %lld / %lld) x %g, %g)) = %lld assignments per "
             "expert and sequence of %lld tokens%s",
             cf, (long long)S, (long long)k, (long long)E, cf, cf, (long long)C, (long long)S,
             C >= S ? " (C >= S: no assignment can drop)" : "");
    return 0;
}
