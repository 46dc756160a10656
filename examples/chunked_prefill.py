#!/usr/bin/env python3
"""Chunked prefill of two packed requests with pageweaver.sparse_prefill.

Two requests of 384 tokens each are prefilled in 3 chunks of 128 tokens per request
(N = 256 query rows per call). Before each chunk the "engine" writes the chunk's K/V into
the paged FP8 caches and a toy selector picks each row's Top-16 pages; then one call
computes the chunk's attention.

On a GPU (sm_90): the shapes are the same for every chunk, so the op's plan is made once
(the package caches plans by shape) and ONE call is captured in a CUDA graph; every chunk
writes its new Q, Top-K ids, request lengths and scales INTO the captured buffers and
replays the graph. Each replay is checked bitwise against an eager call and against the
FP8-emulating CPU reference (same arithmetic; NRMS < 1e-2).
On the CPU (what CI runs): eager calls of the FP64 reference path, checked against the
exact reference (precision="exact": NRMS within the two-term FP8 bound of 1%).

Run: python examples/chunked_prefill.py [--cpu] [--seed N]
"""
import argparse
import sys

import torch

import pageweaver

P, HKV, G, D, TOPK = 128, 1, 16, 128, 16
REQUESTS, CHUNK, CHUNKS = 2, 128, 3


def selector(gen, prefix, chunk, num_rows):
    """Toy Top-K: each row picks up to 16 of its visible pages (-1 padded), always its own."""
    ids = torch.full((HKV, num_rows, TOPK), -1, dtype=torch.int32)
    for n in range(num_rows):
        c = prefix + n  # causal position
        visible = c // P + 1
        pick = torch.randperm(visible, generator=gen)[: TOPK - 1]
        ids[0, n, : len(pick)] = pick.to(torch.int32)
        ids[0, n, TOPK - 1] = c // P
    return ids


def nrms(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="run the CPU reference path")
    ap.add_argument("--seed", type=int, default=0)
    opt = ap.parse_args()
    gpu = not opt.cpu and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
    dev = torch.device("cuda" if gpu else "cpu")
    gen = torch.Generator().manual_seed(opt.seed)
    print(f"pageweaver {pageweaver.__version__} ({pageweaver.library_path}), device {dev}, "
          f"seed {opt.seed}")

    total = CHUNK * CHUNKS
    pages_per_request = total // P
    num_pages = REQUESTS * pages_per_request + 2
    # Each request's pages anywhere in the pool; the engine's page table [R, pages].
    page_table = torch.randperm(num_pages, generator=gen)[: REQUESTS * pages_per_request]
    page_table = page_table.view(REQUESTS, pages_per_request).to(torch.int32)
    # The whole K/V each request will produce, FP8 with per-tensor scales.
    k_scale, v_scale = 1.0 / 64, 1.0 / 64
    k_all = (torch.randn(REQUESTS, total, HKV, D, generator=gen) * 64).to(torch.float8_e4m3fn)
    v_all = (torch.randn(REQUESTS, total, HKV, D, generator=gen) * 64).to(torch.float8_e4m3fn)
    k_cache = torch.zeros(num_pages * P, HKV, D, dtype=torch.uint8, device=dev).view(torch.float8_e4m3fn)
    v_cache = torch.zeros(num_pages * P, HKV, D, dtype=torch.uint8, device=dev).view(torch.float8_e4m3fn)

    n = REQUESTS * CHUNK
    cu = torch.arange(0, n + 1, CHUNK, dtype=torch.int32)
    # Buffers one call reads; on the GPU a captured graph reads them at these addresses.
    buf = dict(q=torch.zeros(n, HKV * G, D, dtype=torch.bfloat16, device=dev),
               topk=torch.zeros(HKV, n, TOPK, dtype=torch.int32, device=dev),
               page_table=page_table.to(dev), cu=cu.to(dev),
               kv_lens=torch.zeros(REQUESTS, dtype=torch.int32, device=dev),
               prefix=torch.zeros(REQUESTS, dtype=torch.int32, device=dev),
               k_scale=torch.tensor([k_scale], device=dev), v_scale=torch.tensor([v_scale], device=dev),
               out=torch.zeros(n, HKV * G, D, dtype=torch.bfloat16, device=dev))

    def call(out):
        return pageweaver.sparse_prefill(buf["q"], k_cache, v_cache, buf["topk"], buf["page_table"],
                                         buf["cu"], buf["kv_lens"], buf["prefix"],
                                         k_scale=buf["k_scale"], v_scale=buf["v_scale"], out=out,
                                         precision="fp8x2")

    graph = None
    worst = 0.0
    for step in range(CHUNKS):
        prefix = step * CHUNK
        # The engine writes the chunk's K/V into the cache (its own tokens are visible).
        t = torch.arange(prefix, prefix + CHUNK)
        for r in range(REQUESTS):
            slots = (page_table[r, t // P].long() * P + t % P).to(dev)
            # (through uint8 views: indexed writes of float8 are not in every torch build)
            k_cache.view(torch.uint8)[slots] = k_all[r, prefix:prefix + CHUNK].view(torch.uint8).to(dev)
            v_cache.view(torch.uint8)[slots] = v_all[r, prefix:prefix + CHUNK].view(torch.uint8).to(dev)
        q = torch.randn(n, HKV * G, D, generator=gen).to(torch.bfloat16)
        topk = torch.cat([selector(gen, prefix, CHUNK, CHUNK) for _ in range(REQUESTS)], dim=1)
        # New contents, same buffers.
        buf["q"].copy_(q)
        buf["topk"].copy_(topk)
        buf["prefix"].fill_(prefix)
        buf["kv_lens"].fill_(prefix + CHUNK)
        if gpu:
            if graph is None:  # first chunk: warm up (plan, scale tensors), then capture once
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    call(buf["out"])
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    call(buf["out"])
            graph.replay()
            eager = call(torch.empty_like(buf["out"]))
            torch.cuda.synchronize()
            if not torch.equal(eager.view(torch.int16), buf["out"].view(torch.int16)):
                print(f"chunk {step}: graph replay differs from the eager call")
                return 1
            got = buf["out"].cpu()
            want = pageweaver.sparse_prefill(q, k_cache.cpu(), v_cache.cpu(), topk, page_table, cu,
                                             buf["kv_lens"].cpu(), buf["prefix"].cpu(),
                                             k_scale=k_scale, v_scale=v_scale, precision="fp8x2")
            bound, what = 1e-2, "FP8-emulating reference"
        else:
            got = call(buf["out"])
            want = pageweaver.sparse_prefill(buf["q"], k_cache, v_cache, buf["topk"],
                                             buf["page_table"], buf["cu"], buf["kv_lens"],
                                             buf["prefix"], k_scale=k_scale, v_scale=v_scale,
                                             precision="exact",
                                             out=torch.empty(n, HKV * G, D, dtype=torch.float64))
            bound, what = 1e-2, "exact reference"
        err = nrms(got, want)
        worst = max(worst, err)
        print(f"chunk {step}: rows {n} (2 requests x {CHUNK}), prefix {prefix}, KV {prefix + CHUNK} "
              f"tokens: NRMS vs the {what} {err:.2e}" + (" (graph replay)" if gpu else ""))
        if not err < bound:
            print(f"FAILED: NRMS {err:.3e} >= {bound}")
            return 1
    print(f"ok: {CHUNKS} chunks, worst NRMS {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
