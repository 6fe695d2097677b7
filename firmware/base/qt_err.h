/* qt_err.h - the firmware's error codes and its one failure path.
 *
 * Every function that can fail returns QT_OK (0) or one negative code below, after printing
 * exactly one line on stderr through qt_fail. The line names the file, key, tensor,
 * collective or position and what was expected. On a mesh (after qt_err_set_rank with more
 * than one rank) the line is prefixed with the rank, "qtrain: rank 3/4: ...", so an error
 * seen on one rank of a job is attributable. The last message is kept for the tests.
 */
#ifndef QT_ERR_H
#define QT_ERR_H

enum qt_err {
    QT_OK = 0,
    QT_E_ARG = -1,      /* bad command-line value */
    QT_E_IO = -2,       /* open/read/write/fsync/rename failed */
    QT_E_FORMAT = -3,   /* malformed file */
    QT_E_MISMATCH = -4, /* file does not fit the plan (missing/extra/mis-shaped tensor, hash) */
    QT_E_RANGE = -5,    /* token id out of range, file too short */
    QT_E_PLAN = -6,     /* plan invalid for this process (rank count, arena, tables) */
    QT_E_COMM = -7,     /* a collective failed or a peer stayed silent past the deadline */
    QT_E_PEER = -8      /* another rank of the mesh failed and printed why; this one stops */
};

#ifdef __cplusplus
extern "C" {
#endif

/* Format a message, print it on stderr as "qtrain: [rank r/n: ]<msg>" (the program name
 * of qt_err_set_program in place of qtrain), remember it,
 * return `code` (so callers write `return qt_fail(QT_E_IO, ...)`). */
int qt_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Informational note on stderr (not an error), also appended to a note log for the tests. */
void qt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Every note since the last qt_clear_notes, one per line. */
const char *qt_notes(void);
void qt_clear_notes(void);
/* Text of the most recent qt_fail ("" if none). */
const char *qt_last_error(void);
/* quiet != 0 stops printing (messages are still stored); used by the bad-input tests and
 * by probes whose failure is reported in other words. Returns the previous setting. */
int qt_set_quiet(int quiet);
/* This process's rank and the job's rank count: messages get a rank prefix when n > 1. */
void qt_err_set_rank(int rank, int n);
/* The program named at the start of every line ("qtrain" unless set): a host tool that
 * links the firmware's readers (qtrain-audit) names itself, not qtrain. */
void qt_err_set_program(const char *name);

#ifdef __cplusplus
}
#endif

#endif
