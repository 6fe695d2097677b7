/* qt_rng.h - counter-based random numbers, parameter init and the parameter fingerprint.
 *
 * Every random value is a pure function of (seed, parameter index, global element index,
 * draw number) through the SplitMix64 finaliser, so no generator state exists and the
 * values do not depend on sharding, on how many elements a rank holds or on order.
 * Global element indices are row-major over the parameter's global shape; a rank's local
 * element is mapped to it through its shard coordinates (qt_global_index).
 */
#ifndef QT_RNG_H
#define QT_RNG_H

#include <stdint.h>
#include "qt_plan.h"

/* SplitMix64 finaliser: a bijective 64-bit mixer. */
uint64_t qt_mix64(uint64_t x);
/* Uniform double in (0, 1] from 53 bits of the hash of the key. */
double qt_rng_uniform(uint64_t seed, int64_t param, int64_t elem, int64_t draw);
/* Standard normal from Box-Muller (qt_log, qt_sqrt, qt_cos in double) on two uniforms. */
double qt_rng_normal(uint64_t seed, int64_t param, int64_t elem, int64_t draw);
/* One parameter element's initial value by rule (enum qt_init_rule). TRUNC_NORMAL redraws
 * (draw = 0, 1, ...) until |z| <= 2; after 64 rejections (probability < 1e-85) it gives 0. */
float qt_init_value(const qt_param *pa, uint64_t seed, int64_t param, int64_t elem);

/* Sets this process's rank for shard-coordinate mapping (0 for single-rank runs).
 * Assumption (to be confirmed against configgen): ranks are row-major over the mesh axes
 * in enum qt_mesh_axis order (data outermost), and a dim sharded over several axes
 * combines them in the same order, first axis major. */
void qt_rng_set_rank(int32_t rank);
/* Global row-major element index of local element `local` of tensor `t`. */
int64_t qt_global_index(const qt_plan *p, const qt_tensor *t, int64_t local);
/* How many local elements of t from `local` on (at least 1, at most to the end of the
 * tensor) have consecutive global indices qt_global_index(local) + 0, 1, ...: the same
 * for every rank (it depends on the local shape and the segments only). */
int64_t qt_global_run(const qt_tensor *t, int64_t local);

/* Elements of parameter i over its global shape (its numel when it has no shape). */
int64_t qt_param_global_numel(const qt_plan *p, int32_t i);
/* Whether parameter i's tensor is sharded (a local shape differs from the global one): then
 * local and global element indices differ. */
int qt_param_sharded(const qt_plan *p, int32_t i);
/* Fingerprint terms (see qt_fp_mix) of local elements [j0, j0+n) of parameter i, whose first
 * global flat element index is gbase (sum of the global sizes of parameters before it).
 * Reads the parameter region. */
uint64_t qt_param_fp_chunk(const qt_plan *p, int32_t i, int64_t gbase, int64_t j0, int64_t n);

#endif
