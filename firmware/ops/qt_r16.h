/* qt_r16.h - row blocks of a bf16 op (ops_bf16_blocks.c): the machinery of the native bf16
 * forms that run a kind's own fp32 kernel on widened blocks of rows (ops_bf16_rows.c,
 * ops_bf16_seq.c; docs/precision.md, "Executing bf16 plans", pattern (B)).
 *
 * An op's slots are described once (tensor, first element, row width n, row stride s, read
 * and/or written, or a fixed row read once such as a norm's weight); qt_r16_plan gives every
 * slot that needs one a buffer in the plan's fp32 staging region for blocks of up to `rows`
 * rows; qt_r16_get widens (exactly) a block of a read bf16 slot into its buffer, or returns
 * the tensor itself when the slot is fp32 and in place; qt_r16_put rounds a written block
 * back (qt_bf16_from_f32: once per element per op). Invariants: the buffers never exceed the
 * staging region (else qt_r16_plan refuses and the op runs through the boundary,
 * qt_ctx.bf16_boundary: the same bits); an op naming one tensor in two slots is refused the
 * same way; no state, no heap.
 */
#ifndef QT_R16_H
#define QT_R16_H

#include "qt_ops_bf16.h"

/* Floats per slot and block (a few blocks stay in L1/L2 while the kernel runs). */
#define QT_R16_BLOCK 2048
#define QT_R16_MAX 10

/* One slot of a row-block op: rows of n values, row r at element off + r*s of tensor id. */
typedef struct {
    int32_t id;
    int64_t off, n, s;
    int rd, wr;  /* the kernel reads the slot / writes (or accumulates into) it */
    int fixed;   /* one row for the whole op (a norm's weight): loaded once */
    float *buf;  /* the block's rows packed n apart, or NULL (fp32, contiguous: in place) */
} qt_r16_slot;

typedef struct {
    const qt_ctx *ctx;
    int ns;
    qt_r16_slot sl[QT_R16_MAX];
} qt_r16;

/* Appends a slot (at most QT_R16_MAX per op). */
qt_r16_slot *qt_r16_add(qt_r16 *b, int32_t id, int64_t off, int64_t n, int64_t s, int rd, int wr);
/* A fixed row of n values read once (a norm's weight, a gate's parameters, a table). */
qt_r16_slot *qt_r16_weight(qt_r16 *b, int32_t id, int64_t n);
/* A per-sequence slot: w values per sequence (the kernel's layout, qt_ops.def); a tensor
 * holding fewer than nseq * w sets *bad (the op then runs through the boundary). */
qt_r16_slot *qt_r16_seq(qt_r16 *b, int32_t id, int64_t nseq, int64_t w, int rd, int wr,
                        int *bad);
/* Takes the buffers for blocks of up to rows rows: 0, or -1 when an op's tensor appears in
 * two slots or the staging region cannot hold them (the caller then runs the boundary). */
int qt_r16_plan(qt_r16 *b, int64_t rows);
/* After qt_r16_plan(b, rows): n more floats of the staging region past the slots' buffers
 * (an op's whole fp32 rows kept between exchanges), or NULL when the region cannot hold them. */
float *qt_r16_extra(const qt_r16 *b, int64_t rows, int64_t n);
/* qt_r16_plan, or, when it cannot take the buffers, the op run through the boundary:
 * nonzero then (the caller returns). */
int qt_r16_start(qt_r16 *b, const qt_op *op, int64_t rows);
/* Rows per block for slots of the given widest row (at least 1, at most R). */
int64_t qt_r16_rows(int64_t widest, int64_t R);
/* The block of rows [r0, r0 + nr) of slot x as fp32 rows n apart (loaded when read). */
float *qt_r16_get(const qt_r16 *b, const qt_r16_slot *x, int64_t r0, int64_t nr);
/* Stores the block of a written slot back (rounded when bf16). */
void qt_r16_put(const qt_r16 *b, const qt_r16_slot *x, int64_t r0, int64_t nr);
/* qt_r16_put of every written slot (distinct tensors: the order does not matter). */
void qt_r16_put_all(const qt_r16 *b, int64_t r0, int64_t nr);
/* 1 when every read slot's rows [r0, r0 + nr) (fixed rows: not looked at) hold no inf or
 * NaN; qt_r16_finite_fixed: the same for the fixed rows (a weight, a table), once per op.
 * The one-pass forms run on finite inputs only (ops_bf16_rows.c qt_r16_one_pass: with no
 * NaN in, no operation chooses between two NaNs, so separately compiled code gives the
 * fp32 kernel's bits); a block that is not finite takes the fp32 kernel. */
int qt_r16_finite(const qt_r16 *b, int64_t r0, int64_t nr);
int qt_r16_finite_fixed(const qt_r16 *b);
/* The op run through the boundary (qt_ctx.bf16_boundary, bf16_boundary_wgrad). */
void qt_r16_boundary(const qt_op *op, const qt_ctx *ctx);
void qt_r16_boundary_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
/* The positions of sequence s of S tokens (packed documents), or NULL. */
const int32_t *qt_r16_pos(const qt_ctx *ctx, int64_t s, int64_t S);

/* The smaller of a and b (row-block bounds). */
static inline int64_t qt_r16_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Slot i's block of rows [r0, r0 + nr) of the qt_r16 named b in the caller. */
#define QT_R16_G(i, r0, nr) qt_r16_get(&b, &b.sl[i], r0, nr)

#endif
