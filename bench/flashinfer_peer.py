#!/usr/bin/env python3
"""flashinfer_peer.py — FlashInfer's SM90 sparse prefill on PageWeaver's captures (strongest peer).

    python3 bench/flashinfer_peer.py --root /tmp/fi/root CAPTURE... [--json OUT] [--replays 50]
                                     [--rows 256] [--seed S]
    python3 bench/flashinfer_peer.py --root /tmp/fi/root --import-only   (loads it, runs nothing)
    python3 bench/flashinfer_peer.py --self-test      (CPU, no FlashInfer; plus one small GPU
                                                       problem when CUDA and --root are given)

What runs. The union kernel FlashInfer 0.7.4 dispatches our long-context shapes to
(flashinfer/msa_ops/cute_dsl/sparse_prefill_sm90.py, its run(q, kv, q2k_indices,
cu_seqlens_q, page_table, seqused_k, prefix_lens, out, softmax_scale)), brought by
scripts/fetch-flashinfer-peer and unpacked under --root (fi/: the module and a stand-in
for its compile cache; site/: the CuTe DSL and TVM-FFI). Per capture (docs/capture-format.md,
read through the package's reader as bench/flex_peer.py does), the same prefill call
PageWeaver runs: the capture's request layout, page table and Top-K selections, Q/K/V from
the file or, when absent, from the library's documented generator (bit for bit
pw_capture_generate_qkv, flex_peer.Problem.ensure_qkv).

Conversion to FlashInfer's inputs (host, untimed, once per capture):
- q [N, Hq, D] BF16 as is; out [N, Hq, D] BF16.
- kv [pages, Hkv, 128, 256] FP8 E4M3: token row t of page p and KV head h holds K in
  [..., :128] and V in [..., 128:] (our caches are [slots, Hkv, D], slot = page * 128 + t).
- q2k_indices [Hkv, N, 16] int32: each Top-K row made canonical: the valid ids of
  docs/semantics.md §1 (0 <= p, p * 128 <= min(c, L - 1), physical page inside the cache),
  distinct, ascending, -1 right-padded (a row with K < 16 is padded). The kernel itself
  ignores -1 and ids past its tile's last visible page and merges duplicates, but a row
  whose only pages lie past its own position would get garbage; PageWeaver takes the raw
  rows, so this cleaning is work FlashInfer does not pay in the timed call.
- page_table [R, max_pages] int32 (the capture's, or the default layout r * max_pages + p);
  entries outside the cache are replaced by page 0: the kernel's V-transpose pre-pass reads
  every page of a request's first ceil(L / 128) columns, and the canonical rows never
  select those pages (docs/semantics.md §1: they contribute nothing).
- seqused_k = kv_lens, prefix_lens and cu_seqlens_q as int32.
- No per-tensor scales in the kernel: k_scale is folded into softmax_scale (a compile-time
  constant there: each distinct value compiles once, tens of seconds), and the output is
  multiplied by v_scale afterwards (as FlashInfer's own sparse_prefill_sm90 wrapper does:
  out.mul_(v_global_scale)). No LSE.

Routing (FlashInfer's msa_ops/_sm90_dispatch.py sends only these shapes to this kernel):
page size 128, head dim 128, Top-K <= 16, G = Hq / Hkv in {8, 16}, at most 16 requests, a
page table at most 800 pages wide (the dispatcher's bound: the union schedule was measured
wrong above ~1400), and N >= 8192 x R queries (below that it prefers its Cake programs,
which this arm does not bring; --force-route runs such shapes anyway and records it). A
capture outside the limits is reported as skipped with the reasons, never dropped silently.

What is timed, how (the protocol of docs/bench.md): one eager call per input copy (the
first compiles), then one CUDA graph per copy of the call, 3 copies of Q, q2k_indices and
out (kv, page table and request arrays shared, as in one layer's call), `--warmup` replays,
then `--replays` replays back to back with a CUDA event pair around each, rotating the
copies; median, min, p90, mean in ms. Two arms:
- time_ms: FlashInfer's run() alone: its V-transpose pre-pass (every page of every request,
  per call) and the attention kernel, launched from one compiled host function;
- time_with_v_scale_ms: run() + out.mul_(v_scale) (what the FP8 cache's v_scale costs
  through FlashInfer's wrapper; skipped when v_scale is 1).
If graph capture fails, the eager calls are timed instead (printed, recorded as
timing_mode). replay_matches_eager: copy 0's output after the replays equals its eager
output bit for bit.

Work counts (docs/bench.md's conventions):
- useful FLOP = visible (query, token) pairs x G x 128 x 4;
- union_visits = CTA-page steps of the kernel: each CTA takes nt consecutive queries of one
  request (nt = the module's own _pick_nt choice, 4 for G = 16 unless it halves it) and
  walks the union of their rows once; the grid is ceil(N / nt) + R CTAs per KV head, the
  surplus ones recompute the last request's last group (counted too);
- executed FLOP = union_visits x 64 rows x 128 x 128 x 4 x 2: QK and PV each run twice on
  the FP8 tensor cores (hi / lo pairs of Q and P), as docs/bench.md counts the FP8X2 arms.

Accuracy: NRMS = ||out * v_scale - ref|| / ||ref|| over `--rows` random query rows (all
their heads), the rows `pageweaver bench --seed S --check-rows R` checks (its splitmix64
choice, check_rows() below; S = --seed, default 1 as the bench's): both tools' NRMS are on
the same rows. (A random sample each run, as before 2026-12-06, made FlashInfer's NRMS on
the prefix-0 captures swing 0.12-0.21% between runs: a row near the start attends to a few
tokens, its output norm dwarfs the others' and its error is ~0, so whether the sample holds
one moves the ratio; compare the two tools on the same rows only.) ref = FP64 attention on the GPU straight
from docs/semantics.md §1 on the raw Top-K rows (visible tokens of each row's valid pages
through the page table, dequantised caches times their scales; independent of the
conversion above). NaN counts over the sample and over the whole output; empty rows (no
valid page: §1 wants 0) counted over all rows as zero / NaN / other.

JSON (--json OUT): {"environment": ..., "captures": [one object per capture, "status" ok,
skipped (with "skip_reasons") or error]}. Exit status 1 when a capture failed.
"""
import argparse
import inspect
import json
import math
import os
import statistics
import sys
import time
import traceback
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from flex_peer import (COPIES, Layout, Problem, bf16_bits_to_f32, e4m3_table,  # noqa: E402
                       load_capture, percentiles, random_problem, reference_np, spec_tokens)

