/* driver/main.c - configgen's command line:
 *   configgen [-o outdir] <run.yml> [key=value ...]   generate generated/<run>/ (exit 0, 1 on error);
 *                                                     on success one line on stdout: what was
 *                                                     written, the mesh, the plan hash, the
 *                                                     arena against the budget
 *   configgen --diff A B                              compare two plans (driver/diff.c): exit 0
 *                                                     when identical apart from names and hash,
 *                                                     1 when they differ, 2 on error
 * Everything else lives in the qt_cg_ library so the unit tests can call it.
 * SIGXFSZ (`ulimit -f`) is ignored: a write past the limit fails with EFBIG and the plan
 * directory's temporaries are removed (driver/generate.c), where the signal ended configgen
 * and left them. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "driver/qt_cg_driver.h"

int main(int argc, char **argv)
{
    char err[2048];
    signal(SIGXFSZ, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "--diff")) {
        if (argc != 4) {
            fprintf(stderr, "configgen: usage: configgen --diff A B (each a run .yml, a generated "
                    "plan directory or a plan.txt)\n");
            return 2;
        }
        qt_cg_buf out = {0};
        int differs = 0;
        if (qt_cg_diff(argv[2], argv[3], &out, &differs, err, sizeof err)) {
            qt_cg_buf_free(&out);
            fprintf(stderr, "configgen: --diff: %s\n", err);
            return 2;
        }
        fputs(out.p ? out.p : "", stdout);
        qt_cg_buf_free(&out);
        if (fflush(stdout)) return 2;
        return differs;
    }
    qt_cg_buf summary = {0};
    if (qt_cg_generate_summary(argc, argv, &summary, err, sizeof err)) {
        qt_cg_buf_free(&summary);
        fprintf(stderr, "configgen: %s\n", err);
        return 1;
    }
    fputs(summary.p ? summary.p : "", stdout);
    qt_cg_buf_free(&summary);
    return fflush(stdout) ? 1 : 0;
}
