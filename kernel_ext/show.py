"""Showing a run: the ``terra_nb.views`` widgets when they are installed, plain text otherwise.

The views are imported lazily and are optional: when they are missing or fail, the text fallback
is printed and the cell goes on. A failing view prints one line of warning, never a traceback.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from .report import text_timeline


def load_views() -> ModuleType | None:
    """``terra_nb.views`` if it imports, else None."""
    try:
        from terra_nb import views
    except ImportError:
        return None
    return views


def _warn(what: str, error: BaseException) -> None:
    print(f"terra: {what} failed ({type(error).__name__}: {error}); showing text", file=sys.stderr)


def start_dashboard(terra: Any) -> bool:
    """Start the live dashboard for ``terra``; False when it is unavailable (or failed)."""
    views = load_views()
    if views is None or not hasattr(views, "live_dashboard"):
        print("terra: live view unavailable (terra_nb.views is not installed); showing text")
        return False
    try:
        views.live_dashboard(terra)
    except ImportError as error:  # e.g. the widget library is missing
        print(f"terra: live view unavailable ({error}); showing text")
        return False
    except Exception as error:
        _warn("the live view", error)
        return False
    return True


def show_graph(graph: Any) -> None:
    """The TraceGraph widget, or the TraceGraph's text form."""
    views = load_views()
    if views is not None and hasattr(views, "show_graph"):
        try:
            views.show_graph(graph)
            return
        except ImportError:  # no widget library: the text form below is the view
            views = None
        except Exception as error:
            _warn("the graph view", error)
    print(repr(graph))


def show_timeline(spans: Any, stats: Any) -> None:
    """The timeline widget, or one text line per iteration."""
    views = load_views()
    if views is not None and hasattr(views, "show_timeline"):
        try:
            views.show_timeline(spans, stats)
            return
        except ImportError:
            pass
        except Exception as error:
            _warn("the timeline view", error)
    print(text_timeline(stats))
