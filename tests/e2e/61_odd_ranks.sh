# 61_odd_ranks.sh - data axes that are not powers of two (3 and 6 ranks), and any number of
# leaves a rank (issue 35, docs/determinism.md "Any split"), sourced by run_all.sh. A
# reduce-scatter group that is not a power of two sums its members' parts in the one-rank
# leaf tree's binary-counter shape (firmware/comm/qt_coll.h), so when every rank's gradient
# leaves per reduction are one complete subtree of the one-rank tree (a power of two of
# them) the mesh gives one rank's bits. The step form reduces any other count L as units of
# U leaves (U the largest power of two dividing L, each unit a complete subtree), exchanged
# and folded in the one-rank tree's shape (qt_ops.def GRAD_UNITS): one rank's bits too. The
# microbatch form with L not a power of two (or G > 1 over a group that is not a power of
# two) reduces each microbatch's units likewise and pushes them into a counter over the
# step's units (GRAD_MB_UNITS, docs/determinism.md "The microbatch form's units"), the
# per-layer form at each range's last weight gradient. Where no units apply the run is
# deterministic for its mesh and plan, and plan.txt says so ("one-rank bits:" line).
# Checks, bit for bit (loss bits and fingerprint, 10 steps):
#   * == one rank on the same global batch: data 3 (one sequence per rank), data 3 with two
#     per rank, data 6 (auto), data 3 x expert 2 (6 ranks), data 3 with ZeRO-1 and G 4;
#   * units: data 3 with three sequences per rank, data 2 with six (12 a step), data 2 with
#     two a microbatch and G 3, data 2 ZeRO-1 with three a microbatch and G 2, fsdp 2 with
#     six, bf16 fsdp 2 with six, data 2 x tensor 2 with six, and qwen3.5 data 2 x fsdp 2
#     with three (plan.txt says "yes" and gives the cost); 25 leaves a rank (more units than
#     tree levels): plan.txt says "no";
#     dcn data 2 with six: 58_slices.sh;
#   * the microbatch form's units (plan.txt says "yes" and gives the cost): expert 2 with
#     three a microbatch and G 2, data 2 x expert 2 with three and G 2 (the routed experts'
#     units over data 2, the others' over 4 ranks), data 2 with three and G 2, data 2 ZeRO-1
#     with three and G 3, data 3 with one and G 2 (units of one leaf, q = 1);
#   * the per-layer form's units: the data 2 and expert 2 runs with three a microbatch and
#     G 2 with gradient_reduce=layer, and scanned 16 layers on data 2 x expert 2 with
#     per-layer gathers, ZeRO-1 and overlapped gathers (plan variants); their exchange beside
#     compute (collective_overlap on == off == one rank): data 2 with six, data 3 with three,
#     fsdp 2 with six and per-layer gathers, data 2 x context 3;
#   * data 2 with 25 a microbatch and G 2 in the microbatch form: 25 unit levels would pass
#     the 24 a plan has, so the reduce-scatter per microbatch stays (the old arithmetic):
#     plan.txt says "no", two runs are identical, and the bits differ from one rank's 100
#     sequences (the statement is true, and the checks above are not vacuous).
#   * axes of any size (issue 35, docs/determinism.md "Axes of any size"): fsdp 3 (one, two
#     and three sequences a rank: the last as units), data 2 x fsdp 3, fsdp 3 with per-layer
#     reduction and per-layer weight gathers, fsdp 3 x expert 2, bf16 fsdp 3; expert 3 and
#     expert 6 of a 6-expert variant (npow2-e6-*) == its one rank; context 3 with 3 and 6
#     token blocks of a variant whose heads divide by 3, canonical_factor 3 (npow2-c3-*) ==
#     its one rank; tensor 3, data 2 x tensor 3 and bf16 tensor 3 of a variant whose split
#     dimensions divide by 3, canonical_factor 3 (npow2-t3-*, npow2-b16-t3-*) == its one rank;
#     vocab_parallel on tensor 3 (vocab_size 96 variants: 3 and 6 vocabulary blocks, bf16 with
#     3, data 2 x tensor 3 with 6) == one rank with the same blocks; data 2 x expert 3 and data 2 x context 3 (the
#     expert hosts' 3 leaves a microbatch, the mixers' 3 blocks, reduced over data: units per
#     range) and data 3 x context 2 with G 4 (the microbatch form's units with a context
#     axis) == one rank;
#   * tensor 3, context 3, data 2 x context 3 and tensor 5 (a variant dividing by 5) without
#     canonical_factor (MaxText's command line): the axes imply the factor 3 (5); plan.txt says "one-rank bits: no" and names the
#     factor; two runs are identical, equal one rank with canonical_factor 3 and differ from
#     one rank without it; tensor 16 (over the 8 canonical blocks one rank holds: the cap
#     raised to 16): deterministic, its own bits, as plan.txt says.
# The collectives themselves: 60_collectives.sh (3, 5, 6 and 7 ranks against qt_tree's
# definition; the units' exchange and fold against the one-rank leaf tree over R x q x U
# leaves). Run files: configgen/configs/runs/odd-*.yml, split-*.yml.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

