"""Which callees a region's call may reach: the allowlist formation checks, in one table.

A formed region does not run its call's Python, so every Python or C function that Python called
must be known to have no effect Python could see. ``callee_watch`` asks this module about each
callee of a traced run; anything not listed here refuses the region, naming the callee and line.

Python functions are judged by the module that defines them:
- ``TRUSTED_PACKAGES``: Keras promises its layers, losses, metrics and optimizers trace (``fit``
  traces them), and TensorFlow's own Python runs under ``tf.function`` alike; their state lives
  in variables, which the recording sees. The C functions they call are trusted with them.
- ``REFUSED_MODULES``: named exceptions inside them, and other modules with effects.
- ``STDLIB_PURE``: standard-library modules without effects a call could leave behind.
- the user's own code is allowed and watched: each C function it calls is judged below, and
  what it assigns is compared by the state walk (``python_state``).
- any other installed package or standard-library module refuses the region when the user's
  code or a ``STDLIB_PURE`` module calls it (``Unlisted``; ``Mapping.get`` calls
  ``os.environ``'s ``__getitem__``); called from a trusted package's code (``VOUCHING``), it is
  trusted with its caller.

C functions called from the user's code are judged by what they are:
- builtins in ``PURE_BUILTINS``; ``REFUSED_BUILTINS`` (I/O, code execution) refuse;
- methods of immutable builtin values; reading methods of containers and arrays;
- ``MUTATING_METHODS`` of containers and arrays are *tracked*: allowed when the container does
  not outlive the call or is left as it was (``callee_watch``);
- functions of ``PURE_C_MODULES``; methods of objects from trusted packages;
- anything else (``random.Random``, ``time``, ``os``, sockets) refuses.

Unseen by any profile function: calls of classes, numpy's functions and ufuncs (dispatchers,
not C functions: ``np.copyto``, ``out=``) and Cython methods (a numpy ``Generator``'s draws).
The state walk (``python_state``) compares what they could change that the call can reach: a
numpy generator's state, small arrays.
"""

from __future__ import annotations

import collections
import os
import sysconfig
from types import CodeType, ModuleType

import numpy as np

from ..capture.catching import has_except

TRUSTED_PACKAGES = frozenset({
    "keras", "tensorflow", "terra_nb", "numpy", "optree", "tree", "ml_dtypes", "absl",
    "typing_extensions", "namex", "wrapt", "google"})

REFUSED_MODULES = {  # module prefix -> what it does (checked before TRUSTED_PACKAGES)
    "tensorflow.python.platform.tf_logging": "logs",
    "absl.logging": "logs",
    "keras.src.utils.io_utils": "prints",
    "keras.src.utils.progbar": "prints",
    "numpy.random": "draws from numpy's random state, which no guard holds",
    "logging": "logs",
    "warnings": "warns (writes to stderr, changes the warning registry)",
    "random": "draws from Python's random state",
    "numpy.lib._npyio_impl": "reads or writes files",
    "numpy.lib.npyio": "reads or writes files",
    "numpy.lib.format": "reads or writes files",
    "numpy._core.memmap": "maps a file",
    "tensorflow.python.lib.io": "reads or writes files",
    "tensorflow.python.platform.gfile": "reads or writes files",
}
NUMPY_C_IO = frozenset({"fromfile", "tofile"})  # numpy's C functions that read or write files

STDLIB_PURE = frozenset({
    "abc", "typing", "inspect", "contextlib", "enum", "functools", "re", "re._parser",
    "re._compiler", "re._casefix", "collections", "collections.abc", "_collections_abc",
    "threading", "weakref", "_weakrefset", "copy", "copyreg", "dataclasses", "types",
    "operator", "keyword", "string", "numbers", "posixpath", "genericpath", "importlib",
    "importlib._bootstrap", "importlib._bootstrap_external", "reprlib", "textwrap", "dis",
    "opcode", "linecache", "tokenize", "traceback", "ast", "heapq", "statistics", "fractions",
    "json", "json.encoder", "json.decoder", "json.scanner"})

PURE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "callable", "chr", "delattr", "dir", "divmod",
    "format", "getattr", "hasattr", "hash", "hex", "id", "isinstance", "issubclass",
    "iter", "len", "locals", "max", "min", "next", "oct", "ord", "pow", "repr", "round",
    "setattr", "sorted", "sum", "vars", "__build_class__", "__import__"})
REFUSED_BUILTINS = frozenset({  # (``globals()``: the module's names, written by name)
    "print", "open", "input", "exec", "eval", "compile", "breakpoint", "exit", "quit", "help",
    "globals"})

PURE_C_MODULES = frozenset({
    "math", "cmath", "_operator", "_functools", "itertools", "_abc", "_weakref", "_collections",
    "_string", "_struct", "_json", "_sre", "_codecs", "numpy.core._multiarray_umath",
    "numpy._core._multiarray_umath", "_thread"})
