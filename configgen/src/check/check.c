/* check/check.c - structural checks of the emitted schedules, run on every plan before
 * anything is written (and by the unit tests): slot usage per qt_cg_op_slots, def-before-
 * use, parameter slots, the one-WGRAD-per-parameter rule the gradient trees rely on, and
 * that the sizes in op attributes agree with the tensors they name (qt_plan.h invariant).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "check/qt_cg_check.h"
#include "mesh/qt_cg_mesh.h"
#include "../../firmware/kernels/gdn_core.h"
#include "../../firmware/kernels/gdn_chunk.h"
#include "../../firmware/kernels/attention.h"
#include "../../firmware/kernels/xent.h"
#include "../../firmware/parallel/cp_pack.h"

/* numel(t[slot]) must equal want (exact) or be at least want (at_least). */
static int need(const qt_cg_graph *g, const qt_op *o, int i, const char *which, int slot,
                int64_t want, int at_least, char *err, size_t errlen)
{
    int32_t id = o->t[slot];
    if (id == QT_NONE) return 0;
    int64_t have = g->ts[id].t.numel;
    if (at_least ? have >= want : have == want) return 0;
    return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d %s has %lld elements, the "
                      "attributes need %s%lld", which, i, qt_cg_op_name(o->kind), slot,
                      g->ts[id].t.name, (long long)have, at_least ? ">= " : "", (long long)want);
}

/* The expert FFN's scratch rule (qt_ops.def EXPERT_FFN_FWD: the larger of the all-rows and
 * the one-sequence layouts), shared by its forward, backward and weight gradient. Ops with
 * more than C rows (qt_cg_expert_chunk) run in chunks of that many rows: their forward and
 * backward need one chunk, their weight gradient one leaf's rows of one expert (at most Sl,
 * the leaf's tokens) in one chunk, its canonical order (qt_cg.h). */
static int64_t ffn_scratch(int64_t S, int64_t Sl, int64_t C, int64_t T, int64_t k, int64_t d,
                           int64_t f, int wgrad)
{
    if (T * k > C) {
        const int64_t c = C * (d + f);
        return wgrad && Sl * (d + 3 * f) > c ? Sl * (d + 3 * f) : c;
    }
    int64_t scr = T * k * (d + f);
    return S * (d + 3 * f) > scr ? S * (d + 3 * f) : scr;
}

/* Attribute/shape agreement for the kinds whose sizes are plain products (qt_ops.h). Each
 * case binds QT_CG_SZ_KIND to its kind, so NEED / ATLEAST name a slot and A an attribute of
 * that kind's row in qt_ops.def. */
#define QT_CG_SZ_T_(k, s) QT_T_##k##_##s
#define QT_CG_SZ_T(k, s) QT_CG_SZ_T_(k, s)
#define QT_CG_SZ_A_(k, x) QT_A_##k##_##x
#define QT_CG_SZ_A(k, x) QT_CG_SZ_A_(k, x)
#define A(x) (o->a[QT_CG_SZ_A(QT_CG_SZ_KIND, x)])
#define CHECK_(slot, n, at_least)                                                          \
    do {                                                                                   \
        int64_t want_ = (n);                                                               \
        int slot_ = QT_CG_SZ_T(QT_CG_SZ_KIND, slot);                                       \
        if (need(g, o, i, which, slot_, want_, at_least, err, errlen)) return -1;          \
    } while (0)
#define NEED(slot, n) CHECK_(slot, n, 0)
#define ATLEAST(slot, n) CHECK_(slot, n, 1)

