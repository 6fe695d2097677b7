/* gdn_conv.c - causal depthwise conv + SiLU of the GDN q/k/v channels, forward, backward
 * and weight gradient of a sequence or of a block of its tokens (contract: gdn_conv.h, qt_ops.h QT_OP_GDN_CONV_*).
 *
 * Invariants: tokens mix only inside one sequence, and inside one document of it when pos
 * is given (packed documents: taps before the document's first token, t - pos[t], are
 * skipped like taps before the sequence start;
 * which equals adding 0*w for finite w); every sum has a fixed order (taps increasing for
 * a channel value, tokens increasing for the weight gradient). Channels are walked as
 * contiguous blocks (one q head, one k head or one value head) so the qkvz column of a
 * channel is block start + i.
 * The fast fwd / bwd / wgrad walk the tokens row by row over a chunk of channels (all Cc
 * when K * Cc <= QT_GDN_CONV_TILE) held in fixed stack tiles (the taps transposed, a ring
 * of the last K rows of dpre, the K accumulator rows of dw), eight channels at a time in
 * generic vectors, SiLU / sigmoid in the eight-lane forms of qt_math_inline.h; dpre =
 * dc * silu'(pre) is evaluated once per element. Each output element still sees exactly
 * the expression chain of the scalar *_ref versions (same terms, same order, the same
 * rounding at each step), so the fast and reference paths are bit-identical (tested at 0
 * ulp); K > QT_GDN_CONV_KMAX falls back to the reference.
 */
#include <stddef.h>
#include <string.h>
#include "qt_real.h"
#include "kernels/gdn_conv.h"

/* Block b of 2*Hk + Hv: q heads, then k heads, then v heads (conv channel order). */
static void qt_gdn_conv_block(int64_t blk, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                              int64_t *ch0, int64_t *col0, int64_t *width)
{
    int64_t r = hv / hk, g = 2 * dk + 2 * r * dv;
    if (blk < hk) {
        *ch0 = blk * dk;
        *col0 = blk * g;
        *width = dk;
    } else if (blk < 2 * hk) {
        int64_t h = blk - hk;
        *ch0 = hk * dk + h * dk;
        *col0 = h * g + dk;
        *width = dk;
    } else {
        int64_t j = blk - 2 * hk;
        *ch0 = 2 * hk * dk + j * dv;
        *col0 = (j / r) * g + 2 * dk + (j % r) * dv;
        *width = dv;
    }
}

/* d silu(x)/dx written so forward and backward share QT_SIGMOID's bits. */
static inline qt_real qt_gdn_dsilu(qt_real x)
{
    qt_real s = QT_SIGMOID(x);
    return s * (QT_R(1.0) + x * (QT_R(1.0) - s));
}

void QT_FN(qt_gdn_conv_fwd_ref_pos)(qt_real *restrict c, qt_real *restrict pre,
                                    const qt_real *restrict qkvz, const qt_real *restrict w,
                                    const int32_t *restrict pos, int64_t b, int64_t S,
                                    int64_t hk, int64_t dk, int64_t hv, int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t t = 0; t < S; t++) {
            int64_t row = s * S + t;
            int64_t lo = pos ? t - pos[row] : 0; /* the first token of t's document */
            qt_real *prow = pre + row * cc;
            for (int64_t blk = 0; blk < nblk; blk++) {
                int64_t ch0, col0, width;
                qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
                for (int64_t i = 0; i < width; i++) prow[ch0 + i] = QT_R(0.0);
                for (int64_t j = 0; j < K; j++) {
                    int64_t tt = t - K + 1 + j;
                    if (tt < lo) continue;
                    const qt_real *u = qkvz + (s * S + tt) * wq + col0;
                    const qt_real *wc = w + ch0 * K + j;
                    for (int64_t i = 0; i < width; i++) prow[ch0 + i] += wc[i * K] * u[i];
                }
            }
            for (int64_t ch = 0; ch < cc; ch++) c[row * cc + ch] = QT_SILU(prow[ch]);
        }
    }
}

