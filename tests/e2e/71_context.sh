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
# Uneven attention heads (issue 35; ctxu-*.yml, ctx-35u-*.yml): CP3, TP2 x CP3, qwen3.5 and
# bf16 with heads that do not divide by tensor x context == one rank; uneven GDN heads
# (gdnu-*.yml): CP3 explicit and auto, TP3 x CP2, bf16 CP3 == one rank, TP2 x CP3 == TP2.
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

# Attention heads owned unevenly over context (issue 35, docs/context.md): query heads that
# do not divide by the context degree (or kv heads neither a multiple nor a divisor of it)
# split in runs of kv heads with their query heads, sizes differing by at most one, padding
# slots computing zeros. Each == one rank with the same canonical_factor and blocks, bit
# for bit (loss bits and fingerprint, 10 steps): CP3 with 4 kv heads owned 1/1/2 (explicit;
# auto without canonical_factor / context_blocks, implied 3 and 3), CP3 with the 80B's 8:1
# ratio and 2 kv heads owned 0/1/1 (index 0 holds padding only), qwen3.5 CP3 (2 kv heads,
# 0/1/1), tensor 3 x context 2 (heads divide tensor, not tensor x context: 3 kv heads a
# tensor rank, owned 1/2), bf16 CP3 and CP3 0/1/1 with remat full. Tensor 2 x context 3
# (2 kv heads a tensor rank, 0/1/1) == tensor 2 alone with the same factor and blocks
# (tensor 2 with canonical_factor 3 is itself 1 ulp off one rank's loss on that model,
# outside the head exchange).
for cell in "ctxu-next-1r ctxu-next-cp3 3" "ctxu-next-1r ctxu-next-cp3-auto 3" \
            "ctxu-next2kv-1r ctxu-next2kv-cp3 3" "ctx-35u-1r ctx-35u-cp3 3" \
            "ctxu-next9-1r ctxu-next9-tp3cp2 6"; do
  set -- $cell
  check "uneven attention heads over context: ${2#ctx*-} ($3 ranks) == one rank ($1), bit for bit" same_bits "$QT_TMP/ctx" "$@"
done
# ctx_pair A NA B NB: plan A on NA ranks == plan B on NB ranks, bit for bit (plan_det's cache)
ctx_pair() {
  local d=$QT_TMP/ctx
  plan_det "$1" "$2" "$d" 10 && plan_det "$3" "$4" "$d" 10 || return 1
  cmp "$d/$1.det" "$d/$3.det" && echo "identical: $(tail -n 1 "$d/$3.det")"
}
# ctx_variant_pair DIR ONE RUN N KEY=VALUE...: one-rank ONE == RUN on N ranks, both planned
# with the overrides (plan_variant), bit for bit
ctx_variant_pair() {
  local d=$1 one=$2 run=$3 n=$4 data=tests/golden/e2e/test-next-tiny/tokens.npy
  shift 4
  mkdir -p "$d"
  plan_variant "$one" "$d" "$@" && plan_variant "$run" "$d" "$@" || return 1
  timeout 120 "$d/$one-v/qtrain" data=$data seed=11 steps=10 metrics=$d/one.jsonl 2> "$d/one.err" &&
    timeout 120 mpiexec -n "$n" "$d/$run-v/qtrain" data=$data seed=11 steps=10 metrics=$d/run.jsonl 2> "$d/run.err" ||
    { tail -n 3 "$d/one.err" "$d/run.err"; return 1; }
  det_fields "$d/one.jsonl" > "$d/one.det" && det_fields "$d/run.jsonl" > "$d/run.det" &&
    cmp "$d/one.det" "$d/run.det" && echo "identical: $(tail -n 1 "$d/run.det")"
}
# ctx_variant_one DIR ONE RUN N KEY=VALUE...: one-rank ONE (its committed plan) == RUN
# planned with the overrides on N ranks, bit for bit
ctx_variant_one() {
  local d=$1 one=$2 run=$3 n=$4 data=tests/golden/e2e/test-next-tiny/tokens.npy
  shift 4
  mkdir -p "$d"
  plan_det "$one" 1 "$QT_TMP/ctx" 10 && plan_variant "$run" "$d" "$@" || return 1
  timeout 200 mpiexec -n "$n" "$d/$run-v/qtrain" data=$data seed=11 steps=10 metrics=$d/run.jsonl 2> "$d/run.err" ||
    { tail -n 3 "$d/run.err"; return 1; }
  det_fields "$d/run.jsonl" > "$d/run.det" &&
    cmp "$QT_TMP/ctx/$one.det" "$d/run.det" && echo "identical: $(tail -n 1 "$d/run.det")"
}
check "uneven attention heads over context: tensor 2 x context 3 (6 ranks) == tensor 2 alone (ctxu-next6-tp2), bit for bit" \
  ctx_pair ctxu-next6-tp2 2 ctxu-next6-tp2cp3 6
