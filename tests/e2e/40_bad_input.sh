# 40_bad_input.sh - bad input of every kind fails with a clear message, a non-zero exit and
# nothing left half-written (sourced by run_all.sh).
#
# expect_fail NAME SUBSTRING CMD...: CMD must exit non-zero and print SUBSTRING on stderr.
expect_fail() {
  local sub=$1; shift
  local err=$QT_TMP/err.txt
  "$@" > /dev/null 2> $err && { echo "unexpected success: $*"; return 1; }
  grep -qF -- "$sub" $err || { echo "message lacks \"$sub\":"; cat $err; return 1; }
  echo "ok: $(head -n 3 $err)"
}
Q=build/test-next-tiny/qtrain
T=tests/golden/e2e/test-next-tiny/tokens.npy
B=$QT_TMP/bad; mkdir -p $B

# ---- command line
check "cli: unknown key names it and suggests" expect_fail "unknown key 'stpes' in 'stpes=3'; did you mean 'steps'?" $Q stpes=3
check "cli: a key in capitals is told its lower-case name (audit22)" expect_fail "unknown key 'STEPS' in 'STEPS=3'; did you mean 'steps'?" $Q STEPS=3
check "cli: negative steps" expect_fail "steps=-3: expected a non-negative integer" $Q steps=-3
check "cli: non-numeric seed" expect_fail "seed=abc: expected" $Q seed=abc
check "cli: argument without '='" expect_fail "key=value" $Q steps
# start_timeout= (seconds in (0, 1e6], as comm_timeout=): each bad value is refused naming
# the key and the range, exit 2, before anything runs
cli_start_timeout() {
  local v rc
  for v in 0 -3 abc 2e6 nan inf 5s ""; do
    $Q start_timeout=$v steps=0 > /dev/null 2> $QT_TMP/st.err; rc=$?
    [ $rc -eq 2 ] || { echo "start_timeout=$v: exit $rc, expected 2"; cat $QT_TMP/st.err; return 1; }
    grep -qF -- "qtrain: bad argument start_timeout=$v: expected " $QT_TMP/st.err ||
        { echo "start_timeout=$v:"; cat $QT_TMP/st.err; return 1; }
  done
  grep -qF "start_timeout=: expected a non-empty value" $QT_TMP/st.err || return 1
  expect_fail "bad argument start_timeout=0: expected a number of seconds in (0, 1e6]" \
      $Q start_timeout=0 || return 1
  $Q start_timeout=0.5 comm_timeout=1e6 steps=0 data=$T 2> $QT_TMP/st.err || { cat $QT_TMP/st.err; return 1; }
}
check "cli: start_timeout: 0, negative, text, above 1e6, nan, inf, a unit, empty are refused; 0.5 is taken" cli_start_timeout
# learning_rate= and the timeouts are plain decimal numbers: strtod also took hex floats
# (0x1p-3 = 0.125), a leading blank (a quoted "learning_rate= 1e-3") and a signed -0, which
# the manifest then recorded as given; each is refused naming the value, exit 2
cli_decimal() {
  local a rc
  for a in "learning_rate=0x1p-3" "learning_rate= 1e-3" "learning_rate=-0" "learning_rate=+1e-3" \
           "comm_timeout=0x10" "start_timeout= 5"; do
    $Q "$a" steps=0 data=$T > /dev/null 2> $QT_TMP/dec.err; rc=$?
    [ $rc -eq 2 ] && grep -qF -- "qtrain: bad argument $a: expected " $QT_TMP/dec.err || { echo "$a: exit $rc"; cat $QT_TMP/dec.err; return 1; }
  done
  $Q learning_rate=.5e-3 comm_timeout=1. steps=0 data=$T 2> $QT_TMP/dec.err || { cat $QT_TMP/dec.err; return 1; }
}
check "cli: learning_rate= and timeouts: hex, a leading blank or a sign are refused; .5e-3 and 1. are taken" cli_decimal
# audit24: a whole number past the limit was told "expected a non-negative integer", which it
# is; the messages now give the limit
cli_big_numbers() {
  local m=4611686018427387903
  expect_fail "bad argument steps=18446744073709551616: expected a non-negative integer up to $m (2^62 - 1)" $Q steps=18446744073709551616 || return 1
  expect_fail "bad argument steps=4611686018427387904: expected a non-negative integer up to $m" $Q steps=4611686018427387904 || return 1
  expect_fail "bad argument save_every=9223372036854775807: expected a positive integer up to $m" $Q save_every=9223372036854775807 save=$QT_TMP/x || return 1
  expect_fail "bad argument seed=18446744073709551616: expected an unsigned decimal integer up to 18446744073709551615 (2^64 - 1)" $Q seed=18446744073709551616 || return 1
  $Q steps=0 seed=18446744073709551615 data=$T 2> /dev/null
}
check "cli: integers past their limit are told the limit" cli_big_numbers
# save= and dump_grads= naming one file: the first step's gradient dump was written, then
# silently replaced by the checkpoint at the end
check "cli: save= and dump_grads= naming the same file are refused" expect_fail \
  "save= and dump_grads= name the same file $QT_TMP/same.safetensors" $Q steps=1 data=$T save=$QT_TMP/same.safetensors dump_grads=$QT_TMP/same.safetensors

# ---- token files
printf 'QTTOKENS\x01\x00\x00\x00\x02\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x01\x00' > $B/short.tok
check "data: missing file names it" expect_fail "$B/nope.npy" $Q data=$B/nope.npy steps=1
check "data: raw file shorter than its header says" expect_fail "short.tok" $Q data=$B/short.tok steps=1
cp tests/golden/e2e/test-35-tiny/tokens.npy $B/vocab80.npy 2>/dev/null
check "data: token id out of range names id and position" expect_fail "position" $Q data=$B/vocab80.npy steps=1
head -c 60 $T > $B/trunc.npy
check "data: truncated npy" expect_fail "trunc.npy" $Q data=$B/trunc.npy steps=1

check "data: a directory says so" expect_fail "$B: is a directory; expected a token file" $Q data=$B steps=1

# A token file too short for one window (10 tokens; test-next-tiny needs 17) is refused
# before the arena is mapped and prefaulted (no start-up banner, which follows the
# prefault), saying what to do (issue 30).
data_short_before_arena() {
  printf 'QTTOKENS\x01\x00\x00\x00\x02\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00' > $B/ten.tok
  printf '\x01\x00%.0s' 1 2 3 4 5 6 7 8 9 10 >> $B/ten.tok
  expect_fail "ten.tok: 10 tokens, need at least seq_len+1 = 17 for one window (max_target_length 16, and the next token as its last target): give more data" \
    $Q data=$B/ten.tok steps=1 || return 1
  ! grep -q "prefault" $QT_TMP/err.txt || { echo "the arena was prefaulted first:"; cat $QT_TMP/err.txt; return 1; }
}
check "data: too short for one window, refused before the arena's prefault, saying what to give" data_short_before_arena

# A run whose steps read more windows than the data holds reads it more than once: rank 0
# says so at start-up (how many times, each pass how many steps), marks the step where each
# new pass begins, and the manifest records the windows and passes (issue 30). 81 tokens
# of test-next-tiny (16 tokens a sequence, 2 a step): 5 windows, a pass every 2.5 steps.
data_passes_noted() {
  local d=$QT_TMP/passes
  mkdir -p $d
  { printf 'QTTOKENS\x01\x00\x00\x00\x02\x00\x00\x00\x51\x00\x00\x00\x00\x00\x00\x00'
    for i in $(seq 81); do printf "\\x$(printf %02x $((i % 60)))\\x00"; done; } > $d/t81.tok
  $Q data=$d/t81.tok steps=6 metrics=$d/m6.jsonl 2> $d/e6 || { cat $d/e6; return 1; }
  grep note $d/e6
  grep -qF "qtrain: note: steps 0..5 read 12 sequences of 16 tokens (192 tokens) from the 5 windows of $d/t81.tok (80 usable tokens): the data is read 2.40 times, a pass every 2.5 steps; loss may jump where a pass restarts (qtrain-audit plot marks each)" $d/e6 || return 1
  grep -qF "qtrain: note: step 3/6 begins pass 2 over the data (window 0 again)" $d/e6 || return 1
  grep -qF "qtrain: note: step 6/6 begins pass 3 over the data (window 0 again)" $d/e6 || return 1
  [ "$(grep -c "begins pass" $d/e6)" -eq 2 ] || return 1
  head -n 1 $d/m6.jsonl | grep -o '"data":{[^}]*}'
  head -n 1 $d/m6.jsonl | grep -q '"tokens":81,"windows":5,"passes":2.4}' || return 1
  # 2 steps read 4 of the 5 windows: no note, one pass in the manifest
  $Q data=$d/t81.tok steps=2 metrics=$d/m2.jsonl 2> $d/e2 || { cat $d/e2; return 1; }
  ! grep -q "read .* times\|begins pass" $d/e2 || { cat $d/e2; return 1; }
  head -n 1 $d/m2.jsonl | grep -q '"windows":5,"passes":0.8}'
}
check "data: a run that reads its data more than once says how many times, and where each pass begins" data_passes_noted

