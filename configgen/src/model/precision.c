/* model/precision.c - the storage dtype of every tensor under the plan's compute dtype
 * (s->dtype, the config key `dtype`), the bf16 recipe of docs/precision.md:
 *   parameters (role PARAM: the tensors the ops read, i.e. the compute copy)   bf16
 *   forward activations (ACT) and their gradients (ACT_GRAD)                   bf16
 *   the routed experts' saved gate/up products and their gradients
 *   (".expert_gu", ".ep_gu", ".bwd_dgu")                                       bf16
 *   saved statistics (rstd, lse, the GDN states, the conv pre-activation),
 *   kernel scratch, the loss, the rotary table                                 fp32
 *   partial sums that cross ranks or blocks (docs/precision.md, "Executing bf16
 *   plans", plan fixes): the canonical blocks' scratch (".canon_scratch": fp32
 *   block partials), every ALL_REDUCE buffer (tensor-parallel partials), the
 *   expert hosts' row gradients (MOE_DISPATCH_BWD dxr), the dk and dv of a kv
 *   head's context chain (CTX_CHAIN_RECV / CTX_CHAIN_SEND: partial sums handed
 *   from rank to rank)                                                         fp32
 *   token ids, targets, routing indices and rows (I32)                         int32
 * and, where an ALL_REDUCE buffer's consumers read bf16 (tensor parallelism: the expert
 * hosts' forward rows), a ROUND_BF16 right after the ALL_REDUCE into "<buf>.bf16", which
 * the later ops read instead: one rounding of the complete sum, as one rank rounds once;
 * likewise a ROUND_BF16 right after each CTX_CHAIN_SEND into "<dk>.bf16" and "<dv>.bf16"
 * (the chain's last member then rounds the one-rank sums once, as one rank's attention
 * backward rounds its fp32 accumulator once; the other members' copies are never read by
 * the exchange, which takes the gradient back from the last member).
 * The master weights, the gradient leaves and trees, Adam and the checkpoint staging are
 * flat regions, not tensors: fp32 always (memory/memplan.c). Per-layer gather windows are
 * created later in the compute dtype (schedule/layer_ops.c).
 * Invariants: runs after autodiff and remat (whose copies it sees as ordinary ops), before
 * the flat ranges, the arena (which size each tensor by its dtype and plan lifetimes from
 * the schedule) and scan_layers; an fp32 plan is left exactly as built; I32 tensors are
 * never changed; g->bwd_src (remat's input) is not updated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"

/* 1 when a name ends with suffix, before any copy marks ("~r" remat, "~g" gather clones). */
static int ends_with(const char *name, const char *suffix)
{
    const char *mark = strchr(name, '~');
    const size_t n = mark ? (size_t)(mark - name) : strlen(name), k = strlen(suffix);
    return n >= k && !strncmp(name + n - k, suffix, k);
}

/* The storage dtype of one fp32 tensor of a bf16 plan. */
static int bf16_dtype_of(const qt_tensor *t)
{
    static const char *const bf16_suffix[] = {".expert_gu", ".ep_gu", ".bwd_dgu"};
    switch (t->role) {
    case QT_ROLE_PARAM:
    case QT_ROLE_ACT:
    case QT_ROLE_ACT_GRAD:
        return QT_BF16;
    case QT_ROLE_SAVED:
    case QT_ROLE_SCRATCH:
        for (size_t i = 0; i < sizeof bf16_suffix / sizeof bf16_suffix[0]; i++)
            if (ends_with(t->name, bf16_suffix[i])) return QT_BF16;
        return QT_F32;
    default:
        return QT_F32;
    }
}

/* "<name>.bf16" followed by name's copy marks ("~r", "~g"), so the suffix rules above and
 * the layer of a name (schedule/scan.c) read the copy as they read the buffer. */
static void bf16_copy_name(const char *name, char *out, size_t n)
{
    const char *mark = strchr(name, '~');
    const int k = mark ? (int)(mark - name) : (int)strlen(name);
    snprintf(out, n, "%.*s.bf16%s", k, name, mark ? mark : "");
}

/* A new bf16 tensor shaped, laid out and sharded as buffer id, for the consumers after its
 * ALL_REDUCE; returns its id. */
static int32_t bf16_copy(qt_cg_graph *g, int32_t id)
{
    char name[320];
    bf16_copy_name(g->ts[id].t.name, name, sizeof name);
    const int32_t c = qt_cg_clone_tensor(g, id, "");
    free((char *)g->ts[c].t.name);
    g->ts[c].t.name = qt_cg_strdup(name);
    g->ts[c].t.dtype = QT_BF16;
    g->ts[c].reshard = g->ts[id].reshard;
    g->ts[c].whole = g->ts[id].whole;
    g->ts[c].ep_seg = g->ts[id].ep_seg;
    return c;
}

/* The ALL_REDUCE buffers that get a ROUND_BF16: those the recipe makes bf16, except the
 * expert hosts' row gradients (MOE_DISPATCH_BWD dxr), which MOE_DISPATCH_BWD reads in fp32
 * (its slot sum rounds once per token, as one rank's EXPERT_FFN_BWD does); and the kv
 * chains' dk and dv (CTX_CHAIN_SEND t0, t1), whose fp32 sums the attention backward
 * between CTX_CHAIN_RECV and CTX_CHAIN_SEND continues from rank to rank (an fp32 slot of
 * the boundary: added to in place, never rounded). Makes every ALL_REDUCE buffer, every
 * dxr and every chained dk and dv fp32; returns the flags per tensor id (caller frees). */
