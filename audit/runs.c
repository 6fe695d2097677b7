/* runs.c - `qtrain-audit runs A.jsonl B.jsonl`: two training runs compared.
 *
 * 1. Manifests (the first of each file): every flattened key whose value differs, or that
 *    only one side has, as `key: A -> B` (config keys as config.<key>).
 * 2. Steps present in both files, matched by "step": loss bits, fingerprint, and the ulp
 *    distance of the loss (float32 bits) and of the gradient norm (the %.17g decimal
 *    round-trips the double). The verdict is the last line: `bit-identical over N steps`
 *    when every common step has equal loss bits and fingerprint and both files hold the
 *    same steps, else `diverges at step k` (k: the metrics "step", counting from 0) naming
 *    what differs first.
 * Invariant: the verdict depends only on bits (loss_bits, fingerprint), never on decimal
 * formatting or timing fields.
 */
#include <stdlib.h>
#include <string.h>
#include "qt_audit.h"

static void qt_runs_manifests(const qt_audit_metrics *a, const qt_audit_metrics *b)
{
    const qt_audit_kv *x = &a->manifest, *y = &b->manifest;
    printf("manifests: A %d line(s), B %d line(s) (one per start; the first is compared)\n",
           a->n_manifests, b->n_manifests);
    if (!x->n || !y->n) {
        printf("  %s has no manifest (written by qtrain before run manifests existed?)\n",
               !x->n ? "A" : "B");
        return;
    }
    int shown = 0;
    for (int i = 0; i < x->n; i++) {
        const char *v = qt_audit_kv_get(y, x->key[i]);
        if (v && !strcmp(v, x->val[i])) continue;
        printf("  %-28s %s -> %s\n", x->key[i], x->val[i], v ? v : "(absent)");
        shown++;
    }
    for (int i = 0; i < y->n; i++)
        if (!qt_audit_kv_get(x, y->key[i])) {
            printf("  %-28s (absent) -> %s\n", y->key[i], y->val[i]);
            shown++;
        }
    if (!shown) printf("  identical (%d keys)\n", x->n);
}

static const qt_audit_step *qt_runs_find(const qt_audit_metrics *m, int64_t step, int *hint)
{
    for (int k = 0; k < m->n_steps; k++) {
        int i = (*hint + k) % m->n_steps;
        if (m->steps[i].step == step) {
            *hint = i + 1;
            return &m->steps[i];
        }
    }
    return NULL;
}

static uint64_t qt_runs_dbits(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    return u;
}

int qt_audit_runs(int argc, char **argv)
{
    int all;
    const char *pa, *pb;
    if (qt_audit_two_args(argc, argv, "runs A.jsonl B.jsonl", &pa, &pb, &all))
        return QT_AUDIT_ERR;
    qt_audit_metrics a, b;
    if (qt_audit_metrics_read(pa, &a)) return QT_AUDIT_ERR;
    if (qt_audit_metrics_read(pb, &b)) {
        qt_audit_metrics_free(&a);
        return QT_AUDIT_ERR;
    }
    printf("A: %s (%d steps)\nB: %s (%d steps)\n", pa, a.n_steps, pb, b.n_steps);
    qt_runs_manifests(&a, &b);

    int common = 0, n_diff = 0, hint = 0, printed = 0;
    int64_t first = -1;
    const char *first_what = "";
    uint64_t max_loss_ulp = 0, max_norm_ulp = 0;
    printf("steps (loss ulp: float32 loss bits; norm ulp: float64 gradient norm):\n");
    printf("  %6s  %-10s %-10s %10s  %-18s %-18s %12s\n", "step", "loss A", "loss B",
           "loss ulp", "fingerprint A", "fingerprint B", "norm ulp");
    for (int i = 0; i < a.n_steps; i++) {
        const qt_audit_step *x = &a.steps[i], *y = qt_runs_find(&b, x->step, &hint);
        if (!y) continue;
        common++;
        uint64_t lu = qt_audit_ulp32(x->loss_bits, y->loss_bits);
        uint64_t nu = x->has_norm && y->has_norm
                          ? qt_audit_ulp64(qt_runs_dbits(x->grad_norm), qt_runs_dbits(y->grad_norm))
                          : (x->has_norm != y->has_norm);
        int diff = x->loss_bits != y->loss_bits || x->fingerprint != y->fingerprint;
        if (lu > max_loss_ulp) max_loss_ulp = lu;
        if (nu > max_norm_ulp) max_norm_ulp = nu;
        if (diff && first < 0) {
            first = x->step;
            first_what = x->loss_bits != y->loss_bits
                             ? (x->fingerprint != y->fingerprint ? "loss bits and fingerprint"
                                                                 : "loss bits")
                             : "fingerprint";
        }
        n_diff += diff;
        /* every step with --all; else the first 10 common steps and 10 from the divergence */
        int show = all || common <= 10 || (first >= 0 && printed < 20);
        if (show) {
            printf("  %6lld  0x%08x 0x%08x %10llu  0x%016llx 0x%016llx %12llu%s\n",
                   (long long)x->step, (unsigned)x->loss_bits, (unsigned)y->loss_bits,
                   (unsigned long long)lu, (unsigned long long)x->fingerprint,
                   (unsigned long long)y->fingerprint, (unsigned long long)nu,
                   diff ? "  DIFF" : "");
            printed++;
        }
    }
    if (!all && common > printed) printf("  ... (%d of %d common steps shown; --all for every step)\n", printed, common);
    printf("max ulp over %d common steps: loss %llu, grad norm %llu; %d step(s) differ\n", common,
           (unsigned long long)max_loss_ulp, (unsigned long long)max_norm_ulp, n_diff);
    int rc = QT_AUDIT_SAME;
    if (a.n_steps != common || b.n_steps != common) {
        printf("note: A has %d steps and B %d; %d are in both\n", a.n_steps, b.n_steps, common);
        rc = QT_AUDIT_DIFF;
    }
    if (first >= 0) {
        printf("diverges at step %lld (%s differ)\n", (long long)first, first_what);
        rc = QT_AUDIT_DIFF;
    } else if (common == 0) {
        printf("no common steps\n");
        rc = QT_AUDIT_DIFF;
    } else {
        printf("bit-identical over %d steps%s\n", common, rc ? " (the files hold different steps)" : "");
    }
    qt_audit_metrics_free(&a);
    qt_audit_metrics_free(&b);
    return rc;
}
