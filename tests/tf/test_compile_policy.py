"""When a segment is compiled (``coexec/compile_policy.py``): ski rental. A segment runs op by op
until those runs have lost its compile estimate against compiled runs: their time on the
executor (its timestamps) outside the functions they call, plus what calling each costs; a steady
segment pays ahead. Every run is issued from the loop's thread into TensorFlow's executor, which
runs it while Python goes on, compiled or not. Every test compares with eager and asserts what
ran: how many runs were op by op and how many segments were compiled."""

import functools
import math
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.coexec import compile_policy
from terra_nb.coexec import graph_runner as runners
from terra_nb.coexec.compile_policy import CALL_GAIN_S, SPIKE, CompilePolicy, compile_estimate
from terra_nb.coexec.lower import Segment, SegmentOp, Wire, run_segment
from terra_nb.coexec.rental import LOOKAHEAD

# deep's call takes ~20 ms here: twice GRAPH_BOUND's 10 ms for its 5-op segment, so its runs do
# not flip between threads (with 200 steps it took ~10 ms, and a run in the loop's thread paid all
# of it); a bigger SIDE would make the few ops outside it rent more
SIDE, DEPTH = 256, 400


@tf.function
def deep(h, w):
    """3 * DEPTH elementwise ops on SIDE x SIDE: a call far bigger than its segment."""
    for _ in range(DEPTH):
        h = tf.tanh(h * w + 0.1)
    return h


def heavy(loop, steps: int = 60, paths: int = 2):
    """Segments that are mostly graph compute, with a big compile (deep's body) to rent; with
    two ``paths``, each runs every other iteration."""
    w = tf.Variable(tf.fill((SIDE, SIDE), 0.5))
    x = tf.reshape(tf.range(SIDE * SIDE, dtype=tf.float32) % 7.0 / 7.0, (SIDE, SIDE))
    out = []
    for i in loop(range(steps)):
        h = deep(x, w) if i % paths else deep(x, w) * 1.0
        w.assign_add(h * 1e-3)
        out.append(float(tf.reduce_sum(h)))
    return out, w.numpy()


def light(loop, steps: int = 30):
    """A few scalar ops: segments that are mostly dispatch."""
    v = tf.Variable(1.0)
    out = []
    for i in loop(range(steps)):
        y = v * 0.5 + float(i % 3) if i % 2 else v * 0.25  # two paths, each every other iteration
        v.assign(y * 0.9)
        out.append(float(y))
    return out, v.numpy()


def run_watched(program, monkeypatch, **options):
    """``program`` under Terra: (its result, Terra, one entry per segment run op by op: the
    thread that issued it)."""
    original, threads = runners.GraphRunner._run_op_by_op, []

    def op_by_op(self, item, segment):
        threads.append(threading.current_thread().name)
        return original(self, item, segment)

    monkeypatch.setattr(runners.GraphRunner, "_run_op_by_op", op_by_op)
    with Terra(**options) as terra:
        result = program(terra.loop)
    return result, terra, threads


def run_equal_to_eager(program, monkeypatch, **options):
    """``run_watched``, asserting its values and final variable equal eager's and that it
    co-executed in segments: (Terra, threads)."""
    eager = program(lambda it: it)
    (values, final), terra, threads = run_watched(program, monkeypatch, **options)
    assert values == eager[0] and np.array_equal(final, eager[1])
    assert_coexecuted(terra, at_least=0.5, plan="segments")
    return terra, threads


@pytest.mark.parametrize("paths", [1, 2])
def test_a_graph_bound_segment_runs_op_by_op_on_the_executor(monkeypatch, paths):
    program = functools.partial(heavy, paths=paths)
    eager = program(lambda it: it)
    (values, w), terra, threads = run_watched(program, monkeypatch)
    np.testing.assert_allclose(values, eager[0], rtol=1e-6)
    np.testing.assert_allclose(w, eager[1], rtol=1e-6)
    assert_coexecuted(terra, at_least=0.5, plan="segments")
    # issued by the loop's thread, run by the executor: no Python thread runs graph work
    assert set(threads) == {threading.main_thread().name}
    # compiling would save a few ops' dispatch (deep's body runs the same either way, so its
    # time is no rent) and instantiate deep's 1,200 ops again: no path pays that in 60 steps, not
    # even the steady one (paths=1), whose rent ahead is as small
    assert terra.compiled_segments == 0 and len(threads) == terra.runs_op_by_op >= 50


