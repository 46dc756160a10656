/* GPU tests of the full prefill call (pw_plan_t / pw_sparse_prefill, docs/semantics.md §5):
 *  - for identity order, the in-call regroup at W64 / W128 (guarded and greedy), a
 *    caller-given permutation, Union4 and per-query, the full call's output and LSE are
 *    bitwise equal to pw_union_attention run directly on metadata made by the CPU
 *    reference, and the permutation and union metadata the call left in its workspace are
 *    bitwise equal to pw_ref_regroup / pw_ref_union_prepare;
 *  - one call captured in a CUDA graph, replayed after Top-K ids, page table, request
 *    lengths and K/V scales were changed in the same device buffers, equals a fresh direct
 *    run on the new inputs (bitwise), and differs from the first inputs' result;
 *  - the Union8 full call is within the FP8-emulating reference's bound.
 * FP8X2 (the default arithmetic) on the V^T pre-pass takes P in f16 (docs/semantics.md
 * §4.5): those arms are compared with the direct run (the E4M3 P terms) by NRMS, with each
 * other bitwise, and against PW_REF_FP8_EMULATE_F16_P; the capacity tests, whose point is
 * that the fallback and the tiles agree bit for bit, run in FP8.
 * Outputs are poisoned (all-ones bytes: NaN) before every run. Skips (exit 77) without an
 * sm_90 GPU.
 *
 * Usage: test_full_call_gpu [--seed N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "pageweaver_capture.h"
#include "testutil.h"

#include "../../src/cuda/attention_dev.h" /* internal: dev impl 12, the stacked tile, for direct runs */
#include "../../src/pw_internal.h"        /* internal: the pre-pass's mark launch and its counts */
#include "../../src/time_guard.h"         /* internal: the window PW_WINDOW_AUTO picks */

#define CUDA_OK(x)                                                                          \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #x, cudaGetErrorString(e_));              \
    } while (0)

#define EMU_NRMS_BOUND 1e-2 /* as in test_attention_gpu.c (reasons there) */
#define EMU_X2_NRMS_BOUND 5e-3 /* as in test_attention_gpu.c */
/* FP8X2 with P in f16 (pre-pass) against FP8X2 with two E4M3 P terms (direct): both within
 * ~0.2-0.3% of exact and of each other */
#define X2_PATHS_NRMS_BOUND 5e-3

static uint64_t g_seed;
static pw_precision_t g_precision = PW_PRECISION_FP8X2; /* device_args' */
static int g_direct_impl = -1; /* direct_run: -1 pw_union_attention, else pw_union_attention_dev's impl */

enum { NUM_REQUESTS = 4, MAX_PAGES = 40, HKV = 2, NUM_TOKENS = 611 };

/* Device copies of one problem. The input buffers keep their addresses for the whole
 * test (a captured graph holds them); their contents are rewritten by upload(). */
typedef struct device_problem {
    int32_t *topk, *cu, *prefix, *kv, *page_table;
    pw_bf16_t *q, *o;
    uint8_t *k, *v;
    float *k_scale, *v_scale, *lse;
    uint32_t *bad;
    int32_t *perm;        /* [Hkv, N]: the direct runs' permutation / the caller's perm */
    pw_union_meta_t meta; /* the direct runs' metadata */
    void *workspace;      /* the full call's */
    size_t workspace_bytes;
} device_problem_t;

static size_t out_elems(const pw_problem_t *p)
{
    return (size_t)p->num_tokens * (size_t)p->num_kv_heads * (size_t)p->q_heads_per_kv * 128;
}

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    return d;
}

static void device_alloc(const pw_problem_t *p, device_problem_t *d)
{
    const size_t n = (size_t)p->num_tokens, hkv = (size_t)p->num_kv_heads, r = (size_t)p->num_requests;
    memset(d, 0, sizeof *d);
    d->topk = dev_alloc(hkv * n * 16 * 4);
    d->cu = dev_alloc((r + 1) * 4);
    d->prefix = dev_alloc(r * 4);
    d->kv = dev_alloc(r * 4);
    d->page_table = dev_alloc(r * (size_t)p->max_pages_per_request * 4);
    d->q = dev_alloc(out_elems(p) * 2);
    d->o = dev_alloc(out_elems(p) * 2);
    const size_t cache = (size_t)p->num_cache_pages * 128 * hkv * 128;
    d->k = dev_alloc(cache);
    d->v = dev_alloc(cache);
    d->k_scale = dev_alloc(4);
    d->v_scale = dev_alloc(4);
    d->lse = dev_alloc(n * hkv * p->q_heads_per_kv * 4);
    d->bad = dev_alloc(4);
    d->perm = dev_alloc(hkv * n * 4);
    pw_grouping_t g = PW_GROUPING_INIT;
    g.window = 64; /* the largest bound of the groupings used here */
    d->meta.max_groups = pw_max_groups(p, &g);
    d->meta.union_capacity = 8 * 16;
    const size_t rows = hkv * (size_t)d->meta.max_groups;
    d->meta.num_groups = dev_alloc(hkv * 4);
    d->meta.groups = dev_alloc(rows * sizeof(pw_group_desc_t));
    d->meta.union_pages = dev_alloc(rows * 128 * 4);
    d->meta.member_masks = dev_alloc(rows * 128);
}

static void device_free(device_problem_t *d)
{
    void *ptrs[] = {d->topk, d->cu, d->prefix, d->kv, d->page_table, d->q, d->o, d->k, d->v,
                    d->k_scale, d->v_scale, d->lse, d->bad, d->perm, d->meta.num_groups,
                    d->meta.groups, d->meta.union_pages, d->meta.member_masks, d->workspace};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
    memset(d, 0, sizeof *d);
}

static void put(void *dst, const void *src, size_t bytes)
{
    CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

/* Host capture -> the device buffers (same addresses every time). */
static void upload(const pw_capture_t *c, device_problem_t *d, int with_qkv)
{
    const pw_problem_t *p = &c->problem;
    const size_t n = (size_t)p->num_tokens, hkv = (size_t)p->num_kv_heads, r = (size_t)p->num_requests;
    put(d->topk, c->topk_ids, hkv * n * 16 * 4);
    put(d->cu, c->cu_seqlens_q, (r + 1) * 4);
    put(d->prefix, c->prefix_lens, r * 4);
    put(d->kv, c->kv_lens, r * 4);
    put(d->page_table, c->page_table, r * (size_t)p->max_pages_per_request * 4);
    put(d->k_scale, &c->k_scale, 4);
    put(d->v_scale, &c->v_scale, 4);
    if (with_qkv) {
        put(d->q, c->q, out_elems(p) * 2);
        const size_t cache = (size_t)p->num_cache_pages * 128 * hkv * 128;
        put(d->k, c->k_cache, cache);
        put(d->v, c->v_cache, cache);
    }
}

static pw_attention_args_t device_args(const pw_problem_t *p, const device_problem_t *d)
{
    const int64_t hq = (int64_t)p->num_kv_heads * p->q_heads_per_kv;
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    a.precision = g_precision;
    a.q = d->q;
    a.q_stride = hq * 128;
    a.k_cache = d->k;
    a.v_cache = d->v;
    a.kv_stride = (int64_t)p->num_kv_heads * 128;
    a.k_scale = d->k_scale;
    a.v_scale = d->v_scale;
    a.topk_ids = d->topk;
    a.requests.cu_seqlens_q = d->cu;
    a.requests.prefix_lens = d->prefix;
    a.requests.kv_lens = d->kv;
    a.requests.page_table = d->page_table;
    a.requests.page_table_stride = p->max_pages_per_request;
    a.o = d->o;
    a.o_stride = hq * 128;
    a.o_dtype = PW_DTYPE_BFLOAT16;
    a.lse = d->lse;
    a.bad_page_count = d->bad;
    return a;
}

/* Per-token K / V scales [Hkv, slots] on the device (one array for both), 2^(j / 4) for j
 * drawn in [-4, 4]: the FP8 per-token-scale calls of the stacked-tile tests. */
static float *device_token_scales(const pw_problem_t *p, pw_rng_t *rng)
{
    const int64_t count = p->num_cache_pages * p->page_size * p->num_kv_heads;
    float *host = malloc((size_t)count * 4), *dev = NULL;
    assert_non_null(host);
    for (int64_t i = 0; i < count; i++) host[i] = exp2f((float)pw_rng_range(rng, -4, 4) / 4.0f);
    CUDA_OK(cudaMalloc((void **)&dev, (size_t)count * 4));
    CUDA_OK(cudaMemcpy(dev, host, (size_t)count * 4, cudaMemcpyHostToDevice));
    free(host);
    return dev;
}

/* args with device_token_scales' array as its K and V scales ([Hkv, slots] strides). */
static pw_attention_args_t with_token_scales(pw_attention_args_t a, const pw_problem_t *p, const float *ts_dev)
{
    a.token_scales.k = ts_dev;
    a.token_scales.v = ts_dev;
    a.token_scales.stride_h = p->num_cache_pages * p->page_size;
    a.token_scales.stride_t = 1;
    return a;
}

/* A run's results on the host. */
typedef struct result {
    pw_bf16_t *o;
    float *lse;
    uint32_t bad;
} result_t;

static void result_alloc(const pw_problem_t *p, result_t *r)
{
    r->o = malloc(out_elems(p) * 2);
    r->lse = malloc(out_elems(p) / 128 * 4);
    assert_non_null(r->o);
    assert_non_null(r->lse);
    r->bad = 0;
}

static void result_free(result_t *r)
{
    free(r->o);
    free(r->lse);
}

/* Whether output row `row` (one query x one Q head: 128 BF16 and its LSE) differs bitwise. */
static int row_differs(const result_t *a, const result_t *b, int64_t row)
{
    return memcmp(a->o + row * 128, b->o + row * 128, 256) != 0 || memcmp(a->lse + row, b->lse + row, 4) != 0;
}

static void poison(const pw_problem_t *p, device_problem_t *d, cudaStream_t s)
{
    CUDA_OK(cudaMemsetAsync(d->o, 0xff, out_elems(p) * 2, s));
    CUDA_OK(cudaMemsetAsync(d->lse, 0xff, out_elems(p) / 128 * 4, s));
    CUDA_OK(cudaMemsetAsync(d->bad, 0, 4, s));
}

static void fetch(const pw_problem_t *p, const device_problem_t *d, cudaStream_t s, result_t *r)
{
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(r->o, d->o, out_elems(p) * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(r->lse, d->lse, out_elems(p) / 128 * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&r->bad, d->bad, 4, cudaMemcpyDeviceToHost));
}

/* NRMS of a's O against b's (BF16 values); NaN in a counts as a failure (returns 2). */
static double nrms_result(const pw_problem_t *p, const result_t *a, const result_t *b)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < out_elems(p); i++) {
        const double x = pw_bf16_to_float(a->o[i]), y = pw_bf16_to_float(b->o[i]);
        if (isnan(x) || isnan(y)) return 2.0;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
}

/* The CPU reference's arguments for capture c (its host Q, caches, scales, Top-K, requests),
 * FP32 output into o, LSE into lse. */
static pw_attention_args_t ref_args(const pw_capture_t *c, float *o, float *lse)
{
    const pw_problem_t *p = &c->problem;
    pw_attention_args_t ra = PW_ATTENTION_ARGS_INIT;
    ra.q = c->q;
    ra.q_stride = (int64_t)p->num_kv_heads * p->q_heads_per_kv * 128;
    ra.k_cache = c->k_cache;
    ra.v_cache = c->v_cache;
    ra.kv_stride = (int64_t)p->num_kv_heads * 128;
    ra.k_scale = &c->k_scale;
    ra.v_scale = &c->v_scale;
    ra.topk_ids = c->topk_ids;
    ra.requests = pw_capture_requests(c);
    ra.o = o;
    ra.o_stride = ra.q_stride;
    ra.o_dtype = PW_DTYPE_FLOAT32;
    ra.lse = lse;
    return ra;
}

/* NRMS of a GPU output (BF16) against a reference's FP32 values; a NaN counts as a huge
 * error (1 when the reference is all 0). */
static double nrms_vs_ref(const pw_problem_t *p, const pw_bf16_t *o, const float *ref)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < out_elems(p); i++) {
        const double g = pw_bf16_to_float(o[i]), r = ref[i];
        num += isnan(g) ? 1e30 : (g - r) * (g - r);
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : 1.0;
}

static int same_result(const pw_problem_t *p, const result_t *a, const result_t *b)
{
    return memcmp(a->o, b->o, out_elems(p) * 2) == 0 &&
           memcmp(a->lse, b->lse, out_elems(p) / 128 * 4) == 0 && a->bad == b->bad;
}

/* CPU reference metadata for `grouping` and host perm [Hkv, N]. */
typedef struct host_meta {
    pw_union_meta_t m;
} host_meta_t;

static void host_meta_alloc(const pw_problem_t *p, const pw_grouping_t *g, host_meta_t *h)
{
    const int64_t hkv = p->num_kv_heads, mg = pw_max_groups(p, g);
    h->m.max_groups = mg;
    h->m.union_capacity = 128;
    h->m.num_groups = malloc(hkv * 4);
    h->m.groups = malloc(hkv * mg * sizeof(pw_group_desc_t));
    h->m.union_pages = malloc(hkv * mg * 128 * 4);
    h->m.member_masks = malloc(hkv * mg * 128);
    assert_non_null(h->m.num_groups);
    assert_non_null(h->m.groups);
    assert_non_null(h->m.union_pages);
    assert_non_null(h->m.member_masks);
}

