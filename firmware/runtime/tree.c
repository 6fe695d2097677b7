/* tree.c - binary-counter pairwise trees (see qt_tree.h).
 *
 * Invariant: before pushing leaf i, level l holds the sum of the 2^l leaves ending just
 * before the part of i below bit l, for every set bit l of i; clear bits are free. Level 0
 * is free exactly when i is even, which is why even leaves are computed in place there.
 * The carry chain is evaluated in one pass per chunk (QT_TREE_CHUNK floats on the stack);
 * the additions and their operand order are exactly those of the level-by-level carry.
 */
#include <string.h>
#include "qt_tree.h"
#include "qt_vec.h"

float *qt_tree_leaf_dest(float *const *levels, int64_t off, float *scratch, int64_t leaf)
{
    return (leaf & 1) ? scratch : levels[0] + off;
}

/* Chunk of the fused carry chain: small enough that the running sums stay in L1. */
#define QT_TREE_CHUNK 2048

void qt_tree_push(float *const *levels, int64_t off, int64_t n, const float *scratch,
                  int64_t leaf)
{
    if (!(leaf & 1)) return;  /* already in level 0 */
    int top = 1;              /* first clear bit of leaf: the level that receives the carry */
    while ((leaf >> top) & 1) top++;
    float acc[QT_TREE_CHUNK];
    /* Same additions as carrying level by level (level[l] + carry, earlier leaves on the
     * left), one chunk at a time, storing only the final carry: levels below `top` become
     * free, so their intermediate sums need not be written back. */
    for (int64_t k0 = 0; k0 < n; k0 += QT_TREE_CHUNK) {
        int64_t c = n - k0 < QT_TREE_CHUNK ? n - k0 : QT_TREE_CHUNK;
        const float *l0 = levels[0] + off + k0, *sc = scratch + k0;
        float *dst = levels[top] + off + k0;
        if (top == 1) {
            qt_vec_add(dst, l0, sc, c);
            continue;
        }
        qt_vec_add(acc, l0, sc, c);
        for (int l = 1; l < top - 1; l++) qt_vec_add(acc, levels[l] + off + k0, acc, c);
        qt_vec_add(dst, levels[top - 1] + off + k0, acc, c);
    }
}

void qt_tree_finalize_range(float *out, float *const *levels, int64_t off, int64_t n,
                            int64_t n_leaves)
{
    int first = 1;
    for (int l = 0; l < 63 && (n_leaves >> l) != 0; l++) {
        if (!((n_leaves >> l) & 1)) continue;
        const float *src = levels[l] + off;
        if (first) {
            memcpy(out, src, (size_t)n * sizeof(float));
            first = 0;
        } else {
            qt_vec_add(out, src, out, n);
        }
    }
    if (first) memset(out, 0, (size_t)n * sizeof(float));
}

void qt_tree_finalize(float *out, float *const *levels, int64_t n, int64_t n_leaves)
{
    qt_tree_finalize_range(out, levels, 0, n, n_leaves);
}

int qt_tree_levels_needed(int64_t n_leaves)
{
    int l = 1;
    while (n_leaves >> l) l++;
    return l;
}
