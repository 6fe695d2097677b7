/* coll_steps.c - the steps of the float reduce-scatter and of the all-gather as cursors
 * (coll_steps.h): recursive halving with fixed pairing, the direct exchange summed in the
 * one-rank tree's binary-counter shape for a group that is not a power of two (and the
 * fold of the step form's units, qt_coll_fold_units, in the same shape), recursive
 * doubling (slice bits first on several slices), the ring, the all-to-all-v's pairwise
 * exchange and the units' pairwise exchange (copies only; packed and unpacked through the
 * scratch around each transfer, so the same memory is never sent from and received into
 * while a transfer is posted).
 *
 * Invariants: floats are only ever added here, elementwise, as mine + partner's in the
 * fixed pairing (a perfect pairwise tree over group indices), or in qt_coll_counter_tree's
 * shape; message sizes change how data moves, never which additions happen; the cursor's
 * owner decides only when a step runs, never what it does.
 */
#include <string.h>
#include "coll_steps.h"
#include "qt_comm.h"

#define QT_COLL_F32_MSG (QT_COMM_CHUNK_BYTES / 4)     /* floats per reduce-scatter message */

int qt_coll_pow2(int r)
{
    return r > 0 && (r & (r - 1)) == 0;
}

/* Walk n floats of the blocks first, first+step, first+2*step, ... of buf (blk floats each),
 * starting at element `off` of block number k of that sequence: copy them into dst (pack)
 * or add src into them (add). */
static void qt_coll_pack(const float *buf, int64_t blk, int64_t first, int64_t step, int64_t k,
                         int64_t off, int64_t n, float *dst)
{
    while (n > 0) {
        int64_t take = blk - off < n ? blk - off : n;
        memcpy(dst, buf + (first + k * step) * blk + off, (size_t)take * sizeof(float));
        dst += take;
        n -= take;
        k++;
        off = 0;
    }
}

static void qt_coll_add(float *buf, int64_t blk, int64_t first, int64_t step, int64_t k,
                        int64_t off, int64_t n, const float *src)
{
    while (n > 0) {
        int64_t take = blk - off < n ? blk - off : n;
        float *d = buf + (first + k * step) * blk + off;
        for (int64_t i = 0; i < take; i++) d[i] = d[i] + src[i];
        src += take;
        n -= take;
        k++;
        off = 0;
    }
}

/* The binary-counter tree of the one-rank leaf trees (runtime/qt_tree.h) over R pieces of
 * n floats, p[j] = member j's: the complete aligned subtrees for the set bits of R (each a
 * perfect pairwise tree), then those combined lowest first, acc = higher + acc. The total
 * ends in p[0]. For R a power of two it is the perfect pairwise tree. */
static void qt_coll_counter_tree(float *const *p, int R, int64_t n)
{
    for (int w = 1; w < R; w *= 2)
        for (int j = 0; j + 2 * w <= R; j += 2 * w)
            for (int64_t i = 0; i < n; i++) p[j][i] = p[j][i] + p[j + w][i];
    int start[32], nb = 0;
    for (int b = 30, at = 0; b >= 0; b--)
        if (R & (1 << b)) start[nb++] = at, at += 1 << b;
    for (int k = nb - 2; k >= 0; k--) {
        float *hi = p[start[k]];
        const float *acc = p[start[k + 1]];
        for (int64_t i = 0; i < n; i++) hi[i] = hi[i] + acc[i];
    }
}

void qt_coll_fold_units(float *const *unit, int R, int q, int64_t blk, int idx, float *out)
{
    float *p[QT_COLL_MAX_ANY];
    for (int m = 0; m < R; m++)
        for (int u = 0; u < q; u++) p[m * q + u] = unit[u] + (int64_t)m * blk;
    qt_coll_counter_tree(p, R * q, blk);
    if (p[0] != out + (int64_t)idx * blk)
        memcpy(out + (int64_t)idx * blk, p[0], (size_t)blk * sizeof(float));
}

void qt_coll_cursor_rs(qt_coll_cursor *c, int R, int idx, float *buf, int64_t blk, float *tmp,
                       int64_t tmp_elems)
{
    memset(c, 0, sizeof *c);
    c->reduce = 1;
    c->R = R;
    c->idx = idx;
    c->buf = (char *)buf;
    c->blk = blk;
    c->tmp = tmp;
    /* pow2: half the scratch packs, half receives; else R-1 pieces side by side */
    c->msg = qt_coll_pow2(R) ? tmp_elems / 2 : tmp_elems / (R - 1);
    if (c->msg > QT_COLL_F32_MSG) c->msg = QT_COLL_F32_MSG;
    c->k = 1;
}

void qt_coll_cursor_ag(qt_coll_cursor *c, int R, int idx, void *buf, int64_t blk_bytes,
                       int64_t slow)
{
    memset(c, 0, sizeof *c);
    c->R = R;
    c->idx = idx;
    c->buf = buf;
    c->blk = blk_bytes;
    c->slow = slow;
}

