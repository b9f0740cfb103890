"""``CalleeWatch``: every function a traced run of a call reaches, judged by ``callee_rules``.

A profile function (``sys.setprofile``, the loop's thread only, during the call's traced runs:
never on a hit) sees each Python function called and each C function the user's code calls.
A callee the rules do not allow refuses the region; the reason names it and the line that
called it. Four things are decided when the call has returned:
- a container or array the user's code changed in place (``list.append``) refuses the region
  if it outlives the call (something besides the watch holds it) and is not as it was, unless
  the call returned it;
- a generator of the user's code resumed in the call refuses it if it was started before the
  call, or outlives it (its state moved on, and a hit would not move it);
- the shapes Python read (``shape_reads``): a region whose op's output shape depends on values
  refuses if Python read it (``recorded_ops``);
- ``record_operation`` (a custom gradient: ``tf.custom_gradient``, ``tf.recompute_grad``)
  refuses it while a tape records: the region's backward applies TensorFlow's registered
  gradients, never the call's own function. Recorded while no tape does (Keras's all-reduce in
  ``apply_gradients``), it is ``own_gradient``: the region forms and declines under a tape.
"""

from __future__ import annotations

import dis
import inspect
import os
import sys
from types import CodeType, FrameType

import numpy as np
from tensorflow.python.eager import record
from tensorflow.python.framework import ops
from tensorflow.python.framework import tensor as tensor_lib

from ..capture.location import is_user_code
from ..capture.placeholder import Placeholder
from .callee_rules import (
    TRACKED,
    TRUSTED,
    USER,
    VOUCHING,
    Unlisted,
    c_key,
    c_verdict,
    python_verdict,
)
from .state_walk import FIT_STATE

MAX_REASONS = 3
_GENERATORS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_RECORD = "record"  # verdict of TensorFlow's record_operation functions
_python: dict[CodeType, str] = {}  # code -> verdict (code objects are long-lived; bounded)
_c: dict[object, str] = {}  # c_key -> verdict
_starts: dict[CodeType, int] = {}  # generator code -> offset of its first RESUME


def _python_verdict(frame: FrameType) -> str:
    code = frame.f_code
    verdict = _python.get(code)
    if verdict is None:
        if len(_python) > 65536:
            _python.clear()
        if code in _recorders():
            verdict = _RECORD
        else:
            module = frame.f_globals.get("__name__") or "?"
            verdict = python_verdict(code, module, is_user_code(code))
        _python[code] = verdict
    return verdict


def _recorders() -> set[CodeType]:
    """The code of TensorFlow's own ``record_operation*`` (under terra-nb's wrappers)."""
    if not _RECORDERS:
        names = ("record_operation", "record_operation_backprop_only",
                 "record_operation_forwardprop_only")
        _RECORDERS.update(inspect.unwrap(getattr(record, n)).__code__ for n in names)
    return _RECORDERS


_RECORDERS: set[CodeType] = set()
_TIES = {Placeholder.real.__code__}  # terra-nb's own records: a read value tied to the tape
# a tf.function call records its op so: formation refuses calls that hold one, saying so
_FUNCTION_CALLS = "tensorflow.python.eager.polymorphic_function"


def _shape_codes() -> frozenset[CodeType]:
    """The code of the Python ways to read a tensor's shape (eager tensors' and placeholders')."""
    codes = set()
    for cls in (ops._EagerTensorBase, tensor_lib.Tensor, Placeholder):
        for name in ("shape", "get_shape", "ndim", "__len__", "_shape_tuple", "_rank",
                     "_shape_as_list"):
            value = cls.__dict__.get(name)
            fn = value.fget if isinstance(value, property) else value
            if hasattr(fn, "__code__"):
                codes.add(fn.__code__)
    return frozenset(codes)


_SHAPE_READS = _shape_codes()
# an eager tensor's own (C) ways to read its shape, called from TensorFlow's Python
_C_SHAPE_READS = frozenset({"_shape_tuple", "_rank", "_num_elements", "_copy_shape"})


