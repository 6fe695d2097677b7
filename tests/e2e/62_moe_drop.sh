# 62_moe_drop.sh - the two token-dropping forms MaxText accepts beyond a capacity >= 1
# (sourced by run_all.sh; issue 35, docs/config.md "MoE form"). Variants of committed runs
# (plan_variant, run_all.sh) built into $QT_TMP/moedrop.
#
# 1. A capacity of 0 (sparse_matmul false, capacity_factor 0.1 on 16 tokens, k 2, E 4:
#    C = int(max(8 x 0.1, 0.1)) = 0): every routed assignment drops (plan field
#    moe_drop_all). The golden test-next-cap0 (10_golden.sh) checks it against the PyTorch
#    reference; here: every step reports every assignment dropped, the bits differ from
#    capacity 1.0's, and EP2, DP2 x EP2 and EP2 x TP2 give one rank's bits (loss bits and
#    fingerprint, 10 steps) with the load-balance term on (the router's only gradient).
# 2. The expert hosts' receive buffers (sparse_matmul true, ragged_buffer_factor r > 0):
#    B = int(T k r) rows a microbatch per host (T = 2 x 16 tokens of a rank, k = 2: r 0.5
#    gives B = 32 of the 64 rows a host gets on average), rows past it dropped in MaxText's
#    order (source rank, expert, token; tests/unit/test_moe_ragged.cpp checks the rule).
#    EP2 with r 0.5 drops at every step (the metrics' moe_dropped) and changes the bits; EP2
#    with r 100 drops nothing and has the dropless EP2 run's bits; one expert rank with r 0.5
#    has the dropless one-rank plan (its hash) and bits (MaxText drops only with expert
#    parallelism); plan.txt says "one-rank bits: no" with the buffer. The dispatch in rounds
#    (expert_dispatch rounds, chunks of 32 rows) keeps the same rows: the whole dispatch's
#    bits. EP4 (one sequence a rank, B = 16) drops other rows than EP2 (the same count when
#    every host overflows: half the rows): the bits depend on the expert degree, as the
#    contract says.

MD=$QT_TMP/moedrop
DATA=tests/golden/e2e/test-next-tiny/tokens.npy
CAP0="capacity_factor=0.1 load_balance_loss_weight=0.01"

# md_run NAME RANKS BIN: 10 steps of BIN on RANKS ranks, metrics in $MD/NAME.jsonl, its
# det_fields in $MD/NAME.det (cached)
md_run() {
  local name=$1 n=$2 bin=$3
  [ -s "$MD/$name.det" ] && return 0
  if [ "$n" -eq 1 ]; then
    timeout 120 "$bin" data=$DATA seed=11 steps=10 metrics="$MD/$name.jsonl" > "$MD/$name.out" 2>&1
  else
    timeout 120 mpiexec -n "$n" "$bin" data=$DATA seed=11 steps=10 metrics="$MD/$name.jsonl" \
      > "$MD/$name.out" 2>&1
  fi || { tail -n 3 "$MD/$name.out"; return 1; }
  det_fields "$MD/$name.jsonl" > "$MD/$name.det"
}

# md_variant RUN RANKS KEY=VALUE...: the variant of RUN (built once per name) run for 10 steps
md_variant() {
  local run=$1 n=$2 tag=$3; shift 3
  mkdir -p "$MD/$tag"
  [ -x "$MD/$tag/$run-v/qtrain" ] || plan_variant "$run" "$MD/$tag" "$@" || return 1
  md_run "$tag-$run" "$n" "$MD/$tag/$run-v/qtrain"
}

# md_dropped NAME: each step's moe_dropped and moe_assignments, "d/a" per line
md_dropped() {
  grep -v '^{"manifest"' "$MD/$1.jsonl" |
    awk -F'"moe_dropped":' '{ split($2, a, ","); m = match($0, /"moe_assignments":[0-9]+/);
      print a[1] "/" (m ? substr($0, RSTART + 18, RLENGTH - 18) : "none") }'
}

# md_differ A B: runs A and B (their .det) differ at step 10
md_differ() {
  local a b
  a=$(tail -n 1 "$MD/$1.det") b=$(tail -n 1 "$MD/$2.det")
  [ "$a" != "$b" ] || { echo "$2 has the bits of $1: $a"; return 1; }
  echo "$1: $a; $2: $b"
}

