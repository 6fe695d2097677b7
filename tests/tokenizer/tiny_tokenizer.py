#!/usr/bin/env python3
"""tiny_tokenizer.py - writes a small Qwen-style tokenizer.json (the 256 byte tokens, "ab" from
one merge, <|endoftext|> as added token 257) for the bad-input checks of qtrain-data, which must
not depend on the npm oracle.

  tiny_tokenizer.py OUT.json [PATTERN]    (PATTERN: the Split regex, default the Qwen3 one)"""
import json
import sys

QWEN3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def byte_char(b):
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in keep:
        return chr(b)
    return chr(0x100 + [x for x in range(256) if x not in keep].index(b))


vocab = {byte_char(b): b for b in range(256)}
vocab["ab"] = 256
tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": 257, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
                         "normalized": False, "special": True}],
       "normalizer": {"type": "NFC"},
       "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
           {"type": "Split", "pattern": {"Regex": sys.argv[2] if len(sys.argv) > 2 else QWEN3}, "behavior": "Isolated",
            "invert": False},
           {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": ["a b"]}}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
