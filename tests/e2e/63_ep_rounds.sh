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
# no MOE_DISPATCH_FWD, their round buffers R x d. The refusals name the key and the bound.
ER_DIR=$QT_TMP/rounds

for cell in "mesh-next-1r mesh-next-ep2-rounds 2" "mesh-35-1r mesh-35-ep2-rounds 2" \
            "ctx-next-1r-nb4 ctx-next-cp2ep2-rounds 4" "ctx-35t-1r-nb4 ctx-35t-cp2ep2-rounds 4"; do
  set -- $cell
  check "expert dispatch in rounds: ${2} ($3 ranks) == one rank ($1), bit for bit" same_bits "$ER_DIR" "$@"
done

# the collective calls of rank 0's steps (qtrain's "collectives: steps: N calls" line)
er_calls() {
  sed -n 's/.*collectives: steps: \([0-9]*\) calls.*/\1/p' "$1" | tail -n 1
}
er_several_rounds() {
  plan_det mesh-next-ep2-rounds 2 "$ER_DIR" 10 || return 1
  plan_variant mesh-next-ep2-rounds "$ER_DIR" expert_chunk_rows=1000 || return 1
  timeout 120 mpiexec -n 2 "$ER_DIR/mesh-next-ep2-rounds-v/qtrain" \
    data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 steps=10 \
    metrics="$ER_DIR/one-round.jsonl" 2> "$ER_DIR/one-round.err" || { tail -n 3 "$ER_DIR/one-round.err"; return 1; }
  det_fields "$ER_DIR/one-round.jsonl" | cmp - "$ER_DIR/mesh-next-ep2-rounds.det" ||
    { echo "one round per op gives other bits"; return 1; }
  local a b
  a=$(er_calls "$ER_DIR/mesh-next-ep2-rounds.err") b=$(er_calls "$ER_DIR/one-round.err")
  echo "collective calls over 10 steps: rounds of 32 rows $a, one round per op $b (same bits)"
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt "$b" ]
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
check "expert dispatch in rounds: rounds with bfloat16 refused" \
  er_refused mesh-next-ep2-rounds "the round ops run float32 plans only" dtype=bfloat16
check "expert dispatch in rounds: rounds with tensor parallelism refused" \
  er_refused mesh-next-ep2tp2 "not exchanged per round" expert_dispatch=rounds expert_chunk_rows=64
check "expert dispatch in rounds: an unknown expert_dispatch refused" \
  er_refused mesh-next-ep2 "expert_dispatch=batched (command line): expected auto, whole or rounds" expert_dispatch=batched
