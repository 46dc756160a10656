/* `pageweaver bench`: shared between tools/cli/bench.c (options, CPU statistics, reference
 * check, tables, JSON) and tools/cli/bench_gpu.c (device arms, timing, measured rates). */
#ifndef PW_CLI_BENCH_H
#define PW_CLI_BENCH_H

#include <stdint.h>

#include "pageweaver.h"
#include "pageweaver_capture.h"

typedef struct bench_options {
    int replays;    /* timed graph replays per arm (>= 50 for the protocol) */
    int warmup;     /* untimed replays per arm before them */
    int copies;     /* copies of Q, Top-K and O the replays rotate through (>= 3) */
    int check_rows; /* rows of the reference check (0: none) */
    uint64_t seed;  /* random permutation, reference-check rows */
    int cpu_only;   /* skip the GPU even when there is one */
    int rates;      /* measure L2 bandwidth and the FP8 GEMM rate (floors) */
    int quiet;      /* no progress lines */
    int interleaved_replays; /* replays per arm of the interleaved default-kernel arms */
    int table_pages; /* > max_pages: widen each page table to this many columns (0: as read) */
    uint32_t vt_flags; /* PW_PLAN_VT_PREPASS / NO_VT_PREPASS and PW_PLAN_FP8X2_STACKED / NO_FP8X2_STACKED on every Union4 arm, or 0 */
    int union4_window; /* 64 or 128: the regroup window of every Union4 arm (the default plan's too) and of
                          their caller permutations; 0 (default): the default plan's arms PW_WINDOW_AUTO,
                          the other Union4 arms and the permutations 128 */
    int max_query_rows; /* pw_plan_config_t.max_query_rows of every arm's plan (AUTO reads it): 0 (default,
                           not known), N, or -1: each capture's own most rows of a request, as an
                           engine passing its max_seqlen_q */
} bench_options_t;

/* Permutations computed on the CPU (pw_ref_regroup) for every capture. */
enum {
    PERM_IDENTITY,
    PERM_W64_GUARDED,
    PERM_W128_GUARDED,
    PERM_W64_GREEDY,
    PERM_W128_GREEDY,
    PERM_W512_GREEDY,
    PERM_W2048_GREEDY,
    PERM_RANDOM,
    PERM_W128_GUARDED_G4, /* guarded W128 with 4-query groups: Union4's regroup objective (C_4) */
    PERM_W128_GUARDED_G2, /* guarded W128 with pairs: the stacked FP8X2 tile's objective */
    PERM_W64_GUARDED_G4,  /* guarded W64 with 4-query groups: the default plan where it picks W64 */
    NUM_PERMS
};

/* Timed arms (docs/semantics.md §5 and App. A of the paper). */
enum {
    ARM_T0,             /* full call, identity order, Union8 */
    ARM_FIXED_W128,     /* full call with the caller's (precomputed) guarded W128 perm */
    ARM_ONLINE_W64,     /* full call, in-call guarded regroup W64 */
    ARM_ONLINE_W128,    /* full call, in-call guarded regroup W128 (the default plan) */
    ARM_ONLINE_W64_GREEDY,
    ARM_ONLINE_W128_GREEDY,
    ARM_UNION4,         /* full call, guarded W128, Union4 */
    ARM_PER_QUERY,      /* full call, per-query kernel */
    ARM_FIXED_IDENTITY, /* offline groupings: execution only, perm precomputed */
    ARM_FIXED_RANDOM,
    ARM_FIXED_W512,
    ARM_FIXED_W2048,
    ARM_REORDERED,      /* gather Q/Top-K into W128 order + identity full call + scatter O */
    ARM_REORDERED_ATTN, /* the identity full call on the reordered tensors alone */
    ARM_ONLINE_W128_X2, /* ARM_ONLINE_W128 with args.precision = PW_PRECISION_FP8X2 */
    ARM_UNION4_X2,      /* ARM_UNION4 with args.precision = PW_PRECISION_FP8X2 */
    /* The default kernel (Union4), timed together with ARM_UNION4 by interleaved replays
     * (arm after arm, replay after replay; first_interleaved_arm..NUM_ARMS-1 + ARM_UNION4) */
    ARM_UNION4_IDENTITY,   /* full call, identity order, Union4 (T_identity) */
    ARM_UNION4_FIXED_W128, /* caller's guarded W128 perm, Union4 (T_fixed of the default kernel) */
    ARM_DEFAULT,           /* PW_PLAN_CONFIG_INIT as it is: AUTO, PW_WINDOW_AUTO, Union4 (T_default) */
    ARM_DEFAULT_G8,        /* the default plan with PW_PLAN_REGROUP_GROUPS_OF_8 (the objective
                              before 2026-12-01's 4-query regroup; A/B) */
    ARM_DEFAULT_NOT_BY_TILE, /* the default plan with PW_PLAN_NO_REGROUP_BY_TILE (the regroup
                              objective fixed at g = 4 whatever FP8X2 tile the call runs, as
                              before 2026-12-03; A/B) */
    ARM_DEFAULT_ALONE,     /* ARM_DEFAULT timed by itself after the interleaved group (its own
                              replays back to back, as a peer's harness times the peer) */
    NUM_ARMS
};

