"""The state walk reaches what a call may read however it is held (``terra_nb.regions.
state_walk``), found by an adversarial review against eager (/work/adv11): a module held in an
attribute, what a standard-library object holds, buffers, a cached or vectorized function's
globals, keyword defaults, the dict behind a bound builtin method or a mapping proxy, a user's
dict subclass's methods, an argument object. Each is changed mid-loop: the values stay eager's,
the region misses once naming what changed and forms again. What no hit can compare refuses the
region: a call that counts in an ``array.array``, writes through ``globals()`` or loads a file
with numpy."""

from __future__ import annotations

import array
import functools
import queue
import types

import held_config
import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import OPTIONS, assert_one_miss_naming, compare, data, formed, rows, state_of

MODES = list(OPTIONS)
CHANGE_AT = 6
FACTOR = 1.0  # read by the cached helper
VEC = 1.0  # read by the vectorized helper
PSCALE = 1.0  # read by Params.scale
LOOKUP = {"s": 1.0}  # behind a bound dict.get
SETTINGS = {"g": 1.0}  # behind a mapping proxy


def _cached(v: float) -> float:
    return v * FACTOR


def _vectorized(v: float) -> float:
    return v * VEC


def _keyword(*, table={"k": 1.0}) -> float:  # noqa: B006 - the mutable default is the point
    return table["k"]


class Params(dict):
    """A user's dict subclass whose method reads a module global."""

    def scale(self) -> float:
        return self["s"] * PSCALE


PARAMS = Params(s=1.0)


class Held(keras.layers.Layer):
    """A layer whose call reads state held in every way the walk must reach."""

    def __init__(self, cached, vec, lookup) -> None:  # made by the loop: no code here names them
        super().__init__()
        self.held = held_config
        self.pending = queue.Queue()
        self.pending.put(1.0)
        self.gains = array.array("f", [1.0])
        self.cached = cached
        self.vec = vec
        self.keyword = _keyword
        self.lookup = lookup
        self.frozen = types.MappingProxyType(SETTINGS)

    def call(self, x):
        scale = self.held.GAIN * self.pending.queue[0] * self.gains[0] * self.cached(1.0)
        scale *= float(self.vec(1.0)) * self.keyword() * self.lookup("s") * self.frozen["g"]
        return x * scale * PARAMS.scale()  # (Keras would wrap a dict attribute in its own)


def _set(name: str, value) -> None:
    globals()[name] = value


def _requeue(layer) -> None:
    layer.pending.get()
    layer.pending.put(1.5)


CHANGES = {  # what changes at step CHANGE_AT, and what the miss names
    "module held in an attribute": (lambda layer: setattr(held_config, "GAIN", 1.5),
                                    "held_config.GAIN"),
    "a queue's items": (_requeue, "Held.pending.queue[0]"),
    "array.array": (lambda layer: layer.gains.__setitem__(0, 1.5), "Held.gains (array)"),
    "a cached function's global": (lambda layer: (_set("FACTOR", 1.5), layer.cached.cache_clear()),
                                   "global FACTOR"),
    "a vectorized function's global": (lambda layer: _set("VEC", 1.5), "global VEC"),
    "keyword default": (lambda layer: _keyword.__kwdefaults__["table"].__setitem__("k", 1.5),
                        "['k']"),
    "the dict behind dict.get": (lambda layer: LOOKUP.__setitem__("s", 1.5), "Held.lookup['s']"),
    "the dict behind a mapping proxy": (lambda layer: SETTINGS.__setitem__("g", 1.5),
                                        "Held.frozen"),
    "a dict subclass's method's global": (lambda layer: _set("PSCALE", 1.5), "global PSCALE"),
}


def held_program(change: str, steps: int = 14):
    def program(loop):
        defaults = dict(FACTOR=1.0, VEC=1.0, PSCALE=1.0)
        globals().update(defaults)
        held_config.GAIN, LOOKUP["s"], SETTINGS["g"] = 1.0, 1.0, 1.0
        _keyword.__kwdefaults__["table"]["k"] = 1.0
        layer = Held(functools.lru_cache(_cached), np.vectorize(_vectorized), LOOKUP.get)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), layer])
        out = []
        try:
            for i, (x, _) in enumerate(loop(data(steps))):
                if i == CHANGE_AT:
                    CHANGES[change][0](layer)
                out.append(float(tf.reduce_sum(model(x))))
        finally:
            globals().update(defaults)
            held_config.GAIN, LOOKUP["s"], SETTINGS["g"] = 1.0, 1.0, 1.0
            _keyword.__kwdefaults__["table"]["k"] = 1.0
        return out, state_of(model)

    return program


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change", list(CHANGES))
def test_state_held_any_way_changed_mid_loop_misses_and_forms_again(change, mode):
    terra, _, _ = compare(held_program(change), OPTIONS[mode])
    assert_one_miss_naming(terra, "Sequential.__call__", CHANGES[change][1])


class Counting(keras.layers.Layer):
    """Counts its calls in an ``array.array``: an effect a region would lose."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = array.array("q", [0])

    def call(self, x):
        self.calls[0] += 1
        return x * 2.0


class WritesGlobals(keras.layers.Layer):
    def call(self, x):
        globals()["LAST_CALL_SCALE"] = 2.0  # no STORE_GLOBAL: a write no walk names
        return x * 2.0


class Loads(keras.layers.Layer):
    """Reads a file with numpy in its call: the file's content is Python state."""

    path = ""

    def call(self, x):
        return x * np.load(Loads.path)[:8]


REFUSED = {  # layer, words of the refusal
    "a count in an array.array": (Counting, "Counting.calls"),
    "a write through globals()": (WritesGlobals, "calls globals()"),
    "a file read with numpy": (Loads, "reads or writes files"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(REFUSED))
def test_state_no_hit_can_compare_refuses_the_region(kind, mode, tmp_path):
    Loads.path = str(tmp_path / "scale.npy")
    layer, words = REFUSED[kind]

    def program(loop):
        np.save(Loads.path, np.full(8, 2.0, np.float32))
        model = keras.Sequential([keras.Input((8,)), layer()])
        out = []
        for i, (x, _) in enumerate(loop(data(10))):
            if i == CHANGE_AT:
                np.save(Loads.path, np.full(8, 3.0, np.float32))
            out.append(float(tf.reduce_sum(model(x))))
        return out + list(getattr(model.layers[-1], "calls", [])), state_of(model)

    terra, _, _ = compare(program, OPTIONS[mode])
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and row.hits == 0 and words in row.reason, str(terra.regions)


class SetScaled(keras.layers.Layer):
    def call(self, x, allowed=None):
        return x * float(len(allowed))


@pytest.mark.parametrize("mode", MODES)
def test_a_set_given_as_an_argument_changed_in_place_misses(mode):
    def program(loop):
        allowed = {"a", "b"}
        model = SetScaled()
        out = []
        for i, (x, _) in enumerate(loop(data(14))):
            if i == CHANGE_AT:
                allowed.add("c")
            out.append(float(tf.reduce_sum(model(x, allowed=allowed))))
        return out, state_of(model)

    terra, _, _ = compare(program, OPTIONS[mode])
    row = formed(terra, "SetScaled.__call__")
    assert row.misses == 1 and row.hits >= 5, str(terra.regions)