PURE_C_FUNCTIONS = frozenset({("_bisect", "bisect_left"), ("_bisect", "bisect_right")})
PURE_SYS = frozenset({"_getframe", "exc_info", "getrecursionlimit", "getsizeof", "intern",
                      "getrefcount", "getdefaultencoding"})

IMMUTABLE = (str, bytes, int, float, complex, bool, tuple, frozenset, range, slice, type(None),
             memoryview, type(ModuleType.__dict__))
CONTAINERS = (list, dict, set, bytearray, collections.deque)
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
    "setdefault", "popitem", "add", "discard", "difference_update", "intersection_update",
    "symmetric_difference_update", "appendleft", "extendleft", "popleft", "rotate",
    "__setitem__", "__delitem__", "__iadd__", "__imul__", "__ior__", "__iand__", "__ixor__",
    "__isub__", "move_to_end", "fill", "put", "partition", "resize", "itemset", "setfield",
    "setflags", "byteswap"})

# verdicts
TRUSTED, USER, TRACKED = "trusted", "user", "tracked"
VOUCHING = "vouching"  # a trusted package's function: it vouches for the unlisted it calls


class Unlisted(str):
    """The verdict on a function the table does not list: it refuses the region when the user's
    code calls it; called by trusted code (Keras's ``queue.join``), it is trusted with it."""

_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_SITE = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})


def _refused_module(module: str) -> str | None:
    for prefix, what in REFUSED_MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            return what
    return None


def python_verdict(code: CodeType, module: str, user: bool) -> str:
    """TRUSTED, USER (watched) or the reason the call refuses the region, for a Python function
    of ``module`` (``user``: code the user wrote, ``location.is_user_code``)."""
    what = _refused_module(module)
    if what is not None:
        return f"calls {module}.{code.co_name}, which {what}"
    if module.split(".")[0] in TRUSTED_PACKAGES:
        return VOUCHING
    if user:  # a region's function would fail where the user's except clause catches
        return f"{code.co_qualname} has a try/except: a region runs none" if has_except(code) \
            else USER
    if module in STDLIB_PURE:
        return TRUSTED
    path = os.path.realpath(code.co_filename)
    if path.startswith(_SITE):
        return Unlisted(f"calls {module}.{code.co_name}, from an installed package not known to "
                        f"be free of effects")
    if path.startswith(_STDLIB) or code.co_filename.startswith("<frozen"):
        return Unlisted(f"calls {module}.{code.co_name}, a standard-library function not known "
                        f"to be free of effects")
    return USER


def c_key(fn) -> object:
    """What a C function's verdict is cached by: the function itself when it belongs to a
    module, else (receiver type, method name) (a bound method is made anew at each call)."""
    owner = getattr(fn, "__self__", None)
    if owner is None or type(owner) is ModuleType:
        return fn
    return type(owner), getattr(fn, "__name__", "?")


def c_verdict(fn) -> str:
    """TRUSTED, TRACKED (a container or array changed in place: ``callee_watch`` decides at the
    end of the call) or the reason the call refuses the region, for a C function the user's
    code called."""
    name = getattr(fn, "__name__", "?")
    owner = getattr(fn, "__self__", None)
    if owner is None or type(owner) is ModuleType:
        return _module_function(getattr(owner, "__name__", None) or fn.__module__ or "?", name)
    kind = type(owner)
    if isinstance(owner, type):  # a class's own method (``dict.fromkeys``, ``datetime.now``)
        kind = owner
        if kind.__module__ == "builtins":
            return TRUSTED
    elif isinstance(owner, IMMUTABLE):
        return TRUSTED
    if isinstance(owner, CONTAINERS + (np.ndarray,)):
        if name in NUMPY_C_IO:
            return f"calls ndarray.{name}, which writes a file"
        return TRACKED if name in MUTATING_METHODS else TRUSTED
    module = kind.__module__ or "?"
    what = _refused_module(module)
    if what is None and module.split(".")[0] in TRUSTED_PACKAGES:
        return TRUSTED
    why = f", which {what}" if what else " (not known to be free of effects)"
    return f"calls {kind.__qualname__}.{name} of {module}{why}"


def _module_function(module: str, name: str) -> str:
    if module == "builtins":
        if name in PURE_BUILTINS:
            return TRUSTED
        why = " (I/O, code execution or the module's names)" if name in REFUSED_BUILTINS else ""
        return f"calls {name}(){why}"
    if module == "sys" and name in PURE_SYS:
        return TRUSTED
    if module.startswith("numpy") and _refused_module(module) is None and name not in NUMPY_C_IO:
        return TRUSTED
    if module in PURE_C_MODULES or (module, name) in PURE_C_FUNCTIONS:
        return TRUSTED
    what = _refused_module(module)
    why = f", which {what}" if what else " (not known to be free of effects)"
    return f"calls {module}.{name}{why}"
