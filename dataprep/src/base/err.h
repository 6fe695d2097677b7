/* err.h - the one error message of qtrain-data: the first failure sets it, callers return
 * -1 up to main, which prints it. Invariant: qtd_fail never returns 0. */
#ifndef QTD_ERR_H
#define QTD_ERR_H

/* Formats the message (printf style) into the error buffer; returns -1. */
int qtd_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last message set by qtd_fail ("" when none). */
const char *qtd_errmsg(void);

#endif
