# 69_vocab_parallel.sh - vocabulary-parallel logits and cross entropy (docs/sharding.md,
# Logits; docs/determinism.md, canonical vocabulary blocks), sourced by run_all.sh. With
# `vocab_blocks` N the cross entropy sums its exponentials as one chain per block of
# vocab_size / N columns and the blocks by a fixed pairwise tree, and the lm_head's data
# gradient is canonically blocked the same way (kernels/xent.h, kernels/matmul_canon.h);
# `vocab_parallel: true` splits the lm_head weight, the logits and d.logits over `tensor`
# (each rank's shard is whole blocks; the row maxima with the target logits, then the block
# sums, are all-gathered over the tensor group, so every rank computes one rank's losses):
#   * one rank with blocks against the float64 goldens of the same model and data (the
#     tolerances of 10_golden.sh; a different canonical order, same math);
#   * blocks change the one-rank bits (not vacuous);
#   * vocab-parallel meshes == one rank with the same blocks, bit for bit (loss bits and
#     fingerprint, 10 steps): TP2 (explicit and auto), TP2 with 2 blocks a rank, DP2 x TP2,
#     EP2 x TP2 of qwen3-next tiny, TP2 of qwen3.5 tiny;
#   * the logits are split in plan.txt; bf16 is accepted (its cells: 77_bf16.sh);
#   * the z-loss with blocks: TP2 == one rank bit for bit, near the plain z form.
# Run files: configgen/configs/runs/vocab-*.yml; runs through plan_det (run_all.sh).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

check "vocab_blocks 4: qwen3-next tiny vs PyTorch (step-0 gradients, 10 steps)" \
  golden_run vocab-golden-next-vb4 test-next-tiny
check "vocab_blocks 2: qwen3.5 tiny vs PyTorch (step-0 gradients, 10 steps)" \
  golden_run vocab-golden-35-vb2 test-35-tiny



check "vocab_blocks 2 changes the one-rank bits (the sums are blocked)" \
  bits_differ "$QT_TMP/vocab" mesh-next-1r vocab-next-1r-vb2
check "vocab_blocks 4 changes the one-rank bits against 2 blocks" \
  bits_differ "$QT_TMP/vocab" vocab-next-1r-vb2 vocab-next-1r-vb4

for cell in "vocab-next-1r-vb2 vocab-next-tp2 2" "vocab-next-1r-vb2 vocab-next-tp2-auto 2" \
            "vocab-next-1r-vb4 vocab-next-tp2-vb4 2" "vocab-next-1r-vb2 vocab-next-dp2tp2 4" \
            "vocab-next-1r-vb2 vocab-next-ep2tp2 4" "vocab-35t-1r-vb2 vocab-35t-tp2 2"; do
  # shellcheck disable=SC2086
  set -- $cell
  check "vocab-parallel: $2 == one rank with the same vocab_blocks ($1), bit for bit" \
    same_bits "$QT_TMP/vocab" "$1" "$2" "$3"
done

# plan.txt: the logits and the lm_head weight hold half the vocabulary on TP2, the bytes line
vocab_plan() {
  local p=generated/vocab-next-tp2/plan.txt
  grep -q "vocab_blocks 2 (canonical vocabulary blocks), logits split over tensor (vocab_parallel): 32 of 64 vocabulary columns a rank" "$p" &&
    grep -Eq " act +f32 \[4,16,32\] +\[4,16,64\] .* logits$" "$p" &&
    grep -Eq "param +f32 \[32,32\] +\[64,32\] .*lm_head.weight$" "$p" &&
    ! grep -q "^  logits  *declared" "$p" &&
    grep "logits + d.logits held" "$p"
}
check "vocab-parallel plan.txt: logits [4,16,32] of [4,16,64], lm_head [32,32] of [64,32], the bytes" vocab_plan

# bf16: runs (the bf16 cells with the same vocab_blocks are in 77_bf16.sh); configgen accepts it
vocab_bf16() {
  build/configgen/configgen -o "$QT_TMP/vocab/bf16" configgen/configs/runs/bf16-next-tp2.yml \
    vocab_parallel=true
}
check "vocab_parallel with dtype bfloat16 is accepted (bit cells: 77_bf16.sh)" vocab_bf16