/* Recursive halving, stage s, `done` floats of the stage's kept/sent block sequences
 * already exchanged (same order on both partners: my k-th kept block is the partner's k-th
 * sent block). */
static int qt_coll_rs_pow2_next(qt_coll_cursor *c)
{
    if (((int64_t)1 << c->s) >= c->R) return 0;
    const int64_t bit = (int64_t)1 << c->s, step = bit * 2, blk = c->blk;
    const int partner = (int)(c->idx ^ bit);
    const int64_t send0 = (c->idx & (step - 1)) ^ bit, total = c->R / step * blk;
    const int64_t k = c->done / blk, off = c->done % blk;
    const int64_t n = total - c->done < c->msg ? total - c->done : c->msg;
    const float *buf = (const float *)(void *)c->buf;
    const float *out = buf + (send0 + k * step) * blk + off; /* one block: send in place */
    if (off + n > blk) {
        qt_coll_pack(buf, blk, send0, step, k, off, n, c->tmp);
        out = c->tmp;
    }
    c->x = (qt_coll_step){partner, partner, (const char *)out, (char *)(c->tmp + c->msg),
                          n * 4, n * 4};
    c->stage = c->s;
    return 1;
}

static void qt_coll_rs_pow2_done(qt_coll_cursor *c)
{
    const int64_t bit = (int64_t)1 << c->s, step = bit * 2, blk = c->blk;
    const int64_t keep0 = c->idx & (step - 1), total = c->R / step * blk;
    const int64_t n = c->x.rb / 4;
    qt_coll_add((float *)(void *)c->buf, blk, keep0, step, c->done / blk, c->done % blk, n,
                c->tmp + c->msg);
    c->done += n;
    if (c->done >= total) c->s++, c->done = 0;
}

/* Direct exchange (R not a power of two): for each piece of `msg` floats of my block, step
 * k = 1..R-1 sends member idx+k its part and receives member idx-k's into scratch slot k-1;
 * after the last, the R parts are summed in the binary-counter shape over member order. */
static int qt_coll_rs_any_next(qt_coll_cursor *c)
{
    if (c->off >= c->blk) return 0;
    const int R = c->R, idx = c->idx;
    const int64_t n = c->blk - c->off < c->msg ? c->blk - c->off : c->msg;
    const int dst = (idx + c->k) % R, src = (idx + R - c->k) % R;
    const float *buf = (const float *)(void *)c->buf;
    c->x = (qt_coll_step){dst, src, (const char *)(buf + (int64_t)dst * c->blk + c->off),
                          (char *)(c->tmp + (int64_t)(c->k - 1) * n), n * 4, n * 4};
    c->stage = c->k - 1;
    return 1;
}

static void qt_coll_rs_any_done(qt_coll_cursor *c)
{
    const int R = c->R, idx = c->idx;
    if (c->k < R - 1) {
        c->k++;
        return;
    }
    const int64_t n = c->x.rb / 4;
    float *p[QT_COLL_MAX_ANY];
    for (int k = 1; k < R; k++) p[(idx + R - k) % R] = c->tmp + (int64_t)(k - 1) * n;
    p[idx] = (float *)(void *)c->buf + (int64_t)idx * c->blk + c->off;
    qt_coll_counter_tree(p, R, n);
    if (p[0] != p[idx]) memcpy(p[idx], p[0], (size_t)n * sizeof(float));
    c->off += c->msg;
    c->k = 1;
}

/* Recursive doubling: pass 0 the slice bits, pass 1 the others, each ascending; stage
 * `bit` when I hold the blocks j with (j & ~held) == (idx & ~held) sends my held blocks to
 * partner idx ^ bit and receives its held blocks (mine ^ bit), one transfer per contiguous
 * run, both partners walking their runs in ascending order. Pure copies: the order changes
 * the traffic across slices, never a result. */
static int qt_coll_ag_doubling_next(qt_coll_cursor *c)
{
    while (!c->in_stage) {
        if (c->pass >= 2) return 0;
        if (((int64_t)1 << c->s) >= c->R) {
            c->pass++;
            c->s = 0;
            continue;
        }
        const int64_t bit = (int64_t)1 << c->s;
        if (((c->slow & bit) != 0) != (c->pass == 0)) {
            c->s++;
            continue;
        }
        c->in_stage = 1;
        c->sub = 0;
    }
    const int64_t bit = (int64_t)1 << c->s, held = c->held, base = c->idx & ~held;
    const int partner = (int)(c->idx ^ bit);
    /* the run of consecutive held blocks starting at base | sub */
    const int64_t j0 = base | c->sub;
    int64_t len = 1, sub = c->sub, next = (sub - held) & held;
    while (next != 0 && (base | next) == j0 + len) {
        len++;
        sub = next;
        next = (sub - held) & held;
    }
    c->sub_next = next;
    c->x = (qt_coll_step){partner, partner, c->buf + j0 * c->blk, c->buf + (j0 ^ bit) * c->blk,
                          len * c->blk, len * c->blk};
    c->stage = c->s;
    return 1;
}

