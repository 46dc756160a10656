/* Host-side tests of the full-call plan (pw_plan_create, pw_plan_workspace_size,
 * pw_plan_workspace_views, argument errors of pw_sparse_prefill): everything that needs no
 * GPU. The device behaviour is tested in tests/gpu/test_full_call_gpu.c.
 *
 * Usage: test_plan [--seed N] */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t g_seed;

static pw_problem_t fast_problem(int32_t n, int32_t r, int32_t hkv)
{
    pw_problem_t p = PW_PROBLEM_INIT;
    p.num_tokens = n;
    p.num_requests = r;
    p.num_kv_heads = hkv;
    p.max_pages_per_request = 512;
    p.num_cache_pages = 512 * (int64_t)r;
    return p;
}

static size_t align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

/* The pre-pass's CTA schedule part: 256 bytes of class counts, then 17 class lists of
 * 2 x Hkv x max_groups int32; sched_part: for the plan's W128 groups. */
static size_t sched_bytes(size_t hkv, size_t max_groups)
{
    return align256(256 + (size_t)17 * 2 * hkv * max_groups * 4);
}

static size_t sched_part(const pw_problem_t *p)
{
    pw_grouping_t g = PW_GROUPING_INIT;
    return sched_bytes((size_t)p->num_kv_heads, (size_t)pw_max_groups(p, &g));
}

/* The V^T pre-pass rule's host half (pageweaver.h, PW_PLAN_VT_PREPASS): N >= 4096, or N >=
 * 2048 with the caller's K >= 32; at most 4 page-table entries per selection; the scan's
 * grid fits; since 2026-12-05 also where a KV head may fall back (more entries than tiles)
 * when the tile limit is the default 2,048 per KV head, else N >= 8192 there. C = min(R x
 * max_pages, N x K / 64, the tile limit). */
static void test_vt_prepass_rule(void **state)
{
    (void)state;
    static const struct {
        int32_t n, k, r, hkv;
        int64_t max_pages;
        int32_t vt_max_pages;
        uint32_t flags;
        int vt;
        int64_t cap;
    } cases[] = {
        {4096, 16, 1, 1, 512, 0, 0u, 1, 512},   {4095, 16, 1, 1, 512, 0, 0u, 0, 0},
        {4096, 8, 1, 1, 512, 0, 0u, 1, 512},    {4096, 1, 1, 1, 512, 0, 0u, 1, 64},
        {2048, 32, 1, 1, 512, 0, 0u, 1, 512},   {2047, 32, 1, 1, 512, 0, 0u, 0, 0},
        {2048, 64, 1, 1, 512, 0, 0u, 1, 512},   {2047, 64, 1, 1, 512, 0, 0u, 0, 0},
        {1024, 64, 1, 1, 512, 0, 0u, 0, 0},     {2048, 31, 1, 1, 512, 0, 0u, 0, 0},
        {4095, 31, 1, 1, 512, 0, 0u, 0, 0},     {4096, 31, 1, 1, 512, 0, 0u, 1, 512},
        {3000, 40, 1, 1, 512, 0, 0u, 1, 512},
        /* a table sized for 1M-token contexts: on (it needed N >= 8192 until 2026-12-05) */
        {4096, 16, 1, 1, 8192, 0, 0u, 1, 1024}, {2048, 32, 1, 1, 8192, 0, 0u, 1, 1024},
        {4096, 16, 4, 1, 8192, 0, 0u, 1, 1024}, {16384, 16, 1, 1, 8192, 0, 0u, 1, 2048},
        /* ... but not with fewer tiles than the default per KV head (32 KV heads: 1,024;
         * a caller's vt_max_pages), where the 8,192 queries still hold */
        {4096, 16, 1, 32, 8192, 0, 0u, 0, 0},   {8192, 16, 1, 32, 8192, 0, 0u, 1, 1024},
        {4096, 16, 1, 1, 8192, 1024, 0u, 0, 0}, {4096, 16, 1, 1, 512, 1024, 0u, 1, 512},
        {4096, 16, 1, 1, 8192, 4096, 0u, 1, 1024},
        /* more than 4 entries per selection: off */
        {4096, 16, 1, 1, 4 * 4096 * 16 + 1, 0, 0u, 0, 0}, {4096, 16, 1, 1, 4 * 4096 * 16, 0, 0u, 1, 1024},
        /* the scan's grid past 2^31 - 1 CTAs (Hkv x ceil(R x max_pages / 256)): off */
        {1 << 25, 64, 16, 64, (int64_t)1 << 29, 0, 0u, 0, 0},
        {1 << 25, 64, 16, 64, ((int64_t)1 << 29) - 256, 0, 0u, 1, 512},
        /* the flags decide */
        {4096, 16, 1, 1, 512, 0, PW_PLAN_NO_VT_PREPASS, 0, 0}, {1024, 16, 1, 1, 512, 0, PW_PLAN_VT_PREPASS, 1, 512},
        {1024, 16, 1, 1, 8192, 0, PW_PLAN_VT_PREPASS, 1, 2048}, {4096, 16, 1, 1, 8192, 1, PW_PLAN_VT_PREPASS, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pw_problem_t p = fast_problem(cases[i].n, cases[i].r, cases[i].hkv);
        p.topk = cases[i].k;
        p.max_pages_per_request = (int32_t)cases[i].max_pages;
        p.num_cache_pages = cases[i].max_pages * cases[i].r;
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.flags = cases[i].flags;
        cfg.vt_max_pages = cases[i].vt_max_pages;
        pw_plan_t *plan = NULL;
        assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
        pw_plan_info_t info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
        if (info.vt_prepass != cases[i].vt || info.vt_capacity != cases[i].cap)
            fail_msg("case %zu (N %d, K %d, R %d, Hkv %d, max_pages %lld, vt_max_pages %d, flags %u): vt_prepass %d "
                     "capacity %lld, expected %d / %lld", i, cases[i].n, cases[i].k, cases[i].r, cases[i].hkv,
                     (long long)cases[i].max_pages, cases[i].vt_max_pages, cases[i].flags, info.vt_prepass,
                     (long long)info.vt_capacity, cases[i].vt, (long long)cases[i].cap);
        pw_plan_destroy(plan);
    }
}

/* The size query adds up the documented parts, each 256-byte aligned, + 255 bytes
 * (N >= 1; N = 0 needs no workspace, test_prefill_argument_errors). */
static void test_workspace_size_formula(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    for (int trial = 0; trial < 50; trial++) {
        const int32_t n = (int32_t)pw_rng_range(&rng, 1, 40000), r = (int32_t)pw_rng_range(&rng, 1, 9);
        const int32_t hkv = (int32_t)pw_rng_range(&rng, 1, 8);
        const pw_problem_t p = fast_problem(n, r, hkv);
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.window = pw_rng_range(&rng, 0, 1) ? 64 : 128;
        cfg.regroup = (pw_regroup_mode_t)pw_rng_range(&rng, 0, 3); /* AUTO too */
        const int caller = (int)pw_rng_range(&rng, 0, 1);
        cfg.flags = caller ? PW_PLAN_CALLER_PERM : 0u;
        pw_plan_t *plan = NULL;
        assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
        size_t bytes = 0;
        assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
        /* The plan's groups: window 0 (runs of 8 per request) for IDENTITY, and for an AUTO
         * plan whose time guard keeps identity order in both precisions (pw_plan_info gives
         * the guard's choice; test_time_guard checks the choice itself). */
        int auto_identity = cfg.regroup == PW_REGROUP_AUTO && !caller;
        for (int prec = 0; prec < 2 && auto_identity; prec++) {
            pw_plan_info_t info = PW_PLAN_INFO_INIT;
            assert_pw_ok(pw_plan_info(plan, (pw_precision_t)prec, &info));
            auto_identity = info.regroup == PW_REGROUP_IDENTITY;
        }
        pw_grouping_t g = PW_GROUPING_INIT;
        g.window = ((cfg.regroup == PW_REGROUP_IDENTITY || auto_identity) && !caller) ? 0 : cfg.window;
        const size_t mg = (size_t)pw_max_groups(&p, &g);
        size_t expect = 0;
        if (!caller) expect += align256((size_t)hkv * (size_t)n * 4);
        expect += align256((size_t)hkv * 4);
        expect += align256((size_t)hkv * mg * sizeof(pw_group_desc_t));
        expect += align256((size_t)hkv * mg * 128 * 4);
        expect += align256((size_t)hkv * mg * 128);
        /* pw_regroup_workspace_size is 0 today (documented); the plan adds it as it is. */
        /* The default kernel (Union4) with the V^T pre-pass (the host half of the rule of
         * pageweaver.h: N >= 4096, R x max_pages <= 4 x N x K, always here): touched bytes
         * and int32 tile slots [Hkv, R, max_pages],
         * the tile list (int64), the counts, the 32 KiB tiles, C = min(R x max_pages,
         * N x K / 64, 2048) per KV head, and the CTA schedule (256 bytes of class counts,
         * then 17 class lists of 2 x Hkv x max_groups int32). */
        size_t cap = (size_t)r * 512;
        if (cap > (size_t)n * 16 / 64) cap = (size_t)n * 16 / 64;
        if (cap > 2048) cap = 2048;
        /* ... also where a KV head may fall back (R x max_pages > C; until 2026-12-05 that
         * needed N >= 8192). */
        if (n >= 4096) {
            const size_t entries = (size_t)hkv * (size_t)r * 512;
            /* The regroup objective by tile: FP8X2 calls pick their tile per call here (G =
             * 16, K = 16, P = 128), so a plan that regroups in FP8X2 holds a second
             * permutation [Hkv, N] int32. */
            pw_plan_info_t x2 = PW_PLAN_INFO_INIT;
            assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &x2));
            if (!caller && x2.regroup != PW_REGROUP_IDENTITY) expect += align256((size_t)hkv * (size_t)n * 4);
            /* G = 16, K = 16, P = 128: the marks are followed by the FP8X2 tile choice's two
             * counts and work counter (8-byte aligned, 32 bytes; pw_vt_buffers_t.stack_stat). */
            expect += align256(((entries + 7) & ~(size_t)7) + 32) + align256(entries * 4) + align256((size_t)hkv * cap * 8) +
                      align256((size_t)hkv * 4) + align256((size_t)hkv * cap * 32768) +
                      sched_bytes((size_t)hkv, mg); /* the CTA schedule */
        }
        expect += 255;
        assert_int_equal(bytes, expect);

        /* Views: inside the buffer, 256-byte aligned, disjoint, in the documented order,
         * for any base alignment. */
        const uintptr_t base = 0x100000 + (uintptr_t)pw_rng_range(&rng, 0, 255);
        int32_t *perm = NULL;
        pw_union_meta_t m;
        pw_grouping_t vg;
        assert_pw_ok(pw_plan_workspace_views(plan, (void *)base, bytes, &perm, &m, &vg));
        assert_int_equal(vg.group_size, 8);
        assert_int_equal(vg.window, g.window);
        assert_int_equal(m.max_groups, (int64_t)mg);
        assert_int_equal(m.union_capacity, 128);
        const uintptr_t parts[5] = {(uintptr_t)perm, (uintptr_t)m.num_groups, (uintptr_t)m.groups,
                                    (uintptr_t)m.union_pages, (uintptr_t)m.member_masks};
        const size_t sizes[5] = {(size_t)hkv * n * 4, (size_t)hkv * 4, (size_t)hkv * mg * sizeof(pw_group_desc_t),
                                 (size_t)hkv * mg * 512, (size_t)hkv * mg * 128};
        uintptr_t prev_end = base;
        for (int i = 0; i < 5; i++) {
            if (i == 0 && caller) {
                assert_true(perm == NULL);
                continue;
            }
            assert_true(parts[i] % 256 == 0);
            assert_true(parts[i] >= prev_end);
            prev_end = parts[i] + sizes[i];
            assert_true(prev_end <= base + bytes);
        }
        assert_int_equal(pw_plan_workspace_views(plan, (void *)base, bytes - 1, NULL, NULL, NULL),
                         PW_ERROR_INSUFFICIENT_WORKSPACE);
        pw_plan_destroy(plan);
    }
}

