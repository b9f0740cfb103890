"""Static pictures: the same SVGs as the widgets, as HTML for front ends without a widget manager
(nbconvert HTML, plain renderers). No IPython, no anywidget: objects with ``_repr_html_``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from ..tracegraph import TraceGraph
from .graph_model import as_graph
from .graph_picture import GraphPicture, draw_graph
from .timeline_svg import summary, summary_svg, timeline_svg

_BOX = (
    'style="font-family:Helvetica,sans-serif;font-size:12px;border:1px solid #dee2e6;'
    'border-radius:6px;padding:6px;max-width:100%;"'
)
_SCROLL = 'style="max-height:520px;overflow:auto;"'


def graph_html(picture: GraphPicture, title: str = "TraceGraph") -> str:
    """A titled, scrollable box around the graph SVG; the layout message and, when Graphviz is
    missing, the DOT text (paste it into any Graphviz viewer)."""
    parts = [f'<div class="terra-static terra-static-graph" {_BOX}>', f"<b>{escape(title)}</b>"]
    if picture.message:
        parts.append(
            f'<div class="terra-message" style="color:#c92a2a">{escape(picture.message)}</div>'
        )
    parts.append(f'<div {_SCROLL}>{picture.svg}</div>')
    if picture.message:
        parts.append(f"<details><summary>DOT</summary><pre>{escape(picture.dot)}</pre></details>")
    parts.append(_LEGEND + "</div>")
    return "".join(parts)


_LEGEND = (
    '<div class="terra-legend" style="color:#495057;margin-top:4px">'
    "▶ op: feed input · op ▶: fetched output · hexagon: branch point, edges <i>case k</i> · "
    "dashed box: chain of ops on one line · purple: loop (trip counts) · "
    '<span style="color:#e8590c">orange</span>: current iteration · '
    '<span style="background:#ffec99">yellow</span>: new nodes</div>'
)


def timeline_html(
    spans: Sequence, stats: Sequence, window: int = 20, totals: dict | None = None
) -> str:
    """The two runner lanes over the last ``window`` iterations, and the summary bar (from
    ``totals``, default: the totals of ``stats``)."""
    return (
        f'<div class="terra-static terra-static-timeline" {_BOX}><b>Timeline</b> '
        f'<span style="color:#868e96">last {window} iterations</span>'
        f'<div style="overflow-x:auto">{timeline_svg(spans, stats, window)}</div>'
        f"{summary_svg(totals or summary(stats))}</div>"
    )


def counters_html(counters: dict) -> str:
    """The dashboard counters as one line of HTML."""
    cells = " · ".join(f"<b>{escape(str(k))}</b> {escape(str(v))}" for k, v in counters.items())
    return f'<div class="terra-static terra-counters" {_BOX}>{cells}</div>'


class StaticGraph:
    """A TraceGraph picture that displays as HTML (SVG inside)."""

    def __init__(
        self,
        graph: TraceGraph | str | dict,
        *,
        current: Iterable[int] = (),
        new: Iterable[int] = (),
        **options,
    ) -> None:
        self.picture = draw_graph(as_graph(graph), current=current, new=new, **options)

    def _repr_html_(self) -> str:
        return graph_html(self.picture)

    def __repr__(self) -> str:
        return f"<StaticGraph {len(self.picture.elements)} elements>"


class StaticTimeline:
    """A timeline picture that displays as HTML."""

    def __init__(self, spans: Sequence, stats: Sequence, window: int = 20) -> None:
        self.spans, self.stats, self.window = tuple(spans), tuple(stats), window

    def _repr_html_(self) -> str:
        return timeline_html(self.spans, self.stats, self.window)

    def __repr__(self) -> str:
        return f"<StaticTimeline {len(self.stats)} iterations>"
