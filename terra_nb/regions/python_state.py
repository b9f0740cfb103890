"""The Python state a region's call may read, and whether it changed since the region formed.

A formed region does not run its call's Python, so every Python value that Python would read (a
layer's attribute, an item of a dict or list it holds, a module global its ``call`` names, a
closure cell, a small numpy array) is baked into the region as it was when the call was traced.
``PythonState`` walks what is reachable from the call's objects once, when the region forms, and
keeps where each value lives (each object's attributes, each dict and list, each closure and
global); on every hit it reads those places again and compares: a value that is not the same
object (nor an equal scalar) is a guard miss, and the call runs its Python again.

The attributes of Keras layers, losses, optimizers and metrics are not read again: their
``__setattr__`` counts assignments while regions are on (``count_write``, wrapped by
``intercept``), and the guard compares the counts, which costs nothing per attribute (a model
holds hundreds). It also keeps the snapshot from holding the layers' own attribute dicts, whose
bound methods would keep a dropped model alive.

Walked: instance ``__dict__``s, dicts, lists, tuples, sets, functions (closure cells, defaults,
the module globals their code names), bound methods, partials, and the classes the user wrote
(their class attributes and methods). Kept by identity, not walked: tensors and variables (their
values are the graph's), modules, classes of Keras and TensorFlow, their functions, and Keras's
graph plumbing (node links, checkpoint tracking), which holds the layers the roots list anyway.
"""

from __future__ import annotations

import collections
import dis
import functools
import itertools
import operator
import os
import random
import sys
import sysconfig
import types
import weakref

import keras
import numpy as np
import tensorflow as tf
from keras.src.ops import node as keras_node

from .state_fingerprints import (
    KERAS_CONFIG,
    NUMPY_RANDOM,
    generator_state,
    keras_config,
    label,
    numpy_random_state,
)

_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_OPAQUE = (tf.Tensor, tf.Variable, keras.Variable, keras.KerasTensor, keras_node.Node,
           types.ModuleType, types.BuiltinFunctionType, types.CodeType)
_LIBRARIES = ("keras", "tensorflow", "numpy", "builtins", "tf_keras", "terra_nb")
# installed packages and the standard library: their objects are kept by identity, not walked
_LIBRARY_DIRS = tuple(sorted({os.path.realpath(sysconfig.get_paths()[k])
                              for k in ("stdlib", "platstdlib", "purelib", "platlib")}))
# Keras's layer graph and checkpoint tracking: links to layers the roots list, never read by a
# call's arithmetic; ``_auto_config``: the constructor's arguments, read by ``get_config``;
# what ``fit``/``evaluate``/``predict`` keep on a model between steps (the ``History`` that grows
# every epoch, the validation data's iterator, the step functions, the stop flags): the
# training loop's, which a model's call never reads (a region in ``fit`` missed every epoch)
PLUMBING = frozenset({
    "_inbound_nodes", "_outbound_nodes", "_keras_history", "_tracker", "_functional",
    "_nodes_by_depth", "_operations_by_depth", "_auto_config",
    "_self_saveable_object_factories", "_self_unconditional_checkpoint_dependencies",
    "_self_unconditional_dependency_names", "_self_unconditional_deferred_dependencies",
    "_self_name_based_restores"})
FIT_STATE = frozenset({
    "history", "_eval_epoch_iterator", "train_function", "test_function", "predict_function",
    "stop_training", "stop_evaluating", "stop_predicting"})
PLUMBING |= FIT_STATE
SMALL_ARRAY = 4096  # numpy arrays up to this many elements are compared by content
MAX_VALUES = 200_000  # beyond, the state is too large to compare on every hit
_EMPTY = object()  # an empty closure cell


# Keras classes whose attribute assignments are counted (``count_write``, by ``intercept``'s
# ``__setattr__`` wrappers). A ``keras.Variable``'s ``trainable``, ``constraint`` and
# ``regularizer`` decide what a model's step trains and how (a callback freezing one kernel
# mid-fit); its value is the graph's
WRITES_COUNTED = (keras.Layer, keras.losses.Loss, keras.optimizers.Optimizer, keras.metrics.Metric,
                  keras.Variable)
_writes: dict[int, int] = {}  # id(object) -> attribute assignments seen (``count_write``)


def count_write(obj) -> None:
    """An attribute of ``obj`` was assigned (the ``__setattr__`` wrappers of ``intercept``)."""
    _writes[id(obj)] = _writes.get(id(obj), 0) + 1


