# 63_pipeline.sh - pipeline execution (issue 36, docs/pipeline.md "How the firmware runs
# it"), sourced by run_all.sh. Each cell is configgen's plan of a tiny test run with the
# pipeline keys (one repeat: num_layers_per_pipeline_stage = the layers / S), built by
# `make plan-binary`, run under `timeout 120 mpiexec -n RANKS` for 6 steps on the tiny test
# data, seed 11; its loss bits and parameter fingerprint per step must equal, bit
# for bit (0 ulp, no tolerance), the one-rank run of the same model on the same global batch
# (per_device_batch_size = the pipeline's B; the stage's M x G microbatches are its
# accumulation microbatches):
#   * qwen3-next tiny PP2: gpipe with M 2 (the default S) and M 4, 1f1b with M 4, gpipe
#     with gradient_accumulation_steps 2 (== one rank with G 2);
#   * qwen3.5 tiny PP2: gpipe M 2, 1f1b M 4; qwen3-next tiny PP4 (one layer per stage) 1f1b
#     with M 4;
#   * stages of 2 ranks (4 ranks, == one rank with per_device_batch_size 8): PP2 x DP2 gpipe,
#     PP2 x DP2 1f1b M 4 with ZeRO-1, PP2 x FSDP2, PP2 x TP2, PP2 x EP2 1f1b, PP2 x CP2
#     (== one rank with context_blocks 2, the CP plans' canonical blocks), qwen3.5 PP2 x DP2;
#   * the shipped run pp-35-pp2-1f1b (qwen3.5 tiny PP2 1f1b, M 2) == one rank, and its stages'
#     bubble lines (the waits measured beside (S-1)/(M+S-1));
#   * the other forms (bf16, the load-balance loss, the z-loss, token dropping, packing,
#     scanned layers), each == one rank with the same keys in the loss bits, fingerprint and
#     every metrics field but the timings: bf16 qwen3-next PP2 gpipe, qwen3.5 PP2 1f1b M 4,
#     PP2 x DP2 1f1b; lb PP2 gpipe, PP4 1f1b M 4, PP2 x EP2 1f1b; qwen3.5 bf16 lb + z-loss
#     PP2; z-loss PP2 1f1b; capacity PP2, PP2 x EP2; packing PP2 1f1b, PP2 x DP2; 16 layers
#     with scan_layers PP2 gpipe (fp32) and 1f1b (bf16), stage 0's tables scanned; all of
#     bf16, lb, z-loss, capacity and packing at once on PP2 x EP2 1f1b M 4, and on circular PP2 R2
#     gpipe M 4 (bf16, lb, z-loss, packing: the lb sums wrap around);
#   * the MTP head (mtp_num_layers; stage 0 sends each microbatch's MTP embeddings straight
#     to the last stage and gets their gradient back), each == one rank with the same keys in
#     the loss bits, fingerprint and every metric (mtp_loss included): qwen3-next PP2 gpipe
#     and 1f1b M 4, qwen3.5 PP2 gpipe, 2 depths PP2 1f1b M 4, PP4 1f1b M 4 (the middle stages
#     see none of it), PP2 x DP2 gpipe, bf16 PP2 gpipe, packing PP2 1f1b M 4 (the pre-pass on
#     the last stage), all forms (bf16, lb, z-loss, token dropping, packing) on PP2 x EP2
#     1f1b M 4; its checkpoint file after 5 steps on PP2 and PP4 == one rank's and resumes
#     PP2 -> one rank, one rank's directory -> PP2 1f1b; the gradient of the embeddings not
#     applied on stage 0 (QT_PP_TEST_ORDER=mtp-drop) is not one rank's (non-vacuous);
#   * the check can fail: the same PP2 gpipe run with its backward phase in reverse
#     microbatch order (QT_PP_TEST_ORDER=reverse, a test hook read at start-up) pushes the
#     stages' gradient leaves out of the one-rank tree's order, and its bits differ from one
#     rank's at step 1 or later (its step-0 loss, computed before any update, is equal);
#   * circular repeats (num_layers_per_pipeline_stage 1, so R = layers / S; MaxText's gpipe
#     with the wrap-around message from the last stage to stage 0 per repeat): qwen3-next
#     tiny PP2 R2 with M 2 and M 4, qwen3.5 tiny PP2 R2 M 4 (a chunk holds part of a layer
#     cycle), PP2 R2 x DP2 (4 ranks), with 8 layers PP4 R2, PP2 R4 and PP2 R2 of 2 layers
#     per stage and repeat (== one rank of the same depth), and the shipped pp-next-pp2
#     (PP2 R2 M 4); its reversed backward order differs too;
#   * the lb PP2 run with every stage's lb sums started from zero (QT_PP_TEST_ORDER=lb-local)
#     has another step-0 loss than one rank;
#   * receives posted ahead off (QT_PP_PREFETCH=0) give the same bits;
#   * the held-out eval, checkpoints (save=, load=, dump_grads=) on pipeline meshes, and
#     with circular repeats (with token dropping too): below;
#   * circular repeats with the microbatch and per-layer gradient forms (x EP2, x CP2, per-layer
#     x DP2 / FSDP2 / EP2) and scanned circular chunks, then the MTP head with circular
#     repeats: at the end.
PP_D=$QT_TMP/pp
PP_DATA=tests/golden/e2e/test-next-tiny/tokens.npy

# pp_variant NAME RUN KEY=VALUE...: configgen's plan of RUN.yml under run_name NAME with the
# overrides, built into $PP_D/NAME/qtrain (kept: a second call does nothing).
pp_variant() {
  local name=$1 run=$2 d=$PP_D/$1; shift 2
  [ -x "$d/qtrain" ] && return 0
  rm -rf "$d"; mkdir -p "$d"
  build/configgen/configgen -o "$d/plan" "configgen/configs/runs/$run.yml" run_name=$name "$@" \
    > "$d/configgen.log" 2>&1 || { tail -n 3 "$d/configgen.log"; return 1; }
  make -s plan-binary PLAN="$d/plan/$name" OUT="$d/qtrain" > "$d/make.log" 2>&1 ||
    { tail -n 5 "$d/make.log"; return 1; }
}

# pp_det NAME RANKS [ENV=VALUE]: 6 steps of $PP_D/NAME/qtrain on RANKS ranks; its
# det_fields lines in $PP_D/NAME.det (or NAME.ENV.det with an environment setting).
pp_det() {
  local name=$1 n=$2 env=${3:-} out=$PP_D/$1
  [ -n "$env" ] && out=$out.${env%%=*}
  [ -s "$out.det" ] && return 0
  local cmd="$PP_D/$name/qtrain data=$PP_DATA seed=11 steps=6 metrics=$out.jsonl"
  rm -f "$out.jsonl"
  if [ "$n" -eq 1 ]; then
    env $env timeout 120 $cmd 2> "$out.err"
  else
    env $env timeout 120 mpiexec -n "$n" $cmd 2> "$out.err"
  fi || { tail -n 3 "$out.err"; return 1; }
  det_fields "$out.jsonl" > "$out.det"
}

# pp_same ONE PP RANKS: the pipeline run PP on RANKS ranks == ONE on one rank, bit for bit
pp_same() {
  pp_det "$1" 1 && pp_det "$2" "$3" || return 1
  cmp "$PP_D/$1.det" "$PP_D/$2.det" || { diff "$PP_D/$1.det" "$PP_D/$2.det" | head -4; return 1; }
  echo "identical to $1 over 6 steps: $(tail -n 1 "$PP_D/$2.det")"
}

NEXT_PP="num_ranks=2 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=2"
# a stage of 2 ranks: the other axis named, fsdp's auto fill off
# circular: one layer per stage and repeat (R = 2 on the 4 layers)
NEXT_PPC="num_ranks=2 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=1"
NEXT_PP4="num_ranks=4 ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=2 ici_fsdp_parallelism=1"
pp_cells() {
  pp_variant pp1r-next-b4 test-next-tiny per_device_batch_size=4 &&
    pp_variant pp1r-next-b4-g2 test-next-tiny per_device_batch_size=4 gradient_accumulation_steps=2 &&
    pp_variant pp1r-35-b4 test-35-tiny per_device_batch_size=4 &&
    pp_variant pp2-next-gpipe test-next-tiny $NEXT_PP &&
    pp_variant pp2-next-gpipe-m4 test-next-tiny $NEXT_PP num_pipeline_microbatches=4 &&
    pp_variant pp2-next-1f1b-m4 test-next-tiny $NEXT_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp2-next-gpipe-g2 test-next-tiny $NEXT_PP gradient_accumulation_steps=2 &&
    pp_variant pp2-35-gpipe test-35-tiny $NEXT_PP &&
    pp_variant pp2-35-1f1b-m4 test-35-tiny $NEXT_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp4-next-1f1b-m4 test-next-tiny num_ranks=4 ici_pipeline_parallelism=4 \
      num_layers_per_pipeline_stage=1 per_device_batch_size=1 num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b8 test-next-tiny per_device_batch_size=8 &&
    pp_variant pp1r-next-b8-nb2 test-next-tiny per_device_batch_size=8 context_blocks=2 &&
    pp_variant pp1r-35-b8 test-35-tiny per_device_batch_size=8 &&
    pp_variant pp2dp2-next-gpipe test-next-tiny $NEXT_PP4 ici_data_parallelism=2 &&
    pp_variant pp2dp2-next-1f1b-z1 test-next-tiny $NEXT_PP4 ici_data_parallelism=2 \
      shard_optimizer_over_data=true num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp2fsdp2-next-gpipe test-next-tiny $NEXT_PP4 ici_fsdp_parallelism=2 &&
    pp_variant pp2tp2-next-gpipe test-next-tiny $NEXT_PP4 ici_tensor_parallelism=2 &&
    pp_variant pp2ep2-next-1f1b test-next-tiny $NEXT_PP4 ici_expert_parallelism=2 pipeline_schedule=1f1b &&
    pp_variant pp2cp2-next-gpipe test-next-tiny $NEXT_PP4 ici_context_parallelism=2 &&
    pp_variant pp2dp2-35-gpipe test-35-tiny $NEXT_PP4 ici_data_parallelism=2 &&
    pp_variant pp2r2-next-gpipe test-next-tiny $NEXT_PPC &&
    pp_variant pp2r2-next-gpipe-m4 test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 &&
    pp_variant pp2r2-35-gpipe-m4 test-35-tiny $NEXT_PPC num_pipeline_microbatches=4 &&
    pp_variant pp2r2dp2-next-gpipe test-next-tiny $NEXT_PPC num_ranks=4 ici_fsdp_parallelism=1 \
      ici_data_parallelism=2 &&
    pp_variant pp1r-next-b4-l8 test-next-tiny per_device_batch_size=4 base_num_decoder_layers=8 &&
    pp_variant pp4r2-next-gpipe-l8 test-next-tiny base_num_decoder_layers=8 num_ranks=4 \
      ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 per_device_batch_size=1 &&
    pp_variant pp2r4-next-gpipe-l8 test-next-tiny $NEXT_PPC base_num_decoder_layers=8 &&
    pp_variant pp2r2-next-lps2-l8 test-next-tiny $NEXT_PPC base_num_decoder_layers=8 \
      num_layers_per_pipeline_stage=2 num_pipeline_microbatches=4
}
check "pipeline: configgen plans and builds the stage-local pipeline cells" pp_cells