# odd_same ONE RUN RANKS: RUN on RANKS ranks == ONE on one rank, bit for bit.
odd_same() {
  grep -q "one-rank bits: yes" "generated/$2/plan.txt" || { echo "plan.txt does not say yes"; return 1; }
  same_bits "$QT_TMP/odd" "$@"
}

for cell in "odd-next-1r-b3 odd-next-dp3 3" "odd-next-1r-b6 odd-next-dp3-b2 3" \
            "odd-next-1r-b6 odd-next-dp6 6" "odd-next-1r-b6 odd-next-dp3ep2 6" \
            "odd-next-1r-b12 odd-next-dp3-g4-z1 3" "odd-next-1r-b9 odd-next-dp3-b3 3" \
            "odd-next-1r-b12 split-next-dp2-b6 2" "odd-next-1r-b12 split-next-dp2-g3 2" \
            "odd-next-1r-b12 split-next-dp2-g2-z1 2" "odd-next-1r-b12 split-next-fsdp2-b6 2" \
            "split-35-1r-b12 split-35-dp2fsdp2-b3 4" \
            "split-b16-next-1r-b12 split-b16-next-fsdp2-b6 2" \
            "odd-next-1r-b12 split-next-dp2tp2-b3 4" \
            "odd-next-1r-b12 split-next-ep2-b3-g2 2" "odd-next-1r-b24 split-next-dp2ep2-b3-g2 4" \
            "odd-next-1r-b12 split-next-dp2-g2-mb 2" "odd-next-1r-b18 split-next-dp2-g3-z1-mb 2" \
            "odd-next-1r-b6 split-next-dp3-g2-mb 3"; do
  set -- $cell
  check "odd ranks: ${2#odd-next-} ($3 ranks) == one rank ($1), bit for bit" odd_same "$@"
done

# axes of any size (issue 35): fsdp and expert (the gradient's reduce-scatter over a group of
# 3 or 6 in the counter shape or the step form's units, the flat optimizer vector padded to
# equal blocks of the group, the weight gathers and the experts' rows copies), context and
# tensor with canonical_factor 3 (token blocks, head groups and contraction blocks 3 x a
# power of two, each rank's share a power of two, summed across in the counter shape)
for cell in "odd-next-1r-b3 npow2-next-fsdp3 3" "odd-next-1r-b6 npow2-next-fsdp3-b2 3" \
            "odd-next-1r-b9 npow2-next-fsdp3-b3 3" "odd-next-1r-b6 npow2-next-dp2fsdp3 6" \
            "odd-next-1r-b6 npow2-next-fsdp6 6" \
            "odd-next-1r-b3 npow2-next-fsdp3-layer 3" "odd-next-1r-b6 npow2-next-fsdp3ep2 6" \
            "split-b16-next-1r-b12 npow2-b16-next-fsdp3-b4 3" \
            "npow2-e6-next-1r-b3 npow2-e6-next-ep3 3" "npow2-e6-next-1r-b6 npow2-e6-next-ep3-b2 3" \
            "npow2-e6-next-1r-b6 npow2-e6-next-ep6 6" \
            "npow2-c3-next-1r npow2-c3-next-cp3 3" "npow2-c3-next-1r-nb6 npow2-c3-next-cp3-nb6 3" \
            "npow2-t3-next-1r-b2 npow2-t3-next-dp2tp3 6"; do
  set -- $cell
  check "axes of any size: ${2#npow2-} ($3 ranks) == one rank ($1), bit for bit" odd_same "$@"
done
# tensor 3 alone has no batch axis (plan.txt has no one-rank-bits line): the bits alone
for cell in "npow2-t3-next-1r npow2-t3-next-tp3 3" "npow2-b16-t3-next-1r npow2-b16-t3-next-tp3 3"; do
  set -- $cell
  check "axes of any size: ${2#npow2-} ($3 ranks) == one rank ($1), bit for bit" same_bits "$QT_TMP/odd" "$@"
done

