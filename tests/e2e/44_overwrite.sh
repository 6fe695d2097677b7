# 44_overwrite.sh - the output-overwrite rule (issue 30): qtrain never writes over, or
# removes, a file it did not create unless overwrite=1 (sourced by run_all.sh). For each path
# qtrain writes (docs/cli.md, "What qtrain writes, and when it refuses"), a file of the
# user's ("keep me") at that path makes the run stop before training with a message naming
# it, exit non-zero, and the file stays byte for byte; a file qtrain wrote there before is
# replaced as usual. (config.json and the tokenizer files of a save= directory:
# 43_hf_config.sh; qtrain-audit plot -o: 85_audit.sh.)
Q=build/test-next-tiny/qtrain
T=tests/golden/e2e/test-next-tiny/tokens.npy
OW=$QT_TMP/ow; rm -rf $OW; mkdir -p $OW

# keep_refused FILE SUBSTRING ARGS...: FILE holds "keep me"; qtrain ARGS must fail before
# step 1 printing SUBSTRING, and FILE must be unchanged
keep_refused() {
  local f=$1 sub=$2; shift 2
  printf 'keep me\n' > $f
  $Q data=$T steps=1 "$@" > /dev/null 2> $OW/err && { echo "accepted: $*"; return 1; }
  grep -qF -- "$sub" $OW/err || { echo "message lacks \"$sub\":"; cat $OW/err; return 1; }
  grep -q "^step " $OW/err && { echo "trained"; return 1; }
  [ "$(cat $f)" = "keep me" ] || { echo "$f changed"; return 1; }
  echo "ok: $(tail -n 1 $OW/err)"
}

ow_save_file() {
  keep_refused $OW/ck.safetensors "save=$OW/ck.safetensors exists and is not a qtrain checkpoint" save=$OW/ck.safetensors || return 1
  rm -f $OW/ck.safetensors
  $Q data=$T steps=1 save=$OW/ck.safetensors 2> $OW/err && $Q data=$T steps=2 save=$OW/ck.safetensors 2> $OW/err \
    || { tail -n 2 $OW/err; return 1; }
  echo "a qtrain checkpoint at the path is replaced"
}
check "overwrite: save=FILE.safetensors: a file of the user's is kept (refused); a qtrain checkpoint is replaced" ow_save_file

# audit22: a qtrain checkpoint file of another model (test-35-tiny's) at save= was replaced
# by this run's without a word (a directory has its config.json check; a file had nothing).
# Refused now unless overwrite=1, naming its run, the file byte for byte; the same model's
# file from another plan (mesh-next-dp2 saving over test-next-tiny's) is still replaced.
ow_save_other_model() {
  local f=$OW/other.safetensors
  rm -f $f && build/test-35-tiny/qtrain data=tests/golden/e2e/test-35-tiny/tokens.npy steps=1 save=$f 2> $OW/err &&
    cp $f $OW/other.orig || { tail -n 2 $OW/err; return 1; }
  $Q data=$T steps=1 save=$f > /dev/null 2> $OW/err && { echo "replaced"; return 1; }
  grep -F "save=$f is a qtrain checkpoint of another model (run test-35-tiny; $f: missing tensor" $OW/err || { cat $OW/err; return 1; }
  grep -q "^step " $OW/err && { echo "trained"; return 1; }
  cmp $f $OW/other.orig || { echo "changed"; return 1; }
  $Q data=$T steps=1 save=$f overwrite=1 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  timeout 120 mpiexec -n 2 build/mesh-next-dp2/qtrain data=$T steps=1 save=$f > /dev/null 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  echo "refused, replaced with overwrite=1, and by the same model's mesh plan"
}
check "overwrite: save=FILE.safetensors holding a qtrain checkpoint of another model is refused (kept) unless overwrite=1" ow_save_other_model

ow_save_dir() {
  mkdir -p $OW/d1
  keep_refused $OW/d1/model-00001-of-00001.safetensors "save=$OW/d1 holds checkpoint files but no qtrain checkpoint" save=$OW/d1 || return 1
  rm -rf $OW/d2; mkdir -p $OW/d2; printf 'keep me\n' > $OW/d2/notes.txt
  $Q data=$T steps=1 save=$OW/d2 2> $OW/err && $Q data=$T steps=2 load=$OW/d2 save=$OW/d2 2> $OW/err \
    || { tail -n 2 $OW/err; return 1; }
  [ "$(cat $OW/d2/notes.txt)" = "keep me" ] || return 1
  echo "the user's notes.txt survives two saves into the directory"
}
check "overwrite: save=DIR: foreign checkpoint-named files refused (kept); the user's other files survive every save" ow_save_dir

