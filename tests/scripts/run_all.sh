#!/usr/bin/env bash
# run_all.sh - runs every test and ends with one line "N passed, M failed".
#
# 1. The CppUTest unit binary (kernels vs goldens and finite differences, math, configgen,
#    runtime, io), one test group per process, two at a time: each TEST counts once.
# 2. The end-to-end checks in tests/e2e/*.sh: each `check` call counts once.
# Exit status is 0 only if nothing failed. Run from the project root after `make all`.
# QT_E2E='<glob> [<glob> ...]' runs only the e2e scripts whose names match one of the
# globs (QT_E2E='2[0-3]_*' or QT_E2E='10_* 7[0-4]_*' for example), each script once, in
# name order; the unit tests always run. `make test` runs them all.
set -u
cd "$(dirname "$0")/../.."
export QT_ROOT=$PWD
export QT_TMP=$(mktemp -d /tmp/qtrain-test.XXXXXX)
trap 'rm -rf "$QT_TMP"' EXIT
# MPICH's temporary buffers: keep glibc from mmap/munmap-ing them per call (docs/toolchain.md 1).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

passed=0; failed=0; failures=()

# unit_groups BIN DIR ARGS...: the CppUTest binary BIN one test group (-lg) per process
# (BIN -sg GROUP ARGS...), as many processes at once as there are CPUs (QT_CHECK_JOBS;
# xargs -P: whichever is free takes the next group). DIR/groups lists the groups,
# DIR/GROUP.log and DIR/GROUP.rc hold each one's output and exit status. Used for the unit
# tests below and the sanitizer build's (35_sanitize.sh); the tests use their own mkdtemp
# directories, so groups side by side share no file.
unit_groups() {
  local bin=$1 d=$2; shift 2
  rm -rf "$d" && mkdir -p "$d" || return 1
  "$bin" -lg | tr ' ' '\n' | grep . > "$d/groups" || { echo "$bin -lg failed"; return 1; }
  xargs -P "${QT_CHECK_JOBS:-$(nproc)}" -I{} sh -c \
    'g=$1 d=$2 b=$3; shift 3; "$b" -sg "$g" "$@" > "$d/$g.log" 2>&1; echo $? > "$d/$g.rc"' \
    _ {} "$d" "$bin" "$@" < "$d/groups"
}
# unit_summary LOG: "RAN FAILURES CHECKS MS" from a CppUTest summary line (0 when absent)
unit_summary() {
  awk '/^(OK|Errors) \(/ { s=$0; gsub(/[(),]/," ",s); n=split(s,w," ");
      for(i=1;i<=n;i++){ if(w[i+1]=="ran") ran=w[i]; if(w[i+1]=="failures") f=w[i];
                         if(w[i+1]=="checks") c=w[i]; if(w[i+1]=="ms") ms=w[i] } }
      END { print ran+0, f+0, c+0, ms+0 }' "$1"
}