# the forms beside the plain loss (issue 36): bf16, the load-balance loss, the z-loss, token
# dropping, packing, scanned layers; each cell against one rank with the same keys
B16="dtype=bfloat16"
LB="load_balance_loss_weight=0.01"
CAP="sparse_matmul=false capacity_factor=1.0"
PACK="packing=true eos_id=7"
L16="base_num_decoder_layers=16 scan_layers=true"
ALL="$B16 $LB $CAP $PACK z_loss_multiplier=0.001"  # every form at once
# circular repeats: all but token dropping (with it: the circular block at the end)
CIRC="$B16 $LB $PACK z_loss_multiplier=0.001"
pp_form_cells() {
  pp_variant pp1r-next-b4-bf16 test-next-tiny per_device_batch_size=4 $B16 &&
    pp_variant pp2-next-gpipe-bf16 test-next-tiny $NEXT_PP $B16 &&
    pp_variant pp1r-35-b4-bf16 test-35-tiny per_device_batch_size=4 $B16 &&
    pp_variant pp2-35-1f1b-m4-bf16 test-35-tiny $NEXT_PP $B16 num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b8-bf16 test-next-tiny per_device_batch_size=8 $B16 &&
    pp_variant pp2dp2-next-1f1b-bf16 test-next-tiny $NEXT_PP4 ici_data_parallelism=2 $B16 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b4-lb test-next-tiny per_device_batch_size=4 $LB &&
    pp_variant pp2-next-gpipe-lb test-next-tiny $NEXT_PP $LB &&
    pp_variant pp4-next-1f1b-m4-lb test-next-tiny num_ranks=4 ici_pipeline_parallelism=4 \
      num_layers_per_pipeline_stage=1 per_device_batch_size=1 num_pipeline_microbatches=4 pipeline_schedule=1f1b $LB &&
    pp_variant pp1r-next-b8-lb test-next-tiny per_device_batch_size=8 $LB &&
    pp_variant pp2ep2-next-1f1b-lb test-next-tiny $NEXT_PP4 ici_expert_parallelism=2 pipeline_schedule=1f1b $LB &&
    pp_variant pp1r-35-b4-lb-z-bf16 test-35-tiny per_device_batch_size=4 $LB z_loss_multiplier=0.001 $B16 &&
    pp_variant pp2-35-gpipe-lb-z-bf16 test-35-tiny $NEXT_PP $LB z_loss_multiplier=0.001 $B16 &&
    pp_variant pp1r-next-b4-z test-next-tiny per_device_batch_size=4 z_loss_multiplier=0.001 &&
    pp_variant pp2-next-1f1b-m4-z test-next-tiny $NEXT_PP z_loss_multiplier=0.001 num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b4-cap test-next-tiny per_device_batch_size=4 $CAP &&
    pp_variant pp2-next-gpipe-cap test-next-tiny $NEXT_PP $CAP &&
    pp_variant pp1r-next-b8-cap test-next-tiny per_device_batch_size=8 $CAP &&
    pp_variant pp2ep2-next-gpipe-cap test-next-tiny $NEXT_PP4 ici_expert_parallelism=2 $CAP &&
    pp_variant pp1r-next-b4-pack test-next-tiny per_device_batch_size=4 $PACK &&
    pp_variant pp2-next-1f1b-m4-pack test-next-tiny $NEXT_PP $PACK num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b8-pack test-next-tiny per_device_batch_size=8 $PACK &&
    pp_variant pp2dp2-next-gpipe-pack test-next-tiny $NEXT_PP4 ici_data_parallelism=2 $PACK &&
    pp_variant pp1r-next16-b4-scan test-next-tiny per_device_batch_size=4 $L16 &&
    pp_variant pp2-next16-gpipe-scan test-next-tiny num_ranks=2 ici_pipeline_parallelism=2 \
      num_layers_per_pipeline_stage=8 $L16 &&
    pp_variant pp1r-next16-b4-scan-bf16 test-next-tiny per_device_batch_size=4 $L16 $B16 &&
    pp_variant pp2-next16-1f1b-m4-scan-bf16 test-next-tiny num_ranks=2 ici_pipeline_parallelism=2 \
      num_layers_per_pipeline_stage=8 $L16 $B16 num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b8-all test-next-tiny per_device_batch_size=8 $ALL &&
    pp_variant pp2ep2-next-1f1b-m4-all test-next-tiny $NEXT_PP4 ici_expert_parallelism=2 \
      pipeline_schedule=1f1b num_pipeline_microbatches=4 $ALL &&
    pp_variant pp1r-next-b4-circ test-next-tiny per_device_batch_size=4 $CIRC &&
    pp_variant pp2r2-next-gpipe-m4-circ test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 $CIRC
}
check "pipeline: configgen plans and builds the cells of the other forms (bf16, lb, z, capacity, packing, scan)" pp_form_cells

for cell in "pp1r-next-b4 pp2-next-gpipe 2" "pp1r-next-b4 pp2-next-gpipe-m4 2" \
            "pp1r-next-b4 pp2-next-1f1b-m4 2" "pp1r-next-b4-g2 pp2-next-gpipe-g2 2" \
            "pp1r-35-b4 pp2-35-gpipe 2" "pp1r-35-b4 pp2-35-1f1b-m4 2" \
            "pp1r-next-b4 pp4-next-1f1b-m4 4" "pp1r-next-b8 pp2dp2-next-gpipe 4" \
            "pp1r-next-b8 pp2dp2-next-1f1b-z1 4" "pp1r-next-b8 pp2fsdp2-next-gpipe 4" \
            "pp1r-next-b8 pp2tp2-next-gpipe 4" "pp1r-next-b8 pp2ep2-next-1f1b 4" \
            "pp1r-next-b8-nb2 pp2cp2-next-gpipe 4" "pp1r-35-b8 pp2dp2-35-gpipe 4" \
            "pp1r-next-b4 pp2r2-next-gpipe 2" "pp1r-next-b4 pp2r2-next-gpipe-m4 2" \
            "pp1r-35-b4 pp2r2-35-gpipe-m4 2" "pp1r-next-b8 pp2r2dp2-next-gpipe 4" \
            "pp1r-next-b4-l8 pp4r2-next-gpipe-l8 4" "pp1r-next-b4-l8 pp2r4-next-gpipe-l8 2" \
            "pp1r-next-b4-l8 pp2r2-next-lps2-l8 2"; do
  set -- $cell
  check "pipeline: ${2#pp} ($3 ranks) == one rank ($1), bit for bit" pp_same "$@"
done

# pp_same_metrics ONE PP RANKS: pp_same, and every metrics field but the timings equal (the
# loss, the norm, the z-loss, the dropped counts per layer, the packed loss tokens)
pp_same_metrics() {
  pp_same "$@" > /dev/null || { pp_same "$@"; return 1; }
  local f
  for f in "$1" "$2"; do
    grep -v '^{"manifest":' "$PP_D/$f.jsonl" | sed 's/"tokens_per_s":[^,]*,"step_s":[^,]*,//' > "$PP_D/$f.m"
  done
  cmp "$PP_D/$1.m" "$PP_D/$2.m" || { diff "$PP_D/$1.m" "$PP_D/$2.m" | head -4; return 1; }
  echo "identical to $1 over 6 steps, every metric: $(tail -n 1 "$PP_D/$2.m" | cut -c1-160)"
}

for cell in "pp1r-next-b4-bf16 pp2-next-gpipe-bf16 2" "pp1r-35-b4-bf16 pp2-35-1f1b-m4-bf16 2" \
            "pp1r-next-b8-bf16 pp2dp2-next-1f1b-bf16 4" "pp1r-next-b4-lb pp2-next-gpipe-lb 2" \
            "pp1r-next-b4-lb pp4-next-1f1b-m4-lb 4" "pp1r-next-b8-lb pp2ep2-next-1f1b-lb 4" \
            "pp1r-35-b4-lb-z-bf16 pp2-35-gpipe-lb-z-bf16 2" "pp1r-next-b4-z pp2-next-1f1b-m4-z 2" \
            "pp1r-next-b4-cap pp2-next-gpipe-cap 2" "pp1r-next-b8-cap pp2ep2-next-gpipe-cap 4" \
            "pp1r-next-b4-pack pp2-next-1f1b-m4-pack 2" "pp1r-next-b8-pack pp2dp2-next-gpipe-pack 4" \
            "pp1r-next16-b4-scan pp2-next16-gpipe-scan 2" \
            "pp1r-next16-b4-scan-bf16 pp2-next16-1f1b-m4-scan-bf16 2" \
            "pp1r-next-b8-all pp2ep2-next-1f1b-m4-all 4" \
            "pp1r-next-b4-circ pp2r2-next-gpipe-m4-circ 2"; do
  set -- $cell
  check "pipeline: ${2#pp} ($3 ranks) == one rank ($1), bit for bit, every metric" pp_same_metrics "$@"
done

