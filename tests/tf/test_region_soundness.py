"""Regions must not change what a loop computes: each test here is one kind of silent wrong
result a review against eager found (each equals eager with ``Terra(regions=False)``).

Every test runs a loop plainly (eager) and under ``Terra()`` (regions on, co-execution), and
asserts three things: the values equal eager's bit for bit (every step's, then the variables),
the call involved was either refused with a reason naming the cause (shown by ``explain()``) or
formed (and its values still equal eager's), and most iterations co-executed (so a loop that
silently stopped co-executing does not pass on eager's own numbers).

The kinds: a Python branch on a variable's value inside a call (a layer's own step counter,
Keras's gradient accumulation, EMA overwrite and loss-scale growth, a branch that flips many
times), ``tf.custom_gradient`` in a layer, a numpy Generator drawn in a call, ``logging`` in a
call, a bound builtin (``list.append``) called in a call, and a user ``tf.function`` whose
mutable default argument changes in place (DESIGN.md 5b, "Soundness").
"""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import data, rows, run, state_of
from what_ran import assert_coexecuted

DEFAULT = {}  # Terra(): regions on (calls and tapes), co-execution
CALLS_ONLY = {"regions": "calls"}  # tape regions off: the custom gradient runs in the tape


# -- comparing with eager and asserting what ran --------------------------------------------------


def same(a, b) -> bool:
    """Bit-for-bit equality of two values of a loop's log (numbers, arrays, dicts, lists)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (str, int)) or isinstance(b, (str, int)):  # a generator's state is ints
        return type(a) is type(b) and a == b
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def assert_equal_steps(got: list, eager: list, what: str = "step") -> None:
    """Every entry of the loop's log equals eager's; the message names the first that differs."""
    assert len(got) == len(eager), f"{len(got)} {what}s logged, eager logged {len(eager)}"
    differ = [i for i, (x, y) in enumerate(zip(got, eager)) if not same(x, y)]
    if differ:
        at = differ[0]
        raise AssertionError(f"{len(differ)} of {len(eager)} {what}s differ from eager, the "
                             f"first {differ[:8]}; at {at}: {short(got[at])} != eager "
                             f"{short(eager[at])}")


def short(value) -> str:
    """A value of the log for a message: arrays by their sum."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(short, value)) + "]"
    if isinstance(value, np.ndarray) and value.size > 4:
        return f"array(sum={value.sum()!r})"
    return repr(value)[:200]


def assert_sound_region(terra, names: tuple[str, ...], causes: tuple[str, ...]) -> None:
    """The calls of ``names`` (region rows by name) were guarded and either formed (formed at
    the end, or hit while formed before a miss dropped it: the values, compared before, stayed
    eager's) or were refused with a reason naming the cause (any of ``causes``,
    case-insensitively) that ``explain()`` and ``terra.regions`` show. A row left tracing that
    never hit is neither: the call ran its Python every time without saying why."""
    table = str(terra.regions)
    found = [r for name in names for r in rows(terra, name)]
    assert found, f"no region row named {names}:\n{table}"
    refused = [r for r in found if r.state == "refused"]
    for row in refused:
        assert any(c.lower() in row.reason.lower() for c in causes), (
            f"{row.name} refused without naming the cause {causes}: {row.reason!r}\n{table}")
        assert row.reason in str(terra.explain()) and row.reason in table, str(terra.explain())
    formed = any(r.state == "formed" or r.hits > 0 for r in found)
    assert refused or formed, f"neither formed nor refused:\n{table}"


def check(program, names: tuple[str, ...], causes: tuple[str, ...], options: dict | None = None,
          at_least: float = 0.5):
    """Run ``program`` eagerly and under ``Terra(**options)``: its log (per step) and variables
    equal eager's bit for bit, the calls of ``names`` ran soundly (``assert_sound_region``) and
    at least ``at_least`` of the iterations co-executed. Returns the Terra."""
    values, variables, printed, _, _ = run(program, None)
    values2, variables2, printed2, terra, _ = run(program, DEFAULT if options is None else options)
    why = f"\n{terra.regions}"
    assert_equal_steps(values2, values)
    assert_equal_steps(variables2, variables, "variable")
    assert printed2 == printed, why
    assert_sound_region(terra, names, causes)
    assert_coexecuted(terra, at_least=at_least)
    return terra


def training(make_model, make_opt, steps: int, *, scaled: bool = False, grads_kept: int = 0,
             after=None):
    """A training loop over ``data(steps)``: the model call and its loss under a tape (the loss
    scaled by ``opt.scale_loss`` with ``scaled``), the gradient, ``apply_gradients``. Logs every
    step's loss, the gradients of the first ``grads_kept`` steps, and ``after(net, opt)`` at the
    end; returns (log, the variables of the model and the optimizer)."""

    def program(loop):
        net, opt = make_model(), make_opt()
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        log = []
        for i, (x, y) in enumerate(loop(data(steps))):
            with tf.GradientTape() as tape:
                loss = lossf(y, net(x, training=True))
                target = opt.scale_loss(loss) if scaled else loss
            grads = tape.gradient(target, net.trainable_variables)
            if i < grads_kept:
                log.append([g.numpy() for g in grads])
            opt.apply_gradients(zip(grads, net.trainable_variables))
            log.append(float(loss))
        return log + ([after(net, opt)] if after else []), state_of(net, opt)

    return program


