/* metrics_compare.c - compares a qtrain metrics file (JSON lines) with the reference's
 * expected.json ({"loss": [...], "grad_norm": [...], "lr": [...]}).
 *
 * usage: metrics_compare <metrics.jsonl> <expected.json> <loss_rel_tol> <norm_rel_tol>
 * Each step's loss and grad norm must agree within the relative tolerance, the learning
 * rate within 1e-6 relative (it is a pure function of the schedule). Prints one line per
 * step; exit 0 only if every step present in expected.json is within tolerance. When
 * expected.json has "mtp_loss" (the MTP head's CE mean, docs/model.md 1.8) every step line
 * must carry mtp_loss too, within the loss tolerance.
 * Token dropping (expected.json's moe_dropped, the capacity goldens): each step's count of
 * dropped assignments must be exactly the reference's (the decisions are integer).
 * z-loss (expected.json's z_loss, issue 33): each step's "z_loss" within the loss tolerance.
 * Held-out eval (expected.json's eval_step / eval_loss arrays, issue 33): the metrics' eval
 * rows ({"step":s,"eval_loss":L,...}) must be exactly those steps, each L within the loss
 * tolerance; without those arrays eval rows are skipped.
 * The MTP head's acceptance rate (expected.json's eval_mtp_accepted, ..._accept_positions,
 * ..._accept_near_ties, ..._acceptance_rate_percent and ..._accept_rate_tol arrays, one
 * entry an eval; mtp_eval_target_module): each eval row's eval_mtp_accept_positions exactly
 * the reference's (an integer mask), eval_mtp_accepted within the reference's count of
 * near-tie positions (the top-2 logit gap below its TIE_GAP at the position or at its
 * main-model partner: float32 logits may pick the other index there; none: exactly), and
 * eval_mtp_acceptance_rate_percent within its rate tolerance (100 x near ties / positions
 * over the pass; 0: bit for bit, the same double arithmetic: 100 x matches / positions).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STEPS 1024

static char g_buf[1 << 20];

static int read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "metrics_compare: cannot open %s\n", path); return -1; }
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (int)n;
}

/* Parses the array after "key": in a JSON text into out; returns the count. */
static int json_array(const char *text, const char *key, double *out, int cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(text, pat);
    if (!p) return -1;
    p = strchr(p + strlen(pat), '[');
    if (!p) return -1;
    p++;
    int n = 0;
    while (*p && *p != ']' && n < cap) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) { p++; continue; }
        out[n++] = v;
        p = end;
    }
    return n;
}

static double g_acc[5][MAX_STEPS]; /* the acceptance arrays, in the order of g_acc_key */
static const char *const g_acc_key[5] = {"eval_mtp_accepted", "eval_mtp_accept_positions",
                                         "eval_mtp_accept_near_ties",
                                         "eval_mtp_acceptance_rate_percent",
                                         "eval_mtp_accept_rate_tol"};

static int json_number(const char *line, const char *key, double *out);

/* Eval row `line` (eval e) against the acceptance arrays: 1 ok, 0 a mismatch (printed). */
static int accept_ok(const char *line, int e)
{
    double m = -1, v = -1, r = NAN;
    const int has = !json_number(line, "eval_mtp_accepted", &m) &&
                    !json_number(line, "eval_mtp_accept_positions", &v) &&
                    !json_number(line, "eval_mtp_acceptance_rate_percent", &r);
    const double near = g_acc[2][e], tol = g_acc[4][e];
    const int ok = has && v == g_acc[1][e] && fabs(m - g_acc[0][e]) <= near &&
                   (tol > 0 ? fabs(r - g_acc[3][e]) <= tol : r == g_acc[3][e]);
    printf("eval %d acceptance %.17g%% ref %.17g%% (tol %.3g), accepted %.0f ref %.0f (near "
           "ties %.0f), positions %.0f ref %.0f %s\n", e, r, g_acc[3][e], tol, m, g_acc[0][e],
           near, v, g_acc[1][e], ok ? "ok" : "MISMATCH");
    return ok;
}

/* Value of "key": in one JSON line. */
static int json_number(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    *out = strtod(p + strlen(pat), NULL);
    return 0;
}