# data 2 x expert 3: an expert host's tree runs over its group's 3 leaves a microbatch, then
# reduced over data: the routed experts' range is reduced as 3 units of one leaf over data 2
# (a counter over 6), the others' as 1 unit over the 6 ranks (units per range,
# docs/determinism.md "The microbatch form's units"): plan.txt says "yes" and the bits are
# one rank's 6 sequences (before the per-range units: 0x4067e749 against 0x4067e736)
npow2_expert_units() {
  local d=$QT_TMP/odd/dp2ep3 r=npow2-e6-next-ep3
  plan_variant $r "$d" num_ranks=6 ici_data_parallelism=2 || return 1
  grep -q "one-rank bits: yes: each rank's 1 gradient leaf per microbatch go, for some weights" \
    "$d/$r-v/plan/$r/plan.txt" || { grep "one-rank bits" "$d/$r-v/plan/$r/plan.txt"; return 1; }
  timeout 120 mpiexec -n 6 "$d/$r-v/qtrain" data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 \
    steps=10 metrics="$d/v.jsonl" 2> "$d/v.err" || { tail -n 3 "$d/v.err"; return 1; }
  det_fields "$d/v.jsonl" > "$d/v.det" && plan_det npow2-e6-next-1r-b6 1 "$QT_TMP/odd" 10 || return 1
  cmp "$d/v.det" "$QT_TMP/odd/npow2-e6-next-1r-b6.det" && echo "identical: $(tail -n 1 "$d/v.det")"
}
check "axes of any size: data 2 x expert 3 (units per range: the expert hosts' 3 leaves over data) == one rank, bit for bit" npow2_expert_units

# data 2 x context 3: the GDN mixers' weights, split over context by heads, take all 3 blocks
# of a sequence, then reduced over data: 3 units of one block over data 2 for their ranges,
# 1 unit over the 6 ranks for the others (one sequence a microbatch, so a context rank's
# blocks are contiguous in the global (sequence, block) order): plan.txt says "yes" and the
# bits are one rank's with the same canonical_factor and context_blocks (this plan said "no"
# before and differed)
check "axes of any size: data 2 x context 3 (units per range: the mixers' head-split weights over data) == one rank, bit for bit" \
  odd_same npow2-c3-next-1r-b2 npow2-c3-next-dp2cp3 6

# data 3 x context 2 with G 4 (one sequence a microbatch, 12 a step): G > 1 over a batch
# group of 6, which is not a power of two: the microbatch form's units with a context axis
# (1 unit of 2 blocks, the routed experts' of 4 over their expert group) == one rank's 12
# sequences of 4 blocks
ctx_units() {
  local d=$QT_TMP/odd/dp3cp2 r=ctx-next-cp2-b2 o=ctx-next-1r-nb4
  plan_variant $r "$d" num_ranks=6 ici_data_parallelism=3 || return 1
  grep -q "one-rank bits: yes: each rank's 2 gradient leaves per microbatch (reduced microbatch by microbatch, G > 1" \
    "$d/$r-v/plan/$r/plan.txt" || { grep "one-rank bits" "$d/$r-v/plan/$r/plan.txt"; return 1; }
  plan_variant $o "$d" per_device_batch_size=12 || return 1
  timeout 120 mpiexec -n 6 "$d/$r-v/qtrain" data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 \
    steps=10 metrics="$d/v.jsonl" 2> "$d/v.err" || { tail -n 3 "$d/v.err"; return 1; }
  timeout 120 "$d/$o-v/qtrain" data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 \
    steps=10 metrics="$d/o.jsonl" 2> "$d/o.err" || { tail -n 3 "$d/o.err"; return 1; }
  det_fields "$d/v.jsonl" > "$d/v.det" && det_fields "$d/o.jsonl" > "$d/o.det" || return 1
  cmp "$d/v.det" "$d/o.det" && echo "identical: $(tail -n 1 "$d/v.det")"
}
check "context units: data 3 x context 2 with G 4 (a batch group of 6) == one rank's 12 sequences, bit for bit" ctx_units

# context 3 with 6 blocks a sequence and G 3 in the per-layer form (canonical_factor 3): a
# context rank's 2 blocks are a node, the head-split mixer weights take all 6 blocks of the
# microbatch's sequence (not a power of two): each range's units at its last weight
# gradient, pushed into a counter over the step's 3 microbatches == one rank's 3 sequences
ctx_layer_units() {
  local d=$QT_TMP/odd/cp3layer r=npow2-c3-next-cp3-nb6 o=npow2-c3-next-1r-nb6
  mkdir -p "$d"
  plan_variant $r "$d" gradient_reduce=layer gradient_accumulation_steps=3 &&
    plan_variant $o "$d" per_device_batch_size=3 || return 1
  grep -q "one-rank bits: yes: each rank's 2 gradient leaves per microbatch go, for some weights" "$d/$r-v/plan/$r/plan.txt" ||
    { grep "one-rank bits" "$d/$r-v/plan/$r/plan.txt"; return 1; }
  var_det "$d" $o 1 one steps=10 && var_det "$d" $r 3 mesh steps=10 && same_det "$d/one.det" "$d/mesh.det" 10
}

