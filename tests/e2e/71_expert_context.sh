# 71_expert_context.sh - the routed experts replicated over context (issue 35, docs/context.md
# "Experts replicated over context"), sourced by run_all.sh. Where expert x context does not
# divide num_experts but the expert axis does, the experts split over `expert` alone (MaxText's
# default rules), each context index exchanges its blocks over the expert axis, and the
# experts' gradients reduce over context, their units interleaved with the other context
# indices' in the one-rank tree (qt_plan_fields.def expert_ctx_rep). Each cell: qwen3-next tiny
# with 6 experts (num_experts=6) on expert 2 x context 2 == one rank with the same
# context_blocks (4) and global batch, bit for bit (loss bits and fingerprint, 10 steps):
# dropless explicit and auto, the load-balance term (0.01), capacity dropping (sparse_matmul
# false, capacity_factor 1), bf16 (auto), data 2 x expert 2 x context 2 (8 ranks), with
# ZeRO-1, per-layer reduction, the split units exchange (collective_overlap on) and the split
# expert exchanges (all), tensor 2 (8 ranks), pipeline 2
# (8 ranks), the MTP head, remat full; expert 2 x context 4; the tiny model's 4 experts on expert 2 x
# context 3; the checkpoint; the term and the capacity are not vacuous (they change the
# one-rank bits); ragged_buffer_factor with a context axis; the dispatch in rounds in this
# form (== whole == one rank); slices splitting the context or expert axis (end). Mutation:
# pushing the units in the plain (member, unit) order (firmware/runtime/step_ops.c, ilv = 0)
# fails every cell that compares with one rank (step 1's fingerprint differs). Plans: the ctx-next-*, ctx-b16-*, ctxu-* run files with
# overrides (plan_variant), the tiny test data, seed 11, every mpiexec under `timeout`.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

# ectx_file WORDS...: the det file of a run and its overrides (the words joined by one space)
ectx_file() {
  local w
  w=$(echo $*)
  printf '%s/ectx/%s.det' "$QT_TMP" "$(printf '%s' "$w" | tr -c 'A-Za-z0-9.=-' '_')"
}
# ectx_det ONE N KEY=VALUE...: plan run file ONE with the overrides, run it on N ranks for 10
# steps; its det lines in $QT_TMP/ectx/<ONE + overrides>.det (cached: the one-rank references
# are shared by the cells)
ectx_det() {
  local run=$1 n=$2; shift 2
  local d data=tests/golden/e2e/test-next-tiny/tokens.npy
  d=$(ectx_file "$run" "$n" "$@") && d=${d%.det}
  [ -s "$d.det" ] && return 0
  mkdir -p "$d"
  plan_variant "$run" "$d" "$@" || return 1
  if [ "$n" -eq 1 ]; then
    timeout 120 "$d/$run-v/qtrain" data=$data seed=11 steps=10 metrics=$d/m.jsonl 2> "$d/err"
  else
    timeout 200 mpiexec -n "$n" "$d/$run-v/qtrain" data=$data seed=11 steps=10 metrics=$d/m.jsonl 2> "$d/err"
  fi || { tail -n 3 "$d/err"; return 1; }
  det_fields "$d/m.jsonl" > "$d.det"
}

# ectx_same ONE RUN N "RUN-KEYS" KEY=VALUE...: RUN on N ranks with the overrides and RUN-KEYS
# (its mesh) == ONE on one rank with the overrides, and RUN's plan says it uses the
# replicated form
ectx_same() {
  local one=$1 run=$2 n=$3 rkeys=$4; shift 4
  ectx_det "$one" 1 num_experts=6 "$@" && ectx_det "$run" "$n" num_experts=6 $rkeys "$@" || return 1
  local a b p
  a=$(ectx_file "$one 1 num_experts=6 $*") b=$(ectx_file "$run $n num_experts=6 $rkeys $*")
  p=$(dirname "$b")/$(basename "$b" .det)/$run-v/plan/$run/plan.txt
  grep -q "moe experts: split over expert alone" "$p" || { echo "$p does not name the form"; return 1; }
  cmp "$a" "$b" && echo "identical: $(tail -n 1 "$b")"
}

