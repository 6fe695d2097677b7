/* model/remat.c - rematerialisation (remat_policy): a decoder layer's forward is run again
 * during the backward pass, from the layer's saved input, so its intermediate activations
 * live only during that layer's backward instead of from the forward to the backward.
 *
 * Policies (config key remat_policy):
 *   none      every activation a backward op reads is kept from the forward (the default);
 *   full      every forward op of a layer is recomputed right before the layer's backward;
 *             only the layer inputs (the residual stream between layers) stay live;
 *   save_dot  qtrain's middle policy: the outputs of the matmul-class ops (projections,
 *             the expert FFN) are kept, everything else of the layer (norms, rotary, gates,
 *             the GDN convolution and delta rule, attention, routing, dispatch, combine,
 *             residual adds) is recomputed - the cheap or memory-heavy part, as JAX's
 *             checkpoint_dots keeps the dots.
 *
 * The transformation (after autodiff, before memory planning): for each layer, in the order
 * the backward reaches them, the recomputed ops are copies of the layer's forward ops whose
 * written tensors ('w', 'a', 's' slots) are fresh clones and whose reads of tensors the copy
 * block already produced use those clones; the layer's backward ops then read the clones
 * instead of the originals. So the originals die at their last forward use, and the memory
 * planner, which works from op lifetimes, overlaps them across layers.
 * Invariants:
 *  - bits: the copies run the same kernels on the same inputs in the same order, so every
 *    clone holds exactly the original's values and the gradients are unchanged;
 *  - side effects: a copy that accumulates into a tensor it did not produce (the
 *    load-balance statistics of the router) accumulates into a zeroed throwaway clone
 *    instead, so nothing outside the layer changes twice;
 *  - save_dot: an op is not copied when it is a dot or when it updates in place a tensor
 *    that is kept (an all-reduce of a kept projection); its outputs are kept;
 *  - parameters, inputs and tensors created outside the layer are never cloned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"

static int is_dot(int kind)
{
    return kind == QT_OP_MATMUL_FWD || kind == QT_OP_EXPERT_FFN_FWD;
}

/* Clone of tensor id (created once per layer copy block). */
static int32_t clone_of(qt_cg_graph *g, int32_t *map, int32_t id)
{
    if (map[id] != QT_NONE) return map[id];
    const int32_t c = qt_cg_clone_tensor(g, id, "~r");
    qt_cg_tensor *ct = &g->ts[c];
    ct->reshard = g->ts[id].reshard;
    ct->whole = g->ts[id].whole;
    ct->ep_seg = g->ts[id].ep_seg;
    map[id] = c;
    return c;
}

static void append(qt_op **ops, int *n, int *cap, const qt_op *op)
{
    *ops = qt_cg_grow(*ops, cap, *n + 1, sizeof **ops);
    (*ops)[(*n)++] = *op;
}

