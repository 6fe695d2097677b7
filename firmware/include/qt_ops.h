/* qt_ops.h - the op kinds of a plan and the exact meaning of every slot of an op record.
 *
 * This file is the contract between configgen (which emits op records), the firmware
 * (which executes them) and the PyTorch reference (which produces golden values for each
 * op with the same layouts). Change it only together with all three.
 *
 * Conventions
 *  - b = sequences in the microbatch, S = sequence length, T = b*S token rows. Row t belongs
 *    to sequence t / S at position t % S. Every op that mixes tokens (conv, delta rule,
 *    attention, rotary positions) does so only inside one sequence.
 *  - Weights use the Hugging Face layout [out, in]: a projection is y = x W^T.
 *  - "writes" overwrites the output; "accumulates" adds (+=) into it. Every backward
 *    (BWD) op accumulates into activation gradients; configgen zeroes each gradient buffer
 *    with QT_OP_ZERO before its first writer.
 *  - WGRAD ops compute a weight gradient for ONE sequence: the interpreter calls the
 *    wgrad wrapper once per sequence s of the microbatch with zeroed destination buffers,
 *    and pushes each result as a leaf into that parameter's pairwise tree (design.md s.6).
 *    A wgrad wrapper therefore reads rows [s*S, (s+1)*S) only and accumulates into dW.
 *    WGRAD ops carry QT_OPF_WGRAD and name their parameters in t[] slots listed below;
 *    the parameter index (into plan->params) of slot p is in a[8] (first) and a[9] (second,
 *    or -1).
 *  - Reductions run in a fixed, documented order (noted per op) so bits never depend on
 *    anything but the inputs.
 *  - r = Hv/Hk (GDN value heads per key head); G = 2*Dk + 2*r*Dv is the width of one key
 *    head group in in_proj_qkvz; Cc = 2*Hk*Dk + Hv*Dv conv channels.
 *  - GDN grouped layouts (exactly HF Qwen3-Next):
 *      qkvz column of q[h][i]      = h*G + i
 *      qkvz column of k[h][i]      = h*G + Dk + i
 *      qkvz column of v[j][i]      = h*G + 2*Dk + u*Dv + i          (j = h*r + u)
 *      qkvz column of z[j][i]      = h*G + 2*Dk + r*Dv + u*Dv + i
 *      ba column of b[j]           = h*2r + u,   of a[j] = h*2r + r + u
 *      conv channel of q[h][i] = h*Dk + i; k[h][i] = Hk*Dk + h*Dk + i;
 *      v[j][i] = 2*Hk*Dk + j*Dv + i.   Value head j reads key head h = j / r.
 *  - Attention q_proj output row is per head [q (hd) | gate (hd)]: q[t][h][i] at
 *    qg[t*Hq*2hd + h*2hd + i], gate at ... + hd + i.
 */
#ifndef QT_OPS_H
#define QT_OPS_H

#include "qt_plan.h"

#define QT_OPF_WGRAD 0x1u
#define QT_RMSNORM_ZERO_CENTRED 0x1   /* a[4] flag: scale by (1 + w) instead of w */
#define QT_GATE_HEADS 0               /* SIGMOID_GATE a[2]: gate interleaved in q_proj output */
#define QT_GATE_ROW 1                 /* SIGMOID_GATE a[2]: one gate scalar per row */

enum qt_op_kind {
    QT_OP_NOP = 0,

    /* ZERO: t0 tensor (F32 or I32). a0 elements. writes 0. */
    QT_OP_ZERO,
    /* ADD: t0 y[n] writes a + b; t1 a[n]; t2 b[n]. a0 n. */
    QT_OP_ADD,
    /* ACC: t0 dst[n] accumulates src; t1 src[n]. a0 n. */
    QT_OP_ACC,

    /* EMBED_FWD: t0 x[T,d] writes W[tok[t]]; t1 tokens I32[T]; t2 W[V,d]. a0 T, a1 d, a2 V.
       A token outside [0,V) gives a zero row (a memory guard; ids are validated at load). */
    QT_OP_EMBED_FWD,
    /* EMBED_WGRAD: t0 dx[T,d]; t1 tokens; t2 W (param). a0 T, a1 d, a2 V, a3 S.
       dW[tok[t]] += dx[t] for t of the sequence in increasing t. */
    QT_OP_EMBED_WGRAD,