static void test_per_query_needs_no_workspace(void **state)
{
    (void)state;
    const pw_problem_t p = fast_problem(1000, 2, 2);
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.kernel = PW_KERNEL_PER_QUERY;
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    size_t bytes = 1;
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    assert_int_equal(bytes, 0);
    int32_t *perm = (int32_t *)&bytes;
    pw_union_meta_t m;
    assert_pw_ok(pw_plan_workspace_views(plan, NULL, 0, &perm, &m, NULL));
    assert_null(perm);
    assert_null(m.union_pages);
    pw_plan_destroy(plan);
    /* No call of a per-query plan regroups: its info says IDENTITY and window 0 in every
     * mode and window (a review, 2026-12-05: GREEDY / GUARDED reported window 128). */
    const pw_regroup_mode_t modes[4] = {PW_REGROUP_IDENTITY, PW_REGROUP_GREEDY, PW_REGROUP_GUARDED,
                                        PW_REGROUP_AUTO};
    const int32_t windows[3] = {PW_WINDOW_AUTO, 64, 128};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            cfg.regroup = modes[i];
            cfg.window = windows[j];
            assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
            for (int prec = 0; prec < 2; prec++) {
                pw_plan_info_t info = PW_PLAN_INFO_INIT;
                assert_pw_ok(pw_plan_info(plan, (pw_precision_t)prec, &info));
                assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);
                assert_int_equal(info.window, 0);
            }
            pw_grouping_t g;
            assert_pw_ok(pw_plan_workspace_views(plan, NULL, 0, NULL, NULL, &g));
            assert_int_equal(g.mode, PW_REGROUP_IDENTITY);
            assert_int_equal(g.window, 0);
            pw_plan_destroy(plan);
        }
}

