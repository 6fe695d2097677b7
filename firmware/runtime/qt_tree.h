/* qt_tree.h - deterministic pairwise trees over per-sequence gradient leaves.
 *
 * Leaves are numbered i = 0, 1, ... in the order of global sequences on this rank
 * (i = microbatch * micro_batch + seq). Level l holds the float sum of one complete
 * subtree of 2^l consecutive leaves; after i leaves the occupied levels are the set bits
 * of i (a binary counter). Every addition puts the earlier leaves on the left. The final
 * combination of the occupied levels runs from the lowest level up, with the higher
 * (earlier) level on the left. So the result is a fixed function of the leaves and their
 * count N only: it does not depend on how N was split into microbatches.
 * The total ends in the top level (index bit length of N minus 1), which plans use as the
 * gradient region itself. An odd leaf is pushed either by qt_tree_push from a scratch copy
 * or, for writing weight-gradient kernels, by the kernel's own epilogue (qt_tree_carry):
 * the same additions in the same order, so the same bits.
 */
#ifndef QT_TREE_H
#define QT_TREE_H

#include <stdint.h>
#include "qt_leaf_carry.h"

/* Where leaf `leaf` of a parameter must be computed (zeroed first by the caller): level 0
 * itself for even leaves (level 0 is free then), else the scratch buffer `scratch`.
 * levels[l] are the level base pointers (flat regions); off the parameter's flat offset. */
float *qt_tree_leaf_dest(float *const *levels, int64_t off, float *scratch, int64_t leaf);

/* Pushes leaf `leaf` of one parameter (n elements at flat offset off). For an odd leaf the
 * values are read from `scratch` (n floats); for an even one they already sit in level 0.
 * Reads levels[0..t-1] and writes levels[t] at [off, off+n), t = number of trailing ones of
 * `leaf` (levels below t are free afterwards and keep stale values). */
void qt_tree_push(float *const *levels, int64_t off, int64_t n, const float *scratch,
                  int64_t leaf);

/* The push of odd leaf `leaf` as a carry for a writing kernel's epilogue (qt_leaf_carry.h):
 * cy->add[l] = levels[l] + off for l < t, cy->dst = levels[t] + off, cy->n = t, t = number
 * of trailing ones of `leaf` - the levels qt_tree_push would read and write, so storing
 * cy's value for the leaf r gives qt_tree_push's bits in the same place. Returns 1; for an
 * even leaf (nothing to carry: it is computed in level 0) returns 0 and sets cy->n = 0.
 * Writes only *cy. */
int qt_tree_carry(float *const *levels, int64_t off, int64_t leaf, qt_leaf_carry *cy);

/* Pushes R*q pieces of n floats as leaves first, first+1, ... of the tree at levels (elements
 * [off, off+n)), in the order (m, u): piece (m, u) is unit[u] + m*blk. The microbatch form's
 * units (docs/determinism.md "Any split"): after qt_coll_exchange_units_f32, block m of
 * unit[u] is member m's unit u of this rank's block, and microbatch mb's pieces are leaves
 * mb*R*q + m*q + u of the owner's counter over the step's G*R*q units, whose
 * qt_tree_finalize_range over G*R*q leaves is the one-rank tree's total. Even leaves are
 * copied into level 0, odd ones pushed (qt_tree_push): the same additions. */
void qt_tree_push_units(float *const *levels, int64_t off, int64_t n, float *const *unit, int R,
                        int q, int64_t blk, int64_t first);

/* As qt_tree_push_units, in the order of a range whose members' units interleave in the
 * global order (the routed experts replicated over context, qt_plan_fields.def
 * expert_ctx_rep): member m = hi I + lo (lo < I: its context index), unit u = e Q + s
 * (Q = q / P; e < P: the piece of the exchange's member e, s < Q its unit), pushed in the
 * order (hi, e, lo, s) as leaves first, first+1, ... With I = P = 1 this is
 * qt_tree_push_units' order. Requires I | R, P | q. */
void qt_tree_push_units_strided(float *const *levels, int64_t off, int64_t n,
                                float *const *unit, int R, int q, int64_t blk, int64_t first,
                                int I, int P);

/* Completes the tree total of n_leaves leaves in place in the top level
 * levels[top], top = qt_tree_levels_needed(n_leaves) - 1 (always occupied after the last
 * leaf), for elements [off, off+n): with acc the lower occupied levels (set bits of
 * n_leaves below top) combined lowest first (acc = level[higher] + acc), top = top + acc -
 * exactly the additions and operand order of combining all occupied levels lowest first
 * into a separate buffer. Reads the lower levels, writes only levels[top]. A power-of-two
 * n_leaves leaves the total in the top level already: nothing is done. n_leaves < 1 zeroes
 * levels[0]. */
void qt_tree_finalize_range(float *const *levels, int64_t off, int64_t n, int64_t n_leaves);
/* The same for elements [0, n). */
void qt_tree_finalize(float *const *levels, int64_t n, int64_t n_leaves);

/* Levels needed for n_leaves leaves: floor(log2(n_leaves)) + 1 (1 for n_leaves <= 1). */
int qt_tree_levels_needed(int64_t n_leaves);

#endif
