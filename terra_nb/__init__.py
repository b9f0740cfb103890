"""terra-nb: imperative-symbolic co-execution (Terra, NeurIPS 2021) for TensorFlow 2.

The engine: ``Terra`` runs a training loop and builds its ``TraceGraph``. It does not import
IPython; the notebook extension lives in ``kernel_ext`` (``%load_ext terra_nb``).
"""

from .errors import GraphError, TerraError, TerraUsageError
from .session import MODES, Fallback, IterationStats, Learned, Terra
from .timeline import RunnerSpan, to_chrome_trace
from .trace import Source, TensorSpec, Trace, TraceOp
from .tracegraph import TraceGraph, TraceNode, check_graph

__all__ = [
    "MODES",
    "RunnerSpan",
    "to_chrome_trace",
    "Fallback",
    "GraphError",
    "Learned",
    "IterationStats",
    "Source",
    "TensorSpec",
    "Terra",
    "TerraError",
    "TerraUsageError",
    "Trace",
    "TraceGraph",
    "TraceNode",
    "TraceOp",
    "check_graph",
]
__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:
    """``%load_ext terra_nb``: delegates to ``kernel_ext`` (imported only here)."""
    import kernel_ext

    kernel_ext.load_ipython_extension(ipython)


def unload_ipython_extension(ipython) -> None:
    import kernel_ext

    kernel_ext.unload_ipython_extension(ipython)
