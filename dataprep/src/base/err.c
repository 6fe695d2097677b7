/* err.c - the error buffer of qtrain-data (err.h). Invariant: the message is always
 * NUL-terminated and truncated, never overflowed. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

static char g_msg[2048];

int qtd_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *qtd_errmsg(void)
{
    return g_msg;
}

void qtd_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("qtrain-data: note: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
