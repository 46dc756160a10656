/*
 * pageweaver.h — public C API of PageWeaver: dynamic sparse prefill attention with online
 * query regrouping and shared KV pages (Query Unions) on NVIDIA Hopper.
 *
 * What is computed is defined in docs/semantics.md (the contract the library, its CPU
 * reference and its tests follow); comments cite its sections as "semantics §x". "paper §x"
 * refers to the source paper (PageWeaver: KV-Guided Query Unions for Sparse Attention, v1).
 *
 * Conventions used by every function below:
 *  - N  = query rows (tokens) of the current prefill chunk, all requests packed.
 *  - R  = requests in the chunk.       Hkv = KV heads.
 *  - G  = Q heads per KV head (16 on the fast path); Hq = Hkv * G; Q head h uses KV head h / G.
 *  - D  = head dim (128),  P = page size in tokens (128; the GPU also runs 64),  K = Top-K pages per row (16;
 *    the GPU runs any K up to 64).
 *  - Top-K ids are LOGICAL page ids of the query's request, int32, layout [Hkv, N, K]
 *    (the layout SGLang's MiniMax sparse prefill uses). Any int32 value is allowed; ids
 *    that are negative, past the KV length or wholly in the query's future are ignored
 *    (semantics §1).
 *  - Every function returns a pw_status_t; on failure pw_last_error() gives a message
 *    naming the argument or field at fault (thread-local; it stays until the next FAILED
 *    call on the same thread: successful calls do not clear it). The library never
 *    prints and never exits.
 *  - Host functions (pw_ref_*) take host pointers. Device functions take device
 *    pointers and run asynchronously on the given stream.
 */
#ifndef PAGEWEAVER_H
#define PAGEWEAVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/* Version                                                                              */
/* ------------------------------------------------------------------------------------ */
#define PW_VERSION_MAJOR 0
#define PW_VERSION_MINOR 3
#define PW_VERSION_PATCH 0
#define PW_VERSION_NUMBER (PW_VERSION_MAJOR * 10000 + PW_VERSION_MINOR * 100 + PW_VERSION_PATCH)

/* Runtime version of the linked library, as PW_VERSION_NUMBER. */
int pw_version_number(void);
/* Runtime version string, e.g. "0.3.0". Static storage. */
const char *pw_version_string(void);

/* ------------------------------------------------------------------------------------ */
/* Status                                                                               */
/* ------------------------------------------------------------------------------------ */
typedef enum pw_status {
    PW_SUCCESS = 0,
    PW_ERROR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad size, an inconsistent layout */
    PW_ERROR_UNSUPPORTED = 2,      /* a valid configuration with no implemented path yet */
    PW_ERROR_OUT_OF_MEMORY = 3,    /* host allocation failed */
    PW_ERROR_INSUFFICIENT_WORKSPACE = 4, /* caller workspace smaller than the size query */
    PW_ERROR_CUDA = 5,             /* a CUDA runtime call or launch failed */
    PW_ERROR_NO_DEVICE = 6,        /* no usable CUDA device (no GPU, no driver); a device
                                      that is not sm_90 gives PW_ERROR_UNSUPPORTED */
    PW_ERROR_IO = 7,               /* a file could not be opened, read or written */
    PW_ERROR_FORMAT = 8            /* a file is not in the expected format */
} pw_status_t;

/* Short constant name of a status ("PW_ERROR_INVALID_ARGUMENT"). Never NULL. */
const char *pw_status_string(pw_status_t status);
/* Message of the last FAILED call on this thread ("" if no call has failed yet). Never
 * NULL. Successful calls do not clear it, so read it only after a call returned a status
 * other than PW_SUCCESS; it is overwritten by the next failure on this thread. */
const char *pw_last_error(void);

/* ------------------------------------------------------------------------------------ */
/* Scalar types                                                                         */
/* ------------------------------------------------------------------------------------ */
typedef uint16_t pw_bf16_t;    /* bfloat16 bit pattern */
typedef uint8_t pw_fp8_e4m3_t; /* FP8 E4M3 (OCP "fn": no inf, 0x7f/0xff are NaN) bit pattern */

typedef enum pw_dtype {
    PW_DTYPE_FLOAT32 = 0,
    PW_DTYPE_BFLOAT16 = 1,
    PW_DTYPE_FLOAT64 = 2 /* reference outputs only */
} pw_dtype_t;

/* Round-to-nearest-even conversions (semantics §4.5). */
/* float -> E4M3 with saturation to +-448 (satfinite); NaN -> 0x7f (sign kept). */
pw_fp8_e4m3_t pw_fp8_e4m3_from_float(float x);
/* E4M3 -> float, exact; 0x7f / 0xff -> NaN. */
float pw_fp8_e4m3_to_float(pw_fp8_e4m3_t x);
/* float -> bfloat16, round-to-nearest-even; NaN stays NaN (quiet), inf stays inf. */
pw_bf16_t pw_bf16_from_float(float x);
/* bfloat16 -> float, exact. */
float pw_bf16_to_float(pw_bf16_t x);

/* ------------------------------------------------------------------------------------ */
/* Problem description                                                                  */
/* ------------------------------------------------------------------------------------ */
/* Shapes of one prefill call. Begins with its own size so that it can grow: always
 * initialise with PW_PROBLEM_INIT, then set the fields. */
typedef struct pw_problem {
    uint32_t struct_size;          /* sizeof(pw_problem_t), set by PW_PROBLEM_INIT */
    int32_t num_tokens;            /* N >= 0: query rows of the chunk, requests packed */
    int32_t num_requests;          /* R >= 1 */
    int32_t num_kv_heads;          /* Hkv >= 1 */
    int32_t q_heads_per_kv;        /* G: 16 on the fast path; 8 and 4 on the GPU's padded
                                      tile (Union4 and per-query; 16 / G times the useful
                                      tensor work), 8 and 4 on a dense tile (8 queries x
                                      8 heads, 16 queries x 4 heads) in pw_sparse_prefill
                                      with the V^T pre-pass (FP8, per-token scales too:
                                      the padded tile's outputs; FP8X2 without per-token
                                      scales: P in f16, as every pre-pass kernel,
                                      semantics §4.5); 1..64 for the
                                      reference */
    int32_t head_dim;              /* D: 128 on the fast path */
    int32_t page_size;             /* P in tokens: 128 on the fast path, 64 on Union4 / per-query */
    int32_t topk;                  /* K: Top-K ids per (KV head, query): 16 on the fast path;
                                      pw_sparse_prefill takes 1..64 (padded to 16, 32 or 64),
                                      the step entry points 16, 32 or 64 (attention; union
                                      preparation and the GPU regroup any K <= 64) */
    int32_t max_pages_per_request; /* logical pages addressable per request: columns of the
                                      page table; every kv_len <= this * P. PW_PROBLEM_INIT
                                      gives 0: set it (>= 1 when N > 0 for attention) */
    int64_t num_cache_pages;       /* physical pages held by the K and V caches. PW_PROBLEM_INIT
                                      gives 0: set it (>= 1 when N > 0 for attention) */
    float softmax_scale;           /* s; 0 means 1/sqrt(D) */
} pw_problem_t;

#define PW_PROBLEM_INIT {sizeof(pw_problem_t), 0, 1, 1, 16, 128, 128, 16, 0, 0, 0.0f}

/* Packed variable-length requests (semantics §1). Host pointers for pw_ref_*, device
 * pointers for device functions. Query row n belongs to request r iff cu_seqlens_q[r] <= n <
 * cu_seqlens_q[r+1]; its causal position is c_n = prefix_lens[r] + (n - cu_seqlens_q[r]). */
typedef struct pw_requests {
    const int32_t *cu_seqlens_q; /* [R+1]: 0 = cu[0] <= cu[1] <= ... <= cu[R] = N */
    const int32_t *prefix_lens;  /* [R]: tokens of the request cached before this chunk */
    const int32_t *kv_lens;      /* [R]: KV length L_r, prefix_r + qlen_r <= L_r <=
                                    max_pages_per_request * P */
    const int32_t *page_table;   /* [R, page_table_stride] int32: physical page of logical
                                    page p of request r at page_table[r*stride + p]; may be
                                    NULL for pw_ref_regroup / union functions */
    int64_t page_table_stride;   /* elements between page-table rows, >= max_pages_per_request */
} pw_requests_t;

/* Every pointer NULL, stride 0: set the arrays (and page_table_stride with a page table). */
#define PW_REQUESTS_INIT {NULL, NULL, NULL, NULL, 0}

/* Validates the shapes of a problem and (for host pointers) the request layout. With
 * requests_host and N > 0, max_pages_per_request >= 1 is required (kv_lens[r] <=
 * max_pages_per_request * P), the grouping functions included; with a page table too,
 * num_cache_pages >= 1 (the grouping functions, which take no page table, do not need
 * it). Errors: PW_ERROR_INVALID_ARGUMENT naming the field.
 * Does not look at Top-K ids: any int32 id is valid input. */
pw_status_t pw_problem_check(const pw_problem_t *problem, const pw_requests_t *requests_host);

/* ------------------------------------------------------------------------------------ */
/* Grouping: identity, Algorithm 1 greedy regroup, guarded regroup (semantics §3)       */
/* ------------------------------------------------------------------------------------ */
typedef enum pw_regroup_mode {
    PW_REGROUP_IDENTITY = 0, /* original order: slot = row */
    PW_REGROUP_GREEDY = 1,   /* Algorithm 1 exactly (paper §3.1) */
    PW_REGROUP_GUARDED = 2,  /* per window: greedy, but keep identity order when greedy does
                                not strictly reduce the window's union visits */
    PW_REGROUP_AUTO = 3      /* plans only (pw_plan_config_t): per call, GUARDED when the
                                time guard predicts that regrouping saves more attention
                                time than it costs, else IDENTITY (see pw_plan_info; a plan
                                with config.window 64 / 128 that keeps IDENTITY in both
                                precisions is the identity plan, window 0: the same
                                launches and workspace); the
                                grouping functions (pw_regroup, pw_ref_regroup, ...) reject
                                it with PW_ERROR_INVALID_ARGUMENT (pw_ref_union_prepare,
                                which ignores the mode, takes it) */
} pw_regroup_mode_t;

typedef struct pw_grouping {
    uint32_t struct_size;   /* sizeof(pw_grouping_t), set by PW_GROUPING_INIT */
    pw_regroup_mode_t mode; /* how slots are assigned to rows */
    int32_t window;         /* W: query positions per regroup window (64 or 128 on the GPU;
                               any >= 1 for the reference); 0 = one window per request */
    int32_t group_size;     /* g: 1..8; 8 for Union8 */
} pw_grouping_t;

#define PW_GROUPING_INIT {sizeof(pw_grouping_t), PW_REGROUP_GUARDED, 128, 8}

/* Groups are runs of g consecutive slots inside one window of one request: window k of
 * request r holds its slots [k*W, (k+1)*W) (the last window may be shorter; W = 0: the
 * whole request is one window), and each window is cut into runs of g slots, the last run
 * possibly shorter. Upper bound of the groups of one KV head:
 *   ceil(N/g) + R + (W > 0 ? ceil(N/W) : 0).
 * Returns 0 (and records no error message) when problem or grouping is NULL, or when
 * grouping->group_size < 1 or grouping->window < 0; the problem's shapes are not
 * validated here (pw_problem_check does that). */
int64_t pw_max_groups(const pw_problem_t *problem, const pw_grouping_t *grouping);

