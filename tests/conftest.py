import os
import signal
import sys
import threading

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# A process started in the background by a non-interactive shell (``cmd &``, nohup) ignores
# SIGINT, and Python then leaves it ignored: Ctrl-C would do nothing, so every interrupt test
# would fail. The tests run with Python's usual handler, however pytest was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _no_handler_left_behind():
    """A test leaves the process's SIGINT handler and unraisable hook as it found them: a
    Terra's deferring handler left installed would hold every later Ctrl-C back."""
    main = threading.current_thread() is threading.main_thread()
    before = (signal.getsignal(signal.SIGINT), sys.unraisablehook) if main else None
    yield
    if main:
        after = (signal.getsignal(signal.SIGINT), sys.unraisablehook)
        assert after == before, f"SIGINT handler / unraisable hook left changed: {after}"


@pytest.fixture(autouse=True)
def _tape_gradients_formed_only_where_asked(monkeypatch):
    """A tape's G forms once its formation pays (``regions/tapes.py``), judged from measured
    times: in a short loop of unknown length a busy machine can make it due near the end, and
    its fallback would fail a test's what-ran check at random. Here it is never due; the tape
    tests set its cost themselves (``test_tape_regions.py``, ``test_tape_rental.py``)."""
    from terra_nb.regions import tapes

    monkeypatch.setattr(tapes, "FORM_BASE_S", 1e6)
