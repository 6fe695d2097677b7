# 36_fuzz.sh - bounded libFuzzer run (sourced by run_all.sh; make test builds make fuzz-build).
#
# Each target of tests/fuzz/ (docs/fuzzing.md) first replays its committed crash inputs
# (tests/fuzz/regressions/<target>/), then fuzzes for FUZZ_TEST_SECONDS (default 20) from
# its committed seed corpus into a scratch corpus under $QT_TMP (the committed corpus never
# grows). One check per target: it fails on any crash, sanitizer report, leak, invariant
# failure, timeout (> 10 s for one input) or out-of-memory (> 2 GiB), and prints the
# report; the input is then in the check's log directory (tests/fuzz/run.sh says where).
# The targets run two at a time (check_bg: one core each on the 2-vCPU VM, so each still
# gets its 20 s of libFuzzer on a core of its own): six targets x 20 s is about 65 s of wall
# time instead of 130. make fuzz runs longer.

fuzz_bounded() {
  FUZZ_WORK=$QT_TMP/fuzz ./tests/fuzz/run.sh "${FUZZ_TEST_SECONDS:-20}" "$1"
}
for t in yaml npy safetensors st_index ckpt_load cli; do
  check_bg "fuzz $t: regressions replay clean, ${FUZZ_TEST_SECONDS:-20} s of libFuzzer from the seed corpus, crashes: 0" fuzz_bounded "$t"
done
check_join
