/* pw_ref_union_prepare and the union metrics (docs/semantics.md §2, §4.1): the worked example, S_i on
 * edge inputs, member masks that rebuild every S_i exactly for random permutations and
 * groupings, group layout and counts, per-window metrics, and argument errors.
 * Rerun with --seed N. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t g_seed;

/* ---- metadata buffers --------------------------------------------------------------- */
/* Buffers of exactly the documented capacities, filled with junk so that anything the
 * preparation should write but does not shows up. */
static pw_union_meta_t meta_alloc(const test_case_t *tc, const pw_grouping_t *grouping)
{
    pw_union_meta_t meta;
    const size_t heads = (size_t)tc->problem.num_kv_heads;
    meta.max_groups = pw_max_groups(&tc->problem, grouping);
    meta.union_capacity = grouping->group_size * tc->problem.topk;
    const size_t groups = heads * (size_t)meta.max_groups + 1;
    const size_t cells = groups * (size_t)meta.union_capacity;
    meta.num_groups = malloc(heads * sizeof *meta.num_groups);
    meta.groups = malloc(groups * sizeof *meta.groups);
    meta.union_pages = malloc(cells * sizeof *meta.union_pages);
    meta.member_masks = malloc(cells);
    assert_true(meta.num_groups && meta.groups && meta.union_pages && meta.member_masks);
    memset(meta.num_groups, 0x5a, heads * sizeof *meta.num_groups);
    memset(meta.groups, 0x5a, groups * sizeof *meta.groups);
    memset(meta.union_pages, 0x5a, cells * sizeof *meta.union_pages);
    memset(meta.member_masks, 0x5a, cells);
    return meta;
}

static void meta_free(pw_union_meta_t *meta)
{
    free(meta->num_groups);
    free(meta->groups);
    free(meta->union_pages);
    free(meta->member_masks);
}

static const pw_group_desc_t *group_at(const pw_union_meta_t *meta, int32_t h, int64_t i)
{
    return meta->groups + (int64_t)h * meta->max_groups + i;
}
static const int32_t *pages_at(const pw_union_meta_t *meta, int32_t h, int64_t i)
{
    return meta->union_pages + ((int64_t)h * meta->max_groups + i) * meta->union_capacity;
}
static const uint8_t *masks_at(const pw_union_meta_t *meta, int32_t h, int64_t i)
{
    return meta->member_masks + ((int64_t)h * meta->max_groups + i) * meta->union_capacity;
}

/* ---- tests ------------------------------------------------------------------------- */

/* docs/semantics.md §2: S0 = {1,4,7}, S2 = {1,4,9} give U = {1,4,7,9}, rho = 6/4 = 1.5; read by
 * original id through a permutation [0,2,1]. */
static void test_spec_example_2(void **state)
{
    (void)state;
    test_case_t tc;
    memset(&tc, 0, sizeof tc);
    tc.cu[1] = 3;
    tc.prefix[0] = 20;
    tc.kv[0] = 23;
    case_finish(&tc, 1, 1, 1, 3);
    const int32_t sets[9] = {1, 4, 7, 2, 3, 5, 1, 4, 9};
    memcpy(tc.topk, sets, sizeof sets);
    const pw_grouping_t grouping = grouping_of(PW_REGROUP_IDENTITY, 0, 2);
    pw_union_meta_t meta = meta_alloc(&tc, &grouping);
    const int32_t perm[3] = {0, 2, 1};
    assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));
    assert_int_equal(meta.num_groups[0], 2);
    const pw_group_desc_t *g0 = group_at(&meta, 0, 0);
    assert_int_equal(g0->slot_begin, 0);
    assert_int_equal(g0->request, 0);
    assert_int_equal(g0->num_members, 2);
    assert_int_equal(g0->union_size, 4);
    assert_int_equal(g0->half_union_size[0], 4);
    assert_int_equal(g0->half_union_size[1], 0);
    static const int32_t want_pages[6] = {1, 4, 7, 9, -1, -1};
    static const uint8_t want_masks[6] = {3, 3, 1, 2, 0, 0};
    for (int u = 0; u < 6; u++) {
        assert_int_equal(pages_at(&meta, 0, 0)[u], want_pages[u]);
        assert_int_equal(masks_at(&meta, 0, 0)[u], want_masks[u]);
    }
    const pw_group_desc_t *g1 = group_at(&meta, 0, 1);
    assert_int_equal(g1->slot_begin, 2);
    assert_int_equal(g1->num_members, 1);
    assert_int_equal(g1->union_size, 3);

    /* Only the two queries of the example: rho = 1.5 exactly. */
    tc.cu[1] = 2;
    tc.kv[0] = 22;
    tc.problem.num_tokens = 2;
    const int32_t sets2[6] = {1, 4, 7, 1, 4, 9};
    memcpy(tc.topk, sets2, sizeof sets2);
    const int32_t perm2[2] = {0, 1};
    assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm2, &meta));
    pw_union_stats_t total;
    assert_pw_ok(pw_union_stats(&tc.problem, &meta, &total, NULL));
    assert_int_equal(total.selections, 6);
    assert_int_equal(total.union_visits, 4);
    assert_int_equal(total.queries, 2);
    assert_int_equal(total.groups, 1);
    assert_int_equal(total.c4, 4);
    assert_true(total.rho_q == 1.5);
    assert_pw_ok(
        pw_ref_grouping_stats(&tc.problem, tc.topk, &tc.requests, &grouping, &total, NULL));
    assert_true(total.rho_q == 1.5);
    meta_free(&meta);
    case_free(&tc);
}

