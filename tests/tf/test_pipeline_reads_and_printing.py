"""What an adversarial review against eager found on the asynchronous executor, each equal to
eager now and each asserting what ran:

- an input pipeline run in an iteration (``next(it)``, ``Dataset.reduce``, ``from_generator``)
  whose functions read or write a variable sees the writes issued before it, and its writes are
  seen by ops issued after it (``coexec/input_pipeline.py``); a pipeline that reads no state
  does not wait for the graph;
- ``print`` of a variable prints its value, not ``numpy=<unavailable>``.
"""

import numpy as np
import pytest
import tensorflow as tf
from against_eager import SEGMENTS, compare

from terra_nb.coexec import input_pipeline

NO_PREFETCH = tf.data.Options()  # nothing runs ahead in the background: eager is deterministic
NO_PREFETCH.experimental_optimization.inject_prefetch = False
NO_PREFETCH.autotune.enabled = False
NO_PREFETCH.experimental_optimization.apply_default_optimizations = False


def _graph_work(w):
    h = w
    for _ in range(4):
        h = tf.tanh(h @ w)
    w.assign(h)


def _steps(loop, it, v, w=None) -> list:
    """Each step: graph work (with ``w``), a queued write of ``v``, then the pipeline's next."""
    out = []
    for _ in loop(range(12)):
        if w is not None:
            _graph_work(w)
        v.assign_add(1.0)
        out.append(float(next(it)))
    return out


def _map_reads_a_variable_written_in_the_iteration(loop):
    scale = tf.Variable(1.0)
    it = iter(tf.data.Dataset.range(100).map(lambda i: tf.cast(i, tf.float32) * scale)
              .with_options(NO_PREFETCH))
    w = tf.Variable(tf.ones((64, 64)) * 0.01)
    return _steps(loop, it, scale, w), [scale.numpy(), w.numpy()]


def _map_writes_a_variable_a_queued_op_reads(loop):
    counter = tf.Variable(0.0)
    total = tf.Variable(0.0)

    def bump(i):
        counter.assign_add(1.0)
        return i

    it = iter(tf.data.Dataset.range(100).map(bump).with_options(NO_PREFETCH))
    out = []
    for _ in loop(range(12)):
        total.assign_add(counter * 2.0)  # issued before next(): must read the old counter
        next(it)
        out.append(float(total))
    return out, [counter.numpy(), total.numpy()]


def _generator_reads_a_variable(loop):
    v = tf.Variable(0.0)
    it = iter(tf.data.Dataset.from_generator(lambda: (float(v.numpy()) for _ in range(100)),
                                             output_signature=tf.TensorSpec((), tf.float32))
              .with_options(NO_PREFETCH))
    out = []
    for _ in loop(range(12)):
        v.assign_add(tf.constant(1.5))
        out.append(float(next(it)))
    return out, [v.numpy()]


def _reduce_reads_a_variable(loop):
    scale = tf.Variable(1.0)
    dataset = tf.data.Dataset.range(5).map(lambda i: tf.cast(i, tf.float32) * scale)
    out = []
    for _ in loop(range(12)):
        scale.assign_add(1.0)
        out.append(float(dataset.reduce(0.0, lambda a, x: a + x)))
    return out, [scale.numpy()]


def _flat_map_of_a_captured_dataset(loop):
    """The map reading the variable is a captured dataset's: not in the flat_map's library."""
    v = tf.Variable(1.0)
    inner = tf.data.Dataset.range(1).map(lambda i: tf.cast(i, tf.float32) + v)
    it = iter(tf.data.Dataset.range(100).flat_map(lambda i: inner).with_options(NO_PREFETCH))
    w = tf.Variable(tf.ones((64, 64)) * 0.01)
    return _steps(loop, it, v, w), [v.numpy()]


def _a_dataset_a_function_made(loop):
    """A dataset a tf.function returned: its making is not known here."""
    v = tf.Variable(1.0)

    @tf.function
    def make():
        return tf.data.Dataset.range(100).map(lambda i: tf.cast(i, tf.float32) * v) \
            .with_options(NO_PREFETCH)

    it = iter(make())
    return _steps(loop, it, v), [v.numpy()]


def _reduce_runs_python(loop):
    v = tf.Variable(1.0)
    dataset = tf.data.Dataset.range(3)
    out = []
    for _ in loop(range(12)):
        v.assign_add(1.0)
        out.append(float(dataset.reduce(0.0, lambda a, x: a + tf.py_function(
            lambda: float(v.numpy()), [], tf.float32))))
    return out, [v.numpy()]


@pytest.mark.parametrize("program", [
    _map_reads_a_variable_written_in_the_iteration, _map_writes_a_variable_a_queued_op_reads,
    _generator_reads_a_variable, _reduce_reads_a_variable, _flat_map_of_a_captured_dataset,
    _a_dataset_a_function_made, _reduce_runs_python])
def test_a_pipeline_reading_state_sees_the_writes_issued_before_it(program):
    compare(program, SEGMENTS, last=6)


def test_a_pipeline_of_its_own_data_does_not_wait_for_the_graph():
    plain = tf.data.Dataset.from_tensor_slices(np.arange(8.0, dtype="float32")).map(
        lambda x: x * 2.0 + tf.random.uniform(()))  # its own random stream is its own state
    scale = tf.Variable(1.0)
    stateful = plain.map(lambda x: x * scale)
    generated = tf.data.Dataset.from_generator(lambda: iter([1.0]), output_types=tf.float32)
    assert not input_pipeline.reads_state(plain.batch(2).prefetch(1))
    assert input_pipeline.reads_state(stateful.batch(2))
    assert input_pipeline.reads_state(generated)


def _prints_a_variable(loop):
    v = tf.Variable([1.0, 2.0])
    for i in loop(range(8)):
        v.assign(v * 2.0)
        print(i, repr(v).replace("\n", ""), v)
    return [], [v.numpy()]


def test_printing_a_variable_prints_its_value():
    compare(_prints_a_variable, SEGMENTS, last=4)
