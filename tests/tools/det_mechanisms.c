/* det_mechanisms.c - measures the two weight-gradient determinism mechanisms of docs/design.md
 * section 6 on one rank, for `make bench` (figures, not assertions):
 *  (a) the pairwise tree over per-sequence leaves, as the firmware runs it (qt_tree_push,
 *      qt_tree_finalize from firmware/runtime/tree.c);
 *  (b) an exact, order-independent fixed-point accumulator: every leaf element scaled onto a
 *      fixed 2^-60 grid and added into a 128-bit integer per element, converted back once.
 *      (A grid fixed per tensor is only exact for values above 2^-36 here; a fully exact
 *      binned accumulator costs more still, so (b) is a lower bound on its cost.)
 * usage: det_mechanisms [elements] [leaves]   (default: the bench plan's 69096768 and 4)
 * The tool is not firmware: it allocates its buffers on the heap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qt_plan.h"
#include "runtime/qt_tree.h"

static double qt_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *qt_buf(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) { fprintf(stderr, "det_mechanisms: out of memory (%zu bytes)\n", bytes); exit(1); }
    memset(p, 0, bytes); /* touch every page before timing */
    return p;
}

int main(int argc, char **argv)
{
    const int64_t n = argc > 1 ? atoll(argv[1]) : 69096768;
    const int64_t leaves = argc > 2 ? atoll(argv[2]) : 4;
    const int levels = qt_tree_levels_needed(leaves);
    if (n <= 0 || leaves <= 0 || levels > QT_MAX_TREE_LEVELS) {
        fprintf(stderr, "usage: det_mechanisms [elements > 0] [leaves > 0]\n");
        return 2;
    }
    float *lv[QT_MAX_TREE_LEVELS] = {0};
    for (int l = 0; l < levels; l++) lv[l] = qt_buf((size_t)n * 4);
    float *scratch = qt_buf((size_t)n * 4), *leaf = qt_buf((size_t)n * 4);
    uint64_t s = 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        leaf[i] = (float)((int64_t)(s >> 11) - (1ll << 52)) * 1e-16f;
    }

    double t0 = qt_now();
    for (int64_t k = 0; k < leaves; k++) {
        float *d = qt_tree_leaf_dest(lv, 0, scratch, k);
        memcpy(d, leaf, (size_t)n * 4); /* stands for the kernel writing the leaf */
        qt_tree_push(lv, 0, n, scratch, k);
    }
    qt_tree_finalize(lv, n, leaves);
    const double t_tree = qt_now() - t0;

    int64_t *hi = qt_buf((size_t)n * 8);
    uint64_t *lo = qt_buf((size_t)n * 8);
    float *out = qt_buf((size_t)n * 4);
    t0 = qt_now();
    for (int64_t k = 0; k < leaves; k++) {
        memcpy(scratch, leaf, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            int64_t q = (int64_t)((double)scratch[i] * 1152921504606846976.0); /* 2^60 */
            unsigned __int128 acc = ((unsigned __int128)(uint64_t)hi[i] << 64) | lo[i];
            acc += (unsigned __int128)(__int128)q;
            hi[i] = (int64_t)(acc >> 64);
            lo[i] = (uint64_t)acc;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        __int128 a = ((__int128)hi[i] << 64) | lo[i];
        out[i] = (float)((double)a * 8.673617379884035e-19); /* 2^-60 */
    }
    const double t_exact = qt_now() - t0;

    const double mib = 1048576.0;
    printf("weight-gradient determinism, %lld elements, %lld leaves per step:\n",
           (long long)n, (long long)leaves);
    printf("  pairwise tree          %8.1f ms/step, %6.0f MiB beyond the gradient\n",
           t_tree * 1e3, (double)(levels - 1) * (double)n * 4.0 / mib);
    printf("  exact 128-bit fixed pt %8.1f ms/step, %6.0f MiB beyond the gradient\n",
           t_exact * 1e3, (double)n * 16.0 / mib);
    return out[0] != out[0]; /* keeps the conversion from being optimised away */
}
