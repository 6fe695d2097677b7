# 72_mesh_ckpt.sh - checkpoints on meshes (sourced by run_all.sh): a checkpoint saved on any
# mesh is the one-rank file, and resuming it on any mesh continues the uninterrupted
# one-rank run bit for bit.
#
# All mesh-<model>-* plans train the same global batch (4 sequences of 16 tokens), so they
# share the state compatibility hash and each other's optimizer state. Saves gather the
# expert shards and the optimizer blocks (ZeRO-1 / fsdp / expert-split) to rank 0; loads
# let every rank take its part. Every mpiexec runs under `timeout`.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
CKM_DATA=tests/golden/e2e/test-next-tiny/tokens.npy

# ckm_resume MODEL SAVE_MESH SAVE_RANKS LOAD_MESH LOAD_RANKS [EXT]: the mesh-MODEL-* plans
ckm_resume() {
  ckpt_resume mesh-$1-1r mesh-$1-$2 "$3" mesh-$1-$4 "$5" "${6:-}"
}

# ckm_file_eq MODEL MESH RANKS: the checkpoint after 5 steps on MESH is the one-rank one.
ckm_file_eq() {
  local model=$1 mesh=$2 n=$3 d=$QT_TMP/ckm
  mkdir -p "$d"
  [ -s "$d/mesh-$model-1r.safetensors" ] || ckpt_run mesh-$model-1r 1 steps=5 save=$d/mesh-$model-1r.safetensors 2> /dev/null || return 1
  [ -s "$d/mesh-$model-$mesh.safetensors" ] || ckpt_run mesh-$model-$mesh "$n" steps=5 save=$d/mesh-$model-$mesh.safetensors 2> /dev/null || return 1
  ckpt_same_file "$d/mesh-$model-1r.safetensors" "$d/mesh-$model-$mesh.safetensors"
}

check "mesh ckpt: save on DP2xEP2 (4 ranks, one .safetensors file) at step 5, resume on one rank == 10 one-rank steps" \
  ckm_resume next dp2ep2 4 1r 1 .safetensors
check "mesh ckpt: save on DP2xEP2 (4 ranks, sharded directory) at step 5, resume on one rank == 10 one-rank steps" \
  ckm_resume next dp2ep2 4 1r 1
check "mesh ckpt: save on DP2xEP2 (4 ranks) at step 5, resume on DP2 == 10 one-rank steps" \
  ckm_resume next dp2ep2 4 dp2 2
check "mesh ckpt: save on one rank, resume on DP2xEP2 (expert shards, split Adam) == one rank" \
  ckm_resume next 1r 1 dp2ep2 4
check "mesh ckpt: save on one rank, resume on FSDP2 (optimizer blocks) == one rank" \
  ckm_resume next 1r 1 fsdp2 2
check "mesh ckpt: save on DP2 G2 ZeRO-1, resume on EP4 == one rank" \
  ckm_resume next dp2-g2-zero1 2 ep4 4
check "mesh ckpt: FSDP2 checkpoint after 5 steps == the one-rank checkpoint, byte for byte" \
  ckm_file_eq next fsdp2 2
check "mesh ckpt: DP2xEP2 checkpoint after 5 steps == the one-rank checkpoint, byte for byte" \
  ckm_file_eq next dp2ep2 4
check "mesh ckpt: Qwen3.5 save on EP2 at step 5, resume on one rank == 10 one-rank steps" \
  ckm_resume 35 ep2 2 1r 1
check "mesh ckpt: Qwen3.5 EP2 checkpoint after 5 steps == the one-rank checkpoint" \
  ckm_file_eq 35 ep2 2

# Checkpoint windows (issue 21): the *-win plans gather and scatter every parameter in
# windows of whole rows of at most 256 floats (checkpoint_window_floats; one expert of a
# fused expert tensor, a few rows of the embedding; Qwen3.5's GDN projections whole), so
# the staging region holds a window instead of the largest parameter: same files, same bits.
check "mesh ckpt: DP2xEP2 saving in windows of 256 floats (one file) == the one-rank checkpoint, byte for byte" \
  ckm_file_eq next dp2ep2-win 4
