/* A main() for the fuzz targets without libFuzzer (any C compiler), for the test suite:
 *
 *   fuzz_<target> [--seed S] [--random N] [--max-len L] [--only I] [PATH...]
 *
 * runs LLVMFuzzerTestOneInput on every file named (a directory: each regular file in it,
 * in name order), then on N inputs made from the seed: random bytes of random lengths up
 * to L (default 4096), and mutations of the files read (bytes flipped, inserted, erased,
 * runs copied from another file). The seed and the command that replays one input are
 * printed on stderr first (input I depends on the seed, L and the files: the same command
 * with --only I). A failed check aborts inside the target (SIGABRT), a sanitizer report
 * ends the run through its death callback (UBSan with abort_on_error=1 too); either way
 * the input is named first. Without --seed the seed comes from PW_TEST_SEED, else from the
 * time. Exit 0 when every input ran. */
#define _POSIX_C_SOURCE 200809L /* strdup, getpid, opendir */

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct blob {
    uint8_t *data;
    size_t size;
    char *name;
} blob_t;

static blob_t *g_files;
static size_t g_count, g_cap;
static const char *g_current = "";
static char g_current_buf[512];

/* Names the input that failed, once (a sanitizer's death callback may run before the
 * SIGABRT that abort_on_error raises). Not async-signal-safe in general; good enough to
 * name the input before dying. */
static void name_input(void)
{
    static int named = 0;
    if (named || !g_current[0]) return;
    named = 1;
    fprintf(stderr, "fuzz replay: failed on input %s\n", g_current);
}

static void on_abort(int sig)
{
    name_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The sanitizers' runtime, when linked (weak: absent without it). */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static int read_file(const char *path, blob_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return -1;
    out->data = buf;
    out->size = n;
    out->name = strdup(path);
    return 0;
}

static void add_file(const char *path)
{
    if (g_count == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 64;
        g_files = realloc(g_files, g_cap * sizeof *g_files);
        if (!g_files) {
            fprintf(stderr, "fuzz replay: out of memory\n");
            exit(2);
        }
    }
    if (read_file(path, &g_files[g_count]) != 0) {
        fprintf(stderr, "fuzz replay: cannot read %s\n", path);
        exit(2);
    }
    g_count++;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz replay: no such file or directory: %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_file(path);
        return;
    }
    DIR *dir = opendir(path);
    if (!dir) {
        fprintf(stderr, "fuzz replay: cannot open directory %s\n", path);
        exit(2);
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(dir);
    if (n) qsort(names, n, sizeof *names, compare_names);
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) add_file(names[i]);
        free(names[i]);
    }
    free(names);
}

/* splitmix64 */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Input i of the seed: random bytes, or a mutation of a file (when there are files). */
static size_t make_input(uint64_t seed, uint64_t index, size_t max_len, uint8_t *buf)
{
    uint64_t s = seed ^ (index * 0xd1b54a32d192ed03ull);
    next(&s);
    if (g_count == 0 || next(&s) % 4 == 0) {
        size_t len = (size_t)(next(&s) % (max_len + 1));
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)next(&s);
        return len;
    }
    const blob_t *base = &g_files[next(&s) % g_count];
    size_t len = base->size < max_len ? base->size : max_len;
    memcpy(buf, base->data, len);
    const int edits = 1 + (int)(next(&s) % 8);
    for (int e = 0; e < edits; e++) {
        const uint64_t kind = next(&s) % 5;
        const size_t at = len ? (size_t)(next(&s) % len) : 0;
        if (kind == 0 && len) {
            buf[at] ^= (uint8_t)(1u << (next(&s) % 8));
        } else if (kind == 1 && len) {
            buf[at] = (uint8_t)next(&s);
        } else if (kind == 2 && len < max_len) { /* insert one byte */
            memmove(buf + at + 1, buf + at, len - at);
            buf[at] = (uint8_t)next(&s);
            len++;
        } else if (kind == 3 && len) { /* erase a run */
            size_t run = 1 + (size_t)(next(&s) % 16);
            if (run > len - at) run = len - at;
            memmove(buf + at, buf + at + run, len - at - run);
            len -= run;
        } else if (kind == 4) { /* copy a run from another file over this one */
            const blob_t *other = &g_files[next(&s) % g_count];
            if (other->size && len) {
                const size_t from = (size_t)(next(&s) % other->size);
                size_t run = 1 + (size_t)(next(&s) % 64);
                if (run > other->size - from) run = other->size - from;
                if (run > len - at) run = len - at;
                memcpy(buf + at, other->data + from, run);
            }
        }
    }
    return len;
}

int main(int argc, char **argv)
{
    uint64_t seed = 0;
    int have_seed = 0;
    long long random_count = 0, only = -1;
    size_t max_len = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
            have_seed = 1;
        } else if (!strcmp(argv[i], "--random") && i + 1 < argc) {
            random_count = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--max-len") && i + 1 < argc) {
            max_len = (size_t)atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = atoll(argv[++i]);
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--seed S] [--random N] [--max-len L] [--only I] [PATH...]\n", argv[0]);
            return 2;
        } else {
            add_path(argv[i]);
        }
    }
    if (!have_seed) {
        const char *env = getenv("PW_TEST_SEED");
        seed = env && env[0] ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 1000003u + (uint64_t)getpid();
    }
    /* SIGABRT only: a segmentation fault is the sanitizer's to report (with its stack), and
     * its death callback names the input. */
    signal(SIGABRT, on_abort);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(name_input);

    for (size_t i = 0; i < g_count; i++)
        if (g_files[i].size > max_len) max_len = g_files[i].size;
    uint8_t *buf = malloc(max_len + 1);
    if (!buf) {
        fprintf(stderr, "fuzz replay: out of memory\n");
        return 2;
    }
    /* On stderr (unbuffered): the seed and the replay command must survive a crash. */
    fprintf(stderr, "seed: %llu; one input again:", (unsigned long long)seed);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") || !strcmp(argv[i], "--only") || !strcmp(argv[i], "--random")) {
            i++;
            continue;
        }
        fprintf(stderr, " %s", argv[i]);
    }
    fprintf(stderr, " --seed %llu --only I\n", (unsigned long long)seed);
    if (only < 0) {
        for (size_t i = 0; i < g_count; i++) {
            g_current = g_files[i].name;
            LLVMFuzzerTestOneInput(g_files[i].data, g_files[i].size);
        }
    }
    long long ran = 0;
    for (long long i = only >= 0 ? only : 0; i < (only >= 0 ? only + 1 : random_count); i++) {
        const size_t len = make_input(seed, (uint64_t)i, max_len, buf);
        snprintf(g_current_buf, sizeof g_current_buf, "random %lld of seed %llu (the command above with I = %lld)",
                 i, (unsigned long long)seed, i);
        g_current = g_current_buf;
        LLVMFuzzerTestOneInput(buf, len);
        ran++;
    }
    g_current = ""; /* what fails after this (a leak report at exit) is no input's */
    printf("%zu files and %lld random inputs: every check passed\n", only >= 0 ? (size_t)0 : g_count, ran);
    for (size_t i = 0; i < g_count; i++) {
        free(g_files[i].data);
        free(g_files[i].name);
    }
    free(g_files);
    free(buf);
    return 0;
}
