/* mesh/qt_cg_mesh.h - stage 2, mesh: logical axes resolved to mesh axes (shard.c),
 * mesh groups (groups.c) and activation layouts (layout.c). Uses core only. */
#ifndef QT_CG_MESH_H
#define QT_CG_MESH_H

#include "core/qt_cg.h"

extern const char *const qt_cg_lax_names[QT_LAX_COUNT];

/* Resolve logical axis names to mesh axes with MaxText semantics: rules in order; a rule
 * applies to the (first) dim with its name only if that dim is unassigned and none of its
 * mesh axes is already used by another dim; size-1 axes are dropped afterwards.
 * names[i] may be NULL (replicated). spec[i] receives a bitmask of enum qt_mesh_axis;
 * desc (optional, ndim strings of 64 bytes) receives e.g. "(fsdp,expert)" or "-". */
void qt_cg_resolve(const qt_cg_rule *rules, int n_rules, const int32_t mesh[QT_MESH_COUNT],
                   int ndim, const char *const *names, uint8_t *spec, char (*desc)[64]);


/* ---- groups (mesh/groups.c) ---- */

/* Size of group `mask` on the plan's mesh (product of the masked axes' sizes). */
int64_t qt_cg_group_size(const qt_cg_settings *s, unsigned mask);
/* "data,fsdp" (or "-") for a mask. */
const char *qt_cg_mask_name(unsigned mask, char *buf, size_t n);

/* ---- layouts (mesh/layout.c) ---- */

/* The execution layout of a new activation from its logical axes: batch axes split over the
 * batch group, heads and the shared expert's width over `tensor` (when tensor parallelism
 * is on), everything else whole. Layers override it where they run otherwise. */
void qt_cg_layout_default(const qt_cg_settings *s, int ndim, const uint8_t *axes, uint8_t *exec);
/* A layer declares that tensors [from, g->nt) keep the dims whose logical axis is `lax`
 * whole (replicated) although the rules declare them split, giving the reason. */
void qt_cg_layout_declare(qt_cg_graph *g, int32_t from, int lax, const char *reason);
/* 1 if activation ct is held otherwise than its logical axes declare (not a parameter
 * or scratch, and its execution layout differs from its spec in some dim). */
int qt_cg_held_otherwise(const qt_cg_tensor *ct);
/* "(data,fsdp),-,tensor" for a per-dim layout. */
void qt_cg_layout_name(const uint8_t *lay, int ndim, char *buf, size_t n);

#endif
