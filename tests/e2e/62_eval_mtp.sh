# 62_eval_mtp.sh - the held-out evaluation with the multi-token-prediction head (issue 35;
# sourced by run_all.sh; docs/model.md 1.8 "Evaluation", docs/pipeline.md "The held-out eval").
#
# As MaxText's eval, the eval forward runs the whole model, the MTP head included (its
# stacked inputs filled from the eval source, XENT_MTP at the end), and the eval loss is the
# main cross entropy alone (MaxText adds the head's loss only when is_train; its eval
# reports mtp_loss 0, so qtrain writes no eval MTP field). Every cell is a variant
# (plan_variant: no shipped plan) of a committed MTP run with eval_interval 3,
# eval_start_step 1, run 10 steps on the tiny test data with eval_data= the same file (5 eval
# batches of the global eval batch of 4, evals after steps 1, 4, 7). Checked:
#   * one rank: the eval rows after exactly those steps, 320 eval targets each, no MTP field
#     in them, and the training lines (loss bits, fingerprint; mtp_loss too) equal the
#     committed run without eval, step by step: the eval leaves training untouched;
#   * every mesh the head trains on gives the one-rank run's eval and training bits: DP2 +
#     ZeRO-1 + G2, FSDP2 (auto), TP2, EP2, CP2 (the head's inputs past a context rank's
#     tokens read from the eval file), DP2 x EP2 with ZeRO-1 and per-layer gathers and
#     reduction (overlap on: split all-gathers waited for inside the eval forward), bf16
#     DP2 x EP2, packing DP2 x EP2, two depths on TP2 and CP2, Qwen3.5 DP2 x EP2, an eval
#     batch of 8 unlike training's 4 on DP2 + ZeRO-1 + G2, vocabulary-parallel TP2;
#   * pipelines (stage 0's first chunk sends the head's embeddings straight to the last
#     stage, which receives them at its first chunk): PP2 gpipe, PP4 1f1b (two middle stages
#     that see none of it), circular PP2 R2 and PP2 R2 x DP2, two depths on PP2 1f1b M4 ==
#     one rank's training and eval lines.
#   * eval batches that are not whole microbatches (issue 35): an eval batch of 3 (6 batches)
#     on the microbatch of 4 (one forward, its fourth slot padded: masked targets, the MTP
#     head's too), on DP2 x EP2 per-layer (eval_per_device_batch_size 0.75: the fourth group
#     all padding) and on PP2 (1.5) == the unpadded run on microbatches of 1; packed likewise.
# The golden (float64 reference, the main CE alone) is 10_golden.sh's test-next-mtp-eval.
EM_DATA=tests/golden/e2e/test-next-tiny/tokens.npy
EM_D=$QT_TMP/eval-mtp
EM_EVAL="eval_interval=3 eval_start_step=1"

# em_det NAME RUN RANKS KEY=VALUE...: RUN.yml with EM_EVAL and the overrides, built into
# $EM_D/NAME/, 10 steps on RANKS ranks with eval_data=; its det_fields lines in
# $EM_D/NAME.det (kept: a second call does nothing), with 3 eval lines.
em_det() {
  local name=$1 run=$2 n=$3 d=$EM_D/$1; shift 3
  [ -s "$EM_D/$name.det" ] && return 0
  mkdir -p "$d"
  plan_variant "$run" "$d" $EM_EVAL "$@" || return 1
  local cmd="$d/$run-v/qtrain data=$EM_DATA eval_data=$EM_DATA seed=11 steps=10 metrics=$EM_D/$name.jsonl"
  rm -f "$EM_D/$name.jsonl"
  if [ "$n" -eq 1 ]; then
    timeout 120 $cmd 2> "$EM_D/$name.err"
  else
    timeout 120 mpiexec -n "$n" $cmd 2> "$EM_D/$name.err"
  fi || { tail -n 3 "$EM_D/$name.err"; return 1; }
  det_fields "$EM_D/$name.jsonl" > "$EM_D/$name.det" || return 1
  [ "$(grep -c eval_loss "$EM_D/$name.det")" -eq 3 ] || { echo "$name: expected 3 eval lines"; return 1; }
}