/* S_i of single queries (g = 1: one group per row, its union is S_i) on edge inputs. */
static void test_selection_edges(void **state)
{
    (void)state;
    test_case_t tc;
    memset(&tc, 0, sizeof tc);
    /* P = 4. Request 0: prefix 7, 3 queries (c = 7, 8, 9), L = 10: page 2 holds tokens 8, 9
     * only (partial last page). Request 1: 1 query, prefix 0 (c = 0), L = 1. Request 2:
     * empty. Request 3: 2 queries, prefix 65536 * 32 (c = 2^21 .. +1), L = c + 1 + 3. */
    const int32_t cu[5] = {0, 3, 4, 4, 6};
    memcpy(tc.cu, cu, sizeof cu);
    tc.prefix[0] = 7, tc.kv[0] = 10;
    tc.prefix[1] = 0, tc.kv[1] = 1;
    tc.prefix[2] = 3, tc.kv[2] = 3;
    tc.prefix[3] = 1 << 21, tc.kv[3] = (1 << 21) + 5;
    case_finish(&tc, 4, 1, 4, 6);
    /* c=7: page 2 starts at 8, so all future; (2^30+1)*4 wraps to 4 in 32 bits.
     * c=8: -1 first, then {0,1,2}.   c=9: partial last page, duplicated.   c=0, L=1: {0}.
     * c=2^21: page 2^19 starts at 2^21.   c=2^21+1: 2^19+2 is past L. */
    const int32_t rows[6][6] = {
        {2, 3, 2, (1 << 30) + 1, 2, 2},
        {-1, 1, 0, INT32_MAX, 2, INT32_MIN},
        {2, 2, 2, 2, 2, 2},
        {0, 0, 1, -5, INT32_MAX, 0},
        {(1 << 19), (1 << 19) + 1, 7, -1, -1, 7},
        {(1 << 19) + 1, (1 << 19), (1 << 19) + 2, INT32_MIN, INT32_MIN, 3},
    };
    memcpy(tc.topk, rows, sizeof rows);
    static const int32_t want_size[6] = {0, 3, 1, 1, 2, 2};
    static const int32_t want[6][3] = {{0}, {0, 1, 2}, {2}, {0}, {7, 1 << 19}, {3, 1 << 19}};
    const pw_grouping_t grouping = grouping_of(PW_REGROUP_IDENTITY, 3, 1);
    pw_union_meta_t meta = meta_alloc(&tc, &grouping);
    const int32_t perm[6] = {0, 1, 2, 3, 4, 5};
    assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));
    assert_int_equal(meta.num_groups[0], 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(group_at(&meta, 0, i)->slot_begin, i);
        assert_int_equal(group_at(&meta, 0, i)->union_size, want_size[i]);
        for (int u = 0; u < 6; u++) {
            assert_int_equal(pages_at(&meta, 0, i)[u], u < want_size[i] ? want[i][u] : -1);
            assert_int_equal(masks_at(&meta, 0, i)[u], u < want_size[i] ? 1 : 0);
        }
    }
    assert_int_equal(group_at(&meta, 0, 3)->request, 1);
    assert_int_equal(group_at(&meta, 0, 4)->request, 3);
    pw_union_stats_t total;
    assert_pw_ok(pw_union_stats(&tc.problem, &meta, &total, NULL));
    assert_int_equal(total.selections, 9);
    assert_int_equal(total.union_visits, 9);
    meta_free(&meta);
    case_free(&tc);
}

