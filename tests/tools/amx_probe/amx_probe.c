/* amx_probe.c - establishes the arithmetic of AMX TDPBF16PS empirically (issue 34) and
 * re-checks VDPBF16PS against the project's own emulation (docs/amx.md).
 *
 * usage: amx-probe [--tiles N] [--vdp-cases N] [--seed S] [--quick]
 *                  [--fake E1|E2|E3|E4g|E4f|E5|E6]
 *   --tiles N      random tiles for the AMX part (default 1000000; 100000000 for a long run)
 *   --vdp-cases N  random lanes for the VDPBF16PS part (default 10000000)
 *   --quick        the shapes part on rows, cols, K in {1, 2, 7, 16} only (64 shapes)
 *   --fake C       run the AMX part with candidate C's emulation standing in for the
 *                  instruction (a harness check on any CPU: C must then match everything)
 * The AMX part, on a CPU with AMX (amx_hw.h) or under --fake:
 *  1. the cases (amx_emul.h: T1-T8, F1-F15) on a 1x1 tile: the hardware's bits beside every
 *     candidate's, and which candidate / flag variant matches every case; then FPRev-style
 *     order masks (+-2^30 in two of the 33 addend slots, 1 elsewhere) whose counts
 *     fingerprint the summation order, compared with every candidate's;
 *  2. every tile shape (rows, cols, K pairs each 1..16) with every case that fits: once in
 *     every (m, n) position at once (A's rows and B's columns all the case, K padded with
 *     zeros at a shape-dependent offset), once at one position among random neighbours;
 *  3. N random tiles of random shapes (exponents in [-40, 40] and in [-2, 2] for
 *     cancellation; one tile in 8 with zeros, denormals, infinities, NaNs);
 *  4. long K (16 .. 4096 pairs) as 16-pair instructions on one C tile;
 *  every hardware run of 2 and 4 repeated under MXCSR round-toward-zero, round-up and
 *  DAZ|FTZ (each random tile under one of them in turn) and compared with the run under the
 *  default MXCSR (0x1f80: nearest, DAZ and FTZ off). A candidate is dropped from the random
 *  tiles after 1000 tiles that mismatch on more than NaN against NaN ("(dropped) >=").
 * The VDPBF16PS part (when the CPU and this build have AVX512_BF16): vdp_cases.h on 16 lanes
 * under each MXCSR, and N random lanes (4-instruction chains, exponents in [-40, 40] and
 * [-2, 2]) against the project's scalar reference (qt_bf16_dp_ref), with the count of lanes
 * where the pairs in the other order differ (so the comparison can fail).
 * Exit status: 0 when the probe ran (whatever the hardware does: that is the finding); 1 when
 * the harness is wrong (an emulation misses its own case table, or --fake finds a mismatch,
 * or the build's VDPBF16PS path differs from its reference); 2 on bad arguments.
 * A host tool, not firmware: its buffers are static, it prints to stdout.
 */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>
#include "amx_emul.h"
#include "amx_hw.h"
#include "vdp_cases.h"
#include "kernels/bf16.h"

#define NMODE 4
static const unsigned mode_csr[NMODE] = {0x1f80u, 0x7f80u, 0x5f80u, 0x9fc0u};
static const char *const mode_name[NMODE] = {"default 0x1f80", "RZ 0x7f80", "RU 0x5f80",
                                             "DAZ|FTZ 0x9fc0"};

#define NSEC 3
static const char *const sec_name[NSEC] = {"shapes x cases", "random tiles", "long K"};

static struct {
    long tiles[NSEC][QT_AMX_NCAND], bad_tiles[NSEC][QT_AMX_NCAND], elems[NSEC][QT_AMX_NCAND],
        bad[NSEC][QT_AMX_NCAND], bad_nan[NSEC][QT_AMX_NCAND], bad_tiles_x[NSEC][QT_AMX_NCAND];
    char first[NSEC][QT_AMX_NCAND][200];
    long mode_runs[NMODE], mode_diff[NMODE];
    char mode_first[NMODE][200];
    int fake, quick;
    uint64_t rng;
} g;

