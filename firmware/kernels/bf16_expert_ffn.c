/* bf16_expert_ffn.c - the routed expert SwiGLU FFN on bf16 (contract and rounding points:
 * bf16_expert_ffn.h).
 * Invariants: an expert's rows are visited in increasing r = t*k + slot, gathered by row
 * lists (row numbers stored as floats, exact below 2^24); the pointwise SwiGLU expressions
 * are the fp32 kernel's (expert_ffn.c) on widened bf16 values, so forward, backward and
 * wgrad compute h and dgu with the same bits; dx[t] receives its slots in slot order (the
 * expert-major path parks each row's fp32 contribution and adds them per token; the
 * slot-major path adds them slot by slot: the same per-element add sequence). Gathered bf16
 * rows of a width that is a multiple of 1024 are padded by a line (qt_bx_ld; the padding is
 * never read); with canonical blocks (nb > 0) y and the parked dx rows are written in place
 * through the row list (bf16_matmul_canon.h _ld_on): strides and maps never change a bit.
 * Every scratch region keeps one element type (fp32 or bf16) for the whole call, except that
 * the wgrad chunk lends free scratch to its matmuls' packed operand (bf16 pairs as 32-bit
 * words, written and read only inside the bf16_matmul.c call): dW_down's from dh on, before
 * dh and dgu are written; dW_gu's past the chunk's dgu rows. No heap, no VLA.
 */
#ifndef QT_REAL_DOUBLE
#include <string.h>
#include "bf16_expert_ffn.h"
#include "expert_ffn.h"
#include "bf16_matmul.h"
#include "bf16_matmul_canon.h"
#include "qt_real.h"

#define QT_BX_MAX_ROWS ((int64_t)1 << 24)

/* Floats holding n bf16 elements. */
static int64_t qt_bx_h(int64_t n) { return (n + 1) / 2; }

static qt_bf16 *qt_bx_b16(float *p) { return (qt_bf16 *)(void *)p; }

static void qt_bx_poison(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = qt_bf16_f32_bits(0x7fc00000u);
}

static void qt_bx_zero(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = 0.0f;
}

/* list[0..*n) <- the next rows r >= r0 (at most cap) with idx[r] == e and, when slot >= 0,
 * r % k == slot, increasing. Returns the end of the scan. */
static int64_t qt_bx_next(float *list, int64_t *n, const int32_t *idx, int64_t k, int32_t e,
                          int64_t slot, int64_t r0, int64_t R, int64_t cap)
{
    int64_t r = r0, cnt = 0;
    for (; r < R && cnt < cap; r++)
        if (idx[r] == e && (slot < 0 || r % k == slot)) list[cnt++] = (float)r;
    *n = cnt;
    return r;
}

/* Fetch the n bf16 at p into the caches (the next scattered row of a row loop: its first
 * lines would otherwise wait on memory one by one). */
static void qt_bx_prefetch(const qt_bf16 *p, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32) __builtin_prefetch(p + i);
}

/* The row stride of gathered bf16 rows of `width` elements: a width of a multiple of 1024
 * (a 2 or 4 KiB stride: d = 2048 put a matmul tile's 12 rows in one L1 set, 12 lines for its
 * 8 ways) gets one 64-byte line more; other widths are kept (the scratch of small shapes
 * is not stretched). */
static int64_t qt_bx_ld(int64_t width) { return width % 1024 ? width : width + 32; }

/* dst[n, ld] <- rows of src (row r/k when per_token, else r, for r = list[j]); the ld -
 * width padding elements are not written. */
static void qt_bx_gather_ld(qt_bf16 *dst, int64_t ld, const qt_bf16 *src, int64_t width,
                            int per_token, const float *list, int64_t n, int64_t k)
{
    for (int64_t j = 0; j < n; j++) {
        const int64_t r = (int64_t)list[j];
        if (j + 1 < n)
            qt_bx_prefetch(src + (per_token ? (int64_t)list[j + 1] / k : (int64_t)list[j + 1]) *
                                     width, width);
        memcpy(dst + j * ld, src + (per_token ? r / k : r) * width,
               (size_t)width * sizeof(qt_bf16));
    }
}

/* dst[n,width] <- rows of src (row r/k when per_token, else r, for r = list[j]). */
static void qt_bx_gather(qt_bf16 *dst, const qt_bf16 *src, int64_t width, int per_token,
                         const float *list, int64_t n, int64_t k)
{
    qt_bx_gather_ld(dst, width, src, width, per_token, list, n, k);
}

