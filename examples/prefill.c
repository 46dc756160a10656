/* examples/prefill.c: PageWeaver on one small prefill chunk, end to end.
 *
 *   1. Describe the chunk: pw_problem_t (PW_PROBLEM_INIT + the shapes), the packed requests
 *      (PW_REQUESTS_INIT), Top-K page ids [Hkv, N, K], the page table, Q / K / V.
 *   2. CPU, always: regroup (Algorithm 1 in windows of 128) and union metadata with the
 *      reference functions, their statistics, and the reference attention (exact FP64 and
 *      the FP8 arithmetic of the GPU kernels).
 *   3. GPU, when there is a CUDA device: the README's five lines (plan, workspace size,
 *      pw_sparse_prefill, destroy) on device copies of the same tensors, checked against
 *      the FP64 reference.
 *
 * Built and run by the test command (ctest: example_prefill); on a machine without a GPU
 * step 3 says so and is skipped. By hand, from an installed package:
 *   cc prefill.c $(pkg-config --cflags --libs pageweaver) -o prefill   (CPU part only), or
 *   CMake: find_package(PageWeaver) + target_link_libraries(app PageWeaver::pageweaver),
 *   with PW_EXAMPLE_WITH_CUDA defined to build step 3.
 * Usage: prefill [--seed N] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pageweaver.h"

#ifdef PW_EXAMPLE_WITH_CUDA
#include <cuda_runtime.h>
#endif

/* The fast-path shapes the GPU kernels take: G = 16 Q heads per KV head, D = 128,
 * P = 128 tokens per page, K = 16 Top-K pages per query. */
enum { HKV = 1, G = 16, D = 128, P = 128, K = 16, R = 2, MAX_PAGES = 16 };

#define CHECK(call)                                                                         \
    do {                                                                                    \
        const pw_status_t st_ = (call);                                                     \
        if (st_ != PW_SUCCESS) {                                                            \
            fprintf(stderr, "%s failed: %s: %s\n", #call, pw_status_string(st_),            \
                    pw_last_error());                                                       \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* splitmix64: a small seeded generator, so that runs are reproducible. */
static uint64_t g_state;
static uint64_t next_u64(void)
{
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }
static double normal(void)
{
    return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform());
}

static void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* Root-mean-square error of a against b, relative to b's RMS. */
static double nrms(const float *a, const float *b, size_t n)
{
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        err += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        ref += (double)b[i] * b[i];
    }
    return ref > 0 ? sqrt(err / ref) : sqrt(err);
}

/* The host tensors of one chunk. */
typedef struct chunk {
    pw_problem_t problem;
    int32_t cu_seqlens_q[R + 1], prefix_lens[R], kv_lens[R];
    int32_t page_table[R * MAX_PAGES];
    int32_t *topk_ids;      /* [HKV, N, K] logical page ids */
    pw_bf16_t *q;           /* [N, HKV * G, D] */
    pw_fp8_e4m3_t *k_cache; /* [num_cache_pages * P, HKV, D] */
    pw_fp8_e4m3_t *v_cache;
    float k_scale, v_scale;
} chunk_t;

/* Two requests: 96 queries after a 1,024-token prefix, and 160 queries after 1,200 tokens.
 * Each query selects its own page, and pages from one of two pools: the early pages for
 * even positions, the later ones for odd positions (two interleaved "topics", as a sparse
 * selector might find). Groups of 8 consecutive queries mix both pools; regrouping gathers
 * queries of one pool, so each group visits fewer distinct pages. Physical pages are
 * shuffled. */
