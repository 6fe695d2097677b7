# 71_context.sh - context parallelism's canonical token blocks (docs/context.md), sourced by
# run_all.sh. With `context_blocks` N every weight-gradient leaf and every loss_seq entry
# covers one block of max_target_length / N tokens instead of a whole sequence:
#   * one rank with blocks against the float64 goldens of the same model and data (the
#     tolerances of 10_golden.sh: step-0 gradients 2e-4 of each tensor's largest magnitude,
#     losses 2e-4 relative, gradient norm 1e-3; a different canonical order, same math);
#   * blocks change the one-rank bits (the leaves really are blocks: not vacuous);
#   * meshes with the same blocks == one rank with them, bit for bit (loss bits and
#     fingerprint, 10 steps): DP2 x EP2 (the expert hosts' leaves are the blocks of every
#     member's sequences), DP2 x TP2 (per-head norm groups over a block), qwen3.5 EP2, and
#     bf16 DP2 x EP2 in shard_mode auto.
# Context parallelism (ici_context_parallelism, the head exchange: docs/context.md), each
# cell == one rank with the same context_blocks and global batch, bit for bit (loss bits and
# fingerprint, 10 steps): both decoders on CP2, CP4, CP2 x DP2, CP2 x TP2, CP2 x EP2,
# CP2 x FSDP2, CP2 x DP2 with ZeRO-1 and G = 4, explicit and auto, remat full, and kv heads
# shared by chains of 2 and 4 context ranks (2 or 1 kv heads on CP4; qwen3.5-tiny's single
# kv head on CP2: the attention backward's dk and dv sums passed along the chain), and
# per_device_batch_size 1 on CP2 (2 sequences per context group, run as 2 microbatches of
# one sequence), bf16 CP2 and CP2 x EP2 (auto); CP2 explicit
# on the GDN layers is the seed's own guard case (its reason: the convolution's left pad on
# a sharded sequence; here the convolution runs on whole sequences of half the heads).
# The load-balance loss on context meshes (issue 35; lb-ctx-*.yml, load_balance_loss_weight
# 0.01): the split sequence's routed counts all-gathered and its probability sums chained
# in token order (docs/context.md "Sums over tokens"), == one rank with the same blocks, bit
# for bit: qwen3-next CP2, CP4 (a chain through 4 ranks), CP2 remat full (the router's
# recomputation), CP2 x EP2 (auto), qwen3.5 CP2, bf16 CP2; not vacuous: the term changes the bits.
# Run files: configgen/configs/runs/ctx-*.yml; runs through plan_det (run_all.sh: the tiny
# test data, seed 11, every mpiexec under `timeout`).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

check "context_blocks 4: qwen3-next tiny vs PyTorch (step-0 gradients, 10 steps)" \
  golden_run ctx-golden-next-nb4 test-next-tiny
check "context_blocks 2: qwen3.5 tiny vs PyTorch (step-0 gradients, 10 steps)" \
  golden_run ctx-golden-35-nb2 test-35-tiny
check "context_blocks 4: qwen3-next tiny with load-balance loss vs PyTorch" \
  golden_run ctx-golden-lb-nb4 test-next-lb



check "context_blocks 4 changes the one-rank bits (the leaves are blocks)" \
  bits_differ "$QT_TMP/ctx" mesh-next-1r ctx-next-1r-nb4
check "context_blocks 4: DP2 x EP2 == one rank with the same blocks, bit for bit" \
  same_bits "$QT_TMP/ctx" ctx-next-1r-nb4 ctx-next-dp2ep2-nb4 4
check "context_blocks 4: DP2 x TP2 == one rank with the same blocks, bit for bit" \
  same_bits "$QT_TMP/ctx" ctx-next-1r-nb4 ctx-next-dp2tp2-nb4 4
check "context_blocks 2: qwen3.5 EP2 == one rank with the same blocks, bit for bit" \
  same_bits "$QT_TMP/ctx" ctx-35-1r-nb2 ctx-35-ep2-nb2 2
check "context_blocks 4 in bf16: DP2 x EP2 (auto) == one rank with the same blocks, bit for bit" \
  same_bits "$QT_TMP/ctx" ctx-b16-next-1r-nb4 ctx-b16-next-dp2ep2-auto-nb4 4