/* The pointwise SwiGLU passes compute runs of QT_BX_RUN fp32 results in a stack buffer (a
 * loop gcc vectorises, the inline math included) and round each run with qt_bf16_from_f32_n
 * (sixteen lanes per instruction, bf16.h): the same expression, one rounding per element. */
#define QT_BX_RUN 256

/* h[n,f] = bf16(silu(gate) * up), gate and up widened from gu's rows list[0..n). */
static void qt_bx_swiglu(qt_bf16 *h, const qt_bf16 *gu, const float *list, int64_t n,
                         int64_t f)
{
    float t[QT_BX_RUN];
    for (int64_t j = 0; j < n; j++) {
        const qt_bf16 *g = gu + (int64_t)list[j] * 2 * f;
        if (j + 1 < n) qt_bx_prefetch(gu + (int64_t)list[j + 1] * 2 * f, 2 * f);
        for (int64_t i0 = 0; i0 < f; i0 += QT_BX_RUN) {
            const int64_t m = f - i0 < QT_BX_RUN ? f - i0 : QT_BX_RUN;
            for (int64_t i = 0; i < m; i++) {
                const float a = qt_f32_from_bf16(g[i0 + i]), u = qt_f32_from_bf16(g[f + i0 + i]);
                t[i] = QT_SILU(a) * u;
            }
            qt_bf16_from_f32_n(h + j * f + i0, t, m);
        }
    }
}

/* dg[n,2f] (row stride ldg) = bf16(d gate, d up) from dh[n,f] (fp32) and gu's rows
 * list[0..n) widened: d gate = (dh*u) * (sg*(1 + a*(1 - sg))), d up = dh*silu(a)
 * (expert_ffn.c's expressions). */
static void qt_bx_swiglu_bwd(qt_bf16 *dg, int64_t ldg, const float *dh, const qt_bf16 *gu,
                             const float *list, int64_t n, int64_t f)
{
    float tg[QT_BX_RUN], tu[QT_BX_RUN];
    for (int64_t j = 0; j < n; j++) {
        const qt_bf16 *g = gu + (int64_t)list[j] * 2 * f;
        if (j + 1 < n) qt_bx_prefetch(gu + (int64_t)list[j + 1] * 2 * f, 2 * f);
        for (int64_t i0 = 0; i0 < f; i0 += QT_BX_RUN) {
            const int64_t m = f - i0 < QT_BX_RUN ? f - i0 : QT_BX_RUN;
            for (int64_t ii = 0; ii < m; ii++) {
                const int64_t i = i0 + ii;
                const float a = qt_f32_from_bf16(g[i]), u = qt_f32_from_bf16(g[f + i]);
                const float gr = dh[j * f + i];
                const float sg = QT_SIGMOID(a);
                tg[ii] = (gr * u) * (sg * (1.0f + a * (1.0f - sg)));
                tu[ii] = gr * QT_SILU(a);
            }
            qt_bf16_from_f32_n(dg + j * ldg + i0, tg, m);
            qt_bf16_from_f32_n(dg + j * ldg + f + i0, tu, m);
        }
    }
}

