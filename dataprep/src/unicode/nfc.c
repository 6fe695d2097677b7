/* nfc.c - NFC (nfc.h): full canonical decomposition (generated table + the Hangul
 * algorithm), canonical ordering (stable by combining class), canonical composition
 * (primary composites, the "blocked" rule, Hangul LV/LVT algorithmically).
 * Invariant: the text is cut only before a code point with NFC_QC Yes and class 0 (a point
 * where NFC(a + b) = NFC(a) + NFC(b)), so untouched stretches are copied verbatim. */
#include "nfc.h"

#include "../base/utf8.h"
#include "ucd.h"

#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static int is_stable(uint32_t cp)
{
    return !(qtd_uc_flags(cp) & QTD_UC_NFC_NOT_YES) && qtd_uc_ccc(cp) == 0;
}

static void decompose_one(uint32_t cp, qtd_u32s *v)
{
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE;
        qtd_u32s_push(v, LBASE + s / NCOUNT);
        qtd_u32s_push(v, VBASE + (s % NCOUNT) / TCOUNT);
        if (s % TCOUNT)
            qtd_u32s_push(v, TBASE + s % TCOUNT);
        return;
    }
    const uint32_t *d;
    int n = qtd_uc_decomp(cp, &d);
    if (!n)
        qtd_u32s_push(v, cp);
    for (int k = 0; k < n; k++)
        qtd_u32s_push(v, d[k]);
}

/* Canonical ordering: insertion sort by class within each run of non-zero classes (stable). */
static void reorder(uint32_t *c, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        uint32_t x = c[i];
        unsigned cx = qtd_uc_ccc(x);
        if (!cx)
            continue;
        size_t j = i;
        while (j > 0) {
            unsigned cp = qtd_uc_ccc(c[j - 1]);
            if (cp <= cx)   /* also stops at a starter (class 0) */
                break;
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

static uint32_t compose_pair(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    return qtd_uc_compose(a, b);
}

/* Canonical composition in place; returns the new length. */
static size_t compose(uint32_t *c, size_t n)
{
    if (!n)
        return 0;
    size_t starter = 0, out = 1;
    int have_starter = qtd_uc_ccc(c[0]) == 0;
    unsigned last_ccc = have_starter ? 0 : 256;
    for (size_t i = 1; i < n; i++) {
        uint32_t x = c[i];
        unsigned cx = qtd_uc_ccc(x);
        /* not blocked: nothing between the starter and x, or the last kept class < cx */
        if (have_starter && (out == starter + 1 || (last_ccc != 0 && last_ccc < cx))) {
            uint32_t comp = compose_pair(c[starter], x);
            if (comp) {
                c[starter] = comp;
                continue;
            }
        }
        if (cx == 0) {
            starter = out;
            have_starter = 1;
        }
        last_ccc = cx;
        c[out++] = x;
    }
    return out;
}

static void normalise_span(const uint8_t *s, size_t n, qtd_u32s *tmp, qtd_bytes *out)
{
    size_t i = 0;
    tmp->len = 0;
    while (i < n)
        decompose_one(qtd_utf8_next(s, &i), tmp);
    reorder(tmp->data, tmp->len);
    size_t m = compose(tmp->data, tmp->len);
    uint8_t *w = qtd_bytes_reserve(out, m * 4);
    size_t k = 0;
    for (size_t q = 0; q < m; q++)
        k += (size_t)qtd_utf8_put(tmp->data[q], w + k);
    out->len += k;
}

void qtd_nfc(const uint8_t *s, size_t n, qtd_bytes *out)
{
    static qtd_u32s tmp;   /* scratch, kept between calls */
    size_t i = 0, copied = 0, last_stable = 0;
    while (i < n) {
        if (s[i] < 0x80) {   /* ASCII is stable */
            last_stable = i++;
            continue;
        }
        size_t at = i;
        uint32_t cp = qtd_utf8_next(s, &i);
        if (is_stable(cp)) {
            last_stable = at;
            continue;
        }
        /* the span from the last stable point to the next one */
        size_t end = i;
        while (end < n) {
            size_t j = end;
            if (is_stable(qtd_utf8_next(s, &j)))
                break;
            end = j;
        }
        if (last_stable < copied)
            last_stable = copied;
        qtd_bytes_put(out, s + copied, last_stable - copied);
        normalise_span(s + last_stable, end - last_stable, &tmp, out);
        copied = i = last_stable = end;
    }
    qtd_bytes_put(out, s + copied, n - copied);
}
