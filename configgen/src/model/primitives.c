/* model/primitives.c - the graph-building primitives (qt_cg_model.h): a new tensor, with its
 * layouts resolved from its logical axes; a copy of one; a new op. Used by the forward
 * graph (graph.c), context parallelism (context.c), autodiff, remat and the per-layer
 * schedule edits.
 * Invariants: a tensor's shape equals its global shape until a builder localises it
 * (parameters: graph.c add_param); every new op starts blank (qt_cg_op_blank).
 */
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "model/qt_cg_model.h"

int32_t qt_cg_add_tensor(qt_cg_graph *g, const char *name, int role, int dtype, int ndim,
                         const int64_t *shape, const uint8_t *axes)
{
    g->ts = qt_cg_grow(g->ts, &g->capt, g->nt + 1, sizeof *g->ts);
    qt_cg_tensor *ct = &g->ts[g->nt];
    qt_tensor *t = &ct->t;
    t->name = qt_cg_strdup(name);
    t->role = (uint8_t)role;
    t->dtype = (uint8_t)dtype;
    t->ndim = (uint8_t)ndim;
    t->numel = 1;
    const char *names[QT_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = t->global_shape[i] = shape[i];
        t->axes[i] = axes[i];
        /* the settings bound every shape product; this catches a shape they missed */
        if (__builtin_mul_overflow(t->numel, shape[i], &t->numel) ||
            t->numel > ((int64_t)1 << 56)) {
            if (!g->too_big) g->too_big = t->name;
            t->numel = 1;
        }
        names[i] = axes[i] ? qt_cg_lax_names[axes[i]] : NULL;
    }
    qt_cg_resolve(g->s->rules, g->s->n_rules, g->s->mesh, ndim, names, t->spec, NULL);
    qt_cg_layout_default(g->s, ndim, axes, ct->exec);
    ct->reshard = NULL;
    ct->param = -1;
    ct->first = ct->last = -1;
    ct->ep_seg = QT_NONE;
    ct->alias_of = -1;
    ct->alias_off = 0;
    ct->grad_done = 0;
    return g->nt++;
}

int32_t qt_cg_clone_tensor(qt_cg_graph *g, int32_t id, const char *suffix)
{
    char name[300];
    snprintf(name, sizeof name, "%s%s", g->ts[id].t.name, suffix);
    qt_cg_tensor src = g->ts[id];   /* copy: add_tensor may move the array */
    int32_t c = qt_cg_add_tensor(g, name, src.t.role, src.t.dtype, src.t.ndim, src.t.shape,
                                 src.t.axes);
    qt_cg_tensor *ct = &g->ts[c];
    memcpy(ct->t.global_shape, src.t.global_shape, sizeof ct->t.global_shape);
    memcpy(ct->t.spec, src.t.spec, sizeof ct->t.spec);
    memcpy(ct->t.seg, src.t.seg, sizeof ct->t.seg);
    ct->t.seg_dim = src.t.seg_dim;
    memcpy(ct->exec, src.exec, sizeof ct->exec);
    return c;
}

qt_op *qt_cg_emit_op(qt_cg_graph *g, int init, int kind)
{
    qt_op *op;
    if (init) {
        g->init = qt_cg_grow(g->init, &g->capinit, g->ninit + 1, sizeof *g->init);
        op = &g->init[g->ninit++];
    } else {
        g->mb = qt_cg_grow(g->mb, &g->capmb, g->nmb + 1, sizeof *g->mb);
        op = &g->mb[g->nmb++];
    }
    qt_cg_op_blank(op, kind);
    return op;
}