/* The elementwise, matmul, norm, embedding and loss kinds. */
static int sizes_basic(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                       char *err, size_t errlen)
{
    switch (o->kind) {
#define QT_CG_SZ_KIND ZERO
    case QT_OP_ZERO: NEED(x, A(n)); break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND ACC
    case QT_OP_ACC: NEED(dst, A(n)); NEED(src, A(n)); break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND ADD
    case QT_OP_ADD: NEED(y, A(n)); NEED(a, A(n)); NEED(b, A(n)); break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND MATMUL_FWD
    case QT_OP_MATMUL_FWD:
        NEED(y, A(M) * A(N)); NEED(x, A(M) * A(K)); NEED(w, A(N) * A(K));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND MATMUL_BWD_DATA
    case QT_OP_MATMUL_BWD_DATA:
        NEED(dx, A(M) * A(K)); NEED(dy, A(M) * A(N)); NEED(w, A(N) * A(K));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND MATMUL_WGRAD
    case QT_OP_MATMUL_WGRAD:
        NEED(dy, A(M) * A(N)); NEED(x, A(M) * A(K)); NEED(w, A(N) * A(K));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND RMSNORM_FWD
    case QT_OP_RMSNORM_FWD:
        NEED(rstd, A(R)); NEED(w, A(n));
        ATLEAST(y, (A(R) - 1) * A(ys) + A(n)); ATLEAST(x, (A(R) - 1) * A(xs) + A(n));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND EMBED_FWD
    case QT_OP_EMBED_FWD:
        NEED(x, A(T) * A(d)); NEED(tokens, A(T)); NEED(w, A(V) * A(d));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND XENT
    case QT_OP_XENT:
        NEED(loss_seq, A(b)); NEED(dlogits, A(b) * A(S) * A(V));
        NEED(logits, A(b) * A(S) * A(V)); NEED(targets, A(b) * A(S));
        if (A(nb) > 0) {
            const int64_t P = A(mask) ? qt_cg_group_size(g->s, (uint8_t)A(mask)) : 1;
            ATLEAST(scratch, QT_XENT_BLK_SCRATCH(A(b) * A(S), A(nb), P));
        }
        break;
#undef QT_CG_SZ_KIND
    default: break;
    }
    return 0;
}

