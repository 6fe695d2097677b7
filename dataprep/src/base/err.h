/* err.h - the one error message of qtrain-data: the latest failure sets it, callers return
 * -1 up to main, which prints it; notes (qtd_note) go straight to stderr and never stop a
 * command. Invariant: qtd_fail never returns 0; counts in messages agree in number
 * ("1 token", "2 tokens": qtd_s). */
#ifndef QTD_ERR_H
#define QTD_ERR_H

/* Formats the message (printf style) into the error buffer; returns -1. */
int qtd_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last message set by qtd_fail ("" when none). */
const char *qtd_errmsg(void);
/* Prints "qtrain-data: note: <message>" on stderr. */
void qtd_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The plural ending of a count: "" for 1, "s" otherwise. */
static inline const char *qtd_s(unsigned long long n)
{
    return n == 1 ? "" : "s";
}

#endif
