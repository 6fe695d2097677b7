# 80_aot.sh - ahead-of-time plans of the full-size models on 128 to 512 ranks (sourced by
# run_all.sh): configgen plans each case of tests/aot/ for its compile_topology, checks the
# per-rank arena against the topology's device memory, and a plan that fits must compile with
# the firmware's flags. Each case has its expected verdict below, worked out in the README
# (AOT plans) and the issue notes; a verdict that changes (a plan that starts to fit, or
# stops) fails here until the table is updated with the reason.
AOT_OUT=$QT_TMP/aot
AOT_CFLAGS=$(make -s print-cflags)

# aot_case NAME VERDICT: VERDICT "fits", or a substring of the expected error.
aot_case() {
  local name=$1 want=$2 out=$AOT_OUT/$1 rc t0 t1
  mkdir -p "$out"
  t0=$(date +%s.%N)
  timeout 60 build/configgen/configgen -o "$out" tests/aot/$name.yml > "$out/log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  if [ "$want" = fits ]; then
    [ "$rc" -eq 0 ] || { cat "$out/log"; return 1; }
    local p=$out/$name
    grep -E "^  (arena|budget)" "$p/plan.txt"
    grep "the arena uses" "$p/plan.txt" || { echo "no budget line in plan.txt"; return 1; }
    cc $AOT_CFLAGS -c "$p/plan.c" -o "$out/plan.o" && cc $AOT_CFLAGS -I"$p" -c "$p/plan_main.c" -o "$out/main.o" \
      || { echo "the plan does not compile"; return 1; }
    echo "fits and compiles; planned in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s, tables $(wc -c < "$p/plan.c") bytes of C"
  else
    [ "$rc" -ne 0 ] || { echo "planned, expected: $want"; return 1; }
    grep -qF -- "$want" "$out/log" || { echo "expected '$want' in:"; cat "$out/log"; return 1; }
    [ ! -e "$out/$name" ] || { echo "a refused plan left $out/$name"; return 1; }
    cut -c 1-400 "$out/log"
  fi
}

# The 4-layer qwen3-next-80b-a3b on DP 128 with G=4 and ZeRO-1: 7.21 B parameters; per rank
# (MiB) 27504 compute copy + 55438 gradient tree (the leaf tree's top and the gradient,
# whole, and two compact microbatch levels of 215 each) + 6144 leaf scratch + 4096
# checkpoint staging + 2492 activations + 430 Adam (ZeRO-1) = 96106 MiB = 93.9 GiB of 95.
check "aot: qwen3-next-80b-a3b 4 layers, v5p-256 DP128 G4 ZeRO-1, explicit: fits 95 GiB and compiles" \
  aot_case aot-next80-4l-dp128-explicit fits
check "aot: qwen3-next-80b-a3b 4 layers, v5p-256 DP128 G4 ZeRO-1, auto: fits 95 GiB and compiles" \
  aot_case aot-next80-4l-dp128-auto fits
# The 4-layer qwen3.5-397b-a17b holds 28.3 B parameters: the compute copy alone is 113 GB.
for mode in explicit auto; do
  check "aot: qwen3.5-397b-a17b 4 layers, v5p-256 DP128 G4 ZeRO-1, $mode: over budget, biggest consumers listed" \
    aot_case aot-397b-4l-dp128-$mode "over the budget of 97280.0 MiB by 275566.0 MiB; biggest consumers: gradient tree"
done
# The full models on v5p-512 FSDP 32 x expert 8, remat_policy full: flat-parameter FSDP
# holds the rank's whole compute copy (the dense weights and its 64 experts per layer) and
# parameter-sized gradient-tree levels (4 leaf levels for the expert group's 8 sequences,
# then the gradient); they do not fit yet (issue 7: per-layer gathers and reduce-scatters).
check "aot: qwen3-next-80b-a3b v5p-512 FSDP32 x EP8, explicit: over budget (verdict of today's planner)" \
  aot_case aot-next80-v5p512 "plan aot-next80-v5p512 needs 293050.0 MiB per rank"
