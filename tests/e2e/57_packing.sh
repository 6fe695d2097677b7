# 57_packing.sh - packed documents on meshes (docs/data.md "Packed documents"), sourced by
# run_all.sh. With `packing: true` and `eos_id: 7` the tiny test data's token 7 ends a
# document (8 of its 321 tokens, so most steps' windows hold several documents): rotary
# positions, attention, the GDN conv and the delta rule restart at each document and no loss
# is taken on a target in the next document (the loss and the gradient are normalised by the
# step's count of targets with a loss). Checks:
#   * packing changes the bits (the documents really are separated: not vacuous), and a
#     plan with packing off is the unpacked plan, hash for hash (the key costs nothing off);
#   * every mesh cell with packing == one rank with packing, bit for bit (loss bits and
#     fingerprint, 10 steps): qwen3-next DP2 x EP2, TP2, FSDP2 (auto), DP2 with ZeRO-1 and
#     G 2, remat full on DP2 x EP2, context parallelism CP2 and CP2 x EP2 (auto; the
#     positions cover whole sequences on every context rank), qwen3.5 DP2 x EP2, qwen3.5-tiny
#     TP2 (1 kv head), bf16 DP2 x EP2 (auto); the chunked delta rule (gdn_core_algorithm
#     chunked, issue 35) on TP2, DP2 x EP2 and CP2 (its head side runs whole sequences with
#     their positions).
# The numerics of packing against the float64 PyTorch reference: 56_packing_golden.sh.
# Run files: configgen/configs/runs/pack-*.yml (each a mesh-/ctx-/bf16- run plus the two
# keys); runs through plan_det (run_all.sh: the tiny test data, seed 11, under `timeout`).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184


check "packing changes the one-rank bits (qwen3-next tiny, eos 7)" \
  bits_differ "$QT_TMP/pack" mesh-next-1r pack-next-1r

# packing: false with an eos_id plans exactly the unpacked plan (same hash)
pack_off_same() {
  local d=$QT_TMP/pack/off a b
  rm -rf "$d"
  build/configgen/configgen -o "$d/a" configgen/configs/runs/mesh-next-1r.yml > /dev/null || return 1
  build/configgen/configgen -o "$d/b" configgen/configs/runs/mesh-next-1r.yml packing=false \
    eos_id=7 > /dev/null || return 1
  a=$(grep -o "plan hash 0x[0-9a-f]*" "$d/a/mesh-next-1r/plan.txt")
  b=$(grep -o "plan hash 0x[0-9a-f]*" "$d/b/mesh-next-1r/plan.txt")
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "both: $a"
}
check "packing: false plans the unpacked plan, hash for hash" pack_off_same

for cell in "pack-next-1r pack-next-dp2ep2 4" "pack-next-1r pack-next-tp2 2" \
            "pack-next-1r pack-next-fsdp2-auto 2" "pack-next-1r pack-next-dp2-g2-zero1 2" \
            "pack-next-1r pack-remat-full-next-dp2ep2 4" \
            "pack-ctx-next-1r-nb4 pack-ctx-next-cp2 2" \
            "pack-ctx-next-1r-nb4 pack-ctx-next-cp2ep2-auto 4" \
            "pack-35-1r pack-35-dp2ep2 4" "pack-35t-1r pack-35t-tp2 2" \
            "pack-b16-next-1r pack-b16-next-dp2ep2-auto 4" \
            "pack-chunk-next-1r pack-chunk-next-tp2 2" \
            "pack-chunk-next-1r pack-chunk-next-dp2ep2 4" \
            "pack-chunk-ctx-next-1r-nb4 pack-chunk-ctx-next-cp2 2"; do
  set -- $cell
  check "packing: ${2#pack-} ($3 ranks) == one rank ($1), bit for bit" same_bits "$QT_TMP/pack" "$@"
done
