"""The timeline picture: per iteration, a PythonRunner and a GraphRunner lane with exec and stall
spans, feed and fetch moments, region calls, iteration boundaries and phase changes, over a
rolling window of the last iterations, with a legend of every mark; and the summary bar (the
paper's Figure 6: exec/stall per runner). Each is drawn once on a canvas: SVG for the widgets,
PNG for the static fallback.

Reads only ``RunnerSpan`` and ``IterationStats`` records (any object with those fields).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..timeline import RUNNERS
from .canvas import HATCH, PngCanvas, SvgCanvas

WIDTH, LEFT, RIGHT = 920, 104, 12
PHASE_LABEL_Y, ITERATION_LABEL_Y, BAND_Y, BAND_H = 11, 24, 28, 6
LANE_Y = {"python": 40, "graph": 70}
LANE_H = 24
LANES_END = LANE_Y["graph"] + LANE_H
AXIS_Y = LANES_END + 6
HEIGHT = AXIS_Y + 52  # axis labels and two legend rows
SUMMARY_HEIGHT = 70
LANE_NAMES = {"python": "PythonRunner", "graph": "GraphRunner"}
EXEC_COLORS = {"python": "#4c6ef5", "graph": "#12b886"}
MOMENT_COLORS = {"feed": "#1c7ed6", "fetch": "#e03131"}
REGION_COLOR = "#ae3ec9"  # a region call: a tick along the foot of the PythonRunner's lane
PHASE_COLORS = {"tracing": "#f59f00", "coexec": "#2f9e44", "fallback": "#e03131",
                "eager": "#adb5bd"}
LABEL_STEPS = (1, 2, 5, 10, 20, 50, 100)


def last_iterations(spans: Sequence, stats: Sequence, window: int) -> tuple[list, list]:
    """The spans and stats of the last ``window`` iterations (spans in any order: a runner's
    spans may come after the other's, and late)."""
    last = max([s.iteration for s in stats[-1:]] + [s.iteration for s in spans], default=-1)
    first = last - window + 1
    i = len(stats)
    while i > 0 and stats[i - 1].iteration >= first:
        i -= 1
    return [s for s in spans if s.iteration >= first], list(stats[i:])


def summary(stats: Sequence) -> dict[str, float]:
    """Totals over ``stats``: seconds per ``<runner>_<exec|stall>``, wall seconds, iterations."""
    out = {f"{r}_{k}": 0.0 for r in RUNNERS for k in ("exec", "stall")}
    for s in stats:
        for key in out:
            out[key] += getattr(s, key) or 0.0
    out["wall"] = sum(s.t_end - s.t_start for s in stats)
    out["iterations"] = float(len(stats))
    return out


def timeline_svg(spans: Sequence, stats: Sequence, window: int = 20) -> str:
    """Two lanes over the last ``window`` iterations (an SVG string)."""
    spans, stats = last_iterations(spans, stats, window)
    iterations = sorted({s.iteration for s in stats} | {s.iteration for s in spans})
    canvas = SvgCanvas(WIDTH, HEIGHT, "terra-timeline-svg", iterations=len(iterations),
                       caption=caption(iterations))
    draw_lanes(canvas, spans, stats)
    return canvas.finish()


def caption(iterations: Sequence[int]) -> str:
    """What the lanes show: ``iterations #80-#99 (the last 20 of 100)``."""
    if not iterations:
        return "no iterations yet"
    first, last, shown = iterations[0], iterations[-1], len(iterations)
    span = f"iteration #{first}" if shown == 1 else f"iterations #{first}–#{last}"
    return span + (f" (all {shown})" if shown == last + 1 else f" (the last {shown} of {last + 1})")


def timeline_png(spans: Sequence, stats: Sequence, window: int = 20,
                 totals: dict | None = None) -> bytes:
    """The lanes of the last ``window`` iterations above the summary bar, as one PNG."""
    spans, stats_shown = last_iterations(spans, stats, window)
    canvas = PngCanvas(WIDTH, HEIGHT + SUMMARY_HEIGHT)
    draw_lanes(canvas, spans, stats_shown)
    canvas.dy = HEIGHT
    draw_summary(canvas, totals if totals is not None else summary(stats))
    return canvas.finish()


def draw_lanes(canvas, spans: Sequence, stats: Sequence) -> None:
    """The lanes, iterations, spans, time axis and legend of already-windowed records."""
    _lanes(canvas)
    times = [t for s in spans for t in (s.t_start, s.t_end)]
    times += [t for s in stats for t in (s.t_start, s.t_end)]
    if not times:
        canvas.text(LEFT, 60, "no iterations yet", fill="#868e96")
        return
    t0, t1 = min(times), max(times)
    scale = (WIDTH - LEFT - RIGHT) / max(t1 - t0, 1e-6)

    def x(t: float) -> float:
        return LEFT + (t - t0) * scale

    _iterations(canvas, stats, x)
    for s in spans:
        _span(canvas, s, x)
    _axis(canvas, t1 - t0, scale)
    _legend(canvas)


def _lanes(canvas) -> None:
    canvas.text(6, BAND_Y + BAND_H, "phase", fill="#495057")
    for runner, y in LANE_Y.items():
        with canvas.group(f"terra-lane terra-lane-{runner}"):
            canvas.rect(LEFT, y, WIDTH - LEFT - RIGHT, LANE_H, "#f8f9fa")
            canvas.text(6, y + 16, LANE_NAMES[runner], bold=True)


def _iterations(canvas, stats: Sequence, x) -> None:
    """Iteration boundaries and labels, the phase band, and phase changes labelled above it."""
    prev_phase = None
    for s in stats:
        xs, xe = x(s.t_start), x(s.t_end)
        color = PHASE_COLORS.get(s.phase, "#868e96")
        canvas.rect(xs, BAND_Y, max(xe - xs, 0.5), BAND_H, color,
                    cls=f"terra-phase terra-phase-{s.phase}",
                    title=f"iteration {s.iteration}: {s.phase}")
        canvas.line(xs, BAND_Y, xs, LANES_END, "#ced4da", dash=True, cls="terra-iteration")
        if prev_phase is not None and s.phase != prev_phase:
            with canvas.group("terra-phase-change"):
                canvas.line(xs, PHASE_LABEL_Y + 3, xs, LANES_END, color, width=2)
                canvas.text(xs + 3, PHASE_LABEL_Y, f"→ {s.phase}", fill=color, bold=True)
        prev_phase = s.phase
    for s, xs in _labelled(stats, x):
        canvas.text(xs, ITERATION_LABEL_Y, f"#{s.iteration}", fill="#495057", anchor="middle")


def _labelled(stats: Sequence, x) -> list[tuple]:
    """(stats, x) of the iterations to label, at the middle of each: every iteration when the
    labels fit, else every 2nd, 5th, 10th ... (whole multiples read as a scale, not as gaps)."""
    mids = [(s, (x(s.t_start) + x(s.t_end)) / 2) for s in stats]
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
    xs = x(s.t_start)
    ms = (s.t_end - s.t_start) * 1e3
    title = f"{LANE_NAMES.get(s.runner, s.runner)} {s.kind} · iteration {s.iteration}" \
        f" · {s.phase} · {ms:.3f} ms"
    cls = f"terra-span terra-{s.kind} terra-{s.runner}"
    if s.kind == "region":
        canvas.rect(xs, y + LANE_H - 4, max(x(s.t_end) - xs, 1.5), 4, REGION_COLOR, cls=cls,
                    title=f"region call {s.label} · iteration {s.iteration} · {ms:.3f} ms")
        return
    if s.kind in ("feed", "fetch"):
        with canvas.group(cls, title):
            _moment(canvas, s.kind, xs, y)
        return
    fill = EXEC_COLORS.get(s.runner, "#868e96") if s.kind == "exec" else HATCH
    canvas.rect(xs, y + 3, max(x(s.t_end) - xs, 1.0), LANE_H - 6, fill, cls=cls, title=title)


def _moment(canvas, kind: str, xs: float, y: float, height: float = LANE_H) -> None:
    """A feed: a triangle pointing down onto the lane; a fetch: pointing up from below it."""
    color = MOMENT_COLORS[kind]
    y0, d = (y, -6) if kind == "feed" else (y + height, 6)
    canvas.line(xs, y, xs, y + height, color)
    canvas.polygon([(xs, y0), (xs - 4, y0 + d), (xs + 4, y0 + d)], color)


def _axis(canvas, duration: float, scale: float) -> None:
    step = _nice_step(duration * 1e3 / 8)
    canvas.line(LEFT, AXIS_Y, WIDTH - RIGHT, AXIS_Y, "#adb5bd")
    t = 0.0
    while t <= duration * 1e3 + 1e-9:
        xt = LEFT + t / 1e3 * scale
        canvas.line(xt, AXIS_Y, xt, AXIS_Y + 4, "#adb5bd")
        canvas.text(xt, AXIS_Y + 15, f"{t:g} ms", fill="#495057", anchor="middle")
        t += step


def _nice_step(raw_ms: float) -> float:
    if raw_ms <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw_ms))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw_ms)