static uint8_t *partials_fp32(qt_cg_graph *g)
{
    uint8_t *round = qt_cg_alloc((size_t)(g->nt ? g->nt : 1));
    for (int i = 0; i < g->nmb; i++)
        if (g->mb[i].kind == QT_OP_MOE_DISPATCH_BWD)
            g->ts[QT_T(&g->mb[i], MOE_DISPATCH_BWD, dxr)].t.dtype = QT_F32;
    for (int i = 0; i < g->nmb; i++) {
        if (g->mb[i].kind != QT_OP_ALL_REDUCE) continue;
        const int32_t id = QT_T(&g->mb[i], ALL_REDUCE, buf);
        round[id] = g->ts[id].t.dtype == QT_BF16;
        g->ts[id].t.dtype = QT_F32;
    }
    for (int i = 0; i < g->nmb; i++) {
        if (g->mb[i].kind != QT_OP_CTX_CHAIN_SEND) continue;
        for (int k = 0; k < 2; k++) {
            const int32_t id = g->mb[i].t[k];
            round[id] = round[id] || g->ts[id].t.dtype == QT_BF16;
            g->ts[id].t.dtype = QT_F32;
        }
    }
    return round;
}

/* One ROUND_BF16 of fp32 tensor b into its new bf16 copy, recorded in map. */
static void round_copy(qt_cg_graph *g, int32_t b, int32_t *map)
{
    const int32_t c = bf16_copy(g, b);
    qt_op *r = qt_cg_emit_op(g, 0, QT_OP_ROUND_BF16);
    QT_CG_SET_T(r, ROUND_BF16, .y = c, .x = b);
    QT_CG_SET_A(r, ROUND_BF16, .n = g->ts[b].t.numel);
    map[b] = c;
}

/* After each ALL_REDUCE whose buffer b was bf16 (and each CTX_CHAIN_SEND, for its dk and
 * dv), a ROUND_BF16 into a new bf16 tensor b',
 * and every later op of the microbatch schedule names b' instead of b: on one rank b is
 * the bf16 tensor its producer rounded once; on a tensor-parallel mesh the producer's
 * partials are summed in fp32 and rounded once here, the same bits. The new tensors are
 * created in schedule order (one per layer's ALL_REDUCE, remat copies included), so their
 * ids advance by a constant per layer cycle and scan_layers still finds the cycles. */
static void round_after_all_reduce(qt_cg_graph *g, const uint8_t *round)
{
    const int nt0 = g->nt, n = g->nmb;
    int32_t *map = qt_cg_alloc((size_t)(nt0 ? nt0 : 1) * sizeof *map);
    int *at = qt_cg_alloc((size_t)(n + 1) * sizeof *at);   /* old op index -> new */
    for (int i = 0; i < nt0; i++) map[i] = QT_NONE;
    qt_op *old = g->mb;
    g->mb = NULL;
    g->nmb = g->capmb = 0;
    for (int o = 0; o < n; o++) {
        at[o] = g->nmb;
        qt_op op = old[o];
        if (op.kind == QT_OP_ALL_REDUCE) {
            const int32_t b = QT_T(&op, ALL_REDUCE, buf);
            *qt_cg_emit_op(g, 0, QT_OP_NOP) = op;  /* appended as is */
            if (!round[b] || map[b] != QT_NONE) continue;
            round_copy(g, b, map);
            continue;
        }
        if (op.kind == QT_OP_CTX_CHAIN_SEND) {
            *qt_cg_emit_op(g, 0, QT_OP_NOP) = op;  /* its dk, dv: the chain's fp32 sums */
            for (int k = 0; k < 2; k++)
                if (round[op.t[k]] && map[op.t[k]] == QT_NONE) round_copy(g, op.t[k], map);
            continue;
        }
        for (int k = 0; k < QT_OP_MAX_T; k++)
            if (op.t[k] >= 0 && op.t[k] < nt0 && map[op.t[k]] != QT_NONE) op.t[k] = map[op.t[k]];
        *qt_cg_emit_op(g, 0, QT_OP_NOP) = op;
    }
    at[n] = g->nmb;
    /* the forward grows by its rounds; the layers' forward op ranges move with them */
    g->n_fwd = at[g->n_fwd];
    for (int l = 0; l < g->n_layers_rec; l++) {
        g->layer_op0[l] = at[g->layer_op0[l]];
        g->layer_op1[l] = at[g->layer_op1[l]];
    }
    free(old);
    free(map);
    free(at);
}

void qt_cg_precision(qt_cg_graph *g)
{
    if (g->s->dtype != QT_BF16) return;
    for (int i = 0; i < g->nt; i++) {
        qt_tensor *t = &g->ts[i].t;
        if (t->dtype == QT_F32) t->dtype = (uint8_t)bf16_dtype_of(t);
    }
    /* partial sums stay fp32 until the cross-rank sum is complete (the microbatch schedule
     * holds every ALL_REDUCE and MOE_DISPATCH_BWD, remat copies included); their bf16
     * consumers then read a rounded copy */
    uint8_t *round = partials_fp32(g);
    round_after_all_reduce(g, round);
    free(round);
}
