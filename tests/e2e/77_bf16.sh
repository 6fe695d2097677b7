# 77_bf16.sh - bf16 mixed precision (dtype: bfloat16) end to end (sourced by run_all.sh): the
# determinism guarantees of docs/determinism.md in bf16, each 0 ulp in the loss bits and the
# parameter fingerprint (docs/precision.md, "Executing bf16 plans", Determinism):
#   mesh cells (data, fsdp, tensor, expert, their products, explicit and auto) == one rank;
#   vocab-parallel logits (vocab_blocks > 1) == one rank with the same vocab_blocks;
#   context 4 with kv heads shared by several context ranks (the backward's fp32 chain) ==
#   one rank with the same context_blocks;
#   G splits of the same global batch; remat full == no remat; scanned == unrolled layers;
#   ZeRO-1 with G = 4 on DP2 x EP2 (bf16 compute copy gathered), per-layer gradient
#   reduction and per-layer bf16 parameter gathers on DP2 x TP2 == one rank; a checkpoint
#   saved on one rank resumed on a 4-rank mesh, and one saved on the ZeRO-1 mesh resumed
#   on one rank == the uninterrupted run; an x86-64-v3 (AVX2 emulation of VDPBF16PS)
#   build == native.
# Plus: bf16 trains (the loss falls), stays near fp32 (stated bounds), and differs from fp32
# (the bf16 path is really taken). Run files: configgen/configs/runs/bf16-*.yml, each a
# copy of an fp32 run with `dtype: "bfloat16"`. Every mpiexec runs under `timeout`.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
B16_DATA=tests/golden/e2e/test-next-tiny/tokens.npy

# b16_det RUN RANKS STEPS [EXTRA...]: runs build/RUN/qtrain once (cached) and leaves its
# "step loss_bits fingerprint" lines in $QT_TMP/bf16/RUN.det.
b16_det() {
  local run=$1 n=$2 steps=$3 d=$QT_TMP/bf16
  shift 3
  mkdir -p "$d"
  [ -s "$d/$run.det" ] && return 0
  rm -f "$d/$run.jsonl"
  if [ "$n" -eq 1 ]; then
    timeout 120 build/$run/qtrain data=$B16_DATA steps=$steps seed=11 metrics=$d/$run.jsonl "$@" \
      > "$d/$run.out" 2>&1 || { tail -5 "$d/$run.out"; return 1; }
  else
    timeout 120 mpiexec -n "$n" build/$run/qtrain data=$B16_DATA steps=$steps seed=11 \
      metrics=$d/$run.jsonl "$@" > "$d/$run.out" 2>&1 || { tail -5 "$d/$run.out"; return 1; }
  fi
  det_fields "$d/$run.jsonl" > "$d/$run.tmp" || return 1
  [ "$(wc -l < "$d/$run.tmp")" -eq "$steps" ] || { echo "$run: expected $steps metrics lines"; return 1; }
  mv "$d/$run.tmp" "$d/$run.det"
}

# b16_same REF REF_RANKS RUN RANKS STEPS: RUN's fields equal REF's, bit for bit.
b16_same() {
  local ref=$1 rn=$2 run=$3 n=$4 steps=$5 d=$QT_TMP/bf16
  b16_det "$ref" "$rn" "$steps" && b16_det "$run" "$n" "$steps" || return 1
  if ! cmp -s "$d/$ref.det" "$d/$run.det"; then
    echo "$run vs $ref: first difference: $(diff "$d/$ref.det" "$d/$run.det" | sed -n 2,4p | tr '\n' ' ')"
    return 1
  fi
  echo "identical to $ref over $steps steps: $(tail -n 1 "$d/$run.det")"
}

