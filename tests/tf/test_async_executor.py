"""The graph side runs on TensorFlow's asynchronous executor (``coexec/graph_runner.py``): what
the loop's thread must still wait for, what it must not, failures, Ctrl-C and the timeline.

A read on the synchronous executor is not ordered after a write pending on the asynchronous one,
so a real read of a variable waits for the runs issued; a constant Python makes is made on the
synchronous executor and does not wait for them. An op that fails inside a run is raised at the
step's read, inside its ``try``; a Ctrl-C while Python waits for a slow run is raised within
0.5 s; the timeline's GraphRunner spans are the executor's own times. Each test compares with
eager where values are involved and asserts what ran (what_ran.py).
"""

import gc
import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted, phases

from terra_nb import Terra
from terra_nb.capture import hooks

N = 256


def make_slow():
    """A tf.function whose run takes ``steps`` (a tensor: one signature for any count) matmul
    steps of N x N, ~0.2-1 ms each."""
    w = tf.constant(np.eye(N, dtype="float32") * 0.5)

    @tf.function(autograph=False)
    def slow(h, steps):
        return tf.while_loop(lambda i, h: i < steps,
                             lambda i, h: (i + 1, tf.tanh(h @ w) * 2.0), (0, h))[1]

    return slow


def seconds_of(slow, steps: int) -> float:
    """The least of three eager runs' seconds (the machine may be busy for one)."""
    h = tf.ones((N, N))
    slow(h, tf.constant(steps)).numpy()  # traced
    times = []
    for _ in range(3):
        start = time.perf_counter()
        slow(h, tf.constant(steps)).numpy()
        times.append(time.perf_counter() - start)
    return min(times)


def graph_threads():
    return [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]


# -- ordering -------------------------------------------------------------------------------


def steps_read_between(loop_steps, slow, n: int = 8, steps: int = 200):
    """Each step writes ``v`` from a slow run; Python reads ``v`` for real right after each step,
    outside it (an eager op between iterations)."""
    v = tf.Variable(tf.fill((N, N), 0.01))
    seen = []
    for i, step in enumerate(loop_steps(n)):
        with step:
            v.assign(slow(v * 1.0, tf.constant(steps)) * 0.5 + float(i))
        seen.append(float(tf.reduce_sum(v)))  # the first op after the step reads v
    return seen


def test_a_real_read_right_after_a_queued_write_sees_eagers_value():
    slow = make_slow()
    assert seconds_of(slow, 200) > 0.02  # the write is still pending when the read comes
    eager = steps_read_between(lambda n: [_Plain()] * n, slow)
    with Terra() as terra:
        got = steps_read_between(lambda n: (terra.step() for _ in range(n)), slow)
    assert got == eager
    assert_coexecuted(terra, last=4)


class _Plain:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def diverging_read(loop, slow, steps: int = 200):
    """A write from a slow run, then, at iteration 6 only, a read of the variable at a new
    location: a divergence, after which the read runs for real, right after the write."""
    v = tf.Variable(tf.fill((N, N), 0.01))
    out = []
    for i in loop(range(9)):
        v.assign(slow(v * 1.0, tf.constant(steps)) * 0.5 + float(i))
        if i == 6:
            out.append(float(tf.reduce_sum(v.read_value())))
    return out, float(tf.reduce_sum(v))


def test_an_op_run_for_real_after_a_queued_write_sees_eagers_value():
    slow = make_slow()
    eager = diverging_read(lambda it: it, slow)
    with Terra() as terra:
        got = diverging_read(terra.loop, slow)
    assert got == eager
    assert phases(terra)[6] == "fallback" and phases(terra)[5] == "coexec"