check "experts replicated over context: 6 experts on expert 2 x context 2 (explicit) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 4 ""
check "experts replicated over context: expert 2 x context 2 (auto) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2-auto 4 ""
check "experts replicated over context: data 2 x expert 2 x context 2 (8 ranks) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 8 "num_ranks=8 ici_data_parallelism=2 gradient_accumulation_steps=1"
check "experts replicated over context: the load-balance term on expert 2 x context 2 == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2-auto 4 "" load_balance_loss_weight=0.01
check "experts replicated over context: capacity dropping on expert 2 x context 2 == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2-auto 4 "" sparse_matmul=false capacity_factor=1.0
check "experts replicated over context: bf16 expert 2 x context 2 (auto) == one rank, bit for bit" \
  ectx_same ctx-b16-next-1r-nb4 ctx-b16-next-cp2ep2-auto 4 ""
check "experts replicated over context: data 2 with ZeRO-1 (shard_optimizer_over_data) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 8 "num_ranks=8 ici_data_parallelism=2 gradient_accumulation_steps=1 shard_optimizer_over_data=true"
check "experts replicated over context: expert 2 x context 4 (8 ranks, one block a rank) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 8 "num_ranks=8 ici_context_parallelism=4 per_device_batch_size=0.25"
check "experts replicated over context: per-layer reduction (gradient_reduce=layer) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 4 "gradient_reduce=layer"
check "experts replicated over context: the split units exchange (collective_overlap=on) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 4 "collective_overlap=on"
check "experts replicated over context: the expert exchanges split too (collective_overlap=all) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 4 "collective_overlap=all"
check "experts replicated over context: tensor 2 x expert 2 x context 2 (8 ranks) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 8 "num_ranks=8 ici_tensor_parallelism=2 per_device_batch_size=0.25"
check "experts replicated over context: the MTP head (mtp_num_layers 1, its own routed experts) == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 4 "" mtp_num_layers=1
check "experts replicated over context: remat full == one rank, bit for bit" \
  ectx_same ctx-next-1r-nb4 ctx-next-cp2ep2 4 "" remat_policy=full
