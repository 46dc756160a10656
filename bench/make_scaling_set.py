#!/usr/bin/env python3
"""The scaling set of issue 13: where does the in-call regroup pay? Writes one capture per
shape (docs/capture-format.md; no Q/K/V: readers generate them from qkv_seed), one request,
one KV head, page 128, Top-16, "hot" selections:

    scale_n01024_pre48k   1,024 queries after a 48K-token prefix (49,152 tokens)
    scale_n04096_pre48k   4,096 queries, 48K prefix
    scale_n16384_pre48k  16,384 queries, 48K prefix
    scale_n65536_pre48k  65,536 queries, 48K prefix
    scale_n04096_ctx64k   4,096 queries ending a 64K-token context
    scale_n04096_ctx256k  4,096 queries ending a 256K-token context (2,048 pages: the last
                          direct-indexed page count of the W128 regroup)
    scale_n04096_ctx1m    4,096 queries ending a 1M-token context (8,192 pages: hash path)
    scale_n01024_pre8k    1,024 queries after an 8K-token prefix (a short chunk whose pages
                          many queries share: where the V^T pre-pass's rule is decided)
    scale_n02048_pre48k   2,048 queries, 48K prefix  } around the time guard's threshold
    scale_n03072_pre48k   3,072 queries, 48K prefix  } (~2,520 queries in FP8X2, 2026-12-03)

Usage: make_scaling_set.py [OUTDIR] [--only NAME,...] [--seed N] [--topk K]   (default .data/scaling)
       make_scaling_set.py --requests [OUTDIR] [--only NAME,...]   (default .data/scaling_req)

--requests writes the multi-request set instead (its own folder: the time guard's fit reads
the one-request set above, while these ask whether the guard, whose K <= 16 form sees N but
not R, loses where requests are short). Each request's rows come from the same "hot"
generator, with its own hot set; every request's logical page p is physical page p (one
shared copy, as a cached common prefix: private pages would need 34 GB per cache):

    req_mixed_n04096_r257    one 3,840-query chunk after 48K tokens + 256 one-query requests
                             (decode-like rows of a mixed batch) at contexts of 4K-128K
    req_verify_n04096_r512   512 requests x 8 queries (speculative verification) after
                             8K-64K-token prefixes
    req_verify_n02560_r512   512 x 5 queries (near the W64 / W128 thresholds)
    req_decode_n04096_r4096  4,096 one-query requests at 8K-32K (no regroup can change
                             anything: the guard's saving is 0 in truth)
    req_chunks_n16384_r16    16 requests x 1,024 queries after 48K tokens (a batch of chunks)

--topk K (default 16; 17..64 for the time guard's K > 16 form) selects K pages per row by
the same rule (files get a _kK suffix), e.g. .data/scaling_k32 for `scripts/gpu-check
scalingwide`.

"Hot" selections (this file's own generator; the same kind of statistics as the shared
workloads' "hot" kind): query i at causal position c sees pages 0 .. cp = c // 128 and
selects its own page cp, the sink page 0, 4 of its 6 most recent pages, and fills the other
slots one page at a time: with probability 0.7 a page of a hot set of 24 pages shared by
neighbouring queries (3 of them replaced every 256 queries), else a uniform page of
0 .. cp; rows are sorted, distinct, -1 padded when fewer than 16 pages are visible.
Needs numpy and safetensors (tools/captures/requirements.txt)."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "captures"))
from pw_capture import save_capture  # noqa: E402

PAGE = 128
TOPK = 16
K48 = 48 * 1024

# name: (queries, prefix tokens)
SHAPES = {
    "scale_n01024_pre48k": (1024, K48),
    "scale_n04096_pre48k": (4096, K48),
    "scale_n16384_pre48k": (16384, K48),
    "scale_n65536_pre48k": (65536, K48),
    "scale_n04096_ctx64k": (4096, 64 * 1024 - 4096),
    "scale_n04096_ctx256k": (4096, 256 * 1024 - 4096),
    "scale_n04096_ctx1m": (4096, 1024 * 1024 - 4096),
    "scale_n01024_pre8k": (1024, 8 * 1024),
    # Appended (seeds follow the position): the time guard's threshold region.
    "scale_n02048_pre48k": (2048, K48),
    "scale_n03072_pre48k": (3072, K48),
}


def hot_rows(prefix, n, rng, topk=TOPK, hot_size=24, renew_every=256, renew=3, p_hot=0.7, recent=6, n_recent=4):
    """[n, topk] int32 Top-K page ids of n consecutive queries after `prefix` tokens."""
    rows = np.full((n, topk), -1, dtype=np.int32)
    hot = []
    for i in range(n):
        cp = (prefix + i) // PAGE
        if i % renew_every == 0:
            for _ in range(min(renew, len(hot))):
                hot.pop(int(rng.integers(len(hot))))
            while cp >= 1 and len(hot) < min(hot_size, cp):
                page = int(rng.integers(1, cp + 1))
                if page not in hot:
                    hot.append(page)
        chosen = {cp, 0}
        near = list(range(max(1, cp - recent), cp))
        if near:
            chosen.update(int(x) for x in rng.choice(near, size=min(n_recent, len(near)), replace=False))
        want = min(topk, cp + 1)
        spare_hot = [p for p in hot if p <= cp and p not in chosen]
        while len(chosen) < want:
            if spare_hot and rng.random() < p_hot:
                chosen.add(spare_hot.pop(int(rng.integers(len(spare_hot)))))
            else:
                chosen.add(int(rng.integers(0, cp + 1)))
        sel = sorted(chosen)
        rows[i, : len(sel)] = sel
    return rows


# name: list of (requests, queries each, prefix range [lo, hi] in tokens); a request's prefix
# is drawn uniformly from its range (rounded to tokens), in order.
REQUEST_SETS = {
    "req_mixed_n04096_r257": [(1, 3840, (K48, K48)), (256, 1, (4096, 128 * 1024))],
    "req_verify_n04096_r512": [(512, 8, (8192, 64 * 1024))],
    "req_verify_n02560_r512": [(512, 5, (8192, 64 * 1024))],
    "req_decode_n04096_r4096": [(4096, 1, (8192, 32 * 1024))],  # 8K-32K: a 4 MB page table
    "req_chunks_n16384_r16": [(16, 1024, (K48, K48))],
}


def write_request_set(outdir, name, parts, seed, topk):
    """One capture of several requests: parts as in REQUEST_SETS."""
    rng = np.random.default_rng(seed)
    rows, cu, prefixes = [], [0], []
    for count, n, (lo, hi) in parts:
        for _ in range(count):
            prefix = int(rng.integers(lo, hi + 1))
            rows.append(hot_rows(prefix, n, rng, topk))
            cu.append(cu[-1] + n)
            prefixes.append(prefix)
    ids = np.concatenate(rows)[None, :, :]
    cu = np.array(cu, np.int32)
    prefixes = np.array(prefixes, np.int32)
    kv = prefixes + np.diff(cu).astype(np.int32)
    # One shared physical copy of every logical page (page_table[r, p] = p, as requests that
    # share a cached prefix have): the default layout's private pages would take 34 GB per
    # cache at 4,096 requests. The kernels read the same bytes for every request then, which
    # both arms of a comparison see.
    max_pages = (int(kv.max()) + PAGE - 1) // PAGE
    table = np.tile(np.arange(max_pages, dtype=np.int32), (len(prefixes), 1))
    out = os.path.join(outdir, name + ("" if topk == TOPK else f"_k{topk}") + ".safetensors")
    save_capture(out, ids, cu, prefixes, kv, page_table=table, qkv_seed=seed, topk_dtype=np.int32,
                 metadata={"generator": "bench/make_scaling_set.py --requests", "selector": "synthetic hot",
                           "page_table": "shared: logical page p of every request is physical page p",
                           "seed": str(seed), "chunk": f"{len(prefixes)} requests, {int(cu[-1])} queries",
                           "kv_heads": "1"})
    print(out, ids.shape, f"{len(prefixes)} requests, contexts {int(kv.min())}..{int(kv.max())} tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", default=None, help="default .data/scaling (--requests: .data/scaling_req)")
    ap.add_argument("--requests", action="store_true", help="the multi-request set (REQUEST_SETS)")
    ap.add_argument("--only", default="", help="comma list of names (default: all)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--topk", type=int, default=TOPK, help="pages per row (default 16; up to 64)")
    a = ap.parse_args()
    if not 1 <= a.topk <= 64:
        sys.exit(f"make_scaling_set: --topk {a.topk} (1..64)")
    suffix = "" if a.topk == TOPK else f"_k{a.topk}"
    only = [x for x in a.only.split(",") if x]
    known = REQUEST_SETS if a.requests else SHAPES
    for x in only:
        if x not in known:
            sys.exit(f"make_scaling_set: unknown name {x} (known: {', '.join(known)})")
    if a.outdir is None:
        a.outdir = ".data/scaling_req" if a.requests else ".data/scaling"
    os.makedirs(a.outdir, exist_ok=True)
    if a.requests:
        for k, (name, parts) in enumerate(REQUEST_SETS.items()):
            if not only or name in only:
                write_request_set(a.outdir, name, parts, a.seed * 1000 + 500 + k, a.topk)
        return
    for k, (name, (n, prefix)) in enumerate(SHAPES.items()):
        if only and name not in only:
            continue
        seed = a.seed * 1000 + k
        ids = hot_rows(prefix, n, np.random.default_rng(seed), a.topk)[None, :, :]
        out = os.path.join(a.outdir, name + suffix + ".safetensors")
        save_capture(out, ids, np.array([0, n], np.int32), np.array([prefix], np.int32),
                     np.array([prefix + n], np.int32), qkv_seed=seed, topk_dtype=np.int32,
                     metadata={"generator": "bench/make_scaling_set.py", "selector": "synthetic hot",
                               "seed": str(seed), "chunk": f"prefix {prefix}, {n} queries",
                               "kv_heads": "1"})
        print(out, ids.shape, f"context {prefix + n} tokens")


if __name__ == "__main__":
    main()
