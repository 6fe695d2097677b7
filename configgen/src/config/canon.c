/* config/canon.c - the plan's canonical counts (kernels/matmul_canon.h): the blocks of a
 * canonically blocked contraction and the head groups of a per-head norm weight's sum.
 *
 * With canonical_factor f = 1 (the default) a count is qt_canon_blocks: the largest power of
 * two <= QT_CANON_BLOCKS dividing the length, so every plan without the key keeps its tables.
 * With an odd f > 1 (issue 35, docs/determinism.md "Axes of any size") it is f x the largest
 * power of two p with f x p <= QT_CANON_BLOCKS dividing the length (3: 6 or 3 blocks), and
 * qt_canon_blocks when f does not divide the length. The kernels' trees over the blocks (the
 * copying path's qt_canon_tree, qt_op_group_finish) are the binary counter for any count, so
 * ranks that each hold a power of two of the blocks, aligned, combined in the counter's shape
 * across the ranks, give one rank's bits with the same factor: an axis of size f x 2^j can
 * split them. Invariant: the result divides n (or is 1) and is at most QT_CANON_BLOCKS.
 */
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "../../firmware/kernels/matmul_canon.h"

int64_t qt_cg_canon(const qt_cg_settings *s, int64_t n)
{
    const int64_t f = s->canon_factor > 1 ? s->canon_factor : 1;
    if (f > 1 && n > 0 && n % f == 0) {
        int64_t p = 1;
        while (f * p * 2 <= QT_CANON_BLOCKS) p *= 2;
        for (; p >= 1; p /= 2)
            if (n % (f * p) == 0) return f * p;
    }
    return qt_canon_blocks(n, 1);
}
