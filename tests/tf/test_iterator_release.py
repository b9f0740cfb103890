"""Iterators the loop drops are destroyed off its thread (``coexec/iterator_release.py``).

Destroying a ``tf.data`` iterator joins its threads and waits for an autotuning pass under way:
120-160 ms at every epoch of a Keras ``fit`` under a Terra, on the loop's thread. Each program
here makes an iterator per epoch and drops the last one, as Keras's epoch iterator does; it
runs equal to eager, and the test sees on which thread each dropped iterator was destroyed.
"""

import threading
import weakref

import numpy as np
import pytest
import tensorflow as tf
from against_eager import SEGMENTS, compare, run
from test_coexec import graph_threads

destroyed_on: list[str] = []  # the thread each watched iterator handle was destroyed on
loop_threads = [""]  # the thread the program ran its loop on


def _watch(iterator) -> None:
    weakref.finalize(iterator._iterator_resource,
                     lambda: destroyed_on.append(threading.current_thread().name))


def _epochs(dataset, loop, epochs: int = 4, steps: int = 6):
    loop_threads[0] = threading.current_thread().name
    w = tf.Variable(tf.ones((8, 1)) * 0.1)
    losses = []
    for _ in range(epochs):
        iterator = iter(dataset)
        _watch(iterator)
        for _ in loop(range(steps)):
            x = next(iterator)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(x @ w))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            losses.append(float(loss))
        del iterator  # the next epoch makes its own
    return losses, [w.numpy()]


def _own_data(loop):
    data = np.random.default_rng(0).normal(size=(48, 8)).astype("float32")
    return _epochs(tf.data.Dataset.from_tensor_slices(data).batch(8).prefetch(2), loop)


def _a_generator(loop):
    def rows():
        rng = np.random.default_rng(1)
        for _ in range(48):
            yield rng.normal(size=(8,)).astype("float32")

    spec = tf.TensorSpec((8,), tf.float32)
    return _epochs(tf.data.Dataset.from_generator(rows, output_signature=spec).batch(8), loop)


def test_an_iterator_over_its_own_data_is_destroyed_off_the_loops_thread():
    destroyed_on.clear()
    run(_own_data, None)  # eager: every iterator destroyed where the loop dropped it
    assert destroyed_on == [loop_threads[0]] * 4
    destroyed_on.clear()
    compare(_own_data, SEGMENTS, at_least=0.5)  # eager, then under a Terra
    # three handed over as the next epoch's loop began, the last one as the Terra closed
    assert destroyed_on[4:] == ["terra-iterator-release"] * 4
    assert not graph_threads()
    assert not [t for t in threading.enumerate() if t.name == "terra-iterator-release"]


def test_an_iterator_that_runs_python_is_destroyed_where_eager_destroys_it():
    destroyed_on.clear()
    compare(_a_generator, SEGMENTS, at_least=0.5)  # eager, then under a Terra
    assert destroyed_on == [loop_threads[0]] * 8


def _a_cache_iterated_anew(loop, file: str = ""):
    """A new iterator each iteration over a cache being filled (in memory, or a file whose lock
    its writer holds): the last one must be gone before the next reads, as in eager."""
    dataset = tf.data.Dataset.range(20).map(lambda i: i * 2).cache(file)
    total = tf.Variable(0, dtype=tf.int64)
    for _ in loop(range(6)):
        iterator = iter(dataset)  # the last iteration's is dropped here
        total.assign_add(next(iterator) + 1)
    return int(total), [total.numpy()]


@pytest.mark.parametrize("where", ["memory", "file"])
def test_an_iterator_over_a_cache_is_destroyed_when_dropped(where, tmp_path):
    file = str(tmp_path / "cache") if where == "file" else ""
    compare(lambda loop: _a_cache_iterated_anew(loop, file), SEGMENTS, at_least=0.3)