def test_a_run_pays_its_executor_time_outside_its_calls(monkeypatch):
    original, rents = CompilePolicy.ran, []

    def ran(self, young, seconds, calls=None):
        spent, least = young.spent, young.least if young.runs else math.inf
        original(self, young, seconds, calls)
        rents.append((seconds, calls, young.spent - spent, young.call_ops, young.call_share,
                      least))

    monkeypatch.setattr(CompilePolicy, "ran", ran)
    eager = heavy(lambda it: it)
    (values, w), terra, threads = run_watched(heavy, monkeypatch)
    np.testing.assert_allclose(values, eager[0], rtol=1e-6)
    timed = [r for r in rents if r[1] is not None]
    # the first runs time their call, then every fourth: the others take the share timed
    assert 4 <= len(timed) < len(rents) and len(rents) >= 50
    for seconds, calls, rent, call_ops, share, least in rents:
        assert call_ops == 1
        if calls is None:
            calls = share * seconds
        else:  # deep's call is most of each run, as the executor's stamps around it say
            assert calls > 0.5 * seconds
        # a compiled run spends the same in deep but the cost of calling it: the rest is rent
        # (SPIKE times the least run's at most)
        lost = max(0.0, seconds - calls) + min(calls, CALL_GAIN_S)
        assert rent == pytest.approx(min(lost, SPIKE * least))


@tf.function
def shallow(h):
    """~65 ops, 60 of them on 256 x 256 tiles of the 4 x 4 ``h``: a call of ~2 ms that is most
    of its segment's run (the ops around it are on 4 x 4), with a small compile estimate."""
    big = tf.tile(h, [64, 64])
    for _ in range(20):
        big = tf.tanh(big * 0.5 + 0.1)
    return tf.reduce_mean(tf.reshape(big, (64, 4, 64, 4)), axis=[0, 2])


def calls_in_the_loop(loop, steps: int = 60):
    """A steady segment that is one call and a few ops, run in the loop's thread (it is not
    graph-bound), whose loss is read every step, as a training step's is. Over a generator: with
    the loop's length known, the few ops' rent over the iterations left may repay the compile
    (test_compile_horizon.py), and this is about the call's rent."""
    w = tf.Variable(tf.fill((4, 4), 0.5))
    out = []
    for _ in loop(i for i in range(steps)):
        h = shallow(w)
        w.assign_add(h * 1e-3)
        out.append(float(tf.reduce_sum(h)))
    return out, w.numpy()


def test_a_call_segment_read_at_once_does_not_rent_its_calls(monkeypatch):
    original, paid = CompilePolicy.ran, []

    def ran(self, young, seconds, calls=None):
        spent = young.spent
        original(self, young, seconds, calls)
        paid.append(young.spent - spent)

    monkeypatch.setattr(CompilePolicy, "ran", ran)
    terra, threads = run_equal_to_eager(calls_in_the_loop, monkeypatch)
    # a compiled run would spend the ~2 ms call alike: what a run pays is the few ops around it
    # and what calling costs (~0.1 ms), not the call. Paying the call would compile it at its
    # third sight. On a busy machine the few ops' runs may reach the compile before the end,
    # which is the policy working
    assert len(paid) >= 10 and sum(paid) / len(paid) < 0.0005
    assert len(threads) >= 25 and terra.compiled_segments <= 1


