/* config/moe.c - the MoE form keys: sparse_matmul, capacity_factor, ragged_buffer_factor
 * (issue 32; docs/config.md "MoE form"), with MaxText's meaning (src/maxtext/layers/moe.py
 * RoutedMoE: dense_matmul / generate_masks; ../shared/research/maxtext-recipe.md section 1).
 *
 * Invariants of what it resolves into qt_cg_settings:
 *  - moe_capacity = C = int(max(ceil(S*k/E) * cf, cf)) (S = max_target_length, ceil before
 *    x cf, int() truncating) when sparse_matmul is false and cf > 0, else 0 (dropless); a
 *    C of 0 is refused (every routed assignment would drop);
 *  - sparse_matmul false with cf <= 0 is dropless: the plan is the sparse one (same sums,
 *    same bits); sparse_matmul true ignores capacity_factor, as MaxText, with a note;
 *  - ragged_buffer_factor > 0 is refused: MaxText drops the rows past an expert-parallel
 *    receive buffer, so what drops would depend on the expert degree.
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
    if (!isfinite(rb) || rb > 0)
        return qt_cg_rule_bad(c, err, errlen, "ragged_buffer_factor",
                              "MaxText's sparse path drops "
                              "the routed rows past an expert-parallel receive buffer of "
                              "local_batch x k x ragged_buffer_factor rows, in the order of the "
                              "source shards, so which rows drop (and the results) would depend on "
                              "the expert degree; qtrain's results never do. Expected <= 0 (-1, "
                              "dropless), or token dropping per sequence with sparse_matmul=false "
                              "and capacity_factor > 0");
    s->moe_dense = !sparse;
    s->capacity_factor = cf;
    s->moe_capacity = 0;
    s->moe_note[0] = 0;
    if (sparse) {
        if (cf > 0)
            snprintf(s->moe_note, sizeof s->moe_note, "capacity_factor=%g is ignored with "
                     "sparse_matmul=true (MaxText applies it in the dense form only): "
                     "dropless", cf);
        return 0;
    }
    if (!(cf > 0)) {
        snprintf(s->moe_note, sizeof s->moe_note, "sparse_matmul=false, capacity_factor=%g "
                 "(<= 0): dropless, computed by the sparse kernels (the same sums as "
                 "MaxText's dense form, the bits of sparse_matmul=true)", cf);
        return 0;
    }
    const int64_t C = moe_capacity_of(S, k, E, cf), avg = (S * k + E - 1) / E;
    if (C < 1)
        return qt_cg_rule_bad(
            c, err, errlen, "capacity_factor",
            "capacity int(max(ceil(S*k/E) x cf, "
            "cf)) = int(max(%lld x %g, %g)) = 0 assignments per expert and sequence "
            "(S = max_target_length %lld, k = num_experts_per_tok %lld, E = "
            "num_experts %lld): every routed assignment would be dropped; expected "
            "capacity_factor >= %.6g, or <= 0 for dropless routing",
            (long long)avg, cf, cf, (long long)S, (long long)k, (long long)E, 1.0 / (double)avg);
    s->moe_capacity = C;
    snprintf(s->moe_note, sizeof s->moe_note,
             "sparse_matmul=false, capacity_factor=%g: "
             "capacity C = int(max(ceil(%lld x %lld / %lld) x %g, %g)) = %lld assignments per "
             "expert and sequence of %lld tokens%s",
             cf, (long long)S, (long long)k, (long long)E, cf, cf, (long long)C, (long long)S,
             C >= S ? " (C >= S: no assignment can drop)" : "");
    return 0;
}
