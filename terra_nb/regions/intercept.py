"""Where regions begin: wrappers on the Keras methods a training loop calls.

While a Terra with regions is open, ``keras.Layer.__call__`` (layers and models),
``keras.losses.Loss.__call__``, ``keras.optimizers.Optimizer.apply_gradients`` and the metrics'
``update_state`` are wrapped, and so is ``tf.function``'s ``__call__`` (``function_calls``).
Only the OUTERMOST such call of the loop's thread, inside a Terra iteration, goes to ``Regions``
(a thread-local depth counter); calls between iterations, nested calls and calls from other
threads run untouched. The wrappers are removed when the last Terra using them closes.

``Interception`` also counts the variables created in the loop's thread (a variable creator
scope): a region is only hit while no variable was created since it formed.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import keras
import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context, record
from tensorflow.python.eager.polymorphic_function import concrete_function, polymorphic_function

from ..capture import forward_mode
from ..timeline import RunnerSpan
from .effects import STEP_METHODS
from .function_calls import spy_call_flat
from .hidden_frames import HiddenFrames
from .python_state import count_write, forget_writes, same_value
from .state_walk import FIT_STATE, WRITES_COUNTED
from .table import Regions


def _targets() -> list[tuple[type, str]]:
    """The methods wrapped. A model's ``train_step``, ``test_step`` and ``predict_step`` (those
    Keras defines: an override is the user's, whose calls are answered one by one) are the whole
    step of ``fit``, ``evaluate``, ``predict``: one region when the step needs none of its
    Python, else the calls inside it are the outermost (``_calls_inside``). A metric's
    ``update_state`` is its subclasses' own (``Mean``,
    ``MeanMetricWrapper`` ...): each class of Keras' metric tree that defines one. Not
    ``result()``: a few ops, often read once per epoch, so forming it would trace an epoch more."""
    out = [(keras.Layer, "__call__"), (keras.losses.Loss, "__call__"),
           (keras.optimizers.Optimizer, "apply_gradients")]
    out += [(keras.Model, method) for method in sorted(STEP_METHODS)]
    classes, seen = [keras.metrics.Metric], set()
    while classes:
        cls = classes.pop()
        if cls not in seen:
            seen.add(cls)
            classes += cls.__subclasses__()
            out += [(cls, "update_state")] if "update_state" in cls.__dict__ else []
    return out


_TAPE_METHODS = {"_push_tape": "push", "_pop_tape": "pop", "gradient": "gradient",
                 "watch": "watched", "reset": "watched"}  # GradientTape method -> Tapes method
_RECORDERS = ("record_operation", "record_operation_backprop_only")  # of eager.record


_MISSING = object()


@functools.cache
def _property(cls: type, name: str) -> bool:
    """Whether ``cls.name`` is a property: its setter's own assignments pass through
    ``__setattr__`` again (counted there), and what it assigns to a variable is the graph's
    (``optimizer.learning_rate = 1e-3`` assigns its variable: no change a region bakes in)."""
    return isinstance(getattr(cls, name, None), property)


def _counting(original):
    def __setattr__(self, name, value):  # noqa: N807 - it replaces __setattr__
        # Keras assigns ``built`` and ``_called`` again on every call (the same object); a loop
        # may assign a scheduled float that stopped changing (an equal new object): no change
        # (``fit`` sets a model's ``history`` and step functions: the loop's, never a call's)
        if name not in FIT_STATE and not _property(type(self), name) and not same_value(
                getattr(self, "__dict__", {}).get(name, _MISSING), value):
            count_write(self)
        original(self, name, value)

    __setattr__.__terra_region_original__ = original
    return __setattr__


SETTLE_ITERATIONS = 8  # iterations kept running for real while regions form
_local = threading.local()  # regions: the Regions of this thread's open iteration; depth
_lock = threading.Lock()
_users = 0
_saved: list[tuple[type, str, object]] = []  # (class, method, its own attribute or None)


def _wrap(original, method: str):
    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        regions = getattr(_local, "regions", None)
        if regions is None or _local.depth or not context.executing_eagerly() \
                or forward_mode.recording():  # a hit would record no JVP for them
            return original(self, *args, **kwargs)  # nested, outside an iteration, in a graph
        _local.depth = 1
        try:
            return regions.call(self, method, functools.partial(original, self), args, kwargs)
        finally:
            _local.depth = 0

    wrapper.__terra_region_original__ = original
    return wrapper


@contextlib.contextmanager
def _calls_inside():
    """A model's step runs its Python (no region answers it, none is forming): the calls inside
    it are the outermost, answered by their own regions."""
    _local.depth = 0
    try:
        yield
    finally:
        _local.depth = 1


def _wrap_tape(original, method: str):
    """A GradientTape method: to the Tapes of this thread's open iteration (outermost only)."""

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        regions = getattr(_local, "regions", None)
        if regions is None or _local.depth or not context.executing_eagerly():
            return original(self, *args, **kwargs)
        return getattr(regions.tapes, method)(self, original, *args, **kwargs)

    wrapper.__terra_region_original__ = original
    return wrapper


def _wrap_function(original):
    """``tf.function``'s ``__call__``: to the function calls of this thread's open iteration
    (outermost only; positional arguments only)."""

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        regions = getattr(_local, "regions", None)
        if regions is None or _local.depth or kwargs or not context.executing_eagerly() \
                or forward_mode.recording():
            return original(self, *args, **kwargs)
        _local.depth = 1
        try:
            return regions.functions.call(self, original, args)
        finally:
            _local.depth = 0

    wrapper.__terra_region_original__ = original
    return wrapper


