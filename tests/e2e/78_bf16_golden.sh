# 78_bf16_golden.sh - whole model in bf16 against the float64 PyTorch reference (sourced by
# run_all.sh; docs/precision.md, "Whole model in bf16 against the float64 reference").
#
# The goldens of 10_golden.sh (tests/golden/e2e/test-{next,35}-tiny: float64 reference from
# the same fp32 initial weights) against bf16-{next,35}-tiny (those runs in dtype bfloat16):
# the step-0 gradients and 10 AdamW steps. bf16 runs are bit-reproducible (77_bf16.sh), so
# these figures are exact on every machine; the tolerances are about 2x the larger of the
# two decoders' measured maxima (measured when written), leaving room for legitimate changes
# of the bf16 arithmetic, not for noise.
#
# Step-0 gradients, per tensor (max |g - g_ref| / max |g_ref|, st_compare's convention):
#   routed experts and router (*.mlp.experts.*, *.mlp.gate.weight): bound 1.4, measured
#     2.6e-2 (next), 0.68 (35: bf16 router logits send some tokens of layer 2 to another
#     expert than the float64 reference does; the golden's router-margin guarantee is for
#     fp32 logits, so per-tensor errors of flipped experts are O(1));
#   GDN decay gate (A_log, dt_bias, in_proj_a / in_proj_ba, each a long sum over tokens with
#     cancellation) and the MoE-input norm (post_attention_layernorm: a flipped route changes
#     its gradient directly): bound 0.2, measured 8.4e-2 (next A_log L2), 9.8e-2 (35 L2
#     post_attention_layernorm, the flipped layer);
#   every other tensor: bound 7e-2, measured 2.8e-2 (next conv1d L2), 3.6e-2 (35 shared
#     expert up_proj L1).
# Global ||g - g_ref||_2 / ||g_ref||_2 over all tensors (the routed ones included): bound
#   2.8e-2, measured 1.37e-2 (next), 1.33e-2 (35): bf16's 2^-8 relative rounding, averaged.
# 10 steps (metrics_compare, relative per step): loss bound 8e-4, measured 3.9e-4 (next
#   step 6), 1.9e-4 (35); pre-clip grad norm bound 6.5e-2, measured 6.4e-3 (next), 3.2e-2
#   (35 step 9, the flipped routes).
B16G_RULES=(--tol '*.mlp.experts.*' 1.4 --tol '*.mlp.gate.weight' 1.4
            --tol '*.A_log' 0.2 --tol '*.dt_bias' 0.2 --tol '*.in_proj_*a.weight' 0.2
            --tol '*.post_attention_layernorm.weight' 0.2 --global 2.8e-2)
B16G_TOL=7e-2

# b16g_run MODEL: runs bf16-MODEL-tiny from the reference's weights and tokens (cached):
# $QT_TMP/bf16g/MODEL.{jsonl,grads0.safetensors}.
b16g_run() {
  local m=$1 g=tests/golden/e2e/test-$1-tiny d=$QT_TMP/bf16g
  mkdir -p "$d"
  [ -s "$d/$m.grads0.safetensors" ] && return 0
  [ -f "$g/init.safetensors" ] || { echo "missing goldens in $g (make goldens)"; return 1; }
  timeout 120 build/bf16-$m-tiny/qtrain load="$g/init.safetensors" data="$g/tokens.npy" steps=10 \
    metrics="$d/$m.jsonl" dump_grads="$d/$m.grads0.safetensors" > "$d/$m.out" 2>&1 \
    || { tail -5 "$d/$m.out"; rm -f "$d/$m.grads0.safetensors"; return 1; }
}

b16g_check() {
  local m=$1 g=tests/golden/e2e/test-$1-tiny d=$QT_TMP/bf16g
  b16g_run "$m" || return 1
  build/tools/st_compare "$d/$m.grads0.safetensors" "$g/grads0.safetensors" $B16G_TOL \
    "${B16G_RULES[@]}" || return 1
  build/tools/metrics_compare "$d/$m.jsonl" "$g/expected.json" 8e-4 6.5e-2
}
check "bf16 golden qwen3-next tiny: step-0 gradients (per tensor, global L2) and 10-step losses vs float64 PyTorch" \
  b16g_check next
check "bf16 golden qwen3.5 tiny: step-0 gradients (per tensor, global L2) and 10-step losses vs float64 PyTorch" \
  b16g_check 35

# Negative controls: the same comparison of deliberately wrong gradient files (st_scale
# copies of the bf16 gradients) must fail, and fail on the bound meant to catch it:
#   every gradient 5% too large (a loss normalised by a token count 5% short): global
#     5.0e-2 (next), 5.2e-2 (35) against 2.8e-2, while all but 1 (next) and 2 (35) tensors
#     stay within their per-tensor bounds: the global bound is what sees a small error
#     spread over every tensor;
#   the final norm's gradient 15% off (one tensor wrong): 0.149 / 0.152 against its 7e-2,
#     the global figure unchanged (1.38e-2 / 1.34e-2): the per-tensor bound sees it;
#   the routed experts' gradients with the wrong sign: 2.0 against their loose 1.4, so that
#     bound is not vacuous.
b16g_control() {
  local m=$1 glob=$2 factor=$3 expect=$4 g=tests/golden/e2e/test-$1-tiny d=$QT_TMP/bf16g
  b16g_run "$m" || return 1
  build/tools/st_scale "$d/$m.grads0.safetensors" "$d/$m.wrong.safetensors" "$glob" "$factor" \
    || return 1
  build/tools/st_compare "$d/$m.wrong.safetensors" "$g/grads0.safetensors" $B16G_TOL \
    "${B16G_RULES[@]}" > "$d/$m.wrong.txt"
  local rc=$?
  grep -E '^FAIL|^rule' "$d/$m.wrong.txt"
  [ $rc -eq 1 ] || { echo "st_compare exit $rc on a wrong file (expected 1)"; return 1; }
  grep -qE "$expect" "$d/$m.wrong.txt" || { echo "not caught by the expected bound: /$expect/"; return 1; }
}
for m in next 35; do
  check "bf16 golden negative control ($m): all gradients x1.05 fail the global L2 bound" \
    b16g_control $m '*' 1.05 '^FAIL +global'
  check "bf16 golden negative control ($m): the final norm's gradient x1.15 fails its per-tensor bound" \
    b16g_control $m '*model.norm.weight' 1.15 '^FAIL +model\.(language_model\.)?norm\.weight '
  check "bf16 golden negative control ($m): routed experts' gradients x-1 fail their loose bound" \
    b16g_control $m '*.mlp.experts.*' -1 '^FAIL +.*\.mlp\.experts\.'
done
