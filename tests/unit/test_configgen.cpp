// test_configgen.cpp - unit tests of configgen (the qt_cg_ library): YAML subset parser,
// layering and overrides, unknown-key suggestions, the bad-config table (message, status,
// nothing written), the MaxText sharding resolver on hypothetical meshes, memory-planner
// invariants and schedule sanity on the real run configs, and plan hash / output stability.
// Run from the repository root (paths are relative to it, as in `make test`).
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <vector>

extern "C" {
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "mesh/qt_cg_mesh.h"
#include "model/qt_cg_model.h"
#include "memory/qt_cg_memory.h"
#include "schedule/qt_cg_schedule.h"
#include "check/qt_cg_check.h"
#include "emit/qt_cg_emit.h"
#include "driver/qt_cg_driver.h"
}

#include "CppUTest/TestHarness.h"

static const char *kRuns[] = {
    "configgen/configs/runs/default.yml",         "configgen/configs/runs/bench.yml",
    "configgen/configs/runs/test-35-tiny.yml",    "configgen/configs/runs/test-accum-b1g4.yml",
    "configgen/configs/runs/test-accum-b2g2.yml", "configgen/configs/runs/test-accum-b4g1.yml",
    "configgen/configs/runs/test-next-lb.yml",    "configgen/configs/runs/test-next-tiny.yml",
};
static const char *kTiny = "configgen/configs/runs/test-next-tiny.yml";

static std::string make_tmpdir()
{
    char tmpl[] = "/tmp/qt_cg_test_XXXXXX";
    char *d = mkdtemp(tmpl);
    CHECK(d != NULL);
    return std::string(d);
}

static void rm_rf(const std::string &path)
{
    DIR *d = opendir(path.c_str());
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            rm_rf(path + "/" + e->d_name);
        }
        closedir(d);
        rmdir(path.c_str());
    } else {
        unlink(path.c_str());
    }
}

static bool path_exists(const std::string &p)
{
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

static std::string slurp(const std::string &p)
{
    char *text = NULL;
    char err[256];
    if (qt_cg_read_file(p.c_str(), &text, err, sizeof err)) return std::string("<missing>");
    std::string s(text);
    free(text);
    return s;
}

static void write_file(const std::string &p, const char *text)
{
    FILE *f = fopen(p.c_str(), "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

// ---------------------------------------------------------------- parser

TEST_GROUP(CgYaml){};

TEST(CgYaml, ListsCommentsAndQuotes)
{
    const char *text =
        "# header comment\n"
        "a: 12   # trailing comment\n"
        "b: \"x # not a comment\"\n"
        "c: 'single'\n"
        "d: bare_word\n"
        "\n"
        "rules: [\n"
        "  ['n1', ['data', 'fsdp']],   # comment inside a list\n"
        "  ['n2', 'tensor'],\n"
        "  ['n3', []],\n"
        "]\n"
        "e: []\n"
        "f: [1, 1, 0]\n";
    qt_cg_doc d;
    char err[512] = "";
    int rc = qt_cg_yaml_parse("t.yml", text, &d, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc);
    LONGS_EQUAL(7, d.n);
    STRCMP_EQUAL("a", d.e[0].key);
    STRCMP_EQUAL("12", d.e[0].val.s);
    LONGS_EQUAL(2, d.e[0].line);
    STRCMP_EQUAL("x # not a comment", d.e[1].val.s);
    LONGS_EQUAL(1, d.e[1].val.quoted);
    STRCMP_EQUAL("single", d.e[2].val.s);
    STRCMP_EQUAL("bare_word", d.e[3].val.s);
    LONGS_EQUAL(0, d.e[3].val.quoted);
    const qt_cg_val *r = &d.e[4].val;
    LONGS_EQUAL(QT_CG_LIST, r->kind);
    LONGS_EQUAL(7, d.e[4].line);
    LONGS_EQUAL(3, r->n); // trailing comma accepted
    STRCMP_EQUAL("n1", r->items[0].items[0].s);
    LONGS_EQUAL(2, r->items[0].items[1].n);
    STRCMP_EQUAL("fsdp", r->items[0].items[1].items[1].s);
    STRCMP_EQUAL("tensor", r->items[1].items[1].s);
    LONGS_EQUAL(0, r->items[2].items[1].n);
    LONGS_EQUAL(12, d.e[5].line); // line counting continues across the multi-line list
    LONGS_EQUAL(0, d.e[5].val.n);
    LONGS_EQUAL(3, d.e[6].val.n);
    qt_cg_doc_free(&d);
}

TEST(CgYaml, ErrorsNameFileAndLine)
{
    struct {
        const char *text, *want;
    } cases[] = {
        {"a: 1\nb: 2\n  c: 3\n", "t.yml:3: indented line"},
        {"a: 1\n- x\n", "t.yml:2: block lists"},
        {"a: 1\nb:\n", "t.yml:2: no value for key b"},
        {"a: 1\na: 2\n", "t.yml:2: duplicate key 'a' (first set at line 1)"},
        {"a: [1, 2,\n  3,\n", "t.yml:3: unterminated list opened at line 1"},
        {"a: [1, 2\nb: 3\n", "t.yml:2: expected ',' or ']' in the list opened at line 1"},
        {"a: \"abc\n", "t.yml:1: unterminated string"},
        {"a: 1 2 ]\n", "t.yml:1: unexpected character"},
        {"a: {x: 1}\n", "t.yml:1: unsupported YAML syntax"},
        {"a: b: c\n", "t.yml:1: nested mappings"},
        {"1a: 3\n", "t.yml:1: expected 'key: value'"},
        {"a 3\n", "t.yml:1: expected ':'"},
        {"x: ['a' 'b']\n", "t.yml:1: expected ',' or ']'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qt_cg_doc d;
        char err[512] = "";
        int rc = qt_cg_yaml_parse("t.yml", cases[i].text, &d, err, sizeof err);
        if (rc == 0 || !strstr(err, cases[i].want))
            fprintf(stderr, "case %zu: rc %d, err '%s', want '%s'\n", i, rc, err, cases[i].want);
        CHECK(rc != 0);
        CHECK(strstr(err, cases[i].want) != NULL);
        qt_cg_doc_free(&d);
    }
}

// audit22: a UTF-8 byte-order mark at the start of a run file (a Windows editor's) stopped
// configgen with "t.yml:1: expected 'key: value'" (PyYAML, MaxText's reader, skips it); and
// '#' ended a bare value anywhere, so `run: x#1` was read as x, where YAML (and MaxText)
// reads x#1: a comment starts only after a blank.
TEST(CgYaml, ByteOrderMarkAndHashInsideAValue)
{
    qt_cg_doc d;
    char err[512] = "";
    int rc = qt_cg_yaml_parse("t.yml", "\xef\xbb\xbf" "a: 1\nb: x#1\nc: y #c\nd: [p#q, r]\n", &d, err,
                              sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc);
    LONGS_EQUAL(4, d.n);
    STRCMP_EQUAL("a", d.e[0].key);
    STRCMP_EQUAL("x#1", d.e[1].val.s);
    STRCMP_EQUAL("y", d.e[2].val.s);
    STRCMP_EQUAL("p#q", d.e[3].val.items[0].s);
    qt_cg_doc_free(&d);
    // a mark anywhere else is still not a key
    rc = qt_cg_yaml_parse("t.yml", "a: 1\n\xef\xbb\xbf" "b: 2\n", &d, err, sizeof err);
    CHECK(rc != 0);
    CHECK(strstr(err, "t.yml:2: expected 'key: value'") != NULL);
    qt_cg_doc_free(&d);
}

// "---" before the first key and "..." at the end are YAML document markers, which PyYAML
// (MaxText's reader) takes; a second document is refused, as PyYAML refuses it ("expected a
// single document in the stream"). configgen used to call "---" a block list.
TEST(CgYaml, DocumentMarkers)
{
    const char *ok[] = {"---\na: 1\n", "--- # run\r\na: 1\n", "a: 1\n...\n# c\n\n", "---\na: 1\n...",
                        "---"};
    for (const char *t : ok) {
        qt_cg_doc d;
        char err[512] = "";
        int rc = qt_cg_yaml_parse("t.yml", t, &d, err, sizeof err);
        if (rc) FAIL(err);
        LONGS_EQUAL(strcmp(t, "---") ? 1 : 0, d.n);
        qt_cg_doc_free(&d);
    }
    struct { const char *text, *want; } bad[] = {
        {"a: 1\n---\nb: 2\n", "t.yml:2: a second YAML document starts here (---)"},
        {"---\n---\na: 1\n", "t.yml:2: a second YAML document starts here (---)"},
        {"a: 1\n...\nb: 2\n", "t.yml:3: a key after the document end (... at line 2)"},
        {"...\na: 1\n", "t.yml:2: a key after the document end (... at line 1)"},
        {"a: 1\n...\n---\nb: 2\n", "t.yml:3: a second YAML document starts here (---)"},
        {"---x: 1\n", "t.yml:1: block lists"},
    };
    for (auto &b : bad) {
        qt_cg_doc d;
        char err[512] = "";
        CHECK(qt_cg_yaml_parse("t.yml", b.text, &d, err, sizeof err) != 0);
        if (!strstr(err, b.want)) FAIL(err);
        qt_cg_doc_free(&d);
    }
}

// ---------------------------------------------------------------- layering

TEST_GROUP(CgConfig){};

TEST(CgConfig, LayeringAndOverrides)
{
    char *over[] = {(char *)"base_emb_dim=64", (char *)"learning_rate=0.5"};
    qt_cg_config c;
    char err[1024] = "";
    int rc = qt_cg_config_load(&c, "configgen/configs", kTiny, 2, over, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc);
    STRCMP_EQUAL("test-next-tiny", c.run_name); // defaults to the run file's stem
    STRCMP_EQUAL("qwen3-next-tiny", c.model_name);
    const qt_cg_known *k = qt_cg_config_find(&c, "base_emb_dim");
    STRCMP_EQUAL("64", k->val->s); // command line beats the model file (32)
    STRCMP_EQUAL("command line", k->where);
    k = qt_cg_config_find(&c, "vocab_size");
    STRCMP_EQUAL("64", k->val->s); // model file beats base (151936)
    CHECK(strstr(k->where, "models/qwen3-next-tiny.yml:") != NULL);
    k = qt_cg_config_find(&c, "per_device_batch_size");
    STRCMP_EQUAL("2", k->val->s); // run file beats base (12)
    CHECK(strstr(k->where, "runs/test-next-tiny.yml:4") != NULL);
    k = qt_cg_config_find(&c, "adam_b2");
    STRCMP_EQUAL("0.95", k->val->s); // untouched base default
    qt_cg_config_free(&c);

    char *over2[] = {(char *)"run_name=custom", (char *)"per_device_batch_size=2.0"};
    rc = qt_cg_config_load(&c, "configgen/configs", kTiny, 2, over2, err, sizeof err);
    LONGS_EQUAL(0, rc);
    STRCMP_EQUAL("custom", c.run_name);
    qt_cg_settings s;
    rc = qt_cg_settings_resolve(&c, &s, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc); // 2.0 is accepted as an integer batch
    LONGS_EQUAL(2, s.tr.micro_batch);
    LONGS_EQUAL(4, s.m.rotary_dim); // int(8 * 0.5)
    LONGS_EQUAL(24, s.m.shared_dim);
    LONGS_EQUAL(2, s.tr.global_batch);
    qt_cg_settings_free(&s);
    qt_cg_config_free(&c);
}

// audit22: configgen's own base.yml as the run file (MaxText's `train.py base.yml
// model_name=X`) was applied again above the model file, so every model key went back to
// base.yml's default model: model_name=qwen3-next-tiny planned 48 layers of d 2048. It adds
// no layer now. MaxText's own base.yml (a YAML error here) is named as such, with what to
// give instead; "09" (text to PyYAML, 9 to MaxText's types) stays 9.
TEST(CgConfig, BaseYmlAsTheRunFile)
{
    char *over[] = {(char *)"model_name=qwen3-next-tiny", (char *)"steps=09"};
    qt_cg_config c;
    char err[1024] = "";
    int rc = qt_cg_config_load(&c, "configgen/configs", "configgen/configs/base.yml", 2, over, err,
                               sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc);
    const qt_cg_known *k = qt_cg_config_find(&c, "base_emb_dim");
    STRCMP_EQUAL("32", k->val->s); // the model file's, not base.yml's 2048
    CHECK(strstr(k->where, "models/qwen3-next-tiny.yml:") != NULL);
    STRCMP_EQUAL("09", qt_cg_config_find(&c, "steps")->val->s);
    qt_cg_config_free(&c);
    std::string dir = make_tmpdir(), mt = dir + "/base.yml";
    write_file(mt, "run_name: \"\"\nvllm_hf_overrides: {}\nbase_output_directory: \"\"\nhardware: 'tpu'\n");
    rc = qt_cg_config_load(&c, "configgen/configs", mt.c_str(), 0, NULL, err, sizeof err);
    CHECK(rc != 0);
    if (!strstr(err, "this looks like MaxText's own base.yml")) fprintf(stderr, "%s\n", err);
    CHECK(strstr(err, "base.yml:2: unsupported YAML syntax starting with '{' (this looks like MaxText's own base.yml") != NULL);
    CHECK(strstr(err, "give configgen/configs/base.yml in its place") != NULL);
    qt_cg_config_free(&c);
    rm_rf(dir);
}

// Files are read only when they are regular and at most 16 MiB: /dev/zero used to hang,
// and a directory used to be a "read error".
TEST(CgConfig, ReadFileRefusesDevicesDirectoriesAndHugeFiles)
{
    char *text = NULL;
    char err[512] = "";
    CHECK(qt_cg_read_file("/dev/zero", &text, err, sizeof err) != 0);
    STRCMP_EQUAL("/dev/zero: is a character device, not a regular file; expected a config file", err);
    std::string dir = make_tmpdir();
    CHECK(qt_cg_read_file(dir.c_str(), &text, err, sizeof err) != 0);
    CHECK(strstr(err, ": is a directory; expected a config file") != NULL);
    std::string big = dir + "/big.yml";
    write_file(big, "a: 1\n");
    CHECK(truncate(big.c_str(), (17 << 20)) == 0);
    CHECK(qt_cg_read_file(big.c_str(), &text, err, sizeof err) != 0);
    CHECK(strstr(err, "is 17825792 bytes, more than the 16 MiB a config file may have") != NULL);
    CHECK(text == NULL);
    // a run file given as a directory, through the whole generator
    std::string gen = dir + "/gen";
    char *argv[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)dir.c_str()};
    CHECK(qt_cg_generate(4, argv, err, sizeof err) != 0);
    CHECK(strstr(err, "is a directory") != NULL);
    CHECK(!path_exists(gen));
    rm_rf(dir);
}

TEST(CgConfig, UnknownKeySuggestsNearest)
{
    char err[1024] = "";
    qt_cg_config c;
    char *over[] = {(char *)"base_emb_dimm=3"};
    int rc = qt_cg_config_load(&c, "configgen/configs", kTiny, 1, over, err, sizeof err);
    CHECK(rc != 0);
    CHECK(strstr(err, "command line: unknown key 'base_emb_dimm' (did you mean 'base_emb_dim'?)"));
    qt_cg_config_free(&c);
    // audit22: capitals were told 'dtype' for STEPS (the edit distance was case-sensitive)
    char *over_caps[] = {(char *)"STEPS=3"};
    rc = qt_cg_config_load(&c, "configgen/configs", kTiny, 1, over_caps, err, sizeof err);
    CHECK(rc != 0);
    CHECK(strstr(err, "command line: unknown key 'STEPS' (did you mean 'steps'?)"));
    qt_cg_config_free(&c);

    // In a file the message names file:line.
    std::string dir = make_tmpdir();
    std::string run = dir + "/r.yml";
    write_file(run, "model_name: \"qwen3-next-tiny\"\n# comment\ngdn_chunk_sise: 8\n");
    rc = qt_cg_config_load(&c, "configgen/configs", run.c_str(), 0, NULL, err, sizeof err);
    CHECK(rc != 0);
    std::string want = run + ":3: unknown key 'gdn_chunk_sise' (did you mean 'gdn_chunk_size'?)";
    if (!strstr(err, want.c_str())) fprintf(stderr, "got: %s\n", err);
    CHECK(strstr(err, want.c_str()) != NULL);
    qt_cg_config_free(&c);
    rm_rf(dir);
}

TEST(CgConfig, TypeErrorsNameKeyValueAndType)
{
    struct {
        const char *over, *want;
    } cases[] = {
        {"base_emb_dim=abc", "base_emb_dim: value abc is not an integer"},
        {"base_emb_dim=2.5", "base_emb_dim: value 2.5 is not an integer"},
        {"learning_rate=fast", "learning_rate: value fast is not a number"},
        {"use_mrope=yes", "use_mrope: value yes is not true or false"},
        {"mrope_section=3", "mrope_section: value 3 is not a list"},
        {"decoder_block=[1]", "decoder_block: value [1] is not a string"},
        {"steps", "expected key=value"},
        // YAML 1.1 (PyYAML, MaxText) reads 010 as octal 8; qtrain read 10 (audit22)
        {"steps=010", "steps: value 010 has a leading zero: YAML 1.1 (PyYAML, MaxText's reader) takes it as the octal number 8"},
        {"learning_rate=-07", "learning_rate: value -07 has a leading zero"},
        {"steps=12#x", "steps: value 12#x is not an integer"},
        // audit24: a whole number past 2^53 was "not an integer"; it is out of range
        {"steps=9223372036854775807", "steps: value 9223372036854775807 is out of range: expected an integer of magnitude below 2^53 (9007199254740992)"},
        {"vocab_size=-9007199254740992", "vocab_size: value -9007199254740992 is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qt_cg_config c;
        char err[1024] = "";
        char *over[] = {(char *)cases[i].over};
        int rc = qt_cg_config_load(&c, "configgen/configs", kTiny, 1, over, err, sizeof err);
        if (rc == 0 || !strstr(err, cases[i].want))
            fprintf(stderr, "case %s: rc %d err '%s'\n", cases[i].over, rc, err);
        CHECK(rc != 0);
        CHECK(strstr(err, cases[i].want) != NULL);
        qt_cg_config_free(&c);
    }
}

// An empty run file, or model_name: "", used to plan base.yml's default model (48 layers)
// silently. A run without a model must set every model key (base.yml's "model shape"
// section, qt_cg_model_keys) itself; the message names the file and the keys it lacks.
TEST(CgConfig, RunWithoutModelIsRefusedUnlessItSetsEveryModelKey)
{
    // qt_cg_model_keys is exactly the keys of base.yml's "---- model shape" section
    std::string base = slurp("configgen/configs/base.yml"), want, got;
    size_t at = base.find("# ---- model shape\n");
    CHECK(at != std::string::npos);
    size_t end = base.find("\n# ----", at + 1);
    for (size_t p = base.find('\n', at) + 1; p < end; p = base.find('\n', p) + 1)
        if (base[p] >= 'a' && base[p] <= 'z') want += base.substr(p, base.find(':', p) - p) + " ";
    for (int i = 0; i < qt_cg_n_model_keys; i++) got += std::string(qt_cg_model_keys[i]) + " ";
    STRCMP_EQUAL(want.c_str(), got.c_str());

    std::string dir = make_tmpdir(), gen = dir + "/gen";
    std::string empty = dir + "/empty.yml", noname = dir + "/noname.yml", full = dir + "/full.yml";
    write_file(empty, "");
    write_file(noname, "steps: 3\nmodel_name: \"\"\n");
    // every model key, qwen3-next-tiny's values and base.yml's for the rest
    std::string text = slurp("configgen/configs/models/qwen3-next-tiny.yml") +
        "shared_experts: 1\nnorm_topk_prob: true\ngdn_core_algorithm: \"recurrent\"\n"
        "use_qk_norm_in_gdn: true\nrope_min_timescale: 1\nuse_mrope: false\nmrope_section: []\n"
        "enable_dropout: false\ndropout_rate: 0.0\ndtype: \"float32\"\nweight_dtype: \"float32\"\n"
        "logits_via_embedding: false\nper_device_batch_size: 2\nmax_target_length: 16\n";
    write_file(full, text.c_str());
    struct {
        const char *run, *over, *want;
    } cases[] = {
        {empty.c_str(), NULL, ": no model: model_name is not set (configgen/configs/base.yml:6 "
         "gives \"\"), and the run does not set the model keys itself (missing decoder_block, "
         "base_emb_dim, base_num_decoder_layers, base_num_query_heads and 30 more); expected "
         "model_name: <a file stem under configgen/configs/models/, e.g. qwen3-next-tiny>, or "
         "every model key in the run"},
        {noname.c_str(), NULL, "noname.yml:2): no model, and the run does not set the model "
         "keys itself (missing decoder_block,"},
        {kTiny, "model_name=\"\"", "model_name=\"\" (command line): no model, and the run does "
         "not set the model keys itself (missing decoder_block,"},
        // one key short of a whole model: that key is named
        {full.c_str(), "vocab_size=64", NULL},
    };
    for (auto &c : cases) {
        std::vector<char *> argv = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(),
                                    (char *)c.run};
        if (c.over) argv.push_back((char *)c.over);
        char err[1024] = "";
        int rc = qt_cg_generate((int)argv.size(), argv.data(), err, sizeof err);
        if (!c.want) {
            if (rc) fprintf(stderr, "%s: %s\n", c.run, err);
            LONGS_EQUAL(0, rc); // every model key set in the run itself: accepted
            continue;
        }
        if (rc == 0 || !strstr(err, c.want))
            fprintf(stderr, "%s: rc %d err '%s' want '%s'\n", c.run, rc, err, c.want);
        CHECK(rc != 0);
        CHECK(strstr(err, c.want) != NULL);
        if (c.run != kTiny) CHECK(strstr(err, c.run) != NULL); // names the file
        CHECK(!path_exists(gen));
    }
    rm_rf(gen);
    // the same run without vocab_size: refused, naming it alone
    std::string nv = dir + "/novocab.yml";
    size_t v = text.find("vocab_size:");
    write_file(nv, (text.substr(0, v) + text.substr(text.find('\n', v) + 1)).c_str());
    char *argv[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)nv.c_str()};
    char err[1024] = "";
    CHECK(qt_cg_generate(4, argv, err, sizeof err) != 0);
    if (!strstr(err, "(missing vocab_size)")) fprintf(stderr, "%s\n", err);
    CHECK(strstr(err, "novocab.yml: no model: model_name is not set") != NULL);
    CHECK(strstr(err, "(missing vocab_size)") != NULL);
    CHECK(!path_exists(gen));
    rm_rf(dir);
}

// A run_name over the settings buffer (127 characters) used to be cut silently, so two runs
// could share a plan directory. Refused, naming the limit: given in a file, on the command
// line, or taken from the run file's name.
TEST(CgConfig, RunNameOverTheLimitIsRefused)
{
    std::string dir = make_tmpdir(), gen = dir + "/gen";
    std::string ok = "run_name=" + std::string(127, 'r'), over = "run_name=" + std::string(128, 'r');
    char err[1024] = "";
    char *a1[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)kTiny,
                  (char *)ok.c_str()};
    int rc = qt_cg_generate(5, a1, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc);
    CHECK(path_exists(gen + "/" + std::string(127, 'r') + "/plan.c"));
    rm_rf(gen);
    char *a2[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)kTiny,
                  (char *)over.c_str()};
    CHECK(qt_cg_generate(5, a2, err, sizeof err) != 0);
    std::string want = "run_name=" + std::string(40, 'r') + "... (command line): 128 characters, "
                       "over the limit of 127 (it names the plan directory and C symbols); "
                       "expected a shorter name";
    if (!strstr(err, want.c_str())) fprintf(stderr, "%s\n", err);
    CHECK(strstr(err, want.c_str()) != NULL);
    CHECK(!path_exists(gen));
    // in a run file
    std::string run = dir + "/r.yml";
    write_file(run, ("model_name: \"qwen3-next-tiny\"\nrun_name: \"" + std::string(200, 'x') +
                     "\"\n").c_str());
    char *a3[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)run.c_str()};
    CHECK(qt_cg_generate(4, a3, err, sizeof err) != 0);
    want = run + ":2): 200 characters, over the limit of 127";
    if (!strstr(err, want.c_str())) fprintf(stderr, "%s\n", err);
    CHECK(strstr(err, want.c_str()) != NULL);
    // from the run file's name
    std::string stem = dir + "/" + std::string(130, 's') + ".yml";
    write_file(stem, "model_name: \"qwen3-next-tiny\"\n");
    char *a4[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)stem.c_str()};
    CHECK(qt_cg_generate(4, a4, err, sizeof err) != 0);
    want = stem + ": run_name defaults to the file's name, " + std::string(40, 's') +
           "... (130 characters), over the limit of 127; set a shorter run_name";
    if (!strstr(err, want.c_str())) fprintf(stderr, "%s\n", err);
    CHECK(strstr(err, want.c_str()) != NULL);
    CHECK(!path_exists(gen));
    rm_rf(dir);
}