/* A random permutation inside each request of every KV head. */
static void random_perm(const test_case_t *tc, pw_rng_t *rng, int32_t *perm)
{
    for (int32_t h = 0; h < tc->problem.num_kv_heads; h++) {
        int32_t *p = perm + (int64_t)h * tc->problem.num_tokens;
        for (int32_t s = 0; s < tc->problem.num_tokens; s++) p[s] = s;
        for (int32_t r = 0; r < tc->problem.num_requests; r++)
            for (int32_t s = tc->cu[r + 1] - 1; s > tc->cu[r]; s--) {
                const int32_t o = (int32_t)pw_rng_range(rng, tc->cu[r], s);
                const int32_t tmp = p[s];
                p[s] = p[o];
                p[o] = tmp;
            }
    }
}

/* Checks every field of prepared metadata against the naive S_i: layout (runs of g slots
 * inside windows inside requests, in order), ascending -1-padded unions, masks that
 * rebuild every S_i exactly, half sizes, and the metrics. Returns sum_i |S_i|. */
static int64_t check_meta(const test_case_t *tc, const pw_grouping_t *grouping,
                          const int32_t *perm, const pw_union_meta_t *meta)
{
    const int32_t n_rows = tc->problem.num_tokens;
    const int32_t g = grouping->group_size, window = grouping->window;
    const int32_t cap = meta->union_capacity;
    int32_t sel[32];
    int64_t selections = 0;
    pw_union_stats_t per_head[3], total;
    assert_pw_ok(pw_union_stats(&tc->problem, meta, &total, per_head));
    for (int32_t h = 0; h < tc->problem.num_kv_heads; h++) {
        int64_t i = 0, head_sel = 0, head_visits = 0, head_c4 = 0;
        for (int32_t r = 0; r < tc->problem.num_requests; r++) {
            const int32_t b = tc->cu[r], e = tc->cu[r + 1];
            for (int32_t s0 = b; s0 < e; i++) {
                /* The expected group: up to g slots, not past the window or the request. */
                const int32_t w_end = window > 0 ? b + ((s0 - b) / window + 1) * window : e;
                const int32_t stop = w_end < e ? w_end : e;
                const int32_t m = stop - s0 < g ? stop - s0 : g;
                assert_true(i < meta->num_groups[h]);
                const pw_group_desc_t *d = group_at(meta, h, i);
                assert_int_equal(d->slot_begin, s0);
                assert_int_equal(d->request, r);
                assert_int_equal(d->num_members, m);
                assert_int_equal(d->reserved[0], 0);
                assert_int_equal(d->reserved[1], 0);
                const int32_t *pages = pages_at(meta, h, i);
                const uint8_t *masks = masks_at(meta, h, i);
                assert_true(d->union_size >= 0 && d->union_size <= cap);
                int32_t half[2] = {0, 0};
                for (int32_t u = 0; u < cap; u++) {
                    if (u < d->union_size) {
                        assert_true(u == 0 || pages[u - 1] < pages[u]);
                        assert_true(masks[u] != 0 && masks[u] < (1u << m));
                        half[0] += (masks[u] & 0x0f) != 0;
                        half[1] += (masks[u] & 0xf0) != 0;
                    } else {
                        assert_int_equal(pages[u], -1);
                        assert_int_equal(masks[u], 0);
                    }
                }
                assert_int_equal(d->half_union_size[0], half[0]);
                assert_int_equal(d->half_union_size[1], half[1]);
                /* Each member sees exactly its own S_i: no page gained, none lost. */
                int32_t largest = 0;
                for (int32_t s = 0; s < m; s++) {
                    const int32_t row = perm[(int64_t)h * n_rows + s0 + s];
                    const int32_t n = naive_selection(tc, h, row, sel);
                    int32_t seen = 0;
                    for (int32_t u = 0; u < d->union_size; u++) {
                        if (!(masks[u] >> s & 1)) continue;
                        if (seen >= n || sel[seen] != pages[u])
                            fail_msg("seed %llu: kv head %d group %lld slot %d (row %d) has page "
                                     "%d, not in its S_i",
                                     (unsigned long long)g_seed, h, (long long)i, s, row, pages[u]);
                        seen++;
                    }
                    assert_int_equal(seen, n);
                    head_sel += n;
                    if (n > largest) largest = n;
                }
                assert_true(d->union_size >= largest);
                head_visits += d->union_size;
                head_c4 += half[0] + half[1];
                s0 += m;
            }
        }
        assert_int_equal(meta->num_groups[h], i);
        assert_true(i <= pw_max_groups(&tc->problem, grouping));
        assert_int_equal(per_head[h].queries, n_rows);
        assert_int_equal(per_head[h].groups, i);
        assert_int_equal(per_head[h].selections, head_sel);
        assert_int_equal(per_head[h].union_visits, head_visits);
        assert_int_equal(per_head[h].c4, head_c4);
        /* sum_G |U_G| >= sum_G max_i |S_i| >= sum_i |S_i| / g. */
        assert_true(head_visits * g >= head_sel);
        assert_true(head_c4 >= head_visits);
        selections += head_sel;
    }
    assert_int_equal(total.selections, selections);
    assert_int_equal(total.queries, (int64_t)n_rows * tc->problem.num_kv_heads);
    return selections;
}

