/* st_compare.c - compare two safetensors files tensor by tensor.
 *
 *   st_compare <actual.safetensors> <golden.safetensors> <rel_tol>
 *
 * Both files must hold the same set of names with the same shapes. For each tensor it
 * prints max |actual - golden| / max(max |golden|, 1e-30) (the tolerance convention of
 * tests/unit/qt_test_util.h) and exits 0 only if every tensor is within rel_tol.
 * Values are read as float (F32, BF16, F16, F64) through the firmware's reader; the
 * comparison itself is done in double. Exit codes: 0 ok, 1 out of tolerance or set/shape
 * mismatch, 2 usage or unreadable file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/qt_io.h"
#include "io/safetensors.h"

#define QT_CMP_CHUNK 65536

static struct {
    float a[QT_CMP_CHUNK], g[QT_CMP_CHUNK];
} qt_cmp;

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
                double e = fabs((double)qt_cmp.a[i] - (double)qt_cmp.g[i]) / scale;
                if (!(e <= worst))
                    worst = e;   /* NaN propagates as the worst value */
            }
        }
    return worst;
}

int main(int argc, char **argv)
{
    int ha, hg, bad = 0;
    if (argc != 4) {
        fprintf(stderr, "usage: %s <actual.safetensors> <golden.safetensors> <rel_tol>\n",
                argv[0]);
        return 2;
    }
    char *end;
    double tol = strtod(argv[3], &end);
    if (*end || !(tol >= 0.0)) {
        fprintf(stderr, "st_compare: bad tolerance '%s'\n", argv[3]);
        return 2;
    }
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
        int ok = e <= tol;
        printf("%s %-70s rel_err %.3e\n", ok ? "ok     " : "FAIL   ", g->name, e);
        if (!(e <= worst_all))
            worst_all = e;
        bad |= !ok;
    }
    printf("%s: %d tensors, worst rel_err %.3e, tol %.3e\n", bad ? "FAIL" : "PASS",
           (int)qt_st_count(hg), worst_all, tol);
    qt_st_close(ha);
    qt_st_close(hg);
    return bad;
}