// ---------------------------------------------------------------- bad-config table

TEST_GROUP(CgBadConfig){};

TEST(CgBadConfig, EachRuleRefusesWithItsMessageAndWritesNothing)
{
    struct {
        const char *o1, *o2, *want; // o2 may hold several overrides separated by '|' 
    } cases[] = {
        {"base_emb_dim=0", NULL, "base_emb_dim=0 (command line): must be a positive integer"},
        {"num_experts=-4", NULL, "num_experts=-4 (command line): must be a positive"},
        {"gdn_num_value_heads=5", NULL, "gdn_num_value_heads must be divisible by gdn_num_key_heads"},
        {"base_num_query_heads=3", NULL, "must be divisible by base_num_kv_heads=2"},
        {"partial_rotary_factor=0.375", NULL, "Calculated rotary dimension (3) must be a multiple of 2"},
        {"partial_rotary_factor=0.1", NULL, "Calculated rotary dimension (0)"},
        {"num_experts_per_tok=5", NULL, "must be <= num_experts=4"},
        {"use_mrope=true", "mrope_section=[1, 0]", "sum(mrope_section) == rotary_dim/2 = 2"},
        {"decoder_block=llama2", NULL, "decoder_block=llama2 (command line): expected qwen3_next or qwen3_5"},
        {"gdn_core_algorithm=wy", NULL, "gdn_core_algorithm=wy (command line): expected chunked or recurrent"},
        {"dtype=float16", NULL, "dtype=float16 (command line): expected float32 or bfloat16"},
        {"weight_dtype=bfloat16", NULL, "weight_dtype=bfloat16 (command line): the master weights, Adam moments and gradients are kept in float32"},
        {"weight_dtype=float16", NULL, "weight_dtype=float16 (command line): the master weights"},
        {"opt_type=sgd", NULL, "only adamw is supported"},
        {"lr_schedule_type=linear", NULL, "lr_schedule_type=linear (command line): expected cosine (linear warmup + cosine decay) or wsd"},
        {"lr_schedule_type=wsd", "wsd_decay_steps_fraction=0.95", "warmup_steps_fraction + wsd_decay_steps_fraction = 0.1 + 0.95 = 1.05 is over 1"},
        {"wsd_decay_style=exp", NULL, "wsd_decay_style=exp (command line): expected linear or cosine"},
        {"eval_interval=0", NULL, "eval_interval=0 (command line): expected -1 (no evaluation)"},
        // issue 35: MaxText evaluates int(devices x eval_pdbs) sequences; qtrain any whole number
        {"eval_interval=10", "eval_per_device_batch_size=0.5", "eval_per_device_batch_size=0.5 (command line): 0.5 sequences per rank x num_ranks=1 = 0.5 sequences per eval batch; expected a whole number >= 1"},
        {"adam_eps_root=1e-8", NULL, "adam_eps_root=1e-8 (command line): only 0"},
        {"z_loss_multiplier=-1e-4", NULL, "z_loss_multiplier=-1e-4 (command line): expected 0 (off) or a multiplier > 0"},
        // the MoE form (config/moe.c, issues 32, 35): receive-buffer dropping over a context
        // axis in rounds (the experts replicated over context: a round's bound counts the
        // expert axis' 2 experts a rank), non-finite factors
        {"expert_dispatch=rounds", "ragged_buffer_factor=0.5|num_ranks=4|ici_fsdp_parallelism=1|ici_context_parallelism=2|ici_expert_parallelism=2|expert_chunk_rows=15", "expert_dispatch=rounds (command line): rounds of expert_chunk_rows=15 (command line) rows: a leaf (8 tokens) can bring 16 rows to one host (tokens x min(k 2, experts per rank 2)) and rounds cut between leaves only; expected expert_chunk_rows >= 16"},
        {"ragged_buffer_factor=nan", NULL, "ragged_buffer_factor: value nan is not a number"},
        {"capacity_factor=1e39", "sparse_matmul=false", "capacity_factor=1e39 (command line): is inf in float32"},
        {"capacity_factor=nan", "sparse_matmul=false", "capacity_factor: value nan is not a number"},
        {"per_device_batch_size=0", NULL, "per_device_batch_size=0 (command line): expected > 0 (sequences per rank; a fraction when tensor ranks share sequences)"},
        {"per_device_batch_size=abc", NULL, "per_device_batch_size: value abc is not a number"},
        // a fraction per batch group: MaxText's int(ranks x it), split evenly or padded (CgBatch)
        // per_device_batch_size >= 1 whose int(ranks x it) does not split evenly over the
        // batch groups: MaxText's input pipelines assert it divisible by the devices
        {"per_device_batch_size=2.5", "num_ranks=2", "per_device_batch_size=2.5 (command line): int(2 ranks x 2.5) = 5 sequences a microbatch do not split evenly over the 2 batch groups; MaxText refuses them too (its input pipelines assert the loaded batch divisible by the 2 devices); expected a multiple of 2 sequences: 4 (per_device_batch_size 2) or 6 (3)"},
        {"per_device_batch_size=1.25", "num_ranks=4|ici_fsdp_parallelism=2|ici_tensor_parallelism=2", "int(4 ranks x 1.25) = 5 sequences a microbatch do not split evenly over the 2 batch groups (the tensor x context ranks of a group share its sequences: 2 x 1)"},
        // int() = 0: MaxText trains no sequence
        {"per_device_batch_size=0.5", NULL, "per_device_batch_size=0.5 (command line): 0.5 sequences per rank x 1 rank = 0.5: MaxText trains int() = 0 sequences a microbatch (its loss_fn keeps the first int(devices x per_device_batch_size) rows of the loaded batch: none, a loss of 0); expected per_device_batch_size >= 1 (int(1 x it) >= 1 sequence)"},
        {"per_device_batch_size=0.3", "num_ranks=3", "0.3 sequences per rank x 3 ranks = 0.9: MaxText trains int() = 0 sequences a microbatch (its loss_fn keeps the first int(devices x per_device_batch_size) rows of the loaded batch: none, a loss of 0); expected per_device_batch_size >= 1/3 (int(3 x it) >= 1 sequence)"},
        // < 1, uneven: padded, but not with expert parallelism or pipeline stages (MaxText's
        // MoE and pipeline shard_maps refuse an uneven batch there)
        {"per_device_batch_size=0.5", "num_ranks=4|ici_fsdp_parallelism=2|ici_expert_parallelism=2", "int(4 ranks x 0.5) = 2 sequences a microbatch do not split evenly over the 4 batch groups; with expert parallelism (ici_expert_parallelism=2 (command line)) MaxText refuses them too (its MoE replicates an uneven batch only without it); expected a multiple of 4 sequences: 4 (per_device_batch_size 1)"},
        {"per_device_batch_size=0.75", "num_ranks=4|ici_fsdp_parallelism=2|ici_pipeline_parallelism=2", "int(4 ranks x 0.75) = 3 sequences a microbatch do not split evenly over the 2 batch groups; with pipeline stages (ici_pipeline_parallelism=2 (command line)) MaxText refuses them too (its pipeline shard_maps each microbatch's batch over the data axes); expected a multiple of 2 sequences: 2 (per_device_batch_size 0.5) or 4 (1)"},
        {"max_target_length=70000", NULL, "max_target_length=70000 (command line): expected 1..65536"},
        {"max_target_length=0", NULL, "expected 1..65536"},
        // audit24: 2^31 layers ended in "configgen: out of memory" (an abort), 10^6 took
        // 21 GB before the OOM killer: planning time grows with the square of the count
        {"base_num_decoder_layers=2147483648", NULL, "base_num_decoder_layers=2147483648 (command line): expected 1..1024 (configgen plans every layer"},
        {"base_num_decoder_layers=1025", NULL, "base_num_decoder_layers=1025 (command line): expected 1..1024"},
        {"gradient_accumulation_steps=0", NULL, "gradient_accumulation_steps=0 (command line): expected >= 1"},
        // too many sequences per step: the key the user set is blamed, the other named
        {"per_device_batch_size=3e9", NULL, "per_device_batch_size=3e9 (command line): with gradient_accumulation_steps=1 (configgen/configs/base.yml:47), per_device_batch_size x gradient_accumulation_steps = 3000000000 x 1 sequences per step exceed the 2147483647 that the 32 gradient tree levels hold"},
        {"gradient_accumulation_steps=1073741824", NULL, "gradient_accumulation_steps=1073741824 (command line): with per_device_batch_size=2 (configgen/configs/runs/test-next-tiny.yml:4), per_device_batch_size x gradient_accumulation_steps = 2 x 1073741824 sequences per step exceed the 2147483647"},
        // canonical token blocks: a power of two dividing the sequence; the leaves fit the tree
        {"context_blocks=3", NULL, "context_blocks=3 (command line): 3: expected 0 (= the context degree 1) or a power of two >= it that divides max_target_length=16 (configgen/configs/runs/test-next-tiny.yml:5)"},
        {"context_blocks=32", NULL, "32: expected 0 (= the context degree 1) or a power of two >= it that divides max_target_length=16"},
        {"context_blocks=-2", NULL, "context_blocks=-2 (command line): -2: expected 0"},
        {"packing=true", "eos_id=-2", "eos_id=-2 (command line): -2 with packing: true: expected the document separator's token id in 0..63 (vocab_size - 1; 151643 is <|endoftext|> of the Qwen vocabulary), or -1: the id the token file records"},
        {"packing=true", "eos_id=64", "eos_id=64 (command line): 64 with packing: true: expected the document separator's token id in 0..63"},
        {"context_blocks=16", "gradient_accumulation_steps=67108864", "context_blocks=16 (command line): 16 blocks x 134217728 sequences per step = 2147483648 gradient leaves exceed the 2147483647 that the 32 tree levels hold"},
        {"shard_mode=manual", NULL, "expected auto or explicit"},
        {"gradient_reduce=sometimes", NULL, "gradient_reduce=sometimes (command line): expected auto, step, microbatch or layer"},
        {"remat_policy=partial", NULL, "remat_policy=partial (command line): expected none, full or save_dot"},
        {"collective_overlap=sometimes", NULL, "collective_overlap=sometimes (command line): expected auto, on, off or all"},
        {"expert_chunk_rows=0", NULL, "expert_chunk_rows=0 (command line): 0: expected 1 .. 16777216 rows"},
        // the expert dispatch in rounds (config/dispatch.c)
        {"expert_dispatch=sometimes", NULL, "expert_dispatch=sometimes (command line): expected auto, whole or rounds"},
        {"expert_dispatch=rounds", NULL, "expert_dispatch=rounds (command line): rounds without expert parallelism (ici_expert_parallelism=1"},
        {"expert_dispatch=rounds", "ici_expert_parallelism=2|num_ranks=2|expert_chunk_rows=31", "expert_dispatch=rounds (command line): rounds of expert_chunk_rows=31 (command line) rows: a leaf (16 tokens) can bring 32 rows to one host (tokens x min(k 2, experts per rank 2)) and rounds cut between leaves only; expected expert_chunk_rows >= 32"},
        {"checkpoint_window_floats=0", NULL, "checkpoint_window_floats=0 (command line): 0: expected a positive float count"},
        {"param_gather=often", NULL, "param_gather=often (command line): expected auto, step or layer"},
        {"param_gather=layer", "gradient_reduce=step", "param_gather=layer (command line): layer with gradient_reduce=step: a layer's gathered weights are dropped after its backward"},
        {"param_gather=layer", NULL, "param_gather=layer (command line): layer on a mesh whose optimizer state is not split"},
        {"compile_topology=v9-8", NULL, "compile_topology=v9-8 (command line): expected <generation>-<cores or chips>"},
        {"compile_topology=v5p-8", "num_ranks=2", "compile_topology=v5p-8 has 4 devices; expected num_ranks unset or 4"},
        {"device_memory_gib=-1", NULL, "device_memory_gib=-1 (command line): expected a number of GiB"},
        // a tiny positive budget rounds to 0 bytes ("no budget"): refused, not ignored
        {"device_memory_gib=1e-30", NULL, "device_memory_gib=1e-30 (command line): a budget below 1 MiB"},
        // each mesh message blames the key the user set (not the base.yml default it meets)
        // tensor 3 without canonical_factor implies the factor 3 (issue 35): refused here by
        // the heads only, as MaxText would; a factor the user set must carry the axis's odd
        // part, and keeps the cap of 8 blocks
        {"num_ranks=3", "ici_fsdp_parallelism=1|ici_tensor_parallelism=3", "ici_tensor_parallelism=3 (command line): tensor parallelism 3 does not divide base_num_query_heads (4)"},
        {"num_ranks=6", "ici_fsdp_parallelism=1|ici_tensor_parallelism=6|canonical_factor=5", "ici_tensor_parallelism=6 (command line): resolves the tensor mesh axis to 6; expected a power of two, or a power of two times an odd factor of canonical_factor=5 (command line): a tensor rank holds its share of the canonical contraction blocks, head groups and vocabulary blocks, powers of two times canonical_factor on one rank too (config/canon.c), which 6 ranks do not split (docs/determinism.md \"Axes of any size\"); set canonical_factor: 3 or leave it unset (the axes then imply it)"},
        // tensor 3 x context 5 and tensor 16 imply the factor 15 and a cap of 15 / 16 blocks:
        // refused here only by the heads (MaxText's rule too)
        {"num_ranks=15", "ici_fsdp_parallelism=1|ici_tensor_parallelism=3|ici_context_parallelism=5", "ici_tensor_parallelism=3 (command line): tensor parallelism 3 does not divide base_num_query_heads (4)"},
        {"num_ranks=16", "ici_fsdp_parallelism=1|ici_tensor_parallelism=16", "ici_tensor_parallelism=16 (command line): tensor parallelism 16 does not divide base_num_query_heads (4)"},
        {"num_ranks=16", "ici_fsdp_parallelism=1|ici_tensor_parallelism=16|canonical_factor=1|base_num_query_heads=16|base_num_kv_heads=16|gdn_num_key_heads=16|gdn_num_value_heads=16|base_moe_mlp_dim=64|shared_expert_mlp_dim=64", "ici_tensor_parallelism=16 (command line): tensor parallelism 16 does not divide the canonical blocks of the experts' down contraction (8)"},
        {"num_ranks=3", "ici_fsdp_parallelism=1|ici_tensor_parallelism=3|canonical_factor=3", "ici_tensor_parallelism=3 (command line): tensor parallelism 3 does not divide base_num_query_heads (4)"},
        // vocab_parallel on tensor 3 (issue 35): 3 x 2^j vocabulary blocks dividing vocab_size,
        // a power of two of them a rank; without canonical_factor the axis implies it
        {"vocab_parallel=true", "num_ranks=3|ici_fsdp_parallelism=1|ici_tensor_parallelism=3|canonical_factor=3|per_device_batch_size=1|base_emb_dim=48|base_num_query_heads=6|base_num_kv_heads=3|head_dim=12|gdn_num_key_heads=3|gdn_num_value_heads=6|gdn_value_head_dim=6|base_moe_mlp_dim=24|shared_expert_mlp_dim=24", "vocab_blocks=0 (configgen/configs/base.yml:175): 0: expected 0 (= the tensor degree with vocab_parallel, else 1) or a power of two times a factor of canonical_factor=3 (command line) dividing vocab_size=64"},
        {"vocab_parallel=true", "num_ranks=3|ici_fsdp_parallelism=1|ici_tensor_parallelism=3|canonical_factor=3|per_device_batch_size=1|base_emb_dim=48|base_num_query_heads=6|base_num_kv_heads=3|head_dim=12|gdn_num_key_heads=3|gdn_num_value_heads=6|gdn_value_head_dim=6|base_moe_mlp_dim=24|shared_expert_mlp_dim=24|vocab_size=96|vocab_blocks=9", "vocab_blocks=9 (command line): 9: expected 0 (= the tensor degree with vocab_parallel, else 1) or a power of two times a factor of canonical_factor=3 (command line) dividing vocab_size=96 (command line)"},
        {"vocab_parallel=true", "num_ranks=2|ici_fsdp_parallelism=1|ici_tensor_parallelism=2|canonical_factor=3|vocab_size=96|vocab_blocks=6", "vocab_blocks=6 (command line): 6 with vocab_parallel: true on 2 tensor ranks (ici_tensor_parallelism=2 (command line)): expected a multiple of the tensor degree by a power of two"},
        {"vocab_parallel=true", "num_ranks=3|ici_fsdp_parallelism=1|ici_tensor_parallelism=3|per_device_batch_size=1|base_emb_dim=48|base_num_query_heads=6|base_num_kv_heads=3|head_dim=12|gdn_num_key_heads=3|gdn_num_value_heads=6|gdn_value_head_dim=6|base_moe_mlp_dim=24|shared_expert_mlp_dim=24", "vocab_blocks=0 (configgen/configs/base.yml:175): 0: expected 0 (= the tensor degree with vocab_parallel, else 1) or a power of two times a factor of canonical_factor 3 (implied by the tensor / context axes: canonical_factor=1 (configgen/configs/base.yml:"},
        {"ici_tensor_parallelism=4", "num_ranks=4", "tensor parallelism 4 does not divide base_num_kv_heads (2)"},
        // context parallelism: its limits (docs/context.md)
        {"ici_context_parallelism=2", "num_ranks=2|gradient_accumulation_steps=536870912", "per_device_batch_size=2 (configgen/configs/runs/test-next-tiny.yml:4): 2 x 1 tensor x 2 context ranks = 4 sequences per batch group, run as microbatches of one sequence each, x gradient_accumulation_steps=536870912 exceed the 32 gradient tree levels"},
        {"ici_context_parallelism=2", "num_ranks=2|per_device_batch_size=0.25", "0.25 sequences per rank x 2 ranks = 0.5: MaxText trains int() = 0 sequences"},
        {"ici_context_parallelism=2", "num_ranks=2|per_device_batch_size=0.5|gradient_reduce=step", "gradient_reduce=step (command line): step with context parallelism 2"},
        {"ici_context_parallelism=2", "num_ranks=2|per_device_batch_size=0.5|context_blocks=1", "context_blocks=1 (command line): 1: expected 0 (= the context degree 2) or a power of two >= it"},
        // expert 4 x context 2 on 4 experts: replicated over context, one expert a rank (not
        // 4 / 8 = 0 of the expert x context form)
        {"expert_dispatch=rounds", "ici_context_parallelism=2|num_ranks=8|ici_expert_parallelism=4|per_device_batch_size=0.5|expert_chunk_rows=7", "expert_dispatch=rounds (command line): rounds of expert_chunk_rows=7 (command line) rows: a leaf (8 tokens) can bring 8 rows to one host (tokens x min(k 2, experts per rank 1)) and rounds cut between leaves only; expected expert_chunk_rows >= 8"},
        {"ici_context_usp_ulysses_parallelism=3", "num_ranks=3|per_device_batch_size=0.5|canonical_factor=1", "ici_context_usp_ulysses_parallelism=3 (command line): resolves the context mesh axis to 3; expected a power of two"},
        {"ici_context_parallelism=2", "num_ranks=2|per_device_batch_size=0.5|max_target_length=15", "max_target_length=15 (command line): 15 is not a multiple of the context degree 2 (ici_context_parallelism=2 (command line)): each context rank holds an equal share of every sequence"},
        // pipeline parallelism (issue 36, config/pipeline.c): MaxText's rules, both keys named
        {"ici_pipeline_parallelism=2", "num_ranks=2|num_layers_per_pipeline_stage=3", "num_layers_per_pipeline_stage=3 (command line): 2 stages x 3 layers per stage = 6 do not divide the 4 pipeline layers"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|num_pipeline_microbatches=3", "num_pipeline_microbatches=3 (command line): 3 microbatches are not a multiple of the 2 stages (ici_pipeline_parallelism=2 (command line))"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|num_pipeline_microbatches=8", "8 microbatches do not divide the batch group's 4 sequences per accumulation step"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|num_pipeline_repeats=1", "num_pipeline_repeats=1 (command line): 2 stages (ici_pipeline_parallelism=2 (command line)) x 1 repeats x 1 layers per stage"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|pipeline_schedule=zigzag", "pipeline_schedule=zigzag (command line): unknown schedule"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|pipeline_parallel_layers=2", "pipeline_parallel_layers=2 (command line): qtrain pipelines every decoder layer"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|num_layers_per_pipeline_stage=0", "num_layers_per_pipeline_stage=0 (command line): expected 1 .. 4 layers per stage"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|num_pipeline_repeats=5", "num_pipeline_repeats=5 (command line): expected -1 (= pipeline layers / (stages x layers per stage)) or 1 .. 4"},
        {"ici_pipeline_parallelism=2", "num_ranks=2|per_device_batch_size=0.25", "per_device_batch_size=0.25 (command line): 0.25 sequences per rank x 2 ranks = 0.5: MaxText trains int() = 0 sequences"},
        {"ici_expert_parallelism=8", "num_ranks=8", "expert parallelism 8 does not divide num_experts=4"},
        {"ici_tensor_parallelism=2", NULL, "ici_tensor_parallelism=2 (command line): ici_fsdp_parallelism=-1 (configgen/configs/base.yml:71) cannot be filled: num_ranks=1 (configgen/configs/base.yml:65) is not a multiple of the other ici axes' product x the slices (dcn) = 2"},
        {"ici_fsdp_parallelism=1", "ici_data_parallelism=2", "ici_data_parallelism=2 (command line): the mesh product of ici_*/dcn_* parallelism is 2 but num_ranks=1 (configgen/configs/base.yml:65); expected them equal"},
        {"ici_fsdp_parallelism=2", NULL, "ici_fsdp_parallelism=2 (command line): the mesh product of ici_*/dcn_* parallelism is 2 but num_ranks=1 (configgen/configs/base.yml:65); expected them equal"},
        {"num_ranks=4", "ici_fsdp_parallelism=1", "num_ranks=4 (command line): the mesh product of ici_*/dcn_* parallelism is 1 and no ici_* axis is -1 to fill from num_ranks=4; expected axes multiplying to 4, or one ici_* axis of -1"},
        {"ici_expert_parallelism=-1", NULL, "ici_expert_parallelism=-1 (command line): only one ici_*_parallelism may be -1 (ici_fsdp_parallelism is -1 too)"},
        {"ici_data_parallelism=-1", NULL, "ici_data_parallelism=-1 (command line): only one ici_*_parallelism may be -1 (ici_fsdp_parallelism is -1 too)"},
        {"dcn_fsdp_parallelism=2", NULL, "dcn_fsdp_parallelism=2 (command line): ici_fsdp_parallelism=-1 (configgen/configs/base.yml:71) cannot be filled: num_ranks=1 (configgen/configs/base.yml:65) is not a multiple of the other ici axes' product x the slices (dcn) = 2"},
        {"dcn_pipeline_parallelism=2", "num_ranks=2|num_pipeline_microbatches=3", "num_pipeline_microbatches=3 (command line): 3 microbatches are not a multiple of the 2 stages (dcn_pipeline_parallelism=2 (command line))"},
        // fsdp and expert may have any size that divides what they split (issue 35)
        {"dcn_expert_parallelism=3", "num_ranks=3", "dcn_expert_parallelism=3 (command line): expert parallelism 3 does not divide num_experts=4"},
        {"dcn_context_parallelism=3", "num_ranks=3|per_device_batch_size=0.5|canonical_factor=1", "dcn_context_parallelism=3 (command line): resolves the context mesh axis to 3; expected a power of two, or a power of two times an odd factor of canonical_factor=1 (command line)"},
        {"canonical_factor=2", NULL, "canonical_factor=2 (command line): 2: expected an odd number from 1 to 8"},
        {"canonical_factor=9", NULL, "canonical_factor=9 (command line): 9: expected an odd number from 1 to 8"},
        {"context_blocks=6", "canonical_factor=3", "context_blocks=6 (command line): 6: expected 0 (= the context degree 1) or a power of two times a factor of canonical_factor=3 (command line), a multiple of the context degree by a power of two, that divides max_target_length=16"},
        {"context_blocks=5", "canonical_factor=3|max_target_length=20", "context_blocks=5 (command line): 5: expected 0"},
        {"logical_axis_rules=[['embed', 'bogus']]", NULL, "unknown mesh axis 'bogus'"},
        {"logical_axis_rules=[['embed']]", NULL, "expected [logical_name, mesh_axis"},
        {"normalization_layer_epsilon=0", NULL, "must be > 0"},
        {"enable_dropout=true", NULL, "dropout is not supported"},
        {"logits_via_embedding=true", NULL, "tied embeddings are not supported"},
        {"model_name=nosuchmodel", NULL, "models/nosuchmodel.yml: cannot open"},
        {"base_emb_dimm=3", NULL, "did you mean 'base_emb_dim'"},
        {"run_name=a/b", NULL, "run_name=a/b (command line): expected letters"},
        {"run_name=..", NULL, "run_name=.. (command line): expected letters"},
        {"run_name=.hidden", NULL, "starting with a letter or digit"},
        {"gdn_key_head_dim=1024", NULL, "gdn_key_head_dim=1024 (command line): must be <= 512"},
        // size products beyond 2^56 elements (2^40 x 2^40 wraps to a 0-element embedding)
        {"base_emb_dim=1099511627776", "vocab_size=1099511627776",
         "base_emb_dim=1099511627776 x vocab_size=1099511627776 (embedding and lm_head) exceeds 2^56 elements"},
        {"num_experts=4194304", "base_moe_mlp_dim=4294967296", "num_experts=4194304 x base_moe_mlp_dim=4294967296"},
        {"max_target_length=65536", "base_num_query_heads=17179869184",
         "(attention probabilities) exceeds 2^56 elements"},
        // float32 values: finite, normal when nonzero, < 1 where it must be
        {"learning_rate=1e39", NULL, "learning_rate=1e39 (command line): is inf in float32"},
        {"adam_eps=1e-50", NULL, "adam_eps=1e-50 (command line): becomes 0 in float32"},
        {"normalization_layer_epsilon=1e-40", NULL, "normalization_layer_epsilon=1e-40 (command line): becomes a subnormal in float32"},
        {"adam_weight_decay=-1e39", NULL, "adam_weight_decay=-1e39 (command line): is -inf in float32"},
        {"adam_b2=0.999999999", NULL, "adam_b2=0.999999999 (command line): rounds to 1 in float32"},
        // the multi-token-prediction head (config/mtp.c, docs/model.md 1.8)
        {"mtp_num_layers=-1", NULL, "mtp_num_layers=-1 (command line): expected 0 (no multi-token-prediction head) or a depth >= 1"},
        {"mtp_num_layers=8", NULL, "mtp_num_layers=8 (command line): expected at most 7 depths (the head's parts stack with the main model's per token block, at most 8 parts: qt_ops.def STACK)"},
        {"mtp_num_layers=1", "mtp_loss_scaling_factor=-0.5", "mtp_loss_scaling_factor=-0.5 (command line): expected a finite number >= 0"},
        {"mtp_loss_scaling_factor=1e39", NULL, "mtp_loss_scaling_factor=1e39 (command line): is inf in float32"},
        {"mtp_num_layers=1", "max_target_length=1", "mtp_num_layers=1 (command line): 1 depths need sequences longer than that (max_target_length=1 (command line))"},
        {"mtp_keep_layers=8", NULL, "mtp_keep_layers=8 (command line): expected 0 (a loaded checkpoint's mtp.* head is skipped) up to 7"},
        {"mtp_keep_layers=1", "mtp_num_layers=1", "mtp_keep_layers=1 (command line): with a trained head (mtp_num_layers=1 (command line)) its mtp.* tensors are saved anyway"},
        // mtp_eval_target_module (config/mtp.c): a depth of the head, named with it
        {"mtp_eval_target_module=1", NULL, "mtp_eval_target_module=1 (command line): the acceptance rate compares a depth of the MTP head with the main model, and there is no head (mtp_num_layers=0 (configgen/configs/base.yml:275)); expected 0, or mtp_num_layers >= 1"},
        {"mtp_eval_target_module=2", "mtp_num_layers=1|eval_interval=3", "mtp_eval_target_module=2 (command line): the head has 1 depth (mtp_num_layers=1 (command line)); expected 0 (off) or a depth 1 .. 1"},
        {"mtp_eval_target_module=-1", "mtp_num_layers=1", "mtp_eval_target_module=-1 (command line): expected 0 (no acceptance rate) or a whole depth of the MTP head"},
        {"mtp_eval_target_module=8", "mtp_num_layers=7", "mtp_eval_target_module=8 (command line): expected 0 (no acceptance rate)"},
        // MaxText's keys outside base.yml (config/maxtext_keys.c): a value qtrain cannot honour
        // is refused with the reason and what to do instead
        {"enable_checkpointing=true", NULL, "enable_checkpointing=true (command line): MaxText's key, not honoured by qtrain: configgen plans no checkpoint; qtrain writes a checkpoint only where its command line says: save=DIR (with save_every=N)"},
        {"checkpoint_period=100", NULL, "checkpoint_period=100 (command line): MaxText's key, not honoured by qtrain: the checkpoint period is a run-time key of qtrain: save_every=N"},
        {"load_parameters_path=/ckpt/0/items", NULL, "load_parameters_path=/ckpt/0/items (command line): MaxText's key, not honoured by qtrain: qtrain loads a checkpoint at run time: load=PATH"},
        {"load_full_state_path=/ckpt", NULL, "load_full_state_path=/ckpt (command line): MaxText's key, not honoured by qtrain: qtrain resumes at run time: load=DIR"},
        {"metrics_file=m.txt", NULL, "metrics_file=m.txt (command line): MaxText's key, not honoured by qtrain: the metrics file is a run-time key of qtrain: metrics=FILE"},
        {"init_weights_seed=3", NULL, "init_weights_seed=3 (command line): MaxText's key, not honoured by qtrain: the initialisation seed is a run-time key of qtrain: seed=N"},
        {"attention=paged", NULL, "attention=paged (command line): MaxText's key, not honoured by qtrain: expected autoselected, dot_product, flash or cudnn_flash_te"},
        {"attention_type=local_sliding", NULL, "attention_type=local_sliding (command line): MaxText's key, not honoured by qtrain: the Qwen3-Next / Qwen3.5 full-attention layers are global causal attention; expected global"},
        {"matmul_precision=fastest", NULL, "matmul_precision=fastest (command line): MaxText's key, not honoured by qtrain: expected default, high or highest"},
        {"grad_dtype=bfloat16", NULL, "grad_dtype=bfloat16 (command line): MaxText's key, not honoured by qtrain: the gradients are kept in float32"},
        {"mu_dtype=bfloat16", NULL, "mu_dtype=bfloat16 (command line): MaxText's key, not honoured by qtrain: Adam's moments are kept in float32"},
        {"quantization=int8", NULL, "quantization=int8 (command line): MaxText's key, not honoured by qtrain: qtrain trains without quantization"},
        {"adamw_mask=['.*norm']", NULL, "adamw_mask=[.*norm] (command line): MaxText's key, not honoured by qtrain: qtrain's AdamW decays every parameter, norms included"},
        {"trainable_parameters_mask=['.*indexer.*']", NULL, "trainable_parameters_mask=[.*indexer.*] (command line): MaxText's key, not honoured by qtrain: qtrain trains every parameter"},
        {"skip_step_on_spikes=True", NULL, "skip_step_on_spikes=true (command line): MaxText's key, not honoured by qtrain: qtrain applies every step's update"},
        {"enable_data_shuffling=true", NULL, "enable_data_shuffling=true (command line): MaxText's key, not honoured by qtrain: qtrain reads the token file's windows in file order"},
        {"abort_on_nan_loss=false", NULL, "abort_on_nan_loss=false (command line): MaxText's key, not honoured by qtrain: qtrain always stops on a non-finite loss"},
        {"use_multimodal=true", NULL, "use_multimodal=true (command line): MaxText's key, not honoured by qtrain: qtrain trains the text model only"},
        {"mlp_activations=[gelu, linear]", NULL, "mlp_activations=[gelu, linear] (command line): MaxText's key, not honoured by qtrain: the experts are SwiGLU"},
        {"dtype=bfloat16", "float32_logits=true", "float32_logits=true (command line): MaxText's key, not honoured by qtrain: with dtype=bfloat16 qtrain's precision rules are fixed"},
        {"dtype=bfloat16", "cast_logits_to_fp32=false", "cast_logits_to_fp32=false (command line): MaxText's key, not honoured by qtrain: with dtype=bfloat16"},
        // the last value counts, as for base.yml's keys
        {"enable_checkpointing=false", "enable_checkpointing=true", "enable_checkpointing=true (command line): MaxText's key"},
        // a bool key takes YAML's core-schema spellings only (yes / no / 1 are not bools)
        {"sparse_matmul=yes", NULL, "command line: sparse_matmul: value yes is not true or false (True / False and TRUE / FALSE are taken too)"},
        {"compile_topology_num_slices=2", NULL, "compile_topology_num_slices=2 (command line): MaxText's key, not honoured by qtrain: compile_topology plans the devices of one slice here; for N slices give num_ranks=N x the topology's devices, dcn_data_parallelism=N"},
        {"steps=-1", NULL, "steps=-1 (command line): -1 takes learning_rate_schedule_steps (as MaxText), which is -1; expected steps >= 1 or learning_rate_schedule_steps >= 1"},
        {"steps=-2", NULL, "steps=-2 (command line): expected >= 1 (or -1: = learning_rate_schedule_steps)"},
    };
    std::string out = make_tmpdir();
    std::string gen = out + "/gen";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        std::vector<char *> argv = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(),
                                    (char *)kTiny, (char *)cases[i].o1};
        std::vector<std::string> more;
        for (const char *o = cases[i].o2; o && *o;) {
            const char *bar = strchr(o, '|');
            more.push_back(bar ? std::string(o, (size_t)(bar - o)) : std::string(o));
            o = bar ? bar + 1 : NULL;
        }
        for (std::string &o : more) argv.push_back(&o[0]);
        char err[1024] = "";
        int rc = qt_cg_generate((int)argv.size(), argv.data(), err, sizeof err);
        if (rc == 0 || !strstr(err, cases[i].want))
            fprintf(stderr, "case %s %s: rc %d err '%s' want '%s'\n", cases[i].o1,
                    cases[i].o2 ? cases[i].o2 : "", rc, err, cases[i].want);
        CHECK(rc != 0);
        CHECK(strstr(err, cases[i].want) != NULL);
        CHECK(!path_exists(gen)); // nothing written at all
    }
    // The same command without a bad value succeeds and writes the four files.
    char *ok[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)kTiny};
    char err[1024] = "";
    int rc = qt_cg_generate(4, ok, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    LONGS_EQUAL(0, rc);
    CHECK(path_exists(gen + "/test-next-tiny/plan.c"));
    CHECK(path_exists(gen + "/test-next-tiny/plan.h"));
    CHECK(path_exists(gen + "/test-next-tiny/plan_main.c"));
    CHECK(path_exists(gen + "/test-next-tiny/plan.txt"));
    rm_rf(out);
}