static void make_chunk(chunk_t *c)
{
    const int32_t qlen[R] = {96, 160}, prefix[R] = {1024, 1200};
    pw_problem_t p = PW_PROBLEM_INIT;
    c->cu_seqlens_q[0] = 0;
    for (int r = 0; r < R; r++) {
        c->cu_seqlens_q[r + 1] = c->cu_seqlens_q[r] + qlen[r];
        c->prefix_lens[r] = prefix[r];
        c->kv_lens[r] = prefix[r] + qlen[r];
    }
    p.num_tokens = c->cu_seqlens_q[R];
    p.num_requests = R;
    p.num_kv_heads = HKV;
    p.max_pages_per_request = MAX_PAGES; /* every kv_len <= 16 * 128 */
    p.num_cache_pages = R * MAX_PAGES;   /* both must be set: PW_PROBLEM_INIT leaves them 0 */
    c->problem = p;

    for (int i = 0; i < R * MAX_PAGES; i++) c->page_table[i] = i;
    for (int i = R * MAX_PAGES - 1; i > 0; i--) { /* shuffle the physical pages */
        const int j = (int)(next_u64() % (uint64_t)(i + 1));
        const int32_t t = c->page_table[i];
        c->page_table[i] = c->page_table[j];
        c->page_table[j] = t;
    }
    const int32_t n = p.num_tokens;
    c->topk_ids = xcalloc((size_t)HKV * n * K, sizeof *c->topk_ids);
    for (int32_t h = 0; h < HKV; h++)
        for (int r = 0; r < R; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int32_t pos = prefix[r] + (i - c->cu_seqlens_q[r]), own = pos / P;
                const int32_t pool = pos % 2 == 0 ? 0 : 4; /* pages 0-3 or 4-7 */
                int32_t *row = c->topk_ids + ((int64_t)h * n + i) * K;
                for (int k = 0; k < K; k++) {
                    if (k == 0) row[k] = own;
                    else if (k >= 4) row[k] = -1; /* padding: ignored */
                    else row[k] = pool + (int32_t)(next_u64() % 4);
                }
            }
    const size_t q_count = (size_t)n * HKV * G * D;
    const size_t kv_count = (size_t)p.num_cache_pages * P * HKV * D;
    c->q = xcalloc(q_count, sizeof *c->q);
    c->k_cache = xcalloc(kv_count, 1);
    c->v_cache = xcalloc(kv_count, 1);
    for (size_t i = 0; i < q_count; i++) c->q[i] = pw_bf16_from_float((float)normal());
    /* FP8 caches with a scale: real K = k_scale * e4m3 value. */
    c->k_scale = c->v_scale = 1.0f / 64.0f;
    for (size_t i = 0; i < kv_count; i++) {
        c->k_cache[i] = pw_fp8_e4m3_from_float((float)(normal() * 64.0));
        c->v_cache[i] = pw_fp8_e4m3_from_float((float)(normal() * 64.0));
    }
}

static pw_requests_t requests_of(const chunk_t *c)
{
    pw_requests_t rq = PW_REQUESTS_INIT;
    rq.cu_seqlens_q = c->cu_seqlens_q;
    rq.prefix_lens = c->prefix_lens;
    rq.kv_lens = c->kv_lens;
    rq.page_table = c->page_table;
    rq.page_table_stride = MAX_PAGES;
    return rq;
}

/* Union statistics of the grouping the default plan runs (identity or regrouped): the
 * regroup uses 4-query groups (the default Union4 kernel walks each 4-query half's union:
 * its work is C_4), union preparation groups 8 slots (pw_plan_info: regroup_group_size). */
static pw_union_stats_t grouping_stats(const chunk_t *c, pw_regroup_mode_t mode)
{
    const pw_requests_t rq = requests_of(c);
    pw_grouping_t grouping = PW_GROUPING_INIT; /* guarded, W = 128, groups of 8 */
    grouping.mode = mode;
    pw_grouping_t regroup = grouping;
    regroup.group_size = 4;
    int32_t *perm = xcalloc((size_t)HKV * c->problem.num_tokens, sizeof *perm);
    CHECK(pw_ref_regroup(&c->problem, c->topk_ids, &rq, &regroup, perm));
    pw_union_meta_t meta = PW_UNION_META_INIT;
    CHECK(pw_union_meta_alloc_host(&c->problem, &grouping, &meta));
    CHECK(pw_ref_union_prepare(&c->problem, c->topk_ids, &rq, &grouping, perm, &meta));
    pw_union_stats_t stats;
    CHECK(pw_union_stats(&c->problem, &meta, &stats, NULL));
    pw_union_meta_free_host(&meta);
    free(perm);
    return stats;
}

