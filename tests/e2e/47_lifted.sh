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
#     them (plan.txt's plan hash line is the same).
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
