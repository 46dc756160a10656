#!/usr/bin/env python3
"""ceilings.py — measured hardware ceilings of this GPU, in the same run as the kernels.

    python3 bench/ceilings.py [--json OUT] [--reps 30]

The roofline PageWeaver's kernels are judged against, measured rather than taken from the
data sheet (clocks, power and the driver decide what is reachable):

(a) dense FP8 GEMM: torch._scaled_mm, E4M3 x E4M3 -> BF16, M = N = K = 8192, per-tensor
    scales 1.0, row-major A and column-major B (what cuBLASLt wants); with and without
    use_fast_accum (fast accumulation never promotes the FP32 accumulator; PageWeaver's
    kernels promote per page, so the slow-accumulation number is the fair ceiling).
    FLOP = 2 M N K.
(b) dense BF16 GEMM: torch.mm, 8192^3, BF16 out, FP32 accumulation.
(c) L2 -> SM read bandwidth: a Triton kernel that reads a 24 MiB float32 buffer (resident in
    the 50 MiB L2 after the first pass) `--l2-passes` times in one launch, every load
    `.cg` (cached in L2 only, so L1 never serves a repeat) and each pass shifted so that no
    program re-reads its own blocks; every element is read exactly once per pass; the sum
    is checked. A small sweep of block size / programs / warps; the best is the ceiling.
    For comparison: torch.sum over the same buffer, 50 sums captured in one CUDA graph.
    Bytes = passes x 24 MiB (reads only).
(d) HBM copy bandwidth: dst.copy_(src) over 2 GiB buffers (40x the L2); bytes = 2 x 2 GiB
    per copy (read + write).

Every timing: CUDA events around each call (or graph replay), `--warmup` untimed calls
first, median of `--reps` (>= 20), min and p90 kept in the JSON.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

GEMM_N = 8192
L2_BYTES = 24 << 20
HBM_BYTES = 2 << 30


def summary(ms):
    s = sorted(ms)
    return {"median": statistics.median(s), "min": s[0],
            "p90": s[min(len(s) - 1, int(math.ceil(0.9 * len(s))) - 1)], "reps": len(s)}


def time_calls(fn, reps, warmup):
    """CUDA-event time of fn() in ms, per call: warm-up, then reps back-to-back calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return summary([a.elapsed_time(b) for a, b in ev])


def gemm_fp8(args):
    dev = "cuda"
    n = GEMM_N
    g = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(n, n, device=dev, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev, generator=g).to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device=dev, dtype=torch.float32)
    res = {}
    for fast in (False, True):
        def call():
            r = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                 use_fast_accum=fast)
            return r[0] if isinstance(r, tuple) else r
        out = call()
        ref = a[:256].float() @ b[:, :256].float()
        err = float((out[:256, :256].float() - ref).norm() / ref.norm())
        t = time_calls(call, args.reps, args.warmup)
        res["fast_accum" if fast else "default_accum"] = {
            "time_ms": t, "tflops": 2.0 * n ** 3 / (t["median"] * 1e-3) / 1e12, "rel_err": err}
    return res


def gemm_bf16(args):
    dev = "cuda"
    n = GEMM_N
    g = torch.Generator(device=dev).manual_seed(2)
    a = torch.randn(n, n, device=dev, generator=g, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, generator=g, dtype=torch.bfloat16)
    out = torch.mm(a, b)
    ref = a[:256].float() @ b[:, :256].float()
    err = float((out[:256, :256].float() - ref).norm() / ref.norm())
    t = time_calls(lambda: torch.mm(a, b), args.reps, args.warmup)
    return {"time_ms": t, "tflops": 2.0 * n ** 3 / (t["median"] * 1e-3) / 1e12, "rel_err": err}


