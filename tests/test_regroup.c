/* pw_ref_regroup (docs/semantics.md §3, Algorithm 1): the worked examples, a naive brute-force greedy
 * on random inputs, the guarded rule window by window, argument errors, and contexts far
 * beyond 64K tokens giving the same permutation as the same selections relabelled to small
 * page ids. Rerun with --seed N. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t g_seed;

static int in_list(const int32_t *list, int32_t n, int32_t x)
{
    for (int32_t i = 0; i < n; i++)
        if (list[i] == x) return 1;
    return 0;
}

/* Algorithm 1 with plain loops: for every window, while queries remain: seed = smallest
 * remaining row, then repeatedly the remaining row with the fewest pages not yet in U
 * (ties: smallest row), recomputing |S_j \ U| from scratch against the list U. */
static void naive_greedy(const test_case_t *tc, int32_t window, int32_t g, int32_t *perm)
{
    const int32_t n_rows = tc->problem.num_tokens, k = tc->problem.topk;
    int32_t *sel = malloc(((size_t)n_rows * k + 1) * sizeof *sel);
    int32_t *cnt = malloc(((size_t)n_rows + 1) * sizeof *cnt);
    int32_t *unionl = malloc(((size_t)g * k + 1) * sizeof *unionl);
    int *taken = calloc((size_t)n_rows + 1, sizeof *taken);
    assert_true(sel && cnt && unionl && taken);
    for (int32_t h = 0; h < tc->problem.num_kv_heads; h++) {
        for (int32_t row = 0; row < n_rows; row++)
            cnt[row] = naive_selection(tc, h, row, sel + (int64_t)row * k);
        memset(taken, 0, ((size_t)n_rows + 1) * sizeof *taken);
        for (int32_t r = 0; r < tc->problem.num_requests; r++) {
            const int32_t b = tc->cu[r], e = tc->cu[r + 1];
            const int32_t w = window > 0 ? window : (e - b > 0 ? e - b : 1);
            for (int32_t a = b; a < e; a += w) {
                const int32_t z = a + w < e ? a + w : e;
                int32_t slot = a;
                while (slot < z) {
                    int32_t un = 0, members = 0;
                    while (members < g && slot < z) {
                        int32_t best = -1, best_cost = INT_MAX;
                        for (int32_t j = a; j < z; j++) {
                            if (taken[j]) continue;
                            int32_t cost = 0;
                            for (int32_t t = 0; t < cnt[j]; t++)
                                cost += !in_list(unionl, un, sel[(int64_t)j * k + t]);
                            if (members == 0) cost = 0; /* the seed: smallest remaining row */
                            if (cost < best_cost) {
                                best_cost = cost;
                                best = j;
                            }
                        }
                        taken[best] = 1;
                        for (int32_t t = 0; t < cnt[best]; t++)
                            if (!in_list(unionl, un, sel[(int64_t)best * k + t]))
                                unionl[un++] = sel[(int64_t)best * k + t];
                        perm[(int64_t)h * n_rows + slot++] = best;
                        members++;
                    }
                }
            }
        }
    }
    free(sel);
    free(cnt);
    free(unionl);
    free(taken);
}

/* Union visits of groups = runs of g slots inside windows, counted naively. */
static int64_t naive_window_visits(const test_case_t *tc, int32_t h, const int32_t *perm,
                                   int32_t a, int32_t z, int32_t g)
{
    const int32_t k = tc->problem.topk;
    int32_t *sel = malloc(((size_t)k + 1) * sizeof *sel);
    int32_t *unionl = malloc(((size_t)g * k + 1) * sizeof *unionl);
    assert_true(sel && unionl);
    int64_t visits = 0;
    for (int32_t s0 = a; s0 < z; s0 += g) {
        int32_t un = 0;
        for (int32_t s = s0; s < s0 + g && s < z; s++) {
            const int32_t row = perm[(int64_t)h * tc->problem.num_tokens + s];
            const int32_t n = naive_selection(tc, h, row, sel);
            for (int32_t t = 0; t < n; t++)
                if (!in_list(unionl, un, sel[t])) unionl[un++] = sel[t];
        }
        visits += un;
    }
    free(sel);
    free(unionl);
    return visits;
}

