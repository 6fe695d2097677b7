#!/usr/bin/env bash
# bench_slice.sh - `make bench-slice` (or `make bench BENCH_SLICE=1`): a few training steps of
# the qwen3-next-80b-a3b slice (configgen/configs/runs/bench-80b-slice.yml: one 4-layer cycle
# at the model's per-layer shapes, 1 x 4096 tokens per step, 16 experts, vocab 32768) in
# qtrain and in the PyTorch reference of the same config (tests/reference/bench_torch.py
# --run bench-80b-slice, chunked GDN), printed side by side: tokens/s, step time, MFU,
# arena prefault and peak RSS. Figures, not assertions. A qtrain step took 4.5 min here (2026-12-01) and a
# PyTorch step longer, so this is not part of the default `make bench`.
#
# SLICE_STEPS (default 2) qtrain steps, the first not counted (SLICE_STEPS=1: the one step is
# timed, first-step costs included); TORCH_STEPS (default 1) timed
# PyTorch steps from the first (0 skips the reference): its first step alone passes 20 GiB
# resident (16 attention score tensors of 1 GiB and the autograd graph beside the weights),
# so no untimed warm-up step is run first (one-time overheads are small beside minutes). The two never run at
# once: the arena is 16 GiB of the machine's 24.
# BENCH_CANNED=DIR formats canned outputs (tests/scripts/bench_common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=bench-80b-slice
STEPS=${SLICE_STEPS:-2}
TSTEPS=${TORCH_STEPS:-1}
WARM=$((STEPS > 1 ? 1 : 0))
. tests/scripts/bench_flops.sh
. tests/scripts/bench_common.sh
bench_scratch bench-slice
bench_make build/bench/kernel_bench
bench_cpu
bench_peak peak.txt
bench_model $RUN
echo "slice: d=$d L=$L heads $hq/$hkv x $hd, GDN $hk/$hv x $dk/$dv, experts $E top-$k x $f, shared $fs, vocab $V, batch $b x $S"
echo "model FLOPs per token (fwd+bwd): $fpt ($(awk -v f=$fpt -v t=$((b*S)) 'BEGIN{printf "%.2f", f*t/1e12}') TFLOP per step); MFU against ${PEAK} GFLOP/s (this machine's single-core FMA peak)"
bench_peak_line
bench_make build/$RUN/qtrain
# memory for both runs (they run one after the other), checked before either starts
need_mem "$(plan_mib $RUN arena)" "qtrain's arena" || exit 1
[ "$TSTEPS" -gt 0 ] && { need_mem 20480 "the PyTorch slice step (20 GiB resident; TORCH_STEPS=0 skips it)" || exit 1; }
bench_run m.jsonl err.txt -- ./build/$RUN/qtrain $BENCH_ARENA steps=$STEPS metrics=$out/m.jsonl 2> $out/err.txt || { cat $out/err.txt; exit 1; }
grep -E '^qtrain: (run|peak RSS)' $out/err.txt || true
avg() { awk -v w=$WARM -v key="\"$1\":" -F'"' '/^\{"step"/ && ++n>w { split($0, a, key); split(a[2], v, /[,}]/); s += v[1]; c++ }
        END { if (c) printf "%.3f", s/c; else printf "?" }' $out/m.jsonl; }
qt_tps=$(avg tokens_per_s); qt_step=$(avg step_s)
prefault=$(grep -o 'prefault [0-9.]* s' $out/err.txt | awk '{print $2}')
qt_rss=$(grep -o 'peak RSS [0-9.]* MiB' $out/err.txt | awk '{print $3}')

# As bench.sh: python3-torch for /usr/bin/python3 calls the system libblas.so.3, and the
# reference BLAS would make the baseline ~10x slower (a first slice step took 24+ CPU minutes
# on it), so `make bench-slice` installs python3-torch and OpenBLAS (tests/scripts/deps.sh
# bench) and OpenBLAS picks its kernels for this CPU.
pt_line=""
if [ "$TSTEPS" -gt 0 ]; then
  if [ -z "${BENCH_CANNED:-}" ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "bench_slice: /usr/bin/python3 has no torch: make bench-slice installs python3-torch (tests/scripts/deps.sh bench); TORCH_STEPS=0 skips the reference" >&2
    exit 1
  fi
  need_mem 20480 "the PyTorch slice step (20 GiB resident; TORCH_STEPS=0 skips it)" || exit 1
  pt_line=$(bench_out pt.txt torch_ref \
              --run $RUN --steps $TSTEPS --warmup 0 --gdn chunked --no-single 2> $out/pt.err | tail -n1) ||
    { cat $out/pt.err; exit 1; }
fi
num() { echo "$pt_line" | grep -o "\"$1\": *[0-9.e+-]*" | grep -o '[0-9.e+-]*$' || true; }
pt_tps=$(num tokens_per_s); pt_step=$(num step_s); pt_rss=$(num peak_rss_mib); pt_thr=$(num threads)
pt_cpu=$(num cpu_step_s)
if [ "$TSTEPS" -gt 0 ] && [ -z "$pt_tps" ]; then
  echo "bench_slice: the PyTorch reference gave no tokens_per_s:" >&2; cat $out/pt.err >&2 2>/dev/null; exit 1
fi

mfu() { awk -v t=$1 -v f=$fpt -v p=$PEAK 'BEGIN{printf "%.1f%%", 100*t*f/(p*1e9)}'; }
printf '\n%-32s %10s %10s %8s %14s\n' "implementation ($RUN)" "tokens/s" "step s" "MFU" "peak RSS MiB"
printf '%-32s %10.1f %10.2f %8s %14s\n' "qtrain (fp32, 1 rank)" "$qt_tps" "$qt_step" "$(mfu $qt_tps)" "${qt_rss:-?}"
if [ -n "$pt_tps" ]; then
  printf '%-32s %10.1f %10.2f %8s %14.0f\n' "pytorch ${pt_thr} thread(s) fp32" "$pt_tps" "$pt_step" "$(mfu $pt_tps)" "$pt_rss"
  awk -v a=$qt_tps -v b=$pt_tps 'BEGIN{printf "qtrain / pytorch: %.2fx\n", a/b}'
  echo "pytorch CPU time per step: ${pt_cpu:-?} s (wall ${pt_step} s; on a shared machine the CPU time is the fairer figure)"
else
  echo "pytorch reference: not run (TORCH_STEPS=0)"
fi
echo "qtrain arena prefault: ${prefault:-?} s; steps timed: $((STEPS - WARM)) of $STEPS (qtrain), the first $TSTEPS (pytorch)"
# Issue 22's targets for the slice, with this run's values (fp32: >= 65% of the peak measured
# now and >= 2.2x PyTorch). Shown, not asserted.
echo "targets (issue 22, the 80B slice; this run on $cpu_line):"
tgt "slice MFU" "$(awk -v t=$qt_tps -v f=$fpt -v p=$PEAK 'BEGIN{printf "%.2f", 100*t*f/(p*1e9)}')" ">=" 65 % "against the fp32 FMA peak $PEAK GFLOP/s"
tgt "slice / pytorch fp32" "$([ -n "$pt_tps" ] && awk -v a=$qt_tps -v b=$pt_tps 'BEGIN{printf "%.3f", a/b}')" ">=" 2.2 x \
  "$(pick "$pt_tps" "pytorch $pt_tps tokens/s" TORCH_STEPS=0)"
