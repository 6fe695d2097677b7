/* expert_ffn.c - gather / matmul / scatter implementation of the routed experts.
 *
 * Invariants: an expert's rows are always visited in increasing r = t*k + slot; the
 * backward visits slots in the outer loop so dx[t] receives its slots in slot order; the
 * SwiGLU pointwise math is the same expression in forward, backward and wgrad, so
 * recomputed activations match the forward's bits. Scratch regions: A (cap*d), B (cap*f),
 * C (cap*2f); the forward needs no B because H is compacted in place over C. The backward
 * prefers an expert-major order (row lists built once, weights read once per chunk) and
 * falls back to the slot-major order when the scratch is too small; both give the same bits.
 * The backward can park each row's d(gu) (the swiglu backward output it already has) so
 * the wgrad need not recompute it with a third matmul (qt_expert_ffn_wgrad_saved).
 * Data movement (none of it touches an FMA chain or a SwiGLU expression, so the bits are
 * those of expert_ffn_ref.c's row-at-a-time references, which the tests check): the
 * forward scatters gu and forms H in one pass per row; the SwiGLU steps read gu rows in
 * place (dgu must not alias gu); the expert-major backward writes each chunk's data
 * gradient straight into its contribution buffer in expert-list order and the slot-order
 * sum finds row r of expert e at off[e] + (rows of e before r); rows written for a later op
 * (gu, dgu, y) use streaming stores, fenced before return; row loops prefetch the next row.
 * The weight gradient's per-expert work (written or carried) is one function each, so the
 * one-pass form over an op's leaves (qt_expert_ffn_wgrad_saved_leaves: expert-major, leaf
 * after leaf inside an expert) runs exactly the per-leaf calls' code on each expert slice;
 * where an expert's rows of every leaf fit at once it runs each weight slice in row panels
 * instead, every leaf in order inside a panel (qt_matmul_wgrad_panel: the same chain and
 * epilogue per element; a weight row never reads another row), so the panel's tree-level
 * rows stay in L2 from one leaf to the next.
 */
#include "expert_ffn.h"
#include "matmul.h"
#include "matmul_canon.h"
#include "qt_real.h"
#include <stdint.h>
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
#include <immintrin.h>
#endif

/* End of the next chunk: scans r from r0, stops after `cap` rows of expert e (and of
 * `slot` when slot >= 0) or at r1; *n receives the number of rows in [r0, end). */
static int64_t qt_ffn_chunk(int64_t *n, const int32_t *idx, int64_t k, int32_t e,
                            int64_t slot, int64_t r0, int64_t r1, int64_t cap)
{
    int64_t r = r0, cnt = 0;
    for (; r < r1 && cnt < cap; r++)
        if (idx[r] == e && (slot < 0 || r % k == slot)) cnt++;
    *n = cnt;
    return r;
}

/* The first r in [r, r1) of expert e (and of `slot` when slot >= 0), or r1. */
static int64_t qt_ffn_next(const int32_t *idx, int64_t k, int32_t e, int64_t slot, int64_t r,
                           int64_t r1)
{
    while (r < r1 && (idx[r] != e || (slot >= 0 && r % k != slot))) r++;
    return r;
}

/* Prefetch a row of width elements (for writing when write != 0). The gathers and scatters
 * touch rows of a few KiB at scattered places, too short for the hardware prefetchers to
 * ramp up on: each loop prefetches its next row while it copies the current one. */
static void qt_ffn_prefetch(const qt_real *p, int64_t width, int write)
{
    for (int64_t i = 0; i < width; i += 64 / (int64_t)sizeof(qt_real)) {
        if (write) __builtin_prefetch(p + i, 1);
        else __builtin_prefetch(p + i, 0);
    }
}

/* dst[0..n) <- src[0..n), with streaming (non-temporal) stores where the float build has
 * AVX-512 and dst is 64-byte aligned: for rows the kernel writes for a later op (gu, dgu,
 * y), so the copy does not first read the destination lines into the cache. Callers end
 * with qt_ffn_fence(). */
static void qt_ffn_copy_out(qt_real *dst, const qt_real *src, int64_t n)
{
    int64_t i = 0;
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
    if (((uintptr_t)dst & 63) == 0)
        for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#endif
    for (; i < n; i++) dst[i] = src[i];
}

/* Orders the streaming stores before anything the caller does next (another rank may read
 * the rows once this kernel returns). */
static void qt_ffn_fence(void)
{
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
    _mm_sfence();
#endif
}

/* dst rows <- src rows of the matching r in [r0, r1); src row is r (per_token 0) or r/k. */
static void qt_ffn_gather(qt_real *dst, const qt_real *src, int64_t width, int per_token,
                          const int32_t *idx, int64_t k, int32_t e, int64_t slot,
                          int64_t r0, int64_t r1)
{
    for (int64_t r = qt_ffn_next(idx, k, e, slot, r0, r1), rn; r < r1; r = rn) {
        rn = qt_ffn_next(idx, k, e, slot, r + 1, r1);
        if (rn < r1) qt_ffn_prefetch(src + (per_token ? rn / k : rn) * width, width, 0);
        const qt_real *s = src + (per_token ? r / k : r) * width;
        for (int64_t i = 0; i < width; i++) dst[i] = s[i];
        dst += width;
    }
}