static void assert_bijection(const test_case_t *tc, const int32_t *perm)
{
    const int32_t n_rows = tc->problem.num_tokens;
    int *seen = calloc((size_t)n_rows + 1, sizeof *seen);
    assert_non_null(seen);
    for (int32_t h = 0; h < tc->problem.num_kv_heads; h++) {
        memset(seen, 0, ((size_t)n_rows + 1) * sizeof *seen);
        for (int32_t s = 0; s < n_rows; s++) {
            const int32_t row = perm[(int64_t)h * n_rows + s];
            const int32_t r = request_of(tc, s);
            if (row < tc->cu[r] || row >= tc->cu[r + 1] || seen[row])
                fail_msg("seed %llu: perm[%d, %d] = %d breaks the bijection of request %d",
                         (unsigned long long)g_seed, h, s, row, r);
            seen[row] = 1;
        }
    }
    free(seen);
}

/* Runs pw_ref_regroup; perm is [Hkv, N] (+1 so that N = 0 still allocates). */
static int32_t *regroup(const test_case_t *tc, pw_regroup_mode_t mode, int32_t window, int32_t g)
{
    int32_t *perm =
        malloc(((size_t)tc->problem.num_kv_heads * tc->problem.num_tokens + 1) * sizeof *perm);
    assert_non_null(perm);
    const pw_grouping_t grouping = grouping_of(mode, window, g);
    assert_pw_ok(pw_ref_regroup(&tc->problem, tc->topk, &tc->requests, &grouping, perm));
    return perm;
}

static int64_t visits_of(const test_case_t *tc, pw_regroup_mode_t mode, int32_t window,
                         int32_t g)
{
    pw_union_stats_t total;
    const pw_grouping_t grouping = grouping_of(mode, window, g);
    assert_pw_ok(pw_ref_grouping_stats(&tc->problem, tc->topk, &tc->requests, &grouping, &total,
                                       NULL));
    return total.union_visits;
}

/* One request of len(sets) queries, P = 1, every page 0..99 visible, K = max set size. */
static void case_from_sets(test_case_t *tc, int32_t n, int32_t k, const int32_t *sets)
{
    memset(tc, 0, sizeof *tc);
    tc->cu[1] = n;
    tc->prefix[0] = 100;
    tc->kv[0] = 100 + n;
    case_finish(tc, 1, 1, 1, k);
    memcpy(tc->topk, sets, (size_t)n * k * sizeof *sets);
}

/* ---- tests ------------------------------------------------------------------------- */

/* docs/semantics.md §3.2 (g = 3): pi = [0,2,3,1,4,5], union visits 10 -> 7. */
static void test_spec_example_3_2(void **state)
{
    (void)state;
    const int32_t sets[6 * 2] = {1, 2, 8, 9, 2, 3, 3, 4, 9, 10, 8, 10};
    test_case_t tc;
    case_from_sets(&tc, 6, 2, sets);
    static const int32_t expected[6] = {0, 2, 3, 1, 4, 5};
    const int32_t windows[] = {0, 6, 64, 128};
    for (int i = 0; i < 4; i++) {
        for (pw_regroup_mode_t mode = PW_REGROUP_GREEDY; mode <= PW_REGROUP_GUARDED; mode++) {
            int32_t *perm = regroup(&tc, mode, windows[i], 3);
            for (int s = 0; s < 6; s++) assert_int_equal(perm[s], expected[s]);
            free(perm);
            assert_int_equal(visits_of(&tc, mode, windows[i], 3), 7);
        }
        assert_int_equal(visits_of(&tc, PW_REGROUP_IDENTITY, windows[i], 3), 10);
    }
    case_free(&tc);
}

