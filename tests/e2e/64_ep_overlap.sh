# 64_ep_overlap.sh - the experts' exchanges beside compute (sourced by run_all.sh; issue 35;
# docs/overlap.md "The experts' all-to-alls"): with collective_overlap: all, configgen splits
# each MOE_DISPATCH_FWD, MOE_RETURN_FWD, MOE_RETURN_BWD and MOE_DISPATCH_BWD into a start op
# and a wait op with independent compute of the layer between (the shared expert's forward
# shared between the dispatch and the return; the shared expert's backward and the router's
# beside the return backward, the experts' weight gradient beside the dispatch backward),
# every conflicting pair of ops in its order; the firmware runs the split all-to-all-v beside
# them.
#
# Each cell: the committed run with collective_overlap=all (a variant built into
# $QT_TMP/ep_overlap/RUN-v; its plan holds all four split kinds) ==
# the committed run (blocking exchanges) == its one-rank baseline, loss bits and parameter
# fingerprint of every step over 10 steps (0 ulp): EP2 of both decoders, DP2 x EP2, CP2 x EP2
# of both decoders, EP2 with G=2 in the microbatch form (3 leaves a microbatch, per-layer
# units), DP2 x EP2 with ZeRO-1 and per-layer gathers overlapped too (G=4), bf16 EP2
# (blocking == overlapped only: its one-rank cells live in 77_bf16.sh); remat full (the
# forward's exchanges split again in the backward's recompute), scan_layers over 16 layers (a
# scanned run's starts and waits), EP2 x TP2 (the expert outputs' all-reduce before the start),
# the MTP head (blocking == overlapped for the last three); DP2 x EP2 with the held-out eval
# (blocking == overlapped, training and eval loss bits). Mutations tried by hand once:
# configgen placing the backward's ops after MOE_DISPATCH_BWD without checking them against
# its dx (the router's d.h2 sum and the norm's backward before the wait): EP2 of both
# decoders differ from step 1; the wait op unpacking before it waits: EP2 and DP2 x EP2
# differ at step 0; the wait op not waiting: step 0 fails (slots exhausted).
# Session 14 (the dispatch forward and the return backward split too), mutations tried by
# hand once: configgen checking the ops after a home -> host exchange against its slots but
# t0 (the host rows the transport writes): the expert backward and weight gradient read dyr
# before the return backward's wait, EP2 and DP2 x EP2 differ from step 1; the dispatch
# forward's start op starting the rows' exchange before it packs them: both differ at step
# 0; its wait op not waiting: step 0 fails (EP2; DP2 x EP2: "4 collectives already in
# flight"); configgen naming the dispatch start's t0 none: configgen refuses ("slot t0
# unset"), and the start-up check refuses it (unit test RuntimeSplit.Expert...).
EO_DIR=$QT_TMP/ep_overlap

# eo_cell ONE RUN RANKS: RUN with collective_overlap=all == RUN == ONE (ONE "-": no one-rank
# baseline here), bit for bit.
eo_cell() {
  local one=$1 run=$2 n=$3 d=$EO_DIR
  plan_det "$run" "$n" "$d" 10 || return 1
  [ "$one" = "-" ] || plan_det "$one" 1 "$d" 10 || return 1
  plan_variant "$run" "$d" collective_overlap=all || return 1
  local t=$d/$run-v/plan/$run/plan.txt
  local k
  for k in moe_dispatch_fwd_start moe_return_start moe_return_bwd_start moe_dispatch_bwd_start; do
    grep -q " $k " "$t" || { echo "no $k in $t"; return 1; }
  done
  rm -f "$d/$run-all.jsonl"
  timeout 120 mpiexec -n "$n" "$d/$run-v/qtrain" data=tests/golden/e2e/test-next-tiny/tokens.npy \
    seed=11 steps=10 metrics="$d/$run-all.jsonl" 2> "$d/$run-all.err" ||
    { tail -n 3 "$d/$run-all.err"; return 1; }
  det_fields "$d/$run-all.jsonl" > "$d/$run-all.det" || return 1
  cmp "$d/$run.det" "$d/$run-all.det" || { echo "overlapped != blocking"; return 1; }
  [ "$one" = "-" ] || cmp "$d/$one.det" "$d/$run-all.det" || { echo "overlapped != one rank"; return 1; }
  echo "$(grep -cE '^ +[0-9]+ moe_[a-z_]+_start ' "$t") split exchanges; identical: $(tail -n 1 "$d/$run-all.det")"
}

