// test_dataprep.cpp - qtrain-data's text pipeline (dataprep/src): strict UTF-8, NFC on known
// cases (composition, Hangul, reordering of combining marks, composition exclusions,
// singletons), the Qwen3 and Qwen3.5 pre-tokenizer splits on hand-made strings, and BPE on a
// tiny vocabulary and merge list (rank order, leftmost ties, added tokens), loaded from a
// tokenizer.json written to a temporary file. Group dataprep_app: `qtrain-data encode` run
// in-process on temporary files (keys and `--`, the out= checks and overwrite=1, .ndjson
// and field=, empty outputs, byte-order marks, duplicate JSON keys, the summary's words).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" {
#include "app/args.h"
#include "app/commands.h"
#include "app/tokfile.h"
#include "base/err.h"
#include "base/json.h"
#include "base/utf8.h"
#include "tok/pretok.h"
#include "tok/tokenizer.h"
#include "unicode/nfc.h"
}

#include "CppUTest/TestHarness.h"

namespace {

std::string nfc(const std::string &s)
{
    qtd_bytes out = {NULL, 0, 0};
    qtd_nfc((const uint8_t *)s.data(), s.size(), &out);
    std::string r((const char *)out.data, out.len);
    qtd_bytes_free(&out);
    return r;
}

std::string pieces(const std::string &s, int pat)
{
    std::string r;
    size_t i = 0;
    while (i < s.size()) {
        size_t e = qtd_pretok_next((const uint8_t *)s.data(), s.size(), i, pat);
        r += (i ? "|" : "") + s.substr(i, e - i);
        i = e;
    }
    return r;
}

// byte-level string of raw bytes, as a JSON string body
std::string bl(const std::string &raw)
{
    std::string r;
    for (unsigned char c : raw) {
        uint8_t u[4];
        int n = qtd_utf8_put(qtd_bytelevel_cp(c), u);
        if (c == '"' || c == '\\')
            r += '\\';
        r.append((const char *)u, n);
    }
    return r;
}

// a tokenizer.json: the 256 byte tokens (id = byte), then extra tokens, merges in rank order
std::string tiny_json(const char *pattern_json, const std::vector<std::string> &extra,
                      const std::vector<std::pair<std::string, std::string>> &merges, const char *added)
{
    std::string v = "{";
    for (int b = 0; b < 256; b++)
        v += (b ? ",\"" : "\"") + bl(std::string(1, (char)b)) + "\":" + std::to_string(b);
    for (size_t k = 0; k < extra.size(); k++)
        v += ",\"" + bl(extra[k]) + "\":" + std::to_string(256 + k);
    v += "}";
    std::string m = "[";
    for (size_t k = 0; k < merges.size(); k++)
        m += (k ? ",[\"" : "[\"") + bl(merges[k].first) + "\",\"" + bl(merges[k].second) + "\"]";
    m += "]";
    return std::string("{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":") + added +
           ",\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
           "{\"type\":\"Split\",\"pattern\":{\"Regex\":" + pattern_json + "},\"behavior\":\"Isolated\",\"invert\":false},"
           "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]},"
           "\"post_processor\":null,\"decoder\":null,\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
           "\"vocab\":" + v + ",\"merges\":" + m + "}}";
}

std::string json_escape(const char *s)
{
    std::string r = "\"";
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            r += '\\';
        r += *s;
    }
    return r + "\"";
}

int load(qtd_tok *t, const std::string &json)
{
    char path[] = "/tmp/qtd-unit-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, json.data(), json.size()) != (ssize_t)json.size())
        return -2;
    close(fd);
    int rc = qtd_tok_load(t, path);
    unlink(path);
    return rc;
}

std::vector<uint32_t> enc(qtd_tok *t, const std::string &s)
{
    qtd_u32s out = {NULL, 0, 0};
    qtd_tok_encode(t, (const uint8_t *)s.data(), s.size(), &out);
    std::vector<uint32_t> r(out.data, out.data + out.len);
    qtd_u32s_free(&out);
    return r;
}

} // namespace

TEST_GROUP(dataprep){};

