#!/usr/bin/env bash
# deps.sh - install the Debian packages qtrain needs, only those that are missing.
# Silent and quick (one dpkg query) when everything is present.
set -euo pipefail
pkgs=(gcc g++ make mpich libmpich-dev musl-tools libhugetlbfs-dev libhugetlbfs-bin cpputest pkg-config gnuplot-nox)
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
