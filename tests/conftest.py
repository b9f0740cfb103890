import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402


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
