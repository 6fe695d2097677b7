/* qt_leaf_carry.h - the leaf-tree carry a writing weight-gradient kernel may apply in its
 * epilogue (the contract between the interpreter, the WGRAD wrappers and the kernels).
 *
 * The pairwise tree of runtime/qt_tree.h pushes an odd leaf r of a parameter by a carry
 * into the first clear level `top` of the leaf index:
 *     levels[top][e] = L[top-1][e] + (... + (L[1][e] + (L[0][e] + r[e])))
 * (qt_tree_push: earlier leaves on the left, the additions from level 0 up). A kernel that
 * writes r (WGRAD_WRITES: r[e] = (+0) + its sum) can form this value itself as soon as r[e]
 * is final and store it straight into the level, instead of storing r into the leaf scratch
 * for qt_tree_push to read back: the same float additions in the same operand order, so the
 * same bits, in the same place.
 * Invariants: n >= 1 addends (levels 0..n-1, add[l] at the parameter's offset); dst is the
 * level n region of the same parameter and overlaps no addend (the tree's levels are
 * disjoint regions); every pointer covers the parameter's numel floats with the kernel's
 * layout of dW (row-major [N, K] for a matmul weight). A kernel may use dst for its own
 * partial sums before the epilogue (dst is free until the carry is stored).
 */
#ifndef QT_LEAF_CARRY_H
#define QT_LEAF_CARRY_H

#include <stdint.h>

/* At most the tree's levels minus one addends (qt_plan.h QT_MAX_TREE_LEVELS = 24). */
#define QT_LEAF_CARRY_MAX 23

/* dst[e] = add[n-1][e] + (... + (add[1][e] + (add[0][e] + r[e]))), r the leaf value. */
typedef struct qt_leaf_carry {
    int32_t n;                           /* addends, 1..QT_LEAF_CARRY_MAX */
    const float *add[QT_LEAF_CARRY_MAX]; /* add[l]: tree level l at the parameter */
    float *dst;                          /* tree level n at the parameter */
} qt_leaf_carry;

/* What the interpreter offers a WGRAD wrapper through qt_ctx.wgrad_epi (qt_ops.h): for an
 * odd leaf of a WGRAD_WRITES kind, per parameter slot k, the carry of that leaf. A wrapper
 * that applies carry[k] sets done[k] = 1 and leaves dw[k] untouched; one that does not (a
 * kind or precision without the fused epilogue) ignores the offer, writes dw[k] (the leaf
 * scratch) as always, and the interpreter pushes it with qt_tree_push. */
/* Before the first sequence of a WGRAD op the interpreter may also offer every leaf of the
 * call at once (qt_wgrad_epi.leaves): leaf s (sequence s of the op) goes to dw[s][k] (an
 * even leaf: tree level 0, written whole as the wrapper's dw) or, when carried[s], to
 * carry[s][k] (an odd leaf: its carry for slot k; qt_tree_push would read and write the
 * same levels). A wrapper that computes them all (each leaf's values as its own call would,
 * each tree level element seeing the same operations in leaf order) sets done = 1, and the
 * interpreter then makes no further call and no push for the op; one that does not ignores
 * the offer and the leaves run one by one as always. */
#define QT_WGRAD_LEAVES_MAX 16
typedef struct qt_wgrad_leaves {
    int32_t n;                                     /* leaves: sequences 0..n-1 of the op */
    uint8_t carried[QT_WGRAD_LEAVES_MAX];          /* 1: carry[s], 0: dw[s] */
    float *dw[QT_WGRAD_LEAVES_MAX][2];             /* slot k's level-0 region (NULL: none) */
    qt_leaf_carry carry[QT_WGRAD_LEAVES_MAX][2];   /* slot k's carry (n = 0: no slot) */
    uint8_t done;                                  /* written by the wrapper */
} qt_wgrad_leaves;

typedef struct qt_wgrad_epi {
    const qt_leaf_carry *carry[2]; /* NULL: no offer for that slot */
    uint8_t done[2];               /* written by the wrapper */
    qt_wgrad_leaves *leaves;       /* NULL, or (the op's first sequence) every leaf at once */
} qt_wgrad_epi;

#endif
