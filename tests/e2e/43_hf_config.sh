# 43_hf_config.sh - a save= directory is what transformers' from_pretrained(DIR) opens
# (sourced by run_all.sh). Its config.json is written from the plan (Qwen3-Next with a
# load-balance weight, Qwen3.5, bf16, a 4-rank mesh) and tests/scripts/hf_config_check.py
# compares it field by field with the plan's plan.txt and derives, from config.json alone,
# the parameter names and shapes transformers instantiates, which must be exactly the
# directory's tensors. A config.json or tokenizer file already in the directory is never
# replaced (the user's files); tokenizer= copies tokenizer.json and tokenizer_config.json.
# When /usr/bin/python3 has transformers, the directories are also loaded for real.
HF=$QT_TMP/hf; mkdir -p $HF

# hf_save_check RUN RANKS: RUN saves after 2 steps (64 KiB shards, so several), then the check
hf_save_check() {
  local run=$1 n=$2 d=$HF/$1
  rm -rf $d
  ckpt_run $run $n steps=2 save=$d save_shard_size=64K 2> $HF/$run.log || { tail -n 3 $HF/$run.log; return 1; }
  python3 tests/scripts/hf_config_check.py $d generated/$run/plan.txt || return 1
  ls $d | grep -q 'qtrain-tmp' && { echo "temporary file left in $d"; return 1; }
  if /usr/bin/python3 -c 'import transformers' 2> /dev/null; then
    /usr/bin/python3 -c 'import sys, transformers as t
m = t.AutoModelForCausalLM.from_pretrained(sys.argv[1]) if "next" in sys.argv[2] else \
    t.AutoModelForImageTextToText.from_pretrained(sys.argv[1])
print("transformers", t.__version__, "loaded", type(m).__name__)' $d $run || return 1
  else
    echo "(transformers is not installed for /usr/bin/python3: names and shapes checked only)"
  fi
}
check "hf config: Qwen3-Next (load balance 0.01) save= directory: config.json == the plan, tensors == what transformers instantiates from it" \
  hf_save_check test-next-lb 1
check "hf config: Qwen3.5 save= directory: config.json (qwen3_5_moe, text_config) == the plan, tensors == what transformers instantiates" \
  hf_save_check test-35-tiny 1
check "hf config: bf16 plan: torch_dtype bfloat16, tensors as transformers instantiates" \
  hf_save_check bf16-next-tiny 1
hf_mesh() {
  hf_save_check mesh-next-dp2ep2 4 && hf_save_check mesh-next-1r 1 || return 1
  cmp $HF/mesh-next-1r/config.json $HF/mesh-next-dp2ep2/config.json && echo "4-rank config.json == one-rank config.json"
}
check "hf config: a DP2xEP2 save (4 ranks) writes one config.json, the one-rank run's" hf_mesh

# A directory that already has config.json and tokenizer.json keeps them byte for byte;
# tokenizer= adds only the tokenizer_config.json it lacks.
hf_keep() {
  local d=$HF/keep tok=$HF/tok
  rm -rf $d $tok; mkdir -p $d $tok
  # the user's config.json: the plan's (from a first save) with a key of their own
  rm -rf $HF/keep0
  ckpt_run test-next-tiny 1 steps=1 save=$HF/keep0 2> $HF/keep.log || { tail -n 3 $HF/keep.log; return 1; }
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["user"] = "my config"; json.dump(c, open(sys.argv[2], "w"))' $HF/keep0/config.json $d/config.json
  printf '{"user": "my tokenizer"}\n' > $d/tokenizer.json
  cp $d/config.json $HF/keep.config; cp $d/tokenizer.json $HF/keep.tok
  printf '{"version": "1.0", "model": {"type": "BPE"}}\n' > $tok/tokenizer.json
  printf '{"tokenizer_class": "PreTrainedTokenizerFast"}\n' > $tok/tokenizer_config.json
  ckpt_run test-next-tiny 1 steps=2 save=$d tokenizer=$tok 2> $HF/keep.log || { tail -n 3 $HF/keep.log; return 1; }
  cmp $d/config.json $HF/keep.config || { echo "config.json replaced"; return 1; }
  cmp $d/tokenizer.json $HF/keep.tok || { echo "tokenizer.json replaced"; return 1; }
  cmp $d/tokenizer_config.json $tok/tokenizer_config.json || { echo "tokenizer_config.json not copied"; return 1; }
  [ -s $d/model.safetensors.index.json ] || return 1
  echo "kept config.json and tokenizer.json; copied tokenizer_config.json: $(ls $d | tr '\n' ' ')"
}
check "hf config: an existing config.json and tokenizer.json are kept, a missing tokenizer_config.json is copied" hf_keep

