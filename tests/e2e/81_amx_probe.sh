# 81_amx_probe.sh - the AMX probe (build/tools/amx-probe, docs/amx.md; sourced by run_all.sh).
# 1. The harness on any CPU: with each candidate emulation standing in for TDPBF16PS
#    (--fake), the probe must name exactly that candidate as matching and no other (so the
#    comparison can fail: a probe that counted no mismatch would name all seven), and its
#    order masks must include that candidate.
# 2. VDPBF16PS on this CPU (where it has AVX512_BF16 and the build uses it): the adapted
#    discriminating cases and 10^6 random lanes equal the project's reference under every
#    MXCSR mode; else skipped with the reason (not counted).
# 3. TDPBF16PS on this CPU: only where the CPU has AMX (CPUID, XCR0, the kernel's permission);
#    the probe must run to its verdict (what the verdict says is a finding for docs/amx.md,
#    not a pass or fail). Without AMX it is skipped with the probe's reason, not counted.
AMXP=build/tools/amx-probe

amx_fake_names_only() {
  local c=$1 out
  out=$($AMXP --fake "$c" --quick --tiles 2000 --vdp-cases 0) || { echo "exit status $?"; return 1; }
  local v
  v=$(echo "$out" | grep '^AMX verdict:')
  echo "$v"
  [ "$(echo "$v" | grep -o 'E[0-9][gf]\{0,1\} matches bit for bit on every tile run' | sort -u)" = \
    "$c matches bit for bit on every tile run" ] || return 1
  echo "$out" | grep -q "^candidates (with flag variants) equal to the hardware on every case: $c\( \|$\)" &&
    echo "$out" | grep -q "^candidates with the hardware's masks:.* $c\( \|$\)"
}
for c in E1 E2 E3 E4g E4f E5 E6; do
  check "amx-probe --fake $c: the harness names $c alone" amx_fake_names_only $c
done

# amx_probe_says PATTERN ARGS...: runs the probe with ARGS, shows its summary lines, passes
# when it exits 0 and a line matches PATTERN.
amx_probe_says() {
  local pat=$1 out; shift
  out=$($AMXP "$@") || { echo "exit status $?"; echo "$out" | tail -20; return 1; }
  echo "$out" | grep -E '^(amx-probe|AMX verdict|candidates|VDPBF16PS|  MXCSR)'
  echo "$out" | grep -q "$pat"
}
vdp_skip=$($AMXP --tiles 0 --vdp-cases 0 | grep '^VDPBF16PS: skipped')
if [ -n "$vdp_skip" ]; then
  echo "SKIP amx-probe VDPBF16PS part: ${vdp_skip#VDPBF16PS: skipped, }"
else
  check "amx-probe: VDPBF16PS equals the reference on the cases and 10^6 lanes, every MXCSR" \
    amx_probe_says '^VDPBF16PS verdict: the instruction equals the project.s reference bit for bit' \
    --tiles 0 --vdp-cases 1000000
fi

amx_none=$($AMXP --tiles 0 --vdp-cases 0 | grep '^amx-probe: no AMX')
if [ -n "$amx_none" ]; then
  echo "SKIP amx-probe on TDPBF16PS: ${amx_none#amx-probe: }"
else
  check "amx-probe on this CPU's TDPBF16PS runs to its verdict (docs/amx.md)" \
    amx_probe_says '^AMX verdict:' --quick --tiles 20000 --vdp-cases 0
fi
