/* model/qt_cg_model.h - stage 3, model: the forward graph (graph.c), reverse-mode
 * differentiation (autodiff.c) and rematerialisation (remat.c). Uses mesh and core. */
#ifndef QT_CG_MODEL_H
#define QT_CG_MODEL_H

#include "core/qt_cg.h"

int qt_cg_graph_build(qt_cg_graph *g, const qt_cg_settings *s, char *err, size_t errlen);
/* 1 for the logical axes whose dims tensor parallelism splits for compute (q_heads,
 * kv_heads, gdn_head, mlp); other dims sharded over `tensor` only split optimizer state. */
int qt_cg_tp_axis(int lax);
int qt_cg_autodiff(qt_cg_graph *g, char *err, size_t errlen);

/* Graph-building primitives (model/graph.c), also used by remat and the per-layer
 * schedule edits: a new tensor (layouts resolved from its logical axes), a new op. */
int32_t qt_cg_add_tensor(qt_cg_graph *g, const char *name, int role, int dtype, int ndim,
                         const int64_t *shape, const uint8_t *axes);
qt_op *qt_cg_emit_op(qt_cg_graph *g, int init, int kind);
/* A new tensor "<name of id><suffix>" with id's role, type, shapes, layouts and segments
 * (not its parameter link, lifetime flags or reshard note); returns its id. */
int32_t qt_cg_clone_tensor(qt_cg_graph *g, int32_t id, const char *suffix);

/* Rematerialisation per s->remat (model/remat.c): after autodiff, before the memory plan. */
int qt_cg_remat(qt_cg_graph *g, char *err, size_t errlen);

#endif
