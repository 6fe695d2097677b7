/* err.c - the firmware's failure path (qt_err.h): print one line with the rank prefix on a
 * mesh, keep it for the tests.
 * Invariants: the stored message is always NUL-terminated and at most QT_IO_ERR_MAX-1 bytes
 * (three whole paths and the text);
 * each line reaches stderr in one write(2), so lines of several ranks (or of processes a
 * launcher started together) never interleave mid-line (a pipe keeps writes up to PIPE_BUF
 * whole; stdio on an unbuffered stream may split one line into several writes).
 * Base layer: it calls libc only, and every other layer (and qtrain-audit) calls it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "qt_err.h"

/* room for a message naming three paths of PATH_MAX (4096) bytes: at 1024 a message about a
 * path of a deep directory was cut before it said what was wrong (audit24) */
#define QT_IO_ERR_MAX (3 * 4096 + 1024)

static struct {
    char last[QT_IO_ERR_MAX];
    char note[QT_IO_ERR_MAX];
    int quiet;
    char prefix[48];     /* "rank r/n: " on a mesh, else "" */
    char program[32];    /* qt_err_set_program; "" = qtrain */
    char line[QT_IO_ERR_MAX + 128];   /* qt_err_emit's output line */
} qt_err_state;

/* "<program>: <prefix><kind><msg>\n" (program "qtrain" unless set) in one write (cut to
 * the buffer if longer). */
static void qt_err_emit(const char *kind, const char *msg)
{
    char *const line = qt_err_state.line;
    const int size = (int)sizeof qt_err_state.line;
    int n = snprintf(line, (size_t)size, "%s: %s%s%s\n",
                     qt_err_state.program[0] ? qt_err_state.program : "qtrain",
                     qt_err_state.prefix, kind, msg);
    if (n < 0) return;
    if (n >= size) {
        n = size - 1;
        line[n - 1] = '\n';
    }
    fflush(stderr);
    for (int at = 0; at < n;) {
        ssize_t w = write(2, line + at, (size_t)(n - at));
        if (w <= 0) return;
        at += (int)w;
    }
}

void qt_err_set_rank(int rank, int n)
{
    if (n > 1) snprintf(qt_err_state.prefix, sizeof qt_err_state.prefix, "rank %d/%d: ", rank, n);
    else qt_err_state.prefix[0] = 0;
}

void qt_err_set_program(const char *name)
{
    snprintf(qt_err_state.program, sizeof qt_err_state.program, "%s", name ? name : "");
}

int qt_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qt_err_state.last, sizeof qt_err_state.last, fmt, ap);
    va_end(ap);
    if (!qt_err_state.quiet)
        qt_err_emit("", qt_err_state.last);
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
        qt_err_emit("note: ", line);
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
