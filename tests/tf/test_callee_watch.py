"""Formation's watch over a call's callees (``regions/callee_watch.py``, the table in
``regions/callee_rules.py``): what refuses a region names the callee and the line, and what the
user's code may do without refusing it (build local lists, push and pop, return a list) does
not. End to end: a layer calling an unlisted function runs its Python on every call, as eager;
one that only builds local containers forms its region."""

from __future__ import annotations

import bisect
import collections
import json
import logging
import random
import shlex
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import EAGER, compare, formed, rows, state_of

from terra_nb.regions.callee_watch import CalleeWatch

KEPT: list = []  # a list that outlives every call


def watched(fn):
    watch = CalleeWatch()
    with watch:
        result = fn()
    return watch.finish(result)


def _outside_generator():
    yield from range(10)


STARTED = _outside_generator()
next(STARTED)


REFUSED = {  # what the user's code calls -> words the reason holds
    "print": (lambda: print(end=""), "print()"),
    "logging": (lambda: logging.getLogger("terra-test").debug("x"), "logging"),
    "random": (lambda: random.random(), "random"),
    "time": (lambda: time.time(), "time.time"),
    "an unlisted stdlib module": (lambda: shlex.quote("a b"), "shlex.quote"),
    "append to a kept list": (lambda: KEPT.append(1), "changes a list that outlives"),
    "a bound append": (lambda: (KEPT.append)(1), "changes a list that outlives"),
    "a deque kept": (lambda: QUEUE.append(1), "changes a deque"),
    "an array filled in place": (lambda: ARRAY.fill(2.0), "changes a ndarray"),
    "a generator started before": (lambda: next(STARTED), "generator _outside_generator"),
    "open": (lambda: open(__file__).close(), "io.open"),
}
QUEUE = collections.deque()
ARRAY = np.zeros(3)


@pytest.mark.parametrize("kind", REFUSED)
def test_what_refuses_names_the_callee_and_line(kind):
    fn, words = REFUSED[kind]
    reasons = watched(fn)
    assert reasons and words in " ".join(reasons), reasons
    assert "test_callee_watch.py:" in " ".join(reasons) or "outlives" in " ".join(reasons)


def _local_work():
    out, seen = [], {}
    for i in range(3):
        out.append(i)
        seen.setdefault(i, []).append(i)
    out.sort()
    return sum(out) + len(seen) + int(np.sum(np.asarray(out)))


def _push_pop():
    KEPT.append(1)
    KEPT.pop()


def _returns_a_list():
    out = []
    out.append(2)
    return out


@pytest.mark.parametrize("fn", [_local_work, _push_pop, _returns_a_list,
                                lambda: json.dumps(sorted({3: 1, 1: 2})),
                                lambda: bisect.bisect_right([1, 2, 3], 2)])
def test_what_the_users_code_may_do(fn):
    assert watched(fn) == []


def test_a_trusted_caller_vouches_for_an_unlisted_function():
    """Keras's and TensorFlow's Python call standard-library functions the table does not list
    (terra-nb's GraphRunner calls ``queue``): trusted with their caller, their own callees too.
    The same function called by the user's code refuses."""
    keras_like = {"__name__": "keras.src.terra_test_module", "shlex": shlex}
    exec("def quote(value):\n    return shlex.quote(value)\n", keras_like)
    assert watched(lambda: keras_like["quote"]("a b")) == []
    assert "shlex.quote" in " ".join(watched(lambda: shlex.quote("a b")))


def test_an_active_profiler_refuses():
    sys.setprofile(lambda *a: None)
    try:
        assert "profiler is active" in " ".join(watched(lambda: 1))
    finally:
        sys.setprofile(None)


class Logging(keras.layers.Layer):
    """Doubles its input and logs through the standard library on every call."""

    def call(self, x):
        logging.getLogger("terra-test").debug("called")
        return x * 2.0


class LocalLists(keras.layers.Layer):
    """Builds local containers in its call (as user layers do): no effect."""

    def call(self, x):
        parts = []
        for scale in (1.0, 2.0):
            parts.append(x * scale)
        return parts[0] + parts[1]


def _program(layer):
    def program(loop):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), layer()])
        out = []
        for x in loop([np.full((2, 4), i, "float32") for i in range(10)]):
            out.append(model(x).numpy())
        return out, state_of(model)

    return program


def test_a_layer_calling_logging_is_refused_and_runs_its_python():
    terra, _, _ = compare(_program(Logging), EAGER)
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and "calls logging.getLogger, which logs" in row.reason
    assert "test_callee_watch.py:" in row.reason and row.hits == 0
    assert row.reason in str(terra.explain())


def test_a_layer_building_local_lists_forms_its_region():
    terra, _, _ = compare(_program(LocalLists), EAGER)
    assert formed(terra, "Sequential.__call__").hits >= 5


class Guarded(keras.layers.Layer):
    """Catches an error of its own op in its call (an index out of range: the input instead)."""

    def call(self, x):
        try:
            return tf.gather(x, [0, 1], axis=1) * 2.0
        except tf.errors.InvalidArgumentError:
            return x


def test_a_layer_with_a_try_is_refused_and_runs_its_python():
    """A region would run the call's ops as one function, whose error no except clause of the
    call's Python could catch (the review's F7): refused, saying so."""
    terra, _, _ = compare(_program(Guarded), EAGER)
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and "Guarded.call has a try/except" in row.reason, row.reason
    assert row.hits == 0
