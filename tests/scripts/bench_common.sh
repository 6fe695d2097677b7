#!/usr/bin/env bash
# bench_common.sh - sourced by the bench scripts (bench.sh, bench_slice.sh, bench_context.sh):
# the canned mode, the peak measurement with the CPU it ran on, and the target lines.
#
# Canned mode: BENCH_CANNED=DIR runs no build and no measurement; every output a measurement
# would write into the script's scratch directory $out is copied from DIR instead (bench_run,
# bench_out), and the report is formatted from those files as in a real run. It exists for
# tests/e2e/06_bench_report.sh, which feeds canned outputs to every script under mawk (Debian's
# awk): the report's awk programs run in no other test, and one of them once parsed `>`
# inside printf's arguments as a redirection under mawk (make bench-slice exited 2).
# BENCH_CPUINFO=FILE reads the CPU from FILE instead of /proc/cpuinfo (the same check, for
# the targets of other CPUs).

# Every timed qtrain run keeps its whole arena on huge pages however long the kernel takes to
# compact memory for them at start-up (untimed): under the default arena_pages=auto a
# fragmented page cache puts part of it on 4 KiB pages, ~3% slower steps (docs/cli.md).
BENCH_ARENA=arena_pages=huge

# bench_make TARGET...: make the targets quietly (nothing in canned mode).
bench_make() {
  [ -n "${BENCH_CANNED:-}" ] && return 0
  make --no-print-directory "$@" > /dev/null
}

# bench_run FILE... -- CMD...: runs CMD (which writes FILE... into $out itself); in canned mode
# copies each DIR/FILE to $out/FILE instead.
bench_run() {
  local files=() f
  while [ "$1" != -- ]; do files+=("$1"); shift; done
  shift
  if [ -n "${BENCH_CANNED:-}" ]; then
    for f in "${files[@]}"; do cp "$BENCH_CANNED/$f" "$out/$f" || return 1; done
    return 0
  fi
  "$@"
}

# bench_out NAME CMD...: CMD's standard output, kept in $out/NAME too; in canned mode the
# contents of DIR/NAME.
bench_out() {
  local name=$1; shift
  if [ -n "${BENCH_CANNED:-}" ]; then cp "$BENCH_CANNED/$name" "$out/$name" && cat "$out/$name"; return; fi
  "$@" | tee "$out/$name"
}

# torch_ref ARGS...: the PyTorch reference (tests/reference/bench_torch.py) on one core, as
# qtrain runs: pinned to CPU 0 with one OpenBLAS / OpenMP thread. Unpinned, Debian's OpenBLAS
# starts a thread per core beside torch's own, so "1 thread" used 1.4 cores (the slice's step:
# 325 s of CPU time in 227 s of wall time on 2 vCPUs, 2026-12-06) against qtrain's one.
torch_ref() {
  taskset -c 0 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    /usr/bin/python3 tests/reference/bench_torch.py "$@"
}

# bench_scratch NAME: makes the scratch directory $out (removed at exit; BENCH_KEEP=DIR copies
# it to DIR/NAME first: the outputs a canned run reads, under the same names). DIR/NAME must
# be new or an empty directory, checked before anything runs: the copy never writes over a
# file the user owns (each bench script keeps into its own NAME, so BENCH_SLICE=1 fits).
bench_scratch() {
  keep=
  if [ -n "${BENCH_KEEP:-}" ]; then
    keep=$BENCH_KEEP/$1
    if [ -e "$keep" ] && { [ ! -d "$keep" ] || [ -n "$(ls -A "$keep")" ]; }; then
      echo "bench: BENCH_KEEP=$BENCH_KEEP: $keep exists and is not an empty directory; give a BENCH_KEEP whose $1/ is new or empty (nothing run, nothing written)" >&2
      exit 2
    fi
  fi
  out=$(mktemp -d "/tmp/qtrain-$1.XXXXXX")
  trap 'if [ -n "$keep" ]; then mkdir -p "$keep" && cp -a "$out/." "$keep/"; fi; rm -rf "$out"' EXIT
}

# bench_cpu: sets cpu_name (the model name), cpu_vendor, cpu_family, cpu_model (decimal, as
# /proc/cpuinfo gives them), cpu_kind (Zen 5, Zen 4, Zen 3, Intel Xeon, ...) and cpu_line
# (all of it, for the reports).
bench_cpu() {
  local f=${BENCH_CPUINFO:-/proc/cpuinfo}
  cpu_name=$(awk -F': *' '$1 ~ /^model name/ {print $2; exit}' "$f")
  cpu_vendor=$(awk -F': *' '$1 ~ /^vendor_id/ {print $2; exit}' "$f")
  cpu_family=$(awk -F': *' '$1 ~ /^cpu family/ {print $2; exit}' "$f")
  cpu_model=$(awk -F': *' '$1 ~ /^model[ \t]*$/ {print $2; exit}' "$f")
  cpu_kind=$(awk -v v="$cpu_vendor" -v f="$cpu_family" -v m="$cpu_model" -v n="$cpu_name" 'BEGIN{
    k = "unknown"
    if (v == "AuthenticAMD") {
      # family 25 (0x19): Zen 3 at models 0x00-0x0f, 0x20-0x5f; Zen 4 at 0x10-0x1f, 0x60-0x7f,
      # 0xa0-0xaf. Family 26 (0x1a): Zen 5.
      if (f + 0 == 26) k = "Zen 5"
      else if (f + 0 == 25) k = ((m >= 16 && m < 32) || (m >= 96 && m < 128) || (m >= 160 && m < 176)) ? "Zen 4" : "Zen 3"
      else k = "AMD family " f
    } else if (v == "GenuineIntel") k = (index(n, "Xeon") ? "Intel Xeon" : "Intel")
    print k }')
  cpu_line="$cpu_name ($cpu_vendor family $cpu_family model $cpu_model: $cpu_kind)"
}

