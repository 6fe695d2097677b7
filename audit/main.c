/* main.c - qtrain-audit's command line: dispatches to runs, ckpt, grads or plot
 * (qt_audit.h). Exit 0 identical / written, 1 different, 2 error or bad usage.
 * Invariant: the top of the tool; it calls the commands, none of them calls back.
 */
#include <stdio.h>
#include <string.h>
#include "qt_audit.h"
#include "qt_err.h"

static int qt_audit_usage(FILE *f)
{
    fprintf(f,
            "usage: qtrain-audit runs A.jsonl B.jsonl [--all]\n"
            "         manifests key by key; per step: loss bits, fingerprint, ulp distance of\n"
            "         loss and grad norm; verdict 'bit-identical over N steps' or\n"
            "         'diverges at step k'\n"
            "       qtrain-audit ckpt A B [--all]\n"
            "         per tensor (HF names): equal, or differing elements, max ulp, max abs and\n"
            "         relative difference, first differing element; A and B are .safetensors\n"
            "         files, checkpoint directories or *.index.json, in any combination\n"
            "       qtrain-audit grads A B [--all]\n"
            "         the same for dump_grads= files; names the earliest differing layer\n"
            "       qtrain-audit plot M.jsonl [M2.jsonl] -o OUT.png [--overwrite]\n"
            "         loss, grad norm, learning rate and tokens/s against step (gnuplot);\n"
            "         two files are overlaid, titled with their runs; an existing OUT.png\n"
            "         is replaced only with --overwrite\n"
            "exit status: 0 bit-identical (plot: written), 1 different, 2 error\n");
    return QT_AUDIT_ERR;
}

int main(int argc, char **argv)
{
    qt_err_set_program("qtrain-audit");   /* the firmware readers' messages name this tool */
    if (argc < 2) return qt_audit_usage(stderr);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        qt_audit_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "runs")) return qt_audit_runs(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt")) return qt_audit_tensors(argc - 2, argv + 2, "checkpoint");
    if (!strcmp(cmd, "grads")) return qt_audit_tensors(argc - 2, argv + 2, "gradients");
    if (!strcmp(cmd, "plot")) return qt_audit_plot(argc - 2, argv + 2);
    fprintf(stderr, "qtrain-audit: unknown command '%s'\n", cmd);
    return qt_audit_usage(stderr);
}
