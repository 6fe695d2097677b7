/* main.c - configgen's command line: configgen [-o outdir] <run.yml> [key=value ...].
 * Everything else lives in the qt_cg_ library so the unit tests can call it. */
#include <stdio.h>
#include "qt_cg.h"

int main(int argc, char **argv)
{
    char err[2048];
    if (qt_cg_generate(argc, argv, err, sizeof err)) {
        fprintf(stderr, "configgen: %s\n", err);
        return 1;
    }
    return 0;
}
