/* ucd.c - decomposition and composition look-ups over the generated sorted arrays
 * (ucd.h). Invariant: both arrays are sorted by ucdgen, so binary search is exact. */
#include "ucd.h"

extern const uint32_t qtd_ucd_decomp_data[];
extern const uint32_t qtd_ucd_decomp[][2];
extern const int qtd_ucd_ndecomp;
extern const uint32_t qtd_ucd_comp[][3];
extern const int qtd_ucd_ncomp;

int qtd_uc_decomp(uint32_t cp, const uint32_t **out)
{
    int lo = 0, hi = qtd_ucd_ndecomp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        uint32_t c = qtd_ucd_decomp[mid][0];
        if (c == cp) {
            *out = qtd_ucd_decomp_data + (qtd_ucd_decomp[mid][1] >> 8);
            return (int)(qtd_ucd_decomp[mid][1] & 255);
        }
        if (c < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return 0;
}

uint32_t qtd_uc_compose(uint32_t a, uint32_t b)
{
    int lo = 0, hi = qtd_ucd_ncomp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const uint32_t *e = qtd_ucd_comp[mid];
        if (e[0] == a && e[1] == b)
            return e[2];
        if (e[0] < a || (e[0] == a && e[1] < b))
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return 0;
}