check "mesh ckpt: save on DP2xEP2 in windows (sharded directory) at step 5, resume on one rank == 10 one-rank steps" \
  ckm_resume next dp2ep2-win 4 1r 1
check "mesh ckpt: save on one rank, resume on DP2xEP2 loading in windows == one rank" \
  ckm_resume next 1r 1 dp2ep2-win 4
check "mesh ckpt: Qwen3.5 EP2 saving in windows == the one-rank checkpoint" \
  ckm_file_eq 35 ep2-win 2
check "mesh ckpt: Qwen3.5 save on one rank, resume on EP2 loading in windows == one rank" \
  ckm_resume 35 1r 1 ep2-win 2

ckm_grads() {
  # dump_grads on a mesh: the first step's normalised gradient, gathered, equals one rank's
  local d=$QT_TMP/ckm
  mkdir -p "$d"
  ckpt_run mesh-next-1r 1 steps=0 dump_grads=$d/g1.safetensors 2> /dev/null || return 1
  ckpt_run mesh-next-dp2ep2 4 steps=0 dump_grads=$d/g4.safetensors 2> /dev/null || return 1
  ckpt_same_file "$d/g1.safetensors" "$d/g4.safetensors"
}
check "mesh ckpt: dump_grads on DP2xEP2 == one rank's gradient file" ckm_grads

ckm_grads_gather() {
  # the same with the parameters gathered per layer (compact gradient and parameter regions;
  # zero1 plans: global batch 16)
  local d=$QT_TMP/ckm
  mkdir -p "$d"
  ckpt_run zero1-next-1r-b16 1 steps=0 dump_grads=$d/gz1.safetensors 2> /dev/null || return 1
  ckpt_run zero1-next-dp2ep2-g4-z1-gather 4 steps=0 dump_grads=$d/gz4.safetensors 2> /dev/null || return 1
  ckpt_same_file "$d/gz1.safetensors" "$d/gz4.safetensors"
}
check "mesh ckpt: dump_grads on DP2xEP2 ZeRO-1 G4 with param_gather=layer == one rank's gradient file" ckm_grads_gather

ckm_weights_only() {
  # another trajectory (test-next-tiny: the same model, a global batch of 2): the
  # state hash differs, so a mesh load takes the weights only and starts at step 0
  local d=$QT_TMP/ckm out
  [ -e "$d/mesh-next-dp2ep2" ] || ckpt_run mesh-next-dp2ep2 4 steps=5 save=$d/mesh-next-dp2ep2 save_shard_size=64K 2> /dev/null || return 1
  out=$(timeout 120 build/test-next-tiny/qtrain data=$CKM_DATA steps=1 load=$d/mesh-next-dp2ep2 2>&1)
  echo "$out" | tail -n 3
  echo "$out" | grep -q "state hash .* loading the weights only" || return 1
}
check "mesh ckpt: another trajectory (other global batch or schedule) loads the weights only" ckm_weights_only

# ---- sharded checkpoint directories (ckpt_dir.c) with ZeRO-1 ----
# The issue's case: MaxText's failing mesh, DP2 x EP2 with ZeRO-1 and G=4 (global batch 16),
# saves at step 5; DP4 with ZeRO-1 and G=4, and one rank with a batch of 16, resume it.
check "mesh ckpt dir: save on DP2xEP2 ZeRO-1 G4 at step 5, resume on DP4 ZeRO-1 G4 == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b16 zero1-next-dp2ep2-g4-z1 4 zero1-next-dp4-g4 4
check "mesh ckpt dir: save on DP2xEP2 ZeRO-1 G4 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b16 zero1-next-dp2ep2-g4-z1 4 zero1-next-1r-b16 1
check "mesh ckpt dir: save on DP2xTP2 ZeRO-1 G4 (tensor-split weights, split Adam) at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b16 zero1-next-dp2tp2-g4-z1 4 zero1-next-1r-b16 1
check "mesh ckpt dir: Qwen3.5 save on DP2xEP2 ZeRO-1 G4 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume zero1-35-1r-b16 zero1-35-dp2ep2-g4-z1 4 zero1-35-1r-b16 1
# per-layer parameter gathers: the rank holds only its parameter blocks, which a save
# gathers and a load scatters like the Adam blocks
check "mesh ckpt dir: save on DP2xEP2 ZeRO-1 G4 with param_gather=layer at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b16 zero1-next-dp2ep2-g4-z1-gather 4 zero1-next-1r-b16 1
check "mesh ckpt dir: save on one rank at step 5, resume on DP4 ZeRO-1 G4 with param_gather=layer == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b16 zero1-next-1r-b16 1 zero1-next-dp4-g4-gather 4
check "mesh ckpt: save on DP2xFSDP2 ZeRO-1 with param_gather=layer (one file) at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b8 zero1-next-dp2fsdp2-z1-gather 4 zero1-next-1r-b8 1 .safetensors

