"""The harness's figures with matplotlib: speed-up over eager per program and mode (paper
Figure 5) and the PythonRunner/GraphRunner exec/stall breakdown of lazy and coexec (Figure 6)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed

import matplotlib.pyplot as plt  # noqa: E402

SPEEDUP_MODES = ("function", "lazy", "coexec", "coexec_xla")
COLOURS = {"function": "#999999", "lazy": "#7fa7d6", "coexec": "#d62728", "coexec_xla": "#ff9896"}


def plot_speedup(document: dict, path: Path) -> Path:
    """Grouped bars: each mode's iterations/s over eager's; a mode without a ratio (failed,
    wrong, hung) is marked by its outcome instead of a bar."""
    programs = document["programs"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(programs)), 3.8))
    width = 0.8 / len(SPEEDUP_MODES)
    labelled: set[str] = set()  # a mode's first bar carries its legend entry
    for k, mode in enumerate(SPEEDUP_MODES):
        for x, program in enumerate(programs):
            entry = program["modes"][mode]
            left = x - 0.4 + k * width
            if entry["ratio_to_eager"] is None:
                word = (entry["error"] or "n/a").split(":")[0].split(" at ")[0]
                ax.text(left + width / 2, 0.02, word, rotation=90, ha="center", va="bottom",
                        fontsize=7, color=COLOURS[mode], transform=ax.get_xaxis_transform())
                continue
            ax.bar(left, entry["ratio_to_eager"], width, align="edge", color=COLOURS[mode],
                   label=None if mode in labelled else mode)
            labelled.add(mode)
    for mode in [m for m in SPEEDUP_MODES if m not in labelled]:  # a legend entry all the same
        ax.bar(0, 0, color=COLOURS[mode], label=mode)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(programs)), [p["name"] for p in programs], rotation=30, ha="right")
    ax.set_ylabel("speed-up over eager")
    ax.set_yscale("log")
    ax.set_title("Throughput relative to eager (Figure 5)")
    ax.legend(fontsize=8, ncol=len(SPEEDUP_MODES))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_breakdown(document: dict, path: Path) -> Path:
    """Per program, four bars (lazy and coexec; PythonRunner and GraphRunner), exec solid and
    stall hatched, in ms per timed iteration."""
    programs = document["programs"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(programs)), 3.8))
    bars = (("lazy", "python"), ("lazy", "graph"), ("coexec", "python"), ("coexec", "graph"))
    colours = {"python": "#1f77b4", "graph": "#2ca02c"}
    width = 0.8 / len(bars)
    for x, program in enumerate(programs):
        for k, (mode, runner) in enumerate(bars):
            ms = program["details"][mode].get("breakdown_ms")
            if not ms:
                continue
            left = x - 0.4 + k * width
            exec_, stall = ms[f"{runner}_exec"], ms[f"{runner}_stall"]
            alpha = 0.45 if mode == "lazy" else 1.0
            ax.bar(left, exec_, width, align="edge", color=colours[runner], alpha=alpha)
            ax.bar(left, stall, width, bottom=exec_, align="edge", color="white",
                   edgecolor=colours[runner], hatch="///", alpha=alpha)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours["python"]),
               plt.Rectangle((0, 0), 1, 1, color=colours["graph"]),
               plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch="///")]
    ax.legend(handles, ["PythonRunner exec", "GraphRunner exec", "stall"], fontsize=8)
    ax.set_xticks(range(len(programs)), [p["name"] for p in programs], rotation=30, ha="right")
    ax.set_ylabel("ms per iteration")
    ax.set_title("Breakdown per iteration: lazy (pale) and coexec bars (Figure 6)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(document: dict, directory: Path) -> list[Path]:
    """Both figures into ``directory``: speedup.png and breakdown.png."""
    directory.mkdir(parents=True, exist_ok=True)
    return [plot_speedup(document, directory / "speedup.png"),
            plot_breakdown(document, directory / "breakdown.png")]
