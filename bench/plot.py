#!/usr/bin/env python3
"""Chart of a `pageweaver bench --json` file: the speedup of every timed arm over the
per-query kernel (median times), one group of bars per capture.

    python3 bench/plot.py BENCH.json [-o chart.png] [--arms t0,t_online_w128,union4_w128]

--arms keeps only the named arms (keys of the JSON's "arms" objects), colours the bars
by arm and adds a legend: the compact chart of the README.

Needs matplotlib (pip install matplotlib). A JSON without GPU timings (a run on a machine
without a GPU) gives a chart that says so instead of bars.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)

BASELINE = "per_query"


def speedups(capture, keep=None):
    """[(arm key, arm name, per-query median / arm median)] for the arms that ran, in file
    order (only the keys in `keep` when given)."""
    arms = capture.get("gpu", {}).get("arms", {})
    base = arms.get(BASELINE, {})
    if not base.get("ran") or not base.get("median_ms"):
        return []
    out = []
    for key, arm in arms.items():
        if key == BASELINE or not arm.get("ran") or not arm.get("median_ms"):
            continue
        if keep and key not in keep:
            continue
        out.append((key, arm.get("name", key), base["median_ms"] / arm["median_ms"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_file")
    ap.add_argument("-o", "--output", help="PNG path (default: JSON path with .png)")
    ap.add_argument("--arms", help="comma-separated arm keys to keep (default: every arm)")
    args = ap.parse_args(argv)
    with open(args.json_file, encoding="utf-8") as f:
        doc = json.load(f)
    out = args.output or os.path.splitext(args.json_file)[0] + ".png"

    keep = [k for k in args.arms.split(",") if k] if args.arms else None
    captures = [(os.path.basename(c["path"]).replace(".safetensors", ""), speedups(c, keep))
                for c in doc.get("captures", [])]
    captures = [(name, s) for name, s in captures if s]
    fig_h = 1.2 + 0.28 * sum(len(s) + 1 for _, s in captures) if captures else 2.5
    fig, ax = plt.subplots(figsize=(10, max(fig_h, 2.5)))
    if not captures:
        ax.axis("off")
        ax.text(0.5, 0.5, "no GPU timings in %s\n(%s)" % (os.path.basename(args.json_file),
                doc.get("device", "")), ha="center", va="center", wrap=True)
    else:
        labels, values, colors, y = [], [], [], []
        row = 0
        palette = plt.get_cmap("tab10")
        arm_color = {}
        legend = {}
        for ci, (name, rows) in enumerate(captures):
            for ri, (key, arm, value) in enumerate(rows):
                if keep:  # colour by arm, capture name on the group's first bar
                    color = arm_color.setdefault(key, palette(len(arm_color) % 10))
                    legend.setdefault(key, (color, arm))
                    labels.append(name[:44] if ri == 0 else "")
                else:
                    color = palette(ci % 10)
                    labels.append("%s | %s" % (name[:38], arm))
                values.append(value)
                colors.append(color)
                y.append(row)
                row += 1
            row += 1  # gap between captures
        ax.barh(y, values, color=colors)
        if legend:
            from matplotlib.patches import Patch
            # below the axes: inside, it could cover the longest bars' labels
            ax.legend(handles=[Patch(color=c, label=n) for c, n in legend.values()],
                      loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, fontsize=7)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8)
        for yy, v in zip(y, values):
            ax.text(v, yy, " %.2fx" % v, va="center", fontsize=7)
        ax.set_xlabel("speedup over the per-query kernel (median full-call time, higher is better)")
        device = doc.get("device", "")
        ax.set_title("pageweaver bench: %s" % device, fontsize=9)
        ax.set_xlim(0, max(values) * 1.15)
    fig.tight_layout()
    fig.savefig(out, dpi=130, bbox_inches="tight")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