/* The reference attention into o [N, Hq, D] float32. */
static void reference(const chunk_t *c, pw_ref_mode_t mode, float *o, float *lse)
{
    pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    args.q = c->q;
    args.q_stride = HKV * G * D;
    args.k_cache = c->k_cache;
    args.v_cache = c->v_cache;
    args.kv_stride = HKV * D;
    args.k_scale = &c->k_scale;
    args.v_scale = &c->v_scale;
    args.topk_ids = c->topk_ids;
    args.requests = requests_of(c);
    args.o = o;
    args.o_stride = HKV * G * D;
    args.o_dtype = PW_DTYPE_FLOAT32; /* the reference writes float32 (or float64) */
    args.lse = lse;
    CHECK(pw_ref_attention(&c->problem, &args, mode));
}

#ifdef PW_EXAMPLE_WITH_CUDA
#define CUDA_CHECK(call)                                                                    \
    do {                                                                                    \
        const cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));              \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static void *to_device(const void *host, size_t bytes)
{
    void *d = NULL;
    CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 16));
    if (bytes) CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* The README's five lines on device copies; returns the NRMS against `exact`, or -1 when
 * there is no usable GPU. */
static double run_gpu(const chunk_t *c, const float *exact)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        cudaGetLastError();
        return -1;
    }
    const pw_problem_t *problem = &c->problem;
    const int32_t n = problem->num_tokens;
    const size_t q_count = (size_t)n * HKV * G * D;
    const size_t kv_bytes = (size_t)problem->num_cache_pages * P * HKV * D;

    pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    args.q = to_device(c->q, q_count * sizeof *c->q);
    args.q_stride = HKV * G * D;
    args.k_cache = to_device(c->k_cache, kv_bytes);
    args.v_cache = to_device(c->v_cache, kv_bytes);
    args.kv_stride = HKV * D;
    args.k_scale = to_device(&c->k_scale, sizeof(float));
    args.v_scale = to_device(&c->v_scale, sizeof(float));
    args.topk_ids = to_device(c->topk_ids, (size_t)HKV * n * K * sizeof(int32_t));
    args.requests.cu_seqlens_q = to_device(c->cu_seqlens_q, sizeof c->cu_seqlens_q);
    args.requests.prefix_lens = to_device(c->prefix_lens, sizeof c->prefix_lens);
    args.requests.kv_lens = to_device(c->kv_lens, sizeof c->kv_lens);
    args.requests.page_table = to_device(c->page_table, sizeof c->page_table);
    args.requests.page_table_stride = MAX_PAGES;
    args.o = to_device(NULL, q_count * sizeof(pw_bf16_t));
    args.o_stride = HKV * G * D;
    args.o_dtype = PW_DTYPE_BFLOAT16; /* the GPU writes bf16 (the INIT macro gives FLOAT32) */
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));

    /* The five lines. */
    pw_plan_t *plan;
    CHECK(pw_plan_create(problem, NULL, &plan)); /* regroup when it pays, W = 64 or 128, Union4 */
    size_t bytes;
    CHECK(pw_plan_workspace_size(plan, &bytes));
    void *workspace = to_device(NULL, bytes);
    const pw_status_t st = pw_sparse_prefill(plan, &args, NULL, workspace, bytes, stream);
    pw_plan_destroy(plan);

    double error = -1;
    if (st == PW_SUCCESS) {
        CUDA_CHECK(cudaStreamSynchronize(stream));
        pw_bf16_t *o16 = xcalloc(q_count, sizeof *o16);
        float *o = xcalloc(q_count, sizeof *o);
        CUDA_CHECK(cudaMemcpy(o16, args.o, q_count * sizeof *o16, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < q_count; i++) o[i] = pw_bf16_to_float(o16[i]);
        error = nrms(o, exact, q_count);
        free(o16);
        free(o);
    } else {
        /* e.g. PW_ERROR_UNSUPPORTED on a GPU other than sm_90 */
        printf("GPU: pw_sparse_prefill: %s: %s\n", pw_status_string(st), pw_last_error());
    }
    cudaFree(workspace);
    cudaFree((void *)args.q);
    cudaFree((void *)args.k_cache);
    cudaFree((void *)args.v_cache);
    cudaFree((void *)args.k_scale);
    cudaFree((void *)args.v_scale);
    cudaFree((void *)args.topk_ids);
    cudaFree((void *)args.requests.cu_seqlens_q);
    cudaFree((void *)args.requests.prefix_lens);
    cudaFree((void *)args.requests.kv_lens);
    cudaFree((void *)args.requests.page_table);
    cudaFree(args.o);
    cudaStreamDestroy(stream);
    if (st != PW_SUCCESS && st != PW_ERROR_UNSUPPORTED && st != PW_ERROR_NO_DEVICE) exit(1);
    return error;
}
#endif

