"""``Terra(xla=True)`` equals eager: segments XLA would change or cannot compile run without it.

A user expects XLA to make a loop faster, never different: stateless random ops (XLA picks another
algorithm) and ops XLA has no kernel for (the gradient of ``crop_and_resize``) must not change
results or stop the loop.
"""

import numpy as np
import tensorflow as tf

from terra_nb import Terra


def train(loop):
    w = tf.Variable(tf.zeros((4, 4)))
    seed = tf.Variable([1, 2])
    img = tf.Variable(tf.random.stateless_uniform((1, 8, 8, 1), seed=[3, 4]))
    losses = []
    for _ in loop(range(6)):
        w.assign_add(tf.random.stateless_uniform((4, 4), seed=seed))
        seed.assign_add([0, 1])
        with tf.GradientTape() as tape:
            crops = tf.image.crop_and_resize(img * 1.0, [[0.1, 0.1, 0.8, 0.9]], [0], (4, 4))
            loss = tf.reduce_sum(crops * w[0, 0])
        img.assign_sub(0.1 * tape.gradient(loss, img))
        losses.append(float(loss))
    return losses, w.numpy(), img.numpy()


def test_xla_keeps_stateless_random_and_unsupported_ops_equal_to_eager():
    plain = train(lambda it: it)
    with Terra(xla=True) as terra:
        co = train(terra.loop)
    assert co[0] == plain[0]
    np.testing.assert_array_equal(co[1], plain[1])
    np.testing.assert_array_equal(co[2], plain[2])
    assert [s.phase for s in terra.stats][2:] == ["coexec"] * 4
    assert terra.programs  # compiled segments ran


def test_xla_warns_once_that_its_numerics_may_differ(monkeypatch):
    import warnings

    from terra_nb import options

    monkeypatch.setattr(options, "_xla_warned", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with Terra(xla=True) as terra:
                for _ in terra.loop(range(2)):
                    tf.constant(1.0) + 1.0
        with Terra() as terra:
            pass
    said = [w for w in caught if "XLA" in str(w.message)]
    assert len(said) == 1 and "differ from eager in the last bits" in str(said[0].message)