em_one_rank() {
  em_det 1r mtp-next-1r 1 || return 1
  local j=$EM_D/1r.jsonl
  [ "$(grep '"eval_loss"' "$j" | grep -o '"step":[0-9]*' | tr '\n' ' ')" = '"step":1 "step":4 "step":7 ' ] ||
    { echo "eval rows not after steps 1, 4, 7"; return 1; }
  [ "$(grep '"eval_loss"' "$j" | grep -c '"eval_tokens":320,')" -eq 3 ] || { echo "eval_tokens"; return 1; }
  ! grep '"eval_loss"' "$j" | grep -q mtp || { echo "an MTP field in an eval row"; return 1; }
  [ "$(grep -v '"eval_loss"' "$j" | grep -c '"mtp_loss":')" -eq 10 ] || { echo "mtp_loss"; return 1; }
  grep -q 'evals (5 batches each): eval loss' "$EM_D/1r.err" || { echo "no eval summary"; return 1; }
  # the same run without eval (the committed plan): every training line, mtp_loss included
  timeout 120 build/mtp-next-1r/qtrain data=$EM_DATA seed=11 steps=10 metrics=$EM_D/plain.jsonl \
    2> "$EM_D/plain.err" || { tail -n 3 "$EM_D/plain.err"; return 1; }
  cmp <(grep -v eval_loss "$EM_D/1r.det") <(det_fields "$EM_D/plain.jsonl") || { echo "training changed"; return 1; }
  cmp <(grep -v '"eval_loss"' "$j" | grep -v manifest | grep -o '"mtp_loss":[^,]*') \
      <(grep -v manifest "$EM_D/plain.jsonl" | grep -o '"mtp_loss":[^,]*') || { echo "mtp_loss changed"; return 1; }
  echo "3 evals, training untouched: $(grep eval_loss "$EM_D/1r.det" | tail -n 1)"
}
check "eval with the MTP head: one rank, evals after steps 1, 4, 7; training == the run without eval" em_one_rank

# em_same ONE RUN1 RUN RANKS [KEY=VALUE...]: RUN's eval variant on RANKS ranks == ONE's (the
# one-rank variant of RUN1, made here when missing), training and eval lines bit for bit
em_same() {
  local one=$1 run1=$2 run=$3 n=$4 name; shift 4
  name=$run${*:+-$(echo "$*" | md5sum | cut -c1-8)}
  em_det "$one" "$run1" 1 && em_det "$name" "$run" "$n" "$@" || return 1
  cmp "$EM_D/$one.det" "$EM_D/$name.det" || { diff "$EM_D/$one.det" "$EM_D/$name.det" | head -4; return 1; }
  echo "identical to one rank: $(grep eval_loss "$EM_D/$name.det" | tail -n 1)"
}
for cell in "1r mtp-next-1r mtp-next-dp2-g2-zero1 2" "1r mtp-next-1r mtp-next-fsdp2-auto 2" \
            "1r mtp-next-1r mtp-next-tp2 2" "1r mtp-next-1r mtp-next-ep2 2" \
            "1r-nb4 mtp-next-1r-nb4 mtp-next-cp2 2" \
            "1r mtp-next-1r mtp-next-dp2ep2-layer 4 collective_overlap=on" \
            "bf16-1r mtp-bf16-next-1r mtp-bf16-next-dp2ep2 4" \
            "pack-1r mtp-pack-next-1r mtp-pack-next-dp2ep2 4" \
            "mtp2-1r mtp2-next-1r mtp2-next-tp2 2" "mtp2-1r-nb4 mtp2-next-1r-nb4 mtp2-next-cp2 2" \
            "35-1r mtp-35-1r mtp-35-dp2ep2 4"; do
  set -- $cell
  check "eval with the MTP head: $3${5:+ $5} ($4 ranks) == one rank ($2), eval and training bits" em_same "$@"
done

# em_pair ONE RUN1 "KEYS1" NAME RUN RANKS "KEYS": as em_same with keys on both sides: an
# eval batch of 8 (2 batches) unlike training's 4 (DP2 + ZeRO-1 + G2: 4 per rank), and the
# vocabulary-parallel XENT_MTP (its exchanges inside the eval forward) on TP2 against one
# rank's vocabulary blocks
em_pair() {
  em_det "$1" "$2" 1 $3 && em_det "$4" "$5" "$6" $7 || return 1
  cmp "$EM_D/$1.det" "$EM_D/$4.det" || { diff "$EM_D/$1.det" "$EM_D/$4.det" | head -4; return 1; }
  grep -q '"eval_batches":'"$8" "$EM_D/$4.jsonl" || { echo "expected $8 eval batches"; return 1; }
  echo "identical to one rank: $(grep eval_loss "$EM_D/$4.det" | tail -n 1)"
}
check "eval with the MTP head: eval batch 8 (not training's 4), DP2 + ZeRO-1 + G2 (2 ranks) == one rank" \
  em_pair 1r-eb8 mtp-next-1r "eval_per_device_batch_size=8" dp2-eb8 mtp-next-dp2-g2-zero1 2 \
  "eval_per_device_batch_size=4" 2
