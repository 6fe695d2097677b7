/* io_err.h - one error path for every IO module (safetensors, checkpoint, data).
 *
 * Invariant: every failing IO call prints exactly one line to stderr (unless silenced for
 * tests) and keeps the same text as the "last error", so tests can check the message
 * without capturing stderr. The message always names the file and what was expected.
 */
#ifndef QT_IO_ERR_H
#define QT_IO_ERR_H

/* Format a message, print it on stderr as "qtrain: <msg>", remember it, return `code`. */
int qt_io_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Informational note on stderr (not an error), also appended to a note log for the tests. */
void qt_io_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Every note since the last qt_io_clear_notes, one per line. */
const char *qt_io_notes(void);
void qt_io_clear_notes(void);
/* Text of the most recent qt_io_fail ("" if none). */
const char *qt_io_last_error(void);
/* quiet != 0 stops printing (messages are still stored); used by the bad-input tests and
 * by probes whose failure is reported in other words. Returns the previous setting. */
int qt_io_set_quiet(int quiet);

#endif
