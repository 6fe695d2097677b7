#!/usr/bin/env bash
# bad_inputs_table.sh - runs every bad input listed in docs/bad_inputs.md against the real
# binaries and writes that table from what they print, so the table stays true.
#
#   tests/scripts/bad_inputs_table.sh [OUT]     (default docs/bad_inputs.md; run after make all)
#
# Each row: the category, the exact input, the message (the last stderr line that is not the
# start-up banner, a progress line or the peak-RSS line; "accepted" when the exit status is 0),
# the exit status, and the test that covers the case. Temporary paths are printed as $TMP.
# tests/e2e/40_bad_input.sh regenerates the table into a temporary file and compares it with
# the committed one, so a changed message or exit status fails `make test` until the table is
# regenerated. Faults that need timing (a killed or stopped rank, a data file truncated under
# its mapping) are not rerun here; their checks are listed at the end of the generated file.
# Checkpoint directories (sharded checkpoints) appear for their optimizer state and config.json only.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-docs/bad_inputs.md}
W=$(mktemp -d /tmp/qt-bad.XXXXXX)
trap 'rm -rf "$W"' EXIT
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
Q=build/test-next-tiny/qtrain
T=tests/golden/e2e/test-next-tiny/tokens.npy
CG=build/configgen/configgen
for f in $Q build/test-next-tiny/qtrain-static build/bench/qtrain build/mesh-next-dp2/qtrain \
         build/mtp-next-1r/qtrain build/mtp-keep-next-1r/qtrain build/test-35-tiny/qtrain \
         build/mesh-next-dp4/qtrain build/ctx-next-cp2/qtrain build/pp-next-pp2/qtrain $CG \
         build/mesh-next-1r-b1/qtrain \
         build/tools/qtrain-data; do
  [ -x $f ] || { echo "bad_inputs_table.sh: $f missing; run make all first" >&2; exit 1; }
done

