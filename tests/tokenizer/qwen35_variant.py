#!/usr/bin/env python3
"""qwen35_variant.py - writes the Qwen3 tokenizer.json with its Split pattern replaced by the
Qwen3.5 one (\\p{M} joins the letters of the second alternative and the negated class of the
fourth), so the Hugging Face engine can be the oracle of qtrain-data's Qwen3.5 matcher too.

  qwen35_variant.py QWEN3_TOKENIZER.json OUT.json"""
import json
import sys

QWEN3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

with open(sys.argv[1], encoding="utf-8") as f:
    t = json.load(f)
split = t["pre_tokenizer"]["pretokenizers"][0]
if split["pattern"]["Regex"] != QWEN3:
    sys.exit(f"{sys.argv[1]}: the Split pattern is not the Qwen3 one")
split["pattern"]["Regex"] = QWEN35
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(t, f, ensure_ascii=False)
