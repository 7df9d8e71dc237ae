/* The avx512 kernel set (placeholder until the SIMD kernels land: no table yet, so
 * kern_ops_get reports the set as unavailable and callers use the scalar set). */
#include "kernels.h"

#include <stddef.h>

const struct kern_ops *kern_ops_avx512_table(void)
{
    return NULL;
}