/* dst rows (r, or r/k with accumulate) <- src rows, the inverse of qt_ffn_gather. */
static void qt_ffn_scatter(qt_real *dst, const qt_real *src, int64_t width, int per_token_acc,
                           const int32_t *idx, int64_t k, int32_t e, int64_t slot,
                           int64_t r0, int64_t r1)
{
    for (int64_t r = qt_ffn_next(idx, k, e, slot, r0, r1), rn; r < r1; r = rn) {
        rn = qt_ffn_next(idx, k, e, slot, r + 1, r1);
        if (rn < r1 && per_token_acc) qt_ffn_prefetch(dst + (rn / k) * width, width, 1);
        if (per_token_acc) {
            qt_real *d = dst + (r / k) * width;
            for (int64_t i = 0; i < width; i++) d[i] += src[i];
        } else {
            qt_ffn_copy_out(dst + r * width, src, width);
        }
        src += width;
    }
}

/* h[n,f] = silu(gate) * up from gu[n,2f]; h may alias gu (compaction reads ahead of writes). */
static void qt_ffn_swiglu(qt_real *h, const qt_real *gu, int64_t n, int64_t f)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < f; i++) {
            const qt_real a = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i];
            h[r * f + i] = QT_SILU(a) * u;
        }
}

/* The forward's scatter of gu and its SwiGLU in one pass: for the j-th row of expert e in
 * [r0, r1), gu[r] <- C row j (2f), then h = silu(gate) * up into C + j*f (the compaction
 * of qt_ffn_swiglu, row by row while the row is in L1: h row j never overlaps a later
 * row's gate / up, and row 0 reads each element before writing it). */
static void qt_ffn_scatter_swiglu(qt_real *gu, qt_real *C, const int32_t *idx, int64_t k,
                                  int32_t e, int64_t r0, int64_t r1, int64_t f)
{
    int64_t j = 0;
    for (int64_t r = qt_ffn_next(idx, k, e, -1, r0, r1), rn; r < r1; r = rn) {
        rn = qt_ffn_next(idx, k, e, -1, r + 1, r1);
        const qt_real *src = C + j * 2 * f;
        qt_real *dst = gu + r * 2 * f;
        qt_ffn_copy_out(dst, src, 2 * f);
        qt_ffn_swiglu(C + j * f, src, 1, f);
        j++;
    }
}

/* One row's d(gu) from its gu row a|u and dh: d gate = dh*u*silu'(a), d up = dh*silu(a),
 * into out (and out2 when not NULL; neither may alias gu). */
static void qt_ffn_swiglu_bwd_row(qt_real *restrict out, qt_real *restrict out2,
                                  const qt_real *restrict gu, const qt_real *restrict dh,
                                  int64_t f)
{
    for (int64_t i = 0; i < f; i++) {
        const qt_real a = gu[i], u = gu[f + i], g = dh[i];
        const qt_real sg = QT_SIGMOID(a);
        out[i] = (g * u) * (sg * (QT_R(1.0) + a * (QT_R(1.0) - sg)));
        out[f + i] = g * QT_SILU(a);
    }
    if (out2)
        qt_ffn_copy_out(out2, out, 2 * f);
}

/* gu[n,2f] <- d(gu) in place from dh[n,f] (the slot-major path and the recomputing wgrad). */
static void qt_ffn_swiglu_bwd(qt_real *gu, const qt_real *dh, int64_t n, int64_t f)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < f; i++) {
            qt_real *pa = gu + r * 2 * f + i, *pu = pa + f;
            const qt_real a = *pa, u = *pu, g = dh[r * f + i];
            const qt_real sg = QT_SIGMOID(a);
            *pa = (g * u) * (sg * (QT_R(1.0) + a * (QT_R(1.0) - sg)));
            *pu = g * QT_SILU(a);
        }
}

static void qt_ffn_zero(qt_real *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = 0;
}

static void qt_ffn_poison(qt_real *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = QT_LOG(QT_R(-1.0));
}

void QT_FN(qt_expert_ffn_fwd)(qt_real *y, qt_real *gu, const qt_real *x, const int32_t *idx,
                              const qt_real *w_gu, const qt_real *w_down, qt_real *scratch,
                              int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                              int64_t scratch_elems)
{
    QT_FN(qt_expert_ffn_fwd_canon)(y, gu, x, idx, w_gu, w_down, scratch, T, k, E, d, f,
                                   scratch_elems, 0);
}