typedef struct bench_timing {
    int replays;
    double median_ms, min_ms, p90_ms, mean_ms;
} bench_timing_t;

typedef struct bench_arm_result {
    int ran;             /* 1: timed */
    bench_timing_t t;
    int same_as_t0;      /* output bytes equal T0's: 1 / 0; -1 not compared */
    double differing;    /* fraction of output elements that differ from T0's */
    int same_as_x2;      /* ARM_UNION4_X2 only: output bytes equal ARM_ONLINE_W128_X2's
                            (same arithmetic): 1 / 0; -1 not compared */
    double differing_x2; /* fraction of output elements that differ from it */
    double nrms_x2;      /* NRMS of its output against that arm's (BF16 values; FP8X2 on the
                            V^T pre-pass takes P in f16: docs/semantics.md §4.5) */
    char error[200];
} bench_arm_result_t;

typedef struct bench_rates {
    int measured;
    double l2_read_tbps;   /* TB/s (1e12 B/s) */
    double fp8_gemm_tflops;            /* the faster of the two below (used by the floors) */
    double fp8_gemm_tflops_precise;    /* cuBLASLt default accumulation */
    double fp8_gemm_tflops_fast_accum; /* CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1 */
    double l2_buffer_mib;
    int gemm_size;
    char error[200];
} bench_rates_t;

/* The median of per-round paired differences and its distribution-free 95% interval, us. */
typedef struct bench_paired {
    double median_us, lo_us, hi_us;
} bench_paired_t;

#define BENCH_MAX_LISTED_ROWS 4096 /* reference_check.row_ids in the JSON up to this many rows */

