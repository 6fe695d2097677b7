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

# ---- packing without eos_id (issue 35, docs/data.md "Where the separator comes from"): a
# plan with packing: true and eos_id unset takes the end-of-document id the token file
# records (the QTTOKENS version 2 header qtrain-data writes), none for the embedded corpus.
# pack-next-1r with eos_id=-1 (plan_variant) on the tiny test data as a version 2 file
# recording 7 trains the bits of pack-next-1r (eos_id 7) on the .npy; the refusals name the
# file and the key; the default model with packing=true on the embedded corpus (no
# separator: each window one document) trains the unpacked default's bits.
PK=$QT_TMP/pack/fileeos
# pk_v2 OUT EOS: the tiny test data (.npy, <u2) as QTTOKENS version 2 of 4-byte tokens whose
# header records EOS (4294967295: none)
pk_v2() {
  python3 - tests/golden/e2e/test-next-tiny/tokens.npy "$1" "$2" <<'PY'
import ast, struct, sys
b = open(sys.argv[1], "rb").read()
hl = struct.unpack_from("<H", b, 8)[0]
h = ast.literal_eval(b[10:10 + hl].decode())
assert h["descr"] == "<u2" and not h["fortran_order"], h
n = h["shape"][0]
ids = struct.unpack_from("<%dH" % n, b, 10 + hl)
with open(sys.argv[2], "wb") as f:
    f.write(b"QTTOKENS" + struct.pack("<IIQII", 2, 4, n, int(sys.argv[3]), 0))
    f.write(struct.pack("<%dI" % n, *ids))
PY
}
# pk_fail SUBSTRING CMD...: CMD fails and its stderr holds SUBSTRING
pk_fail() {
  local sub=$1; shift
  "$@" > /dev/null 2> $PK/fail.err && { echo "unexpected success: $*"; return 1; }
  grep -qF -- "$sub" $PK/fail.err || { echo "message lacks \"$sub\":"; cat $PK/fail.err; return 1; }
  echo "ok: $(head -n 2 $PK/fail.err)"
}
pk_variant() {
  mkdir -p $PK
  [ -x $PK/pack-next-1r-v/qtrain ] || plan_variant pack-next-1r $PK eos_id=-1
}

pack_file_eos() {
  pk_variant || return 1
  grep -F "packing: documents end at the separator the token file records, read at start-up (eos_id unset)" \
    $PK/pack-next-1r-v/plan/pack-next-1r/plan.txt || return 1
  pk_v2 $PK/e7.tok 7 && rm -rf $PK/hf || return 1
  timeout 120 $PK/pack-next-1r-v/qtrain data=$PK/e7.tok seed=11 steps=10 metrics=$PK/e7.jsonl \
    save=$PK/hf 2> $PK/e7.err || { tail -n 3 $PK/e7.err; return 1; }
  grep -F "qtrain: note: packing: documents end at token id 7, from the QTTOKENS header of data=$PK/e7.tok (the plan has no eos_id)" \
    $PK/e7.err || { cat $PK/e7.err; return 1; }
  grep -F '"note":"packing: eos 7 from the QTTOKENS header of data=' $PK/e7.jsonl > /dev/null ||
    { echo "manifest lacks the note"; head -n 1 $PK/e7.jsonl; return 1; }
  plan_det pack-next-1r 1 "$QT_TMP/pack" 10 || return 1
  det_fields $PK/e7.jsonl > $PK/e7.det && cmp $PK/e7.det "$QT_TMP/pack/pack-next-1r.det" || return 1
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); assert c.get('eos_token_id') == 7, c.get('eos_token_id')" \
    $PK/hf/config.json || return 1
  echo "identical to pack-next-1r (eos_id 7) on the .npy: $(tail -n 1 $PK/e7.det); config.json eos_token_id 7"
}
check "packing without eos_id: the separator a QTTOKENS v2 header records == eos_id 7, bit for bit (plan.txt, note, manifest, config.json say so)" pack_file_eos

pack_file_eos_refused() {
  pk_variant && pk_v2 $PK/e9.tok 9 && pk_v2 $PK/e7.tok 7 && pk_v2 $PK/e70.tok 70 &&
    pk_v2 $PK/enone.tok 4294967295 || return 1
  local T=tests/golden/e2e/test-next-tiny/tokens.npy
  pk_fail "data=$T: packing: true needs the document separator's token id, and neither the plan (eos_id unset, -1) nor the file (.npy, raw and QTTOKENS version 1 files record none) gives it: set eos_id in the run file" \
    $PK/pack-next-1r-v/qtrain data=$T steps=1 || return 1
  pk_fail "data=$PK/e70.tok records end-of-document id 70 (its QTTOKENS header), outside the plan's vocabulary [0, 64) (vocab_size)" \
    $PK/pack-next-1r-v/qtrain data=$PK/e70.tok steps=1 || return 1
  pk_fail "data=$PK/e9.tok records end-of-document id 9 (its QTTOKENS header: the eos= it was encoded with) but the plan's eos_id is 7 (packing: true); expected the same id" \
    build/pack-next-1r/qtrain data=$PK/e9.tok steps=1 || return 1
  # the plan's eos_id over a file that records the same id, or none (eos=none): its bits
  plan_det pack-next-1r 1 "$QT_TMP/pack" 10 || return 1
  for f in e7 enone; do
    timeout 120 build/pack-next-1r/qtrain data=$PK/$f.tok seed=11 steps=10 metrics=$PK/r-$f.jsonl \
      2> $PK/r-$f.err || { tail -n 3 $PK/r-$f.err; return 1; }
    det_fields $PK/r-$f.jsonl > $PK/r-$f.det && cmp $PK/r-$f.det "$QT_TMP/pack/pack-next-1r.det" || return 1
  done
  echo "eos_id 7 on files recording 7 and none: the .npy's bits"
}
check "packing without eos_id: refused when no source gives the id or the ids disagree (naming file and key)" pack_file_eos_refused

pack_corpus_no_sep() {
  mkdir -p $PK
  plan_variant default $PK packing=true || return 1
  timeout 300 $PK/default-v/qtrain steps=20 metrics=$PK/dp.jsonl 2> $PK/dp.err || { tail -n 3 $PK/dp.err; return 1; }
  grep -F "qtrain: note: packing: no document separator, from the embedded corpus: none (byte tokens of plain text, no separator), so each window is one document (the plan has no eos_id)" \
    $PK/dp.err || { cat $PK/dp.err; return 1; }
  timeout 300 build/default/qtrain steps=20 metrics=$PK/du.jsonl 2> $PK/du.err || { tail -n 3 $PK/du.err; return 1; }
  # packing is on in the one (loss_tokens on every step line), off in the other
  [ "$(grep -c '"loss_tokens":1024' $PK/dp.jsonl)" = 20 ] && ! grep -q loss_tokens $PK/du.jsonl ||
    { echo "loss_tokens: $(grep -c loss_tokens $PK/dp.jsonl) packed lines, $(grep -c loss_tokens $PK/du.jsonl) unpacked"; return 1; }
  det_fields $PK/dp.jsonl > $PK/dp.det && det_fields $PK/du.jsonl > $PK/du.det || return 1
  cmp $PK/dp.det $PK/du.det && echo "20 steps and the eval after step 20 identical: $(tail -n 1 $PK/dp.det)"
}
check "packing: true without eos_id on the embedded corpus (make run's data): no separator, the unpacked default's bits" pack_corpus_no_sep
