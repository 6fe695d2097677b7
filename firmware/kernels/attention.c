/* attention.c - causal GQA softmax attention, one query row at a time.
 *
 * Forward: scores s_ij = (q_i . k_j) * scale for j <= i, m = max_j s_ij,
 * lse_i = m + log(sum_j exp(s_ij - m)) (j increasing), o_i = sum_j exp(s_ij - lse_i) v_j
 * (j increasing). The backward recomputes p_ij = exp(s_ij - lse_i) from the saved lse, so
 * nothing of size S*S is ever stored.
 * Invariants: one fixed summation order per quantity (documented at each loop); no state
 * crosses sequences; the result never depends on whether scratch was supplied.
 */
#include "attention.h"
#include <string.h>
#include "../include/qt_real.h"

/* Eight lanes, eight elements wide: lane l sums elements l, l+8, ... of the full blocks
 * (one vector add per block, no contraction), the tail element n8+u goes to lane u, then
 * ((0+1)+(2+3))+((4+5)+(6+7)). A fixed order that the vector unit can run directly; the
 * GNU vector extension only spells out what the scalar definition already says. */
typedef qt_real qt_attn_v8 __attribute__((vector_size(8 * sizeof(qt_real))));

static inline qt_attn_v8 qt_attn_load8(const qt_real *p)
{
    qt_attn_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline qt_real qt_attn_dot(const qt_real *a, const qt_real *b, int64_t n)
{
    qt_attn_v8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8) acc += qt_attn_load8(a + i) * qt_attn_load8(b + i);
    for (int64_t i = n8; i < n; i++) acc[i - n8] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* y[i] += a * x[i]; elementwise, so the vector form has the scalar bits. */
static inline void qt_attn_axpy(qt_real *y, qt_real a, const qt_real *x, int64_t n)
{
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8) {
        const qt_attn_v8 r = qt_attn_load8(y + i) + a * qt_attn_load8(x + i);
        memcpy(y + i, &r, sizeof r);
    }
    for (int64_t i = n8; i < n; i++) y[i] += a * x[i];
}

void QT_FN(qt_attn_fwd)(qt_real *o, qt_real *lse, const qt_real *q, const qt_real *k,
                        const qt_real *v, qt_real *scratch, int64_t b, int64_t S, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    const int64_t group = Hq / Hkv;
    const int64_t kstride = Hkv * hd;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / group;
            const qt_real *kb = k + s * S * kstride + g * hd;
            const qt_real *vb = v + s * S * kstride + g * hd;
            for (int64_t i = 0; i < S; i++) {
                const qt_real *qi = q + ((s * S + i) * Hq + h) * hd;
                qt_real *oi = o + ((s * S + i) * Hq + h) * hd;
                qt_real m, sum = 0, l;
                if (scratch) {
                    for (int64_t j = 0; j <= i; j++)
                        scratch[j] = qt_attn_dot(qi, kb + j * kstride, hd) * scale;
                    m = scratch[0];
                    for (int64_t j = 1; j <= i; j++) m = scratch[j] > m ? scratch[j] : m;
                    for (int64_t j = 0; j <= i; j++) sum += QT_EXP(scratch[j] - m);
                } else {
                    m = qt_attn_dot(qi, kb, hd) * scale;
                    for (int64_t j = 1; j <= i; j++) {
                        const qt_real sj = qt_attn_dot(qi, kb + j * kstride, hd) * scale;
                        m = sj > m ? sj : m;
                    }
                    for (int64_t j = 0; j <= i; j++)
                        sum += QT_EXP(qt_attn_dot(qi, kb + j * kstride, hd) * scale - m);
                }
                l = m + QT_LOG(sum);
                lse[(s * Hq + h) * S + i] = l;
                for (int64_t d = 0; d < hd; d++) oi[d] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const qt_real sj = scratch ? scratch[j]
                                               : qt_attn_dot(qi, kb + j * kstride, hd) * scale;
                    qt_attn_axpy(oi, QT_EXP(sj - l), vb + j * kstride, hd);
                }
            }
        }
    }
}

void QT_FN(qt_attn_bwd)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                        const qt_real *q, const qt_real *k, const qt_real *v, const qt_real *o,
                        const qt_real *lse, qt_real *scratch, int64_t b, int64_t S, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    const int64_t group = Hq / Hkv;
    const int64_t kstride = Hkv * hd;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / group;
            const int64_t kvoff = s * S * kstride + g * hd;
            const qt_real *kb = k + kvoff, *vb = v + kvoff;
            qt_real *dkb = dk + kvoff, *dvb = dv + kvoff;
            for (int64_t i = 0; i < S; i++) {
                const int64_t qoff = ((s * S + i) * Hq + h) * hd;
                const qt_real *qi = q + qoff, *doi = dout + qoff;
                qt_real *dqi = dq + qoff;
                const qt_real l = lse[(s * Hq + h) * S + i];
                /* D_i = do_i . o_i is the softmax-Jacobian's row term. */
                const qt_real D = qt_attn_dot(doi, o + qoff, hd);
                for (int64_t j = 0; j <= i; j++) {
                    const qt_real p = QT_EXP(qt_attn_dot(qi, kb + j * kstride, hd) * scale - l);
                    qt_attn_axpy(dvb + j * kstride, p, doi, hd);
                    const qt_real dp = qt_attn_dot(doi, vb + j * kstride, hd);
                    scratch[j] = scale * (p * (dp - D));
                }
                for (int64_t j = 0; j <= i; j++) {
                    qt_attn_axpy(dqi, scratch[j], kb + j * kstride, hd);
                    qt_attn_axpy(dkb + j * kstride, scratch[j], qi, hd);
                }
            }
        }
    }
}
