#!/usr/bin/env python3
"""Synthetic Top-16 page selections calibrated to the real captures.

    python3 tools/captures/synth.py --preset austen-prideprejudice_L15 \\
        --prefix 114688 --queries 16384 --kv-heads 1 --out synth_128k.safetensors

A parametric model of one KV head's selections, per query at causal position c (own
page cp = c // P):

1. the own page cp (always);
2. the sink page 0 with probability `p_sink`;
3. the `n_local` pages just before cp (cp-1, cp-2, ...);
4. each retrieved page of the previous query of the same mode, kept with probability
   `p_keep` (real selections change slowly from one query to the next);
5. from the query's *mode's* hot set, each free slot with probability `p_hot`, drawn
   by rank weight `rank^-hot_zipf` among the mode's `hot_size` pages (no repeats);
6. the remaining slots uniformly among all eligible pages.

Modes model the query clusters of real models (tokens of one kind select the same
retrieval pages): every query belongs to one of `n_modes` modes; a query keeps the
mode of its predecessor with probability `mode_stay`, else draws one with weight
`(m+1)^-mode_zipf`. Each mode's hot set drifts: every `drift_every` queries,
`drift_pages` of its pages are replaced; a new hot page is, with probability
`near_frac`, one of the `near_span` pages before the current page, else uniform over
the eligible pages. Rows hold min(16, cp+1) distinct ids, sorted ascending, -1 padded.

The presets below were fitted by tools/captures/calibrate.py so that identity union
visits (hence rho_Q) and W=128 regroup union visits match the named real capture within
10% on the capture's own geometry; the model is written in page distances, so it extends
to 64K and 128K contexts and 16K-query chunks (docs/semantics.md §5).
"""
import argparse
import json
import os
import sys

import numpy as np

PAGE = 128
TOPK = 16

DEFAULTS = dict(p_sink=0.9, n_local=2, p_keep=0.8, p_hot=0.7, hot_size=24, hot_zipf=1.0,
                n_modes=4, mode_zipf=1.0, mode_stay=0.5, drift_every=256, drift_pages=3,
                near_frac=0.5, near_span=64)

# Fitted presets (calibrate.py writes tools/captures/presets.json; see docs/captures.md).
PRESETS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets.json")


def load_presets(path=PRESETS_FILE):
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    return {}


def gen_head(prefix, nq, params, rng, page=PAGE, topk=TOPK):
    """One KV head: int32 [nq, topk] for queries at positions prefix .. prefix+nq-1."""
    p = dict(DEFAULTS)
    p.update(params)
    n_modes = max(1, int(p["n_modes"]))
    hot_size = max(1, int(p["hot_size"]))
    mode_w = (np.arange(1, n_modes + 1, dtype=np.float64)) ** -float(p["mode_zipf"])
    mode_w /= mode_w.sum()
    rank_w = (np.arange(1, hot_size + 1, dtype=np.float64)) ** -float(p["hot_zipf"])
    n_local = int(p["n_local"])
    drift_every = max(1, int(p["drift_every"]))
    drift_pages = int(p["drift_pages"])
    near_span = max(1, int(p["near_span"]))
    p_keep = float(p["p_keep"])

    def new_hot(cp, taken):
        for _ in range(64):
            if rng.random() < p["near_frac"]:
                q = cp - 1 - int(rng.integers(0, near_span))
            else:
                q = int(rng.integers(1, cp + 1)) if cp >= 1 else 0
            if 1 <= q <= cp and q not in taken:
                return q
        return None

    hot = [[] for _ in range(n_modes)]
    state = [[] for _ in range(n_modes)]  # each mode's current retrieved pages
    out = np.full((nq, topk), -1, np.int32)
    mode = int(rng.choice(n_modes, p=mode_w))
    for i in range(nq):
        c = prefix + i
        cp = c // page
        if i % drift_every == 0:
            for hs in hot:
                for _ in range(min(drift_pages, len(hs))):
                    hs.pop(int(rng.integers(0, len(hs))))
                while len(hs) < min(hot_size, cp):
                    q = new_hot(cp, hs)
                    if q is None:
                        break
                    hs.append(q)
        if i > 0 and rng.random() >= p["mode_stay"]:
            mode = int(rng.choice(n_modes, p=mode_w))
        want = min(topk, cp + 1)
        sel = {cp}
        if cp > 0 and rng.random() < p["p_sink"]:
            sel.add(0)
        for d in range(1, n_local + 1):
            if len(sel) < want and cp - d >= 0:
                sel.add(cp - d)
        # persistence: keep each of the mode's previous retrieved pages with p_keep
        kept = [q for q in state[mode] if q <= cp and q not in sel and rng.random() < p_keep]
        for q in kept[:max(0, want - len(sel))]:
            sel.add(q)
        hs = hot[mode]
        free = want - len(sel)
        if hs and free > 0:
            cand = np.array(hs, dtype=np.int64)
            w = rank_w[:len(cand)].copy()
            ok = np.array([q <= cp and q not in sel for q in hs])
            w[~ok] = 0.0
            n_hot = min(int(rng.binomial(free, p["p_hot"])), int(ok.sum()))
            if n_hot > 0:
                pick = rng.choice(len(cand), size=n_hot, replace=False, p=w / w.sum())
                sel.update(int(x) for x in cand[pick])
        while len(sel) < want:
            sel.add(int(rng.integers(0, cp + 1)))
        fixed = {cp, 0} | {cp - d for d in range(1, n_local + 1)}
        state[mode] = [q for q in sel if q not in fixed]
        s = np.fromiter(sorted(sel), dtype=np.int32)
        out[i, :len(s)] = s
    return out


