/* pageweaver stats: logical-reuse metrics (docs/semantics.md §2, §3) of capture files.
 *
 * For every capture and KV head it runs the CPU reference groupings (identity order, and
 * Algorithm 1 greedy and guarded regroup at each window W, group size g) through
 * pw_ref_grouping_stats and prints sum|S_i|, union visits sum_G |U_G|, their reduction
 * against identity order, rho_Q and the Union4 proxy C_4; then a total per file and one
 * over all files. Only the int32 tensors of a capture are read (Q/K/V are skipped).
 * --json prints one JSON document instead (built with cJSON). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "pageweaver.h"
#include "pageweaver_capture.h"

#define MAX_WINDOWS 16
#define MAX_CONFIGS (1 + 2 * MAX_WINDOWS)

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: pageweaver stats [--json [-] | --json=OUT] [--window W]... [--group-size G]\n"
            "                        FILE...\n"
            "\n"
            "Union statistics of capture files (docs/capture-format.md), per KV head, per\n"
            "file and over all files, for identity order and for regrouped orders\n"
            "(Algorithm 1 greedy, and guarded: greedy only where it cuts a window's visits):\n"
            "  selections    sum_i |S_i| (valid distinct pages per query row)\n"
            "  union_visits  sum over groups of |U_G| (pages a group walks)\n"
            "  reduction     100 * (identity visits - visits) / identity visits\n"
            "  rho_Q         selections / union_visits\n"
            "  C_4           sum over groups of |U_G0| + |U_G1| (two 4-query halves)\n"
            "\n"
            "options:\n"
            "  --json, --json -  print one JSON document on stdout instead of tables\n"
            "  --json=OUT      write the JSON document to the file OUT instead ('-': stdout)\n"
            "  --window W      regroup window in query positions, repeatable or a comma\n"
            "                  list (default 64,128; 0 = one window per request)\n"
            "  --group-size G  queries per group, 1..8 (default 8)\n"
            "  -h, --help      this help\n"
            "\n"
            "Exit status: 0 success, 1 a file could not be read or is malformed (the others\n"
            "are still reported), 2 usage error.\n");
}

typedef struct config {
    char name[32];
    pw_grouping_t grouping;
} config_t;

/* Results of one file. */
typedef struct file_result {
    const char *path;
    pw_capture_t *capture;       /* NULL when the file failed */
    pw_union_stats_t *per_head;  /* [num_configs, Hkv] */
    pw_union_stats_t *totals;    /* [num_configs] */
} file_result_t;

static const char *mode_name(pw_regroup_mode_t mode)
{
    switch (mode) {
    case PW_REGROUP_IDENTITY: return "identity";
    case PW_REGROUP_GREEDY: return "greedy";
    case PW_REGROUP_GUARDED: return "guarded";
    case PW_REGROUP_AUTO: return "auto";
    }
    return "unknown";
}

static double reduction_pct(int64_t identity_visits, int64_t visits)
{
    if (identity_visits <= 0) return 0.0;
    return 100.0 * (double)(identity_visits - visits) / (double)identity_visits;
}

static double rho(int64_t selections, int64_t visits)
{
    return visits > 0 ? (double)selections / (double)visits : 0.0;
}

static void add_stats(pw_union_stats_t *acc, const pw_union_stats_t *s)
{
    acc->queries += s->queries;
    acc->groups += s->groups;
    acc->selections += s->selections;
    acc->union_visits += s->union_visits;
    acc->c4 += s->c4;
    acc->rho_q = rho(acc->selections, acc->union_visits);
}

/* Reads one capture and computes every configuration; prints the error and returns 0 on
 * failure. */