/* ------------------------------------------------------------------ forward */
int qt_bf16_expert_ffn_fwd_on(int path, float *y, qt_bf16 *gu, const qt_bf16 *x,
                              const int32_t *idx, const qt_bf16 *w_gu, const qt_bf16 *w_down,
                              float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                              int64_t f, int64_t scratch_elems, int64_t nb)
{
    if (!qt_bf16_path_built(path)) return -1;
    /* per row: list 1, X (bf16 d), C/Y (fp32 max(2f, d)), H (bf16 f), canonical
     * partials and packs nb*d + f/nb; fixed: the packed weight block d*(f/nb) */
    const int64_t R = T * k, cy = 2 * f > d ? 2 * f : d, ldx = qt_bx_ld(d);
    const int64_t row = 1 + qt_bx_h(ldx) + cy + qt_bx_h(f) + (nb > 0 ? nb * d + f / nb : 0);
    const int64_t fixed = nb > 0 ? d * (f / nb) : 0;
    const int64_t cap = scratch_elems > fixed ? (scratch_elems - fixed) / row : 0;
    if (cap < 1 || R > QT_BX_MAX_ROWS) { qt_bx_poison(y, R * d); return 0; }
    float *list = scratch, *C = list + cap + cap * qt_bx_h(ldx);
    qt_bf16 *X = qt_bx_b16(list + cap), *H = qt_bx_b16(C + cap * cy);
    float *K = C + cap * cy + cap * qt_bx_h(f);
    for (int32_t e = 0; e < E; e++) {
        const qt_bf16 *wg = w_gu + (int64_t)e * 2 * f * d, *wd = w_down + (int64_t)e * d * f;
        for (int64_t r0 = 0, r1, n; r0 < R; r0 = r1) {
            r1 = qt_bx_next(list, &n, idx, k, e, -1, r0, R, cap);
            if (n == 0) break;
            qt_bx_gather_ld(X, ldx, x, d, 1, list, n, k);
            qt_bf16_matmul_fwd_ld_on(path, C, 2 * f, X, ldx, wg, n, 2 * f, d);
            for (int64_t j = 0; j < n; j++) { /* gu rounded: the stored value is h's input */
                qt_bf16 *g = gu + (int64_t)list[j] * 2 * f;
                if (qt_bf16_from_f32_insn(g, C + j * 2 * f, 2 * f) != 0) /* the same bits */
                    for (int64_t i = 0; i < 2 * f; i++) g[i] = qt_bf16_from_f32(C[j * 2 * f + i]);
            }
            qt_bx_swiglu(H, gu, list, n, f);
            if (nb > 0) /* y's rows written in place */
                qt_bf16_matmul_canon_fwd_ld_on(path, y, d, list, H, f, wd, n, d, f, 1, nb, K);
            else { /* the plain chain */
                qt_bf16_matmul_fwd_on(path, C, H, wd, n, d, f);
                for (int64_t j = 0; j < n; j++)
                    memcpy(y + (int64_t)list[j] * d, C + j * d, (size_t)d * sizeof(float));
            }
        }
    }
    return 0;
}

void qt_bf16_expert_ffn_fwd(float *y, qt_bf16 *gu, const qt_bf16 *x, const int32_t *idx,
                            const qt_bf16 *w_gu, const qt_bf16 *w_down, float *scratch,
                            int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                            int64_t scratch_elems, int64_t nb)
{
    qt_bf16_expert_ffn_fwd_on(qt_bf16_mm_path(), y, gu, x, idx, w_gu, w_down, scratch, T, k, E, d,
                              f, scratch_elems, nb);
}

/* ------------------------------------------------------------------ backward */
/* The chunk buffers of cap rows: DY (bf16 d, row stride qt_bx_ld(d)), DH/A (fp32 max(f, d):
 * dh, then the dx rows), DG (bf16 2f, row stride qt_bx_ld(2f)), K (canonical scratch). */
typedef struct {
    qt_bf16 *dyb, *dgb;
    float *dha, *K;
} qt_bx_bufs;

static int64_t qt_bx_bwd_row(int64_t d, int64_t f, int64_t nb)
{
    return qt_bx_h(qt_bx_ld(d)) + (f > d ? f : d) + qt_bx_h(qt_bx_ld(2 * f)) +
           (nb > 0 ? nb * d + 2 * f / nb : 0);
}

static qt_bx_bufs qt_bx_bwd_bufs(float *p, int64_t cap, int64_t d, int64_t f)
{
    qt_bx_bufs b;
    b.dyb = qt_bx_b16(p);
    b.dha = p + cap * qt_bx_h(qt_bx_ld(d));
    b.dgb = qt_bx_b16(b.dha + cap * (f > d ? f : d));
    b.K = b.dha + cap * (f > d ? f : d) + cap * qt_bx_h(qt_bx_ld(2 * f));
    return b;
}

/* The data-gradient rows of list[0..n) (expert e's weights wg, wd) into b->dha[n,d] (fp32,
 * written), or with out != NULL (and nb > 0) into out's rows list[j] (row stride d); dgu
 * rows stored when dgu != NULL. */
static void qt_bx_bwd_chunk(int path, const qt_bx_bufs *b, float *out, qt_bf16 *dgu,
                            const qt_bf16 *dy, const qt_bf16 *gu, const qt_bf16 *wg,
                            const qt_bf16 *wd, const float *list, int64_t n, int64_t k,
                            int64_t d, int64_t f, int64_t nb)
{
    const int64_t ldy = qt_bx_ld(d), ldg = qt_bx_ld(2 * f);
    qt_bx_gather_ld(b->dyb, ldy, dy, d, 0, list, n, k);
    qt_bf16_matmul_bwd_data_z_ld_on(path, b->dha, f, b->dyb, ldy, wd, n, d, f); /* (+0) + chain */
    qt_bx_swiglu_bwd(b->dgb, ldg, b->dha, gu, list, n, f);
    if (dgu)
        for (int64_t j = 0; j < n; j++)
            memcpy(dgu + (int64_t)list[j] * 2 * f, b->dgb + j * ldg, (size_t)(2 * f) * 2);
    /* nb 0 / 1: (+0) + the plain chain over 2f; else the canonical tree, 2 parts */
    qt_bf16_matmul_canon_bwd_data_ld_on(path, out ? out : b->dha, d, out ? list : 0, b->dgb, ldg,
                                        wg, n, 2 * f, d, 2, nb, b->K);
}