/* The attention, MoE, expert FFN and GDN kinds. */
static int sizes_blocks(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                        char *err, size_t errlen)
{
    const int64_t S = g->s->tr.seq_len, Sl = qt_cg_leaf_tokens(g->s), C = qt_cg_expert_chunk(g->s);
    switch (o->kind) {
#define QT_CG_SZ_KIND ATTN_FWD
    case QT_OP_ATTN_FWD:
        NEED(o, A(b) * A(S) * A(Hq) * A(hd)); NEED(lse, A(b) * A(Hq) * A(S));
        NEED(q, A(b) * A(S) * A(Hq) * A(hd)); NEED(k, A(b) * A(S) * A(Hkv) * A(hd));
        NEED(v, A(b) * A(S) * A(Hkv) * A(hd)); ATLEAST(scratch, A(S));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND MOE_ROUTE_FWD
    case QT_OP_MOE_ROUTE_FWD:
        NEED(idx, A(T) * A(k)); NEED(p, A(T) * A(k)); NEED(logits, A(T) * A(E));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND EXPERT_FFN_FWD
    case QT_OP_EXPERT_FFN_FWD:
        NEED(y, A(T) * A(k) * A(d)); NEED(gu, A(T) * A(k) * 2 * A(f)); NEED(x, A(T) * A(d));
        NEED(idx, A(T) * A(k)); NEED(w_gu, A(E) * 2 * A(f) * A(d));
        NEED(w_down, A(E) * A(d) * A(f));
        ATLEAST(scratch, ffn_scratch(S, Sl, C, A(T), A(k), A(d), A(f), 0));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND MOE_COMBINE_FWD
    case QT_OP_MOE_COMBINE_FWD:
        NEED(out, A(T) * A(d)); NEED(p, A(T) * A(k)); NEED(y, A(T) * A(k) * A(d));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND GDN_CORE_BWD
    case QT_OP_GDN_CORE_BWD:
        ATLEAST(scratch, A(algo) ? QT_GDN_CHUNK_BWD_SCRATCH(QT_GDN_CHUNK_ROWS(A(chunk), A(S)),
                                                            A(Dk), A(Dv))
                                 : QT_GDN_CORE_SCRATCH(A(chunk), A(Dk), A(Dv)));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND ATTN_BWD
    case QT_OP_ATTN_BWD:
        NEED(dq, A(b) * A(S) * A(Hq) * A(hd)); NEED(dk, A(b) * A(S) * A(Hkv) * A(hd));
        NEED(dv, A(b) * A(S) * A(Hkv) * A(hd)); NEED(dout, A(b) * A(S) * A(Hq) * A(hd));
        NEED(lse, A(b) * A(Hq) * A(S)); ATLEAST(scratch, QT_ATTN_BWD_SCRATCH(A(S)));
        break;
#undef QT_CG_SZ_KIND
    /* the forward's scratch rule, and d(gu) shaped like gu when it is planned */
#define QT_CG_SZ_KIND EXPERT_FFN_BWD
    case QT_OP_EXPERT_FFN_BWD:
        ATLEAST(scratch, ffn_scratch(S, Sl, C, A(T), A(k), A(d), A(f), 0));
        NEED(dgu, A(T) * A(k) * 2 * A(f));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND EXPERT_FFN_WGRAD
    case QT_OP_EXPERT_FFN_WGRAD:
        ATLEAST(scratch, ffn_scratch(S, Sl, C, A(T), A(k), A(d), A(f), 1));
        NEED(dgu, A(T) * A(k) * 2 * A(f));
        break;
#undef QT_CG_SZ_KIND
#define QT_CG_SZ_KIND GDN_CORE_FWD
    case QT_OP_GDN_CORE_FWD: {
        int64_t nch = (A(S) + A(chunk) - 1) / A(chunk);
        if (A(algo))
            ATLEAST(scratch, QT_GDN_CHUNK_FWD_SCRATCH(QT_GDN_CHUNK_ROWS(A(chunk), A(S)), A(Dk),
                                                      A(Dv)));
        NEED(o, A(b) * A(S) * A(Hv) * A(Dv)); NEED(states, A(b) * A(Hv) * nch * A(Dk) * A(Dv));
        NEED(rq, A(b) * A(S) * A(Hk)); NEED(rk, A(b) * A(S) * A(Hk));
        NEED(c, A(b) * A(S) * (2 * A(Hk) * A(Dk) + A(Hv) * A(Dv)));
        NEED(g, A(b) * A(S) * A(Hv)); NEED(beta, A(b) * A(S) * A(Hv));
        break;
    }
#undef QT_CG_SZ_KIND
    default: break;
    }
    return 0;
}
/* Context parallelism's head exchange (qt_ops.def CTX_*): the token side holds
 * b*(S/C)*G*w elements, the head side b*S*Gl*w (the same unless G < C: groups shared by a
 * chain of ranks; or u > 0, uneven ownership: Gl slots with padding), the scratch the send
 * and receive blocks. The four kinds share CTX_TO_HEADS's slots and attributes. */
static int sizes_exchange(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                          char *err, size_t errlen)
{
    if (o->kind == QT_OP_CTX_CHAIN_RECV || o->kind == QT_OP_CTX_CHAIN_SEND) {
#define QT_CG_SZ_KIND CTX_CHAIN_RECV
        NEED(dk, A(n));
        NEED(dv, A(n));
#undef QT_CG_SZ_KIND
        return 0;
    }
    if (o->kind != QT_OP_CTX_TO_HEADS && o->kind != QT_OP_CTX_TO_HEADS_BWD &&
        o->kind != QT_OP_CTX_TO_TOKENS && o->kind != QT_OP_CTX_TO_TOKENS_BWD)
        return 0;
#define QT_CG_SZ_KIND CTX_TO_HEADS
    if (A(C) < 1 || A(u) < 0 || A(S) % A(C) ||
        (A(u) > 0 ? A(G) % A(u) : A(G) % A(C) && A(C) % A(G)))
        return qt_cg_fail(err, errlen, "%s op %d (%s): S = %lld must be a multiple of the "
                          "context degree C = %lld and G = %lld a multiple or a divisor of it "
                          "(uneven ownership, u = %lld > 0: a multiple of u)", which, i,
                          qt_cg_op_name(o->kind), (long long)A(S), (long long)A(C),
                          (long long)A(G), (long long)A(u));
    const int64_t nt = QT_CP_ELEMS(A(b), A(S), A(G), A(w), A(C)),
                  nh = QT_CP_HEAD_ELEMS_U(A(b), A(S), A(G), A(w), A(C), A(u));
    const int heads_out = o->kind == QT_OP_CTX_TO_HEADS || o->kind == QT_OP_CTX_TO_TOKENS_BWD;
    NEED(y, heads_out ? nh : nt);
    NEED(x, heads_out ? nt : nh);
    ATLEAST(scratch, QT_CP_SCRATCH_FLOATS_U(A(b), A(S), A(G), A(w), A(C), A(u)));
#undef QT_CG_SZ_KIND
    return 0;
}
/* GDN heads owned unevenly over context (qt_ops.def CTX_OWN_UNITS and the *_WGRAD_U kinds):
 * U units over C members, slots = ceil(U/C); the copy a slot block, the parameter whole,
 * the WGRAD scratch C (the norm: tensor x C) head sides. */
