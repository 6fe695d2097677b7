/* added.h - finding added tokens in text (added.c), for encode.c. */
#ifndef QTD_ADDED_H
#define QTD_ADDED_H

#include "tokenizer.h"

/* Finds the next added token whose `normalized` flag equals `normalized` in valid UTF-8
 * s[from..n): leftmost, then longest; a single_word token only between non-word code points
 * (word = \w of Rust's regex crate: Alphabetic, marks, Nd, Pc, Join_Control); lstrip/rstrip widen the match over white space (lstrip
 * not before `from`). Returns 1 and sets *start, *end, *id, or 0 when there is none. */
int qtd_added_find(const qtd_tok *t, const uint8_t *s, size_t n, size_t from, int normalized, size_t *start,
                   size_t *end, uint32_t *id);

#endif
