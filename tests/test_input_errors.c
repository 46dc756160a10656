/* Inputs a careless caller gives, each of which once produced a silent wrong answer or a
 * crash: a cache size left at PW_PROBLEM_INIT's 0, regroup windows near INT32_MAX, and the
 * device entry points on a machine without a GPU (they must all say NO_DEVICE, as
 * pw_sparse_prefill does). Rerun with --seed N. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "../src/pw_internal.h" /* pw_vt_buffers_t, pw_check_vt_stack: the full call's V^T buffers */

static uint64_t g_seed;

#define assert_error_naming(expr, status, word)                                             \
    do {                                                                                    \
        const pw_status_t st_ = (expr);                                                     \
        if (st_ != (status))                                                                \
            fail_msg("%s -> %s (expected %s): %s", #expr, pw_status_string(st_),            \
                     pw_status_string(status), pw_last_error());                            \
        if (!strstr(pw_last_error(), (word)))                                               \
            fail_msg("%s: message \"%s\" does not name %s", #expr, pw_last_error(), (word)); \
    } while (0)

/* ---- a tiny attention problem on the host: 1 request, N = 4 queries --------------------- */
typedef struct tiny {
    pw_problem_t problem;
    int32_t cu[2], prefix[1], kv[1], page_table[2], topk[4 * 2];
    pw_bf16_t q[4 * 8];
    pw_fp8_e4m3_t k[8 * 8], v[8 * 8];
    float k_scale, v_scale, o[4 * 8], lse[4];
    uint32_t bad_pages;
    pw_attention_args_t args;
} tiny_t;

static void tiny_init(tiny_t *t, pw_rng_t *rng)
{
    const pw_problem_t init = PW_PROBLEM_INIT;
    memset(t, 0, sizeof *t);
    t->problem = init;
    t->problem.num_tokens = 4;
    t->problem.q_heads_per_kv = 1;
    t->problem.head_dim = 8;
    t->problem.page_size = 4;
    t->problem.topk = 2;
    t->problem.max_pages_per_request = 2;
    t->problem.num_cache_pages = 2;
    t->cu[0] = 0;
    t->cu[1] = 4;
    t->prefix[0] = 4;
    t->kv[0] = 8;
    t->page_table[0] = 1;
    t->page_table[1] = 0;
    for (int i = 0; i < 8; i++) t->topk[i] = i % 2;
    for (int i = 0; i < 32; i++) t->q[i] = pw_bf16_from_float((float)pw_rng_normal(rng));
    for (int i = 0; i < 64; i++) {
        t->k[i] = pw_fp8_e4m3_from_float((float)pw_rng_normal(rng));
        t->v[i] = pw_fp8_e4m3_from_float((float)pw_rng_normal(rng));
    }
    t->k_scale = t->v_scale = 1.0f;
    const pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    t->args = a;
    t->args.q = t->q;
    t->args.q_stride = 8;
    t->args.k_cache = t->k;
    t->args.v_cache = t->v;
    t->args.kv_stride = 8;
    t->args.k_scale = &t->k_scale;
    t->args.v_scale = &t->v_scale;
    t->args.topk_ids = t->topk;
    t->args.requests.cu_seqlens_q = t->cu;
    t->args.requests.prefix_lens = t->prefix;
    t->args.requests.kv_lens = t->kv;
    t->args.requests.page_table = t->page_table;
    t->args.requests.page_table_stride = 2;
    t->args.o = t->o;
    t->args.o_stride = 8;
    t->args.lse = t->lse;
    t->args.bad_page_count = &t->bad_pages;
}

/* num_cache_pages left 0 (PW_PROBLEM_INIT) with N > 0 used to pass every check, and the
 * reference returned zeros / -inf with only the bad-page counter as a sign. */
static void test_cache_pages_left_zero(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    tiny_t t;
    tiny_init(&t, &rng);
    assert_pw_ok(pw_problem_check(&t.problem, &t.args.requests));
    assert_pw_ok(pw_ref_attention(&t.problem, &t.args, PW_REF_EXACT));
    assert_int_equal(t.bad_pages, 0);

    t.problem.num_cache_pages = 0;
    assert_error_naming(pw_problem_check(&t.problem, &t.args.requests), PW_ERROR_INVALID_ARGUMENT,
                        "num_cache_pages");
    assert_error_naming(pw_ref_attention(&t.problem, &t.args, PW_REF_EXACT), PW_ERROR_INVALID_ARGUMENT,
                        "num_cache_pages");
    assert_error_naming(pw_ref_attention(&t.problem, &t.args, PW_REF_FP8_EMULATE),
                        PW_ERROR_INVALID_ARGUMENT, "num_cache_pages");
    assert_int_equal(t.bad_pages, 0);
    /* max_pages_per_request left at PW_PROBLEM_INIT's 0 is named as such, not as a kv_lens
     * entry past it. */
    t.problem.num_cache_pages = 2;
    t.problem.max_pages_per_request = 0;
    assert_error_naming(pw_problem_check(&t.problem, &t.args.requests), PW_ERROR_INVALID_ARGUMENT,
                        "problem.max_pages_per_request is 0");
    assert_error_naming(pw_ref_attention(&t.problem, &t.args, PW_REF_EXACT), PW_ERROR_INVALID_ARGUMENT,
                        "problem.max_pages_per_request is 0");
    tiny_init(&t, &rng);
    t.problem.num_cache_pages = 0;

    /* Without a page table (the grouping functions) the cache size is not needed. */
    pw_requests_t no_table = t.args.requests;
    no_table.page_table = NULL;
    assert_pw_ok(pw_problem_check(&t.problem, &no_table));
    /* N = 0 reads nothing: PW_PROBLEM_INIT as it is stays valid. */
    pw_problem_t empty = PW_PROBLEM_INIT;
    const int32_t cu0[2] = {0, 0}, zero[1] = {0};
    pw_attention_args_t none = PW_ATTENTION_ARGS_INIT;
    none.requests.cu_seqlens_q = cu0;
    none.requests.prefix_lens = zero;
    none.requests.kv_lens = zero;
    assert_pw_ok(pw_ref_attention(&empty, &none, PW_REF_EXACT));
    /* Offsets that decrease after request 0 ({0, 45, 40}): named as such, not as request
     * 0's KV length, which the 45 queries it seems to hold would exceed. */
    {
        pw_problem_t p2 = PW_PROBLEM_INIT;
        p2.num_tokens = 40;
        p2.num_requests = 2;
        p2.max_pages_per_request = 8;
        p2.num_cache_pages = 16;
        const int32_t cu2[3] = {0, 45, 40}, pre2[2] = {500, 0}, kv2[2] = {520, 40};
        const int32_t table2[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        pw_requests_t rq2 = PW_REQUESTS_INIT;
        rq2.cu_seqlens_q = cu2;
        rq2.prefix_lens = pre2;
        rq2.kv_lens = kv2;
        rq2.page_table = table2;
        rq2.page_table_stride = 8;
        assert_error_naming(pw_problem_check(&p2, &rq2), PW_ERROR_INVALID_ARGUMENT,
                            "cu_seqlens_q decreases at request 1");
        /* Offsets running past N: named as such, not as request 1's kv_lens being too short
         * for the 60 queries the offsets give it (a fresh user's trial, 2026-12-02). */
        const int32_t cu3[3] = {0, 20, 80};
        rq2.cu_seqlens_q = cu3;
        assert_error_naming(pw_problem_check(&p2, &rq2), PW_ERROR_INVALID_ARGUMENT,
                            "cu_seqlens_q[R=2] is 80, must equal num_tokens");
    }

    /* The plan is made for attention: both cache shapes are needed when N > 0. */
    pw_problem_t fast = PW_PROBLEM_INIT;
    fast.num_tokens = 1000;
    fast.max_pages_per_request = 64;
    pw_plan_t *plan = NULL;
    assert_error_naming(pw_plan_create(&fast, NULL, &plan), PW_ERROR_INVALID_ARGUMENT, "num_cache_pages");
    assert_null(plan);
    fast.num_cache_pages = 64;
    fast.max_pages_per_request = 0;
    assert_error_naming(pw_plan_create(&fast, NULL, &plan), PW_ERROR_INVALID_ARGUMENT,
                        "max_pages_per_request");
    assert_null(plan);
    fast.max_pages_per_request = 64;
    assert_pw_ok(pw_plan_create(&fast, NULL, &plan));
    pw_plan_destroy(plan);
    fast.num_tokens = 0;
    fast.num_cache_pages = 0;
    fast.max_pages_per_request = 0;
    assert_pw_ok(pw_plan_create(&fast, NULL, &plan));
    pw_plan_destroy(plan);
}

/* Host union metadata of pw_max_groups() groups (calloc'd, free with meta_free). */
static void meta_alloc(const test_case_t *tc, const pw_grouping_t *g, pw_union_meta_t *m)
{
    const int64_t hkv = tc->problem.num_kv_heads;
    m->max_groups = pw_max_groups(&tc->problem, g);
    m->union_capacity = g->group_size * tc->problem.topk;
    const size_t cells = (size_t)(hkv * m->max_groups) + 1;
    m->num_groups = calloc((size_t)hkv, sizeof *m->num_groups);
    m->groups = calloc(cells, sizeof *m->groups);
    m->union_pages = calloc(cells * (size_t)m->union_capacity, sizeof *m->union_pages);
    m->member_masks = calloc(cells * (size_t)m->union_capacity, 1);
    assert_true(m->num_groups && m->groups && m->union_pages && m->member_masks);
}

static void meta_free(pw_union_meta_t *m)
{
    free(m->num_groups);
    free(m->groups);
    free(m->union_pages);
    free(m->member_masks);
}

/* A window near INT32_MAX is one window per request, exactly like W = 0 (the header
 * promises any W >= 1); it used to overflow `row0 += W` and crash. */
static void test_huge_windows(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x15);
    const int32_t windows[] = {INT32_MAX, INT32_MAX - 1, INT32_MAX - 7, (1 << 30) + 1};
    for (int trial = 0; trial < 20; trial++) {
        test_case_t tc;
        case_random(&tc, &rng, 40, 24);
        const int32_t g = (int32_t)pw_rng_range(&rng, 1, 8);
        const pw_regroup_mode_t mode = (pw_regroup_mode_t)pw_rng_range(&rng, 0, 2);
        const size_t n = (size_t)tc.problem.num_kv_heads * (size_t)tc.problem.num_tokens + 1;
        int32_t *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
        assert_true(want && got);
        const pw_grouping_t g0 = grouping_of(mode, 0, g);
        assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &g0, want));
        pw_union_meta_t m0;
        meta_alloc(&tc, &g0, &m0);
        assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &g0, want, &m0));
        pw_union_stats_t s0;
        assert_pw_ok(pw_union_stats(&tc.problem, &m0, &s0, NULL));
        int64_t windows0 = 0;
        assert_pw_ok(pw_union_stats_windows(&tc.problem, &tc.requests, &g0, &m0, NULL, 0, &windows0));
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
            const pw_grouping_t gw = grouping_of(mode, windows[w], g);
            memset(got, 0xff, n * sizeof *got);
            assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &gw, got));
            assert_memory_equal(got, want, (n - 1) * sizeof *got);
            pw_union_meta_t mw;
            meta_alloc(&tc, &gw, &mw);
            assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &gw, got, &mw));
            for (int32_t h = 0; h < tc.problem.num_kv_heads; h++) {
                assert_int_equal(mw.num_groups[h], m0.num_groups[h]);
                for (int32_t i = 0; i < m0.num_groups[h]; i++) {
                    const int64_t a0 = h * m0.max_groups + i, aw = h * mw.max_groups + i;
                    assert_memory_equal(mw.groups + aw, m0.groups + a0, sizeof *m0.groups);
                    assert_memory_equal(mw.union_pages + aw * mw.union_capacity,
                                        m0.union_pages + a0 * m0.union_capacity,
                                        (size_t)m0.union_capacity * sizeof *m0.union_pages);
                }
            }
            pw_union_stats_t sw;
            assert_pw_ok(pw_union_stats(&tc.problem, &mw, &sw, NULL));
            assert_int_equal(sw.union_visits, s0.union_visits);
            assert_int_equal(sw.selections, s0.selections);
            int64_t count = 0;
            assert_pw_ok(pw_union_stats_windows(&tc.problem, &tc.requests, &gw, &mw, NULL, 0, &count));
            assert_int_equal(count, windows0);
            meta_free(&mw);
        }
        meta_free(&m0);
        free(want);
        free(got);
        case_free(&tc);
    }
}