static void host_meta_free(host_meta_t *h)
{
    free(h->m.num_groups);
    free(h->m.groups);
    free(h->m.union_pages);
    free(h->m.member_masks);
}

/* pw_union_attention directly, on metadata from the CPU reference for grouping g and
 * the host permutation perm (ignored for per-query). */
static void direct_run(const pw_capture_t *c, device_problem_t *d, pw_kernel_t kernel,
                       const pw_grouping_t *g, const int32_t *perm, cudaStream_t s, result_t *r)
{
    const pw_problem_t *p = &c->problem;
    const int64_t hkv = p->num_kv_heads, n = p->num_tokens;
    if (kernel != PW_KERNEL_PER_QUERY) {
        const pw_requests_t rq = pw_capture_requests(c);
        host_meta_t h;
        host_meta_alloc(p, g, &h);
        assert_true(h.m.max_groups <= d->meta.max_groups);
        assert_pw_ok(pw_ref_union_prepare(p, c->topk_ids, &rq, g, perm, &h.m));
        /* Upload with the device buffers' own row pitch (max_groups may be larger). */
        put(d->meta.num_groups, h.m.num_groups, hkv * 4);
        for (int64_t k = 0; k < hkv; k++) {
            const int64_t src = k * h.m.max_groups, dst = k * d->meta.max_groups, rows = h.m.max_groups;
            put(d->meta.groups + dst, h.m.groups + src, rows * sizeof(pw_group_desc_t));
            put(d->meta.union_pages + dst * 128, h.m.union_pages + src * 128, rows * 128 * 4);
            put(d->meta.member_masks + dst * 128, h.m.member_masks + src * 128, rows * 128);
        }
        put(d->perm, perm, hkv * n * 4);
        host_meta_free(&h);
    }
    poison(p, d, s);
    const pw_attention_args_t a = device_args(p, d);
    if (g_direct_impl < 0) assert_pw_ok(pw_union_attention(p, &a, g, d->perm, &d->meta, kernel, (pw_stream_t)s));
    else assert_pw_ok(pw_union_attention_dev(g_direct_impl, p, &a, g, d->perm, &d->meta, kernel, (pw_stream_t)s));
    fetch(p, d, s, r);
}

/* The workspace's permutation and metadata after a full call equal the CPU reference's. */
static void check_workspace_views(const pw_capture_t *c, const pw_plan_t *plan, const device_problem_t *d,
                                  const int32_t *perm_ref)
{
    const pw_problem_t *p = &c->problem;
    const int64_t hkv = p->num_kv_heads, n = p->num_tokens;
    int32_t *perm_dev = NULL;
    pw_union_meta_t dm;
    pw_grouping_t g;
    assert_pw_ok(pw_plan_workspace_views(plan, d->workspace, d->workspace_bytes, &perm_dev, &dm, &g));
    int32_t *perm = malloc(hkv * n * 4);
    assert_non_null(perm);
    if (perm_dev) {
        CUDA_OK(cudaMemcpy(perm, perm_dev, hkv * n * 4, cudaMemcpyDeviceToHost));
        assert_memory_equal(perm, perm_ref, hkv * n * 4);
    }
    const pw_requests_t rq = pw_capture_requests(c);
    host_meta_t ref, got;
    host_meta_alloc(p, &g, &ref);
    host_meta_alloc(p, &g, &got);
    assert_int_equal(dm.max_groups, ref.m.max_groups);
    assert_pw_ok(pw_ref_union_prepare(p, c->topk_ids, &rq, &g, perm_ref, &ref.m));
    const int64_t rows = hkv * dm.max_groups;
    CUDA_OK(cudaMemcpy(got.m.num_groups, dm.num_groups, hkv * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got.m.groups, dm.groups, rows * sizeof(pw_group_desc_t), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got.m.union_pages, dm.union_pages, rows * 128 * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got.m.member_masks, dm.member_masks, rows * 128, cudaMemcpyDeviceToHost));
    assert_memory_equal(got.m.num_groups, ref.m.num_groups, hkv * 4);
    for (int64_t k = 0; k < hkv; k++) {
        const int64_t at = k * dm.max_groups, used = ref.m.num_groups[k];
        assert_memory_equal(got.m.groups + at, ref.m.groups + at, used * sizeof(pw_group_desc_t));
        assert_memory_equal(got.m.union_pages + at * 128, ref.m.union_pages + at * 128, used * 128 * 4);
        assert_memory_equal(got.m.member_masks + at * 128, ref.m.member_masks + at * 128, used * 128);
    }
    host_meta_free(&ref);
    host_meta_free(&got);
    free(perm);
}

/* Random request layout, page table and Top-K ids for the capture's fixed shapes (N, R,
 * Hkv, max pages, cache pages): requests of random length (one of a single query), random
 * prefixes, partial last pages, a shuffled page table, and rows that mix a per-request hot
 * set (so that regrouping changes the order) with -1, duplicates, future and huge ids and
 * rows with no valid id. */
static void fill_inputs(pw_capture_t *c, pw_rng_t *rng)
{
    const pw_problem_t *p = &c->problem;
    const int32_t n = p->num_tokens, nr = p->num_requests, kv_cap = p->max_pages_per_request * 128;
    int32_t cut[NUM_REQUESTS + 1];
    cut[0] = 0;
    cut[nr] = n;
    for (int r = 1; r < nr; r++) cut[r] = (int32_t)pw_rng_range(rng, 1, n - 1);
    for (int r = 1; r < nr; r++) /* insertion sort of the cut points */
        for (int k = r; k > 1 && cut[k] < cut[k - 1]; k--) {
            const int32_t t = cut[k];
            cut[k] = cut[k - 1];
            cut[k - 1] = t;
        }
    cut[1] = cut[2] > 1 ? cut[2] - 1 : cut[1]; /* request 1 holds one query (or none) */
    for (int r = 0; r <= nr; r++) c->cu_seqlens_q[r] = cut[r];
    for (int r = 0; r < nr; r++) {
        const int32_t qlen = cut[r + 1] - cut[r];
        c->prefix_lens[r] = (int32_t)pw_rng_range(rng, 0, kv_cap - qlen - 5);
        c->kv_lens[r] = c->prefix_lens[r] + qlen + (int32_t)pw_rng_range(rng, 0, 5);
    }
    pw_test_shuffle_page_table(c, rng);
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int r = 0; r < nr; r++) {
            int32_t hot[12];
            for (int k = 0; k < 12; k++) hot[k] = (int32_t)pw_rng_range(rng, 0, (c->kv_lens[r] - 1) / 128);
            for (int32_t i = cut[r]; i < cut[r + 1]; i++) {
                int32_t *row = c->topk_ids + ((int64_t)h * n + i) * 16;
                const int64_t pos = c->prefix_lens[r] + (i - cut[r]);
                const int64_t last = (pos < c->kv_lens[r] - 1 ? pos : c->kv_lens[r] - 1) / 128;
                const int empty_row = pw_rng_range(rng, 0, 29) == 0;
                for (int k = 0; k < 16; k++) {
                    const int64_t u = pw_rng_range(rng, 0, 99);
                    int32_t id;
                    if (empty_row || u < 6) id = -1;
                    else if (u < 10) id = row[k > 0 ? k - 1 : 0];
                    else if (u < 12) id = (int32_t)(last + 1 + pw_rng_range(rng, 0, 2));
                    else if (u < 13) id = u & 1 ? INT32_MAX : INT32_MIN;
                    else if (u < 20) id = (int32_t)last;
                    else if (u < 75) id = hot[pw_rng_range(rng, 0, 11)];
                    else id = (int32_t)pw_rng_range(rng, 0, last);
                    row[k] = id;
                }
            }
        }
}

/* Points the page-table entry of a page that some query selected and may see outside the
 * cache, so the call must count it (docs/semantics.md §1: skipped and counted). */
static void break_a_selected_page(pw_capture_t *c)
{
    const pw_problem_t *p = &c->problem;
    for (int32_t r = 0; r < p->num_requests; r++)
        for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
            const int64_t pos = c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
            const int64_t last = (pos < c->kv_lens[r] - 1 ? pos : c->kv_lens[r] - 1) / 128;
            const int32_t *row = c->topk_ids + (int64_t)i * 16; /* KV head 0 */
            for (int k = 0; k < 16; k++)
                if (row[k] >= 0 && row[k] <= last) {
                    c->page_table[(int64_t)r * p->max_pages_per_request + row[k]] = (int32_t)p->num_cache_pages + 3;
                    return;
                }
        }
    fail_msg("%s", "no query selected a visible page");
}

/* G: Q heads per KV head (16, or 8 / 4 for the G = 8 / 4 arms); n queries in r requests
 * (2..NUM_REQUESTS: fill_inputs' cut points) over hkv KV heads. */
static pw_capture_t *make_problem_shape(pw_rng_t *rng, int32_t g, int32_t n, int32_t r, int32_t hkv)
{
    assert_true(r >= 2 && r <= NUM_REQUESTS);
    pw_problem_t p = PW_PROBLEM_INIT;
    p.q_heads_per_kv = g;
    p.num_tokens = n;
    p.num_requests = r;
    p.num_kv_heads = hkv;
    p.max_pages_per_request = MAX_PAGES;
    p.num_cache_pages = r * MAX_PAGES + 7;
    pw_capture_t *c = NULL;
    assert_pw_ok(pw_capture_create(&p, PW_CAPTURE_LOAD_QKV, &c));
    fill_inputs(c, rng);
    assert_pw_ok(pw_capture_generate_qkv(c, g_seed ^ 0xf011ca11ull));
    const pw_requests_t rq = pw_capture_requests(c);
    assert_pw_ok(pw_problem_check(&c->problem, &rq));
    return c;
}

static pw_capture_t *make_problem_g(pw_rng_t *rng, int32_t g)
{
    return make_problem_shape(rng, g, NUM_TOKENS, NUM_REQUESTS, HKV);
}

static pw_capture_t *make_problem(pw_rng_t *rng)
{
    return make_problem_g(rng, 16);
}

static void identity_perm(const pw_problem_t *p, int32_t *perm)
{
    for (int64_t h = 0; h < p->num_kv_heads; h++)
        for (int64_t i = 0; i < p->num_tokens; i++) perm[h * p->num_tokens + i] = (int32_t)i;
}

static void random_perm_within_requests(const pw_capture_t *c, pw_rng_t *rng, int32_t *perm)
{
    const pw_problem_t *p = &c->problem;
    for (int h = 0; h < p->num_kv_heads; h++) {
        int32_t *row = perm + (int64_t)h * p->num_tokens;
        for (int r = 0; r < p->num_requests; r++) {
            const int32_t b = c->cu_seqlens_q[r], e = c->cu_seqlens_q[r + 1];
            for (int32_t i = b; i < e; i++) row[i] = i;
            for (int32_t i = e - 1; i > b; i--) {
                const int32_t j = (int32_t)pw_rng_range(rng, b, i);
                const int32_t t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
        }
    }
}

static pw_plan_t *make_plan(const pw_problem_t *p, pw_regroup_mode_t mode, int32_t window,
                            pw_kernel_t kernel, uint32_t flags, device_problem_t *d)
{
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.regroup = mode;
    cfg.window = window;
    cfg.kernel = kernel;
    cfg.flags = flags;
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(p, &cfg, &plan));
    size_t bytes = 0;
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    if (bytes > d->workspace_bytes) {
        cudaFree(d->workspace);
        d->workspace = dev_alloc(bytes + 1);
        d->workspace_bytes = bytes + 1;
    }
    return plan;
}

/* The g of a full call's regroup in g_precision: the plan's (plan_g, pw_plan_info), or 2
 * (G = 16; 4 at G = 8) where the regroup objective follows the FP8X2 tile (the default; not
 * PW_PLAN_NO_REGROUP_BY_TILE) and the call runs the stacked tile, which the device picks as
 * pw_fp8x2_stack_choice does on the host. */
static int32_t call_regroup_size(const pw_plan_t *plan, const pw_capture_t *c, uint32_t flags, int32_t plan_g)
{
    pw_plan_info_t x2 = PW_PLAN_INFO_INIT;
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &x2));
    if (g_precision != PW_PRECISION_FP8X2 || x2.fp8x2_stacked != 1 || x2.regroup == PW_REGROUP_IDENTITY ||
        (flags & (PW_PLAN_NO_REGROUP_BY_TILE | PW_PLAN_CALLER_PERM)))
        return plan_g;
    const pw_requests_t rq = pw_capture_requests(c);
    uint64_t counts[2];
    int stacked = 0;
    assert_pw_ok(pw_fp8x2_stack_choice(&c->problem, c->topk_ids, &rq, counts, &stacked));
    return stacked ? (c->problem.q_heads_per_kv == 8 ? 4 : 2) : plan_g;
}

/* The permutation a full call of `plan` computes in g_precision, by the CPU reference: g's
 * mode and window, the call's regroup g (plan_g, pw_plan_info's regroup_group_size, through
 * call_regroup_size; 0 keeps g's); identity order as it is. */