# tokenizer=FILE into a fresh directory (tokenizer_config.json beside the file comes too),
# save_every=1; then the user edits config.json and a resumed run saves again: the edit stays.
hf_tokenizer() {
  local d=$HF/tokrun tok=$HF/tok2
  rm -rf $d $tok; mkdir -p $tok
  printf '{"version": "1.0", "added_tokens": [], "model": {"type": "WordLevel"}}\n' > $tok/my-tokenizer.json
  printf '{"model_max_length": 16}\n' > $tok/tokenizer_config.json
  ckpt_run test-next-tiny 1 steps=2 save=$d save_every=1 tokenizer=$tok/my-tokenizer.json 2> $HF/tok.log \
    || { tail -n 3 $HF/tok.log; return 1; }
  cmp $d/tokenizer.json $tok/my-tokenizer.json && cmp $d/tokenizer_config.json $tok/tokenizer_config.json || return 1
  python3 tests/scripts/hf_config_check.py $d generated/test-next-tiny/plan.txt || return 1
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["note"] = "edited"; json.dump(c, open(sys.argv[1], "w"))' $d/config.json
  cp $d/config.json $HF/tok.edited
  ckpt_run test-next-tiny 1 steps=3 load=$d save=$d 2> $HF/tok2.log || { tail -n 3 $HF/tok2.log; return 1; }
  grep -q "at step 2" $HF/tok2.log || { echo "did not resume"; tail -n 3 $HF/tok2.log; return 1; }
  cmp $d/config.json $HF/tok.edited || { echo "the user's edit of config.json was replaced"; return 1; }
  cmp $d/tokenizer.json $tok/my-tokenizer.json || return 1
  echo "tokenizer files copied; the edited config.json survived the next save"
}
check "hf config: tokenizer=FILE copies it as tokenizer.json (+ tokenizer_config.json beside it); a user's edit of config.json survives later saves" hf_tokenizer

# config.json records the document separator of a packed plan as eos_token_id (test-next-pack:
# eos_id 7); a plan without packing has no separator and writes none.
hf_eos() {
  local d=$HF/eos
  rm -rf $d $HF/noeos
  ckpt_run test-next-pack 1 steps=1 save=$d 2> $HF/eos.log || { tail -n 3 $HF/eos.log; return 1; }
  ckpt_run test-next-tiny 1 steps=1 save=$HF/noeos 2> $HF/noeos.log || { tail -n 3 $HF/noeos.log; return 1; }
  python3 - $d/config.json $HF/noeos/config.json <<'PY' || return 1
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a.get("eos_token_id") == 7, "packed plan: eos_token_id %r, expected 7" % a.get("eos_token_id")
assert "eos_token_id" not in b, "unpacked plan: eos_token_id %r written" % b.get("eos_token_id")
print("eos_token_id 7 (packing, eos_id 7); none without packing")
PY
}
check "hf config: a packed plan's config.json has eos_token_id = eos_id; an unpacked one none" hf_eos