/* Every device entry point reports a machine without a GPU the same way. Runs where
 * pw_sparse_prefill says NO_DEVICE (a CUDA build on a machine without a GPU); a build
 * without CUDA must say UNSUPPORTED everywhere; on a GPU machine there is nothing to test
 * here (the GPU tests cover those calls). */
static void test_no_device_everywhere(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x16);
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = 256;
    p.max_pages_per_request = 4;
    p.num_cache_pages = 4;
    /* Host buffers stand in for device ones: without a device nothing is dereferenced. */
    static int32_t cu[2] = {0, 256}, prefix[1] = {0}, kv[1] = {256}, table[4] = {0, 1, 2, 3};
    static int32_t topk[256 * 16], perm[256];
    static _Alignas(16) pw_bf16_t q[256 * 16 * 128];
    static _Alignas(16) pw_fp8_e4m3_t cache[4 * 128 * 128];
    static _Alignas(16) pw_bf16_t o[256 * 16 * 128];
    static float scale = 1.0f;
    static _Alignas(16) unsigned char workspace[4 << 20];
    for (int i = 0; i < 256 * 16; i++) topk[i] = (int32_t)pw_rng_range(&rng, 0, 3);
    pw_attention_args_t a = pw_test_host_args(q, cache, &scale, topk, cu, prefix, kv, table, 4, o);

    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    size_t bytes = 0;
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    assert_true(bytes <= sizeof workspace);
    const pw_status_t full = pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL);
    printf("pw_sparse_prefill on this machine: %s (%s)\n", pw_status_string(full),
           full == PW_SUCCESS ? "" : pw_last_error());
    pw_union_meta_t meta;
    pw_grouping_t grouping;
    int32_t *unused_perm = NULL;
    assert_pw_ok(pw_plan_workspace_views(plan, workspace, bytes, &unused_perm, &meta, &grouping));
    const pw_grouping_t regroup = grouping_of(PW_REGROUP_GUARDED, 128, 8);
    pw_status_t expect;
