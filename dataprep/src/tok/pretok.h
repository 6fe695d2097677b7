/* pretok.h - the Split pre-tokenizer of the Qwen family, matched by hand. The two patterns
 * (exact strings in pretok.c) are the Qwen2/Qwen3 one
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * and the Qwen3.5 one, which reads [\p{L}\p{M}]+ for \p{L}+ and adds \p{M} to the negated
 * class of the fourth alternative. Behaviour "Isolated": every match is a piece; since one
 * of the alternatives matches at every position, the pieces tile the text. */
#ifndef QTD_PRETOK_H
#define QTD_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum { QTD_PAT_NONE = 0, QTD_PAT_QWEN3 = 1, QTD_PAT_QWEN35 = 2 };

/* QTD_PAT_QWEN3 or QTD_PAT_QWEN35 when `pattern` (len bytes, the decoded JSON string) is
 * exactly one of the two patterns, else QTD_PAT_NONE. */
int qtd_pretok_pattern(const char *pattern, size_t len);
/* The pattern string of a QTD_PAT_* value (for messages and tests). */
const char *qtd_pretok_pattern_text(int pat);

/* The end (byte offset) of the piece that starts at s[i], 0 <= i < n, in valid UTF-8
 * s[0..n), under pattern `pat`. Reads s only. */
size_t qtd_pretok_next(const uint8_t *s, size_t n, size_t i, int pat);

#endif