/* docs/semantics.md §3.2 (g = 2): greedy is worse (13) than the original order (12); guarded keeps it. */
static void test_spec_counterexample_8(void **state)
{
    (void)state;
    const int32_t sets[4 * 4] = {1, 2, 3, 4, 1, 2, 6, 7, 1, 2, 3, 5, 3, 5, 8, 9};
    test_case_t tc;
    case_from_sets(&tc, 4, 4, sets);
    int32_t *greedy = regroup(&tc, PW_REGROUP_GREEDY, 0, 2);
    static const int32_t expected_greedy[4] = {0, 2, 1, 3};
    for (int s = 0; s < 4; s++) assert_int_equal(greedy[s], expected_greedy[s]);
    free(greedy);
    int32_t *guarded = regroup(&tc, PW_REGROUP_GUARDED, 0, 2);
    for (int s = 0; s < 4; s++) assert_int_equal(guarded[s], s);
    free(guarded);
    assert_int_equal(visits_of(&tc, PW_REGROUP_IDENTITY, 0, 2), 12);
    assert_int_equal(visits_of(&tc, PW_REGROUP_GREEDY, 0, 2), 13);
    assert_int_equal(visits_of(&tc, PW_REGROUP_GUARDED, 0, 2), 12);
    case_free(&tc);
}

/* A tie on cost goes to the smallest id; the seed is the smallest remaining id even when
 * another query has fewer pages. */
static void test_ties_and_seed(void **state)
{
    (void)state;
    /* S0 = {5,6}, S1 = {}, S2 = {1}, S3 = {1}, g = 2: seed 0 (not the empty row 1, which
     * an argmin from an empty U would pick); costs 1:0 2:1 3:1 -> row 1; then {2, 3}. */
    const int32_t sets[4 * 2] = {5, 6, -1, -1, 1, -1, 1, 1};
    test_case_t tc;
    case_from_sets(&tc, 4, 2, sets);
    int32_t *perm = regroup(&tc, PW_REGROUP_GREEDY, 0, 2);
    static const int32_t expected[4] = {0, 1, 2, 3};
    for (int s = 0; s < 4; s++) assert_int_equal(perm[s], expected[s]);
    free(perm);
    /* S0 = {1,2}, S1 = {7}, S2 = {1,3}, S3 = {2,9}, g = 2: costs 1:1 2:1 3:1 -> row 1. */
    const int32_t sets2[4 * 2] = {1, 2, 7, 7, 1, 3, 2, 9};
    case_free(&tc);
    case_from_sets(&tc, 4, 2, sets2);
    perm = regroup(&tc, PW_REGROUP_GREEDY, 0, 2);
    static const int32_t expected2[4] = {0, 1, 2, 3};
    for (int s = 0; s < 4; s++) assert_int_equal(perm[s], expected2[s]);
    free(perm);
    /* g = 3: U must be updated after every addition. seed 0, U = {1,2}: costs 1:1 2:2
     * 3:2 -> row 1, U = {1,2,7}: costs 2:2 3:1 -> row 3 (a stale U would pick row 2). */
    const int32_t sets3[4 * 2] = {1, 2, 7, 7, 3, 4, 7, 9};
    case_free(&tc);
    case_from_sets(&tc, 4, 2, sets3);
    perm = regroup(&tc, PW_REGROUP_GREEDY, 0, 3);
    static const int32_t expected3[4] = {0, 1, 3, 2};
    for (int s = 0; s < 4; s++) assert_int_equal(perm[s], expected3[s]);
    free(perm);
    case_free(&tc);
}

/* Random inputs: greedy equals the naive implementation; every mode is a bijection inside
 * each request; identity is slot = row; guarded picks, per window, greedy iff it strictly
 * lowers the window's union visits, so it is never worse than identity in any window. */