def busy(seconds: float) -> None:
    """Python's own work, which holds the GIL (a backward pass's Python, a logger)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def calls_then_python(loop, steps: int = 40):
    """``calls_in_the_loop`` with ~4 ms of Python between the step and the read of its loss:
    the call runs on the executor meanwhile, compiled or not."""
    w = tf.Variable(tf.fill((4, 4), 0.5))
    out = []
    for _ in loop(range(steps)):
        h = shallow(w)
        w.assign_add(h * 1e-3)
        loss = tf.reduce_sum(h)
        busy(0.004)
        out.append(float(loss))
    return out, w.numpy()


def test_a_call_segment_runs_while_python_goes_on_interpreted(monkeypatch):
    # never compiled: on a busy machine the few ops around the call rent more and may compile
    # it early, which is the policy working (a suite run beside other work: 2 runs op by op
    # of 40)
    terra, threads = run_equal_to_eager(calls_then_python, monkeypatch, compile_after=10**6)
    # its ~2 ms call overlaps Python's 4 ms interpreted: a Python runner thread needed the GIL
    # back to return from it, and overlapped only once compiled
    assert len(threads) >= 30 and terra.compiled_segments == 0, threads
    python = {s.iteration: s for s in terra.spans if s.runner == "python" and s.kind == "fetch"}
    graph = [s for s in terra.spans if s.runner == "graph" and s.kind == "exec"
             and s.phase == "coexec" and s.iteration in python]
    # the graph's run of the step ended before Python read the loss in most iterations
    before = [s.t_end <= python[s.iteration].t_start for s in graph]
    assert len(before) >= 30 and sum(before) >= 0.5 * len(before), before


def test_an_untimed_run_takes_the_calls_share_of_the_timed_ones():
    policy = CompilePolicy()
    young = policy.young(("k",), lambda: _segment(4))
    young.call_ops = 2
    policy.ran(young, seconds=0.004, calls=0.003)  # timed: 3/4 of it in its calls
    assert young.call_share == pytest.approx(0.75)
    assert young.spent == pytest.approx(0.001 + 2 * CALL_GAIN_S)
    policy.ran(young, seconds=0.008)  # not timed: 6 ms in its calls
    assert young.spent == pytest.approx(0.003 + 4 * CALL_GAIN_S)
    policy.ran(young, seconds=0.004, calls=0.001)  # timed again: the share is their mean
    assert young.call_share == pytest.approx(0.5)
    young.submitted = 1
    assert young.times_calls()  # the first runs time their calls ...
    young.submitted = 5
    assert not young.times_calls()
    young.submitted = 8
    assert young.times_calls()  # ... and every fourth after
    young.call_ops = 0
    assert not young.times_calls()  # no call: nothing to stamp


@tf.function
def update(x, w):
    h = tf.tanh(x * w + 0.1)
    w.assign_sub(1e-3 * h)
    return h


@tf.function
def total(h):
    return tf.reduce_sum(h)


def calls_only(loop, steps: int = 60):
    """A step of two user functions and nothing else, its result read every 10 steps: the
    calls are the segment."""
    w = tf.Variable(tf.fill((4, 4), 0.5))
    x = tf.fill((4, 4), 0.25)
    out = []
    for i in loop(range(steps)):
        s = total(update(x, w))
        if i % 10 == 9:
            out.append(float(s))
    return out, w.numpy()


def test_a_segment_of_function_calls_only_is_no_rent_without_the_inlining_gain(monkeypatch):
    # without the calls' inlining gain as rent, a segment whose every op calls a function pays
    # nothing: its calls take its whole time on the executor, and it stays op by op
    monkeypatch.setattr(compile_policy, "CALL_GAIN_S", 0.0)
    terra, threads = run_equal_to_eager(calls_only, monkeypatch)
    assert len(threads) >= 40 and terra.compiled_segments == 0, threads


def many_ops(loop, steps: int = 40, paths: int = 2):
    """``paths`` of 150 small ops each (two: each every other iteration): their dispatch is
    rent."""
    w = tf.Variable(tf.fill((4, 4), 0.5))
    out = []
    for i in loop(range(steps)):
        h = tf.ones((4, 4)) * float(i % 2)
        for _ in range(50):
            h = tf.tanh(h * w + 0.1) if i % paths else tf.tanh(h * w - 0.1)
        w.assign_add(h * 1e-3)
        out.append(float(tf.reduce_sum(h)))
    return out, w.numpy()


def test_an_op_by_op_segment_compiles_once_its_dispatch_has_cost_its_compile(monkeypatch):
    program = functools.partial(many_ops, steps=80)  # rent is measured: room for a fast machine
    terra, threads = run_equal_to_eager(program, monkeypatch)
    # each path runs every other iteration: both rent, then compile
    assert terra.compiled_segments >= 2 and 4 <= len(threads) < len(terra.stats)


def test_a_steady_segment_of_plain_ops_rents_ahead_and_compiles_at_its_third_sight(monkeypatch):
    program = functools.partial(many_ops, paths=1)
    terra, threads = run_equal_to_eager(program, monkeypatch)
    # in every iteration since its first: its rent of 20 iterations ahead pays its compile
    assert terra.compiled_segments >= 1 and len(threads) <= 2 * len(terra.programs)


@pytest.mark.parametrize("iterations, steady", [
    ([0, 1, 2], True),  # three in a row from its first: the steady path
    ([0, 1], False),  # two in a row: one length in three drawn at random meets that
    ([0, 0, 0, 1], False),  # three times in one iteration is one iteration
    ([3, 7, 8, 9], False),  # in a row by chance, as a random length meets them
    ([0, 2, 3, 4, 5, 6, 7, 8, 9, 10], True),  # nine of ten iterations since its first
    ([0, 2, 3, 4], False),
])
def test_steady_is_nearly_every_iteration_since_the_first(iterations, steady):
    policy = CompilePolicy()
    young = policy.young(("k",), lambda: _segment(1))
    for iteration in iterations:
        young.sighted(iteration)
    assert young.steady is steady
    # a run whose rent is a twentieth of the compile: a steady segment pays ahead, others wait
    policy.ran(young, seconds=young.estimate / LOOKAHEAD)
    assert policy.worth_compiling(("k",)) is steady


def test_a_dispatch_bound_segment_stays_op_by_op(monkeypatch):
    terra, threads = run_equal_to_eager(light, monkeypatch)
    # 15 runs each of a few scalar ops cost less than a compile: neither path's segment is
    # compiled (only what both paths share, the assignment, runs every iteration)
    assert terra.compiled_segments < len(terra.programs) and terra.runs_op_by_op >= 20


def test_compile_after_one_compiles_at_once(monkeypatch):
    eager = light(lambda it: it)
    (values, v), terra, threads = run_watched(light, monkeypatch, compile_after=1)
    assert values == eager[0] and v == eager[1]
    assert terra.compiled_segments >= 1 and terra.runs_op_by_op == 0 and not threads


def _segment(n_ops: int) -> Segment:
    ops = tuple(SegmentOp(p, "AddV2", (("T", "float32"),), (Wire("arg", 0), Wire("arg", 0)), 1)
                for p in range(n_ops))
    return Segment(ops, (("float32", ()),), ((0, 0),))


@pytest.mark.parametrize("n_ops", [1, 40])
def test_ski_rental(n_ops):
    policy = CompilePolicy()
    young = policy.young(("k",), lambda: _segment(n_ops))
    assert young.estimate == compile_estimate(young.segment) > 0
    assert policy.young(("k",), lambda: 1 / 0) is young  # built once
    # a run pays rent for its time on the executor outside the functions it calls (a compiled
    # run spends the same in them)
    rent = 0.002
    policy.ran(young, seconds=young.estimate / 2 + 2 * rent, calls=rent)
    runs = 1
    while not policy.worth_compiling(("k",)):
        policy.ran(young, seconds=0.01, calls=0.01 - rent)
        runs += 1
    assert runs == math.ceil(young.estimate / 2 / rent)
    assert young.spent == pytest.approx(young.estimate / 2 + runs * rent)
    policy.compiled(("k",))
    assert policy.segments() == () and policy.worth_compiling(("k",))


def test_each_function_call_rents_what_inlining_it_in_a_compiled_segment_saves():
    # mlp-small's tape G and Adam step interpreted: 1.15-1.51 ms a run, compiled 0.76-0.79 ms. A
    # run whose time is all in its calls paid no rent, and such a segment never compiled
    name = total.get_concrete_function(tf.TensorSpec((4, 4), tf.float32)).name.decode()
    total(tf.ones((4, 4)))  # registered with the runtime: an op type that calls a function
    calls = tuple(SegmentOp(p, name, (), (Wire("arg", 0),), 1) for p in range(3))
    policy = CompilePolicy()
    young = policy.young(("k",), lambda: Segment(calls, (("float32", (4, 4)),), ((2, 0),)))
    assert young.call_ops == 3
    policy.ran(young, seconds=0.005, calls=0.005)  # all of it in the calls
    assert young.spent == pytest.approx(3 * CALL_GAIN_S)
    policy.ran(young, seconds=1e-4, calls=1e-4)  # calls shorter than that: gained whole
    assert young.spent == pytest.approx(3 * CALL_GAIN_S + 1e-4)
    while not policy.worth_compiling(("k",)):  # (not steady, no horizon: no rent ahead)
        policy.ran(young, seconds=0.005, calls=0.005)
    # compiled by the first run whose rent reached the estimate
    assert young.spent - 3 * CALL_GAIN_S < young.estimate <= young.spent


def test_xla_compiles_as_asked_and_lists_each_segment_once(monkeypatch):
    def steady(loop):
        v, out = tf.Variable(1.0), []
        for _ in loop(range(6)):
            v.assign(v * 0.5 + 1.0)
            out.append(float(v))
        return out, v.numpy()

    eager = steady(lambda it: it)
    (values, v), terra, _ = run_watched(steady, monkeypatch, xla=True)
    assert values == eager[0] and v == eager[1]
    assert_coexecuted(terra, at_least=0.5, plan="segments")
    assert terra.compiled_segments == len(terra.programs) >= 1  # none listed young as well


def test_one_slow_run_of_a_steady_segment_does_not_pay_its_compile_ahead():
    # a steady segment rents ahead by its runs' mean rent: the last run's, 20 times over, made
    # one slow run (a busy machine) compile a segment whose calls are most of it (a flaky test)
    policy = CompilePolicy()
    young = policy.young(("k",), lambda: _segment(4))
    small = young.estimate / LOOKAHEAD / 20
    for iteration in range(9):
        young.sighted(iteration)
        policy.ran(young, seconds=small)
    assert young.steady and not policy.worth_compiling(("k",))
    young.sighted(9)
    policy.ran(young, seconds=young.estimate / LOOKAHEAD * 2)  # alone, it would pay 2 compiles
    assert not policy.worth_compiling(("k",))
    # and it counts SPIKE times the least run at most (a run another process cut short)
    assert young.rent == pytest.approx((9 * small + SPIKE * small) / 10)


def read_then_update(loop, steps: int = 30):
    """A steady path of many small ops whose sum is read (it compiles early), and an update
    issued after the sum but before the read: the read submits the path, then the update as a
    segment of its own, issued after the path's compile."""
    w = tf.Variable(tf.fill((4, 4), 0.5))
    out = []
    for _ in loop(range(steps)):
        h = w * 1.0
        for _ in range(50):
            h = tf.tanh(h * w + 0.1)
        s = tf.reduce_sum(h)
        w.assign_add(h * 1e-3)
        out.append(float(s))
    return out, w.numpy()


