#!/usr/bin/env python3
"""The default plan's choice (pw_plan_info: regroup or identity, window, predicted saving
and cost) over a grid of shapes, one line each: what the time guard's constants decide.
Host only (no GPU): run it against two builds of the library, e.g. before and after a refit
of src/time_guard_constants.h, and compare.

    PAGEWEAVER_LIBRARY=old/libpageweaver.so PYTHONPATH=python python3 bench/plan_sweep.py > old.txt
    PAGEWEAVER_LIBRARY=new/libpageweaver.so PYTHONPATH=python python3 bench/plan_sweep.py --against old.txt

Grid: Top-K 16 / 32 / 64, FP8 / FP8X2, 1 / 4 KV heads, page tables of 504 / 3,000 / 8,192 /
16,384 pages (one request, G = 16, D = 128, P = 128) and 1,024-65,536 queries: 432 plans
(324 before 3,000 was added in the forty-third session: between W128's direct bound, 2,048,
and W64's, 4,096). With
--against FILE (this script's earlier output) it prints only the plans whose choice
(regroup or identity, window) differs, then the counts."""
import argparse
import sys

from pageweaver import _lib

TOPKS = (16, 32, 64)
PRECISIONS = (("FP8", _lib.PRECISIONS["fp8"]), ("FP8X2", _lib.PRECISIONS["fp8x2"]))
KV_HEADS = (1, 4)
PAGES = (504, 3000, 8192, 16384)
QUERIES = (1024, 1536, 2048, 2560, 3072, 4096, 8192, 15272, 65536)


def sweep():
    """{key: (choice, window, saving_us, cost_us)} for every plan of the grid."""
    out = {}
    for k in TOPKS:
        for pname, prec in PRECISIONS:
            for hkv in KV_HEADS:
                for pages in PAGES:
                    for n in QUERIES:
                        p = _lib.new_problem()
                        p.num_tokens, p.num_kv_heads, p.topk = n, hkv, k
                        p.max_pages_per_request, p.num_cache_pages = pages, pages
                        plan = _lib.Plan(p, _lib.REGROUP_MODES["auto"], _lib.PW_WINDOW_AUTO, _lib.KERNELS["union4"])
                        info = plan.info(prec)
                        choice = "identity" if info.regroup == _lib.REGROUP_MODES["identity"] else "regroup"
                        out[f"K{k} {pname} hkv{hkv} pages{pages} N{n}"] = (choice, info.window, info.saving_us,
                                                                          info.cost_us)
    return out


def line(key, v):
    return f"{key}: {v[0]} W{v[1]} S {v[2]:.1f} C {v[3]:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", metavar="FILE", help="an earlier output of this script: print the differences")
    a = ap.parse_args()
    now = sweep()
    if not a.against:
        for key, v in now.items():
            print(line(key, v))
        return 0
    before = {}
    with open(a.against) as fh:
        for text in fh:
            key, _, rest = text.strip().partition(": ")
            parts = rest.split()
            if len(parts) >= 2:
                before[key] = (parts[0], int(parts[1][1:]))
    flips = windows = 0
    for key, v in now.items():
        if key not in before:
            print(f"{key}: not in {a.against}", file=sys.stderr)
            continue
        old_choice, old_window = before[key]
        if old_choice != v[0]:
            flips += 1
        elif old_window != v[1]:
            windows += 1
        else:
            continue
        print(f"{key}: was {old_choice} W{old_window}, now {line(key, v).split(': ', 1)[1]}")
    print(f"{len(now)} plans: {flips} regroup / identity changes, {windows} window-only changes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
