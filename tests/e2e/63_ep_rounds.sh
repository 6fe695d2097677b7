# 63_ep_rounds.sh - the expert dispatch in rounds (sourced by run_all.sh; issue 35;
# docs/context.md "Expert dispatch in rounds"): expert_dispatch: rounds moves an expert
# host's routed rows in rounds of expert_chunk_rows rows after exchanging the counts, so the
# host's buffers hold a round instead of the dropless worst case, with one rank's bits.
#
# The cells (configgen/configs/runs/*-rounds.yml) use rounds of a leaf's worst case (the
# smallest the config accepts), so a host's rows take several rounds: qwen3-next EP2 (32
# rows), qwen3.5 EP2 (48), qwen3-next CP2 x EP2 with remat full (4 rows: the forward's rounds
# run again in the backward) and qwen3.5 CP2 x EP2 (8). Each equals its one-rank run, loss
# bits and fingerprint over 10 steps (same_bits, run_all.sh; 0 ulp). Not vacuous: the EP2
# plan with rounds of 32 makes more collective calls than the same plan with one round per
# op (expert_chunk_rows 1000), so several rounds ran; the plans hold MOE_ROUNDS_* ops and
# no MOE_DISPATCH_FWD, their round buffers R x d. bf16 EP2 of both decoders, EP2 x TP2 and
# bf16 EP2 x TP2 with rounds == their whole dispatch == one rank. The refusals name the key
# and the bound.
ER_DIR=$QT_TMP/rounds

for cell in "mesh-next-1r mesh-next-ep2-rounds 2" "mesh-35-1r mesh-35-ep2-rounds 2" \
            "ctx-next-1r-nb4 ctx-next-cp2ep2-rounds 4" "ctx-35t-1r-nb4 ctx-35t-cp2ep2-rounds 4"; do
  set -- $cell
  check "expert dispatch in rounds: ${2} ($3 ranks) == one rank ($1), bit for bit" same_bits "$ER_DIR" "$@"
done

er_several_rounds() {
  plan_det mesh-next-ep2-rounds 2 "$ER_DIR" 10 || return 1
  plan_variant mesh-next-ep2-rounds "$ER_DIR" expert_chunk_rows=1000 || return 1
  timeout 120 mpiexec -n 2 "$ER_DIR/mesh-next-ep2-rounds-v/qtrain" \
    data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 steps=10 \
    metrics="$ER_DIR/one-round.jsonl" 2> "$ER_DIR/one-round.err" || { tail -n 3 "$ER_DIR/one-round.err"; return 1; }
  det_fields "$ER_DIR/one-round.jsonl" | cmp - "$ER_DIR/mesh-next-ep2-rounds.det" ||
    { echo "one round per op gives other bits"; return 1; }
  more_rounds "$ER_DIR/mesh-next-ep2-rounds.err" "$ER_DIR/one-round.err" "rounds of 32 rows"
}
check "expert dispatch in rounds: rounds of 32 rows run several rounds (more calls than one round per op, same bits)" \
  er_several_rounds

er_plan() {
  local p=build/mesh-next-ep2-rounds/plan.txt w=build/mesh-next-ep2/plan.txt
  [ -s "$p" ] || p=generated/mesh-next-ep2-rounds/plan.txt
  [ -s "$w" ] || w=generated/mesh-next-ep2/plan.txt
  grep -qi "moe_rounds_fwd" "$p" && grep -qi "moe_rounds_bwd" "$p" && grep -qi "moe_rounds_wgrad" "$p" ||
    { echo "no MOE_ROUNDS ops in $p"; return 1; }
  ! grep -qi "moe_dispatch_fwd" "$p" || { echo "$p still dispatches whole"; return 1; }
  grep -qi "moe_dispatch_fwd" "$w" || { echo "$w lost its whole dispatch"; return 1; }
  # round buffers: 32 rows x d 32 = 1024 floats, against the whole form's Rmax = 128 rows
  grep -E " L0\.moe\.ep_round_x$" "$p" | cut -c 1-40
  grep -E " L0\.moe\.ep_x$" "$w" | cut -c 1-40
  grep -E " L0\.moe\.ep_round_x$" "$p" | grep -q "f32 \[1024\] " &&
    grep -E " L0\.moe\.ep_x$" "$w" | grep -q "f32 \[128,32\] "
}
check "expert dispatch in rounds: the plan holds MOE_ROUNDS_* ops and round buffers of 32 rows (whole: 128)" er_plan

