"""The summary bar under the timeline (the paper's Figure 6, whole iterations): per runner, the
mean milliseconds of an iteration's column split into what the runner did. Both bars are one
column long, so the numbers add up: Python exec + stall + between iterations, and GraphRunner
exec + compile + stall + idle, each equal the mean column.

Reads only ``IterationStats`` records (any object with those fields).
"""

from __future__ import annotations

from collections.abc import Sequence

from .canvas import HATCH, SvgCanvas

WIDTH, LEFT = 920, 104
SUMMARY_HEIGHT = 70
BAR = 420
EXEC_COLORS = {"python": "#4c6ef5", "graph": "#12b886"}
COMPILE_COLOR = "#f76707"
BETWEEN_COLOR = "#fff3bf"
IDLE_COLOR = "#ffffff"
LANE_NAMES = {"python": "PythonRunner", "graph": "GraphRunner"}
PARTS = {"python": (("exec", EXEC_COLORS["python"]), ("stall", HATCH)),
         "graph": (("exec", EXEC_COLORS["graph"]), ("compile", COMPILE_COLOR), ("stall", HATCH))}
TIMES = ("wall", "python_exec", "python_stall", "graph_exec", "graph_compile", "graph_stall")


def summary(stats: Sequence) -> dict[str, float]:
    """Totals over ``stats`` in seconds: ``wall`` (every column: an iteration's start to the
    next one's, the last one's to its end), the Python and GraphRunner times of the records
    (``python_exec``, ``python_stall``, ``graph_exec``, ``graph_compile``, ``graph_stall``) and
    ``iterations``. The rest of the wall is Python's between iterations and the GraphRunner's
    idle time (``parts``)."""
    out = {key: 0.0 for key in TIMES}
    for a, b in zip(stats, [*stats[1:], None]):
        add(out, a, (b.t_start if b is not None else a.t_end) - a.t_start)
    out["iterations"] = float(len(stats))
    return out


def add(totals: dict[str, float], stat, wall: float) -> None:
    """Add one iteration whose column is ``wall`` seconds long to ``totals``."""
    totals["wall"] += wall
    for key in TIMES[1:]:
        totals[key] += getattr(stat, key, 0.0) or 0.0


def parts(totals: dict[str, float]) -> dict[str, list[tuple[str, float, str]]]:
    """Per runner, (part, seconds, colour) of the total wall: the rest of what the records
    count is ``between`` iterations (Python) and ``idle`` (GraphRunner)."""
    out = {}
    for runner, kinds in PARTS.items():
        named = [(name, totals.get(f"{runner}_{name}", 0.0), color) for name, color in kinds]
        rest = max(totals.get("wall", 0.0) - sum(v for _, v, _ in named), 0.0)
        out[runner] = [*named, ("between" if runner == "python" else "idle", rest,
                                BETWEEN_COLOR if runner == "python" else IDLE_COLOR)]
    return out


def summary_svg(totals: dict[str, float]) -> str:
    """The summary bar as SVG."""
    canvas = SvgCanvas(WIDTH, SUMMARY_HEIGHT, "terra-summary-svg")
    draw_summary(canvas, totals)
    return canvas.finish()


def draw_summary(canvas, totals: dict[str, float]) -> None:
    """Per runner a bar of the mean column, split into its parts, and the numbers."""
    n = max(totals.get("iterations", 0.0), 1.0)
    per = {r: [(name, v / n, color) for name, v, color in p] for r, p in parts(totals).items()}
    longest = max(sum(v for _, v, _ in p) for p in per.values()) or 1.0
    for i, (runner, shown) in enumerate(per.items()):
        y = 6 + 24 * i
        total = sum(v for _, v, _ in shown)
        with canvas.group(f"terra-summary-row terra-summary-{runner}"):
            canvas.text(6, y + 13, LANE_NAMES[runner], bold=True)
            x = LEFT
            for name, value, color in shown:
                w = BAR * value / longest
                canvas.rect(x, y, w, 18, color, cls=f"terra-summary-{name}", stroke="#ced4da"
                            if color == IDLE_COLOR and w > 0 else "",
                            title=f"{name}: {value * 1e3:.2f} ms/iteration")
                x += w
            shares = " · ".join(f"{name} {100 * v / total:.0f}%" for name, v, _ in shown
                                if total and v / total >= 0.005)
            canvas.text(LEFT + BAR + 10, y + 13,
                        f"{total * 1e3:.2f} ms/iteration · {shares or 'no time'}")
    label = f"mean iteration (start to next start) over all {int(totals.get('iterations', 0))}:"
    canvas.text(LEFT, 64, label, fill="#495057")
    x = LEFT + 12 + 6 * len(label)
    for name, color in (("exec", EXEC_COLORS["python"]), ("compile", COMPILE_COLOR),
                        ("stall", HATCH), ("between iterations", BETWEEN_COLOR),
                        ("idle", IDLE_COLOR)):
        canvas.rect(x, 56, 14, 9, color, stroke="#ced4da" if color == IDLE_COLOR else "")
        canvas.text(x + 18, 64, name)
        x += 30 + 6 * len(name)
