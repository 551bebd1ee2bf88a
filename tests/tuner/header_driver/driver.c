/* Asks a generated tilewise header, as a host TilingFunc would, for one shape per input line.
 *
 * Built by tests/tuner/test_export.py as C99 and as C++11 with:
 *   -DTW_HEADER='"path/to/table.h"' -DTW_LOOKUP=tilewise_<op>_lookup
 *   -DTW_FIELDS=TILEWISE_<OP>_FIELDS -DTW_NDIMS=<dims of the op>
 *   -DTW_ARGS='(int64_t)d[0], (int64_t)d[1], ...' (one per dim, in the op's dims order)
 * stdin:  "<target> <dtype> <dim> <dim> ..." per line
 * stdout: "<rc> <field> <field> ..." per line (only rc when it is 0)
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
    int rc;
    int i;
    for (;;) {
        if (scanf("%63s %63s", target, dtype) != 2) break;
        for (i = 0; i < TW_NDIMS; ++i) {
            if (scanf("%lld", &d[i]) != 1) return 1;
        }
        rc = TW_LOOKUP(target, dtype, TW_ARGS, tiling);
        printf("%d", rc);
        if (rc != 0) {
            for (i = 0; i < TW_FIELDS; ++i) printf(" %ld", (long)tiling[i]);
        }
        printf("\n");
    }
    return 0;
}