static int compute_file(file_result_t *fr, const config_t *configs, int num_configs)
{
    if (pw_capture_read(fr->path, 0, &fr->capture) != PW_SUCCESS) {
        fputs("pageweaver stats: ", stderr);
        pw_cli_fputs_escaped(pw_last_error(), stderr); /* may quote bytes of the file */
        fputc('\n', stderr);
        return 0;
    }
    const pw_problem_t *p = &fr->capture->problem;
    const pw_requests_t rq = pw_capture_requests(fr->capture);
    const size_t heads = (size_t)p->num_kv_heads;
    fr->per_head = calloc((size_t)num_configs * heads, sizeof *fr->per_head);
    fr->totals = calloc((size_t)num_configs, sizeof *fr->totals);
    if (!fr->per_head || !fr->totals) {
        fprintf(stderr, "pageweaver stats: %s: out of memory\n", fr->path);
        return 0;
    }
    for (int c = 0; c < num_configs; c++) {
        if (pw_ref_grouping_stats(p, fr->capture->topk_ids, &rq, &configs[c].grouping,
                                  &fr->totals[c], fr->per_head + (size_t)c * heads) != PW_SUCCESS) {
            fprintf(stderr, "pageweaver stats: %s: %s: %s\n", fr->path, configs[c].name,
                    pw_last_error());
            return 0;
        }
    }
    return 1;
}

static void free_file(file_result_t *fr)
{
    pw_capture_free(fr->capture);
    free(fr->per_head);
    free(fr->totals);
    fr->capture = NULL;
    fr->per_head = fr->totals = NULL;
}

/* ---- text output ------------------------------------------------------------------- */
/* Prints a metadata key or value on one line: control bytes (newlines too) and bytes that
 * are not UTF-8 escaped as \xNN, values longer than max_bytes cut with "..." (at a
 * character boundary). */
static void print_one_line(const char *s, size_t max_bytes)
{
    size_t n = strlen(s);
    const int cut = n > max_bytes;
    if (cut) {
        n = max_bytes;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--; /* not inside a character */
    }
    char *part = malloc(n + 1);
    if (!part) return;
    memcpy(part, s, n);
    part[n] = '\0';
    pw_cli_fputs_escaped(part, stdout);
    free(part);
    if (cut) fputs("...", stdout);
}

static void print_row(const char *who, const config_t *cfg, const pw_union_stats_t *s,
                      int64_t identity_visits)
{
    char red[32];
    if (cfg->grouping.mode == PW_REGROUP_IDENTITY) snprintf(red, sizeof red, "-");
    else snprintf(red, sizeof red, "%.2f%%", reduction_pct(identity_visits, s->union_visits));
    printf("  %-8s %-12s %12lld %12lld %9s %7.3f %12lld\n", who, cfg->name,
           (long long)s->selections, (long long)s->union_visits, red,
           rho(s->selections, s->union_visits), (long long)s->c4);
}

static void print_header(void)
{
    printf("  %-8s %-12s %12s %12s %9s %7s %12s\n", "kv_head", "grouping", "selections",
           "union_visits", "reduction", "rho_Q", "C_4");
}

static void print_file_text(const file_result_t *fr, const config_t *configs, int num_configs)
{
    const pw_capture_t *cap = fr->capture;
    const pw_problem_t *p = &cap->problem;
    printf("%s: N=%d R=%d Hkv=%d G=%d D=%d P=%d K=%d max_pages=%d%s\n", fr->path, p->num_tokens,
           p->num_requests, p->num_kv_heads, p->q_heads_per_kv, p->head_dim, p->page_size, p->topk,
           p->max_pages_per_request, cap->topk_was_i16 ? " topk=I16" : "");
    printf("  provenance:");
    if (cap->num_meta == 0) printf(" (none)");
    for (int i = 0; i < cap->num_meta; i++) {
        printf("%s ", i ? ";" : "");
        print_one_line(cap->meta[i].key, 64);
        putchar('=');
        print_one_line(cap->meta[i].value, 96);
    }
    printf("\n");
    print_header();
    const size_t heads = (size_t)p->num_kv_heads;
    if (heads == 1) { /* the file's total is head 0: one block */
        for (int c = 0; c < num_configs; c++)
            print_row("0=total", &configs[c], &fr->totals[c], fr->totals[0].union_visits);
        printf("\n");
        return;
    }
    for (size_t h = 0; h < heads; h++) {
        char who[24];
        snprintf(who, sizeof who, "%zu", h);
        const int64_t id_visits = fr->per_head[h].union_visits; /* config 0 is identity */
        for (int c = 0; c < num_configs; c++)
            print_row(who, &configs[c], &fr->per_head[(size_t)c * heads + h], id_visits);
    }
    for (int c = 0; c < num_configs; c++)
        print_row("total", &configs[c], &fr->totals[c], fr->totals[0].union_visits);
    printf("\n");
}

