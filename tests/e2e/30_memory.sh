# 30_memory.sh - the memory contract of docs/design.md section 7 (sourced by run_all.sh).
no_heap_in_steps() {
  local out=$QT_TMP/heap.txt
  LD_PRELOAD=$PWD/build/tools/libheap_audit.so build/test-next-tiny/qtrain steps=3 \
      data=tests/golden/e2e/test-next-tiny/tokens.npy metrics=$QT_TMP/heap.jsonl 2> $out
  local rc=$?
  cat $out
  # the whole line: the audit appends "(steps were never marked)" when the runtime's hook
  # did not fire, which must not count as a pass
  [ $rc -eq 0 ] && grep -qx 'heap audit: 0 allocation calls during steps' $out
}
check "no heap allocation during training steps (malloc interposed)" no_heap_in_steps

generated_up_to_date() {
  local d=$QT_TMP/gen
  mkdir -p $d
  for f in configgen/configs/runs/*.yml; do build/configgen/configgen -o $d $f > /dev/null || return 1; done
  diff -r generated $d || return 1
  # generated/ is build output; git tracks only the plan.txt of the shipped runs (.gitignore).
  # `make` regenerates generated/ before the tests run, so on a checkout the committed
  # plan.txt files must equal what it wrote: a stale commit shows up as a difference here.
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    local tracked
    tracked=$(git ls-files -- generated)
    [ -n "$tracked" ] || { echo "no plan.txt of generated/ is tracked"; return 1; }
    echo "$tracked" | grep -v '^generated/[^/]*/plan\.txt$' && { echo "tracked files in generated/ other than plan.txt"; return 1; }
    git diff --stat --exit-code HEAD -- generated || { echo "a committed plan.txt differs from configgen's output: run make gen and commit"; return 1; }
    [ -z "$(git ls-files --others --exclude-standard -- generated)" ] || { echo "untracked, unignored files in generated/"; return 1; }
    echo "$(echo "$tracked" | wc -l) committed plan.txt files match configgen's output"
  fi
}
check "generated/ matches what configgen produces now, and the committed plan.txt files match it" generated_up_to_date

# `make test` built everything just before: a second make must have nothing to do (it used
# to regenerate the plans, compiled before configgen was linked, and relink every binary).
make_is_noop() {
  env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -q all && echo "make -q all: up to date" \
    || { echo "make would rebuild:"; env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -n all | head -5; return 1; }
}
check "a second make after the build has nothing to do" make_is_noop

# Peak RSS of the musl static build of the default run. Bound: the arena is prefaulted at
# start-up so all of it is resident, plus the file-backed image (text + data); the 5% of the
# arena absorbs huge-page rounding and the kernel's accounting of the page tables, and 4 MiB
# covers the stack, the touched part of the static buffers (matmul panels, metrics buffer)
# and libc. Anything beyond that means memory the static plan does not account for (a heap
# that grows, a second copy of a region, a buffer touched that should not be).
peak_rss_within_arena() {
  local out=$QT_TMP/rss-static.txt
  build/default/qtrain-static steps=2 metrics=$QT_TMP/rss.jsonl 2> $out || { cat $out; return 1; }
  local line
  line=$(grep 'qtrain: peak RSS' $out) || { cat $out; echo "no peak RSS line"; return 1; }
  echo "musl static: $line"
  local line_g
  line_g=$(build/default/qtrain steps=2 2>&1 | grep 'qtrain: peak RSS')
  echo "glibc (MPICH, dynamic; not asserted): $line_g"
  echo "$line" | awk '{ rss=$4; arena=$7; bin=$10; bound=arena+bin+0.05*arena+4;
      printf "peak %.1f MiB, bound arena %.1f + binary %.1f + 5%% arena + 4 = %.1f MiB\n", rss, arena, bin, bound;
      exit !(rss > 0 && arena > 0 && rss <= bound) }'
}
check "peak RSS of the musl static default run <= arena + binary + 5% arena + 4 MiB" peak_rss_within_arena

# arena_pages=auto (the default: transparent huge pages until the kernel's compaction for
# them is too slow, then 4 KiB pages) and arena_pages=huge (huge pages however long it
# takes) train the same bits; the page size is never part of the result.
arena_pages_same_bits() {
  local d=$QT_TMP/arena_pages
  mkdir -p $d
  build/default/qtrain steps=3 arena_pages=huge metrics=$d/huge.jsonl 2> $d/huge.err || { cat $d/huge.err; return 1; }
  build/default/qtrain steps=3 arena_pages=auto metrics=$d/auto.jsonl 2> $d/auto.err || { cat $d/auto.err; return 1; }
  ! grep -q "of the arena on 4 KiB pages" $d/huge.err || { echo "arena_pages=huge gave up huge pages:"; cat $d/huge.err; return 1; }
  det_fields $d/huge.jsonl > $d/huge.det && det_fields $d/auto.jsonl > $d/auto.det || return 1
  cmp $d/huge.det $d/auto.det && head -1 $d/auto.err
}
check "arena_pages=huge and arena_pages=auto: the same bits" arena_pages_same_bits

# Huge pages: with 2 MiB pages reserved the arena is remapped onto them (the banner says
# hugetlbfs) and training gives the same bits as on transparent huge pages. Needs root to
# reserve pages for the duration of the check (restored afterwards); skipped otherwise.
hugetlb_same_bits() {
  local d=$QT_TMP/hugetlb nr=/proc/sys/vm/nr_hugepages old
  mkdir -p $d
  old=$(cat $nr)
  echo $((old + 48)) > $nr 2>/dev/null || { echo "cannot reserve huge pages"; return 1; }
  local free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
  build/default/qtrain steps=3 metrics=$d/huge.jsonl 2> $d/huge.err; local rc=$?
  echo $old > $nr
  [ $rc -eq 0 ] || { cat $d/huge.err; return 1; }
  if [ "${free:-0}" -lt 41 ]; then echo "only $free huge pages could be reserved: not a test of hugetlbfs"; return 0; fi
  grep -q "on hugetlbfs pages" $d/huge.err || { echo "arena not on hugetlbfs:"; head -1 $d/huge.err; return 1; }
  build/default/qtrain steps=3 metrics=$d/thp.jsonl 2> $d/thp.err || return 1
  det_fields $d/huge.jsonl > $d/huge.det && det_fields $d/thp.jsonl > $d/thp.det || return 1
  cmp $d/huge.det $d/thp.det && head -1 $d/huge.err
}
if [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/nr_hugepages ] && [ "$(cat /proc/sys/vm/nr_hugepages)" = 0 ]; then
  check "hugetlbfs-backed arena when pages are reserved, same bits as THP" hugetlb_same_bits
else
  echo "SKIP hugetlbfs check: needs root and no pages already reserved"
fi
