#!/usr/bin/env bash
# run.sh - runs libFuzzer targets (make fuzz; tests/e2e/36_fuzz.sh runs one at a time).
#
#   tests/fuzz/run.sh SECONDS TARGET...      (from the project root, after make fuzz-build)
#
# For each TARGET (build/fuzz/fuzz_TARGET):
#  1. replays every committed crash input in tests/fuzz/regressions/TARGET/ (each must run
#     clean: a regression that crashes again fails at once);
#  2. fuzzes for SECONDS from the committed seeds tests/fuzz/corpus/TARGET/ plus the
#     regressions, which libFuzzer only reads: new inputs go to a fresh scratch corpus
#     $FUZZ_WORK/TARGET/corpus (default build/fuzz/work), the committed corpus never grows;
#  3. prints one line: executions, exec/s, coverage (cov = edges, ft = features), corpus
#     size, peak RSS, crashes. A crash, leak, timeout (> 10 s for one input) or OOM (> 2 GiB)
#     leaves its input in $FUZZ_WORK/TARGET/ (crash-*, leak-*, timeout-*, oom-*), prints the
#     report and makes the script fail: fix the bug, then commit the input under
#     tests/fuzz/regressions/TARGET/.
# Exit status: 0 when every target ran clean.
set -u
cd "$(dirname "$0")/../.."
export QT_ROOT=${QT_ROOT:-$PWD}
# The targets write every input to a file: on tmpfs that costs microseconds, on the ext4
# root it sometimes costs milliseconds (journal), a tenfold drop in executions.
# A target's scratch directory survives a crash (no atexit then): each run.sh gets a parent
# directory of its own and removes it at the end.
tmp_parent=$(mktemp -d "${TMPDIR:-$( [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo /tmp)}/qtrain-fuzz-run.XXXXXX") || exit 1
trap 'rm -rf "$tmp_parent"' EXIT
export TMPDIR=$tmp_parent
secs=${1:?usage: run.sh SECONDS TARGET...}; shift
work=${FUZZ_WORK:-build/fuzz/work}
status=0
dict_of() {
  case $1 in
    safetensors|st_index|ckpt_load) echo tests/fuzz/dict/json.dict ;;
    npy) echo tests/fuzz/dict/npy.dict ;;
    yaml) echo tests/fuzz/dict/yaml.dict ;;
  esac
}
for t in "$@"; do
  bin=build/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then echo "fuzz $t: $bin missing (make fuzz-build)"; status=1; continue; fi
  w=$work/$t
  rm -rf "$w"; mkdir -p "$w/corpus"
  reg=tests/fuzz/regressions/$t
  regs=()
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
    regs=("$reg")
    if ! "$bin" -timeout=10 -rss_limit_mb=2048 "$reg"/* > "$w/replay.log" 2>&1; then
      echo "fuzz $t: a committed regression input crashes again:"; tail -n 40 "$w/replay.log"
      status=1; continue
    fi
  fi
  d=$(dict_of "$t"); dargs=(); [ -n "$d" ] && dargs=("-dict=$d")
  runs=-1
  t0=$SECONDS; rc=0; execs=0; rss=0; : > "$w/fuzz.log"
  while :; do
    left=$((secs - (SECONDS - t0)))
    [ $left -ge 1 ] || break
    timeout -k 10 $((left + 120)) "$bin" -max_total_time="$left" -runs=$runs -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$w/" "${dargs[@]}" \
      "$w/corpus" "tests/fuzz/corpus/$t" "${regs[@]}" > "$w/chunk.log" 2>&1
    rc=$?
    cat "$w/chunk.log" >> "$w/fuzz.log"
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/chunk.log"); execs=$((execs + ${n:-0}))
    r=$(sed -n 's/^stat::peak_rss_mb: *//p' "$w/chunk.log"); [ "${r:-0}" -gt "$rss" ] && rss=$r
    [ $rc -eq 0 ] && [ $runs -gt 0 ] || break
  done
  el=$((SECONDS - t0)); [ $el -ge 1 ] || el=1
  eps=$((execs / el))
  last=$(grep -E '^#[0-9]+' "$w/fuzz.log" | tail -n 1)
  cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\)\/\([0-9a-zA-Z]*\).*/cov \1, ft \2, corpus \3 (\4)/p' <<< "$last")
  crashes=$(find "$w" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  echo "fuzz $t: ${secs} s, ${execs:-?} executions, ${eps:-?} exec/s, ${cov:-cov ?}, peak RSS ${rss:-?} MiB, crashes: $crashes"
  if [ $rc -ne 0 ] || [ "$crashes" -ne 0 ]; then
    echo "fuzz $t: exit $rc; report (input saved in $w/):"
    grep -nE 'ERROR|SUMMARY|invariant failed|runtime error|Test unit written' "$w/fuzz.log" | head -n 20
    tail -n 30 "$w/fuzz.log"
    status=1
  fi
done
exit $status