static void test_random_against_naive(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    const int32_t windows[] = {1, 3, 8, 64, 128, 0};
    int64_t guarded_took_greedy = 0, guarded_kept_identity = 0, greedy_differs = 0;
    for (int iter = 0; iter < 60; iter++) {
        test_case_t tc;
        case_random(&tc, &rng, iter % 3 == 0 ? 300 : 40, 48);
        const int32_t window = windows[iter % 6];
        const int32_t g = (int32_t)pw_rng_range(&rng, 1, 8);
        const int32_t n_rows = tc.problem.num_tokens;
        int32_t *identity = regroup(&tc, PW_REGROUP_IDENTITY, window, g);
        int32_t *greedy = regroup(&tc, PW_REGROUP_GREEDY, window, g);
        int32_t *guarded = regroup(&tc, PW_REGROUP_GUARDED, window, g);
        int32_t *naive = malloc(((size_t)tc.problem.num_kv_heads * n_rows + 1) * sizeof *naive);
        assert_non_null(naive);
        naive_greedy(&tc, window, g, naive);
        assert_bijection(&tc, identity);
        assert_bijection(&tc, greedy);
        assert_bijection(&tc, guarded);
        for (int64_t i = 0; i < (int64_t)tc.problem.num_kv_heads * n_rows; i++) {
            assert_int_equal(identity[i], i % (n_rows > 0 ? n_rows : 1));
            if (greedy[i] != naive[i])
                fail_msg("seed %llu iter %d (W=%d g=%d): greedy perm[%lld] = %d, naive %d",
                         (unsigned long long)g_seed, iter, window, g, (long long)i, greedy[i],
                         naive[i]);
            greedy_differs += greedy[i] != identity[i];
        }
        for (int32_t h = 0; h < tc.problem.num_kv_heads; h++) {
            for (int32_t r = 0; r < tc.problem.num_requests; r++) {
                const int32_t b = tc.cu[r], e = tc.cu[r + 1];
                const int32_t w = window > 0 ? window : (e - b > 0 ? e - b : 1);
                for (int32_t a = b; a < e; a += w) {
                    const int32_t z = a + w < e ? a + w : e;
                    const int64_t v_id = naive_window_visits(&tc, h, identity, a, z, g);
                    const int64_t v_gr = naive_window_visits(&tc, h, greedy, a, z, g);
                    const int64_t v_gu = naive_window_visits(&tc, h, guarded, a, z, g);
                    const int32_t *want = v_gr < v_id ? greedy : identity;
                    for (int32_t s = a; s < z; s++)
                        assert_int_equal(guarded[(int64_t)h * n_rows + s],
                                         want[(int64_t)h * n_rows + s]);
                    assert_true(v_gu <= v_id);
                    guarded_took_greedy += v_gr < v_id;
                    guarded_kept_identity += !(v_gr < v_id);
                }
            }
        }
        free(identity);
        free(greedy);
        free(guarded);
        free(naive);
        case_free(&tc);
    }
    /* The random inputs exercise both branches of the guard and a real reordering. */
    printf("guarded: %lld windows regrouped, %lld kept; %lld slots moved by greedy\n",
           (long long)guarded_took_greedy, (long long)guarded_kept_identity,
           (long long)greedy_differs);
    assert_true(guarded_took_greedy > 0);
    assert_true(guarded_kept_identity > 0);
    assert_true(greedy_differs > 0);
}

/* Contexts of 200K and 1M tokens (pages up to ~8000, far past the paper's 512-page
 * bitmap) give the same permutation and the same per-group union sizes as the same
 * selections relabelled monotonically to small page ids (P = 1, pages 0..D-1). */