void QT_FN(qt_expert_ffn_fwd_canon)(qt_real *y, qt_real *gu, const qt_real *x,
                                    const int32_t *idx, const qt_real *w_gu,
                                    const qt_real *w_down, qt_real *scratch, int64_t T,
                                    int64_t k, int64_t E, int64_t d, int64_t f,
                                    int64_t scratch_elems, int64_t nb)
{
    /* with canonical blocks, the down projection's partials and packed blocks share the
     * scratch: per row nb*d + f/nb more, and d*(f/nb) for the weight block */
    const int64_t row = d + 2 * f + (nb > 0 ? nb * d + f / nb : 0);
    const int64_t fixed = nb > 0 ? d * (f / nb) : 0;
    const int64_t cap = scratch_elems > fixed ? (scratch_elems - fixed) / row : 0;
    if (cap < 1) { qt_ffn_poison(y, T * k * d); return; }
    qt_real *A = scratch, *C = scratch + cap * d, *K = C + cap * 2 * f;
    for (int32_t e = 0; e < E; e++) {
        const qt_real *wg = w_gu + (int64_t)e * 2 * f * d, *wd = w_down + (int64_t)e * d * f;
        for (int64_t r0 = 0, r1, n; r0 < T * k; r0 = r1) {
            r1 = qt_ffn_chunk(&n, idx, k, e, -1, r0, T * k, cap);
            if (n == 0) break;
            qt_ffn_gather(A, x, d, 1, idx, k, e, -1, r0, r1);
            QT_FN(qt_matmul_fwd)(C, A, wg, n, 2 * f, d);
            qt_ffn_scatter_swiglu(gu, C, idx, k, e, r0, r1, f);
            if (nb > 0) QT_FN(qt_matmul_canon_fwd)(A, C, wd, n, d, f, 1, nb, K);
            else QT_FN(qt_matmul_fwd)(A, C, wd, n, d, f);
            qt_ffn_scatter(y, A, d, 0, idx, k, e, -1, r0, r1);
        }
    }
    qt_ffn_fence();
}

void QT_FN(qt_expert_ffn_lists)(qt_real *list, qt_real *off, const int32_t *idx, int64_t R,
                                int64_t E)
{
    for (int64_t e = 0; e <= E; e++) off[e] = 0;
    for (int64_t r = 0; r < R; r++)
        if (idx[r] >= 0 && idx[r] < E) off[idx[r] + 1] += 1;
    for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    for (int64_t e = 0; e < E; e++) {
        int64_t n = (int64_t)off[e];
        for (int64_t r = 0; r < R; r++)
            if (idx[r] == e) list[n++] = (qt_real)r;
    }
}

/* dst rows <- src rows list[0..n) (row index per_token ? r/k : r). */
static void qt_ffn_gather_list(qt_real *dst, const qt_real *src, int64_t width, int per_token,
                               const qt_real *list, int64_t n, int64_t k)
{
    for (int64_t j = 0; j < n; j++) {
        const int64_t r = (int64_t)list[j];
        if (j + 1 < n) {
            const int64_t rn = (int64_t)list[j + 1];
            qt_ffn_prefetch(src + (per_token ? rn / k : rn) * width, width, 0);
        }
        const qt_real *sp = src + (per_token ? r / k : r) * width;
        for (int64_t i = 0; i < width; i++) dst[j * width + i] = sp[i];
    }
}

/* A[n,d] = the rows' data gradient d(gu) W_gu: the plain chain from 0, or with nb > 0 the
 * canonical blocking of the contraction over [gate | up] (2 parts, kernels/matmul_canon.h),
 * whose partials and packed blocks use K. */
static void qt_ffn_dx_rows(qt_real *A, const qt_real *C, const qt_real *wg, int64_t n, int64_t d,
                           int64_t f, int64_t nb, qt_real *K)
{
    if (nb > 0) {
        QT_FN(qt_matmul_canon_bwd_data)(A, C, wg, n, 2 * f, d, 2, nb, K);
        return;
    }
    qt_ffn_zero(A, n * d);
    QT_FN(qt_matmul_bwd_data)(A, C, wg, n, 2 * f, d);
}

/* Per-slot path: one slot at a time, every expert's rows of that slot re-found by scanning
 * idx. Used when the scratch cannot hold the whole [T*k,d] contribution buffer. */
static void qt_ffn_bwd_slots(qt_real *dx, qt_real *dgu, const qt_real *dy, const int32_t *idx,
                             const qt_real *gu, const qt_real *w_gu, const qt_real *w_down,
                             qt_real *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                             int64_t f, int64_t cap, int64_t nb)
{
    qt_real *A = scratch, *B = A + cap * d, *C = B + cap * f, *K = C + cap * 2 * f;
    for (int64_t slot = 0; slot < k; slot++) {
        for (int32_t e = 0; e < E; e++) {
            const qt_real *wg = w_gu + (int64_t)e * 2 * f * d;
            const qt_real *wd = w_down + (int64_t)e * d * f;
            for (int64_t r0 = 0, r1, n; r0 < T * k; r0 = r1) {
                r1 = qt_ffn_chunk(&n, idx, k, e, slot, r0, T * k, cap);
                if (n == 0) break;
                qt_ffn_gather(A, dy, d, 0, idx, k, e, slot, r0, r1);
                qt_ffn_zero(B, n * f);
                QT_FN(qt_matmul_bwd_data)(B, A, wd, n, d, f);
                qt_ffn_gather(C, gu, 2 * f, 0, idx, k, e, slot, r0, r1);
                qt_ffn_swiglu_bwd(C, B, n, f);
                if (dgu) qt_ffn_scatter(dgu, C, 2 * f, 0, idx, k, e, slot, r0, r1);
                qt_ffn_dx_rows(A, C, wg, n, d, f, nb, K);
                qt_ffn_scatter(dx, A, d, 1, idx, k, e, slot, r0, r1);
            }
        }
    }
}

