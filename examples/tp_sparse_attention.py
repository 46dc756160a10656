#!/usr/bin/env python3
"""Tensor-parallel sparse prefill attention: a MiniMax-style layer sharded by KV heads.

The layer: 64 Q heads, 4 KV heads (16 Q heads per KV head), head dim 128, each query row
and KV head attends to the Top-16 of its visible 128-token pages. The batch is one packed
chunked-prefill step of 3 requests, each with a prefix already in the paged FP8 caches.

Tensor parallelism (one process per rank, launched by torchrun): rank r of W owns the KV
heads [r * 4/W, (r + 1) * 4/W) and their Q heads (KV head h serves Q heads 16h .. 16h+15,
so a rank's Q heads are one contiguous range too). Each rank holds only its heads' slices
of q [N, 64/W, 128], k_cache / v_cache [slots, 4/W, 128] and topk_idx [4/W, N, 16]; the page
table and request lengths are shared by all heads, every rank holds all of them. It calls
pageweaver.sparse_prefill on its heads, then all_gather assembles the full output
[N, 64, 128], which rank 0 compares BITWISE with a single-process call over all 4 KV heads
(the library computes each KV head independently: the split cannot change a bit), and the
time per rank against the single-process time (scaling efficiency) is printed.

Slices are copies by default (`--slices copy`): in a tensor-parallel deployment each rank's
KV cache is allocated with its own heads only (that is where the memory saving is) and its
q comes out of its own column-parallel QKV projection, so the full tensors never exist on a
rank's device; the example builds the full inputs on the host (identical on every rank, from
--seed) only to have the single-process run to compare with. `--slices view` passes strided
views of the full tensors instead (the op takes a row stride for q and a slot stride for the
caches; the Top-K slice along its first dimension stays contiguous): same bits, no copy.

Backends: NCCL on CUDA (the rank's device is cuda:LOCAL_RANK, sm_90 needed), gloo on the
CPU (--cpu, or no sm_90 GPU), where sparse_prefill runs the FP64 reference emulating the
GPU's FP8 arithmetic: the default CPU problem is small (N = 48 rows) so a run takes a few
seconds. NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1
and NVSHMEM_DISABLE_NVLS=1 are set unless the environment already sets them, and nothing
here allocates multicast memory (cuMulticastCreate).

Run (the world size must divide the 4 KV heads: 1, 2 or 4):
  torchrun --standalone --nproc-per-node 2 examples/tp_sparse_attention.py --cpu
  torchrun --standalone --nproc-per-node 2 examples/tp_sparse_attention.py      (2 GPUs)
  python examples/tp_sparse_attention.py      (no launcher: one process, world size 1)
Sizes: --prefix-lens 16384,4096,0 --chunk-lens 4096,2048,2048 (one value per request).
Exit status: 0 when the gathered output equals the single-process output bitwise.
"""
import os

# Before torch / NCCL read them: no NVLink SHARP (NVLS) multicast anywhere.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_name, _value)

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import pageweaver  # noqa: E402

HQ, HKV, D, TOPK, P = 64, 4, 128, 16, pageweaver.PAGE_SIZE
G = HQ // HKV  # Q heads per KV head
SIZES = {  # (prefix lengths, chunk lengths) per request, in tokens
    "cpu": ("2304,512,0", "16,16,16"),     # request 0 sees 19 pages: a real Top-16 choice
    "cuda": ("16384,4096,0", "4096,2048,2048"),
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true",
                    help="gloo backend and the CPU reference path even when a GPU is present")
    ap.add_argument("--seed", type=int, default=0, help="inputs (the same on every rank)")
    ap.add_argument("--prefix-lens", help="tokens already cached per request, comma-separated "
                    f"(default {SIZES['cpu'][0]} on the CPU, {SIZES['cuda'][0]} on GPUs)")
    ap.add_argument("--chunk-lens", help="new tokens (query rows) per request, comma-separated "
                    f"(default {SIZES['cpu'][1]} on the CPU, {SIZES['cuda'][1]} on GPUs)")
    ap.add_argument("--slices", choices=("copy", "view"), default="copy",
                    help="a rank's q / caches / Top-K: own contiguous copies (default) or "
                         "strided views of the full tensors")
    ap.add_argument("--precision", choices=("fp8", "fp8x2"), default=None,
                    help="default: the library's (fp8x2)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls (CPU 0, GPU 3)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (CPU 2, GPU 20)")
    return ap.parse_args()


