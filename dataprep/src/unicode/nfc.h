/* nfc.h - Unicode Normalization Form C (UAX #15) of valid UTF-8. */
#ifndef QTD_NFC_H
#define QTD_NFC_H

#include <stddef.h>
#include <stdint.h>

#include "../base/buf.h"

/* Appends NFC(s[0..n)) to out; s must be valid UTF-8. Text already in NFC is copied in
 * runs (only the stretches around code points whose NFC_Quick_Check is not Yes or whose
 * combining class is not 0 are normalised). Reads s, writes out only. */
void qtd_nfc(const uint8_t *s, size_t n, qtd_bytes *out);

#endif
