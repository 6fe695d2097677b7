# 30_memory.sh - the memory contract of design.md section 7 (sourced by run_all.sh).
no_heap_in_steps() {
  local out=$QT_TMP/heap.txt
  LD_PRELOAD=$PWD/build/tools/libheap_audit.so build/test-next-tiny/qtrain steps=3 \
      data=tests/golden/e2e/test-next-tiny/tokens.npy metrics=$QT_TMP/heap.jsonl 2> $out
  local rc=$?
  cat $out
  [ $rc -eq 0 ] && grep -q 'heap audit: 0 allocation calls during steps' $out
}
check "no heap allocation during training steps (malloc interposed)" no_heap_in_steps

generated_up_to_date() {
  local d=$QT_TMP/gen
  mkdir -p $d
  for f in configgen/configs/runs/*.yml; do build/configgen/configgen -o $d $f > /dev/null || return 1; done
  diff -r generated $d
}
check "generated/ matches what configgen produces now" generated_up_to_date