for cell in next:dp2:2 next:fsdp2:2 next:ep2:2 next:tp2:2 next:dp2tp2:4 next:dp2ep2-auto:4 \
            next:ep2tp2:4 35:dp2:2 35:ep2:2 35:dp2ep2-auto:4 35t:tp2:2 35t:ep2tp2:4; do
  model=${cell%%:*}; rest=${cell#*:}; mesh=${rest%%:*}; n=${rest##*:}
  check "bf16 mesh $model $mesh ($n ranks) == one rank, 10 steps, bit for bit" \
    b16_same bf16-$model-1r 1 bf16-$model-$mesh "$n" 10
done
# vocab-parallel logits and blocked cross entropy in bf16 (docs/precision.md, XENT): the
# boundary widens the logits, the exchanged row maxima and block sums are fp32, d.logits is
# rounded once; each mesh == one bf16 rank with the same vocab_blocks
for cell in next-1r-vb2:next-tp2:2 next-1r-vb4:next-tp2-vb4:2 next-1r-vb2:next-dp2tp2:4 \
            next-1r-vb2:next-ep2tp2:4 35t-1r-vb2:35t-tp2:2; do
  one=${cell%%:*}; rest=${cell#*:}; mesh=${rest%%:*}; n=${rest##*:}
  check "bf16 vocab-parallel $mesh ($n ranks) == one rank with the same vocab_blocks ($one), 10 steps, bit for bit" \
    b16_same bf16-vocab-$one 1 bf16-vocab-$mesh "$n" 10
done
# not vacuous: vocab blocks change the bf16 one-rank bits (qwen3.5 tiny; next tiny's 64
# columns happen to sum to the same bits over these 10 steps)
b16_vb_differs() {
  b16_det bf16-35t-1r 1 10 && b16_det bf16-vocab-35t-1r-vb2 1 10 || return 1
  ! cmp -s "$QT_TMP/bf16/bf16-35t-1r.det" "$QT_TMP/bf16/bf16-vocab-35t-1r-vb2.det" ||
    { echo "vocab_blocks 2 left the bf16 bits unchanged"; return 1; }
  echo "bf16-35t-1r: $(tail -n 1 "$QT_TMP/bf16/bf16-35t-1r.det"); vb2: $(tail -n 1 "$QT_TMP/bf16/bf16-vocab-35t-1r-vb2.det")"
}
check "bf16 vocab_blocks 2 changes the one-rank bits (qwen3.5 tiny, the sums are blocked)" b16_vb_differs
# context parallelism with kv heads shared by several context ranks (docs/context.md): the
# chain hands fp32 dk and dv from rank to rank, the last member rounds the complete sums
# once; CP4 with 1 kv head (one chain of 4) and with 2 kv heads (two chains of 2) == one
# bf16 rank with the same context_blocks
for cell in next1kv next4k; do
  check "bf16 context 4 with shared kv heads ($cell: kv chains) == one rank with context_blocks 4, 10 steps, bit for bit" \
    b16_same bf16-ctx-$cell-1r-nb4 1 bf16-ctx-$cell-cp4 4 10
done
b16_chain_plan() {
  local p=generated/bf16-ctx-next1kv-cp4/plan.txt
  grep -Eq "act_grad f32 .* d\.L3\.attn\.k_rope$" "$p" &&
    grep -Eq "ctx_chain_send +r:d\.L3\.attn\.k_rope r:d\.L3\.attn\.v_heads" "$p" &&
    grep -Eq "round_bf16 +w:d\.L3\.attn\.k_rope\.bf16 r:d\.L3\.attn\.k_rope" "$p" &&
    grep -E "round_bf16 +w:d\.L3\.attn\.v_heads\.bf16" "$p"
}
check "bf16 kv chain plan: dk, dv fp32 along the chain, one ROUND_BF16 after CTX_CHAIN_SEND" b16_chain_plan
# both together and with MTP, variants of committed runs (plan_variant, run_all.sh):
# CP2 x TP2 with 1 kv head a tensor rank (chains of 2) and vocab-parallel logits == one bf16
# rank with vocab_blocks 2; the MTP head's cross entropy on vocab-parallel TP2 == one bf16
# rank with vocab_blocks 2
b16_var_same() {
  local d=$QT_TMP/bf16/var one=$1 mesh=$2 a b
  a=$(det_fields "$d/$one.jsonl") b=$(det_fields "$d/$mesh.jsonl")
  [ "$(echo "$a" | wc -l)" -eq 10 ] && [ "$a" = "$b" ] ||
    { echo "$mesh differs from $one: $(diff <(echo "$a") <(echo "$b") | sed -n 2,3p | tr '\n' ' ')"; return 1; }
  echo "$mesh == $one: $(echo "$b" | tail -n 1)"
}
b16_var_run() {
  local d=$QT_TMP/bf16/var run=$1 n=$2 name=$3
  rm -f "$d/$name.jsonl"
  if [ "$n" -eq 1 ]; then
    timeout 120 "$d/$run-v/qtrain" data=$B16_DATA seed=11 steps=10 metrics="$d/$name.jsonl" > "$d/$name.out" 2>&1
  else
    timeout 120 mpiexec -n "$n" "$d/$run-v/qtrain" data=$B16_DATA seed=11 steps=10 metrics="$d/$name.jsonl" > "$d/$name.out" 2>&1
  fi || { tail -n 3 "$d/$name.out"; return 1; }
}
b16_both() {
  local d=$QT_TMP/bf16/var
  mkdir -p "$d"
  plan_variant ctx-next4h-1r-nb4 "$d" dtype=bfloat16 base_num_kv_heads=2 vocab_blocks=2 &&
    b16_var_run ctx-next4h-1r-nb4 1 one &&
    plan_variant ctx-next4h-cp2tp2 "$d" dtype=bfloat16 base_num_kv_heads=2 vocab_parallel=true &&
    b16_var_run ctx-next4h-cp2tp2 4 mesh &&
    grep -q ctx_chain_send "$d/ctx-next4h-cp2tp2-v/plan/ctx-next4h-cp2tp2/plan.txt" &&
    b16_var_same one mesh
}
check "bf16 CP2 x TP2 with shared kv heads (kv chains) and vocab-parallel logits == one rank (vocab_blocks 2, context_blocks 4), bit for bit" b16_both
b16_mtp_vocab() {
  local d=$QT_TMP/bf16/var
  mkdir -p "$d"
  plan_variant mtp-bf16-next-1r "$d" vocab_blocks=2 && b16_var_run mtp-bf16-next-1r 1 mtp-one &&
    plan_variant mtp-bf16-next-1r "$d" num_ranks=2 ici_tensor_parallelism=2 ici_fsdp_parallelism=1 \
      per_device_batch_size=2 vocab_parallel=true &&
    b16_var_run mtp-bf16-next-1r 2 mtp-tp2 && b16_var_same mtp-one mtp-tp2
}
check "bf16 MTP with vocab-parallel logits: TP2 == one rank with vocab_blocks 2, bit for bit" b16_mtp_vocab
for run in bf16-next-1r-chunk:1 bf16-next-ep2-chunk:2; do
  check "bf16 expert FFN in chunks of 8 rows (${run%%:*}) == one rank, 10 steps, bit for bit" \
    b16_same bf16-next-1r 1 ${run%%:*} ${run##*:} 10
done
check "bf16 G splits: b2 G2 == b4 G1, 10 steps, bit for bit" \
  b16_same bf16-accum-b4g1 1 bf16-accum-b2g2 1 10
check "bf16 G splits: b1 G4 == b4 G1, 10 steps, bit for bit" \
  b16_same bf16-accum-b4g1 1 bf16-accum-b1g4 1 10
check "bf16 remat full == no remat, 10 steps, bit for bit" \
  b16_same bf16-next-tiny 1 bf16-remat-full-next 1 10
check "bf16 scanned layers == unrolled (16 layers), 4 steps, bit for bit" \
  b16_same bf16-scan-next-16l-unrolled 1 bf16-scan-next-16l-scan 1 4
for m in next 35; do
  check "bf16 zero1 $m DP2 x EP2 G4 (bf16 compute copy gathered) == one rank, 20 steps" \
    b16_same bf16-$m-1r-b16 1 bf16-$m-dp2ep2-g4-z1 4 20
done
check "bf16 zero1 next DP2 x TP2 G4, per-layer gradient reduction == one rank, 20 steps" \
  b16_same bf16-next-1r-b16 1 bf16-next-dp2tp2-g4-z1-layer 4 20
check "bf16 zero1 next DP2 x TP2 G4, per-layer bf16 parameter gathers (ZeRO-3) == one rank, 20 steps" \
  b16_same bf16-next-1r-b16 1 bf16-next-dp2tp2-g4-z1-gather 4 20

b16_resume_from_zero1() {
  # 10 steps on DP2 x EP2 G4 with ZeRO-1 (each rank saves its master and Adam blocks, gathered
  # into the global layout), resumed on one rank for steps 11..20: the uninterrupted bits
  local d=$QT_TMP/bf16
  b16_det bf16-next-1r-b16 1 20 || return 1
  rm -rf "$d/ckz" "$d/from-z1.jsonl"
  timeout 120 mpiexec -n 4 build/bf16-next-dp2ep2-g4-z1/qtrain data=$B16_DATA steps=10 seed=11 \
    save=$d/ckz > "$d/savez.out" 2>&1 || { tail -5 "$d/savez.out"; return 1; }
  timeout 120 build/bf16-next-1r-b16/qtrain data=$B16_DATA steps=20 seed=11 load=$d/ckz \
    metrics=$d/from-z1.jsonl > "$d/resumez.out" 2>&1 || { tail -5 "$d/resumez.out"; return 1; }
  det_fields "$d/from-z1.jsonl" > "$d/from-z1.det" || return 1
  tail -n 10 "$d/bf16-next-1r-b16.det" > "$d/tail10.det"
  cmp "$d/tail10.det" "$d/from-z1.det" && echo "steps 11..20 on one rank == uninterrupted: $(tail -n 1 "$d/from-z1.det")"
}
check "bf16 checkpoint: saved on ZeRO-1 DP2 x EP2 G4, resumed on one rank == uninterrupted, bit for bit" \
  b16_resume_from_zero1

b16_resume_mesh() {
  # 5 steps on one rank, saved; resumed on DP2 x EP2 (auto) for steps 6..10: the masters and
  # Adam moments are fp32 in the file, the compute copy is rebuilt by rounding: the same
  # bits as the uninterrupted one-rank run
  local d=$QT_TMP/bf16
  b16_det bf16-next-1r 1 10 || return 1
  rm -rf "$d/ck" "$d/resumed.jsonl"
  timeout 120 build/bf16-next-1r/qtrain data=$B16_DATA steps=5 seed=11 save=$d/ck \
    > "$d/save.out" 2>&1 || { tail -5 "$d/save.out"; return 1; }
  timeout 120 mpiexec -n 4 build/bf16-next-dp2ep2-auto/qtrain data=$B16_DATA steps=10 seed=11 \
    load=$d/ck metrics=$d/resumed.jsonl > "$d/resume.out" 2>&1 || { tail -5 "$d/resume.out"; return 1; }
  det_fields "$d/resumed.jsonl" > "$d/resumed.det" || return 1
  tail -n 5 "$d/bf16-next-1r.det" > "$d/tail5.det"
  cmp "$d/tail5.det" "$d/resumed.det" && echo "steps 6..10 on 4 ranks == uninterrupted: $(tail -n 1 "$d/resumed.det")"
}
check "bf16 checkpoint: saved on one rank, resumed on DP2 x EP2 == uninterrupted, bit for bit" \
  b16_resume_mesh

b16_isa() {
  # the same bf16 plan built for x86-64-v3 (no AVX-512: the AVX2 emulation of VDPBF16PS and
  # of VCVTNEPS2BF16) against the native build (the instructions where the CPU has them);
  # the objects of 20_determinism's x86-64-v3 build are reused
  local d=$QT_TMP/isa
  mkdir -p "$d"
  make --no-print-directory -j2 BUILD=$d/build ARCH=-march=x86-64-v3 \
    -o generated/bf16-next-tiny/plan.c $d/build/bf16-next-tiny/qtrain > $d/make16.log 2>&1 \
    || { tail -20 $d/make16.log; return 1; }
  build/bf16-next-tiny/qtrain steps=4 seed=11 data=$B16_DATA metrics=$d/n16.jsonl > /dev/null || return 1
  $d/build/bf16-next-tiny/qtrain steps=4 seed=11 data=$B16_DATA metrics=$d/v16.jsonl > /dev/null || return 1
  det_fields $d/n16.jsonl > $d/n16.det && det_fields $d/v16.jsonl > $d/v16.det || return 1
  cmp $d/n16.det $d/v16.det && echo "x86-64-v3 == native (bf16): $(tail -n 1 $d/v16.det)"
}
check "bf16 ISA independence: an x86-64-v3 build gives the native build's bits" b16_isa

b16_isa_bench() {
  # the bench model in bf16 (d 512, 16 experts of 256, vocab 4096: the shapes where the bf16
  # kernels take their wide forms: a weight gradient's leaves in one pass, the expert FFN's
  # panels, the canonical tiles' block order) against the x86-64-v3 build, whose emulation
  # declines those forms: 2 steps, the same bits
  local d=$QT_TMP/isa
  mkdir -p "$d"
  make --no-print-directory -j2 BUILD=$d/build ARCH=-march=x86-64-v3 \
    -o generated/bench-bf16/plan.c $d/build/bench-bf16/qtrain > $d/makeb.log 2>&1 \
    || { tail -20 $d/makeb.log; return 1; }
  build/bench-bf16/qtrain steps=2 metrics=$d/nb.jsonl 2> $d/nb.err > /dev/null || { cat $d/nb.err; return 1; }
  $d/build/bench-bf16/qtrain steps=2 metrics=$d/vb.jsonl 2> $d/vb.err > /dev/null || { cat $d/vb.err; return 1; }
  det_fields $d/nb.jsonl > $d/nb.det && det_fields $d/vb.jsonl > $d/vb.det || return 1
  cmp $d/nb.det $d/vb.det && echo "x86-64-v3 == native (bench-bf16): $(tail -n 1 $d/vb.det)"
}
check "bf16 ISA independence at the bench model's shapes: x86-64-v3 == native, 2 steps" b16_isa_bench

b16_vs_fp32() {
  # bf16 trains and stays near fp32 on the same data, seed and schedule. Bounds (stated;
  # measured when written, docs/precision.md): step 0 (the same initial masters, only the
  # arithmetic differs) |gap| <= 0.5% of the fp32 loss (measured 0.16%); the mean loss of
  # steps 6..10 within 3% of fp32's (measured 0.1%; single steps differ by up to 5%, the
  # trajectories part at lr 3e-3 on 4 sequences a step); the bits differ (the bf16 path is
  # really taken) and the mean of the last 5 steps is below the first loss
  local d=$QT_TMP/bf16
  b16_det bf16-next-1r 1 10 || return 1
  timeout 120 build/mesh-next-1r/qtrain data=$B16_DATA steps=10 seed=11 metrics=$d/f32.jsonl \
    > /dev/null 2>&1 || return 1
  det_fields "$d/f32.jsonl" > "$d/f32.det" || return 1
  ! cmp -s "$d/f32.det" "$d/bf16-next-1r.det" || { echo "bf16 and fp32 runs have the same bits"; return 1; }
  loss_near "$d/f32.jsonl" "$d/bf16-next-1r.jsonl" 10 5 0.005 0.03 1
}
check "bf16 stays near fp32 (step 0 within 0.5%, last 5 steps' mean within 3%), trains, takes the bf16 path" b16_vs_fp32

# The z-loss in bf16 on a mesh (issue 33): bf16-next-1r and bf16-next-dp2tp2 with
# z_loss_multiplier 1e-2 (plan_variant), 10 steps: loss bits, fingerprint and z_loss equal.
b16_z_mesh() {
  local d=$QT_TMP/bf16/z r a b
  mkdir -p "$d"
  for r in bf16-next-1r bf16-next-dp2tp2; do plan_variant "$r" "$d" z_loss_multiplier=1e-2 || return 1; done
  timeout 120 "$d/bf16-next-1r-v/qtrain" data=$B16_DATA steps=10 seed=11 metrics=$d/one.jsonl \
    > "$d/one.out" 2>&1 || { tail -5 "$d/one.out"; return 1; }
  timeout 120 mpiexec -n 4 "$d/bf16-next-dp2tp2-v/qtrain" data=$B16_DATA steps=10 seed=11 \
    metrics=$d/mesh.jsonl > "$d/mesh.out" 2>&1 || { tail -5 "$d/mesh.out"; return 1; }
  a=$(det_fields "$d/one.jsonl"; grep -v '^{"manifest"' "$d/one.jsonl" | grep -o '"z_loss":[0-9.e+-]*')
  b=$(det_fields "$d/mesh.jsonl"; grep -v '^{"manifest"' "$d/mesh.jsonl" | grep -o '"z_loss":[0-9.e+-]*')
  [ "$(echo "$a" | grep -c z_loss)" -eq 10 ] || { echo "expected 10 z_loss fields"; return 1; }
  [ "$a" = "$b" ] || { echo "differs: $(diff <(echo "$a") <(echo "$b") | head -4)"; return 1; }
  echo "identical over 10 steps: $(det_fields "$d/mesh.jsonl" | tail -n 1)"
}
check "bf16 z-loss: DP2 x TP2 == one rank, 10 steps, bit for bit (loss, fingerprint, z_loss)" b16_z_mesh
