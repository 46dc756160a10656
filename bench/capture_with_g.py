#!/usr/bin/env python3
"""Copies capture files with another G (metadata q_heads_per_kv): the selections are per KV
head, so a capture's Top-K rows serve any G; the benchmarks generate Q (and FlashInfer's
harness Q/K/V) from the shape. Used for the G = 8 runs of FlashInfer's arm
(bench/flashinfer_peer.py), which reads G from the file; bench/shapes.py cuts G from the
G = 16 file itself.

    python3 bench/capture_with_g.py OUTDIR --heads-per-kv 8 captures/kjv_L15_pre16384_n16384.safetensors ...

Writes OUTDIR/<name>_g<G>.safetensors (tensors unchanged, metadata q_heads_per_kv = G); a
file that holds Q or caches (their head count is G's) is refused."""
import argparse
import os
import sys

from safetensors import safe_open
from safetensors.numpy import load_file, save_file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--heads-per-kv", type=int, required=True, choices=(4, 8, 16))
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for path in a.files:
        tensors = load_file(path)
        if any(k in tensors for k in ("q", "k_cache", "v_cache")):
            sys.exit(f"{path}: holds Q / caches shaped for its own G; only selection captures can be relabelled")
        with safe_open(path, "np") as f:
            meta = dict(f.metadata() or {})
        meta["q_heads_per_kv"] = str(a.heads_per_kv)
        name = os.path.basename(path).removesuffix(".safetensors")
        out = os.path.join(a.outdir, f"{name}_g{a.heads_per_kv}.safetensors")
        save_file(tensors, out, metadata=meta)
        print(out)


if __name__ == "__main__":
    main()
