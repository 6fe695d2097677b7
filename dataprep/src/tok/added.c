/* added.c - the added-token scan of encode (added.h), as Hugging Face's added vocabulary
 * splits the input before normalisation (tokens with normalized false) and after it
 * (normalized true). Invariant: a match never starts before `from`, and [start, end) always
 * covers the token's content. */
#include <string.h>

#include "../base/utf8.h"
#include "../unicode/ucd.h"
#include "added.h"

/* Hugging Face tests single_word with the regex \w (Rust's regex crate) */
static int is_word_cp(uint32_t cp)
{
    return qtd_uc_flags(cp) & QTD_UC_WORD;
}

/* the code point that ends s[0..i) (i > 0) */
static uint32_t cp_before(const uint8_t *s, size_t i)
{
    size_t k = i - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80)
        k--;
    return qtd_utf8_next(s, &k);
}

static int single_word_ok(const uint8_t *s, size_t n, size_t st, size_t en)
{
    if (st > 0 && is_word_cp(cp_before(s, st)))
        return 0;
    size_t k = en;
    return !(en < n && is_word_cp(qtd_utf8_next(s, &k)));
}

static void strip(const uint8_t *s, size_t n, size_t from, const qtd_added *a, size_t *st, size_t *en)
{
    if (a->lstrip)
        while (*st > from && (qtd_uc_flags(cp_before(s, *st)) & QTD_UC_WS)) {
            size_t k = *st - 1;
            while (k > from && (s[k] & 0xC0) == 0x80)
                k--;
            *st = k;
        }
    if (a->rstrip)
        while (*en < n) {
            size_t k = *en;
            if (!(qtd_uc_flags(qtd_utf8_next(s, &k)) & QTD_UC_WS))
                break;
            *en = k;
        }
}

int qtd_added_find(const qtd_tok *t, const uint8_t *s, size_t n, size_t from, int normalized, size_t *start,
                   size_t *end, uint32_t *id)
{
    const uint8_t *fb = t->first_byte[normalized ? 1 : 0];
    for (size_t p = from; p < n; p++) {
        if (!fb[s[p]])
            continue;
        const qtd_added *best = NULL;
        for (uint32_t k = 0; k < t->nadded; k++) {
            const qtd_added *a = &t->added[k];
            if (a->normalized == !!normalized && a->len <= n - p && (!best || a->len > best->len) &&
                !memcmp(s + p, t->pool.data + a->off, a->len))
                best = a;
        }
        if (!best || (best->single_word && !single_word_ok(s, n, p, p + best->len)))
            continue;
        *start = p;
        *end = p + best->len;
        strip(s, n, from, best, start, end);
        *id = best->id;
        return 1;
    }
    return 0;
}