# the MTP head on a pipeline (docs/pipeline.md "The MTP head on a pipeline"): stage 0 keeps
# the one stacked embedding and sends the depths' embeddings straight to the last stage,
# whose head, shared lm_head and MTP loss run after the main head; their gradient goes back
# into stage 0's one embedding backward. Each cell == one rank with the same keys, every
# metric (mtp_loss, and with token dropping mtp_moe_dropped, included)
MTP="mtp_num_layers=1"
pp_mtp_cells() {
  pp_variant pp1r-next-b4-mtp test-next-tiny per_device_batch_size=4 $MTP &&
    pp_variant pp2-next-gpipe-mtp test-next-tiny $NEXT_PP $MTP &&
    pp_variant pp2-next-1f1b-m4-mtp test-next-tiny $NEXT_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b $MTP &&
    pp_variant pp1r-35-b4-mtp test-35-tiny per_device_batch_size=4 $MTP &&
    pp_variant pp2-35-gpipe-mtp test-35-tiny $NEXT_PP $MTP &&
    pp_variant pp1r-next-b4-mtp2 test-next-tiny per_device_batch_size=4 mtp_num_layers=2 &&
    pp_variant pp2-next-1f1b-m4-mtp2 test-next-tiny $NEXT_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b mtp_num_layers=2 &&
    pp_variant pp4-next-1f1b-m4-mtp test-next-tiny num_ranks=4 ici_pipeline_parallelism=4 \
      num_layers_per_pipeline_stage=1 per_device_batch_size=1 num_pipeline_microbatches=4 pipeline_schedule=1f1b $MTP &&
    pp_variant pp1r-next-b8-mtp test-next-tiny per_device_batch_size=8 $MTP &&
    pp_variant pp2dp2-next-gpipe-mtp test-next-tiny $NEXT_PP4 ici_data_parallelism=2 $MTP &&
    pp_variant pp1r-next-b4-mtp-bf16 test-next-tiny per_device_batch_size=4 $MTP $B16 &&
    pp_variant pp2-next-gpipe-mtp-bf16 test-next-tiny $NEXT_PP $MTP $B16 &&
    pp_variant pp1r-next-b4-mtp-pack test-next-tiny per_device_batch_size=4 $MTP $PACK &&
    pp_variant pp2-next-1f1b-m4-mtp-pack test-next-tiny $NEXT_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b $MTP $PACK &&
    pp_variant pp1r-next-b8-all-mtp test-next-tiny per_device_batch_size=8 $ALL $MTP &&
    pp_variant pp2ep2-next-1f1b-m4-all-mtp test-next-tiny $NEXT_PP4 ici_expert_parallelism=2 \
      pipeline_schedule=1f1b num_pipeline_microbatches=4 $ALL $MTP
}
check "pipeline: configgen plans and builds the MTP head's cells" pp_mtp_cells

# pp_same_mtp ONE PP RANKS: pp_same_metrics, and the metrics carry the head's loss
pp_same_mtp() {
  pp_same_metrics "$@" || return 1
  grep -q '"mtp_loss":' "$PP_D/$2.jsonl" || { echo "$2: no mtp_loss in the metrics"; return 1; }
}
for cell in "pp1r-next-b4-mtp pp2-next-gpipe-mtp 2" "pp1r-next-b4-mtp pp2-next-1f1b-m4-mtp 2" \
            "pp1r-35-b4-mtp pp2-35-gpipe-mtp 2" "pp1r-next-b4-mtp2 pp2-next-1f1b-m4-mtp2 2" \
            "pp1r-next-b4-mtp pp4-next-1f1b-m4-mtp 4" "pp1r-next-b8-mtp pp2dp2-next-gpipe-mtp 4" \
            "pp1r-next-b4-mtp-bf16 pp2-next-gpipe-mtp-bf16 2" \
            "pp1r-next-b4-mtp-pack pp2-next-1f1b-m4-mtp-pack 2" \
            "pp1r-next-b8-all-mtp pp2ep2-next-1f1b-m4-all-mtp 4"; do
  set -- $cell
  check "pipeline MTP: ${2#pp} ($3 ranks) == one rank ($1), bit for bit, every metric" pp_same_mtp "$@"
done

# the MTP check can fail: stage 0 zeroing the received gradient of the head's embeddings
# (QT_PP_TEST_ORDER=mtp-drop; the messages still pair) trains the embedding without the
# head's part: the step-0 loss (before any update) is one rank's, a later step's bits differ
# (pp_mtp_drop_differs [PP]: PP the pipeline cell, pp2-next-gpipe-mtp unless named)
pp_mtp_drop_differs() {
  local pp=${1:-pp2-next-gpipe-mtp}
  pp_det pp1r-next-b4-mtp 1 && pp_det "$pp" 2 QT_PP_TEST_ORDER=mtp-drop || return 1
  local a=$PP_D/pp1r-next-b4-mtp.det b=$PP_D/$pp.QT_PP_TEST_ORDER.det
  [ "$(head -n 1 "$a")" = "$(head -n 1 "$b")" ] || { echo "step 0 differs"; return 1; }
  ! cmp -s "$a" "$b" || { echo "the dropped MTP gradient gave one rank's bits"; return 1; }
  echo "one rank: $(tail -n 1 "$a"); MTP gradient dropped: $(tail -n 1 "$b")"
}
check "pipeline MTP: the head's embedding gradient not applied on stage 0 is not one rank's bits (non-vacuous)" \
  pp_mtp_drop_differs

# the scanned cells really scan inside a stage (16 layers, 8 a stage: two 4-layer cycles;
# schedule/scan.c stores stage 0's forward as one cycle run twice; stage 1's last cycle feeds
# the head, so its two cycles differ and stay unrolled, as one rank's last cycle does)
pp_stage_scans() {
  local c=$PP_D/pp2-next16-gpipe-scan/plan/pp2-next16-gpipe-scan/plan.c
  local t=${c%plan.c}plan.txt
  [ "$(grep -c '^ *\.n_scans = [1-9]' "$c")" -ge 1 ] || { echo "$c: no scanned stage"; return 1; }
  grep -q "stage 0: .*, scanned, arena" "$t" || { echo "$t: stage 0 not scanned"; return 1; }
  echo "$(grep -c '^ *\.n_scans = [1-9]' "$c") stage table set(s) scanned: $(grep -o 'stage 0: .*' "$t" | cut -c1-60)..."
}
check "pipeline: scan_layers scans each stage's tables when its layers are whole cycles" pp_stage_scans

# the shipped 1f1b run (configgen/configs/runs/pp-35-pp2-1f1b.yml, built by make) trains too
pp_shipped() {
  mkdir -p "$PP_D/pp-35-pp2-1f1b" && ln -sf "$QT_ROOT/build/pp-35-pp2-1f1b/qtrain" "$PP_D/pp-35-pp2-1f1b/qtrain" &&
    pp_same pp1r-35-b4 pp-35-pp2-1f1b 2
}
check "pipeline: the shipped pp-35-pp2-1f1b (2 ranks) == one rank (pp1r-35-b4), bit for bit" pp_shipped
# and the shipped circular run (configgen/configs/runs/pp-next-pp2.yml: PP2 R2 M 4, otherwise
# test-next-tiny's settings)
pp_shipped_circ() {
  mkdir -p "$PP_D/pp-next-pp2" && ln -sf "$QT_ROOT/build/pp-next-pp2/qtrain" "$PP_D/pp-next-pp2/qtrain" &&
    pp_same pp1r-next-b4 pp-next-pp2 2
}
check "pipeline: the shipped circular pp-next-pp2 (2 ranks, R 2) == one rank (pp1r-next-b4), bit for bit" pp_shipped_circ

# the bubble's clocks (firmware/runtime/pipeline_time.c): each stage's first rank ends the run
# with one line, its figures consistent (computing + waiting = the schedule, to the printed
# 0.001 s; bubble in [0, 1]) and the formula (S-1)/(M+S-1) of the plan's S 2 and M 2 (1/3);
# one rank's run prints none
pp_bubble_lines() {
  local e=$PP_D/pp-35-pp2-1f1b.err
  [ -s "$e" ] || { echo "no log of the shipped run"; return 1; }
  for st in 0 1; do
    grep "^qtrain: pipeline stage $st of 2 (rank $st, 1f1b, M 2): schedule" "$e" | awk '
      { for (i = 1; i <= NF; i++) { if ($i == "schedule") sc = $(i+1); if ($i == "computing") c = $(i+1)
          if ($i == "waiting") w = $(i+1); if ($i == "bubble") b = $(i+1); if ($i == "=") f = $(i+1) } n++ }
      END { d = sc - c - w; if (d < 0) d = -d
            if (n != 1 || d > 0.0015 || b < 0 || b > 1 || f != "0.3333") { print "bad line: " $0; exit 1 }
            print "stage: schedule " sc " s, computing " c " s, waiting " w " s, bubble " b " (formula " f ")" }' || return 1
  done
  ! grep -q 'pipeline stage' "$PP_D/pp1r-35-b4.err" || { echo "one rank printed a stage line"; return 1; }
}
check "pipeline: each stage's measured bubble line at the end of the run, beside the formula 1/3" pp_bubble_lines

# the check can fail: the backward phase in reverse microbatch order (pp_reverse_differs
# CELL [ONE RANKS]: CELL's bits on RANKS ranks (2) with QT_PP_TEST_ORDER=reverse differ from
# one rank's ONE (pp1r-next-b4) after step 0, with the same step-0 loss)
pp_reverse_differs() {
  local one=${2:-pp1r-next-b4} n=${3:-2}
  pp_det "$one" 1 && pp_det "$1" "$n" QT_PP_TEST_ORDER=reverse || return 1
  local a=$PP_D/$one.det b=$PP_D/$1.QT_PP_TEST_ORDER.det
  [ "$(head -n 1 "$a" | cut -d' ' -f2)" = "$(head -n 1 "$b" | cut -d' ' -f2)" ] ||
    { echo "step-0 losses differ"; return 1; }
  ! cmp -s "$a" "$b" || { echo "the reversed order gave one rank's bits"; return 1; }
  echo "one rank: $(tail -n 1 "$a"); reversed: $(tail -n 1 "$b")"
}
check "pipeline: the backward in reverse microbatch order is not one rank's bits (non-vacuous)" \
  pp_reverse_differs pp2-next-gpipe-m4
# the same with circular repeats: every chunk's backwards reversed
check "pipeline: circular repeats with the backward in reverse microbatch order are not one rank's bits (non-vacuous)" \
  pp_reverse_differs pp2r2-next-gpipe-m4

# receives posted ahead (the default) change when a boundary message arrives, not its bytes:
# with them off (QT_PP_PREFETCH=0, every receive posted just before use) 1f1b and circular
# gpipe give the same bits (== one rank, above)
pp_prefetch_off_same() {
  local c
  for c in pp2-next-1f1b-m4 pp2r2-next-gpipe-m4; do
    pp_det "$c" 2 && pp_det "$c" 2 QT_PP_PREFETCH=0 || return 1
    cmp "$PP_D/$c.det" "$PP_D/$c.QT_PP_PREFETCH.det" || return 1
  done
  echo "identical with and without receives posted ahead: $(tail -n 1 "$PP_D/$c.det")"
}
check "pipeline: receives posted ahead off (QT_PP_PREFETCH=0) give the same bits (1f1b, circular gpipe)" pp_prefetch_off_same