static void test_create_errors(void **state)
{
    (void)state;
    const pw_problem_t p = fast_problem(100, 1, 1);
    pw_plan_t *plan = (pw_plan_t *)&state; /* must be reset to NULL on failure */
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    assert_int_equal(pw_plan_create(&p, &cfg, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_plan_create(NULL, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    assert_null(plan);

    cfg.struct_size = 4;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.window = 96;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "window"));
    cfg.flags = PW_PLAN_CALLER_PERM; /* a caller's perm may use any window */
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    pw_plan_destroy(plan);
    cfg.window = -2;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "PW_WINDOW_AUTO"));
    /* PW_WINDOW_AUTO is INIT's window, and what pw_abi_query reports for it (-1 is also its
     * "unknown name", so this cannot tell a dropped name from the value; the offset query
     * at least shows the struct's names are there) */
    assert_int_equal(((pw_plan_config_t)PW_PLAN_CONFIG_INIT).window, PW_WINDOW_AUTO);
    assert_int_equal(pw_abi_query("init pw_plan_config_t.window"), PW_WINDOW_AUTO);
    assert_int_equal(pw_abi_query("offsetof pw_plan_config_t.window"), (int64_t)offsetof(pw_plan_config_t, window));
    cfg.window = PW_WINDOW_AUTO; /* a caller's perm: windows of 128 (the default before) */
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    {
        pw_grouping_t g;
        assert_pw_ok(pw_plan_workspace_views(plan, (void *)(uintptr_t)4096, SIZE_MAX, NULL, NULL, &g));
        assert_int_equal(g.window, 128);
    }
    pw_plan_destroy(plan);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.regroup = PW_REGROUP_IDENTITY;
    cfg.window = 7; /* ignored in identity order */
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    pw_plan_destroy(plan);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.kernel = (pw_kernel_t)7;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    /* A product past 2^63 in a message is printed as a double, not a wrapped integer (it
     * printed -1709652929499103232 here). */
    pw_problem_t vast = fast_problem(100, 1000000, 65535);
    vast.max_pages_per_request = 1 << 29;
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_VT_PREPASS;
    assert_int_equal(pw_plan_create(&vast, &cfg, &plan), PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "= 3.518e+19 page-table entries"));
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.regroup = (pw_regroup_mode_t)9;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.flags = 0x80; /* past PW_PLAN_NO_REGROUP_BY_TILE (1 << 6) */
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    /* The 8-query regroup objective: accepted with every kernel, same workspace. */
    for (int k = 0; k < 3; k++) {
        const pw_kernel_t kernels[3] = {PW_KERNEL_UNION4, PW_KERNEL_UNION8, PW_KERNEL_PER_QUERY};
        size_t a = 0, b = 0;
        cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
        cfg.kernel = kernels[k];
        assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
        assert_pw_ok(pw_plan_workspace_size(plan, &a));
        pw_plan_destroy(plan);
        cfg.flags = PW_PLAN_REGROUP_GROUPS_OF_8;
        assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
        assert_pw_ok(pw_plan_workspace_size(plan, &b));
        pw_plan_destroy(plan);
        assert_int_equal(a, b);
    }
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_CALLER_PERM;
    cfg.kernel = PW_KERNEL_PER_QUERY;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    /* The V^T pre-pass flags: not both, Union4 only; forcing it adds its workspace parts
     * (100 queries: the rule alone would not run it), refusing it drops them. */
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_VT_PREPASS | PW_PLAN_NO_VT_PREPASS;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    /* The pre-pass parts alone below (PW_PLAN_NO_REGROUP_BY_TILE: the second permutation of the
     * objective by tile is test_regroup_by_tile_workspace's). */
    cfg.flags = PW_PLAN_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
    cfg.kernel = PW_KERNEL_UNION8;
    assert_int_equal(pw_plan_create(&p, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    cfg.kernel = PW_KERNEL_UNION4;
    size_t with = 0, without = 0;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    /* one KV head, 512 entries (+ the FP8X2 tile choice's 32 bytes of counts) and tiles,
     * and the CTA schedule (sized by the groups) */
    const size_t parts_512 = align256(512 + 32) + align256(512 * 4) + align256(512 * 8) + align256(4) +
                             align256((size_t)512 * 32768) + sched_part(&p);
    assert_int_equal(with - without, parts_512);
    const pw_problem_t big = fast_problem(40000, 1, 1); /* the rule runs the pre-pass */
    /* (without the second permutation of the objective by tile: test_regroup_by_tile_workspace) */
    cfg.flags = PW_PLAN_NO_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&big, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&big, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_int_equal(with - without, parts_512 - sched_part(&p) + sched_part(&big));
    /* A page table sized for a 1M-token context (an engine's): 5 bytes per entry, and tiles
     * for C = min(R x max_pages, N x K / 64, vt_max_pages) pages, not one per entry. */
    pw_problem_t engine = fast_problem(16384, 2, 1);
    engine.max_pages_per_request = 8192;
    engine.num_cache_pages = 20000;
    const size_t e_fixed = align256(16384 + 32) + align256(16384 * 4) + align256(4);
    const int32_t caps[3] = {0, 100, 9000};       /* vt_max_pages */
    const size_t expect_cap[3] = {2048, 100, 4096}; /* 0: 2048; 9000: N x K / 64 = 4096 */
    for (int i = 0; i < 3; i++) {
        cfg.flags = PW_PLAN_NO_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
        cfg.vt_max_pages = caps[i];
        assert_pw_ok(pw_plan_create(&engine, &cfg, &plan));
        assert_pw_ok(pw_plan_workspace_size(plan, &without));
        pw_plan_destroy(plan);
        cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
        assert_pw_ok(pw_plan_create(&engine, &cfg, &plan));
        assert_pw_ok(pw_plan_workspace_size(plan, &with));
        pw_plan_destroy(plan);
        assert_int_equal(with - without,
                         e_fixed + align256(expect_cap[i] * 8) + align256(expect_cap[i] * 32768) + sched_part(&engine));
    }
    cfg.vt_max_pages = -1;
    assert_int_equal(pw_plan_create(&engine, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "vt_max_pages"));
    cfg.vt_max_pages = 0;
    /* Many KV heads: the default tile limit keeps 1 GiB of 32 KiB tiles in all (32768 / 64
     * = 512 per KV head). */
    pw_problem_t heads = engine;
    heads.num_kv_heads = 64;
    heads.num_requests = 1;
    cfg.flags = PW_PLAN_NO_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&heads, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&heads, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_int_equal(with - without, align256(64 * 8192 + 32) + align256(64 * 8192 * 4) + align256(64 * 4) +
                                         align256(64 * 512 * 8) + align256((size_t)64 * 512 * 32768) +
                                         sched_part(&heads));
    /* A table with more than 4 entries per selection: the rule leaves the pre-pass out (its
     * per-call clear and scan cover every entry); forcing it still works. */
    pw_problem_t widest = fast_problem(8192, 1, 1);
    widest.max_pages_per_request = 4 * 8192 * 16 + 1;
    widest.num_cache_pages = 1000;
    cfg.flags = PW_PLAN_NO_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&widest, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&widest, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_int_equal(with, without);
    widest.max_pages_per_request -= 1; /* exactly 4 per selection: the rule takes it */
    assert_pw_ok(pw_plan_create(&widest, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_true(with > without);
    /* Fewer than 8,192 queries on a table with more entries than tiles (a KV head may fall
     * back): the rule takes it since 2026-12-05 (it left it out before), as with as many
     * entries as tiles. */
    pw_problem_t mid = fast_problem(4096, 1, 1); /* C = min(entries, 4096 x 16 / 64 = 1024, 2048) */
    mid.max_pages_per_request = 1025;
    mid.num_cache_pages = 1025;
    cfg.flags = PW_PLAN_NO_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&mid, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&mid, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_true(with > without);
    mid.max_pages_per_request = 1024;
    assert_pw_ok(pw_plan_create(&mid, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_true(with > without);
    /* A config of the size before vt_max_pages is read with the default; smaller is an error. */
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_NO_VT_PREPASS | PW_PLAN_NO_REGROUP_BY_TILE;
    assert_pw_ok(pw_plan_create(&engine, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_REGROUP_BY_TILE;
    cfg.vt_max_pages = -1; /* not read */
    cfg.struct_size = (uint32_t)offsetof(pw_plan_config_t, vt_max_pages);
    assert_pw_ok(pw_plan_create(&engine, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    assert_int_equal(with - without, e_fixed + align256(2048 * 8) + align256((size_t)2048 * 32768) + sched_part(&engine));
    cfg.struct_size -= 4;
    assert_int_equal(pw_plan_create(&engine, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    /* A 16-byte object: refused without reading past it (the size is checked first). */
    uint32_t *small = calloc(4, sizeof *small);
    assert_non_null(small);
    small[0] = 16;
    assert_int_equal(pw_plan_create(&engine, (const pw_plan_config_t *)(void *)small, &plan),
                     PW_ERROR_INVALID_ARGUMENT);
    free(small);
    cfg = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
    /* Device limits are plan-creation errors, not failures half-way through a call: the
     * pre-pass scan's grid (Hkv x R x max_pages / 256 < 2^31 - 1; the rule falls back to the
     * other kernel), union preparation's page keys (max_pages <= 2^29). */
    pw_problem_t many = fast_problem(300000, 65536, 1);
    many.max_pages_per_request = 1 << 23; /* 2^39 entries */
    many.num_cache_pages = 70000;
    cfg.flags = PW_PLAN_VT_PREPASS;
    assert_int_equal(pw_plan_create(&many, &cfg, &plan), PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "scan"));
    cfg.flags = 0;
    assert_pw_ok(pw_plan_create(&many, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &with));
    pw_plan_destroy(plan);
    cfg.flags = PW_PLAN_NO_VT_PREPASS;
    assert_pw_ok(pw_plan_create(&many, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &without));
    pw_plan_destroy(plan);
    assert_int_equal(with, without); /* the rule did not pick the pre-pass */
    pw_problem_t wide = fast_problem(100, 1, 1);
    wide.max_pages_per_request = (1 << 29) + 1;
    wide.num_cache_pages = wide.max_pages_per_request;
    cfg.flags = 0;
    assert_int_equal(pw_plan_create(&wide, &cfg, &plan), PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "2^29"));

    /* Shapes off the fast path: unsupported, with the shape named. */
    pw_problem_t q = p;
    q.topk = 65;
    assert_int_equal(pw_plan_create(&q, NULL, &plan), PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "K=65"));
    /* K = 17..64: padded to 32 or 64; Union4 (default, AUTO: identity order for this small
     * chunk, GREEDY / GUARDED regroup in windows of 64 / 128) and per-query plans; Union8
     * refuses, naming K;
     * PW_PLAN_CALLER_PERM takes any regroup mode (the caller's perm). */
    {
        const int32_t ks[4] = {17, 32, 40, 64};
        const int32_t kd[4] = {32, 32, 64, 64};
        for (int i = 0; i < 4; i++) {
            q = p;
            q.topk = ks[i];
            assert_pw_ok(pw_plan_create(&q, NULL, &plan));
            pw_plan_info_t info = PW_PLAN_INFO_INIT;
            assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
            assert_int_equal(info.regroup, PW_REGROUP_IDENTITY);
            pw_union_meta_t meta;
            size_t bytes = 0;
            assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
            assert_pw_ok(pw_plan_workspace_views(plan, (void *)(uintptr_t)4096, bytes, NULL, &meta, NULL));
            assert_int_equal(meta.union_capacity, 8 * kd[i]);
            pw_plan_destroy(plan);
            pw_plan_config_t kc = PW_PLAN_CONFIG_INIT;
            kc.kernel = PW_KERNEL_PER_QUERY;
            assert_pw_ok(pw_plan_create(&q, &kc, &plan));
            assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
            /* per-query: only the padded rows (none when K = Kd) */
            assert_int_equal(bytes, ks[i] == kd[i] ? 0 : align256((size_t)q.num_kv_heads * q.num_tokens * kd[i] * 4) + 255);
            pw_plan_destroy(plan);
            kc = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
            kc.kernel = PW_KERNEL_UNION8;
            assert_int_equal(pw_plan_create(&q, &kc, &plan), PW_ERROR_UNSUPPORTED);
            assert_non_null(strstr(pw_last_error(), "Union8"));
            kc = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
            /* GREEDY / GUARDED run the wide-Top-K regroup (windows 64 / 128 only); AUTO asks
             * the time guard's K > 16 form, which keeps identity order for these 100 rows
             * (test_time_guard: large chunks regroup). */
            kc.regroup = i % 2 ? PW_REGROUP_GREEDY : PW_REGROUP_GUARDED;
            assert_pw_ok(pw_plan_create(&q, &kc, &plan));
            {
                pw_plan_info_t ri = PW_PLAN_INFO_INIT;
                for (int x2 = 0; x2 < 2; x2++) {
                    assert_pw_ok(pw_plan_info(plan, x2 ? PW_PRECISION_FP8X2 : PW_PRECISION_FP8, &ri));
                    assert_int_equal(ri.regroup, kc.regroup);
                    /* the K > 16 guard's figures: the wide kernel's cost, a small saving */
                    assert_true(ri.cost_us > 10.0 && ri.saving_us < ri.cost_us);
                }
                pw_plan_destroy(plan);
                kc.window = 32;
                assert_int_equal(pw_plan_create(&q, &kc, &plan), PW_ERROR_UNSUPPORTED);
                assert_non_null(strstr(pw_last_error(), "window"));
                kc.window = 128;
                kc.regroup = PW_REGROUP_AUTO;
                assert_pw_ok(pw_plan_create(&q, &kc, &plan));
                for (int x2 = 0; x2 < 2; x2++) {
                    assert_pw_ok(pw_plan_info(plan, x2 ? PW_PRECISION_FP8X2 : PW_PRECISION_FP8, &ri));
                    assert_int_equal(ri.regroup, PW_REGROUP_IDENTITY);
                }
                pw_plan_destroy(plan);
                kc.regroup = i % 2 ? PW_REGROUP_GREEDY : PW_REGROUP_GUARDED;
            }
            kc.flags = PW_PLAN_CALLER_PERM;
            assert_pw_ok(pw_plan_create(&q, &kc, &plan));
            pw_plan_destroy(plan);
            kc = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
            kc.regroup = PW_REGROUP_IDENTITY;
            assert_pw_ok(pw_plan_create(&q, &kc, &plan));
            pw_plan_destroy(plan);
            /* Per-query ignores the regroup mode, for any K. */
            kc = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
            kc.kernel = PW_KERNEL_PER_QUERY;
            kc.regroup = PW_REGROUP_GREEDY;
            assert_pw_ok(pw_plan_create(&q, &kc, &plan));
            pw_plan_destroy(plan);
            /* No regroup runs: any window cuts the union groups (K = 16 keeps 64 / 128). */
            kc = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
            kc.window = i % 2 ? 0 : 32;
            assert_pw_ok(pw_plan_create(&q, &kc, &plan));
            pw_grouping_t grouping;
            assert_pw_ok(pw_plan_workspace_views(plan, (void *)(uintptr_t)4096, SIZE_MAX, NULL, NULL, &grouping));
            assert_int_equal(grouping.window, kc.window);
            pw_plan_destroy(plan);
            pw_problem_t q16 = q;
            q16.topk = 16;
            assert_int_equal(pw_plan_create(&q16, &kc, &plan), PW_ERROR_UNSUPPORTED);
            assert_non_null(strstr(pw_last_error(), "window"));
            /* G = 8 / 4 with the V^T pre-pass: the dense tiles (8 K / 16 K-entry page lists). */
            for (int gq = 4; gq <= 8; gq += 4) {
                pw_problem_t qg = q;
                qg.q_heads_per_kv = gq;
                kc = (pw_plan_config_t)PW_PLAN_CONFIG_INIT;
                kc.flags = PW_PLAN_VT_PREPASS;
                assert_pw_ok(pw_plan_create(&qg, &kc, &plan));
                pw_plan_info_t gi = PW_PLAN_INFO_INIT;
                assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &gi));
                assert_int_equal(gi.vt_prepass, 1);
                assert_int_equal(gi.dense_tile, 1);
                assert_int_equal(gi.regroup, PW_REGROUP_IDENTITY);
                pw_plan_destroy(plan);
                qg.topk = 16; /* the dense tile at K = 16 */
                assert_pw_ok(pw_plan_create(&qg, &kc, &plan));
                assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &gi));
                assert_int_equal(gi.dense_tile, 1);
                pw_plan_destroy(plan);
            }
        }
    }
    /* K < 16: the plan pads the rows to 16 (one [Hkv, N, 16] int32 part more; everything
     * else as for K = 16), for every kernel, per-query included. */
    for (int k = 1; k <= 8; k += 7) {
        size_t bytes16 = 0, bytes_k = 0;
        const pw_plan_config_t kcfg[2] = {PW_PLAN_CONFIG_INIT, {sizeof(pw_plan_config_t), PW_REGROUP_AUTO, 128,
                                                                PW_KERNEL_PER_QUERY, 0u, 0, 0}};
        for (int c = 0; c < 2; c++) {
            q = p;
            assert_pw_ok(pw_plan_create(&q, &kcfg[c], &plan));
            assert_pw_ok(pw_plan_workspace_size(plan, &bytes16));
            pw_plan_destroy(plan);
            q.topk = k;
            assert_pw_ok(pw_plan_create(&q, &kcfg[c], &plan));
            assert_pw_ok(pw_plan_workspace_size(plan, &bytes_k));
            pw_plan_destroy(plan);
            const size_t pad = align256((size_t)q.num_kv_heads * q.num_tokens * 16 * 4);
            if (c == 0) assert_int_equal(bytes_k, bytes16 + pad);
            else assert_int_equal(bytes_k, pad + 255); /* per-query: only the padded rows */
        }
    }
    /* Pages of 64 tokens: Union4 (default) and per-query plans; Union8 and other sizes refuse. */
    q = p;
    q.page_size = 64;
    assert_pw_ok(pw_plan_create(&q, NULL, &plan));
    pw_plan_destroy(plan);
    {
        pw_plan_config_t c64 = PW_PLAN_CONFIG_INIT;
        c64.kernel = PW_KERNEL_PER_QUERY;
        assert_pw_ok(pw_plan_create(&q, &c64, &plan));
        pw_plan_destroy(plan);
        c64.kernel = PW_KERNEL_UNION8;
        assert_int_equal(pw_plan_create(&q, &c64, &plan), PW_ERROR_UNSUPPORTED);
        assert_non_null(strstr(pw_last_error(), "P=64"));
        assert_non_null(strstr(pw_last_error(), "Union8"));
    }
    const int32_t other_pages[3] = {32, 256, 100};
    for (int i = 0; i < 3; i++) {
        q = p;
        q.page_size = other_pages[i];
        assert_int_equal(pw_plan_create(&q, NULL, &plan), PW_ERROR_UNSUPPORTED);
        char want[16];
        snprintf(want, sizeof want, "P=%d", other_pages[i]);
        assert_non_null(strstr(pw_last_error(), want));
    }
    /* G = 8 and 4 (the padded tile): Union4 (default) and per-query plans; Union8 refuses. */
    for (int g = 4; g <= 8; g += 4) {
        q = p;
        q.q_heads_per_kv = g;
        assert_pw_ok(pw_plan_create(&q, NULL, &plan));
        pw_plan_destroy(plan);
        pw_plan_config_t c8 = PW_PLAN_CONFIG_INIT;
        c8.kernel = PW_KERNEL_UNION8;
        assert_int_equal(pw_plan_create(&q, &c8, &plan), PW_ERROR_UNSUPPORTED);
        assert_non_null(strstr(pw_last_error(), "Union8"));
    }
    q = p;
    q.q_heads_per_kv = 2;
    assert_int_equal(pw_plan_create(&q, NULL, &plan), PW_ERROR_UNSUPPORTED);
    assert_non_null(strstr(pw_last_error(), "G=2"));
    q = p;
    q.num_tokens = -1;
    assert_int_equal(pw_plan_create(&q, NULL, &plan), PW_ERROR_INVALID_ARGUMENT);
    assert_null(plan);
    pw_plan_destroy(NULL);
}

/* Errors found on the host before anything is enqueued (no GPU needed). */
static void test_prefill_argument_errors(void **state)
{
    (void)state;
    const pw_problem_t p = fast_problem(100, 1, 1);
    pw_plan_t *plan = NULL;
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    size_t bytes = 0;
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    void *ws = (void *)(uintptr_t)0x1000; /* never dereferenced on these paths */
    int32_t dummy[4] = {0};
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    assert_int_equal(pw_sparse_prefill(NULL, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_sparse_prefill(plan, NULL, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_sparse_prefill(plan, &a, dummy, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "PW_PLAN_CALLER_PERM"));
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes - 1, NULL), PW_ERROR_INSUFFICIENT_WORKSPACE);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, NULL, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "topk_ids"));
    a.topk_ids = dummy;
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.q is NULL"));
    pw_plan_destroy(plan);

    /* Every check of pw_union_attention comes before anything is enqueued: with fake
     * (never dereferenced) device pointers, a bad precision, stride or alignment is an
     * argument error, in builds with and without CUDA alike. */
    assert_pw_ok(pw_plan_create(&p, NULL, &plan));
    void *fake = (void *)(uintptr_t)0x10000;
    const pw_attention_args_t g = pw_test_host_args(fake, fake, fake, fake, fake, fake, fake, fake, 512, fake);
    a = g;
    a.precision = (pw_precision_t)7;
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "precision"));
    a = g;
    a.q_stride = 100;
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.q"));
    /* A struct of the size before `precision` existed is accepted (and read as FP8): the
     * call gets past the struct check to the stride check. */
    a.struct_size = (uint32_t)offsetof(pw_attention_args_t, precision);
    a.precision = (pw_precision_t)7; /* outside the old struct: not read */
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.q"));
    a.struct_size = (uint32_t)offsetof(pw_attention_args_t, precision) - 4;
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "struct_size"));
    a = g;
    a.o_dtype = PW_DTYPE_FLOAT32;
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_UNSUPPORTED);
    /* Each missing tensor and each misaligned output is named (the GPU stores LSE as floats
     * and adds to bad_page_count atomically: a misaligned one would fault). */
    a = g;
    a.requests.kv_lens = NULL;
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.requests.kv_lens is NULL"));
    a = g;
    a.lse = (float *)((uintptr_t)fake + 2);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.lse"));
    a = g;
    a.bad_page_count = (uint32_t *)((uintptr_t)fake + 1);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.bad_page_count"));
    a = g;
    a.o = (void *)((uintptr_t)fake + 2);
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "args.o must be 4-byte aligned"));
    pw_plan_destroy(plan);

    /* N = 0: nothing to do, the tensors may be NULL; a CUDA build returns success without
     * touching a device, a build without CUDA says so. */
    const pw_problem_t p0 = fast_problem(0, 1, 1);
    assert_pw_ok(pw_plan_create(&p0, NULL, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    pw_attention_args_t e = PW_ATTENTION_ARGS_INIT;
    e.o_dtype = PW_DTYPE_BFLOAT16;
    const pw_status_t st0 = pw_sparse_prefill(plan, &e, NULL, ws, bytes, NULL);
    /* No workspace either (the header: NULL and 0 when the size is 0), and the attention
     * entry point reads neither perm nor the metadata. */
    assert_int_equal(bytes, 0);
    const pw_status_t st1 = pw_sparse_prefill(plan, &e, NULL, NULL, 0, NULL);
    const pw_status_t st2 = pw_union_attention(&p0, &e, NULL, NULL, NULL, PW_KERNEL_UNION4, NULL);
#ifdef PW_HAVE_CUDA
    assert_int_equal(st0, PW_SUCCESS);
    assert_int_equal(st1, PW_SUCCESS);
    assert_int_equal(st2, PW_SUCCESS);
#else
    assert_int_equal(st0, PW_ERROR_UNSUPPORTED);
    assert_int_equal(st1, PW_ERROR_UNSUPPORTED);
    assert_int_equal(st2, PW_ERROR_UNSUPPORTED);
#endif
    pw_plan_destroy(plan);

    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_CALLER_PERM;
    assert_pw_ok(pw_plan_create(&p, &cfg, &plan));
    assert_pw_ok(pw_plan_workspace_size(plan, &bytes));
    assert_int_equal(pw_sparse_prefill(plan, &a, NULL, ws, bytes, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "perm is NULL"));
    pw_plan_destroy(plan);
}

/* One query's valid pages as (request, id) keys, from the definition of S_i written out
 * here (docs/semantics.md §1: page l is kept iff its first token l P is <= the query's causal
 * position c and < kv_len; and l < max_pages_per_request), appended to keys. */
static int append_keys(const pw_capture_t *c, int32_t h, int64_t i, uint64_t *keys, int count)
{
    const pw_problem_t *p = &c->problem;
    if (i >= p->num_tokens) return count;
    int32_t r = 0;
    while (!(c->cu_seqlens_q[r] <= i && i < c->cu_seqlens_q[r + 1])) r++;
    const int64_t pos = c->prefix_lens[r] + (i - c->cu_seqlens_q[r]);
    for (int k = 0; k < p->topk; k++) {
        const int64_t id = c->topk_ids[((int64_t)h * p->num_tokens + i) * p->topk + k];
        if (id < 0 || id >= p->max_pages_per_request) continue;
        if (id * p->page_size > pos || id * p->page_size >= c->kv_lens[r]) continue;
        keys[count++] = ((uint64_t)r << 32) | (uint64_t)id;
    }
    return count;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t count_distinct(uint64_t *keys, int count)
{
    qsort(keys, (size_t)count, sizeof *keys, cmp_u64);
    int64_t d = 0;
    for (int k = 0; k < count; k++) d += k == 0 || keys[k] != keys[k - 1];
    return d;
}

/* pw_fp8x2_stack_choice against a brute force (sorted key lists per unit and block: pairs
 * and blocks of 4 at G = 16, 4-query halves and blocks of 8 at G = 8, 8-query groups and
 * blocks of 16 at G = 4; every 4th block of each KV head) on random problems
 * with every edge of the semantics (-1 rows, duplicates, future and huge ids, 1-query
 * requests, partial pages), K 16 and below; the rule's side at each G; errors. And the
 * plan's fp8x2_stacked: 1 by default on a G = 16, 8 or 4, K = 16, P = 128 plan with the
 * pre-pass in FP8X2, 2 / 0 with the flags (FP8 too since the 34th session: the stacked tile
 * with its second term 0), 0 in FP8 by default, without the pre-pass and at K = 32; its
 * token_scales_stacked (calls with per-token scales): 2 by default in FP8X2 at every G and
 * in FP8 at G = 8 / 4, 1 (per call) in FP8 at G = 16, 2 / 0 with the flags, 0 without the pre-pass and at K = 32; both
 * flags together are an argument error. */
static void test_fp8x2_stack_choice(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x57ac4ull);
    for (int trial = 0; trial < 24; trial++) {
        const int topk = trial % 3 == 2 ? (int)pw_rng_range(&rng, 1, 15) : 16;
        pw_capture_t *c = pw_test_random_attention_problem_k(&rng, g_seed + (uint64_t)trial, 1 + trial % 3,
                                                             1 + trial % 4, 40, 0, 2000, 300, topk);
        static const int32_t gs[3] = {16, 8, 4};
        c->problem.q_heads_per_kv = gs[(trial / 3) % 3]; /* the counts read only the ids and G */
        const pw_problem_t *p = &c->problem;
        const int unit = p->q_heads_per_kv == 8 ? 4 : p->q_heads_per_kv == 4 ? 8 : 2; /* queries per unit; a block is two */
        const pw_requests_t rq = pw_capture_requests(c);
        uint64_t counts[2] = {7, 7}, expect[2] = {0, 0};
        int stacked = -1;
        assert_pw_ok(pw_fp8x2_stack_choice(p, c->topk_ids, &rq, counts, &stacked));
        for (int32_t h = 0; h < p->num_kv_heads; h++)
            for (int64_t i0 = 0; i0 < p->num_tokens; i0 += 2 * unit * 4) { /* every 4th block (PW_STACK_SAMPLE) */
                uint64_t a[128], b[128], ab[256];
                int na = 0, nb = 0;
                for (int q = 0; q < unit; q++) {
                    na = append_keys(c, h, i0 + q, a, na);
                    nb = append_keys(c, h, i0 + unit + q, b, nb);
                }
                memcpy(ab, a, (size_t)na * 8);
                memcpy(ab + na, b, (size_t)nb * 8);
                expect[0] += (uint64_t)(count_distinct(a, na) + count_distinct(b, nb));
                expect[1] += (uint64_t)count_distinct(ab, na + nb);
            }
        assert_int_equal(counts[0], expect[0]);
        assert_int_equal(counts[1], expect[1]);
        const uint64_t milli = p->q_heads_per_kv == 8 ? 840 : p->q_heads_per_kv == 4 ? 870 : 750;
        assert_int_equal(stacked, expect[0] * 1000 < milli * 2 * expect[1]);
        pw_capture_free(c);
    }
    /* The rule's two sides on hand-made rows: one request, 16 queries at a 6,000-token prefix
     * (47 visible pages); all 16 ids shared by every query (ratio 1 at both G), or a
     * distinct-page pattern: G = 16, 11 pages per query, disjoint across each block of four
     * (ratio 0.5); G = 8, 5 pages per query, disjoint across each block of eight (0.5); and
     * at G = 8 the G = 16 pattern, whose halves repeat across the block (ratio 1: the dense
     * tile); G = 4, 2 pages per query, disjoint across each block of sixteen (0.5), and the
     * G = 8 pattern, whose 8-query units repeat across the block (1). */
    const struct {
        int g, pattern, stacked;
    } sides[] = {{16, 0, 0}, {16, 1, 1}, {8, 0, 0}, {8, 2, 1}, {8, 1, 0}, {4, 0, 0}, {4, 3, 1}, {4, 2, 0}};
    for (size_t k = 0; k < sizeof sides / sizeof sides[0]; k++) {
        pw_problem_t p = PW_PROBLEM_INIT;
        p.q_heads_per_kv = sides[k].g;
        p.num_tokens = 16;
        p.num_requests = 1;
        p.max_pages_per_request = 64;
        p.num_cache_pages = 64;
        int32_t ids[16 * 16], cu[2] = {0, 16}, prefix[1] = {6000}, kv[1] = {6016};
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
                ids[i * 16 + j] = sides[k].pattern == 0   ? j
                                  : sides[k].pattern == 1 ? (i % 4) * 11 + j % 11
                                  : sides[k].pattern == 2 ? (i % 8) * 5 + j % 5
                                                          : (i % 16) * 2 + j % 2;
        pw_requests_t rq = {cu, prefix, kv, NULL, 64};
        int32_t table[64];
        for (int j = 0; j < 64; j++) table[j] = j;
        rq.page_table = table;
        uint64_t counts[2];
        int stacked = -1;
        assert_pw_ok(pw_fp8x2_stack_choice(&p, ids, &rq, counts, &stacked));
        printf("  G = %d pattern %d: units %llu, blocks %llu -> %s\n", sides[k].g, sides[k].pattern,
               (unsigned long long)counts[0], (unsigned long long)counts[1], stacked ? "stacked" : "other tile");
        assert_int_equal(stacked, sides[k].stacked);
    }
    /* Errors. */
    pw_problem_t p = fast_problem(8, 1, 1);
    int32_t ids[8 * 32] = {0}, cu[2] = {0, 8}, prefix[1] = {0}, kv[1] = {8}, table[512] = {0};
    const pw_requests_t rq = {cu, prefix, kv, table, 512};
    uint64_t counts[2];
    int stacked;
    assert_int_equal(pw_fp8x2_stack_choice(&p, NULL, &rq, counts, &stacked), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_fp8x2_stack_choice(&p, ids, &rq, NULL, &stacked), PW_ERROR_INVALID_ARGUMENT);
    p.topk = 32;
    assert_int_equal(pw_fp8x2_stack_choice(&p, ids, &rq, counts, &stacked), PW_ERROR_UNSUPPORTED);

    /* The plan's report. */
    const struct {
        int32_t topk, n, g;
        uint32_t flags;
        int32_t x2, fp8, ts_x2, ts_fp8; /* fp8x2_stacked per precision; token_scales_stacked likewise */
    } cases[] = {
        {16, 16384, 16, 0, 1, 0, 2, 1},
        {16, 16384, 16, PW_PLAN_FP8X2_STACKED, 2, 2, 2, 2},
        {16, 16384, 16, PW_PLAN_NO_FP8X2_STACKED, 0, 0, 0, 0},
        {12, 16384, 16, 0, 1, 0, 2, 1},               /* K < 16: padded to 16 */
        {16, 1024, 16, 0, 0, 0, 0, 0},                /* no pre-pass (N < 4096) */
        {16, 1024, 16, PW_PLAN_VT_PREPASS, 1, 0, 2, 1},
        {32, 16384, 16, PW_PLAN_FP8X2_STACKED, 0, 0, 0, 0}, /* K = 32: the lean kernel's tile only */
        {16, 16384, 8, 0, 1, 0, 2, 2},                /* G = 8: the dense tile or the 4-slot stacked tile */
        {16, 16384, 8, PW_PLAN_FP8X2_STACKED, 2, 2, 2, 2},
        {16, 16384, 8, PW_PLAN_NO_FP8X2_STACKED, 0, 0, 0, 0},
        {32, 16384, 8, 0, 0, 0, 0, 0},                /* K = 32: the dense tile only */
        {16, 16384, 4, 0, 1, 0, 2, 2},                /* G = 4: the dense tile or the 8-slot stacked tile */
        {16, 16384, 4, PW_PLAN_FP8X2_STACKED, 2, 2, 2, 2},
        {16, 16384, 4, PW_PLAN_NO_FP8X2_STACKED, 0, 0, 0, 0},
        {32, 16384, 4, 0, 0, 0, 0, 0},                /* K = 32: the dense tile only */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pw_problem_t q = fast_problem(cases[k].n, 1, 1);
        q.topk = cases[k].topk;
        q.q_heads_per_kv = cases[k].g;
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.flags = cases[k].flags;
        pw_plan_t *plan = NULL;
        assert_pw_ok(pw_plan_create(&q, &cfg, &plan));
        pw_plan_info_t info = PW_PLAN_INFO_INIT, info8 = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &info));
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8, &info8));
        assert_int_equal(info.struct_size, sizeof(pw_plan_info_t));
        assert_int_equal(info.fp8x2_stacked, cases[k].x2);
        assert_int_equal(info8.fp8x2_stacked, cases[k].fp8);
        assert_int_equal(info.token_scales_stacked, cases[k].ts_x2);
        assert_int_equal(info8.token_scales_stacked, cases[k].ts_fp8);
        /* A caller built against the struct before a field gets the others, not it. */
        pw_plan_info_t old = PW_PLAN_INFO_INIT;
        old.struct_size = (uint32_t)offsetof(pw_plan_info_t, fp8x2_stacked);
        old.fp8x2_stacked = -5;
        old.token_scales_stacked = -6;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &old));
        assert_int_equal(old.struct_size, offsetof(pw_plan_info_t, fp8x2_stacked));
        assert_int_equal(old.fp8x2_stacked, -5);
        assert_int_equal(old.token_scales_stacked, -6);
        assert_int_equal(old.vt_prepass, info.vt_prepass);
        /* a struct_size ending at fp8x2_stacked: not token_scales_stacked (a caller built
         * against the earlier header passes sizeof, the same 80 bytes: it gets the field in
         * its former tail padding; a library older than the field leaves INIT's -1) */
        pw_plan_info_t v4 = PW_PLAN_INFO_INIT;
        assert_int_equal(v4.token_scales_stacked, -1);
        assert_int_equal(pw_abi_query("offsetof pw_plan_info_t.token_scales_stacked"),
                         (int64_t)offsetof(pw_plan_info_t, token_scales_stacked));
        assert_int_equal(pw_abi_query("init pw_plan_info_t.token_scales_stacked"), -1); /* (also "unknown name") */
        v4.struct_size = (uint32_t)(offsetof(pw_plan_info_t, fp8x2_stacked) + sizeof v4.fp8x2_stacked);
        v4.token_scales_stacked = -6;
        assert_pw_ok(pw_plan_info(plan, PW_PRECISION_FP8X2, &v4));
        assert_int_equal(v4.struct_size, offsetof(pw_plan_info_t, fp8x2_stacked) + sizeof v4.fp8x2_stacked);
        assert_int_equal(v4.fp8x2_stacked, cases[k].x2);
        assert_int_equal(v4.token_scales_stacked, -6);
        pw_plan_destroy(plan);
    }
    pw_problem_t q = fast_problem(16384, 1, 1);
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.flags = PW_PLAN_FP8X2_STACKED | PW_PLAN_NO_FP8X2_STACKED;
    pw_plan_t *plan = NULL;
    assert_int_equal(pw_plan_create(&q, &cfg, &plan), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "PW_PLAN_FP8X2_STACKED"));
}