def constants_beside_slow_work(loop, slow, steps: int, made: list):
    """Each step queues a slow run (its segment is issued at the end of the step); the next step
    first makes a constant from numpy and a small op on it, and reads both at once."""
    v = tf.Variable(tf.fill((N, N), 0.01))
    batch = np.arange(16, dtype="float32").reshape(4, 4)
    out = []
    for i in loop(range(8)):
        start = time.perf_counter()
        c = tf.constant(batch + i)
        z = tf.zeros((4, 4)) + c
        out.append((c.shape.as_list(), float(tf.reduce_sum(z))))  # reads z's value too
        made.append((i, start, time.perf_counter()))
        v.assign(slow(v * 1.0, tf.constant(steps)) * 0.5)
    return out, float(tf.reduce_sum(v))


def test_a_numpy_constant_made_right_after_a_queued_segment_does_not_wait_for_it():
    slow = make_slow()
    steps = 400
    assert seconds_of(slow, steps) > 0.04
    eager = constants_beside_slow_work(lambda it: it, slow, steps, [])
    made: list = []
    with Terra() as terra:
        got = constants_beside_slow_work(terra.loop, slow, steps, made)
    assert got == eager
    assert_coexecuted(terra, last=5)
    # the slow run of the step before was still going when the constant had been made and read
    ends: dict[int, float] = {}  # iteration -> when the graph finished its work (spans are cut
    for s in terra.spans:        # at iteration boundaries: ``of_iteration`` is whose work)
        if s.runner == "graph" and s.kind == "exec":
            ends[s.of_iteration] = max(ends.get(s.of_iteration, 0.0), s.t_end)
    coexec = [i for i, phase in enumerate(phases(terra)) if phase == "coexec"]
    beside = [ends[i - 1] > done for i, start, done in made if i in coexec[1:]]
    assert len(beside) >= 4 and sum(beside) >= len(beside) - 1, (beside, made)


# -- failures -------------------------------------------------------------------------------


def failing_step(loop, slow, bad: int = 6, read_every: int = 1):
    """A slow run, a gather that fails at iteration ``bad`` (index 3 of 3), an update after it;
    the step's loss is read inside the try every ``read_every`` iterations (at i % n == n - 1).
    Returns what was caught where, and the state."""
    v = tf.Variable(tf.fill((N, N), 0.01))
    w = tf.Variable([1.0, 2.0, 3.0])
    caught = []
    for i in loop(range(10)):
        try:
            h = slow(v * 1.0, tf.constant(20))
            g = tf.gather(w * 2.0, 3 if i == bad else i % 3)
            v.assign(h * 0.5 + g)
            w.assign_add(tf.ones(3) * g)
            if i % read_every == read_every - 1:
                caught.append((i, float(tf.reduce_sum(w))))
        except tf.errors.InvalidArgumentError as error:
            caught.append((i, "caught", "[0, 3)" in str(error)))
            notes = getattr(error, "__notes__", [])
            caught.append(any("test_async_executor.py" in note for note in notes) or None)
    return caught, float(tf.reduce_sum(v)), w.numpy().tolist()


@pytest.mark.parametrize("options", [{}, {"compile_after": 1}], ids=["op-by-op", "compiled"])
def test_an_op_error_in_a_run_is_caught_in_its_iteration_and_the_loop_goes_on(options):
    slow = make_slow()
    eager_caught, eager_v, eager_w = failing_step(lambda it: it, slow)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with Terra(**options) as terra:
            caught, v, w = failing_step(terra.loop, slow)
    assert not [w for w in said if "terra-nb" in str(w.message)]  # caught where eager does
    eager_caught = [c for c in eager_caught if c is not None]
    assert (6, "caught", True) in eager_caught
    # caught in iteration 6 (where its read is), as in eager, naming the user's line
    assert [c for c in caught if c is not True] == eager_caught
    assert caught[caught.index((6, "caught", True)) + 1] is True
    assert v == eager_v and w == eager_w  # no update issued after the failing op took effect
    assert phases(terra)[6] == "coexec" and phases(terra)[7:] == ["coexec"] * 3
    assert_coexecuted(terra, at_least=0.5)