void QT_FN(qt_gdn_conv_bwd_ref_pos)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                                    const qt_real *restrict dc, const qt_real *restrict w,
                                    const int32_t *restrict pos, int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t tu = 0; tu < S; tu++) {
            qt_real *du = dqkvz + (s * S + tu) * wq;
            for (int64_t blk = 0; blk < nblk; blk++) {
                int64_t ch0, col0, width;
                qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
                for (int64_t i = 0; i < width; i++) {
                    int64_t ch = ch0 + i;
                    qt_real acc = QT_R(0.0);
                    /* output token t = tu + K-1-j saw this input through tap j */
                    for (int64_t j = 0; j < K; j++) {
                        int64_t t = tu + K - 1 - j;
                        if (t >= S || (pos && t - pos[s * S + t] > tu)) continue;
                        int64_t e = (s * S + t) * cc + ch;
                        acc += (dc[e] * qt_gdn_dsilu(pre[e])) * w[ch * K + j];
                    }
                    du[col0 + i] += acc;
                }
            }
        }
    }
}

void QT_FN(qt_gdn_conv_wgrad_rows_ref_pos)(qt_real *restrict dw, const qt_real *restrict pre,
                                       const qt_real *restrict dc,
                                       const qt_real *restrict qkvz,
                                       const int32_t *restrict pos, int64_t t0, int64_t t1, int64_t hk, int64_t dk,
                                   int64_t hv, int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t t = t0; t < t1; t++) {
        for (int64_t blk = 0; blk < nblk; blk++) {
            int64_t ch0, col0, width;
            qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
            for (int64_t i = 0; i < width; i++) {
                int64_t ch = ch0 + i;
                qt_real dp = dc[t * cc + ch] * qt_gdn_dsilu(pre[t * cc + ch]);
                int64_t lo = pos ? t - pos[t] : 0;
                for (int64_t j = 0; j < K; j++) {
                    int64_t tt = t - K + 1 + j;
                    if (tt < lo) continue;
                    dw[ch * K + j] += dp * qkvz[tt * wq + col0 + i];
                }
            }
        }
    }
}

/* The fast paths walk the tokens row after row over a chunk of consecutive conv channels
 * (all Cc of them when K * Cc <= QT_GDN_CONV_TILE: the bench model's 1024 at K = 4), so
 * every stream (pre, c, dc, the q/k/v columns of qkvz, dqkvz) is read or written a whole
 * row piece at a time, and nothing is evaluated twice: the forward keeps the chunk's taps
 * transposed (wt[j*cw + i]), the backward a ring of the last K rows of dpre, the weight
 * gradient its K accumulator rows. A chunk is made of pieces, each the part of one block
 * (one q, k or v head) it covers: contiguous in the conv channels and in qkvz. */
#define QT_GDN_CONV_TILE 4096
#define QT_GDN_CONV_KMAX 32
#define QT_GDN_CONV_PMAX 64

/* Eight channels at a time: the lane forms of the scalar expressions, lane by lane the same
 * IEEE operations in the same order (-ffp-contract=off keeps a * b + c two roundings). In
 * float the SiLU / sigmoid are qt_siluf_v8 / qt_sigmoidf_v8 (qt_math_inline.h, bit-identical
 * to the scalar QT_SILU / QT_SIGMOID); the double build (tests) maps them lane by lane. */
#define QT_GC_L 8
typedef qt_real qt_gc_v __attribute__((vector_size(QT_GC_L * sizeof(qt_real))));

