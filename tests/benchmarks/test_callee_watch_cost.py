"""The callee watch's cost benchmark runs, and the watch it times sees Keras's own model call
as nothing to refuse (no time is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import callee_watch_cost  # noqa: E402


def test_the_mlp_call_is_timed_with_and_without_the_watch():
    plain, watched = callee_watch_cost.measure("mlp", 2)
    assert plain > 0 and watched > 0