/* ------------------------------------------------------------------------------------ */
/* Union metadata (semantics §4.1)                                                      */
/* ------------------------------------------------------------------------------------ */
typedef struct pw_group_desc {
    int32_t slot_begin;         /* first slot of the group (index into a perm row) */
    int32_t request;            /* request of every member */
    int32_t num_members;        /* 1..g */
    int32_t union_size;         /* |U_G| distinct valid pages */
    int32_t half_union_size[2]; /* |U_G0|, |U_G1|: slots [0,4) and [4,g) */
    int32_t reserved[2];        /* 0 */
} pw_group_desc_t;

/* Per-group union page lists and member masks. Buffers are caller-owned: host for the
 * reference, device for the GPU kernel; the capacities below size them. */
typedef struct pw_union_meta {
    int64_t max_groups;        /* capacity per KV head (pw_max_groups) */
    int32_t union_capacity;    /* pages per group list: g * K (128 on the fast path; a plan's
                                  8 x Kd: 128, 256 or 512, pw_plan_workspace_views) */
    int32_t *num_groups;       /* [Hkv] groups actually written per KV head */
    pw_group_desc_t *groups;   /* [Hkv, max_groups] */
    int32_t *union_pages;      /* [Hkv, max_groups, union_capacity] logical page ids,
                                  ascending, -1 after union_size */
    uint8_t *member_masks;     /* [Hkv, max_groups, union_capacity]: bit s set iff the query
                                  in slot s of the group selected that page (S_i) */
} pw_union_meta_t;

/* Zero capacities, every pointer NULL (what pw_union_meta_free_host leaves). */
#define PW_UNION_META_INIT {0, 0, NULL, NULL, NULL, NULL}

/* Allocates host union metadata for pw_ref_union_prepare / pw_union_stats (malloc'd,
 * zeroed): max_groups = pw_max_groups(problem, grouping), union_capacity = group_size * K,
 * so [Hkv] + [Hkv, max_groups] x (sizeof(pw_group_desc_t) + union_capacity x 5) bytes.
 * *meta is overwritten (a previous allocation in it is not freed). Release with
 * pw_union_meta_free_host. For the GPU, the plan's workspace holds the metadata
 * (pw_plan_workspace_views). Errors: PW_ERROR_INVALID_ARGUMENT (NULL pointers, bad shapes,
 * group_size outside 1..8, window < 0), PW_ERROR_OUT_OF_MEMORY (then *meta is
 * PW_UNION_META_INIT). */
pw_status_t pw_union_meta_alloc_host(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                     pw_union_meta_t *meta);

/* Frees the buffers of pw_union_meta_alloc_host and resets *meta to PW_UNION_META_INIT.
 * Accepts NULL and a meta already freed or PW_UNION_META_INIT. */
void pw_union_meta_free_host(pw_union_meta_t *meta);

/* Logical-reuse metrics of a grouping (semantics §2). */
typedef struct pw_union_stats {
    int64_t queries;      /* query rows counted */
    int64_t groups;       /* groups counted */
    int64_t selections;   /* sum_i |S_i| */
    int64_t union_visits; /* sum_G |U_G| */
    int64_t c4;           /* sum_G (|U_G0| + |U_G1|) */
    double rho_q;         /* selections / union_visits (0 if no visits) */
} pw_union_stats_t;

/* ------------------------------------------------------------------------------------ */
/* CPU references (the specification in code)                                           */
/* ------------------------------------------------------------------------------------ */

/* Algorithm 1 (paper §3.1, semantics §3) on the CPU.
 *   topk_ids: [Hkv, N, K] int32 host.   perm: [Hkv, N] int32 host, written: perm[h*N + s]
 *   is the original row executed in slot s; a bijection inside each request. With N = 0
 *   both may be NULL (nothing is read or written).
 * The result does not depend on any page-count capacity (no 64K cliff).
 * Errors: PW_ERROR_INVALID_ARGUMENT (shapes, layout, window < 0, g outside 1..8),
 *         PW_ERROR_UNSUPPORTED (a window's queries x K over 2^31 - 1),
 *         PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_ref_regroup(const pw_problem_t *problem, const int32_t *topk_ids,
                           const pw_requests_t *requests, const pw_grouping_t *grouping,
                           int32_t *perm);

/* Union preparation (semantics §4.1) on the CPU, from any permutation that is a bijection
 * inside each request (else PW_ERROR_INVALID_ARGUMENT). grouping->window/group_size give
 * the group boundaries; grouping->mode is ignored. meta buffers: host, capacities at least
 * pw_max_groups() and g * K. */
pw_status_t pw_ref_union_prepare(const pw_problem_t *problem, const int32_t *topk_ids,
                                 const pw_requests_t *requests, const pw_grouping_t *grouping,
                                 const int32_t *perm, pw_union_meta_t *meta);

/* Metrics of prepared metadata (host). total: whole call; per_kv_head: [Hkv] or NULL.
 * selections are counted from the member masks, union visits and c4 from the group
 * descriptors. Errors: PW_ERROR_INVALID_ARGUMENT (NULL pointers, num_groups[h] outside
 * 0..max_groups, a group descriptor no union preparation writes: num_members < 1, or not
 * 0 <= half_union_size <= union_size <= union_capacity). */
pw_status_t pw_union_stats(const pw_problem_t *problem, const pw_union_meta_t *meta,
                           pw_union_stats_t *total, pw_union_stats_t *per_kv_head);

/* Metrics of one regroup window (one KV head, one request, one window: semantics §3.1). */
typedef struct pw_window_stats {
    int32_t kv_head;
    int32_t request;
    int32_t window;         /* k: the window holds the request's slots [k*W, (k+1)*W) */
    int32_t slot_begin;     /* first slot of the window (global row index) */
    int32_t num_slots;      /* W, or fewer for a request's last window */
    pw_union_stats_t stats; /* over the window's groups */
} pw_window_stats_t;

/* Per-window breakdown of pw_union_stats (host), in the order of the groups: KV heads,
 * then requests, then windows ascending; windows without a query are not listed. meta
 * must come from pw_ref_union_prepare (or the device equivalent, copied to the host)
 * with the same problem, requests and grouping (window gives the window boundaries). The
 * metadata does not record its window: with another grouping the breakdown follows that
 * grouping's windows, and no error can say so.
 *   window_stats_out: [capacity] host, or NULL to only count.   count: written, the
 *   number of windows (also when window_stats_out is NULL or too small).
 * Errors: PW_ERROR_INVALID_ARGUMENT (shapes, a group whose request or slot is out of
 *         range, a group descriptor as pw_union_stats, capacity < 0 with
 *         window_stats_out), PW_ERROR_INSUFFICIENT_WORKSPACE (capacity < *count). */
pw_status_t pw_union_stats_windows(const pw_problem_t *problem, const pw_requests_t *requests,
                                   const pw_grouping_t *grouping, const pw_union_meta_t *meta,
                                   pw_window_stats_t *window_stats_out, int64_t capacity,
                                   int64_t *count);

/* Convenience (host): pw_ref_regroup with grouping->mode, then pw_ref_union_prepare and
 * pw_union_stats, with internal allocations. topk_ids: [Hkv, N, K] host.
 * total: whole call; per_kv_head: [Hkv] or NULL.
 * Errors: those of the three calls (PW_ERROR_INVALID_ARGUMENT, PW_ERROR_OUT_OF_MEMORY). */
pw_status_t pw_ref_grouping_stats(const pw_problem_t *problem, const int32_t *topk_ids,
                                  const pw_requests_t *requests, const pw_grouping_t *grouping,
                                  pw_union_stats_t *total, pw_union_stats_t *per_kv_head);

typedef enum pw_ref_mode {
    PW_REF_EXACT = 0,       /* FP64 softmax over dequantised FP8 K/V and the BF16 Q */
    PW_REF_FP8_EMULATE = 1, /* mirrors the GPU arithmetic of semantics §4 step by step */
    /* As PW_REF_FP8_EMULATE, but PW_PRECISION_FP8X2 without per-token scales takes P once in
     * f16 (p16 = f16(256 p)), as pw_sparse_prefill's V^T pre-pass kernels do (semantics
     * §4.5); otherwise the same as PW_REF_FP8_EMULATE. Added 2026-12-02. */
    PW_REF_FP8_EMULATE_F16_P = 2
} pw_ref_mode_t;

/* Arithmetic of the GPU kernels (and of PW_REF_FP8_EMULATE), semantics §4.5.
 *   PW_PRECISION_FP8: semantics §4.5 as written (the paper's kernel): Q per (query, head) row
 *     and P = 256 p rounded once to E4M3. NRMS against the exact FP64 result on N(0,1)
 *     inputs: 3.4-3.6% (bench/NOTES.md, "Accuracy").
 *   PW_PRECISION_FP8X2: "two-term FP8": Q and P each as the sum of two E4M3 terms, the
 *     second being the E4M3 rounding of the first's error (q8 = e4m3(q / q_scale),
 *     q8lo = e4m3(q / q_scale - q8); p8 = e4m3(256 p), p8lo = e4m3(f16(256 p) - p8)), so
 *     QK and PV each run twice on the FP8 tensor cores into the same FP32 accumulator.
 *     About 8 significant bits per operand instead of 4: NRMS 0.09% on the same inputs
 *     before the output is rounded to BF16, 0.19-0.23% in BF16 (BF16 rounding alone costs
 *     ~0.17%), at the cost measured in the README's benchmark table (1.20-1.32x the
 *     FP8 time on the default Union4 path, 1.22-1.27x on Union8). K and V stay the caller's FP8
 *     caches (exact inputs). On pw_sparse_prefill's V^T pre-pass without per-token scales
 *     (Union4 plans that run it, the dense G = 8 / 4 tiles) P is instead one f16 value,
 *     f16(256 p), times V in f16 (exact) on the f16 tensor cores (since 2026-12-02: 5-8%
 *     faster, NRMS 0.20-0.21%); so FP8X2 bytes depend on that path (semantics §4.5), and
 *     on each path they are bitwise independent of the grouping.
 * PW_ATTENTION_ARGS_INIT sets PW_PRECISION_FP8X2, the accurate mode (the accuracy users
 * compare against: FlashInfer's SM90 sparse prefill and SGLang's Triton kernel measure
 * 0.21-0.22% on the same inputs); PW_PRECISION_FP8 is the documented fast mode. A
 * pw_attention_args_t whose struct_size predates this field (0.1.0) reads as FP8 (what
 * those callers got). */
typedef enum pw_precision {
    PW_PRECISION_FP8 = 0,  /* the fast mode */
    PW_PRECISION_FP8X2 = 1 /* the default (PW_ATTENTION_ARGS_INIT) */
} pw_precision_t;

/* Tensors of one attention call. Host pointers for the reference, device for the GPU. */
/* Per-token dequantisation scales (optional, semantics §4.5 "Per-token scales"): the scale
 * of cache slot `slot` of KV head h is k[h * stride_h + slot * stride_t] (V: v[...]),
 * slot = physical page * P + offset, as vLLM passes them. Real K of that slot =
 * k_scale * k[...] * e4m3 value (V likewise): they multiply the per-tensor scales (pass
 * k_scale = 1 for per-token scales alone). k and v are independent (NULL: none). The
 * arrays must hold every slot of the pages the call selects (h * stride_h + slot *
 * stride_t for those); values of slots a row cannot see never affect it; values a row sees
 * must be finite (else that row's output is unspecified: NaN or saturated; semantics
 * §4.5). Strides in elements, >= 0. The FP8 arithmetic with them
 * (P times vs / the page's largest vs before quantisation): semantics §4.5. k and v
 * 4-byte aligned. GPU: the Union4 (default) and per-query kernels read them (each warp
 * copies a selected page's 2 x 128 scales into shared memory; three CTAs per SM on the
 * Union4 kernel with the V^T pre-pass at K = 16, G = 16 (G = 8 / 4 in FP8X2), two elsewhere;
 * on the H200 1.5x the time of the call without them at G = 16, 1.9-2.4x at G = 8 and
 * without the pre-pass, see bench/NOTES.md); PW_KERNEL_UNION8 returns PW_ERROR_UNSUPPORTED.
 * Added in 0.2.0. */