rows=$W/rows.md; : > $rows
n=0
# md TEXT: TEXT as one markdown table cell (| escaped, temp dir as $TMP, code span)
md() {
  local s=${1//$W/\$TMP}
  s=${s//host $(hostname)/host \$HOST}
  s=${s//|/\\|}
  printf '`%s`' "$s"
}
# row CATEGORY INPUT COVERED CMD...: runs CMD from the repository root, stdout dropped
row() {
  local cat=$1 input=$2 cov=$3; shift 3
  "$@" > /dev/null 2> $W/err < /dev/null
  local rc=$? msg
  msg=$(grep -v -E '^qtrain: (run .* \| plan |peak RSS )|^step [0-9]+/[0-9]+ ' $W/err | tail -n 1)
  if [ $rc -eq 0 ]; then msg="accepted${msg:+ (stderr: $msg)}"; fi
  [ -n "$msg" ] || msg="(no message)"
  n=$((n + 1))
  printf '| %d | %s | %s | %s | %d | %s |\n' $n "$cat" "$(md "$input")" "$(md "$msg")" $rc "$cov" >> $rows
}
E40="e2e \`40_bad_input.sh\`"

# ---- command line (qtrain of test-next-tiny)
row "command line" "qtrain stpes=3" "$E40: cli: unknown key" $Q stpes=3
row "command line" "qtrain steps=-3" "$E40: cli: negative steps" $Q steps=-3
row "command line" "qtrain seed=abc" "$E40: cli: non-numeric seed" $Q seed=abc
row "command line" "qtrain steps" "$E40: cli: argument without '='" $Q steps
row "command line" "qtrain save_every=2 (no save=)" "this table" $Q save_every=2 steps=1 data=$T
row "command line" "qtrain save_shard_size=2P" "e2e \`42_ckpt_owner.sh\`: save_shard_size" $Q save_shard_size=2P steps=1 data=$T
row "command line" "qtrain arena_pages=big" "this table" $Q arena_pages=big

# ---- token files
printf 'QTTOKENS\x01\x00\x00\x00\x02\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x01\x00' > $W/short.tok
head -c 60 $T > $W/trunc.npy
mkdir -p $W/adir
row "token data" "data=$W/nope.npy (missing)" "$E40: data: missing file" $Q data=$W/nope.npy steps=1
row "token data" "data=$W/short.tok (QTTOKENS header says 64 tokens, file holds 1)" "$E40: data: raw file shorter than its header" $Q data=$W/short.tok steps=1
row "token data" "data=<test-35-tiny tokens.npy> (ids beyond the vocab of test-next-tiny)" "$E40: data: token id out of range" $Q data=tests/golden/e2e/test-35-tiny/tokens.npy steps=1
# held-out eval (issue 33): eval-next-1r evaluates (global eval batch of 4 sequences)
QE=build/eval-next-1r/qtrain
printf 'QTTOKENS\001\000\000\000\002\000\000\000\050\000\000\000\000\000\000\000' > $W/evshort.tok
head -c 80 /dev/zero >> $W/evshort.tok
row "eval data" "eval_data=$W/evshort.tok (2 windows, eval batch of 4)" "e2e \`62_eval.sh\`: refusals" $QE data=$T eval_data=$W/evshort.tok steps=1
row "eval data" "eval_data=<test-35-tiny tokens.npy> (ids beyond the vocab of test-next-tiny)" "this table" $QE data=$T eval_data=tests/golden/e2e/test-35-tiny/tokens.npy steps=1
row "eval data" "qtrain eval_data=FILE on a plan without eval_interval" "e2e \`62_eval.sh\`: refusals" $Q data=$T eval_data=$T steps=1
row "eval data" "qtrain data=FILE on an evaluating plan, no eval source" "e2e \`62_eval.sh\`: refusals" $QE data=$T steps=1
row "token data" "data=$W/trunc.npy (first 60 bytes of an .npy)" "$E40: data: truncated npy" $Q data=$W/trunc.npy steps=1
row "token data" "data=$W/adir (a directory)" "$E40: data: a directory says so" $Q data=$W/adir steps=1
row "token data" "data=/dev/null" "this table" $Q data=/dev/null steps=1
{ printf 'QTTOKENS\x01\x00\x00\x00\x02\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00'; printf '\x01\x00%.0s' 1 2 3 4 5 6 7 8 9 10; } > $W/ten.tok
row "token data" "data=$W/ten.tok (10 tokens, a window needs 17)" "$E40: data: too short for one window ..." $Q data=$W/ten.tok steps=1
# .npy files with a broken header, and a uint64 id of 2^64-1
npy() {  # npy PATH HEADER PAYLOAD_HEX: a version-1 .npy with HEADER padded to 64 bytes
  local hl=$((${#2} + 1)) pad
  pad=$(( (64 - (10 + hl) % 64) % 64 ))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $(((hl + pad) & 255)))\\x$(printf %02x $(((hl + pad) >> 8)))"
    printf '%s' "$2"; printf "%${pad}s" ''; printf '\n'; printf "$3"; } > $1
}
P16=$(for i in $(seq 40); do printf '\\x01\\x00'; done)
npy $W/noclose.npy "{'descr': '<u2', 'fortran_order': False, 'shape': (40,), " "$P16"
npy $W/maybe.npy "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (40,), }" "$P16"
npy $W/f4.npy "{'descr': '<f4', 'fortran_order': False, 'shape': (20,), }" "$P16"
P64=$(for i in $(seq 40); do if [ $i = 6 ]; then printf '\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff'; else printf '\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00'; fi; done)
npy $W/u8max.npy "{'descr': '<u8', 'fortran_order': False, 'shape': (40,), }" "$P64"
row "token data" ".npy header without its closing }" "unit \`io.bad_token_files\`" $Q data=$W/noclose.npy steps=1
row "token data" ".npy header with 'fortran_order': Maybe" "unit \`io.bad_token_files\`" $Q data=$W/maybe.npy steps=1
row "token data" ".npy of dtype <f4" "unit \`io.bad_token_files\`" $Q data=$W/f4.npy steps=1
row "token data" ".npy <u8 whose element 5 is 2^64-1" "unit \`io.data_file_changed_after_open\`" $Q data=$W/u8max.npy steps=1

# ---- checkpoints (single files; checkpoint directories are not in this table)
printf 'garbage' > $W/garbage.safetensors
$Q steps=1 data=$T save=$W/ck.safetensors 2> /dev/null
# st_edit SRC DST PY: rewrites a safetensors file with python3 (standard library only)
st_edit() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, struct, sys, math
src, dst, what = sys.argv[1:4]
b = bytearray(open(src, 'rb').read())
hl = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + hl])
names = sorted(k for k in h if k != '__metadata__')
if what == 'short':        # first tensor's data one element short (header only)
    t = h[names[0]]; t['data_offsets'][1] -= 4
    nh = json.dumps(h, separators=(',', ':')).encode(); nh += b' ' * (hl - len(nh))
    b[8:8 + hl] = nh
else:                      # a value of the first optimizer tensor of that kind
    kind, val = what.split(':')
    n = next(k for k in names if k.startswith('optimizer.%s.' % kind))
    off = 8 + hl + h[n]['data_offsets'][0]
    b[off:off + 4] = struct.pack('<f', float(val))
open(dst, 'wb').write(bytes(b))
EOF
}
st_edit $W/ck.safetensors $W/short.safetensors short
st_edit $W/ck.safetensors $W/nan_m.safetensors m:nan
st_edit $W/ck.safetensors $W/neg_v.safetensors v:-1
head -c -1 $W/ck.safetensors > $W/cut.safetensors
# the MTP head's checkpoint cases (tests/e2e/70_mtp_keep.sh): a head file, its depth renamed
MH=build/mtp-next-1r/qtrain; MK=build/mtp-keep-next-1r/qtrain
$MH steps=1 data=$T save=$W/head.safetensors 2> /dev/null
/usr/bin/python3 tests/scripts/st_mtp.py rename $W/head.safetensors $W/head_d1.safetensors mtp.layers.0. mtp.layers.1.
row "checkpoint" "mtp-keep-next-1r load= a head with mtp.layers.1.*" "$E40: MTP keep: a depth beyond mtp_keep_layers is refused" $MK load=$W/head_d1.safetensors steps=1 data=$T
row "checkpoint" "load=$W/none.safetensors (missing)" "$E40: load: missing checkpoint file" $Q load=$W/none.safetensors steps=1 data=$T
row "checkpoint" "load=<test-35-tiny init.safetensors> (another model)" "$E40: load: checkpoint of another model" $Q load=tests/golden/e2e/test-35-tiny/init.safetensors steps=1 data=$T
row "checkpoint" "load=$W/garbage.safetensors (7 bytes of text)" "$E40: load: not a safetensors file" $Q load=$W/garbage.safetensors steps=1 data=$T
row "checkpoint" "load= a checkpoint whose first tensor's data_offsets span one element less" "unit \`io.bad_safetensors_headers\`" $Q load=$W/short.safetensors steps=1 data=$T
row "checkpoint" "load= a checkpoint cut by its last byte" "unit \`io.bad_safetensors_headers\`" $Q load=$W/cut.safetensors steps=1 data=$T
row "checkpoint" "load= a checkpoint with NaN in Adam m" "unit \`io.nonfinite_or_negative_state_is_refused_before_loading\`" $Q load=$W/nan_m.safetensors steps=2 data=$T
row "checkpoint" "load= a checkpoint with -1 in Adam v" "unit \`io.nonfinite_or_negative_state_is_refused_before_loading\`" $Q load=$W/neg_v.safetensors steps=2 data=$T
# checkpoint directories (64 KiB shards: several of each kind) that lost or mixed up their
# optimizer state
E42="e2e \`42_ckpt_owner.sh\`"
$Q steps=2 data=$T save=$W/ckd save_shard_size=64K 2> /dev/null
cp -r $W/ckd $W/noidx && rm $W/noidx/optimizer.safetensors.index.json
cp -r $W/ckd $W/noshard && rm $W/noshard/optimizer-00002-of-*.safetensors
cp -r $W/ckd $W/swap
o1=$(ls $W/swap/optimizer-00001-of-*.safetensors); o2=$(ls $W/swap/optimizer-00002-of-*.safetensors)
mv $o1 $W/swap/o1 && mv $o2 $o1 && mv $W/swap/o1 $o2
row "checkpoint" "load=$W/noidx (a checkpoint directory without optimizer.safetensors.index.json)" "$E42: optimizer: ... refused unless load_weights_only=1" $Q load=$W/noidx steps=3 data=$T
row "checkpoint" "load=$W/noshard (a checkpoint directory without its 2nd optimizer shard)" "$E42: optimizer: ... refused unless load_weights_only=1" $Q load=$W/noshard steps=3 data=$T
row "checkpoint" "load=$W/swap (a checkpoint directory whose first two optimizer shards are swapped)" "$E42: optimizer: swapped optimizer shards" $Q load=$W/swap steps=3 data=$T
# a checkpoint directory whose config.json was edited to disagree with the plan
cp -r $W/ckd $W/badcfg
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["hidden_size"] = 128; json.dump(c, open(sys.argv[1], "w"), indent=2)' $W/badcfg/config.json
E43="e2e \`43_hf_config.sh\`: a config.json that disagrees with the plan"
row "checkpoint" "load=$W/badcfg (its config.json edited: hidden_size 128)" "$E43" $Q load=$W/badcfg steps=3 data=$T

# ---- save= and dump_grads= targets (checked before training)
cp $T $W/tokens.npy && ln $W/tokens.npy $W/link.safetensors
cp tests/golden/e2e/test-next-tiny/init.safetensors $W/hf.safetensors
printf 'notes\n' > $W/notes.txt
ES="$E40: save=/dump_grads= targets refused before training"
# (a save= path not ending in .safetensors names a checkpoint directory on main: those
# cases are left to the sharded-checkpoint tests, so the device is reached through a link)
ln -s /dev/null $W/null.safetensors
row "save target" "save=$W/null.safetensors overwrite=1 (a symbolic link to /dev/null)" "$ES" $Q steps=1 data=$T save=$W/null.safetensors overwrite=1
row "save target" "dump_grads=$W/adir (a directory)" "$ES" $Q steps=1 data=$T dump_grads=$W/adir
row "save target" "save=$W/link.safetensors (a hard link to the data file)" "$ES" $Q steps=1 data=$W/tokens.npy save=$W/link.safetensors overwrite=1
row "save target" "save=$W/hf.safetensors (a safetensors file that is not a qtrain checkpoint)" "$ES" $Q steps=1 data=$T save=$W/hf.safetensors
row "save target" "dump_grads=$W/notes.txt (a text file)" "$ES" $Q steps=1 data=$T dump_grads=$W/notes.txt
row "save target" "save=$W/badcfg (its config.json edited: hidden_size 128)" "$E43" $Q steps=1 data=$T save=$W/badcfg
row "save target" "dump_grads=$W/hf.safetensors (weights, not a gradient dump)" "e2e \`44_overwrite.sh\`: dump_grads=" $Q steps=1 data=$T dump_grads=$W/hf.safetensors
printf 'keep me\n' > $W/mine.lock
row "save target" "save=$W/mine (beside it $W/mine.lock, a text file of the user's)" "e2e \`44_overwrite.sh\`: lock" $Q steps=1 data=$T save=$W/mine
row "save target" "save=$W/nodir/out.safetensors (missing directory)" "$E40: save: unwritable destination" $Q steps=1 data=$T save=$W/nodir/out.safetensors
mkdir -p $W/notok
row "save target" "tokenizer=$W/nope/tokenizer.json (missing) save=$W/tokck" "$E40: tokenizer=" $Q steps=1 data=$T save=$W/tokck tokenizer=$W/nope/tokenizer.json
row "save target" "tokenizer=$W/notok (a directory without tokenizer.json) save=$W/tokck" "$E40: tokenizer=" $Q steps=1 data=$T save=$W/tokck tokenizer=$W/notok
row "command line" "qtrain tokenizer=$W/notok (no save=)" "$E40: tokenizer=" $Q steps=1 data=$T tokenizer=$W/notok
# a target another job holds: its lock file names process 4242 on host otherhost, and a
# process (flock(1)) holds the lock
printf 'otherhost 4242\n' > $W/busy.lock
( exec 9>> $W/busy.lock; flock 9; exec sleep 60 ) & BUSY=$!   # sleep holds the lock
for i in $(seq 50); do flock -n $W/busy.lock true || break; sleep 0.1; done
row "save target" "save=$W/busy (its lock $W/busy.lock held by a running job)" "$E42: owner: a checkpoint directory is one job's" $Q steps=1 data=$T save=$W/busy
kill $BUSY 2> /dev/null; wait $BUSY 2> /dev/null
fsize_run() { ( ulimit -f 64; exec "$@" ); }
row "save target" "qtrain-static save=$W/fs.safetensors under ulimit -f 64" "$E42: ulimit -f" fsize_run build/test-next-tiny/qtrain-static steps=1 data=$T save=$W/fs.safetensors

# ---- metrics
$Q steps=2 data=$T metrics=$W/m.jsonl save=$W/ck2.safetensors 2> /dev/null
$Q steps=1 data=$T metrics=$W/m1.jsonl 2> /dev/null
EM="$E40: metrics: a resumed run appends"
row "metrics" "metrics=$W/m.jsonl (holds steps 0-1) on a fresh run" "$EM" $Q steps=1 data=$T metrics=$W/m.jsonl
row "metrics" "metrics=$W/m1.jsonl (ends at step 0) on a run resumed at step 2" "$EM" $Q steps=3 data=$T metrics=$W/m1.jsonl load=$W/ck2.safetensors
row "metrics" "metrics=/dev/full" "$E40: metrics: a failing metrics write" $Q steps=2 data=$T metrics=/dev/full
# a run resumed from the step-2 checkpoint trained steps 2..3 into m.jsonl, then died
$Q steps=4 data=$T metrics=$W/m.jsonl load=$W/ck2.safetensors 2> /dev/null
row "metrics" "metrics=$W/m.jsonl (runs to step 3, past the checkpoint) on a run resumed at step 2" "$E42: metrics: after a crash, truncate_metrics=1" $Q steps=5 data=$T metrics=$W/m.jsonl load=$W/ck2.safetensors

# ---- memory, training, ranks
ulimit_run() { ( ulimit -v 1000000; exec "$@" ); }
row "memory" "bench qtrain under ulimit -v 1000000 (arena 2 GiB)" "$E40: memory: an arena beyond RLIMIT_AS" ulimit_run build/bench/qtrain steps=1
row "memory" "bench qtrain-static under ulimit -v 1000000" "$E40: memory: an arena beyond RLIMIT_AS" ulimit_run build/bench/qtrain-static steps=1
row "training" "learning_rate=1e30 save=$W/div.safetensors" "$E40: training: a non-finite loss" $Q steps=3 data=$T learning_rate=1e30 save=$W/div.safetensors
mpi_first() {  # CMD on 2 ranks (under timeout); passes on rank 0's stderr only (each rank writes its own)
  rm -f $W/mpi.err.*
  timeout 60 mpiexec -n 2 sh -c 'exec "$0" "$@" 2> '"$W"'/mpi.err.$PMI_RANK' "$@"
  local rc=$?
  cat $W/mpi.err.0 >&2
  return $rc
}
row "ranks" "mpiexec -n 2 qtrain (a one-rank plan)" "$E40: ranks: started on 2 ranks" mpi_first $Q steps=1 data=$T
row "ranks" "qtrain of ctx-next-cp2 (a plan of 2 ranks: context 2) started alone" "e2e \`71_context.sh\`: a CP2 plan on one rank" build/ctx-next-cp2/qtrain steps=1 data=$T
row "ranks" "mpiexec -n 2 qtrain-static (single-rank musl build)" "$E40: ranks: qtrain-static under mpiexec -n 2; unit \`CommEnv\`" mpi_first build/test-next-tiny/qtrain-static steps=1 data=$T
mpi_cwd() {  # mesh-next-dp2 on 2 ranks, each in a working directory of its own (rank 0's stderr)
  mkdir -p $W/r0 $W/r1
  timeout 60 mpiexec -n 2 sh -c 'cd "$0/r$PMI_RANK" && exec "$1/build/mesh-next-dp2/qtrain" steps=1 data="$1/'$T'" save=ck 2> err' $W $PWD
  local rc=$?
  cat $W/r0/err >&2
  return $rc
}
row "ranks" "mpiexec -n 2 mesh-next-dp2 save=ck, each rank in its own directory (not shared)" "e2e \`75_mesh_faults.sh\`: save= directory not the same on every rank" mpi_cwd

# mpi_two N1 CMD1 -- N2 CMD2: one world of N1 + N2 ranks (mpiexec A : B, under timeout);
# passes on rank 0's stderr only
mpi_two() {
  local n1=$1 a=() b=(); shift
  while [ "$1" != -- ]; do a+=("$1"); shift; done; shift
  local n2=$1; shift; b=("$@")
  rm -f $W/mpi.err.*
  local wrap='exec "$0" "$@" 2> '"$W"'/mpi.err.$PMI_RANK'
  timeout 60 mpiexec -n $n1 sh -c "$wrap" "${a[@]}" : -n $n2 sh -c "$wrap" "${b[@]}"
  local rc=$?
  cat $W/mpi.err.0 >&2
  return $rc
}
# mpi_rank1 CMD on 2 ranks, passing on rank 1's stderr (a rank that another one stopped)
mpi_rank1() {
  rm -f $W/mpi.err.*
  timeout 60 mpiexec -n 2 sh -c 'exec "$0" "$@" 2> '"$W"'/mpi.err.$PMI_RANK' "$@"
  local rc=$?
  cat $W/mpi.err.1 >&2
  return $rc
}
E76="e2e \`76_mesh_agree.sh\`"
M2=build/mesh-next-dp2/qtrain
timeout 60 mpiexec -n 2 $M2 steps=2 data=$T metrics=$W/mesh.jsonl 2> /dev/null
row "ranks" "mpiexec -n 2 mesh-next-dp2 : -n 2 mesh-next-dp4 (two plans of 2 and 4 ranks in one world)" "$E76: mpiexec -n 2 A : -n 2 B" mpi_two 2 $M2 steps=1 data=$T -- 2 build/mesh-next-dp4/qtrain steps=1 data=$T
row "ranks" "mpiexec -n 2 mesh-next-dp2 metrics=$W/mesh.jsonl (holds steps 0-1; rank 0 refuses it): rank 1's line" "$E76: rank 0 refuses its metrics file" mpi_rank1 $M2 steps=1 data=$T metrics=$W/mesh.jsonl

# ---- configgen: run files and key=value (the full table of refused configs is the unit
# test CgBadConfig.EachRuleRefusesWithItsMessageAndWritesNothing)
RUN=configgen/configs/runs/test-next-tiny.yml
EC="unit \`CgBadConfig\` table"
ENOM="unit \`CgConfig.RunWithoutModelIsRefusedUnlessItSetsEveryModelKey\`"
cg() { $CG -o $W/gen "$@"; }
printf '' > $W/empty.yml
printf 'model_name: ""\n' > $W/noname.yml
LONG=$(printf 'r%.0s' $(seq 200))
row "configgen" "configgen test-next-tiny.yml base_emb_dimm=64" "$E40: configgen: unknown key" cg $RUN base_emb_dimm=64
row "configgen" "configgen test-next-tiny.yml num_ranks=3 ici_context_parallelism=3" "$E40: configgen: context 3 on 16-token sequences" cg $RUN num_ranks=3 ici_context_parallelism=3
row "configgen" "configgen test-next-tiny.yml num_ranks=3 ici_fsdp_parallelism=1 ici_tensor_parallelism=3" "$EC" cg $RUN num_ranks=3 ici_fsdp_parallelism=1 ici_tensor_parallelism=3
row "configgen" "configgen npow2-t3-next-tp3.yml vocab_parallel=true" "$EC" cg configgen/configs/runs/npow2-t3-next-tp3.yml vocab_parallel=true
row "configgen" "configgen test-next-tiny.yml num_ranks=15 ici_fsdp_parallelism=1 ici_tensor_parallelism=3 ici_context_parallelism=5" "$EC" cg $RUN num_ranks=15 ici_fsdp_parallelism=1 ici_tensor_parallelism=3 ici_context_parallelism=5
row "configgen" "configgen test-next-tiny.yml num_ranks=6 ici_fsdp_parallelism=1 ici_tensor_parallelism=6 canonical_factor=5" "$EC" cg $RUN num_ranks=6 ici_fsdp_parallelism=1 ici_tensor_parallelism=6 canonical_factor=5
row "configgen" "configgen test-next-tiny.yml dtype=float16" "unit \`CgBadConfig\`" cg $RUN dtype=float16
row "configgen" "configgen test-next-tiny.yml packing=true eos_id=-2" "unit \`CgBadConfig\`" cg $RUN packing=true eos_id=-2
row "configgen" "configgen test-next-cap1.yml capacity_factor=nan" "$E40: configgen: a non-finite capacity_factor" cg configgen/configs/runs/test-next-cap1.yml capacity_factor=nan
row "configgen" "configgen test-next-cap1.yml capacity_factor=1e39" "$EC" cg configgen/configs/runs/test-next-cap1.yml capacity_factor=1e39
row "configgen" "configgen test-next-mtp.yml mtp_keep_layers=1" "$EC" cg configgen/configs/runs/test-next-mtp.yml mtp_keep_layers=1
row "configgen" "configgen test-next-tiny.yml mtp_keep_layers=8" "$EC" cg configgen/configs/runs/test-next-tiny.yml mtp_keep_layers=8
row "configgen" "configgen test-next-mtp2.yml mtp_num_layers=8" "$EC" cg configgen/configs/runs/test-next-mtp2.yml mtp_num_layers=8
row "configgen" "configgen test-next-tiny.yml ragged_buffer_factor=2.0 expert_dispatch=rounds num_ranks=4 ici_fsdp_parallelism=1 ici_context_parallelism=2 ici_expert_parallelism=2 expert_chunk_rows=15" "$E40: configgen: expert_dispatch=rounds with the experts replicated over context: rounds below a leaf's rows" cg $RUN ragged_buffer_factor=2.0 expert_dispatch=rounds num_ranks=4 ici_fsdp_parallelism=1 ici_context_parallelism=2 ici_expert_parallelism=2 expert_chunk_rows=15
row "configgen" "configgen /dev/zero" "$E40: configgen: /dev/zero" timeout 20 $CG -o $W/gen /dev/zero
row "configgen" "configgen $W/adir (a directory)" "$E40: configgen: a directory" cg $W/adir
row "configgen" "configgen $W/empty.yml (an empty run file)" "$ENOM" cg $W/empty.yml
row "configgen" "configgen run file with model_name: \"\"" "$ENOM" cg $W/noname.yml
row "configgen" "configgen test-next-tiny.yml run_name=<200 x r>" "unit \`CgConfig.RunNameOverTheLimitIsRefused\`" cg $RUN run_name=$LONG
row "configgen" "configgen test-next-tiny.yml base_emb_dim=2^40 vocab_size=2^40" "$EC" cg $RUN base_emb_dim=1099511627776 vocab_size=1099511627776
row "configgen" "configgen test-next-tiny.yml learning_rate=1e39" "$EC" cg $RUN learning_rate=1e39
row "configgen" "configgen test-next-tiny.yml lr_schedule_type=wsd wsd_decay_steps_fraction=0.95" "$EC" cg $RUN lr_schedule_type=wsd wsd_decay_steps_fraction=0.95
row "configgen" "configgen test-next-tiny.yml eval_steps=5 (eval_interval -1; ignored, as MaxText)" "unit \`CgIgnored\`" cg $RUN eval_steps=5
row "configgen" "configgen test-next-tiny.yml adam_eps=1e-50" "$EC" cg $RUN adam_eps=1e-50
mkdir -p $W/gen/test-next-tiny && echo "my notes" > $W/gen/test-next-tiny/notes.txt
row "configgen" "configgen -o DIR test-next-tiny.yml (DIR/test-next-tiny holds notes.txt)" "e2e \`45_plan_report.sh\`: configgen -o keeps files it did not write" cg $RUN
rm -rf $W/gen/test-next-tiny
row "configgen" "configgen test-next-tiny.yml per_device_batch_size=3e9" "$EC" cg $RUN per_device_batch_size=3e9
row "configgen" "configgen test-next-tiny.yml ici_fsdp_parallelism=2" "$EC" cg $RUN ici_fsdp_parallelism=2
row "configgen" "configgen test-next-tiny.yml device_memory_gib=1e-30" "$EC" cg $RUN device_memory_gib=1e-30
PP="num_ranks=2 ici_pipeline_parallelism=2"
row "configgen" "configgen test-next-tiny.yml $PP num_layers_per_pipeline_stage=3" "$E40: configgen: pipeline layers that do not divide" cg $RUN $PP num_layers_per_pipeline_stage=3
row "configgen" "configgen test-next-tiny.yml $PP num_pipeline_microbatches=3" "$E40: configgen: pipeline microbatches not a multiple of the stages" cg $RUN $PP num_pipeline_microbatches=3
row "configgen" "configgen test-next-tiny.yml $PP num_pipeline_microbatches=8" "$E40: configgen: pipeline microbatches that do not divide the batch" cg $RUN $PP num_pipeline_microbatches=8
row "configgen" "configgen test-next-tiny.yml $PP pipeline_schedule=zigzag" "$E40: configgen: an unknown pipeline_schedule" cg $RUN $PP pipeline_schedule=zigzag
row "configgen" "configgen test-next-tiny.yml $PP num_pipeline_repeats=3" "$E40: configgen: pipeline repeats inconsistent" cg $RUN $PP num_pipeline_repeats=3
row "configgen" "configgen test-next-tiny.yml $PP device_memory_gib=0.001" "$E40: configgen: a pipeline stage over the budget names the stage, its executed tables' MiB and the pipeline keys" cg $RUN $PP device_memory_gib=0.001
row "ranks" "qtrain of pp-next-pp2 (a pipeline plan of 2 ranks) started alone with dump_grads=DIR" "$E40: qtrain: a pipeline plan started alone is refused" build/pp-next-pp2/qtrain steps=1 data=$T dump_grads=$W/dg
row "configgen" "configgen --diff $W/nope.yml test-next-tiny.yml" "e2e \`45_plan_report.sh\`: configgen --diff: a missing file" $CG --diff $W/nope.yml $RUN

# ---- qtrain-data (the tokenizer tool; a tiny tokenizer.json, tests/tokenizer/tiny_tokenizer.py)
QD=build/tools/qtrain-data
python3 tests/tokenizer/tiny_tokenizer.py $W/tiny.json
python3 tests/tokenizer/tiny_tokenizer.py $W/other.json '\s+'
printf 'ok\nline 2 \xff here\n' > $W/bad_utf8.txt
printf '{"text": "a"}\n{"body": "b"}\n' > $W/nofield.jsonl
printf '{"text": "a"}\n\n{"text": "b",}\n' > $W/badjson.jsonl
printf 'QTTOKENS\x01\x00\x00\x00\x04\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x3f\x42\x0f\x00' > $W/bigid.tok
printf 'QTTOKENS\x01\x00\x00\x00\x04\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00' > $W/trunc4.tok
row "qtrain-data" "encode $W/bad_utf8.txt (byte 0xFF on line 2)" "$E40: qtrain-data: invalid UTF-8" $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/bad_utf8.txt
row "qtrain-data" "encode $W/nofield.jsonl (line 2 has no \"text\")" "$E40: qtrain-data: a JSON line without the field" $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/nofield.jsonl
row "qtrain-data" "encode $W/badjson.jsonl (a trailing comma on line 3)" "$E40: qtrain-data: a JSON line that is not JSON" $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/badjson.jsonl
row "qtrain-data" "decode in=$W/bigid.tok (id 999999, vocabulary of 258)" "$E40: qtrain-data: decode of an id beyond the vocabulary" $QD decode tokenizer=$W/tiny.json in=$W/bigid.tok
row "qtrain-data" "info in=$W/trunc4.tok (header says 64 tokens, file holds 1)" "$E40: qtrain-data: a truncated token file" $QD info in=$W/trunc4.tok
row "qtrain-data" "encode tokenizer=$W/none.json (missing)" "$E40: qtrain-data: an unreadable tokenizer file" $QD encode tokenizer=$W/none.json out=$W/o.tok -
row "qtrain-data" "encode tokenizr=x" "$E40: qtrain-data: an unknown key" $QD encode tokenizr=x out=$W/o.tok -
row "qtrain-data" "encode tokenizer=$W/other.json (Split pattern \\s+)" "$E40: qtrain-data: another Split pattern" $QD encode tokenizer=$W/other.json out=$W/o.tok -
# out= (issue 30): checked before the tokenizer or any input is read
printf 'my text\n' > $W/gpl.txt; printf 'old' > $W/old.tok; mkdir -p $W/qdir; printf 'abab' > $W/qdir/v=1.txt
printf '{"text": "ab"}\n' > $W/looks.txt; printf '\xef\xbb\xbf{"text": "ab"}\n' > $W/bom.jsonl
printf '\n\n' > $W/blank.jsonl; : > $W/empty.txt
EQO="$E40: qtrain-data: out= existing needs overwrite=1 ..."
UQA="unit \`dataprep_app"
row "qtrain-data" "encode out=$W/old.tok (exists, no overwrite=1)" "$EQO; $UQA.out_existing_needs_overwrite\`" $QD encode tokenizer=$W/tiny.json out=$W/old.tok $W/gpl.txt
row "qtrain-data" "encode out=$W/gpl.txt overwrite=1 $W/gpl.txt (out= is the input)" "$EQO; $UQA.out_same_file_as_an_input_is_refused\`" $QD encode tokenizer=$W/tiny.json out=$W/gpl.txt overwrite=1 $W/gpl.txt
row "qtrain-data" "encode out=$W/qdir overwrite=1 (a directory)" "$EQO; $UQA.out_not_a_regular_file_or_no_directory_is_refused\`" $QD encode tokenizer=$W/tiny.json out=$W/qdir overwrite=1 $W/gpl.txt
row "qtrain-data" "encode out=/dev/null overwrite=1" "$EQO" $QD encode tokenizer=$W/tiny.json out=/dev/null overwrite=1 $W/gpl.txt
row "qtrain-data" "encode out=$W/nodir/o.tok (no such directory)" "$EQO" $QD encode tokenizer=$W/tiny.json out=$W/nodir/o.tok $W/gpl.txt
row "qtrain-data" "encode overwrite=yes" "$UQA.out_existing_needs_overwrite\`" $QD encode tokenizer=$W/tiny.json out=$W/o.tok overwrite=yes $W/gpl.txt
row "qtrain-data" "encode $W/qdir/v=1.txt (an INPUT with '=', without --)" "$E40: qtrain-data: -- ends the keys" $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/qdir/v=1.txt
row "qtrain-data" "encode field=text $W/looks.txt (plain text by its name)" "$E40: qtrain-data: .ndjson, field= on plain text ..." $QD encode tokenizer=$W/tiny.json out=$W/o.tok field=text $W/looks.txt
row "qtrain-data" "encode $W/looks.txt (plain text starting with '{')" "$E40: qtrain-data: .ndjson, field= on plain text ..." $QD encode tokenizer=$W/tiny.json out=$W/looks.tok $W/looks.txt
row "qtrain-data" "encode $W/bom.jsonl (a UTF-8 byte-order mark on line 1)" "$E40: qtrain-data: .ndjson, field= on plain text ..." $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/bom.jsonl
row "qtrain-data" "encode $W/blank.jsonl (blank lines only)" "$UQA.empty_outputs_are_refused\`" $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/blank.jsonl
row "qtrain-data" "encode eos=none $W/empty.txt (0 tokens)" "$UQA.empty_outputs_are_refused\`" $QD encode tokenizer=$W/tiny.json out=$W/o.tok eos=none $W/empty.txt
row "qtrain-data" "encode $W/empty.txt (1 token: the EOS)" "$E40: qtrain-data: .ndjson, field= on plain text ..." $QD encode tokenizer=$W/tiny.json out=$W/o.tok $W/empty.txt

# ---- make run TEXT= (tests/scripts/run_text.sh: its checks before make builds anything)
E59="e2e \`59_text_run.sh\`"
mkdir -p $W/runout && printf 'keep me\n' > $W/runout/metrics.jsonl
rt() { env TEXT_RUN=text-qwen "$@" tests/scripts/run_text.sh check; }
row "make run TEXT=" "make run TEXT=$W/gpl.txt TEXT_OUT=$W/runout (holds metrics.jsonl that no make run wrote)" "$E59: a foreign TEXT_OUT refused ..." rt TEXT=$W/gpl.txt TEXT_OUT=$W/runout
row "make run TEXT=" "make run TEXT=$W/gpl.txt TEXT_OUT=$W/old.tok (a file)" "this table" rt TEXT=$W/gpl.txt TEXT_OUT=$W/old.tok
row "make run TEXT=" "make run TEXT=$W/none.txt" "$E59: a missing file is refused" rt TEXT=$W/none.txt TEXT_OUT=$W/runout2
row "make run TEXT=" "make run TEXT=$W/gpl.txt STEPS=ten" "this table" rt TEXT=$W/gpl.txt TEXT_OUT=$W/runout2 STEPS=ten
row "make run TEXT=" "make run TEXT=$W/gpl.txt OVERWRITE=yes" "this table" rt TEXT=$W/gpl.txt TEXT_OUT=$W/runout2 OVERWRITE=yes

# ---- issue 35, session 16 (appended: the rows above keep their numbers)
# QTTOKENS version 2 recording end-of-document id 9 (pack-next-1r's eos_id is 7)
{ printf 'QTTOKENS\x02\x00\x00\x00\x02\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00'; printf '\x01\x00%.0s' $(seq 64); } > $W/eos9.tok
row "token data" "pack-next-1r (eos_id 7) data=$W/eos9.tok (QTTOKENS v2 recording end-of-document id 9)" "e2e \`57_packing.sh\`: packing without eos_id" build/pack-next-1r/qtrain data=$W/eos9.tok steps=1
row "configgen" "configgen test-next-tiny.yml per_device_batch_size=2.5 num_ranks=2" "unit \`CgBadConfig\`" cg $RUN per_device_batch_size=2.5 num_ranks=2
# ---- issue 35, session 17 (appended)
row "configgen" "configgen test-next-tiny.yml per_device_batch_size=0.25 num_ranks=2" "unit \`CgBadConfig\`" cg $RUN per_device_batch_size=0.25 num_ranks=2
row "configgen" "configgen test-next-tiny.yml per_device_batch_size=0.5 num_ranks=4 ici_fsdp_parallelism=2 ici_expert_parallelism=2" "unit \`CgBadConfig\`" cg $RUN per_device_batch_size=0.5 num_ranks=4 ici_fsdp_parallelism=2 ici_expert_parallelism=2
row "command line" "qtrain start_timeout=0" "$E40: cli: start_timeout" $Q start_timeout=0
row "configgen" "configgen test-next-tiny.yml mtp_eval_target_module=1 (no MTP head)" "$EC" cg $RUN mtp_eval_target_module=1
row "configgen" "configgen test-next-mtp.yml mtp_eval_target_module=2 eval_interval=3 (one depth)" "$EC" cg configgen/configs/runs/test-next-mtp.yml mtp_eval_target_module=2 eval_interval=3
row "configgen" "configgen test-next-mtp.yml mtp_eval_target_module=-1" "$EC" cg configgen/configs/runs/test-next-mtp.yml mtp_eval_target_module=-1
row "configgen" "configgen test-next-mtp.yml mtp_eval_target_module=1 (eval_interval -1; ignored, as MaxText)" "unit \`CgIgnored\`" cg configgen/configs/runs/test-next-mtp.yml mtp_eval_target_module=1

# ---- found by session 21's audit (appended, so the rows above keep their numbers)
E44="e2e \`44_overwrite.sh\`"
mkdir -p $W/lnk_to && printf 'keep me\n' > $W/lnk_to/notes.txt && ln -s lnk_to $W/lnk
row "save target" "save=$W/lnk (a symbolic link to the directory $W/lnk_to)" "$E44: a save=/dump_grads= path that is a symbolic link" $Q steps=1 data=$T save=$W/lnk
mkdir -p $W/runout3/hf/eval && touch $W/runout3/.qtrain-make-run && printf 'precious\n' > $W/runout3/hf/eval/scores.txt
row "make run TEXT=" "make run TEXT=$W/gpl.txt TEXT_OUT=$W/runout3 OVERWRITE=1 (an earlier run's; hf/eval a subdirectory of the user's)" "$E59: a subdirectory in TEXT_OUT/hf is refused" rt TEXT=$W/gpl.txt TEXT_OUT=$W/runout3 OVERWRITE=1
mkfifo $W/fifo.safetensors $W/fifo.tok
EFF="$E40: FIFOs as data=, eval_data=, load=, tokenizer= and qtrain-data's inputs"
row "checkpoint" "load=$W/fifo.safetensors (a FIFO; its open used to wait for a writer)" "$EFF" timeout 20 $Q steps=1 data=$T load=$W/fifo.safetensors
row "qtrain-data" "info in=$W/fifo.tok (a FIFO)" "$EFF" timeout 20 build/tools/qtrain-data info in=$W/fifo.tok
$Q steps=2 data=$T metrics=$W/plot.jsonl 2> /dev/null
row "qtrain-audit" "plot $W/plot.jsonl -o '$W/a<TAB>b.png' (a tab in the path)" "e2e \`85_audit.sh\`: audit plot: a run name with a newline runs nothing" build/audit/qtrain-audit plot $W/plot.jsonl -o "$W/a	b.png"
mkdir -p $W/outside && printf 'model_name: "qwen3-next-tiny"\n' > $W/outside/mine.yml
cg_outside() { (cd $W/outside && "$OLDPWD/$CG" -o $W/outside/gen mine.yml); }
row "configgen" "configgen mine.yml, started in $W/outside (outside the project)" "$E40: configgen: started outside the project" cg_outside
row "qtrain-audit" "runs $W/adir $W/plot.jsonl (a directory as a metrics file)" "e2e \`85_audit.sh\`: audit runs/plot: a directory or a FIFO as a metrics file" build/audit/qtrain-audit runs $W/adir $W/plot.jsonl
build/tools/qtrain-data encode tokenizer=$W/tiny.json out=$W/ok.tok $W/gpl.txt > /dev/null 2>&1
row "qtrain-data" "info in=$W/ok.tok eos=4294967296 (not an id a token file holds)" "$E40: qtrain-data: from=, count= past 2^64" build/tools/qtrain-data info in=$W/ok.tok eos=4294967296
row "metrics" "metrics=$W/tokens.npy data=$W/tokens.npy overwrite=1 (the data file)" "e2e \`44_overwrite.sh\`: metrics= naming the data" $Q steps=1 data=$W/tokens.npy metrics=$W/tokens.npy overwrite=1
# ---- session 21, a MaxText user's keys (appended; config/maxtext_keys.c)
row "configgen" "configgen test-next-tiny.yml enable_checkpointing=true" "unit \`CgBadConfig\`" cg $RUN enable_checkpointing=true
row "configgen" "configgen test-next-tiny.yml load_parameters_path=gs://bucket/ckpt/0/items" "unit \`CgBadConfig\`" cg $RUN load_parameters_path=gs://bucket/ckpt/0/items
row "configgen" "configgen test-next-tiny.yml dtype=bfloat16 float32_logits=true" "unit \`CgBadConfig\`" cg $RUN dtype=bfloat16 float32_logits=true
row "configgen" "configgen test-next-tiny.yml adamw_mask=['.*norm']" "unit \`CgBadConfig\`" cg $RUN "adamw_mask=['.*norm']"
row "configgen" "configgen test-next-tiny.yml sparse_matmul=yes" "unit \`CgBadConfig\`" cg $RUN sparse_matmul=yes
# ---- session 22, an adversarial new user (appended)
mkdir -p $W/mt && printf 'run_name: ""\nvllm_hf_overrides: {}\nbase_output_directory: ""\nhardware: "tpu"\n' > $W/mt/base.yml
row "configgen" "configgen test-next-tiny.yml steps=010 (YAML 1.1 octal: MaxText reads 8)" "unit \`CgConfig.TypeErrorsNameKeyValueAndType\`" cg $RUN steps=010
row "configgen" "configgen $W/mt/base.yml (MaxText's own configs/base.yml as the run file)" "unit \`CgConfig.BaseYmlAsTheRunFile\`" cg $W/mt/base.yml
head -c 40000 README.md > $W/fs.txt
row "qtrain-data" "encode out=$W/fs.tok $W/fs.txt under ulimit -f 16 (40 kB of text)" "$E40: qtrain-data: a write past ulimit -f" bash -c 'ulimit -f 16; exec "$@"' _ $QD encode tokenizer=$W/tiny.json out=$W/fs.tok $W/fs.txt
printf '{"step":0,"loss":1.5,"grad_norm":1,"lr":0.1,"tokens_per_s":10}\n' > $W/m.jsonl
row "qtrain-audit" "plot $W/m.jsonl -o $W/m.jsonl --overwrite (the metrics file plotted)" "e2e \`85_audit.sh\`: audit plot: -o naming a metrics file being plotted" build/audit/qtrain-audit plot $W/m.jsonl -o $W/m.jsonl --overwrite
printf 'x\n' > $W/plainfile
row "metrics" "metrics=$W/plainfile/m.jsonl (a path through a file)" "$E40: metrics: a path that cannot be created" $Q steps=1 data=$T metrics=$W/plainfile/m.jsonl
row "save target" "save=. (the current directory; its temporary ..tmp.<pid> would lie inside it)" "$E40: save: save=. (DIR/., .., the current directory) is refused at start-up" $Q steps=1 data=$T save=.
mkdir -p $W/cwdrun
row "save target" "save=$W/cwdrun, run in $W/cwdrun (the current directory by its name)" "$E40: save: save=. (DIR/., .., the current directory) is refused at start-up" bash -c 'cd "$0" && exec "$@"' $W/cwdrun $PWD/$Q steps=1 data=$PWD/$T save=$W/cwdrun
printf 'QTTOKENX\001\000\000\000' > $W/magic.tok
row "token data" "data=$W/magic.tok (neither .npy nor QTTOKENS, no data_dtype=)" "this table" $Q steps=1 data=$W/magic.tok
build/test-35-tiny/qtrain steps=1 data=tests/golden/e2e/test-35-tiny/tokens.npy save=$W/c35.safetensors > /dev/null 2>&1
row "save target" "save=$W/c35.safetensors (a qtrain checkpoint of test-35-tiny, another model)" "e2e \`44_overwrite.sh\`: save=FILE.safetensors holding a qtrain checkpoint of another model" $Q steps=1 data=$T save=$W/c35.safetensors
row "configgen" "configgen -o $W/cgfs test-next-tiny.yml under ulimit -f 8" "$E40: configgen: a write past ulimit -f" bash -c 'ulimit -f 8; exec "$@"' _ $CG -o $W/cgfs $RUN
$Q steps=1 data=$T save=$W/ldck.safetensors > /dev/null 2>&1
row "save target" "dump_grads=$W/ldck.safetensors load=$W/ldck.safetensors overwrite=1 (the loaded checkpoint)" "e2e \`44_overwrite.sh\`: save=/dump_grads= naming the eval data, the tokenizer or the loaded checkpoint" $Q steps=2 data=$T load=$W/ldck.safetensors dump_grads=$W/ldck.safetensors overwrite=1
{ printf '\357\273\277'; cat $W/tiny.json; } > $W/bomtok.json
row "qtrain-data" "encode tokenizer=$W/bomtok.json (a tokenizer.json saved with a UTF-8 byte-order mark)" "$E40: qtrain-data: a tokenizer.json with a byte-order mark" $QD encode tokenizer=$W/bomtok.json out=$W/o.tok -
mkdir -p $W/pubdir && $Q steps=1 data=$T save=$W/pubdir/model.safetensors > /dev/null 2>&1
row "save target" "save=$W/pubdir (holds model.safetensors, which transformers would load before the index)" "e2e \`44_overwrite.sh\`: save=DIR holding model.safetensors" $Q steps=1 data=$T save=$W/pubdir

# ---- session 22, feature combinations (appended): a resume must hold out the windows its
# checkpoint held out (eval_holdout=N changes the training windows, so the data position)
$QE data=$T eval_holdout=8 steps=2 save=$W/ho8.safetensors 2> /dev/null
row "checkpoint" "load=$W/ho8.safetensors (saved with eval_holdout=8) with eval_holdout=4" "e2e \`62_eval.sh\`: eval_holdout resumes" $QE data=$T eval_holdout=4 load=$W/ho8.safetensors steps=3
# steps= is a total: a checkpoint past it would train nothing (session 23)
$Q data=$T steps=5 save=$W/st5.safetensors 2> /dev/null
row "checkpoint" "load=$W/st5.safetensors (step 5) steps=3" "e2e \`72_mesh_ckpt.sh\`: steps=3 below the checkpoint's step" $Q data=$T steps=3 load=$W/st5.safetensors

# ---- session 23, an adversarial new user (appended)
python3 - $W/ck.safetensors $W/badname.safetensors $W/esc.safetensors <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); hl = struct.unpack('<Q', b[:8])[0]; h = b[8:8 + hl]
bad = h.replace(b'"lm_head.weight"', b'"lm_head.weigh\xff"', 1)   # invalid UTF-8, same length
open(sys.argv[2], 'wb').write(b[:8] + bad + b[8 + hl:])
j = json.loads(h); j['__metadata__']['note'] = 'trained on "my" notes\nline 2'
e = json.dumps(j).encode()
open(sys.argv[3], 'wb').write(struct.pack('<Q', len(e)) + e + b[8 + hl:])
PYEOF
row "checkpoint" "load=$W/badname.safetensors (a tensor name with the byte 0xFF)" "unit \`io.safetensors_header_escapes\`" $Q steps=1 data=$T load=$W/badname.safetensors
row "checkpoint" "load=$W/esc.safetensors (a __metadata__ value with a newline and quotes, JSON-escaped as the safetensors library writes it)" "unit \`io.safetensors_header_escapes\`" $Q steps=2 data=$T load=$W/esc.safetensors
row "checkpoint" "load=$W/m.jsonl (a metrics file)" "unit \`io.bad_safetensors_headers\`" $Q steps=1 data=$T load=$W/m.jsonl
mkdir -p $W/bothdir && $Q steps=1 data=$T save=$W/bothdir/ck 2> /dev/null && cp $W/ck.safetensors $W/bothdir/ck/model.safetensors
row "checkpoint" "load=$W/bothdir/ck (model.safetensors.index.json and model.safetensors)" "$E40: load: a directory with both ..." $Q steps=2 data=$T load=$W/bothdir/ck
row "save target" "dump_grads=$W/lk.lock save=$W/lk (the save's lock file)" "e2e \`44_overwrite.sh\`: a file ... at save=X's lock X.lock" $Q steps=1 data=$T save=$W/lk dump_grads=$W/lk.lock
row "save target" "tokenizer=$W/ck.safetensors save=$W/tokck (not a JSON object)" "$E40: tokenizer=" $Q steps=1 data=$T save=$W/tokck tokenizer=$W/ck.safetensors
$Q steps=1 data=$T dump_grads=$W/g.safetensors 2> /dev/null
row "qtrain-audit" "ckpt $W/ck.safetensors $W/g.safetensors (a gradient dump)" "e2e \`85_audit.sh\`: audit ckpt/grads: ... wrong files" build/audit/qtrain-audit ckpt $W/ck.safetensors $W/g.safetensors
row "qtrain-audit" "grads $W/ck.safetensors $W/g.safetensors (a checkpoint)" "e2e \`85_audit.sh\`: audit ckpt/grads: ... wrong files" build/audit/qtrain-audit grads $W/ck.safetensors $W/g.safetensors
{ printf -- '---\n'; cat configgen/configs/runs/test-next-tiny.yml; printf -- '---\nsteps: 5\n'; } > $W/twodocs.yml
row "configgen" "configgen $W/twodocs.yml (test-next-tiny.yml after ---, then a second document)" "unit \`CgYaml.DocumentMarkers\`" cg $W/twodocs.yml
row "configgen" "configgen test-next-tiny.yml base_num_decoder_layers=2147483648 (used to abort: out of memory)" "unit \`CgBadConfig\`" cg $RUN base_num_decoder_layers=2147483648
row "configgen" "configgen test-next-tiny.yml steps=9223372036854775807" "unit \`CgConfig.TypeErrorsNameKeyValueAndType\`" cg $RUN steps=9223372036854775807
row "command line" "qtrain steps=18446744073709551616" "$E40: cli: integers past their limit" $Q steps=18446744073709551616
printf 'mine\n' > $W/afile
row "configgen" "configgen -o $W/afile test-next-tiny.yml (-o a file)" "$E40: configgen: -o naming a file" $CG -o $W/afile $RUN
row "environment" "QT_PP_TEST_ORDER=Reverse mpiexec -n 2 pp-next-pp2 (a test hook's unknown value)" "$E40: environment: QT_PP_TEST_ORDER" env QT_PP_TEST_ORDER=Reverse timeout 60 mpiexec -n 2 build/pp-next-pp2/qtrain steps=1 data=$T

