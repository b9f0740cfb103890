"""Run a loop plainly (eager) and under terra-nb, compare, and assert what ran.

Each run goes in a worker thread with a timeout (a deadlock fails the test instead of hanging).
``compare`` checks Python values, printed text and variables against eager, that no GraphRunner
thread is left, and then what ran (``what_ran.assert_coexecuted``): by default that at least half
of the iterations co-executed, in the plan asked for, so a silent fallback fails the test.
"""

import contextlib
import io
import math
import warnings

import keras
import numpy as np
from test_coexec import assert_same_values, graph_threads
from watchdog import in_thread
from what_ran import assert_coexecuted, assert_stayed_in_tracing

from terra_nb import Terra

SEGMENTS = {"mode": "coexec"}
WHOLE = {"mode": "coexec", "program": "whole"}
MODES = {"segments": SEGMENTS, "whole": WHOLE}
TIMEOUT = 180  # seconds per run: longer means a deadlock


def _nan_safe(x):
    """NaN compares unequal to itself: make it a marker so values can be compared."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, (list, tuple)):
        return type(x)(_nan_safe(y) for y in x)
    return x


def run(program, options, seed=0):
    """``program(loop)`` plainly (``options`` None) or under ``Terra(**options)``: its values,
    variables, printed text and the Terra (with the warnings it gave in ``caught_warnings``)."""

    def fn():
        keras.utils.set_random_seed(seed)
        out = io.StringIO()
        terra = None
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            if options is None:
                values, variables = program(lambda it: it)
            else:
                with Terra(**options) as terra:
                    values, variables = program(terra.loop)
        if terra is not None:
            terra.caught_warnings = [str(w.message) for w in caught]
        return _nan_safe(values), variables, out.getvalue(), terra

    return in_thread(fn, TIMEOUT)


def assert_same_variables(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-5, atol=1e-6)


def compare(program, options=None, seed=0, tracing_only=False, **ran):
    """Run ``program`` eagerly and under ``options`` (default: the whole program); assert equal
    and ``assert_coexecuted(terra, **ran)`` (``tracing_only``: that it never co-executed,
    legitimately); return the Terra."""
    values, variables, printed, _ = run(program, None, seed)
    values2, variables2, printed2, terra = run(program, options or WHOLE, seed)
    assert_same_values(values2, values)
    assert printed2 == printed
    assert_same_variables(variables, variables2)
    assert not graph_threads()
    if tracing_only:
        assert_stayed_in_tracing(terra)
    else:
        assert_coexecuted(terra, **ran)
    return terra


def cases(programs):
    """(program, mode) parameters: each program in segments and in the whole program."""
    import pytest

    return [pytest.param(program, mode, id=f"{program.__name__}-{mode}")
            for program in programs for mode in MODES]
