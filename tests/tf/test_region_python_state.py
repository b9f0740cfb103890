"""A region's guard sees the Python state its call reads: an item of a dict or list the layer
holds, an attribute of a plain object it holds, a module global, a module's attribute, a closure
cell, a class attribute, a numpy array (small or large), a standard-library object's attribute (a
``threading.Event``), a Keras loss's keyword arguments. Each is changed in the middle
of a training loop; the values stay eager's, and the region misses once (naming what changed)
and forms again (``terra_nb.regions.python_state``)."""

from __future__ import annotations

import functools
import itertools
import logging
import threading

import keras
import numpy as np
import pytest
import scale_config
import tensorflow as tf
from region_programs import OPTIONS, assert_one_miss_naming, compare, data, formed, rows, state_of

MODES = list(OPTIONS)
SCALE = 2.0  # a module global HiddenState.call reads
CHANGE_AT = 6


class Settings:
    """A plain object a layer holds."""

    def __init__(self) -> None:
        self.scale = 2.0


def closure_scale():
    """A scale kept in a closure cell: (read it, set it)."""
    scale = 2.0

    def get() -> float:
        return scale

    def put(value: float) -> None:
        nonlocal scale
        scale = value

    return get, put


class HiddenState(keras.layers.Layer):
    """A layer whose call reads Python state that no argument carries."""

    offset = 0.0  # a class attribute

    def __init__(self) -> None:
        super().__init__()
        self.cfg = {"scale": 2.0}
        self.factors = [2.0]
        self.settings = Settings()
        self.get_scale, self.put_scale = closure_scale()
        self.mask = np.ones(4, np.float32)
        self.table = np.ones(5000, np.float32)  # more than a small array: compared all the same
        self.flag = threading.Event()

    def call(self, x):
        scale = self.cfg["scale"] * self.factors[0] * self.settings.scale * SCALE
        scale *= scale_config.SCALE * (1.5 if self.flag.is_set() else 1.0)
        return (x * scale * self.get_scale() + HiddenState.offset) * self.mask * self.table[:4]


def _set_global(value: float) -> None:
    global SCALE
    SCALE = value
    scale_config.SCALE = value


CHANGES = {  # what changes at step CHANGE_AT, and what the miss names
    "dict item": (lambda layer: layer.cfg.__setitem__("scale", 3.0), "HiddenState.cfg['scale']"),
    "list item": (lambda layer: layer.factors.__setitem__(0, 3.0), "HiddenState.factors[0]"),
    "plain object": (lambda layer: setattr(layer.settings, "scale", 3.0),
                     "HiddenState.settings.scale"),
    "module global": (lambda layer: _set_global(3.0), "global SCALE"),
    "closure cell": (lambda layer: layer.put_scale(3.0), "closure scale"),
    "class attribute": (lambda layer: setattr(HiddenState, "offset", 1.0), "HiddenState.offset"),
    "numpy array": (lambda layer: layer.mask.__setitem__(0, 0.5), "numpy array of shape (4,)"),
    "large numpy array": (lambda layer: layer.table.__setitem__(1, 0.5),
                          "numpy array of shape (5000,)"),
    "module attribute": (lambda layer: setattr(scale_config, "SCALE", 3.0), "scale_config.SCALE"),
    "standard-library object": (lambda layer: layer.flag.set(), "HiddenState.flag._flag"),
}