ow_lock() {
  rm -rf $OW/lk
  keep_refused $OW/lk.lock "save=$OW/lk: $OW/lk.lock exists and is not a qtrain lock file" save=$OW/lk || return 1
  [ -e $OW/lk ] && { echo "the save directory was created"; return 1; }
  $Q data=$T steps=1 save=$OW/lk overwrite=1 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  [ -e $OW/lk.lock ] && { echo "overwrite=1: the lock was not removed at exit"; return 1; }
  echo "overwrite=1 takes the path over (and removes the lock at exit)"
}
check "overwrite: save=PATH's lock PATH.lock: a file of the user's there is kept (refused) unless overwrite=1" ow_lock

ow_dump_grads() {
  cp tests/golden/e2e/test-next-tiny/init.safetensors $OW/g.safetensors
  $Q data=$T steps=1 dump_grads=$OW/g.safetensors 2> $OW/err && { echo "accepted: weights replaced"; return 1; }
  grep -F "dump_grads=$OW/g.safetensors exists and is not a qtrain gradient dump" $OW/err || { cat $OW/err; return 1; }
  cmp $OW/g.safetensors tests/golden/e2e/test-next-tiny/init.safetensors || return 1
  keep_refused $OW/g.txt "dump_grads=$OW/g.txt exists and is not a safetensors file" dump_grads=$OW/g.txt || return 1
  rm -f $OW/g2.safetensors
  $Q data=$T steps=1 dump_grads=$OW/g2.safetensors 2> $OW/err && $Q data=$T steps=1 seed=5 dump_grads=$OW/g2.safetensors 2> $OW/err \
    || { tail -n 2 $OW/err; return 1; }
  echo "a safetensors file of weights is kept; a gradient dump is replaced"
}
check "overwrite: dump_grads=: a safetensors file that is not a gradient dump (weights) is kept (refused); a dump is replaced" ow_dump_grads

ow_metrics() {
  keep_refused $OW/m.jsonl "metrics=$OW/m.jsonl: give overwrite=1 to replace the file" metrics=$OW/m.jsonl || return 1
  $Q data=$T steps=1 metrics=$OW/m.jsonl overwrite=1 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  head -c 24 $OW/m.jsonl | grep -q '^{"manifest":"qtrain-1",' || return 1
  echo "overwrite=1 replaces it"
}
check "overwrite: metrics=: a file of the user's is kept (refused) unless overwrite=1" ow_metrics

# A save=/dump_grads= path that is a symbolic link: a save renames its temporary over the
# path (a file) or swaps a new directory in for it and deletes the old one (a directory),
# so it would replace the link itself and empty the directory it points to (the files of
# the user's moved into a new directory at the link's place; across file systems the save
# failed after training). Refused before training, overwrite=1 or not, naming where it
# points; the link and its target stay as they were.
ow_symlink() {
  rm -rf $OW/sl*; mkdir -p $OW/sl_target; printf 'keep me\n' > $OW/sl_target/notes.txt
  ln -s sl_target $OW/sl_dir
  $Q data=$T steps=1 save=$OW/sl_real.safetensors 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  ln -s sl_real.safetensors $OW/sl_file.safetensors; ln -s sl_real.safetensors $OW/sl_g.safetensors
  ln -s sl_missing $OW/sl_dangling
  cp $OW/sl_real.safetensors $OW/sl_copy
  local args
  for args in "save=$OW/sl_dir" "save=$OW/sl_dir overwrite=1" "save=$OW/sl_file.safetensors" \
              "dump_grads=$OW/sl_g.safetensors overwrite=1" "save=$OW/sl_dangling"; do
    # shellcheck disable=SC2086
    $Q data=$T steps=1 $args > /dev/null 2> $OW/err && { echo "accepted: $args"; return 1; }
    grep -q "is a symbolic link" $OW/err || { echo "$args:"; cat $OW/err; return 1; }
    grep -q "^step " $OW/err && { echo "trained: $args"; return 1; }
  done
  [ -L $OW/sl_dir ] && [ -L $OW/sl_file.safetensors ] && [ -L $OW/sl_g.safetensors ] && [ -L $OW/sl_dangling ] \
    || { echo "a link was replaced"; ls -la $OW; return 1; }
  [ "$(ls $OW/sl_target)" = notes.txt ] && [ "$(cat $OW/sl_target/notes.txt)" = "keep me" ] || { echo "the target changed"; return 1; }
  cmp $OW/sl_real.safetensors $OW/sl_copy || return 1
  [ ! -e $OW/sl_missing ] || return 1
  echo "ok: $(tail -n 1 $OW/err)"
}
check "overwrite: a save=/dump_grads= path that is a symbolic link is refused (the link and what it points to kept)" ow_symlink

