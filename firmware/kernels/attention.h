/* attention.h - causal softmax attention with grouped-query heads, forward and backward.
 *
 * Layouts (qt_ops.h ATTN_*): q[T,Hq,hd], k and v [T,Hkv,hd], o[T,Hq*hd], lse[b,Hq,S],
 * T = b*S; query head h reads kv head h / (Hq/Hkv); query i of a sequence sees keys
 * j <= i of the same sequence only.
 * Bit contract (since 2026-12-02, issue 22: the multiply-adds became fused; before, each was
 * a multiply then an add, which capped these kernels at half the FMA peak). fma(a, b, c) is
 * a*b + c rounded once (fmaf; fma in the double build):
 *  - a dot over hd (q.k, do.v, do.o): eight lane chains, lane l = fma over the elements
 *    l, l+8, l+16, ... of the full blocks of eight in increasing order from +0, then the
 *    tail element n8 + u into lane u (n8 = hd rounded down to 8); the lanes combined as
 *    ((0+1)+(2+3))+((4+5)+(6+7)) with plain adds. The same order everywhere, so scores
 *    recomputed in the backward, or by the scratch-free forward path, are the forward's.
 *  - s_ij = dot(q_i, k_j) * scale and p_ij = exp(s_ij - lse_i), each operation rounded
 *    (no fma); ds_ij = scale * (p_ij * (dot(do_i, v_j) - dot(do_i, o_i))), likewise.
 *  - o_i[d] = fma chain over j = 0..i increasing of p_ij v_j[d], from +0;
 *    dv_j[d] = fma(p_ij, do_i[d], dv_j[d]) and dk_j[d] = fma(ds_ij, q_i[d], dk_j[d]) onto
 *    the accumulated buffer, terms in (query head h, row i) increasing order;
 *    dq_i[d] = fma(ds_ij, k_j[d], dq_i[d]) for j increasing.
 * Every path (AVX-512, the x86-64-v3 AVX2 build, the scalar *_ref forms written with
 * fmaf) gives these bits. Every kernel exists as float (name) and double (name_f64: the
 * same contract with fma in double).
 */
#ifndef QT_KERNELS_ATTENTION_H
#define QT_KERNELS_ATTENTION_H

#include <stdint.h>

/* The blocked backward handles QT_ATTN_BWD_ROWS query rows at once and keeps their softmax
 * probabilities and score gradients in scratch: it needs QT_ATTN_BWD_SCRATCH(S) elements
 * (configgen plans that for ATTN_BWD t9; check/check.c includes this header). */
#define QT_ATTN_BWD_ROWS 4
#define QT_ATTN_BWD_SCRATCH(S) (2 * QT_ATTN_BWD_ROWS * (int64_t)(S))

#ifdef __cplusplus
extern "C" {
#endif

/* o writes, lse writes (log-sum-exp of each query row's scaled scores). Reads q, k, v.
 * scratch: >= S elements, or NULL (then scores are recomputed: same bits, ~1.5x slower). */
void qt_attn_fwd(float *o, float *lse, const float *q, const float *k, const float *v,
                 float *scratch, int64_t b, int64_t S, int64_t Hq, int64_t Hkv, int64_t hd,
                 float scale);
void qt_attn_fwd_f64(double *o, double *lse, const double *q, const double *k,
                     const double *v, double *scratch, int64_t b, int64_t S, int64_t Hq,
                     int64_t Hkv, int64_t hd, double scale);

/* dq[T,Hq,hd], dk, dv [T,Hkv,hd] accumulate (+=). Reads dout[T,Hq*hd], q, k, v, o, lse.
 * scratch holds scratch_n elements, which must be >= S. With hd % 16 == 0 and
 * scratch_n >= QT_ATTN_BWD_SCRATCH(S) the blocked fast path runs (any S); otherwise the
 * one-row reference path (qt_attn_bwd_ref): same bits either way. Order: sequence, query
 * head h increasing (so a kv head's gradient sums its group's query heads in increasing h),
 * query row i increasing, key j increasing. dq_i += sum_j (scale*ds_ij) k_j and
 * dk_j += (scale*ds_ij) q_i, dv_j += p_ij do_i, each element's terms in that order, each
 * term one fma onto the running value (the contract above). */
void qt_attn_bwd_n(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, const float *o, const float *lse,
                   float *scratch, int64_t scratch_n, int64_t b, int64_t S, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale);
void qt_attn_bwd_n_f64(double *dq, double *dk, double *dv, const double *dout,
                       const double *q, const double *k, const double *v, const double *o,
                       const double *lse, double *scratch, int64_t scratch_n, int64_t b,
                       int64_t S, int64_t Hq, int64_t Hkv, int64_t hd, double scale);

/* qt_attn_bwd_n with scratch_n = S, for callers that only know scratch >= S elements
 * (which is the reference path's need, so it takes that path). */
void qt_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                 const float *k, const float *v, const float *o, const float *lse,
                 float *scratch, int64_t b, int64_t S, int64_t Hq, int64_t Hkv, int64_t hd,
                 float scale);
