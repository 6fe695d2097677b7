# 56_packing_golden.sh - packed documents (packing: true, eos_id 7; docs/data.md "Packed
# documents") against the float64 PyTorch reference, sourced by run_all.sh.
#   * test-next-pack and test-35-pack: the reference's crafted stream (gold_e2e.py
#     packed_stream: documents of 1 and 2 tokens, shorter than the conv kernel; documents
#     spanning two windows; one ending on a window's last input token; eos as a window's
#     first input; several documents per window) with golden_run's tolerances (step-0
#     gradients 2e-4 of each tensor's largest magnitude, 10-step losses 2e-4 relative,
#     gradient norms 1e-3: tests/e2e/10_golden.sh says why);
#   * not vacuous: the unpacked plan of the same model on the same weights and tokens has a
#     step-0 loss more than 5x the loss tolerance from the packed golden's (at these near-
#     uniform initial predictions the loss moves little: ~3e-3 relative) and step-0
#     gradients that fail golden_run's comparison with the packed goldens (off by O(1)).
check "packing golden qwen3-next tiny: step-0 gradients and 10-step losses vs PyTorch" \
  golden_run test-next-pack
check "packing golden qwen3.5 tiny: step-0 gradients and 10-step losses vs PyTorch" \
  golden_run test-35-pack
# the multi-token-prediction head with packed documents (docs/model.md 1.8): no MTP loss where
# the target is past the window or in another document, the MTP term divided by the step's
# count of positions with one (a run-time pre-pass; mtp_loss per step against the reference)
check "packing golden qwen3-next tiny with the MTP head: gradients, losses and mtp_loss vs PyTorch" \
  golden_run test-next-mtp-pack
check "packing golden qwen3.5 tiny with the MTP head: gradients, losses and mtp_loss vs PyTorch" \
  golden_run test-35-mtp-pack
# the chunked (WY) delta rule with packed documents (issue 35): the state restarts at every
# document start inside a chunk (the pairs of different documents masked) and across chunks;
# the same float64 math as the recurrent form, so the same goldens and tolerances (chunk 8 of
# 16 tokens: the crafted documents start mid-chunk and one crosses the chunk boundary)
check "packing golden qwen3-next tiny, chunked delta rule, vs PyTorch (test-next-pack goldens)" \
  golden_run test-next-chunk-pack test-next-pack
check "packing golden qwen3.5 tiny, chunked delta rule, vs PyTorch (test-35-pack goldens)" \
  golden_run test-35-chunk-pack test-35-pack

# pack_differs PACKED UNPACKED: UNPACKED (same model, packing off) on PACKED's golden weights
# and tokens: its step-0 loss differs from the packed golden's by more than 5x the loss
# tolerance while PACKED's is within it, and its step-0 gradients fail st_compare against
# the packed goldens (the reference counted fewer loss targets than the batch has).
pack_differs() {
  local g=tests/golden/e2e/$1 out=$QT_TMP/pack-$1
  mkdir -p "$out"
  build/$2/qtrain load="$g/init.safetensors" data="$g/tokens.npy" steps=1 \
      metrics="$out/unpacked.jsonl" dump_grads="$out/unpacked.safetensors" 2> "$out/unpacked.err" \
      || { tail -n 3 "$out/unpacked.err"; return 1; }
  if build/tools/st_compare "$out/unpacked.safetensors" "$g/grads0.safetensors" 2e-4 > "$out/cmp.txt"; then
    echo "unpacked step-0 gradients pass against the packed goldens"; return 1
  fi
  tail -n 1 "$out/cmp.txt"
  build/$1/qtrain load="$g/init.safetensors" data="$g/tokens.npy" steps=1 \
      metrics="$out/packed.jsonl" 2> "$out/packed.err" || { tail -n 3 "$out/packed.err"; return 1; }
  local lu lp le nt ne
  lu=$(grep -o '"loss":[0-9.e+-]*' "$out/unpacked.jsonl" | head -n 1 | cut -d: -f2)
  lp=$(grep -o '"loss":[0-9.e+-]*' "$out/packed.jsonl" | head -n 1 | cut -d: -f2)
  le=$(tr -d ' \n' < "$g/expected.json" | grep -o '"loss":\[[^],]*' | cut -d[ -f2)
  ne=$(tr -d ' \n' < "$g/expected.json" | grep -o '"loss_tokens":\[[^],]*' | cut -d[ -f2)
  nt=$(tr -d ' \n' < "$g/expected.json" | grep -o '"tokens_per_step":[0-9]*' | cut -d: -f2)
  [ -n "$lu" ] && [ -n "$lp" ] && [ -n "$le" ] && [ -n "$ne" ] && [ -n "$nt" ] || { echo "missing figures"; return 1; }
  echo "step 0: packed $lp (reference $le), unpacked $lu; loss tokens $ne of $nt"
  awk -v u="$lu" -v p="$lp" -v e="$le" -v ne="$ne" -v nt="$nt" '
      function abs(x) { return x < 0 ? -x : x }
      BEGIN { exit !(abs(p - e) <= 2e-4 * e && abs(u - e) > 5 * 2e-4 * e && ne < nt) }'
}
check "packing changes the result: test-next-tiny (unpacked) on the packed golden's data differs" \
  pack_differs test-next-pack test-next-tiny
check "packing changes the result: test-35-tiny (unpacked) on the packed golden's data differs" \
  pack_differs test-35-pack test-35-tiny
