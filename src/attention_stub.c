/* Device attention entry point in a build without CUDA: it exists (so programs link either
 * way), makes the host checks of the call's arguments that the CUDA build makes first
 * (pw_check_gpu_attention_args: problem, args, kernel, the GPU's shapes;
 * pw_check_union_attention_buffers: grouping, perm, meta) and then returns
 * PW_ERROR_UNSUPPORTED. The CUDA build defines it in src/cuda/attention.cu. */
#include "pageweaver.h"
#include "pw_internal.h"

#ifndef PW_HAVE_CUDA

pw_status_t pw_union_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                               const pw_grouping_t *grouping, const int32_t *perm,
                               const pw_union_meta_t *meta, pw_kernel_t kernel,
                               pw_stream_t stream)
{
    (void)stream;
    PW_TRY(pw_check_gpu_attention_args(problem, args, kernel));
    PW_TRY(pw_check_union_attention_buffers(problem, grouping, perm, meta, kernel));
    return pw_fail(PW_ERROR_UNSUPPORTED, "pw_union_attention: built without CUDA");
}

#else
typedef int pw_attention_stub_unused_t; /* ISO C: no empty translation unit */
#endif
