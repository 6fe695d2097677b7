/* coll_check.c - checks the collectives of firmware/comm/qt_coll.h under mpiexec (run by
 * tests/e2e/60_collectives.sh).
 *
 * usage: mpiexec -n R coll_check [--dcn d,f,t,e,c] [--mismatch | --timeout | --bench | --ctx |
 *        --p2p S]
 *        D [F [T [E [C]]]]
 *   mesh sizes data, fsdp, tensor, expert, context (missing = 1); product must be R;
 *   --dcn: the slices of each axis (dividing it; ranks slice-major, qt_plan.h
 *   qt_mesh_coords, re-derived here), so the group and all-gather checks cover several
 *   slices (the all-gather crosses slices first there).
 *   (default)   for every group mask (see "Per mask or per group" below): group arithmetic
 *               against an independent enumeration;
 *               reduce-scatter bit-exact against a locally computed perfect pairwise tree of
 *               every member's input (every rank regenerates every input), with several
 *               block and scratch sizes, and non-vacuity (differs from the left-to-right sum
 *               and from the high-bit-first tree somewhere when R >= 4, from the own input
 *               when R >= 2); a group that is not a power of two against the one-rank leaf
 *               tree's binary-counter shape (counter_sum, written from qt_tree.h's
 *               definition; QT_E_PLAN with less than R-1 floats of scratch); all-gather; broadcast
 *               from every root; uint64/int64 sums; all-to-all counts and v with uneven
 *               counts including zeros (gaps between blocks must stay untouched), also split
 *               (two in flight beside a split reduce-scatter, against the blocking call); the
 *               fixed-size all-to-all and its refusals; the expert dispatch in rounds
 *               (check_ep_rounds: counts, rounds, rows to hosts and home against the
 *               whole dispatch's order, a too-large leaf refused); the split all-gather
 *               alone (in check_all_gather); plan check with equal hashes; the
 *               context exchange ops (as --ctx). Every rank's failures are summed; exit 0
 *               iff none.
 *               Per mask or per group (run_checks): masks that differ only in axes of one
 *               rank name the same group (the same members in the same order; mesh 2 2 2
 *               has 8 distinct groups among the 32 masks, 7 7 has 2). The group arithmetic
 *               (check_group) and the checks whose firmware reads the mask beyond the group
 *               tables run on EVERY mask: the all-gathers (their order takes the mask's
 *               slice digits, qt_coll_slice_bits: check_all_gather (blocking and split),
 *               check_ep_rounds whose counts travel by all-gather). Everything else (the
 *               reduce-scatter, the units of both forms, the split collectives and units,
 *               broadcast, the integer sums and max, the all-to-alls, the context
 *               exchange) sees the mask only through
 *               qt_comm_group_size / index / rank, so it runs once per distinct member list,
 *               on the first mask in increasing order that names it: a duplicate mask would
 *               run the same code over the same ranks with the same bits. The ranks must
 *               agree on which mask is first (checked); the count skipped is printed.
 *   --p2p S     the pipeline's point-to-point messages on S stages (run_p2p): pairing,
 *               bytes, 1f1b order with unflushed sends, gpipe with 2 circular repeats (the
 *               wrap-around pairing) and, for S dividing 4, the same in interleaved 1f1b
 *               order (qt_pp_sched.h), a short message refused, the
 *               all-gather over the stage peers.
 *   --ctx       for every group mask the group arithmetic, and once per distinct member
 *               list (as above; the op's start-up check reads the mask only for the group's
 *               size) context parallelism's exchange ops (qt_ops.def CTX_TO_HEADS,
 *               CTX_TO_HEADS_BWD, CTX_TO_TOKENS, CTX_TO_TOKENS_BWD) through their
 *               kernel-table entries (start-up check and wrapper) on a hand-made plan of
 *               this mesh, C = the group's size, fp32 and
 *               bf16, two shapes (and with C >= 2 two of uneven ownership, a6 u > 0):
 *               every output element bit-exact against the layouts' definition written out
 *               here (padding slots: zeros) (the BWD kinds: the initial value plus it, one
 *               add, bf16 rounded once), and non-vacuous when R >= 2.
 *   --mismatch  the last rank passes another plan hash: every rank must get QT_E_MISMATCH
 *               (exit 0 iff all did).
 *   --timeout   deadline 1 s; the last rank sleeps 20 s before a reduce-scatter: the others
 *               must return QT_E_COMM naming a silent rank, then the job is aborted with
 *               code 3 (so the expected exit status is 3, well before 20 s).
 *   --bench     64 MiB reduce-scatter over the whole mesh (median of 5, scratch 1 MiB and
 *               16 MiB; result verified), 64 MiB all-gather and a raw 32 MiB exchange for
 *               reference; prints figures, asserts only the bits. Under
 *               LD_PRELOAD=build/tools/libheap_audit.so the timed calls (after one warm-up
 *               each) are audited for heap calls.
 * The tool is not firmware: it uses the heap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qt_plan.h"
#include "qt_err.h"
#include "comm/qt_comm.h"
#include "comm/qt_coll.h"
#include "qt_ops.h"
#include "qt_pp_sched.h"
#include "parallel/cp_pack.h"
#include "parallel/ep_rounds.h"
#include "ops/qt_ep_rounds.h"
#include "kernels/bf16.h"
#include "runtime/qt_tree.h"

/* Defined by build/tools/libheap_audit.so when preloaded: counts heap calls while marked. */
void qt_heap_audit_mark(int in_steps) __attribute__((weak));

static void audit(int on)
{
    if (qt_heap_audit_mark) qt_heap_audit_mark(on);
}

static struct {
    int rank, size;
    int32_t mesh[QT_MESH_COUNT];
    int32_t dcn[QT_MESH_COUNT];   /* slices per axis (--dcn), 1 = one slice */
    long fails, checks;
} cc;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        cc.checks++;                                                                       \
        if (!(cond)) {                                                                     \
            cc.fails++;                                                                    \
            if (cc.fails <= 20) {                                                          \
                fprintf(stderr, "coll_check: rank %d: FAIL %s:%d: ", cc.rank, __FILE__,    \
                        __LINE__);                                                         \
                fprintf(stderr, __VA_ARGS__);                                              \
                fputc('\n', stderr);                                                       \
            }                                                                              \
        }                                                                                  \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t key(uint64_t a, uint64_t b, uint64_t c)
{
    return mix(mix(mix(a) ^ b) ^ c);
}

/* Input float of world rank w, element e, case salt: random sign, mantissa, and exponent
 * in [-8, 8], so sums round differently in different orders. */
static float val(int w, int64_t e, uint64_t salt)
{
    uint64_t h = key((uint64_t)w, (uint64_t)e, salt);
    uint32_t bits = (uint32_t)(h & 0x7fffff) | (uint32_t)(127 - 8 + (int)((h >> 23) % 17)) << 23 |
                    (uint32_t)((h >> 40) & 1) << 31;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "coll_check: out of memory\n"); exit(2); }
    return p;
}

/* Independent reference of the group definition: the members of my group `mask` are the
 * world ranks sharing my coordinates off the mask, in ascending world rank order. */
static void coords_of(int r, int32_t *c)
{
    /* slice-major: r = slice * (ranks per slice) + rank in the slice, each mixed radix
     * (data most significant); coordinate = slice digit * ici size + ici digit */
    int per = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) per *= cc.mesh[a] / cc.dcn[a];
    int slice = r / per, in = r % per;
    for (int a = QT_MESH_COUNT - 1; a >= 0; a--) {
        const int ici = cc.mesh[a] / cc.dcn[a];
        c[a] = (slice % cc.dcn[a]) * ici + in % ici;
        slice /= cc.dcn[a];
        in /= ici;
    }
}

/* My group `mask`'s index of coordinates c: mixed radix over the masked axes. */
static int group_index_of(unsigned mask, const int32_t *c)
{
    int gi = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1u << a)) gi = gi * cc.mesh[a] + c[a];
    return gi;
}

static int ref_members(unsigned mask, int *members)
{
    int32_t me[QT_MESH_COUNT], c[QT_MESH_COUNT];
    coords_of(cc.rank, me);
    int n = 0;
    for (int r = 0; r < cc.size; r++) {
        coords_of(r, c);
        int same = 1;
        for (int a = 0; a < QT_MESH_COUNT; a++)
            if (!(mask & (1u << a)) && c[a] != me[a]) same = 0;
        if (same) members[group_index_of(mask, c)] = r, n++;
    }
    return n;
}

/* Perfect pairwise tree ((x0+x1)+(x2+x3))+... of x[0..R) (R a power of two), in place. */
static float tree_sum(float *x, int R)
{
    for (int w = 1; w < R; w *= 2)
        for (int j = 0; j + w < R; j += 2 * w) x[j] = x[j] + x[j + w];
    return x[0];
}

/* The one-rank leaf tree of runtime/qt_tree.h over R leaves, written as its definition: a
 * binary counter of complete subtrees (pushing leaf i carries it up through the occupied
 * levels, earlier on the left), then the occupied levels combined lowest first. For R a
 * power of two this is tree_sum. */
static float counter_sum(const float *x, int R)
{
    float level[32];
    unsigned occupied = 0;
    for (int i = 0; i < R; i++) {
        float carry = x[i];
        int l = 0;
        while (occupied & (1u << l)) {
            carry = level[l] + carry;
            occupied &= ~(1u << l);
            l++;
        }
        level[l] = carry;
        occupied |= 1u << l;
    }
    int have = 0;
    float acc = 0;
    for (int l = 0; l < 32; l++)
        if (occupied & (1u << l)) {
            acc = have ? level[l] + acc : level[l];
            have = 1;
        }
    return acc;
}

/* The tree with the pairing of high bits first: ((x0+x2)+(x1+x3)) for R = 4. */
static float tree_sum_high_first(float *x, int R)
{
    for (int w = R / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) x[j] = x[j] + x[j + w];
    return x[0];
}

static void check_group(unsigned mask, const int *members, int R, int idx)
{
    CHECK(qt_comm_group_size(mask) == R, "mask 0x%x: group size %d, expected %d", mask,
          qt_comm_group_size(mask), R);
    CHECK(idx >= 0 && idx < R && members[idx] == cc.rank,
          "mask 0x%x: group index %d does not name my rank %d", mask, idx, cc.rank);
    for (int j = 0; j < R; j++)
        CHECK(qt_comm_group_rank(mask, j) == members[j], "mask 0x%x: member %d is rank %d, "
              "expected %d", mask, j, qt_comm_group_rank(mask, j), members[j]);
    CHECK(qt_comm_group_rank(mask, R) < 0, "mask 0x%x: member %d out of range accepted", mask, R);
}

