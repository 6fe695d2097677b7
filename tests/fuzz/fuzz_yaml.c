/* fuzz_yaml.c - libFuzzer target: configgen's YAML-subset reader, config layering and
 * validation (configgen/src/config/yaml.c, config/config.c, config/settings.c), and for
 * small valid configs the rest of the plan pipeline (graph, autodiff, memory plan,
 * schedule and layout checks, hash) and the in-memory emission of plan.c and plan.txt.
 *
 * Input: a run file, optionally followed by a line "%%" and then command-line overrides,
 * one key=value per line (at most 16). The run file is written to the scratch directory
 * and loaded against the committed configgen/configs (base.yml and models/, found under
 * $QT_ROOT or the current directory), exactly as `configgen run.yml key=value ...` does.
 * Invariants: every call returns 0, or -1 with a non-empty, NUL-terminated message in err;
 * nothing aborts (configgen aborts only when malloc fails); every allocation is freed on
 * success and on failure (LeakSanitizer); the full pipeline runs only when the validated
 * model is small (<= 16 layers, <= 128 experts) so one input stays well under a second;
 * an emitted plan.c holds no non-finite float literal outside its strings (it must compile).
 */
#include "qt_fuzz.h"
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "emit/qt_cg_emit.h"
#include "driver/qt_cg_driver.h"

#define QT_FUZZ_MAX_OVER 16

static void qt_fuzz_check_err(const char *err)
{
    if (getenv("QT_FUZZ_VERBOSE")) fprintf(stderr, "qt_fuzz: configgen: %s\n", err);
    size_t n = strnlen(err, 4096);
    qt_fuzz_assert(n > 0 && n < 4096);
}

/* 1 if C source c holds the token `inff` or `nanf` (a non-finite float literal) outside
 * string literals and comments: plan.c also carries the resolved config as strings, where
 * a user's key value may spell anything. */
static int qt_fuzz_nonfinite_literal(const char *c)
{
    for (; *c; c++) {
        if (*c == '"') {
            for (c++; *c && *c != '"'; c++)
                if (*c == '\\' && c[1]) c++;
            if (!*c) return 0;
        } else if (c[0] == '/' && c[1] == '*') {
            const char *e = strstr(c + 2, "*/");
            if (!e) return 0;
            c = e + 1;
        } else if ((!strncmp(c, "inff", 4) || !strncmp(c, "nanf", 4)) &&
                   !(c[4] == '_' || ((c[4] | 32) >= 'a' && (c[4] | 32) <= 'z') ||
                     (c[4] >= '0' && c[4] <= '9'))) {
            return 1;
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char err[4096], configs[4096];
    char *text = malloc(size + 1), *over[QT_FUZZ_MAX_OVER];
    int n_over = 0;
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t file_len = size;
    char *sep = strstr(text, "\n%%\n");
    if (sep) {
        file_len = (size_t)(sep - text) + 1;
        for (char *p = sep + 4; *p && n_over < QT_FUZZ_MAX_OVER;) {
            char *nl = strchr(p, '\n');
            if (nl) *nl = 0;
            if (*p) over[n_over++] = p;
            if (!nl) break;
            p = nl + 1;
        }
    }
    const char *path = qt_fuzz_path("input.yml", 0);
    qt_fuzz_write(path, text, file_len);
    snprintf(configs, sizeof configs, "%s/configgen/configs", qt_fuzz_root());

    /* the reader alone, on the whole input as one document */
    qt_cg_doc doc;
    err[0] = 0;
    if (qt_cg_yaml_parse("input", text, &doc, err, sizeof err) == 0) {
        qt_cg_buf b = {0};
        for (int i = 0; i < doc.n; i++) qt_cg_val_render(&doc.e[i].val, &b);
        qt_cg_buf_free(&b);
    } else {
        qt_fuzz_check_err(err);
    }
    qt_cg_doc_free(&doc);

    /* layering and validation */
    qt_cg_config c;
    qt_cg_settings s;
    int small = 0;
    memset(&s, 0, sizeof s);
    err[0] = 0;
    int rc = qt_cg_config_load(&c, configs, path, n_over, over, err, sizeof err);
    if (!rc) rc = qt_cg_settings_resolve(&c, &s, err, sizeof err);
    qt_fuzz_assert(rc == 0 || rc == -1);
    if (rc) qt_fuzz_check_err(err);
    else small = s.m.n_layers <= 16 && s.m.n_experts <= 128;
    qt_cg_settings_free(&s);
    qt_cg_config_free(&c);

    /* the whole pipeline, for small models */
    if (small) {
        qt_cg_graph g;
        err[0] = 0;
        rc = qt_cg_plan_build(configs, path, n_over, over, &c, &s, &g, err, sizeof err);
        qt_fuzz_assert(rc == 0 || rc == -1);
        if (rc) {
            qt_fuzz_check_err(err);
        } else {
            qt_cg_buf b = {0};
            qt_cg_emit_plan_c(&g, &c, "fuzz", &b);
            qt_fuzz_assert(b.p && !qt_fuzz_nonfinite_literal(b.p));
            qt_cg_buf_free(&b);
            qt_cg_emit_report(&g, &c, &b);
            qt_cg_buf_free(&b);
        }
        qt_cg_plan_free(&c, &s, &g);
    }
    free(text);
    return 0;
}
