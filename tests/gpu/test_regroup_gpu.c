/* GPU tests of online regroup and union preparation (docs/semantics.md §3, §4.1): the device results
 * must equal pw_ref_regroup / pw_ref_union_prepare byte for byte.
 *
 * Every output buffer is poisoned with 0xAB before each run (the reference's host buffers
 * too), so a slot the kernel forgot, or wrote where the reference leaves memory alone
 * (groups past num_groups), shows as a byte difference. Cases: random multi-request,
 * multi-KV-head problems of several kinds (hot sorted rows, unsorted rows with invalid
 * ids, heavy duplicates, 128K and 1M-token contexts with thousands of distinct pages),
 * edge inputs (rows of -1, requests of 0..7 queries, N not a multiple of 8 or W, K < 16,
 * unaligned Top-K, odd union capacity, page size 64), every capture file found, a run
 * inside CUDA graph capture replayed on new inputs, and the argument errors. The regroup
 * kernel has three ways of building its page masks (direct-indexed in 32 KB up to 2048
 * pages at W128 and 4096 at W64; the long direct path in up to 224 KB up to 14,336 / 28,672
 * pages; a hash set beyond): every regroup run also checks the dev variants with the hash
 * path forced, with match_any mask ORs and without the long path (src/cuda/regroup_dev.h),
 * test_long_contexts checks that the long path is the one pw_regroup ran at a 1M-token
 * context, and test_path_bounds puts max_pages_per_request right at and past each bound
 * (and at INT32_MAX). Also: page sizes that are not powers of two, more requests than W * W
 * (three rounds of the request search), and test_broken_device_data: device layouts that
 * break the contract must not fault or write outside perm (run it under compute-sanitizer
 * memcheck to see every read stay in bounds too).
 * Skips (exit 77) without an sm_90 device.
 *
 * Usage: test_regroup_gpu [--seed N] [--captures DIR...] [--wide-only] [--only PATTERN]  (default dirs: captures,
 * .data/workloads). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PW_HAVE_CUDA
#include <cuda_runtime.h>

#include "../../src/cuda/regroup_dev.h" /* internal: the kernel's alternative paths */
#include "../../src/pw_internal.h"       /* internal: pw_regroup_dual (the full call's objective by tile) */
#endif

#include "pageweaver_capture.h"
#include "testutil.h"

#ifdef PW_HAVE_CUDA

#define CUDA_OK(x)                                                                          \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #x, cudaGetErrorString(e_));              \
    } while (0)

#define POISON 0xAB

static uint64_t g_seed;
static cudaStream_t g_stream;
static int g_num_dirs;
static const char *g_dirs[8];

/* One problem on the host: shapes, request layout, Top-K ids [Hkv, N, K]. */
typedef struct host_case {
    pw_problem_t problem;
    int32_t *cu, *prefix, *kv, *ids;
    char name[128];
} host_case_t;

/* The same on the device; ids_base is the allocation (ids may be offset to misalign). */
typedef struct dev_case {
    int32_t *ids, *ids_base, *cu, *prefix, *kv;
    pw_requests_t requests; /* device pointers */
} dev_case_t;

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    return d;
}

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = dev_alloc(bytes);
    if (bytes) CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

static size_t ids_bytes(const pw_problem_t *p)
{
    return (size_t)p->num_kv_heads * (size_t)p->num_tokens * (size_t)p->topk * 4u;
}

/* misalign: place the Top-K ids 4 bytes past a 16-byte boundary (scalar-load path). */
static void upload(const host_case_t *hc, dev_case_t *dc, int misalign)
{
    const pw_problem_t *p = &hc->problem;
    const size_t r = (size_t)p->num_requests;
    dc->ids_base = dev_alloc(ids_bytes(p) + 16);
    dc->ids = dc->ids_base + (misalign ? 1 : 0);
    if (ids_bytes(p))
        CUDA_OK(cudaMemcpy(dc->ids, hc->ids, ids_bytes(p), cudaMemcpyHostToDevice));
    dc->cu = dev_copy(hc->cu, (r + 1) * 4);
    dc->prefix = dev_copy(hc->prefix, r * 4);
    dc->kv = dev_copy(hc->kv, r * 4);
    dc->requests.cu_seqlens_q = dc->cu;
    dc->requests.prefix_lens = dc->prefix;
    dc->requests.kv_lens = dc->kv;
    dc->requests.page_table = NULL;
    dc->requests.page_table_stride = 0;
}

static void release(dev_case_t *dc)
{
    CUDA_OK(cudaFree(dc->ids_base));
    CUDA_OK(cudaFree(dc->cu));
    CUDA_OK(cudaFree(dc->prefix));
    CUDA_OK(cudaFree(dc->kv));
}

static void free_case(host_case_t *hc)
{
    free(hc->cu);
    free(hc->prefix);
    free(hc->kv);
    free(hc->ids);
}

static pw_requests_t host_requests(const host_case_t *hc)
{
    pw_requests_t rq = {hc->cu, hc->prefix, hc->kv, NULL, 0};
    return rq;
}

/* Byte comparison with the first difference named. */
static void assert_same_bytes(const void *want, const void *got, size_t bytes, const char *what,
                              const char *name)
{
    const unsigned char *a = want, *b = got;
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != b[i])
            fail_msg("%s: %s differs at byte %zu of %zu: reference 0x%02x, GPU 0x%02x", name,
                     what, i, bytes, a[i], b[i]);
}

/* ---- union preparation: GPU vs reference on the given permutation -------------------- */

typedef struct meta_buffers {
    pw_union_meta_t meta;
    size_t bytes_groups, bytes_pages, bytes_masks, bytes_num;
} meta_buffers_t;

static void meta_alloc(const pw_problem_t *p, int64_t max_groups, int32_t capacity, int device,
                       meta_buffers_t *m)
{
    const size_t hkv = (size_t)p->num_kv_heads, mg = (size_t)max_groups, cap = (size_t)capacity;
    m->meta.max_groups = max_groups;
    m->meta.union_capacity = capacity;
    m->bytes_num = hkv * 4;
    m->bytes_groups = hkv * mg * sizeof(pw_group_desc_t);
    m->bytes_pages = hkv * mg * cap * 4;
    m->bytes_masks = hkv * mg * cap;
    if (device) {
        m->meta.num_groups = dev_alloc(m->bytes_num);
        m->meta.groups = dev_alloc(m->bytes_groups);
        m->meta.union_pages = dev_alloc(m->bytes_pages);
        m->meta.member_masks = dev_alloc(m->bytes_masks);
        CUDA_OK(cudaMemsetAsync(m->meta.num_groups, POISON, m->bytes_num, g_stream));
        CUDA_OK(cudaMemsetAsync(m->meta.groups, POISON, m->bytes_groups, g_stream));
        CUDA_OK(cudaMemsetAsync(m->meta.union_pages, POISON, m->bytes_pages, g_stream));
        CUDA_OK(cudaMemsetAsync(m->meta.member_masks, POISON, m->bytes_masks, g_stream));
    } else {
        m->meta.num_groups = malloc(m->bytes_num + 1);
        m->meta.groups = malloc(m->bytes_groups + 1);
        m->meta.union_pages = malloc(m->bytes_pages + 1);
        m->meta.member_masks = malloc(m->bytes_masks + 1);
        assert_non_null(m->meta.num_groups);
        assert_non_null(m->meta.groups);
        assert_non_null(m->meta.union_pages);
        assert_non_null(m->meta.member_masks);
        memset(m->meta.num_groups, POISON, m->bytes_num);
        memset(m->meta.groups, POISON, m->bytes_groups);
        memset(m->meta.union_pages, POISON, m->bytes_pages);
        memset(m->meta.member_masks, POISON, m->bytes_masks);
    }
}

static void meta_free(meta_buffers_t *m, int device)
{
    if (device) {
        CUDA_OK(cudaFree(m->meta.num_groups));
        CUDA_OK(cudaFree(m->meta.groups));
        CUDA_OK(cudaFree(m->meta.union_pages));
        CUDA_OK(cudaFree(m->meta.member_masks));
    } else {
        free(m->meta.num_groups);
        free(m->meta.groups);
        free(m->meta.union_pages);
        free(m->meta.member_masks);
    }
}

