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
 * per token). Other dimensions (a fuzzed config's 10^10-wide model, say) are counted in
 * long double (exact below 2^64) and, where a count reaches 2^58 (so 3 x sums of them stay
 * in int64), f->too_big is set and every count is 0: plan.txt then says so.
 */
#include <string.h>
#include "core/qt_cg.h"
#include "model/qt_cg_model.h"

/* v as an exact int64 when below 2^58, else 0 with *big set. */
static int64_t qt_flops_count(long double v, int *big)
{
    if (v < 0 || v >= 0x1p58L) {
        *big = 1;
        return 0;
    }
    return (int64_t)v;
}

void qt_cg_model_flops(const qt_model_dims *m, int64_t S, int64_t mtp_layers, qt_cg_flops *f)
{
    typedef long double ld;
    const ld d = m->d;
    const ld hk = m->gdn_k_heads, hv = m->gdn_v_heads, dk = m->gdn_k_dim, dv = m->gdn_v_dim;
    const ld hq = m->n_q_heads, hkv = m->n_kv_heads, hd = m->head_dim;
    const ld E = m->n_experts, k = m->top_k, fm = m->moe_dim, fs = m->shared_dim;
    int big = 0;
    memset(f, 0, sizeof *f);
    f->n_attn = m->n_layers / (m->cycle > 0 ? m->cycle : 1);
    f->n_gdn = m->n_layers - f->n_attn;
    f->n_moe = m->n_layers;
    f->n_mtp = mtp_layers > 0 ? mtp_layers : 0;
    f->gdn_proj = qt_flops_count(d * (2 * hk * dk + 2 * hv * dv) + 2 * d * hv + hv * dv * d, &big);
    f->gdn_delta = qt_flops_count(3 * hv * dk * dv, &big);
    f->gdn_conv = qt_flops_count((ld)m->gdn_conv * (2 * hk * dk + hv * dv), &big);
    f->attn_proj = qt_flops_count(2 * d * hq * hd + 2 * d * hkv * hd + hq * hd * d, &big);
    f->attn_core = qt_flops_count(hq * hd * (ld)S, &big);
    f->router = qt_flops_count(d * E, &big);
    f->routed = qt_flops_count(k * 3 * d * fm, &big);
    f->shared = qt_flops_count(3 * d * fs + d, &big);
    f->lm_head = qt_flops_count(d * (ld)m->vocab, &big);
    f->mtp_fc = qt_flops_count(2 * d * d, &big);
    const ld main_mac = (ld)f->n_gdn * ((ld)f->gdn_proj + f->gdn_delta) +
                        (ld)f->n_attn * ((ld)f->attn_proj + f->attn_core) +
                        (ld)f->n_moe * ((ld)f->router + f->routed + f->shared) + f->lm_head;
    const ld mtp_mac = (ld)f->n_mtp * ((ld)f->mtp_fc + f->attn_proj + f->attn_core + f->router +
                                       f->routed + f->shared + f->lm_head);
    f->fwd_main = qt_flops_count(2 * main_mac, &big);
    f->fwd_mtp = qt_flops_count(2 * mtp_mac, &big);
    if (big) {
        const int64_t n_gdn = f->n_gdn, n_attn = f->n_attn, n_moe = f->n_moe, n_mtp = f->n_mtp;
        memset(f, 0, sizeof *f);
        f->n_gdn = n_gdn, f->n_attn = n_attn, f->n_moe = n_moe, f->n_mtp = n_mtp;
        f->too_big = 1;
    }
}
