/* xent.c - fused, numerically stable cross-entropy forward + backward (see xent.h).
 * Invariants: the max is subtracted before exponentiating (no overflow for any finite
 * logits); the exponentials are computed once, parked in dlogits, and normalised in place;
 * all sums run in increasing index order. A target outside [0, V) (-1: masked, see
 * qt_data_fill_packed) adds no loss and leaves a zero gradient row.
 */
#include "xent.h"
#include "qt_real.h"

void QT_FN(qt_xent)(qt_real *loss_seq, qt_real *dlogits, const qt_real *logits,
                    const int32_t *targets, int64_t b, int64_t S, int64_t V)
{
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0;
        for (int64_t tt = 0; tt < S; tt++) {
            int64_t t = s * S + tt;
            const qt_real *l = logits + t * V;
            qt_real *g = dlogits + t * V;
            qt_real m = l[0];
            for (int64_t v = 1; v < V; v++) m = l[v] > m ? l[v] : m;
            qt_real sum = 0;
            for (int64_t v = 0; v < V; v++) {
                qt_real e = QT_EXP(l[v] - m);
                g[v] = e;
                sum = sum + e;
            }
            qt_real lse = m + QT_LOG(sum);
            qt_real inv = QT_R(1.0) / sum;
            for (int64_t v = 0; v < V; v++) g[v] = g[v] * inv;
            int64_t tg = targets[t];
            if (tg >= 0 && tg < V) {
                g[tg] = g[tg] - QT_R(1.0);
                acc = acc + (lse - l[tg]);
            } else { /* no target (a packed document's last token): no loss, no gradient */
                for (int64_t v = 0; v < V; v++) g[v] = QT_R(0.0);
            }
        }
        loss_seq[s] = acc;
    }
}
