# 47_lifted.sh - configs MaxText runs that configgen refused before issue 35's audit of the
# refusals (docs/refusals.md), sourced by run_all.sh. Each lifted refusal has its bits shown:
#   * a layer count that is not a multiple of inhomogeneous_layer_cycle_interval (layer l is
#     full attention iff (l+1) % cycle == 0, as MaxText's unscanned decoder builds it):
#     test-next-6l (6 layers, cycle 4: GDN 0-2, attention 3, GDN 4-5) against the float64
#     PyTorch reference (step-0 gradients and 10 losses at 10_golden.sh's tolerances); its DP2
#     and its PP2 (stage 0 layers 0-2, stage 1 layers 3-5: a stage cut inside the cycle) ==
#     one rank, bit for bit over 10 steps; 14 layers (three whole cycles and two layers) with
#     scan_layers == unrolled, bit for bit;
#   * keys MaxText accepts and ignores (shared_experts other than 1, norm_topk_prob false,
#     the eval_* keys without eval_interval): configgen accepts them with a note naming each
#     key, its value and why, on stderr and in plan.txt, and the plan is the plan without
#     them (plan.txt's plan hash line is the same);
#   * more than 1024 experts (the router's per-expert counters and load-balance accumulators
#     were one stack array of 1024; now stack blocks taken in order, firmware/kernels/
#     moe_route.c, bits checked against the unblocked kernels in test_moe_many_experts.cpp):
#     2048 experts (top 8, width 4) with load_balance_loss_weight 0.01 on DP2 x EP2 == one
#     rank; 1100 experts (top 16, C = 1: a partial second block, ~15% of the assignments
#     dropped) with token dropping on DP2 x EP2 == one rank; the same 1100 experts with the
#     load-balance loss on context 2 (the queues continued from the earlier block's counts,
#     the term from the group's counts) == one rank; 10 steps, loss bits and fingerprints.
LIFT_D=$QT_TMP/lifted

# lift_det NAME BIN RANKS: 10 steps of BIN on RANKS ranks on the tiny test data, seed 11;
# its det_fields lines in $LIFT_D/NAME.det
lift_det() {
  local out=$LIFT_D/$1 n=$3
  local cmd="$2 data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 steps=10 metrics=$out.jsonl"
  rm -f "$out.jsonl"
  if [ "$n" -eq 1 ]; then timeout 120 $cmd 2> "$out.err"; else timeout 120 mpiexec -n "$n" $cmd 2> "$out.err"; fi ||
    { tail -n 3 "$out.err"; return 1; }
  det_fields "$out.jsonl" > "$out.det"
}

# lift_same NAME RANKS KEY=VALUE...: test-next-6l with the overrides (plan_variant), run on
# RANKS ranks, == build/test-next-6l/qtrain (or, with LIFT_ONE=KEY=VALUE..., that variant on
# one rank), bit for bit
lift_same() {
  local name=$1 n=$2; shift 2
  mkdir -p "$LIFT_D/$name" "$LIFT_D/one-$name"
  plan_variant test-next-6l "$LIFT_D/$name" "$@" || return 1
  if [ -n "${LIFT_ONE:-}" ]; then
    # shellcheck disable=SC2086
    plan_variant test-next-6l "$LIFT_D/one-$name" $LIFT_ONE || return 1
    lift_det "one-$name" "$LIFT_D/one-$name/test-next-6l-v/qtrain" 1 || return 1
  else
    lift_det "one-$name" build/test-next-6l/qtrain 1 || return 1
  fi
  lift_det "$name" "$LIFT_D/$name/test-next-6l-v/qtrain" "$n" || return 1
  cmp "$LIFT_D/one-$name.det" "$LIFT_D/$name.det" ||
    { diff "$LIFT_D/one-$name.det" "$LIFT_D/$name.det" | head -4; return 1; }
  echo "identical to one rank over 10 steps: $(tail -n 1 "$LIFT_D/$name.det")"
}

check "lifted: 6 layers with cycle 4 (GDN 0-2, attention 3, GDN 4-5) vs PyTorch" golden_run test-next-6l
check "lifted: 6 layers, DP2 == one rank, bit for bit" \
  lift_same dp2 2 num_ranks=2 ici_data_parallelism=2 ici_fsdp_parallelism=1 per_device_batch_size=1
