"""What a call's recorded ops may hold for its region to equal eager: two checks at formation.

- **Kernel state.** A stateful op that reads no resource keeps its state in its kernel (a
  ``tf.random.uniform`` with an op seed draws the next numbers of its own stream; ``tf.print``
  writes from the runtime). Eager keeps one kernel per call site; a region's function makes its
  own, whose stream starts again, and prints when the graph runs. Such an op refuses the region.
  ``Assert`` keeps no state.
- **Shapes are values unless proven static.** An op whose output shape depends on input values
  (``boolean_mask``, ``unique``, ``where``, a ``reshape`` to a computed size) computes its shape
  again in the region's function, but what Python read of it during the recorded call (a
  ``.shape[0]`` in a division, TensorFlow's own static-shape paths) was baked in, and B, traced
  with the recorded shapes, would fix it too. The recording is built once in a scratch graph from
  its argument specs and baked constants, with the ops that read variables as placeholders of
  their traced specs (a variable's reads take its declared shape); the ops whose inferred output
  shape is not the traced one are *value-shaped*: the region is refused if Python read one of
  their shapes (``CalleeWatch.shape_reads``), and else forms without a backward.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.eager import record
from tensorflow.python.framework import op_def_registry

from ..capture import bypass
from ..capture.functions import kernel_state
from ..coexec.lower import lower


def kernel_state_ops(rec) -> list[str]:
    """The op types of ``rec`` that keep state in their kernel (``functions.kernel_state``)."""
    return [op.op_type for op in rec.ops if kernel_state(op.op_type)]


def value_shaped_ops(rec) -> list[int]:
    """The positions of the ops of ``rec`` whose output shapes are not fixed by its argument
    specs and baked constants."""
    found: list[int] = []
    # nothing of the scratch build reaches the loop's hooks or its recording tapes
    with bypass(), record.stop_recording(), tf.Graph().as_default():
        env: dict[tuple, object] = {("arg", i): tf.compat.v1.placeholder(dtype, shape)
                                    for i, (dtype, shape) in enumerate(rec.args)}
        for p, op in enumerate(rec.ops):
            traced = [rec.out_specs[(p, k)] for k in range(op.n_outputs)]
            outputs = _built(op, env, rec, traced)
            shaped = True
            for k, (output, (_, shape)) in enumerate(zip(outputs, traced)):
                env[("op", p, k)] = output  # every output: a later op may read any of them
                shaped &= output.shape.rank is not None and \
                    tuple(output.shape.as_list()) == tuple(shape)
            if not shaped:
                found.append(p)
    return found


def _built(op, env: dict, rec, traced: list) -> list:
    """``op`` built in the scratch graph; placeholders of its traced specs when it reads a
    variable or cannot be built there (its shapes then come from the trace, as a variable's)."""
    if op_def_registry.get(op.op_type) is not None and not any(
            w.kind == "var" and w.index in rec.handles for w in op.inputs):
        inputs = [env[("op", w.index, w.output)] if w.kind == "op" else env[("arg", w.index)]
                  if w.kind == "arg" else tf.constant(rec.consts[w.index]) for w in op.inputs]
        try:
            return list(lower(op, inputs))
        except (TypeError, ValueError, tf.errors.OpError):
            pass
    return [tf.compat.v1.placeholder(dtype, shape) for dtype, shape in traced]
