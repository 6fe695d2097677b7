/* qt_tree.h - deterministic pairwise trees over per-sequence gradient leaves.
 *
 * Leaves are numbered i = 0, 1, ... in the order of global sequences on this rank
 * (i = microbatch * micro_batch + seq). Level l holds the float sum of one complete
 * subtree of 2^l consecutive leaves; after i leaves the occupied levels are the set bits
 * of i (a binary counter). Every addition puts the earlier leaves on the left. The final
 * combination of the occupied levels runs from the lowest level up, with the higher
 * (earlier) level on the left. So the result is a fixed function of the leaves and their
 * count N only: it does not depend on how N was split into microbatches.
 */
#ifndef QT_TREE_H
#define QT_TREE_H

#include <stdint.h>

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

/* Writes the tree total of n_leaves leaves into out[0..n) (flat, n elements from offset 0
 * of every level): the occupied levels (set bits of n_leaves) combined lowest first,
 * out = level[higher] + out. Reads levels only. */
void qt_tree_finalize(float *out, float *const *levels, int64_t n, int64_t n_leaves);
/* The same for elements [off, off+n) of every level, written to out[0..n) (lets callers
 * fuse later passes over cache-sized chunks). */
void qt_tree_finalize_range(float *out, float *const *levels, int64_t off, int64_t n,
                            int64_t n_leaves);

/* Levels needed for n_leaves leaves: floor(log2(n_leaves)) + 1 (1 for n_leaves <= 1). */
int qt_tree_levels_needed(int64_t n_leaves);

#endif