/* Random problems, random permutations and the three regroup modes, W in {1,3,8,64,128,0},
 * g in 1..8, 1..3 KV heads. */
static void test_random_properties(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed);
    const int32_t windows[] = {1, 3, 8, 64, 128, 0};
    for (int iter = 0; iter < 80; iter++) {
        test_case_t tc;
        case_random(&tc, &rng, iter % 4 == 0 ? 400 : 50, 40);
        const int32_t window = windows[iter % 6];
        const int32_t g = iter % 7 == 0 ? 8 : (int32_t)pw_rng_range(&rng, 1, 8);
        int32_t *perm =
            malloc(((size_t)tc.problem.num_kv_heads * tc.problem.num_tokens + 1) * sizeof *perm);
        assert_non_null(perm);
        int64_t sel_first = -1;
        for (int variant = 0; variant < 4; variant++) {
            pw_grouping_t grouping = grouping_of(PW_REGROUP_IDENTITY, window, g);
            if (variant == 0) {
                random_perm(&tc, &rng, perm);
            } else {
                grouping.mode = (pw_regroup_mode_t)(variant - 1);
                assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm));
            }
            pw_union_meta_t meta = meta_alloc(&tc, &grouping);
            assert_pw_ok(
                pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));
            const int64_t sel = check_meta(&tc, &grouping, perm, &meta);
            if (sel_first < 0) sel_first = sel;
            assert_int_equal(sel, sel_first); /* no grouping changes any S_i */

            /* Per-window metrics add up to the totals, one entry per non-empty window. */
            int64_t count = -1;
            assert_pw_ok(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta, NULL,
                                                0, &count));
            int64_t want_count = 0;
            for (int32_t r = 0; r < tc.problem.num_requests; r++) {
                const int32_t len = tc.cu[r + 1] - tc.cu[r];
                want_count += window > 0 ? (len + window - 1) / window : len > 0;
            }
            assert_int_equal(count, want_count * tc.problem.num_kv_heads);
            pw_window_stats_t *ws = malloc(((size_t)count + 1) * sizeof *ws);
            assert_non_null(ws);
            assert_pw_ok(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta, ws,
                                                count, &count));
            pw_union_stats_t total, sum;
            memset(&sum, 0, sizeof sum);
            assert_pw_ok(pw_union_stats(&tc.problem, &meta, &total, NULL));
            int64_t slots = 0;
            for (int64_t i = 0; i < count; i++) {
                const int32_t r = ws[i].request, b = tc.cu[r], e = tc.cu[r + 1];
                assert_int_equal(ws[i].slot_begin, b + (window > 0 ? ws[i].window * window : 0));
                const int32_t left = e - ws[i].slot_begin;
                assert_int_equal(ws[i].num_slots, window > 0 && left > window ? window : left);
                assert_int_equal(ws[i].stats.queries, ws[i].num_slots);
                assert_true(i == 0 || ws[i - 1].kv_head < ws[i].kv_head ||
                            (ws[i - 1].kv_head == ws[i].kv_head &&
                             ws[i - 1].slot_begin < ws[i].slot_begin));
                slots += ws[i].num_slots;
                sum.groups += ws[i].stats.groups;
                sum.selections += ws[i].stats.selections;
                sum.union_visits += ws[i].stats.union_visits;
                sum.c4 += ws[i].stats.c4;
            }
            assert_int_equal(slots, (int64_t)tc.problem.num_tokens * tc.problem.num_kv_heads);
            assert_int_equal(sum.groups, total.groups);
            assert_int_equal(sum.selections, total.selections);
            assert_int_equal(sum.union_visits, total.union_visits);
            assert_int_equal(sum.c4, total.c4);
            free(ws);
            meta_free(&meta);
        }
        free(perm);
        case_free(&tc);
    }
}