check "eval with the MTP head: vocab-parallel TP2 (2 ranks) == one rank with vocab_blocks 2" \
  em_pair 1r-vb2 mtp-next-1r "vocab_blocks=2" tp2-vp mtp-next-tp2 2 "vocab_parallel=true" 5

# pipelines: the one-rank runs' plans with the pipeline keys (per_device_batch_size x the
# stages: the same global batch and eval batch)
EM_PP="num_ranks=2 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=2 per_device_batch_size=2"
EM_PPC="num_ranks=2 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=1 per_device_batch_size=2"
for cell in "pp2 2 $EM_PP" \
            "pp4-1f1b 4 num_ranks=4 ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 per_device_batch_size=1 num_pipeline_microbatches=4 pipeline_schedule=1f1b" \
            "pp2r2 2 $EM_PPC" \
            "pp2r2dp2 4 $EM_PPC num_ranks=4 ici_fsdp_parallelism=1 ici_data_parallelism=2 per_device_batch_size=1"; do
  set -- $cell
  name=$1 n=$2; shift 2
  check "eval with the MTP head on a pipeline: $name ($n ranks) == one rank (mtp-next-1r), eval and training bits" \
    em_same 1r mtp-next-1r mtp-next-1r "$n" "$@"
done
check "eval with two MTP depths on a pipeline: PP2 1f1b M4 (2 ranks) == one rank (mtp2-next-1r), eval and training bits" \
  em_same mtp2-1r mtp2-next-1r mtp2-next-1r 2 $EM_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b

# eval batch 3 (issue 35: not whole microbatches; 6 batches of the 20 windows): the unpadded
# one-rank run on microbatches of 1 is the reference
EM_B1="per_device_batch_size=1 gradient_accumulation_steps=4 eval_per_device_batch_size=3"
check "eval with the MTP head: eval batch 3 on the microbatch of 4 (a slot padded) == microbatches of 1" \
  em_pair 1r-eb3 mtp-next-1r "$EM_B1" 1r-eb3-b4 mtp-next-1r 1 "eval_per_device_batch_size=3" 6
check "eval with the MTP head: eval batch 3 on DP2 x EP2 per-layer, overlap on (0.75: a group all padding) == one rank" \
  em_pair 1r-eb3 mtp-next-1r "$EM_B1" dp2ep2-eb3 mtp-next-dp2ep2-layer 4 \
  "eval_per_device_batch_size=0.75 collective_overlap=on" 6
check "eval with the MTP head: eval batch 3 on PP2 (1.5) == one rank" \
  em_pair 1r-eb3 mtp-next-1r "$EM_B1" pp2-eb3 mtp-next-1r 2 "$EM_PP eval_per_device_batch_size=1.5" 6
check "eval with the MTP head, packed: eval batch 3 on the microbatch of 4 (a slot padded) == microbatches of 1" \
  em_pair pack-eb3-b1 mtp-pack-next-1r "$EM_B1" pack-eb3-b4 mtp-pack-next-1r 1 "eval_per_device_batch_size=3" 6

