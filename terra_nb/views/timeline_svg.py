"""The timeline picture: an overview of every iteration's phase with the shown stretch marked,
then per iteration a PythonRunner and a GraphRunner lane over a window of loop time
(``timeline_window.py``: the last iterations, or the range the view asked for): exec, compile and
stall spans named by what ran, the time between iterations, the views' redraws, feed and fetch
moments on top, iteration boundaries and phase changes, and a legend of every mark. Drawn once
on a canvas: SVG for the widgets, PNG for the static picture.

Reads only ``RunnerSpan`` and ``IterationStats`` records (any object with those fields).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..timeline import span_name
from .canvas import HATCH, PngCanvas, SvgCanvas
from .timeline_summary import (
    BETWEEN_COLOR,
    COMPILE_COLOR,
    EXEC_COLORS,
    LANE_NAMES,
    SUMMARY_HEIGHT,
    draw_summary,
    summary,
)
from .timeline_window import Window, column_times, select

WIDTH, LEFT, RIGHT = 920, 104, 12
OVERVIEW_Y, OVERVIEW_H = 4, 12
PHASE_LABEL_Y, ITERATION_LABEL_Y, BAND_Y, BAND_H = 31, 44, 48, 6
LANE_Y = {"python": 60, "graph": 90}
LANE_H = 24
LANES_END = LANE_Y["graph"] + LANE_H
AXIS_Y = LANES_END + 6
HEIGHT = AXIS_Y + 68  # axis labels and three legend rows
MOMENT_COLORS = {"feed": "#1c7ed6", "fetch": "#e03131"}
REGION_COLOR = "#ae3ec9"  # a region call: a tick along the foot of the PythonRunner's lane
VIEWS_COLOR = "#9775fa"  # the views' listeners after an iteration
OP_BY_OP_COLOR = "#96f2d7"  # a segment run op by op (not compiled yet)
PHASE_COLORS = {"tracing": "#f59f00", "coexec": "#2f9e44", "fallback": "#e03131",
                "eager": "#adb5bd"}
LABEL_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
__all__ = ["HEIGHT", "WIDTH", "summary", "timeline_png", "timeline_svg"]


def timeline_svg(spans: Sequence, stats: Sequence, window: int = 20,
                 view_range: Sequence[float] = ()) -> str:
    """The overview and two lanes over the last ``window`` iterations, or over ``view_range``
    (seconds from the first iteration's start), as an SVG string. Its ``data-*`` attributes
    tell the view how to pan and zoom: the shown and the whole range in loop seconds, and the
    lanes' x extent."""
    shown = select(spans, stats, window, view_range)
    canvas = SvgCanvas(
        WIDTH, HEIGHT, "terra-timeline-svg", iterations=len(shown.stats),
        caption=shown.caption(), t0=f"{shown.t0 - shown.origin:.6f}",
        t1=f"{shown.t1 - shown.origin:.6f}", total=f"{shown.end - shown.origin:.6f}",
        left=LEFT, right=WIDTH - RIGHT, follow=int(shown.follow),
    )
    draw_lanes(canvas, shown)
    return canvas.finish()


def timeline_png(spans: Sequence, stats: Sequence, window: int = 20,
                 totals: dict | None = None, view_range: Sequence[float] = ()) -> bytes:
    """The overview and lanes of the window above the summary bar, as one PNG."""
    canvas = PngCanvas(WIDTH, HEIGHT + SUMMARY_HEIGHT)
    draw_lanes(canvas, select(spans, stats, window, view_range))
    canvas.dy = HEIGHT
    draw_summary(canvas, totals if totals is not None else summary(stats))
    return canvas.finish()


def draw_lanes(canvas, shown: Window) -> None:
    """The overview, lanes, iterations, spans, time axis and legend of a window."""
    _lanes(canvas)
    if not shown.stats:
        canvas.text(LEFT, 78, "no iterations yet", fill="#868e96")
        return
    _overview(canvas, shown)
    scale = (WIDTH - LEFT - RIGHT) / max(shown.t1 - shown.t0, 1e-9)

    def x(t: float) -> float:
        return LEFT + (min(max(t, shown.t0), shown.t1) - shown.t0) * scale

    _iterations(canvas, shown, x)
    for s in shown.spans:  # areas first, moments on top: a marker is never under a span
        if s.kind not in ("feed", "fetch"):
            _span(canvas, s, x)
    for s in shown.spans:
        if s.kind in ("feed", "fetch"):
            with canvas.group(f"terra-span terra-{s.kind} terra-{s.runner}",
                              f"{s.kind} · iteration {s.iteration} · {s.phase}"):
                _moment(canvas, s.kind, x(s.t_start), LANE_Y.get(s.runner, LANE_Y["python"]))
    _axis(canvas, shown, scale)
    _legend(canvas)


def _lanes(canvas) -> None:
    canvas.text(6, OVERVIEW_Y + 10, "overview", fill="#495057")
    canvas.text(6, BAND_Y + BAND_H, "phase", fill="#495057")
    for runner, y in LANE_Y.items():
        with canvas.group(f"terra-lane terra-lane-{runner}"):
            canvas.rect(LEFT, y, WIDTH - LEFT - RIGHT, LANE_H, "#f8f9fa")
            canvas.text(6, y + 16, LANE_NAMES[runner], bold=True)


def _overview(canvas, shown: Window) -> None:
    """Every iteration's phase over the whole run, and the window shown (click to go there)."""
    total = max(shown.end - shown.origin, 1e-9)
    width = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + (t - shown.origin) / total * width

    with canvas.group("terra-overview"):
        canvas.rect(LEFT, OVERVIEW_Y, width, OVERVIEW_H, "#f1f3f5", cls="terra-overview-bg")
        for s, (a, b) in zip(shown.all_stats, shown.all_columns):
            canvas.rect(x(a), OVERVIEW_Y + 2, max(x(b) - x(a), 0.3), OVERVIEW_H - 4,
                        PHASE_COLORS.get(s.phase, "#868e96"))
        xs, xe = x(shown.t0), x(shown.t1)
        canvas.rect(xs, OVERVIEW_Y, max(xe - xs, 2.0), OVERVIEW_H, "none",
                    cls="terra-overview-window", stroke="#1971c2")


def _iterations(canvas, shown: Window, x) -> None:
    """Iteration boundaries and labels, the phase band (hover: the iteration's numbers and,
    unless it co-executed, why), and phase changes labelled above it."""
    previous = {s.iteration: p.phase for p, s in zip(shown.all_stats, shown.all_stats[1:])}
    for s, (a, b) in zip(shown.stats, shown.columns):
        xs, xe, xb = x(a), x(b), x(s.t_end)
        color = PHASE_COLORS.get(s.phase, "#868e96")
        canvas.rect(xs, BAND_Y, max(xe - xs, 0.5), BAND_H, color,
                    cls=f"terra-phase terra-phase-{s.phase}", title=iteration_tip(s, (a, b),
                                                                                  shown.spans))
        if xe - xb > 0.5:
            canvas.rect(xb, LANE_Y["python"] + 3, xe - xb, LANE_H - 6, BETWEEN_COLOR,
                        cls="terra-between terra-python",
                        title=f"between iterations #{s.iteration} and #{s.iteration + 1}: the "
                              f"loop's next(), terra-nb's bookkeeping · "
                              f"{(b - s.t_end) * 1e3:.3f} ms")
        canvas.line(xs, BAND_Y, xs, LANES_END, "#ced4da", dash=True, cls="terra-iteration")
        before = previous.get(s.iteration)
        if before is not None and s.phase != before and shown.t0 <= a:
            with canvas.group("terra-phase-change"):
                canvas.line(xs, PHASE_LABEL_Y + 3, xs, LANES_END, color, width=2)
                canvas.text(xs + 3, PHASE_LABEL_Y, f"→ {s.phase}", fill=color, bold=True)
    for s, xs in _labelled(shown, x):
        canvas.text(xs, ITERATION_LABEL_Y, f"#{s.iteration}", fill="#495057", anchor="middle")


def iteration_tip(s, column: tuple[float, float], spans: Sequence) -> str:
    """The hover text of an iteration: phase (and why), its column and what each runner did."""
    t = {k: v * 1e3 for k, v in column_times(s, column, spans).items()}
    why = f" — {s.why}" if getattr(s, "why", "") else ""
    return (
        f"iteration {s.iteration}: {s.phase}{why}\n"
        f"{t['wall']:.3f} ms from its start to the next: Python's body {t['body']:.3f} "
        f"(exec {t['exec']:.3f}, stall {t['stall']:.3f}), views {t['views']:.3f}, "
        f"between iterations {t['between']:.3f}\n"
        f"GraphRunner: exec {t['graph_exec']:.3f}, compile {t['graph_compile']:.3f}, "
        f"stall {t['graph_stall']:.3f}, idle {t['graph_idle']:.3f}"
    )


def _labelled(shown: Window, x) -> list[tuple]:
    """(stats, x) of the iterations to label, at the middle of each: every iteration when the
    labels fit, else every 2nd, 5th, 10th ... (whole multiples read as a scale, not as gaps)."""
    mids = [(s, (x(a) + x(b)) / 2) for s, (a, b) in zip(shown.stats, shown.columns)]
    chosen: list[tuple] = []
    for step in LABEL_STEPS:
        chosen, right = [], -1e9
        for s, mid in mids:
            width = 6 * (len(str(s.iteration)) + 1)
            if s.iteration % step or mid - width / 2 < right + 4:
                continue
            chosen.append((s, mid))
            right = mid + width / 2
        if len(chosen) == sum(1 for s, _ in mids if s.iteration % step == 0):
            return chosen
    return chosen


def _span(canvas, s, x) -> None:
    y = LANE_Y.get(s.runner, LANE_Y["graph"])
    xs, xe = x(s.t_start), x(s.t_end)
    ms = (s.t_end - s.t_start) * 1e3
    cls = f"terra-span terra-{s.kind} terra-{s.runner}"
    if s.kind == "region":
        canvas.rect(xs, y + LANE_H - 4, max(xe - xs, 1.5), 4, REGION_COLOR, cls=cls,
                    title=f"region call {s.label} · iteration {s.iteration} · {ms:.3f} ms")
        return
    work = s.of_iteration
    of = f" (work of iteration {work})" if work != s.iteration else ""
    title = (f"{LANE_NAMES.get(s.runner, s.runner)} {span_name(s)} · iteration {s.iteration}{of}"
             f" · {s.phase} · {ms:.3f} ms")
    if s.kind == "views":
        fill = VIEWS_COLOR
    elif s.kind == "compile":
        fill = COMPILE_COLOR
    elif s.kind == "exec":
        fill = OP_BY_OP_COLOR if s.compiled is False else EXEC_COLORS.get(s.runner, "#868e96")
        cls += " terra-op-by-op" if s.compiled is False else ""
    else:
        fill = HATCH
    canvas.rect(xs, y + 3, max(xe - xs, 1.0), LANE_H - 6, fill, cls=cls, title=title)


def _moment(canvas, kind: str, xs: float, y: float, height: float = LANE_H) -> None:
    """A feed: a triangle pointing down onto the lane; a fetch: pointing up from below it.
    A transparent band around it is what the pointer hovers."""
    color = MOMENT_COLORS[kind]
    y0, d = (y, -6) if kind == "feed" else (y + height, 6)
    if height == LANE_H:  # a feed's upper half of the lane, a fetch's lower half
        canvas.rect(xs - 4, y + (0 if kind == "feed" else height / 2), 8, height / 2 + 7,
                    "transparent", cls="terra-hit")
    canvas.line(xs, y, xs, y + height, color)
    canvas.polygon([(xs, y0), (xs - 4, y0 + d), (xs + 4, y0 + d)], color)


def _axis(canvas, shown: Window, scale: float) -> None:
    """Milliseconds from the first iteration's start, at round steps."""
    duration = shown.t1 - shown.t0
    step = _nice_step(duration * 1e3 / 8)
    offset = (shown.t0 - shown.origin) * 1e3
    canvas.line(LEFT, AXIS_Y, WIDTH - RIGHT, AXIS_Y, "#adb5bd")
    t = math.ceil(offset / step - 1e-9) * step
    while t <= offset + duration * 1e3 + 1e-9:
        xt = LEFT + (t - offset) / 1e3 * scale
        canvas.line(xt, AXIS_Y, xt, AXIS_Y + 4, "#adb5bd")
        anchor = "end" if xt > WIDTH - RIGHT - 20 else "middle"
        canvas.text(xt, AXIS_Y + 15, f"{t:g} ms", fill="#495057", anchor=anchor)
        t += step


def _nice_step(raw_ms: float) -> float:
    if raw_ms <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw_ms))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw_ms)