/* Expert-major path: each expert's rows of all slots go through the matmuls together (its
 * weights are streamed once, not k times, and the matmuls are k times taller); each row's
 * contribution (0 + acc, bit-identical to the per-slot path by the matmul row contract) is
 * parked in Dx[r], then added to dx[t] in increasing slot order. Scratch: list (T*k),
 * off (E+1), Dx (T*k*d), then the chunk buffers A, B, C of cap rows. */
void QT_FN(qt_expert_ffn_bwd_save)(qt_real *dx, qt_real *dgu, const qt_real *dy,
                                   const int32_t *idx, const qt_real *gu,
                                   const qt_real *w_gu, const qt_real *w_down,
                                   qt_real *scratch, int64_t T, int64_t k, int64_t E,
                                   int64_t d, int64_t f, int64_t scratch_elems)
{
    QT_FN(qt_expert_ffn_bwd_save_canon)(dx, dgu, dy, idx, gu, w_gu, w_down, scratch, T, k, E, d,
                                        f, scratch_elems, 0);
}

void QT_FN(qt_expert_ffn_bwd_save_canon)(qt_real *dx, qt_real *dgu, const qt_real *dy,
                                         const int32_t *idx, const qt_real *gu,
                                         const qt_real *w_gu, const qt_real *w_down,
                                         qt_real *scratch, int64_t T, int64_t k, int64_t E,
                                         int64_t d, int64_t f, int64_t scratch_elems,
                                         int64_t nb)
{
    /* per row d + 3f, plus with canonical blocks nb*d + 2f/nb and d*(2f/nb) for the weights */
    const int64_t row = d + 3 * f + (nb > 0 ? nb * d + 2 * f / nb : 0);
    const int64_t fixed = nb > 0 ? d * (2 * f / nb) : 0;
    const int64_t R = T * k, head = R + (E + 1) + R * d + fixed;
    const int64_t capx = head < scratch_elems && R <= ((int64_t)1 << 24)
                             ? (scratch_elems - head) / row : 0;
    if (capx < 1) {
        const int64_t cap = scratch_elems > fixed ? (scratch_elems - fixed) / row : 0;
        if (cap < 1) { qt_ffn_poison(dx, T * d); return; }
        qt_ffn_bwd_slots(dx, dgu, dy, idx, gu, w_gu, w_down, scratch, T, k, E, d, f, cap, nb);
        qt_ffn_fence();
        return;
    }
    qt_real *list = scratch, *off = list + R, *Dx = off + E + 1;
    qt_real *A = Dx + R * d, *B = A + capx * d, *C = B + capx * f, *K = C + capx * 2 * f;
    QT_FN(qt_expert_ffn_lists)(list, off, idx, R, E);
    for (int64_t e = 0; e < E; e++) {
        const qt_real *wg = w_gu + e * 2 * f * d, *wd = w_down + e * d * f;
        const int64_t end = (int64_t)off[e + 1];
        for (int64_t j0 = (int64_t)off[e]; j0 < end; j0 += capx) {
            const int64_t n = end - j0 < capx ? end - j0 : capx;
            qt_ffn_gather_list(A, dy, d, 0, list + j0, n, k);
            qt_ffn_zero(B, n * f);
            QT_FN(qt_matmul_bwd_data)(B, A, wd, n, d, f);
            for (int64_t j = 0; j < n; j++) { /* gu rows read in place, d(gu) parked */
                const int64_t r = (int64_t)list[j0 + j];
                if (j + 1 < n) {
                    const int64_t rn = (int64_t)list[j0 + j + 1];
                    qt_ffn_prefetch(gu + rn * 2 * f, 2 * f, 0);
                }
                qt_ffn_swiglu_bwd_row(C + j * 2 * f, dgu ? dgu + r * 2 * f : 0,
                                      gu + r * 2 * f, B + j * f, f);
            }
            qt_ffn_dx_rows(Dx + j0 * d, C, wg, n, d, f, nb, K);
        }
    }
    /* Dx holds the contributions in list order: row r of expert e is at off[e] + (rows of
     * e before r), so off[e] counts along as r increases */
    for (int64_t t = 0; t < T; t++)
        for (int64_t slot = 0; slot < k; slot++) {
            const int32_t e = idx[t * k + slot];
            if (e < 0 || e >= E) continue;
            const qt_real *src = Dx + (int64_t)off[e] * d;
            off[e] += 1;
            if (t * k + slot + 1 < T * k) { /* the next row's contribution */
                const int32_t en = idx[t * k + slot + 1];
                if (en >= 0 && en < E) qt_ffn_prefetch(Dx + (int64_t)off[en] * d, d, 0);
            }
            for (int64_t i = 0; i < d; i++) dx[t * d + i] += src[i];
        }
    qt_ffn_fence();
}

