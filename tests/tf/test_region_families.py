"""Shape families (``regions/families.py``): an optimizer whose sparse gradient changes shape with
every sequence length forms one region per length, and from the second length on they share ONE
forward function compiled for any shape; a later length forms from a single run. Values stay
eager's bit for bit."""

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


def adam_forwards(terra) -> set[str]:
    """The forward functions the optimizer's regions answered with (TraceGraph region calls)."""
    return {call.op_type for call in terra.graph.region_calls
            if call.name == "Adam.apply_gradients" and call.kind == "forward"}


@pytest.mark.parametrize("mode", list(OPTIONS))
def test_new_lengths_share_one_forward_function(mode):
    terra, _, _ = compare(variable_length_program, OPTIONS[mode], at_least=0.4)
    adam = [r for r in rows(terra, "Adam.apply_gradients") if r.state == "formed"]
    assert len(adam) == 4, str(terra.regions)  # one region per length ...
    # lengths 4, 6, 9 form from two runs each (4 only from its 3rd call: the first creates
    # Adam's variables) and 12 from ONE run, at its first call (step 6): each is hit 4 times
    # (12 would be hit 3 times if it had to wait for a second run)
    assert sorted(r.hits for r in adam) == [4, 4, 4, 4], str(terra.regions)
    if mode == "coexec":  # two functions answered them: the first length's own, one for any shape
        assert len(adam_forwards(terra)) == 2, adam_forwards(terra)
    # the model's regions are not shared: its output's shape follows the length
    model = [r for r in rows(terra, "Sequential.__call__") if r.state == "formed"]
    assert sorted(r.hits for r in model) == [3, 4, 4, 4], str(terra.regions)