# ---- unit tests
# By group, two at a time (unit_groups); each group's output in -lg order, then one summary
# line in CppUTest's form (ms: the wall time of all groups). A group that exits non-zero
# without a failure in its summary (a crash) counts one failure, and the tests that ran must
# be every test -ln lists, so a group cannot go missing.
if [ -x build/tests/unit_tests ]; then
  u_dir=$QT_TMP/unit u_t0=$(date +%s%N)
  unit_groups build/tests/unit_tests "$u_dir" -v
  u_ms=$(( ($(date +%s%N) - u_t0) / 1000000 ))
  u_ran=0; u_fail=0; u_checks=0; u_groups=0
  while read -r g; do
    cat "$u_dir/$g.log"
    read -r r f c _ < <(unit_summary "$u_dir/$g.log")
    u_rc=$(cat "$u_dir/$g.rc" 2>/dev/null || echo 1)
    if [ "$u_rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      f=1; echo "unit test group $g: exit $u_rc without a failure counted (crashed?)"
    fi
    u_ran=$((u_ran + r)); u_fail=$((u_fail + f)); u_checks=$((u_checks + c)); u_groups=$((u_groups + 1))
  done < "$u_dir/groups"
  u_all=$(build/tests/unit_tests -ln | tr ' ' '\n' | grep -c .)
  if [ "$u_ran" -ne "$u_all" ]; then
    echo "unit tests: $u_ran of the $u_all tests of -ln ran"; u_fail=$((u_fail + 1))
  fi
  if [ "$u_fail" -eq 0 ]; then u_word=OK; else u_word=Errors; fi
  echo "$u_word ($u_all tests, $u_ran ran, $u_checks checks, 0 ignored, 0 filtered out, $u_ms ms) in $u_groups groups, ${QT_CHECK_JOBS:-$(nproc)} at a time"
  passed=$((passed + u_ran - u_fail)); failed=$((failed + u_fail))
  [ "$u_fail" -gt 0 ] && failures+=("unit tests: $u_fail failed (see above)")
else
  failed=$((failed + 1)); failures+=("build/tests/unit_tests missing")
fi

# ---- end-to-end checks
# check NAME CMD...: runs CMD, counts it, prints PASS/FAIL with the last lines of output.
check() {
  local name=$1; shift
  local log="$QT_TMP/check.$passed.$failed.log"
  local t0=$SECONDS
  if "$@" > "$log" 2>&1; then
    passed=$((passed + 1)); echo "PASS $name ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name"; tail -n 25 "$log" | sed 's/^/    /'
  fi
}
export -f check 2>/dev/null || true

# check_bg NAME CMD... / check_join: the same check, run in the background, at most
# QT_CHECK_JOBS (default: the CPU count) at once; check_join waits for all of them and
# reports and counts each exactly as check does, in the order they were started. Only for
# single-process CPU-bound checks with nothing timed (the fuzz targets of 36_fuzz.sh): never
# for multi-rank runs or a deadline (comm_timeout) cell. CMD runs in a subshell, so it may not
# set variables the later checks read.
bg_names=(); bg_pids=(); bg_logs=(); bg_n=0
check_bg() {
  local name=$1; shift
  local jobs=${QT_CHECK_JOBS:-$(nproc)} base=$QT_TMP/bg.$bg_n i running
  bg_n=$((bg_n + 1))
  while :; do  # wait until fewer than $jobs of ours run
    running=()
    for i in "${!bg_pids[@]}"; do [ -e "${bg_logs[$i]}.rc" ] || running+=("${bg_pids[$i]}"); done
    [ "${#running[@]}" -lt "$jobs" ] && break
    wait -n "${running[@]}"  # one of them ends (at once if one already has)
  done
  ( t0=$SECONDS; "$@" > "$base.log" 2>&1; rc=$?
    echo "$((SECONDS - t0))" > "$base.secs"; echo "$rc" > "$base.rc" ) &
  bg_names+=("$name"); bg_pids+=($!); bg_logs+=("$base")
}
check_join() {
  local i rc
  for i in "${!bg_pids[@]}"; do
    wait "${bg_pids[$i]}"
    rc=$(cat "${bg_logs[$i]}.rc" 2>/dev/null || echo 1)
    if [ "$rc" = 0 ]; then
      passed=$((passed + 1)); echo "PASS ${bg_names[$i]} ($(cat "${bg_logs[$i]}.secs") s)"
    else
      failed=$((failed + 1)); failures+=("${bg_names[$i]}"); echo "FAIL ${bg_names[$i]}"
      tail -n 25 "${bg_logs[$i]}.log" | sed 's/^/    /'
    fi
  done
  bg_names=(); bg_pids=(); bg_logs=()
}

# Shared by the e2e scripts that compare runs bit for bit:
# det_fields FILE: one line per step with the step, loss bits and fingerprint; fails (so the
# comparison cannot pass vacuously) when a metrics line lacks any of them. Run manifest lines
# ({"manifest":..., one per start of a run) are skipped; a held-out eval line (it carries
# "eval_loss", issue 33) gives its step and eval loss bits, and with mtp_eval_target_module
# its acceptance fields (the rate, the depth, the integer counts).
det_fields() {
  awk '/^\{"manifest":/ { next }
       /"eval_loss":/ { n++; s = match($0, /"step":[0-9]+/) ? substr($0, RSTART, RLENGTH) : "";
         e = match($0, /"eval_loss_bits":"0x[0-9a-f]+"/) ? substr($0, RSTART, RLENGTH) : "";
         if (s == "" || e == "") { print "eval line without step/eval_loss_bits: " $0 > "/dev/stderr"; bad = 1 }
         a = match($0, /"eval_mtp_acceptance_rate_percent":[^,]*,"eval_mtp_target_module":[0-9]+,"eval_mtp_accepted":[0-9]+,"eval_mtp_accept_positions":[0-9]+/) ? " " substr($0, RSTART, RLENGTH) : "";
         print s, e a; next }
       { n++; s = match($0, /"step":[0-9]+/) ? substr($0, RSTART, RLENGTH) : "";
         l = match($0, /"loss_bits":"0x[0-9a-f]+"/) ? substr($0, RSTART, RLENGTH) : "";
         f = match($0, /"fingerprint":"0x[0-9a-f]+"/) ? substr($0, RSTART, RLENGTH) : "";
         if (s == "" || l == "" || f == "") { print "metrics line without step/loss_bits/fingerprint: " $0 > "/dev/stderr"; bad = 1 }
         print s, l, f }
       END { if (n == 0 || bad) exit 1 }' "$1"
}
# plan_det PLAN RANKS DIR STEPS: runs build/PLAN/qtrain once for STEPS steps on RANKS ranks
# (under mpiexec when more than one, always under timeout) on the tiny test data, seed 11,
# and leaves its det_fields lines in DIR/PLAN.det (kept: a second call does nothing).
plan_det() {
  local p=$1 n=$2 d=$3 steps=$4
  mkdir -p "$d"
  [ -s "$d/$p.det" ] && return 0
  local data=tests/golden/e2e/test-next-tiny/tokens.npy
  if [ "$n" -eq 1 ]; then
    timeout 120 build/$p/qtrain data=$data seed=11 steps=$steps metrics=$d/$p.jsonl 2> "$d/$p.err"
  else
    timeout 120 mpiexec -n "$n" build/$p/qtrain data=$data seed=11 steps=$steps metrics=$d/$p.jsonl 2> "$d/$p.err"
  fi || { tail -n 3 "$d/$p.err"; return 1; }
  det_fields "$d/$p.jsonl" > "$d/$p.det"
}

# plan_variant RUN DIR KEY=VALUE...: configgen's plan of configgen/configs/runs/RUN.yml with
# the overrides, built by `make plan-binary` into DIR/RUN-v/qtrain (a variant of a committed
# run without a committed plan: the z-loss cells of 69, 77 and 79). Rebuilt each time.
plan_variant() {
  local run=$1 d=$2; shift 2
  rm -rf "$d/$run-v"; mkdir -p "$d/$run-v"
  build/configgen/configgen -o "$d/$run-v/plan" "configgen/configs/runs/$run.yml" "$@" \
    > "$d/$run-v/configgen.log" 2>&1 || { tail -n 3 "$d/$run-v/configgen.log"; return 1; }
  make -s plan-binary PLAN="$d/$run-v/plan/$run" OUT="$d/$run-v/qtrain" \
    > "$d/$run-v/make.log" 2>&1 || { tail -n 5 "$d/$run-v/make.log"; return 1; }
}

# coll_calls ERR: the collective calls of rank 0's steps in a qtrain stderr file (its
# "collectives: steps: N calls" line)
coll_calls() {
  sed -n 's/.*collectives: steps: \([0-9]*\) calls.*/\1/p' "$1" | tail -n 1
}

# more_rounds ERR_ROUNDS ERR_ONE WHAT: the run in rounds (ERR_ROUNDS, WHAT its rounds) made
# more collective calls than the one-round run (ERR_ONE): several rounds really ran
more_rounds() {
  local a b
  a=$(coll_calls "$1") b=$(coll_calls "$2")
  echo "collective calls over 10 steps: $3 $a, one round per op $b (same bits)"
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt "$b" ]
}