typedef struct pw_token_scales {
    const float *k;   /* NULL: none */
    const float *v;   /* NULL: none */
    int64_t stride_h; /* elements between KV heads */
    int64_t stride_t; /* elements between cache slots */
} pw_token_scales_t;

/* Cache addressing by strides (optional; all 0: the token-major layout of k_cache below).
 * With page_stride != 0, element d of token t of physical page `page`, KV head h, is
 * k_cache[page * page_stride + h * head_stride + t * token_stride + d] (V: v_cache[same]),
 * t in [0, P): any layout whose pages, heads and tokens are strided, e.g. vLLM's
 * [num_blocks, Hkv, P, 2*D] cache with K and V interleaved in each token's row:
 * k_cache = base, v_cache = base + D, page_stride = Hkv*P*2*D, head_stride = P*2*D,
 * token_stride = 2*D. Strides in elements (bytes), > 0 (head_stride may be 0 with
 * Hkv = 1); the GPU needs each a multiple of 16 and below 2^40 (its tensor maps), and
 * k_cache / v_cache 16-byte aligned; the largest element addressed must be below 2^62.
 * kv_stride is not read then. Slots (per-token scales, semantics §1) stay physical page *
 * P + offset. Added in 0.2.0 (a 0.1.0 library ignores it: check pw_abi_query("offsetof
 * pw_attention_args_t.cache_layout") >= 0). */
typedef struct pw_cache_layout {
    int64_t page_stride;  /* elements between physical pages; 0: token-major (kv_stride) */
    int64_t head_stride;  /* elements between KV heads */
    int64_t token_stride; /* elements between the tokens of a page */
} pw_cache_layout_t;

typedef struct pw_attention_args {
    uint32_t struct_size;        /* sizeof(pw_attention_args_t), set by PW_ATTENTION_ARGS_INIT */
    const pw_bf16_t *q;          /* [N, Hq, D] bf16: (n,h,d) at n*q_stride + h*D + d */
    int64_t q_stride;            /* elements between query rows, >= Hq*D */
    const pw_fp8_e4m3_t *k_cache; /* [slots, Hkv, D] e4m3, slot = physical page * P + offset:
                                     (slot,h,d) at slot*kv_stride + h*D + d */
    const pw_fp8_e4m3_t *v_cache; /* same layout as k_cache */
    int64_t kv_stride;           /* elements between cache slots, >= Hkv*D */
    const float *k_scale;        /* one float: real K = k_scale * e4m3 value; any finite
                                    value (0 and negative too: semantics §4.5) */
    const float *v_scale;        /* one float */
    const int32_t *topk_ids;     /* [Hkv, N, K] logical page ids */
    pw_requests_t requests;      /* page_table required */
    void *o;                     /* [N, Hq, D] of o_dtype, written: (n,h,d) at
                                    n*o_stride + h*D + d. The outputs (o, lse,
                                    bad_page_count) must not overlap any input (q, the
                                    caches, the scales, topk_ids, the request arrays and page
                                    table, the sinks, the per-token scales) or each other (no
                                    attention in place: else PW_ERROR_INVALID_ARGUMENT naming
                                    both). Compared by address range, except two row sets of
                                    the same row stride in bytes (o, q, the page table), which
                                    are compared row by row: Q and O as column blocks of one
                                    buffer are fine, an lse inside O's row gaps is not */
    int64_t o_stride;            /* elements between output rows, >= Hq*D */
    pw_dtype_t o_dtype;          /* FLOAT32 / BFLOAT16 / FLOAT64 (reference); the GPU needs
                                    BFLOAT16: set it (PW_ATTENTION_ARGS_INIT gives FLOAT32) */
    float *lse;                  /* [N, Hq] natural-log LSE of the scaled scores, -inf for
                                    empty rows (with sink_logits: the head's sink); NULL to
                                    skip */
    uint32_t *bad_page_count;    /* optional (NULL): incremented once per (query, KV head,
                                    page) whose physical id is outside [0, num_cache_pages) */
    pw_precision_t precision;    /* PW_PRECISION_FP8X2 (default) or PW_PRECISION_FP8: the
                                    GPU kernels' arithmetic and the one PW_REF_FP8_EMULATE
                                    mirrors (PW_REF_EXACT computes exactly either way, but
                                    the value must be valid) */
    const float *sink_logits;    /* optional (NULL: none) [Hq] float32, 4-byte aligned:
                                    attention sinks (semantics §1), one logit per Q head in
                                    the units of the scaled scores (softmax_scale * q . k,
                                    natural log). Each row's softmax denominator gains
                                    exp(sink_logits[h]) and its numerator nothing; LSE
                                    includes it; a row with no visible token gets o = 0
                                    and LSE = sink_logits[h]. -inf: no sink for that head;
                                    +inf (or a value past 2.3e38, ~FLT_MAX / log2(e)):
                                    o = 0 (NaN where the row sees NaN data) and
                                    LSE = the sink on every row; NaN: LSE NaN, and o NaN on
                                    rows with a visible token. Device memory for the GPU
                                    entry points (read when the kernel runs, so a captured
                                    graph replays with new values), host memory for
                                    pw_ref_attention. A struct_size without this field
                                    reads as NULL. Added in 0.2.0: a library older than
                                    that ignores it silently (it accepts larger structs),
                                    so a caller that may load an older libpageweaver checks
                                    pw_abi_query("offsetof pw_attention_args_t.sink_logits")
                                    >= 0 (or pw_version_string()) before relying on it. */
    pw_token_scales_t token_scales; /* optional per-token K / V scales (all NULL: none);
                                    same struct_size rule as sink_logits. Added in 0.2.0. */
    const pw_bf16_t *sink_keys;  /* optional (NULL: none) [Hq, D] bf16, row h contiguous:
                                    attention sinks as a key per Q head (SGLang's form):
                                    row n's sink logit for head h is softmax_scale *
                                    (q[n, h] . sink_keys[h]), then as sink_logits
                                    (semantics §1, §4.5). Not together with sink_logits.
                                    16-byte aligned on the GPU. Each row's logit is computed
                                    in the kernels' epilogue (no extra launch). Added in
                                    0.2.0. */
    pw_cache_layout_t cache_layout; /* optional strided cache addressing (all 0: the
                                    token-major layout above); see pw_cache_layout_t */
} pw_attention_args_t;

#define PW_ATTENTION_ARGS_INIT                                                              \
    {sizeof(pw_attention_args_t), NULL, 0, NULL, NULL, 0, NULL, NULL, NULL,                 \
     {NULL, NULL, NULL, NULL, 0}, NULL, 0, PW_DTYPE_FLOAT32, NULL, NULL, PW_PRECISION_FP8X2, \
     NULL, {NULL, NULL, 0, 0}, NULL, {0, 0, 0}}

/* Sparse attention of semantics §1 on the CPU, FP64 accumulation. Empty rows: O = 0,
 * LSE = -inf (with args.sink_logits: LSE = the head's sink logit). A physical page outside the cache contributes nothing and is counted.
 * N = 0: success when the problem and the request arrays (cu_seqlens_q, prefix_lens,
 * kv_lens, the only tensors read) pass pw_problem_check (e.g. a kv_lens[r] > 0 still needs
 * max_pages_per_request * P to hold it); every other tensor may be NULL. PW_REF_FP8_EMULATE is
 * deterministic under the default floating-point rounding mode (round to nearest).
 * Non-finite data a row sees (NaN in its q, an E4M3 NaN code 0x7f / 0xff in a K or V
 * slot of its visible tokens): PW_REF_EXACT computes with it (that row's O / LSE come out
 * NaN); PW_REF_FP8_EMULATE refuses a non-finite score (the error below) and gives NaN
 * outputs for NaN in V; the GPU kernels give NaN for that row. Slots no row may see never
 * affect any output, in every mode and kernel.
 * Errors: PW_ERROR_INVALID_ARGUMENT (also: N > 0 with max_pages_per_request or
 * num_cache_pages < 1; FP8_EMULATE: a score that is not finite in FP32, from scales so
 * large that it overflows or from NaN / Inf data as above; rows before it may have been
 * written), PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_ref_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                             pw_ref_mode_t mode);

/* ------------------------------------------------------------------------------------ */
/* Device API: common                                                                   */
/* ------------------------------------------------------------------------------------ */
/* A CUDA stream; the same type as cudaStream_t (NULL = the legacy default stream). */
typedef struct CUstream_st *pw_stream_t;

/* ------------------------------------------------------------------------------------ */
/* Device: regroup and union preparation (semantics §3.3, §4.1)                         */
/* ------------------------------------------------------------------------------------ */
/* Both functions take device pointers (topk_ids, perm, meta buffers, and the request
 * arrays inside `requests`, which is a host struct), enqueue kernels on `stream` and
 * return without waiting. They never allocate, never synchronise and never read device
 * memory on the host, so they may be captured in a CUDA graph; request layout is device
 * data (cu_seqlens_q etc. must satisfy pw_problem_check when the kernels run; rows are
 * never read outside [0, N) even when they do not; what the host can check, e.g.
 * max_pages_per_request >= 1 when N > 0, is checked before anything is enqueued: the
 * references' PW_ERROR_INVALID_ARGUMENT). Results are bitwise equal to
 * pw_ref_regroup / pw_ref_union_prepare on the same inputs. Builds without CUDA make the
 * same argument checks (PW_ERROR_INVALID_ARGUMENT) and then return PW_ERROR_UNSUPPORTED.
 * After the argument checks, a machine without a usable CUDA device
 * gives PW_ERROR_NO_DEVICE (as every device entry point: the message says so), a device
 * other than sm_90 PW_ERROR_UNSUPPORTED; a launch failure gives PW_ERROR_CUDA with the
 * CUDA error in pw_last_error(). In a CUDA build pw_regroup with N = 0 enqueues nothing
 * and needs no device; pw_union_prepare always enqueues (it writes num_groups). pw_regroup's kernel
 * signals griddepcontrol.launch_dependents before its greedy loop: a kernel of the
 * caller's launched after it with cudaLaunchAttributeProgrammaticStreamSerialization may
 * start early and must wait (griddepcontrol.wait / cudaGridDependencySynchronize) before
 * it reads perm, as PDL requires; ordinary launches see no difference. */

/* Device workspace bytes pw_regroup needs for this problem and grouping (currently 0;
 * query it anyway). Errors: PW_ERROR_INVALID_ARGUMENT (NULL bytes, bad shapes); a build
 * without CUDA returns PW_ERROR_UNSUPPORTED (as pw_regroup) for arguments that pass
 * those checks. */
pw_status_t pw_regroup_workspace_size(const pw_problem_t *problem, const pw_grouping_t *grouping,
                                      size_t *bytes);