void QT_FN(qt_expert_ffn_bwd)(qt_real *dx, const qt_real *dy, const int32_t *idx,
                              const qt_real *gu, const qt_real *w_gu, const qt_real *w_down,
                              qt_real *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                              int64_t f, int64_t scratch_elems)
{
    QT_FN(qt_expert_ffn_bwd_save)(dx, 0, dy, idx, gu, w_gu, w_down, scratch, T, k, E, d, f,
                                  scratch_elems);
}

void QT_FN(qt_expert_ffn_wgrad)(qt_real *dw_gu, qt_real *dw_down, const qt_real *dy,
                                const qt_real *x, const int32_t *idx, const qt_real *gu,
                                const qt_real *w_down, qt_real *scratch, int64_t T, int64_t k,
                                int64_t E, int64_t d, int64_t f, int64_t scratch_elems)
{
    const int64_t cap = scratch_elems / (d + 3 * f);
    if (cap < 1) {
        qt_ffn_poison(dw_gu, E * 2 * f * d);
        qt_ffn_poison(dw_down, E * d * f);
        return;
    }
    qt_real *A = scratch, *B = A + cap * d, *C = B + cap * f;
    for (int32_t e = 0; e < E; e++) {
        const qt_real *wd = w_down + (int64_t)e * d * f;
        qt_real *dwg = dw_gu + (int64_t)e * 2 * f * d, *dwd = dw_down + (int64_t)e * d * f;
        for (int64_t r0 = 0, r1, n; r0 < T * k; r0 = r1) {
            r1 = qt_ffn_chunk(&n, idx, k, e, -1, r0, T * k, cap);
            if (n == 0) break;
            qt_ffn_gather(A, dy, d, 0, idx, k, e, -1, r0, r1);
            qt_ffn_gather(C, gu, 2 * f, 0, idx, k, e, -1, r0, r1);
            qt_ffn_swiglu(B, C, n, f);
            QT_FN(qt_matmul_wgrad)(dwd, A, B, n, d, f);
            qt_ffn_zero(B, n * f);
            QT_FN(qt_matmul_bwd_data)(B, A, wd, n, d, f);
            qt_ffn_swiglu_bwd(C, B, n, f);
            qt_ffn_gather(A, x, d, 1, idx, k, e, -1, r0, r1);
            QT_FN(qt_matmul_wgrad)(dwg, C, A, n, 2 * f, d);
        }
    }
}

/* h rows of expert e's rows in [r0, r1) straight from their gu rows (no copy of gu). */
static void qt_ffn_gather_swiglu(qt_real *h, const qt_real *gu, const int32_t *idx, int32_t e,
                                 int64_t r0, int64_t r1, int64_t f)
{
    for (int64_t r = qt_ffn_next(idx, 1, e, -1, r0, r1), rn; r < r1; r = rn) {
        rn = qt_ffn_next(idx, 1, e, -1, r + 1, r1);
        if (rn < r1) qt_ffn_prefetch(gu + rn * 2 * f, 2 * f, 0);
        qt_ffn_swiglu(h, gu + r * 2 * f, 1, f);
        h += f;
    }
}

/* Expert e's slices of the recompute-free wgrad (dw_gu, dw_down at e's slices): d(gu) comes
 * from the backward (same bits as recomputing it, by the matmul row contract), so only
 * h = swiglu(gu) is rebuilt. Same chunking and row order as qt_expert_ffn_wgrad, hence the
 * same bits. write: the first chunk writes (+0) + sum (and an expert without rows +0). */
static void qt_ffn_wgrad_saved_expert(qt_real *dwg, qt_real *dwd, const qt_real *dy,
                                      const qt_real *x, const int32_t *idx, const qt_real *gu,
                                      const qt_real *dgu, qt_real *scratch, int64_t cap,
                                      int32_t e, int64_t T, int64_t k, int64_t d, int64_t f,
                                      int write)
{
    qt_real *A = scratch, *B = A + cap * d, *C = B + cap * f;
    int first = write; /* the expert's first chunk writes (+0) + sum, later ones add */
    for (int64_t r0 = 0, r1, n; r0 < T * k; r0 = r1) {
        r1 = qt_ffn_chunk(&n, idx, k, e, -1, r0, T * k, cap);
        if (n == 0) break;
        qt_ffn_gather(A, dy, d, 0, idx, k, e, -1, r0, r1);
        qt_ffn_gather_swiglu(B, gu, idx, e, r0, r1, f);
        if (first) QT_FN(qt_matmul_wgrad_write)(dwd, A, B, n, d, f);
        else QT_FN(qt_matmul_wgrad)(dwd, A, B, n, d, f);
        qt_ffn_gather(C, dgu, 2 * f, 0, idx, k, e, -1, r0, r1);
        qt_ffn_gather(A, x, d, 1, idx, k, e, -1, r0, r1);
        if (first) QT_FN(qt_matmul_wgrad_write)(dwg, C, A, n, 2 * f, d);
        else QT_FN(qt_matmul_wgrad)(dwg, C, A, n, 2 * f, d);
        first = 0;
    }
    if (first) { /* no rows: the zeroed leaf's value */
        qt_ffn_zero(dwg, 2 * f * d);
        qt_ffn_zero(dwd, d * f);
    }
}