/* The copy block of layer l into out; map[] (tensor id -> clone) is filled for it. */
static void copy_layer(qt_cg_graph *g, int l, int policy, int32_t *map, uint8_t *kept,
                       qt_op **out, int *n, int *cap)
{
    const int o0 = g->layer_op0[l], o1 = g->layer_op1[l];
    const int32_t t0 = g->layer_t0[l], t1 = g->layer_t1[l];
    for (int o = o0; o < o1; o++) {
        const qt_op src = g->mb[o];
        const char *slots = qt_cg_op_slots(src.kind);
        int copy = policy == QT_CG_REMAT_FULL;
        if (policy == QT_CG_REMAT_SAVE_DOT) {
            copy = !is_dot(src.kind);
            for (int s = 0; slots[s] && copy; s++)
                if ((slots[s] | 32) == 'a' && src.t[s] >= 0 && kept[src.t[s]]) copy = 0;
            if (!copy)
                for (int s = 0; slots[s]; s++)
                    if ((slots[s] | 32) == 'w' && src.t[s] >= 0) kept[src.t[s]] = 1;
        }
        if (!copy) continue;
        qt_op op = src;
        for (int s = 0; slots[s]; s++) {
            const int32_t id = src.t[s];
            if (id < 0) continue;
            const char k = (char)(slots[s] | 32);
            const int inside = id >= t0 && id < t1 && g->ts[id].t.role != QT_ROLE_PARAM;
            if (k == 'w' || k == 's' || (k == 'a' && inside)) {
                op.t[s] = clone_of(g, map, id);
            } else if (k == 'a') {
                /* an accumulator outside the layer: a zeroed throwaway instead */
                const int fresh = map[id] == QT_NONE;
                op.t[s] = clone_of(g, map, id);
                if (fresh) {
                    qt_op z;
                    qt_cg_op_blank(&z, QT_OP_ZERO);
                    QT_T(&z, ZERO, x) = op.t[s];
                    QT_A(&z, ZERO, n) = g->ts[id].t.numel;
                    append(out, n, cap, &z);
                }
            } else if (k == 'r' && map[id] != QT_NONE) {
                op.t[s] = map[id];
            }
        }
        append(out, n, cap, &op);
    }
    /* clones of expert-parallel row ids point at the clone of their seg tensor */
    for (int32_t id = t0; id < t1; id++)
        if (map[id] != QT_NONE && g->ts[map[id]].ep_seg >= 0 &&
            map[g->ts[map[id]].ep_seg] != QT_NONE)
            g->ts[map[id]].ep_seg = map[g->ts[map[id]].ep_seg];
}

int qt_cg_remat(qt_cg_graph *g, char *err, size_t errlen)
{
    const int policy = g->s->remat;
    if (policy == QT_CG_REMAT_NONE || g->n_layers_rec == 0) return 0;
    const int nt0 = g->nt, nmb0 = g->nmb;
    int32_t *map = qt_cg_alloc((size_t)nt0 * sizeof *map);
    uint8_t *kept = qt_cg_alloc((size_t)nt0);
    /* layer of each forward op, and the first backward op of each layer */
    int *layer_of = qt_cg_alloc((size_t)g->n_fwd * sizeof *layer_of);
    for (int o = 0; o < g->n_fwd; o++) layer_of[o] = -1;
    for (int l = 0; l < g->n_layers_rec; l++)
        for (int o = g->layer_op0[l]; o < g->layer_op1[l]; o++) layer_of[o] = l;
    qt_op *out = NULL;
    int n = 0, cap = 0, cur = -1, copies = 0;
    for (int o = 0; o < nmb0; o++) {
        /* the backward op o belongs to the layer of the forward op it was emitted for */
        const int src = o >= g->n_fwd ? g->bwd_src[o - g->n_fwd] : -1;
        const int l = src >= 0 ? layer_of[src] : -1;
        if (l != cur && l >= 0) {
            for (int i = 0; i < nt0; i++) map[i] = QT_NONE;
            memset(kept, 0, (size_t)nt0);
            const int before = n;
            copy_layer(g, l, policy, map, kept, &out, &n, &cap);
            copies += n - before;
        }
        if (l != cur) cur = l;
        qt_op op = g->mb[o];
        if (l >= 0) {
            const char *slots = qt_cg_op_slots(op.kind);
            for (int s = 0; slots[s]; s++) {
                const int32_t id = op.t[s];
                if (id >= 0 && id < nt0 && (slots[s] | 32) == 'r' && map[id] != QT_NONE)
                    op.t[s] = map[id];
            }
        }
        append(&out, &n, &cap, &op);
    }
    free(g->mb);
    g->mb = out;
    g->nmb = n;
    g->capmb = cap;
    g->n_remat_ops = copies;
    free(map);
    free(kept);
    free(layer_of);
    if (n <= nmb0 && policy != QT_CG_REMAT_NONE && copies == 0)
        return qt_cg_fail(err, errlen, "remat_policy: no op was recomputed (internal error)");
    return 0;
}
