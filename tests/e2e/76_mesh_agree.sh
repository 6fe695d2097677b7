# 76_mesh_agree.sh - one rank stops the job, every rank ends at once (sourced by run_all.sh;
# issue 18 items 1, 2, 6, 7).
#
# A failure that only some ranks see must end every rank within seconds with that rank's
# message, in every phase: start-up (a rank's arena over its limits), inputs (rank 0 refuses
# its metrics file), training (the data file of one rank changes), and the plan check of
# `mpiexec -n 2 A : -n 2 B` with two plans. The other ranks must not blame a silent peer
# ("no answer from rank ..."): they say which rank stopped the job. A stopped rank is named
# the same by every rank that prints, a stop during a save names the save, and the
# collectives summary keeps the saves out of the steps' share. comm_timeout is left at its
# default (300 s) where a hang is the failure, so `timeout 40` catches it; every mpiexec runs
# under `timeout` and every rank started here is continued and killed afterwards.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
AG_DATA=tests/golden/e2e/test-next-tiny/tokens.npy

ag_now() { date +%s.%N; }
ag_secs() { awk -v a=$1 -v b=$2 'BEGIN { printf "%.2f", b - a }'; }

# ag_pids TAG: pids of qtrain ranks whose command line contains TAG
ag_pids() { pgrep -f "qtrain .*$1" || true; }
ag_cleanup() {
  local p
  for p in $(ag_pids "$1"); do kill -CONT $p 2>/dev/null; kill -KILL $p 2>/dev/null; done
  return 0
}

# ag_job SECONDS LOG CMD...: runs CMD (`timeout N mpiexec ...`) with stderr+stdout to LOG,
# prints the last lines, the exit status and the time; fails on a timeout or exit 0, or
# when it took SECONDS or more. Sets AG_RC and AG_T.
ag_job() {
  local max=$1 log=$2; shift 2
  local t0 t1
  t0=$(ag_now)
  "$@" > $log 2>&1; AG_RC=$?
  t1=$(ag_now); AG_T=$(ag_secs $t0 $t1)
  grep -v '^step ' $log | grep -v '^qtrain: run \|^ *$' | tail -n 8
  echo "exit $AG_RC after $AG_T s"
  [ $AG_RC -ne 0 ] && [ $AG_RC -ne 124 ] || { echo "expected a prompt non-zero exit"; return 1; }
  awk -v t=$AG_T -v m=$max 'BEGIN { exit !(t < m) }' || { echo "took $AG_T s (limit $max)"; return 1; }
  ! grep -q "no answer from rank" $log || { echo "a rank blamed a silent peer"; return 1; }
}

# inputs: rank 0 refuses a metrics file that already holds steps; the other 3 ranks of a
# DP4 mesh must stop with it (they used to wait the whole comm_timeout).
agree_metrics_refused() {
  local d=$QT_TMP/agree
  mkdir -p $d; rm -f $d/m4.jsonl
  timeout 60 mpiexec -n 4 build/mesh-next-dp4/qtrain data=$AG_DATA steps=2 seed=11 \
      metrics=$d/m4.jsonl > /dev/null 2>&1 || { echo "first run failed"; return 1; }
  ag_job 5 $d/m4.log timeout 40 mpiexec -n 4 build/mesh-next-dp4/qtrain data=$AG_DATA steps=2 seed=11 \
      metrics=$d/m4.jsonl || return 1
  grep -q "rank 0/4: metrics file .* already holds steps up to 1" $d/m4.log || grep -q "^qtrain: metrics file .* already holds steps up to 1" $d/m4.log ||
      { echo "rank 0's message missing"; return 1; }
  [ "$(grep -c 'stopping: rank 0/4 failed' $d/m4.log)" -eq 3 ] || { echo "expected 3 ranks naming rank 0"; return 1; }
}
check "mesh agree: rank 0 refuses its metrics file: all 4 ranks stop in < 5 s, naming rank 0" agree_metrics_refused

# start-up: rank 1 alone runs under an address-space limit its arena does not fit
agree_arena_one_rank() {
  local d=$QT_TMP/agree
  mkdir -p $d
  ag_job 20 $d/arena.log timeout 40 mpiexec -n 1 build/bench-dp2/qtrain steps=1 : \
      -n 1 sh -c 'ulimit -v 1400000; exec build/bench-dp2/qtrain steps=1' || return 1
  grep -q "plan bench-dp2: the arena needs .* RLIMIT_AS" $d/arena.log || { echo "rank 1's message missing"; return 1; }
  grep -q "rank 0/2: .*stopping: rank 1/2 failed" $d/arena.log || { echo "rank 0 does not name rank 1"; return 1; }
}
check "mesh agree: one rank's arena over its ulimit -v: both ranks stop in < 20 s (rank 0 maps 1.6 GiB first), naming it" agree_arena_one_rank