// ---------------------------------------------------------------- sharding resolver

TEST_GROUP(CgShard)
{
    qt_cg_config c;
    qt_cg_settings s;
    void setup()
    {
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_config_load(&c, "configgen/configs", kTiny, 0, NULL, err, sizeof err));
        LONGS_EQUAL(0, qt_cg_settings_resolve(&c, &s, err, sizeof err));
    }
    void teardown()
    {
        qt_cg_settings_free(&s);
        qt_cg_config_free(&c);
    }
    void expect(const int32_t mesh[QT_MESH_COUNT], int ndim, const char *const *names,
                const char *const *want_desc, const uint8_t *want_spec)
    {
        uint8_t spec[QT_MAX_DIMS];
        char desc[QT_MAX_DIMS][64];
        qt_cg_resolve(s.rules, s.n_rules, mesh, ndim, names, spec, desc);
        for (int d = 0; d < ndim; d++) {
            if (strcmp(desc[d], want_desc[d]) || spec[d] != want_spec[d])
                fprintf(stderr, "dim %d (%s): got %s/0x%x want %s/0x%x\n", d,
                        names[d] ? names[d] : "None", desc[d], spec[d], want_desc[d],
                        want_spec[d]);
            STRCMP_EQUAL(want_desc[d], desc[d]);
            LONGS_EQUAL(want_spec[d], spec[d]);
        }
    }
};

#define BIT(a) (uint8_t)(1u << (a))

// Hand-derived from base.yml's rule order (docs/sharding.md section 2).
TEST(CgShard, HypotheticalMeshFsdp4Tensor2Expert2)
{
    const int32_t mesh[QT_MESH_COUNT] = {1, 4, 2, 2, 1};
    {   // mlp's rule takes fsdp_transpose first, so embed falls to its 2nd rule
        const char *n[] = {"embed", "mlp"};
        const char *d[] = {"(fsdp,expert)", "(tensor)"};
        const uint8_t sp[] = {(uint8_t)(BIT(QT_MESH_FSDP) | BIT(QT_MESH_EXPERT)), BIT(QT_MESH_TENSOR)};
        expect(mesh, 2, n, d, sp);
    }
    {   // HF [out,in] order of a routed expert gate_up_proj
        const char *n[] = {"exp", "mlp_moe", "embed_moe"};
        const char *d[] = {"(expert)", "(tensor)", "(fsdp)"};
        const uint8_t sp[] = {BIT(QT_MESH_EXPERT), BIT(QT_MESH_TENSOR), BIT(QT_MESH_FSDP)};
        expect(mesh, 3, n, d, sp);
    }
    {   // embedding table
        const char *n[] = {"vocab", "embed_vocab"};
        const char *d[] = {"(tensor)", "(fsdp,expert)"};
        const uint8_t sp[] = {BIT(QT_MESH_TENSOR), (uint8_t)(BIT(QT_MESH_FSDP) | BIT(QT_MESH_EXPERT))};
        expect(mesh, 2, n, d, sp);
    }
    {   // two dims wanting tensor: q_heads' rule comes first, mlp has no other rule
        const char *n[] = {"q_heads", "mlp"};
        const char *d[] = {"(tensor)", "-"};
        const uint8_t sp[] = {BIT(QT_MESH_TENSOR), 0};
        expect(mesh, 2, n, d, sp);
    }
    {   // None dims and replicated-by-rule names
        const char *n[] = {NULL, "embed", "kv"};
        const char *d[] = {"-", "(fsdp,expert)", "-"};
        const uint8_t sp[] = {0, (uint8_t)(BIT(QT_MESH_FSDP) | BIT(QT_MESH_EXPERT)), 0};
        expect(mesh, 3, n, d, sp);
    }
}

TEST(CgShard, ActivationsOnDataAndTensor)
{
    const int32_t mesh[QT_MESH_COUNT] = {2, 4, 2, 2, 1};
    const char *n[] = {"activation_batch", "activation_norm_length", "activation_embed"};
    const char *d[] = {"(data,fsdp,expert)", "-", "(tensor)"};
    const uint8_t sp[] = {(uint8_t)(BIT(QT_MESH_DATA) | BIT(QT_MESH_FSDP) | BIT(QT_MESH_EXPERT)), 0,
                          BIT(QT_MESH_TENSOR)};
    expect(mesh, 3, n, d, sp);
}

TEST(CgShard, OneRankMeshIsReplicated)
{
    const int32_t mesh[QT_MESH_COUNT] = {1, 1, 1, 1, 1};
    const char *n[] = {"exp", "mlp_moe", "embed_moe"};
    const char *d[] = {"-", "-", "-"};
    const uint8_t sp[] = {0, 0, 0};
    expect(mesh, 3, n, d, sp);
}

// ---------------------------------------------------------------- real plans

struct CgPlan {
    qt_cg_config c;
    qt_cg_settings s;
    qt_cg_graph g;
    int build(const char *run, int n_over = 0, char **over = NULL)
    {
        char err[1024] = "";
        int rc = qt_cg_plan_build(NULL, run, n_over, over, &c, &s, &g, err, sizeof err);
        if (rc) fprintf(stderr, "%s: %s\n", run, err);
        return rc;
    }
    ~CgPlan() { qt_cg_plan_free(&c, &s, &g); }
};

static bool is_planned_role(int r)
{
    return r != QT_ROLE_PARAM && r != QT_ROLE_GRAD && r != QT_ROLE_ADAM_M && r != QT_ROLE_ADAM_V;
}

static std::string report_of(CgPlan &p);

TEST_GROUP(CgPlanner){};

// Heads that do not divide by tensor x context are owned unevenly (issue 35): no head count
// is refused by the head exchange. The GDN layers then hold their weights whole over context
// (CTX_OWN_UNITS copies a rank's units; the *_WGRAD_U kinds complete the leaves): context 4
// on 2 GDN key heads (owned 0/1/0/1) and context 3 on 4 (1/1/2) plan, with the ops and
// attributes the firmware reads; an even split (context 2 on 2) has none of them.
TEST(CgPlanner, GdnHeadsOwnedUnevenlyOverContext)
{
    struct {
        const char *over;
        int64_t U, C, slots, n_own;
    } cases[] = {
        {"num_ranks=4|ici_context_parallelism=4", 2, 4, 1, 3},
        {"num_ranks=3|ici_context_parallelism=3|per_device_batch_size=0.3333333333333333|"
         "max_target_length=24|gdn_num_key_heads=4|gdn_num_value_heads=8", 4, 3, 2, 3},
        // 12 query / 6 kv, 6 GDN key / 12 value heads on context 4: the norm's 4 groups of
        // 3 value heads make a unit 3 key heads (2 units, owned 0/1/0/1)
        {"num_ranks=4|ici_context_parallelism=4|per_device_batch_size=0.25|gdn_num_key_heads=6|"
         "gdn_num_value_heads=12|base_num_kv_heads=6|base_num_query_heads=12", 2, 4, 1, 3},
        {"num_ranks=2|ici_context_parallelism=2", 0, 2, 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        std::vector<std::string> parts;
        std::string o = cases[k].over;
        for (size_t a = 0, b; a <= o.size(); a = b + 1) {
            b = o.find('|', a);
            if (b == std::string::npos) b = o.size();
            parts.push_back(o.substr(a, b - a));
        }
        std::vector<char *> argv;
        for (auto &x : parts) argv.push_back(&x[0]);
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny, (int)argv.size(), argv.data()));
        qt_cg_gdn_units u;
        LONGS_EQUAL(cases[k].U > 0, qt_cg_ctx_gdn_uneven(&p.s, &u));
        int own = 0, conv_u = 0, gates_u = 0, norm_u = 0, even_wgrad = 0;
        for (int i = 0; i < p.g.nmb; i++) {
            const qt_op *o2 = &p.g.mb[i];
            if (o2->kind == QT_OP_CTX_OWN_UNITS) {
                own++;
                LONGS_EQUAL(cases[k].U, QT_A(o2, CTX_OWN_UNITS, U));
                LONGS_EQUAL(cases[k].C, QT_A(o2, CTX_OWN_UNITS, C));
                CHECK(p.g.ts[QT_T(o2, CTX_OWN_UNITS, x)].param >= 0);
            }
            if (o2->kind == QT_OP_GDN_CONV_WGRAD_U) conv_u++;
            if (o2->kind == QT_OP_GDN_GATES_WGRAD_U) gates_u++;
            if (o2->kind == QT_OP_GATED_RMSNORM_WGRAD_U) {
                norm_u++;
                LONGS_EQUAL(cases[k].U, QT_A(o2, GATED_RMSNORM_WGRAD_U, U));
                LONGS_EQUAL(cases[k].slots * u.gpu, QT_A(o2, GATED_RMSNORM_WGRAD_U, groups));
            }
            if (o2->kind == QT_OP_GDN_CONV_WGRAD || o2->kind == QT_OP_GATED_RMSNORM_WGRAD)
                even_wgrad++;
        }
        const int layers = own / 3;
        LONGS_EQUAL(cases[k].n_own ? 3 : 0, layers);
        LONGS_EQUAL(layers, conv_u);
        LONGS_EQUAL(layers, gates_u);
        LONGS_EQUAL(layers, norm_u);
        LONGS_EQUAL(cases[k].U > 0 ? 0 : 6, even_wgrad);
        if (cases[k].U > 0) {
            LONGS_EQUAL(cases[k].slots, u.slots);
            const std::string rep = report_of(p);
            CHECK(rep.find("GDN heads owned unevenly over context") != std::string::npos);
        }
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&p.g, err, sizeof err));
    }
}