def hidden_state_program(change: str, steps: int = 14):
    def program(loop):
        _set_global(2.0)
        HiddenState.offset = 0.0
        layer = HiddenState()
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), layer,
                                  keras.layers.Dense(4)])
        opt = keras.optimizers.Adam(0.01)
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        losses = []
        try:
            for i, (x, y) in enumerate(loop(data(steps))):
                if i == CHANGE_AT:
                    CHANGES[change][0](layer)
                with tf.GradientTape() as tape:
                    loss = lossf(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                losses.append(float(loss))
        finally:
            _set_global(2.0)
            HiddenState.offset = 0.0
        return losses, state_of(model, opt)

    return program


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change", list(CHANGES))
def test_hidden_python_state_changed_mid_loop_misses_and_forms_again(change, mode):
    terra, _, _ = compare(hidden_state_program(change), OPTIONS[mode])
    assert_one_miss_naming(terra, "Sequential.__call__", CHANGES[change][1])


def huber_program(loop):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    lossf = keras.losses.Huber(delta=1.0)
    losses = []
    for i, (x, y) in enumerate(loop(data(14))):
        if i == CHANGE_AT:
            lossf._fn_kwargs["delta"] = 0.25  # Keras's own dict of the loss function's kwargs
        with tf.GradientTape() as tape:
            loss = lossf(tf.cast(y, tf.float32)[:, None] * 3.0, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    return losses, state_of(model, opt)


@pytest.mark.parametrize("mode", MODES)
def test_a_loss_keyword_changed_in_its_dict_misses(mode):
    terra, _, _ = compare(huber_program, OPTIONS[mode])
    row = formed(terra, "Huber.__call__")
    assert row.misses == 1 and "Huber._fn_kwargs['delta']" in row.last_miss, str(terra.regions)
    assert row.hits >= 5


def layer_loop(layer, before_step, steps: int = 12, dense: bool = False, result=None):
    """A loop reading ``sum(model(x))`` every step of a model around a ``layer()`` (after a
    Dense layer with ``dense``); ``before_step(layer, i)`` runs first in step i; ``result(layer)``
    is the last value. Returns a program."""

    def program(loop):
        model = keras.Sequential([keras.Input((8,))] + [keras.layers.Dense(4)] * dense + [layer()])
        out = []
        for i, (x, _) in enumerate(loop(data(steps))):
            before_step(model.layers[-1], i)
            out.append(float(tf.reduce_sum(model(x))))
        return out + ([result(model.layers[-1])] if result else []), state_of(model)

    return program


def assert_hits_without_misses(program, mode: str) -> None:
    terra, _, _ = compare(program, OPTIONS[mode])
    row = formed(terra, "Sequential.__call__")
    assert row.misses == 0 and row.hits >= 8, str(terra.regions)


def assign_equal_scalars(layer, step: int) -> None:
    layer.cfg["scale"] = float("2.0")  # a new float object, equal to the old one
    layer.settings.scale = np.float32(2.0)  # a new numpy scalar, equal ...
    layer.gain = np.float32(1.0)  # ... also assigned on the Keras layer (counted writes)


@pytest.mark.parametrize("mode", MODES)
def test_an_equal_scalar_assigned_every_step_does_not_miss(mode):
    assert_hits_without_misses(layer_loop(HiddenState, assign_equal_scalars, dense=True), mode)


class CountsInADict(keras.layers.Layer):
    """A layer that counts its calls in a dict item: an effect a region would lose."""

    def __init__(self) -> None:
        super().__init__()
        self.stats = {"calls": 0}

    def call(self, x):
        self.stats["calls"] += 1
        return x * 2.0


@pytest.mark.parametrize("mode", MODES)
def test_a_call_that_changes_a_dict_item_in_place_is_refused(mode):
    program = layer_loop(CountsInADict, lambda layer, step: None,
                         result=lambda layer: layer.stats["calls"])  # as many calls as eager's
    terra, _, _ = compare(program, OPTIONS[mode])
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and row.hits == 0
    assert "CountsInADict.stats['calls']" in row.reason, str(terra.regions)


class Unwalkable:
    """An object that resists a walk: its class's ``__module__`` is no string (a Cython type's
    may be a descriptor) and a missing attribute raises another error than AttributeError."""

    __module__ = property(lambda self: "elsewhere")

    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")


class Holder(keras.layers.Layer):
    """A layer holding objects its call never reads: a logger, an unwalkable object, a list the
    loop appends to."""

    def __init__(self) -> None:
        super().__init__()
        self.log = logging.getLogger("terra-test-holder")
        self.odd = Unwalkable()
        self.history = []

    def call(self, x):
        return x * 2.0


def new_logger(layer, step: int) -> None:
    logging.getLogger(f"terra-test-{step}")  # the logging module's registry grows


@pytest.mark.parametrize("mode", MODES)
def test_library_objects_a_layer_holds_are_kept_by_identity(mode):
    # the standard library's and installed packages' objects are not walked: a logger created in
    # the loop is no change, and an object that resists a walk is no error
    assert_hits_without_misses(layer_loop(Holder, new_logger), mode)


class Keyed(keras.layers.Layer):
    """A layer whose call reads a dict's keys, two lists' items and a partial's keywords."""

    def __init__(self) -> None:
        super().__init__()
        self.weights_by_name = {"a": 1.0}
        self.front, self.back = [1.0, 2.0], [3.0]
        self.scale = functools.partial(lambda x, k: x * k, k=2.0)

    def call(self, x):
        total = sum(len(name) for name in self.weights_by_name) + len(self.front)
        return self.scale(x) * float(total)


KEYED_CHANGES = {
    "dict key": (lambda layer: layer.weights_by_name.update({"bb": layer.weights_by_name.pop("a")}),
                 "Keyed.weights_by_name (keys)"),
    "item moved between lists": (lambda layer: layer.back.insert(0, layer.front.pop()),
                                 "Keyed.front"),
    "partial keyword": (lambda layer: layer.scale.keywords.__setitem__("k", 3.0),
                        "Keyed.scale['k']"),
}


def change_at(change):
    def before_step(layer, step: int) -> None:
        if step == CHANGE_AT:
            change(layer)

    return before_step


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change", list(KEYED_CHANGES))
def test_keys_sizes_and_partials_are_guarded(change, mode):
    program = layer_loop(Keyed, change_at(KEYED_CHANGES[change][0]), steps=14)
    terra, _, _ = compare(program, OPTIONS[mode])
    row = formed(terra, "Sequential.__call__")
    assert row.misses == 1 and KEYED_CHANGES[change][1] in row.last_miss, str(terra.regions)


def scales():
    """The same scale forever; how often it was drawn is the generator's own state."""
    drawn = 0
    while True:
        drawn += 1
        yield 2.0


class Scheduled(keras.layers.Layer):
    """A layer whose call advances a generator: an effect a region would lose."""

    def __init__(self) -> None:
        super().__init__()
        self.schedule = scales()

    def call(self, x):
        return x * next(self.schedule)


@pytest.mark.parametrize("mode", MODES)
def test_a_call_that_advances_a_generator_is_refused(mode):
    program = layer_loop(Scheduled, lambda layer, step: None,
                         result=lambda layer: layer.schedule.gi_frame.f_locals["drawn"])
    terra, _, _ = compare(program, OPTIONS[mode])
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and row.hits == 0
    assert "Scheduled.schedule" in row.reason, str(terra.regions)


class Cycled(keras.layers.Layer):
    """A layer whose call advances an ``itertools.cycle``: a C iterator, whose position no
    walk can read."""

    def __init__(self) -> None:
        super().__init__()
        self.gains = itertools.cycle([2.0, 3.0])

    def call(self, x):
        return x * next(self.gains)


@pytest.mark.parametrize("mode", MODES)
def test_a_layer_holding_an_iterator_of_the_standard_library_is_refused(mode):
    program = layer_loop(Cycled, lambda layer, step: None, result=lambda layer: next(layer.gains))
    terra, _, _ = compare(program, OPTIONS[mode])
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and row.hits == 0
    assert "Cycled.gains" in row.reason and "itertools.cycle" in row.reason, str(terra.regions)


class BigTable(keras.layers.Layer):
    """A layer holding more numpy data than a hit compares (4.4 MB)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = np.ones(1_100_000, np.float32)

    def call(self, x):
        return x * self.table[:8]


def rewrite_table(layer, step: int) -> None:
    layer.table[step % 8] = float(step)  # in place, every step


@pytest.mark.parametrize("mode", MODES)
def test_a_layer_holding_more_numpy_data_than_a_hit_compares_is_refused(mode):
    terra, _, _ = compare(layer_loop(BigTable, rewrite_table), OPTIONS[mode])
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and row.hits == 0
    assert "BigTable.table" in row.reason and "MiB" in row.reason, str(terra.regions)


class Shifted(keras.layers.Layer):
    """A layer holding a tensor made before any call (as Keras's ``Normalization`` holds its
    mean): its value is baked into the region, guarded by the attribute that holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.shift = tf.constant(np.linspace(0.0, 1.0, 8, dtype=np.float32))

    def call(self, x):
        return x + self.shift


def new_shift(layer, step: int) -> None:
    if step == CHANGE_AT:
        layer.shift = tf.constant(np.full(8, 2.0, np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_a_tensor_the_layer_holds_is_baked_in_and_guarded_by_its_attribute(mode):
    terra, _, _ = compare(layer_loop(Shifted, new_shift, steps=14), OPTIONS[mode])
    row = formed(terra, "Sequential.__call__")
    assert row.misses == 1 and row.hits >= 8, str(terra.regions)


def normalized_program(loop):
    mean, variance = np.arange(8, dtype=np.float32), np.linspace(1.0, 2.0, 8, dtype=np.float32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Normalization(mean=mean,
                                                                            variance=variance),
                              keras.layers.Dense(4)])
    out = [float(tf.reduce_sum(model(x))) for x, _ in loop(data(12))]
    return out, state_of(model)


@pytest.mark.parametrize("mode", MODES)
def test_keras_normalization_given_its_statistics_forms_a_region(mode):
    terra, _, _ = compare(normalized_program, OPTIONS[mode])
    assert formed(terra, "Sequential.__call__").hits >= 8, str(terra.regions)


class Options:
    """A plain object passed to the call as an argument."""

    def __init__(self) -> None:
        self.scale = 2.0


class WithOptions(keras.layers.Layer):
    def call(self, x, options=None):
        return x * options.scale


def options_program(loop):
    options = Options()
    model = WithOptions()
    out = []
    for i, (x, _) in enumerate(loop(data(14))):
        if i == CHANGE_AT:
            options.scale = 3.0
        out.append(float(tf.reduce_sum(model(x, options=options))))
    return out, state_of(model)


@pytest.mark.parametrize("mode", MODES)
def test_an_argument_objects_attribute_changed_misses(mode):
    terra, _, _ = compare(options_program, OPTIONS[mode])
    row = formed(terra, "WithOptions.__call__")
    assert row.misses == 1 and "Options.scale" in row.last_miss, str(terra.regions)