static inline qt_gc_v qt_gc_ld(const qt_real *p)
{
    qt_gc_v v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void qt_gc_st(qt_real *p, qt_gc_v v)
{
    memcpy(p, &v, sizeof v);
}

#ifdef QT_REAL_DOUBLE
static inline qt_gc_v qt_gc_silu(qt_gc_v x)
{
    for (int l = 0; l < QT_GC_L; l++) x[l] = QT_SILU(x[l]);
    return x;
}

static inline qt_gc_v qt_gc_sigmoid(qt_gc_v x)
{
    for (int l = 0; l < QT_GC_L; l++) x[l] = QT_SIGMOID(x[l]);
    return x;
}
#else
static inline qt_gc_v qt_gc_silu(qt_gc_v x)
{
    return qt_siluf_v8(x);
}

static inline qt_gc_v qt_gc_sigmoid(qt_gc_v x)
{
    return qt_sigmoidf_v8(x);
}
#endif

/* qt_gdn_dsilu on eight lanes. */
static inline qt_gc_v qt_gc_dsilu(qt_gc_v x)
{
    const qt_gc_v s = qt_gc_sigmoid(x);
    return s * (QT_R(1.0) + x * (QT_R(1.0) - s));
}

/* One piece of a chunk: off = its first channel - the chunk's, col = its first qkvz column,
 * n = its channels. The pieces of a chunk are disjoint, so their order changes no bits. */
typedef struct {
    int64_t off, col, n;
} qt_gdn_conv_piece;

/* The chunk starting at conv channel ca: pieces until maxw channels, PMAX pieces or Cc;
 * returns the piece count, *cb = the chunk's end channel. dk, dv >= 1. */
static int qt_gdn_conv_chunk(qt_gdn_conv_piece *pc, int64_t ca, int64_t maxw, int64_t hk,
                             int64_t dk, int64_t hv, int64_t dv, int64_t *cb)
{
    const int64_t cc = 2 * hk * dk + hv * dv;
    int n = 0;
    int64_t c = ca;
    while (c < cc && c - ca < maxw && n < QT_GDN_CONV_PMAX) {
        int64_t blk = c < hk * dk ? c / dk
                      : c < 2 * hk * dk ? hk + (c - hk * dk) / dk
                                        : 2 * hk + (c - 2 * hk * dk) / dv;
        int64_t ch0, col0, width;
        qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
        int64_t e = ch0 + width < ca + maxw ? ch0 + width : ca + maxw;
        pc[n].off = c - ca;
        pc[n].col = col0 + (c - ch0);
        pc[n].n = e - c;
        n++;
        c = e;
    }
    *cb = c;
    /* in qkvz column order: the q/k/v columns of a row are then walked forward (measured:
     * the backward's read-modify-write of dqkvz took ~15% less time than in channel order) */
    for (int a = 1; a < n; a++)
        for (int k = a; k > 0 && pc[k - 1].col > pc[k].col; k--) {
            qt_gdn_conv_piece x = pc[k];
            pc[k] = pc[k - 1];
            pc[k - 1] = x;
        }
    return n;
}

/* d[i] = g[i] * silu'(p[i]) for n channels. */
static void qt_gdn_conv_dpre_row(qt_real *restrict d, const qt_real *restrict p,
                                 const qt_real *restrict g, int64_t n)
{
    int64_t i = 0;
    for (; i + QT_GC_L <= n; i += QT_GC_L)
        qt_gc_st(d + i, qt_gc_ld(g + i) * qt_gc_dsilu(qt_gc_ld(p + i)));
    for (; i < n; i++) d[i] = g[i] * qt_gdn_dsilu(p[i]);
}

/* t[j*cw + i] = m[(ca+i)*K + j] (back = 0) or the reverse (back = 1). */
static void qt_gdn_conv_transpose(qt_real *restrict t, qt_real *restrict m, int64_t ca,
                                  int64_t cw, int64_t K, int back)
{
    for (int64_t i = 0; i < cw; i++)
        for (int64_t j = 0; j < K; j++) {
            if (back)
                m[(ca + i) * K + j] = t[j * cw + i];
            else
                t[j * cw + i] = m[(ca + i) * K + j];
        }
}

void QT_FN(qt_gdn_conv_fwd_pos)(qt_real *restrict c, qt_real *restrict pre,
                                const qt_real *restrict qkvz, const qt_real *restrict w,
                                const int32_t *restrict pos, int64_t b, int64_t S,
                                int64_t hk, int64_t dk, int64_t hv, int64_t dv, int64_t K)
{
    if (K < 1 || K > QT_GDN_CONV_KMAX) {
        QT_FN(qt_gdn_conv_fwd_ref_pos)(c, pre, qkvz, w, pos, b, S, hk, dk, hv, dv, K);
        return;
    }
    const int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    qt_real wt[QT_GDN_CONV_TILE];
    qt_gdn_conv_piece pc[QT_GDN_CONV_PMAX];
    for (int64_t ca = 0, cb; ca < cc; ca = cb) {
        const int np = qt_gdn_conv_chunk(pc, ca, QT_GDN_CONV_TILE / K, hk, dk, hv, dv, &cb);
        const int64_t cw = cb - ca;
        qt_gdn_conv_transpose(wt, (qt_real *)w, ca, cw, K, 0);
        for (int64_t row = 0; row < b * S; row++) {
            const int64_t t = row % S;
            const int64_t lo = pos ? t - pos[row] : 0; /* t's document's first token */
            /* taps j >= j0 read tokens t-K+1+j >= lo: the ones the reference does not skip,
             * in its order; u + (j - j0) * wq is tap j's row (no pointer before the array) */
            const int64_t j0 = lo - (t - K + 1) > 0 ? lo - (t - K + 1) : 0;
            const qt_real *u = qkvz + (row - K + 1 + j0) * wq;
            qt_real *pr = pre + row * cc + ca, *cr = c + row * cc + ca;
            for (int p = 0; p < np; p++) {
                const qt_real *up = u + pc[p].col, *wp = wt + pc[p].off;
                qt_real *pp = pr + pc[p].off, *cp = cr + pc[p].off;
                const int64_t n = pc[p].n;
                int64_t i = 0;
                for (; i + QT_GC_L <= n; i += QT_GC_L) {
                    qt_gc_v acc = {0};
                    for (int64_t j = j0; j < K; j++)
                        acc += qt_gc_ld(wp + j * cw + i) * qt_gc_ld(up + (j - j0) * wq + i);
                    qt_gc_st(pp + i, acc);
                    qt_gc_st(cp + i, qt_gc_silu(acc));
                }
                for (; i < n; i++) {
                    qt_real acc = QT_R(0.0);
                    for (int64_t j = j0; j < K; j++) acc += wp[j * cw + i] * up[(j - j0) * wq + i];
                    pp[i] = acc;
                    cp[i] = QT_SILU(acc);
                }
            }
        }
    }
}

void QT_FN(qt_gdn_conv_bwd_pos)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                                const qt_real *restrict dc, const qt_real *restrict w,
                                const int32_t *restrict pos, int64_t b, int64_t S,
                                int64_t hk, int64_t dk, int64_t hv, int64_t dv, int64_t K)
{
    if (K < 1 || K > QT_GDN_CONV_KMAX) {
        QT_FN(qt_gdn_conv_bwd_ref_pos)(dqkvz, pre, dc, w, pos, b, S, hk, dk, hv, dv, K);
        return;
    }
    const int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    qt_real wt[QT_GDN_CONV_TILE];
    qt_real ring[QT_GDN_CONV_TILE]; /* dpre of row t at ring[(t % K) * cw] */
    qt_gdn_conv_piece pc[QT_GDN_CONV_PMAX];
    for (int64_t ca = 0, cb; ca < cc; ca = cb) {
        const int np = qt_gdn_conv_chunk(pc, ca, QT_GDN_CONV_TILE / K, hk, dk, hv, dv, &cb);
        const int64_t cw = cb - ca;
        qt_gdn_conv_transpose(wt, (qt_real *)w, ca, cw, K, 0);
        for (int64_t s = 0; s < b; s++) {
            const qt_real *ps = pre + s * S * cc + ca, *gs = dc + s * S * cc + ca;
            const int32_t *pp = pos ? pos + s * S : NULL;
            for (int64_t t = 0; t < K - 1 && t < S; t++)
                qt_gdn_conv_dpre_row(ring + (t % K) * cw, ps + t * cc, gs + t * cc, cw);
            for (int64_t tu = 0; tu < S; tu++) {
                const int64_t tn = tu + K - 1;
                if (tn < S)
                    qt_gdn_conv_dpre_row(ring + (tn % K) * cw, ps + tn * cc, gs + tn * cc, cw);
                /* output token t = tu + K-1-j saw this input through tap j; the taps the
                 * reference keeps, in its order (j increasing) */
                const qt_real *dj[QT_GDN_CONV_KMAX];
                int64_t jj[QT_GDN_CONV_KMAX], nk = 0;
                for (int64_t j = 0; j < K; j++) {
                    int64_t t = tu + K - 1 - j;
                    if (t >= S || (pp && t - pp[t] > tu)) continue;
                    dj[nk] = ring + (t % K) * cw;
                    jj[nk++] = j * cw;
                }
                qt_real *du = dqkvz + (s * S + tu) * wq;
                for (int p = 0; p < np; p++) {
                    const int64_t off = pc[p].off, n = pc[p].n;
                    qt_real *dp = du + pc[p].col;
                    const qt_real *wp = wt + off;
                    int64_t i = 0;
                    for (; i + QT_GC_L <= n; i += QT_GC_L) {
                        qt_gc_v acc = {0};
                        for (int64_t k = 0; k < nk; k++)
                            acc += qt_gc_ld(dj[k] + off + i) * qt_gc_ld(wp + jj[k] + i);
                        qt_gc_st(dp + i, qt_gc_ld(dp + i) + acc);
                    }
                    for (; i < n; i++) {
                        qt_real acc = QT_R(0.0);
                        for (int64_t k = 0; k < nk; k++) acc += dj[k][off + i] * wp[jj[k] + i];
                        dp[i] += acc;
                    }
                }
            }
        }
    }
}