static void reference_call_perm(const pw_capture_t *c, const pw_plan_t *plan, const pw_grouping_t *g, uint32_t flags,
                                int32_t plan_g, int32_t *perm)
{
    if (g->mode == PW_REGROUP_IDENTITY) {
        identity_perm(&c->problem, perm);
        return;
    }
    pw_grouping_t gr = *g;
    if (plan_g > 0) gr.group_size = call_regroup_size(plan, c, flags, plan_g);
    const pw_requests_t rq = pw_capture_requests(c);
    assert_pw_ok(pw_ref_regroup(&c->problem, c->topk_ids, &rq, &gr, perm));
}

/* Every arm: full call == direct run (bitwise), workspace == reference metadata. */
static void test_full_call_matches_direct(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    pw_capture_t *c = make_problem(&rng);
    const pw_problem_t *p = &c->problem;
    const pw_requests_t rq = pw_capture_requests(c);
    device_problem_t d;
    device_alloc(p, &d);
    upload(c, &d, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    result_t full, direct;
    result_alloc(p, &full);
    result_alloc(p, &direct);
    int32_t *perm = malloc((size_t)p->num_kv_heads * p->num_tokens * 4);
    assert_non_null(perm);

    struct arm {
        const char *name;
        pw_regroup_mode_t mode;
        int32_t window;
        pw_kernel_t kernel;
        uint32_t flags;
    } arms[] = {
        {"identity union8", PW_REGROUP_IDENTITY, 128, PW_KERNEL_UNION8, 0},
        {"guarded W64 union8", PW_REGROUP_GUARDED, 64, PW_KERNEL_UNION8, 0},
        {"guarded W128 union8", PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION8, 0},
        {"greedy W128 union8", PW_REGROUP_GREEDY, 128, PW_KERNEL_UNION8, 0},
        {"greedy W64 union8", PW_REGROUP_GREEDY, 64, PW_KERNEL_UNION8, 0},
        {"caller perm (random) union8", PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION8, PW_PLAN_CALLER_PERM},
        {"caller perm (random, W 0) union8", PW_REGROUP_GUARDED, 0, PW_KERNEL_UNION8, PW_PLAN_CALLER_PERM},
        {"guarded W128 union4", PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION4, 0},
        {"guarded W128 union4, 8-query objective", PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION4,
         PW_PLAN_REGROUP_GROUPS_OF_8},
        {"greedy W64 union4 + V^T pre-pass", PW_REGROUP_GREEDY, 64, PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS},
        {"guarded W128 union4 + V^T pre-pass", PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS},
        {"identity union4 + V^T pre-pass", PW_REGROUP_IDENTITY, 128, PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS},
        {"per-query", PW_REGROUP_GUARDED, 128, PW_KERNEL_PER_QUERY, 0},
        {"default (auto W128) union4", PW_REGROUP_AUTO, 128, PW_KERNEL_UNION4, 0},
        {"auto W64 union8", PW_REGROUP_AUTO, 64, PW_KERNEL_UNION8, 0},
        {"default (auto window) union4", PW_REGROUP_AUTO, PW_WINDOW_AUTO, PW_KERNEL_UNION4, 0},
    };
    result_t first, first_vt; /* the first arm's results; the first pre-pass arm's (FP8X2: P in f16) */
    result_alloc(p, &first);
    result_alloc(p, &first_vt);
    int have_vt = 0;
    for (size_t i = 0; i < sizeof arms / sizeof arms[0]; i++) {
        const struct arm *a = &arms[i];
        pw_plan_t *plan = make_plan(p, a->mode, a->window, a->kernel, a->flags, &d);
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = a->mode;
        g.window = a->mode == PW_REGROUP_IDENTITY && !(a->flags & PW_PLAN_CALLER_PERM) ? 0 : a->window;
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
        if (a->mode == PW_REGROUP_AUTO) { /* what the time guard chose */
            printf("  %-34s time guard: %s (saving %.1f us, cost %.1f us)\n", a->name,
                   info.regroup == PW_REGROUP_IDENTITY ? "identity" : "guarded", info.saving_us, info.cost_us);
            g.mode = info.regroup;
            /* Windows of W where either precision regroups; identity in both: the identity
             * plan's window 0 (the same groups). */
            pw_plan_info_t x2 = PW_PLAN_INFO_INIT;
            assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &x2));
            const int identity_both = info.regroup == PW_REGROUP_IDENTITY && x2.regroup == PW_REGROUP_IDENTITY;
            if (a->window == PW_WINDOW_AUTO) /* the guard's pick (its choice: test_time_guard) */
                assert_true(identity_both ? info.window == 0 : info.window == 64 || info.window == 128);
            else
                assert_int_equal(info.window, identity_both ? 0 : a->window);
            g.window = info.window;
        }
        /* The regroup's group size is the plan's (4 for Union4: pw_plan_info); union
         * preparation groups 8 slots either way (g). */
        if (a->flags & PW_PLAN_CALLER_PERM) random_perm_within_requests(c, &rng, perm);
        else reference_call_perm(c, plan, &g, a->flags, info.regroup_group_size, perm);
        const int32_t *perm_dev = NULL;
        if (a->flags & PW_PLAN_CALLER_PERM) { /* the caller's perm lives in its own buffer */
            put(d.perm, perm, (size_t)p->num_kv_heads * p->num_tokens * 4);
            perm_dev = d.perm;
        }
        poison(p, &d, s);
        const pw_attention_args_t args = device_args(p, &d);
        assert_pw_ok(pw_sparse_prefill(plan, &args, perm_dev, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &full);
        if (a->kernel != PW_KERNEL_PER_QUERY) check_workspace_views(c, plan, &d, perm);
        direct_run(c, &d, a->kernel, &g, perm, s, &direct);
        if ((a->flags & PW_PLAN_VT_PREPASS) && g_precision == PW_PRECISION_FP8X2) {
            /* P in f16 on the tiles, two E4M3 terms in the direct run: close, not equal;
             * bitwise equal across the pre-pass arms (grouping-invariant). */
            const double nrms = nrms_result(p, &full, &direct);
            printf("  %-34s full call vs direct (FP8X2: P in f16 / E4M3 terms): NRMS %.2e (bound %.0e), bad pages "
                   "%u / %u\n", a->name, nrms, X2_PATHS_NRMS_BOUND, full.bad, direct.bad);
            assert_true(nrms <= X2_PATHS_NRMS_BOUND);
            assert_int_equal(full.bad, direct.bad);
            if (!have_vt) {
                memcpy(first_vt.o, full.o, out_elems(p) * 2);
                memcpy(first_vt.lse, full.lse, out_elems(p) / 128 * 4);
                first_vt.bad = full.bad;
                have_vt = 1;
            }
            assert_true(same_result(p, &full, &first_vt));
            pw_plan_destroy(plan);
            continue;
        }
        const int same = same_result(p, &full, &direct);
        printf("  %-34s full call == direct: %s (bad pages %u / %u)\n", a->name, same ? "bitwise" : "DIFFERENT",
               full.bad, direct.bad);
        assert_true(same);
        if (i == 0) {
            memcpy(first.o, full.o, out_elems(p) * 2);
            memcpy(first.lse, full.lse, out_elems(p) / 128 * 4);
            first.bad = full.bad;
        } else {
            assert_true(same_result(p, &full, &first)); /* docs/semantics.md §4: grouping-invariant */
        }
        pw_plan_destroy(plan);
    }

    /* Accuracy of the full call (guards against every path being wrong the same way). */
    const size_t elems = out_elems(p);
    float *emu = malloc(elems * 4), *emu_lse = malloc(elems / 128 * 4);
    assert_non_null(emu);
    assert_non_null(emu_lse);
    pw_attention_args_t ra = ref_args(c, emu, emu_lse);
    assert_pw_ok(pw_ref_attention(p, &ra, PW_REF_FP8_EMULATE));
    double num = 0, den = 0;
    int64_t nan = 0, nonzero = 0;
    for (size_t i = 0; i < elems; i++) {
        const double g = pw_bf16_to_float(first.o[i]), r = emu[i];
        if (isnan(g)) nan++;
        else num += (g - r) * (g - r);
        den += r * r;
        nonzero += r != 0;
    }
    const double nrms = den > 0 ? sqrt(num / den) : 1.0;
    printf("  full call vs FP8-emulating reference: NRMS %.3e (bound %.0e), NaN %lld, nonzero ref %lld\n", nrms,
           EMU_NRMS_BOUND, (long long)nan, (long long)nonzero);
    assert_int_equal(nan, 0);
    assert_true(nonzero > 0);
    assert_true(nrms <= EMU_NRMS_BOUND);
    if (have_vt) { /* the pre-pass arms (FP8X2, P in f16, or the stacked tile's E4M3 terms) against their emulation */
        uint64_t counts[2];
        int stacked = 0;
        assert_pw_ok(pw_fp8x2_stack_choice(p, c->topk_ids, &rq, counts, &stacked));
        printf("  pre-pass arms' FP8X2 tile (pairs' pages %llu, blocks' %llu): %s\n", (unsigned long long)counts[0],
               (unsigned long long)counts[1], stacked ? "stacked 2-slot tile" : "lean kernel, P in f16");
        assert_pw_ok(pw_ref_attention(p, &ra, stacked ? PW_REF_FP8_EMULATE : PW_REF_FP8_EMULATE_F16_P));
        const double nrms16 = nrms_vs_ref(p, first_vt.o, emu);
        printf("  full call on the V^T pre-pass vs the %s emulation: NRMS %.3e (bound %.0e)\n",
               stacked ? "E4M3-term" : "f16-P", nrms16, EMU_X2_NRMS_BOUND);
        assert_true(nrms16 <= EMU_X2_NRMS_BOUND);
        /* The bound cannot tell the two tiles apart (~2e-3 NRMS apart): the device's counts
         * must decide as the host's did, so the pre-pass arms' bytes are those of the plan
         * forced to the host's tile, bitwise (this problem's ratio is near the rule's G = 16 threshold). */
        pw_plan_t *forced = make_plan(p, PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION4,
                                      PW_PLAN_VT_PREPASS | (stacked ? PW_PLAN_FP8X2_STACKED : PW_PLAN_NO_FP8X2_STACKED), &d);
        poison(p, &d, s);
        const pw_attention_args_t fa = device_args(p, &d);
        assert_pw_ok(pw_sparse_prefill(forced, &fa, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &full);
        const int same_tile = same_result(p, &full, &first_vt);
        printf("  pre-pass arms == the plan forced to the host's tile (%s): %s\n", stacked ? "stacked" : "lean",
               same_tile ? "bitwise" : "DIFFERENT");
        assert_true(same_tile);
        pw_plan_destroy(forced);
    }

    free(emu);
    free(emu_lse);
    result_free(&first_vt);
    result_free(&first);
    result_free(&full);
    result_free(&direct);
    free(perm);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

/* One call captured in a graph; new Top-K ids, page table, request lengths and scales in
 * the same buffers; replay == fresh direct run on the new inputs. */
static int edge_type(cudaGraphNode_t from, cudaGraphNode_t to, int *port);
static cudaGraphNode_t find_node(cudaGraphNode_t *nodes, size_t count, const char *part, int want);

static void graph_replay_case(pw_kernel_t kernel, uint32_t flags)
{
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x9a9a9a9aull ^ (uint64_t)kernel ^ ((uint64_t)flags << 8));
    pw_capture_t *c = make_problem(&rng);
    const pw_problem_t *p = &c->problem;
    device_problem_t d;
    device_alloc(p, &d);
    upload(c, &d, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    pw_plan_t *plan = make_plan(p, PW_REGROUP_GUARDED, 128, kernel, flags, &d);
    const pw_attention_args_t args = device_args(p, &d);
    /* One call outside capture first: one-time host set-up (function attributes, driver
     * entry points) happens there, as in a serving engine's warm-up. */
    poison(p, &d, s);
    assert_pw_ok(pw_sparse_prefill(plan, &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
    CUDA_OK(cudaStreamSynchronize(s));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const pw_status_t st = pw_sparse_prefill(plan, &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    assert_pw_ok(st);
    /* On the pre-pass the regroup and union preparation are a branch beside the pre-pass
     * (plan.c): the captured call starts at two roots (the regroup kernel, or in a by-tile
     * call the schedule counts' memset before it, and the marks' memset), every other call
     * at one (K = 16 here: no padding kernel before the fork). */
    size_t nodes = 0, roots = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    CUDA_OK(cudaGraphGetRootNodes(graph, NULL, &roots));
    printf("  captured call (%s): %zu nodes, %zu root nodes\n", flags & PW_PLAN_VT_PREPASS ? "pre-pass" : "no pre-pass",
           nodes, roots);
    if (flags & PW_PLAN_VT_PREPASS) assert_int_equal(roots, 2);
    else assert_int_equal(roots, 1);
    if (!(flags & PW_PLAN_VT_PREPASS) && p->topk <= 16) {
        /* Without the pre-pass, union preparation is the regroup's
         * programmatic dependent (a direct, programmatic edge; read with edge data, since a
         * dependency query without it is refused as lossy once an edge is programmatic). */
        cudaGraphNode_t *all = malloc(nodes * sizeof *all);
        assert_non_null(all);
        size_t got = nodes;
        CUDA_OK(cudaGraphGetNodes(graph, all, &got));
        cudaGraphNode_t regroup = find_node(all, got, "regroup_kernel", 1);
        cudaGraphNode_t unions = find_node(all, got, "union_prepare_kernel", 1);
        int port = -1;
        const int type = edge_type(regroup, unions, &port);
        printf("  graph (no pre-pass): edge regroup -> union preparation type %d port %d (programmatic: type %d)\n",
               type, port, (int)cudaGraphDependencyTypeProgrammatic);
        assert_int_equal(type, (int)cudaGraphDependencyTypeProgrammatic);
        free(all);
    }
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

    result_t replay, direct, before, eager;
    result_alloc(p, &replay);
    result_alloc(p, &direct);
    result_alloc(p, &before);
    result_alloc(p, &eager);
    /* FP8X2 on the pre-pass (P in f16, semantics §4.5): the replay equals an eager call on
     * the new inputs bitwise and the direct run (E4M3 P terms) by NRMS. */
    const int own = (flags & PW_PLAN_VT_PREPASS) && g_precision == PW_PRECISION_FP8X2;
    int32_t *perm = malloc((size_t)p->num_kv_heads * p->num_tokens * 4);
    assert_non_null(perm);
    pw_grouping_t g = PW_GROUPING_INIT;
    pw_plan_info_t info = PW_PLAN_INFO_INIT; /* the regroup's group size: 4 for Union4 */
    assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info));
    pw_grouping_t g_regroup = g;
    g_regroup.group_size = info.regroup_group_size;
    for (int round = 0; round < 3; round++) {
        if (round > 0) {
            fill_inputs(c, &rng);
            c->k_scale = (float)pw_rng_range(&rng, 1, 8) / 256.0f;
            c->v_scale = (float)pw_rng_range(&rng, 1, 8) / 256.0f;
            if (round == 2) break_a_selected_page(c);
            const pw_requests_t rq_new = pw_capture_requests(c);
            assert_pw_ok(pw_problem_check(p, &rq_new));
            upload(c, &d, 0);
        }
        poison(p, &d, s);
        CUDA_OK(cudaGraphLaunch(exec, s));
        fetch(p, &d, s, &replay);
        const pw_requests_t rq = pw_capture_requests(c);
        g_regroup.group_size = call_regroup_size(plan, c, flags, info.regroup_group_size); /* this round's tile */
        assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g_regroup, perm));
        check_workspace_views(c, plan, &d, perm);
        g_regroup.group_size = info.regroup_group_size;
        direct_run(c, &d, kernel, &g, perm, s, &direct);
        int same = same_result(p, &replay, &direct);
        if (own) {
            const double nrms = nrms_result(p, &replay, &direct);
            poison(p, &d, s);
            assert_pw_ok(pw_sparse_prefill(plan, &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
            fetch(p, &d, s, &eager);
            printf("  graph replay union4+vt round %d, FP8X2 (P in f16): NRMS vs the direct run %.2e (bound %.0e)\n",
                   round, nrms, X2_PATHS_NRMS_BOUND);
            same = same_result(p, &replay, &eager) && nrms <= X2_PATHS_NRMS_BOUND && replay.bad == direct.bad;
        }
        const int changed = round == 0 || memcmp(replay.o, before.o, out_elems(p) * 2) != 0;
        printf("  graph replay %s round %d (cu_seqlens %d,%d,%d,%d,%d; scales %g %g): == %s run: %s, "
               "output changed: %s, bad pages %u\n",
               kernel == PW_KERNEL_UNION4 ? (flags & PW_PLAN_VT_PREPASS ? "union4+vt" : "union4") : "union8", round, c->cu_seqlens_q[0], c->cu_seqlens_q[1], c->cu_seqlens_q[2], c->cu_seqlens_q[3],
               c->cu_seqlens_q[4], c->k_scale, c->v_scale, own ? "eager" : "direct", same ? "bitwise" : "DIFFERENT", changed ? "yes" : "NO",
               replay.bad);
        assert_true(same);
        assert_true(changed);
        if (round == 2) assert_true(replay.bad > 0);
        memcpy(before.o, replay.o, out_elems(p) * 2);
    }
    free(perm);
    result_free(&replay);
    result_free(&direct);
    result_free(&before);
    result_free(&eager);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    pw_plan_destroy(plan);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

/* The default kernel of PW_PLAN_CONFIG_INIT (Union4) and Union8, and Union4 on the V^T
 * pre-pass. */
static void test_graph_replay_new_inputs(void **state)
{
    (void)state;
    const pw_plan_config_t defaults = PW_PLAN_CONFIG_INIT;
    graph_replay_case(defaults.kernel, 0);
    graph_replay_case(defaults.kernel == PW_KERNEL_UNION8 ? PW_KERNEL_UNION4 : PW_KERNEL_UNION8, 0);
    // The V^T pre-pass path (the rule picks it only for large inputs): its touched bytes must
    // follow the new Top-K ids of every replay.
    graph_replay_case(PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS);
}

/* One full call into r: outputs poisoned, pw_sparse_prefill on the workspace ws (bytes),
 * results fetched. */
static void full_call(const pw_problem_t *p, device_problem_t *d, const pw_plan_t *plan,
                      const pw_attention_args_t *args, void *ws, size_t bytes, cudaStream_t s, result_t *r)
{
    poison(p, d, s);
    assert_pw_ok(pw_sparse_prefill(plan, args, NULL, ws, bytes, (pw_stream_t)s));
    fetch(p, d, s, r);
}

/* A guarded-W128 Union4 plan forced onto the V^T pre-pass with at most vt_max_pages tiles
 * per KV head, and its own workspace (cudaMalloc'ed, *bytes long). */
static pw_plan_t *make_vt_plan(const pw_problem_t *p, int32_t vt_max_pages, uint32_t extra_flags, void **ws,
                               size_t *bytes)
{
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.regroup = PW_REGROUP_GUARDED;
    cfg.flags = PW_PLAN_VT_PREPASS | extra_flags;
    cfg.vt_max_pages = vt_max_pages;
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(p, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, bytes));
    CUDA_OK(cudaMalloc(ws, *bytes));
    return plan;
}

/* Device data past the contract (kv_lens > max_pages_per_request * P, Top-K ids past the
 * page-table row): the last request's rows select only pages >= max_pages_per_request that
 * its (too large) prefix and KV length make visible. Its page-table row ends the allocation,
 * so a read past the row is caught by compute-sanitizer memcheck (the `fullcall` stage).
 * Every kernel must leave those rows empty (O = 0, LSE = -inf) and every other row bitwise
 * as in the run on valid data. */
static void test_kv_len_past_page_table(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x7ab1e5ull);
    pw_capture_t *c = make_problem(&rng);
    const pw_problem_t *p = &c->problem;
    device_problem_t d;
    device_alloc(p, &d);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int32_t last = p->num_requests - 1, q0 = c->cu_seqlens_q[last], q1 = c->cu_seqlens_q[last + 1];
    assert_true(q1 > q0);
    const int32_t bad_prefix = (MAX_PAGES + 20) * 128, bad_kv = bad_prefix + (q1 - q0) + 3;
    int32_t *bad_rows = malloc((size_t)(q1 - q0) * 16 * 4);
    assert_non_null(bad_rows);
    for (int32_t i = 0; i < (q1 - q0) * 16; i++) bad_rows[i] = MAX_PAGES + (i % 16) + (i / 16) % 3;
    static const struct {
        pw_kernel_t kernel;
        uint32_t flags;
        pw_regroup_mode_t mode;
        const char *name;
    } arms[] = {
        {PW_KERNEL_UNION4, 0, PW_REGROUP_GUARDED, "union4 W128"},
        {PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS | PW_PLAN_NO_FP8X2_STACKED, PW_REGROUP_GUARDED,
         "union4+vt W128 (lean tile forced)"},
        {PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS | PW_PLAN_FP8X2_STACKED, PW_REGROUP_GUARDED,
         "union4+vt W128 (stacked tile forced)"},
        {PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS, PW_REGROUP_GUARDED, "union4+vt W128 (tile per call)"},
        {PW_KERNEL_UNION4, 0, PW_REGROUP_IDENTITY, "union4 identity"},
        {PW_KERNEL_UNION8, 0, PW_REGROUP_GUARDED, "union8 W128"},
        {PW_KERNEL_PER_QUERY, 0, PW_REGROUP_IDENTITY, "per-query"},
    };
    result_t valid, broken, tile_runs[2]; /* tile_runs: the forced lean / stacked arms' valid runs */
    result_alloc(p, &valid);
    result_alloc(p, &broken);
    result_alloc(p, &tile_runs[0]);
    result_alloc(p, &tile_runs[1]);
    const int64_t hq = (int64_t)p->num_kv_heads * 16;
    for (size_t a = 0; a < sizeof arms / sizeof arms[0]; a++) {
        pw_plan_t *plan = make_plan(p, arms[a].mode, 128, arms[a].kernel, arms[a].flags, &d);
        const pw_attention_args_t args = device_args(p, &d);
        upload(c, &d, 1);
        full_call(p, &d, plan, &args, d.workspace, d.workspace_bytes, s, &valid);
        put(d.prefix + last, &bad_prefix, 4);
        put(d.kv + last, &bad_kv, 4);
        for (int h = 0; h < p->num_kv_heads; h++)
            put(d.topk + ((int64_t)h * p->num_tokens + q0) * 16, bad_rows, (size_t)(q1 - q0) * 16 * 4);
        full_call(p, &d, plan, &args, d.workspace, d.workspace_bytes, s, &broken);
        /* FP8X2 on the pre-pass picks its tile per call from counts over all the call's Top-K
         * rows (semantics.md §4.5: a row's bytes may depend on the other rows of its call), so
         * the broken request may flip the pick: then the other rows are the other tile's
         * bytes. The forced arms (run first) keep their valid runs, and the per-call arm's
         * other rows must equal one of them bitwise, O and LSE. Every fixed path stays
         * bitwise equal to its own valid run. */
        const int per_call = (arms[a].flags & PW_PLAN_VT_PREPASS) && g_precision == PW_PRECISION_FP8X2 &&
                             !(arms[a].flags & (PW_PLAN_FP8X2_STACKED | PW_PLAN_NO_FP8X2_STACKED));
        const int forced_tile = (arms[a].flags & PW_PLAN_NO_FP8X2_STACKED) ? 0
                                : (arms[a].flags & PW_PLAN_FP8X2_STACKED)  ? 1
                                                                           : -1;
        if (forced_tile >= 0) {
            memcpy(tile_runs[forced_tile].o, valid.o, out_elems(p) * 2);
            memcpy(tile_runs[forced_tile].lse, valid.lse, out_elems(p) / 128 * 4);
        }
        int64_t other_diff = 0, not_empty = 0, tile_diff[2] = {0, 0};
        for (int64_t i = 0; i < p->num_tokens; i++)
            for (int64_t h = 0; h < hq; h++) {
                const int64_t row = i * hq + h;
                if (i >= q0 && i < q1) {
                    const float l = broken.lse[row];
                    int nonzero = 0;
                    for (int e = 0; e < 128; e++) nonzero |= broken.o[row * 128 + e] != 0;
                    not_empty += nonzero || !(isinf(l) && l < 0);
                } else {
                    other_diff += row_differs(&broken, &valid, row);
                    if (per_call)
                        for (int t = 0; t < 2; t++) tile_diff[t] += row_differs(&broken, &tile_runs[t], row);
                }
            }
        printf("  kv_lens past the page table, %s: rows of the broken request not empty %lld, other rows "
               "different %lld, bad pages %u (valid run %u)\n",
               arms[a].name, (long long)not_empty, (long long)other_diff, broken.bad, valid.bad);
        assert_int_equal(not_empty, 0);
        if (per_call && other_diff != 0) {
            printf("    the per-call pick differs from the valid run's: other rows different from the lean tile's "
                   "valid run %lld, from the stacked tile's %lld\n",
                   (long long)tile_diff[0], (long long)tile_diff[1]);
            assert_true(tile_diff[0] == 0 || tile_diff[1] == 0);
        } else {
            assert_int_equal(other_diff, 0);
        }
        assert_true(broken.bad >= valid.bad);
        pw_plan_destroy(plan);
    }
    free(bad_rows);
    result_free(&valid);
    result_free(&broken);
    result_free(&tile_runs[0]);
    result_free(&tile_runs[1]);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

/* Device data past the contract: cu_seqlens_q made non-monotone after the plan ({0, c1,
 * N - 1, c3, N}: request 1 then spans the rows of requests 1-3, request 2 is inverted,
 * request 3 keeps its rows). The pre-pass marks a query's pages under the request a binary
 * search finds (request 1 for most of request 3's rows), union preparation groups request
 * 3 as request 3: its pages are not marked and have no tile, which the attention kernels
 * must drop instead of reading a stale slot. The call must succeed without a fault
 * (compute-sanitizer memcheck in the `fullcall` stage: no read outside the tiles). The
 * outputs are unspecified, request 0's included: the regroup's window lookup assumes a
 * monotone cu_seqlens_q (H200, 2026-12-03: 1,264 of request 0's 5,184 rows differed at
 * W128), so they are only printed. */
static void test_broken_cu_seqlens_prepass(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xb40c5e9ull);
    pw_capture_t *c = make_problem(&rng);
    const pw_problem_t *p = &c->problem;
    device_problem_t d;
    device_alloc(p, &d);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int32_t c1 = c->cu_seqlens_q[1], broken2 = p->num_tokens - 1;
    static const struct {
        pw_regroup_mode_t mode;
        const char *name;
    } arms[] = {{PW_REGROUP_GUARDED, "union4+vt W128"}, {PW_REGROUP_IDENTITY, "union4+vt identity"}};
    result_t valid, broken;
    result_alloc(p, &valid);
    result_alloc(p, &broken);
    const int64_t hq = (int64_t)p->num_kv_heads * 16;
    for (size_t a = 0; a < sizeof arms / sizeof arms[0]; a++) {
        pw_plan_t *plan = make_plan(p, arms[a].mode, 128, PW_KERNEL_UNION4, PW_PLAN_VT_PREPASS, &d);
        const pw_attention_args_t args = device_args(p, &d);
        upload(c, &d, 1);
        full_call(p, &d, plan, &args, d.workspace, d.workspace_bytes, s, &valid);
        put(d.cu + 2, &broken2, 4);
        full_call(p, &d, plan, &args, d.workspace, d.workspace_bytes, s, &broken);
        int64_t first_diff = 0, other_diff = 0;
        for (int64_t i = 0; i < p->num_tokens; i++)
            for (int64_t h = 0; h < hq; h++) {
                const int64_t row = i * hq + h;
                const int diff = row_differs(&broken, &valid, row);
                if (i < c1) first_diff += diff;
                else other_diff += diff;
            }
        printf("  non-monotone cu_seqlens_q (0, %d, %d, %d, %d), %s: no fault; rows different from the valid run "
               "(unspecified): request 0 %lld of %lld, others %lld\n",
               c1, broken2, c->cu_seqlens_q[3], c->cu_seqlens_q[4], arms[a].name, (long long)first_diff,
               (long long)(c1 * hq), (long long)other_diff);
        pw_plan_destroy(plan);
    }
    result_free(&valid);
    result_free(&broken);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

/* Pages the unions of KV head h touch (distinct (request, page)), from the reference
 * metadata of the plan's grouping: what the V^T pre-pass's scan counts. */
static int64_t touched_pages(const pw_capture_t *c, const int32_t *perm, int h)
{
    const pw_problem_t *p = &c->problem;
    pw_grouping_t g = PW_GROUPING_INIT;
    host_meta_t hm;
    host_meta_alloc(p, &g, &hm);
    const pw_requests_t rq = pw_capture_requests(c);
    assert_pw_ok(pw_ref_union_prepare(p, c->topk_ids, &rq, &g, perm, &hm.m));
    uint8_t *seen = calloc((size_t)p->num_requests * p->max_pages_per_request, 1);
    assert_non_null(seen);
    int64_t count = 0;
    for (int32_t k = 0; k < hm.m.num_groups[h]; k++) {
        const pw_group_desc_t *d = hm.m.groups + (int64_t)h * hm.m.max_groups + k;
        const int32_t *pages = hm.m.union_pages + ((int64_t)h * hm.m.max_groups + k) * hm.m.union_capacity;
        for (int32_t i = 0; i < d->union_size; i++) {
            if (pages[i] < 0 || pages[i] >= p->max_pages_per_request) continue;
            uint8_t *b = seen + (int64_t)d->request * p->max_pages_per_request + pages[i];
            count += *b == 0;
            *b = 1;
        }
    }
    free(seen);
    host_meta_free(&hm);
    return count;
}

/* Outputs and LSE of KV head h (its 16 Q heads, every row) equal in a and b. */
static int same_head(const pw_problem_t *p, const result_t *a, const result_t *b, int h)
{
    const int64_t hq = (int64_t)p->num_kv_heads * p->q_heads_per_kv;
    for (int64_t row = 0; row < p->num_tokens; row++) {
        const int64_t at = row * hq + (int64_t)h * p->q_heads_per_kv;
        if (memcmp(a->o + at * 128, b->o + at * 128, (size_t)p->q_heads_per_kv * 128 * 2) != 0 ||
            memcmp(a->lse + at, b->lse + at, (size_t)p->q_heads_per_kv * 4) != 0)
            return 0;
    }
    return 1;
}

/* The V^T pre-pass's capacity (pw_plan_config_t.vt_max_pages): KV heads whose unions touch
 * more pages than it run on the fallback kernel, the others on the tiles, call after call
 * (the counts are zeroed and the marks cleared in each call). Capacities: the default, below
 * both heads' counts, between them (one head on each kernel). FP8: every capacity gives the
 * outputs of the plan without the pre-pass, bitwise. FP8X2 (P in f16 on the tiles, two E4M3
 * terms on the fallback, docs/semantics.md §4.5): each head's bytes are those of the plan
 * without the pre-pass where it falls back and those of the default capacity (every head on
 * the tiles) where it does not. */
static void test_vt_capacity(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xca9ac17eull);
    pw_capture_t *c = make_problem(&rng);
    const pw_problem_t *p = &c->problem;
    device_problem_t d;
    device_alloc(p, &d);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int32_t *perm = malloc((size_t)p->num_kv_heads * p->num_tokens * 4);
    assert_non_null(perm);
    result_t plain, tiles, all_tiles;
    result_alloc(p, &plain);
    result_alloc(p, &tiles);
    result_alloc(p, &all_tiles);
    for (int pr = 0; pr < 2; pr++) {
        g_precision = pr ? PW_PRECISION_FP8X2 : PW_PRECISION_FP8;
        const char *name = pr ? "FP8X2" : "FP8";
        const pw_attention_args_t args = device_args(p, &d);
        for (int round = 0; round < 2; round++) {
            if (round > 0) fill_inputs(c, &rng);
            const pw_requests_t rq = pw_capture_requests(c);
            pw_grouping_t g = PW_GROUPING_INIT;
            assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g, perm));
            const int64_t t0 = touched_pages(c, perm, 0), t1 = touched_pages(c, perm, 1);
            const int64_t touched[2] = {t0, t1};
            const int32_t caps[3] = {0, (int32_t)(t0 < t1 ? t0 : t1) / 2, (int32_t)(t0 < t1 ? t0 : t1)};
            upload(c, &d, 1);
            pw_plan_t *plan = make_plan(p, PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION4, PW_PLAN_NO_VT_PREPASS, &d);
            full_call(p, &d, plan, &args, d.workspace, d.workspace_bytes, s, &plain);
            pw_plan_destroy(plan);
            /* FP8X2: the tile the device picks for this problem (its ratio is ~0.75: the lean
             * kernel), then the stacked 2-slot tile forced, so that both FP8X2 tiles run
             * beside a KV head that falls back (each compared with its own all-tiles run). */
            for (int tile = 0; tile < (pr ? 2 : 1); tile++)
            for (int i = 0; i < 3; i++) {
                size_t bytes = 0;
                void *ws = NULL;
                plan = make_vt_plan(p, caps[i], tile ? (uint32_t)PW_PLAN_FP8X2_STACKED : 0u, &ws, &bytes);
                /* Garbage in the workspace first: marks, counts and slots must not leak into results. */
                CUDA_OK(cudaMemsetAsync(ws, 0x5a, bytes, s));
                for (int call = 0; call < 2; call++) {
                    full_call(p, &d, plan, &args, ws, bytes, s, &tiles);
                    if (pr && i == 0 && call == 0) { /* every head on the tiles (this tile's run) */
                        memcpy(all_tiles.o, tiles.o, out_elems(p) * 2);
                        memcpy(all_tiles.lse, tiles.lse, out_elems(p) / 128 * 4);
                        all_tiles.bad = tiles.bad;
                    }
                    int same = tiles.bad == plain.bad;
                    for (int h = 0; h < 2; h++) {
                        const int falls_back = caps[i] > 0 && touched[h] > caps[i];
                        same = same && same_head(p, &tiles, pr && !falls_back ? &all_tiles : &plain, h);
                    }
                    printf("  %s%s V^T capacity %d (touched pages: head 0 %lld, head 1 %lld), round %d call %d: == %s: "
                           "%s, bad pages %u\n",
                           name, tile ? " (stacked tile forced)" : "", caps[i], (long long)t0, (long long)t1, round, call,
                           pr ? "no pre-pass on fallback heads, the tiles' bytes on the others" : "no pre-pass",
                           same ? "bitwise" : "DIFFERENT", tiles.bad);
                    assert_true(same);
                }
                CUDA_OK(cudaFree(ws));
                pw_plan_destroy(plan);
            }
        }
    }
    free(perm);
    result_free(&plain);
    result_free(&tiles);
    result_free(&all_tiles);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
    g_precision = PW_PRECISION_FP8X2;
}

