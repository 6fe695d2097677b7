#!/usr/bin/env bash
# deps.sh - install the Debian packages qtrain needs, only those that are missing.
# Silent and quick (one dpkg query) when everything is present.
set -euo pipefail
# clang + libclang-rt-14-dev: the libFuzzer targets (make fuzz, make test); Debian's clang 14
# keeps libFuzzer's runtime (libclang_rt.fuzzer-x86_64.a) in libclang-rt-14-dev.
# python3: the structure check (tests/scripts/structure.py) and the bad-inputs table.
pkgs=(gcc g++ make mpich libmpich-dev musl-tools libhugetlbfs-dev libhugetlbfs-bin cpputest pkg-config gnuplot-nox
      clang libclang-rt-14-dev python3)
# unicode-data: the Unicode tables of qtrain-data are generated from its files at build time.
pkgs+=(unicode-data)
# nodejs + npm: the Hugging Face tokenizers oracle (tests/tokenizer/), only when the commands are missing.
command -v node > /dev/null || pkgs+=(nodejs)
command -v npm > /dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