/* The recompute-free wgrad, expert after expert (qt_ffn_wgrad_saved_expert). */
static void qt_ffn_wgrad_saved(qt_real *dw_gu, qt_real *dw_down, const qt_real *dy,
                               const qt_real *x, const int32_t *idx, const qt_real *gu,
                               const qt_real *dgu, qt_real *scratch, int64_t T, int64_t k,
                               int64_t E, int64_t d, int64_t f, int64_t scratch_elems, int write)
{
    const int64_t cap = scratch_elems / (d + 3 * f);
    if (cap < 1) {
        qt_ffn_poison(dw_gu, E * 2 * f * d);
        qt_ffn_poison(dw_down, E * d * f);
        return;
    }
    for (int32_t e = 0; e < E; e++)
        qt_ffn_wgrad_saved_expert(dw_gu + (int64_t)e * 2 * f * d, dw_down + (int64_t)e * d * f,
                                  dy, x, idx, gu, dgu, scratch, cap, e, T, k, d, f, write);
}

void QT_FN(qt_expert_ffn_wgrad_saved)(qt_real *dw_gu, qt_real *dw_down, const qt_real *dy,
                                      const qt_real *x, const int32_t *idx, const qt_real *gu,
                                      const qt_real *dgu, qt_real *scratch, int64_t T,
                                      int64_t k, int64_t E, int64_t d, int64_t f,
                                      int64_t scratch_elems)
{
    qt_ffn_wgrad_saved(dw_gu, dw_down, dy, x, idx, gu, dgu, scratch, T, k, E, d, f,
                       scratch_elems, 0);
}

#ifndef QT_REAL_DOUBLE
/* cy restricted to the elements [off, ...) of its parameter (one expert's slice). */
static qt_leaf_carry qt_ffn_carry_slice(const qt_leaf_carry *cy, int64_t off)
{
    qt_leaf_carry s;
    s.n = cy->n;
    for (int32_t l = 0; l < cy->n; l++) s.add[l] = cy->add[l] + off;
    s.dst = cy->dst + off;
    return s;
}

/* Expert e's slices of the carrying wgrad (the caller checked cap >= T and the carries):
 * every expert's rows in one chunk (an expert takes at most one slot of a token, so at most
 * T rows): each weight slice is written by exactly one call, which can carry. */
static void qt_ffn_wgrad_carry_expert(const qt_leaf_carry *c_gu, const qt_leaf_carry *c_down,
                                      const float *dy, const float *x, const int32_t *idx,
                                      const float *gu, const float *dgu, float *scratch,
                                      int64_t cap, int32_t e, int64_t T, int64_t k, int64_t d,
                                      int64_t f)
{
    float *A = scratch, *B = A + cap * d, *C = B + cap * f;
    const qt_leaf_carry cg = qt_ffn_carry_slice(c_gu, (int64_t)e * 2 * f * d);
    const qt_leaf_carry cd = qt_ffn_carry_slice(c_down, (int64_t)e * d * f);
    int64_t n = 0;
    qt_ffn_chunk(&n, idx, k, e, -1, 0, T * k, cap);
    /* no rows: the leaf is (+0), carried as the empty contraction's */
    if (n > 0) {
        qt_ffn_gather(A, dy, d, 0, idx, k, e, -1, 0, T * k);
        qt_ffn_gather_swiglu(B, gu, idx, e, 0, T * k, f);
    }
    qt_matmul_wgrad_write_carry(&cd, A, B, n, d, f);
    if (n > 0) {
        qt_ffn_gather(C, dgu, 2 * f, 0, idx, k, e, -1, 0, T * k);
        qt_ffn_gather(A, x, d, 1, idx, k, e, -1, 0, T * k);
    }
    qt_matmul_wgrad_write_carry(&cg, C, A, n, 2 * f, d);
}

/* 1 when both carries can be applied (the carrying matmul built, addends present) and the
 * scratch holds T rows; nothing is touched either way. */
static int qt_ffn_carry_ok(const qt_leaf_carry *c_gu, const qt_leaf_carry *c_down, int64_t T,
                           int64_t cap)
{
    return c_gu && c_down && cap >= T && cap >= 1 &&
           qt_matmul_wgrad_write_carry(c_gu, NULL, NULL, 0, 0, 0) &&
           qt_matmul_wgrad_write_carry(c_down, NULL, NULL, 0, 0, 0);
}