/* buffers: a tile at most 16 x 16 (long K: A 16 x 2*4096, B 4096 x 32) */
#define LONGK 4096
static uint16_t ga[16 * 2 * LONGK], gb[LONGK * 32];
static uint32_t gc[256], gh[256], gm[256], ge[256];

static uint64_t rnd(void)
{
    g.rng ^= g.rng << 13;
    g.rng ^= g.rng >> 7;
    g.rng ^= g.rng << 17;
    return g.rng;
}

static int isnan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* A bf16 / fp32 with random sign and mantissa and exponent in [-40, 40] or (narrow) [-2, 2];
 * special: one in 16 from the special list. */
static uint16_t rnd_bf(int narrow, int special)
{
    static const uint16_t sp[] = {0x0000, 0x8000, 0x0001, 0x8040, 0x7f80, 0xff80, 0x7fc1,
                                  0xffc2, 0x7f81, 0x7f7f, 0x0080, 0x3f80};
    const uint64_t r = rnd();
    if (special && r % 16 == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
    const int e = narrow ? (int)((r >> 8) % 5) - 2 : (int)((r >> 8) % 81) - 40;
    return (uint16_t)((r >> 20 & 1u) << 15 | (unsigned)(127 + e) << 7 | (r >> 24 & 0x7fu));
}

static uint32_t rnd_f32(int narrow, int special)
{
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x80000001u, 0x007fffffu,
                                  0x7f800000u, 0xff800000u, 0x7fc12345u, 0x7fa00001u,
                                  0x7f7fffffu, 0x00800000u};
    const uint64_t r = rnd();
    if (special && r % 16 == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
    const int e = narrow ? (int)((r >> 8) % 5) - 2 : (int)((r >> 8) % 81) - 40;
    return (uint32_t)(r >> 20 & 1u) << 31 | (uint32_t)(127 + e) << 23 | (uint32_t)(r >> 24 & 0x7fffffu);
}

/* The device: the instruction, or under --fake the named candidate chunk by chunk. */
static int dev_run(int rows, int cols, int kc, int nch, uint32_t *c, const uint16_t *a, int lda,
                   const uint16_t *b, unsigned csr)
{
    if (g.fake < 0) return qt_amx_hw_run(rows, cols, kc, nch, c, 16, a, lda, b, 32, csr);
    for (int j = 0; j < nch; j++)
        qt_amx_tile(g.fake, 0, c, 16, a + 2 * kc * j, lda, b + (long)kc * j * 32, 32, rows, cols, kc);
    return 0;
}

static void emu_run(int cand, int rows, int cols, int kc, int nch, uint32_t *c, const uint16_t *a,
                    int lda, const uint16_t *b)
{
    for (int j = 0; j < nch; j++)
        qt_amx_tile(cand, 0, c, 16, a + 2 * kc * j, lda, b + (long)kc * j * 32, 32, rows, cols, kc);
}

/* Counts candidate cand's mismatches against the hardware h on one tile. */
static void tally(int sec, int cand, const uint32_t *h, const uint32_t *e, int rows, int cols,
                  const char *ctx)
{
    int bad = 0, badx = 0;
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < cols; n++) {
            const uint32_t x = h[m * 16 + n], y = e[m * 16 + n];
            g.elems[sec][cand]++;
            if (x == y) continue;
            bad++;
            g.bad[sec][cand]++;
            if (isnan32(x) && isnan32(y)) g.bad_nan[sec][cand]++;
            else badx++;
            if (!g.first[sec][cand][0])
                snprintf(g.first[sec][cand], sizeof g.first[sec][cand],
                         "%s, element (%d, %d): hardware 0x%08x, %s 0x%08x", ctx, m, n, x,
                         qt_amx_cand_name(cand), y);
        }
    g.tiles[sec][cand]++;
    if (bad) g.bad_tiles[sec][cand]++;
    if (badx) g.bad_tiles_x[sec][cand]++;
}