/* Slot-major: for each slot, every expert's rows of that slot, added into dx directly. */
static void qt_bx_bwd_slots(int path, float *dx, qt_bf16 *dgu, const qt_bf16 *dy,
                            const int32_t *idx, const qt_bf16 *gu, const qt_bf16 *w_gu,
                            const qt_bf16 *w_down, float *scratch, int64_t T, int64_t k,
                            int64_t E, int64_t d, int64_t f, int64_t cap, int64_t nb)
{
    float *list = scratch;
    const qt_bx_bufs b = qt_bx_bwd_bufs(scratch + cap, cap, d, f);
    for (int64_t slot = 0; slot < k; slot++)
        for (int32_t e = 0; e < E; e++) {
            const qt_bf16 *wg = w_gu + (int64_t)e * 2 * f * d;
            const qt_bf16 *wd = w_down + (int64_t)e * d * f;
            for (int64_t r0 = 0, r1, n; r0 < T * k; r0 = r1) {
                r1 = qt_bx_next(list, &n, idx, k, e, slot, r0, T * k, cap);
                if (n == 0) break;
                qt_bx_bwd_chunk(path, &b, 0, dgu, dy, gu, wg, wd, list, n, k, d, f, nb);
                for (int64_t j = 0; j < n; j++) {
                    float *dst = dx + ((int64_t)list[j] / k) * d;
                    for (int64_t i = 0; i < d; i++) dst[i] += b.dha[j * d + i];
                }
            }
        }
}

