# 62_eval.sh - held-out evaluation during training (issue 33; sourced by run_all.sh).
#
# eval-next-{1r,dp2,dp2ep2} are mesh-next-* evaluating after steps 1, 4, 7 (eval_interval 3,
# eval_start_step 1) on eval_data= (the tiny test data: 20 windows, 5 eval batches of the
# global eval batch of 4). Checked: the eval rows ({"step","eval_loss","eval_perplexity",
# "eval_tokens"}) appear after exactly those steps; the evals leave training untouched (the
# training lines equal mesh-next-1r's, bit for bit); every mesh gives the one-rank run's
# eval and training bits; eval_holdout=N trains on the windows before the held-out ones;
# target_eval_loss stops early, saves and exits 0; the refusals name what to give.
# Eval batches that are not whole training microbatches (issue 35: MaxText's global eval batch
# is int(devices x eval_per_device_batch_size), whatever the microbatch): variants
# (plan_variant) of eval-next-* with an eval batch of 3 sequences (6 batches of the 20
# windows, 288 targets) give the same eval bits on microbatches of 1 (no padding), 2 (the
# last forward's second slot padded) and 4 (one forward, its fourth slot padded), and on DP2
# with eval_per_device_batch_size 1.5 (group 1 holds one sequence and a pad) and DP2 x EP2
# with 0.75 (3 sequences over 4 groups: the last group all padding); a fraction of a sequence
# and an eval file shorter than the 3 are refused.
EVAL_DATA=tests/golden/e2e/test-next-tiny/tokens.npy

# eval_run RUN RANKS OUT ARGS...: 10 steps of build/RUN/qtrain, metrics to OUT.
eval_run() {
  local run=$1 n=$2 out=$3; shift 3
  if [ "$n" -eq 1 ]; then
    timeout 120 build/$run/qtrain data=$EVAL_DATA steps=10 seed=11 metrics=$out "$@"
  else
    timeout 120 mpiexec -n "$n" build/$run/qtrain data=$EVAL_DATA steps=10 seed=11 metrics=$out "$@"
  fi
}

eval_rows_1r() {
  local d=$QT_TMP/eval
  mkdir -p "$d"
  eval_run eval-next-1r 1 "$d/1r.jsonl" eval_data=$EVAL_DATA 2> "$d/1r.err" || return 1
  det_fields "$d/1r.jsonl" > "$d/1r.det" || return 1
  [ "$(grep -c '"eval_loss"' "$d/1r.jsonl")" -eq 3 ] || { echo "expected 3 eval rows"; return 1; }
  [ "$(grep '"eval_loss"' "$d/1r.jsonl" | grep -o '"step":[0-9]*' | tr '\n' ' ')" = '"step":1 "step":4 "step":7 ' ] ||
    { echo "eval rows not after steps 1, 4, 7"; return 1; }
  grep '"eval_loss"' "$d/1r.jsonl" | grep -q '"eval_perplexity":.*"eval_tokens":320' ||
    { echo "eval rows without perplexity / 320 eval tokens"; return 1; }
  # evaluating does not touch training: the step lines are mesh-next-1r's
  eval_run mesh-next-1r 1 "$d/plain.jsonl" 2> /dev/null || return 1
  cmp <(grep -v eval_loss "$d/1r.det") <(det_fields "$d/plain.jsonl") || { echo "training changed"; return 1; }
  grep -q 'evals (5 batches each): eval loss' "$d/1r.err" || { echo "no eval summary"; return 1; }
  build/audit/qtrain-audit runs "$d/1r.jsonl" "$d/plain.jsonl" | grep -q "bit-identical over 10 steps" || return 1
  echo "3 evals, training untouched: $(grep eval_loss "$d/1r.det" | tail -n 1)"
}

