# 62_capacity.sh - token dropping on meshes (sourced by run_all.sh; issue 32): every mesh
# gives one rank's bits with sparse_matmul: false and capacity_factor 1.0 (C = 8 of 16
# tokens, about 10% of the assignments dropped).
#
# The drop decisions depend on the sequence alone: the home rank of a sequence's tokens
# queues their assignments (token, then top-k order) before any row leaves for its expert,
# so data, fsdp, expert and tensor ranks, ZeRO-1 with accumulation, remat, scan, bf16 and
# packed documents all reproduce the one-rank run: loss bits and fingerprint over 10 steps
# (same_bits, run_all.sh); checkpoints saved on EP2 resume on one rank and DP2 (at the end).
# The one-rank cells must differ from the dropless plans (a cell
# that drops nothing would pass vacuously), and every step of the one-rank run drops.
#
# Context parallelism (cap-ctx-*): a sequence split over context ranks still queues in token
# order: MOE_CAPACITY all-gathers the group's per-(sequence, expert) counts and each block
# continues the earlier blocks' sum (qt_ops.def). The cells compare with the one-rank run with
# the same context_blocks (4), as 71_context.sh does. Not vacuous: on CP2 a block holds 8
# tokens and C = 8, so a block-local queue could never drop; the CP2 runs' dropped counts
# must equal the one-rank counts (dozens per step).

cap_drops() {
  plan_det cap-next-1r 1 "$QT_TMP/cap" 10 || return 1
  awk -F'"moe_dropped":' 'NF > 1 { split($2, a, ","); n++; if (a[1] + 0 == 0) z++ }
       END { print n " steps, dropped in " (n - z); exit (n == 10 && z == 0) ? 0 : 1 }' \
      "$QT_TMP/cap/cap-next-1r.jsonl"
}
check "capacity: the one-rank cell drops assignments at every step" cap_drops
check "capacity: dropping changes the bits (cap-next-1r vs mesh-next-1r)" \
  bits_differ "$QT_TMP/cap" mesh-next-1r cap-next-1r
for cell in cap-next-1r:cap-next-dp2:2 cap-next-1r:cap-next-fsdp2-auto:2 \
            cap-next-1r:cap-next-ep2:2 cap-next-1r:cap-next-ep4-auto:4 \
            cap-next-1r:cap-next-dp2ep2:4 cap-next-1r:cap-next-tp2:2 \
            cap-next-1r:cap-next-ep2tp2:4 cap-next-1r:cap-remat-full-next-dp2ep2:4 \
            cap-next-1r-b16:cap-next-dp2ep2-g4-z1:4 \
            cap-bf16-next-1r:cap-bf16-next-dp2ep2-auto:4 \
            cap-pack-next-1r:cap-pack-next-dp2ep2:4 \
            cap-35-1r:cap-35-dp2ep2:4 cap-35t-1r:cap-35t-ep2tp2:4 \
            cap-scan-next-16l-1r-b8:cap-scan-next-16l-dp2ep2-scan:4 \
            cap-ctx-next-1r-nb4:cap-ctx-next-cp2:2 \
            cap-ctx-next-1r-nb4:cap-ctx-next-cp2ep2-auto:4 \
            cap-ctx-b16-next-1r-nb4:cap-ctx-b16-next-cp2:2; do
  one=${cell%%:*}; rest=${cell#*:}; run=${rest%%:*}; n=${rest##*:}
  check "capacity: $run ($n ranks) == $one, 10 steps, bit for bit" same_bits "$QT_TMP/cap" "$one" "$run" "$n"
done
# the metrics' dropped counts (per step and per layer) are the one-rank run's on every mesh
cap_counts_agree() {
  local one=$1 a b; shift
  for run in "$@"; do
    a=$(grep -o '"moe_dropped":[0-9]*\|"moe_dropped_layer":\[[0-9,]*\]' "$QT_TMP/cap/$one.jsonl")
    b=$(grep -o '"moe_dropped":[0-9]*\|"moe_dropped_layer":\[[0-9,]*\]' "$QT_TMP/cap/$run.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "$run: dropped counts differ from $one"; return 1; }
  done
  echo "per-step and per-layer dropped counts identical; step 0: $(echo "$a" | head -n 2 | tr '\n' ' ')"
}
check "capacity: dropped counts in the metrics are the one-rank counts on every mesh" \
  cap_counts_agree cap-next-1r cap-next-dp2ep2 cap-next-ep2tp2 cap-next-ep4-auto
check "capacity: dropping changes the bits with context blocks (cap-ctx-next-1r-nb4 vs ctx-next-1r-nb4)" \
  bits_differ "$QT_TMP/cap" ctx-next-1r-nb4 cap-ctx-next-1r-nb4
check "capacity: context ranks drop what one rank drops (CP2, CP2 x EP2; blocks of 8 = C)" \
  cap_counts_agree cap-ctx-next-1r-nb4 cap-ctx-next-cp2 cap-ctx-next-cp2ep2-auto
check "capacity: bf16 context ranks drop what one rank drops" \
  cap_counts_agree cap-ctx-b16-next-1r-nb4 cap-ctx-b16-next-cp2

# Checkpoints across meshes with a capacity: the cap-next-* plans train the same global batch
# (4 sequences of 16 tokens), so they share the state compatibility hash; a checkpoint saved on
# EP2 at step 5 (expert shards gathered) resumes on one rank and on DP2, and steps 6..10 are
# the uninterrupted one-rank run's bits (ckpt_resume, run_all.sh). The capacity holds no state.
check "capacity: save on EP2 at step 5 (sharded directory), resume on one rank == 10 one-rank steps" \
  ckpt_resume cap-next-1r cap-next-ep2 2 cap-next-1r 1
check "capacity: save on EP2 at step 5, resume on DP2 == 10 one-rank steps" \
  ckpt_resume cap-next-1r cap-next-ep2 2 cap-next-dp2 2