# ckm_partial_reads: a rank reads only the pieces of its own part. Save on one rank, load on
# DP2 x EP2 + ZeRO-1 (each rank holds half the experts and a quarter of the moments): every
# rank says how many tensors it did not read, and the run still equals the uninterrupted one.
ckm_partial_reads() {
  local d=$QT_TMP/ckpt log n
  ckpt_resume zero1-next-1r-b16 zero1-next-1r-b16 1 zero1-next-dp2ep2-g4-z1 4 || return 1
  log=$d/zero1-next-1r-b16-to-zero1-next-dp2ep2-g4-z1.log
  n=$(grep -c "rank [0-3]/4: note: .* tensors hold only other ranks' parts (experts, optimizer blocks): not read" "$log")
  grep -m1 "not read" "$log"
  [ "$n" -eq 4 ] || { echo "expected the note from all 4 ranks, got $n"; return 1; }
}
check "mesh ckpt dir: loading on DP2xEP2 ZeRO-1, each rank reads only the tensors of its part, same bits" ckm_partial_reads

ckm_dir_same() {
  local d=$QT_TMP/ckm
  [ -e "$d/zero1-next-1r-b16" ] || ckpt_run zero1-next-1r-b16 1 steps=5 save=$d/zero1-next-1r-b16 save_shard_size=64K 2> /dev/null || return 1
  [ -e "$d/zero1-next-dp2ep2-g4-z1" ] || ckpt_run zero1-next-dp2ep2-g4-z1 4 steps=5 save=$d/zero1-next-dp2ep2-g4-z1 save_shard_size=64K 2> /dev/null || return 1
  ckpt_dir_eq "$d/zero1-next-1r-b16" "$d/zero1-next-dp2ep2-g4-z1"
}
check "mesh ckpt dir: the DP2xEP2 ZeRO-1 directory (shards written by 4 ranks) == the one-rank directory" ckm_dir_same
ckm_dir_same_win() {
  local d=$QT_TMP/ckm
  [ -e "$d/zero1-next-1r-b16" ] || ckpt_run zero1-next-1r-b16 1 steps=5 save=$d/zero1-next-1r-b16 save_shard_size=64K 2> /dev/null || return 1
  ckpt_run zero1-next-dp2ep2-g4-z1-win 4 steps=5 save=$d/zero1-win save_shard_size=64K 2> /dev/null || return 1
  ckpt_dir_eq "$d/zero1-next-1r-b16" "$d/zero1-win"
}
check "mesh ckpt dir: the DP2xEP2 ZeRO-1 directory saved in windows of 256 floats == the one-rank directory" ckm_dir_same_win
check "mesh ckpt dir: save on one rank, resume on DP2xEP2 ZeRO-1 G4 loading in windows (optimizer blocks) == 10 one-rank steps" \
  ckpt_resume zero1-next-1r-b16 zero1-next-1r-b16 1 zero1-next-dp2ep2-g4-z1-win 4

