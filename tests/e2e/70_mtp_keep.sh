# 70_mtp_keep.sh - the multi-token-prediction head's checkpoint cases (issue 31, docs/model.md
# 1.8; sourced by run_all.sh). "Nothing lost": a plan without a trained head but with
# mtp_keep_layers 1 (mtp-keep-next-*) that loads a checkpoint holding mtp.* keeps those
# tensors and writes them byte for byte (names, dtypes, shapes, bytes) into every later save,
# fp32 or in the published BF16 layout, on one rank and on a mesh, through a resume; without
# the key they are skipped with a note naming it; checkpoint directories carry them in one
# more model shard. A plan with the head loads a checkpoint
# without it (single file and sharded directory) and initialises the head with a note; an
# extra depth and a head whose shapes disagree are refused, nothing written. Two depths
# (mtp2-next-*): both depths' layers and the shared fc / norms saved, config.json naming the
# depth, depth mismatches refused, a resume across meshes bit for bit.
MK_DIR=$QT_TMP/mtp-keep
MK_DATA=tests/golden/e2e/test-next-tiny/tokens.npy
MK_PY="/usr/bin/python3 tests/scripts/st_mtp.py"
mkdir -p $MK_DIR
mk_run() { # PLAN RANKS ARGS...: one qtrain run on the tiny data, seed 11
  local p=$1 n=$2; shift 2
  if [ "$n" -eq 1 ]; then timeout 120 build/$p/qtrain data=$MK_DATA seed=11 "$@"
  else timeout 120 mpiexec -n "$n" build/$p/qtrain data=$MK_DATA seed=11 "$@"; fi
}
mk_head() { [ -s $MK_DIR/head.safetensors ] || mk_run mtp-next-1r 1 steps=2 save=$MK_DIR/head.safetensors 2> /dev/null; }

mk_keep_file() {
  mk_head || return 1
  out=$(mk_run mtp-keep-next-1r 1 steps=2 load=$MK_DIR/head.safetensors load_weights_only=1 \
        save=$MK_DIR/kept.safetensors 2>&1) || { echo "$out" | tail -3; return 1; }
  echo "$out" | grep -q "keeps 29 mtp.\* tensors" || { echo "no keep note: $out" | tail -5; return 1; }
  $MK_PY same $MK_DIR/head.safetensors $MK_DIR/kept.safetensors &&
    $MK_PY differ $MK_DIR/head.safetensors $MK_DIR/kept.safetensors
}
check "MTP keep: mtp_keep_layers 1 carries a checkpoint's 29 mtp.* tensors byte for byte into its save (the rest trained)" mk_keep_file

mk_keep_resume() {
  [ -s $MK_DIR/kept.safetensors ] || mk_keep_file > /dev/null || return 1
  mk_run mtp-keep-next-1r 1 steps=4 load=$MK_DIR/kept.safetensors save=$MK_DIR/kept2.safetensors \
    2> /dev/null > /dev/null || return 1
  $MK_PY same $MK_DIR/head.safetensors $MK_DIR/kept2.safetensors
}
check "MTP keep: a resume of that save (optimizer state) carries them again, unchanged" mk_keep_resume

mk_keep_bf16() {
  mk_head || return 1
  $MK_PY bf16 $MK_DIR/head.safetensors $MK_DIR/pub.safetensors || return 1
  mk_run mtp-keep-next-1r 1 steps=1 load=$MK_DIR/pub.safetensors save=$MK_DIR/pub-out.safetensors \
    2> /dev/null > /dev/null || return 1
  $MK_PY list $MK_DIR/pub-out.safetensors | grep -q ' BF16 ' || { echo "no BF16 tensor"; return 1; }
  $MK_PY same $MK_DIR/pub.safetensors $MK_DIR/pub-out.safetensors
}
check "MTP keep: a head in the published BF16 layout comes back BF16, byte for byte" mk_keep_bf16

