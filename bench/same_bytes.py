#!/usr/bin/env python3
"""Whether two builds of the library give the same output bytes on the same full calls.

A kernel change that should not change any result (a refactor, a different wgmma shape, a
register-allocation fix) is checked by running bench/shapes.py's arms with one library,
saving every output, then with the other and comparing bit for bit. One process per
library (the package loads the library named by PAGEWEAVER_LIBRARY once):

    PAGEWEAVER_LIBRARY=old/libpageweaver.so PYTHONPATH=python python3 bench/same_bytes.py \
        save /tmp/old.pt FILE.safetensors... [--arms G16,G8stacked,G4stacked,scales] [--precisions fp8x2]
    PAGEWEAVER_LIBRARY=new/libpageweaver.so PYTHONPATH=python python3 bench/same_bytes.py \
        compare /tmp/old.pt FILE.safetensors... [the same --arms / --precisions]

Inputs: each capture's selections with bench/shapes.py's generated Q / caches / per-token
scales (seeded: the same tensors in both processes), copy 0. Each output buffer is filled
with NaN before the call. `compare` prints, per (file, precision, arm), EQUAL or DIFFERENT
with the count of differing BF16 elements and NaNs, and exits 1 if any differs or an arm is
missing. Needs an sm_90 GPU; the saved file holds every output (~60 MB per G = 16 arm at
A-hot's size).
"""
import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import shapes  # noqa: E402  (bench/shapes.py: the inputs and the arms' calls)


def outputs(files, arms, precisions):
    """{(file name, precision, arm): output as int16 on the CPU}."""
    res = {}
    for path in files:
        b = shapes.build(path, torch.device("cuda"), 1)
        name = path.rsplit("/", 1)[-1]
        for prec in precisions:
            for arm in arms:
                outs = {}
                fn, g = shapes.arm_call(arm, b, prec, outs, 0)
                outs[(g, 0)].fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                res[(name, prec, arm)] = outs[(g, 0)].view(torch.int16).cpu().clone()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("save", "compare"))
    ap.add_argument("saved", help="the file `save` writes and `compare` reads")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--arms", default="G16,G8stacked,G4stacked,scales,G8scales,G4scales")
    ap.add_argument("--precisions", default="fp8x2", help="comma-separated: fp8, fp8x2")
    a = ap.parse_args()
    arms = [x for x in a.arms.split(",") if x]
    for x in arms:
        if x not in shapes.ARMS:
            ap.error(f"unknown arm {x!r} (arms: {', '.join(shapes.ARMS)})")
    precisions = [x for x in a.precisions.split(",") if x]
    res = outputs(a.files, arms, precisions)
    if a.mode == "save":
        torch.save(res, a.saved)
        print(f"saved {len(res)} outputs to {a.saved}")
        return 0
    ref = torch.load(a.saved)
    bad = 0
    for key, out in res.items():
        if key not in ref:
            print(f"{key}: MISSING from {a.saved}")
            bad += 1
            continue
        diff = int((out != ref[key]).sum()) if out.shape == ref[key].shape else out.numel()
        nan = int(torch.isnan(out.view(torch.bfloat16).float()).sum())
        print(f"{key[0]} {key[1]:5s} {key[2]:10s}: {'EQUAL' if diff == 0 else 'DIFFERENT'} "
              f"({diff} of {out.numel()} BF16 elements differ; NaN {nan})")
        bad += diff != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