# same_bits DIR ONE RUN RANKS: RUN on RANKS ranks == ONE on one rank, bit for bit (loss bits
# and fingerprint, 10 steps; plan_det's cache in DIR). The matrices of 57, 61, 69, 71 use it.
same_bits() {
  local d=$1; shift
  plan_det "$1" 1 "$d" 10 && plan_det "$2" "$3" "$d" 10 || return 1
  cmp "$d/$1.det" "$d/$2.det" && echo "identical to $1: $(tail -n 1 "$d/$2.det")"
}

# bits_differ DIR A B: the one-rank runs A and B differ at step 10 (a setting that must change
# the bits really does: the matrices that compare against it are not vacuous).
bits_differ() {
  local d=$1 a b
  plan_det "$2" 1 "$d" 10 && plan_det "$3" 1 "$d" 10 || return 1
  a=$(tail -n 1 "$d/$2.det") b=$(tail -n 1 "$d/$3.det")
  [ "$a" != "$b" ] || { echo "$3 has the bits of $2: $a"; return 1; }
  echo "$2: $a; $3: $b"
}

# Checkpoint resumes (72_mesh_ckpt.sh, 73_context_ckpt.sh), cached under $QT_TMP/ckpt.
# ckpt_run RUN RANKS ARGS...: build/RUN/qtrain on RANKS ranks (mpiexec above one, always
# under timeout) on the tiny test data, seed 11.
ckpt_run() {
  local run=$1 n=$2; shift 2
  if [ "$n" -eq 1 ]; then
    timeout 120 build/$run/qtrain data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 "$@"
  else
    timeout 120 mpiexec -n "$n" build/$run/qtrain data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 "$@"
  fi
}