/* Guarded is never worse than identity in any window, and greedy with g = 8 respects the
 * lower bound sum_i |S_i| / 8. */
static void test_guarded_per_window(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0x6a5d);
    const int32_t windows[] = {64, 128, 8, 0};
    int64_t better = 0;
    for (int iter = 0; iter < 24; iter++) {
        test_case_t tc;
        case_random(&tc, &rng, 300, 40);
        pw_window_stats_t *stats[2];
        int64_t count[2];
        for (int m = 0; m < 2; m++) {
            const pw_grouping_t grouping =
                grouping_of(m ? PW_REGROUP_GUARDED : PW_REGROUP_IDENTITY, windows[iter % 4], 8);
            int32_t *perm = malloc(
                ((size_t)tc.problem.num_kv_heads * tc.problem.num_tokens + 1) * sizeof *perm);
            assert_non_null(perm);
            assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm));
            pw_union_meta_t meta = meta_alloc(&tc, &grouping);
            assert_pw_ok(
                pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));
            assert_pw_ok(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta, NULL,
                                                0, &count[m]));
            stats[m] = malloc(((size_t)count[m] + 1) * sizeof *stats[m]);
            assert_non_null(stats[m]);
            assert_pw_ok(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta,
                                                stats[m], count[m], &count[m]));
            meta_free(&meta);
            free(perm);
        }
        assert_int_equal(count[0], count[1]);
        for (int64_t i = 0; i < count[0]; i++) {
            assert_int_equal(stats[0][i].slot_begin, stats[1][i].slot_begin);
            assert_true(stats[1][i].stats.union_visits <= stats[0][i].stats.union_visits);
            assert_true(stats[1][i].stats.union_visits * 8 >= stats[1][i].stats.selections);
            better += stats[1][i].stats.union_visits < stats[0][i].stats.union_visits;
        }
        free(stats[0]);
        free(stats[1]);
        case_free(&tc);
    }
    printf("guarded beat identity in %lld windows\n", (long long)better);
    assert_true(better > 0);
}

