/* mesh/shard.c - logical axis names and their resolution to mesh axes.
 *
 * Semantics are MaxText's (Flax logical_to_mesh_axes, then size-1 mesh axes dropped;
 * docs/sharding.md section 2): rules are scanned in list order; a rule names a logical axis
 * and a tuple of mesh axes; it applies to the first tensor dim carrying that name if the
 * dim is still unassigned and none of its mesh axes is already used by any assigned dim
 * (the check includes size-1 axes, exactly as Flax, so e.g. fsdp_transpose taken by `mlp`
 * pushes `embed` to its second rule); dims no rule assigns are replicated. Mesh axes that
 * qtrain does not have (stage, fsdp_transpose, tensor_sequence, ...) have size 1.
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"

const char *const qt_cg_lax_names[QT_LAX_COUNT] = {
    [QT_LAX_NONE] = "-",
    [QT_LAX_ACT_BATCH] = "activation_batch",
    [QT_LAX_ACT_NORM_LENGTH] = "activation_norm_length",
    [QT_LAX_ACT_EMBED] = "activation_embed",
    [QT_LAX_ACT_LENGTH] = "activation_length",
    [QT_LAX_ACT_EMBED_LOGITS_BATCH] = "activation_embed_and_logits_batch",
    [QT_LAX_ACT_VOCAB] = "activation_vocab",
    [QT_LAX_ACT_KV_BATCH] = "activation_kv_batch",
    [QT_LAX_ACT_LENGTH_ATTN] = "activation_length_attn",
    [QT_LAX_ACT_KV_HEADS] = "activation_kv_heads",
    [QT_LAX_ACT_KV_HEAD_DIM] = "activation_kv_head_dim",
    [QT_LAX_ACT_MLP] = "activation_mlp",
    [QT_LAX_VOCAB] = "vocab",
    [QT_LAX_EMBED_VOCAB] = "embed_vocab",
    [QT_LAX_EMBED] = "embed",
    [QT_LAX_GDN_HEAD] = "gdn_head",
    [QT_LAX_Q_HEADS] = "q_heads",
    [QT_LAX_KV_HEADS] = "kv_heads",
    [QT_LAX_MLP] = "mlp",
    [QT_LAX_EXP] = "exp",
    [QT_LAX_EMBED_MOE] = "embed_moe",
    [QT_LAX_MLP_MOE] = "mlp_moe",
    [QT_LAX_ACT_HEADS] = "activation_heads",
};

static int mt_size(const int32_t mesh[QT_MESH_COUNT], int mt)
{
    int q = qt_cg_mt_to_qt(mt);
    return q < 0 ? 1 : mesh[q];
}

void qt_cg_resolve(const qt_cg_rule *rules, int n_rules, const int32_t mesh[QT_MESH_COUNT],
                   int ndim, const char *const *names, uint8_t *spec, char (*desc)[64])
{
    int assigned[QT_MAX_DIMS] = {0};
    const qt_cg_rule *rule_of[QT_MAX_DIMS] = {0};
    for (int r = 0; r < n_rules; r++) {
        const qt_cg_rule *ru = &rules[r];
        int pos = -1;
        for (int d = 0; d < ndim && pos < 0; d++)
            if (names[d] && !strcmp(names[d], ru->name)) pos = d;
        if (pos < 0 || assigned[pos]) continue;
        int free_ = 1;
        for (int d = 0; d < ndim && free_; d++) {
            if (!assigned[d] || !rule_of[d]) continue;
            for (int a = 0; a < ru->n && free_; a++)
                for (int b = 0; b < rule_of[d]->n; b++)
                    if (ru->axes[a] == rule_of[d]->axes[b]) free_ = 0;
        }
        if (!free_) continue;
        assigned[pos] = 1;
        rule_of[pos] = ru;
    }
    for (int d = 0; d < ndim; d++) {
        spec[d] = 0;
        char buf[64] = "";
        size_t n = 0;
        if (rule_of[d])
            for (int a = 0; a < rule_of[d]->n; a++) {
                int mt = rule_of[d]->axes[a];
                int q = qt_cg_mt_to_qt(mt);
                if (q < 0 || mt_size(mesh, mt) <= 1) continue;
                spec[d] |= (uint8_t)(1u << q);
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? "," : "(",
                                      qt_cg_mt_axis_names[mt]);
                if (n >= sizeof buf) n = sizeof buf - 1;
            }
        if (desc) {
            if (n) snprintf(desc[d], 64, "%s)", buf);
            else snprintf(desc[d], 64, "-");
        }
    }
}
