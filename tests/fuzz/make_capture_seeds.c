/* Writes the seed captures of the capture fuzz target into a directory (scripts/fuzz runs
 * it before a libFuzzer run; tests/fuzz/corpus/capture holds the minimised corpus made from
 * them): small problems (D = 4, G = 1, pages of 2-4 tokens) with and without Q / K / V, an
 * I16 Top-K, a given page table, provenance entries, several requests.
 * Usage: make_capture_seeds DIR */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>

#include "pageweaver_capture.h"

static int seed(const char *dir, const char *name, int n, int r, int page, int k, int qkv, int i16, int table,
                int meta)
{
    pw_problem_t pb = PW_PROBLEM_INIT;
    pb.num_tokens = n;
    pb.num_requests = r;
    pb.q_heads_per_kv = 1;
    pb.head_dim = 4;
    pb.page_size = page;
    pb.topk = k;
    const int per = n / r;
    /* kv_lens = 2 pages + the request's queries: max_pages = 2 + ceil(queries / page) */
    pb.max_pages_per_request = 2 + (n - per * (r - 1) + page - 1) / page;
    pb.num_cache_pages = (int64_t)r * pb.max_pages_per_request;
    pw_capture_t *c = NULL;
    if (pw_capture_create(&pb, qkv ? PW_CAPTURE_LOAD_QKV : 0, &c) != PW_SUCCESS) goto fail;
    for (int i = 0; i <= r; i++) c->cu_seqlens_q[i] = i == r ? n : i * per;
    for (int i = 0; i < r; i++) {
        c->prefix_lens[i] = 2 * page;
        c->kv_lens[i] = 2 * page + c->cu_seqlens_q[i + 1] - c->cu_seqlens_q[i];
    }
    for (int i = 0; i < n * k; i++) c->topk_ids[i] = i % k < 2 ? i % k : -1;
    if (table) {
        const int cells = r * pb.max_pages_per_request;
        for (int i = 0; i < cells; i++) c->page_table[i] = cells - 1 - i;
        c->page_table_synthesised = 0;
    }
    if (qkv && pw_capture_generate_qkv(c, 7) != PW_SUCCESS) goto fail;
    if (meta && (pw_capture_set_meta(c, "model", "tiny") != PW_SUCCESS ||
                 pw_capture_set_meta(c, "layer", "3") != PW_SUCCESS))
        goto fail;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (pw_capture_write(path, c, i16 ? PW_CAPTURE_WRITE_TOPK_I16 : 0) != PW_SUCCESS) goto fail;
    pw_capture_free(c);
    return 0;
fail:
    fprintf(stderr, "make_capture_seeds: %s: %s\n", name, pw_last_error());
    pw_capture_free(c);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    int bad = 0;
    bad |= seed(argv[1], "seed_topk_only", 4, 2, 4, 3, 0, 0, 0, 0);
    bad |= seed(argv[1], "seed_i16_table_meta", 3, 1, 2, 4, 0, 1, 1, 1);
    bad |= seed(argv[1], "seed_qkv_table_meta", 2, 2, 4, 2, 1, 0, 1, 1);
    bad |= seed(argv[1], "seed_three_requests", 5, 3, 2, 3, 0, 0, 1, 0);
    bad |= seed(argv[1], "seed_qkv_i16", 1, 1, 2, 1, 1, 1, 0, 0);
    return bad;
}
