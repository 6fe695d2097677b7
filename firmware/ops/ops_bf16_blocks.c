/* ops_bf16_blocks.c - row blocks of a bf16 op (qt_r16.h): slot buffers in the plan's fp32
 * staging region, blocks widened on read and rounded once on store.
 *
 * Invariants: a widening is exact (bf16 -> fp32 is a shift) and a store rounds each element
 * once (qt_bf16_from_f32, round to nearest even, denormals to signed zero: the boundary's
 * rounding, runtime/interp_bf16.c); fp32 slots that are contiguous (or read one row or a
 * fixed row at a time) are used in place; buffers are carved from the staging region in slot
 * order and never exceed it. No state, no heap, no VLAs.
 */
#include <string.h>
#include "qt_r16.h"
#include "kernels/bf16.h"

static int64_t qt_r16_up16(int64_t n)
{
    return (n + 15) / 16 * 16;
}

qt_r16_slot *qt_r16_add(qt_r16 *b, int32_t id, int64_t off, int64_t n, int64_t s, int rd, int wr)
{
    qt_r16_slot *x = &b->sl[b->ns++];
    x->id = id;
    x->off = off;
    x->n = n;
    x->s = s;
    x->rd = rd;
    x->wr = wr;
    x->fixed = 0;
    x->buf = 0;
    return x;
}

/* Takes the buffers for blocks of up to rows rows: 0, or -1 when an op's tensor appears in
 * two slots or the staging region cannot hold them (the caller then runs the boundary). */
int qt_r16_plan(qt_r16 *b, int64_t rows)
{
    const qt_plan *p = b->ctx->plan;
    for (int i = 0; i < b->ns; i++)
        for (int j = 0; j < i; j++)
            if (b->sl[i].id == b->sl[j].id) return -1;
    float *at = qt_op_bf16_stage(b->ctx);
    int64_t left = p->bf16_stage_elems;
    for (int i = 0; i < b->ns; i++) {
        qt_r16_slot *x = &b->sl[i];
        if (!qt_is_b16(b->ctx, x->id) && (x->s == x->n || rows == 1 || x->fixed)) continue;
        const int64_t need = qt_r16_up16((x->fixed ? 1 : rows) * x->n);
        if (need > left) return -1;
        x->buf = at;
        at += need;
        left -= need;
    }
    return 0;
}

float *qt_r16_extra(const qt_r16 *b, int64_t rows, int64_t n)
{
    float *at = qt_op_bf16_stage(b->ctx);
    int64_t used = 0;
    for (int i = 0; i < b->ns; i++)
        if (b->sl[i].buf) used += qt_r16_up16((b->sl[i].fixed ? 1 : rows) * b->sl[i].n);
    return used + qt_r16_up16(n) <= b->ctx->plan->bf16_stage_elems ? at + used : 0;
}

/* Rows per block for slots of the given widest row (at least 1, at most R). */
int64_t qt_r16_rows(int64_t widest, int64_t R)
{
    int64_t rows = widest > 0 ? QT_R16_BLOCK / widest : R;
    if (rows < 1) rows = 1;
    return rows < R ? rows : (R > 0 ? R : 1);
}

/* The block of rows [r0, r0 + nr) of slot x as fp32 rows n apart (loaded when read). */
float *qt_r16_get(const qt_r16 *b, const qt_r16_slot *x, int64_t r0, int64_t nr)
{
    const qt_ctx *ctx = b->ctx;
    if (!x->buf) return qt_f32(ctx, x->id) + x->off + r0 * x->s;
    if (!x->rd) return x->buf;
    const int64_t per = x->s == x->n ? nr : 1; /* contiguous rows: one conversion */
    for (int64_t r = 0; r < nr; r += per) {
        const int64_t at = x->off + (r0 + r) * x->s;
        if (qt_is_b16(ctx, x->id))
            qt_f32_from_bf16_n(x->buf + r * x->n, qt_b16(ctx, x->id) + at, per * x->n);
        else
            memcpy(x->buf + r * x->n, qt_f32(ctx, x->id) + at, (size_t)(per * x->n) * sizeof(float));
    }
    return x->buf;
}

