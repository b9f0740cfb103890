"""The PythonRunner's empty tensor: a ``tf.Tensor`` with a shape and dtype but no value yet.

A ``Placeholder`` passes ``isinstance(x, tf.Tensor)``, ``tf.is_tensor``, ``convert_to_tensor``,
operators, slicing and Keras layers, and reaches the capture hook as an op input without TensorFlow
touching it (DESIGN section 4). Every way Python can read its value (``numpy()``, ``float()``,
``bool()``, ``__array__``, ``__format__``, ``repr``/``str``, ``int``/``__index__``) goes through
``_numpy``, which asks the runner to materialise it (a fetch). Once the GraphRunner has computed
it, ``value`` holds the real eager tensor.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from tensorflow.python.eager import core, record
from tensorflow.python.framework import ops
from tensorflow.python.framework import tensor as tensor_lib
from tensorflow.python.types import core as types_core

_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


class Materialiser(Protocol):
    def materialise(self, placeholder: Placeholder) -> Any:
        """Return the real eager tensor of ``placeholder`` (blocking until it is computed)."""


class Placeholder(tensor_lib.Tensor, types_core.Value):
    """An op output that the GraphRunner has not computed (or handed over) yet."""

    def __init__(self, spec: tuple, producer: Materialiser, node: int, output: int,
                 device: str = "", owner: Any = None) -> None:
        """``spec``: (tf.DType, TensorShape, call-signature form), made once per TraceGraph
        output; the PythonRunner creates one placeholder per answered op output. ``owner``:
        the executor that computes it; it and its runtime change the fields below only through
        the methods under "its owner's writes" (tests/test_style.py checks)."""
        self._id = ops.uid()
        self._dtype, self._shape_val, self.sig = spec
        self._producer = producer
        self.node = node
        self.output = output
        self._device = device  # where its op runs: the user's tf.device scope ("": default)
        self.owner = owner
        self.value = None  # the real EagerTensor, once known
        self.pending = None  # the executor's handle of it, once issued, until it is confirmed
        self.item = None  # the GraphRunner work item that computes it, once flushed
        self._taped = False
        self._fetched = False
        # Whole-program co-execution (program_runner): the program sends its value to a fetch
        # queue; its value came from an eager replay; the run that was to compute it failed.
        self.queued = False
        self.replayed = False
        self.failed: BaseException | None = None

    # -- its owner's writes ------------------------------------------------------------------

    def issue(self, handle) -> None:
        """The executor's pending handle of it: what later runs take as their input, before
        the run that makes it is confirmed."""
        self.pending = handle

    def resolve(self, value) -> None:
        """Its value, as the graph computed it (from any thread)."""
        self.value, self.pending = value, None

    def bind(self, item) -> None:
        """The work item that computes it (None: settled, the item is no longer needed)."""
        self.item = item

    def expect_fetch(self) -> None:
        """The whole program sends its value to a fetch queue."""
        self.queued = True

    def replay(self, value) -> None:
        """Its value from an eager replay of its iteration: no fetch queue sends it any more."""
        self.value, self.queued, self.replayed = value, False, True

    def fail(self, error: BaseException) -> None:
        """The run that was to compute it failed with ``error``."""
        self.failed = error

    # -- what eager tensors have ------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"terra/{self.node}:{self.output}"

    @property
    def device(self) -> str:
        # Where its op ran: a compiled segment hands its values back on the caller's device (as
        # tf.function does), which would not say where a scoped op ran.
        if self._device:
            return self._device
        return self.value.device if self.value is not None else _DEVICE

    @property
    def backing_device(self) -> str:
        return self.device

    @property
    def graph(self) -> None:
        # An eager tensor has no graph. It raises here, but TensorFlow's own code tells eager
        # tensors apart with isinstance(t, EagerTensor) before reading ``t.graph`` (the tape
        # record of a tf.function call does), so a placeholder answers "no graph".
        return None

    @property
    def op(self):
        raise AttributeError("Tensor.op is undefined when eager execution is enabled.")

    def _datatype_enum(self) -> int:
        return self._dtype.as_datatype_enum

    def _shape_tuple(self):
        return tuple(self._shape_val.as_list())

    def _rank(self) -> int:
        return self._shape_val.rank

    def set_shape(self, shape) -> None:
        """As for eager tensors: check compatibility, change nothing."""
        if not self._shape_val.is_compatible_with(shape):
            raise ValueError(
                f"Tensor's shape {self._shape_val} is not compatible with supplied shape {shape}."
            )

    def _copy(self, ctx=None, device_name=None):
        return self.real()._copy(ctx, device_name)

    def __len__(self) -> int:
        if not self._shape_val.rank:
            raise TypeError("Scalar tensor has no `len()`")
        return self._shape_val[0]

    def __hash__(self):
        raise TypeError("Tensor is unhashable. Instead, use tensor.ref() as the key.")

    # -- materialisation: every value read is one fetch ------------------------------------

    def real(self):
        """The real eager tensor (fetching it if needed).

        When a gradient tape is recording, the value is tied to the placeholder on the tape
        (an identity), so gradients flow from eager ops on the value back through the ops that
        produced the placeholder.
        """
        if not self._fetched:  # the first read is the fetch, even if the graph is done already
            if not self.replayed:  # a replayed value never left a graph: as an op input, no fetch
                self._producer.materialise(self)  # the owner resolves it
            self._fetched = True
        if not self._taped and record.could_possibly_record():
            self._taped = True
            record.record_operation("Identity", [self.value], [self], lambda dy: [dy])
        return self.value

    def _read(self):
        """The real value, for Python to read: a recording tee (a region's formation) sees the
        read as it sees an eager tensor's (``hooks.report_read``)."""
        value = self.real()
        hooks.report_read(self)
        return value

    def _numpy(self):
        # The value's own _numpy is hooked to report a fetch: this one was reported already.
        if self.replayed and not self._fetched:  # Python reads it: a fetch all the same
            self._producer.materialise(self)
        value = self._read()
        try:
            return value._numpy_internal()
        except core._NotOkStatusException as error:
            raise core._status_to_exception(error) from None

    def numpy(self):
        maybe = self._numpy()
        return maybe.copy() if isinstance(maybe, np.ndarray) else maybe

    def __array__(self, dtype=None, copy=None):
        array = self._numpy()
        return np.asarray(array, dtype=dtype)

    def _prefer_custom_summarizer(self) -> bool:
        # what TensorFlow's printing of a value asks first (a variable's repr reads its value
        # and prints it: without this it printed ``numpy=<unavailable>``)
        return False

    def __bool__(self) -> bool:
        return bool(self._numpy())

    def __float__(self) -> float:
        return float(self._numpy())

    def __int__(self) -> int:
        return int(self._numpy())

    def __index__(self) -> int:
        return self._numpy().__index__()

    def __complex__(self) -> complex:
        return complex(self._numpy())

    def __format__(self, spec: str) -> str:
        return self._read().__format__(spec)

    def __repr__(self) -> str:
        return repr(self._read())

    def __str__(self) -> str:
        return str(self._read())

    def __reduce__(self):
        return self.real().__reduce__()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self.real().__deepcopy__(memo)


from . import hooks  # noqa: E402 - hooks imports this module
