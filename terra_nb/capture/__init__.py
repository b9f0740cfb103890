"""Stage 1, at the moment an op is called: the hooks on TensorFlow's eager execution, the
placeholder they hand back in co-execution, the op's program location, normalised attrs, call
signature, and the recorder that turns one iteration's ops into a ``Trace``.

The hooks' API is re-exported here: ``capture.bypass()``, ``capture.capturing(sink)``.
"""

from . import forward_mode
from .constants import eager_constant
from .hooks import (
    bypass,
    capturing,
    hold_placeholders,
    hold_until_collected,
    holds_placeholder,
    installed,
    is_installed,
    quiet_reads,
    reads_quietly,
    real_values,
    release_placeholders,
    set_barrier,
)

__all__ = [
    "bypass",
    "capturing",
    "eager_constant",
    "hold_placeholders",
    "hold_until_collected",
    "holds_placeholder",
    "installed",
    "is_installed",
    "quiet_reads",
    "reads_quietly",
    "real_values",
    "release_placeholders",
    "set_barrier",
]

forward_mode.install()  # once, for good: an accumulator entered before any Terra is counted too
