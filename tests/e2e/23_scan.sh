# 23_scan.sh - scan_layers (sourced by run_all.sh): a plan whose repeated layer cycles are
# stored once and run in a loop (configgen/src/schedule/scan.c, qt_plan.h qt_scan) trains the
# same bits as the unrolled plan, on one rank and on DP2 x EP2 with every per-layer op kind
# inside the scanned blocks (per-layer gradient reduce-scatters, weight gathers, remat
# copies, expert dispatch); plan.txt reports both table sizes. 16-layer tiny models: four
# layer cycles, so the forward scans three and the backward two (the cycles next to the
# embedding and the head differ and stay unrolled). Every mpiexec runs under timeout.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

sc_det() {   # sc_det PLAN RANKS: 8 steps, the step / loss bits / fingerprint lines
  plan_det "$1" "$2" "$QT_TMP/scan" 8
}

# sc_same SCANNED RANKS BASE BASE_RANKS: SCANNED stores scanned blocks, and its 8 steps are
# BASE's bit for bit
sc_same() {
  local d=$QT_TMP/scan
  grep -q "scanned block 0: .* run [2-9] times" generated/$1/plan.txt || { echo "$1 scans nothing"; return 1; }
  sc_det "$1" "$2" && sc_det "$3" "$4" || return 1
  cmp "$d/$1.det" "$d/$3.det" && echo "8 steps identical: $(tail -n 1 "$d/$1.det")"
}

for m in next 35; do
  check "scan: $m 16 layers, one rank: scan_layers true == false, 8 steps, bit for bit" \
    sc_same scan-$m-16l-scan 1 scan-$m-16l-unrolled 1
  check "scan: $m 16 layers, DP2 x EP2 G2 ZeRO-1, per-layer gathers, remat full: scanned == unrolled" \
    sc_same scan-$m-16l-dp2ep2-scan 4 scan-$m-16l-dp2ep2-unrolled 4
  check "scan: $m 16 layers, the scanned DP2 x EP2 plan == one rank, batch 8" \
    sc_same scan-$m-16l-dp2ep2-scan 4 scan-$m-16l-1r-b8 1
done

sc_tables() {
  # plan.txt gives the unrolled and the stored table sizes; the stored one is smaller
  local p=generated/scan-next-16l-dp2ep2-scan/plan.txt u s
  u=$(awk '/tables \(in the binary\), every layer unrolled/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes") print $i }' $p)
  s=$(awk '/tables as stored \(scan_layers\)/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes") print $i }' $p)
  grep -E "tables|scanned block" $p
  [ -n "$u" ] && [ -n "$s" ] && [ "$s" -lt "$u" ] || { echo "stored $s bytes, unrolled $u"; return 1; }
  grep -q "tables as stored: unrolled (scan_layers false)" generated/scan-next-16l-dp2ep2-unrolled/plan.txt
}
check "scan: plan.txt reports the unrolled and the scanned table sizes (scanned smaller)" sc_tables