// Re-derives lifetimes from the schedule independently of the planner and checks every
// pair; exact integer checks, no tolerance.
TEST(CgPlanner, InvariantsHoldOnEveryRunConfig)
{
    for (size_t r = 0; r < sizeof kRuns / sizeof kRuns[0]; r++) {
        CgPlan p;
        LONGS_EQUAL(0, p.build(kRuns[r]));
        const qt_cg_graph &g = p.g;
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&g, err, sizeof err));
        LONGS_EQUAL(0, (long)(g.arena_bytes % (2 << 20)));
        std::vector<int> first(g.nt, -1), last(g.nt, -1);
        for (int o = 0; o < g.nmb; o++)
            for (int s = 0; s < QT_OP_MAX_T; s++) {
                int id = g.mb[o].t[s];
                if (id < 0) continue;
                if (first[id] < 0) first[id] = o;
                last[id] = o;
            }
        int32_t whole[] = {g.tokens, g.targets, g.loss_seq, g.lb_seq, g.table};
        for (int32_t w : whole)
            if (w >= 0) {
                first[w] = 0;
                last[w] = g.nmb - 1;
            }
        for (int i = 0; i < g.nt; i++) {
            const qt_tensor &t = g.ts[i].t;
            LONGS_EQUAL(0, (long)(t.offset % 64));
            CHECK(t.offset >= 0 && t.offset + 4 * t.numel <= g.arena_bytes);
            if (is_planned_role(t.role)) CHECK(t.offset >= g.act_offset);
            else CHECK(t.offset + 4 * t.numel <= g.params_offset + 4 * g.n_param_elems);
        }
        for (int i = 0; i < g.nt; i++) {
            if (!is_planned_role(g.ts[i].t.role)) continue;
            for (int j = i + 1; j < g.nt; j++) {
                if (!is_planned_role(g.ts[j].t.role)) continue;
                bool live = first[i] <= last[j] && first[j] <= last[i];
                const qt_tensor &a = g.ts[i].t, &b = g.ts[j].t;
                bool bytes = a.offset < b.offset + 4 * b.numel && b.offset < a.offset + 4 * a.numel;
                if (live && bytes)
                    fprintf(stderr, "%s: %s and %s overlap\n", kRuns[r], a.name, b.name);
                CHECK(!(live && bytes));
            }
        }
        // flat regions: params disjoint, in order; params, Adam moments, tree levels and leaf
        // scratch laid out back to back without overlap, below the activations; the gradient
        // region is the top tree level itself (bit length of the leaf count minus 1)
        for (int q = 1; q < g.np; q++)
            CHECK(g.ps[q].flat_offset >= g.ps[q - 1].flat_offset + g.ps[q - 1].numel);
        int64_t seqs = p.s.tr.micro_batch * p.s.tr.grad_accum, bits = 0;
        while (seqs >> bits) bits++;
        LONGS_EQUAL(bits, g.n_tree_levels);
        const int64_t pb = 4 * g.n_param_elems;
        LONGS_EQUAL(0, g.params_offset);
        LONGS_EQUAL(pb, g.adam_m_offset - g.params_offset);
        LONGS_EQUAL(pb, g.adam_v_offset - g.adam_m_offset);
        LONGS_EQUAL(pb, g.tree_offset[0] - g.adam_v_offset);
        for (int l = 1; l < g.n_tree_levels; l++)
            LONGS_EQUAL(pb, g.tree_offset[l] - g.tree_offset[l - 1]);
        LONGS_EQUAL(g.tree_offset[g.n_tree_levels - 1], g.grads_offset);
        LONGS_EQUAL(pb, g.leaf_scratch_offset - g.grads_offset);
        CHECK(g.leaf_scratch_offset + 4 * g.leaf_scratch_elems <= g.act_offset);
        // one parameter-sized region fewer than a separate gradient region would take
        LONGS_EQUAL((3 + bits) * pb, g.leaf_scratch_offset);
        // sharing happens: the planned peak is below the plain sum of activation bytes
        int64_t sum = 0;
        for (int i = 0; i < g.nt; i++)
            if (is_planned_role(g.ts[i].t.role)) sum += (4 * g.ts[i].t.numel + 63) / 64 * 64;
        CHECK(g.act_peak < sum);
    }
}

TEST(CgPlanner, CheckerCatchesAnOverlap)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny));
    // tokens and targets are live together for the whole schedule
    p.g.ts[p.g.targets].t.offset = p.g.ts[p.g.tokens].t.offset;
    char err[1024] = "";
    CHECK(qt_cg_check_plan(&p.g, err, sizeof err) != 0);
    CHECK(strstr(err, "live together") != NULL);
}

TEST(CgPlanner, CheckerCatchesBadFlatRegions)
{
    char err[1024] = "";
    {
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny));
        LONGS_EQUAL(0, qt_cg_check_plan(&p.g, err, sizeof err));
        // a gradient region of its own (where it was before it became the top tree level)
        p.g.grads_offset = p.g.adam_m_offset;
        CHECK(qt_cg_check_plan(&p.g, err, sizeof err) != 0);
        CHECK(strstr(err, "top tree level") != NULL);
    }
    {
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny));
        // the top level (and so the gradients) moved onto the second Adam moment
        const int top = p.g.n_tree_levels - 1;
        p.g.tree_offset[top] = p.g.grads_offset = p.g.adam_v_offset;
        CHECK(qt_cg_check_plan(&p.g, err, sizeof err) != 0);
        CHECK(strstr(err, "overlap") != NULL);
    }
    {
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny));
        p.g.n_tree_levels++;  // one level too many: the top one would never be written
        CHECK(qt_cg_check_plan(&p.g, err, sizeof err) != 0);
        CHECK(strstr(err, "tree levels") != NULL);
    }
}

// The gradient tree's 32 levels (qt_plan.h, issue 35: 24 before) hold 2^31 - 1 sequences per
// step and batch group: test-next-tiny with 2 x (2^30 - 1) sequences plans 31 levels (one
// parameter copy each), passes the plan checks and writes all 32 tree_offset entries; with
// 2 x 2^23 (25 levels, past the former limit) likewise; a plan of at most 24 levels writes
// the former 24 entries (its plan.c and hash as before the table grew). Nothing runs them.
TEST(CgPlanner, TreeLevelsHoldTwoToTheThirtyOneSequences)
{
    const struct {
        const char *over;
        int levels, written;
    } cases[] = {{"gradient_accumulation_steps=1073741823", 31, 32},
                 {"gradient_accumulation_steps=8388608", 25, 32},
                 {"gradient_accumulation_steps=4194304", 24, 24}};
    std::string dir = make_tmpdir();
    for (auto &c : cases) {
        CgPlan p;
        char *over[] = {(char *)c.over};
        LONGS_EQUAL(0, p.build(kTiny, 1, over));
        LONGS_EQUAL(c.levels, p.g.n_tree_levels);
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&p.g, err, sizeof err));
        LONGS_EQUAL(p.g.tree_offset[c.levels - 1], p.g.grads_offset);
        const int64_t pb = 4 * p.g.n_param_elems;
        LONGS_EQUAL(pb * (c.levels - 1), p.g.tree_offset[c.levels - 1] - p.g.tree_offset[0]);
        // plan.c: the tree_offset initializer has `written` entries
        std::string gen = dir + "/" + std::to_string(c.levels);
        char *argv[] = {(char *)"configgen", (char *)"-o", (char *)gen.c_str(), (char *)kTiny,
                        (char *)c.over};
        LONGS_EQUAL(0, qt_cg_generate(5, argv, err, sizeof err));
        const std::string pc = slurp(gen + "/test-next-tiny/plan.c");
        const size_t at = pc.find(".tree_offset = {");
        CHECK(at != std::string::npos);
        const std::string init = pc.substr(at, pc.find('}', at) - at);
        int n = 1;
        for (char ch : init) n += ch == ',';
        LONGS_EQUAL(c.written, n);
    }
    rm_rf(dir);
}

TEST_GROUP(CgSchedule){};

TEST(CgSchedule, DefBeforeUseAndOneWgradPerParam)
{
    for (size_t r = 0; r < sizeof kRuns / sizeof kRuns[0]; r++) {
        CgPlan p;
        LONGS_EQUAL(0, p.build(kRuns[r]));
        const qt_cg_graph &g = p.g;
        char err[1024] = "";
        int rc = qt_cg_check_schedule(&g, err, sizeof err);
        if (rc) fprintf(stderr, "%s: %s\n", kRuns[r], err);
        LONGS_EQUAL(0, rc);
        // independent re-check of the two central properties
        std::vector<int> written(g.nt, 0), wgrads(g.np, 0);
        for (int i = 0; i < g.nt; i++)
            written[i] = g.ts[i].t.role == QT_ROLE_PARAM || g.ts[i].t.role == QT_ROLE_INPUT ||
                         g.ts[i].t.role == QT_ROLE_TABLE;
        for (int o = 0; o < g.nmb; o++) {
            const qt_op &op = g.mb[o];
            const char *sl = qt_cg_op_slots(op.kind);
            for (int s = 0; sl[s]; s++)
                if (op.t[s] >= 0 && (sl[s] == 'r' || sl[s] == 'a')) CHECK(written[op.t[s]]);
            for (int s = 0; sl[s]; s++)
                if (op.t[s] >= 0 && sl[s] != 'r' && sl[s] != 'p') written[op.t[s]] = 1;
            if (op.flags & QT_OPF_WGRAD) {
                wgrads[op.a[8]]++;
                if (op.a[9] >= 0) wgrads[op.a[9]]++;
            }
        }
        for (int q = 0; q < g.np; q++) LONGS_EQUAL(1, wgrads[q]);
        // forward first, XENT last of the forward, lb_seq zeroed first when on
        LONGS_EQUAL(QT_OP_XENT, g.mb[g.n_fwd - 1].kind);
        if (g.lb_seq >= 0) {
            LONGS_EQUAL(QT_OP_ZERO, g.mb[0].kind);
            LONGS_EQUAL(g.lb_seq, g.mb[0].t[0]);
        }
        // the only init op is the rotary table
        LONGS_EQUAL(1, g.ninit);
        LONGS_EQUAL(QT_OP_ROPE_TABLE, g.init[0].kind);
    }
}

// The MTP head's depths share mtp.fc, the two pre-fc norms and mtp.norm (docs/model.md 1.8):
// each of those keeps one WGRAD, which reads its D readers' rows STACKed per leaf (D x the
// leaf's tokens, model/autodiff.c); a per-depth parameter (the layers') keeps the leaf's
// tokens. Checked with D = 2 and, at one block per sequence and at context_blocks 4, that
// every STACK a WGRAD reads has D parts.
TEST(CgSchedule, MtpSharedWeightsOneStackedWgrad)
{
    const char *runs[] = {"configgen/configs/runs/mtp2-next-1r.yml",
                          "configgen/configs/runs/mtp2-next-1r-nb4.yml"};
    for (const char *run : runs) {
        CgPlan p;
        LONGS_EQUAL(0, p.build(run));
        const qt_cg_graph &g = p.g;
        LONGS_EQUAL(2, g.s->mtp_layers);
        const int64_t Sb = qt_cg_leaf_tokens(g.s);
        std::vector<int> writer(g.nt, -1); // the STACK op that writes a tensor
        for (int o = 0; o < g.nmb; o++)
            if (g.mb[o].kind == QT_OP_STACK) writer[g.mb[o].t[0]] = o;
        int shared = 0, layer = 0;
        for (int o = 0; o < g.nmb; o++) {
            const qt_op &op = g.mb[o];
            if (!(op.flags & QT_OPF_WGRAD)) continue;
            const char *nm = g.ps[op.a[QT_A_WGRAD_PARAM]].name;
            const bool is_shared = !strcmp(nm, "mtp.fc.weight") ||
                                   !strcmp(nm, "mtp.pre_fc_norm_embedding.weight") ||
                                   !strcmp(nm, "mtp.pre_fc_norm_hidden.weight") ||
                                   !strcmp(nm, "mtp.norm.weight");
            int64_t rows;
            if (op.kind == QT_OP_MATMUL_WGRAD) rows = QT_A(&op, MATMUL_WGRAD, seq_rows);
            else if (op.kind == QT_OP_RMSNORM_WGRAD) rows = QT_A(&op, RMSNORM_WGRAD, seq_rows);
            else continue;
            if (is_shared) {
                shared++;
                LONGS_EQUAL(2 * Sb, rows);
                // dy and x (slots 0, 1) come from a STACK of the two depths
                for (int k = 0; k < 2; k++) {
                    const int w = writer[op.t[k]];
                    CHECK(w >= 0 && w < o);
                    LONGS_EQUAL(2, QT_A(&g.mb[w], STACK, n));
                }
            } else if (!strncmp(nm, "mtp.layers.1.", 13) && op.kind == QT_OP_RMSNORM_WGRAD &&
                       strstr(nm, "layernorm")) {
                layer++;
                LONGS_EQUAL(Sb, rows);
            }
        }
        LONGS_EQUAL(4, shared);
        LONGS_EQUAL(2, layer);
    }
}

TEST(CgSchedule, CheckerCatchesDuplicateWgradAndUseBeforeDef)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny));
    char err[1024] = "";
    int last_wgrad = -1;
    for (int o = 0; o < p.g.nmb; o++)
        if (p.g.mb[o].flags & QT_OPF_WGRAD) last_wgrad = o;
    CHECK(last_wgrad > 0);
    qt_op saved = p.g.mb[last_wgrad - 1];
    p.g.mb[last_wgrad - 1] = p.g.mb[last_wgrad];
    CHECK(qt_cg_check_schedule(&p.g, err, sizeof err) != 0);
    p.g.mb[last_wgrad - 1] = saved;
    LONGS_EQUAL(0, qt_cg_check_schedule(&p.g, err, sizeof err));
    // move the first backward op (reads d.final_h / d.logits) before the forward
    qt_op first = p.g.mb[0];
    p.g.mb[0] = p.g.mb[p.g.n_fwd + 1];
    CHECK(qt_cg_check_schedule(&p.g, err, sizeof err) != 0);
    CHECK(strstr(err, "before it is written") != NULL);
    p.g.mb[0] = first;
}

TEST(CgSchedule, CheckerCatchesAttributesThatDisagreeWithShapes)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny));
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_check_schedule(&p.g, err, sizeof err));
    // (kind, attribute to bump): shapes of the operands, and the kernel scratch sizes
    const int cases[][2] = {{QT_OP_MATMUL_FWD, 1}, {QT_OP_EXPERT_FFN_FWD, 1},
                            {QT_OP_GDN_CORE_FWD, 1}, {QT_OP_ATTN_FWD, 1},
                            {QT_OP_GDN_CORE_BWD, 3}, {QT_OP_ATTN_BWD, 1},
                            {QT_OP_EXPERT_FFN_BWD, 4}, {QT_OP_EXPERT_FFN_WGRAD, 4}};
    for (const auto &cs : cases) {
        int at = -1;
        for (int o = 0; o < p.g.nmb && at < 0; o++)
            if (p.g.mb[o].kind == cs[0]) at = o;
        CHECK(at >= 0);
        p.g.mb[at].a[cs[1]] += 1;  // one size off
        CHECK(qt_cg_check_schedule(&p.g, err, sizeof err) != 0);
        CHECK(strstr(err, "the attributes need") != NULL);
        p.g.mb[at].a[cs[1]] -= 1;
    }
    LONGS_EQUAL(0, qt_cg_check_schedule(&p.g, err, sizeof err));
}

TEST(CgSchedule, LoadBalanceConstants)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build("configgen/configs/runs/test-next-lb.yml"));
    // c = w*E/(B*L) = 0.01*4/(2*4); backward seed c*B*S. Compared as floats with a relative
    // tolerance of 1e-6 (one float rounding of a double product).
    int seen = 0;
    for (int o = 0; o < p.g.nmb; o++) {
        const qt_op &op = p.g.mb[o];
        if (op.kind == QT_OP_MOE_ROUTE_FWD) {
            DOUBLES_EQUAL(0.005, op.f[0], 0.005 * 1e-6);
            LONGS_EQUAL(p.g.lb_seq, op.t[2]);
            seen++;
        }
        if (op.kind == QT_OP_MOE_ROUTE_BWD) DOUBLES_EQUAL(0.005 * 2 * 16, op.f[0], 0.16 * 1e-6);
    }
    LONGS_EQUAL(4, seen);
}

// Which layers are full attention, for both decoders: layer l (0-based) is full attention iff
// (l+1) % inhomogeneous_layer_cycle_interval == 0 (docs/model.md section 1.1,
// as Hugging Face: with interval 4, layers 3, 7, 11, ...), every other layer Gated DeltaNet.
// The expected lists are written out by hand, not recomputed with the formula; a layer's kind
// is read back from its parameters (self_attn.* vs linear_attn.*) and the schedule's
// ATTN_FWD / GDN_CORE_FWD op counts.
TEST(CgSchedule, FullAttentionLayersFollowTheCycle)
{
    struct {
        const char *layers, *cycle;
        int n_layers;
        int full[8];  // the full-attention layers, -1 terminated
    } cases[] = {
        {"base_num_decoder_layers=4", "inhomogeneous_layer_cycle_interval=4", 4, {3, -1}},
        {"base_num_decoder_layers=8", "inhomogeneous_layer_cycle_interval=4", 8, {3, 7, -1}},
        {"base_num_decoder_layers=6", "inhomogeneous_layer_cycle_interval=3", 6, {2, 5, -1}},
        {"base_num_decoder_layers=6", "inhomogeneous_layer_cycle_interval=2", 6, {1, 3, 5, -1}},
        {"base_num_decoder_layers=3", "inhomogeneous_layer_cycle_interval=1", 3, {0, 1, 2, -1}},
        {"base_num_decoder_layers=5", "inhomogeneous_layer_cycle_interval=5", 5, {4, -1}},
        // layer counts that are not a multiple of the cycle (issue 35: MaxText's unscanned
        // decoder builds them; docs/refusals.md): the rule is the same, a partial last cycle
        {"base_num_decoder_layers=6", "inhomogeneous_layer_cycle_interval=4", 6, {3, -1}},
        {"base_num_decoder_layers=7", "inhomogeneous_layer_cycle_interval=3", 7, {2, 5, -1}},
        {"base_num_decoder_layers=2", "inhomogeneous_layer_cycle_interval=4", 2, {-1}},
    };
    const char *runs[] = {kTiny, "configgen/configs/runs/test-35-tiny.yml"};
    for (const char *run : runs) {
        for (auto &c : cases) {
            char l_ov[64], c_ov[64];
            snprintf(l_ov, sizeof l_ov, "%s", c.layers);
            snprintf(c_ov, sizeof c_ov, "%s", c.cycle);
            char *over[] = {l_ov, c_ov};
            CgPlan p;
            LONGS_EQUAL(0, p.build(run, 2, over));
            std::vector<int> want(c.n_layers, 0), attn(c.n_layers, 0), gdn(c.n_layers, 0);
            int n_full = 0;
            for (int k = 0; c.full[k] >= 0; k++, n_full++) want[c.full[k]] = 1;
            for (int q = 0; q < p.g.np; q++) {
                const qt_param &pa = p.g.ps[q];
                if (pa.layer < 0) continue;
                CHECK(pa.layer < c.n_layers);
                if (strstr(pa.name, ".self_attn.")) attn[pa.layer]++;
                if (strstr(pa.name, ".linear_attn.")) gdn[pa.layer]++;
            }
            for (int l = 0; l < c.n_layers; l++) {
                if ((attn[l] > 0) != (want[l] == 1) || (gdn[l] > 0) != (want[l] == 0))
                    fprintf(stderr, "%s %s %s: layer %d has %d self_attn and %d linear_attn "
                            "parameters, expected %s\n", run, c.layers, c.cycle, l, attn[l],
                            gdn[l], want[l] ? "full attention" : "Gated DeltaNet");
                CHECK_EQUAL(want[l] == 1, attn[l] > 0);
                CHECK_EQUAL(want[l] == 0, gdn[l] > 0);
            }
            int n_attn_ops = 0, n_gdn_ops = 0;
            for (int o = 0; o < p.g.nmb; o++) {
                n_attn_ops += p.g.mb[o].kind == QT_OP_ATTN_FWD;
                n_gdn_ops += p.g.mb[o].kind == QT_OP_GDN_CORE_FWD;
            }
            LONGS_EQUAL(n_full, n_attn_ops);
            LONGS_EQUAL(c.n_layers - n_full, n_gdn_ops);
        }
    }
}

// Keys MaxText accepts and ignores (issue 35, docs/refusals.md): each is accepted with a note
// naming it, its value and why (s.ignored: configgen's stderr and plan.txt), and the plan is
// the plan without it (the same hash: config_text, which records the value, is not hashed).
TEST_GROUP(CgIgnored){};

// mtp_eval_target_module (config/mtp.c, model/graph.c): without eval_interval it is noted
// and the plan is the plain MTP plan, hash for hash; with an eval, exactly one MTP_ACCEPT
// on the stacked logits and the head's targets just before XENT_MTP, depth k, whose
// training forward is otherwise the plain plan's (the same ops before and after it); the
// plan without the key has none.
TEST(CgIgnored, MtpEvalTargetModuleNotedWithoutEvalAndOneOpWithIt)
{
    const char *mtp2 = "configgen/configs/runs/test-next-mtp2.yml";
    CgPlan base;
    LONGS_EQUAL(0, base.build(mtp2));
    char k1[] = "mtp_eval_target_module=1";
    char *o1[] = {k1};
    CgPlan noted;
    LONGS_EQUAL(0, noted.build(mtp2, 1, o1));
    CHECK(strstr(noted.s.ignored, "mtp_eval_target_module=1 (command line) is ignored: "
                                  "eval_interval is -1") != NULL);
    CHECK(noted.g.hash == base.g.hash);
    char ev[] = "eval_interval=3", k2[] = "mtp_eval_target_module=2";
    char *o2[] = {ev}, *o3[] = {ev, k2};
    CgPlan plain, acc;
    LONGS_EQUAL(0, plain.build(mtp2, 1, o2));
    LONGS_EQUAL(0, acc.build(mtp2, 2, o3));
    CHECK(acc.g.hash != plain.g.hash);
    int n_acc = 0, at = -1;
    for (int i = 0; i < acc.g.nmb; i++)
        if (acc.g.mb[i].kind == QT_OP_MTP_ACCEPT) n_acc++, at = i;
    for (int i = 0; i < plain.g.nmb; i++) CHECK(plain.g.mb[i].kind != QT_OP_MTP_ACCEPT);
    LONGS_EQUAL(1, n_acc);
    LONGS_EQUAL(acc.g.n_fwd - 2, at);
    const qt_op *a = &acc.g.mb[at], *x = &acc.g.mb[at + 1];
    LONGS_EQUAL(QT_OP_XENT_MTP, x->kind);
    LONGS_EQUAL(QT_T(x, XENT_MTP, logits), QT_T(a, MTP_ACCEPT, logits));
    LONGS_EQUAL(QT_T(x, XENT_MTP, targets), QT_T(a, MTP_ACCEPT, targets));
    LONGS_EQUAL(2, QT_A(a, MTP_ACCEPT, k));
    LONGS_EQUAL(3, QT_A(a, MTP_ACCEPT, n));
    LONGS_EQUAL(plain.g.nmb + 1, acc.g.nmb);
    for (int i = 0; i < plain.g.nmb; i++)
        LONGS_EQUAL(plain.g.mb[i].kind, acc.g.mb[i < at ? i : i + 1].kind);
}

TEST(CgIgnored, KeysMaxTextIgnoresAreNotedAndLeaveThePlan)
{
    struct {
        const char *over, *want;
    } cases[] = {
        {"shared_experts=0", "shared_experts=0 (command line) is ignored: the qwen3_next / qwen3_5 MoE block has exactly one gated shared expert"},
        {"shared_experts=2", "shared_experts=2 (command line) is ignored"},
        {"norm_topk_prob=false", "norm_topk_prob=false (command line) is ignored: the routing weights are the softmax over the selected k logits"},
        {"eval_steps=5", "eval_steps=5 (command line) is ignored: eval_interval is -1 (no evaluation), as in MaxText"},
        {"target_eval_loss=1.5", "target_eval_loss=1.5 (command line) is ignored: eval_interval is -1"},
    };
    CgPlan base;
    LONGS_EQUAL(0, base.build(kTiny));
    STRCMP_EQUAL("", base.s.ignored);
    for (auto &c : cases) {
        char ov[64];
        snprintf(ov, sizeof ov, "%s", c.over);
        char *over[] = {ov};
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny, 1, over));
        if (!strstr(p.s.ignored, c.want))
            fprintf(stderr, "%s: ignored '%s', want '%s'\n", c.over, p.s.ignored, c.want);
        CHECK(strstr(p.s.ignored, c.want) != NULL);
        CHECK(p.g.hash == base.g.hash);
    }
    // two at once: both named, in order
    char a[] = "shared_experts=0", b[] = "eval_start_step=3";
    char *two[] = {a, b};
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny, 2, two));
    const char *x = strstr(p.s.ignored, "shared_experts=0"), *y = strstr(p.s.ignored, "; eval_start_step=3");
    CHECK(x != NULL && y != NULL && x < y);
    CHECK(p.g.hash == base.g.hash);
}

