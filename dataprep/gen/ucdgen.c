/* ucdgen.c - generates the Unicode tables of qtrain-data (build/dataprep/gen/ucd_tables.c)
 * from the Unicode Character Database files of Debian's unicode-data package.
 *
 *   ucdgen UCD_DIR OUT.c
 *
 * Reads UCD_DIR/UnicodeData.txt (general category, canonical combining class, canonical
 * decomposition; "<..., First>"/"<..., Last>" lines are ranges), PropList.txt (White_Space,
 * Other_Alphabetic and Join_Control for the word class),
 * DerivedNormalizationProps.txt (NFC_Quick_Check No/Maybe, Full_Composition_Exclusion; its
 * first line names the Unicode version) and CompositionExclusions.txt (checked to be a subset
 * of Full_Composition_Exclusion). Writes, as C arrays:
 *   - two-stage tables (stage 1 by cp >> 8, deduplicated 256-entry blocks) of a flag byte
 *     (QTD_UC_L/N/M/WS/NFC_NOT_YES/WORD, the values of dataprep/src/unicode/ucd.h) and of the
 *     canonical combining class;
 *   - the full canonical decomposition of every code point that has one (recursively
 *     applied, not reordered; Hangul syllables are left to the algorithm), sorted by cp;
 *   - the primary composites: canonical pairs (first, second) -> composite whose composite
 *     is not Full_Composition_Exclusion, sorted by (first, second);
 *   - the version string.
 * Invariant: nothing in the output is typed by hand; the same input files give the same bytes.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCP 0x110000
#define F_L 1
#define F_N 2
#define F_M 4
#define F_WS 8
#define F_NFC_NOT_YES 16
#define F_WORD 32   /* \w of Rust's regex crate: Alphabetic, M, Nd, Pc, Join_Control */

static uint8_t g_flags[NCP], g_ccc[NCP], g_fce[NCP];
static uint32_t g_dec[NCP][2];   /* canonical decomposition: up to 2 code points */
static uint8_t g_declen[NCP];
static char g_version[32];

static void die(const char *what, const char *path)
{
    fprintf(stderr, "ucdgen: %s: %s\n", path, what);
    exit(1);
}

