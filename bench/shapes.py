#!/usr/bin/env python3
"""Shapes and layouts of issue 16 in the full call: time per call and useful TFLOP/s.

Per capture (selections only, e.g. .data/workloads/sel_A_hot.safetensors; Q ~ N(0,1)
bfloat16, caches N(0,1) * 64 as E4M3 with per-tensor scales 1/64, an identity page table,
as `pageweaver bench` builds them), one CUDA graph of one pageweaver.sparse_prefill call per
arm, the library's default plan (Union4, regroup auto, the V^T pre-pass rule), both
precisions:
  G16        16 Q heads per KV head (the reference arm);
  G8, G4     8 / 4 Q heads per KV head: where the plan runs the V^T pre-pass (as on
             A-hot) the dense tiles of 8 queries x 8 heads / 16 queries x 4 heads,
             otherwise the padded tile (G16's tiles: G16's executed tensor work, G / 16
             of its useful work); the default regroup ("auto": the time guard);
  G16greedy, G8greedy, G4greedy  the same with regroup="guarded" (the regroup always
             runs: W128, g = 8 on the dense tiles, the wide-Top-K kernel for K > 16),
             against "auto"'s choice;
  G16greedy64, G8greedy64, G4greedy64  regroup="guarded" at W64 (the package's private
             window hook): the window the Top-K > 16 time guard would pick on paper with a
             refit (bench/NOTES.md, forty-second session);
  G16id, G8id, G4id  the same with regroup="identity" (no regroup: what "auto" must not
             lose to);
  G16vt, G8vt, G4vt  the V^T pre-pass forced on (PW_PLAN_VT_PREPASS through the package's
             private plan-flags hook), e.g. on chunks below the rule's 4,096 queries;
  G16novt, G8novt, G4novt  forced off (PW_PLAN_NO_VT_PREPASS: the padded tile, the kernel
             transposing V itself);
  G16fb, G8fb, G4fb  the pre-pass forced on with one tile per KV head (config.vt_max_pages
             = 1 through the package's private hook): every KV head falls back on the device,
             so G<g>fb - G<g>novt is what the fallback costs (its mark, scan and second launch);
  scales     G16 with per-token K / V scales [Hkv, slots] (K 2^U(-1,1), V 2^U(-3,3));
  scalesnovt the same with the V^T pre-pass forced off (the per-token-scale kernel that
             transposes V itself); G8scales, G4scales: per-token scales at G = 8 / 4 (FP8X2
             on the pre-pass: the stacked tile, as at G = 16; FP8 too since 2026-12-04, its second
             term 0: the dense tile's bytes);
  scaleslean, G8scaleslean, G4scaleslean  the scales arms with PW_PLAN_NO_FP8X2_STACKED: FP8X2
             on the lean kernel's per-token-scale form (G = 16) or the padded tile (G = 8 /
             4), what those calls ran before the stacked tile took per-token scales; FP8 at
             G = 8 / 4: the dense tile's per-token-scale form (the default before the 34th
             session);
  scalesstacked  scales with PW_PLAN_FP8X2_STACKED (the default's tile: the same calls);
  interleave G16 reading vLLM's interleaved [pages, Hkv, 128, 2*D] cache through strides;
  sinkkeys   G16 with per-Q-head sink keys;
  G8dense, G8stacked  G8 with FP8X2's tile fixed (PW_PLAN_NO_FP8X2_STACKED: the dense tile;
             PW_PLAN_FP8X2_STACKED: the stacked 4-slot tile, a 4-query half x 8 heads x two
             terms per 64 rows, regrouped for C_4) where the G8 arm's device picks per call
             (FP8 calls: the dense tile, or the stacked tile with its second term 0);
  G4dense, G4stacked  the same at G = 4 (the stacked 8-slot tile: an 8-query group x 4 heads
             x two terms per 64 rows, walking the group's union; both tiles regroup with g = 8).
  G16lean, G16stacked  the same at G = 16 (the lean kernel, a 4-query half x 16 heads per 64
             rows; the stacked 2-slot tile, a pair of queries x 16 heads x two terms, regrouped
             for pairs): the break-even of the per-call rule (pageweaver.h, PW_PLAN_FP8X2_STACKED).
  G8scalesstacked, G4scalesstacked  G8scales / G4scales with PW_PLAN_FP8X2_STACKED.
  FP8 rows: since 2026-12-04 PW_PLAN_FP8X2_STACKED puts FP8 calls on the stacked tile too
             (its second term 0: the other tile's bytes), so the FP8 rows of the ...stacked
             arms time it; FP8 with per-token scales at G = 8 / 4 runs it by default
             (G8scales, G4scales; G8scaleslean / G4scaleslean: the dense tile).
Arms are replayed interleaved (--replays each after --warmup); --copies C (default 1) gives
each arm C graphs on C different Q / O buffers, replayed in turn, as FlashInfer's harness
(bench/flashinfer_peer.py, 3 copies) and `pageweaver bench` rotate their inputs, so that a
replay does not find the previous one's Q and O in L2; printed: median and p90 in
microseconds, useful TFLOP/s (4 * D * visible query-token pairs * G per KV head, the
definition of docs/bench.md), each arm's time over G16's in the same precision, and the
executed TFLOP/s with its ratio to the useful work (the attention kernel's CTA page steps,
64 rows x 128 tokens x 128 x 4 FLOP each, twice for FP8X2, as `pageweaver bench` counts
them: C_4 for the G16 / padded tiles, 8-query unions for the dense G = 8 tile, from the CPU
reference's grouping with the plan's regroup mode; not printed for the dense G = 4 tile and
the vt / novt arms).

--flush-mb M writes M MiB (untimed) before each timed replay, so that every call starts with
a cold L2 as a serving engine's call for one layer does after the other layers' (on the H200
A-hot and C-hot calls read the same with 256 MiB as without: bench/NOTES.md, 32nd session).
--back-to-back queues the replays (a CUDA event pair around each, one synchronisation at the
end) as bench/flashinfer_peer.py does; by default the host waits for each replay before
launching the next, so the GPU idles between them.
--nrms-rows R adds each plain arm's NRMS against FP64 exact on R random rows (its copy 0's output).
--table-pages T widens each capture's page table to T columns (the extra ones name page 0 and
lie past every kv_len), as an engine's table sized for longer contexts: the time guard and the
regroup see the width (e.g. 3,000: past W128's direct regroup bound, 2,048, within W64's,
4,096, where the Top-K > 16 guard picks W64); the JSON rows carry table_pages, and
bench/fit_time_guard.py --wide skips rows past 2,048 columns.
Run: python bench/shapes.py FILE.safetensors... [--replays 50] [--warmup 5] [--copies 1] [--arms ...]
     [--flush-mb 256] [--back-to-back] [--nrms-rows 256] [--table-pages 3000]
(PAGEWEAVER_LIBRARY or an installed package, as for the tests; needs an sm_90 GPU).
"""
import argparse
import ctypes
import json
import statistics