# metrics= naming one of the run's inputs or outputs: with overwrite=1 the metrics file
# replaced the training data (a tab-completed metrics=train.tok overwrite=1), and without
# it the message ("the last line is incomplete ... give overwrite=1") suggested just that.
# The data, eval data, loaded checkpoint, tokenizer and the save=/dump_grads= files are
# refused as metrics= even with overwrite=1, naming the other key; each file is unchanged.
ow_metrics_clash() {
  local d=$OW/mc a; rm -rf $d; mkdir -p $d
  cp $T $d/t.npy && cp $T $d/t2.npy && printf '{}\n' > $d/tok.json || return 1
  $Q data=$T steps=1 save=$d/ck.safetensors 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  (cd $d && sha256sum t.npy t2.npy tok.json ck.safetensors) > $OW/mc.sum
  for a in "metrics=$d/t.npy data=$d/t.npy:data=" "metrics=$d/ck.safetensors data=$T load=$d/ck.safetensors:load=" \
           "metrics=$d/tok.json data=$T save=$d/out tokenizer=$d/tok.json:tokenizer=" \
           "metrics=$d/ck.safetensors data=$T save=$d/ck.safetensors:save=" "metrics=$d/g.safetensors data=$T dump_grads=$d/g.safetensors:dump_grads="; do
    # shellcheck disable=SC2086
    $Q steps=1 overwrite=1 ${a%:*} > /dev/null 2> $OW/err && { echo "accepted: ${a%:*}"; return 1; }
    grep -q "^qtrain: metrics=.* is the file of ${a##*:}" $OW/err || { echo "${a%:*}:"; cat $OW/err; return 1; }
    grep -q "^step " $OW/err && { echo "trained: ${a%:*}"; return 1; }
  done
  (cd $d && sha256sum -c --quiet $OW/mc.sum) || { echo "a file changed"; return 1; }
  [ ! -e $d/g.safetensors ] && [ ! -e $d/out ] || { echo "written:"; ls $d; return 1; }
  echo "ok: $(tail -n 1 $OW/err)"
}
check "overwrite: metrics= naming the data, a loaded checkpoint, the tokenizer or a save=/dump_grads= file is refused even with overwrite=1" ow_metrics_clash

# audit22: the same for save= files and dump_grads=: with overwrite=1, dump_grads= naming the
# load= checkpoint replaced it with the gradients, dump_grads= or save= naming the eval data
# (or a hard link to it) or the tokenizer replaced them. Refused even with overwrite=1, the
# files unchanged; save= naming its load= file stays a resume in place.
ow_dest_clash() {
  local d=$OW/dc a QE=build/eval-next-1r/qtrain; rm -rf $d; mkdir -p $d
  cp $T $d/e.npy && ln $d/e.npy $d/e.safetensors && printf '{}\n' > $d/tok.json || return 1
  $Q data=$T steps=1 save=$d/ck.safetensors 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  (cd $d && sha256sum e.npy tok.json ck.safetensors) > $OW/dc.sum
  for a in "$Q dump_grads=$d/ck.safetensors load=$d/ck.safetensors:dump_grads=$d/ck.safetensors is the file of load=" \
           "$QE dump_grads=$d/e.npy eval_data=$d/e.npy:dump_grads=$d/e.npy is the file of eval_data=" \
           "$QE save=$d/e.safetensors eval_data=$d/e.npy:save=$d/e.safetensors is the file of eval_data=$d/e.npy (same device and inode)" \
           "$Q dump_grads=$d/tok.json save=$d/out tokenizer=$d/tok.json:dump_grads=$d/tok.json is the file of tokenizer="; do
    # shellcheck disable=SC2086
    ${a%%:*} data=$T steps=2 overwrite=1 > /dev/null 2> $OW/err && { echo "accepted: ${a%%:*}"; return 1; }
    grep -qF "qtrain: ${a#*:}" $OW/err || { echo "${a%%:*}:"; cat $OW/err; return 1; }
    grep -q "^step " $OW/err && { echo "trained: ${a%%:*}"; return 1; }
  done
  (cd $d && sha256sum -c --quiet $OW/dc.sum) || { echo "a file changed"; return 1; }
  $Q data=$T steps=2 load=$d/ck.safetensors save=$d/ck.safetensors 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  echo "ok: $(tail -n 1 $OW/err)"
}
check "overwrite: save=/dump_grads= naming the eval data, the tokenizer or (dump_grads=) the loaded checkpoint is refused even with overwrite=1" ow_dest_clash