int qt_expert_ffn_wgrad_saved_carry(const qt_leaf_carry *c_gu, const qt_leaf_carry *c_down,
                                    const float *dy, const float *x, const int32_t *idx,
                                    const float *gu, const float *dgu, float *scratch,
                                    int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                    int64_t scratch_elems)
{
    const int64_t cap = scratch_elems / (d + 3 * f);
    if (!qt_ffn_carry_ok(c_gu, c_down, T, cap)) return 0; /* nothing touched */
    for (int32_t e = 0; e < E; e++)
        qt_ffn_wgrad_carry_expert(c_gu, c_down, dy, x, idx, gu, dgu, scratch, cap, e, T, k, d, f);
    return 1;
}

/* Row panels of a weight slice: about this many floats of a level per panel (64 KiB), in
 * whole 12-row tiles; a panel's rows of every tree level a leaf touches, and the leaves'
 * packed x (or h) rows, then stay in the 1 MiB L2 while the panel's leaves run. */
#define QT_FFN_PANEL_FLOATS (1 << 14)

static int64_t qt_ffn_panel_rows(int64_t forced, int64_t K)
{
    if (forced > 0) return forced;
    const int64_t r = QT_FFN_PANEL_FLOATS / K;
    return r < 12 ? 12 : (r + 11) / 12 * 12;
}

/* One weight slice of expert e (rows N, columns K: dW_down d x f, dW_gu 2f x d) over every
 * leaf, in row panels of pr rows, leaf after leaf inside a panel: a[s] the leaf's gathered
 * A rows (rows[s] x N), bo[s] its packed B (qt_matmul_wgrad_panel_pack), dw[s] its written
 * slice or c[s] its carry's slice. Every element sees the chain and epilogue of the whole
 * per-leaf call, in leaf order (a weight row's values never depend on other rows). */
static void qt_ffn_panel_run(const qt_leaf_carry *c, float *const *dw, const float *const *a,
                             const int64_t *rows, const int64_t *bo, int32_t n, int64_t N,
                             int64_t K, int64_t pr)
{
    for (int64_t i0 = 0; i0 < N; i0 += pr) {
        const int64_t i1 = i0 + pr < N ? i0 + pr : N;
        for (int32_t s = 0; s < n; s++) /* the last leaf's carry is read by no later leaf */
            qt_matmul_wgrad_panel(dw[s], dw[s] ? 0 : &c[s], a[s], rows[s], N, K, bo[s], i0, i1,
                                  s + 1 == n);
    }
}

/* Expert e's slices of every leaf in row panels (qt_expert_ffn_wgrad_saved_leaves_panels):
 * each leaf's rows of e gathered once per weight (dy and h for dW_down, dgu and x for dW_gu;
 * the A rows kept in the scratch, h / x packed at once into the panel buffer), then the
 * slice in panels. 1 when done; 0, with no output written, when a leaf's rows exceed a
 * chunk (cap: the per-leaf form would split them) or do not fit the scratch or the panel
 * buffer (the caller then runs the expert leaf after leaf). */
