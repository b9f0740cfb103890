"""The fit benchmark runs each model in its three modes and says whether the co-executed fit
equals the eager one (tiny step counts; no time is asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[2]


def test_fit_benchmark_measures_every_mode_and_checks_equality():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "benchmarks/fit_benchmark.py", "--only", "mlp", "--warmup", "3",
         "--steps", "4", "--repeats", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("mlp "))
    cells = row.split()
    assert len(cells) == 1 + 3 + 2 + 3 + 2, row  # rates, ratios, whole times, share, equal
    assert cells[-1] == "True", row  # the co-executed fit's weights equal the eager fit's