TEST(dataprep, utf8_strict)
{
    const char *ok = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf";
    LONGS_EQUAL(strlen(ok), qtd_utf8_check((const uint8_t *)ok, strlen(ok)));
    struct { const char *s; size_t bad; } cases[] = {
        {"ab\xc0\x80", 2},          // overlong NUL
        {"\xe0\x80\xaf", 0},        // overlong 3-byte
        {"x\xed\xa0\x80", 1},       // surrogate U+D800
        {"\xf4\x90\x80\x80", 0},    // above U+10FFFF
        {"abc\xe2\x82", 3},         // truncated at the end
        {"abcdefghij\x80", 10},     // stray continuation after the 8-byte ASCII path
        {"\xf8\x88\x80\x80\x80", 0} // 5-byte form
    };
    for (auto &c : cases)
        LONGS_EQUAL(c.bad, qtd_utf8_check((const uint8_t *)c.s, strlen(c.s)));
    size_t i = 0;
    LONGS_EQUAL(0x1F600, qtd_utf8_next((const uint8_t *)"\xf0\x9f\x98\x80", &i));
    LONGS_EQUAL(4, i);
}

TEST(dataprep, nfc_known_cases)
{
    STRCMP_EQUAL("caf\xc3\xa9", nfc("cafe\xcc\x81").c_str());                  // e + U+0301 -> U+00E9
    STRCMP_EQUAL("\xed\x95\x9c", nfc("\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab").c_str()); // jamo -> U+D55C
    STRCMP_EQUAL("\xea\xb0\x80\xe1\x86\xa7", nfc("\xea\xb0\x80\xe1\x86\xa7").c_str()); // U+11A7 is not a T jamo of the algorithm
    // a + U+0302 (230) + U+0323 (220): reordered to 0323 0302, composed to U+1EAD; both orders agree
    STRCMP_EQUAL("\xe1\xba\xad", nfc("a\xcc\x82\xcc\xa3").c_str());
    STRCMP_EQUAL("\xe1\xba\xad", nfc("a\xcc\xa3\xcc\x82").c_str());
    // U+0958 DEVANAGARI QA is a composition exclusion: stays decomposed as U+0915 U+093C
    STRCMP_EQUAL("\xe0\xa4\x95\xe0\xa4\xbc", nfc("\xe0\xa5\x98").c_str());
    STRCMP_EQUAL("\xe0\xa4\x95\xe0\xa4\xbc", nfc("\xe0\xa4\x95\xe0\xa4\xbc").c_str());
    STRCMP_EQUAL("\xc3\x85", nfc("\xe2\x84\xab").c_str());          // singleton U+212B -> U+00C5
    STRCMP_EQUAL("\xcc\x88\xcc\x81", nfc("\xcd\x84").c_str());      // U+0344 -> U+0308 U+0301 (non-starter)
    STRCMP_EQUAL("\xc3\xa1\xcc\x81", nfc("a\xcc\x81\xcc\x81").c_str()); // the second acute is blocked
    STRCMP_EQUAL("x\xcc\x81y", nfc("x\xcc\x81y").c_str());          // nothing to compose
    STRCMP_EQUAL("\xcc\x81" "abc", nfc("\xcc\x81" "abc").c_str());  // leading mark kept
    std::string ascii(5000, 'q');
    STRCMP_EQUAL(ascii.c_str(), nfc(ascii).c_str());
}

TEST(dataprep, pretok_qwen3_splits)
{
    int q3 = QTD_PAT_QWEN3;
    STRCMP_EQUAL("Hello| world|'s| it|'S|'ll|'x", pieces("Hello world's it'S'll'x", q3).c_str());
    STRCMP_EQUAL("a|  \n\n|  | b", pieces("a  \n\n   b", q3).c_str()); // \s*[\r\n]+ takes the spaces before
    STRCMP_EQUAL("x|1|2|3| |4", pieces("x123 4", q3).c_str());
    STRCMP_EQUAL("foo|(bar|);\n|\tx|   ", pieces("foo(bar);\n\tx   ", q3).c_str());
    STRCMP_EQUAL(" !!\r\n\r\n| x", pieces(" !!\r\n\r\n x", q3).c_str());
    STRCMP_EQUAL("x| \xcc\x81|yz", pieces("x \xcc\x81yz", q3).c_str()) ;      // mark is "other" in Qwen3
    STRCMP_EQUAL("x|\xcc\x81yz", pieces("x\xcc\x81yz", q3).c_str());
    STRCMP_EQUAL("it|'\xc5\xbf", pieces("it'\xc5\xbf", q3).c_str());        // U+017F folds to s
    STRCMP_EQUAL("a|\xe3\x80\x80|\xe3\x80\x80" "b", pieces("a\xe3\x80\x80\xe3\x80\x80" "b", q3).c_str()); // U+3000 is \s
}