# Tensor 2 with canonical_factor 3 (3 x 2^j canonical blocks split into shares that are not
# powers of two) is not one rank's bits with the factor, and plan.txt says so (issue 35,
# session 15: it used to claim them); tensor 3 x context 2 (aligned) keeps its "yes".
ctx_tp2_factor_own() {
  local d=$QT_TMP/ctx
  grep -q "one-rank bits: no: tensor 2 splits canonical_factor 3's blocks" generated/ctxu-next6-tp2/plan.txt ||
    { echo "ctxu-next6-tp2/plan.txt does not say no"; return 1; }
  ! grep -q "one-rank bits: no" generated/ctxu-next9-tp3cp2/plan.txt ||
    { echo "ctxu-next9-tp3cp2/plan.txt says no"; return 1; }
  plan_det ctxu-next6-tp2 2 "$d" 10 && plan_det ctxu-next6-1r 1 "$d" 10 || return 1
  ! cmp -s "$d/ctxu-next6-tp2.det" "$d/ctxu-next6-1r.det" ||
    { echo "tensor 2 now equals one rank: plan.txt's no is stale"; return 1; }
  echo "differ as stated: $(head -n 1 "$d/ctxu-next6-tp2.det") vs $(head -n 1 "$d/ctxu-next6-1r.det")"
}
check "tensor 2 with canonical_factor 3: its own bits (!= one rank with the factor), as plan.txt says" ctx_tp2_factor_own
# ctx_owners PLAN WHAT OWNERS: PLAN's plan.txt says WHAT (heads owned unevenly) and names
# the owners as OWNERS (a fixed string); an even split (ctx-next4h-cp4) does not say WHAT
ctx_owners() {
  local p=generated/$1/plan.txt
  grep -q "$2" "$p" && grep -qF "$3" "$p" || { echo "$p does not name the owners"; return 1; }
  grep -q "$2" generated/ctx-next4h-cp4/plan.txt && { echo "an even split says uneven"; return 1; }
  grep -o "$2.*" "$p" | grep -o "context index 0:.*"
}
check "uneven attention heads over context: plan.txt names each context index's heads (0/1/1 with padding)" \
  ctx_owners ctxu-next2kv-cp3 "attention heads owned unevenly over context" \
  "context index 0: kv [0, 0) q [0, 0) (none: padding only), 1: kv [0, 1) q [0, 8), 2: kv [1, 2) q [8, 16)"
check "uneven attention heads over context: bf16 CP3 (4 kv heads owned 1/1/2) == one bf16 rank, bit for bit" \
  ctx_variant_pair "$QT_TMP/ctx/u16" ctxu-next-1r ctxu-next-cp3 3 dtype=bfloat16
check "uneven attention heads over context: CP3 with remat full (the exchanges recomputed; 0/1/1) == one rank, bit for bit" \
  ctx_variant_one "$QT_TMP/ctx/urm" ctxu-next2kv-1r ctxu-next2kv-cp3 3 remat_policy=full

