"""With the loop's length known (``Terra.loop`` over a list, a range, a finite dataset), the
compile policy rents ahead what a segment's runs in the iterations left would pay
(``coexec/compile_policy.py``): worth compiling, a segment compiles early in the loop; not worth it
before the loop ends, never. Without a length (a generator), the steady path's ``LOOKAHEAD``
rule stays. The end-to-end test compares with eager and asserts what ran."""

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.coexec.compile_policy import CompilePolicy
from terra_nb.coexec.lower import Segment, SegmentOp, Wire
from terra_nb.coexec.rental import LOOKAHEAD
from terra_nb.loop_length import loop_length


def _young(policy: CompilePolicy, iterations, rents):
    young = policy.young(("k",), lambda: Segment(
        (SegmentOp(0, "AddV2", (("T", "float32"),), (Wire("arg", 0), Wire("arg", 0)), 1),),
        (("float32", ()),), ((0, 0),)))
    for iteration, rent in zip(iterations, rents):
        young.sighted(iteration)
        policy.ran(young, seconds=rent * young.estimate)
    return young


@pytest.mark.parametrize("horizon, due", [(60, True), (59, False)])
def test_a_segment_rents_ahead_its_runs_in_the_iterations_left(horizon, due):
    policy = CompilePolicy()
    policy.horizon = horizon
    # every other iteration (2 of the 3 since its first), a fortieth of its compile a run:
    # spent 1/20, ahead (2/3) * (horizon - 3) / 40, due when that reaches 19/20: horizon 60
    _young(policy, [0, 2], [1 / 40, 1 / 40])
    assert policy.worth_compiling(("k",)) is due


def test_a_loop_about_to_end_compiles_nothing_and_a_first_slow_run_does_not_count_ahead():
    policy = CompilePolicy()
    young = _young(policy, [0, 1, 2], [1 / LOOKAHEAD] * 3)
    assert young.steady and policy.worth_compiling(("k",))  # no length: LOOKAHEAD iterations
    policy.horizon = 5  # two iterations left: 3/20 spent + 2/20 ahead
    assert not policy.worth_compiling(("k",))
    policy = CompilePolicy()
    policy.horizon = 20
    # a first run that instantiated functions (half the compile), then 1/40: ahead by 1/40 a run
    # (17 * 2/3 / 40 = 0.28 < 0.475 to go), not by their mean (17 * 2/3 * 0.26 > 1)
    _young(policy, [0, 2], [1 / 2, 1 / 40])
    assert not policy.worth_compiling(("k",))
    policy = CompilePolicy()
    policy.horizon = 1000
    _young(policy, [0], [1 / 40])  # one run: nothing ahead yet, however long the loop
    assert not policy.worth_compiling(("k",))


def _nested_enumerate(depth: int):
    it = [1, 2]
    for _ in range(depth):
        it = enumerate(it)
    return it


def _infinite():
    return tf.data.Dataset.range(3).repeat()


@pytest.mark.parametrize("make, length", [
    (lambda: [1, 2, 3], 3), (lambda: range(7), 7), (lambda: iter([1, 2]), 2),
    (lambda: (i for i in range(3)), None), (lambda: enumerate([1, 2]), 2),
    (lambda: iter(enumerate(range(5), start=3)), 5), (lambda: zip([1, 2], range(9)), 2),
    (lambda: zip([1, 2], (i for i in range(9))), None), (lambda: enumerate(iter(int, 1)), None),
    (lambda: tf.data.Dataset.range(4), 4), (_infinite, None),
    (lambda: type("Broken", (), {"__len__": lambda self: 1 / 0})(), None),
    (lambda: iter(tf.data.Dataset.range(10).batch(3)), 4),  # %%terra: iter(dataset)
    (lambda: enumerate(tf.data.Dataset.range(5)), 5), (lambda: iter(_infinite()), None),
    (lambda: _nested_enumerate(5000), None),  # deeper than the recursion limit: no length
    (lambda: type("Odd", (), {"__length_hint__": lambda self: 2.5, "__iter__": iter})(), None),
])
def test_the_loops_length_is_len_or_a_length_hint(make, length):
    assert loop_length(make()) == length


STEPS = 120


def alternating(loop, iterable_of):
    """Two paths taken every other iteration (neither is the steady path), a dozen small ops
    each, the value read every iteration: ``(values, final variable, iteration of the first
    compile)``; ``loop`` is a Terra's (or eager's identity) and ``iterable_of`` makes what it
    iterates over."""
    v = tf.Variable(tf.fill((4, 4), 0.5))
    values, first = [], None
    for i in loop(iterable_of(range(STEPS))):
        y = v * 0.5
        for _ in range(6):
            y = tf.tanh(y * 1.5 + 0.1) if i % 2 else tf.sigmoid(y - 0.2) * 1.1
        v.assign(y)
        values.append(float(tf.reduce_sum(y)))
        if first is None and getattr(loop, "__self__", None) is not None \
                and loop.__self__.compiled_segments:
            first = i
    return values, v.numpy(), first


def _run(iterable_of):
    eager = alternating(lambda it: it, iterable_of)
    with Terra() as terra:
        values, v, first = alternating(terra.loop, iterable_of)
        policy = terra._engine.runner.graph.policy
    assert values == eager[0] and np.array_equal(v, eager[1])
    assert_coexecuted(terra, at_least=0.5, plan="segments")
    assert policy.horizon is None  # the loop ended: a step() or the next loop starts afresh
    return first


def test_a_loop_of_known_length_compiles_its_segments_early():
    known = _run(list)
    unknown = _run(lambda r: (i for i in r))
    # ~0.5 ms of dispatch a run against a ~17 ms compile: with 110 iterations left a path repays
    # it, compiled at its third run; a generator's loop pays the rent first (~35 runs a path)
    assert known is not None and known <= 20
    assert unknown is None or unknown >= known + 10
