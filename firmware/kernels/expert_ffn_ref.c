/* expert_ffn_ref.c - the routed expert FFN's references: the plan's three passes
 * (qt_expert_ffn_fwd_canon, qt_expert_ffn_bwd_save_canon, qt_expert_ffn_wgrad_saved_write)
 * written plainly on top of the scalar matmul references (matmul.h *_ref, matmul_canon.h
 * *_ref). The tests compare the optimised kernels of expert_ffn.c to them bit for bit.
 *
 * Invariants: the forward and backward go one (token, slot) row at a time (the matmul
 * contract makes a row's bits independent of the rows beside it, so this is the contract
 * itself, not one blocking of it); the backward adds each token's slots into dx in slot
 * order; the SwiGLU and its derivative are the same expressions as expert_ffn.c's. The
 * weight gradient contracts over an expert's rows in increasing r, in the same chunks of
 * cap = scratch_elems / (d + 3f) rows as expert_ffn.c (its bits depend on that cut: one
 * chunk at the plan's scratch), from zeroed leaves ((+0) + sum). Rows whose expert is
 * outside [0,E) are skipped. Scratch sizes: see expert_ffn.h; with less than one row's
 * worth, the outputs are poisoned with NaN as in expert_ffn.c. No heap: rows live in the
 * caller's scratch.
 */
#include "expert_ffn.h"
#include "matmul.h"
#include "matmul_canon.h"
#include "qt_real.h"

static void qt_ffn_ref_fill(qt_real *p, int64_t n, qt_real v)
{
    for (int64_t i = 0; i < n; i++) p[i] = v;
}

void QT_FN(qt_expert_ffn_fwd_canon_ref)(qt_real *y, qt_real *gu, const qt_real *x,
                                        const int32_t *idx, const qt_real *w_gu,
                                        const qt_real *w_down, qt_real *scratch, int64_t T,
                                        int64_t k, int64_t E, int64_t d, int64_t f,
                                        int64_t scratch_elems, int64_t nb)
{
    /* C (2f), then the canonical blocks' scratch for one row */
    const int64_t need = 2 * f + (nb > 0 ? nb * d + (1 + d) * (f / nb) : 0);
    if (scratch_elems < need) {
        qt_ffn_ref_fill(y, T * k * d, QT_LOG(QT_R(-1.0)));
        return;
    }
    qt_real *C = scratch, *K = C + 2 * f;
    for (int64_t r = 0; r < T * k; r++) {
        const int32_t e = idx[r];
        if (e < 0 || e >= E) continue;
        const qt_real *wg = w_gu + (int64_t)e * 2 * f * d, *wd = w_down + (int64_t)e * d * f;
        QT_FN(qt_matmul_fwd_ref)(C, x + (r / k) * d, wg, 1, 2 * f, d);
        for (int64_t i = 0; i < 2 * f; i++) gu[r * 2 * f + i] = C[i];
        for (int64_t i = 0; i < f; i++) C[i] = QT_SILU(C[i]) * C[f + i];
        if (nb > 0) QT_FN(qt_matmul_canon_fwd_ref)(y + r * d, C, wd, 1, d, f, 1, nb, K);
        else QT_FN(qt_matmul_fwd_ref)(y + r * d, C, wd, 1, d, f);
    }
}

