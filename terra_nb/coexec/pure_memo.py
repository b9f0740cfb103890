"""Pure ops on small real values in a co-executed iteration, answered from their earlier outputs.

An op whose inputs are all real values (no placeholder, no variable) runs eagerly in Python's
thread. While the GraphRunner works on the other core, such an op took 20-300 us against 9 alone
(CPU and GIL contention), and the gradient of ``reduce_mean`` runs three of them every step
(Reshape, Tile and RealDiv of constants): 18% of mlp-small's co-executed iteration. Their inputs
have the same values every iteration, and a stateless op's outputs are a function of its inputs,
attrs and device, so the memo keys an op by those values and hands back the tensors it made
before (tensors never change).

Two uses of one tensor are not two tensors to a gradient tape, so a memoised output is handed
out once per iteration, and never to an op a tape or a ``ForwardAccumulator`` records (which
must see the op run to give its output a JVP). Each time it is a tensor object of its
own (the same value, copied on its device without copying the buffer): code keys tensors by
identity (``t.ref()``, weak references) and Keras sets attributes on them (``_keras_mask``), so
one object handed out twice would carry one iteration's into the next (adversarial review).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context, record
from tensorflow.python.framework import dtypes, ops
from tensorflow.python.framework.tensor_shape import TensorShape

from ..capture.signature import size_of

_EAGER = ops.EagerTensor
# resource and variant: a handle, not a value; string: _numpy_internal gives object pointers
_NOT_VALUES = frozenset({dtypes.resource.as_datatype_enum, dtypes.variant.as_datatype_enum,
                         dtypes.string.as_datatype_enum})
_PLAIN = (int, bool, str, bytes, type(None), dtypes.DType)
MAX_INPUT_ELEMENTS = 64  # a tensor input's values are part of the key: small ones only
MAX_OUTPUT_ELEMENTS = 4096  # held for the loop's lifetime
MAX_ENTRIES = 4096  # then forgotten at once: a loop of new values each time only misses


class _NoKey(Exception):
    """An input whose value the key cannot hold (large, a handle, an arbitrary object)."""


def _key_of(x: Any) -> Any:
    """A hashable value that equals another's exactly when the two inputs are the same value."""
    t = type(x)
    if t is _EAGER:
        enum = x._datatype_enum()
        shape = x._shape_tuple()
        if enum in _NOT_VALUES or size_of(shape) > MAX_INPUT_ELEMENTS:
            raise _NoKey
        return (enum, shape, x._numpy_internal().tobytes())
    if t is float:  # hex: -0.0 is not 0.0, and a NaN equals itself
        return (t, x.hex())
    if t in _PLAIN:
        return (t, x)
    if t is list or t is tuple:
        return (t, tuple(_key_of(v) for v in x))
    if t is np.ndarray or isinstance(x, np.generic):
        if x.dtype.hasobject or x.size > MAX_INPUT_ELEMENTS:
            raise _NoKey
        return (x.dtype.str, x.shape, x.tobytes())
    if t is TensorShape:
        return (t, None if x.rank is None else tuple(x.as_list()))
    raise _NoKey


class PureOpMemo:
    """Outputs of stateless ops by the values of their inputs and attrs (one loop's)."""

    def __init__(self) -> None:
        self._outputs: dict[tuple, Any] = {}
        self._handed: set[int] = set()  # ids of memoised outputs handed out this iteration
        self.hits = 0

    def new_iteration(self) -> None:
        self._handed.clear()

    def key(self, op_name, args, attrs, inputs: list, device: str) -> tuple | None:
        """The memo key of this call (``inputs``: its flat inputs, the PythonRunner's), or None
        when it cannot be memoised."""
        if record.could_possibly_record() and pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes(
                [x for x in inputs if type(x) is _EAGER]):
            return None  # a tape or an accumulator records it: it must see the op run
        try:
            return (op_name, device, _key_of(args), _key_of(attrs))
        except _NoKey:
            return None

    def get(self, key: tuple):
        """Tensors of their own with the values of the outputs made before for ``key`` (a list
        when they are a list), or None."""
        outputs = self._outputs.get(key)
        if outputs is None or id(outputs) in self._handed:
            return None
        self._handed.add(id(outputs))
        self.hits += 1
        ctx = context.context()
        if type(outputs) is tuple:
            return [o._copy_nograd(ctx, o.device) for o in outputs]
        return outputs._copy_nograd(ctx, outputs.device)

    def put(self, key: tuple, outputs) -> None:
        """Keep ``outputs`` (a tensor or a list of them) when they are small."""
        flat = outputs if type(outputs) is list else [outputs]
        if not all(type(o) is _EAGER and size_of(o._shape_tuple()) <= MAX_OUTPUT_ELEMENTS
                   for o in flat):
            return
        if len(self._outputs) >= MAX_ENTRIES:
            self._outputs.clear()
            self._handed.clear()
        kept = tuple(outputs) if type(outputs) is list else outputs
        self._outputs[key] = kept
        self._handed.add(id(kept))  # handed out now, by the op that made it
