"""Programs around early hand-over (prefetch), the light fast-path log and read-only
ops without control dependencies, each compared against eager and asserting what ran
(what_ran.py): every iteration after the two traced ones co-executed, in segments, including
the one where an error or an interrupt surfaces."""

import signal
import threading

import pytest
import tensorflow as tf
from what_ran import assert_coexecuted, assert_fell_back, ran_at, watch

from terra_nb import Terra
from terra_nb.capture.placeholder import Placeholder
from terra_nb.coexec import graph_runner as runners


def graph_threads():
    return [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]


def both(body, setup, n=8, mode="coexec"):
    """``body(i, *state)`` run n times plainly and under ``mode``; returns and final variables."""

    def run(loop):
        state = setup()
        out = [body(i, *state) for i in loop(range(n))]
        return out, [s.numpy().tolist() for s in state]

    plain = run(lambda it: it)
    with Terra(mode=mode) as terra:
        terra.seen = watch(terra)  # for what_ran.ran_at
        co = run(terra.loop)
    assert not graph_threads()
    return plain, co, terra


def two_variables():
    return tf.Variable([1.0, 2.0, 3.0]), tf.Variable(0.0)


# -- a failing op in a segment handed over early --------------------------------------------


@pytest.mark.parametrize("mode", ["coexec", "lazy"])
def test_failing_prefetched_op_stops_the_updates_pending_behind_it(mode):
    """y's op is handed over as soon as it is issued (Python read y before); the assign issued
    after it is still pending when float(y) surfaces the error. It must be dropped with it, not
    run in the next generation (it did before 636691b: w was 4.0, eager 3.0)."""

    def run(loop_mode):
        v, w = two_variables()
        with pytest.raises(tf.errors.InvalidArgumentError), Terra(mode=loop_mode) as terra:
            for i in terra.loop(range(8)):
                y = tf.gather(v * 1.0, i % 4)  # index 3 is out of range
                w.assign_add(1.0)  # eager never gets here at i == 3
                float(y)
        assert not graph_threads()
        return float(w), terra

    (plain, _), (co, terra) = run("eager"), run(mode)
    assert co == plain == 3.0
    assert_coexecuted(terra, last=2)  # the error surfaced in iteration 3, co-executed


def test_failing_prefetched_op_caught_inside_the_loop():
    def body(i, v, w):
        try:
            y = tf.gather(v * 1.0, i % 4)
            w.assign_add(1.0)  # issued after the failing op: never takes effect
            return float(y)
        except tf.errors.InvalidArgumentError:
            return "caught"

    plain, co, terra = both(body, two_variables)
    assert co == plain and plain[0][3] == "caught" and plain[1][1] == 6.0
    assert_coexecuted(terra, last=6)  # iteration 7 catches the error, co-executed


# -- which values are handed over early -----------------------------------------------------


@pytest.mark.parametrize("mode", ["coexec", "lazy"])
def test_value_fetched_only_in_some_iterations(mode):
    def body(i, v, w):
        y = v * 2.0
        v.assign_add(y * 0.1)
        w.assign_add(tf.reduce_sum(y))
        return round(float(tf.reduce_sum(y)), 4) if i % 3 == 0 else None

    plain, co, terra = both(body, two_variables, n=10, mode=mode)
    assert co == plain
    assert_coexecuted(terra, last=8)


def _helper(v, w):
    h = tf.reduce_sum(v * 3.0)  # handed over at once; its frame dies after the read
    w.assign_add(h)
    v.assign_add([1.0, 1.0, 1.0])
    return float(h)


def test_fetch_inside_a_helper_whose_locals_die():
    plain, co, terra = both(lambda i, v, w: _helper(v, w), two_variables)
    assert co == plain
    assert_coexecuted(terra, last=6)


def test_carried_value_fetched_in_some_iterations():
    def run(loop):
        v, h, out = tf.Variable([1.0, 2.0]), tf.zeros(2), []
        for i in loop(range(10)):
            h = h * 0.5 + v
            v.assign_add(h * 0.1)
            if i in (1, 4, 5, 8):
                out.append(h.numpy().tolist())
        return out, v.numpy().tolist(), h.numpy().tolist()

    plain = run(lambda it: it)
    with Terra() as terra:
        co = run(terra.loop)
    assert co == plain
    assert_coexecuted(terra, last=8)


def test_data_dependent_python_loop_on_a_prefetched_value():
    def body(i, v, w):
        x, trips = tf.reduce_sum(v) * 0.1, 0
        while float(x) < 4.0 + i % 3:
            x = x * 1.5
            w.assign_add(x)
            trips += 1
        v.assign(v * 1.1)
        return trips, round(float(w), 4)

    plain, co, terra = both(body, two_variables, n=10)
    assert co == plain
    assert_coexecuted(terra, last=8)
    # each co-executed iteration ran the while loop for as many trips as eager did
    assert ran_at(terra, terra.seen, "x = x * 1.5", "Mul") == {
        i: trips for i, (trips, _) in enumerate(plain[0]) if i >= 2}