# ckpt_ref PLAN: the uninterrupted 10-step run of one-rank PLAN, fields of steps 6..10 (cached)
ckpt_ref() {
  local plan=$1 d=$QT_TMP/ckpt
  mkdir -p "$d"
  if [ ! -s "$d/$plan-ref.det" ]; then
    ckpt_run "$plan" 1 steps=10 metrics=$d/$plan-ref.jsonl 2> /dev/null || return 1
    det_fields "$d/$plan-ref.jsonl" | tail -n 5 > "$d/$plan-ref.det" || return 1
  fi
}

# ckpt_resume REF SAVE SAVE_RANKS LOAD LOAD_RANKS [EXT]: save at step 5 with plan SAVE, train
# on to step 10 with plan LOAD; steps 6..10 must equal the uninterrupted run of one-rank
# plan REF. EXT "" (default) saves a sharded directory (64 KiB shards, so several of each
# kind), ".safetensors" one file.
ckpt_resume() {
  local ref=$1 sp=$2 sn=$3 lp=$4 ln=$5 ext=${6:-} d=$QT_TMP/ckpt
  ckpt_ref "$ref" || return 1
  local ck=$d/$sp$ext tag=$sp-to-$lp$ext
  if [ ! -e "$ck" ]; then
    ckpt_run "$sp" "$sn" steps=5 save=$ck save_shard_size=64K 2> "$d/$tag.save.log" \
      || { tail -n 5 "$d/$tag.save.log"; return 1; }
  fi
  ckpt_run "$lp" "$ln" steps=10 load=$ck metrics=$d/$tag.jsonl 2> "$d/$tag.log" \
    || { tail -n 5 "$d/$tag.log"; return 1; }
  grep -q "resuming from .* at step 5" "$d/$tag.log" || { echo "did not resume at step 5"; tail -n 5 "$d/$tag.log"; return 1; }
  det_fields "$d/$tag.jsonl" > "$d/$tag.det" || return 1
  [ "$(wc -l < "$d/$tag.det")" -eq 5 ] || { echo "expected 5 metrics lines (steps 6..10)"; return 1; }
  [ -z "$ext" ] && echo "$(ls "$ck" | grep -c -- '-of-') shards"
  cmp "$d/$ref-ref.det" "$d/$tag.det" && echo "steps 6..10 identical: $(tail -n 1 "$d/$tag.det")"
}