# training: rank 1 reads its own copy of the data, touched during the run: rank 1 stops
# (data changed), rank 0 must stop with it at the end of the same step.
agree_data_touched() {
  local d=$QT_TMP/agree tag
  mkdir -p $d
  cp $AG_DATA $d/tok0.npy; cp $AG_DATA $d/tok1.npy
  tag=$d/touch.jsonl; rm -f $tag
  timeout 60 mpiexec -n 1 build/mesh-next-dp2/qtrain data=$d/tok0.npy steps=1000000 seed=11 \
      metrics=$tag : -n 1 build/mesh-next-dp2/qtrain data=$d/tok1.npy steps=1000000 seed=11 \
      > $d/touch.log 2>&1 &
  local job=$! i
  for i in $(seq 300); do [ -f $tag ] && [ "$(wc -l < $tag)" -ge 20 ] && break; sleep 0.1; done
  local t0 t1 rc
  t0=$(ag_now); touch $d/tok1.npy; wait $job; rc=$?; t1=$(ag_now)
  ag_cleanup $d/tok
  grep -v '^step ' $d/touch.log | tail -n 6
  echo "data of rank 1 touched: exit $rc after $(ag_secs $t0 $t1) s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a prompt non-zero exit"; return 1; }
  awk -v a=$t0 -v b=$t1 'BEGIN { exit !(b - a < 5) }' || { echo "took 5 s or more"; return 1; }
  grep -q "rank 1/2: data file .* changed during the run" $d/touch.log || { echo "rank 1's message missing"; return 1; }
  grep -q "rank 0/2: end of the step: stopping: rank 1/2 failed" $d/touch.log || { echo "rank 0 does not name rank 1"; return 1; }
  ! grep -q "no answer from rank" $d/touch.log
}
check "mesh agree: one rank's data file changes mid-run: both ranks stop in < 5 s, naming it" agree_data_touched

# one rank's tokens rewritten in place with the same size and modification time: that rank's
# data fill finds an id out of range inside a step, where the other rank waits in the step's
# collectives (no error flag reaches it there): the job must still end at once with that
# rank's message, not after comm_timeout with "no answer from rank 1"
agree_data_rewritten() {
  local d=$QT_TMP/agree tag
  mkdir -p $d
  cp $AG_DATA $d/rw0.npy; cp $AG_DATA $d/rw1.npy; cp -p $d/rw1.npy $d/rw-ref.npy
  tag=$d/rewrite.jsonl; rm -f $tag
  timeout 60 mpiexec -n 1 build/mesh-next-dp2/qtrain data=$d/rw0.npy steps=1000000 seed=11 \
      comm_timeout=20 metrics=$tag : -n 1 build/mesh-next-dp2/qtrain data=$d/rw1.npy \
      steps=1000000 seed=11 comm_timeout=20 > $d/rewrite.log 2>&1 &
  local job=$! i
  for i in $(seq 300); do [ -f $tag ] && [ "$(wc -l < $tag)" -ge 20 ] && break; sleep 0.1; done
  local t0 t1 rc
  t0=$(ag_now)
  python3 -c "
import os, sys
p, ref = sys.argv[1], sys.argv[2]
st, n = os.stat(ref), os.path.getsize(p)
with open(p, 'r+b') as f:
    f.seek(128); f.write(b'\\xff' * (n - 128))
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))" $d/rw1.npy $d/rw-ref.npy
  wait $job; rc=$?; t1=$(ag_now)
  ag_cleanup $d/rw
  grep -v '^step ' $d/rewrite.log | tail -n 6
  echo "tokens of rank 1 rewritten: exit $rc after $(ag_secs $t0 $t1) s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a prompt non-zero exit"; return 1; }
  awk -v a=$t0 -v b=$t1 'BEGIN { exit !(b - a < 5) }' || { echo "took 5 s or more"; return 1; }
  grep -q "rank 1/2: data file .* changed during the run" $d/rewrite.log || { echo "rank 1's message missing"; return 1; }
  ! grep -q "no answer from rank" $d/rewrite.log
}
check "mesh agree: one rank's tokens rewritten in place (same size and time): the job ends in < 5 s with that rank's message" agree_data_rewritten

# plan check: two binaries of plans for 2 and 4 ranks in one world of 4
agree_two_plans() {
  local d=$QT_TMP/agree
  mkdir -p $d
  ag_job 5 $d/ab.log timeout 40 mpiexec -n 2 build/mesh-next-dp2/qtrain data=$AG_DATA steps=1 : \
      -n 2 build/mesh-next-dp4/qtrain data=$AG_DATA steps=1 || return 1
  [ "$(grep -c 'plan check: this rank runs plan 0x[0-9a-f]* but rank [0-9] runs plan' $d/ab.log)" -eq 4 ] ||
      { echo "expected the plan check's message on all 4 ranks"; return 1; }
}
check "mesh agree: mpiexec -n 2 A : -n 2 B (plans of 2 and 4 ranks): all 4 refuse in < 5 s" agree_two_plans

