# 10_golden.sh - end to end against the PyTorch reference (sourced by run_all.sh).
#
# For each golden run (golden_run, tests/scripts/run_all.sh): load the reference's initial
# weights (on-disk HF layout of that decoder, so the Qwen3.5 split / per-expert conversion
# is exercised), dump the step-0 gradients and train 10 AdamW steps on the reference's
# token file.
# Tolerances, and why: the C side computes in float32 and the reference in float64 from the
# same float32 weights. One step's gradients agree to ~1e-6 relative per tensor; 2e-4 of the
# tensor's largest magnitude leaves room for A_log (a long sum with cancellation, the
# worst case in docs/model.md section 6). Over 10 AdamW steps fp32 rounding grows
# (Adam's first steps are ~lr*sign(g)), so losses are compared at 2e-4 relative and the
# pre-clip gradient norm at 1e-3.
check "golden qwen3-next tiny: step-0 gradients and 10-step losses vs PyTorch" golden_run test-next-tiny
check "golden qwen3.5 tiny (split in_proj_qkv/z/b/a on disk) vs PyTorch" golden_run test-35-tiny
check "golden qwen3-next tiny with load-balance loss vs PyTorch" golden_run test-next-lb
check "golden qwen3-next tiny, chunked (WY) delta rule, vs PyTorch" golden_run test-next-chunked test-next-tiny
# Token dropping (issue 32: sparse_matmul false, capacity_factor > 0, MaxText's rule): the
# reference drops too (expected.json moe_dropped, 6-15% of the assignments per step), and
# each step's dropped count must be exactly the reference's. Tolerances as above.
check "golden qwen3-next tiny, capacity_factor 1.0 (C=8 of 16 tokens) + load balance, vs PyTorch" golden_run test-next-cap1
check "golden qwen3-next tiny, 16 experts, capacity_factor 2.0 (C=4) vs PyTorch" golden_run test-next-cap2
check "golden qwen3.5 tiny, capacity_factor 1.0 (C=8) vs PyTorch" golden_run test-35-cap1
check "golden qwen3.5 tiny, 24 experts, capacity_factor 2.0 (C=4) vs PyTorch" golden_run test-35-cap2
# A capacity of 0 (issue 35: capacity_factor 0.1, C = int(max(8 x 0.1, 0.1)) = 0, MaxText's
# generate_masks with C = 0): every routed assignment drops (moe_dropped = all 256 a step),
# the routed experts add nothing and get zero gradients, the router trains through the
# load-balance term alone; the reference does the same (model.dropping).
check "golden qwen3-next tiny, capacity_factor 0.1 (C=0: every assignment dropped) + load balance, vs PyTorch" golden_run test-next-cap0
# sparse_matmul false without a capacity (cf -1, cf 0) is dropless: the sparse goldens, and
# the very bits of sparse_matmul true (loss bits and fingerprint, 10 steps)
check "golden qwen3-next tiny, sparse_matmul false dropless, vs the sparse goldens" golden_run test-next-dense test-next-tiny
dense_same_bits() {
  same_bits "$QT_TMP/dense" test-next-tiny test-next-dense 1 &&
    same_bits "$QT_TMP/dense" test-35-tiny test-35-dense 1
}
check "sparse_matmul false dropless == sparse_matmul true, bit for bit (qwen3-next, qwen3.5)" dense_same_bits
# the multi-token-prediction head (docs/model.md 1.8): the mtp.* gradients and the per-step
# mtp_loss (the head's CE mean) at the same tolerances as above
check "golden qwen3-next tiny with the MTP head (mtp_num_layers 1) vs PyTorch" golden_run test-next-mtp
check "golden qwen3.5 tiny with the MTP head (mtp.* names unprefixed) vs PyTorch" golden_run test-35-mtp
# the head with token dropping: its MoE layer drops by the same capacity (the reference's
# too), counted in its own row: moe_dropped stays the main layers' (exactly the reference's)
# and mtp_moe_dropped is reported apart (and is not 0 at step 0: the head really drops)
mtp_cap_golden() {
  golden_run test-next-mtp-cap1 || return 1
  local d; d=$(grep -o '"mtp_moe_dropped":[0-9]*' "$QT_TMP/golden-test-next-mtp-cap1/metrics.jsonl" | head -n 1 | cut -d: -f2)
  [ -n "$d" ] && [ "$d" -gt 0 ] && echo "step 0: the head's MoE dropped $d assignments"
}
check "golden qwen3-next tiny with the MTP head and capacity_factor 1.0 vs PyTorch (head drops apart)" mtp_cap_golden
# two depths: the depths share mtp.fc, the pre-fc norms and mtp.norm, whose gradients sum
# over them (one WGRAD over the depths' rows stacked per leaf); the second depth's layer
# mtp.layers.1 and every shared tensor at the tolerances above
check "golden qwen3-next tiny with two MTP depths (mtp_num_layers 2, shared fc / norms) vs PyTorch" golden_run test-next-mtp2
# the head with the z-loss 0.01: MaxText's rule, z lse^2 on the main logits' targets only
# (its MTP cross entropy takes none): loss, z_loss, mtp_loss, gradients as above (a z term
# on the head's rows would move the loss by ~1%)
check "golden qwen3-next tiny with the MTP head and z-loss 0.01 (the main logits only) vs PyTorch" golden_run test-next-mtp-z
# Issue 33. The z-loss (z_loss_multiplier 0.01: z lse^2 per target in the loss and its
# gradient, MaxText's / T5X's form): step-0 gradients at 2e-4, losses and the metrics' z_loss
# at 2e-4 relative, grad norm 1e-3 (as above: the same fp32-vs-fp64 drift).
check "golden qwen3-next tiny with z-loss 0.01 (loss, z_loss, gradients) vs PyTorch" golden_run test-next-z
# Held-out eval under WSD (warmup 2, stable 5, linear decay 3 of 10 steps): the eval rows
# after steps 1, 4, 7 on eval_data = the run's tokens (320 targets each) against the float64
# reference's eval loss at the weights after those steps, 2e-4 relative (the training
# losses' tolerance: the weights carry the same fp32 drift; an eval adds one forward's
# rounding, ~1e-6); lr 1e-6 relative (pure schedule); steps, gradients as above.
golden_eval_run() {
  local run=$1 g=tests/golden/e2e/$1 out=$QT_TMP/golden-$1 targets=${2:-320}
  mkdir -p "$out"
  [ -f "$g/init.safetensors" ] || { echo "missing goldens in $g (make goldens)"; return 1; }
  build/$run/qtrain load="$g/init.safetensors" data="$g/tokens.npy" eval_data="$g/tokens.npy" \
      steps=10 metrics="$out/metrics.jsonl" dump_grads="$out/grads0.safetensors" || return 1
  build/tools/st_compare "$out/grads0.safetensors" "$g/grads0.safetensors" 2e-4 || return 1
  build/tools/metrics_compare "$out/metrics.jsonl" "$g/expected.json" 2e-4 1e-3 || return 1
  [ "$(grep -c '"eval_tokens":'"$targets," "$out/metrics.jsonl")" -eq 3 ] || { echo "eval_tokens"; return 1; }
}
check "golden qwen3-next tiny, WSD schedule, eval losses after steps 1, 4, 7 vs PyTorch" golden_eval_run test-next-eval
# Issue 35: the held-out eval with the MTP head (test-next-mtp-eval: factor 0.3, evals after
# steps 1, 4, 7): the eval forward runs the head, and the eval loss is the main cross entropy
# alone, as MaxText's (its head's loss only when is_train): against the reference's eval
# loss (the head's term would move it by ~30%), the training losses with the head's term and
# mtp_loss, step-0 gradients, at the tolerances above.
check "golden qwen3-next tiny with the MTP head, eval losses (the main CE alone) after steps 1, 4, 7 vs PyTorch" \
  golden_eval_run test-next-mtp-eval
