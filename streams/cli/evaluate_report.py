"""What ``pwevent evaluate`` writes besides ``results.csv``: ``summary.md`` (means over repeats)
and the PNG plots of AMRE."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Final

import numpy as np

from streams.cli.evaluate_tasks import Setting, settings

EVAL_EXTRA = "the eval extra: pip install 'pwevent[eval]'"
#: The summary's file name in ``--out``.
SUMMARY_FILE: Final = "summary.md"


def write_summary(rows: list[dict], args: argparse.Namespace, out: Path) -> None:
    """Means over repeats, one table with E varied and one with w varied, per metric."""
    mean: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        ratio = None if r["ratio"] == "" else r["ratio"]
        for metric in ("amre", "ajsd"):
            mean[(r["dataset"], r["mechanism"], r["E"], r["w"], ratio, metric)].append(r[metric])
    datasets = [d for d in args.dataset if any(r["dataset"] == d for r in rows)]
    mechs = args.mechanisms
    lines = ["# Evaluation summary", "",
             f"Means over {args.repeat} repeats (seed {args.seed}, noise {args.noise}).", ""]

    def table(title: str, keys: list[Setting], label) -> None:
        for metric in ("amre", "ajsd"):
            lines.extend([f"## {metric.upper()} with {title}", ""])
            head = "| dataset | setting | " + " | ".join(m.upper() for m in mechs) + " |"
            lines.extend([head, "|---|---|" + "---:|" * len(mechs)])
            for ds in datasets:
                for E, w, ratio in keys:
                    cells = []
                    for m in mechs:
                        vals = mean.get((ds, m, E, w, ratio, metric))
                        cells.append(f"{np.mean(vals):,.2f}" if metric == "amre" and vals
                                     else f"{np.mean(vals):.5f}" if vals else "")
                    lines.append(f"| {ds} | {label(E, w, ratio)} | " + " | ".join(cells) + " |")
            lines.append("")

    if args.ratio_experiment:
        which = "E_k = 1.0" if args.ratio_experiment == "E" else "w_k = 40"
        table(f"the share of users with {which} varied", settings(args),
              lambda E, w, r: f"ratio={r:g}")
    elif args.cross:
        table("every (E, w)", settings(args), lambda E, w, r: f"E={E:g}, w={w}")
    else:
        table(f"E varied (w = {args.base_window})",
              [(e, args.base_window, None) for e in args.epsilon], lambda E, w, r: f"E={E:g}")
        table(f"w varied (E = {args.base_epsilon:g})",
              [(args.base_epsilon, w, None) for w in args.window], lambda E, w, r: f"w={w}")
    (out / SUMMARY_FILE).write_text("\n".join(lines))


def write_plots(rows: list[dict], args: argparse.Namespace, out: Path) -> list[Path]:
    """AMRE against E and against w, one line per mechanism, log scale."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(f"plots need {EVAL_EXTRA}") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if args.ratio_experiment:
        sweeps = [("ratio", "E", 0.6, args.ratios)]
    else:
        sweeps = [("E", "w", args.base_window, args.epsilon),
                  ("w", "E", args.base_epsilon, args.window)]
    for ds in args.dataset:
        for axis, fixed_key, fixed, values in sweeps:
            fig, ax = plt.subplots(figsize=(5, 3.6))
            drawn = False
            for m in args.mechanisms:
                ys = []
                for v in values:
                    vals = [r["amre"] for r in rows if r["dataset"] == ds and r["mechanism"] == m
                            and r[axis] == v and r[fixed_key] == fixed]
                    ys.append(np.mean(vals) if vals else np.nan)
                if not np.all(np.isnan(ys)):
                    ax.plot(values, ys, marker="o", label=m.upper())
                    drawn = True
            if not drawn:
                plt.close(fig)
                continue
            ax.set_yscale("log")
            ax.set_xlabel(axis)
            ax.set_ylabel("AMRE")
            ax.set_title(f"{ds}: AMRE against {axis} ({fixed_key} = {fixed:g})")
            ax.legend(fontsize=7, ncol=2)
            fig.tight_layout()
            path = out / f"amre_{ds}_{axis}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written