/* The step form's units (qt_coll_reduce_units_f32, issue 35): member m holds L = q*U leaves
 * of every element, global leaves [m*L, (m+1)*L); it reduces each unit of U leaves locally
 * (the perfect tree, as its leaf tree does), and the exchange and fold must give every
 * owner the one-rank leaf tree over all R*L leaves (counter_sum over them) bit for bit, for
 * q = 1, 3, 5 and U = 1, 2, several block and scratch sizes (results in unit q-1, the
 * gradient region, or a separate buffer); not vacuous: for q > 1 it differs somewhere from
 * the rank-local tree over L leaves continued over the R totals (the old bits). */
static void check_reduce_units(unsigned mask, const int *members, int R, int idx)
{
    static const struct { int q, U; int64_t blk, tmp; int sep; } cases[] = {
        {1, 2, 37, 16, 0}, {3, 2, 37, 12, 0}, {3, 1, 4099, 1000, 1}, {5, 2, 1001, 1 << 12, 0},
        {3, 2, 70001, 1 << 18, 1}, {3, 2, 0, 16, 0}};
    long diff_old = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int q = cases[c].q, U = cases[c].U, L = q * U, N = R * L;
        const int64_t blk = cases[c].blk, n = R * blk;
        if (R * q > 1024 || N > 4096) continue;
        const uint64_t salt = 5000 + c;
        float *unit[8], *tmp = xmalloc((size_t)cases[c].tmp * 4);
        float *sep = xmalloc((size_t)(n + 1) * 4);
        float *x = xmalloc((size_t)N * 4), *tot = xmalloc((size_t)R * 4);
        for (int u = 0; u < q; u++) {
            unit[u] = xmalloc((size_t)(n + 1) * 4);
            for (int64_t e = 0; e < n; e++) {
                float lv[64];
                for (int v = 0; v < U; v++)
                    lv[v] = val(cc.rank, e * 64 + u * U + v, salt);
                unit[u][e] = tree_sum(lv, U);
            }
        }
        float *out = cases[c].sep ? sep : unit[q - 1];
        int rc = qt_coll_reduce_units_f32(mask, unit, q, blk, out, tmp, cases[c].tmp);
        CHECK(rc == 0, "mask 0x%x: reduce_units q %d blk %lld returned %d", mask, q,
              (long long)blk, rc);
        long bad = 0;
        for (int64_t i = 0; i < blk && rc == 0; i++) {
            const int64_t e = idx * blk + i;
            for (int m = 0; m < R; m++)
                for (int k = 0; k < L; k++) x[m * L + k] = val(members[m], e * 64 + k, salt);
            const float want = counter_sum(x, N);
            for (int m = 0; m < R; m++) tot[m] = counter_sum(x + m * L, L);
            diff_old += fbits(want) != fbits(counter_sum(tot, R));
            if (fbits(out[e]) != fbits(want) && bad++ < 3)
                fprintf(stderr, "coll_check: rank %d: mask 0x%x units q %d U %d elem %lld: got "
                        "%a, one-rank tree %a\n", cc.rank, mask, q, U, (long long)i,
                        (double)out[e], (double)want);
        }
        CHECK(bad == 0, "mask 0x%x: reduce_units q %d U %d blk %lld scratch %lld: %ld of %lld "
              "elements differ from the one-rank leaf tree", mask, q, U, (long long)blk,
              (long long)cases[c].tmp, bad, (long long)blk);
        for (int u = 0; u < q; u++) free(unit[u]);
        free(tmp);
        free(sep);
        free(x);
        free(tot);
    }
    if (R >= 2)
        CHECK(diff_old > 0, "mask 0x%x: the units never differ from the rank-local tree "
              "continued over the ranks (vacuous)", mask);
    if (R >= 2 && cc.rank == 0)
        printf("coll_check: mask 0x%02x R=%d reduce_units bit-exact against the one-rank leaf "
               "tree; differs from the rank-local tree in %ld elements\n", mask, R, diff_old);
}

/* The microbatch form's units (qt_coll_exchange_units_f32 + qt_tree_push_units, issue 35):
 * microbatch mb of member m holds L = q*U leaves of every element, global leaves
 * [(mb*R + m)*L, +L) (microbatch-major, docs/determinism.md); each member reduces each unit
 * of U leaves locally (the perfect tree), the exchange gives every owner the R*q pieces of its
 * block, which it pushes as leaves mb*R*q + m*q + u of one counter over the step's G*R*q
 * units; after G microbatches the counter's total must be the one-rank leaf tree over all
 * G*R*L leaves (counter_sum over them) bit for bit, for G = 1, 2, 3, 5, q = 1, 3, 5, U = 1,
 * 2, 4; not vacuous: it differs somewhere from the microbatch form's current bits (each
 * microbatch's R rank-local totals in the counter shape, then a counter over G). */
static void check_units_mb(unsigned mask, const int *members, int R, int idx)
{
    static const struct { int G, q, U; int64_t blk, tmp; } cases[] = {
        {2, 3, 1, 37, 12}, {2, 3, 2, 1001, 1 << 12}, {3, 1, 2, 513, 64}, {2, 1, 4, 129, 16},
        {5, 3, 1, 77, 100}, {3, 5, 2, 33, 1 << 10}, {1, 3, 2, 65, 30}, {2, 3, 2, 0, 16}};
    long diff_old = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int G = cases[c].G, q = cases[c].q, U = cases[c].U, L = q * U, N = G * R * L;
        const int64_t blk = cases[c].blk, n = R * blk, M = (int64_t)G * R * q;
        if (R * q > 1024 || N > 4096 || L > 64 || G > 8) continue;
        const uint64_t salt = 7000 + c;
        const int nl = qt_tree_levels_needed(M);
        float *unit[8], *lv[QT_MAX_TREE_LEVELS], *tmp = xmalloc((size_t)cases[c].tmp * 4);
        float *x = xmalloc((size_t)N * 4), *tot = xmalloc((size_t)(G * R + G) * 4);
        for (int l = 0; l < nl; l++) lv[l] = xmalloc((size_t)(blk + 1) * 4);
        for (int u = 0; u < q; u++) unit[u] = xmalloc((size_t)(n + 1) * 4);
        int rc = 0;
        for (int mb = 0; mb < G && rc == 0; mb++) {
            for (int u = 0; u < q; u++)
                for (int64_t e = 0; e < n; e++) {
                    float leaf[64];
                    for (int v = 0; v < U; v++)
                        leaf[v] = val(cc.rank, (e * 8 + mb) * 64 + u * U + v, salt);
                    unit[u][e] = tree_sum(leaf, U);
                }
            rc = qt_coll_exchange_units_f32(mask, unit, q, blk, tmp, cases[c].tmp);
            CHECK(rc == 0, "mask 0x%x: exchange_units G %d q %d blk %lld returned %d", mask, G,
                  q, (long long)blk, rc);
            if (rc == 0 && blk > 0)
                qt_tree_push_units(lv, 0, blk, unit, R, q, blk, (int64_t)mb * R * q);
        }
        if (rc == 0 && blk > 0) qt_tree_finalize_range(lv, 0, blk, M);
        long bad = 0;
        for (int64_t i = 0; i < blk && rc == 0; i++) {
            const int64_t e = idx * blk + i;
            for (int mb = 0; mb < G; mb++)
                for (int m = 0; m < R; m++)
                    for (int k = 0; k < L; k++)
                        x[(mb * R + m) * L + k] = val(members[m], (e * 8 + mb) * 64 + k, salt);
            const float want = counter_sum(x, N);
            for (int mb = 0; mb < G; mb++) {
                for (int m = 0; m < R; m++)
                    tot[mb * R + m] = counter_sum(x + (mb * R + m) * L, L);
                tot[G * R + mb] = counter_sum(tot + mb * R, R);
            }
            diff_old += fbits(want) != fbits(counter_sum(tot + G * R, G));
            if (fbits(lv[nl - 1][i]) != fbits(want) && bad++ < 3)
                fprintf(stderr, "coll_check: rank %d: mask 0x%x microbatch units G %d q %d U %d "
                        "elem %lld: got %a, one-rank tree %a\n", cc.rank, mask, G, q, U,
                        (long long)i, (double)lv[nl - 1][i], (double)want);
        }
        CHECK(bad == 0, "mask 0x%x: microbatch units G %d q %d U %d blk %lld scratch %lld: %ld of "
              "%lld elements differ from the one-rank leaf tree", mask, G, q, U, (long long)blk,
              (long long)cases[c].tmp, bad, (long long)blk);
        for (int u = 0; u < q; u++) free(unit[u]);
        for (int l = 0; l < nl; l++) free(lv[l]);
        free(tmp);
        free(x);
        free(tot);
    }
    if (R >= 2)
        CHECK(diff_old > 0, "mask 0x%x: the microbatch units never differ from the microbatch "
              "form's current tree (vacuous)", mask);
    if (R >= 2 && cc.rank == 0)
        printf("coll_check: mask 0x%02x R=%d microbatch units bit-exact against the one-rank leaf "
               "tree; differ from the microbatch form's current tree in %ld elements\n", mask, R,
               diff_old);
}