# A data file changed while qtrain trains on it: rewritten in place, truncated, or replaced
# at its path. The run stops within a step with a message naming the file, exit 1.
data_changed_stops() {
  local d=$QT_TMP/dchg how rc n
  for how in rewrite truncate replace; do
    rm -rf $d; mkdir -p $d; cp $T $d/tok.npy
    timeout 120 $Q steps=1000000 data=$d/tok.npy metrics=$d/m.jsonl 2> $d/err.txt & local pid=$!
    for n in $(seq 300); do [ -s $d/m.jsonl ] && [ "$(grep -c '^{"step"' $d/m.jsonl)" -ge 2 ] && break; sleep 0.1; done
    case $how in
      rewrite) printf '\xff\xff\xff\xff' | dd of=$d/tok.npy bs=1 seek=300 conv=notrunc 2> /dev/null ;;
      truncate) truncate -s 200 $d/tok.npy ;;
      replace) cp $T $d/new.npy && mv $d/new.npy $d/tok.npy ;;
    esac
    wait $pid; rc=$?
    [ $rc -eq 1 ] || { echo "$how: exit $rc, expected 1"; tail -3 $d/err.txt; return 1; }
    grep -q "data file $d/tok.npy \(changed during the run\|was truncated\)" $d/err.txt || { echo "$how:"; tail -3 $d/err.txt; return 1; }
    echo "ok: $how: $(grep "data file" $d/err.txt | head -1)"
  done
}
check "data: a data file changed during the run (rewritten, truncated, replaced) stops it, naming the file" data_changed_stops

# ---- checkpoints
check "load: missing checkpoint file" expect_fail "$B/none.safetensors" $Q load=$B/none.safetensors steps=1 data=$T
check "load: checkpoint of another model names a tensor" expect_fail "model." $Q load=tests/golden/e2e/test-35-tiny/init.safetensors steps=1 data=$T
printf 'garbage' > $B/garbage.safetensors
check "load: not a safetensors file" expect_fail "garbage.safetensors" $Q load=$B/garbage.safetensors steps=1 data=$T
save_missing_dir() {
  # the destination is checked before training: a save into a missing directory fails at
  # start-up, naming it, and creates nothing (atomic replacement of an existing file is
  # tested in tests/unit/test_io.cpp, io.atomic_save_keeps_old_file)
  $Q steps=1 data=$T save=$B/nodir/out.safetensors 2> $QT_TMP/err.txt && { echo "save into a missing directory succeeded"; return 1; }
  grep -q "nodir" $QT_TMP/err.txt || { cat $QT_TMP/err.txt; return 1; }
  ! ls -d $B/nodir* 2>/dev/null | grep -q .
}
check "save: unwritable destination fails at start-up with its name, nothing written" save_missing_dir

# audit22: save=. (or DIR/., ..) trained, then failed at the save ("holds the subdirectory
# ..tmp.<pid>", the temporary inside the target): the training lost. Refused at start-up now,
# before any step, the directory unchanged.
save_dot() {
  local d=$QT_TMP/savedot; rm -rf $d; mkdir -p $d/w && echo mine > $d/w/notes.txt || return 1
  local sv
  for sv in . w/. ..; do
    (cd $d/w && exec $QT_ROOT/$Q steps=2 data=$QT_ROOT/$T save=$sv) > $d/out 2> $d/err && { echo "save=$sv accepted"; return 1; }
    grep -F "qtrain: save=$sv: the path ends in '${sv##*/}'; a save writes beside its target" $d/err || { cat $d/err; return 1; }
    grep -q "^step" $d/out $d/err && { echo "save=$sv trained"; return 1; }
    [ "$(ls -A $d/w)" = notes.txt ] || { ls -A $d/w; return 1; }
  done
  # save= the current directory by its name: the swap left the run in the deleted old
  # directory, and relative paths (data=tokens.npy) failed at the first save ("data file changed")
  cp $T $d/w/tokens.npy || return 1
  for sv in $d/w ../w; do
    (cd $d/w && exec $QT_ROOT/$Q steps=2 save_every=1 data=tokens.npy save=$sv) > $d/out 2> $d/err && { echo "save=$sv accepted"; return 1; }
    grep -F "qtrain: save=$sv is the current directory; a save swaps a new directory in" $d/err || { cat $d/err; return 1; }
    [ "$(ls -A $d/w | tr '\n' ' ')" = "notes.txt tokens.npy " ] || { ls -A $d/w; return 1; }
  done
}
check "save: save=. (DIR/., .., the current directory) is refused at start-up, nothing trained or written" save_dot
save_targets_checked() {
  local d=$QT_TMP/targets; rm -rf $d; mkdir -p $d/adir/sub
  check_refused() { local sub=$1; shift; expect_fail "$sub" "$@" || return 1; }
  # not a regular file: refused even with overwrite=1 (a save= path without .safetensors is
  # a checkpoint directory: a device there is refused too)
  check_refused "save=/dev/null exists and is a character device" $Q steps=1 data=$T save=/dev/null overwrite=1 || return 1
  # a checkpoint directory with a subdirectory (a save replaces the directory and carries
  # over plain files only), and a regular file at a directory path
  check_refused "save=$d/adir holds the subdirectory sub" $Q steps=1 data=$T save=$d/adir overwrite=1 || return 1
  check_refused "save=$T exists and is a regular file, not a directory" $Q steps=1 data=$T save=$T overwrite=1 || return 1
  [ -d $d/adir/sub ] || return 1
  check_refused "dump_grads=$d/adir exists and is a directory" $Q steps=1 data=$T dump_grads=$d/adir || return 1
  # the data file itself, here through a hard link (same device and inode)
  cp $T $d/tokens.npy && ln $d/tokens.npy $d/link.safetensors
  check_refused "save=$d/link.safetensors is the data file data=$d/tokens.npy" \
    $Q steps=1 data=$d/tokens.npy save=$d/link.safetensors overwrite=1 || return 1
  cmp $T $d/tokens.npy || return 1
  # a safetensors file that is not a qtrain checkpoint (format "pt"), and a text file
  cp tests/golden/e2e/test-next-tiny/init.safetensors $d/hf.safetensors
  printf 'notes\n' > $d/notes.txt
  check_refused "save=$d/hf.safetensors exists and is not a qtrain checkpoint (__metadata__ format is absent, expected \"qtrain-1\")" \
    $Q steps=1 data=$T save=$d/hf.safetensors || return 1
  check_refused "dump_grads=$d/notes.txt exists and is not a safetensors file" \
    $Q steps=1 data=$T dump_grads=$d/notes.txt || return 1
  cmp tests/golden/e2e/test-next-tiny/init.safetensors $d/hf.safetensors && [ "$(cat $d/notes.txt)" = notes ] || return 1
  # a safetensors file that is not a gradient dump (weights) is not replaced by dump_grads=
  check_refused "dump_grads=$d/hf.safetensors exists and is not a qtrain gradient dump" \
    $Q steps=1 data=$T dump_grads=$d/hf.safetensors || return 1
  cmp tests/golden/e2e/test-next-tiny/init.safetensors $d/hf.safetensors || return 1
  # accepted: a gradient dump for dump_grads, a qtrain checkpoint for save, and with
  # overwrite=1 the refused files
  $Q steps=1 data=$T dump_grads=$d/g.safetensors save=$d/ck.safetensors 2> /dev/null || return 1
  $Q steps=1 data=$T dump_grads=$d/g.safetensors save=$d/ck.safetensors 2> /dev/null || return 1
  $Q steps=1 data=$T save=$d/hf.safetensors dump_grads=$d/notes.txt overwrite=1 2> /dev/null
}
check "save=/dump_grads=: a device, directory, the data file or a foreign file is refused before training" save_targets_checked

