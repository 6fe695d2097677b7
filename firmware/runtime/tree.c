/* tree.c - binary-counter pairwise trees (see qt_tree.h).
 *
 * Invariant: before pushing leaf i, level l holds the sum of the 2^l leaves ending just
 * before the part of i below bit l, for every set bit l of i; clear bits are free. Level 0
 * is free exactly when i is even, which is why even leaves are computed in place there.
 */
#include <string.h>
#include "qt_tree.h"

float *qt_tree_leaf_dest(float *const *levels, int64_t off, float *scratch, int64_t leaf)
{
    return (leaf & 1) ? scratch : levels[0] + off;
}

void qt_tree_push(float *const *levels, int64_t off, int64_t n, const float *scratch,
                  int64_t leaf)
{
    if (!(leaf & 1)) return;  /* already in level 0 */
    float *l0 = levels[0] + off;
    for (int64_t k = 0; k < n; k++) l0[k] = l0[k] + scratch[k];
    int l = 1;
    while ((leaf >> l) & 1) {
        float *dst = levels[l] + off;
        const float *src = levels[l - 1] + off;
        for (int64_t k = 0; k < n; k++) dst[k] = dst[k] + src[k];
        l++;
    }
    memcpy(levels[l] + off, levels[l - 1] + off, (size_t)n * sizeof(float));
}

void qt_tree_finalize(float *out, float *const *levels, int64_t n, int64_t n_leaves)
{
    int first = 1;
    for (int l = 0; l < 63 && (n_leaves >> l) != 0; l++) {
        if (!((n_leaves >> l) & 1)) continue;
        const float *src = levels[l];
        if (first) {
            memcpy(out, src, (size_t)n * sizeof(float));
            first = 0;
        } else {
            for (int64_t k = 0; k < n; k++) out[k] = src[k] + out[k];
        }
    }
    if (first) memset(out, 0, (size_t)n * sizeof(float));
}

int qt_tree_levels_needed(int64_t n_leaves)
{
    int l = 1;
    while (n_leaves >> l) l++;
    return l;
}