static void check_reduce_scatter(unsigned mask, const int *members, int R, int idx)
{
    static const struct { int64_t blk, tmp; } cases[] = {
        {1, 2}, {37, 10}, {4099, 1000}, {70001, 1 << 18}, {70001, 1 << 20}, {0, 16}};
    const int pow2 = (R & (R - 1)) == 0;
    long diff_lin = 0, diff_high = 0, diff_own = 0, bad_ref = 0;
    float x[64], y[64];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t blk = cases[c].blk, tmpn = cases[c].tmp, n = R * blk;
        const uint64_t salt = 1000 + c;
        float *buf = xmalloc((size_t)n * 4), *tmp = xmalloc((size_t)tmpn * 4);
        for (int64_t e = 0; e < n; e++) buf[e] = val(cc.rank, e, salt);
        /* a group that is not a power of two needs R-1 floats of scratch */
        const int short_tmp = !pow2 && R > 2 && blk > 0 && tmpn < R - 1;
        if (short_tmp) qt_set_quiet(1);
        int rc = qt_coll_reduce_scatter_f32(mask, buf, blk, tmp, tmpn);
        qt_set_quiet(0);
        if (short_tmp) {
            CHECK(rc == QT_E_PLAN, "mask 0x%x: reduce-scatter over %d ranks with %lld floats "
                  "of scratch returned %d, expected QT_E_PLAN", mask, R, (long long)tmpn, rc);
            free(buf);
            free(tmp);
            continue;
        }
        CHECK(rc == 0, "mask 0x%x: reduce-scatter blk %lld returned %d", mask, (long long)blk, rc);
        long bad = 0;
        for (int64_t i = 0; i < blk && R <= 64; i++) {
            const int64_t e = idx * blk + i;
            float lin = 0;
            for (int m = 0; m < R; m++) {
                x[m] = y[m] = val(members[m], e, salt);
                lin = m ? lin + x[m] : x[m];
            }
            const float own = x[idx];
            const float hi = tree_sum_high_first(y, R);
            const float cs = counter_sum(x, R);
            const float want = pow2 ? tree_sum(x, R) : cs;
            if (pow2 && fbits(cs) != fbits(want)) bad_ref++;
            if (fbits(buf[e]) != fbits(want)) {
                if (bad++ < 3)
                    fprintf(stderr, "coll_check: rank %d: mask 0x%x blk %lld elem %lld: got "
                            "%a, tree %a\n", cc.rank, mask, (long long)blk, (long long)i,
                            (double)buf[e], (double)want);
            }
            diff_lin += fbits(want) != fbits(lin);
            diff_high += fbits(want) != fbits(hi);
            diff_own += fbits(want) != fbits(own);
        }
        CHECK(bad == 0, "mask 0x%x: reduce-scatter blk %lld scratch %lld: %ld of %lld elements "
              "differ from the pairwise tree", mask, (long long)blk, (long long)tmpn, bad,
              (long long)blk);
        free(buf);
        free(tmp);
    }
    CHECK(bad_ref == 0, "mask 0x%x: the counter tree differs from the pairwise tree on %ld "
          "elements of a power-of-two group (the reference is wrong)", mask, bad_ref);
    if (R >= 2) CHECK(diff_own > 0, "mask 0x%x: result equals my own input (vacuous)", mask);
    if (!pow2) {
        if (R >= 3) CHECK(diff_lin > 0 || R == 3, "mask 0x%x: the tree equals the left-to-right "
                          "sum everywhere (vacuous)", mask);
        return;
    }
    if (R >= 4) {
        CHECK(diff_lin > 0, "mask 0x%x: result never differs from the left-to-right sum", mask);
        CHECK(diff_high > 0, "mask 0x%x: result never differs from the high-bit-first tree",
              mask);
    }
    if (R >= 2 && cc.rank == 0)
        printf("coll_check: mask 0x%02x R=%d reduce-scatter bit-exact; differs from "
               "left-to-right sum in %ld, from high-bit-first tree in %ld elements\n", mask, R,
               diff_lin, diff_high);
}

static uint8_t pat(int w, int64_t k, uint64_t salt)
{
    return (uint8_t)key((uint64_t)w, (uint64_t)k, salt);
}

/* The all-gather, blocking and (split = 1) split alone (qt_coll_start_range / progress /
 * wait_range over an ALL_GATHER row): every member's block in place, several sizes. Run on
 * every mask: both cursors take qt_coll_slice_bits(mask). */
static void check_all_gather(unsigned mask, const int *members, int R, int idx)
{
    static const int64_t sizes[] = {1, 13, 40000, 0};
    for (size_t c = 0; c < 2 * sizeof sizes / sizeof sizes[0]; c++) {
        const int64_t bb = sizes[c % 4];
        const int split = c >= 4;
        uint8_t *buf = xmalloc((size_t)(R * bb));
        memset(buf, 0xEE, (size_t)(R * bb));
        for (int64_t k = 0; k < bb; k++) buf[idx * bb + k] = pat(cc.rank, k, 7 + c);
        const qt_collective cg = {.name = "split gather", .kind = QT_COLL_ALL_GATHER,
                                  .mask = (uint8_t)mask, .bytes = R * bb};
        int rc = split ? qt_coll_start_range(4, &cg, buf, NULL, 0)
                       : qt_coll_all_gather(mask, buf, bb);
        for (int it = 0; split && it < 5 && rc == 0; it++) rc = qt_coll_progress();
        if (split) rc = rc ? rc : qt_coll_wait_range(4, &cg);
        CHECK(rc == 0 && qt_coll_in_flight() == 0, "mask 0x%x: %sall-gather %lld returned %d",
              mask, split ? "split " : "", (long long)bb, rc);
        long bad = 0;
        for (int j = 0; j < R; j++)
            for (int64_t k = 0; k < bb; k++) bad += buf[j * bb + k] != pat(members[j], k, 7 + c);
        CHECK(bad == 0, "mask 0x%x: %sall-gather of %lld-byte blocks: %ld bytes wrong", mask,
              split ? "split " : "", (long long)bb, bad);
        free(buf);
    }
}

static void check_broadcast(unsigned mask, const int *members, int R, int idx)
{
    static const int64_t sizes[] = {1, 1001, 300000};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        const int64_t nb = sizes[c];
        uint8_t *buf = xmalloc((size_t)nb);
        for (int root = 0; root < R; root++) {
            for (int64_t k = 0; k < nb; k++)
                buf[k] = idx == root ? pat(cc.rank, k, 50 + c) : 0xEE;
            int rc = qt_coll_broadcast(mask, buf, nb, root);
            CHECK(rc == 0, "mask 0x%x: broadcast returned %d", mask, rc);
            long bad = 0;
            for (int64_t k = 0; k < nb; k++) bad += buf[k] != pat(members[root], k, 50 + c);
            CHECK(bad == 0, "mask 0x%x: broadcast of %lld bytes from %d: %ld bytes wrong", mask,
                  (long long)nb, root, bad);
        }
        free(buf);
    }
    qt_set_quiet(1);
    CHECK(qt_coll_broadcast(mask, NULL, 1, R) == QT_E_PLAN, "mask 0x%x: root %d accepted", mask, R);
    qt_set_quiet(0);
}

static void check_sums(unsigned mask, const int *members, int R)
{
    static const int ns[] = {1, 1500, 3000};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        const int n = ns[c];
        uint64_t *u = xmalloc((size_t)n * 8);
        int64_t *s = xmalloc((size_t)n * 8);
        for (int i = 0; i < n; i++) {
            u[i] = key((uint64_t)cc.rank, (uint64_t)i, 90);
            s[i] = (int64_t)(key((uint64_t)cc.rank, (uint64_t)i, 91) % 2001) - 1000;
        }
        int rc = qt_coll_sum_u64(mask, u, n);
        CHECK(rc == 0, "mask 0x%x: sum_u64 returned %d", mask, rc);
        rc = qt_coll_sum_i64(mask, s, n);
        CHECK(rc == 0, "mask 0x%x: sum_i64 returned %d", mask, rc);
        long bad = 0;
        for (int i = 0; i < n; i++) {
            uint64_t wu = 0;
            int64_t ws = 0;
            for (int m = 0; m < R; m++) {
                wu += key((uint64_t)members[m], (uint64_t)i, 90);
                ws += (int64_t)(key((uint64_t)members[m], (uint64_t)i, 91) % 2001) - 1000;
            }
            bad += u[i] != wu;
            bad += s[i] != ws;
        }
        CHECK(bad == 0, "mask 0x%x: sums of %d values: %ld wrong", mask, n, bad);
        free(u);
        free(s);
    }
}

/* Elements world rank ws sends to world rank wd: 0..3, and 0 whenever (ws + 2 wd) % 3 == 0. */
static int64_t a2a_count(int ws, int wd)
{
    if ((ws + 2 * wd) % 3 == 0) return 0;
    return (int64_t)(key((uint64_t)ws, (uint64_t)wd, 70) % 4);
}

/* One all-to-all-v case: uneven counts (a2a_count) with gaps between the blocks on both
 * sides; the send blocks filled with pat, the receive buffer with 0xAB. */
typedef struct a2a_case {
    int64_t *sc, *so, *rc, *ro, stot, rtot;
    uint8_t *sbuf, *rbuf;
} a2a_case;

enum { A2A_EB = 12 };

static void a2a_case_make(unsigned mask, const int *members, int R, a2a_case *a)
{
    a->sc = xmalloc((size_t)R * 8), a->so = xmalloc((size_t)R * 8);
    a->rc = xmalloc((size_t)R * 8), a->ro = xmalloc((size_t)R * 8);
    memset(a->sc, 0, (size_t)R * 8);
    a->stot = a->rtot = 0;
    for (int j = 0; j < R; j++) {
        a->sc[j] = a2a_count(cc.rank, members[j]);
        a->so[j] = a->stot;
        a->stot += a->sc[j] + 1; /* one element gap */
    }
    int rc = qt_coll_all_to_all_counts(mask, a->sc, a->rc);
    CHECK(rc == 0, "mask 0x%x: all_to_all_counts returned %d", mask, rc);
    for (int j = 0; j < R; j++) {
        CHECK(a->rc[j] == a2a_count(members[j], cc.rank), "mask 0x%x: count from %d is %lld, "
              "expected %lld", mask, j, (long long)a->rc[j],
              (long long)a2a_count(members[j], cc.rank));
        a->ro[j] = a->rtot + 2;
        a->rtot += a->rc[j] + 2; /* two elements gap before each block */
    }
    a->rtot += 1;
    a->sbuf = xmalloc((size_t)(a->stot * A2A_EB)), a->rbuf = xmalloc((size_t)(a->rtot * A2A_EB));
    memset(a->sbuf, 0x11, (size_t)(a->stot * A2A_EB));
    memset(a->rbuf, 0xAB, (size_t)(a->rtot * A2A_EB));
    for (int j = 0; j < R; j++)
        for (int64_t k = 0; k < a->sc[j] * A2A_EB; k++)
            a->sbuf[a->so[j] * A2A_EB + k] = pat(cc.rank, members[j] * 1000003 + k, 71);
}

/* Bytes of a->rbuf that differ from what member j sent (*bad) or were written in a gap (*gap). */
static void a2a_case_check(const a2a_case *a, const int *members, int R, long *bad, long *gap)
{
    int64_t pos = 0;
    *bad = *gap = 0;
    for (int j = 0; j < R; j++) {
        for (; pos < a->ro[j] * A2A_EB; pos++) *gap += a->rbuf[pos] != 0xAB;
        for (int64_t k = 0; k < a->rc[j] * A2A_EB; k++, pos++)
            *bad += a->rbuf[pos] != pat(members[j], cc.rank * 1000003 + k, 71);
    }
    for (; pos < a->rtot * A2A_EB; pos++) *gap += a->rbuf[pos] != 0xAB;
}

static void a2a_case_free(a2a_case *a)
{
    free(a->sc); free(a->so); free(a->rc); free(a->ro); free(a->sbuf); free(a->rbuf);
}

static void check_all_to_all(unsigned mask, const int *members, int R, int idx)
{
    a2a_case a;
    a2a_case_make(mask, members, R, &a);
    int rc = qt_coll_all_to_all_v(mask, a.sbuf, a.sc, a.so, a.rbuf, a.rc, a.ro, A2A_EB);
    CHECK(rc == 0, "mask 0x%x: all_to_all_v returned %d", mask, rc);
    long bad, gap;
    a2a_case_check(&a, members, R, &bad, &gap);
    CHECK(bad == 0 && gap == 0, "mask 0x%x: all_to_all_v: %ld bytes wrong, %ld gap bytes "
          "written", mask, bad, gap);
    (void)idx;
    a2a_case_free(&a);
}

