# 45_plan_report.sh - plan.txt of mesh plans and `configgen --diff` (sourced by run_all.sh).
#
# --diff exits 0 when two plans are identical apart from names and plan hash, 1 when they
# differ (and says where), 2 on an error (with a message). Explicit and auto data-parallel
# plans are the same plan today, so their only difference is the shard_mode line.
QT_CG=build/configgen/configgen
QT_RUNS=configgen/configs/runs

# report_diff_rc WANT A B: runs --diff A B, prints its output, fails unless it exits WANT.
report_diff_rc() {
  local want=$1 rc
  "$QT_CG" --diff "$2" "$3" > "$QT_TMP/diff.out" 2>&1; rc=$?
  cat "$QT_TMP/diff.out"
  [ "$rc" -eq "$want" ] || { echo "exit $rc, expected $want"; return 1; }
}

report_explicit_vs_auto() {
  report_diff_rc 1 $QT_RUNS/mesh-next-dp2.yml $QT_RUNS/mesh-next-dp2-auto.yml || return 1
  grep -qx -- '  - shard_mode: explicit' "$QT_TMP/diff.out" &&
    grep -qx -- '  + shard_mode: auto' "$QT_TMP/diff.out" &&
    grep -qx 'plans differ in: mesh' "$QT_TMP/diff.out"
}
check "configgen --diff: explicit vs auto dp2 plans differ in shard_mode only (exit 1)" report_explicit_vs_auto

report_self() {
  report_diff_rc 0 $QT_RUNS/mesh-next-dp2.yml $QT_RUNS/mesh-next-dp2.yml || return 1
  grep -qx 'plans are identical apart from names and plan hash' "$QT_TMP/diff.out"
}
check "configgen --diff: a run with itself is identical (exit 0)" report_self

report_dir_vs_run() {
  report_diff_rc 0 generated/mesh-next-dp2fsdp2 $QT_RUNS/mesh-next-dp2fsdp2.yml
}
check "configgen --diff: generated/mesh-next-dp2fsdp2 equals its run file built in memory" report_dir_vs_run

report_missing() {
  report_diff_rc 2 $QT_RUNS/no-such-run.yml $QT_RUNS/mesh-next-dp2.yml || return 1
  grep -q 'configgen: --diff: .*no-such-run.yml: no such file' "$QT_TMP/diff.out"
}
check "configgen --diff: a missing file is an error with a message (exit 2)" report_missing

report_mesh_sections() {
  local f=generated/mesh-next-dp2fsdp2/plan.txt
  grep -qx '  shard_mode: explicit' $f && grep -q '^  batch axes: data,fsdp (4 ranks' $f &&
    grep -qx '  rank 2 (data 1, fsdp 0): batch index 2, sequences 2..2' $f &&
    grep -q '^  total sent per rank per step: [1-9][0-9]* bytes' $f &&
    grep -Eq '^ +0 input +i32 \[1,16\] +\[4,16\] .* tokens$' $f &&
    grep -qx '  1 rank: no collectives, 0 bytes moved' generated/default/plan.txt
}
check "plan.txt: mesh, data assignment, collectives and local/global shapes; one rank says no collectives" report_mesh_sections

# Context parallelism in plan.txt: one statement of who reads what (issue 30): the batch
# axes other than context read different sequences, the ranks of a context group the same
# sequences, each keeping its own part of the tokens; never "each reads its own sequences"
# for a group that holds context ranks.
report_context_reads() {
  local f=generated/ctx-next-cp2dp2/plan.txt g=generated/ctx-next-cp2/plan.txt
  grep -E "^  (batch axes|context 2):" $f $g | cut -c 1-240
  grep -qx '  batch axes: data,context (4 ranks: ranks at different data coordinates read different sequences; the 2 ranks of a context group read the same sequences, each keeping its own part of the tokens)' $f &&
    grep -qx '  batch axes: context (2 ranks: the 2 ranks of a context group read the same sequences, each keeping its own part of the tokens)' $g &&
    grep -q '^  context 2: the 2 ranks of a context group read the same sequences, each keeping its own part of the tokens: context index c holds tokens \[c\*8, (c+1)\*8) of each' $f &&
    ! grep -q "each reads its own sequences\|share their sequences" $f $g
}
check "plan.txt: context parallelism says once that a context group reads the same sequences, each rank its part of the tokens" report_context_reads

# Counts of one are singular in plan.txt (issue 30): "1 microbatch", "1 batch rank", a flat
# range reduced over "- (1 rank)"; no "1 ranks" or "1 microbatches" anywhere.
report_singular() {
  grep -qx '  each step reads 8 sequences, numbered 0..7: per_device_batch_size 8 x 1 microbatch x 1 batch rank' generated/default/plan.txt &&
    grep -q '^  batch: 8 seqs x 128 tokens per microbatch, 1 microbatch, global batch' generated/default/plan.txt &&
    grep -q 'gradient reduced over - (1 rank), ' generated/bench-ep2/plan.txt &&
    ! grep -E "[^0-9]1 (ranks|microbatches|levels|sequences|seqs)\b" generated/*/plan.txt | head -n 3 | grep .
}
check "plan.txt: counts of one are singular (1 rank, 1 microbatch)" report_singular
