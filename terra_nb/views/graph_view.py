"""``GraphView``: the TraceGraph laid out by Graphviz, as SVG in an anywidget.

Python lays the graph out (``dot``, or the built-in layout) and syncs the SVG and the graph JSON;
the browser (``graph_view.js``) pans and zooms, marks the current iteration's path and the new
nodes, shows node details on hover/click, and expands/collapses chains and loops by editing
``toggled`` (Python then lays the graph out again).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import anywidget
import traitlets as t

from ..trace.tracegraph import TraceGraph
from .graph_model import as_graph
from .graph_picture import GraphPicture, draw_graph, graph_payload, source_lines
from .saved import picture_metadata
from .static import graph_bundle

HERE = Path(__file__).parent


class GraphState(t.HasTraits):
    """Graph traits and their Python side, shared by ``GraphView`` and ``Dashboard``."""

    svg = t.Unicode("").tag(sync=True)
    graph_json = t.Unicode('{"nodes": [], "edges": []}').tag(sync=True)
    current = t.List(t.Int()).tag(sync=True)
    new_nodes = t.List(t.Int()).tag(sync=True)
    toggled = t.List(t.Unicode()).tag(sync=True)
    selected = t.Unicode("").tag(sync=True)
    search = t.Unicode("").tag(sync=True)  # the search box's text, shared by every view of it
    layout_message = t.Unicode("").tag(sync=True)
    min_chain = t.Int(3)
    collapse_loops = t.Union([t.Bool(), t.Unicode()], default_value="auto")

    _graph: TraceGraph | None = None
    _sources: dict[str, str] | None = None
    _lock: threading.RLock

    def _init_graph_state(self) -> None:
        self._lock = threading.RLock()
        self._graph = None
        self._sources = {}
        self.observe(self._on_toggled, names=["toggled", "min_chain", "collapse_loops"])

    def set_graph(
        self,
        graph: TraceGraph | str | dict,
        *,
        current: Iterable[int] = (),
        new: Iterable[int] = (),
        layout: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """Show ``graph`` with ``current`` (the last iteration's path) and ``new`` node ids
        marked. ``layout(job)`` runs the layout job elsewhere (a worker); default: now."""
        g = as_graph(graph)
        self._graph = g
        job = self._layout_job(g, tuple(new))
        if layout is None:
            job()
        else:
            layout(job)
        with self._lock:
            self.current = list(current)

    def relayout(self) -> None:
        """Lay the current graph out again (after options changed)."""
        if self._graph is not None:
            self._layout_job(self._graph, tuple(self.new_nodes))()

    def _layout_job(self, g: TraceGraph, new: tuple[int, ...]) -> Callable[[], None]:
        toggled = tuple(self.toggled)
        options = {"min_chain": self.min_chain, "collapse_loops": self.collapse_loops}

        def job() -> None:
            picture = draw_graph(g, toggled=toggled, bake=False, **options)
            self._sources = source_lines(g, self._sources)
            payload = graph_payload(g, picture, self._sources)
            with self._lock, self.hold_sync():
                self.svg = picture.svg
                self.graph_json = payload
                self.layout_message = picture.message
                self.new_nodes = list(new)

        return job

    def _on_toggled(self, change) -> None:
        self.relayout()

    def static_picture(self) -> GraphPicture:
        """The graph as a static picture, with the current path and new nodes drawn in."""
        return draw_graph(
            self._graph or as_graph({"nodes": [], "edges": []}),
            current=self.current,
            new=self.new_nodes,
            toggled=self.toggled,
            min_chain=self.min_chain,
            collapse_loops=self.collapse_loops,
        )

    def details(self, node_id: int) -> dict:
        """The exported data of one node (what the details panel shows)."""
        return next(n for n in json.loads(self.graph_json)["nodes"] if n["id"] == node_id)


def graph_text(graph: TraceGraph | None) -> str:
    """What a text-only front end shows for a graph view: one summary line."""
    if graph is None:
        return "TraceGraph view (empty)"
    return (
        f"TraceGraph view: {len(graph.nodes)} nodes, {len(graph.nodes_of('loop'))} loops, "
        f"{len(graph.branch_points)} branch points"
    )


class GraphView(GraphState, anywidget.AnyWidget):
    """A live or static view of one TraceGraph (see the module docstring)."""

    _esm = HERE / "graph_view.js"
    _css = HERE / "views.css"

    def __init__(self, graph: TraceGraph | str | dict | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._init_graph_state()
        if graph is not None:
            self.set_graph(graph)

    def _repr_mimebundle_(self, **kwargs):
        data, metadata = super()._repr_mimebundle_(**kwargs)
        data.update(graph_bundle(self.static_picture()))
        data["text/plain"] = graph_text(self._graph)
        return data, picture_metadata(metadata)  # saved as its picture (saved.py)