# MaxText's mtp_eval_target_module (the head's acceptance rate, docs/model.md 1.8): each
# eval row gains eval_mtp_acceptance_rate_percent (the pass's pooled rate, session 23),
# the depth and the pooled integer counts; det_fields carries them, so every cell
# below compares them bit for bit with one rank's, as the eval loss and training lines.
# One rank: the fields in every eval row (depth 1: 5 batches x 4 sequences x 15 positions
# with a loss), the console's figure (each eval's line and the summary; none without the
# key), and the eval loss and every training line equal to
# the run without the key (the op runs in the eval's forward only and changes no bit).
EM_ACC="mtp_eval_target_module=1"
em_acc_one_rank() {
  em_det acc-1r mtp-next-1r 1 $EM_ACC && em_det 1r mtp-next-1r 1 || return 1
  local j=$EM_D/acc-1r.jsonl
  [ "$(grep '"eval_loss"' "$j" | grep -c '"eval_mtp_acceptance_rate_percent":[0-9.e+-]*,"eval_mtp_target_module":1,"eval_mtp_accepted":[0-9]*,"eval_mtp_accept_positions":300,')" -eq 3 ] ||
    { echo "expected the acceptance fields (300 positions) in 3 eval rows"; return 1; }
  grep -q '^eval after step 2/10 .* mtp_acceptance_rate [0-9.]*% (depth 1)' "$EM_D/acc-1r.err" &&
    grep -q 'evals (5 batches each): eval loss .*; MTP acceptance rate (depth 1) [0-9.]*% -> [0-9.]*%' "$EM_D/acc-1r.err" ||
    { echo "no acceptance rate on the console"; return 1; }
  ! grep -q -i 'acceptance' "$EM_D/1r.err" || { echo "an acceptance rate without the key"; return 1; }
  cmp <(sed 's/ "eval_mtp_acceptance.*//' "$EM_D/acc-1r.det") "$EM_D/1r.det" ||
    { echo "the key changed an eval loss or a training line"; return 1; }
  echo "depth 1: $(grep -o '"eval_mtp_acceptance_rate_percent":[^,]*,[^,]*,"eval_mtp_accepted":[0-9]*' "$j" | tail -n 1)"
}
check "eval with the MTP head, mtp_eval_target_module 1: the acceptance fields in every eval row; eval loss and training == without the key" em_acc_one_rank
# checkpoints: the plan with the key saves the very tensors of the plan without it (only
# the index's plan hash differs) and resumes its checkpoint with the same training bits
em_acc_ckpt() {
  em_det acc-1r mtp-next-1r 1 $EM_ACC && em_det 1r mtp-next-1r 1 || return 1
  local a=$EM_D/acc-1r/mtp-next-1r-v/qtrain p=$EM_D/1r/mtp-next-1r-v/qtrain c=$EM_D/ck f
  local run="data=$EM_DATA eval_data=$EM_DATA seed=11"
  rm -rf "$c"; mkdir -p "$c"
  timeout 120 $p $run steps=5 save=$c/p.st metrics=$c/p.jsonl 2> "$c/p.err" &&
    timeout 120 $a $run steps=5 save=$c/a.st metrics=$c/a.jsonl 2> "$c/a.err" ||
    { tail -n 3 "$c/p.err" "$c/a.err"; return 1; }
  for f in model-00001-of-00001.safetensors optimizer-00001-of-00001.safetensors; do
    cmp "$c/p.st/$f" "$c/a.st/$f" || return 1
  done
  timeout 120 $a $run load=$c/p.st steps=10 metrics=$c/ra.jsonl 2> "$c/ra.err" &&
    timeout 120 $p $run load=$c/p.st steps=10 metrics=$c/rp.jsonl 2> "$c/rp.err" ||
    { tail -n 3 "$c/ra.err" "$c/rp.err"; return 1; }
  cmp <(det_fields "$c/rp.jsonl" | grep -v eval_loss) <(det_fields "$c/ra.jsonl" | grep -v eval_loss) ||
    { echo "the resumed training differs"; return 1; }
  grep -q '"eval_mtp_accepted":' "$c/ra.jsonl" || { echo "no acceptance field after the resume"; return 1; }
  echo "same checkpoint tensors; resumed under the key: $(det_fields "$c/ra.jsonl" | tail -n 1)"
}
check "acceptance rate: the plan with the key saves the same tensors and resumes the plan without it bit for bit" em_acc_ckpt
# the meshes (em_pair: the key on both sides; the same eval batch of 4, so 5 eval batches:
# data and context set eval_per_device_batch_size for it; the pooled figure does not depend
# on the eval batch: the cells after these check that): data, tensor (whole logits on
# both ranks), vocabulary-parallel tensor (the (max, index) pairs merged over the group:
# against one rank's vocab_blocks 2), expert, context with two depths and k = 2 (positions
# t + 2 past rank 0's 8 tokens from rank 1's halo; its one-rank side in 4 token blocks, so
# t + 2 also crosses blocks), and a pipeline (the last stage computes it)
check "acceptance rate: DP2 + ZeRO-1 + G2 (2 ranks) == one rank" \
  em_pair acc-1r mtp-next-1r "$EM_ACC" acc-dp2 mtp-next-dp2-g2-zero1 2 "eval_per_device_batch_size=2 $EM_ACC" 5
