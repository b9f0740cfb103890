"""The names of the variables a loop reads, for the views: a Keras variable's path
(``dense/kernel``), a TensorFlow variable's own name (``W``), or, for a ``tf.Variable`` left
with TensorFlow's default name, the Python name it is held by (``W``, ``params[0]``).

A trace knows a variable only by its resource handle (``var:v17``); the variable objects are
found from the loop's namespace (the loop frame's locals and globals): variables, lists and
tuples of them, and the variables of Keras objects and ``tf.Module``s held there. It runs once
per new handle, off the per-op path, when a traced iteration ends.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

_DEFAULT_NAME = re.compile(r"^Variable(_\d+)?$")  # what TensorFlow calls an unnamed variable
_OWNERS = ("keras", "tensorflow", "tf_keras")  # packages whose objects list their variables


def name_variables(handles: Mapping[str, Any], frame: FrameType | None,
                   into: dict[str, str]) -> None:
    """Add to ``into`` (variable key -> name) the name of every handle in ``handles`` not named
    yet that the namespace of ``frame`` reaches; a handle it does not reach is named by its
    key ("" in ``into``: looked for once)."""
    wanted = {h._id: key for key, h in list(handles.items()) if key not in into}
    if not wanted or frame is None:
        return
    seen: set[int] = set()
    for python_name, value in _namespace(frame):
        for variable, held_as in _variables_of(python_name, value, seen):
            handle = getattr(variable, "handle", None)
            key = wanted.pop(getattr(handle, "_id", None), None)
            if key is not None:
                into[key] = variable_name(variable, held_as)
        if not wanted:
            return
    into.update({key: "" for key in wanted.values()})


def variable_name(variable: Any, held_as: str = "") -> str:
    """A Keras variable's ``path``; else its TensorFlow name without ``:0``, unless that is
    TensorFlow's default (``Variable_3``) and ``held_as`` names it better."""
    path = getattr(variable, "path", None)
    if isinstance(path, str) and path:
        return path
    name = str(getattr(variable, "name", "") or "").split(":")[0]
    if held_as and (not name or _DEFAULT_NAME.match(name)):
        return held_as
    return name or held_as


def _namespace(frame: FrameType) -> Iterator[tuple[str, Any]]:
    """The loop frame's locals, then its globals (a notebook cell's are the same dict)."""
    local = frame.f_locals
    items = list(local.items())
    # A function frame's ``f_locals`` is a snapshot the frame keeps: it would hold every object
    # it saw (a model the loop drops, a loss object made anew each step) until the next
    # snapshot. Emptied unless someone else holds it (the frame, ``local`` and getrefcount's
    # argument are three); ``f_locals`` and Python's tracers fill it again from the frame.
    if frame.f_code.co_flags & inspect.CO_OPTIMIZED and sys.getrefcount(local) <= 3:
        local.clear()
    yield from items
    if frame.f_globals is not local:
        yield from list(frame.f_globals.items())


def _variables_of(name: str, value: Any, seen: set[int]) -> Iterator[tuple[Any, str]]:
    """Variables ``value`` holds, each with the Python name it is held by ("" inside an
    object)."""
    if id(value) in seen or name.startswith("__"):
        return
    seen.add(id(value))
    if _is_variable(value):
        yield value, name
    elif isinstance(value, (list, tuple)) and len(value) <= 4096:
        yield from ((v, f"{name}[{i}]") for i, v in enumerate(value) if _is_variable(v))
    elif type(value).__module__.split(".")[0] in _OWNERS and not isinstance(value, type):
        try:
            held = list(getattr(value, "variables", None) or ())
        except Exception:  # noqa: BLE001 - a property that needs a built object, say
            return
        yield from ((v, "") for v in held if _is_variable(v))


def _is_variable(value: Any) -> bool:
    handle = getattr(type(value), "handle", None)  # a property: only classes of variables
    return handle is not None and hasattr(value, "assign")