# bench_peak FILE: `kernel_bench peak` (fp32 FMA and VDPBF16PS peaks, each the fastest of its
# trials in thread CPU time after a warm-up, pinned: docs/bench.md "The peak") into $out/FILE
# (canned: DIR/FILE). Sets PEAK (PEAK_GFLOPS overrides it), PEAK16 (empty without
# AVX512_BF16), PEAK_TRIALS / PEAK16_TRIALS (the trial lines) and PEAK_SPREAD / PEAK16_SPREAD
# (% between the fastest and the slowest trial).
bench_peak() {
  bench_out "$1" ./build/bench/kernel_bench peak > /dev/null
  PEAK=${PEAK_GFLOPS:-$(awk '$1 == "peak" {print $2}' "$out/$1")}
  PEAK16=$(awk '$1 == "peak_bf16" {print $2}' "$out/$1")
  PEAK_TRIALS=$(awk '$1 == "peak_trials" && $2 == "fp32" {printf "%s trials %s-%s, median %s, spread %s", $3, $5, $9, $7, $11}' "$out/$1")
  PEAK16_TRIALS=$(awk '$1 == "peak_trials" && $2 == "bf16" {printf "%s trials %s-%s, median %s, spread %s", $3, $5, $9, $7, $11}' "$out/$1")
  PEAK_SPREAD=$(awk '$1 == "peak_trials" && $2 == "fp32" {sub(/%$/, "", $11); print $11}' "$out/$1")
  PEAK16_SPREAD=$(awk '$1 == "peak_trials" && $2 == "bf16" {sub(/%$/, "", $11); print $11}' "$out/$1")
  [ -n "$PEAK" ] || { echo "bench: no peak from kernel_bench peak:" >&2; cat "$out/$1" >&2; return 1; }
}

# bench_peak_line: the peaks and the CPU, one line each (after bench_cpu and bench_peak).
bench_peak_line() {
  echo "cpu: $cpu_line"
  echo "peaks (one core; kernel_bench peak: the fastest trial in thread CPU time, pinned, after a 1 s warm-up):"
  echo "  fp32 FMA  ${PEAK} GFLOP/s ($(pick "${PEAK_GFLOPS:-}" "PEAK_GFLOPS; measured: " "")${PEAK_TRIALS:-?})"
  if [ -n "$PEAK16" ]; then echo "  VDPBF16PS ${PEAK16} GFLOP/s (${PEAK16_TRIALS:-?})"
  else echo "  VDPBF16PS: not measured (this build or CPU has no AVX512_BF16)"; fi
}

# plan_mib RUN KEY: the MiB figure of plan.txt's line starting "  KEY" (arena, activations ...)
plan_mib() { awk -v k="  $2" 'index($0, k) == 1 {printf "%.0f", $(NF-1); exit}' generated/$1/plan.txt; }
# need_mem MIB WHAT: MemAvailable must cover MIB plus 512 MiB for the processes themselves, else
# the script says so and fails (on the shared 24 GiB VM a run started beside other jobs can
# run it out of memory; the kernel then kills one of them). Always passes in canned mode.
need_mem() {
  [ -n "${BENCH_CANNED:-}" ] && return 0
  local avail; avail=$(awk '/^MemAvailable:/ {printf "%d", $2/1024}' /proc/meminfo)
  [ "$avail" -ge $(($1 + 512)) ] && return 0
  echo "$(basename "$0"): $2 needs $1 MiB, so MemAvailable >= $(($1 + 512)) MiB; have $avail MiB (other jobs?): not run" >&2
  return 1
}

# pick A B C: B when A is not empty, else C.
pick() { if [ -n "$1" ]; then echo "$2"; else echo "$3"; fi; }

# tgt NAME VALUE OP TARGET UNIT [NOTE]: one target line with this run's value and met / not
# met (OP is >= or <=); an empty VALUE prints n/a with NOTE. Shown, never asserted.
tgt() {
  awk -v n="$1" -v v="$2" -v op="$3" -v t="$4" -v u="$5" -v note="${6:-}" 'BEGIN{
    if (v == "") { printf "  %-46s %9s  (target %s %s%s)  n/a%s\n", n, "-", op, t, u, (note == "" ? "" : ": " note); exit }
    met = (op == ">=") ? (v + 0 >= t + 0) : (v + 0 <= t + 0)
    # two decimals, or three when two would round a miss onto the target (2.199 -> "2.20")
    f = sprintf("%.2f", v); if (!met && (f + 0 == t + 0)) f = sprintf("%.3f", v)
    printf "  %-46s %8s%s  (target %s %s%s)  %s%s\n", n, f, u, op, t, u, (met ? "met" : "not met"), (note == "" ? "" : "; " note) }'
}
