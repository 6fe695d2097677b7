/* bf16_matmul_canon.c - canonical blocked contractions on bf16 operands (contract:
 * bf16_matmul_canon.h).
 * Invariants: a block's partial is bf16_matmul.h's kernel on packed bf16 copies of the
 * block's columns / rows (a copy never changes a value; the packed chain is the block's
 * chain); the tree adds earlier blocks on the left, in fp32, as matmul_canon.c; nb = 1 runs
 * the plain kernel with no packing (the same chain). The float scratch holds the fp32
 * partials first, then the bf16 packs (2 bytes an element, at a float boundary); a region
 * is only ever accessed as one type within a call. No heap, no VLA.
 */
#ifndef QT_REAL_DOUBLE
#include "bf16_matmul_canon.h"
#include "matmul_canon.h"
#include "bf16_matmul.h"

int qt_bf16_path_built(int path)
{
    return qt_bf16_matmul_fwd_on(path, 0, 0, 0, 0, 0, 0) == 0;
}

/* dst[rows, nseg*sl] <- block j's columns of src[rows, nseg*L] (row stride lds). */
static void qt_bc_pack_cols(qt_bf16 *dst, const qt_bf16 *src, int64_t lds, int64_t rows,
                            int64_t nseg, int64_t L, int64_t sl, int64_t j)
{
    const int64_t kb = nseg * sl;
    for (int64_t m = 0; m < rows; m++)
        for (int64_t s = 0; s < nseg; s++)
            for (int64_t i = 0; i < sl; i++)
                dst[m * kb + s * sl + i] = src[m * lds + s * L + j * sl + i];
}

/* out row m (at out + (orow ? orow[m] : m) * ldo) <- part row m [n floats]. */
static void qt_bc_put_rows(float *out, int64_t ldo, const float *orow, const float *part,
                           int64_t M, int64_t n)
{
    for (int64_t m = 0; m < M; m++) {
        float *o = out + (orow ? (int64_t)orow[m] : m) * ldo;
        for (int64_t i = 0; i < n; i++) o[i] = part[m * n + i];
    }
}

int qt_bf16_matmul_canon_fwd_ld_on(int path, float *out, int64_t ldo, const float *orow,
                                   const qt_bf16 *x, int64_t ldx, const qt_bf16 *w, int64_t M,
                                   int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                   float *scratch)
{
    if (!qt_bf16_path_built(path)) return -1;
    if (nb <= 1 && !orow) return qt_bf16_matmul_fwd_ld_on(path, out, ldo, x, ldx, w, M, N, K);
    if (nb <= 1) {
        qt_bf16_matmul_fwd_ld_on(path, scratch, N, x, ldx, w, M, N, K);
        qt_bc_put_rows(out, ldo, orow, scratch, M, N);
        return 0;
    }
    const int64_t L = K / nseg, sl = L / nb, kb = nseg * sl;
    if (path == QT_BF16_PATH_INSN && qt_bf16_mm_canon_insn(out, ldo, orow, x, ldx, w, 1, K, M, N,
                                                           nseg, nb, sl, 0) == 0)
        return 0; /* fused: the same bits, no packed copies, partials or tree pass */
    float *part = scratch;
    qt_bf16 *xb = (qt_bf16 *)(void *)(scratch + nb * M * N);
    qt_bf16 *wb = xb + M * kb;
    for (int64_t j = 0; j < nb; j++) {
        qt_bc_pack_cols(xb, x, ldx, M, nseg, L, sl, j);
        qt_bc_pack_cols(wb, w, K, N, nseg, L, sl, j);
        qt_bf16_matmul_fwd_on(path, part + j * M * N, xb, wb, M, N, kb);
    }
    qt_canon_tree(part, M * N, nb);
    qt_bc_put_rows(out, ldo, orow, part, M, N);
    return 0;
}

int qt_bf16_matmul_canon_fwd_on(int path, float *out, const qt_bf16 *x, const qt_bf16 *w,
                                int64_t M, int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                float *scratch)
{
    return qt_bf16_matmul_canon_fwd_ld_on(path, out, N, 0, x, K, w, M, N, K, nseg, nb, scratch);
}