def test_an_op_error_that_surfaces_in_a_later_iteration_says_so():
    """Nothing of iteration 4 is read after its op fails: eager raises in iteration 4,
    co-execution at the next read, in iteration 5 (README, Known limits). A RuntimeWarning at the
    user's line says which iterations, that the state may differ from eager's from there, and
    what to do."""
    slow = make_slow()
    assert (4, "caught", True) in failing_step(lambda it: it, slow, bad=4, read_every=3)[0]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with Terra() as terra:
            caught, _, _ = failing_step(terra.loop, slow, bad=4, read_every=3)
    assert (5, "caught", True) in caught
    late = [w for w in said if "surfaced in iteration 5" in str(w.message)]
    assert len(late) == 1 and late[0].filename == __file__, [str(w.message) for w in said]
    text = str(late[0].message)
    assert "test_async_executor.py" in text and "in iteration 4" in text and "float(loss)" in text
    assert phases(terra)[4] == "coexec"


def step_then_read_in_another_try(loop, slow):
    """The step's try reads nothing of it; its loss is read in a second try of the same
    iteration. A gather fails at iteration 6: eager counts a failed step and goes on."""
    v = tf.Variable(tf.fill((N, N), 0.01))
    w = tf.Variable([1.0, 2.0, 3.0])
    log = []
    for i in loop(range(10)):
        try:
            h = slow(v * 1.0, tf.constant(20))
            g = tf.gather(w * 2.0, 3 if i == 6 else i % 3)
            v.assign(h * 0.5 + g)
            w.assign_add(tf.ones(3) * g)
        except tf.errors.InvalidArgumentError:
            log.append((i, "step failed"))
            continue
        try:
            log.append((i, float(tf.reduce_sum(w))))
        except tf.errors.InvalidArgumentError:
            log.append((i, "read failed"))
    return log, float(tf.reduce_sum(v)), w.numpy().tolist()


def test_an_op_error_caught_by_another_try_than_its_ops_says_so():
    """Nothing of the step is read inside its try: the error surfaces at the read in the second
    try of the same iteration, which catches it where eager's first one did (README, Known
    limits). A RuntimeWarning at the read's line says so; the state is eager's all the same
    (no update issued after the failing op took effect)."""
    slow = make_slow()
    eager_log, eager_v, eager_w = step_then_read_in_another_try(lambda it: it, slow)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with Terra() as terra:
            log, v, w = step_then_read_in_another_try(terra.loop, slow)
    assert eager_log[6] == (6, "step failed") and log[6] == (6, "read failed")
    assert log[:6] == eager_log[:6] and log[7:] == eager_log[7:]
    assert v == eager_v and w == eager_w
    elsewhere = [x for x in said if "among other except clauses" in str(x.message)]
    assert len(elsewhere) == 1 and elsewhere[0].filename == __file__, [str(x.message) for x in said]
    assert elsewhere[0].lineno == step_then_read_in_another_try.__code__.co_firstlineno + 16
    assert "test_async_executor.py" in str(elsewhere[0].message)
    assert phases(terra)[6] == "coexec"
    assert_coexecuted(terra, at_least=0.5)


# -- Ctrl-C ---------------------------------------------------------------------------------


def interrupted_loop(slow, long_steps: int, sent: list, raised: list):
    """A loop whose iteration 4 runs ~1.5 s of graph and reads its result; a Ctrl-C (SIGINT to
    the process) comes 0.3 s into the wait. Returns the Terra and whether it was interrupted."""
    v = tf.Variable(tf.fill((N, N), 0.01))
    timer = threading.Timer(0.3, lambda: (sent.append(time.perf_counter()),
                                         os.kill(os.getpid(), signal.SIGINT)))
    try:
        with Terra() as terra:
            for i in terra.loop(range(8)):
                y = slow(v * 1.0, tf.constant(long_steps if i == 4 else 2))
                v.assign(y * 0.5)
                if i == 4:
                    timer.start()
                try:
                    float(tf.reduce_sum(y))
                except KeyboardInterrupt:
                    raised.append(time.perf_counter())
                    raise
    except KeyboardInterrupt:
        return terra, True
    finally:
        if timer.is_alive():
            timer.join()
    return terra, False


