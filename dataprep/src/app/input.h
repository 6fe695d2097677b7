/* input.h - the documents of one INPUT of `qtrain-data encode`: a text file (one
 * document), a JSON-lines file (named .jsonl, .ndjson or .json, any case: one document per
 * non-blank line, the string member `field` of the line's object) or "-" (standard input, one
 * document). A JSON line starting with a UTF-8 byte-order mark is refused (as Python's
 * json.loads refuses it); in a text document the mark is content (kept, with a note). */
#ifndef QTD_INPUT_H
#define QTD_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* Called once per document with its valid UTF-8 bytes; `done` is the number of input bytes
 * consumed so far and `total` the input's size (0 for stdin). Returns 0 or -1 to stop. */
typedef int (*qtd_doc_fn)(void *ctx, const uint8_t *doc, size_t n, size_t done, size_t total);

/* 1 when `path` is read as JSON lines (by its name), else 0 (plain text, one document). */
int qtd_input_is_jsonl(const char *path);

/* Reads INPUT `path`, calls fn per document. Returns 0, or -1 with a message naming the file
 * and line (and byte offset for invalid UTF-8) and what was expected. */
int qtd_input_each(const char *path, const char *field, qtd_doc_fn fn, void *ctx);

#endif