int qt_bf16_matmul_canon_bwd_data_ld_on(int path, float *out, int64_t ldo, const float *orow,
                                        const qt_bf16 *dy, int64_t lddy, const qt_bf16 *w,
                                        int64_t M, int64_t N, int64_t K, int64_t nseg,
                                        int64_t nb, float *scratch)
{
    if (!qt_bf16_path_built(path)) return -1;
    if (nb <= 1) {
        float *o = orow ? scratch : out;
        const int64_t ld = orow ? K : ldo;
        for (int64_t m = 0; m < M; m++)
            for (int64_t i = 0; i < K; i++) o[m * ld + i] = 0.0f;
        qt_bf16_matmul_bwd_data_ld_on(path, o, ld, dy, lddy, w, M, N, K);
        if (orow) qt_bc_put_rows(out, ldo, orow, scratch, M, K);
        return 0;
    }
    const int64_t L = N / nseg, sl = L / nb, nbk = nseg * sl;
    if (path == QT_BF16_PATH_INSN && qt_bf16_mm_canon_insn(out, ldo, orow, dy, lddy, w, K, 1, M,
                                                           K, nseg, nb, sl, 1) == 0)
        return 0; /* fused: the same bits */
    float *part = scratch;
    qt_bf16 *dyb = (qt_bf16 *)(void *)(scratch + nb * M * K);
    qt_bf16 *wb = dyb + M * nbk;
    for (int64_t j = 0; j < nb; j++) {
        qt_bc_pack_cols(dyb, dy, lddy, M, nseg, L, sl, j);
        for (int64_t s = 0; s < nseg; s++) /* block j's rows of w, segment by segment */
            for (int64_t i = 0; i < sl; i++) {
                const qt_bf16 *src = w + (s * L + j * sl + i) * K;
                qt_bf16 *dst = wb + (s * sl + i) * K;
                for (int64_t c = 0; c < K; c++) dst[c] = src[c];
            }
        float *pj = part + j * M * K;
        for (int64_t i = 0; i < M * K; i++) pj[i] = 0.0f;
        qt_bf16_matmul_bwd_data_on(path, pj, dyb, wb, M, nbk, K);
    }
    qt_canon_tree(part, M * K, nb);
    qt_bc_put_rows(out, ldo, orow, part, M, K);
    return 0;
}

int qt_bf16_matmul_canon_bwd_data_on(int path, float *out, const qt_bf16 *dy,
                                     const qt_bf16 *w, int64_t M, int64_t N, int64_t K,
                                     int64_t nseg, int64_t nb, float *scratch)
{
    return qt_bf16_matmul_canon_bwd_data_ld_on(path, out, K, 0, dy, N, w, M, N, K, nseg, nb,
                                               scratch);
}

void qt_bf16_matmul_canon_fwd(float *out, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                              int64_t N, int64_t K, int64_t nseg, int64_t nb, float *scratch)
{
    qt_bf16_matmul_canon_fwd_on(qt_bf16_mm_path(), out, x, w, M, N, K, nseg, nb, scratch);
}

void qt_bf16_matmul_canon_bwd_data(float *out, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                                   int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                   float *scratch)
{
    qt_bf16_matmul_canon_bwd_data_on(qt_bf16_mm_path(), out, dy, w, M, N, K, nseg, nb, scratch);
}

void qt_bf16_matmul_canon_fwd_ref(float *out, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                                  int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                  float *scratch)
{
    qt_bf16_matmul_canon_fwd_on(QT_BF16_PATH_REF, out, x, w, M, N, K, nseg, nb, scratch);
}

void qt_bf16_matmul_canon_bwd_data_ref(float *out, const qt_bf16 *dy, const qt_bf16 *w,
                                       int64_t M, int64_t N, int64_t K, int64_t nseg,
                                       int64_t nb, float *scratch)
{
    qt_bf16_matmul_canon_bwd_data_on(QT_BF16_PATH_REF, out, dy, w, M, N, K, nseg, nb,
                                     scratch);
}
#endif
