/* plot.c - `qtrain-audit plot M.jsonl [M2.jsonl] -o OUT.png [--overwrite]`: a run at a
 * glance.
 *
 * Four panels against the step: loss, gradient norm (log scale), learning rate and
 * tokens/s; a second metrics file is overlaid in every panel (its own colour, named in the
 * key). The loss panel also draws each file's held-out eval loss (its eval lines, issue 33),
 * its mtp_loss (the MTP head's cross entropy, issue 31) when its step lines have one, and a
 * dotted line at each step where a new pass over the data begins (from the run
 * manifest's data windows and passes). When a file's eval lines carry the MTP head's
 * acceptance rate (mtp_eval_target_module), a fifth panel draws it against the step (the
 * layout becomes three rows; without one the script is as before). The title and the keys name each run as "RUN (FILE)": the "run" of the file's first
 * manifest line, and the file's base name (the base name alone when the file has no
 * manifest). The step lines of each file are written to a temporary data file (mkstemp in
 * /tmp), and gnuplot (Debian's gnuplot-nox, installed by `make deps`) renders them with its
 * pngcairo terminal through a script on its stdin; QT_AUDIT_GNUPLOT, when set, is the shell
 * command run instead of "gnuplot" (the tests capture the script with it).
 * Invariants: an existing OUT is never replaced without --overwrite, and never when it is not
 * a regular file; OUT is written only when gnuplot succeeds (it renders into OUT.tmp.<pid>,
 * created here exclusively, then renamed); the temporaries are removed in every case; what
 * reaches the gnuplot script from a file (run names, file names) or the command line (OUT)
 * is one single-quoted string each, without control characters (names: '?'; an OUT with
 * one is refused) and with its quotes escaped, so no input adds a gnuplot command.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "qt_audit.h"

/* Basename of a path, for the key. */
static const char *qt_base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "RUN (FILE)" of metrics m into out, as text safe inside one of gnuplot's single-quoted
 * strings: a quote becomes '"' and a control character '?' (a newline would end the
 * gnuplot command, and what follows in a crafted manifest, `system "..."`, would run). */
static void qt_plot_name(const qt_audit_metrics *m, const char *path, char *out, size_t n)
{
    const char *run = qt_audit_kv_get(&m->manifest, "run");
    if (run && *run) snprintf(out, n, "%s (%s)", run, qt_base(path));
    else snprintf(out, n, "%s", qt_base(path));
    for (char *c = out; *c; c++)
        if (*c == '\'') *c = '"';
        else if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

/* path into out as the body of a gnuplot single-quoted string ('' for each quote); -1 when
 * it holds a control character, which no such string can hold, or does not fit. */
static int qt_plot_quote(const char *path, char *out, size_t n)
{
    size_t k = 0;
    for (const char *c = path; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f || k + 3 >= n) return -1;
        if (*c == '\'') out[k++] = '\'';
        out[k++] = *c;
    }
    out[k] = 0;
    return 0;
}

/* The existing -o file: 0 when there is none or --overwrite allows replacing it (a regular
 * file that is none of the n_in metrics files being plotted: `plot m.jsonl -o m.jsonl
 * --overwrite` replaced the run's metrics with the picture), else QT_AUDIT_ERR after a
 * message. */
static int qt_plot_check_out(const char *out, int overwrite, const char *const *in, int n_in)
{
    struct stat st, si;
    if (lstat(out, &st) != 0) {
        if (errno == ENOENT) return 0;
        fprintf(stderr, "qtrain-audit: plot -o %s: cannot stat: %s\n", out, strerror(errno));
        return QT_AUDIT_ERR;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "qtrain-audit: plot -o %s: exists and is not a regular file; give "
                "another path\n", out);
        return QT_AUDIT_ERR;
    }
    for (int k = 0; k < n_in; k++)
        if (!stat(in[k], &si) && si.st_dev == st.st_dev && si.st_ino == st.st_ino) {
            fprintf(stderr, "qtrain-audit: plot -o %s is the metrics file %s being plotted; "
                    "refusing to write the picture over it, even with --overwrite: give "
                    "another -o path (e.g. loss.png)\n", out, in[k]);
            return QT_AUDIT_ERR;
        }
    if (overwrite) return 0;
    fprintf(stderr, "qtrain-audit: plot -o %s: the file exists; give --overwrite to replace "
            "it, or another path\n", out);
    return QT_AUDIT_ERR;
}

