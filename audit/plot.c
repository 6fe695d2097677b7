/* plot.c - `qtrain-audit plot M.jsonl [M2.jsonl] -o OUT.png`: a run at a glance.
 *
 * Four panels against the step: loss, gradient norm (log scale), learning rate and
 * tokens/s; a second metrics file is overlaid in every panel (its own colour, named in the
 * key). The step lines of each file are written to a temporary data file, and gnuplot
 * (Debian's gnuplot-nox, installed by `make deps`) renders them with its pngcairo terminal
 * through a script on its stdin. Invariants: OUT is written only when gnuplot succeeds (it
 * renders to OUT.tmp.<pid>, then renames); the temporaries are removed in every case.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "qt_audit.h"

/* Basename of a path, for the key. */
static const char *qt_base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int qt_audit_plot(int argc, char **argv)
{
    const char *in[2] = {NULL, NULL}, *out = NULL;
    int n_in = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (n_in < 2 && argv[i][0] != '-') in[n_in++] = argv[i];
        else n_in = 3;
    }
    if (!out || n_in < 1 || n_in > 2) {
        fprintf(stderr, "usage: qtrain-audit plot M.jsonl [M2.jsonl] -o OUT.png\n");
        return QT_AUDIT_ERR;
    }
    char dat[2][64], tmp_png[4200];
    int rc = QT_AUDIT_SAME, made = 0;
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%ld", out, (long)getpid());
    for (int k = 0; k < n_in && !rc; k++) {
        qt_audit_metrics m;
        if (qt_audit_metrics_read(in[k], &m)) { rc = QT_AUDIT_ERR; break; }
        if (!m.n_steps) {
            fprintf(stderr, "qtrain-audit: %s holds no step lines to plot\n", in[k]);
            qt_audit_metrics_free(&m);
            rc = QT_AUDIT_ERR;
            break;
        }
        snprintf(dat[k], sizeof dat[k], "/tmp/qtrain-audit-%ld-%d.dat", (long)getpid(), k);
        FILE *f = fopen(dat[k], "w");
        if (!f) { perror(dat[k]); rc = QT_AUDIT_ERR; qt_audit_metrics_free(&m); break; }
        made = k + 1;
        /* the progress lines count steps from 1: plot step+1, so step 200 is the last */
        for (int i = 0; i < m.n_steps; i++) {
            const qt_audit_step *s = &m.steps[i];
            fprintf(f, "%lld %.9g %.17g %.17g %.9g\n", (long long)s->step + 1, s->loss,
                    s->has_norm ? s->grad_norm : 0.0 / 0.0, s->lr, s->tokens_per_s);
        }
        rc = fclose(f) ? QT_AUDIT_ERR : rc;
        qt_audit_metrics_free(&m);
    }
    if (!rc) {
        FILE *g = popen("gnuplot", "w");
        if (!g) {
            perror("qtrain-audit: gnuplot (make deps installs gnuplot-nox)");
            rc = QT_AUDIT_ERR;
        } else {
            static const char *const panel[4][3] = {
                {"2", "loss (cross entropy, nats)", "Loss"},
                {"3", "gradient norm (before clipping)", "Gradient norm"},
                {"4", "learning rate", "Learning rate"},
                {"5", "tokens / s", "Throughput"}};
            fprintf(g, "set terminal pngcairo noenhanced size 1400,900 font 'Sans,11'\n"
                       "set output '%s'\nset datafile missing 'nan'\n"
                       "set multiplot layout 2,2 title '%s%s%s' font 'Sans,13'\n"
                       "set grid\nset key top right\nset xlabel 'step'\n",
                    tmp_png, qt_base(in[0]), n_in > 1 ? " vs " : "", n_in > 1 ? qt_base(in[1]) : "");
            for (int p = 0; p < 4; p++) {
                fprintf(g, "set title '%s'\nset ylabel '%s'\n%s\n", panel[p][2], panel[p][1],
                        p == 1 ? "set logscale y" : "unset logscale y");
                fprintf(g, "plot '%s' using 1:%s with lines lw 2 lc rgb '#1f77b4' title 'A: %s'",
                        dat[0], panel[p][0], qt_base(in[0]));
                if (n_in > 1)
                    fprintf(g, ", '%s' using 1:%s with lines lw 2 dt 2 lc rgb '#d62728' title 'B: %s'",
                            dat[1], panel[p][0], qt_base(in[1]));
                fprintf(g, "\n");
            }
            fprintf(g, "unset multiplot\nset output\n");
            int st = pclose(g);
            if (st != 0) {
                fprintf(stderr, "qtrain-audit: gnuplot failed (status %d)\n", st);
                rc = QT_AUDIT_ERR;
            } else if (rename(tmp_png, out)) {
                perror(out);
                rc = QT_AUDIT_ERR;
            }
        }
    }
    for (int k = 0; k < made; k++) unlink(dat[k]);
    if (rc) unlink(tmp_png);
    else printf("%s\n", out);
    return rc;
}
