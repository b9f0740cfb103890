"""``TimelineView``: the runners' timeline over the whole run and the exec/stall summary.

Python draws both SVGs from ``RunnerSpan``/``IterationStats`` records (``timeline_svg.py``): the
last ``window`` iterations while ``view_range`` is empty, else that range of loop time. The
browser (``timeline_view.js``) pans and zooms by setting ``view_range`` (Python draws the range
again), shows hover details, and has an export button that asks Python for the Chrome-trace JSON
of every span (it opens in https://ui.perfetto.dev).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anywidget
import traitlets as t

from ..timeline import to_chrome_trace
from .saved import picture_metadata
from .static import timeline_bundle
from .timeline_summary import summary, summary_svg
from .timeline_svg import timeline_svg

HERE = Path(__file__).parent


class TimelineState(t.HasTraits):
    """Timeline traits and their Python side, shared by ``TimelineView`` and ``Dashboard``."""

    timeline_svg = t.Unicode("").tag(sync=True)
    summary_svg = t.Unicode("").tag(sync=True)
    window = t.Int(20).tag(sync=True)
    # seconds from the first iteration's start: the range the lanes show; [] follows the last
    # ``window`` iterations (a running loop's newest)
    view_range = t.List(t.Float(), default_value=[]).tag(sync=True)

    _all_spans: Callable[[], Sequence]

    def _init_timeline_state(self, all_spans: Callable[[], Sequence]) -> None:
        self._all_spans = all_spans
        self.on_msg(self._on_timeline_msg)
        self.observe(lambda change: self.redraw_timeline(), names=["view_range", "window"])

    def redraw_timeline(self) -> None:
        """Draw the lanes again (the view panned or zoomed); each view knows its records."""

    def draw_timeline(self, spans: Sequence, stats: Sequence, totals: dict | None = None) -> None:
        """Redraw the lanes of ``spans``/``stats`` (every iteration's: the window is chosen
        here), and the summary bar from ``totals`` (default: ``summary(stats)``)."""
        lanes = timeline_svg(spans, stats, self.window, self.view_range)
        bar = summary_svg(totals if totals is not None else summary(stats))
        with self.hold_sync():
            self.timeline_svg = lanes
            self.summary_svg = bar

    def chrome_trace(self) -> str:
        """Chrome-trace JSON of every span so far (Perfetto / chrome://tracing)."""
        return to_chrome_trace(self._all_spans())

    def export_chrome_trace(self, path: str | Path) -> Path:
        """Write ``chrome_trace()`` to ``path``; returns the path."""
        path = Path(path)
        path.write_text(self.chrome_trace())
        return path

    def _on_timeline_msg(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "chrome_trace":
            self.send({"type": "chrome_trace", "json": self.chrome_trace()})


def timeline_text(stats) -> str:
    """One summary line of a timeline for text-only front ends."""
    phases: dict[str, int] = {}
    for s in stats:
        phases[s.phase] = phases.get(s.phase, 0) + 1
    parts = ", ".join(f"{n} {p}" for p, n in phases.items())
    return f"Runner timeline: {len(stats)} iterations ({parts})"


class TimelineView(TimelineState, anywidget.AnyWidget):
    """The timeline of a finished (or running) loop: ``TimelineView(terra.spans, terra.stats)``."""

    _esm = HERE / "timeline_view.js"
    _css = HERE / "views.css"

    def __init__(self, spans: Sequence = (), stats: Sequence = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self._spans, self._stats = tuple(spans), tuple(stats)
        self._init_timeline_state(lambda: self._spans)
        self.draw_timeline(self._spans, self._stats)

    def redraw_timeline(self) -> None:
        self.draw_timeline(self._spans, self._stats)

    def _repr_mimebundle_(self, **kwargs):
        data, metadata = super()._repr_mimebundle_(**kwargs)
        data.update(timeline_bundle(self._spans, self._stats, self.window,
                                    view_range=self.view_range))
        data["text/plain"] = timeline_text(self._stats)
        return data, picture_metadata(metadata)  # saved as its picture (saved.py)

    def summary(self) -> dict[str, float]:
        """Seconds per runner and kind, wall seconds and iterations (see ``timeline_svg``)."""
        return summary(self._stats)