# A config.json edited to disagree with the plan (hidden_size 128 beside weights of width 32)
# is refused at start-up by load= and by save=, naming the file, the key and both values;
# nothing in the directory changes (every file byte-identical, no lock or temporary left).
# With overwrite=1 a save replaces it with the plan's config.json.
hf_disagree() {
  local d=$HF/dis c=$HF/dis.copy log=$HF/dis.err
  rm -rf $d $c
  ckpt_run test-next-tiny 1 steps=2 save=$d 2> $log || { tail -n 3 $log; return 1; }
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["hidden_size"] = 128; json.dump(c, open(sys.argv[1], "w"), indent=2)' $d/config.json
  cp -a $d $c
  ckpt_run test-next-tiny 1 steps=3 load=$d 2> $log && { echo "load= accepted it"; return 1; }
  grep -F "qtrain: load=$d/config.json: hidden_size is 128, but the plan (and the weights) have 32; fix or remove config.json" $log \
    || { echo "load= message:"; tail -n 3 $log; return 1; }
  grep -q "^step " $log && { echo "load=: trained"; return 1; }
  ckpt_run test-next-tiny 1 steps=1 save=$d 2> $log && { echo "save= accepted it"; return 1; }
  grep -F "qtrain: save=$d/config.json: hidden_size is 128, but the plan has 32; a save would keep it beside weights with hidden_size 32: fix or remove it, or give overwrite=1 to replace it with the plan's config.json" $log \
    || { echo "save= message:"; tail -n 3 $log; return 1; }
  grep -q "^step " $log && { echo "save=: trained"; return 1; }
  diff -r $d $c || { echo "the directory changed"; return 1; }
  ls $HF | grep -E '^dis\.(lock|tmp)' && { echo "lock or temporary left"; return 1; }
  echo "refused with the directory unchanged: $(tail -n 1 $log)"
  ckpt_run test-next-tiny 1 steps=1 save=$d overwrite=1 2> $log || { tail -n 3 $log; return 1; }
  python3 tests/scripts/hf_config_check.py $d generated/test-next-tiny/plan.txt || return 1
  echo "overwrite=1: config.json replaced by the plan's"
}
check "hf config: a config.json that disagrees with the plan (hidden_size) is refused by load= and save=, the directory unchanged; overwrite=1 replaces it" hf_disagree

# The same refusal on a mesh: rank 0 reads config.json, every rank stops before training.
hf_disagree_mesh() {
  local d=$HF/dism log=$HF/dism.err
  rm -rf $d
  ckpt_run test-next-tiny 1 steps=2 save=$d 2> $log || { tail -n 3 $log; return 1; }
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["num_experts"] = 8; json.dump(c, open(sys.argv[1], "w"))' $d/config.json
  ckpt_run mesh-next-dp2 2 steps=3 load=$d 2> $log && { echo "accepted"; return 1; }
  grep -F "load=$d/config.json: num_experts is 8, but the plan (and the weights) have 4" $log || { tail -n 5 $log; return 1; }
  grep -q "rank 1/2: start-up checks: stopping: rank 0/2 failed" $log || { tail -n 5 $log; return 1; }
  grep -q "^step " $log && { echo "trained"; return 1; }
  echo "both ranks stopped: $(grep -c stopping $log) stopping line(s)"
}
check "hf config: on a 2-rank mesh a disagreeing load= config.json stops every rank at start-up" hf_disagree_mesh

# The Hugging Face hub cache (huggingface_hub's snapshot_download) keeps a checkpoint as a
# snapshot directory of symbolic links into a blobs directory: load= of such a directory
# was refused because its config.json is a link ("not a regular file"). A link to a regular
# file is read through; one to a FIFO or a device is still refused, and none hangs.
hf_hub_layout() {
  local d=$HF/hubck hub=$HF/hub log=$HF/hub.err f
  rm -rf $d $hub && mkdir -p $hub/blobs $hub/snapshots/rev
  ckpt_run test-next-tiny 1 steps=2 save=$d 2> $log || { tail -n 3 $log; return 1; }
  for f in $d/*; do
    cp $f $hub/blobs/$(sha1sum < $f | cut -c1-40) && ln -s ../../blobs/$(sha1sum < $f | cut -c1-40) $hub/snapshots/rev/${f##*/} || return 1
  done
  ckpt_run test-next-tiny 1 steps=4 load=$d metrics=$HF/hub-a.jsonl 2> $log || { tail -n 3 $log; return 1; }
  ckpt_run test-next-tiny 1 steps=4 load=$hub/snapshots/rev metrics=$HF/hub-b.jsonl 2> $log || { tail -n 3 $log; return 1; }
  grep -q "resuming from $hub/snapshots/rev at step 2" $log || { tail -n 3 $log; return 1; }
  diff <(grep -o '"loss_bits":"[^"]*"' $HF/hub-a.jsonl) <(grep -o '"loss_bits":"[^"]*"' $HF/hub-b.jsonl) || return 1
  rm $hub/snapshots/rev/config.json && mkfifo $hub/blobs/fifo && ln -s ../../blobs/fifo $hub/snapshots/rev/config.json || return 1
  ckpt_run test-next-tiny 1 steps=4 load=$hub/snapshots/rev 2> $log && { echo "accepted a FIFO config.json"; return 1; }
  grep -F "load=$hub/snapshots/rev/config.json: not a regular file" $log || { tail -n 3 $log; return 1; }
  echo "a snapshot of links resumes as the directory does (loss bits equal); a link to a FIFO refused"
}
check "hf config: load= of a hub-cache snapshot (files are symbolic links to blobs) resumes; a config.json link to a FIFO is refused" hf_hub_layout

