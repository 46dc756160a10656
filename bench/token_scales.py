#!/usr/bin/env python3
"""Cost of per-token K / V scales (k_token_scales= / v_token_scales=) in the full call.

For each capture (selections only, e.g. .data/workloads/sel_A_hot.safetensors; Q ~ N(0,1)
bfloat16, caches N(0,1) * 64 as E4M3 with per-tensor scale 1/64, identity page table, as
`pageweaver bench` builds them): four CUDA graphs of one pageweaver.sparse_prefill call
each (precision fp8 and fp8x2, without and with per-token scales [Hkv, slots], K scales
2^U(-1,1), V scales 2^U(-3,3)), replayed interleaved --replays times after --warmup; the
median and p90 in microseconds and the ratio with / without. The library's default plan
(Union4, regroup auto, the V^T pre-pass rule).

Run: python bench/token_scales.py FILE.safetensors... [--replays 50] [--warmup 5]
(PAGEWEAVER_LIBRARY or an installed package, as for the tests; needs an sm_90 GPU).
"""
import argparse
import statistics

import torch

import pageweaver

P = 128


def build(path, device):
    t, meta = pageweaver.load_capture(path, device="cpu")
    topk = t["topk_ids"].to(torch.int32)
    hkv, n, _ = topk.shape
    g = int(meta.get("q_heads_per_kv", 16))
    cu, kv, prefix = t["cu_seqlens_q"], t["kv_lens"], t["prefix_lens"]
    r = kv.numel()
    max_pages = max(1, -(-int(kv.max()) // P))
    table = t.get("page_table")
    if table is None:
        table = (torch.arange(r * max_pages, dtype=torch.int32).view(r, max_pages))
    pages = int(table.max()) + 1
    gen = torch.Generator().manual_seed(0)
    q = torch.randn((n, hkv * g, 128), generator=gen).to(torch.bfloat16)
    kc = (torch.randn((pages * P, hkv, 128), generator=gen) * 64).to(torch.float8_e4m3fn)
    vc = (torch.randn((pages * P, hkv, 128), generator=gen) * 64).to(torch.float8_e4m3fn)
    ks = torch.exp2(torch.rand((hkv, pages * P), generator=gen) * 2 - 1)
    vs = torch.exp2(torch.rand((hkv, pages * P), generator=gen) * 6 - 3)
    dev = lambda x: x.to(device)  # noqa: E731
    args = [dev(x) for x in (q, kc, vc, topk, table.to(torch.int32), cu, kv, prefix)]
    return args, dev(ks), dev(vs), n, hkv


def graph_of(fn):
    fn()  # warm-up: the plan, the kernels' attributes
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    device = torch.device("cuda")
    print(f"pageweaver {pageweaver.__version__}, {torch.cuda.get_device_name()}, "
          f"{a.replays} interleaved graph replays per arm (median / p90, us)")
    for path in a.files:
        args, ks, vs, n, hkv = build(path, device)
        out = torch.empty_like(args[0])
        arms = {}
        for prec in ("fp8", "fp8x2"):
            for ts in (False, True):
                kw = dict(k_token_scales=ks, v_token_scales=vs) if ts else {}
                arms[prec, ts] = graph_of(lambda kw=kw, prec=prec: pageweaver.sparse_prefill(
                    *args, k_scale=1 / 64, v_scale=1 / 64, out=out, precision=prec, **kw))
        times = {k: [] for k in arms}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(a.warmup + a.replays):
            for k, graph in arms.items():
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                if i >= a.warmup:
                    times[k].append(start.elapsed_time(end) * 1e3)
        name = path.rsplit("/", 1)[-1]
        for prec in ("fp8", "fp8x2"):
            med = {}
            for ts in (False, True):
                x = sorted(times[prec, ts])
                med[ts] = statistics.median(x)
                print(f"{name} N={n} Hkv={hkv} {prec:5s} {'token scales' if ts else 'per-tensor  '}: "
                      f"median {med[ts]:8.1f}  p90 {x[int(0.9 * len(x))]:8.1f}")
            print(f"{name} {prec}: with / without per-token scales {med[True] / med[False]:.3f}")


if __name__ == "__main__":
    main()