# the units' cost is stated: bytes and messages, q x the reduce-scatter's bytes
split_cost() {
  local t=generated/split-next-dp2-b6/plan.txt
  grep -q "one-rank bits: yes: each rank's 6 gradient leaves per step are not a power of two, so they are reduced as 3 units of 2 leaves" "$t" ||
    { grep "one-rank bits" "$t"; return 1; }
  grep -o "cost: [0-9]* bytes sent per rank per step in [0-9]* messages\? ([0-9]* x the reduce-scatter's [0-9]* bytes)" "$t" ||
    { echo "no cost in $t"; return 1; }
  ! grep -q "grad_tree_total\|reduce-scatter over data" "$t" || { echo "$t still reduce-scatters"; return 1; }
}
check "any split: plan.txt gives the units' cost in bytes and messages" split_cost

# the microbatch form's units: plan.txt gives their cost, and the microbatch-end schedule
# exchanges units in place of the totals, the reduce-scatter and the push
split_mb_cost() {
  local t=generated/split-next-ep2-b3-g2/plan.txt
  grep -q "one-rank bits: yes: each rank's 3 gradient leaves per microbatch (not a power of two), so each microbatch's are reduced as 3 units of 1 leaf (of 2 for the routed experts" "$t" ||
    { grep "one-rank bits" "$t"; return 1; }
  grep -o "cost: [0-9]* bytes sent per rank per step in [0-9]* messages\? ([0-9]* x the reduce-scatter's [0-9]* bytes)" "$t" ||
    { echo "no cost in $t"; return 1; }
  grep -q "grad_mb_units" "$t" && ! grep -q "grad_mb_total\|grad_mb_push\|microbatch gradients of range" "$t" ||
    { echo "$t: not the units' schedule"; return 1; }
}
check "any split: the microbatch form's units, plan.txt gives their cost in bytes and messages" split_mb_cost

# var_det D RUN N NAME [ARGS]: the plan variant D/RUN-v/qtrain (plan_variant) on N ranks on
# the tiny test data, seed 11; its loss bits and fingerprints in D/NAME.det.
var_det() {
  local d=$1 r=$2 n=$3 k=$4; shift 4
  local run=("$d/$r-v/qtrain"); [ "$n" -gt 1 ] && run=(mpiexec -n "$n" "$d/$r-v/qtrain")
  timeout 300 "${run[@]}" data=tests/golden/e2e/test-next-tiny/tokens.npy seed=11 "$@" \
    metrics="$d/$k.jsonl" 2> "$d/$k.err" || { tail -n 3 "$d/$k.err"; return 1; }
  det_fields "$d/$k.jsonl" > "$d/$k.det"
}
# same_det A B STEPS: A.det and B.det are equal over STEPS steps
same_det() {
  [ "$(wc -l < "$1")" -eq "$3" ] && cmp -s "$1" "$2" ||
    { echo "$2 differs from $1: $(diff "$1" "$2" | sed -n 2,3p | tr '\n' ' ')"; return 1; }
  echo "$2 == $1: $(tail -n 1 "$2")"
}

# vocab_parallel on tensor 3 (canonical_factor 3, vocab_size 96): vocab_blocks f x 2^j, a
# power of two of them a rank; the cross entropy's tree over the gathered blocks and the
# lm_head data gradient's (its rank's blocks, then summed across in the counter shape) are
# the binary counter, so each cell == one rank with the same factor and vocab_blocks, and
# the 3- and 6-block runs differ (the block count is not vacuous). A gather order mutation
# (shard-minor blocks in xent.c's lse) fails the 6-block cell (checked by hand).
# vocab3_cell NAME ONE ONE_ARGS MESH RANKS MESH_ARGS: both plan variants, run, compared
vocab3_cell() {
  local d=$QT_TMP/odd/vocab3 k=$1 one=$2 oa=$3 mesh=$4 n=$5 ma=$6
  mkdir -p "$d/$k"
  plan_variant $one "$d/$k" vocab_size=96 $oa && plan_variant $mesh "$d/$k" vocab_size=96 $ma || return 1
  grep -q "logits split over tensor (vocab_parallel)" "$d/$k/$mesh-v/plan/$mesh/plan.txt" ||
    { echo "logits not split"; return 1; }
  var_det "$d/$k" $one 1 one steps=10 && var_det "$d/$k" $mesh $n mesh steps=10 &&
    same_det "$d/$k/one.det" "$d/$k/mesh.det" 10 && cp "$d/$k/mesh.det" "$d/$k.det"
}
check "axes of any size: vocab_parallel on tensor 3, vocab_blocks 3 == one rank, bit for bit" \
  vocab3_cell tp3-nb3 npow2-t3-next-1r vocab_blocks=3 npow2-t3-next-tp3 3 vocab_parallel=true