# load= of a published Qwen3.5 checkpoint's layout (tests/scripts/hf_published_dir.py from
# test-35-tiny's init.safetensors): a sharded index whose shards also hold the vision tower
# (model.visual.*) and the draft head (mtp.*), as the multimodal checkpoints do. The text
# model loads with a note for each skipped kind: F32 shards give the loss bits of the single
# file; BF16 shards (the published dtype) load widened. A shard the index lists but that is
# missing, and a text tensor the model does not have, are refused naming them, before any
# step.
hf_published() {
  local src=tests/golden/e2e/test-35-tiny/init.safetensors d=$HF/pub m
  for m in f32_vision bf16_vision_mtp missing_shard extra_tensor; do
    python3 tests/scripts/hf_published_dir.py $src $d.$m $m || return 1
  done
  ckpt_run test-35-tiny 1 steps=2 load=$src 2> $HF/pub.ref || { tail -n 3 $HF/pub.ref; return 1; }
  ckpt_run test-35-tiny 1 steps=2 load=$d.f32_vision 2> $HF/pub.f32 || { tail -n 3 $HF/pub.f32; return 1; }
  grep -q 'skipped 2 vision-tower or optimizer tensors' $HF/pub.f32 || { echo "no vision note"; return 1; }
  local a b
  a=$(grep 'trained steps' $HF/pub.ref); b=$(grep 'trained steps' $HF/pub.f32)
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "F32 shards with vision tensors: '$b', the single file: '$a'"; return 1; }
  ckpt_run test-35-tiny 1 steps=2 load=$d.bf16_vision_mtp 2> $HF/pub.bf16 || { tail -n 3 $HF/pub.bf16; return 1; }
  grep -q 'skipped 2 mtp.\* tensors' $HF/pub.bf16 && grep -q 'skipped 2 vision-tower' $HF/pub.bf16 \
    || { echo "BF16 shards: notes missing"; cat $HF/pub.bf16; return 1; }
  grep -q 'trained steps 1..2' $HF/pub.bf16 || return 1
  ! ckpt_run test-35-tiny 1 steps=2 load=$d.missing_shard > $HF/pub.miss 2>&1 || { echo "missing shard accepted"; return 1; }
  grep -q 'model.safetensors.index.json lists the shard model-00002-of-00002.safetensors for its tensors, and it cannot be read (.*model-00002-of-00002.safetensors: cannot open' $HF/pub.miss || { cat $HF/pub.miss; return 1; }
  ! grep -q '^step ' $HF/pub.miss || { echo "a step ran"; return 1; }
  ! ckpt_run test-35-tiny 1 steps=2 load=$d.extra_tensor > $HF/pub.extra 2>&1 || { echo "extra tensor accepted"; return 1; }
  ! grep -q '^step ' $HF/pub.extra || { echo "a step ran"; return 1; }
  grep -q 'unexpected tensor model.language_model.layers.0.self_attn.q_norm.bias in shard model-00002-of-00002.safetensors' $HF/pub.extra \
    || { cat $HF/pub.extra; return 1; }
  echo "F32 shards + vision: $b (== the single file); BF16 + vision + mtp: $(grep 'trained steps' $HF/pub.bf16)"
}
check "hf load: a published Qwen3.5 layout (sharded index, BF16, model.visual.* and mtp.* tensors) loads the text model with notes; a missing shard and an extra tensor are refused" hf_published