TEST(dataprep, pretok_qwen35_marks)
{
    int q35 = QTD_PAT_QWEN35;
    STRCMP_EQUAL("x\xcc\x81yz", pieces("x\xcc\x81yz", q35).c_str());
    STRCMP_EQUAL("x| \xcc\x81yz", pieces("x \xcc\x81yz", q35).c_str());
    STRCMP_EQUAL("\xcc\x81\xcc\x82", pieces("\xcc\x81\xcc\x82", q35).c_str());
    STRCMP_EQUAL("ok|!\xcc\x81", pieces("ok!\xcc\x81", q35).c_str());  // '!' + mark: prefix + [LM]+
    CHECK_EQUAL(QTD_PAT_QWEN35, qtd_pretok_pattern(qtd_pretok_pattern_text(QTD_PAT_QWEN35), strlen(qtd_pretok_pattern_text(QTD_PAT_QWEN35))));
    CHECK_EQUAL(QTD_PAT_NONE, qtd_pretok_pattern("\\s+", 3));
}

TEST(dataprep, bpe_tiny_vocab)
{
    qtd_tok t;
    std::string j = tiny_json(json_escape(qtd_pretok_pattern_text(QTD_PAT_QWEN3)).c_str(), {"ab", "abc", "bc", "aa"},
                              {{"a", "b"}, {"ab", "c"}, {"b", "c"}, {"a", "a"}},
                              "[{\"id\":300,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                              "\"normalized\":false,\"special\":true}]");
    LONGS_EQUAL(0, load(&t, j));
    CHECK((enc(&t, "abc") == std::vector<uint32_t>{257}));                  // a b first, then ab c
    CHECK((enc(&t, "bcab") == std::vector<uint32_t>{258, 256}));            // rank 0 before rank 2
    CHECK((enc(&t, "aaab") == std::vector<uint32_t>{259, 256}));
    CHECK((enc(&t, "aaa") == std::vector<uint32_t>{259, 'a'}));             // leftmost of equal ranks
    CHECK((enc(&t, "aaaa") == std::vector<uint32_t>{259, 259}));
    CHECK((enc(&t, "ab<x>ab") == std::vector<uint32_t>{256, 300, 256}));    // added token splits first
    CHECK((enc(&t, "ab ab") == std::vector<uint32_t>{256, ' ', 256})); // " ab": no merge with the space
    CHECK((enc(&t, "abcabcabc") == std::vector<uint32_t>{257, 257, 257}));   // long piece, repeated from the cache
    CHECK((enc(&t, "abcabcabc") == std::vector<uint32_t>{257, 257, 257}));
    qtd_bytes out = {NULL, 0, 0};
    uint32_t ids[] = {257, 300, 'z'};
    LONGS_EQUAL(0, qtd_tok_decode(&t, ids, 3, &out));
    STRCMP_EQUAL("abc<x>z", std::string((const char *)out.data, out.len).c_str());
    uint32_t bad[] = {280};
    LONGS_EQUAL(-1, qtd_tok_decode(&t, bad, 1, &out));
    STRCMP_CONTAINS("id 280 at position 0", qtd_errmsg());
    qtd_bytes_free(&out);
    qtd_tok_free(&t);
}