    /* RMSNORM_FWD: rows r in [0,R): x_r = x + r*xs (n values), y_r = y + r*ys.
       rstd_r = 1/sqrt(mean(x_r^2) + eps) (sum of squares in increasing i, in float);
       y_r[i] = (x_r[i]*rstd_r) * s[i], s = (1 + w) if zero-centred else w.
       t0 y (writes); t1 rstd[R] (writes); t2 x; t3 w[n].
       a0 R, a1 n, a2 xs, a3 ys, a4 flags, f0 eps. */
    QT_OP_RMSNORM_FWD,
    /* RMSNORM_BWD: t0 dx (accumulates, stride xs); t1 dy (stride ys); t2 x; t3 w; t4 rstd.
       attributes as FWD. */
    QT_OP_RMSNORM_BWD,
    /* RMSNORM_WGRAD: t0 dy; t1 x; t2 rstd; t3 w (param). attributes as FWD plus
       a5 rows per sequence (rows [s*a5, (s+1)*a5)). dw[i] += dy_r[i]*(x_r[i]*rstd_r), added
       row by row in increasing r. */
    QT_OP_RMSNORM_WGRAD,

    /* MATMUL_FWD: t0 y[M,N] writes x W^T; t1 x[M,K]; t2 W[N,K]. a0 M, a1 N, a2 K. */
    QT_OP_MATMUL_FWD,
    /* MATMUL_BWD_DATA: t0 dx[M,K] accumulates dy W; t1 dy[M,N]; t2 W[N,K]. a0 M,a1 N,a2 K. */
    QT_OP_MATMUL_BWD_DATA,
    /* MATMUL_WGRAD: t0 dy[M,N]; t1 x[M,K]; t2 W (param). a0 M, a1 N, a2 K, a3 rows/seq.
       dW[n,k] += sum over rows m of the sequence of dy[m,n]*x[m,k]. */
    QT_OP_MATMUL_WGRAD,

    /* SWIGLU_FWD: t0 h[n] writes silu(a)*u; t1 a[n]; t2 u[n]. a0 n. */
    QT_OP_SWIGLU_FWD,
    /* SWIGLU_BWD: t0 da (acc); t1 du (acc); t2 dh; t3 a; t4 u. a0 n. */
    QT_OP_SWIGLU_BWD,

    /* SIGMOID_GATE_FWD: t0 y[T,n] writes x * sigmoid(gate); t1 x[T,n]; t2 gate source.
       a0 T, a1 n, a2 mode, a3 hd (HEADS mode: n = H*hd and the gate of x[t][h*hd+i] is the
       q_proj gate half, qg[t*H*2hd + h*2hd + hd + i]); ROW mode: gate[t], a3 = 0. */
    QT_OP_SIGMOID_GATE_FWD,
    /* SIGMOID_GATE_BWD: t0 dx (acc); t1 dgate (acc, same layout as the gate source);
       t2 dy; t3 x; t4 gate source. attributes as FWD. ROW mode: dgate[t] sums over n in
       increasing order. */
    QT_OP_SIGMOID_GATE_BWD,

    /* GDN_CONV_FWD: causal depthwise conv + SiLU over the [q|k|v] channels of qkvz.
       pre[t,c] = sum_{j=0..K-1} w[c,j] * u[t-K+1+j, c] (j increasing; u = 0 before the
       start of the sequence), c[t,c] = silu(pre[t,c]).
       t0 c[T,Cc] (writes); t1 pre[T,Cc] (saved); t2 qkvz[T, Hk*G]; t3 w (HF conv1d weight
       [Cc,1,K], i.e. w[c*K + j]). a0 b, a1 S, a2 Hk, a3 Dk, a4 Hv, a5 Dv, a6 K.
       Every BWD and WGRAD op below carries the attributes of its FWD op unless it says
       otherwise. */
    QT_OP_GDN_CONV_FWD,
    /* GDN_CONV_BWD: t0 dqkvz (acc, q/k/v columns only); t1 dc; t2 pre; t3 w. attrs as FWD. */
    QT_OP_GDN_CONV_BWD,
    /* GDN_CONV_WGRAD: t0 dc; t1 pre; t2 qkvz; t3 w (param). attrs as FWD. */
    QT_OP_GDN_CONV_WGRAD,

