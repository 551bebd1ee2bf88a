/* Asks a generated tilewise header's portfolio, as a host TilingFunc would, for one shape per
 * input line.
 *
 * Built by tests/tuner/test_export_portfolio.py as C99 and as C++11 with:
 *   -DTW_HEADER='"path/to/table.h"' -DTW_MEMBER=tilewise_<op>_member
 *   -DTW_MEMBER_TILING=tilewise_<op>_member_tiling -DTW_FIELDS=TILEWISE_<OP>_FIELDS
 *   -DTW_NDIMS=<dims of the op> -DTW_ARGS='(int64_t)d[0], (int64_t)d[1], ...'
 * stdin:  "<target> <dtype> <dim> <dim> ..." per line
 * stdout: "<member> <rc> <field> <field> ..." per line (fields only when rc is 1)
 */
#include <stdint.h>
#include <stdio.h>

#include TW_HEADER

int main(void)
{
    char target[64];
    char dtype[64];
    long long d[TW_NDIMS];
    int32_t tiling[TW_FIELDS];
    int member;
    int rc;
    int i;
    for (;;) {
        if (scanf("%63s %63s", target, dtype) != 2) break;
        for (i = 0; i < TW_NDIMS; ++i) {
            if (scanf("%lld", &d[i]) != 1) return 1;
        }
        member = TW_MEMBER(target, dtype, TW_ARGS);
        rc = TW_MEMBER_TILING(target, dtype, member, TW_ARGS, tiling);
        printf("%d %d", member, rc);
        if (rc == 1) {
            for (i = 0; i < TW_FIELDS; ++i) printf(" %ld", (long)tiling[i]);
        }
        printf("\n");
    }
    return 0;
}
