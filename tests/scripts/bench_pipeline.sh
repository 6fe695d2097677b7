#!/usr/bin/env bash
# bench_pipeline.sh - `make bench-pipeline`: pipeline parallelism (issue 36, docs/pipeline.md)
# on the 80B slice (configgen/configs/runs/bench-80b-slice.yml: one 4-layer cycle of
# qwen3-next-80b-a3b, 16 experts, vocab 32768, remat none) against one rank and DP2, on the
# same global batch of M sequences of PP_SEQ tokens per step, printed side by side:
#   1 rank    per_device_batch_size 1, gradient_accumulation_steps M
#   DP2       2 ranks, data 2, ZeRO-1 (shard_optimizer_over_data) and gradient_reduce layer,
#             per_device_batch_size 1, gradient_accumulation_steps M / 2 (without ZeRO-1 two
#             arenas do not fit the VM: 2 x 11.3 GiB at S 1024)
#   PP2 gpipe 2 ranks, 2 stages of 2 layers, per_device_batch_size M / 2, M microbatches
#   PP2 1f1b  the same under pipeline_schedule 1f1b
# Each variant is configgen's plan of the slice file with those keys (built once per PP_SEQ
# and M into build/bench-pipeline/S<seq>-M<M>/), run for PP_STEPS steps, the first a
# warm-up not counted in tokens/s (PP_STEPS=1: the one step, its first-step costs included).
# The table: tokens/s, step time, MFU against the fp32 FMA peak measured now (the model
# FLOPs of plan.txt's main fwd row), the share of rank 0's step inside collectives, and for
# the pipelines each stage's measured bubble (qtrain's exit lines "pipeline stage s of S":
# the waits for boundary messages and at the stages' merges over the schedule's time plus
# those merges) beside the formula (S - 1) / (M + S - 1). Every variant gives one rank's
# bits, so the loss bits and fingerprints of every step are compared and a difference fails
# the script. Figures, not assertions otherwise.
#
# Knobs: PP_SEQ (default 1024: 4 x 1024 tokens per step, the slice's tokens per step), PP_M
# (default 4; even), PP_STEPS (default 2), PP_OUT=DIR keeps the logs (else a scratch dir),
# PP_REPORT_ONLY=1 with PP_OUT formats the logs already there, PP_LOCK=FILE runs each
# variant under `flock FILE` (its memory checked once the lock is held, and waited for up to
# 10 minutes), BENCH_CANNED=DIR formats canned outputs (tests/scripts/bench_common.sh).
# The runs never overlap (the one-rank arena is
# 12.6 GiB at S 1024, the two DP2 and PP2 ranks about 8 GiB each); each is refused unless
# MemAvailable covers it. On this VM the two vCPUs share their FP units (docs/toolchain.md
# section 0), so a 2-rank run is two processes on about one core's FMA: the speed-up is
# bounded by the cores, and what the rows show is the pipeline's extra forward (stage 0
# recomputes its forward at the backward) and its bubble.
set -euo pipefail
cd "$(dirname "$0")/../.."
SEQ=${PP_SEQ:-1024}
M=${PP_M:-4}
STEPS=${PP_STEPS:-2}
WARM=$((STEPS > 1 ? 1 : 0))
[ $((M % 2)) -eq 0 ] && [ "$M" -ge 2 ] ||
  { echo "bench_pipeline.sh: PP_M=$M: expected an even number of microbatches (a multiple of the 2 stages)" >&2; exit 2; }
. tests/scripts/bench_common.sh
if [ -n "${PP_OUT:-}" ]; then out=$PP_OUT; mkdir -p "$out"
else bench_scratch bench-pipeline; fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_make build/bench/kernel_bench build/configgen/configgen
bench_cpu
bench_peak peak.txt

# the variants: name, ranks, configgen keys
VARS=(r1 z1 pp2g pp2f)
declare -A RANKS=([r1]=1 [z1]=2 [pp2g]=2 [pp2f]=2)
declare -A LABEL=([r1]="qtrain fp32, 1 rank" [z1]="qtrain fp32, DP2 ZeRO-1" [pp2g]="qtrain fp32, PP2 gpipe" [pp2f]="qtrain fp32, PP2 1f1b")
PPK="num_ranks=2 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=2 ici_fsdp_parallelism=1 per_device_batch_size=$((M / 2)) num_pipeline_microbatches=$M"
declare -A KEYS=(
  [r1]="per_device_batch_size=1 gradient_accumulation_steps=$M"
  [z1]="num_ranks=2 ici_data_parallelism=2 ici_fsdp_parallelism=1 shard_optimizer_over_data=true gradient_reduce=layer per_device_batch_size=1 gradient_accumulation_steps=$((M / 2))"
  [pp2g]="$PPK"
  [pp2f]="$PPK pipeline_schedule=1f1b")