def forget_writes() -> None:
    """When no Terra with regions is open: no guard reads the counts any more."""
    _writes.clear()


def _writes_to(ids: list[int]) -> list[int]:
    return [_writes.get(i, 0) for i in ids]


class TooLarge(Exception):
    """More Python state than a hit can afford to compare."""


@functools.cache
def _user_module(name) -> bool:
    """Whether module ``name`` is the user's code: ``__main__`` (a notebook), or a file outside
    the installed packages and the standard library."""
    if not isinstance(name, str) or name.split(".", 1)[0] in _LIBRARIES:
        return False
    if name == "__main__":
        return True
    path = getattr(sys.modules.get(name), "__file__", None)
    return path is not None and not os.path.realpath(path).startswith(_LIBRARY_DIRS)


def _user(obj) -> bool:
    """Whether a class or function is the user's code (its state is walked)."""
    return _user_module(getattr(obj, "__module__", None))


def _walked_instance(obj) -> bool:
    """Whether an object's attributes are walked: Keras's objects (a loss's ``_fn_kwargs``), the
    user's, and ``types.SimpleNamespace`` (a config kept in one)."""
    module = getattr(type(obj), "__module__", None)
    return (isinstance(module, str) and module.split(".", 1)[0] == "keras") or _user(type(obj)) \
        or type(obj) is types.SimpleNamespace


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY


def _code_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (and the code of functions defined in it) reads."""
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Walk:
    """One walk from the roots. ``sources``: a function per place that gives its values now (an
    object's attributes, a dict's or list's items, a function's closure, defaults and globals);
    ``names``: (path, labels) of each, labels one per value, or "." / "[]" / None for an
    object's attributes / a dict's items / a list's; ``counted``: the ids of objects whose
    attribute assignments are counted instead; ``arrays``: small numpy arrays and their bytes."""

    def __init__(self, count_writes: bool) -> None:
        self.counting = WRITES_COUNTED if count_writes else ()
        self.seen: set[int] = set()
        self.sources: list = []
        self.names: list[tuple[str, object]] = []
        self.counted: list = []
        self.sizes: list = []  # the containers whose sizes are compared
        self.arrays: list = []
        self.stack: list[tuple[object, str]] = []
        self.tensors: set[int] = set()  # ids of the tensors the state holds

    def push(self, values, path: str) -> None:
        for i, v in enumerate(values):
            if type(v) not in _ATOMS:
                self.stack.append((v, f"{path}[{i}]"))

    def push_items(self, d, path: str, dotted: bool = False) -> None:
        for k, v in list(d.items()):
            if type(v) not in _ATOMS and not (dotted and k in PLUMBING):
                self.stack.append((v, f"{path}.{k}" if dotted else f"{path}[{k!r}]"))

    def source(self, source, path: str, names=None) -> None:
        self.sources.append(source)
        self.names.append((path, names))

    def run(self, roots: list) -> None:
        """Walk from ``roots``; each root is named by its class (``Dense.rate``), what it holds
        by the path from there. Keras's global settings are read by every call's Keras code."""
        self.source(keras_config, "keras.config", list(KERAS_CONFIG))
        for root in roots:
            self.step(root, type(root).__name__)
        while self.stack:
            self.step(*self.stack.pop())

    def step(self, obj, path: str) -> None:
        if isinstance(obj, tf.Tensor):
            self.tensors.add(id(obj))
        elif id(obj) in self.seen:
            return
        elif isinstance(obj, _OPAQUE):
            if isinstance(obj, self.counting):  # a Keras variable: its attributes, counted
                self.seen.add(id(obj))
                self.counted.append(obj)
        else:
            self.seen.add(id(obj))
            try:
                self.visit(obj, path)
            except Exception:  # noqa: BLE001 - an object that resists the walk: by identity
                return

    def sized(self, container, path: str, names) -> None:
        """A dict, list, set or deque: its items (and a dict's keys), and its size."""
        self.sizes.append(container)
        if isinstance(container, dict):
            self.source(container.keys, path, "keys")
            self.source(container.values, path, names)
            self.push_items(container, path, dotted=names == ".")
        else:
            self.source(container.__iter__, path)
            self.push(container, path)

    def visit(self, obj, path: str) -> None:  # noqa: C901 - one branch per kind of object
        if isinstance(obj, dict | list | set | collections.deque):
            self.sized(obj, path, "[]")
        elif isinstance(obj, tuple | frozenset):
            self.push(obj, path)
        elif isinstance(obj, np.ndarray):
            if obj.size <= SMALL_ARRAY:
                self.arrays.append((obj, obj.tobytes()))
        elif isinstance(obj, types.FunctionType):
            self.function(obj, path)
        elif isinstance(obj, types.MethodType):
            self.stack += [(obj.__self__, path), (obj.__func__, path)]
        elif isinstance(obj, functools.partial):
            self.source(lambda: (obj.func, obj.args, obj.keywords), path,
                        ["func", "args", "keywords"])
            self.stack += [(obj.func, path), (obj.args, path), (obj.keywords, path)]
        elif isinstance(obj, property | staticmethod | classmethod):
            self.stack += [(getattr(obj, a), path) for a in ("fget", "fset", "__func__")
                           if getattr(obj, a, None) is not None]
        elif isinstance(obj, weakref.ref):  # what it refers to now, read through it
            self.source(lambda: (obj(),), path, ["()"])
            self.push((obj(),), path)
        elif isinstance(obj, types.GeneratorType):  # where it stands and its locals
            self.source(lambda: generator_state(obj), path)
        elif isinstance(obj, random.Random):  # a generator of the user's own
            self.source(lambda: (hash(obj.getstate()),), path, ["state"])
        elif isinstance(obj, NUMPY_RANDOM):  # numpy's draws run in Cython: no watch sees them
            self.source(lambda: (numpy_random_state(obj),), path, ["state"])
        elif isinstance(obj, type):
            if _user(obj):
                self.source(obj.__dict__.values, path, ".")
                self.push_items(dict(obj.__dict__), path, dotted=True)
        elif _walked_instance(obj):
            self.instance(obj, path)

    def instance(self, obj, path: str) -> None:
        """An object of Keras's or of the user's: its attributes (or slots), its user classes."""
        if isinstance(obj, self.counting):
            self.counted.append(obj)
            self.push_items(vars(obj), path, dotted=True)
        elif hasattr(type(obj), "__dictoffset__") and type(obj).__dictoffset__:
            self.sized(vars(obj), path, ".")
        slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())
                 if s not in ("__dict__", "__weakref__")]
        if slots:
            self.source(lambda: [getattr(obj, s, _EMPTY) for s in slots], path, slots)
            self.push([getattr(obj, s, _EMPTY) for s in slots], path)
        if _user(type(obj)):
            self.stack += [(c, c.__name__) for c in type(obj).__mro__ if _user(c)]

    def function(self, fn: types.FunctionType, path: str) -> None:
        """A function the user wrote: its closure cells, code and defaults, and the module
        globals its code reads."""
        if not _user(fn):
            return
        if fn.__dict__:  # function attributes (``fn.scale = ...``)
            self.sized(fn.__dict__, path, ".")
        self.source(lambda: [_cell(c) for c in fn.__closure__ or ()], path,
                    [f"closure {n}" for n in fn.__code__.co_freevars])
        self.source(lambda: (fn.__code__, fn.__defaults__, fn.__kwdefaults__), path,
                    ["__code__", "__defaults__", "__kwdefaults__"])
        g = fn.__globals__
        names = sorted(n for n in _code_names(fn.__code__) if n in g)
        if names:
            self.source(lambda: [g.get(n, _EMPTY) for n in names], path,
                        [f"global {n}" for n in names])
        self.push([_cell(c) for c in fn.__closure__ or ()] + list(fn.__defaults__ or ()), path)
        self.stack += [(g[n], f"{path} global {n}") for n in names if type(g[n]) not in _ATOMS]