int qt_bf16_expert_ffn_bwd_on(int path, float *dx, qt_bf16 *dgu, const qt_bf16 *dy,
                              const int32_t *idx, const qt_bf16 *gu, const qt_bf16 *w_gu,
                              const qt_bf16 *w_down, float *scratch, int64_t T, int64_t k,
                              int64_t E, int64_t d, int64_t f, int64_t scratch_elems,
                              int64_t nb)
{
    if (!qt_bf16_path_built(path)) return -1;
    const int64_t row = qt_bx_bwd_row(d, f, nb), fixed = nb > 0 ? d * (2 * f / nb) : 0;
    const int64_t R = T * k, head = R + (E + 1) + R * d + fixed;
    const int64_t capx = head < scratch_elems && R <= QT_BX_MAX_ROWS
                             ? (scratch_elems - head) / row : 0;
    if (capx < 1) {
        const int64_t cap = scratch_elems > fixed ? (scratch_elems - fixed) / (row + 1) : 0;
        if (cap < 1 || R > QT_BX_MAX_ROWS) { qt_bx_poison(dx, T * d); return 0; }
        qt_bx_bwd_slots(path, dx, dgu, dy, idx, gu, w_gu, w_down, scratch, T, k, E, d, f, cap,
                        nb);
        return 0;
    }
    float *list = scratch, *off = list + R, *Dx = off + E + 1;
    const qt_bx_bufs b = qt_bx_bwd_bufs(Dx + R * d, capx, d, f);
    qt_expert_ffn_lists(list, off, idx, R, E);
    for (int64_t e = 0; e < E; e++) {
        const qt_bf16 *wg = w_gu + e * 2 * f * d, *wd = w_down + e * d * f;
        const int64_t end = (int64_t)off[e + 1];
        for (int64_t j0 = (int64_t)off[e]; j0 < end; j0 += capx) {
            const int64_t n = end - j0 < capx ? end - j0 : capx;
            qt_bx_bwd_chunk(path, &b, nb > 0 ? Dx : 0, dgu, dy, gu, wg, wd, list + j0, n, k, d,
                            f, nb); /* nb > 0: Dx's rows written in place */
            for (int64_t j = 0; nb == 0 && j < n; j++) {
                float *dst = Dx + (int64_t)list[j0 + j] * d;
                for (int64_t i = 0; i < d; i++) dst[i] = b.dha[j * d + i];
            }
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t slot = 0; slot < k; slot++) {
            const int32_t e = idx[t * k + slot];
            if (e < 0 || e >= E) continue;
            const float *src = Dx + (t * k + slot) * d;
            for (int64_t i = 0; i < d; i++) dx[t * d + i] += src[i];
        }
    return 0;
}

void qt_bf16_expert_ffn_bwd(float *dx, qt_bf16 *dgu, const qt_bf16 *dy, const int32_t *idx,
                            const qt_bf16 *gu, const qt_bf16 *w_gu, const qt_bf16 *w_down,
                            float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                            int64_t f, int64_t scratch_elems, int64_t nb)
{
    qt_bf16_expert_ffn_bwd_on(qt_bf16_mm_path(), dx, dgu, dy, idx, gu, w_gu, w_down, scratch, T, k,
                              E, d, f, scratch_elems, nb);
}

/* ------------------------------------------------------------------ weight gradient */
static void qt_bx_dp(int path, float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    if (path == QT_BF16_PATH_EMUL) qt_bf16_dp_emul(acc, a, b, n);
    else if (path == QT_BF16_PATH_INSN) qt_bf16_dp_insn(acc, a, b, n);
    else if (path == QT_BF16_PATH_WIDE) qt_bf16_dp(acc, a, b, n); /* a matmul path: the build's step */
    else qt_bf16_dp_ref(acc, a, b, n);
}

/* acc[N,K] continues its chains over the rows of a[n,N], b[n,K] in pairs (2q, 2q+1), hi
 * first (odd n: the last pair's hi element +0): acc[c,i] = step(a[m,c], b[m,i], acc[c,i]),
 * bf16_matmul.h's wgrad order. pa, pb: 2K bf16 each (written). */
static void qt_bx_chain_rows(int path, float *acc, const qt_bf16 *a, const qt_bf16 *b,
                             int64_t n, int64_t N, int64_t K, qt_bf16 *pa, qt_bf16 *pb)
{
    for (int64_t q = 0; 2 * q < n; q++) {
        const int hi = 2 * q + 1 < n;
        for (int64_t i = 0; i < K; i++) {
            pb[2 * i] = b[2 * q * K + i];
            pb[2 * i + 1] = hi ? b[(2 * q + 1) * K + i] : 0;
        }
        for (int64_t c = 0; c < N; c++) {
            const qt_bf16 lo = a[2 * q * N + c], h = hi ? a[(2 * q + 1) * N + c] : 0;
            for (int64_t i = 0; i < K; i++) pa[2 * i] = lo, pa[2 * i + 1] = h;
            qt_bx_dp(path, acc + c * K, pa, pb, K);
        }
    }
}

/* The wgrad matmuls' finish on a continued chain: (+0) + acc, every NaN 0x7fc00000; with a
 * carry cy (p = cy->dst), then the carry's additions (qt_leaf_carry.h: r = add[l][e] + r,
 * l = 0..n-1), as bf16_matmul.c's finish. zero: the chain is empty (+0), p not read. */
static void qt_bx_finish(float *p, int64_t n, const qt_leaf_carry *cy, int zero)
{
    for (int64_t i = 0; i < n; i++) {
        float r = 0.0f + (zero ? 0.0f : p[i]);
        r = r != r ? qt_bf16_f32_bits(0x7fc00000u) : r;
        if (cy)
            for (int32_t l = 0; l < cy->n; l++) r = cy->add[l][i] + r;
        p[i] = r;
    }
}

/* cy restricted to the elements [off, ...) of its parameter (one expert's slice). */
static qt_leaf_carry qt_bx_carry_slice(const qt_leaf_carry *cy, int64_t off)
{
    qt_leaf_carry s;
    s.n = cy->n;
    for (int32_t l = 0; l < cy->n; l++) s.add[l] = cy->add[l] + off;
    s.dst = cy->dst + off;
    return s;
}

typedef struct {
    float *list, *dh, *K; /* K: the chain packs (2 max(d, f) floats) */
    qt_bf16 *dx, *h, *dg; /* dy rows, then x rows; h; dgu */
    int64_t ngu, ndown;   /* the whole weights' sizes (E*2f*d, E*d*f) */
    int64_t cap;          /* rows per chunk */
    float *end;           /* the scratch's end (the matmuls pack A into dh.. or past dg's rows) */
    int stream;           /* a carried slice may stream (by the whole weight's size) */
} qt_bx_wbufs;

/* p rounded up to 64 bytes. */
static float *qt_bx_align16(float *p)
{
    return p + ((16 - (int64_t)(((uintptr_t)p / sizeof(float)) & 15)) & 15);
}

/* One chunk of expert e's rows list[0..n): dw_down and dw_gu written from (+0) by the
 * wgrad matmul (whole: 1; with the carries cg, cd when not NULL: their slices' dst, at dwg
 * and dwd, receive the carries instead) or their chains continued in place (chained: 0). */
static void qt_bx_wgrad_chunk(int path, int whole, const qt_bx_wbufs *b, float *dwg,
                              float *dwd, const qt_leaf_carry *cg, const qt_leaf_carry *cd,
                              const qt_bf16 *dy, const qt_bf16 *x, const qt_bf16 *gu,
                              const qt_bf16 *dgu, const qt_bf16 *wd, int64_t n, int64_t k,
                              int64_t d, int64_t f)
{
    qt_bf16 *pa = qt_bx_b16(b->K), *pb = pa + 2 * (d > f ? d : f);
    qt_bx_gather(b->dx, dy, d, 0, b->list, n, k);
    qt_bx_swiglu(b->h, gu, b->list, n, f);
    /* the whole chunk's matmuls pack dy^T / dgu^T once into free scratch: dW_down's from dh
     * on (dh and dgu are written after it), dW_gu's past the chunk's dgu rows */
    float *ws = qt_bx_align16(b->dh);
    int64_t ws_n = b->end - ws;
    /* a carried slice streams when the whole weight does (the level is read again only after
     * the other experts' slices and more leaves have passed through the caches) */
    if (whole)
        qt_bf16_matmul_wgrad_ws_on(path, dwd, cd, b->dx, b->h, n, d, f,
                                   b->stream && qt_bf16_matmul_wgrad_carry_stream(b->ndown),
                                   ws_n > 0 ? ws : 0, ws_n);
    else qt_bx_chain_rows(path, dwd, b->dx, b->h, n, d, f, pa, pb);
    if (dgu) {
        qt_bx_gather(b->dg, dgu, 2 * f, 0, b->list, n, k);
    } else { /* recomputed: dh = (+0) + dy W_down chain, then rounded as the backward */
        qt_bf16_matmul_bwd_data_z_ld_on(path, b->dh, f, b->dx, d, wd, n, d, f);
        qt_bx_swiglu_bwd(b->dg, 2 * f, b->dh, gu, b->list, n, f);
    }
    qt_bx_gather(b->dx, x, d, 1, b->list, n, k);
    ws = qt_bx_align16(b->dh + (b->cap + n) * f), ws_n = b->end - ws;
    if (whole)
        qt_bf16_matmul_wgrad_ws_on(path, dwg, cg, b->dg, b->dx, n, 2 * f, d,
                                   b->stream && qt_bf16_matmul_wgrad_carry_stream(b->ngu),
                                   ws_n > 0 ? ws : 0, ws_n);
    else qt_bx_chain_rows(path, dwg, b->dg, b->dx, n, 2 * f, d, pa, pb);
}

/* The chunk buffers in scratch (b->cap rows; 0 when not even one row fits). */
static void qt_bx_wbufs_make(qt_bx_wbufs *b, float *scratch, int64_t E, int64_t d, int64_t f,
                             int64_t scratch_elems)
{
    /* per row: list 1, dy/x (bf16 d), h (bf16 f), dh (fp32 f), dgu (bf16 2f) */
    const int64_t row = 1 + qt_bx_h(d) + qt_bx_h(f) + 2 * f;
    const int64_t fixed = 2 * (d > f ? d : f);
    const int64_t cap = scratch_elems > fixed ? (scratch_elems - fixed) / row : 0;
    b->K = scratch;
    b->list = scratch + fixed;
    b->dx = qt_bx_b16(b->list + cap);
    b->h = qt_bx_b16(b->list + cap + cap * qt_bx_h(d));
    b->dh = b->list + cap + cap * (qt_bx_h(d) + qt_bx_h(f));
    b->dg = qt_bx_b16(b->dh + cap * f);
    b->ngu = E * 2 * f * d, b->ndown = E * d * f;
    b->cap = cap;
    b->end = scratch + scratch_elems;
    b->stream = 1;
}

/* The largest number of rows of one expert among the T*k rows of idx. */
static int64_t qt_bx_max_rows(const int32_t *idx, int64_t R, int64_t E)
{
    int64_t nmax = 0;
    for (int32_t e = 0; e < E; e++) {
        int64_t ne = 0;
        for (int64_t r = 0; r < R; r++) ne += idx[r] == e;
        nmax = ne > nmax ? ne : nmax;
    }
    return nmax;
}

/* Expert e's slices of one leaf: dw_gu / dw_down written, or (c_gu not NULL) the carries'
 * slices stored (an expert whose rows exceed the cap: its chain continued in the slices,
 * then finished). Returns 1 when its rows exceed the cap and not even one pair of rows fits
 * (nothing written: the caller poisons or refuses). */
static int qt_bx_wgrad_expert(int path, const qt_bx_wbufs *b, int32_t e, float *dw_gu,
                              float *dw_down, const qt_leaf_carry *c_gu,
                              const qt_leaf_carry *c_down, const qt_bf16 *dy, const qt_bf16 *x,
                              const int32_t *idx, const qt_bf16 *gu, const qt_bf16 *dgu,
                              const qt_bf16 *w_down, int64_t T, int64_t k, int64_t d, int64_t f)
{
    const int carry = c_gu != 0;
    const int64_t R = T * k, cap = b->cap;
    float *dwg = dw_gu + (int64_t)e * 2 * f * d, *dwd = dw_down + (int64_t)e * d * f;
    const qt_bf16 *wd = w_down + (int64_t)e * d * f;
    qt_leaf_carry cg, cd;
    if (carry) {
        cg = qt_bx_carry_slice(c_gu, (int64_t)e * 2 * f * d);
        cd = qt_bx_carry_slice(c_down, (int64_t)e * d * f);
    }
    int64_t ne = 0;
    for (int64_t r = 0; r < R; r++) ne += idx[r] == e;
    if (ne > cap && cap < 2) return 1; /* not even one pair of rows fits */
    if (ne > cap) { qt_bx_zero(dwg, 2 * f * d); qt_bx_zero(dwd, d * f); }
    const int whole = ne <= cap, cw = whole ? cap : cap & ~(int64_t)1;
    for (int64_t r0 = 0, r1, n; r0 < R; r0 = r1) {
        r1 = qt_bx_next(b->list, &n, idx, k, e, -1, r0, R, cw);
        if (n == 0) break;
        qt_bx_wgrad_chunk(path, whole, b, dwg, dwd, carry ? &cg : 0, carry ? &cd : 0, dy, x,
                          gu, dgu, wd, n, k, d, f);
    }
    if (!whole) {
        qt_bx_finish(dwg, 2 * f * d, carry ? &cg : 0, 0);
        qt_bx_finish(dwd, d * f, carry ? &cd : 0, 0);
    }
    if (ne == 0 && carry) { /* the leaf is +0: its carry */
        qt_bx_finish(dwg, 2 * f * d, &cg, 1);
        qt_bx_finish(dwd, d * f, &cd, 1);
    } else if (ne == 0) {
        qt_bx_zero(dwg, 2 * f * d);
        qt_bx_zero(dwd, d * f);
    }
    return 0;
}

/* The weight gradient, writing the leaves dw_gu, dw_down, or (c_gu, c_down not NULL) their
 * carries into c_gu->dst, c_down->dst (the slices of an expert are finished by its last
 * chunk; the chained form keeps its partial chains there). */
static int qt_bx_wgrad(int path, float *dw_gu, float *dw_down, const qt_leaf_carry *c_gu,
                       const qt_leaf_carry *c_down, const qt_bf16 *dy, const qt_bf16 *x,
                       const int32_t *idx, const qt_bf16 *gu, const qt_bf16 *dgu,
                       const qt_bf16 *w_down, float *scratch, int64_t T, int64_t k, int64_t E,
                       int64_t d, int64_t f, int64_t scratch_elems)
{
    if (!qt_bf16_path_built(path)) return -1;
    const int carry = c_gu != 0;
    if (carry) dw_gu = c_gu->dst, dw_down = c_down->dst;
    qt_bx_wbufs b;
    qt_bx_wbufs_make(&b, scratch, E, d, f, scratch_elems);
    /* a carry is refused before anything is written (the caller then writes the leaves) */
    if (carry && qt_bx_max_rows(idx, T * k, E) > b.cap && b.cap < 2) return -1;
    for (int32_t e = 0; e < E; e++)
        if (qt_bx_wgrad_expert(path, &b, e, dw_gu, dw_down, c_gu, c_down, dy, x, idx, gu, dgu,
                               w_down, T, k, d, f)) {
            qt_bx_poison(dw_gu, E * 2 * f * d);
            qt_bx_poison(dw_down, E * d * f);
            return 0;
        }
    return 0;
}

int qt_bf16_expert_ffn_wgrad_leaves_on(int path, const qt_bf16_ffn_leaf *lv, int32_t n,
                                       const qt_bf16 *w_down, float *scratch, int64_t E,
                                       int64_t d, int64_t f, int64_t scratch_elems)
{
    if (!qt_bf16_path_built(path) || n < 1) return -1;
    qt_bx_wbufs b;
    qt_bx_wbufs_make(&b, scratch, E, d, f, scratch_elems);
    for (int32_t s = 0; s < n; s++) { /* refused before anything is written */
        const int carry = lv[s].c_gu != 0;
        if (carry != (lv[s].c_down != 0) || (!carry && (!lv[s].dw_gu || !lv[s].dw_down)))
            return -1;
        if (qt_bx_max_rows(lv[s].idx, lv[s].T * lv[s].k, E) > b.cap && b.cap < 2) return -1;
    }
    /* expert-major: an expert's slices of every leaf, leaf after leaf, so the tree levels'
     * slices a later leaf's carry reads are still in the caches; only the last leaf's carry
     * may stream (the level it writes is read after this call) */
    for (int32_t e = 0; e < E; e++)
        for (int32_t s = 0; s < n; s++) {
            const qt_bf16_ffn_leaf *l = &lv[s];
            b.stream = s == n - 1;
            (void)qt_bx_wgrad_expert(path, &b, e, l->c_gu ? l->c_gu->dst : l->dw_gu,
                                     l->c_gu ? l->c_down->dst : l->dw_down, l->c_gu, l->c_down,
                                     l->dy, l->x, l->idx, l->gu, l->dgu, w_down, l->T, l->k, d,
                                     f); /* the cap was checked above */
        }
    return 0;
}

int qt_bf16_expert_ffn_wgrad_leaves(const qt_bf16_ffn_leaf *lv, int32_t n, const qt_bf16 *w_down,
                                    float *scratch, int64_t E, int64_t d, int64_t f,
                                    int64_t scratch_elems)
{
    return qt_bf16_expert_ffn_wgrad_leaves_on(qt_bf16_mm_path(), lv, n, w_down, scratch, E, d, f,
                                              scratch_elems) == 0;
}

int qt_bf16_expert_ffn_wgrad_on(int path, float *dw_gu, float *dw_down, const qt_bf16 *dy,
                                const qt_bf16 *x, const int32_t *idx, const qt_bf16 *gu,
                                const qt_bf16 *dgu, const qt_bf16 *w_down, float *scratch,
                                int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                int64_t scratch_elems)
{
    return qt_bx_wgrad(path, dw_gu, dw_down, 0, 0, dy, x, idx, gu, dgu, w_down, scratch, T, k,
                       E, d, f, scratch_elems);
}

int qt_bf16_expert_ffn_wgrad_carry_on(int path, const qt_leaf_carry *c_gu,
                                      const qt_leaf_carry *c_down, const qt_bf16 *dy,
                                      const qt_bf16 *x, const int32_t *idx, const qt_bf16 *gu,
                                      const qt_bf16 *dgu, const qt_bf16 *w_down, float *scratch,
                                      int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                      int64_t scratch_elems)
{
    if (!c_gu || !c_down || c_gu->n < 1 || c_gu->n > QT_LEAF_CARRY_MAX || c_down->n < 1 ||
        c_down->n > QT_LEAF_CARRY_MAX)
        return -1;
    return qt_bx_wgrad(path, 0, 0, c_gu, c_down, dy, x, idx, gu, dgu, w_down, scratch, T, k, E,
                       d, f, scratch_elems);
}

int qt_bf16_expert_ffn_wgrad_carry(const qt_leaf_carry *c_gu, const qt_leaf_carry *c_down,
                                   const qt_bf16 *dy, const qt_bf16 *x, const int32_t *idx,
                                   const qt_bf16 *gu, const qt_bf16 *dgu, const qt_bf16 *w_down,
                                   float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                                   int64_t f, int64_t scratch_elems)
{
    return qt_bf16_expert_ffn_wgrad_carry_on(qt_bf16_mm_path(), c_gu, c_down, dy, x, idx, gu,
                                             dgu, w_down, scratch, T, k, E, d, f,
                                             scratch_elems) == 0;
}

void qt_bf16_expert_ffn_wgrad(float *dw_gu, float *dw_down, const qt_bf16 *dy,
                              const qt_bf16 *x, const int32_t *idx, const qt_bf16 *gu,
                              const qt_bf16 *dgu, const qt_bf16 *w_down, float *scratch,
                              int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                              int64_t scratch_elems)
{
    qt_bf16_expert_ffn_wgrad_on(qt_bf16_mm_path(), dw_gu, dw_down, dy, x, idx, gu, dgu, w_down,
                                scratch, T, k, E, d, f, scratch_elems);
}
#endif
