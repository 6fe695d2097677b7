/* io_err.c - the IO modules' error reporting: print one line, keep it for the tests.
 * Invariant: the stored message is always NUL-terminated and at most QT_IO_ERR_MAX-1 bytes.
 */
#include <stdarg.h>
#include <stdio.h>
#include "io_err.h"

#define QT_IO_ERR_MAX 1024

static struct {
    char last[QT_IO_ERR_MAX];
    int quiet;
} qt_io_err_state;

int qt_io_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qt_io_err_state.last, sizeof qt_io_err_state.last, fmt, ap);
    va_end(ap);
    if (!qt_io_err_state.quiet)
        fprintf(stderr, "qtrain: %s\n", qt_io_err_state.last);
    return code;
}

void qt_io_note(const char *fmt, ...)
{
    va_list ap;
    if (qt_io_err_state.quiet)
        return;
    va_start(ap, fmt);
    fputs("qtrain: note: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *qt_io_last_error(void)
{
    return qt_io_err_state.last;
}

void qt_io_set_quiet(int quiet)
{
    qt_io_err_state.quiet = quiet;
}