    /* GDN_GATES_FWD: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias).
       t0 beta[T,Hv] (writes); t1 g[T,Hv] (writes); t2 ba[T,2Hv]; t3 A_log[Hv];
       t4 dt_bias[Hv]. a0 T, a1 Hk, a2 Hv. */
    QT_OP_GDN_GATES_FWD,
    /* GDN_GATES_BWD: t0 dba (acc); t1 dbeta; t2 dg; t3 ba; t4 A_log; t5 dt_bias. */
    QT_OP_GDN_GATES_BWD,
    /* GDN_GATES_WGRAD: t0 dg; t1 ba; t2 A_log (param, a8 -> dw[0]); t3 dt_bias (param,
       a9 -> dw[1]). a0 T, a1 Hk, a2 Hv, a3 S. */
    QT_OP_GDN_GATES_WGRAD,

    /* GDN_CORE_FWD: head repeat, l2norm, scale and the gated delta rule.
       For value head j (key head h = j/r), per sequence, S_0 = 0, for each t:
         rq = 1/sqrt(sum q_h^2 + l2eps), rk likewise; qh = q_h*rq*qscale; kh = k_h*rk;
         a = exp(g_t,j); S' = a*S; pred = S'^T kh; delta = beta_t,j*(v_j - pred);
         S = S' + kh delta^T; o_t,j = S^T qh.
       t0 o[T,Hv*Dv] (writes); t1 states[b,Hv,nchunks,Dk*Dv] (saved: state before the
       first token of each chunk of a6 tokens); t2 rq[T,Hk] (saved); t3 rk[T,Hk] (saved);
       t4 c[T,Cc] (conv output); t5 g[T,Hv]; t6 beta[T,Hv]; t7 scratch (SCRATCH; a7 = 1:
       2*C*Dk + 2*C*Dv + 4*C*C + 3*C floats with C = min(a6, S); a7 = 0: unused, 1 float).
       a0 b, a1 S, a2 Hk, a3 Dk, a4 Hv, a5 Dv, a6 chunk, a7 algorithm (0 recurrent:
       gdn_core.c, per-token updates; 1 chunked WY form: gdn_chunk.c, per chunk of a6
       tokens, same saved tensors, results differ at rounding level and depend on a6),
       f0 qscale (Dk^-1/2), f1 l2eps. */
    QT_OP_GDN_CORE_FWD,
    /* GDN_CORE_BWD: t0 dc (acc); t1 dg (acc); t2 dbeta (acc); t3 do; t4 c; t5 g; t6 beta;
       t7 states; t8 rq; t9 rk; t10 scratch (SCRATCH; a7 = 0: (a6+1)*Dk*Dv + 4*Dk + 4*Dv
       floats; a7 = 1: Dk*Dv + 4*C*Dk + 4*C*Dv + 7*C*C + 5*C, C = min(a6, S)).
       attrs as FWD (a7 must match the forward's). Key-head gradients: each value head j = h*r..h*r+r-1, in increasing j,
       adds its l2norm-backward result straight into dc. Dot products over Dv use 8
       interleaved partial sums combined by a fixed pairwise tree (gdn_core.c). */
    QT_OP_GDN_CORE_BWD,

    /* GATED_RMSNORM_FWD: per (t, value head j): rstd = 1/sqrt(mean(o^2)+eps),
       y[i] = ((o[i]*rstd) * w[i]) * silu(z[j][i]), z read from qkvz (grouped layout).
       t0 y[T,Hv*Dv] (writes); t1 rstd[T*Hv] (saved); t2 o[T,Hv*Dv]; t3 qkvz; t4 w[Dv].
       a0 T, a1 Hk, a2 Dk, a3 Hv, a4 Dv, f0 eps. */
    QT_OP_GATED_RMSNORM_FWD,
    /* GATED_RMSNORM_BWD: t0 do (acc); t1 dqkvz (acc, z columns only); t2 dy; t3 o; t4 qkvz;
       t5 w; t6 rstd. */
    QT_OP_GATED_RMSNORM_BWD,
    /* GATED_RMSNORM_WGRAD: t0 dy; t1 o; t2 qkvz; t3 rstd; t4 w (param). a5 S. */
    QT_OP_GATED_RMSNORM_WGRAD,