mk_keep_mesh() {
  mk_head || return 1
  mk_run mtp-keep-next-ep2 2 steps=2 load=$MK_DIR/head.safetensors load_weights_only=1 \
    save=$MK_DIR/kept-ep2.safetensors 2> /dev/null > /dev/null || return 1
  $MK_PY same $MK_DIR/head.safetensors $MK_DIR/kept-ep2.safetensors
}
check "MTP keep: on expert 2 (2 ranks) the same tensors, byte for byte" mk_keep_mesh

mk_keep_refusals() {
  mk_head || return 1
  # a depth the plan does not carry
  $MK_PY rename $MK_DIR/head.safetensors $MK_DIR/d1.safetensors mtp.layers.0. mtp.layers.1. || return 1
  out=$(mk_run mtp-keep-next-1r 1 steps=1 load=$MK_DIR/d1.safetensors save=$MK_DIR/d1-out.safetensors 2>&1) &&
    { echo "depth 1 accepted"; return 1; }
  echo "$out" | grep -q "carries 1 depth(s)" || { echo "$out" | tail -2; return 1; }
  [ ! -e $MK_DIR/d1-out.safetensors ]
}
check "MTP keep: a depth beyond mtp_keep_layers is refused, nothing written" mk_keep_refusals

# Checkpoint directories: the carried head goes into one more model shard (rank 0 writes it),
# listed in model.safetensors.index.json; a directory resume carries it again, and a
# directory save on a mesh holds the same bytes.
mk_keep_dir() {
  mk_head || return 1
  rm -rf $MK_DIR/kdir $MK_DIR/kdir2 $MK_DIR/kdir-ep2
  mk_run mtp-keep-next-1r 1 steps=2 load=$MK_DIR/head.safetensors load_weights_only=1 \
    save=$MK_DIR/kdir 2> /dev/null > /dev/null || return 1
  ls $MK_DIR/kdir | grep -q "^model-00002-of-00002.safetensors$" || { ls $MK_DIR/kdir; return 1; }
  grep -q '"mtp.fc.weight": "model-00002-of-00002.safetensors"' $MK_DIR/kdir/model.safetensors.index.json ||
    { echo "index lacks the head"; return 1; }
  $MK_PY same $MK_DIR/head.safetensors $MK_DIR/kdir || return 1
  $MK_PY differ $MK_DIR/head.safetensors $MK_DIR/kdir || return 1
  out=$(mk_run mtp-keep-next-1r 1 steps=4 load=$MK_DIR/kdir save=$MK_DIR/kdir2 2>&1) ||
    { echo "$out" | tail -3; return 1; }
  echo "$out" | grep -q "keeps 29 mtp.\* tensors" || { echo "no keep note on the resume"; return 1; }
  $MK_PY same $MK_DIR/head.safetensors $MK_DIR/kdir2 || return 1
  mk_run mtp-keep-next-ep2 2 steps=2 load=$MK_DIR/kdir save=$MK_DIR/kdir-ep2 2> /dev/null > /dev/null ||
    return 1
  $MK_PY same $MK_DIR/head.safetensors $MK_DIR/kdir-ep2
}
check "MTP keep: a directory save holds the 29 mtp.* tensors byte for byte (own shard, in the index); a directory resume and an EP2 resume carry them again" mk_keep_dir

mk_skip_note() {
  mk_head || return 1
  out=$(mk_run mesh-next-1r 1 steps=1 load=$MK_DIR/head.safetensors load_weights_only=1 2>&1) || return 1
  echo "$out" | grep -q "skipped 29 mtp.\* tensors.*mtp_keep_layers: 1 carries them" || { echo "$out" | tail -3; return 1; }
}
check "MTP keep: without the key the head is skipped with a note naming mtp_keep_layers" mk_skip_note