/* What the loss panel adds for one input (issue 33): its eval points (data block 1 of its
 * temporary file) and the steps (as plotted, from 1) where a new pass over the data begins. */
#define QT_PLOT_MAX_WRAPS 32
typedef struct qt_plot_extra {
    int n_evals, n_wraps;
    int mtp;                   /* its step lines have mtp_loss (the MTP head, issue 31) */
    int n_acc;                 /* its eval lines with an MTP acceptance rate */
    int acc_k;                 /* their depth when all agree, else 0 */
    long long wrap[QT_PLOT_MAX_WRAPS];
} qt_plot_extra;

/* The wraps of the run manifest m: the global batch B = passes x windows / end_step, and
 * pass k (k >= 1) begins in the step holding sequence k x windows. */
static void qt_plot_wraps(const qt_audit_metrics *m, qt_plot_extra *x)
{
    const char *w = qt_audit_kv_get(&m->manifest, "data.windows");
    const char *ps = qt_audit_kv_get(&m->manifest, "data.passes");
    const char *e = qt_audit_kv_get(&m->manifest, "end_step");
    x->n_wraps = 0;
    if (!w || !ps || !e) return;
    const double W = strtod(w, NULL), passes = strtod(ps, NULL), end = strtod(e, NULL);
    if (!(W >= 1 && end >= 1 && passes > 1)) return;
    const long long B = (long long)(passes * W / end + 0.5);
    for (long long k = 1; B > 0 && x->n_wraps < QT_PLOT_MAX_WRAPS; k++) {
        const long long step = (long long)(k * (long long)W) / B;   /* 0-based */
        if (step >= (long long)end) break;
        x->wrap[x->n_wraps++] = step + 1;
    }
}

/* Writes the step lines of metrics file `in` to a new temporary data file (its path in
 * dat; then, when the file holds eval lines, two blank lines and the eval points: step,
 * eval loss, MTP acceptance rate in percent or nan) and its
 * run's name to name. 0 or QT_AUDIT_ERR; dat[0] is 0 when nothing was made. */
static int qt_plot_data(const char *in, char *dat, size_t dn, char *name, size_t nn,
                        qt_plot_extra *x)
{
    qt_audit_metrics m;
    dat[0] = 0;
    if (qt_audit_metrics_read(in, &m)) return QT_AUDIT_ERR;
    int rc = 0;
    if (!m.n_steps) {
        fprintf(stderr, "qtrain-audit: %s holds no step lines to plot\n", in);
        rc = QT_AUDIT_ERR;
    }
    qt_plot_name(&m, in, name, nn);
    snprintf(dat, dn, "/tmp/qtrain-audit-XXXXXX");
    int fd = rc ? -1 : mkstemp(dat);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!rc && !f) {
        /* it said only "/tmp/qtrain-audit-sMiIb9: Read-only file system" (audit24) */
        fprintf(stderr, "qtrain-audit: plot: cannot create its temporary data file %s: %s; "
                "plot writes the step lines to a file in /tmp for gnuplot, so /tmp must be "
                "writable\n", dat, strerror(errno));
        if (fd >= 0) { close(fd); unlink(dat); }
        dat[0] = 0;
        rc = QT_AUDIT_ERR;
    }
    /* the progress lines count steps from 1: plot step+1, so step 200 is the last */
    for (int i = 0; f && i < m.n_steps; i++) {
        const qt_audit_step *s = &m.steps[i];
        fprintf(f, "%lld %.9g %.17g %.17g %.9g %.9g\n", (long long)s->step + 1, s->loss,
                s->has_norm ? s->grad_norm : NAN, s->lr, s->tokens_per_s,
                s->has_mtp ? s->mtp_loss : NAN);
    }
    x->mtp = 0;
    for (int i = 0; i < m.n_steps; i++) x->mtp |= m.steps[i].has_mtp;
    x->n_evals = f ? m.n_evals : 0;
    if (f && m.n_evals) fprintf(f, "\n\n");
    x->n_acc = x->acc_k = 0;
    for (int i = 0; f && i < m.n_evals; i++) {
        const qt_audit_eval *e = &m.evals[i];
        fprintf(f, "%lld %.9g %.9g\n", (long long)e->step + 1, e->loss,
                e->has_mtp_acc ? e->mtp_acc : NAN);
        if (!e->has_mtp_acc) continue;
        x->acc_k = x->n_acc == 0 || x->acc_k == e->mtp_k ? e->mtp_k : 0;
        x->n_acc++;
    }
    qt_plot_wraps(&m, x);
    if (f && fclose(f)) {   /* a full /tmp failed here without a word */
        fprintf(stderr, "qtrain-audit: plot: writing its temporary data file %s failed: %s "
                "(plot needs room in /tmp for the step lines)\n", dat, strerror(errno));
        rc = QT_AUDIT_ERR;
    }
    qt_audit_metrics_free(&m);
    return rc;
}

