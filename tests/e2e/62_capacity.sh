# 62_capacity.sh - token dropping on meshes (sourced by run_all.sh; issue 32): every mesh
# gives one rank's bits with sparse_matmul: false and capacity_factor 1.0 (C = 8 of 16
# tokens, about 10% of the assignments dropped).
#
# The drop decisions depend on the sequence alone: the home rank of a sequence's tokens
# queues their assignments (token, then top-k order) before any row leaves for its expert,
# so data, fsdp, expert and tensor ranks, ZeRO-1 with accumulation, remat, scan, bf16 and
# packed documents all reproduce the one-rank run: loss bits and fingerprint over 10 steps
# (same_bits, run_all.sh). The one-rank cells must differ from the dropless plans (a cell
# that drops nothing would pass vacuously), and every step of the one-rank run drops.

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
            cap-scan-next-16l-1r-b8:cap-scan-next-16l-dp2ep2-scan:4; do
  one=${cell%%:*}; rest=${cell#*:}; run=${rest%%:*}; n=${rest##*:}
  check "capacity: $run ($n ranks) == $one, 10 steps, bit for bit" same_bits "$QT_TMP/cap" "$one" "$run" "$n"
done
# the metrics' dropped counts (per step and per layer) are the one-rank run's on every mesh
cap_counts_agree() {
  local a b
  for run in cap-next-dp2ep2 cap-next-ep2tp2 cap-next-ep4-auto; do
    a=$(grep -o '"moe_dropped":[0-9]*\|"moe_dropped_layer":\[[0-9,]*\]' "$QT_TMP/cap/cap-next-1r.jsonl")
    b=$(grep -o '"moe_dropped":[0-9]*\|"moe_dropped_layer":\[[0-9,]*\]' "$QT_TMP/cap/$run.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "$run: dropped counts differ from one rank"; return 1; }
  done
  echo "per-step and per-layer dropped counts identical; step 0: $(echo "$a" | head -n 2 | tr '\n' ' ')"
}
check "capacity: dropped counts in the metrics are the one-rank counts on every mesh" cap_counts_agree
