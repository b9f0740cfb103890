"""Why an iteration did not co-execute (``terra_nb/iterations.py``, issue 40 item 5): the reason
composed from the engine's result, runs of one reason, and ``explain()``'s text, which never
says only "no fallbacks" for a loop that traced."""

from types import SimpleNamespace

from terra_nb.iterations import IterationStats, counts_by_kind, traced_runs, why_of
from terra_nb.regions.summary import Explained, RegionSummary


def _stats(phases_and_why):
    return [IterationStats(i, phase, i, i + 0.5, 0.5, 0.0, 0.0, 0.0, 1, 0, 0, True,
                           "completed", why=why) for i, (phase, why) in enumerate(phases_and_why)]


def _result(phase="tracing", fallback=None, not_ready=None, why=""):
    return SimpleNamespace(phase=phase, fallback=fallback, not_ready=not_ready, why=why)


def test_the_reason_names_what_made_the_iteration_trace():
    fell = _result("fallback", fallback=("new op or new program location", "AssignVariableOp",
                                         "In [2]:10  lr.assign(0.02)"))
    assert why_of(fell, None) == ("fallback: new op or new program location at "
                                  "AssignVariableOp (In [2]:10  lr.assign(0.02))")
    forming = why_of(_result(), "Sequential.__call__ (traced on its way to a region)")
    assert forming == ("regions forming: run for real for Sequential.__call__ (traced on its way "
                       "to a region)")
    assert why_of(_result("coexec"), "x") == ""  # co-executed: nothing to say
    assert why_of(_result(why="learning the loop: its first iteration"), None).startswith(
        "learning the loop")


def test_runs_of_one_reason_and_counts_by_kind():
    stats = _stats([("tracing", "learning the loop: a"), ("tracing", "learning the loop: a"),
                    ("tracing", "regions forming: x"), ("coexec", ""), ("fallback", "fallback: y"),
                    ("coexec", ""), ("tracing", "regions forming: x")])
    runs = traced_runs(stats, skip=frozenset({4}))
    assert [str(r) for r in runs] == [
        "iterations 0–1: tracing, learning the loop: a", "iteration 2: tracing, regions forming: x",
        "iteration 6: tracing, regions forming: x"]
    assert counts_by_kind(stats) == {"learning the loop": 2, "regions forming": 2, "fallback": 1}


def test_explain_never_says_only_no_fallbacks_for_a_loop_that_traced():
    regions = RegionSummary(enabled=False)
    stats = _stats([("tracing", "learning the loop: a"), ("coexec", "")])
    text = str(Explained((), regions, traced_runs(stats)))
    assert text == "no fallbacks; did not co-execute:\n  iteration 0: tracing, learning the loop: a"
    assert str(Explained((), regions, ())) == "no fallbacks"  # every iteration co-executed