    /* ROPE_TABLE (init schedule): t0 table[S, R/2, 2] writes (cos, sin) of
       pos * theta^(-2i/R), computed in double with the project's own functions.
       a0 S, a1 R (rotary dim), f0 theta. */
    QT_OP_ROPE_TABLE,
    /* ROPE_FWD: rotate-half on the first R dims of each head, position = t % S:
       y[i] = x[i]*cos - x[i+R/2]*sin, y[i+R/2] = x[i+R/2]*cos + x[i]*sin (i < R/2),
       y[i] = x[i] for i >= R. t0 y[T,H,hd] (writes); t1 x[T,H,hd]; t2 table.
       a0 b, a1 S, a2 H, a3 hd, a4 R. */
    QT_OP_ROPE_FWD,
    /* ROPE_BWD: t0 dx (acc); t1 dy; t2 table. attrs as FWD. */
    QT_OP_ROPE_BWD,

    /* ATTN_FWD: causal softmax attention with GQA (query head h uses kv head
       h / (Hq/Hkv)), per sequence. s_ij = (q_i . k_j) * scale for j <= i;
       lse_i = m + log(sum_j exp(s_ij - m)); o_i = sum_j exp(s_ij - lse_i) v_j (j increasing).
       t0 o[T,Hq*hd] (writes); t1 lse[b,Hq,S] (saved); t2 q[T,Hq,hd]; t3 k[T,Hkv,hd];
       t4 v[T,Hkv,hd]; t5 scratch (SCRATCH, >= S floats). a0 b, a1 S, a2 Hq, a3 Hkv, a4 hd,
       f0 scale. */
    QT_OP_ATTN_FWD,
    /* ATTN_BWD: t0 dq (acc); t1 dk (acc); t2 dv (acc); t3 do; t4 q; t5 k; t6 v; t7 o;
       t8 lse; t9 scratch (SCRATCH, >= S floats; configgen plans QT_ATTN_BWD_SCRATCH(S) =
       8*S (kernels/attention.h), which the blocked fast path needs; with less the kernel
       takes its reference path, same bits). attrs as FWD.
       ds_ij = p_ij (do_i.v_j - do_i.o_i); dq_i += sum_j (scale*ds_ij) k_j;
       dk_j += (scale*ds_ij) q_i; dv_j += p_ij do_i. */
    QT_OP_ATTN_BWD,

    /* MOE_ROUTE_FWD: top-k on raw logits (descending; ties to the lower expert index),
       slot order = that order; p = softmax over the k selected logits
       (m = logit of slot 0, e_s = exp(l_s - m), sum in slot order, p_s = e_s/sum).
       Optional load-balance term when f0 = c != 0: for each sequence,
       lb_seq[s] += c * sum_e f_e * Pbar_e with f_e = (1/S) * #(t,slot) routed to e and
       Pbar_e = (1/S) sum_t softmax(all E logits)_e.
       t0 idx I32[T,k] (writes); t1 p[T,k] (writes); t2 lb_seq[b] (acc, or QT_NONE);
       t3 logits[T,E]. a0 T, a1 E, a2 k, a3 S, f0 c. The load-balance accumulators live on the
       stack: E <= QT_MOE_MAX_EXPERTS (1024, moe_route.h) when c != 0; configgen rejects more. */
    QT_OP_MOE_ROUTE_FWD,
    /* MOE_ROUTE_BWD: t0 dlogits (acc); t1 dp; t2 logits; t3 idx; t4 p. attrs as FWD except
       f0: the load-balance gradient flows through Pbar with coefficient f0 (seed 1 on
       lb_seq). configgen sets f0 = c * (global tokens per step) because the runtime divides
       every gradient by that count at the end, and the load-balance term must not be. */
    QT_OP_MOE_ROUTE_BWD,