#ifdef PW_HAVE_CUDA
    if (full != PW_ERROR_NO_DEVICE) {
        printf("a CUDA device is present: the no-device behaviour is not testable here\n");
        pw_plan_destroy(plan);
        return;
    }
    expect = PW_ERROR_NO_DEVICE;
    const char *word = "no usable CUDA device";
#else
    assert_int_equal(full, PW_ERROR_UNSUPPORTED);
    expect = PW_ERROR_UNSUPPORTED;
    const char *word = "built without CUDA";
#endif
    assert_error_naming(pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL), expect, word);
    assert_error_naming(pw_regroup(&p, topk, &a.requests, &regroup, perm, NULL, 0, NULL), expect, word);
    /* pw_regroup_workspace_size: its argument checks first in both builds, then (no CUDA)
     * UNSUPPORTED (a fresh user's trial, 2026-12-04). */
    {
        size_t ws = 1;
        assert_error_naming(pw_regroup_workspace_size(&p, &regroup, NULL), PW_ERROR_INVALID_ARGUMENT,
                            "bytes is NULL");
        assert_int_equal(pw_regroup_workspace_size(NULL, &regroup, &ws), PW_ERROR_INVALID_ARGUMENT);
        assert_int_equal(pw_regroup_workspace_size(&p, NULL, &ws), PW_ERROR_INVALID_ARGUMENT);
        ws = 1; /* written by the call below, whatever it returns */
#ifdef PW_HAVE_CUDA
        assert_pw_ok(pw_regroup_workspace_size(&p, &regroup, &ws));
#else
        assert_error_naming(pw_regroup_workspace_size(&p, &regroup, &ws), PW_ERROR_UNSUPPORTED, word);
#endif
        assert_int_equal(ws, 0);
    }
    assert_error_naming(pw_union_prepare(&p, topk, &a.requests, &grouping, perm, &meta, NULL), expect, word);
    for (int k = 0; k < 3; k++)
        assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &meta, (pw_kernel_t)k, NULL),
                            expect, word);
    /* A bad argument is still reported as such first, in both builds (without CUDA since
     * 2026-12-05: the stubs make the device-independent checks the CUDA build makes). */
    assert_error_naming(pw_regroup(&p, NULL, &a.requests, &regroup, perm, NULL, 0, NULL), PW_ERROR_INVALID_ARGUMENT,
                        "topk_ids and perm must not be NULL");
    assert_error_naming(pw_union_prepare(&p, topk, &a.requests, &grouping, perm, NULL, NULL), PW_ERROR_INVALID_ARGUMENT,
                        "meta is NULL");
    assert_error_naming(pw_union_attention(&p, NULL, &grouping, perm, &meta, PW_KERNEL_UNION4, NULL),
                        PW_ERROR_INVALID_ARGUMENT, "args is NULL");
    {
        pw_attention_args_t no_o = a;
        no_o.o = NULL;
        assert_error_naming(pw_union_attention(&p, &no_o, &grouping, perm, &meta, PW_KERNEL_UNION4, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "args.o");
        pw_grouping_t auto_mode = regroup;
        auto_mode.mode = PW_REGROUP_AUTO;
        assert_error_naming(pw_regroup(&p, topk, &a.requests, &auto_mode, perm, NULL, 0, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "AUTO is a plan's mode");
        /* The metadata's capacity and the union kernels' grouping, permutation and buffers:
         * the build without CUDA makes these checks too (a review, 2026-12-05: it skipped
         * them and answered "built without CUDA"). */
        pw_union_meta_t short_meta = meta;
        short_meta.union_capacity = 8 * p.topk - 1;
        assert_error_naming(pw_union_prepare(&p, topk, &a.requests, &grouping, perm, &short_meta, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "meta.union_capacity is 127");
        short_meta.union_capacity = -5;
        assert_error_naming(pw_union_prepare(&p, topk, &a.requests, &grouping, perm, &short_meta, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "meta.union_capacity is -5");
        for (int k = 0; k < 2; k++) { /* Union8, Union4 */
            const pw_kernel_t kernel = (pw_kernel_t)k;
            short_meta.union_capacity = 8 * p.topk - 1;
            assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &short_meta, kernel, NULL),
                                PW_ERROR_INVALID_ARGUMENT, "meta capacities too small");
            short_meta = meta;
            short_meta.max_groups -= 1;
            assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &short_meta, kernel, NULL),
                                PW_ERROR_INVALID_ARGUMENT, "meta capacities too small");
            short_meta = meta;
            short_meta.member_masks = NULL;
            assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &short_meta, kernel, NULL),
                                PW_ERROR_INVALID_ARGUMENT, "every meta buffer");
            short_meta = meta;
            assert_error_naming(pw_union_attention(&p, &a, &grouping, NULL, &meta, kernel, NULL),
                                PW_ERROR_INVALID_ARGUMENT, "every meta buffer");
            assert_error_naming(pw_union_attention(&p, &a, NULL, perm, &meta, kernel, NULL),
                                PW_ERROR_INVALID_ARGUMENT, "grouping is NULL");
            pw_grouping_t fours = grouping;
            fours.group_size = 4;
            assert_error_naming(pw_union_attention(&p, &a, &fours, perm, &meta, kernel, NULL),
                                PW_ERROR_UNSUPPORTED, "group_size = 8");
        }
        /* Per-query attention reads no grouping or metadata. */
        assert_error_naming(pw_union_attention(&p, &a, NULL, NULL, NULL, PW_KERNEL_PER_QUERY, NULL), expect, word);
    }