check "lifted: 6 layers, PP2 (layers 0-2 | 3-5: the stage cut inside the cycle) == one rank" \
  lift_same pp2 2 num_ranks=2 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=3 \
    ici_fsdp_parallelism=1 per_device_batch_size=1

# 14 layers: scan_layers stores the repeated whole cycles once (plan.txt's scanned blocks),
# the partial last cycle unrolled; the bits are the unrolled plan's
lift_scan() {
  LIFT_ONE="base_num_decoder_layers=14 scan_layers=false" \
    lift_same scan14 1 base_num_decoder_layers=14 scan_layers=true || return 1
  grep -E "scanned block 0: .* run [2-9] times" "$LIFT_D/scan14/test-next-6l-v/plan/test-next-6l/plan.txt" ||
    { echo "the 14-layer plan scans nothing"; return 1; }
}
check "lifted: 14 layers (3 cycles + 2), scan_layers true == false, bit for bit" lift_scan

# the keys MaxText ignores: accepted with the note, the plan hash of the plan without them
lift_ignored() {
  local d=$LIFT_D/ignored h0 h
  rm -rf "$d"; mkdir -p "$d"
  build/configgen/configgen -o "$d/base" configgen/configs/runs/test-next-tiny.yml > /dev/null 2>&1 || return 1
  h0=$(grep -m 1 -o 'plan hash 0x[0-9a-f]*' "$d/base/test-next-tiny/plan.txt") || return 1
  for kv in shared_experts=0 shared_experts=2 norm_topk_prob=false eval_steps=5 \
            eval_start_step=3 eval_per_device_batch_size=4 target_eval_loss=1.5; do
    build/configgen/configgen -o "$d/$kv" configgen/configs/runs/test-next-tiny.yml "$kv" \
      > /dev/null 2> "$d/$kv.err" || { cat "$d/$kv.err"; return 1; }
    grep -q "^configgen: note: $kv (command line) is ignored: " "$d/$kv.err" ||
      { echo "$kv: no note on stderr"; cat "$d/$kv.err"; return 1; }
    grep -q "ignored, as in MaxText: $kv (command line) is ignored" "$d/$kv/test-next-tiny/plan.txt" ||
      { echo "$kv: no note in plan.txt"; return 1; }
    h=$(grep -m 1 -o 'plan hash 0x[0-9a-f]*' "$d/$kv/test-next-tiny/plan.txt")
    [ "$h" = "$h0" ] || { echo "$kv: $h, the plan without it $h0"; return 1; }
  done
  echo "7 settings accepted with their notes, each $h0; e.g. $(cat "$d/norm_topk_prob=false.err")"
}
check "lifted: shared_experts, norm_topk_prob false, eval_* without eval_interval: noted, the same plan" lift_ignored

# lift_pair NAME ONE MESH RANKS KEY=VALUE...: the runs ONE (one rank) and MESH (RANKS ranks)
# with the same overrides, 10 steps each (lift_det), bit for bit
lift_pair() {
  local name=$1 one=$2 mesh=$3 n=$4; shift 4
  mkdir -p "$LIFT_D/$name"
  plan_variant "$one" "$LIFT_D/$name" "$@" && plan_variant "$mesh" "$LIFT_D/$name" "$@" || return 1
  lift_det "$name-one" "$LIFT_D/$name/$one-v/qtrain" 1 &&
    lift_det "$name-mesh" "$LIFT_D/$name/$mesh-v/qtrain" "$n" || return 1
  cmp "$LIFT_D/$name-one.det" "$LIFT_D/$name-mesh.det" ||
    { diff "$LIFT_D/$name-one.det" "$LIFT_D/$name-mesh.det" | head -4; return 1; }
  echo "identical to one rank over 10 steps: $(tail -n 1 "$LIFT_D/$name-mesh.det")"
}
# lift_drops NAME: the one-rank run of lift_pair NAME dropped assignments at every step and
# its mesh run dropped the same counts
lift_drops() {
  local a b
  a=$(grep -o '"moe_dropped":[0-9]*' "$LIFT_D/$1-one.jsonl") b=$(grep -o '"moe_dropped":[0-9]*' "$LIFT_D/$1-mesh.jsonl")
  [ "$(grep -c '"moe_dropped":[1-9]' <<< "$a")" -eq 10 ] || { echo "not 10 steps with drops: $a"; return 1; }
  [ "$a" = "$b" ] || { echo "dropped counts differ"; return 1; }
  echo "dropped at every step, as one rank: $(echo "$a" | tr '\n' ' ')"
}

