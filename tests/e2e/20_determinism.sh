# 20_determinism.sh - the determinism contract of docs/design.md section 6 (sourced by run_all.sh).
#
# All comparisons are bit-exact: loss bits and the parameter fingerprint of every step.
# det_fields (tests/scripts/run_all.sh) gives "step loss_bits fingerprint" per metrics line.

accum_invariance() {
  local d=$QT_TMP/accum data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  for r in test-accum-b4g1 test-accum-b2g2 test-accum-b1g4; do
    build/$r/qtrain data=$data steps=5 seed=7 metrics=$d/$r.jsonl || return 1
    det_fields $d/$r.jsonl > $d/$r.det || return 1
    [ "$(wc -l < $d/$r.det)" -eq 5 ] || { echo "$r: expected 5 metrics lines"; return 1; }
  done
  cmp $d/test-accum-b4g1.det $d/test-accum-b2g2.det && cmp $d/test-accum-b4g1.det $d/test-accum-b1g4.det \
    && echo "identical: $(head -c 300 $d/test-accum-b4g1.det)"
}
check "accumulation invariance: b=4,G=1 == b=2,G=2 == b=1,G=4 (bit-identical losses and params)" accum_invariance

accum_invariance_6() {
  # 6 leaves: not a power of two, so the tree levels are combined by the general path
  local d=$QT_TMP/accum6 data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  for r in test-accum-b6g1 test-accum-b3g2; do
    build/$r/qtrain data=$data steps=5 seed=7 metrics=$d/$r.jsonl || return 1
    det_fields $d/$r.jsonl > $d/$r.det || return 1
  done
  cmp $d/test-accum-b6g1.det $d/test-accum-b3g2.det && echo "identical: $(head -c 300 $d/test-accum-b6g1.det)"
}
check "accumulation invariance with 6 leaves: b=6,G=1 == b=3,G=2" accum_invariance_6

accum_invariance_8() {
  # 8 leaves: the one-rank tree carries past level 2 (leaf 7 adds levels 0, 1 and 2 into
  # level 3), for 8 leaves in one microbatch (b=8), spread over 4 (b=2) or 8 (b=1)
  # microbatches. The same bits as zero1-next-dp2-b8 (same schedule: steps 20), where each
  # of 2 ranks sums 4 leaves (carries to level 2 only) and the ranks are combined by
  # recursive halving: so a wrong deep carry cannot pass by being wrong the same way in
  # every one-rank split.
  local d=$QT_TMP/accum8 data=tests/golden/e2e/test-next-tiny/tokens.npy r
  mkdir -p "$d"
  for r in test-accum-b8g1 test-accum-b2g4 test-accum-b1g8; do
    build/$r/qtrain data=$data steps=5 seed=7 metrics=$d/$r.jsonl || return 1
    det_fields $d/$r.jsonl > $d/$r.det || return 1
    [ "$(wc -l < $d/$r.det)" -eq 5 ] || { echo "$r: expected 5 metrics lines"; return 1; }
  done
  timeout 120 mpiexec -n 2 build/zero1-next-dp2-b8/qtrain data=$data steps=5 seed=7 \
      metrics=$d/dp2.jsonl || return 1
  det_fields $d/dp2.jsonl > $d/dp2.det || return 1
  for r in test-accum-b2g4 test-accum-b1g8 dp2; do
    cmp $d/test-accum-b8g1.det $d/$r.det || { echo "b=8,G=1 and $r differ"; return 1; }
  done
  echo "identical: $(head -c 300 $d/test-accum-b8g1.det)"
}
check "accumulation invariance with 8 leaves: b=8,G=1 == b=2,G=4 == b=1,G=8 == DP2 b=4 (tree carries past level 2)" accum_invariance_8