/* Online regroup (semantics §3, paper §3.1 Algorithm 1) on the GPU: writes the perm.
 *   topk_ids: [Hkv, N, K] int32 device, any values (semantics §1).
 *   requests: host struct of device arrays cu_seqlens_q [R+1], prefix_lens [R],
 *             kv_lens [R] (page_table unused, may be NULL).
 *   grouping: mode IDENTITY (any window), GREEDY (window 64 or 128, group_size 1..8) or
 *             GUARDED (window 64 or 128, group_size 1, 2, 4 or 8; identity order is kept
 *             in every window where greedy does not strictly reduce union visits).
 *   perm:     [Hkv, N] int32 device, written: perm[h*N + s] = original row of slot s, a
 *             bijection inside each request; windows never cross requests or KV heads.
 *   workspace: device, at least pw_regroup_workspace_size bytes (NULL when 0).
 * Any context length (no page-count capacity). K 1..64 for GREEDY / GUARDED (IDENTITY
 * takes any K: it does not read the ids): K <= 16 runs the 16-id kernel, K 17..64 a
 * wide-Top-K kernel with the same semantics and layout (K-bit mask rows; H200, A-hot,
 * guarded: W128 ~21 us at K = 32, ~31 us at K = 64; W64 ~13 / ~19 us); a window of K > 16
 * whose queries see more than 2048 (W = 128) / 4096 (W = 64) pages runs on a slower
 * hash-set kernel (~78 / ~136 us at W128 if every window did). One CTA per (window, KV
 * head); N/W + R CTAs per KV head are launched and surplus ones exit. Speed (K <= 16; the
 * page masks are indexed by page id on both direct paths), by max_pages_per_request (V):
 *  - V <= 2048 (W = 128) / 4096 (W = 64) pages (256K / 512K tokens at P = 128): 32 KB of
 *    shared memory per CTA (H200, 15,272 queries at 64K: W128 ~13 us, W64 ~7 us).
 *  - 2,049..14,336 pages (W128; 4,097..28,672 at W64; up to 1.75M / 3.5M tokens, counting
 *    1M = 8,192 pages): the long direct path (twenty-fourth session, 2026-12-03), up to 224
 *    KB per CTA (4 bytes per page and 32 queries; H200, 4,096 queries at a 1M-token context:
 *    W128 ~14 us, W64 ~8 us), if the device lets a CTA opt in to that much shared memory
 *    (sm_90: 227 KB) and the launch needs at most twice the waves of the fallback below.
 *    On an H200 past ~7,200 pages (W128) one such CTA fits an SM, so launches of more than
 *    264 CTAs (Hkv x (N/W + R): e.g. 8 KV heads x 8,192 queries) take the fallback.
 *  - Otherwise (larger tables, or the long path refused): each window whose queries see at
 *    most 2048 / 4096 pages takes the 32 KB path and the others renumber their pages
 *    through a hash set (~2x slower per window at W128, ~3x at W64: 29.4 / 22.9 us at 1M).
 * The permutation is the same bytes on every path. Past 2048 / 4096 pages each call makes a
 * few CUDA runtime queries (not cached) and sets the long kernel's shared-memory attribute
 * on the current device (always the same value: safe across threads and GPUs, and allowed
 * during stream capture; the path depends only on host-known shapes and the device, so a
 * captured graph replays the path chosen at capture).
 * A Top-K id >= max_pages_per_request counts as not visible on the direct paths, as the
 * contract (kv_len <= max_pages_per_request * P) already implies (the same result under
 * it).
 * Errors: PW_ERROR_INVALID_ARGUMENT (shapes, NULL pointers, bad mode),
 *         PW_ERROR_UNSUPPORTED (window not 64/128, K > 64, guarded g not in {1,2,4,8},
 *         Hkv > 65535, no CUDA in the build, a device other than sm_90),
 *         PW_ERROR_NO_DEVICE (no usable CUDA device), PW_ERROR_CUDA (launch failed). */
pw_status_t pw_regroup(const pw_problem_t *problem, const int32_t *topk_ids,
                       const pw_requests_t *requests, const pw_grouping_t *grouping,
                       int32_t *perm, void *workspace, size_t workspace_bytes,
                       pw_stream_t stream);

/* Union preparation (semantics §4.1) on the GPU, from any permutation that is a bijection
 * inside each request (a row outside its request is treated as selecting nothing; a
 * non-bijective perm gives unspecified metadata, never an out-of-bounds access).
 *   topk_ids, requests, perm: as for pw_regroup (device).
 *   grouping: window >= 0 and group_size 1..8 give the group boundaries (mode ignored).
 *   meta:     host struct of device buffers with max_groups >= pw_max_groups() and
 *             union_capacity >= g * K. Written: num_groups[h]; for groups i <
 *             num_groups[h]: groups[h*max_groups + i] (all fields, reserved = 0), the
 *             union_capacity-long rows union_pages (ascending, -1 after union_size) and
 *             member_masks (bit s = slot s of the group, 0 after union_size). Groups past
 *             num_groups[h] are not touched. Same layout and bytes as the reference.
 * Limits: K <= 64, max_pages_per_request <= 2^29, Hkv <= 65535, at most 2^31 - 1 groups.
 * Fastest when K is 16, 32 or 64, topk_ids is 16-byte aligned, union_capacity % 4 == 0 and
 * union_pages / member_masks are 16- / 4-byte aligned (cudaMalloc'd buffers are).
 * Errors: PW_ERROR_INVALID_ARGUMENT, PW_ERROR_UNSUPPORTED, PW_ERROR_NO_DEVICE,
 *         PW_ERROR_CUDA. */
pw_status_t pw_union_prepare(const pw_problem_t *problem, const int32_t *topk_ids,
                             const pw_requests_t *requests, const pw_grouping_t *grouping,
                             const int32_t *perm, const pw_union_meta_t *meta,
                             pw_stream_t stream);

/* ------------------------------------------------------------------------------------ */
/* Device: sparse attention kernels (semantics §4, paper §4)                            */
/* ------------------------------------------------------------------------------------ */
typedef enum pw_kernel {
    PW_KERNEL_UNION8 = 0,   /* 2-CTA cluster per 8-slot group, TMA multicast of each union
                               page into both CTAs (paper §4.2-4.3) */
    PW_KERNEL_UNION4 = 1,   /* one CTA per 4-slot half of each 8-slot group */
    PW_KERNEL_PER_QUERY = 2 /* one CTA per (query, KV head), 16 of its 64 rows used: the
                               design of SGLang's native SM90 sparse prefill; reads the
                               Top-K rows directly (perm and meta unused, may be NULL) */
} pw_kernel_t;

/* Sparse attention of semantics §1 with the arithmetic of semantics §4.5 on an sm_90 GPU.
 *   problem: fast path only: G = 16 (8 and 4 on Union4 and per-query), D = 128, P = 128
 *            (64 on Union4 and per-query: each page one 128-column step, columns 64..127
 *            masked), K = 16, 32 or 64 (32 and 64 on Union4 and per-query, where the kernel's page
 *            list holds 4 K pages; K = 16 on Union8) (else PW_ERROR_UNSUPPORTED).
 *   args: device pointers; q bf16, caches e4m3 (16-byte aligned, kv_stride % 16 == 0),
 *         o bf16 (o_dtype must be PW_DTYPE_BFLOAT16), lse optional, bad_page_count
 *         optional (a device uint32 the kernel atomically increments once per (query,
 *         KV head, page) whose physical page is outside the cache; the page is skipped).
 *   grouping: group_size 8 and the window the metadata was prepared with.
 *   perm: [Hkv, N] device, the permutation the metadata was prepared from.
 *   meta: device buffers written by pw_union_prepare (or uploaded from the reference).
 * Runs asynchronously on stream; no allocation, no host synchronisation: capturable in a
 * CUDA graph. The scales are device data, read by the kernel: scales so large that the
 * scores overflow FP32 give NaN outputs (not detectable on the host; the reference
 * reports them). N = 0: success, nothing enqueued. Errors: PW_ERROR_INVALID_ARGUMENT
 * (also a NULL grouping, perm or meta buffer, or meta's union_capacity < 8 K or max_groups <
 * pw_max_groups, for Union8 / Union4 with N > 0), PW_ERROR_UNSUPPORTED (grouping.group_size
 * other than 8, args.o_dtype other than PW_DTYPE_BFLOAT16; also, after the checks of problem, args, kernel, grouping, perm and meta,
 * in a build without CUDA), PW_ERROR_NO_DEVICE, PW_ERROR_CUDA (launch failure; message names the
 * CUDA error). */
pw_status_t pw_union_attention(const pw_problem_t *problem, const pw_attention_args_t *args,
                               const pw_grouping_t *grouping, const int32_t *perm,
                               const pw_union_meta_t *meta, pw_kernel_t kernel,
                               pw_stream_t stream);

/* ------------------------------------------------------------------------------------ */
/* Device: the full prefill call (semantics §5: regroup, union preparation, attention)   */
/* ------------------------------------------------------------------------------------ */
/* A plan fixes the shapes (pw_problem_t) and the choices below once; each
 * pw_sparse_prefill then enqueues on its stream, in order:
 *   1. pw_regroup (mode GREEDY / GUARDED: Algorithm 1 in windows of W; mode IDENTITY: the
 *      identity permutation; mode AUTO: GUARDED or IDENTITY as the time guard decides
 *      from the plan's shapes and args.precision, see pw_plan_info), skipped when the
 *      caller gives the permutation;
 *   2. pw_union_prepare (groups of 8 slots, union page lists, member masks);
 *   3. with PW_KERNEL_UNION4 (the default) on large enough inputs (PW_PLAN_VT_PREPASS
 *      has the rule): the V^T pre-pass. A memset clears a byte array of the workspace and
 *      the mark kernel sets the byte of every page some query selected and may see (from
 *      the Top-K ids: the pages of the call's unions, whatever the grouping); the scan
 *      (one thread per page-table entry and KV head) gives each marked page one of the KV
 *      head's tiles; the transpose writes each tile's page of V transposed (the attention
 *      kernel then needs no transpose: bench/NOTES.md v8, v8.1). Nothing carries over
 *      between calls: the workspace may hold anything before each call. The pre-pass
 *      reads nothing that steps 1-2 write, so when the stream is being captured into a
 *      CUDA graph the call captures steps 1-2 and step 3 as two parallel branches that
 *      step 4 waits for (no stream or event of the library's: the capture's dependency
 *      set; eager calls run them in the order above). The default's headline calls are
 *      shaped differently: FP8X2 calls that pick their tile on the device (G = 16 or 8,
 *      K <= 16, P = 128 without per-token scales: PW_PLAN_FP8X2_STACKED) in a plan
 *      that regroups (not created with PW_PLAN_NO_REGROUP_BY_TILE) regroup for both tiles
 *      (step 1 writes two permutations), and step 2 runs after the pre-pass's memset and
 *      mark (the mark makes the pick) as well as after step 1. Eager order: 1, memset,
 *      mark, 2, scan, transpose, 4; captured: 1 beside memset -> mark, then 2 beside
 *      scan -> transpose, then 4 after both. In these calls step 2 is launched as a
 *      programmatic dependent (cudaLaunchAttributeProgrammaticStreamSerialization: captured,
 *      it scans its requests while the regroup's greedy loop runs and waits,
 *      griddepcontrol.wait, before it reads the regroup's and the mark's outputs; the
 *      memset of its schedule counts comes before step 1), so a captured graph holds two
 *      programmatic edges (regroup -> union preparation, mark -> union preparation): a tool
 *      that reads the graph's dependencies must ask for the edge data
 *      (cudaGraphNodeGetDependencies with an edgeData array), or CUDA refuses the query as
 *      lossy (cudaErrorLossyQuery, the count-only form with both arrays NULL included: ask
 *      with arrays larger than any expected count instead). Every call without the pre-pass
 *      that computes its own permutation at K <= 16 (Union8 and per-query plans; Union4
 *      when the rule or PW_PLAN_NO_VT_PREPASS leaves the pre-pass off: chunks too small,
 *      page tables too wide; any regroup mode, identity included) launches step 2 the
 *      same way, after step 1's one kernel: its graph holds one programmatic edge
 *      (regroup -> union preparation), with the same rule for tools that read it;
 *   4. the attention kernel: pw_union_attention's with the chosen kernel; with the pre-pass,
 *      Union4's lean kernel reading the tiles (at G = 8, in FP8X2 without per-token scales
 *      and in FP8, a dense tile of 8 queries x 8 heads, at G = 4 one of 16 queries x 4 heads walking two
 *      consecutive groups' merged union; FP8: the same outputs, FP8X2: P in f16 on the
 *      pre-pass's f16 tiles, semantics §4.5; at G = 16, 8 or 4, K <= 16, P = 128 also
 *      the stacked tile: FP8X2 chosen per call on the device, or always with per-token
 *      scales; FP8 with per-token scales, with its second term 0 and the other tiles'
 *      bytes, always at G = 8 / 4 and chosen per call at G = 16: PW_PLAN_FP8X2_STACKED), its CTAs
 *      longest union first
 *      (union preparation lists them by size; pairs by the sum of the two unions), and,
 *      when R x max_pages_per_request exceeds
 *      the tile capacity, a second Union4 launch (the kernel that transposes V) for the KV
 *      heads whose pages did not fit (the per-query kernel skips 1-3).
 * Nothing else: no allocation, no host synchronisation, no host read of device memory, so
 * one call can be captured in a CUDA graph and replayed after the caller has changed the
 * CONTENTS of the device buffers (Top-K ids, page table, request lengths, Q, scales); the
 * shapes in the plan (N, R, Hkv, max_pages_per_request, num_cache_pages) and the buffer
 * ADDRESSES baked into a graph must stay. Same inputs give byte-identical outputs, and the
 * outputs do not depend on the grouping (semantics §4).
 *
 * Threads: calls that use one plan are not promised to be safe when they run concurrently
 * from several threads (not tested): give each thread its own plan, or serialise the calls
 * (the Python package holds a lock per plan). Distinct plans are independent. pw_last_error
 * is per thread. The CPU reference functions (pw_ref_*) keep no state between calls and
 * may run concurrently on distinct output buffers. */
