/* ucd.h - Unicode character properties for qtrain-data, from the tables that
 * dataprep/gen/ucdgen.c generates at build time (build/dataprep/gen/ucd_tables.c) out of
 * Debian's unicode-data files. Invariant: the flag values equal ucdgen's F_* constants. */
#ifndef QTD_UCD_H
#define QTD_UCD_H

#include <stdint.h>

#define QTD_UC_L 1            /* general category L* (letter) */
#define QTD_UC_N 2            /* N* (number) */
#define QTD_UC_M 4            /* M* (mark) */
#define QTD_UC_WS 8           /* White_Space (PropList.txt): the \s of the pre-tokenizer */
#define QTD_UC_NFC_NOT_YES 16 /* NFC_Quick_Check is No or Maybe */
#define QTD_UC_WORD 32        /* \w of Rust's regex crate: Alphabetic, M, Nd, Pc, Join_Control */

extern const char qtd_ucd_version[];
extern const uint16_t qtd_ucd_flags_stage1[];
extern const uint8_t qtd_ucd_flags_stage2[];
extern const uint16_t qtd_ucd_ccc_stage1[];
extern const uint8_t qtd_ucd_ccc_stage2[];

/* The QTD_UC_* flags of code point cp (< 0x110000). */
static inline unsigned qtd_uc_flags(uint32_t cp)
{
    return qtd_ucd_flags_stage2[(uint32_t)qtd_ucd_flags_stage1[cp >> 8] << 8 | (cp & 255)];
}

/* The canonical combining class of cp (< 0x110000). */
static inline unsigned qtd_uc_ccc(uint32_t cp)
{
    return qtd_ucd_ccc_stage2[(uint32_t)qtd_ucd_ccc_stage1[cp >> 8] << 8 | (cp & 255)];
}

/* The full canonical decomposition of cp (not reordered; Hangul syllables excluded: the
 * caller decomposes them algorithmically): sets *out to it and returns its length, or 0
 * when cp has none. */
int qtd_uc_decomp(uint32_t cp, const uint32_t **out);
/* The primary composite of (a, b), or 0 when there is none (excluded ones are absent). */
uint32_t qtd_uc_compose(uint32_t a, uint32_t b);

#endif
