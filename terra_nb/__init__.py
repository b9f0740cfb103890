"""terra-nb: imperative-symbolic co-execution (Terra, NeurIPS 2021) for TensorFlow 2.

The engine: ``Terra`` runs a training loop and builds its ``TraceGraph``. It does not import
IPython; the notebook extension lives in ``kernel_ext`` (``%load_ext terra_nb``). The data types
(``TraceGraph``, ``Trace``, ``RunnerSpan``) import without TensorFlow; ``Terra`` and the runtime
load TensorFlow on first use.
"""

from .errors import GraphError, TerraError, TerraUsageError
from .timeline import RunnerSpan, to_chrome_trace
from .trace.records import Source, TensorSpec, Trace, TraceOp
from .trace.tracegraph import TraceGraph, TraceNode, check_graph

_RUNTIME = ("MODES", "Fallback", "IterationStats", "Learned", "Terra")

__all__ = [
    *_RUNTIME,
    "GraphError",
    "RunnerSpan",
    "Source",
    "TensorSpec",
    "TerraError",
    "TerraUsageError",
    "Trace",
    "TraceGraph",
    "TraceNode",
    "TraceOp",
    "check_graph",
    "to_chrome_trace",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _RUNTIME:  # the runtime imports TensorFlow: only when asked for
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module 'terra_nb' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """``%load_ext terra_nb``: delegates to ``kernel_ext`` (imported only here)."""
    import kernel_ext

    kernel_ext.load_ipython_extension(ipython)


def unload_ipython_extension(ipython) -> None:
    import kernel_ext

    kernel_ext.unload_ipython_extension(ipython)
