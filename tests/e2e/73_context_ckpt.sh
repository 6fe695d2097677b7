# 73_context_ckpt.sh - checkpoints under context parallelism (sourced by run_all.sh): a
# checkpoint saved on a context-parallel mesh is the one-rank file, and a checkpoint of
# either resumes on the other bit for bit (loss bits and fingerprint of steps 6..10 == the
# uninterrupted one-rank run with the same context_blocks and global batch).
#
# What a context mesh adds to the gathers and scatters of 72_mesh_ckpt.sh: the GDN mixers'
# own weights (conv1d.weight in its three q/k/v segments, A_log, dt_bias) split over
# tensor x context by heads (or whole over context when the heads are owned unevenly:
# the gdnu-* cells at the end), routed experts under expert parallelism split over
# expert x context, and the optimizer blocks of ranges whose gradient is complete on every
# context rank. The CP plans and their one-rank references (configgen/configs/runs/ctx-*.yml)
# train the same model on the same global batch, so they share the state hash.
# Every mpiexec runs under `timeout`.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

# cxk_file_eq ONE RUN RANKS: the one-file checkpoints after 5 steps of one-rank ONE and of
# RUN on RANKS ranks: st_compare finds every tensor equal (tolerance 0: same names, shapes
# and values), and the files are the same bytes: the data region bit for bit (so also -0.0
# against 0.0 and every NaN payload), the header equal once plan hash and run name are
# blanked (same tensor order, dtypes, offsets, step, data position, state hash).
cxk_file_eq() {
  local one=$1 run=$2 n=$3 d=$QT_TMP/cxk
  mkdir -p "$d"
  [ -s "$d/$one.safetensors" ] || ckpt_run "$one" 1 steps=5 save=$d/$one.safetensors 2> /dev/null || return 1
  [ -s "$d/$run.safetensors" ] || ckpt_run "$run" "$n" steps=5 save=$d/$run.safetensors 2> /dev/null || return 1
  build/tools/st_compare "$d/$run.safetensors" "$d/$one.safetensors" 0 > "$d/$run.cmp" \
    || { tail -n 5 "$d/$run.cmp"; return 1; }
  echo "$(grep -c . "$d/$run.cmp") st_compare lines"
  ckpt_same_file "$d/$one.safetensors" "$d/$run.safetensors"
}

# cxk_dir_eq ONE RUN RANKS: the same for sharded directories (64 KiB shards, each rank of RUN
# writes its own): every shard byte for byte, the indexes equal once plan hash and run name
# are blanked.
cxk_dir_eq() {
  local one=$1 run=$2 n=$3 d=$QT_TMP/cxk
  mkdir -p "$d/dir"
  [ -e "$d/dir/$one" ] || ckpt_run "$one" 1 steps=5 save=$d/dir/$one save_shard_size=64K 2> /dev/null || return 1
  [ -e "$d/dir/$run" ] || ckpt_run "$run" "$n" steps=5 save=$d/dir/$run save_shard_size=64K 2> /dev/null || return 1
  ckpt_dir_eq "$d/dir/$one" "$d/dir/$run"
}

# qwen3-next tiny, CP2 x EP2 (4 ranks: experts over expert x context, GDN head weights over
# context) <-> one rank with 4 blocks per sequence
check "context ckpt: save on CP2xEP2 (4 ranks, one .safetensors file) at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume ctx-next-1r-nb4 ctx-next-cp2ep2 4 ctx-next-1r-nb4 1 .safetensors
check "context ckpt: save on CP2xEP2 (4 ranks, sharded directory) at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume ctx-next-1r-nb4 ctx-next-cp2ep2 4 ctx-next-1r-nb4 1
check "context ckpt: save on one rank (one file) at step 5, resume on CP2xEP2 == 10 one-rank steps" \
  ckpt_resume ctx-next-1r-nb4 ctx-next-1r-nb4 1 ctx-next-cp2ep2 4 .safetensors
check "context ckpt: save on one rank (sharded directory) at step 5, resume on CP2xEP2 == 10 one-rank steps" \
  ckpt_resume ctx-next-1r-nb4 ctx-next-1r-nb4 1 ctx-next-cp2ep2 4
check "context ckpt: CP2xEP2 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-next-1r-nb4 ctx-next-cp2ep2 4
check "context ckpt: CP2xEP2 sharded directory after 5 steps == the one-rank directory, shard for shard" \
  cxk_dir_eq ctx-next-1r-nb4 ctx-next-cp2ep2 4

