/* corpus.c - the embedded default training text (firmware/io/corpus.txt), byte-level.
 *
 * The text is the verbatim concatenation of GPL-3, GPL-2, LGPL-2.1, Apache-2.0, MPL-2.0
 * and Artistic from /usr/share/common-licenses (verbatim copying is permitted), ~114 KB of
 * plain English. It is pulled in with the assembler's .incbin so no generator step is
 * needed; the path is relative to the project root, where every object is compiled (gcc
 * and musl-gcc use the same GNU as). Invariant: qt_corpus_end - qt_corpus_start is the file
 * size; the bytes are read-only.
 */
#include <stdint.h>
#include "corpus.h"

__asm__(".section .rodata.qt_corpus,\"a\",@progbits\n"
        ".balign 64\n"
        ".globl qt_corpus_start\n"
        "qt_corpus_start:\n"
        ".incbin \"firmware/io/corpus.txt\"\n"
        ".globl qt_corpus_end\n"
        "qt_corpus_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const unsigned char qt_corpus_start[];
extern const unsigned char qt_corpus_end[];

const unsigned char *qt_corpus_bytes(int64_t *n)
{
    *n = (int64_t)(qt_corpus_end - qt_corpus_start);
    return qt_corpus_start;
}
