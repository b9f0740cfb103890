"""Keras's steps as Terra iterations: ``fit``, ``evaluate`` and ``predict`` co-executed.

While a Terra is open, Keras's ``make_train_function``, ``make_test_function`` and
``make_predict_function`` are wrapped. Keras calls them at the start of every ``fit``,
``evaluate``, ``predict`` and ``*_on_batch``, and its loop then calls the function they leave
on the model (``model.train_function`` ...) once per step (once per ``steps_per_execution``
steps). That function is replaced by a ``StepFunction``, and each of its calls is one Terra
iteration. Keras's loop runs around the iterations as written: callbacks, the progress bar,
``History``, validation (``evaluate`` at an epoch's end, whose steps are iterations too), early
stopping and checkpoints. It is the seam Keras offers for changing a step (a ``Model``
subclass overrides ``make_train_function``), so no private loop is patched. Tested with
Keras 3.15 on TensorFlow 2.21.

Only steps that run eagerly are iterations: ``compile(run_eagerly=True)`` (a ``train_step``
holding Python that ``tf.function`` cannot run), or ``tf.config.run_functions_eagerly(True)``.
A step Keras compiled runs as Keras made it, and the Terra says so once (``Terra.note``): it
is one graph call already, with nothing to co-execute. A step called while an iteration is
already running (``fit`` inside ``terra.loop``) runs as part of that iteration, also said once.
When the Terra closes, every model gets its own step functions back.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

import keras
import tensorflow as tf

# make_* -> (the attribute it sets, what Keras runs it for)
_MAKERS = {"make_train_function": ("train_function", "fit"),
           "make_test_function": ("test_function", "evaluate"),
           "make_predict_function": ("predict_function", "predict")}
_ATTR_OF = {kind: attr for attr, kind in _MAKERS.values()}  # "fit" -> "train_function"
_local = threading.local()  # steps: the KerasSteps of the Terra open in this thread
_lock = threading.Lock()
_users = 0  # open KerasSteps (one per open Terra, in any thread)
_saved: list[tuple[type, str, Any]] = []  # (class, method, Keras's own function)


class StepFunction:
    """Stands for one model's step function while a Terra is open: each call is one Terra
    iteration when the model's steps run eagerly (Keras's own function otherwise)."""

    def __init__(self, steps: KerasSteps, model: Any, kind: str, original: Any) -> None:
        self.steps, self.kind, self.original = steps, kind, original
        self.model = weakref.ref(model)
        self._epoch, self._step = -1, 0

    def __call__(self, data: Any) -> Any:
        return self.steps.run(self, data)

    def new_run(self) -> None:
        """Keras made (or found) the function again: a new ``fit``/``evaluate``/``predict``."""
        self._epoch, self._step = -1, 0

    def label(self) -> str:
        """The next call's name: ``fit epoch 2 step 5``, ``evaluate step 3``."""
        if self.kind == "fit":
            epoch = len(getattr(self._history(), "epoch", ()) or ())
            if epoch != self._epoch:
                self._epoch, self._step = epoch, 0
            text = f"fit epoch {epoch} step {self._step}"
        else:
            text = f"{self.kind} step {self._step}"
        self._step += 1
        return text

    def calls_left(self) -> int | None:
        """How many calls ``fit`` makes from this one on (its History's ``epochs`` and
        ``steps``), so that compiles and tape regions are rented against the end
        (``coexec/rental.py``); None: not known (a generator, evaluate, predict)."""
        params = getattr(self._history(), "params", None) or {}
        epochs, steps, model = params.get("epochs"), params.get("steps"), self.model()
        if self.kind != "fit" or not epochs or not steps or model is None:
            return None
        per_epoch = -(-steps // max(int(getattr(model, "steps_per_execution", 1) or 1), 1))
        return max((epochs - self._epoch) * per_epoch - self._step + 1, 1)

    def _history(self):
        return getattr(self.model(), "history", None)


class KerasSteps:
    """The Keras step functions of one Terra (``open`` when it opens, ``close`` when it closes)."""

    def __init__(self, terra: Any) -> None:
        self._terra = terra
        self._wrapped: list[StepFunction] = []
        self._said: set[tuple] = set()
        self._made: set[tuple] = set()  # (model id, kind) made in this Terra (``first_make``)
        self._opened = False  # counted among the users of Keras's wrapped makers

    def open(self) -> None:
        """Wrap Keras's ``make_*_function`` (once for all open Terras) and take this thread's
        step functions."""
        global _users
        with _lock:
            if _users == 0:
                _wrap_makers()
            _users += 1
            self._opened = True
        _local.steps = self

    def close(self) -> None:
        """Give every model its own step functions back; unwrap Keras when the last Terra
        closes."""
        global _users
        if getattr(_local, "steps", None) is self:
            _local.steps = None
        if not self._opened:  # a Terra whose opening was cut short before this opened
            return
        self._opened = False
        for fn in self._wrapped:
            model = fn.model()
            attr = _ATTR_OF[fn.kind]
            if model is not None and getattr(model, attr, None) is fn:
                setattr(model, attr, fn.original)
        self._wrapped.clear()
        with _lock:
            _users -= 1
            if _users == 0:
                _unwrap_makers()

    def first_make(self, model: Any, kind: str) -> bool:
        """Whether this is the first time in this Terra that ``model`` makes its step function
        for ``kind``, and its steps run eagerly (making an eager one again costs nothing)."""
        key = (id(model), kind)
        if key in self._made or not _runs_eagerly(model):
            return False
        self._made.add(key)
        return True

    def adopt(self, model: Any, kind: str) -> None:
        """``model`` made its step function for ``kind``: stand in for it."""
        attr = _ATTR_OF[kind]
        fn = getattr(model, attr, None)
        if fn is None:
            return
        if isinstance(fn, StepFunction) and fn.steps is self:
            fn.new_run()
            return
        if isinstance(fn, StepFunction):  # a wrapper left by a Terra of another thread
            fn = fn.original
        wrapper = StepFunction(self, model, kind, fn)
        setattr(model, attr, wrapper)
        self._wrapped.append(wrapper)

    def run(self, fn: StepFunction, data: Any) -> Any:
        """One call of a step function: one Terra iteration when it can be."""
        model = fn.model()
        if getattr(_local, "steps", None) is not self or model is None:
            return fn.original(data)  # another thread, or the Terra closed meanwhile
        if not _runs_eagerly(model):
            self._say_once(("compiled", id(model), fn.kind),
                           f"{model.name}.{fn.kind}() runs steps Keras compiled "
                           f"(run_eagerly=False): left alone, one graph call per step; "
                           f"compile(..., run_eagerly=True) co-executes their Python")
            return fn.original(data)
        if self._terra.in_iteration:
            self._say_once(("inside", id(model), fn.kind),
                           f"{model.name}.{fn.kind}() was called inside a Terra iteration: "
                           f"its steps run as part of that iteration; call it outside "
                           f"terra.loop()/terra.step() to make each step an iteration")
            return fn.original(data)
        label, left = fn.label(), fn.calls_left()
        self._terra._expect_end(None if left is None else len(self._terra._stats) + left)
        with self._terra.step(label):
            return fn.original(data)

    def _say_once(self, key: tuple, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self._terra.note(text)



def _runs_eagerly(model: Any) -> bool:
    """Whether ``model``'s steps run eagerly (``compile(run_eagerly=True)``, or every function
    made to: ``tf.config.run_functions_eagerly(True)``)."""
    return bool(model.run_eagerly or tf.config.functions_run_eagerly())


def _make(original, kind: str):
    @functools.wraps(original)
    def make(model, *args, **kwargs):
        steps = getattr(_local, "steps", None)
        if steps is not None and steps.first_make(model, kind):
            # a function Keras made before the Terra opened calls the step it found then,
            # not the one regions answer (regions/intercept.py): an eager one is made again
            if args:  # an override passing ``force`` on (``super().make_...(force)``)
                args = (True, *args[1:])
            else:
                kwargs["force"] = True
        result = original(model, *args, **kwargs)
        if steps is not None:
            steps.adopt(model, kind)
        return result

    make.__terra_original__ = original
    return make


def _wrap_makers() -> None:
    for maker, (_, kind) in _MAKERS.items():
        owner = next((c for c in keras.Model.__mro__ if maker in c.__dict__), None)
        if owner is not None:
            original = owner.__dict__[maker]
            _saved.append((owner, maker, original))
            setattr(owner, maker, _make(original, kind))


def _unwrap_makers() -> None:
    while _saved:
        owner, maker, original = _saved.pop()
        setattr(owner, maker, original)
