"""Constants from numpy batches: ``tf.constant``'s tensor, made without its one-op execution.

Every batch a loop feeds becomes a tensor two or three times a step (the region guard, the tape,
the graph's argument). TensorFlow's own conversion runs an ``_EagerConst`` op for each, which
beside a busy executor cost 50-130 us; where that op would place the tensor on the host anyway
the copy is wrapped directly (``terra_nb/capture/constants.py``).
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import constant_op

from terra_nb.capture import constants, eager_constant


def _no_op_path(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("TensorFlow's conversion (an _EagerConst op) ran")

    monkeypatch.setattr(constant_op, "convert_to_eager_tensor", refuse)


@pytest.mark.parametrize("dtype", [None, tf.float32, "float64", tf.int32])
def test_a_batch_becomes_tf_constants_tensor_without_an_op(monkeypatch, dtype):
    batch = np.random.default_rng(0).normal(size=(16, 64)).astype("float32") * 10
    expected = tf.constant(batch, dtype=dtype)
    _no_op_path(monkeypatch)
    made = eager_constant(batch, dtype)
    assert made.dtype == expected.dtype and made.shape == expected.shape
    assert made.device == expected.device
    np.testing.assert_array_equal(made.numpy(), expected.numpy())


def test_the_tensor_keeps_the_values_it_was_made_of():
    batch = np.ones((4, 4), "float32")
    made = eager_constant(batch)
    batch[:] = 7.0  # the loop refills its buffer for the next step
    np.testing.assert_array_equal(made.numpy(), np.ones((4, 4), "float32"))


def test_a_device_scope_keeps_tensorflows_conversion(monkeypatch):
    batch = np.arange(6.0).reshape(2, 3)
    with tf.device("/CPU:0"):
        assert not constants._lands_on_host(context.context())
        expected = tf.constant(batch)
        _no_op_path(monkeypatch)
        with pytest.raises(AssertionError, match="_EagerConst"):
            eager_constant(batch)
    assert expected.device.endswith("CPU:0")