/* Stores the block of a written slot back (rounded when bf16). */
void qt_r16_put(const qt_r16 *b, const qt_r16_slot *x, int64_t r0, int64_t nr)
{
    const qt_ctx *ctx = b->ctx;
    if (!x->buf || !x->wr) return;
    const int64_t per = x->s == x->n ? nr : 1;
    for (int64_t r = 0; r < nr; r += per) {
        const int64_t at = x->off + (r0 + r) * x->s;
        if (qt_is_b16(ctx, x->id)) qt_bf16_from_f32_n(qt_b16(ctx, x->id) + at, x->buf + r * x->n, per * x->n);
        else memcpy(qt_f32(ctx, x->id) + at, x->buf + r * x->n, (size_t)(per * x->n) * sizeof(float));
    }
}

/* A norm's weight: n values read once. */
qt_r16_slot *qt_r16_weight(qt_r16 *b, int32_t id, int64_t n)
{
    qt_r16_slot *x = qt_r16_add(b, id, 0, n, n, 1, 0);
    x->fixed = 1;
    return x;
}

void qt_r16_boundary(const qt_op *op, const qt_ctx *ctx)
{
    ctx->bf16_boundary(op, ctx);
}

/* qt_r16_plan, or, when it cannot take the buffers, the op run through the boundary:
 * nonzero then (the caller returns). */
int qt_r16_start(qt_r16 *b, const qt_op *op, int64_t rows)
{
    if (!qt_r16_plan(b, rows)) return 0;
    qt_r16_boundary(op, b->ctx);
    return 1;
}

/* Stores the block of every written slot back (qt_r16_put; the slots are distinct tensors,
 * so the order does not matter). */
void qt_r16_put_all(const qt_r16 *b, int64_t r0, int64_t nr)
{
    for (int i = 0; i < b->ns; i++) qt_r16_put(b, &b->sl[i], r0, nr);
}

void qt_r16_boundary_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    ctx->bf16_boundary_wgrad(op, ctx, seq, dw);
}

/* A per-sequence slot: w values per sequence (the kernel's layout, qt_ops.def); a tensor
 * holding fewer than nseq * w is refused (*bad set: the op then runs through the boundary). */
qt_r16_slot *qt_r16_seq(qt_r16 *b, int32_t id, int64_t nseq, int64_t w, int rd, int wr,
                        int *bad)
{
    if (b->ctx->plan->tensors[id].numel < nseq * w) *bad = 1;
    return qt_r16_add(b, id, 0, w, w, rd, wr);
}

const int32_t *qt_r16_pos(const qt_ctx *ctx, int64_t s, int64_t S)
{
    const int32_t *pos = qt_plan_positions(ctx);
    return pos ? pos + s * S : 0;
}

/* No inf or NaN in n values of slot x from element at (bf16 or fp32). */
static int qt_r16_finite_at(const qt_ctx *ctx, int32_t id, int64_t at, int64_t n)
{
    unsigned any = 0;
    if (qt_is_b16(ctx, id)) {
        const qt_bf16 *v = qt_b16(ctx, id) + at;
        for (int64_t i = 0; i < n; i++) any |= (v[i] & 0x7f80u) == 0x7f80u;
    } else {
        const uint32_t *v = (const uint32_t *)(const void *)(qt_f32(ctx, id) + at);
        for (int64_t i = 0; i < n; i++) any |= (v[i] & 0x7f800000u) == 0x7f800000u;
    }
    return any == 0;
}

int qt_r16_finite(const qt_r16 *b, int64_t r0, int64_t nr)
{
    for (int i = 0; i < b->ns; i++) {
        const qt_r16_slot *x = &b->sl[i];
        if (x->rd && !x->fixed && nr > 0 &&
            !qt_r16_finite_at(b->ctx, x->id, x->off + r0 * x->s, (nr - 1) * x->s + x->n))
            return 0;
    }
    return 1;
}

int qt_r16_finite_fixed(const qt_r16 *b)
{
    for (int i = 0; i < b->ns; i++)
        if (b->sl[i].fixed && !qt_r16_finite_at(b->ctx, b->sl[i].id, 0, b->sl[i].n)) return 0;
    return 1;
}