def test_ctrl_c_while_python_waits_on_a_slow_read_is_raised_at_once():
    slow = make_slow()
    per_step = seconds_of(slow, 100) / 100
    sent, raised = [], []
    installs = hooks._installs  # values an earlier test keeps alive may hold the hooks
    terra, interrupted = interrupted_loop(slow, int(1.5 / per_step), sent, raised)
    assert interrupted and phases(terra)[4] == "coexec"
    assert sent and raised and raised[0] - sent[0] < 0.5, (sent, raised)
    # no thread, no work left in the executor, no hook, the usual SIGINT handler
    assert not graph_threads()
    graph = terra._engine.runner.graph
    assert not graph.busy and graph.executor is None  # all ran; the executor was shut down
    gc.collect()
    assert hooks._installs <= installs  # none of its own left (earlier ones may go meanwhile)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# -- confirming runs -------------------------------------------------------------------------


def halving_loop(loop, late: list, hold=None):
    """``v`` halved and shifted each step; its sum is read in the first iterations only, so
    later steps issue it as soon as it is made (Python read it before) and read it once more,
    0.1 s later, from iteration 8. ``hold(loss)``: what the loop looked at meanwhile."""
    v = tf.Variable(tf.ones((4, 4)))
    for i in loop(range(12)):
        v.assign(v * 0.5 + float(i))
        loss = tf.reduce_sum(v)
        if i < 4:
            late.append(float(loss))
        elif i >= 8:
            time.sleep(0.1)  # the run has long ended
            if hold is not None:
                hold(loss)
            late.append(float(loss))
    return late, v.numpy().tolist()


def test_a_run_is_confirmed_when_python_waits_for_it_not_when_it_ends():
    """The helper thread confirms runs when Python asks for one (completion.py): a run that
    ended while Python ran on stays unconfirmed (the helper takes no GIL from the loop's
    thread), and the read confirms it."""
    eager = halving_loop(lambda it: it, [])
    unconfirmed = []

    def hold(loss):
        item = loss.item
        unconfirmed.append(item is not None and not item.done.is_set())

    with Terra() as terra:
        got = halving_loop(terra.loop, [], hold)
    assert got == eager
    assert_coexecuted(terra, last=4)
    assert unconfirmed == [True] * 4


# -- the timeline ---------------------------------------------------------------------------


def test_graph_spans_are_the_executors_times_inside_the_loop():
    slow = make_slow()
    steps = 200
    duration = seconds_of(slow, steps)
    v = tf.Variable(tf.fill((N, N), 0.01))
    with Terra() as terra:
        begin = time.perf_counter()
        for _ in terra.loop(range(10)):
            y = slow(v * 1.0, tf.constant(steps))
            v.assign(y * 0.5)
            float(tf.reduce_sum(y))
        end = time.perf_counter()
    assert_coexecuted(terra, last=6)
    stats = terra.stats
    graph = [s for s in terra.spans if s.runner == "graph"]
    fetches = {s.iteration: s.t_start for s in terra.spans if s.kind == "fetch"}
    assert graph
    for span in graph:  # inside the loop
        assert begin <= span.t_start <= span.t_end <= end
    runs = [s for s in graph if s.kind == "exec" and s.phase == "coexec"]
    for span in runs:  # after its iteration began (when Python issued it)
        assert stats[span.iteration].t_start <= span.t_start
    for span in runs:  # the executor's own time: the slow run, not its issue (microseconds) ...
        assert span.duration > 0.5 * duration, (span, duration)
        assert span.t_end <= fetches[span.iteration]  # ... which Python's read waited for