/* gnuplot's script for n_in data files into the PNG whose path, quoted (qt_plot_quote), is
 * png_q. */
static void qt_plot_script(FILE *g, const char *png_q, int n_in, char dat[2][64],
                           char name[2][512], const qt_plot_extra x[2])
{
    static const char *const panel[4][3] = {
        {"2", "loss (cross entropy, nats)", "Loss"},
        {"3", "gradient norm (before clipping)", "Gradient norm"},
        {"4", "learning rate", "Learning rate"},
        {"5", "tokens / s", "Throughput"}};
    const int acc = x[0].n_acc || (n_in > 1 && x[1].n_acc);
    fprintf(g, "set terminal pngcairo noenhanced size 1400,%d font 'Sans,11'\n"
               "set output '%s'\nset datafile missing 'nan'\n"
               "set multiplot layout %d,2 title '%s%s%s' font 'Sans,13'\n"
               "set grid\nset key top right\nset xlabel 'step'\n",
            acc ? 1350 : 900, png_q, acc ? 3 : 2, name[0], n_in > 1 ? " vs " : "",
            n_in > 1 ? name[1] : "");
    for (int p = 0; p < 4; p++) {
        fprintf(g, "set title '%s'\nset ylabel '%s'\n%s\n", panel[p][2], panel[p][1],
                p == 1 ? "set logscale y" : "unset logscale y");
        /* the loss panel: a dotted line where each new pass over the data begins */
        for (int k = 0; p == 0 && k < n_in; k++)
            for (int i = 0; i < x[k].n_wraps; i++)
                fprintf(g, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 3 lc rgb "
                        "'%s'\n", x[k].wrap[i], x[k].wrap[i], k ? "#d62728" : "#7f7f7f");
        fprintf(g, "plot '%s' %susing 1:%s with lines lw 2 lc rgb '#1f77b4' title 'A: %s'",
                dat[0], x[0].n_evals ? "index 0 " : "", panel[p][0], name[0]);
        if (n_in > 1)
            fprintf(g, ", '%s' %susing 1:%s with lines lw 2 dt 2 lc rgb '#d62728' title 'B: %s'",
                    dat[1], x[1].n_evals ? "index 0 " : "", panel[p][0], name[1]);
        /* the loss panel: the MTP head's cross entropy (before its factor; the loss above
         * is the objective, the head's term included) */
        for (int k = 0; p == 0 && k < n_in; k++)
            if (x[k].mtp)
                fprintf(g, ", '%s' %susing 1:6 with lines lw 1 dt 4 lc rgb '%s' "
                        "title '%s: mtp_loss (MTP head CE)'", dat[k],
                        x[k].n_evals ? "index 0 " : "", k ? "#9467bd" : "#8c564b",
                        k ? "B" : "A");
        /* the loss panel: the held-out eval loss, points joined */
        for (int k = 0; p == 0 && k < n_in; k++)
            if (x[k].n_evals)
                fprintf(g, ", '%s' index 1 using 1:2 with linespoints pt 7 lw 2 lc rgb '%s' "
                        "title '%s: eval loss (held out)'", dat[k], k ? "#ff7f0e" : "#2ca02c",
                        k ? "B" : "A");
        fprintf(g, "\n");
        if (p == 0) fprintf(g, "unset arrow\n");
    }
    /* the MTP head's acceptance rate at each eval (mtp_eval_target_module), in percent */
    if (acc) {
        fprintf(g, "set title 'MTP acceptance rate (eval)'\nset ylabel 'accepted, %% of "
                   "positions'\nunset logscale y\nplot ");
        for (int k = 0, first = 1; k < n_in; k++) {
            if (!x[k].n_acc) continue;
            char depth[32] = "";
            if (x[k].acc_k > 0) snprintf(depth, sizeof depth, ", depth %d", x[k].acc_k);
            fprintf(g, "%s'%s' index 1 using 1:3 with linespoints pt 7 lw 2 lc rgb '%s' "
                    "title '%s: acceptance rate%s'", first ? "" : ", ", dat[k],
                    k ? "#d62728" : "#1f77b4", k ? "B" : "A", depth);
            first = 0;
        }
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\nset output\n");
}

/* Renders into tmp_png (created here, so no file of anyone else's is written; png_q is its
 * path quoted for gnuplot) and renames it to out. 0 or QT_AUDIT_ERR. */
static int qt_plot_render(const char *out, const char *tmp_png, const char *png_q, int n_in,
                          char dat[2][64], char name[2][512], const qt_plot_extra x[2])
{
    int fd = open(tmp_png, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "qtrain-audit: plot -o %s: cannot create the picture beside it (%s: "
                "%s); give a path in an existing, writable directory\n", out, tmp_png,
                strerror(errno));
        return QT_AUDIT_ERR;
    }
    close(fd);
    const char *cmd = getenv("QT_AUDIT_GNUPLOT");
    FILE *g = popen(cmd && *cmd ? cmd : "gnuplot", "w");
    if (!g) {
        perror("qtrain-audit: gnuplot (make deps installs gnuplot-nox)");
        return QT_AUDIT_ERR;
    }
    qt_plot_script(g, png_q, n_in, dat, name, x);
    int st = pclose(g);
    if (st != 0) {
        fprintf(stderr, "qtrain-audit: gnuplot failed (status %d)\n", st);
        return QT_AUDIT_ERR;
    }
    if (rename(tmp_png, out)) {
        perror(out);
        return QT_AUDIT_ERR;
    }
    return 0;
}