def _wrap_recorder(original):
    """``record.record_operation``: the copies of recording tapes see what it records."""

    @functools.wraps(original)
    def wrapper(op_type, outputs, inputs, backward_function, *args, **kwargs):
        original(op_type, outputs, inputs, backward_function, *args, **kwargs)
        regions = getattr(_local, "regions", None)
        # a record while recording is stopped reaches no tape (a function's captures, traced)
        if regions is not None and regions.tapes.active \
                and not pywrap_tfe.TFE_Py_TapeSetIsStopped():
            regions.tapes.on_record(op_type, outputs, inputs, backward_function)

    return wrapper


def _hidden_frames() -> HiddenFrames:
    """This thread's ``HiddenFrames``, entered once an iteration (Terra contexts do not nest in
    a thread, so it is never entered twice at once)."""
    hidden = getattr(_local, "hidden", None)
    if hidden is None:
        hidden = _local.hidden = HiddenFrames()
    return hidden


def _install() -> None:
    global _users
    with _lock:
        _users += 1
        if _users == 1:
            for cls, method in _targets():
                _patch(cls, method, _wrap(getattr(cls, method), method))
            for method, to in _TAPE_METHODS.items():
                _patch(tf.GradientTape, method, _wrap_tape(getattr(tf.GradientTape, method), to))
            _patch(polymorphic_function.Function, "__call__",
                   _wrap_function(polymorphic_function.Function.__call__))
            _patch(concrete_function.ConcreteFunction, "_call_flat",
                   spy_call_flat(concrete_function.ConcreteFunction._call_flat))
            for name in _RECORDERS:
                _patch(record, name, _wrap_recorder(getattr(record, name)))
            for cls in WRITES_COUNTED:
                _patch(cls, "__setattr__", _counting(cls.__setattr__))


def _patch(cls: type, method: str, wrapper) -> None:
    _saved.append((cls, method, cls.__dict__.get(method)))  # first: restoring is always safe
    setattr(cls, method, wrapper)


def _uninstall() -> None:
    global _users
    with _lock:
        _users -= 1
        if _users == 0:
            while _saved:
                cls, method, own = _saved.pop()
                if own is not None:
                    setattr(cls, method, own)
                elif method in cls.__dict__:
                    delattr(cls, method)
            forget_writes()


class Interception:
    """The regions of one Terra, wired into Keras while it is open (``open``/``close`` in the
    loop's thread) and active inside its iterations (``iteration()``)."""

    def __init__(self, regions: Regions | None = None, tapes: bool = False) -> None:
        """``regions``: those of an earlier Terra on the same code, to carry over; ``tapes``:
        answer ``GradientTape.gradient`` too (``tapes.py``)."""
        self.regions = Regions() if regions is None else regions
        # tapes are always copied, for eager's order (``eager_order.py``); G only with ``tapes``
        self.regions.tapes.forms = tapes
        self.regions.open_step = _calls_inside
        self._hold: contextlib.ExitStack | None = None
        self._settled = 0
        self.forming = ""  # the calls whose regions the next iteration runs for real for

    def _created(self, next_creator, **kwargs):
        self.regions.epoch += 1
        return next_creator(**kwargs)

    def open(self) -> None:
        self.regions.carry_over()
        hold = contextlib.ExitStack()
        _install()
        hold.callback(_uninstall)
        try:
            hold.enter_context(tf.variable_creator_scope(self._created))
        except BaseException:
            hold.close()
            raise
        self._hold = hold

    def close(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()

    def settling(self) -> bool:
        """Whether the last iteration traced a call on its way to a region (or formed one): the
        next one should run for real too (at most ``SETTLE_ITERATIONS`` times)."""
        regions = self.regions
        settling, regions.changed = regions.changed, False
        forming, regions.forming = regions.forming, {}
        if settling and self._settled < SETTLE_ITERATIONS:
            self._settled += 1
            self.forming = "; ".join(f"{call} ({what})" for call, what in forming.items())
            return True
        return False

    @property
    def hit(self) -> bool:
        """Whether a region answered a call in the iteration now ending (before ``take_marks``)."""
        return bool(self.regions.marks)

    def take_marks(self, iteration: int, phase: str) -> list[RunnerSpan]:
        """The region calls answered in the iteration just ended, as timeline spans."""
        marks, self.regions.marks = self.regions.marks, []
        return [RunnerSpan("python", "region", iteration, phase, start, end, call)
                for call, start, end in marks]

    def expect_end(self, iteration: int | None) -> None:
        """The loop ends before ``iteration`` (None: not known): the tape regions rent against
        it."""
        self.regions.tapes.expect_end(iteration)

    @contextlib.contextmanager
    def iteration(self, index: int):
        """Inside Terra iteration ``index``: this thread's outermost Keras calls go to the
        regions."""
        _local.regions, _local.depth = self.regions, 0
        self.regions.tapes.iteration = index
        self.regions.marks = []  # (those of an iteration nobody took the marks of)
        try:
            with _hidden_frames():  # what a call traces through the wrappers names no line of ours
                yield
        finally:
            _local.regions = None
            self.regions.end_iteration()