# a stopped rank on 4 ranks is named the same (rank 3) by every live rank: each of ranks 0,
# 1 and 2 reports it (the first to abort lingers so the others can) and none names another
agree_stop_named() {
  local d=$QT_TMP/agree tag
  mkdir -p $d
  tag=$d/stop4.jsonl; rm -f $tag
  timeout 40 mpiexec -n 4 build/mesh-next-dp4/qtrain data=$AG_DATA steps=1000000 seed=11 \
      comm_timeout=2 metrics=$tag > $d/stop4.log 2>&1 &
  local job=$! i p victim=
  for i in $(seq 300); do [ -f $tag ] && [ "$(wc -l < $tag)" -ge 20 ] && break; sleep 0.1; done
  for p in $(ag_pids $tag); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "PMI_RANK=3" && victim=$p
  done
  [ -n "$victim" ] || { echo "rank 3 not found"; ag_cleanup $tag; wait $job; return 1; }
  local t0 t1 rc
  t0=$(ag_now); kill -STOP $victim; wait $job; rc=$?; t1=$(ag_now)
  ag_cleanup $tag
  grep 'no answer' $d/stop4.log
  echo "rank 3 stopped: exit $rc after $(ag_secs $t0 $t1) s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not a timeout"; return 1; }
  awk -v a=$t0 -v b=$t1 'BEGIN { exit !(b - a < 10) }' || { echo "took 10 s or more"; return 1; }
  [ "$(grep -c "no answer from rank 3 within" $d/stop4.log)" -eq 3 ] ||
      { echo "expected ranks 0, 1 and 2 each to name rank 3"; return 1; }
  ! grep "no answer from rank" $d/stop4.log | grep -qv "no answer from rank 3 within" ||
      { echo "a rank named another rank"; return 1; }
}
check "mesh agree: SIGSTOP rank 3 of 4: ranks 0, 1 and 2 each name rank 3, none another (comm_timeout=2)" agree_stop_named

# a stop during a save names the save: rank 1 is stopped while it writes its shard of a
# bench-dp2 checkpoint directory, so rank 0 waits in the save's own collectives
agree_stop_in_save() {
  local d=$QT_TMP/agree
  mkdir -p $d; rm -rf $d/ck-save $d/ck-save.tmp.*
  # comm_timeout=3 bounds the step and the save only: start-up's error flags, which wait
  # while each rank populates its 2 GiB arena (on a fragmented page cache several seconds:
  # THP compaction, then 4 KiB pages), are bounded by start_timeout= (default 300 s)
  timeout 60 mpiexec -n 2 build/bench-dp2/qtrain steps=1 comm_timeout=3 save=$d/ck-save \
      > $d/save.log 2>&1 &
  local job=$! i p victim= hit=
  for i in $(seq 600); do
    for p in $(pgrep -f "^build/bench-dp2/qtrain .*$d/ck-save" || true); do
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "PMI_RANK=1" && victim=$p
    done
    [ -n "$victim" ] && ls -l /proc/$victim/fd 2>/dev/null | grep -q "ck-save.tmp" && { hit=1; break; }
    sleep 0.02
  done
  [ -n "$hit" ] && kill -STOP $victim
  wait $job; local rc=$?
  ag_cleanup "$d/ck-save"
  grep -v '^step ' $d/save.log | tail -n 4
  [ -n "$hit" ] || { echo "rank 1 was not caught writing its shard"; return 1; }
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not a timeout"; return 1; }
  grep -q "rank 0/2: checkpoint save to $d/ck-save, step 1, .*no answer from rank 1 within 3 s" $d/save.log ||
      { echo "the message does not name the save"; return 1; }
  [ ! -e $d/ck-save/model.safetensors.index.json ] || { echo "a checkpoint was committed"; return 1; }
}
check "mesh agree: a rank stopped during a save: the message names the save, nothing committed" agree_stop_in_save

# the collectives summary: saves apart from the steps
agree_summary() {
  local d=$QT_TMP/agree
  mkdir -p $d; rm -rf $d/ck-sum
  timeout 60 mpiexec -n 2 build/mesh-next-dp2/qtrain data=$AG_DATA steps=6 seed=11 \
      save=$d/ck-sum save_every=2 2> $d/sum.log || { tail -n 3 $d/sum.log; return 1; }
  grep '^qtrain: collectives' $d/sum.log
  grep -q "^qtrain: collectives: steps: [0-9]* calls, .* over 6 steps; saves: [0-9]* calls, .* over 3 saves; error flags: 7 calls" $d/sum.log ||
      { echo "no separate save and error-flag counts"; return 1; }
  local share
  share=$(grep -o '([0-9.]*% of the step time)' $d/sum.log | grep -o '[0-9.]*' | head -n 1)
  awk -v s=$share 'BEGIN { exit !(s <= 100) }' || { echo "step share $share% > 100%"; return 1; }
}
check "mesh agree: the collectives summary counts saves and error flags apart from the steps" agree_summary