KERNEL_MODULE = "flashinfer.msa_ops.cute_dsl.sparse_prefill_sm90"
RUN_PARAMS = ["q", "kv", "q2k_indices", "cu_seqlens_q", "page_table", "seqused_k",
              "prefix_lens", "out", "softmax_scale"]
TOPK = 16               # the kernel's Top-K width
PAGE = 128              # its page size
HEAD_DIM = 128          # its head dim
GROUP_SIZES = (8, 16)   # G it serves
MAX_REQUESTS = 16       # its fixed 16-entry request views
MAX_TABLE_PAGES = 800   # the dispatcher's page-table width bound for the union schedule
MIN_QUERIES_PER_REQUEST = 8192  # the dispatcher's: fewer (mean) go to its Cake programs
MMA_M = 64              # rows of one CTA's MMA (nt queries x G heads)


# ---- FlashInfer from the unpacked bundle -------------------------------------------------
def bundle_paths(root):
    """sys.path entries of an unpacked scripts/fetch-flashinfer-peer bundle."""
    return [os.path.join(root, "fi"), os.path.join(root, "site"),
            os.path.join(root, "site", "nvidia_cutlass_dsl", "dsl_packages")]


def load_flashinfer(root):
    """Imports the kernel module from the bundle under root (nothing compiles here) and
    checks that run() takes the arguments this script passes. Returns the module."""
    for p in bundle_paths(root):
        if not os.path.isdir(p):
            raise FileNotFoundError(f"{p} missing: unpack the bundle first (.peer/README)")
    # TVM-FFI would otherwise build a torch C extension for DLPack at import (needs a
    # compiler and torch headers, and is not used: the kernel takes raw pointers).
    os.environ["TVM_FFI_DISABLE_TORCH_C_DLPACK"] = "1"
    sys.path[:0] = bundle_paths(root)
    import importlib
    fi = importlib.import_module(KERNEL_MODULE)
    params = list(inspect.signature(fi.run).parameters)
    if params != RUN_PARAMS:
        raise RuntimeError(f"{fi.__file__}: run{tuple(params)}, this script calls "
                           f"run{tuple(RUN_PARAMS)}")
    return fi


def bundle_manifest(root):
    try:
        with open(os.path.join(root, "MANIFEST")) as f:
            return f.read()
    except OSError:
        return None


# ---- routing and conversion (host, numpy) ------------------------------------------------
def routing(prob):
    """(hard, soft): reasons FlashInfer would not send this shape to the union kernel.
    hard: the kernel cannot run it (or, above 800 pages, runs it wrong); soft: the
    dispatcher prefers its Cake programs (fewer than 8192 queries per request on average)."""
    hard, soft = [], []
    if prob.P != PAGE:
        hard.append(f"page size {prob.P} (kernel: {PAGE})")
    if prob.D != HEAD_DIM:
        hard.append(f"head dim {prob.D} (kernel: {HEAD_DIM})")
    if prob.k > TOPK:
        hard.append(f"Top-K {prob.k} (kernel: at most {TOPK})")
    if prob.G not in GROUP_SIZES:
        hard.append(f"G = {prob.G} Q heads per KV head (kernel: 8 or 16)")
    if prob.r > MAX_REQUESTS:
        hard.append(f"{prob.r} requests (kernel: at most {MAX_REQUESTS})")
    if prob.max_pages > MAX_TABLE_PAGES:
        hard.append(f"page table {prob.max_pages} pages wide (union schedule: at most "
                    f"{MAX_TABLE_PAGES}; FlashInfer routes it to its one-token schedule)")
    if prob.n < MIN_QUERIES_PER_REQUEST * prob.r:
        soft.append(f"{prob.n} queries for {prob.r} request(s) (< {MIN_QUERIES_PER_REQUEST} "
                    f"per request: FlashInfer routes it to its Cake programs)")
    return hard, soft


def query_positions(prob):
    """(request [N], causal position c [N], last visible token min(c, L - 1) [N]), int64."""
    n = np.arange(prob.n, dtype=np.int64)
    req = np.searchsorted(prob.cu, n, side="right") - 1
    c = prob.prefix[req] + (n - prob.cu[req])
    return req, c, np.minimum(c, prob.kv_lens[req] - 1)