check "aot: qwen3-next-80b-a3b v5p-512 FSDP32 x EP8, auto: over budget (verdict of today's planner)" \
  aot_case aot-next80-v5p512-auto "plan aot-next80-v5p512-auto needs 293050.0 MiB per rank"
check "aot: qwen3.5-397b-a17b v5p-512 FSDP32 x EP8, explicit: over budget (verdict of today's planner)" \
  aot_case aot-397b-v5p512 "plan aot-397b-v5p512 needs 1382582.0 MiB per rank"
check "aot: qwen3.5-397b-a17b v5p-512 FSDP32 x EP8, auto: over budget (verdict of today's planner)" \
  aot_case aot-397b-v5p512-auto "plan aot-397b-v5p512-auto needs 1382582.0 MiB per rank"
check "aot: qwen3.5-35b-a3b v5p-512 EP256, remat full: over budget, consumers listed" \
  aot_case aot-35b-v5p512-ep256 "plan aot-35b-v5p512-ep256 needs 143910.0 MiB per rank"
# the reference trainer's guards, at scale
check "aot: context parallelism with GDN layers under explicit is refused with its reason" \
  aot_case aot-guard-context-explicit "context parallelism 2 with shard_mode=explicit"
check "aot: the dense MoE path under explicit is refused with its reason" \
  aot_case aot-guard-dense-explicit "sparse_matmul=false (the dense MoE matmul) is not onboarded"

aot_topology_errors() {
  local out=$AOT_OUT/topo
  mkdir -p "$out"
  build/configgen/configgen -o "$out" tests/aot/aot-next80-4l-dp128-explicit.yml compile_topology=v5p-255 2> "$out/e1" && return 1
  grep -F "compile_topology=v5p-255" "$out/e1" || return 1
  build/configgen/configgen -o "$out" tests/aot/aot-next80-4l-dp128-explicit.yml num_ranks=64 2> "$out/e2" && return 1
  grep -F "compile_topology=v5p-256 has 128 devices; expected num_ranks unset or 128" "$out/e2" || return 1
  # an explicit device_memory_gib overrides the preset's: 80 GiB is too little here
  build/configgen/configgen -o "$out" tests/aot/aot-next80-4l-dp128-explicit.yml device_memory_gib=80 2> "$out/e3" && return 1
  grep -F "device_memory_gib=80 (compile_topology=v5p-256, 128 ranks)" "$out/e3" || return 1
  # the step form of the gradient reduction cannot keep the bits with expert parallelism
  build/configgen/configgen -o "$out" tests/aot/aot-next80-v5p512.yml gradient_reduce=step 2> "$out/e4" && return 1
  grep -F "gradient_reduce=step (command line): step with expert parallelism 8" "$out/e4"
}
check "aot: a bad compile_topology, a num_ranks that disagrees with it, an explicit smaller budget and gradient_reduce=step with EP are refused" aot_topology_errors

aot_reduce_forms() {
  # gradient_reduce=auto on the 4-layer 80B DP128 G4: the step form (one reduce-scatter
  # after the microbatches) needs 123180 MiB > 95 GiB, so auto takes the microbatch form
  local out=$AOT_OUT/forms
  mkdir -p "$out"
  build/configgen/configgen -o "$out" tests/aot/aot-next80-4l-dp128-explicit.yml run_name=forms-auto > /dev/null || return 1
  grep -q "microbatch-major" "$out/forms-auto/plan.txt" || { echo "auto did not take the microbatch form"; return 1; }
  build/configgen/configgen -o "$out" tests/aot/aot-next80-4l-dp128-explicit.yml run_name=forms-step gradient_reduce=step device_memory_gib=0 > /dev/null || return 1
  grep -q "rank-major" "$out/forms-step/plan.txt" || return 1
  grep -E "^  (arena|total sent)" "$out/forms-auto/plan.txt" "$out/forms-step/plan.txt"
}
check "aot: gradient_reduce=auto falls back to the microbatch form when the step form is over budget" aot_reduce_forms