# qwen3.5 tiny (tp variant), CP2 x EP2
check "context ckpt: qwen3.5 save on CP2xEP2 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume ctx-35t-1r-nb4 ctx-35t-cp2ep2 4 ctx-35t-1r-nb4 1 .safetensors
check "context ckpt: qwen3.5 save on one rank at step 5, resume on CP2xEP2 == 10 one-rank steps" \
  ckpt_resume ctx-35t-1r-nb4 ctx-35t-1r-nb4 1 ctx-35t-cp2ep2 4 .safetensors
check "context ckpt: qwen3.5 CP2xEP2 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-35t-1r-nb4 ctx-35t-cp2ep2 4

# CP4 (4 GDN key heads: conv1d.weight, A_log and dt_bias split 4 ways)
check "context ckpt: save on CP4 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume ctx-next4h-1r-nb4 ctx-next4h-cp4 4 ctx-next4h-1r-nb4 1 .safetensors
check "context ckpt: save on one rank at step 5, resume on CP4 == 10 one-rank steps" \
  ckpt_resume ctx-next4h-1r-nb4 ctx-next4h-1r-nb4 1 ctx-next4h-cp4 4 .safetensors
check "context ckpt: CP4 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-next4h-1r-nb4 ctx-next4h-cp4 4

# Beyond the issue's cells: the two-axis splits. CP2 x TP2: the GDN head weights over
# tensor x context (conv1d.weight: each q/k/v segment split 4 ways, tensor major), both
# decoders; CP2 x FSDP2 and CP2 x DP2 with ZeRO-1 and G = 4: optimizer blocks over
# fsdp x context and data x context beside the context-split head weights.
check "context ckpt: save on CP2xTP2 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume ctx-next4h-1r-nb4 ctx-next4h-cp2tp2 4 ctx-next4h-1r-nb4 1 .safetensors
check "context ckpt: save on CP4 at step 5, resume on CP2xTP2 == 10 one-rank steps" \
  ckpt_resume ctx-next4h-1r-nb4 ctx-next4h-cp4 4 ctx-next4h-cp2tp2 4 .safetensors
check "context ckpt: CP2xTP2 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-next4h-1r-nb4 ctx-next4h-cp2tp2 4
check "context ckpt: qwen3.5 CP2xTP2 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-35t4h-1r-nb4 ctx-35t4h-cp2tp2 4
check "context ckpt: qwen3.5 CP4 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-35t4h-1r-nb4 ctx-35t4h-cp4 4
check "context ckpt: save on one rank at step 5, resume on CP2xFSDP2 == 10 one-rank steps" \
  ckpt_resume ctx-next-1r-nb4 ctx-next-1r-nb4 1 ctx-next-cp2fsdp2 4 .safetensors
check "context ckpt: CP2xFSDP2 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq ctx-next-1r-nb4 ctx-next-cp2fsdp2 4
check "context ckpt: save on CP2xDP2 ZeRO-1 G4 (sharded directory) at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume ctx-next-1r-b8-nb4 ctx-next-cp2dp2-g4-z1 4 ctx-next-1r-b8-nb4 1
check "context ckpt: CP2xDP2 ZeRO-1 G4 sharded directory after 5 steps == the one-rank directory, shard for shard" \
  cxk_dir_eq ctx-next-1r-b8-nb4 ctx-next-cp2dp2-g4-z1 4
# GDN heads owned unevenly over context (issue 35, session 16): conv1d.weight, A_log and
# dt_bias whole over context (every context rank's copy the same), the 4 key heads owned
# 1/1/2; the attention's 2 kv heads 0/1/1
check "context ckpt: uneven GDN heads, save on CP3 at step 5, resume on one rank == 10 one-rank steps" \
  ckpt_resume gdnu-next-1r gdnu-next-cp3 3 gdnu-next-1r 1 .safetensors
check "context ckpt: uneven GDN heads, save on one rank (sharded directory) at step 5, resume on CP3 == 10 one-rank steps" \
  ckpt_resume gdnu-next-1r gdnu-next-1r 1 gdnu-next-cp3 3
check "context ckpt: uneven GDN heads, CP3 checkpoint after 5 steps == the one-rank checkpoint (st_compare 0, same bytes)" \
  cxk_file_eq gdnu-next-1r gdnu-next-cp3 3