TEST(dataprep, tokenizer_json_refusals)
{
    qtd_tok t;
    std::string good = tiny_json(json_escape(qtd_pretok_pattern_text(QTD_PAT_QWEN35)).c_str(), {"ab"}, {{"a", "b"}}, "[]");
    LONGS_EQUAL(0, load(&t, good));
    LONGS_EQUAL(QTD_PAT_QWEN35, t.pattern);
    qtd_tok_free(&t);
    LONGS_EQUAL(-1, load(&t, tiny_json("\"\\\\s+\"", {"ab"}, {{"a", "b"}}, "[]")));
    STRCMP_CONTAINS("pre_tokenizer Split pattern \"\\s+\" is not a Qwen2/Qwen3/Qwen3.5 pattern", qtd_errmsg());
    qtd_tok_free(&t);
    std::string nfkc = good;
    nfkc.replace(nfkc.find("\"NFC\""), 5, "\"NFKC\"");
    LONGS_EQUAL(-1, load(&t, nfkc));
    STRCMP_CONTAINS("normalizer \"NFKC\" is not NFC", qtd_errmsg());
    qtd_tok_free(&t);
    LONGS_EQUAL(-1, load(&t, tiny_json(json_escape(qtd_pretok_pattern_text(QTD_PAT_QWEN3)).c_str(), {"ab"}, {{"a", "c"}}, "[]")));
    STRCMP_CONTAINS("model.merges[0]", qtd_errmsg());
    qtd_tok_free(&t);
}

// JSON objects with a repeated key: the last value counts (Python's json.loads, JSON.parse)
TEST(dataprep, json_duplicate_key_takes_last)
{
    qtd_json j = {NULL, 0, 0, {NULL, 0, 0}, 0};
    const char *s = "{\"text\": \"first\", \"n\": 1, \"text\": \"last\"}";
    LONGS_EQUAL(0, qtd_json_parse(&j, (const uint8_t *)s, strlen(s)));
    uint32_t f = qtd_json_get(&j, 0, "text", 4);
    CHECK(f != 0);
    STRCMP_EQUAL("last", std::string(qtd_json_str(&j, f), j.nodes[f].slen).c_str());
    qtd_json_free(&j);
}

// ---- the app layer: qtrain-data encode's arguments, inputs, out= checks and summary, run
// in-process (qtd_cmd_encode) on files in a temporary directory with a tiny tokenizer (the
// 256 byte tokens, "ab" = 256, <|endoftext|> = 257).
namespace {

struct enc_run {
    int rc;
    std::string out, err, msg;
};

std::string slurp(const std::string &path)
{
    std::string r;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f)
        return "<missing>";
    char b[4096];
    size_t n;
    while ((n = fread(b, 1, sizeof b, f)) > 0)
        r.append(b, n);
    fclose(f);
    return r;
}

void spit(const std::string &path, const std::string &bytes)
{
    FILE *f = fopen(path.c_str(), "wb");
    if (f) {
        fwrite(bytes.data(), 1, bytes.size(), f);
        fclose(f);
    }
}