#ifdef PW_HAVE_CUDA
    /* max_pages_per_request left at PW_PROBLEM_INIT's 0 with N > 0: the device steps name it
     * as the references do (a fresh user's trial, 2026-12-03: they reported no device, and
     * on a GPU the regroup would have treated every id as past the table). */
    {
        pw_problem_t no_columns = p;
        no_columns.max_pages_per_request = 0;
        const pw_grouping_t identity = grouping_of(PW_REGROUP_IDENTITY, 128, 8);
        assert_error_naming(pw_regroup(&no_columns, topk, &a.requests, &regroup, perm, NULL, 0, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "problem.max_pages_per_request is 0");
        assert_error_naming(pw_regroup(&no_columns, topk, &a.requests, &identity, perm, NULL, 0, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "problem.max_pages_per_request is 0");
        assert_error_naming(pw_union_prepare(&no_columns, topk, &a.requests, &grouping, perm, &meta, NULL),
                            PW_ERROR_INVALID_ARGUMENT, "problem.max_pages_per_request is 0");
    }
    /* Per-token scales: Union8 does not read them, and says so before anything runs;
     * negative strides, misaligned pointers and indices past 2^62 are invalid. */
    static _Alignas(16) float token_scale[4 * 128];
    a.token_scales.k = token_scale;
    a.token_scales.stride_t = 1;
    assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &meta, PW_KERNEL_UNION8, NULL),
                        PW_ERROR_UNSUPPORTED, "token_scales");
    a.token_scales.stride_t = -1;
    assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &meta, PW_KERNEL_UNION4, NULL),
                        PW_ERROR_INVALID_ARGUMENT, "token_scales");
    a.token_scales.stride_t = (int64_t)1 << 60; /* 512 slots: the last at ~2^69 */
    assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &meta, PW_KERNEL_UNION4, NULL),
                        PW_ERROR_INVALID_ARGUMENT, "token_scales");
    a.token_scales.stride_t = 1;
    a.token_scales.k = NULL;
    a.token_scales.v = (const float *)((const char *)token_scale + 2);
    assert_error_naming(pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL), PW_ERROR_INVALID_ARGUMENT,
                        "token_scales");
    a.token_scales.v = NULL;
    /* Strided caches: the tensor maps need strides that are multiples of 16. */
    a.cache_layout.page_stride = 128 * 128 + 8;
    a.cache_layout.token_stride = 128;
    assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &meta, PW_KERNEL_UNION4, NULL),
                        PW_ERROR_INVALID_ARGUMENT, "cache_layout");
    assert_error_naming(pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL), PW_ERROR_INVALID_ARGUMENT,
                        "cache_layout");
    a.cache_layout.page_stride = a.cache_layout.token_stride = 0;
    /* Sinks as keys: the kernels read 16-byte vectors of them. */
    a.sink_keys = q + 1;
    assert_error_naming(pw_union_attention(&p, &a, &grouping, perm, &meta, PW_KERNEL_UNION4, NULL),
                        PW_ERROR_INVALID_ARGUMENT, "sink_keys");
    assert_error_naming(pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL), PW_ERROR_INVALID_ARGUMENT,
                        "sink_keys");
    a.sink_keys = NULL;