# ckm_damaged WHAT: a copy of the DP2xEP2 ZeRO-1 directory with one shard missing or one
# byte short is refused on 4 ranks, naming the file, before any step (no metrics file).
ckm_damaged() {
  local what=$1 d=$QT_TMP/ckm src=$QT_TMP/ckm/zero1-next-dp2ep2-g4-z1 bad=$QT_TMP/ckm/damaged out
  [ -e "$src" ] || ckpt_run zero1-next-dp2ep2-g4-z1 4 steps=5 save=$src save_shard_size=64K 2> /dev/null || return 1
  rm -rf "$bad" "$d/damaged.jsonl"
  cp -r "$src" "$bad"
  local victim=$bad/optimizer-00002-of-$(ls "$bad" | grep -c '^optimizer-' | xargs printf '%05d').safetensors
  [ -f "$victim" ] || { echo "no $victim"; return 1; }
  if [ "$what" = missing ]; then rm "$victim"; else truncate -s -1 "$victim"; fi
  out=$(ckpt_run zero1-next-dp4-g4 4 steps=10 load=$bad metrics=$d/damaged.jsonl 2>&1) && { echo "loaded a damaged checkpoint"; return 1; }
  echo "$out" | grep -m1 "$(basename "$victim")" || { echo "$out" | tail -n 3; return 1; }
  [ ! -e "$d/damaged.jsonl" ] || { echo "a metrics file was written"; return 1; }
}
check "mesh ckpt dir: a directory missing one shard is refused on 4 ranks, naming the file" ckm_damaged missing
check "mesh ckpt dir: a directory with a shard one byte short is refused on 4 ranks, naming the file" ckm_damaged truncated

# ckm_killed: SIGKILL at several moments of a run that saves every step (once its first
# checkpoint exists, then 0 to 0.3 s later: inside a save or a step); each time the directory
# still resumes (the previous or the new checkpoint, never a mix), and the next start removes
# the killed save's temporary directory.
ckm_killed() {
  local d=$QT_TMP/ckm/killed t pid k steps="" out
  mkdir -p "$QT_TMP/ckm"
  rm -rf "$d" "$d".tmp.*
  for t in 0 0.05 0.1 0.15 0.2 0.3; do
    build/zero1-next-1r-b16/qtrain data=$CKM_DATA seed=11 steps=100000 save=$d save_every=1 \
      save_shard_size=64K ${steps:+load=$d} > /dev/null 2>&1 &
    pid=$!
    for k in $(seq 600); do
      [ -e "$d/model.safetensors.index.json" ] && break
      sleep 0.1
    done
    sleep "$t"
    kill -9 "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    out=$(timeout 60 build/zero1-next-1r-b16/qtrain data=$CKM_DATA seed=11 steps=0 load=$d save=$d \
          save_shard_size=64K 2>&1) || { echo "$out" | tail -n 3; return 1; }
    steps="$steps $(echo "$out" | grep -o 'resuming from .* at step [0-9]*' | grep -o '[0-9]*$')"
    ls -d "$d".tmp.* > /dev/null 2>&1 && { echo "temporary left after a clean start"; return 1; }
  done
  echo "resumed at steps:$steps"
}
check "mesh ckpt dir: SIGKILL during save_every=1 never leaves an unloadable checkpoint" ckm_killed

# A checkpoint of another global batch (mesh-next-1r-b1) loaded on DP4: the note that the
# optimizer state's state hash differs (and that its optimizer tensors are skipped) is the
# same on every rank, so rank 0 alone prints it, once (issue 30), for a file and a directory.
ckm_state_hash_note_once() {
  local d=$QT_TMP/ckm-note c n
  mkdir -p "$d"
  for c in ck ck.safetensors; do
    build/mesh-next-1r-b1/qtrain steps=1 data=$CKM_DATA save=$d/$c 2> /dev/null || return 1
    timeout 60 mpiexec -n 4 build/mesh-next-dp4/qtrain steps=1 data=$CKM_DATA load=$d/$c 2> $d/err || { cat $d/err; return 1; }
    grep "note:" $d/err
    n=$(grep -c "optimizer state was saved for state hash" $d/err)
    [ "$n" -eq 1 ] || { echo "$c: the state hash note printed $n times, expected once"; return 1; }
    grep -q "^qtrain: rank 0/4: note: $d/$c.*optimizer state was saved for state hash" $d/err || return 1
    [ "$(grep -c "note: .*skipped .* tensors" $d/err)" -le 1 ] || { echo "$c: a skip note printed per rank"; return 1; }
  done
}
check "mesh ckpt: the state-hash note of a checkpoint of another global batch is printed once, by rank 0" ckm_state_hash_note_once