// ---------------------------------------------------------------- a MaxText user's config

TEST_GROUP(CgMaxText){};

// YAML's core-schema bools (MaxText's OmegaConf reads True / False: its published
// qwen3.5-35b-a3b.yml has `norm_topk_prob: True` and `enable_dropout: False`, its recipes pass
// `sparse_matmul=True scan_layers=True megablox=True`): taken as true / false, in a file and on
// the command line, stored lower-case, so the plan is the one of the lower-case spelling.
TEST(CgMaxText, BoolSpellingsOfYamlCoreSchema)
{
    char a[] = "sparse_matmul=true", b[] = "scan_layers=true", c0[] = "packing=false";
    char *lower[] = {a, b, c0};
    CgPlan base;
    LONGS_EQUAL(0, base.build(kTiny, 3, lower));
    char d[] = "sparse_matmul=True", e[] = "scan_layers=TRUE", f[] = "packing=False";
    char *upper[] = {d, e, f};
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny, 3, upper));
    CHECK(p.g.hash == base.g.hash);
    STRCMP_EQUAL("true", qt_cg_config_find(&p.c, "sparse_matmul")->val->s);
    STRCMP_EQUAL("true", qt_cg_config_find(&p.c, "scan_layers")->val->s);
    STRCMP_EQUAL("false", qt_cg_config_find(&p.c, "packing")->val->s);
    // a model-file form: a run file with MaxText's capitalised values
    std::string dir = make_tmpdir();
    std::string run = dir + "/caps.yml";
    write_file(run, "model_name: \"qwen3-next-tiny\"\nnorm_topk_prob: True\nenable_dropout: False\n"
                    "remat_policy: \"none\"\nper_device_batch_size: 2\nmax_target_length: 16\n");
    CgPlan q;
    LONGS_EQUAL(0, q.build(run.c_str()));
    STRCMP_EQUAL("true", qt_cg_config_find(&q.c, "norm_topk_prob")->val->s);
    STRCMP_EQUAL("false", qt_cg_config_find(&q.c, "enable_dropout")->val->s);
    STRCMP_EQUAL("", q.s.ignored); // norm_topk_prob True is the normalised routing, no note
    rm_rf(dir);
}

// MaxText's routine keys that change nothing qtrain trains (config/maxtext_keys.c): accepted,
// each noted with why, and the plan is the plan without them (same hash, no base.yml key).
TEST(CgMaxText, KeysWithoutEffectAreNotedAndLeaveThePlan)
{
    struct {
        const char *over, *want;
    } cases[] = {
        {"enable_checkpointing=False", "enable_checkpointing=false (command line): no checkpoint is planned; qtrain writes a checkpoint only where its command line says: save=DIR"},
        {"async_checkpointing=false", "async_checkpointing=false (command line): qtrain saves synchronously"},
        {"base_output_directory=gs://bucket/runs", "base_output_directory=gs://bucket/runs (command line): qtrain writes only the files its command line names"},
        {"tokenizer_path=Qwen/Qwen3-Next-80B-A3B-Instruct", "tokenizer_path=Qwen/Qwen3-Next-80B-A3B-Instruct (command line): the tokenizer is a run-time key of qtrain, tokenizer=PATH"},
        {"tokenizer_type=huggingface", "tokenizer_type=huggingface (command line)"},
        {"dataset_type=synthetic", "dataset_type=synthetic (command line): qtrain reads the token file its command line names (data=FILE"},
        {"attention=flash", "attention=flash (command line): a kernel choice"},
        {"use_tokamax_gmm=True", "use_tokamax_gmm=true (command line): a kernel choice"},
        {"matmul_precision=highest", "matmul_precision=highest (command line): qtrain's matmuls multiply and add in float32"},
        {"activations_in_float32=true", "activations_in_float32=true (command line): dtype is float32"},
        {"float32_logits=true", "float32_logits=true (command line): dtype is float32"},
        {"grad_dtype=float32", "grad_dtype=float32 (command line): the gradients are float32"},
        {"log_period=10", "log_period=10 (command line): qtrain prints and writes every step"},
        {"profiler=xplane", "profiler=xplane (command line): no XLA / nsys profiler"},
        {"checkpoint_storage_concurrent_gb=1024", "checkpoint_storage_concurrent_gb=1024 (command line): Orbax I/O tuning"},
        {"adamw_mask=[]", "adamw_mask=[] (command line): weight decay applies to every parameter"},
        {"mlp_activations=[\"silu\", \"linear\"]", "mlp_activations=[silu, linear] (command line): the experts' activation is SwiGLU"},
        {"hf_access_token=hf_abc123", "hf_access_token=<not shown> (command line): qtrain downloads nothing"},
        {"max_prefill_predict_length=4", "max_prefill_predict_length=4 (command line): inference (decode) only"},
        {"compile_topology_num_slices=1", "compile_topology_num_slices=1 (command line): one slice"},
    };
    CgPlan base;
    LONGS_EQUAL(0, base.build(kTiny));
    STRCMP_EQUAL("", base.s.mt_ignored);
    for (auto &c : cases) {
        char ov[128];
        snprintf(ov, sizeof ov, "%s", c.over);
        char *over[] = {ov};
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny, 1, over));
        if (!strstr(p.s.mt_ignored, c.want))
            fprintf(stderr, "%s: noted '%s', want '%s'\n", c.over, p.s.mt_ignored, c.want);
        CHECK(strstr(p.s.mt_ignored, c.want) != NULL);
        CHECK(strstr(p.s.mt_ignored, "hf_abc123") == NULL);
        STRCMP_EQUAL("", p.s.ignored);
        CHECK(p.g.hash == base.g.hash);
        LONGS_EQUAL(base.c.n, p.c.n); // no base.yml key: the config text is the same
        CHECK(report_of(p).find("MaxText keys without effect here: ") != std::string::npos);
    }
    CHECK(report_of(base).find("MaxText keys without effect") == std::string::npos);
    // a recipe's command line at once (MaxText tests/end_to_end/tpu/qwen/next/
    // qwen3-next-80b-a3b/2_test_qwen3_next_80b_a3b.sh, pre-training, without weight_dtype=bfloat16,
    // which base.yml's rules refuse)
    const char *recipe[] = {"base_output_directory=/tmp/out", "run_name=tokamax_gmm_pre_training",
                            "tokenizer_type=huggingface", "tokenizer_path=Qwen/Qwen3-Next-80B-A3B-Instruct",
                            "dataset_type=synthetic", "enable_checkpointing=false", "attention=flash",
                            "sparse_matmul=True", "use_tokamax_gmm=True", "dtype=bfloat16",
                            "per_device_batch_size=1", "steps=5", "max_target_length=16"};
    std::vector<std::string> hold(recipe, recipe + sizeof recipe / sizeof recipe[0]);
    std::vector<char *> argv;
    for (auto &h : hold) argv.push_back(&h[0]);
    CgPlan r;
    LONGS_EQUAL(0, r.build(kTiny, (int)argv.size(), argv.data()));
    CHECK(strstr(r.s.mt_ignored, "use_tokamax_gmm=true (command line)") != NULL);
    CHECK(strstr(r.s.mt_ignored, "; attention=flash (command line)") != NULL);
}

// The table of MaxText keys outside base.yml never names a base.yml key (a key moved into
// base.yml must leave the table, where its entry could never be reached).
TEST(CgMaxText, TableHoldsNoBaseKey)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny));
    for (int i = 0; i < p.c.n; i++) {
        if (qt_cg_mt_key_known(p.c.k[i].key)) fprintf(stderr, "in both: %s\n", p.c.k[i].key);
        CHECK(!qt_cg_mt_key_known(p.c.k[i].key));
    }
    CHECK(qt_cg_mt_key_known("enable_checkpointing"));
}

// steps -1 is MaxText's "the schedule's length" (configs/types.py: steps = learning_rate_schedule_steps):
// the plan of steps = that length; both -1 is refused naming both.
TEST(CgMaxText, StepsMinusOneIsTheScheduleLength)
{
    char a[] = "steps=40", b[] = "learning_rate_schedule_steps=40";
    char *explicit_[] = {a, b};
    CgPlan base;
    LONGS_EQUAL(0, base.build(kTiny, 2, explicit_));
    char c0[] = "steps=-1", d[] = "learning_rate_schedule_steps=40";
    char *minus[] = {c0, d};
    CgPlan p;
    LONGS_EQUAL(0, p.build(kTiny, 2, minus));
    LONGS_EQUAL(40, p.s.tr.steps);
    LONGS_EQUAL(40, p.s.tr.schedule_steps);
    CHECK(p.g.hash == base.g.hash);
}

// A run file named after a model (runs/qwen3.5-35b.yml) gives run_name its stem, which a '.'
// makes no name: the message says the name came from the file, not run_name=''.
TEST(CgMaxText, RunNameFromTheFileNameIsNamed)
{
    std::string dir = make_tmpdir();
    std::string run = dir + "/qwen3.5-tiny.yml";
    write_file(run, "model_name: \"qwen3-next-tiny\"\n");
    qt_cg_config c;
    qt_cg_settings s;
    qt_cg_graph g;
    char err[1024] = "";
    int rc = qt_cg_plan_build(NULL, run.c_str(), 0, NULL, &c, &s, &g, err, sizeof err);
    CHECK(rc != 0);
    std::string want = "run_name defaults to the run file's name, 'qwen3.5-tiny' (" + run + "), which has '.'";
    if (!strstr(err, want.c_str())) fprintf(stderr, "got: %s\n", err);
    CHECK(strstr(err, want.c_str()) != NULL);
    CHECK(strstr(err, "set run_name in the run file or rename it") != NULL);
    qt_cg_plan_free(&c, &s, &g);
    rm_rf(dir);
}

// ---------------------------------------------------------------- the eval batch (issue 35)

TEST_GROUP(CgEvalBatch){};

// MaxText's global eval batch, int(devices x eval_per_device_batch_size), whatever the
// training microbatch: eval_batch = ceil(E / the sequence groups) slots a group, eval_global =
// E only when the slots are not all real (so the plans of whole eval batches keep their hash).
TEST(CgEvalBatch, AnyWholeNumberOfSequencesOverTheMesh)
{
    struct {
        const char *over; // '|'-separated overrides after eval_interval=10
        int64_t mb, batch, global;
    } cases[] = {
        {"", 2, 2, 0},                                           // = per_device_batch_size
        {"eval_per_device_batch_size=4", 2, 4, 0},               // whole microbatches
        {"eval_per_device_batch_size=3", 2, 3, 0},               // the second forward padded
        {"eval_per_device_batch_size=1", 2, 1, 0},               // less than a microbatch
        {"eval_per_device_batch_size=1.5|num_ranks=2|ici_data_parallelism=2", 2, 2, 3},
        {"eval_per_device_batch_size=0.5|num_ranks=2|ici_data_parallelism=2", 2, 1, 1},
        {"eval_per_device_batch_size=0.5|num_ranks=2|ici_tensor_parallelism=2", 4, 1, 0},
        {"eval_per_device_batch_size=0.7|num_ranks=10|ici_data_parallelism=10", 2, 1, 7},
        // truncated as MaxText's int(): 1.5 evaluates 1 sequence (group 1's slot padded)
        {"eval_per_device_batch_size=0.75|num_ranks=2|ici_data_parallelism=2", 2, 1, 1},
    };
    for (auto &c : cases) {
        char buf[256], *over[8];
        int n = 0;
        snprintf(buf, sizeof buf, "eval_interval=10%s%s", *c.over ? "|" : "", c.over);
        for (char *t = strtok(buf, "|"); t && n < 8; t = strtok(NULL, "|")) over[n++] = t;
        CgPlan p;
        LONGS_EQUAL(0, p.build(kTiny, n, over));
        if (p.s.tr.eval_batch != c.batch || p.s.tr.eval_global != c.global)
            fprintf(stderr, "%s: eval_batch %lld eval_global %lld\n", c.over,
                    (long long)p.s.tr.eval_batch, (long long)p.s.tr.eval_global);
        LONGS_EQUAL(c.mb, p.s.tr.micro_batch);
        LONGS_EQUAL(c.batch, p.s.tr.eval_batch);
        LONGS_EQUAL(c.global, p.s.tr.eval_global);
    }
    // eval_global enters the hash only when set: 3 sequences over DP2 (2 + 1 and a pad) is
    // not 4 (2 + 2), though both have 2 slots a group
    char a[] = "eval_interval=10", b[] = "num_ranks=2", d[] = "ici_data_parallelism=2",
         e3[] = "eval_per_device_batch_size=1.5", e4[] = "eval_per_device_batch_size=2";
    char *o3[] = {a, b, d, e3}, *o4[] = {a, b, d, e4};
    CgPlan p3, p4;
    LONGS_EQUAL(0, p3.build(kTiny, 4, o3));
    LONGS_EQUAL(0, p4.build(kTiny, 4, o4));
    LONGS_EQUAL(p3.s.tr.eval_batch, p4.s.tr.eval_batch);
    CHECK(p3.g.hash != p4.g.hash);
}

// ---------------------------------------------------------------- per_device_batch_size fractions

TEST_GROUP(CgBatch){};

// A per_device_batch_size that leaves a fraction of a sequence per batch group: MaxText
// trains int(ranks x it) sequences a microbatch (types.py calculate_global_batch_sizes);
// when they split evenly over the batch groups the plan is the plan of that whole batch,
// hash for hash (docs/refusals.md; the uneven splits are refused: CgBadConfig)
TEST(CgBatch, FractionTrainsMaxTextsTruncatedBatch)
{
    struct {
        const char *frac, *whole, *mesh; // mesh: overrides separated by '|'
        int64_t total;
    } cases[] = {
        {"per_device_batch_size=2.5", "per_device_batch_size=2", "", 2},
        {"per_device_batch_size=2.99", "per_device_batch_size=2", "", 2},
        {"per_device_batch_size=2.25", "per_device_batch_size=2", "num_ranks=2", 4},
        {"per_device_batch_size=0.75", "per_device_batch_size=0.5", "num_ranks=2|ici_fsdp_parallelism=1|ici_tensor_parallelism=2", 1},
        {"per_device_batch_size=0.75", "per_device_batch_size=0.5", "num_ranks=2|ici_fsdp_parallelism=1|ici_context_parallelism=2", 1},
    };
    for (auto &c : cases) {
        char buf[2][256];
        char *over[2][8];
        int n[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            snprintf(buf[k], sizeof buf[k], "%s%s%s", k ? c.whole : c.frac, c.mesh[0] ? "|" : "", c.mesh);
            for (char *t = strtok(buf[k], "|"); t; t = strtok(NULL, "|")) over[k][n[k]++] = t;
        }
        CgPlan f, w;
        LONGS_EQUAL_TEXT(0, f.build(kTiny, n[0], over[0]), c.frac);
        LONGS_EQUAL_TEXT(0, w.build(kTiny, n[1], over[1]), c.whole);
        LONGS_EQUAL_TEXT(c.total, f.s.batch_maxtext, c.frac);
        LONGS_EQUAL(0, w.s.batch_maxtext);
        LONGS_EQUAL(w.s.tr.global_batch, f.s.tr.global_batch);
        CHECK_TEXT(f.g.hash == w.g.hash, c.frac);
    }
}

// per_device_batch_size < 1 whose int(ranks x it) does not split evenly over the batch
// groups (issue 35): MaxText loads one sequence per device and trains the first n, sharded
// unevenly in its step; qtrain gives each group ceil(n / groups) slots and pads the rest
// (global_batch = n x G, the real ones; tests/e2e/47_lifted.sh: one rank's bits)
TEST(CgBatch, UnevenFractionPadsTheLastSlots)
{
    struct {
        const char *mesh; // overrides separated by '|'
        int64_t micro, global, padded, accum;
    } cases[] = {
        {"per_device_batch_size=0.75|num_ranks=4|ici_fsdp_parallelism=4", 1, 3, 1, 1},
        {"per_device_batch_size=0.5|num_ranks=2", 1, 1, 1, 1},
        {"per_device_batch_size=0.75|num_ranks=4|ici_fsdp_parallelism=2|ici_tensor_parallelism=2", 2, 3, 1, 1},
        {"per_device_batch_size=0.75|num_ranks=4|ici_fsdp_parallelism=4|gradient_accumulation_steps=2", 1, 6, 1, 2},
        // context: the group's 2 slots run as 2 microbatches of one
        {"per_device_batch_size=0.75|num_ranks=4|ici_fsdp_parallelism=2|ici_context_parallelism=2", 1, 3, 1, 2},
    };
    for (auto &c : cases) {
        char buf[256];
        char *over[8];
        int n = 0;
        snprintf(buf, sizeof buf, "%s", c.mesh);
        for (char *t = strtok(buf, "|"); t; t = strtok(NULL, "|")) over[n++] = t;
        CgPlan f;
        LONGS_EQUAL_TEXT(0, f.build(kTiny, n, over), c.mesh);
        LONGS_EQUAL_TEXT(c.micro, f.s.tr.micro_batch, c.mesh);
        LONGS_EQUAL_TEXT(c.global, f.s.tr.global_batch, c.mesh);
        LONGS_EQUAL_TEXT(c.padded, f.s.batch_padded, c.mesh);
        LONGS_EQUAL_TEXT(c.accum, f.s.tr.grad_accum, c.mesh);
    }
}

// ---------------------------------------------------------------- hash and output stability

TEST_GROUP(CgHash){};

TEST(CgHash, StableAcrossRunsAndSensitiveToContent)
{
    CgPlan a, b, c, d;
    LONGS_EQUAL(0, a.build(kTiny));
    LONGS_EQUAL(0, b.build(kTiny));
    CHECK(a.g.hash == b.g.hash);
    CHECK(a.g.hash == qt_cg_hash(&a.g));
    char *over[] = {(char *)"learning_rate=0.001"};
    LONGS_EQUAL(0, c.build(kTiny, 1, over));
    CHECK(c.g.hash != a.g.hash);
    LONGS_EQUAL(0, d.build("configgen/configs/runs/test-accum-b2g2.yml"));
    CHECK(d.g.hash != a.g.hash);
    a.g.mb[5].a[0] += 1; // any table change moves the hash
    CHECK(qt_cg_hash(&a.g) != b.g.hash);
}

TEST(CgHash, OutputFilesAreByteIdentical)
{
    std::string o1 = make_tmpdir(), o2 = make_tmpdir();
    const char *run = "configgen/configs/runs/test-35-tiny.yml";
    char *a1[] = {(char *)"configgen", (char *)"-o", (char *)o1.c_str(), (char *)run};
    char *a2[] = {(char *)"configgen", (char *)"-o", (char *)o2.c_str(), (char *)run};
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_generate(4, a1, err, sizeof err));
    LONGS_EQUAL(0, qt_cg_generate(4, a2, err, sizeof err));
    const char *files[] = {"plan.h", "plan.c", "plan_main.c", "plan.txt"};
    for (const char *f : files) {
        std::string x = slurp(o1 + "/test-35-tiny/" + f), y = slurp(o2 + "/test-35-tiny/" + f);
        CHECK(x != "<missing>");
        CHECK(x == y);
    }
    std::string h = slurp(o1 + "/test-35-tiny/plan.h");
    CgPlan p;
    LONGS_EQUAL(0, p.build(run));
    char want[64];
    snprintf(want, sizeof want, "QT_PLAN_HASH_TEST_35_TINY 0x%016llxull",
             (unsigned long long)p.g.hash);
    CHECK(h.find(want) != std::string::npos);
    std::string c = slurp(o1 + "/test-35-tiny/plan.c");
    CHECK(c.find("static unsigned char qt_arena_test_35_tiny[") != std::string::npos);
    CHECK(c.find("const qt_plan qt_plan_test_35_tiny = {") != std::string::npos);
    CHECK(c.find("do not edit; make gen regenerates") != std::string::npos);
    rm_rf(o1);
    rm_rf(o2);
}

TEST(CgHash, BannerCannotCloseItsComment)
{
    // An override value is echoed in the banner, which sits inside /* ... */: a "*/" in it
    // must not end the comment and put the rest of the value into plan.c as code.
    std::string o = make_tmpdir();
    const char *run = "configgen/configs/runs/test-next-tiny.yml";
    char *a[] = {(char *)"configgen", (char *)"-o", (char *)o.c_str(), (char *)run,
                 (char *)"vision_encoder_block=\"x*/ int injected;\""};
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_generate(5, a, err, sizeof err));
    std::string c = slurp(o + "/test-next-tiny/plan.c");
    size_t end = c.find("*/");
    CHECK(end != std::string::npos);
    CHECK(c.substr(0, end).find("injected") != std::string::npos); // still inside the comment
    rm_rf(o);
}

// ---------------------------------------------------------------- plan.txt of meshes, --diff

static std::string report_of(CgPlan &p)
{
    qt_cg_buf b = {NULL, 0, 0};
    qt_cg_emit_report(&p.g, &p.c, &b);
    std::string s(b.p ? b.p : "");
    qt_cg_buf_free(&b);
    return s;
}

// The lines of plan.txt section "== key..." (leading blanks removed).
static std::vector<std::string> report_section(const std::string &rep, const char *key)
{
    std::vector<std::string> out;
    const std::string head = std::string("== ") + key;
    bool in = false;
    size_t pos = 0;
    while (pos < rep.size()) {
        size_t e = rep.find('\n', pos);
        if (e == std::string::npos) e = rep.size();
        std::string l = rep.substr(pos, e - pos);
        pos = e + 1;
        if (l.compare(0, 3, "== ") == 0) {
            in = l.compare(0, head.size(), head) == 0;
            continue;
        }
        size_t k = l.find_first_not_of(' ');
        if (in && k != std::string::npos) out.push_back(l.substr(k));
    }
    return out;
}

static std::vector<std::string> words(const std::string &l)
{
    std::vector<std::string> w;
    size_t i = 0;
    while (i < l.size()) {
        size_t a = l.find_first_not_of(' ', i);
        if (a == std::string::npos) break;
        size_t b = l.find(' ', a);
        if (b == std::string::npos) b = l.size();
        w.push_back(l.substr(a, b - a));
        i = b;
    }
    return w;
}

// The byte count of the per-rank bytes line starting with `label` (-1 when absent).
static long long bytes_line(const std::string &rep, const char *label)
{
    for (const std::string &l : report_section(rep, "per-rank bytes")) {
        if (l.compare(0, strlen(label), label) != 0) continue;
        std::vector<std::string> w = words(l);
        for (size_t i = 1; i < w.size(); i++)
            if (w[i] == "bytes") return atoll(w[i - 1].c_str());
    }
    return -1;
}

static bool has_line(const std::vector<std::string> &v, const char *line)
{
    for (const std::string &l : v)
        if (l == line) return true;
    return false;
}

static const char *kMeshDp2Fsdp2 = "configgen/configs/runs/mesh-next-dp2fsdp2.yml";
static const char *kMeshZero1 = "configgen/configs/runs/mesh-next-dp2-g2-zero1.yml";

TEST_GROUP(CgReport){};

