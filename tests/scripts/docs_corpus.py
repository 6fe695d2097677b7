#!/usr/bin/env python3
# docs_corpus.py - a text corpus that every checkout has: README.md and docs/*.md cut at their
# "## " headings, one JSON-lines document ({"text": ...}) per section, in file order
# (README.md first). tests/e2e/59_text_run.sh tokenizes it for text-qwen, and docs/data.md
# "Packing on text" measures packing on it. Usage: docs_corpus.py OUT.jsonl (from the
# project root); prints the number of documents and bytes.
import glob, json, sys

if len(sys.argv) != 2:
    sys.exit("usage: docs_corpus.py OUT.jsonl")
docs = []
for path in ["README.md"] + sorted(glob.glob("docs/*.md")):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    section = []
    for line in text.splitlines(keepends=True):
        if line.startswith("## ") and section:
            docs.append("".join(section))
            section = []
        section.append(line)
    if section:
        docs.append("".join(section))
docs = [d for d in docs if d.strip()]
if not docs:
    sys.exit("docs_corpus.py: no text found in README.md and docs/*.md")
with open(sys.argv[1], "w", encoding="utf-8") as out:
    for d in docs:
        out.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
print(f"{len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes -> {sys.argv[1]}")