/* The regroup objective by tile (the default; PW_PLAN_NO_REGROUP_BY_TILE turns it off): one
 * more [Hkv, N] int32 part exactly where an FP8X2 call may choose its tile per call and the
 * plan regroups itself; the plan's report of g. */
static void test_regroup_by_tile_workspace(void **state)
{
    (void)state;
    const struct {
        int32_t topk, n, hkv, g;
        pw_regroup_mode_t mode;
        uint32_t flags;
        int extra;        /* 1: the part is there */
        int32_t g_x2, g8; /* pw_plan_info's regroup_group_size, FP8X2 / FP8 */
    } cases[] = {
        {16, 16384, 1, 16, PW_REGROUP_AUTO, 0, 1, 4, 4},
        {16, 16384, 3, 16, PW_REGROUP_GUARDED, 0, 1, 4, 4},
        {16, 16384, 1, 16, PW_REGROUP_GREEDY, PW_PLAN_REGROUP_GROUPS_OF_8, 1, 8, 8},
        {16, 16384, 1, 16, PW_REGROUP_AUTO, PW_PLAN_FP8X2_STACKED, 0, 2, 4}, /* always stacked: g = 2, no second perm */
        {16, 16384, 1, 16, PW_REGROUP_AUTO, PW_PLAN_NO_FP8X2_STACKED, 0, 4, 4},
        {16, 16384, 1, 16, PW_REGROUP_IDENTITY, 0, 0, 0, 0},
        {16, 16384, 1, 16, PW_REGROUP_AUTO, PW_PLAN_CALLER_PERM, 0, 0, 0},
        {16, 16384, 1, 16, PW_REGROUP_AUTO, PW_PLAN_NO_VT_PREPASS, 0, 4, 4},
        {32, 16384, 1, 16, PW_REGROUP_AUTO, 0, 0, 4, 4}, /* K = 32: no stacked tile */
        /* G = 8: the dense tile's g = 8, the stacked 4-slot tile's 4 (C_4) */
        {16, 16384, 1, 8, PW_REGROUP_GUARDED, 0, 1, 8, 8},
        {16, 16384, 1, 8, PW_REGROUP_GUARDED, PW_PLAN_FP8X2_STACKED, 0, 4, 8},
        {16, 16384, 1, 8, PW_REGROUP_GUARDED, PW_PLAN_NO_FP8X2_STACKED, 0, 8, 8},
        /* G = 4: both tiles walk 8-query unions (the dense tile a pair of them): g = 8, one perm */
        {16, 16384, 1, 4, PW_REGROUP_GUARDED, 0, 0, 8, 8},
        {16, 16384, 1, 4, PW_REGROUP_GUARDED, PW_PLAN_FP8X2_STACKED, 0, 8, 8},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pw_problem_t q = fast_problem(cases[k].n, 1, cases[k].hkv);
        q.topk = cases[k].topk;
        q.q_heads_per_kv = cases[k].g;
        pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
        cfg.regroup = cases[k].mode;
        cfg.flags = cases[k].flags;
        pw_plan_t *plain = NULL, *by_tile = NULL;
        assert_pw_ok(pw_plan_create(&q, &cfg, &by_tile));
        cfg.flags |= PW_PLAN_NO_REGROUP_BY_TILE;
        assert_pw_ok(pw_plan_create(&q, &cfg, &plain));
        size_t a = 0, b = 0;
        assert_pw_ok(pw_plan_workspace_size(plain, &a));
        assert_pw_ok(pw_plan_workspace_size(by_tile, &b));
        const size_t part = align256((size_t)q.num_kv_heads * (size_t)q.num_tokens * 4u);
        printf("  case %zu: workspace %zu -> %zu bytes (perm_alt part %s)\n", k, a, b, cases[k].extra ? "expected" : "not expected");
        assert_true(b == a + (cases[k].extra ? part : 0));
        pw_plan_info_t info = PW_PLAN_INFO_INIT, info8 = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(by_tile, PW_PRECISION_FP8X2, &info));
        assert_pw_ok(pw_plan_info(by_tile, PW_PRECISION_FP8, &info8));
        assert_int_equal(info.regroup_group_size, cases[k].g_x2);
        /* FP8 with the flag runs the stacked tile too (its second term 0), and regroups for it */
        assert_int_equal(info8.regroup_group_size, (cfg.flags & PW_PLAN_FP8X2_STACKED) ? cases[k].g_x2 : cases[k].g8);
        /* the plan without the flag: g = 4 (or 8) in both precisions */
        pw_plan_info_t plain_info = PW_PLAN_INFO_INIT;
        assert_pw_ok(pw_plan_info(plain, PW_PRECISION_FP8X2, &plain_info));
        assert_int_equal(plain_info.regroup_group_size, cases[k].g8);
        pw_plan_destroy(plain);
        pw_plan_destroy(by_tile);
    }
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vt_prepass_rule),
        cmocka_unit_test(test_workspace_size_formula),
        cmocka_unit_test(test_per_query_needs_no_workspace),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_prefill_argument_errors),
        cmocka_unit_test(test_fp8x2_stack_choice),
        cmocka_unit_test(test_regroup_by_tile_workspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
