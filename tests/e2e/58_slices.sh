# 58_slices.sh - several slices (machines) on this one: dcn_*_parallelism > 1, sourced by
# run_all.sh. The ranks of a multi-slice plan are slice-major (MaxText's hybrid mesh:
# qt_mesh_coords in firmware/include/qt_plan.h). Each run starts as two "nodes" through
# MPICH's hydra: `mpiexec -launcher fork -hosts nodeA:N,nodeB:N` places ranks 0..N-1 on
# nodeA and N..2N-1 on nodeB (the fork launcher starts both proxies here, as ssh would on
# two machines), so slice s is node s. Checks, each against one rank on the same global
# batch, bit for bit (loss bits and fingerprint, 10 steps):
#   * dcn_data 2 (one rank per slice), dcn_data 2 x ici_expert 2, dcn_fsdp 2 x ici_data 2
#     (the slice digit is not the most significant coordinate digit: ranks 1 and 2 trade
#     places against the one-slice order), dcn_expert 2 x ici_data 2 in shard_mode auto,
#     qwen3.5 dcn_data 2 x ici_expert 2; three nodes of one rank (dcn_data 3); dcn_data 2
#     with six sequences a rank (the step form's units, issue 35);
#   * plan.txt states the slice layout and the data assignment follows it;
#   * rank 0 notes at start-up where the slices run (here: two slices share a machine).
# Run files: configgen/configs/runs/dcn-*.yml.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

# slice_det RUN RANKS [NODES]: RUN on RANKS ranks as NODES (default 2) nodes of RANKS/NODES
# ranks each -> $QT_TMP/slices/RUN.det
slice_det() {
  local run=$1 n=$2 nodes=${3:-2} d=$QT_TMP/slices hosts="" k
  mkdir -p "$d"
  rm -f "$d/$run.jsonl"
  for ((k = 0; k < nodes; k++)); do hosts="$hosts${hosts:+,}node$k:$((n / nodes))"; done
  timeout 120 mpiexec -launcher fork -hosts "$hosts" -n "$n" \
    build/$run/qtrain data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 steps=10 \
    metrics="$d/$run.jsonl" > "$d/$run.out" 2>&1 || { tail -n 3 "$d/$run.out"; return 1; }
  det_fields "$d/$run.jsonl" > "$d/$run.det"
}

# slice_same ONE RUN RANKS [NODES]: RUN as NODES nodes == ONE on one rank, bit for bit.
slice_same() {
  plan_det "$1" 1 "$QT_TMP/slices" 10 && slice_det "$2" "$3" "${4:-2}" || return 1
  cmp "$QT_TMP/slices/$1.det" "$QT_TMP/slices/$2.det" &&
    echo "identical to $1: $(tail -n 1 "$QT_TMP/slices/$2.det")"
}

for cell in "mesh-next-1r dcn-next-dp2 2" "mesh-next-1r dcn-next-dp2ep2 4" \
            "mesh-next-1r dcn-next-fsdp2dp2 4" "mesh-next-1r dcn-next-ep2dp2-auto 4" \
            "mesh-35-1r dcn-35-dp2ep2 4"; do
  set -- $cell
  check "slices: ${2#dcn-} as two nodes ($3 ranks) == one rank ($1), bit for bit" slice_same "$@"
done
# six sequences a rank over two slices (issue 35: the step form's units, 12 a step)
check "slices: next-dp2-b6 as two nodes (dcn_data 2, 6 leaves a rank) == one rank (odd-next-1r-b12), bit for bit" \
  slice_same odd-next-1r-b12 dcn-next-dp2-b6 2
# three machines (dcn_data 3: a data axis that is not a power of two across slices)
check "slices: next-dp3 as three nodes (dcn_data 3) == one rank (odd-next-1r-b3), bit for bit" \
  slice_same odd-next-1r-b3 dcn-next-dp3 3 3

# plan.txt: the slice layout, and rank 1 of dcn_fsdp 2 x ici_data 2 is (data 1, fsdp 0)
slice_report() {
  local t=generated/dcn-next-fsdp2dp2/plan.txt
  grep -q "slices (dcn): 2: data 1, fsdp 2" "$t" || { echo "no slice line in $t"; return 1; }
  grep -q "rank 1 (data 1, fsdp 0)" "$t" || { grep "^  rank" "$t"; return 1; }
  grep "slices (dcn)" "$t" | cut -c1-80
}
check "slices: plan.txt gives the slice layout and the slice-major rank coordinates" slice_report

# start-up: rank 0 notes where the slices run (here both "nodes" are this machine)
slice_host_note() {
  slice_det dcn-next-dp2ep2 4 || return 1
  grep "some share a machine" "$QT_TMP/slices/dcn-next-dp2ep2.out" ||
    { echo "no note about slices sharing a machine:"; cat "$QT_TMP/slices/dcn-next-dp2ep2.out"; return 1; }
}
check "slices: rank 0 notes that the two slices share one machine (qt_comm_check_slices)" slice_host_note

# slices of one rank (dcn-next-dp2: dcn data 2): the note counts "1 rank" (issue 30)
slice_note_singular() {
  local e=$QT_TMP/slices/dcn-next-dp2.note
  mkdir -p "$QT_TMP/slices"
  timeout 60 mpiexec -n 2 build/dcn-next-dp2/qtrain data=tests/golden/e2e/test-next-tiny/tokens.npy steps=1 2> "$e" || { cat "$e"; return 1; }
  grep "slices of" "$e"
  grep -q "note: 2 slices of 1 rank, and some share a machine" "$e"
}
check "slices: slices of one rank are counted in the singular" slice_note_singular
