#!/usr/bin/env python3
"""Host overhead of one eager pageweaver.sparse_prefill call (the Python package).

What is timed (perf_counter around each call, median and p90 of --calls calls after
--warmup, the device synchronised every 32 calls so the launch queue never fills):
  op         pageweaver.sparse_prefill(...) on ready tensors, float scales: everything the
             Python layer does (checks, custom-op dispatch, plan-cache lookup, workspace
             from the caching allocator, ctypes call) plus the library's own enqueue;
  op_tensor  the same with the scales as device tensors;
  c_direct   (GPU) pw_sparse_prefill through ctypes with prepared arguments: the library's
             enqueue alone (regroup + union preparation + attention launches, TMA maps);
  replay     (GPU) torch.cuda.CUDAGraph.replay() of one captured call.
On a machine without an sm_90 GPU it times the CPU path with N = 0 (all the checks and
the dispatch, no attention computed), the Python-side cost alone.

Run: python bench/python_overhead.py [--rows 256] [--calls 2000]   (PAGEWEAVER_LIBRARY /
an installed package as for the tests). Prints one line per figure, in microseconds.
"""
import argparse
import ctypes
import statistics
import time

import torch

import pageweaver
from pageweaver import _lib


def problem(device, rows):
    g = torch.Generator().manual_seed(0)
    pages = 16
    q = torch.randn(rows, 16, 128, generator=g).to(torch.bfloat16)
    k = (torch.randn(pages * 128, 1, 128, generator=g) * 32).to(torch.float8_e4m3fn)
    v = (torch.randn(pages * 128, 1, 128, generator=g) * 32).to(torch.float8_e4m3fn)
    topk = torch.randint(0, pages, (1, rows, 16), generator=g, dtype=torch.int32)
    table = torch.arange(pages, dtype=torch.int32).view(1, pages)
    cu = torch.tensor([0, rows], dtype=torch.int32)
    kv = torch.tensor([pages * 128], dtype=torch.int32)
    prefix = torch.tensor([pages * 128 - rows], dtype=torch.int32)
    return [t.to(device) for t in (q, k, v, topk, table, cu, kv, prefix)]


def timed(fn, calls, warmup, sync):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
        if i % 32 == 31:
            sync()
    sync()
    times.sort()
    return statistics.median(times), times[int(0.9 * len(times))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    opt = ap.parse_args()
    gpu = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
    dev = "cuda" if gpu else "cpu"
    rows = opt.rows if gpu else 0
    args = problem(dev, rows)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    ks = torch.tensor([1 / 32], device=dev)
    vs = torch.tensor([1 / 32], device=dev)
    out = torch.empty_like(args[0])
    print(f"pageweaver {pageweaver.__version__}, torch {torch.__version__}, device "
          f"{torch.cuda.get_device_name() if gpu else 'cpu (N = 0: the Python layer alone)'}, "
          f"N = {rows}, Hkv = 1, 16 pages")
    res = {}
    res["op"] = timed(lambda: pageweaver.sparse_prefill(*args, k_scale=1 / 32, v_scale=1 / 32, out=out),
                      opt.calls, opt.warmup, sync)
    res["op_tensor"] = timed(lambda: pageweaver.sparse_prefill(*args, k_scale=ks, v_scale=vs, out=out),
                             opt.calls, opt.warmup, sync)
    if gpu:
        q, k, v, topk, table, cu, kv, prefix = args
        prob = _lib.new_problem()
        prob.num_tokens, prob.max_pages_per_request, prob.num_cache_pages = rows, 16, 16
        a = _lib.new_args()
        a.q, a.q_stride, a.k_cache, a.v_cache, a.kv_stride = q.data_ptr(), 2048, k.data_ptr(), v.data_ptr(), 128
        a.k_scale, a.v_scale, a.topk_ids = ks.data_ptr(), vs.data_ptr(), topk.data_ptr()
        a.requests.cu_seqlens_q, a.requests.prefix_lens = cu.data_ptr(), prefix.data_ptr()
        a.requests.kv_lens, a.requests.page_table, a.requests.page_table_stride = kv.data_ptr(), table.data_ptr(), 16
        a.o, a.o_stride, a.o_dtype = out.data_ptr(), 2048, _lib.PW_DTYPE_BFLOAT16
        plan = _lib.Plan(prob, _lib.DEFAULT_REGROUP, _lib.DEFAULT_WINDOW, _lib.DEFAULT_KERNEL)
        ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        fn = _lib.lib.pw_sparse_prefill
        ref = ctypes.byref(a)
        res["c_direct"] = timed(lambda: fn(plan.handle, ref, None, ws.data_ptr(), plan.workspace_bytes, stream),
                                opt.calls, opt.warmup, sync)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            pageweaver.sparse_prefill(*args, k_scale=ks, v_scale=vs, out=out)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            pageweaver.sparse_prefill(*args, k_scale=ks, v_scale=vs, out=out)
        res["replay"] = timed(graph.replay, opt.calls, opt.warmup, sync)
    for name, (med, p90) in res.items():
        print(f"{name:10s} median {med:7.1f} us   p90 {p90:7.1f} us")


if __name__ == "__main__":
    main()
