/* tree.c - binary-counter pairwise trees (see qt_tree.h).
 *
 * Invariant: before pushing leaf i, level l holds the sum of the 2^l leaves ending just
 * before the part of i below bit l, for every set bit l of i; clear bits are free. Level 0
 * is free exactly when i is even, which is why even leaves are computed in place there.
 * The carry chain is evaluated in one pass per chunk (QT_TREE_CHUNK floats on the stack);
 * the additions and their operand order are exactly those of the level-by-level carry
 * (large carries are stored non-temporally: same values, fenced before the push returns).
 * The top level (bit length of the leaf count minus 1) is written by exactly one push, the
 * carry of leaf 2^top - 1, and stays occupied after it, so the final total can be completed
 * in place there: the plan makes that level the gradient region (no separate copy).
 * qt_tree_carry describes the same push for a kernel epilogue that stores the carry itself
 * (qt_leaf_carry.h); qt_tree_push stays the reference and the path of the other kernels.
 */
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "qt_tree.h"
#include "qt_vec.h"

float *qt_tree_leaf_dest(float *const *levels, int64_t off, float *scratch, int64_t leaf)
{
    return (leaf & 1) ? scratch : levels[0] + off;
}

int qt_tree_carry(float *const *levels, int64_t off, int64_t leaf, qt_leaf_carry *cy)
{
    cy->n = 0;
    if (!(leaf & 1)) return 0;
    int top = 1; /* as qt_tree_push: the first clear bit of leaf receives the carry */
    while ((leaf >> top) & 1) top++;
    for (int l = 0; l < top; l++) cy->add[l] = levels[l] + off;
    cy->dst = levels[top] + off;
    cy->n = top;
    return 1;
}

/* Chunk of the fused carry chain: small enough that the running sums stay in L1. */
#define QT_TREE_CHUNK 2048

/* dst[k] = a[k] + b[k] (qt_vec_add's operations) with non-temporal stores, for the carries
 * of parameters of QT_TREE_STREAM floats or more: a carry is read again only after the next
 * leaf or leaves have been computed (or, into the top level, by the step's total), by then
 * out of the core's caches at these sizes, so a cached write would only add the read for
 * ownership (measured: tree pushes of the bench plan about 25% faster). Same bits. dst
 * 64-byte aligned. */
#define QT_TREE_STREAM (1 << 19)
static void qt_tree_add_stream(float *dst, const float *a, const float *b, int64_t n)
{
    int64_t k = 0;
#if defined(__AVX512F__)
    for (; k + 16 <= n; k += 16)
        _mm512_stream_ps(dst + k, _mm512_add_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k)));
#endif
    qt_vec_add(dst + k, a + k, b + k, n - k);
}

void qt_tree_push(float *const *levels, int64_t off, int64_t n, const float *scratch,
                  int64_t leaf)
{
    if (!(leaf & 1)) return;  /* already in level 0 */
    int top = 1;              /* first clear bit of leaf: the level that receives the carry */
    while ((leaf >> top) & 1) top++;
    float acc[QT_TREE_CHUNK];
    const int stream = n >= QT_TREE_STREAM && !((uintptr_t)(levels[top] + off) & 63);
    /* Same additions as carrying level by level (level[l] + carry, earlier leaves on the
     * left), one chunk at a time, storing only the final carry: levels below `top` become
     * free, so their intermediate sums need not be written back. */
    for (int64_t k0 = 0; k0 < n; k0 += QT_TREE_CHUNK) {
        int64_t c = n - k0 < QT_TREE_CHUNK ? n - k0 : QT_TREE_CHUNK;
        const float *l0 = levels[0] + off + k0, *sc = scratch + k0;
        float *dst = levels[top] + off + k0;
        if (top == 1) {
            if (stream) qt_tree_add_stream(dst, l0, sc, c);
            else qt_vec_add(dst, l0, sc, c);
            continue;
        }
        qt_vec_add(acc, l0, sc, c);
        for (int l = 1; l < top - 1; l++) qt_vec_add(acc, levels[l] + off + k0, acc, c);
        if (stream) qt_tree_add_stream(dst, levels[top - 1] + off + k0, acc, c);
        else qt_vec_add(dst, levels[top - 1] + off + k0, acc, c);
    }
#if defined(__AVX512F__)
    if (stream) _mm_sfence();  /* the streamed stores are ordered before what follows */
#endif
}

void qt_tree_push_units(float *const *levels, int64_t off, int64_t n, float *const *unit, int R,
                        int q, int64_t blk, int64_t first)
{
    qt_tree_push_units_strided(levels, off, n, unit, R, q, blk, first, 1, 1);
}

void qt_tree_push_units_strided(float *const *levels, int64_t off, int64_t n,
                                float *const *unit, int R, int q, int64_t blk, int64_t first,
                                int I, int P)
{
    const int Q = q / P;
    int64_t leaf = first;
    for (int hi = 0; hi < R / I; hi++)
        for (int e = 0; e < P; e++)
            for (int lo = 0; lo < I; lo++)
                for (int s = 0; s < Q; s++, leaf++) {
                    const float *x = unit[e * Q + s] + (int64_t)(hi * I + lo) * blk;
                    if (!(leaf & 1)) memcpy(levels[0] + off, x, (size_t)n * sizeof(float));
                    else qt_tree_push(levels, off, n, x, leaf);
                }
}

void qt_tree_finalize_range(float *const *levels, int64_t off, int64_t n, int64_t n_leaves)
{
    if (n_leaves < 1) {  /* no leaves: the total is zero */
        memset(levels[0] + off, 0, (size_t)n * sizeof(float));
        return;
    }
    const int top = qt_tree_levels_needed(n_leaves) - 1;
    int lo = 0;
    while (!((n_leaves >> lo) & 1)) lo++;
    if (lo == top) return;  /* a power of two: the top level already holds the total */
    float acc[QT_TREE_CHUNK];
    /* Same additions as combining into a separate output (out = level[lo];
     * out = level[higher] + out, ..., out = level[top] + out), one chunk at a time: the
     * running sum of the lower levels stays on the stack and only the last addition,
     * top = top + acc, is stored, into the top level itself (element-wise in place). */
    for (int64_t k0 = 0; k0 < n; k0 += QT_TREE_CHUNK) {
        int64_t c = n - k0 < QT_TREE_CHUNK ? n - k0 : QT_TREE_CHUNK;
        const float *sum = levels[lo] + off + k0;
        for (int l = lo + 1; l <= top; l++) {
            if (!((n_leaves >> l) & 1)) continue;
            float *dst = l == top ? levels[top] + off + k0 : acc;
            qt_vec_add(dst, levels[l] + off + k0, sum, c);
            sum = acc;
        }
    }
}

void qt_tree_finalize(float *const *levels, int64_t n, int64_t n_leaves)
{
    qt_tree_finalize_range(levels, 0, n, n_leaves);
}

int qt_tree_levels_needed(int64_t n_leaves)
{
    int l = 1;
    while (n_leaves >> l) l++;
    return l;
}