check "axes of any size: vocab_parallel on tensor 3, vocab_blocks 6 == one rank, bit for bit" \
  vocab3_cell tp3-nb6 npow2-t3-next-1r vocab_blocks=6 npow2-t3-next-tp3 3 "vocab_parallel=true vocab_blocks=6"
check "axes of any size: vocab_parallel on tensor 3: 3 and 6 vocabulary blocks differ" \
  eval '! cmp -s "$QT_TMP/odd/vocab3/tp3-nb3.det" "$QT_TMP/odd/vocab3/tp3-nb6.det"'
check "axes of any size: bf16 vocab_parallel on tensor 3, vocab_blocks 3 == one bf16 rank, bit for bit" \
  vocab3_cell b16-tp3-nb3 npow2-b16-t3-next-1r vocab_blocks=3 npow2-b16-t3-next-tp3 3 vocab_parallel=true
check "axes of any size: vocab_parallel on data 2 x tensor 3, vocab_blocks 6 == one rank, bit for bit" \
  vocab3_cell dp2tp3-nb6 npow2-t3-next-1r-b2 vocab_blocks=6 npow2-t3-next-dp2tp3 6 "vocab_parallel=true vocab_blocks=6"

# tensor and context axes of 3 without canonical_factor (issue 35: MaxText takes any size
# that divides what they split): the axes imply the factor 3 (config/settings.c mesh_canon),
# so the plan's canonical counts are one rank's with canonical_factor: 3, and plan.txt says
# "one-rank bits: no" with that factor. Each cell: the mesh run twice is identical, equals
# the one-rank run with canonical_factor 3 (and its context_blocks), and differs from the
# one-rank run of the same config without the key (the statement "no" is true).
# implied_plan RUN DIR KEY...: RUN.yml without canonical_factor and the KEYs, its plan and
# binary in DIR/RUN-v/ (var_det's layout)
implied_plan() {
  local run=$1 d=$2 re="^(canonical_factor"; shift 2
  for k in "$@"; do re="$re|$k"; done
  rm -rf "$d/$run-v"; mkdir -p "$d/$run-v"
  grep -Ev "$re):" "configgen/configs/runs/$run.yml" > "$d/$run-v/$run.yml" && yml_plan "$run" "$d"
}
# yml_plan RUN DIR: the plan and binary of DIR/RUN-v/RUN.yml in DIR/RUN-v/
yml_plan() {
  local run=$1 d=$2
  build/configgen/configgen -o "$d/$run-v/plan" "$d/$run-v/$run.yml" > "$d/$run-v/configgen.log" 2>&1 ||
    { tail -n 3 "$d/$run-v/configgen.log"; return 1; }
  make -s plan-binary PLAN="$d/$run-v/plan/$run" OUT="$d/$run-v/qtrain" > "$d/$run-v/make.log" 2>&1 ||
    { tail -n 5 "$d/$run-v/make.log"; return 1; }
}
# implied_cell NAME MESH RANKS ONE AXES LINE KEY...: MESH (RANKS ranks) and ONE (one rank,
# canonical_factor 3 in its run file) without canonical_factor and the KEYs; plan.txt's
# one-rank-bits line for AXES, then LINE (a pattern) after it
implied_cell() {
  local k=$1 mesh=$2 n=$3 one=$4 ax=$5 line=$6 d=$QT_TMP/odd/implied/$1 t; shift 6
  mkdir -p "$d"
  implied_plan "$mesh" "$d" "$@" && implied_plan "$one" "$d" "$@" || return 1
  t=$d/$mesh-v/plan/$mesh/plan.txt
  grep -q "one-rank bits: no: $ax without canonical_factor: the axes imply canonical_factor 3 .*with canonical_factor: 3 the plan gives one rank's bits" "$t" &&
    grep -q "$line" "$t" || { grep "one-rank bits" "$t"; return 1; }
  var_det "$d" "$mesh" "$n" a steps=10 && var_det "$d" "$mesh" "$n" b steps=10 || return 1
  same_det "$d/a.det" "$d/b.det" 10 || { echo "two runs differ"; return 1; }
  plan_det "$one" 1 "$QT_TMP/odd" 10 && same_det "$QT_TMP/odd/$one.det" "$d/a.det" 10 || return 1
  var_det "$d" "$one" 1 plain steps=10 || return 1
  ! cmp -s "$d/plain.det" "$d/a.det" || { echo "equals one rank without the factor: plan.txt is wrong"; return 1; }
  echo "one rank without the key: $(tail -n 1 "$d/plain.det")"
}
check "axes of any size: tensor 3 without canonical_factor (implied 3): deterministic, == one rank with canonical_factor 3, != one rank without it (plan.txt says so)" \
  implied_cell tp3 npow2-t3-next-tp3 3 npow2-t3-next-1r "tensor 3" "canonical_factor 3 (implied by the tensor / context axes"