typedef struct pw_plan pw_plan_t; /* opaque */

enum {
    /* The caller passes the permutation to every pw_sparse_prefill ("T_fixed", semantics §5:
     * e.g. a grouping computed ahead of time); the regroup step is skipped and the regroup
     * mode is ignored. Not allowed with PW_KERNEL_PER_QUERY (which uses no permutation). */
    PW_PLAN_CALLER_PERM = 1u << 0,
    /* PW_KERNEL_UNION4 only: always (VT_PREPASS) or never (NO_VT_PREPASS) run the V^T
     * pre-pass and the lean attention kernel, instead of the plan's rule. The rule has a
     * host half and a device half. Host: the pre-pass when N >= 4096, or N >= 2048 with the
     * caller's K >= 32 (H200, K 32 / 64: 9-35% faster at 2,048 queries; 1,024-query chunks
     * measured 10-16% slower with it at K = 16, and at K = 64 G = 8 / 4 17-71% slower), and
     * R x max_pages_per_request <= 4 x N x K (K: the caller's Top-K, before padding; each
     * call clears and scans one byte per page-table entry and KV head; an engine's
     * 8,192-column table qualifies from 2,048 queries per request on), and the scan's grid
     * fits (Hkv x ceil(R x max_pages / 256) <= 2^31 - 1). When the table has more entries
     * than C below (a KV head may fall back), N >= 8192 is also needed unless the tile
     * limit is the default 2,048 per KV head (Hkv <= 16, no smaller vt_max_pages); until
     * 2026-12-05 it was needed always: H200, 4,096 queries at a 48K-token prefix with an
     * 8,192-column table ran 9-43% faster on the pre-pass, and where the device falls back
     * (4,096 queries over 256K / 1M tokens at K = 16, 1M at K = 32 / 64; one KV head)
     * the pre-pass's mark and scan and the extra launches cost 1.3-7.4%; callers who know
     * their chunks' pages are spread that widely can pass NO_VT_PREPASS. Device, per
     * call and KV head: the
     * KV head runs on the pre-pass's tiles when its unions touch at most C = min(R x
     * max_pages_per_request, N x K / 64 (the caller's K), the tile limit) pages (each page selected 64
     * times on average: pages read by only a few CTAs made the pre-pass 16% slower, e.g.
     * 4,096 queries over a 1M-token context; bench/NOTES.md v8), else on the attention
     * kernel that transposes V itself, launched after the first (its CTAs of the other
     * heads exit at once; this launch exists only when R x max_pages_per_request > C). So
     * a page table sized for the model's longest context costs 5 bytes per entry, not a
     * tile per entry, and the choice follows the pages a call really touches. With
     * VT_PREPASS, C = min(R x max_pages, the tile limit). The tile limit is
     * config.vt_max_pages, or by default min(2048, 32768 / Hkv) (64 MiB of 32 KiB tiles per
     * KV head, 1 GiB in all). FP8 outputs are bitwise the same either way; FP8X2 takes P in
     * f16 on the tiles (or, at G = 16 or 8, K <= 16, P = 128, the stacked tile where the
     * call picks it: PW_PLAN_FP8X2_STACKED) and as two E4M3 terms otherwise (semantics §4.5:
     * bytes that differ, within the same accuracy) (H200: the pre-pass path 3-20% faster on large inputs). Both bits together are an argument error; VT_PREPASS
     * where the scan's grid does not fit is PW_ERROR_UNSUPPORTED. */
    PW_PLAN_VT_PREPASS = 1u << 1,
    PW_PLAN_NO_VT_PREPASS = 1u << 2,
    /* PW_KERNEL_UNION4 regroups to minimise the two 4-query halves' unions (C_4, the pages
     * Union4 walks: Algorithm 1 with g = 4 inside each window; the union metadata still
     * groups 8 slots, whose halves are those 4-query groups). This flag makes it minimise
     * 8-query unions instead, as Union8 does and as the library did before 2026-12-01 (for
     * A/B benchmarks; `pageweaver bench` times both); a G = 8 or 4 plan with the V^T
     * pre-pass does so without it (its dense tile walks 8-query unions, or pairs of them).
     * Outputs are bitwise the
     * same either way; only the speed differs. Ignored by the other kernels, with
     * PW_PLAN_CALLER_PERM and in calls that keep identity order. */
    PW_PLAN_REGROUP_GROUPS_OF_8 = 1u << 3,
    /* PW_PRECISION_FP8X2 calls on the V^T pre-pass at G = 16, 8 or 4, K <= 16, P = 128
     * have two tiles (semantics §4.5). G = 16: the lean kernel (a
     * 4-query half's 64 rows per page, P in f16 on f16 tiles) and the stacked 2-slot tile
     * (2 queries x 16 heads x FP8X2's two terms per 64 rows, both terms summed in FP32; a
     * tile whose 2 queries did not select a page skips it; E4M3 tiles). G = 8: the dense
     * tile (8 queries x 8 heads walking the 8-query union, P in f16) and the stacked 4-slot
     * tile (a 4-query half x 8 heads x two terms, walking the half's union). G = 4: the dense
     * tile (16 queries x 4 heads walking a pair of groups' merged union, P in f16) and the
     * stacked 8-slot tile (an 8-query group x 4 heads x two terms, walking the group's
     * union). Which is faster depends on how many pages consecutive queries share: H200,
     * the stacked tile 0.76-0.96x the lean kernel's time on the synthetic A/B/C workloads and
     * 1.02-1.14x on the captures (bench/NOTES.md, 21st session); at G = 8 0.66-0.92x the
     * dense tile's on the synthetic workloads and 1.02-1.08x on two captures (27th session);
     * at G = 4, full call, 0.80-0.82x on A-hot / C-hot and 0.94-1.02x on three captures
     * (28th session). By default the
     * call decides on the device, from two counts the pre-pass's mark launch takes over the
     * Top-K rows in identity order: the distinct pages of each unit of consecutive queries
     * (G = 16: pairs; G = 8: 4-query halves; G = 4: 8-query groups) and of each block of
     * two units, over every
     * 4th block of each KV head (a sample: the full counts cost ~20 us of a 3-KV-head call
     * at G = 8): the stacked
     * tile when the units' pages are under r x twice the blocks' pages (the stacked tile's
     * steps per step of the other tile; r = 0.75 at G = 16, 0.84 at G = 8, 0.87 at G = 4,
     * below the measured break-evens ~0.76 (since the stacked tile's one-product QK / PV,
     * 2026-12-04; 0.71 before), ~0.845 and ~0.88). The
     * choice is a function of the call's inputs, never of the grouping, so a call's outputs
     * stay independent of the grouping; they are the bytes of one of the two tiles
     * (within the same accuracy: NRMS vs exact ~0.2% either way). Both kernels are
     * launched; the CTAs of the one not chosen exit at once. With per-token scales
     * (args.token_scales; since 2026-12-04) the stacked tile reads them too (each page's
     * scales copied with its K from behind its E4M3 V^T tile), the other tile is the lean
     * kernel's per-token-scale form (G = 16) or the padded tile (G = 8 / 4: the dense tiles
     * read per-token scales in FP8 only), and the default is the stacked tile, always: it
     * measured faster on every input, the captures included (H200: 0.70-0.86x the other
     * tile's time at G = 16, 0.48-0.50x at G = 8, 0.27-0.38x at G = 4; bench/NOTES.md, 29th
     * session). PW_PRECISION_FP8 calls (since 2026-12-04, 34th session) may run the
     * stacked tile too, with its second term 0 (Q's and P's second-term rows stored as 0,
     * so each sum adds exactly 0): the same bytes as the lean kernel and the dense tiles,
     * with and without per-token scales. FP8 calls with per-token scales at G = 8 / 4 run
     * it by default (H200 full call: 0.55-0.74x the dense tile's per-token-scale form on
     * A / B / C-hot and two captures), at G = 16 as the device picks per call with the
     * G = 16 rule above (the stacked tile 0.90-0.98x the lean kernel's per-token-scale form
     * at r 0.67-0.75, 1.06-1.07x at r 0.84-0.87); FP8 calls without per-token scales keep
     * the lean kernel or the dense tile (bench/NOTES.md, 34th session). These flags fix the choice in both
     * precisions (STACKED: always the stacked tile, NO_FP8X2_STACKED: always the other
     * tile); both together are an argument error; other calls ignore them. */
    PW_PLAN_FP8X2_STACKED = 1u << 4,
    PW_PLAN_NO_FP8X2_STACKED = 1u << 5,
    /* By default the regroup objective follows the tile the call runs (FP8X2's, and since
     * the 34th session FP8's with per-token scales or PW_PLAN_FP8X2_STACKED: the same
     * rules, below, with "FP8X2 calls" read as those calls); this flag
     * turns that off (the plan's g in every call, as before 2026-12-03: for A/B
     * benchmarks). It concerns plans whose FP8X2 calls may run the stacked tile (G = 16
     * or 8, K <= 16, P = 128 on the V^T pre-pass, not PW_PLAN_NO_FP8X2_STACKED; at G = 4
     * both tiles walk 8-query unions, so g = 8 either way and the flag changes nothing) and that
     * regroup in FP8X2 (not IDENTITY, not PW_PLAN_CALLER_PERM, AUTO's time guard saying
     * yes), in their FP8X2 calls (those with per-token scales run the stacked tile
     * always, so they regroup with its g unless this flag is set); every other plan and call
     * ignores it. The stacked tile walks the union of each pair of queries, the lean
     * kernel that of each 4-query half, so the best greedy groups differ: Algorithm 1 with
     * g = 2 cuts the stacked tile's page steps ~2% on the A / B / C workloads but raises
     * C_4 ~7%, which the lean kernel pays (bench/NOTES.md, 22nd session). Where the device
     * picks the tile per call, such a call regroups both ways in one launch (the plan's g,
     * 4, or 8 with PW_PLAN_REGROUP_GROUPS_OF_8, and g = 2; at G = 8 the dense tile's g = 8
     * and the stacked 4-slot tile's g = 4: a second warp per window;
     * pw_plan_info's regroup_group_size stays the plan's g), and union preparation,
     * enqueued after the pre-pass's mark launch that makes the pick, prepares the groups
     * of the permutation that matches it (the workspace's perm is then that one); under
     * stream capture the graph is regroup || mark, then union preparation beside scan ->
     * transpose, then attention. The workspace holds one more [Hkv, N] int32 permutation
     * there. With PW_PLAN_FP8X2_STACKED (always the stacked tile) those calls simply
     * regroup with g = 2 (4 at G = 8; no extra part). H200, full call, FP8X2, interleaved replays
     * (bench/NOTES.md, 23rd session): -1.2% A-hot, -1.6% C-hot, -1.5% B-low (the stacked
     * tile), no change on B-hot (the lean kernel). Outputs are bitwise the same either
     * way (the grouping never changes them). */
    PW_PLAN_NO_REGROUP_BY_TILE = 1u << 6
};

