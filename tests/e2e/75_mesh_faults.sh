# 75_mesh_faults.sh - faults on a mesh under mpiexec (sourced by run_all.sh): a killed rank,
# a silent (stopped) rank, and the no-heap contract of 30_memory.sh on every rank of a mesh.
#
# A killed rank must end the whole job within seconds with a non-zero code, and the last
# checkpoint written before the kill must be intact (byte-identical to an uninterrupted run
# to the same step) and loadable by the one-rank binary of the same model. A stopped rank
# must not hang the others: with comm_timeout=2 the live rank names the silent one and ends
# the job. A rank slow to start is waited for under start_timeout=, not comm_timeout=.
# Every mpiexec runs under `timeout`, and every rank started here is continued and killed
# afterwards, so no fault leaves a process behind or hangs the suite.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
FAULT_DATA=tests/golden/e2e/test-next-tiny/tokens.npy
FAULT_RUN=mesh-next-dp2

# fault_pids TAG: pids of the ranks (not mpiexec) whose command line contains TAG
fault_pids() {
  pgrep -f "^build/$FAULT_RUN/qtrain .*$1" || true
}

# fault_left TAG: the ranks of the job tagged TAG still running 5 s after mpiexec ended (a
# rank that called MPI_Abort may still be in its exit path when mpiexec returns, more so on
# a loaded machine; one that is still there after 5 s lingers)
fault_left() {
  local i
  for i in $(seq 50); do
    [ -z "$(fault_pids "$1")" ] && return 0
    sleep 0.1
  done
  fault_pids "$1"
}

# fault_rank_pid TAG RANK: pid of rank RANK (hydra's PMI_RANK) of the job tagged TAG
fault_rank_pid() {
  local p
  for p in $(fault_pids "$1"); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "PMI_RANK=$2" && { echo $p; return 0; }
  done
  return 1
}

# fault_wait_lines FILE N: wait (at most 30 s) until FILE has N lines
fault_wait_lines() {
  local i
  for i in $(seq 300); do
    [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  echo "$1: fewer than $2 lines after 30 s"; return 1
}

# fault_cleanup TAG: continue and kill whatever is left of the job tagged TAG
fault_cleanup() {
  local p
  for p in $(fault_pids "$1"); do kill -CONT $p 2>/dev/null; kill -KILL $p 2>/dev/null; done
  return 0
}

fault_now() { date +%s.%N; }
fault_secs() { awk -v a=$1 -v b=$2 'BEGIN { printf "%.2f", b - a }'; }

# fault_stopped_ends JOB TAG T0 LOG LINE: rank 1 of the job tagged TAG (mpiexec's pid JOB,
# output in LOG) was stopped at T0: the job must end within 10 s with a non-zero code, LOG
# must hold a line matching LINE (grep), and no rank may be left running
fault_stopped_ends() {
  local job=$1 tag=$2 t0=$3 log=$4 line=$5 rc t1 left
  wait $job; rc=$?; t1=$(fault_now)
  left=$(fault_left $tag)
  fault_cleanup $tag
  grep -v '^step' $log | tail -n 6
  echo "rank 1 stopped: mpiexec exit $rc after $(fault_secs $t0 $t1) s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not a timeout"; return 1; }
  awk -v a=$t0 -v b=$t1 'BEGIN { exit !(b - a <= 10) }' || { echo "the job took more than 10 s to end"; return 1; }
  grep -q "$line" $log || { echo "no line matching: $line"; return 1; }
  [ -z "$left" ] || { echo "ranks left running after mpiexec ended: $left"; return 1; }
}