/* ---- JSON output ------------------------------------------------------------------- */
static cJSON *stats_json(const config_t *cfg, const pw_union_stats_t *s, int64_t identity_visits)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "grouping", cfg->name);
    cJSON_AddStringToObject(o, "mode", mode_name(cfg->grouping.mode));
    cJSON_AddNumberToObject(o, "window", cfg->grouping.window);
    cJSON_AddNumberToObject(o, "group_size", cfg->grouping.group_size);
    cJSON_AddNumberToObject(o, "queries", (double)s->queries);
    cJSON_AddNumberToObject(o, "groups", (double)s->groups);
    cJSON_AddNumberToObject(o, "selections", (double)s->selections);
    cJSON_AddNumberToObject(o, "union_visits", (double)s->union_visits);
    cJSON_AddNumberToObject(o, "c4", (double)s->c4);
    cJSON_AddNumberToObject(o, "rho_q", rho(s->selections, s->union_visits));
    cJSON_AddNumberToObject(o, "reduction_pct", reduction_pct(identity_visits, s->union_visits));
    return o;
}

static cJSON *file_json(const file_result_t *fr, const config_t *configs, int num_configs)
{
    const pw_capture_t *cap = fr->capture;
    const pw_problem_t *p = &cap->problem;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", fr->path);
    cJSON *prob = cJSON_AddObjectToObject(o, "problem");
    cJSON_AddNumberToObject(prob, "num_tokens", p->num_tokens);
    cJSON_AddNumberToObject(prob, "num_requests", p->num_requests);
    cJSON_AddNumberToObject(prob, "num_kv_heads", p->num_kv_heads);
    cJSON_AddNumberToObject(prob, "q_heads_per_kv", p->q_heads_per_kv);
    cJSON_AddNumberToObject(prob, "head_dim", p->head_dim);
    cJSON_AddNumberToObject(prob, "page_size", p->page_size);
    cJSON_AddNumberToObject(prob, "topk", p->topk);
    cJSON_AddNumberToObject(prob, "max_pages_per_request", p->max_pages_per_request);
    cJSON_AddNumberToObject(prob, "num_cache_pages", (double)p->num_cache_pages);
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    for (int i = 0; i < cap->num_meta; i++)
        cJSON_AddStringToObject(meta, cap->meta[i].key, cap->meta[i].value);
    cJSON *heads_arr = cJSON_AddArrayToObject(o, "kv_heads");
    const size_t heads = (size_t)p->num_kv_heads;
    for (size_t h = 0; h < heads; h++) {
        cJSON *ho = cJSON_CreateObject();
        cJSON_AddNumberToObject(ho, "kv_head", (double)h);
        cJSON_AddNumberToObject(ho, "selections", (double)fr->per_head[h].selections);
        cJSON *arr = cJSON_AddArrayToObject(ho, "groupings");
        for (int c = 0; c < num_configs; c++)
            cJSON_AddItemToArray(arr, stats_json(&configs[c], &fr->per_head[(size_t)c * heads + h],
                                                 fr->per_head[h].union_visits));
        cJSON_AddItemToArray(heads_arr, ho);
    }
    cJSON *total = cJSON_AddObjectToObject(o, "total");
    cJSON_AddNumberToObject(total, "selections", (double)fr->totals[0].selections);
    cJSON *arr = cJSON_AddArrayToObject(total, "groupings");
    for (int c = 0; c < num_configs; c++)
        cJSON_AddItemToArray(arr, stats_json(&configs[c], &fr->totals[c],
                                             fr->totals[0].union_visits));
    return o;
}