typedef struct pw_plan_config {
    uint32_t struct_size;      /* sizeof(pw_plan_config_t), set by PW_PLAN_CONFIG_INIT */
    pw_regroup_mode_t regroup; /* AUTO (default: "regroup when it pays": per call, GUARDED
                                  when the time guard predicts a net saving, else
                                  IDENTITY; pw_plan_info says which), IDENTITY (never:
                                  original order), GREEDY or GUARDED (always; GUARDED:
                                  greedy per window only where it strictly cuts the
                                  window's union visits) */
    int32_t window;            /* W: query positions per regroup window, 64 or 128, or
                                  PW_WINDOW_AUTO (the default: the plan picks, see there);
                                  with PW_PLAN_CALLER_PERM any W >= 0 (0 = one window per
                                  request); ignored for IDENTITY; with AUTO at K > 16 any
                                  W >= 0 too (kept from before the time guard covered
                                  K > 16): a W other than 64 / 128 then means identity
                                  order, the window only cutting the union groups */
    pw_kernel_t kernel;        /* UNION4 (default: the fastest measured on every input so
                                  far, README benchmark), UNION8 (the paper's 2-CTA
                                  cluster kernel) or PER_QUERY; FP8 outputs are bitwise
                                  equal; FP8X2 ones are on each path, and Union4 on the
                                  V^T pre-pass takes P in f16 (semantics §4.5) */
    uint32_t flags;            /* PW_PLAN_CALLER_PERM, PW_PLAN_VT_PREPASS or
                                  PW_PLAN_NO_VT_PREPASS, PW_PLAN_REGROUP_GROUPS_OF_8,
                                  PW_PLAN_FP8X2_STACKED or PW_PLAN_NO_FP8X2_STACKED,
                                  PW_PLAN_NO_REGROUP_BY_TILE (or-ed), or 0 */
    int32_t vt_max_pages;      /* Union4 with the V^T pre-pass: most pages of V^T per KV head
                                  the workspace holds (32 KiB each); 0 = min(2048, 32768 /
                                  Hkv) (64 MiB per KV head, 256K tokens of touched
                                  context at P = 128, 128K at P = 64; 1 GiB in all); a KV head whose call touches
                                  more runs on the kernel that transposes V (FP8: the
                                  same outputs; FP8X2: semantics §4.5). Added after the first release: a config whose
                                  struct_size is that of the earlier struct (20 bytes) is
                                  read with 0; a larger one is read up to this field. */
    int32_t max_query_rows;    /* the most query rows of any one request in this plan's calls,
                                  when the host knows it (SGLang's and vLLM's max_seqlen_q /
                                  max_query_len), else 0 (the default: not known). Read by
                                  PW_REGROUP_AUTO only: where every request has at most 8
                                  rows, the plan keeps identity order (saving_us 0; the
                                  identity plan) without asking the time guard, and the
                                  regroup launch is saved. Up to the group size a call
                                  regroups with (2, 4 or 8: pw_plan_info's
                                  regroup_group_size, the stacked tile's 2 / 4) no grouping
                                  changes the work; from there to 8 only the split into
                                  Union4's two 4-query halves or the stacked tile's pairs
                                  can, and the regroup measured slower or barely faster
                                  (H100, regrouped against identity order: 4,096 queries in
                                  512 requests of 8 rows +4.3 us; 2,560 in 512 of 5 rows
                                  -1.3 us, the gain this gives up; 4,096 one-query
                                  requests +18.7 us, 2.4% slower, before the guard priced
                                  windows). A call with a longer request is still
                                  computed right (identity order is always exact); it is
                                  only not regrouped. Must be >= 0, and consistent with
                                  the problem: N <= R x max_query_rows (cu_seqlens_q[R] =
                                  N), else PW_ERROR_INVALID_ARGUMENT in every mode (an
                                  engine passing the wrong value would lose the regroup
                                  silently). Added after vt_max_pages: a config of the
                                  size before it (24 bytes) is read with 0. */
} pw_plan_config_t;

/* config.window: the plan picks the regroup window (since 2026-12-05; the default before
 * was 128). With PW_REGROUP_AUTO the time guard evaluates both windows in the default
 * arithmetic (PW_PRECISION_FP8X2) and takes the one whose predicted saving minus cost is
 * larger (ties: 128), then decides regroup or identity at that window for each precision:
 * a shorter window cuts fewer union pages but halves the regroup's serial greedy chain
 * (64 instead of 128 dependent steps per window: C_online ~6 us instead of ~12-14), so it
 * wins on chunks of a few thousand query positions. (H100, one KV head, 48K prefix, the
 * default call at W64 against W128, paired medians: 3,072 positions 7.3 us faster, 2,048
 * 0.5, 4,096 0.7; 4,096 at a 1M-token context 1.0 us slower, where the model's nets differ
 * by 0.15 us in W64's favour; A-hot, 15,272 positions, keeps W128, 10.8 us faster there than W64;
 * bench/NOTES.md, 38th session.) pw_plan_info reports the window taken. GREEDY and GUARDED take 128; with PW_PLAN_CALLER_PERM the union groups are cut in
 * windows of 128 (runs of 8 slots from each request start, as any multiple of 8 gives);
 * IDENTITY ignores it. */
#define PW_WINDOW_AUTO (-1)

/* config.max_query_rows up to this: PW_REGROUP_AUTO keeps identity order (see there). */
#define PW_PLAN_SHORT_REQUEST_ROWS 8

#define PW_PLAN_CONFIG_INIT {sizeof(pw_plan_config_t), PW_REGROUP_AUTO, PW_WINDOW_AUTO, PW_KERNEL_UNION4, 0u, 0, 0}

/* Creates a plan (host only; touches no device).
 *   problem: copied. Fast path only: G = 16 (8 and 4 with Union4, the default, or
 *            per-query), D = 128, P = 128 (64 with Union4 or per-query), K = 1..64: the plan pads each row with -1 on
 *            the device to Kd = 16, 32 or 64 ids (the smallest >= K; one [Hkv, N, Kd]
 *            int32 part of the workspace unless K = Kd). K > 16 runs Union4 (the default)
 *            or per-query: GREEDY and GUARDED run the wide-Top-K regroup kernel (pw_regroup;
 *            windows 64 / 128; H200 A-hot, regroup="guarded" against identity order:
 *            -4.0..-6.7% at G = 16, -3.1..-5.1% at G = 8, -2.8..-3.5% at G = 4,
 *            bench/NOTES.md), PW_REGROUP_AUTO asks the time guard's K > 16 form
 *            (pw_plan_info; with a config.window other than 64, 128 or PW_WINDOW_AUTO it
 *            keeps identity order, the window only cutting the union groups), per-query ignores the mode as for any K, and
 *            PW_PLAN_CALLER_PERM takes a permutation of any K. The dense G = 8 / 4 tiles
 *            run any K (page lists of 8 K / 16 K entries).
 *   config:  NULL for the defaults (PW_PLAN_CONFIG_INIT).
 *   out:     receives the plan (free with pw_plan_destroy); NULL on failure.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL problem/out, bad shapes, struct_size, mode,
 *         kernel or flags, CALLER_PERM with PER_QUERY, a window < 0 other than
 *         PW_WINDOW_AUTO, vt_max_pages < 0, max_query_rows < 0 or below N / R,
 *         N > 0 with max_pages_per_request or num_cache_pages < 1),
 *         PW_ERROR_UNSUPPORTED (a shape off the fast path, window not 64/128 for the
 *         in-call regroup, Hkv > 65535, max_pages_per_request > 2^29 for the union
 *         kernels, an attention grid over 2^31 - 1 CTAs, PW_PLAN_VT_PREPASS where the
 *         scan's grid does not fit, workspace over SIZE_MAX),
 *         PW_ERROR_OUT_OF_MEMORY. */
pw_status_t pw_plan_create(const pw_problem_t *problem, const pw_plan_config_t *config,
                           pw_plan_t **out);

/* Device workspace bytes one pw_sparse_prefill needs: the permutation [Hkv, N] int32
 * (none with PW_PLAN_CALLER_PERM; two, i.e. Hkv x N x 4 bytes more, on a plan whose FP8X2
 * calls pick their tile per call (pw_plan_info's fp8x2_stacked == 1) and regroup
 * (regroup != IDENTITY), unless it was created with PW_PLAN_NO_REGROUP_BY_TILE), the union metadata of pw_union_meta_t for
 * pw_max_groups() groups of 8 x Kd pages ([Hkv] + [Hkv, groups] x (32 + 8Kd*4 + 8Kd) bytes;
 * Kd = 16, 32 or 64, the padded K of pw_plan_create),
 * pw_regroup_workspace_size(), and when a PW_KERNEL_UNION4 plan runs the V^T pre-pass
 * (PW_PLAN_VT_PREPASS, or the rule there) its parts: 5 bytes per (KV head, request, page of
 * the page table row), C tiles of 32 KiB + 8 bytes per KV head (C: PW_PLAN_VT_PREPASS) and
 * the attention CTAs' longest-first schedule (256 + 136 x Hkv x groups bytes), and at
 * G = 16, Kd = 16, P = 128 the FP8X2 tile choice's 32 bytes after the marks
 * (PW_PLAN_FP8X2_STACKED; 8-byte aligned):
 * Hkv x (5 x R x max_pages_per_request + 32,776 x C + 4 + 136 x groups) + 256 (+ 32) bytes before
 * each part's 256-byte rounding (about 16 MiB for a table of one 64K-token context, one KV
 * head and 15,272 queries; at most 64 MiB of tiles per KV head and 1 GiB in all by default,
 * config.vt_max_pages). Each part starts
 * 256-byte aligned inside the one buffer, and the total includes 255 bytes so that the
 * buffer itself may have any alignment. A plan of K other than 16, 32, 64 adds its padded
 * Top-K rows, Hkv x N x 4 Kd bytes (every kernel, per-query included). 0 for
 * PW_KERNEL_PER_QUERY with K = Kd. About 17.7 MiB for N = 15,272, Hkv = 1, a 64K
 * context (the default plan: 18,547,967 bytes, 61,184 fewer with PW_PLAN_NO_REGROUP_BY_TILE).
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL plan or bytes). */
pw_status_t pw_plan_workspace_size(const pw_plan_t *plan, size_t *bytes);

