# 06_bench_report.sh - the bench reports under Debian's awk (sourced by tests/scripts/run_all.sh).
# make bench, bench-slice, bench-context and bench-pipeline run for minutes to an hour, so no
# other test runs their report code, and an awk program mawk cannot parse went unseen until a
# user ran make bench-slice (exit 2: `>` inside printf's arguments is a redirection to mawk). Here each
# script formats canned outputs (BENCH_CANNED=DIR: no build, no measurement;
# tests/bench/canned/, kept from real runs by BENCH_KEEP=DIR and trimmed) with `awk` resolved
# to mawk, and must exit 0, write nothing to stderr and print its targets with met / not met.
BR_DIR=$QT_TMP/bench_report
BR_CANNED=$QT_ROOT/tests/bench/canned

# br_mawk: a directory whose `awk` is mawk, first on PATH for the scripts.
br_mawk() {
  local m; m=$(command -v mawk) || { echo "mawk is not installed (tests/scripts/deps.sh installs it)"; return 1; }
  mkdir -p "$BR_DIR/bin" && ln -sf "$m" "$BR_DIR/bin/awk"
}

# br_run NAME SCRIPT PATTERN... [-- ENV...]: runs SCRIPT on canned outputs under mawk; passes
# when it exits 0, its stderr is empty and every PATTERN (grep -E) is in its output.
br_run() {
  local name=$1 script=$2; shift 2
  local pats=() envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do pats+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; envs=("$@"); }
  br_mawk || return 1
  local o=$BR_DIR/$name.out e=$BR_DIR/$name.err
  env PATH="$BR_DIR/bin:$PATH" "${envs[@]}" bash "$script" > "$o" 2> "$e"
  local rc=$?
  cat "$o"
  [ "$rc" -eq 0 ] || { echo "$script exited $rc"; cat "$e"; return 1; }
  [ -s "$e" ] && { echo "$script wrote to stderr:"; cat "$e"; return 1; }
  for p in "${pats[@]}"; do grep -Eq -- "$p" "$o" || { echo "missing from the output: $p"; return 1; }; done
  echo "$script: exit 0 under $(readlink "$BR_DIR/bin/awk"), ${#pats[@]} patterns found"
}

# The targets of issue 34, each with a value and met / not met (or n/a with its reason).
BR_T34=('^targets \(issue 34; this run on '
  '^  bf16 / fp32 \(bench model\) +[0-9.]+x +\(target >= 1\.6x\)  (met|not met)'
  '^  bf16 / pytorch bf16 \(bench model\) +[0-9.]+x +\(target >= 2x\)  (met|not met)'
  '^  fp32 MFU \(bench model\) +[0-9.]+% +\(target >= 60%\)  (met|not met)'
  '^  fp32 / pytorch fp32 \(bench model\) +[0-9.]+x +\(target >= 2\.2x\)  (met|not met)'
  '^  bf16 expert FFN fwd, of the VDPBF16PS peak +[0-9.]+% +\(target >= 75%\)  (met|not met)'
  '^  bf16 expert FFN bwd_data, .* \(target >= 75%\)  (met|not met)'
  '^  bf16 expert FFN wgrad, .* \(target >= 75%\)  (met|not met)'
  '^  fp32 FMA peak, start vs end of this bench +[0-9.]+% +\(target <= 2%\)  (met|not met)'
  '^  VDPBF16PS peak, start vs end of this bench +[0-9.]+% +\(target <= 2%\)  (met|not met)'
  '^  DP2 share of the step in collectives +[0-9.]+%'
  '^cpu: .*family [0-9]+ model [0-9]+'
  '^  fp32 FMA +[0-9.]+ GFLOP/s \([0-9]+ trials [0-9.]+-[0-9.]+, median [0-9.]+, spread [0-9.]+%\)')
check "make bench's report under mawk (canned outputs): every issue-34 target with met / not met" \
  br_run bench tests/scripts/bench.sh "${BR_T34[@]}" -- BENCH_CANNED=$BR_CANNED/bench BENCH_CPUINFO=$BR_CANNED/cpuinfo-zen5