for cell in "mesh-next-1r mesh-next-ep2 2" "mesh-35-1r mesh-35-ep2 2" \
            "mesh-next-1r mesh-next-dp2ep2 4" "ctx-next-1r-nb4 ctx-next-cp2ep2 4" \
            "ctx-35t-1r-nb4 ctx-35t-cp2ep2 4" "odd-next-1r-b12 split-next-ep2-b3-g2 2" \
            "zero1-next-1r-b16 zero1-next-dp2ep2-g4-z1-gather 4" "- bf16-next-ep2 2" \
            "mesh-next-1r remat-full-mesh-next-dp2ep2 4" "- scan-next-16l-dp2ep2-scan 4" \
            "- mesh-next-ep2tp2 4" "- mtp-next-ep2 2"; do
  set -- $cell
  check "experts' exchanges overlapped: ${2} ($3 ranks, collective_overlap all) == blocking == one rank (${1}), bit for bit" eo_cell "$@"
done

# the held-out eval (eval_holdout=8, every 3 steps): its forward runs the split exchanges
# too; blocking == overlapped, training and eval loss bits (one rank: 62_eval.sh)
eo_eval() {
  local d=$EO_DIR run=eval-next-dp2ep2 a
  plan_variant $run "$d" collective_overlap=all || return 1
  for a in blocking overlapped; do
    local b=build/$run/qtrain
    [ $a = overlapped ] && b=$d/$run-v/qtrain
    rm -f "$d/eval-$a.jsonl"
    timeout 120 mpiexec -n 4 "$b" data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 \
      steps=10 eval_holdout=8 metrics="$d/eval-$a.jsonl" 2> "$d/eval-$a.err" ||
      { tail -n 3 "$d/eval-$a.err"; return 1; }
    det_fields "$d/eval-$a.jsonl" > "$d/eval-$a.det" || return 1
  done
  grep -q eval_loss_bits "$d/eval-overlapped.det" || { echo "no eval line"; return 1; }
  cmp "$d/eval-blocking.det" "$d/eval-overlapped.det" &&
    echo "identical: $(grep -c eval_loss_bits "$d/eval-overlapped.det") evals, $(tail -n 1 "$d/eval-overlapped.det")"
}
check "experts' exchanges overlapped: DP2 x EP2 with the held-out eval == blocking, training and eval bits" eo_eval

# the plan: the shared expert's forward shared between the dispatch (gate, up, SwiGLU) and the
# return (down, gate logit, sigmoid gate); in the backward the shared expert's backward beside
# the return backward, the experts' weight gradient beside the dispatch backward
eo_between() {  # eo_between PLAN KIND: the ops between KIND_start and KIND_wait (first ones)
  awk -v s="$2_start" -v w="$2_wait" '$2==s{f=1; next} $2==w{exit} f' "$1"
}
eo_plan() {
  local t=$EO_DIR/mesh-next-ep2-v/plan/mesh-next-ep2/plan.txt k
  [ -s "$t" ] || plan_variant mesh-next-ep2 "$EO_DIR" collective_overlap=all || return 1
  for k in moe_dispatch_fwd moe_return moe_return_bwd moe_dispatch_bwd; do
    eo_between "$t" $k > "$EO_DIR/between-$k.txt"
    echo "$k: $(awk '{print $2}' "$EO_DIR/between-$k.txt" | tr '\n' ' ')"
  done
  grep -q "w:L0.moe.shared_gate " "$EO_DIR/between-moe_dispatch_fwd.txt" &&
    grep -q "w:L0.moe.shared_up " "$EO_DIR/between-moe_dispatch_fwd.txt" ||
    { echo "no shared expert beside the dispatch"; return 1; }
  grep -q "w:L0.moe.shared_out " "$EO_DIR/between-moe_return.txt" &&
    grep -q "w:L0.moe.shared_gated " "$EO_DIR/between-moe_return.txt" ||
    { echo "no shared expert beside the return"; return 1; }
  grep -q "matmul_wgrad .*shared_expert.down_proj" "$EO_DIR/between-moe_return_bwd.txt" ||
    { echo "no shared expert backward beside the return backward"; return 1; }
  grep -q "^ *[0-9]* expert_ffn_wgrad " "$EO_DIR/between-moe_dispatch_bwd.txt" ||
    { echo "no expert weight gradient beside the dispatch backward"; return 1; }
  grep -q "split beside compute" "$t"
}
check "experts' exchanges overlapped: the shared expert, its backward and the experts' weight gradient between start and wait (plan.txt)" eo_plan

