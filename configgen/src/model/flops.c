/* model/flops.c - the model FLOPs per token of a plan's model, counted from its dimensions
 * as docs/bench.md defines them (tests/scripts/bench_flops.sh counts the same; plan.txt's
 * "model FLOPs" section prints them, emit/report_flops.c).
 *
 * Forward FLOPs per token = 2 x the multiply-accumulates (MACs) the token touches; training
 * = 3 x forward. With d the width, S the sequence length (max_target_length), V the vocab:
 *   GDN layer (L - L/cycle of them):
 *     projections   d (2 hk dk + 2 hv dv)  in_proj q, k (hk dk each), v, z (hv dv each)
 *                   + 2 d hv               in_proj b, a
 *                   + hv dv d              out_proj
 *     delta rule    3 hv dk dv             (3 Dk Dv per value head and token)
 *   full-attention layer (L/cycle of them: (l+1) % cycle == 0):
 *     projections   2 d hq hd              q_proj (queries and their output gate)
 *                   + 2 d hkv hd           k_proj, v_proj
 *                   + hq hd d              o_proj
 *     core          hq hd S                causal scores and values: S/2 keys on average
 *                                          for each of q.k and p.v
 *   MoE (every layer):
 *     router        d E
 *     routed        k 3 d f                the top-k experts (gate, up, down), not all E
 *     shared        3 d fs + d             the shared expert and its gate (d -> 1)
 *   lm_head         d V                    (the embedding is a lookup: 0)
 *   MTP head, per depth (mtp_num_layers of them): mtp.fc 2 d d, one full-attention layer
 *     (projections, core, router, routed, shared as above) and a second lm_head pass.
 * Not counted (the bench convention: elementwise or per-channel work): the norms, rotary,
 * the GDN causal conv (conv x (2 hk dk + hv dv) MACs per token and GDN layer, reported
 * apart as gdn_conv), gates and activations, the softmax, the loss; and no recompute
 * (remat): these are model FLOPs.
 * Invariants: depends only on the dims, S and the MTP depth; every count is exact in int64
 * for the configs the settings accept (the largest, 397B at 65536 tokens, stays below 2^40
 * per token).
 */
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"

void qt_cg_model_flops(const qt_model_dims *m, int64_t S, int64_t mtp_layers, qt_cg_flops *f)
{
    const int64_t d = m->d, L = m->n_layers, c = m->cycle > 0 ? m->cycle : 1;
    const int64_t hk = m->gdn_k_heads, hv = m->gdn_v_heads, dk = m->gdn_k_dim,
                  dv = m->gdn_v_dim;
    const int64_t hq = m->n_q_heads, hkv = m->n_kv_heads, hd = m->head_dim;
    const int64_t E = m->n_experts, k = m->top_k, fm = m->moe_dim, fs = m->shared_dim;
    f->n_attn = L / c;
    f->n_gdn = L - f->n_attn;
    f->n_moe = L;
    f->n_mtp = mtp_layers > 0 ? mtp_layers : 0;
    f->gdn_proj = d * (2 * hk * dk + 2 * hv * dv) + 2 * d * hv + hv * dv * d;
    f->gdn_delta = 3 * hv * dk * dv;
    f->gdn_conv = m->gdn_conv * (2 * hk * dk + hv * dv);
    f->attn_proj = 2 * d * hq * hd + 2 * d * hkv * hd + hq * hd * d;
    f->attn_core = hq * hd * S;
    f->router = d * E;
    f->routed = k * 3 * d * fm;
    f->shared = 3 * d * fs + d;
    f->lm_head = d * m->vocab;
    f->mtp_fc = 2 * d * d;
    const int64_t main_mac = f->n_gdn * (f->gdn_proj + f->gdn_delta) +
                             f->n_attn * (f->attn_proj + f->attn_core) +
                             f->n_moe * (f->router + f->routed + f->shared) + f->lm_head;
    const int64_t mtp_mac = f->n_mtp * (f->mtp_fc + f->attn_proj + f->attn_core + f->router +
                                        f->routed + f->shared + f->lm_head);
    f->fwd_main = 2 * main_mac;
    f->fwd_mtp = 2 * mtp_mac;
}