# A plan with the head and a checkpoint without it: single file and sharded directory.
mk_no_head() {
  [ -s $MK_DIR/nohead.safetensors ] || mk_run mesh-next-1r 1 steps=2 save=$MK_DIR/nohead.safetensors 2> /dev/null || return 1
  [ -e $MK_DIR/nohead-dir ] || mk_run mesh-next-1r 1 steps=2 save=$MK_DIR/nohead-dir save_shard_size=64K 2> /dev/null || return 1
  for src in nohead.safetensors nohead-dir; do
    out=$(mk_run mtp-next-1r 1 steps=1 load=$MK_DIR/$src load_weights_only=1 2>&1) || { echo "$src: $out" | tail -3; return 1; }
    echo "$out" | grep -q "holds no mtp.\* tensors: the multi-token-prediction head (1 depth(s)) starts from its initialisation" ||
      { echo "$src: no note: $out" | tail -3; return 1; }
  done
}
check "MTP ckpt: a head plan loads a checkpoint without the head (file and sharded dir), initialises it, with a note" mk_no_head

mk_head_refusals() {
  mk_head || return 1
  [ -e $MK_DIR/head-dir ] || mk_run mtp-next-1r 1 steps=2 save=$MK_DIR/head-dir save_shard_size=64K 2> /dev/null || return 1
  # the sharded head loads back into the head's plan
  mk_run mtp-next-1r 1 steps=3 load=$MK_DIR/head-dir 2> /dev/null > /dev/null || { echo "dir round trip"; return 1; }
  # an extra depth (mtp.layers.1.*) beside depth 0: refused
  /usr/bin/python3 - "$MK_DIR/head.safetensors" "$MK_DIR/extra.safetensors" <<'PY' || return 1
import sys
sys.path.insert(0, 'tests/scripts')
import st_mtp
meta, ts = st_mtp.read(sys.argv[1])
ts = {k: v for k, v in ts.items() if not k.startswith('optimizer.')}
ts.update({k.replace('mtp.layers.0.', 'mtp.layers.1.'): v for k, v in ts.items() if k.startswith('mtp.layers.0.')})
st_mtp.write(sys.argv[2], {'format': 'pt'}, ts)
PY
  out=$(mk_run mtp-next-1r 1 steps=1 load=$MK_DIR/extra.safetensors save=$MK_DIR/x.safetensors 2>&1) && { echo "extra depth accepted"; return 1; }
  echo "$out" | grep -q "whose multi-token-prediction head has 1 depth(s)" || { echo "$out" | tail -2; return 1; }
  # a head of other shapes (mtp.fc.weight transposed): refused
  /usr/bin/python3 - "$MK_DIR/head.safetensors" "$MK_DIR/shape.safetensors" <<'PY' || return 1
import sys
sys.path.insert(0, 'tests/scripts')
import st_mtp
meta, ts = st_mtp.read(sys.argv[1])
ts = {k: v for k, v in ts.items() if not k.startswith('optimizer.')}
dt, sh, data = ts['mtp.fc.weight']
ts['mtp.fc.weight'] = (dt, [sh[1], sh[0]], data)
st_mtp.write(sys.argv[2], {'format': 'pt'}, ts)
PY
  out=$(mk_run mtp-next-1r 1 steps=1 load=$MK_DIR/shape.safetensors save=$MK_DIR/x.safetensors 2>&1) && { echo "bad shape accepted"; return 1; }
  echo "$out" | grep -q "mtp.fc.weight" || { echo "$out" | tail -2; return 1; }
  [ ! -e $MK_DIR/x.safetensors ]
}
check "MTP ckpt: the head's sharded dir round trip; an extra depth and a head of other shapes are refused, nothing written" mk_head_refusals

# Checkpoints across meshes with the head (run_all.sh ckpt_resume): saved at step 5 on one
# mesh, resumed on another, steps 6..10 bit for bit the uninterrupted one-rank run.
check "MTP ckpt: mtp-next-1r (1 rank) -> mtp-next-dp2ep2-layer (4 ranks), sharded dir, steps 6..10 bit for bit" \
  ckpt_resume mtp-next-1r mtp-next-1r 1 mtp-next-dp2ep2-layer 4