def _legend(canvas) -> None:
    """Every mark the lanes use, in two rows: runner marks, then the phases."""
    y = AXIS_Y + 32
    x = _swatch(canvas, 6, y, "PythonRunner exec", EXEC_COLORS["python"])
    x = _swatch(canvas, x, y, "GraphRunner exec", EXEC_COLORS["graph"])
    x = _swatch(canvas, x, y, "stall (waiting)", HATCH)
    for kind, text in (("feed", "feed (Python → graph)"),
                       ("fetch", "fetch (graph → Python)")):
        _moment(canvas, kind, x + 4, y - 7, height=6)
        canvas.text(x + 12, y, text)
        x += 24 + 6 * len(text)
    canvas.line(x, y - 9, x, y + 1, "#868e96", dash=True)
    canvas.text(x + 6, y, "#n: iteration n starts")
    y += 16
    x = _label(canvas, 6, y, "phase band:")
    for phase, color in PHASE_COLORS.items():
        x = _swatch(canvas, x, y, phase, color)
    canvas.line(x, y - 9, x, y + 1, PHASE_COLORS["fallback"], width=2)
    text = "→ phase: the phase changes"
    canvas.text(x + 6, y, text)
    x += 18 + 6 * len(text)
    canvas.rect(x, y - 3, 14, 4, REGION_COLOR)
    canvas.text(x + 18, y, "region call (one function answers a Keras call)")