/* The split all-to-all-v (qt_coll_start_a2av / progress / wait, coll_async.c): two of them
 * and a split reduce-scatter in flight at once, the last started waited for at once, the
 * others progressed between rank-dependent amounts of "compute" and waited for in another
 * order than started, give every byte of the blocking call's result (gaps untouched) and
 * the reduce-scatter its blocking bits; a plan collective's id (>= 0) and a wait for an
 * exchange not in flight are refused. */
static void check_split_a2a(unsigned mask, const int *members, int R, int idx)
{
    enum { BLK = 5000 };
    a2a_case a, b;
    a2a_case_make(mask, members, R, &a);
    a2a_case_make(mask, members, R, &b);
    float *ref = xmalloc((size_t)R * BLK * 4), *x = xmalloc((size_t)R * BLK * 4);
    float *tmp = xmalloc((size_t)(R + 4096) * 4);
    for (int64_t e = 0; e < (int64_t)R * BLK; e++) ref[e] = x[e] = val(cc.rank, e, 5000);
    CHECK(qt_coll_reduce_scatter_f32(mask, ref, BLK, tmp, R + 4096) == 0, "blocking reference");
    const qt_collective cx = {.name = "split x", .kind = QT_COLL_REDUCE_SCATTER,
                              .mask = (uint8_t)mask, .bytes = 4 * (int64_t)R * BLK};
    int rc = qt_coll_start_a2av(-1, mask, a.sbuf, a.sc, a.so, a.rbuf, a.rc, a.ro, A2A_EB);
    rc = rc ? rc : qt_coll_start_range(7, &cx, (unsigned char *)x, tmp, R + 4096);
    rc = rc ? rc : qt_coll_start_a2av(-2, mask, b.sbuf, b.sc, b.so, b.rbuf, b.rc, b.ro, A2A_EB);
    CHECK(rc == 0, "mask 0x%x: split all_to_all_v starts: rc %d", mask, rc);
    /* the last started waited for at once (its wait does the transfers), the others after
     * progress between work */
    rc = rc ? rc : qt_coll_wait_a2av(-2, mask);
    long bad2, gap2;
    a2a_case_check(&b, members, R, &bad2, &gap2);   /* complete at its wait, not later */
    volatile double sink = 0;
    for (int it = 0; it < 20 && rc == 0; it++) {
        for (int w = 0; w < 2000 * (1 + (cc.rank + it) % 3); w++) sink += w * 1e-9;
        rc = qt_coll_progress();
    }
    rc = rc ? rc : qt_coll_wait_range(7, &cx);
    rc = rc ? rc : qt_coll_wait_a2av(-1, mask);
    CHECK(rc == 0 && qt_coll_in_flight() == 0, "mask 0x%x: split all_to_all_v waits: rc %d",
          mask, rc);
    long bad, gap, rs = 0;
    a2a_case_check(&a, members, R, &bad, &gap);
    for (int64_t i = 0; i < BLK; i++) rs += fbits(x[idx * BLK + i]) != fbits(ref[idx * BLK + i]);
    CHECK(bad + bad2 == 0 && gap + gap2 == 0 && rs == 0, "mask 0x%x: split all_to_all_v: %ld "
          "bytes wrong, %ld gap bytes written; the reduce-scatter beside it: %ld values differ",
          mask, bad + bad2, gap + gap2, rs);
    qt_set_quiet(1);
    CHECK(qt_coll_start_a2av(0, mask, a.sbuf, a.sc, a.so, a.rbuf, a.rc, a.ro, A2A_EB) ==
          QT_E_PLAN, "mask 0x%x: split all_to_all_v with id 0 accepted", mask);
    CHECK(R == 1 || qt_coll_wait_a2av(-3, mask) == QT_E_PLAN, "mask 0x%x: a wait for an "
          "exchange not in flight accepted", mask);
    qt_set_quiet(0);
    a2a_case_free(&a);
    a2a_case_free(&b);
    free(ref);
    free(x);
    free(tmp);
}

/* The fixed-size all-to-all (qt_coll_all_to_all): block j of my send buffer reaches member
 * j's block idx, every byte of recv is written (it starts as 0xAB), several block sizes
 * including 0; the refusals (overlapping buffers, a NULL buffer, a negative size) come
 * with a message naming the call. */
static void check_all_to_all_fixed(unsigned mask, const int *members, int R, int idx)
{
    static const int64_t sizes[] = {1, 12, 4099, 65536, 0};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        const int64_t bb = sizes[c];
        uint8_t *sbuf = xmalloc((size_t)(R * bb)), *rbuf = xmalloc((size_t)(R * bb));
        for (int j = 0; j < R; j++)
            for (int64_t k = 0; k < bb; k++)
                sbuf[j * bb + k] = pat(cc.rank, members[j] * 1000003 + k, 80 + c);
        memset(rbuf, 0xAB, (size_t)(R * bb));
        int rc = qt_coll_all_to_all(mask, sbuf, rbuf, bb);
        CHECK(rc == 0, "mask 0x%x: all_to_all of %lld-byte blocks returned %d", mask,
              (long long)bb, rc);
        long bad = 0;
        for (int j = 0; j < R; j++)
            for (int64_t k = 0; k < bb; k++)
                bad += rbuf[j * bb + k] != pat(members[j], cc.rank * 1000003 + k, 80 + c);
        CHECK(bad == 0, "mask 0x%x: all_to_all of %lld-byte blocks: %ld bytes wrong", mask,
              (long long)bb, bad);
        free(sbuf);
        free(rbuf);
    }
    (void)idx;
    uint8_t buf[64];
    qt_set_quiet(1);
    CHECK(qt_coll_all_to_all(mask, buf, buf + 4, 8) == QT_E_PLAN &&
              strstr(qt_last_error(), "all_to_all over mask") &&
              strstr(qt_last_error(), "overlap"),
          "mask 0x%x: all_to_all accepted overlapping buffers (%s)", mask, qt_last_error());
    CHECK(qt_coll_all_to_all(mask, NULL, buf, 8) == QT_E_PLAN &&
              strstr(qt_last_error(), "send NULL"),
          "mask 0x%x: all_to_all accepted a NULL send buffer (%s)", mask, qt_last_error());
    CHECK(qt_coll_all_to_all(mask, buf, buf + 32, -1) == QT_E_PLAN,
          "mask 0x%x: all_to_all accepted a negative block size", mask);
    qt_set_quiet(0);
}

/* The signed 64-bit maximum of qt_coll.def's MAX_I64, run as a plan collective through its
 * registry row (qt_coll_run_range): value i of member m from a key, value 0 the extremes
 * (INT64_MIN + m, and INT64_MAX - 1 on the last member) so an unsigned or a summing
 * combine shows. */
static int64_t max_value(int m, int idx, int R, int i)
{
    if (i == 0) return idx == R - 1 ? INT64_MAX - 1 : INT64_MIN + m;
    return (int64_t)(key((uint64_t)m, (uint64_t)i, 92) % 2001) - 1000;
}

static void check_max(unsigned mask, const int *members, int R, int idx)
{
    static const int ns[] = {1, 1500, 3000};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        const int n = ns[c];
        int64_t *v = xmalloc((size_t)n * 8);
        for (int i = 0; i < n; i++) v[i] = max_value(cc.rank, idx, R, i);
        const qt_collective coll = {"max check", QT_COLL_MAX_I64, (uint8_t)mask, 0, (int64_t)n * 8};
        CHECK(qt_coll_range_check(&coll, (int64_t)n * 8) == 0, "mask 0x%x: max_i64 of %d values "
              "refused", mask, n);
        int rc = qt_coll_run_range(&coll, (unsigned char *)v, NULL, 0);
        CHECK(rc == 0, "mask 0x%x: max_i64 returned %d", mask, rc);
        long bad = 0;
        for (int i = 0; i < n; i++) {
            int64_t w = max_value(members[0], 0, R, i);
            for (int m = 1; m < R; m++) {
                const int64_t x = max_value(members[m], m, R, i);
                if (x > w) w = x;
            }
            bad += v[i] != w;
        }
        CHECK(bad == 0, "mask 0x%x: max of %d values: %ld wrong", mask, n, bad);
        free(v);
    }
}

/* ---- context parallelism's head exchange (qt_ops.def CTX_*), through the op wrappers -- */

/* Element e of world rank w's tensor `salt`, stored in eb bytes: val()'s float, or its bf16
 * encoding. */
static void ctx_elem(void *dst, int64_t eb, int w, int64_t e, uint64_t salt)
{
    const float f = val(w, e, salt);
    const qt_bf16 h = qt_bf16_from_f32(f);
    memcpy(dst, eb == 4 ? (const void *)&f : (const void *)&h, (size_t)eb);
}

/* The layouts' definition (qt_ops.def CTX_*), written out: element e of group index c's
 * output of to_heads (to_heads = 1) or to_tokens comes from element *src of group index
 * *member's input, or (*member = -1) is a padding slot of uneven ownership (u > 0: member j
 * owns the units [j*U/C, (j+1)*U/C) of U = G/u, every head side ceil(U/C)*u group slots). */
static int64_t ctx_first(const qt_cp_shape *sh, int64_t j)
{
    return sh->u > 0 ? j * (sh->G / sh->u) / sh->C * sh->u : j * (sh->G / sh->C);
}

static void ctx_source(const qt_cp_shape *sh, int to_heads, int64_t c, int64_t e,
                       int64_t *member, int64_t *src)
{
    const int64_t Sl = sh->S / sh->C, w = sh->w, i = e % w;
    const int64_t Gl = sh->u > 0 ? (sh->G / sh->u + sh->C - 1) / sh->C * sh->u : sh->G / sh->C;
    if (to_heads) { /* e = ((s*S + t)*Gl + g)*w + i */
        const int64_t g = e / w % Gl, t = e / w / Gl % sh->S, s = e / w / Gl / sh->S;
        *member = g < ctx_first(sh, c + 1) - ctx_first(sh, c) ? t / Sl : -1;
        *src = ((s * Sl + t % Sl) * sh->G + ctx_first(sh, c) + g) * w + i;
    } else { /* e = ((s*Sl + u)*G + g)*w + i */
        const int64_t g = e / w % sh->G, u = e / w / sh->G % Sl, s = e / w / sh->G / Sl;
        int64_t m = 0;
        while (m + 1 < sh->C && ctx_first(sh, m + 1) <= g) m++;
        *member = m;
        *src = ((s * sh->S + c * Sl + u) * Gl + g - ctx_first(sh, m)) * w + i;
    }
}

/* One exchange op on this mesh through its kernel-table entry: a hand-made plan (the mesh,
 * three tensors in a heap arena), the start-up check, the wrapper, then every output
 * element against ctx_source (BWD: the initial value plus it, one fp32 add, bf16 rounded
 * once). Returns the elements that differ from this rank's own input at the same index
 * (non-vacuity of the forward kinds). */
