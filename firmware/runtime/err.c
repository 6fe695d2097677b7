/* io_err.c - the IO modules' error reporting: print one line, keep it for the tests.
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
} qt_io_err_state;

int qt_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qt_io_err_state.last, sizeof qt_io_err_state.last, fmt, ap);
    va_end(ap);
    if (!qt_io_err_state.quiet)
        fprintf(stderr, "qtrain: %s\n", qt_io_err_state.last);
    return code;
}

void qt_note(const char *fmt, ...)
{
    char line[QT_IO_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!qt_io_err_state.quiet)
        fprintf(stderr, "qtrain: note: %s\n", line);
    /* appended (one per line, truncated when full) so a test sees every note of a call */
    size_t used = strlen(qt_io_err_state.note);
    snprintf(qt_io_err_state.note + used, sizeof qt_io_err_state.note - used, "%s\n", line);
}

const char *qt_notes(void)
{
    return qt_io_err_state.note;
}

void qt_clear_notes(void)
{
    qt_io_err_state.note[0] = 0;
}

const char *qt_last_error(void)
{
    return qt_io_err_state.last;
}

int qt_set_quiet(int quiet)
{
    int was = qt_io_err_state.quiet;
    qt_io_err_state.quiet = quiet;
    return was;
}
