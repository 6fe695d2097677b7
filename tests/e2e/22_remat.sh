# 22_remat.sh - rematerialisation (sourced by run_all.sh): remat_policy=full and save_dot
# recompute a layer's forward in the backward (configgen/src/model/remat.c); the losses and
# parameter fingerprints are the same bits as without, on one rank (both decoders, the
# load-balance loss) and on meshes (expert, tensor parallelism), and plan.txt's activation
# peak falls: full < save_dot < none. A recompute that is missing or misplaced is refused at
# plan time by configgen's schedule check (a read before the write).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

rm_det() {   # rm_det PLAN RANKS: 8 steps, the step / loss bits / fingerprint lines
  plan_det "$1" "$2" "$QT_TMP/remat" 8
}

rm_same() {   # rm_same BASE REMAT RANKS
  local d=$QT_TMP/remat
  rm_det "$1" "$3" && rm_det "$2" "$3" || return 1
  grep -q "remat_policy .*: [1-9][0-9]* forward ops recomputed" generated/$2/plan.txt || { echo "$2 recomputes nothing"; return 1; }
  cmp "$d/$1.det" "$d/$2.det" && echo "8 steps identical: $(tail -n 1 "$d/$2.det")"
}

check "remat: full == none, qwen3-next-tiny, one rank" rm_same test-next-tiny remat-full-test-next-tiny 1
check "remat: save_dot == none, qwen3-next-tiny, one rank" rm_same test-next-tiny remat-dot-test-next-tiny 1
check "remat: full == none, qwen3.5-tiny, one rank" rm_same test-35-tiny remat-full-test-35-tiny 1
check "remat: save_dot == none, qwen3.5-tiny, one rank" rm_same test-35-tiny remat-dot-test-35-tiny 1
check "remat: full == none with the load-balance loss (router statistics not counted twice)" \
  rm_same test-next-lb remat-full-test-next-lb 1
check "remat: full == none on DP2 x EP2 (the dispatch and return run again)" \
  rm_same mesh-next-dp2ep2 remat-full-mesh-next-dp2ep2 4
check "remat: full on DP2 x EP2 with the expert FFN in chunks of 8 rows == none (issue 21)" \
  rm_same mesh-next-dp2ep2 remat-full-mesh-next-dp2ep2-chunk 4
check "remat: full == none on TP2, qwen3.5-tiny-tp (all-reduces run again)" \
  rm_same mesh-35t-tp2 remat-full-mesh-35t-tp2 2
check "remat: save_dot == none on DP2 x TP2 (kept projections, recomputed all-reduce skipped)" \
  rm_same mesh-next-dp2tp2 remat-dot-mesh-next-dp2tp2 4
check "remat: full with per-layer parameter gathers == none on DP2 x EP2 (recompute reads the backward window)" \
  rm_same mesh-next-dp2ep2 remat-full-gather-mesh-next-dp2ep2 4
check "remat: full with per-layer parameter gathers == none on FSDP2, qwen3.5-tiny" \
  rm_same mesh-35-fsdp2 remat-full-gather-mesh-35-fsdp2 2

rm_peaks() {
  local none full dot
  peak() { awk '/^  activations \(peak\)/ { print $(NF-3) }' generated/$1/plan.txt; }
  none=$(peak test-next-tiny); full=$(peak remat-full-test-next-tiny); dot=$(peak remat-dot-test-next-tiny)
  echo "activation peak bytes: none $none, save_dot $dot, full $full"
  [ -n "$none" ] && [ "$full" -lt "$dot" ] && [ "$dot" -lt "$none" ]
}
check "remat: plan.txt activation peak full < save_dot < none (qwen3-next-tiny)" rm_peaks