check "acceptance rate: TP2 (2 ranks) == one rank" \
  em_pair acc-1r mtp-next-1r "$EM_ACC" acc-tp2 mtp-next-tp2 2 "$EM_ACC" 5
check "acceptance rate: vocab-parallel TP2 (2 ranks) == one rank with vocab_blocks 2" \
  em_pair acc-1r-vb2 mtp-next-1r "vocab_blocks=2 $EM_ACC" acc-tp2-vp mtp-next-tp2 2 "vocab_parallel=true $EM_ACC" 5
check "acceptance rate: EP2 (2 ranks) == one rank" \
  em_pair acc-1r mtp-next-1r "$EM_ACC" acc-ep2 mtp-next-ep2 2 "$EM_ACC" 5
check "acceptance rate, two depths, k = 2: CP2 (2 ranks, the context halo) == one rank in 4 token blocks" \
  em_pair acc2-1r-nb4 mtp2-next-1r-nb4 "mtp_eval_target_module=2" acc2-cp2 mtp2-next-cp2 2 "eval_per_device_batch_size=2 mtp_eval_target_module=2" 5
check "acceptance rate: PP2 (2 ranks) == one rank" \
  em_pair acc-1r mtp-next-1r "$EM_ACC" acc-pp2 mtp-next-1r 2 "$EM_PP $EM_ACC" 5
# bf16 logits (the op reads them as bf16) and packed documents (depth 1's mask stops at a
# document end), on DP2 x EP2
check "acceptance rate: bf16 DP2 x EP2 (4 ranks) == one rank" \
  em_pair acc-bf16-1r mtp-bf16-next-1r "$EM_ACC" acc-bf16-dp2ep2 mtp-bf16-next-dp2ep2 4 "$EM_ACC" 5
check "acceptance rate, packed: DP2 x EP2 (4 ranks) == one rank" \
  em_pair acc-pack-1r mtp-pack-next-1r "$EM_ACC" acc-pack-dp2ep2 mtp-pack-next-dp2ep2 4 "$EM_ACC" 5
# padded eval slots (issue 35) count no position: an eval batch of 3 on the microbatch of 4
# == microbatches of 1 (6 batches: 6 x 3 x 15 positions)
em_acc_padded() {
  em_pair acc-eb3-b1 mtp-next-1r "$EM_B1 $EM_ACC" acc-eb3-b4 mtp-next-1r 1 "eval_per_device_batch_size=3 $EM_ACC" 6 ||
    return 1
  grep -q '"eval_mtp_accept_positions":270,' "$EM_D/acc-eb3-b4.jsonl" || { echo "expected 270 positions"; return 1; }
}
check "acceptance rate: eval batch 3 on the microbatch of 4 (a padded slot counts nothing) == microbatches of 1" em_acc_padded
# The split of the global batch (session 23): eval_per_device_batch_size defaults to
# per_device_batch_size, the microbatch's, so G2 (2 x 2) evaluates in 10 batches of 2 where
# G1 (4) reads 5 of 4, and DP2 + ZeRO-1 + G2 (1 x 2 ranks x 2) in 10 of 2. The figure is the
# pass's pooled rate, so all give one rank's bits (the mean of the batches' float32 rates,
# MaxText's, differed in the last digits); packed, G4 (20 batches of 1, whose positions
# differ from batch to batch: the mean of their rates is another number) likewise.
check "acceptance rate: G2 on one rank (default eval batch 2: 10 batches) == G1 (5 batches of 4), eval and training bits" \
  em_pair acc-1r mtp-next-1r "$EM_ACC" acc-1r-g2 mtp-next-1r 1 "per_device_batch_size=2 gradient_accumulation_steps=2 $EM_ACC" 10
check "acceptance rate: DP2 + ZeRO-1 + G2 (2 ranks, default eval batch 2: 10 batches) == one rank G1" \
  em_pair acc-1r mtp-next-1r "$EM_ACC" acc-dp2-eb2 mtp-next-dp2-g2-zero1 2 "$EM_ACC" 10
check "acceptance rate, packed: G4 on one rank (default eval batch 1: 20 batches) == G1 (5 batches of 4)" \
  em_pair acc-pack-1r mtp-pack-next-1r "$EM_ACC" acc-pack-g4 mtp-pack-next-1r 1 "per_device_batch_size=1 gradient_accumulation_steps=4 $EM_ACC" 20
