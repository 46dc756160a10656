/* bench_util.cu — the CUDA helpers of `pageweaver bench` (see bench_util.h): an L2 read
 * probe, an E4M3 fill for the GEMM probe, and the gather / scatter of the "physically
 * reordered" arm. Not part of libpageweaver. */
#include <cuda_runtime.h>

#include "bench_util.h"

namespace {

constexpr int kReadThreads = 512;
constexpr int kMoveThreads = 256; // one (slot, KV head) block of 16 x 128 bf16 = 4 KiB

__global__ void l2_read_kernel(const uint4 *buf, size_t n16, int passes, uint32_t *sink)
{
    // Each CTA reads a contiguous slice; the slice moves by one CTA every pass, so no SM's
    // L1 could serve a second pass even if .cg were ignored.
    const size_t per_cta = (n16 + gridDim.x - 1) / gridDim.x;
    uint32_t acc = 0;
    for (int pass = 0; pass < passes; pass++) {
        const size_t slice = (blockIdx.x + (unsigned)pass) % gridDim.x;
        const size_t begin = slice * per_cta;
        const size_t end = begin + per_cta < n16 ? begin + per_cta : n16;
        for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const uint4 v = __ldcg(buf + i);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

__device__ uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_e4m3_kernel(uint8_t *buf, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t h = mix64(seed ^ (i * 0x2545f4914f6cdd1dull));
        // E4M3: sign | exponent 4..10 (2^-3 .. 2^3) | any mantissa: never the NaN code.
        const uint32_t sign = (uint32_t)(h & 1u) << 7;
        const uint32_t exponent = 4u + (uint32_t)((h >> 8) % 7u);
        const uint32_t mantissa = (uint32_t)(h >> 20) & 7u;
        buf[i] = (uint8_t)(sign | (exponent << 3) | mantissa);
    }
}

// blockIdx.x = slot s, blockIdx.y = KV head h. 16 heads x 128 dims x 2 bytes = 256 x 16 B.
__global__ void gather_kernel(const uint16_t *q_in, int64_t q_in_stride, const int32_t *topk_in,
                              const int32_t *perm, int32_t n, uint16_t *q_out, int64_t q_out_stride,
                              int32_t *topk_out)
{
    const int32_t s = (int32_t)blockIdx.x, h = (int32_t)blockIdx.y;
    const int32_t r = perm[(int64_t)h * n + s];
    if (r < 0 || r >= n) return; // not a permutation: leave the slot alone
    const uint4 *src = reinterpret_cast<const uint4 *>(q_in + (int64_t)r * q_in_stride + h * 16 * 128);
    uint4 *dst = reinterpret_cast<uint4 *>(q_out + (int64_t)s * q_out_stride + h * 16 * 128);
    dst[threadIdx.x] = src[threadIdx.x];
    if (threadIdx.x < 4) {
        const uint4 *ts = reinterpret_cast<const uint4 *>(topk_in + ((int64_t)h * n + r) * 16);
        uint4 *td = reinterpret_cast<uint4 *>(topk_out + ((int64_t)h * n + s) * 16);
        td[threadIdx.x] = ts[threadIdx.x];
    }
}

__global__ void scatter_kernel(const uint16_t *o_in, int64_t o_in_stride, const int32_t *perm, int32_t n,
                               uint16_t *o_out, int64_t o_out_stride)
{
    const int32_t s = (int32_t)blockIdx.x, h = (int32_t)blockIdx.y;
    const int32_t r = perm[(int64_t)h * n + s];
    if (r < 0 || r >= n) return;
    const uint4 *src = reinterpret_cast<const uint4 *>(o_in + (int64_t)s * o_in_stride + h * 16 * 128);
    uint4 *dst = reinterpret_cast<uint4 *>(o_out + (int64_t)r * o_out_stride + h * 16 * 128);
    dst[threadIdx.x] = src[threadIdx.x];
}

int last_error()
{
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int pwb_l2_read(const void *buf, size_t bytes, int passes, int blocks, uint32_t *sink,
                           pw_stream_t stream)
{
    l2_read_kernel<<<blocks, kReadThreads, 0, (cudaStream_t)stream>>>(static_cast<const uint4 *>(buf), bytes / 16,
                                                                       passes, sink);
    return last_error();
}

extern "C" int pwb_fill_e4m3(uint8_t *buf, size_t n, uint64_t seed, pw_stream_t stream)
{
    fill_e4m3_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>(buf, n, seed);
    return last_error();
}

extern "C" int pwb_gather_rows(const pw_bf16_t *q_in, int64_t q_in_stride, const int32_t *topk_in,
                               const int32_t *perm, int32_t num_tokens, int32_t num_kv_heads,
                               pw_bf16_t *q_out, int64_t q_out_stride, int32_t *topk_out,
                               pw_stream_t stream)
{
    if (num_tokens == 0) return 0;
    gather_kernel<<<dim3((unsigned)num_tokens, (unsigned)num_kv_heads), kMoveThreads, 0, (cudaStream_t)stream>>>(
        q_in, q_in_stride, topk_in, perm, num_tokens, q_out, q_out_stride, topk_out);
    return last_error();
}

extern "C" int pwb_scatter_rows(const pw_bf16_t *o_in, int64_t o_in_stride, const int32_t *perm,
                                int32_t num_tokens, int32_t num_kv_heads, pw_bf16_t *o_out,
                                int64_t o_out_stride, pw_stream_t stream)
{
    if (num_tokens == 0) return 0;
    scatter_kernel<<<dim3((unsigned)num_tokens, (unsigned)num_kv_heads), kMoveThreads, 0, (cudaStream_t)stream>>>(
        o_in, o_in_stride, perm, num_tokens, o_out, o_out_stride);
    return last_error();
}
