/* ptx.cuh — one Hopper PTX instruction per function, named after the instruction, each
 * with the PTX ISA section it comes from (PTX ISA 8.x / 9.0). Device code only. */
#ifndef PW_PTX_CUH
#define PW_PTX_CUH

#include <cuda.h>
#include <stdint.h>

namespace pw {

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* The kernel's shared-memory plan at the dynamic shared memory's first 1024-byte boundary
 * (the 128B-swizzled TMA / wgmma tiles need it), formed as an offset into the __shared__
 * array so that the compiler keeps the shared address space: 32-bit LDS / STS addressing.
 * Through an integer round trip ((uintptr_t)smem_raw + 1023 & ~1023, every kernel's form
 * until 2026-12-02/03) it was a generic pointer: 64-bit generic loads and stores, two
 * registers per address, and the default call 3% slower (bench/NOTES.md, seventeenth and
 * eighteenth sessions). */
template <class Plan>
static __device__ __forceinline__ Plan &smem_plan(uint8_t *smem_raw)
{
    return *reinterpret_cast<Plan *>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));
}

/* ---- shared memory by 32-bit address (PTX ISA 9.7.9.8 ld, 9.7.9.9 st) ----------------
 * 32-bit shared addresses instead of 64-bit generic pointers: loop-invariant addresses the
 * compiler hoists then cost one register each, not two. */
static __device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

static __device__ __forceinline__ void st_shared_v2_u32(uint32_t addr, uint32_t a, uint32_t b)
{
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(addr), "r"(a), "r"(b) : "memory");
}

static __device__ __forceinline__ void st_shared_v4_u32(uint32_t addr, uint4 v)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

/* atom.shared.add.u32 (PTX ISA 9.7.13.5), relaxed: the old value. */
static __device__ __forceinline__ uint32_t atom_add_shared(uint32_t addr, uint32_t v)
{
    uint32_t old;
    asm volatile("atom.shared.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
    return old;
}

/* One byte of shared memory, zero-extended. */
static __device__ __forceinline__ uint32_t ld_shared_u8(uint32_t addr)
{
    uint32_t v;
    asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

static __device__ __forceinline__ uint4 ld_shared_v4_u32(uint32_t addr)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

/* ---- mbarrier (PTX ISA 9.7.13.15) ------------------------------------------------- */
/* Programmatic dependent launch (PTX ISA 9.7.12.x, griddepcontrol; sm_90). launch_dependents:
 * this CTA lets the grids launched after it with cudaLaunchAttributeProgrammaticStreamSerialization
 * start (once every CTA of the grid has signalled or exited). wait: blocks until every
 * prerequisite grid has completed and its memory operations are visible; a no-op in a grid
 * launched without the attribute. */
static __device__ __forceinline__ void grid_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
static __device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

static __device__ __forceinline__ void mbarrier_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}

/* fence.mbarrier_init (PTX ISA 9.7.13.4): makes barrier inits visible cluster-wide. */
static __device__ __forceinline__ void fence_mbarrier_init_release_cluster()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

static __device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void mbarrier_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

/* mapa + mbarrier.arrive.shared::cluster: arrive on the barrier at the same shared-memory
 * offset in CTA `cta_rank` of this cluster (PTX ISA 9.7.9.22 mapa, 9.7.13.15.13). Default
 * semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: the explicit
 * .release.cluster compiled to MEMBAR.ALL.GPU + ERRBAR per page (2-3% of the kernel's
 * stall samples, ncu). */
static __device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t *bar, uint32_t cta_rank)
{
    asm volatile("{\n"
                 ".reg .b32 remote;\n"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
                 "}\n" ::"r"(smem_u32(bar)),
                 "r"(cta_rank)
                 : "memory");
}

static __device__ __forceinline__ uint32_t mbarrier_try_wait_parity(uint64_t *bar, uint32_t parity)
{
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done;
}

/* The same, acquiring at cluster scope: for barriers that remote CTAs release. */
static __device__ __forceinline__ uint32_t mbarrier_try_wait_parity_acquire_cluster(uint64_t *bar,
                                                                                   uint32_t parity)
{
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done;
}

