# 61_odd_ranks.sh - data axes that are not powers of two (3 and 6 ranks), sourced by
# run_all.sh. A reduce-scatter group that is not a power of two sums its members' parts in
# the one-rank leaf tree's binary-counter shape (firmware/comm/qt_coll.h), so when every
# rank's gradient leaves per reduction are one complete subtree of the one-rank tree (a
# power of two of them, one microbatch per step in the microbatch form) the mesh gives one
# rank's bits; otherwise it is deterministic for its mesh and plan, and plan.txt says which
# ("one-rank bits:" line). Checks, bit for bit (loss bits and fingerprint, 10 steps):
#   * == one rank on the same global batch: data 3 (one sequence per rank), data 3 with two
#     per rank, data 6 (auto), data 3 x expert 2 (6 ranks), data 3 with ZeRO-1 and G 4;
#   * data 3 with three sequences per rank: plan.txt says "no", two runs are identical, and
#     the bits differ from one rank's 9 sequences (the statement is true, not vacuous).
# The collective itself: 60_collectives.sh (3, 5, 6 and 7 ranks against qt_tree's
# definition). Run files: configgen/configs/runs/odd-*.yml.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

# odd_same ONE RUN RANKS: RUN on RANKS ranks == ONE on one rank, bit for bit.
odd_same() {
  grep -q "one-rank bits: yes" "generated/$2/plan.txt" || { echo "plan.txt does not say yes"; return 1; }
  same_bits "$QT_TMP/odd" "$@"
}

for cell in "odd-next-1r-b3 odd-next-dp3 3" "odd-next-1r-b6 odd-next-dp3-b2 3" \
            "odd-next-1r-b6 odd-next-dp6 6" "odd-next-1r-b6 odd-next-dp3ep2 6" \
            "odd-next-1r-b12 odd-next-dp3-g4-z1 3"; do
  set -- $cell
  check "odd ranks: ${2#odd-next-} ($3 ranks) == one rank ($1), bit for bit" odd_same "$@"
done

# three leaves per rank: deterministic, but not one rank's bits (as plan.txt says)
odd_own_bits() {
  local d=$QT_TMP/odd
  grep -q "one-rank bits: no" generated/odd-next-dp3-b3/plan.txt || { echo "plan.txt does not say no"; return 1; }
  plan_det odd-next-1r-b9 1 "$d" 10 && plan_det odd-next-dp3-b3 3 "$d" 10 || return 1
  mkdir -p "$d/again"
  plan_det odd-next-dp3-b3 3 "$d/again" 10 || return 1
  cmp "$d/odd-next-dp3-b3.det" "$d/again/odd-next-dp3-b3.det" || { echo "two runs differ"; return 1; }
  ! cmp -s "$d/odd-next-1r-b9.det" "$d/odd-next-dp3-b3.det" || { echo "equals one rank: plan.txt is wrong"; return 1; }
  echo "deterministic: $(tail -n 1 "$d/odd-next-dp3-b3.det"); one rank: $(tail -n 1 "$d/odd-next-1r-b9.det")"
}
check "odd ranks: data 3 with 3 leaves per rank is deterministic, not one rank's bits (plan.txt says so)" odd_own_bits