BD=build/bench-pipeline/S$SEQ-M$M
# variant NAME: configgen's plan into $BD/plan/ppb-NAME, its binary $BD/NAME (kept)
variant() {
  local n=$1
  [ -x "$BD/$n" ] && return 0
  mkdir -p "$BD"
  # shellcheck disable=SC2086
  build/configgen/configgen -o "$BD/plan" configgen/configs/runs/bench-80b-slice.yml run_name=ppb-$n \
    max_target_length=$SEQ ${KEYS[$n]} > "$BD/$n.configgen.log" 2>&1 || { cat "$BD/$n.configgen.log" >&2; return 1; }
  make -s --no-print-directory plan-binary PLAN="$BD/plan/ppb-$n" OUT="$BD/$n" > "$BD/$n.make.log" 2>&1 ||
    { tail -n 5 "$BD/$n.make.log" >&2; return 1; }
}
plan_txt() { if [ -n "${BENCH_CANNED:-}" ]; then echo "$BENCH_CANNED/plan-$1.txt"; else echo "$BD/plan/ppb-$1/plan.txt"; fi; }
if [ -z "${BENCH_CANNED:-}" ]; then
  for v in "${VARS[@]}"; do variant $v; cp "$(plan_txt $v)" "$out/plan-$v.txt"; done
fi
# model FLOPs per token (fwd + bwd) of the slice at this S: plan.txt's main fwd row (model/flops.c)
fpt=$(awk '$1 == "main" && $2 == "fwd" {print $5}' "$(plan_txt r1)")
echo "slice: bench-80b-slice.yml at S $SEQ, $M sequences per step on every variant ($((M * SEQ)) tokens), remat none"
echo "model FLOPs per token (fwd+bwd; the pipeline's recomputed forward not counted): $fpt ($(awk -v f=$fpt -v t=$((M * SEQ)) 'BEGIN{printf "%.2f", f*t/1e12}') TFLOP per step)"
bench_peak_line

export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
# plan_arena NAME: MiB per rank (a pipeline's: the largest executed stage table)
plan_arena() {
  local f; f=$(plan_txt $1)
  if grep -q 'executed tables' "$f"; then
    awk '/^    stage [0-9]+: plan hash/ {for (i = 1; i < NF; i++) if ($i == "arena") {v = $(i+1) + 0; if (v > m) m = v}} END {printf "%.0f", m}' "$f"
  else awk 'index($0, "  arena") == 1 {printf "%.0f", $(NF-1); exit}' "$f"; fi
}
# mem_wait MIB WHAT: need_mem; with PP_LOCK, memory that other jobs (outside the lock) hold may
# come free: retried every 20 s for up to 10 minutes before the run is refused
mem_wait() {
  local t=0
  while [ -n "${PP_LOCK:-}" ] && [ $t -lt 600 ] && ! need_mem "$@" 2> /dev/null; do sleep 20; t=$((t + 20)); done
  need_mem "$@"
}
if [ -z "${PP_REPORT_ONLY:-}" ]; then
  for v in "${VARS[@]}"; do
    n=${RANKS[$v]}
    # PP_LOCK=FILE: each run, and its memory check, under flock FILE
    if [ -n "${PP_LOCK:-}" ] && [ -z "${BENCH_CANNED:-}" ]; then exec 9> "$PP_LOCK"; flock 9; fi
    mem_wait $((n * $(plan_arena $v))) "${LABEL[$v]} ($n x $(plan_arena $v) MiB)"
    cmd="./$BD/$v $BENCH_ARENA steps=$STEPS metrics=$out/$v.jsonl"
    [ "$n" -gt 1 ] && cmd="mpiexec -n $n $cmd"
    # shellcheck disable=SC2086
    bench_run $v.jsonl $v.txt -- timeout 7200 $cmd 2> $out/$v.txt || { cat $out/$v.txt; exit 1; }
    if [ -n "${PP_LOCK:-}" ] && [ -z "${BENCH_CANNED:-}" ]; then exec 9>&-; fi
  done
