#!/usr/bin/env python3
"""readme_table.py — the README's benchmark tables from a `pageweaver bench --json` file.

    python3 bench/readme_table.py bench.json [--peer flashinfer.json] > table.md

Prints two Markdown tables: the arms of the first capture (the headline shape, A-hot when
the sweep starts with it) and one row per capture (union visits, T0, T_online W128,
T0/T_online, C_online, Union4, per-query, NRMS of the GPU output against the exact FP64
reference). Times in ms, medians of the graph replays; definitions in docs/bench.md.

With --peer (the JSON of bench/flashinfer_peer.py, run in the same device session), a third
table puts the default call next to FlashInfer's SM90 sparse prefill per capture, both
times (its run() alone, and with the output multiplied by v_scale, which it leaves to the
caller) and both NRMS against the exact reference.

When the file has the PW_PRECISION_FP8X2 arms (key union4_w128_fp8x2), the first table
gets a Union4 FP8X2 row and the second a Union4 FP8X2 time column and its NRMS against
the exact reference; without them the output is what it was before those arms existed.
"""
import json
import os
import sys


def ms(arm):
    return f"{arm['median_ms']:.3f}" if arm and arm.get("ran") else "-"


def ratio(arm):
    return f"{arm['time_over_floor']:.2f}" if arm and arm.get("ran") and "time_over_floor" in arm else ""


X2 = "union4_w128_fp8x2"


def has_x2(caps):
    return any(X2 in c["gpu"]["arms"] for c in caps)


def pct(v):
    return f"{100 * v:.2f}%" if v is not None else "-"


def headline(cap, x2=False):
    arms, der = cap["gpu"]["arms"], cap["gpu"]["derived"]
    t = arms["t_online_w128"]["median_ms"]
    rows = [
        ("T0: Union8, identity order", arms["t0"], ""),
        ("T_fixed: Union8, precomputed W128 permutation", arms["t_fixed_w128"],
         f"S_exec = {der['s_exec_us']:.0f} us"),
        ("**T_online: Union8 + guarded W128 regroup in the call**", arms["t_online_w128"],
         f"C_online {der['c_online_w128_us']:.1f} us, S_net {der['s_net_w128_us']:.0f} us, "
         f"T0/T_online {der['t0_over_t_online_w128']:.3f} (paper 1.045)"),
        ("T_online, guarded W64", arms["t_online_w64"], f"C_online {der['c_online_w64_us']:.1f} us "
         "(includes W64's different attention work)"),
        ("Union4 + guarded W128 regroup, FP8 (the fast mode)", arms["union4_w128"],
         f"{t / arms['union4_w128']['median_ms']:.2f}x faster than Union8 (paper: Union8 1.075x faster)"),
        ("per-query kernel (SGLang-native design, same arithmetic)", arms["per_query"],
         f"{der['per_query_over_union8_online_w128']:.2f}x Union8 T_online, "
         f"{arms['per_query']['median_ms'] / arms['union4_w128']['median_ms']:.2f}x Union4 "
         "(paper vs SGLang native 2.66x)"),
    ]
    if x2:
        chk = cap.get("reference_check", {})
        r4, r8 = der.get("fp8x2_over_fp8_union4"), der.get("fp8x2_over_fp8_union8")
        note = (f"{r4:.2f}x the FP8 Union4 time" if r4 is not None else "") + \
            (f" (Union8: {r8:.2f}x)" if r8 is not None else "") + \
            f"; NRMS vs exact {pct(chk.get('nrms_gpu_fp8x2_vs_exact'))} " \
            f"(FP8: {pct(chk.get('nrms_gpu_vs_exact'))})"
        # The FP8X2 form this call ran (docs/semantics.md §4.5): the stacked 2-slot tile (P as
        # two E4M3 terms) where the device chose it, else P in f16 on the V^T pre-pass (files
        # written before the choice existed have no fp8x2_stacked).
        form = "the stacked 2-slot tile, P as two E4M3 terms" if chk.get("fp8x2_stacked") \
            else "P in f16 on the V^T pre-pass"
        rows.insert(5, (f"Union4 + guarded W128, FP8X2 (two-term FP8 Q; {form})", arms.get(X2), note))
    dk = cap["gpu"].get("default_kernel")
    if dk and arms.get("default", {}).get("ran"):
        # The library's default call (PW_PLAN_CONFIG_INIT + PW_ATTENTION_ARGS_INIT), timed by
        # interleaved replays with the same kernel in identity order.
        rows.insert(0, (f"**Default call: Union4 + regroup when it pays (AUTO), {dk.get('precision', 'fp8').upper()}**",
                        arms["default"],
                        f"T_identity / T_default {dk['t_identity_over_t_default']:.3f} (identity order "
                        f"{dk['t_identity_ms']:.3f} ms), {dk['interleaved_replays']} interleaved replays"
                        + (f"; timed alone {arms['default_alone']['median_ms']:.3f} ms"
                           if arms.get("default_alone", {}).get("ran") else "")))
    out = ["| arm | ms | time / floor | note |", "| --- | --- | --- | --- |"]
    for name, arm, note in rows:
        out.append(f"| {name} | {ms(arm)} | {ratio(arm)} | {note} |")
    off = " / ".join(ms(arms[k]) for k in ("fixed_random", "fixed_w512", "fixed_w2048"))
    out.append(f"| offline random permutation / greedy W512 / W2048 (exec only) | {off} | | "
               "paper 1.832 / 1.234 / 1.185 |")
    return "\n".join(out)


