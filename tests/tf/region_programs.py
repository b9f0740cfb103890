"""Programs for the region tests: small Keras training loops, run plainly and under
``Terra(regions=True)``, compared bit for bit.

``CALLS`` counts the Python calls of ``CountingDense.call`` (and of effect layers) from OUTSIDE
the objects (``call_counts.count``, kept where no guard looks), so a test can assert the object's
Python did not run on region hits.
"""

from __future__ import annotations

import collections
import contextlib
import io

import call_counts
import keras
import numpy as np
import tensorflow as tf
from watchdog import in_thread
from what_ran import coexecuted, watch

from terra_nb import Terra

CALLS = call_counts.CALLS
EAGER = {"mode": "eager", "regions": True}
COEXEC = {"regions": True}  # the default mode: coexec
OPTIONS = {"eager": EAGER, "coexec": COEXEC}


class CountingDense(keras.layers.Dense):
    def call(self, inputs, training=None):
        call_counts.count("Dense.call")
        return super().call(inputs, training=training)


class EffectLayer(keras.layers.Layer):
    """A layer whose call has one Python-visible effect."""

    def __init__(self, effect: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.effect, self.calls = effect, 0
        self.scale = tf.constant([2.0])  # a tensor made before any call

    def call(self, x):
        call_counts.count(f"EffectLayer.{self.effect}")
        if self.effect == "print":
            print("EffectLayer.call")
        elif self.effect == "counter":
            self.calls += 1
        elif self.effect == "numpy" and hasattr(x, "numpy"):  # Keras also builds symbolically
            _ = float(tf.reduce_sum(x).numpy())
        elif self.effect == "new variable":
            return x * tf.Variable(2.0)  # a new variable on every call, kept nowhere
        elif self.effect == "tensor attribute read":
            _ = float(self.scale.numpy()[0])
        elif self.effect == "resize":  # reads the size constant it makes (as SDPoint's model)
            images = tf.image.resize(tf.reshape(x, (-1, 2, 2, 2)), (3, 3))
            return tf.reshape(images, (-1, 18))
        return x * 2.0


class Subclassed(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = CountingDense(16, activation="relu")
        self.out = CountingDense(4)

    def call(self, x, training=None):
        return self.out(self.hidden(x))


def sequential(kind: str = "mlp") -> keras.Model:
    L = keras.layers  # noqa: N806
    body = {"mlp": [CountingDense(16, activation="relu"), CountingDense(4)],
            "bn": [CountingDense(16), L.BatchNormalization(), L.ReLU(), L.Dropout(0.2),
                   CountingDense(4)],
            "dropout": [CountingDense(16, activation="relu"), L.Dropout(0.3), CountingDense(4)]}
    return keras.Sequential([keras.Input((8,)), *body[kind]])


def functional() -> keras.Model:
    x = keras.Input((8,))
    h = CountingDense(16, activation="relu")(x)
    return keras.Model(x, CountingDense(4)(h))


def embedding() -> keras.Model:
    """Token ids -> Embedding -> mean -> Dense: the embedding's gradient is IndexedSlices."""
    L = keras.layers  # noqa: N806
    return keras.Sequential([keras.Input((8,), dtype="int64"), L.Embedding(50, 8),
                             L.GlobalAveragePooling1D(), CountingDense(4)])


def effect_model(*effects: str) -> keras.Model:
    return keras.Sequential([CountingDense(8), *(EffectLayer(e) for e in effects)])


def cnn() -> keras.Model:
    """Convolutions, ReLU and max pools, non-overlapping (VALID) and overlapping (SAME, 3 by
    stride 2): a pool window of ReLU zeros is a tie its gradient must break as eager does."""
    L = keras.layers  # noqa: N806
    return keras.Sequential([
        keras.Input((12, 12, 3)), L.Conv2D(6, 3, activation="relu"), L.MaxPooling2D(),
        L.Conv2D(8, 3, activation="relu"), L.MaxPooling2D(3, 2, padding="same"),
        L.Flatten(), CountingDense(4)])


MODELS = {"sequential": sequential, "functional": functional, "subclassed": Subclassed,
          "bn": lambda: sequential("bn"), "dropout": lambda: sequential("dropout"),
          "embedding": embedding, "cnn": cnn}
OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(1e-2),
    "sgd-momentum": lambda: keras.optimizers.SGD(1e-2, momentum=0.9),
    "loss-scale": lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2)),
}


def data(steps: int, batch: int = 16, seed: int = 1, sizes: dict | None = None) -> list:
    """``steps`` batches (x: f32[batch, 8], y: int64[batch]); ``sizes``: step -> batch size."""
    rs = np.random.RandomState(seed)
    out = []
    for i in range(steps):
        n = (sizes or {}).get(i, batch)
        out.append((tf.constant(rs.rand(n, 8).astype("float32")),
                    tf.constant(rs.randint(0, 4, n).astype("int64"))))
    return out