# Issue 35: an eval batch of 3 on the training microbatch of 2 (test-next-eval-b3: two
# forwards an eval batch, the second's second slot padded with masked targets; 6 batches,
# 288 targets): the eval loss is the reference's mean over the real sequences, 2e-4 relative
check "golden qwen3-next tiny, eval batch 3 on microbatches of 2 (padded), eval losses vs PyTorch" \
  golden_eval_run test-next-eval-b3 288
# MaxText's mtp_eval_target_module: the MTP head's acceptance rate in each eval row
# (docs/model.md 1.8) against the reference's (tests/reference/gold_e2e.py accept_batch:
# torch.argmax of the float64 logits, depth k at t against the main model at t + k over
# depth k's positions with a loss, pooled over the pass: 100 x matches / positions). Tolerance
# (metrics_compare): the positions exactly; the matches within the reference's count of
# near ties (a top-2 logit gap below 1e-4 at either position: float32 logits may pick the
# other index there), the rate within the mean of 100 x near ties / positions; with no near
# tie (every eval of test-next-mtp2-acc, two of test-next-mtp-pack-acc) both bit for bit.
# Two depths, k = 2 (280 positions an eval: 20 sequences x 14), and packed documents, k = 1.
check "golden qwen3-next tiny, two MTP depths, acceptance rate of depth 2 after steps 1, 4, 7 vs PyTorch" \
  golden_eval_run test-next-mtp2-acc
check "golden qwen3-next tiny, MTP head on packed documents, acceptance rate of depth 1 vs PyTorch" \
  golden_eval_run test-next-mtp-pack-acc 285