# and the lb check can fail: every stage summing its own layers' lb terms from zero (the
# running sums not carried, QT_PP_TEST_ORDER=lb-local) gives another step-0 loss
pp_lb_local_differs() {
  pp_det pp1r-next-b4-lb 1 && pp_det pp2-next-gpipe-lb 2 QT_PP_TEST_ORDER=lb-local || return 1
  local a=$PP_D/pp1r-next-b4-lb.det b=$PP_D/pp2-next-gpipe-lb.QT_PP_TEST_ORDER.det
  [ "$(head -n 1 "$a" | cut -d' ' -f2)" != "$(head -n 1 "$b" | cut -d' ' -f2)" ] ||
    { echo "step-0 losses equal without the running lb sums"; return 1; }
  echo "one rank step 0: $(head -n 1 "$a" | cut -d' ' -f2); lb sums not carried: $(head -n 1 "$b" | cut -d' ' -f2)"
}
check "pipeline: the lb terms summed per stage from zero are not one rank's loss (non-vacuous)" pp_lb_local_differs

# pp_run NAME RANKS ARGS...: $PP_D/NAME/qtrain on RANKS ranks, tiny data, seed 11
pp_run() {
  local name=$1 n=$2; shift 2
  if [ "$n" -eq 1 ]; then
    timeout 120 "$PP_D/$name/qtrain" data=$PP_DATA seed=11 "$@"
  else
    timeout 120 mpiexec -n "$n" "$PP_D/$name/qtrain" data=$PP_DATA seed=11 "$@"
  fi
}

# ---- the held-out eval on pipeline meshes (docs/pipeline.md "The held-out eval") ----
# eval-next-1r.yml (evals after steps 1, 4, 7 on eval_data=, 5 eval batches of 4 sequences)
# on PP2, PP2 x DP2 and PP4: every training line (loss bits, fingerprint) and every eval line
# (eval loss bits) over 10 steps == one rank's, and rank 0 prints one rank's eval summary.
pp_eval_same() {
  local one=$1 pp=$2 n=$3 d=$PP_D/eval
  mkdir -p "$d"
  pp_variant pp1r-eval eval-next-1r &&
    pp_variant pp2-eval eval-next-1r $NEXT_PP per_device_batch_size=2 &&
    pp_variant pp2dp2-eval eval-next-1r $NEXT_PP4 ici_data_parallelism=2 per_device_batch_size=1 &&
    pp_variant pp4-eval eval-next-1r num_ranks=4 ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 \
      per_device_batch_size=1 num_pipeline_microbatches=4 pipeline_schedule=1f1b || return 1
  [ -s "$d/$one.det" ] || { pp_run "$one" 1 steps=10 eval_data=$PP_DATA metrics=$d/$one.jsonl 2> "$d/$one.err" &&
    det_fields "$d/$one.jsonl" > "$d/$one.det"; } || { tail -n 3 "$d/$one.err"; return 1; }
  rm -f "$d/$pp.jsonl"
  pp_run "$pp" "$n" steps=10 eval_data=$PP_DATA metrics=$d/$pp.jsonl 2> "$d/$pp.err" ||
    { tail -n 3 "$d/$pp.err"; return 1; }
  det_fields "$d/$pp.jsonl" > "$d/$pp.det"
  [ "$(grep -c eval_loss "$d/$pp.det")" -eq 3 ] || { echo "expected 3 eval lines"; return 1; }
  cmp "$d/$one.det" "$d/$pp.det" || { diff "$d/$one.det" "$d/$pp.det" | head -4; return 1; }
  cmp <(grep "evals (" "$d/$one.err") <(grep "evals (" "$d/$pp.err") || return 1
  echo "identical over 10 steps and 3 evals: $(grep eval_loss "$d/$pp.det" | tail -n 1)"
}
check "pipeline eval: PP2 (2 ranks) evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval pp2-eval 2
check "pipeline eval: PP2 x DP2 (4 ranks) evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval pp2dp2-eval 4
check "pipeline eval: PP4 (1f1b, two middle stages) evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval pp4-eval 4

# ---- checkpoints on pipeline meshes (docs/pipeline.md "Checkpoints") ----
# A save on a pipeline mesh is the one-rank file (world rank 0 writes it; each later stage's
# first rank streams its stage's tensors to it); a load on a pipeline mesh checks every
# stage's tensors and each stage keeps its own. Checked: the file after 5 steps == one
# rank's, byte for byte (ckpt_same_file: the header with plan hash and run name blanked, the
# tensor bytes); resumes across meshes continue the uninterrupted one-rank run, loss bits and
# fingerprint of steps 6..10 bit for bit (0 ulp).


# pp_ck_save NAME RANKS [EXT]: NAME's checkpoint after 5 steps, $PP_D/ck/NAME.EXT (cached)
pp_ck_save() {
  local f=$PP_D/ck/$1${3:-.safetensors}
  mkdir -p "$PP_D/ck"
  [ -e "$f" ] || pp_run "$1" "$2" steps=5 save=$f save_shard_size=64K 2> "$PP_D/ck/$1.save.log" ||
    { tail -n 3 "$PP_D/ck/$1.save.log"; return 1; }
}

# pp_ck_file_eq ONE PP RANKS: PP's checkpoint file after 5 steps == ONE's (one rank)
pp_ck_file_eq() {
  pp_ck_save "$1" 1 && pp_ck_save "$2" "$3" || return 1
  ckpt_same_file "$PP_D/ck/$1.safetensors" "$PP_D/ck/$2.safetensors"
}

# pp_ck_resume ONE SAVE SAVE_RANKS LOAD LOAD_RANKS [EXT]: SAVE's checkpoint at step 5 (a
# .safetensors file, or EXT "/" a sharded directory), resumed by LOAD to step 10: steps 6..10
# == ONE's uninterrupted 10 steps on one rank
pp_ck_resume() {
  local one=$1 sv=$2 sn=$3 ld=$4 ln=$5 ext=${6:-.safetensors} d=$PP_D/ck tag=$2-to-$4${6:+-dir}
  mkdir -p "$d"
  if [ ! -s "$d/$one-ref.det" ]; then
    pp_run "$one" 1 steps=10 metrics=$d/$one-ref.jsonl 2> /dev/null || return 1
    det_fields "$d/$one-ref.jsonl" | tail -n 5 > "$d/$one-ref.det"
  fi
  [ "$ext" = / ] && ext=.dir
  pp_ck_save "$sv" "$sn" "$ext" || return 1
  rm -f "$d/$tag.jsonl"
  pp_run "$ld" "$ln" steps=10 load=$d/$sv$ext metrics=$d/$tag.jsonl 2> "$d/$tag.log" ||
    { tail -n 3 "$d/$tag.log"; return 1; }
  grep -q "resuming from .* at step 5" "$d/$tag.log" || { echo "did not resume at step 5"; return 1; }
  det_fields "$d/$tag.jsonl" > "$d/$tag.det"
  [ "$(wc -l < "$d/$tag.det")" -eq 5 ] || { echo "expected 5 metrics lines (steps 6..10)"; return 1; }
  cmp "$d/$one-ref.det" "$d/$tag.det" && echo "steps 6..10 identical: $(tail -n 1 "$d/$tag.det")"
}

pp_ck_cells() {
  pp_variant pp1r-next-b4 test-next-tiny per_device_batch_size=4 &&
    pp_variant pp2-next-gpipe test-next-tiny $NEXT_PP &&
    pp_variant pp2-next-1f1b-m4 test-next-tiny $NEXT_PP num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant dp2-next-b4 test-next-tiny num_ranks=2 ici_data_parallelism=2 ici_fsdp_parallelism=1 per_device_batch_size=2 &&
    pp_variant pp1r-next-b8 test-next-tiny per_device_batch_size=8 &&
    pp_variant pp2-next-b8 test-next-tiny $NEXT_PP per_device_batch_size=4 &&
    pp_variant pp2dp2-next-1f1b-z1 test-next-tiny $NEXT_PP4 ici_data_parallelism=2 \
      shard_optimizer_over_data=true num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-35-b4 test-35-tiny per_device_batch_size=4 &&
    pp_variant pp2-35-gpipe test-35-tiny $NEXT_PP &&
    pp_variant pp4-next-1f1b-m4 test-next-tiny num_ranks=4 ici_pipeline_parallelism=4 \
      num_layers_per_pipeline_stage=1 per_device_batch_size=1 num_pipeline_microbatches=4 pipeline_schedule=1f1b
}
check "pipeline ckpt: configgen plans and builds the checkpoint cells" pp_ck_cells
# pp_ck_dir_eq ONE PP RANKS: PP's sharded directory after 5 steps (64 KiB shards: a shard
# holds tensors of both stages) == ONE's: every shard and config.json byte for byte, the
# indexes once plan hash and run name are blanked
pp_ck_dir_eq() {
  pp_ck_save "$1" 1 .dir && pp_ck_save "$2" "$3" .dir || return 1
  cmp "$PP_D/ck/$1.dir/config.json" "$PP_D/ck/$2.dir/config.json" || return 1
  ckpt_dir_eq "$PP_D/ck/$1.dir" "$PP_D/ck/$2.dir"
}
# PP2, PP2 x DP2 ZeRO-1 (1f1b, 4 ranks), Qwen3.5 PP2, PP4 (two middle stages streaming to
# rank 0): the file and the directory
for cell in "pp1r-next-b4 pp2-next-gpipe 2" "pp1r-next-b8 pp2dp2-next-1f1b-z1 4" \
            "pp1r-35-b4 pp2-35-gpipe 2" "pp1r-next-b4 pp4-next-1f1b-m4 4"; do
  set -- $cell
  check "pipeline ckpt: the ${2#pp} checkpoint file after 5 steps ($3 ranks) == one rank's ($1), byte for byte" \
    pp_ck_file_eq "$@"
  check "pipeline ckpt: the ${2#pp} sharded directory after 5 steps ($3 ranks) == one rank's ($1), byte for byte" \
    pp_ck_dir_eq "$@"
done
check "pipeline ckpt: save on PP2 (sharded directory) at step 5, resume on one rank == 10 one-rank steps" \
  pp_ck_resume pp1r-next-b4 pp2-next-gpipe 2 pp1r-next-b4 1 /
check "pipeline ckpt: save on PP2 x DP2 ZeRO-1 (sharded directory), resume on PP2 == one rank" \
  pp_ck_resume pp1r-next-b8 pp2dp2-next-1f1b-z1 4 pp2-next-b8 2 /
check "pipeline ckpt: save on PP2 at step 5, resume on one rank == 10 one-rank steps" \
  pp_ck_resume pp1r-next-b4 pp2-next-gpipe 2 pp1r-next-b4 1
