/* st_scale.c - copy a safetensors file, multiplying the tensors whose name matches a glob.
 *
 *   st_scale <in.safetensors> <out.safetensors> <glob> <factor>
 *
 * Writes every tensor of <in> to <out> as F32 in header order (values read through the
 * firmware's reader, as st_compare reads them), those whose name matches <glob>
 * (fnmatch(3), no flags) multiplied by <factor> in float. It makes the deliberately wrong
 * gradient files of the negative controls (tests/e2e/78_bf16_golden.sh): a comparison that
 * no wrong file can fail checks nothing. Exit codes: 0 written, 1 no tensor matched (a
 * control that changes nothing would pass for the wrong reason), 2 usage, read or write
 * error.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/qt_io.h"
#include "io/safetensors.h"

#define QT_SCALE_CHUNK 65536

static float qt_scale_buf[QT_SCALE_CHUNK];

static int qt_scale_copy(int h, double factor, const char *glob)
{
    for (int32_t i = 0; i < qt_st_count(h); i++) {
        const qt_st_tensor *t = qt_st_at(h, i);
        int hit = !fnmatch(glob, t->name, 0);
        for (int64_t at = 0; at < t->numel; at += QT_SCALE_CHUNK) {
            int64_t n = t->numel - at < QT_SCALE_CHUNK ? t->numel - at : QT_SCALE_CHUNK;
            if (qt_st_read_f32(h, t, at, n, qt_scale_buf))
                return -1;
            for (int64_t k = 0; hit && k < n; k++)
                qt_scale_buf[k] = (float)(qt_scale_buf[k] * factor);
            if (qt_st_wwrite(qt_scale_buf, 4 * n))
                return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int h, matched = 0, count;
    if (argc != 5) {
        fprintf(stderr, "usage: %s <in.safetensors> <out.safetensors> <glob> <factor>\n", argv[0]);
        return 2;
    }
    char *end;
    double factor = strtod(argv[4], &end);
    if (*end || end == argv[4]) {
        fprintf(stderr, "st_scale: bad factor '%s'\n", argv[4]);
        return 2;
    }
    if (qt_st_open(argv[1], &h))
        return 2;
    count = (int)qt_st_count(h);
    int rc = qt_st_wopen(argv[2]);
    for (int32_t i = 0; !rc && i < count; i++) {
        const qt_st_tensor *t = qt_st_at(h, i);
        matched += !fnmatch(argv[3], t->name, 0);
        rc = qt_st_wadd(t->name, QT_ST_F32, t->ndim, t->shape);
    }
    if (!rc)
        rc = qt_st_wbegin();
    if (!rc)
        rc = qt_scale_copy(h, factor, argv[3]);
    if (!rc)
        rc = qt_st_wcommit();
    if (rc) {
        qt_st_wabort();
        qt_st_close(h);
        fprintf(stderr, "st_scale: cannot write %s\n", argv[2]);
        return 2;
    }
    qt_st_close(h);
    printf("st_scale: %d of %d tensors scaled by %g into %s\n", matched, count, factor, argv[2]);
    return matched ? 0 : 1;
}