static void qt_coll_ag_doubling_done(qt_coll_cursor *c)
{
    if (c->sub_next) {
        c->sub = c->sub_next;
        return;
    }
    c->held |= (int64_t)1 << c->s;
    c->s++;
    c->in_stage = 0;
}

/* Ring (R not a power of two): at step k pass on the block that arrived at step k-1. */
static int qt_coll_ag_ring_next(qt_coll_cursor *c)
{
    const int R = c->R, idx = c->idx, k = c->k;
    if (k >= R - 1) return 0;
    const int64_t sb = (idx - k + R) % R, rb = (idx - k - 1 + 2 * R) % R;
    c->x = (qt_coll_step){(idx + 1) % R, (idx + R - 1) % R, c->buf + sb * c->blk,
                          c->buf + rb * c->blk, c->blk, c->blk};
    c->stage = k;
    return 1;
}

void qt_coll_cursor_a2av(qt_coll_cursor *c, int R, int idx, const void *send,
                         const int64_t *scnt, const int64_t *soff, void *recv,
                         const int64_t *rcnt, const int64_t *roff, int64_t eb)
{
    *c = (qt_coll_cursor){.a2a = 1, .R = R, .idx = idx, .k = 1, .a_s = send, .a_r = recv,
                          .scnt = scnt, .soff = soff, .rcnt = rcnt, .roff = roff, .eb = eb};
    if (scnt[idx])
        memmove(c->a_r + roff[idx] * eb, c->a_s + soff[idx] * eb, (size_t)(scnt[idx] * eb));
}

/* All-to-all-v, step k: send to idx + k, receive from idx - k (copies only). */
static int qt_coll_a2av_next(qt_coll_cursor *c)
{
    const int R = c->R, k = c->k;
    if (k >= R) return 0;
    const int dst = (c->idx + k) % R, src = (c->idx - k + R) % R;
    c->x = (qt_coll_step){dst, src, c->a_s + c->soff[dst] * c->eb, c->a_r + c->roff[src] * c->eb,
                          c->scnt[dst] * c->eb, c->rcnt[src] * c->eb};
    c->stage = k;
    return 1;
}

void qt_coll_cursor_units(qt_coll_cursor *c, int R, int idx, float *const *unit, int q,
                          int64_t blk, float *tmp, int64_t msg)
{
    memset(c, 0, sizeof *c);
    c->units = q;
    c->R = R;
    c->idx = idx;
    c->blk = blk;
    c->tmp = tmp;
    c->msg = msg;
    for (int u = 0; u < q; u++) c->unit[u] = unit[u];
}

/* The units' exchange: round k's partner p = (k - idx) mod R, piece at c->off of block p. */
static int qt_coll_units_next(qt_coll_cursor *c)
{
    const int R = c->R, idx = c->idx, q = c->units;
    for (;;) {
        if (c->k >= R) return 0;
        if ((c->k - idx + R) % R != idx && c->off < c->blk) break;
        c->k++;
        c->off = 0;
    }
    const int p = (c->k - idx + R) % R;
    const int64_t n = c->blk - c->off < c->msg ? c->blk - c->off : c->msg;
    for (int u = 0; u < q; u++)
        memcpy(c->tmp + (int64_t)u * n, c->unit[u] + (int64_t)p * c->blk + c->off,
               (size_t)n * sizeof(float));
    c->x = (qt_coll_step){p, p, (const char *)c->tmp, (char *)(c->tmp + (int64_t)q * n),
                          4 * q * n, 4 * q * n};
    c->stage = c->k;
    return 1;
}

static void qt_coll_units_done(qt_coll_cursor *c)
{
    const int R = c->R, p = (c->k - c->idx + R) % R, q = c->units;
    const int64_t n = c->x.rb / 4 / q;
    const float *rcv = c->tmp + (int64_t)q * n;
    for (int u = 0; u < q; u++)
        memcpy(c->unit[u] + (int64_t)p * c->blk + c->off, rcv + (int64_t)u * n,
               (size_t)n * sizeof(float));
    c->off += n;
}

int qt_coll_cursor_next(qt_coll_cursor *c)
{
    const int pow2 = qt_coll_pow2(c->R);
    if (c->units) return qt_coll_units_next(c);
    if (c->a2a) return qt_coll_a2av_next(c);
    if (c->reduce) return pow2 ? qt_coll_rs_pow2_next(c) : qt_coll_rs_any_next(c);
    return pow2 ? qt_coll_ag_doubling_next(c) : qt_coll_ag_ring_next(c);
}

void qt_coll_cursor_done(qt_coll_cursor *c)
{
    const int pow2 = qt_coll_pow2(c->R);
    if (c->units)
        qt_coll_units_done(c);
    else if (c->a2a)
        c->k++;
    else if (c->reduce && pow2)
        qt_coll_rs_pow2_done(c);
    else if (c->reduce)
        qt_coll_rs_any_done(c);
    else if (pow2)
        qt_coll_ag_doubling_done(c);
    else
        c->k++;
}