fi

avg() { awk -v w=$WARM -v key="\"$2\":" -F'"' '/^\{"step"/ && ++n>w { split($0, a, key); split(a[2], v, /[,}]/); s += v[1]; c++ }
        END { if (c) printf "%.3f", s/c; else printf "?" }' $1; }
coll_share() { grep 'qtrain: collectives:' $1 | awk '{for(i=1;i<=NF;i++) if($i=="s") {sub(/^\(/,"",$(i+1)); print $(i+1); exit}}'; }
mfu() { awk -v t=$1 -v f=$fpt -v p=$PEAK 'BEGIN{printf "%.1f%%", 100*t*f/(p*1e9)}'; }
# bubbles FILE: "b0 / b1" (each stage's measured bubble, stage order) from the exit lines
bubbles() { awk '/^qtrain: pipeline stage/ {s = $4; for (i = 1; i <= NF; i++) if ($i == "bubble") b[s] = $(i+1)}
                 END {for (k = 0; (k "") in b; k++) printf "%s%s", (k ? " / " : ""), b[k]}' $1; }
formula=$(awk -v m=$M 'BEGIN{printf "%.4f", 1 / (m + 1)}')
printf '\n%-26s %9s %9s %7s %9s %10s %18s\n' "bench-pipeline (S $SEQ, M $M)" "tokens/s" "step s" "MFU" "in coll." "arena" "bubble per stage"
printf '%-26s %9s %9s %7s %9s %10s %18s\n' "" "" "" "" "(rank 0)" "MiB/rank" "(formula $formula)"
for v in "${VARS[@]}"; do
  t=$(avg $out/$v.jsonl tokens_per_s)
  printf '%-26s %9.2f %9.1f %7s %9s %10s %18s\n' "${LABEL[$v]}" "$t" "$(avg $out/$v.jsonl step_s)" "$(mfu $t)" \
    "$([ ${RANKS[$v]} -gt 1 ] && coll_share $out/$v.txt || echo -)" "$(plan_arena $v)" "$(case $v in pp*) bubbles $out/$v.txt;; *) echo -;; esac)"
done
t1=$(avg $out/r1.jsonl tokens_per_s)
for v in z1 pp2g pp2f; do
  awk -v a=$(avg $out/$v.jsonl tokens_per_s) -v b=$t1 -v l="${LABEL[$v]#qtrain fp32, }" 'BEGIN{printf "%s / 1 rank: %.2fx tokens/s\n", l, a/b}'
done
echo "bubble formula (S - 1) / (M + S - 1) = 1 / $((M + 1)) = $formula (S 2, M $M, one repeat); measured: each stage's waits for boundary messages and at the stages' merges / (its schedule + those merges), over all $STEPS steps:"
grep -h '^qtrain: pipeline stage' $out/pp2g.txt $out/pp2f.txt | sed 's/^qtrain: /  /'
echo "steps timed: $((STEPS - WARM)) of $STEPS per run$([ $WARM -gt 0 ] && echo ' (the first is the warm-up)' || echo ' (no warm-up step: PP_STEPS=1)')"
echo "two ranks share the 2 vCPUs' FP units (about one core's FMA for both): the 2-rank rows are bounded by the cores; a stage before the last runs its forward twice (stage-boundary rematerialisation)"

# every variant gives one rank's bits: the loss bits and fingerprint of every step must agree
det() { awk '/^\{"step"/ { l = match($0, /"loss_bits":"0x[0-9a-f]+"/) ? substr($0, RSTART + 13, RLENGTH - 14) : "?";
                           f = match($0, /"fingerprint":"0x[0-9a-f]+"/) ? substr($0, RSTART + 15, RLENGTH - 16) : "?";
                           print "step " ++n ": loss bits " l ", fingerprint " f }' $1; }
echo
for v in z1 pp2g pp2f; do
  if [ "$(det $out/r1.jsonl)" != "$(det $out/$v.jsonl)" ] || [ -z "$(det $out/r1.jsonl)" ]; then
    echo "BITS DIFFER between 1 rank and ${LABEL[$v]#qtrain fp32, }:"; paste <(det $out/r1.jsonl) <(det $out/$v.jsonl); exit 1
  fi
done
det $out/r1.jsonl | sed 's/^/same bits on 1 rank, DP2, PP2 gpipe and PP2 1f1b: /'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