/* A captured graph whose replays cross the V^T pre-pass's capacity: with a capacity of 20
 * tiles per KV head, random selections (50+ touched pages per head) run every head on the
 * fallback kernel, selections folded onto pages 0..3 of each request (at most 16 touched
 * pages per head) on the tiles; replays alternate between them and must give the outputs of
 * the plan without the pre-pass, bitwise, each time. */
static void test_vt_graph_crosses_capacity(void **state)
{
    (void)state;
    g_precision = PW_PRECISION_FP8; /* as test_vt_capacity */
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x67a9cull);
    pw_capture_t *c = make_problem(&rng);
    const pw_problem_t *p = &c->problem;
    const size_t ids = (size_t)p->num_kv_heads * p->num_tokens * 16;
    int32_t *spread = malloc(ids * 4), *folded = malloc(ids * 4);
    assert_non_null(spread);
    assert_non_null(folded);
    memcpy(spread, c->topk_ids, ids * 4);
    for (size_t i = 0; i < ids; i++) folded[i] = spread[i] >= 0 ? spread[i] % 4 : spread[i];
    device_problem_t d;
    device_alloc(p, &d);
    upload(c, &d, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const pw_attention_args_t args = device_args(p, &d);
    pw_plan_t *plain_plan = make_plan(p, PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION4, PW_PLAN_NO_VT_PREPASS, &d);
    size_t bytes = 0;
    void *ws = NULL;
    pw_plan_t *plan = make_vt_plan(p, 20, 0u, &ws, &bytes);
    assert_pw_ok(pw_sparse_prefill(plan, &args, NULL, ws, bytes, (pw_stream_t)s)); /* warm-up */
    CUDA_OK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const pw_status_t st = pw_sparse_prefill(plan, &args, NULL, ws, bytes, (pw_stream_t)s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    assert_pw_ok(st);
    size_t roots = 0; /* the regroup branch beside the pre-pass (as in graph_replay_case) */
    CUDA_OK(cudaGraphGetRootNodes(graph, NULL, &roots));
    assert_int_equal(roots, 2);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    result_t plain, replay;
    result_alloc(p, &plain);
    result_alloc(p, &replay);
    int32_t *perm = malloc((size_t)p->num_kv_heads * p->num_tokens * 4);
    assert_non_null(perm);
    for (int round = 0; round < 4; round++) {
        memcpy(c->topk_ids, round % 2 ? folded : spread, ids * 4);
        put(d.topk, c->topk_ids, ids * 4);
        const pw_requests_t rq = pw_capture_requests(c);
        pw_grouping_t g = PW_GROUPING_INIT;
        assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g, perm));
        const int64_t t0 = touched_pages(c, perm, 0), t1 = touched_pages(c, perm, 1);
        full_call(p, &d, plain_plan, &args, d.workspace, d.workspace_bytes, s, &plain);
        poison(p, &d, s);
        CUDA_OK(cudaGraphLaunch(exec, s));
        fetch(p, &d, s, &replay);
        const int same = same_result(p, &replay, &plain);
        printf("  V^T capacity 20, graph replay %d: touched pages %lld / %lld (%s): == no pre-pass: %s\n", round,
               (long long)t0, (long long)t1, t0 > 20 && t1 > 20 ? "both heads fall back" : t0 <= 20 && t1 <= 20 ? "both on tiles" : "mixed",
               same ? "bitwise" : "DIFFERENT");
        assert_true(same);
        if (round % 2) assert_true(t0 <= 20 && t1 <= 20);
        else assert_true(t0 > 20 && t1 > 20);
    }
    free(perm);
    free(spread);
    free(folded);
    result_free(&plain);
    result_free(&replay);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaFree(ws));
    pw_plan_destroy(plan);
    pw_plan_destroy(plain_plan);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
    g_precision = PW_PRECISION_FP8X2;
}