def test_a_compiled_run_ends_with_its_own_stamp(monkeypatch):
    """A compiled segment's last output is the run's end stamp (``compile_segment``'s
    ``stamped``): the loop's thread issues one call a run, no ``Timestamp`` op beside it, and
    the run's span still ends when its ops did."""
    from terra_nb.coexec import graph_runner

    issued = []
    stamp = graph_runner.stamp
    monkeypatch.setattr(graph_runner, "stamp", lambda executor: issued.append(1) or stamp(executor))
    slow = make_slow()
    v = tf.Variable(tf.fill((N, N), 0.01))
    with Terra(compile_after=1) as terra:
        for i in terra.loop(range(8)):
            if i == 4:
                issued.clear()
            v.assign(slow(v * 1.0, tf.constant(20)) * 0.5)
            float(tf.reduce_sum(v))
    assert_coexecuted(terra, last=4)
    assert terra._engine.runner.graph.interpreted == 0
    assert issued == []
    runs = [s for s in terra.spans if s.runner == "graph" and s.kind == "exec"
            and s.iteration >= 4]
    assert len(runs) >= 4 and all(s.compiled and s.duration > 0 for s in runs)


def test_a_failing_op_without_outputs_is_named():
    """A variable's update that fails (an out-of-range ``scatter_nd_update``) has no output to
    find unmade: the error's note names its line, not the next op's."""
    v = tf.Variable(np.zeros((5, 2), "float32"))
    row = np.ones((1, 2), "float32")
    line = test_a_failing_op_without_outputs_is_named.__code__.co_firstlineno + 10
    with pytest.raises(tf.errors.InvalidArgumentError) as raised, Terra() as terra:
        for i in terra.loop(range(8)):
            try:
                v.assign_add(tf.ones((5, 2)))
                v.scatter_nd_update(np.array([[9 if i == 6 else i % 5]]), row)
            except tf.errors.InvalidArgumentError:
                pass
            float(tf.reduce_sum(v))
    assert any(f"test_async_executor.py:{line}" in note for note in raised.value.__notes__), \
        raised.value.__notes__
    assert phases(terra)[6] == "coexec"


def index_from_the_last_step(loop, raised: list) -> None:
    """Each iteration makes an index (an op) before it reads the last step's value in a try,
    then gathers with it; the gather of iteration 9 fails, and nothing of that step is read in
    its own try (the adversarial review's r2_cascade, 2026-12-07)."""
    v, z = tf.Variable(1.0), tf.Variable(0)
    table = tf.constant([1.0, 2.0, 3.0])
    prev = None
    for i in loop(range(14)):
        j = (7 if i == 9 else i % 3) + z
        if prev is not None:
            try:
                float(prev)
            except tf.errors.InvalidArgumentError as error:
                raised.append((i, "read", type(error)))
        prev = v * 2.0
        try:
            v.assign_add(tf.gather(table, j) * 0.01)
        except tf.errors.InvalidArgumentError as error:
            raised.append((i, "op", type(error)))


def test_a_value_dropped_with_an_unread_failure_raises_that_failure_where_it_is_used():
    """Iteration 10's index was issued after the failing gather, and dropped with it. The
    gather that takes it is issued once Python was told of the failure: it fails with the
    gather's error (README, Known limits: values kept from dropped runs raise the failure), not
    with terra-nb's internal 'the value of node N was not kept'."""
    eager: list = []
    index_from_the_last_step(lambda it: it, eager)
    assert eager == [(9, "op", tf.errors.InvalidArgumentError)]
    raised: list = []
    escaped = None
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            with Terra() as terra:
                index_from_the_last_step(terra.loop, raised)
        except Exception as error:  # noqa: BLE001 - what escaped the loop is asserted
            escaped = error
    assert escaped is None or type(escaped) is tf.errors.InvalidArgumentError, repr(escaped)
    assert raised[0] == (11, "read", tf.errors.InvalidArgumentError), raised
    assert {kind for _, _, kind in raised} == {tf.errors.InvalidArgumentError}
    assert any("surfaced in iteration 11" in str(w.message) for w in said)
    assert phases(terra)[9] == "coexec"
    assert_coexecuted(terra, at_least=0.5)