# eval_mesh RUN RANKS [REF]: RUN's eval and training bits equal REF's one-rank run (default
# eval-next-1r, run by eval_rows_1r; another REF is run here once).
eval_mesh() {
  local d=$QT_TMP/eval run=$1 n=$2 ref=${3:-1r}
  if [ "$ref" != 1r ] && [ ! -e "$d/$ref.det" ]; then
    eval_run "$ref" 1 "$d/$ref.jsonl" eval_data=$EVAL_DATA 2> "$d/$ref.err" || return 1
    det_fields "$d/$ref.jsonl" > "$d/$ref.det" || return 1
    [ "$(grep -c eval_loss "$d/$ref.det")" -eq 3 ] || { echo "$ref: expected 3 eval rows"; return 1; }
  fi
  eval_run "$run" "$n" "$d/$run.jsonl" eval_data=$EVAL_DATA 2> "$d/$run.err" || { tail -n 3 "$d/$run.err"; return 1; }
  cmp "$d/$ref.det" <(det_fields "$d/$run.jsonl") && echo "identical to one rank: $(tail -n 1 "$d/$ref.det")"
}

eval_holdout_stop() {
  local d=$QT_TMP/eval
  # eval_holdout=8: 12 training windows left of 20, eval on the last 8 (2 batches)
  eval_run eval-next-1r 1 "$d/ho.jsonl" eval_holdout=8 2> "$d/ho.err" || return 1
  grep -q '"windows":12' "$d/ho.jsonl" && grep -q '"eval_batches":2' "$d/ho.jsonl" || { echo "holdout"; return 1; }
  # target_eval_loss 4.3 (eval-next-1r-target): the eval after step 4 (4.006) reaches it:
  # the run stops there, saves at step 5, exits 0
  rm -rf "$d/stop.ckpt"
  eval_run eval-next-1r-target 1 "$d/stop.jsonl" eval_data=$EVAL_DATA save=$d/stop.ckpt 2> "$d/stop.err" ||
    { tail -n 3 "$d/stop.err"; return 1; }
  grep -q 'reached target_eval_loss 4.3: stopping early' "$d/stop.err" || { echo "no stop message"; return 1; }
  [ "$(grep -v manifest "$d/stop.jsonl" | tail -n 1 | grep -o '"step":[0-9]*')" = '"step":4' ] ||
    { echo "did not stop after step 4"; return 1; }
  [ -e "$d/stop.ckpt" ] || { echo "no checkpoint"; return 1; }
  echo "holdout: 12 training windows, 2 eval batches; early stop after step 4 with a save"
}

# eval_holdout=N and resumes: the training windows are the data's first W - N, so the data
# position and the passes depend on N; a save records it ("data_holdout", N > 0), a resume
# with the same N is bit-identical to the uninterrupted run (eval rows included: evals after
# steps 1 and 4 before the checkpoint at step 5, after 7 past it; a pass every 3 steps), and
# one with another N (eval_holdout=4, eval_data=, or a checkpoint that held out none resumed
# with eval_holdout=8) is refused naming both, writing no metrics file.
eval_holdout_resume() {
  local d=$QT_TMP/eval out q="build/eval-next-1r/qtrain data=$EVAL_DATA seed=11"
  [ -s "$d/ho.jsonl" ] || eval_run eval-next-1r 1 "$d/ho.jsonl" eval_holdout=8 2> "$d/ho.err" || return 1
  rm -rf "$d/ho5.ckpt" "$d/ho5.jsonl" "$d/ho5x.jsonl" "$d/ed5.safetensors"
  timeout 120 $q eval_holdout=8 steps=5 save=$d/ho5.ckpt metrics=$d/ho5.jsonl 2> "$d/ho5.err" &&
    timeout 120 $q eval_holdout=8 steps=10 load=$d/ho5.ckpt metrics=$d/ho5.jsonl 2>> "$d/ho5.err" ||
    { tail -n 3 "$d/ho5.err"; return 1; }
  grep -q '"data_holdout":"8"' "$d/ho5.ckpt/model.safetensors.index.json" || { echo "no data_holdout in the index"; return 1; }
  cmp <(det_fields "$d/ho.jsonl") <(det_fields "$d/ho5.jsonl") || { echo "the resume differs"; return 1; }
  out=$(timeout 120 $q eval_holdout=4 steps=10 load=$d/ho5.ckpt metrics=$d/ho5x.jsonl 2>&1) && { echo "another holdout resumed"; return 1; }
  echo "$out" | grep -q "ho5.ckpt was trained with the data's last 8 windows held out for the eval (eval_holdout=8), but this run holds out 4" ||
    { echo "$out" | tail -n 2; return 1; }
  out=$(timeout 120 $q eval_data=$EVAL_DATA steps=10 load=$d/ho5.ckpt metrics=$d/ho5x.jsonl 2>&1) && { echo "eval_data= resumed a holdout"; return 1; }
  echo "$out" | grep -q "but this run holds out 0" || { echo "$out" | tail -n 2; return 1; }
  timeout 120 $q eval_data=$EVAL_DATA steps=5 save=$d/ed5.safetensors 2> /dev/null || return 1
  out=$(timeout 120 $q eval_holdout=8 steps=10 load=$d/ed5.safetensors metrics=$d/ho5x.jsonl 2>&1) && { echo "a holdout resumed a checkpoint without one"; return 1; }
  echo "$out" | grep -q "ed5.safetensors was trained with no windows held out (no eval_holdout=), but this run holds out 8: .*give eval_data=FILE instead" || { echo "$out" | tail -n 2; return 1; }
  [ ! -e "$d/ho5x.jsonl" ] || { echo "a refused resume wrote its metrics file"; return 1; }
  echo "resume with eval_holdout=8 == uninterrupted: $(det_fields "$d/ho5.jsonl" | tail -n 1); another holdout refused"
}