/* The hardware under the perturbed MXCSRs against its run under the default (h). */
static void modes(int rows, int cols, int kc, int nch, const uint32_t *c0, const uint16_t *a,
                  int lda, const uint16_t *b, const uint32_t *h, int only, const char *ctx)
{
    for (int md = 1; md < NMODE; md++) {
        if (only && md != only) continue;
        memcpy(gm, c0, sizeof gm);
        dev_run(rows, cols, kc, nch, gm, a, lda, b, mode_csr[md]);
        g.mode_runs[md]++;
        for (int i = 0; i < 16 * rows; i++)
            if (i % 16 < cols && gm[i] != h[i]) {
                if (!g.mode_diff[md]++)
                    snprintf(g.mode_first[md], sizeof g.mode_first[md],
                             "%s, element (%d, %d): 0x%08x under %s, 0x%08x under the default",
                             ctx, i / 16, i % 16, gm[i], mode_name[md], h[i]);
                break;
            }
    }
}

/* ------------------------------------------------------------------ 1. the cases */
static int cases_1x1(void)
{
    printf("\n== AMX cases on a 1x1 tile (K = the case's pairs), bits as hex\n");
    printf("%-4s %-10s", "case", "hardware");
    for (int e = 0; e < QT_AMX_NCAND; e++) printf(" %-9s", qt_amx_cand_name(e));
    printf(" (* = stated in amx-bf16.md)\n");
    unsigned all_ok[8];
    for (int f = 0; f < 8; f++) all_ok[f] = (1u << QT_AMX_NCAND) - 1u;
    for (int i = 0; i < qt_amx_case_count(); i++) {
        const qt_amx_case *cs = qt_amx_case_get(i);
        memset(ga, 0, 64 * 2), memset(gb, 0, 16 * 32 * 2);
        for (int k = 0; k < cs->k; k++) {
            ga[2 * k] = cs->ae[k], ga[2 * k + 1] = cs->ao[k];
            gb[k * 32] = cs->be[k], gb[k * 32 + 1] = cs->bo[k];
        }
        gc[0] = cs->c;
        memcpy(gh, gc, sizeof gh);
        dev_run(1, 1, cs->k, 1, gh, ga, 32, gb, mode_csr[0]);
        printf("%-4s 0x%08x", cs->name, gh[0]);
        for (int e = 0; e < QT_AMX_NCAND; e++)
            printf(" %08x%c%c", cs->want[e], (cs->doc >> e) & 1u ? '*' : ' ',
                   cs->want[e] == gh[0] ? '=' : ' ');
        printf("  %s\n", cs->what);
        for (int f = 0; f < 8; f++)
            for (int e = 0; e < QT_AMX_NCAND; e++)
                if (qt_amx_dot(e, (unsigned)f, cs->c, cs->ae, cs->ao, cs->be, cs->bo, cs->k) != gh[0])
                    all_ok[f] &= ~(1u << e);
    }
    printf("('=' marks a candidate equal to the hardware.)\n");
    printf("candidates (with flag variants) equal to the hardware on every case:");
    int any = 0;
    for (int f = 0; f < 8; f++)
        for (int e = 0; e < QT_AMX_NCAND; e++)
            if ((all_ok[f] >> e) & 1u) {
                printf(" %s%s%s%s", qt_amx_cand_name(e), f & 1 ? "+noDAZ" : "",
                       f & 2 ? "+noFTZ" : "", f & 4 ? "+tinyBefore" : "");
                any = 1;
            }
    printf("%s\n", any ? "" : " none");
    return 0;
}

/* ------------------------------------------------------------------ 1b. order masks */
/* FPRev-style masks on a 1x1 tile with K 16: the 33 addend slots are the products 2k (even)
 * and 2k+1 (odd) and C (slot 32). For each pair of slots i < j, slot i holds +2^30, slot j
 * -2^30 and every other slot 1 (products 1 * 1, C 1). A unit added while a big value is in
 * the running sum is absorbed (2^30 + n rounds to 2^30 for n < 64), so the result counts
 * the units added after the two big values met: a fingerprint of the summation order,
 * printed as one base-36 digit per pair for the hardware, compared with every candidate's. */
