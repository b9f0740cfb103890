"""Shape families (``regions/families.py``): calls whose recordings differ only in argument shapes
share one forward function compiled for any shape, and a new shape forms from a single run.
- An optimizer whose sparse gradient changes shape with every sequence length: its outputs do not
  follow its arguments, so ONE function serves every length from the first.
- A loss over batches of changing size: its output (a scalar) is computed from its arguments, so
  the first size gets its own function and the others share one.
Values stay eager's bit for bit."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import OPTIONS, compare, rows

LENGTHS = (4, 6, 9, 4, 6, 9, 12, 4, 6, 9, 12, 4, 6, 9, 12, 4, 6, 9, 12, 4, 6, 9, 12, 4)


def variable_length_program(loop):
    """Token ids of a new length each step -> Embedding -> mean -> Dense, Adam: the embedding's
    gradient (IndexedSlices of batch x length rows) gives ``apply_gradients`` new specs."""
    L = keras.layers  # noqa: N806
    net = keras.Sequential([keras.Input((None,), dtype="int64"), L.Embedding(50, 8),
                            L.GlobalAveragePooling1D(), L.Dense(4)])
    opt = keras.optimizers.Adam(1e-2)
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rs = np.random.RandomState(3)
    batches = [(tf.constant(rs.randint(0, 50, (8, n)).astype("int64")),
                tf.constant(rs.randint(0, 4, 8).astype("int64"))) for n in LENGTHS]
    losses = []
    for x, y in loop(batches):
        with tf.GradientTape() as tape:
            loss = lossf(y, net(x, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in net.variables + opt.variables]


def forwards(terra, name: str) -> set[str]:
    """The forward functions the regions of ``name`` answered with (TraceGraph region calls)."""
    return {call.op_type for call in terra.graph.region_calls
            if call.name == name and call.kind == "forward"}


@pytest.mark.parametrize("mode", list(OPTIONS))
def test_new_lengths_share_one_forward_function(mode):
    terra, _, _ = compare(variable_length_program, OPTIONS[mode], at_least=0.4)
    adam = [r for r in rows(terra, "Adam.apply_gradients") if r.state == "formed"]
    assert len(adam) == 4, str(terra.regions)  # one region per length ...
    # lengths 4, 6, 9 form from two runs each (4 only from its 3rd call: the first creates
    # Adam's variables) and 12 from ONE run, at its first call (step 6): each is hit 4 times
    # (12 would be hit 3 times if it had to wait for a second run)
    assert sorted(r.hits for r in adam) == [4, 4, 4, 4], str(terra.regions)
    assert all(r.any_shape for r in adam), str(terra.regions)  # one function answers them all
    if mode == "coexec":
        assert len(forwards(terra, "Adam.apply_gradients")) == 1, terra.graph.region_calls
    # the model's regions are not shared: its output's shape follows the length
    model = [r for r in rows(terra, "Sequential.__call__") if r.state == "formed"]
    assert sorted(r.hits for r in model) == [3, 4, 4, 4], str(terra.regions)
    assert not any(r.any_shape for r in model)


SIZES = (8, 12, 16, 20) * 5


class Energy(keras.layers.Layer):
    """A scalar computed from the input: its shape does not follow the batch size."""

    def build(self, shape) -> None:
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return keras.ops.sum(keras.ops.square(x * self.w))


def changing_batch_program(loop):
    """An evaluation loop: a layer's scalar over batches of changing size, no tape (the plain F
    answers it)."""
    energy = Energy()
    rs = np.random.RandomState(4)
    batches = [tf.constant(rs.randn(n, 4).astype("float32")) for n in SIZES]
    total = tf.Variable(0.0)
    out = []
    for x in loop(batches):
        total.assign_add(energy(x))
        out.append(float(total))
    return out, [total.numpy()]


@pytest.mark.parametrize("mode", list(OPTIONS))
def test_a_scalar_output_shares_its_function_from_the_second_shape(mode):
    terra, _, _ = compare(changing_batch_program, OPTIONS[mode], at_least=0.4)
    rows_ = [r for r in rows(terra, "Energy.__call__") if r.state == "formed"]
    # rows in order of the sizes' first calls (8, 12, 16, 20); the first call builds the layer
    # (a variable created: no region), so 12 forms first (step 5) with its own function, 16 is
    # the family's second shape (step 6) and compiles the function for any shape, which 20
    # (step 7) and 8 (step 8) share
    assert [r.any_shape for r in rows_] == [True, False, True, True], str(terra.regions)
    assert [r.hits for r in rows_] == [2, 3, 3, 3], str(terra.regions)
    # one call site: its any-shape function and 12's own
    assert "formed (any shape; 2 versions" in str(terra.regions)