def test_lazy_with_what_coexec_learned_still_hands_over_nothing_early():
    submitted = []

    def run(terra):
        v, w = two_variables()
        out = []
        for _ in terra.loop(range(6)):
            y = tf.reduce_sum(v * 2.0)
            w.assign_add(y)
            if type(y) is Placeholder:
                submitted.append(y.item is not None)
            out.append(float(y))
        return out, float(w)

    with Terra(mode="coexec") as first:
        expected = run(first)
    assert first.learned.index.fetched_nodes
    assert_coexecuted(first, last=4)
    submitted.clear()
    with Terra(mode="lazy", learned=first.learned) as terra:
        assert run(terra) == expected
    assert submitted and not any(submitted)
    # its variables are new: their first read is not the call learned, the rest co-executes
    assert_fell_back(terra, {0: "a different variable"})
    assert_coexecuted(terra, last=5)


# -- leaving the loop right after an early hand-over ----------------------------------------


def test_break_right_after_a_fetch():
    def run(loop):
        v = tf.Variable(0.0)
        for _ in loop(range(10)):
            s = v * 2.0
            v.assign_add(1.0)
            if float(s) > 10:
                break
            v.assign_add(0.5)
        return float(v)

    plain = run(lambda it: it)
    with Terra() as terra:
        co = run(terra.loop)
    assert co == plain and terra.stats[-1].ended == "stopped"
    assert_coexecuted(terra, last=3)  # the break, in iteration 4, co-executed
    assert not graph_threads()


def test_interrupt_right_after_an_early_hand_over(monkeypatch):
    """Ctrl-C arriving while a prefetch flush submits is raised once the op is answered: the op
    and everything before it take effect, nothing after it (as an interrupt after that op)."""

    def run(loop, interrupt_at=None):
        v, w, out = tf.Variable(0.0), tf.Variable(0.0), []
        try:
            for i in loop(range(10)):
                w.assign_add(1.0)
                s = v * 2.0  # read in every iteration: handed over when issued
                if i == interrupt_at:
                    raise KeyboardInterrupt
                v.assign_add(1.0)
                out.append(float(s))
        except KeyboardInterrupt:
            out.append("interrupted")
        return out, float(v), float(w)

    plain = run(lambda it: it, interrupt_at=5)
    submit, fired = runners.GraphRunner.submit, []

    def submit_then_interrupt(self, item):
        op_types = [e.op_type for e in item.entries]  # a segment run here releases them
        submit(self, item)
        if item.iteration == 5 and not fired:
            fired.append(op_types)
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(runners.GraphRunner, "submit", submit_then_interrupt)
    with Terra() as terra:
        co = run(terra.loop)
    assert fired and fired[0][-1] == "Mul"  # raised inside the early flush of s
    assert co == plain and terra.stats[-1].ended == "stopped"
    assert_coexecuted(terra, last=4)  # the interrupted iteration 5 co-executed
    assert not graph_threads()


# -- reads no longer wait for every earlier op ----------------------------------------------


def test_reads_and_writes_of_the_same_variables_interleaved_in_one_segment():
    def setup():
        return tf.Variable(tf.ones((32, 32))), tf.Variable(tf.fill((32, 32), 0.5))

    def body(i, v, w):
        reads = []
        for k in range(4):
            v.assign(tf.matmul(v, w) * 0.01 + 1.0)
            reads.append(v.read_value())  # ReadVariableOp after a write
            reads.append(tf.gather(w, [k]))  # ResourceGather before a write
            w.assign_add(tf.ones((32, 32)) * 0.001)
            reads.append(tf.reduce_sum(w))
            w.scatter_add(tf.IndexedSlices(tf.ones((1, 32)), [k]))
        return [round(float(tf.reduce_sum(r)), 3) for r in reads]

    plain, co, terra = both(body, setup, n=5)
    assert co == plain
    assert_coexecuted(terra, last=3)


def test_read_before_write_fetched_after_later_segments_ran():
    def body(i, v, w):
        r = v.read_value()  # must see v before the assign below, however late it is read
        g = tf.gather(v, [0, 1])
        v.assign(v * 2.0 + 1.0)
        w.assign_add(tf.reduce_sum(v))
        if i % 2:
            return None
        return r.numpy().tolist(), g.numpy().tolist(), float(w)

    plain, co, terra = both(body, two_variables)
    assert co == plain
    assert_coexecuted(terra, last=6)