# ---- session 24: allow_state_change=1 where it cannot apply (appended)
E72SC="e2e \`72_mesh_ckpt.sh\`: allow_state_change=1"
row "command line" "qtrain allow_state_change=1 load_weights_only=1 load=$W/st5.safetensors" "$E72SC" $Q data=$T steps=7 allow_state_change=1 load_weights_only=1 load=$W/st5.safetensors
row "command line" "qtrain allow_state_change=1 (no load=)" "this table" $Q data=$T steps=7 allow_state_change=1
row "checkpoint" "load=<test-next-tiny init.safetensors> allow_state_change=1 (no optimizer state)" "$E72SC" $Q data=$T steps=3 allow_state_change=1 load=tests/golden/e2e/test-next-tiny/init.safetensors
row "checkpoint" "load=$W/noidx allow_state_change=1 (no optimizer.safetensors.index.json)" "$E72SC" $Q data=$T steps=3 allow_state_change=1 load=$W/noidx
row "checkpoint" "mesh-next-1r-b1 load=$W/st5.safetensors allow_state_change=1 (global batch 2 -> 1)" "$E72SC" build/mesh-next-1r-b1/qtrain data=$T steps=7 allow_state_change=1 load=$W/st5.safetensors
# save_shard_size= needing more than 4096 shards: refused at start-up (test-next-tiny with 2048 experts)
$CG -o $W/many configgen/configs/runs/test-next-tiny.yml num_experts=2048 num_experts_per_tok=8 base_moe_mlp_dim=4 > /dev/null 2>&1 &&
  make -s plan-binary PLAN=$W/many/test-next-tiny OUT=$W/many/qtrain > /dev/null 2>&1
