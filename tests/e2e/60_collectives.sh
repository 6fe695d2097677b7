# 60_collectives.sh - the deterministic collectives of firmware/comm/qt_coll.h under MPICH,
# through build/tools/coll_check (sourced by run_all.sh).
#
# One check per (rank count, mesh; also meshes of several slices, --dcn): group arithmetic, bit-exact reduce-scatter against the
# pairwise tree (non-vacuous), the units of the step and microbatch forms against the
# one-rank leaf tree (issue 35, non-vacuous), all-gather, broadcast, integer sums, all-to-all-v (blocking and split), the
# fixed-size all-to-all, the context exchange ops; then the context exchange ops alone
# (--ctx) on context meshes (context 2; context 4; data 2 x context 2 and tensor 2 x
# context 4, where a context group is not the whole world; context 3), forward and BWD,
# fp32 and bf16, even and uneven head ownership (issue 35: a member owning two units, one
# owning none), bit-exact against the layouts' definition; then the plan-hash mismatch (every rank must
# fail, none may hang), the deadline (a sleeping rank is named, the job ends by itself long
# before the sleeper wakes) and the 64 MiB timing on 2 ranks (printed, not asserted). Every
# mpiexec runs under `timeout 60`.
# Per mask or per group (coll_check.c's header, run_checks): masks that differ only in axes
# of one rank name the same group (same members, same order: mesh 2 2 2 has 8 distinct
# groups among 32 masks). The group arithmetic and the all-gathers (blocking, split, the
# expert rounds' counts: their order reads the mask's slice digits) run on every mask; the
# other collectives see the mask only through the group's size, index and members, so they
# run once per distinct member list (the first mask naming it) - the same code on the same
# ranks with the same bits as on the duplicates. Each run prints how many masks it skipped.
CC_BIN=build/tools/coll_check

# coll_mesh N ARGS...: the tool on N ranks; its output also in $QT_TMP/coll_mesh.txt, whose
# line on the masks skipped as duplicates coll_skipped prints under the cell's PASS/FAIL.
coll_mesh() {
  local n=$1; shift
  timeout 60 mpiexec -n "$n" $CC_BIN "$@" < /dev/null > "$QT_TMP/coll_mesh.txt" 2>&1
  local rc=$?
  cat "$QT_TMP/coll_mesh.txt"
  return $rc
}
coll_skipped() {
  grep -h "distinct member lists" "$QT_TMP/coll_mesh.txt" 2>/dev/null | sed 's/^/    /'
}
for c in "1 1" "2 2" "2 1 2" "4 2 2" "4 1 1 2 1 2" "8 2 2 2" "8 1 2 1 4" "8 2 1 1 2 2" "3 3" "6 3 2" \
         "5 5" "7 7"; do
  set -- $c
  check "collectives: $1 rank(s), mesh ${*:2} (data fsdp tensor expert context)" coll_mesh "$@"
  coll_skipped
done

# several slices (--dcn: ranks slice-major, the members of each group re-derived by the tool;
# the all-gather crosses the slices first): 2 slices of data 4; fsdp 2 (2 slices) x data 2;
# data 2 (2 slices) x expert 2 (2 slices) x fsdp 2
for c in "4 --dcn 2 4" "4 --dcn 1,2 2 2" "8 --dcn 2,1,1,2 2 2 1 2"; do
  set -- $c
  check "collectives on slices: $1 ranks, ${*:2} (data fsdp tensor expert context)" coll_mesh "$@"
  coll_skipped
done

for c in "2 1 1 1 1 2" "4 1 1 1 1 4" "4 2 1 1 1 2" "8 1 1 2 1 4" "3 1 1 1 1 3"; do
  set -- $c
  check "context exchange ops: $1 rank(s), mesh ${*:2} (data fsdp tensor expert context)" \
    coll_mesh "$1" --ctx "${@:2}"
  coll_skipped
done

# the pipeline's point-to-point messages (qt_coll.def SEND_RECV, coll_p2p.c): 2 stages of
# 1 and of 2 ranks, 3 and 4 stages of 1 (pairing, bytes, 1f1b order, circular gpipe with 2
# repeats and, on 2 and 4 stages, interleaved 1f1b's order; a short message refused)
for c in "2 2" "4 2" "3 3" "4 4"; do
  set -- $c
  check "pipeline messages: $1 ranks as $2 stages" coll_mesh "$1" --p2p "$2"
done

coll_mismatch() {
  local n=$1
  timeout 60 mpiexec -n "$n" $CC_BIN --mismatch "$n" < /dev/null || return 1
}
check "collectives: plan-hash mismatch on one of 2 ranks fails on every rank" coll_mismatch 2
check "collectives: plan-hash mismatch on one of 8 ranks fails on every rank" coll_mismatch 8

coll_timeout() {
  local n=$1 log=$QT_TMP/coll_timeout.$1.txt t0=$SECONDS rc
  timeout 60 mpiexec -n "$n" $CC_BIN --timeout "$n" < /dev/null > "$log" 2>&1
  rc=$?
  cat "$log"
  # 3 = the tool's abort after QT_E_COMM; 124 would be the outer timeout (a hang)
  [ "$rc" -eq 3 ] || { echo "exit status $rc, expected 3 (abort after QT_E_COMM)"; return 1; }
  [ $((SECONDS - t0)) -lt 15 ] || { echo "took $((SECONDS - t0)) s: the 1 s deadline did not end the job"; return 1; }
  grep -q "no answer from rank [0-9]* within 1 s" "$log" || { echo "no rank was named as silent"; return 1; }
  grep -q "returned -7 after" "$log" || { echo "no rank returned QT_E_COMM"; return 1; }
  if [ "$n" -eq 2 ]; then
    grep -q "rank 0/2: .*reduce_scatter.*no answer from rank 1 within 1 s" "$log" \
      || { echo "rank 0 did not name the sleeping rank 1"; return 1; }
  fi
}
check "collectives: deadline names the silent rank (2 ranks, 1 s deadline, rank 1 asleep)" coll_timeout 2
check "collectives: deadline ends a 4-rank job with a silent rank" coll_timeout 4

coll_bench() {
  timeout 60 mpiexec -n 2 $CC_BIN --bench 2 < /dev/null > "$QT_TMP/coll_bench.txt" 2>&1
  local rc=$?
  cat "$QT_TMP/coll_bench.txt"
  return $rc
}
check "collectives: 64 MiB reduce-scatter on 2 ranks (timing printed, bits checked)" coll_bench
grep -h "bench:" "$QT_TMP/coll_bench.txt" 2>/dev/null | sed 's/^/    /'
