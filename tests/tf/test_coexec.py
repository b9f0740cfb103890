"""Co-execution equals eager: every corpus program run plainly, under coexec and under lazy."""

import contextlib
import io
import math
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from programs import CORPUS
from what_ran import assert_coexecuted

from terra_nb import Terra

# coexec compiles a segment once its runs op by op have cost its compile estimate
# (compile_policy.py); the two extremes check each way of running segments on its own.
VARIANTS = {
    "coexec": {"mode": "coexec"},
    "lazy": {"mode": "lazy"},
    "coexec-compile-at-once": {"mode": "coexec", "compile_after": 1},
    "coexec-never-compile": {"mode": "coexec", "compile_after": 10**9},
}


def run(program, mode):
    keras.utils.set_random_seed(0)
    out = io.StringIO()
    terra = None
    with contextlib.redirect_stdout(out):
        if mode == "plain":
            values, variables = program(lambda it: it)
        else:
            with Terra(**VARIANTS[mode]) as terra:
                values, variables = program(terra.loop)
    return values, variables, out.getvalue(), terra


def assert_same_values(a, b):
    if isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_same_values(x, y)
    else:
        assert a == b


def graph_threads():
    return [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]


@pytest.mark.parametrize("mode", list(VARIANTS))
@pytest.mark.parametrize("program", CORPUS, ids=lambda p: p.__name__)
def test_corpus_equals_eager(program, mode):
    values, variables, printed, _ = run(program, "plain")
    values2, variables2, printed2, terra = run(program, mode)
    assert_same_values(values2, values)
    assert printed2 == printed
    assert len(variables2) == len(variables)
    for a, b in zip(variables2, variables):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not graph_threads()
    phases = {s.phase for s in terra.stats}
    assert "coexec" in phases, [s.phase for s in terra.stats]  # it did co-execute
    assert_coexecuted(terra, at_least=0.5, plan="segments")  # and most iterations did
    if mode == "coexec-never-compile":
        assert terra.compiled_segments == 0
    elif mode == "coexec-compile-at-once":
        assert terra.compiled_segments == len(terra.programs) > 0 and not terra.runs_op_by_op


def test_late_path_falls_back_and_is_explained():
    from programs import periodic_and_late_branch

    *_, terra = run(periodic_and_late_branch, "coexec")
    phases = [s.phase for s in terra.stats]
    assert phases[10] == "fallback"
    (first, *_) = terra.explain()
    assert first.iteration == 10
    assert "programs.py" in first.location and "extra.assign" in first.location
    assert "coexec" in phases[11:]  # back to co-execution after the new path was learned


def test_steady_loop_co_executes_without_fallback():
    from programs import numpy_on_loss

    *_, terra = run(numpy_on_loss, "coexec")
    assert not terra.explain()
    assert [s.phase for s in terra.stats][-4:] == ["coexec"] * 4
    assert terra.programs and all(p.ops for p in terra.programs)


def test_each_value_read_is_one_fetch_in_every_phase():
    v = tf.Variable(1.0)
    with Terra(mode="coexec") as terra:
        for _ in terra.loop(range(4)):
            float(v * 2.0)
    assert [(s.phase, s.fetches) for s in terra.stats] == [
        ("tracing", 1), ("tracing", 1), ("coexec", 1), ("coexec", 1)
    ]
    moments = [s.iteration for s in terra.spans if s.kind == "fetch"]
    assert moments == [2, 3]  # each co-executed read is a fetch moment on the timeline


def test_xla_compiled_segments_equal_eager():
    from programs import numpy_on_loss

    keras.utils.set_random_seed(0)
    values, variables = numpy_on_loss(lambda it: it)
    keras.utils.set_random_seed(0)
    with contextlib.redirect_stdout(io.StringIO()), Terra(mode="coexec", xla=True) as terra:
        values2, variables2 = numpy_on_loss(terra.loop)
    assert "coexec" in [s.phase for s in terra.stats]
    assert_coexecuted(terra, last=2)
    assert_same_values(values2, values)
    for a, b in zip(variables2, variables):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