check "axes of any size: context 3 without canonical_factor or context_blocks (implied 3, 3 blocks): deterministic, == one rank with canonical_factor 3 and 3 blocks, != one rank without them" \
  implied_cell cp3 npow2-c3-next-cp3 3 npow2-c3-next-1r "context 3" "with canonical_factor 3, one-rank bits: yes" context_blocks
check "axes of any size: data 2 x context 3 without canonical_factor (implied 3; the units per range): == one rank with canonical_factor 3, != one rank without it" \
  implied_cell dp2cp3 npow2-c3-next-dp2cp3 6 npow2-c3-next-1r-b2 "context 3" "with canonical_factor 3, one-rank bits: yes: each rank's 1 gradient leaf per microbatch go" context_blocks

check "context units: context 3 with 6 blocks, G 3, per layer (canonical_factor 3) == one rank's 3 sequences, bit for bit" ctx_layer_units

# tensor 5 without canonical_factor (a tiny variant whose split dimensions divide by 5, 20
# tokens): the axis implies the factor 5; == one rank with canonical_factor: 5, != one rank
# without it, two runs identical
implied_t5() {
  local d=$QT_TMP/odd/implied/tp5 one=t5-1r mesh=t5-tp5 plain=t5-plain
  mkdir -p "$d/$one-v" "$d/$mesh-v" "$d/$plain-v"
  printf '%s\n' 'model_name: "qwen3-next-tiny"' base_emb_dim:\ 40 base_num_query_heads:\ 10 \
    base_num_kv_heads:\ 5 head_dim:\ 20 gdn_num_key_heads:\ 5 gdn_num_value_heads:\ 10 \
    gdn_key_head_dim:\ 10 gdn_value_head_dim:\ 10 base_moe_mlp_dim:\ 20 shared_expert_mlp_dim:\ 20 \
    max_target_length:\ 20 steps:\ 10 learning_rate:\ 3.0e-3 ici_fsdp_parallelism:\ 1 \
    gradient_accumulation_steps:\ 1 'remat_policy: "none"' > "$d/common.txt"
  { cat "$d/common.txt"; echo "per_device_batch_size: 1"; } > "$d/$plain-v/$plain.yml"
  { cat "$d/$plain-v/$plain.yml"; echo "canonical_factor: 5"; } > "$d/$one-v/$one.yml"
  { cat "$d/common.txt"; printf '%s\n' "per_device_batch_size: 0.2" "num_ranks: 5" \
      "ici_tensor_parallelism: 5"; } > "$d/$mesh-v/$mesh.yml"
  yml_plan $one "$d" && yml_plan $plain "$d" && yml_plan $mesh "$d" || return 1
  grep -q "one-rank bits: no: tensor 5 without canonical_factor: the axes imply canonical_factor 5 .*with canonical_factor: 5 the plan gives one rank's bits" \
    "$d/$mesh-v/plan/$mesh/plan.txt" || { grep "one-rank bits" "$d/$mesh-v/plan/$mesh/plan.txt"; return 1; }
  var_det "$d" $mesh 5 a steps=10 && var_det "$d" $mesh 5 b steps=10 && var_det "$d" $one 1 one steps=10 &&
    var_det "$d" $plain 1 plain steps=10 || return 1
  same_det "$d/a.det" "$d/b.det" 10 && same_det "$d/one.det" "$d/a.det" 10 || return 1
  ! cmp -s "$d/plain.det" "$d/a.det" || { echo "equals one rank without the factor"; return 1; }
  echo "one rank without the key: $(tail -n 1 "$d/plain.det")"
}
check "axes of any size: tensor 5 without canonical_factor (implied 5): deterministic, == one rank with canonical_factor 5, != one rank without it" implied_t5

# tensor 16 without canonical_factor (a tiny variant whose split dimensions divide by 16):
# one rank holds at most 8 canonical blocks a count, so the axis raises the plan's cap to
# 16 blocks; no one-rank plan has those counts: plan.txt says "no" (its own bits); two runs
# identical, and != one rank of the same model (8 blocks)
implied_t16() {
  local d=$QT_TMP/odd/implied/tp16 r=test-next-tiny
  local m="base_num_query_heads=16 base_num_kv_heads=16 gdn_num_key_heads=16 gdn_num_value_heads=16 base_moe_mlp_dim=64 shared_expert_mlp_dim=64 head_dim=16 base_emb_dim=64 gdn_value_head_dim=16 gdn_key_head_dim=16 steps=10"
  mkdir -p "$d/one" "$d/mesh"
  plan_variant $r "$d/one" $m per_device_batch_size=1 &&
    plan_variant $r "$d/mesh" $m num_ranks=16 ici_fsdp_parallelism=1 ici_tensor_parallelism=16 per_device_batch_size=0.0625 ||
    return 1
  grep -q "one-rank bits: no: tensor 16 without canonical_factor: one rank holds at most 8 canonical blocks a count, .* counts go up to 16 blocks .* its bits are its own" \
    "$d/mesh/$r-v/plan/$r/plan.txt" || { grep "one-rank bits" "$d/mesh/$r-v/plan/$r/plan.txt"; return 1; }
  var_det "$d/mesh" $r 16 a steps=10 && var_det "$d/mesh" $r 16 b steps=10 && var_det "$d/one" $r 1 one steps=10 ||
    return 1
  same_det "$d/mesh/a.det" "$d/mesh/b.det" 10 || { echo "two runs differ"; return 1; }
  ! cmp -s "$d/one/one.det" "$d/mesh/a.det" || { echo "equals one rank: plan.txt is wrong"; return 1; }
  echo "one rank (8 blocks): $(tail -n 1 "$d/one/one.det")"
}
check "axes of any size: tensor 16 without canonical_factor (the cap raised to 16 blocks): deterministic, its own bits (plan.txt says so)" implied_t16