check "pipeline ckpt: save on one rank, resume on PP2 (1f1b) == one rank" \
  pp_ck_resume pp1r-next-b4 pp1r-next-b4 1 pp2-next-1f1b-m4 2
check "pipeline ckpt: save on one rank (sharded directory), resume on PP2 == one rank" \
  pp_ck_resume pp1r-next-b4 pp1r-next-b4 1 pp2-next-gpipe 2 /
check "pipeline ckpt: save on PP4 (1f1b, one layer per stage), resume on one rank == one rank" \
  pp_ck_resume pp1r-next-b4 pp4-next-1f1b-m4 4 pp1r-next-b4 1
check "pipeline ckpt: save on one rank (sharded directory), resume on PP4 == one rank" \
  pp_ck_resume pp1r-next-b4 pp1r-next-b4 1 pp4-next-1f1b-m4 4 /
check "pipeline ckpt: save on PP2, resume on DP2 == one rank" \
  pp_ck_resume pp1r-next-b4 pp2-next-gpipe 2 dp2-next-b4 2
check "pipeline ckpt: save on PP2 x DP2 ZeRO-1 (4 ranks), resume on one rank == one rank" \
  pp_ck_resume pp1r-next-b8 pp2dp2-next-1f1b-z1 4 pp1r-next-b8 1
check "pipeline ckpt: save on one rank, resume on PP2 x DP2 ZeRO-1 (4 ranks) == one rank" \
  pp_ck_resume pp1r-next-b8 pp1r-next-b8 1 pp2dp2-next-1f1b-z1 4
check "pipeline ckpt: Qwen3.5 save on PP2, resume on one rank == one rank" \
  pp_ck_resume pp1r-35-b4 pp2-35-gpipe 2 pp1r-35-b4 1
check "pipeline ckpt: Qwen3.5 save on one rank, resume on PP2 == one rank" \
  pp_ck_resume pp1r-35-b4 pp1r-35-b4 1 pp2-35-gpipe 2

# the MTP head (its mtp.* tensors the last stage's, after the head's): the file after 5 steps
# on PP2 and PP4 == one rank's; PP2 -> one rank; one rank's directory -> PP2 1f1b
pp_ck_mtp_cells() {
  pp_mtp_cells || return 1
  pp_ck_file_eq pp1r-next-b4-mtp pp2-next-gpipe-mtp 2 && pp_ck_file_eq pp1r-next-b4-mtp pp4-next-1f1b-m4-mtp 4
}
check "pipeline ckpt: the MTP head's checkpoint files after 5 steps on PP2 and PP4 == one rank's, byte for byte" \
  pp_ck_mtp_cells
check "pipeline ckpt: the MTP head, save on PP2 at step 5, resume on one rank == one rank" \
  pp_ck_resume pp1r-next-b4-mtp pp2-next-gpipe-mtp 2 pp1r-next-b4-mtp 1
check "pipeline ckpt: the MTP head, save on one rank (sharded directory), resume on PP2 (1f1b) == one rank" \
  pp_ck_resume pp1r-next-b4-mtp pp1r-next-b4-mtp 1 pp2-next-1f1b-m4-mtp 2 /

# dump_grads= on PP2 and on PP2 x DP2 ZeRO-1: the gradient file == one rank's
pp_ck_grads() {
  local one=$1 pp=$2 n=$3 d=$PP_D/ck
  mkdir -p "$d"
  pp_run "$one" 1 steps=0 dump_grads=$d/g-$one.safetensors overwrite=1 2> /dev/null || return 1
  pp_run "$pp" "$n" steps=0 dump_grads=$d/g-$pp.safetensors overwrite=1 2> "$d/g-$pp.log" ||
    { tail -n 3 "$d/g-$pp.log"; return 1; }
  ckpt_same_file "$d/g-$one.safetensors" "$d/g-$pp.safetensors"
}
check "pipeline ckpt: dump_grads on PP2 == one rank's gradient file" pp_ck_grads pp1r-next-b4 pp2-next-gpipe 2
check "pipeline ckpt: dump_grads on PP2 x DP2 ZeRO-1 == one rank's gradient file" \
  pp_ck_grads pp1r-next-b8 pp2dp2-next-1f1b-z1 4

# pp_ck_drop IN OUT NAME: the safetensors file IN without tensor NAME, as OUT
pp_ck_drop() {
  python3 - "$@" << 'PY'
import json, struct, sys
src, dst, drop = sys.argv[1:4]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
data, out, at = b[8 + n:], {}, 0
parts = []
for k, v in h.items():
    if k == '__metadata__' or k == drop:
        if k == '__metadata__': out[k] = v
        continue
    s, e = v['data_offsets']
    parts.append(data[s:e])
    out[k] = dict(v, data_offsets=[at, at + e - s])
    at += e - s
hb = json.dumps(out, separators=(',', ':')).encode()
open(dst, 'wb').write(struct.pack('<Q', len(hb)) + hb + b''.join(parts))
PY
}

# bad checkpoints are refused on every rank of the pipeline, naming the file, before any
# step (no metrics file): one byte short; another model's (Qwen3.5's into Qwen3-Next); the
# one-rank file without the final norm (a tensor of stage 1: stage 0's rank names it too,
# every stage checks every stage's tensors)
pp_ck_bad() {
  local d=$PP_D/ck bad=$PP_D/ck/bad.safetensors out what want
  pp_ck_save pp1r-next-b4 1 && pp_ck_save pp1r-35-b4 1 || return 1
  for what in short other missing; do
    rm -f "$d/bad.jsonl"
    want="rank [01]/2: .*$bad"
    case $what in
      short) cp "$d/pp1r-next-b4.safetensors" "$bad" && truncate -s -1 "$bad" ;;
      other) cp "$d/pp1r-35-b4.safetensors" "$bad" ;;
      missing) pp_ck_drop "$d/pp1r-next-b4.safetensors" "$bad" model.norm.weight || return 1
               want="rank 0/2: .*$bad.*model.norm.weight" ;;
    esac
    out=$(pp_run pp2-next-gpipe 2 steps=10 load=$bad metrics=$d/bad.jsonl 2>&1) &&
      { echo "$what: loaded a bad checkpoint"; return 1; }
    echo "$out" | grep -m1 "$want" || { echo "$out" | tail -n 3; return 1; }
    [ ! -e "$d/bad.jsonl" ] || { echo "$what: a metrics file was written"; return 1; }
  done
}
check "pipeline ckpt: a truncated checkpoint, another model's and one missing a stage-1 tensor are refused on PP2, naming the file" pp_ck_bad

# save= on a pipeline mesh never replaces a file that is not a qtrain checkpoint without
# overwrite=1 (the rule of every save), and writes nothing
pp_ck_no_clobber() {
  local f=$PP_D/ck/user.safetensors out
  mkdir -p "$PP_D/ck"
  echo "user data" > "$f"
  out=$(pp_run pp2-next-gpipe 2 steps=1 save=$f 2>&1) && { echo "replaced a user's file"; return 1; }
  echo "$out" | grep -m1 "save=$f exists and is not a qtrain checkpoint" || { echo "$out" | tail -n 3; return 1; }
  [ "$(cat "$f")" = "user data" ] || { echo "the file changed"; return 1; }
}
check "pipeline ckpt: save= on PP2 refuses to replace a user's file without overwrite=1" pp_ck_no_clobber

# ---- expert dispatch in rounds on a pipeline stage (issue 36, ppbudget): configgen's
# expert_dispatch auto takes rounds on every stage when the largest stage's stage-local
# tables are over the budget with the whole dispatch (80_aot.sh: the 397B pp4 at 62 GiB);
# here set explicitly on PP2 x EP2 1f1b (rounds of 32 host rows, a leaf's worst case: 16
# tokens x min(k 2, 2 experts per rank)), the run == one rank (per_device_batch_size 8), bit
# for bit, as the whole dispatch's pp2ep2-next-1f1b is
pp_rounds_same() {
  pp_variant pp1r-next-b8 test-next-tiny per_device_batch_size=8 &&
    pp_variant pp2ep2-next-1f1b-rounds test-next-tiny $NEXT_PP4 ici_expert_parallelism=2 \
      pipeline_schedule=1f1b expert_dispatch=rounds expert_chunk_rows=32 || return 1
  grep -q "^  moe dispatch: rounds of 32 host rows" "$PP_D/pp2ep2-next-1f1b-rounds/plan/pp2ep2-next-1f1b-rounds/plan.txt" ||
    { echo "the plan does not dispatch in rounds"; return 1; }
  pp_same pp1r-next-b8 pp2ep2-next-1f1b-rounds 4
}
check "pipeline: PP2 x EP2 1f1b with the expert dispatch in rounds == one rank, bit for bit" pp_rounds_same
# ---- circular repeats (R > 1): checkpoints, the held-out eval, token dropping ----
# (docs/pipeline.md "Checkpoints", "The held-out eval", "How the firmware runs it"). A
# circular stage holds R chunks that are not consecutive in the one-rank parameter order; a
# save walks the stages' chunks in that order (blocks: (stage 0, chunk 0), (stage 1, chunk
# 0), ..., each streamed by its stage's first rank), so the file is still one rank's. Checked
# as above: the file and the sharded directory after 5 steps == one rank's, byte for byte,
# on PP2 R2 (M 2), PP2 R2 x DP2 ZeRO-1 (4 ranks, M 4), PP4 R2 (8 layers: every stage
# streams two blocks, interleaved with the other stages') and Qwen3.5 PP2 R2 (M 4: its
# chunks hold parts of a layer cycle); resumes PP2 R2 <-> one rank (file and directory), PP2
# R2 x DP2 ZeRO-1 <-> one rank and Qwen3.5 PP2 R2 <-> one rank: steps 6..10 == the
# uninterrupted one-rank run; dump_grads= on PP2 R2 and PP2 R2 x DP2 ZeRO-1 == one rank's gradient file.
# The eval's forward runs chunk by chunk with the wrap-around: eval-next-1r on PP2 R2, PP2 R2
# x DP2, and PP2 R2 with bf16 and the lb loss (the lb sums wrap around) == one rank's
# training and eval lines. Token dropping: each chunk's forward counts its own layers' drops
# from zero and the stage adds them after each chunk's B, so every metric (the dropped
# counts per layer too) == one rank's: capacity on PP2 R2 M 4, PP2 R2 x DP2, and every form
# at once (bf16, lb, z-loss, capacity, packing) on PP2 R2 M 4.
NEXT_PPC4="$NEXT_PPC num_ranks=4 ici_fsdp_parallelism=1 ici_data_parallelism=2"
pp_circ_cells() {
  pp_variant pp1r-next-b4 test-next-tiny per_device_batch_size=4 &&
    pp_variant pp1r-next-b8 test-next-tiny per_device_batch_size=8 &&
    pp_variant pp1r-next-b4-l8 test-next-tiny per_device_batch_size=4 base_num_decoder_layers=8 &&
    pp_variant pp1r-35-b4 test-35-tiny per_device_batch_size=4 &&
    pp_variant pp2r2-next-gpipe test-next-tiny $NEXT_PPC &&
    pp_variant pp2r2-35-gpipe-m4 test-35-tiny $NEXT_PPC num_pipeline_microbatches=4 &&
    pp_variant pp2r2dp2-next-z1 test-next-tiny $NEXT_PPC4 shard_optimizer_over_data=true \
      num_pipeline_microbatches=4 &&
    pp_variant pp4r2-next-gpipe-l8 test-next-tiny base_num_decoder_layers=8 num_ranks=4 \
      ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 per_device_batch_size=1 &&
    pp_variant pp2r2-eval eval-next-1r $NEXT_PPC per_device_batch_size=2 &&
    pp_variant pp2r2dp2-eval eval-next-1r $NEXT_PPC4 per_device_batch_size=1 &&
    pp_variant pp1r-eval-lb-bf16 eval-next-1r $LB $B16 &&
    pp_variant pp2r2-eval-lb-bf16 eval-next-1r $NEXT_PPC per_device_batch_size=2 $LB $B16 &&
    pp_variant pp1r-next-b4-cap test-next-tiny per_device_batch_size=4 $CAP &&
    pp_variant pp1r-next-b8-cap test-next-tiny per_device_batch_size=8 $CAP &&
    pp_variant pp2r2-next-gpipe-m4-cap test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 $CAP &&
    pp_variant pp2r2dp2-next-cap test-next-tiny $NEXT_PPC4 $CAP &&
    pp_variant pp1r-next-b4-all test-next-tiny per_device_batch_size=4 $ALL &&
    pp_variant pp2r2-next-gpipe-m4-all test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 $ALL
}
check "pipeline circular: configgen plans and builds the checkpoint, eval and token-dropping cells" pp_circ_cells
for cell in "pp1r-next-b4 pp2r2-next-gpipe 2" "pp1r-next-b8 pp2r2dp2-next-z1 4" \
            "pp1r-next-b4-l8 pp4r2-next-gpipe-l8 4" "pp1r-35-b4 pp2r2-35-gpipe-m4 2"; do
  set -- $cell
  check "pipeline circular ckpt: the ${2#pp} checkpoint file after 5 steps ($3 ranks) == one rank's ($1), byte for byte" \
    pp_ck_file_eq "$@"
  check "pipeline circular ckpt: the ${2#pp} sharded directory after 5 steps ($3 ranks) == one rank's ($1), byte for byte" \
    pp_ck_dir_eq "$@"
