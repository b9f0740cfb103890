"""terra-nb: imperative-symbolic co-execution (Terra, NeurIPS 2021) for TensorFlow 2.

The engine: ``Terra`` runs a training loop and builds its ``TraceGraph``. It does not import
IPython; the notebook extension lives in ``kernel_ext`` (``%load_ext terra_nb``).
"""

from .errors import GraphError, TerraError, TerraUsageError
from .session import MODES, IterationStats, Terra
from .trace import Source, TensorSpec, Trace, TraceOp
from .tracegraph import TraceGraph, TraceNode, check_graph

__all__ = [
    "MODES",
    "GraphError",
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