int qt_audit_plot(int argc, char **argv)
{
    const char *in[2] = {NULL, NULL}, *out = NULL;
    int n_in = 0, overwrite = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--overwrite")) overwrite = 1;
        else if (n_in < 2 && argv[i][0] != '-') in[n_in++] = argv[i];
        else n_in = 3;
    }
    if (!out || n_in < 1 || n_in > 2) {
        fprintf(stderr, "usage: qtrain-audit plot M.jsonl [M2.jsonl] -o OUT.png [--overwrite]\n");
        return QT_AUDIT_ERR;
    }
    if (qt_plot_check_out(out, overwrite, in, n_in)) return QT_AUDIT_ERR;
    char dat[2][64] = {"", ""}, name[2][512], tmp_png[4200], quoted[2 * 4200];
    qt_plot_extra x[2];
    memset(x, 0, sizeof x);
    int rc = 0;
    if (snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%ld", out, (long)getpid()) >=
            (int)sizeof tmp_png || qt_plot_quote(tmp_png, quoted, sizeof quoted)) {
        fprintf(stderr, "qtrain-audit: plot -o ");
        for (const unsigned char *c = (const unsigned char *)out; *c; c++)
            if (*c < 0x20 || *c == 0x7f) fprintf(stderr, "\\%03o", *c);   /* as \ooo */
            else fputc(*c, stderr);
        fprintf(stderr, ": the path holds a control character (a newline, a tab) or is over "
                "4000 bytes, which gnuplot cannot write to; give another path\n");
        return QT_AUDIT_ERR;
    }
    for (int k = 0; k < n_in && !rc; k++)
        rc = qt_plot_data(in[k], dat[k], sizeof dat[k], name[k], sizeof name[k], &x[k]);
    int made_tmp = 0;
    if (!rc) {
        made_tmp = access(tmp_png, F_OK) != 0;
        rc = qt_plot_render(out, tmp_png, quoted, n_in, dat, name, x);
    }
    for (int k = 0; k < n_in; k++)
        if (dat[k][0]) unlink(dat[k]);
    if (rc && made_tmp) unlink(tmp_png);   /* never a file this run did not create */
    if (!rc) printf("%s\n", out);
    return rc;
}
