/* args.c - the arguments of qtrain-audit's comparing commands (qt_audit_two_args,
 * qt_audit.h), shared by runs.c and tensors.c.
 * Invariant: reads argv only; a bad command line prints one usage line on stderr.
 */
#include <stdio.h>
#include <string.h>
#include "qt_audit.h"

int qt_audit_two_args(int argc, char **argv, const char *usage, const char **a,
                      const char **b, int *all)
{
    int n = 0;
    *a = *b = NULL;
    *all = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--all")) *all = 1;
        else if (n == 0) *a = argv[i], n++;
        else if (n == 1) *b = argv[i], n++;
        else n = 3;
    }
    if (n == 2) return 0;
    fprintf(stderr, "usage: qtrain-audit %s [--all]\n", usage);
    return -1;
}