def image_data(steps: int, batch: int = 8, seed: int = 1) -> list:
    """``steps`` batches of 12 x 12 RGB images (centred: ReLU zeros in every layer) and labels."""
    rs = np.random.RandomState(seed)
    return [(tf.constant((rs.rand(batch, 12, 12, 3) - 0.5).astype("float32")),
             tf.constant(rs.randint(0, 4, batch).astype("int64"))) for _ in range(steps)]


def token_data(steps: int, batch: int = 16, seed: int = 1) -> list:
    """``steps`` batches of token ids (int64[batch, 8] below 50) and labels."""
    rs = np.random.RandomState(seed)
    return [(tf.constant(rs.randint(0, 50, (batch, 8)).astype("int64")),
             tf.constant(rs.randint(0, 4, batch).astype("int64"))) for _ in range(steps)]


def state_of(*objects) -> list[np.ndarray]:
    return [v.numpy() for obj in objects for v in obj.variables]


def step(net, opt, lossf, x, y):
    """One training step: the model call and its loss under a tape, the update; the loss."""
    with tf.GradientTape() as tape:
        loss = lossf(y, net(x, training=True))
    grads = tape.gradient(loss, net.trainable_variables)
    opt.apply_gradients(zip(grads, net.trainable_variables))
    return loss


def training(model: str = "sequential", optimizer: str = "adam", steps: int = 16,
             batches: list | None = None):
    """A plain training loop: model call, loss, gradient, ``apply_gradients``, float(loss)."""

    def program(loop):
        net, opt = MODELS[model](), OPTIMIZERS[optimizer]()
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)
        CALLS.clear()
        losses = []
        for x, y in loop(batches if batches is not None else data(steps)):
            with tf.GradientTape() as tape:
                loss = lossf(y, net(x, training=True))
                target = opt.scale_loss(loss) if scaled else loss
            grads = tape.gradient(target, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))
            losses.append(float(loss))
        return losses, state_of(net, opt)

    return program


def run(program, options: dict | None, seed: int = 0):
    """``program(loop)`` plainly (``options`` None) or under ``Terra(**options)``, in a watched
    thread: (values, variables, printed text, Terra, CALLS at the end)."""

    def fn():
        keras.utils.set_random_seed(seed)
        out, terra = io.StringIO(), None
        with contextlib.redirect_stdout(out):
            if options is None:
                values, variables = program(lambda it: it)
            else:
                with Terra(**options) as terra:
                    terra.seen = watch(terra)  # for what_ran.ran_at
                    values, variables = program(terra.loop)
        return values, variables, out.getvalue(), terra, collections.Counter(CALLS)

    return in_thread(fn, 180)


def assert_bit_identical(a: list, b: list) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert np.array_equal(x, y), f"variable {i} differs by {np.max(np.abs(x - y))}"


def compare(program, options: dict, at_least: float | None = None):
    """Run ``program`` plainly and under ``options``: values, printed text and every variable
    bit-identical; under coexec, at least ``at_least`` of the iterations co-executed. Returns
    (Terra, CALLS of the Terra run, CALLS of the plain run)."""
    values, variables, printed, _, calls = run(program, None)
    values2, variables2, printed2, terra, calls2 = run(program, options)
    assert np.array_equal(np.asarray(values2), np.asarray(values), equal_nan=True)
    assert printed2 == printed
    assert_bit_identical(variables, variables2)
    phases = [s.phase for s in terra.stats]
    mode = options.get("mode", "coexec")
    if mode in ("coexec", "lazy"):  # (an iteration with no graph work says eager: counted)
        share = sum(coexecuted(s) for s in terra.stats) / len(phases)
        assert share >= (0.5 if at_least is None else at_least), (phases, str(terra.regions))
    else:
        assert set(phases) == {"eager" if mode == "eager" else "tracing"}
    return terra, calls2, calls


def rows(terra, name: str) -> list:
    """The region rows of ``name`` (e.g. ``Sequential.__call__``)."""
    return [r for r in terra.regions.rows if r.name == name]


def formed(terra, name: str):
    """The formed row of ``name`` with the most hits; asserts there is one that was hit."""
    hit = [r for r in rows(terra, name) if r.state == "formed" and r.hits > 0]
    assert hit, f"no formed region of {name} was hit:\n{terra.regions}"
    return max(hit, key=lambda r: r.hits)


def assert_one_miss_naming(terra, name: str, words: str) -> None:
    """The formed region of ``name`` missed once, naming ``words``, and hit before the change
    and after it formed again."""
    row = formed(terra, name)
    assert row.misses == 1 and words in row.last_miss, str(terra.regions)
    assert row.hits >= 5, str(terra.regions)