def lengths(text, what):
    try:
        v = [int(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"--{what}: {text!r} is not a comma-separated list of integers")
    return v


# ---- the batch ------------------------------------------------------------------------
def make_batch(seed, prefix, chunk):
    """The full layer's inputs on the host (CPU tensors), from `seed` alone."""
    gen = torch.Generator().manual_seed(seed)
    r = len(prefix)
    kv = [p + c for p, c in zip(prefix, chunk)]  # the chunk's own K/V is in the cache too
    max_pages = max(-(-x // P) for x in kv)
    num_pages = r * max_pages + 2
    # Each request's pages anywhere in the pool: page_table [R, max_pages] int32.
    table = torch.randperm(num_pages, generator=gen)[: r * max_pages]
    table = table.view(r, max_pages).to(torch.int32)
    cu = [0]
    for c in chunk:
        cu.append(cu[-1] + c)
    n = cu[-1]
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    q = torch.randn(n, HQ, D, generator=gen).to(torch.bfloat16)           # [N, 64, 128] bf16
    # Caches [slots, 4, 128] fp8 e4m3 (slot = page * 128 + offset), per-tensor scale 1/64.
    kc = (torch.randn(num_pages * P, HKV, D, generator=gen) * 64).to(torch.float8_e4m3fn)
    vc = (torch.randn(num_pages * P, HKV, D, generator=gen) * 64).to(torch.float8_e4m3fn)
    # A toy selector: per KV head and row, 16 distinct visible pages by random score, always
    # the row's own page and page 0 (a sink), -1 padded when fewer are visible.
    pos = torch.cat([torch.arange(p, p + c) for p, c in zip(prefix, chunk)])  # causal position
    own = (pos // P).view(1, n, 1)
    page = torch.arange(max_pages).view(1, 1, max_pages)
    score = torch.rand(HKV, n, max_pages, generator=gen)
    score = score.masked_fill(page == 0, 2.0).masked_fill(page == own, 3.0)
    score = score.masked_fill(page > own, -1.0)
    k = min(TOPK, max_pages)
    best, ids = score.topk(k, dim=2)
    topk = torch.full((HKV, n, TOPK), -1, dtype=torch.int32)
    topk[:, :, :k] = torch.where(best >= 0, ids, -1).to(torch.int32)
    return dict(q=q, k_cache=kc, v_cache=vc, topk_idx=topk, page_table=table,
                cu_seqlens_q=i32(cu), kv_lens=i32(kv), prefix_lens=i32(prefix),
                num_pages=num_pages)


def shard(batch, lo, hi, device, copy):
    """The call's tensors for KV heads [lo, hi) on `device`: contiguous copies of the heads'
    slices, or views of the full tensors moved to `device` whole."""
    def part(t, index):
        if copy:
            return t[index].contiguous().to(device)
        return t.to(device)[index]
    heads = slice(lo, hi)
    return dict(q=part(batch["q"], (slice(None), slice(lo * G, hi * G))),         # [N, Hq', D]
                k_cache=part(batch["k_cache"], (slice(None), heads)),            # [S, Hkv', D]
                v_cache=part(batch["v_cache"], (slice(None), heads)),
                topk_idx=part(batch["topk_idx"], heads),                        # [Hkv', N, 16]
                **{k: batch[k].to(device) for k in ("page_table", "cu_seqlens_q", "kv_lens",
                                                    "prefix_lens")})


def attention(t, precision):
    return pageweaver.sparse_prefill(t["q"], t["k_cache"], t["v_cache"], t["topk_idx"],
                                     t["page_table"], t["cu_seqlens_q"], t["kv_lens"],
                                     t["prefix_lens"], k_scale=1.0 / 64, v_scale=1.0 / 64,
                                     precision=precision)


def seconds_per_call(fn, device, warmup, reps):
    """Median seconds of `reps` calls after `warmup` (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---- main -----------------------------------------------------------------------------
def main():
    opt = parse_args()
    launched = "WORLD_SIZE" in os.environ  # torchrun sets WORLD_SIZE, RANK, LOCAL_RANK
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world < 1 or HKV % world:
        raise SystemExit(f"world size {world}: must divide the layer's {HKV} KV heads "
                         f"(1, 2 or 4 processes, e.g. torchrun --nproc-per-node 2)")
    count = torch.cuda.device_count() if not opt.cpu else 0
    # (this rank's own device: asking device 0 would put a context on it in every rank)
    gpu = count > 0 and torch.cuda.get_device_capability(min(local_rank, count - 1))[0] == 9
    if gpu and world > count:
        raise SystemExit(f"world size {world}: only {count} CUDA devices "
                         f"on this host (one rank per GPU; --cpu for the CPU path)")
    if gpu:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if gpu else "gloo"
    where = device.type
    prefix = lengths(opt.prefix_lens or SIZES[where][0], "prefix-lens")
    chunk = lengths(opt.chunk_lens or SIZES[where][1], "chunk-lens")
    if len(prefix) != len(chunk) or min(prefix) < 0 or min(chunk) < 0 or sum(chunk) < 1:
        raise SystemExit(f"--prefix-lens {prefix} / --chunk-lens {chunk}: one non-negative "
                         f"length per request in each, at least one query row")
    warmup = opt.warmup if opt.warmup is not None else (3 if gpu else 0)
    reps = opt.reps if opt.reps is not None else (20 if gpu else 2)
    if warmup < 0 or reps < 1:
        raise SystemExit(f"--warmup {warmup} / --reps {reps}: need warmup >= 0, reps >= 1")

    if launched:
        dist.init_process_group(backend, device_id=device if gpu else None)
    else:  # a plain `python` run: a one-process group, so the same code path runs
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        return run(opt, rank, world, device, backend, prefix, chunk, warmup, reps)
    finally:
        dist.destroy_process_group()


def run(opt, rank, world, device, backend, prefix, chunk, warmup, reps):
    say = print if rank == 0 else (lambda *a, **k: None)
    batch = make_batch(opt.seed, prefix, chunk)
    n = batch["q"].shape[0]
    say(f"pageweaver {pageweaver.__version__}: backend {backend}, "
        f"{'GPUs' if device.type == 'cuda' else 'CPU (the FP64 reference path)'}, "
        f"world size {world}, seed {opt.seed}")
    say(f"layer: {HQ} Q heads, {HKV} KV heads, D {D}, Top-{TOPK} of {P}-token pages; batch: "
        f"{len(prefix)} requests, prefix {'/'.join(map(str, prefix))}, chunk "
        f"{'/'.join(map(str, chunk))} tokens, N = {n} rows, {batch['num_pages']} cache pages; "
        f"rank slices: {'copies' if opt.slices == 'copy' else 'views'}", flush=True)

    # Single process, all 4 KV heads on rank 0's device (the others wait, so it runs alone).
    single_s, full = None, None
    if rank == 0:
        whole = shard(batch, 0, HKV, device, copy=True)
        single_s = seconds_per_call(lambda: attention(whole, opt.precision), device, warmup, reps)
        full = attention(whole, opt.precision)
        del whole
    dist.barrier()

    # Tensor parallel: this rank's KV heads [lo, hi) and their Q heads.
    per = HKV // world
    lo, hi = rank * per, (rank + 1) * per
    mine = shard(batch, lo, hi, device, copy=opt.slices == "copy")
    del batch
    dist.barrier()
    rank_s = seconds_per_call(lambda: attention(mine, opt.precision), device, warmup, reps)
    out = attention(mine, opt.precision)                      # [N, 16 * per, D] bf16
    if device.type == "cuda":
        torch.cuda.synchronize(device)

    times = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(times, torch.tensor([rank_s], dtype=torch.float64, device=device))
    times = [float(t) for t in times]
    parts = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(parts, out)
    gathered = torch.cat(parts, dim=1)                        # [N, 64, D] bf16, heads in order

    ok = torch.ones(1, dtype=torch.int32, device=device)
    if rank == 0:
        for r, t in enumerate(times):
            kv = f"KV head {r}" if per == 1 else f"KV heads {r * per}-{(r + 1) * per - 1}"
            say(f"rank {r}: {kv} (Q heads {r * per * G}-{(r + 1) * per * G - 1}): "
                f"{t * 1e3:.3f} ms per call (median of {reps})")
        slowest = max(times)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        say(f"single process (all {HKV} KV heads, one {device.type} device): "
            f"{single_s * 1e3:.3f} ms per call (median of {reps})")
        say(f"scaling: speed-up {single_s / slowest:.2f}x on {world} rank(s), efficiency "
            f"{100 * single_s / (world * slowest):.1f}% (single / (ranks x slowest rank))"
            + (f"; {world} ranks share {cores} CPU cores" if device.type == "cpu" and
               world > cores else ""))
        finite = bool(torch.isfinite(gathered.float()).all())
        differ = int((gathered.view(torch.int16) != full.view(torch.int16)).sum())
        shape = "x".join(map(str, gathered.shape))
        if differ == 0 and finite:
            say(f"bitwise: the gathered output [{shape}] bf16 of {world} rank(s) equals the "
                f"single-process output")
        else:
            say(f"MISMATCH: {differ} of {gathered.numel()} elements of the gathered output "
                f"[{shape}] differ from the single-process output"
                + ("" if finite else "; the output has non-finite values"))
            ok.zero_()
    dist.broadcast(ok, src=0)
    return 0 if int(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