static int sizes_units(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                       char *err, size_t errlen)
{
    const int64_t C = qt_cg_context(g->s), tp = g->s->mesh[QT_MESH_TENSOR];
    switch (o->kind) {
    case QT_OP_CTX_OWN_UNITS: {
#define QT_CG_SZ_KIND CTX_OWN_UNITS
        const int64_t L = A(C) > 0 ? (A(U) + A(C) - 1) / A(C) : 0, w = A(w0) + A(w1) + A(w2);
        if (A(U) < 1 || A(C) != C || A(w0) < 1 || A(w1) < 0 || A(w2) < 0)
            return qt_cg_fail(err, errlen, "%s op %d (%s): U = %lld units, C = %lld (the "
                              "context degree is %lld), segments %lld/%lld/%lld", which, i,
                              qt_cg_op_name(o->kind), (long long)A(U), (long long)A(C),
                              (long long)C, (long long)A(w0), (long long)A(w1), (long long)A(w2));
        NEED(y, L * w);
        NEED(x, A(U) * w);
#undef QT_CG_SZ_KIND
        return 0;
    }
    case QT_OP_GDN_CONV_WGRAD_U: {
#define QT_CG_SZ_KIND GDN_CONV_WGRAD_U
        ATLEAST(scratch, C * (2 * A(Hk) * A(Dk) + A(Hv) * A(Dv)) * A(K));
#undef QT_CG_SZ_KIND
        return 0;
    }
    case QT_OP_GDN_GATES_WGRAD_U: {
#define QT_CG_SZ_KIND GDN_GATES_WGRAD_U
        NEED(A_log_h, A(Hv));
        NEED(dt_bias_h, A(Hv));
        ATLEAST(scratch, 2 * C * A(Hv));
#undef QT_CG_SZ_KIND
        return 0;
    }
    case QT_OP_GATED_RMSNORM_WGRAD_U: {
#define QT_CG_SZ_KIND GATED_RMSNORM_WGRAD_U
        ATLEAST(scratch, tp * C * A(groups) * A(Dv));
#undef QT_CG_SZ_KIND
        return 0;
    }
    default:
        return 0;
    }
}
#undef A
#undef CHECK_
#undef NEED
#undef ATLEAST

static int check_sizes(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                       char *err, size_t errlen)
{
    return sizes_basic(g, o, i, which, err, errlen) || sizes_blocks(g, o, i, which, err, errlen) ||
                   sizes_exchange(g, o, i, which, err, errlen) ||
                   sizes_units(g, o, i, which, err, errlen)
               ? -1 : 0;
}