// Every collective of the step schedule has its line (index, kind, group, R, range bytes,
// offset, bytes sent per rank = (R-1)/R of the range), and the total is their sum; all
// expected values come from the graph.
TEST(CgReport, MeshCollectivesListBytesSentPerRank)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build(kMeshDp2Fsdp2));
    const qt_cg_graph &g = p.g;
    CHECK(g.ncoll >= 2);
    const std::string rep = report_of(p);
    const std::vector<std::string> lines = report_section(rep, "collectives per step");
    static const char *const kinds[] = {"all-gather", "reduce-scatter", "all-to-all", "broadcast"};
    long long total = 0;
    for (int i = 0; i < g.ncoll; i++) {
        const qt_collective &c = g.coll[i];
        long long R = 1;
        for (int a = 0; a < QT_MESH_COUNT; a++)
            if (c.mask & (1u << a)) R *= p.s.mesh[a];
        CHECK(R > 1);
        CHECK(c.kind == QT_COLL_REDUCE_SCATTER || c.kind == QT_COLL_ALL_GATHER);
        CHECK(c.bytes % R == 0);
        const long long sent = c.bytes / R * (R - 1);
        total += sent;
        char grp[64];
        qt_cg_mask_name(c.mask, grp, sizeof grp);
        int found = 0;
        for (const std::string &l : lines) {
            std::vector<std::string> w = words(l);
            if (w.size() < 8 || w[0] != std::to_string(i)) continue;
            found++;
            STRCMP_EQUAL(kinds[c.kind], w[1].c_str());
            STRCMP_EQUAL(grp, w[2].c_str());
            LONGS_EQUAL(R, atoll(w[3].c_str()));
            LONGS_EQUAL(c.bytes, atoll(w[4].c_str()));
            STRCMP_EQUAL(("@" + std::to_string(c.offset)).c_str(), w[5].c_str());
            LONGS_EQUAL(sent, atoll(w[6].c_str()));
        }
        LONGS_EQUAL(1, found);
    }
    const std::string want = "total sent per rank per step: " + std::to_string(total) + " bytes";
    int found = 0;
    for (const std::string &l : lines) found += l.compare(0, want.size(), want) == 0;
    LONGS_EQUAL(1, found);
    // the gradient reduce-scatter runs over the batch group, which holds every rank here
    CHECK(g.coll[0].kind == QT_COLL_REDUCE_SCATTER && g.coll[0].mask == p.s.batch_mask);
    LONGS_EQUAL(4 * g.n_flat, g.coll[0].bytes);
}

// The mesh plan states the local and global shape of batch-split tensors, the mesh and the
// data assignment; a one-rank plan says it has no collectives.
TEST(CgReport, MeshAndOneRankSections)
{
    CgPlan p, one;
    LONGS_EQUAL(0, p.build(kMeshDp2Fsdp2));
    LONGS_EQUAL(0, one.build(kTiny));
    const std::string rep = report_of(p), rep1 = report_of(one);
    const qt_tensor &tok = p.g.ts[p.g.tokens].t;
    const long long nb = qt_cg_group_size(&p.s, p.s.batch_mask);
    LONGS_EQUAL(4, nb);
    int found = 0;
    for (const std::string &l : report_section(rep, "tensors")) {
        std::vector<std::string> w = words(l);
        if (w.empty() || w.back() != "tokens") continue;
        found++;
        STRCMP_EQUAL(("[" + std::to_string(tok.shape[0]) + "," + std::to_string(tok.shape[1]) + "]").c_str(),
                     w[3].c_str());
        STRCMP_EQUAL(("[" + std::to_string(tok.shape[0] * nb) + "," + std::to_string(tok.shape[1]) + "]").c_str(),
                     w[4].c_str());
    }
    LONGS_EQUAL(1, found);
    std::vector<std::string> mesh = report_section(rep, "mesh");
    CHECK(has_line(mesh, "shard_mode: explicit"));
    CHECK(has_line(mesh, "zero1 (shard_optimizer_over_data): off"));
    std::vector<std::string> data = report_section(rep, "data assignment");
    CHECK(has_line(data, "rank 3 (data 1, fsdp 1): batch index 3, sequences 3..3"));
    std::vector<std::string> coll1 = report_section(rep1, "collectives per step");
    LONGS_EQUAL(1, (long)coll1.size());
    STRCMP_EQUAL("1 rank: no collectives, 0 bytes moved", coll1[0].c_str());
}

// plan.txt's model FLOPs (model/flops.c) against the op graph of one-rank plans: the
// multiply-accumulates of the microbatch's forward ops, counted from their attributes
// (matmul M N K; expert FFN T k x 3 d f; attention b S Hq hd x S, the model's S/2 keys for
// q.k and p.v; delta rule b S Hv x 3 Dk Dv), are the model's MACs per token x b S, main
// model and MTP head together; the bench model gives bench.md's 180412416 per token trained.
// Exact integers, no tolerance.
TEST(CgReport, ModelFlopsEqualTheForwardOpsMacs)
{
    const char *runs[] = {"configgen/configs/runs/bench.yml", "configgen/configs/runs/bench-mtp.yml",
                          kTiny, "configgen/configs/runs/test-next-mtp.yml",
                          "configgen/configs/runs/test-35-tiny.yml",
                          "configgen/configs/runs/test-35-mtp.yml"};
    for (const char *run : runs) {
        CgPlan p;
        LONGS_EQUAL(0, p.build(run));
        const qt_cg_graph &g = p.g;
        LONGS_EQUAL(1, p.s.n_ranks);
        int64_t mac = 0;
        for (int i = 0; i < g.n_fwd; i++) {
            const qt_op *o = &g.mb[i];
            if (o->kind == QT_OP_MATMUL_FWD)
                mac += QT_A(o, MATMUL_FWD, M) * QT_A(o, MATMUL_FWD, N) * QT_A(o, MATMUL_FWD, K);
            else if (o->kind == QT_OP_EXPERT_FFN_FWD)
                mac += QT_A(o, EXPERT_FFN_FWD, T) * QT_A(o, EXPERT_FFN_FWD, k) * 3 *
                       QT_A(o, EXPERT_FFN_FWD, d) * QT_A(o, EXPERT_FFN_FWD, f);
            else if (o->kind == QT_OP_ATTN_FWD)
                mac += QT_A(o, ATTN_FWD, b) * QT_A(o, ATTN_FWD, S) * QT_A(o, ATTN_FWD, Hq) *
                       QT_A(o, ATTN_FWD, hd) * QT_A(o, ATTN_FWD, S);
            else if (o->kind == QT_OP_GDN_CORE_FWD)
                mac += QT_A(o, GDN_CORE_FWD, b) * QT_A(o, GDN_CORE_FWD, S) *
                       QT_A(o, GDN_CORE_FWD, Hv) * 3 * QT_A(o, GDN_CORE_FWD, Dk) *
                       QT_A(o, GDN_CORE_FWD, Dv);
        }
        qt_cg_flops f;
        qt_cg_model_flops(&p.s.m, p.s.tr.seq_len, p.s.mtp_layers, &f);
        const int64_t tokens = p.s.tr.micro_batch * p.s.tr.seq_len;
        LONGS_EQUAL_TEXT((long)((f.fwd_main + f.fwd_mtp) * tokens), (long)(2 * mac), run);
        LONGS_EQUAL_TEXT(p.s.mtp_layers > 0, f.fwd_mtp > 0, run);
    }
    CgPlan b;
    LONGS_EQUAL(0, b.build("configgen/configs/runs/bench.yml"));
    qt_cg_flops f;
    qt_cg_model_flops(&b.s.m, b.s.tr.seq_len, b.s.mtp_layers, &f);
    LONGS_EQUAL(180412416, (long)(3 * f.fwd_main));
    const std::string rep = report_of(b);
    CHECK(rep.find("(180.4 MFLOP per token trained) the main model") != std::string::npos);
}

// ZeRO-1 splits Adam over data as well: half the optimizer bytes on a data-2 mesh, and each
// report states the other setting's figure.
TEST(CgReport, Zero1HalvesTheOptimizerBytes)
{
    CgPlan on, off;
    char *over[] = {(char *)"shard_optimizer_over_data=false"};
    LONGS_EQUAL(0, on.build(kMeshZero1));
    LONGS_EQUAL(0, off.build(kMeshZero1, 1, over));
    CHECK(on.s.zero1 && !off.s.zero1);
    LONGS_EQUAL(off.g.n_flat, on.g.n_flat);
    LONGS_EQUAL(off.g.adam_elems, 2 * on.g.adam_elems);
    const std::string ron = report_of(on), roff = report_of(off);
    const long long b_on = bytes_line(ron, "adam m + v"), b_off = bytes_line(roff, "adam m + v");
    LONGS_EQUAL(8 * on.g.adam_elems, b_on);
    LONGS_EQUAL(2 * b_on, b_off);
    LONGS_EQUAL(b_on, bytes_line(roff, "ZeRO-1 on:"));
    LONGS_EQUAL(b_off, bytes_line(ron, "ZeRO-1 off:"));
    LONGS_EQUAL(4 * on.g.n_flat, bytes_line(ron, "params"));
}

// ---------------------------------------------------------------- bf16 recipe

TEST_GROUP(CgBf16){};

// dtype=bfloat16: every tensor's storage dtype follows docs/precision.md's recipe and is
// sized at its dtype's bytes; the master weights, Adam and the trees stay fp32 regions; the
// compute copy is bf16, 64-byte aligned, and the ZeRO-1 gather moves half the bytes.
TEST(CgBf16, RecipeDtypesAndBytesOnZero1)
{
    CgPlan f, b;
    char *over[] = {(char *)"dtype=bfloat16"};
    LONGS_EQUAL(0, f.build(kMeshZero1));
    LONGS_EQUAL(0, b.build(kMeshZero1, 1, over));
    LONGS_EQUAL(QT_F32, f.s.dtype);
    LONGS_EQUAL(QT_BF16, b.s.dtype);
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_check_plan(&b.g, err, sizeof err));
    LONGS_EQUAL(f.g.nt, b.g.nt);
    int n_bf16 = 0;
    for (int i = 0; i < b.g.nt; i++) {
        const qt_tensor &t = b.g.ts[i].t, &u = f.g.ts[i].t;
        STRCMP_EQUAL(u.name, t.name);
        CHECK(u.dtype != QT_BF16);
        LONGS_EQUAL(u.numel, t.numel);
        LONGS_EQUAL(0, (long)(t.offset % 64));
        int want = u.dtype;
        const std::string n = t.name;
        const std::string base = n.substr(0, n.find('~'));  // remat copies: "<name>~r"
        const bool operand = base.size() > 2 && base.rfind("gu") == base.size() - 2;
        if (u.dtype == QT_F32 && (t.role == QT_ROLE_PARAM || t.role == QT_ROLE_ACT ||
                                  t.role == QT_ROLE_ACT_GRAD || operand))
            want = QT_BF16;
        if (want != t.dtype) fprintf(stderr, "%s: dtype %d, expected %d\n", t.name, t.dtype, want);
        LONGS_EQUAL(want, t.dtype);
        n_bf16 += t.dtype == QT_BF16;
        CHECK(t.offset + qt_dtype_bytes(t.dtype) * t.numel <= b.g.arena_bytes);
    }
    CHECK(n_bf16 > b.g.nt / 2);
    LONGS_EQUAL(QT_F32, b.g.ts[b.g.loss_seq].t.dtype);
    LONGS_EQUAL(QT_I32, b.g.ts[b.g.tokens].t.dtype);
    LONGS_EQUAL(QT_F32, b.g.ts[b.g.table].t.dtype);
    // regions: fp32 master blocks (Adam layout), Adam, then the bf16 compute copy
    LONGS_EQUAL(0, b.g.params_offset);
    LONGS_EQUAL(4 * b.g.adam_elems, b.g.adam_m_offset);
    LONGS_EQUAL(2 * 4 * b.g.adam_elems, b.g.adam_v_offset - b.g.params_offset);
    LONGS_EQUAL(3 * 4 * b.g.adam_elems, b.g.compute_offset);
    LONGS_EQUAL(0, (long)(b.g.n_flat % (32 * 2)));
    CHECK(b.g.tree_offset[0] >= b.g.compute_offset + 2 * b.g.n_flat);
    LONGS_EQUAL(0, f.g.compute_offset);
    for (int p = 0; p < b.g.np; p++) {
        LONGS_EQUAL(0, (long)(b.g.ps[p].flat_offset % 32));
        LONGS_EQUAL(b.g.compute_offset + 2 * b.g.ps[p].flat_offset,
                    b.g.ts[b.g.ps[p].tensor].t.offset);
    }
    // the parameters' all-gather after the update moves the bf16 compute copy
    int gathers = 0;
    for (int i = 0; i < b.g.ncoll; i++) {
        const qt_collective &c = b.g.coll[i];
        if (c.kind != QT_COLL_ALL_GATHER || strncmp(c.name, "parameters", 10)) continue;
        gathers++;
        LONGS_EQUAL(b.g.compute_offset + 2 * b.g.ranges[0].lo, c.offset);
        LONGS_EQUAL(2 * b.g.ranges[0].n, c.bytes);
    }
    LONGS_EQUAL(1, gathers);
    // activations shrink, the gradient tree does not; plan.txt counts the bf16 bytes
    CHECK(b.g.act_peak < f.g.act_peak);
    const std::string rep = report_of(b);
    long long tree = 0;  // fp32: 4 bytes an element, as in the fp32 plan
    for (int l = 0; l < b.g.n_tree_levels; l++) tree += 4 * qt_cg_tree_level_elems(&b.g, l);
    LONGS_EQUAL(tree, bytes_line(rep, "gradient tree"));
    LONGS_EQUAL(f.g.n_tree_levels, b.g.n_tree_levels);
    LONGS_EQUAL(2 * b.g.n_flat, bytes_line(rep, "compute copy"));
    LONGS_EQUAL(4 * b.g.adam_elems, bytes_line(rep, "params"));
    CHECK(rep.find(" bf16 ") != std::string::npos);
    CHECK(rep.find("dtype bfloat16, weight_dtype float32") != std::string::npos);
    CHECK(b.g.hash != f.g.hash);
}

// Per-layer gathers in bf16: no compute copy region; the windows are bf16 and their
// all-gathers move 2 bytes an element.
TEST(CgBf16, PerLayerGatherWindowsAreBf16)
{
    CgPlan b;
    char *over[] = {(char *)"dtype=bfloat16", (char *)"param_gather=layer"};
    LONGS_EQUAL(0, b.build(kMeshZero1, 2, over));
    CHECK(b.g.params_compact);
    LONGS_EQUAL(0, b.g.compute_offset);
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_check_plan(&b.g, err, sizeof err));
    int windows = 0;
    for (int i = 0; i < b.g.nt; i++)
        if (!strncmp(b.g.ts[i].t.name, "gather.range", 12)) {
            windows++;
            LONGS_EQUAL(QT_BF16, b.g.ts[i].t.dtype);
        }
    CHECK(windows > 0);
    for (int i = 0; i < b.g.ncoll; i++)
        if (!strncmp(b.g.coll[i].name, "compute copy", 12)) {
            const char *r = strstr(b.g.coll[i].name, "range ");
            CHECK(r != NULL);
            LONGS_EQUAL(2 * b.g.ranges[atoi(r + 6)].n, b.g.coll[i].bytes);
        }
}

// The plan fixes of docs/precision.md ("Executing bf16 plans", step 0): partial sums that
// cross blocks or ranks stay fp32 in a bf16 plan. The canonical blocks' scratch holds fp32
// block partials (QT_CANON_FWD_SCRATCH floats, 4 bytes each); every ALL_REDUCE buffer (TP
// expert partials) is fp32; MOE_DISPATCH_BWD's dxr (the expert hosts' row gradients) is
// fp32 until the slot sum. Both decoders, TP2 / EP2 / EP2xTP2; one test per fix.
// which: 0 the canonical scratch, 1 the ALL_REDUCE buffers, 2 the dxr row gradients;
// returns how many such tensors the bf16 plans of the runs hold (each checked fp32)
static int check_partials_fp32(int which)
{
    static const char *const runs[] = {
        "configgen/configs/runs/mesh-next-tp2.yml", "configgen/configs/runs/mesh-35t-tp2.yml",
        "configgen/configs/runs/mesh-next-ep2.yml", "configgen/configs/runs/mesh-35-ep2.yml",
        "configgen/configs/runs/mesh-next-ep2tp2.yml"};
    char *over[] = {(char *)"dtype=bfloat16"};
    int n = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        CgPlan b;
        LONGS_EQUAL(0, b.build(runs[r], 1, over));
        LONGS_EQUAL(QT_BF16, b.s.dtype);
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&b.g, err, sizeof err));
        const int tp = b.s.mesh[QT_MESH_TENSOR] > 1, ep = b.s.mesh[QT_MESH_EXPERT] > 1;
        int found = 0;
        for (int i = 0; i < b.g.nmb; i++) {
            const qt_op *op = &b.g.mb[i];
            int32_t id = QT_NONE;
            if (which == 0 && op->kind == QT_OP_MATMUL_FWD && QT_A(op, MATMUL_FWD, nb) > 0) {
                id = QT_T(op, MATMUL_FWD, scratch);
                CHECK(strstr(b.g.ts[id].t.name, ".canon_scratch") != NULL);
                // room for the nb fp32 block partials of y (QT_CANON_FWD_SCRATCH's first term)
                CHECK(b.g.ts[id].t.numel >= QT_A(op, MATMUL_FWD, nb) * QT_A(op, MATMUL_FWD, M) *
                                                QT_A(op, MATMUL_FWD, N));
            } else if (which == 1 && op->kind == QT_OP_ALL_REDUCE) {
                id = QT_T(op, ALL_REDUCE, buf);
            } else if (which == 2 && op->kind == QT_OP_MOE_DISPATCH_BWD) {
                id = QT_T(op, MOE_DISPATCH_BWD, dxr);
            }
            if (id == QT_NONE) continue;
            const qt_tensor &t = b.g.ts[id].t;
            if (t.dtype != QT_F32) fprintf(stderr, "%s: %s dtype %d\n", runs[r], t.name, t.dtype);
            LONGS_EQUAL(QT_F32, t.dtype);
            CHECK(t.offset + 4 * t.numel <= b.g.arena_bytes);
            found++;
        }
        if (which == 0)
            for (int i = 0; i < b.g.nt; i++)
                if (strstr(b.g.ts[i].t.name, ".canon_scratch"))
                    LONGS_EQUAL(QT_F32, b.g.ts[i].t.dtype);
        // the next decoder's experts are all-reduced on TP meshes; EP hosts return rows
        if (which == 1 && tp && strstr(runs[r], "mesh-next")) CHECK(found > 0);
        if (which == 2 && ep) CHECK(found > 0);
        n += found;
    }
    return n;
}

TEST(CgBf16, CanonicalScratchIsFp32) { CHECK(check_partials_fp32(0) > 0); }
TEST(CgBf16, AllReduceBuffersAreFp32OnTp2) { CHECK(check_partials_fp32(1) > 0); }
TEST(CgBf16, ExpertRowGradientsAreFp32OnEp2) { CHECK(check_partials_fp32(2) > 0); }

// ---- precision.md step 0, the rest: ROUND_BF16 after the ALL_REDUCE buffers, the check,
// the bf16 staging region.

static const char *const kBf16TpRuns[] = {
    "configgen/configs/runs/mesh-next-tp2.yml",      "configgen/configs/runs/mesh-35t-tp2.yml",
    "configgen/configs/runs/mesh-next-ep2tp2.yml",   "configgen/configs/runs/mesh-35t-ep2tp2.yml",
    "configgen/configs/runs/remat-full-mesh-35t-tp2.yml",
    "configgen/configs/runs/remat-dot-mesh-next-dp2tp2.yml"};

// 1 when microbatch op `from` or a later one names tensor id in any slot.
static bool named_from(const qt_cg_graph &g, int from, int32_t id)
{
    for (int i = from; i < g.nmb; i++)
        for (int k = 0; k < QT_OP_MAX_T; k++)
            if (g.mb[i].t[k] == id) return true;
    return false;
}

// "<base>.bf16<marks>" for a buffer name "<base><marks>" (marks: "~r", "~g" copies).
static std::string bf16_name(const char *buf)
{
    const std::string n = buf;
    const size_t m = n.find('~');
    return m == std::string::npos ? n + ".bf16" : n.substr(0, m) + ".bf16" + n.substr(m);
}

// One bf16 TP plan: every ALL_REDUCE of a forward buffer (the hosts' rows yr) is followed
// by a ROUND_BF16 into "<buf>.bf16" (same shape, role, layout), nothing after it names the
// fp32 buffer, and MOE_RETURN_FWD reads the copy; the backward's buffer (dxr) has no round
// and is read in fp32 by MOE_DISPATCH_BWD only. Returns the number of rounds.
static int check_rounds(const CgPlan &b, const char *run)
{
    const qt_cg_graph &g = b.g;
    int rounds = 0, reduces = 0;
    for (int i = 0; i < g.nmb; i++) {
        if (g.mb[i].kind == QT_OP_ROUND_BF16) rounds++;
        if (g.mb[i].kind != QT_OP_ALL_REDUCE) continue;
        reduces++;
        const int32_t buf = QT_T(&g.mb[i], ALL_REDUCE, buf);
        const qt_cg_tensor &t = g.ts[buf];
        LONGS_EQUAL(QT_F32, t.t.dtype);
        CHECK(i + 1 < g.nmb);
        const qt_op *r = &g.mb[i + 1];
        if (strncmp(t.t.name, "d.", 2) == 0) {
            // the expert hosts' row gradients: summed in fp32 by MOE_DISPATCH_BWD
            CHECK(r->kind != QT_OP_ROUND_BF16);
            int users = 0;
            for (int j = i + 1; j < g.nmb; j++)
                for (int k = 0; k < QT_OP_MAX_T; k++)
                    if (g.mb[j].t[k] == buf) {
                        LONGS_EQUAL(QT_OP_MOE_DISPATCH_BWD, g.mb[j].kind);
                        LONGS_EQUAL(QT_T_MOE_DISPATCH_BWD_dxr, k);
                        users++;
                    }
            LONGS_EQUAL(1, users);
            continue;
        }
        if (r->kind != QT_OP_ROUND_BF16) fprintf(stderr, "%s: op %d after the all_reduce of %s\n", run, i + 1, t.t.name);
        LONGS_EQUAL(QT_OP_ROUND_BF16, r->kind);
        const int32_t y = QT_T(r, ROUND_BF16, y);
        LONGS_EQUAL(buf, QT_T(r, ROUND_BF16, x));
        const qt_cg_tensor &c = g.ts[y];
        STRCMP_EQUAL(bf16_name(t.t.name).c_str(), c.t.name);
        LONGS_EQUAL(QT_BF16, c.t.dtype);
        LONGS_EQUAL(t.t.role, c.t.role);
        LONGS_EQUAL(t.t.numel, QT_A(r, ROUND_BF16, n));
        LONGS_EQUAL(t.t.numel, c.t.numel);
        LONGS_EQUAL(t.t.ndim, c.t.ndim);
        CHECK(memcmp(t.t.shape, c.t.shape, sizeof t.t.shape) == 0);
        CHECK(memcmp(t.t.global_shape, c.t.global_shape, sizeof t.t.shape) == 0);
        CHECK(memcmp(t.t.spec, c.t.spec, sizeof t.t.spec) == 0);
        CHECK(memcmp(t.exec, c.exec, sizeof t.exec) == 0);
        CHECK(!named_from(g, i + 2, buf));
        // the consumers: MOE_RETURN_FWD's yr (the forward's, and save_dot's recomputed one)
        int readers = 0;
        for (int j = i + 2; j < g.nmb; j++)
            for (int k = 0; k < QT_OP_MAX_T; k++)
                if (g.mb[j].t[k] == y) {
                    LONGS_EQUAL(QT_OP_MOE_RETURN_FWD, g.mb[j].kind);
                    LONGS_EQUAL(QT_T_MOE_RETURN_FWD_yr, k);
                    readers++;
                }
        CHECK(readers >= 1);
    }
    CHECK(reduces > 0);
    return rounds;
}