@triton.jit
def l2_read_kernel(x_ptr, out_ptr, n_blocks, passes, BLOCK: tl.constexpr,
                   BLOCKS_PER_PROG: tl.constexpr):
    """x: [n_blocks * BLOCK] f32; out: [programs] f32, the program's sum over all passes.
    Pass i: program p reads blocks (j * programs + p + 97 i) mod n_blocks for
    j < BLOCKS_PER_PROG (programs * BLOCKS_PER_PROG = n_blocks: a bijection per pass),
    through L2 only (.cg)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(passes):
        for j in tl.static_range(BLOCKS_PER_PROG):
            blk = (j * nprog + pid + i * 97) % n_blocks
            acc += tl.load(x_ptr + blk * BLOCK + offs, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def l2_read(args):
    dev = "cuda"
    numel = L2_BYTES // 4
    x = torch.rand(numel, device=dev, generator=torch.Generator(device=dev).manual_seed(3))
    want = float(x.double().sum())
    passes = args.l2_passes
    configs = [(1024, 4, 4), (1024, 8, 4), (2048, 2, 8), (2048, 4, 8), (4096, 1, 8),
               (4096, 2, 8), (8192, 1, 16)]
    sweep = []
    for block, bpp, warps in configs:
        n_blocks = numel // block
        nprog = n_blocks // bpp
        out = torch.empty(nprog, device=dev, dtype=torch.float32)

        def call():
            l2_read_kernel[(nprog,)](x, out, n_blocks, passes, BLOCK=block, BLOCKS_PER_PROG=bpp,
                                  num_warps=warps)
        call()
        torch.cuda.synchronize()
        got = float(out.double().sum())
        ok = abs(got - passes * want) <= 1e-4 * passes * want
        t = time_calls(call, args.reps, args.warmup)
        sweep.append({"block": block, "blocks_per_program": bpp, "programs": nprog,
                      "num_warps": warps, "time_ms": t, "sum_ok": ok,
                      "gbps": passes * L2_BYTES / (t["median"] * 1e-3) / 1e9})
    good = [s for s in sweep if s["sum_ok"]]
    best = max(good, key=lambda s: s["gbps"]) if good else None

    # torch.sum for comparison: 50 sums in one CUDA graph.
    sums = 50
    acc = torch.empty(sums, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for k in range(sums):
            torch.sum(x, dim=0, out=acc[k])
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for k in range(sums):
            torch.sum(x, dim=0, out=acc[k])
    t = time_calls(graph.replay, args.reps, args.warmup)
    torch_sum = {"sums_per_graph": sums, "time_ms": t,
                 "gbps": sums * L2_BYTES / (t["median"] * 1e-3) / 1e9}
    return {"buffer_bytes": L2_BYTES, "passes": passes, "sweep": sweep,
            "best_gbps": best["gbps"] if best else None, "best": best, "torch_sum": torch_sum,
            "how": "Triton kernel, .cg loads, one launch reads the 24 MiB buffer `passes` times"}


def hbm_copy(args):
    dev = "cuda"
    src = torch.empty(HBM_BYTES // 4, device=dev, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    t = time_calls(lambda: dst.copy_(src), args.reps, args.warmup)
    ok = bool(torch.equal(dst[:: 1 << 20], src[:: 1 << 20]))
    return {"buffer_bytes": HBM_BYTES, "time_ms": t, "copy_ok": ok,
            "gbps_read_plus_write": 2 * HBM_BYTES / (t["median"] * 1e-3) / 1e9,
            "gbps_copied": HBM_BYTES / (t["median"] * 1e-3) / 1e9}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per measurement (>= 20)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--l2-passes", type=int, default=40)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("ceilings: needs a CUDA device")
    args.reps = max(args.reps, 20)
    p = torch.cuda.get_device_properties(0)
    env = {"device": p.name, "sms": p.multi_processor_count,
           "l2_bytes": getattr(p, "L2_cache_size", None), "memory_bytes": p.total_memory,
           "torch": torch.__version__}
    env["triton"] = triton.__version__
    print(f"ceilings: {env}")
    res = {"environment": env}
    for name, fn in (("fp8_gemm", gemm_fp8), ("bf16_gemm", gemm_bf16), ("l2_read", l2_read),
                     ("hbm_copy", hbm_copy)):
        try:
            res[name] = fn(args)
        except Exception as e:  # noqa: BLE001 - report and go on with the other ceilings
            res[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{name}: FAILED {type(e).__name__}: {e}")
    rows = []
    f8 = res.get("fp8_gemm", {})
    for k in ("default_accum", "fast_accum"):
        if k in f8:
            rows.append((f"FP8 GEMM 8192^3 (_scaled_mm, {k})", f"{f8[k]['tflops']:.0f} TFLOP/s",
                         f"{f8[k]['time_ms']['median']:.3f} ms, rel err {f8[k]['rel_err']:.1e}"))
    b = res.get("bf16_gemm", {})
    if "tflops" in b:
        rows.append(("BF16 GEMM 8192^3 (torch.mm)", f"{b['tflops']:.0f} TFLOP/s",
                     f"{b['time_ms']['median']:.3f} ms, rel err {b['rel_err']:.1e}"))
    l2 = res.get("l2_read", {})
    if l2.get("best"):
        bb = l2["best"]
        rows.append(("L2->SM read, 24 MiB resident (Triton .cg)", f"{l2['best_gbps']:.0f} GB/s",
                     f"block {bb['block']} x{bb['blocks_per_program']}, {bb['programs']} programs, "
                     f"{bb['num_warps']} warps"))
    if "torch_sum" in l2:
        rows.append(("L2 read, torch.sum x50 in a graph", f"{l2['torch_sum']['gbps']:.0f} GB/s", ""))
    h = res.get("hbm_copy", {})
    if "gbps_read_plus_write" in h:
        rows.append(("HBM copy 2 GiB (read + write bytes)", f"{h['gbps_read_plus_write']:.0f} GB/s",
                     f"{h['time_ms']['median']:.3f} ms, copy ok {h['copy_ok']}"))
    w = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'ceiling'.ljust(w)}  {'value':>16}  notes")
    for r in rows:
        print(f"{r[0].ljust(w)}  {r[1]:>16}  {r[2]}")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
