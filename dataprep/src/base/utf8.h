/* utf8.h - strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. Decoding after qtd_utf8_check succeeded may use the unchecked qtd_utf8_next. */
#ifndef QTD_UTF8_H
#define QTD_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Reads s[0..n); returns n when it is valid UTF-8, else the byte offset of the first
 * invalid or truncated sequence. */
size_t qtd_utf8_check(const uint8_t *s, size_t n);

/* Decodes the code point at s[*i] of valid UTF-8 and advances *i past it. */
static inline uint32_t qtd_utf8_next(const uint8_t *s, size_t *i)
{
    uint32_t c = s[*i];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if (c < 0xE0) {
        c = (c & 0x1F) << 6 | (s[*i + 1] & 0x3F);
        *i += 2;
    } else if (c < 0xF0) {
        c = (c & 0x0F) << 12 | (uint32_t)(s[*i + 1] & 0x3F) << 6 | (s[*i + 2] & 0x3F);
        *i += 3;
    } else {
        c = (c & 0x07) << 18 | (uint32_t)(s[*i + 1] & 0x3F) << 12 | (uint32_t)(s[*i + 2] & 0x3F) << 6 |
            (s[*i + 3] & 0x3F);
        *i += 4;
    }
    return c;
}

/* Writes the UTF-8 of cp (< 0x110000, not a surrogate) to out (room for 4); returns its length. */
int qtd_utf8_put(uint32_t cp, uint8_t *out);

#endif
