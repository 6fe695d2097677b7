/* moe_route.h - MoE router: top-k selection, softmax over the selected logits, and the
 * optional per-sequence load-balance term; forward and backward.
 *
 * Layouts (qt_ops.h MOE_ROUTE_*): logits[T,E], idx I32[T,k], p[T,k], lb_seq[T/S].
 * Selection order is descending raw logit, ties to the lower expert index; slot s holds the
 * s-th selection. Any E >= 1: the per-expert counters and accumulators are stack blocks
 * (moe_route.c), past one block the experts are taken block by block in the same order.
 * Every kernel exists as float (name) and double (name_f64).
 */
#ifndef QT_KERNELS_MOE_ROUTE_H
#define QT_KERNELS_MOE_ROUTE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* idx, p write. lb_seq[T/S] accumulates c * sum_e f_e * Pbar_e when c != 0 and lb_seq is
 * not NULL (f_e = routed (t,slot) count / S, Pbar_e = mean over the sequence's tokens of
 * softmax over all E logits). Reads logits. Requires k <= E, T % S == 0. */
void qt_moe_route_fwd(int32_t *idx, float *p, float *lb_seq, const float *logits,
                      int64_t T, int64_t E, int64_t k, int64_t S, float c);
void qt_moe_route_fwd_f64(int32_t *idx, double *p, double *lb_seq, const double *logits,
                          int64_t T, int64_t E, int64_t k, int64_t S, double c);

/* dlogits[T,E] accumulates: first, per token, the selected-softmax gradient
 * dlogits[idx_s] += p_s (dp_s - sum_u p_u dp_u) (slots increasing); then, when c != 0,
 * the load-balance gradient (seed 1 on every lb_seq entry, f held constant)
 * dlogits[e] += P_e (g_e - sum_u P_u g_u), g_e = c f_e / S, e increasing.
 * Reads dp[T,k], logits, idx, p. */
void qt_moe_route_bwd(float *dlogits, const float *dp, const float *logits,
                      const int32_t *idx, const float *p, int64_t T, int64_t E, int64_t k,
                      int64_t S, float c);
void qt_moe_route_bwd_f64(double *dlogits, const double *dp, const double *logits,
                          const int32_t *idx, const double *p, int64_t T, int64_t E,
                          int64_t k, int64_t S, double c);

/* The load-balance term in pieces (the kernels above use them; context parallelism feeds them
 * a split sequence's combined statistics, ops_moe.c).
 * qt_moe_lb_pbar: pbar[(T/S) x E] accumulates, per sequence of S rows, softmax over all E
 *   logits of each row, rows increasing then e (continue a sum by passing it back in).
 * qt_moe_lb_term: lb_seq[s] += c * sum_e (cnt[s*E+e]/Sw) * (pbar[s*E+e]/Sw), e increasing,
 *   for s < b; Sw the whole sequence's tokens.
 * qt_moe_lb_bwd: dlogits[T,E] accumulates, per sequence of S rows with the whole sequence's
 *   counts cnt[(T/S) x E] (Sw tokens), P_e (g_e - sum_u P_u g_u), g_e = c cnt_e / Sw^2. */
void qt_moe_lb_pbar(float *pbar, const float *logits, int64_t T, int64_t E, int64_t S);
void qt_moe_lb_pbar_f64(double *pbar, const double *logits, int64_t T, int64_t E, int64_t S);
void qt_moe_lb_term(float *lb_seq, const int32_t *cnt, const float *pbar, int64_t b, int64_t E,
                    int64_t Sw, float c);
void qt_moe_lb_term_f64(double *lb_seq, const int32_t *cnt, const double *pbar, int64_t b,
                        int64_t E, int64_t Sw, double c);
void qt_moe_lb_bwd(float *dlogits, const float *logits, const int32_t *cnt, int64_t T, int64_t E,
                   int64_t S, int64_t Sw, float c);
void qt_moe_lb_bwd_f64(double *dlogits, const double *logits, const int32_t *cnt, int64_t T,
                       int64_t E, int64_t S, int64_t Sw, double c);

/* Token dropping by capacity (qt_ops.def MOE_CAPACITY): per sequence of S tokens, expert
 * e's queue takes the assignments (t, slot) in increasing t then slot; the n-th (1-based)
 * is kept iff n <= C. kidx[T,k] writes idx or -1 (dropped); drops[T/S] (NULL: none)
 * accumulates each sequence's dropped count. Requires T % S == 0, E >= 1; an id outside
 * [0, E) is marked dropped. Integer only
 * (the _f64 name exists for the double test build). */
void qt_moe_capacity(int32_t *kidx, int32_t *drops, const int32_t *idx, int64_t T, int64_t E,
                     int64_t k, int64_t S, int64_t C);
void qt_moe_capacity_f64(int32_t *kidx, int32_t *drops, const int32_t *idx, int64_t T,
                         int64_t E, int64_t k, int64_t S, int64_t C);

/* The same queue continued from base[(T/S) x E] (NULL: zeros): sequence s's expert e has
 * already taken base[s*E + e] assignments before row s*S (context parallelism: the counts of
 * the sequence's tokens on the earlier context ranks, MOE_CAPACITY's exclusive prefix). */
void qt_moe_capacity_from(int32_t *kidx, int32_t *drops, const int32_t *idx,
                          const int32_t *base, int64_t T, int64_t E, int64_t k, int64_t S,
                          int64_t C);
void qt_moe_capacity_from_f64(int32_t *kidx, int32_t *drops, const int32_t *idx,
                              const int32_t *base, int64_t T, int64_t E, int64_t k, int64_t S,
                              int64_t C);

/* cnt[(T/S) x E] = per sequence of S rows, each expert's pre-drop assignment count in idx
 * (ids outside [0, E) not counted). */
void qt_moe_capacity_counts(int32_t *cnt, const int32_t *idx, int64_t T, int64_t E, int64_t k,
                            int64_t S);
void qt_moe_capacity_counts_f64(int32_t *cnt, const int32_t *idx, int64_t T, int64_t E,
                                int64_t k, int64_t S);

/* Token dropping by an expert-parallel receive buffer (qt_ops.def MOE_RAGGED; MaxText's
 * sparse path with ragged_buffer_factor > 0): M ranks of an expert group, member j hosting
 * experts [j*El, (j+1)*El) (E = M*El); cnt[M x E] = every member's assignment count per
 * expert over its T rows (member order, qt_moe_capacity_counts with S = T). Host j receives
 * its rows ordered by source member, then expert, then the source's (t, slot) order, and
 * keeps the first B of them. This member (index me) writes kidx[T,k] = idx or -1 (past the
 * buffer) and adds each sequence's dropped count into drops[T/S] (NULL: none). Takes
 * any E: the positions are stack blocks of experts (moe_route.c), one pass over the rows per
 * block; an idx outside [0, E), or E not a multiple of El, is marked dropped. Integer
 * only (the _f64 name exists for the double test build). */
void qt_moe_ragged_keep(int32_t *kidx, int32_t *drops, const int32_t *idx, const int32_t *cnt,
                        int64_t T, int64_t E, int64_t k, int64_t S, int64_t El, int64_t me,
                        int64_t B);
void qt_moe_ragged_keep_f64(int32_t *kidx, int32_t *drops, const int32_t *idx,
                            const int32_t *cnt, int64_t T, int64_t E, int64_t k, int64_t S,
                            int64_t El, int64_t me, int64_t B);

#ifdef __cplusplus
}
#endif

#endif
