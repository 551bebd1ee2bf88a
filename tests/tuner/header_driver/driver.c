/* Asks a generated tilewise header, as a host TilingFunc would, for one shape per input line.
 *
 * Built by tests/tuner/test_export.py as C99 and as C++11 with:
 *   -DTW_HEADER='"path/to/table.h"' -DTW_LOOKUP=tilewise_<op>_lookup
 *   -DTW_FIELDS=TILEWISE_<OP>_FIELDS -DTW_NDIMS=<1 or 3>
 * stdin:  "<target> <dtype> <dim> [<dim> <dim>]" per line
 * stdout: "<rc> <field> <field> ..." per line (only rc when it is 0)
 */
#include <stdint.h>
#include <stdio.h>

#include TW_HEADER

int main(void)
{
    char target[64];
    char dtype[64];
    long long d[3] = {0, 0, 0};
    int32_t tiling[TW_FIELDS];
    int rc;
    int i;
    for (;;) {
#if TW_NDIMS == 3
        if (scanf("%63s %63s %lld %lld %lld", target, dtype, &d[0], &d[1], &d[2]) != 5) break;
        rc = TW_LOOKUP(target, dtype, (int64_t)d[0], (int64_t)d[1], (int64_t)d[2], tiling);
#elif TW_NDIMS == 1
        if (scanf("%63s %63s %lld", target, dtype, &d[0]) != 3) break;
        rc = TW_LOOKUP(target, dtype, (int64_t)d[0], tiling);
#else
#error "TW_NDIMS must be 1 or 3"
#endif
        printf("%d", rc);
        if (rc != 0) {
            for (i = 0; i < TW_FIELDS; ++i) printf(" %ld", (long)tiling[i]);
        }
        printf("\n");
    }
    return 0;
}