typedef struct bench_capture {
    const char *path;
    pw_capture_t *capture;
    uint32_t vt_flags;             /* bench_options_t.vt_flags */
    int32_t union4_window;         /* bench_options_t.union4_window */
    int32_t max_query_rows;        /* pw_plan_config_t.max_query_rows of every plan (bench_options_t's,
                                      -1 resolved to the capture's most rows of a request) */
    int fast_path;                 /* G=16 D=128 P=128 K=16 */
    double visible_pairs;          /* sum over KV heads and rows of |A_i| */
    int64_t bad_pages;             /* (query, KV head, page) pairs of S_i whose physical page
                                      lies outside [0, num_cache_pages): they contribute
                                      nothing (the reference's bad_page_count, all rows) */
    int32_t *perms[NUM_PERMS];     /* [Hkv, N] host */
    int32_t perm_window[NUM_PERMS];
    double perm_cpu_ms[NUM_PERMS]; /* CPU reference regroup time (information only) */
    pw_union_stats_t stats[NUM_PERMS];
    pw_union_stats_t reordered_stats; /* identity grouping of the W128-reordered rows */
    /* reference check on a slice of rows (FP64 exact reference) */
    int check_rows;
    int32_t *check_row_ids;        /* the rows, ascending, when check_rows <= BENCH_MAX_LISTED_ROWS (the
                                      JSON lists them: bench/flashinfer_peer.py checks the same ones) */
    double nrms_emulate_vs_exact;  /* the FP8 arithmetic's own error */
    double nrms_emulate_x2_vs_exact; /* the same for PW_PRECISION_FP8X2 */
    int gpu_checked;               /* ARM_ONLINE_W128's output (PW_PRECISION_FP8) */
    double nrms_gpu_vs_exact, nrms_gpu_vs_emulate;
    int64_t gpu_nan;
    int gpu_x2_checked;            /* ARM_UNION4_X2's output (PW_PRECISION_FP8X2) */
    double nrms_gpu_x2_vs_exact, nrms_gpu_x2_vs_emulate; /* vs the FP8X2-emulating reference */
    int64_t gpu_x2_nan;
    /* GPU */
    int gpu_ran;
    char gpu_note[256];
    int device_meta_checked, device_meta_matches; /* in-call W128 metadata vs CPU stats */
    int gpu_bad_pages_counted;     /* 1: gpu_bad_pages holds the kernel's count */
    int64_t gpu_bad_pages;         /* the kernel's bad_page_count in one untimed call of
                                      T_online W128 (should equal bad_pages) */
    bench_arm_result_t arms[NUM_ARMS];
    /* Paired differences of the default kernel's interleaved group: per round, the two
     * arms' replays of that round (adjacent in the stream or one apart), so drift common to
     * a round cancels; the median and a distribution-free 95% interval for it (order
     * statistics of the differences), us. paired_rounds = 0: not computed. */
    int paired_rounds;
    bench_paired_t c_online_paired; /* T_online - T_fixed */
    bench_paired_t excess_paired;   /* T_default - T_identity */
    /* The default plan's choice (pw_plan_info, PW_PRECISION_FP8) and the time guard's figures */
    int default_known;
    pw_plan_info_t default_info;
    /* The same plan at the window T_online and T_fixed run (--union4-window, else 128): the
     * time guard's figures beside the measured S_exec and C_online (default_info's are at the
     * window PW_WINDOW_AUTO picks). Valid when default_known. */
    pw_plan_info_t measured_window_info;
    char default_note[256]; /* !default_known: why (pw_plan_create's or pw_plan_info's message) */
    int x2_f16_p; /* the FP8X2 reference check emulates P in f16 (the Union4 arms' V^T pre-pass) */
    int x2_stacked; /* the default plan's FP8X2 calls run the stacked 2-slot tile (pw_fp8x2_stack_choice) */
    uint64_t stack_counts[2]; /* pw_fp8x2_stack_choice's counts (0 where the plan has no choice) */
    /* host copy of the GPU output of ARM_ONLINE_W128 (for the reference check), or NULL */
    pw_bf16_t *gpu_output;
    /* host copy of the GPU output of ARM_UNION4_X2 (reference check), or NULL; holds
     * ARM_ONLINE_W128_X2's output in between, for the byte comparison of the two */
    pw_bf16_t *gpu_output_x2;
} bench_capture_t;

const char *bench_arm_name(int arm);

/* The library's default arithmetic (what PW_ATTENTION_ARGS_INIT sets) and the plain Union4 +
 * guarded W128 arm that runs it: the default kernel's interleaved group (T_identity,
 * T_default, T_online, T_fixed: ARM_UNION4_IDENTITY, ARM_DEFAULT, this arm,
 * ARM_UNION4_FIXED_W128) runs in the default arithmetic. */
static inline pw_precision_t bench_default_precision(void)
{
    const pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    return a.precision;
}
static inline int bench_default_online_arm(void)
{
    return bench_default_precision() == PW_PRECISION_FP8X2 ? ARM_UNION4_X2 : ARM_UNION4;
}
/* 1 for the arms from ARM_UNION4_IDENTITY on (the default kernel's interleaved group,
 * besides bench_default_online_arm): they run the library's default arithmetic. */
static inline int bench_arm_in_default_arithmetic(int arm)
{
    return arm >= ARM_UNION4_IDENTITY && arm < NUM_ARMS;
}
/* 1 when the arm runs PW_PRECISION_FP8X2 (QK and PV twice on the tensor cores). */
static inline int bench_arm_is_x2(int arm)
{
    if (arm == ARM_ONLINE_W128_X2 || arm == ARM_UNION4_X2) return 1;
    return bench_default_precision() == PW_PRECISION_FP8X2 && bench_arm_in_default_arithmetic(arm);
}
const char *bench_arm_key(int arm);
const char *bench_perm_name(int perm);
const char *bench_perm_key(int perm);

/* 1 if the GPU part can run (CUDA build, an sm_90 device); else 0 and a reason. */
int bench_gpu_available(char *reason, size_t reason_size);
/* Measures the L2 read bandwidth and the dense FP8 GEMM rate. */
void bench_gpu_rates(bench_rates_t *rates);
/* Times every arm of one capture (bc->perms must be filled); 0 on success. */
int bench_gpu_capture(bench_capture_t *bc, const bench_options_t *options);

#endif