static void test_long_context_relabel(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x10e6);
    const int32_t contexts[] = {200000, 1000000};
    for (int c = 0; c < 2; c++) {
        test_case_t big;
        memset(&big, 0, sizeof big);
        const int32_t qlen[2] = {(int32_t)pw_rng_range(&rng, 150, 300),
                                 (int32_t)pw_rng_range(&rng, 1, 200)};
        for (int r = 0; r < 2; r++) {
            big.cu[r + 1] = big.cu[r] + qlen[r];
            big.kv[r] = contexts[c] - r * 1000;
            big.prefix[r] = big.kv[r] - qlen[r];
        }
        case_finish(&big, 2, 2, 128, 16);
        /* Valid ids: at most prefix / P, visible to every query of the request. */
        for (int32_t h = 0; h < 2; h++) {
            for (int32_t r = 0; r < 2; r++) {
                const int32_t max_valid = big.prefix[r] / 128;
                int32_t pool[300];
                for (int i = 0; i < 300; i++) pool[i] = (int32_t)pw_rng_range(&rng, 0, max_valid);
                pool[0] = max_valid;
                for (int32_t row = big.cu[r]; row < big.cu[r + 1]; row++) {
                    int32_t *ids = topk_row(&big, h, row);
                    for (int t = 0; t < 16; t++) {
                        const int64_t u = pw_rng_range(&rng, 0, 19);
                        ids[t] = u == 0   ? -1
                                 : u == 1 ? (big.kv[r] + 127) / 128 + 3 /* past the KV length */
                                 : u == 2 ? INT32_MAX
                                          : pool[pw_rng_range(&rng, 0, 299)];
                    }
                }
            }
        }
        /* Relabel: rank of each valid id among all valid ids of the call. */
        const int64_t cells = (int64_t)2 * big.problem.num_tokens * 16;
        int32_t *sorted = malloc((size_t)cells * sizeof *sorted);
        assert_non_null(sorted);
        uint8_t *valid = malloc((size_t)cells);
        assert_non_null(valid);
        int64_t d = 0;
        for (int64_t i = 0; i < cells; i++) {
            const int32_t r = request_of(&big, (int32_t)((i / 16) % big.problem.num_tokens));
            valid[i] = big.topk[i] >= 0 && big.topk[i] <= big.prefix[r] / 128;
            if (valid[i]) sorted[d++] = big.topk[i];
        }
        for (int64_t i = 1; i < d; i++) /* insertion sort + unique: slow, obviously right */
            for (int64_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                const int32_t tmp = sorted[j];
                sorted[j] = sorted[j - 1];
                sorted[j - 1] = tmp;
            }
        int64_t distinct = 0;
        for (int64_t i = 0; i < d; i++)
            if (distinct == 0 || sorted[i] != sorted[distinct - 1]) sorted[distinct++] = sorted[i];
        printf("context %d: %lld distinct pages, largest %d\n", contexts[c], (long long)distinct,
               sorted[distinct - 1]);
        assert_true(distinct > 256);
        assert_true(sorted[distinct - 1] > 1500);

        test_case_t small;
        memset(&small, 0, sizeof small);
        for (int r = 0; r < 2; r++) {
            small.cu[r + 1] = big.cu[r + 1];
            small.prefix[r] = (int32_t)distinct;
            small.kv[r] = (int32_t)distinct + qlen[r];
        }
        case_finish(&small, 2, 2, 1, 16);
        for (int64_t i = 0; i < cells; i++) {
            int64_t rank = -1;
            for (int64_t j = 0; j < distinct && valid[i] && rank < 0; j++)
                if (sorted[j] == big.topk[i]) rank = j;
            small.topk[i] = rank >= 0 ? (int32_t)rank : (i % 2 ? -1 : INT32_MAX);
        }
        for (int32_t g = 2; g <= 8; g += 3) {
            const int32_t windows[] = {64, 128, 0};
            for (int wi = 0; wi < 3; wi++) {
                for (pw_regroup_mode_t mode = PW_REGROUP_GREEDY; mode <= PW_REGROUP_GUARDED;
                     mode++) {
                    int32_t *pb = regroup(&big, mode, windows[wi], g);
                    int32_t *ps = regroup(&small, mode, windows[wi], g);
                    int64_t moved = 0;
                    for (int32_t i = 0; i < 2 * big.problem.num_tokens; i++) {
                        assert_int_equal(pb[i], ps[i]);
                        moved += pb[i] != i % big.problem.num_tokens;
                    }
                    if (mode == PW_REGROUP_GREEDY) assert_true(moved > 0);
                    assert_int_equal(visits_of(&big, mode, windows[wi], g),
                                     visits_of(&small, mode, windows[wi], g));
                    free(pb);
                    free(ps);
                }
            }
        }
        free(sorted);
        free(valid);
        case_free(&big);
        case_free(&small);
    }
}