# Axes of any size (issue 35, docs/determinism.md "Axes of any size"): the optimizer blocks of
# a group of 3, experts 2 a rank of 6, heads split 3 ways (canonical_factor 3) and a context
# axis of 3 gather to the one-rank file and scatter back from it.
check "mesh ckpt: save on FSDP3 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume odd-next-1r-b3 npow2-next-fsdp3 3 odd-next-1r-b3 1 .safetensors
check "mesh ckpt: save on EP3 (6 experts, sharded directory) at step 5, resume on one rank == one rank" \
  ckpt_resume npow2-e6-next-1r-b3 npow2-e6-next-ep3 3 npow2-e6-next-1r-b3 1
check "mesh ckpt: save on TP3 (canonical_factor 3) at step 5, resume on one rank == one rank" \
  ckpt_resume npow2-t3-next-1r npow2-t3-next-tp3 3 npow2-t3-next-1r 1 .safetensors
check "mesh ckpt: save on one rank, resume on TP3 (canonical_factor 3) == one rank" \
  ckpt_resume npow2-t3-next-1r npow2-t3-next-1r 1 npow2-t3-next-tp3 3 .safetensors
check "mesh ckpt: save on CP3 (canonical_factor 3) at step 5, resume on one rank == one rank" \
  ckpt_resume npow2-c3-next-1r npow2-c3-next-cp3 3 npow2-c3-next-1r 1 .safetensors