// runs `qtrain-data encode ARGS` with stdout and stderr captured
enc_run encode(const std::string &dir, std::vector<std::string> args)
{
    std::vector<char *> argv;
    for (auto &a : args)
        argv.push_back(&a[0]);
    std::string o = dir + "/.stdout", e = dir + "/.stderr";
    fflush(stdout);
    fflush(stderr);
    int keep1 = dup(1), keep2 = dup(2);
    int fo = open(o.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(e.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    close(fo);
    close(fe);
    enc_run r;
    r.rc = qtd_cmd_encode((int)argv.size(), argv.data());
    r.msg = qtd_errmsg();
    fflush(stdout);
    fflush(stderr);
    dup2(keep1, 1);
    dup2(keep2, 2);
    close(keep1);
    close(keep2);
    r.out = slurp(o);
    r.err = slurp(e);
    unlink(o.c_str());
    unlink(e.c_str());
    return r;
}

// the ids of a QTTOKENS file of 4-byte tokens (empty when it is not one)
std::vector<uint32_t> ids_of(const std::string &path)
{
    std::string b = slurp(path);
    std::vector<uint32_t> r;
    if (b.size() < 32 || b.compare(0, 8, "QTTOKENS") || b[8] != 2)   // version 2: 32 bytes
        return r;
    for (size_t k = 32; k + 4 <= b.size(); k += 4)
        r.push_back((uint8_t)b[k] | (uint32_t)(uint8_t)b[k + 1] << 8 | (uint32_t)(uint8_t)b[k + 2] << 16 |
                    (uint32_t)(uint8_t)b[k + 3] << 24);
    return r;
}

// the names in dir other than the tokenizer (a left temporary file shows here)
std::string listing(const std::string &dir)
{
    std::string r;
    FILE *p = popen(("ls -A " + dir + " | grep -v '^tok.json$' | tr '\\n' ' '").c_str(), "r");
    char b[4096];
    size_t n;
    while (p && (n = fread(b, 1, sizeof b, p)) > 0)
        r.append(b, n);
    if (p)
        pclose(p);
    return r;
}

} // namespace

TEST_GROUP(dataprep_app)
{
    // fixed buffers (a std::string member would outlive the leak check of each test)
    char dirbuf[64], tokbuf[96];
    void setup() override
    {
        snprintf(dirbuf, sizeof dirbuf, "/tmp/qtd-app-XXXXXX");
        CHECK(mkdtemp(dirbuf) != NULL);
        snprintf(tokbuf, sizeof tokbuf, "%s/tok.json", dirbuf);
        spit(tokbuf, tiny_json(json_escape(qtd_pretok_pattern_text(QTD_PAT_QWEN3)).c_str(), {"ab"}, {{"a", "b"}},
                               "[{\"id\":257,\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,"
                               "\"rstrip\":false,\"normalized\":false,\"special\":true}]"));
    }
    void teardown() override
    {
        CHECK(system((std::string("rm -rf ") + dirbuf).c_str()) == 0);
    }
    std::string p(const char *name) { return std::string(dirbuf) + "/" + name; }
};

// `--` ends the keys: a later argument with '=' is an INPUT; without it, a path-like key
// says to put it after --
TEST(dataprep_app, args_double_dash_ends_keys)
{
    mkdir(p("dir").c_str(), 0755);
    spit(p("dir/v=1.txt"), "ab");
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), "--", p("dir/v=1.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    CHECK((ids_of(p("o.tok")) == std::vector<uint32_t>{256, 257}));
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o2.tok"), "dir/v=1.txt"});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS("unknown key 'dir/v' in 'dir/v=1.txt'", r.msg.c_str());
    STRCMP_CONTAINS("if 'dir/v=1.txt' is a file, put it after --", r.msg.c_str());
    r = encode(dirbuf, {"tokenizr=x", "out=" + p("o2.tok"), "-"});
    LONGS_EQUAL(-1, r.rc);
    CHECK(r.msg.find("after --") == std::string::npos);   // a key-like typo gets no such hint
    qtd_args a = {{"in", NULL}, {NULL}, {NULL}, 0};
    char k1[] = "--", k2[] = "x=1";
    char *av[] = {k1, k2};
    LONGS_EQUAL(-1, qtd_args_parse(&a, "info", 2, av, 0));   // a command without inputs: still not key=value
    STRCMP_CONTAINS("argument 'x=1' is not key=value", qtd_errmsg());
}

// an existing out= is replaced only with overwrite=1; what cannot be replaced is refused
// before the tokenizer is read, leaving the file as it was
TEST(dataprep_app, out_existing_needs_overwrite)
{
    spit(p("in.txt"), "abab");
    spit(p("old.tok"), "precious");
    enc_run r = encode(dirbuf, {"tokenizer=" + p("none.json"), "out=" + p("old.tok"), p("in.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("out=" + p("old.tok") + " exists; give overwrite=1 to replace it, or another path").c_str(),
                    r.msg.c_str());
    STRCMP_EQUAL("precious", slurp(p("old.tok")).c_str());
    STRCMP_EQUAL("in.txt old.tok ", listing(dirbuf).c_str());
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("old.tok"), "overwrite=1", p("in.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    CHECK((ids_of(p("old.tok")) == std::vector<uint32_t>{256, 256, 257}));
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("old.tok"), "overwrite=yes", p("in.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS("overwrite=yes: expected 0 or 1", r.msg.c_str());
}

TEST(dataprep_app, out_same_file_as_an_input_is_refused)
{
    spit(p("in.txt"), "abab");
    CHECK(symlink(p("in.txt").c_str(), p("link.tok").c_str()) == 0);
    const char *outs[] = {"in.txt", "link.tok"};
    for (const char *o : outs) {
        enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p(o), "overwrite=1", p("in.txt")});
        LONGS_EQUAL(-1, r.rc);
        STRCMP_CONTAINS(("out=" + p(o) + " is the same file as the input " + p("in.txt")).c_str(), r.msg.c_str());
        STRCMP_EQUAL("abab", slurp(p("in.txt")).c_str());
    }
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + std::string(tokbuf), "overwrite=1", p("in.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS("is the same file as the tokenizer", r.msg.c_str());
    STRCMP_EQUAL("in.txt link.tok ", listing(dirbuf).c_str());
}

TEST(dataprep_app, out_not_a_regular_file_or_no_directory_is_refused)
{
    spit(p("in.txt"), "abab");
    mkdir(p("adir").c_str(), 0755);
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("adir"), "overwrite=1", p("in.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("out=" + p("adir") + " exists and is a directory; expected").c_str(), r.msg.c_str());
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=/dev/null", "overwrite=1", p("in.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS("out=/dev/null exists and is a character device", r.msg.c_str());
    r = encode(dirbuf, {"tokenizer=" + p("none.json"), "out=" + p("nodir/o.tok"), p("in.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("out=" + p("nodir/o.tok") + ": the directory " + p("nodir") + " does not exist").c_str(),
                    r.msg.c_str());
    STRCMP_EQUAL("adir in.txt ", listing(dirbuf).c_str());
    // a directory without write permission (root writes there all the same: checked as a user)
    mkdir(p("ro").c_str(), 0555);
    r = encode(dirbuf, {"tokenizer=" + p("none.json"), "out=" + p("ro/o.tok"), p("in.txt")});
    if (geteuid() != 0) {
        LONGS_EQUAL(-1, r.rc);
        STRCMP_CONTAINS(("out=" + p("ro/o.tok") + ": the directory " + p("ro") + " is not writable").c_str(),
                        r.msg.c_str());
    }
    chmod(p("ro").c_str(), 0755);
}

// .ndjson is JSON lines; field= on an input read as plain text is refused; a plain-text
// input that looks like JSON lines gets a note
TEST(dataprep_app, ndjson_and_field_on_plain_text)
{
    spit(p("a.ndjson"), "{\"body\": \"ab\"}\n{\"body\": \"a\"}\n");
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), "field=body", p("a.ndjson")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    CHECK((ids_of(p("o.tok")) == std::vector<uint32_t>{256, 257, 'a', 257}));
    spit(p("b.txt"), "{\"text\": \"ab\"}\n");
    r = encode(dirbuf, {"tokenizer=" + p("none.json"), "out=" + p("o2.tok"), "field=text", p("a.ndjson"), p("b.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("field=text applies to JSON-lines inputs (.jsonl, .ndjson, .json); " + p("b.txt") +
                     " is read as plain text (one document)").c_str(), r.msg.c_str());
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o2.tok"), p("b.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    STRCMP_CONTAINS((p("b.txt") + " starts with '{' but is read as plain text (one document)").c_str(), r.err.c_str());
}

// an output without documents, or with fewer than 2 tokens, is refused and leaves nothing
TEST(dataprep_app, empty_outputs_are_refused)
{
    spit(p("blank.jsonl"), "\n  \n");
    spit(p("empty.txt"), "");
    spit(p("one.txt"), "ab");
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), p("blank.jsonl")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("no documents in " + p("blank.jsonl")).c_str(), r.msg.c_str());
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), "eos=none", p("empty.txt"), p("blank.jsonl")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("0 tokens from " + p("empty.txt") + " " + p("blank.jsonl") + " (1 document, eos=none)").c_str(),
                    r.msg.c_str());
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), "eos=none", p("one.txt")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS(("1 token from " + p("one.txt") + " (1 document, eos=none)").c_str(), r.msg.c_str());
    STRCMP_CONTAINS("at least 2 tokens", r.msg.c_str());
    STRCMP_EQUAL("blank.jsonl empty.txt one.txt ", listing(dirbuf).c_str());
}

// a byte-order mark: refused at the start of a JSON line (naming it), kept as content in text
TEST(dataprep_app, byte_order_mark)
{
    spit(p("bom.jsonl"), "\xEF\xBB\xBF{\"text\": \"ab\"}\n");
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), p("bom.jsonl")});
    LONGS_EQUAL(-1, r.rc);
    STRCMP_CONTAINS((p("bom.jsonl") + ":1: the line starts with a UTF-8 byte-order mark (EF BB BF); save the file "
                     "without it").c_str(), r.msg.c_str());
    spit(p("bom.txt"), "\xEF\xBB\xBF" "ab");
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), p("bom.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    CHECK((ids_of(p("o.tok")) == std::vector<uint32_t>{0xEF, 0xBB, 0xBF, 256, 257}));
    STRCMP_CONTAINS("starts with a UTF-8 byte-order mark (EF BB BF): kept as text", r.err.c_str());
}