check "make bench's report on a Xeon's /proc/cpuinfo: the Xeon's bf16 target (1.5x)" \
  br_run bench-xeon tests/scripts/bench.sh '^  bf16 / fp32 \(bench model\) +[0-9.]+x +\(target >= 1\.5x\)  (met|not met); issue 34.s Xeon target' \
  -- BENCH_CANNED=$BR_CANNED/bench BENCH_CPUINFO=$BR_CANNED/cpuinfo-xeon
check "make bench's report without the PyTorch reference (BENCH_TORCH=0): its targets n/a, exit 0" \
  br_run bench-notorch tests/scripts/bench.sh '^  fp32 / pytorch fp32 \(bench model\) +- +\(target >= 2\.2x\)  n/a: BENCH_TORCH=0' \
  -- BENCH_CANNED=$BR_CANNED/bench BENCH_TORCH=0
# A CPU or build without AVX512_BF16: kernel_bench peak prints no peak_bf16 value (and the
# kernel table no VDPBF16PS rows' peak); the bf16 targets against it print n/a.
br_nobf16() {
  rm -rf "$BR_DIR/nobf16" && mkdir -p "$BR_DIR" && cp -r "$BR_CANNED/bench" "$BR_DIR/nobf16" || return 1
  local f
  for f in peak0.txt peak1.txt; do
    awk '$1 == "peak_bf16" {print "peak_bf16: skipped, this build has no AVX512_BF16 (VDPBF16PS)"; next}
         $1 == "peak_trials" && $2 == "bf16" {next} {print}' "$BR_CANNED/bench/$f" > "$BR_DIR/nobf16/$f" || return 1
  done
  br_run bench-nobf16 tests/scripts/bench.sh \
    '^  VDPBF16PS: not measured' \
    '^  bf16 expert FFN fwd, of the VDPBF16PS peak +- +\(target >= 75%\)  n/a: no VDPBF16PS' \
    '^  VDPBF16PS peak, start vs end of this bench +- +\(target <= 2%\)  n/a: no VDPBF16PS' \
    -- BENCH_CANNED=$BR_DIR/nobf16 BENCH_CPUINFO=$BR_CANNED/cpuinfo-xeon
}
check "make bench's report without AVX512_BF16: the VDPBF16PS targets n/a, exit 0" br_nobf16
check "make bench-slice's report under mawk (canned outputs): the slice's targets with met / not met" \
  br_run slice tests/scripts/bench_slice.sh '^  slice MFU +[0-9.]+% +\(target >= 65%\)  (met|not met)' \
  '^  slice / pytorch fp32 +[0-9.]+x +\(target >= 2\.2x\)  (met|not met)' '^qtrain / pytorch: [0-9.]+x' \
  -- BENCH_CANNED=$BR_CANNED/slice
check "make bench-context's report under mawk (canned outputs): the table and the same-bits line" \
  br_run context tests/scripts/bench_context.sh '^qtrain fp32, CP2 +[0-9.]+' '^same bits on 1 rank and CP2: step 2' \
  '^CP2 / 1 rank: [0-9.]+x' -- BENCH_CANNED=$BR_CANNED/context
check "make bench-pipeline's report under mawk (canned outputs): the table with each stage's bubble, the same-bits line" \
  br_run pipeline tests/scripts/bench_pipeline.sh '^qtrain fp32, PP2 gpipe +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+% +[0-9]+ +0\.[0-9]{4} / 0\.[0-9]{4}$' \
  '^qtrain fp32, PP2 1f1b +[0-9.]+' '^qtrain fp32, DP2 ZeRO-1 +[0-9.]+' '^PP2 1f1b / 1 rank: [0-9.]+x' \
  '^bubble formula \(S - 1\) / \(M \+ S - 1\) = 1 / 5 = 0\.2000' \
  '^same bits on 1 rank, DP2, PP2 gpipe and PP2 1f1b: step 2' -- BENCH_CANNED=$BR_CANNED/pipeline PP_SEQ=256
