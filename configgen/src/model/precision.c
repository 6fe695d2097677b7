/* model/precision.c - the storage dtype of every tensor under the plan's compute dtype
 * (s->dtype, the config key `dtype`), the bf16 recipe of docs/precision.md:
 *   parameters (role PARAM: the tensors the ops read, i.e. the compute copy)   bf16
 *   forward activations (ACT) and their gradients (ACT_GRAD)                   bf16
 *   the routed experts' saved gate/up products and their gradients
 *   (".expert_gu", ".ep_gu", ".bwd_dgu")                                       bf16
 *   saved statistics (rstd, lse, the GDN states, the conv pre-activation),
 *   kernel scratch, the loss, the rotary table                                 fp32
 *   partial sums that cross ranks or blocks (docs/precision.md, "Executing bf16
 *   plans", plan fixes): the canonical blocks' scratch (".canon_scratch": fp32
 *   block partials), every ALL_REDUCE buffer (tensor-parallel partials), the
 *   expert hosts' row gradients (MOE_DISPATCH_BWD dxr)                         fp32
 *   token ids, targets, routing indices and rows (I32)                         int32
 * The master weights, the gradient leaves and trees, Adam and the checkpoint staging are
 * flat regions, not tensors: fp32 always (memory/memplan.c). Per-layer gather windows are
 * created later in the compute dtype (schedule/layer_ops.c).
 * Invariants: runs after autodiff and remat, before the flat ranges and the arena (which
 * size each tensor by its dtype); an fp32 plan is left exactly as built; I32 tensors are
 * never changed. */
#include <string.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"

/* 1 when a name ends with suffix, before any copy marks ("~r" remat, "~g" gather clones). */
static int ends_with(const char *name, const char *suffix)
{
    const char *mark = strchr(name, '~');
    const size_t n = mark ? (size_t)(mark - name) : strlen(name), k = strlen(suffix);
    return n >= k && !strncmp(name + n - k, suffix, k);
}

/* The storage dtype of one fp32 tensor of a bf16 plan. */
static int bf16_dtype_of(const qt_tensor *t)
{
    static const char *const bf16_suffix[] = {".expert_gu", ".ep_gu", ".bwd_dgu"};
    switch (t->role) {
    case QT_ROLE_PARAM:
    case QT_ROLE_ACT:
    case QT_ROLE_ACT_GRAD:
        return QT_BF16;
    case QT_ROLE_SAVED:
    case QT_ROLE_SCRATCH:
        for (size_t i = 0; i < sizeof bf16_suffix / sizeof bf16_suffix[0]; i++)
            if (ends_with(t->name, bf16_suffix[i])) return QT_BF16;
        return QT_F32;
    default:
        return QT_F32;
    }
}

void qt_cg_precision(qt_cg_graph *g)
{
    if (g->s->dtype != QT_BF16) return;
    for (int i = 0; i < g->nt; i++) {
        qt_tensor *t = &g->ts[i].t;
        if (t->dtype == QT_F32) t->dtype = (uint8_t)bf16_dtype_of(t);
    }
    /* partial sums stay fp32 until the cross-rank sum is complete (the microbatch schedule
     * holds every ALL_REDUCE and MOE_DISPATCH_BWD, remat copies included) */
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *op = &g->mb[i];
        int32_t id = QT_NONE;
        if (op->kind == QT_OP_ALL_REDUCE) id = QT_T(op, ALL_REDUCE, buf);
        else if (op->kind == QT_OP_MOE_DISPATCH_BWD) id = QT_T(op, MOE_DISPATCH_BWD, dxr);
        if (id != QT_NONE && g->ts[id].t.dtype == QT_BF16) g->ts[id].t.dtype = QT_F32;
    }
}
