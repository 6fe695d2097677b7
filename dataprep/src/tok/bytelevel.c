/* bytelevel.c - the byte-level alphabet of GPT-2 style BPE vocabularies: bytes 0x21-0x7E,
 * 0xA1-0xAC and 0xAE-0xFF stand for themselves as code points; the other 68 bytes, in
 * increasing order, stand for U+0100, U+0101, ... Invariant: the map is a bijection between
 * the 256 bytes and those 256 code points. */
#include "tokenizer.h"

static int is_self(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t qtd_bytelevel_cp(uint8_t b)
{
    if (is_self(b))
        return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        k += !is_self(x);
    return 0x100 + k;
}

int qtd_bytelevel_byte(uint32_t cp)
{
    if (cp < 0x100)
        return is_self(cp) ? (int)cp : -1;
    uint32_t k = cp - 0x100;
    for (unsigned x = 0; x < 256; x++)
        if (!is_self(x) && k-- == 0)
            return (int)x;
    return -1;
}
