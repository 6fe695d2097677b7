/* err.c - the firmware's failure path (qt_err.h): print one line with the rank prefix on a
 * mesh, keep it for the tests.
 * Invariant: the stored message is always NUL-terminated and at most QT_IO_ERR_MAX-1 bytes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "qt_err.h"

#define QT_IO_ERR_MAX 1024

static struct {
    char last[QT_IO_ERR_MAX];
    char note[QT_IO_ERR_MAX];
    int quiet;
    char prefix[48];     /* "rank r/n: " on a mesh, else "" */
} qt_err_state;

void qt_err_set_rank(int rank, int n)
{
    if (n > 1) snprintf(qt_err_state.prefix, sizeof qt_err_state.prefix, "rank %d/%d: ", rank, n);
    else qt_err_state.prefix[0] = 0;
}

int qt_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qt_err_state.last, sizeof qt_err_state.last, fmt, ap);
    va_end(ap);
    if (!qt_err_state.quiet)
        fprintf(stderr, "qtrain: %s%s\n", qt_err_state.prefix, qt_err_state.last);
    return code;
}

void qt_note(const char *fmt, ...)
{
    char line[QT_IO_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!qt_err_state.quiet)
        fprintf(stderr, "qtrain: %snote: %s\n", qt_err_state.prefix, line);
    /* appended (one per line, truncated when full) so a test sees every note of a call */
    size_t used = strlen(qt_err_state.note);
    snprintf(qt_err_state.note + used, sizeof qt_err_state.note - used, "%s\n", line);
}

const char *qt_notes(void)
{
    return qt_err_state.note;
}

void qt_clear_notes(void)
{
    qt_err_state.note[0] = 0;
}

const char *qt_last_error(void)
{
    return qt_err_state.last;
}

int qt_set_quiet(int quiet)
{
    int was = qt_err_state.quiet;
    qt_err_state.quiet = quiet;
    return was;
}