/* try_wait with a suspend-time hint in nanoseconds (PTX ISA 9.7.13.15.16): returns when the
 * phase completes or after about `ns`, whichever comes first. */
static __device__ __forceinline__ uint32_t mbarrier_try_wait_parity_hint(uint64_t *bar, uint32_t parity,
                                                                        uint32_t ns)
{
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity), "r"(ns)
                 : "memory");
    return done;
}

/* mbarrier.test_wait (PTX ISA 9.7.13.15.16): the non-blocking test. try_wait may suspend the
 * thread up to a system-dependent time limit before it returns false; the decoupled producer
 * polls release barriers between its own work and must not be suspended there. */
static __device__ __forceinline__ uint32_t mbarrier_test_wait_parity(uint64_t *bar, uint32_t parity)
{
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done;
}

/* The same, acquiring at cluster scope (a barrier that the peer CTA arrives on). */
static __device__ __forceinline__ uint32_t mbarrier_test_wait_parity_acquire_cluster(uint64_t *bar,
                                                                                    uint32_t parity)
{
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.test_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done;
}

static __device__ __forceinline__ void mbarrier_wait_parity(uint64_t *bar, uint32_t parity)
{
    while (!mbarrier_try_wait_parity(bar, parity)) {
    }
}

static __device__ __forceinline__ void mbarrier_wait_parity_cluster(uint64_t *bar, uint32_t parity)
{
    while (!mbarrier_try_wait_parity_acquire_cluster(bar, parity)) {
    }
}

/* ---- bulk tensor copy (TMA) (PTX ISA 9.7.9.25.5.1 cp.async.bulk.tensor) -------------- */
/* 4-D tiled load global -> this CTA's shared memory, completing on `bar`. */
static __device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                                   int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                                   uint64_t l2_policy)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(l2_policy)
                 : "memory");
}

/* 3-D tiled load global -> this CTA's shared memory, completing on `bar`. */
static __device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                                   int32_t c0, int32_t c1, int32_t c2, uint64_t l2_policy)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "l"(l2_policy)
                 : "memory");
}

/* cp.async.bulk (PTX ISA 9.7.9.25.4.1, non-tensor): `bytes` (a multiple of 16) contiguous
 * bytes global -> this CTA's shared memory, completing on `bar`. */
static __device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar,
                                                 uint64_t l2_policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(l2_policy)
                 : "memory");
}

/* cp.async (PTX ISA 9.7.9.25.3, the non-bulk form): 4 bytes global -> shared, tracked per
 * thread by commit / wait groups (cp_async_commit, cp_async_wait_all). Both addresses
 * 4-byte aligned. */
static __device__ __forceinline__ void cp_async_4(void *dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Every cp.async this thread committed has landed (visible to this thread; other threads
 * after a barrier, e.g. __syncwarp). */
static __device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;" ::: "memory");
}

/* The same tile written to the same shared-memory offset of every CTA in cta_mask, each
 * CTA's barrier at `bar`'s offset receiving the complete_tx of its copy. */
static __device__ __forceinline__ void tma_load_4d_multicast(void *dst, const CUtensorMap *map,
                                                             uint64_t *bar, uint16_t cta_mask,
                                                             int32_t c0, int32_t c1, int32_t c2,
                                                             int32_t c3, uint64_t l2_policy)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster.L2::cache_hint [%0], [%1, {%4, %5, %6, %7}], [%2], %3, %8;" ::"r"(
                     smem_u32(dst)),
                 "l"(map), "r"(smem_u32(bar)), "h"(cta_mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                 "l"(l2_policy)
                 : "memory");
}

/* createpolicy (PTX ISA 9.7.9.17): an L2 policy that keeps lines (KV pages are re-read by
 * many groups) or drops them first (Q and O stream past once). */
