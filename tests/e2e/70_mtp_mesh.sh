# 70_mtp_mesh.sh - the multi-token-prediction head (issue 31, docs/model.md 1.8) on meshes
# (sourced by run_all.sh): every mtp-* cell trains the global batch of its one-rank run
# (4 sequences of 16 tokens, 10 steps, the tiny test data) and must give its loss bits and
# parameter fingerprint on every step (same_bits, docs/design.md section 6: 0 ulp). The head
# adds STACK / SPLIT / XENT_MTP and a full-attention layer, so these cells cover what the
# main model's matrices (70_mesh, 71_context, 74_zero1, 77_bf16) cover without it: data +
# ZeRO-1 + accumulation, fsdp (auto), tensor, expert, context (the shifted inputs of a
# block's last positions are the next context rank's tokens, read from the data), remat,
# bf16, per-layer reduction and gathers (the head's parameters in the global range), scan,
# packing
# (DP2 x EP2 and CP2: the MTP normaliser counted per step in a pre-pass, summed exactly over
# the batch ranks); two depths (DP2 + ZeRO-1 + G2, EP2, TP2, CP2: the depths' shared fc and
# norms, one WGRAD over their rows stacked per leaf); the z-loss (bf16 DP2 x EP2,
# vocab-parallel TP2); and the head is not vacuous (its run differs from the model without
# it, two depths from one).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
MTP_DIR=$QT_TMP/mtp-mesh
for cell in mtp-next-1r:mtp-next-dp2-g2-zero1:2 mtp-next-1r:mtp-next-fsdp2-auto:2 \
            mtp-next-1r:mtp-next-tp2:2 mtp-next-1r:mtp-next-ep2:2 \
            mtp-next-1r:mtp-next-remat-full:1 mtp-next-1r-nb4:mtp-next-cp2:2 \
            mtp-35-1r:mtp-35-dp2ep2:4 mtp-bf16-next-1r:mtp-bf16-next-dp2ep2:4 \
            mtp-next-1r:mtp-next-dp2ep2-layer:4 mtp-pack-next-1r:mtp-pack-next-dp2ep2:4 \
            mtp-pack-next-1r-nb4:mtp-pack-next-cp2:2 \
            mtp2-next-1r:mtp2-next-dp2-g2-zero1:2 mtp2-next-1r:mtp2-next-ep2:2 \
            mtp2-next-1r:mtp2-next-tp2:2 mtp2-next-1r-nb4:mtp2-next-cp2:2; do
  one=${cell%%:*}; rest=${cell#*:}; run=${rest%%:*}; n=${rest##*:}
  check "MTP head: $run ($n rank(s)) == $one, 10 steps, bit for bit" same_bits "$MTP_DIR" $one $run $n
done
# scan_layers: the 16-layer DP2 x EP2 scanned plan with the head (ZeRO-1, G 2, per-layer
# gathers, remat full) == its one-rank unscanned plan, batch 8
mtp_scan() {
  grep -q "scanned block 0: .* run [2-9] times" generated/mtp-scan-next-16l-dp2ep2-scan/plan.txt ||
    { echo "mtp-scan-next-16l-dp2ep2-scan scans nothing"; return 1; }
  same_bits "$MTP_DIR" mtp-scan-next-16l-1r-b8 mtp-scan-next-16l-dp2ep2-scan 4
}
check "MTP head: scan_layers 16 layers DP2 x EP2 (4 ranks) == one rank, 10 steps, bit for bit" mtp_scan
check "MTP head: mtp-next-1r differs from the model without the head (mesh-next-1r)" \
  bits_differ "$MTP_DIR" mesh-next-1r mtp-next-1r
check "MTP head with packing: mtp-pack-next-1r differs from packing without the head (pack-next-1r)" \
  bits_differ "$MTP_DIR" pack-next-1r mtp-pack-next-1r
check "MTP head: two depths (mtp2-next-1r) differ from one (mtp-next-1r)" \
  bits_differ "$MTP_DIR" mtp-next-1r mtp2-next-1r
# Two depths in bf16 (plan_variant mtp_num_layers=2 of the bf16 pair): the stacked
# operands of the shared weights' WGRADs are bf16 copies (exact), their rstd fp32; DP2 x EP2
# == one rank, 10 steps, bit for bit.
mtp2_bf16() {
  local d=$MTP_DIR/bf16-2 data=tests/golden/e2e/test-next-tiny/tokens.npy a b
  mkdir -p "$d"
  plan_variant mtp-bf16-next-1r "$d" mtp_num_layers=2 || return 1
  plan_variant mtp-bf16-next-dp2ep2 "$d" mtp_num_layers=2 || return 1
  timeout 120 "$d/mtp-bf16-next-1r-v/qtrain" data=$data seed=11 steps=10 metrics="$d/one.jsonl" \
    > "$d/one.out" 2>&1 || { tail -n 3 "$d/one.out"; return 1; }
  timeout 120 mpiexec -n 4 "$d/mtp-bf16-next-dp2ep2-v/qtrain" data=$data seed=11 steps=10 \
    metrics="$d/mesh.jsonl" > "$d/mesh.out" 2>&1 || { tail -n 3 "$d/mesh.out"; return 1; }
  a=$(det_fields "$d/one.jsonl") b=$(det_fields "$d/mesh.jsonl")
  [ "$(echo "$a" | wc -l)" -eq 10 ] && [ "$a" = "$b" ] || { echo "differs: $(diff <(echo "$a") <(echo "$b") | head -4)"; return 1; }
  echo "identical over 10 steps: $(echo "$b" | tail -n 1)"
}
check "MTP head: two depths in bf16, DP2 x EP2 (4 ranks) == one rank, 10 steps, bit for bit" mtp2_bf16
# The head with the z-loss (z_loss_multiplier 1e-2, plan_variant; MaxText's rule: the main
# logits only, XENT_MTP runs one XENT per token-block part then): bf16 DP2 x EP2 and fp32
# TP2 with vocab_parallel (the blocked z finish over the tensor group) == their one-rank
# plans, 10 steps, bit for bit (loss bits, fingerprint and every step's z_loss); the z term
# changes the bits (not vacuous).
mtp_z_pair() { # DIR ONE ONE_KEY RUN RUN_KEY RANKS: RUN's variant on RANKS ranks == ONE's
  local d=$1 one=$2 k1=$3 run=$4 k2=$5 n=$6 data=tests/golden/e2e/test-next-tiny/tokens.npy a b
  plan_variant "$one" "$d" z_loss_multiplier=1e-2 $k1 || return 1
  plan_variant "$run" "$d" z_loss_multiplier=1e-2 $k2 || return 1
  timeout 120 "$d/$one-v/qtrain" data=$data seed=11 steps=10 metrics="$d/$one.jsonl" \
    > "$d/$one.out" 2>&1 || { tail -n 3 "$d/$one.out"; return 1; }
  timeout 120 mpiexec -n "$n" "$d/$run-v/qtrain" data=$data seed=11 steps=10 \
    metrics="$d/$run.jsonl" > "$d/$run.out" 2>&1 || { tail -n 3 "$d/$run.out"; return 1; }
  a=$(det_fields "$d/$one.jsonl"; grep -v '^{"manifest"' "$d/$one.jsonl" | grep -o '"z_loss":[0-9.e+-]*')
  b=$(det_fields "$d/$run.jsonl"; grep -v '^{"manifest"' "$d/$run.jsonl" | grep -o '"z_loss":[0-9.e+-]*')
  [ "$(echo "$a" | grep -c z_loss)" -eq 10 ] || { echo "expected 10 z_loss fields"; return 1; }
  [ "$a" = "$b" ] || { echo "$run differs: $(diff <(echo "$a") <(echo "$b") | head -4)"; return 1; }
  plan_det "$one" 1 "$MTP_DIR" 10 || return 1
  [ "$(det_fields "$d/$one.jsonl" | tail -n 1)" != "$(tail -n 1 "$MTP_DIR/$one.det")" ] ||
    { echo "z_loss_multiplier did not change the bits of $one"; return 1; }
  echo "$run == $one with z: $(det_fields "$d/$run.jsonl" | tail -n 1)"
}
mtp_z_mesh() {
  mkdir -p "$MTP_DIR/z"
  mtp_z_pair "$MTP_DIR/z" mtp-bf16-next-1r "" mtp-bf16-next-dp2ep2 "" 4 &&
    mtp_z_pair "$MTP_DIR/z" mtp-next-1r vocab_blocks=2 mtp-next-tp2 vocab_parallel=true 2
}
check "MTP head with the z-loss: bf16 DP2 x EP2, vocab-parallel TP2 == one rank, 10 steps, bit for bit (z_loss too)" mtp_z_mesh