class PythonState:
    """A snapshot of the Python state reachable from ``roots``; ``holds()`` on every hit.
    ``count_writes``: the attributes of Keras objects are guarded by their assignment counts
    (a region's guard, while the ``__setattr__`` wrappers count) rather than read."""

    def __init__(self, roots: list, count_writes: bool = False) -> None:
        walk = _Walk(count_writes)
        walk.run(roots)
        self._sources, self._names, self._arrays = walk.sources, walk.names, walk.arrays
        self._sized = walk.sizes
        self.tensor_ids = walk.tensors  # ids only: the objects hold the tensors
        self._sizes = list(map(len, self._sized))
        self._counted = [id(o) for o in walk.counted]
        self._writes = _writes_to(self._counted)
        # for a later Terra (no count while none was open): the counted objects' attributes
        self._objects = [weakref.ref(o) for o in walk.counted]
        self._attributes = _attributes(walk.counted)
        parts = [list(f()) for f in self._sources]  # one read of each place
        self._lengths = list(map(len, parts))
        self._values = list(itertools.chain.from_iterable(parts))
        if len(self._values) > MAX_VALUES:
            raise TooLarge(f"{len(self._values)} Python values reachable from the call")

    def _now(self) -> list:
        return list(itertools.chain.from_iterable(f() for f in self._sources))

    def holds(self) -> bool:
        """Whether every value is the same object as at the snapshot, or an equal scalar (a
        float assigned again each step: the snapshot then takes it), and no attribute of a
        Keras object was assigned."""
        now = self._now()
        if (len(now) != len(self._values) or list(map(len, self._sized)) != self._sizes
                or _writes_to(self._counted) != self._writes):
            return False
        if not all(map(operator.is_, now, self._values)):
            if not all(map(same_value, now, self._values)):
                return False
            self._values = now
        return all(a.tobytes() == b for a, b in self._arrays)

    def forget(self) -> None:
        """The object is gone: let go of what the snapshot holds (its layers, their variables);
        it never holds again."""
        self._sources, self._names, self._sized, self._arrays = [], [], [], []
        self._values, self._lengths, self._sizes, self._objects = [], [], [None], []

    def carried_over(self) -> bool:
        """At the start of a later Terra: whether the state holds, the Keras objects' attributes
        compared by a fingerprint (assignments made while no Terra was open were not counted);
        their counts start afresh."""
        objs = [r() for r in self._objects]
        if any(o is None for o in objs) or _attributes(objs) != self._attributes:
            return False
        self._writes = _writes_to(self._counted)
        return self.holds()

    def changed(self) -> list[str]:
        """Where the state differs from the snapshot (for a miss's or refusal's reason)."""
        out, start = [], 0
        for (path, names), n, source in zip(self._names, self._lengths, self._sources):
            values = list(source())
            then, start = self._values[start:start + n], start + n
            if len(values) != n:
                out.append(f"{path} (items added or removed)")
                continue
            keys = list(getattr(source(), "mapping", ())) if names in (".", "[]") else names
            out += [label(path, names, keys, i) for i, (v, w) in enumerate(zip(values, then))
                    if not same_value(v, w)]
        out += [f"a numpy array of shape {a.shape}" for a, b in self._arrays if a.tobytes() != b]
        if _writes_to(self._counted) != self._writes:
            out.append("an attribute of a Keras object assigned")
        return out


def _fingerprint(value):
    if type(value) in _ATOMS:
        return value
    if isinstance(value, list | dict | set):
        return id(value), len(value)
    return id(value)


def _attributes(objs: list) -> list[dict]:
    """A fingerprint of each object's attributes: scalars by value, other objects by identity
    (and lists, dicts, sets by length too)."""
    return [{k: _fingerprint(v) for k, v in vars(o).items() if k not in FIT_STATE} for o in objs]


_CALLABLES = (types.FunctionType, types.MethodType, functools.partial)


def argument_objects(values, depth: int = 0) -> list:
    """Those of a call's arguments whose state it may read, also inside the lists, tuples and
    dicts it is given: Keras's and the user's objects, functions (their closures and globals),
    and a container of a subclass (an ``OrderedDict``: its own attributes); the guard keys
    tensors, scalars and the containers' items itself."""
    out = []
    for v in values:
        if type(v) in _ATOMS or isinstance(v, _OPAQUE + (np.ndarray,)):
            continue
        if isinstance(v, list | tuple | dict):
            if depth < 4:
                out += argument_objects(v.values() if isinstance(v, dict) else v, depth + 1)
            if type(v) not in (list, tuple, dict):
                out.append(v)
        elif _walked_instance(v) or isinstance(v, _CALLABLES):
            out.append(v)
    return out


def same_value(a, b) -> bool:
    """Whether ``b`` in place of ``a`` is no change: the same object, or an equal scalar of the
    same type (a float, or a numpy scalar, assigned again each step)."""
    return a is b or (type(a) is type(b) and (type(a) in _ATOMS or isinstance(a, np.generic))
                      and bool(a == b))