/* Sparse prefill attention (semantics §1) of one chunk (the steps above), on `stream`.
 *   args: device pointers exactly as for pw_union_attention; topk_ids [Hkv, N, K] and the
 *         page table are required; o [N, Hq, D] bf16 written; lse [N, Hq] optional;
 *         bad_page_count optional (device uint32, incremented, never reset here).
 *   perm: [Hkv, N] int32 device, a bijection inside each request (execution slot ->
 *         original row), when the plan has PW_PLAN_CALLER_PERM; NULL otherwise.
 *   workspace, workspace_bytes: device buffer of at least pw_plan_workspace_size bytes
 *         (NULL and 0 when that is 0), used only by this call until it completes on the
 *         stream: calls sharing one workspace must be ordered (e.g. on one stream).
 * Asynchronous; returns after enqueueing. Errors: PW_ERROR_INVALID_ARGUMENT (NULL plan or
 * args, a perm given or missing against the plan, pointers/strides as for
 * pw_union_attention), PW_ERROR_INSUFFICIENT_WORKSPACE, PW_ERROR_UNSUPPORTED (no CUDA in
 * the build, a device other than sm_90, args.o_dtype other than PW_DTYPE_BFLOAT16 -- the
 * INIT value is FLOAT32 --, per-token scales with Union8), PW_ERROR_NO_DEVICE,
 * PW_ERROR_CUDA (a launch failed; kernels already enqueued by this call may have run). */
pw_status_t pw_sparse_prefill(const pw_plan_t *plan, const pw_attention_args_t *args,
                              const int32_t *perm, void *workspace, size_t workspace_bytes,
                              pw_stream_t stream);

/* Where the steps of pw_sparse_prefill keep their results inside a workspace (host
 * arithmetic only, nothing is read): *perm receives the device permutation [Hkv, N] the
 * last call used (NULL with PW_PLAN_CALLER_PERM: it is the caller's; NULL for
 * PER_QUERY), *meta the device union metadata (all NULL for PER_QUERY), and *grouping the
 * union metadata's group boundaries (window, group size 8; the regroup that made *perm
 * may have used another group size: pw_plan_info's regroup_group_size, 4 for Union4, and
 * after an FP8X2 call that ran the stacked tile on a plan whose objective follows the
 * tile (the default; PW_PLAN_NO_REGROUP_BY_TILE) 2: union preparation copies that
 * permutation into *perm; its
 * mode is the plan's regroup mode with AUTO as GUARDED, IDENTITY (window 0) for a plan whose
 * calls never regroup (IDENTITY, PW_KERNEL_PER_QUERY in every mode, AUTO keeping identity
 * order in both precisions), and otherwise not what a call ran: that is pw_plan_info's
 * regroup, e.g. IDENTITY for the precision in which AUTO keeps identity order).
 * The metadata's union_capacity is 8 x Kd (Kd = 16, 32 or 64: the padded K, e.g. 8 x 16
 * also for a plan of K < 16): size host copies from *meta, not from the problem's K.
 * Any output pointer may be NULL. After the call
 * has completed, these can be copied back for statistics (pw_union_stats) or checks.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL plan, workspace NULL when the plan needs one),
 *         PW_ERROR_INSUFFICIENT_WORKSPACE (workspace_bytes below pw_plan_workspace_size). */
pw_status_t pw_plan_workspace_views(const pw_plan_t *plan, void *workspace,
                                    size_t workspace_bytes, int32_t **perm,
                                    pw_union_meta_t *meta, pw_grouping_t *grouping);

/* What a plan's pw_sparse_prefill runs for a given args.precision, and the time guard's
 * figures behind a PW_REGROUP_AUTO choice (host arithmetic only).
 *
 * Time guard (src/time_guard.c, constants in src/time_guard_constants.h): the decision
 * uses only what the host knows when it enqueues, never device data (kv_lens and the
 * Top-K ids change under graph replay): N, R, Hkv, max_pages_per_request, the kernel,
 * args.precision and W (and config.max_query_rows when given: see there). With rows = N * Hkv and windows = Hkv * (ceil(N / W) + R - 1):
 *   saving_us = rate[kernel][W] * precision_factor * (rows - rows0[kernel][W]) / 1000
 *     (S_exec: attention time saved by the regrouped order, a line fitted to chunks of
 *     1,024-20,000 rows; with a positive rows0, below it the attention kernel does not
 *     fill the GPU and the formula, and saving_us, are negative; the installed Union4
 *     rows0 are negative (-235 at W64, -436 at W128), so saving_us stays positive, ~2 us
 *     for the smallest chunks, an extrapolation below 1,024 rows, where the cost decides),
 *   cost_us = (fixed[W] + per_window[W] * windows) * (hash_factor when
 *     max_pages_per_request exceeds the long direct path's bound, 14,336 pages at W128 /
 *     28,672 at W64, else 1)   (C_online: regroup + union preparation in the call),
 *   regroup iff saving_us > cost_us + margin_us.
 * Up to that bound the regroup indexes its masks by page id whatever the context length
 * (pw_regroup), so a page table sized for 1M-token contexts costs what a short one does
 * (H200, 4,096 queries at a 1M-token context at W128: C_online 15.9 us measured, 15.1
 * predicted by the constants then; the installed ones predict 11.4).
 * Requests: each request adds a window, and per_window (0.00717 us at both widths since
 * 2026-12-05, from an H100 run of bench/make_scaling_set.py --requests' inputs; the other
 * constants are the H200 fit's) prices them: 4,096 one-query requests cost ~36 us at W64
 * and keep identity order (regrouped they measured 18.7 us, 2.4%, slower). The saving has
 * no R term (it is fitted on one-request chunks): short requests leave the regroup less to
 * choose (a request of one query has one order), so a batch of many requests of a few
 * rows may still regroup for less than predicted (512 requests of 8 rows: +4.3 us
 * measured, 1.1%). config.max_query_rows (pw_plan_config_t) covers that: requests of at
 * most 8 rows keep identity order without the guard. The K > 16 form prices R only in its
 * cost's waves.
 * The model does not price the launches that fall back to the 32 KB / hash path for lack
 * of waves (pw_regroup: on an H200, more than 264 CTAs past ~7,200 pages at W128, i.e.
 * more than ~33,800 rows); the decision there is unchanged: such calls save ~200 us or
 * more, far above even the hash path's ~24 us (11.4 x 2.11 at W128). Before the twenty-fourth session
 * (2026-12-03) the guard assumed the hash path past 2048 / 4096 pages, and 4,096-query
 * chunks at a 1M-token context kept identity order.
 * The constants are H200 measurements of the default attention kernel, refitted by one
 * command from `pageweaver bench --json` output: python3 bench/fit_time_guard.py
 * BENCH.json --write src/time_guard_constants.h (docs/bench.md). The saving is fitted on
 * chunks of at most 20,000 rows (where the choice is made) and the cost on calls without
 * the V^T pre-pass: under stream capture the pre-pass runs beside the regroup and hides
 * most of it (C_online 4-8 us measured instead of ~11-13), but it runs only from 4,096
 * queries (2,048 at K >= 32, where the K > 16 guard keeps identity order below ~5,400
 * rows), where regrouping pays anyway. The installed constants (since 2026-12-05,
 * forty-second session; fitted on the forty-first session's H200 run of the scaling set at
 * W128 and W64, `PW_SCALING_WINDOWS="128 64" scripts/gpu-check scaling13`, which measures
 * Union4 at both windows in one device call for the fit): with one request, one KV head
 * and W128, page table within the long bound, Union4 regroups from ~2,360 queries in FP8X2
 * and ~3,000 in FP8 (~5,010 / ~6,240 with a table past it). (The twentieth session's
 * constants, 2026-12-03, said ~2,520 / ~3,070: they predicted the saving of a kernel that
 * has since got faster, A-hot 118 us against 70 measured, 75 by these.)
 * W with config.window = PW_WINDOW_AUTO (the default): the W of 64 and 128 whose
 * saving_us - cost_us is larger in FP8X2 (ties: 128), then the rule above at that W in each
 * precision; the figures reported are that W's. A plan has one W for both precisions, the
 * default arithmetic's: FP8 calls may therefore keep identity order at FP8X2's W where the
 * model predicts that the other W would pay in FP8, and FP8's decision need not be monotone
 * in N there (e.g. K 32, Hkv 8, R 128, 504 pages: FP8 regroups at 3,900 queries (W64),
 * keeps identity order at 3,950 (W128, 0.8 us short; W64 would net +10.6 us) and regroups
 * again from 4,010). With the installed constants an AUTO plan
 * (one request, one KV head, page table within the long bounds) regroups at W64 from ~1,700
 * queries in FP8X2 (~2,140 in FP8) to ~6,630, at W128 above (the twentieth session's
 * constants: ~1,960 (~2,360) to ~4,170); with a table past W128's long bound (14,336 pages)
 * W64 is kept up to ~26,200 queries (~12,400). The window figures between the measured
 * chunk sizes (1,024 / 2,048 / 3,072 / 4,096 / 15,272 queries) and past the long bound are
 * the model's predictions; nothing measured them.
 * Top-K wider than 16 (Kd = 32 / 64; since 2026-12-02, thirteenth session): the same
 * inputs, with
 *   saving_us = saving_factor[W] * (the formula above at W, with the wide model's own
 *     rate, rows0 and FP8X2 factor: since 2026-12-05 (forty-third session) the K = 16
 *     constants installed that day, kept in the wide model so that a later K = 16 refit
 *     does not move the K > 16 choices before the factors are re-measured against it),
 *   cost_us = wide_cost[Kd][W] * max(1, windows / wave_windows[Kd][W])
 * where wide_cost is the wide-Top-K regroup kernel's measured time per A-hot call, one
 * wave of CTAs (H200, guarded: 21.2 / 30.7 us at W128, 13.0 / 19.1 at W64 for Kd 32 / 64;
 * past 2048 / 4096 pages (Top-K > 16 has no long path) the hash-set kernel's 77.5 / 136.2 and 50.0 / 105.6, assumed for
 * every window as at K = 16, although the regroup runs the fast kernel for each window
 * whose pages fit), wave_windows the windows one wave holds (132 SMs x the CTAs per SM
 * the kernel's shared memory allows: 264 / 132 at W128, hash-set kernel 660 / 264;
 * derived, not measured), and saving_factor per window the least measured ratio of the
 * attention time regrouping saved at K 32 / 64 (A-hot, G 16 / 8 / 4, both precisions) to
 * the formula's: W128 0.823 (H200; 0.833 on an H100), W64 0.465 (H100 only; on the same
 * inputs every W64 call was 13.6-43.1 us slower than the W128 one). Conservative at G = 16
 * and 8 (measured 1.5-3.3x the formula at W128). So with one request and one KV head:
 * A-hot (504 pages) regroups at W128 at K 32 / 64; with a page table within 2,048 pages
 * chunks from ~5,460 / 6,800 rows (Kd 32, FP8X2 / FP8) and ~7,890 / 9,780 rows (Kd 64)
 * regroup, at W128; with 2,049-4,096 pages (where W128 would take the hash-set kernel and
 * W64 does not) from ~7,580 / 9,350 (Kd 32) and ~10,760 / 13,260 rows (Kd 64), at W64; past
 * 4,096 pages (e.g. a table sized for 1M-token contexts) from ~19,800 / 24,400 rows at Kd
 * 32 (W128), and Kd 64 never (its hash-set cost past one wave exceeds the saving). Many
 * requests x KV heads can make W64 win too (W128's windows past one wave). (Before the
 * forty-third session one factor, 0.584, served both windows with the twentieth session's
 * K = 16 constants: AUTO regrouped from ~4,690 / 5,800 rows (Kd 32) and ~6,450 / 8,010
 * (Kd 64), at W64 up to ~7,390 / ~10,330 rows and at W128 above with 504 pages; past 4,096
 * pages from ~15,300 / 19,150 rows (Kd 32, W64), ~30,130 (Kd 64 FP8X2, W128) and ~39,250
 * (Kd 64 FP8, W64). Of bench/plan_sweep.py's K > 16 plans 19 that regrouped now keep
 * identity order, 16 of them past the direct bound, and 5 moved from W64 to W128. These
 * changes are predictions: A-hot is the only K > 16 input measured.)
 * Constants: src/time_guard_wide_constants.h, with the command that re-measures them. */
