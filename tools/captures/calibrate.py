#!/usr/bin/env python3
"""Statistics of the real captures and calibration of the synthetic generator.

    python3 tools/captures/calibrate.py --captures captures --table captures/stats.md

1. For every real capture in --captures: rho_Q and union visits under identity order,
   W=64 and W=128 regroup (numpy Algorithm 1 of regroup_np.py, summed over KV heads).
2. For every real capture (or those named by --fit), fits the synthetic model of
   synth.py so that identity and W=128 union visits of its output, on the capture's own
   geometry (prefix, queries, KV heads), match within --tol (10%); writes the fitted
   parameters to tools/captures/presets.json (preset name = capture name without the
   `_pre<prefix>_n<queries>` part when both chunks share it, else the full name).
3. Writes both tables (markdown) to --table and prints them.

The fit (deterministic, fixed seed): p_sink is measured on the capture (rows holding
page 0). The targets are the capture's per-KV-head identity and W=128 union visits on
--fit-slices slices of --fit-rows queries spread over the chunk; the synthetic model
runs one KV head on exactly those rows (after 256 warm-up rows). For each structure
candidate (n_modes x p_hot), mode_stay is bisected to match the W128/identity ratio
(the regroup gain) and, inside each step, p_keep is bisected to match identity visits;
the evaluated point with the smallest squared relative errors wins. The preset is then
checked on the capture's whole geometry (all queries, all KV heads).
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from pw_capture import load_capture  # noqa: E402
from regroup_np import capture_stats  # noqa: E402
import synth  # noqa: E402


def real_stats(path):
    t, meta = load_capture(path)
    st = capture_stats(t["topk_ids"], t["cu_seqlens_q"], t["prefix_lens"], t["kv_lens"],
                       int(meta.get("page_size", 128)))
    st.update(name=os.path.basename(path)[:-len(".safetensors")],
              prefix=int(t["prefix_lens"][0]), n=int(t["topk_ids"].shape[1]),
              hkv=int(t["topk_ids"].shape[0]), ctx=int(t["kv_lens"][0]),
              text=meta.get("text", ""), layer=meta.get("layer", ""))
    return st


def synth_stats(params, prefix, n, hkv, seed):
    sel = synth.generate(prefix, n, params, kv_heads=hkv, seed=seed)
    return capture_stats(sel, [0, n], [prefix], [prefix + n])


WARM = 256  # synthetic rows generated and dropped before each fit slice


def slices_of(st, n_slices, rows):
    """n_slices windows of `rows` queries spread evenly over the capture's chunk, as
    (query offset, first position); offsets are multiples of 128 (regroup windows)."""
    step = (st["n"] - rows) // max(1, n_slices - 1) if n_slices > 1 else 0
    return [((k * step) // 128 * 128, st["prefix"] + (k * step) // 128 * 128)
            for k in range(n_slices)]


def real_slice_target(path, st, slices, rows):
    """Per-KV-head mean identity and W128 union visits of the real rows of the slices."""
    t, meta = load_capture(path)
    ids = np.asarray(t["topk_ids"])
    tot_i = tot_w = 0
    for off, pos in slices:
        s = capture_stats(ids[:, off:off + rows], [0, rows], [pos], [pos + rows],
                          int(meta.get("page_size", 128)))
        tot_i += s["identity"]
        tot_w += s["w128"]
    return tot_i / ids.shape[0], tot_w / ids.shape[0]


def synth_slice_stats(params, slices, rows, seed):
    """Identity and W128 union visits of one synthetic KV head on the same rows."""
    tot_i = tot_w = 0
    for k, (_, pos) in enumerate(slices):
        warm = min(WARM, pos)
        sel = synth.generate(pos - warm, rows + warm, params, 1, seed + k)[:, warm:]
        s = capture_stats(sel, [0, rows], [pos], [pos + rows])
        tot_i += s["identity"]
        tot_w += s["w128"]
    return tot_i, tot_w


# Structure candidates; for each, mode_stay (how long a run of one query cluster lasts:
# short runs interleave clusters, which regrouping untangles) is bisected to match the
# W128 / identity ratio, and inside that p_keep (persistence of a mode's retrieved
# pages, which sets how fast neighbouring rows drift apart) is bisected to match
# identity union visits.
GRID = {
    "n_modes": [2, 3, 4],
    "p_hot": [0.3, 1.0],
}
FIXED = dict(n_local=0, hot_size=32, hot_zipf=1.0, near_frac=0.25)


def fit(target, seed=1, log=print):
    """Fit synth parameters to one real capture (target holds fit_slices, fit_rows,
    fit_target = per-head identity / W128 visits of those rows, sink_rate).
    Returns (params, (identity error, W128 error) on the fit rows)."""
    slices, rows = target["fit_slices"], target["fit_rows"]
    tgt_id, tgt_w = target["fit_target"]
    base = dict(synth.DEFAULTS, **FIXED)
    base["p_sink"] = round(float(target["sink_rate"]), 3)

    def run(params):
        i, w = synth_slice_stats(params, slices, rows, seed)
        return i / tgt_id - 1, w / tgt_w - 1, w / i

    def match_identity(params):
        lo, hi = 0.0, 1.0
        for _ in range(6):  # identity visits fall as p_keep rises
            params["p_keep"] = round((lo + hi) / 2, 4)
            ei, ew, ratio = run(params)
            if ei > 0:
                lo = params["p_keep"]
            else:
                hi = params["p_keep"]
        return run(params)

    want_ratio = tgt_w / tgt_id
    best = None
    import itertools
    for combo in itertools.product(*GRID.values()):
        params = dict(base, **dict(zip(GRID.keys(), combo)))
        lo, hi = 0.0, 0.995
        for _ in range(6):  # W128/identity rises (less regroup gain) as mode_stay rises
            params["mode_stay"] = round((lo + hi) / 2, 4)
            ei, ew, ratio = match_identity(params)
            score = ei * ei + ew * ew
            if best is None or score < best[0]:
                best = (score, dict(params), (ei, ew))
            if ratio < want_ratio:
                lo = params["mode_stay"]
            else:
                hi = params["mode_stay"]
    log(f"  fit rows: identity {100 * best[2][0]:+.1f}%, w128 {100 * best[2][1]:+.1f}% "
        f"with {best[1]}")
    return best[1], best[2]


def fmt_table(rows):
    out = ["| capture | text | layer | prefix | queries | context | rho_Q identity | "
           "union visits identity | W64 | W128 | reduction W64 % | reduction W128 % |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in rows:
        out.append(f"| {s['name']} | {s['text']} | {s['layer']} | {s['prefix']} | {s['n']} | "
                   f"{s['ctx']} | {s['rho_identity']:.3f} | {s['identity']} | {s['w64']} | "
                   f"{s['w128']} | {100 * s['reduction_w64']:.2f} | "
                   f"{100 * s['reduction_w128']:.2f} |")
    return "\n".join(out)


def fmt_calib(rows):
    out = ["| preset (real capture) | rho_Q identity real / synth | identity real / synth "
           "(err %) | W128 real / synth (err %) | reduction W128 % real / synth |",
           "| --- | --- | --- | --- | --- |"]
    for r, s in rows:
        ei = 100 * (s["identity"] / r["identity"] - 1)
        ew = 100 * (s["w128"] / r["w128"] - 1)
        out.append(f"| {r['name']} | {r['rho_identity']:.3f} / {s['rho_identity']:.3f} | "
                   f"{r['identity']} / {s['identity']} ({ei:+.1f}) | {r['w128']} / "
                   f"{s['w128']} ({ew:+.1f}) | {100 * r['reduction_w128']:.2f} / "
                   f"{100 * s['reduction_w128']:.2f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captures", default=os.path.join(HERE, "..", "..", "captures"))
    ap.add_argument("--table", default=None, help="markdown file for both tables")
    ap.add_argument("--fit", default="all", help="'all', 'none' or comma-separated names")
    ap.add_argument("--fit-rows", type=int, default=512, help="queries per fit slice")
    ap.add_argument("--fit-slices", type=int, default=8, help="slices spread over a chunk")
    ap.add_argument("--presets", default=synth.PRESETS_FILE, help="presets JSON to update")
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)

    files = sorted(glob.glob(os.path.join(a.captures, "*.safetensors")))
    real = []
    for f in files:
        _, meta = load_capture(f)
        if meta.get("synthetic") == "1":
            continue
        t0 = time.time()
        st = real_stats(f)
        st["path"] = f
        real.append(st)
        print(f"{st['name']}: identity {st['identity']} w64 {st['w64']} w128 {st['w128']} "
              f"({time.time() - t0:.1f} s)", flush=True)
    table = fmt_table(real)
    print(table)

    presets = synth.load_presets(a.presets)
    calib = []
    names = [s["name"] for s in real] if a.fit == "all" else \
        [] if a.fit == "none" else a.fit.split(",")
    for st in real:
        if st["name"] not in names:
            continue
        rows = min(a.fit_rows, st["n"])
        st["fit_rows"] = rows
        st["fit_slices"] = slices_of(st, a.fit_slices, rows)
        st["fit_target"] = real_slice_target(st["path"], st, st["fit_slices"], rows)
        t_, _ = load_capture(st["path"])
        st["sink_rate"] = float(np.mean((np.asarray(t_["topk_ids"]) == 0).any(axis=2)))
        print(f"fitting {st['name']} ({a.fit_slices} x {rows} rows, per-head target "
              f"identity {st['fit_target'][0]:.0f}, w128 {st['fit_target'][1]:.0f})",
              flush=True)
        params, _ = fit(st, seed=a.seed)
        full = synth_stats(params, st["prefix"], st["n"], st["hkv"], a.seed)
        ok = (abs(full["identity"] / st["identity"] - 1) <= a.tol and
              abs(full["w128"] / st["w128"] - 1) <= a.tol)
        presets[st["name"]] = {"params": params, "fitted_to": st["name"],
                               "within_tol": ok,
                               "real": {k: st[k] for k in ("identity", "w64", "w128",
                                                           "rho_identity")},
                               "synth": {k: full[k] for k in ("identity", "w64", "w128",
                                                              "rho_identity")}}
        calib.append((st, full))
        print(fmt_calib([(st, full)]).splitlines()[-1], "OK" if ok else "OUTSIDE TOLERANCE",
              flush=True)
        tmp = a.presets + ".tmp"
        with open(tmp, "w") as f:
            json.dump(presets, f, indent=1, sort_keys=True)
        os.replace(tmp, a.presets)
    # calibration table over every real capture with a preset (this run's or earlier)
    by_name = {st["name"]: st for st in real}
    rows = []
    for name, pr in sorted(presets.items()):
        if name in by_name and "synth" in pr:
            sy = dict(pr["synth"])
            sy["reduction_w128"] = 1 - sy["w128"] / sy["identity"]
            rows.append((by_name[name], sy))
    ctab = fmt_calib(rows) if rows else ""
    if ctab:
        print(ctab)
    if a.table:
        tmp = a.table + ".tmp"
        with open(tmp, "w") as f:
            f.write("# Capture statistics (tools/captures/calibrate.py)\n\n" + table +
                    "\n\n## Synthetic generator calibration\n\n" + ctab + "\n")
        os.replace(tmp, a.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