done
for cell in "pp1r-next-b4 pp2r2-next-gpipe 2 pp1r-next-b4 1" "pp1r-next-b4 pp1r-next-b4 1 pp2r2-next-gpipe 2" \
            "pp1r-next-b4 pp2r2-next-gpipe 2 pp1r-next-b4 1 /" "pp1r-next-b4 pp1r-next-b4 1 pp2r2-next-gpipe 2 /" \
            "pp1r-next-b8 pp2r2dp2-next-z1 4 pp1r-next-b8 1" "pp1r-next-b8 pp1r-next-b8 1 pp2r2dp2-next-z1 4" \
            "pp1r-35-b4 pp2r2-35-gpipe-m4 2 pp1r-35-b4 1" "pp1r-35-b4 pp1r-35-b4 1 pp2r2-35-gpipe-m4 2"; do
  set -- $cell
  check "pipeline circular ckpt: save on ${2#pp} ($3 ranks${6:+, sharded directory}), resume on ${4#pp} ($5 ranks) == 10 one-rank steps" \
    pp_ck_resume "$@"
done
check "pipeline circular ckpt: dump_grads on PP2 R2 == one rank's gradient file" \
  pp_ck_grads pp1r-next-b4 pp2r2-next-gpipe 2
check "pipeline circular ckpt: dump_grads on PP2 R2 x DP2 ZeRO-1 == one rank's gradient file" \
  pp_ck_grads pp1r-next-b8 pp2r2dp2-next-z1 4
check "pipeline circular eval: PP2 R2 (2 ranks) evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval pp2r2-eval 2
check "pipeline circular eval: PP2 R2 x DP2 (4 ranks) evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval pp2r2dp2-eval 4
check "pipeline circular eval: PP2 R2 with bf16 and the lb loss evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval-lb-bf16 pp2r2-eval-lb-bf16 2
for cell in "pp1r-next-b4-cap pp2r2-next-gpipe-m4-cap 2" "pp1r-next-b8-cap pp2r2dp2-next-cap 4" \
            "pp1r-next-b4-all pp2r2-next-gpipe-m4-all 2"; do
  set -- $cell
  check "pipeline circular: ${2#pp} ($3 ranks) == one rank ($1), every metric" pp_same_metrics "$@"
done

# ---- circular repeats with the microbatch and per-layer gradient forms (docs/pipeline.md
# "Circular repeats"): a stage's flat ranges are cut per repeat chunk and each chunk's part of
# the microbatch-end schedule runs right after its backward (the backwards come repeats
# descending, microbatches ascending in each), so every range's microbatch counter gets its
# leaves in one rank's order; the per-layer form's reduce-scatters and gathers (with
# collective_overlap's moves, which stay inside a chunk) run inside the chunks. Each cell ==
# one rank on the same global batch (loss bits + fingerprint, 6 steps, 0 ulp): PP2 R2 x EP2
# (qwen3-next, M 2), x EP2 with 3 sequences a microbatch (the units form, grad_mb_units 3,
# == one rank of 12), x CP2 (qwen3-next, == one rank with context_blocks 2; qwen3.5 M 4),
# x EP2 with the lb loss (every metric), x EP2 with bf16, lb, z-loss and packing at once
# (every metric); the per-layer form: x DP2 gradient_reduce=layer, x DP2 ZeRO-1 with
# per-layer gathers (param_gather=layer, overlap on: split collectives inside the chunks),
# x FSDP2 per-layer gathers, x EP2 gradient_reduce=layer, and with 3 sequences a microbatch
# (the per-layer units, == one rank of 12). The negative control: PP2 R2 x EP2
# with the backward in reverse microbatch order (QT_PP_TEST_ORDER=reverse) differs from one
# rank after step 0 (the same step-0 loss).
PPCM="$NEXT_PPC num_ranks=4 ici_fsdp_parallelism=1"
pp_cmb_cells() {
  pp_variant pp1r-next-b8 test-next-tiny per_device_batch_size=8 &&
    pp_variant pp1r-next-b12 test-next-tiny per_device_batch_size=12 &&
    pp_variant pp1r-next-b8-nb2 test-next-tiny per_device_batch_size=8 context_blocks=2 &&
    pp_variant pp1r-35-b8-nb2 test-35-tiny per_device_batch_size=8 context_blocks=2 &&
    pp_variant pp1r-next-b8-lb test-next-tiny per_device_batch_size=8 $LB &&
    pp_variant pp1r-next-b8-circ test-next-tiny per_device_batch_size=8 $CIRC &&
    pp_variant pp2r2ep2-next test-next-tiny $PPCM ici_expert_parallelism=2 &&
    pp_variant pp2r2ep2-next-b3 test-next-tiny $PPCM ici_expert_parallelism=2 per_device_batch_size=3 &&
    pp_variant pp2r2cp2-next test-next-tiny $PPCM ici_context_parallelism=2 &&
    pp_variant pp2r2cp2-35-m4 test-35-tiny $PPCM ici_context_parallelism=2 num_pipeline_microbatches=4 &&
    pp_variant pp2r2ep2-next-lb test-next-tiny $PPCM ici_expert_parallelism=2 $LB &&
    pp_variant pp2r2ep2-next-m4-circ test-next-tiny $PPCM ici_expert_parallelism=2 num_pipeline_microbatches=4 $CIRC &&
    pp_variant pp2r2dp2-next-layer test-next-tiny $PPCM ici_data_parallelism=2 gradient_reduce=layer &&
    pp_variant pp2r2dp2-next-z1pg test-next-tiny $PPCM ici_data_parallelism=2 \
      shard_optimizer_over_data=true param_gather=layer &&
    pp_variant pp2r2fsdp2-next-pg test-next-tiny $PPCM ici_fsdp_parallelism=2 param_gather=layer &&
    pp_variant pp2r2ep2-next-layer test-next-tiny $PPCM ici_expert_parallelism=2 gradient_reduce=layer &&
    pp_variant pp2r2ep2-next-b3-layer test-next-tiny $PPCM ici_expert_parallelism=2 per_device_batch_size=3 \
      gradient_reduce=layer || return 1
  # the forms the cells claim: units in the b3 cell, a cut microbatch-end schedule, and
  # split collectives (overlap) in the per-layer gathers' cell
  local c
  for c in pp2r2ep2-next-b3 pp2r2ep2-next-b3-layer; do
    c=$PP_D/$c/plan/$c/plan.c
    grep -q '\.grad_mb_units = 3' "$c" || { echo "$c: no grad_mb_units 3"; return 1; }
  done
  c=$PP_D/pp2r2ep2-next/plan/pp2r2ep2-next/plan.c
  [ "$(grep -c '^    {QT_OP_PP_CHUNK, 0x0, {[-0-9, ]*}, {[01]ll, 2ll' "$c")" -eq 4 ] ||
    { echo "$c: not 2 microbatch-end chunk markers a stage"; return 1; }
  grep -q "stage 1: 4 flat ranges, each inside one chunk (per chunk and holding pattern)" \
    "${c%plan.c}plan.txt" || { echo "${c%plan.c}plan.txt: no per-chunk ranges line"; return 1; }
  c=$PP_D/pp2r2dp2-next-z1pg/plan/pp2r2dp2-next-z1pg/plan.c
  grep -q 'QT_OP_COLL_START' "$c" || { echo "$c: no split collective"; return 1; }
}
check "pipeline: configgen plans and builds the circular cells of the microbatch and per-layer forms" pp_cmb_cells