TEST(CgBf16, RoundBf16AfterEachAllReduceOnTp)
{
    char *over[] = {(char *)"dtype=bfloat16"};
    for (size_t r = 0; r < sizeof kBf16TpRuns / sizeof kBf16TpRuns[0]; r++) {
        CgPlan b, f;
        LONGS_EQUAL(0, b.build(kBf16TpRuns[r], 1, over));
        LONGS_EQUAL(0, f.build(kBf16TpRuns[r]));
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&b.g, err, sizeof err));
        const int rounds = check_rounds(b, kBf16TpRuns[r]);
        // one per layer's forward ALL_REDUCE, plus one per recomputed one (remat full)
        int fwd_reduces = 0;
        for (int i = 0; i < f.g.nmb; i++)
            if (f.g.mb[i].kind == QT_OP_ALL_REDUCE &&
                strncmp(f.g.ts[QT_T(&f.g.mb[i], ALL_REDUCE, buf)].t.name, "d.", 2))
                fwd_reduces++;
        CHECK(rounds >= (int)b.s.m.n_layers);
        LONGS_EQUAL(fwd_reduces, rounds);
        LONGS_EQUAL(f.g.nmb + rounds, b.g.nmb);
        LONGS_EQUAL(f.g.nt + rounds, b.g.nt);
    }
}

// scan_layers still finds the layer cycles of a scanned bf16 TP plan (16 layers, EP2 x TP2,
// remat full, per-layer gathers): the same scans as the fp32 plan, each stored block longer by
// its cycle's rounds; the stored form unrolls to the schedule (qt_cg_scan checks it).
TEST(CgBf16, ScannedTpPlanKeepsItsScans)
{
    static const char *const runs[][2] = {
        {"configgen/configs/runs/scan-next-16l-dp2ep2-scan.yml", "model_name=qwen3-next-tiny"},
        {"configgen/configs/runs/scan-35-16l-dp2ep2-scan.yml", "model_name=qwen3.5-tiny-tp"}};
    for (size_t r = 0; r < 2; r++) {
        char *fo[] = {(char *)"ici_data_parallelism=1", (char *)"ici_tensor_parallelism=2",
                      (char *)runs[r][1], (char *)"dtype=bfloat16"};
        CgPlan b, f;
        LONGS_EQUAL(0, f.build(runs[r][0], 3, fo));
        LONGS_EQUAL(0, b.build(runs[r][0], 4, fo));
        check_rounds(b, runs[r][0]);
        LONGS_EQUAL(2, f.g.n_scans);
        LONGS_EQUAL(f.g.n_scans, b.g.n_scans);
        int stored_rounds = 0;
        for (int k = 0; k < b.g.n_scans; k++) {
            LONGS_EQUAL(f.g.scans[k].count, b.g.scans[k].count);
            int rb = 0;
            for (int j = 0; j < b.g.scans[k].n; j++)
                rb += b.g.mbc[b.g.scans[k].lo + j].kind == QT_OP_ROUND_BF16;
            CHECK(rb > 0);
            LONGS_EQUAL(f.g.scans[k].n + rb, b.g.scans[k].n);
            stored_rounds += rb;
        }
        CHECK(stored_rounds > 0);
    }
}

// The check (check/dtype.c, run by qt_cg_check_plan) refuses hand-broken bf16 plans, naming
// the op and the tensor; each break is undone before the next.
TEST(CgBf16, CheckRefusesRoundingBeforeTheSum)
{
    char *over[] = {(char *)"dtype=bfloat16"};
    CgPlan b;
    LONGS_EQUAL(0, b.build("configgen/configs/runs/mesh-next-tp2.yml", 1, over));
    qt_cg_graph &g = b.g;
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_check_dtypes(&g, err, sizeof err));
    int ar = -1, ret = -1, rnd = -1, disp = -1;
    for (int i = 0; i < g.nmb; i++) {
        if (g.mb[i].kind == QT_OP_ALL_REDUCE && ar < 0) ar = i;
        if (g.mb[i].kind == QT_OP_ROUND_BF16 && rnd < 0) rnd = i;
        if (g.mb[i].kind == QT_OP_MOE_RETURN_FWD && ret < 0) ret = i;
        if (g.mb[i].kind == QT_OP_MOE_DISPATCH_BWD && disp < 0) disp = i;
    }
    CHECK(ar >= 0 && rnd == ar + 1 && ret == ar + 2 && disp > 0);
    const int32_t buf = QT_T(&g.mb[ar], ALL_REDUCE, buf), copy = QT_T(&g.mb[rnd], ROUND_BF16, y);
    std::string want;
    // a consumer reading the fp32 buffer after its all_reduce
    QT_T(&g.mb[ret], MOE_RETURN_FWD, yr) = buf;
    LONGS_EQUAL(-1, qt_cg_check_plan(&g, err, sizeof err));
    want = "microbatch op " + std::to_string(ret) + " (moe_return_fwd) slot t1 reads L0.moe.ep_y after its all_reduce";
    CHECK_TEXT(strstr(err, want.c_str()) != NULL, err);
    QT_T(&g.mb[ret], MOE_RETURN_FWD, yr) = copy;
    // a bf16 ALL_REDUCE buffer
    g.ts[buf].t.dtype = QT_BF16;
    LONGS_EQUAL(-1, qt_cg_check_dtypes(&g, err, sizeof err));
    want = "microbatch op " + std::to_string(ar) + " (all_reduce): L0.moe.ep_y is bf16";
    CHECK_TEXT(strstr(err, want.c_str()) != NULL, err);
    g.ts[buf].t.dtype = QT_F32;
    // a bf16 row gradient
    const int32_t dxr = QT_T(&g.mb[disp], MOE_DISPATCH_BWD, dxr);
    g.ts[dxr].t.dtype = QT_BF16;
    LONGS_EQUAL(-1, qt_cg_check_dtypes(&g, err, sizeof err));
    CHECK_TEXT(strstr(err, "is bf16, a partial sum rounded before the cross-rank sum") != NULL, err);
    CHECK_TEXT(strstr(err, g.ts[dxr].t.name) != NULL, err);
    g.ts[dxr].t.dtype = QT_F32;
    // a ROUND_BF16 whose n is not the tensors' size, or whose y is fp32
    QT_A(&g.mb[rnd], ROUND_BF16, n)--;
    LONGS_EQUAL(-1, qt_cg_check_dtypes(&g, err, sizeof err));
    want = "microbatch op " + std::to_string(rnd) + " (round_bf16): n 4095, but L0.moe.ep_y.bf16 has 4096";
    CHECK_TEXT(strstr(err, want.c_str()) != NULL, err);
    QT_A(&g.mb[rnd], ROUND_BF16, n)++;
    g.ts[copy].t.dtype = QT_F32;
    LONGS_EQUAL(-1, qt_cg_check_dtypes(&g, err, sizeof err));
    CHECK_TEXT(strstr(err, "expected a bf16 y from an fp32 x") != NULL, err);
    g.ts[copy].t.dtype = QT_BF16;
    // a bf16 canonical scratch
    int canon = -1;
    for (int i = 0; i < g.nt && canon < 0; i++)
        if (strstr(g.ts[i].t.name, ".canon_scratch")) canon = i;
    CHECK(canon >= 0);
    g.ts[canon].t.dtype = QT_BF16;
    LONGS_EQUAL(-1, qt_cg_check_dtypes(&g, err, sizeof err));
    CHECK_TEXT(strstr(err, (std::string(g.ts[canon].t.name) + " is bf16").c_str()) != NULL, err);
    g.ts[canon].t.dtype = QT_F32;
    LONGS_EQUAL(0, qt_cg_check_plan(&g, err, sizeof err));
}

// qt_ops.def's slot strings and properties, read here independently of core/slots.c.
struct KindRow {
    int kind;
    const char *slots;
    unsigned props;
    int cls;
};
static const KindRow kKindRows[] = {
#define QT_OP(e, name, cls, sl, props, check, tn, an) {QT_OP_##e, sl, (props), QT_OPC_##cls},
#include "qt_ops.def"
#undef QT_OP
};

// The staging rule of qt_plan_fields.def, recomputed: max over init and microbatch ops of
// the sum over distinct bf16 tensor ids of roundup16(numel), 'p'/'P' slots left out for
// QT_OPP_BF16 kinds without QT_OPP_BF16_PSTAGE (the kinds made native by issue 34 keep the
// boundary's count).
static long long staging_need(const qt_cg_graph &g)
{
    long long need = 0;
    for (int i = 0; i < g.ninit + g.nmb; i++) {
        const qt_op &o = i < g.ninit ? g.init[i] : g.mb[i - g.ninit];
        const KindRow *row = NULL;
        for (const KindRow &k : kKindRows)
            if (k.kind == o.kind) row = &k;
        CHECK(row != NULL);
        std::vector<int32_t> ids;
        for (int s = 0; row->slots[s]; s++) {
            const int32_t id = o.t[s];
            if (id < 0 || g.ts[id].t.dtype != QT_BF16) continue;
            if (row->cls == QT_OPC_STEP) continue;
            if ((row->props & QT_OPP_BF16) && !(row->props & QT_OPP_BF16_PSTAGE) &&
                (row->slots[s] == 'p' || row->slots[s] == 'P'))
                continue;
            bool dup = false;
            for (int32_t u : ids) dup = dup || u == id;
            if (!dup) ids.push_back(id);
        }
        long long sum = 0;
        for (int32_t id : ids) sum += (g.ts[id].t.numel + 15) / 16 * 16;
        if (sum > need) need = sum;
    }
    return need;
}

// The bf16 staging region: bf16_stage_elems equals the rule recomputed above, the region is
// 64-byte aligned, disjoint from every other region and from every tensor, counted in
// plan.txt's per-rank bytes and memory map; moved onto the compute copy, the check refuses it.
TEST(CgBf16, StagingRegionSizeAndPlace)
{
    static const char *const runs[][2] = {
        {"configgen/configs/runs/mesh-next-tp2.yml", NULL},
        {"configgen/configs/runs/mesh-35t-ep2tp2.yml", NULL},
        {"configgen/configs/runs/mesh-next-dp2-g2-zero1.yml", NULL},
        {"configgen/configs/runs/mesh-next-dp2-g2-zero1.yml", "param_gather=layer"},
        {"configgen/configs/runs/remat-full-mesh-35t-tp2.yml", NULL}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        char *over[] = {(char *)"dtype=bfloat16", (char *)runs[r][1]};
        CgPlan b;
        LONGS_EQUAL(0, b.build(runs[r][0], runs[r][1] ? 2 : 1, over));
        qt_cg_graph &g = b.g;
        CHECK(g.bf16_stage_elems > 0);
        LONGS_EQUAL(staging_need(g), g.bf16_stage_elems);
        LONGS_EQUAL(0, (long)(g.bf16_stage_offset % 64));
        const long long lo = g.bf16_stage_offset, hi = lo + 4 * g.bf16_stage_elems;
        CHECK(hi <= g.act_offset && lo >= 4 * g.adam_elems);
        const long long regions[][2] = {
            {g.params_offset, g.params_offset + 4 * g.adam_elems},
            {g.adam_m_offset, g.adam_m_offset + 4 * g.adam_elems},
            {g.adam_v_offset, g.adam_v_offset + 4 * g.adam_elems},
            {g.compute_offset, g.compute_offset ? g.compute_offset + 2 * g.n_flat : 0},
            {g.leaf_scratch_offset, g.leaf_scratch_offset + 4 * g.leaf_scratch_elems},
            {g.comm_scratch_offset, g.comm_scratch_offset + 4 * g.comm_scratch_elems},
            {g.staging_offset, g.staging_offset + 4 * g.staging_elems}};
        for (const auto &rg : regions) CHECK(rg[1] <= lo || hi <= rg[0]);
        for (int l = 0; l < g.n_tree_levels; l++)
            CHECK(g.tree_offset[l] >= hi || g.tree_offset[l] + 4 * qt_cg_tree_level_elems(&g, l) <= lo);
        for (int i = 0; i < g.nt; i++) {
            const qt_tensor &t = g.ts[i].t;
            const long long tlo = t.offset, thi = tlo + t.numel * qt_dtype_bytes(t.dtype);
            CHECK(thi <= lo || hi <= tlo);
        }
        const std::string rep = report_of(b);
        LONGS_EQUAL(4 * g.bf16_stage_elems, bytes_line(rep, "bf16 staging"));
        const std::string map = std::to_string(lo) + " bf16 staging (" +
                                std::to_string(g.bf16_stage_elems) + " floats)";
        CHECK(has_line(report_section(rep, "memory map"), map.c_str()));
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&g, err, sizeof err));
        if (g.compute_offset) {
            g.bf16_stage_offset = g.compute_offset;
            LONGS_EQUAL(-1, qt_cg_check_plan(&g, err, sizeof err));
            CHECK_TEXT(strstr(err, "overlap") != NULL, err);
            g.bf16_stage_offset = lo;
        }
    }
}

// fp32 plans of the same configs: no ROUND_BF16, no staging region, no staging line.
TEST(CgBf16, Fp32TpPlansHaveNoRoundNorStaging)
{
    for (size_t r = 0; r < sizeof kBf16TpRuns / sizeof kBf16TpRuns[0]; r++) {
        CgPlan f;
        LONGS_EQUAL(0, f.build(kBf16TpRuns[r]));
        for (int i = 0; i < f.g.nmb; i++) CHECK(f.g.mb[i].kind != QT_OP_ROUND_BF16);
        for (int i = 0; i < f.g.ninit; i++) CHECK(f.g.init[i].kind != QT_OP_ROUND_BF16);
        for (int i = 0; i < f.g.nt; i++) CHECK(strstr(f.g.ts[i].t.name, ".bf16") == NULL);
        LONGS_EQUAL(0, f.g.bf16_stage_offset);
        LONGS_EQUAL(0, f.g.bf16_stage_elems);
        const std::string rep = report_of(f);
        CHECK(rep.find("bf16 staging") == std::string::npos);
        char err[1024] = "";
        LONGS_EQUAL(0, qt_cg_check_plan(&f.g, err, sizeof err));
    }
}

// An fp32 plan carries no trace of the recipe: no bf16 tensor, no compute copy, the plan
// fields dtype and compute_offset zero, 16-element flat alignment.
TEST(CgBf16, Fp32PlanUnchanged)
{
    for (size_t r = 0; r < sizeof kRuns / sizeof kRuns[0]; r++) {
        CgPlan p;
        LONGS_EQUAL(0, p.build(kRuns[r]));
        LONGS_EQUAL(QT_F32, p.s.dtype);
        LONGS_EQUAL(0, p.g.compute_offset);
        LONGS_EQUAL(16, qt_cg_flat_align(&p.s));
        for (int i = 0; i < p.g.nt; i++) CHECK(p.g.ts[i].t.dtype != QT_BF16);
    }
}

TEST_GROUP(CgDiff){};

TEST(CgDiff, ExplicitVsAutoDifferOnlyInShardMode)
{
    qt_cg_buf out = {NULL, 0, 0};
    int differs = -1;
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_diff("configgen/configs/runs/mesh-next-dp2.yml",
                              "configgen/configs/runs/mesh-next-dp2-auto.yml", &out, &differs,
                              err, sizeof err));
    LONGS_EQUAL(1, differs);
    std::string s(out.p);
    CHECK(s.find("  - shard_mode: explicit\n  + shard_mode: auto\n") != std::string::npos);
    CHECK(s.find("plans differ in: mesh\n") != std::string::npos);
    qt_cg_buf_free(&out);
}

TEST(CgDiff, SameIsIdenticalAndInsertedOpsAreAligned)
{
    qt_cg_buf out = {NULL, 0, 0};
    int differs = -1;
    char err[1024] = "";
    LONGS_EQUAL(0, qt_cg_diff(kMeshDp2Fsdp2, kMeshDp2Fsdp2, &out, &differs, err, sizeof err));
    LONGS_EQUAL(0, differs);
    qt_cg_buf_free(&out);
    // the load-balance loss adds one op (zeroing lb_seq) and one tensor: the rest of the
    // schedule must align instead of showing as shifted
    qt_cg_buf o2 = {NULL, 0, 0};
    LONGS_EQUAL(0, qt_cg_diff(kTiny, "configgen/configs/runs/test-next-lb.yml", &o2, &differs,
                              err, sizeof err));
    LONGS_EQUAL(1, differs);
    std::string s(o2.p);
    CHECK(s.find("== tensors: 0 changed, 0 only in A, 1 only in B ==") != std::string::npos);
    CHECK(s.find("== microbatch schedule: ops 8 only in A, 9 only in B") != std::string::npos);
    qt_cg_buf_free(&o2);
}

TEST(CgDiff, MissingInputIsAnError)
{
    qt_cg_buf out = {NULL, 0, 0};
    int differs = -1;
    char err[1024] = "";
    LONGS_EQUAL(-1, qt_cg_diff("configgen/configs/runs/no-such-run.yml", kTiny, &out, &differs,
                               err, sizeof err));
    CHECK(strstr(err, "no-such-run.yml: no such file") != NULL);
    qt_cg_buf_free(&out);
}

// With expert parallelism the flat vector has a range per reduction pattern: the ZeRO-1
// figures of each report must still be what the other setting actually plans.
TEST(CgReport, Zero1AlternativeMatchesThePlanUnderExpertParallelism)
{
    const char *run = "configgen/configs/runs/mesh-next-dp2ep2.yml";
    CgPlan off, on;
    char *over[] = {(char *)"shard_optimizer_over_data=true"};
    LONGS_EQUAL(0, off.build(run));
    LONGS_EQUAL(0, on.build(run, 1, over));
    CHECK(!off.s.zero1 && on.s.zero1);
    CHECK(off.g.n_ranges > 1);
    const std::string roff = report_of(off), ron = report_of(on);
    LONGS_EQUAL(8 * off.g.adam_elems, bytes_line(roff, "adam m + v"));
    LONGS_EQUAL(8 * on.g.adam_elems, bytes_line(ron, "adam m + v"));
    LONGS_EQUAL(8 * on.g.adam_elems, bytes_line(roff, "ZeRO-1 on:"));
    LONGS_EQUAL(8 * off.g.adam_elems, bytes_line(ron, "ZeRO-1 off:"));
    int found = 0;
    for (const std::string &l : report_section(roff, "collectives per step"))
        found += l.find("expert all-to-all exchanges per microbatch") != std::string::npos;
    LONGS_EQUAL(1, found);
}

// ------------------------------------------------------------------ layouts (explicit / auto)

TEST_GROUP(CgLayout){};

// Under tensor parallelism the residual stream stays whole (Megatron layout) although
// activation_embed declares it split over tensor: every such activation must carry its
// layer's declaration under shard_mode=explicit, and the check names the first that does
// not; under auto the same difference is propagated, and counted.
TEST(CgLayout, ExplicitRefusesAnUndeclaredReshardAutoPropagatesIt)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build("configgen/configs/runs/mesh-next-tp2.yml"));
    LONGS_EQUAL(1, p.s.shard_mode);
    char err[1024] = "";
    int n = -1;
    LONGS_EQUAL(0, qt_cg_layout_check(&p.g, &n, err, sizeof err));
    CHECK(n > 0);
    LONGS_EQUAL(n, p.g.n_reshards);
    int mix = -1;
    for (int i = 0; i < p.g.nt && mix < 0; i++)
        if (!strcmp(p.g.ts[i].t.name, "L0.mix")) mix = i;
    CHECK(mix >= 0);
    CHECK(p.g.ts[mix].reshard != NULL);
    p.g.ts[mix].reshard = NULL;  // the layer "forgets" its declaration
    CHECK(qt_cg_layout_check(&p.g, &n, err, sizeof err) != 0);
    CHECK(strstr(err, "tensor L0.mix (op ") != NULL);
    CHECK(strstr(err, "declare the layout [-,-,tensor] but it is held as [-,-,-]") != NULL);
    p.s.shard_mode = 0;  // auto: propagated, not refused
    LONGS_EQUAL(0, qt_cg_layout_check(&p.g, &n, err, sizeof err));
    // heads split over tensor are held as declared: not reshards
    for (int i = 0; i < p.g.nt; i++)
        if (!strcmp(p.g.ts[i].t.name, "L3.attn.qg"))
            for (int d = 0; d < p.g.ts[i].t.ndim; d++)
                LONGS_EQUAL(p.g.ts[i].t.spec[d], p.g.ts[i].exec[d]);
}

// Without tensor parallelism every activation of every mesh plan is held as declared.
TEST(CgLayout, DataFsdpExpertMeshesHoldWhatTheyDeclare)
{
    const char *runs[] = {"configgen/configs/runs/mesh-next-dp2fsdp2.yml",
                          "configgen/configs/runs/mesh-next-dp2ep2.yml",
                          "configgen/configs/runs/test-next-tiny.yml"};
    for (const char *r : runs) {
        CgPlan p;
        LONGS_EQUAL(0, p.build(r));
        LONGS_EQUAL(0, p.g.n_reshards);
    }
}

// ---- pipeline parallelism (issue 36, docs/pipeline.md): the plan side
TEST_GROUP(CgPipeline){};

// MaxText's layer-to-stage map: stage s in repeat r holds layers (r*S+s)*Lps .. +Lps-1; its
// docs' example (24 layers, 4 stages, 2 repeats, 3 per stage) puts {0,1,2,12,13,14} on stage
// 0, and every layer is held by exactly one (stage, local index).
TEST(CgPipeline, LayerToStageMapIsMaxTexts)
{
    qt_cg_settings s;
    memset(&s, 0, sizeof s);
    s.m.n_layers = 24;
    s.pp_stages = 4;
    s.pp_repeats = 2;
    s.pp_lps = 3;
    LONGS_EQUAL(6, qt_cg_stage_layers(&s));
    const long long want0[6] = {0, 1, 2, 12, 13, 14};
    for (int j = 0; j < 6; j++) LONGS_EQUAL(want0[j], qt_cg_pp_layer(&s, 0, j));
    int seen[24] = {0};
    for (int st = 0; st < 4; st++)
        for (int j = 0; j < 6; j++) seen[qt_cg_pp_layer(&s, st, j)]++;
    for (int l = 0; l < 24; l++) LONGS_EQUAL(1, seen[l]);
    s.pp_stages = 1;  // no pipeline: every layer, itself
    LONGS_EQUAL(24, qt_cg_stage_layers(&s));
    LONGS_EQUAL(17, qt_cg_pp_layer(&s, 0, 17));
}