void QT_FN(qt_expert_ffn_bwd_save_canon_ref)(qt_real *dx, qt_real *dgu, const qt_real *dy,
                                             const int32_t *idx, const qt_real *gu,
                                             const qt_real *w_gu, const qt_real *w_down,
                                             qt_real *scratch, int64_t T, int64_t k,
                                             int64_t E, int64_t d, int64_t f,
                                             int64_t scratch_elems, int64_t nb)
{
    /* B (f), C (2f), A (d), then the canonical blocks' scratch for one row */
    const int64_t need = 3 * f + d + (nb > 0 ? nb * d + (1 + d) * (2 * f / nb) : 0);
    if (scratch_elems < need) {
        qt_ffn_ref_fill(dx, T * d, QT_LOG(QT_R(-1.0)));
        return;
    }
    qt_real *B = scratch, *C = B + f, *A = C + 2 * f, *K = A + d;
    for (int64_t t = 0; t < T; t++)
        for (int64_t slot = 0; slot < k; slot++) {
            const int64_t r = t * k + slot;
            const int32_t e = idx[r];
            if (e < 0 || e >= E) continue;
            const qt_real *wg = w_gu + (int64_t)e * 2 * f * d, *wd = w_down + (int64_t)e * d * f;
            qt_ffn_ref_fill(B, f, 0);
            QT_FN(qt_matmul_bwd_data_ref)(B, dy + r * d, wd, 1, d, f);
            for (int64_t i = 0; i < f; i++) {
                const qt_real a = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i], g = B[i];
                const qt_real sg = QT_SIGMOID(a);
                C[i] = (g * u) * (sg * (QT_R(1.0) + a * (QT_R(1.0) - sg)));
                C[f + i] = g * QT_SILU(a);
            }
            if (dgu)
                for (int64_t i = 0; i < 2 * f; i++) dgu[r * 2 * f + i] = C[i];
            if (nb > 0) {
                QT_FN(qt_matmul_canon_bwd_data_ref)(A, C, wg, 1, 2 * f, d, 2, nb, K);
            } else {
                qt_ffn_ref_fill(A, d, 0);
                QT_FN(qt_matmul_bwd_data_ref)(A, C, wg, 1, 2 * f, d);
            }
            for (int64_t i = 0; i < d; i++) dx[t * d + i] += A[i];
        }
}

void QT_FN(qt_expert_ffn_wgrad_saved_write_ref)(qt_real *dw_gu, qt_real *dw_down,
                                                const qt_real *dy, const qt_real *x,
                                                const int32_t *idx, const qt_real *gu,
                                                const qt_real *dgu, qt_real *scratch,
                                                int64_t T, int64_t k, int64_t E, int64_t d,
                                                int64_t f, int64_t scratch_elems)
{
    const int64_t cap = scratch_elems / (d + 3 * f);
    if (cap < 1) {
        qt_ffn_ref_fill(dw_gu, E * 2 * f * d, QT_LOG(QT_R(-1.0)));
        qt_ffn_ref_fill(dw_down, E * d * f, QT_LOG(QT_R(-1.0)));
        return;
    }
    qt_ffn_ref_fill(dw_gu, E * 2 * f * d, 0);
    qt_ffn_ref_fill(dw_down, E * d * f, 0);
    qt_real *A = scratch, *B = A + cap * d, *C = B + cap * f;
    for (int32_t e = 0; e < E; e++) {
        qt_real *dwg = dw_gu + (int64_t)e * 2 * f * d, *dwd = dw_down + (int64_t)e * d * f;
        for (int64_t r = 0; r < T * k;) {
            int64_t n = 0;
            for (; r < T * k && n < cap; r++) { /* the next chunk: up to cap rows of e */
                if (idx[r] != e) continue;
                for (int64_t i = 0; i < d; i++) A[n * d + i] = dy[r * d + i];
                for (int64_t i = 0; i < f; i++)
                    B[n * f + i] = QT_SILU(gu[r * 2 * f + i]) * gu[r * 2 * f + f + i];
                n++;
            }
            if (n == 0) break;
            QT_FN(qt_matmul_wgrad_ref)(dwd, A, B, n, d, f);
            /* the same rows again: d(gu) and x */
            for (int64_t q = r - 1, j = n - 1; j >= 0; q--) {
                if (idx[q] != e) continue;
                for (int64_t i = 0; i < 2 * f; i++) C[j * 2 * f + i] = dgu[q * 2 * f + i];
                for (int64_t i = 0; i < d; i++) A[j * d + i] = x[(q / k) * d + i];
                j--;
            }
            QT_FN(qt_matmul_wgrad_ref)(dwg, C, A, n, 2 * f, d);
        }
    }
}
