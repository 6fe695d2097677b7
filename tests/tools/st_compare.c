/* st_compare.c - compare two safetensors files tensor by tensor.
 *
 *   st_compare <actual.safetensors> <golden.safetensors> <rel_tol>
 *              [--tol <glob> <tol>]... [--global <tol>]
 *
 * Both files must hold the same set of names with the same shapes. For each tensor it
 * prints max |actual - golden| / max(max |golden|, 1e-30) (the tolerance convention of
 * tests/unit/qt_test_util.h) and exits 0 only if every tensor is within rel_tol.
 * Values are read as float (F32, BF16, F16, F64) through the firmware's reader; the
 * comparison itself is done in double. Exit codes: 0 ok, 1 out of tolerance or set/shape
 * mismatch, 2 usage or unreadable file.
 *
 * Options (for comparisons whose error is not uniform over the tensors, e.g. a bf16 run
 * against the float64 reference, where a router decision that flips makes the routed
 * experts' gradients differ far more than the rest; docs/precision.md):
 *   --tol GLOB TOL  tensors whose name matches GLOB (fnmatch(3), no flags: '*' crosses
 *                   dots) are held to TOL instead of rel_tol; the first matching --tol
 *                   wins. A rule that matches no tensor is an error (exit 1): a stale or
 *                   misspelt pattern must not go unnoticed.
 *   --global TOL    also ||actual - golden||_2 / ||golden||_2 over every element of every
 *                   tensor must be <= TOL: one figure that every tensor, including those
 *                   with a loose per-tensor bound, contributes to.
 * With options, each tensor line also names its tolerance, and a summary per rule and the
 * global figure precede the last line. Without options the output is unchanged.
 */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/qt_io.h"
#include "io/safetensors.h"

#define QT_CMP_CHUNK 65536

#define QT_CMP_MAX_RULES 16

static struct {
    float a[QT_CMP_CHUNK], g[QT_CMP_CHUNK];
    double d2, g2;   /* sum (a - g)^2 and sum g^2 over every tensor compared (--global) */
} qt_cmp;

/* One --tol rule, with what it matched. */
typedef struct {
    const char *glob;
    double tol, worst;
    int count;
    const char *worst_name;
} qt_cmp_rule;

static int qt_cmp_same_shape(const qt_st_tensor *a, const qt_st_tensor *g)
{
    if (a->ndim != g->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != g->shape[d])
            return 0;
    return 1;
}

/* Returns the relative error of one tensor, or -1 if a dtype cannot be read. */
static double qt_cmp_tensor(int ha, const qt_st_tensor *a, int hg, const qt_st_tensor *g)
{
    double scale = 1e-30, worst = 0.0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t at = 0; at < g->numel; at += QT_CMP_CHUNK) {
            int64_t n = g->numel - at < QT_CMP_CHUNK ? g->numel - at : QT_CMP_CHUNK;
            if (qt_st_read_f32(hg, g, at, n, qt_cmp.g) ||
                (pass && qt_st_read_f32(ha, a, at, n, qt_cmp.a)))
                return -1.0;
            for (int64_t i = 0; i < n; i++) {
                if (!pass) {
                    scale = fmax(scale, fabs((double)qt_cmp.g[i]));
                    continue;
                }
                double d = (double)qt_cmp.a[i] - (double)qt_cmp.g[i];
                qt_cmp.d2 += d * d;
                qt_cmp.g2 += (double)qt_cmp.g[i] * (double)qt_cmp.g[i];
                double e = fabs(d) / scale;
                if (!(e <= worst))
                    worst = e;   /* NaN propagates as the worst value */
            }
        }
    return worst;
}