_fit_names: dict[CodeType, bool] = {}


def _names_fit_state(code: CodeType) -> bool:
    """Whether the user's ``code`` names an attribute ``fit`` sets on a model between steps
    (``self.history.epoch``): the state walk leaves those out (``state_walk.FIT_STATE``)."""
    names = _fit_names.get(code)
    if names is None:
        if len(_fit_names) > 65536:  # (as ``_python``: code objects made at run time)
            _fit_names.clear()
        names = _fit_names[code] = not FIT_STATE.isdisjoint(code.co_names)
    return names


def _where(frame: FrameType | None) -> str:
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _first_resume(code: CodeType) -> int:
    start = _starts.get(code)
    if start is None:
        start = _starts[code] = next(
            (i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
    return start


class CalleeWatch:
    """Around one traced run of a call (``with``), then ``finish(result)``: the reasons the
    call may not become a region, each naming the callee and the line that called it."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self._tracked: dict[int, tuple] = {}  # id -> (container, copy before, where)
        self._started: dict[int, FrameType] = {}  # generator frames started in the call
        self._vouched: set[int] = set()  # frames of unlisted functions trusted code called
        self.own_gradient: str | None = None  # a custom gradient recorded while no tape did
        self.shape_reads: set = set()  # ``_id`` of the tensors whose shape Python read
        self._on = False

    def __enter__(self) -> CalleeWatch:
        if sys.getprofile() is not None:
            self._refuse("a profiler is active, so the call's callees cannot be watched", None)
        else:
            sys.setprofile(self._event)
            self._on = True
        return self

    def __exit__(self, *exc) -> None:
        if self._on:
            sys.setprofile(None)
            self._on = False

    def _refuse(self, reason: str, frame: FrameType | None) -> None:
        if len(self.reasons) < MAX_REASONS:
            text = f"{reason} (at {_where(frame)})" if frame is not None else reason
            if text not in self.reasons:
                self.reasons.append(text)

    def _event(self, frame: FrameType, event: str, arg) -> None:
        if event == "call":
            if frame.f_code in _SHAPE_READS:
                self._shape_read(frame)
            verdict = _python.get(frame.f_code) or _python_verdict(frame)
            if verdict is VOUCHING or verdict is TRUSTED:
                return
            if verdict is USER:
                if frame.f_code.co_flags & _GENERATORS:
                    self._resumed(frame)
                if _names_fit_state(frame.f_code):
                    self._refuse("reads what fit keeps on the model between steps ("
                                 + ", ".join(sorted(FIT_STATE & set(frame.f_code.co_names)))
                                 + "): a region would keep the value it read", frame)
            elif verdict is _RECORD:
                self._recorded(frame)
            else:
                self._judged(frame, verdict)
        elif event == "c_call":
            if getattr(arg, "__name__", None) in _C_SHAPE_READS:
                self._c_shape_read(arg, frame)
            if (_python.get(frame.f_code) or _python_verdict(frame)) is not USER:
                return  # a trusted caller's C calls are trusted with it
            key = c_key(arg)
            verdict = _c.get(key)
            if verdict is None:
                verdict = _c[key] = c_verdict(arg)
            if verdict is TRACKED:
                self._track(arg.__self__, frame)
            elif verdict is not TRUSTED:
                self._refuse(verdict, frame)
        elif event == "return" and self._vouched:
            self._vouched.discard(id(frame))

    def _judged(self, frame: FrameType, verdict: str) -> None:
        """A call the table does not allow: refused, unless trusted code called an unlisted
        function (trusted with its caller), or a refused function called it (one reason)."""
        caller = frame.f_back
        if caller is None:
            self._refuse(verdict, None)
            return
        by = _python.get(caller.f_code, VOUCHING)
        if by is VOUCHING or id(caller) in self._vouched:
            if isinstance(verdict, Unlisted):
                self._vouched.add(id(frame))
                return
        elif by is not USER and by is not TRUSTED:
            return  # inside a refused function: its own calls add no reason
        self._refuse(verdict, caller)

    def _shape_read(self, frame: FrameType) -> None:
        """A tensor's shape read in Python, unless by terra-nb's own hooks (signatures)."""
        caller = frame.f_back
        if caller is not None and not caller.f_globals.get("__name__", "").startswith(
                "terra_nb"):
            self.shape_reads.add(getattr(frame.f_locals.get("self"), "_id", None))

    def _c_shape_read(self, method, frame: FrameType) -> None:
        """An eager tensor's shape read in C by any Python but terra-nb's (TensorFlow's
        ``tf.size`` computes a size from ``_shape_tuple()`` in Python: a constant)."""
        tensor = getattr(method, "__self__", None)
        if isinstance(tensor, ops.EagerTensor) and not frame.f_globals.get(
                "__name__", "").startswith("terra_nb"):
            self.shape_reads.add(tensor._id)

    def _resumed(self, frame: FrameType) -> None:
        if frame.f_lasti <= _first_resume(frame.f_code):
            self._started[id(frame)] = frame
        elif id(frame) not in self._started:
            self._refuse(f"advances the generator {frame.f_code.co_qualname}, made before the "
                         f"call", frame.f_back)

    def _recorded(self, frame: FrameType) -> None:
        caller = frame.f_back
        while caller is not None and caller.f_globals.get("__name__", "").startswith(
                "terra_nb.regions"):
            caller = caller.f_back  # terra-nb's wrapper on record_operation
        module = caller.f_globals.get("__name__", "?") if caller is not None else "?"
        if caller is not None and caller.f_code in _TIES or module.startswith(_FUNCTION_CALLS):
            return
        why = (f"records its own gradient function ({module}: a custom gradient), which the "
               f"region's backward would not call")
        if record.could_possibly_record():
            self._refuse(why, None)
        else:  # no tape records it now: the region may form, and declines under a tape
            self.own_gradient = why

    def _track(self, container, frame: FrameType) -> None:
        if id(container) not in self._tracked:
            self._tracked[id(container)] = (container, _copy(container), _where(frame))

    def finish(self, result) -> list[str]:
        """The reasons, once the call returned ``result``; the watch lets go of everything."""
        returned = _containers_in(result)
        tracked, self._tracked = self._tracked, {}
        for ident in list(tracked):
            container, before, where = tracked.pop(ident)
            # held by: the local name, getrefcount's argument; more means it outlives the call
            if sys.getrefcount(container) > 2 and ident not in returned \
                    and _changed(container, before):
                self._refuse(f"changes a {type(container).__name__} that outlives the call "
                             f"(at {where})", None)
            del container
        started, self._started = self._started, {}
        for ident in list(started):
            frame = started.pop(ident)
            if sys.getrefcount(frame) > 2:  # its generator is alive, and moved on
                self._refuse(f"advances the generator {frame.f_code.co_qualname}, which "
                             f"outlives the call", None)
            del frame
        return self.reasons


def _copy(container):
    if isinstance(container, np.ndarray):
        return container.copy()
    if isinstance(container, dict):
        return dict(container)
    if isinstance(container, set):
        return set(container)
    return list(container)


def _changed(container, before) -> bool:
    if isinstance(container, np.ndarray):
        return container.shape != before.shape or container.dtype != before.dtype \
            or not np.array_equal(container, before, equal_nan=container.dtype.kind in "fc")
    if isinstance(container, dict):
        return container.keys() != before.keys() \
            or any(container[k] is not v for k, v in before.items())
    if isinstance(container, set):
        return container != before
    now = list(container)
    return len(now) != len(before) or any(a is not b for a, b in zip(now, before))


def _containers_in(value, depth: int = 0, out: set | None = None) -> set[int]:
    """Ids of the lists, dicts and tuples in a call's result: made by the call, returned."""
    out = set() if out is None else out
    if depth < 8 and isinstance(value, list | tuple | dict | set):
        out.add(id(value))
        for v in value.values() if isinstance(value, dict) else value:
            _containers_in(v, depth + 1, out)
    return out