def _swatch(canvas, x: float, y: float, text: str, fill: str) -> float:
    canvas.rect(x, y - 8, 14, 9, fill)
    canvas.text(x + 18, y, text)
    return x + 30 + 6 * len(text)


def _label(canvas, x: float, y: float, text: str) -> float:
    canvas.text(x, y, text, fill="#495057")
    return x + 12 + 6 * len(text)


def summary_svg(totals: dict[str, float]) -> str:
    """The Figure 6 breakdown: per runner, ms per iteration split into exec and stall."""
    canvas = SvgCanvas(WIDTH, SUMMARY_HEIGHT, "terra-summary-svg")
    draw_summary(canvas, totals)
    return canvas.finish()


def draw_summary(canvas, totals: dict[str, float]) -> None:
    n = max(totals.get("iterations", 0.0), 1.0)
    per = {r: (totals[f"{r}_exec"] / n, totals[f"{r}_stall"] / n) for r in RUNNERS}
    longest = max(sum(v) for v in per.values()) or 1.0
    for i, (runner, (ex, st)) in enumerate(per.items()):
        y = 6 + 24 * i
        w_ex, w_st = 420 * ex / longest, 420 * st / longest
        total = ex + st
        share = f"exec {100 * ex / total:.0f}% · stall {100 * st / total:.0f}%" if total else "idle"
        with canvas.group(f"terra-summary-row terra-summary-{runner}"):
            canvas.text(6, y + 13, LANE_NAMES[runner], bold=True)
            canvas.rect(LEFT, y, w_ex, 18, EXEC_COLORS[runner], cls="terra-summary-exec")
            canvas.rect(LEFT + w_ex, y, w_st, 18, HATCH, cls="terra-summary-stall")
            canvas.text(LEFT + 430, y + 13, f"{total * 1e3:.2f} ms/iteration · {share}")
    label = f"mean per iteration over all {int(totals.get('iterations', 0))} iterations:"
    x = _label(canvas, LEFT, 64, label)
    x = _swatch(canvas, x, 64, "exec", EXEC_COLORS["python"])
    _swatch(canvas, x, 64, "stall", HATCH)