# GDN heads owned unevenly over context (issue 35, session 16, docs/context.md "GDN heads
# owned unevenly"): tensor x context not dividing the GDN key heads (or the norm's canonical
# groups, or gdn_value_head_dim): units of key heads with their value heads (whole canonical
# groups) in runs differing by at most one, conv1d.weight / A_log / dt_bias whole over
# context (the head side reads a padded copy of its units, CTX_OWN_UNITS; each WGRAD leaf
# completed by an all-gather placed by owner) and the norm's group partials gathered over
# tensor x context and summed by the one-rank tree. Each == one rank with the same
# canonical_factor and blocks, bit for bit (loss bits and fingerprint, 10 steps): CP3 with 4
# key heads owned 1/1/2 (explicit; auto without canonical_factor / context_blocks), tensor
# 3 x context 2 with each tensor rank's key head owned 0/1 (index 0 padding only; the
# norm's 6 groups gathered over 6 ranks), qwen3.5 CP3, CP3 with remat full, CP3 x FSDP2,
# CP3 x DP2, CP4 on 6 key heads whose unit is 3 key heads
# (the norm's 4 groups of 3 value heads; 2 units owned 0/1/0/1), bf16 CP3. Tensor 2 x context 3 (a tensor rank's 2
# key heads owned 0/1/1) == tensor 2 alone with the same factor and blocks (tensor 2 with
# canonical_factor 3 is its own bits, above).
for cell in "gdnu-next-1r gdnu-next-cp3 3" "gdnu-next-1r gdnu-next-cp3-auto 3" \
            "gdnu-next9-1r gdnu-next9-tp3cp2 6" "gdnu-next6k-1r gdnu-next6k-cp4 4"; do
  set -- $cell
  check "uneven GDN heads over context: ${2#gdnu-} ($3 ranks) == one rank ($1), bit for bit" same_bits "$QT_TMP/ctx" "$@"
done
check "uneven GDN heads over context: tensor 2 x context 3 (6 ranks) == tensor 2 alone (gdnu-next-tp2), bit for bit" \
  ctx_pair gdnu-next-tp2 2 gdnu-next-tp2cp3 6
check "uneven GDN heads over context: plan.txt names each context index's key and value heads (0/1/1 with padding)" \
  ctx_owners gdnu-next-tp2cp3 "GDN heads owned unevenly over context" \
  "context index 0: key [0, 0) value [0, 0) (none: padding only), 1: key [0, 1) value [0, 2), 2: key [1, 2) value [2, 4)"
check "uneven GDN heads over context: bf16 CP3 (4 key heads owned 1/1/2) == one bf16 rank, bit for bit" \
  ctx_variant_pair "$QT_TMP/ctx/gu16" gdnu-next-1r gdnu-next-cp3 3 dtype=bfloat16
# the same CP3 with remat full (CTX_OWN_UNITS and the exchanges recomputed) and with fsdp 2
# (the whole-over-context weights' compute copies gathered over fsdp) and with data 2, each
# == one rank
# (below). qwen3.5 (ctx-35u's model with 4 GDN key / 8 value heads of 8, the 2 kv heads 0/1/1 too)
gdn_uneven_35() {
  local d=$QT_TMP/ctx/gu35
  ctx_variant_pair "$d" ctx-35u-1r ctx-35u-cp3 3 gdn_num_key_heads=4 gdn_num_value_heads=8 gdn_value_head_dim=8 || return 1
  grep -q "GDN heads owned unevenly" "$d"/ctx-35u-cp3-v/plan/*/plan.txt || { echo "not uneven"; return 1; }
}
check "uneven GDN heads over context: qwen3.5 CP3 (4 key heads owned 1/1/2) == one rank, bit for bit" gdn_uneven_35
check "uneven GDN heads over context: CP3 with remat full == one rank, bit for bit" \
  ctx_variant_one "$QT_TMP/ctx/gu-remat" gdnu-next-1r gdnu-next-cp3 3 remat_policy=full
check "uneven GDN heads over context: CP3 x FSDP2 (6 ranks) == one rank, bit for bit" \
  ctx_variant_one "$QT_TMP/ctx/gu-fsdp" gdnu-next-1r gdnu-next-cp3 6 num_ranks=6 ici_fsdp_parallelism=2 gradient_accumulation_steps=1
check "uneven GDN heads over context: CP3 x DP2 (6 ranks; the complete weights' units over data) == one rank, bit for bit" \
  ctx_variant_one "$QT_TMP/ctx/gu-dp" gdnu-next-1r gdnu-next-cp3 6 num_ranks=6 ici_data_parallelism=2 gradient_accumulation_steps=1

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