static long check_ctx_op(unsigned mask, const int *members, int R, int idx, unsigned kind,
                         unsigned dtype, const int64_t shp[5])
{
    /* shp: b, S/C, G/C (u > 0: G itself), w, u */
    const int64_t u = shp[4];
    const qt_cp_shape sh = {shp[0], shp[1] * R, u > 0 ? shp[2] : shp[2] * R, shp[3], R,
                            qt_dtype_bytes(dtype), u};
    const int64_t nt = QT_CP_ELEMS(sh.b, sh.S, sh.G, sh.w, sh.C), eb = sh.eb;
    const int64_t nh = QT_CP_HEAD_ELEMS_U(sh.b, sh.S, sh.G, sh.w, sh.C, u);
    const int64_t scr = QT_CP_SCRATCH_FLOATS_U(sh.b, sh.S, sh.G, sh.w, sh.C, u);
    const int to_heads = kind == QT_OP_CTX_TO_HEADS || kind == QT_OP_CTX_TO_TOKENS_BWD;
    const int acc = kind == QT_OP_CTX_TO_HEADS_BWD || kind == QT_OP_CTX_TO_TOKENS_BWD;
    const int64_t n = to_heads ? nh : nt, n_in = to_heads ? nt : nh;
    qt_tensor t[3];
    memset(t, 0, sizeof t);
    const int64_t nb[3] = {(n * eb + 63) / 64 * 64, (n_in * eb + 63) / 64 * 64, scr * 4};
    for (int k = 0; k < 3; k++) {
        t[k].name = k == 0 ? "out" : k == 1 ? "in" : "scratch";
        t[k].dtype = (uint8_t)(k == 2 ? QT_F32 : dtype);
        t[k].numel = k == 2 ? scr : k == 1 ? n_in : n;
        t[k].offset = k ? t[k - 1].offset + nb[k - 1] : 0;
    }
    unsigned char *arena = xmalloc((size_t)(nb[0] + nb[1] + nb[2]));
    qt_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.run_name = "coll_check ctx";
    plan.dtype = (uint8_t)dtype;
    plan.tensors = t;
    plan.n_tensors = 3;
    memcpy(plan.mesh, cc.mesh, sizeof plan.mesh);
    int status = 0;
    qt_ctx ctx = {.plan = &plan, .arena = arena, .rank = cc.rank, .n_ranks = cc.size,
                  .status = &status};
    qt_op op;
    memset(&op, 0, sizeof op);
    for (int k = 0; k < QT_OP_MAX_T; k++) op.t[k] = k < 3 ? k : QT_NONE;
    op.kind = (uint16_t)kind;
    const int64_t attrs[7] = {sh.b, sh.S, sh.G, sh.w, mask, R, u};
    for (int k = 0; k < 7; k++) op.a[k] = attrs[k];
    for (int64_t e = 0; e < n_in; e++)
        ctx_elem(arena + t[1].offset + e * eb, eb, cc.rank, e, 300 + kind);
    for (int64_t e = 0; e < n; e++)
        ctx_elem(arena + t[0].offset + e * eb, eb, cc.rank, e, 400 + kind);
    qt_check_state cs;
    memset(&cs, 0, sizeof cs);
    const qt_kernel_entry *ke = &qt_kernel_table[kind];
    CHECK(ke->check(&plan, &op, &cs) == 0, "mask 0x%x: %s refused at start-up: %s", mask,
          ke->name, cs.why);
    ke->run(&op, &ctx);
    CHECK(status == 0, "mask 0x%x: %s set status %d", mask, ke->name, status);
    long bad = 0, moved = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t m, src;
        ctx_source(&sh, to_heads, idx, e, &m, &src);
        unsigned char want[4] = {0, 0, 0, 0}, own[4];
        if (m >= 0) ctx_elem(want, eb, members[m], src, 300 + kind); /* padding: zeros */
        ctx_elem(own, eb, cc.rank, e, 300 + kind);
        if (acc) {
            unsigned char d[4];
            ctx_elem(d, eb, cc.rank, e, 400 + kind);
            float df, vf;
            qt_bf16 dh, vh;
            memcpy(&df, d, 4), memcpy(&vf, want, 4), memcpy(&dh, d, 2), memcpy(&vh, want, 2);
            const float sum = df + vf;
            const qt_bf16 sum16 = qt_bf16_from_f32(qt_f32_from_bf16(dh) + qt_f32_from_bf16(vh));
            memcpy(want, eb == 4 ? (const void *)&sum : (const void *)&sum16, (size_t)eb);
        }
        const unsigned char *got = arena + t[0].offset + e * eb;
        bad += memcmp(got, want, (size_t)eb) != 0;
        moved += memcmp(got, own, (size_t)eb) != 0;
    }
    CHECK(bad == 0, "mask 0x%x (%d ranks): %s %s b=%lld S=%lld G=%lld w=%lld u=%lld: %ld of "
          "%lld elements differ from the layouts' definition", mask, R, ke->name,
          dtype == QT_BF16 ? "bf16" : "fp32", (long long)sh.b, (long long)sh.S,
          (long long)sh.G, (long long)sh.w, (long long)u, bad, (long long)n);
    free(arena);
    return moved;
}

/* Every exchange kind, fp32 and bf16, two shapes (a few elements per group; 64 tokens and
 * 32-element groups per rank), and with R >= 2 two of uneven ownership (u > 0, issue 35:
 * R + 1 units of 1 group, one member owning 2; R - 1 units of 2 groups, one member owning
 * none), over group `mask`; with R >= 2 the forward kinds must move something. */
static void check_ctx_exchange(unsigned mask, const int *members, int R, int idx)
{
    /* b, S/C, G/C (uneven: G), w, u */
    const int64_t shapes[4][5] = {{2, 3, 2, 5, 0}, {1, 64, 4, 32, 0}, {2, 3, R + 1, 5, 1},
                                  {1, 4, 2 * (R - 1), 3, 2}};
    static const unsigned kinds[4] = {QT_OP_CTX_TO_HEADS, QT_OP_CTX_TO_HEADS_BWD,
                                      QT_OP_CTX_TO_TOKENS, QT_OP_CTX_TO_TOKENS_BWD};
    const long fails0 = cc.fails;
    long moved = 0;
    for (int s = 0; s < (R >= 2 ? 4 : 2); s++)
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 4; k++)
                moved += check_ctx_op(mask, members, R, idx, kinds[k], d ? QT_BF16 : QT_F32,
                                      shapes[s]);
    if (R >= 2) CHECK(moved > 0, "mask 0x%x: the exchange moved nothing (vacuous)", mask);
    if (R >= 2 && cc.rank == 0 && cc.fails == fails0)
        printf("coll_check: mask 0x%02x R=%d context exchange (4 kinds, fp32 and bf16, 2 "
               "shapes, 2 uneven) equals the layouts' definition\n", mask, R);
}

/* The split collectives (qt_coll_start_range / progress / wait, coll_async.c): two
 * reduce-scatters (each with its own scratch) and an all-gather in flight at once,
 * progressed between rank-dependent amounts of "compute" and waited in another order than
 * started, give the blocking calls' bits, whatever the sizes and the group. */
static void check_split(unsigned mask, const int *members, int R, int idx)
{
    static const struct { int64_t blk, tmp; } cases[] = {{1, 2}, {4099, 1000}, {70001, 1 << 18}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t blk = cases[c].blk, n = R * blk, bb = 4 * blk + 3;
        const int64_t tmpn = cases[c].tmp > R ? cases[c].tmp : R;  /* >= R-1: any group */
        float *ref = xmalloc((size_t)n * 4), *a = xmalloc((size_t)n * 4);
        float *b = xmalloc((size_t)n * 4), *tmp = xmalloc((size_t)(3 * tmpn) * 4);
        uint8_t *g = xmalloc((size_t)(R * bb));
        for (int64_t e = 0; e < n; e++) {
            ref[e] = a[e] = val(cc.rank, e, 3000 + c);
            b[e] = val(cc.rank, e, 4000 + c);
        }
        memset(g, 0xEE, (size_t)(R * bb));
        for (int64_t k = 0; k < bb; k++) g[idx * bb + k] = pat(cc.rank, k, 50 + c);
        CHECK(qt_coll_reduce_scatter_f32(mask, ref, blk, tmp, tmpn) == 0, "blocking reference");
        const qt_collective ca = {.name = "split a", .kind = QT_COLL_REDUCE_SCATTER,
                                  .mask = (uint8_t)mask, .bytes = 4 * n};
        const qt_collective cg = {.name = "split g", .kind = QT_COLL_ALL_GATHER,
                                  .mask = (uint8_t)mask, .bytes = R * bb};
        int rc = qt_coll_start_range(1, &ca, (unsigned char *)a, tmp, tmpn);
        rc = rc ? rc : qt_coll_start_range(2, &cg, g, NULL, 0);
        rc = rc ? rc : qt_coll_start_range(3, &ca, (unsigned char *)b, tmp + tmpn, tmpn);
        CHECK(rc == 0 && qt_coll_in_flight() == (R > 1 ? 3 : 0), "split starts: rc %d, %d in "
              "flight", rc, qt_coll_in_flight());
        volatile double sink = 0;
        for (int it = 0; it < 50 && rc == 0; it++) {
            for (int w = 0; w < 2000 * (1 + (cc.rank + it) % 3); w++) sink += w * 1e-9;
            rc = qt_coll_progress();
        }
        rc = rc ? rc : qt_coll_wait_range(2, &cg);
        rc = rc ? rc : qt_coll_wait_range(3, &ca);
        rc = rc ? rc : qt_coll_wait_range(1, &ca);
        CHECK(rc == 0 && qt_coll_in_flight() == 0, "split waits: rc %d", rc);
        long bad = 0;
        for (int64_t i = 0; i < blk; i++) bad += fbits(a[idx * blk + i]) != fbits(ref[idx * blk + i]);
        for (int j = 0; j < R; j++)
            for (int64_t k = 0; k < bb; k++) bad += g[j * bb + k] != pat(members[j], k, 50 + c);
        /* the second reduce-scatter against its own blocking run */
        for (int64_t e = 0; e < n; e++) ref[e] = val(cc.rank, e, 4000 + c);
        CHECK(qt_coll_reduce_scatter_f32(mask, ref, blk, tmp, tmpn) == 0, "blocking reference");
        for (int64_t i = 0; i < blk; i++) bad += fbits(b[idx * blk + i]) != fbits(ref[idx * blk + i]);
        CHECK(bad == 0, "mask 0x%x: split collectives blk %lld: %ld values differ from the "
              "blocking calls", mask, (long long)blk, bad);
        free(ref);
        free(a);
        free(b);
        free(tmp);
        free(g);
    }
}