static void mask_run(int i, int j, uint32_t *out, int cand)
{
    memset(ga, 0, 64 * 2), memset(gb, 0, 16 * 32 * 2);
    for (int s = 0; s < 32; s++) {
        ga[s] = s == i ? 0x4e80 : s == j ? 0xce80 : 0x3f80;
        gb[(s / 2) * 32 + s % 2] = 0x3f80;
    }
    gc[0] = j == 32 ? 0xce800000u : i == 32 ? 0x4e800000u : 0x3f800000u;
    memcpy(ge, gc, sizeof ge);
    if (cand < 0) dev_run(1, 1, 16, 1, ge, ga, 32, gb, mode_csr[0]);
    else emu_run(cand, 1, 1, 16, 1, ge, ga, 32, gb);
    *out = ge[0];
}

static void masks(void)
{
    static const char dig[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    int same[QT_AMX_NCAND];
    for (int e = 0; e < QT_AMX_NCAND; e++) same[e] = 1;
    printf("\n== order masks (K 16, 1x1): row i, the count for each j > i as one base-36 digit "
           "('?' not a small integer); slots 2k even, 2k+1 odd, 32 C\n");
    for (int i = 0; i < 33; i++) {
        printf("%2d ", i);
        for (int j = i + 1; j < 33; j++) {
            uint32_t h, e;
            mask_run(i, j, &h, -1);
            const float f = qt_bf16_f32_bits(h);
            putchar(f >= 0 && f < 36 && f == (float)(int)f ? dig[(int)f] : '?');
            for (int c = 0; c < QT_AMX_NCAND; c++) {
                mask_run(i, j, &e, c);
                if (e != h) same[c] = 0;
            }
        }
        putchar('\n');
    }
    printf("candidates with the hardware's masks:");
    int any = 0;
    for (int e = 0; e < QT_AMX_NCAND; e++)
        if (same[e]) printf(" %s", qt_amx_cand_name(e)), any = 1;
    printf("%s\n", any ? "" : " none (reconstruct the order from the digits above)");
}

/* ------------------------------------------------------------------ 2. shapes x cases */
static int quick_dim(int d) { return d == 1 || d == 2 || d == 7 || d == 16; }

static void shapes(void)
{
    char ctx[120];
    long s = 0;
    for (int rows = 1; rows <= 16; rows++)
        for (int cols = 1; cols <= 16; cols++)
            for (int k = 1; k <= 16; k++, s++)
                for (int i = 0; i < qt_amx_case_count(); i++) {
                    if (g.quick && !(quick_dim(rows) && quick_dim(cols) && quick_dim(k))) break;
                    const qt_amx_case *cs = qt_amx_case_get(i);
                    if (cs->k > k) continue;
                    const int off = (int)(s % (k - cs->k + 1));
                    for (int nb = 0; nb < 2; nb++) {
                        /* nb 0: the case everywhere; nb 1: at (m0, n0) among random values */
                        const int m0 = (int)(s % rows), n0 = (int)(s / 3 % cols);
                        for (int m = 0; m < rows; m++)
                            for (int kk = 0; kk < 2 * k; kk++)
                                ga[m * 32 + kk] = nb ? rnd_bf((int)(s & 1), 0) : 0;
                        for (int kk = 0; kk < k; kk++)
                            for (int n = 0; n < 2 * cols; n++)
                                gb[kk * 32 + n] = nb ? rnd_bf((int)(s & 1), 0) : 0;
                        for (int m = 0; m < rows; m++)
                            for (int n = 0; n < cols; n++)
                                gc[m * 16 + n] = nb ? rnd_f32((int)(s & 1), 0) : cs->c;
                        for (int m = nb ? m0 : 0; m < (nb ? m0 + 1 : rows); m++)
                            for (int kk = 0; kk < k; kk++) {
                                const int in = kk >= off && kk < off + cs->k;
                                ga[m * 32 + 2 * kk] = in ? cs->ae[kk - off] : 0;
                                ga[m * 32 + 2 * kk + 1] = in ? cs->ao[kk - off] : 0;
                            }
                        for (int n = nb ? n0 : 0; n < (nb ? n0 + 1 : cols); n++)
                            for (int kk = 0; kk < k; kk++) {
                                const int in = kk >= off && kk < off + cs->k;
                                gb[kk * 32 + 2 * n] = in ? cs->be[kk - off] : 0;
                                gb[kk * 32 + 2 * n + 1] = in ? cs->bo[kk - off] : 0;
                            }
                        if (nb) gc[m0 * 16 + n0] = cs->c;
                        snprintf(ctx, sizeof ctx, "case %s, rows %d cols %d K %d, offset %d%s",
                                 cs->name, rows, cols, k, off, nb ? ", random neighbours" : "");
                        memcpy(gh, gc, sizeof gh);
                        dev_run(rows, cols, k, 1, gh, ga, 32, gb, mode_csr[0]);
                        for (int e = 0; e < QT_AMX_NCAND; e++) {
                            if (nb) {
                                memcpy(ge, gc, sizeof ge);
                                emu_run(e, rows, cols, k, 1, ge, ga, 32, gb);
                            } else { /* every element is the same case: one emulation */
                                memcpy(ge, gc, sizeof ge);
                                emu_run(e, 1, 1, k, 1, ge, ga, 32, gb);
                                for (int m = 0; m < rows; m++)
                                    for (int n = 0; n < cols; n++) ge[m * 16 + n] = ge[0];
                            }
                            tally(0, e, gh, ge, rows, cols, ctx);
                        }
                        modes(rows, cols, k, 1, gc, ga, 32, gb, gh, 0, ctx);
                    }
                }
}

/* ------------------------------------------------------------------ 3. random tiles */
static void random_tiles(long ntiles)
{
    char ctx[120];
    int alive[QT_AMX_NCAND];
    for (int e = 0; e < QT_AMX_NCAND; e++) alive[e] = 1;
    for (long t = 0; t < ntiles; t++) {
        const int rows = 1 + (int)(rnd() % 16), cols = 1 + (int)(rnd() % 16), k = 1 + (int)(rnd() % 16);
        const int special = t % 8 == 7;
        for (int m = 0; m < rows; m++)
            for (int kk = 0; kk < 2 * k; kk++) ga[m * 32 + kk] = rnd_bf((int)(rnd() & 1), special);
        for (int kk = 0; kk < k; kk++)
            for (int n = 0; n < 2 * cols; n++) gb[kk * 32 + n] = rnd_bf((int)(rnd() & 1), special);
        for (int m = 0; m < rows; m++)
            for (int n = 0; n < cols; n++) gc[m * 16 + n] = rnd_f32((int)(rnd() & 1), special);
        snprintf(ctx, sizeof ctx, "random tile %ld (rows %d cols %d K %d%s)", t, rows, cols, k,
                 special ? ", specials" : "");
        memcpy(gh, gc, sizeof gh);
        dev_run(rows, cols, k, 1, gh, ga, 32, gb, mode_csr[0]);
        modes(rows, cols, k, 1, gc, ga, 32, gb, gh, 1 + (int)(t % (NMODE - 1)), ctx);
        for (int e = 0; e < QT_AMX_NCAND; e++) {
            if (!alive[e]) continue;
            memcpy(ge, gc, sizeof ge);
            emu_run(e, rows, cols, k, 1, ge, ga, 32, gb);
            tally(1, e, gh, ge, rows, cols, ctx);
            if (g.bad_tiles_x[1][e] >= 1000) alive[e] = 0; /* NaN-vs-NaN alone never drops */
        }
        if (ntiles >= 100000 && (t + 1) % (ntiles / 10) == 0) {
            printf("  random tiles: %ld done\n", t + 1);
            fflush(stdout);
        }
    }
}

/* ------------------------------------------------------------------ 4. long K */
static void long_k(void)
{
    static const int ks[] = {16, 17, 31, 64, 256, 1024, 4096};
    char ctx[120];
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        for (int rep = 0; rep < 3; rep++) {
            const int kp = (ks[i] + 15) / 16 * 16, lda = 2 * kp; /* zero-padded K tail */
            for (int m = 0; m < 16; m++)
                for (int kk = 0; kk < 2 * kp; kk++)
                    ga[m * lda + kk] = kk < 2 * ks[i] ? rnd_bf(rep != 1, rep == 2) : 0;
            for (int kk = 0; kk < kp; kk++)
                for (int n = 0; n < 32; n++) gb[kk * 32 + n] = kk < ks[i] ? rnd_bf(rep != 1, rep == 2) : 0;
            for (int j = 0; j < 256; j++) gc[j] = rnd_f32(rep != 1, rep == 2);
            snprintf(ctx, sizeof ctx, "long K %d (%d instructions), rep %d", ks[i], kp / 16, rep);
            memcpy(gh, gc, sizeof gh);
            dev_run(16, 16, 16, kp / 16, gh, ga, lda, gb, mode_csr[0]);
            modes(16, 16, 16, kp / 16, gc, ga, lda, gb, gh, 0, ctx);
            for (int e = 0; e < QT_AMX_NCAND; e++) {
                memcpy(ge, gc, sizeof ge);
                emu_run(e, 16, 16, 16, kp / 16, ge, ga, lda, gb);
                tally(2, e, gh, ge, 16, 16, ctx);
            }
        }
}

static int amx_report(void)
{
    printf("\n== AMX mismatches against each candidate (tiles with a mismatch / tiles; elements; "
           "of which both NaN)\n");
    int match_all[QT_AMX_NCAND], match_num[QT_AMX_NCAND], nmatch = 0, nnum = 0;
    for (int e = 0; e < QT_AMX_NCAND; e++) {
        match_all[e] = 1, match_num[e] = 1;
        printf("%-4s %s\n", qt_amx_cand_name(e), qt_amx_cand_what(e));
        for (int s = 0; s < NSEC; s++) {
            printf("     %-15s %s%ld / %ld tiles, %ld / %ld elements, %ld NaN-vs-NaN\n", sec_name[s],
                   s == 1 && g.bad_tiles_x[s][e] >= 1000 ? "(dropped) >= " : "", g.bad_tiles[s][e],
                   g.tiles[s][e], g.bad[s][e], g.elems[s][e], g.bad_nan[s][e]);
            if (g.first[s][e][0]) printf("       first: %s\n", g.first[s][e]);
            if (g.bad[s][e]) match_all[e] = 0;
            if (g.bad[s][e] != g.bad_nan[s][e]) match_num[e] = 0;
        }
        nmatch += match_all[e];
        nnum += match_num[e] && !match_all[e];
    }
    printf("\n== MXCSR (the hardware under each mode against itself under the default)\n");
    for (int md = 1; md < NMODE; md++) {
        printf("%-15s %ld runs, %ld differ\n", mode_name[md], g.mode_runs[md], g.mode_diff[md]);
        if (g.mode_first[md][0]) printf("  first: %s\n", g.mode_first[md]);
    }
    printf("\nAMX verdict: ");
    if (!nmatch) printf("no candidate matches bit for bit (see the tables above)\n");
    for (int e = 0; e < QT_AMX_NCAND; e++)
        if (match_all[e]) printf("%s matches bit for bit on every tile run ", qt_amx_cand_name(e));
    if (nmatch) printf("\n");
    for (int e = 0; e < QT_AMX_NCAND; e++)
        if (match_num[e] && !match_all[e])
            printf("AMX verdict: %s matches bit for bit except where both results are NaN (the "
                   "NaN payload or sign differs: see the F cases)\n", qt_amx_cand_name(e));
    (void)nnum;
    if (g.fake >= 0 && !match_all[g.fake]) {
        printf("amx-probe: harness error: --fake %s does not match its own emulation\n",
               qt_amx_cand_name(g.fake));
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ VDPBF16PS */
#define VB 4096
#define VCH 4
static qt_bf16 va[VCH][2 * VB], vb[VCH][2 * VB], vsa[VCH][2 * VB], vsb[VCH][2 * VB];
static float vc[VB], vref[VB], vins[VB], vsw[VB];

static int vdp_part(long ncases)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    const int cpu = __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1u);
    printf("\n== VDPBF16PS against the project's reference (qt_bf16_dp_ref)\n");
    if (!cpu) {
        printf("VDPBF16PS: skipped, this CPU does not report AVX512_BF16 (CPUID.(7,1):EAX bit 5)\n");
        return 0;
    }
    float probe = 0;
    const qt_bf16 z2[2] = {0, 0};
    if (qt_bf16_dp_insn(&probe, z2, z2, 1) != 0) {
        printf("VDPBF16PS: skipped, this build has no AVX512_BF16 path (ARCH without it)\n");
        return 0;
    }
    int bad = 0;
    printf("%-4s %-10s %-10s %-10s %-10s  %s\n", "case", "want", "insn", "ref", "alt", "what");
    for (int i = 0; i < qt_vdp_case_count(); i++) {
        const qt_vdp_case *cs = qt_vdp_case_get(i);
        uint32_t got[NMODE] = {0};
        float r = qt_bf16_f32_bits(cs->c);
        for (int k = 0; k < cs->k; k++) {
            const qt_bf16 pa[2] = {cs->alo[k], cs->ahi[k]}, pb[2] = {cs->blo[k], cs->bhi[k]};
            qt_bf16_dp_ref(&r, pa, pb, 1);
        }
        int lane_bad = 0;
        for (int md = 0; md < NMODE; md++) {
            float acc[16];
            for (int l = 0; l < 16; l++) acc[l] = qt_bf16_f32_bits(cs->c);
            for (int k = 0; k < cs->k; k++) {
                qt_bf16 pa[32], pb[32];
                for (int l = 0; l < 16; l++)
                    pa[2 * l] = cs->alo[k], pa[2 * l + 1] = cs->ahi[k], pb[2 * l] = cs->blo[k],
                    pb[2 * l + 1] = cs->bhi[k];
                const unsigned saved = _mm_getcsr();
                _mm_setcsr(mode_csr[md]);
                qt_bf16_dp_insn(acc, pa, pb, 16);
                _mm_setcsr(saved);
            }
            got[md] = qt_bf16_bits_f32(acc[0]);
            for (int l = 0; l < 16; l++) lane_bad |= qt_bf16_bits_f32(acc[l]) != cs->want;
        }
        const int ok = !lane_bad && qt_bf16_bits_f32(r) == cs->want;
        bad += !ok;
        printf("%-4s 0x%08x 0x%08x 0x%08x 0x%08x  %s (alt: %s)%s\n", cs->name, cs->want, got[0],
               qt_bf16_bits_f32(r), cs->alt, cs->what, cs->alt_what,
               ok ? "" : "  <- DIFFERS (some lane or MXCSR mode)");
    }
    printf("VDPBF16PS cases: %d of %d differ from the expected bits (16 lanes, %d MXCSR modes)\n",
           bad, qt_vdp_case_count(), NMODE);
    long diff[NMODE] = {0}, lanes[NMODE] = {0}, swapped = 0, total = 0;
    char first[200] = "";
    for (long done = 0, batch = 0; done < ncases; done += VB, batch++) {
        const int md = (int)(batch % NMODE), narrow = (int)(batch / NMODE % 2);
        for (int l = 0; l < VB; l++) vc[l] = qt_bf16_f32_bits(rnd_f32(narrow, 0));
        for (int k = 0; k < VCH; k++)
            for (int l = 0; l < 2 * VB; l++) {
                va[k][l] = rnd_bf(narrow, 0), vb[k][l] = rnd_bf(narrow, 0);
                vsa[k][l ^ 1] = va[k][l], vsb[k][l ^ 1] = vb[k][l]; /* pairs swapped */
            }
        memcpy(vref, vc, sizeof vref), memcpy(vins, vc, sizeof vins), memcpy(vsw, vc, sizeof vsw);
        for (int k = 0; k < VCH; k++) {
            qt_bf16_dp_ref(vref, va[k], vb[k], VB);
            qt_bf16_dp_ref(vsw, vsa[k], vsb[k], VB);
        }
        const unsigned saved = _mm_getcsr();
        _mm_setcsr(mode_csr[md]);
        for (int k = 0; k < VCH; k++) qt_bf16_dp_insn(vins, va[k], vb[k], VB);
        _mm_setcsr(saved);
        for (int l = 0; l < VB; l++) {
            const uint32_t x = qt_bf16_bits_f32(vins[l]), y = qt_bf16_bits_f32(vref[l]);
            lanes[md]++, total++;
            swapped += qt_bf16_bits_f32(vsw[l]) != y;
            if (x != y && !diff[md]++ && !first[0])
                snprintf(first, sizeof first, "lane %d of batch %ld (%s): insn 0x%08x, ref 0x%08x",
                         l, batch, mode_name[md], x, y);
        }
    }
    printf("VDPBF16PS random lanes (chains of %d instructions, exponents in [-40, 40] and [-2, 2]):\n",
           VCH);
    long alld = 0;
    for (int md = 0; md < NMODE; md++) {
        printf("  MXCSR %-15s %ld lanes, %ld differ from the reference\n", mode_name[md], lanes[md],
               diff[md]);
        alld += diff[md];
    }
    if (first[0]) printf("  first: %s\n", first);
    printf("  discrimination: the pairs in the other order (lo first) differ from the reference on "
           "%ld of %ld lanes (%.2f%%)\n", swapped, total, total ? 100.0 * (double)swapped / (double)total : 0.0);
    printf("VDPBF16PS verdict: %s\n", !bad && !alld ? "the instruction equals the project's reference "
           "bit for bit on every case and lane above, under every MXCSR mode" : "DIFFERS (see above)");
    return bad || alld;
}

int main(int argc, char **argv)
{
    long ntiles = 1000000, nvdp = 10000000;
    g.fake = -1;
    g.rng = 0x9e3779b97f4a7c15ull;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : 0;
        char *end = 0;
        if (!strcmp(argv[i], "--tiles") && v) ntiles = strtol(v, &end, 10), i++;
        else if (!strcmp(argv[i], "--vdp-cases") && v) nvdp = strtol(v, &end, 10), i++;
        else if (!strcmp(argv[i], "--seed") && v) g.rng = strtoull(v, &end, 0) | 1u, i++;
        else if (!strcmp(argv[i], "--quick")) {
            g.quick = 1;
            continue;
        }
        else if (!strcmp(argv[i], "--fake") && v) {
            for (int e = 0; e < QT_AMX_NCAND; e++)
                if (!strcmp(v, qt_amx_cand_name(e))) g.fake = e;
            if (g.fake < 0) {
                fprintf(stderr, "amx-probe: --fake %s: expected one of E1 E2 E3 E4g E4f E5 E6\n", v);
                return 2;
            }
            i++;
            continue;
        } else {
            fprintf(stderr, "amx-probe: unknown argument '%s' (usage: amx-probe [--tiles N] "
                    "[--vdp-cases N] [--seed S] [--quick] [--fake E1|E2|E3|E4g|E4f|E5|E6])\n", argv[i]);
            return 2;
        }
        if (!end || *end || ntiles < 0 || nvdp < 0) {
            fprintf(stderr, "amx-probe: %s %s: expected a non-negative integer\n", argv[i - 1], v);
            return 2;
        }
    }
    char cpu[400], why[300];
    qt_amx_hw_cpu(cpu, sizeof cpu);
    printf("amx-probe: CPU %s\n", cpu);
    /* the emulations against their own case table (the unit tests check it too) */
    for (int i = 0; i < qt_amx_case_count(); i++) {
        const qt_amx_case *cs = qt_amx_case_get(i);
        for (int e = 0; e < QT_AMX_NCAND; e++)
            if (qt_amx_dot(e, 0, cs->c, cs->ae, cs->ao, cs->be, cs->bo, cs->k) != cs->want[e]) {
                printf("amx-probe: harness error: %s misses case %s\n", qt_amx_cand_name(e), cs->name);
                return 1;
            }
    }
    int rc = 0;
    const int have = qt_amx_hw_available(why, sizeof why);
    if (g.fake >= 0) {
        printf("amx-probe: --fake %s: the AMX part runs on that emulation, not on hardware (%s)\n",
               qt_amx_cand_name(g.fake), why);
    } else if (!have) {
        printf("amx-probe: no AMX: %s; the AMX part is skipped (nothing about TDPBF16PS is "
               "measured here)\n", why);
    } else {
        printf("amx-probe: %s\n", why);
    }
    if (g.fake >= 0 || have) {
        cases_1x1();
        masks();
        printf("\n== every tile shape x every case (%s)\n",
               g.quick ? "--quick: rows, cols, K in {1, 2, 7, 16}" : "16 x 16 x 16 shapes");
        fflush(stdout);
        shapes();
        printf("== %ld random tiles\n", ntiles);
        fflush(stdout);
        random_tiles(ntiles);
        printf("== long K\n");
        long_k();
        rc |= amx_report();
    }
    rc |= vdp_part(nvdp);
    return rc;
}
