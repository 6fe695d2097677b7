/* interp_bf16.c - the bf16 boundary: how a bf16 plan runs an op kind whose wrapper has no
 * bf16 form (no QT_OPP_BF16 in its qt_ops.def row) - docs/precision.md, "Executing bf16
 * plans", pattern (A).
 *
 * The op's bf16 tensors are widened (exactly: bf16 -> fp32 is a shift) into the plan's fp32
 * staging region, the kind's fp32 wrapper runs on them through the context's stage map
 * (qt_plan.h qt_f32), and the slots it writes or accumulates ('w', 'a') are rounded back
 * (round-to-nearest-even, denormals to signed zero: qt_bf16_from_f32), once per element per
 * op. So a boundary op computes exactly what the fp32 op computes on the widened inputs, in
 * its order, and rounds only where it stores: the precision rule, by construction. An
 * accumulating slot starts from its widened old value and is rounded once at the end.
 *
 * Invariants: the staging layout of an op (its distinct bf16 tensor ids in slot order, each
 * rounded up to 16 floats) is the one configgen sizes bf16_stage_elems with
 * (qt_plan_fields.def), and qt_bf16_stage_need computes the same figure so start-up checks
 * it (validate.c); the native kinds' parameter slots ('p') are left out;
 * an element of a written slot that the op leaves alone (a strided output's gaps) rounds
 * back to its own bits when an op stored it (stores flush denormals and quiet NaNs);
 * bytes no op has stored yet may change, and no op reads an element before one writes
 * it. No state, no heap.
 */
#include <ctype.h>
#include "qt_interp_bf16.h"
#include "kernels/bf16.h"
#include "ops/qt_ops_bf16.h"

#define QT_STAGE_ALIGN 16

/* Whether slot k of op (letter c) is staged: a bf16 tensor the wrapper reads or writes. */
static int qt_bf16_staged(const qt_plan *p, const qt_kernel_entry *e, const qt_op *op, int k)
{
    const int32_t id = op->t[k];
    if (e->cls == QT_OPC_STEP || id == QT_NONE || id < 0 || id >= p->n_tensors ||
        p->tensors[id].dtype != QT_BF16)
        return 0;
    const char c = (char)tolower((unsigned char)e->slots[k]);
    /* a native kind reads parameters (the compute copy) as bf16, or not at all; STEP kinds
     * run in the step code. Some WGRAD wrappers read their parameters (the GDN gates'), so
     * theirs are staged, and the kinds made native with QT_OPP_BF16_PSTAGE count theirs as
     * planned. The same rule as configgen's (memory/memplan.c op_bf16_stage). */
    if (c == 'p' && (e->props & QT_OPP_BF16) && !(e->props & QT_OPP_BF16_PSTAGE)) return 0;
    return 1;
}

/* 1 when slot k repeats the tensor of an earlier staged slot (it shares that staging). */
static int qt_bf16_repeat(const qt_plan *p, const qt_kernel_entry *e, const qt_op *op, int k)
{
    for (int j = 0; j < k; j++)
        if (op->t[j] == op->t[k] && qt_bf16_staged(p, e, op, j)) return 1;
    return 0;
}

static int qt_bf16_nslots(const qt_kernel_entry *e)
{
    int n = 0;
    while (e->slots && e->slots[n] && n < QT_OP_MAX_T) n++;
    return n;
}

int64_t qt_bf16_stage_need(const qt_plan *p, const qt_kernel_entry *e, const qt_op *op)
{
    int64_t need = 0;
    const int ns = qt_bf16_nslots(e);
    for (int k = 0; k < ns; k++)
        if (qt_bf16_staged(p, e, op, k) && !qt_bf16_repeat(p, e, op, k))
            need += (p->tensors[op->t[k]].numel + QT_STAGE_ALIGN - 1) / QT_STAGE_ALIGN *
                    QT_STAGE_ALIGN;
    return need;
}

/* Widens the op's staged tensors into the staging region and fills the map. */
static void qt_bf16_widen(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                          qt_stage_map *map)
{
    const qt_plan *p = ctx->plan;
    float *at = qt_op_bf16_stage(ctx);
    const int ns = qt_bf16_nslots(e);
    map->n = 0;
    for (int k = 0; k < ns; k++) {
        if (!qt_bf16_staged(p, e, op, k) || qt_bf16_repeat(p, e, op, k)) continue;
        const int64_t n = p->tensors[op->t[k]].numel;
        qt_f32_from_bf16_n(at, qt_b16(ctx, op->t[k]), n);
        map->id[map->n] = op->t[k];
        map->at[map->n++] = at;
        at += (n + QT_STAGE_ALIGN - 1) / QT_STAGE_ALIGN * QT_STAGE_ALIGN;
    }
}

/* Rounds the written and accumulated staged slots back into their bf16 tensors. */
static void qt_bf16_round_back(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                               const qt_stage_map *map)
{
    const qt_plan *p = ctx->plan;
    const int ns = qt_bf16_nslots(e);
    for (int i = 0; i < map->n; i++) {
        int written = 0;
        for (int k = 0; k < ns; k++) {
            const char c = (char)tolower((unsigned char)e->slots[k]);
            if (op->t[k] == map->id[i] && (c == 'w' || c == 'a')) written = 1;
        }
        if (written)
            qt_bf16_from_f32_n(qt_b16(ctx, map->id[i]), map->at[i], p->tensors[map->id[i]].numel);
    }
}

void qt_bf16_boundary_run(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx)
{
    qt_stage_map map;
    qt_ctx c = *ctx;
    qt_bf16_widen(e, op, ctx, &map);
    c.stage = &map;
    e->run(op, &c);
    qt_bf16_round_back(e, op, ctx, &map);
}

void qt_bf16_boundary_wgrad(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                            int64_t seq, float *const dw[2])
{
    qt_stage_map map;
    qt_ctx c = *ctx;
    qt_bf16_widen(e, op, ctx, &map);
    c.stage = &map;
    e->wgrad(op, &c, seq, dw);
}

void qt_interp_wgrad_ctx(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                         qt_stage_map *map, qt_ctx *out)
{
    *out = *ctx;
    if (ctx->plan->dtype != QT_BF16 || (e->props & QT_OPP_BF16)) return;
    qt_bf16_widen(e, op, ctx, map);
    out->stage = map;
}

void qt_interp_call_run(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx)
{
    if (ctx->plan->dtype == QT_BF16 && !(e->props & QT_OPP_BF16)) qt_bf16_boundary_run(e, op, ctx);
    else e->run(op, ctx);
}

void qt_interp_call_wgrad(const qt_kernel_entry *e, const qt_op *op, const qt_ctx *ctx,
                          int64_t seq, float *const dw[2])
{
    if (ctx->plan->dtype == QT_BF16 && !(e->props & QT_OPP_BF16))
        qt_bf16_boundary_wgrad(e, op, ctx, seq, dw);
    else e->wgrad(op, ctx, seq, dw);
}