#endif
    pw_plan_destroy(plan);
}

/* pw_sparse_prefill pads a Top-K of 1..64 to Kd = 16 / 32 / 64 on the device; its output
 * overlap check sizes the caller's topk_ids by the caller's K (a review, 2026-12-05: sized
 * by Kd, an output right after a K = 20 id array was refused). Host buffers stand in for
 * device ones: every call here stops at the host checks, or runs in a build without CUDA. */
static void test_padded_topk_overlap(void **state)
{
    (void)state;
    enum { N = 4, K = 20, HQD = 16 * 128 };
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = N;
    p.max_pages_per_request = 4;
    p.num_cache_pages = 4;
    p.topk = K;
    static int32_t cu[2] = {0, N}, prefix[1] = {0}, kv[1] = {N}, table[4] = {0, 1, 2, 3};
    static _Alignas(16) pw_bf16_t q[N * HQD];
    static _Alignas(16) pw_fp8_e4m3_t cache[4 * 128 * 128];
    static float scale = 1.0f;
    /* [N, K] ids, then O right after them (the ids take 320 bytes, Kd = 32 would be 512) */
    static _Alignas(16) unsigned char block[N * K * 4 + N * HQD * 2];
    static _Alignas(16) unsigned char workspace[1 << 20];
    int32_t *ids = (int32_t *)(void *)block;
    for (int i = 0; i < N * K; i++) ids[i] = i % 4;
    pw_attention_args_t a = pw_test_host_args(q, cache, &scale, ids, cu, prefix, kv, table, 4, block + N * K * 4);
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    size_t bytes = 0;
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    assert_true(bytes <= sizeof workspace);
    /* The plan's problem has Kd = 32: sized by it, the ids would reach into O. */
    pw_problem_t padded = p;
    padded.topk = 32;
    assert_pw_ok(pw_check_gpu_attention_args_k(&padded, &a, PW_KERNEL_UNION4, K));
    assert_error_naming(pw_check_gpu_attention_args_k(&padded, &a, PW_KERNEL_UNION4, 32), PW_ERROR_INVALID_ARGUMENT,
                        "args.o overlaps args.topk_ids");
#ifndef PW_HAVE_CUDA
    assert_error_naming(pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL), PW_ERROR_UNSUPPORTED,
                        "built without CUDA");
