"""The walk of the Python state a region's call may read: where each value lives.

``StateWalk`` goes once over what is reachable from the call's objects, when the region forms,
and lists the places a hit reads again (``python_state.PythonState`` compares them):

- walked: the attributes (``__dict__`` and slots) of Keras's objects, of the user's and of the
  standard library's and installed packages' other than TensorFlow's and numpy's (a
  ``threading.Event``'s flag, a ``queue.Queue``'s items); dicts, lists, tuples, sets, deques
  (and the user's subclasses of them, with their class); functions (closure cells, defaults,
  keyword defaults, the module globals their code names, the attributes of modules it names:
  ``config.SCALE``, and the modules it imports); bound methods (of builtins too: the dict behind
  ``SCALES.get``), partials, weak references, generators, random generators, and the classes
  the user wrote (their attributes and methods);
- compared by content: numpy arrays and other buffers (``bytearray``, ``array.array``,
  ``memoryview``), up to ``ARRAY_BYTES`` in all;
- compared one level deep: the user's modules however reached (a module held in an attribute,
  a local alias): their names, by identity;
- kept by identity: tensors and variables (their values are the graph's), library modules,
  classes and functions of libraries, C objects without attributes (locks, compiled patterns),
  files (their reads are refused by ``callee_rules``), and Keras's graph plumbing (node links,
  checkpoint tracking), which holds the layers the roots list anyway.

What no walk can compare raises ``UnguardedState``, and the region is refused: an iterator of C
(``itertools.cycle``, ``iter(list)``), whose position lives where no Python reads it, and more
buffer data than a hit can afford to compare.
"""

from __future__ import annotations

import array
import collections
import collections.abc
import dis
import functools
import inspect
import io
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
    numpy_random_state,
)

ATOMS = (type(None), bool, int, float, complex, str, bytes)
# kept by identity (what a module or file holds: below); a signature is immutable by contract
# (every Keras layer holds its call's: 90 of a 3-layer model's 390 values, 10 us a hit)
OPAQUE = (tf.Tensor, tf.Variable, keras.Variable, keras.KerasTensor, keras_node.Node,
          types.ModuleType, types.CodeType, io.IOBase, inspect.Signature, inspect.Parameter)
BUFFERS = (np.ndarray, bytearray, memoryview, array.array)  # compared by their bytes
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_LIBRARIES = ("keras", "tensorflow", "numpy", "builtins", "tf_keras", "terra_nb")
# installed packages and the standard library: their objects are not walked as the user's are
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
# buffers are compared by their bytes on every hit, up to this many in all (0.25 ms)
ARRAY_BYTES = 4 << 20
EMPTY = object()  # an empty closure cell, a module attribute gone

# Keras classes whose attribute assignments are counted (``count_write``, by ``intercept``'s
# ``__setattr__`` wrappers). A ``keras.Variable``'s ``trainable``, ``constraint`` and
# ``regularizer`` decide what a model's step trains and how (a callback freezing one kernel
# mid-fit); its value is the graph's
WRITES_COUNTED = (keras.Layer, keras.losses.Loss, keras.optimizers.Optimizer, keras.metrics.Metric,
                  keras.Variable)


class UnguardedState(Exception):
    """Python state the call may read that no hit can compare: too much of it, state kept
    where Python cannot read it (a C iterator's position), or an object that resists the walk.
    The region is refused (``reason``)."""

    def reason(self) -> str:
        return f"Python state no guard can compare: {self}"


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


def _other_library(obj) -> bool:
    """Whether ``obj`` is an object of the standard library or of an installed package (numpy's
    ``vectorize`` included) other than TensorFlow's, whose state is the graph's."""
    module = getattr(type(obj), "__module__", None)
    return isinstance(module, str) and module.split(".", 1)[0] not in _NOT_WALKED


_NOT_WALKED = ("tensorflow", "builtins", "tf_keras", "terra_nb")


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return EMPTY


@functools.lru_cache(maxsize=4096)  # a notebook defines functions anew: bounded
def _code_reads(code: types.CodeType) -> tuple[frozenset, frozenset, frozenset]:
    """The global names a function's code (and the code of functions defined in it) reads, the
    dotted names it reads from them (``config.SCALE``: ``("config", "SCALE")``), and the modules
    it imports."""
    names, dotted, imports, chain = set(), set(), set(), []
    for i in dis.get_instructions(code):
        if i.opname == "IMPORT_NAME":
            imports.add(i.argval)
            chain = []
        elif i.opname in ("LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL"):
            names.add(i.argval)
            chain = [i.argval] if i.opname == "LOAD_GLOBAL" else []
        elif i.opname in ("LOAD_ATTR", "LOAD_METHOD") and chain:
            chain.append(i.argval)
            dotted.add(tuple(chain))
        else:
            chain = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = _code_reads(const)
            names |= inner[0]
            dotted |= inner[1]
            imports |= inner[2]
    return frozenset(names), frozenset(dotted), frozenset(imports)