# bf16 and tensor parallelism (docs/precision.md, MOE_ROUNDS row; qt_ops.def a8 tmask): in
# bf16 the rounds move bf16 x and dy rows, run the bf16 expert FFN kernels on the host
# (d(gu) recomputed: the saved one's bits), round y once on the host and bring the row
# gradients home fp32; with tensor 2 each round's y and data-gradient rows are summed over
# the tensor group before they go home (the whole dispatch's ALL_REDUCE). Each plan variant
# with rounds of a leaf's worst case (several rounds) == the same mesh's whole dispatch ==
# one rank, loss bits and fingerprint over 10 steps (0 ulp).
# er_same ONE RUN RANKS R: RUN with expert_dispatch=rounds, expert_chunk_rows=R
er_same() {
  local one=$1 r=$2 n=$3 R=$4 d=$ER_DIR/v-$2
  mkdir -p "$d"
  plan_variant $r "$d" expert_dispatch=rounds expert_chunk_rows=$R || return 1
  grep -qi "moe_rounds_wgrad" "$d/$r-v/plan/$r/plan.txt" && ! grep -qi "moe_dispatch_fwd" "$d/$r-v/plan/$r/plan.txt" ||
    { echo "$r with rounds: not the rounds' ops"; return 1; }
  # plan.txt names the per-round tensor sums of a tensor mesh, and only there
  case $r in *tp2*) grep -q "sum each round's host rows over tensor" "$d/$r-v/plan/$r/plan.txt" ;;
             *) ! grep -q "sum each round's host rows over tensor" "$d/$r-v/plan/$r/plan.txt" ;; esac ||
    { echo "$r: plan.txt's rounds line is wrong about the tensor sums"; return 1; }
  plan_det $one 1 "$ER_DIR" 10 && plan_det $r $n "$ER_DIR" 10 || return 1
  timeout 120 mpiexec -n $n "$d/$r-v/qtrain" data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 \
    steps=10 metrics="$d/rounds.jsonl" 2> "$d/rounds.err" || { tail -n 3 "$d/rounds.err"; return 1; }
  det_fields "$d/rounds.jsonl" > "$d/rounds.det" || return 1
  cmp "$ER_DIR/$r.det" "$d/rounds.det" || { echo "rounds differ from the whole dispatch"; return 1; }
  cmp "$ER_DIR/$one.det" "$d/rounds.det" || { echo "rounds differ from one rank"; return 1; }
  echo "rounds of $R == whole == one rank: $(tail -n 1 "$d/rounds.det")"
}
for cell in "bf16-next-1r bf16-next-ep2 2 32" "bf16-35-1r bf16-35-ep2 2 48" \
            "mesh-next-1r mesh-next-ep2tp2 4 32" "bf16-next-1r bf16-next-ep2tp2 4 32"; do
  set -- $cell
  check "expert dispatch in rounds: $2 ($3 ranks) with rounds of $4 rows == its whole dispatch == one rank ($1), bit for bit" \
    er_same "$@"
done

# er_refused RUN MESSAGE KEY=VALUE...: configgen refuses, naming MESSAGE, nothing written
er_refused() {
  local run=$1 want=$2 out=$ER_DIR/refused; shift 2
  rm -rf "$out"; mkdir -p "$out"
  if build/configgen/configgen -o "$out" configgen/configs/runs/$run.yml "$@" > "$out/log" 2>&1; then
    echo "planned: $*"; return 1
  fi
  grep -qF -- "$want" "$out/log" || { echo "expected '$want' in:"; cat "$out/log"; return 1; }
  [ -z "$(ls "$out" | grep -v '^log$')" ] || { echo "a refused plan wrote files"; return 1; }
  cat "$out/log"
}
check "expert dispatch in rounds: rounds below a leaf's worst case refused" \
  er_refused mesh-next-ep2-rounds "expert_chunk_rows=31 (command line) rows: a leaf (16 tokens) can bring 32 rows to one host" expert_chunk_rows=31
check "expert dispatch in rounds: rounds without an expert axis refused" \
  er_refused mesh-next-1r "rounds without expert parallelism" expert_dispatch=rounds
check "expert dispatch in rounds: an unknown expert_dispatch refused" \
  er_refused mesh-next-ep2 "expert_dispatch=batched (command line): expected auto, whole or rounds" expert_dispatch=batched