for cell in "pp1r-next-b8 pp2r2ep2-next 4" "pp1r-next-b12 pp2r2ep2-next-b3 4" \
            "pp1r-next-b8-nb2 pp2r2cp2-next 4" "pp1r-35-b8-nb2 pp2r2cp2-35-m4 4" \
            "pp1r-next-b8 pp2r2dp2-next-layer 4" "pp1r-next-b8 pp2r2dp2-next-z1pg 4" \
            "pp1r-next-b8 pp2r2fsdp2-next-pg 4" "pp1r-next-b8 pp2r2ep2-next-layer 4" \
            "pp1r-next-b12 pp2r2ep2-next-b3-layer 4"; do
  set -- $cell
  check "pipeline: circular ${2#pp} ($3 ranks) == one rank ($1), bit for bit" pp_same "$@"
done
for cell in "pp1r-next-b8-lb pp2r2ep2-next-lb 4" "pp1r-next-b8-circ pp2r2ep2-next-m4-circ 4"; do
  set -- $cell
  check "pipeline: circular ${2#pp} ($3 ranks) == one rank ($1), bit for bit, every metric" pp_same_metrics "$@"
done

# the check can fail: PP2 R2 x EP2 with every chunk's backwards in reverse microbatch order
check "pipeline: circular x EP2 with the backward in reverse microbatch order is not one rank's bits (non-vacuous)" \
  pp_reverse_differs pp2r2ep2-next pp1r-next-b8 4

# scanned layers inside a circular stage's chunks: 32 layers, PP2 R2 with 8 layers a chunk
# (two 4-layer cycles each, schedule/scan.c stores a run of them once; the driver finds the
# chunks by logical op), scan_layers on: == one rank of 32 layers (2 ranks), and x EP2 (the
# microbatch form, 4 ranks); plan.txt says which stages' executed tables are scanned
L32C="base_num_decoder_layers=32 scan_layers=true num_layers_per_pipeline_stage=8 ici_pipeline_parallelism=2"
pp_cmb_scan_cells() {
  pp_variant pp1r-next32-b4-scan test-next-tiny base_num_decoder_layers=32 scan_layers=true per_device_batch_size=4 &&
    pp_variant pp1r-next32-b8-scan test-next-tiny base_num_decoder_layers=32 scan_layers=true per_device_batch_size=8 &&
    pp_variant pp2r2-next32-scan test-next-tiny $L32C num_ranks=2 &&
    pp_variant pp2r2ep2-next32-scan test-next-tiny $L32C num_ranks=4 ici_fsdp_parallelism=1 ici_expert_parallelism=2 ||
    return 1
  local c t
  for c in pp2r2-next32-scan pp2r2ep2-next32-scan; do
    t=$PP_D/$c/plan/$c/plan.txt
    [ "$(grep -c '^ *\.n_scans = [1-9]' "${t%plan.txt}plan.c")" -eq 2 ] || { echo "$c: not both stages scanned"; return 1; }
    grep -q "stage 0: .*, scanned, arena" "$t" || { echo "$t: stage 0 not scanned"; return 1; }
  done
  echo "both stages scanned: $(grep -o 'stage 0: .*' "$t" | cut -c1-60)..."
}
check "pipeline: scan_layers scans a circular stage's chunks (32 layers, PP2 R2, 8 a chunk)" pp_cmb_scan_cells
for cell in "pp1r-next32-b4-scan pp2r2-next32-scan 2" "pp1r-next32-b8-scan pp2r2ep2-next32-scan 4"; do
  set -- $cell
  check "pipeline: circular scanned ${2#pp} ($3 ranks) == one rank ($1), bit for bit" pp_same "$@"
done

# checkpoints of the circular microbatch and per-layer forms (their ranges cut per chunk):
# the file after 5 steps == one rank's (PP2 R2 x EP2; x DP2 ZeRO-1 with per-layer gathers),
# and PP2 R2 x EP2's checkpoint resumed on one rank: steps 6..10 == one rank's 10 steps
for cell in "pp1r-next-b8 pp2r2ep2-next 4" "pp1r-next-b8 pp2r2dp2-next-z1pg 4"; do
  set -- $cell
  check "pipeline ckpt: circular ${2#pp} ($3 ranks) checkpoint file == one rank's ($1)" pp_ck_file_eq "$@"
done
check "pipeline ckpt: circular 2r2ep2-next (4 ranks) -> one rank: steps 6..10 == one rank's" \
  pp_ck_resume pp1r-next-b8 pp2r2ep2-next 4 pp1r-next-b8 1

# the MTP head with circular repeats (docs/pipeline.md "The MTP head with circular repeats"):
# stage 0's first chunk (repeat 0) sends the embeddings straight to the last stage's last
# chunk (repeat R - 1), whose backward sends their gradient back to stage 0's first chunk's
# backward; each == one rank with the same keys in the loss bits, fingerprint and every
# metric (mtp_loss included): qwen3-next PP2 R2 M 4, qwen3.5 PP2 R2 M 4, 2 depths PP2 R2 M 4,
# PP2 R2 x DP2 and x EP2 (the microbatch form's per-chunk ranges), the checkpoint file after
# 5 steps on PP2 R2 == one rank's; the check can fail (mtp-drop), and the reversed backward
# order (both ends reverse their one chunk's backwards alike) runs to the end
pp_mtpc_cells() {
  pp_mtp_cells &&
    pp_variant pp2r2-next-gpipe-m4-mtp test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 $MTP &&
    pp_variant pp2r2-35-gpipe-m4-mtp test-35-tiny $NEXT_PPC num_pipeline_microbatches=4 $MTP &&
    pp_variant pp2r2-next-gpipe-m4-mtp2 test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 mtp_num_layers=2 &&
    pp_variant pp2r2dp2-next-mtp test-next-tiny $PPCM ici_data_parallelism=2 $MTP &&
    pp_variant pp2r2ep2-next-mtp test-next-tiny $PPCM ici_expert_parallelism=2 $MTP
}
check "pipeline: configgen plans and builds the MTP head's circular cells" pp_mtpc_cells
for cell in "pp1r-next-b4-mtp pp2r2-next-gpipe-m4-mtp 2" "pp1r-35-b4-mtp pp2r2-35-gpipe-m4-mtp 2" \
            "pp1r-next-b4-mtp2 pp2r2-next-gpipe-m4-mtp2 2" "pp1r-next-b8-mtp pp2r2dp2-next-mtp 4" \
            "pp1r-next-b8-mtp pp2r2ep2-next-mtp 4"; do
  set -- $cell
  check "pipeline MTP circular: ${2#pp} ($3 ranks) == one rank ($1), bit for bit, every metric" pp_same_mtp "$@"
done
check "pipeline MTP circular: the head's embedding gradient not applied on stage 0 is not one rank's bits (non-vacuous)" \
  pp_mtp_drop_differs pp2r2-next-gpipe-m4-mtp
pp_mtpc_reverse_runs() {
  pp_det pp1r-next-b4-mtp2 1 && pp_det pp2r2-next-gpipe-m4-mtp2 2 QT_PP_TEST_ORDER=reverse || return 1
  local a=$PP_D/pp1r-next-b4-mtp2.det b=$PP_D/pp2r2-next-gpipe-m4-mtp2.QT_PP_TEST_ORDER.det
  [ "$(wc -l < "$b")" -eq 6 ] || { echo "expected 6 steps"; return 1; }
  [ "$(head -n 1 "$a")" = "$(head -n 1 "$b")" ] || { echo "step 0 differs"; return 1; }
  echo "reversed backwards, 6 steps, step 0 == one rank: $(head -n 1 "$b")"
}
check "pipeline MTP circular: the reversed backward order pairs the head's messages (6 steps, step-0 loss == one rank's)" \
  pp_mtpc_reverse_runs
check "pipeline ckpt: the MTP head's checkpoint file after 5 steps on PP2 R2 == one rank's, byte for byte" \
  pp_ck_file_eq pp1r-next-b4-mtp pp2r2-next-gpipe-m4-mtp 2