# eo_refused: an unknown collective_overlap names the values
eo_refused() {
  local out=$EO_DIR/refused
  rm -rf "$out"; mkdir -p "$out"
  if build/configgen/configgen -o "$out" configgen/configs/runs/mesh-next-ep2.yml collective_overlap=most > "$out/log" 2>&1; then
    echo "planned"; return 1
  fi
  grep -qF "expected auto, on, off or all" "$out/log" || { cat "$out/log"; return 1; }
  [ -z "$(ls "$out" | grep -v '^log$')" ] && cat "$out/log"
}
check "experts' exchanges overlapped: an unknown collective_overlap refused" eo_refused

# The microbatch form's reduce-scatter (collective_overlap all, G > 1; docs/overlap.md "The
# microbatch form's reduce-scatter"): the microbatch-end's last reduce-scatter starts after
# the microbatch's totals and is waited for (and pushed) first in the next microbatch's
# backward, its forward running beside it; the last microbatch's at the step's start.
# mo_cell ONE RUN RANKS OVERRIDES...: RUN with OVERRIDES (G=2, one sequence a microbatch a
# rank) blocking (collective_overlap auto) == with collective_overlap=all == ONE, loss bits
# and fingerprint of every step over 10 steps (0 ulp); the overlapped plan.txt names the
# split. Mutation tried by hand once: the wait and push placed after the backward's first
# weight gradient (schedule/step.c) -> configgen refuses the plan (check/plan.c
# check_prev_mb, "microbatch op 98 (coll_wait) completes ... after a weight gradient");
# with that check off, the binary refuses at start-up (qt_validate_mb_splits, op 98).
MO_DIR=$QT_TMP/mb_overlap
mo_cell() {
  local one=$1 run=$2 n=$3 a; shift 3
  plan_det "$one" 1 "$EO_DIR" 10 || return 1
  for a in auto all; do
    local d=$MO_DIR/$a
    mkdir -p "$d"
    plan_variant "$run" "$d" "$@" collective_overlap=$a || return 1
    rm -f "$d/$run.jsonl"
    timeout 120 mpiexec -n "$n" "$d/$run-v/qtrain" data=tests/golden/e2e/test-next-tiny/tokens.npy \
      seed=11 steps=10 metrics="$d/$run.jsonl" 2> "$d/$run.err" ||
      { tail -n 3 "$d/$run.err"; return 1; }
    det_fields "$d/$run.jsonl" > "$d/$run.det" || return 1
  done
  local t=$MO_DIR/all/$run-v/plan/$run/plan.txt
  grep -q "split: waited for before the next microbatch's backward" "$t" &&
    grep -qE '^ +[0-9]+ coll_wait .*PREV_MB' "$t" || { echo "no split reduce-scatter in $t"; return 1; }
  ! grep -q "PREV_MB" "$MO_DIR/auto/$run-v/plan/$run/plan.txt" || { echo "split without all"; return 1; }
  cmp "$MO_DIR/auto/$run.det" "$MO_DIR/all/$run.det" || { echo "overlapped != blocking"; return 1; }
  cmp "$EO_DIR/$one.det" "$MO_DIR/all/$run.det" || { echo "overlapped != one rank"; return 1; }
  echo "identical: $(tail -n 1 "$MO_DIR/all/$run.det")"
}
for cell in "mesh-next-1r mesh-next-dp2 2" "mesh-next-1r mesh-next-ep2 2"; do
  set -- $cell
  check "microbatch reduce-scatter overlapped: ${2} G=2 microbatch form ($3 ranks, all) == blocking == one rank (${1}), bit for bit" \
    mo_cell "$@" per_device_batch_size=1 gradient_accumulation_steps=2 gradient_reduce=microbatch
done