static int check_ops(const qt_cg_graph *g, const qt_op *ops, int n, const char *which,
                     unsigned char *written, int *wgrad_count, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        const qt_op *o = &ops[i];
        const char *sl = qt_cg_op_slots(o->kind);
        int ns = (int)strlen(sl), np = 0;
        int32_t pslot[2] = {QT_NONE, QT_NONE};
        if (o->kind == QT_OP_NOP || o->kind >= QT_OP_COUNT)
            return qt_cg_fail(err, errlen, "%s op %d: invalid kind %d", which, i, o->kind);
        if (o->kind == QT_OP_PP_CHUNK) continue; /* a marker: no slots, runs nothing */
        for (int s = 0; s < QT_OP_MAX_T; s++) {
            int32_t id = o->t[s];
            if (s >= ns) {
                if (id != QT_NONE)
                    return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d set but unused", which,
                                      i, qt_cg_op_name(o->kind), s);
                continue;
            }
            if (id == QT_NONE) {
                /* optional slots (upper case in qt_ops.def) */
                if (qt_cg_op_slot_optional(o->kind, s)) continue;
                return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d unset", which, i,
                                  qt_cg_op_name(o->kind), s);
            }
            if (id < 0 || id >= g->nt)
                return qt_cg_fail(err, errlen, "%s op %d: tensor id %d out of range", which, i, id);
            const qt_tensor *t = &g->ts[id].t;
            char r = sl[s];
            /* (a 'p' slot may read a head-side copy of a parameter's rows: CTX_OWN_UNITS,
             * heads owned unevenly over context; marked 2 in written[]) */
            if ((r == 'p') != (t->role == QT_ROLE_PARAM) && !(r == 'p' && written[id] == 2))
                return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d holds %s, %s", which, i,
                                  qt_cg_op_name(o->kind), s, t->name,
                                  r == 'p' ? "expected a parameter" : "a parameter is read-only");
            if (r == 'p' && np < 2) pslot[np++] = id;
            if ((r == 'r' || r == 'a') && !written[id])
                return qt_cg_fail(err, errlen, "%s op %d (%s): reads %s before it is written",
                                  which, i, qt_cg_op_name(o->kind), t->name);
            if (r == 's' && t->role != QT_ROLE_SCRATCH)
                return qt_cg_fail(err, errlen, "%s op %d: scratch slot holds %s", which, i, t->name);
        }
        if (check_sizes(g, o, i, which, err, errlen)) return -1;
        for (int s = 0; s < ns; s++)
            if (o->t[s] >= 0 && (sl[s] == 'w' || sl[s] == 'a' || sl[s] == 's')) written[o->t[s]] = 1;
        if (o->kind == QT_OP_CTX_OWN_UNITS) written[QT_T(o, CTX_OWN_UNITS, y)] = 2;
        int wk = qt_cg_op_class(o->kind) == QT_OPC_WGRAD;
        if (wk != !!(o->flags & QT_OPF_WGRAD))
            return qt_cg_fail(err, errlen, "%s op %d (%s): QT_OPF_WGRAD flag mismatch", which, i,
                              qt_cg_op_name(o->kind));
        if (!wk) continue;
        for (int k = 0; k < 2; k++) {
            int64_t p = o->a[QT_A_WGRAD_PARAM + k];
            if (k == 1 && pslot[1] == QT_NONE) {
                if (p != -1)
                    return qt_cg_fail(err, errlen, "%s op %d: a%d must be -1", which, i,
                                      QT_A_WGRAD_PARAM + 1);
                continue;
            }
            /* the slot holds the parameter's tensor, or its backward gather clone */
            if (p < 0 || p >= g->np || pslot[k] < 0 || g->ts[pslot[k]].param != p)
                return qt_cg_fail(err, errlen, "%s op %d (%s): a%d=%lld does not name the "
                                  "parameter in its slot", which, i, qt_cg_op_name(o->kind),
                                  QT_A_WGRAD_PARAM + k, (long long)p);
            wgrad_count[p]++;
        }
    }
    return 0;
}

/* The held-out eval's forward (issue 33): the firmware runs microbatch ops [0, n_fwd) alone
 * between steps, so they must end with the cross entropy (XENT, or XENT_MTP with the MTP
 * head: its loss_seq is the main cross entropy, MaxText's eval loss; the head runs in the
 * eval as MaxText's does, its loss is not reported), hold no weight gradient and no
 * step op but the parameter gathers and their collectives, and wait for every collective
 * they start (a split all-gather of collective_overlap) before n_fwd. */