// a JSON line with its field twice encodes the last value; the summary's words agree in number
TEST(dataprep_app, duplicate_field_and_summary_words)
{
    spit(p("dup.jsonl"), "{\"text\": \"a\", \"text\": \"ab\"}\n");
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o.tok"), p("dup.jsonl")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    CHECK((ids_of(p("o.tok")) == std::vector<uint32_t>{256, 257}));
    STRCMP_CONTAINS("qtrain-data: 1 document, 2 bytes, 2 tokens (eos 257)", r.out.c_str());
    spit(p("x.txt"), "a");
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("o2.tok"), "eos=none", p("x.txt"), p("x.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    STRCMP_CONTAINS("qtrain-data: 2 documents, 2 bytes, 2 tokens (eos none)", r.out.c_str());
}

// the header of what encode writes: QTTOKENS version 2 recording the separator it put after
// each document (257, or 0xFFFFFFFF for eos=none), reserved 0; the reader takes version 2
// and version 1 (which records nothing) and refuses a set reserved word
TEST(dataprep_app, header_records_the_separator)
{
    spit(p("x.txt"), "ab");
    enc_run r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("a.tok"), p("x.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    r = encode(dirbuf, {"tokenizer=" + std::string(tokbuf), "out=" + p("n.tok"), "eos=none", p("x.txt"), p("x.txt")});
    LONGS_EQUAL_TEXT(0, r.rc, r.msg.c_str());
    std::string a = slurp(p("a.tok")), n = slurp(p("n.tok"));
    LONGS_EQUAL(32 + 2 * 4, a.size());
    CHECK(a.compare(0, 12, std::string("QTTOKENS\x02\0\0\0", 12)) == 0);
    CHECK(a.compare(24, 8, std::string("\x01\x01\0\0\0\0\0\0", 8)) == 0);   // 257, reserved 0
    CHECK(n.compare(24, 8, std::string("\xff\xff\xff\xff\0\0\0\0", 8)) == 0);
    qtd_tokfile f;
    LONGS_EQUAL_TEXT(0, qtd_tokf_open(&f, p("a.tok").c_str()), qtd_errmsg());
    LONGS_EQUAL(2, f.version);
    LONGS_EQUAL(257, f.eos);
    LONGS_EQUAL(2, f.count);
    LONGS_EQUAL(256, qtd_tokf_get(&f, 0));
    LONGS_EQUAL(257, qtd_tokf_get(&f, 1));
    qtd_tokf_close(&f);
    LONGS_EQUAL_TEXT(0, qtd_tokf_open(&f, p("n.tok").c_str()), qtd_errmsg());
    LONGS_EQUAL(-1, f.eos);
    qtd_tokf_close(&f);
    // version 1 (24-byte header, no separator recorded), as older qtrain-data wrote
    spit(p("v1.tok"), std::string("QTTOKENS\x01\0\0\0\x04\0\0\0\x02\0\0\0\0\0\0\0", 24) +
                          std::string("\x05\0\0\0\x06\0\0\0", 8));
    LONGS_EQUAL_TEXT(0, qtd_tokf_open(&f, p("v1.tok").c_str()), qtd_errmsg());
    LONGS_EQUAL(1, f.version);
    LONGS_EQUAL(-2, f.eos);
    LONGS_EQUAL(5, qtd_tokf_get(&f, 0));
    LONGS_EQUAL(6, qtd_tokf_get(&f, 1));
    qtd_tokf_close(&f);
    a[28] = 1;
    spit(p("bad.tok"), a);
    LONGS_EQUAL(-1, qtd_tokf_open(&f, p("bad.tok").c_str()));
    STRCMP_CONTAINS("reserved bytes 28..31 hold 1 (expected 0)", qtd_errmsg());
    qtd_tokf_close(&f);
}