static void test_argument_errors(void **state)
{
    (void)state;
    const int32_t sets[2 * 2] = {1, 2, 3, 4};
    test_case_t tc;
    case_from_sets(&tc, 2, 2, sets);
    int32_t perm[2];
    pw_grouping_t grouping = grouping_of(PW_REGROUP_GREEDY, 64, 8);
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, NULL),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, NULL, &grouping, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_ref_regroup(&tc.problem, NULL, &tc.requests, &grouping, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, NULL, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    const int32_t bad_g[] = {0, 9, -1};
    for (int i = 0; i < 3; i++) {
        grouping = grouping_of(PW_REGROUP_GREEDY, 64, bad_g[i]);
        assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm),
                         PW_ERROR_INVALID_ARGUMENT);
        assert_non_null(strstr(pw_last_error(), "group_size"));
    }
    grouping = grouping_of(PW_REGROUP_GREEDY, -1, 8);
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "window"));
    grouping = grouping_of((pw_regroup_mode_t)7, 64, 8);
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    grouping = grouping_of(PW_REGROUP_GREEDY, 64, 8);
    grouping.struct_size = 4;
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    grouping = grouping_of(PW_REGROUP_GREEDY, 64, 8);
    tc.kv[0] = 101; /* < prefix + queries */
    assert_int_equal(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm),
                     PW_ERROR_INVALID_ARGUMENT);
    tc.kv[0] = 102;
    assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm));
    case_free(&tc);
}

/* Zero-length requests, requests of one query, N = 0. */
static void test_degenerate_requests(void **state)
{
    (void)state;
    test_case_t tc;
    memset(&tc, 0, sizeof tc);
    const int32_t cu[6] = {0, 0, 1, 1, 4, 4};
    memcpy(tc.cu, cu, sizeof cu);
    for (int r = 0; r < 5; r++) {
        tc.prefix[r] = 10 * r;
        tc.kv[r] = 10 * r + (cu[r + 1] - cu[r]) + 5;
    }
    case_finish(&tc, 5, 2, 4, 3);
    for (int64_t i = 0; i < 2 * 4 * 3; i++) tc.topk[i] = (int32_t)((i * 7) % 11);
    for (pw_regroup_mode_t mode = PW_REGROUP_IDENTITY; mode <= PW_REGROUP_GUARDED; mode++) {
        int32_t *perm = regroup(&tc, mode, 0, 8);
        assert_bijection(&tc, perm);
        assert_int_equal(perm[0], 0); /* request 1 has one query */
        assert_int_equal(perm[4], 0);
        free(perm);
    }
    case_free(&tc);
    memset(&tc, 0, sizeof tc);
    tc.prefix[0] = 5;
    tc.kv[0] = 5;
    case_finish(&tc, 1, 1, 4, 3); /* N = 0 */
    int32_t dummy = -7;
    const pw_grouping_t grouping = grouping_of(PW_REGROUP_GUARDED, 128, 8);
    assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, &dummy));
    assert_int_equal(dummy, -7);
    assert_pw_ok(pw_ref_regroup(&tc.problem, NULL, &tc.requests, &grouping, NULL)); /* N = 0: NULL too */
    case_free(&tc);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example_3_2),
        cmocka_unit_test(test_spec_counterexample_8),
        cmocka_unit_test(test_ties_and_seed),
        cmocka_unit_test(test_random_against_naive),
        cmocka_unit_test(test_long_context_relabel),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_degenerate_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
