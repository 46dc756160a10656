/* Device attention entry point in a build without CUDA: it exists (so programs link either
 * way) and returns PW_ERROR_UNSUPPORTED without looking at its arguments. The CUDA build
 * defines it in src/cuda/attention.cu. */
#include "pageweaver.h"
#include "pw_internal.h"

#ifndef PW_HAVE_CUDA

pw_status_t pw_union_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                               const pw_grouping_t *grouping, const int32_t *perm,
                               const pw_union_meta_t *meta, pw_kernel_t kernel,
                               pw_stream_t stream)
{
    (void)problem;
    (void)args;
    (void)grouping;
    (void)perm;
    (void)meta;
    (void)kernel;
    (void)stream;
    return pw_fail(PW_ERROR_UNSUPPORTED, "pw_union_attention: built without CUDA");
}

#else
typedef int pw_attention_stub_unused_t; /* ISO C: no empty translation unit */
#endif
