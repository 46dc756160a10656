#!/usr/bin/env python3
"""Writes the project's standard synthetic workloads (shared/workloads/gen_selections.py:
A/B/C x hot/lowoverlap, one KV head, page 128, Top-16) as PageWeaver capture files
(docs/capture-format.md), so the C benchmarks and the GPU tests read them like real
captures.  Usage: make_workload_captures.py SHARED_WORKLOADS_DIR OUTDIR [--kv-heads H]

With --kv-heads H > 1, KV head h gets the workload generated with seed + 1000*h (so the
heads differ but keep the statistics)."""
import argparse
import importlib.util
import os
import sys

import numpy as np
from safetensors.numpy import save_file


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("workloads_dir")
    ap.add_argument("outdir")
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--only", default="", help="comma list like A_hot,B_hot")
    a = ap.parse_args()
    path = os.path.join(a.workloads_dir, "gen_selections.py")
    if not os.path.exists(path):
        sys.exit(f"make_workload_captures: {path} not found")
    spec = importlib.util.spec_from_file_location("gen_selections", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    os.makedirs(a.outdir, exist_ok=True)
    only = set(x for x in a.only.split(",") if x)
    for ci, (name, (prefix, nq)) in enumerate(gen.CONFIGS.items()):
        for ki, kind in enumerate(gen.KINDS):
            tag = f"{name}_{'hot' if kind == 'hot' else 'low'}"
            if only and tag not in only:
                continue
            seed = 1234 + 10 * ci + ki  # the seeds gen_selections.py's main uses
            heads = [gen.gen_selections(prefix, nq, kind, seed=seed + 1000 * h)
                     for h in range(a.kv_heads)]
            ids = np.stack(heads).astype(np.int32)
            kv = prefix + nq
            tensors = {
                "topk_ids": ids,
                "cu_seqlens_q": np.array([0, nq], dtype=np.int32),
                "prefix_lens": np.array([prefix], dtype=np.int32),
                "kv_lens": np.array([kv], dtype=np.int32),
            }
            meta = {
                "format": "pageweaver.capture", "format_version": "1",
                "page_size": "128", "q_heads_per_kv": "16", "head_dim": "128",
                "generator": "shared/workloads/gen_selections.py",
                "workload": f"{name}-{kind}", "seed": str(seed),
                "kv_heads": str(a.kv_heads), "chunk": f"prefix {prefix}, {nq} queries",
            }
            suffix = "" if a.kv_heads == 1 else f"_h{a.kv_heads}"
            out = os.path.join(a.outdir, f"sel_{tag}{suffix}.safetensors")
            tmp = out + ".tmp"
            save_file(tensors, tmp, metadata=meta)
            os.replace(tmp, out)
            print(out, ids.shape)


if __name__ == "__main__":
    main()