static __device__ __forceinline__ uint64_t createpolicy_evict_last()
{
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

static __device__ __forceinline__ void prefetch_tensormap(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

/* ---- fences and barriers -------------------------------------------------------------- */
/* fence.proxy.async (PTX ISA 9.7.13.4): generic-proxy shared stores -> async proxy
 * (wgmma / TMA) readers. */
static __device__ __forceinline__ void fence_proxy_async_shared_cta()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* bar.sync id, count (PTX ISA 9.7.13.1 barrier{.cta}.sync.aligned): a named barrier among
 * `count` threads (whole warps). Id 0 is __syncthreads'. */
static __device__ __forceinline__ void bar_sync_named(uint32_t id, uint32_t count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* barrier.sync id, count WITHOUT .aligned (PTX ISA 9.7.13.1): the threads may reach it at
 * different places in the program (e.g. one warp after its own loop, the others earlier),
 * which bar.sync / __syncthreads (= barrier.sync.aligned) does not allow. */
static __device__ __forceinline__ void barrier_sync_unaligned(uint32_t id, uint32_t count)
{
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* setmaxnreg (PTX ISA 9.7.19.7, sm_90a): this warpgroup's per-thread register count drops to
 * / rises to N (24..256, a multiple of 8); executed by every thread of the warpgroup. */
template <int N> static __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

template <int N> static __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

/* barrier.cluster (PTX ISA 9.7.13.2): every thread of every CTA of the cluster. */
static __device__ __forceinline__ void barrier_cluster_arrive_release()
{
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

static __device__ __forceinline__ void barrier_cluster_wait_acquire()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

static __device__ __forceinline__ uint32_t cluster_ctarank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* ---- wgmma (PTX ISA 9.7.15) ------------------------------------------------------------ */
static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

static __device__ __forceinline__ void wgmma_commit_group()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N> static __device__ __forceinline__ void wgmma_wait_group()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator reads/writes across an async wgmma (any
 * accumulator size: 64, 32 or 16 registers for N = 128, 64, 32). */
template <int N> static __device__ __forceinline__ void wgmma_fence_operand(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* Shared-memory matrix descriptor (PTX ISA 9.7.15.5.1.2) of a K-major tile whose rows are
 * 128 bytes, stored in 8-row (1024-byte) atoms with the 128-byte swizzle: start address
 * >> 4 in bits 0-13, leading byte offset (unused for this layout) 1, stride byte offset
 * 1024 >> 4 in bits 32-45, swizzle mode 1 (128B) in bits 62-63. Advancing along K by 32
 * bytes adds 2 to the descriptor. */
static __device__ __forceinline__ uint64_t wgmma_desc_k_major_sw128(const void *tile)
{
    const uint64_t addr = smem_u32(tile);
    return ((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

/* wgmma.mma_async m64n128k32, f32 += e4m3 x e4m3, A and B from shared memory (PTX ISA
 * 9.7.15.5.2). d: the 64 f32 accumulators of this thread (layout: PTX ISA 9.7.15.5.1,
 * "Matrix fragments for wgmma.m64nNk32": d[4i+0..1] row 16*warp + lane/4, cols 8i + 2*(lane%4)
 * + {0,1}; d[4i+2..3] the same 8 rows further). scale_d = 0 overwrites d, 1 accumulates. */
static __device__ __forceinline__ void wgmma_m64n128k32_f32_e4m3_ss(float (&d)[64], uint64_t desc_a,
                                                                    uint64_t desc_b, int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* Keeps the compiler from reusing the registers of a register-sourced wgmma A operand
 * before the wgmma that reads them has been waited for. */
template <int N> static __device__ __forceinline__ void wgmma_fence_operand(uint32_t (&a)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i])::"memory");
}

/* wgmma.mma_async m64n128k32, f32 += e4m3 x e4m3, A from registers ("RS"), B from shared
 * memory (PTX ISA 9.7.15.5.2). a: this thread's 4 words of the 64x32 A tile (PTX ISA
 * 9.7.15.5.1.1.3, "Matrix Fragments for wgmma.m64nNk32", Figure 152): with g = lane / 4 and
 * t = lane % 4, row 16*warp + g (+8 in a[1] and a[3]), columns 4t..4t+3 (+16 in a[2] and
 * a[3]), byte j = column 4t + j. d and scale_d as the SS form. */
static __device__ __forceinline__ void wgmma_m64n128k32_f32_e4m3_rs(float (&d)[64], uint32_t a0, uint32_t a1,
                                                                    uint32_t a2, uint32_t a3, uint64_t desc_b,
                                                                    int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(scale_d));
}

/* The narrower forms (N = 64 and 32: a half or a quarter of the head dimension). */

/* wgmma.mma_async m64n64k16, f32 += f16 x f16, A from registers, B (64 rows of N, K-major,
 * not transposed) from shared memory. a: rows 16*warp + lane/4 (+8 in a[1], a[3]), columns
 * 2*(lane%4) + {0,1} (+8 in a[2], a[3]) as f16x2, the low half the lower column; d as the
 * e4m3 RS form. */
static __device__ __forceinline__ void wgmma_m64n64k16_f32_f16_rs(float (&d)[32], uint32_t a0, uint32_t a1,
                                                                  uint32_t a2, uint32_t a3, uint64_t desc_b,
                                                                  int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(scale_d));
}

/* wgmma.mma_async m64n64k32, f32 += e4m3 x e4m3, A from registers (as the m64n128k32 RS form),
 * B (64 rows of N, K-major) from shared memory. d[4i+0..1]: row 16*warp + lane/4, cols
 * 8i + 2*(lane%4) + {0,1} (i < 8); d[4i+2..3] the same 8 rows further. */
static __device__ __forceinline__ void wgmma_m64n64k32_f32_e4m3_rs(float (&d)[32], uint32_t a0, uint32_t a1,
                                                                   uint32_t a2, uint32_t a3, uint64_t desc_b,
                                                                   int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(scale_d));
}

/* wgmma.mma_async m64n32k32, f32 += e4m3 x e4m3, A from registers (the fragments of the
 * m64n64k32 RS form), B (32 rows of N, K-major) from shared memory; d[4i..4i+3] as there,
 * i < 4. */
static __device__ __forceinline__ void wgmma_m64n32k32_f32_e4m3_rs(float (&d)[16], uint32_t a0, uint32_t a1,
                                                                   uint32_t a2, uint32_t a3, uint64_t desc_b,
                                                                   int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16, %17, %18, %19}, %20, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(scale_d));
}

/* ---- conversions and special functions --------------------------------------------------- */
/* cvt.rn.satfinite.e4m3x2.f32 (PTX ISA 9.7.9.21): lo -> byte 0, hi -> byte 1. */
static __device__ __forceinline__ uint16_t cvt_e4m3x2_rn_satfinite(float lo, float hi)
{
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

/* cvt.rn.f16x2.e4m3x2 (PTX ISA 9.7.9.21): two E4M3 codes (byte 0 -> low half) to f16x2,
 * exact (every E4M3 value is an f16 value). */
static __device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2(uint16_t codes)
{
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(codes));
    return r;
}

/* Two E4M3 codes (byte 0 -> lo) as floats, exact. */
static __device__ __forceinline__ void e4m3x2_to_float2(uint16_t codes, float &lo, float &hi)
{
    const uint32_t h = cvt_f16x2_e4m3x2(codes);
    asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}"
        : "=f"(lo), "=f"(hi) : "r"(h));
}

/* cvt.rn.f16x2.f32: lo -> low half, hi -> high half, each rounded to nearest even. */
static __device__ __forceinline__ uint32_t cvt_f16x2_rn(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* sub.rn.f16x2 (PTX ISA 9.7.4.2): a - b per half. */
static __device__ __forceinline__ uint32_t sub_f16x2(uint32_t a, uint32_t b)
{
    uint32_t r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

/* cvt.rn.satfinite.e4m3x2.f16x2: low half -> byte 0, high half -> byte 1. */
static __device__ __forceinline__ uint16_t cvt_e4m3x2_f16x2_rn_satfinite(uint32_t halves)
{
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(halves));
    return r;
}

/* ex2.approx.ftz.f32 (PTX ISA 9.7.4.11): 2^x; 2^-inf = +0. */
static __device__ __forceinline__ float ex2_approx(float x)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

} // namespace pw

#endif