# MaxText's Ulysses key (ici_context_usp_ulysses_parallelism) is the same axis here: the same
# plan, hash for hash
ctx_ulysses() {
  local d=$QT_TMP/ctx/ulysses a b
  rm -rf "$d"
  build/configgen/configgen -o "$d/a" configgen/configs/runs/ctx-next-cp2.yml > /dev/null || return 1
  build/configgen/configgen -o "$d/b" configgen/configs/runs/ctx-next-cp2.yml \
    ici_context_parallelism=1 ici_context_usp_ulysses_parallelism=2 > /dev/null || return 1
  a=$(grep -o "plan hash 0x[0-9a-f]*" "$d/a/ctx-next-cp2/plan.txt") b=$(grep -o "plan hash 0x[0-9a-f]*" "$d/b/ctx-next-cp2/plan.txt")
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "both: $a"
}
check "context parallelism: ici_context_usp_ulysses_parallelism=2 plans the same as ici_context_parallelism=2" ctx_ulysses

# A CP2 plan started on one rank (alone, and under mpiexec -n 1) names every mesh axis, the
# context axis included, and the command that runs it (issue 30)
ctx_wrong_ranks() {
  local want="plan ctx-next-cp2 was generated for 2 ranks (mesh data 1 x fsdp 1 x tensor 1 x expert 1 x context 2), but this job has 1: run it with mpiexec -n 2"
  local e=$QT_TMP/ctx/wrong-ranks.err
  mkdir -p "$QT_TMP/ctx"
  build/ctx-next-cp2/qtrain steps=1 2> "$e" && { echo "one rank accepted a CP2 plan"; return 1; }
  grep -qF -- "$want" "$e" || { echo "expected '$want' in:"; cat "$e"; return 1; }
  timeout 60 mpiexec -n 1 build/ctx-next-cp2/qtrain steps=1 2> "$e" && return 1
  grep -qF -- "$want" "$e" || { cat "$e"; return 1; }
  cat "$e"
}
check "context parallelism: a CP2 plan on one rank names the context axis and mpiexec -n 2" ctx_wrong_ranks

# the context-parallel matrix: "ONE RUN RANKS" per cell
for cell in "ctx-next-1r-nb4 ctx-next-cp2 2" "ctx-next-1r-nb4 ctx-next-cp2-auto 2" \
            "ctx-next-1r-nb4 ctx-next-cp2dp2 4" "ctx-next-1r-nb4 ctx-next-cp2ep2 4" \
            "ctx-next-1r-nb4 ctx-next-cp2ep2-auto 4" "ctx-next-1r-nb4 ctx-next-cp2fsdp2 4" \
            "ctx-next-1r-b8-nb4 ctx-next-cp2dp2-g4-z1 4" "ctx-next-1r-nb4 ctx-next-cp2-remat 2" \
            "ctx-next4h-1r-nb4 ctx-next4h-cp4 4" "ctx-next4h-1r-nb4 ctx-next4h-cp2tp2 4" \
            "ctx-35t-1r-nb4 ctx-35t-cp2 2" "ctx-35t-1r-nb4 ctx-35t-cp2ep2 4" \
            "ctx-35t-1r-nb4 ctx-35t-cp2dp2-auto 4" "ctx-35t4h-1r-nb4 ctx-35t4h-cp4 4" \
            "ctx-35t4h-1r-nb4 ctx-35t4h-cp2tp2 4" "ctx-next4k-1r-nb4 ctx-next4k-cp4 4" \
            "ctx-next1kv-1r-nb4 ctx-next1kv-cp4 4" "ctx-35-1r-nb2 ctx-35-cp2 2" \
            "ctx-next-1r-nb4 ctx-next-cp2-b2 2" "ctx-b16-next-1r-nb4 ctx-b16-next-cp2 2" \
            "ctx-b16-next-1r-nb4 ctx-b16-next-cp2ep2-auto 4"; do
  set -- $cell
  check "context parallelism: ${2#ctx-} ($3 ranks) == one rank ($1), bit for bit" same_bits "$QT_TMP/ctx" "$@"
done

# the load-balance loss with context parallelism (issue 35)
check "load-balance loss with context_blocks 4 changes the one-rank bits (the term is on)" \
  bits_differ "$QT_TMP/ctx" ctx-next-1r-nb4 lb-ctx-next-1r-nb4
for cell in "lb-ctx-next-1r-nb4 lb-ctx-next-cp2 2" "lb-ctx-next4h-1r-nb4 lb-ctx-next4h-cp4 4" \
            "lb-ctx-next-1r-nb4 lb-ctx-next-cp2-remat 2" \
            "lb-ctx-next-1r-nb4 lb-ctx-next-cp2ep2-auto 4" "lb-ctx-35t-1r-nb4 lb-ctx-35t-cp2 2" \
            "lb-ctx-b16-next-1r-nb4 lb-ctx-b16-next-cp2 2"; do
  set -- $cell
  check "load-balance loss on context parallelism: ${2#lb-ctx-} ($3 ranks) == one rank ($1), bit for bit" \
    same_bits "$QT_TMP/ctx" "$@"
done
