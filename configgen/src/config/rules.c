/* config/rules.c - what every key family's rules file shares (config/moe.c, config/mtp.c,
 * config/train_rules.c, config/pipeline.c): a key of base.yml by name, its value as a number,
 * another key rendered "key=value (where)" for a message, and the one form of a refusal,
 * "key=value (where): message", which names where the value came from (a run file's line,
 * the command line, base.yml); and the note for a key whose value the plan ignores, as
 * MaxText does (qt_cg_rule_ignored: accepted with a note, never refused).
 *
 * Invariants: a key these functions are asked for is one base.yml declares, so its absence
 * is a bug of configgen itself (an internal error, abort), never a user's mistake; a
 * refusal writes err and returns -1, nothing else.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

const qt_cg_known *qt_cg_rule_key(const qt_cg_config *c, const char *key)
{
    const qt_cg_known *k = qt_cg_config_find(c, key);
    if (!k) {
        fprintf(stderr, "configgen: internal error: base.yml lacks key '%s'\n", key);
        abort();
    }
    return k;
}

double qt_cg_rule_f(const qt_cg_config *c, const char *key)
{
    return strtod(qt_cg_rule_key(c, key)->val->s, NULL);
}

int qt_cg_rule_vbad(const qt_cg_config *c, char *err, size_t errlen, const char *key,
                    const char *fmt, va_list ap)
{
    const qt_cg_known *k = qt_cg_rule_key(c, key);
    qt_cg_buf b = {0};
    qt_cg_val_render(k->val, &b);
    char msg[700];
    vsnprintf(msg, sizeof msg, fmt, ap);
    qt_cg_fail(err, errlen, "%s=%s (%s): %s", key, b.p, k->where, msg);
    qt_cg_buf_free(&b);
    return -1;
}

const char *qt_cg_rule_other(const qt_cg_config *c, const char *key, char *buf, size_t cap)
{
    const qt_cg_known *k = qt_cg_rule_key(c, key);
    qt_cg_buf b = {0};
    qt_cg_val_render(k->val, &b);
    snprintf(buf, cap, "%s=%s (%s)", key, b.p, k->where);
    qt_cg_buf_free(&b);
    return buf;
}

int qt_cg_rule_bad(const qt_cg_config *c, char *err, size_t errlen, const char *key,
                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = qt_cg_rule_vbad(c, err, errlen, key, fmt, ap);
    va_end(ap);
    return rc;
}

void qt_cg_rule_ignored(const qt_cg_config *c, qt_cg_settings *s, const char *key,
                        const char *fmt, ...)
{
    char who[400], why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const size_t n = strlen(s->ignored);
    snprintf(s->ignored + n, sizeof s->ignored - n, "%s%s is ignored: %s", n ? "; " : "",
             qt_cg_rule_other(c, key, who, sizeof who), why);
}
