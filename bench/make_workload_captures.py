#!/usr/bin/env python3
"""Writes the project's standard synthetic workloads (bench/workloads.py: A/B/C x
hot/lowoverlap, one KV head, page 128, Top-16) as PageWeaver capture files
(docs/capture-format.md), so that the C benchmarks and the GPU tests read them like real
captures.  Usage: make_workload_captures.py OUTDIR [--kv-heads H] [--heads-per-kv G]
[--topk K] [--page-size P] [--p-hot X] [--only A_hot,B_hot]

With --kv-heads H > 1, KV head h gets the workload generated with seed + 1000*h (so the
heads differ but keep the statistics). --heads-per-kv G (default 16) only changes the
metadata's q_heads_per_kv (the selections are per KV head); files get a _g8 / _g4 suffix.
--topk K / --page-size P (defaults 16 / 128): issue 16's other shapes (workloads.generate's
topk / page); files get a _k32 / _p64 suffix. --p-hot X (default workloads.P_HOT, 0.7): the hot
workloads' probability of drawing a page from the shared hot set, i.e. how many pages
consecutive queries share (A-hot at 0.85: the stacked tile's count ratio 0.726 instead of
0.674, for refitting the per-call tile rule); files get a _ph85 suffix."""
import argparse
import os
import sys

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402  (bench/workloads.py, next to this file)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("outdir")
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--heads-per-kv", type=int, default=16)
    ap.add_argument("--topk", type=int, default=workloads.TOPK)
    ap.add_argument("--page-size", type=int, default=workloads.PAGE)
    ap.add_argument("--p-hot", type=float, default=workloads.P_HOT)
    ap.add_argument("--only", default="", help="comma list like A_hot,B_low")
    a = ap.parse_args()
    if not 0.0 <= a.p_hot <= 1.0:
        ap.error(f"--p-hot {a.p_hot}: a probability, 0..1")
    default_p_hot = workloads.P_HOT
    workloads.P_HOT = a.p_hot
    os.makedirs(a.outdir, exist_ok=True)
    only = set(x for x in a.only.split(",") if x)
    for shape, kind in workloads.all_workloads():
        tag = f"{shape}_{'hot' if kind == 'hot' else 'low'}"
        if only and tag not in only:
            continue
        prefix, nq = workloads.SHAPES[shape]
        seed = workloads.workload_seed(shape, kind)
        ids = np.stack([workloads.generate(shape, kind, seed + 1000 * h, topk=a.topk, page=a.page_size)
                        for h in range(a.kv_heads)]).astype(np.int32)
        tensors = {
            "topk_ids": ids,
            "cu_seqlens_q": np.array([0, nq], dtype=np.int32),
            "prefix_lens": np.array([prefix], dtype=np.int32),
            "kv_lens": np.array([prefix + nq], dtype=np.int32),
        }
        meta = {
            "format": "pageweaver.capture", "format_version": "1",
            "page_size": str(a.page_size), "q_heads_per_kv": str(a.heads_per_kv), "head_dim": "128",
            "generator": "bench/workloads.py",
            "workload": f"{shape}-{kind}", "seed": str(seed),
            "kv_heads": str(a.kv_heads), "chunk": f"prefix {prefix}, {nq} queries",
        }
        if kind == "hot" and a.p_hot != default_p_hot:
            meta["p_hot"] = repr(a.p_hot)
        suffix = "" if a.kv_heads == 1 else f"_h{a.kv_heads}"
        suffix += "" if a.heads_per_kv == 16 else f"_g{a.heads_per_kv}"
        suffix += "" if a.topk == workloads.TOPK else f"_k{a.topk}"
        suffix += "" if a.page_size == workloads.PAGE else f"_p{a.page_size}"
        suffix += "" if kind != "hot" or a.p_hot == default_p_hot else f"_ph{round(100 * a.p_hot)}"
        out = os.path.join(a.outdir, f"sel_{tag}{suffix}.safetensors")
        tmp = out + ".tmp"
        save_file(tensors, tmp, metadata=meta)
        os.chmod(tmp, 0o644)  # safetensors writes 0600
        os.replace(tmp, out)
        print(out, ids.shape)


if __name__ == "__main__":
    main()
