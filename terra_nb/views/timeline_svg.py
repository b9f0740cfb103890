"""The timeline picture: per iteration, a PythonRunner and a GraphRunner lane with exec and stall
spans, feed and fetch moments, iteration boundaries and phase changes, over a rolling window of
the last iterations; and the summary bar (the paper's Figure 6: exec/stall per runner).

Reads only ``RunnerSpan`` and ``IterationStats`` records (any object with those fields).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ..timeline import RUNNERS

WIDTH, LEFT, RIGHT = 920, 104, 12
LANE_Y = {"python": 34, "graph": 66}
LANE_H = 24
LANE_NAMES = {"python": "PythonRunner", "graph": "GraphRunner"}
EXEC_COLORS = {"python": "#4c6ef5", "graph": "#12b886"}
PHASE_COLORS = {"eager": "#adb5bd", "tracing": "#f59f00", "coexec": "#2f9e44",
                "fallback": "#e03131"}
DEFS = (
    '<defs><pattern id="terra-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e9ecef"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#adb5bd" stroke-width="3"/></pattern></defs>'
)


def last_iterations(spans: Sequence, stats: Sequence, window: int) -> tuple[list, list]:
    """The spans and stats of the last ``window`` iterations. Records come roughly in iteration
    order, so only the tail is scanned (a lagging runner may be up to ``window`` behind)."""
    last = max([s.iteration for s in stats[-1:]] + [s.iteration for s in spans[-1:]], default=-1)
    first = last - window + 1
    return _tail(spans, first, window), _tail(stats, first, window)


def _tail(records: Sequence, first: int, slack: int) -> list:
    i = len(records)
    while i > 0 and records[i - 1].iteration >= first - slack:
        i -= 1
    return [r for r in records[i:] if r.iteration >= first]


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
    times = [t for s in spans for t in (s.t_start, s.t_end)]
    times += [t for s in stats for t in (s.t_start, s.t_end)]
    if not times:
        return _frame(["<text x='104' y='60' fill='#868e96'>no iterations yet</text>"], 0)
    t0, t1 = min(times), max(times)
    scale = (WIDTH - LEFT - RIGHT) / max(t1 - t0, 1e-6)

    def x(t: float) -> float:
        return LEFT + (t - t0) * scale

    parts = _lanes() + _iterations(stats, x) + [_span(s, x) for s in spans]
    parts += _axis(t1 - t0, scale)
    return _frame(parts, len({s.iteration for s in stats} | {s.iteration for s in spans}))


def _frame(parts: list[str], iterations: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="terra-timeline-svg" width="{WIDTH}" '
        f'height="118" viewBox="0 0 {WIDTH} 118" font-family="Helvetica,sans-serif" '
        f'font-size="10" data-iterations="{iterations}">{DEFS}' + "".join(parts) + "</svg>"
    )


def _lanes() -> list[str]:
    out = []
    for runner, y in LANE_Y.items():
        out.append(
            f'<g class="terra-lane terra-lane-{runner}"><rect x="{LEFT}" y="{y}" '
            f'width="{WIDTH - LEFT - RIGHT}" height="{LANE_H}" fill="#f8f9fa"/>'
            f'<text x="6" y="{y + 16}" font-weight="bold">{LANE_NAMES[runner]}</text></g>'
        )
    return out


def _iterations(stats: Sequence, x) -> list[str]:
    """Iteration boundaries with labels (thinned so they don't overlap), the phase band and
    phase-change markers."""
    out, last_label, prev_phase = [], -1e9, None
    for s in stats:
        xs, xe = x(s.t_start), x(s.t_end)
        color = PHASE_COLORS.get(s.phase, "#868e96")
        out.append(
            f'<rect class="terra-phase terra-phase-{s.phase}" x="{xs:.1f}" y="22" '
            f'width="{max(xe - xs, 0.5):.1f}" height="6" fill="{color}">'
            f"<title>iteration {s.iteration}: {s.phase}</title></rect>"
        )
        out.append(
            f'<line class="terra-iteration" x1="{xs:.1f}" x2="{xs:.1f}" y1="18" y2="92" '
            'stroke="#ced4da" stroke-dasharray="2,2"/>'
        )
        if xs - last_label >= 34:
            out.append(f'<text x="{xs + 2:.1f}" y="16" fill="#495057">#{s.iteration}</text>')
            last_label = xs
        if prev_phase is not None and s.phase != prev_phase:
            out.append(
                f'<g class="terra-phase-change"><line x1="{xs:.1f}" x2="{xs:.1f}" y1="6" '
                f'y2="92" stroke="{color}" stroke-width="2"/><text x="{xs + 3:.1f}" y="30" '
                f'fill="{color}" font-weight="bold">→ {escape(s.phase)}</text></g>'
            )
        prev_phase = s.phase
    return out


def _span(s, x) -> str:
    y = LANE_Y.get(s.runner, LANE_Y["graph"])
    xs = x(s.t_start)
    ms = (s.t_end - s.t_start) * 1e3
    title = f"<title>{LANE_NAMES.get(s.runner, s.runner)} {s.kind} · iteration {s.iteration}" \
        f" · {s.phase} · {ms:.3f} ms</title>"
    cls = f"terra-span terra-{s.kind} terra-{s.runner}"
    if s.kind in ("feed", "fetch"):
        color = "#1c7ed6" if s.kind == "feed" else "#e03131"
        # feeds: a triangle pointing down onto the lane; fetches: pointing up from below it
        y0, d = (y, -6) if s.kind == "feed" else (y + LANE_H, 6)
        tip = f"{xs:.1f},{y0} {xs - 4:.1f},{y0 + d} {xs + 4:.1f},{y0 + d}"
        return (
            f'<g class="{cls}"><line x1="{xs:.1f}" x2="{xs:.1f}" y1="{y}" y2="{y + LANE_H}" '
            f'stroke="{color}"/><polygon points="{tip}" fill="{color}"/>{title}</g>'
        )
    fill = EXEC_COLORS.get(s.runner, "#868e96") if s.kind == "exec" else "url(#terra-hatch)"
    width = max(x(s.t_end) - xs, 1.0)
    return (
        f'<rect class="{cls}" x="{xs:.1f}" y="{y + 3}" width="{width:.1f}" '
        f'height="{LANE_H - 6}" fill="{fill}">{title}</rect>'
    )


def _axis(duration: float, scale: float) -> list[str]:
    step = _nice_step(duration * 1e3 / 8)
    out = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="96" y2="96" stroke="#adb5bd"/>']
    t = 0.0
    while t <= duration * 1e3 + 1e-9:
        xt = LEFT + t / 1e3 * scale
        out.append(
            f'<line x1="{xt:.1f}" x2="{xt:.1f}" y1="96" y2="100" stroke="#adb5bd"/>'
            f'<text x="{xt:.1f}" y="111" text-anchor="middle" fill="#495057">{t:g} ms</text>'
        )
        t += step
    return out


def _nice_step(raw_ms: float) -> float:
    if raw_ms <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw_ms))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw_ms)


def summary_svg(totals: dict[str, float]) -> str:
    """The Figure 6 breakdown: per runner, ms per iteration split into exec and stall."""
    n = max(totals.get("iterations", 0.0), 1.0)
    per = {r: (totals[f"{r}_exec"] / n, totals[f"{r}_stall"] / n) for r in RUNNERS}
    longest = max(sum(v) for v in per.values()) or 1.0
    rows = []
    for i, (runner, (ex, st)) in enumerate(per.items()):
        y = 6 + 24 * i
        w_ex, w_st = 420 * ex / longest, 420 * st / longest
        total = ex + st
        share = f"exec {100 * ex / total:.0f}% · stall {100 * st / total:.0f}%" if total else "idle"
        rows.append(
            f'<g class="terra-summary-row terra-summary-{runner}">'
            f'<text x="6" y="{y + 13}" font-weight="bold">{LANE_NAMES[runner]}</text>'
            f'<rect class="terra-summary-exec" x="{LEFT}" y="{y}" width="{w_ex:.1f}" '
            f'height="18" fill="{EXEC_COLORS[runner]}"/>'
            f'<rect class="terra-summary-stall" x="{LEFT + w_ex:.1f}" y="{y}" '
            f'width="{w_st:.1f}" height="18" fill="url(#terra-hatch)"/>'
            f'<text x="{LEFT + 430}" y="{y + 13}">{total * 1e3:.2f} ms/iteration · {share}</text>'
            "</g>"
        )
    label = f"breakdown over {int(totals.get('iterations', 0))} iterations"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="terra-summary-svg" width="{WIDTH}" '
        f'height="70" viewBox="0 0 {WIDTH} 70" font-family="Helvetica,sans-serif" '
        f'font-size="10">{DEFS}' + "".join(rows)
        + f'<text x="{LEFT}" y="66" fill="#868e96">{label} (exec ■, stall ▨)</text></svg>'
    )
