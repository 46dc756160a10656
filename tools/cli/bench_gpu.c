/* `pageweaver bench`, device part: every arm of one capture as a CUDA graph of one call,
 * timed by replays, plus the two rates the floors use (L2 read bandwidth, dense FP8 GEMM),
 * measured in the same run.
 *
 * Timing protocol (printed by bench.c, also in docs/bench.md): for each arm, one call per
 * copy of the inputs is captured in a CUDA graph (copies = separate Q, Top-K and O
 * buffers; K/V caches, page table and request arrays are shared, as in one layer's call);
 * the graphs are replayed `warmup` times, then `replays` times back to back with a CUDA
 * event pair around each replay, rotating through the copies so that L2 never holds the
 * previous replay's Q/Top-K/O; median, min, p90 and mean of the per-replay times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef PW_HAVE_CUDA

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "bench_util.h"

#define MAX_COPIES 8

/* Returns from the enclosing int function with a message in `err` (size errsz). */
#define CUDA_TRY(x)                                                                         \
    do {                                                                                    \
        const cudaError_t e_ = (x);                                                         \
        if (e_ != cudaSuccess) {                                                            \
            snprintf(err, errsz, "%s: %s", #x, cudaGetErrorString(e_));                     \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)
#define PW_CALL(x)                                                                          \
    do {                                                                                    \
        const pw_status_t s_ = (x);                                                         \
        if (s_ != PW_SUCCESS) {                                                             \
            snprintf(err, errsz, "%s: %s", pw_status_string(s_), pw_last_error());          \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

int bench_gpu_available(char *reason, size_t reason_size)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(reason, reason_size, "no usable CUDA device: no GPU or no NVIDIA driver on this machine? (CUDA says \"%s\")",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return 0;
    }
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
        snprintf(reason, reason_size, "device 0 is %s (sm_%d%d); the kernels need sm_90", prop.name, prop.major,
                 prop.minor);
        return 0;
    }
    snprintf(reason, reason_size, "%s, %d SMs", prop.name, prop.multiProcessorCount);
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summarise(double *ms, int n, bench_timing_t *t)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    t->replays = n;
    t->min_ms = ms[0];
    t->median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    int i90 = (int)(0.9 * (n - 1) + 0.5);
    t->p90_ms = ms[i90];
    t->mean_ms = sum / n;
}

/* Replays execs[0..copies) warmup times, then `replays` timed (rotating). */
static int time_graphs(cudaGraphExec_t *execs, int copies, int warmup, int replays, cudaStream_t s,
                       bench_timing_t *t, char *err, size_t errsz)
{
    for (int i = 0; i < warmup || i < copies; i++) CUDA_TRY(cudaGraphLaunch(execs[i % copies], s));
    cudaEvent_t *ev = calloc((size_t)replays * 2, sizeof *ev);
    double *ms = calloc((size_t)replays, sizeof *ms);
    if (!ev || !ms) {
        free(ev);
        free(ms);
        snprintf(err, errsz, "out of host memory");
        return 1;
    }
    int rc = 0;
    int created = 0;
    for (; created < replays * 2; created++)
        if (cudaEventCreate(&ev[created]) != cudaSuccess) {
            rc = 1;
            break;
        }
    for (int i = 0; i < replays && rc == 0; i++) {
        if (cudaEventRecord(ev[2 * i], s) != cudaSuccess || cudaGraphLaunch(execs[i % copies], s) != cudaSuccess ||
            cudaEventRecord(ev[2 * i + 1], s) != cudaSuccess)
            rc = 1;
    }
    if (rc == 0 && cudaStreamSynchronize(s) != cudaSuccess) rc = 1;
    for (int i = 0; i < replays && rc == 0; i++) {
        float f = 0;
        if (cudaEventElapsedTime(&f, ev[2 * i], ev[2 * i + 1]) != cudaSuccess) rc = 1;
        ms[i] = f;
    }
    if (rc) snprintf(err, errsz, "timing replays: %s", cudaGetErrorString(cudaGetLastError()));
    else summarise(ms, replays, t);
    for (int i = 0; i < created; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return rc;
}

/* ---------------------------------------------------------------------------------- */
/* Rates                                                                              */
/* ---------------------------------------------------------------------------------- */
static int measure_l2(bench_rates_t *r, char *err, size_t errsz)
{
    const size_t bytes = (size_t)24 << 20;
    const int passes = 16, reps = 30;
    void *buf = NULL;
    uint32_t *sink = NULL;
    cudaStream_t s;
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_TRY(cudaMalloc(&buf, bytes));
    CUDA_TRY(cudaMalloc((void **)&sink, 4));
    CUDA_TRY(cudaMemset(buf, 0x5a, bytes));
    const int blocks = prop.multiProcessorCount * 4; /* 4 x 512 threads per SM */
    double ms[30];
    cudaEvent_t e0, e1;
    CUDA_TRY(cudaEventCreate(&e0));
    CUDA_TRY(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) CUDA_TRY((cudaError_t)pwb_l2_read(buf, bytes, passes, blocks, sink, s));
    for (int i = 0; i < reps; i++) {
        CUDA_TRY(cudaEventRecord(e0, s));
        CUDA_TRY((cudaError_t)pwb_l2_read(buf, bytes, passes, blocks, sink, s));
        CUDA_TRY(cudaEventRecord(e1, s));
        CUDA_TRY(cudaEventSynchronize(e1));
        float f = 0;
        CUDA_TRY(cudaEventElapsedTime(&f, e0, e1));
        ms[i] = f;
    }
    bench_timing_t t;
    summarise(ms, reps, &t);
    r->l2_read_tbps = (double)bytes * passes / (t.median_ms * 1e-3) / 1e12;
    r->l2_buffer_mib = (double)bytes / (1 << 20);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(buf);
    cudaFree(sink);
    cudaStreamDestroy(s);
    return 0;
}

#define LT_TRY(x)                                                                           \
    do {                                                                                    \
        const cublasStatus_t st_ = (x);                                                     \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            snprintf(err, errsz, "%s: cuBLAS status %d", #x, (int)st_);                     \
            goto done;                                                                      \
        }                                                                                   \
    } while (0)

/* Dense FP8 GEMM D[M,N] (bf16) = A^T B with A, B e4m3 stored K-major (cuBLASLt's FP8 "TN"
 * layout), M = N = K = n, FP32 accumulation, with or without cuBLASLt's fast accumulation
 * (no periodic promotion of the tensor-core accumulator, as in our kernels within a page);
 * the median of timed calls. */
static int measure_gemm(int fast_accum, double *tflops, char *err, size_t errsz)
{
    const int n = 8192;
    const size_t elems = (size_t)n * n, ws_bytes = (size_t)64 << 20;
    uint8_t *a = NULL, *b = NULL;
    void *d = NULL, *ws = NULL;
    cublasLtHandle_t lt = NULL;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaStream_t s = NULL;
    int rc = 1;
    err[0] = '\0';
    if (cudaMalloc((void **)&a, elems) != cudaSuccess || cudaMalloc((void **)&b, elems) != cudaSuccess ||
        cudaMalloc(&d, elems * 2) != cudaSuccess || cudaMalloc(&ws, ws_bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        snprintf(err, errsz, "GEMM buffers: %s", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    if (pwb_fill_e4m3(a, elems, 1, s) || pwb_fill_e4m3(b, elems, 2, s)) {
        snprintf(err, errsz, "fill: %s", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    LT_TRY(cublasLtCreate(&lt));
    LT_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const int8_t fast = (int8_t)(fast_accum != 0);
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    LT_TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n)); /* [K, M] column-major */
    LT_TRY(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n)); /* [K, N] column-major */
    LT_TRY(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n));    /* [M, N] column-major */
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found < 1) {
        snprintf(err, errsz, "cuBLASLt found no FP8 algorithm");
        goto done;
    }
    const float alpha = 1.0f, beta = 0.0f;
    double ms[20];
    const int reps = 20;
    for (int i = 0; i < 3 + reps; i++) {
        if (i >= 3 && cudaEventRecord(e0, s) != cudaSuccess) goto cuda_fail;
        LT_TRY(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ws, ws_bytes, s));
        if (i >= 3) {
            float f = 0;
            if (cudaEventRecord(e1, s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&f, e0, e1) != cudaSuccess)
                goto cuda_fail;
            ms[i - 3] = f;
        }
    }
    bench_timing_t t;
    summarise(ms, reps, &t);
    *tflops = 2.0 * n * (double)n * n / (t.median_ms * 1e-3) / 1e12;
    rc = 0;
    goto done;
cuda_fail:
    snprintf(err, errsz, "GEMM timing: %s", cudaGetErrorString(cudaGetLastError()));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
    if (lt) cublasLtDestroy(lt);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    cudaFree(ws);
    return rc;
}

void bench_gpu_rates(bench_rates_t *r)
{
    memset(r, 0, sizeof *r);
    char *err = r->error;
    const size_t errsz = sizeof r->error;
    if (measure_l2(r, err, errsz) != 0) return;
    if (measure_gemm(0, &r->fp8_gemm_tflops_precise, err, errsz) != 0) return;
    if (measure_gemm(1, &r->fp8_gemm_tflops_fast_accum, err, errsz) != 0) return;
    /* The floor uses the faster of the two: what a dense FP8 kernel can reach. */
    r->fp8_gemm_tflops = r->fp8_gemm_tflops_fast_accum > r->fp8_gemm_tflops_precise ? r->fp8_gemm_tflops_fast_accum
                                                                                     : r->fp8_gemm_tflops_precise;
    r->gemm_size = 8192;
    r->measured = 1;
}

/* ---------------------------------------------------------------------------------- */
/* Arms                                                                               */
/* ---------------------------------------------------------------------------------- */
typedef struct device_set {
    int copies;
    pw_bf16_t *q[MAX_COPIES], *o[MAX_COPIES];
    int32_t *topk[MAX_COPIES];
    uint8_t *k, *v;
    float *k_scale, *v_scale;
    int32_t *cu, *prefix, *kv_lens, *page_table;
    int32_t *perm;            /* caller perms, uploaded per arm */
    int32_t *perm_reorder;    /* W128 guarded, for the reordered arms */
    pw_bf16_t *q_r, *o_r;     /* reordered Q and output */
    int32_t *topk_r;          /* reordered Top-K */
    void *workspace;
    size_t workspace_bytes;
    uint32_t *bad_pages;      /* kernel counter of pages outside the caches (one eager call) */
} device_set_t;

static void device_set_free(device_set_t *d)
{
    for (int k = 0; k < MAX_COPIES; k++) {
        cudaFree(d->q[k]);
        cudaFree(d->o[k]);
        cudaFree(d->topk[k]);
    }
    void *ptrs[] = {d->k, d->v, d->k_scale, d->v_scale, d->cu, d->prefix, d->kv_lens, d->page_table, d->perm,
                    d->perm_reorder, d->q_r, d->o_r, d->topk_r, d->workspace, d->bad_pages};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
    memset(d, 0, sizeof *d);
}

static int dev_upload(void **dst, const void *src, size_t bytes, char *err, size_t errsz)
{
    CUDA_TRY(cudaMalloc(dst, bytes ? bytes : 16));
    if (bytes && src) CUDA_TRY(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static int device_set_create(const pw_capture_t *c, int copies, device_set_t *d, char *err, size_t errsz)
{
    const pw_problem_t *p = &c->problem;
    const size_t n = (size_t)p->num_tokens, hkv = (size_t)p->num_kv_heads, r = (size_t)p->num_requests;
    const size_t q_bytes = n * hkv * 16 * 128 * 2, topk_bytes = hkv * n * 16 * 4;
    const size_t cache = (size_t)p->num_cache_pages * 128 * hkv * 128;
    memset(d, 0, sizeof *d);
    d->copies = copies;
    for (int k = 0; k < copies; k++) {
        if (dev_upload((void **)&d->q[k], c->q, q_bytes, err, errsz) ||
            dev_upload((void **)&d->o[k], NULL, q_bytes, err, errsz) ||
            dev_upload((void **)&d->topk[k], c->topk_ids, topk_bytes, err, errsz))
            return 1;
    }
    if (dev_upload((void **)&d->k, c->k_cache, cache, err, errsz) ||
        dev_upload((void **)&d->v, c->v_cache, cache, err, errsz) ||
        dev_upload((void **)&d->k_scale, &c->k_scale, 4, err, errsz) ||
        dev_upload((void **)&d->v_scale, &c->v_scale, 4, err, errsz) ||
        dev_upload((void **)&d->cu, c->cu_seqlens_q, (r + 1) * 4, err, errsz) ||
        dev_upload((void **)&d->prefix, c->prefix_lens, r * 4, err, errsz) ||
        dev_upload((void **)&d->kv_lens, c->kv_lens, r * 4, err, errsz) ||
        dev_upload((void **)&d->page_table, c->page_table, r * (size_t)p->max_pages_per_request * 4, err, errsz) ||
        dev_upload((void **)&d->perm, NULL, hkv * n * 4, err, errsz) ||
        dev_upload((void **)&d->perm_reorder, NULL, hkv * n * 4, err, errsz) ||
        dev_upload((void **)&d->q_r, NULL, q_bytes, err, errsz) ||
        dev_upload((void **)&d->o_r, NULL, q_bytes, err, errsz) ||
        dev_upload((void **)&d->topk_r, NULL, topk_bytes, err, errsz) ||
        dev_upload((void **)&d->bad_pages, NULL, sizeof(uint32_t), err, errsz))
        return 1;
    return 0;
}

static pw_attention_args_t args_for(const pw_problem_t *p, const device_set_t *d, const pw_bf16_t *q,
                                    const int32_t *topk, pw_bf16_t *o)
{
    const int64_t hq = (int64_t)p->num_kv_heads * 16;
    pw_attention_args_t a = PW_ATTENTION_ARGS_INIT;
    a.q = q;
    a.q_stride = hq * 128;
    a.k_cache = d->k;
    a.v_cache = d->v;
    a.kv_stride = (int64_t)p->num_kv_heads * 128;
    a.k_scale = d->k_scale;
    a.v_scale = d->v_scale;
    a.topk_ids = topk;
    a.requests.cu_seqlens_q = d->cu;
    a.requests.prefix_lens = d->prefix;
    a.requests.kv_lens = d->kv_lens;
    a.requests.page_table = d->page_table;
    a.requests.page_table_stride = p->max_pages_per_request;
    a.o = o;
    a.o_stride = hq * 128;
    a.o_dtype = PW_DTYPE_BFLOAT16;
    return a; /* lse and bad_page_count: not requested (NULL; set by the caller) */
}

/* What one arm runs. */
typedef struct arm_spec {
    pw_regroup_mode_t mode;
    int32_t window;
    pw_kernel_t kernel;
    int caller_perm; /* -1 or a PERM_* index */
    int reorder;     /* 0, 1 (moves + call), 2 (call on reordered tensors only) */
    pw_precision_t precision;
    uint32_t flags;  /* extra pw_plan_config_t flags */
} arm_spec_t;

static arm_spec_t arm_spec(int arm)
{
    arm_spec_t s = {PW_REGROUP_GUARDED, 128, PW_KERNEL_UNION8, -1, 0, PW_PRECISION_FP8, 0u};
    switch (arm) {
    case ARM_T0: s.mode = PW_REGROUP_IDENTITY; break;
    case ARM_FIXED_W128: s.caller_perm = PERM_W128_GUARDED; break;
    case ARM_ONLINE_W64: s.window = 64; break;
    case ARM_ONLINE_W128: break;
    case ARM_ONLINE_W64_GREEDY: s.mode = PW_REGROUP_GREEDY; s.window = 64; break;
    case ARM_ONLINE_W128_GREEDY: s.mode = PW_REGROUP_GREEDY; break;
    case ARM_UNION4: s.kernel = PW_KERNEL_UNION4; break;
    case ARM_PER_QUERY: s.kernel = PW_KERNEL_PER_QUERY; break;
    case ARM_FIXED_IDENTITY: s.caller_perm = PERM_IDENTITY; break;
    case ARM_FIXED_RANDOM: s.caller_perm = PERM_RANDOM; break;
    case ARM_FIXED_W512: s.caller_perm = PERM_W512_GREEDY; break;
    case ARM_FIXED_W2048: s.caller_perm = PERM_W2048_GREEDY; break;
    case ARM_REORDERED: s.mode = PW_REGROUP_IDENTITY; s.reorder = 1; break;
    case ARM_REORDERED_ATTN: s.mode = PW_REGROUP_IDENTITY; s.reorder = 2; break;
    case ARM_ONLINE_W128_X2: s.precision = PW_PRECISION_FP8X2; break;
    case ARM_UNION4_X2: s.kernel = PW_KERNEL_UNION4; s.precision = PW_PRECISION_FP8X2; break;
    case ARM_UNION4_IDENTITY: s.mode = PW_REGROUP_IDENTITY; s.kernel = PW_KERNEL_UNION4; break;
    /* Union4's caller perm: the 4-query objective its in-call regroup uses (C_online compares the two) */
    case ARM_UNION4_FIXED_W128: s.caller_perm = PERM_W128_GUARDED_G4; s.kernel = PW_KERNEL_UNION4; break;
    case ARM_DEFAULT:
    case ARM_DEFAULT_ALONE: /* PW_PLAN_CONFIG_INIT */
        s.mode = PW_REGROUP_AUTO;
        s.window = PW_WINDOW_AUTO;
        s.kernel = PW_KERNEL_UNION4;
        break;
    case ARM_DEFAULT_G8:
        s.mode = PW_REGROUP_AUTO;
        s.window = PW_WINDOW_AUTO;
        s.kernel = PW_KERNEL_UNION4;
        s.flags = PW_PLAN_REGROUP_GROUPS_OF_8;
        break;
    case ARM_DEFAULT_NOT_BY_TILE:
        s.mode = PW_REGROUP_AUTO;
        s.window = PW_WINDOW_AUTO;
        s.kernel = PW_KERNEL_UNION4;
        s.flags = PW_PLAN_NO_REGROUP_BY_TILE;
        break;
    default: break;
    }
    /* The default kernel's group runs the library's default arithmetic (bench.h). */
    if (bench_arm_in_default_arithmetic(arm)) s.precision = bench_default_precision();
    return s;
}

/* Enqueues one call of the arm for input copy k on stream s; bad_pages (device, or NULL)
 * receives the kernel's count of (query, KV head, page) pairs outside the caches. */
static int enqueue_arm(const pw_problem_t *p, const arm_spec_t *spec, const pw_plan_t *plan, device_set_t *d, int k,
                       uint32_t *bad_pages, cudaStream_t s, char *err, size_t errsz)
{
    const int32_t n = p->num_tokens, hkv = p->num_kv_heads;
    const int64_t stride = (int64_t)hkv * 16 * 128;
    if (spec->reorder == 0) {
        pw_attention_args_t a = args_for(p, d, d->q[k], d->topk[k], d->o[k]);
        a.bad_page_count = bad_pages;
        a.precision = spec->precision;
        PW_CALL(pw_sparse_prefill(plan, &a, spec->caller_perm >= 0 ? d->perm : NULL, d->workspace,
                                  d->workspace_bytes, (pw_stream_t)s));
        return 0;
    }
    if (spec->reorder == 1)
        CUDA_TRY((cudaError_t)pwb_gather_rows(d->q[k], stride, d->topk[k], d->perm_reorder, n, hkv, d->q_r, stride,
                                              d->topk_r, (pw_stream_t)s));
    pw_attention_args_t a = args_for(p, d, d->q_r, d->topk_r, d->o_r);
    a.precision = spec->precision;
    PW_CALL(pw_sparse_prefill(plan, &a, NULL, d->workspace, d->workspace_bytes, (pw_stream_t)s));
    if (spec->reorder == 1)
        CUDA_TRY((cudaError_t)pwb_scatter_rows(d->o_r, stride, d->perm_reorder, n, hkv, d->o[k], stride,
                                               (pw_stream_t)s));
    return 0;
}

/* Compares output copy 0 with T0's bytes (host). */
static int compare_output(const pw_problem_t *p, const device_set_t *d, const pw_bf16_t *t0, pw_bf16_t *scratch,
                          bench_arm_result_t *ar, char *err, size_t errsz)
{
    const size_t elems = (size_t)p->num_tokens * p->num_kv_heads * 16 * 128;
    CUDA_TRY(cudaMemcpy(scratch, d->o[0], elems * 2, cudaMemcpyDeviceToHost));
    size_t diff = 0;
    for (size_t i = 0; i < elems; i++) diff += scratch[i] != t0[i];
    ar->same_as_t0 = diff == 0;
    ar->differing = elems ? (double)diff / (double)elems : 0.0;
    return 0;
}

/* Device metadata of the in-call W128 arm vs the CPU statistics of the same grouping. */
static int check_device_meta(bench_capture_t *bc, const pw_plan_t *plan, const device_set_t *d, char *err,
                             size_t errsz)
{
    const pw_problem_t *p = &bc->capture->problem;
    int32_t *perm_dev = NULL;
    pw_union_meta_t dm, hm;
    PW_CALL(pw_plan_workspace_views(plan, d->workspace, d->workspace_bytes, &perm_dev, &dm, NULL));
    const size_t hkv = (size_t)p->num_kv_heads, rows = hkv * (size_t)dm.max_groups, cap = (size_t)dm.union_capacity;
    hm = dm;
    hm.num_groups = malloc(hkv * 4);
    hm.groups = malloc(rows * sizeof(pw_group_desc_t));
    hm.union_pages = malloc(rows * cap * 4);
    hm.member_masks = malloc(rows * cap);
    int32_t *perm = malloc(hkv * (size_t)p->num_tokens * 4);
    int rc = 1;
    if (hm.num_groups && hm.groups && hm.union_pages && hm.member_masks && perm &&
        cudaMemcpy(hm.num_groups, dm.num_groups, hkv * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(hm.groups, dm.groups, rows * sizeof(pw_group_desc_t), cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(hm.union_pages, dm.union_pages, rows * cap * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(hm.member_masks, dm.member_masks, rows * cap, cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(perm, perm_dev, hkv * (size_t)p->num_tokens * 4, cudaMemcpyDeviceToHost) == cudaSuccess) {
        pw_union_stats_t st;
        if (pw_union_stats(p, &hm, &st, NULL) == PW_SUCCESS) {
            const pw_union_stats_t *ref = &bc->stats[PERM_W128_GUARDED];
            bc->device_meta_checked = 1;
            bc->device_meta_matches = st.union_visits == ref->union_visits && st.c4 == ref->c4 &&
                                      st.selections == ref->selections && st.groups == ref->groups &&
                                      memcmp(perm, bc->perms[PERM_W128_GUARDED], hkv * (size_t)p->num_tokens * 4) == 0;
            rc = 0;
        } else {
            snprintf(err, errsz, "pw_union_stats on device metadata: %s", pw_last_error());
        }
    } else {
        snprintf(err, errsz, "copying device metadata back failed");
    }
    free(hm.num_groups);
    free(hm.groups);
    free(hm.union_pages);
    free(hm.member_masks);
    free(perm);
    return rc;
}

/* One arm between its preparation and its results: the plan and one graph per copy. */
typedef struct arm_run {
    int arm;
    arm_spec_t spec;
    pw_plan_t *plan;
    cudaGraphExec_t execs[MAX_COPIES];
    int made;
} arm_run_t;

static pw_plan_config_t arm_config(const bench_capture_t *bc, const arm_spec_t *spec)
{
    pw_plan_config_t cfg = PW_PLAN_CONFIG_INIT;
    cfg.regroup = spec->mode;
    cfg.window = spec->kernel == PW_KERNEL_UNION4 && bc->union4_window ? bc->union4_window : spec->window;
    cfg.kernel = spec->kernel;
    if (spec->caller_perm >= 0) {
        cfg.flags = PW_PLAN_CALLER_PERM;
        cfg.window = bc->perm_window[spec->caller_perm];
    }
    if (cfg.kernel == PW_KERNEL_UNION4) cfg.flags |= bc->vt_flags; /* --vt-prepass, --fp8x2-tile */
    cfg.flags |= spec->flags;
    cfg.max_query_rows = bc->max_query_rows;
    return cfg;
}

/* Grows the shared workspace to at least ws bytes (before any graph that uses it). */
static int ensure_workspace(device_set_t *d, size_t ws, char *err, size_t errsz)
{
    if (ws <= d->workspace_bytes) return 0;
    cudaFree(d->workspace);
    d->workspace = NULL;
    d->workspace_bytes = 0;
    if (cudaMalloc(&d->workspace, ws) != cudaSuccess) {
        snprintf(err, errsz, "workspace of %zu bytes: %s", ws, cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    d->workspace_bytes = ws;
    return 0;
}

/* Plan, one eager call per copy (validation, checks), one graph per copy. The workspace
 * must already be large enough (ensure_workspace) when several arms are prepared before
 * any is timed: the graphs bake its address. */
static int arm_prepare(bench_capture_t *bc, int arm, device_set_t *d, cudaStream_t s, arm_run_t *run)
{
    bench_arm_result_t *ar = &bc->arms[arm];
    char *err = ar->error;
    const size_t errsz = sizeof ar->error;
    const pw_problem_t *p = &bc->capture->problem;
    const size_t n = (size_t)p->num_tokens, hkv = (size_t)p->num_kv_heads;
    const size_t out_bytes = n * hkv * 16 * 128 * 2;
    memset(run, 0, sizeof *run);
    run->arm = arm;
    run->spec = arm_spec(arm);
    /* T_fixed of the default kernel at the default call's own objective: where its FP8X2
     * call runs the stacked tile (the host's pick, bc->x2_stacked), the regroup objective
     * follows the tile (g = 2), so the caller's permutation is the g = 2 one; else g = 4. */
    if (arm == ARM_UNION4_FIXED_W128 && bench_arm_is_x2(arm) && bc->x2_stacked)
        run->spec.caller_perm = PERM_W128_GUARDED_G2;
    const arm_spec_t *spec = &run->spec;
    ar->same_as_t0 = -1;
    ar->same_as_x2 = -1;
    ar->nrms_x2 = 0.0;
    const pw_plan_config_t cfg = arm_config(bc, spec);
    if (spec->caller_perm >= 0)
        CUDA_TRY(cudaMemcpy(d->perm, bc->perms[spec->caller_perm], hkv * n * 4, cudaMemcpyHostToDevice));
    PW_CALL(pw_plan_create(p, &cfg, &run->plan));
    size_t ws = 0;
    pw_plan_workspace_size(run->plan, &ws);
    if (ensure_workspace(d, ws, err, errsz) != 0) return 1;
    int rc = 0;
    /* Poisoned outputs, then one eager call per copy (validation, one-time set-up). */
    for (int k = 0; k < d->copies && rc == 0; k++) {
        if (cudaMemsetAsync(d->o[k], 0xff, out_bytes, s) != cudaSuccess) rc = 1;
        if (rc == 0 && spec->reorder == 2) {
            rc = cudaMemsetAsync(d->o_r, 0xff, out_bytes, s) != cudaSuccess;
            if (rc == 0) {
                const int64_t stride = (int64_t)hkv * 16 * 128;
                rc = pwb_gather_rows(d->q[0], stride, d->topk[0], d->perm_reorder, (int32_t)n, (int32_t)hkv, d->q_r,
                                     stride, d->topk_r, (pw_stream_t)s) != 0;
            }
        }
        /* The Union8 in-call W128 plan's first eager call counts the pages outside the caches. */
        uint32_t *count = arm == ARM_ONLINE_W128 && k == 0 ? d->bad_pages : NULL;
        if (rc == 0 && count) rc = cudaMemsetAsync(count, 0, sizeof *count, s) != cudaSuccess;
        if (rc == 0) rc = enqueue_arm(p, spec, run->plan, d, k, count, s, err, errsz);
    }
    if (rc == 0 && cudaStreamSynchronize(s) != cudaSuccess) {
        snprintf(err, errsz, "eager call: %s", cudaGetErrorString(cudaGetLastError()));
        rc = 1;
    }
    if (rc == 0 && arm == ARM_ONLINE_W128) {
        uint32_t count = 0;
        if (cudaMemcpy(&count, d->bad_pages, sizeof count, cudaMemcpyDeviceToHost) != cudaSuccess) {
            snprintf(err, errsz, "copy the bad-page counter: %s", cudaGetErrorString(cudaGetLastError()));
            rc = 1;
        } else {
            bc->gpu_bad_pages = count;
            bc->gpu_bad_pages_counted = 1;
        }
    }
    if (rc == 0 && arm == ARM_ONLINE_W128 && check_device_meta(bc, run->plan, d, err, errsz) != 0) rc = 1;
    for (int k = 0; k < d->copies && rc == 0; k++) {
        cudaGraph_t graph;
        if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess) {
            snprintf(err, errsz, "begin capture: %s", cudaGetErrorString(cudaGetLastError()));
            rc = 1;
            break;
        }
        const int call = enqueue_arm(p, spec, run->plan, d, k, NULL, s, err, errsz);
        const cudaError_t ec = cudaStreamEndCapture(s, &graph);
        if (call != 0 || ec != cudaSuccess) {
            if (call == 0) snprintf(err, errsz, "end capture: %s", cudaGetErrorString(ec));
            if (ec == cudaSuccess) cudaGraphDestroy(graph);
            rc = 1;
            break;
        }
        const cudaError_t ei = cudaGraphInstantiate(&run->execs[k], graph, 0);
        cudaGraphDestroy(graph);
        if (ei != cudaSuccess) {
            snprintf(err, errsz, "graph instantiate: %s", cudaGetErrorString(ei));
            rc = 1;
            break;
        }
        run->made++;
    }
    return rc;
}

static void arm_release(arm_run_t *run)
{
    for (int k = 0; k < run->made; k++) cudaGraphExecDestroy(run->execs[k]);
    pw_plan_destroy(run->plan);
    memset(run, 0, sizeof *run);
}

/* After timing: one more replay of copy 0 (interleaved arms share the output buffers),
 * then the output comparisons and copies of run_arm's documentation. */
static int arm_finish(bench_capture_t *bc, arm_run_t *run, device_set_t *d, cudaStream_t s, pw_bf16_t *t0_out,
                      pw_bf16_t *scratch)
{
    const int arm = run->arm;
    bench_arm_result_t *ar = &bc->arms[arm];
    char *err = ar->error;
    const size_t errsz = sizeof ar->error;
    const pw_problem_t *p = &bc->capture->problem;
    const size_t n = (size_t)p->num_tokens, hkv = (size_t)p->num_kv_heads;
    const size_t out_bytes = n * hkv * 16 * 128 * 2;
    int rc = 0;
    if (cudaGraphLaunch(run->execs[0], s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) {
        snprintf(err, errsz, "replay of copy 0: %s", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    if (run->spec.reorder == 2) {
        /* The output is in execution order: put it back in place to compare it. */
        const int64_t stride = (int64_t)hkv * 16 * 128;
        if (pwb_scatter_rows(d->o_r, stride, d->perm_reorder, (int32_t)n, (int32_t)hkv, d->o[0], stride,
                             (pw_stream_t)s) != 0 ||
            cudaStreamSynchronize(s) != cudaSuccess) {
            snprintf(err, errsz, "scatter: %s", cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
    }
    ar->ran = 1;
    if (arm == ARM_T0) {
        if (cudaMemcpy(t0_out, d->o[0], out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
            snprintf(err, errsz, "copy T0 output: %s", cudaGetErrorString(cudaGetLastError()));
            rc = 1;
        } else {
            ar->same_as_t0 = 1;
        }
    } else if (bc->arms[ARM_T0].ran) {
        rc = compare_output(p, d, t0_out, scratch, ar, err, errsz);
    }
    if (rc == 0 && arm == ARM_ONLINE_W128 && bc->gpu_output &&
        cudaMemcpy(bc->gpu_output, d->o[0], out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(err, errsz, "copy output: %s", cudaGetErrorString(cudaGetLastError()));
        rc = 1;
    }
    /* FP8X2: the Union8 arm's output is kept, the Union4 arm's compared with it (same
     * arithmetic, so bitwise equal) and then kept in its place for the reference check. */
    if (rc == 0 && arm == ARM_ONLINE_W128_X2 && bc->gpu_output_x2 &&
        cudaMemcpy(bc->gpu_output_x2, d->o[0], out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(err, errsz, "copy output: %s", cudaGetErrorString(cudaGetLastError()));
        rc = 1;
    }
    if (rc == 0 && arm == ARM_UNION4_X2 && bc->gpu_output_x2) {
        if (cudaMemcpy(scratch, d->o[0], out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
            snprintf(err, errsz, "copy output: %s", cudaGetErrorString(cudaGetLastError()));
            free(bc->gpu_output_x2);
            bc->gpu_output_x2 = NULL;
            rc = 1;
        } else {
            const size_t elems = out_bytes / 2;
            if (bc->arms[ARM_ONLINE_W128_X2].ran) {
                size_t diff = 0;
                double num = 0.0, den = 0.0;
                for (size_t i = 0; i < elems; i++) {
                    diff += scratch[i] != bc->gpu_output_x2[i];
                    const double x = pw_bf16_to_float(scratch[i]), y = pw_bf16_to_float(bc->gpu_output_x2[i]);
                    num += (x - y) * (x - y);
                    den += y * y;
                }
                ar->same_as_x2 = diff == 0;
                ar->differing_x2 = elems ? (double)diff / (double)elems : 0.0;
                ar->nrms_x2 = den > 0.0 ? sqrt(num / den) : (num > 0.0 ? 1.0 : 0.0);
            }
            memcpy(bc->gpu_output_x2, scratch, out_bytes);
        }
    }
    return rc;
}

static int run_arm(bench_capture_t *bc, int arm, const bench_options_t *o, device_set_t *d, cudaStream_t s,
                   pw_bf16_t *t0_out, pw_bf16_t *scratch)
{
    bench_arm_result_t *ar = &bc->arms[arm];
    arm_run_t run;
    int rc = arm_prepare(bc, arm, d, s, &run);
    if (rc == 0)
        rc = time_graphs(run.execs, d->copies, o->warmup, o->replays, s, &ar->t, ar->error, sizeof ar->error);
    if (rc == 0) rc = arm_finish(bc, &run, d, s, t0_out, scratch);
    if (rc) ar->ran = 0;
    arm_release(&run);
    if (rc) cudaGetLastError(); /* clear a sticky-free error so the next arm can run */
    return rc;
}

/* Interleaved replays of several arms: warm-up of each, then `replays` rounds, each round
 * one replay of every arm in turn (copy i % copies), a CUDA event pair around each. So
 * clock and thermal drift hit every arm alike, and the arms' differences are measured in
 * the same minutes. */
static int time_interleaved(arm_run_t *runs, int count, int copies, int warmup, int replays, cudaStream_t s,
                            bench_timing_t *out, double *raw, char *err, size_t errsz)
{
    for (int a = 0; a < count; a++)
        for (int i = 0; i < warmup || i < copies; i++) CUDA_TRY(cudaGraphLaunch(runs[a].execs[i % copies], s));
    const size_t events = (size_t)count * (size_t)replays * 2;
    cudaEvent_t *ev = calloc(events, sizeof *ev);
    double *ms = calloc((size_t)replays, sizeof *ms);
    int rc = !ev || !ms;
    size_t created = 0;
    for (; rc == 0 && created < events; created++)
        if (cudaEventCreate(&ev[created]) != cudaSuccess) rc = 1;
    for (int i = 0; i < replays && rc == 0; i++)
        for (int a = 0; a < count && rc == 0; a++) {
            cudaEvent_t *e = ev + ((size_t)a * replays + i) * 2;
            if (cudaEventRecord(e[0], s) != cudaSuccess || cudaGraphLaunch(runs[a].execs[i % copies], s) != cudaSuccess ||
                cudaEventRecord(e[1], s) != cudaSuccess)
                rc = 1;
        }
    if (rc == 0 && cudaStreamSynchronize(s) != cudaSuccess) rc = 1;
    for (int a = 0; a < count && rc == 0; a++) {
        for (int i = 0; i < replays && rc == 0; i++) {
            float f = 0;
            const cudaEvent_t *e = ev + ((size_t)a * replays + i) * 2;
            if (cudaEventElapsedTime(&f, e[0], e[1]) != cudaSuccess) rc = 1;
            ms[i] = f;
            if (raw) raw[(size_t)a * replays + i] = f; /* round order (summarise sorts ms) */
        }
        if (rc == 0) summarise(ms, replays, &out[a]);
    }
    if (rc) snprintf(err, errsz, "interleaved replays: %s", !ev || !ms ? "out of host memory"
                                                                       : cudaGetErrorString(cudaGetLastError()));
    for (size_t i = 0; i < created; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return rc;
}

/* Median of d_i = (a_i - b_i) x 1000 (ms -> us) over n rounds, and a distribution-free 95%
 * interval for it: the order statistics of ranks n/2 -+ 1.96 sqrt(n)/2 (normal approximation of
 * the binomial; n >= 20 here). Sorts into d (n doubles; summarise's sort and median). */
static void paired_median(const double *a, const double *b, int n, double *d, bench_paired_t *out)
{
    for (int i = 0; i < n; i++) d[i] = (a[i] - b[i]) * 1e3;
    bench_timing_t t;
    summarise(d, n, &t);
    out->median_us = t.median_ms; /* us here */
    const double half = 0.98 * sqrt((double)n);
    int l = (int)floor(0.5 * n - half) - 1, u = (int)ceil(0.5 * n + half) - 1; /* 0-based */
    if (l < 0) l = 0;
    if (u > n - 1) u = n - 1;
    out->lo_us = d[l];
    out->hi_us = d[u];
}

/* The default kernel's arms, timed together by interleaved replays (docs/bench.md). */
enum { DEFAULT_GROUP = 6 };
static void default_group(int arms[DEFAULT_GROUP])
{
    const int group[DEFAULT_GROUP] = {ARM_UNION4_IDENTITY, ARM_DEFAULT, bench_default_online_arm(),
                                      ARM_UNION4_FIXED_W128, ARM_DEFAULT_G8, ARM_DEFAULT_NOT_BY_TILE};
    memcpy(arms, group, sizeof group);
}

static int run_interleaved(bench_capture_t *bc, const bench_options_t *o, device_set_t *d, cudaStream_t s,
                           pw_bf16_t *t0_out, pw_bf16_t *scratch)
{
    enum { COUNT = DEFAULT_GROUP };
    int arms[COUNT];
    default_group(arms);
    const pw_problem_t *p = &bc->capture->problem;
    arm_run_t runs[COUNT];
    memset(runs, 0, sizeof runs);
    int failures = 0, rc = 0;
    /* The graphs bake the workspace address: size it for every arm first. */
    for (int a = 0; a < COUNT && rc == 0; a++) {
        bench_arm_result_t *ar = &bc->arms[arms[a]];
        const arm_spec_t spec = arm_spec(arms[a]);
        const pw_plan_config_t cfg = arm_config(bc, &spec);
        pw_plan_t *plan = NULL;
        size_t ws = 0;
        if (pw_plan_create(p, &cfg, &plan) != PW_SUCCESS) {
            snprintf(ar->error, sizeof ar->error, "%s", pw_last_error());
            rc = 1;
        } else {
            pw_plan_workspace_size(plan, &ws);
            rc = ensure_workspace(d, ws, ar->error, sizeof ar->error);
        }
        pw_plan_destroy(plan);
    }
    for (int a = 0; a < COUNT && rc == 0; a++) rc = arm_prepare(bc, arms[a], d, s, &runs[a]);
    bench_timing_t t[COUNT];
    const int replays = o->interleaved_replays > 0 ? o->interleaved_replays : 200;
    char err[200] = "";
    /* Per-round times of every arm (arms[] order: identity, default, online, fixed, ...). */
    double *raw = malloc((size_t)COUNT * (size_t)replays * sizeof *raw);
    double *diff = malloc((size_t)replays * sizeof *diff);
    if (rc == 0) rc = time_interleaved(runs, COUNT, d->copies, o->warmup, replays, s, t, raw, err, sizeof err);
    bc->paired_rounds = 0;
    if (rc == 0 && raw && diff && replays >= 20) {
        const double *at[COUNT];
        for (int a = 0; a < COUNT; a++) at[a] = raw + (size_t)a * replays;
        paired_median(at[2], at[3], replays, diff, &bc->c_online_paired);
        paired_median(at[1], at[0], replays, diff, &bc->excess_paired);
        bc->paired_rounds = replays;
    }
    free(raw);
    free(diff);
    for (int a = 0; a < COUNT; a++) {
        bench_arm_result_t *ar = &bc->arms[arms[a]];
        int arm_rc = rc;
        if (rc == 0) {
            ar->t = t[a];
            arm_rc = arm_finish(bc, &runs[a], d, s, t0_out, scratch);
        } else if (!ar->error[0]) {
            snprintf(ar->error, sizeof ar->error, "%s", err[0] ? err : "an interleaved arm failed");
        }
        if (arm_rc) ar->ran = 0;
        failures += arm_rc != 0;
        arm_release(&runs[a]);
    }
    if (failures) cudaGetLastError();
    return failures;
}

int bench_gpu_capture(bench_capture_t *bc, const bench_options_t *o)
{
    const pw_problem_t *p = &bc->capture->problem;
    const size_t n = (size_t)p->num_tokens, hkv = (size_t)p->num_kv_heads;
    const size_t out_bytes = n * hkv * 16 * 128 * 2;
    device_set_t d;
    char *err = bc->gpu_note;
    const size_t errsz = sizeof bc->gpu_note;
    const int copies = o->copies < 1 ? 1 : o->copies > MAX_COPIES ? MAX_COPIES : o->copies;
    if (device_set_create(bc->capture, copies, &d, err, errsz) != 0) {
        device_set_free(&d);
        return 1;
    }
    if (cudaMemcpy(d.perm_reorder, bc->perms[PERM_W128_GUARDED], hkv * n * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
        snprintf(err, errsz, "perm upload: %s", cudaGetErrorString(cudaGetLastError()));
        device_set_free(&d);
        return 1;
    }
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        snprintf(err, errsz, "stream: %s", cudaGetErrorString(cudaGetLastError()));
        device_set_free(&d);
        return 1;
    }
    pw_bf16_t *t0_out = malloc(out_bytes ? out_bytes : 1), *scratch = malloc(out_bytes ? out_bytes : 1);
    bc->gpu_output = malloc(out_bytes ? out_bytes : 1);
    bc->gpu_output_x2 = malloc(out_bytes ? out_bytes : 1);
    if (!t0_out || !scratch || !bc->gpu_output || !bc->gpu_output_x2) {
        snprintf(err, errsz, "out of host memory (%zu bytes x 4)", out_bytes);
        free(t0_out);
        free(scratch);
        free(bc->gpu_output);
        bc->gpu_output = NULL;
        free(bc->gpu_output_x2);
        bc->gpu_output_x2 = NULL;
        cudaStreamDestroy(s);
        device_set_free(&d);
        return 1;
    }
    /* Every arm alone, in order, except the default kernel's group (the Union4 arm in the
     * default arithmetic, bench_default_online_arm, and ARM_UNION4_IDENTITY ..
     * ARM_DEFAULT_NOT_BY_TILE), which run together by interleaved replays at that arm's turn; right
     * after the group, ARM_DEFAULT_ALONE: the default plan alone. */
    int group[DEFAULT_GROUP];
    default_group(group);
    int failures = 0;
    for (int arm = 0; arm < ARM_UNION4_IDENTITY; arm++) {
        const int interleaved = arm == bench_default_online_arm();
        if (interleaved) {
            failures += run_interleaved(bc, o, &d, s, t0_out, scratch);
            failures += run_arm(bc, ARM_DEFAULT_ALONE, o, &d, s, t0_out, scratch) != 0;
        } else {
            failures += run_arm(bc, arm, o, &d, s, t0_out, scratch) != 0;
        }
        for (int g = 0; g < (interleaved ? DEFAULT_GROUP + 1 : 1) && !o->quiet; g++) {
            const int shown = !interleaved ? arm : g < DEFAULT_GROUP ? group[g] : ARM_DEFAULT_ALONE;
            const bench_arm_result_t *ar = &bc->arms[shown];
            if (ar->ran)
                fprintf(stderr, "[bench] %s: %-40s median %.4f ms (min %.4f, p90 %.4f)%s\n", bc->path,
                        bench_arm_name(shown), ar->t.median_ms, ar->t.min_ms, ar->t.p90_ms,
                        interleaved && g < DEFAULT_GROUP ? " [interleaved]" : "");
            else
                fprintf(stderr, "[bench] %s: %-40s FAILED: %s\n", bc->path, bench_arm_name(shown), ar->error);
        }
    }
    if (!bc->arms[ARM_ONLINE_W128].ran) {
        free(bc->gpu_output);
        bc->gpu_output = NULL;
    }
    if (!bc->arms[ARM_UNION4_X2].ran) {
        free(bc->gpu_output_x2);
        bc->gpu_output_x2 = NULL;
    }
    free(t0_out);
    free(scratch);
    cudaStreamDestroy(s);
    device_set_free(&d);
    bc->gpu_ran = 1;
    if (failures) snprintf(err, errsz, "%d arm(s) failed", failures);
    return failures != 0;
}

#else /* no CUDA in this build */

int bench_gpu_available(char *reason, size_t reason_size)
{
    snprintf(reason, reason_size, "this build has no CUDA (configured without nvcc, or with PW_WITH_CUDA=OFF)");
    return 0;
}

void bench_gpu_rates(bench_rates_t *rates)
{
    memset(rates, 0, sizeof *rates);
    snprintf(rates->error, sizeof rates->error, "no CUDA in this build");
}

int bench_gpu_capture(bench_capture_t *bc, const bench_options_t *options)
{
    (void)options;
    snprintf(bc->gpu_note, sizeof bc->gpu_note, "no CUDA in this build");
    return 1;
}

#endif