static int check_eval_forward(const qt_cg_graph *g, char *err, size_t errlen)
{
    /* a pipeline stage before the last has no loss (the firmware refuses its eval) */
    if (g->s->tr.eval_interval <= 0 || (g->s->pp_local && g->pp_dout != QT_NONE)) return 0;
    if (g->n_fwd < 1 ||
        (g->mb[g->n_fwd - 1].kind != QT_OP_XENT && g->mb[g->n_fwd - 1].kind != QT_OP_XENT_MTP))
        return qt_cg_fail(err, errlen, "the eval forward (microbatch ops 0..%d) does not end "
                          "with the cross entropy", g->n_fwd - 1);
    for (int i = 0; i < g->n_fwd; i++) {
        const qt_op *o = &g->mb[i];
        const int k = o->kind;
        if ((o->flags & QT_OPF_WGRAD) ||
            (qt_cg_op_class(k) == QT_OPC_STEP && k != QT_OP_PARAM_GATHER &&
             k != QT_OP_COLLECTIVE && k != QT_OP_COLL_START && k != QT_OP_COLL_WAIT))
            return qt_cg_fail(err, errlen, "eval forward op %d (%s) is a weight gradient or a "
                              "step op: the forward-only eval cannot run it", i,
                              qt_cg_op_name(k));
        if (k != QT_OP_COLL_START) continue;
        int j = i + 1;
        while (j < g->n_fwd && !(g->mb[j].kind == QT_OP_COLL_WAIT && g->mb[j].a[0] == o->a[0]))
            j++;
        if (j == g->n_fwd)
            return qt_cg_fail(err, errlen, "eval forward op %d starts collective %lld, which "
                              "the forward does not wait for (collective_overlap): the eval "
                              "would leave it in flight", i, (long long)o->a[0]);
    }
    return 0;
}

/* A circular pipeline stage's chunks (PP_CHUNK markers, num_pipeline_repeats > 1): the
 * firmware runs chunk c's forward ops alone (from its marker to the next, chunk 0 from op
 * 0) and at its backward that forward again followed by its backward ops alone (from the
 * end marker of chunk c + 1, or the forward's end, to its own end marker, chunk 0's to the
 * schedule's end), so each such
 * run must read only what it wrote itself, the parameters, the inputs, what the init
 * schedule wrote (the rotary table) and the chunk's
 * boundaries that the driver fills (its input and its output's gradient; with the MTP head
 * the last chunk's embeddings, the first chunk's their gradient); the subsequence
 * of the planned order keeps the arena's liveness. The markers: R forward ones in order,
 * R end markers in reverse order. */
static int check_chunks(const qt_cg_graph *g, char *err, size_t errlen)
{
    const int R = g->s->pp_local && g->s->pp_stages > 1 ? g->s->pp_repeats : 1;
    /* every gradient form: the microbatch form's pushes are the microbatch-end schedule's,
     * cut per chunk (schedule/step.c); the per-layer form's gathers and pushes lie inside
     * their chunk's runs (schedule/overlap.c moves none across a chunk's edge) */
    if (R <= 1) return 0;
    int *fm = qt_cg_alloc((size_t)(2 * R + 2) * sizeof *fm), *bm = fm + R + 1, nf = 0, nb = 0;
    int rc = 0;
    for (int i = 0; i < g->nmb && !rc; i++) {
        const qt_op *o = &g->mb[i];
        if (o->kind != QT_OP_PP_CHUNK) continue;
        const int bwd = QT_A(o, PP_CHUNK, bwd) != 0, want = bwd ? R - 1 - nb : nf;
        if (bwd != (i >= g->n_fwd) || QT_A(o, PP_CHUNK, chunk) != want || nf > R || nb > R)
            rc = qt_cg_fail(err, errlen, "internal error: pipeline chunk marker at op %d "
                            "(chunk %lld, bwd %d) out of order", i,
                            (long long)QT_A(o, PP_CHUNK, chunk), bwd);
        else if (bwd) bm[nb++] = i;
        else fm[nf++] = i;
    }
    if (!rc && (nf != R || nb != R))
        rc = qt_cg_fail(err, errlen, "internal error: %d forward and %d backward chunk markers "
                        "for %d repeats", nf, nb, R);
    unsigned char *written = qt_cg_alloc((size_t)g->nt * 2), *init = written + g->nt;
    int *count = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *count);
    for (int i = 0; i < g->nt; i++) {
        const int r = g->ts[i].t.role;
        init[i] = r == QT_ROLE_PARAM || r == QT_ROLE_INPUT;
    }
    if (!rc) rc = check_ops(g, g->init, g->ninit, "init", init, count, err, errlen);
    for (int c = 0; c < R && !rc; c++) {
        const qt_op *m = &g->mb[fm[c]];
        memcpy(written, init, (size_t)g->nt);
        if (QT_A(m, PP_CHUNK, in) != QT_NONE) written[QT_A(m, PP_CHUNK, in)] = 1;
        if (QT_A(m, PP_CHUNK, dout) != QT_NONE) written[QT_A(m, PP_CHUNK, dout)] = 1;
        /* a chunk with an input continues the running lb sums received with it */
        if (QT_A(m, PP_CHUNK, in) != QT_NONE && g->lb_seq != QT_NONE) written[g->lb_seq] = 1;
        /* the MTP head's embeddings: the last stage's last chunk reads them, stage 0's
         * first chunk their gradient (the driver fills both: runtime/pipeline.c) */
        if (c == R - 1 && g->pp_mtp_in != QT_NONE) written[g->pp_mtp_in] = 1;
        if (c == 0 && g->pp_mtp_dout != QT_NONE) written[g->pp_mtp_dout] = 1;
        const int f0 = c ? fm[c] : 0, f1 = c + 1 < R ? fm[c + 1] : g->n_fwd;
        const int b0 = c + 1 < R ? bm[R - 2 - c] + 1 : g->n_fwd, b1 = c ? bm[R - 1 - c] : g->nmb;
        char which[48];
        snprintf(which, sizeof which, "pipeline chunk %d forward", c);
        rc = check_ops(g, g->mb + f0, f1 - f0, which, written, count, err, errlen);
        snprintf(which, sizeof which, "pipeline chunk %d backward", c);
        if (!rc) rc = check_ops(g, g->mb + b0, b1 - b0, which, written, count, err, errlen);
    }
    free(written);
    free(count);
    free(fm);
    return rc;
}