# the per-layer form's units (gradient_reduce=layer: GRAD_MB_UNITS inside the backward, at
# each range's last weight gradient): data 2 and expert 2 with three a microbatch, G 2 ==
# one rank (variants of the runs above)
split_layer_same() {
  local d=$QT_TMP/odd/layer r=$1 n=$2
  mkdir -p "$d"
  plan_variant $r "$d" gradient_reduce=layer || return 1
  grep -q "one-rank bits: yes: .* per layer, right after its last weight gradient" "$d/$r-v/plan/$r/plan.txt" ||
    { grep "one-rank bits" "$d/$r-v/plan/$r/plan.txt"; return 1; }
  plan_det odd-next-1r-b12 1 "$QT_TMP/odd" 10 && var_det "$d" $r $n $r steps=10 &&
    same_det "$QT_TMP/odd/odd-next-1r-b12.det" "$d/$r.det" 10
}
check "any split: data 2 with 3 leaves a microbatch, G 2, per layer (units) == one rank, bit for bit" split_layer_same split-next-dp2-g2-mb 2
check "any split: expert 2 with 3 leaves a microbatch, G 2, per layer (units) == one rank, bit for bit" split_layer_same split-next-ep2-b3-g2 2

# the per-layer form's units exchange beside compute (collective_overlap, docs/overlap.md "The
# per-layer form's units exchange"): each range's exchange but the last starts after its last
# weight gradient (GRAD_MB_UNITS_START) and completes, with the push, before the next range's
# (GRAD_MB_UNITS_WAIT), beside the next range's weight gradients. `on` == `off` (blocking) ==
# one rank, loss bits and fingerprint of 10 steps; plan.txt says how many are split (none with
# off). Mutations that made these fail (tried by hand, data 2 with 6): the wait pushing before
# it waits (what the exchange has not yet received: the fingerprint differs from step 1), the
# start exchanging the unit windows without zeroing their padding first (from step 1),
# the leaf windows planned without the wait (ranges.c: the next range's window over the one
# in flight: configgen's check_windows refuses; with that check off the firmware's
# qt_validate_mb_splits refuses the plan).
# layer_units_overlap RUN RANKS ONE [KEY=VALUE...]: RUN's variant with gradient_reduce=layer
layer_units_overlap() {
  local r=$1 n=$2 one=$3; shift 3
  local d=$QT_TMP/odd/lov/$r co
  mkdir -p "$d/on" "$d/off"
  for co in on off; do
    plan_variant $r "$d/$co" gradient_reduce=layer collective_overlap=$co "$@" || return 1
  done
  local t=$d/on/$r-v/plan/$r/plan.txt
  grep -q "one-rank bits: yes: " "$t" || { grep "one-rank bits" "$t"; return 1; }
  grep -q "split: [1-9][0-9]* of [0-9]* ranges' units exchanges per layer" "$t" &&
    grep -q "grad_mb_units_start" "$t" && grep -q "grad_mb_units_wait" "$t" ||
    { echo "$t: no split units exchange"; return 1; }
  ! grep -q "grad_mb_units_start\|units exchanges per layer" "$d/off/$r-v/plan/$r/plan.txt" ||
    { echo "off splits"; return 1; }
  plan_det "$one" 1 "$QT_TMP/odd" 10 && var_det "$d/on" $r "$n" on steps=10 &&
    var_det "$d/off" $r "$n" off steps=10 || return 1
  same_det "$QT_TMP/odd/$one.det" "$d/off/off.det" 10 && same_det "$d/off/off.det" "$d/on/on.det" 10
}
check "any split: data 2 with 6 a rank, per layer, units exchange overlapped == blocking == one rank, bit for bit" layer_units_overlap split-next-dp2-b6 2 odd-next-1r-b12
check "any split: data 3 with 3 a rank, per layer, units exchange overlapped == blocking == one rank, bit for bit" layer_units_overlap odd-next-dp3-b3 3 odd-next-1r-b9
check "any split: fsdp 2 with 6 a rank, per layer with per-layer gathers, units exchange overlapped (gathers in flight too) == blocking == one rank, bit for bit" layer_units_overlap split-next-fsdp2-b6 2 odd-next-1r-b12 param_gather=layer
check "any split: data 2 x context 3, per layer, units exchange overlapped == blocking == one rank, bit for bit" layer_units_overlap npow2-c3-next-dp2cp3 6 npow2-c3-next-1r-b2

