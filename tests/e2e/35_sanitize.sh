# 35_sanitize.sh - the ASan + UBSan build (make asan; sourced by run_all.sh after 20_determinism.sh,
# whose det_fields it uses).
#
# build/asan/ holds the unit tests and qtrain for two small plans, compiled with
# -fsanitize=address,undefined -fno-sanitize-recover=all (any report aborts) and the determinism
# flags, single rank (comm_local.c), arena mapped by exec (no arena_unload). Each check fails on
# a non-zero exit or on any sanitizer line in the output, and the qtrain runs must give the
# normal build's bits: the sanitizers may not change results.
# No ASAN_OPTIONS: LeakSanitizer stays on (the single-rank build links no MPICH).

# san_clean LOG: fails when LOG holds a sanitizer report.
san_clean() {
  if grep -nE 'runtime error|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer' "$1"; then
    echo "sanitizer report in $1"; return 1
  fi
}

# One process per test group (run_all.sh's unit_groups: two at a time on 2 CPUs; one process
# for all took 152 s on the 2-vCPU VM). Each group must exit 0 with its OK line and no
# sanitizer report, and together the groups must have run every test of -ln but the one
# excluded, so no group can go missing.
asan_unit() {
  local bin=build/asan/tests/unit_tests d=$QT_TMP/asan_unit g ran=0 want bad=0
  local skip=BatchedDotsBitIdenticalToReference
  [ -x $bin ] || { echo "$bin missing (make asan)"; return 1; }
  # Every test but one: AttnKernel.BatchedDotsBitIdenticalToReference (S up to 2048, O(S^2))
  # takes 41 of the 79 s under the sanitizers on the 2-core VM; it is a bit-identity test
  # that the normal build runs, and the other attention tests run here. By hand:
  # build/asan/tests/unit_tests -sn BatchedDotsBitIdenticalToReference (about 41 s).
  unit_groups $bin "$d" -xn $skip || return 1
  want=$($bin -ln | tr ' ' '\n' | grep -c .) || return 1
  want=$((want - $($bin -ln | tr ' ' '\n' | grep -c "\.$skip\$")))
  while read -r g; do
    if [ "$(cat "$d/$g.rc" 2>/dev/null)" != 0 ] || ! grep -qE '^OK \(' "$d/$g.log"; then
      echo "group $g: exit $(cat "$d/$g.rc" 2>/dev/null)"; tail -n 30 "$d/$g.log"; bad=1; continue
    fi
    san_clean "$d/$g.log" || bad=1
    ran=$((ran + $(unit_summary "$d/$g.log" | cut -d' ' -f1)))
  done < "$d/groups"
  echo "$(wc -l < "$d/groups") groups: $ran tests ran, $want expected (-ln less $skip)"
  [ $bad -eq 0 ] && [ "$ran" -eq "$want" ]
}
check "ASan+UBSan unit tests (all but BatchedDotsBitIdenticalToReference) pass, no sanitizer report" asan_unit

asan_run() {
  local run=$1 d=$QT_TMP/asan_$1 data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  [ -x build/asan/$run/qtrain ] || { echo "build/asan/$run/qtrain missing (make asan)"; return 1; }
  build/asan/$run/qtrain steps=3 seed=11 data=$data metrics=$d/asan.jsonl 2> "$d/asan.err"
  local rc=$?
  [ $rc -eq 0 ] || { echo "asan $run: exit $rc"; tail -n 30 "$d/asan.err"; return 1; }
  san_clean "$d/asan.err" || { tail -n 30 "$d/asan.err"; return 1; }
  build/$run/qtrain steps=3 seed=11 data=$data metrics=$d/ref.jsonl 2> "$d/ref.err" || { cat "$d/ref.err"; return 1; }
  det_fields $d/asan.jsonl > $d/asan.det && det_fields $d/ref.jsonl > $d/ref.det || return 1
  [ "$(wc -l < $d/asan.det)" -eq 3 ] || { echo "expected 3 metrics lines"; return 1; }
  cmp $d/asan.det $d/ref.det && echo "identical: $(head -c 300 $d/asan.det)"
}
check "ASan+UBSan qtrain test-next-tiny: 3 steps clean, bits == normal build" asan_run test-next-tiny
check "ASan+UBSan qtrain test-35-tiny: 3 steps clean, bits == normal build" asan_run test-35-tiny