/* The split units exchange (qt_coll_start_units / progress / wait_units, coll_async.c; the
 * microbatch form's GRAD_MB_UNITS_START / _WAIT): q units of R blocks exchanged beside an
 * all-gather in flight, progressed between rank-dependent amounts of "compute" and waited
 * for in another order than started, with a scratch of another size than the blocking
 * reference's (other pieces), leave every unit exactly as qt_coll_exchange_units_f32 does. */
static void check_split_units(unsigned mask, const int *members, int R, int idx)
{
    static const struct { int q; int64_t blk, tmp, ref_tmp; } cases[] = {
        {3, 37, 6, 1 << 10}, {1, 1001, 16, 64}, {3, 70001, 1 << 13, 1 << 14}, {5, 33, 1 << 12, 10},
        {3, 0, 6, 6}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int q = cases[c].q;
        const int64_t blk = cases[c].blk, n = R * blk, bb = 4 * blk + 3;
        if (R * q > 1024) continue;
        float *unit[5], *ref[5], *tmp = xmalloc((size_t)cases[c].tmp * 4);
        float *rtmp = xmalloc((size_t)cases[c].ref_tmp * 4);
        uint8_t *g = xmalloc((size_t)(R * bb));
        for (int u = 0; u < q; u++) {
            unit[u] = xmalloc((size_t)(n + 1) * 4);
            ref[u] = xmalloc((size_t)(n + 1) * 4);
            for (int64_t e = 0; e < n; e++) unit[u][e] = ref[u][e] = val(cc.rank, e * 8 + u, 9000 + c);
        }
        memset(g, 0xEE, (size_t)(R * bb));
        for (int64_t k = 0; k < bb; k++) g[idx * bb + k] = pat(cc.rank, k, 90 + c);
        CHECK(qt_coll_exchange_units_f32(mask, ref, q, blk, rtmp, cases[c].ref_tmp) == 0,
              "blocking units reference");
        const qt_collective cg = {.name = "split g", .kind = QT_COLL_ALL_GATHER,
                                  .mask = (uint8_t)mask, .bytes = R * bb};
        int rc = qt_coll_start_units(-16, mask, unit, q, blk, tmp, cases[c].tmp);
        rc = rc ? rc : qt_coll_start_range(2, &cg, g, NULL, 0);
        CHECK(rc == 0 && qt_coll_in_flight() == (R > 1 ? 1 + (blk > 0) : 0),
              "split units start: rc %d, %d in flight", rc, qt_coll_in_flight());
        if (R > 1 && blk > 0) {  /* its id is refused while in flight */
            qt_set_quiet(1);
            CHECK(qt_coll_start_units(-16, mask, unit, q, blk, tmp, cases[c].tmp) == QT_E_PLAN,
                  "split units: an id in flight started again");
            qt_set_quiet(0);
        }
        volatile double sink = 0;
        for (int it = 0; it < 40 && rc == 0; it++) {
            for (int w = 0; w < 2000 * (1 + (cc.rank + it) % 3); w++) sink += w * 1e-9;
            rc = qt_coll_progress();
        }
        rc = rc ? rc : qt_coll_wait_range(2, &cg);
        rc = rc ? rc : qt_coll_wait_units(-16, mask, blk);
        CHECK(rc == 0 && qt_coll_in_flight() == 0, "split units waits: rc %d", rc);
        long bad = 0, moved = 0;
        for (int u = 0; u < q; u++)
            for (int64_t e = 0; e < n; e++) {
                bad += fbits(unit[u][e]) != fbits(ref[u][e]);
                moved += fbits(unit[u][e]) != fbits(val(cc.rank, e * 8 + u, 9000 + c));
            }
        for (int j = 0; j < R; j++)
            for (int64_t k = 0; k < bb; k++) bad += g[j * bb + k] != pat(members[j], k, 90 + c);
        CHECK(bad == 0, "mask 0x%x: split units q %d blk %lld scratch %lld: %ld values differ "
              "from the blocking exchange", mask, q, (long long)blk, (long long)cases[c].tmp, bad);
        if (R > 1 && blk > 0)
            CHECK(moved > 0, "mask 0x%x: the split units exchange moved nothing (vacuous)", mask);
        for (int u = 0; u < q; u++) {
            free(unit[u]);
            free(ref[u]);
        }
        free(tmp);
        free(rtmp);
        free(g);
    }
    if (R >= 2 && cc.rank == 0)
        printf("coll_check: mask 0x%02x R=%d split units exchange equals the blocking one\n",
               mask, R);
}

/* The expert dispatch in rounds (ops/qt_ep_rounds.h; issue 35): every member routes T = b*S
 * tokens of k slots to experts of the group (E = 2 per member, some slots -1), exchanges
 * the counts, walks rounds of R rows (R = the largest leaf, so several rounds whenever a host
 * holds more) and moves each round's rows to their hosts and back. Checked against the
 * whole dispatch's definition written out here (every rank regenerates every member's
 * routing): each round brings the host the next rows of its whole order (member, block, t,
 * slot) with their local expert ids, every row comes home to its (t, slot) place, and a
 * leaf larger than the rounds is refused (QT_E_PLAN) on every member alike. */
static int32_t epr_expert(int rank, int64_t r, int64_t E)
{
    const uint32_t h = (uint32_t)pat(rank, r, 90) * 2654435761u + (uint32_t)pat(rank, r, 91);
    return (h % 5u) == 0 ? -1 : (int32_t)(h % (uint32_t)E);
}

static void check_ep_rounds(unsigned mask, const int *members, int M, int me)
{
    enum { B = 3, S = 5, K = 2, EL = 2, D = 3 };
    const int64_t T = B * S, E = (int64_t)M * EL, rb = D * (int64_t)sizeof(float);
    int64_t *G = xmalloc((size_t)(M * M * B) * 8);
    qt_ep_round *rd = xmalloc(sizeof *rd);
    int32_t idx[B * S * K], ids[B * S * K];
    float x[B * S * D], xs[B * S * K * D], ret[B * S * K * D], y[B * S * K * D];
    for (int64_t r = 0; r < T * K; r++) idx[r] = epr_expert(cc.rank, r, E);
    for (int64_t e = 0; e < T * D; e++) x[e] = (float)(cc.rank * 1000 + e);
    int rc = qt_ep_rounds_counts(mask, idx, T, K, E, EL, B, G, rd);
    CHECK(rc == 0, "mask 0x%x: ep rounds counts returned %d", mask, rc);
    /* my whole order as host: member, block, token, slot */
    int64_t n = 0, most = 0;
    float *want = xmalloc((size_t)(M * T * K * D + 1) * 4);
    int32_t *wid = xmalloc((size_t)(M * T * K + 1) * 4);
    for (int i = 0; i < M; i++)
        for (int64_t r = 0; r < T * K; r++) {
            const int32_t e = epr_expert(members[i], r, E);
            if (e < 0 || e / EL != me) continue;
            for (int c = 0; c < D; c++)
                want[n * D + c] = (float)(members[i] * 1000 + (r / K) * D + c);
            wid[n++] = e - me * EL;
        }
    for (int64_t j = 0; j < M; j++)
        for (int64_t L = 0; L < M * B; L++)
            if (qt_ep_leaf_rows(G, M, B, j, L) > most) most = qt_ep_leaf_rows(G, M, B, j, L);
    qt_moe_pack(xs, ids, x, 1, idx, T, K, rb, EL, E, rd->home_off);
    float *hx = xmalloc((size_t)(most * D + 1) * 4);
    int32_t *hid = xmalloc((size_t)(most + 1) * 4);
    int64_t at = 0, rounds = 0;
    long bad = 0;
    int more;
    while ((more = qt_ep_rounds_next(mask, G, B, most, rd, NULL)) == 1) {
        rounds++;
        rc = qt_ep_round_send(mask, rd, xs, hx, rb);
        if (!rc) rc = qt_ep_round_send(mask, rd, ids, hid, 4);
        CHECK(rc == 0 && rd->rows <= most, "mask 0x%x: round send returned %d", mask, rc);
        for (int64_t r = 0; r < rd->rows && at + r < n; r++) {
            bad += hid[r] != wid[at + r];
            for (int c = 0; c < D; c++)
                bad += fbits(hx[r * D + c]) != fbits(want[(at + r) * D + c]);
            for (int c = 0; c < D; c++) hx[r * D + c] = 2.0f * hx[r * D + c] + (float)hid[r];
        }
        at += rd->rows;
        rc = qt_ep_round_back(mask, rd, hx, ret, rb);
        CHECK(rc == 0, "mask 0x%x: round back returned %d", mask, rc);
    }
    CHECK(more == 0 && at == n && bad == 0, "mask 0x%x: ep rounds: %ld values differ, %lld of "
          "%lld rows arrived, walk ended %d", mask, bad, (long long)at, (long long)n, more);
    memset(y, 0, sizeof y);
    qt_moe_unpack(y, ret, idx, T, K, rb, EL, E, rd->home_off);
    bad = 0;
    for (int64_t r = 0; r < T * K; r++)
        for (int c = 0; c < D && idx[r] >= 0; c++)
            bad += fbits(y[r * D + c]) !=
                   fbits(2.0f * x[(r / K) * D + c] + (float)(idx[r] - (idx[r] / EL) * EL));
    CHECK(bad == 0, "mask 0x%x: ep rounds: %ld values came home wrong", mask, bad);
    /* several rounds whenever some host holds more than the largest leaf */
    int64_t hmax = n;
    CHECK(qt_coll_max_i64(mask, &hmax, 1) == 0 && (hmax <= most || rounds > 1),
          "mask 0x%x: ep rounds: %lld rounds for %lld rows of at most %lld", mask,
          (long long)rounds, (long long)hmax, (long long)most);
    /* a leaf larger than the round: refused alike on every member, nothing exchanged */
    if (most > 0) {
        qt_set_quiet(1);
        rd->L1 = 0;
        int64_t L = 0;
        while ((more = qt_ep_rounds_next(mask, G, B, most - 1, rd, NULL)) == 1) L = rd->L1;
        qt_set_quiet(0);
        CHECK(more == QT_E_PLAN, "mask 0x%x: ep rounds: a %lld-row leaf in rounds of %lld "
              "gave %d after leaf %lld", mask, (long long)most, (long long)(most - 1), more,
              (long long)L);
    }
    free(G);
    free(rd);
    free(want);
    free(wid);
    free(hx);
    free(hid);
}

/* The first mask (in increasing order) whose group has the same member list as `mask`'s
 * (lists[m] holds mask m's, from ref_members; n[m] its size): `mask` itself when none
 * before it has. Every rank must find the same (the member list is the same exactly when
 * the masks agree on the axes of more than one rank, which is not rank-dependent): the
 * answers are compared over the world, and a disagreement fails and counts as distinct. */