cap0_all_dropped() {
  mkdir -p "$MD"
  md_variant cap-next-1r 1 cap0 $CAP0 || return 1
  grep -q "capacity C = int(max(ceil(16 x 2 / 4) x 0.1, 0.1)) = 0: every routed assignment drops" \
    "$MD/cap0/cap-next-1r-v/plan/cap-next-1r/plan.txt" || { echo "plan.txt lacks the C = 0 note"; return 1; }
  local d
  d=$(md_dropped cap0-cap-next-1r | sort -u)
  [ "$d" = "512/512" ] || { echo "expected every step 512 of 512 assignments dropped, got: $d"; return 1; }
  echo "every step: $d assignments dropped"
}
check "capacity 0: every routed assignment drops at every step (512 of 512), plan.txt says C = 0" cap0_all_dropped
cap0_differs() {
  md_variant cap-next-1r 1 cap0 $CAP0 &&
    md_variant cap-next-1r 1 cap1lb load_balance_loss_weight=0.01 || return 1
  md_differ cap1lb-cap-next-1r cap0-cap-next-1r
}
check "capacity 0 changes the bits (vs capacity_factor 1.0, C = 8)" cap0_differs
cap0_mesh() {
  md_variant cap-next-1r 1 cap0 $CAP0 && md_variant "$1" "$2" cap0 $CAP0 || return 1
  cmp "$MD/cap0-cap-next-1r.det" "$MD/cap0-$1.det" || return 1
  [ "$(md_dropped "cap0-$1" | sort -u)" = "512/512" ] || { echo "$1: dropped counts differ"; return 1; }
  echo "identical to one rank: $(tail -n 1 "$MD/cap0-$1.det")"
}
for cell in cap-next-ep2:2 cap-next-dp2ep2:4 cap-next-ep2tp2:4; do
  run=${cell%%:*} n=${cell##*:}
  check "capacity 0: $run ($n ranks) == one rank, 10 steps, bit for bit, every assignment dropped" cap0_mesh "$run" "$n"
done

# 2. receive buffers
ragged_drops() {
  mkdir -p "$MD"
  md_variant mesh-next-ep2 2 rb05 ragged_buffer_factor=0.5 || return 1
  local p=$MD/rb05/mesh-next-ep2-v/plan/mesh-next-ep2/plan.txt d
  grep -q "one-rank bits: no: ragged_buffer_factor=0.5: each expert host's receive buffer holds B = int(32 x 2 x 0.5) = 32 rows" "$p" ||
    { echo "plan.txt lacks the one-rank bits: no line"; grep "one-rank" "$p"; return 1; }
  d=$(md_dropped rb05-mesh-next-ep2)
  echo "$d" | awk -F/ '{ n++; if ($1 + 0 > 0 && $1 + 0 < $2 + 0) ok++ } END { exit (n == 10 && ok == 10) ? 0 : 1 }' ||
    { echo "expected 0 < dropped < assignments at each of 10 steps: $(echo $d)"; return 1; }
  # step 0: every host gets more than its 32 rows in every layer, so it keeps exactly 32 of
  # the group's 128: 4 layers x 64 dropped (a host that counted only its own source's rows,
  # or placed them source-last, would keep more or other rows)
  [ "$(echo "$d" | head -n 1)" = "256/512" ] || { echo "step 0: expected 256/512 dropped"; return 1; }
  echo "dropped per step: $(echo $d)"
}
check "ragged_buffer_factor 0.5 on EP2: rows drop at every step (metrics), plan.txt: one-rank bits no" ragged_drops
ragged_differs() {
  md_variant mesh-next-ep2 2 rb05 ragged_buffer_factor=0.5 || return 1
  md_run ep2 2 build/mesh-next-ep2/qtrain || return 1
  md_differ ep2 rb05-mesh-next-ep2
}
check "ragged_buffer_factor 0.5 on EP2 changes the bits (vs the dropless EP2 run)" ragged_differs
ragged_large() {
  md_variant mesh-next-ep2 2 rb100 ragged_buffer_factor=100 || return 1
  md_run ep2 2 build/mesh-next-ep2/qtrain || return 1
  cmp "$MD/ep2.det" "$MD/rb100-mesh-next-ep2.det" || return 1
  [ "$(md_dropped rb100-mesh-next-ep2 | sort -u)" = "0/512" ] ||
    { echo "expected 0 of 512 dropped: $(md_dropped rb100-mesh-next-ep2 | sort -u)"; return 1; }
  echo "identical to the dropless EP2 run, 0 dropped: $(tail -n 1 "$MD/ep2.det")"
}
check "ragged_buffer_factor 100 on EP2 == the dropless EP2 run, bit for bit, 0 dropped" ragged_large
ragged_one_rank() {
  md_variant mesh-next-1r 1 rb05 ragged_buffer_factor=0.5 || return 1
  md_run one 1 build/mesh-next-1r/qtrain || return 1
  cmp "$MD/one.det" "$MD/rb05-mesh-next-1r.det" || return 1
  local p=$MD/rb05/mesh-next-1r-v/plan/mesh-next-1r/plan.txt
  grep -q "ragged_buffer_factor=0.5: no expert parallelism" "$p" || { echo "plan.txt lacks the note"; return 1; }
  # the very plan of the dropless run (the plan hash covers every table and op)
  [ "$(grep -o 'plan hash 0x[0-9a-f]*' "$p")" = "$(grep -o 'plan hash 0x[0-9a-f]*' generated/mesh-next-1r/plan.txt)" ] ||
    { echo "the plan differs from mesh-next-1r's"; return 1; }
  ! grep -q '"moe_dropped"' "$MD/rb05-mesh-next-1r.jsonl" || { echo "one rank reports drops"; return 1; }
  echo "identical to the dropless one-rank run: $(tail -n 1 "$MD/one.det")"
}
check "ragged_buffer_factor 0.5 on one expert rank == dropless (as MaxText), bit for bit" ragged_one_rank
ragged_rounds() {
  md_variant mesh-next-ep2 2 rb05 ragged_buffer_factor=0.5 &&
    md_variant mesh-next-ep2-rounds 2 rb05 ragged_buffer_factor=0.5 || return 1
  cmp "$MD/rb05-mesh-next-ep2.det" "$MD/rb05-mesh-next-ep2-rounds.det" || return 1
  [ "$(md_dropped rb05-mesh-next-ep2)" = "$(md_dropped rb05-mesh-next-ep2-rounds)" ] ||
    { echo "dropped counts differ"; return 1; }
  echo "identical: $(tail -n 1 "$MD/rb05-mesh-next-ep2.det")"
}
check "ragged_buffer_factor 0.5: EP2 dispatched in rounds == the whole dispatch, bit for bit, same drops" ragged_rounds
ragged_ep4() {
  md_variant mesh-next-ep2 2 rb05 ragged_buffer_factor=0.5 &&
    md_variant mesh-next-ep4 4 rb05 ragged_buffer_factor=0.5 || return 1
  local a b
  a=$(md_dropped rb05-mesh-next-ep2 | head -n 1) b=$(md_dropped rb05-mesh-next-ep4 | head -n 1)
  [ "${b%%/*}" -gt 0 ] || { echo "EP4 drops nothing at step 0: $b"; return 1; }
  ! cmp -s "$MD/rb05-mesh-next-ep2.det" "$MD/rb05-mesh-next-ep4.det" ||
    { echo "EP4 has EP2's bits: $(tail -n 1 "$MD/rb05-mesh-next-ep2.det")"; return 1; }
  echo "step 0 dropped: EP2 $a, EP4 $b (every host over its buffer: half of the rows either"
  echo "way, but other rows); step 9: EP2 $(tail -n 1 "$MD/rb05-mesh-next-ep2.det"), EP4 $(tail -n 1 "$MD/rb05-mesh-next-ep4.det")"
}
check "ragged_buffer_factor 0.5: EP4 drops other rows than EP2 (the bits depend on the expert degree)" ragged_ep4

# Any expert count: 2048 experts (the keep rule's stack blocks of 1024; each host's 1024
# experts a block) on EP2: r 100 == the dropless run bit for bit with 0 dropped, r 0.5
# drops at every step
RB_MANY="num_experts=2048 num_experts_per_tok=8 base_moe_mlp_dim=4"
ragged_many() {
  md_variant mesh-next-ep2 2 rbm0 $RB_MANY &&
    md_variant mesh-next-ep2 2 rbm100 $RB_MANY ragged_buffer_factor=100 &&
    md_variant mesh-next-ep2 2 rbm05 $RB_MANY ragged_buffer_factor=0.5 || return 1
  cmp "$MD/rbm0-mesh-next-ep2.det" "$MD/rbm100-mesh-next-ep2.det" || return 1
  [ "$(md_dropped rbm100-mesh-next-ep2 | cut -d/ -f1 | sort -u)" = "0" ] ||
    { echo "r 100 dropped: $(md_dropped rbm100-mesh-next-ep2 | sort -u)"; return 1; }
  local d
  d=$(md_dropped rbm05-mesh-next-ep2)
  echo "$d" | awk -F/ '{ n++; if ($1 + 0 > 0 && $1 + 0 < $2 + 0) ok++ } END { exit (n == 10 && ok == 10) ? 0 : 1 }' ||
    { echo "r 0.5: expected 0 < dropped < assignments at each of 10 steps: $(echo $d)"; return 1; }
  echo "r 100 == dropless: $(tail -n 1 "$MD/rbm0-mesh-next-ep2.det"); r 0.5 dropped per step: $(echo $d)"
}
check "ragged_buffer_factor with 2048 experts on EP2: r 100 == dropless bit for bit, r 0.5 drops" ragged_many

# Resumes under receive-buffer dropping (session 24). Which rows drop depends on the expert
# degree, a rank's tokens a microbatch and the buffer's rows (the factor r), which the state
# hash leaves out (the mesh's), so a save records them ("moe_buffer": ep, tokens, rows,
# microbatches; not written without the buffers, so every other checkpoint's bytes are
# unchanged). A resume with the same value is the bit-exact one (EP2 r 0.5 at step 5 ->
# 10 == the uninterrupted run, silent); another expert degree (EP4), another factor
# (r 100), no buffers (one rank) or a dropless checkpoint into the buffers resume the state
# at step 5 with a note and the manifest's note saying it is not bit-exact.
ragged_resume() {
  local d=$MD/rbres bin2=$MD/rb05/mesh-next-ep2-v/qtrain c t rc
  mkdir -p "$d"; rm -f "$d"/*
  md_variant mesh-next-ep2 2 rb05 ragged_buffer_factor=0.5 &&
    md_variant mesh-next-ep4 4 rb05 ragged_buffer_factor=0.5 &&
    md_variant mesh-next-ep2 2 rb100 ragged_buffer_factor=100 || return 1
  timeout 120 mpiexec -n 2 $bin2 data=$DATA seed=11 steps=5 save=$d/rb.safetensors > /dev/null 2>&1 || return 1
  ckpt_header $d/rb.safetensors | grep -q '"moe_buffer":"ep=2 tokens=32 rows=32 microbatches=1"' ||
    { echo "no moe_buffer in the save:"; ckpt_header $d/rb.safetensors | grep -o '"__metadata__":{[^}]*}'; return 1; }
  timeout 120 build/mesh-next-1r/qtrain data=$DATA seed=11 steps=5 save=$d/one.safetensors > /dev/null 2>&1 || return 1
  ckpt_header $d/one.safetensors | grep -q moe_buffer && { echo "a dropless save records moe_buffer"; return 1; }
  # the same buffers: bit for bit, no note
  timeout 120 mpiexec -n 2 $bin2 data=$DATA seed=11 steps=10 load=$d/rb.safetensors metrics=$d/same.jsonl 2> $d/same.err || { tail -n 3 $d/same.err; return 1; }
  grep -q "moe_buffer\|receive.buffer" $d/same.err && { echo "same buffers: a note"; cat $d/same.err; return 1; }
  cmp <(tail -n 5 "$MD/rb05-mesh-next-ep2.det") <(det_fields $d/same.jsonl) || { echo "same buffers: not the uninterrupted run's bits"; return 1; }
  # another geometry: the state resumes at step 5, noted
  for c in "ep4:4:$MD/rb05/mesh-next-ep4-v/qtrain:ep=4 tokens=16 rows=16 microbatches=1" \
           "r100:2:$MD/rb100/mesh-next-ep2-v/qtrain:ep=2 tokens=32 rows=6400 microbatches=1" \
           "one:1:build/mesh-next-1r/qtrain:none"; do
    IFS=: read -r t n b now <<< "$c"
    timeout 120 mpiexec -n $n $b data=$DATA seed=11 steps=7 load=$d/rb.safetensors metrics=$d/$t.jsonl 2> $d/$t.err ||
      { tail -n 3 $d/$t.err; return 1; }
    grep -q "resuming from $d/rb.safetensors at step 5" $d/$t.err || { echo "$t: no resume"; return 1; }
    grep -q "note: $d/rb.safetensors was trained with expert receive buffers ep=2 tokens=32 rows=32 microbatches=1, this plan .*: the state resumes at step 5, but .*not a bit-exact resume" $d/$t.err ||
      { echo "$t: no note"; cat $d/$t.err; return 1; }
    head -n 1 $d/$t.jsonl | grep -qF "\"note\":\"moe_buffer ep=2 tokens=32 rows=32 microbatches=1 -> $now at step 5: the state resumed, not bit-exactly\"" ||
      { echo "$t: manifest note"; head -c 700 $d/$t.jsonl; return 1; }
    echo "$t: resumed at step 5 with the note (-> $now)"
  done
  # a dropless checkpoint into the buffers
  timeout 120 mpiexec -n 2 $bin2 data=$DATA seed=11 steps=7 load=$d/one.safetensors metrics=$d/in.jsonl 2> $d/in.err || { tail -n 3 $d/in.err; return 1; }
  grep -q "note: $d/one.safetensors was trained with no expert receive-buffer dropping (it records none: .*), this plan drops past receive buffers ep=2 tokens=32 rows=32 microbatches=1: .*not a bit-exact resume" $d/in.err ||
    { echo "dropless -> buffers: no note"; cat $d/in.err; return 1; }
  head -n 1 $d/in.jsonl | grep -qF '"note":"moe_buffer none -> ep=2 tokens=32 rows=32 microbatches=1 at step 5' || { echo "dropless -> buffers: manifest"; return 1; }
  echo "dropless -> EP2 r 0.5: resumed with the note"
}
check "ragged_buffer_factor: a save records its drop geometry (moe_buffer); the same resumes bit for bit, another expert degree / factor / none resumes with a not-bit-exact note" ragged_resume
