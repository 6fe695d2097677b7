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
  printf '{"user": "my config"}\n' > $d/config.json
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
