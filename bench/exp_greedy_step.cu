/* exp_greedy_step.cu — issue 13 item 2's cheap experiment: what one greedy step of the GPU
 * regroup costs, link by link, on one warp (no library data, no correctness check beyond a
 * checksum that keeps the chains live; bench/NOTES.md has the predictions and the results).
 *
 *   exp_greedy_step [--iters N]
 *
 * The library's step (src/cuda/regroup.cu, the member step of the greedy loop) is one
 * dependent chain per step: LDS of the winner's M row slice -> pend &= ~row -> POPC ->
 * key = count << 15 + row offset -> min over the lane's QPL keys -> REDUX.MIN across the
 * warp -> the winner's offset -> the next LDS address. Measured at W128 (QPL 4): ~76 ns =
 * ~150 clocks a step; W64 (QPL 2): ~62 ns. This program times, with clock64 on one warp of
 * one CTA (nothing else on its SM), chains of 1,024 dependent iterations of:
 *   lds32 / lds64   shared-memory pointer chase (the address is the previous load's value)
 *   redux           v = redux.min(v + lane)       (REDUX.MIN and its move back to a register)
 *   redux_lds       the REDUX result addresses the next LDS (the step minus the ALU part)
 *   shfl5           a 5-round xor-shuffle min butterfly
 *   popc            v = popc(v ^ c) + c
 *   step QPL 4 / 2  the library's member step on a random M (QPL 2 = W64, 4 = W128)
 *   step [R+UR]     the same with the M row address formed from the uniform REDUX result
 *                   (the row offset masked in the key's uniform register, added to the
 *                   lane's base with the [R + UR] form), if ptxas keeps it there (it does not:
 *                   bench/NOTES.md, twenty-fifth session)
 * Clocks per iteration (SM clock) and ns at the clock the device reports. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_check.h" /* CK */

namespace {

constexpr uint32_t kFull = 0xffffffffu;
constexpr int kW = 128;                     /* rows of M */
constexpr int kRowBytes = kW * 2;           /* 16 bits per (row, query) */
constexpr uint32_t kOffsetMask = 0x7fffu;   /* the row offset in the key's low 15 bits */
constexpr uint32_t kKeyShift = 15;
constexpr uint32_t kAssigned = 0x40000000u;

enum Kind { kLds32, kLds64, kRedux, kReduxLds, kShfl5, kPopc, kStep, kStepU, kNum };

__device__ uint32_t g_sink[32 * kNum * 2];
__device__ long long g_clocks[kNum * 2];

template <int QPL> __device__ __forceinline__ void load_row(const unsigned char *p, uint32_t (&mw)[2])
{
    if (QPL == 4) {
        const uint2 v = *reinterpret_cast<const uint2 *>(p);
        mw[0] = v.x;
        mw[1] = v.y;
    } else {
        mw[0] = *reinterpret_cast<const uint32_t *>(p);
        mw[1] = 0;
    }
}

/* ld.shared.v2.u32 at a 32-bit shared address written as base + uniform offset. */
__device__ __forceinline__ void load_row_u(uint32_t lane_base, uint32_t off, uint32_t (&mw)[2], bool v2)
{
    if (v2)
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(mw[0]), "=r"(mw[1]) : "r"(lane_base + off));
    else {
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(mw[0]) : "r"(lane_base + off));
        mw[1] = 0;
    }
}

template <int QPL, bool kUniform>
__device__ __forceinline__ uint32_t steps(const unsigned char *m, int lane, int iters, uint32_t &visits)
{
    uint32_t valid[QPL], base[QPL], pend[QPL];
#pragma unroll
    for (int k = 0; k < QPL; k++) {
        valid[k] = 0x9e3779b9u * (uint32_t)(lane * QPL + k + 1);
        valid[k] = (k & 1) ? (valid[k] & 0xffff0000u) : (valid[k] & 0xffffu);
        base[k] = (uint32_t)(lane * QPL + k) * kRowBytes;
        pend[k] = valid[k];
    }
    const unsigned char *m_lane = m + lane * QPL * 2;
    const uint32_t lane_base = (uint32_t)__cvta_generic_to_shared(m_lane);
    uint32_t mw[2];
    load_row<QPL>(m_lane, mw);
    for (int it = 0; it < iters; it++) {
        uint32_t key[QPL];
#pragma unroll
        for (int k = 0; k < QPL; k++) {
            pend[k] &= ~mw[k / 2];
            key[k] = ((uint32_t)__popc(pend[k]) << kKeyShift) + base[k];
        }
        uint32_t kmin = key[0];
#pragma unroll
        for (int k = 1; k < QPL; k++) kmin = min(kmin, key[k]);
        const uint32_t win = __reduce_min_sync(kFull, kmin);
        const uint32_t w_off = win & kOffsetMask;
#pragma unroll
        for (int k = 0; k < QPL; k++) base[k] = key[k] == win ? kAssigned : base[k];
        visits += win >> kKeyShift;
        if ((it & 3) == 3) { /* a group of 4 closes: fresh pend, every query back (keeps it going) */
#pragma unroll
            for (int k = 0; k < QPL; k++) {
                pend[k] = valid[k];
                base[k] = (uint32_t)(lane * QPL + k) * kRowBytes;
            }
        }
        if (kUniform) load_row_u(lane_base, w_off, mw, QPL == 4);
        else load_row<QPL>(m_lane + w_off, mw);
    }
    return mw[0] ^ mw[1] ^ visits;
}