/* Copies device meta into poisoned-layout host buffers of the same sizes. */
static void meta_download(const meta_buffers_t *d, meta_buffers_t *h)
{
    CUDA_OK(cudaMemcpyAsync(h->meta.num_groups, d->meta.num_groups, d->bytes_num,
                            cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaMemcpyAsync(h->meta.groups, d->meta.groups, d->bytes_groups,
                            cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaMemcpyAsync(h->meta.union_pages, d->meta.union_pages, d->bytes_pages,
                            cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaMemcpyAsync(h->meta.member_masks, d->meta.member_masks, d->bytes_masks,
                            cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
}

static void assert_same_meta(const meta_buffers_t *want, const meta_buffers_t *got,
                             const char *name)
{
    assert_same_bytes(want->meta.num_groups, got->meta.num_groups, want->bytes_num,
                      "num_groups", name);
    assert_same_bytes(want->meta.groups, got->meta.groups, want->bytes_groups, "groups", name);
    assert_same_bytes(want->meta.union_pages, got->meta.union_pages, want->bytes_pages,
                      "union_pages", name);
    assert_same_bytes(want->meta.member_masks, got->meta.member_masks, want->bytes_masks,
                      "member_masks", name);
}

/* Union preparation of `perm` (host copy perm_host, device copy perm_dev) with grouping
 * (window, g): GPU == reference over the whole poisoned buffers. cap_extra widens
 * union_capacity past g*K. stats_out: union metrics of the GPU meta (may be NULL). */
static void check_union(const host_case_t *hc, const dev_case_t *dc, const pw_grouping_t *grouping,
                        const int32_t *perm_host, const int32_t *perm_dev, int32_t cap_extra,
                        pw_union_stats_t *stats_out)
{
    const pw_problem_t *p = &hc->problem;
    const int64_t max_groups = pw_max_groups(p, grouping);
    const int32_t cap = grouping->group_size * p->topk + cap_extra;
    char name[256];
    snprintf(name, sizeof name, "%s: union prepare W=%d g=%d cap=%d", hc->name, grouping->window,
             grouping->group_size, cap);
    meta_buffers_t ref, dev, got;
    meta_alloc(p, max_groups, cap, 0, &ref);
    meta_alloc(p, max_groups, cap, 1, &dev);
    meta_alloc(p, max_groups, cap, 0, &got);
    const pw_requests_t rq = host_requests(hc);
    assert_pw_ok(pw_ref_union_prepare(p, hc->ids, &rq, grouping, perm_host, &ref.meta));
    assert_pw_ok(pw_union_prepare(p, dc->ids, &dc->requests, grouping, perm_dev, &dev.meta,
                                  (pw_stream_t)g_stream));
    meta_download(&dev, &got);
    assert_same_meta(&ref, &got, name);
    if (stats_out) assert_pw_ok(pw_union_stats(p, &got.meta, stats_out, NULL));
    meta_free(&ref, 0);
    meta_free(&dev, 1);
    meta_free(&got, 0);
}

/* ---- regroup: GPU vs reference --------------------------------------------------------- */

/* Runs pw_regroup into a poisoned device perm and compares with pw_ref_regroup; leaves the
 * reference perm in perm_host and the GPU one in *perm_dev_out (caller frees). */
static void check_regroup(const host_case_t *hc, const dev_case_t *dc,
                          const pw_grouping_t *grouping, int32_t *perm_host,
                          int32_t **perm_dev_out)
{
    const pw_problem_t *p = &hc->problem;
    const size_t bytes = (size_t)p->num_kv_heads * (size_t)p->num_tokens * 4u;
    char name[256];
    snprintf(name, sizeof name, "%s: regroup mode %d W=%d g=%d", hc->name, (int)grouping->mode,
             grouping->window, grouping->group_size);
    const pw_requests_t rq = host_requests(hc);
    assert_pw_ok(pw_ref_regroup(p, hc->ids, &rq, grouping, perm_host));
    int32_t *perm_dev = dev_alloc(bytes);
    CUDA_OK(cudaMemsetAsync(perm_dev, POISON, bytes, g_stream));
    size_t ws_bytes = 0;
    assert_pw_ok(pw_regroup_workspace_size(p, grouping, &ws_bytes));
    void *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    assert_pw_ok(pw_regroup(p, dc->ids, &dc->requests, grouping, perm_dev, ws, ws_bytes,
                            (pw_stream_t)g_stream));
    int32_t *got = malloc(bytes + 4);
    assert_non_null(got);
    CUDA_OK(cudaMemcpyAsync(got, perm_dev, bytes, cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    assert_same_bytes(perm_host, got, bytes, "perm", name);
    /* The same through the kernel's other mask paths: hash set forced (dev variant 3),
     * match_any ORs (4), the wide-Top-K kernel (6, which takes any K <= 64), and the
     * adaptive path where pw_regroup runs the long direct one (8). */
    const int variants[4] = {3, 4, 6, 8};
    int32_t *perm_var = dev_alloc(bytes);
    for (int v = 0; v < 4; v++) {
        char what[64];
        snprintf(what, sizeof what, "perm (dev variant %d)", variants[v]);
        CUDA_OK(cudaMemsetAsync(perm_var, POISON, bytes, g_stream));
        assert_pw_ok(pw_regroup_dev_variant(variants[v], p, dc->ids, &dc->requests, grouping,
                                            perm_var, (pw_stream_t)g_stream));
        CUDA_OK(cudaMemcpyAsync(got, perm_var, bytes, cudaMemcpyDeviceToHost, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream));
        assert_same_bytes(perm_host, got, bytes, what, name);
    }
    CUDA_OK(cudaFree(perm_var));
    free(got);
    if (ws) CUDA_OK(cudaFree(ws));
    *perm_dev_out = perm_dev;
}

/* pw_regroup_dual (the full call's regroup by tile: one launch, two group sizes): each of the
 * two permutations equal to pw_ref_regroup's with its g, in poisoned buffers. */
static void check_dual(const host_case_t *hc, const dev_case_t *dc, pw_regroup_mode_t mode, int32_t window, int32_t g,
                       int32_t alt)
{
    const pw_problem_t *p = &hc->problem;
    const size_t bytes = (size_t)p->num_kv_heads * (size_t)p->num_tokens * 4u;
    char name[256];
    snprintf(name, sizeof name, "%s: dual regroup mode %d W=%d g=%d / %d", hc->name, (int)mode, window, g, alt);
    const pw_requests_t rq = host_requests(hc);
    pw_grouping_t grouping = PW_GROUPING_INIT;
    grouping.mode = mode;
    grouping.window = window;
    int32_t *want = malloc(bytes + 4), *got = malloc(bytes + 4);
    assert_non_null(want);
    assert_non_null(got);
    int32_t *perm_dev = dev_alloc(bytes + 4), *alt_dev = dev_alloc(bytes + 4);
    CUDA_OK(cudaMemsetAsync(perm_dev, POISON, bytes, g_stream));
    CUDA_OK(cudaMemsetAsync(alt_dev, POISON, bytes, g_stream));
    grouping.group_size = g;
    assert_pw_ok(pw_regroup_dual(p, dc->ids, &dc->requests, &grouping, alt, perm_dev, alt_dev, (pw_stream_t)g_stream));
    for (int k = 0; k < 2; k++) {
        grouping.group_size = k ? alt : g;
        assert_pw_ok(pw_ref_regroup(p, hc->ids, &rq, &grouping, want));
        CUDA_OK(cudaMemcpyAsync(got, k ? alt_dev : perm_dev, bytes, cudaMemcpyDeviceToHost, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream));
        assert_same_bytes(want, got, bytes, k ? "perm_alt" : "perm", name);
    }
    CUDA_OK(cudaFree(perm_dev));
    CUDA_OK(cudaFree(alt_dev));
    free(want);
    free(got);
}

/* Fused regroup + union preparation (pw_regroup_union_prepare_dev_variant 0: one launch;
 * 1: the same with the hash path forced; 2: the two launches, pw_sparse_prefill's; 3: one
 * launch whose groups are emitted while the greedy loop runs, 2026-12-03): perm
 * and every metadata byte equal to pw_ref_regroup + pw_ref_union_prepare, in poisoned
 * buffers. cap_extra widens union_capacity past g*K (scalar row stores when odd). */
static void check_fused(const host_case_t *hc, const dev_case_t *dc, const pw_grouping_t *grouping,
                        int32_t cap_extra)
{
    const pw_problem_t *p = &hc->problem;
    const size_t bytes = (size_t)p->num_kv_heads * (size_t)p->num_tokens * 4u;
    const int64_t max_groups = pw_max_groups(p, grouping);
    const int32_t cap = grouping->group_size * p->topk + cap_extra;
    const pw_requests_t rq = host_requests(hc);
    int32_t *want = malloc(bytes + 4), *got = malloc(bytes + 4);
    assert_non_null(want);
    assert_non_null(got);
    assert_pw_ok(pw_ref_regroup(p, hc->ids, &rq, grouping, want));
    meta_buffers_t ref;
    meta_alloc(p, max_groups, cap, 0, &ref);
    assert_pw_ok(pw_ref_union_prepare(p, hc->ids, &rq, grouping, want, &ref.meta));
    int32_t *perm_dev = dev_alloc(bytes);
    for (int variant = 0; variant <= 3; variant++) {
        char name[256];
        snprintf(name, sizeof name, "%s: fused variant %d mode %d W=%d g=%d cap=%d", hc->name, variant,
                 (int)grouping->mode, grouping->window, grouping->group_size, cap);
        meta_buffers_t dev, host;
        meta_alloc(p, max_groups, cap, 1, &dev);
        meta_alloc(p, max_groups, cap, 0, &host);
        CUDA_OK(cudaMemsetAsync(perm_dev, POISON, bytes, g_stream));
        assert_pw_ok(pw_regroup_union_prepare_dev_variant(variant, p, dc->ids, &dc->requests, grouping,
                                                          perm_dev, &dev.meta, (pw_stream_t)g_stream));
        CUDA_OK(cudaMemcpyAsync(got, perm_dev, bytes, cudaMemcpyDeviceToHost, g_stream));
        meta_download(&dev, &host);
        assert_same_bytes(want, got, bytes, "perm", name);
        assert_same_meta(&ref, &host, name);
        meta_free(&dev, 1);
        meta_free(&host, 0);
    }
    CUDA_OK(cudaFree(perm_dev));
    meta_free(&ref, 0);
    free(want);
    free(got);
}

/* Identity and a random bijection inside each request (host); returns device copies. */
static void other_perms(const host_case_t *hc, pw_rng_t *rng, int32_t *identity, int32_t *shuffled)
{
    const pw_problem_t *p = &hc->problem;
    for (int32_t h = 0; h < p->num_kv_heads; h++) {
        int32_t *id = identity + (int64_t)h * p->num_tokens;
        int32_t *sh = shuffled + (int64_t)h * p->num_tokens;
        for (int32_t n = 0; n < p->num_tokens; n++) id[n] = sh[n] = n;
        for (int32_t r = 0; r < p->num_requests; r++)
            for (int32_t s = hc->cu[r + 1] - 1; s > hc->cu[r]; s--) {
                const int32_t t = (int32_t)pw_rng_range(rng, hc->cu[r], s);
                const int32_t x = sh[s];
                sh[s] = sh[t];
                sh[t] = x;
            }
    }
}

/* Everything for one problem: regroup (greedy, guarded; W 64, 128; g 8 plus other sizes),
 * union preparation of each GPU perm, of identity and of a random perm. */
static void check_case(const host_case_t *hc, int misalign, int thorough)
{
    const pw_problem_t *p = &hc->problem;
    const size_t n_perm = (size_t)p->num_kv_heads * (size_t)p->num_tokens;
    dev_case_t dc;
    upload(hc, &dc, misalign);
    int32_t *perm = malloc(n_perm * 4 + 4), *identity = malloc(n_perm * 4 + 4),
            *shuffled = malloc(n_perm * 4 + 4);
    assert_non_null(perm);
    assert_non_null(identity);
    assert_non_null(shuffled);
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ (uint64_t)p->num_tokens ^ ((uint64_t)p->num_requests << 32));
    struct { pw_regroup_mode_t mode; int32_t window, g; } runs[] = {
        {PW_REGROUP_GREEDY, 128, 8}, {PW_REGROUP_GUARDED, 128, 8}, {PW_REGROUP_GREEDY, 64, 8},
        {PW_REGROUP_GUARDED, 64, 8}, {PW_REGROUP_IDENTITY, 128, 8},
        {PW_REGROUP_GUARDED, 128, 4}, /* Union4's objective in the default plan */
        {PW_REGROUP_GREEDY, 128, 3},
        {PW_REGROUP_GUARDED, 64, 4}, {PW_REGROUP_GREEDY, 64, 5},     {PW_REGROUP_GUARDED, 128, 2},
        {PW_REGROUP_GREEDY, 128, 1},
    };
    const int num_runs = thorough ? (int)(sizeof runs / sizeof runs[0]) : 6;
    for (int i = 0; i < num_runs; i++) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = runs[i].mode;
        g.window = runs[i].window;
        g.group_size = runs[i].g;
        int32_t *perm_dev = NULL;
        check_regroup(hc, &dc, &g, perm, &perm_dev);
        check_union(hc, &dc, &g, perm, perm_dev, i == 1 ? 3 : 0, NULL);
        check_fused(hc, &dc, &g, i == 1 ? 3 : 0);
        CUDA_OK(cudaFree(perm_dev));
    }
    /* The dual regroup: the plan's pair (g = 4, and 2 for the stacked tile) in both modes
     * and windows; thorough: other pairs. */
    if (p->topk <= 16) {
        check_dual(hc, &dc, PW_REGROUP_GUARDED, 128, 4, 2);
        check_dual(hc, &dc, PW_REGROUP_GREEDY, 64, 4, 2);
        if (thorough) {
            check_dual(hc, &dc, PW_REGROUP_GREEDY, 128, 4, 2);
            check_dual(hc, &dc, PW_REGROUP_GUARDED, 64, 4, 2);
            check_dual(hc, &dc, PW_REGROUP_GUARDED, 128, 8, 1);
            check_dual(hc, &dc, PW_REGROUP_GREEDY, 128, 2, 8);
        }
    }
    /* Union preparation of other permutations and windows (any W >= 0, any g). */
    other_perms(hc, &rng, identity, shuffled);
    int32_t *identity_dev = dev_copy(identity, n_perm * 4);
    int32_t *shuffled_dev = dev_copy(shuffled, n_perm * 4);
    const int32_t windows[] = {128, 0, 64, 5};
    for (int w = 0; w < (thorough ? 4 : 2); w++) {
        pw_grouping_t g = PW_GROUPING_INIT;
        g.window = windows[w];
        g.group_size = w == 3 ? 3 : 8;
        check_union(hc, &dc, &g, identity, identity_dev, 0, NULL);
        check_union(hc, &dc, &g, shuffled, shuffled_dev, w == 2 ? 1 : 0, NULL);
    }
    CUDA_OK(cudaFree(identity_dev));
    CUDA_OK(cudaFree(shuffled_dev));
    free(perm);
    free(identity);
    free(shuffled);
    release(&dc);
}

/* Top-K wider than 16 (K 17..64: the wide-Top-K regroup kernel, union preparation any K
 * up to 64): union preparation of host permutations (identity, a random bijection inside
 * each request, the reference's guarded W128 g = 4 regroup: the default plan's Union4
 * objective) on the GPU equals the reference byte for byte; windows 128 / 0 / 64 / 5 and
 * g = 8 / 3; the wide-Top-K regroup kernels (dev variants 6 and 7, and pw_regroup, which
 * runs 7, split with 6 past the direct bound) equal pw_ref_regroup; pw_regroup runs
 * IDENTITY. */
static void check_wide_case(const host_case_t *hc, int misalign, int thorough)
{
    const pw_problem_t *p = &hc->problem;
    const size_t n_perm = (size_t)p->num_kv_heads * (size_t)p->num_tokens;
    dev_case_t dc;
    upload(hc, &dc, misalign);
    int32_t *perms[3];
    for (int i = 0; i < 3; i++) {
        perms[i] = malloc(n_perm * 4 + 4);
        assert_non_null(perms[i]);
    }
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ (uint64_t)p->num_tokens ^ ((uint64_t)p->topk << 40));
    other_perms(hc, &rng, perms[0], perms[1]);
    const pw_requests_t rq = host_requests(hc);
    pw_grouping_t greedy = PW_GROUPING_INIT;
    greedy.group_size = 4;
    assert_pw_ok(pw_ref_regroup(p, hc->ids, &rq, &greedy, perms[2]));
    for (int i = 0; i < 3; i++) {
        int32_t *perm_dev = dev_copy(perms[i], n_perm * 4);
        const int32_t windows[4] = {128, 0, 64, 5};
        for (int w = 0; w < (thorough ? 4 : 1); w++) {
            pw_grouping_t g = PW_GROUPING_INIT;
            g.window = windows[w];
            g.group_size = w == 3 ? 3 : 8;
            check_union(hc, &dc, &g, perms[i], perm_dev, w == 2 ? 3 : 0, NULL);
        }
        CUDA_OK(cudaFree(perm_dev));
    }
    /* The wide-Top-K regroup kernels (dev variant 6, the hash set; dev variant 7, v3's
     * layout, which pw_regroup runs for K > 16) == the reference, byte for byte, in
     * poisoned buffers, through both entry points. */
    {
        const struct { pw_regroup_mode_t mode; int32_t window, g; } runs[7] = {
            {PW_REGROUP_GREEDY, 128, 8}, {PW_REGROUP_GUARDED, 128, 4}, {PW_REGROUP_GUARDED, 64, 2},
            {PW_REGROUP_GREEDY, 64, 3},  {PW_REGROUP_GUARDED, 64, 8},  {PW_REGROUP_GUARDED, 128, 1},
            {PW_REGROUP_GREEDY, 64, 5}};
        int32_t *want = malloc(n_perm * 4 + 4), *got = malloc(n_perm * 4 + 4);
        int32_t *perm_var = dev_alloc(n_perm * 4 + 4);
        assert_non_null(want);
        assert_non_null(got);
        for (int r = 0; r < (thorough ? 7 : 3); r++) {
            pw_grouping_t gw = PW_GROUPING_INIT;
            gw.mode = runs[r].mode;
            gw.window = runs[r].window;
            gw.group_size = runs[r].g;
            assert_pw_ok(pw_ref_regroup(p, hc->ids, &rq, &gw, want));
            for (int entry = 0; entry < 3; entry++) {
                CUDA_OK(cudaMemsetAsync(perm_var, POISON, n_perm * 4, g_stream));
                if (entry < 2)
                    assert_pw_ok(pw_regroup_dev_variant(6 + entry, p, dc.ids, &dc.requests, &gw, perm_var,
                                                        (pw_stream_t)g_stream));
                else
                    assert_pw_ok(pw_regroup(p, dc.ids, &dc.requests, &gw, perm_var, NULL, 0, (pw_stream_t)g_stream));
                CUDA_OK(cudaMemcpyAsync(got, perm_var, n_perm * 4, cudaMemcpyDeviceToHost, g_stream));
                CUDA_OK(cudaStreamSynchronize(g_stream));
                char what[96];
                snprintf(what, sizeof what, "perm (%s, mode %d W=%d g=%d)",
                         entry == 2 ? "pw_regroup" : entry ? "dev variant 7" : "dev variant 6", (int)gw.mode, gw.window,
                         gw.group_size);
                assert_same_bytes(want, got, n_perm * 4, what, hc->name);
            }
        }
        CUDA_OK(cudaFree(perm_var));
        free(want);
        free(got);
    }
    /* The GPU regroup in identity order. */
    int32_t *perm_dev = dev_alloc(n_perm * 4 + 4);
    pw_grouping_t g = PW_GROUPING_INIT;
    g.mode = PW_REGROUP_IDENTITY;
    assert_pw_ok(pw_regroup(p, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, (pw_stream_t)g_stream));
    int32_t *got = malloc(n_perm * 4 + 4);
    assert_non_null(got);
    CUDA_OK(cudaMemcpyAsync(got, perm_dev, n_perm * 4, cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    assert_same_bytes(perms[0], got, n_perm * 4, "identity perm", hc->name);
    free(got);
    CUDA_OK(cudaFree(perm_dev));
    for (int i = 0; i < 3; i++) free(perms[i]);
    release(&dc);
}

/* ---- problem generators ------------------------------------------------------------------ */

enum case_kind {
    KIND_HOT = 0,      /* sorted rows: sink, own page, recent pages, a drifting hot set */
    KIND_RANDOM = 1,   /* unsorted, ids from -3 to past the visible range */
    KIND_REPEATS = 2,  /* ids from a tiny range: many repeats inside rows and across */
    KIND_DISTINCT = 3, /* uniform over every visible page (long contexts: ~all distinct) */
    KIND_EMPTY = 4     /* every id -1 */
};

/* qlens[r] queries per request, prefix[r] cached tokens; kv = prefix + qlen + slack. */
static void make_case(host_case_t *hc, pw_rng_t *rng, int32_t num_requests, const int32_t *qlens,
                      const int32_t *prefixes, int32_t hkv, int32_t topk, int32_t page_size,
                      enum case_kind kind, const char *name)
{
    memset(hc, 0, sizeof *hc);
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_requests = num_requests;
    p.num_kv_heads = hkv;
    p.topk = topk;
    p.page_size = page_size;
    hc->cu = malloc((size_t)(num_requests + 1) * 4);
    hc->prefix = malloc((size_t)num_requests * 4);
    hc->kv = malloc((size_t)num_requests * 4);
    assert_non_null(hc->cu);
    assert_non_null(hc->prefix);
    assert_non_null(hc->kv);
    hc->cu[0] = 0;
    int64_t max_kv = 1;
    for (int32_t r = 0; r < num_requests; r++) {
        hc->cu[r + 1] = hc->cu[r] + qlens[r];
        hc->prefix[r] = prefixes[r];
        hc->kv[r] = prefixes[r] + qlens[r] + (int32_t)pw_rng_range(rng, 0, 200);
        if (hc->kv[r] > max_kv) max_kv = hc->kv[r];
    }
    p.num_tokens = hc->cu[num_requests];
    p.max_pages_per_request = (int32_t)((max_kv + page_size - 1) / page_size);
    hc->problem = p;
    hc->ids = malloc(ids_bytes(&p) + 4);
    assert_non_null(hc->ids);
    for (int32_t h = 0; h < hkv; h++) {
        for (int32_t r = 0; r < num_requests; r++) {
            int32_t hot[24];
            for (int i = 0; i < 24; i++) hot[i] = 0;
            for (int32_t n = hc->cu[r]; n < hc->cu[r + 1]; n++) {
                const int64_t c = (int64_t)hc->prefix[r] + (n - hc->cu[r]);
                const int32_t cp = (int32_t)(c / page_size);
                int32_t *row = hc->ids + ((int64_t)h * p.num_tokens + n) * topk;
                if ((n - hc->cu[r]) % 256 == 0)
                    for (int i = 0; i < 24; i++)
                        if (i < 3 || hot[i] == 0) hot[i] = (int32_t)pw_rng_range(rng, 0, cp);
                for (int32_t k = 0; k < topk; k++) {
                    int32_t v = -1;
                    const int64_t u = pw_rng_range(rng, 0, 99);
                    switch (kind) {
                    case KIND_HOT:
                        v = k == 0 ? 0 : k == topk - 1 ? cp
                          : k < 5 ? cp - (int32_t)pw_rng_range(rng, 1, 6)
                          : u < 70 ? hot[pw_rng_range(rng, 0, 23)]
                                   : (int32_t)pw_rng_range(rng, 0, cp);
                        if (v < 0) v = -1;
                        break;
                    case KIND_RANDOM: v = (int32_t)pw_rng_range(rng, -3, (int64_t)cp + 4); break;
                    case KIND_REPEATS:
                        v = u < 10 ? -1 : (int32_t)pw_rng_range(rng, 0, cp < 12 ? cp : 12);
                        break;
                    case KIND_DISTINCT: v = (int32_t)pw_rng_range(rng, 0, cp); break;
                    case KIND_EMPTY: v = -1; break;
                    }
                    row[k] = v;
                }
                if (kind == KIND_HOT) /* sorted ascending, like the selector's rows */
                    for (int32_t a = 1; a < topk; a++)
                        for (int32_t b2 = a; b2 > 0 && row[b2 - 1] > row[b2]; b2--) {
                            const int32_t x = row[b2];
                            row[b2] = row[b2 - 1];
                            row[b2 - 1] = x;
                        }
                if (kind != KIND_EMPTY && pw_rng_range(rng, 0, 40) == 0)
                    for (int32_t k = 0; k < topk; k++) row[k] = -1; /* an all -1 row */
            }
        }
    }
    snprintf(hc->name, sizeof hc->name, "%s (N=%d R=%d Hkv=%d K=%d P=%d)", name, p.num_tokens,
             num_requests, hkv, topk, page_size);
}

/* Top-K 17..64: union preparation on the GPU == the reference (check_wide_case) on every
 * kind of row (the last case: every id -1), several requests, contexts up to ~70K tokens; the widths between the
 * device's (24, 40) run the scalar-load path, 32 and 64 the vector one (and misaligned). */
static void test_wide_topk(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x61deull);
    const int32_t ks[7] = {32, 64, 24, 40, 17, 64, 33};
    for (int iter = 0; iter < 7; iter++) {
        const enum case_kind kind = iter == 6 ? KIND_EMPTY : (enum case_kind)(iter % 4);
        const int32_t num_requests = (int32_t)pw_rng_range(&rng, 1, 4);
        int32_t qlens[4], prefixes[4];
        for (int32_t r = 0; r < num_requests; r++) {
            qlens[r] = r == 1 ? 1 : (int32_t)pw_rng_range(&rng, 10, 700);
            prefixes[r] = (int32_t)pw_rng_range(&rng, 0, 70000);
        }
        host_case_t hc;
        make_case(&hc, &rng, num_requests, qlens, prefixes, (int32_t)pw_rng_range(&rng, 1, 3), ks[iter], 128, kind,
                  "wide Top-K");
        printf("%s kind %d\n", hc.name, (int)kind);
        check_wide_case(&hc, iter == 5, iter < 2);
        printf("  union preparation == reference (identity, shuffled, reference regroup)\n");
        free_case(&hc);
    }
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_random_problems(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    for (int iter = 0; iter < 12; iter++) {
        const enum case_kind kind = (enum case_kind)(iter % 4);
        const int32_t num_requests = (int32_t)pw_rng_range(&rng, 1, 5);
        int32_t qlens[5], prefixes[5];
        for (int32_t r = 0; r < num_requests; r++) {
            qlens[r] = pw_rng_range(&rng, 0, 4) == 0 ? (int32_t)pw_rng_range(&rng, 0, 9)
                                                     : (int32_t)pw_rng_range(&rng, 10, 900);
            prefixes[r] = (int32_t)pw_rng_range(&rng, 0, 70000);
        }
        const int32_t hkv = (int32_t)pw_rng_range(&rng, 1, 4);
        host_case_t hc;
        make_case(&hc, &rng, num_requests, qlens, prefixes, hkv, 16, 128, kind, "random");
        printf("%s kind %d\n", hc.name, (int)kind);
        check_case(&hc, 0, iter < 4);
        free_case(&hc);
    }
}

/* Whether pw_regroup runs the long direct path for hc at window W (GREEDY, g 4). */
static int runs_long_path(const host_case_t *hc, int32_t window)
{
    dev_case_t dc;
    upload(hc, &dc, 0);
    pw_grouping_t g = PW_GROUPING_INIT;
    g.mode = PW_REGROUP_GREEDY;
    g.window = window;
    g.group_size = 4;
    int long_path = -1;
    assert_pw_ok(pw_regroup_dev_long_path(&hc->problem, dc.ids, &dc.requests, &g, &long_path));
    release(&dc);
    return long_path;
}

/* Long contexts: 128K and 1M tokens (page ids up to ~8200), no 64K cliff. Past 2048
 * pages (W128) / 4096 (W64), pw_regroup runs the long direct path (on an H200: 227 KB of
 * shared memory per CTA), which the 1M cases must exercise. */
static void test_long_contexts(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 1);
    const int32_t q128[2] = {700, 333}, p128[2] = {130000, 128 * 1024 - 1000};
    const int32_t q1m[3] = {600, 129, 64}, p1m[3] = {1048576, 1000000, 1040000};
    const enum case_kind kinds[3] = {KIND_DISTINCT, KIND_HOT, KIND_RANDOM};
    for (int k = 0; k < 3; k++) {
        host_case_t hc;
        make_case(&hc, &rng, 2, q128, p128, 2, 16, 128, kinds[k], "128K context");
        printf("%s\n", hc.name);
        check_case(&hc, 0, k == 0);
        free_case(&hc);
        make_case(&hc, &rng, 3, q1m, p1m, 2, 16, 128, kinds[k], "1M context");
        printf("%s (V = %d)\n", hc.name, hc.problem.max_pages_per_request);
        assert_true(hc.problem.max_pages_per_request > 4096);
        assert_int_equal(runs_long_path(&hc, 128), 1);
        assert_int_equal(runs_long_path(&hc, 64), 1);
        check_case(&hc, 0, k == 0);
        free_case(&hc);
    }
}

static void test_edges(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 2);
    host_case_t hc;
    /* Requests of 0..7 queries, zero-length ones between, N not a multiple of 8. */
    const int32_t tiny_q[10] = {1, 0, 7, 2, 0, 3, 5, 4, 6, 0};
    const int32_t tiny_p[10] = {0, 5, 100, 127, 128, 4000, 77, 0, 900, 3};
    make_case(&hc, &rng, 10, tiny_q, tiny_p, 3, 16, 128, KIND_RANDOM, "tiny requests");
    check_case(&hc, 0, 1);
    free_case(&hc);
    /* No queries at all (N = 0): num_groups must still be written, as zeros. */
    const int32_t z_q[2] = {0, 0}, z_p[2] = {10, 0};
    make_case(&hc, &rng, 2, z_q, z_p, 2, 16, 128, KIND_RANDOM, "N = 0");
    check_case(&hc, 0, 1);
    free_case(&hc);
    /* All -1 rows. */
    const int32_t e_q[2] = {200, 61}, e_p[2] = {1000, 0};
    make_case(&hc, &rng, 2, e_q, e_p, 2, 16, 128, KIND_EMPTY, "all -1");
    check_case(&hc, 0, 1);
    free_case(&hc);
    /* Heavy repeats, N = W +- 1 around window edges. */
    const int32_t r_q[3] = {127, 129, 65}, r_p[3] = {3000, 10, 64};
    make_case(&hc, &rng, 3, r_q, r_p, 2, 16, 128, KIND_REPEATS, "repeats");
    check_case(&hc, 0, 1);
    free_case(&hc);
    /* First chunk of a prompt (prefix 0): most ids are in the queries' future. */
    const int32_t f_q[1] = {1000}, f_p[1] = {0};
    make_case(&hc, &rng, 1, f_q, f_p, 1, 16, 128, KIND_RANDOM, "prefix 0");
    check_case(&hc, 0, 0);
    free_case(&hc);
    /* K < 16 (scalar loads), page size 64. */
    const int32_t k_q[2] = {300, 90}, k_p[2] = {20000, 5000};
    make_case(&hc, &rng, 2, k_q, k_p, 2, 11, 64, KIND_HOT, "K=11 P=64");
    check_case(&hc, 0, 1);
    free_case(&hc);
    /* K = 16 but the ids 4 bytes off a 16-byte boundary (scalar loads). */
    make_case(&hc, &rng, 2, k_q, k_p, 2, 16, 128, KIND_RANDOM, "misaligned ids");
    check_case(&hc, 1, 0);
    free_case(&hc);
    /* Many requests (the CTAs' request lookups loop over them). */
    int32_t many_q[600], many_p[600];
    for (int r = 0; r < 600; r++) {
        many_q[r] = (int32_t)pw_rng_range(&rng, 0, 20);
        many_p[r] = (int32_t)pw_rng_range(&rng, 0, 5000);
    }
    make_case(&hc, &rng, 600, many_q, many_p, 2, 16, 128, KIND_RANDOM, "600 requests");
    check_case(&hc, 0, 0);
    free_case(&hc);
    /* More requests than W * W (16,384 at W128, 4,096 at W64): three rounds of the W-ary
     * request search. */
    const int32_t num_huge = 17000;
    int32_t *huge_q = malloc((size_t)num_huge * 4), *huge_p = malloc((size_t)num_huge * 4);
    assert_non_null(huge_q);
    assert_non_null(huge_p);
    for (int32_t r = 0; r < num_huge; r++) {
        huge_q[r] = (int32_t)pw_rng_range(&rng, 0, 3);
        huge_p[r] = (int32_t)pw_rng_range(&rng, 0, 3000);
    }
    make_case(&hc, &rng, num_huge, huge_q, huge_p, 1, 16, 128, KIND_HOT, "17000 requests");
    check_case(&hc, 0, 0);
    free_case(&hc);
    free(huge_q);
    free(huge_p);
    /* Page sizes that are not powers of two (the kernel divides instead of shifting). */
    const int32_t np_q[2] = {300, 90}, np_p[2] = {20000, 5000}, np_p3[2] = {5000, 700};
    make_case(&hc, &rng, 2, np_q, np_p, 2, 16, 100, KIND_HOT, "P=100");
    check_case(&hc, 0, 1);
    free_case(&hc);
    make_case(&hc, &rng, 2, np_q, np_p3, 2, 16, 3, KIND_RANDOM, "P=3");
    check_case(&hc, 0, 0);
    free_case(&hc);
}

/* Guarded mode where identity order wins (docs/semantics.md §3.2's g = 2 counter-example,
 * repeated: each 4 queries S0 = {1,2,3,4}, S1 = {1,2,6,7}, S2 = {1,2,3,5}, S3 = {3,5,8,9},
 * shifted to their own pages; identity 12 visits per 4 queries, greedy 13), in a 1M-token
 * context, so that the long direct path counts the identity visits (from M, not from the
 * mask rows), then the same ids on a short page table (direct path) and with the hash path
 * forced (check_regroup's dev variant 3). */
static void test_guard_identity_wins(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 7);
    const int32_t q[2] = {300, 77}, pre[2] = {1000000, 999000};
    static const int32_t pattern[4][4] = {{1, 2, 3, 4}, {1, 2, 6, 7}, {1, 2, 3, 5}, {3, 5, 8, 9}};
    for (int shortv = 0; shortv < 2; shortv++) {
        host_case_t hc;
        make_case(&hc, &rng, 2, q, pre, 2, 16, 128, KIND_RANDOM, "identity wins");
        const pw_problem_t *p = &hc.problem;
        for (int32_t h = 0; h < p->num_kv_heads; h++)
            for (int32_t n = 0; n < p->num_tokens; n++) {
                int32_t *row = hc.ids + ((int64_t)h * p->num_tokens + n) * p->topk;
                const int32_t base = shortv ? (n / 4) * 10 % 1500 : 100 + (n / 4) * 10 % 7000;
                for (int k = 0; k < p->topk; k++) row[k] = k < 4 ? base + pattern[n % 4][k] : -1;
            }
        if (shortv) { /* the same ids in a context of <= 2048 pages: the 32 KB direct path */
            for (int r = 0; r < 2; r++) {
                hc.prefix[r] = 1600 * 128;
                hc.kv[r] = hc.prefix[r] + q[r] + 10;
            }
            hc.problem.max_pages_per_request = 2048;
        }
        snprintf(hc.name, sizeof hc.name, "identity wins, V = %d", hc.problem.max_pages_per_request);
        printf("%s\n", hc.name);
        if (!shortv) assert_int_equal(runs_long_path(&hc, 128), 1);
        check_case(&hc, 0, 1);
        /* the guard did keep identity order (g = 2): the reference's guarded perm is the identity */
        const pw_requests_t rq = host_requests(&hc);
        pw_grouping_t g = PW_GROUPING_INIT;
        g.mode = PW_REGROUP_GUARDED;
        g.window = 128;
        g.group_size = 2;
        const size_t n_perm = (size_t)hc.problem.num_kv_heads * (size_t)hc.problem.num_tokens;
        int32_t *perm = malloc(n_perm * 4 + 4);
        assert_non_null(perm);
        assert_pw_ok(pw_ref_regroup(&hc.problem, hc.ids, &rq, &g, perm));
        for (size_t i = 0; i < n_perm; i++) assert_int_equal(perm[i], (int32_t)(i % (size_t)hc.problem.num_tokens));
        free(perm);
        free_case(&hc);
    }
}

/* Union visits of slots [0, n) of one small window taken in groups of g in the order
 * perm (ids: pool indices < 64, -1 skipped). */
static int64_t window_visits(const int32_t *ids, int32_t n, int32_t k, const int32_t *perm, int32_t g)
{
    int64_t visits = 0;
    for (int32_t s0 = 0; s0 < n; s0 += g) {
        uint64_t u = 0;
        for (int32_t s = s0; s < s0 + g && s < n; s++)
            for (int32_t i = 0; i < k; i++)
                if (ids[perm[s] * k + i] >= 0) u |= 1ull << ids[perm[s] * k + i];
        visits += __builtin_popcountll(u);
    }
    return visits;
}

/* A random window of n <= 32 queries whose greedy grouping (the reference's, group size g)
 * has exactly want_diff more union visits than identity order, and (want_diff = 0) a
 * greedy order other than the identity: guarded mode must then keep identity order at a
 * tie and take greedy's when it saves one visit, so an identity count off by one in
 * either direction changes the permutation. ids: [32, 16], pool indices < 20 (-1 padded). */
static int32_t find_window(pw_rng_t *rng, int32_t g, int32_t want_diff, int32_t *ids)
{
    enum { kK = 16, kPool = 20 };
    for (int trial = 0; trial < 200000; trial++) {
        const int32_t n = (int32_t)pw_rng_range(rng, 2 * g, g <= 4 ? 4 * g : 32) - (int32_t)pw_rng_range(rng, 0, 1);
        for (int32_t j = 0; j < n; j++) {
            const int32_t size = (int32_t)pw_rng_range(rng, 1, 5);
            for (int32_t i = 0; i < kK; i++) ids[j * kK + i] = -1;
            for (int32_t i = 0; i < size; i++) {
                int32_t id = (int32_t)pw_rng_range(rng, 0, kPool - 1), dup = 0;
                for (int32_t x = 0; x < i; x++) dup |= ids[j * kK + x] == id;
                ids[j * kK + i] = dup ? -1 : id;
            }
        }
        pw_problem_t p = PW_PROBLEM_INIT;
        p.num_tokens = n;
        p.num_requests = 1;
        p.num_kv_heads = 1;
        p.topk = kK;
        p.page_size = 128;
        p.max_pages_per_request = 64;
        int32_t cu[2] = {0, n}, prefix[1] = {32 * 128}, kv[1] = {32 * 128 + n};
        const pw_requests_t rq = {cu, prefix, kv, NULL, 0};
        pw_grouping_t gr = PW_GROUPING_INIT;
        gr.mode = PW_REGROUP_GREEDY;
        gr.window = 128;
        gr.group_size = g;
        int32_t greedy[32], identity[32];
        assert_pw_ok(pw_ref_regroup(&p, ids, &rq, &gr, greedy));
        int moved = 0;
        for (int32_t s = 0; s < n; s++) {
            identity[s] = s;
            moved |= greedy[s] != s;
        }
        const int64_t diff = window_visits(ids, n, kK, greedy, g) - window_visits(ids, n, kK, identity, g);
        if (diff == want_diff && moved) return n;
    }
    fail_msg("no window of g = %d with greedy - identity = %d visits found", g, want_diff);
    return 0;
}

/* Guarded mode at its decision's edge in the long direct path (identity visits counted from
 * M): windows of g = 2, 4 and 8 where greedy ties identity order (identity kept) or saves
 * exactly one visit (greedy taken), n < W, one window per request, at a 1M-token context
 * with page ids in the top rows of the columns (8,150..8,169 of ~8,190); check_case runs
 * guarded W128 / W64 at g = 8, 4, 2 and the dual regroup (alt g = 2, 1) on them, each against
 * the reference byte for byte, also through dev variants 3 (hash) and 8 (no long path). */
static void test_guard_near_ties(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 8);
    enum { kPerKind = 3, kReq = 3 * 2 * kPerKind, kK = 16 };
    int32_t qlens[kReq], prefixes[kReq];
    int32_t *win_ids = malloc((size_t)kReq * 32 * kK * 4);
    assert_non_null(win_ids);
    const int32_t gs[3] = {2, 4, 8};
    for (int32_t r = 0; r < kReq; r++) {
        const int32_t g = gs[r / (2 * kPerKind)], diff = (r / kPerKind) % 2 ? -1 : 0;
        qlens[r] = find_window(&rng, g, diff, win_ids + (size_t)r * 32 * kK);
        prefixes[r] = 1048000 - (int32_t)pw_rng_range(&rng, 0, 300);
    }
    host_case_t hc;
    make_case(&hc, &rng, kReq, qlens, prefixes, 1, kK, 128, KIND_RANDOM, "guard near ties");
    for (int32_t r = 0; r < kReq; r++)
        for (int32_t j = 0; j < qlens[r]; j++)
            for (int32_t i = 0; i < kK; i++) {
                const int32_t id = win_ids[((size_t)r * 32 + j) * kK + i];
                hc.ids[(int64_t)(hc.cu[r] + j) * kK + i] = id < 0 ? -1 : 8150 + id;
            }
    printf("%s (N=%d, V = %d)\n", hc.name, hc.problem.num_tokens, hc.problem.max_pages_per_request);
    assert_int_equal(runs_long_path(&hc, 128), 1);
    assert_int_equal(runs_long_path(&hc, 64), 1);
    /* The reference's guarded choice is the one each window was built for. */
    const pw_requests_t rq = host_requests(&hc);
    int32_t *perm = malloc((size_t)hc.problem.num_tokens * 4 + 4), *greedy = malloc((size_t)hc.problem.num_tokens * 4 + 4);
    assert_non_null(perm);
    assert_non_null(greedy);
    for (int k = 0; k < 3; k++) {
        pw_grouping_t gr = PW_GROUPING_INIT;
        gr.window = 128;
        gr.group_size = gs[k];
        gr.mode = PW_REGROUP_GUARDED;
        assert_pw_ok(pw_ref_regroup(&hc.problem, hc.ids, &rq, &gr, perm));
        gr.mode = PW_REGROUP_GREEDY;
        assert_pw_ok(pw_ref_regroup(&hc.problem, hc.ids, &rq, &gr, greedy));
        for (int32_t r = k * 2 * kPerKind; r < (k + 1) * 2 * kPerKind; r++) {
            const int tie = (r / kPerKind) % 2 == 0;
            for (int32_t s = hc.cu[r]; s < hc.cu[r + 1]; s++)
                assert_int_equal(perm[s], tie ? s : greedy[s]);
        }
    }
    free(perm);
    free(greedy);
    check_case(&hc, 0, 1);
    free_case(&hc);
    free(win_ids);
}

/* max_pages_per_request at and past the direct-indexed bounds (2048 pages at W128, 4096
 * at W64; pw_regroup picks the path from it): page ids up to 2047 with V = 2048 (direct at
 * both windows), the same ids with V = 2049 (W128 hash, W64 direct), and short contexts
 * with a declared V of 9000 (hash at both windows). */
static void test_path_bounds(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 5);
    const int32_t q[2] = {300, 157}, pre[2] = {2048 * 128 - 300 - 201, 2048 * 128 - 157 - 201};
    const int32_t declared[2] = {2048, 2049};
    for (int v = 0; v < 2; v++)
        for (int kind = 0; kind < 2; kind++) {
            host_case_t hc;
            make_case(&hc, &rng, 2, q, pre, 2, 16, 128, kind ? KIND_RANDOM : KIND_HOT, "bound");
            assert_true(hc.problem.max_pages_per_request <= 2048);
            hc.problem.max_pages_per_request = declared[v]; /* still >= every kv_len / P */
            snprintf(hc.name, sizeof hc.name, "V=%d kind %d (N=%d, pages up to 2047)",
                     declared[v], kind, hc.problem.num_tokens);
            printf("%s\n", hc.name);
            check_case(&hc, 0, kind == 0);
            free_case(&hc);
        }
    const int32_t sq[3] = {200, 64, 129}, sp[3] = {5000, 0, 70000};
    host_case_t hc;
    make_case(&hc, &rng, 3, sq, sp, 2, 16, 128, KIND_HOT, "declared V 9000");
    hc.problem.max_pages_per_request = 9000;
    printf("%s\n", hc.name);
    assert_int_equal(runs_long_path(&hc, 128), 1);
    check_case(&hc, 0, 1);
    /* The long path's bounds: 14,336 pages at W128 (long), 14,337 (adaptive: every
     * window's pages fit 2048, so direct), 28,672 / 28,673 at W64. */
    const int32_t long_v[4] = {14336, 14337, 28672, 28673};
    const int32_t long_w[4] = {128, 128, 64, 64};
    for (int v = 0; v < 4; v++) {
        hc.problem.max_pages_per_request = long_v[v];
        snprintf(hc.name, sizeof hc.name, "declared V %d (N=%d)", long_v[v], hc.problem.num_tokens);
        printf("%s\n", hc.name);
        assert_int_equal(runs_long_path(&hc, long_w[v]), v % 2 == 0);
        check_case(&hc, 0, 0);
    }
    /* The largest declared V (any V >= 0 is valid): hash path; regroup only, since union
     * preparation stops at V = 2^29. */
    hc.problem.max_pages_per_request = INT32_MAX;
    snprintf(hc.name, sizeof hc.name, "declared V INT32_MAX (N=%d)", hc.problem.num_tokens);
    printf("%s\n", hc.name);
    {
        dev_case_t dc;
        upload(&hc, &dc, 0);
        const size_t n_perm = (size_t)hc.problem.num_kv_heads * (size_t)hc.problem.num_tokens;
        int32_t *perm = malloc(n_perm * 4 + 4);
        assert_non_null(perm);
        const pw_regroup_mode_t modes[2] = {PW_REGROUP_GREEDY, PW_REGROUP_GUARDED};
        for (int m = 0; m < 4; m++) {
            pw_grouping_t g = PW_GROUPING_INIT;
            g.mode = modes[m & 1];
            g.window = m < 2 ? 128 : 64;
            int32_t *perm_dev = NULL;
            check_regroup(&hc, &dc, &g, perm, &perm_dev);
            CUDA_OK(cudaFree(perm_dev));
        }
        free(perm);
        release(&dc);
    }
    free_case(&hc);
}

/* Top-K 17..64 at and past the direct-indexed bounds: pw_regroup runs dev variant 7 alone
 * while max_pages_per_request <= 2048 (W128) / 4096 (W64), else a split call (variant 7
 * for the windows whose last query sees at most the bound, variant 6 for the others).
 * check_wide_case compares variants 6, 7 and pw_regroup with the reference: pages up to
 * 2047 declared as V = 2048 and 2049, short contexts declared as V = 9000, and one
 * request past 4096 pages next to short ones (W128 and W64: both kernels in one call). */
static void test_wide_path_bounds(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 0x3b);
    const int32_t q[2] = {300, 157}, pre[2] = {2048 * 128 - 300 - 201, 2048 * 128 - 157 - 201};
    const int32_t declared[3] = {2048, 2049, 9000};
    for (int v = 0; v < 3; v++) {
        host_case_t hc;
        make_case(&hc, &rng, 2, q, pre, 2, v == 1 ? 64 : 32, 128, v == 2 ? KIND_RANDOM : KIND_HOT, "wide bound");
        assert_true(hc.problem.max_pages_per_request <= 2048);
        hc.problem.max_pages_per_request = declared[v]; /* still >= every kv_len / P */
        snprintf(hc.name, sizeof hc.name, "K=%d V=%d (N=%d, pages up to 2047)", hc.problem.topk, declared[v],
                 hc.problem.num_tokens);
        printf("%s\n", hc.name);
        check_wide_case(&hc, 0, 1);
        free_case(&hc);
    }
    const int32_t sq[3] = {200, 64, 257}, sp[3] = {5000, 0, 600000}; /* 4,690+ pages: past both bounds */
    host_case_t hc;
    make_case(&hc, &rng, 3, sq, sp, 2, 64, 128, KIND_HOT, "split call");
    assert_true(hc.problem.max_pages_per_request > 2048);
    printf("%s: request 2 past 4096 pages\n", hc.name);
    check_wide_case(&hc, 0, 1);
    free_case(&hc);
}