stale_temporaries_removed() {
  local d=$QT_TMP/stale; rm -rf $d; mkdir -p $d
  local dead; dead=$(sh -c 'echo $$')   # a process that has already exited
  touch $d/ck.safetensors.tmp.$dead $d/g.safetensors.tmp.$dead $d/ck.safetensors.tmp.$$ $d/other.tmp.$dead
  $Q steps=1 data=$T save=$d/ck.safetensors dump_grads=$d/g.safetensors 2> $QT_TMP/err.txt || { cat $QT_TMP/err.txt; return 1; }
  grep "removed $d/ck.safetensors.tmp.$dead, a temporary left by process $dead" $QT_TMP/err.txt || { cat $QT_TMP/err.txt; return 1; }
  ! [ -e $d/ck.safetensors.tmp.$dead ] && ! [ -e $d/g.safetensors.tmp.$dead ] || { echo "stale temporaries left:"; ls $d; return 1; }
  [ -e $d/ck.safetensors.tmp.$$ ] || { echo "removed the temporary of a live process"; return 1; }
  [ -e $d/other.tmp.$dead ] || { echo "removed another file's temporary"; return 1; }
}
check "save=/dump_grads=: temporaries of killed saves (process gone) are removed at start-up, with a note" stale_temporaries_removed

# ---- tokenizer= (copied into save= directories): refused at start-up, exit 2, nothing saved
tokenizer_refused() {
  local d=$QT_TMP/tokbad rc; rm -rf $d; mkdir -p $d/tokdir $d/emptydir
  : > $d/tokdir/tokenizer.json
  # audit23: a file that is not a JSON object (the model's weights, a token file) was copied
  # into every save as tokenizer.json
  cp tests/golden/e2e/test-next-tiny/init.safetensors $d/model.safetensors && cp $T $d/tokens.npy || return 1
  for arg in "$d/none.json" "$d/emptydir" "$d/tokdir" "$d/model.safetensors" "$d/tokens.npy"; do
    $Q steps=1 data=$T save=$d/ck tokenizer=$arg > /dev/null 2> $QT_TMP/err.txt; rc=$?
    [ $rc -eq 2 ] || { echo "tokenizer=$arg: exit $rc, expected 2"; cat $QT_TMP/err.txt; return 1; }
    grep -q "tokenizer=: .*$arg" $QT_TMP/err.txt || { echo "message does not name $arg:"; cat $QT_TMP/err.txt; return 1; }
    [ -e $d/ck ] && { echo "tokenizer=$arg: a checkpoint was written"; return 1; }
    echo "ok: $(tail -n 1 $QT_TMP/err.txt)"
  done
  expect_fail "tokenizer=$d/tokdir/tokenizer.json needs save=DIR" $Q steps=1 data=$T tokenizer=$d/tokdir/tokenizer.json
}
check "tokenizer=: a missing, empty, not-JSON-object (audit23) or directory-without-tokenizer.json path, or no save= directory, is refused before training, naming the file" tokenizer_refused

# audit23: load=DIR holding both model.safetensors.index.json and model.safetensors took
# the index without a word, where transformers' from_pretrained(DIR) takes
# model.safetensors: two programs, two models from one directory. Refused, naming both
# files; each named file loads.
load_dir_both() {
  local d=$QT_TMP/both; rm -rf $d; mkdir -p $d
  $Q steps=1 data=$T save=$d/ck 2> /dev/null && cp tests/golden/e2e/test-next-tiny/init.safetensors $d/ck/model.safetensors || return 1
  expect_fail "qtrain: $d/ck holds both model.safetensors.index.json (a sharded checkpoint) and model.safetensors (a single-file one): transformers' from_pretrained loads model.safetensors, qtrain would take the index; name the file you mean ($d/ck/model.safetensors or $d/ck/model.safetensors.index.json)" \
      $Q steps=2 data=$T load=$d/ck || return 1
  grep -q "^step " $QT_TMP/err.txt && { echo "trained"; return 1; }
  $Q steps=2 data=$T load=$d/ck/model.safetensors.index.json 2> $QT_TMP/err.txt && grep -q "resuming from .* at step 1" $QT_TMP/err.txt \
    || { cat $QT_TMP/err.txt; return 1; }
  $Q steps=1 data=$T load=$d/ck/model.safetensors 2> $QT_TMP/err.txt || { cat $QT_TMP/err.txt; return 1; }
}
check "load: a directory with both model.safetensors.index.json and model.safetensors is refused naming both; each file loads (audit23)" load_dir_both

metrics_resume_appends() {
  local d=$QT_TMP/mres; rm -rf $d; mkdir -p $d
  $Q steps=2 data=$T metrics=$d/m.jsonl save=$d/ck.safetensors 2> /dev/null || return 1
  # resuming appends: steps 0..3, in order, one line each, after each start's manifest
  $Q steps=4 data=$T metrics=$d/m.jsonl load=$d/ck.safetensors 2> /dev/null || return 1
  local steps; steps=$(sed 's/^{"step":\([0-9]*\),.*/\1/; s/^{"manifest":"qtrain-1","start_step":\([0-9]*\),.*/m\1/' $d/m.jsonl | tr '\n' ' ')
  [ "$steps" = "m0 0 1 m2 2 3 " ] || { echo "steps after resume: $steps"; cat $d/m.jsonl; return 1; }
  # a fresh run onto it is refused and leaves it as it was
  cp $d/m.jsonl $d/m.bak
  expect_fail "metrics file $d/m.jsonl already holds steps up to 3, and this run starts at step 0" \
    $Q steps=1 data=$T metrics=$d/m.jsonl || return 1
  cmp $d/m.jsonl $d/m.bak || return 1
  # overwrite=1 replaces it
  $Q steps=1 data=$T metrics=$d/m.jsonl overwrite=1 2> /dev/null || return 1
  [ "$(wc -l < $d/m.jsonl)" -eq 2 ] || { echo "overwrite=1 did not replace the file"; return 1; }
  # resuming at step 2 onto a file that ends at step 0: refused, naming both steps
  expect_fail "metrics file $d/m.jsonl ends at step 0, but this run resumes at step 2" \
    $Q steps=3 data=$T metrics=$d/m.jsonl load=$d/ck.safetensors || return 1
  [ "$(wc -l < $d/m.jsonl)" -eq 2 ]
}
check "metrics: a resumed run appends (last step must be start-1); a fresh run needs overwrite=1" metrics_resume_appends
check "metrics: a failing metrics write (full disk) is an error" expect_fail "writing the metrics file /dev/full failed" $Q steps=2 data=$T metrics=/dev/full
# audit22: a metrics= that cannot be created ended with "give overwrite=1 to replace the
# file" (there is no file; overwrite=1 then said only "cannot open", not why: a read-only
# directory, a path through a file)
printf 'x\n' > $B/plainfile
metrics_uncreatable() {
  $Q steps=1 data=$T metrics=$B/plainfile/m.jsonl > /dev/null 2> $B/mu.err && { echo accepted; return 1; }
  cat $B/mu.err
  [ "$(grep -v -e '^qtrain: run ' -e 'peak RSS' $B/mu.err)" = "qtrain: metrics file $B/plainfile/m.jsonl: cannot open: Not a directory" ] || return 1
  expect_fail "qtrain: cannot open metrics file $B/plainfile/m.jsonl for writing: Not a directory" $Q steps=1 data=$T metrics=$B/plainfile/m.jsonl overwrite=1
}
check "metrics: a path that cannot be created is refused with the reason, not the advice overwrite=1" metrics_uncreatable