# audit22: save=DIR of a published model's directory (model.safetensors, config.json) kept
# model.safetensors beside the new sharded checkpoint, and transformers' from_pretrained(DIR)
# takes model.safetensors before the index: the trained weights were never loaded. Refused
# unless overwrite=1, which leaves it out of the new checkpoint (the notes kept).
ow_save_single_beside() {
  local d=$OW/pubdir; rm -rf $d; mkdir -p $d
  $Q data=$T steps=1 save=$d/model.safetensors 2> $OW/err && echo "keep me" > $d/notes.txt || { tail -n 2 $OW/err; return 1; }
  (cd $d && sha256sum model.safetensors notes.txt) > $OW/pub.sum
  $Q data=$T steps=1 load=$d save=$d > /dev/null 2> $OW/err && { echo "accepted"; return 1; }
  grep -F "save=$d holds model.safetensors, which transformers' from_pretrained($d) would load instead" $OW/err || { cat $OW/err; return 1; }
  grep -q "^step " $OW/err && { echo "trained"; return 1; }
  (cd $d && sha256sum -c --quiet $OW/pub.sum) && [ "$(ls $d | wc -l)" = 2 ] || { echo "changed"; ls $d; return 1; }
  $Q data=$T steps=2 load=$d save=$d overwrite=1 2> $OW/err || { tail -n 2 $OW/err; return 1; }
  [ ! -e $d/model.safetensors ] && [ -s $d/model.safetensors.index.json ] && [ "$(cat $d/notes.txt)" = "keep me" ] || { ls $d; return 1; }
  echo "refused; with overwrite=1 model.safetensors left out, notes.txt kept"
}
check "overwrite: save=DIR holding model.safetensors (which transformers would load instead) is refused unless overwrite=1, which leaves it out" ow_save_single_beside

# audit23: save=X holds X.lock from start-up to exit and removes it then. dump_grads=X.lock
# was written and removed with the lock (the gradients lost without a word: exit 0);
# metrics=X.lock on a fresh run was refused as "not a metrics line"; with overwrite=1
# (which lets a save take over an X.lock that is not a lock file) data=X.lock was
# overwritten and removed. Every file the run reads or writes at X.lock is refused at
# start-up, even with overwrite=1, and stays byte for byte; nothing is trained.
ow_lock_clash() {
  local d=$OW/lc k; rm -rf $d; mkdir -p $d/sub
  for k in dump_grads metrics data eval_data; do
    rm -f $d/ck.lock; [ $k = data ] || [ $k = eval_data ] && cp $T $d/ck.lock
    local q=$Q dt=data=$T; [ $k = eval_data ] && q=build/eval-next-1r/qtrain; [ $k = data ] && dt=
    # shellcheck disable=SC2086
    $q $dt steps=1 save=$d/ck overwrite=1 $k=$d/ck.lock > /dev/null 2> $OW/err && { echo "$k: accepted"; return 1; }
    grep -qF "qtrain: $k=$d/ck.lock is the lock file of save=$d/ck (a job holds $d/ck.lock while it runs" $OW/err || { echo "$k:"; cat $OW/err; return 1; }
    grep -q "^step " $OW/err && { echo "$k: trained"; return 1; }
    if [ $k = data ] || [ $k = eval_data ]; then cmp -s $T $d/ck.lock || { echo "$k: the file changed"; return 1; }
    else [ -e $d/ck.lock ] && { echo "$k: left $d/ck.lock"; return 1; }; fi
    [ -e $d/ck ] && { echo "$k: the save directory was created"; return 1; }
  done
  # the same file by another spelling (./), and a file save= beside it
  (cd $d && $OLDPWD/$Q data=$OLDPWD/$T steps=1 save=sub/../ck.safetensors dump_grads=./ck.safetensors.lock > /dev/null 2> $OW/err) \
    && { echo "./ spelling accepted"; return 1; }
  grep -qF "dump_grads=./ck.safetensors.lock is the lock file of save=sub/../ck.safetensors" $OW/err || { cat $OW/err; return 1; }
  # a dump beside the lock (another name) is written and kept
  rm -f $d/ck.lock
  $Q data=$T steps=1 save=$d/ck dump_grads=$d/ck.lock.g 2> $OW/err && [ -s $d/ck.lock.g ] && [ ! -e $d/ck.lock ] \
    || { tail -n 2 $OW/err; ls $d; return 1; }
  echo "ok: $(grep -c . $OW/err) lines; dump_grads=, metrics=, data=, eval_data= at the lock refused"
}
check "overwrite: a file the run reads or writes (dump_grads=, metrics=, data=, eval_data=) at save=X's lock X.lock is refused even with overwrite=1 (audit23)" ow_lock_clash