run_to_run() {
  local d=$QT_TMP/r2r
  mkdir -p "$d"
  for i in 1 2; do
    build/test-next-tiny/qtrain steps=4 seed=3 data=tests/golden/e2e/test-next-tiny/tokens.npy \
        metrics=$d/m$i.jsonl save=$d/ck$i.safetensors || return 1
    det_fields $d/m$i.jsonl > $d/m$i.det || return 1
  done
  cmp $d/m1.det $d/m2.det && cmp $d/ck1.safetensors $d/ck2.safetensors || return 1
  # negative control: another seed must change the fingerprints, or the comparison is blind
  build/test-next-tiny/qtrain steps=4 seed=4 data=tests/golden/e2e/test-next-tiny/tokens.npy \
      metrics=$d/m3.jsonl || return 1
  det_fields $d/m3.jsonl > $d/m3.det || return 1
  ! cmp -s $d/m1.det $d/m3.det || { echo "seed 3 and seed 4 gave identical fingerprints"; return 1; }
}
check "run-to-run: metrics bits and checkpoint bytes identical" run_to_run

musl_vs_glibc() {
  local d=$QT_TMP/musl data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  build/test-next-tiny/qtrain steps=4 seed=5 data=$data metrics=$d/glibc.jsonl || return 1
  build/test-next-tiny/qtrain-static steps=4 seed=5 data=$data metrics=$d/musl.jsonl || return 1
  # static: no program interpreter and no dynamic section (readelf ships with binutils)
  readelf -l build/test-next-tiny/qtrain-static | grep -q INTERP && { echo "qtrain-static is not static"; return 1; }
  det_fields $d/glibc.jsonl > $d/g.det && det_fields $d/musl.jsonl > $d/m.det || return 1
  cmp $d/g.det $d/m.det
}
check "musl static build == glibc MPICH build, bit for bit" musl_vs_glibc

resume_exact() {
  local d=$QT_TMP/resume data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  build/test-next-tiny/qtrain steps=6 seed=9 data=$data metrics=$d/full.jsonl || return 1
  build/test-next-tiny/qtrain steps=3 seed=9 data=$data metrics=$d/a.jsonl save=$d/ck.safetensors || return 1
  build/test-next-tiny/qtrain steps=6 load=$d/ck.safetensors data=$data metrics=$d/b.jsonl || return 1
  det_fields $d/full.jsonl > $d/full.det || return 1
  cat $d/a.jsonl $d/b.jsonl > $d/ab.jsonl; det_fields $d/ab.jsonl > $d/ab.det || return 1
  [ "$(wc -l < $d/ab.det)" -eq 6 ] || { echo "resumed run: expected 3 + 3 metrics lines"; return 1; }
  cmp $d/full.det $d/ab.det
}
check "resume from checkpoint is bit-exact (3 + 3 steps == 6 steps)" resume_exact

isa_independent() {
  # The same plan built for AVX2 (x86-64-v3, the oldest target with FMA) instead of the
  # native AVX-512 build: the kernels' vector paths keep each element's operation order, so
  # the bits must not change.
  local d=$QT_TMP/isa data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  # -o: the committed plan as it is; a fresh configgen in $d/build would be newer than it
  # and regenerate generated/ (then the main build would rebuild on the next make)
  make --no-print-directory -j2 BUILD=$d/build ARCH=-march=x86-64-v3 -o generated/test-next-tiny/plan.c \
    $d/build/test-next-tiny/qtrain > $d/make.log 2>&1 \
    || { tail -20 $d/make.log; return 1; }
  build/test-next-tiny/qtrain steps=4 seed=11 data=$data metrics=$d/native.jsonl || return 1
  $d/build/test-next-tiny/qtrain steps=4 seed=11 data=$data metrics=$d/v3.jsonl || return 1
  det_fields $d/native.jsonl > $d/native.det && det_fields $d/v3.jsonl > $d/v3.det || return 1
  cmp $d/native.det $d/v3.det && echo "x86-64-v3 == native: $(head -c 200 $d/v3.det)"
}
check "ISA independence: an x86-64-v3 (AVX2) build gives the native build's bits" isa_independent