# pipeline 2: per_device_batch_size counts the stages too (8 sequences a step), so the
# one-rank reference takes 8
ectx_pp() {
  ectx_det ctx-next-1r-nb4 1 num_experts=6 per_device_batch_size=8 &&
    ectx_det ctx-next-cp2ep2 8 num_experts=6 num_ranks=8 ici_pipeline_parallelism=2 || return 1
  local b
  b=$(ectx_file ctx-next-cp2ep2 8 num_experts=6 num_ranks=8 ici_pipeline_parallelism=2)
  grep -q "moe experts: split over expert alone" "${b%.det}"/ctx-next-cp2ep2-v/plan/*/plan.txt ||
    { echo "the plan does not name the form"; return 1; }
  cmp "$(ectx_file ctx-next-1r-nb4 1 num_experts=6 per_device_batch_size=8)" "$b" &&
    echo "identical: $(tail -n 1 "$b")"
}
check "experts replicated over context: pipeline 2 x expert 2 x context 2 (8 ranks) == one rank, bit for bit" \
  ectx_pp
check "experts replicated over context: the tiny model's 4 experts on expert 2 x context 3 (canonical_factor 3) == one rank, bit for bit" \
  ectx_same ctxu-next-1r ctxu-next-cp3 6 "num_ranks=6 ici_expert_parallelism=2 gradient_accumulation_steps=1" num_experts=4
# not vacuous: the term and the capacity change the one-rank bits of the 6-expert model
ectx_differ() {
  local a b
  a=$(tail -n 1 "$(ectx_file "ctx-next-1r-nb4 1 num_experts=6 ")") || return 1
  b=$(tail -n 1 "$(ectx_file "ctx-next-1r-nb4 1 num_experts=6 $*")") || return 1
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || { echo "the same bits: $a"; return 1; }
  echo "dropless: $a; $*: $b"
}
check "experts replicated over context: the load-balance term changes the one-rank bits" \
  ectx_differ load_balance_loss_weight=0.01
check "experts replicated over context: capacity dropping changes the one-rank bits" \
  ectx_differ sparse_matmul=false capacity_factor=1.0

# Receive buffers (ragged_buffer_factor r > 0) with a context axis: always the replicated form,
# MaxText's buffer per context index over the expert axis (the tiny model's 4 experts on
# expert 2 x context 2, which would otherwise span expert x context). r 100 drops nothing and
# == one rank (ctx-next-1r-nb4); r 0.5 drops at every step (B = int(8 x 2 x 0.5) = 8 rows a
# host; the 32 routed rows of a context index's exchange over 2 hosts keep 16: 256 of the 512
# assignments of a step) and plan.txt says one-rank bits: no.
ectx_dropped() {
  grep -v '^{"manifest"' "$1" | awk -F'"moe_dropped":' '{ split($2, a, ","); m = match($0, /"moe_assignments":[0-9]+/);
      print a[1] "/" (m ? substr($0, RSTART + 18, RLENGTH - 18) : "none") }' | sort -u | tr '\n' ' '
}
ectx_ragged() {
  local r=$1 want=$2 f p
  ectx_det ctx-next-cp2ep2 4 ragged_buffer_factor=$r || return 1
  f=$(ectx_file ctx-next-cp2ep2 4 ragged_buffer_factor=$r) && f=${f%.det}
  p=$f/ctx-next-cp2ep2-v/plan/ctx-next-cp2ep2/plan.txt
  grep -q "moe experts: split over expert alone (2 of 4 a rank)" "$p" || { echo "$p does not name the form"; return 1; }
  grep -q "one-rank bits: no: ragged_buffer_factor=$r" "$p" || { echo "$p does not say no"; return 1; }
  [ "$(ectx_dropped "$f/m.jsonl")" = "$want " ] || { echo "dropped: $(ectx_dropped "$f/m.jsonl")"; return 1; }
  ectx_det ctx-next-1r-nb4 1 || return 1
  if [ "$want" = 0/512 ]; then
    cmp "$(ectx_file ctx-next-1r-nb4 1)" "$f.det" || return 1
  else
    ! cmp -s "$(ectx_file ctx-next-1r-nb4 1)" "$f.det" || { echo "no drop changed the bits"; return 1; }
  fi
  echo "dropped $want a step: $(tail -n 1 "$f.det")"
}
check "experts replicated over context: ragged_buffer_factor 100 on expert 2 x context 2 == one rank, 0 dropped" \
  ectx_ragged 100 0/512
check "experts replicated over context: ragged_buffer_factor 0.5 on expert 2 x context 2 drops 256/512 a step, bits differ" \
  ectx_ragged 0.5 256/512

# The expert dispatch in rounds in this form (expert_dispatch: rounds, config/dispatch.c;
# docs/context.md "Experts replicated over context"): each context index's exchange over the
# expert axis (M = the expert degree) moves a host's rows in rounds of expert_chunk_rows = 8
# (a leaf's worst case: 4 tokens x min(k 2, 3 experts a rank); the 4-expert ragged cells:
# 4 x min(2, 2)), so a host's rows of a layer take several rounds. Each: rounds == the whole
# dispatch of the same plan == one rank, loss bits and fingerprint over 10 steps; the plan
# holds the MOE_ROUNDS_* ops and no MOE_DISPATCH_FWD. Mutation (QT_EP_ROUNDS_HOME_FLOATS'
# member count M x context in the configgen, or the rounds' home tables of member 0 for
# every member) fails them.
ectx_rounds_plan() {
  grep -q "^  moe dispatch: rounds of 8 host rows (expert_dispatch=rounds" "$1" &&
    grep -qi "moe_rounds_wgrad" "$1" && ! grep -qi "moe_dispatch_fwd" "$1" ||
    { echo "$1 does not dispatch in rounds of 8 rows"; return 1; }
}
# ectx_rounds ONE RUN N "RUN-KEYS" KEY=VALUE...: as ectx_same (ONE without the rounds keys) with
# RUN's dispatch in rounds of 8 rows, and == RUN's whole dispatch
ectx_rounds() {
  local one=$1 run=$2 n=$3 rkeys=$4; shift 4
  local rr="expert_dispatch=rounds expert_chunk_rows=8"
  ectx_det "$one" 1 num_experts=6 "$@" && ectx_det "$run" "$n" num_experts=6 $rkeys "$@" &&
    ectx_det "$run" "$n" num_experts=6 $rkeys $rr "$@" || return 1
  local a w r p
  a=$(ectx_file "$one 1 num_experts=6 $*") w=$(ectx_file "$run $n num_experts=6 $rkeys $*")
  r=$(ectx_file "$run $n num_experts=6 $rkeys $rr $*")
  p=${r%.det}/$run-v/plan/$run/plan.txt
  grep -q "moe experts: split over expert alone" "$p" || { echo "$p does not name the form"; return 1; }
  ectx_rounds_plan "$p" && cmp "$a" "$r" && cmp "$w" "$r" &&
    echo "== whole == one rank: $(tail -n 1 "$r")"
}
check "experts replicated over context: the dispatch in rounds of 8 rows on expert 2 x context 2 == whole == one rank, bit for bit" \
  ectx_rounds ctx-next-1r-nb4 ctx-next-cp2ep2 4 ""
check "experts replicated over context: bf16, the dispatch in rounds of 8 rows == whole == one rank, bit for bit" \
  ectx_rounds ctx-b16-next-1r-nb4 ctx-b16-next-cp2ep2-auto 4 ""
check "experts replicated over context: capacity dropping, the dispatch in rounds of 8 rows == whole == one rank, bit for bit" \
  ectx_rounds ctx-next-1r-nb4 ctx-next-cp2ep2-auto 4 "" sparse_matmul=false capacity_factor=1.0
check "experts replicated over context: data 2 x expert 2 x context 2 (8 ranks), the dispatch in rounds == whole == one rank, bit for bit" \
  ectx_rounds ctx-next-1r-nb4 ctx-next-cp2ep2 8 "num_ranks=8 ici_data_parallelism=2 gradient_accumulation_steps=1"
# several rounds ran: rank 0 makes more collective calls with rounds of 8 rows than with
# one round per op (expert_chunk_rows 1000), same bits
ectx_several_rounds() {
  ectx_det ctx-next-cp2ep2 4 num_experts=6 expert_dispatch=rounds expert_chunk_rows=8 &&
    ectx_det ctx-next-cp2ep2 4 num_experts=6 expert_dispatch=rounds expert_chunk_rows=1000 || return 1
  local a b
  a=$(ectx_file ctx-next-cp2ep2 4 num_experts=6 expert_dispatch=rounds expert_chunk_rows=8)
  b=$(ectx_file ctx-next-cp2ep2 4 num_experts=6 expert_dispatch=rounds expert_chunk_rows=1000)
  cmp "$a" "$b" || { echo "one round per op gives other bits"; return 1; }
  more_rounds "${a%.det}/err" "${b%.det}/err" "rounds of 8 rows"
}
check "experts replicated over context: rounds of 8 rows run several rounds (more calls than one round per op, same bits)" \
  ectx_several_rounds
# ragged_buffer_factor with a context axis (the replicated form on the 4 experts) in rounds of
# 8 rows: r 100 == whole == one rank, 0 dropped; r 0.5 == whole, the same drops (256/512)
ectx_ragged_rounds() {
  local r=$1 want=$2 f w
  ectx_det ctx-next-cp2ep2 4 ragged_buffer_factor=$r &&
    ectx_det ctx-next-cp2ep2 4 ragged_buffer_factor=$r expert_dispatch=rounds expert_chunk_rows=8 || return 1
  w=$(ectx_file ctx-next-cp2ep2 4 ragged_buffer_factor=$r)
  f=$(ectx_file ctx-next-cp2ep2 4 ragged_buffer_factor=$r expert_dispatch=rounds expert_chunk_rows=8)
  ectx_rounds_plan "${f%.det}/ctx-next-cp2ep2-v/plan/ctx-next-cp2ep2/plan.txt" || return 1
  [ "$(ectx_dropped "${f%.det}/m.jsonl")" = "$want " ] ||
    { echo "dropped: $(ectx_dropped "${f%.det}/m.jsonl")"; return 1; }
  cmp "$w" "$f" || return 1
  if [ "$want" = 0/512 ]; then
    ectx_det ctx-next-1r-nb4 1 && cmp "$(ectx_file ctx-next-1r-nb4 1)" "$f" || return 1
  fi
  echo "== the whole dispatch, dropped $want a step: $(tail -n 1 "$f")"
}
check "experts replicated over context: ragged_buffer_factor 100 in rounds of 8 rows == whole == one rank, 0 dropped" \
  ectx_ragged_rounds 100 0/512
check "experts replicated over context: ragged_buffer_factor 0.5 in rounds of 8 rows == whole, the same drops" \
  ectx_ragged_rounds 0.5 256/512

# Slices (58_slices.sh: dcn_*_parallelism, the ranks slice-major, each run as two "nodes"
# through hydra's fork launcher) splitting the context or the expert axis in this form: the
# group index of a reduce group is the mixed radix over its axes' global coordinates
# (context least significant) whichever slice a rank is on, which the interleaved units push
# assumes. dcn_context 2 x ici_expert 2 and dcn_expert 2 x ici_context 2 (6 experts, 4 ranks),
# whole and in rounds of 8 rows, == one rank.
ectx_slices() {
  local one d f data=tests/golden/e2e/test-next-tiny/tokens.npy
  ectx_det ctx-next-1r-nb4 1 num_experts=6 || return 1
  one=$(ectx_file ctx-next-1r-nb4 1 num_experts=6)
  f=$(ectx_file slices "$@") && d=${f%.det}
  rm -rf "$d"; mkdir -p "$d"
  plan_variant ctx-next-cp2ep2 "$d" num_experts=6 "$@" || return 1
  grep -q "moe experts: split over expert alone" "$d/ctx-next-cp2ep2-v/plan/ctx-next-cp2ep2/plan.txt" &&
    grep -q "slices (dcn): 2" "$d/ctx-next-cp2ep2-v/plan/ctx-next-cp2ep2/plan.txt" ||
    { echo "the plan does not name the form and the slices"; return 1; }
  timeout 200 mpiexec -launcher fork -hosts node0:2,node1:2 -n 4 "$d/ctx-next-cp2ep2-v/qtrain" \
    data=$data seed=11 steps=10 metrics=$d/m.jsonl > "$d/err" 2>&1 || { tail -n 3 "$d/err"; return 1; }
  det_fields "$d/m.jsonl" > "$f" && cmp "$one" "$f" && echo "identical: $(tail -n 1 "$f")"
}
check "experts replicated over context: slices dcn_context 2 x ici_expert 2 (two nodes) == one rank, bit for bit" \
  ectx_slices ici_context_parallelism=1 dcn_context_parallelism=2
check "experts replicated over context: slices dcn_expert 2 x ici_context 2 (two nodes) == one rank, bit for bit" \
  ectx_slices ici_expert_parallelism=1 dcn_expert_parallelism=2
check "experts replicated over context: slices dcn_context 2 x ici_expert 2, the dispatch in rounds of 8 rows == one rank, bit for bit" \
  ectx_slices ici_context_parallelism=1 dcn_context_parallelism=2 expert_dispatch=rounds expert_chunk_rows=8
check "experts replicated over context: slices dcn_expert 2 x ici_context 2, the dispatch in rounds of 8 rows == one rank, bit for bit" \
  ectx_slices ici_expert_parallelism=1 dcn_expert_parallelism=2 expert_dispatch=rounds expert_chunk_rows=8

# Checkpoints (as 73_context_ckpt.sh): the 6-expert model's checkpoint after 5 steps on
# expert 2 x context 2 (replicated experts, one .safetensors file) is the one-rank file, the
# same bytes (headers equal once plan hash and run name are blanked), and resuming it on one
# rank gives steps 6..10 of the uninterrupted one-rank run, bit for bit.
ectx_ckpt() {
  local one run d=$QT_TMP/ectx/ckpt data=tests/golden/e2e/test-next-tiny/tokens.npy
  ectx_det ctx-next-1r-nb4 1 num_experts=6 && ectx_det ctx-next-cp2ep2 4 num_experts=6 || return 1
  one=$(ectx_file ctx-next-1r-nb4 1 num_experts=6) && one=${one%.det}/ctx-next-1r-nb4-v/qtrain
  run=$(ectx_file ctx-next-cp2ep2 4 num_experts=6) && run=${run%.det}/ctx-next-cp2ep2-v/qtrain
  mkdir -p "$d"
  timeout 120 "$one" data=$data seed=11 steps=5 save=$d/one.safetensors 2> "$d/one.log" &&
    timeout 120 mpiexec -n 4 "$run" data=$data seed=11 steps=5 save=$d/run.safetensors 2> "$d/run.log" &&
    timeout 120 "$one" data=$data seed=11 steps=10 load=$d/run.safetensors metrics=$d/res.jsonl 2> "$d/res.log" ||
    { tail -n 3 "$d"/*.log; return 1; }
  ckpt_same_file "$d/one.safetensors" "$d/run.safetensors" || return 1
  grep -q "resuming from .* at step 5" "$d/res.log" || { echo "did not resume at step 5"; return 1; }
  det_fields "$d/res.jsonl" > "$d/res.det" || return 1
  cmp <(tail -n 5 "$(ectx_file ctx-next-1r-nb4 1 num_experts=6)") "$d/res.det" &&
    echo "steps 6..10 identical: $(tail -n 1 "$d/res.det")"
}
check "experts replicated over context: the expert 2 x context 2 checkpoint is the one-rank file, and resumes on one rank bit for bit" \
  ectx_ckpt