# the per-layer form's units with scanned layers, per-layer parameter gathers, ZeRO-1 and
# overlapped gathers (GRAD_MB_UNITS a scanned op, its range moved by the stride): data 2 x
# expert 2, 16 layers, three a microbatch, G 2 == one rank with 24 sequences (8 steps)
scan_layer_units() {
  local d=$QT_TMP/odd/scan r=scan-next-16l-dp2ep2-scan one=scan-next-16l-1r-b8
  mkdir -p "$d"
  plan_variant $r "$d" per_device_batch_size=3 && plan_variant $one "$d" per_device_batch_size=24 || return 1
  grep -q "one-rank bits: yes: .* per layer, right after" "$d/$r-v/plan/$r/plan.txt" &&
    grep -q "scanned" "$d/$r-v/plan/$r/plan.txt" || { echo "not scanned units per layer"; return 1; }
  var_det "$d" $one 1 one && var_det "$d" $r 4 mesh && same_det "$d/one.det" "$d/mesh.det" 8
}
check "any split: scanned data 2 x expert 2 with 3 leaves a microbatch, G 2, per layer with gathers, ZeRO-1 (units) == one rank, bit for bit" scan_layer_units

# the microbatch form where its units do not apply (25 leaves a microbatch: 25 unit levels,
# over QT_CG_MAX_UNIT_LEVELS 24, so the reduce-scatter after each microbatch stays, as before
# the units): deterministic, not one rank's bits, as plan.txt says - the microbatch form's
# old arithmetic differs from one rank's (the checks above are not vacuous)
split_own_bits() {
  local d=$QT_TMP/odd/own r=split-next-dp2-g2-mb one=odd-next-1r-b12
  mkdir -p "$d"
  plan_variant $r "$d" per_device_batch_size=25 || return 1
  grep -q "one-rank bits: no: each rank's 25 gradient leaves per microbatch are not a power of two.*units do not apply" \
    "$d/$r-v/plan/$r/plan.txt" || { grep "one-rank bits" "$d/$r-v/plan/$r/plan.txt"; return 1; }
  grep -q "microbatch gradients of range 0 (reduce-scatter over data)" "$d/$r-v/plan/$r/plan.txt" ||
    { echo "no reduce-scatter per microbatch"; return 1; }
  plan_variant $one "$d" per_device_batch_size=100 && var_det "$d" $one 1 one steps=10 &&
    var_det "$d" $r 2 a steps=10 && var_det "$d" $r 2 b steps=10 || return 1
  same_det "$d/a.det" "$d/b.det" 10 || { echo "two runs differ"; return 1; }
  ! cmp -s "$d/one.det" "$d/a.det" || { echo "equals one rank: plan.txt is wrong"; return 1; }
  echo "deterministic: $(tail -n 1 "$d/a.det"); one rank: $(tail -n 1 "$d/one.det")"
}
check "any split: the microbatch form without its units (25 leaves a microbatch) is deterministic, not one rank's bits (plan.txt says so)" split_own_bits

# more units than the plan's tree levels allow (25 leaves a rank: 25 units of one leaf, over
# QT_CG_MAX_UNIT_LEVELS 24): configgen keeps the reduce-scatter and plan.txt says "no" with
# the reason (no refusal, no wrong "yes")
split_too_many_units() {
  local d=$QT_TMP/odd/units25
  rm -rf "$d"; mkdir -p "$d"
  build/configgen/configgen -o "$d" configgen/configs/runs/split-next-dp2-b6.yml \
    per_device_batch_size=25 > "$d.log" 2>&1 || { tail -n 3 "$d.log"; return 1; }
  grep -q "one-rank bits: no: each rank's 25 gradient leaves per step are not a power of two.*more unit levels than 24" \
    "$d/split-next-dp2-b6/plan.txt" || { grep "one-rank bits" "$d/split-next-dp2-b6/plan.txt"; return 1; }
  grep -q "reduce-scatter over data" "$d/split-next-dp2-b6/plan.txt" || { echo "no reduce-scatter"; return 1; }
}
check "any split: 25 leaves a rank (more units than tree levels): plan.txt says no, the reduce-scatter stays" split_too_many_units
