"""Regions (DESIGN section 5b): an outermost call from the loop into a Keras object (a layer or
model ``__call__``, a loss ``__call__``, an optimizer ``apply_gradients``, a metric's
``update_state``) answered, in steady
state, by one compiled forward function made from the ops recorded when the call ran eagerly,
and on the gradient tape by one op whose backward is one compiled function; the object's Python
does not run. Guarded by the object, the argument specs, ``training``, the Python state
reachable from the object (attributes, what they hold, globals its code names) and the variables
created; refused when a traced run shows a Python-visible effect.

    recording   the tee sink of one call; Recording: its ops as wired SegmentOps
    python_state  PythonState: the Python a region's call may read, compared on every hit
    effects     EffectProbe: stdout/stderr writes, changed state, random state, side outputs
    backward    B: TensorFlow's gradient functions over the recorded ops, in eager tape order
    region      Region: F, B, a hit; FastCall: a concrete function as one eager op
    families    shape families: calls differing only in argument shapes share one F
    tape        a tape region: a tape's ops copied by a tee, wired; G, its gradient function
    tapes       Tapes: GradientTape.gradient answered by G once it pays (off: regions="calls")
    table       Regions: guard, traced calls, formation, hits, misses, refusals
    summary     what the regions did, printable (terra.regions, explain())
    intercept   the wrappers on Keras' and GradientTape's methods while a Terra with regions
                is open
"""

from .intercept import Interception
from .summary import Explained, RegionInfo, RegionSummary

__all__ = ["Explained", "Interception", "RegionInfo", "RegionSummary"]