static void test_perm_and_meta_errors(void **state)
{
    (void)state;
    test_case_t tc;
    memset(&tc, 0, sizeof tc);
    const int32_t cu[3] = {0, 4, 7};
    memcpy(tc.cu, cu, sizeof cu);
    tc.prefix[0] = 0, tc.kv[0] = 4;
    tc.prefix[1] = 9, tc.kv[1] = 12;
    case_finish(&tc, 2, 2, 1, 2);
    for (int i = 0; i < 2 * 7 * 2; i++) tc.topk[i] = i % 5;
    const pw_grouping_t grouping = grouping_of(PW_REGROUP_IDENTITY, 0, 8);
    pw_union_meta_t meta = meta_alloc(&tc, &grouping);
    int32_t perm[14] = {0, 1, 2, 3, 4, 5, 6, 3, 2, 1, 0, 6, 5, 4};
    assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));

    perm[12] = 6; /* kv head 1, slot 5: row 6 twice */
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "kv head 1, slot 5"));
    perm[12] = 5;
    perm[3] = 4, perm[4] = 3; /* kv head 0, slot 3: row 4 belongs to request 1 */
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "kv head 0, slot 3"));
    perm[3] = 3, perm[4] = 4;
    perm[8] = -1;
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "kv head 1, slot 1"));
    perm[8] = 2;
    assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));

    meta.max_groups -= 1;
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "max_groups"));
    meta.max_groups += 1;
    meta.union_capacity -= 1;
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "union_capacity"));
    meta.union_capacity += 1;
    int32_t *keep = meta.num_groups;
    meta.num_groups = NULL;
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    meta.num_groups = keep;
    assert_int_equal(
        pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, NULL, &meta),
        PW_ERROR_INVALID_ARGUMENT);
    pw_grouping_t bad = grouping_of(PW_REGROUP_IDENTITY, -3, 8);
    assert_int_equal(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &bad, perm, &meta),
                     PW_ERROR_INVALID_ARGUMENT);

    /* Window metrics: a too-small buffer is reported with the needed count. */
    assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &meta));
    pw_window_stats_t one[1];
    int64_t count = 0;
    assert_int_equal(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta, one, 1,
                                            &count),
                     PW_ERROR_INSUFFICIENT_WORKSPACE);
    assert_int_equal(count, 4); /* 2 KV heads x 2 requests */
    assert_int_equal(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta, one, -1,
                                            &count),
                     PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "capacity is -1"));
    pw_union_stats_t total;
    /* Group descriptors no union preparation writes: refused, not summed. */
    const pw_group_desc_t kept = meta.groups[0];
    for (int bad_field = 0; bad_field < 4; bad_field++) {
        meta.groups[0] = kept;
        if (bad_field == 0) meta.groups[0].union_size = meta.union_capacity + 1;
        if (bad_field == 1) meta.groups[0].union_size = -1;
        if (bad_field == 2) meta.groups[0].half_union_size[1] = kept.union_size + 1;
        if (bad_field == 3) meta.groups[0].num_members = 0;
        assert_int_equal(pw_union_stats(&tc.problem, &meta, &total, NULL), PW_ERROR_INVALID_ARGUMENT);
        assert_non_null(strstr(pw_last_error(), "meta group 0 of kv head 0"));
        assert_int_equal(pw_union_stats_windows(&tc.problem, &tc.requests, &grouping, &meta, NULL, 0, &count),
                         PW_ERROR_INVALID_ARGUMENT);
    }
    meta.groups[0] = kept;
    assert_pw_ok(pw_union_stats(&tc.problem, &meta, &total, NULL));
    meta.num_groups[1] = (int32_t)meta.max_groups + 1;
    assert_int_equal(pw_union_stats(&tc.problem, &meta, &total, NULL), PW_ERROR_INVALID_ARGUMENT);
    meta_free(&meta);
    case_free(&tc);
}

/* pw_union_meta_alloc_host: the documented capacities, zeroed buffers, the same metadata
 * as hand-sized buffers, errors, and free resetting to PW_UNION_META_INIT. */