check "MTP ckpt: mtp-next-ep2 (2 ranks) -> mtp-next-1r, one file, steps 6..10 bit for bit" \
  ckpt_resume mtp-next-1r mtp-next-ep2 2 mtp-next-1r 1 .safetensors

# Two depths (mtp2-next-*): a save holds both depths' layers beside the one shared fc and
# three norms, and its config.json names the depth (num_nextn_predict_layers 2); a plan of
# one depth refuses it, a plan of two refuses a one-depth head (the missing mtp.layers.1),
# nothing written; a resume on another mesh continues the uninterrupted run bit for bit.
mk_depth2() {
  local d=$MK_DIR/depth2 n1 n0 out
  rm -rf "$d"; mkdir -p "$d"
  mk_head || return 1
  mk_run mtp2-next-1r 1 steps=2 save=$d/dir save_shard_size=64K 2> /dev/null > /dev/null || return 1
  grep -q '"num_nextn_predict_layers": 2' $d/dir/config.json || { echo "config.json: no depth 2"; return 1; }
  $MK_PY list $d/dir > $d/list || return 1
  n0=$(grep -c '^mtp\.layers\.0\.' $d/list); n1=$(grep -c '^mtp\.layers\.1\.' $d/list)
  [ "$n0" -gt 0 ] && [ "$n0" -eq "$n1" ] || { echo "depth tensors: $n0 and $n1"; return 1; }
  [ "$(grep -c '^mtp\.\(fc\|norm\|pre_fc_norm_embedding\|pre_fc_norm_hidden\)\.weight ' $d/list)" -eq 4 ] ||
    { echo "expected one mtp.fc and three shared norms"; return 1; }
  out=$(mk_run mtp-next-1r 1 steps=1 load=$d/dir save=$d/x.safetensors 2>&1) && { echo "a 2-depth head loaded into 1 depth"; return 1; }
  echo "$out" | grep -q "whose multi-token-prediction head has 1 depth(s)" || { echo "$out" | tail -2; return 1; }
  out=$(mk_run mtp2-next-1r 1 steps=1 load=$MK_DIR/head.safetensors save=$d/x.safetensors 2>&1) && { echo "a 1-depth head loaded into 2 depths"; return 1; }
  echo "$out" | grep -q "missing tensor mtp.layers.1." || { echo "$out" | tail -2; return 1; }
  [ ! -e $d/x.safetensors ] || { echo "a refused load wrote"; return 1; }
  # a plan without the head carries both depths with mtp_keep_layers 2 (the region sized for
  # two depths from the model's dimensions), byte for byte
  plan_variant mtp-keep-next-1r "$d" mtp_keep_layers=2 || return 1
  out=$(timeout 120 "$d/mtp-keep-next-1r-v/qtrain" data=$MK_DATA seed=11 steps=2 load=$d/dir \
        load_weights_only=1 save=$d/kept.safetensors 2>&1) || { echo "$out" | tail -3; return 1; }
  echo "$out" | grep -q "keeps $((n0 + n1 + 4)) mtp.\* tensors" || { echo "no keep note: $out" | tail -3; return 1; }
  $MK_PY same $d/dir $d/kept.safetensors || return 1
  echo "$n0 + $n1 depth tensors and the 4 shared ones; both refusals clear; mtp_keep_layers 2 keeps them"
}
check "MTP ckpt: two depths saved (config.json num_nextn_predict_layers 2, mtp.layers.0/1 and the shared fc / norms); depth mismatches refused, nothing written; mtp_keep_layers 2 carries them" mk_depth2
check "MTP ckpt: two depths, mtp2-next-1r (1 rank) -> mtp2-next-ep2 (2 ranks), sharded dir, steps 6..10 bit for bit" \
  ckpt_resume mtp2-next-1r mtp2-next-1r 1 mtp2-next-ep2 2
