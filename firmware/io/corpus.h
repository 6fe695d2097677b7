/* corpus.h - access to the embedded byte-level corpus (corpus.c). */
#ifndef QT_CORPUS_H
#define QT_CORPUS_H

#include <stdint.h>

/* Start of the embedded text; *n receives its length in bytes (= tokens). */
const unsigned char *qt_corpus_bytes(int64_t *n);

#endif