/* Argument errors are reported before anything is enqueued. */
/* Top-K rows in a block pattern for the FP8X2 tile choice: with `shared`, the queries of each
 * block select the same pages (the 16 up to the page of their causal position), so the
 * units' pages are the blocks' (ratio ~1: the other tile); otherwise they select disjoint
 * pages (id last - B k - i % B, B = 4 at G = 16, 8 at G = 8, 16 at G = 4: the block's queries), so the
 * units' pages are half the blocks' twice (ratio ~0.5: the stacked tile). */
static void fill_block_pattern(pw_capture_t *c, int shared)
{
    const pw_problem_t *p = &c->problem;
    const int b = p->q_heads_per_kv == 8 ? 8 : p->q_heads_per_kv == 4 ? 16 : 4;
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int r = 0; r < p->num_requests; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t pos = c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
                const int64_t last = (pos < c->kv_lens[r] - 1 ? pos : c->kv_lens[r] - 1) / 128;
                int32_t *row = c->topk_ids + ((int64_t)h * p->num_tokens + i) * 16;
                for (int k = 0; k < 16; k++) {
                    const int64_t id = shared ? last - k : last - b * k - i % b;
                    row[k] = id >= 0 ? (int32_t)id : -1;
                }
            }
}

/* FP8X2's two tiles on the pre-pass (PW_PLAN_FP8X2_STACKED), at G = 16 (the lean kernel or
 * the 2-slot stacked tile), G = 8 (the dense tile or the 4-slot stacked tile) and G = 4 (the
 * dense tile or the 8-slot stacked tile): on inputs
 * built to fall on each side of the rule, the host's pw_fp8x2_stack_choice says which; the
 * default plan's call gives exactly the bytes of the plan forced to that tile (and not the
 * other's); the stacked tile is grouping-invariant (guarded W128 == identity), equal to dev
 * impl 12 run directly, and within the bounds of the E4M3-term emulation and of the other
 * tile; one captured call replayed on both inputs gives each input's tile. FP8 with
 * per-token scales (since the 34th session the device's choice at G = 16, the stacked tile
 * always at G = 8 / 4): the default, stacked and other plans give the same bytes. */
