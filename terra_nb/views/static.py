"""Static pictures: the same drawings as the widgets, as ``image/svg+xml`` and ``image/png``
outputs, for front ends without a widget manager and for saved notebooks.

Pictures, not HTML: JupyterLab sanitises the HTML of an untrusted notebook (a saved one, reopened)
and strips inline SVG from it, and it never renders an ``image/svg+xml`` output there either, so
each bundle carries a PNG too (JupyterLab, Notebook 7, nbconvert and GitHub all show it). No
IPython, no anywidget: objects with ``_repr_mimebundle_``.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

from ..trace.tracegraph import TraceGraph
from .graph_dot import LayoutUnavailable, render
from .graph_model import as_graph
from .graph_picture import GraphPicture, draw_graph
from .timeline_summary import summary
from .timeline_svg import timeline_png, timeline_svg

SVG, PNG = "image/svg+xml", "image/png"


def graph_bundle(picture: GraphPicture) -> dict[str, str | bytes]:
    """The graph as SVG and, when Graphviz lays it out, PNG (the built-in layout is SVG only)."""
    bundle: dict[str, str | bytes] = {SVG: picture.svg}
    if not picture.message:
        try:
            bundle[PNG] = render(picture.dot, "png")
        except LayoutUnavailable:
            pass
    return bundle


def timeline_bundle(
    spans: Sequence, stats: Sequence, window: int = 20, totals: dict | None = None,
    view_range: Sequence[float] = (),
) -> dict[str, str | bytes]:
    """The overview and the lanes of the last ``window`` iterations (or of ``view_range``) and
    the summary bar (from ``totals``, default: the totals of ``stats``): the lanes as SVG,
    lanes and summary as one PNG."""
    return {
        SVG: timeline_svg(spans, stats, window, view_range),
        PNG: timeline_png(spans, stats, window, totals or summary(stats), view_range),
    }


def stack_png(header: str, pictures: Iterable[bytes]) -> bytes:
    """One PNG: a line of ``header`` text above ``pictures`` (PNG bytes), left-aligned."""
    from PIL import Image, ImageDraw

    from .canvas import _font

    images = [Image.open(io.BytesIO(p)).convert("RGB") for p in pictures]
    width = max([i.width for i in images] + [600])
    out = Image.new("RGB", (width, 40 + sum(i.height + 16 for i in images)), "white")
    ImageDraw.Draw(out).text((12, 12), header, fill="#212529", font=_font(22, False))
    y = 40
    for image in images:
        out.paste(image, (0, y))
        y += image.height + 16
    buffer = io.BytesIO()
    out.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def counters_text(counters: dict) -> str:
    """The dashboard counters as one line."""
    shown = ("iteration", "phase", "iterations_per_s", "fallbacks", "ops", "nodes", "status")
    return " · ".join(f"{k.replace('_', ' ')} {counters[k]}" for k in shown if k in counters)


class StaticGraph:
    """A TraceGraph picture (SVG and PNG outputs)."""

    def __init__(
        self,
        graph: TraceGraph | str | dict,
        *,
        current: Iterable[int] = (),
        new: Iterable[int] = (),
        **options,
    ) -> None:
        self.picture = draw_graph(as_graph(graph), current=current, new=new, **options)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {**graph_bundle(self.picture), "text/plain": repr(self)}

    def __repr__(self) -> str:
        return f"<StaticGraph {len(self.picture.elements)} elements>"


class StaticTimeline:
    """A timeline picture (SVG and PNG outputs)."""

    def __init__(self, spans: Sequence, stats: Sequence, window: int = 20) -> None:
        self.spans, self.stats, self.window = tuple(spans), tuple(stats), window

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = timeline_bundle(self.spans, self.stats, self.window)
        return {**bundle, "text/plain": repr(self)}

    def __repr__(self) -> str:
        return f"<StaticTimeline {len(self.stats)} iterations>"