__global__ void chain_kernel(int kind, int iters, const uint32_t *init)
{
    __shared__ __align__(16) unsigned char m[kW * kRowBytes]; /* 32 KB */
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < kW * kRowBytes / 4; i += blockDim.x)
        reinterpret_cast<uint32_t *>(m)[i] = init[i];
    __syncthreads();
    uint32_t *words = reinterpret_cast<uint32_t *>(m);
    uint32_t v = (uint32_t)lane * 8u, visits = 0;
    long long t0 = 0, t1 = 0;
    __syncwarp();
    switch (kind) {
    case kLds32:
        v = (uint32_t)lane;
        t0 = clock64();
        for (int i = 0; i < iters; i++) v = words[v];
        t1 = clock64();
        break;
    case kLds64:
        v = (uint32_t)lane * 2u;
        t0 = clock64();
        for (int i = 0; i < iters; i++) {
            const uint2 x = reinterpret_cast<const uint2 *>(words)[v >> 1];
            v = x.x ^ (x.y & 0u);
        }
        t1 = clock64();
        break;
    case kRedux:
        t0 = clock64();
        for (int i = 0; i < iters; i++) v = __reduce_min_sync(kFull, v + (uint32_t)lane);
        t1 = clock64();
        break;
    case kReduxLds:
        v = (uint32_t)lane;
        t0 = clock64();
        for (int i = 0; i < iters; i++) {
            const uint32_t w = __reduce_min_sync(kFull, v);
            v = words[(w & 0xfffu) + (uint32_t)lane];
        }
        t1 = clock64();
        break;
    case kShfl5:
        t0 = clock64();
        for (int i = 0; i < iters; i++) {
            uint32_t x = v + (uint32_t)lane;
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) x = min(x, __shfl_xor_sync(kFull, x, d));
            v = x;
        }
        t1 = clock64();
        break;
    case kPopc:
        t0 = clock64();
        for (int i = 0; i < iters; i++) v = (uint32_t)__popc(v ^ 0x5a5a5a5au) + 0x01010101u;
        t1 = clock64();
        break;
    default: break;
    }
    if (kind >= kStep) {
        const bool u = kind == kStepU;
        const int qpl = (int)blockIdx.x == 0 ? 4 : 2;
        t0 = clock64();
        if (qpl == 4) v = u ? steps<4, true>(m, lane, iters, visits) : steps<4, false>(m, lane, iters, visits);
        else v = u ? steps<2, true>(m, lane, iters, visits) : steps<2, false>(m, lane, iters, visits);
        t1 = clock64();
    }
    g_sink[(kind * 2 + blockIdx.x) * 32 + lane] = v;
    if (lane == 0) g_clocks[kind * 2 + blockIdx.x] = t1 - t0;
}

} // namespace

int main(int argc, char **argv)
{
    int iters = 1024;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    int dev = 0, clock_khz = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    /* M: for the pointer chases, word i holds a random index of the same lane's column
     * (i % 32 kept), so every chase stays in-bounds and conflict-free; for the steps the
     * same words are random masks. */
    const int words = kW * kRowBytes / 4;
    uint32_t *host = (uint32_t *)malloc((size_t)words * 4);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < words; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        host[i] = (uint32_t)((s % (uint64_t)(words / 32)) * 32u) + (uint32_t)(i % 32);
    }
    uint32_t *init = NULL;
    CK(cudaMalloc(&init, (size_t)words * 4));
    CK(cudaMemcpy(init, host, (size_t)words * 4, cudaMemcpyHostToDevice));
    static const char *names[kNum] = {"lds32 chase", "lds64 chase", "redux.min", "redux -> lds",
                                      "shfl x5 min", "popc + add", "step", "step [R+UR]"};
    printf("exp_greedy_step: one warp, %d dependent iterations, SM clock %.0f MHz\n", iters,
           clock_khz / 1000.0);
    for (int kind = 0; kind < kNum; kind++) {
        const int blocks = kind >= kStep ? 2 : 1;
        for (int rep = 0; rep < 3; rep++) { /* the last of three runs (warm) */
            /* steps: block 0 runs QPL 4, block 1 QPL 2, each alone on its SM */
            chain_kernel<<<blocks, 32>>>(kind, iters, init);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
        }
        long long clocks[2];
        CK(cudaMemcpyFromSymbol(clocks, g_clocks, sizeof clocks, (size_t)kind * 2 * sizeof(long long)));
        for (int b = 0; b < blocks; b++) {
            const double per = (double)clocks[b] / iters;
            printf("  %-14s%s %7.1f clocks  %6.1f ns\n", names[kind],
                   kind >= kStep ? (b == 0 ? " QPL 4 (W128)" : " QPL 2 (W64) ") : "             ", per,
                   per / (clock_khz / 1e6));
        }
    }
    CK(cudaFree(init));
    free(host);
    return 0;
}
