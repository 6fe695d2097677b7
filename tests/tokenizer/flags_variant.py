#!/usr/bin/env python3
"""flags_variant.py - writes the Qwen3 tokenizer.json with the added-token flags the Qwen files
leave false turned on for a few tokens (<|im_start|> lstrip; <|im_end|> rstrip; <think>
single_word; </think> lstrip and rstrip; <tool_call> normalized), so the Hugging Face engine is
the oracle of qtrain-data's handling of those flags too.

  flags_variant.py QWEN3_TOKENIZER.json OUT.json"""
import json
import sys

FLAGS = {"<|im_start|>": ["lstrip"], "<|im_end|>": ["rstrip"], "<think>": ["single_word"],
         "</think>": ["lstrip", "rstrip"], "<tool_call>": ["normalized"]}
with open(sys.argv[1], encoding="utf-8") as f:
    t = json.load(f)
seen = 0
for a in t["added_tokens"]:
    for flag in FLAGS.get(a["content"], []):
        a[flag] = True
        seen += 1
if seen != 6:
    sys.exit(f"{sys.argv[1]}: expected the Qwen3 added tokens")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(t, f, ensure_ascii=False)