LIFT_LB="num_experts=2048 num_experts_per_tok=8 base_moe_mlp_dim=4 load_balance_loss_weight=0.01"
LIFT_CAP="num_experts=1100 num_experts_per_tok=16 base_moe_mlp_dim=4"
# shellcheck disable=SC2086
check "lifted: 2048 experts with the load-balance loss, DP2 x EP2 == one rank, bit for bit" \
  lift_pair lb2048 mesh-next-1r mesh-next-dp2ep2 4 $LIFT_LB
# not vacuous: the term is in the loss (the same 2048 experts without it differ)
lift_lb_counts() {
  local d=$LIFT_D/lb2048-off
  mkdir -p "$d"
  plan_variant mesh-next-1r "$d" num_experts=2048 num_experts_per_tok=8 base_moe_mlp_dim=4 &&
    lift_det lb2048-off "$d/mesh-next-1r-v/qtrain" 1 || return 1
  ! cmp -s "$LIFT_D/lb2048-off.det" "$LIFT_D/lb2048-one.det" || { echo "the term changes nothing"; return 1; }
  echo "with the term: $(tail -n 1 "$LIFT_D/lb2048-one.det"); without: $(tail -n 1 "$LIFT_D/lb2048-off.det")"
}
check "lifted: 2048 experts, the load-balance term changes the bits (the cell above is not vacuous)" lift_lb_counts
# shellcheck disable=SC2086
check "lifted: 1100 experts with token dropping (C = 1), DP2 x EP2 == one rank, bit for bit" \
  lift_pair cap1100 cap-next-1r cap-next-dp2ep2 4 $LIFT_CAP
check "lifted: 1100 experts with token dropping: drops at every step, the mesh's counts are one rank's" \
  lift_drops cap1100
# shellcheck disable=SC2086
check "lifted: 1100 experts, token dropping and the load-balance loss on context 2 == one rank, bit for bit" \
  lift_pair capctx1100 cap-ctx-next-1r-nb4 cap-ctx-next-cp2 2 $LIFT_CAP load_balance_loss_weight=0.01
check "lifted: 1100 experts on context 2: drops at every step, the counts are one rank's" \
  lift_drops capctx1100