# The microbatch form's units exchange (collective_overlap all, G > 1, a microbatch's leaves a
# rank not a power of two: grad_mb_units; docs/overlap.md "The microbatch form's units
# exchange"): the last exchanged range's GRAD_MB_UNITS becomes GRAD_MB_UNITS_START, the
# microbatch-end schedule's last op, and a GRAD_MB_UNITS_WAIT (flagged PREV_MB: it completes
# the exchange and pushes the units) first in the next microbatch's backward and first in the
# step schedule; the next microbatch's forward runs beside it.
# mu_cell ONE RUN RANKS [OVERRIDES...]: RUN blocking (the committed build, or with OVERRIDES
# a variant with collective_overlap auto) == RUN with collective_overlap=all == ONE, loss bits
# and fingerprint of every step over 10 steps (0 ulp); the split plan names the split and its
# scratch, the blocking one has no PREV_MB op.
# Mutations tried by hand once (session 15): the wait op not waiting (step_ops.c: no
# qt_coll_wait_units: "id -16 is in flight already", step 0 fails; coll_async.c: the wait
# lets the job go after one progress: "4 collectives already in flight", step 1 or 2 fails);
# a piece unpacked into the wrong place (coll_steps.c qt_coll_units_done: into block p + 1:
# all five cells differ, overlapped != blocking; into unit u + 1: the four with q = 3 differ,
# and coll_check's units checks fail); configgen placing the wait after the backward's first
# weight gradient: configgen refuses ("microbatch op 98 (grad_mb_units_wait) completes the
# previous microbatch's split exchange after a weight gradient ..."), with that check off the
# binary refuses at start-up (qt_validate_mb_splits, op 98), with both off the loss differs
# from one rank's at step 2.
MU_DIR=$QT_TMP/mb_units_overlap
mu_cell() {
  local one=$1 run=$2 n=$3 a b; shift 3
  mkdir -p "$MU_DIR"
  plan_det "$one" 1 "$EO_DIR" 10 || return 1
  for a in auto all; do
    local d=$MU_DIR/$a-$run${1:+-$(echo "$*" | tr -c 'a-z0-9\n' '_')}
    mkdir -p "$d"
    b=build/$run/qtrain
    if [ $a = all ] || [ $# -gt 0 ]; then
      plan_variant "$run" "$d" "$@" collective_overlap=$a || return 1
      b=$d/$run-v/qtrain
    fi
    rm -f "$d/run.jsonl"
    timeout 120 mpiexec -n "$n" "$b" data=tests/golden/e2e/test-next-tiny/tokens.npy \
      seed=11 steps=10 metrics="$d/run.jsonl" 2> "$d/run.err" ||
      { tail -n 3 "$d/run.err"; return 1; }
    det_fields "$d/run.jsonl" > "$d/run.det" || return 1
    eval "mu_$a=\$d"
  done
  local t=$mu_all/$run-v/plan/$run/plan.txt tb=generated/$run/plan.txt
  [ $# -gt 0 ] && tb=$mu_auto/$run-v/plan/$run/plan.txt
  grep -qE '^ +[0-9]+ grad_mb_units_wait .*PREV_MB' "$t" &&
    grep -qE '^ +[0-9]+ grad_mb_units_start ' "$t" &&
    grep -q "units exchange (GRAD_MB_UNITS_START at the microbatch's end" "$t" &&
    grep -q "of which the split units exchange's" "$t" ||
    { echo "no split units exchange in $t"; return 1; }
  ! grep -q "PREV_MB\|grad_mb_units_start" "$tb" || { echo "split without all: $tb"; return 1; }
  cmp "$mu_auto/run.det" "$mu_all/run.det" || { echo "overlapped != blocking"; return 1; }
  cmp "$EO_DIR/$one.det" "$mu_all/run.det" || { echo "overlapped != one rank"; return 1; }
  echo "identical: $(tail -n 1 "$mu_all/run.det"); $(grep -o "split: range [0-9]*'s units exchange" "$t"), scratch $(grep "of which the split units" "$t" | awk '{print $(NF-3)}') bytes"
}
for cell in "odd-next-1r-b12 split-next-dp2-g2-mb 2" \
            "odd-next-1r-b18 split-next-dp2-g2-mb 2 gradient_accumulation_steps=3" \
            "odd-next-1r-b18 split-next-dp2-g3-z1-mb 2" \
            "odd-next-1r-b12 split-next-ep2-b3-g2 2" \
            "odd-next-1r-b6 split-next-dp3-g2-mb 3"; do
  set -- $cell
  check "microbatch units exchange overlapped: ${2}${4:+ $4} ($3 ranks, all) == blocking == one rank (${1}), bit for bit" \
    mu_cell "$@"
done
