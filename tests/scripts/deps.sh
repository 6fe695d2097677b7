#!/usr/bin/env bash
# deps.sh - install the Debian packages qtrain needs, only those that are missing.
# Silent and quick (one dpkg query) when everything is present.
# `deps.sh bench` (make bench, bench-slice) adds what the bench compares against: Debian's
# python3-torch (it installs for /usr/bin/python3, which the bench scripts call; the first
# python3 on PATH may be another) and OpenBLAS (libopenblas0-pthread: torch calls the system
# libblas.so.3, and on the reference BLAS the baseline would run ~10x slower), then checks
# that /usr/bin/python3 imports torch. make test needs neither (its goldens are committed).
set -euo pipefail
# clang + libclang-rt-14-dev: the libFuzzer targets (make fuzz, make test); Debian's clang 14
# keeps libFuzzer's runtime (libclang_rt.fuzzer-x86_64.a) in libclang-rt-14-dev.
# python3: the structure check (tests/scripts/structure.py) and the bad-inputs table.
pkgs=(gcc g++ make mpich libmpich-dev musl-tools libhugetlbfs-dev libhugetlbfs-bin cpputest pkg-config gnuplot-nox
      clang libclang-rt-14-dev python3)
# mawk: Debian's default awk; the scripts are written for it (tests/e2e/06_bench_report.sh
# runs the bench reports under it).
pkgs+=(mawk)
# unicode-data: the Unicode tables of qtrain-data are generated from its files at build time.
pkgs+=(unicode-data)
# nodejs + npm: the Hugging Face tokenizers oracle (tests/tokenizer/), only when the commands are missing.
command -v node > /dev/null || pkgs+=(nodejs)
command -v npm > /dev/null || pkgs+=(npm)
bench=0
case "${1:-}" in
  "") ;;
  bench) bench=1; pkgs+=(python3-torch libopenblas0-pthread) ;;
  *) echo "usage: deps.sh [bench]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ $bench = 1 ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "deps: python3-torch is installed but /usr/bin/python3 cannot import torch:" >&2
  /usr/bin/python3 -c 'import torch' >&2 || true
  exit 1
fi
exit 0
