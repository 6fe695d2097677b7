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
 * split them. A tensor x context group over QT_CANON_BLOCKS ranks with canonical_factor
 * unset raises the cap to its size (s->canon_max, config/settings.c mesh_canon): counts up
 * to that, the plan's own bits (no one-rank plan has them); a composite implied f (15 for
 * tensor 3 x context 5) takes its largest odd factor dividing the length (for a prime f,
 * every factor a user can set, that is f or nothing, as above). Invariant: the result divides n
 * (or is 1) and is at most the cap (QT_CANON_BLOCKS unless s->canon_max is larger).
 */
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "../../firmware/kernels/matmul_canon.h"

int64_t qt_cg_canon(const qt_cg_settings *s, int64_t n)
{
    const int64_t f = s->canon_factor > 1 ? s->canon_factor : 1;
    const int64_t cap = s->canon_max > QT_CANON_BLOCKS ? s->canon_max : QT_CANON_BLOCKS;
    /* f itself, else (a composite f, only ever implied: 15 for tensor 3 x context 5) its
     * largest factor dividing n; for a prime f (every factor a user can set) that is f */
    for (int64_t d = f; d > 1; d--) {
        if (f % d || d % 2 == 0 || n <= 0 || n % d) continue;
        int64_t p = 1;
        while (d * p * 2 <= cap) p *= 2;
        for (; p >= 1; p /= 2)
            if (n % (d * p) == 0) return d * p;
    }
    if (cap == QT_CANON_BLOCKS) return qt_canon_blocks(n, 1);
    int64_t nb = 1; /* the largest power of two <= cap dividing n, as qt_canon_blocks */
    while (nb * 2 <= cap && n > 0 && n % (nb * 2) == 0) nb *= 2;
    return nb;
}
