"""A deadline for a test's loop: a deadlock fails the test instead of hanging it."""

import threading

import pytest


def in_thread(fn, timeout: float = 180):
    """Run ``fn()`` in a daemon thread and return its result (or raise its error); fail the test
    if it does not finish within ``timeout`` seconds."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            box["error"] = error

    thread = threading.Thread(target=target, name="watched-run", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"deadlock: the run did not finish within {timeout}s")
    if "error" in box:
        raise box["error"]
    return box["value"]