def mlp(*middle) -> keras.Model:
    """Dense(16, relu), the ``middle`` layers, Dense(4): a small classifier of 8 features."""
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                             *middle, keras.layers.Dense(4)])


class ShapeKeeping(keras.layers.Layer):
    """A layer whose output has its input's shape: Keras builds the model without calling it on
    symbolic tensors (a call counted, drawn or branched in Python only when the loop calls it)."""

    def compute_output_shape(self, shape):
        return shape


MODEL_CALL = ("Sequential.__call__",)
BRANCH = ("branch", "read", "bool", "cond")  # words a refusal of a Python branch may use


# -- 1. a Python branch on a variable's value inside a call ---------------------------------------


class EveryFourth(ShapeKeeping):
    """Owns a step counter and doubles its input on every fourth call: ``if self.step % 4 == 0``
    reads the variable in Python. ``count`` says where the call counts: "before" the branch (the
    branch reads what the call wrote) or "after" it (the branch reads the call's input state)."""

    def __init__(self, count: str) -> None:
        super().__init__()
        self.count = count
        self.step = self.add_weight(shape=(), dtype="int32", initializer="zeros",
                                    trainable=False, name="step")

    def call(self, x):
        if self.count == "before":
            self.step.assign_add(1)
        out = x * 2.0 if self.step % 4 == 0 else x
        if self.count == "after":
            self.step.assign_add(1)
        return out


@pytest.mark.parametrize("count", ["before", "after"])
def test_layer_branching_on_its_step_variable(count):
    """A layer's ``if self.step % 4 == 0`` goes the way eager's goes on each of 32 steps."""
    program = training(lambda: mlp(EveryFourth(count)), lambda: keras.optimizers.Adam(1e-2), 32)
    check(program, MODEL_CALL, BRANCH)


def opt_after(net, opt):
    """The optimizer's own variables at the end (accumulators, EMA, loss scale, iterations)."""
    return [v.numpy() for v in opt.variables]


def test_sgd_gradient_accumulation_steps():
    """Keras applies the accumulated gradient on every third step (a Python branch on its
    ``iterations``): weights keep moving to step 30 and the accumulators end as eager's."""
    program = training(mlp, lambda: keras.optimizers.SGD(0.01, gradient_accumulation_steps=3),
                       30, after=opt_after)
    check(program, ("SGD.apply_gradients",), BRANCH)


def test_adam_ema_overwrite_frequency():
    """Keras overwrites the weights with their moving average every third step (a branch on
    ``iterations``) as eager does."""
    program = training(mlp, lambda: keras.optimizers.Adam(
        1e-2, use_ema=True, ema_overwrite_frequency=3), 30, after=opt_after)
    check(program, ("Adam.apply_gradients",), BRANCH)


def test_loss_scale_growth():
    """The dynamic loss scale grows after every 4 finite steps (a branch on its step counter):
    32 grows to eager's 256 and beyond, not stuck at its first value."""
    program = training(mlp, lambda: keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.01), initial_scale=32.0, dynamic_growth_steps=4), 30,
        scaled=True, after=lambda net, opt: float(opt.dynamic_scale))
    check(program, ("LossScaleOptimizer.apply_gradients",), BRANCH)


class Flip(ShapeKeeping):
    """Computes one of two things on a Python branch on ``self.on``, a variable the loop sets."""

    def __init__(self) -> None:
        super().__init__()
        self.on = self.add_weight(shape=(), dtype="int32", initializer="zeros",
                                  trainable=False, name="on")

    def call(self, x):
        if self.on > 0:
            return x * 2.0 + 1.0
        return tf.tanh(x) - 0.5


def flip_pattern(steps: int) -> list[int]:
    """0/1 per step in runs of 4, 6, 5, 7, ... steps: long enough for a region to form and hit,
    then drop at the flip and form again for the other way (or hit the one formed before)."""
    out, runs, k = [], [4, 6, 5, 7], 0
    while len(out) < steps:
        out += [k % 2] * runs[k % len(runs)]
        k += 1
    return out[:steps]


def flipping_program(steps: int = 60):
    """A loop setting ``Flip.on`` by ``flip_pattern`` before each step's model call; it logs
    every step's output sum and loss."""

    def program(loop):
        layer = Flip()
        net, opt = mlp(layer), keras.optimizers.SGD(0.05)
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        pattern, log = flip_pattern(steps), []
        for i, (x, y) in enumerate(loop(data(steps))):
            layer.on.assign(pattern[i])
            with tf.GradientTape() as tape:
                out = net(x, training=True)
                loss = lossf(y, out)
            grads = tape.gradient(loss, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))
            log.append((float(tf.reduce_sum(out)), float(loss)))
        return log, state_of(net, opt)

    return program