static void stacked_choice_case(int32_t g_heads)
{
    g_precision = PW_PRECISION_FP8X2;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x57ac4edull ^ (uint64_t)g_heads);
    printf("  G = %d\n", g_heads);
    pw_capture_t *c = make_problem_g(&rng, g_heads);
    const pw_problem_t *p = &c->problem;
    /* Requests cut at multiples of 64 queries (prefixes kept inside the page table): no
     * sampled block of the counts (16 queries at most, every 4th) straddles two requests,
     * whose keys never coincide, so the shared pattern's ratio stays near 1 on every seed
     * (with fill_inputs' random cuts it fell to 0.85, below G = 4's 0.87, on ~4% of seeds). */
    for (int r = 1; r < p->num_requests; r++) c->cu_seqlens_q[r] = c->cu_seqlens_q[r] / 64 * 64;
    for (int r = 0; r < p->num_requests; r++) {
        const int32_t qlen = c->cu_seqlens_q[r + 1] - c->cu_seqlens_q[r], cap = p->max_pages_per_request * 128;
        if (c->prefix_lens[r] > cap - qlen - 5) c->prefix_lens[r] = cap - qlen - 5;
        c->kv_lens[r] = c->prefix_lens[r] + qlen;
    }
    const pw_requests_t rq = pw_capture_requests(c);
    assert_pw_ok(pw_problem_check(p, &rq));
    device_problem_t d;
    device_alloc(p, &d);
    upload(c, &d, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    enum { AUTO, STACKED, STACKED_IDENTITY, OTHER, NUM_PLANS };
    const uint32_t flags[NUM_PLANS] = {PW_PLAN_VT_PREPASS, PW_PLAN_VT_PREPASS | PW_PLAN_FP8X2_STACKED,
                                       PW_PLAN_VT_PREPASS | PW_PLAN_FP8X2_STACKED,
                                       PW_PLAN_VT_PREPASS | PW_PLAN_NO_FP8X2_STACKED};
    const int32_t expect_info[NUM_PLANS] = {1, 2, 2, 0};
    pw_plan_t *plans[NUM_PLANS];
    for (int k = 0; k < NUM_PLANS; k++) {
        plans[k] = make_plan(p, k == STACKED_IDENTITY ? PW_REGROUP_IDENTITY : PW_REGROUP_GUARDED, 128,
                             PW_KERNEL_UNION4, flags[k], &d);
        pw_plan_info_t info = PW_PLAN_INFO_INIT, info8 = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plans[k], PW_PRECISION_FP8X2, &info));
        assert_pw_ok(pw_plan_info(plans[k], PW_PRECISION_FP8, &info8));
        assert_int_equal(info.fp8x2_stacked, expect_info[k]);
        /* FP8 takes the flags too (the stacked tile with its second term 0; 34th session);
         * with per-token scales it picks per call at G = 16, the stacked tile at G = 8 / 4 */
        assert_int_equal(info8.fp8x2_stacked, k == STACKED || k == STACKED_IDENTITY ? 2 : 0);
        assert_int_equal(info8.token_scales_stacked, k == OTHER ? 0 : k == AUTO && g_heads == 16 ? 1 : 2);
        assert_int_equal(info.token_scales_stacked, k == OTHER ? 0 : 2);
    }
    float *ts_dev = device_token_scales(p, &rng);
    result_t r[2][NUM_PLANS], direct, replay;
    for (int pat = 0; pat < 2; pat++)
        for (int k = 0; k < NUM_PLANS; k++) result_alloc(p, &r[pat][k]);
    result_alloc(p, &direct);
    result_alloc(p, &replay);
    int32_t *perm = malloc((size_t)p->num_kv_heads * p->num_tokens * 4);
    assert_non_null(perm);
    const size_t elems = out_elems(p);
    float *emu = malloc(elems * 4), *emu_lse = malloc(elems / 128 * 4);
    assert_non_null(emu);
    assert_non_null(emu_lse);
    for (int pat = 0; pat < 2; pat++) { /* 0: shared pages (the other tile), 1: disjoint (stacked) */
        fill_block_pattern(c, pat == 0);
        upload(c, &d, 0);
        uint64_t counts[2];
        int stacked = -1;
        assert_pw_ok(pw_fp8x2_stack_choice(p, c->topk_ids, &rq, counts, &stacked));
        printf("  %s pages per block: units' pages %llu, blocks' %llu (ratio %.3f): %s\n", pat ? "disjoint" : "shared",
               (unsigned long long)counts[0], (unsigned long long)counts[1],
               counts[1] ? (double)counts[0] / (2.0 * (double)counts[1]) : 0.0,
               stacked ? "stacked tile" : g_heads != 16 ? "dense tile" : "lean kernel");
        assert_int_equal(stacked, pat);
        for (int k = 0; k < NUM_PLANS; k++) {
            poison(p, &d, s);
            const pw_attention_args_t args = device_args(p, &d);
            assert_pw_ok(pw_sparse_prefill(plans[k], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
            fetch(p, &d, s, &r[pat][k]);
        }
        const int auto_same = same_result(p, &r[pat][AUTO], &r[pat][stacked ? STACKED : OTHER]);
        const int tiles_differ = !same_result(p, &r[pat][STACKED], &r[pat][OTHER]);
        const int invariant = same_result(p, &r[pat][STACKED], &r[pat][STACKED_IDENTITY]);
        const double tiles_nrms = nrms_result(p, &r[pat][STACKED], &r[pat][OTHER]);
        printf("  default call == forced %s tile: %s; stacked vs other: %s (NRMS %.2e, bound %.0e); stacked guarded "
               "W128 == identity: %s\n",
               stacked ? "stacked" : "other", auto_same ? "bitwise" : "DIFFERENT", tiles_differ ? "differ" : "SAME BYTES",
               tiles_nrms, X2_PATHS_NRMS_BOUND, invariant ? "bitwise" : "DIFFERENT");
        assert_true(auto_same);
        assert_true(tiles_differ);
        assert_true(invariant);
        assert_true(tiles_nrms <= X2_PATHS_NRMS_BOUND);
        /* Dev impl 12 directly on the reference's guarded-W128 permutation and metadata. */
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plans[STACKED], PW_PRECISION_FP8X2, &info));
        pw_grouping_t g = PW_GROUPING_INIT, g_regroup;
        g.mode = info.regroup;
        g.window = info.window;
        g_regroup = g;
        if (info.regroup_group_size > 0) g_regroup.group_size = info.regroup_group_size;
        if (g.mode == PW_REGROUP_IDENTITY) identity_perm(p, perm);
        else assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g_regroup, perm));
        g_direct_impl = 12;
        direct_run(c, &d, PW_KERNEL_UNION4, &g, perm, s, &direct);
        g_direct_impl = -1;
        const int dev_same = same_result(p, &r[pat][STACKED], &direct);
        printf("  stacked tile in the full call == dev impl 12 run directly: %s\n", dev_same ? "bitwise" : "DIFFERENT");
        assert_true(dev_same);
        /* The persistent launch capped at 1 and 3 CTAs (pw_dev_set_stack_ctas): every CTA runs
         * many items in turn (at the default grid these problems give a CTA a second item at
         * G = 16 only), so the item chaining is exercised at every G: the next item's index in
         * shared memory, the page barriers' phases carried across items, and (G = 4, G = 16's
         * empty tiles) items with nothing to run between real ones. The same bytes. */
        for (int cap = 1; cap <= 3; cap += 2) {
            pw_dev_set_stack_ctas(cap);
            poison(p, &d, s);
            const pw_attention_args_t capped_args = device_args(p, &d);
            assert_pw_ok(pw_sparse_prefill(plans[STACKED], &capped_args, NULL, d.workspace, d.workspace_bytes,
                                           (pw_stream_t)s));
            fetch(p, &d, s, &replay);
            pw_dev_set_stack_ctas(0);
            const int capped_same = same_result(p, &r[pat][STACKED], &replay);
            printf("  stacked tile with the persistent grid capped at %d CTA(s): %s\n", cap,
                   capped_same ? "bitwise" : "DIFFERENT");
            assert_true(capped_same);
        }
        /* Against the E4M3-term emulation (the stacked tile's P and Q codes). */
        const pw_attention_args_t ra = ref_args(c, emu, emu_lse);
        assert_pw_ok(pw_ref_attention(p, &ra, PW_REF_FP8_EMULATE));
        const double nrms = nrms_vs_ref(p, r[pat][STACKED].o, emu);
        printf("  stacked tile vs the E4M3-term emulation: NRMS %.3e (bound %.0e)\n", nrms, EMU_X2_NRMS_BOUND);
        assert_true(nrms <= EMU_X2_NRMS_BOUND); /* (1 when the reference is all 0) */
        /* FP8 with per-token scales on the default plan (G = 16: the device's choice; the
         * lean kernel's CTAs exit where it picks the stacked tile, so poisoned rows would
         * show a pick that runs neither), the stacked tile forced and the other tile forced:
         * the same bytes. */
        {
            g_precision = PW_PRECISION_FP8;
            const pw_attention_args_t ta = with_token_scales(device_args(p, &d), p, ts_dev);
            const int ts_plans[3] = {AUTO, STACKED, OTHER};
            for (int j = 0; j < 3; j++) {
                poison(p, &d, s);
                assert_pw_ok(pw_sparse_prefill(plans[ts_plans[j]], &ta, NULL, d.workspace, d.workspace_bytes,
                                               (pw_stream_t)s));
                fetch(p, &d, s, j == 0 ? &direct : &replay);
                if (j == 0) continue;
                const int same = same_result(p, &direct, &replay);
                printf("  FP8 with per-token scales: the default call == the %s tile forced: %s\n",
                       j == 1 ? "stacked" : "other", same ? "bitwise" : "DIFFERENT");
                assert_true(same);
            }
            g_precision = PW_PRECISION_FP8X2;
        }
    }
    /* One captured default call, replayed on both inputs. */
    fill_block_pattern(c, 1);
    upload(c, &d, 0);
    poison(p, &d, s);
    const pw_attention_args_t args = device_args(p, &d);
    assert_pw_ok(pw_sparse_prefill(plans[AUTO], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
    CUDA_OK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const pw_status_t st = pw_sparse_prefill(plans[AUTO], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    assert_pw_ok(st);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int round = 0; round < 3; round++) {
        const int pat = round % 2 == 0 ? 0 : 1; /* shared, disjoint, shared */
        fill_block_pattern(c, pat == 0);
        upload(c, &d, 0);
        poison(p, &d, s);
        CUDA_OK(cudaGraphLaunch(exec, s));
        fetch(p, &d, s, &replay);
        const int same = same_result(p, &replay, &r[pat][pat ? STACKED : OTHER]);
        printf("  graph replay round %d (%s pages): == the %s tile's eager call: %s\n", round, pat ? "disjoint" : "shared",
               pat ? "stacked" : "other", same ? "bitwise" : "DIFFERENT");
        assert_true(same);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    free(emu);
    free(emu_lse);
    free(perm);
    CUDA_OK(cudaFree(ts_dev));
    for (int pat = 0; pat < 2; pat++)
        for (int k = 0; k < NUM_PLANS; k++) result_free(&r[pat][k]);
    result_free(&direct);
    result_free(&replay);
    for (int k = 0; k < NUM_PLANS; k++) pw_plan_destroy(plans[k]);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

static void test_fp8x2_stacked_choice(void **state)
{
    (void)state;
    stacked_choice_case(16);
    stacked_choice_case(8);
    stacked_choice_case(4);
}

/* The device's counts of the per-call tile choice (the pre-pass's mark launch with
 * stack_mode PER_CALL: stack_stat[0] the units' pages, [1] the blocks'; vt_prepare.cu's
 * stack_count, at G = 4 stack_count_hashed) equal the host's pw_fp8x2_stack_choice exactly,
 * at G = 16, 8 and 4, on random selections (fill_inputs: -1 rows, duplicates, future and
 * huge ids, several requests) and on the block and class patterns. */
static void fill_class_pattern(pw_capture_t *c, pw_rng_t *rng);
static void test_stack_counts_device(void **state)
{
    (void)state;
    const int32_t gs[3] = {16, 8, 4};
    for (int gi = 0; gi < 3; gi++)
        for (int pat = 0; pat < 4; pat++) {
            pw_rng_t rng;
            pw_rng_init(&rng, g_seed ^ 0xc0c0a7ull ^ (uint64_t)(gi * 4 + pat));
            pw_capture_t *c = make_problem_g(&rng, gs[gi]);
            const pw_problem_t *p = &c->problem;
            if (pat == 1 || pat == 2) fill_block_pattern(c, pat == 1);
            if (pat == 3) fill_class_pattern(c, &rng);
            device_problem_t d;
            device_alloc(p, &d);
            upload(c, &d, 1);
            const int64_t entries = (int64_t)p->num_kv_heads * p->num_requests * p->max_pages_per_request;
            uint8_t *touched = dev_alloc(PW_STACK_STAT_OFFSET(entries) + PW_STACK_STAT_BYTES);
            uint32_t *count = dev_alloc(4 * (size_t)p->num_kv_heads);
            int32_t *slots = dev_alloc(4 * (size_t)entries);
            int64_t *list = dev_alloc(8 * (size_t)entries);
            uint8_t *tiles = dev_alloc(PW_VT_TILE_BYTES);
            pw_vt_buffers_t vt;
            memset(&vt, 0, sizeof vt);
            vt.touched = touched;
            vt.count = count;
            vt.slots = slots;
            vt.list = list;
            vt.tiles = tiles;
            vt.capacity = 1;
            vt.f16_tiles = 1;
            vt.stack_mode = PW_STACK_PER_CALL;
            vt.ts_tiles = 1; /* as the full call sets it (stack_mode not NEVER); the marks do not read it */
            vt.stack_stat = (unsigned long long *)(void *)(touched + PW_STACK_STAT_OFFSET(entries));
            g_precision = PW_PRECISION_FP8X2;
            const pw_attention_args_t args = device_args(p, &d);
            /* Garbage in the counts first: the memset must clear them. */
            CUDA_OK(cudaMemset(vt.stack_stat, 0x5a, PW_STACK_STAT_BYTES));
            assert_pw_ok(pw_vt_prepare_parts(p, &args, &vt, PW_VT_MARKS, NULL));
            CUDA_OK(cudaDeviceSynchronize());
            unsigned long long dev[2];
            CUDA_OK(cudaMemcpy(dev, vt.stack_stat, sizeof dev, cudaMemcpyDeviceToHost));
            const pw_requests_t rq = pw_capture_requests(c);
            uint64_t host[2];
            int stacked = -1;
            assert_pw_ok(pw_fp8x2_stack_choice(p, c->topk_ids, &rq, host, &stacked));
            printf("  G = %d, %s: device units %llu blocks %llu, host %llu / %llu (%s)\n", gs[gi],
                   pat == 0 ? "random" : pat == 1 ? "shared blocks" : pat == 2 ? "disjoint blocks" : "classes", dev[0],
                   dev[1], (unsigned long long)host[0], (unsigned long long)host[1], stacked ? "stacked" : "other tile");
            assert_true(dev[0] == host[0] && dev[1] == host[1]);
            assert_true(host[1] > 0);
            CUDA_OK(cudaFree(touched));
            CUDA_OK(cudaFree(count));
            CUDA_OK(cudaFree(slots));
            CUDA_OK(cudaFree(list));
            CUDA_OK(cudaFree(tiles));
            device_free(&d);
            pw_capture_free(c);
        }
}

/* Rows of pages last - B k - class(i), the class of each query random in 0..B-1 (B = 16 at G = 4, 4 at
 * G = 16, 8 at G = 8): queries of one class share every page, so the units and blocks of
 * identity order share few (the rule picks the stacked tile: ratio ~0.63-0.76 in
 * expectation) and greedy with the two tiles' g orders the windows differently. */
static void fill_class_pattern(pw_capture_t *c, pw_rng_t *rng)
{
    const pw_problem_t *p = &c->problem;
    const int b = p->q_heads_per_kv == 8 ? 8 : p->q_heads_per_kv == 4 ? 16 : 4;
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int r = 0; r < p->num_requests; r++)
            for (int32_t i = c->cu_seqlens_q[r]; i < c->cu_seqlens_q[r + 1]; i++) {
                const int64_t pos = c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
                const int64_t last = (pos < c->kv_lens[r] - 1 ? pos : c->kv_lens[r] - 1) / 128;
                const int cls = (int)(pw_rng_next(rng) % (uint32_t)b);
                int32_t *row = c->topk_ids + ((int64_t)h * p->num_tokens + i) * 16;
                for (int k = 0; k < 16; k++) {
                    const int64_t id = last - b * k - cls;
                    row[k] = id >= 0 ? (int32_t)id : -1;
                }
            }
}

/* The kernel a graph node runs ("memset" for a memset node, "" for others). */
static const char *node_name(cudaGraphNode_t n)
{
    enum cudaGraphNodeType t;
    CUDA_OK(cudaGraphNodeGetType(n, &t));
    if (t == cudaGraphNodeTypeMemset) return "memset";
    if (t != cudaGraphNodeTypeKernel) return "";
    struct cudaKernelNodeParams kp;
    CUDA_OK(cudaGraphKernelNodeGetParams(n, &kp));
    const char *name = NULL;
    CUDA_OK(cudaFuncGetName(&name, kp.func));
    return name ? name : "";
}

/* The dependencies of `to` with their edge data (union preparation's in-edges are
 * programmatic, PDL, and a query without edge data is refused as lossy: cudaErrorLossyQuery,
 * the count-only form included, so there is none). The list is asked for with room for
 * kMaxDeps; a full list is an assertion (it may have been cut), not a silent truncation. */
enum { kMaxDeps = 64 };
static size_t node_deps(cudaGraphNode_t to, cudaGraphNode_t (*deps)[kMaxDeps], cudaGraphEdgeData (*edges)[kMaxDeps])
{
    size_t n = kMaxDeps;
    CUDA_OK(cudaGraphNodeGetDependencies(to, *deps, *edges, &n));
    assert_true(n < kMaxDeps);
    return n;
}

/* Whether `to` depends on `from` through the graph's edges (depth-first over dependencies). */
static int graph_reaches(cudaGraphNode_t from, cudaGraphNode_t to, int depth)
{
    if (to == from) return 1;
    if (depth > 64) return 0;
    cudaGraphNode_t deps[kMaxDeps];
    cudaGraphEdgeData edges[kMaxDeps];
    const size_t n = node_deps(to, &deps, &edges);
    for (size_t i = 0; i < n; i++)
        if (graph_reaches(from, deps[i], depth + 1)) return 1;
    return 0;
}

/* The type of the edge from `from` to `to` (a direct dependency), or -1 without one;
 * *port: its from_port. */
static int edge_type(cudaGraphNode_t from, cudaGraphNode_t to, int *port)
{
    cudaGraphNode_t deps[kMaxDeps];
    cudaGraphEdgeData edges[kMaxDeps];
    const size_t n = node_deps(to, &deps, &edges);
    for (size_t i = 0; i < n; i++)
        if (deps[i] == from) {
            *port = (int)edges[i].from_port;
            return (int)edges[i].type;
        }
    return -1;
}

/* The one node whose kernel name holds `part` (asserted unique), or NULL with want 0. */
static cudaGraphNode_t find_node(cudaGraphNode_t *nodes, size_t count, const char *part, int want)
{
    cudaGraphNode_t found = NULL;
    int hits = 0;
    for (size_t i = 0; i < count; i++)
        if (strstr(node_name(nodes[i]), part)) {
            found = nodes[i];
            hits++;
        }
    if (want) assert_int_equal(hits, 1);
    return found;
}

/* The captured call's graph where the regroup objective follows the tile (the default): regroup || mark, union preparation
 * after both, scan -> transpose after the mark beside union preparation, every attention
 * kernel after the transpose and union preparation. */
static void check_by_tile_graph(cudaGraph_t graph)
{
    size_t count = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &count));
    cudaGraphNode_t *nodes = malloc(count * sizeof *nodes);
    assert_non_null(nodes);
    CUDA_OK(cudaGraphGetNodes(graph, nodes, &count));
    cudaGraphNode_t regroup = find_node(nodes, count, "regroup_kernel", 1);
    cudaGraphNode_t mark = find_node(nodes, count, "vt_mark_kernel", 1);
    cudaGraphNode_t unions = find_node(nodes, count, "union_prepare_kernel_alt", 1);
    cudaGraphNode_t scan = find_node(nodes, count, "vt_scan_kernel", 1);
    cudaGraphNode_t transpose = find_node(nodes, count, "vt_transpose_kernel", 1);
    assert_true(graph_reaches(regroup, unions, 0) && graph_reaches(mark, unions, 0));
    /* Union preparation is a programmatic dependent of the regroup (it scans its requests
     * while the greedy loop runs) and of the mark: direct, programmatic edges. */
    int port = -1, mark_port = -1;
    const int type = edge_type(regroup, unions, &port), mark_type = edge_type(mark, unions, &mark_port);
    printf("  graph: edge regroup -> union preparation type %d port %d, mark -> union preparation type %d port %d "
           "(programmatic: type %d, ports %d / %d)\n",
           type, port, mark_type, mark_port, (int)cudaGraphDependencyTypeProgrammatic,
           (int)cudaGraphKernelNodePortProgrammatic, (int)cudaGraphKernelNodePortLaunchCompletion);
    assert_int_equal(type, (int)cudaGraphDependencyTypeProgrammatic);
    assert_true(port == (int)cudaGraphKernelNodePortProgrammatic || port == (int)cudaGraphKernelNodePortLaunchCompletion);
    assert_int_equal(mark_type, (int)cudaGraphDependencyTypeProgrammatic);
    assert_false(graph_reaches(regroup, mark, 0) || graph_reaches(mark, regroup, 0));
    assert_true(graph_reaches(mark, scan, 0) && graph_reaches(scan, transpose, 0));
    assert_false(graph_reaches(unions, transpose, 0) || graph_reaches(transpose, unions, 0));
    int attention = 0;
    for (size_t i = 0; i < count; i++)
        if (strstr(node_name(nodes[i]), "attention")) {
            attention++;
            assert_true(graph_reaches(transpose, nodes[i], 0) && graph_reaches(unions, nodes[i], 0));
        }
    assert_true(attention >= 1);
    printf("  graph: %zu nodes; regroup || mark -> union preparation (alt, programmatic edge from the regroup); mark "
           "-> scan -> transpose beside it; %d attention launches after both: yes\n",
           count, attention);
    free(nodes);
}