# ---- interleaved 1F1B: pipeline_schedule=1f1b with circular repeats (docs/pipeline.md
# "Schedules", firmware/include/qt_pp_sched.h): Megatron's forward_backward_pipelining_with_
# interleaving over the (microbatch, chunk) pairs, groups of S microbatches, warm-up
# min(2 (S - s - 1) + (R - 1) S, M R) (all M R when M = S), each chunk's backwards in
# microbatch order. Each cell == one rank on the same global batch (loss bits + fingerprint,
# 6 steps, 0 ulp): qwen3-next PP2 R2 M 4, qwen3.5 PP2 R2 M 4, PP2 R2 x DP2 M 4, PP2 R2 x EP2
# M 4 (the microbatch form's per-chunk ranges), 8 layers PP4 R2 M 8 (the S 4 / R 2 / M 8
# table) and M 4 (M = S: every forward first), every metric with bf16, lb, z-loss and
# packing at once, the MTP head (every metric, mtp_loss included); plan.txt's interleaved
# table is the hand-written one; the check can fail (QT_PP_TEST_ORDER=reverse relabels the
# microbatches j -> M - 1 - j on every stage: it runs, its step-0 loss is one rank's, its
# bits later are not); receives posted ahead off give the same bits; the bubble line prints
# (S-1)/(R*M+S-1); the checkpoint file after 5 steps == one rank's; the held-out eval (PP2
# R2 M 2) over 10 steps == one rank's.
pp_intl_cells() {
  # the one-rank cells (built above already in a full run: pp_variant keeps them)
  pp_variant pp1r-next-b4 test-next-tiny per_device_batch_size=4 &&
    pp_variant pp1r-35-b4 test-35-tiny per_device_batch_size=4 &&
    pp_variant pp1r-next-b8 test-next-tiny per_device_batch_size=8 &&
    pp_variant pp1r-next-b4-l8 test-next-tiny per_device_batch_size=4 base_num_decoder_layers=8 &&
    pp_variant pp1r-next-b4-circ test-next-tiny per_device_batch_size=4 $CIRC &&
    pp_variant pp1r-next-b4-mtp test-next-tiny per_device_batch_size=4 $MTP &&
    pp_variant pp2r2-next-1f1b-m4 test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp2r2-35-1f1b-m4 test-35-tiny $NEXT_PPC num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp2r2dp2-next-1f1b-m4 test-next-tiny $PPCM ici_data_parallelism=2 \
      num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp2r2ep2-next-1f1b-m4 test-next-tiny $PPCM ici_expert_parallelism=2 \
      num_pipeline_microbatches=4 pipeline_schedule=1f1b &&
    pp_variant pp1r-next-b8-l8 test-next-tiny per_device_batch_size=8 base_num_decoder_layers=8 &&
    pp_variant pp4r2-next-1f1b-m8-l8 test-next-tiny base_num_decoder_layers=8 num_ranks=4 \
      ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 num_pipeline_microbatches=8 \
      pipeline_schedule=1f1b &&
    pp_variant pp4r2-next-1f1b-m4-l8 test-next-tiny base_num_decoder_layers=8 num_ranks=4 \
      ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 per_device_batch_size=1 \
      pipeline_schedule=1f1b &&
    pp_variant pp2r2-next-1f1b-m4-circ test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 \
      pipeline_schedule=1f1b $CIRC &&
    pp_variant pp2r2-next-1f1b-m4-mtp test-next-tiny $NEXT_PPC num_pipeline_microbatches=4 \
      pipeline_schedule=1f1b $MTP &&
    pp_variant pp2r2-eval-1f1b eval-next-1r $NEXT_PPC per_device_batch_size=2 pipeline_schedule=1f1b || return 1
  # plan.txt: the interleaved table per stage (S 2, R 2, M 4: written out by hand in
  # tests/unit/test_pipeline.cpp) and its bubble
  local t=$PP_D/pp2r2-next-1f1b-m4/plan/pp2r2-next-1f1b-m4/plan.txt
  grep -qxF "    stage 0 (warm-up 4, at most 5 chunk inputs in flight): F0/0 F1/0 F0/1 F1/1 F2/0 B0/1 F3/0 B1/1 F2/1 B0/0 F3/1 B1/0 B2/1 B3/1 B2/0 B3/0" "$t" &&
    grep -qxF "    stage 1 (warm-up 2, at most 3 chunk inputs in flight): F0/0 F1/0 F0/1 B0/1 F1/1 B1/1 F2/0 B0/0 F3/0 B1/0 F2/1 B2/1 F3/1 B3/1 B2/0 B3/0" "$t" &&
    grep -qF "  bubble: (S-1)/(R*M+S-1) = 1/9 = 0.1111 (11.1% of each pipeline flush idle); interleaved 1f1b the same" "$t" ||
    { echo "$t: no interleaved table or bubble line"; return 1; }
  # the executed input slots cut to each stage's peak pairs in flight (5 and 3 of M R = 8;
  # qt_pp_intl_slots): pp_slots 21 and 19 rows where circular gpipe's hold 3 M R = 24
  grep -qF "    stage 0: plan hash " "$t" &&
    grep -F "in-flight slots 5 input + 16 sent boundary messages (21 of 3 M R = 24 rows;" "$t" &&
    grep -F "in-flight slots 3 input + 16 sent boundary messages (19 of 3 M R = 24 rows;" "$t" &&
    grep -qE '"pp_slots", QT_ROLE_ACT, QT_F32, 2, \{21, ' "${t%plan.txt}plan.c" ||
    { echo "$t: the interleaved input slots are not the order's peak"; return 1; }
  t=$PP_D/pp4r2-next-1f1b-m8-l8/plan/pp4r2-next-1f1b-m8-l8/plan.txt
  grep -qxF "    stage 3 (warm-up 4, at most 5 chunk inputs in flight): F0/0 F1/0 F2/0 F3/0 F0/1 B0/1 F1/1 B1/1 F2/1 B2/1 F3/1 B3/1 F4/0 B0/0 F5/0 B1/0 F6/0 B2/0 F7/0 B3/0 F4/1 B4/1 F5/1 B5/1 F6/1 B6/1 F7/1 B7/1 B4/0 B5/0 B6/0 B7/0" "$t" ||
    { echo "$t: no S 4 / R 2 / M 8 table"; return 1; }
  echo "plan.txt: $(grep -c 'chunk inputs in flight' "$t") stage lines of the S 4 / R 2 / M 8 table"
}
check "pipeline interleaved 1f1b: configgen plans, tabulates and builds the cells" pp_intl_cells
for cell in "pp1r-next-b4 pp2r2-next-1f1b-m4 2" "pp1r-35-b4 pp2r2-35-1f1b-m4 2" \
            "pp1r-next-b8 pp2r2dp2-next-1f1b-m4 4" "pp1r-next-b8 pp2r2ep2-next-1f1b-m4 4" \
            "pp1r-next-b8-l8 pp4r2-next-1f1b-m8-l8 4" "pp1r-next-b4-l8 pp4r2-next-1f1b-m4-l8 4"; do
  set -- $cell
  check "pipeline interleaved 1f1b: ${2#pp} ($3 ranks) == one rank ($1), bit for bit" pp_same "$@"
done
check "pipeline interleaved 1f1b: 2r2-next-1f1b-m4-circ (2 ranks; bf16, lb, z-loss, packing) == one rank, every metric" \
  pp_same_metrics pp1r-next-b4-circ pp2r2-next-1f1b-m4-circ 2
check "pipeline interleaved 1f1b: the MTP head, 2r2-next-1f1b-m4-mtp (2 ranks) == one rank, every metric" \
  pp_same_mtp pp1r-next-b4-mtp pp2r2-next-1f1b-m4-mtp 2
check "pipeline interleaved 1f1b: the microbatches relabelled in reverse are not one rank's bits (non-vacuous)" \
  pp_reverse_differs pp2r2-next-1f1b-m4
pp_intl_prefetch_off_same() {
  local c=pp2r2-next-1f1b-m4
  pp_det "$c" 2 && pp_det "$c" 2 QT_PP_PREFETCH=0 || return 1
  cmp "$PP_D/$c.det" "$PP_D/$c.QT_PP_PREFETCH.det" || return 1
  echo "identical with and without receives posted ahead: $(tail -n 1 "$PP_D/$c.det")"
}
check "pipeline interleaved 1f1b: receives posted ahead off (QT_PP_PREFETCH=0) give the same bits" \
  pp_intl_prefetch_off_same
# the driver runs the hand-written tables (tests/unit/test_pipeline.cpp): the order trace
# (QT_PP_TRACE=1: each stage prints its first group's actions as they ran) of PP2 R2 M 4 and
# of PP4 R2 M 8, the bits unchanged by the trace
pp_intl_order() {
  local c=pp2r2-next-1f1b-m4 c4=pp4r2-next-1f1b-m8-l8
  pp_det "$c" 2 && pp_det "$c" 2 QT_PP_TRACE=1 && pp_det "$c4" 4 QT_PP_TRACE=1 || return 1
  cmp "$PP_D/$c.det" "$PP_D/$c.QT_PP_TRACE.det" || return 1
  local e=$PP_D/$c.QT_PP_TRACE.err e4=$PP_D/$c4.QT_PP_TRACE.err h="qtrain: pipeline stage"
  grep -qxF "$h 0 of 2 order (1f1b interleaved, M 4, R 2): F0/0 F1/0 F0/1 F1/1 F2/0 B0/1 F3/0 B1/1 F2/1 B0/0 F3/1 B1/0 B2/1 B3/1 B2/0 B3/0" "$e" &&
    grep -qxF "$h 1 of 2 order (1f1b interleaved, M 4, R 2): F0/0 F1/0 F0/1 B0/1 F1/1 B1/1 F2/0 B0/0 F3/0 B1/0 F2/1 B2/1 F3/1 B3/1 B2/0 B3/0" "$e" ||
    { grep "order" "$e"; return 1; }
  grep -qxF "$h 0 of 4 order (1f1b interleaved, M 8, R 2): F0/0 F1/0 F2/0 F3/0 F0/1 F1/1 F2/1 F3/1 F4/0 F5/0 F6/0 B0/1 F7/0 B1/1 F4/1 B2/1 F5/1 B3/1 F6/1 B0/0 F7/1 B1/0 B2/0 B3/0 B4/1 B5/1 B6/1 B7/1 B4/0 B5/0 B6/0 B7/0" "$e4" &&
    grep -qxF "$h 1 of 4 order (1f1b interleaved, M 8, R 2): F0/0 F1/0 F2/0 F3/0 F0/1 F1/1 F2/1 F3/1 F4/0 B0/1 F5/0 B1/1 F6/0 B2/1 F7/0 B3/1 F4/1 B0/0 F5/1 B1/0 F6/1 B2/0 F7/1 B3/0 B4/1 B5/1 B6/1 B7/1 B4/0 B5/0 B6/0 B7/0" "$e4" &&
    grep -qxF "$h 2 of 4 order (1f1b interleaved, M 8, R 2): F0/0 F1/0 F2/0 F3/0 F0/1 F1/1 F2/1 B0/1 F3/1 B1/1 F4/0 B2/1 F5/0 B3/1 F6/0 B0/0 F7/0 B1/0 F4/1 B2/0 F5/1 B3/0 F6/1 B4/1 F7/1 B5/1 B6/1 B7/1 B4/0 B5/0 B6/0 B7/0" "$e4" &&
    grep -qxF "$h 3 of 4 order (1f1b interleaved, M 8, R 2): F0/0 F1/0 F2/0 F3/0 F0/1 B0/1 F1/1 B1/1 F2/1 B2/1 F3/1 B3/1 F4/0 B0/0 F5/0 B1/0 F6/0 B2/0 F7/0 B3/0 F4/1 B4/1 F5/1 B5/1 F6/1 B6/1 F7/1 B7/1 B4/0 B5/0 B6/0 B7/0" "$e4" ||
    { grep "order" "$e4"; return 1; }
  grep "order" "$e4" | cut -c1-120
}
check "pipeline interleaved 1f1b: the driver runs the hand-written S 2 / R 2 / M 4 and S 4 / R 2 / M 8 orders (QT_PP_TRACE=1), same bits" \
  pp_intl_order
# the bubble line of each stage: 1f1b, M 4, the formula (S-1)/(R*M+S-1) = 1/9
pp_intl_bubble() {
  local e=$PP_D/pp2r2-next-1f1b-m4.err st
  for st in 0 1; do
    grep -q "^qtrain: pipeline stage $st of 2 (rank $st, 1f1b, M 4): schedule .* formula (S-1)/(R\*M+S-1) = 0.1111$" "$e" ||
      { echo "$e: no bubble line of stage $st"; return 1; }
  done
  grep "^qtrain: pipeline stage" "$e" | sed 's/.*bubble/bubble/'
}
check "pipeline interleaved 1f1b: each stage's bubble line beside (S-1)/(R*M+S-1)" pp_intl_bubble
check "pipeline interleaved 1f1b ckpt: the checkpoint file after 5 steps on PP2 R2 == one rank's, byte for byte" \
  pp_ck_file_eq pp1r-next-b4 pp2r2-next-1f1b-m4 2
check "pipeline interleaved 1f1b eval: PP2 R2 M 2 (M = S: every forward first) evals and training == one rank's, bit for bit" \
  pp_eval_same pp1r-eval pp2r2-eval-1f1b 2