    /* EXPERT_FFN_FWD: for each (t, slot) with e = idx[t,slot]:
       gu[t*k+slot] = W_gu[e] x_t (2f: gate rows [0,f), up rows [f,2f)),
       y[t*k+slot] = W_down[e] (silu(gate) * up). Unweighted; MOE_COMBINE weights it.
       t0 y[T*k,d] (writes); t1 gu[T*k,2f] (saved); t2 x[T,d]; t3 idx[T,k];
       t4 W_gu[E,2f,d]; t5 W_down[E,d,f]; t6 scratch (SCRATCH, >= max(T*k*(d+f), S*(d+3f))
       floats, so one sequence's rows always fit and the WGRAD bits do not depend on T).
       a0 T, a1 k, a2 E, a3 d, a4 f. */
    QT_OP_EXPERT_FFN_FWD,
    /* EXPERT_FFN_BWD: t0 dx[T,d] (acc; per token the slots add in increasing slot order);
       t1 dy[T*k,d]; t2 x; t3 idx; t4 gu; t5 W_gu; t6 W_down; t7 scratch; t8 dgu[T*k,2f]
       (optional, writes: row r = d(gate, up) of the rows with a valid expert, kept for
       the WGRAD so it does not recompute it). attrs as FWD. */
    QT_OP_EXPERT_FFN_BWD,
    /* EXPERT_FFN_WGRAD: t0 dy; t1 x; t2 idx; t3 gu; t4 W_gu (param, a8); t5 W_down
       (param, a9); t6 scratch; t7 dgu (optional: the BWD's t8; without it d(gu) is
       recomputed, same bits). a0..a4 as FWD, a5 S. Rows (t, slot) of the sequence in
       increasing t then slot. */
    QT_OP_EXPERT_FFN_WGRAD,

    /* MOE_COMBINE_FWD: out[t] = sum_slot p[t,slot] * y[t*k+slot] (slot increasing).
       t0 out[T,d] (writes); t1 p[T,k]; t2 y[T*k,d]. a0 T, a1 k, a2 d. */
    QT_OP_MOE_COMBINE_FWD,
    /* MOE_COMBINE_BWD: t0 dp (acc); t1 dy (acc); t2 dout; t3 p; t4 y. */
    QT_OP_MOE_COMBINE_BWD,

    /* XENT: fused cross-entropy forward and backward with seed 1 on the un-normalised sum.
       loss_seq[s] = sum over t of sequence s (increasing) of lse_t - logit_t[target_t];
       dlogits[t] = softmax(logits_t) - onehot(target_t), softmax_v = exp(l_v - m) * (1/sum),
       m the row max, sum over v increasing. A target outside [0,V) (never produced by the data
       loader, which validates ids) adds no loss and no one-hot term.
       t0 loss_seq[b] (writes); t1 dlogits[T,V] (writes); t2 logits[T,V]; t3 targets I32[T].
       a0 b, a1 S, a2 V. */
    QT_OP_XENT,

    /* ---- the step schedule (plan->step_ops), run once per optimizer step after the last
       microbatch. These ops have no tensor slots: they work on the plan's flat parameter,
       gradient, Adam and tree regions, and their wrappers live in firmware/runtime/runtime.c
       because they read and write the step's state (token count, norm, learning rate). */
    /* GRAD_FINALIZE: complete the pairwise-tree total of the a0 leaves in place in the
       gradient region, which is the top tree level (grads_offset ==
       tree_offset[n_tree_levels-1]): the lower occupied levels are summed lowest first and
       added as top = top + rest; then divide each element by a1 (the step's global
       target-token count, as a float) and take the exact sum of squares of the result for
       the global norm. */
    QT_OP_GRAD_FINALIZE,
    /* ADAMW: global-norm clipping at train.clip (the scale is folded into the update),
       AdamW with the step's learning rate over every parameter, and the parameter
       fingerprint. */
    QT_OP_ADAMW,

    /* COLLECTIVE: runs plan->collectives[a0] (qt_plan.h). The place in the schedule where
       the multi-rank plans put their exchanges; one-rank plans contain none, and the
       single-rank firmware has no wrapper for it, so it refuses such a plan at init. */
    QT_OP_COLLECTIVE,

    QT_OP_COUNT
};

/* Op wrappers. `run` executes a forward, backward or init op. `wgrad` computes the weight
 * gradient(s) of one sequence `seq` of the microbatch into dw[0] (and dw[1]), which the
 * caller has zeroed; the wrapper accumulates. */
typedef void (*qt_run_fn)(const qt_op *op, const qt_ctx *ctx);
typedef void (*qt_wgrad_fn)(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);

typedef struct qt_kernel_entry {
    const char *name;
    qt_run_fn run;        /* NULL for WGRAD kinds */
    qt_wgrad_fn wgrad;    /* NULL for other kinds */
} qt_kernel_entry;

/* Indexed by enum qt_op_kind (firmware/ops/op_table.c). */
extern const qt_kernel_entry qt_kernel_table[QT_OP_COUNT];

#endif