# ckpt_same_file A B: two checkpoints hold the same bytes: the data region bit for bit and
# the header equal once the plan hash and run name values (which name the mesh) are blanked.
ckpt_header() {
  local n
  n=$(od -An -tu8 -N8 "$1" | tr -d ' ') || return 1
  head -c $((8 + n)) "$1" | tail -c "$n" \
    | sed -e 's/"plan_hash":"[^"]*"/"plan_hash":""/' -e 's/"run_name":"[^"]*"/"run_name":""/' -e 's/ *$//'
}
ckpt_data() {
  local n
  n=$(od -An -tu8 -N8 "$1" | tr -d ' ') || return 1
  tail -c +$((9 + n)) "$1"
}
ckpt_same_file() {
  cmp <(ckpt_header "$1") <(ckpt_header "$2") || { echo "headers differ"; return 1; }
  cmp <(ckpt_data "$1") <(ckpt_data "$2") || { echo "tensor bytes differ"; return 1; }
  echo "identical: $(ckpt_data "$1" | wc -c) tensor bytes, state hash $(ckpt_header "$1" | grep -o '"state_hash":"[^"]*"')"
}

# ckpt_dir_eq A B: two checkpoint directories hold the same files, every shard byte for byte
# and the indexes equal once plan hash and run name are blanked.
ckpt_dir_eq() {
  local a=$1 b=$2 f n=0
  cmp <(ls "$a") <(ls "$b") || { echo "file lists differ"; return 1; }
  for f in "$a"/*-of-*.safetensors; do
    cmp "$f" "$b/$(basename "$f")" || return 1
    n=$((n + 1))
  done
  for f in model.safetensors.index.json optimizer.safetensors.index.json; do
    cmp <(sed -e 's/"plan_hash":"[^"]*"//' -e 's/"run_name":"[^"]*"//' "$a/$f") \
        <(sed -e 's/"plan_hash":"[^"]*"//' -e 's/"run_name":"[^"]*"//' "$b/$f") || return 1
  done
  echo "$n shards identical"
}

# loss_near A B N W TOL0 TOLW DROP: the losses of metrics files A (fp32) and B (bf16), N
# steps each: step 0 within TOL0 (relative to A's), the mean of the last W steps within
# TOLW, and B's last-W mean below DROP x its step 0 (it trains). Prints the figures.
loss_near() {
  paste <(grep -o '"loss":[0-9.e+-]*' "$1" | cut -d: -f2) <(grep -o '"loss":[0-9.e+-]*' "$2" | cut -d: -f2) |
    awk -v n="$3" -v w="$4" -v t0="$5" -v tw="$6" -v drop="$7" '
         function abs(x) { return x < 0 ? -x : x }
         NR == 1 { f0 = $1; b0 = $2 } NR > n - w { fm += $1 / w; bm += $2 / w }
         END { printf "step 0: fp32 %.5f bf16 %.5f (%.3f%%); steps %d..%d mean: fp32 %.4f bf16 %.4f (%.2f%%)\n",
                      f0, b0, 100 * abs(f0 - b0) / f0, n - w, n - 1, fm, bm, 100 * abs(fm - bm) / fm;
               exit !(NR == n && abs(f0 - b0) <= t0 * f0 && abs(fm - bm) <= tw * fm && bm < drop * b0) }'
}

# golden_run RUN [GOLDEN]: build/RUN/qtrain loads the reference's initial weights of
# tests/golden/e2e/GOLDEN (default RUN), dumps its step-0 gradients and trains 10 steps on
# the reference's tokens; gradients and metrics are compared with the reference's at the
# tolerances tests/e2e/10_golden.sh states.
golden_run() {
  local run=$1 g=tests/golden/e2e/${2:-$1} out=$QT_TMP/golden-$1
  mkdir -p "$out"
  [ -f "$g/init.safetensors" ] || { echo "missing goldens in $g (make goldens)"; return 1; }
  build/$run/qtrain load="$g/init.safetensors" data="$g/tokens.npy" steps=10 \
      metrics="$out/metrics.jsonl" dump_grads="$out/grads0.safetensors" || return 1
  build/tools/st_compare "$out/grads0.safetensors" "$g/grads0.safetensors" 2e-4 || return 1
  build/tools/metrics_compare "$out/metrics.jsonl" "$g/expected.json" 2e-4 1e-3
}

e2e_scripts=()
read -r -a e2e_globs <<< "${QT_E2E:-*}"  # split on blanks, no expansion against the cwd
for g in "${e2e_globs[@]}"; do
  for f in tests/e2e/$g.sh; do [ -f "$f" ] && e2e_scripts+=("$f"); done
done
mapfile -t e2e_scripts < <(printf '%s\n' "${e2e_scripts[@]}" | sort -u)
for f in "${e2e_scripts[@]}"; do
  [ -f "$f" ] || continue
  echo "== $f"
  # shellcheck source=/dev/null
  source "$f"
done

echo
if [ ${#failures[@]} -gt 0 ]; then printf 'failed: %s\n' "${failures[@]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