static void test_meta_alloc_host(void **state)
{
    (void)state;
    pw_rng_t rng;
    pw_rng_init(&rng, g_seed ^ 0xa11c);
    for (int iter = 0; iter < 30; iter++) {
        test_case_t tc;
        case_random(&tc, &rng, 60, 30);
        const int32_t windows[] = {0, 1, 5, 64, 128};
        const pw_grouping_t grouping =
            grouping_of(PW_REGROUP_GREEDY, windows[iter % 5], (int32_t)pw_rng_range(&rng, 1, 8));
        int32_t *perm = malloc(((size_t)tc.problem.num_kv_heads * tc.problem.num_tokens + 1) * sizeof *perm);
        assert_non_null(perm);
        assert_pw_ok(pw_ref_regroup(&tc.problem, tc.topk, &tc.requests, &grouping, perm));
        pw_union_meta_t mine = PW_UNION_META_INIT;
        assert_pw_ok(pw_union_meta_alloc_host(&tc.problem, &grouping, &mine));
        assert_int_equal(mine.max_groups, pw_max_groups(&tc.problem, &grouping));
        assert_int_equal(mine.union_capacity, grouping.group_size * tc.problem.topk);
        const size_t cells = (size_t)tc.problem.num_kv_heads * (size_t)mine.max_groups;
        for (size_t i = 0; i < cells * (size_t)mine.union_capacity; i++) /* zeroed */
            assert_true(mine.union_pages[i] == 0 && mine.member_masks[i] == 0);
        pw_union_meta_t hand = meta_alloc(&tc, &grouping);
        assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &mine));
        assert_pw_ok(pw_ref_union_prepare(&tc.problem, tc.topk, &tc.requests, &grouping, perm, &hand));
        assert_memory_equal(mine.num_groups, hand.num_groups, (size_t)tc.problem.num_kv_heads * 4);
        for (int32_t h = 0; h < tc.problem.num_kv_heads; h++) {
            const int64_t at = h * mine.max_groups;
            assert_memory_equal(mine.groups + at, hand.groups + at, (size_t)hand.num_groups[h] * sizeof *hand.groups);
            assert_memory_equal(mine.union_pages + at * mine.union_capacity, hand.union_pages + at * hand.union_capacity,
                                (size_t)hand.num_groups[h] * (size_t)hand.union_capacity * 4);
            assert_memory_equal(mine.member_masks + at * mine.union_capacity,
                                hand.member_masks + at * hand.union_capacity,
                                (size_t)hand.num_groups[h] * (size_t)hand.union_capacity);
        }
        pw_union_meta_free_host(&mine);
        assert_null(mine.num_groups);
        assert_null(mine.union_pages);
        assert_int_equal(mine.max_groups, 0);
        pw_union_meta_free_host(&mine); /* twice: harmless */
        meta_free(&hand);
        free(perm);
        case_free(&tc);
    }
    pw_union_meta_free_host(NULL);
    pw_problem_t p = PW_PROBLEM_INIT;
    pw_grouping_t g = PW_GROUPING_INIT;
    pw_union_meta_t m = PW_UNION_META_INIT;
    assert_int_equal(pw_union_meta_alloc_host(&p, &g, NULL), PW_ERROR_INVALID_ARGUMENT);
    assert_int_equal(pw_union_meta_alloc_host(NULL, &g, &m), PW_ERROR_INVALID_ARGUMENT);
    g.group_size = 9;
    assert_int_equal(pw_union_meta_alloc_host(&p, &g, &m), PW_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(pw_last_error(), "group_size"));
    assert_null(m.groups);
    g.group_size = 8;
    assert_pw_ok(pw_union_meta_alloc_host(&p, &g, &m)); /* N = 0: R groups of capacity, allocated */
    assert_non_null(m.groups);
    pw_union_meta_free_host(&m);
    /* Too large: OUT_OF_MEMORY, the group count printed as a double (Hkv x groups passes
     * 2^63 here: it printed a negative integer). */
    pw_problem_t huge = PW_PROBLEM_INIT;
    huge.num_tokens = huge.num_requests = huge.num_kv_heads = INT32_MAX;
    huge.max_pages_per_request = huge.num_cache_pages = 1;
    g.group_size = 1;
    g.window = 1;
    assert_int_equal(pw_union_meta_alloc_host(&huge, &g, &m), PW_ERROR_OUT_OF_MEMORY);
    assert_non_null(strstr(pw_last_error(), "1.384e+19 groups"));
    assert_null(m.groups);
    const pw_requests_t rq = PW_REQUESTS_INIT;
    assert_null(rq.page_table);
    assert_int_equal(rq.page_table_stride, 0);
}

int main(int argc, char **argv)
{
    g_seed = pw_test_seed(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example_2),
        cmocka_unit_test(test_selection_edges),
        cmocka_unit_test(test_random_properties),
        cmocka_unit_test(test_guarded_per_window),
        cmocka_unit_test(test_perm_and_meta_errors),
        cmocka_unit_test(test_meta_alloc_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