import torch

import pageweaver
from pageweaver import _lib, _op

D = 128  # head dim; the page size P is each capture's (metadata page_size: 128 or 64)
ARMS = ("G16", "G8", "G4", "scales", "interleave", "sinkkeys", "G16greedy", "G8greedy", "G4greedy", "G16id", "G8id", "G4id",
        "G16vt", "G8vt", "G4vt", "G16novt", "G8novt", "G4novt", "scalesnovt", "G8scales", "G8dense", "G8stacked",
        "G4dense", "G4stacked", "G4scales", "scaleslean", "scalesstacked", "G8scaleslean", "G4scaleslean", "G16lean",
        "G16stacked", "G8scalesstacked", "G4scalesstacked", "G16greedy64", "G8greedy64", "G4greedy64",
        "G16fb", "G8fb", "G4fb")
PW_PLAN_VT_PREPASS, PW_PLAN_NO_VT_PREPASS = 1 << 1, 1 << 2  # pageweaver.h
PW_PLAN_FP8X2_STACKED, PW_PLAN_NO_FP8X2_STACKED = 1 << 4, 1 << 5


def arm_flags(arm):
    """The plan flags an arm's calls are made with (the package's private hook), or 0."""
    if arm.endswith("novt"):
        return PW_PLAN_NO_VT_PREPASS
    if arm.endswith(("vt", "fb")):  # fb: with one tile (arm_call's vt_max_pages)
        return PW_PLAN_VT_PREPASS
    return {"G16lean": PW_PLAN_NO_FP8X2_STACKED, "G16stacked": PW_PLAN_FP8X2_STACKED,
            "G8scalesstacked": PW_PLAN_FP8X2_STACKED, "G4scalesstacked": PW_PLAN_FP8X2_STACKED,
            "G8dense": PW_PLAN_NO_FP8X2_STACKED, "G8stacked": PW_PLAN_FP8X2_STACKED,
            "G4dense": PW_PLAN_NO_FP8X2_STACKED, "G4stacked": PW_PLAN_FP8X2_STACKED,
            "scaleslean": PW_PLAN_NO_FP8X2_STACKED, "G8scaleslean": PW_PLAN_NO_FP8X2_STACKED,
            "G4scaleslean": PW_PLAN_NO_FP8X2_STACKED, "scalesstacked": PW_PLAN_FP8X2_STACKED}.get(arm, 0)


