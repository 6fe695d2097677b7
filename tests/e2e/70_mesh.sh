# 70_mesh.sh - mesh execution under mpiexec (sourced by run_all.sh): data, fsdp, tensor and
# expert parallelism, ZeRO-1, explicit and auto, both decoders, each bit-identical to one rank.
#
# Every mesh plan in configgen/configs/runs/mesh-<model>-<mesh>.yml trains the same global
# batch (4 sequences of 16 tokens, 10 steps) as mesh-<model>-1r; the loss bits and the
# parameter fingerprint of every step must equal the one-rank run's (docs/design.md section 6:
# data, fsdp, tensor and expert degree changes, explicit vs auto, ZeRO-1 on/off: 0 ulp). Every mpiexec runs
# under `timeout`, so a hang fails the check instead of the suite.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
MESH_DATA=tests/golden/e2e/test-next-tiny/tokens.npy


# mesh_run RUN RANKS OUT: 10 steps of build/RUN/qtrain on RANKS ranks, metrics to OUT.
mesh_run() {
  local run=$1 n=$2 out=$3
  if [ "$n" -eq 1 ]; then
    timeout 120 build/$run/qtrain data=$MESH_DATA steps=10 seed=11 metrics=$out
  else
    timeout 120 mpiexec -n "$n" build/$run/qtrain data=$MESH_DATA steps=10 seed=11 metrics=$out
  fi
}

# mesh_same MODEL MESH RANKS [ONE]: the mesh run equals the model's one-rank run (mesh ONE,
# default 1r), bit for bit.
mesh_same() {
  local model=$1 mesh=$2 n=$3 one=${4:-1r} d=$QT_TMP/mesh
  mkdir -p "$d"
  if [ ! -s "$d/$model-$one.det" ]; then
    mesh_run mesh-$model-$one 1 "$d/$model-$one.jsonl" || return 1
    det_fields "$d/$model-$one.jsonl" > "$d/$model-$one.det" || return 1
  fi
  mesh_run mesh-$model-$mesh "$n" "$d/$model-$mesh.jsonl" || return 1
  det_fields "$d/$model-$mesh.jsonl" > "$d/$model-$mesh.det" || return 1
  [ "$(wc -l < "$d/$model-$mesh.det")" -eq 10 ] || { echo "expected 10 metrics lines"; return 1; }
  cmp "$d/$model-$one.det" "$d/$model-$mesh.det" && echo "identical to one rank ($one): $(tail -n 1 "$d/$model-$mesh.det")"
}

# expert parallelism: 4 experts (qwen3-next-tiny) allow EP 4, 6 (qwen3.5-tiny) EP 2; tensor
# parallelism needs the kv heads to split: qwen3-next-tiny (2 kv heads) runs TP 2,
# qwen3.5-tiny (1 kv head) is refused with a message (test_configgen.cpp), and the Qwen3.5
# decoder's TP and EP 4 cells use qwen3.5-tiny-tp (2 kv heads, 8 experts; model "35t")
for cell in next:dp2:2 next:dp2-auto:2 next:dp4:4 next:fsdp2:2 next:fsdp4-auto:4 \
            next:dp2fsdp2:4 next:dp2-g2-zero1:2 next:ep2:2 next:ep4:4 next:dp2ep2:4 \
            next:tp2:2 next:tp2-auto:2 next:fsdp2tp2:4 next:dp2tp2:4 next:ep2tp2:4 \
            next:dp4-auto:4 next:fsdp2-auto:2 next:ep4-auto:4 next:dp2ep2-auto:4 \
            next:fsdp2tp2-auto:4 next:dp2tp2-auto:4 35:dp4-auto:4 35:dp2ep2-auto:4 \
            next:fsdp4:4 next:ep2-auto:2 35:fsdp4:4 35:fsdp2-auto:2 \
            35t:tp2:2 35t:tp2-auto:2 35t:ep4:4 35t:ep2tp2:4 35t:fsdp2tp2:4 \
            35:dp2:2 35:dp2-auto:2 35:dp4:4 35:fsdp2:2 35:fsdp4-auto:4 35:dp2fsdp2:4 \
            35:dp2-g2-zero1:2 35:ep2:2 35:ep2-auto:2 35:dp2ep2:4; do
  model=${cell%%:*}; rest=${cell#*:}; mesh=${rest%%:*}; n=${rest##*:}
  check "mesh $model $mesh ($n ranks) == one rank, 10 steps, bit for bit" mesh_same $model $mesh $n
done

# Expert FFN chunking (expert_chunk_rows 8, issue 21): every expert FFN op loops over chunks
# of 8 rows (one rank's 2 slots; an expert host's slot path; expert x tensor), the weight
# gradient keeps each leaf's rows of one expert whole: the one-rank bits
for cell in next:1r-chunk:1 next:ep2-chunk:2 35t:ep2tp2-chunk:4; do
  model=${cell%%:*}; rest=${cell#*:}; mesh=${rest%%:*}; n=${rest##*:}
  check "mesh $model $mesh ($n ranks, expert FFN in chunks of 8 rows) == one rank, 10 steps, bit for bit" \
    mesh_same $model $mesh $n
done

# per_device_batch_size 0.5 on TP2 (MaxText's fraction: the two tensor ranks share one
# sequence, one sequence per step) against one rank with one sequence per step
for model in next 35t; do
  check "mesh $model tp2 with per_device_batch_size 0.5 (one sequence per step) == one rank, bit for bit" \
    mesh_same $model tp2-half 2 1r-b1
done

mesh_wrong_n() {
  local out rc
  out=$(timeout 60 mpiexec -n 3 build/mesh-next-dp2/qtrain data=$MESH_DATA steps=1 2>&1); rc=$?
  echo "$out" | tail -n 3
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -q "generated for 2 ranks (mesh data 2 x fsdp 1 x tensor 1 x expert 1 x context 1), but this job has 3: run it with mpiexec -n 2"
}
check "mesh: a wrong -n is a clear error on every rank, not a hang" mesh_wrong_n

mesh_negative_control() {
  # another seed on the same mesh must change the bits, or the comparisons above are blind
  local d=$QT_TMP/mesh
  mkdir -p "$d"
  timeout 120 mpiexec -n 2 build/mesh-next-dp2/qtrain data=$MESH_DATA steps=10 seed=12 \
      metrics=$d/neg.jsonl || return 1
  det_fields "$d/neg.jsonl" > "$d/neg.det" || return 1
  [ -s "$d/next-dp2.det" ] || { echo "mesh next dp2 did not run"; return 1; }
  ! cmp -s "$d/next-dp2.det" "$d/neg.det" || { echo "seed 11 and 12 gave identical bits"; return 1; }
}
check "mesh: negative control (another seed changes the bits)" mesh_negative_control