static unsigned first_same_members(unsigned mask, int (*lists)[1 << 10], const int *n)
{
    unsigned first = mask;
    for (unsigned m = 0; m < mask && first == mask; m++)
        if (n[m] == n[mask] && !memcmp(lists[m], lists[mask], (size_t)n[mask] * sizeof(int)))
            first = m;
    int64_t mx[2] = {first, -(int64_t)first}; /* the world's max and -min */
    if (qt_coll_max_i64(QT_COLL_ALL, mx, 2) != 0) return mask;
    CHECK(mx[0] == -mx[1], "mask 0x%x: the ranks disagree on the first mask with its member "
          "list (0x%llx .. 0x%llx)", mask, (long long)-mx[1], (long long)mx[0]);
    return mx[0] == -mx[1] ? first : mask;
}

/* Every mask: the group arithmetic (check_group), and the checks whose firmware reads the
 * mask beyond its member list: the all-gathers (their recursive doubling takes the slice
 * digits of the mask, qt_coll_slice_bits: check_all_gather, blocking and split, and
 * check_ep_rounds, whose counts travel by all-gather). Once per distinct member list (the
 * first mask in increasing order that names it; the others differ only in axes of one rank,
 * whose group is the same ranks in the same order): everything else, whose firmware sees the
 * mask only through the group tables (qt_comm_group_size / index / rank: the same for every
 * mask of the list) and names the axes of more than one rank in its messages. So a
 * duplicate mask would run the same code on the same ranks with the same bits. */
static int run_checks(int ctx_only)
{
    static int lists[QT_COLL_ALL + 1][1 << 10];
    int n[QT_COLL_ALL + 1], distinct = 0, skipped = 0;
    for (unsigned mask = 0; mask < QT_COLL_ALL + 1; mask++) {
        int *members = lists[mask];
        const int R = n[mask] = ref_members(mask, members);
        const int idx = qt_comm_group_index(mask);
        check_group(mask, members, R, idx);
        if (idx < 0 || idx >= R || members[idx] != cc.rank) continue;
        const unsigned first = first_same_members(mask, lists, n);
        distinct += first == mask;
        skipped += first != mask;
        if (ctx_only) {
            if (first == mask) check_ctx_exchange(mask, members, R, idx);
            continue;
        }
        check_all_gather(mask, members, R, idx);
        check_ep_rounds(mask, members, R, idx);
        if (first != mask) continue;
        check_reduce_scatter(mask, members, R, idx);
        check_reduce_units(mask, members, R, idx);
        check_units_mb(mask, members, R, idx);
        check_split(mask, members, R, idx);
        check_split_units(mask, members, R, idx);
        check_broadcast(mask, members, R, idx);
        check_sums(mask, members, R);
        check_max(mask, members, R, idx);
        check_all_to_all(mask, members, R, idx);
        check_split_a2a(mask, members, R, idx);
        check_all_to_all_fixed(mask, members, R, idx);
        check_ctx_exchange(mask, members, R, idx);
    }
    /* the distinct lists are the subsets of the axes of more than one rank */
    int axes = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++) axes += cc.mesh[a] > 1;
    CHECK(distinct == 1 << axes, "%d distinct member lists among the masks, expected %d (2^%d "
          "axes of more than one rank)", distinct, 1 << axes, axes);
    if (cc.rank == 0)
        printf("coll_check: %d masks, %d distinct member lists: %s ran once per list, "
               "skipped on %d duplicate masks (group arithmetic%s on all %d)\n",
               QT_COLL_ALL + 1, distinct, ctx_only ? "the context exchange" :
               "the member-list collectives", skipped, ctx_only ? "" : " and the all-gathers",
               QT_COLL_ALL + 1);
    CHECK(qt_comm_check_same(0x0123456789abcdefull) == 0, "check_same with equal hashes failed");
    qt_set_quiet(1);
    CHECK(qt_coll_all_gather(QT_COLL_ALL + 1, lists[0], 4) == QT_E_PLAN, "bad mask accepted");
    qt_set_quiet(0);
    int64_t bytes, calls;
    double secs;
    qt_comm_stats(&bytes, &secs, &calls);
    int64_t f[2] = {cc.fails, cc.checks};
    if (qt_coll_sum_i64(QT_COLL_ALL, f, 2) != 0) return 2;
    printf("coll_check: rank %d: %ld checks, %ld failed here; %lld calls, %lld bytes sent, "
           "%.3f s in collectives\n", cc.rank, cc.checks, cc.fails, (long long)calls,
           (long long)bytes, secs);
    if (cc.rank == 0)
        printf("coll_check: mesh %dx%dx%dx%dx%d on %d ranks: %lld checks, %lld failed\n",
               cc.mesh[0], cc.mesh[1], cc.mesh[2], cc.mesh[3], cc.mesh[4], cc.size,
               (long long)f[1], (long long)f[0]);
    return f[0] ? 1 : 0;
}

static int run_mismatch(void)
{
    uint64_t h = 0xfeedfacecafebeefull ^ (cc.rank == cc.size - 1 ? 1u : 0u);
    int rc = qt_comm_check_same(h);
    printf("coll_check: rank %d: check_same(0x%016llx) returned %d\n", cc.rank,
           (unsigned long long)h, rc);
    int64_t ok = rc == QT_E_MISMATCH;
    if (qt_coll_sum_i64(QT_COLL_ALL, &ok, 1) != 0) return 2;
    if (cc.rank == 0)
        printf("coll_check: %lld of %d ranks detected the mismatch\n", (long long)ok, cc.size);
    return ok == cc.size ? 0 : 1;
}

static int run_timeout(void)
{
    const int64_t blk = 1 << 16;
    const int R = qt_comm_group_size(QT_COLL_ALL);
    float *buf = xmalloc((size_t)(R * blk) * 4), *tmp = xmalloc((size_t)1 << 20);
    for (int64_t e = 0; e < R * blk; e++) buf[e] = val(cc.rank, e, 3);
    qt_comm_set_deadline(1.0);
    qt_comm_set_context("coll_check timeout case", 7);
    if (cc.rank == cc.size - 1) {
        struct timespec ts = {20, 0};
        nanosleep(&ts, NULL);
    }
    const double t0 = now_s();
    int rc = qt_coll_reduce_scatter_f32(QT_COLL_ALL, buf, blk, tmp, (1 << 20) / 4);
    printf("coll_check: rank %d: reduce-scatter returned %d after %.2f s%s\n", cc.rank, rc,
           now_s() - t0, rc == QT_E_COMM ? " (QT_E_COMM)" : "");
    fflush(stdout);
    if (rc == QT_E_COMM) {
        struct timespec ts = {0, 300000000L}; /* let the other ranks report too */
        nanosleep(&ts, NULL);
        qt_comm_abort(3);
    }
    return 1; /* the sleeper never gets here before the abort */
}

static int run_bench(void)
{
    const unsigned mask = QT_COLL_ALL;
    const int R = qt_comm_group_size(mask), idx = qt_comm_group_index(mask);
    const int64_t n = (int64_t)64 << 18, blk = n / R; /* 64 MiB of floats */
    float *src = xmalloc((size_t)n * 4), *buf = xmalloc((size_t)n * 4);
    float *tmp = xmalloc((size_t)16 << 20);
    memset(tmp, 0, (size_t)16 << 20);
    for (int64_t e = 0; e < n; e++) src[e] = val(cc.rank, e, 5);
    int members[1 << 10];
    ref_members(mask, members);
    static const int64_t tmps[] = {(int64_t)1 << 18, (int64_t)4 << 20}; /* floats */
    for (int t = 0; t < 2; t++) {
        double times[6];
        for (int rep = 0; rep < 6; rep++) {
            memcpy(buf, src, (size_t)n * 4);
            int64_t sync = 0;
            qt_coll_sum_i64(mask, &sync, 1);
            audit(rep > 0); /* rep 0 warms up MPI's pools */
            double t0 = now_s();
            int rc = qt_coll_reduce_scatter_f32(mask, buf, blk, tmp, tmps[t]);
            times[rep] = now_s() - t0;
            audit(0);
            if (rc) return 2;
            if (rep == 0 && R <= 64) {
                long bad = 0;
                float x[64];
                for (int64_t i = 0; i < blk; i++) {
                    for (int m = 0; m < R; m++) x[m] = val(members[m], idx * blk + i, 5);
                    bad += fbits(tree_sum(x, R)) != fbits(buf[idx * blk + i]);
                }
                CHECK(bad == 0, "bench reduce-scatter: %ld elements differ from the tree", bad);
            }
        }
        /* median of reps 1..5 (rep 0 warms up) */
        for (int i = 1; i < 6; i++)
            for (int j = i + 1; j < 6; j++)
                if (times[j] < times[i]) { double s = times[i]; times[i] = times[j]; times[j] = s; }
        int64_t f = (int64_t)(times[3] * 1e6);
        int64_t fsum = f;
        qt_coll_sum_i64(mask, &fsum, 1);
        if (cc.rank == 0)
            printf("coll_check: bench: reduce-scatter of 64 MiB over %d ranks, scratch %lld "
                   "MiB: median %.1f ms (rank 0), mean over ranks %.1f ms\n", R,
                   (long long)(tmps[t] * 4 >> 20), times[3] * 1e3, (double)fsum / R / 1e3);
    }
    {
        double best = 1e9;
        for (int rep = 0; rep < 4; rep++) {
            int64_t sync = 0;
            qt_coll_sum_i64(mask, &sync, 1);
            audit(rep > 0);
            double t0 = now_s();
            if (qt_coll_all_gather(mask, buf, n * 4 / R)) return 2;
            double t = now_s() - t0;
            audit(0);
            if (rep && t < best) best = t;
        }
        if (cc.rank == 0)
            printf("coll_check: bench: all-gather to 64 MiB over %d ranks: best %.1f ms\n", R,
                   best * 1e3);
    }
    if (R == 2) {
        double best = 1e9;
        const int peer = qt_comm_group_rank(mask, idx ^ 1);
        for (int rep = 0; rep < 4; rep++) {
            double t0 = now_s();
            if (qt_comm_exchange(peer, src, n * 2, buf, n * 2)) return 2;
            double t = now_s() - t0;
            if (rep && t < best) best = t;
        }
        if (cc.rank == 0)
            printf("coll_check: bench: raw exchange of 32 MiB each way (the first stage's "
                   "traffic): best %.1f ms\n", best * 1e3);
    }
    int64_t bytes, calls;
    double secs;
    qt_comm_stats(&bytes, &secs, &calls);
    if (cc.rank == 0)
        printf("coll_check: bench: stats: %lld calls, %.1f MiB sent, %.3f s in collectives\n",
               (long long)calls, (double)bytes / (1 << 20), secs);
    return cc.fails ? 1 : 0;
}

