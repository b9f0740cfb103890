"""Showing a run: the ``terra_nb.views`` widgets in a notebook when they are installed, plain
text in a terminal IPython or without them.

The views are imported lazily and are optional: when they are missing or fail, the text fallback
is printed and the cell goes on. A failing view prints one line of warning, never a traceback.
The text forms: the TraceGraph listing (loops, cases, feeds and fetches, each op's source line)
and the per-iteration breakdown table.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from terra_nb.trace.dot import Listing, to_text

from .report import text_timeline


def is_terminal(shell: Any) -> bool:
    """A terminal IPython: widgets and display updates have no front end there."""
    try:
        from IPython.terminal.interactiveshell import TerminalInteractiveShell
    except ImportError:  # prompt_toolkit missing: no terminal shell either
        return False
    return isinstance(shell, TerminalInteractiveShell)


def graph_listing(graph: Any) -> str:
    """The TraceGraph as text: cells named ``In [n]``, source lines, cases, a legend."""
    return to_text(graph, Listing.of(graph))


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


def show_graph(graph: Any, terminal: bool = False) -> None:
    """The TraceGraph widget, or (terminal, no views) the TraceGraph listing."""
    views = None if terminal else load_views()
    if views is not None and hasattr(views, "show_graph"):
        try:
            views.show_graph(graph)
            return
        except ImportError:  # no widget library: the text form below is the view
            views = None
        except Exception as error:
            _warn("the graph view", error)
    print(graph_listing(graph))


def show_timeline(spans: Any, stats: Any, terminal: bool = False) -> None:
    """The timeline widget, or (terminal, no views) the per-iteration breakdown table."""
    views = None if terminal else load_views()
    if views is not None and hasattr(views, "show_timeline"):
        try:
            views.show_timeline(spans, stats)
            return
        except ImportError:
            pass
        except Exception as error:
            _warn("the timeline view", error)
    print(text_timeline(stats))