void qt_attn_bwd_f64(double *dq, double *dk, double *dv, const double *dout,
                     const double *q, const double *k, const double *v, const double *o,
                     const double *lse, double *scratch, int64_t b, int64_t S, int64_t Hq,
                     int64_t Hkv, int64_t hd, double scale);

/* Packed documents: pos[T] is each row's position inside its document (a document starts
 * where pos is 0); query i sees the keys of its own document only, j from i - pos[i] to i.
 * Each document runs exactly as a sequence of its own length would (same kernels, same
 * order: the bits of a document do not depend on its neighbours); lse keeps the [b,Hq,S]
 * layout. pos NULL: exactly qt_attn_fwd / qt_attn_bwd_n. */
void qt_attn_fwd_docs(float *o, float *lse, const float *q, const float *k, const float *v,
                      float *scratch, const int32_t *pos, int64_t b, int64_t S, int64_t Hq,
                      int64_t Hkv, int64_t hd, float scale);
void qt_attn_fwd_docs_f64(double *o, double *lse, const double *q, const double *k,
                          const double *v, double *scratch, const int32_t *pos, int64_t b,
                          int64_t S, int64_t Hq, int64_t Hkv, int64_t hd, double scale);
void qt_attn_bwd_docs(float *dq, float *dk, float *dv, const float *dout, const float *q,
                      const float *k, const float *v, const float *o, const float *lse,
                      const int32_t *pos, float *scratch, int64_t scratch_n, int64_t b,
                      int64_t S, int64_t Hq, int64_t Hkv, int64_t hd, float scale);
void qt_attn_bwd_docs_f64(double *dq, double *dk, double *dv, const double *dout,
                          const double *q, const double *k, const double *v, const double *o,
                          const double *lse, const int32_t *pos, double *scratch,
                          int64_t scratch_n, int64_t b, int64_t S, int64_t Hq, int64_t Hkv,
                          int64_t hd, double scale);

/* One-dot-at-a-time scalar references of fwd / bwd: the contract above written one fmaf
 * at a time (same bits; the tests compare them with the batched fast paths above). */
void qt_attn_fwd_ref(float *o, float *lse, const float *q, const float *k, const float *v,
                     float *scratch, int64_t b, int64_t S, int64_t Hq, int64_t Hkv, int64_t hd,
                     float scale);
void qt_attn_fwd_ref_f64(double *o, double *lse, const double *q, const double *k,
                         const double *v, double *scratch, int64_t b, int64_t S, int64_t Hq,
                         int64_t Hkv, int64_t hd, double scale);
void qt_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *q,
                     const float *k, const float *v, const float *o, const float *lse,
                     float *scratch, int64_t b, int64_t S, int64_t Hq, int64_t Hkv, int64_t hd,
                     float scale);
void qt_attn_bwd_ref_f64(double *dq, double *dk, double *dv, const double *dout,
                         const double *q, const double *k, const double *v, const double *o,
                         const double *lse, double *scratch, int64_t b, int64_t S, int64_t Hq,
                         int64_t Hkv, int64_t hd, double scale);

#ifdef __cplusplus
}
#endif

#endif
