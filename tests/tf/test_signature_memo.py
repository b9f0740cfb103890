"""A call signature's part for an eager tensor is computed once per tensor (``input_sig``):
its dtype, shape and, for a small integer tensor that may define shapes, its values."""

import numpy as np
import tensorflow as tf

from terra_nb.capture import signature
from terra_nb.capture.signature import MAX_EAGER_SIGS, input_sig


def test_an_eager_tensors_signature_is_computed_once_and_stays_its_own():
    x = tf.constant(np.ones((4, 3), "float32"))
    first = input_sig(x, False)
    assert first == (tf.float32.as_datatype_enum, (4, 3))
    assert input_sig(x, False) is first  # memoised by the tensor's id
    # shape-defining integers: two tensors of the same shape with other values differ
    a, b = tf.constant([2, 3]), tf.constant([3, 2])
    assert input_sig(a, True) == (tf.int32.as_datatype_enum, (2,), (2, 3))
    assert input_sig(b, True) == (tf.int32.as_datatype_enum, (2,), (3, 2))
    assert input_sig(a, False) == (tf.int32.as_datatype_enum, (2,))  # not shape-like: no values
    v = tf.Variable(1.0)
    assert input_sig(v.handle, False) == (tf.resource.as_datatype_enum, v.handle._id)


def test_the_memo_is_bounded():
    tensors = [tf.constant(float(i)) for i in range(MAX_EAGER_SIGS + 10)]
    for t in tensors:
        input_sig(t, False)
    assert len(signature._eager_sigs) <= MAX_EAGER_SIGS
    assert input_sig(tensors[0], False) == (tf.float32.as_datatype_enum, ())