// A stage's plan holds its layers only, under their global names (pp-next-pp2: stage 0 of 2,
// circular, holds layers 0 and 2), with M x G accumulation microbatches of B / M sequences;
// plan.txt's pipeline section gives the map with the kinds, the bubble and both schedules.
TEST(CgPipeline, StagePlanHoldsItsLayersAndTheReportGivesMapBubbleSchedules)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build("configgen/configs/runs/pp-next-pp2.yml"));
    LONGS_EQUAL(2, p.s.pp_stages);
    LONGS_EQUAL(2, p.s.pp_repeats);
    LONGS_EQUAL(4, p.s.pp_micro);
    LONGS_EQUAL(0, p.s.pp_stage);
    LONGS_EQUAL(1, p.s.tr.micro_batch);      // B = 2 x 2 stages = 4 sequences, M = 4
    LONGS_EQUAL(4, p.s.tr.grad_accum);
    LONGS_EQUAL(4, p.s.tr.global_batch);     // per_device_batch_size x ranks, as MaxText
    int l0 = 0, l1 = 0, l2 = 0, l3 = 0;
    for (int i = 0; i < p.g.np; i++) {
        const char *n = p.g.ps[i].name;
        l0 += !strncmp(n, "model.layers.0.", 15);
        l1 += !strncmp(n, "model.layers.1.", 15);
        l2 += !strncmp(n, "model.layers.2.", 15);
        l3 += !strncmp(n, "model.layers.3.", 15);
    }
    CHECK(l0 > 0 && l2 > 0);
    LONGS_EQUAL(0, l1 + l3);
    const std::string rep = report_of(p);
    CHECK(rep.find("    stage 0: 2 layers (GDN 2, full attention 0), the embedding: 0G | 2G\n") != std::string::npos);
    CHECK(rep.find("    stage 1: 2 layers (GDN 1, full attention 1), the head and loss: 1G | 3F\n") != std::string::npos);
    CHECK(rep.find("  bubble: (S-1)/(R*M+S-1) = 1/9 = 0.1111") != std::string::npos);
    CHECK(rep.find("9 iterations = M*R + S - 1 = 4*2 + 2 - 1") != std::string::npos);
    CHECK(rep.find("    t   4:     m0/r1     m3/r0\n") != std::string::npos);
    CHECK(rep.find("1f1b: not planned with R = 2 repeats") != std::string::npos);
}

// Circular repeats executed (pp-next-pp2: S 2, R 2): each stage's executable tables hold its
// 2 chunks, delimited by PP_CHUNK markers (one at each chunk's start in the forward, one
// where its backward ends, in reverse order), with the boundaries MaxText's map implies
// (stage 0's chunk 1 and stage 1's chunk 0: the wrap-around) and the chunk's parameters'
// one-rank indices (stage 0: the embedding + layer 0, then layer 2 from index 33).
TEST(CgPipeline, CircularStageTablesHoldChunkMarkers)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build("configgen/configs/runs/pp-next-pp2.yml"));
    CHECK(p.g.pp_graphs != NULL);
    for (int st = 0; st < 2; st++) {
        const qt_cg_graph *x = &p.g.pp_graphs[st];
        int fwd[2] = {-1, -1}, nb = 0;
        for (int i = 0; i < x->nmb; i++) {
            const qt_op *o = &x->mb[i];
            if (o->kind != QT_OP_PP_CHUNK) continue;
            const int c = (int)o->a[QT_A_PP_CHUNK_chunk];
            if (o->a[QT_A_PP_CHUNK_bwd]) {
                CHECK(i >= x->n_fwd);
                LONGS_EQUAL(1 - nb, c);  // end markers in reverse chunk order
                nb++;
            } else {
                CHECK(i < x->n_fwd);
                fwd[c] = i;
            }
        }
        LONGS_EQUAL(2, nb);
        CHECK(fwd[0] >= 0 && fwd[1] > fwd[0]);
        const qt_op *c0 = &x->mb[fwd[0]], *c1 = &x->mb[fwd[1]];
        // every chunk has an input but stage 0's first, an output but stage 1's last
        CHECK((c0->a[QT_A_PP_CHUNK_in] == QT_NONE) == (st == 0));
        CHECK(c1->a[QT_A_PP_CHUNK_in] != QT_NONE && c1->a[QT_A_PP_CHUNK_din] != QT_NONE);
        CHECK(c0->a[QT_A_PP_CHUNK_out] != QT_NONE && c0->a[QT_A_PP_CHUNK_dout] != QT_NONE);
        CHECK((c1->a[QT_A_PP_CHUNK_out] == QT_NONE) == (st == 1));
        LONGS_EQUAL(st ? 17 : 0, c0->a[QT_A_PP_CHUNK_gparam]);
        LONGS_EQUAL(st ? 49 : 33, c1->a[QT_A_PP_CHUNK_gparam]);
        LONGS_EQUAL(0, c0->a[QT_A_PP_CHUNK_param0]);
        LONGS_EQUAL(st ? 16 : 17, c1->a[QT_A_PP_CHUNK_param0]);
        LONGS_EQUAL(3 * 4 * 2, x->ts[x->pp_slots].t.shape[0]);  // 3 M R boundary messages
    }
    const std::string rep = report_of(p);
    CHECK(rep.find("    stage 0 chunks (one-rank parameter indices, first element): r0 0..16 (0) | r1 33..48 (28640)\n") != std::string::npos);
}

// The MTP head on a pipeline (one repeat, docs/pipeline.md, its bullet): stage 0's tables
// send the depths' embeddings (pp_mtp_out, for 2 depths their STACK of [b, 2 S, d]) and take
// their gradient back as a second seed; the last stage's receive them (pp_mtp_in, SPLIT)
// and send their gradient; slots of D boundaries: M sends, and on the last stage M
// received; the head's mtp.* parameters
// are the last stage's, after lm_head.weight. With circular repeats: no stage-local tables.
TEST(CgPipeline, MtpHeadCrossesFromStageZeroToTheLast)
{
    char o0[] = "num_ranks=2", o1[] = "ici_pipeline_parallelism=2",
         o2[] = "num_layers_per_pipeline_stage=2", o3[] = "mtp_num_layers=2";
    char *over[] = {o0, o1, o2, o3};
    CgPlan p;
    LONGS_EQUAL(0, p.build("configgen/configs/runs/test-next-tiny.yml", 4, over));
    CHECK(p.g.pp_graphs != NULL);
    const qt_cg_graph *s0 = &p.g.pp_graphs[0], *s1 = &p.g.pp_graphs[1];
    CHECK(s0->pp_mtp_out != QT_NONE && s0->pp_mtp_dout != QT_NONE);
    CHECK(s0->pp_mtp_in == QT_NONE && s0->pp_mtp_din == QT_NONE);
    CHECK(s1->pp_mtp_in != QT_NONE && s1->pp_mtp_din != QT_NONE);
    CHECK(s1->pp_mtp_out == QT_NONE && s1->pp_mtp_dout == QT_NONE);
    const int64_t nb = s0->ts[s0->pp_slots].t.shape[1];
    LONGS_EQUAL(2 * nb, s0->ts[s0->pp_mtp_out].t.numel);
    LONGS_EQUAL(2 * nb, s1->ts[s1->pp_mtp_din].t.numel);
    for (const qt_cg_graph *x : {s0, s1}) {  // M sends (+ M received on the last stage)
        LONGS_EQUAL((x == s1 ? 2 : 1) * x->s->pp_micro, x->ts[x->pp_mtp_slots].t.shape[0]);
        LONGS_EQUAL(2 * nb, x->ts[x->pp_mtp_slots].t.shape[1]);
    }
    // stage 0: the embedding's one EMBED_WGRAD; the last stage: the head's parameters
    int embed_bwd = 0, split = 0;
    for (int i = s0->n_fwd; i < s0->nmb; i++) embed_bwd += s0->mb[i].kind == QT_OP_EMBED_WGRAD;
    for (int i = 0; i < s1->n_fwd; i++) split += s1->mb[i].kind == QT_OP_SPLIT;
    LONGS_EQUAL(1, embed_bwd);
    LONGS_EQUAL(1, split);
    int first_mtp = -1;
    for (int i = 0; i < s1->np && first_mtp < 0; i++)
        if (!strncmp(s1->ps[i].name, "mtp.", 4)) first_mtp = i;
    CHECK(first_mtp > 0);
    STRCMP_EQUAL("lm_head.weight", s1->ps[first_mtp - 1].name);
    for (int i = 0; i < s0->np; i++) CHECK(strncmp(s0->ps[i].name, "mtp.", 4) != 0);
    const std::string rep = report_of(p);
    CHECK(rep.find("    stage 0 -> 1 (the MTP head's embeddings, 2 boundaries per microbatch") != std::string::npos);
    // circular repeats (R = 2) with the head: stage 0's embeddings leave from its first
    // chunk (their gradient seeds that chunk's backward), the last stage's head reads them
    // in its last chunk only (the SPLIT after the last forward PP_CHUNK marker, the stacked
    // gradient before the last backward one)
    char c2[] = "num_layers_per_pipeline_stage=1";
    char *overc[] = {o0, o1, c2, o3};
    CgPlan pc;
    LONGS_EQUAL(0, pc.build("configgen/configs/runs/test-next-tiny.yml", 4, overc));
    CHECK(pc.g.pp_graphs != NULL);
    const qt_cg_graph *c0 = &pc.g.pp_graphs[0], *c1 = &pc.g.pp_graphs[1];
    CHECK(c0->pp_mtp_out != QT_NONE && c1->pp_mtp_in != QT_NONE && c1->pp_mtp_din != QT_NONE);
    int fwd_mark = -1, split_at = -1, bwd_mark = -1, stack_at = -1, chunk = -1;
    for (int i = 0; i < c1->nmb; i++) {
        const qt_op *op = &c1->mb[i];
        if (op->kind == QT_OP_PP_CHUNK && i < c1->n_fwd) fwd_mark = i;
        if (op->kind == QT_OP_PP_CHUNK && i >= c1->n_fwd && bwd_mark < 0) {
            bwd_mark = i;
            chunk = (int)QT_A(op, PP_CHUNK, chunk);
        }
        if (op->kind == QT_OP_SPLIT && QT_T(op, SPLIT, y) == c1->pp_mtp_in) split_at = i;
        if (op->kind == QT_OP_SPLIT_BWD && QT_T(op, SPLIT_BWD, dy) == c1->pp_mtp_din)
            stack_at = i;
    }
    LONGS_EQUAL(1, (long)QT_A(&c1->mb[fwd_mark], PP_CHUNK, chunk));
    CHECK(split_at > fwd_mark && split_at < c1->n_fwd);
    LONGS_EQUAL(1, chunk);
    CHECK(stack_at >= c1->n_fwd && stack_at < bwd_mark);
    // stage 0: d.pp_mtp_out read in chunk 0's backward (after chunk 1's end marker)
    int seed_read = -1, chunk1_end = -1;
    for (int i = c0->n_fwd; i < c0->nmb; i++) {
        const qt_op *op = &c0->mb[i];
        if (op->kind == QT_OP_PP_CHUNK && QT_A(op, PP_CHUNK, chunk) == 1) chunk1_end = i;
        if (op->kind == QT_OP_STACK_BWD && QT_T(op, STACK_BWD, dy) == c0->pp_mtp_dout)
            seed_read = i;
    }
    CHECK(chunk1_end >= 0);
    CHECK(seed_read > chunk1_end);
}

TEST_GROUP(CgMoeDrop){};

// Issue 35: a capacity of 0 (cf 0.1 on S 16, k 2, E 4: C = int(max(8 x 0.1, 0.1)) = 0)
// plans token dropping with moe_drop_all: every MoE layer has a MOE_CAPACITY op with C 0
// and the drop counts' tensor; cf 0.125 gives C 1 without the flag.
TEST(CgMoeDrop, CapacityZeroPlansEveryAssignmentDropped)
{
    for (int v = 0; v < 2; v++) {
        CgPlan p;
        const char *o[] = {"sparse_matmul=false", v ? "capacity_factor=0.125" : "capacity_factor=0.1"};
        LONGS_EQUAL(0, p.build(kTiny, 2, (char **)o));
        LONGS_EQUAL(v ? 0 : 1, p.s.moe_drop_all);
        LONGS_EQUAL(v ? 1 : 0, p.s.moe_capacity);
        CHECK(p.g.moe_drops != QT_NONE);
        int caps = 0;
        for (int i = 0; i < p.g.nmb; i++)
            if (p.g.mb[i].kind == QT_OP_MOE_CAPACITY) {
                LONGS_EQUAL(v ? 1 : 0, QT_A(&p.g.mb[i], MOE_CAPACITY, C));
                caps++;
            }
        LONGS_EQUAL(p.s.m.n_layers, caps);
    }
}

// Issue 35: ragged_buffer_factor r > 0 with sparse_matmul plans MOE_RAGGED (B = int(T k r)
// rows, the expert axis's mask) on an expert axis of two ranks, in every MoE layer; one
// expert rank (MaxText exchanges nothing there) and sparse_matmul false plan none.
TEST(CgMoeDrop, RaggedBufferOnlyWithExpertParallelism)
{
    const char *ep[] = {"ragged_buffer_factor=0.5", "num_ranks=2", "ici_fsdp_parallelism=1",
                        "ici_expert_parallelism=2"};
    const char *one[] = {"ragged_buffer_factor=0.5"};
    const char *dense[] = {"ragged_buffer_factor=0.5", "num_ranks=2", "ici_fsdp_parallelism=1",
                           "ici_expert_parallelism=2", "sparse_matmul=false"};
    for (int v = 0; v < 3; v++) {
        CgPlan p;
        LONGS_EQUAL(0, v == 0   ? p.build(kTiny, 4, (char **)ep)
                       : v == 1 ? p.build(kTiny, 1, (char **)one)
                                : p.build(kTiny, 5, (char **)dense));
        int n = 0;
        for (int i = 0; i < p.g.nmb; i++) {
            const qt_op *o = &p.g.mb[i];
            if (o->kind != QT_OP_MOE_RAGGED) continue;
            n++;
            // T = 2 sequences x 16 tokens a rank (per_device_batch_size 2), k 2: 64 x 0.5
            LONGS_EQUAL(32, QT_A(o, MOE_RAGGED, B));
            LONGS_EQUAL(2, QT_A(o, MOE_RAGGED, El));
            LONGS_EQUAL(1 << QT_MESH_EXPERT, QT_A(o, MOE_RAGGED, mask));
        }
        LONGS_EQUAL(v == 0 ? p.s.m.n_layers : 0, n);
        LONGS_EQUAL(v == 0 ? 1 : 0, p.g.moe_ragged);
        CHECK((p.g.moe_drops != QT_NONE) == (v == 0));
    }
}

// Token dropping with circular repeats (pp-next-pp2 with capacity_factor): each chunk's
// forward zeroes the dropped counts right after its PP_CHUNK marker (the driver takes them
// after each chunk's B), and nothing zeroes them outside a chunk, so the chunk check
// (check_chunks) holds: configgen plans it.
TEST(CgPipeline, CircularTokenDroppingZeroesTheCountsPerChunk)
{
    CgPlan p;
    const char *o[] = {"sparse_matmul=false", "capacity_factor=1.0"};
    LONGS_EQUAL(0, p.build("configgen/configs/runs/pp-next-pp2.yml", 2, (char **)o));
    CHECK(p.g.pp_graphs != NULL);
    for (int st = 0; st < 2; st++) {
        const qt_cg_graph *x = &p.g.pp_graphs[st];
        CHECK(x->moe_drops != QT_NONE);
        int chunks = 0, zeros = 0;
        for (int i = 0; i < x->nmb; i++) {
            const qt_op *o = &x->mb[i];
            if (o->kind == QT_OP_ZERO && QT_T(o, ZERO, x) == x->moe_drops) zeros++;
            if (o->kind != QT_OP_PP_CHUNK || o->a[QT_A_PP_CHUNK_bwd]) continue;
            chunks++;
            CHECK(i + 1 < x->nmb);
            LONGS_EQUAL(QT_OP_ZERO, x->mb[i + 1].kind);
            LONGS_EQUAL(x->moe_drops, QT_T(&x->mb[i + 1], ZERO, x));
        }
        LONGS_EQUAL(2, chunks);
        LONGS_EQUAL(2, zeros);
    }
}

// Circular repeats in the microbatch form (expert parallelism) and the per-layer form with
// collective_overlap (gradient_reduce=layer on data 2): every flat range holds one repeat
// chunk's parameters; the microbatch-end schedule is R parts in chunk order, each opened by
// a PP_CHUNK marker (bwd 2) and pushing exactly its chunk's ranges; no split collective is
// started in one chunk's forward or backward and waited for in another part.
TEST(CgPipeline, CircularMicrobatchFormsStayInsideTheirChunks)
{
    const char *ep[] = {"num_ranks=4", "ici_fsdp_parallelism=1", "ici_expert_parallelism=2"};
    const char *lay[] = {"num_ranks=4", "ici_fsdp_parallelism=1", "ici_data_parallelism=2",
                         "gradient_reduce=layer"};
    for (int form = 0; form < 2; form++) {
        CgPlan p;
        LONGS_EQUAL(0, form ? p.build("configgen/configs/runs/pp-next-pp2.yml", 4, (char **)lay)
                            : p.build("configgen/configs/runs/pp-next-pp2.yml", 3, (char **)ep));
        LONGS_EQUAL(2, p.s.pp_repeats);
        for (int st = 0; st < 2; st++) {
            const qt_cg_graph *x = &p.g.pp_graphs[st];
            CHECK(x->reduce_per_mb);
            LONGS_EQUAL(form, x->layer_reduce);
            std::vector<int> chunk(x->n_ranges, -1);
            for (int q = 0; q < x->np; q++) {
                const int r = qt_cg_range_of(x, q), c = qt_cg_chunk_of(x, q);
                CHECK(chunk[r] < 0 || chunk[r] == c);
                chunk[r] = c;
            }
            LONGS_EQUAL(0, chunk[0]);
            LONGS_EQUAL(1, chunk[x->n_ranges - 1]);
            std::vector<int> part(x->nmb, 0);
            int waits = 0;
            for (int i = 0; i < x->nmb; i++) {
                const qt_op *o = &x->mb[i];
                part[i] = (i ? part[i - 1] : 0) + (o->kind == QT_OP_PP_CHUNK || i == x->n_fwd);
                if (o->kind != QT_OP_COLL_WAIT) continue;
                int j = i - 1;
                while (j >= 0 && !(x->mb[j].kind == QT_OP_COLL_START && x->mb[j].a[0] == o->a[0]))
                    j--;
                CHECK(j >= 0);
                LONGS_EQUAL(part[j], part[i]);
                waits++;
            }
            CHECK(form == 0 || waits > 0);  // the overlap is on, inside the chunks
            if (form) continue;
            int k = -1;
            for (int i = 0; i < x->nmbend; i++) {
                const qt_op *o = &x->mbend[i];
                if (o->kind == QT_OP_PP_CHUNK) {
                    LONGS_EQUAL(++k, o->a[QT_A_PP_CHUNK_chunk]);
                    LONGS_EQUAL(2, o->a[QT_A_PP_CHUNK_bwd]);
                    continue;
                }
                CHECK(k >= 0);
                if (o->kind == QT_OP_GRAD_MB_TOTAL || o->kind == QT_OP_GRAD_MB_PUSH)
                    for (int64_t r = o->a[0]; r < o->a[1]; r++) LONGS_EQUAL(k, chunk[r]);
            }
            LONGS_EQUAL(1, k);
        }
    }
}

// 1F1B (one repeat): Megatron's warm-up min(S-s-1, M), then one forward one backward, then
// the drain; stage s holds at most min(S - s, M) microbatches, GPipe all M.
TEST(CgPipeline, OneFOneBTableAndInFlight)
{
    CgPlan p;
    const char *o[] = {"num_pipeline_microbatches=4"};
    LONGS_EQUAL(0, p.build("configgen/configs/runs/pp-35-pp2-1f1b.yml", 1, (char **)o));
    LONGS_EQUAL(1, p.s.pp_schedule);
    LONGS_EQUAL(1, p.s.pp_repeats);
    const std::string rep = report_of(p);
    CHECK(rep.find("    stage 0 (warm-up 1): F0 F1 B0 F2 B1 F3 B2 B3\n") != std::string::npos);
    CHECK(rep.find("    stage 1 (warm-up 0): F0 B0 F1 B1 F2 B2 F3 B3\n") != std::string::npos);
    qt_cg_settings s = p.s;
    s.pp_stage = 0;
    LONGS_EQUAL(2, qt_cg_pp_inflight(&s, 1));
    LONGS_EQUAL(4, qt_cg_pp_inflight(&s, 0));
    s.pp_stage = 1;
    LONGS_EQUAL(1, qt_cg_pp_inflight(&s, 1));
    CHECK(qt_cg_pp_saved_bytes(&p.g) > 0);
    CHECK(qt_cg_pp_need(&p.g, 0) > p.g.arena_bytes);
}

// The budget of a pipeline plan is checked on its stage-local tables (issue 36): the
// executed need is the largest stage arena (circular repeats included: pp-next-pp2, R 2),
// a stage-local graph's need is its arena (its in-flight slots are in it), and the check
// passes at exactly that need though the planning bound is over it, and fails one MiB below
// it naming the stage, its MiB and the pipeline keys.
TEST(CgPipeline, BudgetCheckOnTheExecutedStageTables)
{
    CgPlan p;
    LONGS_EQUAL(0, p.build("configgen/configs/runs/pp-next-pp2.yml"));
    CHECK(p.g.pp_graphs != NULL);
    int st = -2;
    const int64_t exec = qt_cg_pp_executed_need(&p.g, &st);
    int want = 0;
    for (int k = 1; k < 2; k++)
        if (p.g.pp_graphs[k].arena_bytes > p.g.pp_graphs[want].arena_bytes) want = k;
    LONGS_EQUAL(want, st);
    LONGS_EQUAL(p.g.pp_graphs[want].arena_bytes, exec);
    for (int k = 0; k < 2; k++)
        LONGS_EQUAL(p.g.pp_graphs[k].arena_bytes, qt_cg_need_bytes(&p.g.pp_graphs[k]));
    CHECK(qt_cg_need_bytes(&p.g) > exec);  // the planning bound: over the budget below
    char err[4096] = "";
    p.s.budget_gib = (double)exec / 1073741824.0;
    LONGS_EQUAL(0, qt_cg_budget_check(&p.g, err, sizeof err));
    p.s.budget_gib = (double)(exec - 1048576) / 1073741824.0;
    LONGS_EQUAL(-1, qt_cg_budget_check(&p.g, err, sizeof err));
    char want_s[160];
    snprintf(want_s, sizeof want_s, "(pipeline stage %d of 2, the stage whose executed "
             "stage-local tables need the most: %.1f MiB", want, (double)exec / 1048576.0);
    STRCMP_CONTAINS(want_s, err);
    STRCMP_CONTAINS("M = num_pipeline_microbatches=4, R = 2); the same under pipeline_schedule "
                    "gpipe and 1f1b)", err);
    STRCMP_CONTAINS("more pipeline stages (ici_pipeline_parallelism", err);
    p.s.budget_gib = 0;  // no budget: nothing checked
    LONGS_EQUAL(0, qt_cg_budget_check(&p.g, err, sizeof err));
}

// The MTP head with circular repeats has stage-local tables too: the budget check is the
// largest executed stage's need (not the planning bound), exactly at the budget's edge.
TEST(CgPipeline, CircularMtpBudgetCheckIsTheExecutedNeed)
{
    CgPlan p;
    char *o[] = {(char *)"mtp_num_layers=1"};
    LONGS_EQUAL(0, p.build("configgen/configs/runs/pp-next-pp2.yml", 1, o));
    CHECK(p.g.pp_graphs != NULL);
    int st = -2;
    const int64_t need = qt_cg_pp_executed_need(&p.g, &st);
    CHECK(need > 0);
    CHECK(st == 0 || st == 1);
    char err[4096] = "";
    p.s.budget_gib = (double)need / 1073741824.0;
    LONGS_EQUAL(0, qt_cg_budget_check(&p.g, err, sizeof err));
    p.s.budget_gib = (double)(need - 1) / 1073741824.0;
    LONGS_EQUAL(-1, qt_cg_budget_check(&p.g, err, sizeof err));
}
