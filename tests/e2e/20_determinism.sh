# 20_determinism.sh - the determinism contract of design.md section 6 (sourced by run_all.sh).
#
# All comparisons are bit-exact: loss bits and the parameter fingerprint of every step.
det_fields() { grep -o '"step":[0-9]*\|"loss_bits":"[^"]*"\|"fingerprint":"[^"]*"' "$1" | paste -sd' ' ; }

accum_invariance() {
  local d=$QT_TMP/accum data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  for r in test-accum-b4g1 test-accum-b2g2 test-accum-b1g4; do
    build/$r/qtrain data=$data steps=5 seed=7 metrics=$d/$r.jsonl || return 1
    det_fields $d/$r.jsonl > $d/$r.det
  done
  cmp $d/test-accum-b4g1.det $d/test-accum-b2g2.det && cmp $d/test-accum-b4g1.det $d/test-accum-b1g4.det \
    && echo "identical: $(cat $d/test-accum-b4g1.det | head -c 300)"
}
check "accumulation invariance: b=4,G=1 == b=2,G=2 == b=1,G=4 (bit-identical losses and params)" accum_invariance

run_to_run() {
  local d=$QT_TMP/r2r
  mkdir -p "$d"
  for i in 1 2; do
    build/test-next-tiny/qtrain steps=4 seed=3 data=tests/golden/e2e/test-next-tiny/tokens.npy \
        metrics=$d/m$i.jsonl save=$d/ck$i.safetensors || return 1
    det_fields $d/m$i.jsonl > $d/m$i.det
  done
  cmp $d/m1.det $d/m2.det && cmp $d/ck1.safetensors $d/ck2.safetensors
}
check "run-to-run: metrics bits and checkpoint bytes identical" run_to_run

musl_vs_glibc() {
  local d=$QT_TMP/musl data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  build/test-next-tiny/qtrain steps=4 seed=5 data=$data metrics=$d/glibc.jsonl || return 1
  build/test-next-tiny/qtrain-static steps=4 seed=5 data=$data metrics=$d/musl.jsonl || return 1
  file build/test-next-tiny/qtrain-static | grep -q 'statically linked' || { echo "qtrain-static is not static"; return 1; }
  det_fields $d/glibc.jsonl > $d/g.det; det_fields $d/musl.jsonl > $d/m.det
  cmp $d/g.det $d/m.det
}
check "musl static build == glibc MPICH build, bit for bit" musl_vs_glibc

resume_exact() {
  local d=$QT_TMP/resume data=tests/golden/e2e/test-next-tiny/tokens.npy
  mkdir -p "$d"
  build/test-next-tiny/qtrain steps=6 seed=9 data=$data metrics=$d/full.jsonl || return 1
  build/test-next-tiny/qtrain steps=3 seed=9 data=$data metrics=$d/a.jsonl save=$d/ck.safetensors || return 1
  build/test-next-tiny/qtrain steps=6 load=$d/ck.safetensors data=$data metrics=$d/b.jsonl || return 1
  det_fields $d/full.jsonl > $d/full.det
  cat $d/a.jsonl $d/b.jsonl > $d/ab.jsonl; det_fields $d/ab.jsonl > $d/ab.det
  cmp $d/full.det $d/ab.det
}
check "resume from checkpoint is bit-exact (3 + 3 steps == 6 steps)" resume_exact