# Long paths (audit24): a save= path of 4001-4034 characters passed the start-up check
# (< 4096), trained, and failed at the first save, whose names are up to 61 bytes longer
# (DIR.tmp.<pid>/optimizer-00001-of-00001.safetensors.tmp.<pid>); and every message was cut
# at 1024 bytes, so one about a path in a deep directory ended inside the path, before it
# said what was wrong. Now: at most 4000 characters, refused at start-up with nothing
# written; 4000 saves and loads (directory and file); a missing data= in the deep
# directory says "No such file or directory".
long_paths() {
  local d=$B/long c n200 name p rc
  n200=$(printf 'd%.0s' $(seq 200)); d=$B/long
  while [ ${#d} -lt 3750 ]; do d=$d/$n200; done
  mkdir -p $d || return 1
  for suf in "" .safetensors; do
    name=$(printf 'c%.0s' $(seq $((4000 - ${#d} - 1 - ${#suf}))))$suf; p=$d/$name
    $Q steps=1 data=$T save=$p > /dev/null 2> $B/lp.err || { echo "${#p} characters:"; tail -c 300 $B/lp.err; return 1; }
    $Q steps=2 data=$T load=$p > /dev/null 2> $B/lp.err || { echo "load ${#p} characters:"; tail -c 300 $B/lp.err; return 1; }
    rm -rf $p
    for x in x xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; do   # 4001, 4054
      p=$d/${name%.safetensors}$x$suf
      $Q steps=1 data=$T save=$p metrics=$d/m.jsonl > /dev/null 2> $B/lp.err; rc=$?
      [ $rc -eq 2 ] && grep -qF "qtrain: save=$p: expected a path (not empty, not ending in '/', at most 4000 characters: a save writes longer names" $B/lp.err ||
        { echo "${#p} characters: exit $rc"; tail -c 400 $B/lp.err; return 1; }
      [ -z "$(ls -A $d)" ] || { echo "${#p} characters: left in the directory:"; ls -A $d | cut -c1-80; return 1; }
    done
    echo "ok: save= of 4000 characters saves and loads, 4001 and 4054 refused at start-up (${suf:-directory})"
  done
  $Q steps=1 data=$d/missing.npy > /dev/null 2> $B/lp.err
  grep -qF "qtrain: $d/missing.npy: cannot open: No such file or directory" $B/lp.err ||
    { echo "the message was cut:"; tail -c 200 $B/lp.err; return 1; }
  rm -rf $B/long
}
check "paths: save= up to 4000 characters works, longer is refused at start-up (it failed at the first save); messages on long paths are whole" long_paths

# umask (audit24): the save's temporary directory was made with 0755 less the umask, so under
# umask 0277 (files readable by their owner only) it was r-x: the run trained, then failed at
# the first save ("cannot create: Permission denied") and left a directory it could not
# remove. It is owner-rwx now; the files keep the umask's modes. Run as nobody (root writes
# anyway) with the single-rank build (MPICH's own start-up fails under that umask); skipped
# where su is not possible.
umask_save() {
  su nobody -s /bin/sh -c "test -r $QT_ROOT/$T" 2> /dev/null || { echo "skipped: cannot run as nobody here"; return 0; }
  local d; d=$(mktemp -d /tmp/qt-umask.XXXXXX) && chmod 777 $d || return 1   # $QT_TMP is 0700
  su nobody -s /bin/sh -c "cd $d && umask 0277 && $QT_ROOT/build/test-next-tiny/qtrain-static data=$QT_ROOT/$T steps=2 save=ck save_every=1 > /dev/null 2> err && $QT_ROOT/build/test-next-tiny/qtrain-static data=$QT_ROOT/$T steps=3 load=ck save=ck > /dev/null 2> err2" ||
    { echo "umask 0277:"; cat $d/err $d/err2; rm -rf $d; return 1; }
  [ "$(ls -A $d | tr '\n' ' ')" = "ck err err2 " ] || { ls -A $d; rm -rf $d; return 1; }
  echo "umask 0277: saved, resumed and saved again; $(stat -c '%A' $d/ck/model.safetensors.index.json) files"
  rm -rf $d
}
check "umask: a save under umask 0277 writes its checkpoint (it trained, then failed at the save)" umask_save

# ---- memory limits
arena_over_rlimit() {
  # The bench arena (2 GiB) cannot fit a 1 GB address-space limit: both builds refuse at
  # start-up with the sizes and the limit, exit 1 (before: a bare SIGSEGV in exec).
  local bin rc
  for bin in build/bench/qtrain build/bench/qtrain-static; do
    ( ulimit -v 1000000; exec $bin steps=1 ) > /dev/null 2> $QT_TMP/err.txt; rc=$?
    [ $rc -eq 1 ] || { echo "$bin: exit $rc, expected 1"; cat $QT_TMP/err.txt; return 1; }
    grep -q "plan bench: the arena needs [0-9]* bytes ([0-9.]* MiB), but the address-space limit RLIMIT_AS (ulimit -v) is 1024000000 bytes" $QT_TMP/err.txt \
      || { cat $QT_TMP/err.txt; return 1; }
    echo "ok: $bin: $(head -n 1 $QT_TMP/err.txt)"
  done
  # and within the limit it runs
  ( ulimit -v 3000000; exec build/default/qtrain-static steps=1 ) > /dev/null 2>&1
}
check "memory: an arena beyond RLIMIT_AS (ulimit -v) is a message with the sizes, exit 1" arena_over_rlimit

# ---- divergence
diverged_stops() {
  $Q steps=3 data=$T learning_rate=1e30 save=$B/diverged.safetensors 2> $QT_TMP/err.txt \
    && { echo "a diverged run exited 0"; return 1; }
  grep -q "are not finite; stopping without saving" $QT_TMP/err.txt || { cat $QT_TMP/err.txt; return 1; }
  ! ls $B/diverged.safetensors* 2>/dev/null | grep -q .
}
check "training: a non-finite loss or gradient norm stops the run, nothing saved" diverged_stops

# ---- rank count
check "ranks: started on 2 ranks for a 1-rank plan" expect_fail "plan test-next-tiny was generated for 1 rank (mesh data 1 x fsdp 1 x tensor 1 x expert 1 x context 1), but this job has 2: run it without mpiexec" timeout 60 mpiexec -n 2 $Q steps=1 data=$T
# the single-rank musl build under mpiexec used to run two independent jobs writing the
# same files: each process refuses at start-up, naming hydra's variable and the MPI build
static_under_mpiexec() {
  local d=$QT_TMP/static2; rm -rf $d; mkdir -p $d
  timeout 60 mpiexec -n 2 build/test-next-tiny/qtrain-static steps=1 data=$T metrics=$d/m.jsonl \
    save=$d/ck.safetensors > /dev/null 2> $d/err.txt && { echo "accepted under mpiexec -n 2"; return 1; }
  [ "$(grep -c 'PMI_SIZE=2: a process manager (mpiexec, srun) started this process as one of 2 processes, but build/test-next-tiny/qtrain-static is the single-rank build' $d/err.txt)" = 2 ] \
    || { echo "expected the refusal from both processes:"; cat $d/err.txt; return 1; }
  grep -q 'run the MPI build build/test-next-tiny/qtrain (build/<run>/qtrain) under mpiexec' $d/err.txt || { cat $d/err.txt; return 1; }
  [ -z "$(ls -A $d | grep -v err.txt)" ] || { echo "files written:"; ls $d; return 1; }
  # one process under mpiexec still trains
  timeout 60 mpiexec -n 1 build/test-next-tiny/qtrain-static steps=1 data=$T > /dev/null 2> $d/err1.txt || { cat $d/err1.txt; return 1; }
  echo "ok: $(head -n 1 $d/err.txt)"
}
check "ranks: qtrain-static (single-rank build) under mpiexec -n 2 refuses on every process, writes nothing" static_under_mpiexec

# ---- configs (the full table of bad configs is in tests/unit/test_configgen.cpp)
check "configgen: unknown key suggests the nearest" expect_fail "base_emb_dim" build/configgen/configgen -o $B/gen configgen/configs/runs/test-next-tiny.yml base_emb_dimm=64
# context parallelism beyond the heads (context 4 on 2 GDN key heads) plans since issue 35:
# the heads are owned unevenly (docs/context.md), and plan.txt says so
cg_uneven_plans() {
  build/configgen/configgen -o $B/gen-un configgen/configs/runs/test-next-tiny.yml num_ranks=4 ici_context_parallelism=4 > /dev/null &&
    grep -q "GDN heads owned unevenly over context" $B/gen-un/*/plan.txt
  local rc=$?
  rm -rf $B/gen-un
  return $rc
}
check "configgen: context parallelism beyond the heads (context 4, 2 GDN key heads) plans, the heads owned unevenly" cg_uneven_plans
check "configgen: context 3 on 16-token sequences" \
  expect_fail "max_target_length=16 (configgen/configs/runs/test-next-tiny.yml:5): 16 is not a multiple of the context degree 3 (ici_context_parallelism=3 (command line)): each context rank holds an equal share of every sequence" \
  build/configgen/configgen -o $B/gen configgen/configs/runs/test-next-tiny.yml num_ranks=3 ici_context_parallelism=3
# the reference trainer's guard (context parallelism with GDN layers under explicit) now plans
cg_plans() {
  build/configgen/configgen -o $B/gen-ok "$@" &&
    grep -q "context 2: the 2 ranks of a context group read the same sequences, each keeping its own part of the tokens" $B/gen-ok/*/plan.txt
  local rc=$?
  rm -rf $B/gen-ok
  return $rc
}
check "configgen: context parallelism with GDN layers under shard_mode=explicit (the reference trainer's guard) plans" \
  cg_plans configgen/configs/runs/test-35-tiny.yml num_ranks=2 ici_context_parallelism=2 shard_mode=explicit
# the reference trainer's dense-MoE guard (sparse_matmul false under explicit) now plans
# (issue 32); a non-finite capacity key is refused
cg_dense_plans() {
  build/configgen/configgen -o $B/gen-ok "$@" && grep -q "moe form: sparse_matmul=false" $B/gen-ok/*/plan.txt
  local rc=$?
  rm -rf $B/gen-ok
  return $rc
}
check "configgen: sparse_matmul=false under shard_mode=explicit (the reference trainer's guard) plans" \
  cg_dense_plans configgen/configs/runs/test-35-tiny.yml sparse_matmul=false shard_mode=explicit capacity_factor=1.0
# MaxText's mtp_eval_target_module: a depth of the MTP head (1 .. mtp_num_layers); refused
# naming both keys (and where each was set) without a head or past its depths, and when not
# a whole depth; nothing written
cg_acc_bad() {
  rm -rf $B/gen-acc
  expect_fail "mtp_eval_target_module=1 (command line): the acceptance rate compares a depth of the MTP head with the main model, and there is no head (mtp_num_layers=0 (configgen/configs/base.yml:275))" \
    build/configgen/configgen -o $B/gen-acc configgen/configs/runs/test-next-tiny.yml mtp_eval_target_module=1 &&
  expect_fail "mtp_eval_target_module=2 (command line): the head has 1 depth (mtp_num_layers=1 (configgen/configs/runs/test-next-mtp.yml:10)); expected 0 (off) or a depth 1 .. 1" \
    build/configgen/configgen -o $B/gen-acc configgen/configs/runs/test-next-mtp.yml mtp_eval_target_module=2 eval_interval=3 &&
  expect_fail "mtp_eval_target_module=-1 (command line): expected 0 (no acceptance rate) or a whole depth" \
    build/configgen/configgen -o $B/gen-acc configgen/configs/runs/test-next-mtp.yml mtp_eval_target_module=-1 || return 1
  [ ! -e $B/gen-acc ] || { echo "configgen wrote $B/gen-acc"; return 1; }
}
check "configgen: mtp_eval_target_module without the MTP head, past its depths, negative: refused naming the keys, nothing written" cg_acc_bad
check "configgen: a non-finite capacity_factor names the key" \
  expect_fail "capacity_factor: value nan is not a number" \
  build/configgen/configgen -o $B/gen configgen/configs/runs/test-next-cap1.yml capacity_factor=nan
# a capacity of 0 and ragged_buffer_factor > 0 plan since issue 35 (62_moe_drop.sh); so do
# the receive buffers over a context axis (the experts replicated over context,
# 71_expert_context.sh), in rounds too: a round's bound counts the expert axis' experts
check "configgen: expert_dispatch=rounds with the experts replicated over context: rounds below a leaf's rows name the key and the bound" \
  expect_fail "expert_dispatch=rounds (command line): rounds of expert_chunk_rows=15 (command line) rows: a leaf (8 tokens) can bring 16 rows to one host (tokens x min(k 2, experts per rank 2))" \
  build/configgen/configgen -o $B/gen configgen/configs/runs/test-next-tiny.yml ragged_buffer_factor=2.0 expert_dispatch=rounds \
  num_ranks=4 ici_fsdp_parallelism=1 ici_context_parallelism=2 ici_expert_parallelism=2 expert_chunk_rows=15
check "configgen: a run file that is /dev/zero is refused at once, not read forever" \
  expect_fail "/dev/zero: is a character device, not a regular file" timeout 20 build/configgen/configgen -o $B/gen /dev/zero
check "configgen: a run file that is a directory says so" \
  expect_fail "$B: is a directory; expected a config file" build/configgen/configgen -o $B/gen $B
# pipeline parallelism (issue 36, config/pipeline.c): each rule's message names both keys,
# their values and where they were set; nothing is written
PP="build/configgen/configgen -o $B/gen configgen/configs/runs/test-next-tiny.yml num_ranks=2 ici_pipeline_parallelism=2"
check "configgen: pipeline layers that do not divide (stages x layers per stage) name both keys" \
  expect_fail "num_layers_per_pipeline_stage=3 (command line): 2 stages x 3 layers per stage = 6 do not divide the 4 pipeline layers (base_num_decoder_layers=4 (configgen/configs/models/qwen3-next-tiny.yml:5); ici_pipeline_parallelism=2 (command line))" \
  $PP num_layers_per_pipeline_stage=3
check "configgen: pipeline microbatches not a multiple of the stages name both keys" \
  expect_fail "num_pipeline_microbatches=3 (command line): 3 microbatches are not a multiple of the 2 stages (ici_pipeline_parallelism=2 (command line))" \
  $PP num_pipeline_microbatches=3
check "configgen: pipeline microbatches that do not divide the batch name both keys" \
  expect_fail "num_pipeline_microbatches=8 (command line): 8 microbatches do not divide the batch group's 4 sequences per accumulation step (per_device_batch_size x tensor x context x 2 stages; per_device_batch_size=2 (configgen/configs/runs/test-next-tiny.yml:4); ici_pipeline_parallelism=2 (command line))" \
  $PP num_pipeline_microbatches=8
check "configgen: an unknown pipeline_schedule" \
  expect_fail "pipeline_schedule=zigzag (command line): unknown schedule; expected gpipe (MaxText's, with circular repeats) or 1f1b" \
  $PP pipeline_schedule=zigzag
check "configgen: pipeline repeats inconsistent with stages x layers per stage name the keys" \
  expect_fail "num_pipeline_repeats=3 (command line): 2 stages (ici_pipeline_parallelism=2 (command line)) x 3 repeats x 1 layers per stage (num_layers_per_pipeline_stage=1 (configgen/configs/base.yml:" \
  $PP num_pipeline_repeats=3
check "configgen: a pipeline stage over the budget names the stage, its executed tables' MiB and the pipeline keys" \
  expect_fail "needs 4.0 MiB per rank, over the budget of 1.0 MiB by 3.0 MiB (pipeline stage 0 of 2, the stage whose executed stage-local tables need the most: 4.0 MiB, the in-flight slots of 3 M R = 12 boundary messages included (0.0 MiB; M = num_pipeline_microbatches=2, R = 2); the same under pipeline_schedule gpipe and 1f1b)" \
  $PP device_memory_gib=0.001
# audit24: QT_PP_TEST_ORDER, a test hook of 63_pipeline.sh read from the environment, made a
# pipeline run compute wrong gradients on purpose (lb-local, mtp-drop) without a word, and
# ignored a value it did not know; now an unknown value is refused (exit 2) and a known one
# is a note on stderr and in the run manifest
pp_test_hook() {
  local d=$QT_TMP/pphook; rm -rf $d; mkdir -p $d
  QT_PP_TEST_ORDER=Reverse timeout 60 mpiexec -n 2 build/pp-next-pp2/qtrain steps=1 data=$T > /dev/null 2> $d/err &&
    { echo "QT_PP_TEST_ORDER=Reverse accepted"; return 1; }
  grep -qF "qtrain: QT_PP_TEST_ORDER=Reverse: expected reverse, lb-local or mtp-drop (a test hook of tests/e2e/63_pipeline.sh); unset it to train" $d/err ||
    { cat $d/err; return 1; }
  QT_PP_TEST_ORDER=lb-local timeout 60 mpiexec -n 2 build/pp-next-pp2/qtrain steps=1 data=$T metrics=$d/m.jsonl > /dev/null 2> $d/err ||
    { cat $d/err; return 1; }
  [ $(grep -c "qtrain: rank 0/2: note: QT_PP_TEST_ORDER=lb-local: a test hook (docs/pipeline.md) that changes this run's bits on purpose" $d/err) -eq 1 ] ||
    { cat $d/err; return 1; }
  head -n 1 $d/m.jsonl | grep -qF "QT_PP_TEST_ORDER=lb-local (a test hook: these bits are not the plan's)" || { head -c 600 $d/m.jsonl; return 1; }
  echo "ok: an unknown value refused; lb-local noted once and in the manifest"
}
check "environment: QT_PP_TEST_ORDER (a pipeline test hook) unknown is refused, known is noted on stderr and in the manifest" pp_test_hook

# the circular pipeline plan pp-next-pp2 (2 stages, 2 repeats) started alone with dump_grads=
# is refused naming the rank count, before qtrain maps the arena or reads the data, and
# writes nothing; on its 2 ranks the same run writes the gradient file (dump_grads= on a
# circular pipeline, once refused: 63_pipeline.sh checks it against one rank's file)
pp_refused() {
  local d=$QT_TMP/pp-refused; rm -rf $d; mkdir -p $d
  local msg="plan pp-next-pp2 was generated for 2 ranks (mesh data 1 x fsdp 1 x tensor 1 x expert 1 x context 1), but this job has 1: run it with mpiexec -n 2"
  expect_fail "$msg" build/pp-next-pp2/qtrain steps=1 data=$T dump_grads=$d/dg || return 1
  [ -z "$(ls -A $d)" ] || { echo "files written:"; ls -A $d; return 1; }
  timeout 60 mpiexec -n 2 build/pp-next-pp2/qtrain steps=1 data=$T dump_grads=$d/dg.safetensors \
    > /dev/null 2> $d/err.txt || { tail -n 3 $d/err.txt; return 1; }
  grep -q '"content":"gradients"' $d/dg.safetensors || { echo "no gradient file written"; return 1; }
}
check "qtrain: a pipeline plan started alone is refused naming the rank count, nothing written; on its 2 ranks dump_grads= on the circular plan runs" pp_refused
no_output_on_error() { ! [ -e $B/gen ] || ! ls -A $B/gen | grep -q .; }
check "configgen: a failed generation writes nothing" no_output_on_error

# ---- qtrain-data (the tokenizer tool): bad text, JSON lines, token files, tokenizers, keys
QD=build/tools/qtrain-data
python3 tests/tokenizer/tiny_tokenizer.py $B/tiny.json
python3 tests/tokenizer/tiny_tokenizer.py $B/other.json '\s+'
printf 'ok\nline 2 \xff here\n' > $B/bad_utf8.txt
printf '{"text": "a"}\n{"body": "b"}\n' > $B/nofield.jsonl
printf '{"text": "a"}\n\n{"text": "b",}\n' > $B/badjson.jsonl
printf '{"text": "\\ud800 x"}\n' > $B/surrogate.jsonl
printf 'QTTOKENS\x01\x00\x00\x00\x04\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x3f\x42\x0f\x00' > $B/bigid.tok
printf 'QTTOKENS\x01\x00\x00\x00\x04\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00' > $B/trunc4.tok
check "qtrain-data: invalid UTF-8 names file, line and byte offset" expect_fail "$B/bad_utf8.txt: line 2, byte offset 10: invalid UTF-8 (byte 0xFF)" $QD encode tokenizer=$B/tiny.json out=$B/o.tok $B/bad_utf8.txt
check "qtrain-data: a JSON line without the field names file and line" expect_fail "$B/nofield.jsonl:2: no member of that name; expected an object with a string member \"text\"" $QD encode tokenizer=$B/tiny.json out=$B/o.tok $B/nofield.jsonl
check "qtrain-data: a JSON line that is not JSON names file and line" expect_fail "$B/badjson.jsonl:3: not valid JSON" $QD encode tokenizer=$B/tiny.json out=$B/o.tok $B/badjson.jsonl
check "qtrain-data: a lone surrogate escape is refused" expect_fail "$B/surrogate.jsonl:1: not valid JSON (high surrogate escape not followed by a low surrogate escape" $QD encode tokenizer=$B/tiny.json out=$B/o.tok $B/surrogate.jsonl
check "qtrain-data: decode of an id beyond the vocabulary names it" expect_fail "$B/bigid.tok: token 0 is id 999999, not in the vocabulary of the tokenizer (258 ids)" $QD decode tokenizer=$B/tiny.json in=$B/bigid.tok
check "qtrain-data: a truncated token file" expect_fail "$B/trunc4.tok: truncated or padded token file: the header says 64 tokens (280 bytes), the file has 28 bytes" $QD info in=$B/trunc4.tok
check "qtrain-data: an unreadable tokenizer file" expect_fail "$B/none.json: cannot read the tokenizer file" $QD encode tokenizer=$B/none.json out=$B/o.tok -
# audit22: a tokenizer.json saved with a byte-order mark said "expected a JSON value at byte 0"
{ printf '\357\273\277'; cat $B/tiny.json; } > $B/bomtok.json
check "qtrain-data: a tokenizer.json with a byte-order mark is named as such" expect_fail "$B/bomtok.json: not valid JSON: it starts with a UTF-8 byte-order mark (EF BB BF)" $QD encode tokenizer=$B/bomtok.json out=$B/o.tok -
check "qtrain-data: an unknown key" expect_fail "encode: unknown key 'tokenizr' in 'tokenizr=x'; expected one of tokenizer= out= field= eos= overwrite=" $QD encode tokenizr=x out=$B/o.tok -
check "qtrain-data: a tokenizer.json with another Split pattern" expect_fail "$B/other.json: pre_tokenizer Split pattern \"\\s+\" is not a Qwen2/Qwen3/Qwen3.5 pattern" $QD encode tokenizer=$B/other.json out=$B/o.tok -
# an error after documents were written leaves neither the target nor a temporary file
qd_nothing_left() {
  local d=$QT_TMP/qd; rm -rf $d; mkdir -p $d
  printf 'fine text\n' > $d/good.txt
  $QD encode tokenizer=$B/tiny.json out=$d/out.tok $d/good.txt $B/bad_utf8.txt > /dev/null 2> $d/err.txt && { echo "accepted"; return 1; }
  [ -z "$(ls -A $d | grep -v -e err.txt -e good.txt)" ] || { echo "left:"; ls -A $d; return 1; }
  $QD encode tokenizer=$B/tiny.json out=$d/out.tok $d/good.txt > /dev/null || return 1
  [ "$(ls -A $d | grep -c tmp)" = 0 ] && $QD info in=$d/out.tok eos=257
}
check "qtrain-data: a failed encode leaves no output (neither target nor temporary)" qd_nothing_left
# A document that is one long pre-tokenizer piece (session 24): byte-level BPE merges a piece
# whole, as Hugging Face does, about 20 bytes of memory a byte (a 50 MB one-letter line took
# 1.1 GB). A piece of 16 MiB or more is reported with its size and memory; a 1 MiB one is
# not; out of memory (ulimit -v) names the piece and its need, exit 1, nothing left.
qd_long_piece() {
  local d=$QT_TMP/qdlong; rm -rf $d; mkdir -p $d
  head -c 16777216 /dev/zero | tr '\0' a > $d/long.txt
  head -c 1048576 /dev/zero | tr '\0' a > $d/short.txt
  $QD encode tokenizer=$B/tiny.json out=$d/l.tok $d/short.txt $d/long.txt > /dev/null 2> $d/err.txt || { cat $d/err.txt; return 1; }
  grep -F "qtrain-data: note: $d/long.txt: document 2 holds a pre-tokenizer piece of 16777216 bytes" $d/err.txt || { cat $d/err.txt; return 1; }
  grep -q "short.txt: document" $d/err.txt && { echo "a 1 MiB piece was reported"; return 1; }
  (ulimit -v 250000; exec $QD encode tokenizer=$B/tiny.json out=$d/m.tok $d/long.txt) > /dev/null 2> $d/oom.txt && { echo "accepted under ulimit -v"; return 1; }
  grep -F "qtrain-data: out of memory for a pre-tokenizer piece of 16777216 bytes: byte-level BPE merges a piece whole" $d/oom.txt || { cat $d/oom.txt; return 1; }
  [ -z "$(ls -A $d | grep '^m\.tok')" ] || { echo "left:"; ls -A $d; return 1; }
}
check "qtrain-data: a 16 MiB one-word document is reported with the memory its BPE takes; out of memory names the piece" qd_long_piece

# audit22: under `ulimit -f` SIGXFSZ ended qtrain-data with no message (exit 153) and left its
# half-written temporary (.out.tok.tmp.XXXXXX, a name no later run removes) beside out=; the
# write now fails with a message naming the limit, exit 1, nothing left. 16 KiB of 4-byte ids
# from 40 kB of text (the tiny tokenizer: bytes, a few merges).
qd_fsize() {
  local d=$QT_TMP/qdfs; rm -rf $d; mkdir -p $d
  head -c 40000 README.md > $d/in.txt
  (ulimit -f 16; exec $QD encode tokenizer=$B/tiny.json out=$d/out.tok $d/in.txt) > /dev/null 2> $d/err.txt
  local rc=$?
  cat $d/err.txt
  [ $rc = 1 ] && grep -q "out.tok: write failed: the file-size limit RLIMIT_FSIZE (ulimit -f) is 16384 bytes" $d/err.txt || { echo "exit $rc"; return 1; }
  [ "$(ls -A $d)" = "$(printf 'err.txt\nin.txt')" ] || { echo "left:"; ls -A $d; return 1; }
}
check "qtrain-data: a write past ulimit -f is an error naming the limit and leaves no temporary" qd_fsize

# out= (issue 30): an existing file is replaced only with overwrite=1; a directory, a device,
# an input (also through a symbolic link) or the tokenizer never; a missing directory is
# refused before anything is read. Every refusal leaves the file byte for byte and no
# temporary file.
qd_out_refused() {
  local d=$QT_TMP/qdout; rm -rf $d; mkdir -p $d/adir
  printf 'my GPL text\n' > $d/gpl.txt; cp $d/gpl.txt $d/gpl.copy
  printf 'old tokens' > $d/old.tok; cp $d/old.tok $d/old.copy
  ln -s gpl.txt $d/link.tok
  expect_fail "out=$d/gpl.txt is the same file as the input $d/gpl.txt (same device and inode); writing it would destroy the input, even with overwrite=1" $QD encode tokenizer=$B/tiny.json out=$d/gpl.txt $d/gpl.txt || return 1
  expect_fail "out=$d/gpl.txt is the same file as the input" $QD encode tokenizer=$B/tiny.json out=$d/gpl.txt overwrite=1 $d/gpl.txt || return 1
  expect_fail "out=$d/link.tok is the same file as the input $d/gpl.txt" $QD encode tokenizer=$B/tiny.json out=$d/link.tok overwrite=1 $d/gpl.txt || return 1
  expect_fail "out=$d/old.tok exists; give overwrite=1 to replace it, or another path" $QD encode tokenizer=$B/tiny.json out=$d/old.tok $d/gpl.txt || return 1
  expect_fail "out=$d/adir exists and is a directory" $QD encode tokenizer=$B/tiny.json out=$d/adir overwrite=1 $d/gpl.txt || return 1
  expect_fail "out=/dev/null exists and is a character device" $QD encode tokenizer=$B/tiny.json out=/dev/null overwrite=1 $d/gpl.txt || return 1
  expect_fail "out=$d/nodir/o.tok: the directory $d/nodir does not exist" $QD encode tokenizer=$B/none.json out=$d/nodir/o.tok $d/gpl.txt || return 1
  expect_fail "is the same file as the tokenizer" $QD encode tokenizer=$d/gpl.txt out=$d/gpl.txt overwrite=1 $d/old.copy || return 1
  cmp $d/gpl.txt $d/gpl.copy && cmp $d/old.tok $d/old.copy && [ -L $d/link.tok ] || return 1
  [ -z "$( (ls -A $d; ls -A $d/adir) | grep tmp)" ] || { echo "left:"; ls -A $d; return 1; }
  $QD encode tokenizer=$B/tiny.json out=$d/old.tok overwrite=1 $d/gpl.txt && $QD info in=$d/old.tok eos=257
}
check "qtrain-data: out= existing needs overwrite=1; an input, directory, device or missing directory is refused, the file unchanged" qd_out_refused

# -- ends the keys: an INPUT with '=' in its name (make run TEXT= passes its file after --)
qd_double_dash() {
  local d=$QT_TMP/qddash; rm -rf $d; mkdir -p $d/dir; printf 'abab' > $d/dir/v=1.txt
  expect_fail "unknown key '$d/dir/v' in '$d/dir/v=1.txt' (expected one of tokenizer= out= field= eos= overwrite=); if '$d/dir/v=1.txt' is a file, put it after --" $QD encode tokenizer=$B/tiny.json out=$d/o.tok $d/dir/v=1.txt || return 1
  $QD encode tokenizer=$B/tiny.json out=$d/o.tok -- $d/dir/v=1.txt && $QD info in=$d/o.tok eos=257 | grep -F "3 tokens of 4 bytes"
}
check "qtrain-data: -- ends the keys; a file name with '=' before it is told to go after --" qd_double_dash

# .ndjson is JSON lines; field= on a plain-text input is refused; a text that looks like JSON
# lines is read as one document with a note; a byte-order mark at the start of a JSON line is
# refused naming it; an output of no documents or fewer than 2 tokens is refused, nothing left
qd_inputs() {
  local d=$QT_TMP/qdin; rm -rf $d; mkdir -p $d
  printf '{"body": "ab"}\n{"body": "a"}\n' > $d/a.ndjson; printf '{"text": "ab"}\n' > $d/b.txt
  printf '\xef\xbb\xbf{"text": "ab"}\n' > $d/bom.jsonl; printf '\n  \n' > $d/blank.jsonl; : > $d/empty.txt
  $QD encode tokenizer=$B/tiny.json out=$d/a.tok field=body $d/a.ndjson > $d/out.txt || return 1
  grep -F "2 documents, 3 bytes, 4 tokens (eos 257)" $d/out.txt || { cat $d/out.txt; return 1; }
  expect_fail "field=text applies to JSON-lines inputs (.jsonl, .ndjson, .json); $d/b.txt is read as plain text (one document)" $QD encode tokenizer=$B/tiny.json out=$d/o.tok field=text $d/b.txt || return 1
  $QD encode tokenizer=$B/tiny.json out=$d/b.tok eos=none $d/b.txt > $d/out.txt 2> $d/err.txt || return 1
  grep -F "note: $d/b.txt starts with '{' but is read as plain text (one document)" $d/err.txt && grep -F "1 document, 15 bytes, 14 tokens (eos none)" $d/out.txt || { cat $d/out.txt $d/err.txt; return 1; }
  expect_fail "$d/bom.jsonl:1: the line starts with a UTF-8 byte-order mark (EF BB BF); save the file without it" $QD encode tokenizer=$B/tiny.json out=$d/o.tok $d/bom.jsonl || return 1
  expect_fail "encode: no documents in $d/blank.jsonl" $QD encode tokenizer=$B/tiny.json out=$d/o.tok $d/blank.jsonl || return 1
  expect_fail "encode: 0 tokens from $d/empty.txt $d/blank.jsonl (1 document, eos=none); a token file needs at least 2 tokens" $QD encode tokenizer=$B/tiny.json out=$d/o.tok eos=none $d/empty.txt $d/blank.jsonl || return 1
  expect_fail "encode: 1 token from $d/empty.txt (1 document, eos=auto)" $QD encode tokenizer=$B/tiny.json out=$d/o.tok $d/empty.txt || return 1
  [ -z "$(ls -A $d | grep -e tmp -e o.tok)" ] || { echo "left:"; ls -A $d; return 1; }
}
check "qtrain-data: .ndjson, field= on plain text, a BOM in JSON lines, empty outputs" qd_inputs

# ---- FIFOs where a file is read: opening one for reading waits for a writer, so
# data=, eval_data=, load= (a file, an index), tokenizer= and qtrain-data's tokenizer=, in=
# and INPUT hung forever. Each is refused at once (well within the 20 s bound), naming it.
fifo_inputs() {
  local d=$QT_TMP/fifo; rm -rf $d; mkdir -p $d/ck && mkfifo $d/f $d/f.safetensors $d/ck/model.safetensors.index.json && echo text > $d/in.txt || return 1
  local QE=build/eval-next-1r/qtrain QD=build/tools/qtrain-data
  expect_fail "$d/f: is not a regular file" timeout 20 $Q steps=1 data=$d/f || return 1
  expect_fail "$d/f: is not a regular file" timeout 20 $QE steps=1 data=$T eval_data=$d/f || return 1
  expect_fail "$d/f.safetensors: is not a regular file" timeout 20 $Q steps=1 data=$T load=$d/f.safetensors || return 1
  expect_fail "$d/ck/model.safetensors.index.json: not a regular file" timeout 20 $Q steps=1 data=$T load=$d/ck || return 1
  expect_fail "tokenizer=: the tokenizer file $d/f is not a regular file" timeout 20 $Q steps=1 data=$T save=$d/out tokenizer=$d/f || return 1
  [ ! -e $d/out ] || return 1
  expect_fail "$d/f: cannot read the tokenizer file" timeout 20 $QD encode tokenizer=$d/f out=$d/o.tok $d/in.txt || return 1
  expect_fail "$d/f: cannot read the token file: not a regular file" timeout 20 $QD info in=$d/f || return 1
  expect_fail "$d/f: cannot read the input: not a regular file" timeout 20 $QD encode tokenizer=$B/tiny.json out=$d/o.tok $d/f || return 1
  [ ! -e $d/o.tok ] || return 1
}
check "FIFOs as data=, eval_data=, load=, tokenizer= and qtrain-data's inputs are refused at once, naming them" fifo_inputs

# ---- a metrics file on a full disk keeps whole lines: a write that fails part-way (the
# disk filled inside the run manifest, or inside a step's line) used to leave half a line,
# which every later resume of that file refuses ("the last line is incomplete"), so
# truncate_metrics=1 could not recover it. The line is cut off again: the file ends with
# its last whole line, as a killed run's does. Needs
# a small file system: a 64 KiB tmpfs (mount as root), else skipped with the reason.
metrics_full_disk() {
  local d=$QT_TMP/fulldisk; mkdir -p $d
  if ! mount -t tmpfs -o size=64k tmpfs $d 2> /dev/null; then echo "skipped: cannot mount a tmpfs here (not root?)"; return 0; fi
  local rc=0 n
  for n in 61200 57000 53000; do   # 1, 2, 3 free 4 KiB pages: full in the manifest, in step lines
    rm -f $d/*; head -c $n /dev/zero > $d/fill 2> /dev/null
    timeout 60 $Q steps=50 data=$T metrics=$d/m.jsonl > /dev/null 2> $QT_TMP/full.err && { echo "fill $n: the run did not fail"; rc=1; break; }
    grep -q "writing the metrics file $d/m.jsonl failed" $QT_TMP/full.err || { cat $QT_TMP/full.err; rc=1; break; }
    if [ -s $d/m.jsonl ] && [ "$(tail -c 1 $d/m.jsonl | od -An -c | tr -d ' ')" != '\n' ]; then
      echo "fill $n: the metrics file ends inside a line ($(wc -c < $d/m.jsonl) bytes)"; rc=1; break
    fi
    echo "fill $n: $(wc -l < $d/m.jsonl) whole line(s) kept"
  done
  umount $d
  return $rc
}
check "metrics: a full disk leaves the metrics file with whole lines only" metrics_full_disk

# configgen started outside the project with a run file of its own: base.yml is looked for
# beside the run file, then in ./configgen/configs; the message used to be only
# "configgen/configs/base.yml: cannot open", now it says where it looked and what to do
cg_outside() {
  local d=$QT_TMP/cgout; rm -rf $d; mkdir -p $d
  printf 'model_name: "qwen3-next-tiny"\nsteps: 3\n' > $d/mine.yml
  (cd $d && "$QT_ROOT/build/configgen/configgen" -o $d/gen mine.yml) > /dev/null 2> $d/err && { echo "accepted"; return 1; }
  grep -F "configgen/configs/base.yml: not found: configgen takes base.yml (and models/) from beside the run file mine.yml" $d/err &&
    grep -qF "run configgen from the project root, or put the run file in configgen/configs/runs/" $d/err || { cat $d/err; return 1; }
  [ ! -e $d/gen ] || return 1
}
check "configgen: started outside the project, base.yml missing is said with where it was looked for and what to do" cg_outside

# audit24: -o naming a file said "FILE/test-next-tiny: cannot read: Not a directory"; it
# now names -o and what -o takes, and the file is untouched
cg_o_file() {
  local d=$QT_TMP/cgofile; rm -rf $d; mkdir -p $d; printf 'mine\n' > $d/afile
  expect_fail "configgen: -o $d/afile: not a directory (a file is in the way); expected -o to name a directory (created if missing), in which configgen writes test-next-tiny/" \
    build/configgen/configgen -o $d/afile configgen/configs/runs/test-next-tiny.yml || return 1
  [ "$(cat $d/afile)" = mine ] && [ "$(ls -A $d)" = afile ]
}
check "configgen: -o naming a file says so, the file untouched" cg_o_file

# audit22: under `ulimit -f` SIGXFSZ ended configgen (exit 153, no message) and left
# OUTDIR/.<run>.tmp.<pid>/ with a cut plan.c; now the write fails naming the limit, exit 1,
# and nothing is left in OUTDIR. Session 24: nor OUTDIR itself, or its parents, when this
# run created them (-o a/b: neither a nor b is left); an OUTDIR that existed stays, with
# its files.
cg_fsize() {
  local o=$QT_TMP/cgfs; rm -rf $o
  (ulimit -f 8; exec build/configgen/configgen -o $o/a/b configgen/configs/runs/test-next-tiny.yml) 2> $QT_TMP/cgfs.err; local rc=$?
  cat $QT_TMP/cgfs.err
  [ $rc = 1 ] && grep -qF "$o/a/b/test-next-tiny/plan.c: write failed: File too large (the file-size limit, ulimit -f; nothing was written)" $QT_TMP/cgfs.err || { echo "exit $rc"; return 1; }
  [ ! -e $o ] || { echo "left:"; find $o; return 1; }
  mkdir -p $o/mine && echo keep > $o/mine/notes.txt
  (ulimit -f 8; exec build/configgen/configgen -o $o/mine configgen/configs/runs/test-next-tiny.yml) 2> /dev/null && { echo "accepted"; return 1; }
  [ "$(cd $o && find . | sort | tr '\n' ' ')" = ". ./mine ./mine/notes.txt " ] || { echo "the existing -o changed:"; find $o; return 1; }
}
check "configgen: a write past ulimit -f is an error naming the limit, nothing left: no output directory it created" cg_fsize

# configgen on a full disk (a 16 KiB tmpfs, when this runs as root and may mount one): the
# error names the file and ENOSPC, and the -o directory configgen created is removed.
cg_full_disk() {
  local m=$QT_TMP/cgfull rc
  mkdir -p $m
  if ! mount -t tmpfs -o size=16k tmpfs $m 2> /dev/null; then
    echo "cannot mount a tmpfs (not root?): the ulimit -f case covers the removal"; return 0
  fi
  build/configgen/configgen -o $m/out configgen/configs/runs/test-next-tiny.yml 2> $QT_TMP/cgfull.err; rc=$?
  local left; left=$(ls -A $m)
  umount $m
  cat $QT_TMP/cgfull.err
  [ $rc = 1 ] && grep -qF "$m/out/test-next-tiny/" $QT_TMP/cgfull.err && grep -qF "No space left on device" $QT_TMP/cgfull.err || { echo "exit $rc"; return 1; }
  [ -z "$left" ] || { echo "left on the full disk: $left"; return 1; }
}
check "configgen: a full disk (16 KiB tmpfs) is an error naming the file, and the -o directory it created is removed" cg_full_disk

# qtrain-data's numbers: from=, count= and info's eos= past 2^64 were taken as 2^64-1 (the
# message then named another value than the one given, and info counted documents at an
# id no token file holds); info's eos= must be an id a token file can hold (below 2^32)
qd_numbers() {
  local d=$QT_TMP/qdnum; rm -rf $d; mkdir -p $d && printf 'abab' > $d/a.txt || return 1
  $QD encode tokenizer=$B/tiny.json out=$d/a.tok $d/a.txt > /dev/null || return 1
  expect_fail "from=99999999999999999999: expected a non-negative integer below 2^64" $QD decode tokenizer=$B/tiny.json in=$d/a.tok from=99999999999999999999 || return 1
  expect_fail "count=18446744073709551616: expected a non-negative integer below 2^64" $QD decode tokenizer=$B/tiny.json in=$d/a.tok count=18446744073709551616 || return 1
  expect_fail "eos=4294967296: expected a token id below 2^32" $QD info in=$d/a.tok eos=4294967296 || return 1
  $QD info in=$d/a.tok eos=4294967295 > /dev/null || return 1
}
check "qtrain-data: from=, count= past 2^64 and info eos= past 2^32 are refused, naming the value given" qd_numbers

# ---- the table of bad inputs (docs/bad_inputs.md) is what the binaries print today
bad_inputs_table_true() {
  # regenerated from the real outputs and compared row by row; the address-space figures of
  # the two ulimit rows (what is already mapped, hence the KiB to raise ulimit -v to)
  # depend on the binary's size, so they are masked on both sides
  tests/scripts/bad_inputs_table.sh $QT_TMP/bad_inputs.md || return 1
  local mask='s/[0-9.]* MiB is already mapped; raise ulimit -v to at least [0-9]*/N MiB is already mapped; raise ulimit -v to at least N/'
  diff <(sed "$mask" docs/bad_inputs.md) <(sed "$mask" $QT_TMP/bad_inputs.md) \
    || { echo "docs/bad_inputs.md is stale: rerun tests/scripts/bad_inputs_table.sh"; return 1; }
  echo "ok: $(grep -c '^| [0-9]' docs/bad_inputs.md) rows as printed"
}
check "bad inputs: docs/bad_inputs.md matches what qtrain and configgen print for every row" bad_inputs_table_true