# Resumes across settings the mesh does not set (session 23). The mesh-next-1r checkpoint
# at step 5 loaded by the same model with packing (pack-next-1r, eos 7) or token dropping
# (cap-next-1r, C = 8): another objective, so another state hash: the weights only, from
# step 0, with the note naming both state hashes (before, both resumed as bit-exact resumes).
# The same checkpoint in bf16 (bf16-next-1r): the state resumes at step 5 (fp32 masters and
# moments in both), with a note and the manifest's note saying it is not bit-exact; a bf16
# save records "dtype" (fp32 saves do not: their bytes are unchanged) and resumes in bf16
# without a note, bit for bit with the uninterrupted bf16 run, and in fp32 with the note.
ckm_setting_change() {
  local d=$QT_TMP/ckm-set p n
  mkdir -p "$d"
  ckpt_run mesh-next-1r 1 steps=5 save=$d/f32.safetensors 2> /dev/null || return 1
  ckpt_header "$d/f32.safetensors" | grep -o '"__metadata__":{[^}]*}' | grep -q '"dtype"' &&
    { echo "an fp32 save records a dtype"; return 1; }
  for p in pack-next-1r cap-next-1r; do
    ckpt_run $p 1 steps=6 load=$d/f32.safetensors metrics=$d/$p.jsonl 2> $d/$p.err ||
      { tail -n 3 $d/$p.err; return 1; }
    grep -q "resuming from" $d/$p.err && { echo "$p resumed the fp32 dropless unpacked state"; return 1; }
    grep -q "optimizer state was saved for state hash .* (model, optimizer, schedule, global batch, objective), this plan's is .*; loading the weights only, from step 0" $d/$p.err ||
      { echo "$p: no state-hash note"; cat $d/$p.err; return 1; }
    n=$(grep -c '"loss_bits"' $d/$p.jsonl)
    [ "$n" -eq 6 ] || { echo "$p: $n steps, expected 6 (from step 0)"; return 1; }
  done
  echo "packing, token dropping: weights only, from step 0"
  # fp32 -> bf16: resumes at step 5, noted in stderr and in the manifest
  ckpt_run bf16-next-1r 1 steps=10 load=$d/f32.safetensors metrics=$d/to16.jsonl 2> $d/to16.err ||
    { tail -n 3 $d/to16.err; return 1; }
  grep -q "resuming from .* at step 5" $d/to16.err || { echo "fp32 -> bf16 did not resume"; cat $d/to16.err; return 1; }
  grep -q "note: .*f32.safetensors was trained in dtype float32 (it records no dtype.*), this plan computes in bfloat16: the weights and Adam moments resume (fp32 in both) at step 5, but not bit-exactly" $d/to16.err ||
    { echo "fp32 -> bf16: no dtype note"; cat $d/to16.err; return 1; }
  head -n 1 $d/to16.jsonl | grep -q '"note":"dtype float32 -> bfloat16 at step 5: the state resumed, not bit-exactly"' ||
    { echo "fp32 -> bf16: the manifest has no note"; head -c 600 $d/to16.jsonl; return 1; }
  [ "$(grep -c '"loss_bits"' $d/to16.jsonl)" -eq 5 ] || { echo "fp32 -> bf16: expected steps 5..9"; return 1; }
  # bf16 save (directory): records dtype; bf16 resumes bit for bit without a note; fp32 notes
  ckpt_run bf16-next-1r 1 steps=10 metrics=$d/b16-ref.jsonl 2> /dev/null || return 1
  ckpt_run bf16-next-1r 1 steps=5 save=$d/b16 save_shard_size=64K 2> /dev/null || return 1
  for n in model optimizer; do
    grep -q '"dtype":"bfloat16"' $d/b16/$n.safetensors.index.json || { echo "$n index: no dtype"; return 1; }
  done
  ckpt_run bf16-next-1r 1 steps=10 load=$d/b16 metrics=$d/b16-res.jsonl 2> $d/b16.err || { tail -n 3 $d/b16.err; return 1; }
  grep -q "dtype" $d/b16.err && { echo "bf16 -> bf16 noted a dtype change"; cat $d/b16.err; return 1; }
  cmp <(det_fields $d/b16-ref.jsonl | tail -n 5) <(det_fields $d/b16-res.jsonl) || { echo "bf16 resume differs"; return 1; }
  ckpt_run mesh-next-1r 1 steps=10 load=$d/b16 metrics=$d/to32.jsonl 2> $d/to32.err || { tail -n 3 $d/to32.err; return 1; }
  grep -q "note: .*b16 was trained in dtype bfloat16, this plan computes in float32: .* at step 5, but not bit-exactly" $d/to32.err ||
    { echo "bf16 -> fp32: no dtype note"; cat $d/to32.err; return 1; }
  head -n 1 $d/to32.jsonl | grep -q '"note":"dtype bfloat16 -> float32 at step 5' || { echo "bf16 -> fp32: no manifest note"; return 1; }
  echo "dtype: resumes with the note both ways; bf16 -> bf16 bit for bit, silent"
}
check "mesh ckpt: a resume into packing or token dropping loads the weights only (another state hash); fp32 <-> bf16 resumes, noted as not bit-exact" \
  ckm_setting_change