/* Device data that break the documented layout (pw_regroup cannot check them on the
 * host): non-monotone, negative or too large cu_seqlens_q, cu_seqlens_q[0] != 0, negative
 * or huge prefix and KV lengths (kv_len > max_pages_per_request * P), Top-K ids at and
 * past the direct path's bounds, INT32_MIN / INT32_MAX. The contract: no fault, no write
 * outside perm[Hkv, N] (guard words on both sides stay poisoned), and every slot written
 * holds a row in [0, N); the values are otherwise unspecified. Every kernel variant runs
 * (K <= 16: library, hash forced, match_any; K 32 / 64: dev variants 6 and 7). Run this binary under compute-sanitizer
 * (memcheck) to also see that no shared or global read leaves its buffer. */
static void test_broken_device_data(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 6);
    enum { kN = 300, kHkv = 2, kGuard = 64 };
    const int32_t imin = INT32_MIN, imax = INT32_MAX;
    struct {
        int32_t r, cu[5], prefix[4], kv[4];
    } layouts[] = {
        {4, {0, 200, 50, 300, 300}, {0, 100, 0, 5000}, {300, 400, 300, 5200}},
        {4, {0, -5, 400, -300, 300}, {0, 0, 0, 0}, {imax, imax, imax, imax}},
        {4, {0, -100, 50, 300, 300}, {0, 0, 1000, 0}, {5000, 5000, 5000, 5000}},
        {4, {100, 50, 250, 260, 290}, {7, 7, 7, 7}, {imax, 10, imax, 300}},
        {4, {imin, imax, imin, 0, imax}, {imin, imax, 0, -1}, {imax, imin, imax, imax}},
        {4, {0, 64, 191, 192, 300}, {-1000, imax, -5, 3}, {imax, imax, -7, imax}},
        {4, {0, 299, 300, 300, 300}, {imax - 100, 0, 0, 0}, {imax, 0, 0, 0}},
        {1, {-1, 300}, {0}, {imax}},
        {1, {0, 1000}, {0}, {imax}},
        {1, {5, 300}, {imin}, {imax}},
        {1, {300, 0}, {0}, {imax}},
        {1, {0, 300}, {imax - 10}, {imax}},
        {1, {0, 300}, {-200}, {-1}},
    };
    const int32_t num_layouts = (int32_t)(sizeof layouts / sizeof layouts[0]);
    /* direct at both W; W128 bound; W64 bound; the long direct path at both W */
    const int32_t declared_v[4] = {40, 2048, 4096, 9000};
    const int32_t specials[15] = {imin, imax, -1, 0, 39, 40, 41, 2047, 2048, 4095, 4096, 4097, 8999, 9000, 9001};
    /* K 16 and 5 on v3 (library, hash forced, match_any); K 32 and 64 on the wide-Top-K
     * kernels (6: hash set; 7: v3's layout, which runs 6 past the direct bound, V = 4096
     * at W128 here). */
    const int32_t topks[4] = {16, 5, 32, 64};
    const size_t perm_words = (size_t)kHkv * kN + 2 * kGuard;
    int32_t *perm_host = malloc(perm_words * 4);
    int32_t *ids_host = malloc((size_t)kHkv * kN * 64 * 4);
    assert_non_null(perm_host);
    assert_non_null(ids_host);
    int32_t *perm_base = dev_alloc(perm_words * 4);
    int32_t *ids_dev = dev_alloc((size_t)kHkv * kN * 64 * 4);
    int32_t *cu_dev = dev_alloc(5 * 4), *prefix_dev = dev_alloc(4 * 4), *kv_dev = dev_alloc(4 * 4);
    int64_t runs = 0;
    for (int kt = 0; kt < 4; kt++) {
        const int wide = kt >= 2;
        const int variants[3] = {wide ? 6 : 0, wide ? 7 : 3, 4}; /* wide: the first two */
        const int num_variants = wide ? 2 : 3;
        const int32_t k = topks[kt];
        for (size_t i = 0; i < (size_t)kHkv * kN * (size_t)k; i++) {
            const int64_t u = pw_rng_range(&rng, 0, 9);
            ids_host[i] = u < 3 ? specials[pw_rng_range(&rng, 0, 14)]
                        : u < 8 ? (int32_t)pw_rng_range(&rng, 0, 48)
                                : (int32_t)pw_rng_range(&rng, 2000, 4200);
        }
        CUDA_OK(cudaMemcpy(ids_dev, ids_host, (size_t)kHkv * kN * (size_t)k * 4,
                           cudaMemcpyHostToDevice));
        for (int32_t l = 0; l < num_layouts; l++) {
            CUDA_OK(cudaMemcpy(cu_dev, layouts[l].cu, 5 * 4, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(prefix_dev, layouts[l].prefix, 4 * 4, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(kv_dev, layouts[l].kv, 4 * 4, cudaMemcpyHostToDevice));
            const pw_requests_t rq = {cu_dev, prefix_dev, kv_dev, NULL, 0};
            for (int v = 0; v < 4; v++) {
                pw_problem_t p = PW_PROBLEM_INIT;
                p.num_tokens = kN;
                p.num_requests = layouts[l].r;
                p.num_kv_heads = kHkv;
                p.topk = k;
                p.page_size = v == 0 && kt == 1 ? 100 : 128; /* one non-power of two */
                p.max_pages_per_request = declared_v[v];
                for (int m = 0; m < 8; m++) {
                    pw_grouping_t g = PW_GROUPING_INIT;
                    g.mode = (m & 1) ? PW_REGROUP_GUARDED : PW_REGROUP_GREEDY;
                    g.window = (m & 2) ? 64 : 128;
                    g.group_size = (m & 4) ? ((m & 1) ? 2 : 3) : 8;
                    for (int vi = 0; vi < num_variants; vi++) {
                        CUDA_OK(cudaMemsetAsync(perm_base, POISON, perm_words * 4, g_stream));
                        assert_pw_ok(pw_regroup_dev_variant(variants[vi], &p, ids_dev, &rq, &g,
                                                            perm_base + kGuard,
                                                            (pw_stream_t)g_stream));
                        CUDA_OK(cudaMemcpyAsync(perm_host, perm_base, perm_words * 4,
                                                cudaMemcpyDeviceToHost, g_stream));
                        CUDA_OK(cudaStreamSynchronize(g_stream));
                        int32_t poison;
                        memset(&poison, POISON, sizeof poison);
                        for (size_t w = 0; w < perm_words; w++) {
                            const int guard = w < kGuard || w >= perm_words - kGuard;
                            const int32_t x = perm_host[w];
                            if ((guard && x != poison) ||
                                (!guard && x != poison && (x < 0 || x >= kN)))
                                fail_msg("broken layout %d, K=%d, V=%d, W=%d, g=%d, mode %d, "
                                         "variant %d: perm word %td (of %d) is %d",
                                         (int)l, (int)k, (int)p.max_pages_per_request, g.window,
                                         g.group_size, (int)g.mode, variants[vi],
                                         (ptrdiff_t)w - kGuard, kHkv * kN, x);
                        }
                        runs++;
                    }
                }
            }
        }
    }
    printf("broken device data: %lld regroup runs, no fault, no write outside perm\n",
           (long long)runs);
    CUDA_OK(cudaFree(perm_base));
    CUDA_OK(cudaFree(ids_dev));
    CUDA_OK(cudaFree(cu_dev));
    CUDA_OK(cudaFree(prefix_dev));
    CUDA_OK(cudaFree(kv_dev));
    free(perm_host);
    free(ids_host);
}

/* Every capture file found (shipped captures and the standard workloads), all KV heads. */
static void test_captures(void **state)
{
    (void)state;
    int found = 0;
    for (int i = 0; i < g_num_dirs; i++) {
        DIR *dir = opendir(g_dirs[i]);
        if (!dir) continue;
        char names[64][512];
        int count = 0;
        struct dirent *e;
        while ((e = readdir(dir)) && count < 64) {
            const size_t len = strlen(e->d_name);
            if (len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0 && len < 200) {
                const int n = snprintf(names[count], sizeof names[0], "%s/%s", g_dirs[i], e->d_name);
                if (n > 0 && (size_t)n < sizeof names[0]) count++; /* a too-long path is skipped */
            }
        }
        closedir(dir);
        for (int k = 0; k < count; k++) {
            pw_capture_t *c = NULL;
            assert_pw_ok(pw_capture_read(names[k], 0, &c));
            host_case_t hc;
            memset(&hc, 0, sizeof hc);
            hc.problem = c->problem;
            hc.cu = c->cu_seqlens_q;
            hc.prefix = c->prefix_lens;
            hc.kv = c->kv_lens;
            hc.ids = c->topk_ids;
            snprintf(hc.name, sizeof hc.name, "%.120s", names[k]);
            if (c->problem.topk > 16) { /* the wide-Top-K regroup and union preparation */
                check_wide_case(&hc, 0, 0);
                printf("capture %s: K=%d: wide-Top-K regroup and union preparation == reference\n",
                       names[k], c->problem.topk);
                pw_capture_free(c);
                found++;
                continue;
            }
            dev_case_t dc;
            upload(&hc, &dc, 0);
            const size_t n_perm = (size_t)hc.problem.num_kv_heads * (size_t)hc.problem.num_tokens;
            int32_t *perm = malloc(n_perm * 4 + 4);
            assert_non_null(perm);
            pw_union_stats_t st[5];
            const pw_regroup_mode_t modes[5] = {PW_REGROUP_IDENTITY, PW_REGROUP_GREEDY,
                                                PW_REGROUP_GUARDED, PW_REGROUP_GREEDY,
                                                PW_REGROUP_GUARDED};
            const int32_t wins[5] = {128, 64, 64, 128, 128};
            for (int m = 0; m < 5; m++) {
                pw_grouping_t g = PW_GROUPING_INIT;
                g.mode = modes[m];
                g.window = wins[m];
                int32_t *perm_dev = NULL;
                check_regroup(&hc, &dc, &g, perm, &perm_dev);
                check_union(&hc, &dc, &g, perm, perm_dev, 0, &st[m]);
                check_fused(&hc, &dc, &g, 0);
                CUDA_OK(cudaFree(perm_dev));
            }
            const double id = (double)st[0].union_visits;
            printf("capture %s: N=%d Hkv=%d: union visits identity %lld, W64 greedy %lld "
                   "(%+.2f%%) guarded %lld (%+.2f%%), W128 greedy %lld (%+.2f%%) guarded %lld "
                   "(%+.2f%%); GPU == reference\n",
                   names[k], hc.problem.num_tokens, hc.problem.num_kv_heads,
                   (long long)st[0].union_visits, (long long)st[1].union_visits,
                   100.0 * ((double)st[1].union_visits / id - 1.0), (long long)st[2].union_visits,
                   100.0 * ((double)st[2].union_visits / id - 1.0), (long long)st[3].union_visits,
                   100.0 * ((double)st[3].union_visits / id - 1.0), (long long)st[4].union_visits,
                   100.0 * ((double)st[4].union_visits / id - 1.0));
            free(perm);
            release(&dc);
            pw_capture_free(c);
            found++;
        }
    }
    if (!found) {
        printf("no capture files in the capture directories: nothing to compare\n");
        skip();
    }
}

/* Regroup + union preparation captured in a CUDA graph, replayed on new inputs. */
/* One capture of pw_regroup + pw_union_prepare (global capture mode, as torch.cuda.graph
 * uses), replayed on two inputs of the same layout; pre: the requests' prefixes. long_path:
 * whether pw_regroup must take the long direct path (its host queries and attribute set
 * happen inside the capture). */
static void graph_capture_case(pw_rng_t *rng, const int32_t *pre, int long_path)
{
    const int32_t q[3] = {500, 77, 260};
    host_case_t hc, hc2;
    make_case(&hc, rng, 3, q, pre, 2, 16, 128, KIND_HOT, "graph inputs 1");
    make_case(&hc2, rng, 3, q, pre, 2, 16, 128, KIND_RANDOM, "graph inputs 2");
    memcpy(hc2.kv, hc.kv, 3 * sizeof *hc.kv); /* same layout, new ids only */
    hc2.problem = hc.problem;
    const pw_problem_t *p = &hc.problem;
    assert_int_equal(runs_long_path(&hc, 128), long_path);
    dev_case_t dc;
    upload(&hc, &dc, 0);
    pw_grouping_t g = PW_GROUPING_INIT; /* guarded, W128, g 8 */
    const size_t n_perm = (size_t)p->num_kv_heads * (size_t)p->num_tokens;
    int32_t *perm_dev = dev_alloc(n_perm * 4);
    const int64_t max_groups = pw_max_groups(p, &g);
    meta_buffers_t dev, got, ref;
    meta_alloc(p, max_groups, 8 * p->topk, 1, &dev);
    meta_alloc(p, max_groups, 8 * p->topk, 0, &got);
    CUDA_OK(cudaStreamSynchronize(g_stream));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
    assert_pw_ok(pw_regroup(p, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, (pw_stream_t)g_stream));
    assert_pw_ok(pw_union_prepare(p, dc.ids, &dc.requests, &g, perm_dev, &dev.meta,
                                  (pw_stream_t)g_stream));
    CUDA_OK(cudaStreamEndCapture(g_stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

    int32_t *perm_ref = malloc(n_perm * 4 + 4), *perm_got = malloc(n_perm * 4 + 4);
    assert_non_null(perm_ref);
    assert_non_null(perm_got);
    for (int round = 0; round < 2; round++) {
        const host_case_t *cur = round == 0 ? &hc : &hc2;
        CUDA_OK(cudaMemcpyAsync(dc.ids, cur->ids, ids_bytes(p), cudaMemcpyHostToDevice, g_stream));
        CUDA_OK(cudaMemsetAsync(perm_dev, POISON, n_perm * 4, g_stream));
        CUDA_OK(cudaMemsetAsync(dev.meta.groups, POISON, dev.bytes_groups, g_stream));
        CUDA_OK(cudaMemsetAsync(dev.meta.union_pages, POISON, dev.bytes_pages, g_stream));
        CUDA_OK(cudaMemsetAsync(dev.meta.member_masks, POISON, dev.bytes_masks, g_stream));
        CUDA_OK(cudaMemsetAsync(dev.meta.num_groups, POISON, dev.bytes_num, g_stream));
        CUDA_OK(cudaGraphLaunch(exec, g_stream));
        CUDA_OK(cudaMemcpyAsync(perm_got, perm_dev, n_perm * 4, cudaMemcpyDeviceToHost, g_stream));
        meta_download(&dev, &got);
        const pw_requests_t rq = host_requests(cur);
        assert_pw_ok(pw_ref_regroup(p, cur->ids, &rq, &g, perm_ref));
        assert_same_bytes(perm_ref, perm_got, n_perm * 4, "perm (graph replay)", cur->name);
        meta_alloc(p, max_groups, 8 * p->topk, 0, &ref);
        assert_pw_ok(pw_ref_union_prepare(p, cur->ids, &rq, &g, perm_ref, &ref.meta));
        assert_same_meta(&ref, &got, cur->name);
        meta_free(&ref, 0);
        printf("graph replay %d (%s, V = %d): GPU == reference\n", round, cur->name, p->max_pages_per_request);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    free(perm_ref);
    free(perm_got);
    meta_free(&dev, 1);
    meta_free(&got, 0);
    CUDA_OK(cudaFree(perm_dev));
    release(&dc);
    free_case(&hc);
    free_case(&hc2);
}

/* Graph capture and replay: a context of ~1,100 pages (32 KB direct path) and a 1M-token one
 * (the long direct path). */
static void test_graph_capture(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 3);
    const int32_t pre[3] = {60000, 100, 140000}, pre_1m[3] = {1000000, 100, 1040000};
    graph_capture_case(&rng, pre, 0);
    graph_capture_case(&rng, pre_1m, 1);
}

/* Host-checkable argument errors; nothing is launched. */
static void test_errors(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed + 4);
    const int32_t q[1] = {100}, pre[1] = {1000};
    host_case_t hc;
    make_case(&hc, &rng, 1, q, pre, 1, 16, 128, KIND_HOT, "errors");
    dev_case_t dc;
    upload(&hc, &dc, 0);
    const pw_problem_t *p = &hc.problem;
    int32_t *perm_dev = dev_alloc((size_t)p->num_tokens * 4);
    pw_grouping_t g = PW_GROUPING_INIT;
    const pw_stream_t st = (pw_stream_t)g_stream;
    g.window = 256;
    assert_int_equal(pw_regroup(p, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_UNSUPPORTED);
    g.window = 0;
    assert_int_equal(pw_regroup(p, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_UNSUPPORTED);
    g.window = 128;
    g.group_size = 3; /* guarded needs g in 1, 2, 4, 8 */
    assert_int_equal(pw_regroup(p, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_UNSUPPORTED);
    g.group_size = 9;
    assert_int_equal(pw_regroup(p, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_INVALID_ARGUMENT);
    g.group_size = 8;
    assert_int_equal(pw_regroup(p, NULL, &dc.requests, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_regroup(p, dc.ids, NULL, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_INVALID_ARGUMENT);
    pw_problem_t k65 = *p;
    k65.topk = 65; /* the GPU regroup takes K <= 64 */
    assert_int_equal(pw_regroup(&k65, dc.ids, &dc.requests, &g, perm_dev, NULL, 0, st),
                     PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "topk"));
    pw_problem_t big_k = *p;
    big_k.topk = 17;
    size_t bytes = 1;
    assert_pw_ok(pw_regroup_workspace_size(p, &g, &bytes));
    assert_int_equal(bytes, 0);
    assert_int_equal(pw_regroup_workspace_size(p, &g, NULL), PW_ERROR_INVALID_ARGUMENT);

    meta_buffers_t dev;
    meta_alloc(p, pw_max_groups(p, &g) - 1, 8 * 16, 1, &dev); /* one group short */
    assert_int_equal(pw_union_prepare(p, dc.ids, &dc.requests, &g, perm_dev, &dev.meta, st),
                     PW_ERROR_INVALID_ARGUMENT);
    dev.meta.max_groups += 1;
    dev.meta.union_capacity = 8 * 16 - 1; /* one page short */
    assert_int_equal(pw_union_prepare(p, dc.ids, &dc.requests, &g, perm_dev, &dev.meta, st),
                     PW_ERROR_INVALID_ARGUMENT);
    dev.meta.union_capacity = 8 * 16;
    assert_int_equal(pw_union_prepare(&big_k, dc.ids, &dc.requests, &g, perm_dev, &dev.meta, st),
                     PW_ERROR_INVALID_ARGUMENT); /* K = 17 is supported: capacity < 8 * 17 */
    pw_problem_t huge_k = *p;
    huge_k.topk = 65;
    assert_int_equal(pw_union_prepare(&huge_k, dc.ids, &dc.requests, &g, perm_dev, &dev.meta, st),
                     PW_ERROR_UNSUPPORTED); /* K > 64, before the capacity */
    assert_int_equal(pw_union_prepare(p, dc.ids, &dc.requests, &g, perm_dev, NULL, st),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_pw_ok(pw_union_prepare(p, dc.ids, &dc.requests, &g, perm_dev, &dev.meta, st));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    meta_free(&dev, 1);
    CUDA_OK(cudaFree(perm_dev));
    release(&dc);
    free_case(&hc);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--captures") == 0)
            while (i + 1 < argc && argv[i + 1][0] != '-' && g_num_dirs < 8)
                g_dirs[g_num_dirs++] = argv[++i];
    if (g_num_dirs == 0) {
        g_dirs[g_num_dirs++] = "captures";
        g_dirs[g_num_dirs++] = ".data/workloads";
    }
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device (%s): the regroup kernels need an sm_90 GPU\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
        printf("SKIP: device 0 is not sm_90 (the regroup kernels are built for sm_90a)\n");
        return 77;
    }
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) {
        printf("cannot create a CUDA stream\n");
        return 1;
    }
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--wide-only") == 0) { /* scripts/gpu-check topksan: the wide-Top-K tests alone */
            const struct CMUnitTest wide[] = {cmocka_unit_test(test_wide_topk), cmocka_unit_test(test_wide_path_bounds)};
            const int failed = cmocka_run_group_tests(wide, NULL, NULL);
            cudaStreamDestroy(g_stream);
            return failed;
        }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_edges),
        cmocka_unit_test(test_random_problems), cmocka_unit_test(test_long_contexts),
        cmocka_unit_test(test_path_bounds),     cmocka_unit_test(test_guard_identity_wins),
        cmocka_unit_test(test_guard_near_ties),
        cmocka_unit_test(test_broken_device_data), cmocka_unit_test(test_graph_capture),
        cmocka_unit_test(test_captures),        cmocka_unit_test(test_wide_topk),
        cmocka_unit_test(test_wide_path_bounds),
    };
    /* --only PATTERN: the tests whose names match (cmocka's filter, * and ?), e.g. one test
     * under compute-sanitizer racecheck, which takes minutes for the whole file. */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--only") == 0) cmocka_set_test_filter(argv[i + 1]);
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(g_stream);
    return failed;
}

#else /* !PW_HAVE_CUDA */

int main(void)
{
    printf("SKIP: built without CUDA (PW_WITH_CUDA=OFF or no nvcc): no GPU regroup to test\n");
    return 77;
}

#endif
