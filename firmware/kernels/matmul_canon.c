/* matmul_canon.c - canonical blocked contractions (see matmul_canon.h).
 * Invariant: block partials come from the plain matmul kernels on packed copies of the
 * block's columns / rows (a copy never changes a value), and the tree adds earlier blocks
 * on the left, so the result depends only on the inputs, nseg and nb. The float build first
 * tries the copy-free tile path of matmul.c (qt_matmul_canon_*_fused: same bits, contractions
 * up to 2048); the copying form with the scalar kernels is the reference (*_ref).
 */
#include "matmul_canon.h"
#include "matmul.h"
#include "qt_real.h"

void QT_FN(qt_canon_tree)(qt_real *buf, int64_t n, int64_t nb)
{
    for (int64_t s = 1; s < nb; s *= 2)
        for (int64_t j = 0; j + s < nb; j += 2 * s) {
            qt_real *a = buf + j * n;
            const qt_real *b = buf + (j + s) * n;
            for (int64_t i = 0; i < n; i++) a[i] = a[i] + b[i];
        }
}

typedef void (*qt_canon_kernel)(qt_real *, const qt_real *, const qt_real *, int64_t, int64_t,
                                int64_t);

static void qt_canon_fwd_copy(qt_real *out, const qt_real *x, const qt_real *w, int64_t M,
                              int64_t N, int64_t K, int64_t nseg, int64_t nb, qt_real *scratch,
                              qt_canon_kernel fwd)
{
    const int64_t L = K / nseg, sl = L / nb, kb = nseg * sl;
    qt_real *part = scratch, *xb = scratch + nb * M * N, *wb = xb + M * kb;
    for (int64_t j = 0; j < nb; j++) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t s = 0; s < nseg; s++)
                for (int64_t i = 0; i < sl; i++) xb[m * kb + s * sl + i] = x[m * K + s * L + j * sl + i];
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < nseg; s++)
                for (int64_t i = 0; i < sl; i++) wb[n * kb + s * sl + i] = w[n * K + s * L + j * sl + i];
        fwd(part + j * M * N, xb, wb, M, N, kb);
    }
    QT_FN(qt_canon_tree)(part, M * N, nb);
    for (int64_t i = 0; i < M * N; i++) out[i] = part[i];
}

void QT_FN(qt_matmul_canon_fwd)(qt_real *out, const qt_real *x, const qt_real *w, int64_t M,
                                int64_t N, int64_t K, int64_t nseg, int64_t nb, qt_real *scratch)
{
#ifndef QT_REAL_DOUBLE
    if (qt_matmul_canon_fwd_fused(out, x, w, M, N, K, nseg, nb)) return;
#endif
    qt_canon_fwd_copy(out, x, w, M, N, K, nseg, nb, scratch, QT_FN(qt_matmul_fwd));
}

void QT_FN(qt_matmul_canon_fwd_ref)(qt_real *out, const qt_real *x, const qt_real *w, int64_t M,
                                    int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                    qt_real *scratch)
{
    qt_canon_fwd_copy(out, x, w, M, N, K, nseg, nb, scratch, QT_FN(qt_matmul_fwd_ref));
}

static void qt_canon_bwd_copy(qt_real *out, const qt_real *dy, const qt_real *w, int64_t M,
                              int64_t N, int64_t K, int64_t nseg, int64_t nb, qt_real *scratch,
                              qt_canon_kernel bwd_data)
{
    const int64_t L = N / nseg, sl = L / nb, nbk = nseg * sl;
    qt_real *part = scratch, *dyb = scratch + nb * M * K, *wb = dyb + M * nbk;
    for (int64_t j = 0; j < nb; j++) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t s = 0; s < nseg; s++)
                for (int64_t i = 0; i < sl; i++)
                    dyb[m * nbk + s * sl + i] = dy[m * N + s * L + j * sl + i];
        for (int64_t s = 0; s < nseg; s++)
            for (int64_t i = 0; i < sl; i++) {
                const qt_real *src = w + (s * L + j * sl + i) * K;
                qt_real *dst = wb + (s * sl + i) * K;
                for (int64_t k = 0; k < K; k++) dst[k] = src[k];
            }
        qt_real *pj = part + j * M * K;
        for (int64_t i = 0; i < M * K; i++) pj[i] = 0;
        bwd_data(pj, dyb, wb, M, nbk, K);
    }
    QT_FN(qt_canon_tree)(part, M * K, nb);
    for (int64_t i = 0; i < M * K; i++) out[i] = part[i];
}

void QT_FN(qt_matmul_canon_bwd_data)(qt_real *out, const qt_real *dy, const qt_real *w,
                                     int64_t M, int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                     qt_real *scratch)
{
#ifndef QT_REAL_DOUBLE
    if (qt_matmul_canon_bwd_data_fused(out, dy, w, M, N, K, nseg, nb)) return;
#endif
    if (nb == 1 && nseg == 1) {
        /* one block of one segment: the copy form's packed copies are the inputs themselves
         * and its tree is empty, so the plain kernel into zeros gives its bits without
         * scratch beyond out (the vocab-parallel lm_head's data gradient, one block a rank) */
        for (int64_t i = 0; i < M * K; i++) out[i] = 0;
        QT_FN(qt_matmul_bwd_data)(out, dy, w, M, N, K);
        return;
    }
    qt_canon_bwd_copy(out, dy, w, M, N, K, nseg, nb, scratch, QT_FN(qt_matmul_bwd_data));
}

void QT_FN(qt_matmul_canon_bwd_data_ref)(qt_real *out, const qt_real *dy, const qt_real *w,
                                         int64_t M, int64_t N, int64_t K, int64_t nseg,
                                         int64_t nb, qt_real *scratch)
{
    qt_canon_bwd_copy(out, dy, w, M, N, K, nseg, nb, scratch, QT_FN(qt_matmul_bwd_data_ref));
}