# allow_state_change=1 (session 24): a deliberate change of a hashed setting (here token
# dropping, cap-next-1r, and packing, pack-next-1r, from the mesh-next-1r checkpoint at step
# 5, a file and a directory) resumes the Adam moments and the step, with a note naming both
# state hashes and the manifest's note saying it is not bit-exact. A load and re-save
# (steps=5) writes the checkpoint's tensor bytes unchanged under the new plan's state hash;
# with the checkpoint's own hash the key changes nothing (bit for bit, a note). Refused: with
# load_weights_only=1 (exit 2, before anything), without optimizer state (Hugging Face
# weights, a directory without its optimizer index), across a global batch change
# (mesh-next-1r-b1: the data position would not continue); no metrics file is written.
ckm_state_change() {
  local d=$QT_TMP/ckm-sc p ck was now out rc
  rm -rf "$d"; mkdir -p "$d"
  ckpt_run mesh-next-1r 1 steps=5 save=$d/f32.safetensors 2> /dev/null || return 1
  ckpt_run mesh-next-1r 1 steps=5 save=$d/dir save_shard_size=64K 2> /dev/null || return 1
  was=$(ckpt_header $d/f32.safetensors | grep -o '"state_hash":"0x[0-9a-f]*"' | grep -o '0x[0-9a-f]*')
  [ -n "$was" ] || { echo "no state hash in the checkpoint"; return 1; }
  grep -q "\"state_hash\":\"$was\"" $d/dir/optimizer.safetensors.index.json || { echo "dir: another state hash"; return 1; }
  for p in cap-next-1r:f32.safetensors pack-next-1r:dir; do
    ck=$d/${p#*:}; p=${p%%:*}
    ckpt_run $p 1 steps=7 load=$ck allow_state_change=1 metrics=$d/$p.jsonl 2> $d/$p.err ||
      { tail -n 3 $d/$p.err; return 1; }
    grep -q "resuming from $ck at step 5" $d/$p.err || { echo "$p: did not resume at step 5"; cat $d/$p.err; return 1; }
    now=$(grep -o "optimizer state was saved for state hash $was, this plan's is 0x[0-9a-f]*" $d/$p.err | grep -o '0x[0-9a-f]*$')
    [ -n "$now" ] && [ "$now" != "$was" ] || { echo "$p: no note naming both state hashes"; cat $d/$p.err; return 1; }
    grep -q "note: allow_state_change=1: $ck.*state hash $was, this plan's is $now (.*); resuming its Adam moments and step anyway: not a bit-exact resume" $d/$p.err ||
      { echo "$p: note"; cat $d/$p.err; return 1; }
    head -n 1 $d/$p.jsonl | grep -qF "\"note\":\"allow_state_change=1: state hash $was -> $now at step 5: the optimizer state and step resumed, not bit-exactly\"" ||
      { echo "$p: no manifest note"; head -c 800 $d/$p.jsonl; return 1; }
    [ "$(grep -c '"loss_bits"' $d/$p.jsonl)" -eq 2 ] || { echo "$p: expected steps 5 and 6"; return 1; }
    grep -q '"step":5,' $d/$p.jsonl || { echo "$p: no step 5 line"; return 1; }
    echo "$p: resumed at step 5 across state hash $was -> $now"
  done
  # the moments and the step carried as they are: re-saved bytes equal the checkpoint's
  ckpt_run cap-next-1r 1 steps=5 load=$d/f32.safetensors allow_state_change=1 save=$d/re.safetensors 2> /dev/null || return 1
  cmp <(ckpt_data $d/f32.safetensors) <(ckpt_data $d/re.safetensors) || { echo "re-saved state differs"; return 1; }
  ckpt_header $d/re.safetensors | grep -q '"step":"5"' || { echo "re-save: not step 5"; ckpt_header $d/re.safetensors | head -c 400; return 1; }
  ckpt_header $d/re.safetensors | grep -q "\"state_hash\":\"$was\"" && { echo "re-save kept the old state hash"; return 1; }
  # the checkpoint's own state hash: nothing to allow, the same bits as a plain resume
  ckpt_run mesh-next-1r 1 steps=7 load=$d/f32.safetensors metrics=$d/plain.jsonl 2> /dev/null || return 1
  ckpt_run mesh-next-1r 1 steps=7 load=$d/f32.safetensors allow_state_change=1 metrics=$d/same.jsonl 2> $d/same.err || { tail -n 3 $d/same.err; return 1; }
  grep -q "note: allow_state_change=1: $d/f32.safetensors has this plan's state hash: nothing to allow" $d/same.err || { echo "same hash: no note"; cat $d/same.err; return 1; }
  cmp <(det_fields $d/plain.jsonl) <(det_fields $d/same.jsonl) || { echo "same hash: bits differ"; return 1; }
  head -n 1 $d/same.jsonl | grep -q '"note":null' || { echo "same hash: a manifest note"; return 1; }
  # refusals, before any step, without a metrics file
  out=$(ckpt_run cap-next-1r 1 steps=7 load=$d/f32.safetensors allow_state_change=1 load_weights_only=1 metrics=$d/r1.jsonl 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "allow_state_change=1 and load_weights_only=1 contradict each other" || { echo "with load_weights_only=1: exit $rc"; echo "$out" | tail -n 2; return 1; }
  out=$(ckpt_run mesh-next-1r 1 steps=7 load=tests/golden/e2e/test-next-tiny/init.safetensors allow_state_change=1 metrics=$d/r2.jsonl 2>&1) &&
    { echo "HF weights: accepted"; return 1; }
  echo "$out" | grep -q "init.safetensors: allow_state_change=1, but the file holds no optimizer state (no optimizer.\* tensors)" || { echo "$out" | tail -n 2; return 1; }
  cp -r $d/dir $d/noidx && rm $d/noidx/optimizer.safetensors.index.json
  out=$(ckpt_run cap-next-1r 1 steps=7 load=$d/noidx allow_state_change=1 metrics=$d/r3.jsonl 2>&1) && { echo "no optimizer index: accepted"; return 1; }
  echo "$out" | grep -q "allow_state_change=1, but $d/noidx/optimizer.safetensors.index.json is missing" || { echo "$out" | tail -n 2; return 1; }
  out=$(ckpt_run mesh-next-1r-b1 1 steps=7 load=$d/f32.safetensors allow_state_change=1 metrics=$d/r4.jsonl 2>&1) && { echo "global batch 1: accepted"; return 1; }
  echo "$out" | grep -q "allow_state_change=1 cannot resume a checkpoint of another global batch: it was trained with 4 sequences a step (data position 20 at step 5), this plan trains 1" ||
    { echo "$out" | tail -n 2; return 1; }
  ls $d/r?.jsonl 2> /dev/null && { echo "a refused run wrote its metrics file"; return 1; }
  echo "refused: with load_weights_only=1, without optimizer state (file, directory), another global batch"
}
check "mesh ckpt: allow_state_change=1 resumes the moments and step across a state-hash change (packing, token dropping), noted as not bit-exact; refused where it cannot apply" \
  ckm_state_change

# steps= is a total (session 23): a checkpoint at step 5 with steps=3 is refused (exit 2)
# naming both and the steps= that trains 3 more, before the metrics file or a save is
# written; steps=5 and steps=0 train nothing, with a note (a load and re-save, dump_grads=).
ckm_steps_before_ckpt() {
  local d=$QT_TMP/ckm-end rc out
  mkdir -p "$d"
  ckpt_run mesh-next-1r 1 steps=5 save=$d/ck.safetensors 2> /dev/null || return 1
  out=$(ckpt_run mesh-next-1r 1 steps=3 load=$d/ck.safetensors metrics=$d/m.jsonl save=$d/out 2>&1); rc=$?
  [ $rc -eq 2 ] || { echo "exit $rc, expected 2"; echo "$out" | tail -n 3; return 1; }
  echo "$out" | grep -q "qtrain: $d/ck.safetensors resumes at step 5, but steps=3 ends before it: steps= is the total to train to, not the steps to add, so nothing would train; give steps=8 to train 3 more (steps=5 trains none)" ||
    { echo "message:"; echo "$out" | tail -n 3; return 1; }
  [ -e $d/m.jsonl ] || [ -e $d/out ] && { echo "refused, but wrote the metrics file or the save"; return 1; }
  echo "$out" | grep "steps=3 ends"
  out=$(ckpt_run mesh-next-1r 1 steps=5 load=$d/ck.safetensors metrics=$d/m5.jsonl 2>&1) || { echo "$out" | tail -n 3; return 1; }
  echo "$out" | grep -q "note: .*ck.safetensors resumes at step 5 and steps=5: no step trains" || { echo "steps=5: no note"; return 1; }
  out=$(ckpt_run mesh-next-1r 1 steps=0 load=$d/ck.safetensors 2>&1) || { echo "$out" | tail -n 3; return 1; }
  echo "$out" | grep -q "note: .*resumes at step 5 and steps=0: no step trains" || { echo "steps=0: no note"; return 1; }
}
check "mesh ckpt: load= of a step-5 checkpoint with steps=3 is refused naming both (steps=8 trains 3 more); steps=5 / steps=0 train nothing, with a note" \
  ckm_steps_before_ckpt