# A DP2 run saving every 50 steps; rank 0 (the writer) is SIGKILLed once several
# checkpoints exist, so the kill may land in the middle of a save.
mesh_dead_rank() {
  local d=$QT_TMP/faults tag
  mkdir -p $d
  tag=$d/kill.jsonl
  rm -f $d/kill.safetensors
  timeout 60 mpiexec -n 2 build/$FAULT_RUN/qtrain data=$FAULT_DATA steps=1000000 seed=11 \
      save=$d/kill.safetensors save_every=50 metrics=$tag > $d/kill.log 2>&1 &
  local job=$!
  fault_wait_lines $tag 300 || { fault_cleanup $tag; wait $job; cat $d/kill.log; return 1; }
  local victim
  victim=$(fault_rank_pid $tag 0) || { echo "rank 0 not found"; fault_cleanup $tag; wait $job; return 1; }
  local t0 t1 rc
  t0=$(fault_now); kill -KILL $victim; wait $job; rc=$?; t1=$(fault_now)
  local left
  left=$(fault_left $tag)
  fault_cleanup $tag
  grep -v '^step' $d/kill.log | tail -n 8
  echo "rank 0 (pid $victim) killed after $(wc -l < $tag) steps: mpiexec exit $rc after $(fault_secs $t0 $t1) s"
  [ -z "$left" ] || { echo "ranks left running after mpiexec ended: $left"; return 1; }
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not a timeout"; return 1; }
  awk -v a=$t0 -v b=$t1 'BEGIN { exit !(b - a < 5) }' || { echo "the job took 5 s or more to end"; return 1; }
  # the checkpoint: its step is a multiple of save_every, and it equals the checkpoint of an
  # uninterrupted run to that step, byte for byte (the metadata names step and plan)
  local k
  k=$(head -c 4096 $d/kill.safetensors | grep -ao '"step":"[0-9]*"' | grep -o '[0-9]\+') ||
      { echo "no checkpoint metadata"; return 1; }
  echo "checkpoint at step $k"
  [ "$k" -gt 0 ] && [ $((k % 50)) -eq 0 ] || { echo "step $k is not a save_every point"; return 1; }
  timeout 60 mpiexec -n 2 build/$FAULT_RUN/qtrain data=$FAULT_DATA steps=$k seed=11 \
      save=$d/ref.safetensors > $d/ref.log 2>&1 || { tail -n 5 $d/ref.log; return 1; }
  cmp $d/kill.safetensors $d/ref.safetensors || { echo "checkpoint differs from an uninterrupted run"; return 1; }
  # and the one-rank binary of the same model loads it and trains on (steps=k+2 trains
  # whether the optimizer state resumes at step k or is skipped and training restarts at 0)
  timeout 60 build/mesh-next-1r/qtrain load=$d/kill.safetensors data=$FAULT_DATA \
      steps=$((k + 2)) > $d/load.log 2>&1 || { cat $d/load.log; return 1; }
  grep -v '^step' $d/load.log | tail -n 4
  grep -q "qtrain: trained steps [0-9]*\.\.$((k + 2)):" $d/load.log
}
check "mesh: a SIGKILLed rank ends the job in < 5 s, non-zero; the last save_every checkpoint is intact and loads on one rank" mesh_dead_rank

# A DP2 run with comm_timeout=2 whose rank 1 is SIGSTOPped: rank 0 must name it and end
# the job (MPI_Abort), well within 10 s.
mesh_silent_rank() {
  local d=$QT_TMP/faults tag
  mkdir -p $d
  tag=$d/stop.jsonl
  timeout 30 mpiexec -n 2 build/$FAULT_RUN/qtrain data=$FAULT_DATA steps=1000000 seed=11 \
      comm_timeout=2 metrics=$tag > $d/stop.log 2>&1 &
  local job=$!
  fault_wait_lines $tag 20 || { fault_cleanup $tag; wait $job; cat $d/stop.log; return 1; }
  local victim
  victim=$(fault_rank_pid $tag 1) || { echo "rank 1 not found"; fault_cleanup $tag; wait $job; return 1; }
  local t0
  t0=$(fault_now); kill -STOP $victim
  fault_stopped_ends $job $tag $t0 $d/stop.log "no answer from rank 1"
}
check "mesh: a SIGSTOPped rank is named and the job ends within 10 s (comm_timeout=2), nothing lingers" mesh_silent_rank