def per_capture(caps, x2=False):
    if x2:
        out = ["| capture | rho_Q id | visits id -> W128 | T0 | T_online W128 | T0/T_online | "
               "C_online W128 (us) | Union4 W128 | Union4 FP8X2 | per-query | per-query / Union4 | "
               "NRMS FP8 | NRMS FP8X2 |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    else:
        out = ["| capture | rho_Q id | visits id -> W128 | T0 | T_online W128 | T0/T_online | "
               "C_online W128 (us) | Union4 W128 | per-query | per-query / Union4 | NRMS |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cap in caps:
        g, gpu = cap["groupings"], cap["gpu"]
        arms, der = gpu["arms"], gpu["derived"]
        name = os.path.basename(cap["path"]).replace(".safetensors", "")
        vi, vw = g["identity"]["union_visits"], g["guarded_w128"]["union_visits"]
        nrms = cap.get("reference_check", {}).get("nrms_gpu_vs_exact")
        pq_u4 = arms["per_query"]["median_ms"] / arms["union4_w128"]["median_ms"]
        if x2:
            nrms_x2 = cap.get("reference_check", {}).get("nrms_gpu_fp8x2_vs_exact")
            out.append(
                f"| {name} | {g['identity']['rho_q']:.2f} | {vi:,} -> {vw:,} "
                f"(-{100 * (vi - vw) / vi:.1f}%) | {ms(arms['t0'])} | {ms(arms['t_online_w128'])} | "
                f"{der['t0_over_t_online_w128']:.3f} | {der['c_online_w128_us']:.1f} | "
                f"{ms(arms['union4_w128'])} | {ms(arms.get(X2))} | {ms(arms['per_query'])} | {pq_u4:.2f} | "
                f"{pct(nrms)} | {pct(nrms_x2)} |")
            continue
        out.append(
            f"| {name} | {g['identity']['rho_q']:.2f} | {vi:,} -> {vw:,} "
            f"(-{100 * (vi - vw) / vi:.1f}%) | {ms(arms['t0'])} | {ms(arms['t_online_w128'])} | "
            f"{der['t0_over_t_online_w128']:.3f} | {der['c_online_w128_us']:.1f} | "
            f"{ms(arms['union4_w128'])} | {ms(arms['per_query'])} | {pq_u4:.2f} | "
            f"{100 * nrms:.2f}% |" if nrms is not None else "| |")
    return "\n".join(out)


def peer_table(caps, peer):
    """Default call vs FlashInfer per capture (matched by file name)."""
    by_name = {os.path.basename(p["capture"]): p for p in peer.get("captures", []) if p.get("status") == "ok"}
    # With the default_alone arm (pageweaver bench since 2026-12-03): the call timed by itself
    # too, the protocol of the peer's own harness, and the ratios against it.
    alone = any(c.get("gpu", {}).get("arms", {}).get("default_alone", {}).get("ran") for c in caps)
    head = ["capture", "default call (FP8X2), ms"] + (["timed alone, ms"] if alone else []) + \
        ["NRMS", "FlashInfer run(), ms", "+ out *= v_scale, ms", "NRMS", "FlashInfer / default call"] + \
        (["FlashInfer / default call alone"] if alone else [])
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for cap in caps:
        name = os.path.basename(cap["path"])
        p = by_name.get(name)
        arm = cap["gpu"]["arms"].get("default")
        if not p or not arm or not arm.get("ran"):
            continue
        nrms = cap.get("reference_check", {}).get("nrms_gpu_fp8x2_vs_exact")
        t, tv = p["time_ms"]["median"], p["time_with_v_scale_ms"]["median"]
        ratios = lambda ms: f"{t / ms:.3f} / {tv / ms:.3f}"  # noqa: E731
        a = cap["gpu"]["arms"].get("default_alone", {})
        ta = a["median_ms"] if a.get("ran") else None
        row = [name.replace(".safetensors", ""), f"{arm['median_ms']:.3f}"] + \
            ([f"{ta:.3f}" if ta else "-"] if alone else []) + \
            [pct(nrms), f"{t:.3f}", f"{tv:.3f}", pct(p["nrms"]), ratios(arm["median_ms"])] + \
            ([ratios(ta) if ta else "-"] if alone else [])
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    peer = None
    if len(args) == 3 and args[1] == "--peer":
        with open(args[2]) as f:
            peer = json.load(f)
        args = args[:1]
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args and args[0] in ("-h", "--help") else 2
    with open(args[0]) as f:
        data = json.load(f)
    caps = [c for c in data["captures"] if c.get("gpu", {}).get("ran")]
    if not caps:
        print("readme_table.py: no capture with GPU timings in the file", file=sys.stderr)
        return 1
    r = data.get("rates", {})
    print(f"Rates measured in the same run: L2 read {r.get('l2_read_tbps', 0):.2f} TB/s, dense FP8 "
          f"GEMM (cuBLASLt) {r.get('fp8_gemm_tflops', 0):.0f} TFLOP/s.\n")
    x2 = has_x2(caps)
    print(headline(caps[0], x2))
    print()
    print(per_capture(caps, x2))
    if peer is not None:
        print()
        print(peer_table(caps, peer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