# checkpoints: the split lm_head saves as one whole tensor; TP2 saved at step 5 and resumed
# on one rank (and the reverse) == the uninterrupted one-rank run at step 10, bit for bit
vocab_ckpt() {
  local d=$QT_TMP/vocab/ckpt a b
  rm -rf "$d"; mkdir -p "$d"
  plan_det vocab-next-1r-vb2 1 "$QT_TMP/vocab" 10 || return 1
  ckpt_run vocab-next-tp2 2 steps=5 save="$d/tp2" > "$d/a.log" 2>&1 || { tail -n 3 "$d/a.log"; return 1; }
  ckpt_run vocab-next-1r-vb2 1 steps=10 load="$d/tp2" metrics="$d/a.jsonl" > "$d/b.log" 2>&1 || { tail -n 3 "$d/b.log"; return 1; }
  ckpt_run vocab-next-1r-vb2 1 steps=5 save="$d/one" > "$d/c.log" 2>&1 || { tail -n 3 "$d/c.log"; return 1; }
  ckpt_run vocab-next-tp2 2 steps=10 load="$d/one" metrics="$d/b.jsonl" > "$d/d.log" 2>&1 || { tail -n 3 "$d/d.log"; return 1; }
  a=$(det_fields "$d/a.jsonl" | tail -n 1) b=$(det_fields "$d/b.jsonl" | tail -n 1)
  [ "$a" = "$(tail -n 1 "$QT_TMP/vocab/vocab-next-1r-vb2.det")" ] && [ "$a" = "$b" ] && echo "both: $a"
}
check "vocab-parallel checkpoints: TP2 -> one rank and one rank -> TP2 resume bit for bit" vocab_ckpt

# The z-loss (z_loss_multiplier, issue 33) with blocks and vocab-parallel: the blocked
# finish adds z lse^2 and scales the softmax by (1 + 2 z lse) once lse is merged
# (kernels/xent.h qt_xent_blk_finish_z). Variants of the committed runs with
# z_loss_multiplier=1e-2 (plan_variant): TP2 == one rank with vocab_blocks 2, bit for bit
# (loss bits, fingerprint and the z_loss field, 10 steps); the z term changes the one-rank
# bits (not vacuous); the blocked z loss at step 0 (the same initial weights) is the plain
# z form's within 1e-6 relative (loss and z_loss; a different summation order only).
vocab_z() {
  local d=$QT_TMP/vocab/z data=tests/golden/e2e/test-next-tiny/tokens.npy r a b
  mkdir -p "$d"
  for r in vocab-next-1r-vb2 vocab-next-tp2 mesh-next-1r; do
    plan_variant "$r" "$d" z_loss_multiplier=1e-2 || return 1
  done
  timeout 120 "$d/vocab-next-1r-vb2-v/qtrain" data=$data seed=11 steps=10 metrics="$d/one.jsonl" \
    > "$d/one.out" 2>&1 || { tail -n 3 "$d/one.out"; return 1; }
  timeout 120 mpiexec -n 2 "$d/vocab-next-tp2-v/qtrain" data=$data seed=11 steps=10 \
    metrics="$d/tp2.jsonl" > "$d/tp2.out" 2>&1 || { tail -n 3 "$d/tp2.out"; return 1; }
  timeout 120 "$d/mesh-next-1r-v/qtrain" data=$data seed=11 steps=10 metrics="$d/plain.jsonl" \
    > "$d/plain.out" 2>&1 || { tail -n 3 "$d/plain.out"; return 1; }
  a=$(det_fields "$d/one.jsonl"; grep -v '^{"manifest"' "$d/one.jsonl" | grep -o '"z_loss":[0-9.e+-]*')
  b=$(det_fields "$d/tp2.jsonl"; grep -v '^{"manifest"' "$d/tp2.jsonl" | grep -o '"z_loss":[0-9.e+-]*')
  [ "$(grep -v '^{"manifest"' "$d/one.jsonl" | grep -c '"z_loss":')" -eq 10 ] ||
    { echo "expected a z_loss in each of the 10 step lines"; return 1; }
  [ "$a" = "$b" ] || { echo "TP2 z-loss differs from one rank: $(diff <(echo "$a") <(echo "$b") | head -4)"; return 1; }
  plan_det vocab-next-1r-vb2 1 "$QT_TMP/vocab" 10 || return 1
  [ "$(det_fields "$d/one.jsonl" | tail -n 1)" != "$(tail -n 1 "$QT_TMP/vocab/vocab-next-1r-vb2.det")" ] ||
    { echo "z_loss_multiplier did not change the bits"; return 1; }
  paste <(grep -v '^{"manifest"' "$d/plain.jsonl" | grep -o '"loss":[0-9.e+-]*\|"z_loss":[0-9.e+-]*' |
           head -n 2 | cut -d: -f2) \
        <(grep -v '^{"manifest"' "$d/one.jsonl" | grep -o '"loss":[0-9.e+-]*\|"z_loss":[0-9.e+-]*' |
           head -n 2 | cut -d: -f2) |
    awk '{ r = ($1 - $2) / $1; r = r < 0 ? -r : r; printf "step 0 plain %s blocked %s rel %.2e\n", $1, $2, r;
           if (r > 1e-6) bad = 1 } END { exit bad }' || return 1
  echo "TP2 == one rank (vb2) with z: $(det_fields "$d/tp2.jsonl" | tail -n 1)"
}
check "z-loss with vocab blocks: TP2 == one rank (vb2) bit for bit with z_loss, z changes the bits, step 0 near the plain z form (1e-6)" vocab_z