/* --p2p's circular part: MaxText's gpipe with RC = 2 repeats (runtime/pipeline.c
 * qt_pp_action_circ) on S stages of per ranks: the forwards repeat by repeat, a chunk's
 * input from the stage before or, for stage 0's second repeat, from the last stage's first
 * (the wrap-around), its output to the stage after or the last stage's first repeat's to
 * stage 0; the backwards with the repeats descending, the gradients the reverse way (stage
 * 0's second repeat's input gradient back to the last stage). Every message's bytes name
 * the sender and its (repeat, microbatch); sends flushed only at the end. intl: the same
 * messages in Megatron's interleaved 1F1B order instead (qt_pp_sched.h qt_pp_action_intl,
 * pipeline_schedule 1f1b with repeats; M = 4 a multiple of S). 2 on a communication error,
 * else 0 (the checks count failures). */
static int run_p2p_circular(int S, int per, int s, int loc, int intl)
{
    enum { M = 4, RC = 2, N = 1000 };
    static float act[RC * M][N], grad[RC * M][N], in[N];
    const int prev = (s > 0 ? s - 1 : S - 1) * per + loc, next = (s < S - 1 ? s + 1 : 0) * per + loc;
    int wraps = 0;
    for (int i = 0; i < 2 * M * RC; i++) {
        const int gb = i >= M * RC, k = gb ? i - M * RC : i;
        int j = k % M, r = gb ? RC - 1 - k / M : k / M;
        const int bwd = intl ? qt_pp_action_intl(S, s, M, RC, i, &j, &r) : gb, x = r * M + j;
        const int has_in = s > 0 || r > 0, has_out = s < S - 1 || r < RC - 1;
        if (!bwd) {
            if (has_in) {
                /* the sender's (repeat, microbatch): the same, or the repeat before */
                const int xs = s > 0 ? x : x - M;
                memset(in, 0, sizeof in);
                if (qt_coll_p2p_recv(prev, 0, in, sizeof in)) return 2;
                long bad = 0;
                for (int q = 0; q < N; q++) bad += in[q] != (float)(prev * 100000 + xs * 1000 + q);
                CHECK(bad == 0, "circular: activation r%d m%d from rank %d: %ld floats differ", r,
                      j, prev, bad);
                wraps += s == 0;
            }
            if (has_out) {
                for (int q = 0; q < N; q++) act[x][q] = (float)(cc.rank * 100000 + x * 1000 + q);
                if (qt_coll_p2p_send(next, 0, act[x], sizeof act[x])) return 2;
            }
        } else {
            if (has_out) {
                const int xs = s < S - 1 ? x : x + M;
                memset(in, 0, sizeof in);
                if (qt_coll_p2p_recv(next, 1, in, sizeof in)) return 2;
                long bad = 0;
                for (int q = 0; q < N; q++) bad += in[q] != (float)-(next * 100000 + xs * 1000 + q);
                CHECK(bad == 0, "circular: gradient r%d m%d from rank %d: %ld floats differ", r, j,
                      next, bad);
                wraps += s == S - 1;
            }
            if (has_in) {
                for (int q = 0; q < N; q++) grad[x][q] = (float)-(cc.rank * 100000 + x * 1000 + q);
                if (qt_coll_p2p_send(prev, 1, grad[x], sizeof grad[x])) return 2;
            }
        }
    }
    CHECK(wraps == ((s == 0 || s == S - 1) ? M * (RC - 1) : 0),
          "circular%s: %d wrap-around messages received on stage %d", intl ? " (interleaved)" : "",
          wraps, s);
    return qt_coll_p2p_flush() ? 2 : 0;
}

/* --p2p S: the pipeline's point-to-point messages (coll_p2p.c, qt_coll.def SEND_RECV) on S
 * stages of R / S ranks (stage = rank div (R / S)): M = 4 microbatches in 1f1b order
 * (warm-up forwards, then F/B pairs), activations to stage s + 1 on channel 0, gradients to
 * s - 1 on channel 1, every message's bytes a pattern of (sender, channel, microbatch,
 * index) checked by the receiver, sends flushed only at the end (they must not block);
 * then a message shorter than its receive is an error (never taken as whole), and the
 * all-gather over the stage peers gives every member's block. */
static int run_p2p(int S)
{
    enum { M = 4, N = 1000 };
    static float act[M][N], grad[M][N], in[N];
    const int R = cc.size, per = R / S, s = cc.rank / per, loc = cc.rank % per;
    if (S < 2 || R % S) {
        CHECK(0, "--p2p %d on %d ranks: the stages must divide the ranks", S, R);
        return 1;
    }
    const int prev = s > 0 ? (s - 1) * per + loc : -1, next = s < S - 1 ? (s + 1) * per + loc : -1;
    const int w = S - s - 1 < M ? S - s - 1 : M;
    int nf = 0, nb = 0;
    for (int i = 0; i < 2 * M; i++) {
        /* 1f1b: w forwards, then alternate, then the remaining backwards */
        const int fwd = i < w || (i - w < 2 * (M - w) && (i - w) % 2 == 0);
        if (fwd && nf < M) {
            const int j = nf++;
            if (prev >= 0) {
                memset(in, 0, sizeof in);
                if (qt_coll_p2p_recv(prev, 0, in, sizeof in)) return 2;
                long bad = 0;
                for (int k = 0; k < N; k++) bad += in[k] != (float)(prev * 100000 + j * 1000 + k);
                CHECK(bad == 0, "activation %d from rank %d: %ld floats differ", j, prev, bad);
            }
            if (next >= 0) {
                for (int k = 0; k < N; k++) act[j][k] = (float)(cc.rank * 100000 + j * 1000 + k);
                if (qt_coll_p2p_send(next, 0, act[j], sizeof act[j])) return 2;
            }
        } else {
            const int j = nb++;
            if (next >= 0) {
                memset(in, 0, sizeof in);
                if (qt_coll_p2p_recv(next, 1, in, sizeof in)) return 2;
                long bad = 0;
                for (int k = 0; k < N; k++) bad += in[k] != (float)-(next * 100000 + j * 1000 + k);
                CHECK(bad == 0, "gradient %d from rank %d: %ld floats differ", j, next, bad);
            }
            if (prev >= 0) {
                for (int k = 0; k < N; k++) grad[j][k] = (float)-(cc.rank * 100000 + j * 1000 + k);
                if (qt_coll_p2p_send(prev, 1, grad[j], sizeof grad[j])) return 2;
            }
        }
    }
    CHECK(nf == M && nb == M, "schedule: %d forwards, %d backwards", nf, nb);
    if (qt_coll_p2p_flush()) return 2;
    if (run_p2p_circular(S, per, s, loc, 0)) return 2;
    if (4 % S == 0 && run_p2p_circular(S, per, s, loc, 1)) return 2;
    /* a message shorter than the receive expects: an error on the receiver, never a
     * partly filled buffer taken as whole (a longer one is MPI's truncation, which MPICH
     * makes fatal: the job stops, which is not silent either) */
    if (s == 1) {
        const int rc = qt_coll_p2p_recv(prev, 2, in, (N - 2) * sizeof(float));
        CHECK(rc != 0, "a %d-byte message received into %d bytes was accepted",
              (int)((N - 4) * sizeof(float)), (int)((N - 2) * sizeof(float)));
    } else if (s == 0) {
        if (qt_coll_p2p_send(next, 2, act[0], (N - 4) * sizeof(float)) || qt_coll_p2p_flush())
            return 2;
    }
    int ranks[64];
    uint64_t blocks[64];
    for (int k = 0; k < S && k < 64; k++) ranks[k] = k * per + loc;
    memset(blocks, 0, sizeof blocks);
    blocks[s] = 0x9e3779b97f4a7c15ull * (uint64_t)(cc.rank + 1);
    if (qt_coll_p2p_allgather(ranks, S, s, blocks, sizeof blocks[0])) return 2;
    for (int k = 0; k < S; k++)
        CHECK(blocks[k] == 0x9e3779b97f4a7c15ull * (uint64_t)(ranks[k] + 1),
              "all-gather block %d (rank %d) wrong", k, ranks[k]);
    int64_t f[2] = {cc.fails, cc.checks};
    if (qt_coll_sum_i64(QT_COLL_ALL, f, 2)) return 2;
    if (cc.rank == 0)
        printf("coll_check: p2p: %d stages of %d rank%s, %d microbatches each way (1f1b order; "
               "gpipe with 2 circular repeats, the wrap-around%s): "
               "%lld checks, %lld failures\n", S, per, per == 1 ? "" : "s", M,
               4 % S == 0 ? "; interleaved 1f1b with them" : "", (long long)f[1],
               (long long)f[0]);
    return f[0] ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (qt_comm_init(&argc, &argv, &cc.rank, &cc.size) != 0) return 2;
    int mode = 0, nmesh = 0, p2p_stages = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++) cc.mesh[a] = cc.dcn[a] = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dcn") && i + 1 < argc) {
            const char *p = argv[++i];
            for (int a = 0; a < QT_MESH_COUNT && *p; a++) {
                cc.dcn[a] = atoi(p) > 0 ? atoi(p) : 1;
                while (*p && *p != ',') p++;
                if (*p == ',') p++;
            }
        } else if (!strcmp(argv[i], "--mismatch")) mode = 1;
        else if (!strcmp(argv[i], "--timeout")) mode = 2;
        else if (!strcmp(argv[i], "--bench")) mode = 3;
        else if (!strcmp(argv[i], "--ctx")) mode = 4;
        else if (!strcmp(argv[i], "--p2p") && i + 1 < argc) {
            mode = 5;
            p2p_stages = atoi(argv[++i]);
        }
        else if (nmesh < QT_MESH_COUNT && atoi(argv[i]) > 0) cc.mesh[nmesh++] = atoi(argv[i]);
        else {
            fprintf(stderr, "usage: coll_check [--mismatch|--timeout|--bench|--ctx] D [F [T [E "
                    "[C]]]]\n");
            qt_comm_finalize();
            return 2;
        }
    }
    if (nmesh == 0) cc.mesh[0] = cc.size;
    if (qt_comm_mesh_init_slices(cc.mesh, cc.dcn, cc.rank, cc.size) != 0) {
        qt_comm_finalize();
        return 2;
    }
    qt_comm_set_deadline(30.0); /* far below the e2e timeout, far above any honest call */
    int rc;
    switch (mode) {
    case 1: rc = run_mismatch(); break;
    case 2: rc = run_timeout(); break;
    case 3: rc = run_bench(); break;
    case 4: rc = run_checks(1); break;
    case 5: rc = run_p2p(p2p_stages); break;
    default: rc = run_checks(0); break;
    }
    fflush(stdout);
    if (rc == 2) qt_comm_abort(2); /* a collective failed: peers may be waiting */
    qt_comm_finalize();
    return rc;
}