static int within(double got, double want, double tol)
{
    return fabs(got - want) <= tol * fmax(fabs(want), 1e-12);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: metrics_compare <metrics.jsonl> <expected.json> <loss_rel_tol> <norm_rel_tol>\n");
        return 2;
    }
    static double e_loss[MAX_STEPS], e_norm[MAX_STEPS], e_lr[MAX_STEPS], e_mtp[MAX_STEPS];
    static double e_drop[MAX_STEPS];
    static double e_z[MAX_STEPS], e_es[MAX_STEPS], e_el[MAX_STEPS];
    if (read_file(argv[2], g_buf, sizeof g_buf) < 0) return 2;
    int n = json_array(g_buf, "loss", e_loss, MAX_STEPS);
    int nn = json_array(g_buf, "grad_norm", e_norm, MAX_STEPS);
    int nl = json_array(g_buf, "lr", e_lr, MAX_STEPS);
    int nd = json_array(g_buf, "moe_dropped", e_drop, MAX_STEPS);
    int nz = json_array(g_buf, "z_loss", e_z, MAX_STEPS);
    int ne = json_array(g_buf, "eval_step", e_es, MAX_STEPS);
    if (json_array(g_buf, "eval_loss", e_el, MAX_STEPS) != ne) {
        fprintf(stderr, "metrics_compare: %s: eval_step and eval_loss differ in length\n", argv[2]);
        return 2;
    }
    if (n <= 0 || nn != n || nl != n) {
        fprintf(stderr, "metrics_compare: %s: need equal-length loss/grad_norm/lr arrays\n", argv[2]);
        return 2;
    }
    int na = -1;
    for (int i = 0; i < 5; i++) {
        const int c = json_array(g_buf, g_acc_key[i], g_acc[i], MAX_STEPS);
        if (i > 0 && c != na) {
            fprintf(stderr, "metrics_compare: %s: the acceptance arrays differ in length\n",
                    argv[2]);
            return 2;
        }
        na = c;
    }
    if (na >= 0 && na != ne) {
        fprintf(stderr, "metrics_compare: %s: %d acceptance entries, %d evals\n", argv[2], na,
                ne);
        return 2;
    }
    const int nm = json_array(g_buf, "mtp_loss", e_mtp, MAX_STEPS);
    if (nm >= 0 && nm != n) {
        fprintf(stderr, "metrics_compare: %s: mtp_loss has %d steps, loss %d\n", argv[2], nm, n);
        return 2;
    }
    double tl = atof(argv[3]), tn = atof(argv[4]);
    FILE *f = fopen(argv[1], "r");
    if (!f) { fprintf(stderr, "metrics_compare: cannot open %s\n", argv[1]); return 2; }
    static char line[8192];
    static unsigned char seen_step[MAX_STEPS];
    int bad = 0, seen = 0, evals = 0;
    while (fgets(line, sizeof line, f)) {
        double step, loss, norm, lr;
        if (!strncmp(line, "{\"manifest\":", 12)) {   /* a run manifest: skip the whole line */
            while (!strchr(line, '\n') && fgets(line, sizeof line, f)) {}
            continue;
        }
        if (strstr(line, "\"eval_loss\":")) {         /* a held-out eval row */
            if (ne <= 0) continue;
            double el = 0;
            int ok = evals < ne && !json_number(line, "step", &step) &&
                     !json_number(line, "eval_loss", &el) && step == e_es[evals] &&
                     within(el, e_el[evals], tl);
            printf("eval after step %.0f eval_loss %.9g ref %.9g (rel %.2e) %s\n", step, el,
                   evals < ne ? e_el[evals] : 0.0,
                   evals < ne ? fabs(el - e_el[evals]) / fmax(fabs(e_el[evals]), 1e-12) : 0.0,
                   ok ? "ok" : "MISMATCH");
            bad += !ok;
            if (na > 0 && evals < na) bad += !accept_ok(line, evals);
            evals++;
            continue;
        }
        if (json_number(line, "step", &step) || json_number(line, "loss", &loss) ||
            json_number(line, "grad_norm", &norm) || json_number(line, "lr", &lr)) {
            fprintf(stderr, "metrics_compare: %s: line without step/loss/grad_norm/lr: %s", argv[1], line);
            fclose(f);
            return 2;
        }
        int s = (int)step;
        if (s < 0 || s >= n) continue;
        if (seen_step[s]++) {
            fprintf(stderr, "metrics_compare: %s: step %d appears twice\n", argv[1], s);
            fclose(f);
            return 1;
        }
        int ok = within(loss, e_loss[s], tl) && within(norm, e_norm[s], tn) && within(lr, e_lr[s], 1e-6);
        double drop = -1;
        if (nd == n && (json_number(line, "moe_dropped", &drop) || drop != e_drop[s])) {
            printf("step %d moe_dropped %.0f ref %.0f MISMATCH\n", s, drop, e_drop[s]);
            ok = 0;
        }
        double z = 0;
        if (nz == n && (json_number(line, "z_loss", &z) || !within(z, e_z[s], tl))) {
            printf("step %d z_loss %.9g ref %.9g MISMATCH\n", s, z, e_z[s]);
            ok = 0;
        }
        printf("step %d loss %.9g ref %.9g (rel %.2e)  norm %.7g ref %.7g (rel %.2e)  lr %.6g ref %.6g %s\n",
               s, loss, e_loss[s], fabs(loss - e_loss[s]) / fmax(fabs(e_loss[s]), 1e-12), norm, e_norm[s],
               fabs(norm - e_norm[s]) / fmax(fabs(e_norm[s]), 1e-12), lr, e_lr[s], ok ? "ok" : "MISMATCH");
        if (nm > 0) {
            double mtp = NAN;
            const int has = !json_number(line, "mtp_loss", &mtp);
            const int okm = has && within(mtp, e_mtp[s], tl);
            printf("step %d mtp_loss %.9g ref %.9g (rel %.2e) %s\n", s, mtp, e_mtp[s],
                   fabs(mtp - e_mtp[s]) / fmax(fabs(e_mtp[s]), 1e-12), okm ? "ok" : "MISMATCH");
            ok = ok && okm;
        }
        bad += !ok;
        seen++;
    }
    fclose(f);
    if (ne > 0 && evals != ne) {
        fprintf(stderr, "metrics_compare: %s has %d of the %d expected eval rows\n", argv[1],
                evals, ne);
        return 1;
    }
    if (seen != n) {
        fprintf(stderr, "metrics_compare: %s has %d of the %d expected steps\n", argv[1], seen, n);
        return 1;
    }
    return bad ? 1 : 0;
}