static FILE *open_ucd(const char *dir, const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot open (install Debian's unicode-data package)", path);
    return f;
}

/* "XXXX..YYYY ; Prop" or "XXXX ; Prop": the range and the property name (trimmed). */
static int parse_prop_line(char *line, uint32_t *lo, uint32_t *hi, char **prop)
{
    char *h = strchr(line, '#');
    if (h)
        *h = 0;
    char *semi = strchr(line, ';');
    if (!semi)
        return 0;
    *semi = 0;
    char *end;
    *lo = (uint32_t)strtoul(line, &end, 16);
    *hi = *lo;
    if (end[0] == '.' && end[1] == '.')
        *hi = (uint32_t)strtoul(end + 2, NULL, 16);
    char *p = semi + 1;
    while (*p == ' ')
        p++;
    *prop = p;
    size_t n = strlen(p);
    while (n && isspace((unsigned char)p[n - 1]))
        p[--n] = 0;
    return *hi < NCP && *lo <= *hi;
}

static void read_unicode_data(const char *dir)
{
    char path[4096], line[1024];
    FILE *f = open_ucd(dir, "UnicodeData.txt", path, sizeof path);
    uint32_t first = 0;
    while (fgets(line, sizeof line, f)) {
        char *fld[15];
        int n = 0;
        for (char *p = line; n < 15; n++) {
            fld[n] = p;
            char *s = strchr(p, ';');
            if (!s)
                break;
            *s = 0;
            p = s + 1;
        }
        if (n < 5)
            die("a line with fewer than 6 fields", path);
        uint32_t cp = (uint32_t)strtoul(fld[0], NULL, 16), lo = cp;
        if (cp >= NCP)
            die("code point out of range", path);
        if (strstr(fld[1], ", First>")) {
            first = cp;
            continue;
        }
        if (strstr(fld[1], ", Last>"))
            lo = first;
        uint8_t fl = fld[2][0] == 'L' ? F_L : fld[2][0] == 'N' ? F_N : fld[2][0] == 'M' ? F_M : 0;
        if (fl == F_L || fl == F_M || !strcmp(fld[2], "Nl") || !strcmp(fld[2], "Nd") || !strcmp(fld[2], "Pc"))
            fl |= F_WORD;
        int ccc = atoi(fld[3]);
        for (uint32_t c = lo; c <= cp; c++) {
            g_flags[c] |= fl;
            g_ccc[c] = (uint8_t)ccc;
        }
        if (fld[5][0] && fld[5][0] != '<') {   /* canonical decomposition */
            char *e = fld[5];
            int k = 0;
            while (*e && k < 3) {
                unsigned long v = strtoul(e, &e, 16);
                if (k < 2)
                    g_dec[cp][k] = (uint32_t)v;
                k++;
                while (*e == ' ')
                    e++;
            }
            if (k < 1 || k > 2)
                die("a canonical decomposition of more than 2 code points", path);
            g_declen[cp] = (uint8_t)k;
        }
    }
    fclose(f);
}

static void read_props(const char *dir)
{
    char path[4096], line[1024], *prop;
    uint32_t lo, hi;
    FILE *f = open_ucd(dir, "PropList.txt", path, sizeof path);
    while (fgets(line, sizeof line, f))
        if (parse_prop_line(line, &lo, &hi, &prop))
            for (uint32_t c = lo; c <= hi; c++) {
                if (!strcmp(prop, "White_Space"))
                    g_flags[c] |= F_WS;
                if (!strcmp(prop, "Other_Alphabetic") || !strcmp(prop, "Join_Control"))
                    g_flags[c] |= F_WORD;
            }
    fclose(f);
    f = open_ucd(dir, "DerivedNormalizationProps.txt", path, sizeof path);
    if (!fgets(line, sizeof line, f) || sscanf(line, "# DerivedNormalizationProps-%31[0-9.].txt", g_version) != 1)
        die("first line does not name the version", path);
    size_t vl = strlen(g_version);
    if (vl && g_version[vl - 1] == '.')
        g_version[vl - 1] = 0;
    while (fgets(line, sizeof line, f)) {
        if (!parse_prop_line(line, &lo, &hi, &prop))
            continue;
        int fce = !strcmp(prop, "Full_Composition_Exclusion");
        int qc = !strncmp(prop, "NFC_QC", 6);
        for (uint32_t c = lo; c <= hi; c++) {
            if (fce)
                g_fce[c] = 1;
            if (qc)
                g_flags[c] |= F_NFC_NOT_YES;
        }
    }
    fclose(f);
    f = open_ucd(dir, "CompositionExclusions.txt", path, sizeof path);
    while (fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#');
        if (h)
            *h = 0;
        char *e;
        unsigned long cp = strtoul(line, &e, 16);
        if (e != line && (cp >= NCP || !g_fce[cp]))
            die("an exclusion that is not Full_Composition_Exclusion", path);
    }
    fclose(f);
}

/* Emits a two-stage table of one byte per code point under NAME. */
static void emit_two_stage(FILE *o, const char *name, const uint8_t *v)
{
    static uint16_t stage1[NCP >> 8];
    static uint32_t firsts[NCP >> 8];
    int nblocks = 0;
    for (uint32_t b = 0; b < (NCP >> 8); b++) {
        int found = -1;
        for (int k = 0; k < nblocks && found < 0; k++)
            if (!memcmp(v + firsts[k], v + (b << 8), 256))
                found = k;
        if (found < 0) {
            firsts[nblocks] = b << 8;
            found = nblocks++;
        }
        stage1[b] = (uint16_t)found;
    }
    fprintf(o, "const uint16_t %s_stage1[%d] = {", name, NCP >> 8);
    for (int b = 0; b < (NCP >> 8); b++)
        fprintf(o, "%s%u,", b % 16 ? "" : "\n", stage1[b]);
    fprintf(o, "\n};\nconst uint8_t %s_stage2[%d] = {", name, nblocks * 256);
    for (int k = 0; k < nblocks; k++)
        for (int i = 0; i < 256; i++)
            fprintf(o, "%s%u,", i % 32 ? "" : "\n", v[firsts[k] + i]);
    fprintf(o, "\n};\n");
}

static int full_decomp(uint32_t cp, uint32_t *out)
{
    if (!g_declen[cp]) {
        out[0] = cp;
        return 1;
    }
    int n = full_decomp(g_dec[cp][0], out);
    if (g_declen[cp] == 2)
        n += full_decomp(g_dec[cp][1], out + n);
    return n;
}

static void emit_decomp_compose(FILE *o)
{
    uint32_t buf[32];
    int nd = 0, total = 0, nc = 0;
    fprintf(o, "const uint32_t qtd_ucd_decomp_data[] = {");
    for (uint32_t c = 0; c < NCP; c++)
        if (g_declen[c]) {
            int n = full_decomp(c, buf);
            for (int i = 0; i < n; i++)
                fprintf(o, "%s0x%X,", total++ % 12 ? "" : "\n", buf[i]);
        }
    fprintf(o, "\n};\n/* cp, offset << 8 | length into qtd_ucd_decomp_data */\n"
               "const uint32_t qtd_ucd_decomp[][2] = {");
    total = 0;
    for (uint32_t c = 0; c < NCP; c++)
        if (g_declen[c]) {
            int n = full_decomp(c, buf);
            fprintf(o, "%s{0x%X,0x%X},", nd++ % 6 ? "" : "\n", c, (unsigned)(total << 8 | n));
            total += n;
        }
    fprintf(o, "\n};\nconst int qtd_ucd_ndecomp = %d;\n", nd);
    /* primary composites, sorted by (first, second): collect then insertion-sort */
    static uint32_t comp[4096][3];
    for (uint32_t c = 0; c < NCP; c++)
        if (g_declen[c] == 2 && !g_fce[c]) {
            if (nc == 4096)
                die("more than 4096 composites", "UnicodeData.txt");
            uint32_t e[3] = {g_dec[c][0], g_dec[c][1], c};
            int j = nc++;
            while (j > 0 && (comp[j - 1][0] > e[0] || (comp[j - 1][0] == e[0] && comp[j - 1][1] > e[1]))) {
                memcpy(comp[j], comp[j - 1], sizeof comp[j]);
                j--;
            }
            memcpy(comp[j], e, sizeof e);
        }
    fprintf(o, "/* first, second, composite */\nconst uint32_t qtd_ucd_comp[][3] = {");
    for (int i = 0; i < nc; i++)
        fprintf(o, "%s{0x%X,0x%X,0x%X},", i % 4 ? "" : "\n", comp[i][0], comp[i][1], comp[i][2]);
    fprintf(o, "\n};\nconst int qtd_ucd_ncomp = %d;\n", nc);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ucdgen UCD_DIR OUT.c\n");
        return 2;
    }
    read_unicode_data(argv[1]);
    read_props(argv[1]);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *o = fopen(tmp, "w");
    if (!o)
        die("cannot write", tmp);
    fprintf(o, "/* ucd_tables.c - GENERATED by dataprep/gen/ucdgen.c from the Unicode %s data\n"
               " * files of Debian's unicode-data package; do not edit. */\n"
               "#include <stdint.h>\n\nconst char qtd_ucd_version[] = \"%s\";\n",
            g_version, g_version);
    emit_two_stage(o, "qtd_ucd_flags", g_flags);
    emit_two_stage(o, "qtd_ucd_ccc", g_ccc);
    emit_decomp_compose(o);
    if (fclose(o) || rename(tmp, argv[2]))
        die("cannot write", argv[2]);
    return 0;
}