# save_every= and the eval of the same step: the checkpoint at step 5 (save_every=5) is
# written after step 4's eval row (evals after steps 1, 4, 7), so a run killed once it
# exists and resumed there with truncate_metrics=1 has every training and eval row once.
# The eval is made slow (2000 windows of zeros, about 0.4 s an eval) so that a save before
# the eval (the old order) is caught: the kill then lands in step 4's eval, whose row the
# resumed run, which starts at step 5, never writes.
eval_save_order() {
  local d=$QT_TMP/eval q="build/eval-next-1r/qtrain data=$EVAL_DATA seed=11" pid i
  rm -rf "$d/so.ckpt" "$d/so.jsonl"
  # QTTOKENS version 1, 2-byte ids, 32001 zeros: 2000 windows of 17 tokens
  { printf 'QTTOKENS\001\000\000\000\002\000\000\000\001\175\000\000\000\000\000\000'
    head -c 64002 /dev/zero; } > "$d/zeros.tok"
  timeout 120 $q eval_data=$d/zeros.tok steps=10 save=$d/so.ckpt save_every=5 metrics=$d/so.jsonl 2> "$d/so.err" &
  pid=$!
  for i in $(seq 1000); do [ -e "$d/so.ckpt" ] && break; sleep 0.01; done
  pkill -KILL -P $pid 2> /dev/null; kill -KILL $pid 2> /dev/null; wait $pid 2> /dev/null   # qtrain under timeout
  [ -e "$d/so.ckpt" ] || { echo "no checkpoint at step 5"; tail -n 3 "$d/so.err"; return 1; }
  timeout 120 $q eval_data=$d/zeros.tok steps=10 load=$d/so.ckpt metrics=$d/so.jsonl truncate_metrics=1 \
    2>> "$d/so.err" || { tail -n 3 "$d/so.err"; return 1; }
  grep -q "resuming from .* at step 5" "$d/so.err" || { echo "did not resume at step 5"; return 1; }
  [ "$(det_fields "$d/so.jsonl" | grep eval_loss | cut -d' ' -f1 | tr '\n' ' ')" = '"step":1 "step":4 "step":7 ' ] ||
    { echo "eval rows: $(det_fields "$d/so.jsonl" | grep eval_loss | cut -d' ' -f1 | tr '\n' ' ') (expected steps 1, 4, 7 once each)"; return 1; }
  [ "$(det_fields "$d/so.jsonl" | grep -v eval_loss | cut -d' ' -f1 | tr -d '"step:' | tr '\n' ' ')" = '0 1 2 3 4 5 6 7 8 9 ' ] ||
    { echo "training rows not steps 0..9 once each"; return 1; }
  echo "killed after the checkpoint at step 5, resumed: eval rows after steps 1, 4, 7 once each"
}

eval_refusals() {
  local d=$QT_TMP/eval out
  out=$(build/eval-next-1r/qtrain data=$EVAL_DATA steps=1 2>&1) && return 1
  echo "$out" | grep -q 'no eval source was given: pass eval_data=FILE' || { echo "$out"; return 1; }
  out=$(build/mesh-next-1r/qtrain data=$EVAL_DATA steps=1 eval_data=$EVAL_DATA 2>&1) && return 1
  echo "$out" | grep -q 'does not evaluate (eval_interval -1)' || { echo "$out"; return 1; }
  # QTTOKENS, 40 uint16 zeros: 2 windows of 17 tokens, fewer than the eval batch of 4
  printf 'QTTOKENS\001\000\000\000\002\000\000\000\050\000\000\000\000\000\000\000' > "$d/short.tok"
  head -c 80 /dev/zero >> "$d/short.tok"
  out=$(build/eval-next-1r/qtrain data=$EVAL_DATA steps=1 eval_data=$d/short.tok 2>&1) && return 1
  echo "$out" | grep -q 'fewer than one eval batch of 4 sequences' || { echo "$out"; return 1; }
  echo "refusals: no source, no eval plan, a file shorter than one eval batch"
}

check "eval: rows after steps 1, 4, 7; training untouched" eval_rows_1r
check "eval mesh: dp2 = one rank (eval and training bits)" eval_mesh eval-next-dp2 2
check "eval mesh: dp2 x ep2 = one rank (eval and training bits)" eval_mesh eval-next-dp2ep2 4
# per-layer plans: the forward's gathers, split all-gathers (collective_overlap on) and waits
# run inside the eval; remat full; bf16 windows (configgen and qt_validate_eval refuse an
# eval forward that leaves a collective in flight or holds a gradient op)
check "eval mesh: dp2 x ep2, ZeRO-1, per-layer gathers, overlap on = one rank" \
  eval_mesh eval-next-dp2ep2-z1-gather 4
check "eval mesh: dp2 x fsdp2, per-layer gathers (overlap auto), remat full = one rank" \
  eval_mesh eval-next-dp2fsdp2-remat 4
check "eval mesh: bf16 dp2 x tp2, ZeRO-1, per-layer gathers and reduction = bf16 one rank" \
  eval_mesh eval-bf16-next-dp2tp2-z1-gather 4 eval-bf16-next-1r
# eb_det NAME RUN RANKS KEY=VALUE...: RUN.yml with the overrides, built into $EB_D/NAME/, 10
# steps on RANKS ranks with eval_data=; its det_fields lines in $EB_D/NAME.det (kept: a
# second call does nothing), with 3 eval lines of 6 batches and 288 targets each.
EB_D=$QT_TMP/eval-batch
eb_det() {
  local name=$1 run=$2 n=$3 d=$EB_D/$1; shift 3
  [ -s "$EB_D/$name.det" ] && return 0
  mkdir -p "$d"
  plan_variant "$run" "$d" "$@" || return 1
  local cmd="$d/$run-v/qtrain data=$EVAL_DATA eval_data=$EVAL_DATA seed=11 steps=10 metrics=$EB_D/$name.jsonl"
  if [ "$n" -eq 1 ]; then timeout 120 $cmd 2> "$EB_D/$name.err"
  else timeout 120 mpiexec -n "$n" $cmd 2> "$EB_D/$name.err"; fi || { tail -n 3 "$EB_D/$name.err"; return 1; }
  [ "$(grep '"eval_loss"' "$EB_D/$name.jsonl" | grep -c '"eval_tokens":288,.*"eval_batches":6,')" -eq 3 ] ||
    { echo "$name: expected 3 eval rows of 288 targets in 6 batches"; return 1; }
  det_fields "$EB_D/$name.jsonl" > "$EB_D/$name.det"
}

# eval batch 3 on microbatches of 1 (b1: unpadded, the reference), 2 and 4 (padded)
eval_batch_pad() {
  eb_det b1 eval-next-1r 1 per_device_batch_size=1 gradient_accumulation_steps=4 eval_per_device_batch_size=3 &&
    eb_det b2 eval-next-1r 1 per_device_batch_size=2 gradient_accumulation_steps=2 eval_per_device_batch_size=3 &&
    eb_det b4 eval-next-1r 1 eval_per_device_batch_size=3 || return 1
  grep -q 'of 3 sequences per sequence group (2 forwards of the microbatch each; the last forward.s 1 slot past them padded' \
    "$EB_D/b2/eval-next-1r-v/plan/eval-next-1r/plan.txt" || { echo "b2: no padding in the plan report"; return 1; }
  cmp "$EB_D/b1.det" "$EB_D/b2.det" && cmp "$EB_D/b1.det" "$EB_D/b4.det" || return 1
  echo "microbatches of 1, 2 (1 padded) and 4 (1 padded): $(grep eval_loss "$EB_D/b1.det" | tail -n 1)"
}

# eb_mesh NAME RUN RANKS KEY=VALUE...: the variant on RANKS ranks == b1, eval and training bits
eb_mesh() {
  eb_det b1 eval-next-1r 1 per_device_batch_size=1 gradient_accumulation_steps=4 eval_per_device_batch_size=3 &&
    eb_det "$@" || return 1
  cmp "$EB_D/b1.det" "$EB_D/$1.det" && echo "identical to one rank's eval batch 3: $(grep eval_loss "$EB_D/$1.det" | tail -n 1)"
}

eval_batch_refusals() {
  local out
  out=$(build/configgen/configgen -o "$EB_D/no" configgen/configs/runs/eval-next-1r.yml eval_per_device_batch_size=0.5 2>&1) && return 1
  echo "$out" | grep -q 'eval_per_device_batch_size=0.5 (command line): 0.5 sequences per rank x num_ranks=1 = 0.5 sequences per eval batch; expected a whole number >= 1' ||
    { echo "$out"; return 1; }
  eb_det b2 eval-next-1r 1 per_device_batch_size=2 gradient_accumulation_steps=2 eval_per_device_batch_size=3 || return 1
  # QTTOKENS, 40 uint16 zeros: 2 windows of 17 tokens, fewer than the eval batch of 3
  printf 'QTTOKENS\001\000\000\000\002\000\000\000\050\000\000\000\000\000\000\000' > "$EB_D/short.tok"
  head -c 80 /dev/zero >> "$EB_D/short.tok"
  out=$("$EB_D/b2/eval-next-1r-v/qtrain" data=$EVAL_DATA steps=1 eval_data=$EB_D/short.tok 2>&1) && return 1
  echo "$out" | grep -q 'fewer than one eval batch of 3 sequences (eval_per_device_batch_size x num_ranks)' || { echo "$out"; return 1; }
  echo "refusals: half a sequence per eval batch, a file shorter than one eval batch of 3"
}

check "eval batch 3 (not whole microbatches): microbatches of 1, 2 and 4 give the same eval bits" eval_batch_pad
check "eval batch 3 on DP2 (eval_per_device_batch_size 1.5: 2 + 1 and a pad) == one rank" \
  eb_mesh dp2-e1.5 eval-next-dp2 2 eval_per_device_batch_size=1.5
check "eval batch 3 on DP2 x EP2 (eval_per_device_batch_size 0.75: a group of padding only) == one rank" \
  eb_mesh dp2ep2-e0.75 eval-next-dp2ep2 4 eval_per_device_batch_size=0.75
check "eval batch: refusals" eval_batch_refusals
check "eval: eval_holdout=N, target_eval_loss" eval_holdout_stop
check "eval: eval_holdout=N resumes bit for bit; a resume with another holdout is refused" eval_holdout_resume
check "eval: save_every= writes its checkpoint after the step's eval row (killed and resumed: every row once)" eval_save_order
check "eval: refusals" eval_refusals