void QT_FN(qt_gdn_conv_wgrad_rows_pos)(qt_real *restrict dw, const qt_real *restrict pre,
                                       const qt_real *restrict dc,
                                       const qt_real *restrict qkvz,
                                       const int32_t *restrict pos, int64_t t0, int64_t t1,
                                       int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                       int64_t K)
{
    if (K < 1 || K > QT_GDN_CONV_KMAX) {
        QT_FN(qt_gdn_conv_wgrad_rows_ref_pos)(dw, pre, dc, qkvz, pos, t0, t1, hk, dk, hv, dv,
                                              K);
        return;
    }
    const int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    qt_real dp[QT_GDN_CONV_TILE];
    /* acc[j*cw + i] carries dw[ca+i, j] through the token loop: the same chain of += as
     * adding into dw directly, t increasing. */
    qt_real acc[QT_GDN_CONV_TILE];
    qt_gdn_conv_piece pc[QT_GDN_CONV_PMAX];
    for (int64_t ca = 0, cb; ca < cc; ca = cb) {
        const int np = qt_gdn_conv_chunk(pc, ca, QT_GDN_CONV_TILE / K, hk, dk, hv, dv, &cb);
        const int64_t cw = cb - ca;
        qt_gdn_conv_transpose(acc, dw, ca, cw, K, 0);
        for (int64_t t = t0; t < t1; t++) {
            qt_gdn_conv_dpre_row(dp, pre + t * cc + ca, dc + t * cc + ca, cw);
            const int64_t lo = pos ? t - pos[t] : 0;
            /* taps j >= j0 read tokens t-K+1+j >= lo: the reference's, in its order */
            const int64_t j0 = lo - (t - K + 1) > 0 ? lo - (t - K + 1) : 0;
            const qt_real *u = qkvz + (t - K + 1 + j0) * wq;
            for (int64_t j = j0; j < K; j++) {
                const qt_real *uj = u + (j - j0) * wq;
                qt_real *aj = acc + j * cw;
                for (int p = 0; p < np; p++) {
                    const int64_t off = pc[p].off, n = pc[p].n;
                    const qt_real *up = uj + pc[p].col, *d = dp + off;
                    qt_real *a = aj + off;
                    int64_t i = 0;
                    for (; i + QT_GC_L <= n; i += QT_GC_L)
                        qt_gc_st(a + i, qt_gc_ld(a + i) + qt_gc_ld(d + i) * qt_gc_ld(up + i));
                    for (; i < n; i++) a[i] += d[i] * up[i];
                }
            }
        }
        qt_gdn_conv_transpose(acc, dw, ca, cw, K, 1);
    }
}

