"""A Ctrl-C while a Terra opens (after its engine and hooks are up) closes what it opened: no
GraphRunner thread, capture hook or SIGINT handler is left behind (the timer-interrupt test met
one landing in the heap freeze, at run 112 of 200)."""

import signal
import threading

import pytest
import tensorflow as tf

from terra_nb import Terra, heap


def test_a_ctrl_c_while_opening_leaves_nothing_open(monkeypatch):
    before_handler = signal.getsignal(signal.SIGINT)
    real_freeze = heap.freeze

    def freeze_then_ctrl_c():
        real_freeze()
        raise KeyboardInterrupt  # as a Ctrl-C landing just after the freeze

    monkeypatch.setattr(heap, "freeze", freeze_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt), Terra():
        pass
    assert not [t for t in threading.enumerate() if t.name == "terra-graph-runner"]
    assert signal.getsignal(signal.SIGINT) is before_handler
    assert heap._open == 0
    monkeypatch.setattr(heap, "freeze", real_freeze)
    with Terra() as terra:  # the thread can open a Terra again
        for _ in terra.loop(range(3)):
            tf.constant(1.0) + 1.0
