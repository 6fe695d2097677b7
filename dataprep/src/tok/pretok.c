/* pretok.c - the hand-made matcher of the two Qwen Split patterns (pretok.h). At position i
 * it tries the seven alternatives in order, as a backtracking regex engine (leftmost-first)
 * does, with the same greedy results:
 *   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)    case-insensitive as Oniguruma's simple case folding:
 *                                     U+017F LATIN SMALL LETTER LONG S folds to s
 *   2 [^\r\n\p{L}\p{N}]?LET+          LET = \p{L} (Qwen3) or [\p{L}\p{M}] (Qwen3.5)
 *   3 \p{N}                           one code point
 *   4  ?[^\s\p{L}\p{N}]+[\r\n]*       (Qwen3.5: also not \p{M})
 *   5 \s*[\r\n]+                      ends after the last \r or \n of the white-space run
 *   6 \s+(?!\S)                       the white-space run, less its last code point unless
 *                                     the run ends the text
 *   7 \s+
 * Invariant: the result is > i (some alternative always matches a code point or more). */
#include "pretok.h"

#include <string.h>

#include "../base/utf8.h"
#include "../unicode/ucd.h"

static const char PAT_QWEN3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int qtd_pretok_pattern(const char *pattern, size_t len)
{
    if (len == sizeof PAT_QWEN3 - 1 && !memcmp(pattern, PAT_QWEN3, len))
        return QTD_PAT_QWEN3;
    if (len == sizeof PAT_QWEN35 - 1 && !memcmp(pattern, PAT_QWEN35, len))
        return QTD_PAT_QWEN35;
    return QTD_PAT_NONE;
}

const char *qtd_pretok_pattern_text(int pat)
{
    return pat == QTD_PAT_QWEN35 ? PAT_QWEN35 : PAT_QWEN3;
}

/* flags of the code point at s[i] (i < n); *next = the offset after it */
static inline unsigned cls(const uint8_t *s, size_t i, size_t *next)
{
    *next = i;
    return qtd_uc_flags(qtd_utf8_next(s, next));
}

/* end of the run of code points from i whose flags meet `want` (any bit) */
static size_t run_of(const uint8_t *s, size_t n, size_t i, unsigned want)
{
    while (i < n) {
        size_t j;
        if (s[i] < 0x80) {   /* ASCII: letters and digits only (no ASCII mark) */
            unsigned c = s[i];
            unsigned f = ((c | 32) >= 'a' && (c | 32) <= 'z') ? QTD_UC_L : (c >= '0' && c <= '9') ? QTD_UC_N : 0;
            if (!(f & want))
                return i;
            i++;
            continue;
        }
        if (!(cls(s, i, &j) & want))
            return i;
        i = j;
    }
    return n;
}

/* end of the run of code points from i whose flags meet none of `avoid` */
static size_t run_not(const uint8_t *s, size_t n, size_t i, unsigned avoid)
{
    size_t j;
    while (i < n && !(cls(s, i, &j) & avoid))
        i = j;
    return i;
}

/* 1: after the apostrophe at j, a contraction's end or 0 */
static size_t contraction(const uint8_t *s, size_t n, size_t j)
{
    if (j >= n)
        return 0;
    unsigned a = s[j] | 32, b = j + 1 < n ? (s[j + 1] | 32u) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return j + 1;
    if (s[j] == 0xC5 && j + 1 < n && s[j + 1] == 0xBF)   /* U+017F folds to s */
        return j + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return j + 2;
    return 0;
}

/* 5-7 at a white-space code point */
static size_t white(const uint8_t *s, size_t n, size_t i)
{
    size_t k = i, last_start = i, after_crlf = 0, j;
    while (k < n && (cls(s, k, &j) & QTD_UC_WS)) {
        if (s[k] == '\r' || s[k] == '\n')
            after_crlf = k + 1;
        last_start = k;
        k = j;
    }
    if (after_crlf)
        return after_crlf;   /* 5 */
    if (k == n)
        return n;            /* 6, the run ends the text */
    if (last_start > i)
        return last_start;   /* 6, less the last white-space code point */
    return k;                /* 7 */
}

size_t qtd_pretok_next(const uint8_t *s, size_t n, size_t i, int pat)
{
    unsigned let = pat == QTD_PAT_QWEN35 ? QTD_UC_L | QTD_UC_M : QTD_UC_L;
    unsigned not_other = QTD_UC_WS | QTD_UC_L | QTD_UC_N | (pat == QTD_PAT_QWEN35 ? QTD_UC_M : 0);
    size_t j, j2;
    unsigned f = cls(s, i, &j);
    if (s[i] == '\'') {
        size_t e = contraction(s, n, j);
        if (e)
            return e;
    }
    if (!(f & (QTD_UC_L | QTD_UC_N)) && s[i] != '\r' && s[i] != '\n' && j < n && (cls(s, j, &j2) & let))
        return run_of(s, n, j2, let);
    if (f & let)
        return run_of(s, n, j, let);
    if (f & QTD_UC_N)
        return j;
    if (s[i] == ' ' && j < n && !(cls(s, j, &j2) & not_other))
        f = 0, j = j2;
    if (!(f & not_other)) {
        size_t e = run_not(s, n, j, not_other);
        while (e < n && (s[e] == '\r' || s[e] == '\n'))
            e++;
        return e;
    }
    return white(s, n, i);
}