def _legend(canvas) -> None:
    """Every mark the lanes use, in three rows: runner marks, moments, then the phases."""
    y = AXIS_Y + 32
    x = _swatch(canvas, 6, y, "PythonRunner exec", EXEC_COLORS["python"])
    x = _swatch(canvas, x, y, "GraphRunner exec (compiled)", EXEC_COLORS["graph"])
    x = _swatch(canvas, x, y, "op by op", OP_BY_OP_COLOR)
    x = _swatch(canvas, x, y, "compile", COMPILE_COLOR)
    x = _swatch(canvas, x, y, "stall (waiting)", HATCH)
    x = _swatch(canvas, x, y, "between iterations", BETWEEN_COLOR)
    _swatch(canvas, x, y, "listeners (progress, views)", VIEWS_COLOR)
    y += 16
    x = 6
    for kind, text in (("feed", "feed (Python → graph)"), ("fetch", "fetch (graph → Python)")):
        _moment(canvas, kind, x + 4, y - 7, height=6)
        canvas.text(x + 12, y, text)
        x += 24 + 6 * len(text)
    canvas.rect(x, y - 3, 14, 4, REGION_COLOR)
    canvas.text(x + 18, y, "region call (one function answers a Keras call)")
    x += 36 + 6 * 46
    canvas.line(x, y - 9, x, y + 1, "#868e96", dash=True)
    canvas.text(x + 6, y, "#n: iteration n starts")
    y += 16
    x = _label(canvas, 6, y, "phase band:")
    for phase, color in PHASE_COLORS.items():
        x = _swatch(canvas, x, y, phase, color)
    canvas.line(x, y - 9, x, y + 1, PHASE_COLORS["fallback"], width=2)
    canvas.text(x + 6, y, "→ phase: the phase changes · hover an iteration for its numbers")


def _swatch(canvas, x: float, y: float, text: str, fill: str) -> float:
    canvas.rect(x, y - 8, 14, 9, fill)
    canvas.text(x + 18, y, text)
    return x + 24 + 5.6 * len(text)


def _label(canvas, x: float, y: float, text: str) -> float:
    canvas.text(x, y, text, fill="#495057")
    return x + 12 + 6 * len(text)
