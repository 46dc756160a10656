/* attention_page64.cu — the lean kernels (attention_lean.cuh) on pages of 64 tokens: every
 * (Union4 / per-query, FP8 / FP8X2, with / without the V^T pre-pass, G 16 / 8 / 4, K 16 / 32
 * / 64, with / without per-token scales) form of the 128-token kernels, and the dense G = 8
 * / 4 tiles (attention_dense.cuh, FP8 / FP8X2, K 16 / 32 / 64), compiled in a translation
 * unit of their own so that they build in parallel with attention.cu. How a 64-token page
 * runs: attention_lean.cuh (PAGE = 64). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "attention_common.cuh"
#include "attention_config.cuh"
#include "attention_launch.cuh"
#include "attention_work.cuh"
#include "ptx.cuh"
#include "pw_internal.h"

#include "attention_lean.cuh"
#include "attention_dense.cuh"

namespace pw {

template <int VARIANT, bool X2, bool PREVT>
pw_status_t launch_lean_page64(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    return launch_lean_page<VARIANT, X2, PREVT, 64>(params, grid, stream);
}

template pw_status_t launch_lean_page64<kUnion4, false, false>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kUnion4, true, false>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kUnion4, false, true>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kUnion4, true, true>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kPerQuery, false, false>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kPerQuery, true, false>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kPerQuery, false, true>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_lean_page64<kPerQuery, true, true>(const AttentionParams &, unsigned, pw_stream_t);

template <int G, bool X2>
pw_status_t launch_dense_page64(const AttentionParams &params, unsigned grid, pw_stream_t stream)
{
    return launch_dense_page<G, X2, 64>(params, grid, stream);
}

template pw_status_t launch_dense_page64<8, false>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_dense_page64<8, true>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_dense_page64<4, false>(const AttentionParams &, unsigned, pw_stream_t);
template pw_status_t launch_dense_page64<4, true>(const AttentionParams &, unsigned, pw_stream_t);

} // namespace pw