/* The whole sequence: rows [0, S). */
void QT_FN(qt_gdn_conv_wgrad)(qt_real *restrict dw, const qt_real *restrict pre,
                              const qt_real *restrict dc, const qt_real *restrict qkvz,
                              int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                              int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows)(dw, pre, dc, qkvz, 0, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_wgrad_ref)(qt_real *restrict dw, const qt_real *restrict pre,
                                  const qt_real *restrict dc, const qt_real *restrict qkvz,
                                  int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                  int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows_ref)(dw, pre, dc, qkvz, 0, S, hk, dk, hv, dv, K);
}

/* The unpacked entry points: every token of a sequence is one document (pos NULL). */
void QT_FN(qt_gdn_conv_fwd)(qt_real *restrict c, qt_real *restrict pre,
                            const qt_real *restrict qkvz, const qt_real *restrict w,
                            int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_fwd_pos)(c, pre, qkvz, w, NULL, b, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_bwd)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                            const qt_real *restrict dc, const qt_real *restrict w,
                            int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_bwd_pos)(dqkvz, pre, dc, w, NULL, b, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_bwd_ref)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                                const qt_real *restrict dc, const qt_real *restrict w,
                                int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                                int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_bwd_ref_pos)(dqkvz, pre, dc, w, NULL, b, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_wgrad_rows)(qt_real *restrict dw, const qt_real *restrict pre,
                                   const qt_real *restrict dc, const qt_real *restrict qkvz,
                                   int64_t t0, int64_t t1, int64_t hk, int64_t dk,
                                   int64_t hv, int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows_pos)(dw, pre, dc, qkvz, NULL, t0, t1, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_wgrad_rows_ref)(qt_real *restrict dw, const qt_real *restrict pre,
                                       const qt_real *restrict dc,
                                       const qt_real *restrict qkvz, int64_t t0, int64_t t1,
                                       int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                       int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows_ref_pos)(dw, pre, dc, qkvz, NULL, t0, t1, hk, dk, hv, dv, K);
}
