#!/usr/bin/env bash
# bench_flops.sh - sourced by the bench scripts: the model FLOPs per token of a run config,
# counted as docs/bench.md says (training = 3 x forward, forward = 2 x multiply-accumulates):
# every projection and expert matmul a token touches (k routed experts + shared expert +
# router + lm_head), the causal attention score/value products (S/2 keys on average) and the
# gated delta rule (~3 Dk x Dv products per value head and token).
#
# bench_model RUN sets: d L cyc hq hkv hd hk hv dk dv E k f fs V S b (the resolved keys, the
# run file over its model file) and fpt (model FLOPs per token, fwd + bwd). configgen prints
# the same count in plan.txt ("model FLOPs", the main model's row: model/flops.c); when
# generated/RUN/plan.txt exists the two must agree, else bench_model fails (status 1).
bench_model() {
  local run=configgen/configs/runs/$1.yml
  local model=configgen/configs/models/$(awk -F': *' '$1=="model_name"{gsub(/"/,"",$2);print $2}' "$run").yml
  get() { awk -F': *' -v k="$1" '$1==k{sub(/ *#.*/,"",$2);gsub(/"/,"",$2);print $2}' "$model" "$run" | tail -n1; }
  d=$(get base_emb_dim); L=$(get base_num_decoder_layers); cyc=$(get inhomogeneous_layer_cycle_interval)
  hq=$(get base_num_query_heads); hkv=$(get base_num_kv_heads); hd=$(get head_dim)
  hk=$(get gdn_num_key_heads); hv=$(get gdn_num_value_heads); dk=$(get gdn_key_head_dim); dv=$(get gdn_value_head_dim)
  E=$(get num_experts); k=$(get num_experts_per_tok); f=$(get base_moe_mlp_dim); fs=$(get shared_expert_mlp_dim)
  V=$(get vocab_size); S=$(get max_target_length); b=$(get per_device_batch_size)
  [ -z "$fs" ] || [ "$fs" = "-1" ] && fs=$f
  fpt=$(awk -v d=$d -v L=$L -v c=$cyc -v hq=$hq -v hkv=$hkv -v hd=$hd -v hk=$hk -v hv=$hv -v dk=$dk -v dv=$dv \
            -v E=$E -v k=$k -v f=$f -v fs=$fs -v V=$V -v S=$S 'BEGIN{
    na=L/c; ng=L-na
    gdn = d*(2*hk*dk+2*hv*dv) + d*2*hv + hv*dv*d + 3*hv*dk*dv
    att = d*2*hq*hd + 2*d*hkv*hd + hq*hd*d + hq*hd*S
    moe = d*E + k*3*d*f + 3*d*fs + d
    fwd = 2*(ng*gdn + na*att + L*moe + d*V)
    printf "%.0f", 3*fwd }')
  local plan=generated/$1/plan.txt pf
  if [ -f "$plan" ]; then
    pf=$(awk '$1 == "main" && $2 == "fwd" {print $5}' "$plan")
    [ "$pf" = "$fpt" ] || {
      echo "bench_flops.sh: $plan counts ${pf:-no} model FLOPs per token for the main model, this script $fpt" >&2
      return 1; }
  fi
}