# fault_slow_start NAME ARGS...: a DP2 job (steps=2, data = a copy named NAME.npy, so the
# tag) whose rank 1 is SIGSTOPped as soon as it has mapped its data: inside start-up (rank
# 0 then waits in the data's or the arena's error flag, or the connection warm-up). Sets
# FAULT_JOB (mpiexec's pid), FAULT_VICTIM, FAULT_T0 (the stop) and FAULT_TAG.
fault_slow_start() {
  local d=$QT_TMP/faults name=$1 i mapped=; shift
  mkdir -p $d; cp $FAULT_DATA $d/$name.npy
  FAULT_TAG=$d/$name.npy
  timeout 60 mpiexec -n 2 build/$FAULT_RUN/qtrain data=$FAULT_TAG steps=2 seed=11 "$@" \
      > $d/$name.log 2>&1 &
  FAULT_JOB=$! FAULT_VICTIM=
  for i in $(seq 1000); do
    FAULT_VICTIM=$(fault_rank_pid $FAULT_TAG 1) && break
  done
  [ -n "$FAULT_VICTIM" ] || { echo "rank 1 not found"; return 1; }
  # a tight loop: start-up after the data's mapping lasts some tens of milliseconds
  for i in $(seq 20000); do
    grep -qF $FAULT_TAG /proc/$FAULT_VICTIM/maps 2>/dev/null && { mapped=1; break; }
    [ -d /proc/$FAULT_VICTIM ] || break
  done
  [ -n "$mapped" ] || { echo "rank 1 did not map its data"; return 1; }
  kill -STOP $FAULT_VICTIM 2>/dev/null || { echo "rank 1 ended before it was stopped"; return 1; }
  FAULT_T0=$(fault_now)
}

# A rank slow to start (stopped for 5 s inside start-up) with comm_timeout=2: start-up's
# waits are bounded by start_timeout= (default 300 s), not by the steps' comm_timeout=, so
# the job waits for it, then trains (it used to end naming the healthy, slow rank).
mesh_slow_start() {
  local d=$QT_TMP/faults rc t1
  fault_slow_start slow comm_timeout=2 || { fault_cleanup slow.npy; wait $FAULT_JOB; return 1; }
  sleep 5; kill -CONT $FAULT_VICTIM
  wait $FAULT_JOB; rc=$?; t1=$(fault_now)
  fault_cleanup $FAULT_TAG
  grep -v '^step' $d/slow.log | tail -n 4
  echo "rank 1 (pid $FAULT_VICTIM) stopped 5 s at start-up: mpiexec exit $rc $(fault_secs $FAULT_T0 $t1) s after the stop"
  [ $rc -eq 0 ] || { echo "expected the job to train"; return 1; }
  grep -q "qtrain: trained steps 1\.\.2:" $d/slow.log || { echo "no training summary"; return 1; }
  awk -v a=$FAULT_T0 -v b=$t1 'BEGIN { exit !(b - a >= 5) }' || { echo "the job ended before rank 1 went on"; return 1; }
}
check "mesh: a rank stopped 5 s at start-up with comm_timeout=2: the job waits for it (start_timeout, default 300 s) and trains" mesh_slow_start

# The same with start_timeout=2 (comm_timeout at its default): rank 0 names rank 1 within
# seconds, says it was at start-up and names the key to raise.
mesh_slow_start_timeout() {
  fault_slow_start slowto start_timeout=2 || { fault_cleanup slowto.npy; wait $FAULT_JOB; return 1; }
  fault_stopped_ends $FAULT_JOB $FAULT_TAG $FAULT_T0 $QT_TMP/faults/slowto.log \
      "rank 0/2: .*: no answer from rank 1 within 2 s; this was during start-up, which start_timeout= bounds: if a rank is slow to start, raise it"
}
check "mesh: a rank stopped at start-up with start_timeout=2: named within 10 s, the message says start-up and start_timeout=" mesh_slow_start_timeout

