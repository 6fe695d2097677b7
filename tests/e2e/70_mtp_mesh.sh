# 70_mtp_mesh.sh - the multi-token-prediction head (issue 31, docs/model.md 1.8) on meshes
# (sourced by run_all.sh): every mtp-* cell trains the global batch of its one-rank run
# (4 sequences of 16 tokens, 10 steps, the tiny test data) and must give its loss bits and
# parameter fingerprint on every step (same_bits, docs/design.md section 6: 0 ulp). The head
# adds STACK / SPLIT / XENT_MTP and a full-attention layer, so these cells cover what the
# main model's matrices (70_mesh, 71_context, 74_zero1, 77_bf16) cover without it: data +
# ZeRO-1 + accumulation, fsdp (auto), tensor, expert, context (the shifted inputs of a
# block's last positions are the next context rank's tokens, read from the data), remat,
# bf16, per-layer reduction and gathers (the head's parameters in the global range); and the head is not vacuous (its run differs from the model without it).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
MTP_DIR=$QT_TMP/mtp-mesh
for cell in mtp-next-1r:mtp-next-dp2-g2-zero1:2 mtp-next-1r:mtp-next-fsdp2-auto:2 \
            mtp-next-1r:mtp-next-tp2:2 mtp-next-1r:mtp-next-ep2:2 \
            mtp-next-1r:mtp-next-remat-full:1 mtp-next-1r-nb4:mtp-next-cp2:2 \
            mtp-35-1r:mtp-35-dp2ep2:4 mtp-bf16-next-1r:mtp-bf16-next-dp2ep2:4 \
            mtp-next-1r:mtp-next-dp2ep2-layer:4; do
  one=${cell%%:*}; rest=${cell#*:}; run=${rest%%:*}; n=${rest##*:}
  check "MTP head: $run ($n rank(s)) == $one, 10 steps, bit for bit" same_bits "$MTP_DIR" $one $run $n
done
check "MTP head: mtp-next-1r differs from the model without the head (mesh-next-1r)" \
  bits_differ "$MTP_DIR" mesh-next-1r mtp-next-1r