def canonical_topk(prob, width=TOPK):
    """The Top-K rows FlashInfer gets: [Hkv, N, width] int32, per row the valid page ids of
    docs/semantics.md §1 (0 <= p, p * P <= min(c, L - 1), physical page inside the cache),
    distinct, ascending, -1 right-padded. Returns (rows, dropped): dropped counts the
    entries other than -1 that were left out (invalid or duplicate)."""
    ids = prob.topk.astype(np.int64)                        # [Hkv, N, K]
    req, _, cap = query_positions(prob)
    ok = (ids >= 0) & (ids <= (cap // prob.P)[None, :, None])
    col = np.clip(ids, 0, prob.max_pages - 1)
    phys = prob.page_table[req[None, :, None], col]
    ok &= (ids < prob.max_pages) & (phys >= 0) & (phys < prob.num_cache_pages)
    none = np.iinfo(np.int64).max
    s = np.sort(np.where(ok, ids, none), axis=-1)
    dup = np.zeros(s.shape, dtype=bool)
    dup[..., 1:] = s[..., 1:] == s[..., :-1]
    s = np.sort(np.where(dup, none, s), axis=-1)
    rows = np.full(ids.shape[:2] + (width,), -1, dtype=np.int32)
    k = min(width, ids.shape[-1])
    rows[..., :k] = np.where(s[..., :k] == none, -1, s[..., :k])
    if (s[..., k:] != none).any():
        raise ValueError(f"{prob.path}: a row has more than {width} valid pages")
    kept = int((rows >= 0).sum())
    return rows, int((prob.topk != -1).sum()) - kept


def fi_page_table(prob):
    """[R, max_pages] int32 with entries outside the cache replaced by 0. Returns
    (table, replaced): replaced counts the replaced entries in the columns the kernel's
    V-transpose pre-pass reads (col * P < L)."""
    pt = prob.page_table
    bad = (pt < 0) | (pt >= prob.num_cache_pages)
    read = np.arange(prob.max_pages)[None, :] * prob.P < prob.kv_lens[:, None]
    return (np.ascontiguousarray(np.where(bad, 0, pt), dtype=np.int32),
            int((bad & read).sum()))


def fi_kv_cache(k_bits, v_bits, P):
    """Our caches [slots, Hkv, D] uint8 (slot = page * P + t) -> FlashInfer's
    [pages, Hkv, P, 2D] uint8 (K in [..., :D], V in [..., D:])."""
    slots, hkv, d = k_bits.shape
    pages = slots // P
    k = k_bits.reshape(pages, P, hkv, d).transpose(0, 2, 1, 3)
    v = v_bits.reshape(pages, P, hkv, d).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(np.concatenate([k, v], axis=-1))


def split_fi_kv(kv):
    """FlashInfer's [pages, Hkv, P, 2D] -> our (k, v) [slots, Hkv, D] (the self-test's inverse)."""
    pages, hkv, P, d2 = kv.shape
    d = d2 // 2
    k = kv[..., :d].transpose(0, 2, 1, 3).reshape(pages * P, hkv, d)
    v = kv[..., d:].transpose(0, 2, 1, 3).reshape(pages * P, hkv, d)
    return k, v


def grid_size(n, r, nt):
    """CTAs per KV head of run(): ceil(N / nt) + R (an upper bound on the groups)."""
    return (n + nt - 1) // nt + r


def union_visits(rows, cu, nt, ngrp):
    """CTA-page steps of the union kernel: per KV head, each group of nt consecutive
    queries of one request walks the union of its rows' ids once; the ngrp - (number of
    groups) surplus CTAs recompute the last request's last group (none if it is empty).
    rows: [Hkv, N, K] canonical ids (-1 ignored). Returns the total over the KV heads."""
    hkv, n, _ = rows.shape
    cu = np.asarray(cu, dtype=np.int64)
    groups = -(-np.diff(cu) // nt)
    goff = np.concatenate([[0], np.cumsum(groups)])
    ngroups = int(goff[-1])
    if ngroups == 0:
        return 0
    q = np.arange(n, dtype=np.int64)
    req = np.searchsorted(cu, q, side="right") - 1
    grp = goff[req] + (q - cu[req]) // nt
    h, qq, j = np.nonzero(rows >= 0)
    span = int(rows.max()) + 1 if h.size else 1
    key = (h * ngroups + grp[qq]) * span + rows[h, qq, j]
    per = np.bincount(np.unique(key) // span, minlength=hkv * ngroups).reshape(hkv, ngroups)
    last = int(per[:, ngroups - 1].sum()) if groups[-1] > 0 else 0
    return int(per.sum()) + (ngrp - ngroups) * last


def exact_reference(prob, rows, q, k_deq, v_deq, torch):
    """FP64 docs/semantics.md §1 attention of the query rows `rows` from the raw Top-K rows:
    [len(rows), Hq, D] float64 on k_deq's device. q [N, Hq, D] (any float dtype, that
    device); k_deq, v_deq [slots, Hkv, D] float64, already times their scales."""
    G, dev = prob.G, k_deq.device
    out = torch.zeros((len(rows), prob.hkv * G, prob.D), dtype=torch.float64, device=dev)
    for i, n in enumerate(rows):
        for h in range(prob.hkv):
            _, slots, _ = spec_tokens(prob, h, int(n))
            if slots:
                sl = torch.tensor(slots, device=dev)
                qq = q[int(n), h * G:(h + 1) * G].to(torch.float64)
                p = torch.softmax(qq @ k_deq[sl, h].T * prob.scale, dim=-1)
                out[i, h * G:(h + 1) * G] = p @ v_deq[sl, h]
    return out


# ---- the GPU run -------------------------------------------------------------------------
def time_replays(runners, warmup, replays, torch):
    """Replays runners[i % copies] warmup times, then `replays` times with a CUDA event
    pair around each. Returns the milliseconds."""
    for i in range(warmup):
        runners[i % len(runners)]()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(replays)]
    for i in range(replays):
        ev[i][0].record()
        runners[i % len(runners)]()
        ev[i][1].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in ev]


def capture_graphs(calls, torch, log):
    """One CUDA graph per call (after a warm-up pass on a side stream). Returns (replay
    functions, mode); on a capture failure the calls themselves, mode 'eager-calls'."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for c in calls:
                c()
        torch.cuda.current_stream().wait_stream(side)
        graphs = []
        for c in calls:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                c()
            graphs.append(g)
        return [g.replay for g in graphs], "cuda-graph"
    except Exception as e:  # noqa: BLE001 - any capture failure: time the eager calls
        log(f"  CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); timing eager "
            f"calls")
        torch.cuda.synchronize()
        return list(calls), "eager-calls"


def host_tensor(a, torch):
    """A numpy array as a CPU tensor (copied when read-only, e.g. a capture file's bytes)."""
    return torch.from_numpy(np.require(a, requirements=["C", "W"]))


def stats(ms):
    t = percentiles(ms)
    t["mean"] = statistics.fmean(ms)
    return t


class Call:
    """One problem in FlashInfer's layout on a device (host conversion untimed): kv, the
    request arrays and page table shared, COPIES copies of Q, q2k_indices and out.
    call(i) runs FlashInfer on copy i; scaled(i) also multiplies its output by v_scale."""

    def __init__(self, prob, fi, torch, dev):
        self.fi = fi
        self.rows, self.dropped = canonical_topk(prob)
        table, self.replaced = fi_page_table(prob)
        self.scale = prob.scale * prob.k_scale  # k_scale folded into the softmax scale
        self.v_scale = prob.v_scale
        q = host_tensor(prob.q_bits.view(np.int16), torch).to(dev)
        self.q = q.view(torch.bfloat16)                                          # [N, Hq, D]
        kv = fi_kv_cache(prob.k_bits, prob.v_bits, prob.P)
        self.kv = torch.from_numpy(kv).to(dev).view(torch.float8_e4m3fn)  # [pages, Hkv, P, 2D]
        i32 = lambda a: host_tensor(a.astype(np.int32), torch).to(dev)  # noqa: E731
        self.cu, self.kv_lens, self.prefix = i32(prob.cu), i32(prob.kv_lens), i32(prob.prefix)
        self.table = i32(table)                                               # [R, max_pages]
        self.qs = [self.q] + [self.q.clone() for _ in range(COPIES - 1)]
        self.ids = [i32(self.rows) for _ in range(COPIES)]                    # [Hkv, N, 16]
        self.outs = [torch.empty_like(self.q) for _ in range(COPIES)]         # [N, Hq, D]

    def call(self, i):
        self.fi.run(self.qs[i], self.kv, self.ids[i], self.cu, self.table, self.kv_lens,
                    self.prefix, self.outs[i], softmax_scale=self.scale)

    def scaled(self, i):
        self.call(i)
        self.outs[i].mul_(self.v_scale)


def check_rows(n, rows, seed):
    """The query rows `pageweaver bench --seed seed --check-rows rows` checks
    (tools/cli/bench.c, reference_check): splitmix64 from seed ^ 0xc4ec4, each draw % n,
    repeats skipped, until min(rows, n) distinct rows; all rows when rows >= n. Sorted."""
    want = min(rows, n)
    if want >= n:
        return np.arange(n)
    mask, state, got = (1 << 64) - 1, (seed ^ 0xc4ec4) & ((1 << 64) - 1), 0
    chosen = np.zeros(n, dtype=bool)
    while got < want:
        state = (state + 0x9e3779b97f4a7c15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & mask
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & mask
        i = (z ^ (z >> 31)) % n
        if not chosen[i]:
            chosen[i] = True
            got += 1
    return np.nonzero(chosen)[0]


def check_accuracy(prob, out, pages, args, torch):
    """The NRMS of out [N, Hq, D] (BF16, before v_scale) against the FP64 reference on
    pageweaver bench's args.rows check rows (args.seed), NaN counts, empty rows (pages [Hkv, N]: valid pages
    per row). Returns the JSON fields."""
    G, D, hkv, dev = prob.G, prob.D, prob.hkv, out.device
    o = out.view(prob.n, hkv, G, D).permute(1, 0, 2, 3)               # [Hkv, N, G, D]
    empty = torch.from_numpy(pages == 0).to(dev)                       # [Hkv, N]
    nan_row = torch.isnan(o).any(-1).any(-1)
    zero_row = (o == 0).all(-1).all(-1)
    empty_rows = {"rows": int(empty.sum()) * G, "zero": int((empty & zero_row).sum()) * G,
                  "nan": int((empty & nan_row).sum()) * G,
                  "other": int((empty & ~zero_row & ~nan_row).sum()) * G}
    sample = check_rows(prob.n, args.rows, args.nrms_seed)
    lut = torch.from_numpy(e4m3_table().astype(np.float64)).to(dev)
    k_deq = lut[host_tensor(prob.k_bits, torch).to(dev).long()] * prob.k_scale
    v_deq = lut[host_tensor(prob.v_bits, torch).to(dev).long()] * prob.v_scale
    q = host_tensor(prob.q_bits.view(np.int16), torch).to(dev).view(torch.bfloat16)
    ref = exact_reference(prob, sample, q, k_deq, v_deq, torch)
    got = out[torch.from_numpy(sample).to(dev)].double() * prob.v_scale
    den = float((ref ** 2).sum())
    nrms = math.sqrt(float(((got - ref) ** 2).sum()) / den) if den > 0 else float("nan")
    return {"nrms": nrms, "nrms_rows": int(len(sample)), "nrms_seed": args.nrms_seed,
            "nan_in_sample": int(torch.isnan(got).sum()),
            "nan_total": int(torch.isnan(out).sum()), "empty_rows": empty_rows}


def run_capture(prob, args, fi, torch, log=print):
    """Converts, checks and times one routed problem. Returns the JSON object's fields."""
    G, D, hkv = prob.G, prob.D, prob.hkv
    prob.ensure_qkv(log)
    c = Call(prob, fi, torch, torch.device("cuda"))
    tokens, pages = Layout(prob).visible(prob)
    useful_flop = float(tokens.sum()) * G * D * 4
    nt = ngrp = visits = None
    if hasattr(fi, "_pick_nt"):  # the module's own tile choice, as run() makes it
        nt = int(fi._pick_nt(hkv * G, hkv, prob.n // prob.r, prob.r, prob.max_pages))
        ngrp = grid_size(prob.n, prob.r, nt)
        visits = union_visits(c.rows, prob.cu, nt, ngrp)

    t0 = time.time()
    c.call(0)
    torch.cuda.synchronize()
    first_s = time.time() - t0
    log(f"  first call (compile + run) {first_s:.1f} s")
    eager = c.outs[0].clone()
    accuracy = check_accuracy(prob, eager, pages, args, torch)

    runners, mode = capture_graphs([lambda i=i: c.call(i) for i in range(COPIES)], torch, log)
    ms = time_replays(runners, args.warmup, args.replays, torch)
    replay_matches = bool(torch.equal(c.outs[0], eager))
    ms_scaled = mode_scaled = None
    if c.v_scale != 1.0:
        runners_s, mode_scaled = capture_graphs(
            [lambda i=i: c.scaled(i) for i in range(COPIES)], torch, log)
        ms_scaled = time_replays(runners_s, args.warmup, args.replays, torch)
        del runners_s
    del runners
    torch.cuda.synchronize()

    t = stats(ms)
    executed_flop = None if visits is None else float(visits) * MMA_M * PAGE * D * 4 * 2
    return {
        "qkv": prob.qkv_source, "softmax_scale_folded": c.scale, "v_scale": c.v_scale,
        "topk_ids_dropped": c.dropped, "page_table_entries_replaced": c.replaced,
        "topk_padded_from": prob.k if prob.k < TOPK else None,
        "nt": nt, "ctas": None if ngrp is None else ngrp * hkv, "union_visits": visits,
        "first_call_s": first_s,
        "time_ms": t, "time_with_v_scale_ms": None if ms_scaled is None else stats(ms_scaled),
        "timing_mode": mode, "timing_mode_with_v_scale": mode_scaled,
        "replays": args.replays, "warmup": args.warmup, "copies": COPIES,
        "replay_matches_eager": replay_matches,
        "useful_gflop": useful_flop / 1e9,
        "useful_tflops": useful_flop / (t["median"] * 1e-3) / 1e12,
        "executed_gflop": None if executed_flop is None else executed_flop / 1e9,
        "executed_tflops": None if executed_flop is None
        else executed_flop / (t["median"] * 1e-3) / 1e12,
        **accuracy,
    }


def describe(prob):
    return {"capture": prob.path, "workload": prob.meta.get("workload", ""), "N": prob.n,
            "kv_heads": prob.hkv, "q_heads_per_kv": prob.G, "requests": prob.r,
            "topk": prob.k, "max_pages": prob.max_pages,
            "kv_lens": prob.kv_lens.tolist()[:16]}


def bench(paths, args, fi, torch):
    """Every capture in turn; one printed summary each. Returns the result objects."""
    results = []
    for path in paths:
        res = {"capture": path, "status": "error"}
        try:
            tensors, meta = load_capture(path)
            prob = Problem(tensors, meta, path)
            res.update(describe(prob))
            print(f"{path}: N={prob.n} Hkv={prob.hkv} G={prob.G} R={prob.r} "
                  f"max_pages={prob.max_pages} kv_lens={prob.kv_lens.tolist()[:4]}")
            hard, soft = routing(prob)
            if soft and args.force_route:
                res["forced_route"] = soft
                print(f"  outside FlashInfer's routing, run anyway (--force-route): "
                      f"{'; '.join(soft)}")
                soft = []
            if hard or soft:
                res.update(status="skipped", skip_reasons=hard + soft)
                print(f"  skipped: {'; '.join(hard + soft)}")
                results.append(res)
                continue
            res.update(run_capture(prob, args, fi, torch))
            res["status"] = "ok"
            t, ts = res["time_ms"], res["time_with_v_scale_ms"]
            scaled = "" if ts is None else f"; with out *= v_scale {ts['median']:.3f} ms"
            work = "" if res["executed_tflops"] is None else \
                (f", executed {res['executed_tflops']:.1f} ({res['union_visits']} union page "
                 f"visits, nt {res['nt']})")
            print(f"  flashinfer {t['median']:.3f} ms (min {t['min']:.3f}, p90 {t['p90']:.3f}; "
                  f"{res['timing_mode']}, {COPIES} copies){scaled}; useful "
                  f"{res['useful_tflops']:.1f} TFLOP/s{work}")
            print(f"  NRMS {res['nrms']:.4%} vs FP64 exact ({res['nrms_rows']} rows, seed "
                  f"{args.nrms_seed}, pageweaver bench's rows); NaN {res['nan_in_sample']} in the sample, {res['nan_total']} "
                  f"in all; empty rows {res['empty_rows']}; replay == eager "
                  f"{res['replay_matches_eager']}; Top-K ids dropped {res['topk_ids_dropped']}")
        except Exception as e:  # noqa: BLE001 - report it, go on with the next capture
            traceback.print_exc()
            res.update(status="error", error=f"{type(e).__name__}: {e}")
            print(f"  error: {res['error']}")
        results.append(res)
        sys.stdout.flush()
    return results


# ---- self-test ---------------------------------------------------------------------------
def fi_semantics_np(prob, rows, kv, table, q, k_scale, v_scale):
    """FP64 attention as FlashInfer's kernel defines it, from its own inputs: each row sees
    the tokens t of its listed pages with t <= c and t < L, read through table from kv
    [pages, Hkv, P, 2D] (dequantised values); logits q . k * scale * k_scale, output times
    v_scale. q [N, Hq, D] float64. Returns [N, Hq, D]."""
    P, G, D = prob.P, prob.G, prob.D
    req, c, _ = query_positions(prob)
    o = np.zeros(q.shape)
    for h in range(prob.hkv):
        for n in range(prob.n):
            r = req[n]
            toks = [t for p in rows[h, n] if p >= 0
                    for t in range(p * P, p * P + P) if t <= c[n] and t < prob.kv_lens[r]]
            if not toks:
                continue
            ent = kv[[table[r, t // P] for t in toks], h, [t % P for t in toks]]  # [T, 2D]
            s = q[n, h * G:(h + 1) * G] @ ent[:, :D].T * (prob.scale * k_scale)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            o[n, h * G:(h + 1) * G] = (p / p.sum(axis=1, keepdims=True)) @ ent[:, D:] * v_scale
    return o


def standin_run(q, kv, q2k_indices, cu_seqlens_q, page_table, seqused_k, prefix_lens, out,
                softmax_scale=None):
    """FlashInfer's run() as its source describes it, in FP64 torch on the CPU (the
    self-test drives Call and check_accuracy through it): query n of request r, at position
    prefix_lens[r] + n - cu_seqlens_q[r], sees the tokens t of its listed pages with t <= that
    position and t < seqused_k[r], read through page_table from kv [pages, Hkv, P, 2D];
    logits times softmax_scale; out in BF16, without v_scale; 0 for a row with no token."""
    import torch
    _, hkv, P, d2 = kv.shape
    D, G = d2 // 2, q.shape[1] // hkv
    kvf = kv.to(torch.float64)
    cu, pre, seq = cu_seqlens_q.tolist(), prefix_lens.tolist(), seqused_k.tolist()
    out.zero_()
    for r in range(len(cu) - 1):
        for n in range(cu[r], cu[r + 1]):
            pos = pre[r] + n - cu[r]
            for h in range(hkv):
                toks = [t for p in q2k_indices[h, n].tolist() if p >= 0
                        for t in range(p * P, p * P + P) if t <= pos and t < seq[r]]
                if not toks:
                    continue
                ent = kvf[page_table[r, [t // P for t in toks]].long(), h, [t % P for t in toks]]
                s = q[n, h * G:(h + 1) * G].to(torch.float64) @ ent[:, :D].T * softmax_scale
                out[n, h * G:(h + 1) * G] = (torch.softmax(s, -1) @ ent[:, D:]).to(out.dtype)


def union_visits_loop(rows, cu, nt, ngrp):
    """union_visits by enumeration (the self-test's yardstick)."""
    hkv = rows.shape[0]
    groups = []
    for r in range(len(cu) - 1):
        for q0 in range(int(cu[r]), int(cu[r + 1]), nt):
            groups.append(range(q0, min(q0 + nt, int(cu[r + 1]))))
    last = groups[-1] if cu[-1] > cu[-2] else range(0)
    total = 0
    for h in range(hkv):
        for g in groups + [last] * (ngrp - len(groups)):
            total += len({int(p) for n in g for p in rows[h, n] if p >= 0})
    return total


def package_reference(prob):
    """pageweaver.sparse_prefill(precision='exact') on the CPU (the library's FP64
    reference through the PyTorch package), or None with the reason when the package or
    libpageweaver.so is not importable."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    try:
        import torch
        import pageweaver
    except (ImportError, OSError) as e:
        return None, f"{type(e).__name__}: {str(e)[:160]}"
    as_i32 = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32))  # noqa: E731
    q = torch.from_numpy(bf16_bits_to_f32(prob.q_bits)).to(torch.bfloat16)
    k = torch.from_numpy(np.ascontiguousarray(prob.k_bits)).view(torch.float8_e4m3fn)
    v = torch.from_numpy(np.ascontiguousarray(prob.v_bits)).view(torch.float8_e4m3fn)
    out = torch.empty(q.shape, dtype=torch.float64)
    pageweaver.sparse_prefill(q, k, v, as_i32(prob.topk), as_i32(prob.page_table),
                              as_i32(prob.cu), as_i32(prob.kv_lens), as_i32(prob.prefix),
                              k_scale=prob.k_scale, v_scale=prob.v_scale,
                              softmax_scale=prob.scale, out=out, precision="exact")
    return out.numpy(), pageweaver.library_path


def self_test(args):
    """CPU checks of everything here that does not need FlashInfer; with CUDA and --root,
    FlashInfer on a small random problem against the FP64 reference."""
    import torch
    seed = args.seed
    print(f"flashinfer_peer self-test seed {seed} (--seed {seed} repeats)")
    rng = np.random.default_rng(seed)
    lut = e4m3_table().astype(np.float64)

    # 1. Layout, canonical rows, page table, FlashInfer's semantics on random problems with
    #    every docs/semantics.md §1 edge (flex_peer.random_problem: -1 rows, duplicates,
    #    future / past-the-KV / negative / huge ids, a page outside the cache).
    cases = {"dropped": 0, "replaced": 0, "empty": 0, "rows": 0}
    for trial in range(12):
        P, G = [(4, 2), (8, 3), (4, 1)][trial % 3]
        t, meta = random_problem(rng, hkv=1 + trial % 2, P=P, G=G, D=8, K=6, max_q=40,
                                 n_requests=1 + trial % 4, page_table=trial % 3 != 2)
        prob = Problem(t, meta, f"trial{trial}")
        kv = fi_kv_cache(prob.k_bits, prob.v_bits, P)
        k2, v2 = split_fi_kv(kv)
        assert np.array_equal(k2, prob.k_bits) and np.array_equal(v2, prob.v_bits), \
            f"trial {trial}: FlashInfer layout round trip"
        s, h = int(rng.integers(prob.k_bits.shape[0])), int(rng.integers(prob.hkv))
        assert np.array_equal(kv[s // P, h, s % P], np.concatenate(
            [prob.k_bits[s, h], prob.v_bits[s, h]])), f"trial {trial}: kv[page, h, t] != [k | v]"
        rows, dropped = canonical_topk(prob)
        _, c, cap = query_positions(prob)
        for h in range(prob.hkv):
            for n in range(prob.n):
                row = rows[h, n].tolist()
                valid = [p for p in row if p >= 0]
                assert row == valid + [-1] * (TOPK - len(valid)), f"{row}: not -1 right-padded"
                assert valid == sorted(set(valid)), f"{row}: not ascending and distinct"
                assert all(p * P <= cap[n] for p in valid), f"{row}: past min(c, L - 1)"
                toks, _, _ = spec_tokens(prob, h, n)
                assert valid == sorted({t // P for t in toks}), \
                    f"trial {trial}: row {n}: {valid} differs from the §1 page set"
        table, replaced = fi_page_table(prob)
        assert ((table >= 0) & (table < prob.num_cache_pages)).all()
        qd = bf16_bits_to_f32(prob.q_bits).astype(np.float64)
        got = fi_semantics_np(prob, rows, lut[kv], table, qd, prob.k_scale, prob.v_scale)
        want = reference_np(prob, qd, lut[prob.k_bits] * prob.k_scale,
                            lut[prob.v_bits] * prob.v_scale)
        err = np.abs(got - want).max()
        assert err < 1e-12, f"trial {trial}: FlashInfer's semantics on the converted inputs " \
                            f"differ from §1 by {err}"
        ref = exact_reference(prob, range(prob.n), torch.from_numpy(qd),
                              torch.from_numpy(lut[prob.k_bits] * prob.k_scale),
                              torch.from_numpy(lut[prob.v_bits] * prob.v_scale), torch).numpy()
        err = np.abs(ref - want).max()
        assert err < 1e-12, f"trial {trial}: exact_reference differs from the naive loop by {err}"
        for nt in (1, 2, 4):
            ngrp = grid_size(prob.n, prob.r, nt)
            assert union_visits(rows, prob.cu, nt, ngrp) == \
                union_visits_loop(rows, prob.cu, nt, ngrp), f"trial {trial}: union visits, nt {nt}"
        cases["dropped"] += dropped
        cases["replaced"] += replaced
        cases["empty"] += int((rows[..., 0] < 0).sum())
        cases["rows"] += prob.hkv * prob.n
    assert min(cases.values()) > 0, f"the random problems miss a case: {cases}"
    print(f"  layout round trip, canonical rows (sorted, distinct, -1 padded, = the §1 page "
          f"sets), page table, FlashInfer's semantics on the converted inputs = §1 (FP64), "
          f"exact_reference = naive loop, union visits = enumeration (nt 1, 2, 4): 12 random "
          f"problems, {cases['rows']} rows ({cases['dropped']} ids dropped, {cases['empty']} "
          f"empty rows, {cases['replaced']} page-table entries outside the cache)")

    # 2. exact_reference against the library's own FP64 reference (page size 128).
    t, meta = random_problem(rng, hkv=2, P=128, G=2, D=16, K=6, max_q=24, n_requests=3,
                             qkv_seed=seed)
    prob = Problem(t, meta, "package")
    ours = exact_reference(prob, range(prob.n),
                           torch.from_numpy(bf16_bits_to_f32(prob.q_bits).astype(np.float64)),
                           torch.from_numpy(lut[prob.k_bits] * prob.k_scale),
                           torch.from_numpy(lut[prob.v_bits] * prob.v_scale), torch).numpy()
    theirs, where = package_reference(prob)
    if theirs is None:
        print(f"  pageweaver package not importable ({where}): exact_reference checked "
              f"against the naive loop only (build with -DPW_BUILD_SHARED=ON and set "
              f"PAGEWEAVER_LIBRARY for the library's reference)")
    else:
        err = np.abs(ours - theirs).max()
        assert err < 1e-12, f"exact_reference differs from pw_ref_attention (exact) by {err}"
        print(f"  exact_reference = pageweaver.sparse_prefill(precision='exact') on the CPU "
              f"({where}): max |diff| {err:.1e} over {prob.n} rows")

    # 3. Routing.
    t, meta = random_problem(rng, hkv=1, P=128, G=16, D=128, K=16, max_q=4, n_requests=1)
    prob = Problem(t, meta, "routing")
    hard, soft = routing(prob)
    assert not hard and len(soft) == 1, (hard, soft)
    prob.G, prob.max_pages, prob.r, prob.k = 4, 801, 17, 20
    hard, _ = routing(prob)
    assert len(hard) == 4, hard
    print("  routing: the shape limits give their skip reasons")

    # 3b. The NRMS rows are pageweaver bench's: its JSON's reference_check.row_ids for
    #     `pageweaver bench --check-rows 256` (seed 1) on a 16,384-query capture, 2026-12-06.
    rows = check_rows(16384, 256, 1)
    assert len(rows) == 256 and list(rows[:8]) == [16, 80, 143, 318, 360, 465, 561, 648] and int(rows.sum()) == 2173765 \
        and int(rows[-1]) == 16323, "check_rows differs from pageweaver bench's choice"
    assert np.array_equal(check_rows(37, 100, 5), np.arange(37))  # all rows when rows >= n
    few = check_rows(1000, 999, seed)
    assert len(set(few.tolist())) == 999 and np.all(np.diff(few) > 0)
    print("  NRMS rows = pageweaver bench's check rows (seed 1, 256 of 16,384: known answer)")

    # 4. Call (FlashInfer's inputs on a device, the call with its argument order and scales)
    #    and check_accuracy, through a stand-in run() with the kernel's semantics (CPU).
    t, meta = random_problem(rng, hkv=2, P=128, G=8, D=32, K=16, max_q=40, n_requests=4,
                             qkv_seed=seed)
    # one row without a page, so that the empty-row check below always has a row to see
    # (random_problem leaves none on a few % of seeds, e.g. 1967199582)
    t["topk_ids"][:, 0, :] = -1
    prob = Problem(t, meta, "stand-in")
    prob.v_scale = 1 / 32  # differs from k_scale: a swapped scale shows
    c = Call(prob, types.SimpleNamespace(run=standin_run), torch, torch.device("cpu"))
    c.call(1)
    _, pages = Layout(prob).visible(prob)
    acc = check_accuracy(prob, c.outs[1], pages, argparse.Namespace(rows=prob.n, nrms_seed=seed),
                         torch)
    assert acc["nan_total"] == 0 and acc["empty_rows"]["other"] == 0, acc
    assert acc["empty_rows"]["rows"] > 0 and acc["nrms"] < 5e-3, acc
    c.scaled(2)
    assert torch.equal(c.outs[2], c.outs[1] * c.v_scale), "scaled(i) is not call(i) * v_scale"
    print(f"  Call + check_accuracy through a stand-in run(): NRMS {acc['nrms']:.2e} (BF16 "
          f"output) over {prob.n} rows, {acc['empty_rows']['rows']} empty rows all 0")

    # 5. FlashInfer itself on a small problem (GPU only).
    if args.root is None or not torch.cuda.is_available():
        print("  no --root or no CUDA device: FlashInfer end-to-end check skipped")
        return
    fi = load_flashinfer(args.root)
    t, meta = random_problem(rng, hkv=2, P=128, G=16, D=128, K=16, max_q=40, n_requests=4,
                             qkv_seed=seed)
    prob = Problem(t, meta, "self-test")
    run_args = argparse.Namespace(seed=seed, nrms_seed=seed, rows=prob.n, warmup=2, replays=3)
    res = run_capture(prob, run_args, fi, torch, log=print)
    print(f"  GPU: NRMS {res['nrms']:.2e} over all {prob.n} queries, NaN {res['nan_total']}, "
          f"empty rows {res['empty_rows']}, replay == eager {res['replay_matches_eager']}")
    assert res["nan_total"] == 0 and res["nrms"] < 1e-2, "FlashInfer differs from FP64 §1"


# ---- main --------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--root", help="the unpacked bundle of scripts/fetch-flashinfer-peer")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--replays", type=int, default=50, help="timed replays (>= 50)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rows", type=int, default=256, help="query rows for the NRMS")
    ap.add_argument("--seed", type=int, default=None,
                    help="the NRMS rows: pageweaver bench --seed's (default 1, as the bench); "
                         "the self-test's seed (default random)")
    ap.add_argument("--force-route", action="store_true",
                    help="run shapes FlashInfer would route to its Cake programs (< 8192 "
                         "queries per request); recorded as forced_route")
    ap.add_argument("--import-only", action="store_true",
                    help="load FlashInfer from --root, print what was found, run nothing")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    args.nrms_seed = 1 if args.seed is None else args.seed
    if args.seed is None:
        args.seed = int(np.random.SeedSequence().entropy % 2**31)
    if args.self_test:
        self_test(args)
        print("flashinfer_peer self-test: ok")
        return 0
    if args.root is None:
        ap.error("--root is required (the unpacked bundle, see .peer/README)")
    t0 = time.time()
    fi = load_flashinfer(args.root)
    import cutlass
    import torch
    env = {"torch": torch.__version__, "cutlass_dsl": getattr(cutlass, "__version__", None),
           "kernel_module": fi.__file__, "bundle": bundle_manifest(args.root), "seed": args.nrms_seed,
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    print(f"flashinfer_peer: {fi.__name__}.run{inspect.signature(fi.run)} from {fi.__file__} "
          f"(import {time.time() - t0:.1f} s); torch {env['torch']}, CuTe DSL "
          f"{env['cutlass_dsl']}, {env['device']}, NRMS rows: pageweaver bench --seed {args.nrms_seed}'s")
    if args.import_only:
        return 0
    if not args.captures:
        ap.error("no capture given")
    if not torch.cuda.is_available():
        sys.exit("flashinfer_peer: needs a CUDA device (use --self-test on a CPU machine)")
    if args.replays < 50:
        print(f"flashinfer_peer: --replays {args.replays} < 50 (the bench protocol asks for >= 50)")
    results = bench(args.captures, args, fi, torch)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"environment": env, "captures": results}, f, indent=1)
        os.replace(tmp, args.json)
        print(f"wrote {args.json}")
    return 1 if any(r["status"] == "error" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
