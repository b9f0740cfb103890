"""A paper program under co-execution with regions equals eager (found by the paper harness,
whose Terra modes use regions by default): SDPoint keeps its model call op by op (it reads a
shape) and forms an SGD region; the loop keeps tracing while regions form, right after
co-executed iterations."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from terra_nb import Terra  # noqa: E402

PROGRAMS = Path(__file__).resolve().parents[2] / "benchmarks" / "programs"


def paper_programs():
    """``benchmarks/programs`` as the package ``paper_programs``: imported as ``programs`` it
    would shadow ``tests/tf/programs.py``, the corpus the TF tests import by that name."""
    if "paper_programs" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "paper_programs", PROGRAMS / "__init__.py",
            submodule_search_locations=[str(PROGRAMS)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["paper_programs"] = module
        spec.loader.exec_module(module)
    return sys.modules["paper_programs"], importlib.import_module("paper_programs.common")


def run(name: str, n: int, options: dict | None):
    programs, common = paper_programs()
    program, step, weights = programs.load(name), common.step, common.weights
    state = program.make(0)
    if options is None:
        for i in range(n):
            step(program, state, i)
        return weights(state), None
    with Terra(**options) as terra:
        for i in terra.loop(range(n)):
            step(program, state, i)
    return weights(state), terra


def test_sdpoint_with_regions_equals_eager():
    expected, _ = run("sdpoint", 10, None)
    got, terra = run("sdpoint", 10, {"regions": True})
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(expected, got))
    # compiled conv + batch-norm segments differ from eager by float rounding only
    assert worst < 1e-6, worst
    phases = [s.phase for s in terra.stats]
    assert "coexec" in phases and phases.index("coexec") < len(phases) - 1, phases
    assert any(r.name == "SGD.apply_gradients" and r.hits for r in terra.regions.rows), \
        str(terra.regions)
