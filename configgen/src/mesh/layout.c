/* mesh/layout.c - activation layouts: what the logical axes declare, what the plan executes,
 * (docs/design.md section 4, docs/sharding.md section 5); the type check between them is
 * check/layout.c.
 *
 * Every activation carries two per-dim layouts (bitmasks of mesh axes): t.spec, resolved
 * from its logical axes by the logical_axis_rules (MaxText's semantics), and exec, how this
 * plan actually holds it. The graph computes exec from the axes (qt_cg_layout_default) and
 * the strategies configgen executes: the batch dims split over the batch axes but context,
 * the token dims over `context`, attention and GDN heads and the shared expert's width over
 * `tensor` (and over `context` too on the mixers' head side: model/context.c); the residual stream, the logits and
 * the routed experts stay whole on every tensor rank (Megatron layout: row-parallel outputs
 * are all-reduced, with the canonical tree, instead of reduce-scattered). Where exec differs
 * from the declaration, the layer that built the tensor must say so (qt_cg_layout_declare)
 * under shard_mode=explicit, exactly as the reference trainer's explicit layers pin their
 * layouts and declare reshards; under auto the difference is propagated and listed.
 * Invariant: a layout is a per-dim bitmask of enum qt_mesh_axis; exec differs from t.spec
 * only where a layer declared it (or, under shard_mode=auto, was propagated).
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"

void qt_cg_layout_default(const qt_cg_settings *s, int ndim, const uint8_t *axes, uint8_t *exec)
{
    const uint8_t tensor = s->mesh[QT_MESH_TENSOR] > 1 ? (uint8_t)(1u << QT_MESH_TENSOR) : 0;
    const uint8_t context = qt_cg_context_mask(s);
    for (int d = 0; d < ndim; d++) {
        switch (axes[d]) {
        case QT_LAX_ACT_BATCH:
        case QT_LAX_ACT_KV_BATCH:
        case QT_LAX_ACT_EMBED_LOGITS_BATCH:
            /* sequences over the batch axes; context splits each sequence's tokens */
            exec[d] = (uint8_t)(s->batch_mask & ~context);
            break;
        case QT_LAX_ACT_LENGTH:
        case QT_LAX_ACT_NORM_LENGTH:
        case QT_LAX_ACT_LENGTH_ATTN:
            exec[d] = context;
            break;
        case QT_LAX_ACT_KV_HEADS:
        case QT_LAX_ACT_HEADS:
        case QT_LAX_ACT_MLP:
            exec[d] = tensor;
            break;
        default:
            exec[d] = 0;
        }
    }
}

void qt_cg_layout_declare(qt_cg_graph *g, int32_t from, int lax, const char *reason)
{
    for (int32_t i = from; i < g->nt; i++) {
        qt_cg_tensor *ct = &g->ts[i];
        if (ct->t.role == QT_ROLE_PARAM) continue;
        for (int d = 0; d < ct->t.ndim; d++)
            if (ct->t.axes[d] == lax) {
                ct->exec[d] = 0;
                ct->reshard = reason;
            }
    }
}

void qt_cg_layout_name(const uint8_t *lay, int ndim, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && k < n; d++) {
        char axes[64];
        qt_cg_mask_name(lay[d], axes, sizeof axes);
        k += (size_t)snprintf(buf + k, n - k, "%s%s%s%s", d ? "," : "",
                              strchr(axes, ',') ? "(" : "", axes, strchr(axes, ',') ? ")" : "");
    }
}

int qt_cg_held_otherwise(const qt_cg_tensor *ct)
{
    const qt_tensor *t = &ct->t;
    if (t->role == QT_ROLE_PARAM || t->role == QT_ROLE_SCRATCH) return 0;
    int differs = 0;
    for (int d = 0; d < t->ndim; d++) differs |= ct->exec[d] != t->spec[d];
    return differs;
}
