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

# ckm_run RUN RANKS ARGS...: build/RUN/qtrain on RANKS ranks with the matrix's data and seed.
ckm_run() {
  local run=$1 n=$2; shift 2
  if [ "$n" -eq 1 ]; then
    timeout 120 build/$run/qtrain data=$CKM_DATA seed=11 "$@"
  else
    timeout 120 mpiexec -n "$n" build/$run/qtrain data=$CKM_DATA seed=11 "$@"
  fi
}


# ckm_ref MODEL: the uninterrupted 10-step one-rank run's fields of steps 6..10 (cached)
ckm_ref() {
  local model=$1 d=$QT_TMP/ckm
  mkdir -p "$d"
  if [ ! -s "$d/$model-ref.det" ]; then
    ckm_run mesh-$model-1r 1 steps=10 metrics=$d/$model-ref.jsonl 2> /dev/null || return 1
    det_fields "$d/$model-ref.jsonl" | tail -n 5 > "$d/$model-ref.det" || return 1
  fi
}

# ckm_resume MODEL SAVE_MESH SAVE_RANKS LOAD_MESH LOAD_RANKS: save at step 5 on one mesh,
# train on to step 10 on another; steps 6..10 must equal the uninterrupted one-rank run.
ckm_resume() {
  local model=$1 sm=$2 sn=$3 lm=$4 ln=$5 d=$QT_TMP/ckm
  ckm_ref "$model" || return 1
  local ck=$d/$model-$sm.safetensors tag=$model-$sm-to-$lm
  if [ ! -s "$ck" ]; then
    ckm_run mesh-$model-$sm "$sn" steps=5 save=$ck 2> "$d/$tag.save.log" \
      || { tail -n 5 "$d/$tag.save.log"; return 1; }
  fi
  ckm_run mesh-$model-$lm "$ln" steps=10 load=$ck metrics=$d/$tag.jsonl 2> "$d/$tag.log" \
    || { tail -n 5 "$d/$tag.log"; return 1; }
  grep -q "resuming from .* at step 5" "$d/$tag.log" || { echo "did not resume at step 5"; tail -n 5 "$d/$tag.log"; return 1; }
  det_fields "$d/$tag.jsonl" > "$d/$tag.det" || return 1
  [ "$(wc -l < "$d/$tag.det")" -eq 5 ] || { echo "expected 5 metrics lines (steps 6..10)"; return 1; }
  cmp "$d/$model-ref.det" "$d/$tag.det" && echo "steps 6..10 identical: $(tail -n 1 "$d/$tag.det")"
}

# ckm_same_file A B: two checkpoints hold the same bytes: the data region bit for bit and
# the header equal once the plan hash and run name values (which name the mesh) are blanked.
ckm_header() {
  local n
  n=$(od -An -tu8 -N8 "$1" | tr -d ' ') || return 1
  head -c $((8 + n)) "$1" | tail -c "$n" \
    | sed -e 's/"plan_hash":"[^"]*"/"plan_hash":""/' -e 's/"run_name":"[^"]*"/"run_name":""/' -e 's/ *$//'
}
ckm_data() {
  local n
  n=$(od -An -tu8 -N8 "$1" | tr -d ' ') || return 1
  tail -c +$((9 + n)) "$1"
}
ckm_same_file() {
  cmp <(ckm_header "$1") <(ckm_header "$2") || { echo "headers differ"; return 1; }
  cmp <(ckm_data "$1") <(ckm_data "$2") || { echo "tensor bytes differ"; return 1; }
  echo "identical: $(ckm_data "$1" | wc -c) tensor bytes, state hash $(ckm_header "$1" | grep -o '"state_hash":"[^"]*"')"
}

# ckm_file_eq MODEL MESH RANKS: the checkpoint after 5 steps on MESH is the one-rank one.
ckm_file_eq() {
  local model=$1 mesh=$2 n=$3 d=$QT_TMP/ckm
  mkdir -p "$d"
  [ -s "$d/$model-1r.safetensors" ] || ckm_run mesh-$model-1r 1 steps=5 save=$d/$model-1r.safetensors 2> /dev/null || return 1
  [ -s "$d/$model-$mesh.safetensors" ] || ckm_run mesh-$model-$mesh "$n" steps=5 save=$d/$model-$mesh.safetensors 2> /dev/null || return 1
  ckm_same_file "$d/$model-1r.safetensors" "$d/$model-$mesh.safetensors"
}

check "mesh ckpt: save on DP2xEP2 (4 ranks) at step 5, resume on one rank == 10 one-rank steps" \
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

ckm_grads() {
  # dump_grads on a mesh: the first step's normalised gradient, gathered, equals one rank's
  local d=$QT_TMP/ckm
  mkdir -p "$d"
  ckm_run mesh-next-1r 1 steps=0 dump_grads=$d/g1.safetensors 2> /dev/null || return 1
  ckm_run mesh-next-dp2ep2 4 steps=0 dump_grads=$d/g4.safetensors 2> /dev/null || return 1
  ckm_same_file "$d/g1.safetensors" "$d/g4.safetensors"
}
check "mesh ckpt: dump_grads on DP2xEP2 == one rank's gradient file" ckm_grads

ckm_weights_only() {
  # another trajectory (test-next-tiny: the same model, a global batch of 2): the
  # state hash differs, so a mesh load takes the weights only and starts at step 0
  local d=$QT_TMP/ckm out
  ckm_ref next || return 1
  [ -s "$d/next-dp2ep2.safetensors" ] || ckm_run mesh-next-dp2ep2 4 steps=5 save=$d/next-dp2ep2.safetensors 2> /dev/null || return 1
  out=$(timeout 120 build/test-next-tiny/qtrain data=$CKM_DATA steps=1 load=$d/next-dp2ep2.safetensors 2>&1)
  echo "$out" | tail -n 3
  echo "$out" | grep -q "state hash .* loading the weights only" || return 1
}
check "mesh ckpt: another trajectory (other global batch or schedule) loads the weights only" ckm_weights_only
