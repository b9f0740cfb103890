"""TensorFlow imported without its C++ start-up log.

Importing TensorFlow 2.21 writes "All log messages before absl::InitializeLog() is called..." and
the oneDNN note to the process's stderr from C++, before ``TF_CPP_MIN_LOG_LEVEL`` is read: in a
notebook, a pink box under the first cell. ``%load_ext terra_nb`` imports TensorFlow (which a
``%%terra`` loop needs anyway) and its own modules inside ``start_up_quietly()``: file descriptor
2 points at ``/dev/null`` for those imports only. An import that fails still raises as usual.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def start_up_quietly() -> Iterator[None]:
    """Inside: what C++ writes to file descriptor 2 is dropped (nothing changes when TensorFlow
    is imported already: its start-up log is behind it)."""
    if "tensorflow" in sys.modules:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 to quiet
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                import tensorflow  # noqa: F401

                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