static int qt_ffn_wgrad_panels_expert(const qt_ffn_leaf *lv, int32_t n, float *scratch,
                                      int64_t scratch_elems, int64_t cap, int32_t e, int64_t d,
                                      int64_t f, int64_t forced)
{
    int64_t rows[QT_WGRAD_LEAVES_MAX], bo[QT_WGRAD_LEAVES_MAX] = {0}, sum = 0, most = 0;
    const float *a[QT_WGRAD_LEAVES_MAX] = {0};
    float *dg[QT_WGRAD_LEAVES_MAX], *dd[QT_WGRAD_LEAVES_MAX];
    qt_leaf_carry cg[QT_WGRAD_LEAVES_MAX], cd[QT_WGRAD_LEAVES_MAX];
    if (n > QT_WGRAD_LEAVES_MAX) return 0;
    for (int32_t s = 0; s < n; s++) {
        const qt_ffn_leaf *l = &lv[s];
        qt_ffn_chunk(&rows[s], l->idx, l->k, e, -1, 0, l->T * l->k, l->T * l->k);
        if (rows[s] > cap) return 0;
        sum += rows[s];
        most = rows[s] > most ? rows[s] : most;
        dg[s] = l->c_gu ? 0 : l->dw_gu + (int64_t)e * 2 * f * d;
        dd[s] = l->c_down ? 0 : l->dw_down + (int64_t)e * d * f;
        if (l->c_gu) {
            cg[s] = qt_ffn_carry_slice(l->c_gu, (int64_t)e * 2 * f * d);
            cd[s] = qt_ffn_carry_slice(l->c_down, (int64_t)e * d * f);
        }
    }
    if (sum * d + most * f > scratch_elems || sum * 2 * f + most * d > scratch_elems) return 0;
    const int64_t width[2] = {f, d}; /* the packed B rows: h for dW_down, x for dW_gu */
    for (int w = 0; w < 2; w++)
        for (int64_t s = 0, off = 0, used; s < n; s++, off += used)
            if ((used = qt_matmul_wgrad_panel_pack(off, 0, rows[s], width[w])) < 0) return 0;
    /* dW_down[d, f] = dy^T h: A the dy rows, B the h rows */
    float *A = scratch, *H = scratch + sum * d;
    int64_t boff = 0;
    for (int32_t s = 0; s < n; s++) {
        const qt_ffn_leaf *l = &lv[s];
        a[s] = A;
        qt_ffn_gather(A, l->dy, d, 0, l->idx, l->k, e, -1, 0, l->T * l->k);
        qt_ffn_gather_swiglu(H, l->gu, l->idx, e, 0, l->T * l->k, f);
        const int64_t used = qt_matmul_wgrad_panel_pack(boff, H, rows[s], f);
        bo[s] = boff, boff += used, A += rows[s] * d;
    }
    qt_ffn_panel_run(cd, dd, a, rows, bo, n, d, f, qt_ffn_panel_rows(forced, f));
    /* dW_gu[2f, d] = dgu^T x: A the dgu rows, B the x rows (dW_down's packs are done with) */
    float *X = scratch + sum * 2 * f;
    A = scratch, boff = 0;
    for (int32_t s = 0; s < n; s++) {
        const qt_ffn_leaf *l = &lv[s];
        a[s] = A;
        qt_ffn_gather(A, l->dgu, 2 * f, 0, l->idx, l->k, e, -1, 0, l->T * l->k);
        qt_ffn_gather(X, l->x, d, 1, l->idx, l->k, e, -1, 0, l->T * l->k);
        const int64_t used = qt_matmul_wgrad_panel_pack(boff, X, rows[s], d);
        bo[s] = boff, boff += used, A += rows[s] * 2 * f;
    }
    qt_ffn_panel_run(cg, dg, a, rows, bo, n, 2 * f, d, qt_ffn_panel_rows(forced, d));
    return 1;
}

int qt_expert_ffn_wgrad_saved_leaves_panels(const qt_ffn_leaf *lv, int32_t n, float *scratch,
                                            int64_t E, int64_t d, int64_t f,
                                            int64_t scratch_elems, int64_t panel_rows,
                                            int64_t *paneled)
{
    const int64_t cap = scratch_elems / (d + 3 * f);
    if (paneled) *paneled = 0;
    if (n < 1 || cap < 1) return 0;
    for (int32_t s = 0; s < n; s++) { /* refused before anything is written */
        const qt_ffn_leaf *l = &lv[s];
        if (!l->dy || !l->x || !l->idx || !l->gu || !l->dgu) return 0;
        if (l->c_gu || l->c_down) {
            if (!qt_ffn_carry_ok(l->c_gu, l->c_down, l->T, cap)) return 0;
        } else if (!l->dw_gu || !l->dw_down) {
            return 0;
        }
    }
    /* expert-major: an expert's slices of every leaf, in row panels through the leaves or
     * leaf after leaf, so the tree levels' slices a later leaf's carry reads are still in
     * the caches */
    for (int32_t e = 0; e < E; e++) {
        if (panel_rows != 0 &&
            qt_ffn_wgrad_panels_expert(lv, n, scratch, scratch_elems, cap, e, d, f, panel_rows)) {
            if (paneled) *paneled += 1;
            continue;
        }
        for (int32_t s = 0; s < n; s++) {
            const qt_ffn_leaf *l = &lv[s];
            if (l->c_gu)
                qt_ffn_wgrad_carry_expert(l->c_gu, l->c_down, l->dy, l->x, l->idx, l->gu, l->dgu,
                                          scratch, cap, e, l->T, l->k, d, f);
            else
                qt_ffn_wgrad_saved_expert(l->dw_gu + (int64_t)e * 2 * f * d,
                                          l->dw_down + (int64_t)e * d * f, l->dy, l->x, l->idx,
                                          l->gu, l->dgu, scratch, cap, e, l->T, l->k, d, f, 1);
        }
    }
    return 1;
}

int qt_expert_ffn_wgrad_saved_leaves(const qt_ffn_leaf *lv, int32_t n, float *scratch,
                                     int64_t E, int64_t d, int64_t f, int64_t scratch_elems)
{
    return qt_expert_ffn_wgrad_saved_leaves_panels(lv, n, scratch, E, d, f, scratch_elems, -1,
                                                   0);
}
#endif

void QT_FN(qt_expert_ffn_wgrad_saved_write)(qt_real *dw_gu, qt_real *dw_down, const qt_real *dy,
                                            const qt_real *x, const int32_t *idx,
                                            const qt_real *gu, const qt_real *dgu,
                                            qt_real *scratch, int64_t T, int64_t k, int64_t E,
                                            int64_t d, int64_t f, int64_t scratch_elems)
{
    qt_ffn_wgrad_saved(dw_gu, dw_down, dy, x, idx, gu, dgu, scratch, T, k, E, d, f,
                       scratch_elems, 1);
}
