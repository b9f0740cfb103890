"""Live views of terra-nb: the TraceGraph, the runners' timeline, and a dashboard of both.

    import terra_nb, terra_nb.views as views
    with terra_nb.Terra(mode="trace") as terra:
        dash = views.live_dashboard(terra)      # displays itself; updates while the loop runs
        for x, y in terra.loop(batches):
            ...
    views.show_graph(terra.graph)               # a graph view of the finished loop
    views.show_timeline(terra.spans, terra.stats)

The widgets (``GraphView``, ``TimelineView``, ``Dashboard``) need ``anywidget`` (``pip install
terra-nb[views]``); ``StaticGraph`` and ``StaticTimeline`` (SVG and PNG pictures, what nbconvert and
front ends without a widget manager show) do not. Graph layout uses the Graphviz ``dot``
binary; without it a simple built-in layout is drawn with a message saying so. The views read
only exported data: TraceGraph (JSON), ``RunnerSpan`` and ``IterationStats`` records.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .static import StaticGraph, StaticTimeline

_WIDGETS = {
    "GraphView": "graph_view",
    "TimelineView": "timeline_view",
    "Dashboard": "dashboard",
}
INSTALL = "pip install terra-nb[views]"

__all__ = [
    "Dashboard",
    "GraphView",
    "StaticGraph",
    "StaticTimeline",
    "TimelineView",
    "live_dashboard",
    "show_graph",
    "show_timeline",
]


def _widget_module(name: str):
    try:
        import anywidget  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"terra_nb.views.{name} is a Jupyter widget and needs anywidget: {INSTALL}"
        ) from err
    return import_module(f".{_WIDGETS[name]}", __name__)


def __getattr__(name: str) -> Any:
    if name in _WIDGETS:
        return getattr(_widget_module(name), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _display(obj: Any, **kwargs: Any) -> Any:
    """Display ``obj`` when running under IPython; elsewhere do nothing."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    if get_ipython() is None:
        return None
    return display(obj, **kwargs)


def live_dashboard(terra: Any, *, interval: float = 0.3, window: int = 20) -> Any:
    """A ``Dashboard`` for a running ``Terra``: displays it, subscribes it to every iteration
    (redrawing at most every ``interval`` seconds) and returns it."""
    dashboard = _widget_module("Dashboard").Dashboard(interval=interval, window=window)
    dashboard._display_handle = _display(dashboard, display_id=True)
    return dashboard.attach(terra)


def show_graph(graph: Any, **options: Any) -> Any:
    """Display a ``GraphView`` of ``graph`` (a TraceGraph or its JSON); returns the view.
    ``options``: ``min_chain``, ``collapse_loops`` ("auto", True, False)."""
    view = _widget_module("GraphView").GraphView(**options)
    view.set_graph(graph, new=_new_since_shown(graph))
    _display(view)
    return view


def show_timeline(spans: Any, stats: Any = (), *, window: int = 20) -> Any:
    """Display a ``TimelineView`` of ``spans`` and ``stats``; returns the view."""
    view = _widget_module("TimelineView").TimelineView(spans, stats, window=window)
    _display(view)
    return view


_last_shown: list = []


def _new_since_shown(graph: Any) -> list[int]:
    """Nodes added since the previous ``show_graph`` of the same loop's graph."""
    from .graph_model import as_graph, new_since

    g = as_graph(graph)
    earlier = _last_shown[0] if _last_shown else None
    _last_shown[:] = [g]
    return new_since(g, earlier)
