"""A Ctrl-C while a Terra opens (after its engine and hooks are up), or while an iteration begins,
closes what it opened: no GraphRunner thread, capture hook or SIGINT handler is left behind (the
timer-interrupt test met one landing in the heap freeze, at run 112 of 200, and one in the hooks'
install, at run 56)."""

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
    assert not [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]
    assert signal.getsignal(signal.SIGINT) is before_handler
    assert heap._open == 0
    monkeypatch.setattr(heap, "freeze", real_freeze)
    with Terra() as terra:  # the thread can open a Terra again
        for _ in terra.loop(range(3)):
            tf.constant(1.0) + 1.0


def test_a_ctrl_c_while_an_iteration_installs_the_hooks_leaves_none(monkeypatch):
    """The timer-interrupt test met a Ctrl-C just after the hooks' install counted one more
    user, before the iteration held it (run 56 of 200): the hooks stayed installed."""
    from terra_nb.capture import hooks

    before_handler, installs = signal.getsignal(signal.SIGINT), hooks._installs
    real_install, armed = hooks._install, [False]

    def install_then_ctrl_c():
        real_install()
        if armed[0]:
            armed[0] = False
            signal.raise_signal(signal.SIGINT)  # handled at the next instruction

    monkeypatch.setattr(hooks, "_install", install_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt), Terra() as terra:
        armed[0] = True
        for _ in terra.loop(range(3)):
            tf.constant(1.0) + 1.0
    # as many users as before (values an earlier test keeps alive may hold the hooks)
    assert not armed[0] and hooks._installs == installs
    assert not [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]
    assert signal.getsignal(signal.SIGINT) is before_handler