int qt_cg_check_schedule(const qt_cg_graph *g, char *err, size_t errlen)
{
    unsigned char *written = qt_cg_alloc((size_t)g->nt);
    int *count = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *count);
    for (int i = 0; i < g->nt; i++) {
        int r = g->ts[i].t.role;
        written[i] = r == QT_ROLE_PARAM || r == QT_ROLE_INPUT;
    }
    /* a pipeline stage's boundaries that the driver fills before the schedule runs: the input
     * (received from the stage before), the output's gradient (from the stage after) and
     * the running lb sums */
    if (g->s->pp_local) {
        if (g->pp_in != QT_NONE) written[g->pp_in] = 1;
        if (g->pp_dout != QT_NONE) written[g->pp_dout] = 1;
        /* the MTP head's embeddings (the last stage) and their gradient (stage 0) */
        if (g->pp_mtp_in != QT_NONE) written[g->pp_mtp_in] = 1;
        if (g->pp_mtp_dout != QT_NONE) written[g->pp_mtp_dout] = 1;
        /* the running lb sums of the stages before (stages > 0; a circular stage 0's
         * ZERO of lb_seq is in its first chunk) */
        if (g->pp_in != QT_NONE && g->lb_seq != QT_NONE) written[g->lb_seq] = 1;
        for (int i = 0; i < g->nmb; i++) /* a circular stage's chunks' (PP_CHUNK) */
            if (g->mb[i].kind == QT_OP_PP_CHUNK) {
                const int64_t in = QT_A(&g->mb[i], PP_CHUNK, in), d = QT_A(&g->mb[i], PP_CHUNK, dout);
                if (in != QT_NONE) written[in] = 1;
                if (d != QT_NONE) written[d] = 1;
            }
    }
    int rc = check_ops(g, g->init, g->ninit, "init", written, count, err, errlen);
    if (!rc) rc = check_ops(g, g->mb, g->nmb, "microbatch", written, count, err, errlen);
    if (!rc) rc = check_chunks(g, err, errlen);
    if (!rc) rc = check_eval_forward(g, err, errlen);
    for (int p = 0; !rc && p < g->np; p++)
        if (count[p] != 1)
            rc = qt_cg_fail(err, errlen, "param %s has %d WGRAD producers, expected 1",
                            g->ps[p].name, count[p]);
    free(written);
    free(count);
    return rc;
}