static int qt_cmp_parse_tol(const char *text, double *out)
{
    char *end;
    *out = strtod(text, &end);
    if (*end || end == text || !(*out >= 0.0)) {
        fprintf(stderr, "st_compare: bad tolerance '%s'\n", text);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int ha, hg, bad = 0, nrules = 0, have_global = 0;
    static qt_cmp_rule rules[QT_CMP_MAX_RULES];
    double global_tol = 0.0;
    if (argc < 4) {
        fprintf(stderr, "usage: %s <actual.safetensors> <golden.safetensors> <rel_tol>"
                " [--tol <glob> <tol>]... [--global <tol>]\n", argv[0]);
        return 2;
    }
    char *end;
    double tol = strtod(argv[3], &end);
    if (*end || !(tol >= 0.0)) {
        fprintf(stderr, "st_compare: bad tolerance '%s'\n", argv[3]);
        return 2;
    }
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--tol") && i + 2 < argc && nrules < QT_CMP_MAX_RULES) {
            rules[nrules].glob = argv[i + 1];
            if (qt_cmp_parse_tol(argv[i + 2], &rules[nrules].tol))
                return 2;
            nrules++;
            i += 2;
        } else if (!strcmp(argv[i], "--global") && i + 1 < argc && !have_global) {
            if (qt_cmp_parse_tol(argv[i + 1], &global_tol))
                return 2;
            have_global = 1;
            i++;
        } else {
            fprintf(stderr, "st_compare: bad option '%s' (--tol <glob> <tol>, at most %d;"
                    " --global <tol>, once)\n", argv[i], QT_CMP_MAX_RULES);
            return 2;
        }
    }
    int opts = nrules > 0 || have_global;
    if (qt_st_open(argv[1], &ha))
        return 2;
    if (qt_st_open(argv[2], &hg)) {
        qt_st_close(ha);
        return 2;
    }
    for (int32_t i = 0; i < qt_st_count(ha); i++)
        if (!qt_st_find(hg, qt_st_at(ha, i)->name)) {
            printf("EXTRA   %s (only in %s)\n", qt_st_at(ha, i)->name, argv[1]);
            bad = 1;
        }
    double worst_all = 0.0;
    for (int32_t i = 0; i < qt_st_count(hg); i++) {
        const qt_st_tensor *g = qt_st_at(hg, i), *a = qt_st_find(ha, g->name);
        if (!a) {
            printf("MISSING %s (only in %s)\n", g->name, argv[2]);
            bad = 1;
            continue;
        }
        if (!qt_cmp_same_shape(a, g)) {
            printf("SHAPE   %s differs\n", g->name);
            bad = 1;
            continue;
        }
        double e = qt_cmp_tensor(ha, a, hg, g);
        if (e < 0.0) {
            printf("DTYPE   %s: %s vs %s not comparable as floats\n", g->name,
                   qt_st_dtype_name(a->dtype), qt_st_dtype_name(g->dtype));
            bad = 1;
            continue;
        }
        qt_cmp_rule *r = NULL;
        for (int k = 0; k < nrules && !r; k++)
            if (!fnmatch(rules[k].glob, g->name, 0))
                r = &rules[k];
        double t = r ? r->tol : tol;
        int ok = e <= t;
        if (!opts)
            printf("%s %-70s rel_err %.3e\n", ok ? "ok     " : "FAIL   ", g->name, e);
        else
            printf("%s %-70s rel_err %.3e tol %.1e\n", ok ? "ok     " : "FAIL   ", g->name,
                   e, t);
        if (r) {
            r->count++;
            if (!(e <= r->worst) || !r->worst_name) {
                r->worst = e;
                r->worst_name = g->name;
            }
        } else if (!(e <= worst_all))
            worst_all = e;
        bad |= !ok;
    }
    for (int k = 0; k < nrules; k++) {
        if (!rules[k].count) {
            printf("FAIL    rule '%s' matches no tensor\n", rules[k].glob);
            bad = 1;
            continue;
        }
        printf("rule '%s': %d tensors, worst rel_err %.3e (%s), tol %.3e\n", rules[k].glob,
               rules[k].count, rules[k].worst, rules[k].worst_name, rules[k].tol);
    }
    if (have_global) {
        double rel = sqrt(qt_cmp.d2) / fmax(sqrt(qt_cmp.g2), 1e-30);
        int ok = rel <= global_tol;   /* NaN fails */
        printf("%s global ||actual - golden|| / ||golden|| %.3e, tol %.3e\n",
               ok ? "ok     " : "FAIL   ", rel, global_tol);
        bad |= !ok;
    }
    if (!opts)
        printf("%s: %d tensors, worst rel_err %.3e, tol %.3e\n", bad ? "FAIL" : "PASS",
               (int)qt_st_count(hg), worst_all, tol);
    else
        printf("%s: %d tensors, worst rel_err %.3e, tol %.3e (tensors under no rule)\n",
               bad ? "FAIL" : "PASS", (int)qt_st_count(hg), worst_all, tol);
    qt_st_close(ha);
    qt_st_close(hg);
    return bad;
}