int main(int argc, char **argv)
{
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--seed") == 0) seed = strtoull(argv[i + 1], NULL, 0);
    g_state = seed;
    printf("PageWeaver %s, seed %llu\n", pw_version_string(), (unsigned long long)seed);

    chunk_t c;
    make_chunk(&c);
    const pw_requests_t rq = requests_of(&c);
    CHECK(pw_problem_check(&c.problem, &rq));
    const int32_t n = c.problem.num_tokens;
    printf("chunk: %d queries in %d requests, %d KV head(s), Top-%d of %d-token pages\n", n, R,
           HKV, K, P);

    /* Regrouping: same pages, fewer page steps (C_4: one step per 4-query half and page). */
    const pw_union_stats_t id = grouping_stats(&c, PW_REGROUP_IDENTITY);
    const pw_union_stats_t rg = grouping_stats(&c, PW_REGROUP_GUARDED);
    printf("page steps C_4: identity order %lld, guarded W128 regroup %lld (8-query union visits %lld -> "
           "%lld)\n",
           (long long)id.c4, (long long)rg.c4, (long long)id.union_visits, (long long)rg.union_visits);

    /* The reference attention: exact FP64, and the GPU kernels' FP8 arithmetic. */
    const size_t count = (size_t)n * HKV * G * D;
    float *exact = xcalloc(count, sizeof *exact), *fp8 = xcalloc(count, sizeof *fp8);
    float *lse = xcalloc((size_t)n * HKV * G, sizeof *lse);
    reference(&c, PW_REF_EXACT, exact, lse);
    reference(&c, PW_REF_FP8_EMULATE, fp8, lse);
    const double fp8_error = nrms(fp8, exact, count);
    printf("reference: FP8 arithmetic vs exact FP64, NRMS %.2f%%\n", 100.0 * fp8_error);

    int ok = rg.c4 < id.c4 && rg.selections == id.selections &&
             fp8_error > 0 && fp8_error < 0.06;
#ifdef PW_EXAMPLE_WITH_CUDA
    const double gpu_error = run_gpu(&c, exact);
    if (gpu_error < 0) {
        printf("GPU: no usable sm_90 device here: the five-line GPU call was skipped\n");
    } else {
        printf("GPU: pw_sparse_prefill vs exact FP64, NRMS %.2f%%\n", 100.0 * gpu_error);
        ok = ok && gpu_error < 0.06;
    }
#else
    printf("GPU: this example was built without CUDA\n");
#endif
    free(exact);
    free(fp8);
    free(lse);
    free(c.topk_ids);
    free(c.q);
    free(c.k_cache);
    free(c.v_cache);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
