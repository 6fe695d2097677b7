/* encode.c - text to ids (tokenizer.h), in Hugging Face's order: the raw text is split at
 * added tokens with normalized false; each stretch between them is normalised to NFC, split
 * at added tokens with normalized true, cut into pieces by the Split pattern and each piece
 * turned into ids by byte-level BPE. Invariant: every byte of the input is covered by
 * exactly one added token or one piece. */
#include "../unicode/nfc.h"
#include "added.h"
#include "pretok.h"
#include "tokenizer.h"

static void encode_pieces(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out)
{
    size_t i = 0;
    while (i < n) {
        size_t e = qtd_pretok_next(s, n, i, t->pattern);
        if (e - i > t->longest_piece) t->longest_piece = e - i;
        qtd_bpe_piece(t, s + i, e - i, out);
        i = e;
    }
}

static void encode_stretch(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out)
{
    if (!n)
        return;
    t->norm.len = 0;
    qtd_nfc(s, n, &t->norm);
    const uint8_t *z = t->norm.data;
    size_t m = t->norm.len, from = 0, st, en;
    uint32_t id;
    while (qtd_added_find(t, z, m, from, 1, &st, &en, &id)) {
        encode_pieces(t, z + from, st - from, out);
        qtd_u32s_push(out, id);
        from = en;
    }
    encode_pieces(t, z + from, m - from, out);
}

void qtd_tok_encode(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out)
{
    size_t from = 0, st, en;
    uint32_t id;
    while (qtd_added_find(t, s, n, from, 0, &st, &en, &id)) {
        encode_stretch(t, s + from, st - from, out);
        qtd_u32s_push(out, id);
        from = en;
    }
    encode_stretch(t, s + from, n - from, out);
}