row "command line" "save=$W/ck1k save_shard_size=1K (test-next-tiny with num_experts=2048: 37002 shards)" "e2e \`42_ckpt_owner.sh\`: save_shard_size: a size needing more than 4096 shards" $W/many/qtrain data=$T steps=2 save=$W/ck1k save_shard_size=1K

{
  cat <<'EOF'
# Bad inputs and what qtrain / configgen say

Generated by `tests/scripts/bad_inputs_table.sh` from the real outputs of the binaries built
by `make all` (`build/test-next-tiny/qtrain` unless the row says otherwise; configgen rows use
`build/configgen/configgen -o $TMP/gen`); do not edit by hand, rerun the script. `make test`
(`tests/e2e/40_bad_input.sh`) regenerates it and fails when it differs from this file.
`$TMP` is the script's temporary directory. The message is the last line on stderr apart from
the start-up banner, progress lines and the peak-RSS line (`accepted` when the exit status
is 0, with that line); `$HOST` is the machine's host name. "this table" in the last column:
no other test covers the case; the comparison in `40_bad_input.sh` does.
Checkpoint directories (sharded checkpoints) appear for the optimizer state and config.json only; their
other damage cases are in `72_mesh_ckpt.sh` and the unit test `io.sharded_load_bad_cases_change_nothing`.

| # | category | input | message | exit | covered by |
|---|---|---|---|---|---|
EOF
  cat $rows
  cat <<'EOF'

Faults that depend on timing are checked by the e2e scripts only, not rerun here:
a data file rewritten, truncated or replaced during a run (`40_bad_input.sh`, "data: a data
file changed during the run", exit 1, `data file PATH changed during the run` or `was
truncated`); save temporaries left by a killed save (`40_bad_input.sh`, removed at start-up
with a note); a SIGKILLed or SIGSTOPped rank of a mesh (`75_mesh_faults.sh`: the job ends,
`no answer from rank P within S s`; a rank stopped at start-up is waited for under
`start_timeout=`, and past it named with `this was during start-up, which start_timeout=
bounds`; `76_mesh_agree.sh`: on 4 ranks every rank names the
stopped one, and a stop during a save names `checkpoint save to DIR, step N`); one rank's
data file changed during a mesh run (`76_mesh_agree.sh`: that rank says `data file PATH
changed during the run`, the others `end of the step: stopping: rank R/N failed (its message
says why)`, all within seconds); a second job started on the `save=` target of a running
one (`42_ckpt_owner.sh`: refused at once, exit 2, naming the holder's host and pid) and the
lock of a killed job (taken over with a note); a write that reaches `ulimit -f` during a run
(`42_ckpt_owner.sh`: a message naming RLIMIT_FSIZE, exit 1, instead of SIGXFSZ); SIGTERM or
SIGINT during a run or a save, on one rank and under `mpiexec -n 2` (`42_ckpt_owner.sh`: exit
143 / 130, `qtrain: stopped by SIGTERM; removed the unfinished write of this process; removed
the lock ...`, no `.tmp.<pid>` or lock left, the checkpoint resumes bit-exactly).
EOF
} > "$OUT"
echo "bad_inputs_table.sh: $n rows -> $OUT"