def _module_attribute(g: dict, dotted: tuple[str, ...]) -> tuple[str, object, str] | None:
    """Where a dotted name the code reads lives when its head is a module: (the module's name,
    the module, the attribute) of the first step that leaves modules; None when it is none."""
    value = g.get(dotted[0], EMPTY)
    for i, attr in enumerate(dotted[1:], 1):
        if not isinstance(value, types.ModuleType):
            return None
        owner, value = value, getattr(value, attr, EMPTY)
        if not isinstance(value, types.ModuleType) or i == len(dotted) - 1:
            return ".".join(dotted[:i]), owner, attr
    return None


class StateWalk:
    """One walk from the roots. ``sources``: a function per place that gives its values now (an
    object's attributes, a dict's or list's items, a function's closure, defaults and globals);
    ``names``: (path, labels) of each, labels one per value, or "." / "[]" / None for an
    object's attributes / a dict's items / a list's; ``counted``: the objects whose attribute
    assignments are counted instead; ``arrays``: (read its bytes, the bytes, what it is) of each
    buffer."""

    def __init__(self, count_writes: bool) -> None:
        self.counting = WRITES_COUNTED if count_writes else ()
        self.seen: set[int] = set()
        self.sources: list = []
        self.names: list[tuple[str, object]] = []
        self.counted: list = []
        self.sizes: list = []  # the containers whose sizes are compared
        self.arrays: list = []
        self.array_bytes = 0
        self.stack: list[tuple[object, str]] = []
        self.tensors: set[int] = set()  # TensorFlow ids (``_id``) of the tensors it holds

    def push(self, values, path: str) -> None:
        for i, v in enumerate(values):
            if type(v) not in ATOMS:
                self.stack.append((v, f"{path}[{i}]"))

    def push_items(self, d, path: str, dotted: bool = False) -> None:
        for k, v in list(d.items()):
            if type(v) not in ATOMS and not (dotted and k in PLUMBING):
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
        if isinstance(obj, tf.Tensor):  # by TensorFlow's id, as a recording names its inputs
            self.tensors.add(getattr(obj, "_id", id(obj)))
        elif id(obj) in self.seen:
            return
        elif isinstance(obj, OPAQUE):
            self.seen.add(id(obj))
            if isinstance(obj, self.counting):  # a Keras variable: its attributes, counted
                self.counted.append(obj)
            elif isinstance(obj, types.ModuleType) and _user_module(obj.__name__):
                self.sized(vars(obj), path, ".", walk=False)  # its names, one level deep
        else:
            self.seen.add(id(obj))
            try:
                self.visit(obj, path)
            except UnguardedState:
                raise
            except Exception as error:  # noqa: BLE001 - unknown state is refused, never trusted
                raise UnguardedState(f"{path} resists the walk ({type(error).__name__}: "
                                     f"{error})") from error

    def sized(self, container, path: str, names, walk: bool = True) -> None:
        """A mapping (a dict, a mapping proxy), list, set or deque: its items (and a mapping's
        keys), and its size; what the items hold too, with ``walk``."""
        self.sizes.append(container)
        if isinstance(container, collections.abc.Mapping):
            self.source(container.keys, path, "keys")
            self.source(container.values, path, names)
            if walk:
                self.push_items(container, path, dotted=names == ".")
        else:
            self.source(container.__iter__, path)
            if walk:
                self.push(container, path)

    def visit(self, obj, path: str) -> None:  # noqa: C901 - one branch per kind of object
        if isinstance(obj, dict | list | set | collections.deque | tuple | frozenset):
            self.container(obj, path)
        elif isinstance(obj, BUFFERS):
            self.buffer(obj, path)
        elif isinstance(obj, types.FunctionType):
            self.function(obj, path)
        elif isinstance(obj, types.MethodType):
            self.stack += [(obj.__self__, path), (obj.__func__, path)]
        elif isinstance(obj, types.BuiltinMethodType | types.MethodWrapperType):
            self.stack.append((obj.__self__, path))  # the dict behind ``SCALES.get``
        elif isinstance(obj, types.MappingProxyType):  # the mapping behind it
            self.sized(obj, path, "[]")
        elif isinstance(obj, _DICT_VIEWS):
            self.sized(obj.mapping, path, "[]")
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
        elif isinstance(obj, weakref.ProxyTypes):  # its referent (its methods' ``__self__``)
            self.push((obj.__init__.__self__,), path)
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
        elif isinstance(obj, collections.abc.Iterator):
            raise UnguardedState(f"{path} is an iterator ({type(obj).__module__}."
                                 f"{type(obj).__qualname__}) whose position no guard can read")
        elif _other_library(obj):
            self.instance(obj, path)

    def container(self, obj, path: str) -> None:
        """A dict, list, set, deque, tuple or frozenset; an instance of the user's subclass of
        one (a ``NamedTuple``, ``class HParams(dict)``) also its attributes and its class."""
        if isinstance(obj, tuple | frozenset):
            self.push(obj, path)
        else:
            self.sized(obj, path, "[]")
        if _user(type(obj)):
            if isinstance(getattr(obj, "__dict__", None), dict):
                self.sized(vars(obj), path, ".")
            self.stack.append((type(obj), type(obj).__name__))

    def buffer(self, obj, path: str) -> None:
        """A numpy array, ``bytearray``, ``array.array`` or ``memoryview``: compared by its
        bytes, within the budget of all of them."""
        self.array_bytes += obj.nbytes if isinstance(obj, np.ndarray | memoryview) \
            else len(obj) * getattr(obj, "itemsize", 1)
        if self.array_bytes > ARRAY_BYTES:
            raise UnguardedState(f"{path} and the other arrays the call may read hold "
                                 f"{self.array_bytes >> 20} MiB, more than a hit can compare "
                                 f"(hold a large array in a tf.constant or a tf.Variable)")
        read = obj.tobytes if hasattr(obj, "tobytes") else functools.partial(bytes, obj)
        what = f"a numpy array of shape {obj.shape}" if isinstance(obj, np.ndarray) \
            else f"the bytes of {path} ({type(obj).__name__})"
        self.arrays.append((read, read(), what))

    def instance(self, obj, path: str) -> None:
        """An object of Keras's, the user's or another library's: its attributes (or slots),
        its user classes."""
        if isinstance(obj, self.counting):
            self.counted.append(obj)
            self.push_items(vars(obj), path, dotted=True)
        elif isinstance(getattr(obj, "__dict__", None), dict):  # (a thread-local's: this one's)
            self.sized(vars(obj), path, ".")
        slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())
                 if s not in ("__dict__", "__weakref__")]
        if slots:
            self.source(lambda: [getattr(obj, s, EMPTY) for s in slots], path, slots)
            self.push([getattr(obj, s, EMPTY) for s in slots], path)
        if _user(type(obj)):
            self.stack += [(c, c.__name__) for c in type(obj).__mro__ if _user(c)]

    def function(self, fn: types.FunctionType, path: str) -> None:
        """A function the user wrote: its closure cells, code and defaults, the module globals
        its code reads, and the attributes of modules it names (``config.SCALE``)."""
        if not _user(fn):
            return
        if fn.__dict__:  # function attributes (``fn.scale = ...``)
            self.sized(fn.__dict__, path, ".")
        self.source(lambda: [_cell(c) for c in fn.__closure__ or ()], path,
                    [f"closure {n}" for n in fn.__code__.co_freevars])
        self.source(lambda: (fn.__code__, fn.__defaults__, fn.__kwdefaults__), path,
                    ["__code__", "__defaults__", "__kwdefaults__"])
        g = fn.__globals__
        reads, dotted, imports = _code_reads(fn.__code__)
        names = sorted(n for n in reads if n in g)
        if names:
            self.source(lambda: [g.get(n, EMPTY) for n in names], path,
                        [f"global {n}" for n in names])
        self.push([_cell(c) for c in fn.__closure__ or ()] + list(fn.__defaults__ or ()), path)
        if fn.__kwdefaults__:  # its items, and what they hold
            self.stack.append((fn.__kwdefaults__, f"{path} __kwdefaults__"))
        self.stack += [(g[n], f"{path} global {n}") for n in names if type(g[n]) not in ATOMS]
        # a module the code imports is walked as one it names
        self.stack += [(sys.modules.get(m), f"{path} import {m}") for m in sorted(imports)]
        self.module_attributes(g, dotted, path)

    def module_attributes(self, g: dict, dotted: frozenset, path: str) -> None:
        """The attributes of modules the code names (``config.SCALE``), read again on every hit
        and walked as a global is."""
        places = {}
        for name in dotted:
            place = _module_attribute(g, name)
            if place is not None:
                places[f"{place[0]}.{place[2]}"] = place[1:]
        if not places:
            return
        labels = sorted(places)
        self.source(lambda: [getattr(*places[k], EMPTY) for k in labels], path, labels)
        self.stack += [(v, f"{path} {k}") for k in labels
                       if type(v := getattr(*places[k], EMPTY)) not in ATOMS]
