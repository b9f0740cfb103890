"""Ctrl-C while a ``Terra`` sets itself up: nothing is left behind and the next loop works.

The timer-driven runs (test_timer_interrupts.py) once left a ``terra-graph-runner`` thread and the
capture hooks installed for good: the interrupt had landed in ``Terra.__enter__`` after the
GraphRunner's thread started, and ``__exit__`` never runs for a ``with`` whose ``__enter__``
raised. Here the Ctrl-C is made to land at one such point, deterministically: where the engine
installs the capture hooks.
"""

import signal
import threading

import pytest
import tensorflow as tf

from terra_nb import Terra, capture
from terra_nb.capture import hooks


def graph_threads():
    return [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]


def test_ctrl_c_while_the_engine_is_set_up_leaves_nothing_behind(monkeypatch):
    """A user pressing Ctrl-C just as the loop starts gets a KeyboardInterrupt and nothing
    else: no thread, no hooks, the usual SIGINT handler, and the next loop co-executes."""

    def ctrl_c():
        raise KeyboardInterrupt

    installs = hooks._installs  # an earlier cut-short loop's live placeholder may hold some
    with monkeypatch.context() as patched:
        patched.setattr(capture, "hold_placeholders", ctrl_c)
        with pytest.raises(KeyboardInterrupt), Terra():
            pass
    assert not graph_threads()
    assert hooks._installs == installs
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    v = tf.Variable(1.0)
    with Terra() as terra:
        for _ in terra.loop(range(4)):
            v.assign_add(1.0)
    assert [s.phase for s in terra.stats][-2:] == ["coexec", "coexec"]
    assert float(v) == 5.0 and not graph_threads()


def test_a_ctrl_c_that_lands_in_a_finaliser_still_stops_the_loop():
    """Python only reports a KeyboardInterrupt raised inside ``__del__``; a real Ctrl-C landing
    there (here: raised there) must still stop a ``while True`` loop at its next safe point."""

    class ObjectWhoseFinaliserIsInterrupted:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    v = tf.Variable(0.0)
    iterations = 0
    with pytest.raises(KeyboardInterrupt), Terra() as terra:
        while True:
            with terra.step():
                iterations += 1
                v.assign_add(1.0)
                if iterations == 5:
                    ObjectWhoseFinaliserIsInterrupted()  # dropped at once: __del__ runs
                assert iterations < 50, "the Ctrl-C was lost"
    assert iterations in (5, 6)
    assert not graph_threads()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_left_by_another_loop_does_not_hold_the_ctrl_c_back():
    """Another loop's deferring handler, left installed mid-step (its loop cut short), must not
    swallow the Ctrl-C of the loop running now."""
    from terra_nb.coexec.interrupts import DeferredInterrupts

    stale = DeferredInterrupts()
    stale.install()
    stale.enter()  # never left
    try:
        iterations = 0
        with pytest.raises(KeyboardInterrupt), Terra() as terra:
            while True:
                with terra.step():
                    iterations += 1
                    tf.constant(1.0) + 1.0
                    if iterations == 5:
                        signal.raise_signal(signal.SIGINT)
                    assert iterations < 50, "the Ctrl-C was lost"
        assert iterations == 5
    finally:
        stale.uninstall()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