# 30_memory.sh's contract on every rank of a mesh: the audit library is preloaded into the
# ranks only (-genv), and each rank must report zero allocation calls during the steps
# (collectives included).
mesh_no_heap_in_steps() {
  local run=$1 n=$2 out=$QT_TMP/heap-$1.txt
  timeout 60 mpiexec -n $n -genv LD_PRELOAD=$PWD/build/tools/libheap_audit.so build/$run/qtrain \
      steps=3 data=$FAULT_DATA metrics=$QT_TMP/heap-$run.jsonl 2> $out
  local rc=$?
  grep -v '^step' $out
  [ $rc -eq 0 ] && [ "$(grep -cx 'heap audit: 0 allocation calls during steps' $out)" -eq $n ]
}
for cell in mesh-next-dp2:2 mesh-next-fsdp2:2 mesh-next-tp2:2 mesh-next-ep2:2 mesh-next-dp2ep2:4 \
            mesh-next-fsdp2tp2:4 mesh-next-ep2tp2:4 zero1-next-dp2ep2-g4-z1-layer:4 \
            remat-full-gather-mesh-next-dp2ep2:4; do
  run=${cell%%:*}; n=${cell##*:}
  check "mesh: no heap allocation during steps on any rank of $run ($n ranks, malloc interposed)" \
      mesh_no_heap_in_steps $run $n
done

# A sharded save= directory must be one directory for every rank (issue 18): here each rank
# runs in a working directory of its own, so the relative save=ck names two directories, as
# on two machines without a shared file system. Every rank must refuse at start-up (exit 2,
# no hang, nothing written), rank 0 with the count and what to share, the other naming
# itself; the same job with one shared directory trains and saves.
mesh_save_dir_not_shared() {
  local d=$QT_TMP/notshared rc t0 t1
  rm -rf $d; mkdir -p $d/r0 $d/r1 $d/shared
  t0=$(date +%s.%N)
  timeout 60 mpiexec -n 2 sh -c 'cd "$0/r$PMI_RANK" && exec "$1/build/'$FAULT_RUN'/qtrain" steps=1 data="$1/'$FAULT_DATA'" save=ck 2> err' \
    $d $PWD; rc=$?
  t1=$(date +%s.%N)
  cat $d/r0/err $d/r1/err | grep -v '^step'
  echo "mpiexec exit $rc after $(fault_secs $t0 $t1) s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a refusal, not success or a timeout"; return 1; }
  grep -qF "save=ck: 1 of the 2 ranks does not see the directory rank 0 (host $(hostname)) sees" $d/r0/err \
    && grep -qF "must be on a file system that every rank shares, at the same path" $d/r0/err || return 1
  grep -qF "rank 1/2: save=ck: this rank (host $(hostname)) does not see the probe file ck.tmp." $d/r1/err || return 1
  ! ls $d/r0 $d/r1 | grep -q '^ck' || { echo "something was written:"; ls $d/r0 $d/r1; return 1; }
  timeout 60 mpiexec -n 2 sh -c 'cd "$0/shared" && exec "$1/build/'$FAULT_RUN'/qtrain" steps=1 data="$1/'$FAULT_DATA'" save=ck 2>> err' \
    $d $PWD || { cat $d/shared/err; return 1; }
  [ -s $d/shared/ck/model.safetensors.index.json ] && ! ls $d/shared | grep -q 'ck\.\(tmp\|lock\)'
}
check "mesh: a save= directory that is not the same on every rank is refused at start-up by every rank" mesh_save_dir_not_shared

# A save= target another job holds (its lock file names process 4242 on host otherhost; a
# sleep holds the flock): rank 0 refuses and every rank stops at once with it (exit 2).
mesh_save_target_locked() {
  local d=$QT_TMP/mlock rc t0 t1 busy i
  rm -rf $d; mkdir -p $d
  printf 'otherhost 4242\n' > $d/ck.lock
  ( exec 9>> $d/ck.lock; flock 9; exec sleep 60 ) & busy=$!
  for i in $(seq 50); do flock -n $d/ck.lock true || break; sleep 0.1; done
  t0=$(date +%s.%N)
  timeout 60 mpiexec -n 2 build/$FAULT_RUN/qtrain steps=1 data=$FAULT_DATA save=$d/ck > $d/log 2>&1; rc=$?
  t1=$(date +%s.%N)
  kill $busy; wait $busy 2> /dev/null
  grep -v '^step' $d/log | tail -n 4
  echo "mpiexec exit $rc after $(fault_secs $t0 $t1) s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a refusal, not success or a timeout"; return 1; }
  awk -v a=$t0 -v b=$t1 'BEGIN { exit !(b - a <= 10) }' || { echo "the job took more than 10 s to end"; return 1; }
  grep -qF "save=$d/ck is in use by another job: process 4242 on host otherhost holds its lock $d/ck.lock" $d/log \
    && grep -qF "rank 1/2: save=$d/ck: refused by rank 0 (see its message)" $d/log && ! [ -e $d/ck ]
}
check "mesh: a save= target held by another job is refused by every rank at once" mesh_save_target_locked
