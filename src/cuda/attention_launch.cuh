/* attention_launch.cuh — host-side launch of the lean kernels (attention_lean.cuh), shared by
 * attention.cu and attention_page64.cu (the 64-token-page forms, compiled apart so that the
 * two halves of the lean kernels build in parallel). */
#ifndef PW_ATTENTION_LAUNCH_CUH
#define PW_ATTENTION_LAUNCH_CUH

#include <atomic>

#include "attention_config.cuh"
#include "pageweaver.h"

namespace pw {

/* One launch of a cluster-free kernel with `smem` bytes of dynamic shared memory (maximum
 * carve-out), its attributes set once per device (`configured`: the caller's, one per
 * kernel). `what`: the kernel's name in messages, e.g. "lean". Defined in attention.cu. */
pw_status_t launch_one_cta_kind(void (*kernel)(AttentionParams), size_t smem, std::atomic<uint64_t> &configured,
                                const char *what, const AttentionParams &params, unsigned grid, pw_stream_t stream);

/* The lean kernel (Union4 or per-query, FP8 or FP8X2, with or without the V^T pre-pass) on
 * pages of 64 tokens, for the call's G, K and per-token scales (params.heads_per_kv,
 * params.topk, params.ts_k / ts_v). Defined in attention_page64.cu for VARIANT kUnion4 and
 * kPerQuery. */
template <int VARIANT, bool X2, bool PREVT>
pw_status_t launch_lean_page64(const AttentionParams &params, unsigned grid, pw_stream_t stream);

/* The dense G = 8 / 4 tiles (attention_dense.cuh, G = 8 or 4) on pages of 64 tokens, for the
 * call's K. Defined in attention_page64.cu. */
template <int G, bool X2>
pw_status_t launch_dense_page64(const AttentionParams &params, unsigned grid, pw_stream_t stream);

} // namespace pw

#endif