/* The regroup objective by tile (the default; PW_PLAN_NO_REGROUP_BY_TILE turns it off), at
 * G = 16 and 8: on the random problem and on inputs built for each tile, the call's
 * permutation (the workspace's) and union metadata equal the reference's with the g of the
 * tile the call runs (G = 16: 2 stacked, 4 lean; G = 8: 4 stacked, 8 dense), the outputs
 * are bitwise those of the plan with the flag (grouping invariance, same tile), and one
 * captured call (the reshaped graph) replayed on every input gives the same permutation and
 * bytes; FP8 calls are those of the plan with the flag. */
static void by_tile_case(int32_t g_heads)
{
    const int32_t gs = g_heads == 8 ? 4 : 2, go = g_heads == 8 ? 8 : 4; /* the stacked tile's g, the other's */
    printf("  G = %d: the stacked tile's g = %d, the other tile's g = %d\n", g_heads, gs, go);
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xb711eull ^ (uint64_t)g_heads);
    pw_capture_t *c = make_problem_g(&rng, g_heads);
    const pw_problem_t *p = &c->problem;
    const pw_requests_t rq = pw_capture_requests(c);
    device_problem_t d;
    device_alloc(p, &d);
    upload(c, &d, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    enum { BY_TILE, PLAIN, BY_TILE_STACKED, BY_TILE_W64, NUM_PLANS };
    const uint32_t flags[NUM_PLANS] = {PW_PLAN_VT_PREPASS, PW_PLAN_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE,
                                       PW_PLAN_VT_PREPASS | PW_PLAN_FP8X2_STACKED, PW_PLAN_VT_PREPASS};
    pw_plan_t *plans[NUM_PLANS];
    for (int k = 0; k < NUM_PLANS; k++)
        plans[k] = make_plan(p, k == BY_TILE_W64 ? PW_REGROUP_GREEDY : PW_REGROUP_GUARDED, k == BY_TILE_W64 ? 64 : 128,
                             PW_KERNEL_UNION4, flags[k], &d);
    {
        pw_plan_info_t info = PW_PLAN_INFO_INIT, info8 = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plans[BY_TILE], PW_PRECISION_FP8X2, &info));
        assert_int_equal(info.regroup_group_size, go);
        assert_int_equal(info.fp8x2_stacked, 1);
        assert_pw_ok(pw_plan_info(plans[BY_TILE_STACKED], PW_PRECISION_FP8X2, &info));
        assert_pw_ok(pw_plan_info(plans[BY_TILE_STACKED], PW_PRECISION_FP8, &info8));
        assert_int_equal(info.regroup_group_size, gs);
        assert_int_equal(info8.regroup_group_size, gs); /* FP8 with the flag: the stacked tile too */
    }
    const int64_t perm_bytes = (int64_t)p->num_kv_heads * p->num_tokens * 4;
    int32_t *perm2 = malloc(perm_bytes), *perm4 = malloc(perm_bytes);
    assert_non_null(perm2);
    assert_non_null(perm4);
    float *ts_dev = device_token_scales(p, &rng); /* (FP8 calls below) */
    enum { NUM_INPUTS = 3 };
    result_t by_tile[NUM_INPUTS], plain, replay;
    for (int in = 0; in < NUM_INPUTS; in++) result_alloc(p, &by_tile[in]);
    result_alloc(p, &plain);
    result_alloc(p, &replay);
    int stacked_of[NUM_INPUTS], orders_differ = 0;
    pw_grouping_t g = PW_GROUPING_INIT;
    g.mode = PW_REGROUP_GUARDED;
    g.window = 128;
    const size_t ids_bytes = (size_t)p->num_kv_heads * p->num_tokens * 16 * 4;
    int32_t *ids_of[NUM_INPUTS]; /* each input's Top-K ids, for the replays */
    for (int in = 0; in < NUM_INPUTS; in++) { /* 0: the random problem, 1: shared pages (other tile), 2: classes (stacked) */
        if (in == 1) fill_block_pattern(c, 1);
        if (in == 2) fill_class_pattern(c, &rng);
        ids_of[in] = malloc(ids_bytes);
        assert_non_null(ids_of[in]);
        memcpy(ids_of[in], c->topk_ids, ids_bytes);
        upload(c, &d, 0);
        uint64_t counts[2];
        assert_pw_ok(pw_fp8x2_stack_choice(p, c->topk_ids, &rq, counts, &stacked_of[in]));
        g.group_size = gs;
        assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g, perm2));
        g.group_size = go;
        assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g, perm4));
        const int differ = memcmp(perm2, perm4, (size_t)perm_bytes) != 0;
        if (stacked_of[in] && differ) orders_differ = 1;
        /* FP8X2: the default call, its workspace, the plan with PW_PLAN_NO_REGROUP_BY_TILE */
        g_precision = PW_PRECISION_FP8X2;
        poison(p, &d, s);
        pw_attention_args_t args = device_args(p, &d);
        assert_pw_ok(pw_sparse_prefill(plans[BY_TILE], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &by_tile[in]);
        check_workspace_views(c, plans[BY_TILE], &d, stacked_of[in] ? perm2 : perm4);
        poison(p, &d, s);
        assert_pw_ok(pw_sparse_prefill(plans[PLAIN], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &plain);
        const int same = same_result(p, &by_tile[in], &plain);
        printf("  input %d (%s tile; g = %d and g = %d orders %s): FP8X2 call == PW_PLAN_NO_REGROUP_BY_TILE's: %s\n", in,
               stacked_of[in] ? "stacked" : "other", gs, go, differ ? "differ" : "equal", same ? "bitwise" : "DIFFERENT");
        assert_true(same);
        /* greedy W64: the same bytes, the permutation of its own g */
        poison(p, &d, s);
        assert_pw_ok(pw_sparse_prefill(plans[BY_TILE_W64], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &replay);
        assert_true(same_result(p, &replay, &plain));
        {
            pw_grouping_t g64 = g;
            g64.mode = PW_REGROUP_GREEDY;
            g64.window = 64;
            g64.group_size = stacked_of[in] ? gs : go;
            int32_t *perm64 = malloc(perm_bytes);
            assert_non_null(perm64);
            assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g64, perm64));
            check_workspace_views(c, plans[BY_TILE_W64], &d, perm64);
            free(perm64);
        }
        /* the stacked tile forced: its g */
        poison(p, &d, s);
        assert_pw_ok(
            pw_sparse_prefill(plans[BY_TILE_STACKED], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &replay);
        check_workspace_views(c, plans[BY_TILE_STACKED], &d, perm2);
        /* FP8: the plan's ordinary path */
        g_precision = PW_PRECISION_FP8;
        args = device_args(p, &d);
        poison(p, &d, s);
        assert_pw_ok(pw_sparse_prefill(plans[BY_TILE], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &replay);
        check_workspace_views(c, plans[BY_TILE], &d, perm4);
        poison(p, &d, s);
        assert_pw_ok(pw_sparse_prefill(plans[PLAIN], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &plain);
        assert_true(same_result(p, &replay, &plain));
        /* FP8 with the flag: the stacked tile (its second term 0), regrouped with its g: the
         * same bytes */
        poison(p, &d, s);
        assert_pw_ok(
            pw_sparse_prefill(plans[BY_TILE_STACKED], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &replay);
        check_workspace_views(c, plans[BY_TILE_STACKED], &d, perm2);
        assert_true(same_result(p, &replay, &plain));
        /* FP8 with per-token scales (34th session): at G = 16 the device picks the tile per
         * call with the G = 16 rule, so the workspace holds the permutation of the tile the
         * host's rule names (stacked_of: g = 2, else 4); at G = 8 the stacked tile always,
         * regrouped with its g = 4. The bytes of the plan without the by-tile objective. */
        {
            const pw_attention_args_t ta = with_token_scales(args, p, ts_dev);
            poison(p, &d, s);
            assert_pw_ok(pw_sparse_prefill(plans[BY_TILE], &ta, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
            fetch(p, &d, s, &replay);
            check_workspace_views(c, plans[BY_TILE], &d, g_heads == 16 && !stacked_of[in] ? perm4 : perm2);
            poison(p, &d, s);
            assert_pw_ok(pw_sparse_prefill(plans[PLAIN], &ta, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
            fetch(p, &d, s, &plain);
            const int same_ts = same_result(p, &replay, &plain);
            printf("  input %d: FP8 with per-token scales: the workspace's permutation is the %s tile's; == "
                   "PW_PLAN_NO_REGROUP_BY_TILE's call: %s\n",
                   in, g_heads == 16 && !stacked_of[in] ? "other" : "stacked", same_ts ? "bitwise" : "DIFFERENT");
            assert_true(same_ts);
        }
    }
    printf("  an input with the stacked tile where g = %d and g = %d order differently: %s\n", gs, go,
           orders_differ ? "yes" : "NO");
    assert_true(orders_differ); /* else the copy of perm_alt was not exercised */
    assert_true(stacked_of[2] && !stacked_of[1]);
    /* One captured FP8X2 call (the reshaped graph), replayed on the inputs in another order. */
    g_precision = PW_PRECISION_FP8X2;
    const pw_attention_args_t args = device_args(p, &d);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const pw_status_t st = pw_sparse_prefill(plans[BY_TILE], &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    assert_pw_ok(st);
    size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    check_by_tile_graph(graph);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    const int order[4] = {2, 0, 1, 2};
    for (int round = 0; round < 4; round++) {
        const int in = order[round];
        memcpy(c->topk_ids, ids_of[in], ids_bytes);
        upload(c, &d, 0);
        g.group_size = stacked_of[in] ? gs : go;
        assert_pw_ok(pw_ref_regroup(p, c->topk_ids, &rq, &g, perm2));
        poison(p, &d, s);
        CUDA_OK(cudaGraphLaunch(exec, s));
        fetch(p, &d, s, &replay);
        check_workspace_views(c, plans[BY_TILE], &d, perm2);
        const int same = same_result(p, &replay, &by_tile[in]);
        printf("  graph (%zu nodes) replay %d on input %d: == its eager call: %s\n", nodes, round, in,
               same ? "bitwise" : "DIFFERENT");
        assert_true(same);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    free(perm2);
    free(perm4);
    CUDA_OK(cudaFree(ts_dev));
    for (int in = 0; in < NUM_INPUTS; in++) {
        result_free(&by_tile[in]);
        free(ids_of[in]);
    }
    result_free(&plain);
    result_free(&replay);
    for (int k = 0; k < NUM_PLANS; k++) pw_plan_destroy(plans[k]);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

static void test_regroup_by_tile(void **state)
{
    (void)state;
    by_tile_case(16);
    by_tile_case(8);
}

static void test_errors(void **state)
{
    (void)state;
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = 16;
    p.max_pages_per_request = 1;
    p.num_cache_pages = 1;
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    size_t bytes = 0;
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    assert_true(bytes > 0);
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    void *ws = dev_alloc(bytes);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes - 1, NULL), PW_ERROR_INSUFFICIENT_WORKSPACE);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    printf("  missing tensors: %s\n", pw_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(ws);
    pw_plan_destroy(plan);
}

/* PW_WINDOW_AUTO on a shape where the time guard picks W64 (3,072 queries, one KV head; two
 * requests of 3,071 and 1 queries): the default plan's call regroups in that window (the
 * workspace's permutation and metadata are the reference's at it) and gives the identity
 * plan's bytes, in both precisions. */
static void test_auto_window_regroups(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xa17011dull);
    pw_capture_t *c = make_problem_shape(&rng, 16, 3072, 2, 1);
    const pw_problem_t *p = &c->problem;
    device_problem_t d;
    device_alloc(p, &d);
    upload(c, &d, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    result_t def, ident;
    result_alloc(p, &def);
    result_alloc(p, &ident);
    int32_t *perm = malloc((size_t)p->num_kv_heads * p->num_tokens * 4);
    assert_non_null(perm);
    const pw_time_guard_inputs_t in = {p->num_tokens,          p->num_requests,   p->num_kv_heads,
                                       p->max_pages_per_request, PW_KERNEL_UNION4, PW_PRECISION_FP8X2, 128};
    const int32_t want = pw_time_guard_window(&in, 16, pw_time_guard_model(), pw_time_guard_wide_model());
    if (want != 64) fail_msg("the time guard picks W%d on this shape: pick one it regroups at W64 (a refit moved it)", want);
    const pw_precision_t precisions[2] = {PW_PRECISION_FP8X2, PW_PRECISION_FP8};
    for (int k = 0; k < 2; k++) {
        g_precision = precisions[k];
        pw_plan_t *plan = make_plan(p, PW_REGROUP_AUTO, PW_WINDOW_AUTO, PW_KERNEL_UNION4, 0, &d);
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, g_precision, &info));
        printf("  auto window, %s: the guard picks W%d; the call %s in W%d (saving %.1f us, cost %.1f us)\n",
               k ? "FP8" : "FP8X2", want, info.regroup == PW_REGROUP_IDENTITY ? "keeps identity order" : "regroups",
               info.window, info.saving_us, info.cost_us);
        if (k == 0 && info.regroup == PW_REGROUP_IDENTITY)
            fail_msg("the time guard keeps identity order on this shape: pick one it regroups (a refit moved it)");
        /* FP8X2 regroups, so the plan groups in the window for both precisions (FP8 may keep
         * identity order inside it: pw_plan_info's regroup says which) */
        assert_int_equal(info.window, want);
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = info.regroup;
        g.window = info.window;
        reference_call_perm(c, plan, &g, 0, info.regroup_group_size, perm);
        poison(p, &d, s);
        const pw_attention_args_t args = device_args(p, &d);
        assert_pw_ok(pw_sparse_prefill(plan, &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &def);
        check_workspace_views(c, plan, &d, perm);
        pw_plan_destroy(plan);
        plan = make_plan(p, PW_REGROUP_IDENTITY, 128, PW_KERNEL_UNION4, 0, &d);
        poison(p, &d, s);
        assert_pw_ok(pw_sparse_prefill(plan, &args, NULL, d.workspace, d.workspace_bytes, (pw_stream_t)s));
        fetch(p, &d, s, &ident);
        pw_plan_destroy(plan);
        const int same = same_result(p, &def, &ident);
        printf("  auto window, %s: default call == identity plan: %s (bad pages %u / %u)\n", k ? "FP8" : "FP8X2",
               same ? "bitwise" : "DIFFERENT", def.bad, ident.bad);
        assert_true(same);
    }
    g_precision = PW_PRECISION_FP8X2;
    free(perm);
    result_free(&def);
    result_free(&ident);
    CUDA_OK(cudaStreamDestroy(s));
    device_free(&d);
    pw_capture_free(c);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device (%s): the full call needs an sm_90 GPU\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
        printf("SKIP: device 0 is %s (sm_%d%d), the kernels need sm_90\n",
               e == cudaSuccess ? prop.name : "unknown", prop.major, prop.minor);
        return 77;
    }
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_call_matches_direct),
        cmocka_unit_test(test_graph_replay_new_inputs),
        cmocka_unit_test(test_kv_len_past_page_table),
        cmocka_unit_test(test_broken_cu_seqlens_prepass),
        cmocka_unit_test(test_vt_capacity),
        cmocka_unit_test(test_vt_graph_crosses_capacity),
        cmocka_unit_test(test_fp8x2_stacked_choice),
        cmocka_unit_test(test_stack_counts_device),
        cmocka_unit_test(test_regroup_by_tile),
        cmocka_unit_test(test_auto_window_regroups),
        cmocka_unit_test(test_errors),
    };
    // --only PATTERN: run the tests whose names match (cmocka's filter, * and ?), e.g. one
    // test under compute-sanitizer racecheck, which takes minutes for the whole file.
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--only") == 0) cmocka_set_test_filter(argv[i + 1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