# A per_device_batch_size below 1 whose int(ranks x it) does not split evenly over the batch
# groups (issue 35, docs/refusals.md): MaxText loads one sequence per device and trains the
# first int(devices x it), sharded unevenly inside its step (its MoE and GDN replicate such a
# batch without expert parallelism). qtrain gives each group ceil(n / groups) slots and pads
# the last ones: every target masked, the padded rows kept out of the load-balance term, the
# dropped counts and every normaliser, their weight-gradient leaves -0.0 (the tree's
# identity). So the padded mesh has the bits of one rank with the n real sequences, and the
# same metrics (moe_dropped, mtp_loss, z_loss, tokens, grad_norm, ...): PAD_X turns on
# everything a padded sequence could reach. Mutations that fail these cells: computing a
# padded leaf (interp.c), adding its load-balance term or its drops (runtime.c).
PAD_X="load_balance_loss_weight=0.01 mtp_num_layers=1 z_loss_multiplier=0.0001 sparse_matmul=false capacity_factor=1.0"
# pad_same NAME REF ONE RANKS MESH...: mesh-next-1r with the overrides ONE (a '|'-separated
# list) on one rank (run once as REF) and MESH on RANKS ranks: the same loss bits,
# fingerprints and metrics (all but the timings) over 10 steps; the plan report names the
# padding
pad_same() {
  local name=$1 ref=$2 one=$3 n=$4 m; shift 4
  mkdir -p "$LIFT_D/$name" "$LIFT_D/$ref"
  if [ ! -s "$LIFT_D/$ref.det" ]; then
    # shellcheck disable=SC2046
    plan_variant mesh-next-1r "$LIFT_D/$ref" $(tr '|' ' ' <<< "$one") &&
      lift_det "$ref" "$LIFT_D/$ref/mesh-next-1r-v/qtrain" 1 || return 1
  fi
  plan_variant mesh-next-1r "$LIFT_D/$name" "$@" || return 1
  grep -q "the step's last [0-9]* of its [0-9]* sequence slots are padded" \
    "$LIFT_D/$name/mesh-next-1r-v/plan/mesh-next-1r/plan.txt" || { echo "no padding in the plan report"; return 1; }
  lift_det "$name" "$LIFT_D/$name/mesh-next-1r-v/qtrain" "$n" || return 1
  cmp "$LIFT_D/$ref.det" "$LIFT_D/$name.det" ||
    { diff "$LIFT_D/$ref.det" "$LIFT_D/$name.det" | head -4; return 1; }
  for m in "$ref" "$name"; do
    grep -v '"manifest"' "$LIFT_D/$m.jsonl" | sed -E 's/"(tokens_per_s|step_s)":[^,}]*,?//g' > "$LIFT_D/$m.metrics"
  done
  cmp "$LIFT_D/$ref.metrics" "$LIFT_D/$name.metrics" ||
    { diff "$LIFT_D/$ref.metrics" "$LIFT_D/$name.metrics" | head -4; return 1; }
  echo "identical to one rank (bits and metrics): $(tail -n 1 "$LIFT_D/$name.det")"
}
# shellcheck disable=SC2086
check "lifted: per_device_batch_size 0.75 on DP4 (3 sequences, the 4th group padding), load balance, MTP, z-loss, token dropping == one rank's 3" \
  pad_same pad-dp4 pad-one "per_device_batch_size=3|${PAD_X// /|}" 4 num_ranks=4 ici_data_parallelism=4 per_device_batch_size=0.75 $PAD_X
# shellcheck disable=SC2086
check "lifted: per_device_batch_size 0.75 on DP2 x TP2 (a padded slot beside a real one in a microbatch), everything on == one rank's 3" \
  pad_same pad-dp2tp2 pad-one "per_device_batch_size=3|${PAD_X// /|}" 4 num_ranks=4 ici_data_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=0.75 $PAD_X
# shellcheck disable=SC2086
check "lifted: per_device_batch_size 0.75 on DP2 x CP2 (the padded slot's token blocks), everything on == one rank's 3 (context_blocks 2)" \
  pad_same pad-cp pad-cp-one "per_device_batch_size=3|context_blocks=2|${PAD_X// /|}" 4 num_ranks=4 ici_data_parallelism=2 ici_context_parallelism=2 per_device_batch_size=0.75 $PAD_X
# shellcheck disable=SC2086
check "lifted: per_device_batch_size 0.75 on DP4, 2 microbatches reduced per microbatch, packed (eos 3) == one rank's 3 x 2" \
  pad_same pad-g2 pad-g2-one "per_device_batch_size=3|gradient_accumulation_steps=2|packing=true|eos_id=3|${PAD_X// /|}" 4 num_ranks=4 ici_data_parallelism=4 per_device_batch_size=0.75 gradient_accumulation_steps=2 gradient_reduce=microbatch packing=true eos_id=3 $PAD_X
# not vacuous: the padded slot, trained as a real sequence (one rank, 4 sequences), differs
pad_differs() {
  local d=$LIFT_D/pad-4
  mkdir -p "$d"
  # shellcheck disable=SC2086
  plan_variant mesh-next-1r "$d" per_device_batch_size=4 $PAD_X && lift_det pad-4 "$d/mesh-next-1r-v/qtrain" 1 || return 1
  ! cmp -s "$LIFT_D/pad-4.det" "$LIFT_D/pad-one.det" || { echo "a fourth sequence changes nothing"; return 1; }
  grep -q '"moe_dropped":[1-9]' "$LIFT_D/pad-dp4.jsonl" || { echo "no drops: the capacity is not exercised"; return 1; }
  echo "3 sequences: $(tail -n 1 "$LIFT_D/pad-one.det"); 4: $(tail -n 1 "$LIFT_D/pad-4.det")"
}
check "lifted: the padded cells are not vacuous (a fourth real sequence changes the bits; tokens are dropped)" pad_differs