def test_a_compile_is_no_run_time(monkeypatch):
    original_compile, original_ran, rents = runners.compile_segment, CompilePolicy.ran, []

    def slow_compile(*args, **kwargs):
        time.sleep(0.3)
        return original_compile(*args, **kwargs)

    def ran(self, young, seconds, calls=None):
        spent = young.spent
        original_ran(self, young, seconds, calls)
        rents.append(young.spent - spent)

    monkeypatch.setattr(runners, "compile_segment", slow_compile)
    monkeypatch.setattr(CompilePolicy, "ran", ran)
    terra, threads = run_equal_to_eager(read_then_update, monkeypatch)
    assert terra.compiled_segments >= 1 and threads
    # the path's compile (0.3 s, on the loop's thread before it is issued) is in no run's time
    # on the executor: a young segment issued after it does not pay it (a compile happens once,
    # and on rnn-varlen each compile's wait made the next young segment due)
    assert rents and max(rents) < 0.1, rents
    spans = [s for s in terra.spans if s.runner == "graph" and s.kind == "exec"]
    assert max(s.duration for s in spans) < 0.2


def test_timing_the_calls_of_an_interpreted_run_never_waits_for_a_stamp():
    # The stamps are pending tensors on the executor: asking whether one is true read it, and the
    # loop's thread waited for the graph at every timed call of rnn-varlen's interpreted runs
    name = total.get_concrete_function(tf.TensorSpec((4, 4), tf.float32)).name.decode()
    total(tf.ones((4, 4)))
    calls = tuple(SegmentOp(p, name, (), (Wire("arg", 0),), 1) for p in range(3))
    segment = Segment(calls, (("float32", (4, 4)),), ((2, 0),))

    class Stamp:
        def __bool__(self):
            raise AssertionError("a stamp was read as a truth value")

    timings = []
    values = run_segment(segment, [tf.ones((4, 4))], {}, timings, [], Stamp)
    assert float(values[0]) == 16.0
    # one stamp between two calls serves as the end of the first and the start of the next
    assert len(timings) == 3 and all(type(s) is Stamp for pair in timings for s in pair)
    assert timings[0][1] is timings[1][0] and timings[1][1] is timings[2][0]
