"""A region's backward function B: what it computes differently from eager's tape, and why it
gives the same bits (``regions/backward.py``)."""

import numpy as np
import pytest
import tensorflow as tf
from region_programs import COEXEC, compare, formed, image_data, training
from tensorflow.python.ops import gen_nn_ops

from terra_nb.regions.backward import GRADIENTS, _max_pool_grad


def test_a_cnns_backward_makes_its_max_pools_again_and_stays_bit_identical():
    terra, _, _ = compare(training("cnn", batches=image_data(20)), COEXEC, at_least=0.6)
    assert formed(terra, "Sequential.__call__").hits >= 10
    backward = [c for c in terra.graph.region_calls
                if c.kind == "backward" and "Sequential" in c.label]
    assert backward
    for call in backward:  # the overlapping pool's gradient as eager's tape makes it ...
        assert call.ops.count("MaxPoolGrad") == (1 if GRADIENTS else 2)
        # ... the other's under a NaN check: eager's kernel, or (oneDNN) the pool again and its
        # gradient in one graph, sharing the pool's workspace
        assert call.ops.count("StatelessIf") == (1 if GRADIENTS else 0)


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@pytest.mark.parametrize("shape", [(16, 30, 30, 16), (4, 13, 13, 8), (2, 7, 9, 3)])
def test_pooling_again_in_one_graph_gives_eagers_gradient_bits(shape, padding, nan):
    rng = np.random.default_rng(0)
    a = rng.normal(size=shape).astype("float32")
    if nan:
        a[rng.random(size=shape) < 0.01] = np.nan
    x = tf.nn.relu(tf.constant(a))  # windows of zeros: ties
    y = tf.nn.max_pool2d(x, 2, 2, padding)
    g = tf.constant(rng.normal(size=y.shape).astype("float32"))
    eager = gen_nn_ops.max_pool_grad(x, y, g, [1, 2, 2, 1], [1, 2, 2, 1], padding)

    @tf.function
    def again(x, y, g):  # y saved by F: an input of B
        return _max_pool_grad(MockPool(x, y, padding), g)

    assert np.array_equal(again(x, y, g).numpy().view(np.int32), eager.numpy().view(np.int32))


class MockPool:
    """What a gradient function reads of a recorded MaxPool op."""

    def __init__(self, x, y, padding: str) -> None:
        self.inputs, self.outputs = [x], [y]
        self.attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": padding,
                      "explicit_paddings": [], "data_format": "NHWC"}

    def get_attr(self, name: str):
        return self.attrs[name]