typedef struct pw_plan_info {
    uint32_t struct_size;      /* sizeof(pw_plan_info_t), set by PW_PLAN_INFO_INIT */
    pw_regroup_mode_t regroup; /* what the call runs: IDENTITY, GREEDY or GUARDED (AUTO
                                  resolved); IDENTITY for PW_KERNEL_PER_QUERY and
                                  PW_PLAN_CALLER_PERM (no regroup in the call) */
    pw_regroup_mode_t configured; /* config.regroup as given */
    int32_t window;            /* W of the regroup (and of the union groups); 0 (the identity
                                  plan's runs of 8 per request) when no call regroups: IDENTITY,
                                  PW_KERNEL_PER_QUERY in every mode (since 2026-12-05; GREEDY /
                                  GUARDED gave their W before), and since 2026-12-02 (fifteenth session) an AUTO plan with
                                  W 64 / 128 whose time guard keeps identity order in both
                                  precisions (it is then the identity plan, launch for
                                  launch; pw_plan_workspace_views gives its grouping as
                                  IDENTITY, window 0) */
    pw_kernel_t kernel;
    double saving_us;          /* time guard: predicted attention time saved by regrouping
                                  (negative below rows0; 0 when no regroup can run) */
    double cost_us;            /* time guard: predicted in-call regroup cost (0 likewise) */
    double margin_us;          /* regroup iff saving_us > cost_us + margin_us (AUTO) */
    int32_t regroup_group_size; /* g of the call's regroup (Algorithm 1's group size): 4 for
                                  PW_KERNEL_UNION4 (its objective is C_4), 8 for Union8,
                                  with PW_PLAN_REGROUP_GROUPS_OF_8, and for Union4 at
                                  G = 8 or 4 with the V^T pre-pass (its dense tile walks
                                  each 8-query union, at G = 4 two of them merged, FP8
                                  calls with per-token scales included since 2026-12-04;
                                  such a plan's FP8X2 calls with them run the stacked
                                  tile: fp8x2_stacked); 0 when `regroup` is
                                  IDENTITY; 2 (4 at G = 8, 8 at G = 4) with
                                  PW_PLAN_FP8X2_STACKED (FP8X2, and FP8 since the 34th
                                  session) unless the plan was created with
                                  PW_PLAN_NO_REGROUP_BY_TILE. Calls with per-token scales:
                                  token_scales_stacked (2: the stacked tile's g; since the
                                  34th session also FP8's at G = 8, g = 4).
                                  pw_ref_regroup with `regroup`, `window` and this g
                                  reproduces the call's permutation, except where the
                                  tile is picked per call (fp8x2_stacked == 1, or with
                                  per-token scales token_scales_stacked == 1) and
                                  the flag is not set: a call that runs the stacked tile
                                  regroups with g = 2, or 4 at G = 8 (this field stays the
                                  plan's g; the
                                  pick is a function of the call's Top-K ids, which
                                  pw_fp8x2_stack_choice computes on the host); union preparation
                                  groups 8 slots either way (pw_plan_workspace_views).
                                  Since 2026-12-01 (fourth session): a caller whose
                                  struct_size is that of the struct before this field gets
                                  the other fields, not this one. */
    /* Since 2026-12-02 (a caller whose struct_size ends before vt_prepass gets the fields
     * it has, not these): which attention kernel the plan's calls run. */
    int32_t vt_prepass;        /* 1: Union4 with the V^T pre-pass (PW_PLAN_VT_PREPASS, or the
                                  rule of pw_plan_config_t's flags: large chunks), the
                                  lean kernel on V^T tiles; 0: the kernel that transposes V
                                  itself (and every Union8 / per-query plan) */
    int32_t dense_tile;        /* 1: G = 8 or 4 with the pre-pass: a call without per-token
                                  scales runs the dense tile (8 queries x 8 heads, or 16
                                  queries x 4 heads = two consecutive 8-slot groups, per
                                  64-row tile; FP8: the padded tile's outputs, FP8X2: P
                                  in f16, semantics §4.5), and the dense tile's bytes are
                                  those of an FP8 call with per-token scales (since
                                  2026-12-04: the padded tile's outputs; since the 34th
                                  session computed on the stacked tile by default:
                                  token_scales_stacked); FP8X2 with per-token scales runs the stacked
                                  tile (token_scales_stacked), or with PW_PLAN_NO_FP8X2_STACKED,
                                  like every call when this is 0, the padded tile at
                                  G = 8 and 4 (16 / G times the useful tensor work) */
    int64_t vt_capacity;       /* V^T tiles per KV head (C), 0 without the pre-pass. A KV
                                  head whose unions touch more pages in a call runs on the
                                  kernel that transposes V in that call (decided on the
                                  device; FP8: the same outputs; FP8X2: P as two E4M3
                                  terms there, in f16 on the tiles, semantics §4.5) */
    /* Since 2026-12-03 (21st session; a caller whose struct_size ends before it gets the
     * fields above): */
    int32_t fp8x2_stacked;     /* for calls in `precision` without per-token scales: 0 the
                                  other tile (the lean kernel, at G = 8 / 4 the dense tile;
                                  FP8 by default, or a plan the stacked tile does not
                                  cover), 1 the stacked tile or the other as the device
                                  decides per call (PW_PLAN_FP8X2_STACKED's rule; FP8X2
                                  only), 2 always the stacked tile (the flag, in FP8 too
                                  since the 34th session); G = 16, 8 or 4. Calls with
                                  per-token scales: token_scales_stacked (a 1 here means
                                  the stacked tile always for them,
                                  regrouped (where the plan regroups in FP8X2) with g = 2
                                  at G = 16, 4 at G = 8, 8 at G = 4, or, with
                                  PW_PLAN_NO_REGROUP_BY_TILE, 4 at G = 16 and 8 at G = 8 / 4) */
    /* Since 2026-12-04 (34th session; a caller whose struct_size ends before it gets the
     * fields above): */
    int32_t token_scales_stacked; /* for calls in `precision` WITH per-token scales
                                  (args.token_scales): 2 they run the stacked tile (always;
                                  FP8X2 by default at G = 16, 8 and 4, FP8 by default at
                                  G = 8 and 4, where its second term is 0 and the outputs
                                  are the dense tile's bytes; either precision with
                                  PW_PLAN_FP8X2_STACKED) and regroup, where the plan
                                  regroups, with its g (2 at G = 16, 4 at G = 8, 8 at
                                  G = 4; with PW_PLAN_NO_REGROUP_BY_TILE fp8x2_stacked's
                                  note); 1 the device picks per call between the stacked
                                  tile and the lean kernel's per-token-scale form with
                                  PW_PLAN_FP8X2_STACKED's G = 16 rule (FP8 at G = 16 by
                                  default: the same bytes either way), regrouping as
                                  fp8x2_stacked's 1 does; 0 they do not run it (the lean
                                  kernel, the dense or the padded tile;
                                  PW_PLAN_NO_FP8X2_STACKED, or a plan the stacked tile does
                                  not cover). PW_PLAN_INFO_INIT sets -1: this field lies in
                                  the struct's former tail padding (sizeof is the same with
                                  and without it), so a library older than it returns the
                                  same struct_size and leaves the -1; pw_abi_query("offsetof
                                  pw_plan_info_t.token_scales_stacked") is -1 there too */
} pw_plan_info_t;

#define PW_PLAN_INFO_INIT {sizeof(pw_plan_info_t), PW_REGROUP_IDENTITY, PW_REGROUP_IDENTITY, 0, PW_KERNEL_UNION4, 0.0, 0.0, 0.0, 0, 0, 0, 0, 0, -1}

/* Fills info for calls with args.precision == precision. The time-guard figures
 * (saving_us, cost_us) are filled for every plan that could regroup in the call (whatever
 * its mode; K > 16 by the guard's K > 16 form), 0 otherwise; margin_us
 * always holds the model's margin.
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL plan or info, info.struct_size too small, a
 * precision that is not a pw_precision_t). */
pw_status_t pw_plan_info(const pw_plan_t *plan, pw_precision_t precision, pw_plan_info_t *info);

/* Which FP8X2 tile a call with these inputs runs where pw_plan_info's fp8x2_stacked is 1
 * (host; the same counts and rule as the device's, PW_PLAN_FP8X2_STACKED; not for calls
 * with per-token scales, which run the stacked tile): with units of U
 * consecutive queries (U = 2 at G = 16, 4 at G = 8, 8 at G = 4) and blocks of two units, over the
 * sampled blocks (every 4th of each KV head: queries 8U j .. 8U j + 2U - 1, j = 0, 1, ...),
 * counts[0] = the distinct pages of each of their two units summed over the sampled blocks
 * and KV heads, counts[1] = those of each sampled block; a query's pages are its Top-K
 * ids in [0, min(visible pages, max_pages_per_request)) of its request (blocks do not
 * follow request starts; ids of different requests are different pages). *stacked = 1
 * when counts[0] x 1000 < r x 2 x counts[1], r = 750 at G = 16 (710 before 2026-12-04), 840 at G = 8 and 870 at
 * G = 4 (the stacked tile), else 0 (the lean kernel at G = 16, the dense tile at G = 8 /
 * 4; at other G the counts are those of G = 16 and no call runs a stacked tile). For tests, benchmarks and engines that want to know which bytes a call gives.
 *   topk_ids: [Hkv, N, K] host, K <= 16; requests: host arrays (as pw_ref_regroup takes them).
 * Errors: PW_ERROR_INVALID_ARGUMENT (NULL, shapes, requests), PW_ERROR_UNSUPPORTED (K > 16). */
pw_status_t pw_fp8x2_stack_choice(const pw_problem_t *problem, const int32_t *topk_ids, const pw_requests_t *requests,
                                  uint64_t counts[2], int *stacked);

/* Releases a plan. Accepts NULL. */
void pw_plan_destroy(pw_plan_t *plan);

/* ------------------------------------------------------------------------------------ */
/* Language bindings                                                                    */
/* ------------------------------------------------------------------------------------ */
/* For bindings that cannot read this header (the Python package's ctypes layer): the
 * number behind a name, as this build of the library was compiled:
 *   "sizeof T"            sizeof(T) for pw_problem_t, pw_requests_t, pw_plan_config_t, pw_plan_info_t,
 *                         pw_attention_args_t, pw_token_scales_t and pw_cache_layout_t,
 *                         e.g. "sizeof pw_attention_args_t";
 *   "offsetof T.field"    offsetof(T, field) of each of their fields;
 *   "init T.field"        the field's value in T's *_INIT macro, for the fields whose INIT
 *                         value is not 0 / NULL: pw_problem_t's q_heads_per_kv, head_dim,
 *                         page_size, topk; pw_plan_config_t's struct_size, regroup, window
 *                         (PW_WINDOW_AUTO, -1, since 2026-12-05; 128 before: every version
 *                         knows the name, so -1 is the value), kernel (and its flags,
 *                         vt_max_pages, max_query_rows: 0); pw_attention_args_t's
 *                         struct_size, o_dtype (FLOAT32: the GPU needs BFLOAT16) and
 *                         precision; pw_plan_info_t's token_scales_stacked (-1). The other INIT fields are 0 / NULL, but for the ones
 *                         this query does not report: every struct_size (sizeof the struct)
 *                         and pw_problem_t's num_requests and num_kv_heads (1).
 *   "PW_PLAN_SHORT_REQUEST_ROWS"  that macro's value (8; since 2026-12-05).
 * Returns -1 for a name it does not know (NULL included); records no error. Host only. */
int64_t pw_abi_query(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* PAGEWEAVER_H */
