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
# the multi-token-prediction head (docs/model.md 1.8): the mtp.* gradients and the per-step
# mtp_loss (the head's CE mean) at the same tolerances as above
check "golden qwen3-next tiny with the MTP head (mtp_num_layers 1) vs PyTorch" golden_run test-next-mtp
check "golden qwen3.5 tiny with the MTP head (mtp.* names unprefixed) vs PyTorch" golden_run test-35-mtp