#endif
    /* O over the caller's last id: refused before anything is queued, in every build. */
    a.o = block + N * K * 4 - 4;
    assert_error_naming(pw_sparse_prefill(plan, &a, NULL, workspace, bytes, NULL), PW_ERROR_INVALID_ARGUMENT,
                        "args.o overlaps args.topk_ids");
    pw_plan_destroy(plan);
}

/* V^T buffers whose stacked tile would read per-token scales the pre-pass did not write
 * (ts_tiles 0) are refused before anything is queued; with ts_tiles set, or without scales,
 * the same buffers pass. Host only: pw_check_vt_stack reads no device memory. */
static void test_stacked_scales_need_ts_tiles(void **state)
{
    (void)state;
    pw_problem_t problem = PW_PROBLEM_INIT;
    problem.num_tokens = 64;
    problem.num_requests = 1;
    problem.num_kv_heads = 2;
    problem.max_pages_per_request = 3;
    pw_attention_args_t args = PW_ATTENTION_ARGS_INIT;
    args.precision = PW_PRECISION_FP8X2;
    static const float scales[1] = {1.0f}; /* never read: the check looks at the pointers */
    args.token_scales.k = scales;
    args.token_scales.v = scales;
    static uint64_t touched[16]; /* the marks (2 x 1 x 3 entries) and stack_stat right after them */
    pw_vt_buffers_t vt;
    memset(&vt, 0, sizeof vt);
    vt.touched = (uint8_t *)touched;
    vt.stack_mode = PW_STACK_ALWAYS;
    vt.stack_stat = (unsigned long long *)(void *)(vt.touched + PW_STACK_STAT_OFFSET(2 * 1 * 3));
    vt.ts_tiles = 0;
    assert_error_naming(pw_check_vt_stack(&problem, &args, &vt), PW_ERROR_INVALID_ARGUMENT, "ts_tiles");
    vt.ts_tiles = 1;
    assert_int_equal(pw_check_vt_stack(&problem, &args, &vt), PW_SUCCESS);
    vt.ts_tiles = 0;
    args.token_scales.k = args.token_scales.v = NULL; /* no scales: nothing to read */
    assert_int_equal(pw_check_vt_stack(&problem, &args, &vt), PW_SUCCESS);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_pages_left_zero),
        cmocka_unit_test(test_huge_windows),
        cmocka_unit_test(test_no_device_everywhere),
        cmocka_unit_test(test_padded_topk_overlap),
        cmocka_unit_test(test_stacked_scales_need_ts_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