DEFAULT_ARMS = ("G16", "G8", "G4", "scales", "interleave", "sinkkeys")


def visible_pairs(topk, cu, kv, prefix, P):
    """Visible (query, token) pairs summed over KV heads (docs/semantics.md §1)."""
    hkv, n, _ = topk.shape
    total = 0
    for r in range(kv.numel()):
        lo, hi = int(cu[r]), int(cu[r + 1])
        if hi <= lo:
            continue
        c = prefix[r] + torch.arange(hi - lo, dtype=torch.int64)  # causal positions
        last = torch.minimum(c, kv[r].to(torch.int64) - 1)  # [rows]
        ids = topk[:, lo:hi].to(torch.int64)  # [hkv, rows, K]
        valid = (ids >= 0) & (ids <= (last // P)[None, :, None])
        ids = torch.where(valid, ids, torch.full_like(ids, -1))
        ids, _ = ids.sort(dim=-1)
        first = torch.ones_like(valid)
        first[..., 1:] = ids[..., 1:] != ids[..., :-1]
        keep = (ids >= 0) & first
        tokens = torch.clamp(last[None, :, None] + 1 - ids * P, 0, P)
        total += int((tokens * keep).sum())
    return total


class _Grouping(ctypes.Structure):  # pw_grouping_t
    _fields_ = [("struct_size", ctypes.c_uint32), ("mode", ctypes.c_int), ("window", ctypes.c_int32),
                ("group_size", ctypes.c_int32)]


class _UnionStats(ctypes.Structure):  # pw_union_stats_t
    _fields_ = [("queries", ctypes.c_int64), ("groups", ctypes.c_int64), ("selections", ctypes.c_int64),
                ("union_visits", ctypes.c_int64), ("c4", ctypes.c_int64), ("rho_q", ctypes.c_double)]


def union_visits(t, mode, window, g, P):
    """Union visits of the CPU reference's grouping (pw_ref_grouping_stats: Algorithm 1 with
    `mode`, windows of `window`, groups of g): with g = 4 the sum of the 4-query unions, which
    is C_4 of the call's 8-slot groups (their halves are those groups)."""
    topk = t["topk_ids"].to(torch.int32).contiguous()
    hkv, n, k = topk.shape
    cu = t["cu_seqlens_q"].to(torch.int32).contiguous()
    kv = t["kv_lens"].to(torch.int32).contiguous()
    prefix = t["prefix_lens"].to(torch.int32).contiguous()
    prob = _lib.new_problem()
    prob.num_tokens, prob.num_requests, prob.num_kv_heads, prob.topk = n, kv.numel(), hkv, k
    prob.max_pages_per_request = max(1, -(-int(kv.max()) // P))
    prob.page_size = P
    prob.num_cache_pages = prob.max_pages_per_request * kv.numel()
    rq = _lib.Requests(cu.data_ptr(), prefix.data_ptr(), kv.data_ptr(), None, 0)
    grouping = _Grouping(ctypes.sizeof(_Grouping), mode, window, g)
    stats = _UnionStats()
    fn = _lib.lib.pw_ref_grouping_stats
    fn.restype = ctypes.c_int
    _lib.check(fn(ctypes.byref(prob), ctypes.c_void_p(topk.data_ptr()), ctypes.byref(rq), ctypes.byref(grouping),
                  ctypes.byref(stats), None), "pw_ref_grouping_stats")
    return int(stats.union_visits)


def executed_steps(t, info, P):
    """CTA page steps of the call's attention kernel (64 rows x one 128-token page each), from
    check_gpu_support's description: the padded / G16 tile walks each 4-query half's union
    (C_4), the dense G = 8 tile each 8-query union; None for the dense G = 4 tile (merged
    pairs of unions: not counted here)."""
    mode = _lib.REGROUP_MODES[info["regroup"]]
    if info["tile"] == "dense":
        return None if info.get("g") == 4 else union_visits(t, mode, call_window(info), 8, P)
    return union_visits(t, mode, call_window(info), 4, P)


def call_window(info):
    """The regroup window the call runs (check_gpu_support: the plan's pick under "auto";
    0, the identity order's runs of 8 per request, when it keeps identity order)."""
    return int(info.get("regroup_window", 128))


def build(path, device, copies=1, table_pages=0):
    """The capture's tensors on `device`; table_pages > 0 widens the page table to that many
    columns (the extra ones name page 0 and lie past every kv_len: nothing reads them), as an
    engine's table sized for longer contexts: the time guard and the regroup see its width."""
    t, meta = pageweaver.load_capture(path, device="cpu")
    P = int(meta.get("page_size", "128"))
    topk = t["topk_ids"].to(torch.int32)
    hkv, n, _ = topk.shape
    cu, kv, prefix = t["cu_seqlens_q"], t["kv_lens"], t["prefix_lens"]
    r = kv.numel()
    max_pages = max(1, -(-int(kv.max()) // P))
    table = t.get("page_table")
    if table is None:
        table = torch.arange(r * max_pages, dtype=torch.int32).view(r, max_pages)
    pages = int(table.max()) + 1
    if table_pages > table.shape[1]:
        table = torch.cat([table.to(torch.int32),
                           torch.zeros((r, table_pages - table.shape[1]), dtype=torch.int32)], dim=1)
    elif table_pages:
        raise SystemExit(f"--table-pages {table_pages}: the capture's table already has {table.shape[1]} columns")
    gen = torch.Generator().manual_seed(0)
    q16 = torch.randn((n, hkv * 16, D), generator=gen).to(torch.bfloat16)
    more_q = [torch.randn((n, hkv * 16, D), generator=torch.Generator().manual_seed(c)).to(torch.bfloat16)
              for c in range(1, copies)]  # copy 0 is the single-copy run's Q, bit for bit
    kv_cache = (torch.randn((pages, hkv, P, 2 * D), generator=gen) * 64).to(torch.float8_e4m3fn)
    kc = kv_cache[..., :D].permute(0, 2, 1, 3).reshape(pages * P, hkv, D).contiguous()
    vc = kv_cache[..., D:].permute(0, 2, 1, 3).reshape(pages * P, hkv, D).contiguous()
    ks = torch.exp2(torch.rand((hkv, pages * P), generator=gen) * 2 - 1)
    vs = torch.exp2(torch.rand((hkv, pages * P), generator=gen) * 6 - 3)
    keys = (torch.randn((hkv * 16, D), generator=gen) * 0.5).to(torch.bfloat16)
    pairs = visible_pairs(topk, cu, kv, prefix, P)
    dev = lambda x: x.to(device)  # noqa: E731
    rest = [dev(x) for x in (topk, table.to(torch.int32), cu, kv, prefix)]
    return dict(q16=[dev(x) for x in [q16] + more_q], kv_cache=dev(kv_cache), kc=dev(kc), vc=dev(vc), ks=dev(ks), vs=dev(vs),
                keys=dev(keys), rest=rest, pairs=pairs, n=n, hkv=hkv, capture=t, steps={}, modes={}, P=P,
                cpu=dict(q=q16, kc=kc, vc=vc, topk=topk, table=table, cu=cu, kv=kv, prefix=prefix))


NRMS_ARMS = ("G16", "G8", "G4", "G16lean", "G16stacked", "G8dense", "G8stacked", "G4dense", "G4stacked", "G16greedy", "G8greedy", "G4greedy", "G16id", "G8id", "G4id",
             "G16greedy64", "G8greedy64", "G4greedy64", "G16vt", "G8vt", "G4vt", "G16novt", "G8novt", "G4novt", "G16fb", "G8fb", "G4fb")  # no scales, sinks or other layouts


def exact_rows(b, g, rows):
    """FP64 attention (docs/semantics.md §1: each row's valid distinct pages, its visible
    tokens) of query rows `rows` at G = g over the dequantised caches (scales 1/64, the
    arms' call), as [len(rows), Hkv * g, D] float64."""
    c, P, hkv = b["cpu"], b["P"], b["hkv"]
    cu, kv, prefix = c["cu"].tolist(), c["kv"].tolist(), c["prefix"].tolist()
    out = torch.zeros((len(rows), hkv * g, D), dtype=torch.float64)
    for j, i in enumerate(rows):
        r = max(k for k in range(len(kv)) if cu[k] <= i)
        last = min(prefix[r] + (i - cu[r]), kv[r] - 1)
        for h in range(hkv):
            ids = sorted({int(x) for x in c["topk"][h, i].tolist() if 0 <= x <= last // P})
            slots = [int(c["table"][r, p]) * P + t for p in ids for t in range(P) if p * P + t <= last]
            if not slots:
                continue
            idx = torch.tensor(slots)
            k = c["kc"][idx, h].to(torch.float64) / 64
            v = c["vc"][idx, h].to(torch.float64) / 64
            q = c["q"][i].view(hkv, 16, D)[h, :g].to(torch.float64)
            s = (q @ k.T) / D ** 0.5
            out[j, h * g:(h + 1) * g] = torch.softmax(s, dim=-1) @ v
    return out


def arm_call(arm, b, prec, outs, copy=0):
    """(callable running the arm on Q / O copy `copy`, G)."""
    g = 8 if arm.startswith("G8") else 4 if arm.startswith("G4") else 16  # G16*, scales, interleave, sinkkeys: 16
    hkv = b["hkv"]
    q = b["q16"][copy].view(b["n"], hkv, 16, D)[:, :, :g].reshape(b["n"], hkv * g, D).contiguous()
    out = outs.setdefault((g, copy), torch.empty_like(q))
    k, v, kw = b["kc"], b["vc"], {}
    if "scales" in arm:
        kw = dict(k_token_scales=b["ks"], v_token_scales=b["vs"])
    elif arm == "interleave":
        k, v = b["kv_cache"][..., :D], b["kv_cache"][..., D:]
    elif arm == "sinkkeys":
        kw = dict(sink_keys=b["keys"])
    elif arm.endswith("greedy") or arm.endswith("greedy64"):
        kw = dict(regroup="guarded")
    elif arm.endswith("id"):
        kw = dict(regroup="identity")
    # The graph captures q's address: the closure is the only owner of a G < 16 copy, and
    # graphs[arm] keeps the closure (a dropped closure freed q, torch.cuda.graph's
    # empty_cache returned the block, and the next replay read unmapped memory).
    call = lambda: pageweaver.sparse_prefill(q, k, v, *b["rest"], k_scale=1 / 64, v_scale=1 / 64,  # noqa: E731
                                             out=out, precision=prec, page_size=b["P"], **kw)
    window = 64 if arm.endswith("greedy64") else None
    if (arm, prec) not in b["steps"]:  # the executed work of the default plan's path (not the vt / novt arms')
        _op._plan_window = window
        try:
            info = pageweaver.check_gpu_support(q, k, v, *b["rest"], precision=prec, page_size=b["P"], **kw)
        finally:
            _op._plan_window = None
        info["g"] = g
        # (FP8X2: the flags fix the tile only where the device would pick it per call:
        # fp8x2_tile set; FP8: PW_PLAN_FP8X2_STACKED puts every call on the pre-pass at
        # P = 128 on it, and per-token scales at G = 8 / 4 by default)
        if prec == "fp8x2":
            stacked = info["vt_prepass"] and (
                (arm in ("G8stacked", "G4stacked") and info["tile"] == "dense") or
                (arm in ("scalesstacked", "G16stacked") and info.get("fp8x2_tile") is not None) or
                (arm in ("scales", "G8scales", "G4scales") and info.get("fp8x2_tile") == "stacked"))
        else:
            stacked = info["vt_prepass"] and b["P"] == 128 and (
                bool(arm_flags(arm) & PW_PLAN_FP8X2_STACKED) or
                (arm in ("scales", "G8scales", "G4scales") and info.get("fp8x2_tile") == "stacked"))
        if stacked:
            # the 2-slot (G = 16) / 4-slot (G = 8) / 8-slot (G = 4) tile: one 64-row product
            # each way per step of a pair's (a half's, a group's) union, which the stacked
            # tile's regroup minimises (pairs / C_4 / the 8-query unions; in FP8X2 printed as
            # half the FP8X2 factor; in FP8 the second term's rows are 0 but executed)
            visits = union_visits(b["capture"], _lib.REGROUP_MODES[info["regroup"]],
                                  call_window(info), {16: 2, 8: 4, 4: 8}[g], b["P"])
            b["steps"][(arm, prec)] = visits / 2 if prec == "fp8x2" else visits
        elif arm.endswith(("vt", "fb")) or (arm in ("G8", "G4", "scales") and info.get("fp8x2_tile") == "per_call"):
            b["steps"][(arm, prec)] = None  # not the default tile's, or picked per call on the device
        else:
            b["steps"][(arm, prec)] = executed_steps(b["capture"], info, b["P"])
        b["modes"][(arm, prec)] = info["regroup"] + (f" W{call_window(info)}" if info["regroup"] != "identity" else "")
    flags = arm_flags(arm)
    vt_max_pages = 1 if arm.endswith("fb") else 0  # one tile: the fallback launch's cost
    if not flags and window is None:
        return call, g

    def fn():  # the plan is made (and cached under these flags / this window) at the first call
        _op._plan_flags, _op._plan_window, _op._plan_vt_max_pages = flags, window, vt_max_pages
        try:
            call()
        finally:
            _op._plan_flags, _op._plan_window, _op._plan_vt_max_pages = 0, None, 0
    return fn, g


def graph_of(fn):
    """(graph, fn): the caller keeps both, fn owning the tensors the graph reads."""
    fn()  # warm-up: the plan, the kernels' attributes
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph, fn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--copies", type=int, default=1, help="Q / O copies per arm, replayed in turn")
    ap.add_argument("--arms", default=",".join(DEFAULT_ARMS), help="comma-separated, of " + ",".join(ARMS))
    ap.add_argument("--flush-mb", type=int, default=0,
                    help="before each timed replay, write this many MiB (untimed) so that the call starts with a "
                         "cold L2, as a serving engine's call for one layer after the others' (0: off)")
    ap.add_argument("--back-to-back", action="store_true",
                    help="queue the replays without waiting for each (one synchronisation at the end), as "
                         "bench/flashinfer_peer.py and `pageweaver bench` time; default: wait after each replay")
    ap.add_argument("--nrms-rows", type=int, default=0,
                    help="also print each plain arm's NRMS vs FP64 exact on this many random rows (copy 0)")
    ap.add_argument("--table-pages", type=int, default=0,
                    help="widen each capture's page table to this many columns (e.g. 3000: past W128's direct "
                         "regroup bound, 2,048, within W64's, 4,096), as an engine's table sized for longer contexts")
    ap.add_argument("--json", metavar="PATH",
                    help="also write every timed row as JSON (bench/fit_time_guard.py --wide reads it)")
    a = ap.parse_args()
    if a.copies < 1:
        ap.error("--copies must be >= 1")
    arms = [x for x in a.arms.split(",") if x]
    for x in arms:
        if x not in ARMS:
            ap.error(f"unknown arm {x!r} (arms: {', '.join(ARMS)})")
    print(f"pageweaver {pageweaver.__version__}, {torch.cuda.get_device_name()}, "
          f"{a.replays} interleaved graph replays per arm, {a.copies} Q / O copies (median / p90, us)"
          + (f", L2 flushed ({a.flush_mb} MiB written) before each replay" if a.flush_mb > 0 else "")
          + (", back to back" if a.back_to_back else ""))
    records = []  # --json: one per (file, precision, arm)
    for path in a.files:
        b = build(path, torch.device("cuda"), a.copies, a.table_pages)
        name = path.rsplit("/", 1)[-1] + (f" table {a.table_pages}" if a.table_pages else "")
        for prec in ("fp8", "fp8x2"):
            outs, graphs, gs = {}, {}, {}
            for arm in arms:
                graphs[arm] = []
                for copy in range(a.copies):
                    fn, gs[arm] = arm_call(arm, b, prec, outs, copy)
                    graphs[arm].append(graph_of(fn))
            times = {k: [] for k in graphs}
            flush = torch.empty(a.flush_mb << 20, dtype=torch.uint8, device="cuda") if a.flush_mb > 0 else None
            pending = []  # --back-to-back: (arm, start, end) read after the last replay
            for i in range(a.warmup + a.replays):
                for k, copies in graphs.items():
                    graph, _ = copies[i % len(copies)]
                    if flush is not None:
                        flush.fill_(i & 0xFF)  # stream-ordered before start: not timed
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()
                    end.record()
                    if a.back_to_back:
                        if i >= a.warmup:
                            pending.append((k, start, end))
                        continue
                    end.synchronize()
                    if i >= a.warmup:
                        times[k].append(start.elapsed_time(end) * 1e3)
            torch.cuda.synchronize()
            for k, start, end in pending:
                times[k].append(start.elapsed_time(end) * 1e3)
            base = statistics.median(times["G16"]) if "G16" in times else None
            for arm in arms:
                x = sorted(times[arm])
                med = statistics.median(x)
                useful_flop = 4.0 * D * b["pairs"] * gs[arm]
                useful = useful_flop / (med * 1e-6) / 1e12
                ratio = f"  x{med / base:.3f} of G16" if base else ""
                steps = b["steps"].get((arm, prec))
                executed = ""
                if steps is not None:  # FP8X2: QK and PV twice (two FP8 terms, or PV once in f16 at half rate)
                    # A step is 128 columns whatever P: a 64-token page runs one with 64 masked.
                    flop = steps * 64.0 * 128 * D * 4 * (2 if prec == "fp8x2" else 1)
                    executed = (f"  executed {flop / (med * 1e-6) / 1e12:6.1f} TFLOP/s "
                                f"(x{flop / useful_flop:.2f} useful)")
                records.append(dict(file=path, num_tokens=b["n"], num_kv_heads=b["hkv"],
                                    topk=int(b["rest"][0].shape[2]), page_size=b["P"], q_heads_per_kv=gs[arm],
                                    table_pages=int(b["rest"][1].shape[1]),
                                    precision=prec, arm=arm, median_us=med, p90_us=x[int(0.9 * len(x))],
                                    regroup=str(b["modes"].get((arm, prec)))))
                print(f"{name} N={b['n']} Hkv={b['hkv']} {prec:5s} {arm:10s}: median {med:8.1f}  "
                      f"p90 {x[int(0.9 * len(x))]:8.1f}  useful {useful:6.1f} TFLOP/s{ratio}{executed}"
                      f"  [regroup {b['modes'].get((arm, prec))}]")
            if a.nrms_rows > 0:  # each arm's copy-0 graph once more, its output against FP64 exact
                rows = sorted(torch.randperm(b["n"], generator=torch.Generator().manual_seed(7))[:a.nrms_rows].tolist())
                ref = {}
                for arm in arms:
                    if arm not in NRMS_ARMS:
                        continue
                    g = gs[arm]
                    if g not in ref:
                        ref[g] = exact_rows(b, g, rows)
                    graphs[arm][0][0].replay()
                    torch.cuda.synchronize()
                    o = outs[(g, 0)][rows].cpu().to(torch.float64)
                    err = float(((o - ref[g]) ** 2).sum() / (ref[g] ** 2).sum()) ** 0.5
                    print(f"{name} {prec:5s} {arm:10s}: NRMS vs FP64 exact {100 * err:.4f}% ({len(rows)} rows)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"tool": "bench/shapes.py", "device": torch.cuda.get_device_name(), "replays": a.replays,
                       "copies": a.copies, "back_to_back": a.back_to_back, "rows": records}, fh, indent=1)


if __name__ == "__main__":
    main()