def test_region_formed_dropped_and_formed_again_across_a_flipping_branch():
    """A branch that flips 10+ times over 60 steps: the model call's region forms, misses at
    each flip and forms again (or is refused), and every step's output equals eager's."""
    assert sum(a != b for a, b in zip(flip_pattern(60), flip_pattern(60)[1:])) >= 10
    check(flipping_program(), MODEL_CALL, BRANCH)


# -- 2. tf.custom_gradient inside a layer's call --------------------------------------------------


@tf.custom_gradient
def reverse_gradient(x):
    """Identity forward, the gradient negated (a domain-adversarial network's reversal)."""

    def grad(dy):
        return -dy

    return tf.identity(x), grad


class GradientReversal(keras.layers.Layer):
    def call(self, x):
        return reverse_gradient(x)


@pytest.mark.parametrize("options", [DEFAULT, CALLS_ONLY], ids=["regions", "calls"])
def test_custom_gradient_in_a_layer(options):
    """The gradient through a reversal layer is negated as in eager: the first steps' gradients
    and 30 steps' weights equal eager's."""
    program = training(lambda: mlp(GradientReversal()), lambda: keras.optimizers.SGD(0.05), 30,
                       grads_kept=4)
    check(program, MODEL_CALL, ("custom gradient", "custom_gradient"), options)


# -- 3. a numpy Generator drawn in a call ---------------------------------------------------------


class StochasticDepth(ShapeKeeping):
    """Skips its residual block when its own numpy Generator draws below 0.5."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(7)
        self.block = keras.layers.Dense(16)

    def build(self, shape) -> None:
        self.block.build(shape)

    def call(self, x):
        if self.rng.random() < 0.5:
            return x
        return x + self.block(x)


def test_numpy_generator_drawn_in_a_call():
    """Stochastic depth: each of 20 steps draws from the generator as eager does (outputs, and
    the generator's final state)."""
    layers = []

    def model():
        layers.append(StochasticDepth())
        return mlp(layers[-1])

    program = training(model, lambda: keras.optimizers.SGD(0.05), 20,
                       after=lambda net, opt: net.layers[1].rng.bit_generator.state)
    check(program, MODEL_CALL, ("Generator", "numpy", "random", "rng"))


# -- 4. logging inside a call ---------------------------------------------------------------------


class Records(logging.Handler):
    """Collects the messages of the records it handles."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class Logs(ShapeKeeping):
    def call(self, x):
        logging.getLogger("t").info("x %d", 1)
        return x * 2.0


def logging_program(loop):
    """20 training steps of a model whose layer logs once per call; logs the count of records
    per step (the handler is attached after the model was built)."""
    logger = logging.getLogger("t")
    handler = Records()
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        program = training(lambda: mlp(Logs()), lambda: keras.optimizers.SGD(0.05), 20,
                           after=lambda net, opt: len(handler.messages))
        handler.messages.clear()
        log, variables = program(loop)
    finally:
        logger.removeHandler(handler)
    return log, variables


def test_logging_in_a_call():
    """A layer logging in its call emits one record per call, as eager does (20)."""
    values, _, _, _, _ = run(logging_program, None)
    assert values[-1] == 20
    check(logging_program, MODEL_CALL, ("logging", "logger", "Logger"))


# -- 5. a bound builtin called in a call ----------------------------------------------------------


class Appends(ShapeKeeping):
    """Records each call with ``self.record = seen.append``: a bound builtin method."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.record = seen.append

    def call(self, x):
        self.record(1)
        return x * 2.0


def test_bound_builtin_called_in_a_call():
    """``self.record(1)`` with ``self.record = seen.append`` appends once per call (20)."""

    def program(loop):
        seen = []
        inner = training(lambda: mlp(Appends(seen)), lambda: keras.optimizers.SGD(0.05), 20,
                         after=lambda net, opt: len(seen))
        return inner(loop)

    check(program, MODEL_CALL, ("append", "builtin", "list"))


# -- 6. a user tf.function with a mutable default argument changed in place -----------------------


def default_program(loop):
    """``f(x)`` (one positional argument) of a tf.function whose default ``scale=[1.0]`` the loop
    sets to 2.0 in place at step 10; eager retraces and returns the new value. Logs every step's
    input and result sums."""
    scale = [1.0]

    @tf.function
    def f(x, scale=scale):
        return x * scale[0]

    w = tf.Variable(tf.ones([4]))
    log = []
    for i, (x, _) in enumerate(loop(data(24))):
        if i == 10:
            scale[0] = 2.0
        inp = tf.reduce_sum(x, axis=0)[:4]
        y = f(inp)
        w.assign_add(y * 0.01)
        log.append((float(tf.reduce_sum(inp)), float(tf.reduce_sum(y))))
    return log, [w.numpy()]


def test_tf_function_mutable_default_changed_in_place():
    """Every step's ``f(x)`` equals eager's, before and after the default changed."""
    values, _, _, _, _ = run(default_program, None)
    assert values[9][1] == values[9][0] and values[11][1] == 2 * values[11][0]  # eager retraced
    check(default_program, ("f (tf.function)",), ("default",))
