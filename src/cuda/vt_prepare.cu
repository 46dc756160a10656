/* vt_prepare.cu — the V^T pre-pass of the full call's Union4 kernel (attention_lean.cuh,
 * PREVT; bench/NOTES.md v8).
 *
 * The attention kernels multiply P by V with V as the wgmma B operand, which FP8 wgmma takes
 * K-major only: V [token][d] must become V^T [d][position] (position: the token permutation
 * that lets P go from the QK accumulator straight into the A fragments, attention.cu). Done
 * inside the attention kernel, the transpose and the barrier that publishes it sit on every
 * page's chain (bench/NOTES.md v8: 9-14% of the lean kernel's time). Here one CTA per (KV
 * head, request, logical page) that some group's union holds (the `touched` bytes union
 * preparation sets; NULL: every page a query of the request may see) transposes the page
 * once per call into tiles[h][r][l], 16 KiB in exactly the shared-memory byte order the
 * in-kernel transpose writes (128B-swizzled rows of 128 positions), so that the attention
 * kernel loads a tile with one bulk copy. Tokens past any query's sight are NOT zeroed
 * here: the attention kernel zeroes, per CTA, the positions past its members' last visible
 * token (zero_vt_after), as the in-kernel transpose does, so the bytes the tensor cores read
 * are the same and so are the outputs. Pages whose physical id is outside the cache are
 * skipped (the attention kernel drops them). Each CTA clears its `touched` byte for the next
 * call after reading it.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "attention_common.cuh"
#include "attention_config.cuh"
#include "pageweaver.h"
#include "ptx.cuh"
#include "pw_internal.h"

namespace {

struct VtParams {
    const uint8_t *v_cache;     // [pages][P][Hkv][D] e4m3, token row stride kv_stride bytes
    int64_t kv_stride;
    const int32_t *page_table;  // [R, page_table_stride]
    int64_t page_table_stride;
    const int32_t *prefix_lens, *kv_lens, *cu_seqlens_q; // [R], [R], [R+1]
    uint8_t *touched;           // [Hkv, R, max_pages] or NULL (every visible page)
    uint8_t *tiles;             // [Hkv, R, max_pages] x 16 KiB
    int64_t max_pages, num_cache_pages;
    int32_t num_requests, num_kv_heads, num_tokens;
};

__global__ void __launch_bounds__(128) vt_prepare_kernel(const VtParams p)
{
    __shared__ __align__(1024) uint8_t v[pw::kTileBytes];
    __shared__ __align__(1024) uint8_t vt[pw::kTileBytes];
    const int64_t page = blockIdx.x;
    const int32_t r = (int32_t)blockIdx.y, h = (int32_t)blockIdx.z;
    const int64_t slot = pw::vt_tile_slot(h, r, page, p.num_requests, p.max_pages);
    if (p.touched) {
        if (p.touched[slot] == 0) return; // CTA-uniform
    } else {
        // Every page a query of the request may see: [0, ceil(min(kv_len, prefix + q_len) / P)).
        const int64_t q_len = (int64_t)p.cu_seqlens_q[r + 1] - p.cu_seqlens_q[r];
        const int64_t last = min((int64_t)p.kv_lens[r], (int64_t)p.prefix_lens[r] + q_len);
        if (page * pw::kPageSize >= last) return;
    }
    __syncthreads(); // every thread read `touched` before it is cleared
    if (p.touched && threadIdx.x == 0) p.touched[slot] = 0;
    const int32_t physical = p.page_table[(int64_t)r * p.page_table_stride + page];
    if (physical < 0 || (int64_t)physical >= p.num_cache_pages) return;
    const int tid = threadIdx.x;
    // Page rows [token][d] of KV head h into the TMA layout (128B-swizzled), 8 x 16 B per thread.
    const uint8_t *src = p.v_cache + (int64_t)physical * pw::kPageSize * p.kv_stride + (int64_t)h * pw::kHeadDim;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int idx = tid + 128 * k, t = idx / 8, c = idx % 8;
        const uint4 x = __ldg(reinterpret_cast<const uint4 *>(src + (int64_t)t * p.kv_stride + 16 * c));
        pw::st_shared_v4_u32(pw::smem_u32(v) + pw::sw128((uint32_t)t, (uint32_t)c), x);
    }
    __syncthreads();
    const int warp = tid / 32;
#pragma unroll 1
    for (int chunk = 2 * warp; chunk < 2 * warp + 2; chunk++)
        pw::transpose_v_chunk(pw::smem_u32(vt), pw::smem_u32(v), (uint32_t)chunk, pw::kPageSize - 1);
    __syncthreads();
    uint8_t *dst = p.tiles + slot * (int64_t)pw::kTileBytes;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int idx = tid + 128 * k;
        reinterpret_cast<uint4 *>(dst)[idx] = pw::ld_shared_v4_u32(pw::smem_u32(vt) + 16 * idx);
    }
}

} // namespace

extern "C" pw_status_t pw_vt_prepare(const pw_problem_t *problem, const pw_attention_args_t *args,
                                     uint8_t *touched, uint8_t *tiles, pw_stream_t stream)
{
    if (problem->num_tokens == 0 || problem->num_requests == 0) return PW_SUCCESS;
    VtParams p;
    p.v_cache = static_cast<const uint8_t *>(args->v_cache);
    p.kv_stride = args->kv_stride;
    p.page_table = args->requests.page_table;
    p.page_table_stride = args->requests.page_table_stride;
    p.prefix_lens = args->requests.prefix_lens;
    p.kv_lens = args->requests.kv_lens;
    p.cu_seqlens_q = args->requests.cu_seqlens_q;
    p.touched = touched;
    p.tiles = tiles;
    p.max_pages = problem->max_pages_per_request;
    p.num_cache_pages = problem->num_cache_pages;
    p.num_requests = problem->num_requests;
    p.num_kv_heads = problem->num_kv_heads;
    p.num_tokens = problem->num_tokens;
    if (problem->num_requests > 65535 || problem->num_kv_heads > 65535) // max_pages (int32) fits grid.x
        return pw_fail(PW_ERROR_UNSUPPORTED, "V^T pre-pass: grid (R %d, Hkv %d) exceeds (65535, 65535)",
                       problem->num_requests, problem->num_kv_heads);
    const dim3 grid((unsigned)p.max_pages, (unsigned)problem->num_requests, (unsigned)problem->num_kv_heads);
    vt_prepare_kernel<<<grid, 128, 0, (cudaStream_t)stream>>>(p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return pw_fail(PW_ERROR_CUDA, "V^T pre-pass launch: %s", cudaGetErrorString(e));
    return PW_SUCCESS;
}