def generate(prefix, nq, params, kv_heads=1, seed=0, page=PAGE, topk=TOPK):
    """int32 [kv_heads, nq, topk]; head h uses seed (seed, h)."""
    return np.stack([gen_head(prefix, nq, params,
                              np.random.default_rng([int(seed), h]), page, topk)
                     for h in range(kv_heads)])


def _int_in(lo, hi):
    """argparse type: an integer in [lo, hi]."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must lie in [{lo}, {hi}], got {v}")
        return v
    return parse


INT32_MAX = 2**31 - 1
# Model parameters: (kind, lo, hi). Probabilities in [0, 1], counts and spans >= their
# lower bound, Zipf exponents any finite number.
PARAM_RANGES = dict(p_sink=("p", 0, 1), n_local=("i", 0, TOPK), p_keep=("p", 0, 1),
                    p_hot=("p", 0, 1), hot_size=("i", 1, 1 << 20), hot_zipf=("f", None, None),
                    n_modes=("i", 1, 1 << 16), mode_zipf=("f", None, None),
                    mode_stay=("p", 0, 1), drift_every=("i", 1, INT32_MAX),
                    drift_pages=("i", 0, 1 << 20), near_frac=("p", 0, 1),
                    near_span=("i", 1, INT32_MAX))


def check_params(params):
    """None when params is a valid model parameter set, else a one-line reason."""
    if not isinstance(params, dict):
        return f"parameters must be a JSON object, got {type(params).__name__}"
    for key, val in params.items():
        if key not in PARAM_RANGES:
            return f"unknown parameter {key!r} (known: {', '.join(PARAM_RANGES)})"
        kind, lo, hi = PARAM_RANGES[key]
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            return f"parameter {key} must be a number, got {val!r}"
        if kind == "i" and not float(val).is_integer():
            return f"parameter {key} must be an integer, got {val!r}"
        if not np.isfinite(val) or (lo is not None and not lo <= val <= hi):
            rng = "a finite number" if lo is None else f"in [{lo}, {hi}]"
            return f"parameter {key} must be {rng}, got {val!r}"
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description="calibrated synthetic Top-16 selections")
    ap.add_argument("--preset", default=None, help="name from presets.json (list: --list)")
    ap.add_argument("--params", default=None, help="JSON overrides of the model parameters")
    ap.add_argument("--prefix", type=_int_in(0, INT32_MAX - 1), default=49152,
                    help="tokens cached before the chunk (>= 0)")
    ap.add_argument("--queries", type=_int_in(1, INT32_MAX), default=16384,
                    help="queries in the chunk (>= 1)")
    ap.add_argument("--kv-heads", type=_int_in(1, 1024), default=1,
                    help="KV heads, each with its own selections (1..1024)")
    ap.add_argument("--seed", type=_int_in(0, 2**63 - 1), default=0)
    ap.add_argument("--out", help="capture file to write")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    presets = load_presets()
    if a.list:
        for k, v in presets.items():
            print(k, json.dumps(v.get("params", v)))
        return 0
    if a.prefix + a.queries > INT32_MAX:
        ap.error(f"--prefix + --queries = {a.prefix + a.queries} exceeds the int32 KV "
                 f"length limit {INT32_MAX}")
    params = {}
    if a.preset:
        if a.preset not in presets:
            ap.error(f"unknown preset {a.preset!r}; --list shows them")
        params.update(presets[a.preset]["params"])
    if a.params:
        try:
            extra = json.loads(a.params)
        except json.JSONDecodeError as e:
            ap.error(f"--params is not valid JSON: {e}")
        why = check_params(extra)
        if why:
            ap.error(f"--params: {why}")
        params.update(extra)
    if not a.out:
        ap.error("--out is required")
    folder = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(folder):
        ap.error(f"--out: folder {folder} does not exist")
    if os.path.isdir(a.out):
        ap.error(f"--out: {a.out} is a folder, expected a file name")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pw_capture import CaptureError, save_capture

    sel = generate(a.prefix, a.queries, params, a.kv_heads, a.seed)
    full = dict(DEFAULTS)
    full.update(params)
    meta = {"generator": "tools/captures/synth.py", "synthetic": "1",
            "preset": a.preset or "", "synth_params": json.dumps(full, sort_keys=True),
            "seed": str(a.seed), "prefix": str(a.prefix), "chunk": str(a.queries),
            "context": str(a.prefix + a.queries),
            "selector": "synthetic (calibrated to real Quest captures)"}
    try:
        save_capture(a.out, sel, [0, a.queries], [a.prefix], [a.prefix + a.queries],
                     metadata=meta)
    except (CaptureError, OSError) as e:
        print(f"synth: cannot write {a.out}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
