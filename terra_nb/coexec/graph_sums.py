"""Sums of several tensors built into the engine's graphs, in the order eager's ``AddN`` adds them.

Eager's ``AddN`` adds its inputs in their order (``in0 + in1 + in2 ...``, aggregate_ops.h): Python
holds every input, so none can be reused. In a graph, the executor hands a kernel the inputs no
other op still needs, and ``AddN`` accumulates into the first such input's buffer after swapping
it to the front: with inputs 0 and 1 held elsewhere (a function's arguments) and input 2 not, it
adds ``in2 + in1 + in0 + in3 + in4``. A float sum of three or more terms depends on its order.
Measured: a model called four times with a weight penalty, ``regions=False``, its last bias
gradient 1 ulp off eager in about one compiled step of three.

So a graph sum of three or more float terms is built as the kernel adds without reuse: its
first group (``n % 8`` terms, or 8 when that is 0, or 9 when it is 1), then each further group of
8 summed and added to the total; every sum a chain of two-term ``AddN``s, whose result no reuse
changes (``a + b`` is ``b + a``) and which refuse unequal shapes as ``AddN`` does (``AddV2``
would broadcast them).
"""

from __future__ import annotations

import functools

import tensorflow as tf
from tensorflow.python.ops import gen_math_ops

_WIDTH = 8  # aggregate_ops.h kWidth


def add_n(values: list):
    """The sum of same-shaped ``values`` as eager's ``AddN`` makes it: eagerly, and in a graph for
    two terms or exact sums (integers; variants), ``AddN`` itself."""
    values = list(values)
    dtype = values[0].dtype
    if tf.executing_eagerly() or len(values) < 3 or not (dtype.is_floating or dtype.is_complex):
        return gen_math_ops.add_n(values)
    first = len(values) % _WIDTH
    first = _WIDTH if first == 0 else _WIDTH + 1 if first == 1 else first
    total = _chain(values[:first])
    for start in range(first, len(values), _WIDTH):
        total = gen_math_ops.add_n([total, _chain(values[start:start + _WIDTH])])
    return total


def _chain(values: list):
    return functools.reduce(lambda a, b: gen_math_ops.add_n([a, b]), values)