/* ---- arguments ---------------------------------------------------------------------- */
static int add_windows(const char *list, int32_t *windows, int *num_windows)
{
    char buf[256];
    if (strlen(list) >= sizeof buf) return 0;
    strcpy(buf, list);
    char *save = buf;
    for (;;) {
        char *comma = strchr(save, ',');
        if (comma) *comma = '\0';
        long w;
        if (!pw_cli_parse_long(save, 0, 1L << 30, &w) || *num_windows >= MAX_WINDOWS) return 0;
        windows[(*num_windows)++] = (int32_t)w;
        if (!comma) break;
        save = comma + 1;
    }
    return 1;
}

int pw_cli_stats(int argc, char **argv)
{
    int json = 0, num_windows = 0, num_files = 0;
    const char *json_path = NULL; /* NULL or "-": stdout */
    int32_t windows[MAX_WINDOWS];
    long group_size = 8;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) return PW_CLI_BAD_INPUT;
    int options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options_done || a[0] != '-' || strcmp(a, "-") == 0) {
            files[num_files++] = a;
        } else if (strcmp(a, "--") == 0) {
            options_done = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            print_help(stdout);
            free(files);
            return PW_CLI_OK;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
            if (i + 1 < argc && strcmp(argv[i + 1], "-") == 0) i++; /* '-' = stdout */
        } else if (strncmp(a, "--json=", 7) == 0) {
            json = 1;
            json_path = a + 7;
            if (!*json_path) {
                fprintf(stderr, "pageweaver stats: --json= needs a file name ('-' for stdout)\n");
                free(files);
                return PW_CLI_USAGE;
            }
        } else if (strcmp(a, "--window") == 0 || strncmp(a, "--window=", 9) == 0) {
            const char *v = a[8] == '=' ? a + 9 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !add_windows(v, windows, &num_windows)) {
                fprintf(stderr,
                        "pageweaver stats: --window needs integers in 0..2^30 (at most %d "
                        "windows), got '%s'\n",
                        MAX_WINDOWS, v ? v : "");
                free(files);
                return PW_CLI_USAGE;
            }
        } else if (strcmp(a, "--group-size") == 0 || strncmp(a, "--group-size=", 13) == 0) {
            const char *v = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : NULL);
            if (!pw_cli_parse_long(v, 1, 8, &group_size)) {
                fprintf(stderr, "pageweaver stats: --group-size needs an integer in 1..8, got '%s'\n",
                        v ? v : "");
                free(files);
                return PW_CLI_USAGE;
            }
        } else {
            fprintf(stderr, "pageweaver stats: unknown option '%s' (try pageweaver stats --help)\n",
                    a);
            free(files);
            return PW_CLI_USAGE;
        }
    }
    if (num_files == 0) {
        fprintf(stderr, "pageweaver stats: no capture file given\n");
        print_help(stderr);
        free(files);
        return PW_CLI_USAGE;
    }
    if (pw_cli_check_output("stats", "--json=", json_path, files, num_files) != 0) {
        free(files);
        return PW_CLI_USAGE;
    }
    /* The JSON file is opened before the work: a bad path fails at once. */
    FILE *json_out = stdout;
    if (json_path && strcmp(json_path, "-") != 0) {
        json_out = fopen(json_path, "w");
        if (!json_out) {
            fprintf(stderr, "pageweaver stats: --json=%s: cannot open for writing: %s\n", json_path,
                    strerror(errno));
            free(files);
            return PW_CLI_BAD_INPUT;
        }
    }
    if (num_windows == 0) {
        windows[num_windows++] = 64;
        windows[num_windows++] = 128;
    }

    config_t configs[MAX_CONFIGS];
    int num_configs = 0;
    const pw_grouping_t base = PW_GROUPING_INIT;
    configs[num_configs].grouping = base;
    configs[num_configs].grouping.mode = PW_REGROUP_IDENTITY;
    configs[num_configs].grouping.window = 0;
    configs[num_configs].grouping.group_size = (int32_t)group_size;
    snprintf(configs[num_configs].name, sizeof configs[0].name, "identity");
    num_configs++;
    for (int w = 0; w < num_windows; w++) {
        for (int m = 0; m < 2; m++) {
            config_t *c = &configs[num_configs++];
            c->grouping = base;
            c->grouping.mode = m == 0 ? PW_REGROUP_GREEDY : PW_REGROUP_GUARDED;
            c->grouping.window = windows[w];
            c->grouping.group_size = (int32_t)group_size;
            snprintf(c->name, sizeof c->name, "%s W%d", mode_name(c->grouping.mode), windows[w]);
        }
    }

    int status = PW_CLI_OK, good_files = 0;
    pw_union_stats_t all[MAX_CONFIGS];
    memset(all, 0, sizeof all);
    cJSON *doc = NULL, *files_arr = NULL, *errors_arr = NULL;
    if (json) {
        doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "pageweaver_version", pw_version_string());
        cJSON_AddNumberToObject(doc, "group_size", (double)group_size);
        cJSON *warr = cJSON_AddArrayToObject(doc, "windows");
        for (int w = 0; w < num_windows; w++) cJSON_AddItemToArray(warr, cJSON_CreateNumber(windows[w]));
        files_arr = cJSON_AddArrayToObject(doc, "files");
        errors_arr = cJSON_AddArrayToObject(doc, "errors");
    }
    for (int f = 0; f < num_files; f++) {
        file_result_t fr = {files[f], NULL, NULL, NULL};
        if (!compute_file(&fr, configs, num_configs)) {
            status = PW_CLI_BAD_INPUT;
            if (json) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "path", fr.path);
                cJSON_AddStringToObject(e, "message", pw_last_error());
                cJSON_AddItemToArray(errors_arr, e);
            }
            free_file(&fr);
            continue;
        }
        good_files++;
        for (int c = 0; c < num_configs; c++) add_stats(&all[c], &fr.totals[c]);
        if (json) cJSON_AddItemToArray(files_arr, file_json(&fr, configs, num_configs));
        else print_file_text(&fr, configs, num_configs);
        free_file(&fr);
    }
    if (json) {
        cJSON *total = cJSON_AddObjectToObject(doc, "total");
        cJSON_AddNumberToObject(total, "files", good_files);
        cJSON_AddNumberToObject(total, "selections", (double)all[0].selections);
        cJSON *arr = cJSON_AddArrayToObject(total, "groupings");
        for (int c = 0; c < num_configs; c++)
            cJSON_AddItemToArray(arr, stats_json(&configs[c], &all[c], all[0].union_visits));
        char *text = cJSON_Print(doc);
        int bad = !text || fprintf(json_out, "%s\n", text) < 0;
        if (json_out != stdout) bad |= fclose(json_out) != 0;
        else bad |= fflush(stdout) != 0;
        if (bad) {
            fprintf(stderr, "pageweaver stats: cannot write the JSON document%s%s\n",
                    json_out != stdout ? " to " : "", json_out != stdout ? json_path : "");
            status = PW_CLI_BAD_INPUT;
        }
        free(text);
        cJSON_Delete(doc);
    } else if (good_files > 0) {
        printf("all files (%d of %d read):\n", good_files, num_files);
        print_header();
        for (int c = 0; c < num_configs; c++)
            print_row("total", &configs[c], &all[c], all[0].union_visits);
    }
    if (!json && (fflush(stdout) != 0 || ferror(stdout))) { /* e.g. a full disk */
        fprintf(stderr, "pageweaver stats: cannot write the tables to standard output: %s\n",
                strerror(errno));
        status = PW_CLI_BAD_INPUT;
    }
    free(files);
    return status;
}
